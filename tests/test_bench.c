/*
 * test_bench.c - tests of kvbench: its shared helpers (bench/options.c,
 * measure.c, limit.c, report.c, system.c: percentile maths, size and list
 * parsing, token ids, tables, threads, the memcpy probe, temporary
 * directories), the shape of the JSON results and command-line handling of
 * the subcommands, and the kvbench program's command-line contract (cli_*:
 * JSON alone on stdout, paths checked first, one-line errors, stop
 * requests, fio stopped with kvbench) and the manual pages' headers.
 * No timed assertions: speeds are only checked to be present and positive.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bench.h"
#include "ram_cmd.h"
#include "util.h"

/* --- percentiles ------------------------------------------------------------- */

static void percentile_interpolates_between_closest_ranks(void **state)
{
	double v[] = { 4, 1, 3, 2 }; /* unsorted on purpose */

	(void)state;
	assert_true(fabs(bench_percentile(v, 4, 50) - 2.5) < 1e-12);
	/* v is sorted now */
	assert_true(v[0] == 1 && v[3] == 4);
	assert_true(fabs(bench_percentile_sorted(v, 4, 0) - 1) < 1e-12);
	assert_true(fabs(bench_percentile_sorted(v, 4, 100) - 4) < 1e-12);
	assert_true(fabs(bench_percentile_sorted(v, 4, 25) - 1.75) < 1e-12);
	assert_true(fabs(bench_percentile_sorted(v, 4, 90) - 3.7) < 1e-12);
}

static void percentile_clamps_p_and_handles_tiny_samples(void **state)
{
	double one[] = { 7 }, two[] = { 1, 3 };

	(void)state;
	assert_true(bench_percentile_sorted(one, 1, 99) == 7);
	assert_true(bench_percentile_sorted(two, 2, -5) == 1);
	assert_true(bench_percentile_sorted(two, 2, 250) == 3);
	assert_true(isnan(bench_percentile_sorted(two, 0, 50)));
	assert_true(isnan(bench_percentile_sorted(two, 2, NAN)));
}

static void median_of_odd_and_even_samples(void **state)
{
	double odd[] = { 9, 1, 5 }, even[] = { 10, 2, 8, 4 };

	(void)state;
	assert_true(bench_median(odd, 3) == 5);
	assert_true(bench_median(even, 4) == 6);
	assert_true(isnan(bench_median(odd, 0)));
}

static void summarize_reports_min_max_mean_and_percentiles(void **state)
{
	double v[101];
	struct bench_summary s;
	int i;

	(void)state;
	for (i = 0; i <= 100; i++)
		v[i] = 100 - i; /* 100..0 */
	bench_summarize(v, 101, &s);
	assert_int_equal(s.n, 101);
	assert_true(s.min == 0 && s.max == 100);
	assert_true(fabs(s.mean - 50) < 1e-9);
	assert_true(s.median == 50);
	assert_true(fabs(s.p90 - 90) < 1e-9);
	assert_true(fabs(s.p99 - 99) < 1e-9);

	bench_summarize(v, 0, &s);
	assert_int_equal(s.n, 0);
	assert_true(isnan(s.min) && isnan(s.median) && isnan(s.p99));
}

static void samples_grow_and_append(void **state)
{
	struct bench_samples a = { 0 }, b = { 0 };
	int i;

	(void)state;
	for (i = 0; i < 1000; i++)
		assert_int_equal(bench_samples_add(&a, i), 0);
	assert_int_equal(bench_samples_add(&b, -1), 0);
	assert_int_equal(bench_samples_append(&b, &a), 0);
	assert_int_equal(b.n, 1001);
	assert_true(b.v[0] == -1 && b.v[1000] == 999);
	bench_samples_clear(&b);
	assert_int_equal(b.n, 0);
	bench_samples_free(&a);
	bench_samples_free(&b);
	assert_null(a.v);
}

/* --- sizes and lists ------------------------------------------------------------ */

/* kvbench's sizes are the library's (lib/config.c): the same grammar and
 * the same error text. */

static void parse_size_accepts_units_and_fractions(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} ok[] = {
		{ "0", 0 },
		{ "100", 100 },
		{ "100B", 100 },
		{ "64KiB", 64 << 10 },
		{ "64k", 64 << 10 },
		{ "64KB", 64 << 10 },
		{ "1MiB", 1 << 20 },
		{ "4M", 4 << 20 },
		{ "2 GiB", 2ull << 30 },
		{ "1.5GiB", 3ull << 29 },
		{ "1t", 1ull << 40 },
		{ "0.5KiB", 512 },
		{ "18446744073709551615", UINT64_MAX },
	};
	uint64_t v;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 12345;
		assert_int_equal(bench_parse_size(ok[i].s, &v), 0);
		assert_true(v == ok[i].v);
	}
}

static void parse_size_rejects_bad_input(void **state)
{
	static const char *const bad[] = {
		"", "-1", "+1", "abc", "KiB", "1XB", "1.5.5", " 1", ".25k",
		"1KiBs", "1e3", ".", "1,5", "1.5", "10XB",
	};
	uint64_t v = 7;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(bench_parse_size(bad[i], &v), -EINVAL);
	assert_int_equal(bench_parse_size(NULL, &v), -EINVAL);
	assert_int_equal(bench_parse_size("18446744073709551616", &v), -EINVAL);
	assert_int_equal(bench_parse_size("16777216TiB", &v), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "too large"));
	assert_int_equal(bench_parse_size("1.5", &v), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "a fraction needs a unit"));
	assert_int_equal(bench_parse_size("10XB", &v), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "unknown unit"));
	assert_int_equal(v, 7); /* untouched on failure */
}

static void parse_size_list_splits_on_commas(void **state)
{
	uint64_t v[4];
	size_t n = 0;

	(void)state;
	assert_int_equal(bench_parse_size_list("64KiB,1MiB,4MiB", v, 4, &n), 0);
	assert_int_equal(n, 3);
	assert_true(v[0] == 65536 && v[1] == 1048576 && v[2] == 4194304);
	assert_int_equal(bench_parse_size_list("1,2,3,4,5", v, 4, &n), -E2BIG);
	assert_int_equal(bench_parse_size_list("", v, 4, &n), -EINVAL);
	assert_int_equal(bench_parse_size_list("1,,2", v, 4, &n), -EINVAL);
	assert_int_equal(bench_parse_size_list("1,", v, 4, &n), -EINVAL);
	assert_int_equal(bench_parse_size_list("0", v, 4, &n), -ERANGE);
	assert_int_equal(bench_parse_size_list("64KiB,1.5", v, 4, &n), -EINVAL);
	assert_int_equal(bench_parse_size_list("1MiB,zz", v, 4, &n), -EINVAL);
	/* what tells an empty item from a bad one, for the message */
	assert_true(bench_list_has_empty(""));
	assert_true(bench_list_has_empty(","));
	assert_true(bench_list_has_empty("1MiB,"));
	assert_true(bench_list_has_empty(",1MiB"));
	assert_true(bench_list_has_empty("1,,2"));
	assert_false(bench_list_has_empty("1MiB"));
	assert_false(bench_list_has_empty("64KiB,1MiB"));
}

static void parse_uint_checks_range_and_syntax(void **state)
{
	unsigned long v = 0, l[3];
	size_t n;

	(void)state;
	assert_int_equal(bench_parse_uint("5", 1, 10, &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(bench_parse_uint("0", 1, 10, &v), -ERANGE);
	assert_int_equal(bench_parse_uint("11", 1, 10, &v), -ERANGE);
	assert_int_equal(bench_parse_uint("99999999999999999999999", 1, 10, &v), -ERANGE);
	assert_int_equal(bench_parse_uint("-1", 0, 10, &v), -EINVAL);
	assert_int_equal(bench_parse_uint("3x", 0, 10, &v), -EINVAL);
	assert_int_equal(bench_parse_uint("", 0, 10, &v), -EINVAL);
	assert_int_equal(bench_parse_uint(NULL, 0, 10, &v), -EINVAL);
	assert_int_equal(bench_parse_uint_list("1,2,4", 1, 8, l, 3, &n), 0);
	assert_int_equal(n, 3);
	assert_true(l[0] == 1 && l[1] == 2 && l[2] == 4);
	assert_int_equal(bench_parse_uint_list("1,9", 1, 8, l, 3, &n), -ERANGE);
	assert_int_equal(bench_parse_uint_list("1,2,3,4", 1, 8, l, 3, &n), -E2BIG);
	assert_int_equal(bench_parse_uint_list("1,a", 1, 8, l, 3, &n), -EINVAL);
}

static void fmt_size_uses_the_largest_exact_unit(void **state)
{
	char b[32];

	(void)state;
	assert_string_equal(bench_fmt_size(65536, b, sizeof(b)), "64KiB");
	assert_string_equal(bench_fmt_size(1 << 20, b, sizeof(b)), "1MiB");
	assert_string_equal(bench_fmt_size(1536 << 10, b, sizeof(b)), "1536KiB");
	assert_string_equal(bench_fmt_size(100, b, sizeof(b)), "100B");
	assert_string_equal(bench_fmt_size(0, b, sizeof(b)), "0B");
	assert_string_equal(bench_fmt_size(1ull << 50, b, sizeof(b)), "1024TiB");
}

/* --- token ids ------------------------------------------------------------------ */

static void tokens_stay_below_the_vocabulary(void **state)
{
	uint32_t t[4096], u[4096];
	size_t i;

	(void)state;
	bench_tokens(t, 4096, 1000, 9);
	bench_tokens(u, 4096, 1000, 9);
	assert_memory_equal(t, u, sizeof(t)); /* deterministic */
	for (i = 0; i < 4096; i++)
		assert_true(t[i] < 1000);
}

/* --- tables --------------------------------------------------------------------- */

static void table_aligns_columns(void **state)
{
	static const char *const hdr[] = { "op", "size", "GB/s" };
	struct bench_table *t = bench_table_new(3, hdr);
	char *out = NULL, *line, *save;
	size_t len = 0, width = 0;
	FILE *f = open_memstream(&out, &len);
	int lines = 0;

	(void)state;
	assert_non_null(t);
	assert_non_null(f);
	bench_table_cell(t, "get");
	bench_table_cell(t, "%s", "64KiB");
	bench_table_cell(t, "%.2f", 9.5);
	bench_table_end_row(t);
	bench_table_cell(t, "get_batch");
	bench_table_cell(t, "4MiB");
	bench_table_cell(t, "%.2f", 12.25);
	bench_table_end_row(t);
	bench_table_print(t, f, 2);
	fclose(f);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!width)
			width = strlen(line);
		assert_int_equal(strlen(line), width); /* every line equally wide */
		assert_true(!strncmp(line, "  ", 2)); /* indent */
		lines++;
	}
	assert_int_equal(lines, 4); /* header, rule, two rows */
	free(out);

	/* right-aligned numbers end in the same column */
	f = open_memstream(&out, &len);
	bench_table_print(t, f, 0);
	fclose(f);
	assert_non_null(strstr(out, "get        64KiB   9.50\n"));
	assert_non_null(strstr(out, "get_batch   4MiB  12.25\n"));
	free(out);
	bench_table_free(t);
}

