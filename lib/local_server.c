/*
 * local_server.c - the node store's Unix socket (local.socket): processes
 * of this machine attach to the store (kvt_open with "attach") and share its
 * tiers and its arena, which they map from the memfd sent at HELLO.
 *
 * One acceptor thread, one thread per client, so a client that is slow to
 * send or to read its replies holds up nobody else. A client's thread
 * serves its requests through the store's public calls (kvt_lookup,
 * kvt_get_pin, kvt_put_reserve, ...), and records everything they leave
 * held for it: leases, pins and reservations, at most local.max_held in
 * all. The client names its pins and reservations by handles of its own
 * connection, never by the store's, so it can release only what it holds;
 * when the connection ends (exit, crash, kill -9) its thread releases all of
 * it before closing the socket. A reservation is published only once the
 * checksum of its bytes in the arena matches the one the client sent.
 *
 * Leases are per key in the tiers, so one client's lease of a key may be
 * another's too: a count per key (lease_map) tells when the last holder has
 * gone and the tiers' lease may end. Knows the store only through its
 * public calls; the protocol is in local_proto.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "local.h"
#include "local_proto.h"
#include "stats.h"

#define NIL UINT32_MAX

/* A map from keys to a value, chained. */
struct kent {
	kvt_key key;
	uint64_t val;
	struct kent *next;
};

struct kmap {
	struct kent **b;
	size_t nb, n;
};

enum held_kind { H_FREE = 0, H_PIN, H_RES };

/* A pin or reservation a client holds: its handle is (gen << 32 | index). */
struct held {
	kvt_key key;
	uint64_t sref;      /* the store's handle (kvt_slot.ref) */
	uint64_t off;
	uint32_t len;
	uint32_t gen;
	uint32_t next;      /* free list */
	uint8_t kind;
};

struct conn {
	struct local_server *srv;
	int fd;
	pthread_t th;
	struct conn *next;
	uid_t uid;
	pid_t pid;
	/* the connection's own thread only */
	struct held *held;
	uint32_t nheld, capheld, free_head;
	struct kmap leases;  /* key -> lease deadline (ns) */
	unsigned char *buf;
	size_t cap;
};

struct local_server {
	kvt_store *s;
	char *base;
	size_t arena_len;
	int arena_fd;
	uint64_t max_block, lease_ns;
	uint32_t lease_ms, pin_ms;
	unsigned max_clients, max_held, mode;
	uint32_t *uids, *gids;
	unsigned nuids, ngids;
	char *path;
	dev_t dev;
	ino_t ino;
	int lfd;
	int wake[2];
	pthread_t acceptor;
	int acceptor_started;

	pthread_mutex_t lock;  /* conns, dead, nconns, stopping */
	pthread_cond_t cond;
	struct conn *conns, *dead;
	unsigned nconns;
	int stopping;

	pthread_mutex_t lease_lock;
	struct kmap lease_map; /* key -> clients holding a lease of it */

	_Atomic uint64_t accepted, refused, malformed;
	_Atomic uint64_t leased_blocks, pinned_blocks, pinned_bytes;
	_Atomic uint64_t reserved_blocks, reserved_bytes, checksum_refusals;
};

/* --- key map ------------------------------------------------------------------- */

static size_t kslot(const struct kmap *m, kvt_key k)
{
	return (size_t)((k.lo ^ (k.hi >> 7)) & (m->nb - 1));
}

static struct kent *kmap_find(const struct kmap *m, kvt_key k)
{
	if (!m->nb)
		return NULL;
	for (struct kent *e = m->b[kslot(m, k)]; e; e = e->next)
		if (kvt_key_eq(e->key, k))
			return e;
	return NULL;
}

