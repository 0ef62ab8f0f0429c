/*
 * test_disk_io.c - the NVMe tier's I/O path (lib/disk_io.c, disk_read.c):
 * a direct read overwritten meanwhile read again, long payloads staged
 * whole and verified, fitting records read in one vectored read without a
 * copy, the order of stages and vectored reads, one write request per
 * record of a put batch, verification beside the reads, the per-block
 * hooks of batches, work run beside a batch's writes, the given checksum
 * written, and the caller's range held while its I/O runs.
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

/* open_ok with the fault layer, its device saying one request carries
 * max_req bytes in at most max_segs memory segments (0: the real one's) */
static struct disk_tier *open_limits(struct fix *f, uint64_t max_req, unsigned max_segs)
{
	atomic_store(&faults.max_req, max_req);
	atomic_store(&faults.max_segs, max_segs);
	struct disk_tier *d = open_ok(f, &fops);
	atomic_store(&faults.max_req, 0);
	atomic_store(&faults.max_segs, 0);
	return d;
}

static struct disk_tier *open_max_req(struct fix *f, uint64_t max_req)
{
	return open_limits(f, max_req, 0);
}

static size_t pad_to(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* A payload read straight into the caller's buffer that something else
 * overwrote before it was checked is read again into the tier's own memory:
 * the intact block is returned, not dropped as damaged. */
static void overwritten_direct_read_is_read_again(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	/* requests of 16 KiB: the 24 KiB record is read beside its header,
	 * straight into the caller's buffer, not staged */
	struct disk_tier *d = open_max_req(&f, 16384);

	assert_int_equal(put_block(d, 1, 20000), 0);
	atomic_store(&faults.scribble_len, 20480); /* the direct payload read */
	assert_int_equal(get_block(d, 1, 20000), 0);
	assert_int_equal(atomic_load(&faults.scribble_len), 0); /* it happened */
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	assert_int_equal(get_block(d, 1, 20000), 0);
	disk_close(d);
	fix_done(&f);
}

/* Records no longer than one device request but in more pages than it
 * carries segments are read whole, in one request, into the tier's
 * huge-page stages, verified there and copied into the caller's buffer;
 * longer ones go straight into it. A record changed after its read is
 * damaged (it was read into the tier's own memory). While the stages are
 * spent, reads go straight to the caller. */
static void long_payloads_are_staged_whole_and_verified(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 12, LEN = 100000, SHORT = 16384, STRIDE = 50 * 4096 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	/* requests of 1 MiB in 4 segments: every record here is staged */
	struct disk_tier *d = open_limits(&f, MiB, 4);
	kvt_op ops[N];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)N * STRIDE), 0);
	for (int i = 0; i < N; i++) {
		ops[i] = (kvt_op){ test_key(300 + (uint64_t)i), bufs + (size_t)i * STRIDE,
				   i < N - 2 ? LEN : SHORT, 0 };
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	/* stages for two records only, then for all */
	disk_set_stage_pool(d, 2 * pad_to(4096 + LEN, 65536));
	for (int round = 0; round < 2; round++) {
		long long before = stat_of(d, "staged_reads");
		memset(bufs, 0, (size_t)N * STRIDE);
		for (int i = 0; i < N; i++)
			ops[i].len = STRIDE;
		assert_int_equal(disk_get_batch(d, ops, N), 0);
		for (int i = 0; i < N; i++) {
			assert_int_equal(ops[i].result, 0);
			assert_int_equal(ops[i].len, i < N - 2 ? LEN : SHORT);
			assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
		}
		/* two, then all */
		assert_int_equal(stat_of(d, "staged_reads") - before, round ? N : 2);
		disk_set_stage_pool(d, 128 * MiB);
	}

	/* a record that changes after its read into a stage is damaged */
	atomic_store(&faults.scribble_len, (int)(4096 + pad_to(LEN, 4096)));
	assert_int_equal(get_block(d, 300, LEN), -EBADMSG);
	assert_int_equal(atomic_load(&faults.scribble_len), 0);
	assert_int_equal(stat_of(d, "checksum_failures"), 1);
	assert_int_equal(get_block(d, 300, LEN), -ENOENT); /* dropped */
	disk_close(d);

	/* requests of 64 KiB: a long record is split wherever it is read, so
	 * it goes straight into the caller's buffer; the short ones are staged */
	d = open_limits(&f, 64 * 1024, 4);
	for (int i = 0; i < N; i++)
		ops[i].len = STRIDE;
	assert_int_equal(disk_get_batch(d, ops + 1, N - 1), 0);
	for (int i = 1; i < N; i++)
		assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
	assert_int_equal(stat_of(d, "staged_reads"), 2);
	free(bufs);
	disk_close(d);
	fix_done(&f);
}

