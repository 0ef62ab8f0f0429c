/*
 * local_slots.c - the slot calls of a store attached to the node store
 * (kvt_put_reserve, kvt_put_commit, kvt_put_abort, kvt_get_pin, kvt_unpin):
 * each a request to the node store, in pieces of LP_KEYS_MAX slots, whose
 * answers are checked against the mapped arena (an offset or length
 * outside it is a protocol error) before any address is handed out. A slot
 * the node store would refuse by itself is refused here, alone. The
 * connection and its frames are local_client.c's.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "local_client_impl.h"

/* A slot of a reply, checked against the mapping: 0, or -1 (broken). */
static int slot_in(struct local_client *c, const unsigned char *p, kvt_slot *sl,
		   int want_len)
{
	struct lp_slot r;

	memcpy(&r, p, sizeof(r));
	sl->result = r.result;
	sl->ref = 0;
	sl->addr = NULL;
	if (r.result != 0)
		return r.result > 1 || r.result < -4095 ? -1 : 0;
	if (!r.ref || r.len == 0 || r.off > c->arena_len || r.len > c->arena_len - r.off ||
	    (want_len && r.len != sl->len))
		return -1;
	sl->ref = r.ref;
	sl->addr = c->base + r.off;
	sl->len = r.len;
	return 0;
}

/* PIN or RESERVE of slots[0..n), n <= LP_KEYS_MAX: returns the count. */
int lc_slots_rpc(struct local_client *c, int type, kvt_slot *slots, size_t n)
{
	uint64_t held = type & LC_HELD ? LP_WANT_HELD : 0;

	type &= ~LC_HELD;
	int wire = held && type == LP_PIN ? type | (int)LP_HELD : type;
	size_t each = type == LP_PIN ? sizeof(struct lp_key) : sizeof(struct lp_want);
	size_t qlen = 4 + n * each, rlen = 4 + n * sizeof(struct lp_slot), got = 0;
	unsigned char qs[4 + SMALL * sizeof(struct lp_want)];
	unsigned char rs[4 + SMALL * sizeof(struct lp_slot)];
	unsigned char *q = n <= SMALL ? qs : malloc(qlen);
	unsigned char *r = n <= SMALL ? rs : malloc(rlen);
	uint32_t n32 = (uint32_t)n;
	int rc;

	if (!q || !r) {
		rc = kvt_fail(-ENOMEM, "out of memory");
		goto out;
	}
	memcpy(q, &n32, 4);
	for (size_t i = 0; i < n; i++) {
		lc_put_key(q + 4 + i * each, slots[i].key);
		if (type == LP_RESERVE) {
			uint64_t l = slots[i].len | held;
			memcpy(q + 4 + i * each + sizeof(struct lp_key), &l, 8);
		}
	}
	rc = lc_rpc(c, wire, q, qlen, NULL, 0, r, rlen, &got);
	if (rc < 0)
		goto out;
	memcpy(&n32, r, 4);
	if (got != rlen || n32 != n) {
		rc = lc_broken(c);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (slot_in(c, r + 4 + i * sizeof(struct lp_slot), &slots[i],
			    type == LP_RESERVE)) {
			rc = lc_broken(c);
			goto out;
		}
	rc = lc_counted(c, rc, n);
out:
	if (q != qs)
		free(q);
	if (r != rs)
		free(r);
	return rc;
}

/* Why the node store refused a block with -ENOSPC (a reservation or a
 * commit): its slots answer with codes only. */
#define LC_NOSPC_WHY "no tier of the node store can take it: without a disk tier, its " \
	"RAM's leased, pinned and reserved blocks leave no room for it below " \
	"ram.low_watermark (the evictor would drop it at once)"

/* Names the first of slots[0..n) that the node store refused with -ENOSPC
 * in kvt_last_error(); 1 if there was one. */
int lc_name_nospc(const char *fn, const kvt_slot *slots, size_t n)
{
	char kb[34];

	for (size_t i = 0; i < n; i++)
		if (slots[i].result == -ENOSPC) {
			kvt_set_error("%s: slot %zu (key %s, %zu bytes): " LC_NOSPC_WHY, fn, i,
				      kvt_key_str(slots[i].key, kb), slots[i].len);
			return 1;
		}
	return 0;
}

/* Runs fn over slots in pieces of LP_KEYS_MAX; sums the counts. */
static int in_pieces(struct local_client *c, int type, kvt_slot *slots, size_t n)
{
	int total = 0;

	for (size_t i = 0; i < n; i += LP_KEYS_MAX) {
		size_t k = n - i < LP_KEYS_MAX ? n - i : LP_KEYS_MAX;
		int rc = lc_slots_rpc(c, type, slots + i, k);
		if (rc < 0)
			return rc;
		total += rc;
	}
	return total;
}

/* 1 for a slot kvt_put_reserve takes to the node store; a store with
 * tiers refuses the others by themselves. */
static int reserve_ok(const struct local_client *c, const kvt_slot *sl)
{
	return !sl->flags && sl->len && sl->len <= c->max_block && sl->len <= UINT32_MAX;
}

/* Bad slots fail alone (-EINVAL each, as with a store of tiers), checked
 * before any request; each run of the others goes to the node store in
 * place. */
int local_reserve(struct local_client *c, kvt_slot *slots, size_t n)
{
	int total = 0;

	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && reserve_ok(c, &slots[j]))
			j++;
		if (j > i) {
			int rc = in_pieces(c, LP_RESERVE, slots + i, j - i);
			if (rc < 0)
				return rc;
			total += rc;
		}
		if (j < n) {
			kvt_slot *sl = &slots[j];
			sl->addr = NULL;
			sl->ref = 0;
			sl->result = kvt_fail(-EINVAL, "kvt_put_reserve: slot %zu: %s", j,
					      sl->flags ? "flags is not 0" :
					      "len is 0 or above ram.max_block");
		}
		i = j + 1;
	}
	lc_name_nospc("kvt_put_reserve", slots, n);
	return total;
}