/* Adds k (absent) with val; -ENOMEM. */
static int kmap_add(struct kmap *m, kvt_key k, uint64_t val)
{
	if (m->n >= m->nb) {
		size_t nb = m->nb ? m->nb * 2 : 64;
		struct kent **b = calloc(nb, sizeof(*b));
		if (!b)
			return -ENOMEM;
		for (size_t i = 0; i < m->nb; i++) {
			struct kent *e = m->b[i], *x;
			for (; e; e = x) {
				x = e->next;
				size_t j = (size_t)((e->key.lo ^ (e->key.hi >> 7)) & (nb - 1));
				e->next = b[j];
				b[j] = e;
			}
		}
		free(m->b);
		m->b = b;
		m->nb = nb;
	}
	struct kent *e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	size_t j = kslot(m, k);
	e->key = k;
	e->val = val;
	e->next = m->b[j];
	m->b[j] = e;
	m->n++;
	return 0;
}

static void kmap_del(struct kmap *m, kvt_key k)
{
	if (!m->nb)
		return;
	for (struct kent **p = &m->b[kslot(m, k)]; *p; p = &(*p)->next) {
		if (kvt_key_eq((*p)->key, k)) {
			struct kent *e = *p;
			*p = e->next;
			free(e);
			m->n--;
			return;
		}
	}
}

static void kmap_free(struct kmap *m)
{
	for (size_t i = 0; i < m->nb; i++) {
		struct kent *e = m->b[i], *x;
		for (; e; e = x) {
			x = e->next;
			free(e);
		}
	}
	free(m->b);
	m->b = NULL;
	m->nb = m->n = 0;
}

/* --- leases of a client ---------------------------------------------------------- */

/* One more client leases k. Lease lock held. */
static int lease_hold(struct local_server *srv, kvt_key k)
{
	struct kent *e = kmap_find(&srv->lease_map, k);

	if (e) {
		e->val++;
		return 0;
	}
	return kmap_add(&srv->lease_map, k, 1);
}

/* Ends c's lease of k (which it holds); the tiers' lease ends with the
 * last holder's, unless it lapsed already (then another caller may hold
 * it now). Returns 1 if the tiers' lease was ended. */
static int lease_drop(struct conn *c, struct kent *ce)
{
	struct local_server *srv = c->srv;
	kvt_key k = ce->key;
	int live = ce->val > kvt_now_ns(), last = 0, ended = 0;

	kmap_del(&c->leases, k);
	atomic_fetch_sub(&srv->leased_blocks, 1);
	pthread_mutex_lock(&srv->lease_lock);
	struct kent *e = kmap_find(&srv->lease_map, k);
	if (e && --e->val == 0) {
		kmap_del(&srv->lease_map, k);
		last = 1;
	}
	if (last && live)
		ended = kvt_release(srv->s, &k, 1) > 0;
	pthread_mutex_unlock(&srv->lease_lock);
	return ended;
}

/* Forgets c's leases that lapsed. */
static void leases_sweep(struct conn *c)
{
	uint64_t now = kvt_now_ns();

	for (size_t i = 0; i < c->leases.nb; i++) {
		struct kent *e = c->leases.b[i], *x;
		for (; e; e = x) {
			x = e->next;
			if (e->val <= now)
				lease_drop(c, e);
		}
	}
}

/* --- pins and reservations of a client ---------------------------------------- */

static uint32_t held_count(const struct conn *c)
{
	return c->nheld + (uint32_t)c->leases.n;
}

/* A new held record; its handle in *ref. NIL when the table cannot grow. */
static uint32_t held_new(struct conn *c, int kind, kvt_key key, uint64_t sref,
			 uint64_t off, uint32_t len, uint64_t *ref)
{
	if (c->free_head == NIL) {
		uint32_t n = c->capheld ? c->capheld * 2 : 64;
		struct held *h = realloc(c->held, (size_t)n * sizeof(*h));
		if (!h)
			return NIL;
		memset(h + c->capheld, 0, (size_t)(n - c->capheld) * sizeof(*h));
		for (uint32_t i = n; i-- > c->capheld;) {
			h[i].gen = 1;
			h[i].next = c->free_head;
			c->free_head = i;
		}
		c->held = h;
		c->capheld = n;
	}
	uint32_t id = c->free_head;
	struct held *h = &c->held[id];
	c->free_head = h->next;
	h->kind = (uint8_t)kind;
	h->key = key;
	h->sref = sref;
	h->off = off;
	h->len = len;
	c->nheld++;
	*ref = (uint64_t)h->gen << 32 | id;
	struct local_server *srv = c->srv;
	atomic_fetch_add(kind == H_PIN ? &srv->pinned_blocks : &srv->reserved_blocks, 1);
	atomic_fetch_add(kind == H_PIN ? &srv->pinned_bytes : &srv->reserved_bytes, len);
	return id;
}