/* With disk.stage_reads false, a record that fits one request, its
 * payload's pages and its header's no more than the device's segments, is
 * read by one vectored request:
 * the header into the tier's memory, the payload straight into the
 * caller's page-aligned buffer; longer ones in more pages are staged. A
 * payload overwritten in the caller's buffer after its read is read again
 * into the tier's memory, not called damaged; a record damaged on disk is
 * refused (-EBADMSG) and dropped. */
static void fitting_records_are_one_vectored_read_uncopied(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 8, LEN = 100000, LONG = 300000, STRIDE = 80 * 4096 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	f.cfg.stage_reads = KVT_STAGE_OFF;
	/* requests of 1 MiB in 64 segments: 26 fit, 75 do not */
	struct disk_tier *d = open_limits(&f, MiB, 64);
	kvt_op ops[N];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)N * STRIDE), 0);
	for (int i = 0; i < N; i++) {
		ops[i] = (kvt_op){ test_key(700 + (uint64_t)i), bufs + (size_t)i * STRIDE,
				   i < N - 2 ? LEN : LONG, 0 };
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	memset(bufs, 0, (size_t)N * STRIDE);
	for (int i = 0; i < N; i++)
		ops[i].len = STRIDE;
	int r0 = atomic_load(&faults.nread_log);
	assert_int_equal(disk_get_batch(d, ops, N), 0);
	assert_int_equal(atomic_load(&faults.nread_log) - r0, N); /* one read each */
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, i < N - 2 ? LEN : LONG);
		assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
	}
	assert_int_equal(stat_of(d, "vectored_reads"), N - 2);
	assert_int_equal(stat_of(d, "staged_reads"), 2);
	assert_int_equal(stat_of(d, "stage_reads"), 0);

	/* the caller's copy overwritten right after the read: read again */
	atomic_store(&faults.scribble_len, (int)(4096 + pad_to(LEN, 4096)));
	assert_int_equal(get_block(d, 700, LEN), 0);
	assert_int_equal(atomic_load(&faults.scribble_len), 0); /* it happened */
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	disk_close(d);

	/* a payload damaged on disk: one byte of the record's last page */
	char *file = malloc(32 * MiB), *want = malloc(LEN);
	int fd = open(f.path, O_RDWR);
	assert_true(file && want && fd >= 0);
	ssize_t got = pread(fd, file, 32 * MiB, 0);
	assert_true(got > 0);
	fill_block(test_key(701), want, LEN);
	char *at = memmem(file, (size_t)got, want, LEN);
	assert_non_null(at);
	off_t bad = (off_t)(at - file) + LEN - 1;
	char c = (char)(at[LEN - 1] ^ 0x5a);
	assert_int_equal(pwrite(fd, &c, 1, bad), 1);
	fsync(fd);
	close(fd);
	free(file);
	free(want);
	d = open_limits(&f, MiB, 64);
	assert_int_equal(get_block(d, 701, LEN), -EBADMSG);
	assert_int_equal(stat_of(d, "checksum_failures"), 1);
	assert_int_equal(get_block(d, 701, LEN), -ENOENT); /* dropped */
	assert_int_equal(get_block(d, 702, LEN), 0);
	free(bufs);
	disk_close(d);
	fix_done(&f);
}

/* Reads n records of LEN bytes under keys 720.. into page-aligned buffers
 * of stride bytes (each alone in the batch), checking every byte; returns
 * how many went by a vectored read. */
static long long read_fitting(struct disk_tier *d, kvt_op *ops, char *bufs, int n,
			      size_t len, size_t stride)
{
	long long v0 = stat_of(d, "vectored_reads");

	memset(bufs, 0, (size_t)n * stride);
	for (int i = 0; i < n; i++)
		ops[i] = (kvt_op){ test_key(720 + (uint64_t)i), bufs + (size_t)i * stride,
				   stride, 0 };
	assert_int_equal(disk_get_batch(d, ops, n), 0);
	for (int i = 0; i < n; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, len);
		assert_true(check_block(ops[i].key, ops[i].buf, len));
	}
	return stat_of(d, "vectored_reads") - v0;
}

