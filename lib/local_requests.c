/*
 * local_requests.c - serves one request frame of an attached client
 * (lookup, release, remove, stats, pin, unpin, reserve, commit, abort,
 * put) through the store's public calls, and counts the gets it served
 * itself from the directory (hits), recording what each leaves held in the
 * client's books (local_held.c) and answering through lsrv_send_reply
 * (local_server.c). A reservation is published only once
 * the checksum of its bytes in the arena matches the one the client sent.
 * Checks every payload's length against its counts: a malformed one
 * returns -1 and the connection closes. Knows nothing of accepting,
 * threads or how frames are read.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "local_proto.h"
#include "local_server_impl.h"
#include "slot.h"

/* --- requests: each returns 0 (answered) or -1 (malformed: close) ------------ */

/* Reads a u32 count n at p and checks the payload is exactly 4 + n * each
 * bytes (after skip bytes). */
static int list_len(const unsigned char *p, size_t len, size_t skip, size_t each,
		    uint32_t *n)
{
	if (len < skip + 4)
		return -1;
	memcpy(n, p + skip, 4);
	if (*n > LP_KEYS_MAX || len != skip + 4 + (size_t)*n * each)
		return -1;
	return 0;
}

static void get_keys(const unsigned char *p, kvt_key *keys, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct lp_key k;
		memcpy(&k, p + (size_t)i * sizeof(k), sizeof(k));
		keys[i] = (kvt_key){ k.lo, k.hi };
	}
}

static int do_lookup(struct conn *c, int type, const unsigned char *p, size_t len)
{
	uint32_t flags, n;
	size_t found = 0;
	int rc;

	if (list_len(p, len, 4, sizeof(struct lp_key), &n))
		return -1;
	memcpy(&flags, p, 4);
	if (flags & ~KVT_LEASE)
		return lsrv_send_error(c->fd, type, kvt_fail(-EINVAL, "kvt_lookup: unknown flags 0x%x",
							flags & ~KVT_LEASE));
	kvt_key *keys = malloc(((size_t)n + 1) * sizeof(*keys));
	if (!keys)
		return lsrv_send_error(c->fd, type, kvt_fail(-ENOMEM, "kvt_lookup: out of memory"));
	get_keys(p + 8, keys, n);
	size_t m = n;
	if (flags & KVT_LEASE) {
		/* Only as many leases as local.max_held leaves room for. */
		if (lsrv_held_count(c) + n > c->srv->max_held)
			lsrv_leases_sweep(c);
		size_t room = c->srv->max_held - lsrv_held_count(c);
		m = n < room ? n : room;
	}
	/* Under the lease lock, so that no other client's last release of a
	 * key ends the tiers' lease between this lookup and its count. */
	if (flags & KVT_LEASE)
		pthread_mutex_lock(&c->srv->lease_lock);
	rc = kvt_lookup(c->srv->s, keys, m, flags, &found);
	if (rc == 0 && (flags & KVT_LEASE)) {
		uint64_t until = kvt_now_ns() + c->srv->lease_ns;
		for (size_t i = 0; i < found; i++) {
			struct kent *e = lsrv_kmap_find(&c->leases, keys[i]);
			if (e) {
				e->val = until;
			} else if (lsrv_kmap_add(&c->leases, keys[i], until) == 0) {
				if (lsrv_lease_hold(c->srv, keys[i]) == 0) {
					atomic_fetch_add(&c->srv->leased_blocks, 1);
				} else {
					lsrv_kmap_del(&c->leases, keys[i]);
					found = i; /* cannot track it: the prefix ends */
				}
			} else {
				found = i;
			}
		}
	}
	if (flags & KVT_LEASE)
		pthread_mutex_unlock(&c->srv->lease_lock);
	free(keys);
	if (rc)
		return lsrv_send_error(c->fd, type, rc);
	uint32_t f = (uint32_t)found;
	return lsrv_send_reply(c->fd, type, 0, &f, sizeof(f), -1) ? -1 : 0;
}