/* The record a client's handle names, of kind; NULL if none. */
static struct held *held_of(struct conn *c, uint64_t ref, int kind)
{
	uint32_t id = (uint32_t)ref;

	if (id >= c->capheld || c->held[id].gen != (uint32_t)(ref >> 32) ||
	    c->held[id].kind != kind)
		return NULL;
	return &c->held[id];
}

static void held_free(struct conn *c, struct held *h)
{
	struct local_server *srv = c->srv;
	uint32_t id = (uint32_t)(h - c->held);

	atomic_fetch_sub(h->kind == H_PIN ? &srv->pinned_blocks : &srv->reserved_blocks, 1);
	atomic_fetch_sub(h->kind == H_PIN ? &srv->pinned_bytes : &srv->reserved_bytes, h->len);
	h->kind = H_FREE;
	h->gen = h->gen + 1 ? h->gen + 1 : 1;
	h->next = c->free_head;
	c->free_head = id;
	c->nheld--;
}

/* Gives the store back what h holds (unpin, or abort) and frees it. */
static int held_end(struct conn *c, struct held *h)
{
	kvt_slot sl = { .key = h->key, .ref = h->sref, .len = h->len };
	int rc = h->kind == H_PIN ? kvt_unpin(c->srv->s, &sl, 1)
				  : kvt_put_abort(c->srv->s, &sl, 1);
	held_free(c, h);
	return rc;
}

/* Everything a client holds, given back: at the end of its connection. */
static void conn_release_all(struct conn *c)
{
	for (uint32_t i = 0; i < c->capheld; i++)
		if (c->held[i].kind != H_FREE)
			held_end(c, &c->held[i]);
	for (size_t i = 0; i < c->leases.nb; i++) {
		struct kent *e = c->leases.b[i], *x;
		for (; e; e = x) {
			x = e->next;
			lease_drop(c, e);
		}
	}
	kmap_free(&c->leases);
	free(c->held);
	c->held = NULL;
	c->capheld = c->nheld = 0;
	c->free_head = NIL;
}

/* --- socket I/O ------------------------------------------------------------------- */

