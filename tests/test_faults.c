/*
 * test_faults.c - a store whose disk tier runs over a device that fails
 * (tests/faultdev.h wraps the real io_uring one, through store_dev_ops):
 * failed spills, write-arounds and reads, a read whose bytes change after
 * the device wrote them, a device that reports itself full, a queue that
 * breaks, and a close whose writes fail. Whatever fails, a get returns the
 * block's own bytes or an error, never other bytes, and the store stays
 * usable once the device recovers.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "faultdev.h"
#include "kvtier.h"
#include "store_impl.h"
#include "util.h"

#define MiB (1024u * 1024u)

static char *dir;

static void faults_clear(void)
{
	atomic_store(&faults.fail_reads, 0);
	atomic_store(&faults.fail_writes, 0);
	atomic_store(&faults.short_reads, 0);
	atomic_store(&faults.break_reaps, 0);
	atomic_store(&faults.scribble_len, 0);
	atomic_store(&faults.fail_errno, 0);
	atomic_store(&faults.broken_used, 0);
}

/* Each test starts with the device well, whatever the one before left. */
static int setup(void **state)
{
	(void)state;
	faults_clear();
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	dir = make_temp_dir("faults");
	return dir ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	faults_clear();
	rm_rf(dir);
	free(dir);
	return 0;
}

/* A store of ram_mib MiB of RAM over a disk_mib MiB disk tier (4 MiB
 * regions) in file, its device the fault layer. */
static kvt_store *open_faulty(const char *file, unsigned ram_mib, unsigned disk_mib,
			      const char *disk_extra)
{
	char cfg[1024];
	kvt_store *s = NULL;

	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"%uMiB\", \"lease_ms\": 60000,"
		 " \"lease_cap\": 1.0, \"high_watermark\": 1.0, \"low_watermark\": 0.99, \"mlock\": false},"
		 " \"disk\": {\"path\": \"%s/%s\", \"capacity\": \"%uMiB\","
		 " \"region_size\": \"4MiB\", \"queue_depth\": 8%s}}",
		 ram_mib, dir, file, disk_mib, disk_extra);
	store_dev_ops = &fops;
	int rc = kvt_open(cfg, &s);
	store_dev_ops = NULL;
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

static kvt_store *open_faulty_file(const char *file)
{
	return open_faulty(file, 4, 64, "");
}

/* Puts block i (len bytes, its bytes from fill_block); returns the put's
 * result. */
static int put_block(kvt_store *s, uint64_t i, size_t len)
{
	void *b = malloc(len);

	assert_non_null(b);
	fill_block(test_key(i), b, len);
	int rc = kvt_put(s, test_key(i), b, len);
	free(b);
	return rc;
}

/* 1 when the store holds key i, in any tier (a lookup without lease). */
static int found(kvt_store *s, uint64_t i)
{
	kvt_key k = test_key(i);
	size_t n = 0;

	assert_int_equal(kvt_lookup(s, &k, 1, 0, &n), 0);
	return n == 1;
}

/*
 * Spills whose writes fail: RAM drops the blocks it could not write (they
 * read as misses afterwards), never keeps or returns other bytes, and
 * counts the failures; once the device writes again, spills and their
 * loads work as before.
 */
static void spill_failures_lose_blocks_not_bytes(void **state)
{
	(void)state;
	kvt_store *s = open_faulty_file("spill.dat");

	atomic_store(&faults.fail_writes, 1000);
	for (uint64_t i = 0; i < 16; i++) {
		int rc = put_block(s, i, MiB);
		assert_true(rc == 0 || rc == -EIO);
	}
	int failed = 1000 - atomic_load(&faults.fail_writes);
	print_message("writes failed: %d\n", failed);
	assert_true(failed > 0);
	atomic_store(&faults.fail_writes, 0);
	int lost = 0;
	for (uint64_t i = 0; i < 16; i++) {
		int rc = store_get_block(s, test_key(i), MiB); /* checks bytes */
		assert_true(rc == 0 || rc == -ENOENT);
		lost += rc == -ENOENT;
		assert_int_equal(found(s, i), rc == 0);
	}
	assert_true(lost > 0);
	assert_true(store_stat(s, "ram", "spill_failures") > 0 && store_stat(s, "disk", "io_errors") > 0);

	/* the device recovered: blocks spill and come back */
	for (uint64_t i = 100; i < 116; i++)
		assert_int_equal(put_block(s, i, MiB), 0);
	for (uint64_t i = 100; i < 116; i++)
		assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
	assert_true(store_stat(s, "store", "hits_disk") >= 8);
	kvt_close(s);
}

/*
 * A write-around that fails (RAM holds only leased blocks, so the put goes
 * to the disk directly) fails the put with -EIO and stores nothing.
 */
