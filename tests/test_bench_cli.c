/*
 * test_bench_cli.c - the kvbench program's command-line contract, common to
 * every command: bad command lines and --help of the subcommands, the demo
 * that runs them all, JSON alone on stdout, paths checked first, sizes and
 * lists in the library's grammar, one-line errors, unusable directories,
 * a stopped run keeping its results; and the manual pages' headers.
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

/* Sizes follow the library's grammar and its error text, in one line. */
static void cli_sizes_use_the_library_grammar(void **state)
{
	(void)state;
	expect_usage_error((const char *const[]){ "ram", "--no-copy", "--no-lookup", NULL },
			   "ram", "--no-copy and --no-lookup together leave nothing to measure");
	expect_usage_error((const char *const[]){ "ram", "--sizes", "1.5", NULL },
			   "ram", "a fraction needs a unit");
	expect_usage_error((const char *const[]){ "ram", "--volume", "2TiB", NULL },
			   "ram", "bad --volume '2TiB': from 1B to 64GiB");
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

/* kvbench --help names --version; the demo without a disk tier prints '-'
 * for the phases with nothing timed, not nan (its JSON has null). */
static void cli_prints_no_nan_and_names_version(void **state)
{
	struct proc p;

	(void)state;
	kvbench_run(&p, (const char *const[]){ "--help", NULL });
	assert_int_equal(p.status, 0);
	assert_non_null(strstr(p.out, "--version"));
	proc_free(&p);
	kvbench_run(&p, (const char *const[]){ DEMO_ARGS, NULL });
	assert_int_equal(p.status, 0);
	assert_non_null(strstr(p.out, "GB/s"));
	assert_null(strstr(p.out, "nan"));
	proc_free(&p);
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
		cmocka_unit_test(subcommands_reject_bad_command_lines),
		cmocka_unit_test(subcommands_print_help),
		cmocka_unit_test(demo_verifies_everything_and_writes_json),
		cmocka_unit_test(cli_json_stdout_is_json_alone_for_every_command),
		cmocka_unit_test(cli_bad_output_paths_exit_2_before_any_work),
		cmocka_unit_test(cli_sizes_use_the_library_grammar),
		cmocka_unit_test(cli_lists_refuse_empty_items),
		cmocka_unit_test(cli_errors_without_a_command_name_kvbench),
		cmocka_unit_test(cli_unusable_dir_is_an_error),
		cmocka_unit_test(cli_help_speaks_to_users),
		cmocka_unit_test(cli_prints_no_nan_and_names_version),
		cmocka_unit_test(cli_interrupted_run_keeps_its_results),
		cmocka_unit_test(man_pages_share_one_header),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
