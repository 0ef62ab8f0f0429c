/*
 * attach.c - "kvbench attach": a process attached to a node store
 * (kvt_open with "attach") beside an in-process store, in one run: RAM-tier
 * gets of one block size in GB/s, as a share of the in-process store's
 * (repetitions interleaved, the same blocks, order and buffers), and
 * lookups with lease of a chain of keys, latency per call.
 *
 * Without --socket it opens the node store itself, serving local.socket in
 * a temporary directory, and compares the attached client with that very
 * store called in-process (the same arena, the same blocks). With --socket
 * it attaches to a running node store (a kvtierd) and compares with an
 * in-process store of its own holding the same blocks. Every get is checked
 * to hit and every block's bytes are verified once; the node store's
 * statistics say how many attached gets its directory of RAM blocks served
 * without a round trip. Uses only <kvtier.h>.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "common.h"

#define CMD "attach"

static const char usage[] =
	"usage: kvbench attach [OPTIONS]\n"
	"\n"
	"An attached client's RAM-tier gets and lookups beside an in-process store's.\n"
	"\n"
	"  --socket PATH   attach to the node store serving PATH (a kvtierd with\n"
	"                  local.socket); default: open one in this process\n"
	"  --shared        with --socket: give the in-process store a shared\n"
	"                  (memfd) arena too, as a node store's is\n"
	"  --size SIZE     block size of the gets (default 1MiB)\n"
	"  --blocks N      blocks stored and loaded per repetition (default 64)\n"
	"  --keys N        keys per lookup with lease (default 64)\n"
	"  --lookups N     lookups per repetition (default 2000)\n"
	"  --reps N        timed repetitions after one warm-up (default 5)\n"
	"  --json FILE     write the results as JSON to FILE\n"
	"  --help          this text\n";

enum { OPT_SOCKET = BENCH_OPT_FIRST_FREE, OPT_SHARED, OPT_SIZE, OPT_BLOCKS, OPT_KEYS,
       OPT_LOOKUPS };

struct side {
	const char *name;
	kvt_store *s;
	double *gbs;      /* per repetition */
	struct bench_samples lat; /* lookup latencies, us */
};

static uint64_t seed_of(kvt_key k)
{
	return k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull);
}

static kvt_key key_of(uint64_t i)
{
	uint64_t a = i + 0x10ca1ull, b = ~i;
	return (kvt_key){ common_mix64(&a), common_mix64(&b) };
}

/* The node store's count of gets its attached processes served from its
 * directory of RAM blocks (no round trip), as told so far; -1 if absent. */
static double directory_hits(kvt_store *attached)
{
	json_t *st = bench_store_stats(attached);
	double v = -1;

	if (st && bench_stats_number(st, "local.directory_hits", &v))
		v = -1;
	json_decref(st);
	return v;
}

static int put_blocks(kvt_store *s, const kvt_key *keys, size_t n, size_t size, char *buf)
{
	for (size_t i = 0; i < n; i++) {
		common_fill(buf, size, seed_of(keys[i]));
		int rc = kvt_put(s, keys[i], buf, size);
		if (rc) {
			fprintf(stderr, "kvbench attach: put: %s: %s\n", kvt_strerror(rc),
				kvt_last_error());
			return rc;
		}
	}
	return 0;
}

/* Loads every block into the destinations in turn; GB/s, or -1 on a miss
 * or (verify) wrong bytes. */
static double get_all(kvt_store *s, const kvt_key *keys, size_t n, size_t size,
		      char *dst, unsigned ndst, int verify)
{
	uint64_t t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++) {
		size_t len = 0;
		char *d = dst + (i % ndst) * size;
		int rc = kvt_get(s, keys[i], d, size, &len);
		if (rc || len != size || (verify && common_check(d, size, seed_of(keys[i])) >= 0)) {
			fprintf(stderr, "kvbench attach: get of block %zu: %s\n", i,
				rc ? kvt_last_error() : "wrong bytes");
			return -1;
		}
	}
	uint64_t dt = bench_now_ns() - t0;
	return (double)(n * size) / (double)(dt ? dt : 1);
}