static void write_around_failure_fails_the_put(void **state)
{
	(void)state;
	kvt_store *s = open_faulty("around.dat", 2, 64, "");
	kvt_key keys[2] = { test_key(0), test_key(1) };
	size_t n = 0;

	assert_int_equal(put_block(s, 0, MiB), 0);
	assert_int_equal(put_block(s, 1, MiB), 0);
	assert_int_equal(kvt_lookup(s, keys, 2, KVT_LEASE, &n), 0);
	assert_int_equal(n, 2);
	atomic_store(&faults.fail_writes, 1000);
	assert_int_equal(put_block(s, 50, MiB), -EIO);
	atomic_store(&faults.fail_writes, 0);
	assert_int_equal(store_stat(s, "store", "write_arounds"), 0);
	assert_int_equal(store_get_block(s, test_key(50), MiB), -ENOENT);
	assert_int_equal(found(s, 50), 0);
	/* and works once the device does */
	assert_int_equal(put_block(s, 51, MiB), 0);
	assert_int_equal(store_stat(s, "store", "write_arounds"), 1);
	assert_int_equal(store_get_block(s, test_key(51), MiB), 0);
	assert_true(kvt_release(s, keys, n) >= 0);
	for (uint64_t i = 0; i < 2; i++)
		assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
	kvt_close(s);
}

/* Puts blocks 0..n-1 of len bytes into a 4 MiB RAM tier, then 8 MiB more,
 * so that 0..n-1 are on disk only. */
static void put_on_disk(kvt_store *s, uint64_t n, size_t len)
{
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(put_block(s, i, len), 0);
	for (uint64_t i = 0; i < 8 * MiB / len + 4; i++)
		assert_int_equal(put_block(s, 10000 + i, len), 0);
	assert_true(store_stat(s, "disk", "objects") >= (long long)n);
}

/*
 * A disk read that fails: kvt_get, and the failing op of a batch, return
 * -EIO with nothing copied; the batch's other ops load their own bytes; the
 * block stays stored and a later get, with the device well again, loads
 * it.
 */
static void read_failure_is_eio_and_the_block_stays(void **state)
{
	(void)state;
	kvt_store *s = open_faulty_file("read.dat");
	put_on_disk(s, 8, MiB);

	char *b = malloc(MiB);
	assert_non_null(b);
	memset(b, 0x5a, MiB);
	size_t len = 0;
	atomic_store(&faults.fail_reads, 1);
	assert_int_equal(kvt_get(s, test_key(0), b, MiB, &len), -EIO);
	assert_int_equal(atomic_load(&faults.fail_reads), 0);
	assert_non_null(strstr(kvt_last_error(), "failed (I/O error)"));
	free(b);
	assert_int_equal(store_get_block(s, test_key(0), MiB), 0);

	/* a batch: exactly one op fails, the rest are their own bytes */
	kvt_op ops[7];
	char *bufs[7];
	for (int i = 0; i < 7; i++) {
		bufs[i] = malloc(MiB);
		assert_non_null(bufs[i]);
		ops[i] = (kvt_op){ test_key((uint64_t)i + 1), bufs[i], MiB, 1 };
	}
	atomic_store(&faults.fail_reads, 1);
	int rc = kvt_get_batch(s, ops, 7);
	assert_int_equal(rc, -EIO);
	int eio = 0;
	for (int i = 0; i < 7; i++) {
		if (ops[i].result == -EIO) {
			eio++;
			continue;
		}
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, MiB);
		assert_true(check_block(ops[i].key, bufs[i], MiB));
	}
	assert_int_equal(eio, 1);
	for (int i = 0; i < 7; i++) {
		assert_int_equal(store_get_block(s, ops[i].key, MiB), 0);
		free(bufs[i]);
	}
	assert_true(store_stat(s, "disk", "io_errors") >= 2);
	kvt_close(s);
}

/*
 * Bytes that change after the device wrote them into memory (a damaged
 * transfer) fail their checksum: -EBADMSG, counted as a miss, and the
 * damaged copy is dropped. A read the device reports short is finished
 * by another, and its bytes are the block's.
 */
static void damaged_and_short_reads_are_not_data(void **state)
{
	(void)state;
	/* staged: the record comes in one read of its own length into the
	 * tier's memory, whatever the caller's buffer */
	kvt_store *s = open_faulty("damage.dat", 4, 64, ", \"stage_reads\": true");
	put_on_disk(s, 4, MiB);

	long long bad = store_stat(s, "disk", "checksum_failures");
	/* a 1 MiB record: its 4 KiB header and its payload, in one read */
	atomic_store(&faults.scribble_len, (int)(MiB + 4096));
	int rc = store_get_block(s, test_key(0), MiB);
	assert_int_equal(atomic_load(&faults.scribble_len), 0); /* it happened */
	assert_int_equal(rc, -EBADMSG);
	assert_int_equal(store_stat(s, "disk", "checksum_failures"), bad + 1);
	assert_int_equal(store_get_block(s, test_key(0), MiB), -ENOENT);
	assert_int_equal(found(s, 0), 0);

	atomic_store(&faults.short_reads, 1);
	rc = store_get_block(s, test_key(1), MiB);
	assert_int_equal(atomic_load(&faults.short_reads), 0);
	assert_int_equal(rc, 0); /* the rest read again, the bytes checked */
	/* the others were never touched */
	for (uint64_t i = 2; i < 4; i++)
		assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
	kvt_close(s);
}

