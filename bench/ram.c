/*
 * ram.c - "kvbench ram": the RAM tier through the public API. For each block
 * size and thread count: put, get and batch get throughput and latency, each
 * beside the memcpy limit measured in the same run with the same sizes,
 * buffers, access order and thread count (repetitions interleaved, so both
 * see the same machine); and lookups of long chains in keys per second per
 * thread. Every get is checked to hit, and the stored bytes are verified.
 * Uses only <kvtier.h>; knows nothing about the tier's internals.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define CMD "ram"
#define MAX_LIST 16
#define LOOKUP_BLOCK 4096 /* bytes per block stored for the lookup chains */
#define LOOKUP_REP_NS 200000000ull

static const char usage[] =
	"usage: kvbench ram [OPTIONS]\n"
	"Measures the RAM tier: put, get, batch get (GB/s, share of memcpy measured in\n"
	"the same run) and lookups (keys/s per thread), with latency percentiles.\n"
	"  --sizes LIST        block sizes (default 64KiB,1MiB,4MiB)\n"
	"  --threads LIST      thread counts (default 1,2)\n"
	"  --working-set SIZE  bytes stored per block size (default 512MiB)\n"
	"  --capacity SIZE     RAM tier capacity (default 2GiB); must hold the working set\n"
	"  --volume SIZE       bytes each thread loads per repetition (default 1GiB)\n"
	"  --batch N           blocks per kvt_get_batch (default 32)\n"
	"  --chain LIST        keys per lookup (default 1000,10000)\n"
	"  --no-lookup         skip the lookup measurements\n"
	"  --no-copy           skip put/get (lookups only)\n"
	"  --reps N            timed repetitions after one warm-up (default 5)\n"
	"  --json FILE         write the results as JSON to FILE\n"
	"  --help              this text\n";

enum {
	OPT_SIZES = BENCH_OPT_FIRST_FREE,
	OPT_THREADS,
	OPT_WS,
	OPT_CAP,
	OPT_VOLUME,
	OPT_BATCH,
	OPT_CHAIN,
	OPT_NO_LOOKUP,
	OPT_NO_COPY,
};

struct ram_opts {
	uint64_t sizes[MAX_LIST];
	size_t nsizes;
	unsigned long threads[MAX_LIST];
	size_t nthreads;
	unsigned long chains[MAX_LIST];
	size_t nchains;
	uint64_t working_set, capacity, volume;
	unsigned long batch;
	int lookup, copy;
	unsigned reps;
};

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
	const kvt_key *const *chains; /* lookup: one chain per thread */
	size_t chain_len;
	unsigned flags;
	struct bench_samples *lat; /* per thread, reserved for ops samples */
	_Atomic uint64_t failures;
	_Atomic int first_err;
};

static void note_failure(struct job *j, int rc)
{
	int zero = 0;

	atomic_fetch_add(&j->failures, 1);
	atomic_compare_exchange_strong(&j->first_err, &zero, rc ? rc : -EIO);
}

static inline void record(struct job *j, unsigned tid, uint64_t t0, uint64_t t1)
{
	struct bench_samples *l = &j->lat[tid];

	if (l->n < l->cap)
		l->v[l->n++] = (double)(t1 - t0) / 1e3;
}

static void put_thread(unsigned tid, unsigned nthreads, void *arg)
{
	struct job *j = arg;
	size_t i;

	for (i = tid; i < j->nkeys; i += nthreads) {
		uint64_t t0 = bench_now_ns();
		int rc = kvt_put(j->s, j->keys[i], j->pool + i * j->size, j->size);
		uint64_t t1 = bench_now_ns();

		record(j, tid, t0, t1);
		if (rc)
			note_failure(j, rc);
	}
}

/* Same order as bench_memcpy: block (tid + k * nthreads) mod nkeys. */
static void get_thread(unsigned tid, unsigned nthreads, void *arg)
{
	struct job *j = arg;
	size_t idx = tid % j->nkeys, step = nthreads % j->nkeys, len;
	char *dst = j->dst[tid];
	uint64_t k;

	for (k = 0; k < j->ops; k++) {
		uint64_t t0 = bench_now_ns();
		int rc = kvt_get(j->s, j->keys[idx], dst, j->size, &len);
		uint64_t t1 = bench_now_ns();

		record(j, tid, t0, t1);
		if (rc || len != j->size)
			note_failure(j, rc);
		idx += step;
		if (idx >= j->nkeys)
			idx -= j->nkeys;
	}
}