/* --- threads and the memcpy probe ---------------------------------------------- */

struct count_arg {
	int seen[8];
	unsigned nthreads[8]; /* per thread: no shared writes */
};

static void count_thread(unsigned tid, unsigned nthreads, void *arg)
{
	struct count_arg *c = arg;

	c->seen[tid]++;
	c->nthreads[tid] = nthreads;
}

static void parallel_runs_each_thread_once(void **state)
{
	struct count_arg c = { { 0 }, { 0 } };
	uint64_t wall = 0;
	int i;

	(void)state;
	assert_int_equal(bench_parallel(3, 1, count_thread, &c, &wall), 0);
	for (i = 0; i < 3; i++) {
		assert_int_equal(c.seen[i], 1);
		assert_int_equal(c.nthreads[i], 3);
	}
	assert_int_equal(c.seen[3], 0);
	assert_true(wall > 0);
	assert_int_equal(bench_parallel(0, 0, count_thread, &c, NULL), -EINVAL);
	assert_int_equal(bench_parallel(1, 0, NULL, &c, NULL), -EINVAL);
}

static void memcpy_probe_reports_a_rate_and_latencies(void **state)
{
	struct bench_memcpy *m = bench_memcpy_new(4096, 4 * 4096, 2, 2);
	struct bench_samples lat = { 0 };
	double rate = 0;

	(void)state;
	assert_non_null(m);
	assert_int_equal(bench_memcpy_run(m, 10, 2, &rate, &lat), 0);
	assert_true(rate > 0);
	assert_int_equal(lat.n, 20); /* every copy of both threads */
	assert_int_equal(bench_memcpy_run(m, 10, 3, &rate, NULL), -EINVAL);
	assert_int_equal(bench_memcpy_run(m, 10, 0, &rate, NULL), -EINVAL);
	assert_int_equal(bench_memcpy_run(m, 0, 1, &rate, NULL), -EINVAL);
	{
		char from[2 * 4096];

		rate = 0;
		assert_int_equal(bench_memcpy_run_into(m, from, sizeof(from), 5, &rate,
						       NULL), 0);
		assert_true(rate > 0);
		assert_int_equal(bench_memcpy_run_into(m, from, 100, 5, &rate, NULL),
				 -EINVAL);
		assert_int_equal(bench_memcpy_run_into(m, NULL, 4096, 5, &rate, NULL),
				 -EINVAL);
	}
	bench_memcpy_free(m);
	bench_samples_free(&lat);
	errno = 0;
	assert_null(bench_memcpy_new(0, 4096, 1, 1));
	assert_int_equal(errno, EINVAL);
	assert_true(bench_memcpy_limit(4096, 8192, 1, 1, 4, 3) > 0);
}

static void buffer_alloc_is_page_aligned_and_written(void **state)
{
	unsigned char *p = bench_buffer_alloc(10000);

	(void)state;
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % 4096, 0);
	assert_int_equal(p[0], 0x5a);
	assert_int_equal(p[9999], 0x5a);
	free(p);
	assert_null(bench_buffer_alloc(0));
}

/* --- temporary directories ---------------------------------------------------- */

static void tmpdir_is_removed_with_its_tree_but_not_link_targets(void **state)
{
	char dir[256], path[512], outside[512];
	struct stat st;
	FILE *f;

	(void)state;
	assert_int_equal(bench_tmpdir_create(dir, sizeof(dir)), 0);
	assert_true(!strncmp(dir, "/var/tmp/kvbench-", 17) ||
		    !strncmp(dir, "/tmp/kvbench-", 13));
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);

	/* a file that lives outside and a link to it inside */
	snprintf(outside, sizeof(outside), "%s.outside", dir);
	f = fopen(outside, "w");
	assert_non_null(f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/a", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/a/b", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/a/b/file", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("x", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/a/link", dir);
	assert_int_equal(symlink(outside, path), 0);
	snprintf(path, sizeof(path), "%s/dirlink", dir);
	assert_int_equal(symlink("/var/tmp", path), 0);

	assert_int_equal(bench_tmpdir_remove(dir), 0);
	assert_int_equal(stat(dir, &st), -1);
	assert_int_equal(stat(outside, &st), 0); /* the target survives */
	assert_int_equal(stat("/var/tmp", &st), 0);
	unlink(outside);
	assert_int_equal(bench_tmpdir_remove(dir), 0); /* gone already: fine */
	assert_int_equal(bench_tmpdir_remove(NULL), -EINVAL);
}

/* --- JSON ------------------------------------------------------------------------- */

/* A fresh path in a temporary directory, registered for removal at exit. */
static void tmpfile_path(char *buf, size_t cap, const char *name)
{
	char dir[256];

	assert_int_equal(bench_tmpdir_create(dir, sizeof(dir)), 0);
	snprintf(buf, cap, "%s/%s", dir, name);
}

static json_t *load(const char *path)
{
	json_error_t err;
	json_t *doc = json_load_file(path, 0, &err);

	if (!doc)
		fprintf(stderr, "%s: %s (line %d)\n", path, err.text, err.line);
	assert_non_null(doc);
	return doc;
}

static void json_document_has_the_common_shape(void **state)
{
	json_t *doc = bench_json_new("ram"), *back, *m;
	struct bench_summary s = { 3, 1, 3, 2, 2, 2.8, 2.98 };
	char path[512];

	(void)state;
	assert_non_null(doc);
	assert_int_equal(bench_json_config(doc, "reps", json_integer(5)), 0);
	assert_int_equal(bench_json_limit(doc, json_pack("{s:s, s:f}", "name",
							  "memcpy", "value", 1e10)), 0);
	assert_int_equal(bench_json_result(doc, json_pack("{s:s, s:o}", "name", "get",
							   "bytes_per_s",
							   bench_json_reps(&s))), 0);
	assert_int_equal(bench_json_result(doc, json_integer(1)), -EINVAL);
	bench_json_error(doc, "miss on %d threads", 2);
	tmpfile_path(path, sizeof(path), "r.json");
	assert_int_equal(bench_json_write(doc, path), 0);
	json_decref(doc);

	back = load(path);
	assert_string_equal(json_string_value(json_object_get(back, "tool")), "kvbench");
	assert_string_equal(json_string_value(json_object_get(back, "command")), "ram");
	assert_string_equal(json_string_value(json_object_get(back, "library_version")),
			    kvt_version());
	assert_true(json_is_string(json_object_get(back, "started")));
	m = json_object_get(back, "machine");
	assert_true(json_is_integer(json_object_get(m, "cpus")));
	assert_true(json_integer_value(json_object_get(m, "cpus")) >= 1);
	assert_true(json_is_object(json_object_get(back, "config")));
	assert_int_equal(json_integer_value(json_object_get(
				 json_object_get(back, "config"), "reps")), 5);
	assert_int_equal(json_array_size(json_object_get(back, "limits")), 1);
	assert_int_equal(json_array_size(json_object_get(back, "results")), 1);
	json_t *r = json_array_get(json_object_get(back, "results"), 0);
	json_t *reps = json_object_get(r, "bytes_per_s");
	assert_true(json_real_value(json_object_get(reps, "median")) == 2);
	assert_true(json_real_value(json_object_get(reps, "min")) == 1);
	assert_true(json_real_value(json_object_get(reps, "max")) == 3);
	assert_int_equal(json_integer_value(json_object_get(reps, "n")), 3);
	assert_string_equal(json_string_value(json_array_get(
				    json_object_get(back, "errors"), 0)),
			    "miss on 2 threads");
	json_decref(back);
}

/* What the JSON gives as null the tables give as n/a, never "nan". */
static void fmt_real_says_n_a_for_what_was_not_measured(void **state)
{
	char b[32];

	(void)state;
	assert_string_equal(bench_fmt_real(b, sizeof(b), "%.2f GB/s", 1.5), "1.50 GB/s");
	assert_string_equal(bench_fmt_real(b, sizeof(b), "%.2f GB/s", NAN), "n/a");
	assert_string_equal(bench_fmt_real(b, sizeof(b), "%.0f%%", INFINITY), "n/a");
	assert_string_equal(bench_fmt_real(b, sizeof(b), "p50 %.0f us", 0.0), "p50 0 us");
}

static void json_maps_nan_to_null(void **state)
{
	struct bench_summary s;
	json_t *j;

	(void)state;
	bench_summarize(NULL, 0, &s);
	j = bench_json_latency(&s);
	assert_non_null(j);
	assert_true(json_is_null(json_object_get(j, "p50")));
	assert_true(json_is_null(json_object_get(j, "p99")));
	assert_int_equal(json_integer_value(json_object_get(j, "n")), 0);
	json_decref(j);
	j = bench_json_real(INFINITY);
	assert_true(json_is_null(j));
	json_decref(j);
}

