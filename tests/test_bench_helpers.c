/*
 * test_bench_helpers.c - tests of kvbench's shared helpers (bench/options.c,
 * measure.c, limit.c, report.c, system.c): percentile maths, size and list
 * parsing, token ids, tables, threads, the memcpy probe, temporary
 * directories and the JSON results' common shape and writer.
 * No timed assertions: speeds are only checked to be present and positive.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
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
#include "bench_util.h"

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

static void cpu_list_rank_counts_the_cpus_before(void **state)
{
	(void)state;
	assert_int_equal(bench_cpu_list_rank("0,8\n", 0), 0);
	assert_int_equal(bench_cpu_list_rank("0,8\n", 8), 1);
	assert_int_equal(bench_cpu_list_rank("2-3", 3), 1);
	assert_int_equal(bench_cpu_list_rank("0-1,16-17", 16), 2);
	assert_int_equal(bench_cpu_list_rank("0-1,16-17", 17), 3);
	assert_int_equal(bench_cpu_list_rank("5", 5), 0);
	assert_int_equal(bench_cpu_list_rank("5", 6), 0);
	assert_int_equal(bench_cpu_list_rank("", 0), 0);
	assert_int_equal(bench_cpu_list_rank("x,y", 1), 0);
	assert_int_equal(bench_cpu_list_rank(NULL, 1), 0);
}

struct cpu_arg {
	int cpu[4];
};

static void cpu_thread(unsigned tid, unsigned nthreads, void *arg)
{
	struct cpu_arg *c = arg;

	(void)nthreads;
	c->cpu[tid] = sched_getcpu();
}

/* Pinned threads stay on the CPUs the process may use (taskset), and take
 * different CPUs while there are enough. */
static void pinned_threads_keep_to_the_allowed_cpus(void **state)
{
	cpu_set_t old, one;
	struct cpu_arg c;
	int last = -1;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(old), &old), 0);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &old))
			last = i;
	assert_true(last >= 0);
	CPU_ZERO(&one);
	CPU_SET(last, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	memset(&c, -1, sizeof(c));
	/* a new process's view: this test binary has pinned nothing before */
	int rc = bench_parallel(2, 1, cpu_thread, &c, NULL);
	assert_int_equal(sched_setaffinity(0, sizeof(old), &old), 0);
	assert_int_equal(rc, 0);
	assert_int_equal(c.cpu[0], last);
	assert_int_equal(c.cpu[1], last);
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
		cmocka_unit_test(cpu_list_rank_counts_the_cpus_before),
		cmocka_unit_test(pinned_threads_keep_to_the_allowed_cpus),
		cmocka_unit_test(memcpy_probe_reports_a_rate_and_latencies),
		cmocka_unit_test(buffer_alloc_is_page_aligned_and_written),
		cmocka_unit_test(tmpdir_is_removed_with_its_tree_but_not_link_targets),
		cmocka_unit_test(json_document_has_the_common_shape),
		cmocka_unit_test(json_maps_nan_to_null),
		cmocka_unit_test(fmt_real_says_n_a_for_what_was_not_measured),
		cmocka_unit_test(json_write_reports_an_unwritable_path),
		cmocka_unit_test(json_write_keeps_links_devices_and_fifos),
		cmocka_unit_test(stats_number_follows_dotted_paths),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
