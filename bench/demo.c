/*
 * demo.c - "kvbench" with no command: a short tour of the store on an
 * embedded configuration (a RAM tier and a file-backed disk tier in a fresh
 * temporary directory). It hashes prompts that share a prefix, stores their
 * blocks, finds and leases the longest stored prefix, loads it back and
 * verifies every byte, overflows RAM so blocks spill to disk, reads them back,
 * and prints what happened, per tier, from the store's own statistics.
 * Uses only <kvtier.h>; knows nothing about how the tiers work inside.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define CMD "demo"

static const char usage[] =
	"usage: kvbench [demo] [OPTIONS]\n"
	"A short tour: prompts sharing a prefix are hashed, stored, looked up,\n"
	"loaded and verified; RAM overflows so blocks spill to disk and come back.\n"
	"  --ram SIZE     RAM tier capacity (default 256MiB)\n"
	"  --disk SIZE    disk tier capacity, 0 for none (default 1GiB)\n"
	"  --dir DIR      put the disk tier file in DIR instead of a fresh\n"
	"                 directory under /var/tmp (which is removed at exit)\n"
	"  --json FILE    write the results as JSON to FILE\n"
	"  --help         this text\n"
	"(--reps is accepted and ignored: the demo makes one pass.)\n";

enum { OPT_RAM = BENCH_OPT_FIRST_FREE, OPT_DISK, OPT_DIR };

/* Qwen3-Coder-30B-A3B: 48 layers, 4 KV heads, head_dim 128, bf16, K and V. */
#define LAYERS 48
#define KV_HEADS 4
#define HEAD_DIM 128
#define DTYPE_BYTES 2
#define BLOCK_TOKENS 16
#define BLOCK_BYTES ((size_t)2 * LAYERS * KV_HEADS * HEAD_DIM * DTYPE_BYTES * BLOCK_TOKENS)

#define NPROMPTS 4
#define SYSTEM_TOKENS 512   /* shared by every prompt: 32 blocks */
#define USER_TOKENS 394     /* per prompt: 24 full blocks and 10 tokens */
#define PROMPT_TOKENS (SYSTEM_TOKENS + USER_TOKENS)
#define DOC_TOKENS 4096     /* the overflow: 256 blocks, 384 MiB */
#define BATCH 32            /* blocks per put/get batch */
#define VOCAB 151936

#define NP (PROMPT_TOKENS / BLOCK_TOKENS) /* keys per prompt */
#define ND (DOC_TOKENS / BLOCK_TOKENS)    /* keys of the document */

/* The command line. */
struct demo_opts {
	struct bench_common co;
	const char *cmd;      /* "demo", or "" when run as plain "kvbench" */
	uint64_t ram, disk;   /* tier capacities; disk 0: none */
	const char *user_dir; /* --dir, or NULL: a fresh temporary directory */
};

struct demo {
	kvt_store *s;
	int have_disk;
	kvt_op ops[BATCH];
	void *buf[BATCH];
	json_t *doc;
	struct bench_table *phases;
	char dir[PATH_MAX], disk_path[PATH_MAX];
	int made_dir;
	/* the prompts, the document and their keys */
	uint32_t *prompt[NPROMPTS], *doc_tokens;
	kvt_key pk[NPROMPTS][NP], *dk;
	int prefix_ok, split_ok;
	int rc;    /* BENCH_EXIT_FAIL once something went wrong */
	int fatal; /* no point going on, nor reporting */
	/* verification totals */
	uint64_t verified_blocks, verified_bytes, wrong_blocks, failed_ops;
};

/* Store-wide hit counters, from kvt_stats_json. */
struct hits {
	double ram, disk, miss;
};

static void read_hits(kvt_store *s, struct hits *h)
{
	json_t *st = bench_store_stats(s);

	h->ram = h->disk = h->miss = 0;
	if (!st)
		return;
	if (bench_stats_number(st, "store.hits_ram", &h->ram))
		bench_stats_number(st, "ram.hits", &h->ram);
	if (bench_stats_number(st, "store.hits_disk", &h->disk))
		bench_stats_number(st, "disk.hits", &h->disk);
	if (bench_stats_number(st, "store.misses", &h->miss))
		bench_stats_number(st, "ram.misses", &h->miss);
	json_decref(st);
}