static void batch_thread(unsigned tid, unsigned nthreads, void *arg)
{
	struct job *j = arg;
	size_t idx = tid % j->nkeys, step = nthreads % j->nkeys;
	kvt_op *ops = calloc(j->batch, sizeof(*ops));
	char *dst = j->dst[tid];
	uint64_t k;
	unsigned b;

	if (!ops) {
		note_failure(j, -ENOMEM);
		return;
	}
	for (k = 0; k < j->ops; k++) {
		for (b = 0; b < j->batch; b++) {
			ops[b] = (kvt_op){ .key = j->keys[idx],
					   .buf = dst + (size_t)b * j->size,
					   .len = j->size, .result = 1 };
			idx += step;
			if (idx >= j->nkeys)
				idx -= j->nkeys;
		}
		uint64_t t0 = bench_now_ns();
		int rc = kvt_get_batch(j->s, ops, j->batch);
		uint64_t t1 = bench_now_ns();

		record(j, tid, t0, t1);
		for (b = 0; b < j->batch; b++)
			if (ops[b].result || ops[b].len != j->size)
				note_failure(j, ops[b].result ? ops[b].result : rc);
	}
	free(ops);
}

static void lookup_thread(unsigned tid, unsigned nthreads, void *arg)
{
	struct job *j = arg;
	const kvt_key *keys = j->chains[tid];
	uint64_t k;
	size_t found;

	(void)nthreads;
	for (k = 0; k < j->ops; k++) {
		uint64_t t0 = bench_now_ns();
		int rc = kvt_lookup(j->s, keys, j->chain_len, j->flags, &found);
		uint64_t t1 = bench_now_ns();

		record(j, tid, t0, t1);
		if (rc || found != j->chain_len)
			note_failure(j, rc);
	}
}

/* Per-thread latency arrays for ops samples each. */
static struct bench_samples *lat_new(unsigned nthreads, uint64_t ops)
{
	struct bench_samples *l = calloc(nthreads, sizeof(*l));
	unsigned i;

	if (!l)
		return NULL;
	for (i = 0; i < nthreads; i++) {
		l[i].v = malloc((ops ? ops : 1) * sizeof(double));
		if (!l[i].v) {
			while (i--)
				free(l[i].v);
			free(l);
			return NULL;
		}
		l[i].cap = ops;
	}
	return l;
}

static void lat_free(struct bench_samples *l, unsigned nthreads)
{
	unsigned i;

	if (!l)
		return;
	for (i = 0; i < nthreads; i++)
		free(l[i].v);
	free(l);
}

/* Moves the per-thread samples into all (when non-NULL) and empties them. */
static void lat_collect(struct bench_samples *l, unsigned nthreads,
			struct bench_samples *all)
{
	unsigned i;

	for (i = 0; i < nthreads; i++) {
		if (all)
			bench_samples_append(all, &l[i]);
		l[i].n = 0;
	}
}

/* Runs fn on nthreads threads. Returns the wall time, 0 on failure. */
static uint64_t run(struct job *j, unsigned nthreads, bench_thread_fn fn)
{
	uint64_t wall = 0;
	int err = bench_parallel(nthreads, 1, fn, j, &wall);

	if (err) {
		note_failure(j, err);
		return 0;
	}
	return wall ? wall : 1;
}

/* --- output rows ------------------------------------------------------------- */

struct row {
	const char *op;
	uint64_t size;
	unsigned threads;
	struct bench_summary rate;     /* bytes/s per repetition */
	struct bench_summary limit;    /* memcpy bytes/s per repetition */
	struct bench_summary lat;      /* microseconds per call */
	unsigned batch;                /* blocks per call (get_batch) */
	uint64_t ops, failures;
};

static void copy_row(struct bench_table *t, json_t *doc, const struct row *r)
{
	char sz[32];
	double share = r->rate.median / r->limit.median;

	bench_fmt_size(r->size, sz, sizeof(sz));
	bench_table_cell(t, "%s", r->op);
	bench_table_cell(t, "%s", sz);
	bench_table_cell(t, "%u", r->threads);
	bench_table_cell(t, "%.2f", r->rate.median / 1e9);
	bench_table_cell(t, "%.2f", r->rate.min / 1e9);
	bench_table_cell(t, "%.2f", r->rate.max / 1e9);
	bench_table_cell(t, "%.2f", r->limit.median / 1e9);
	bench_table_cell(t, "%.0f%%", 100 * share);
	bench_table_cell(t, "%.1f", r->lat.median);
	bench_table_cell(t, "%.1f", r->lat.p90);
	bench_table_cell(t, "%.1f", r->lat.p99);
	bench_table_cell(t, "%s", r->failures ? "FAIL" : "100%");
	bench_table_end_row(t);

	json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:I, s:I}",
			      "name", r->op, "block_bytes", (json_int_t)r->size,
			      "threads", (json_int_t)r->threads, "blocks_per_call",
			      (json_int_t)(r->batch ? r->batch : 1),
			      "bytes_per_s", bench_json_reps(&r->rate),
			      "memcpy_bytes_per_s", bench_json_reps(&r->limit),
			      "share_of_memcpy", bench_json_real(share),
			      "latency_us_per_call", bench_json_latency(&r->lat),
			      "calls", (json_int_t)r->ops, "failures",
			      (json_int_t)r->failures);
	bench_json_result(doc, o);
	bench_json_limit(doc, json_pack("{s:s, s:s, s:I, s:I, s:I, s:o}", "name", "memcpy",
					"for", r->op, "block_bytes", (json_int_t)r->size,
					"threads", (json_int_t)r->threads, "dst_buffers",
					(json_int_t)(r->batch ? r->batch : 1),
					"bytes_per_s", bench_json_reps(&r->limit)));
}

