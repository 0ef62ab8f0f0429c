/*
 * ram.c - "kvbench ram": the RAM tier through the public API. The command:
 * its options, the run (the copies of each block size, ram_copy.c, then the
 * lookups, ram_lookup.c), the report against the library's goals; and the
 * helpers both measurements share (ram_cmd.h): latency samples per thread,
 * running a job on threads, the store, keys. Uses only <kvtier.h>; knows
 * nothing about the tier's internals.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ram_cmd.h"

#define CMD "ram"

static const char usage[] =
	"usage: kvbench ram [OPTIONS]\n"
	"Measures the RAM tier: put, get, batch get (GB/s, share of memcpy measured in\n"
	"the same run) and lookups (keys/s per thread), with latency percentiles.\n"
	"  --sizes LIST        block sizes (default 64KiB,1MiB,4MiB)\n"
	"  --threads LIST      thread counts (default 1,2)\n"
	"  --working-set SIZE  bytes stored per block size (default 512MiB)\n"
	"  --capacity SIZE     RAM tier capacity (default 2GiB); must hold the working set\n"
	"  --volume SIZE       bytes each thread loads per repetition, up to 64GiB\n"
	"                      (default 1GiB)\n"
	"  --batch N           blocks per kvt_get_batch (default 32)\n"
	"  --chain LIST        keys per lookup (default 64,1000,10000)\n"
	"  --shared-prefix PCT share of each thread's chain, from its head, that is the\n"
	"                      same on every thread, as a common prompt prefix (default 50)\n"
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
	OPT_SHARED,
	OPT_NO_LOOKUP,
	OPT_NO_COPY,
};

/* --- what the measurements share ---------------------------------------------- */

void rb_note_failure(struct job *j, int rc)
{
	int zero = 0;

	atomic_fetch_add(&j->failures, 1);
	atomic_compare_exchange_strong(&j->first_err, &zero, rc ? rc : -EIO);
}

/* Per-thread latency arrays for ops samples each. */
struct rb_lat *rb_lat_new(unsigned nthreads, uint64_t ops)
{
	struct rb_lat *l = NULL;
	unsigned i;

	if (posix_memalign((void **)&l, _Alignof(struct rb_lat), nthreads * sizeof(*l)))
		return NULL;
	memset(l, 0, nthreads * sizeof(*l));
	for (i = 0; i < nthreads; i++) {
		l[i].s.v = malloc((ops ? ops : 1) * sizeof(double));
		if (!l[i].s.v) {
			while (i--)
				free(l[i].s.v);
			free(l);
			return NULL;
		}
		l[i].s.cap = ops;
	}
	return l;
}

void rb_lat_free(struct rb_lat *l, unsigned nthreads)
{
	unsigned i;

	if (!l)
		return;
	for (i = 0; i < nthreads; i++)
		free(l[i].s.v);
	free(l);
}

/* Moves the per-thread samples into all (when non-NULL) and empties them. */
void rb_lat_collect(struct rb_lat *l, unsigned nthreads, struct bench_samples *all)
{
	unsigned i;

	for (i = 0; i < nthreads; i++) {
		if (all)
			bench_samples_append(all, &l[i].s);
		l[i].s.n = 0;
	}
}

/* Runs fn on nthreads threads. Returns the wall time, 0 on failure. */
uint64_t rb_run(struct job *j, unsigned nthreads, bench_thread_fn fn)
{
	uint64_t wall = 0;
	int err = bench_parallel(nthreads, 1, fn, j, &wall);

	if (err) {
		rb_note_failure(j, err);
		return 0;
	}
	return wall ? wall : 1;
}

/* Opens a RAM-only store of the given capacity; prints why on failure. */
kvt_store *rb_open_store(uint64_t capacity)
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

kvt_key *rb_make_chain(size_t n, size_t shared, uint64_t common, uint64_t own)
{
	const uint32_t bt = 16;
	uint32_t *tok = malloc(n * bt * sizeof(*tok));
	kvt_key *keys = malloc(n * sizeof(*keys));
	kvt_namespace ns = { .model = "kvbench/ram", .tokenizer = "kvbench",
			     .kv_format = "bf16/NHD", .tp_size = 1, .pp_size = 1,
			     .block_tokens = bt, .salt = &common,
			     .salt_len = sizeof(common) };

	if (!tok || !keys) {
		free(tok);
		free(keys);
		return NULL;
	}
	if (shared > n)
		shared = n;
	bench_tokens(tok, shared * bt, 151936, common);
	bench_tokens(tok + shared * bt, (n - shared) * bt, 151936, own);
	if (kvt_hash_chain(kvt_ns_root(&ns), tok, n * bt, bt, keys, n) != n) {
		fprintf(stderr, "kvbench ram: kvt_hash_chain: %s\n", kvt_last_error());
		free(keys);
		keys = NULL;
	}
	free(tok);
	return keys;
}

/* n keys of a chain over random tokens (what real keys look like). */
kvt_key *rb_make_keys(size_t n, uint64_t seed)
{
	return rb_make_chain(n, 0, seed, seed);
}

