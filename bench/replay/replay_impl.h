/*
 * replay_impl.h - what the replay engine's files share and nothing else
 * needs: the event and endpoint types, the state of one run (struct run)
 * and the calls each file gives the others (prefix rp_). replay.h is the
 * engine's outside face; this header is for bench/replay/replay*.c only.
 */
#ifndef KVBENCH_REPLAY_IMPL_H
#define KVBENCH_REPLAY_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "bench.h"
#include "kvtier.h"
#include "lru.h"
#include "replay.h"

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

/* Where the nodes' disk files are: in tmp, a temporary directory, when the
 * options name none; removed when the run ends. */
struct run_files {
	char tmp[256];
	char path[REPLAY_NODES_MAX][320];
};

/* replay_store.c: the store's side of a call */
int rp_fail(struct run *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
size_t rp_call_keys(struct run *r, const struct wl_call *c, size_t *ns);
int rp_ensure_buf(struct run *r, size_t bytes);
double rp_stat_num(const json_t *s, const char *path);
kvt_store *rp_ep_store(const struct run *r, uint32_t e);
void rp_account(struct run *r, int tier, uint64_t tokens, uint64_t blocks);
int rp_store_serve(struct run *r, uint32_t ci, struct served *sv);
int rp_store_put(struct run *r, uint32_t ci, size_t ns);

/* replay_pool.c: the endpoints' GPU pools and the trace's bound */
size_t rp_gpu_hits(struct run *r, struct endpoint *e, size_t ng, uint64_t *gpu_tok);
void rp_pool_acct(struct run *r, struct endpoint *e, double t);
int rp_gpu_take(struct run *r, uint32_t ci, struct endpoint *e, size_t ng, size_t h,
		uint64_t gpu_tok, double t);
int rp_gpu_fill(struct run *r, uint32_t ci, struct endpoint *e, size_t ng, double now);
void rp_gpu_release(struct run *r, uint32_t ci, struct endpoint *e, double t);
int rp_bound_account(struct run *r, size_t ng, double t);
int rp_pool_fits(struct run *r, struct endpoint *e, uint32_t ci);
void rp_pool_figures(struct run *r);

/* replay_setup.c: a run's arrays, nodes and teardown */
int rp_run_check(struct run *r);
int rp_run_alloc(struct run *r);
void rp_run_root(struct run *r);
int rp_stores_open(struct run *r, struct run_files *f);
void rp_run_store_stats(struct run *r);
void rp_run_close(struct run *r, const struct run_files *f);

/* replay_figures.c: the model's figures from a finished run */
int rp_run_figures(struct run *r);

/* replay.c: the event loop */
void rp_progress(struct run *r, double t, int final);

#endif
