/*
 * ram_lookup.c - the lookups of "kvbench ram": kvt_lookup of chains whose
 * keys are all stored (small blocks: the figure is the index, not the
 * bytes), with and without KVT_LEASE, in keys per second per thread and
 * latency per call, and how the keys per second of all threads scale with
 * threads; then the index's bytes per block. Each thread looks up a chain
 * of its own whose first --shared-prefix percent is the same on every
 * thread, as scheduler threads do with prompts that share a system prompt.
 * Uses only <kvtier.h>.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ram_cmd.h"

#define LOOKUP_BLOCK 4096 /* bytes per block stored for the lookup chains */
#define LOOKUP_REP_NS 200000000ull

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

		rb_record(j, tid, t0, t1);
		if (rc || found != j->chain_len)
			rb_note_failure(j, rc);
	}
}


/* One lookup measurement's state, from setup to report. */
struct lookups {
	const struct ram_opts *o;
	json_t *doc;
	struct bench_table *tab;
	kvt_store *s;
	kvt_key **chains;          /* per chain length, one per thread: [ci * nt_max + t] */
	/* [thread count][repetition]: keys/s per thread of the chains being
	 * measured (repetition 0, the warm-up, is not counted) */
	double *rate[RAM_MAX_LIST];
	/* [thread count]: latencies of the timed repetitions, us */
	struct bench_samples all[RAM_MAX_LIST];
	/* [lease][chain][thread count]: median keys/s per thread, NAN unknown */
	double median[2][RAM_MAX_LIST][RAM_MAX_LIST];
	/* [lease][chain][thread count]: the median over repetitions of the
	 * keys/s of all threads over one thread's in the same repetition,
	 * NAN unknown */
	double scale[2][RAM_MAX_LIST][RAM_MAX_LIST];
	unsigned long lmax, blocks;
	unsigned nt_max;
};

/* Keys at the head of a chain of len keys that every thread looks up. */
static size_t shared_keys(const struct lookups *c, size_t len)
{
	return len * c->o->shared_pct / 100;
}

/* Makes and stores the chains of length index ci. 0, or 1 on failure. */
static int lookup_chains(struct lookups *c, size_t ci, char *block)
{
	size_t len = c->o->chains[ci], shared = shared_keys(c, len), k;
	uint64_t common = 0x6c6f6f6b7570ull + ((uint64_t)ci << 16);

	for (unsigned t = 0; t < c->nt_max; t++) {
		kvt_key *keys = rb_make_chain(len, shared, common, common + 1 + t);

		c->chains[ci * c->nt_max + t] = keys;
		if (!keys)
			return 1;
		/* the shared keys once, each thread's own after them */
		for (k = t ? shared : 0; k < len; k++) {
			common_fill(block, LOOKUP_BLOCK, common_key_seed(keys[k]));
			int rc = kvt_put(c->s, keys[k], block, LOOKUP_BLOCK);

			if (rc) {
				fprintf(stderr, "kvbench ram: put for lookups: %s (%s)\n",
					kvt_strerror(rc), kvt_last_error());
				bench_json_error(c->doc, "put for lookups failed: %s",
						 kvt_strerror(rc));
				return 1;
			}
			c->blocks++;
		}
	}
	return 0;
}

/* Opens the store and stores every thread's chains. 0, or 1 on failure. */
static int lookup_setup(struct lookups *c)
{
	static const char *const hdr[] = { "op", "keys", "thr", "Mkeys/s/thr", "min",
					   "max", "ns/key", "p50 us", "p90 us", "p99 us",
					   "found" };
	const struct ram_opts *o = c->o;
	char *block = NULL;
	size_t ci, ti;
	int failed = 0;

	for (ci = 0; ci < o->nchains; ci++)
		if (o->chains[ci] > c->lmax)
			c->lmax = o->chains[ci];
	for (ti = 0; ti < o->nthreads; ti++)
		if (o->threads[ti] > c->nt_max)
			c->nt_max = (unsigned)o->threads[ti];
	c->tab = bench_table_new(11, hdr);
	c->s = rb_open_store(o->capacity);
	c->chains = calloc(o->nchains * c->nt_max, sizeof(*c->chains));
	block = bench_buffer_alloc(LOOKUP_BLOCK);
	for (ti = 0; ti < o->nthreads; ti++)
		if (!(c->rate[ti] = calloc(o->reps + 1, sizeof(double))))
			failed = 1;
	if (failed || !c->tab || !c->s || !c->chains || !block) {
		free(block);
		return 1;
	}
	for (ci = 0; ci < o->nchains && !failed; ci++)
		failed = lookup_chains(c, ci, block);
	free(block);
	return failed;
}

