/*
 * test_bench_ram.c - tests of the in-memory commands kvbench hash and
 * kvbench ram: the JSON results they write, the lookups' shared prefix and
 * scaling figures, and the lease goal read at 64-key chains.
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hash_writes_json_results),
		cmocka_unit_test(ram_writes_json_results),
		cmocka_unit_test(ram_lookups_share_a_prefix_and_report_scaling),
		cmocka_unit_test(ram_lease_goal_reads_64_key_chains),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
