/*
 * ram_cmd.h - what the files of "kvbench ram" share: the options, the job
 * the worker threads of one measurement share, and the helpers both
 * measurements use. ram.c is the command (options, run, report) and holds
 * the helpers; ram_copy.c measures puts and gets of one block size beside
 * memcpy; ram_lookup.c measures lookups of chains of keys.
 */
#ifndef KVBENCH_RAM_CMD_H
#define KVBENCH_RAM_CMD_H

#include <stdatomic.h>
#include <stdint.h>

#include "bench.h"

#define RAM_MAX_LIST 16
/* --volume's most: a repetition of 64 GiB per thread takes seconds at memory
 * speed, one of terabytes an hour or more. */
#define RAM_MAX_VOLUME (64ull << 30)

struct ram_opts {
	uint64_t sizes[RAM_MAX_LIST];
	size_t nsizes;
	unsigned long threads[RAM_MAX_LIST];
	size_t nthreads;
	unsigned long chains[RAM_MAX_LIST];
	size_t nchains;
	uint64_t working_set, capacity, volume;
	unsigned long batch;
	int lookup, copy;
	unsigned long shared_pct; /* lookups: share of each chain all threads look up */
	unsigned reps;
};

/* One thread's latency samples, on cache lines of their own: each thread
 * writes its count on every call, and two threads' counts on one line would
 * make the measurement pay for the harness's false sharing. */
struct rb_lat {
	struct bench_samples s;
} __attribute__((aligned(128)));

/* What the worker threads share for one measurement. */
struct job {
	kvt_store *s;
	const kvt_key *keys;
	size_t nkeys;
	size_t size;
	const char *pool;      /* put: block i's bytes at pool + i * size */
	char **dst;            /* get: per thread, batch * size bytes */
	unsigned batch;        /* get_batch: blocks per call */
	uint64_t ops;          /* per thread: gets, batches or lookup calls */
	const kvt_key *const *chains; /* lookup: one chain per thread (a prefix
				       * of them the same on every thread) */
	size_t chain_len;
	unsigned flags;
	struct rb_lat *lat;    /* per thread, reserved for ops samples */
	_Atomic uint64_t failures;
	_Atomic int first_err;
};

/* Counts a failed call of a job; the first error is kept. */
void rb_note_failure(struct job *j, int rc);

static inline void rb_record(struct job *j, unsigned tid, uint64_t t0, uint64_t t1)
{
	struct bench_samples *l = &j->lat[tid].s;

	if (l->n < l->cap)
		l->v[l->n++] = (double)(t1 - t0) / 1e3;
}

/* Per-thread latency arrays for ops samples each; NULL when out of memory. */
struct rb_lat *rb_lat_new(unsigned nthreads, uint64_t ops);
void rb_lat_free(struct rb_lat *l, unsigned nthreads);
/* Moves the per-thread samples into all (when non-NULL) and empties them. */
void rb_lat_collect(struct rb_lat *l, unsigned nthreads, struct bench_samples *all);
/* Runs fn on nthreads threads. Returns the wall time, 0 on failure. */
uint64_t rb_run(struct job *j, unsigned nthreads, bench_thread_fn fn);

/* Opens a RAM-only store of the given capacity; prints why on failure. */
kvt_store *rb_open_store(uint64_t capacity);
/* n keys of a chain over random tokens (what real keys look like). */
kvt_key *rb_make_keys(size_t n, uint64_t seed);
/* The same whose first shared keys (tokens and namespace from common) are
 * those of every chain made with the same common; the rest from own. */
kvt_key *rb_make_chain(size_t n, size_t shared, uint64_t common, uint64_t own);
/* A number of the store's statistics (such as "ram.hits"), or NAN. */
double rb_stat_or_nan(kvt_store *s, const char *path);

/* Puts, gets and batch gets of one block size (ram_copy.c); 1 when
 * something failed. *get1m_share: 1 MiB gets on one thread, of memcpy. */
int rb_bench_size(const struct ram_opts *o, uint64_t size, struct bench_table *tab,
		  json_t *doc, double *get1m_share);
/* Lookups of chains with and without lease (ram_lookup.c); 1 when
 * something failed. *lookup1: keys/s of the longest chain on one thread;
 * *lease2: with lease, two threads' keys/s over one thread's, for chains of
 * rb_goal_chain() keys. */
int rb_bench_lookup(const struct ram_opts *o, json_t *doc, double *lookup1,
		    double *lease2);
/* The chain length the lease-scaling goal is measured at: RAM_GOAL_CHAIN
 * keys (the shape the goal is stated for: a prompt of 64 blocks) where
 * --chain lists it, else the longest chain listed. */
#define RAM_GOAL_CHAIN 64ul
unsigned long rb_goal_chain(const struct ram_opts *o);

#endif
