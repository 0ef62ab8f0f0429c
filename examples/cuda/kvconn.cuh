/*
 * kvconn.cuh - the data path a vLLM C++/CUDA KV connector runs over
 * libkvtier's zero-copy slots, for one worker (one GPU, one TP rank).
 *
 * save (save_kv_layer / wait_for_save):
 *   keys = kvt_hash_chain(namespace root, tokens)
 *   kvt_put_reserve -> gather kernel (paged cache -> device staging)
 *   -> cudaMemcpyAsync staging -> each reserved slot (pinned arena memory)
 *   -> kvt_put_commit from a cudaLaunchHostFunc callback behind the copies.
 *   Keys already stored are skipped; a slot refused with -EAGAIN (no room
 *   without a spill) is retried briefly, then left unsaved (a cache may
 *   drop a block; the engine recomputes it if it is ever needed).
 * restore (start_load_kv):
 *   kvt_get_pin -> RAM hits dispatched at once, disk hits as kvt_pin_reap
 *   reports them -> cudaMemcpyAsync slot -> device staging, each block's
 *   copy issued as soon as it has landed -> scatter kernel (paged cache)
 *   once its group of up to CONN_GROUP blocks is in. Each block is
 *   unpinned as soon as its own copy is done (the scatter reads only the
 *   staging): the thread that reaps finds that from an event recorded
 *   behind the copy (poll mode, the default), so the arena space a load
 *   landed in is free again soon; or, with poll 0, kvt_unpin runs from a
 *   host callback behind each group's scatter.
 * Streams: a block's copy goes to the next of CONN_STREAMS copy streams, so
 * the copy engines always have copies queued; gathers and scatters run on a
 * kernel stream of their own and host callbacks on a third, joined to the
 * copies by events, so neither a kernel nor a callback ever holds up the
 * next copies. Groups cycle through CONN_STAGES staging buffers: a group's
 * copies wait only for the last kernel or copies that used their buffer.
 * The arena must be registered with CUDA first (conn_register), so the
 * copies run at pinned-memory speed. Header-only so that the example and
 * the GPU benchmark share it.
 */
#ifndef KVCONN_CUH
#define KVCONN_CUH

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvtier.h>

#include "kvlayout.cuh"

#define CONN_STREAMS 4 /* copy streams; each block's copy goes to the next */
#define CONN_GROUP 16  /* blocks per group: one gather or scatter launch, one callback */
#define CONN_STAGES 8  /* staging buffers of a group each (KV_FLASH only) */
#define CONN_PEND 256  /* restored blocks copied but not yet unpinned (poll mode) */

/* Slots handed to a host callback, which commits or unpins and frees them. */
struct conn_cb {
	kvt_store *s;
	int n;
	kvt_slot slot[CONN_GROUP];
};

/* The group being filled: its slots, cache block ids, staging buffer and
 * the copy streams its copies went to (a bit each). */
struct conn_group {
	struct conn_cb *x;
	struct kv_ids ids;
	unsigned stage, used;
};

struct conn {
	kvt_store *s;
	kvt_key root;
	struct kv_cache *cache;
	size_t block_bytes;
	cudaStream_t st[CONN_STREAMS]; /* copies */
	cudaStream_t kst;              /* gather and scatter kernels */
	cudaStream_t cbst;             /* commit and unpin callbacks */
	char *staging[CONN_STAGES];    /* CONN_GROUP blocks each (KV_FLASH only) */
	/* copied[j][k]: the copies of the last group in stage j on stream k;
	 * kernel[j]: its gather or scatter. A stage's buffer is read last by
	 * its kernel (a restore) or by its copies (a save: the streams in
	 * save_rd[j]); whoever writes it next waits for those. */
	cudaEvent_t copied[CONN_STAGES][CONN_STREAMS];
	cudaEvent_t kernel[CONN_STAGES];
	unsigned save_rd[CONN_STAGES];
	unsigned stage, cs; /* next stage, next copy stream */
	struct conn_group g;
	/* poll 1 (conn_open's default): a restore unpins each block as soon as
	 * its own copy is done, found by the thread that reaps (conn_poll,
	 * also from conn_sync); 0: from a host callback behind its group's
	 * scatter. The blocks copied and not yet
	 * unpinned: pslot[] from phead to ptail (mod CONN_PEND), each with the
	 * event recorded behind its copy. */
	int poll;
	cudaEvent_t pev[CONN_PEND];
	kvt_slot pslot[CONN_PEND];
	size_t phead, ptail;
	size_t window;  /* blocks per pin window of conn_restore (0: 128); two in flight */
	/* what the last call did */
	size_t saved, skipped_stored, unsaved, restored, from_disk, groups;
	double lookup_s; /* the restore's kvt_lookup */
	double last_land_s; /* when its last block was handed to the GPU (CLOCK_MONOTONIC) */
};