/* Calls of the chains of length index ci per repetition: about
 * LOOKUP_REP_NS worth. */
static uint64_t lookup_calls(struct lookups *c, size_t ci, unsigned flags)
{
	uint64_t calls, t0, n = 0;
	size_t found, len = c->o->chains[ci];

	t0 = bench_now_ns();
	do {
		kvt_lookup(c->s, c->chains[ci * c->nt_max], len, flags, &found);
		n++;
	} while (bench_now_ns() - t0 < 20000000ull);
	calls = LOOKUP_REP_NS / ((bench_now_ns() - t0) / n + 1);
	return calls ? calls : 1;
}

/* Reports one row: its table line, its JSON result, and any short calls.
 * *median: the row's median keys/s per thread. */
static int lookup_report_row(struct lookups *c, const char *op, size_t len, size_t ti,
			     uint64_t calls, struct job *j, double *median)
{
	struct bench_summary rs, ls;
	uint64_t fails = atomic_load(&j->failures);
	unsigned nt = (unsigned)c->o->threads[ti];

	bench_summarize(c->rate[ti] + 1, c->o->reps, &rs);
	bench_summarize(c->all[ti].v, c->all[ti].n, &ls);
	*median = rs.median;
	bench_table_cell(c->tab, "%s", op);
	bench_table_cell(c->tab, "%zu", len);
	bench_table_cell(c->tab, "%u", nt);
	bench_table_cell(c->tab, "%.2f", rs.median / 1e6);
	bench_table_cell(c->tab, "%.2f", rs.min / 1e6);
	bench_table_cell(c->tab, "%.2f", rs.max / 1e6);
	bench_table_cell(c->tab, "%.1f", 1e9 / rs.median);
	bench_table_cell(c->tab, "%.1f", ls.median);
	bench_table_cell(c->tab, "%.1f", ls.p90);
	bench_table_cell(c->tab, "%.1f", ls.p99);
	bench_table_cell(c->tab, "%s", fails ? "SHORT" : "all");
	bench_table_end_row(c->tab);
	bench_json_result(c->doc, json_pack(
		"{s:s, s:I, s:I, s:o, s:o, s:I, s:I}", "name", op,
		"keys_per_call", (json_int_t)len, "threads",
		(json_int_t)nt, "keys_per_s_per_thread",
		bench_json_reps(&rs), "latency_us_per_call",
		bench_json_latency(&ls), "calls",
		(json_int_t)(calls * nt * c->o->reps), "short_calls",
		(json_int_t)fails));
	if (!fails)
		return 0;
	int e = atomic_load(&j->first_err);

	fprintf(stderr, "kvbench ram: %llu %s calls of %zu keys "
		"did not find the whole chain%s%s\n",
		(unsigned long long)fails, op, len,
		e ? ": " : "", e ? kvt_strerror(e) : "");
	bench_json_error(c->doc, "%llu %s calls of %zu keys on %u threads "
			 "found less than the chain",
			 (unsigned long long)fails, op, len, nt);
	return 1;
}

/*
 * The median over repetitions of nt x rate[ti][rep] / rate[one][rep]: how
 * the keys/s of all threads scale over one thread's, each repetition's
 * against the one thread of the same repetition. NAN without both.
 */
