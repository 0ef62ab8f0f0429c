/*
 * ram_copy.c - the copies of "kvbench ram": for one block size and each
 * thread count, put, get and batch get throughput and latency through the
 * public API, each beside the memcpy limit measured in the same run with
 * the same sizes, buffers, access order and thread count (repetitions
 * interleaved, so both see the same machine). Every get is checked to hit,
 * and the stored bytes are verified. Uses only <kvtier.h>.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ram_cmd.h"

static void put_thread(unsigned tid, unsigned nthreads, void *arg)
{
	struct job *j = arg;
	size_t i;

	for (i = tid; i < j->nkeys; i += nthreads) {
		uint64_t t0 = bench_now_ns();
		int rc = kvt_put(j->s, j->keys[i], j->pool + i * j->size, j->size);
		uint64_t t1 = bench_now_ns();

		rb_record(j, tid, t0, t1);
		if (rc)
			rb_note_failure(j, rc);
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

		rb_record(j, tid, t0, t1);
		if (rc || len != j->size)
			rb_note_failure(j, rc);
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
		rb_note_failure(j, -ENOMEM);
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

		rb_record(j, tid, t0, t1);
		for (b = 0; b < j->batch; b++)
			if (ops[b].result || ops[b].len != j->size)
				rb_note_failure(j, ops[b].result ? ops[b].result : rc);
	}
	free(ops);
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


/* --- one block size, in phases ------------------------------------------------ */

/* What the phases of one block size share. */
struct size_run {
	const struct ram_opts *o;
	struct bench_table *tab;
	json_t *doc;
	uint64_t size;
	char sz[32];               /* size, for messages */
	size_t nkeys;              /* blocks in the working set */
	unsigned nt_max;
	kvt_store *s;
	kvt_key *keys;
	char *pool;                /* block i's bytes at pool + i * size */
	char **dst;                /* per thread, batch * size bytes */
	double *rate, *limit;      /* per repetition */
	struct bench_samples all;  /* latencies of the timed repetitions, us */
};

/* Opens the store and fills the blocks. 0, or 1 (said why) on failure. */
static int size_setup(struct size_run *c)
{
	const struct ram_opts *o = c->o;
	size_t ti;
	unsigned i;

	bench_fmt_size(c->size, c->sz, sizeof(c->sz));
	for (ti = 0; ti < o->nthreads; ti++)
		if (o->threads[ti] > c->nt_max)
			c->nt_max = (unsigned)o->threads[ti];
	if (c->nkeys < (size_t)o->batch * c->nt_max) {
		fprintf(stderr, "kvbench ram: --working-set %llu holds %zu blocks of %s, "
			"fewer than --batch x threads (%lu); skipping %s\n",
			(unsigned long long)o->working_set, c->nkeys, c->sz,
			o->batch * c->nt_max, c->sz);
		bench_json_error(c->doc, "working set too small for %s blocks", c->sz);
		return 1;
	}
	c->s = rb_open_store(o->capacity);
	c->keys = rb_make_keys(c->nkeys, c->size);
	c->pool = malloc(c->nkeys * c->size);
	c->dst = calloc(c->nt_max, sizeof(*c->dst));
	c->rate = calloc(o->reps + 1, sizeof(*c->rate));
	c->limit = calloc(o->reps + 1, sizeof(*c->limit));
	if (!c->s || !c->keys || !c->pool || !c->dst || !c->rate || !c->limit) {
		fprintf(stderr, "kvbench ram: cannot set up %s blocks (%s)\n", c->sz,
			c->s ? "out of memory" : "no store");
		bench_json_error(c->doc, "cannot set up %s blocks", c->sz);
		return 1;
	}
	for (i = 0; i < c->nt_max; i++)
		if (!(c->dst[i] = bench_buffer_alloc((size_t)o->batch * c->size))) {
			fprintf(stderr, "kvbench ram: out of memory for %s buffers\n", c->sz);
			return 1;
		}
	for (ti = 0; ti < c->nkeys; ti++)
		common_fill(c->pool + ti * c->size, c->size, common_key_seed(c->keys[ti]));
	return 0;
}

static void size_close(struct size_run *c)
{
	unsigned t;

	if (c->dst)
		for (t = 0; t < c->nt_max; t++)
			free(c->dst[t]);
	free(c->dst);
	free(c->rate);
	free(c->limit);
	free(c->pool);
	free(c->keys);
	bench_samples_free(&c->all);
	kvt_close(c->s);
}

