/*
 * test_memreg.c - caller memory registered with kvt_mem_register(): blocks
 * saved from and loaded into a registered range on a disk tier move as
 * io_uring fixed buffers and arrive intact, also as cold loads after a
 * reopen and through asynchronous batches; buffers outside any range (page
 * aligned, unaligned, or unaligned inside a range) take the plain or bounce
 * path with the same bytes; deregistration rules; bad arguments; the
 * limits on ranges; a store attached to a node store (no disk tier of its
 * own) keeps ranges too.
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

#include "kvtier.h"
#include "util.h"

#define KiB 1024u
#define BLK (64u * KiB)
#define NBLK 16u

static char *dir;

static int setup(void **state)
{
	(void)state;
	dir = make_temp_dir("memreg");
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rm_rf(dir);
	free(dir);
	return 0;
}

static kvt_store *open_ram(void)
{
	kvt_store *s = NULL;
	int rc = kvt_open("{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false}}", &s);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

/* A store whose puts are written through to a disk tier in dir/file. */
static kvt_store *open_disk(const char *file)
{
	char cfg[1024];
	kvt_store *s = NULL;
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false},"
		 " \"disk\": {\"path\": \"%s/%s\", \"capacity\": \"64MiB\","
		 " \"region_size\": \"4MiB\", \"queue_depth\": 16,"
		 " \"write_policy\": \"write_through\"}}", dir, file);
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

static void *pool_alloc(size_t len)
{
	void *p = NULL;
	assert_int_equal(posix_memalign(&p, 4096, len), 0);
	memset(p, 0, len);
	return p;
}

static void expect_err(int rc, int want, const char *word)
{
	assert_int_equal(rc, want);
	if (!strstr(kvt_last_error(), word))
		fail_msg("kvt_last_error() \"%s\" does not name \"%s\"", kvt_last_error(), word);
}

static void bad_arguments_fail_clearly(void **state)
{
	(void)state;
	kvt_store *s = open_ram();
	char *pool = pool_alloc(64 * KiB);
	uint64_t id = 0, id2 = 0;
	void *arena = NULL;
	size_t alen = 0;

	expect_err(kvt_mem_register(NULL, pool, 4096, 0, &id), -EINVAL, "store");
	expect_err(kvt_mem_register(s, NULL, 4096, 0, &id), -EINVAL, "base");
	expect_err(kvt_mem_register(s, pool, 0, 0, &id), -EINVAL, "len is 0");
	expect_err(kvt_mem_register(s, pool + 8, 4096, 0, &id), -EINVAL, "multiples");
	expect_err(kvt_mem_register(s, pool, 4000, 0, &id), -EINVAL, "multiples");
	expect_err(kvt_mem_register(s, pool, 4096, 1, &id), -EINVAL, "flags");
	expect_err(kvt_mem_register(s, pool, 4096, 0, NULL), -EINVAL, "id");
	assert_int_equal(kvt_arena(s, &arena, &alen), 0);
	expect_err(kvt_mem_register(s, (char *)arena + 4096, 4096, 0, &id), -EINVAL, "arena");

	assert_int_equal(kvt_mem_register(s, pool + 8 * KiB, 16 * KiB, 0, &id), 0);
	expect_err(kvt_mem_register(s, pool, 12 * KiB, 0, &id2), -EEXIST, "overlaps");
	expect_err(kvt_mem_register(s, pool + 20 * KiB, 8 * KiB, 0, &id2), -EEXIST, "overlaps");
	expect_err(kvt_mem_register(s, pool, 64 * KiB, 0, &id2), -EEXIST, "overlaps");
	/* Neighbours on either side are fine. */
	assert_int_equal(kvt_mem_register(s, pool, 8 * KiB, 0, &id2), 0);
	assert_int_not_equal(id, id2);
	assert_int_equal(kvt_mem_deregister(s, id2), 0);

	expect_err(kvt_mem_deregister(NULL, id), -EINVAL, "store");
	expect_err(kvt_mem_deregister(s, id + 100), -ENOENT, "no registered range");
	assert_int_equal(kvt_mem_deregister(s, id), 0);
	expect_err(kvt_mem_deregister(s, id), -ENOENT, "no registered range");
	/* The range is free again. */
	assert_int_equal(kvt_mem_register(s, pool, 64 * KiB, 0, &id), 0);
	kvt_close(s); /* ends the registration */
	free(pool);
}

