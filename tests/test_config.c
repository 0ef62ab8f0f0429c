/*
 * test_config.c - unit tests of lib/config.c: defaults, every key of
 * kvtier-config(5), size strings, ranges, cross-checks and each class of
 * error (malformed JSON, top level, unknown key, wrong type, bad value,
 * unsupported feature), each naming its key path in kvt_last_error().
 * Leaks on error paths are caught by running this under ASan.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "peer.h"
#include "internal.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define TiB (1ull << 40)

/* Parses json, expects err, and expects needle in kvt_last_error(). */
static void expect_fail(const char *json, int err, const char *needle)
{
	struct kvt_config c;

	kvt_set_error("marker");
	int r = config_parse(json, &c);
	if (r != err)
		fail_msg("config %s: got %d (%s), expected %d", json, r,
			 kvt_last_error(), err);
	if (!strstr(kvt_last_error(), needle))
		fail_msg("config %s: error \"%s\" does not name \"%s\"", json,
			 kvt_last_error(), needle);
	/* nothing to free after a failure */
	assert_null(c.disk_paths);
	assert_int_equal(c.ndisk, 0);
	assert_null(c.peer_names);
	assert_int_equal(c.npeers, 0);
}

static void expect_ok(const char *json, struct kvt_config *c)
{
	int r = config_parse(json, c);
	if (r != 0)
		fail_msg("config %s: got %d (%s), expected success", json, r,
			 kvt_last_error());
}

static void assert_defaults(const struct kvt_config *c)
{
	assert_int_equal(c->ram_capacity, GiB);
	assert_int_equal(c->lease_ms, 5000);
	assert_true(c->lease_cap == 0.5);
	assert_true(c->high_watermark == 0.95);
	assert_true(c->low_watermark == 0.85);
	assert_int_equal(c->hugepages, KVT_OFF);
	assert_int_equal(c->mlock, KVT_TRY);
	assert_int_equal(c->numa_node, -1);
	assert_int_equal(c->max_block, 256 * MiB);
	assert_int_equal(c->refuse_when_leased, 0);
	assert_int_equal(c->threads, 2);
	assert_int_equal(c->ndisk, 0);
	assert_null(c->disk_paths);
	assert_int_equal(c->disk_capacity, 0);
	assert_int_equal(c->region_size, 64 * MiB);
	assert_int_equal(c->queue_depth, 32);
	assert_int_equal(c->write_policy, KVT_WRITE_ON_EVICT);
	assert_int_equal(c->promote, 1);
	assert_int_equal(c->stage_reads, KVT_STAGE_AUTO);
	assert_int_equal(c->flush_on_close, 1);
}

/* --- defaults and keys ----------------------------------------------------- */

static void test_null_and_empty_text_give_defaults(void **state)
{
	(void)state;
	struct kvt_config c;

	memset(&c, 0x5a, sizeof(c));
	assert_int_equal(config_parse(NULL, &c), 0);
	assert_defaults(&c);
	memset(&c, 0x5a, sizeof(c));
	assert_int_equal(config_parse("", &c), 0);
	assert_defaults(&c);
	expect_ok("{}", &c);
	assert_defaults(&c);
	expect_ok(" { \"ram\": {}, \"disk\": {} } ", &c);
	assert_defaults(&c);
	config_free(&c);
}

static void test_every_key_is_applied(void **state)
{
	(void)state;
	struct kvt_config c;

	expect_ok("{\"ram\": {\"capacity\": \"8GiB\", \"lease_ms\": 250,"
		  " \"lease_cap\": 0.25, \"high_watermark\": 0.9,"
		  " \"low_watermark\": 0.7, \"hugepages\": \"try\","
		  " \"mlock\": false, \"numa_node\": 1, \"max_block\": \"16MiB\","
		  " \"refuse_when_leased\": true},"
		  " \"threads\": 8,"
		  " \"disk\": {\"path\": \"/dev/nvme0n1\", \"capacity\": \"1TiB\","
		  " \"region_size\": \"128MiB\", \"queue_depth\": 64,"
		  " \"write_policy\": \"write_through\", \"promote\": false,"
		  " \"stage_reads\": false, \"flush_on_close\": false}}",
		  &c);
	assert_int_equal(c.ram_capacity, 8 * GiB);
	assert_int_equal(c.lease_ms, 250);
	assert_true(c.lease_cap == 0.25);
	assert_true(c.high_watermark == 0.9);
	assert_true(c.low_watermark == 0.7);
	assert_int_equal(c.hugepages, KVT_TRY);
	assert_int_equal(c.mlock, KVT_OFF);
	assert_int_equal(c.numa_node, 1);
	assert_int_equal(c.max_block, 16 * MiB);
	assert_int_equal(c.refuse_when_leased, 1);
	assert_int_equal(c.threads, 8);
	assert_int_equal(c.ndisk, 1);
	assert_string_equal(c.disk_paths[0], "/dev/nvme0n1");
	assert_int_equal(c.disk_capacity, TiB);
	assert_int_equal(c.region_size, 128 * MiB);
	assert_int_equal(c.queue_depth, 64);
	assert_int_equal(c.write_policy, KVT_WRITE_THROUGH);
	assert_int_equal(c.promote, 0);
	assert_int_equal(c.stage_reads, KVT_STAGE_OFF);
	assert_int_equal(c.flush_on_close, 0);
	config_free(&c);
	assert_null(c.disk_paths);
	expect_ok("{\"disk\": {\"path\": \"/x\", \"capacity\": \"1GiB\", \"stage_reads\": true}}", &c);
	assert_int_equal(c.stage_reads, KVT_STAGE_ON);
	config_free(&c);
	expect_ok("{\"disk\": {\"path\": \"/x\", \"capacity\": \"1GiB\", \"stage_reads\": \"auto\"}}", &c);
	assert_int_equal(c.stage_reads, KVT_STAGE_AUTO);
	config_free(&c);
	assert_int_equal(c.ndisk, 0);
}

