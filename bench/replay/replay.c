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
 * This file holds the options, the event heap and the event loop (arrival,
 * routing, the prefill queue, the decode batch, a call's end and the
 * schedulers); the store's side of a call is in replay_store.c, the GPU
 * pools in replay_pool.c, a run's setup and teardown in replay_setup.c and
 * its figures in replay_figures.c (shared types in replay_impl.h).
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
#include "replay_impl.h"

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

void rp_progress(struct run *r, double t, int final)
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
	sv.ng = rp_call_keys(r, c, &sv.ns);
	sv.h = rp_gpu_hits(r, e, sv.ng, &gpu_tok);
	rc = rp_bound_account(r, sv.ng, t);
	if (!rc)
		rc = rp_gpu_take(r, ci, e, sv.ng, sv.h, gpu_tok, t);
	if (rc)
		return rc;
	if (r->store_on) {
		rc = rp_store_serve(r, ci, &sv);
		if (rc)
			return rc;
	}
	rp_account(r, T_GPU, gpu_tok, sv.h);
	miss_tok = c->prompt_tokens - gpu_tok - sv.store_tok;
	covered = sv.h;
	if (r->store_on && (sv.c0 + sv.loaded) * r->C > sv.h)
		covered = (sv.c0 + sv.loaded) * r->C;
	if (covered > sv.ng)
		covered = sv.ng;
	rp_account(r, T_MISS, miss_tok, sv.ng - covered);
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
	return heap_push(&r->h, t + charge, EV_COMPUTE, ci) ? rp_fail(r, -ENOMEM, "out of memory")
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
		       ? rp_fail(r, -ENOMEM, "out of memory")
		       : 0;
}

static int dec_add(struct run *r, struct endpoint *e, uint32_t ci)
{
	if (e->ndec == e->capdec) {
		size_t nc = e->capdec ? e->capdec * 2 : 16;
		uint32_t *nd = realloc(e->dec, nc * sizeof(*nd));
		double *nl;
		if (!nd)
			return rp_fail(r, -ENOMEM, "out of memory");
		e->dec = nd;
		nl = realloc(e->dleft, nc * sizeof(*nl));
		if (!nl)
			return rp_fail(r, -ENOMEM, "out of memory");
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
		       ? rp_fail(r, -ENOMEM, "out of memory")
		       : 0;
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
	if (!rp_pool_fits(r, e, ci)) {
		if (!e->waiting) {
			rp_pool_acct(r, e, t);
			e->waiting = 1;
			r->pool_waits++;
		}
		return 0;
	}
	if (e->waiting) {
		rp_pool_acct(r, e, t);
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
	size_t ng, ns, i;
	kvt_store *st = r->store_on ? rp_ep_store(r, r->ep_of[ci]) : NULL;

	pace(r, t);
	ng = rp_call_keys(r, c, &ns);
	if (r->pins[ci]) {
		if (rp_gpu_fill(r, ci, e, ng, t))
			return -ENOMEM;
		if (r->o->disaggregated) /* its KV leaves for a decode replica */
			rp_gpu_release(r, ci, e, t);
	} else if (r->gpu_on) {
		for (i = ng; i-- > 0;) /* tail first: the prefix stays most recent */
			if (lru_insert(&e->gpu, r->keys[i], r->ktok[i]))
				return rp_fail(r, -ENOMEM, "out of memory");
	}
	if (r->store_on && rp_store_put(r, ci, ns))
		return -ENOMEM;
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
	ng = rp_call_keys(r, c, &ns);
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
	return heap_push(&r->h, t, EV_ARRIVE, ci) ? rp_fail(r, -ENOMEM, "out of memory") : 0;
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
			return rp_fail(r, -ENOMEM, "out of memory");
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
			return rp_fail(r, -ENOMEM, "out of memory");
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
	rp_gpu_release(r, ci, ep, t);
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
		rp_progress(r, e.t, 0);
	}
	return 0;
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
	rc = rp_run_check(&r);
	if (rc)
		return rc;
	r.gpu_on = o->policy != POL_RECOMPUTE && o->gpu_tokens > 0;
	r.store_on = o->policy != POL_RECOMPUTE && o->policy != POL_GPU_ONLY;
	r.C = w->kind == WL_BLOCKS ? 1 : o->chunk_tokens / o->gpu_block;
	rc = rp_run_alloc(&r);
	if (rc)
		goto out;
	rp_run_root(&r);
	if (r.store_on) {
		rc = rp_stores_open(&r, &f);
		if (rc)
			goto out;
	}

	r.tty = o->progress && isatty(2);
	wall0 = r.t0_ns = bench_now_ns();
	if (schedule_start(&r)) {
		rc = rp_fail(&r, -ENOMEM, "out of memory");
		goto out;
	}
	rc = run_events(&r);
	if (rc)
		goto out;
	rp_progress(&r, 0, 1);
	res->wall_s = (double)(bench_now_ns() - wall0) / 1e9;
	if (r.completions != w->ncalls && !res->interrupted) {
		rc = rp_fail(&r, -EPROTO, "the replay stopped after %llu of %zu calls",
			   (unsigned long long)r.completions, w->ncalls);
		goto out;
	}
	rc = rp_run_figures(&r);
	if (rc)
		goto out;
	rp_run_store_stats(&r);
out:
	rp_run_close(&r, &f);
	return rc;
}