#define KVT_CK(call)                                                            \
	do {                                                                    \
		int r_ = (call);                                                \
		if (r_ < 0) {                                                   \
			fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__,       \
				__LINE__, #call, kvt_strerror(r_),              \
				kvt_last_error());                              \
			exit(1);                                                \
		}                                                               \
	} while (0)

/*
 * The namespace a connector hashes under: everything that must match for a
 * block's bytes to be reusable (model, KV dtype and packed layout, parallel
 * layout, block size).
 */
static inline kvt_key conn_root(const char *model, const struct kv_shape *sh,
				uint32_t tp_rank, uint32_t tp_size)
{
	char fmt[128];
	snprintf(fmt, sizeof(fmt), "bf16/packed[L=%d][2][%d][H=%d][D=%d]", sh->layers,
		 sh->block_size, sh->num_kv_heads, sh->head_size);
	kvt_namespace ns;
	memset(&ns, 0, sizeof(ns));
	ns.model = model;
	ns.tokenizer = model;
	ns.kv_format = fmt;
	ns.tp_rank = tp_rank;
	ns.tp_size = tp_size;
	ns.pp_rank = 0;
	ns.pp_size = 1;
	ns.block_tokens = (uint32_t)sh->block_size;
	return kvt_ns_root(&ns);
}

/*
 * Registers the store's arena with CUDA, once per process and store, so
 * copies to and from slots run at pinned-memory speed. One registration of
 * the whole arena (kvt_arena): a block may straddle two of the regions that
 * kvt_arena_regions() reports, and one registration maps every slot at
 * once. Returns the arena's base for conn_unregister().
 */
static inline void *conn_register(kvt_store *s)
{
	void *base;
	size_t len;

	KVT_CK(kvt_arena(s, &base, &len));
	CK(cudaHostRegister(base, len, cudaHostRegisterDefault));
	return base;
}

static inline void conn_unregister(void *base)
{
	CK(cudaHostUnregister(base));
}

/* A connector over store s for one paged cache; the arena is registered. */
static inline void conn_open(struct conn *c, kvt_store *s, kvt_key root,
			     struct kv_cache *cache)
{
	memset(c, 0, sizeof(*c));
	c->s = s;
	c->root = root;
	c->cache = cache;
	c->block_bytes = kv_block_bytes(&cache->shape);
	c->poll = 1;
	for (int i = 0; i < CONN_STREAMS; i++)
		CK(cudaStreamCreateWithFlags(&c->st[i], cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&c->kst, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&c->cbst, cudaStreamNonBlocking));
	for (int j = 0; j < CONN_STAGES; j++) {
		if (cache->kind == KV_FLASH)
			CK(cudaMalloc((void **)&c->staging[j], CONN_GROUP * c->block_bytes));
		CK(cudaEventCreateWithFlags(&c->kernel[j], cudaEventDisableTiming));
		for (int k = 0; k < CONN_STREAMS; k++)
			CK(cudaEventCreateWithFlags(&c->copied[j][k], cudaEventDisableTiming));
	}
	for (int i = 0; i < CONN_PEND; i++)
		CK(cudaEventCreateWithFlags(&c->pev[i], cudaEventDisableTiming));
}

/*
 * Poll mode: unpins the restored blocks whose copies have finished, oldest
 * first; wait 0: those done now, 1: at least the oldest, 2: all of them.
 */
static inline void conn_poll(struct conn *c, int wait)
{
	size_t h0 = c->phead;

	while (c->phead < c->ptail) {
		cudaEvent_t ev = c->pev[c->phead % CONN_PEND];
		cudaError_t e = cudaEventQuery(ev);
		if (e == cudaErrorNotReady) {
			/* not an error; make sure it is not left as the last one */
			cudaError_t le = cudaGetLastError();
			if (le != cudaErrorNotReady)
				CK(le);
			if (!wait || (wait == 1 && c->phead > h0))
				break;
			e = cudaEventSynchronize(ev);
		}
		CK(e);
		c->phead++;
	}
	/* [h0, phead) in at most two runs of the ring */
	for (size_t i = h0; i < c->phead;) {
		size_t at = i % CONN_PEND, n = c->phead - i;
		if (n > CONN_PEND - at)
			n = CONN_PEND - at;
		kvt_unpin(c->s, &c->pslot[at], n); /* never blocks */
		i += n;
	}
}

