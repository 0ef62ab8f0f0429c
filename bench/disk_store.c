/*
 * disk_store.c - the rows of "kvbench disk" that drive a store through the
 * public API as an engine would: the default configuration but for the RAM
 * tier's size and the disk tier on the run's file, kvt_put_batch (spill)
 * and, after a close, a dropped page cache and a reopen, kvt_get_batch
 * (cold load) into the caller's buffers, every block verified.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disk_cmd.h"
#include "stats.h"
#include "uring.h"
#include "opts.h"

/* A store with the default configuration but for its RAM tier's capacity
 * (--ram) and its disk tier: the run's file and capacity, and the tier
 * rows' region size and queue depth where they are not the defaults (a
 * --size under 1GiB, a --qd other than 32). NULL on failure (said on
 * stderr). */
kvt_store *db_store_open(const struct run *r)
{
	char cfg[4400];
	kvt_store *s = NULL;

	if (strpbrk(r->tierpath, "\"\\")) {
		fprintf(stderr, "kvbench disk: %s: a quote or backslash in the path\n",
			r->tierpath);
		return NULL;
	}
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": %llu}, "
		 "\"disk\": {\"path\": \"%s\", \"capacity\": %llu, "
		 "\"region_size\": %llu, \"queue_depth\": %lu}}",
		 (unsigned long long)r->o.ram, r->tierpath, (unsigned long long)r->o.size,
		 (unsigned long long)r->cfg.region_size, r->o.qd);
	int rc = kvt_open(cfg, &s);
	if (rc) {
		fprintf(stderr, "kvbench disk: kvt_open: %s\n", kvt_last_error());
		return NULL;
	}
	return s;
}

/* A counter of the store's stats ("disk", "puts"), or -1. Read through
 * bench_store_stats(), which leaves room for counters that the store's
 * threads move between sizing the text and writing it. */
static long long db_store_counter(kvt_store *s, const char *tier, const char *name)
{
	json_t *doc = bench_store_stats(s);
	json_t *x = json_object_get(json_object_get(doc, tier), name);
	long long v = json_is_integer(x) ? (long long)json_integer_value(x) : -1;

	json_decref(doc);
	return v;
}

/* Drops the page cache where this process may (root), so that a load after
 * a reopen reads the device; the tier's O_DIRECT reads bypass it anyway. */
void db_drop_page_cache(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);

	sync();
	if (fd >= 0) {
		if (write(fd, "3", 1) != 1) {
			/* not allowed here: O_DIRECT still keeps the cache out */
		}
		close(fd);
	}
}

/*
 * kvt_put_batch of nblocks blocks under rep's keys from the caller buffers.
 * Returns bytes/s of what reached the disk tier by the last call's return
 * (the blocks the RAM tier still holds are not counted), or NAN.
 */
double db_store_spill(struct run *r, kvt_store *s, unsigned rep)
{
	size_t n = r->nblocks, B = r->o.batch;
	kvt_op *ops = calloc(B, sizeof(*ops));
	long long w0 = db_store_counter(s, "disk", "puts");
	uint64_t t0 = bench_now_ns();
	int err = ops ? 0 : -ENOMEM;

	for (size_t i = 0; i < n && !err; i += B) {
		size_t m = n - i < B ? n - i : B;

		for (size_t j = 0; j < m; j++)
			ops[j] = (kvt_op){ bkey(rep, i + j), r->ubuf + ((i + j) % B) * r->o.bs,
					   r->o.bs, 0 };
		err = kvt_put_batch(s, ops, m);
	}
	double dt = (double)(bench_now_ns() - t0) / 1e9;
	long long w1 = db_store_counter(s, "disk", "puts");
	free(ops);
	if (err || w0 < 0 || w1 <= w0) {
		fprintf(stderr, "kvbench disk: kvt_put_batch: %s (%s)\n", kvt_strerror(err),
			kvt_last_error());
		return NAN;
	}
	return (double)(w1 - w0) * (double)r->o.bs / dt;
}

/* Checks the m ops of a completed load against the blocks they name
 * (order[at..at+m)); counts found blocks and bytes, and bad ones. */
static void db_check_loaded(const struct run *r, const kvt_op *ops, size_t m,
			    const size_t *order, size_t at, size_t *found, uint64_t *bytes,
			    int *bad)
{
	for (size_t j = 0; j < m; j++) {
		if (ops[j].result == 0) {
			(*found)++;
			*bytes += ops[j].len;
			if (common_check(ops[j].buf, ops[j].len, order[at + j] % r->o.batch + 1) != -1)
				(*bad)++;
		} else if (ops[j].result != -ENOENT) {
			(*bad)++;
		}
	}
}