static void test_tri_state_keys_take_bool_or_try(void **state)
{
	(void)state;
	struct kvt_config c;

	expect_ok("{\"ram\": {\"hugepages\": true, \"mlock\": true}}", &c);
	assert_int_equal(c.hugepages, KVT_REQUIRE);
	assert_int_equal(c.mlock, KVT_REQUIRE);
	expect_ok("{\"ram\": {\"hugepages\": false, \"mlock\": \"try\"}}", &c);
	assert_int_equal(c.hugepages, KVT_OFF);
	assert_int_equal(c.mlock, KVT_TRY);
	expect_fail("{\"ram\": {\"hugepages\": \"yes\"}}", -EINVAL,
		    "ram.hugepages: \"yes\" is not true, false or \"try\"");
	expect_fail("{\"ram\": {\"mlock\": 1}}", -EINVAL,
		    "ram.mlock: expected true, false or \"try\", got an integer");
}

static void test_write_policy_takes_its_two_names(void **state)
{
	(void)state;
	struct kvt_config c;

	expect_ok("{\"disk\": {\"path\": \"/tmp/x\", \"capacity\": \"1GiB\","
		  " \"write_policy\": \"on_evict\"}}", &c);
	assert_int_equal(c.write_policy, KVT_WRITE_ON_EVICT);
	config_free(&c);
	expect_fail("{\"disk\": {\"path\": \"/tmp/x\", \"capacity\": \"1GiB\","
		    " \"write_policy\": \"write_back\"}}", -EINVAL,
		    "disk.write_policy: \"write_back\"");
	expect_fail("{\"disk\": {\"path\": \"/tmp/x\", \"capacity\": \"1GiB\","
		    " \"write_policy\": null}}", -EINVAL,
		    "disk.write_policy: expected \"on_evict\" or \"write_through\", got null");
}

static void test_disk_path_takes_string_or_array(void **state)
{
	(void)state;
	struct kvt_config c;

	expect_ok("{\"disk\": {\"path\": [\"/dev/nvme0n1\", \"/dev/nvme1n1\","
		  " \"/mnt/x/cache\"], \"capacity\": \"3TB\"}}", &c);
	assert_int_equal(c.ndisk, 3);
	assert_string_equal(c.disk_paths[0], "/dev/nvme0n1");
	assert_string_equal(c.disk_paths[1], "/dev/nvme1n1");
	assert_string_equal(c.disk_paths[2], "/mnt/x/cache");
	assert_int_equal(c.disk_capacity, 3 * TiB);
	config_free(&c);
	config_free(&c); /* twice is harmless */

	expect_fail("{\"disk\": {\"path\": [], \"capacity\": \"1GiB\"}}",
		    -EINVAL, "disk.path: empty array");
	expect_fail("{\"disk\": {\"path\": \"\", \"capacity\": \"1GiB\"}}",
		    -EINVAL, "disk.path: empty path");
	expect_fail("{\"disk\": {\"path\": [\"/a\", \"/b\", 7], \"capacity\": \"1GiB\"}}",
		    -EINVAL, "disk.path[2]: expected a string");
	expect_fail("{\"disk\": {\"path\": [\"/a\", \"\"], \"capacity\": \"1GiB\"}}",
		    -EINVAL, "disk.path[1]: empty path");
	expect_fail("{\"disk\": {\"path\": [\"/a\", \"/b\", \"/a\"], \"capacity\": \"1GiB\"}}",
		    -EINVAL, "disk.path[2]: \"/a\" is listed twice");
	expect_fail("{\"disk\": {\"path\": {\"x\": 1}, \"capacity\": \"1GiB\"}}",
		    -EINVAL, "disk.path: expected a string or an array of strings, got an object");

	/* 65 paths: one more than the limit */
	char json[2048];
	size_t n = (size_t)snprintf(json, sizeof(json), "{\"disk\": {\"capacity\": \"1TiB\", \"path\": [");
	for (int i = 0; i < 65; i++)
		n += (size_t)snprintf(json + n, sizeof(json) - n, "%s\"/d%d\"",
				      i ? "," : "", i);
	snprintf(json + n, sizeof(json) - n, "]}}");
	expect_fail(json, -EINVAL, "disk.path: 65 paths, the limit is 64");
}

static void test_man_page_examples_parse(void **state)
{
	(void)state;
	struct kvt_config c;

	/* the two EXAMPLES of kvtier-config(5) */
	expect_ok("{\n  \"ram\": {\n    \"capacity\": \"64GiB\",\n"
		  "    \"hugepages\": \"try\",\n    \"mlock\": true,\n"
		  "    \"numa_node\": 1,\n    \"lease_ms\": 3000,\n"
		  "    \"lease_cap\": 0.25\n  },\n  \"threads\": 4\n}\n", &c);
	assert_int_equal(c.ram_capacity, 64 * GiB);
	assert_int_equal(c.hugepages, KVT_TRY);
	assert_int_equal(c.mlock, KVT_REQUIRE);
	assert_int_equal(c.numa_node, 1);
	assert_int_equal(c.lease_ms, 3000);
	assert_int_equal(c.threads, 4);
	assert_int_equal(c.ndisk, 0);

	expect_ok("{\n  \"ram\": { \"capacity\": \"32GiB\", \"max_block\": \"16MiB\" },\n"
		  "  \"disk\": {\n    \"path\": [\"/dev/nvme0n1\", \"/dev/nvme1n1\"],\n"
		  "    \"capacity\": \"3.5TiB\",\n    \"region_size\": \"256MiB\",\n"
		  "    \"queue_depth\": 64,\n    \"write_policy\": \"on_evict\",\n"
		  "    \"promote\": true\n  }\n}\n", &c);
	assert_int_equal(c.ram_capacity, 32 * GiB);
	assert_int_equal(c.max_block, 16 * MiB);
	assert_int_equal(c.ndisk, 2);
	assert_int_equal(c.disk_capacity, 3 * TiB + TiB / 2);
	assert_int_equal(c.region_size, 256 * MiB);
	assert_int_equal(c.queue_depth, 64);
	config_free(&c);
}