static inline void conn_sync(struct conn *c)
{
	conn_poll(c, 2);
	for (int i = 0; i < CONN_STREAMS; i++)
		CK(cudaStreamSynchronize(c->st[i]));
	CK(cudaStreamSynchronize(c->kst));
	CK(cudaStreamSynchronize(c->cbst));
}

static inline void conn_close(struct conn *c)
{
	conn_sync(c);
	for (int i = 0; i < CONN_STREAMS; i++)
		CK(cudaStreamDestroy(c->st[i]));
	CK(cudaStreamDestroy(c->kst));
	CK(cudaStreamDestroy(c->cbst));
	for (int j = 0; j < CONN_STAGES; j++) {
		if (c->staging[j])
			CK(cudaFree(c->staging[j]));
		CK(cudaEventDestroy(c->kernel[j]));
		for (int k = 0; k < CONN_STREAMS; k++)
			CK(cudaEventDestroy(c->copied[j][k]));
	}
	for (int i = 0; i < CONN_PEND; i++)
		CK(cudaEventDestroy(c->pev[i]));
}

static void CUDART_CB conn_commit_cb(void *arg)
{
	struct conn_cb *x = (struct conn_cb *)arg;
	kvt_put_commit(x->s, x->slot, (size_t)x->n); /* never waits for I/O */
	free(x);
}

static void CUDART_CB conn_unpin_cb(void *arg)
{
	struct conn_cb *x = (struct conn_cb *)arg;
	kvt_unpin(x->s, x->slot, (size_t)x->n); /* never blocks */
	free(x);
}

/* The GPU address of a whole block in the cross-layer layout. */
static inline char *conn_cross_block(const struct conn *c, int block)
{
	return kv_chunk(c->cache->layer, c->cache->cross, KV_CROSS, c->cache->shape,
			block, 0, 0);
}

/* Makes stream w wait until stage j's buffer has been read by whatever
 * used it last (its scatter, or a save's copies), before w writes it. */
static inline void conn_stage_wait(struct conn *c, unsigned j, cudaStream_t w)
{
	CK(cudaStreamWaitEvent(w, c->kernel[j], 0));
	for (int k = 0; k < CONN_STREAMS; k++)
		if (c->save_rd[j] & 1u << k)
			CK(cudaStreamWaitEvent(w, c->copied[j][k], 0));
}

/* Starts an empty group in the next stage. */
static inline void conn_group_open(struct conn *c)
{
	c->g.x = (struct conn_cb *)calloc(1, sizeof(*c->g.x));
	if (!c->g.x) {
		fprintf(stderr, "kvconn: out of memory\n");
		exit(1);
	}
	c->g.x->s = c->s;
	c->g.stage = c->stage;
	c->g.used = 0;
	c->stage = (c->stage + 1) % CONN_STAGES;
}

/* Records the group's copies on each stream they went to and makes stream
 * w wait for all of them. */
static inline void conn_group_join(struct conn *c, cudaStream_t w)
{
	for (int k = 0; k < CONN_STREAMS; k++)
		if (c->g.used & 1u << k) {
			CK(cudaEventRecord(c->copied[c->g.stage][k], c->st[k]));
			CK(cudaStreamWaitEvent(w, c->copied[c->g.stage][k], 0));
		}
}

/* The next copy stream for a block of the group. Before the group's first
 * copy on it (KV_FLASH), it waits for the group's gather (a save) or for
 * the last reader of the group's staging buffer (a restore). */
static inline cudaStream_t conn_group_stream(struct conn *c, int save)
{
	unsigned k = c->cs;
	c->cs = (c->cs + 1) % CONN_STREAMS;
	if (!(c->g.used & 1u << k) && c->cache->kind == KV_FLASH) {
		if (save)
			CK(cudaStreamWaitEvent(c->st[k], c->kernel[c->g.stage], 0));
		else
			conn_stage_wait(c, c->g.stage, c->st[k]);
	}
	c->g.used |= 1u << k;
	return c->st[k];
}