/* One row of the phase table and one "results" entry. */
static void phase_done(struct demo *d, const char *name, size_t blocks,
		       uint64_t ns, const struct hits *before)
{
	struct hits after, delta = { 0, 0, 0 };
	double secs = (double)ns / 1e9;
	double bytes = (double)blocks * BLOCK_BYTES;
	double gbs = secs > 0 ? bytes / secs / 1e9 : NAN;

	if (before) {
		read_hits(d->s, &after);
		delta.ram = after.ram - before->ram;
		delta.disk = after.disk - before->disk;
		delta.miss = after.miss - before->miss;
	}
	bench_table_cell(d->phases, "%s", name);
	bench_table_cell(d->phases, "%zu", blocks);
	bench_table_cell(d->phases, "%.0f", bytes / (1 << 20));
	bench_table_cell(d->phases, "%.3f", secs);
	if (isfinite(gbs))
		bench_table_cell(d->phases, "%.2f", gbs);
	else
		bench_table_cell(d->phases, "-"); /* nothing timed: null in the JSON */
	if (before) {
		bench_table_cell(d->phases, "%.0f", delta.ram);
		bench_table_cell(d->phases, "%.0f", delta.disk);
		bench_table_cell(d->phases, "%.0f", delta.miss);
	} else {
		bench_table_cell(d->phases, "-");
		bench_table_cell(d->phases, "-");
		bench_table_cell(d->phases, "-");
	}
	bench_table_end_row(d->phases);
	json_t *r = json_pack("{s:s, s:I, s:I, s:o, s:o}", "name", name, "blocks",
			      (json_int_t)blocks, "bytes", (json_int_t)bytes,
			      "seconds", bench_json_real(secs), "GB_per_s",
			      bench_json_real(gbs));
	if (r && before) {
		json_object_set_new(r, "hits_ram", json_integer((json_int_t)delta.ram));
		json_object_set_new(r, "hits_disk", json_integer((json_int_t)delta.disk));
		json_object_set_new(r, "misses", json_integer((json_int_t)delta.miss));
	}
	bench_json_result(d->doc, r);
}

/*
 * Stores keys[0..n) in batches, each block holding bytes derived from its
 * key (what a real engine's KV would be). Returns the time spent in
 * kvt_put_batch, or counts failures in d->failed_ops.
 */
static uint64_t put_blocks(struct demo *d, const kvt_key *keys, size_t n)
{
	uint64_t ns = 0;
	size_t i, j, m;

	for (i = 0; i < n; i += m) {
		m = n - i < BATCH ? n - i : BATCH;
		for (j = 0; j < m; j++) {
			common_fill(d->buf[j], BLOCK_BYTES, common_key_seed(keys[i + j]));
			d->ops[j] = (kvt_op){ .key = keys[i + j], .buf = d->buf[j],
					      .len = BLOCK_BYTES };
		}
		uint64_t t0 = bench_now_ns();
		int rc = kvt_put_batch(d->s, d->ops, m);

		ns += bench_now_ns() - t0;
		if (rc) {
			for (j = 0; j < m; j++)
				if (d->ops[j].result)
					d->failed_ops++;
			fprintf(stderr, "kvbench demo: kvt_put_batch: %s (%s)\n",
				kvt_strerror(rc), kvt_last_error());
			bench_json_error(d->doc, "put_batch: %s (%s)", kvt_strerror(rc),
					 kvt_last_error());
		}
	}
	return ns;
}

/*
 * Loads keys[0..n) in batches and verifies every byte. Returns the time
 * spent in kvt_get_batch. Blocks that fail to load or differ are counted.
 */
static uint64_t get_blocks(struct demo *d, const kvt_key *keys, size_t n)
{
	uint64_t ns = 0;
	size_t i, j, m;

	for (i = 0; i < n; i += m) {
		m = n - i < BATCH ? n - i : BATCH;
		for (j = 0; j < m; j++)
			d->ops[j] = (kvt_op){ .key = keys[i + j], .buf = d->buf[j],
					      .len = BLOCK_BYTES, .result = 1 };
		uint64_t t0 = bench_now_ns();
		int rc = kvt_get_batch(d->s, d->ops, m);

		ns += bench_now_ns() - t0;
		if (rc) {
			fprintf(stderr, "kvbench demo: kvt_get_batch: %s (%s)\n",
				kvt_strerror(rc), kvt_last_error());
			bench_json_error(d->doc, "get_batch: %s (%s)", kvt_strerror(rc),
					 kvt_last_error());
		}
		for (j = 0; j < m; j++) {
			kvt_op *op = &d->ops[j];

			if (op->result) {
				d->failed_ops++;
				continue;
			}
			long long bad = op->len == BLOCK_BYTES ?
				common_check(op->buf, BLOCK_BYTES, common_key_seed(op->key)) : 0;
			if (bad >= 0) {
				d->wrong_blocks++;
				fprintf(stderr, "kvbench demo: WRONG BYTES in block %zu: "
					"length %zu, first difference at byte %lld\n",
					i + j, op->len, bad);
				bench_json_error(d->doc, "wrong bytes in block %zu at byte %lld",
						 i + j, bad);
				continue;
			}
			d->verified_blocks++;
			d->verified_bytes += BLOCK_BYTES;
		}
	}
	return ns;
}

