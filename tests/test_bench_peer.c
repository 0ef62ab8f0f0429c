/*
 * test_bench_peer.c - tests of the commands that reach another store:
 * kvbench attach (a node store through its local socket) and kvbench peer
 * (two stores over TCP): their JSON results, their command lines, and an
 * attach that finds no node store naming the cause.
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
	/* its repetitions in the value's unit, bytes/s (they were GB/s) */
	assert_true(json_number_value(json_object_get(json_object_get(r, "reps"), "median")) ==
		    json_number_value(json_object_get(r, "value")));
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(attach_writes_json_results),
		cmocka_unit_test(peer_writes_json_results),
		cmocka_unit_test(cli_attach_failure_names_the_cause),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