static double paired_scale(const struct lookups *c, size_t ti, size_t one)
{
	unsigned reps = c->o->reps, n = 0;
	double *x = calloc(reps, sizeof(*x));
	struct bench_summary rs;

	for (unsigned rep = 1; x && rep <= reps; rep++)
		if (c->rate[one][rep] > 0 && c->rate[ti][rep] > 0)
			x[n++] = (double)c->o->threads[ti] * c->rate[ti][rep] /
				 c->rate[one][rep];
	if (!n) {
		free(x);
		return NAN;
	}
	bench_summarize(x, n, &rs);
	free(x);
	return rs.median;
}

/*
 * The rows of the chains of length index ci, one per thread count: reps
 * timed repetitions after a warm-up, the thread counts taking turns within
 * each repetition, so that a slow spell of the machine falls on all of
 * them rather than on one row. Sets median[fi][ci][] (keys/s per thread)
 * and scale[fi][ci][] (NAN where short or not measured). 0, 1 when calls
 * were short, -1 when out of memory.
 */
static int lookup_rows(struct lookups *c, int fi, size_t ci, uint64_t calls)
{
	const struct ram_opts *o = c->o;
	const char *op = fi ? "lookup+lease" : "lookup";
	size_t len = o->chains[ci], ti, one = SIZE_MAX;
	struct rb_lat *lat[RAM_MAX_LIST] = { 0 };
	struct job j[RAM_MAX_LIST];
	int failed = 0;

	for (ti = 0; ti < o->nthreads; ti++) {
		unsigned nt = (unsigned)o->threads[ti];

		j[ti] = (struct job){ .s = c->s, .chain_len = len,
				      .chains = (const kvt_key *const *)c->chains + ci * c->nt_max,
				      .flags = fi ? KVT_LEASE : 0, .ops = calls };
		lat[ti] = j[ti].lat = rb_lat_new(nt, calls);
		bench_samples_clear(&c->all[ti]);
		failed |= !lat[ti];
		if (nt == 1)
			one = ti;
	}
	for (unsigned rep = 0; !failed && rep <= o->reps; rep++) {
		for (ti = 0; ti < o->nthreads; ti++) {
			unsigned nt = (unsigned)o->threads[ti];
			uint64_t wall = rb_run(&j[ti], nt, lookup_thread);

			c->rate[ti][rep] = wall ? (double)len * calls / ((double)wall / 1e9) : 0;
			rb_lat_collect(lat[ti], nt, rep ? &c->all[ti] : NULL);
		}
	}
	for (ti = 0; ti < o->nthreads; ti++)
		rb_lat_free(lat[ti], (unsigned)o->threads[ti]);
	if (failed)
		return -1;
	for (ti = 0; ti < o->nthreads; ti++) {
		double median;
		int r = lookup_report_row(c, op, len, ti, calls, &j[ti], &median);

		c->median[fi][ci][ti] = r ? NAN : median;
		failed |= r;
	}
	for (ti = 0; ti < o->nthreads; ti++)
		c->scale[fi][ci][ti] = one == SIZE_MAX || isnan(c->median[fi][ci][ti]) ||
				       isnan(c->median[fi][ci][one]) ? NAN :
				       paired_scale(c, ti, one);
	return failed;
}

/* scale[fi][ci][] of nt threads, or NAN where not measured. */
static double lookup_scale(const struct lookups *c, int fi, size_t ci, unsigned long nt)
{
	for (size_t ti = 0; ti < c->o->nthreads; ti++)
		if (c->o->threads[ti] == nt)
			return c->scale[fi][ci][ti];
	return NAN;
}

/* The scaling lines under the table, and their JSON results. */
static void lookup_report_scaling(struct lookups *c)
{
	const struct ram_opts *o = c->o;
	int printed = 0;

	for (int fi = 0; fi < 2; fi++) {
		for (size_t ci = 0; ci < o->nchains; ci++) {
			const char *op = fi ? "lookup+lease" : "lookup";
			int row = 0;

			for (size_t ti = 0; ti < o->nthreads; ti++) {
				unsigned long nt = o->threads[ti];
				double x = lookup_scale(c, fi, ci, nt);

				if (nt == 1 || isnan(x))
					continue;
				if (!printed++)
					printf("\n  scaling: keys/s of all threads together over one "
					       "thread's in the same repetition,\n  median of the "
					       "repetitions (%u CPUs, %u cores; threads pinned a "
					       "core each\n  while there are cores):\n",
					       bench_ncpus(), bench_ncores());
				if (!row++)
					printf("    %-13s %6lu keys:", op, o->chains[ci]);
				printf("  %lu thr %.2fx", nt, x);
				bench_json_result(c->doc, json_pack(
					"{s:s, s:s, s:I, s:I, s:I, s:f}", "name",
					"lookup_scaling", "op", op, "keys_per_call",
					(json_int_t)o->chains[ci], "shared_keys",
					(json_int_t)shared_keys(c, o->chains[ci]), "threads",
					(json_int_t)nt, "times_one_thread", x));
			}
			if (row)
				printf("\n");
		}
	}
}