/* More misses than the RAM tier holds blocks (they were all written to
 * disk at the close before) count as bad. */
static void db_check_found(const struct run *r, size_t found, int *bad)
{
	if (found + r->o.ram / r->o.bs + 1 < r->nblocks) {
		fprintf(stderr, "kvbench disk: the store found %zu of %zu blocks\n", found,
			r->nblocks);
		(*bad)++;
	}
}

/*
 * Cold kvt_get_batch of rep's blocks, shuffled, into the caller buffers;
 * verifies every byte. The close before wrote the blocks left in RAM to
 * disk (disk.flush_on_close), so every block should be found; more misses
 * than the RAM tier holds blocks count as bad. bytes/s or NAN.
 */
double db_store_load(struct run *r, kvt_store *s, unsigned rep,
			 struct bench_samples *lat, int *bad)
{
	size_t n = r->nblocks, B = r->o.batch, found = 0;
	size_t *order = db_shuffled(n);
	kvt_op *ops = calloc(B, sizeof(*ops));
	uint64_t busy = 0, bytes = 0;

	if (!order || !ops) {
		free(order);
		free(ops);
		return NAN;
	}
	for (size_t i = 0; i < n; i += B) {
		size_t m = n - i < B ? n - i : B;

		for (size_t j = 0; j < m; j++)
			ops[j] = (kvt_op){ bkey(rep, order[i + j]), r->ubuf + (B + j) * r->o.bs,
					   r->o.bs, 1 };
		uint64_t t0 = bench_now_ns();
		kvt_get_batch(s, ops, m);
		uint64_t dt = bench_now_ns() - t0;
		busy += dt;
		bench_samples_add(lat, (double)dt / 1e3);
		db_check_loaded(r, ops, m, order, i, &found, &bytes, bad);
	}
	db_check_found(r, found, bad);
	free(order);
	free(ops);
	return busy ? (double)bytes / ((double)busy / 1e9) : NAN;
}

/*
 * Cold loads through the asynchronous batch API, as an engine that keeps
 * DB_ASYNC_DEPTH batches in flight: rep's blocks, shuffled, in batches of
 * --batch by kvt_batch_submit(), the next submitted before the oldest is
 * waited for, each batch's blocks checked once it completes (while the
 * other runs). bytes/s over the whole loop, or NAN.
 */
double db_store_load_async(struct run *r, kvt_store *s, unsigned rep, int *bad)
{
	size_t n = r->nblocks, B = r->o.batch, found = 0, at[DB_ASYNC_DEPTH] = { 0 };
	size_t cnt[DB_ASYNC_DEPTH] = { 0 }, next = 0;
	size_t *order = db_shuffled(n);
	kvt_op *ops = calloc(DB_ASYNC_DEPTH * B, sizeof(*ops));
	char *buf = r->ubuf + B * r->o.bs; /* the caller's, as the sync loads' */
	kvt_batch *b[DB_ASYNC_DEPTH] = { NULL };
	unsigned head = 0, live = 0;
	uint64_t bytes = 0, t0 = bench_now_ns();
	int err = order && ops ? 0 : -ENOMEM;

	while (!err && (next < n || live)) {
		if (next < n && live < DB_ASYNC_DEPTH) {
			unsigned k = (head + live) % DB_ASYNC_DEPTH;
			size_t m = n - next < B ? n - next : B;

			for (size_t j = 0; j < m; j++)
				ops[k * B + j] = (kvt_op){ bkey(rep, order[next + j]),
							   buf + (k * B + j) * r->o.bs, r->o.bs, 1 };
			err = kvt_batch_submit(s, KVT_OP_GET, ops + k * B, m, &b[k]);
			at[k] = next;
			cnt[k] = m;
			next += m;
			live += !err;
			continue;
		}
		kvt_batch_wait(b[head], -1);
		db_check_loaded(r, ops + head * B, cnt[head], order, at[head], &found, &bytes,
				bad);
		kvt_batch_free(b[head]);
		b[head] = NULL;
		head = (head + 1) % DB_ASYNC_DEPTH;
		live--;
	}
	double dt = (double)(bench_now_ns() - t0) / 1e9;
	for (unsigned k = 0; k < DB_ASYNC_DEPTH; k++)
		kvt_batch_free(b[k]); /* after a failed submission: waits for the rest */
	if (err)
		fprintf(stderr, "kvbench disk: kvt_batch_submit: %s (%s)\n", kvt_strerror(err),
			kvt_last_error());
	else
		db_check_found(r, found, bad);
	free(order);
	free(ops);
	return err || !bytes ? NAN : (double)bytes / dt;
}