/* Summarizes the timed repetitions of a phase into *r and reports it. */
static void size_row(struct size_run *c, const char *op, unsigned nt, unsigned batch,
		     uint64_t calls, struct job *j, struct row *r)
{
	*r = (struct row){ .op = op, .size = c->size, .threads = nt, .batch = batch,
			   .ops = calls, .failures = atomic_load(&j->failures) };
	bench_summarize(c->rate + 1, c->o->reps, &r->rate);
	bench_summarize(c->limit + 1, c->o->reps, &r->limit);
	bench_summarize(c->all.v, c->all.n, &r->lat);
	copy_row(c->tab, c->doc, r);
}

/*
 * Puts on nt threads: one warm-up round and reps timed rounds, each into an
 * emptied store, so every put stores; then every block is read back and
 * checked. Sets up *j and the memcpy probe *mcp for the phases after.
 * 0, 1 when something failed, -1 when out of memory (*mcp not made).
 */
static int size_put(struct size_run *c, unsigned nt, struct job *j,
		    struct bench_memcpy **mcp)
{
	const struct ram_opts *o = c->o;
	size_t nkeys = c->nkeys, size = c->size;
	struct rb_lat *lat = rb_lat_new(nt, nkeys / nt + 1);
	struct bench_memcpy *mc;
	struct row r;
	unsigned rep;
	int failed = 0;

	if (!lat)
		return -1;
	memset(j, 0, sizeof(*j));
	*j = (struct job){ .s = c->s, .keys = c->keys, .nkeys = nkeys, .size = size,
			   .pool = c->pool, .dst = c->dst, .lat = lat };
	mc = bench_memcpy_new(size, o->working_set, (unsigned)o->batch, nt);
	if (!mc) {
		fprintf(stderr, "kvbench ram: memcpy probe: %s\n", strerror(errno));
		rb_lat_free(lat, nt);
		return -1;
	}
	*mcp = mc;
	bench_samples_clear(&c->all);
	for (rep = 0; rep <= o->reps; rep++) {
		remove_all(c->s, c->keys, nkeys);
		uint64_t wall = rb_run(j, nt, put_thread);
		c->rate[rep] = wall ? (double)nkeys * size / ((double)wall / 1e9) : 0;
		rb_lat_collect(lat, nt, rep ? &c->all : NULL);
		if (bench_memcpy_run_into(mc, c->pool, nkeys * size, nkeys / nt,
					  &c->limit[rep], NULL))
			c->limit[rep] = NAN;
	}
	size_row(c, "put", nt, 0, (uint64_t)nkeys * o->reps, j, &r);
	if (r.failures) {
		int e = atomic_load(&j->first_err);

		fprintf(stderr, "kvbench ram: %llu puts of %s failed: %s\n",
			(unsigned long long)r.failures, c->sz, kvt_strerror(e));
		bench_json_error(c->doc, "%llu puts of %s blocks failed: %s",
				 (unsigned long long)r.failures, c->sz, kvt_strerror(e));
		failed = 1;
	}
	rb_lat_free(lat, nt);

	/* every byte stored is the byte put */
	uint64_t bad = verify_all(c->s, c->keys, nkeys, size, c->dst[0]);

	if (bad) {
		fprintf(stderr, "kvbench ram: %llu of %zu %s blocks missing or WRONG "
			"after put\n", (unsigned long long)bad, nkeys, c->sz);
		bench_json_error(c->doc, "%llu of %zu %s blocks missing or wrong after put",
				 (unsigned long long)bad, nkeys, c->sz);
		failed = 1;
	}
	return failed;
}

/*
 * Gets of ops blocks per thread, interleaved with memcpy of the same blocks
 * in the same order; every one must hit. 0, 1 when something failed, -1
 * when out of memory.
 */
static int size_get(struct size_run *c, unsigned nt, struct job *j,
		    struct bench_memcpy *mc, uint64_t ops, double *get1m_share)
{
	const struct ram_opts *o = c->o;
	struct rb_lat *lat = rb_lat_new(nt, ops);
	struct row r;
	unsigned rep;

	if (!lat)
		return -1;
	j->lat = lat;
	atomic_store(&j->failures, 0);
	j->ops = ops;
	bench_samples_clear(&c->all);
	double hits0 = rb_stat_or_nan(c->s, "ram.hits");

	for (rep = 0; rep <= o->reps; rep++) {
		if (bench_memcpy_run(mc, ops, 1, &c->limit[rep], NULL))
			c->limit[rep] = NAN;
		uint64_t wall = rb_run(j, nt, get_thread);
		c->rate[rep] = wall ? (double)ops * nt * c->size / ((double)wall / 1e9) : 0;
		rb_lat_collect(lat, nt, rep ? &c->all : NULL);
	}
	double hits = rb_stat_or_nan(c->s, "ram.hits") - hits0;