/* --- put, get, batch get for one block size ---------------------------------- */

/* Opens a RAM-only store of the given capacity; prints why on failure. */
static kvt_store *open_store(uint64_t capacity)
{
	char cfg[128];
	kvt_store *s = NULL;
	int rc;

	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": %llu}}",
		 (unsigned long long)capacity);
	rc = kvt_open(cfg, &s);
	if (rc) {
		fprintf(stderr, "kvbench ram: kvt_open(%s): %s (%s)\n", cfg,
			kvt_strerror(rc), kvt_last_error());
		return NULL;
	}
	return s;
}

/* n keys of a chain over random tokens (what real keys look like). */
static kvt_key *make_keys(size_t n, uint64_t seed)
{
	const uint32_t bt = 16;
	uint32_t *tok = malloc(n * bt * sizeof(*tok));
	kvt_key *keys = malloc(n * sizeof(*keys));
	kvt_namespace ns = { .model = "kvbench/ram", .tokenizer = "kvbench",
			     .kv_format = "bf16/NHD", .tp_size = 1, .pp_size = 1,
			     .block_tokens = bt, .salt = &seed,
			     .salt_len = sizeof(seed) };

	if (!tok || !keys) {
		free(tok);
		free(keys);
		return NULL;
	}
	bench_tokens(tok, n * bt, 151936, seed);
	if (kvt_hash_chain(kvt_ns_root(&ns), tok, n * bt, bt, keys, n) != n) {
		fprintf(stderr, "kvbench ram: kvt_hash_chain: %s\n", kvt_last_error());
		free(keys);
		keys = NULL;
	}
	free(tok);
	return keys;
}

/* Removes every key (ignoring misses). */
static void remove_all(kvt_store *s, const kvt_key *keys, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		kvt_remove(s, keys[i]);
}

/* Loads every block once and compares its bytes with what was put. */
static uint64_t verify_all(kvt_store *s, const kvt_key *keys, size_t n,
			   size_t size, char *buf)
{
	uint64_t bad = 0;
	size_t i, len;

	for (i = 0; i < n; i++) {
		int rc = kvt_get(s, keys[i], buf, size, &len);

		if (rc || len != size || common_check(buf, size, common_key_seed(keys[i])) >= 0)
			bad++;
	}
	return bad;
}

static double stat_or_nan(kvt_store *s, const char *path)
{
	json_t *st = bench_store_stats(s);
	double v = NAN;

	if (st && bench_stats_number(st, path, &v))
		v = NAN;
	json_decref(st);
	return v;
}

/*
 * All measurements of one block size on one store. Returns 0, or 1 when
 * something failed (a miss, wrong bytes, an error), which is also recorded in
 * the JSON document.
 */
static int bench_size(const struct ram_opts *o, uint64_t size,
		      struct bench_table *tab, json_t *doc, double *get1m_share)
{
	size_t nkeys = o->working_set / size, ti;
	unsigned nt_max = 1;
	char sz[32];
	kvt_store *s = NULL;
	kvt_key *keys = NULL;
	char *pool = NULL, **dst = NULL;
	double *rate = NULL, *limit = NULL;
	struct bench_samples all = { 0 };
	int failed = 0;
	unsigned rep, t, i;

	bench_fmt_size(size, sz, sizeof(sz));
	for (ti = 0; ti < o->nthreads; ti++)
		if (o->threads[ti] > nt_max)
			nt_max = (unsigned)o->threads[ti];
	if (nkeys < (size_t)o->batch * nt_max) {
		fprintf(stderr, "kvbench ram: --working-set %llu holds %zu blocks of %s, "
			"fewer than --batch x threads (%lu); skipping %s\n",
			(unsigned long long)o->working_set, nkeys, sz,
			o->batch * nt_max, sz);
		bench_json_error(doc, "working set too small for %s blocks", sz);
		return 1;
	}
	s = open_store(o->capacity);
	keys = make_keys(nkeys, size);
	pool = malloc(nkeys * size);
	dst = calloc(nt_max, sizeof(*dst));
	rate = calloc(o->reps + 1, sizeof(*rate));
	limit = calloc(o->reps + 1, sizeof(*limit));
	if (!s || !keys || !pool || !dst || !rate || !limit) {
		fprintf(stderr, "kvbench ram: cannot set up %s blocks (%s)\n", sz,
			s ? "out of memory" : "no store");
		bench_json_error(doc, "cannot set up %s blocks", sz);
		failed = 1;
		goto out;
	}
	for (i = 0; i < nt_max; i++)
		if (!(dst[i] = bench_buffer_alloc((size_t)o->batch * size))) {
			fprintf(stderr, "kvbench ram: out of memory for %s buffers\n", sz);
			failed = 1;
			goto out;
		}
	for (ti = 0; ti < nkeys; ti++)
		common_fill(pool + ti * size, size, common_key_seed(keys[ti]));

