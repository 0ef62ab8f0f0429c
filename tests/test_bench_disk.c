/*
 * test_bench_disk.c - tests of kvbench disk: the JSON results it writes, a
 * run stopped before its first counted repetition (n/a, not a figure), and
 * fio stopped with kvbench, nothing left in --dir.
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
#include "bench_util.h"

static void disk_writes_json_results(void **state)
{
	static const char *const names[] = { "store_put_batch_spill",
					      "store_get_batch_cold",
					      "store_get_batch_async_cold", "spill_put",
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
	assert_int_equal(json_array_size(json_object_get(doc, "limits")), 7);
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
		/* the repetition as it ran: its figure and the passes around it,
		 * the better of which is the limit */
		json_t *pr = json_object_get(r, "per_rep");
		assert_int_equal(json_array_size(pr), 1);
		json_t *p0 = json_array_get(pr, 0);
		double b = json_number_value(json_object_get(p0, "limit_before"));
		double a = json_number_value(json_object_get(p0, "limit_after"));
		assert_true(b > 0 && a > 0);
		assert_true(json_number_value(json_object_get(p0, "value")) ==
			    json_number_value(json_object_get(r, "value")));
		assert_true((a > b ? a : b) == json_number_value(json_object_get(r, "limit_value")));
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(disk_writes_json_results),
		cmocka_unit_test(cli_interrupted_disk_prints_n_a),
		cmocka_unit_test(cli_stop_stops_fio),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
