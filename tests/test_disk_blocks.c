/*
 * test_disk_blocks.c - the NVMe tier (lib/disk*.c) on files in a temp dir,
 * a block's life in it: round trips of many sizes, removal, batch gets,
 * reclaim when full (misses, never wrong bytes), leases that protect
 * blocks from it, hits near the tail reinserted, reads that never drop
 * blocks, batches sharing one buffer, a full device, the statistics, and
 * concurrent use.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "config.h"
#include "disk.h"
#include "faultdev.h"
#include "internal.h"
#include "memreg.h"
#include "stats.h"
#include "uring.h"
#include "util.h"
#include "opts.h"
#include "disk_util.h"

/* --- tests ---------------------------------------------------------------------- */

static void put_get_round_trip_many_sizes(void **st)
{
	(void)st;
	struct fix f;
	static const size_t sizes[] = { 1, 100, 4095, 4096, 4097, 8192, 65536,
					65537, MiB, MiB + 123, 3 * MiB };
	fix_init(&f, 64 * MiB, 4 * MiB);
	struct disk_tier *d = open_ok(&f, NULL);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i];
		char *src = malloc(len + 64);
		void *al = NULL;
		char *dst = malloc(len + 64);
		size_t got = 0;

		assert_int_equal(posix_memalign(&al, 4096, len + 4096), 0);
		/* aligned source for even i, unaligned for odd */
		char *s = i % 2 ? src + 3 : al;
		fill_block(test_key(i), s, len);
		assert_int_equal(disk_put(d, test_key(i), s, len), 0);
		assert_int_equal(disk_put(d, test_key(i), s, len), 0); /* no-op */
		assert_int_equal(disk_contains(d, test_key(i), &got), 1);
		assert_int_equal(got, len);
		/* unaligned destination */
		memset(dst, 0, len + 64);
		assert_int_equal(disk_get(d, test_key(i), dst + 5, len, &got), 0);
		assert_int_equal(got, len);
		assert_true(check_block(test_key(i), dst + 5, len));
		/* aligned destination (direct path) */
		memset(al, 0, len + 4096);
		assert_int_equal(disk_get(d, test_key(i), al, len + 4096, &got), 0);
		assert_true(check_block(test_key(i), al, len));
		/* too small */
		if (len > 1) {
			got = 0;
			assert_int_equal(disk_get(d, test_key(i), dst, len - 1, &got), -ENOBUFS);
			assert_int_equal(got, len);
		}
		free(src);
		free(dst);
		free(al);
	}
	assert_int_equal(disk_get(d, test_key(999), logbuf, 10, NULL), -ENOENT);
	assert_int_equal(disk_contains(d, test_key(999), NULL), 0);
	assert_int_equal(stat_of(d, "objects"), 11);
	assert_int_equal(stat_of(d, "puts"), 11);
	assert_true(stat_of(d, "hits") >= 22);
	assert_int_equal(disk_put(d, test_key(5), NULL, 10), -EINVAL);
	assert_int_equal(disk_put(d, test_key(5), logbuf, 0), -EINVAL);
	assert_int_equal(disk_put(d, test_key(77), logbuf, 5 * MiB), -ENOSPC);
	assert_non_null(strstr(kvt_last_error(), "larger than a disk region"));
	/* (the length is refused before the bytes are looked at) */
	assert_int_equal(disk_put(d, test_key(78), logbuf, 256 * MiB + 1), -ENOSPC);
	assert_non_null(strstr(kvt_last_error(), "larger than the 268435456 bytes a disk record holds"));
	disk_close(d);
	fix_done(&f);
}

static void remove_forgets_block(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	struct disk_tier *d = open_ok(&f, NULL);

	assert_int_equal(put_block(d, 1, 5000), 0);
	assert_int_equal(disk_remove(d, test_key(1)), 0);
	assert_int_equal(disk_remove(d, test_key(1)), -ENOENT);
	assert_int_equal(get_block(d, 1, 5000), -ENOENT);
	assert_int_equal(stat_of(d, "objects"), 0);
	assert_int_equal(stat_of(d, "bytes_used"), 0);
	disk_close(d);
	fix_done(&f);
}

