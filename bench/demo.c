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

struct demo {
	kvt_store *s;
	int have_disk;
	kvt_op ops[BATCH];
	void *buf[BATCH];
	json_t *doc;
	struct bench_table *phases;
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
	bench_table_cell(d->phases, "%.2f", gbs);
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
		snprintf(why, whycap, "kvt_open(%s): %s (%s)", text, kvt_strerror(rc),
			 kvt_last_error());
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

int bench_demo_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "ram", required_argument, NULL, OPT_RAM },
		{ "disk", required_argument, NULL, OPT_DISK },
		{ "dir", required_argument, NULL, OPT_DIR },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	static const char *const hdr[] = { "phase", "blocks", "MiB", "seconds",
					   "GB/s", "RAM hits", "disk hits", "misses" };
	struct bench_common co;
	struct demo d = { 0 };
	uint64_t ram = 256ull << 20, disk = 1ull << 30;
	const char *user_dir = NULL;
	char dir[PATH_MAX] = "", disk_path[PATH_MAX] = "", why[512];
	uint32_t *prompt[NPROMPTS] = { 0 }, *doc_tokens = NULL;
	kvt_key pk[NPROMPTS][PROMPT_TOKENS / BLOCK_TOKENS], *dk = NULL, split[64];
	size_t np = PROMPT_TOKENS / BLOCK_TOKENS, nd = DOC_TOKENS / BLOCK_TOKENS;
	size_t i, j, found, total;
	struct hits h;
	int c, r, rc = BENCH_EXIT_OK, made_dir = 0;
	uint64_t ns;

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
		case OPT_RAM:
			if (bench_parse_size(optarg, &ram) || ram < (64ull << 20))
				return bench_usage_error(CMD, usage,
							 "bad --ram '%s': a size of at least 64MiB",
							 optarg);
			break;
		case OPT_DISK:
			if (bench_parse_size(optarg, &disk))
				return bench_usage_error(CMD, usage,
							 "bad --disk '%s': a size such as 1GiB, or 0",
							 optarg);
			break;
		case OPT_DIR:
			if (!*optarg || strlen(optarg) > PATH_MAX - 32)
				return bench_usage_error(CMD, usage, "bad --dir '%s'", optarg);
			user_dir = optarg;
			break;
		default:
			return bench_usage_error(CMD, usage, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(CMD, usage, "unexpected argument '%s'",
					 argv[optind]);

	d.doc = bench_json_new(CMD);
	d.phases = bench_table_new(8, hdr);
	for (i = 0; i < BATCH; i++)
		if (!(d.buf[i] = bench_buffer_alloc(BLOCK_BYTES)))
			break;
	for (i = 0; i < NPROMPTS; i++)
		prompt[i] = malloc(PROMPT_TOKENS * sizeof(uint32_t));
	doc_tokens = malloc(DOC_TOKENS * sizeof(uint32_t));
	dk = malloc(nd * sizeof(*dk));
	if (!d.doc || !d.phases || !d.buf[BATCH - 1] || !prompt[NPROMPTS - 1] ||
	    !doc_tokens || !dk) {
		fprintf(stderr, "kvbench demo: out of memory\n");
		rc = BENCH_EXIT_FAIL;
		goto out;
	}

	if (disk) {
		if (user_dir) {
			snprintf(dir, sizeof(dir), "%s", user_dir);
		} else if (bench_tmpdir_create(dir, sizeof(dir)) == 0) {
			made_dir = 1;
		} else {
			disk = 0; /* message printed; go on with RAM only */
		}
	}
	if (open_store(&d, ram, disk, dir, disk_path, sizeof(disk_path), why,
		       sizeof(why))) {
		rc = BENCH_EXIT_FAIL;
		goto out;
	}

	bench_json_config(d.doc, "ram_capacity", json_integer((json_int_t)ram));
	bench_json_config(d.doc, "disk_capacity",
			  json_integer(d.have_disk ? (json_int_t)disk : 0));
	bench_json_config(d.doc, "disk_path",
			  d.have_disk ? json_string(disk_path) : json_null());
	bench_json_config(d.doc, "block_bytes", json_integer((json_int_t)BLOCK_BYTES));
	bench_json_config(d.doc, "block_tokens", json_integer(BLOCK_TOKENS));

	printf("kvbench demo: libkvtier %s, %u CPUs\n", kvt_version(), bench_ncpus());
	printf("  store   RAM tier %llu MiB", (unsigned long long)(ram >> 20));
	if (d.have_disk)
		printf("; disk tier %llu MiB in %s\n", (unsigned long long)(disk >> 20),
		       disk_path);
	else if (disk)
		printf("; no disk tier: %s\n          (continuing with RAM only)\n", why);
	else
		printf("; no disk tier (--disk 0)\n");
	if (disk && !d.have_disk)
		bench_json_error(d.doc, "disk tier unavailable, RAM only: %s", why);
	printf("  model   Qwen3-Coder-30B-A3B KV: %d layers x %d KV heads x %d x bf16,\n"
	       "          %d tokens per block = %zu KiB per block\n\n",
	       LAYERS, KV_HEADS, HEAD_DIM, BLOCK_TOKENS, BLOCK_BYTES >> 10);

	/* 1. Hashing: prompts sharing a system prompt. */
	kvt_namespace nsp = { .model = "Qwen/Qwen3-Coder-30B-A3B-Instruct@main",
			     .tokenizer = "Qwen/Qwen3-Coder-30B-A3B-Instruct@main",
			     .kv_format = "bf16/NHD", .tp_rank = 0, .tp_size = 1,
			     .pp_rank = 0, .pp_size = 1, .block_tokens = BLOCK_TOKENS };
	kvt_key root = kvt_ns_root(&nsp);
	int prefix_ok = 1, split_ok;

	for (i = 0; i < NPROMPTS; i++) {
		bench_tokens(prompt[i], SYSTEM_TOKENS, VOCAB, 1); /* shared */
		bench_tokens(prompt[i] + SYSTEM_TOKENS, USER_TOKENS, VOCAB, 100 + i);
		if (kvt_hash_chain(root, prompt[i], PROMPT_TOKENS, BLOCK_TOKENS, pk[i],
				   np) != np) {
			fprintf(stderr, "kvbench demo: kvt_hash_chain: %s\n", kvt_last_error());
			rc = BENCH_EXIT_FAIL;
			goto out;
		}
		if (i > 0 && (!keys_equal(pk[0], pk[i], SYSTEM_TOKENS / BLOCK_TOKENS) ||
			      keys_equal(&pk[0][SYSTEM_TOKENS / BLOCK_TOKENS],
					 &pk[i][SYSTEM_TOKENS / BLOCK_TOKENS], 1)))
			prefix_ok = 0;
	}
	/* Continuing a chain from its last key equals hashing it at once. */
	{
		size_t a = kvt_hash_chain(root, prompt[0], SYSTEM_TOKENS, BLOCK_TOKENS,
					  split, 64);
		size_t b = kvt_hash_chain(split[a - 1], prompt[0] + SYSTEM_TOKENS,
					  USER_TOKENS, BLOCK_TOKENS, split + a, 64 - a);
		split_ok = a + b == np && keys_equal(split, pk[0], np);
	}
	printf("1. hashing (kvt_ns_root, kvt_hash_chain): %d prompts of %d tokens =\n"
	       "   a shared %d-token system prompt + %d tokens each -> %zu keys each\n"
	       "   (the last %d tokens form no full block and are not hashed)\n",
	       NPROMPTS, PROMPT_TOKENS, SYSTEM_TOKENS, USER_TOKENS, np,
	       PROMPT_TOKENS % BLOCK_TOKENS);
	printf("   keys 0-%d equal in every prompt, key %d differs: %s\n",
	       SYSTEM_TOKENS / BLOCK_TOKENS - 1, SYSTEM_TOKENS / BLOCK_TOKENS,
	       prefix_ok ? "ok" : "FAILED");
	printf("   a chain continued from its last key equals the chain hashed at once: %s\n\n",
	       split_ok ? "ok" : "FAILED");
	if (!prefix_ok || !split_ok) {
		bench_json_error(d.doc, "hash chain checks failed");
		rc = BENCH_EXIT_FAIL;
	}

	/* 2. First turn: look up, compute what is missing, put it. */
	printf("2. first turn: kvt_lookup(KVT_LEASE) finds the stored prefix, the engine\n"
	       "   computes the rest and stores it with kvt_put_batch\n");
	read_hits(d.s, &h);
	ns = 0;
	total = 0;
	for (i = 0; i < NPROMPTS; i++) {
		found = lookup_lease(&d, pk[i], np);
		ns += put_blocks(&d, pk[i] + found, np - found);
		total += np - found;
		release(&d, pk[i], found);
		printf("   prompt %zu: %zu blocks, %zu found stored, %zu computed and put\n",
		       i, np, found, np - found);
	}
	phase_done(&d, "put (first turn)", total, ns, NULL);

	/* 3. Second turn: the whole prompts are stored; load and verify. */
	printf("\n3. second turn: every prompt is found whole and loaded with kvt_get_batch;\n"
	       "   each block's bytes are checked against what was put\n");
	read_hits(d.s, &h);
	ns = 0;
	total = 0;
	for (i = 0; i < NPROMPTS; i++) {
		uint64_t before = d.verified_blocks;

		found = lookup_lease(&d, pk[i], np);
		ns += get_blocks(&d, pk[i], found);
		total += found;
		release(&d, pk[i], found);
		printf("   prompt %zu: %zu of %zu blocks found, %llu verified\n", i, found,
		       np, (unsigned long long)(d.verified_blocks - before));
	}
	phase_done(&d, "get (second turn)", total, ns, &h);

	/* 4. Overflow: a long document, more than RAM holds. */
	bench_tokens(doc_tokens, DOC_TOKENS, VOCAB, 7);
	kvt_hash_chain(pk[0][np - 1], doc_tokens, DOC_TOKENS, BLOCK_TOKENS, dk, nd);
	printf("\n4. overflow: prompt 0 continues with a %d-token document, %zu blocks =\n"
	       "   %zu MiB, more than the RAM tier holds; the oldest blocks %s\n",
	       DOC_TOKENS, nd, nd * BLOCK_BYTES >> 20,
	       d.have_disk ? "spill to disk" : "are evicted (no disk tier)");
	read_hits(d.s, &h);
	ns = put_blocks(&d, dk, nd);
	phase_done(&d, d.have_disk ? "put (overflow, spilling)" : "put (overflow, evicting)",
		   nd, ns, NULL);

	/* 5. Read back the early prompts, now mostly on disk. */
	printf("\n5. read back after the overflow: the prompts%s\n",
	       d.have_disk ? " (now on disk), then the document in windows of 32" :
			     ", then the document, as far as RAM still holds them");
	read_hits(d.s, &h);
	ns = 0;
	total = 0;
	for (i = 0; i < NPROMPTS; i++) {
		uint64_t before = d.verified_blocks;

		found = lookup_lease(&d, pk[i], np);
		ns += get_blocks(&d, pk[i], found);
		total += found;
		release(&d, pk[i], found);
		printf("   prompt %zu: %zu of %zu blocks found, %llu verified\n", i, found,
		       np, (unsigned long long)(d.verified_blocks - before));
	}
	phase_done(&d, "get prompts (after overflow)", total, ns, &h);

	/* The document: how much of it is available, then a bounded plan of
	 * leases, window by window, as an engine that loads while it runs. */
	{
		size_t avail = 0, loaded = 0;
		uint64_t before = d.verified_blocks;

		if (kvt_lookup(d.s, dk, nd, 0, &avail))
			avail = 0;
		read_hits(d.s, &h);
		ns = 0;
		for (i = 0; i < avail; i += j) {
			size_t w = avail - i < BATCH ? avail - i : BATCH;

			j = lookup_lease(&d, dk + i, w);
			if (j == 0)
				break;
			ns += get_blocks(&d, dk + i, j);
			release(&d, dk + i, j);
			loaded += j;
		}
		printf("   document: %zu of %zu blocks available as a prefix, %zu loaded, "
		       "%llu verified\n", avail, nd, loaded,
		       (unsigned long long)(d.verified_blocks - before));
		phase_done(&d, "get document (after overflow)", loaded, ns, &h);
	}

	printf("\nphases (GB/s = block bytes / time in kvt_put_batch or kvt_get_batch;\n"
	       "hits and misses are deltas of the store's counters):\n");
	bench_table_print(d.phases, stdout, 2);
	print_summary(&d);

	printf("\nverified: %llu blocks, %llu MiB loaded and compared byte for byte: ",
	       (unsigned long long)d.verified_blocks,
	       (unsigned long long)(d.verified_bytes >> 20));
	if (d.wrong_blocks)
		printf("%llu WRONG\n", (unsigned long long)d.wrong_blocks);
	else
		printf("all correct\n");
	if (d.failed_ops)
		printf("failed operations: %llu (see messages above)\n",
		       (unsigned long long)d.failed_ops);
	if (d.wrong_blocks || d.failed_ops)
		rc = BENCH_EXIT_FAIL;
	bench_json_result(d.doc, json_pack("{s:s, s:I, s:I, s:I, s:I, s:b}", "name",
					   "verification", "blocks",
					   (json_int_t)d.verified_blocks, "bytes",
					   (json_int_t)d.verified_bytes, "wrong_blocks",
					   (json_int_t)d.wrong_blocks, "failed_ops",
					   (json_int_t)d.failed_ops, "hash_checks_ok",
					   prefix_ok && split_ok));
	if (co.json_path && bench_json_write(d.doc, co.json_path))
		rc = BENCH_EXIT_FAIL;
out:
	kvt_close(d.s);
	if (made_dir)
		bench_tmpdir_remove(dir);
	bench_table_free(d.phases);
	json_decref(d.doc);
	for (i = 0; i < BATCH; i++)
		free(d.buf[i]);
	for (i = 0; i < NPROMPTS; i++)
		free(prompt[i]);
	free(doc_tokens);
	free(dk);
	return rc;
}