/* Looks keys up with a lease. Returns the found prefix, or 0 after a message. */
static size_t lookup_lease(struct demo *d, const kvt_key *keys, size_t n)
{
	size_t found = 0;
	int rc = kvt_lookup(d->s, keys, n, KVT_LEASE, &found);

	if (rc) {
		fprintf(stderr, "kvbench demo: kvt_lookup: %s (%s)\n", kvt_strerror(rc),
			kvt_last_error());
		bench_json_error(d->doc, "lookup: %s (%s)", kvt_strerror(rc),
				 kvt_last_error());
		return 0;
	}
	return found;
}

static void release(struct demo *d, const kvt_key *keys, size_t n)
{
	int rc = kvt_release(d->s, keys, n);

	if (rc < 0)
		fprintf(stderr, "kvbench demo: kvt_release: %s (%s)\n", kvt_strerror(rc),
			kvt_last_error());
}

/* kvt_open on a config built with jansson (so any path is quoted right). */
static int open_json(json_t *cfg, kvt_store **s, char *why, size_t whycap)
{
	char *text = cfg ? json_dumps(cfg, JSON_COMPACT) : NULL;
	int rc;

	json_decref(cfg);
	if (!text) {
		snprintf(why, whycap, "out of memory");
		return -ENOMEM;
	}
	rc = kvt_open(text, s);
	if (rc)
		snprintf(why, whycap, "kvt_open(%s): %s", text, kvt_last_error());
	free(text);
	return rc;
}

/*
 * Opens the store: RAM plus a disk tier file in dir (the tier creates it);
 * when the disk configuration fails (a build without the disk tier answers
 * -ENOTSUP), RAM only, with the reason in why. Sets d->have_disk; returns 0
 * or a negative errno.
 */
static int open_store(struct demo *d, uint64_t ram, uint64_t disk, const char *dir,
		      char *disk_path, size_t cap, char *why, size_t whycap)
{
	char err[PATH_MAX + 512];
	int rc;

	why[0] = '\0';
	d->have_disk = 0;
	if (disk) {
		if (snprintf(disk_path, cap, "%s/tier0.kvt", dir) >= (int)cap) {
			snprintf(why, whycap, "directory name too long");
		} else {
			rc = open_json(json_pack("{s:{s:I}, s:{s:s, s:I}}", "ram", "capacity",
						 (json_int_t)ram, "disk", "path", disk_path,
						 "capacity", (json_int_t)disk),
				       &d->s, why, whycap);
			if (rc == 0) {
				d->have_disk = 1;
				return 0;
			}
		}
	}
	rc = open_json(json_pack("{s:{s:I}}", "ram", "capacity", (json_int_t)ram), &d->s,
		       err, sizeof(err));
	if (rc)
		fprintf(stderr, "kvbench demo: %s\n", err);
	return rc;
}

static int keys_equal(const kvt_key *a, const kvt_key *b, size_t n)
{
	return memcmp(a, b, n * sizeof(*a)) == 0;
}

