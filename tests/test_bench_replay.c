/*
 * test_bench_replay.c - tests of the command lines of kvbench replay and
 * kvbench sweep (the simulator itself is tested in test_replay.c): options
 * refused with exit 2, the disk share of a sweep by difference, --seeds
 * showing the median seed's run, a sweep stopped in its first run, and
 * --csv written as --json is.
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
	/* the library's own bound (it failed in kvt_open, status 1) */
	expect_usage_error((const char *const[]){ "replay", "--threads", "65", NULL },
			   "replay", "bad --threads '65': an integer from 1 to 64");
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
	/* The calls made before the signal, as many as the table says: none
	 * when SIGTERM came before the first (the handler is in place before
	 * the workload is built, so it may). */
	json_t *calls = json_object_get(r, "calls");
	const char *row = strstr(p.out, "\n  calls ");
	assert_true(json_is_number(calls));
	assert_non_null(row);
	assert_int_equal((long long)json_number_value(calls), atoll(row + strlen("\n  calls ")));
	json_decref(doc);
	proc_free(&p);
	rm_rf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cli_bad_replay_options_exit_2),
		cmocka_unit_test(cli_csv_follows_links_and_owns_stdout),
		cmocka_unit_test(cli_interrupted_sweep_keeps_the_run_so_far),
		cmocka_unit_test(cli_seeds_show_the_median_seed_run),
		cmocka_unit_test(cli_sweep_gives_the_disk_share_by_difference),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