static void json_write_reports_an_unwritable_path(void **state)
{
	json_t *doc = bench_json_new("hash");

	(void)state;
	assert_true(bench_json_write(doc, "/nonexistent-kvbench-dir/r.json") < 0);
	assert_int_equal(bench_json_write(doc, ""), -EINVAL);
	assert_int_equal(bench_json_write(NULL, "x"), -EINVAL);
	json_decref(doc);
}

/* A result for a symbolic link replaces the link's target and keeps the
 * link; one for a device or FIFO is written into it, which stays what it
 * was (a rename over it would leave a regular file in its place). */
static void json_write_keeps_links_devices_and_fifos(void **state)
{
	char dir[256], sub[320], link[400], dead[400], target[400], fifo[400], null[400];
	char why[256], buf[8192];
	json_t *doc = bench_json_new("hash"), *back;
	struct stat st;
	ssize_t n;
	int rfd;

	(void)state;
	assert_int_equal(bench_tmpdir_create(dir, sizeof(dir)), 0);
	/* a relative link into another directory: written there, link kept */
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(target, sizeof(target), "%s/r.json", sub);
	assert_int_equal(bench_json_write(doc, target), 0); /* one to replace */
	snprintf(link, sizeof(link), "%s/link.json", dir);
	assert_int_equal(symlink("sub/r.json", link), 0);
	assert_int_equal(bench_output_check(link, why, sizeof(why)), 0);
	json_object_set_new(doc, "marker", json_integer(7));
	assert_int_equal(bench_json_write(doc, link), 0);
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	back = load(target);
	assert_int_equal(json_integer_value(json_object_get(back, "marker")), 7);
	json_decref(back);
	/* a dangling link: its target is created */
	snprintf(dead, sizeof(dead), "%s/dead.json", dir);
	assert_int_equal(symlink("sub/new.json", dead), 0);
	assert_int_equal(bench_json_write(doc, dead), 0);
	assert_int_equal(lstat(dead, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	snprintf(target, sizeof(target), "%s/new.json", sub);
	assert_int_equal(stat(target, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	/* a link to a device: written into the device, both kept */
	snprintf(null, sizeof(null), "%s/null.json", dir);
	assert_int_equal(symlink("/dev/null", null), 0);
	assert_int_equal(bench_output_check(null, why, sizeof(why)), 0);
	assert_int_equal(bench_json_write(doc, null), 0);
	assert_int_equal(lstat(null, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(stat("/dev/null", &st), 0);
	assert_true(S_ISCHR(st.st_mode));
	/* a FIFO with a reader: the document comes through it */
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(bench_output_check(fifo, why, sizeof(why)), 0);
	rfd = open(fifo, O_RDONLY | O_NONBLOCK);
	assert_true(rfd >= 0);
	assert_int_equal(bench_json_write(doc, fifo), 0);
	n = read(rfd, buf, sizeof(buf) - 1);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "\"marker\": 7"));
	close(rfd);
	assert_int_equal(lstat(fifo, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	/* a link to a directory is still a directory */
	snprintf(link, sizeof(link), "%s/dirlink", dir);
	assert_int_equal(symlink("sub", link), 0);
	assert_int_equal(bench_output_check(link, why, sizeof(why)), -EISDIR);
	json_decref(doc);
	assert_int_equal(bench_tmpdir_remove(dir), 0);
}

static void stats_number_follows_dotted_paths(void **state)
{
	json_t *st = json_loads("{\"ram\": {\"hits\": 3, \"frag\": 0.5},"
				" \"tiers\": {\"disk\": {\"hits\": 4}},"
				" \"store\": {\"name\": \"x\"}}", 0, NULL);
	double v = 0;

	(void)state;
	assert_non_null(st);
	assert_int_equal(bench_stats_number(st, "ram.hits", &v), 0);
	assert_true(v == 3);
	assert_int_equal(bench_stats_number(st, "ram.frag", &v), 0);
	assert_true(v == 0.5);
	assert_int_equal(bench_stats_number(st, "disk.hits", &v), 0); /* via tiers */
	assert_true(v == 4);
	assert_int_equal(bench_stats_number(st, "store.name", &v), -ENOENT);
	assert_int_equal(bench_stats_number(st, "ram.nothing", &v), -ENOENT);
	assert_int_equal(bench_stats_number(st, "ram", &v), -ENOENT);
	assert_int_equal(bench_stats_number(NULL, "ram.hits", &v), -ENOENT);
	json_decref(st);
}

/* --- subcommands: command line and JSON results ------------------------------- */

static int run_main(int (*fn)(int, char **), ...)
{
	char *argv[32];
	int argc = 0;
	va_list ap;

	va_start(ap, fn);
	while (argc < 31 && (argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	return fn(argc, argv);
}

static void subcommands_reject_bad_command_lines(void **state)
{
	(void)state;
	assert_int_equal(run_main(bench_hash_main, "hash", "--bogus", NULL), 2);
	assert_int_equal(run_main(bench_hash_main, "hash", "-x", NULL), 2);
	assert_int_equal(run_main(bench_hash_main, "hash", "--json", NULL), 2);
	assert_int_equal(run_main(bench_hash_main, "hash", "--reps", "0", NULL), 2);
	assert_int_equal(run_main(bench_hash_main, "hash", "--block-tokens", "0", NULL), 2);
	assert_int_equal(run_main(bench_hash_main, "hash", "stray", NULL), 2);
	assert_int_equal(run_main(bench_ram_main, "ram", "--sizes", "64KiB,xyz", NULL), 2);
	assert_int_equal(run_main(bench_ram_main, "ram", "--threads", "0", NULL), 2);
	assert_int_equal(run_main(bench_ram_main, "ram", "--shared-prefix", "101", NULL), 2);
	assert_int_equal(run_main(bench_ram_main, "ram", "--shared-prefix", "-1", NULL), 2);
	assert_int_equal(run_main(bench_ram_main, "ram", "--working-set", "3GiB", NULL), 2);
	assert_int_equal(run_main(bench_ram_main, "ram", "--help=1", NULL), 2);
	assert_int_equal(run_main(bench_ram_main, "ram", "--sizes", "1MiB", "--working-set",
				  "16MiB", "--batch", "32", NULL), 2);
	assert_int_equal(run_main(bench_ram_main, "ram", "--no-copy", "--no-lookup", NULL), 2);
	assert_int_equal(run_main(bench_demo_main, "demo", "--ram", "1MiB", NULL), 2);
	assert_int_equal(run_main(bench_demo_main, "demo", "--reps", "x", NULL), 2);
}

static void subcommands_print_help(void **state)
{
	(void)state;
	assert_int_equal(run_main(bench_hash_main, "hash", "--help", NULL), 0);
	assert_int_equal(run_main(bench_ram_main, "ram", "-h", NULL), 0);
	assert_int_equal(run_main(bench_demo_main, "demo", "--help", NULL), 0);
}

static json_t *result_named(json_t *doc, const char *name, size_t nth)
{
	json_t *arr = json_object_get(doc, "results"), *r;
	size_t i;

	json_array_foreach(arr, i, r) {
		const char *n = json_string_value(json_object_get(r, "name"));

		if (n && !strcmp(n, name) && nth-- == 0)
			return r;
	}
	return NULL;
}

static void hash_writes_json_results(void **state)
{
	char path[512];
	json_t *doc, *r;

	(void)state;
	tmpfile_path(path, sizeof(path), "hash.json");
	assert_int_equal(run_main(bench_hash_main, "hash", "--reps", "2", "--tokens", "4096",
				  "--block-tokens", "16,64", "--json", path, NULL), 0);
	doc = load(path);
	assert_string_equal(json_string_value(json_object_get(doc, "command")), "hash");
	assert_int_equal(json_array_size(json_object_get(doc, "errors")), 0);
	r = result_named(doc, "hash_chain", 1);
	assert_non_null(r);
	assert_int_equal(json_integer_value(json_object_get(r, "block_tokens")), 64);
	assert_int_equal(json_integer_value(json_object_get(r, "tokens_per_call")), 4096);
	r = json_object_get(r, "tokens_per_s");
	assert_int_equal(json_integer_value(json_object_get(r, "n")), 2);
	assert_true(json_number_value(json_object_get(r, "median")) > 0);
	r = result_named(doc, "ns_root", 0);
	assert_non_null(r);
	assert_true(json_number_value(json_object_get(json_object_get(r, "calls_per_s"),
						      "median")) > 0);
	json_decref(doc);
}

static void ram_writes_json_results(void **state)
{
	static const char *const names[] = { "put", "get", "get_batch", "lookup",
					      "lookup+lease" };
	char path[512];
	json_t *doc, *r;
	size_t i;

	(void)state;
	tmpfile_path(path, sizeof(path), "ram.json");
	assert_int_equal(run_main(bench_ram_main, "ram", "--sizes", "64KiB", "--threads", "1",
				  "--working-set", "2MiB", "--capacity", "32MiB",
				  "--volume", "1MiB", "--batch", "4", "--chain", "50",
				  "--reps", "1", "--json", path, NULL), 0);
	doc = load(path);
	assert_int_equal(json_array_size(json_object_get(doc, "errors")), 0);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		r = result_named(doc, names[i], 0);
		assert_non_null(r);
		assert_int_equal(json_integer_value(json_object_get(r, "threads")), 1);
	}
	r = result_named(doc, "get", 0);
	assert_int_equal(json_integer_value(json_object_get(r, "block_bytes")), 65536);
	assert_int_equal(json_integer_value(json_object_get(r, "failures")), 0);
	assert_true(json_is_number(json_object_get(r, "share_of_memcpy")));
	assert_true(json_is_object(json_object_get(r, "latency_us_per_call")));
	assert_true(json_number_value(json_object_get(json_object_get(r, "memcpy_bytes_per_s"),
						      "median")) > 0);
	r = result_named(doc, "get_batch", 0);
	assert_int_equal(json_integer_value(json_object_get(r, "blocks_per_call")), 4);
	/* one memcpy limit per copy figure, the batch one into as many buffers */
	assert_int_equal(json_array_size(json_object_get(doc, "limits")), 3);
	r = json_array_get(json_object_get(doc, "limits"), 2);
	assert_string_equal(json_string_value(json_object_get(r, "name")), "memcpy");
	assert_string_equal(json_string_value(json_object_get(r, "for")), "get_batch");
	assert_int_equal(json_integer_value(json_object_get(r, "dst_buffers")), 4);
	r = result_named(doc, "lookup", 0);
	assert_int_equal(json_integer_value(json_object_get(r, "keys_per_call")), 50);
	assert_int_equal(json_integer_value(json_object_get(r, "short_calls")), 0);
	r = result_named(doc, "index", 0);
	assert_non_null(r);
	assert_non_null(json_object_get(r, "index_bytes_per_block"));
	json_decref(doc);
}

/* Lookups: each thread's chain shares its first half with every other
 * thread's (stored once), every call finds the whole chain, and the scaling
 * of all threads' keys/s over one thread's is reported with and without
 * lease. */
static void ram_lookups_share_a_prefix_and_report_scaling(void **state)
{
	static const char *const ops[] = { "lookup", "lookup+lease" };
	char dir[256], path[512];
	json_t *doc, *r;
	size_t i, t;

	(void)state;
	/* a directory of its own, removed after: the process has few slots */
	assert_int_equal(bench_tmpdir_create(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/ram-lookup.json", dir);
	assert_int_equal(run_main(bench_ram_main, "ram", "--no-copy", "--threads", "1,2",
				  "--chain", "8", "--shared-prefix", "50", "--reps", "1",
				  "--json", path, NULL), 0);
	doc = load(path);
	assert_int_equal(json_array_size(json_object_get(doc, "errors")), 0);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "config"),
							    "shared_prefix_percent")), 50);
	for (i = 0; i < 2; i++) {
		for (t = 0; t < 2; t++) {
			r = result_named(doc, ops[i], t);
			assert_non_null(r);
			assert_int_equal(json_integer_value(json_object_get(r, "threads")), t + 1);
			assert_int_equal(json_integer_value(json_object_get(r, "short_calls")), 0);
		}
		r = result_named(doc, "lookup_scaling", i);
		assert_non_null(r);
		assert_string_equal(json_string_value(json_object_get(r, "op")), ops[i]);
		assert_int_equal(json_integer_value(json_object_get(r, "threads")), 2);
		assert_int_equal(json_integer_value(json_object_get(r, "keys_per_call")), 8);
		assert_int_equal(json_integer_value(json_object_get(r, "shared_keys")), 4);
		assert_true(json_number_value(json_object_get(r, "times_one_thread")) > 0);
	}
	assert_null(result_named(doc, "lookup_scaling", 2));
	/* 4 keys every thread looks up, stored once, and 4 of each thread's own */
	r = result_named(doc, "index", 0);
	assert_int_equal(json_integer_value(json_object_get(r, "blocks")), 12);
	json_decref(doc);
	assert_int_equal(bench_tmpdir_remove(dir), 0);
}

/* The lease-scaling goal is read at 64-key chains where --chain lists
 * them (the shape the goal is stated for), else at the longest chain. */
static void ram_lease_goal_reads_64_key_chains(void **state)
{
	struct ram_opts o = { .chains = { 8, 64, 1000 }, .nchains = 3 };

	(void)state;
	assert_int_equal(rb_goal_chain(&o), 64);
	o.chains[1] = 65;
	assert_int_equal(rb_goal_chain(&o), 1000);
	o.chains[2] = 9;
	assert_int_equal(rb_goal_chain(&o), 65);
	o.nchains = 0;
	assert_int_equal(rb_goal_chain(&o), 0);
}

static void disk_writes_json_results(void **state)
{
	static const char *const names[] = { "store_put_batch_spill",
					      "store_get_batch_cold", "spill_put",
					      "spill_put_batch", "spill_put_batch_new_file",
					      "batch_load" };
	char path[512], dir[256];
	json_t *doc, *r;

	(void)state;
	TEST_NEED_DISK();
	tmpfile_path(path, sizeof(path), "disk.json");
	assert_int_equal(bench_tmpdir_create(dir, sizeof(dir)), 0);
	/* the raw loop as the limit: CI machines need not have fio */
	assert_int_equal(run_main(bench_disk_main, "disk", "--dir", dir, "--no-fio",
				  "--size", "64MiB", "--block-size", "256KiB", "--batch", "8",
				  "--ram", "8MiB", "--reps", "1", "--json", path, NULL), 0);
	doc = load(path);
	assert_int_equal(json_array_size(json_object_get(doc, "errors")), 0);
	assert_int_equal(json_array_size(json_object_get(doc, "limits")), 6);
	assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "config"),
							      "caller_buffers")),
			    "posix_memalign");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		r = result_named(doc, names[i], 0);
		assert_non_null(r);
		assert_true(json_number_value(json_object_get(r, "value")) > 0);
		assert_true(json_number_value(json_object_get(r, "limit_value")) > 0);
		assert_true(json_number_value(json_object_get(r, "share")) > 0);
		assert_int_equal(json_integer_value(json_object_get(
			json_object_get(r, "share_reps"), "n")), 1);
	}
	r = result_named(doc, "reopen", 0);
	assert_non_null(r);
	assert_true(json_number_value(json_object_get(r, "clean_ms")) > 0);
	assert_true(json_number_value(json_object_get(r, "after_kill9_ms")) > 0);
	assert_true(json_number_value(json_object_get(r, "index_bytes_per_block")) > 0);
	json_decref(doc);
	/* bad options are refused before anything runs */
	assert_int_equal(run_main(bench_disk_main, "disk", "--qd", "0", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_disk_main, "disk", "--size", "1MiB", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_disk_main, "disk", "--block-size", "1000", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_disk_main, "disk", "--ram", "1KiB", NULL),
			 BENCH_EXIT_USAGE);
}