static int do_release(struct conn *c, int type, const unsigned char *p, size_t len)
{
	uint32_t n;
	int ended = 0;

	if (list_len(p, len, 0, sizeof(struct lp_key), &n))
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		kvt_key k;
		get_keys(p + 4 + (size_t)i * sizeof(struct lp_key), &k, 1);
		struct kent *e = lsrv_kmap_find(&c->leases, k);
		if (e) {
			lsrv_lease_drop(c, e);
			ended++;
		}
	}
	return lsrv_send_reply(c->fd, type, ended, NULL, 0, -1);
}

static int do_remove(struct conn *c, int type, const unsigned char *p, size_t len)
{
	kvt_key k;

	if (len != sizeof(struct lp_key))
		return -1;
	get_keys(p, &k, 1);
	int rc = kvt_remove(c->srv->s, k);
	return rc ? lsrv_send_error(c->fd, type, rc) : lsrv_send_reply(c->fd, type, 0, NULL, 0, -1);
}

static int do_stats(struct conn *c, int type, size_t len)
{
	if (len)
		return -1;
	int n = kvt_stats_json(c->srv->s, NULL, 0);
	if (n < 0)
		return lsrv_send_error(c->fd, type, n);
	if ((size_t)n + 1 > LP_STATS_MAX)
		return lsrv_send_error(c->fd, type, kvt_fail(-EOVERFLOW, "kvt_stats_json: "
							"document too large"));
	char *t = malloc((size_t)n + 256);
	if (!t)
		return lsrv_send_error(c->fd, type, kvt_fail(-ENOMEM, "kvt_stats_json: out of memory"));
	n = kvt_stats_json(c->srv->s, t, (size_t)n + 256);
	int rc = n < 0 ? lsrv_send_error(c->fd, type, n)
		       : lsrv_send_reply(c->fd, type, 0, t, strlen(t), -1);
	free(t);
	return rc;
}

/* Replies to PIN and RESERVE: u32 n, lp_slot[n]. */
static int send_slots(struct conn *c, int type, int32_t status, struct lp_slot *out,
		      uint32_t n)
{
	size_t blen = 4 + (size_t)n * sizeof(*out);
	unsigned char *b = malloc(blen);

	if (!b)
		return lsrv_send_error(c->fd, type, kvt_fail(-ENOMEM, "out of memory"));
	memcpy(b, &n, 4);
	memcpy(b + 4, out, (size_t)n * sizeof(*out));
	int rc = lsrv_send_reply(c->fd, type, status, b, blen, -1);
	free(b);
	return rc;
}

/* The store's slots as the client sees them: each live one recorded as
 * held, with a handle of this connection. */
static void slots_out(struct conn *c, int kind, kvt_slot *sl, uint32_t n,
		      struct lp_slot *out, int32_t *count)
{
	*count = 0;
	for (uint32_t i = 0; i < n; i++) {
		out[i] = (struct lp_slot){ .result = sl[i].result, .len = (uint32_t)sl[i].len };
		if (sl[i].result != 0 || !sl[i].ref)
			continue;
		uint64_t off = (uint64_t)((char *)sl[i].addr - c->srv->base), ref;
		if (lsrv_held_new(c, kind, sl[i].key, sl[i].ref, off, (uint32_t)sl[i].len, &ref) == NIL) {
			if (kind == H_PIN)
				kvt_unpin(c->srv->s, &sl[i], 1);
			else
				kvt_put_abort(c->srv->s, &sl[i], 1);
			out[i].result = -ENOMEM;
			continue;
		}
		out[i].off = off;
		out[i].ref = ref;
		(*count)++;
	}
}

/* How many of n more slots local.max_held leaves room for. */
static uint32_t room_for(struct conn *c, uint32_t n)
{
	if (lsrv_held_count(c) + n > c->srv->max_held)
		lsrv_leases_sweep(c);
	uint32_t room = c->srv->max_held - lsrv_held_count(c);
	return n < room ? n : room;
}