/* disk.stage_reads: true reads records that fit one request into the
 * huge-page stages first (vectored reads only once those are spent);
 * "auto" does so on a device that reports its segments when the stages
 * are huge pages, and never on one that does not say (tmpfs); false reads
 * them vectored. Every byte checked each way. */
static void stage_reads_orders_stages_and_vectored_reads(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 8, LEN = 100000, STRIDE = 32 * 4096 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	f.cfg.stage_reads = KVT_STAGE_ON;
	struct disk_tier *d = open_limits(&f, MiB, 64);
	kvt_op ops[N];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)N * STRIDE), 0);
	for (int i = 0; i < N; i++) {
		ops[i] = (kvt_op){ test_key(720 + (uint64_t)i), bufs + (size_t)i * STRIDE, LEN, 0 };
		fill_block(ops[i].key, ops[i].buf, LEN);
	}
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	assert_int_equal(stat_of(d, "stage_reads"), 1);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), 0);
	assert_int_equal(stat_of(d, "staged_reads"), N);
	/* no stage left: vectored */
	disk_set_stage_pool(d, 0);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), N);
	assert_int_equal(stat_of(d, "staged_reads"), N);
	disk_close(d);

	/* "auto", a device that reports its segments: stages where they are
	 * huge pages */
	int huge = disk_hstage_huge();
	f.cfg.stage_reads = KVT_STAGE_AUTO;
	d = open_limits(&f, MiB, 64);
	assert_int_equal(stat_of(d, "stage_reads"), huge);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), huge ? 0 : N);
	disk_close(d);
	/* "auto", a device that does not say: vectored */
	d = open_limits(&f, MiB, SEGS_UNKNOWN);
	assert_int_equal(stat_of(d, "stage_reads"), 0);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), N);
	disk_close(d);
	/* false */
	f.cfg.stage_reads = KVT_STAGE_OFF;
	d = open_limits(&f, MiB, 64);
	assert_int_equal(stat_of(d, "stage_reads"), 0);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), N);
	assert_int_equal(stat_of(d, "staged_reads"), 0);
	free(bufs);
	disk_close(d);
	fix_done(&f);
}

/* A put batch writes each record no longer than one device request whole,
 * header and payload from one huge-page stage: one write per record,
 * whether the caller's buffer is whole pages or not. Longer records go as
 * before (header and page-aligned payload: two writes). Every byte reads
 * back after a reopen. */
static void put_batches_write_one_request_per_record(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 16, WHOLE = 131072, PART = 100000 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	kvt_op ops[2 * N];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, 2 * N * (size_t)WHOLE), 0);
	for (int i = 0; i < 2 * N; i++) {
		ops[i] = (kvt_op){ test_key(500 + (uint64_t)i), bufs + (size_t)i * WHOLE,
				   i % 2 ? PART : WHOLE, 0 };
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	/* requests of 1 MiB: every record goes whole, one write each */
	struct disk_tier *d = open_max_req(&f, MiB);
	int w0 = atomic_load(&faults.writes);
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	assert_int_equal(atomic_load(&faults.writes) - w0, N);
	assert_int_equal(stat_of(d, "staged_writes"), N);
	disk_close(d);

	/* requests of 64 KiB: a record of whole pages goes as header and
	 * payload (two writes), one of part of a page staged in plain
	 * memory (one) */
	d = open_max_req(&f, 64 * 1024);
	w0 = atomic_load(&faults.writes);
	assert_int_equal(disk_put_batch(d, ops + N, N), 0);
	assert_int_equal(atomic_load(&faults.writes) - w0, N / 2 * 2 + N / 2);
	assert_int_equal(stat_of(d, "staged_writes"), 0);
	disk_close(d);

	d = open_ok(&f, NULL);
	memset(bufs, 0, 2 * N * (size_t)WHOLE);
	for (int i = 0; i < 2 * N; i++)
		ops[i].len = WHOLE;
	assert_int_equal(disk_get_batch(d, ops, 2 * N), 0);
	for (int i = 0; i < 2 * N; i++) {
		assert_int_equal(ops[i].len, i % 2 ? PART : WHOLE);
		assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
	}
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* ops[0..n) for blocks first.. of len bytes each, in one page-aligned
 * allocation (returned, for free) filled by fill_block. */
static char *filled_ops(kvt_op *ops, int n, uint64_t first, size_t len)
{
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)n * len), 0);
	for (int i = 0; i < n; i++) {
		ops[i] = (kvt_op){ test_key(first + (uint64_t)i), bufs + (size_t)i * len, len, 0 };
		fill_block(ops[i].key, ops[i].buf, len);
	}
	return bufs;
}

