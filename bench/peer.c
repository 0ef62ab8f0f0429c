/*
 * peer.c - "kvbench peer": the peer tier over TCP, through the public API.
 * Two stores are opened in this process, members "a" and "b" of one peer
 * group on two free ports of 127.0.0.1, each with a RAM tier only. Blocks
 * whose keys b owns (rendezvous hashing, as lib/peer.c computes it) are put
 * on b, where they stay; a then loads them with kvt_get_batch, so every
 * block crosses the loopback connection from b's server to a's client. Each
 * repetition uses keys a has not loaded: a promotes peer hits into its own
 * RAM, so the copies are removed from a after each repetition (b keeps its
 * own). Every byte loaded is verified, untimed, and a's peer-hit counter
 * must grow by the number of blocks.
 *
 * The limit (shared/BENCHMARKS.md, "peer load over TCP"): the bench's own
 * plain TCP stream on 127.0.0.1 moving the same bytes (a thread accepts and
 * sends them in block-size chunks, this thread receives them into the same
 * destination buffers, TCP_NODELAY on both ends), measured right before and
 * right after each repetition; the better of the two counts.
 *
 * Also: kvt_lookup on a of a chain of keys that b owns and stores, so each
 * call is one LOOKUP round trip to b; calls per second.
 * Uses only <kvtier.h> (and common_key_owner() to find the owner of a key).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>


#include "bench.h"

#define CMD "peer"
#define LOOKUP_KEYS 64            /* keys of the lookup chain */
#define LOOKUP_BLOCK 4096         /* bytes of each of its blocks */
#define LOOKUP_REP_NS 200000000ull /* one lookup repetition, about */
#define MAX_TOTAL (4ull << 30)    /* --blocks x --block-size */
#define LOOP_TIMEOUT_S 30         /* a stalled limit loop gives up */

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
	"  --reps N           timed repetitions after one warm-up (default 5)\n"
	"  --json FILE        write the results as JSON to FILE\n"
	"  --help             this text\n";

enum { OPT_BS = BENCH_OPT_FIRST_FREE, OPT_BLOCKS, OPT_BATCH };

struct run {
	uint64_t bs;
	unsigned long nblocks, batch;
	unsigned reps;
	unsigned port_a, port_b;
	unsigned request_ms;
	kvt_store *a, *b;
	kvt_key *keys;            /* nblocks keys owned by b */
	kvt_key chain[LOOKUP_KEYS]; /* lookup keys owned by b */
	char *dst;                /* batch * bs: where a loads into */
	char *src;                /* bs: what the limit's sender sends */
};

/* --- keys and their owner ------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* n keys of the stream tag that member b owns in the group [a, b]. */
static void keys_owned_by_b(kvt_key *out, size_t n, uint64_t tag)
{
	static const char *const names[] = { "a", "b" };
	uint64_t i = 0;

	for (size_t k = 0; k < n; i++) {
		kvt_key key = { .lo = mix64(tag * 0x100000000ull + i),
				.hi = mix64(~tag ^ (i << 20)) };

		if (common_key_owner(key, names, 2) == 1)
			out[k++] = key;
	}
}

/* --- the two stores -------------------------------------------------------- */

static int open_member(const struct run *r, const char *self, uint64_t capacity,
		       kvt_store **out)
{
	char cfg[512];
	int rc;

	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": %llu}, \"peers\": {\"self\": \"%s\", "
		 "\"request_timeout_ms\": %u, \"members\": ["
		 "{\"name\": \"a\", \"addr\": \"127.0.0.1:%u\"}, "
		 "{\"name\": \"b\", \"addr\": \"127.0.0.1:%u\"}]}}",
		 (unsigned long long)capacity, self, r->request_ms, r->port_a, r->port_b);
	rc = kvt_open(cfg, out);
	if (rc)
		fprintf(stderr, "kvbench peer: kvt_open(%s): %s (%s)\n", cfg,
			kvt_strerror(rc), kvt_last_error());
	return rc;
}

/* Opens a and b on two ports held (common_ports_reserve) until both
 * listen, so that no other process can take them in between. */