static int do_pin(struct conn *c, int type, const unsigned char *p, size_t len)
{
	uint32_t n;

	if (list_len(p, len, 0, sizeof(struct lp_key), &n))
		return -1;
	kvt_slot *sl = calloc((size_t)n + 1, sizeof(*sl));
	struct lp_slot *out = calloc((size_t)n + 1, sizeof(*out));
	kvt_pin_batch *b = NULL;
	int32_t count = 0;
	int rc = 0;

	if (!sl || !out) {
		rc = lsrv_send_error(c->fd, type, kvt_fail(-ENOMEM, "kvt_get_pin: out of memory"));
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		get_keys(p + 4 + (size_t)i * sizeof(struct lp_key), &sl[i].key, 1);
	uint32_t m = room_for(c, n);
	int r = slot_get_pin(c->srv->s, sl, m, !!(type & LP_HELD), &b);
	if (r < 0) {
		rc = lsrv_send_error(c->fd, type, r);
		goto out;
	}
	/* Disk hits load into the shared arena here, so the client's slots are
	 * all ready when it hears of them. */
	for (;;) {
		size_t idx[64];
		int k = kvt_pin_reap(b, idx, 64, -1);
		if (k <= 0)
			break;
	}
	kvt_pin_free(b);
	for (uint32_t i = m; i < n; i++)
		sl[i].result = -EAGAIN;
	slots_out(c, H_PIN, sl, n, out, &count);
	rc = send_slots(c, type, count, out, n);
out:
	free(sl);
	free(out);
	return rc;
}

static int do_reserve(struct conn *c, int type, const unsigned char *p, size_t len)
{
	uint32_t n;

	if (list_len(p, len, 0, sizeof(struct lp_want), &n))
		return -1;
	kvt_slot *sl = calloc((size_t)n + 1, sizeof(*sl));
	struct lp_slot *out = calloc((size_t)n + 1, sizeof(*out));
	uint8_t *keep = calloc((size_t)n + 1, 1);
	int32_t count = 0;
	int rc = 0;

	if (!sl || !out || !keep) {
		rc = lsrv_send_error(c->fd, type, kvt_fail(-ENOMEM, "kvt_put_reserve: out of memory"));
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct lp_want w;
		memcpy(&w, p + 4 + (size_t)i * sizeof(w), sizeof(w));
		sl[i].key = (kvt_key){ w.key.lo, w.key.hi };
		keep[i] = !!(w.len & LP_WANT_HELD);
		w.len &= ~LP_WANT_HELD;
		sl[i].len = w.len > SIZE_MAX ? SIZE_MAX : (size_t)w.len;
	}
	uint32_t m = room_for(c, n);
	slot_reserve(store_slots(c->srv->s), sl, m, keep);
	for (uint32_t i = m; i < n; i++)
		sl[i].result = -EAGAIN;
	slots_out(c, H_RES, sl, n, out, &count);
	rc = send_slots(c, type, count, out, n);
out:
	free(sl);
	free(out);
	free(keep);
	return rc;
}

/* COMMIT (publish: checksums given) or ABORT of reservations. */
static int do_end(struct conn *c, int type, const unsigned char *p, size_t len,
		  int publish)
{
	size_t each = publish ? sizeof(struct lp_commit) : 8;
	uint32_t n;

	if (list_len(p, len, 0, each, &n))
		return -1;
	size_t blen = 4 + (size_t)n * 4;
	unsigned char *b = malloc(blen);
	int32_t done = 0;

	if (!b)
		return lsrv_send_error(c->fd, type, kvt_fail(-ENOMEM, "out of memory"));
	memcpy(b, &n, 4);
	for (uint32_t i = 0; i < n; i++) {
		struct lp_commit cm = { 0, 0 };
		memcpy(&cm, p + 4 + (size_t)i * each, each);
		struct held *h = lsrv_held_of(c, cm.ref, H_RES);
		int32_t res;
		if (!h) {
			res = -ESTALE;
		} else if (!publish) {
			res = lsrv_held_end(c, h) == 1 ? 0 : -ESTALE;
		} else if (kvt_checksum(c->srv->base + h->off, h->len) != cm.sum) {
			/* Not the bytes the client meant: never visible. */
			lsrv_held_end(c, h);
			atomic_fetch_add(&c->srv->checksum_refusals, 1);
			res = -EBADMSG;
		} else {
			kvt_slot sl = { .key = h->key, .ref = h->sref, .len = h->len };
			lsrv_held_free(c, h);
			kvt_put_commit(c->srv->s, &sl, 1);
			res = sl.result;
		}
		done += res == 0;
		memcpy(b + 4 + (size_t)i * 4, &res, 4);
	}
	int rc = lsrv_send_reply(c->fd, type, done, b, blen, -1);
	free(b);
	return rc;
}

static int do_unpin(struct conn *c, int type, const unsigned char *p, size_t len)
{
	uint32_t n;
	int32_t done = 0;

	if (list_len(p, len, 0, 8, &n))
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t ref;
		memcpy(&ref, p + 4 + (size_t)i * 8, 8);
		struct held *h = lsrv_held_of(c, ref, H_PIN);
		if (h)
			done += lsrv_held_end(c, h) == 1;
	}
	if (type & LP_NOREPLY)
		return 0;
	return lsrv_send_reply(c->fd, type, done, NULL, 0, -1);
}