/* --- sizes ------------------------------------------------------------------ */

static void test_parse_size_accepts_units_and_fractions(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		uint64_t v;
	} ok[] = {
		{ "0", 0 },
		{ "4096", 4096 },
		{ "1B", 1 },
		{ "7 b", 7 },
		{ "1K", KiB },
		{ "1KB", KiB },
		{ "1KiB", KiB },
		{ "3k", 3 * KiB },
		{ "2M", 2 * MiB },
		{ "2MB", 2 * MiB },
		{ "2MiB", 2 * MiB },
		{ "3G", 3 * GiB },
		{ "3GB", 3 * GiB },
		{ "3GiB", 3 * GiB },
		{ "16 gib", 16 * GiB },
		{ "1T", TiB },
		{ "1TB", TiB },
		{ "2TiB", 2 * TiB },
		{ "1.5GiB", 1610612736ull },
		{ "0.5K", 512 },
		{ "1.3K", 1331 }, /* 1331.2 bytes, rounded down */
		{ "0.25 MiB", 256 * KiB },
		{ "1.000000000000000000001T", TiB },
		{ "18446744073709551615", UINT64_MAX },
		{ "16777215.999999TiB", 18446744073708452104ull },
		{ "16777215.9999999999TiB", 18446744073709551506ull },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t v = 12345;
		if (parse_size(ok[i].s, &v) != 0)
			fail_msg("parse_size(\"%s\") failed: %s", ok[i].s,
				 kvt_last_error());
		if (v != ok[i].v)
			fail_msg("parse_size(\"%s\") = %llu, expected %llu",
				 ok[i].s, (unsigned long long)v,
				 (unsigned long long)ok[i].v);
	}
}

static void test_parse_size_rejects_bad_strings(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		const char *why;
	} bad[] = {
		{ "", "empty" },
		{ "-1", "negative" },
		{ "-1GiB", "negative" },
		{ "abc", "not a number" },
		{ "GiB", "not a number" },
		{ " 1G", "not a number" },
		{ ".5G", "not a number" },
		{ "1X", "unknown unit \"X\"" },
		{ "1 PiB", "unknown unit \"PiB\"" },
		{ "1KiBs", "unknown unit" },
		{ "1G ", "unknown unit" },
		{ "1048576 ", "unknown unit \" \"" },
		{ "1048576B ", "unknown unit" },
		{ "1.5 ", "unknown unit" },
		{ "1e3", "unknown unit" },
		{ "1.", "after the decimal point" },
		{ "1.G", "after the decimal point" },
		{ "1.5", "a fraction needs a unit" },
		{ "1.5B", "a fraction needs a unit" },
		{ "18446744073709551616", "too large" },
		{ "16777216TiB", "too large" },
		{ "16777216.5TiB", "too large" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 12345;
		kvt_set_error("marker");
		if (parse_size(bad[i].s, &v) != -EINVAL)
			fail_msg("parse_size(\"%s\") accepted: %llu", bad[i].s,
				 (unsigned long long)v);
		assert_int_equal(v, 12345);
		if (!strstr(kvt_last_error(), bad[i].why))
			fail_msg("parse_size(\"%s\"): \"%s\" lacks \"%s\"",
				 bad[i].s, kvt_last_error(), bad[i].why);
	}
	uint64_t v;
	assert_int_equal(parse_size(NULL, &v), -EINVAL);
	assert_int_equal(parse_size("1G", NULL), -EINVAL);
}

static void test_sizes_take_integers_or_strings(void **state)
{
	(void)state;
	struct kvt_config c;

	expect_ok("{\"ram\": {\"capacity\": 1048576}}", &c);
	assert_int_equal(c.ram_capacity, MiB);
	expect_ok("{\"ram\": {\"capacity\": \"2 GB\"}}", &c);
	assert_int_equal(c.ram_capacity, 2 * GiB);
	expect_ok("{\"ram\": {\"capacity\": \"3221225472\"}}", &c);
	assert_int_equal(c.ram_capacity, 3 * GiB);

	expect_fail("{\"ram\": {\"capacity\": -1}}", -EINVAL,
		    "ram.capacity: -1 is negative");
	expect_fail("{\"ram\": {\"capacity\": 1.5}}", -EINVAL,
		    "ram.capacity: expected a size");
	expect_fail("{\"ram\": {\"capacity\": \"4 parsecs\"}}", -EINVAL,
		    "ram.capacity: \"4 parsecs\": unknown unit \"parsecs\"");
	expect_fail("{\"ram\": {\"capacity\": \"1.5\"}}", -EINVAL,
		    "ram.capacity: \"1.5\": a fraction needs a unit");
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": \"99999999TiB\"}}",
		    -EINVAL, "disk.capacity: \"99999999TiB\": too large");
	expect_fail("{\"ram\": {\"max_block\": true}}", -EINVAL,
		    "ram.max_block: expected a size");
}

