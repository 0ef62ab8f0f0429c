/*
 * peer_server.c - the peer tier's server: the listener (members' addresses
 * only, a share of the slots per host before HELLO), one thread per
 * connection (HELLO naming a member of the source address, at most
 * peers.max_conns_per_member per member, idle connections closed), and the
 * requests of peer.h served from the local tiers through struct peer_local,
 * every length checked against the frame before anything is allocated.
 * Strangers are counted and logged at a bounded rate. Knows nothing about
 * the client side.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_int.h"
#include "stats.h"

struct conn {
	struct peer_tier *p;
	int fd;
	int slot;
	char from[INET6_ADDRSTRLEN]; /* source host, for messages */
	unsigned member;          /* after HELLO */
	uint8_t *buf;             /* a block's bytes */
	size_t cap;
	uint64_t t0;              /* when the request's first byte came (HELLO:
				     the connection was accepted); its header
				     and body are read by req_end() */
};

/* The deadline of a request's header and body: request_timeout_ms from its
 * first byte (and bytes more at 100 MB/s), however it trickles in. */
static uint64_t req_end(const struct conn *c, uint64_t bytes)
{
	return c->t0 + (uint64_t)c->p->request_ms * 1000000ull + bytes * 10;
}

/*
 * A connection refused as a stranger's: from an address that is no
 * member's, or whose first frame is not a member's HELLO. Counted always;
 * the first is logged, and those that follow within log_ms are counted
 * quietly and logged as one summary line when the period ends (by the
 * listener, or at close), so that strangers cannot flood the log.
 */
void peer_stranger(struct peer_tier *p, const char *from, const char *why)
{
	char what[sizeof(p->slog.last)];
	int first;

	ctr_add(&p->strangers, 1);
	snprintf(what, sizeof(what), "%s: %s", from, why);
	pthread_mutex_lock(&p->slock);
	first = log_limit_note(&p->slog, p->log_ms, what);
	pthread_mutex_unlock(&p->slock);
	if (first)
		kvt_log(KVT_LOG_WARN, "peer: refused a connection from %s: %s (more are "
			"counted in peer.connections_from_strangers and logged as one line "
			"per %u ms)", from, why, p->log_ms);
}

/*
 * Logs the summary of the strangers refused quietly, once their period has
 * ended (or now, with force). Returns the ms until it is due, or -1 when
 * none is pending.
 */
int peer_strangers_summary(struct peer_tier *p, int force)
{
	char last[sizeof(p->slog.last)];
	int wait;

	pthread_mutex_lock(&p->slock);
	uint64_t n = log_limit_due(&p->slog, p->log_ms, force, last, sizeof(last), &wait);
	pthread_mutex_unlock(&p->slock);
	if (n)
		kvt_log(KVT_LOG_WARN, "peer: refused %llu more connection%s from non-members "
			"within %u ms; the latest from %s", (unsigned long long)n,
			n == 1 ? "" : "s", p->log_ms, last);
	return wait;
}

/*
 * Logs a member's connection closed for what it sent: one line per log_ms
 * per member, the next line telling how many went unlogged meanwhile (all
 * are counted in peer.bad_messages), so that a process at a member's
 * address cannot flood the log either.
 */
static void member_closed_log(struct peer_tier *p, struct member *m, const char *why)
{
	uint64_t now = kvt_now_ns(), next = atomic_load(&m->elog_next);

	if (now < next || !atomic_compare_exchange_strong(&m->elog_next, &next,
							  now + (uint64_t)p->log_ms * 1000000ull)) {
		atomic_fetch_add(&m->elog_quiet, 1);
		return;
	}
	uint64_t quiet = atomic_exchange(&m->elog_quiet, 0);
	if (quiet)
		kvt_log(KVT_LOG_WARN, "peer: closing a connection from %s: %s (and %llu "
			"more from it not logged since the last such line)", m->name, why,
			(unsigned long long)quiet);
	else
		kvt_log(KVT_LOG_WARN, "peer: closing a connection from %s: %s (more are "
			"logged as one line per %u ms)", m->name, why, p->log_ms);
}