static int do_put(struct conn *c, int type, const unsigned char *p, size_t len)
{
	uint64_t blen;
	kvt_key k;

	if (len < sizeof(struct lp_key) + 8)
		return -1;
	get_keys(p, &k, 1);
	memcpy(&blen, p + sizeof(struct lp_key), 8);
	if (blen != len - sizeof(struct lp_key) - 8)
		return -1;
	int rc = kvt_put(c->srv->s, k, p + sizeof(struct lp_key) + 8, (size_t)blen);
	return rc ? lsrv_send_error(c->fd, type, rc) : lsrv_send_reply(c->fd, type, 0, NULL, 0, -1);
}

/* Gets the client served itself from the directory: counted as hits and
 * refreshing the blocks' recency, as its pins would have. No reply. */
static int do_hits(struct conn *c, const unsigned char *p, size_t len)
{
	kvt_key keys[64];
	uint32_t n;

	if (list_len(p, len, 0, sizeof(struct lp_key), &n))
		return -1;
	for (uint32_t i = 0; i < n; i += 64) {
		uint32_t k = n - i < 64 ? n - i : 64;
		get_keys(p + 4 + (size_t)i * sizeof(struct lp_key), keys, k);
		store_note_ram_hits(c->srv->s, keys, k);
	}
	atomic_fetch_add_explicit(&c->srv->directory_hits, n, memory_order_relaxed);
	return 0;
}

/* Serves one request; -1 ends the connection. */
int lsrv_serve(struct conn *c, int type, const unsigned char *p, size_t len)
{
	int t = type & ~(LP_NOREPLY | LP_HELD);

	/* Only an unpin may go unanswered, and hits always do; only pins
	 * may be held. */
	if ((type & LP_NOREPLY) ? t != LP_UNPIN && t != LP_HITS : t == LP_HITS)
		return -1;
	if ((type & LP_HELD) && t != LP_PIN)
		return -1;
	switch (t) {
	case LP_LOOKUP: return do_lookup(c, t, p, len);
	case LP_RELEASE: return do_release(c, t, p, len);
	case LP_REMOVE: return do_remove(c, t, p, len);
	case LP_STATS: return do_stats(c, t, len);
	case LP_PIN: return do_pin(c, type, p, len);
	case LP_UNPIN: return do_unpin(c, type, p, len);
	case LP_RESERVE: return do_reserve(c, t, p, len);
	case LP_COMMIT: return do_end(c, t, p, len, 1);
	case LP_ABORT: return do_end(c, t, p, len, 0);
	case LP_PUT: return do_put(c, t, p, len);
	case LP_HITS: return do_hits(c, p, len);
	}
	return -1;
}