/* --- ranges ------------------------------------------------------------------- */

static void test_ranges_are_enforced_at_their_bounds(void **state)
{
	(void)state;
	struct kvt_config c;

	expect_ok("{\"ram\": {\"capacity\": \"1MiB\"}}", &c);
	expect_fail("{\"ram\": {\"capacity\": 1048575}}", -EINVAL,
		    "ram.capacity: 1048575 bytes is below the minimum of 1 MiB");

	expect_ok("{\"ram\": {\"lease_ms\": 1}}", &c);
	expect_ok("{\"ram\": {\"lease_ms\": 3600000}}", &c);
	assert_int_equal(c.lease_ms, 3600000);
	expect_fail("{\"ram\": {\"lease_ms\": 0}}", -EINVAL,
		    "ram.lease_ms: 0 is out of range (1 to 3600000)");
	expect_fail("{\"ram\": {\"lease_ms\": 3600001}}", -EINVAL, "ram.lease_ms");

	expect_ok("{\"ram\": {\"lease_cap\": 1}}", &c);
	expect_fail("{\"ram\": {\"lease_cap\": 0}}", -EINVAL, "ram.lease_cap: 0 is not a fraction");
	expect_fail("{\"ram\": {\"lease_cap\": 1.01}}", -EINVAL, "ram.lease_cap");

	expect_ok("{\"ram\": {\"high_watermark\": 1, \"low_watermark\": 0.01}}", &c);
	expect_fail("{\"ram\": {\"high_watermark\": 1.5}}", -EINVAL, "ram.high_watermark: 1.5");
	expect_fail("{\"ram\": {\"high_watermark\": 0}}", -EINVAL, "ram.high_watermark: 0");
	expect_fail("{\"ram\": {\"low_watermark\": 0}}", -EINVAL, "ram.low_watermark: 0");
	expect_fail("{\"ram\": {\"low_watermark\": 1}}", -EINVAL, "ram.low_watermark: 1");
	expect_fail("{\"ram\": {\"low_watermark\": 0.95}}", -EINVAL,
		    "ram.low_watermark: 0.95 must be below ram.high_watermark (0.95)");
	expect_fail("{\"ram\": {\"high_watermark\": 0.5}}", -EINVAL,
		    "must be below ram.high_watermark (0.5)");

	expect_ok("{\"ram\": {\"numa_node\": 1023}}", &c);
	expect_ok("{\"ram\": {\"numa_node\": -1}}", &c);
	expect_fail("{\"ram\": {\"numa_node\": -2}}", -EINVAL, "ram.numa_node: -2 is out of range");
	expect_fail("{\"ram\": {\"numa_node\": 1024}}", -EINVAL, "ram.numa_node");

	expect_ok("{\"threads\": 1}", &c);
	expect_ok("{\"threads\": 64}", &c);
	expect_fail("{\"threads\": 0}", -EINVAL, "threads: 0 is out of range (1 to 64)");
	expect_fail("{\"threads\": 65}", -EINVAL, "threads: 65");
	expect_fail("{\"threads\": 9999999999999}", -EINVAL, "threads: 9999999999999");

	const char *d = "{\"disk\": {\"path\": \"/x\", \"capacity\": \"1TiB\", ";
	char j[256];
	snprintf(j, sizeof(j), "%s\"queue_depth\": 1}}", d);
	expect_ok(j, &c);
	config_free(&c);
	snprintf(j, sizeof(j), "%s\"queue_depth\": 4096}}", d);
	expect_ok(j, &c);
	config_free(&c);
	snprintf(j, sizeof(j), "%s\"queue_depth\": 0}}", d);
	expect_fail(j, -EINVAL, "disk.queue_depth: 0 is out of range (1 to 4096)");
	snprintf(j, sizeof(j), "%s\"queue_depth\": 4097}}", d);
	expect_fail(j, -EINVAL, "disk.queue_depth");

	snprintf(j, sizeof(j), "%s\"region_size\": \"1MiB\"}}", d);
	expect_ok(j, &c);
	config_free(&c);
	snprintf(j, sizeof(j), "%s\"region_size\": \"4GiB\"}}", d);
	expect_ok(j, &c);
	config_free(&c);
	snprintf(j, sizeof(j), "%s\"region_size\": \"512KiB\"}}", d);
	expect_fail(j, -EINVAL, "disk.region_size: 524288 bytes is not a multiple of 4096 between 1 MiB and 4 GiB");
	snprintf(j, sizeof(j), "%s\"region_size\": 1052672}}", d); /* 1 MiB + 4 KiB: fine */
	expect_ok(j, &c);
	config_free(&c);
	snprintf(j, sizeof(j), "%s\"region_size\": 1048577}}", d);
	expect_fail(j, -EINVAL, "disk.region_size: 1048577");
	snprintf(j, sizeof(j), "%s\"region_size\": 4294971392}}", d);
	expect_fail(j, -EINVAL, "disk.region_size: 4294971392");
}