/*
 * A device that answers writes with -ENOSPC (a thin-provisioned volume out
 * of space): spills fail and their blocks are lost, puts that must go to
 * the disk fail, nothing wrong is ever read, and the store works again
 * when the device has room.
 */
static void device_out_of_space(void **state)
{
	(void)state;
	kvt_store *s = open_faulty_file("nospace.dat");

	atomic_store(&faults.fail_errno, ENOSPC);
	atomic_store(&faults.fail_writes, 1000);
	for (uint64_t i = 0; i < 12; i++) {
		int rc = put_block(s, i, MiB);
		assert_true(rc == 0 || rc == -EIO || rc == -ENOSPC);
	}
	assert_true(atomic_load(&faults.fail_writes) < 1000);
	atomic_store(&faults.fail_writes, 0);
	atomic_store(&faults.fail_errno, 0);
	int lost = 0;
	for (uint64_t i = 0; i < 12; i++) {
		int rc = store_get_block(s, test_key(i), MiB);
		assert_true(rc == 0 || rc == -ENOENT);
		lost += rc == -ENOENT;
	}
	assert_true(lost > 0);
	for (uint64_t i = 200; i < 212; i++)
		assert_int_equal(put_block(s, i, MiB), 0);
	for (uint64_t i = 200; i < 212; i++)
		assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
	kvt_close(s);
}

/*
 * A queue that breaks (its reaps fail): the get in flight fails with -EIO,
 * not other bytes; the tier replaces the queue, so later gets of the same
 * blocks load their own bytes and nothing more goes to the broken one.
 */
static void broken_queue_is_replaced(void **state)
{
	(void)state;
	kvt_store *s = open_faulty_file("broken.dat");
	put_on_disk(s, 4, MiB);

	atomic_store(&faults.broken_used, 0);
	atomic_store(&faults.break_reaps, 1);
	assert_int_equal(store_get_block(s, test_key(0), MiB), -EIO);
	assert_int_equal(store_stat(s, "disk", "queue_failures"), 1);
	for (int r = 0; r < 3; r++)
		for (uint64_t i = 0; i < 4; i++)
			assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
	assert_int_equal(put_block(s, 300, MiB), 0);
	assert_int_equal(atomic_load(&faults.broken_used), 0);
	kvt_close(s);
}

/*
 * kvt_close writes the blocks only in RAM to disk (disk.flush_on_close);
 * when those writes fail, the flush stops after its first group of
 * writes, so the blocks already on disk before the close are not reclaimed
 * for writes that fail too: they come back after a reopen with their
 * bytes, the others read as misses, and the reopen itself succeeds. (RAM
 * holds more than three groups of 128 blocks; the flush tries the first
 * only: the code before tried them all, 601 failed writes.)
 */
static void close_with_failing_writes_keeps_the_disk(void **state)
{
	(void)state;
	enum { N = 700, LEN = 64 * 1024 };
	kvt_store *s = open_faulty("close.dat", 32, 32, "");
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(put_block(s, i, LEN), 0);
	long long before = store_stat(s, "disk", "objects");
	assert_true(before >= 100 && before < N - 3 * 128);
	for (uint64_t i = 0; i < N; i++)
		assert_true(found(s, i)); /* every block is stored somewhere */
	atomic_store(&faults.fail_writes, 100000);
	kvt_close(s);
	int failed = 100000 - atomic_load(&faults.fail_writes);
	atomic_store(&faults.fail_writes, 0);
	print_message("writes failed at close: %d\n", failed);
	/* one group of 128 records (a header and a payload each), the checkpoint */
	assert_true(failed > 0 && failed <= 2 * 128 + 4);

	s = open_faulty("close.dat", 32, 32, "");
	long long after = store_stat(s, "disk", "objects");
	print_message("on disk before the close %lld, after the reopen %lld\n", before, after);
	assert_int_equal(after, before);
	int back = 0;
	for (uint64_t i = 0; i < N; i++) {
		int rc = store_get_block(s, test_key(i), LEN);
		assert_true(rc == 0 || rc == -ENOENT);
		back += rc == 0;
	}
	assert_int_equal(back, after);
	kvt_close(s);
}

int main(void)
{
	test_skip_without_disk();
	faultdev_init();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(spill_failures_lose_blocks_not_bytes, setup),
		cmocka_unit_test_setup(write_around_failure_fails_the_put, setup),
		cmocka_unit_test_setup(read_failure_is_eio_and_the_block_stays, setup),
		cmocka_unit_test_setup(damaged_and_short_reads_are_not_data, setup),
		cmocka_unit_test_setup(device_out_of_space, setup),
		cmocka_unit_test_setup(broken_queue_is_replaced, setup),
		cmocka_unit_test_setup(close_with_failing_writes_keeps_the_disk, setup),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
