/*
 * disk_cmd.h - what the files of "kvbench disk" share: its options, the
 * run (the tier's and the limit's files, the tier's configuration, the
 * blocks), and the calls one makes in another. disk.c is the command
 * (options, set-up, repetitions, report) and drives the NVMe tier alone;
 * disk_limit.c measures the device limit (fio, or the raw io_uring loop)
 * on the same file; disk_store.c drives a store through the public API.
 */
#ifndef KVBENCH_DISK_CMD_H
#define KVBENCH_DISK_CMD_H

#include <stddef.h>
#include <stdint.h>

#include "bench.h"
#include "config.h"
#include "disk.h"
#include "kvtier.h"

struct opts {
	const char *dir;
	uint64_t size, bs, ram;
	unsigned long qd, batch;
	int fio, huge;
};

/* Async batches a cold load through kvt_batch_submit() keeps in flight. */
#define DB_ASYNC_DEPTH 2

struct run {
	struct opts o;
	char tierpath[4096], limpath[4096];
	char *paths[1];
	struct kvt_config cfg;
	char *arena;              /* blocks to spill and buffers to load into
				     (1 + DB_ASYNC_DEPTH batches) */
	size_t arena_len;
	char *ubuf;               /* the same, as a caller's buffers (store figures) */
	size_t nblocks;           /* blocks per repetition */
};


/* Block i of repetition rep's key. */
static inline kvt_key bkey(unsigned rep, size_t i)
{
	kvt_key k = { .lo = 0x9E3779B97F4A7C15ull * (i + 1), .hi = rep + 1 };
	return k;
}

/* disk.c */
/* Opens the run's tier on its arena; says why on stderr where it cannot. */
int db_tier_open(struct run *r, struct disk_tier **d);
/* 0..n-1 in a random order (malloc'd), or NULL. */
size_t *db_shuffled(size_t n);

/* disk_limit.c */
int db_have_fio(void);
/* Removes path, dropping its pages from the page cache first. */
void db_drop_file(const char *path);
/* One pass of the limit over path (rw "write" or "randread"): bytes/s or
 * NAN. db_pass_new: a write of a freshly preallocated file. */
double db_pass(const struct run *r, const char *path, const char *rw);
double db_pass_new(const struct run *r, const char *path);
/* The larger of a and b, where either may be NAN. */
double db_better(double a, double b);
/* Lays out the limit's file; 0 or -1 (said on stderr). */
int db_layout(const struct run *r);

/* disk_store.c */
kvt_store *db_store_open(const struct run *r);
void db_drop_page_cache(void);
/* kvt_put_batch of rep's blocks: bytes/s, or NAN. */
double db_store_spill(struct run *r, kvt_store *s, unsigned rep);
/* Cold kvt_get_batch of rep's blocks, verified (*bad: blocks wrong or
 * missing), latencies into lat: bytes/s, or NAN. */
double db_store_load(struct run *r, kvt_store *s, unsigned rep,
		     struct bench_samples *lat, int *bad);
/* Cold loads of rep's blocks through kvt_batch_submit(), DB_ASYNC_DEPTH
 * batches of --batch in flight, every byte verified; bytes/s or NAN. */
double db_store_load_async(struct run *r, kvt_store *s, unsigned rep, int *bad);

#endif