/* Sends an ERROR frame (best effort; the connection closes after it). */
static void send_error(struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void send_error(struct conn *c, const char *fmt, ...)
{
	uint8_t f[HDR + 256 + 1];
	va_list ap;

	va_start(ap, fmt);
	int len = vsnprintf((char *)f + HDR, 256, fmt, ap);
	va_end(ap);
	if (len < 0)
		len = 0;
	if (len > 255)
		len = 255;
	hdr_pack(f, T_ERROR, (uint32_t)len, 0, (uint64_t)len);
	peer_xfer(c->fd, f, HDR + (size_t)len, 1,
	     kvt_now_ns() + (uint64_t)c->p->request_ms * 1000000ull, -1);
	ctr_add(&c->p->bad_messages, 1);
	f[HDR + len] = 0;
	if (c->member < c->p->n)
		member_closed_log(c->p, &c->p->m[c->member], (char *)f + HDR);
	else
		peer_stranger(c->p, c->from, (char *)f + HDR);
}

static int grow(struct conn *c, size_t n)
{
	if (n <= c->cap)
		return 0;
	void *b = realloc(c->buf, n);
	if (!b)
		return -ENOMEM;
	c->buf = b;
	c->cap = n;
	return 0;
}

/* A GET_R frame: header, item header, and the block when status is 0,
 * whose checksum is sum. */
static int send_get_r(struct conn *c, int st, const void *block, uint64_t len,
		      uint64_t sum)
{
	uint8_t ih[HDR + ITEM];
	uint64_t dl = req_deadline(c->p);
	int e;

	hdr_pack(ih, T_GET | T_REPLY, 1, 0, ITEM + (st == 0 ? len : 0));
	put32(ih + HDR, (uint32_t)st);
	put32(ih + HDR + 4, 0);
	put64(ih + HDR + 8, st == 0 || st == -ENOBUFS ? len : 0);
	put64(ih + HDR + 16, st == 0 ? sum : 0);
	put64(ih + HDR + 24, 0);
	e = st == 0 ? peer_send_more(c->fd, ih, HDR + ITEM, dl)
		    : peer_xfer(c->fd, ih, HDR + ITEM, 1, dl, -1);
	if (!e && st == 0) {
		e = peer_xfer(c->fd, (void *)block, len, 1, dl, -1);
		ctr_add(&c->p->served_bytes, len);
	}
	return e;
}

struct visit_ctx {
	struct conn *c;
	int e;                    /* the connection's fate */
};

/* ram_visit's callback: sends the block straight from the arena, with the
 * checksum kept beside it (the loader verifies the bytes against it). */
static int send_in_place(void *arg, const void *block, size_t len, uint64_t sum)
{
	struct visit_ctx *v = arg;

	v->e = send_get_r(v->c, 0, block, len, sum);
	return 0;
}

/* LOOKUP and RELEASE: count keys in, an answer of count bytes (LOOKUP) or
 * none out. Returns 0 to go on, < 0 to close. */
static int serve_keys(struct conn *c, const struct hdr *h)
{
	struct peer_tier *p = c->p;
	uint64_t dl = req_end(c, 0);
	uint8_t out[HDR];
	int e;

	if (h->body_len != 16ull * h->count) {
		send_error(c, "body of %llu bytes for %u keys",
			   (unsigned long long)h->body_len, h->count);
		return -EPROTO;
	}
	size_t n = h->count;
	uint8_t *kb = malloc(16 * n + 1);
	kvt_key *keys = malloc(sizeof(*keys) * n + 1);
	uint8_t *present = calloc(n + 1, 1);
	e = (!kb || !keys || !present) ? -ENOMEM : peer_xfer(c->fd, kb, 16 * n, 0, dl, p->wake[0]);
	if (!e) {
		for (size_t i = 0; i < n; i++)
			keys[i] = key_unpack(kb + 16 * i);
		if (h->type == T_LOOKUP) {
			p->local.lookup(p->local.arg, keys, n, h->flags & 1, present);
			ctr_add(&p->served_lookups, 1);
			hdr_pack(out, T_LOOKUP | T_REPLY, h->count, 0, n);
			e = peer_xfer(c->fd, out, HDR, 1, dl, -1);
			if (!e)
				e = peer_xfer(c->fd, present, n, 1, dl, -1);
		} else {
			p->local.release(p->local.arg, keys, n);
			hdr_pack(out, T_RELEASE | T_REPLY, h->count, 0, 0);
			e = peer_xfer(c->fd, out, HDR, 1, dl, -1);
		}
	}
	free(kb);
	free(keys);
	free(present);
	return e;
}

/* GET: count items in, count GET_R frames out, each block sent from RAM in
 * place when it is there. */
static int serve_get(struct conn *c, const struct hdr *h)
{
	struct peer_tier *p = c->p;
	uint64_t dl = req_deadline(p);
	int e;

	if (h->body_len != 24ull * h->count) {
		send_error(c, "body of %llu bytes for %u GET items",
			   (unsigned long long)h->body_len, h->count);
		return -EPROTO;
	}
	size_t n = h->count;
	uint8_t *items = malloc(24 * n + 1);
	if (!items)
		return -ENOMEM;
	e = peer_xfer(c->fd, items, 24 * n, 0, req_end(c, 0), p->wake[0]);
	for (size_t i = 0; i < n && !e; i++) {
		kvt_key k = key_unpack(items + 24 * i);
		uint64_t cap = get64(items + 24 * i + 16);
		size_t len = 0;
		uint64_t sum = 0;
		int st = -ENOENT;

		if (cap > p->max_block)
			cap = p->max_block;
		ctr_add(&p->served_gets, 1);
		if (h->flags & F_RDMA) {
			/* a RAM block by descriptor; anything else inline */
			uint8_t f[HDR + DESC];
			if (peer_rdma_pin(p, (unsigned)c->slot, k, cap, f + HDR, &len) == 0) {
				hdr_pack(f, T_GET | T_REPLY, 1, F_RDMA, DESC);
				e = peer_xfer(c->fd, f, HDR + DESC, 1, dl, -1);
				continue;
			}
		}
		if (p->local.visit) {
			struct visit_ctx v = { .c = c };

			st = p->local.visit(p->local.arg, k, cap, send_in_place, &v, &len);
			if (st == 0) {
				e = v.e;
				continue;
			}
		}
		/* not in RAM: into the connection's buffer, grown to the
		 * block's size (never to what a request claims) */
		if (st == -ENOENT) {
			st = grow(c, 65536);
			if (!st)
				st = p->local.get(p->local.arg, k, c->buf, c->cap, &len, &sum);
			if (st == -ENOBUFS && len <= cap) {
				st = grow(c, len);
				if (!st)
					st = p->local.get(p->local.arg, k, c->buf, c->cap, &len,
							  &sum);
			}
			if (st == 0 && len > cap)
				st = -ENOBUFS;
		}
		if (st && st != -ENOENT && st != -ENOBUFS && st != -EBADMSG)
			st = -EIO;
		e = send_get_r(c, st, c->buf, len, sum);
	}
	free(items);
	return e;
}

/* PUT_R: one status per item. */
static int send_put_r(struct conn *c, const struct hdr *h, const uint8_t *res,
		      uint64_t dl)
{
	uint8_t out[HDR];

	hdr_pack(out, T_PUT | T_REPLY, h->count, 0, 4ull * h->count);
	int e = peer_xfer(c->fd, out, HDR, 1, dl, -1);
	if (!e)
		e = peer_xfer(c->fd, (void *)res, 4ull * h->count, 1, dl, -1);
	return e;
}

/*
 * PUT with F_RDMA: count offers (key, len, checksum, address, rkey of the
 * member's staging); their blocks are READ into reserved arena, checked and
 * published (peer_rdma_pull); one PUT_R with the results.
 */
static int serve_offer(struct conn *c, const struct hdr *h)
{
	struct peer_tier *p = c->p;
	size_t n = h->count;
	uint64_t dl = req_deadline(p), bytes = 0;
	int e;

	if (h->body_len != (uint64_t)OFFER * n) {
		send_error(c, "body of %llu bytes for %u PUT offers",
			   (unsigned long long)h->body_len, h->count);
		return -EPROTO;
	}
	uint8_t *items = malloc(OFFER * n + 1);
	kvt_key *keys = malloc(sizeof(*keys) * n + 1);
	struct rdesc *d = malloc(sizeof(*d) * n + 1);
	int32_t *res = malloc(sizeof(*res) * n + 1);
	uint8_t *out = malloc(4 * n + 1);
	e = items && keys && d && res && out ? 0 : -ENOMEM;
	if (!e)
		e = peer_xfer(c->fd, items, OFFER * n, 0, req_end(c, 0), p->wake[0]);
	for (size_t i = 0; i < n && !e; i++) {
		const uint8_t *it = items + OFFER * i;
		keys[i] = key_unpack(it);
		d[i] = (struct rdesc){ .op = i, .len = get64(it + 16), .sum = get64(it + 24),
				       .addr = get64(it + 32), .rkey = get32(it + 40) };
		if (d[i].len == 0 || d[i].len > p->max_block || d[i].len > UINT32_MAX) {
			send_error(c, "PUT offer %zu of %llu bytes (limit %llu)", i,
				   (unsigned long long)d[i].len,
				   (unsigned long long)p->max_block);
			e = -EPROTO;
		}
		bytes += d[i].len;
	}
	if (!e) {
		dl = trip_deadline(p, bytes);
		peer_rdma_pull(p, c->member, keys, d, n, res, dl);
		for (size_t i = 0; i < n; i++)
			put32(out + 4 * i, (uint32_t)res[i]);
		e = send_put_r(c, h, out, dl);
	}
	free(items);
	free(keys);
	free(d);
	free(res);
	free(out);
	return e;
}

/* UNPIN: count pin ids the member is done with; no answer. */
static int serve_unpin(struct conn *c, const struct hdr *h)
{
	size_t n = h->count;

	if (h->body_len != 8ull * n) {
		send_error(c, "body of %llu bytes for %u pins",
			   (unsigned long long)h->body_len, h->count);
		return -EPROTO;
	}
	uint8_t *b = malloc(8 * n + 1);
	uint64_t *ids = malloc(sizeof(*ids) * n + 1);
	int e = b && ids ? peer_xfer(c->fd, b, 8 * n, 0, req_end(c, 0), c->p->wake[0])
			 : -ENOMEM;
	for (size_t i = 0; i < n && !e; i++)
		ids[i] = get64(b + 8 * i);
	if (!e)
		peer_rdma_unpin(c->p, (unsigned)c->slot, ids, n);
	free(b);
	free(ids);
	return e;
}

/* PUT: count items, each checked and stored; one PUT_R with the results. */
static int serve_put(struct conn *c, const struct hdr *h)
{
	struct peer_tier *p = c->p;
	uint64_t left = h->body_len, dl;
	size_t n = h->count;
	uint8_t *res;
	int e;

	if (h->flags & F_RDMA)
		return serve_offer(c, h);
	/* checked before it sets the deadline: a body longer than count
	 * blocks can be would buy a hostile member months */
	if (h->body_len > (uint64_t)n * (ITEM + p->max_block)) {
		send_error(c, "PUT body of %llu bytes for %zu items (limit %llu each)",
			   (unsigned long long)h->body_len, n,
			   (unsigned long long)p->max_block);
		return -EPROTO;
	}
	dl = req_end(c, h->body_len);
	res = calloc(4 * n + 1, 1);

	if (!res)
		return -ENOMEM;
	e = 0;
	for (size_t i = 0; i < n && !e; i++) {
		uint8_t ih[ITEM];

		if (left < ITEM) {
			send_error(c, "PUT body ends inside item %zu", i);
			e = -EPROTO;
			break;
		}
		e = peer_xfer(c->fd, ih, ITEM, 0, dl, p->wake[0]);
		if (e)
			break;
		left -= ITEM;
		kvt_op op = { .key = key_unpack(ih) };
		uint64_t len = get64(ih + 16), sum = get64(ih + 24);
		if (len == 0 || len > p->max_block || len > left) {
			send_error(c, "PUT item %zu of %llu bytes (limit %llu, %llu left in the body)",
				   i, (unsigned long long)len,
				   (unsigned long long)p->max_block,
				   (unsigned long long)left);
			e = -EPROTO;
			break;
		}
		if (grow(c, len)) {
			e = -ENOMEM;
			break;
		}
		e = peer_xfer(c->fd, c->buf, len, 0, dl, p->wake[0]);
		if (e)
			break;
		left -= len;
		if (kvt_checksum(c->buf, len) != sum) {
			ctr_add(&p->checksum_failures, 1);
			put32(res + 4 * i, (uint32_t)-EBADMSG);
			continue; /* never stored */
		}
		op.buf = c->buf;
		op.len = len;
		p->local.put(p->local.arg, &op, 1);
		put32(res + 4 * i, (uint32_t)op.result);
		ctr_add(&p->served_puts, 1);
	}
	if (!e && left) {
		send_error(c, "PUT body has %llu bytes past its last item",
			   (unsigned long long)left);
		e = -EPROTO;
	}
	if (!e)
		e = send_put_r(c, h, res, dl);
	free(res);
	return e;
}

/* Serves one request whose header is h. Returns 0 to go on, < 0 to close. */
static int serve(struct conn *c, const struct hdr *h)
{
	if (h->count > PEER_KEYS_MAX) {
		send_error(c, "count %u exceeds %u", h->count, PEER_KEYS_MAX);
		return -EPROTO;
	}
	switch (h->type) {
	case T_LOOKUP:
	case T_RELEASE:
		return serve_keys(c, h);
	case T_GET:
		return serve_get(c, h);
	case T_PUT:
		return serve_put(c, h);
	case T_UNPIN:
		return serve_unpin(c, h);
	default:
		send_error(c, "unknown request type %u", h->type);
		return -EPROTO;
	}
}

/*
 * Keeps one member, or the connections from one host that have not said
 * HELLO yet (member NOBODY), within limit, not counting slot self: when
 * limit are open, the one idle the longest (for pending ones: accepted
 * first) is shut down, and its thread frees its slot. A connection that
 * holds pins is not idle for this: the member may be READing those blocks,
 * and closing it would end their pins under the READs. Returns -1 when
 * none can be closed. Called with clock held.
 */
static int make_room(struct peer_tier *p, unsigned member, unsigned host,
		     unsigned limit, int self)
{
	uint64_t now = kvt_now_ns();
	unsigned count = 0;
	int victim = -1;

	for (int i = 0; i < (int)CONNS_MAX; i++) {
		struct slot *s = &p->slots[i];
		if (s->fd < 0 || s->closing || i == self || s->member != member ||
		    (member == NOBODY && s->host != host))
			continue;
		count++;
		if ((member == NOBODY ||
		     (s->idle && peer_rdma_pinned_until(p, (unsigned)i) <= now)) &&
		    (victim < 0 || s->since < p->slots[victim].since))
			victim = i;
	}
	if (count < limit)
		return 0;
	if (victim < 0)
		return -1;
	p->slots[victim].closing = 1;
	shutdown(p->slots[victim].fd, SHUT_RDWR);
	ctr_add(&p->conns_evicted, 1);
	return 0;
}

/* Marks a slot idle (waiting for a request) or busy. Returns -1 when the
 * slot was shut down to make room meanwhile. */
static int set_idle(struct peer_tier *p, int slot, int idle)
{
	struct slot *s = &p->slots[slot];
	int r = 0;

	pthread_mutex_lock(&p->clock);
	if (s->closing) {
		r = -1;
	} else {
		s->idle = idle;
		s->since = kvt_now_ns();
	}
	pthread_mutex_unlock(&p->clock);
	return r;
}

/* HELLO: the first frame, naming a member of the connection's address. */
static int hello(struct conn *c, const struct sockaddr_storage *from)
{
	struct peer_tier *p = c->p;
	uint8_t b[HDR + NAME_MAX_WIRE + 1];
	struct hdr h;
	int e = peer_xfer(c->fd, b, HDR, 0, req_end(c, 0), p->wake[0]);

	if (e)
		return e;
	hdr_unpack(b, &h);
	if (h.magic != MAGIC || h.version != VERSION || h.type != T_HELLO ||
	    h.count == 0 || h.count > NAME_MAX_WIRE || h.body_len != h.count) {
		send_error(c, "expected a HELLO frame of protocol version %u", VERSION);
		return -EPROTO;
	}
	e = peer_xfer(c->fd, b, h.count, 0, req_end(c, 0), p->wake[0]);
	if (e)
		return e;
	b[h.count] = 0;
	for (unsigned i = 0; i < p->n; i++)
		if (i != p->self && !strcmp((char *)b, p->m[i].name) &&
		    peer_same_host(from, &p->m[i].sa)) {
			c->member = i;
			pthread_mutex_lock(&p->clock);
			int full = p->slots[c->slot].closing ? 1 :
				   make_room(p, i, 0, p->max_conns, c->slot);
			if (!full)
				p->slots[c->slot].member = i;
			pthread_mutex_unlock(&p->clock);
			if (full > 0)
				return -ECONNRESET; /* made room for a newer one */
			if (full) {
				ctr_add(&p->refused_conns, 1);
				send_error(c, "member %s has %u connections open, each busy "
					   "or holding blocks pinned for its READs "
					   "(peers.max_conns_per_member)", p->m[i].name,
					   p->max_conns);
				return -EPERM;
			}
			size_t nl = strlen(p->m[p->self].name);
			hdr_pack(b, T_HELLO | T_REPLY, (uint32_t)nl, 0, nl);
			memcpy(b + HDR, p->m[p->self].name, nl);
			return peer_xfer(c->fd, b, HDR + nl, 1, req_deadline(p), -1);
		}
	send_error(c, "\"%.64s\" is not a member at this address", (char *)b);
	return -EPERM;
}

struct conn_arg {
	struct peer_tier *p;
	int fd, slot;
	struct sockaddr_storage from;
};

static void *conn_main(void *arg)
{
	struct conn_arg *a = arg;
	struct conn c = { .p = a->p, .fd = a->fd, .slot = a->slot, .member = UINT32_MAX,
			  .t0 = kvt_now_ns() };
	struct peer_tier *p = a->p;
	uint8_t b[HDR];
	int e;

	peer_host_str(&a->from, c.from, sizeof(c.from));
	e = hello(&c, &a->from);
	if (e == -ETIMEDOUT) {
		char why[64];
		snprintf(why, sizeof(why), "no HELLO within %u ms", p->request_ms);
		peer_stranger(p, c.from, why);
	}

	while (!e) {
		struct hdr h;

		/* between requests: wait up to idle_ms for the first byte (or
		 * until closing), then the rest of the header in time; and
		 * while the member may still READ blocks pinned for this
		 * connection, until their pins lapse (closing would end them) */
		if (set_idle(p, c.slot, 1)) {
			e = -ECONNRESET;
			break;
		}
		uint64_t until = kvt_now_ns() + (uint64_t)p->idle_ms * 1000000ull;
		uint64_t pinned = peer_rdma_pinned_until(p, (unsigned)c.slot);
		e = peer_xfer(c.fd, b, 1, 0, pinned > until ? pinned : until, p->wake[0]);
		if (e == -ETIMEDOUT) {
			ctr_add(&p->conns_reaped, 1);
			e = 0;
			break; /* idle: closed, the member dials again when needed */
		}
		if (!e && set_idle(p, c.slot, 0))
			e = -ECONNRESET; /* shut down to make room just now */
		c.t0 = kvt_now_ns();
		if (!e)
			e = peer_xfer(c.fd, b + 1, HDR - 1, 0, req_end(&c, 0), p->wake[0]);
		if (e)
			break;
		hdr_unpack(b, &h);
		if (h.magic != MAGIC || h.version != VERSION) {
			send_error(&c, "bad frame: magic 0x%08x version %u", h.magic, h.version);
			e = -EPROTO;
			break;
		}
		e = serve(&c, &h);
	}
	if (e == -ETIMEDOUT)
		ctr_add(&p->bad_messages, 1);
	if (e == -EPROTO || e == -EPERM) {
		/* An ERROR was sent: close gently, so that unread input does not
		 * turn the close into a reset that drops it. Bounded: 200 ms. */
		uint64_t until = kvt_now_ns() + 200000000ull;
		char sink[4096];
		shutdown(c.fd, SHUT_WR);
		while (peer_xfer(c.fd, sink, sizeof(sink), 0, until, p->wake[0]) == 0)
			;
	}
	free(c.buf);
	free(a);
	/* its queue pair may live on, but nothing it was described stays
	 * pinned past the connection (a late READ fails its checksum) */
	peer_rdma_drop(p, (unsigned)c.slot);
	pthread_mutex_lock(&p->clock);
	p->slots[c.slot] = (struct slot){ .fd = -1, .member = NOBODY };
	close(c.fd);
	p->nconns--;
	pthread_cond_broadcast(&p->ccv);
	pthread_mutex_unlock(&p->clock);
	return NULL;
}

void *peer_listener_main(void *arg)
{
	struct peer_tier *p = arg;

	for (;;) {
		struct pollfd pf[2] = { { .fd = p->lfd, .events = POLLIN },
					{ .fd = p->wake[0], .events = POLLIN } };
		/* wakes when a summary of quiet strangers is due, and to end
		 * the pins that lapsed */
		int wait = peer_strangers_summary(p, 0), lapse = peer_rdma_lapse(p);
		if (lapse >= 0 && (wait < 0 || lapse < wait))
			wait = lapse;
		if (poll(pf, 2, wait) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents & POLLIN)
			break;
		if (!pf[0].revents)
			continue; /* the summary's time */
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		int fd = accept4(p->lfd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				usleep(10000); /* out of descriptors: do not spin */
			continue;
		}
		unsigned host = NOBODY;
		for (unsigned i = 0; i < p->n && host == NOBODY; i++)
			if (i != p->self && peer_same_host(&from, &p->m[i].sa))
				host = p->m[i].host;
		int member = host != NOBODY;
		pthread_mutex_lock(&p->clock);
		int slot = -1;
		/* before HELLO too, a host has its members' share at most */
		if (member)
			make_room(p, NOBODY, host, p->max_conns * p->m[host].at_host, -1);
		for (unsigned i = 0; member && i < CONNS_MAX; i++)
			if (p->slots[i].fd < 0) {
				slot = (int)i;
				break;
			}
		struct conn_arg *a = slot >= 0 ? malloc(sizeof(*a)) : NULL;
		pthread_t t;
		pthread_attr_t at;
		int ok = 0;
		if (a) {
			*a = (struct conn_arg){ .p = p, .fd = fd, .slot = slot, .from = from };
			peer_sock_opts(fd);
			pthread_attr_init(&at);
			pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
			p->slots[slot] = (struct slot){ .fd = fd, .member = NOBODY,
							.host = host, .since = kvt_now_ns() };
			p->nconns++;
			ok = pthread_create(&t, &at, conn_main, a) == 0;
			pthread_attr_destroy(&at);
			if (!ok) {
				p->slots[slot] = (struct slot){ .fd = -1, .member = NOBODY };
				p->nconns--;
				free(a);
			}
		}
		pthread_mutex_unlock(&p->clock);
		if (!ok) {
			char h[INET6_ADDRSTRLEN];
			ctr_add(&p->refused_conns, 1);
			if (!member)
				peer_stranger(p, peer_host_str(&from, h, sizeof(h)),
					 "no member has that address");
			close(fd);
		} else {
			ctr_add(&p->conns_accepted, 1);
		}
	}
	return NULL;
}