static void attach_writes_json_results(void **state)
{
	char path[512];
	json_t *doc, *r;

	(void)state;
	tmpfile_path(path, sizeof(path), "attach.json");
	assert_int_equal(run_main(bench_attach_main, "attach", "--size", "64KiB",
				  "--blocks", "8", "--lookups", "20", "--reps", "1",
				  "--json", path, NULL), 0);
	doc = load(path);
	assert_string_equal(json_string_value(json_object_get(doc, "command")), "attach");
	assert_int_equal(json_array_size(json_object_get(doc, "errors")), 0);
	r = json_array_get(json_object_get(doc, "limits"), 0);
	assert_string_equal(json_string_value(json_object_get(r, "name")), "in_process_get");
	assert_true(json_number_value(json_object_get(r, "value")) > 0);
	r = result_named(doc, "attached_get", 0);
	assert_non_null(r);
	assert_true(json_number_value(json_object_get(r, "value")) > 0);
	assert_true(json_number_value(json_object_get(r, "share")) > 0);
	assert_int_equal(json_integer_value(json_object_get(r, "block_bytes")), 65536);
	/* every get of a block in RAM (warm-up and one repetition) came from
	 * the directory */
	assert_int_equal(json_number_value(json_object_get(r, "directory_gets")), 16);
	r = result_named(doc, "attached_lookup_lease", 0);
	assert_non_null(r);
	assert_int_equal(json_integer_value(json_object_get(r, "keys_per_call")), 64);
	assert_int_equal(json_integer_value(json_object_get(
		json_object_get(r, "latency_us"), "n")), 20);
	assert_true(json_number_value(json_object_get(r, "value")) > 0);
	json_decref(doc);

	/* A node store of its own (as a kvtierd would be), the in-process side
	 * given a shared arena too. */
	char sock[600], cfg[700];
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s", path); /* beside the JSON file */
	strcpy(strrchr(sock, '/') + 1, "attach.sock");
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false}, "
		 "\"local\": {\"socket\": \"%s\"}}", sock);
	assert_int_equal(kvt_open(cfg, &node), 0);
	assert_int_equal(run_main(bench_attach_main, "attach", "--socket", sock, "--shared",
				  "--size", "64KiB", "--blocks", "4", "--lookups", "10",
				  "--reps", "1", "--json", path, NULL), 0);
	kvt_close(node);
	doc = load(path);
	r = json_object_get(doc, "config");
	assert_string_equal(json_string_value(json_object_get(r, "socket")), sock);
	assert_string_equal(json_string_value(json_object_get(r, "in_process_arena")), "shared");
	assert_non_null(result_named(doc, "attached_get", 0));
	json_decref(doc);

	assert_int_equal(run_main(bench_attach_main, "attach", "--size", "1000", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_attach_main, "attach", "--blocks", "0", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_attach_main, "attach", "--keys", "4097", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_attach_main, "attach", "stray", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_attach_main, "attach", "--socket",
				  "/nonexistent/kvtier.sock", "--reps", "1", NULL),
			 BENCH_EXIT_FAIL);
}

