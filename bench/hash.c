/*
 * hash.c - "kvbench hash": kvt_hash_chain in tokens per second on one core
 * for several block sizes, and kvt_ns_root in calls per second. Checks on the
 * way that a chain hashed in two calls equals the chain hashed in one.
 * Uses only <kvtier.h>; knows nothing about how the library hashes.
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define CMD "hash"
#define MAX_BT 16

static const char usage[] =
	"usage: kvbench hash [OPTIONS]\n"
	"Measures kvt_hash_chain (tokens/s) and kvt_ns_root (calls/s) on one core.\n"
	"  --block-tokens LIST  tokens per block (default 16,64,256)\n"
	"  --tokens N           tokens hashed per call (default 131072)\n"
	"  --reps N             timed repetitions, median reported (default 5)\n"
	"  --json FILE          write the results as JSON to FILE\n"
	"  --help               this text\n";

enum { OPT_BT = BENCH_OPT_FIRST_FREE, OPT_TOKENS };

/* Target length of one timed repetition. */
#define REP_NS 200000000ull

/* Calls of fn needed for a repetition of about REP_NS, from a warm-up. */
static uint64_t calibrate(uint64_t ns_per_call)
{
	uint64_t n = ns_per_call ? REP_NS / ns_per_call : REP_NS;

	return n ? n : 1;
}

struct chain_job {
	const uint32_t *tokens;
	size_t ntokens;
	uint32_t bt;
	kvt_key root;
	kvt_key *keys;
	size_t nkeys;
};

static uint64_t chain_calls(const struct chain_job *j, uint64_t calls)
{
	uint64_t t0 = bench_now_ns(), i;
	size_t got = 0;

	for (i = 0; i < calls; i++)
		got += kvt_hash_chain(j->root, j->tokens, j->ntokens, j->bt,
				      j->keys, j->nkeys);
	__asm__ volatile("" : : "r"(got) : "memory");
	return bench_now_ns() - t0;
}

/* The chain in one call must equal the chain in two calls (continued from
 * the last key of the first), and a second hashing must give the same keys. */
static int check_chain(const struct chain_job *j, char *why, size_t cap)
{
	size_t half = j->nkeys / 2, n1, n2, n;
	kvt_key *again = calloc(j->nkeys, sizeof(*again));
	kvt_key parent;
	int ok = 1;

	if (!again) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	n = kvt_hash_chain(j->root, j->tokens, j->ntokens, j->bt, j->keys,
			   j->nkeys);
	if (n != j->nkeys) {
		snprintf(why, cap, "kvt_hash_chain returned %zu keys, expected %zu (%s)",
			 n, j->nkeys, kvt_last_error());
		free(again);
		return -EIO;
	}
	n1 = kvt_hash_chain(j->root, j->tokens, half * j->bt, j->bt, again, half);
	parent = half ? again[half - 1] : j->root;
	n2 = kvt_hash_chain(parent, j->tokens + half * j->bt,
			    j->ntokens - half * j->bt, j->bt, again + half,
			    j->nkeys - half);
	if (n1 + n2 != n || memcmp(again, j->keys, n * sizeof(*again)))
		ok = 0;
	free(again);
	if (!ok) {
		snprintf(why, cap,
			 "block_tokens %u: a chain continued from its parent differs from the chain hashed at once",
			 j->bt);
		return -EIO;
	}
	return 0;
}

/* The command line. */
struct hash_opts {
	struct bench_common co;
	unsigned long bts[MAX_BT]; /* --block-tokens */
	size_t nbt;
	unsigned long ntok; /* --tokens */
};

/* A run: inputs, outputs and what has gone wrong. */
struct hash_run {
	const struct hash_opts *o;
	uint32_t *tokens;
	kvt_key *keys;
	double *rate; /* [reps] */
	json_t *doc;
	struct bench_table *tab;
	kvt_namespace ns;
	struct bench_summary roots; /* kvt_ns_root calls/s */
	int rc;
};