	for (ti = 0; ti < o->nthreads; ti++) {
		unsigned nt = (unsigned)o->threads[ti];
		uint64_t ops = o->volume / size, wall;
		struct bench_samples *lat;
		struct bench_memcpy *mc;
		struct job j;
		struct row r;

		if (ops < o->batch)
			ops = o->batch;
		ops -= ops % o->batch; /* whole batches, same bytes for all ops */

		/* put: one warm-up round and reps timed rounds, each into an
		 * emptied store, so every put stores */
		lat = lat_new(nt, nkeys / nt + 1);
		if (!lat) {
			failed = 1;
			goto out;
		}
		memset(&j, 0, sizeof(j));
		j = (struct job){ .s = s, .keys = keys, .nkeys = nkeys, .size = size,
				  .pool = pool, .dst = dst, .lat = lat };
		mc = bench_memcpy_new(size, o->working_set, (unsigned)o->batch, nt);
		if (!mc) {
			fprintf(stderr, "kvbench ram: memcpy probe: %s\n", strerror(errno));
			lat_free(lat, nt);
			failed = 1;
			goto out;
		}
		bench_samples_clear(&all);
		for (rep = 0; rep <= o->reps; rep++) {
			remove_all(s, keys, nkeys);
			wall = run(&j, nt, put_thread);
			rate[rep] = wall ? (double)nkeys * size / ((double)wall / 1e9) : 0;
			lat_collect(lat, nt, rep ? &all : NULL);
			if (bench_memcpy_run_into(mc, pool, nkeys * size, nkeys / nt,
						  &limit[rep], NULL))
				limit[rep] = NAN;
		}
		r = (struct row){ .op = "put", .size = size, .threads = nt,
				  .ops = (uint64_t)nkeys * o->reps,
				  .failures = atomic_load(&j.failures) };
		bench_summarize(rate + 1, o->reps, &r.rate);
		bench_summarize(limit + 1, o->reps, &r.limit);
		bench_summarize(all.v, all.n, &r.lat);
		copy_row(tab, doc, &r);
		if (r.failures) {
			int e = atomic_load(&j.first_err);

			fprintf(stderr, "kvbench ram: %llu puts of %s failed: %s\n",
				(unsigned long long)r.failures, sz, kvt_strerror(e));
			bench_json_error(doc, "%llu puts of %s blocks failed: %s",
					 (unsigned long long)r.failures, sz, kvt_strerror(e));
			failed = 1;
		}
		lat_free(lat, nt);

		/* every byte stored is the byte put */
		uint64_t bad = verify_all(s, keys, nkeys, size, dst[0]);

		if (bad) {
			fprintf(stderr, "kvbench ram: %llu of %zu %s blocks missing or WRONG "
				"after put\n", (unsigned long long)bad, nkeys, sz);
			bench_json_error(doc, "%llu of %zu %s blocks missing or wrong after put",
					 (unsigned long long)bad, nkeys, sz);
			failed = 1;
		}

		/* get: interleaved with memcpy of the same blocks, same order */
		lat = lat_new(nt, ops);
		if (!lat) {
			bench_memcpy_free(mc);
			failed = 1;
			goto out;
		}
		j.lat = lat;
		atomic_store(&j.failures, 0);
		j.ops = ops;
		bench_samples_clear(&all);
		double hits0 = stat_or_nan(s, "ram.hits");

		for (rep = 0; rep <= o->reps; rep++) {
			if (bench_memcpy_run(mc, ops, 1, &limit[rep], NULL))
				limit[rep] = NAN;
			wall = run(&j, nt, get_thread);
			rate[rep] = wall ? (double)ops * nt * size / ((double)wall / 1e9) : 0;
			lat_collect(lat, nt, rep ? &all : NULL);
		}
		double hits = stat_or_nan(s, "ram.hits") - hits0;

		r = (struct row){ .op = "get", .size = size, .threads = nt,
				  .ops = ops * nt * o->reps,
				  .failures = atomic_load(&j.failures) };
		bench_summarize(rate + 1, o->reps, &r.rate);
		bench_summarize(limit + 1, o->reps, &r.limit);
		bench_summarize(all.v, all.n, &r.lat);
		copy_row(tab, doc, &r);
		if (size == (1u << 20) && nt == 1 && !r.failures)
			*get1m_share = r.rate.median / r.limit.median;
		if (r.failures || (!isnan(hits) && hits < (double)ops * nt * (o->reps + 1))) {
			fprintf(stderr, "kvbench ram: gets of %s blocks missed: %llu failed, "
				"RAM hits %.0f of %llu\n", sz,
				(unsigned long long)r.failures, hits,
				(unsigned long long)(ops * nt * (o->reps + 1)));
			bench_json_error(doc, "gets of %s blocks on %u threads missed", sz, nt);
			failed = 1;
		}
		lat_free(lat, nt);

		/* batch get: into batch distinct buffers, against memcpy into
		 * as many buffers */
		uint64_t calls = ops / o->batch;

		lat = lat_new(nt, calls);
		if (!lat) {
			fprintf(stderr, "kvbench ram: out of memory for the batch probe\n");
			bench_memcpy_free(mc);
			lat_free(lat, nt);
			failed = 1;
			goto out;
		}
		j.lat = lat;
		j.ops = calls;
		j.batch = (unsigned)o->batch;
		atomic_store(&j.failures, 0);
		bench_samples_clear(&all);
		for (rep = 0; rep <= o->reps; rep++) {
			if (bench_memcpy_run(mc, ops, (unsigned)o->batch, &limit[rep], NULL))
				limit[rep] = NAN;
			wall = run(&j, nt, batch_thread);
			rate[rep] = wall ? (double)ops * nt * size / ((double)wall / 1e9) : 0;
			lat_collect(lat, nt, rep ? &all : NULL);
		}
		r = (struct row){ .op = "get_batch", .size = size, .threads = nt,
				  .batch = (unsigned)o->batch,
				  .ops = calls * nt * o->reps,
				  .failures = atomic_load(&j.failures) };
		bench_summarize(rate + 1, o->reps, &r.rate);
		bench_summarize(limit + 1, o->reps, &r.limit);
		bench_summarize(all.v, all.n, &r.lat);
		copy_row(tab, doc, &r);
		if (r.failures) {
			fprintf(stderr, "kvbench ram: %llu batch gets of %s blocks failed\n",
				(unsigned long long)r.failures, sz);
			bench_json_error(doc, "batch gets of %s blocks on %u threads failed",
					 sz, nt);
			failed = 1;
		}
		lat_free(lat, nt);
		bench_memcpy_free(mc);
	}

