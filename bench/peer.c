/*
 * peer.c - "kvbench peer": the peer tier over TCP (--transport tcp) or RDMA
 * (--transport rdma), through the public API. Two stores are opened in
 * this process, members "a" and "b" of one peer group on two free ports of
 * 127.0.0.1 (or of the two hosts of --hosts), each with a RAM tier only. Blocks
 * whose keys b owns (rendezvous hashing, as lib/peer.c computes it) are put
 * on b, where they stay; a then loads them with kvt_get_batch into
 * posix_memalign'd buffers, so every block crosses the loopback connection
 * from b's server to a's client. a has the default configuration but for
 * its peers keys; b a RAM tier large enough to hold every block. By
 * default a does not copy peer hits into its own RAM (peers.promote);
 * with --promote it does, and its copies are removed after each
 * repetition so that every one loads from b (b keeps its own). Every byte
 * loaded is verified, untimed, and a's peer-hit counter must grow by the
 * number of blocks.
 *
 * The limit (kvbench(1), "peer load over TCP"): the bench's own
 * plain TCP stream on 127.0.0.1 moving the same bytes (a thread accepts and
 * sends them in block-size chunks, this thread receives them into the same
 * destination buffers, TCP_NODELAY on both ends), measured right before and
 * right after each repetition; the better of the two counts. Over RDMA the
 * limit is the bench's own RDMA READ stream between the two hosts (rlink.h:
 * the same bytes READ in batches of the same size into the same buffers,
 * one rlink_move per batch); both are in peer_limit.c. On a software RDMA
 * device (rxe, siw) the figures are marked emulated: they say nothing about
 * a NIC's speed.
 *
 * Beside the speeds, the CPU time this process spent (all threads, user
 * and system) per GiB moved, by the loads and by the loop: on a machine
 * shared with other work that ratio moves much less than the speeds do,
 * and it says what the loads cost beyond moving the bytes.
 *
 * Also: kvt_lookup on a of a chain of keys that b owns and stores, so each
 * call is one LOOKUP round trip to b; calls per second.
 * Uses only <kvtier.h> (and common_key_owner() to find the owner of a key).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "internal.h"
#include "peer_cmd.h"

#define CMD "peer"
#define LOOKUP_BLOCK 4096         /* bytes of each of its blocks */
#define LOOKUP_REP_NS 200000000ull /* one lookup repetition, about */
#define MAX_TOTAL (4ull << 30)    /* --blocks x --block-size */

static const char usage[] =
	"usage: kvbench peer [OPTIONS]\n"
	"Measures the peer tier over TCP: two stores in this process, members a and b\n"
	"on 127.0.0.1; a loads blocks that b owns with kvt_get_batch (GB/s, share of a\n"
	"plain TCP stream on 127.0.0.1 measured right before and after, batch latency\n"
	"percentiles), and looks up a chain of 64 keys stored on b (calls/s).\n"
	"  --block-size SIZE  block size, 4KiB to 64MiB (default 1MiB)\n"
	"  --blocks N         blocks loaded per repetition (default 256); a multiple of\n"
	"                     --batch, at most 4GiB in all\n"
	"  --batch N          blocks per kvt_get_batch, 1 to 4096 (default 16)\n"
	"  --transport T      tcp (default) or rdma: how blocks travel between a and b;\n"
	"                     with rdma the limit is an RDMA READ stream between them\n"
	"  --hosts A,B        the addresses of a and b (default 127.0.0.1,127.0.0.1);\n"
	"                     over rdma an RDMA device must serve them\n"
	"  --promote          a copies every block it loads into its own RAM\n"
	"                     (peers.promote true; default false)\n"
	"  --reps N           timed repetitions after one warm-up (default 5)\n"
	"  --json FILE        write the results as JSON to FILE\n"
	"  --help             this text\n";

enum { OPT_BS = BENCH_OPT_FIRST_FREE, OPT_BLOCKS, OPT_BATCH, OPT_TRANSPORT, OPT_HOSTS,
       OPT_PROMOTE };


/* --- keys and their owner ------------------------------------------------- */