static void peer_writes_json_results(void **state)
{
	char path[512];
	json_t *doc, *r;

	(void)state;
	tmpfile_path(path, sizeof(path), "peer.json");
	assert_int_equal(run_main(bench_peer_main, "peer", "--block-size", "64KiB",
				  "--blocks", "32", "--batch", "8", "--reps", "1",
				  "--json", path, NULL), 0);
	doc = load(path);
	assert_string_equal(json_string_value(json_object_get(doc, "command")), "peer");
	assert_int_equal(json_array_size(json_object_get(doc, "errors")), 0);
	r = json_object_get(doc, "config");
	assert_int_equal(json_integer_value(json_object_get(r, "block_size")), 65536);
	assert_int_equal(json_integer_value(json_object_get(r, "blocks")), 32);
	assert_int_equal(json_integer_value(json_object_get(r, "batch")), 8);
	assert_int_equal(json_array_size(json_object_get(r, "members")), 2);
	assert_true(json_is_false(json_object_get(r, "promote")));
	/* one limit: the bench's own TCP stream over the same bytes */
	assert_int_equal(json_array_size(json_object_get(doc, "limits")), 1);
	r = json_array_get(json_object_get(doc, "limits"), 0);
	assert_string_equal(json_string_value(json_object_get(r, "name")), "tcp_loop");
	assert_string_equal(json_string_value(json_object_get(r, "for")), "peer_get_batch");
	assert_int_equal(json_integer_value(json_object_get(r, "bytes")), 32 * 65536);
	assert_true(json_number_value(json_object_get(r, "value")) > 0);

	r = result_named(doc, "peer_get_batch", 0);
	assert_non_null(r);
	assert_string_equal(json_string_value(json_object_get(r, "unit")), "bytes/s");
	assert_true(json_number_value(json_object_get(r, "value")) > 0);
	assert_true(json_number_value(json_object_get(r, "limit_value")) > 0);
	assert_true(json_number_value(json_object_get(r, "share")) > 0);
	assert_int_equal(json_integer_value(json_object_get(
		json_object_get(r, "share_reps"), "n")), 1);
	assert_int_equal(json_integer_value(json_object_get(r, "block_bytes")), 65536);
	assert_int_equal(json_integer_value(json_object_get(r, "blocks_per_call")), 8);
	assert_int_equal(json_integer_value(json_object_get(r, "wrong_blocks")), 0);
	/* the CPU time per GiB of the loads and of the loop beside them */
	assert_true(json_number_value(json_object_get(r, "cpu_ms_per_gib")) > 0);
	assert_true(json_number_value(json_object_get(r, "limit_cpu_ms_per_gib")) > 0);
	/* four timed batches of eight blocks */
	json_t *lat = json_object_get(r, "batch_latency_us");
	assert_int_equal(json_integer_value(json_object_get(lat, "n")), 4);
	assert_true(json_number_value(json_object_get(lat, "p50")) > 0);
	assert_true(json_number_value(json_object_get(lat, "p99")) >=
		    json_number_value(json_object_get(lat, "p50")));

	r = result_named(doc, "peer_lookup", 0);
	assert_non_null(r);
	assert_string_equal(json_string_value(json_object_get(r, "unit")), "calls/s");
	assert_true(json_number_value(json_object_get(r, "value")) > 0);
	assert_int_equal(json_integer_value(json_object_get(r, "keys_per_call")), 64);
	assert_int_equal(json_integer_value(json_object_get(r, "short_calls")), 0);
	assert_int_equal(json_integer_value(json_object_get(
		json_object_get(r, "reps"), "n")), 1);
	json_decref(doc);

	/* --promote: a copies what it loads; every block still comes from b */
	assert_int_equal(run_main(bench_peer_main, "peer", "--block-size", "64KiB",
				  "--blocks", "16", "--batch", "8", "--reps", "1", "--promote",
				  "--json", path, NULL), 0);
	doc = load(path);
	assert_int_equal(json_array_size(json_object_get(doc, "errors")), 0);
	assert_true(json_is_true(json_object_get(json_object_get(doc, "config"), "promote")));
	json_decref(doc);

	/* bad options are refused before anything runs */
	assert_int_equal(run_main(bench_peer_main, "peer", "--block-size", "1000", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--block-size", "1GiB", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--blocks", "0", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--batch", "0", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--batch", "4097", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--blocks", "30", "--batch", "8",
				  NULL), BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--blocks", "8192", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--reps", "0", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--bogus", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "stray", NULL),
			 BENCH_EXIT_USAGE);
	assert_int_equal(run_main(bench_peer_main, "peer", "--help", NULL), BENCH_EXIT_OK);
}

static void demo_verifies_everything_and_writes_json(void **state)
{
	char path[512];
	json_t *doc, *r;

	(void)state;
	tmpfile_path(path, sizeof(path), "demo.json");
	assert_int_equal(run_main(bench_demo_main, "demo", "--json", path, NULL), 0);
	doc = load(path);
	r = result_named(doc, "verification", 0);
	assert_non_null(r);
	assert_int_equal(json_integer_value(json_object_get(r, "wrong_blocks")), 0);
	assert_int_equal(json_integer_value(json_object_get(r, "failed_ops")), 0);
	assert_true(json_is_true(json_object_get(r, "hash_checks_ok")));
	assert_true(json_integer_value(json_object_get(r, "blocks")) >= 4 * 56);
	r = result_named(doc, "store_stats", 0);
	assert_non_null(r);
	assert_true(json_is_object(json_object_get(json_object_get(r, "stats"), "ram")));
	json_decref(doc);
}

/* --- the kvbench program: its command-line contract ------------------------------ */

/* The kvbench binary beside this test's directory ($BUILD/tests/..). */
static const char *kvbench_path(void)
{
	static char path[PATH_MAX + 16];
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (path[0])
		return path;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	assert_non_null(slash);
	*slash = '\0';
	snprintf(path, sizeof(path), "%s/../kvbench", exe);
	assert_int_equal(access(path, X_OK), 0);
	return path;
}

/* A finished kvbench: exit status (128 + signal when killed), its output. */
struct proc {
	int status;
	char *out, *err;
};

static char *slurp(int fd)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);
	ssize_t got;

	assert_non_null(b);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	while ((got = read(fd, b + n, cap - n - 1)) > 0) {
		n += (size_t)got;
		if (cap - n < 2) {
			b = realloc(b, cap *= 2);
			assert_non_null(b);
		}
	}
	b[n] = '\0';
	close(fd);
	return b;
}