/* Parses the command line into o. Returns -1 to run, else the exit status. */
static int hash_parse(int argc, char **argv, struct hash_opts *o)
{
	static const struct option longopts[] = {
		{ "block-tokens", required_argument, NULL, OPT_BT },
		{ "tokens", required_argument, NULL, OPT_TOKENS },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	int c, r;
	size_t i;

	*o = (struct hash_opts){ .bts = { 16, 64, 256 }, .nbt = 3, .ntok = 131072 };
	bench_common_init(&o->co);
	bench_getopt_begin();
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		r = bench_common_option(CMD, c, optarg, argv, &o->co);
		if (r < 0)
			return BENCH_EXIT_USAGE;
		if (r > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return BENCH_EXIT_OK;
		case OPT_BT:
			if (bench_parse_uint_list(optarg, 1, 1u << 20, o->bts, MAX_BT, &o->nbt))
				return bench_usage_error(CMD,
							 "bad --block-tokens '%s': up to %d integers from 1 to 1048576, comma-separated",
							 optarg, MAX_BT);
			break;
		case OPT_TOKENS:
			if (bench_parse_uint(optarg, 1, 1ul << 28, &o->ntok))
				return bench_usage_error(CMD,
							 "bad --tokens '%s': an integer from 1 to 268435456",
							 optarg);
			break;
		default:
			return bench_usage_error(CMD, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	for (i = 0; i < o->nbt; i++)
		if (o->bts[i] > o->ntok)
			return bench_usage_error(CMD, "--block-tokens %lu is more than --tokens %lu",
						 o->bts[i], o->ntok);
	return -1;
}

/* Inputs and outputs of a run. Returns 0 or -ENOMEM. */
static int hash_setup(struct hash_run *h, const struct hash_opts *o)
{
	static const char *const hdr[] = { "kvt_hash_chain", "Gtokens/s", "min",
					   "max", "ns/block", "GB/s in" };
	unsigned long least = o->bts[0];
	json_t *btj = json_array();
	size_t i;

	for (i = 1; i < o->nbt; i++)
		if (o->bts[i] < least)
			least = o->bts[i];
	*h = (struct hash_run){ .o = o,
				.ns = { .model = "kvbench/hash", .tokenizer = "kvbench",
					.kv_format = "bf16/NHD", .tp_size = 1,
					.pp_size = 1, .block_tokens = 16 } };
	h->tokens = malloc(o->ntok * sizeof(*h->tokens));
	h->keys = malloc((o->ntok / least) * sizeof(*h->keys)); /* the most of any size */
	h->rate = calloc(o->co.reps, sizeof(*h->rate));
	h->doc = bench_json_new(CMD);
	h->tab = bench_table_new(6, hdr);
	if (!h->tokens || !h->keys || !h->rate || !h->doc || !h->tab || !btj) {
		json_decref(btj);
		return -ENOMEM;
	}
	bench_tokens(h->tokens, o->ntok, 151936, 0x68617368);
	for (i = 0; i < o->nbt; i++)
		json_array_append_new(btj, json_integer((json_int_t)o->bts[i]));
	bench_json_config(h->doc, "block_tokens", btj);
	bench_json_config(h->doc, "tokens_per_call", json_integer((json_int_t)o->ntok));
	bench_json_config(h->doc, "reps", json_integer(o->co.reps));
	return 0;
}

/* kvt_hash_chain at bt tokens per block: checked, warmed up, timed. */
static void bench_chain(struct hash_run *h, uint32_t bt)
{
	struct chain_job j = { .tokens = h->tokens, .ntokens = h->o->ntok, .bt = bt,
			       .keys = h->keys, .nkeys = h->o->ntok / bt };
	struct bench_summary s;
	uint64_t calls, warm = 0, wcalls = 0;
	unsigned rep;
	char why[256];

	h->ns.block_tokens = bt;
	j.root = kvt_ns_root(&h->ns);
	if (check_chain(&j, why, sizeof(why))) {
		fprintf(stderr, "kvbench hash: %s\n", why);
		bench_json_error(h->doc, "%s", why);
		h->rc = BENCH_EXIT_FAIL;
		return;
	}
	/* Warm up for at least 50 ms, then size the repetitions. */
	while (warm < 50000000ull) {
		warm += chain_calls(&j, 1);
		wcalls++;
	}
	calls = calibrate(warm / wcalls);
	for (rep = 0; rep < h->o->co.reps && !bench_stop_signal(); rep++)
		h->rate[rep] = (double)(j.nkeys * j.bt) * (double)calls /
			       ((double)chain_calls(&j, calls) / 1e9);
	bench_summarize(h->rate, rep, &s);
	bench_table_cell(h->tab, "block_tokens %u", j.bt);
	bench_table_cell(h->tab, "%.3f", s.median / 1e9);
	bench_table_cell(h->tab, "%.3f", s.min / 1e9);
	bench_table_cell(h->tab, "%.3f", s.max / 1e9);
	bench_table_cell(h->tab, "%.1f", 1e9 * j.bt / s.median);
	bench_table_cell(h->tab, "%.2f", s.median * 4 / 1e9);
	bench_table_end_row(h->tab);
	bench_json_result(h->doc, json_pack("{s:s, s:I, s:I, s:I, s:o, s:o}",
					    "name", "hash_chain", "block_tokens",
					    (json_int_t)j.bt, "tokens_per_call",
					    (json_int_t)(j.nkeys * j.bt),
					    "calls_per_rep", (json_int_t)calls,
					    "tokens_per_s", bench_json_reps(&s),
					    "ns_per_block",
					    bench_json_real(1e9 * j.bt / s.median)));
}

/* kvt_ns_root: a different salt on every call, as per-tenant roots. */
static void bench_roots(struct hash_run *h)
{
	uint64_t salt = 0, calls, t0, warm, wcalls = 0, k;
	kvt_key acc = { 0, 0 };
	unsigned rep;

	h->ns.block_tokens = 16;
	h->ns.salt = &salt;
	h->ns.salt_len = sizeof(salt);
	t0 = bench_now_ns();
	do {
		for (k = 0; k < 1000; k++, salt++)
			acc.lo ^= kvt_ns_root(&h->ns).lo;
		wcalls += 1000;
		warm = bench_now_ns() - t0;
	} while (warm < 50000000ull);
	calls = calibrate(warm / wcalls);
	for (rep = 0; rep < h->o->co.reps && !bench_stop_signal(); rep++) {
		t0 = bench_now_ns();
		for (k = 0; k < calls; k++, salt++)
			acc.lo ^= kvt_ns_root(&h->ns).lo;
		h->rate[rep] = (double)calls / ((double)(bench_now_ns() - t0) / 1e9);
	}
	__asm__ volatile("" : : "r"(acc.lo) : "memory");
	bench_summarize(h->rate, rep, &h->roots);
	bench_json_result(h->doc, json_pack("{s:s, s:I, s:o}", "name", "ns_root",
					    "calls_per_rep", (json_int_t)calls,
					    "calls_per_s", bench_json_reps(&h->roots)));
}

static int hash_report(struct hash_run *h)
{
	const struct bench_summary *rs = &h->roots;

	printf("kvbench hash: libkvtier %s, one thread pinned to one core, "
	       "%lu tokens per call, median of %u reps\n\n",
	       kvt_version(), h->o->ntok, h->o->co.reps);
	bench_table_print(h->tab, stdout, 2);
	if (rs->n)
		printf("\n  kvt_ns_root: %.2f M calls/s (min %.2f, max %.2f), %.1f ns per call\n",
		       rs->median / 1e6, rs->min / 1e6, rs->max / 1e6, 1e9 / rs->median);
	printf("\n  Gtokens/s: 1e9 tokens hashed per second on one core;\n"
	       "  GB/s in: token bytes read per second\n");
	if (h->o->co.json_path && bench_json_write(h->doc, h->o->co.json_path))
		h->rc = BENCH_EXIT_FAIL;
	return h->rc;
}

int bench_hash_main(int argc, char **argv)
{
	struct hash_opts o;
	struct hash_run h;
	size_t i;
	int rc = hash_parse(argc, argv, &o);

	if (rc >= 0)
		return rc;
	if (hash_setup(&h, &o)) {
		fprintf(stderr, "kvbench hash: out of memory\n");
		rc = BENCH_EXIT_FAIL;
	} else {
		bench_pin_cpu((unsigned)(sched_getcpu() >= 0 ? sched_getcpu() : 0));
		bench_catch_stop();
		for (i = 0; i < o.nbt && !bench_stop_signal(); i++)
			bench_chain(&h, (uint32_t)o.bts[i]);
		if (!bench_stop_signal())
			bench_roots(&h);
		rc = hash_report(&h);
	}
	bench_table_free(h.tab);
	json_decref(h.doc);
	free(h.rate);
	free(h.keys);
	free(h.tokens);
	return bench_finish(CMD, rc);
}