static void test_disk_needs_path_and_enough_capacity(void **state)
{
	(void)state;
	struct kvt_config c;

	expect_fail("{\"disk\": {\"capacity\": \"1TiB\"}}", -EINVAL,
		    "disk.path: missing, but disk.capacity is given");
	expect_fail("{\"disk\": {\"promote\": false}}", -EINVAL,
		    "disk.path: missing, but disk.promote is given");
	expect_fail("{\"disk\": {\"path\": \"/x\"}}", -EINVAL,
		    "disk.capacity: required when disk.path is given");
	/* two regions is the least a log of regions can work with */
	expect_ok("{\"disk\": {\"path\": \"/x\", \"capacity\": \"128MiB\","
		  " \"region_size\": \"64MiB\"}}", &c);
	assert_int_equal(c.disk_capacity, 128 * MiB);
	config_free(&c);
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": 134217727,"
		    " \"region_size\": \"64MiB\"}}",
		    -EINVAL, "disk.capacity: 134217727 bytes is less than two regions (disk.region_size 67108864)");
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": \"64MiB\","
		    " \"region_size\": \"64MiB\"}}", -EINVAL, "less than two regions");
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": \"2MiB\"}}",
		    -EINVAL, "disk.capacity: 2097152 bytes is less than two regions (disk.region_size 1064960)");
}

/* Without disk.region_size a small tier gets smaller regions, about eight
 * to a device where 1 MiB allows, each a power of two and 1/64 for the
 * record headers; max_block follows them; a given region size is kept, and
 * a given max_block keeps the region that holds it. */
static void test_small_disks_get_small_regions(void **state)
{
	(void)state;
	static const struct { const char *cap; uint64_t region; } want[] = {
		{ "3MiB", MiB + 16384 }, { "8MiB", MiB + 16384 },
		{ "16MiB", 2 * MiB + 32768 }, { "64MiB", 8 * MiB + 131072 },
		{ "128MiB", 16 * MiB + 262144 }, { "511MiB", 32 * MiB + 524288 },
		{ "512MiB", 64 * MiB }, { "1GiB", 64 * MiB }, { "1TiB", 64 * MiB },
	};
	struct kvt_config c;
	char j[256];

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		snprintf(j, sizeof(j), "{\"disk\": {\"path\": \"/x\", \"capacity\": \"%s\"}}",
			 want[i].cap);
		expect_ok(j, &c);
		assert_int_equal(c.region_size, want[i].region);
		assert_int_equal(c.max_block, want[i].region - 4096);
		config_free(&c);
	}
	/* eight to each device of a stripe */
	expect_ok("{\"disk\": {\"path\": [\"/x\", \"/y\"], \"capacity\": \"128MiB\"}}", &c);
	assert_int_equal(c.region_size, 8 * MiB + 131072);
	config_free(&c);
	/* a given region size stays */
	expect_ok("{\"disk\": {\"path\": \"/x\", \"capacity\": \"64MiB\","
		  " \"region_size\": \"32MiB\"}}", &c);
	assert_int_equal(c.region_size, 32 * MiB);
	config_free(&c);
	/* a given max_block keeps the region that holds it */
	expect_ok("{\"ram\": {\"max_block\": \"6MiB\"}, \"disk\": {\"path\": \"/x\","
		  " \"capacity\": \"64MiB\"}}", &c);
	assert_int_equal(c.region_size, 8 * MiB + 131072);
	assert_int_equal(c.max_block, 6 * MiB);
	config_free(&c);
	expect_ok("{\"ram\": {\"max_block\": \"12MiB\"}, \"disk\": {\"path\": \"/x\","
		  " \"capacity\": \"64MiB\"}}", &c);
	assert_int_equal(c.region_size, 16 * MiB + 262144);
	config_free(&c);
}

static void test_max_block_defaults_to_what_fits(void **state)
{
	(void)state;
	struct kvt_config c;

	/* default 256 MiB, lowered to the RAM capacity, and without a disk
	 * tier to its high watermark (0.95 by default), in 4 KiB units ... */
	expect_ok("{\"ram\": {\"capacity\": \"64MiB\"}}", &c);
	assert_int_equal(c.max_block, (uint64_t)(64 * MiB * 0.95) / 4096 * 4096);
	expect_ok("{\"ram\": {\"capacity\": \"64MiB\", \"high_watermark\": 1.0}}", &c);
	assert_int_equal(c.max_block, 64 * MiB);
	/* ... and to a disk region less its record header */
	expect_ok("{\"disk\": {\"path\": \"/x\", \"capacity\": \"1GiB\"}}", &c);
	assert_int_equal(c.max_block, 64 * MiB - 4096);
	config_free(&c);

	expect_ok("{\"ram\": {\"capacity\": \"64MiB\", \"max_block\": \"64MiB\"}}", &c);
	assert_int_equal(c.max_block, 64 * MiB);
	expect_ok("{\"ram\": {\"max_block\": 4096}}", &c);
	assert_int_equal(c.max_block, 4096);
	expect_fail("{\"ram\": {\"max_block\": 4095}}", -EINVAL,
		    "ram.max_block: 4095 bytes is below the minimum of 4096");
	expect_fail("{\"ram\": {\"capacity\": \"64MiB\", \"max_block\": \"65MiB\"}}",
		    -EINVAL, "ram.max_block: 68157440 bytes exceeds ram.capacity (67108864)");
	expect_fail("{\"ram\": {\"max_block\": \"16MiB\"}, \"disk\": {\"path\": \"/x\","
		    " \"capacity\": \"1GiB\", \"region_size\": \"16MiB\"}}", -EINVAL,
		    "ram.max_block: 16777216 bytes exceeds disk.region_size less its 4096-byte record header (16773120)");
}

/* A block above 256 MiB fits RAM and a large region but no disk record: with
 * a disk tier, ram.max_block above that is refused (such a block would be
 * acknowledged, then dropped when RAM evicts it); without one it is fine. */