/* n keys of the stream tag that member b owns in the group [a, b]. */
static void keys_owned_by_b(kvt_key *out, size_t n, uint64_t tag)
{
	static const char *const names[] = { "a", "b" };
	uint64_t i = 0;

	for (size_t k = 0; k < n; i++) {
		uint64_t lo = tag * 0x100000000ull + i, hi = ~tag ^ (i << 20);
		kvt_key key = { .lo = common_mix64(&lo), .hi = common_mix64(&hi) };

		if (common_key_owner(key, names, 2) == 1)
			out[k++] = key;
	}
}

/* --- the two stores -------------------------------------------------------- */

/* capacity 0: the default RAM tier */
static int open_member(const struct run *r, const char *self, uint64_t capacity,
		       kvt_store **out)
{
	char cfg[512], ram[64] = "";
	int rc;

	if (capacity)
		snprintf(ram, sizeof(ram), "\"ram\": {\"capacity\": %llu}, ",
			 (unsigned long long)capacity);
	snprintf(cfg, sizeof(cfg),
		 "{%s\"peers\": {\"self\": \"%s\", \"transport\": \"%s\", "
		 "\"promote\": %s, %s\"members\": ["
		 "{\"name\": \"a\", \"addr\": \"%s:%u\"}, "
		 "{\"name\": \"b\", \"addr\": \"%s:%u\"}]}}",
		 ram, self, r->rdma ? "rdma" : "tcp", r->promote ? "true" : "false",
		 /* an RDMA dial resolves an address and a route and connects a
		  * queue pair: on an emulated device under load that takes
		  * seconds, and a dial that times out sends the run inline */
		 r->rdma ? "\"connect_timeout_ms\": 10000, " : "",
		 r->host[0], r->port_a, r->host[1], r->port_b);
	rc = kvt_open(cfg, out);
	if (rc)
		fprintf(stderr, "kvbench peer: kvt_open(%s): %s\n", cfg, kvt_last_error());
	return rc;
}

/* Opens a and b on two ports held (common_ports_reserve) until both
 * listen, so that no other process can take them in between. */
static int open_stores(struct run *r)
{
	/* b: room for every block, the lookup chain, and headroom below the
	 * high watermark (a: the default) */
	uint64_t cap = r->nblocks * r->bs + r->nblocks * r->bs / 4 + 2 * r->bs +
		       LOOKUP_KEYS * LOOKUP_BLOCK + (16ull << 20);
	struct common_ports held;
	int rc;

	cap = (cap + (1ull << 20) - 1) & ~((1ull << 20) - 1);
	if ((rc = common_ports_reserve(&held, 3))) {
		fprintf(stderr, "kvbench peer: no free port on 127.0.0.1: %s\n",
			strerror(-rc));
		return rc;
	}
	r->port_a = (unsigned)held.port[0];
	r->port_b = (unsigned)held.port[1];
	r->port_loop = (unsigned)held.port[2];
	rc = open_member(r, "a", 0, &r->a);
	if (!rc) {
		rc = open_member(r, "b", cap, &r->b);
		if (rc) {
			kvt_close(r->a);
			r->a = NULL;
		}
	}
	common_ports_release(&held);
	return rc;
}

static double stat_or_nan(kvt_store *s, const char *path)
{
	json_t *st = bench_store_stats(s);
	double v = NAN;

	if (!st || bench_stats_number(st, path, &v))
		v = NAN;
	json_decref(st);
	return v;
}

/* A counter of member m in s's peer section, or NAN. */
static double member_stat(kvt_store *s, unsigned m, const char *name)
{
	json_t *st = bench_store_stats(s);
	json_t *v = json_object_get(json_array_get(json_object_get(json_object_get(st, "peer"),
								   "members"), m), name);
	double x = json_is_number(v) ? json_number_value(v) : NAN;

	json_decref(st);
	return x;
}

/* Puts keys[0..n) on b (each block common_fill'd from its key), through a
 * batch of up to r->batch blocks in r->dst. Returns 0 or the failure. */
