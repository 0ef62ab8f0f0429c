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

int bench_hash_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "block-tokens", required_argument, NULL, OPT_BT },
		{ "tokens", required_argument, NULL, OPT_TOKENS },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct bench_common co;
	unsigned long bts[MAX_BT] = { 16, 64, 256 }, ntok = 131072, v;
	size_t nbt = 3, i;
	struct bench_table *tab = NULL;
	json_t *doc = NULL;
	uint32_t *tokens = NULL;
	kvt_key *keys = NULL;
	double *rate = NULL;
	int c, r, rc = BENCH_EXIT_OK;
	char why[256];

	bench_common_init(&co);
	bench_getopt_begin();
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		r = bench_common_option(CMD, usage, c, optarg, argv, &co);
		if (r < 0)
			return BENCH_EXIT_USAGE;
		if (r > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return BENCH_EXIT_OK;
		case OPT_BT:
			if (bench_parse_uint_list(optarg, 1, 1u << 20, bts, MAX_BT, &nbt))
				return bench_usage_error(CMD, usage,
							 "bad --block-tokens '%s': up to %d integers from 1 to 1048576, comma-separated",
							 optarg, MAX_BT);
			break;
		case OPT_TOKENS:
			if (bench_parse_uint(optarg, 1, 1ul << 28, &v))
				return bench_usage_error(CMD, usage,
							 "bad --tokens '%s': an integer from 1 to 268435456",
							 optarg);
			ntok = v;
			break;
		default:
			return bench_usage_error(CMD, usage, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(CMD, usage, "unexpected argument '%s'",
					 argv[optind]);
	for (i = 0; i < nbt; i++)
		if (bts[i] > ntok)
			return bench_usage_error(CMD, usage,
						 "--block-tokens %lu is more than --tokens %lu",
						 bts[i], ntok);

	for (i = 1, v = bts[0]; i < nbt; i++)
		if (bts[i] < v)
			v = bts[i];
	tokens = malloc(ntok * sizeof(*tokens));
	keys = malloc((ntok / v) * sizeof(*keys)); /* the most keys of any size */
	rate = calloc(co.reps, sizeof(*rate));
	doc = bench_json_new(CMD);
	if (!tokens || !keys || !rate || !doc) {
		fprintf(stderr, "kvbench hash: out of memory\n");
		rc = BENCH_EXIT_FAIL;
		goto out;
	}
	bench_tokens(tokens, ntok, 151936, 0x68617368);
	bench_pin_cpu((unsigned)(sched_getcpu() >= 0 ? sched_getcpu() : 0));

	{
		json_t *btj = json_array();

		for (i = 0; i < nbt; i++)
			json_array_append_new(btj, json_integer((json_int_t)bts[i]));
		bench_json_config(doc, "block_tokens", btj);
		bench_json_config(doc, "tokens_per_call", json_integer((json_int_t)ntok));
		bench_json_config(doc, "reps", json_integer(co.reps));
	}

	static const char *const hdr[] = { "kvt_hash_chain", "Gtokens/s", "min",
					   "max", "ns/block", "GB/s in" };
	tab = bench_table_new(6, hdr);

	kvt_namespace ns = { .model = "kvbench/hash", .tokenizer = "kvbench",
			     .kv_format = "bf16/NHD", .tp_size = 1, .pp_size = 1,
			     .block_tokens = 16 };

	for (i = 0; i < nbt; i++) {
		struct chain_job j = { .tokens = tokens, .ntokens = ntok,
				       .bt = (uint32_t)bts[i], .keys = keys,
				       .nkeys = ntok / bts[i] };
		struct bench_summary s;
		uint64_t calls, t, warm = 0, wcalls = 0;
		unsigned rep;

		ns.block_tokens = j.bt;
		j.root = kvt_ns_root(&ns);
		if (check_chain(&j, why, sizeof(why))) {
			fprintf(stderr, "kvbench hash: %s\n", why);
			bench_json_error(doc, "%s", why);
			rc = BENCH_EXIT_FAIL;
			continue;
		}
		/* Warm up for at least 50 ms, then size the repetitions. */
		while (warm < 50000000ull) {
			warm += chain_calls(&j, 1);
			wcalls++;
		}
		calls = calibrate(warm / wcalls);
		for (rep = 0; rep < co.reps; rep++) {
			t = chain_calls(&j, calls);
			rate[rep] = (double)(j.nkeys * j.bt) * (double)calls /
				    ((double)t / 1e9);
		}
		bench_summarize(rate, co.reps, &s);
		bench_table_cell(tab, "block_tokens %u", j.bt);
		bench_table_cell(tab, "%.3f", s.median / 1e9);
		bench_table_cell(tab, "%.3f", s.min / 1e9);
		bench_table_cell(tab, "%.3f", s.max / 1e9);
		bench_table_cell(tab, "%.1f", 1e9 * j.bt / s.median);
		bench_table_cell(tab, "%.2f", s.median * 4 / 1e9);
		bench_table_end_row(tab);
		bench_json_result(doc, json_pack("{s:s, s:I, s:I, s:I, s:o, s:o}",
						 "name", "hash_chain", "block_tokens",
						 (json_int_t)j.bt, "tokens_per_call",
						 (json_int_t)(j.nkeys * j.bt),
						 "calls_per_rep", (json_int_t)calls,
						 "tokens_per_s", bench_json_reps(&s),
						 "ns_per_block",
						 bench_json_real(1e9 * j.bt / s.median)));
	}

	/* kvt_ns_root: a different salt on every call, as per-tenant roots. */
	struct bench_summary rs;
	{
		struct bench_summary s;
		uint64_t salt = 0, calls, t0, warm, wcalls = 0, k;
		kvt_key acc = { 0, 0 };
		unsigned rep;

		ns.block_tokens = 16;
		ns.salt = &salt;
		ns.salt_len = sizeof(salt);
		t0 = bench_now_ns();
		do {
			for (k = 0; k < 1000; k++, salt++)
				acc.lo ^= kvt_ns_root(&ns).lo;
			wcalls += 1000;
			warm = bench_now_ns() - t0;
		} while (warm < 50000000ull);
		calls = calibrate(warm / wcalls);
		for (rep = 0; rep < co.reps; rep++) {
			t0 = bench_now_ns();
			for (k = 0; k < calls; k++, salt++)
				acc.lo ^= kvt_ns_root(&ns).lo;
			rate[rep] = (double)calls / ((double)(bench_now_ns() - t0) / 1e9);
		}
		__asm__ volatile("" : : "r"(acc.lo) : "memory");
		bench_summarize(rate, co.reps, &s);
		rs = s;
		bench_json_result(doc, json_pack("{s:s, s:I, s:o}", "name", "ns_root",
						 "calls_per_rep", (json_int_t)calls,
						 "calls_per_s", bench_json_reps(&s)));
	}

	printf("kvbench hash: libkvtier %s, one thread pinned to one core, "
	       "%lu tokens per call, median of %u reps\n\n",
	       kvt_version(), ntok, co.reps);
	bench_table_print(tab, stdout, 2);
	printf("\n  kvt_ns_root: %.2f M calls/s (min %.2f, max %.2f), %.1f ns per call\n",
	       rs.median / 1e6, rs.min / 1e6, rs.max / 1e6, 1e9 / rs.median);
	printf("\n  Gtokens/s: 1e9 tokens hashed per second on one core (issue 2 target: >= 1);\n"
	       "  GB/s in: token bytes read per second\n");
	if (co.json_path && bench_json_write(doc, co.json_path))
		rc = BENCH_EXIT_FAIL;
out:
	bench_table_free(tab);
	json_decref(doc);
	free(rate);
	free(keys);
	free(tokens);
	return rc;
}