	double ibpb = stat_or_nan(s, "ram.index_bytes_per_block");

	bench_json_result(doc, json_pack("{s:s, s:I, s:I, s:o}", "name", "index",
					 "block_bytes", (json_int_t)size, "blocks",
					 (json_int_t)nkeys, "index_bytes_per_block",
					 bench_json_real(ibpb)));
	if (isnan(ibpb))
		printf("  [%s: %zu blocks stored; index bytes per block: n/a]\n", sz, nkeys);
	else
		printf("  [%s: %zu blocks stored; index bytes per block: %.1f]\n", sz, nkeys,
		       ibpb);
	fflush(stdout);
out:
	if (dst)
		for (t = 0; t < nt_max; t++)
			free(dst[t]);
	free(dst);
	free(rate);
	free(limit);
	free(pool);
	free(keys);
	bench_samples_free(&all);
	kvt_close(s);
	return failed;
}

/* --- lookups -------------------------------------------------------------------- */

static int bench_lookup(const struct ram_opts *o, json_t *doc, double *lookup1)
{
	static const char *const hdr[] = { "op", "keys", "thr", "Mkeys/s/thr", "min",
					   "max", "ns/key", "p50 us", "p90 us", "p99 us",
					   "found" };
	unsigned long lmax = 0;
	unsigned nt_max = 1, t, rep;
	struct bench_table *tab = bench_table_new(11, hdr);
	kvt_key **chains = NULL;
	kvt_store *s = NULL;
	char *block = NULL;
	double *rate = NULL;
	struct bench_samples all = { 0 };
	size_t ci, ti, k;
	int failed = 0, fi;

	for (ci = 0; ci < o->nchains; ci++)
		if (o->chains[ci] > lmax)
			lmax = o->chains[ci];
	for (ti = 0; ti < o->nthreads; ti++)
		if (o->threads[ti] > nt_max)
			nt_max = (unsigned)o->threads[ti];
	s = open_store(o->capacity);
	chains = calloc(nt_max, sizeof(*chains));
	block = bench_buffer_alloc(LOOKUP_BLOCK);
	rate = calloc(o->reps + 1, sizeof(*rate));
	if (!tab || !s || !chains || !block || !rate) {
		failed = 1;
		goto out;
	}
	/* One chain per thread, every key stored (small blocks: the figure is
	 * the index, not the bytes). */
	for (t = 0; t < nt_max; t++) {
		chains[t] = make_keys(lmax, 0x6c6f6f6b7570ull + t);
		if (!chains[t]) {
			failed = 1;
			goto out;
		}
		for (k = 0; k < lmax; k++) {
			common_fill(block, LOOKUP_BLOCK, common_key_seed(chains[t][k]));
			int rc = kvt_put(s, chains[t][k], block, LOOKUP_BLOCK);

			if (rc) {
				fprintf(stderr, "kvbench ram: put for lookups: %s (%s)\n",
					kvt_strerror(rc), kvt_last_error());
				bench_json_error(doc, "put for lookups failed: %s",
						 kvt_strerror(rc));
				failed = 1;
				goto out;
			}
		}
	}

	for (fi = 0; fi < 2; fi++) {
		unsigned flags = fi ? KVT_LEASE : 0;
		const char *op = fi ? "lookup+lease" : "lookup";

		for (ci = 0; ci < o->nchains; ci++) {
			size_t len = o->chains[ci];
			uint64_t calls, t0, n = 0, wall;
			size_t found;

			/* size a repetition to about LOOKUP_REP_NS */
			t0 = bench_now_ns();
			do {
				kvt_lookup(s, chains[0], len, flags, &found);
				n++;
			} while (bench_now_ns() - t0 < 20000000ull);
			calls = LOOKUP_REP_NS / ((bench_now_ns() - t0) / n + 1);
			if (calls == 0)
				calls = 1;

			for (ti = 0; ti < o->nthreads; ti++) {
				unsigned nt = (unsigned)o->threads[ti];
				struct bench_samples *lat = lat_new(nt, calls);
				struct bench_summary rs, ls;
				struct job j = { .s = s, .chains = (const kvt_key *const *)chains,
						 .chain_len = len, .flags = flags, .ops = calls,
						 .lat = lat };

				if (!lat) {
					failed = 1;
					goto out;
				}
				bench_samples_clear(&all);
				for (rep = 0; rep <= o->reps; rep++) {
					wall = run(&j, nt, lookup_thread);
					rate[rep] = wall ? (double)len * calls / ((double)wall / 1e9) : 0;
					lat_collect(lat, nt, rep ? &all : NULL);
				}
				lat_free(lat, nt);
				bench_summarize(rate + 1, o->reps, &rs);
				bench_summarize(all.v, all.n, &ls);
				uint64_t fails = atomic_load(&j.failures);

				bench_table_cell(tab, "%s", op);
				bench_table_cell(tab, "%zu", len);
				bench_table_cell(tab, "%u", nt);
				bench_table_cell(tab, "%.2f", rs.median / 1e6);
				bench_table_cell(tab, "%.2f", rs.min / 1e6);
				bench_table_cell(tab, "%.2f", rs.max / 1e6);
				bench_table_cell(tab, "%.1f", 1e9 / rs.median);
				bench_table_cell(tab, "%.1f", ls.median);
				bench_table_cell(tab, "%.1f", ls.p90);
				bench_table_cell(tab, "%.1f", ls.p99);
				bench_table_cell(tab, "%s", fails ? "SHORT" : "all");
				bench_table_end_row(tab);
				bench_json_result(doc, json_pack(
					"{s:s, s:I, s:I, s:o, s:o, s:I, s:I}", "name", op,
					"keys_per_call", (json_int_t)len, "threads",
					(json_int_t)nt, "keys_per_s_per_thread",
					bench_json_reps(&rs), "latency_us_per_call",
					bench_json_latency(&ls), "calls",
					(json_int_t)(calls * nt * o->reps), "short_calls",
					(json_int_t)fails));
				if (!fi && nt == 1 && !fails && len == lmax)
					*lookup1 = rs.median;
				if (fails) {
					int e = atomic_load(&j.first_err);

					fprintf(stderr, "kvbench ram: %llu %s calls of %zu keys "
						"did not find the whole chain%s%s\n",
						(unsigned long long)fails, op, len,
						e ? ": " : "", e ? kvt_strerror(e) : "");
					bench_json_error(doc, "%llu %s calls of %zu keys on %u threads "
							 "found less than the chain",
							 (unsigned long long)fails, op, len, nt);
					failed = 1;
				}
			}
		}
	}
	double ibpb = stat_or_nan(s, "ram.index_bytes_per_block");

	printf("\nlookups: kvt_lookup over chains whose keys are all stored "
	       "(%lu blocks of %d bytes per thread), keys per second per thread:\n\n",
	       lmax, LOOKUP_BLOCK);
	bench_table_print(tab, stdout, 2);
	if (isnan(ibpb))
		printf("\n  index bytes per stored block (%lu blocks): n/a\n",
		       lmax * nt_max);
	else
		printf("\n  index bytes per stored block (%lu blocks): %.1f\n",
		       lmax * nt_max, ibpb);
	bench_json_result(doc, json_pack("{s:s, s:I, s:I, s:o}", "name", "index",
					 "block_bytes", (json_int_t)LOOKUP_BLOCK,
					 "blocks", (json_int_t)(lmax * nt_max),
					 "index_bytes_per_block", bench_json_real(ibpb)));
out:
	if (failed && !tab)
		fprintf(stderr, "kvbench ram: cannot set up the lookup measurement\n");
	if (chains)
		for (t = 0; t < nt_max; t++)
			free(chains[t]);
	free(chains);
	free(block);
	free(rate);
	bench_samples_free(&all);
	bench_table_free(tab);
	kvt_close(s);
	return failed;
}

