/*
 * replay.c - the replay engine: a discrete-event model of inference
 * endpoints (a GPU prefix cache of fixed token capacity each, soft-sticky
 * routing, one GPU per endpoint that prefills one call at a time and
 * decodes a batch whose per-token time grows with its size) in front of a
 * real libkvtier store, driven by the schedulers of the seed study. Every
 * modelled time (busy time, prefill avoided, the measured store time
 * charged to a call) is on the simulated clock; the simulated clock is
 * paced against the real one (--speed) only so that the store's leases,
 * which run on real time, keep their meaning; lease lengths are divided by
 * the same speed.
 *
 * Uses only the public <kvtier.h> and kvbench's helpers (bench.h); knows
 * nothing about the library's internals, trace formats or how the report is
 * printed.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "kvtier.h"
#include "lru.h"
#include "replay.h"

const char *const replay_tier_name[T_NTIERS] = { "gpu", "ram", "disk", "peer", "recomputed" };
const char *const replay_policy_name[POL_N] = { "default", "ram-only", "refuse", "gpu-only",
						"recompute" };

int replay_policy_parse(const char *s, enum replay_policy *out)
{
	int i;

	if (!s)
		return -EINVAL;
	if (!strcmp(s, "ram+disk")) {
		*out = POL_DEFAULT;
		return 0;
	}
	for (i = 0; i < POL_N; i++)
		if (!strcmp(s, replay_policy_name[i])) {
			*out = (enum replay_policy)i;
			return 0;
		}
	return -EINVAL;
}

void replay_opts_defaults(struct replay_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->endpoints = 1;
	o->gpu_tokens = 166512;
	o->gpu_block = 16;
	o->chunk_tokens = 256;
	o->sticky_slack = 65536;
	o->prefill_rate = 14850;
	o->decode_rate = 60;
	o->decode_growth = 0.25;
	o->gpu_hold = 1;
	o->sched = SCHED_ACTIVE;
	o->active = 16;
	o->stagger_s = 30;
	o->reuse_distance = 128;
	o->max_inflight = 16;
	o->speed = 0;
	o->model = "qwen3-coder-30b-a3b";
	o->kv_bytes_per_token = 2ull * 48 * 4 * 128 * 2; /* 96 KiB */
	o->scale = 1024;
	o->charge_scale = 1;
	o->policy = POL_DEFAULT;
	o->ram_tokens = (32ull << 30) / (96 << 10);      /* 32 GiB */
	o->disk_tokens = 8ull << 20;
	o->lease_ms = 5000;
	o->threads = 2;
	o->nodes = 1;
}

uint64_t replay_block_bytes(const struct replay_opts *o, uint64_t tokens)
{
	uint64_t b = (tokens * o->kv_bytes_per_token + o->scale - 1) / o->scale;

	return b ? b : 1;
}

/* --- events -------------------------------------------------------------------------- */

/*
 * EV_COMPUTE: a call's store load has ended and its prefill computation
 * starts (the GPU is taken); EV_DECODE: the earliest decode of an endpoint
 * may have ended (call = the endpoint; stale when gen differs from the
 * endpoint's).
 */
enum { EV_ARRIVE = 0, EV_COMPUTE, EV_PREFILL_END, EV_DECODE };

struct ev {
	double t;
	uint64_t seq, gen;
	uint32_t type, call;
};

struct heap {
	struct ev *v;
	size_t n, cap;
	uint64_t seq;
};