/* Starts kvbench args[] with stdout and stderr into temporary files. */
static pid_t start_kvbench(const char *const *args, int *outfd, int *errfd)
{
	char o[] = "/tmp/kvt-cli-out-XXXXXX", e[] = "/tmp/kvt-cli-err-XXXXXX";
	const char *argv[40] = { kvbench_path() };
	pid_t pid;
	size_t i;

	for (i = 0; args[i] && i < 38; i++)
		argv[i + 1] = args[i];
	*outfd = mkstemp(o);
	*errfd = mkstemp(e);
	assert_true(*outfd >= 0 && *errfd >= 0);
	unlink(o);
	unlink(e);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(*outfd, 1);
		dup2(*errfd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* Waits for pid; sig (0: none) is sent after_ms into the run. */
static void finish_kvbench(struct proc *p, pid_t pid, int outfd, int errfd, int sig,
			   unsigned after_ms)
{
	int st;

	if (sig) {
		usleep(after_ms * 1000u);
		kill(pid, sig);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	p->out = slurp(outfd);
	p->err = slurp(errfd);
}

/* Runs kvbench with the NULL-terminated arguments. */
static void kvbench_run(struct proc *p, const char *const *args)
{
	int o, e;
	pid_t pid = start_kvbench(args, &o, &e);

	finish_kvbench(p, pid, o, e, 0, 0);
}

static void proc_free(struct proc *p)
{
	free(p->out);
	free(p->err);
}

static unsigned count_lines(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* A usage error: exit 2, nothing on stdout, one line of error and the
 * "Try" line naming cmd on stderr, the first containing what. */
static void assert_usage_error(const struct proc *p, const char *cmd, const char *what)
{
	char try[64];

	snprintf(try, sizeof(try), "Try 'kvbench%s%s --help'.\n", *cmd ? " " : "", cmd);
	if (p->status != 2 || p->out[0] || count_lines(p->err) != 2 ||
	    !strstr(p->err, try) || !strstr(p->err, what))
		fail_msg("kvbench %s: exit %d, stdout %zu bytes, stderr:\n%s(wanted \"%s\")",
			 cmd, p->status, strlen(p->out), p->err, what);
}

/* Runs kvbench with args and expects the usage error of assert_usage_error(). */
static void expect_usage_error(const char *const *args, const char *cmd, const char *what)
{
	struct proc p;

	kvbench_run(&p, args);
	assert_usage_error(&p, cmd, what);
	proc_free(&p);
}

/* Fast arguments for each command, with --json FILE or - appended. */
#define HASH_ARGS "hash", "--reps", "1", "--tokens", "4096", "--block-tokens", "16"
#define RAM_ARGS "ram", "--sizes", "64KiB", "--threads", "1", "--working-set", "2MiB", \
		 "--capacity", "32MiB", "--volume", "1MiB", "--batch", "4", "--chain", \
		 "50", "--reps", "1"
#define PEER_ARGS "peer", "--block-size", "64KiB", "--blocks", "16", "--batch", "4", \
		  "--reps", "1"
#define DISK_ARGS "disk", "--no-fio", "--size", "64MiB", "--block-size", "256KiB", \
		  "--batch", "8", "--reps", "1"
#define DEMO_ARGS "demo", "--disk", "0"
#define REPLAY_ARGS "replay", "--sessions", "2"
#define SWEEP_ARGS "sweep", "--sessions", "2", "--over", "width", "--values", "1,2"

/* stdout must be one JSON document of the given command, and nothing else. */
static json_t *assert_json_stdout(const struct proc *p, const char *cmd)
{
	json_error_t je;
	json_t *doc = json_loads(p->out, 0, &je);

	if (p->status != 0 || !doc)
		fail_msg("kvbench %s --json -: exit %d, stdout not JSON (%s):\n%.400s\nstderr:\n%.2000s",
			 cmd, p->status, je.text, p->out, p->err);
	assert_int_equal(json_integer_value(json_object_get(doc, "schema_version")),
			 BENCH_JSON_SCHEMA);
	assert_string_equal(json_string_value(json_object_get(doc, "command")), cmd);
	assert_true(json_is_null(json_object_get(doc, "interrupted")));
	assert_true(json_array_size(json_object_get(doc, "results")) > 0);
	return doc;
}

/* Every command's --json - is JSON alone on stdout; what it printed for a
 * reader (tables, progress) went to stderr. */
static void cli_json_stdout_is_json_alone_for_every_command(void **state)
{
	char *dir = make_temp_dir("cli");
	char sweep_json[4200], png[4200];
	const char *const runs[][24] = {
		{ DEMO_ARGS, "--json", "-", NULL },
		{ HASH_ARGS, "--json", "-", NULL },
		{ RAM_ARGS, "--json", "-", NULL },
		{ PEER_ARGS, "--json", "-", NULL },
		{ REPLAY_ARGS, "--json", "-", NULL },
		{ SWEEP_ARGS, "--json", "-", NULL },
		{ DISK_ARGS, "--json", "-", NULL },
	};
	struct proc p;
	json_t *doc;
	size_t i;

	(void)state;
	assert_non_null(dir);
	for (i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		if (!strcmp(runs[i][0], "disk") && test_disk_unavailable()) {
			print_message("skipped: kvbench disk: %s\n", test_disk_unavailable());
			continue;
		}
		kvbench_run(&p, runs[i]);
		doc = assert_json_stdout(&p, runs[i][0]);
		if (strcmp(runs[i][0], "replay") && strcmp(runs[i][0], "sweep"))
			assert_true(strlen(p.err) > 0); /* the tables went there */
		if (!strcmp(runs[i][0], "sweep")) {
			/* kept as the input of plot */
			FILE *f;

			/* a sweep of generated sessions runs three seeds a point */
			assert_int_equal(json_integer_value(json_object_get(json_object_get(
				json_object_get(doc, "config"), "replay"), "seeds")), 3);
			assert_int_equal(json_number_value(json_object_get(
				json_array_get(json_object_get(doc, "results"), 0), "seeds")), 3);

			snprintf(sweep_json, sizeof(sweep_json), "%s/sweep.json", dir);
			f = fopen(sweep_json, "w");
			assert_non_null(f);
			fputs(p.out, f);
			assert_int_equal(fclose(f), 0);
		}
		assert_null(strstr(p.err, "issue 2"));
		json_decref(doc);
		proc_free(&p);
	}
	if (access("/usr/bin/gnuplot", X_OK) && system("gnuplot --version >/dev/null 2>&1")) {
		print_message("skipped: kvbench plot: no gnuplot\n");
	} else {
		snprintf(png, sizeof(png), "%s/sweep.png", dir);
		kvbench_run(&p, (const char *const[]){ "plot", sweep_json, "--out", png,
						       "--json", "-", NULL });
		doc = assert_json_stdout(&p, "plot");
		assert_non_null(strstr(p.err, "wrote"));
		json_decref(doc);
		proc_free(&p);
	}
	rm_rf(dir);
	free(dir);
}

/* The replay's engine and fleet options refuse what they cannot mean, and
 * say what they may be. */
static void cli_bad_replay_options_exit_2(void **state)
{
	(void)state;
	expect_usage_error((const char *const[]){ "replay", "--gpu-hold", "maybe", NULL },
			   "replay", "bad --gpu-hold 'maybe'");
	expect_usage_error((const char *const[]){ "replay", "--pause", "-1", NULL },
			   "replay", "bad --pause '-1'");
	expect_usage_error((const char *const[]){ "sweep", "--pause", "soon", NULL },
			   "sweep", "bad --pause 'soon'");
	expect_usage_error((const char *const[]){ "replay", "--tool-think", "1", NULL },
			   "replay", "bad --tool-think '1'");
	expect_usage_error((const char *const[]){ "sweep", "--seeds", "0", NULL },
			   "sweep", "bad --seeds '0'");
	expect_usage_error((const char *const[]){ "replay", "--seeds", "17", NULL },
			   "replay", "bad --seeds '17': an integer from 1 to 16");
	/* each says what it may be */
	expect_usage_error((const char *const[]){ "replay", "--nodes", "9", NULL },
			   "replay", "bad --nodes '9': an integer from 1 to 8");
	expect_usage_error((const char *const[]){ "replay", "--seed", "-1", NULL },
			   "replay", "bad --seed '-1': an integer from 0 to 10^15");
	expect_usage_error((const char *const[]){ "sweep", "--endpoints", "1000000000", NULL },
			   "sweep", "bad --endpoints '1000000000': an integer from 1 to 4096");
	expect_usage_error((const char *const[]){ "replay", "--speed", "0", NULL },
			   "replay", "bad --speed '0': a number above 0 (up to 10^15), or max");
	expect_usage_error((const char *const[]){ "sweep", "--values", "-5", NULL },
			   "sweep", "bad --values '-5': up to 64 numbers from 0 to 10^15");
	expect_usage_error((const char *const[]){ "replay", "--width", "0", NULL },
			   "replay", "bad --width '0': an integer from 1 to 1000000");
	expect_usage_error((const char *const[]){ "replay", "--model", "gpt", NULL },
			   "replay", "bad --model 'gpt': qwen3-coder-30b-a3b, llama-3.1-8b or");
	expect_usage_error((const char *const[]){ "replay", "--ram", "1KiB", NULL },
			   "replay", "bad --ram '1KiB': at least one token (98304 bytes)");
	expect_usage_error((const char *const[]){ "replay", "--seeds", "2", "--trace",
						  "/nonexistent/t.jsonl", NULL },
			   "replay", "--seeds needs generated sessions, not --trace");
}

/* A sweep of the default and the ram-only policy gives each width's disk
 * share by difference, (default - ram-only) / default, under the default's
 * column and in its JSON result; null under the ram-only ones. */
static void cli_sweep_gives_the_disk_share_by_difference(void **state)
{
	struct proc p;
	json_t *doc;

	(void)state;
	kvbench_run(&p, (const char *const[]){ "sweep", "--sessions", "4", "--values", "2",
					       "--seeds", "1", "--policy", "default,ram-only",
					       "--no-progress", "--json", "-", NULL });
	doc = assert_json_stdout(&p, "sweep");
	json_t *res = json_object_get(doc, "results");
	assert_int_equal(json_array_size(res), 2);
	json_t *d = json_array_get(res, 0), *m = json_array_get(res, 1);
	assert_string_equal(json_string_value(json_object_get(d, "policy")), "default");
	assert_string_equal(json_string_value(json_object_get(m, "policy")), "ram-only");
	double gd = json_number_value(json_object_get(d, "saved_store"));
	double gm = json_number_value(json_object_get(m, "saved_store"));
	assert_true(gd > 0);
	assert_float_equal(json_number_value(json_object_get(d, "disk_of_saving_by_difference")),
			   100.0 * (gd - gm) / gd, 1e-3); /* the JSON keeps 6 digits */
	assert_true(json_is_null(json_object_get(m, "disk_of_saving_by_difference")));
	assert_non_null(strstr(p.err, "disk tier's share by difference %"));
	json_decref(doc);
	proc_free(&p);
}

/* --seeds N: each point runs once per seed from --seed on, and the run shown
 * is the one whose gross saving is the median of the first policy's, every
 * policy's column from that same seed, each carrying every seed's figures. */
static void cli_seeds_show_the_median_seed_run(void **state)
{
	struct proc p;
	json_t *doc;

	(void)state;
	kvbench_run(&p, (const char *const[]){ "replay", "--sessions", "3", "--seed", "5",
					       "--seeds", "3", "--policy", "default,ram-only",
					       "--no-progress", "--json", "-", NULL });
	doc = assert_json_stdout(&p, "replay");
	json_t *res = json_object_get(doc, "results");
	assert_int_equal(json_array_size(res), 2);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
				 json_object_get(doc, "config"), "replay"), "seeds")), 3);
	double shown_seed = -1;
	for (size_t k = 0; k < 2; k++) {
		json_t *r = json_array_get(res, k), *runs = json_object_get(r, "seed_runs");
		double gross = json_number_value(json_object_get(r, "saved_store"));
		double seed = json_number_value(json_object_get(r, "seed"));
		double v[3], lo = INFINITY, hi = -INFINITY;
		int at = -1;

		assert_int_equal(json_number_value(json_object_get(r, "seeds")), 3);
		assert_int_equal(json_array_size(runs), 3);
		for (size_t i = 0; i < 3; i++) {
			json_t *e = json_array_get(runs, i);
			assert_int_equal(json_integer_value(json_object_get(e, "seed")), 5 + i);
			v[i] = json_number_value(json_object_get(e, "saved_store"));
			lo = v[i] < lo ? v[i] : lo;
			hi = v[i] > hi ? v[i] : hi;
			if (5 + i == seed)
				at = (int)i;
		}
		/* the run shown is its seed's, inside the seeds' range */
		assert_true(at >= 0);
		assert_true(fabs(gross - v[at]) < 1e-9);
		assert_true(fabs(json_number_value(json_object_get(r, "saved_store_seeds_min")) - lo) < 1e-9);
		assert_true(fabs(json_number_value(json_object_get(r, "saved_store_seeds_max")) - hi) < 1e-9);
		if (k == 0) {
			/* the first policy's: the median of the three */
			double med = v[0] + v[1] + v[2] - lo - hi;
			assert_true(fabs(gross - med) < 1e-9);
			assert_true(fabs(json_number_value(json_object_get(
				r, "saved_store_seeds_median")) - med) < 1e-9);
			shown_seed = seed;
		} else {
			assert_true(seed == shown_seed); /* the same seed for every policy */
		}
	}
	assert_non_null(strstr(p.err, "seed 7 (3 of 3)"));
	json_decref(doc);
	proc_free(&p);
}

/* --json, --csv and --out are checked before any work: a missing directory,
 * a directory where a file belongs, /proc: exit 2 at once. */