static void too_many_registrations_fail_with_enospc(void **state)
{
	(void)state;
	kvt_store *s = open_ram();
	char *pool = pool_alloc(65 * 8 * KiB);
	uint64_t ids[65];

	for (int i = 0; i < 64; i++)
		assert_int_equal(kvt_mem_register(s, pool + i * 8 * KiB, 4096, 0, &ids[i]), 0);
	expect_err(kvt_mem_register(s, pool + 64 * 8 * KiB, 4096, 0, &ids[64]), -ENOSPC,
		   "too many");
	assert_int_equal(kvt_mem_deregister(s, ids[10]), 0);
	assert_int_equal(kvt_mem_register(s, pool + 64 * 8 * KiB, 4096, 0, &ids[64]), 0);
	for (int i = 0; i < 65; i++)
		if (i != 10)
			assert_int_equal(kvt_mem_deregister(s, ids[i]), 0);
	/* More than 64 GiB in all can never be registered (no memory is
	 * touched to find out). */
	expect_err(kvt_mem_register(s, pool, (size_t)65 << 30, 0, &ids[0]), -ENOSPC,
		   "bytes all ranges");
	kvt_close(s);
	free(pool);
}

static void fill_pool(char *pool, uint64_t from)
{
	for (unsigned i = 0; i < NBLK; i++)
		fill_block(test_key(from + i), pool + (size_t)i * BLK, BLK);
}

static void ops_over(kvt_op *ops, char *pool, uint64_t from)
{
	for (unsigned i = 0; i < NBLK; i++)
		ops[i] = (kvt_op){ .key = test_key(from + i), .buf = pool + (size_t)i * BLK,
				   .len = BLK };
}

static void check_ops(const kvt_op *ops, uint64_t from)
{
	for (unsigned i = 0; i < NBLK; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, BLK);
		if (!check_block(test_key(from + i), ops[i].buf, BLK))
			fail_msg("block %u came back wrong", i);
	}
}

/* The kernel took the registration (root or a high RLIMIT_MEMLOCK). */
static int fixed_ok(kvt_store *s)
{
	return store_stat(s, "disk", "mem_register_refusals") == 0;
}

static void registered_range_moves_disk_io_fixed_also_cold(void **state)
{
	(void)state;
	TEST_NEED_DISK();
	char *pool = pool_alloc(NBLK * BLK);
	kvt_op ops[NBLK];
	uint64_t id;

	kvt_store *s = open_disk("fixed");
	assert_int_equal(kvt_mem_register(s, pool, NBLK * BLK, 0, &id), 0);
	fill_pool(pool, 100);
	ops_over(ops, pool, 100);
	assert_int_equal(kvt_put_batch(s, ops, NBLK), 0);
	assert_int_equal(store_stat(s, "disk", "puts"), NBLK);
	if (fixed_ok(s))
		assert_true(store_stat(s, "disk", "mem_fixed_ios") >= NBLK);
	else
		assert_true(store_stat(s, "disk", "mem_plain_ios") >= NBLK);
	assert_int_equal(kvt_mem_deregister(s, id), 0);
	kvt_close(s);

	/* Cold: a fresh store over the same file, RAM empty, every load from disk. */
	memset(pool, 0, NBLK * BLK);
	s = open_disk("fixed");
	assert_int_equal(kvt_mem_register(s, pool, NBLK * BLK, 0, &id), 0);
	ops_over(ops, pool, 100);
	assert_int_equal(kvt_get_batch(s, ops, NBLK), 0);
	check_ops(ops, 100);
	assert_int_equal(store_stat(s, "disk", "hits"), NBLK);
	long long fixed = store_stat(s, "disk", "mem_fixed_ios");
	print_message("cold loads: %lld fixed ios, %lld registration refusals\n", fixed,
		      store_stat(s, "disk", "mem_register_refusals"));
	if (fixed_ok(s))
		assert_true(fixed >= NBLK);

	/* Asynchronous batches go the same way: puts of new blocks, then
	 * (after the RAM copies are removed) their loads. */
	fill_pool(pool, 200);
	ops_over(ops, pool, 200);
	kvt_batch *b = NULL;
	assert_int_equal(kvt_batch_submit(s, KVT_OP_PUT, ops, NBLK, &b), 0);
	assert_int_equal(kvt_batch_wait(b, -1), 0);
	assert_int_equal(kvt_batch_result(b), 0);
	kvt_batch_free(b);
	kvt_close(s);
	memset(pool, 0, NBLK * BLK);
	s = open_disk("fixed");
	assert_int_equal(kvt_mem_register(s, pool, NBLK * BLK, 0, &id), 0);
	ops_over(ops, pool, 200);
	assert_int_equal(kvt_batch_submit(s, KVT_OP_GET, ops, NBLK, &b), 0);
	assert_int_equal(kvt_batch_wait(b, -1), 0);
	assert_int_equal(kvt_batch_result(b), 0);
	kvt_batch_free(b);
	check_ops(ops, 200);
	if (fixed_ok(s))
		assert_true(store_stat(s, "disk", "mem_fixed_ios") >= NBLK);
	/* Nothing is in flight once the batches completed. */
	assert_int_equal(kvt_mem_deregister(s, id), 0);
	kvt_close(s);
	free(pool);
}