static void print_summary(struct demo *d)
{
	json_t *st = bench_store_stats(d->s);
	double v, w;

	if (!st)
		return;
	printf("\nthe store's own statistics (kvt_stats_json):\n");
	if (!bench_stats_number(st, "store.hits_ram", &v) &&
	    !bench_stats_number(st, "store.hits_disk", &w))
		printf("  gets served    RAM %.0f, disk %.0f", v, w);
	if (!bench_stats_number(st, "store.misses", &v))
		printf(", missed %.0f", v);
	printf("\n");
	if (!bench_stats_number(st, "ram.objects", &v) &&
	    !bench_stats_number(st, "ram.bytes_used", &w))
		printf("  RAM tier       %.0f blocks, %.0f MiB used", v, w / (1 << 20));
	if (!bench_stats_number(st, "ram.evictions", &v))
		printf(", %.0f evictions", v);
	if (!bench_stats_number(st, "ram.spills", &v))
		printf(", %.0f spilled to disk", v);
	printf("\n");
	if (d->have_disk) {
		printf("  disk tier     ");
		if (!bench_stats_number(st, "disk.objects", &v))
			printf(" %.0f blocks", v);
		if (!bench_stats_number(st, "disk.used", &v) ||
		    !bench_stats_number(st, "disk.bytes_used", &v))
			printf(", %.0f MiB used", v / (1 << 20));
		printf("\n");
	}
	if (!bench_stats_number(st, "store.refused_puts", &v))
		printf("  refused puts   %.0f\n", v);
	if (!bench_stats_number(st, "ram.index_bytes_per_block", &v)) {
		printf("  index          RAM %.1f bytes per stored block", v);
		if (!bench_stats_number(st, "disk.index_bytes_per_block", &v))
			printf(", disk %.1f", v);
		printf("\n");
	}
	if (!bench_stats_number(st, "store.get_latency.p50_us", &v) &&
	    !bench_stats_number(st, "store.get_latency.p99_us", &w))
		printf("  get latency    p50 %.0f us, p99 %.0f us per block, all tiers\n", v, w);
	if (!bench_stats_number(st, "store.put_latency.p50_us", &v) &&
	    !bench_stats_number(st, "store.put_latency.p99_us", &w))
		printf("  put latency    p50 %.0f us, p99 %.0f us per block, spills included\n",
		       v, w);
	bench_json_result(d->doc, json_pack("{s:s, s:o}", "name", "store_stats",
					    "stats", st));
}

