/*
 * replay_pool.c - each endpoint's GPU prefix cache as a pool of KV shared
 * with its running calls (gpu_hold): hits, pins, what a call holds, room
 * for the next call, the pool's figures integrated over simulated time;
 * and the trace's bound (the leading blocks an unbounded cache would hold,
 * with the age of every reuse).
 *
 * Knows nothing about the store or the event order.
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

/* The leading GPU blocks of the call that endpoint e's cache holds; their
 * tokens are added to *gpu_tok. */
size_t rp_gpu_hits(struct run *r, struct endpoint *e, size_t ng, uint64_t *gpu_tok)
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
void rp_pool_acct(struct run *r, struct endpoint *e, double t)
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
int rp_gpu_take(struct run *r, uint32_t ci, struct endpoint *e, size_t ng, size_t h,
		    uint64_t gpu_tok, double t)
{
	const struct wl_call *c = &r->w->calls[ci];
	size_t i;

	if (!r->gpu_on || !r->o->gpu_hold)
		return 0;
	rp_pool_acct(r, e, t);
	e->running++;
	e->running_ctx += c->prompt_tokens + c->output_tokens;
	r->pins[ci] = malloc((ng + 1) * sizeof(**r->pins));
	if (!r->pins[ci])
		return rp_fail(r, -ENOMEM, "out of memory");
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
int rp_gpu_fill(struct run *r, uint32_t ci, struct endpoint *e, size_t ng, double now)
{
	size_t i;
	uint64_t t;

	rp_pool_acct(r, e, now);
	for (i = r->npins[ci]; i < ng; i++) {
		t = r->ktok[i] < r->held[ci] ? r->ktok[i] : r->held[ci];
		r->held[ci] -= t;
		e->gpu.held -= t;
		if (lru_pin_key(&e->gpu, r->keys[i], r->ktok[i], &r->pins[ci][i]))
			return rp_fail(r, -ENOMEM, "out of memory");
	}
	r->npins[ci] = (uint32_t)ng;
	return 0;
}

/* gpu_hold: call ci ends on e: its blocks become evictable, its prefix most
 * recent (released tail first), what it held is freed, and a pool that
 * running calls filled past its size is evicted back to it. */
void rp_gpu_release(struct run *r, uint32_t ci, struct endpoint *e, double t)
{
	const struct wl_call *c = &r->w->calls[ci];
	uint32_t i;

	if (!r->pins[ci])
		return;
	rp_pool_acct(r, e, t);
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
int rp_bound_account(struct run *r, size_t ng, double t)
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
			return rp_fail(r, -ENOMEM, "out of memory");
		r->bound.node[n].t = t;
	}
	for (; i < ng; i++) {
		if (lru_add(&r->bound, r->keys[i], r->ktok[i], &n))
			return rp_fail(r, -ENOMEM, "out of memory");
		lru_push_head(&r->bound, n);
		r->bound.node[n].t = t;
	}
	res->total_blk += ng;
	return 0;
}

/*
 * gpu_hold: whether call ci fits endpoint e's pool beside the running
 * calls: its prompt and (unless decode runs apart) its answer, less its
 * leading blocks that running calls already hold, within the room they
 * leave (kept prefixes are room: they are evicted for it). A pool with no
 * call running takes any call.
 */
int rp_pool_fits(struct run *r, struct endpoint *e, uint32_t ci)
{
	const struct wl_call *c = &r->w->calls[ci];
	uint64_t need = c->prompt_tokens + (r->o->disaggregated ? 0 : c->output_tokens);
	size_t ng, ns, i;
	uint32_t n;

	if (!r->gpu_on || !r->o->gpu_hold || e->running == 0 ||
	    e->gpu.pinned + e->gpu.held + need <= e->gpu.cap)
		return 1;
	ng = rp_call_keys(r, c, &ns);
	for (i = 0; i < ng && (n = lru_find(&e->gpu, r->keys[i])) != NIL; i++)
		if (e->gpu.node[n].pins)
			need -= r->ktok[i];
	return e->gpu.pinned + e->gpu.held + need <= e->gpu.cap;
}

/* The pools' means over the makespan and the endpoints (pool_acct). */
void rp_pool_figures(struct run *r)
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