static void unregistered_buffers_keep_the_plain_and_bounce_paths(void **state)
{
	(void)state;
	TEST_NEED_DISK();
	char *pool = pool_alloc(NBLK * BLK + 4096);
	char *other = pool_alloc(NBLK * BLK + 4096);
	kvt_op ops[NBLK];
	uint64_t id;

	kvt_store *s = open_disk("plain");
	fill_pool(other, 300);
	ops_over(ops, other, 300);
	assert_int_equal(kvt_put_batch(s, ops, NBLK), 0);
	kvt_close(s);

	s = open_disk("plain");
	assert_int_equal(kvt_mem_register(s, pool, NBLK * BLK + 4096, 0, &id), 0);
	/* Half the blocks into page-aligned memory outside the range, half
	 * into unaligned addresses inside it (staged and copied: no fixed
	 * I/O may be issued for them). */
	memset(other, 0, NBLK * BLK);
	for (unsigned i = 0; i < NBLK; i++) {
		char *buf = i % 2 ? pool + 8 + (size_t)i * BLK : other + (size_t)i * BLK;
		ops[i] = (kvt_op){ .key = test_key(300 + i), .buf = buf, .len = BLK };
	}
	assert_int_equal(kvt_get_batch(s, ops, NBLK), 0);
	check_ops(ops, 300);
	assert_int_equal(store_stat(s, "disk", "mem_fixed_ios"), 0);
	assert_int_equal(store_stat(s, "disk", "mem_plain_ios"), 0);
	/* A single get into an unaligned buffer of no range: bounced. */
	size_t len = 0;
	assert_int_equal(kvt_remove(s, test_key(300)), 0);
	assert_int_equal(kvt_get(s, test_key(301), other + 1, BLK, &len), 0);
	assert_int_equal(len, BLK);
	assert_true(check_block(test_key(301), other + 1, BLK));
	assert_int_equal(kvt_mem_deregister(s, id), 0);
	kvt_close(s);
	free(pool);
	free(other);
}

static void attached_store_keeps_ranges_without_a_disk(void **state)
{
	(void)state;
	char cfg[512], sock[400];
	kvt_store *node = NULL, *a = NULL;
	char *pool = pool_alloc(NBLK * BLK);
	kvt_op ops[NBLK];
	void *arena = NULL;
	size_t alen = 0;
	uint64_t id;

	snprintf(sock, sizeof(sock), "%s/node.sock", dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false},"
		 " \"local\": {\"socket\": \"%s\"}}", sock);
	int rc = kvt_open(cfg, &node);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", sock);
	rc = kvt_open(cfg, &a);
	if (rc)
		fail_msg("attach: %s: %s", kvt_strerror(rc), kvt_last_error());
	/* The node store's arena as this process maps it is refused. */
	assert_int_equal(kvt_arena(a, &arena, &alen), 0);
	expect_err(kvt_mem_register(a, arena, 4096, 0, &id), -EINVAL, "arena");
	assert_int_equal(kvt_mem_register(a, pool, NBLK * BLK, 0, &id), 0);
	fill_pool(pool, 400);
	ops_over(ops, pool, 400);
	assert_int_equal(kvt_put_batch(a, ops, NBLK), 0);
	memset(pool, 0, NBLK * BLK);
	ops_over(ops, pool, 400);
	assert_int_equal(kvt_get_batch(a, ops, NBLK), 0);
	check_ops(ops, 400);
	assert_int_equal(kvt_mem_deregister(a, id), 0);
	expect_err(kvt_mem_deregister(a, id), -ENOENT, "no registered range");
	kvt_close(a);
	kvt_close(node);
	free(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bad_arguments_fail_clearly),
		cmocka_unit_test(too_many_registrations_fail_with_enospc),
		cmocka_unit_test(registered_range_moves_disk_io_fixed_also_cold),
		cmocka_unit_test(unregistered_buffers_keep_the_plain_and_bounce_paths),
		cmocka_unit_test(attached_store_keeps_ranges_without_a_disk),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