static void batch_get_loads_every_block(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 48, LEN = 256 * 1024 };
	fix_init(&f, 64 * MiB, 4 * MiB);
	struct disk_tier *d = open_ok(&f, NULL);
	kvt_op ops[N + 1];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)(N + 1) * LEN), 0);
	for (int i = 0; i < N; i++) {
		ops[i].key = test_key(100 + (uint64_t)i);
		ops[i].buf = bufs + (size_t)i * LEN;
		ops[i].len = LEN - (i % 3) * 1000;
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(ops[i].result, 0);
	memset(bufs, 0, (size_t)(N + 1) * LEN);
	for (int i = 0; i < N; i++)
		ops[i].len = LEN;
	ops[N].key = test_key(5000);
	ops[N].buf = bufs + (size_t)N * LEN;
	ops[N].len = LEN;
	assert_int_equal(disk_get_batch(d, ops, N + 1), -ENOENT);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, LEN - (i % 3) * 1000);
		assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
	}
	assert_int_equal(ops[N].result, -ENOENT);
	free(bufs);
	disk_close(d);
	fix_done(&f);
}

static void reclaim_when_full_gives_misses_not_wrong_bytes(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 4 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);
	const uint64_t n = 400;

	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	assert_true(stat_of(d, "reclaims") > 0);
	int found = 0;
	for (uint64_t i = 0; i < n; i++)
		if (get_block(d, i, size_of(i)) == 0)
			found++;
		else
			assert_true(i < n - 10); /* the newest survive */
	assert_true(found > 10);
	assert_true(found < (int)n);
	/* (reads near the tail reinsert blocks where the log has room) */
	assert_true(stat_of(d, "objects") > 10);
	assert_true(stat_of(d, "bytes_used") <= stat_of(d, "capacity"));
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	disk_close(d);
	fix_done(&f);
}

static void lease_protects_block_from_reclaim(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 4 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);

	assert_int_equal(disk_lease(d, test_key(1), kvt_now_ns() + 60000000000ull), 0);
	assert_int_equal(put_block(d, 1, 9000), 0);
	assert_int_equal(disk_lease(d, test_key(1), kvt_now_ns() + 60000000000ull), 1);
	for (uint64_t i = 10; i < 400; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	assert_true(stat_of(d, "reclaims") > 10);
	assert_int_equal(get_block(d, 1, 9000), 0);
	assert_int_equal(disk_release(d, test_key(1)), 1);
	assert_int_equal(disk_release(d, test_key(1)), 0);
	for (uint64_t i = 400; i < 800; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	assert_int_equal(get_block(d, 1, 9000), -ENOENT);
	disk_close(d);
	fix_done(&f);
}

static void all_regions_leased_refuses_puts(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 2 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);
	uint64_t i = 0;
	int rc;

	while ((rc = put_block(d, i, 60000)) == 0) {
		assert_int_equal(disk_lease(d, test_key(i), kvt_now_ns() + 60000000000ull), 1);
		i++;
		assert_true(i < 1000);
	}
	assert_int_equal(rc, -ENOSPC);
	assert_true(stat_of(d, "refused_puts") >= 1);
	for (uint64_t j = 0; j < i; j++)
		assert_int_equal(get_block(d, j, 60000), 0);
	disk_close(d);
	fix_done(&f);
}

static void hits_near_tail_are_reinserted(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 4 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);

	assert_int_equal(put_block(d, 1, 20000), 0);
	for (uint64_t i = 10; i < 1000; i++) {
		assert_int_equal(put_block(d, i, 20000), 0);
		assert_int_equal(get_block(d, 1, 20000), 0);
	}
	assert_true(stat_of(d, "reclaims") > 20);
	assert_true(stat_of(d, "reinsertions") > 0);
	disk_close(d);
	fix_done(&f);
}