static int open_stores(struct run *r)
{
	/* room for every block, its promoted copy on a, the lookup chain,
	 * and headroom below the high watermark */
	uint64_t cap = r->nblocks * r->bs + r->nblocks * r->bs / 4 + 2 * r->bs +
		       LOOKUP_KEYS * LOOKUP_BLOCK + (16ull << 20);
	struct common_ports held;
	int rc;

	cap = (cap + (1ull << 20) - 1) & ~((1ull << 20) - 1);
	if ((rc = common_ports_reserve(&held, 2))) {
		fprintf(stderr, "kvbench peer: no free port on 127.0.0.1: %s\n",
			strerror(-rc));
		return rc;
	}
	r->port_a = (unsigned)held.port[0];
	r->port_b = (unsigned)held.port[1];
	rc = open_member(r, "a", cap, &r->a);
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

/* --- the limit: a plain TCP stream on 127.0.0.1 ------------------------------ */

struct sender {
	int lfd;
	const char *src;
	size_t bs;
	uint64_t bytes;
	int err;
};

static void set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = LOOP_TIMEOUT_S };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Accepts one connection, waits for the receiver's go byte, then sends
 * bytes in chunks of bs from src. */
static void *sender_main(void *arg)
{
	struct sender *s = arg;
	int one = 1, fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
	uint64_t left = s->bytes;
	char go;

	if (fd < 0) {
		s->err = -errno;
		return NULL;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	set_timeouts(fd);
	if (recv(fd, &go, 1, MSG_WAITALL) != 1)
		s->err = -EIO;
	while (!s->err && left) {
		size_t chunk = left < s->bs ? (size_t)left : s->bs, off = 0;

		while (off < chunk) {
			ssize_t w = send(fd, s->src + off, chunk - off, MSG_NOSIGNAL);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				s->err = w < 0 ? -errno : -EIO;
				break;
			}
			off += (size_t)w;
		}
		left -= off;
	}
	close(fd);
	return NULL;
}

/*
 * One pass of the limit: r->nblocks * r->bs bytes over a fresh loopback
 * connection, received block by block into r->dst's batch buffers in turn,
 * as a's client receives them. Bytes/s from the go byte to the last byte
 * received, or NAN.
 */
static double tcp_loop(const struct run *r)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct sender s = { .lfd = -1, .src = r->src, .bs = r->bs,
			    .bytes = (uint64_t)r->nblocks * r->bs };
	pthread_t t;
	int one = 1, cfd = -1, started = 0, ok = 0;
	uint64_t got = 0, t0 = 0, t1 = 0;

	s.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s.lfd < 0 || bind(s.lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(s.lfd, (struct sockaddr *)&sa, &sl) < 0 || listen(s.lfd, 1) < 0)
		goto out;
	if (pthread_create(&t, NULL, sender_main, &s))
		goto out;
	started = 1;
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cfd < 0 || connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	set_timeouts(cfd);
	t0 = bench_now_ns();
	if (send(cfd, "g", 1, MSG_NOSIGNAL) != 1)
		goto out;
	for (size_t blk = 0; got < s.bytes; blk = (blk + 1) % r->batch) {
		char *b = r->dst + blk * r->bs;
		size_t off = 0;

		while (off < r->bs) {
			ssize_t n = recv(cfd, b + off, r->bs - off, 0);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				goto out;
			off += (size_t)n;
		}
		got += off;
	}
	t1 = bench_now_ns();
	ok = 1;
out:
	if (cfd >= 0)
		close(cfd); /* a sender still sending fails and ends */
	if (s.lfd >= 0)
		shutdown(s.lfd, SHUT_RDWR); /* a sender still in accept ends */
	if (started)
		pthread_join(t, NULL);
	if (s.lfd >= 0)
		close(s.lfd);
	if (!ok || s.err) {
		fprintf(stderr, "kvbench peer: the TCP loop on 127.0.0.1 failed: %s\n",
			strerror(s.err ? -s.err : errno ? errno : EIO));
		return NAN;
	}
	return (double)got / ((double)(t1 - t0 ? t1 - t0 : 1) / 1e9);
}

/* --- the figures --------------------------------------------------------------- */

/*
 * One repetition: a loads every block from b in batches into r->dst, each
 * call timed (latencies in us into lat), each block verified after its call.
 * Returns bytes/s over the time spent in the calls, or NAN when a call
 * failed; *bad counts blocks missing or wrong.
 */