/* Copies the group's reserved slots (cache blocks g.ids) out of the GPU:
 * gather into the stage (KV_FLASH), a copy per block, then the commit
 * behind the copies. */
static inline void conn_save_group(struct conn *c)
{
	struct conn_group *g = &c->g;
	int flash = c->cache->kind == KV_FLASH;
	char *stg = c->staging[g->stage];

	if (flash) {
		conn_stage_wait(c, g->stage, c->kst);
		kv_launch(c->cache, &g->ids, g->x->n, stg, 1, c->kst);
		CK(cudaEventRecord(c->kernel[g->stage], c->kst));
	}
	for (int k = 0; k < g->x->n; k++) {
		const char *src = flash ? stg + (size_t)k * c->block_bytes
					: conn_cross_block(c, g->ids.id[k]);
		CK(cudaMemcpyAsync(g->x->slot[k].addr, src, c->block_bytes,
				   cudaMemcpyDeviceToHost, conn_group_stream(c, 1)));
	}
	conn_group_join(c, c->cbst);
	c->save_rd[g->stage] = flash ? g->used : 0;
	CK(cudaLaunchHostFunc(c->cbst, conn_commit_cb, g->x));
	g->x = NULL;
	c->groups++;
}

static inline void conn_sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000L };
	nanosleep(&ts, NULL);
}

static inline double conn_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Saves the full blocks of a request: its tokens and the cache blocks that
 * hold them (block_ids[i] holds tokens [i*bs, (i+1)*bs)). Returns at once;
 * conn_sync() waits for the copies (the commits follow from callbacks).
 */
static inline void conn_save(struct conn *c, const uint32_t *tokens, size_t ntokens,
			     const int *block_ids)
{
	int bs = c->cache->shape.block_size;
	size_t nb = ntokens / (size_t)bs;
	kvt_key *keys = (kvt_key *)malloc((nb ? nb : 1) * sizeof(kvt_key));

	nb = kvt_hash_chain(c->root, tokens, ntokens, (uint32_t)bs, keys, nb);
	c->saved = c->skipped_stored = c->unsaved = c->groups = 0;
	for (size_t i = 0; i < nb; i += CONN_GROUP) {
		int n = (int)(nb - i < CONN_GROUP ? nb - i : CONN_GROUP);
		kvt_slot sl[CONN_GROUP];
		for (int k = 0; k < n; k++) {
			memset(&sl[k], 0, sizeof(sl[k]));
			sl[k].key = keys[i + (size_t)k];
			sl[k].len = c->block_bytes;
		}
		KVT_CK(kvt_put_reserve(c->s, sl, (size_t)n, 0));
		/* -EAGAIN: the evictor is making room; retry those a while. */
		for (int tries = 0; tries < 2000; tries++) {
			int again = 0;
			for (int k = 0; k < n; k++)
				again += sl[k].result == -EAGAIN;
			if (!again)
				break;
			conn_sleep_us(500);
			for (int k = 0; k < n; k++)
				if (sl[k].result == -EAGAIN)
					kvt_put_reserve(c->s, &sl[k], 1, 0);
		}
		conn_group_open(c);
		struct conn_cb *x = c->g.x;
		for (int k = 0; k < n; k++) {
			if (sl[k].result == KVT_SLOT_STORED) {
				c->skipped_stored++;
			} else if (sl[k].result != 0) {
				c->unsaved++;
			} else {
				c->g.ids.id[x->n] = block_ids[i + (size_t)k];
				x->slot[x->n++] = sl[k];
			}
		}
		c->saved += (size_t)x->n;
		if (x->n) {
			conn_save_group(c);
		} else {
			free(x);
			c->g.x = NULL;
		}
	}
	free(keys);
}

/* Adds a ready, pinned slot for cache block id to the restore group (opened
 * if none is) and issues its copy at once: into the group's staging
 * (KV_FLASH) or straight into the block (KV_CROSS). */