/* Reads exactly len bytes: 0, or -1 at end of file or on error. */
static int read_full(int fd, void *p, size_t len)
{
	while (len) {
		ssize_t r = recv(fd, p, len, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p = (char *)p + r;
		len -= (size_t)r;
	}
	return 0;
}

/* Sends a reply: header, the i32 status, then body; with fd (>= 0) passed
 * along. 0 or -1. */
static int send_reply(int sock, int type, int32_t status, const void *body,
		      size_t blen, int fd)
{
	struct lp_hdr h = { LP_MAGIC, LP_VERSION, (uint8_t)(type | LP_REPLY),
			    (uint32_t)(sizeof(status) + blen) };
	struct iovec iov[3] = { { &h, sizeof(h) }, { &status, sizeof(status) },
				{ (void *)body, blen } };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = blen ? 3 : 2 };

	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = sizeof(u.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	return lp_send_all(sock, &m);
}

/* A failure reply: the status and kvt_last_error()'s text. */
static int send_error(int sock, int type, int err)
{
	const char *t = kvt_last_error();
	size_t n = strlen(t);

	return send_reply(sock, type, err, t, n > LP_TEXT_MAX ? LP_TEXT_MAX : n, -1);
}

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
		return send_error(c->fd, type, kvt_fail(-EINVAL, "kvt_lookup: unknown flags 0x%x",
							flags & ~KVT_LEASE));
	kvt_key *keys = malloc(((size_t)n + 1) * sizeof(*keys));
	if (!keys)
		return send_error(c->fd, type, kvt_fail(-ENOMEM, "kvt_lookup: out of memory"));
	get_keys(p + 8, keys, n);
	size_t m = n;
	if (flags & KVT_LEASE) {
		/* Only as many leases as local.max_held leaves room for. */
		if (held_count(c) + n > c->srv->max_held)
			leases_sweep(c);
		size_t room = c->srv->max_held - held_count(c);
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
			struct kent *e = kmap_find(&c->leases, keys[i]);
			if (e) {
				e->val = until;
			} else if (kmap_add(&c->leases, keys[i], until) == 0) {
				if (lease_hold(c->srv, keys[i]) == 0) {
					atomic_fetch_add(&c->srv->leased_blocks, 1);
				} else {
					kmap_del(&c->leases, keys[i]);
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
		return send_error(c->fd, type, rc);
	uint32_t f = (uint32_t)found;
	return send_reply(c->fd, type, 0, &f, sizeof(f), -1) ? -1 : 0;
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
		struct kent *e = kmap_find(&c->leases, k);
		if (e) {
			lease_drop(c, e);
			ended++;
		}
	}
	return send_reply(c->fd, type, ended, NULL, 0, -1);
}

static int do_remove(struct conn *c, int type, const unsigned char *p, size_t len)
{
	kvt_key k;

	if (len != sizeof(struct lp_key))
		return -1;
	get_keys(p, &k, 1);
	int rc = kvt_remove(c->srv->s, k);
	return rc ? send_error(c->fd, type, rc) : send_reply(c->fd, type, 0, NULL, 0, -1);
}

static int do_stats(struct conn *c, int type, size_t len)
{
	if (len)
		return -1;
	int n = kvt_stats_json(c->srv->s, NULL, 0);
	if (n < 0)
		return send_error(c->fd, type, n);
	if ((size_t)n + 1 > LP_STATS_MAX)
		return send_error(c->fd, type, kvt_fail(-EOVERFLOW, "kvt_stats_json: "
							"document too large"));
	char *t = malloc((size_t)n + 256);
	if (!t)
		return send_error(c->fd, type, kvt_fail(-ENOMEM, "kvt_stats_json: out of memory"));
	n = kvt_stats_json(c->srv->s, t, (size_t)n + 256);
	int rc = n < 0 ? send_error(c->fd, type, n)
		       : send_reply(c->fd, type, 0, t, strlen(t), -1);
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
		return send_error(c->fd, type, kvt_fail(-ENOMEM, "out of memory"));
	memcpy(b, &n, 4);
	memcpy(b + 4, out, (size_t)n * sizeof(*out));
	int rc = send_reply(c->fd, type, status, b, blen, -1);
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
		if (held_new(c, kind, sl[i].key, sl[i].ref, off, (uint32_t)sl[i].len, &ref) == NIL) {
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
	if (held_count(c) + n > c->srv->max_held)
		leases_sweep(c);
	uint32_t room = c->srv->max_held - held_count(c);
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
		rc = send_error(c->fd, type, kvt_fail(-ENOMEM, "kvt_get_pin: out of memory"));
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		get_keys(p + 4 + (size_t)i * sizeof(struct lp_key), &sl[i].key, 1);
	uint32_t m = room_for(c, n);
	int r = kvt_get_pin(c->srv->s, sl, m, 0, &b);
	if (r < 0) {
		rc = send_error(c->fd, type, r);
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
	int32_t count = 0;
	int rc = 0;

	if (!sl || !out) {
		rc = send_error(c->fd, type, kvt_fail(-ENOMEM, "kvt_put_reserve: out of memory"));
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct lp_want w;
		memcpy(&w, p + 4 + (size_t)i * sizeof(w), sizeof(w));
		sl[i].key = (kvt_key){ w.key.lo, w.key.hi };
		sl[i].len = w.len > SIZE_MAX ? SIZE_MAX : (size_t)w.len;
	}
	uint32_t m = room_for(c, n);
	int r = kvt_put_reserve(c->srv->s, sl, m, 0);
	if (r < 0) {
		rc = send_error(c->fd, type, r);
		goto out;
	}
	for (uint32_t i = m; i < n; i++)
		sl[i].result = -EAGAIN;
	slots_out(c, H_RES, sl, n, out, &count);
	rc = send_slots(c, type, count, out, n);
out:
	free(sl);
	free(out);
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
		return send_error(c->fd, type, kvt_fail(-ENOMEM, "out of memory"));
	memcpy(b, &n, 4);
	for (uint32_t i = 0; i < n; i++) {
		struct lp_commit cm = { 0, 0 };
		memcpy(&cm, p + 4 + (size_t)i * each, each);
		struct held *h = held_of(c, cm.ref, H_RES);
		int32_t res;
		if (!h) {
			res = -ESTALE;
		} else if (!publish) {
			res = held_end(c, h) == 1 ? 0 : -ESTALE;
		} else if (kvt_checksum(c->srv->base + h->off, h->len) != cm.sum) {
			/* Not the bytes the client meant: never visible. */
			held_end(c, h);
			atomic_fetch_add(&c->srv->checksum_refusals, 1);
			res = -EBADMSG;
		} else {
			kvt_slot sl = { .key = h->key, .ref = h->sref, .len = h->len };
			held_free(c, h);
			kvt_put_commit(c->srv->s, &sl, 1);
			res = sl.result;
		}
		done += res == 0;
		memcpy(b + 4 + (size_t)i * 4, &res, 4);
	}
	int rc = send_reply(c->fd, type, done, b, blen, -1);
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
		struct held *h = held_of(c, ref, H_PIN);
		if (h)
			done += held_end(c, h) == 1;
	}
	if (type & LP_NOREPLY)
		return 0;
	return send_reply(c->fd, type, done, NULL, 0, -1);
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
	return rc ? send_error(c->fd, type, rc) : send_reply(c->fd, type, 0, NULL, 0, -1);
}

/* Serves one request; -1 ends the connection. */
static int serve(struct conn *c, int type, const unsigned char *p, size_t len)
{
	int t = type & ~LP_NOREPLY;

	if ((type & LP_NOREPLY) && t != LP_UNPIN)
		return -1; /* only an unpin may go unanswered */
	switch (t) {
	case LP_LOOKUP: return do_lookup(c, t, p, len);
	case LP_RELEASE: return do_release(c, t, p, len);
	case LP_REMOVE: return do_remove(c, t, p, len);
	case LP_STATS: return do_stats(c, t, len);
	case LP_PIN: return do_pin(c, t, p, len);
	case LP_UNPIN: return do_unpin(c, type, p, len);
	case LP_RESERVE: return do_reserve(c, t, p, len);
	case LP_COMMIT: return do_end(c, t, p, len, 1);
	case LP_ABORT: return do_end(c, t, p, len, 0);
	case LP_PUT: return do_put(c, t, p, len);
	}
	return -1;
}

/* Reads a frame header and checks it; the payload's length in *len. */
static int read_header(struct conn *c, int *type, size_t *len)
{
	struct lp_hdr h;

	if (read_full(c->fd, &h, sizeof(h)))
		return -1;
	if (h.magic != LP_MAGIC || h.version != LP_VERSION ||
	    h.len > lp_payload_max(c->srv->max_block))
		return -2;
	*type = h.type;
	*len = h.len;
	return 0;
}

/* The HELLO: the client's version, answered with the arena's memfd. */
static int hello(struct conn *c)
{
	uint32_t version;
	size_t len;
	int type, r = read_header(c, &type, &len);

	if (r)
		return r;
	if (type != LP_HELLO || len != 4 || read_full(c->fd, &version, 4))
		return -2;
	if (version != LP_VERSION) {
		kvt_set_error("the node store at %s speaks version %u of the local "
			      "protocol, this client %u", c->srv->path, LP_VERSION, version);
		send_error(c->fd, LP_HELLO, -EPROTONOSUPPORT);
		return -1;
	}
	struct lp_hello hl = {
		.version = LP_VERSION, .lease_ms = c->srv->lease_ms,
		.arena_len = c->srv->arena_len, .max_block = c->srv->max_block,
		.pin_ms = c->srv->pin_ms, .max_keys = LP_KEYS_MAX,
	};
	return send_reply(c->fd, LP_HELLO, 0, &hl, sizeof(hl), c->srv->arena_fd);
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct local_server *srv = c->srv;
	int r = hello(c);

	while (r == 0) {
		int type;
		size_t len;

		if ((r = read_header(c, &type, &len)))
			break;
		if (len > c->cap) {
			free(c->buf);
			c->cap = 0;
			if (!(c->buf = malloc(len))) {
				r = -1;
				break;
			}
			c->cap = len;
		}
		if (read_full(c->fd, c->buf, len)) {
			r = -1;
			break;
		}
		r = serve(c, type, c->buf, len) ? -2 : 0;
		/* A large PUT's buffer is not kept for a client that idles. */
		if (c->cap > (1u << 20)) {
			free(c->buf);
			c->buf = NULL;
			c->cap = 0;
		}
	}
	if (r == -2) {
		atomic_fetch_add(&srv->malformed, 1);
		kvt_log(KVT_LOG_WARN, "local: process %d (uid %u) sent a malformed frame; "
			"its connection is closed", (int)c->pid, (unsigned)c->uid);
	}
	/* Everything the client held goes back before its socket closes, so
	 * once it sees the end, the store shows nothing held for it. */
	conn_release_all(c);
	free(c->buf);
	c->buf = NULL;
	pthread_mutex_lock(&srv->lock);
	close(c->fd);
	c->fd = -1;
	struct conn **pp = &srv->conns;
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	c->next = srv->dead;
	srv->dead = c;
	srv->nconns--;
	pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
	/* Wake the acceptor to join this thread. */
	ssize_t w = write(srv->wake[1], "", 1);
	(void)w; /* a full pipe already wakes it */
	return NULL;
}

/* Joins the threads of closed connections. Takes srv->lock. */
static void reap_dead(struct local_server *srv)
{
	pthread_mutex_lock(&srv->lock);
	struct conn *d = srv->dead;
	srv->dead = NULL;
	pthread_mutex_unlock(&srv->lock);
	while (d) {
		struct conn *x = d->next;
		pthread_join(d->th, NULL);
		free(d);
		d = x;
	}
}

/* --- accepting --------------------------------------------------------------------- */

static int allowed(const struct local_server *srv, const struct ucred *cr)
{
	if (cr->uid == geteuid())
		return 1;
	if ((srv->mode & 0070) && cr->gid == getegid())
		return 1;
	for (unsigned i = 0; i < srv->nuids; i++)
		if (srv->uids[i] == cr->uid)
			return 1;
	for (unsigned i = 0; i < srv->ngids; i++)
		if (srv->gids[i] == cr->gid)
			return 1;
	return 0;
}

/* Answers a client's HELLO-to-be with a refusal and closes it. */
static void refuse(struct local_server *srv, int fd, int err, const char *why)
{
	size_t n = strlen(why);

	atomic_fetch_add(&srv->refused, 1);
	struct lp_hdr h = { LP_MAGIC, LP_VERSION, LP_HELLO | LP_REPLY, (uint32_t)(4 + n) };
	int32_t st = err;
	unsigned char b[sizeof(h) + 4 + 256];
	if (n > 256)
		n = 256;
	h.len = (uint32_t)(4 + n);
	memcpy(b, &h, sizeof(h));
	memcpy(b + sizeof(h), &st, 4);
	memcpy(b + sizeof(h) + 4, why, n);
	ssize_t w = send(fd, b, sizeof(h) + 4 + n, MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)w; /* a client that cannot take it learns from the close */
	close(fd);
}

static void accept_one(struct local_server *srv)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	char why[256];
	int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || !allowed(srv, &cr)) {
		snprintf(why, sizeof(why), "the node store at %s does not serve uid %u gid %u "
			 "(local.uids, local.gids)", srv->path, (unsigned)cr.uid, (unsigned)cr.gid);
		kvt_log(KVT_LOG_WARN, "local: refused process %d: uid %u gid %u is not allowed",
			(int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
		refuse(srv, fd, -EACCES, why);
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	pthread_mutex_lock(&srv->lock);
	int full = srv->nconns >= srv->max_clients;
	if (c && !full) {
		c->srv = srv;
		c->fd = fd;
		c->uid = cr.uid;
		c->pid = cr.pid;
		c->free_head = NIL;
		if (pthread_create(&c->th, NULL, conn_main, c) == 0) {
			c->next = srv->conns;
			srv->conns = c;
			srv->nconns++;
			atomic_fetch_add(&srv->accepted, 1);
			pthread_mutex_unlock(&srv->lock);
			return;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	free(c);
	snprintf(why, sizeof(why), "the node store at %s %s", srv->path,
		 full ? "serves local.max_clients processes already" : "is out of memory");
	refuse(srv, fd, full ? -EUSERS : -ENOMEM, why);
}

static void *acceptor_main(void *arg)
{
	struct local_server *srv = arg;
	struct pollfd pf[2] = { { srv->lfd, POLLIN, 0 }, { srv->wake[0], POLLIN, 0 } };

	for (;;) {
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents) {
			char b[64];
			ssize_t r = read(srv->wake[0], b, sizeof(b));
			(void)r;
		}
		reap_dead(srv);
		pthread_mutex_lock(&srv->lock);
		int stop = srv->stopping;
		pthread_mutex_unlock(&srv->lock);
		if (stop)
			break;
		if (pf[0].revents & POLLIN)
			accept_one(srv);
	}
	return NULL;
}

/* Binds path, taking over a socket file nobody listens on any more. */
static int bind_socket(struct local_server *srv)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct stat st;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", srv->path);
	srv->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (srv->lfd < 0)
		return kvt_fail(-errno, "local.socket: socket: %s", strerror(errno));
	if (lstat(srv->path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return kvt_fail(-EEXIST, "local.socket: %s exists and is not a socket",
					srv->path);
		int t = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int live = t >= 0 && connect(t, (struct sockaddr *)&a, sizeof(a)) == 0;
		if (t >= 0)
			close(t);
		if (live)
			return kvt_fail(-EADDRINUSE, "local.socket: another store serves %s",
					srv->path);
		unlink(srv->path); /* left by a store that is gone */
	}
	/* The socket file is made with the mode asked, never wider. */
	mode_t old = umask(0777 & ~srv->mode);
	int rc = bind(srv->lfd, (struct sockaddr *)&a, sizeof(a));
	int e = errno;
	umask(old);
	if (rc)
		return kvt_fail(-e, "local.socket: bind %s: %s", srv->path, strerror(e));
	if (chmod(srv->path, srv->mode) || lstat(srv->path, &st)) {
		e = errno;
		unlink(srv->path);
		return kvt_fail(-e, "local.socket: chmod %s: %s", srv->path, strerror(e));
	}
	srv->dev = st.st_dev;
	srv->ino = st.st_ino;
	if (listen(srv->lfd, 128)) {
		e = errno;
		unlink(srv->path);
		return kvt_fail(-e, "local.socket: listen %s: %s", srv->path, strerror(e));
	}
	return 0;
}

int local_server_open(const struct kvt_config *cfg, kvt_store *s, int arena_fd,
		      struct local_server **out)
{
	struct local_server *srv = calloc(1, sizeof(*srv));
	void *base = NULL;
	size_t alen = 0;
	int rc;

	if (!srv)
		return kvt_fail(-ENOMEM, "local.socket: out of memory");
	kvt_arena(s, &base, &alen);
	srv->s = s;
	srv->base = base;
	srv->arena_len = alen;
	srv->arena_fd = arena_fd;
	srv->max_block = cfg->max_block;
	srv->lease_ms = cfg->lease_ms;
	srv->lease_ns = (uint64_t)cfg->lease_ms * 1000000ull;
	srv->pin_ms = cfg->pin_ms;
	srv->max_clients = cfg->local_max_clients;
	srv->max_held = cfg->local_max_held;
	srv->mode = cfg->local_mode;
	srv->lfd = srv->wake[0] = srv->wake[1] = -1;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->cond, NULL);
	pthread_mutex_init(&srv->lease_lock, NULL);
	srv->path = strdup(cfg->local_socket);
	srv->nuids = cfg->local_nuids;
	srv->ngids = cfg->local_ngids;
	srv->uids = calloc(srv->nuids + 1, sizeof(uint32_t));
	srv->gids = calloc(srv->ngids + 1, sizeof(uint32_t));
	if (!srv->path || !srv->uids || !srv->gids) {
		rc = kvt_fail(-ENOMEM, "local.socket: out of memory");
		goto fail;
	}
	if (srv->nuids)
		memcpy(srv->uids, cfg->local_uids, srv->nuids * sizeof(uint32_t));
	if (srv->ngids)
		memcpy(srv->gids, cfg->local_gids, srv->ngids * sizeof(uint32_t));
	if (arena_fd < 0) {
		rc = kvt_fail(-EINVAL, "local.socket: the arena is not shared");
		goto fail;
	}
	if (pipe2(srv->wake, O_CLOEXEC | O_NONBLOCK)) {
		rc = kvt_fail(-errno, "local.socket: pipe: %s", strerror(errno));
		goto fail;
	}
	if ((rc = bind_socket(srv)))
		goto fail;
	/* Set before any client is served: their threads read the store's
	 * statistics, which name the server. */
	*out = srv;
	if (pthread_create(&srv->acceptor, NULL, acceptor_main, srv)) {
		*out = NULL;
		unlink(srv->path);
		rc = kvt_fail(-ENOMEM, "local.socket: cannot start the acceptor thread");
		goto fail;
	}
	srv->acceptor_started = 1;
	kvt_log(KVT_LOG_INFO, "local: serving attached processes on %s", srv->path);
	return 0;
fail:
	local_server_close(srv);
	return rc;
}

void local_server_close(struct local_server *srv)
{
	struct stat st;

	if (!srv)
		return;
	if (srv->acceptor_started) {
		pthread_mutex_lock(&srv->lock);
		srv->stopping = 1;
		pthread_mutex_unlock(&srv->lock);
		ssize_t w = write(srv->wake[1], "", 1);
		(void)w;
		pthread_join(srv->acceptor, NULL);
		/* Wake every client's thread; each releases what its client
		 * holds and leaves. */
		pthread_mutex_lock(&srv->lock);
		for (struct conn *c = srv->conns; c; c = c->next)
			shutdown(c->fd, SHUT_RDWR);
		while (srv->nconns)
			pthread_cond_wait(&srv->cond, &srv->lock);
		pthread_mutex_unlock(&srv->lock);
		reap_dead(srv);
		if (lstat(srv->path, &st) == 0 && st.st_dev == srv->dev && st.st_ino == srv->ino)
			unlink(srv->path);
	}
	if (srv->lfd >= 0)
		close(srv->lfd);
	for (int i = 0; i < 2; i++)
		if (srv->wake[i] >= 0)
			close(srv->wake[i]);
	kmap_free(&srv->lease_map);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->cond);
	pthread_mutex_destroy(&srv->lease_lock);
	free(srv->path);
	free(srv->uids);
	free(srv->gids);
	free(srv);
}

void local_server_stats(struct local_server *srv, const struct stat_visitor *v)
{
	pthread_mutex_lock(&srv->lock);
	unsigned n = srv->nconns;
	pthread_mutex_unlock(&srv->lock);
	stat_int(v, "clients", n);
	stat_int(v, "max_clients", srv->max_clients);
	stat_int(v, "clients_accepted", (int64_t)ctr_get(&srv->accepted));
	stat_int(v, "clients_refused", (int64_t)ctr_get(&srv->refused));
	stat_int(v, "malformed_frames", (int64_t)ctr_get(&srv->malformed));
	stat_int(v, "checksum_refusals", (int64_t)ctr_get(&srv->checksum_refusals));
	stat_int(v, "leased_blocks", (int64_t)ctr_get(&srv->leased_blocks));
	stat_int(v, "pinned_blocks", (int64_t)ctr_get(&srv->pinned_blocks));
	stat_int(v, "pinned_bytes", (int64_t)ctr_get(&srv->pinned_bytes));
	stat_int(v, "reserved_blocks", (int64_t)ctr_get(&srv->reserved_blocks));
	stat_int(v, "reserved_bytes", (int64_t)ctr_get(&srv->reserved_bytes));
}