struct beside_probe {
	struct disk_tier *d;
	kvt_key key;              /* the batch's last block */
	int calls;
	int writes_out;           /* writes submitted when it ran */
	int stored;               /* key was stored when it ran */
};

static void beside_probe_run(void *arg)
{
	struct beside_probe *p = arg;

	p->calls++;
	p->writes_out = atomic_load(&faults.writes);
	p->stored = disk_contains(p->d, p->key, NULL);
}

/* disk_put_batch_beside runs its work exactly once: while the batch's
 * writes are out (all of them submitted, as the queue takes them all, and
 * the batch not stored yet); after a batch that wrote nothing; for an
 * empty batch. */
static void put_batch_runs_work_beside_its_writes(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 8, LEN = 65536 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, MiB);
	kvt_op ops[N];
	char *bufs = filled_ops(ops, N, 900, LEN);
	struct beside_probe p = { d, ops[N - 1].key, 0, 0, 0 };
	int w0 = atomic_load(&faults.writes);
	assert_int_equal(disk_put_batch_beside(d, ops, N, beside_probe_run, &p), 0);
	assert_int_equal(p.calls, 1);
	assert_int_equal(p.writes_out - w0, N);
	assert_int_equal(p.stored, 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(get_block(d, 900 + (uint64_t)i, LEN), 0);

	/* nothing to write: blocks stored already, bad ops, no ops */
	p.calls = 0;
	assert_int_equal(disk_put_batch_beside(d, ops, N, beside_probe_run, &p), 0);
	assert_int_equal(p.calls, 1);
	ops[0].len = 0;
	p.calls = 0;
	assert_int_equal(disk_put_batch_beside(d, ops, 1, beside_probe_run, &p), -EINVAL);
	assert_int_equal(p.calls, 1);
	p.calls = 0;
	assert_int_equal(disk_put_batch_beside(d, ops, 0, beside_probe_run, &p), 0);
	assert_int_equal(p.calls, 1);
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

struct each_probe {
	struct disk_tier *d;
	kvt_op *ops;
	int calls[16];
	int result[16];           /* ops[i].result when told */
	int stored[16];           /* ops[i] was found stored when told */
	int writes_out[16];       /* writes submitted when told */
};

static void each_probe_fn(void *arg, size_t i)
{
	struct each_probe *p = arg;

	assert_true(i < 16);
	p->calls[i]++;
	p->result[i] = p->ops[i].result;
	p->stored[i] = disk_contains(p->d, p->ops[i].key, NULL);
	p->writes_out[i] = atomic_load(&faults.writes);
}

/* disk_put_batch_each tells of every op exactly once, its result final
 * then: a bad op and one stored already before any write, each written
 * block once it is stored (found), a failed write with its error; a device
 * out of space says so. Every block written reads back equal after a
 * reopen. */
static void put_batch_each_tells_each_block_once(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 10, LEN = 65536 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, MiB);
	kvt_op ops[N];
	char *bufs = filled_ops(ops, N, 1300, LEN);

	assert_int_equal(disk_put(d, ops[1].key, ops[1].buf, LEN), 0);
	ops[2].len = 0;
	atomic_store(&faults.fail_writes, 1); /* the first record written */
	struct each_probe p = { .d = d, .ops = ops };
	int w0 = atomic_load(&faults.writes);
	int rc = disk_put_batch_each(d, ops, N, each_probe_fn, &p);
	assert_int_equal(rc, -EIO);
	assert_non_null(strstr(kvt_last_error(), "Input/output error"));
	for (int i = 0; i < N; i++) {
		assert_int_equal(p.calls[i], 1);
		assert_int_equal(p.result[i], ops[i].result);
	}
	assert_int_equal(ops[0].result, -EIO);
	assert_int_equal(p.stored[0], 0);
	assert_int_equal(ops[1].result, 0);         /* stored before */
	assert_int_equal(p.writes_out[1], w0);      /* told before any write */
	assert_int_equal(ops[2].result, -EINVAL);
	assert_int_equal(p.writes_out[2], w0);
	for (int i = 3; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(p.stored[i], 1);
	}
	/* a device out of space: the write fails, and the text says why */
	ops[2].len = LEN;
	atomic_store(&faults.fail_errno, ENOSPC);
	atomic_store(&faults.fail_writes, 1);
	memset(&p, 0, sizeof(p));
	p.d = d;
	p.ops = ops;
	assert_int_equal(disk_put_batch_each(d, ops, 3, each_probe_fn, &p), -EIO);
	atomic_store(&faults.fail_errno, 0);
	assert_non_null(strstr(kvt_last_error(), "No space left on device"));
	assert_int_equal(p.calls[0] + p.calls[1] + p.calls[2], 3);
	assert_int_equal(ops[1].result, 0);
	assert_int_equal(disk_contains(d, ops[0].key, NULL) + disk_contains(d, ops[2].key, NULL), 1);
	/* no callback: disk_put_batch */
	assert_int_equal(disk_put_batch_each(d, ops, N, NULL, NULL), 0);
	disk_close(d);

	d = open_ok(&f, NULL);
	for (int i = 0; i < N; i++)
		assert_int_equal(get_block(d, 1300 + (uint64_t)i, LEN), 0);
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* disk_put_batch_sums writes the checksum it is given where it is given
 * one: a block whose given sum is its bytes' reads back equal after a
 * reopen; one given a sum of other bytes reads back as damaged, never as
 * good; one given none is summed from its bytes. Staged (huge-page) and
 * header-and-payload records alike. */
static void put_batch_sums_write_the_given_checksum(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 4 };
	const size_t lens[2] = { 65536, 196608 };
	fix_init(&f, 32 * MiB, 4 * MiB);

	for (int c = 0; c < 2; c++) {
		/* requests of 1 MiB: staged; of 64 KiB: header and payload */
		struct disk_tier *d = open_max_req(&f, c ? 64 * 1024 : MiB);
		kvt_op ops[N];
		uint64_t first = 1400 + (uint64_t)c * 10;
		char *bufs = filled_ops(ops, N, first, lens[c]);
		uint64_t sums[N];
		uint8_t has[N] = { 1, 1, 0, 1 };
		for (int i = 0; i < N; i++)
			sums[i] = kvt_checksum(ops[i].buf, lens[c]);
		sums[1] ^= 1; /* not its bytes' */
		assert_int_equal(disk_put_batch_sums(d, ops, N, sums, has, N, NULL, NULL), 0);
		disk_close(d);
		d = open_ok(&f, NULL);
		assert_int_equal(get_block(d, first + 0, lens[c]), 0);
		assert_int_equal(get_block(d, first + 1, lens[c]), -EBADMSG);
		assert_int_equal(get_block(d, first + 2, lens[c]), 0);
		assert_int_equal(get_block(d, first + 3, lens[c]), 0);
		disk_close(d);
		free(bufs);
	}
	fix_done(&f);
}