static inline void conn_restore_add(struct conn *c, const kvt_slot *sl, int id)
{
	if (!c->g.x)
		conn_group_open(c);
	struct conn_group *g = &c->g;
	int k = g->x->n;
	char *dst = c->cache->kind == KV_FLASH ? c->staging[g->stage] + (size_t)k * c->block_bytes
					       : conn_cross_block(c, id);
	cudaStream_t cs = conn_group_stream(c, 0);
	CK(cudaMemcpyAsync(dst, sl->addr, c->block_bytes, cudaMemcpyHostToDevice, cs));
	if (c->poll) {
		if (c->ptail - c->phead == CONN_PEND)
			conn_poll(c, 1);
		CK(cudaEventRecord(c->pev[c->ptail % CONN_PEND], cs));
		c->pslot[c->ptail % CONN_PEND] = *sl;
		c->ptail++;
	}
	g->ids.id[k] = id;
	g->x->slot[k] = *sl;
	g->x->n++;
}

/* Ends the restore group: its scatter on the kernel stream once its copies
 * are done (KV_FLASH), then the unpin on the callback stream (unless the
 * blocks are unpinned by conn_poll). */
static inline void conn_restore_close(struct conn *c)
{
	struct conn_group *g = &c->g;

	if (!g->x)
		return;
	if (c->cache->kind == KV_FLASH) {
		conn_group_join(c, c->kst);
		kv_launch(c->cache, &g->ids, g->x->n, c->staging[g->stage], 0, c->kst);
		CK(cudaEventRecord(c->kernel[g->stage], c->kst));
		c->save_rd[g->stage] = 0;
		if (!c->poll)
			CK(cudaStreamWaitEvent(c->cbst, c->kernel[g->stage], 0));
	} else if (!c->poll) {
		conn_group_join(c, c->cbst);
	}
	if (c->poll)
		free(g->x);
	else
		CK(cudaLaunchHostFunc(c->cbst, conn_unpin_cb, g->x));
	g->x = NULL;
	c->groups++;
	c->last_land_s = conn_now_s();
}

/* Dispatches the ready slots idx[0..n) of sl (for blocks block_ids[]), in
 * groups of up to CONN_GROUP. */
static inline void conn_dispatch(struct conn *c, kvt_slot *sl, const size_t *idx,
				 size_t n, const int *block_ids)
{
	for (size_t k = 0; k < n; k++) {
		if (sl[idx[k]].result != 0)
			continue;
		conn_restore_add(c, &sl[idx[k]], block_ids[idx[k]]);
		if (c->g.x->n == CONN_GROUP)
			conn_restore_close(c);
	}
	conn_restore_close(c);
	if (c->poll)
		conn_poll(c, 0);
}

/*
 * One window of a restore: n keys of sl (for cache blocks ids[]) being
 * pinned, and what a round of pins needs. pend[0..np) are the slots still
 * to pin; b the round's batch, whose slots are tmp[0..np).
 */
struct conn_win {
	kvt_slot *sl;
	const int *ids;
	size_t n, np;
	kvt_slot *tmp;
	size_t *pend, *idx;
	int *tid;
	kvt_pin_batch *b;
};

/* Pins the window's pending slots and dispatches its RAM hits at once; the
 * disk hits load in the background (conn_win_finish reaps them). */
static inline void conn_win_pin(struct conn *c, struct conn_win *w)
{
	size_t nready = 0;
	for (size_t k = 0; k < w->np; k++) {
		memset(&w->tmp[k], 0, sizeof(w->tmp[k]));
		w->tmp[k].key = w->sl[w->pend[k]].key;
		w->tid[k] = w->ids[w->pend[k]];
	}
	KVT_CK(kvt_get_pin(c->s, w->tmp, w->np, 0, &w->b));
	for (size_t k = 0; k < w->np; k++)
		if (w->tmp[k].result == 0)
			w->idx[nready++] = k;
	conn_dispatch(c, w->tmp, w->idx, nready, w->tid); /* RAM hits: now */
}