/*
 * Reads never drop a block, once the log has wrapped too: a hit in the
 * oldest region would be moved to the head, but where that needs a region
 * reclaimed (its own, the oldest) it stays where it is. With one block per
 * region and with three, every block read stays stored, read again and
 * after a restart.
 */
static void reads_never_drop_blocks(void **st)
{
	(void)st;
	const size_t lens[2] = { 1044480, 340000 };

	for (int v = 0; v < 2; v++) {
		struct fix f;
		fix_init(&f, 8 * MiB, 1 * MiB);
		struct disk_tier *d = open_ok(&f, NULL);
		uint64_t n = 0;

		while (stat_of(d, "reclaims") < 2)
			assert_int_equal(put_block(d, n++, lens[v]), 0);
		/* the blocks the log holds now: the newest run of them */
		uint64_t first = n;
		while (first > 0 && disk_contains(d, test_key(first - 1), NULL) == 1)
			first--;
		long long objects = stat_of(d, "objects");
		assert_int_equal(objects, (long long)(n - first));
		for (int pass = 0; pass < 2; pass++)
			for (uint64_t i = first; i < n; i++)
				assert_int_equal(get_block(d, i, lens[v]), 0);
		assert_int_equal(stat_of(d, "objects"), objects);
		disk_close(d);
		d = open_ok(&f, NULL);
		for (uint64_t i = first; i < n; i++)
			assert_int_equal(get_block(d, i, lens[v]), 0);
		disk_close(d);
		fix_done(&f);
	}
}

/* A batch whose ops share one buffer, read again and again while the log
 * wraps: aligned (payloads read straight into it, overwriting each other)
 * and unaligned (staged), no intact block is dropped, and blocks moved to
 * the log's head (near its tail) keep their own bytes, after a restart too. */
static void shared_buffer_batches_keep_every_blocks_bytes(void **st)
{
	(void)st;
	enum { N = 4, LEN = 20000 };
	struct fix f;
	fix_init(&f, 4 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);
	char *scratch = NULL;
	uint64_t filler = 100;

	assert_int_equal(posix_memalign((void **)&scratch, 4096, LEN + 8192), 0);
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(put_block(d, i, LEN), 0);
	while (stat_of(d, "reinsertions") < N) {
		kvt_op ops[N];

		assert_true(filler < 3000);
		assert_int_equal(put_block(d, filler, LEN), 0);
		for (int i = 0; i < N; i++)
			ops[i] = (kvt_op){ test_key((uint64_t)i), scratch + filler % 2,
					   LEN + 4096, 1 };
		filler++;
		assert_int_equal(disk_get_batch(d, ops, N), 0);
		for (int i = 0; i < N; i++) {
			assert_int_equal(ops[i].result, 0);
			assert_int_equal(ops[i].len, LEN);
		}
	}
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(get_block(d, i, LEN), 0);
	disk_close(d);
	d = open_ok(&f, NULL);
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(get_block(d, i, LEN), 0);
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	disk_close(d);
	free(scratch);
	fix_done(&f);
}

static void full_device_is_refused(void **st)
{
	(void)st;
	struct fix f;
	struct disk_tier *d = NULL;
	fix_init(&f, 32ull << 40, 64 * MiB); /* 32 TiB: more than the disk has */
	/* past ext4's largest file (16 TiB) that is -EFBIG, elsewhere -ENOSPC */
	int rc = disk_open_cfg(&f.cfg, NULL, 0, NULL, &d);
	assert_null(d);
	if (rc == -EFBIG)
		assert_non_null(strstr(kvt_last_error(), "cannot hold a file of"));
	else
		assert_int_equal(rc, -ENOSPC);
	if (rc == -ENOSPC)
		assert_non_null(strstr(kvt_last_error(), "has no room for"));
	assert_int_equal(access(f.path, F_OK), -1); /* nothing left behind */
	/* too small for two regions */
	f.cfg.disk_capacity = 1 * MiB;
	f.cfg.region_size = 1 * MiB;
	assert_int_equal(disk_open_cfg(&f.cfg, NULL, 0, NULL, &d), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "disk.capacity"));
	fix_done(&f);
}

