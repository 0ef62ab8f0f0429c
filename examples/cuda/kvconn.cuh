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
 *   reports them -> cudaMemcpyAsync slot -> device staging -> scatter
 *   kernel (paged cache) -> kvt_unpin from a host callback; groups of
 *   blocks go round-robin over several streams, so disk reads, copies and
 *   scatters overlap.
 * The cross-layer layout keeps each block contiguous on the GPU, so it needs
 * no kernel: the copies go straight between the slot and the block.
 *
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

#define CONN_STREAMS 4
#define CONN_GROUP 16 /* blocks per copy group: one scatter or gather launch */

struct conn {
	kvt_store *s;
	kvt_key root;
	struct kv_cache *cache;
	size_t block_bytes;
	cudaStream_t st[CONN_STREAMS];
	char *staging[CONN_STREAMS]; /* CONN_GROUP blocks each (KV_FLASH only) */
	unsigned next;
	size_t window;  /* blocks per pin window of conn_restore (0: 128); two in flight */
	/* what the last call did */
	size_t saved, skipped_stored, unsaved, restored, from_disk;
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
	for (int i = 0; i < CONN_STREAMS; i++) {
		CK(cudaStreamCreateWithFlags(&c->st[i], cudaStreamNonBlocking));
		if (cache->kind == KV_FLASH)
			CK(cudaMalloc((void **)&c->staging[i], CONN_GROUP * c->block_bytes));
	}
}

static inline void conn_close(struct conn *c)
{
	for (int i = 0; i < CONN_STREAMS; i++) {
		CK(cudaStreamSynchronize(c->st[i]));
		CK(cudaStreamDestroy(c->st[i]));
		if (c->staging[i])
			CK(cudaFree(c->staging[i]));
	}
}

static inline void conn_sync(struct conn *c)
{
	for (int i = 0; i < CONN_STREAMS; i++)
		CK(cudaStreamSynchronize(c->st[i]));
}

/* Slots handed to a host callback, which commits or unpins and frees them. */
struct conn_cb {
	kvt_store *s;
	int n;
	kvt_slot slot[CONN_GROUP];
};

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

/* Copies the n reserved slots x->slot[] (cache blocks ids) out of the GPU
 * and commits them behind the copies. */
static inline void conn_save_group(struct conn *c, struct conn_cb *x,
				   const struct kv_ids *ids)
{
	cudaStream_t st = c->st[c->next];
	char *stg = c->staging[c->next];

	c->next = (c->next + 1) % CONN_STREAMS;
	if (c->cache->kind == KV_FLASH)
		kv_launch(c->cache, ids, x->n, stg, 1, st);
	for (int k = 0; k < x->n; k++) {
		const char *src = c->cache->kind == KV_FLASH ? stg + (size_t)k * c->block_bytes
							     : conn_cross_block(c, ids->id[k]);
		CK(cudaMemcpyAsync(x->slot[k].addr, src, c->block_bytes,
				   cudaMemcpyDeviceToHost, st));
	}
	CK(cudaLaunchHostFunc(st, conn_commit_cb, x));
}

static inline void conn_sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000L };
	nanosleep(&ts, NULL);
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
	kvt_key *keys = (kvt_key *)malloc(nb * sizeof(kvt_key));

	nb = kvt_hash_chain(c->root, tokens, ntokens, (uint32_t)bs, keys, nb);
	c->saved = c->skipped_stored = c->unsaved = 0;
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
		struct conn_cb *x = (struct conn_cb *)calloc(1, sizeof(*x));
		struct kv_ids ids;
		x->s = c->s;
		for (int k = 0; k < n; k++) {
			if (sl[k].result == KVT_SLOT_STORED) {
				c->skipped_stored++;
			} else if (sl[k].result != 0) {
				c->unsaved++;
			} else {
				ids.id[x->n] = block_ids[i + (size_t)k];
				x->slot[x->n++] = sl[k];
			}
		}
		c->saved += (size_t)x->n;
		if (x->n)
			conn_save_group(c, x, &ids);
		else
			free(x);
	}
	free(keys);
}

/* Copies the n ready, pinned slots x->slot[] into cache blocks ids and
 * unpins them behind the copies. */
static inline void conn_restore_group(struct conn *c, struct conn_cb *x,
				      const struct kv_ids *ids)
{
	cudaStream_t st = c->st[c->next];
	char *stg = c->staging[c->next];

	c->next = (c->next + 1) % CONN_STREAMS;
	for (int k = 0; k < x->n; k++) {
		char *dst = c->cache->kind == KV_FLASH ? stg + (size_t)k * c->block_bytes
						       : conn_cross_block(c, ids->id[k]);
		CK(cudaMemcpyAsync(dst, x->slot[k].addr, c->block_bytes,
				   cudaMemcpyHostToDevice, st));
	}
	if (c->cache->kind == KV_FLASH)
		kv_launch(c->cache, ids, x->n, stg, 0, st);
	CK(cudaLaunchHostFunc(st, conn_unpin_cb, x));
}

/* Dispatches the ready slots idx[0..n) of sl (for blocks block_ids[]). */
static inline void conn_dispatch(struct conn *c, kvt_slot *sl, const size_t *idx,
				 size_t n, const int *block_ids)
{
	for (size_t i = 0; i < n; i += CONN_GROUP) {
		struct conn_cb *x = (struct conn_cb *)calloc(1, sizeof(*x));
		struct kv_ids ids;
		x->s = c->s;
		for (size_t k = i; k < n && k < i + CONN_GROUP; k++) {
			if (sl[idx[k]].result != 0)
				continue;
			ids.id[x->n] = block_ids[idx[k]];
			x->slot[x->n++] = sl[idx[k]];
		}
		if (x->n)
			conn_restore_group(c, x, &ids);
		else
			free(x);
	}
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
	for (size_t i = 0; i < n; i++)
		w->pend[i] = i;
	conn_win_pin(c, w);
}

/*
 * Copies each disk hit of the window into the cache as it lands. Slots
 * refused for the pin cap (-EAGAIN: earlier windows' unpins are still
 * queued behind their copies) are pinned again shortly, until none is left.
 */
static inline void conn_win_finish(struct conn *c, struct conn_win *w)
{
	for (int tries = 0; w->np; tries++) {
		size_t max = w->np < CONN_GROUP ? w->np : CONN_GROUP, again = 0, got;
		do {
			/* Blocks as they land, a few at a time: what has landed
			 * within a millisecond of the first goes out as one group
			 * (one scatter and one unpin callback for all of them). */
			got = 0;
			for (int r; got < max; got += (size_t)r) {
				r = kvt_pin_reap(w->b, w->idx + got, max - got, got ? 1 : -1);
				if (r <= 0)
					break;
			}
			conn_dispatch(c, w->tmp, w->idx, got, w->tid);
			c->from_disk += got;
		} while (got);
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
 * engine computes the rest); they are in place once conn_sync() returns.
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
	KVT_CK(kvt_lookup(c->s, keys, nb, KVT_LEASE, &found));
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