/* A thread's batch loads: rounds times the n blocks of len bytes from
 * first on (n at most 16), each block checked; bad counts failures. */
struct batch_loader {
	struct disk_tier *d;
	int first, rounds, n;
	size_t len;
	int bad;
};

static void *batch_loader_main(void *a)
{
	struct batch_loader *l = a;
	kvt_op ops[16];
	char *bufs = NULL;

	if (posix_memalign((void **)&bufs, 4096, (size_t)l->n * l->len))
		return NULL;
	for (int r = 0; r < l->rounds; r++) {
		for (int i = 0; i < l->n; i++)
			ops[i] = (kvt_op){ test_key((uint64_t)(l->first + i)),
					   bufs + (size_t)i * l->len, l->len, 0 };
		l->bad += disk_get_batch(l->d, ops, (size_t)l->n) != 0;
		for (int i = 0; i < l->n; i++)
			l->bad += !check_block(ops[i].key, ops[i].buf, l->len);
	}
	free(bufs);
	return NULL;
}

/* Staged records of a batch are verified and copied out beside the reads
 * (by the tier's verifier thread, or the loader where it falls behind):
 * a record damaged after its read fails alone with -EBADMSG and is
 * dropped, the batch's others load whole; batches of four threads at
 * once, sharing the verifier, each get their own bytes. */