static void stats_report_every_counter(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	struct disk_tier *d = open_ok(&f, NULL);
	static const char *names[] = { "capacity", "bytes_used", "objects", "hits",
		"misses", "puts", "spills", "reclaims", "reinsertions",
		"checksum_failures", "io_errors", "queue_failures", "queue_depth", "inflight",
		"staged_reads", "vectored_reads", "stage_reads", "staged_writes",
		"index_bytes_per_block" };

	for (uint64_t i = 0; i < 40; i++)
		assert_int_equal(put_block(d, i, 60000), 0);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		(void)stat_of(d, names[i]);
	assert_int_equal(stat_of(d, "queue_depth"), 8);
	assert_int_equal(stat_of(d, "inflight"), 0);
	assert_int_equal(stat_of(d, "bytes_used"), 40 * (4096 + 61440));
	assert_true(stat_of(d, "index_bytes_per_block") > 0);
	disk_close(d);
	fix_done(&f);
}

struct thr {
	struct disk_tier *d;
	int id;
};

static void *worker(void *arg)
{
	struct thr *t = arg;
	void *b = NULL;

	if (posix_memalign(&b, 4096, 80000))
		return NULL;
	for (uint64_t j = 0; j < 150; j++) {
		uint64_t k = (uint64_t)t->id * 100000 + j;
		size_t len = 3000 + (size_t)(k % 70000);
		char *src = malloc(len);
		fill_block(test_key(k), src, len);
		int rc = disk_put(t->d, test_key(k), src, len);
		free(src);
		assert_int_equal(rc, 0);
		/* read someone's block: right bytes or a miss */
		uint64_t o = (uint64_t)((t->id + (int)j) % 4) * 100000 + j / 2;
		size_t olen = 3000 + (size_t)(o % 70000), got = 0;
		rc = disk_get(t->d, test_key(o), b, 80000, &got);
		if (rc == 0) {
			assert_int_equal(got, olen);
			assert_true(check_block(test_key(o), b, olen));
		} else {
			assert_int_equal(rc, -ENOENT);
		}
		if (j % 16 == 0)
			disk_lease(t->d, test_key(k), kvt_now_ns() + 1000000);
	}
	free(b);
	return NULL;
}

static void threads_put_and_get_concurrently(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 8 * MiB, 512 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);
	pthread_t th[4];
	struct thr t[4];

	for (int i = 0; i < 4; i++) {
		t[i].d = d;
		t[i].id = i;
		assert_int_equal(pthread_create(&th[i], NULL, worker, &t[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_true(stat_of(d, "reclaims") > 0);
	disk_close(d);
	fix_done(&f);
}

int main(void)
{
	test_skip_without_disk();
	faultdev_init();

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(put_get_round_trip_many_sizes),
		cmocka_unit_test(remove_forgets_block),
		cmocka_unit_test(batch_get_loads_every_block),
		cmocka_unit_test(reclaim_when_full_gives_misses_not_wrong_bytes),
		cmocka_unit_test(lease_protects_block_from_reclaim),
		cmocka_unit_test(all_regions_leased_refuses_puts),
		cmocka_unit_test(hits_near_tail_are_reinserted),
		cmocka_unit_test(reads_never_drop_blocks),
		cmocka_unit_test(shared_buffer_batches_keep_every_blocks_bytes),
		cmocka_unit_test(full_device_is_refused),
		cmocka_unit_test(stats_report_every_counter),
		cmocka_unit_test(threads_put_and_get_concurrently),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
