/*
 * replay_store.c - the store's side of one replayed call: the call's block
 * keys, the lookup with a lease, the batch load into one buffer, the check
 * of every loaded byte against what was stored, the split of what was
 * served among the store's tiers (by its hit counters), and the puts of
 * the blocks a prefill computed.
 *
 * Calls only the public <kvtier.h>; knows nothing about the event order,
 * the GPU pools or how figures are reported.
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
int rp_fail(struct run *r, int code, const char *fmt, ...)
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
size_t rp_call_keys(struct run *r, const struct wl_call *c, size_t *ns)
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

int rp_ensure_buf(struct run *r, size_t bytes)
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

/* Reads a number from a stats document ("ram.hits"), 0 when absent. */
double rp_stat_num(const json_t *s, const char *path)
{
	double v = 0;

	if (!s || bench_stats_number(s, path, &v))
		return 0;
	return v;
}

/* The store node that endpoint e's calls use. */
kvt_store *rp_ep_store(const struct run *r, uint32_t e)
{
	return r->st[e % r->nst];
}

static int store_hits(kvt_store *st, double *ram, double *disk, double *peer)
{
	json_t *s = bench_store_stats(st);

	if (!s)
		return -EIO;
	*ram = rp_stat_num(s, "store.hits_ram");
	*disk = rp_stat_num(s, "store.hits_disk");
	*peer = rp_stat_num(s, "store.hits_peer");
	json_decref(s);
	return 0;
}

void rp_account(struct run *r, int tier, uint64_t tokens, uint64_t blocks)
{
	r->res->tok[tier] += tokens;
	r->res->blk[tier] += blocks;
}

/* One op per store block skeys[first..first+n), each with its own part of
 * the buffer, of the block's size. */
static int block_ops(struct run *r, size_t first, size_t n)
{
	uint64_t bytes = 0;
	size_t k;

	for (k = 0; k < n; k++)
		bytes += replay_block_bytes(r->o, r->stok[first + k]);
	if (rp_ensure_buf(r, bytes))
		return rp_fail(r, -ENOMEM, "out of memory");
	bytes = 0;
	for (k = 0; k < n; k++) {
		size_t len = replay_block_bytes(r->o, r->stok[first + k]);
		r->ops[k].key = r->skeys[first + k];
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
			return rp_fail(r, -EILSEQ,
				     "wrong bytes: call %u block %zu (key %s) loaded %zu bytes, stored %zu",
				     ci, c0 + k, ks, r->ops[k].len, want);
		bad = common_check(r->ops[k].buf, want, common_key_seed(r->ops[k].key));
		if (bad >= 0)
			return rp_fail(r, -EILSEQ,
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
	rp_account(r, T_RAM, tr, br);
	rp_account(r, T_DISK, store_tok - tr - tp, nb - br - bp);
	rp_account(r, T_PEER, tp, bp);
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

	rc = block_ops(r, sv->c0, sv->found);
	if (rc)
		return rc;
	if (store_hits(st, &ram0, &disk0, &peer0))
		return rp_fail(r, -EIO, "kvt_stats_json failed");
	t0 = bench_now_ns();
	(void)kvt_get_batch(st, r->ops, sv->found);
	t1 = bench_now_ns();
	if (store_hits(st, &ram1, &disk1, &peer1))
		return rp_fail(r, -EIO, "kvt_stats_json failed");
	sv->load_real = (double)(t1 - t0) / 1e9;
	rc = load_check(r, ci, sv);
	if (rc)
		return rc;
	if (sv->loaded < sv->found)
		res->lease_truncations++;
	if (r->o->release_leases)
		(void)kvt_release(st, r->skeys + sv->c0, sv->found);
	if (bench_samples_add(&r->load_us, sv->load_real * 1e6))
		return rp_fail(r, -ENOMEM, "out of memory");
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
int rp_store_serve(struct run *r, uint32_t ci, struct served *sv)
{
	kvt_store *st = rp_ep_store(r, r->ep_of[ci]);
	uint64_t t0;
	int rc;

	sv->c0 = sv->h / r->C;
	if (sv->c0 < sv->ns) {
		t0 = bench_now_ns();
		rc = kvt_lookup(st, r->skeys + sv->c0, sv->ns - sv->c0, KVT_LEASE, &sv->found);
		sv->lookup_real = (double)(bench_now_ns() - t0) / 1e9;
		r->res->lookups++;
		if (rc < 0)
			return rp_fail(r, rc, "kvt_lookup: %s", kvt_last_error());
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

/* The puts at the end of call ci's prefill: its store blocks from where
 * its load stopped (put_from) to the last of its ns, each filled with the
 * bytes its key names, in one batch; each op's result is counted. */
int rp_store_put(struct run *r, uint32_t ci, size_t ns)
{
	struct replay_result *res = r->res;
	kvt_store *st = rp_ep_store(r, r->ep_of[ci]);
	size_t from = r->put_from[ci], n, k;

	if (from >= ns)
		return 0;
	n = ns - from;
	if (block_ops(r, from, n))
		return -ENOMEM;
	for (k = 0; k < n; k++)
		common_fill(r->ops[k].buf, r->ops[k].len, common_key_seed(r->ops[k].key));
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
	return 0;
}