int local_pin(struct local_client *c, kvt_slot *slots, size_t n)
{
	int rc = in_pieces(c, LP_PIN, slots, n);

	/* flags must be 0: such a slot is not pinned (the node store was not
	 * told them; the pins it made go back). */
	for (size_t i = 0; rc >= 0 && i < n; i++) {
		if (!slots[i].flags)
			continue;
		if (slots[i].result == 0) {
			local_unpin(c, &slots[i], 1);
			rc--;
		}
		slots[i] = (kvt_slot){ .key = slots[i].key, .flags = slots[i].flags,
				       .result = -EINVAL };
	}
	return rc;
}

/* COMMIT (with each block's checksum) or ABORT of up to LP_KEYS_MAX slots
 * whose result is 0; the others are skipped. */
int lc_end_piece(struct local_client *c, kvt_slot *slots, size_t n, int publish)
{
	size_t each = publish ? sizeof(struct lp_commit) : 8, k = 0, got = 0;
	unsigned char *q = malloc(4 + n * each), *r = malloc(4 + n * 4);
	size_t *idx = malloc((n ? n : 1) * sizeof(*idx));
	int rc;

	if (!q || !r || !idx) {
		rc = kvt_fail(-ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (slots[i].result != 0)
			continue;
		struct lp_commit cm = { slots[i].ref, 0 };
		if (publish && slots[i].addr)
			cm.sum = kvt_checksum(slots[i].addr, slots[i].len);
		memcpy(q + 4 + k * each, &cm, each);
		idx[k++] = i;
	}
	uint32_t n32 = (uint32_t)k;
	memcpy(q, &n32, 4);
	rc = k ? lc_counted(c, lc_rpc(c, publish ? LP_COMMIT : LP_ABORT, q, 4 + k * each, NULL, 0,
				r, 4 + k * 4, &got), k) : 0;
	if (rc < 0 || !k)
		goto out;
	memcpy(&n32, r, 4);
	if (got != 4 + k * 4 || n32 != k) {
		rc = lc_broken(c);
		goto out;
	}
	for (size_t j = 0; j < k; j++) {
		int32_t res;
		memcpy(&res, r + 4 + j * 4, 4);
		kvt_slot *sl = &slots[idx[j]];
		sl->result = res;
		sl->ref = 0;
		sl->addr = NULL;
	}
out:
	free(q);
	free(r);
	free(idx);
	return rc;
}

int local_end(struct local_client *c, kvt_slot *slots, size_t n, int publish)
{
	int total = 0, before = 0;

	for (size_t i = 0; i < n; i++)
		before += slots[i].result == -ENOSPC;
	for (size_t i = 0; i < n; i += LP_KEYS_MAX) {
		size_t k = n - i < LP_KEYS_MAX ? n - i : LP_KEYS_MAX;
		int rc = lc_end_piece(c, slots + i, k, publish);
		if (rc < 0)
			return rc;
		total += rc;
	}
	int after = 0;
	for (size_t i = 0; i < n; i++)
		after += slots[i].result == -ENOSPC;
	/* a commit the node store refused (-ENOSPC) says why */
	if (after > before)
		lc_name_nospc("kvt_put_commit", slots, n);
	else if (total < (int)n)
		kvt_set_error("%s: %zu of the %zu slots were not live reservations",
			      publish ? "kvt_put_commit" : "kvt_put_abort", n - (size_t)total, n);
	return total;
}

int lc_unpin_now(struct local_client *c, const uint64_t *refs, size_t n)
{
	int total = 0;

	for (size_t i = 0; i < n; i += LP_KEYS_MAX) {
		uint32_t k = (uint32_t)(n - i < LP_KEYS_MAX ? n - i : LP_KEYS_MAX);
		int rc = lc_counted(c, lc_rpc(c, LP_UNPIN, &k, 4, refs + i, (size_t)k * 8, NULL, 0,
					NULL), k);
		if (rc < 0)
			return rc;
		total += rc;
	}
	return total;
}

/* The unpins of a finished get: they wait for the next request to carry
 * them when they fit beside those waiting already, else all go now, in
 * frames without a reply. */
int lc_unpin_later(struct local_client *c, const uint64_t *refs, size_t n)
{
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	if (c->ndefer + n <= LC_DEFER) {
		memcpy(c->defer + c->ndefer, refs, n * sizeof(*refs));
		c->ndefer += (uint32_t)n;
	} else {
		for (size_t i = 0; rc >= 0 && i < n; i += LP_KEYS_MAX) {
			uint32_t k = (uint32_t)(n - i < LP_KEYS_MAX ? n - i : LP_KEYS_MAX);
			rc = lc_rpc_locked(c, LP_UNPIN | LP_NOREPLY, &k, 4, refs + i,
					(size_t)k * 8, NULL, 0, NULL, NULL);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int local_unpin(struct local_client *c, const kvt_slot *slots, size_t n)
{
	uint64_t *refs = calloc(n ? n : 1, sizeof(*refs));
	size_t k = 0;

	if (!refs)
		return kvt_fail(-ENOMEM, "kvt_unpin: out of memory");
	for (size_t i = 0; i < n; i++)
		if (slots[i].ref)
			refs[k++] = slots[i].ref;
	int rc = lc_unpin_now(c, refs, k);
	free(refs);
	if (rc >= 0 && (size_t)rc < n)
		kvt_set_error("kvt_unpin: %zu of the %zu slots were not live pins "
			      "(ref 0, unpinned before, or lapsed after ram.pin_ms)",
			      n - (size_t)rc, n);
	return rc;
}