/* Lookups with lease of the chain, each followed by an untimed release. */
static int lookups(struct side *sd, const kvt_key *chain, size_t nk, unsigned count)
{
	for (unsigned i = 0; i < count; i++) {
		size_t found = 0;
		uint64_t t0 = bench_now_ns();
		int rc = kvt_lookup(sd->s, chain, nk, KVT_LEASE, &found);
		uint64_t dt = bench_now_ns() - t0;
		if (rc || found != nk) {
			fprintf(stderr, "kvbench attach: %s lookup found %zu of %zu: %s\n",
				sd->name, found, nk, rc ? kvt_last_error() : "");
			return -1;
		}
		bench_samples_add(&sd->lat, (double)dt / 1e3);
		kvt_release(sd->s, chain, nk);
	}
	return 0;
}

static int parse(int argc, char **argv, const char **sock, int *shared, uint64_t *size,
		 unsigned long *blocks, unsigned long *keys, unsigned long *count,
		 struct bench_common *co)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "shared", no_argument, NULL, OPT_SHARED },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "blocks", required_argument, NULL, OPT_BLOCKS },
		{ "keys", required_argument, NULL, OPT_KEYS },
		{ "lookups", required_argument, NULL, OPT_LOOKUPS },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
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
			return -1;
		case OPT_SOCKET:
			*sock = optarg;
			break;
		case OPT_SHARED:
			*shared = 1;
			break;
		case OPT_SIZE:
			if (bench_size_arg(CMD, "--size", optarg, 4096, 256u << 20, size))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_BLOCKS:
			if (bench_parse_uint(optarg, 1, 4096, blocks))
				return bench_usage_error(CMD, "bad --blocks '%s': 1 to 4096", optarg);
			break;
		case OPT_KEYS:
			if (bench_parse_uint(optarg, 1, 4096, keys))
				return bench_usage_error(CMD, "bad --keys '%s': 1 to 4096", optarg);
			break;
		case OPT_LOOKUPS:
			if (bench_parse_uint(optarg, 1, 1000000, count))
				return bench_usage_error(CMD, "bad --lookups '%s': 1 to 1000000",
							 optarg);
			break;
		default:
			return bench_usage_error(CMD, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	return 0;
}