static void staged_batches_are_verified_beside_their_reads(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 32, LEN = 100000 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, MiB);
	kvt_op ops[N];
	char *bufs = filled_ops(ops, N, 700, LEN);
	assert_int_equal(disk_put_batch(d, ops, N), 0);

	/* one record, the first read of the whole-record length to complete,
	 * changes after its read */
	memset(bufs, 0, N * (size_t)LEN);
	atomic_store(&faults.scribble_len, (int)(4096 + pad_to(LEN, 4096)));
	assert_int_equal(disk_get_batch(d, ops, N), -EBADMSG);
	assert_int_equal(atomic_load(&faults.scribble_len), 0);
	int bad = -1;
	for (int i = 0; i < N; i++) {
		if (ops[i].result == -EBADMSG) {
			assert_int_equal(bad, -1);
			bad = i;
			continue;
		}
		assert_int_equal(ops[i].result, 0);
		assert_true(check_block(ops[i].key, ops[i].buf, LEN));
	}
	assert_true(bad >= 0);
	assert_int_equal(stat_of(d, "checksum_failures"), 1);
	assert_int_equal(get_block(d, 700 + (uint64_t)bad, LEN), -ENOENT);
	assert_int_equal(stat_of(d, "staged_reads"), N);

	/* the three runs of 8 keys without the dropped one */
	int runs[3], k = 0;
	for (int g = 0; g < 4; g++)
		if (bad / 8 != g)
			runs[k++] = 700 + 8 * g;
	struct batch_loader l[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		l[i] = (struct batch_loader){ d, runs[i % 3], 20, 8, LEN, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, batch_loader_main, &l[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(l[i].bad, 0);
	}
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* A batch keeps at most queue_depth reads out, and where its records
 * average 1 MiB or more, its last queue_depth / 4 records go out once
 * every other read is complete (so that a device which completes its
 * queue together leaves only those to be checked after its last read): 8
 * here, so the last two; every block loads whole. A batch of no more than
 * twice that many is not split. */
static void batch_holds_back_its_last_records(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 16, LEN = 1 << 20 };
	kvt_op ops[N];

	fix_init(&f, 64 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, 2 * MiB);
	char *bufs = filled_ops(ops, N, 1200, LEN);
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	memset(bufs, 0, N * (size_t)LEN);
	atomic_store(&faults.nread_log, 0);
	assert_int_equal(disk_get_batch(d, ops, N), 0);
	assert_int_equal(atomic_load(&faults.nread_log), N);
	for (int i = 0; i < N; i++) {
		assert_true(check_block(ops[i].key, ops[i].buf, LEN));
		assert_true(faults.read_log[i] < 8);
	}
	assert_int_equal(faults.read_log[N - 2], 0);
	int overlapped = 0;
	for (int i = 0; i < N - 2; i++)
		overlapped |= faults.read_log[i] > 0;
	assert_true(overlapped);

	memset(bufs, 0, N * (size_t)LEN);
	atomic_store(&faults.nread_log, 0);
	assert_int_equal(disk_get_batch(d, ops, 4), 0);
	assert_int_equal(atomic_load(&faults.nread_log), 4);
	for (int i = 0; i < 4; i++) {
		assert_true(check_block(ops[i].key, ops[i].buf, LEN));
		assert_int_equal(faults.read_log[i], i);
	}
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* disk.queue_depth is the device's: batches of four threads at once share
 * it (at least one read each), instead of keeping a queue depth
 * in flight each (four times as many, 32 here, as before 2026-12-04);
 * every block loads whole. */
static void batches_side_by_side_share_the_queue_depth(void **st)
{
	(void)st;
	struct fix f;
	enum { T = 4, N = 16 * T, LEN = 64 << 10 };
	kvt_op ops[N];

	fix_init(&f, 64 * MiB, 4 * MiB);
	struct disk_tier *d = open_ok(&f, &fops);
	char *bufs = filled_ops(ops, N, 1500, LEN);
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	/* reaps slowed, so that the batches overlap */
	atomic_store(&faults.delay_us, 300);
	atomic_store(&faults.nread_log, 0);
	struct batch_loader l[T];
	pthread_t t[T];
	for (int i = 0; i < T; i++) {
		l[i] = (struct batch_loader){ d, 1500 + 16 * i, 3, 16, LEN, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, batch_loader_main, &l[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(l[i].bad, 0);
	}
	atomic_store(&faults.delay_us, 0);
	/* the reads out when each went out (192, all logged): the depth, and
	 * one more for each other run that found none left */
	int most = 0, logged = atomic_load(&faults.nread_log);
	assert_int_equal(logged, 3 * N);
	for (int i = 0; i < logged; i++)
		most = faults.read_log[i] > most ? faults.read_log[i] : most;
	if (most + 1 > 8 + T - 1)
		fail_msg("%d reads in flight at once, queue depth 8", most + 1);
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* What the each hook of disk_get_batch_each saw: calls per op, and hooks
 * whose bytes, length or sum were wrong. Hooks run on several threads. */
struct verified_probe {
	const kvt_op *ops;
	size_t len;
	_Atomic int calls[32];
	uint64_t sum[32];         /* the sum each op's hook was given */
	_Atomic int wrong;
};

static void verified_probe_run(void *arg, size_t i, const void *data, size_t len,
			       uint64_t sum)
{
	struct verified_probe *p = arg;

	atomic_fetch_add(&p->calls[i], 1);
	p->sum[i] = sum;
	if (len != p->len || kvt_checksum(data, len) != sum ||
	    !check_block(p->ops[i].key, data, len))
		atomic_fetch_add(&p->wrong, 1);
}

/* Checks a batch's hooks: once for each op that succeeded (with its own
 * bytes and the sum it reported), never for one that failed. */
static void verified_probe_check(struct verified_probe *p, const kvt_op *ops, int n,
			     const uint64_t *sums)
{
	assert_int_equal(atomic_load(&p->wrong), 0);
	for (int i = 0; i < n; i++) {
		assert_int_equal(atomic_load(&p->calls[i]), ops[i].result == 0);
		if (ops[i].result == 0)
			assert_int_equal(sums[i], p->sum[i]);
		atomic_store(&p->calls[i], 0);
	}
}

/* disk_get_batch_each runs its hook once for each block that loads, with
 * the verified bytes, as the blocks are verified (on the verifier threads
 * or the loading thread): never for a block damaged after its read (the
 * batch reports -EBADMSG for it alone and no wrong bytes), once for a
 * direct read that something overwrote and that was read again, and with
 * each key's own bytes where the ops share one buffer. */
static void each_hook_runs_once_per_verified_block(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 32, LEN = 100000 };
	kvt_op ops[N];
	uint64_t sums[N];
	struct verified_probe p = { .ops = ops, .len = LEN };

	/* staged whole: one request carries a record; four verifiers */
	fix_init(&f, 32 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, MiB);
	disk_set_verifiers(d, 4);
	char *bufs = filled_ops(ops, N, 900, LEN);
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	memset(bufs, 0, N * (size_t)LEN);
	atomic_store(&faults.scribble_len, (int)(4096 + pad_to(LEN, 4096)));
	assert_int_equal(disk_get_batch_each(d, ops, N, sums, verified_probe_run, &p), -EBADMSG);
	assert_int_equal(atomic_load(&faults.scribble_len), 0);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		bad += ops[i].result == -EBADMSG;
		if (ops[i].result == 0)
			assert_true(check_block(ops[i].key, ops[i].buf, LEN));
		else
			assert_int_equal(ops[i].result, -EBADMSG);
	}
	assert_int_equal(bad, 1);
	verified_probe_check(&p, ops, N, sums);

	/* a batch of one (verified inline), then four ops sharing a buffer
	 * (staged and copied in order): each hook sees its key's bytes */
	int one = ops[0].result == 0 ? 0 : 1;
	kvt_op single = ops[one];
	p.ops = &single;
	assert_int_equal(disk_get_batch_each(d, &single, 1, sums, verified_probe_run, &p), 0);
	verified_probe_check(&p, &single, 1, sums);
	kvt_op shared[4];
	for (int i = 0; i < 4; i++)
		shared[i] = (kvt_op){ ops[N - 4 + i].key, bufs, LEN, 0 };
	p.ops = shared;
	assert_int_equal(disk_get_batch_each(d, shared, 4, sums, verified_probe_run, &p), 0);
	verified_probe_check(&p, shared, 4, sums);
	disk_close(d);
	free(bufs);
	fix_done(&f);

	/* straight into the caller's buffers (records longer than a request,
	 * whole pages); one payload overwritten after its read is read again:
	 * one hook */
	enum { LEN2 = 25 * 4096 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	d = open_max_req(&f, 16384);
	bufs = filled_ops(ops, 8, 950, LEN2);
	assert_int_equal(disk_put_batch(d, ops, 8), 0);
	memset(bufs, 0, 8 * (size_t)LEN2);
	p.ops = ops;
	p.len = LEN2;
	atomic_store(&faults.scribble_len, LEN2);
	assert_int_equal(disk_get_batch_each(d, ops, 8, sums, verified_probe_run, &p), 0);
	assert_int_equal(atomic_load(&faults.scribble_len), 0);
	for (int i = 0; i < 8; i++)
		assert_true(check_block(ops[i].key, ops[i].buf, LEN2));
	verified_probe_check(&p, ops, 8, sums);
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

struct held_get {
	struct disk_tier *d;
	kvt_op *ops;
	size_t n;
	int rc;
};

static void *held_get_main(void *a)
{
	struct held_get *h = a;

	h->rc = disk_get_batch(h->d, h->ops, h->n);
	return NULL;
}

/* A caller range (kvt_mem_register) mapped as fixed buffers: loads into it
 * move as fixed I/O with the right bytes, and while they are in flight the
 * range is held, so deregistering it is refused with -EBUSY. */
static void caller_range_is_held_while_its_io_runs(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	struct disk_tier *d = open_ok(&f, &fops);
	struct memreg m;
	char *pool = NULL;
	const size_t blk = 64 * KiB, n = 4;
	kvt_op ops[4];

	memreg_init(&m);
	disk_set_memreg(d, &m);
	assert_int_equal(posix_memalign((void **)&pool, 4096, n * blk), 0);
	pthread_mutex_lock(&m.lock);
	int i = memreg_add(&m, pool, n * blk, 0, NULL, 0);
	assert_true(i >= 0);
	int mapped = disk_mem_map(d, &m.e[i], 1) == 0;
	pthread_mutex_unlock(&m.lock);
	for (size_t k = 0; k < n; k++) {
		assert_int_equal(put_block(d, k, blk), 0);
		ops[k] = (kvt_op){ .key = test_key(k), .buf = pool + k * blk, .len = blk };
	}
	memset(pool, 0, n * blk);
	atomic_store(&faults.delay_us, 100000);
	struct held_get h = { .d = d, .ops = ops, .n = n };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, held_get_main, &h), 0);
	unsigned holds = 0;
	for (int w = 0; w < 10000 && !holds; w++) {
		pthread_mutex_lock(&m.lock);
		holds = m.e[i].holds;
		pthread_mutex_unlock(&m.lock);
		if (!holds)
			usleep(1000);
	}
	assert_true(holds > 0);
	pthread_mutex_lock(&m.lock);
	assert_int_equal(memreg_can_del(&m, i), -EBUSY);
	pthread_mutex_unlock(&m.lock);
	assert_int_equal(pthread_join(t, NULL), 0);
	atomic_store(&faults.delay_us, 0);
	assert_int_equal(h.rc, 0);
	for (size_t k = 0; k < n; k++)
		assert_true(check_block(test_key(k), pool + k * blk, blk));
	if (mapped)
		assert_int_equal(stat_of(d, "mem_fixed_ios"), n);
	else
		assert_int_equal(stat_of(d, "mem_plain_ios"), n);
	pthread_mutex_lock(&m.lock);
	assert_int_equal(m.e[i].holds, 0);
	assert_int_equal(memreg_can_del(&m, i), 0);
	disk_mem_map(d, &m.e[i], 0);
	memreg_del(&m, i);
	pthread_mutex_unlock(&m.lock);
	disk_close(d);
	memreg_destroy(&m);
	free(pool);
	fix_done(&f);
}

int main(void)
{
	test_skip_without_disk();
	faultdev_init();

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(overwritten_direct_read_is_read_again),
		cmocka_unit_test(long_payloads_are_staged_whole_and_verified),
		cmocka_unit_test(fitting_records_are_one_vectored_read_uncopied),
		cmocka_unit_test(stage_reads_orders_stages_and_vectored_reads),
		cmocka_unit_test(put_batches_write_one_request_per_record),
		cmocka_unit_test(staged_batches_are_verified_beside_their_reads),
		cmocka_unit_test(each_hook_runs_once_per_verified_block),
		cmocka_unit_test(batch_holds_back_its_last_records),
		cmocka_unit_test(batches_side_by_side_share_the_queue_depth),
		cmocka_unit_test(put_batch_runs_work_beside_its_writes),
		cmocka_unit_test(put_batch_each_tells_each_block_once),
		cmocka_unit_test(put_batch_sums_write_the_given_checksum),
		cmocka_unit_test(caller_range_is_held_while_its_io_runs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