double rb_stat_or_nan(kvt_store *s, const char *path)
{
	json_t *st = bench_store_stats(s);
	double v = NAN;

	if (st && bench_stats_number(st, path, &v))
		v = NAN;
	json_decref(st);
	return v;
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
		{ "shared-prefix", required_argument, NULL, OPT_SHARED },
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
			/* the size parser would give no reason for "" */
			if (bench_list_has_empty(optarg))
				return bench_usage_error(CMD,
							 "bad --sizes '%s': an empty item; give sizes "
							 "between commas, such as 64KiB,1MiB",
							 optarg);
			r = bench_parse_size_list(optarg, o->sizes, RAM_MAX_LIST, &o->nsizes);
			if (r == -EINVAL)
				return bench_usage_error(CMD, "bad --sizes: %s", kvt_last_error());
			if (r)
				return bench_usage_error(CMD,
							 "bad --sizes '%s': up to %d sizes above 0, such as 64KiB,1MiB",
							 optarg, RAM_MAX_LIST);
			for (i = 0; i < o->nsizes; i++)
				if (o->sizes[i] > (1ull << 30))
					return bench_usage_error(CMD,
								 "bad --sizes '%s': at most 1GiB per block",
								 optarg);
			break;
		case OPT_THREADS:
			if (bench_parse_uint_list(optarg, 1, 1024, o->threads, RAM_MAX_LIST,
						  &o->nthreads))
				return bench_usage_error(CMD,
							 "bad --threads '%s': up to %d counts from 1 to 1024",
							 optarg, RAM_MAX_LIST);
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
			if (bench_size_arg(CMD, "--volume", optarg, 1, RAM_MAX_VOLUME, &o->volume))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_BATCH:
			if (bench_parse_uint(optarg, 1, 4096, &o->batch))
				return bench_usage_error(CMD,
							 "bad --batch '%s': an integer from 1 to 4096",
							 optarg);
			break;
		case OPT_CHAIN:
			if (bench_parse_uint_list(optarg, 1, 1000000, o->chains, RAM_MAX_LIST,
						  &o->nchains))
				return bench_usage_error(CMD,
							 "bad --chain '%s': up to %d lengths from 1 to 1000000",
							 optarg, RAM_MAX_LIST);
			break;
		case OPT_SHARED:
			if (bench_parse_uint(optarg, 0, 100, &o->shared_pct))
				return bench_usage_error(CMD,
							 "bad --shared-prefix '%s': a percentage from 0 to 100",
							 optarg);
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

	/* a run that measures nothing would exit 0 with an empty report */
	if (!o->copy && !o->lookup)
		return bench_usage_error(CMD, "--no-copy and --no-lookup together leave "
					 "nothing to measure");
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
	bench_json_config(doc, "shared_prefix_percent", json_integer((json_int_t)o->shared_pct));
	bench_json_config(doc, "working_set", json_integer((json_int_t)o->working_set));
	bench_json_config(doc, "capacity", json_integer((json_int_t)o->capacity));
	bench_json_config(doc, "volume_per_thread", json_integer((json_int_t)o->volume));
	bench_json_config(doc, "batch", json_integer((json_int_t)o->batch));
	bench_json_config(doc, "reps", json_integer(o->reps));
}

/* Copies (every size, until stopped), then lookups. Returns the status. */
static int ram_run(const struct ram_opts *o, json_t *doc, struct bench_table *tab,
		   double *get1m, double *lookup1, double *lease2)
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
			if (rb_bench_size(o, o->sizes[i], tab, doc, get1m))
				rc = BENCH_EXIT_FAIL;
		printf("\n");
		bench_table_print(tab, stdout, 2);
	}
	if (o->lookup && !bench_stop_signal() && rb_bench_lookup(o, doc, lookup1, lease2))
		rc = BENCH_EXIT_FAIL;
	return rc;
}

/* The figures against the library's goals. */
static void ram_goals(const struct ram_opts *o, double get1m, double lookup1,
		      double lease2)
{
	unsigned long keys = rb_goal_chain(o);

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
	if (isnan(lease2))
		printf("  %lu-key lookups with lease, 2 threads >= 1.7x one thread: "
		       "not measured\n", keys);
	else
		printf("  %lu-key lookups with lease, 2 threads >= 1.7x one thread: %.2fx %s\n",
		       keys, lease2, lease2 >= 1.7 ? "(met)" : "(NOT met)");
}

int bench_ram_main(int argc, char **argv)
{
	static const char *const hdr[] = { "op", "size", "thr", "GB/s", "min", "max",
					   "memcpy GB/s", "of memcpy", "p50 us",
					   "p90 us", "p99 us", "hits" };
	struct ram_opts o = {
		.sizes = { 64 << 10, 1 << 20, 4 << 20 }, .nsizes = 3,
		.threads = { 1, 2 }, .nthreads = 2,
		.chains = { 64, 1000, 10000 }, .nchains = 3,
		.working_set = 512ull << 20, .capacity = 2ull << 30,
		.volume = 1ull << 30, .batch = 32, .lookup = 1, .copy = 1, .shared_pct = 50,
	};
	struct bench_common co;
	struct bench_table *tab;
	json_t *doc;
	double get1m = NAN, lookup1 = NAN, lease2 = NAN;
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
		rc = ram_run(&o, doc, tab, &get1m, &lookup1, &lease2);
		ram_goals(&o, get1m, lookup1, lease2);
		if (co.json_path && bench_json_write(doc, co.json_path))
			rc = BENCH_EXIT_FAIL;
	}
	bench_table_free(tab);
	json_decref(doc);
	return bench_finish(CMD, rc);
}