int bench_attach_main(int argc, char **argv)
{
	const char *sock = NULL;
	uint64_t size = 1u << 20;
	unsigned long nblk = 64, nkeys = 64, count = 2000;
	struct bench_common co;
	char dir[64], path[128] = "", cfg[512];
	struct side in = { .name = "in-process" }, at = { .name = "attached" };
	kvt_store *node = NULL;
	kvt_key *keys = NULL, *chain = NULL;
	char *buf = NULL, *dst = NULL;
	double *ratio = NULL;
	json_t *doc = NULL;
	int shared = 0;
	int rc = parse(argc, argv, &sock, &shared, &size, &nblk, &nkeys, &count, &co);

	if (rc)
		return rc < 0 ? BENCH_EXIT_OK : rc;
	rc = BENCH_EXIT_FAIL;
	uint64_t cap = 2 * (nblk * size + nkeys * 4096) + (64u << 20);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": %llu, \"mlock\": false, "
		 "\"lease_cap\": 0.9, \"max_block\": %llu}", (unsigned long long)cap,
		 (unsigned long long)size);
	size_t base = strlen(cfg);
	int own = !sock; /* the node store is this process's: in and at share it */
	if (own || shared) {
		if (bench_tmpdir_create(dir, sizeof(dir)))
			return BENCH_EXIT_FAIL;
		snprintf(path, sizeof(path), "%s/node.sock", dir);
		if (own)
			sock = path;
		snprintf(cfg + base, sizeof(cfg) - base, ", \"local\": {\"socket\": \"%s\"}}", path);
	} else {
		snprintf(cfg + base, sizeof(cfg) - base, "}");
	}
	int r = kvt_open(cfg, &node);
	if (r) {
		/* the library's text alone: kvt_strerror() reads codes in the
		 * data calls' terms (ENOENT: a miss), which an open's are not */
		fprintf(stderr, "kvbench attach: kvt_open: %s\n", kvt_last_error());
		goto out;
	}
	in.s = node;
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", sock);
	if ((r = kvt_open(cfg, &at.s))) {
		fprintf(stderr, "kvbench attach: attach to %s: %s\n", sock, kvt_last_error());
		goto out;
	}
	keys = calloc(nblk, sizeof(*keys));
	chain = calloc(nkeys, sizeof(*chain));
	buf = bench_buffer_alloc(size);
	dst = bench_buffer_alloc(4 * size);
	in.gbs = calloc(co.reps, sizeof(double));
	at.gbs = calloc(co.reps, sizeof(double));
	ratio = calloc(co.reps, sizeof(double));
	doc = bench_json_new(CMD);
	if (!keys || !chain || !buf || !dst || !in.gbs || !at.gbs || !ratio || !doc) {
		fprintf(stderr, "kvbench attach: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < nblk; i++)
		keys[i] = key_of(i);
	for (size_t i = 0; i < nkeys; i++)
		chain[i] = key_of(1000000 + i);
	/* Read before the blocks are stored: a statistics request just before
	 * the timed lookups made them slower (about 0.4 us of 12, repeatably). */
	double dh0 = directory_hits(at.s);
	/* The blocks: through the client (so the node store holds them), and in
	 * the in-process store too when that is another store. */
	if (put_blocks(at.s, keys, nblk, size, buf) ||
	    (!own && put_blocks(in.s, keys, nblk, size, buf)))
		goto out;
	for (size_t i = 0; i < nkeys; i++) {
		common_fill(buf, 4096, seed_of(chain[i]));
		if (kvt_put(at.s, chain[i], buf, 4096) ||
		    (!own && kvt_put(in.s, chain[i], buf, 4096)))
			goto out;
	}
	printf("kvbench attach: libkvtier %s, %u CPUs; node store %s; in-process arena %s; "
	       "%lu blocks of %llu KiB per repetition, lookups of %lu keys with lease; median "
	       "of %u reps after a warm-up\n", kvt_version(), bench_ncpus(),
	       own ? "in this process" : sock, own || shared ? "shared" : "private", nblk, (unsigned long long)(size >> 10), nkeys, co.reps);
	fflush(stdout);
	/* Warm-up, every byte verified on both sides. */
	if (get_all(in.s, keys, nblk, size, dst, 4, 1) < 0 ||
	    get_all(at.s, keys, nblk, size, dst, 4, 1) < 0 ||
	    lookups(&in, chain, nkeys, 100) || lookups(&at, chain, nkeys, 100))
		goto out;
	bench_samples_clear(&in.lat);
	bench_samples_clear(&at.lat);
	for (unsigned rep = 0; rep < co.reps; rep++) {
		in.gbs[rep] = get_all(in.s, keys, nblk, size, dst, 4, 0);
		at.gbs[rep] = get_all(at.s, keys, nblk, size, dst, 4, 0);
		if (in.gbs[rep] < 0 || at.gbs[rep] < 0 || lookups(&in, chain, nkeys, (unsigned)count) ||
		    lookups(&at, chain, nkeys, (unsigned)count))
			goto out;
		ratio[rep] = at.gbs[rep] / in.gbs[rep];
	}
	double dh = directory_hits(at.s) - dh0; /* the request carries the last hits */
	struct bench_summary gi, ga, gr, li, la;
	bench_summarize(in.gbs, co.reps, &gi);
	bench_summarize(at.gbs, co.reps, &ga);
	bench_summarize(ratio, co.reps, &gr);
	bench_summarize(in.lat.v, in.lat.n, &li);
	bench_summarize(at.lat.v, at.lat.n, &la);
	printf("\n  %-22s %10s %10s %10s\n", "", "in-process", "attached", "attached/in");
	printf("  %-22s %10.2f %10.2f %9.0f%%\n", "get GB/s (median)", gi.median, ga.median,
	       100 * gr.median);
	printf("  %-22s %10.2f %10.2f\n", "lookup p50 us", li.median, la.median);
	printf("  %-22s %10.2f %10.2f\n", "lookup p99 us", li.p99, la.p99);
	if (dh0 >= 0)
		printf("\n  attached gets served from the node store's directory (no round trip): "
		       "%.0f of %lu (the warm-up's included)\n", dh, (co.reps + 1) * nblk);
	printf("\nthe library's goals:\n");
	printf("  attached get of %llu KiB blocks >= 90%% of in-process: %.0f%% %s\n",
	       (unsigned long long)(size >> 10), 100 * gr.median,
	       gr.median >= 0.9 ? "(met)" : "(NOT met)");
	printf("  %lu-key lookup with lease, median < 50 us: %.1f us %s\n", nkeys, la.median,
	       la.median < 50 ? "(met)" : "(NOT met)");

	bench_json_config(doc, "socket", json_string(own ? "own" : sock));
	bench_json_config(doc, "in_process_arena", json_string(own || shared ? "shared" : "private"));
	bench_json_config(doc, "size", json_integer((json_int_t)size));
	bench_json_config(doc, "blocks", json_integer((json_int_t)nblk));
	bench_json_config(doc, "keys", json_integer((json_int_t)nkeys));
	bench_json_config(doc, "lookups", json_integer((json_int_t)count));
	bench_json_config(doc, "reps", json_integer(co.reps));
	json_t *o = json_object();
	json_object_set_new(o, "name", json_string("in_process_get"));
	json_object_set_new(o, "unit", json_string("bytes/s"));
	json_object_set_new(o, "value", bench_json_real(gi.median * 1e9));
	struct bench_summary gib = gi; /* its repetitions in the value's bytes/s */
	gib.min *= 1e9;
	gib.max *= 1e9;
	gib.median *= 1e9;
	json_object_set_new(o, "reps", bench_json_reps(&gib));
	bench_json_limit(doc, o);
	o = json_object();
	json_object_set_new(o, "name", json_string("attached_get"));
	json_object_set_new(o, "unit", json_string("bytes/s"));
	json_object_set_new(o, "value", bench_json_real(ga.median * 1e9));
	json_object_set_new(o, "limit_value", bench_json_real(gi.median * 1e9));
	json_object_set_new(o, "share", bench_json_real(gr.median));
	json_object_set_new(o, "share_reps", bench_json_reps(&gr));
	json_object_set_new(o, "block_bytes", json_integer((json_int_t)size));
	if (dh0 >= 0)
		json_object_set_new(o, "directory_gets", bench_json_real(dh));
	bench_json_result(doc, o);
	o = json_object();
	json_object_set_new(o, "name", json_string("attached_lookup_lease"));
	json_object_set_new(o, "unit", json_string("us"));
	json_object_set_new(o, "value", bench_json_real(la.median));
	json_object_set_new(o, "keys_per_call", json_integer((json_int_t)nkeys));
	json_object_set_new(o, "latency_us", bench_json_latency(&la));
	json_object_set_new(o, "in_process_latency_us", bench_json_latency(&li));
	bench_json_result(doc, o);
	rc = co.json_path && bench_json_write(doc, co.json_path) ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
out:
	kvt_close(at.s);
	kvt_close(node);
	if (own || shared)
		bench_tmpdir_remove(dir);
	bench_samples_free(&in.lat);
	bench_samples_free(&at.lat);
	free(keys);
	free(chain);
	free(buf);
	free(dst);
	free(in.gbs);
	free(at.gbs);
	free(ratio);
	json_decref(doc);
	return rc;
}