static void test_max_block_is_what_the_disk_can_hold(void **state)
{
	(void)state;
	struct kvt_config c;

	expect_fail("{\"ram\": {\"capacity\": \"2GiB\", \"max_block\": \"260MiB\"},"
		    " \"disk\": {\"path\": \"/x\", \"capacity\": \"4GiB\","
		    " \"region_size\": \"1GiB\"}}", -EINVAL,
		    "ram.max_block: 272629760 bytes exceeds the largest block the disk tier holds (268435456)");
	expect_ok("{\"ram\": {\"capacity\": \"2GiB\", \"max_block\": \"256MiB\"},"
		  " \"disk\": {\"path\": \"/x\", \"capacity\": \"4GiB\","
		  " \"region_size\": \"1GiB\"}}", &c);
	assert_int_equal(c.max_block, 256 * MiB);
	config_free(&c);
	/* the default is what the disk holds */
	expect_ok("{\"ram\": {\"capacity\": \"2GiB\"}, \"disk\": {\"path\": \"/x\","
		  " \"capacity\": \"4GiB\", \"region_size\": \"1GiB\"}}", &c);
	assert_int_equal(c.max_block, 256 * MiB);
	config_free(&c);
	expect_ok("{\"ram\": {\"capacity\": \"2GiB\", \"max_block\": \"260MiB\"}}", &c);
	assert_int_equal(c.max_block, 260 * MiB);
	config_free(&c);
}

/* --- error classes ---------------------------------------------------------------- */

static void test_malformed_json_reports_line_and_column(void **state)
{
	(void)state;
	expect_fail("{\n  \"ram\": {,}\n}", -EINVAL, "config: malformed JSON at line 2, column");
	expect_fail("{\"ram\": {}", -EINVAL, "malformed JSON");
	expect_fail("{\"ram\": {}} trailing", -EINVAL, "malformed JSON");
	expect_fail("   ", -EINVAL, "malformed JSON");
	expect_fail("{\"ram\": {\"capacity\": }}", -EINVAL, "config: malformed JSON at line 1");
}

/* jansson refuses a key given twice and an integer past 64 bits as it
 * parses, but both concern one member of a well-formed document: the error
 * starts with that member's key path, as every other refused value's does
 * (kvtier-config(5)), not with "config: malformed JSON". */
static void test_json_refusals_of_a_member_name_its_key(void **state)
{
	(void)state;
	expect_fail("{\"threads\": 2, \"threads\": 3}", -EINVAL,
		    "threads: key given twice (line 1, column");
	expect_fail("{\"ram\": {\"capacity\": \"4M\", \"capacity\": \"8M\"}}", -EINVAL,
		    "ram.capacity: key given twice");
	expect_fail("{\"ram\": {\"capacity\": 18446744073709551615}}", -EINVAL,
		    "ram.capacity: 18446744073709551615 is out of range (line 1, column");
	expect_fail("{\"ram\": {\"lease_ms\": 5, \"pin_ms\": -99999999999999999999}}", -EINVAL,
		    "ram.pin_ms: -99999999999999999999 is out of range");
	expect_fail("{\"disk\": {\"path\": [\"/a\", \"/b\"],\n \"capacity\": 99999999999999999999}}",
		    -EINVAL, "disk.capacity: 99999999999999999999 is out of range (line 2, column");
	expect_fail("{\"ram\": {\"lease_cap\": 1e999}}", -EINVAL, "ram.lease_cap: 1e999 is out of range");
	expect_fail("{\"peers\": {\"members\": [{\"name\": \"a\"}, {\"name\": \"b\", \"addr\": \"x\", "
		    "\"addr\": \"y\"}]}}", -EINVAL, "peers.members[1].addr: key given twice");
	expect_fail("{\"r\\\"m\": {\"a\": [1, {}], \"a\": 2}}", -EINVAL, "r\\\"m.a: key given twice");
}

static void test_top_level_must_be_an_object(void **state)
{
	(void)state;
	expect_fail("[]", -EINVAL, "the top level must be a JSON object, got an array");
	expect_fail("42", -EINVAL, "got an integer");
	expect_fail("\"ram\"", -EINVAL, "got a string");
	expect_fail("null", -EINVAL, "got null");
}

static void test_unknown_keys_are_named(void **state)
{
	(void)state;
	expect_fail("{\"rma\": {}}", -EINVAL, "rma: unknown key");
	expect_fail("{\"ram\": {\"capacty\": \"1GiB\"}}", -EINVAL,
		    "ram.capacty: unknown key");
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": \"1GiB\", \"qd\": 3}}",
		    -EINVAL, "disk.qd: unknown key");
	expect_fail("{\"ram\": {\"capacity\": \"1GiB\"}, \"disk\": {\"paths\": [\"/x\"]}}",
		    -EINVAL, "disk.paths: unknown key");
}