static double peer_load(struct run *r, struct bench_samples *lat, unsigned long *bad,
			unsigned long *good)
{
	kvt_op *ops = calloc(r->batch, sizeof(*ops));
	uint64_t busy = 0, bytes = 0;
	int err = 0;

	if (!ops)
		return NAN;
	for (size_t i = 0; i < r->nblocks; i += r->batch) {
		for (size_t j = 0; j < r->batch; j++)
			ops[j] = (kvt_op){ .key = r->keys[i + j], .buf = r->dst + j * r->bs,
					   .len = r->bs, .result = 1 };
		uint64_t t0 = bench_now_ns();
		int rc = kvt_get_batch(r->a, ops, r->batch);
		uint64_t dt = bench_now_ns() - t0;

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

/* Removes a's promoted copies (b keeps its own). */
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

int bench_peer_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "block-size", required_argument, NULL, OPT_BS },
		{ "blocks", required_argument, NULL, OPT_BLOCKS },
		{ "batch", required_argument, NULL, OPT_BATCH },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct run r = { .bs = 1ull << 20, .nblocks = 256, .batch = 16 };
	struct bench_common co;
	char sz[32];
	int c, rc = BENCH_EXIT_OK;

	bench_common_init(&co);
	bench_getopt_begin();
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		int x = bench_common_option(CMD, c, optarg, argv, &co);
		if (x < 0)
			return BENCH_EXIT_USAGE;
		if (x > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return BENCH_EXIT_OK;
		case OPT_BS:
			if (bench_size_arg(CMD, "--block-size", optarg, 4096, 64ull << 20, &r.bs))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_BLOCKS:
			if (bench_parse_uint(optarg, 1, 1000000, &r.nblocks))
				return bench_usage_error(CMD, "bad --blocks '%s': an integer "
							 "from 1 to 1000000", optarg);
			break;
		case OPT_BATCH:
			if (bench_parse_uint(optarg, 1, 4096, &r.batch))
				return bench_usage_error(CMD, "bad --batch '%s': an integer "
							 "from 1 to 4096", optarg);
			break;
		default:
			return bench_usage_error(CMD, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	if (r.nblocks % r.batch)
		return bench_usage_error(CMD, "--blocks %lu is not a multiple of "
					 "--batch %lu", r.nblocks, r.batch);
	if (r.nblocks * r.bs > MAX_TOTAL)
		return bench_usage_error(CMD, "--blocks x --block-size is %llu MiB; "
					 "at most %llu MiB",
					 (unsigned long long)(r.nblocks * r.bs >> 20),
					 MAX_TOTAL >> 20);
	r.reps = co.reps;
	/* the library's default: each block of a batch has the whole of it */
	r.request_ms = 2000;

	kvt_set_log(log_to_stderr, NULL, KVT_LOG_WARN);
	r.keys = malloc(r.nblocks * sizeof(*r.keys));
	r.dst = bench_buffer_alloc(r.batch * r.bs);
	r.src = bench_buffer_alloc(r.bs);
	double *v = calloc(3 * (size_t)r.reps + r.reps, sizeof(double));
	struct bench_samples lat = { 0 }, llat = { 0 };
	unsigned long bad = 0, good = 0, shortc = 0, notpeer = 0;
	if (!r.keys || !r.dst || !r.src || !v) {
		fprintf(stderr, "kvbench peer: out of memory\n");
		rc = BENCH_EXIT_FAIL;
		goto out;
	}
	double *fig = v, *lim = v + r.reps, *shr = v + 2 * (size_t)r.reps,
	       *lrate = v + 3 * (size_t)r.reps;
	common_fill(r.src, r.bs, 0x7063705f6c6f6f70ull);
	keys_owned_by_b(r.keys, r.nblocks, 1);
	keys_owned_by_b(r.chain, LOOKUP_KEYS, 2);
	if (open_stores(&r)) {
		rc = BENCH_EXIT_FAIL;
		goto out;
	}
	if (put_on_b(&r, r.keys, r.nblocks, r.bs) ||
	    put_on_b(&r, r.chain, LOOKUP_KEYS, LOOKUP_BLOCK)) {
		rc = BENCH_EXIT_FAIL;
		goto out;
	}
	/* b owns them: nothing was forwarded, a holds nothing */
	double fwd = stat_or_nan(r.b, "store.peer_puts"),
	       on_a = stat_or_nan(r.a, "ram.objects");
	if ((!isnan(fwd) && fwd != 0) || (!isnan(on_a) && on_a != 0)) {
		fprintf(stderr, "kvbench peer: b forwarded %.0f puts and a holds %.0f blocks; "
			"the keys are not b's alone\n", fwd, on_a);
		rc = BENCH_EXIT_FAIL;
		goto out;
	}

	printf("kvbench peer: libkvtier %s, %u CPUs; stores a (127.0.0.1:%u) and b "
	       "(127.0.0.1:%u) in this process,\n"
	       "RAM tiers only; a loads %lu blocks of %s that b owns, %lu per "
	       "kvt_get_batch; median of %u reps after a warm-up\n",
	       kvt_version(), bench_ncpus(), r.port_a, r.port_b, r.nblocks,
	       bench_fmt_size(r.bs, sz, sizeof(sz)), r.batch, r.reps);
	fflush(stdout);

	/* peer loads, each between two passes of the TCP loop */
	for (unsigned rep = 0; rep <= r.reps && rc == BENCH_EXIT_OK; rep++) {
		struct bench_samples l = { 0 };
		double h0 = stat_or_nan(r.a, "store.hits_peer");
		double before = tcp_loop(&r);
		double x = peer_load(&r, &l, &bad, &good);
		double after = tcp_loop(&r);
		double h1 = stat_or_nan(r.a, "store.hits_peer");

		forget_on_a(&r);
		if (!isnan(h0) && !isnan(h1) && h1 - h0 < (double)r.nblocks)
			notpeer += r.nblocks - (unsigned long)(h1 - h0);
		if (isnan(x) || bad || notpeer || (isnan(before) && isnan(after))) {
			if (notpeer)
				fprintf(stderr, "kvbench peer: %lu blocks were not loaded "
					"from b\n", notpeer);
			rc = BENCH_EXIT_FAIL;
		} else if (rep > 0) {
			fig[rep - 1] = x;
			lim[rep - 1] = better(before, after);
			shr[rep - 1] = x / lim[rep - 1];
			bench_samples_append(&lat, &l);
		}
		bench_samples_free(&l);
	}

	/* lookups through the peer: one round trip per call */
	uint64_t lcalls = 0;
	if (rc == BENCH_EXIT_OK) {
		uint64_t t0 = bench_now_ns(), n = 0;

		do {
			lookup_rep(&r, 1, NULL, &shortc);
			n++;
		} while (bench_now_ns() - t0 < 20000000ull);
		lcalls = LOOKUP_REP_NS / ((bench_now_ns() - t0) / n + 1);
		if (lcalls == 0)
			lcalls = 1;
		for (unsigned rep = 0; rep <= r.reps; rep++) {
			double x = lookup_rep(&r, lcalls, rep ? &llat : NULL, &shortc);

			if (rep > 0)
				lrate[rep - 1] = x;
		}
		if (shortc) {
			fprintf(stderr, "kvbench peer: %lu lookups on a found less than the "
				"%d keys stored on b\n", shortc, LOOKUP_KEYS);
			rc = BENCH_EXIT_FAIL;
		}
	}

	size_t nrep = rc == BENCH_EXIT_OK ? r.reps : 0;
	struct bench_summary sf, sl, ss, sla, slr, sll;
	bench_summarize(fig, nrep, &sf);
	bench_summarize(lim, nrep, &sl);
	bench_summarize(shr, nrep, &ss);
	bench_summarize(lat.v, lat.n, &sla);
	bench_summarize(lrate, nrep, &slr);
	bench_summarize(llat.v, llat.n, &sll);

	static const char *const hdr[] = { "figure (median)", "peer", "min", "max",
					   "TCP loop", "share", "share min-max" };
	struct bench_table *t = bench_table_new(7, hdr);
	bench_table_cell(t, "a loads from b, kvt_get_batch");
	bench_table_cell(t, "%.2f GB/s", sf.median / 1e9);
	bench_table_cell(t, "%.2f", sf.min / 1e9);
	bench_table_cell(t, "%.2f", sf.max / 1e9);
	bench_table_cell(t, "%.2f GB/s", sl.median / 1e9);
	bench_table_cell(t, "%.0f%%", 100.0 * ss.median);
	bench_table_cell(t, "%.0f%%-%.0f%%", 100.0 * ss.min, 100.0 * ss.max);
	bench_table_end_row(t);
	printf("\n");
	bench_table_print(t, stdout, 2);
	bench_table_free(t);
	printf("  limit: one TCP stream on 127.0.0.1 of the same %llu MiB in %s sends, "
	       "TCP_NODELAY, the better\n  of the passes right before and right after "
	       "each repetition; share = peer / limit per repetition\n",
	       (unsigned long long)(r.nblocks * r.bs >> 20), sz);
	printf("  latency per batch of %lu (%llu KiB): p50 %.0f us, p90 %.0f us, "
	       "p99 %.0f us\n", r.batch, (unsigned long long)(r.batch * r.bs >> 10),
	       sla.median, sla.p90, sla.p99);
	printf("  lookups on a of %d keys stored on b (one round trip): %.0f calls/s "
	       "(%.0f-%.0f), %.2fM keys/s;\n  latency p50 %.1f us, p99 %.1f us\n",
	       LOOKUP_KEYS, slr.median, slr.min, slr.max, slr.median * LOOKUP_KEYS / 1e6,
	       sll.median, sll.p99);
	printf("  blocks loaded and verified: %lu, wrong or missing: %lu\n", good, bad);

	if (co.json_path) {
		json_t *doc = bench_json_new(CMD);
		if (!doc) {
			rc = BENCH_EXIT_FAIL;
			goto out;
		}
		bench_json_config(doc, "block_size", json_integer((json_int_t)r.bs));
		bench_json_config(doc, "blocks", json_integer((json_int_t)r.nblocks));
		bench_json_config(doc, "batch", json_integer((json_int_t)r.batch));
		bench_json_config(doc, "reps", json_integer(r.reps));
		bench_json_config(doc, "lookup_keys", json_integer(LOOKUP_KEYS));
		bench_json_config(doc, "request_timeout_ms", json_integer(r.request_ms));
		char addr[2][32];
		snprintf(addr[0], sizeof(addr[0]), "127.0.0.1:%u", r.port_a);
		snprintf(addr[1], sizeof(addr[1]), "127.0.0.1:%u", r.port_b);
		bench_json_config(doc, "members", json_pack(
			"[{s:s, s:s}, {s:s, s:s}]", "name", "a", "addr", addr[0],
			"name", "b", "addr", addr[1]));

		json_t *l = json_object();
		json_object_set_new(l, "name", json_string("tcp_loop"));
		json_object_set_new(l, "for", json_string("peer_get_batch"));
		json_object_set_new(l, "addr", json_string("127.0.0.1"));
		json_object_set_new(l, "bytes", json_integer((json_int_t)(r.nblocks * r.bs)));
		json_object_set_new(l, "chunk_bytes", json_integer((json_int_t)r.bs));
		json_object_set_new(l, "value", bench_json_real(sl.median));
		json_object_set_new(l, "reps", bench_json_reps(&sl));
		bench_json_limit(doc, l);

		json_t *o = json_object();
		json_object_set_new(o, "name", json_string("peer_get_batch"));
		json_object_set_new(o, "unit", json_string("bytes/s"));
		json_object_set_new(o, "value", bench_json_real(sf.median));
		json_object_set_new(o, "reps", bench_json_reps(&sf));
		json_object_set_new(o, "limit", json_string("tcp_loop"));
		json_object_set_new(o, "limit_value", bench_json_real(sl.median));
		json_object_set_new(o, "limit_reps", bench_json_reps(&sl));
		json_object_set_new(o, "share", bench_json_real(ss.median));
		json_object_set_new(o, "share_reps", bench_json_reps(&ss));
		json_object_set_new(o, "block_bytes", json_integer((json_int_t)r.bs));
		json_object_set_new(o, "blocks", json_integer((json_int_t)r.nblocks));
		json_object_set_new(o, "blocks_per_call", json_integer((json_int_t)r.batch));
		json_object_set_new(o, "batch_latency_us", bench_json_latency(&sla));
		json_object_set_new(o, "wrong_blocks", json_integer((json_int_t)bad));
		bench_json_result(doc, o);

		o = json_object();
		json_object_set_new(o, "name", json_string("peer_lookup"));
		json_object_set_new(o, "unit", json_string("calls/s"));
		json_object_set_new(o, "value", bench_json_real(slr.median));
		json_object_set_new(o, "reps", bench_json_reps(&slr));
		json_object_set_new(o, "keys_per_call", json_integer(LOOKUP_KEYS));
		json_object_set_new(o, "keys_per_s", bench_json_real(slr.median * LOOKUP_KEYS));
		json_object_set_new(o, "latency_us_per_call", bench_json_latency(&sll));
		json_object_set_new(o, "short_calls", json_integer((json_int_t)shortc));
		bench_json_result(doc, o);

		if (bad)
			bench_json_error(doc, "%lu blocks missing or wrong", bad);
		if (notpeer)
			bench_json_error(doc, "%lu blocks not loaded from b", notpeer);
		if (shortc)
			bench_json_error(doc, "%lu lookups found less than the chain", shortc);
		if (rc != BENCH_EXIT_OK && !bad && !notpeer && !shortc)
			bench_json_error(doc, "the run failed (see standard error)");
		if (bench_json_write(doc, co.json_path))
			rc = BENCH_EXIT_FAIL;
		json_decref(doc);
	}
out:
	kvt_close(r.a);
	kvt_close(r.b);
	kvt_set_log(NULL, NULL, 0);
	bench_samples_free(&lat);
	bench_samples_free(&llat);
	free(v);
	free(r.keys);
	free(r.dst);
	free(r.src);
	return rc;
}