static int put_on_b(struct run *r, const kvt_key *keys, size_t n, size_t len)
{
	size_t per = r->batch * r->bs / len;
	kvt_op *ops = calloc(per, sizeof(*ops));
	int rc = 0;

	if (!ops)
		return -ENOMEM;
	for (size_t i = 0; i < n && !rc; i += per) {
		size_t m = n - i < per ? n - i : per;

		for (size_t j = 0; j < m; j++) {
			ops[j] = (kvt_op){ .key = keys[i + j], .buf = r->dst + j * len,
					   .len = len };
			common_fill(ops[j].buf, len, common_key_seed(keys[i + j]));
		}
		rc = kvt_put_batch(r->b, ops, m);
		if (rc)
			fprintf(stderr, "kvbench peer: kvt_put_batch on b: %s (%s)\n",
				kvt_strerror(rc), kvt_last_error());
	}
	free(ops);
	return rc;
}

/* --- the figures --------------------------------------------------------------- */

/*
 * One repetition: a loads every block from b in batches into r->dst, each
 * call timed (latencies in us into lat), each block verified after its call.
 * Returns bytes/s over the time spent in the calls, or NAN when a call
 * failed; *bad counts blocks missing or wrong; r->cpu_ns: the process CPU
 * time spent in the calls.
 */
static double peer_load(struct run *r, struct bench_samples *lat, unsigned long *bad,
			unsigned long *good)
{
	kvt_op *ops = calloc(r->batch, sizeof(*ops));
	uint64_t busy = 0, bytes = 0;
	int err = 0;

	r->cpu_ns = 0;
	if (!ops)
		return NAN;
	for (size_t i = 0; i < r->nblocks; i += r->batch) {
		for (size_t j = 0; j < r->batch; j++)
			ops[j] = (kvt_op){ .key = r->keys[i + j], .buf = r->dst + j * r->bs,
					   .len = r->bs, .result = 1 };
		uint64_t t0 = bench_now_ns(), c0 = pb_process_cpu_ns();
		int rc = kvt_get_batch(r->a, ops, r->batch);
		uint64_t dt = bench_now_ns() - t0;

		r->cpu_ns += pb_process_cpu_ns() - c0;
		busy += dt;
		bench_samples_add(lat, (double)dt / 1e3);
		if (rc && !err) {
			err = rc;
			fprintf(stderr, "kvbench peer: kvt_get_batch on a: %s (%s)\n",
				kvt_strerror(rc), kvt_last_error());
		}
		for (size_t j = 0; j < r->batch; j++) {
			if (ops[j].result == 0 && ops[j].len == r->bs &&
			    common_check(ops[j].buf, r->bs, common_key_seed(ops[j].key)) < 0) {
				bytes += r->bs;
				(*good)++;
			} else {
				(*bad)++;
			}
		}
	}
	free(ops);
	return err ? NAN : (double)bytes / ((double)(busy ? busy : 1) / 1e9);
}

/* Removes a's promoted copies, if any (b keeps its own). */
static void forget_on_a(struct run *r)
{
	for (size_t i = 0; i < r->nblocks; i++)
		kvt_remove(r->a, r->keys[i]);
}

/* Lookups of the chain on a for about LOOKUP_REP_NS; calls/s, latencies in
 * lat, calls that found less than the chain in *shortc. */
static double lookup_rep(struct run *r, uint64_t calls, struct bench_samples *lat,
			 unsigned long *shortc)
{
	uint64_t start = bench_now_ns(), t0 = start, t1 = start;

	for (uint64_t c = 0; c < calls; c++) {
		size_t found = 0;
		int rc = kvt_lookup(r->a, r->chain, LOOKUP_KEYS, 0, &found);

		t1 = bench_now_ns();
		if (lat)
			bench_samples_add(lat, (double)(t1 - t0) / 1e3);
		t0 = t1;
		if (rc || found != LOOKUP_KEYS)
			(*shortc)++;
	}
	return (double)calls / ((double)(t1 - start ? t1 - start : 1) / 1e9);
}

static double better(double a, double b)
{
	return isnan(a) || b > a ? b : a;
}