static void test_wrong_types_are_named(void **state)
{
	(void)state;
	expect_fail("{\"ram\": 1}", -EINVAL, "ram: expected an object, got an integer");
	expect_fail("{\"disk\": \"/dev/nvme0n1\"}", -EINVAL, "disk: expected an object, got a string");
	expect_fail("{\"threads\": \"2\"}", -EINVAL, "threads: expected an integer, got a string");
	expect_fail("{\"threads\": 2.0}", -EINVAL, "threads: expected an integer, got a real number");
	expect_fail("{\"ram\": {\"lease_ms\": \"5s\"}}", -EINVAL, "ram.lease_ms: expected an integer");
	expect_fail("{\"ram\": {\"lease_cap\": \"half\"}}", -EINVAL, "ram.lease_cap: expected a number, got a string");
	expect_fail("{\"ram\": {\"refuse_when_leased\": 1}}", -EINVAL,
		    "ram.refuse_when_leased: expected true or false, got an integer");
	expect_fail("{\"ram\": {\"numa_node\": null}}", -EINVAL, "ram.numa_node: expected an integer, got null");
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": \"1GiB\", \"promote\": \"yes\"}}",
		    -EINVAL, "disk.promote: expected true or false, got a string");
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": \"1GiB\", \"flush_on_close\": 0}}",
		    -EINVAL, "disk.flush_on_close: expected true or false, got an integer");
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": \"1GiB\", \"stage_reads\": \"yes\"}}",
		    -EINVAL, "disk.stage_reads: \"yes\" is not true, false or \"auto\"");
	expect_fail("{\"disk\": {\"path\": \"/x\", \"capacity\": \"1GiB\", \"stage_reads\": 1}}",
		    -EINVAL, "disk.stage_reads: expected true, false or \"auto\", got an integer");
}

#define MEMBERS "\"members\": [{\"name\": \"a\", \"addr\": \"127.0.0.1:7001\"}, " \
		"{\"name\": \"b\", \"addr\": \"[::1]:7002\"}]"

static void test_peers_parse_with_defaults(void **state)
{
	struct kvt_config c;

	(void)state;
	expect_ok("{\"peers\": {\"self\": \"b\", " MEMBERS "}}", &c);
	assert_int_equal(c.npeers, 2);
	assert_int_equal(c.peer_self, 1);
	assert_string_equal(c.peer_names[0], "a");
	assert_string_equal(c.peer_addrs[1], "[::1]:7002");
	assert_string_equal(c.peer_listen, "[::1]:7002"); /* self's addr */
	assert_int_equal(c.peer_connect_ms, 500);
	assert_int_equal(c.peer_request_ms, 2000);
	assert_int_equal(c.peer_down_ms, 2000);
	assert_int_equal(c.peer_log_ms, 10000);
	assert_int_equal(c.peer_idle_ms, 60000);
	assert_int_equal(c.peer_max_conns, 64);
	assert_int_equal(c.peer_promote, 0);
	config_free(&c);
	assert_int_equal(c.npeers, 0);
	expect_ok("{\"peers\": {\"self\": \"a\", \"listen\": \"0.0.0.0:7001\", "
		  "\"transport\": \"tcp\", \"connect_timeout_ms\": 100, "
		  "\"request_timeout_ms\": 300, \"down_ms\": 50, \"log_interval_ms\": 70, "
		  "\"idle_timeout_ms\": 900, \"max_conns_per_member\": 3, \"promote\": true, "
		  MEMBERS "}}", &c);
	assert_string_equal(c.peer_listen, "0.0.0.0:7001");
	assert_int_equal(c.peer_connect_ms, 100);
	assert_int_equal(c.peer_request_ms, 300);
	assert_int_equal(c.peer_down_ms, 50);
	assert_int_equal(c.peer_log_ms, 70);
	assert_int_equal(c.peer_idle_ms, 900);
	assert_int_equal(c.peer_max_conns, 3);
	assert_int_equal(c.peer_promote, 1);
	config_free(&c);
}