static void cli_bad_output_paths_exit_2_before_any_work(void **state)
{
	static const char *const cmds[] = { "demo", "hash", "ram", "disk", "peer",
					     "replay", "sweep", "plot" };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		expect_usage_error((const char *const[]){
					   cmds[i], "--json", "/nonexistent-kvt/x.json", NULL },
				   cmds[i], "--json /nonexistent-kvt/x.json: cannot write");
		expect_usage_error((const char *const[]){
					   cmds[i], "--json", "/tmp", NULL },
				   cmds[i], "is a directory");
	}
	expect_usage_error((const char *const[]){ "--json", "/proc/x.json", NULL },
			   "", "--json /proc/x.json");
	expect_usage_error((const char *const[]){
				   "replay", "--csv", "/nonexistent-kvt/x.csv", NULL },
			   "replay", "--csv /nonexistent-kvt/x.csv");
	expect_usage_error((const char *const[]){
				   "plot", "in.json", "--out", "/nonexistent-kvt/x.png", NULL },
			   "plot", "--out /nonexistent-kvt/x.png");
}

/* --csv writes as --json does: a link's target replaced, the link kept;
 * "-" sends the CSV alone to stdout and the tables to stderr. */
static void cli_csv_follows_links_and_owns_stdout(void **state)
{
	char *dir = make_temp_dir("cli-csv");
	char link[4200], target[4200];
	struct proc p;
	struct stat st;
	FILE *f;
	char line[64];

	(void)state;
	assert_non_null(dir);
	snprintf(link, sizeof(link), "%s/link.csv", dir);
	snprintf(target, sizeof(target), "%s/runs.csv", dir);
	assert_int_equal(symlink("runs.csv", link), 0);
	kvbench_run(&p, (const char *const[]){ REPLAY_ARGS, "--no-progress", "--csv", link,
					       NULL });
	assert_int_equal(p.status, 0);
	proc_free(&p);
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	f = fopen(target, "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	assert_true(!strncmp(line, "label,policy,", 13));
	fclose(f);

	kvbench_run(&p, (const char *const[]){ REPLAY_ARGS, "--no-progress", "--csv", "-",
					       NULL });
	if (p.status != 0 || strncmp(p.out, "label,policy,", 13) || count_lines(p.out) != 2 ||
	    !strstr(p.err, "kvbench replay"))
		fail_msg("exit %d, stdout:\n%s\nstderr:\n%s", p.status, p.out, p.err);
	proc_free(&p);
	expect_usage_error((const char *const[]){ "replay", "--csv", "-", "--json", "-", NULL },
			   "replay", "cannot share standard output");
	rm_rf(dir);
	free(dir);
}

/* Sizes follow the library's grammar and its error text, in one line. */
static void cli_sizes_use_the_library_grammar(void **state)
{
	(void)state;
	expect_usage_error((const char *const[]){ "ram", "--no-copy", "--no-lookup", NULL },
			   "ram", "--no-copy and --no-lookup together leave nothing to measure");
	expect_usage_error((const char *const[]){ "ram", "--sizes", "1.5", NULL },
			   "ram", "a fraction needs a unit");
	expect_usage_error((const char *const[]){ "disk", "--size", "10XB", NULL },
			   "disk", "unknown unit \"XB\"");
	expect_usage_error((const char *const[]){ "disk", "--size", "1MiB", NULL },
			   "disk", "at least 64MiB");
	/* combinations the tier cannot open or the store cannot take are
	 * refused before any work, not found at run time */
	expect_usage_error((const char *const[]){ "disk", "--size", "64MiB", "--block-size",
						  "64MiB", "--ram", "64MiB", NULL },
			   "disk", "--size 64MiB holds fewer than two regions of 257MiB");
	expect_usage_error((const char *const[]){ "disk", "--size", "516MiB", "--block-size",
						  "64MiB", "--ram", "64MiB", NULL },
			   "disk", "give --size 517MiB or more");
	expect_usage_error((const char *const[]){ "disk", "--size", "64MiB", "--block-size",
						  "64MiB", NULL },
			   "disk", "--block-size 64MiB is larger than --ram 32MiB");
	expect_usage_error((const char *const[]){ "disk", "--block-size", "6KiB", NULL },
			   "disk", "a multiple of 4KiB");
	expect_usage_error((const char *const[]){ "demo", "--ram", "64XiB", NULL },
			   "demo", "--ram");
}

/* An empty item of a list is refused, with that as the reason. */
static void cli_lists_refuse_empty_items(void **state)
{
	static const char *const sizes[] = { "1MiB,", ",", ",1MiB", "1MiB,,4MiB" };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		expect_usage_error((const char *const[]){ "ram", "--sizes", sizes[i], NULL },
				   "ram", "an empty item");
	/* replay and sweep refuse them too, where they skipped them */
	expect_usage_error((const char *const[]){ "replay", "--policy", "default,", NULL },
			   "replay", "bad --policy 'default,': an empty item");
	expect_usage_error((const char *const[]){ "replay", "--policy", ",default,", NULL },
			   "replay", "bad --policy ',default,': an empty item");
	expect_usage_error((const char *const[]){ "sweep", "--values", "1,,2", NULL },
			   "sweep", "bad --values '1,,2': an empty item");
	expect_usage_error((const char *const[]){ "sweep", "--over", "width", "--values", ",",
						  NULL },
			   "sweep", "an empty item");
}

/* Errors without a command are kvbench's own; each is one line. */
static void cli_errors_without_a_command_name_kvbench(void **state)
{
	(void)state;
	expect_usage_error((const char *const[]){ "-V", NULL },
			   "", "kvbench: unknown option '-V'");
	expect_usage_error((const char *const[]){ "frobnicate", NULL },
			   "", "kvbench: unknown command 'frobnicate'");
	expect_usage_error((const char *const[]){ "hash", "--bogus", NULL },
			   "hash", "kvbench hash: unknown option '--bogus'");
}

/* An attach that finds no node store says why in the library's words,
 * not as "a miss" (kvt_strerror's reading of ENOENT for data calls). */
static void cli_attach_failure_names_the_cause(void **state)
{
	struct proc p;
	(void)state;
	kvbench_run(&p, (const char *const[]){ "attach", "--socket", "/nonexistent-kvt/sock",
					      "--reps", "1", NULL });
	if (p.status != 1 || !strstr(p.err, "cannot connect") || strstr(p.err, "a miss"))
		fail_msg("exit %d, stderr:\n%s", p.status, p.err);
	proc_free(&p);
}

/* An explicit --dir (--disk-dir) that cannot be used is an error, not a
 * fallback; a directory where a file belongs says so. */
static void cli_unusable_dir_is_an_error(void **state)
{
	(void)state;
	expect_usage_error((const char *const[]){
				   "demo", "--dir", "/nonexistent-kvt", NULL },
			   "demo", "--dir /nonexistent-kvt");
	expect_usage_error((const char *const[]){
				   "demo", "--dir", "/etc/hostname", NULL },
			   "demo", "not a directory");
	expect_usage_error((const char *const[]){
				   "disk", "--dir", "/nonexistent-kvt", NULL },
			   "disk", "--dir /nonexistent-kvt");
	expect_usage_error((const char *const[]){
				   "replay", "--disk-dir", "/nonexistent-kvt", NULL },
			   "replay", "--disk-dir /nonexistent-kvt");
	/* a directory where a file belongs says so */
	expect_usage_error((const char *const[]){
				   "plot", "/tmp", "--out", "/tmp/x.png", NULL },
			   "plot", "/tmp is a directory");
}

/* Help and output speak to users. */
static void cli_help_speaks_to_users(void **state)
{
	static const char *const cmds[] = { "demo", "hash", "ram", "disk", "peer",
					     "replay", "sweep", "plot" };
	struct proc p;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		kvbench_run(&p, (const char *const[]){ cmds[i], "--help", NULL });
		assert_int_equal(p.status, 0);
		assert_non_null(strstr(p.out, "usage: kvbench"));
		assert_null(strstr(p.out, "issue "));
		assert_null(strstr(p.out, "seed study"));
		proc_free(&p);
	}
}

/* Whether process pid catches sig (its handler is installed), from
 * /proc/PID/status; waits up to 30 s for it. */
static int wait_until_caught(pid_t pid, int sig)
{
	char path[64], line[256];
	unsigned long long mask = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	for (int i = 0; i < 3000 && !(mask >> (sig - 1) & 1); i++) {
		FILE *f = fopen(path, "r");

		if (!f)
			return 0;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "SigCgt: %llx", &mask) == 1)
				break;
		fclose(f);
		if (!(mask >> (sig - 1) & 1))
			usleep(10000);
	}
	return mask >> (sig - 1) & 1;
}

/* A stopped run says so, keeps what it measured, and exits 128 + signal. */
static void cli_interrupted_run_keeps_its_results(void **state)
{
	char *dir = make_temp_dir("cli");
	char path[4200];
	struct proc p;
	json_t *doc, *r;
	int o, e;
	pid_t pid;

	(void)state;
	assert_non_null(dir);
	snprintf(path, sizeof(path), "%s/hash.json", dir);
	pid = start_kvbench((const char *const[]){ "hash", "--reps", "100000", "--tokens",
						   "4096", "--block-tokens", "16", "--json",
						   path, NULL }, &o, &e);
	/* once it catches SIGINT (and so finishes on its own), a repetition
	 * or more later */
	assert_true(wait_until_caught(pid, SIGINT));
	finish_kvbench(&p, pid, o, e, SIGINT, 1500);
	if (p.status != 130 || !strstr(p.err, "kvbench hash: interrupted by SIGINT"))
		fail_msg("exit %d, stderr:\n%s", p.status, p.err);
	doc = load(path);
	assert_string_equal(json_string_value(json_object_get(doc, "interrupted")), "SIGINT");
	r = result_named(doc, "hash_chain", 0);
	assert_non_null(r);
	assert_true(json_integer_value(json_object_get(json_object_get(r, "tokens_per_s"),
						       "n")) >= 1);
	json_decref(doc);
	proc_free(&p);
	rm_rf(dir);
	free(dir);
}

/* A disk run stopped before its first counted repetition prints n/a
 * where it measured nothing, as the JSON gives null, not "nan". */