static void log_to_stderr(int level, const char *msg, void *arg)
{
	(void)arg;
	fprintf(stderr, "kvbench peer: libkvtier %s: %s\n",
		level <= KVT_LOG_ERR ? "error" : "warning", msg);
}

/* What the repetitions measured. */
struct figures {
	double *v;                /* 4 * reps */
	double *fig, *lim, *shr, *lrate;
	unsigned done, ldone;     /* counted repetitions of loads, of lookups */
	struct bench_samples lat, llat;
	unsigned long bad, good, shortc, notpeer;
	uint64_t cpu_peer, cpu_loop;  /* CPU ns of the timed loads, loop passes */
	uint64_t bytes_peer, bytes_loop;
	struct bench_summary sf, sl, ss, sla, slr, sll;
};

/* Parses the command line into r. Returns -1 to run, else the exit status. */
static int peer_parse(int argc, char **argv, struct run *r, struct bench_common *co)
{
	static const struct option longopts[] = {
		{ "block-size", required_argument, NULL, OPT_BS },
		{ "blocks", required_argument, NULL, OPT_BLOCKS },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "transport", required_argument, NULL, OPT_TRANSPORT },
		{ "hosts", required_argument, NULL, OPT_HOSTS },
		{ "promote", no_argument, NULL, OPT_PROMOTE },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	int c, x;

	bench_common_init(co);
	bench_getopt_begin();
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		x = bench_common_option(CMD, c, optarg, argv, co);
		if (x < 0)
			return BENCH_EXIT_USAGE;
		if (x > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return BENCH_EXIT_OK;
		case OPT_BS:
			if (bench_size_arg(CMD, "--block-size", optarg, 4096, 64ull << 20, &r->bs))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_BLOCKS:
			if (bench_parse_uint(optarg, 1, 1000000, &r->nblocks))
				return bench_usage_error(CMD, "bad --blocks '%s': an integer "
							 "from 1 to 1000000", optarg);
			break;
		case OPT_BATCH:
			if (bench_parse_uint(optarg, 1, 4096, &r->batch))
				return bench_usage_error(CMD, "bad --batch '%s': an integer "
							 "from 1 to 4096", optarg);
			break;
		case OPT_TRANSPORT:
			if (strcmp(optarg, "tcp") && strcmp(optarg, "rdma"))
				return bench_usage_error(CMD, "bad --transport '%s': tcp or rdma",
							 optarg);
			r->rdma = !strcmp(optarg, "rdma");
			break;
		case OPT_PROMOTE:
			r->promote = 1;
			break;
		case OPT_HOSTS: {
			struct in_addr ia;
			const char *comma = strchr(optarg, ',');
			size_t la = comma ? (size_t)(comma - optarg) : 0;
			if (!comma || la == 0 || la >= sizeof(r->host[0]) ||
			    strlen(comma + 1) >= sizeof(r->host[1]))
				return bench_usage_error(CMD, "bad --hosts '%s': two IPv4 "
							 "addresses, A,B", optarg);
			memcpy(r->host[0], optarg, la);
			r->host[0][la] = 0;
			snprintf(r->host[1], sizeof(r->host[1]), "%s", comma + 1);
			if (inet_pton(AF_INET, r->host[0], &ia) != 1 ||
			    inet_pton(AF_INET, r->host[1], &ia) != 1)
				return bench_usage_error(CMD, "bad --hosts '%s': two IPv4 "
							 "addresses, A,B", optarg);
			break;
		}
		default:
			return bench_usage_error(CMD, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	if (r->nblocks % r->batch)
		return bench_usage_error(CMD, "--blocks %lu is not a multiple of "
					 "--batch %lu", r->nblocks, r->batch);
	if (r->nblocks * r->bs > MAX_TOTAL)
		return bench_usage_error(CMD, "--blocks x --block-size is %llu MiB; "
					 "at most %llu MiB",
					 (unsigned long long)(r->nblocks * r->bs >> 20),
					 MAX_TOTAL >> 20);
	r->reps = co->reps;
	if (r->rdma)
		pb_find_soft_device(r);
	/* the library's default peers.request_timeout_ms (not set: reported) */
	r->request_ms = 2000;
	return -1;
}

/*
 * Buffers, keys, the two stores, and b holding every block (put on b, which
 * owns them: nothing forwarded, a holds nothing). Returns 0 or
 * BENCH_EXIT_FAIL.
 */
static int peer_setup(struct run *r, struct figures *g)
{
	double fwd, on_a;

	r->keys = malloc(r->nblocks * sizeof(*r->keys));
	r->dst = bench_buffer_alloc(r->batch * r->bs);
	r->src = bench_buffer_alloc(r->bs);
	g->v = calloc(4 * (size_t)r->reps, sizeof(double));
	if (!r->keys || !r->dst || !r->src || !g->v) {
		fprintf(stderr, "kvbench peer: out of memory\n");
		return BENCH_EXIT_FAIL;
	}
	g->fig = g->v;
	g->lim = g->v + r->reps;
	g->shr = g->v + 2 * (size_t)r->reps;
	g->lrate = g->v + 3 * (size_t)r->reps;
	common_fill(r->src, r->bs, 0x7063705f6c6f6f70ull);
	keys_owned_by_b(r->keys, r->nblocks, 1);
	keys_owned_by_b(r->chain, LOOKUP_KEYS, 2);
	if (open_stores(r) || put_on_b(r, r->keys, r->nblocks, r->bs) ||
	    put_on_b(r, r->chain, LOOKUP_KEYS, LOOKUP_BLOCK))
		return BENCH_EXIT_FAIL;
	fwd = stat_or_nan(r->b, "store.peer_puts");
	on_a = stat_or_nan(r->a, "ram.objects");
	if ((!isnan(fwd) && fwd != 0) || (!isnan(on_a) && on_a != 0)) {
		fprintf(stderr, "kvbench peer: b forwarded %.0f puts and a holds %.0f blocks; "
			"the keys are not b's alone\n", fwd, on_a);
		return BENCH_EXIT_FAIL;
	}
	return 0;
}

/* Peer loads, each between two passes of the TCP loop (rep 0 warms up). */
static int peer_loads(struct run *r, struct figures *g)
{
	int rc = BENCH_EXIT_OK;

	for (unsigned rep = 0; rep <= r->reps && rc == BENCH_EXIT_OK &&
			       !bench_stop_signal(); rep++) {
		struct bench_samples l = { 0 };
		double h0 = stat_or_nan(r->a, "store.hits_peer");
		uint64_t cl = 0, bl = 0, cp, all = (uint64_t)r->nblocks * r->bs;
		double before = pb_limit_loop(r);
		cl += isnan(before) ? 0 : r->cpu_ns;
		bl += isnan(before) ? 0 : all;
		double x = peer_load(r, &l, &g->bad, &g->good);
		cp = r->cpu_ns;
		double after = pb_limit_loop(r);
		cl += isnan(after) ? 0 : r->cpu_ns;
		bl += isnan(after) ? 0 : all;
		double h1 = stat_or_nan(r->a, "store.hits_peer");
		double inl = r->rdma ? member_stat(r->a, 1, "rdma_inline") : 0;

		forget_on_a(r);
		if (!isnan(h0) && !isnan(h1) && h1 - h0 < (double)r->nblocks)
			g->notpeer += r->nblocks - (unsigned long)(h1 - h0);
		if (r->rdma && inl != 0) {
			fprintf(stderr, "kvbench peer: %s blocks went inline over TCP, not by "
				"RDMA\n", isnan(inl) ? "?" : "some");
			rc = BENCH_EXIT_FAIL;
		} else if (isnan(x) || g->bad || g->notpeer || (isnan(before) && isnan(after))) {
			if (g->notpeer)
				fprintf(stderr, "kvbench peer: %lu blocks were not loaded "
					"from b\n", g->notpeer);
			rc = BENCH_EXIT_FAIL;
		} else if (rep > 0) {
			g->fig[rep - 1] = x;
			g->lim[rep - 1] = better(before, after);
			g->shr[rep - 1] = x / g->lim[rep - 1];
			g->done = rep;
			bench_samples_append(&g->lat, &l);
			g->cpu_peer += cp;
			g->bytes_peer += all;
			g->cpu_loop += cl;
			g->bytes_loop += bl;
		}
		bench_samples_free(&l);
	}
	return rc;
}

/* Lookups through the peer: one round trip per call. */
static int peer_lookups(struct run *r, struct figures *g)
{
	uint64_t t0 = bench_now_ns(), n = 0, lcalls;

	do {
		lookup_rep(r, 1, NULL, &g->shortc);
		n++;
	} while (bench_now_ns() - t0 < 20000000ull);
	lcalls = LOOKUP_REP_NS / ((bench_now_ns() - t0) / n + 1);
	if (lcalls == 0)
		lcalls = 1;
	for (unsigned rep = 0; rep <= r->reps && !bench_stop_signal(); rep++) {
		double x = lookup_rep(r, lcalls, rep ? &g->llat : NULL, &g->shortc);

		if (rep > 0) {
			g->lrate[rep - 1] = x;
			g->ldone = rep;
		}
	}
	if (g->shortc) {
		fprintf(stderr, "kvbench peer: %lu lookups on a found less than the "
			"%d keys stored on b\n", g->shortc, LOOKUP_KEYS);
		return BENCH_EXIT_FAIL;
	}
	return BENCH_EXIT_OK;
}

/* ms of CPU time per GiB, NAN when nothing was moved */
static double cpu_ms_per_gib(uint64_t ns, uint64_t bytes)
{
	return bytes ? (double)ns / 1e6 / ((double)bytes / (double)(1ull << 30)) : NAN;
}

static void peer_print(const struct run *r, struct figures *g)
{
	const char *const hdr[] = { "figure (median)", "peer", "min", "max",
				    r->rdma ? "RDMA loop" : "TCP loop", "share", "share min-max" };
	struct bench_table *t = bench_table_new(7, hdr);
	char sz[32];

	bench_summarize(g->fig, g->done, &g->sf);
	bench_summarize(g->lim, g->done, &g->sl);
	bench_summarize(g->shr, g->done, &g->ss);
	bench_summarize(g->lat.v, g->lat.n, &g->sla);
	bench_summarize(g->lrate, g->ldone, &g->slr);
	bench_summarize(g->llat.v, g->llat.n, &g->sll);
	bench_table_cell(t, "a loads from b, kvt_get_batch");
	bench_table_cell(t, "%.2f GB/s", g->sf.median / 1e9);
	bench_table_cell(t, "%.2f", g->sf.min / 1e9);
	bench_table_cell(t, "%.2f", g->sf.max / 1e9);
	bench_table_cell(t, "%.2f GB/s", g->sl.median / 1e9);
	bench_table_cell(t, "%.0f%%", 100.0 * g->ss.median);
	bench_table_cell(t, "%.0f%%-%.0f%%", 100.0 * g->ss.min, 100.0 * g->ss.max);
	bench_table_end_row(t);
	printf("\n");
	bench_table_print(t, stdout, 2);
	bench_table_free(t);
	if (r->rdma)
		printf("  limit: RDMA READs of the same %llu MiB from %s to %s, %lu blocks of "
		       "%s per rlink_move, the better\n  of the passes right before and right "
		       "after each repetition; share = peer / limit per repetition\n",
		       (unsigned long long)(r->nblocks * r->bs >> 20), r->host[1], r->host[0],
		       r->batch, bench_fmt_size(r->bs, sz, sizeof(sz)));
	else
		printf("  limit: one TCP stream on 127.0.0.1 of the same %llu MiB in %s sends, "
		       "TCP_NODELAY, the better\n  of the passes right before and right after "
		       "each repetition; share = peer / limit per repetition\n",
		       (unsigned long long)(r->nblocks * r->bs >> 20),
		       bench_fmt_size(r->bs, sz, sizeof(sz)));
	if (r->soft_dev[0])
		printf("  EMULATED: the RDMA device here is %s, a software device; these "
		       "figures are not a speed\n", r->soft_dev);
	printf("  latency per batch of %lu (%llu KiB): p50 %.0f us, p90 %.0f us, "
	       "p99 %.0f us\n", r->batch, (unsigned long long)(r->batch * r->bs >> 10),
	       g->sla.median, g->sla.p90, g->sla.p99);
	printf("  lookups on a of %d keys stored on b (one round trip): %.0f calls/s "
	       "(%.0f-%.0f), %.2fM keys/s;\n  latency p50 %.1f us, p99 %.1f us\n",
	       LOOKUP_KEYS, g->slr.median, g->slr.min, g->slr.max,
	       g->slr.median * LOOKUP_KEYS / 1e6, g->sll.median, g->sll.p99);
	if (!r->rdma && g->bytes_peer && g->bytes_loop)
		printf("  CPU time of this process (all threads, user and system) per GiB moved:"
		       " loads %.0f ms,\n  TCP loop %.0f ms (the loop's is %.0f%% of the loads')\n",
		       cpu_ms_per_gib(g->cpu_peer, g->bytes_peer),
		       cpu_ms_per_gib(g->cpu_loop, g->bytes_loop),
		       100.0 * cpu_ms_per_gib(g->cpu_loop, g->bytes_loop) /
			       cpu_ms_per_gib(g->cpu_peer, g->bytes_peer));
	printf("  blocks loaded and verified: %lu, wrong or missing: %lu\n", g->good, g->bad);
}

/* The "config" of the JSON document. */
static void peer_config(json_t *doc, const struct run *r)
{
	char addr[2][80];

	bench_json_config(doc, "block_size", json_integer((json_int_t)r->bs));
	bench_json_config(doc, "blocks", json_integer((json_int_t)r->nblocks));
	bench_json_config(doc, "batch", json_integer((json_int_t)r->batch));
	bench_json_config(doc, "reps", json_integer(r->reps));
	bench_json_config(doc, "lookup_keys", json_integer(LOOKUP_KEYS));
	bench_json_config(doc, "request_timeout_ms", json_integer(r->request_ms));
	bench_json_config(doc, "promote", json_boolean(r->promote));
	snprintf(addr[0], sizeof(addr[0]), "%s:%u", r->host[0], r->port_a);
	snprintf(addr[1], sizeof(addr[1]), "%s:%u", r->host[1], r->port_b);
	bench_json_config(doc, "transport", json_string(r->rdma ? "rdma" : "tcp"));
	if (r->rdma)
		bench_json_config(doc, "emulated", json_boolean(r->soft_dev[0] != 0));
	bench_json_config(doc, "members", json_pack("[{s:s, s:s}, {s:s, s:s}]", "name", "a",
						    "addr", addr[0], "name", "b", "addr",
						    addr[1]));
}

/* The JSON document. Returns 0 or BENCH_EXIT_FAIL. */
static int peer_json(const struct run *r, const struct figures *g, int rc, const char *path)
{
	json_t *doc = bench_json_new(CMD), *l, *o;

	if (!doc)
		return BENCH_EXIT_FAIL;
	peer_config(doc, r);
	l = json_pack("{s:s, s:s, s:s, s:I, s:I, s:o, s:o}", "name",
		      r->rdma ? "rdma_read_loop" : "tcp_loop", "for",
		      "peer_get_batch", "addr", r->rdma ? r->host[1] : "127.0.0.1", "bytes",
		      (json_int_t)(r->nblocks * r->bs), "chunk_bytes", (json_int_t)r->bs,
		      "value", bench_json_real(g->sl.median), "reps", bench_json_reps(&g->sl));
	bench_json_limit(doc, l);
	o = json_pack("{s:s, s:s, s:o, s:o, s:s, s:o, s:o, s:o, s:o}", "name",
		      "peer_get_batch", "unit", "bytes/s", "value", bench_json_real(g->sf.median),
		      "reps", bench_json_reps(&g->sf), "limit",
		      r->rdma ? "rdma_read_loop" : "tcp_loop", "limit_value",
		      bench_json_real(g->sl.median), "limit_reps", bench_json_reps(&g->sl),
		      "share", bench_json_real(g->ss.median), "share_reps",
		      bench_json_reps(&g->ss));
	json_object_set_new(o, "block_bytes", json_integer((json_int_t)r->bs));
	json_object_set_new(o, "blocks", json_integer((json_int_t)r->nblocks));
	json_object_set_new(o, "blocks_per_call", json_integer((json_int_t)r->batch));
	json_object_set_new(o, "batch_latency_us", bench_json_latency(&g->sla));
	json_object_set_new(o, "wrong_blocks", json_integer((json_int_t)g->bad));
	if (!r->rdma) {
		json_object_set_new(o, "cpu_ms_per_gib",
				    bench_json_real(cpu_ms_per_gib(g->cpu_peer, g->bytes_peer)));
		json_object_set_new(o, "limit_cpu_ms_per_gib",
				    bench_json_real(cpu_ms_per_gib(g->cpu_loop, g->bytes_loop)));
	}
	bench_json_result(doc, o);
	bench_json_result(doc, json_pack("{s:s, s:s, s:o, s:o, s:i, s:o, s:o, s:I}", "name",
					 "peer_lookup", "unit", "calls/s", "value",
					 bench_json_real(g->slr.median), "reps",
					 bench_json_reps(&g->slr), "keys_per_call", LOOKUP_KEYS,
					 "keys_per_s",
					 bench_json_real(g->slr.median * LOOKUP_KEYS),
					 "latency_us_per_call", bench_json_latency(&g->sll),
					 "short_calls", (json_int_t)g->shortc));
	if (g->bad)
		bench_json_error(doc, "%lu blocks missing or wrong", g->bad);
	if (g->notpeer)
		bench_json_error(doc, "%lu blocks not loaded from b", g->notpeer);
	if (g->shortc)
		bench_json_error(doc, "%lu lookups found less than the chain", g->shortc);
	if (rc != BENCH_EXIT_OK && !g->bad && !g->notpeer && !g->shortc)
		bench_json_error(doc, "the run failed (see standard error)");
	rc = bench_json_write(doc, path) ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
	json_decref(doc);
	return rc;
}

int bench_peer_main(int argc, char **argv)
{
	struct run r = { .bs = 1ull << 20, .nblocks = 256, .batch = 16,
			 .host = { "127.0.0.1", "127.0.0.1" } };
	struct figures g = { 0 };
	struct bench_common co;
	char sz[32];
	int rc = peer_parse(argc, argv, &r, &co);

	if (rc >= 0)
		return rc;
	kvt_set_log(log_to_stderr, NULL, KVT_LOG_WARN);
	rc = peer_setup(&r, &g);
	if (rc == BENCH_EXIT_OK) {
		printf("kvbench peer: libkvtier %s, %u CPUs; stores a (%s:%u) and b "
		       "(%s:%u) in this process, transport %s,\n"
		       "RAM tiers only; a loads %lu blocks of %s that b owns, %lu per "
		       "kvt_get_batch, into posix_memalign\nbuffers; a's configuration the "
		       "default but for peers (promote %s); median of %u reps after a "
		       "warm-up\n",
		       kvt_version(), bench_ncpus(), r.host[0], r.port_a, r.host[1], r.port_b,
		       r.rdma ? "rdma" : "tcp", r.nblocks,
		       bench_fmt_size(r.bs, sz, sizeof(sz)), r.batch,
		       r.promote ? "true, --promote" : "false", r.reps);
		fflush(stdout);
		bench_catch_stop();
		rc = peer_loads(&r, &g);
		if (rc == BENCH_EXIT_OK && !bench_stop_signal())
			rc = peer_lookups(&r, &g);
		peer_print(&r, &g);
		if (co.json_path && peer_json(&r, &g, rc, co.json_path))
			rc = BENCH_EXIT_FAIL;
	}
	kvt_close(r.a);
	kvt_close(r.b);
	kvt_set_log(NULL, NULL, 0);
	bench_samples_free(&g.lat);
	bench_samples_free(&g.llat);
	free(g.v);
	free(r.keys);
	free(r.dst);
	free(r.src);
	return bench_finish(CMD, rc);
}