/* Parses the command line into o. Returns -1 to run, else the exit status. */
static int demo_parse(int argc, char **argv, struct demo_opts *o)
{
	static const struct option longopts[] = {
		{ "ram", required_argument, NULL, OPT_RAM },
		{ "disk", required_argument, NULL, OPT_DISK },
		{ "dir", required_argument, NULL, OPT_DIR },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	char why[256];
	int c, r;

	*o = (struct demo_opts){ .cmd = argv[0] && !*argv[0] ? "" : CMD,
				 .ram = 256ull << 20, .disk = 1ull << 30 };
	bench_common_init(&o->co);
	bench_getopt_begin();
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		r = bench_common_option(o->cmd, c, optarg, argv, &o->co);
		if (r < 0)
			return BENCH_EXIT_USAGE;
		if (r > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return BENCH_EXIT_OK;
		case OPT_RAM:
			if (bench_size_arg(o->cmd, "--ram", optarg, 64ull << 20, UINT64_MAX,
					   &o->ram))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_DISK:
			if (bench_size_arg(o->cmd, "--disk", optarg, 0, UINT64_MAX, &o->disk))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_DIR:
			if (strlen(optarg) > PATH_MAX - 32)
				return bench_usage_error(o->cmd, "--dir %s: name too long",
							 optarg);
			if (bench_dir_check(optarg, why, sizeof(why)))
				return bench_usage_error(o->cmd, "--dir %s: %s", optarg, why);
			o->user_dir = optarg;
			break;
		default:
			return bench_usage_error(o->cmd, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(o->cmd, "unexpected argument '%s'", argv[optind]);
	return -1;
}

/* Buffers, the JSON document and the table. Returns 0 or -ENOMEM. */
static int demo_alloc(struct demo *d)
{
	static const char *const hdr[] = { "phase", "blocks", "MiB", "seconds",
					   "GB/s", "RAM hits", "disk hits", "misses" };
	size_t i;

	d->doc = bench_json_new(CMD);
	d->phases = bench_table_new(8, hdr);
	for (i = 0; i < BATCH; i++)
		if (!(d->buf[i] = bench_buffer_alloc(BLOCK_BYTES)))
			return -ENOMEM;
	for (i = 0; i < NPROMPTS; i++)
		if (!(d->prompt[i] = malloc(PROMPT_TOKENS * sizeof(uint32_t))))
			return -ENOMEM;
	d->doc_tokens = malloc(DOC_TOKENS * sizeof(uint32_t));
	d->dk = malloc(ND * sizeof(*d->dk));
	return d->doc && d->phases && d->doc_tokens && d->dk ? 0 : -ENOMEM;
}

/*
 * Opens the store (in --dir, or a fresh temporary directory) and prints what
 * it is. Without --dir a disk tier that cannot be had leaves RAM only; with
 * --dir it is an error. Returns 0 or BENCH_EXIT_FAIL.
 */
static int demo_open(struct demo *d, const struct demo_opts *o)
{
	uint64_t disk = o->disk;
	char why[512];

	if (disk) {
		if (o->user_dir)
			snprintf(d->dir, sizeof(d->dir), "%s", o->user_dir);
		else if (bench_tmpdir_create(d->dir, sizeof(d->dir)) == 0)
			d->made_dir = 1;
		else
			disk = 0; /* message printed; go on with RAM only */
	}
	if (open_store(d, o->ram, disk, d->dir, d->disk_path, sizeof(d->disk_path), why,
		       sizeof(why)))
		return BENCH_EXIT_FAIL;
	if (disk && !d->have_disk && o->user_dir) {
		fprintf(stderr, "kvbench demo: no disk tier in --dir %s: %s\n", o->user_dir,
			why);
		return BENCH_EXIT_FAIL;
	}
	bench_json_config(d->doc, "ram_capacity", json_integer((json_int_t)o->ram));
	bench_json_config(d->doc, "disk_capacity",
			  json_integer(d->have_disk ? (json_int_t)disk : 0));
	bench_json_config(d->doc, "disk_path",
			  d->have_disk ? json_string(d->disk_path) : json_null());
	bench_json_config(d->doc, "block_bytes", json_integer((json_int_t)BLOCK_BYTES));
	bench_json_config(d->doc, "block_tokens", json_integer(BLOCK_TOKENS));

	printf("kvbench demo: libkvtier %s, %u CPUs\n", kvt_version(), bench_ncpus());
	printf("  store   RAM tier %llu MiB", (unsigned long long)(o->ram >> 20));
	if (d->have_disk)
		printf("; disk tier %llu MiB in %s\n", (unsigned long long)(disk >> 20),
		       d->disk_path);
	else if (disk)
		printf("; no disk tier: %s\n          (continuing with RAM only)\n", why);
	else
		printf("; no disk tier (--disk 0)\n");
	if (disk && !d->have_disk)
		bench_json_error(d->doc, "disk tier unavailable, RAM only: %s", why);
	printf("  model   Qwen3-Coder-30B-A3B KV: %d layers x %d KV heads x %d x bf16,\n"
	       "          %d tokens per block = %zu KiB per block\n\n",
	       LAYERS, KV_HEADS, HEAD_DIM, BLOCK_TOKENS, BLOCK_BYTES >> 10);
	return 0;
}

/* 1. Hashing: prompts sharing a system prompt. */
static void phase_hash(struct demo *d)
{
	kvt_namespace nsp = { .model = "Qwen/Qwen3-Coder-30B-A3B-Instruct@main",
			     .tokenizer = "Qwen/Qwen3-Coder-30B-A3B-Instruct@main",
			     .kv_format = "bf16/NHD", .tp_rank = 0, .tp_size = 1,
			     .pp_rank = 0, .pp_size = 1, .block_tokens = BLOCK_TOKENS };
	kvt_key root = kvt_ns_root(&nsp), split[64];
	size_t i, a, b;

	d->prefix_ok = 1;
	for (i = 0; i < NPROMPTS; i++) {
		bench_tokens(d->prompt[i], SYSTEM_TOKENS, VOCAB, 1); /* shared */
		bench_tokens(d->prompt[i] + SYSTEM_TOKENS, USER_TOKENS, VOCAB, 100 + i);
		if (kvt_hash_chain(root, d->prompt[i], PROMPT_TOKENS, BLOCK_TOKENS, d->pk[i],
				   NP) != NP) {
			fprintf(stderr, "kvbench demo: kvt_hash_chain: %s\n", kvt_last_error());
			d->rc = BENCH_EXIT_FAIL;
			d->fatal = 1;
			return;
		}
		if (i > 0 && (!keys_equal(d->pk[0], d->pk[i], SYSTEM_TOKENS / BLOCK_TOKENS) ||
			      keys_equal(&d->pk[0][SYSTEM_TOKENS / BLOCK_TOKENS],
					 &d->pk[i][SYSTEM_TOKENS / BLOCK_TOKENS], 1)))
			d->prefix_ok = 0;
	}
	/* Continuing a chain from its last key equals hashing it at once. */
	a = kvt_hash_chain(root, d->prompt[0], SYSTEM_TOKENS, BLOCK_TOKENS, split, 64);
	b = kvt_hash_chain(split[a - 1], d->prompt[0] + SYSTEM_TOKENS, USER_TOKENS,
			   BLOCK_TOKENS, split + a, 64 - a);
	d->split_ok = a + b == NP && keys_equal(split, d->pk[0], NP);
	printf("1. hashing (kvt_ns_root, kvt_hash_chain): %d prompts of %d tokens =\n"
	       "   a shared %d-token system prompt + %d tokens each -> %d keys each\n"
	       "   (the last %d tokens form no full block and are not hashed)\n",
	       NPROMPTS, PROMPT_TOKENS, SYSTEM_TOKENS, USER_TOKENS, NP,
	       PROMPT_TOKENS % BLOCK_TOKENS);
	printf("   keys 0-%d equal in every prompt, key %d differs: %s\n",
	       SYSTEM_TOKENS / BLOCK_TOKENS - 1, SYSTEM_TOKENS / BLOCK_TOKENS,
	       d->prefix_ok ? "ok" : "FAILED");
	printf("   a chain continued from its last key equals the chain hashed at once: %s\n\n",
	       d->split_ok ? "ok" : "FAILED");
	if (!d->prefix_ok || !d->split_ok) {
		bench_json_error(d->doc, "hash chain checks failed");
		d->rc = BENCH_EXIT_FAIL;
	}
}

/* 2. First turn: look up, compute what is missing, put it. */
static void phase_first_turn(struct demo *d)
{
	uint64_t ns = 0;
	size_t i, found, total = 0;

	printf("2. first turn: kvt_lookup(KVT_LEASE) finds the stored prefix, the engine\n"
	       "   computes the rest and stores it with kvt_put_batch\n");
	for (i = 0; i < NPROMPTS; i++) {
		found = lookup_lease(d, d->pk[i], NP);
		ns += put_blocks(d, d->pk[i] + found, NP - found);
		total += NP - found;
		release(d, d->pk[i], found);
		printf("   prompt %zu: %d blocks, %zu found stored, %zu computed and put\n",
		       i, NP, found, NP - found);
	}
	phase_done(d, "put (first turn)", total, ns, NULL);
}

/* Loads every prompt (as far as it is stored) and verifies it. */
static void get_prompts(struct demo *d, const char *phase)
{
	struct hits h;
	uint64_t ns = 0;
	size_t i, found, total = 0;

	read_hits(d->s, &h);
	for (i = 0; i < NPROMPTS; i++) {
		uint64_t before = d->verified_blocks;

		found = lookup_lease(d, d->pk[i], NP);
		ns += get_blocks(d, d->pk[i], found);
		total += found;
		release(d, d->pk[i], found);
		printf("   prompt %zu: %zu of %d blocks found, %llu verified\n", i, found,
		       NP, (unsigned long long)(d->verified_blocks - before));
	}
	phase_done(d, phase, total, ns, &h);
}

/* 3. Second turn: the whole prompts are stored; load and verify. */
static void phase_second_turn(struct demo *d)
{
	printf("\n3. second turn: every prompt is found whole and loaded with kvt_get_batch;\n"
	       "   each block's bytes are checked against what was put\n");
	get_prompts(d, "get (second turn)");
}

/* 4. Overflow: a long document, more than RAM holds. */
static void phase_overflow(struct demo *d)
{
	uint64_t ns;

	bench_tokens(d->doc_tokens, DOC_TOKENS, VOCAB, 7);
	kvt_hash_chain(d->pk[0][NP - 1], d->doc_tokens, DOC_TOKENS, BLOCK_TOKENS, d->dk, ND);
	printf("\n4. overflow: prompt 0 continues with a %d-token document, %d blocks =\n"
	       "   %zu MiB, more than the RAM tier holds; the oldest blocks %s\n",
	       DOC_TOKENS, ND, ND * BLOCK_BYTES >> 20,
	       d->have_disk ? "spill to disk" : "are evicted (no disk tier)");
	ns = put_blocks(d, d->dk, ND);
	phase_done(d, d->have_disk ? "put (overflow, spilling)" : "put (overflow, evicting)",
		   ND, ns, NULL);
}

/*
 * 5. Read back the early prompts, now mostly on disk; then how much of the
 * document is available, and a bounded plan of leases, window by window,
 * as an engine that loads while it runs.
 */
static void phase_read_back(struct demo *d)
{
	size_t i, j, avail = 0, loaded = 0;
	uint64_t before, ns = 0;
	struct hits h;

	printf("\n5. read back after the overflow: the prompts%s\n",
	       d->have_disk ? " (now on disk), then the document in windows of 32" :
			      ", then the document, as far as RAM still holds them");
	get_prompts(d, "get prompts (after overflow)");
	before = d->verified_blocks;
	if (kvt_lookup(d->s, d->dk, ND, 0, &avail))
		avail = 0;
	read_hits(d->s, &h);
	for (i = 0; i < avail; i += j) {
		size_t w = avail - i < BATCH ? avail - i : BATCH;

		j = lookup_lease(d, d->dk + i, w);
		if (j == 0)
			break;
		ns += get_blocks(d, d->dk + i, j);
		release(d, d->dk + i, j);
		loaded += j;
	}
	printf("   document: %zu of %d blocks available as a prefix, %zu loaded, "
	       "%llu verified\n", avail, ND, loaded,
	       (unsigned long long)(d->verified_blocks - before));
	phase_done(d, "get document (after overflow)", loaded, ns, &h);
}

/* The phase table, the store's statistics, the verification; the JSON. */
static int demo_report(struct demo *d, const struct demo_opts *o)
{
	printf("\nphases (GB/s = block bytes / time in kvt_put_batch or kvt_get_batch;\n"
	       "hits and misses are deltas of the store's counters):\n");
	bench_table_print(d->phases, stdout, 2);
	print_summary(d);

	printf("\nverified: %llu blocks, %llu MiB loaded and compared byte for byte: ",
	       (unsigned long long)d->verified_blocks,
	       (unsigned long long)(d->verified_bytes >> 20));
	if (d->wrong_blocks)
		printf("%llu WRONG\n", (unsigned long long)d->wrong_blocks);
	else
		printf("all correct\n");
	if (d->failed_ops)
		printf("failed operations: %llu (see messages above)\n",
		       (unsigned long long)d->failed_ops);
	if (d->wrong_blocks || d->failed_ops)
		d->rc = BENCH_EXIT_FAIL;
	bench_json_result(d->doc, json_pack("{s:s, s:I, s:I, s:I, s:I, s:b}", "name",
					    "verification", "blocks",
					    (json_int_t)d->verified_blocks, "bytes",
					    (json_int_t)d->verified_bytes, "wrong_blocks",
					    (json_int_t)d->wrong_blocks, "failed_ops",
					    (json_int_t)d->failed_ops, "hash_checks_ok",
					    d->prefix_ok && d->split_ok));
	if (o->co.json_path && bench_json_write(d->doc, o->co.json_path))
		d->rc = BENCH_EXIT_FAIL;
	return d->rc;
}

static void demo_free(struct demo *d)
{
	size_t i;

	kvt_close(d->s);
	if (d->made_dir)
		bench_tmpdir_remove(d->dir);
	bench_table_free(d->phases);
	json_decref(d->doc);
	for (i = 0; i < BATCH; i++)
		free(d->buf[i]);
	for (i = 0; i < NPROMPTS; i++)
		free(d->prompt[i]);
	free(d->doc_tokens);
	free(d->dk);
}

int bench_demo_main(int argc, char **argv)
{
	static void (*const phases[])(struct demo *) = {
		phase_hash, phase_first_turn, phase_second_turn, phase_overflow,
		phase_read_back,
	};
	struct demo_opts o;
	struct demo d = { 0 };
	size_t i;
	int rc = demo_parse(argc, argv, &o);

	if (rc >= 0)
		return rc;
	if (demo_alloc(&d)) {
		fprintf(stderr, "kvbench demo: out of memory\n");
		rc = BENCH_EXIT_FAIL;
	} else {
		rc = demo_open(&d, &o);
	}
	if (!rc) {
		bench_catch_stop(); /* a stop ends the phases, not the report */
		for (i = 0; i < sizeof(phases) / sizeof(phases[0]) && !d.fatal &&
			    !bench_stop_signal(); i++)
			phases[i](&d);
		rc = d.fatal ? d.rc : demo_report(&d, &o);
	}
	demo_free(&d);
	return bench_finish(CMD, rc);
}