/* The table, the scaling and the index's bytes per stored block. */
static void lookup_report(struct lookups *c)
{
	double ibpb = rb_stat_or_nan(c->s, "ram.index_bytes_per_block");

	printf("\nlookups: kvt_lookup over chains whose keys are all stored (blocks of %d "
	       "bytes), one chain\nper thread, the first %lu%% of every chain the same on "
	       "every thread; keys per second per thread:\n\n",
	       LOOKUP_BLOCK, c->o->shared_pct);
	bench_table_print(c->tab, stdout, 2);
	lookup_report_scaling(c);
	if (isnan(ibpb))
		printf("\n  index bytes per stored block (%lu blocks): n/a\n", c->blocks);
	else
		printf("\n  index bytes per stored block (%lu blocks): %.1f\n", c->blocks,
		       ibpb);
	bench_json_result(c->doc, json_pack("{s:s, s:I, s:I, s:o}", "name", "index",
					    "block_bytes", (json_int_t)LOOKUP_BLOCK,
					    "blocks", (json_int_t)c->blocks,
					    "index_bytes_per_block", bench_json_real(ibpb)));
}

unsigned long rb_goal_chain(const struct ram_opts *o)
{
	unsigned long longest = 0;

	for (size_t ci = 0; ci < o->nchains; ci++) {
		if (o->chains[ci] == RAM_GOAL_CHAIN)
			return RAM_GOAL_CHAIN;
		if (o->chains[ci] > longest)
			longest = o->chains[ci];
	}
	return longest;
}

int rb_bench_lookup(const struct ram_opts *o, json_t *doc, double *lookup1,
		    double *lease2)
{
	struct lookups c = { .o = o, .doc = doc, .nt_max = 1 };
	size_t ci, ti;
	unsigned t;
	int failed = lookup_setup(&c), fi;

	for (fi = 0; fi < 2; fi++)
		for (ci = 0; ci < RAM_MAX_LIST; ci++)
			for (ti = 0; ti < RAM_MAX_LIST; ti++)
				c.median[fi][ci][ti] = c.scale[fi][ci][ti] = NAN;
	if (failed)
		goto out;
	for (fi = 0; fi < 2; fi++) {
		for (ci = 0; ci < o->nchains; ci++) {
			size_t len = o->chains[ci];
			int r = lookup_rows(&c, fi, ci, lookup_calls(&c, ci, fi ? KVT_LEASE : 0));

			if (r < 0) {
				failed = 1;
				goto out;
			}
			failed |= r;
			for (ti = 0; ti < o->nthreads; ti++)
				if (!fi && o->threads[ti] == 1 && len == c.lmax &&
				    !isnan(c.median[fi][ci][ti]))
					*lookup1 = c.median[fi][ci][ti];
			if (fi && len == rb_goal_chain(o))
				*lease2 = lookup_scale(&c, 1, ci, 2);
		}
	}
	lookup_report(&c);
out:
	if (failed && !c.tab)
		fprintf(stderr, "kvbench ram: cannot set up the lookup measurement\n");
	if (c.chains)
		for (t = 0; t < o->nchains * c.nt_max; t++)
			free(c.chains[t]);
	free(c.chains);
	for (ti = 0; ti < RAM_MAX_LIST; ti++) {
		free(c.rate[ti]);
		bench_samples_free(&c.all[ti]);
	}
	bench_table_free(c.tab);
	kvt_close(c.s);
	return failed;
}