static inline int ev_less(const struct ev *a, const struct ev *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int heap_push_gen(struct heap *h, double t, uint32_t type, uint32_t call, uint64_t gen)
{
	size_t i, p;
	struct ev e = { t, h->seq++, gen, type, call };

	if (h->n == h->cap) {
		size_t nc = h->cap ? h->cap * 2 : 256;
		struct ev *nv = realloc(h->v, nc * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		h->v = nv;
		h->cap = nc;
	}
	i = h->n++;
	while (i > 0) {
		p = (i - 1) / 2;
		if (!ev_less(&e, &h->v[p]))
			break;
		h->v[i] = h->v[p];
		i = p;
	}
	h->v[i] = e;
	return 0;
}

static int heap_push(struct heap *h, double t, uint32_t type, uint32_t call)
{
	return heap_push_gen(h, t, type, call, 0);
}

static struct ev heap_pop(struct heap *h)
{
	struct ev top = h->v[0], last = h->v[--h->n];
	size_t i = 0, c;

	while ((c = 2 * i + 1) < h->n) {
		if (c + 1 < h->n && ev_less(&h->v[c + 1], &h->v[c]))
			c++;
		if (!ev_less(&h->v[c], &last))
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

/* --- the run --------------------------------------------------------------------------- */

struct endpoint {
	struct lru gpu;
	uint32_t *q; /* FIFO of calls waiting for prefill */
	size_t qh, qn, qcap;
	int busy;       /* a call is loading or prefilling */
	int computing;  /* the GPU prefills it: decodes make no progress */
	uint64_t score; /* prompt tokens queued or in prefill */
	uint32_t outstanding;
	/* the decode batch: calls and their output tokens left at dec_t */
	uint32_t *dec;
	double *dleft;
	size_t ndec, capdec;
	double dec_t;
	uint64_t dec_gen;
	/* gpu_hold: calls holding KV in the pool, their prompt + answer tokens,
	 * and when the pool's figures were last integrated */
	uint32_t running;
	uint64_t running_ctx;
	double acct_t;
	int waiting; /* the call at the queue's head waits for room in the pool */
};

/* The pools' figures integrated over simulated time, summed over the
 * endpoints (pool_acct). */
struct pool_sums {
	double running, ctx, run_kv, prefix, wait;
};

struct run {
	const struct replay_opts *o;
	const struct wl *w;
	struct replay_result *res;
	kvt_store *st[REPLAY_NODES_MAX]; /* node i serves endpoints e, e % nst == i */
	uint32_t nst;
	kvt_key root;
	int gpu_on, store_on;
	uint32_t C; /* GPU blocks per store block */
	char *err;
	size_t errlen;
	/* per call */
	double *arrive, *done_t;
	double *compute_s; /* prefill computation of the missed tokens */
	double *ttft;
	uint32_t *ep_of, *put_from;
	size_t nttft;
	/* gpu_hold: the GPU entries each running call pins, and the tokens it
	 * holds outside them */
	uint32_t **pins;
	uint32_t *npins;
	uint64_t *held;
	/* per session */
	int32_t *pref;
	uint32_t *next_turn; /* calls of the session done */
	uint32_t *issued;    /* SCHED_ACTIVE: calls of the session issued */
	/* endpoints */
	struct endpoint *ep;
	/* scratch */
	uint32_t *tokens;
	kvt_key *keys, *skeys;
	uint64_t *ktok, *stok;
	uint32_t *trip;
	size_t maxg;
	kvt_op *ops;
	unsigned char *buf;
	size_t bufcap;
	struct bench_samples load_us;
	struct bench_samples reuse_s; /* the age of every reuse (bound_account) */
	struct lru bound;
	/* schedule */
	struct heap h;
	uint64_t completions, inflight;
	size_t next_session;
	uint32_t *wq; /* SCHED_DISTANCE: sessions waiting, FIFO */
	uint64_t *wstamp;
	size_t wqh, wqn;
	double first_t, last_t;
	double prefill_s, decode_s; /* GPU time prefilling, decoding (simulated) */
	struct pool_sums pool;
	uint64_t pool_waits; /* calls that waited for room in a pool */
	/* pacing */
	uint64_t t0_ns, last_progress_ns;
	double lag_sum;
	uint64_t lag_n;
	int tty;
};

static int rfail(struct run *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int rfail(struct run *r, int code, const char *fmt, ...)
{
	va_list ap;

	if (r->err && r->errlen) {
		va_start(ap, fmt);
		vsnprintf(r->err, r->errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/*
 * The GPU blocks of call c: keys[0..ng) with ktok[] tokens each; the store
 * blocks skeys[0..*ns) with stok[] tokens (every C-th GPU key: a store
 * block is C GPU blocks, keyed by its last one, which hashes the whole
 * prefix).
 */
static size_t call_keys(struct run *r, const struct wl_call *c, size_t *ns)
{
	const struct wl *w = r->w;
	size_t ng, i, j;

	if (w->kind == WL_BLOCKS) {
		uint32_t bt = w->block_tokens;
		for (i = 0; i < c->n; i++) {
			uint64_t id = w->ids[c->first + i];
			uint64_t t = i + 1 < c->n ? bt : c->prompt_tokens - (uint64_t)bt * (c->n - 1);
			r->trip[3 * i] = (uint32_t)id;
			r->trip[3 * i + 1] = (uint32_t)(id >> 32);
			r->trip[3 * i + 2] = (uint32_t)t;
			r->ktok[i] = t;
		}
		ng = kvt_hash_chain(r->root, r->trip, 3 * (size_t)c->n, 3, r->keys, c->n);
		for (i = 0; i < ng; i++) {
			r->skeys[i] = r->keys[i];
			r->stok[i] = r->ktok[i];
		}
		*ns = ng;
		return ng;
	}
	wl_call_tokens(w, c, r->tokens);
	ng = kvt_hash_chain(r->root, r->tokens, c->prompt_tokens, r->o->gpu_block, r->keys,
			    r->maxg);
	for (i = 0; i < ng; i++)
		r->ktok[i] = r->o->gpu_block;
	*ns = ng / r->C;
	for (j = 0; j < *ns; j++) {
		r->skeys[j] = r->keys[(j + 1) * r->C - 1];
		r->stok[j] = (uint64_t)r->C * r->o->gpu_block;
	}
	return ng;
}

static int ensure_buf(struct run *r, size_t bytes)
{
	unsigned char *nb;

	if (bytes <= r->bufcap)
		return 0;
	nb = realloc(r->buf, bytes);
	if (!nb)
		return -ENOMEM;
	r->buf = nb;
	r->bufcap = bytes;
	return 0;
}

static void pace(struct run *r, double t)
{
	uint64_t target, now;
	struct timespec ts;

	if (r->o->speed <= 0)
		return;
	target = r->t0_ns + (uint64_t)(t / r->o->speed * 1e9);
	now = bench_now_ns();
	if (now + 20000 < target) {
		ts.tv_sec = (time_t)(target / 1000000000ull);
		ts.tv_nsec = (long)(target % 1000000000ull);
		/* a signal wakes it early; a stop request ends the wait */
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR &&
		       !(r->o->stop && r->o->stop()))
			;
	} else if (now > target) {
		double lag = (double)(now - target) / 1e9;
		r->lag_sum += lag;
		r->lag_n++;
		if (lag > r->res->lag_max_s)
			r->res->lag_max_s = lag;
	}
}

static void progress(struct run *r, double t, int final)
{
	uint64_t now = bench_now_ns();
	size_t done = (size_t)r->completions, total = r->w->ncalls, i, fill;
	char bar[41];

	if (!r->tty)
		return;
	if (!final && now - r->last_progress_ns < 250000000ull)
		return;
	r->last_progress_ns = now;
	if (final) {
		fprintf(stderr, "\r%*s\r", 100, "");
		return;
	}
	fill = total ? done * 40 / total : 40;
	for (i = 0; i < 40; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[40] = 0;
	fprintf(stderr, "\r[%s] %zu/%zu calls, simulated %.0f s, wall %.0f s ", bar, done, total,
		t, (double)(now - r->t0_ns) / 1e9);
	fflush(stderr);
}

/* Reads a number from a stats document ("ram.hits"), 0 when absent. */
static double stat_num(const json_t *s, const char *path)
{
	double v = 0;

	if (!s || bench_stats_number(s, path, &v))
		return 0;
	return v;
}

/* The store node that endpoint e's calls use. */
static kvt_store *ep_store(const struct run *r, uint32_t e)
{
	return r->st[e % r->nst];
}

static int store_hits(kvt_store *st, double *ram, double *disk, double *peer)
{
	json_t *s = bench_store_stats(st);

	if (!s)
		return -EIO;
	*ram = stat_num(s, "store.hits_ram");
	*disk = stat_num(s, "store.hits_disk");
	*peer = stat_num(s, "store.hits_peer");
	json_decref(s);
	return 0;
}

static void account(struct run *r, int tier, uint64_t tokens, uint64_t blocks)
{
	r->res->tok[tier] += tokens;
	r->res->blk[tier] += blocks;
}

/*
 * What the store did for one call: of its ng GPU blocks the first h were
 * in the GPU cache; of its ns store blocks it looked up those from c0,
 * found found of them and loaded the first loaded whole; store_tok tokens
 * and bytes bytes it served beyond the GPU cache, in the real time of
 * lookup_real and load_real seconds.
 */
struct served {
	size_t ng, ns, h;
	size_t c0, found, loaded;
	uint64_t store_tok, bytes;
	double lookup_real, load_real;
};

/* The leading GPU blocks of the call that endpoint e's cache holds; their
 * tokens are added to *gpu_tok. */
static size_t gpu_hits(struct run *r, struct endpoint *e, size_t ng, uint64_t *gpu_tok)
{
	size_t h = 0, i;

	if (r->gpu_on)
		while (h < ng && lru_find(&e->gpu, r->keys[h]) != NIL)
			h++;
	for (i = 0; i < h; i++)
		*gpu_tok += r->ktok[i];
	return h;
}

/* Integrates endpoint e's pool up to t: the calls holding KV, their
 * contexts, the tokens they hold, the prefixes kept beside them, and the
 * time in which a call waits for room. */
static void pool_acct(struct run *r, struct endpoint *e, double t)
{
	double dt = t - e->acct_t, kv = (double)(e->gpu.pinned + e->gpu.held);

	if (dt <= 0)
		return;
	r->pool.running += dt * e->running;
	r->pool.ctx += dt * (double)e->running_ctx;
	r->pool.run_kv += dt * kv;
	r->pool.prefix += dt * (double)(e->gpu.used - e->gpu.pinned);
	if (e->waiting)
		r->pool.wait += dt;
	e->acct_t = t;
}

/*
 * gpu_hold: call ci, about to prefill on e, pins the h GPU blocks it hit
 * and holds the rest of its prompt and (unless decode runs apart) its
 * answer, evicting earlier prefixes to make room, as a serving engine
 * allocates a request's KV from the pool its prefix cache lives in.
 */
static int gpu_take(struct run *r, uint32_t ci, struct endpoint *e, size_t ng, size_t h,
		    uint64_t gpu_tok, double t)
{
	const struct wl_call *c = &r->w->calls[ci];
	size_t i;

	if (!r->gpu_on || !r->o->gpu_hold)
		return 0;
	pool_acct(r, e, t);
	e->running++;
	e->running_ctx += c->prompt_tokens + c->output_tokens;
	r->pins[ci] = malloc((ng + 1) * sizeof(**r->pins));
	if (!r->pins[ci])
		return rfail(r, -ENOMEM, "out of memory");
	for (i = 0; i < h; i++) {
		r->pins[ci][i] = lru_find(&e->gpu, r->keys[i]);
		lru_pin(&e->gpu, r->pins[ci][i]);
	}
	r->npins[ci] = (uint32_t)h;
	r->held[ci] = c->prompt_tokens - gpu_tok + (r->o->disaggregated ? 0 : c->output_tokens);
	e->gpu.held += r->held[ci];
	lru_trim(&e->gpu);
	return 0;
}

/* gpu_hold: at the end of call ci's prefill its computed blocks (keys
 * h0..ng) join the pool pinned, in place of what it held for them. */
static int gpu_fill(struct run *r, uint32_t ci, struct endpoint *e, size_t ng, double now)
{
	size_t i;
	uint64_t t;

	pool_acct(r, e, now);
	for (i = r->npins[ci]; i < ng; i++) {
		t = r->ktok[i] < r->held[ci] ? r->ktok[i] : r->held[ci];
		r->held[ci] -= t;
		e->gpu.held -= t;
		if (lru_pin_key(&e->gpu, r->keys[i], r->ktok[i], &r->pins[ci][i]))
			return rfail(r, -ENOMEM, "out of memory");
	}
	r->npins[ci] = (uint32_t)ng;
	return 0;
}

/* gpu_hold: call ci ends on e: its blocks become evictable, its prefix most
 * recent (released tail first), what it held is freed, and a pool that
 * running calls filled past its size is evicted back to it. */
static void gpu_release(struct run *r, uint32_t ci, struct endpoint *e, double t)
{
	const struct wl_call *c = &r->w->calls[ci];
	uint32_t i;

	if (!r->pins[ci])
		return;
	pool_acct(r, e, t);
	e->running--;
	e->running_ctx -= c->prompt_tokens + c->output_tokens;
	for (i = r->npins[ci]; i-- > 0;)
		lru_unpin(&e->gpu, r->pins[ci][i]);
	e->gpu.held -= r->held[ci];
	lru_trim(&e->gpu); /* a pool its running calls overfilled */
	r->held[ci] = 0;
	free(r->pins[ci]);
	r->pins[ci] = NULL;
	r->npins[ci] = 0;
}

/* The trace's bound: leading blocks an unbounded cache would hold. Also
 * the age of every reuse, the time since a prompt last touched the block
 * (prompts touch their blocks when they are looked up, at t): counted as
 * aged past the lease. */
static int bound_account(struct run *r, size_t ng, double t)
{
	struct replay_result *res = r->res;
	double lease_s = (double)r->o->lease_ms / 1000.0, age;
	uint32_t n;
	size_t i;

	/* keys chain their prefix, and the bound never forgets: the blocks it
	 * holds are the leading ones */
	for (i = 0; i < ng && (n = lru_find(&r->bound, r->keys[i])) != NIL; i++) {
		res->bound_blk++;
		res->bound_tok += r->ktok[i];
		age = t - r->bound.node[n].t;
		if (age > lease_s)
			res->aged_blk++;
		if (bench_samples_add(&r->reuse_s, age))
			return rfail(r, -ENOMEM, "out of memory");
		r->bound.node[n].t = t;
	}
	for (; i < ng; i++) {
		if (lru_add(&r->bound, r->keys[i], r->ktok[i], &n))
			return rfail(r, -ENOMEM, "out of memory");
		lru_push_head(&r->bound, n);
		r->bound.node[n].t = t;
	}
	res->total_blk += ng;
	return 0;
}

/* One read op per found store block, each into its own part of the
 * buffer. */
static int load_ops(struct run *r, const struct served *sv)
{
	uint64_t bytes = 0;
	size_t k;

	for (k = 0; k < sv->found; k++)
		bytes += replay_block_bytes(r->o, r->stok[sv->c0 + k]);
	if (ensure_buf(r, bytes))
		return rfail(r, -ENOMEM, "out of memory");
	bytes = 0;
	for (k = 0; k < sv->found; k++) {
		size_t len = replay_block_bytes(r->o, r->stok[sv->c0 + k]);
		r->ops[k].key = r->skeys[sv->c0 + k];
		r->ops[k].buf = r->buf + bytes;
		r->ops[k].len = len;
		r->ops[k].result = 0;
		bytes += len;
	}
	return 0;
}

/* Checks the loaded blocks against what was stored: the first one not read
 * ends what the store served (the rest is recomputed); a block with other
 * bytes than were stored fails the run. */
static int load_check(struct run *r, uint32_t ci, struct served *sv)
{
	size_t k, c0 = sv->c0;

	sv->bytes = 0;
	for (k = 0; k < sv->found; k++) {
		size_t want = replay_block_bytes(r->o, r->stok[c0 + k]);
		long long bad;
		char ks[40];
		if (r->ops[k].result != 0)
			break; /* a miss from here: recompute the rest */
		snprintf(ks, sizeof(ks), "%016llx%016llx", (unsigned long long)r->ops[k].key.hi,
			 (unsigned long long)r->ops[k].key.lo);
		if (r->ops[k].len != want)
			return rfail(r, -EILSEQ,
				     "wrong bytes: call %u block %zu (key %s) loaded %zu bytes, stored %zu",
				     ci, c0 + k, ks, r->ops[k].len, want);
		bad = common_check(r->ops[k].buf, want, common_key_seed(r->ops[k].key));
		if (bad >= 0)
			return rfail(r, -EILSEQ,
				     "wrong bytes: call %u block %zu (key %s) differs from what was stored at byte %lld",
				     ci, c0 + k, ks, bad);
		sv->bytes += want;
	}
	sv->loaded = k;
	return 0;
}

/*
 * Accounts the nb blocks the store served beyond the GPU cache to its
 * tiers, split by the deltas of the store's hit counters (dr, dd, dp); with
 * no peer hits (always so for one node) the disk gets the rest, as before
 * peers were counted.
 */
static void load_split(struct run *r, const struct served *sv, uint64_t nb, double dr,
		       double dd, double dp)
{
	struct replay_result *res = r->res;
	uint64_t store_tok = sv->store_tok, bytes = sv->bytes;
	double sum = dr + dd + (dp > 0 ? dp : 0);
	double share = sum > 0 ? dr / sum : 1.0;
	double pshare = sum > 0 && dp > 0 ? dp / sum : 0.0;
	uint64_t tr = (uint64_t)llround((double)store_tok * share);
	uint64_t br = (uint64_t)llround((double)nb * share);
	uint64_t yr = (uint64_t)llround((double)bytes * share);
	uint64_t tp = (uint64_t)llround((double)store_tok * pshare);
	uint64_t bp = (uint64_t)llround((double)nb * pshare);
	uint64_t yp = (uint64_t)llround((double)bytes * pshare);

	if (tp > store_tok - tr)
		tp = store_tok - tr;
	if (bp > nb - br)
		bp = nb - br;
	if (yp > bytes - yr)
		yp = bytes - yr;
	account(r, T_RAM, tr, br);
	account(r, T_DISK, store_tok - tr - tp, nb - br - bp);
	account(r, T_PEER, tp, bp);
	res->bytes_loaded[T_RAM] += yr;
	res->bytes_loaded[T_DISK] += bytes - yr - yp;
	res->bytes_loaded[T_PEER] += yp;
}

/* Loads the found blocks (some not covered by the GPU cache), measures the
 * load, checks the bytes and accounts what the store served. */
static int store_load(struct run *r, uint32_t ci, kvt_store *st, struct served *sv)
{
	struct replay_result *res = r->res;
	double ram0 = 0, disk0 = 0, peer0 = 0, ram1 = 0, disk1 = 0, peer1 = 0;
	uint64_t t0, t1;
	size_t i, gend;
	int rc;

	rc = load_ops(r, sv);
	if (rc)
		return rc;
	if (store_hits(st, &ram0, &disk0, &peer0))
		return rfail(r, -EIO, "kvt_stats_json failed");
	t0 = bench_now_ns();
	(void)kvt_get_batch(st, r->ops, sv->found);
	t1 = bench_now_ns();
	if (store_hits(st, &ram1, &disk1, &peer1))
		return rfail(r, -EIO, "kvt_stats_json failed");
	sv->load_real = (double)(t1 - t0) / 1e9;
	rc = load_check(r, ci, sv);
	if (rc)
		return rc;
	if (sv->loaded < sv->found)
		res->lease_truncations++;
	if (r->o->release_leases)
		(void)kvt_release(st, r->skeys + sv->c0, sv->found);
	if (bench_samples_add(&r->load_us, sv->load_real * 1e6))
		return rfail(r, -ENOMEM, "out of memory");
	res->load_total_s += sv->load_real;
	if (disk1 - disk0 > 0) {
		res->load_disk_s += sv->load_real;
		res->load_disk_batches++;
	} else {
		res->load_ram_s += sv->load_real;
		res->load_ram_batches++;
	}
	/* tokens the store served beyond the GPU cache */
	gend = (sv->c0 + sv->loaded) * r->C;
	for (i = sv->h; i < gend && i < sv->ng; i++)
		sv->store_tok += r->ktok[i];
	if (gend > sv->h)
		load_split(r, sv, gend - sv->h, ram1 - ram0, disk1 - disk0, peer1 - peer0);
	return 0;
}

/* Looks the call's store blocks beyond the GPU cache up in the store (with
 * a lease) and loads what it holds; sets where the call's puts start. */
static int store_serve(struct run *r, uint32_t ci, struct served *sv)
{
	kvt_store *st = ep_store(r, r->ep_of[ci]);
	uint64_t t0;
	int rc;

	sv->c0 = sv->h / r->C;
	if (sv->c0 < sv->ns) {
		t0 = bench_now_ns();
		rc = kvt_lookup(st, r->skeys + sv->c0, sv->ns - sv->c0, KVT_LEASE, &sv->found);
		sv->lookup_real = (double)(bench_now_ns() - t0) / 1e9;
		r->res->lookups++;
		if (rc < 0)
			return rfail(r, rc, "kvt_lookup: %s", kvt_last_error());
	}
	/* load the found blocks that the GPU cache does not cover */
	if (sv->found && (sv->c0 + sv->found) * r->C > sv->h) {
		rc = store_load(r, ci, st, sv);
		if (rc)
			return rc;
	} else if (sv->found && r->o->release_leases) {
		(void)kvt_release(st, r->skeys + sv->c0, sv->found);
	}
	if (sv->found == 0 || (sv->c0 + sv->found) * r->C <= sv->h)
		sv->loaded = sv->found;
	r->put_from[ci] = (uint32_t)(sv->c0 + sv->loaded);
	return 0;
}

/* Lookup and load at the start of call ci's prefill on endpoint e. */
static int prefill_start(struct run *r, uint32_t ci, double t)
{
	const struct wl_call *c = &r->w->calls[ci];
	struct endpoint *e = &r->ep[r->ep_of[ci]];
	struct replay_result *res = r->res;
	struct served sv;
	uint64_t gpu_tok = 0, miss_tok;
	size_t covered;
	double charge;
	int rc;

	memset(&sv, 0, sizeof(sv));
	pace(r, t);
	e->busy = 1;
	sv.ng = call_keys(r, c, &sv.ns);
	sv.h = gpu_hits(r, e, sv.ng, &gpu_tok);
	rc = bound_account(r, sv.ng, t);
	if (!rc)
		rc = gpu_take(r, ci, e, sv.ng, sv.h, gpu_tok, t);
	if (rc)
		return rc;
	if (r->store_on) {
		rc = store_serve(r, ci, &sv);
		if (rc)
			return rc;
	}
	account(r, T_GPU, gpu_tok, sv.h);
	miss_tok = c->prompt_tokens - gpu_tok - sv.store_tok;
	covered = sv.h;
	if (r->store_on && (sv.c0 + sv.loaded) * r->C > sv.h)
		covered = (sv.c0 + sv.loaded) * r->C;
	if (covered > sv.ng)
		covered = sv.ng;
	account(r, T_MISS, miss_tok, sv.ng - covered);
	res->prompt_tokens += c->prompt_tokens;
	res->prompt_blocks += sv.ng;
	res->calls++;
	/* the measured lookup and load, on this call's critical path: its
	 * prefill computation starts when they end; the GPU meanwhile keeps
	 * decoding the batch. The divided charge shares the time among the
	 * calls outstanding on the endpoint, this one included. */
	charge = sv.lookup_real + sv.load_real * r->o->charge_scale;
	res->charged_load_s += charge;
	res->charged_div_s += charge / (e->outstanding ? e->outstanding : 1);
	res->fullsize_load_s += sv.load_real * r->o->scale;
	r->compute_s[ci] = (double)miss_tok / r->o->prefill_rate;
	return heap_push(&r->h, t + charge, EV_COMPUTE, ci) ? rfail(r, -ENOMEM, "out of memory")
							    : 0;
}

/* --- the decode batch ------------------------------------------------------------------ */

/* Seconds per output token of each call in a batch of b calls (decode
 * replicas of their own: as if alone). */
static double tpot(const struct run *r, size_t b)
{
	if (r->o->disaggregated)
		b = 1;
	return (1.0 + r->o->decode_growth * (double)(b ? b - 1 : 0)) / r->o->decode_rate;
}

/* Moves endpoint e's decodes on to t (no progress while it prefills). */
static void dec_advance(struct run *r, struct endpoint *e, double t)
{
	double tok;
	size_t i;

	if (t > e->dec_t && e->ndec > 0 && !e->computing) {
		tok = (t - e->dec_t) / tpot(r, e->ndec);
		for (i = 0; i < e->ndec; i++)
			e->dleft[i] -= tok;
		r->decode_s += t - e->dec_t;
	}
	e->dec_t = t;
}

/* Schedules endpoint ei's next decode end from t (none while it
 * prefills); any event scheduled before becomes stale. */
static int dec_schedule(struct run *r, uint32_t ei, double t)
{
	struct endpoint *e = &r->ep[ei];
	double m;
	size_t i;

	e->dec_gen++;
	if (e->computing || e->ndec == 0)
		return 0;
	m = e->dleft[0];
	for (i = 1; i < e->ndec; i++)
		if (e->dleft[i] < m)
			m = e->dleft[i];
	if (m < 0)
		m = 0;
	return heap_push_gen(&r->h, t + m * tpot(r, e->ndec), EV_DECODE, ei, e->dec_gen)
		       ? rfail(r, -ENOMEM, "out of memory")
		       : 0;
}

static int dec_add(struct run *r, struct endpoint *e, uint32_t ci)
{
	if (e->ndec == e->capdec) {
		size_t nc = e->capdec ? e->capdec * 2 : 16;
		uint32_t *nd = realloc(e->dec, nc * sizeof(*nd));
		double *nl;
		if (!nd)
			return rfail(r, -ENOMEM, "out of memory");
		e->dec = nd;
		nl = realloc(e->dleft, nc * sizeof(*nl));
		if (!nl)
			return rfail(r, -ENOMEM, "out of memory");
		e->dleft = nl;
		e->capdec = nc;
	}
	e->dec[e->ndec] = ci;
	e->dleft[e->ndec] = (double)r->w->calls[ci].output_tokens;
	e->ndec++;
	return 0;
}

static int done(struct run *r, uint32_t ci, double t);

/* EV_DECODE: ends the decodes of endpoint ei that have no token left. */
static int decode_event(struct run *r, uint32_t ei, uint64_t gen, double t)
{
	struct endpoint *e = &r->ep[ei];
	size_t i = 0;
	uint32_t ci;
	int rc;

	if (gen != e->dec_gen)
		return 0;
	dec_advance(r, e, t);
	while (i < e->ndec) {
		if (e->dleft[i] > 1e-6) {
			i++;
			continue;
		}
		ci = e->dec[i];
		e->ndec--;
		e->dec[i] = e->dec[e->ndec];
		e->dleft[i] = e->dleft[e->ndec];
		rc = done(r, ci, t);
		if (rc)
			return rc;
	}
	return dec_schedule(r, ei, t);
}

/* EV_COMPUTE: call ci's loads have ended; the GPU prefills its missed
 * tokens at the prefill rate, and the batch waits. */
static int compute_start(struct run *r, uint32_t ci, double t)
{
	uint32_t ei = r->ep_of[ci];
	struct endpoint *e = &r->ep[ei];
	int rc;

	dec_advance(r, e, t);
	e->computing = !r->o->disaggregated;
	rc = dec_schedule(r, ei, t);
	if (rc)
		return rc;
	r->prefill_s += r->compute_s[ci];
	return heap_push(&r->h, t + r->compute_s[ci], EV_PREFILL_END, ci)
		       ? rfail(r, -ENOMEM, "out of memory")
		       : 0;
}

/*
 * gpu_hold: whether call ci fits endpoint e's pool beside the running
 * calls: its prompt and (unless decode runs apart) its answer, less its
 * leading blocks that running calls already hold, within the room they
 * leave (kept prefixes are room: they are evicted for it). A pool with no
 * call running takes any call.
 */
static int pool_fits(struct run *r, struct endpoint *e, uint32_t ci)
{
	const struct wl_call *c = &r->w->calls[ci];
	uint64_t need = c->prompt_tokens + (r->o->disaggregated ? 0 : c->output_tokens);
	size_t ng, ns, i;
	uint32_t n;

	if (!r->gpu_on || !r->o->gpu_hold || e->running == 0 ||
	    e->gpu.pinned + e->gpu.held + need <= e->gpu.cap)
		return 1;
	ng = call_keys(r, c, &ns);
	for (i = 0; i < ng && (n = lru_find(&e->gpu, r->keys[i])) != NIL; i++)
		if (e->gpu.node[n].pins)
			need -= r->ktok[i];
	return e->gpu.pinned + e->gpu.held + need <= e->gpu.cap;
}

/* Starts the prefill of the call at the head of e's queue, unless the GPU
 * is prefilling or loading for another or (gpu_hold) the pool has no room
 * for it: then it waits, first come first served, for running calls to
 * end, as a serving engine admits a request only once its KV blocks can be
 * allocated. */
static int start_next(struct run *r, struct endpoint *e, double t)
{
	uint32_t ci;

	if (e->busy || e->qn == 0)
		return 0;
	ci = e->q[e->qh];
	if (!pool_fits(r, e, ci)) {
		if (!e->waiting) {
			pool_acct(r, e, t);
			e->waiting = 1;
			r->pool_waits++;
		}
		return 0;
	}
	if (e->waiting) {
		pool_acct(r, e, t);
		e->waiting = 0;
	}
	e->qh = (e->qh + 1) % e->qcap;
	e->qn--;
	return prefill_start(r, ci, t);
}

/* Stores the new blocks and fills the GPU cache when call ci's prefill ends. */
static int prefill_end(struct run *r, uint32_t ci, double t)
{
	const struct wl_call *c = &r->w->calls[ci];
	struct endpoint *e = &r->ep[r->ep_of[ci]];
	struct replay_result *res = r->res;
	size_t ng, ns, i, k, n, from;
	uint64_t bytes = 0;
	kvt_store *st = r->store_on ? ep_store(r, r->ep_of[ci]) : NULL;

	pace(r, t);
	ng = call_keys(r, c, &ns);
	if (r->pins[ci]) {
		if (gpu_fill(r, ci, e, ng, t))
			return -ENOMEM;
		if (r->o->disaggregated) /* its KV leaves for a decode replica */
			gpu_release(r, ci, e, t);
	} else if (r->gpu_on) {
		for (i = ng; i-- > 0;) /* tail first: the prefix stays most recent */
			if (lru_insert(&e->gpu, r->keys[i], r->ktok[i]))
				return rfail(r, -ENOMEM, "out of memory");
	}
	if (r->store_on && r->put_from[ci] < ns) {
		from = r->put_from[ci];
		n = ns - from;
		for (k = 0; k < n; k++)
			bytes += replay_block_bytes(r->o, r->stok[from + k]);
		if (ensure_buf(r, bytes))
			return rfail(r, -ENOMEM, "out of memory");
		bytes = 0;
		for (k = 0; k < n; k++) {
			size_t len = replay_block_bytes(r->o, r->stok[from + k]);
			r->ops[k].key = r->skeys[from + k];
			r->ops[k].buf = r->buf + bytes;
			r->ops[k].len = len;
			r->ops[k].result = 0;
			common_fill(r->ops[k].buf, len, common_key_seed(r->ops[k].key));
			bytes += len;
		}
		(void)kvt_put_batch(st, r->ops, n);
		for (k = 0; k < n; k++) {
			res->puts_offered++;
			if (r->ops[k].result == -ENOSPC)
				res->puts_refused++;
			else if (r->ops[k].result < 0)
				res->put_errors++;
			else
				res->put_bytes += r->ops[k].len;
		}
	}
	if (r->store_on && r->o->policy == POL_REFUSE && ns > 0) {
		/* Mooncake's connector asks the store which blocks of the whole
		 * prompt exist, and every query grants a lease: do the same */
		size_t f = 0;
		(void)kvt_lookup(st, r->skeys, ns, KVT_LEASE, &f);
	}
	r->ttft[r->nttft++] = t - r->arrive[ci];
	e->busy = 0;
	e->score -= c->prompt_tokens;
	/* the GPU is free: the batch resumes with this call in it */
	dec_advance(r, e, t);
	e->computing = 0;
	if (dec_add(r, e, ci) || dec_schedule(r, r->ep_of[ci], t))
		return -ENOMEM;
	return start_next(r, e, t);
}

static uint32_t least_loaded(struct run *r)
{
	uint32_t i, best = 0;

	for (i = 1; i < r->o->endpoints; i++)
		if (r->ep[i].score < r->ep[best].score)
			best = i;
	return best;
}

static uint32_t route(struct run *r, uint32_t ci)
{
	const struct wl_call *c = &r->w->calls[ci];
	uint32_t best = least_loaded(r), p, i, hb = 0;
	size_t ng, ns, h, hmax = 0;

	if (r->o->endpoints == 1)
		return 0;
	if (c->role) /* the fleet's roles: each on a server of its own */
		return (c->role - 1) % r->o->endpoints;
	if (c->session != WL_NO_SESSION) {
		if (r->pref[c->session] < 0) {
			r->pref[c->session] = (int32_t)best;
			return best;
		}
		p = (uint32_t)r->pref[c->session];
		if (r->ep[p].score <= r->ep[best].score + r->o->sticky_slack) {
			r->res->sticky_stay++;
			return p;
		}
		r->res->sticky_spill++;
		return best;
	}
	/* no session: the endpoint whose GPU cache holds the longest prefix */
	if (!r->gpu_on)
		return best;
	ng = call_keys(r, c, &ns);
	for (i = 0; i < r->o->endpoints; i++) {
		for (h = 0; h < ng && lru_find(&r->ep[i].gpu, r->keys[h]) != NIL; h++)
			;
		if (h > hmax || (h == hmax && r->ep[i].score < r->ep[hb].score)) {
			hmax = h;
			hb = i;
		}
	}
	if (hmax == 0)
		return best;
	if (r->ep[hb].score <= r->ep[best].score + r->o->sticky_slack) {
		r->res->sticky_stay++;
		return hb;
	}
	r->res->sticky_spill++;
	return best;
}

/* SCHED_ACTIVE: call ci of session s arrives at t. */
static int issue(struct run *r, uint32_t s, uint32_t ci, double t)
{
	r->issued[s]++;
	return heap_push(&r->h, t, EV_ARRIVE, ci) ? rfail(r, -ENOMEM, "out of memory") : 0;
}

static int arrive(struct run *r, uint32_t ci, double t)
{
	const struct wl_call *c = &r->w->calls[ci];
	uint32_t e = route(r, ci);
	struct endpoint *ep = &r->ep[e];
	int rc;

	/* a step that runs beside this one arrives with it */
	if (r->o->sched == SCHED_ACTIVE && c->session != WL_NO_SESSION &&
	    r->issued[c->session] < r->w->sessions[c->session].ncalls &&
	    r->w->sessions[c->session].first_call + r->issued[c->session] == ci + 1u &&
	    c[1].beside) {
		rc = issue(r, c->session, ci + 1, t);
		if (rc)
			return rc;
	}

	r->ep_of[ci] = e;
	r->arrive[ci] = t;
	if (r->first_t < 0)
		r->first_t = t;
	ep->outstanding++;
	ep->score += r->w->calls[ci].prompt_tokens;
	if (ep->qn == ep->qcap) {
		size_t nc = ep->qcap ? ep->qcap * 2 : 64, i;
		uint32_t *nq = malloc(nc * sizeof(*nq));
		if (!nq)
			return rfail(r, -ENOMEM, "out of memory");
		for (i = 0; i < ep->qn; i++)
			nq[i] = ep->q[(ep->qh + i) % (ep->qcap ? ep->qcap : 1)];
		free(ep->q);
		ep->q = nq;
		ep->qcap = nc;
		ep->qh = 0;
	}
	ep->q[(ep->qh + ep->qn) % ep->qcap] = ci;
	ep->qn++;
	return start_next(r, ep, t);
}

/* SCHED_DISTANCE: starts waiting sessions while slots are free. */
static int dispatch(struct run *r, double t)
{
	const struct wl *w = r->w;
	uint32_t s;
	uint64_t stamp;

	while (r->inflight < r->o->max_inflight && r->wqn > 0) {
		s = r->wq[r->wqh];
		stamp = r->wstamp[r->wqh];
		if (stamp != UINT64_MAX && r->completions - stamp < r->o->reuse_distance) {
			if (r->inflight > 0)
				break;
			r->res->relaxed++; /* nothing in flight: never idle artificially */
		}
		r->wqh = (r->wqh + 1) % (w->nsessions + 1);
		r->wqn--;
		r->inflight++;
		if (heap_push(&r->h, t, EV_ARRIVE,
			      (uint32_t)(w->sessions[s].first_call + r->next_turn[s])))
			return rfail(r, -ENOMEM, "out of memory");
	}
	return 0;
}

static int wq_push(struct run *r, uint32_t s, uint64_t stamp)
{
	size_t cap = r->w->nsessions + 1, i = (r->wqh + r->wqn) % cap;

	r->wq[i] = s;
	r->wstamp[i] = stamp;
	r->wqn++;
	return 0;
}

static int done(struct run *r, uint32_t ci, double t)
{
	const struct wl *w = r->w;
	const struct wl_call *c = &w->calls[ci];
	struct endpoint *ep = &r->ep[r->ep_of[ci]];
	uint32_t s = c->session;
	double at;
	int rc;

	ep->outstanding--;
	gpu_release(r, ci, ep, t);
	rc = start_next(r, ep, t); /* a call that waited for room */
	if (rc)
		return rc;
	r->done_t[ci] = t;
	r->completions++;
	r->last_t = t;
	if (s == WL_NO_SESSION || r->o->sched == SCHED_ARRIVAL)
		return 0;
	r->next_turn[s]++;
	if (r->o->sched == SCHED_DISTANCE) {
		r->inflight--;
		if (r->next_turn[s] < w->sessions[s].ncalls)
			wq_push(r, s, r->completions);
		return dispatch(r, t);
	}
	/* SCHED_ACTIVE: the next call once every call issued is done, its
	 * think time after the start of the last one issued */
	if (r->next_turn[s] < r->issued[s])
		return 0;
	if (r->issued[s] < w->sessions[s].ncalls) {
		uint32_t nc = (uint32_t)w->sessions[s].first_call + r->issued[s];
		at = r->arrive[nc - 1] + w->calls[nc].think_s;
		return issue(r, s, nc, at < t ? t : at);
	}
	while (r->next_session < w->nsessions) {
		s = (uint32_t)r->next_session++;
		if (w->sessions[s].ncalls)
			return issue(r, s, (uint32_t)w->sessions[s].first_call, t);
	}
	return 0;
}

static int schedule_start(struct run *r)
{
	const struct wl *w = r->w;
	size_t i, k;
	uint32_t n;

	switch (r->o->sched) {
	case SCHED_ARRIVAL:
		for (i = 0; i < w->ncalls; i++)
			if (heap_push(&r->h, w->calls[i].arrival_s, EV_ARRIVE, (uint32_t)i))
				return -ENOMEM;
		return 0;
	case SCHED_DISTANCE:
		for (i = 0; i < w->nsessions; i++)
			if (w->sessions[i].ncalls)
				wq_push(r, (uint32_t)i, UINT64_MAX);
		return dispatch(r, 0);
	case SCHED_ACTIVE:
	default:
		n = r->o->active ? r->o->active : 1;
		for (i = 0, k = 0; i < w->nsessions && k < n; i++) {
			if (!w->sessions[i].ncalls)
				continue;
			if (issue(r, (uint32_t)i, (uint32_t)w->sessions[i].first_call,
				  r->o->stagger_s * (double)k / n))
				return -ENOMEM;
			k++;
		}
		r->next_session = i;
		return 0;
	}
}

/*
 * Builds the store's JSON config for o (scaled capacities and lease); with
 * nodes > 1, node `node` of a peer group whose member i ("n<i>") listens on
 * 127.0.0.1:ports[i].
 */
static char *store_config(const struct replay_opts *o, const char *disk_path, uint32_t node,
			  uint32_t nodes, const int *ports)
{
	json_t *root = json_object(), *ram = json_object(), *disk;
	double lease = (double)o->lease_ms;
	char *text;

	if (o->speed > 0)
		lease /= o->speed;
	if (lease < 1)
		lease = 1;
	json_object_set_new(ram, "capacity",
			    json_integer((json_int_t)replay_block_bytes(o, o->ram_tokens)));
	json_object_set_new(ram, "lease_ms", json_integer((json_int_t)llround(lease)));
	if (o->policy == POL_REFUSE) {
		/* Mooncake Store: no cap on leased bytes, and a RAM tier that
		 * holds only live leases refuses the put */
		json_object_set_new(ram, "refuse_when_leased", json_true());
		json_object_set_new(ram, "lease_cap", json_real(1.0));
	}
	json_object_set_new(root, "ram", ram);
	json_object_set_new(root, "threads", json_integer(o->threads));
	if (disk_path && o->policy != POL_RAM_ONLY) {
		disk = json_object();
		json_object_set_new(disk, "path", json_string(disk_path));
		json_object_set_new(disk, "capacity",
				    json_integer((json_int_t)replay_block_bytes(o, o->disk_tokens)));
		json_object_set_new(root, "disk", disk);
	}
	if (nodes > 1) {
		json_t *peers = json_object(), *members = json_array();
		char name[16], addr[32];
		uint32_t i;

		for (i = 0; i < nodes; i++) {
			json_t *m = json_object();
			snprintf(name, sizeof(name), "n%u", i);
			snprintf(addr, sizeof(addr), "127.0.0.1:%d", ports[i]);
			json_object_set_new(m, "name", json_string(name));
			json_object_set_new(m, "addr", json_string(addr));
			json_array_append_new(members, m);
		}
		snprintf(name, sizeof(name), "n%u", node);
		json_object_set_new(peers, "self", json_string(name));
		json_object_set_new(peers, "members", members);
		json_object_set_new(peers, "request_timeout_ms", json_integer(5000));
		json_object_set_new(root, "peers", peers);
	}
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return text;
}

void replay_result_free(struct replay_result *r)
{
	if (r && r->store_stats) {
		json_decref(r->store_stats);
		r->store_stats = NULL;
	}
}

static void run_free(struct run *r)
{
	uint32_t i;

	if (r->ep) {
		for (i = 0; i < r->o->endpoints; i++) {
			lru_free(&r->ep[i].gpu);
			free(r->ep[i].q);
			free(r->ep[i].dec);
			free(r->ep[i].dleft);
		}
		free(r->ep);
	}
	free(r->arrive);
	free(r->done_t);
	free(r->compute_s);
	free(r->ttft);
	free(r->ep_of);
	free(r->put_from);
	if (r->pins)
		for (i = 0; i < r->w->ncalls; i++)
			free(r->pins[i]);
	free(r->pins);
	free(r->npins);
	free(r->held);
	free(r->pref);
	free(r->next_turn);
	free(r->issued);
	free(r->tokens);
	free(r->keys);
	free(r->skeys);
	free(r->ktok);
	free(r->stok);
	free(r->trip);
	free(r->ops);
	free(r->buf);
	free(r->wq);
	free(r->wstamp);
	free(r->h.v);
	bench_samples_free(&r->load_us);
	bench_samples_free(&r->reuse_s);
	lru_free(&r->bound);
}

static int interval_cmp(const void *a, const void *b)
{
	const struct replay_interval *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

double replay_busy_union(struct replay_interval *v, size_t n)
{
	double total = 0, s, e;
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), interval_cmp);
	s = v[0].start;
	e = v[0].end;
	for (i = 1; i < n; i++) {
		if (v[i].start > e) {
			total += e - s;
			s = v[i].start;
			e = v[i].end;
		} else if (v[i].end > e) {
			e = v[i].end;
		}
	}
	return total + (e - s);
}

void replay_savings(struct replay_result *res, double prefill_rate)
{
	double store = (double)(res->tok[T_RAM] + res->tok[T_DISK] + res->tok[T_PEER]);
	double avoided = store / prefill_rate;

	res->saved_store = res->saved_store_net = res->saved_store_net_div = 0;
	res->saved_store_union = 0;
	res->saved_disk = res->saved_gpu = 0;
	res->disk_of_saving = store > 0 ? (double)res->tok[T_DISK] / store : 0;
	if (!(res->busy_s > 0))
		return;
	res->saved_store = avoided / res->busy_s;
	res->saved_store_net = (avoided - res->charged_load_s) / res->busy_s;
	res->saved_store_net_div = (avoided - res->charged_div_s) / res->busy_s;
	res->saved_disk = (double)res->tok[T_DISK] / prefill_rate / res->busy_s;
	res->saved_gpu = (double)res->tok[T_GPU] / prefill_rate / res->busy_s;
	res->saved_store_union = res->busy_union_s > 0 ? avoided / res->busy_union_s : 0;
}

/* Where call i's interval ends: its decode's end, or, in a run stopped
 * before the call was done, the simulated time reached. */
static double call_end(const struct run *r, size_t i)
{
	return r->done_t[i] >= 0 ? r->done_t[i] : r->res->sim_s;
}

/* Busy time: per endpoint, the union of its calls' intervals from arrival
 * to the end of their decode; summed over endpoints. Also the union over
 * all endpoints and the mean number of calls outstanding while busy. Calls
 * that never arrived (a stopped run) count nothing. */
static int busy_time(struct run *r)
{
	const size_t n = r->w->ncalls;
	struct replay_interval *v = malloc((n ? n : 1) * sizeof(*v));
	double inside = 0;
	size_t i, k;
	uint32_t e;

	if (!v)
		return rfail(r, -ENOMEM, "out of memory");
	r->res->busy_s = 0;
	for (e = 0; e < r->o->endpoints; e++) {
		for (i = 0, k = 0; i < n; i++)
			if (r->arrive[i] >= 0 && r->ep_of[i] == e) {
				v[k].start = r->arrive[i];
				v[k].end = call_end(r, i);
				inside += v[k].end - v[k].start;
				k++;
			}
		r->res->busy_s += replay_busy_union(v, k);
	}
	for (i = 0, k = 0; i < n; i++)
		if (r->arrive[i] >= 0) {
			v[k].start = r->arrive[i];
			v[k].end = call_end(r, i);
			k++;
		}
	r->res->busy_union_s = replay_busy_union(v, k);
	free(v);
	r->res->mean_outstanding = r->res->busy_s > 0 ? inside / r->res->busy_s : 0;
	return 0;
}

/* Checks the options against the workload before anything is allocated. */
static int run_check(struct run *r)
{
	const struct replay_opts *o = r->o;
	const struct wl *w = r->w;
	uint32_t nodes = o->nodes ? o->nodes : 1;
	size_t n = w->ncalls;

	if (o->endpoints == 0 || o->gpu_block == 0 || o->chunk_tokens < o->gpu_block ||
	    o->chunk_tokens % o->gpu_block || !(o->prefill_rate > 0) || !(o->decode_rate > 0) ||
	    !(o->decode_growth >= 0) ||
	    o->scale == 0 || o->kv_bytes_per_token == 0 || !(o->charge_scale >= 0))
		return rfail(r, -EINVAL, "bad engine options (endpoints, blocks, rates or scale)");
	if (nodes > REPLAY_NODES_MAX)
		return rfail(r, -EINVAL, "bad nodes %u (1 to %u)", nodes, REPLAY_NODES_MAX);
	if (n == 0)
		return rfail(r, -EINVAL, "the workload has no calls");
	if (n > UINT32_MAX - 1)
		return rfail(r, -E2BIG, "too many calls");
	if (o->sched == SCHED_ARRIVAL && !w->timed)
		return rfail(r, -EINVAL, "arrival scheduling needs a trace with timestamps");
	if (o->sched != SCHED_ARRIVAL && w->nsessions == 0)
		return rfail(r, -EINVAL, "this workload has no sessions: schedule it by arrival time");
	return 0;
}

/* The per-call, per-session and scratch arrays (scratch sized for the
 * longest call) and the caches: the endpoints' and the unbounded one. */
static int run_alloc(struct run *r)
{
	const struct replay_opts *o = r->o;
	const struct wl *w = r->w;
	size_t i, maxp = 0, maxn = 0, n = w->ncalls;

	for (i = 0; i < n; i++) {
		if (w->calls[i].prompt_tokens > maxp)
			maxp = w->calls[i].prompt_tokens;
		if (w->calls[i].n > maxn)
			maxn = w->calls[i].n;
	}
	r->maxg = w->kind == WL_BLOCKS ? maxn : maxp / o->gpu_block + 1;
	r->arrive = calloc(n, sizeof(*r->arrive));
	r->done_t = calloc(n, sizeof(*r->done_t));
	r->compute_s = calloc(n, sizeof(*r->compute_s));
	r->ttft = calloc(n, sizeof(*r->ttft));
	r->ep_of = calloc(n, sizeof(*r->ep_of));
	r->put_from = calloc(n, sizeof(*r->put_from));
	r->pins = calloc(n, sizeof(*r->pins));
	r->npins = calloc(n, sizeof(*r->npins));
	r->held = calloc(n, sizeof(*r->held));
	r->pref = malloc((w->nsessions + 1) * sizeof(*r->pref));
	r->next_turn = calloc(w->nsessions + 1, sizeof(*r->next_turn));
	r->issued = calloc(w->nsessions + 1, sizeof(*r->issued));
	r->wq = calloc(w->nsessions + 1, sizeof(*r->wq));
	r->wstamp = calloc(w->nsessions + 1, sizeof(*r->wstamp));
	r->tokens = malloc((maxp + 1) * sizeof(*r->tokens));
	r->keys = malloc((r->maxg + 1) * sizeof(*r->keys));
	r->skeys = malloc((r->maxg + 1) * sizeof(*r->skeys));
	r->ktok = malloc((r->maxg + 1) * sizeof(*r->ktok));
	r->stok = malloc((r->maxg + 1) * sizeof(*r->stok));
	r->trip = malloc((3 * maxn + 3) * sizeof(*r->trip));
	r->ops = malloc((r->maxg + 1) * sizeof(*r->ops));
	r->ep = calloc(o->endpoints, sizeof(*r->ep));
	if (!r->arrive || !r->done_t || !r->compute_s || !r->ttft || !r->ep_of || !r->put_from ||
	    !r->pins || !r->npins || !r->held || !r->pref || !r->next_turn || !r->issued || !r->wq || !r->wstamp || !r->tokens ||
	    !r->keys || !r->skeys || !r->ktok || !r->stok || !r->trip || !r->ops || !r->ep ||
	    lru_init(&r->bound, UINT64_MAX))
		return rfail(r, -ENOMEM, "out of memory");
	for (i = 0; i <= w->nsessions; i++)
		r->pref[i] = -1;
	for (i = 0; i < n; i++)
		r->arrive[i] = r->done_t[i] = -1; /* not arrived, not done */
	for (i = 0; i < o->endpoints; i++)
		if (lru_init(&r->ep[i].gpu, o->gpu_tokens))
			return rfail(r, -ENOMEM, "out of memory");
	return 0;
}

/* The namespace every key of the run is chained from. */
static void run_root(struct run *r)
{
	const struct wl *w = r->w;
	kvt_namespace ns;

	memset(&ns, 0, sizeof(ns));
	ns.model = r->o->model;
	ns.tokenizer = w->kind == WL_BLOCKS ? "mooncake-trace-hash-ids" : "kvbench-synthetic";
	ns.kv_format = "bf16/NHD";
	ns.tp_size = 1;
	ns.pp_size = 1;
	ns.block_tokens = w->kind == WL_BLOCKS ? w->block_tokens : r->o->gpu_block;
	r->root = kvt_ns_root(&ns);
}

/* Where the nodes' disk files are: in tmp, a temporary directory, when the
 * options name none; removed when the run ends. */
struct run_files {
	char tmp[256];
	char path[REPLAY_NODES_MAX][320];
};

/* One attempt to open the nodes, each with its config (listening on the
 * ports held, when more than one); the ports are released once the nodes
 * listen. On a failure the nodes opened are closed again. */
static int nodes_open(struct run *r, const struct run_files *f, int with_disk,
		      struct common_ports *held)
{
	uint32_t nodes = r->o->nodes ? r->o->nodes : 1, j;
	char *cfg = NULL;
	int rc = 0;

	for (j = 0; j < nodes; j++) {
		free(cfg);
		cfg = store_config(r->o, with_disk ? f->path[j] : NULL, j, nodes, held->port);
		if (!cfg)
			return rfail(r, -ENOMEM, "out of memory");
		rc = kvt_open(cfg, &r->st[j]);
		if (rc < 0)
			break;
		r->nst = j + 1;
	}
	common_ports_release(held); /* the nodes listen now */
	if (rc < 0) {
		rc = rfail(r, rc, "kvt_open(%s): %s", cfg, kvt_last_error());
		while (r->nst > 0) {
			kvt_close(r->st[--r->nst]);
			r->st[r->nst] = NULL;
		}
	}
	free(cfg);
	return rc < 0 ? rc : 0;
}

/* Opens the store's nodes, each with its own disk file when the policy
 * has a disk tier. */
static int stores_open(struct run *r, struct run_files *f)
{
	const struct replay_opts *o = r->o;
	uint32_t nodes = o->nodes ? o->nodes : 1, j;
	int with_disk = o->policy != POL_RAM_ONLY && o->disk_tokens > 0, attempt, rc = 0;
	struct common_ports held = { 0 };

	if (with_disk && !o->disk_dir && bench_tmpdir_create(f->tmp, sizeof(f->tmp)) < 0)
		return rfail(r, -EIO, "cannot create a temporary directory");
	/* each node its own disk file; node 0's is named as without nodes */
	for (j = 0; with_disk && j < nodes; j++) {
		const char *dir = o->disk_dir ? o->disk_dir : f->tmp;
		const char *base = o->disk_dir ? "kvbench-replay" : "replay";
		if (j == 0)
			snprintf(f->path[j], sizeof(f->path[j]), "%s/%s.disk", dir, base);
		else
			snprintf(f->path[j], sizeof(f->path[j]), "%s/%s-n%u.disk", dir, base, j);
	}
	/* a port found free may be taken before the node listens on it: then
	 * try again with new ports */
	for (attempt = 0; attempt < 3; attempt++) {
		if (nodes > 1 && (rc = common_ports_reserve(&held, nodes)) < 0)
			return rfail(r, rc, "cannot find free ports on 127.0.0.1: %s",
				     strerror(-rc));
		rc = nodes_open(r, f, with_disk, &held);
		common_ports_release(&held);
		if (rc != -EADDRINUSE)
			break;
	}
	return rc;
}

/* Runs the events in time order until none is left or a stop is asked. */
static int run_events(struct run *r)
{
	struct ev e;
	int rc;

	while (r->h.n > 0) {
		if (r->o->stop && r->o->stop()) {
			r->res->interrupted = 1;
			break;
		}
		e = heap_pop(&r->h);
		switch (e.type) {
		case EV_ARRIVE:
			rc = arrive(r, e.call, e.t);
			break;
		case EV_COMPUTE:
			rc = compute_start(r, e.call, e.t);
			break;
		case EV_PREFILL_END:
			rc = prefill_end(r, e.call, e.t);
			break;
		default:
			rc = decode_event(r, e.call, e.gen, e.t);
			break;
		}
		if (rc)
			return rc;
		r->res->sim_s = e.t;
		progress(r, e.t, 0);
	}
	return 0;
}

/* The pools' means over the makespan and the endpoints (pool_acct). */
static void pool_figures(struct run *r)
{
	struct replay_result *res = r->res;
	double span = res->makespan_s * r->o->endpoints;

	res->ep_running = r->pool.running / span;
	res->ep_context = r->pool.running > 0 ? r->pool.ctx / r->pool.running : 0;
	res->ep_running_kv = r->pool.run_kv / span;
	res->ep_prefix_kv = r->pool.prefix / span;
	res->pool_wait = r->pool.wait / span;
	res->ep_intake = (double)(res->prompt_tokens - res->tok[T_GPU]) / span;
	res->pool_waits_900s = (double)r->pool_waits * 900.0 / span;
}

/* The model's figures, all on the simulated clock, and the percentiles of
 * the measured loads. */
static int run_figures(struct run *r)
{
	const struct replay_opts *o = r->o;
	struct replay_result *res = r->res;
	size_t n = r->w->ncalls;
	int rc;

	rc = busy_time(r);
	if (rc)
		return rc;
	res->prefill_s = r->prefill_s;
	res->decode_s = r->decode_s;
	res->makespan_s = r->last_t - (r->first_t > 0 ? r->first_t : 0);
	res->throughput = res->makespan_s > 0 ? (double)n / res->makespan_s : 0;
	if (res->makespan_s > 0) {
		res->mean_running = res->mean_outstanding * res->busy_s / res->makespan_s;
		res->store_gib_900s = (double)(res->tok[T_RAM] + res->tok[T_DISK] + res->tok[T_PEER]) *
				      (double)o->kv_bytes_per_token / 1073741824.0 * 900.0 /
				      res->makespan_s;
		pool_figures(r);
	}
	replay_savings(res, o->prefill_rate);
	bench_sort(r->ttft, r->nttft);
	res->ttft_p50 = bench_percentile_sorted(r->ttft, r->nttft, 50);
	res->ttft_p90 = bench_percentile_sorted(r->ttft, r->nttft, 90);
	res->ttft_p99 = bench_percentile_sorted(r->ttft, r->nttft, 99);
	if (r->reuse_s.n) {
		bench_sort(r->reuse_s.v, r->reuse_s.n);
		res->reuse_p99_s = bench_percentile_sorted(r->reuse_s.v, r->reuse_s.n, 99);
		res->reuse_max_s = r->reuse_s.v[r->reuse_s.n - 1];
	}
	if (r->load_us.n) {
		bench_sort(r->load_us.v, r->load_us.n);
		res->load_p50_us = bench_percentile_sorted(r->load_us.v, r->load_us.n, 50);
		res->load_p90_us = bench_percentile_sorted(r->load_us.v, r->load_us.n, 90);
		res->load_p99_us = bench_percentile_sorted(r->load_us.v, r->load_us.n, 99);
		res->load_max_us = r->load_us.v[r->load_us.n - 1];
	}
	res->lag_mean_s = r->lag_n ? r->lag_sum / (double)r->lag_n : 0;
	return 0;
}

/* The store's stats and counters: one node's document, or every node's
 * (node 0 first) with the counters summed. */
static void run_store_stats(struct run *r)
{
	struct replay_result *res = r->res;
	uint32_t j;

	if (r->nst == 1) {
		json_t *s = bench_store_stats(r->st[0]);
		res->store_stats = s;
		res->evictions = (uint64_t)stat_num(s, "ram.evictions");
		res->evicted_bytes = (uint64_t)stat_num(s, "ram.evicted_bytes");
		res->lease_expiries = (uint64_t)stat_num(s, "ram.lease_expiries");
		res->write_arounds = (uint64_t)stat_num(s, "store.write_arounds");
		res->disk_evictions = (uint64_t)stat_num(s, "disk.evictions");
	} else if (r->nst > 1) {
		json_t *a = json_array();
		for (j = 0; j < r->nst; j++) {
			json_t *s = bench_store_stats(r->st[j]);
			res->evictions += (uint64_t)stat_num(s, "ram.evictions");
			res->evicted_bytes += (uint64_t)stat_num(s, "ram.evicted_bytes");
			res->lease_expiries += (uint64_t)stat_num(s, "ram.lease_expiries");
			res->write_arounds += (uint64_t)stat_num(s, "store.write_arounds");
			res->disk_evictions += (uint64_t)stat_num(s, "disk.evictions");
			json_array_append_new(a, s ? s : json_null());
		}
		res->store_stats = a;
	}
}

/* Closes the nodes and gives their disk space back at once (a sweep runs
 * many stores), then frees the run. */
static void run_close(struct run *r, const struct run_files *f)
{
	uint32_t j;

	progress(r, 0, 1);
	while (r->nst > 0) {
		kvt_close(r->st[--r->nst]);
		r->st[r->nst] = NULL;
	}
	if (f->tmp[0])
		(void)bench_tmpdir_remove(f->tmp);
	else
		for (j = 0; j < REPLAY_NODES_MAX; j++)
			if (f->path[j][0])
				(void)unlink(f->path[j]);
	run_free(r);
}

int replay_run(const struct replay_opts *o, const struct wl *w,
	       struct replay_result *res, char *err, size_t errlen)
{
	struct run r;
	struct run_files f;
	uint64_t wall0;
	int rc;

	memset(res, 0, sizeof(*res));
	memset(&r, 0, sizeof(r));
	memset(&f, 0, sizeof(f));
	r.o = o;
	r.w = w;
	r.res = res;
	r.err = err;
	r.errlen = errlen;
	r.first_t = -1;
	res->policy = o->policy;
	snprintf(res->label, sizeof(res->label), "%s", o->label ? o->label : replay_policy_name[o->policy]);
	if (err && errlen)
		err[0] = 0;
	rc = run_check(&r);
	if (rc)
		return rc;
	r.gpu_on = o->policy != POL_RECOMPUTE && o->gpu_tokens > 0;
	r.store_on = o->policy != POL_RECOMPUTE && o->policy != POL_GPU_ONLY;
	r.C = w->kind == WL_BLOCKS ? 1 : o->chunk_tokens / o->gpu_block;
	rc = run_alloc(&r);
	if (rc)
		goto out;
	run_root(&r);
	if (r.store_on) {
		rc = stores_open(&r, &f);
		if (rc)
			goto out;
	}

	r.tty = o->progress && isatty(2);
	wall0 = r.t0_ns = bench_now_ns();
	if (schedule_start(&r)) {
		rc = rfail(&r, -ENOMEM, "out of memory");
		goto out;
	}
	rc = run_events(&r);
	if (rc)
		goto out;
	progress(&r, 0, 1);
	res->wall_s = (double)(bench_now_ns() - wall0) / 1e9;
	if (r.completions != w->ncalls && !res->interrupted) {
		rc = rfail(&r, -EPROTO, "the replay stopped after %llu of %zu calls",
			   (unsigned long long)r.completions, w->ncalls);
		goto out;
	}
	rc = run_figures(&r);
	if (rc)
		goto out;
	run_store_stats(&r);
out:
	run_close(&r, &f);
	return rc;
}