	size_row(c, "get", nt, 0, ops * nt * o->reps, j, &r);
	if (c->size == (1u << 20) && nt == 1 && !r.failures)
		*get1m_share = r.rate.median / r.limit.median;
	rb_lat_free(lat, nt);
	if (r.failures || (!isnan(hits) && hits < (double)ops * nt * (o->reps + 1))) {
		fprintf(stderr, "kvbench ram: gets of %s blocks missed: %llu failed, "
			"RAM hits %.0f of %llu\n", c->sz,
			(unsigned long long)r.failures, hits,
			(unsigned long long)(ops * nt * (o->reps + 1)));
		bench_json_error(c->doc, "gets of %s blocks on %u threads missed", c->sz, nt);
		return 1;
	}
	return 0;
}

/*
 * Batch gets into batch distinct buffers, against memcpy into as many
 * buffers. 0, 1 when some failed, -1 when out of memory.
 */
static int size_batch(struct size_run *c, unsigned nt, struct job *j,
		      struct bench_memcpy *mc, uint64_t ops)
{
	const struct ram_opts *o = c->o;
	uint64_t calls = ops / o->batch;
	struct rb_lat *lat = rb_lat_new(nt, calls);
	struct row r;
	unsigned rep;

	if (!lat) {
		fprintf(stderr, "kvbench ram: out of memory for the batch probe\n");
		return -1;
	}
	j->lat = lat;
	j->ops = calls;
	j->batch = (unsigned)o->batch;
	atomic_store(&j->failures, 0);
	bench_samples_clear(&c->all);
	for (rep = 0; rep <= o->reps; rep++) {
		if (bench_memcpy_run(mc, ops, (unsigned)o->batch, &c->limit[rep], NULL))
			c->limit[rep] = NAN;
		uint64_t wall = rb_run(j, nt, batch_thread);
		c->rate[rep] = wall ? (double)ops * nt * c->size / ((double)wall / 1e9) : 0;
		rb_lat_collect(lat, nt, rep ? &c->all : NULL);
	}
	size_row(c, "get_batch", nt, (unsigned)o->batch, calls * nt * o->reps, j, &r);
	rb_lat_free(lat, nt);
	if (r.failures) {
		fprintf(stderr, "kvbench ram: %llu batch gets of %s blocks failed\n",
			(unsigned long long)r.failures, c->sz);
		bench_json_error(c->doc, "batch gets of %s blocks on %u threads failed",
				 c->sz, nt);
		return 1;
	}
	return 0;
}

/* The index's bytes per stored block, after the copies of one size. */
static void size_index(struct size_run *c)
{
	double ibpb = rb_stat_or_nan(c->s, "ram.index_bytes_per_block");

	bench_json_result(c->doc, json_pack("{s:s, s:I, s:I, s:o}", "name", "index",
					    "block_bytes", (json_int_t)c->size, "blocks",
					    (json_int_t)c->nkeys, "index_bytes_per_block",
					    bench_json_real(ibpb)));
	if (isnan(ibpb))
		printf("  [%s: %zu blocks stored; index bytes per block: n/a]\n", c->sz,
		       c->nkeys);
	else
		printf("  [%s: %zu blocks stored; index bytes per block: %.1f]\n", c->sz,
		       c->nkeys, ibpb);
	fflush(stdout);
}

int rb_bench_size(const struct ram_opts *o, uint64_t size, struct bench_table *tab,
		  json_t *doc, double *get1m_share)
{
	struct size_run c = { .o = o, .tab = tab, .doc = doc, .size = size,
			      .nkeys = o->working_set / size, .nt_max = 1 };
	int failed = size_setup(&c);
	size_t ti;

	if (failed)
		goto out;
	for (ti = 0; ti < o->nthreads; ti++) {
		unsigned nt = (unsigned)o->threads[ti];
		uint64_t ops = o->volume / size;
		struct bench_memcpy *mc = NULL;
		struct job j;

		if (ops < o->batch)
			ops = o->batch;
		ops -= ops % o->batch; /* whole batches, same bytes for all ops */
		int p = size_put(&c, nt, &j, &mc);
		int g = p < 0 ? p : size_get(&c, nt, &j, mc, ops, get1m_share);
		int b = g < 0 ? g : size_batch(&c, nt, &j, mc, ops);

		bench_memcpy_free(mc);
		if (b < 0) { /* out of memory: nothing more of this size */
			failed = 1;
			goto out;
		}
		failed |= p | g | b;
	}
	size_index(&c);
out:
	size_close(&c);
	return failed;
}