static void cli_interrupted_disk_prints_n_a(void **state)
{
	struct proc p;
	int o, e;
	pid_t pid;

	(void)state;
	if (test_disk_unavailable()) {
		print_message("skipped: kvbench disk: %s\n", test_disk_unavailable());
		return;
	}
	/* Inside its warm-up (a 256 MiB tier takes seconds a repetition), with
	 * no repetition counted: 0.5 s in on this machine; a slower one (a
	 * sanitizer build) may still be setting up then and end without a
	 * table, so stop it later there, up to 8 s in. */
	for (unsigned ms = 500;; ms *= 4) {
		pid = start_kvbench((const char *const[]){ "disk", "--no-fio", "--size", "256MiB",
							   "--reps", "3", NULL }, &o, &e);
		assert_true(wait_until_caught(pid, SIGTERM));
		finish_kvbench(&p, pid, o, e, SIGTERM, ms);
		if (strstr(p.out, "nan"))
			fail_msg("nan after %u ms, stdout:\n%s", ms, p.out);
		if (p.out[0] || ms >= 8000)
			break;
		proc_free(&p);
	}
	if (p.status != 143 || !strstr(p.out, "spill") || !strstr(p.out, "n/a"))
		fail_msg("exit %d, stdout:\n%s\nstderr:\n%s", p.status, p.out, p.err);
	proc_free(&p);
}

/* A replay sweep stopped in its first run ends that run where it was,
 * prints and writes what it replayed, the run marked incomplete and the
 * document interrupted, and exits 128 + signal. */
static void cli_interrupted_sweep_keeps_the_run_so_far(void **state)
{
	char *dir = make_temp_dir("cli-sweep");
	char path[4200];
	struct proc p;
	json_t *doc, *res, *r;
	int o, e;
	pid_t pid;

	(void)state;
	assert_non_null(dir);
	snprintf(path, sizeof(path), "%s/sweep.json", dir);
	pid = start_kvbench((const char *const[]){ "sweep", "--values", "6,12", "--no-progress",
						   "--json", path, NULL }, &o, &e);
	assert_true(wait_until_caught(pid, SIGTERM));
	finish_kvbench(&p, pid, o, e, SIGTERM, 1000);
	if (p.status != 143 || !strstr(p.err, "kvbench sweep: interrupted by SIGTERM") ||
	    !strstr(p.out, "width=6 (stopped)") || strstr(p.out, "width=12"))
		fail_msg("exit %d, stdout:\n%s\nstderr:\n%s", p.status, p.out, p.err);
	doc = load(path);
	assert_string_equal(json_string_value(json_object_get(doc, "interrupted")), "SIGTERM");
	res = json_object_get(doc, "results");
	assert_int_equal(json_array_size(res), 1);
	r = json_array_get(res, 0);
	assert_true(json_is_true(json_object_get(r, "incomplete")));
	assert_true(json_number_value(json_object_get(r, "calls")) >= 1);
	json_decref(doc);
	proc_free(&p);
	rm_rf(dir);
	free(dir);
}

/* Whether a fio runs on a file under directory s. */
static int process_with(const char *s)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int found = 0;

	assert_non_null(d);
	while (!found && (de = readdir(d))) {
		char path[300], buf[8192];
		ssize_t n;
		int fd;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		for (ssize_t i = 0; i < n; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[n > 0 ? n : 0] = '\0';
		found = !strncmp(buf, "fio ", 4) && strstr(buf, s);
	}
	closedir(d);
	return found;
}

/* fio is stopped when kvbench is; nothing is left in --dir. */
static void cli_stop_stops_fio(void **state)
{
	struct proc p;
	char *dir;
	int o, e, i;
	pid_t pid;

	(void)state;
	TEST_NEED_DISK();
	if (system("fio --version >/dev/null 2>&1")) {
		print_message("skipped: no fio\n");
		skip();
	}
	dir = make_temp_dir("cli-fio");
	assert_non_null(dir);
	pid = start_kvbench((const char *const[]){ "disk", "--dir", dir, "--size", "256MiB",
						   "--reps", "50", NULL }, &o, &e);
	for (i = 0; i < 600 && !process_with(dir); i++)
		usleep(50000);
	assert_true(process_with(dir));
	finish_kvbench(&p, pid, o, e, SIGTERM, 0);
	if (p.status != 143 || !strstr(p.err, "interrupted by SIGTERM"))
		fail_msg("exit %d, stderr:\n%s", p.status, p.err);
	for (i = 0; i < 100 && process_with(dir); i++)
		usleep(20000);
	assert_false(process_with(dir));
	assert_int_equal(rmdir(dir), 0); /* empty: kvbench removed its files */
	proc_free(&p);
	free(dir);
}

/* Every manual page opens with the same kind of header: its own name and
 * section, a date written "Month D, YYYY", the library's version,
 * "libkvtier Manual". */
static void man_pages_share_one_header(void **state)
{
	DIR *d = opendir("man");
	struct dirent *de;
	char want_ver[64];
	unsigned pages = 0;

	(void)state;
	if (!d) {
		print_message("skipped: not run from the source tree\n");
		skip();
	}
	snprintf(want_ver, sizeof(want_ver), "libkvtier-%s", kvt_version());
	while ((de = readdir(d))) {
		char path[600], line[512], name[128], sec[8], dt[64], ver[64], title[64];
		char month[16];
		unsigned day, year;
		const char *dot = strrchr(de->d_name, '.');
		FILE *f;

		if (!dot || !dot[1] || !strchr("1357", dot[1]) || dot[2])
			continue;
		snprintf(path, sizeof(path), "man/%s", de->d_name);
		f = fopen(path, "r");
		assert_non_null(f);
		while (fgets(line, sizeof(line), f) && strncmp(line, ".TH ", 4))
			;
		fclose(f);
		if (sscanf(line, ".TH %127s %7s \"%63[^\"]\" \"%63[^\"]\" \"%63[^\"]\"", name, sec,
			   dt, ver, title) != 5)
			fail_msg("%s: header not of the form .TH name N \"date\" \"version\" "
				 "\"title\": %s", path, line);
		if (strlen(name) != (size_t)(dot - de->d_name) ||
		    strncmp(name, de->d_name, strlen(name)) || strcmp(sec, dot + 1) ||
		    strcmp(ver, want_ver) || strcmp(title, "libkvtier Manual") ||
		    sscanf(dt, "%15[A-Za-z] %u, %u", month, &day, &year) != 3 ||
		    day < 1 || day > 31 || year < 2000)
			fail_msg("%s: header %s", path, line);
		pages++;
	}
	closedir(d);
	assert_true(pages > 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(percentile_interpolates_between_closest_ranks),
		cmocka_unit_test(percentile_clamps_p_and_handles_tiny_samples),
		cmocka_unit_test(median_of_odd_and_even_samples),
		cmocka_unit_test(summarize_reports_min_max_mean_and_percentiles),
		cmocka_unit_test(samples_grow_and_append),
		cmocka_unit_test(parse_size_accepts_units_and_fractions),
		cmocka_unit_test(parse_size_rejects_bad_input),
		cmocka_unit_test(parse_size_list_splits_on_commas),
		cmocka_unit_test(parse_uint_checks_range_and_syntax),
		cmocka_unit_test(fmt_size_uses_the_largest_exact_unit),
		cmocka_unit_test(tokens_stay_below_the_vocabulary),
		cmocka_unit_test(table_aligns_columns),
		cmocka_unit_test(parallel_runs_each_thread_once),
		cmocka_unit_test(memcpy_probe_reports_a_rate_and_latencies),
		cmocka_unit_test(buffer_alloc_is_page_aligned_and_written),
		cmocka_unit_test(tmpdir_is_removed_with_its_tree_but_not_link_targets),
		cmocka_unit_test(json_document_has_the_common_shape),
		cmocka_unit_test(json_maps_nan_to_null),
		cmocka_unit_test(fmt_real_says_n_a_for_what_was_not_measured),
		cmocka_unit_test(json_write_reports_an_unwritable_path),
		cmocka_unit_test(json_write_keeps_links_devices_and_fifos),
		cmocka_unit_test(stats_number_follows_dotted_paths),
		cmocka_unit_test(subcommands_reject_bad_command_lines),
		cmocka_unit_test(subcommands_print_help),
		cmocka_unit_test(hash_writes_json_results),
		cmocka_unit_test(ram_writes_json_results),
		cmocka_unit_test(ram_lookups_share_a_prefix_and_report_scaling),
		cmocka_unit_test(ram_lease_goal_reads_64_key_chains),
		cmocka_unit_test(disk_writes_json_results),
		cmocka_unit_test(attach_writes_json_results),
		cmocka_unit_test(peer_writes_json_results),
		cmocka_unit_test(demo_verifies_everything_and_writes_json),
		cmocka_unit_test(cli_json_stdout_is_json_alone_for_every_command),
		cmocka_unit_test(cli_bad_output_paths_exit_2_before_any_work),
		cmocka_unit_test(cli_bad_replay_options_exit_2),
		cmocka_unit_test(cli_csv_follows_links_and_owns_stdout),
		cmocka_unit_test(cli_sizes_use_the_library_grammar),
		cmocka_unit_test(cli_lists_refuse_empty_items),
		cmocka_unit_test(cli_errors_without_a_command_name_kvbench),
		cmocka_unit_test(cli_attach_failure_names_the_cause),
		cmocka_unit_test(cli_unusable_dir_is_an_error),
		cmocka_unit_test(cli_help_speaks_to_users),
		cmocka_unit_test(cli_interrupted_run_keeps_its_results),
		cmocka_unit_test(cli_interrupted_disk_prints_n_a),
		cmocka_unit_test(cli_interrupted_sweep_keeps_the_run_so_far),
		cmocka_unit_test(cli_seeds_show_the_median_seed_run),
		cmocka_unit_test(cli_sweep_gives_the_disk_share_by_difference),
		cmocka_unit_test(cli_stop_stops_fio),
		cmocka_unit_test(man_pages_share_one_header),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