static inline void conn_win_start(struct conn *c, struct conn_win *w, kvt_slot *sl,
				  size_t n, const int *ids)
{
	w->sl = sl;
	w->ids = ids;
	w->n = w->np = n;
	w->tmp = (kvt_slot *)calloc(n, sizeof(kvt_slot));
	w->pend = (size_t *)malloc(n * sizeof(size_t));
	w->idx = (size_t *)malloc(n * sizeof(size_t));
	w->tid = (int *)malloc(n * sizeof(int));
	if (!w->tmp || !w->pend || !w->idx || !w->tid) {
		fprintf(stderr, "kvconn: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		w->pend[i] = i;
	conn_win_pin(c, w);
}

/*
 * Copies each disk hit of the window into the cache as it lands: its copy
 * is issued as soon as kvt_pin_reap reports it; a group closes (scatter,
 * unpin) when it is full or when nothing more has landed for a millisecond.
 * Slots refused for the pin cap (-EAGAIN: earlier windows' unpins are still
 * queued behind their copies) are pinned again shortly, until none is left.
 */
static inline void conn_win_finish(struct conn *c, struct conn_win *w)
{
	for (int tries = 0; w->np; tries++) {
		size_t again = 0;
		for (;;) {
			size_t room = CONN_GROUP - (c->g.x ? (size_t)c->g.x->n : 0);
			int r = kvt_pin_reap(w->b, w->idx, room, c->g.x ? 1 : -1);
			if (r < 0 && r != -ETIMEDOUT)
				KVT_CK(r);
			if (r <= 0) { /* 0: every load reported; else a quiet ms */
				conn_restore_close(c);
				if (r == 0)
					break;
				continue;
			}
			for (int k = 0; k < r; k++) {
				const kvt_slot *sl = &w->tmp[w->idx[k]];
				if (sl->result == 0)
					conn_restore_add(c, sl, w->tid[w->idx[k]]);
			}
			c->from_disk += (size_t)r;
			if (c->g.x && c->g.x->n == CONN_GROUP)
				conn_restore_close(c);
			if (c->poll)
				conn_poll(c, 0);
		}
		kvt_pin_free(w->b);
		w->b = NULL;
		for (size_t k = 0; k < w->np; k++) {
			w->sl[w->pend[k]] = w->tmp[k];
			if (w->tmp[k].result == -EAGAIN)
				w->pend[again++] = w->pend[k];
		}
		w->np = again;
		if (!w->np || tries >= 10000)
			break;
		conn_sleep_us(200);
		conn_win_pin(c, w);
	}
	free(w->tmp);
	free(w->pend);
	free(w->idx);
	free(w->tid);
}

/*
 * Restores the leading stored blocks of a request into cache blocks
 * block_ids[]: the scheduler side's lookup (leasing what it reports), then
 * the worker side's pins and copies, a window of blocks at a time (the next
 * window pinned while this one lands) so that pins stay within
 * ram.pin_cap. Returns how many leading blocks are being restored (the
 * engine computes the rest); they are in place, and unpinned, once
 * conn_sync() returns.
 */
static inline size_t conn_restore(struct conn *c, const uint32_t *tokens,
				  size_t ntokens, const int *block_ids)
{
	int bs = c->cache->shape.block_size;
	size_t nb = ntokens / (size_t)bs, found = 0;
	size_t window = c->window ? c->window : 128;
	kvt_key *keys = (kvt_key *)malloc((nb ? nb : 1) * sizeof(kvt_key));

	nb = kvt_hash_chain(c->root, tokens, ntokens, (uint32_t)bs, keys, nb);
	/* get_num_new_matched_tokens: how many blocks to load, leased meanwhile */
	double t0 = conn_now_s();
	KVT_CK(kvt_lookup(c->s, keys, nb, KVT_LEASE, &found));
	c->lookup_s = conn_now_s() - t0;
	c->groups = 0;
	/* start_load_kv */
	kvt_slot *sl = (kvt_slot *)calloc(found ? found : 1, sizeof(kvt_slot));
	c->from_disk = 0;
	for (size_t i = 0; i < found; i++)
		sl[i].key = keys[i];
	/* Two windows in flight: the next one's loads are queued before this
	 * one's are reaped, so the disk never idles between windows. */
	struct conn_win win[2];
	int cur = 0;
	if (found)
		conn_win_start(c, &win[0], sl, found < window ? found : window, block_ids);
	for (size_t w = 0; w < found; w += window, cur ^= 1) {
		size_t nx = w + window;
		if (nx < found)
			conn_win_start(c, &win[cur ^ 1], sl + nx,
				       found - nx < window ? found - nx : window, block_ids + nx);
		conn_win_finish(c, &win[cur]);
	}
	KVT_CK(kvt_release(c->s, keys, found));
	/* Blocks are useful only up to the first that failed to load. */
	size_t ok = 0;
	while (ok < found && sl[ok].result == 0)
		ok++;
	c->restored = ok;
	free(sl);
	free(keys);
	return ok;
}

#endif