static void test_peers_reject_bad_values(void **state)
{
	(void)state;
	expect_fail("{\"peers\": null}", -EINVAL, "peers");
	expect_fail("{\"peers\": {}}", -EINVAL, "peers.members: missing");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": []}}", -EINVAL,
		    "peers.members: empty");
	expect_fail("{\"peers\": {" MEMBERS "}}", -EINVAL, "peers.self: missing");
	expect_fail("{\"peers\": {\"self\": \"c\", " MEMBERS "}}", -EINVAL,
		    "peers.self: \"c\" is not");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [{\"name\": \"a\", "
		    "\"addr\": \"h:1\"}, {\"name\": \"a\", \"addr\": \"h:2\"}]}}", -EINVAL,
		    "peers.members[1].name: \"a\" is also member 0");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [{\"name\": \"a\", "
		    "\"addr\": \"nohost\"}]}}", -EINVAL, "peers.members[0].addr");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [{\"name\": \"a\", "
		    "\"addr\": \"h:0\"}]}}", -EINVAL, "port must be 1..65535");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [{\"name\": \"a\", "
		    "\"addr\": \"h:70000\"}]}}", -EINVAL, "port must be 1..65535");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [{\"name\": \"a\", "
		    "\"addr\": \"::1:5\"}]}}", -EINVAL, "[addr]:port");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [{\"name\": \"a\"}]}}",
		    -EINVAL, "peers.members[0].addr: missing");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [{\"name\": \"\", "
		    "\"addr\": \"h:1\"}]}}", -EINVAL, "peers.members[0].name: empty");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [{\"name\": \"a\", "
		    "\"addr\": \"h:1\", \"port\": 3}]}}", -EINVAL,
		    "peers.members[0].port: unknown key");
	expect_fail("{\"peers\": {\"self\": \"a\", \"members\": [7]}}", -EINVAL,
		    "peers.members[0]");
	expect_fail("{\"peers\": {\"self\": \"a\", \"down_ms\": 0, " MEMBERS "}}",
		    -EINVAL, "peers.down_ms");
	expect_fail("{\"peers\": {\"self\": \"a\", \"log_interval_ms\": 0, " MEMBERS "}}",
		    -EINVAL, "peers.log_interval_ms");
	expect_fail("{\"peers\": {\"self\": \"a\", \"log_interval_ms\": 600001, " MEMBERS "}}",
		    -EINVAL, "peers.log_interval_ms");
	expect_fail("{\"peers\": {\"self\": \"a\", \"promote\": 1, " MEMBERS "}}", -EINVAL,
		    "peers.promote");
	expect_fail("{\"peers\": {\"self\": \"a\", \"idle_timeout_ms\": 0, " MEMBERS "}}",
		    -EINVAL, "peers.idle_timeout_ms");
	expect_fail("{\"peers\": {\"self\": \"a\", \"idle_timeout_ms\": \"1s\", " MEMBERS "}}",
		    -EINVAL, "peers.idle_timeout_ms");
	expect_fail("{\"peers\": {\"self\": \"a\", \"max_conns_per_member\": 0, " MEMBERS "}}",
		    -EINVAL, "peers.max_conns_per_member");
	expect_fail("{\"peers\": {\"self\": \"a\", \"max_conns_per_member\": 1025, " MEMBERS "}}",
		    -EINVAL, "peers.max_conns_per_member");
	expect_fail("{\"peers\": {\"self\": \"a\", \"listen\": \"x\", " MEMBERS "}}",
		    -EINVAL, "peers.listen");
	expect_fail("{\"peers\": {\"self\": \"a\", \"transport\": \"udp\", " MEMBERS "}}",
		    -EINVAL, "peers.transport");
	expect_fail("{\"peers\": {\"self\": \"a\", \"mode\": 1, " MEMBERS "}}",
		    -EINVAL, "peers.mode: unknown key");
}

/* Whether a device serves "rdma" is kvt_open's to learn (test_peer_rdma). */
static void test_peers_transport_values(void **state)
{
	struct kvt_config c;
	const char *t[] = { "tcp", "rdma", "auto" };
	int want[] = { PEER_TCP, PEER_RDMA, PEER_AUTO };
	char json[256];

	(void)state;
	expect_ok("{\"peers\": {\"self\": \"a\", " MEMBERS "}}", &c);
	assert_int_equal(c.peer_transport, PEER_TCP);
	config_free(&c);
	for (int i = 0; i < 3; i++) {
		snprintf(json, sizeof(json), "{\"peers\": {\"self\": \"a\", \"transport\": "
			 "\"%s\", " MEMBERS "}}", t[i]);
		expect_ok(json, &c);
		assert_int_equal(c.peer_transport, want[i]);
		config_free(&c);
	}
	expect_fail("{\"peers\": {\"self\": \"a\", \"transport\": \"RDMA\", " MEMBERS "}}",
		    -EINVAL, "peers.transport: \"RDMA\" is not \"tcp\", \"rdma\" or \"auto\"");
	expect_fail("{\"peers\": {\"self\": \"a\", \"transport\": 1, " MEMBERS "}}",
		    -EINVAL, "peers.transport");
}

static void test_failure_resets_config_and_frees_paths(void **state)
{
	(void)state;
	struct kvt_config c;

	/* paths were copied before the error: they must not leak (ASan) */
	expect_fail("{\"disk\": {\"path\": [\"/a\", \"/b\"], \"capacity\": \"1GiB\"},"
		    " \"threads\": 0}", -EINVAL, "threads");
	expect_fail("{\"disk\": {\"path\": [\"/a\", \"/b\"]}}", -EINVAL, "disk.capacity");
	expect_fail("{\"disk\": {\"path\": \"/a\", \"capacity\": \"1GiB\"}, \"peers\": "
		    "{\"self\": \"z\", " MEMBERS "}}", -EINVAL, "peers.self");
	assert_int_equal(config_parse("{\"threads\": 0}", &c), -EINVAL);
	assert_defaults(&c);
	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"8GiB\"}, \"threads\": 0}", &c),
			 -EINVAL);
	assert_defaults(&c);
	assert_int_equal(config_parse("{}", NULL), -EINVAL);
}

static void test_config_free_is_safe_on_a_zeroed_config(void **state)
{
	(void)state;
	struct kvt_config c;

	memset(&c, 0, sizeof(c));
	config_free(&c);
	config_free(NULL);
	assert_null(c.disk_paths);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_null_and_empty_text_give_defaults),
		cmocka_unit_test(test_every_key_is_applied),
		cmocka_unit_test(test_tri_state_keys_take_bool_or_try),
		cmocka_unit_test(test_write_policy_takes_its_two_names),
		cmocka_unit_test(test_disk_path_takes_string_or_array),
		cmocka_unit_test(test_man_page_examples_parse),
		cmocka_unit_test(test_parse_size_accepts_units_and_fractions),
		cmocka_unit_test(test_parse_size_rejects_bad_strings),
		cmocka_unit_test(test_sizes_take_integers_or_strings),
		cmocka_unit_test(test_ranges_are_enforced_at_their_bounds),
		cmocka_unit_test(test_disk_needs_path_and_enough_capacity),
		cmocka_unit_test(test_small_disks_get_small_regions),
		cmocka_unit_test(test_max_block_defaults_to_what_fits),
		cmocka_unit_test(test_max_block_is_what_the_disk_can_hold),
		cmocka_unit_test(test_malformed_json_reports_line_and_column),
		cmocka_unit_test(test_json_refusals_of_a_member_name_its_key),
		cmocka_unit_test(test_top_level_must_be_an_object),
		cmocka_unit_test(test_unknown_keys_are_named),
		cmocka_unit_test(test_wrong_types_are_named),
		cmocka_unit_test(test_peers_parse_with_defaults),
		cmocka_unit_test(test_peers_reject_bad_values),
		cmocka_unit_test(test_peers_transport_values),
		cmocka_unit_test(test_failure_resets_config_and_frees_paths),
		cmocka_unit_test(test_config_free_is_safe_on_a_zeroed_config),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