/* --- main ------------------------------------------------------------------------- */

/* Parses the command line into o. Returns -1 to run, else the exit status. */
static int ram_parse(int argc, char **argv, struct ram_opts *o, struct bench_common *co)
{
	static const struct option longopts[] = {
		{ "sizes", required_argument, NULL, OPT_SIZES },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "working-set", required_argument, NULL, OPT_WS },
		{ "capacity", required_argument, NULL, OPT_CAP },
		{ "volume", required_argument, NULL, OPT_VOLUME },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "chain", required_argument, NULL, OPT_CHAIN },
		{ "no-lookup", no_argument, NULL, OPT_NO_LOOKUP },
		{ "no-copy", no_argument, NULL, OPT_NO_COPY },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	size_t i;
	int c, r;

	bench_common_init(co);
	bench_getopt_begin();
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		r = bench_common_option(CMD, c, optarg, argv, co);
		if (r < 0)
			return BENCH_EXIT_USAGE;
		if (r > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return BENCH_EXIT_OK;
		case OPT_SIZES:
			r = bench_parse_size_list(optarg, o->sizes, MAX_LIST, &o->nsizes);
			if (r == -EINVAL)
				return bench_usage_error(CMD, "bad --sizes: %s", kvt_last_error());
			if (r)
				return bench_usage_error(CMD,
							 "bad --sizes '%s': up to %d sizes above 0, such as 64KiB,1MiB",
							 optarg, MAX_LIST);
			for (i = 0; i < o->nsizes; i++)
				if (o->sizes[i] > (1ull << 30))
					return bench_usage_error(CMD,
								 "bad --sizes '%s': at most 1GiB per block",
								 optarg);
			break;
		case OPT_THREADS:
			if (bench_parse_uint_list(optarg, 1, 1024, o->threads, MAX_LIST,
						  &o->nthreads))
				return bench_usage_error(CMD,
							 "bad --threads '%s': up to %d counts from 1 to 1024",
							 optarg, MAX_LIST);
			break;
		case OPT_WS:
			if (bench_size_arg(CMD, "--working-set", optarg, 1, UINT64_MAX,
					   &o->working_set))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_CAP:
			if (bench_size_arg(CMD, "--capacity", optarg, 1, UINT64_MAX, &o->capacity))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_VOLUME:
			if (bench_size_arg(CMD, "--volume", optarg, 1, UINT64_MAX, &o->volume))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_BATCH:
			if (bench_parse_uint(optarg, 1, 4096, &o->batch))
				return bench_usage_error(CMD,
							 "bad --batch '%s': an integer from 1 to 4096",
							 optarg);
			break;
		case OPT_CHAIN:
			if (bench_parse_uint_list(optarg, 1, 1000000, o->chains, MAX_LIST,
						  &o->nchains))
				return bench_usage_error(CMD,
							 "bad --chain '%s': up to %d lengths from 1 to 1000000",
							 optarg, MAX_LIST);
			break;
		case OPT_NO_LOOKUP:
			o->lookup = 0;
			break;
		case OPT_NO_COPY:
			o->copy = 0;
			break;
		default:
			return bench_usage_error(CMD, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	o->reps = co->reps;
	return -1;
}

/* The options together: gets must copy, not miss. Returns -1 or 2. */
static int ram_check(const struct ram_opts *o)
{
	unsigned long tmax = 1;
	size_t i;

	if (!o->copy)
		return -1;
	if (o->working_set > o->capacity / 10 * 8)
		return bench_usage_error(CMD,
					 "--working-set must be at most 80%% of --capacity, so that "
					 "gets measure copies, not misses");
	for (i = 0; i < o->nthreads; i++)
		if (o->threads[i] > tmax)
			tmax = o->threads[i];
	for (i = 0; i < o->nsizes; i++)
		if (o->working_set / o->sizes[i] < o->batch * tmax)
			return bench_usage_error(CMD,
						 "--working-set holds %llu blocks of %llu bytes, "
						 "fewer than --batch x the most threads (%lu)",
						 (unsigned long long)(o->working_set / o->sizes[i]),
						 (unsigned long long)o->sizes[i], o->batch * tmax);
	return -1;
}

/* A JSON array of n integers. */
static json_t *int_array(const void *v, size_t n, int is64)
{
	json_t *arr = json_array();
	size_t i;

	for (i = 0; i < n; i++)
		json_array_append_new(arr, json_integer(is64 ? (json_int_t)((const uint64_t *)v)[i] :
						  (json_int_t)((const unsigned long *)v)[i]));
	return arr;
}

static void ram_config(json_t *doc, const struct ram_opts *o)
{
	bench_json_config(doc, "sizes", int_array(o->sizes, o->nsizes, 1));
	bench_json_config(doc, "threads", int_array(o->threads, o->nthreads, 0));
	bench_json_config(doc, "chains", int_array(o->chains, o->nchains, 0));
	bench_json_config(doc, "working_set", json_integer((json_int_t)o->working_set));
	bench_json_config(doc, "capacity", json_integer((json_int_t)o->capacity));
	bench_json_config(doc, "volume_per_thread", json_integer((json_int_t)o->volume));
	bench_json_config(doc, "batch", json_integer((json_int_t)o->batch));
	bench_json_config(doc, "reps", json_integer(o->reps));
}

/* Copies (every size, until stopped), then lookups. Returns the status. */
static int ram_run(const struct ram_opts *o, json_t *doc, struct bench_table *tab,
		   double *get1m, double *lookup1)
{
	int rc = BENCH_EXIT_OK;
	size_t i;

	printf("kvbench ram: libkvtier %s, %u CPUs; RAM tier %llu MiB, working set %llu MiB,\n"
	       "%llu MiB loaded per thread per repetition; median of %u reps after a warm-up\n",
	       kvt_version(), bench_ncpus(), (unsigned long long)(o->capacity >> 20),
	       (unsigned long long)(o->working_set >> 20),
	       (unsigned long long)(o->volume >> 20), o->reps);
	if (o->copy) {
		printf("\ncopies (GB/s = 1e9 bytes/s; memcpy: the same blocks, order, buffers and\n"
		       "threads, repetitions interleaved; latency per call, get_batch = %lu blocks):\n\n",
		       o->batch);
		fflush(stdout);
		for (i = 0; i < o->nsizes && !bench_stop_signal(); i++)
			if (bench_size(o, o->sizes[i], tab, doc, get1m))
				rc = BENCH_EXIT_FAIL;
		printf("\n");
		bench_table_print(tab, stdout, 2);
	}
	if (o->lookup && !bench_stop_signal() && bench_lookup(o, doc, lookup1))
		rc = BENCH_EXIT_FAIL;
	return rc;
}

/* The figures against the library's goals. */
static void ram_goals(double get1m, double lookup1)
{
	printf("\nthe library's goals:\n");
	if (isnan(get1m))
		printf("  RAM get, 1MiB blocks, 1 thread, share of memcpy >= 90%%: not measured\n");
	else
		printf("  RAM get, 1MiB blocks, 1 thread, share of memcpy >= 90%%: %.0f%% %s\n",
		       100 * get1m, get1m >= 0.9 ? "(met)" : "(NOT met)");
	if (isnan(lookup1))
		printf("  lookups, 1 thread, >= 10M keys/s: not measured\n");
	else
		printf("  lookups, 1 thread, >= 10M keys/s: %.1fM %s\n", lookup1 / 1e6,
		       lookup1 >= 1e7 ? "(met)" : "(NOT met)");
}

int bench_ram_main(int argc, char **argv)
{
	static const char *const hdr[] = { "op", "size", "thr", "GB/s", "min", "max",
					   "memcpy GB/s", "of memcpy", "p50 us",
					   "p90 us", "p99 us", "hits" };
	struct ram_opts o = {
		.sizes = { 64 << 10, 1 << 20, 4 << 20 }, .nsizes = 3,
		.threads = { 1, 2 }, .nthreads = 2,
		.chains = { 1000, 10000 }, .nchains = 2,
		.working_set = 512ull << 20, .capacity = 2ull << 30,
		.volume = 1ull << 30, .batch = 32, .lookup = 1, .copy = 1,
	};
	struct bench_common co;
	struct bench_table *tab;
	json_t *doc;
	double get1m = NAN, lookup1 = NAN;
	int rc = ram_parse(argc, argv, &o, &co);

	if (rc < 0)
		rc = ram_check(&o);
	if (rc >= 0)
		return rc;
	doc = bench_json_new(CMD);
	tab = bench_table_new(12, hdr);
	if (!doc || !tab) {
		fprintf(stderr, "kvbench ram: out of memory\n");
		rc = BENCH_EXIT_FAIL;
	} else {
		ram_config(doc, &o);
		bench_catch_stop();
		rc = ram_run(&o, doc, tab, &get1m, &lookup1);
		ram_goals(get1m, lookup1);
		if (co.json_path && bench_json_write(doc, co.json_path))
			rc = BENCH_EXIT_FAIL;
	}
	bench_table_free(tab);
	json_decref(doc);
	return bench_finish(CMD, rc);
}
