/*
 * peer.c - the peer tier (peer.h): membership and rendezvous owners, the
 * client side (one connection per member, dialled from this node's own
 * address, every wait bounded, a failing member marked down for a while),
 * and opening, closing and counting the tier. The server is peer_server.c,
 * the sockets peer_net.c. Knows nothing about the store facade, RAM or disk.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "peer_int.h"
#include "stats.h"

/* --- membership ---------------------------------------------------------------- */

unsigned peer_owner(const struct peer_tier *p, kvt_key key)
{
	uint8_t kb[16];
	uint64_t best = 0;
	unsigned owner = 0;

	key_pack(kb, key);
	for (unsigned i = 0; i < p->n; i++) {
		uint64_t score = XXH3_64bits_withSeed(kb, 16, p->m[i].seed);
		if (i == 0 || score > best) {
			best = score;
			owner = i;
		}
	}
	return owner;
}

unsigned peer_self(const struct peer_tier *p)
{
	return p->self;
}

const char *peer_name(const struct peer_tier *p, unsigned m)
{
	return m < p->n ? p->m[m].name : "?";
}
/* --- client ------------------------------------------------------------------------ */

static void mark_down(struct peer_tier *p, unsigned m, int err)
{
	struct member *x = &p->m[m];

	if (x->fd >= 0) {
		close(x->fd);
		x->fd = -1;
	}
	atomic_store(&x->down_until, kvt_now_ns() + (uint64_t)p->down_ms * 1000000ull);
	ctr_add(&x->failures, 1);
	if (err == -ETIMEDOUT)
		ctr_add(&x->timeouts, 1);
	kvt_log(KVT_LOG_WARN, "peer %s (%s): %s; its keys read as misses for %u ms",
		x->name, x->addr, strerror(-err), p->down_ms);
}

/* Connects and says HELLO. Called with the member's lock held. */
static int dial(struct peer_tier *p, unsigned m)
{
	struct member *x = &p->m[m];
	uint64_t dl = kvt_now_ns() + (uint64_t)p->connect_ms * 1000000ull;
	int fd = socket(x->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int e = 0;

	if (fd < 0)
		return -errno;
	/* a member of another address family: the kernel picks the source */
	if (p->src.ss_family == x->sa.ss_family)
		e = peer_bind_source(p, fd);
	if (e) {
		char h[INET6_ADDRSTRLEN];
		kvt_log(KVT_LOG_ERR, "peer: cannot send from %s, this node's address: %s",
			peer_host_str(&p->src, h, sizeof(h)), strerror(-e));
	} else if (connect(fd, (struct sockaddr *)&x->sa, x->salen) < 0) {
		if (errno != EINPROGRESS) {
			e = -errno;
		} else {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			int pr;
			do
				pr = poll(&pf, 1, kvt_ms_until(dl, 1000000));
			while (pr < 0 && errno == EINTR);
			int se = 0;
			socklen_t sl = sizeof(se);
			if (pr == 0)
				e = -ETIMEDOUT;
			else if (pr < 0)
				e = -errno;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &se, &sl) < 0 || se)
				e = se ? -se : -errno;
		}
	}
	if (!e) {
		uint8_t b[HDR + NAME_MAX_WIRE + 1];
		size_t nl = strlen(p->m[p->self].name);
		struct hdr h;

		peer_sock_opts(fd);
		hdr_pack(b, T_HELLO, (uint32_t)nl, 0, nl);
		memcpy(b + HDR, p->m[p->self].name, nl);
		e = peer_xfer(fd, b, HDR + nl, 1, dl, -1);
		if (!e)
			e = peer_xfer(fd, b, HDR, 0, dl, -1);
		if (!e) {
			hdr_unpack(b, &h);
			if (h.magic != MAGIC || h.version != VERSION ||
			    h.type != (T_HELLO | T_REPLY) || h.count == 0 || h.count > NAME_MAX_WIRE ||
			    h.body_len != h.count)
				e = -EPROTO;
		}
		if (!e)
			e = peer_xfer(fd, b, h.count, 0, dl, -1);
		if (!e) {
			b[h.count] = 0;
			if (strcmp((char *)b, x->name)) {
				kvt_log(KVT_LOG_ERR, "peer %s at %s answers as \"%.64s\"",
					x->name, x->addr, (char *)b);
				e = -EPROTO;
			}
		}
	}
	if (e) {
		close(fd);
		return e;
	}
	x->fd = fd;
	return 0;
}

/*
 * Takes member m's connection for one round trip: returns 0 with the lock
 * held and x->fd open, or -EHOSTDOWN (marked down) / the dial error.
 */
static int begin(struct peer_tier *p, unsigned m)
{
	struct member *x = &p->m[m];

	if (atomic_load(&x->down_until) > kvt_now_ns())
		return kvt_fail(-EHOSTDOWN, "peer %s is marked down", x->name);
	pthread_mutex_lock(&x->lock);
	/* marked down while this thread waited for the lock: no second wait */
	if (atomic_load(&x->down_until) > kvt_now_ns()) {
		pthread_mutex_unlock(&x->lock);
		return kvt_fail(-EHOSTDOWN, "peer %s is marked down", x->name);
	}
	ctr_add(&x->requests, 1);
	if (x->fd >= 0) {
		/* Between requests nothing may arrive: anything readable is the
		 * member having closed (restarted, say). Dial again rather than
		 * fail the request on a dead connection. */
		struct pollfd pf = { .fd = x->fd, .events = POLLIN | POLLRDHUP };
		if (poll(&pf, 1, 0) != 0) {
			close(x->fd);
			x->fd = -1;
		}
	}
	/* a reused connection can still be closed by the member (idle, or
	 * to make room) just as this request leaves: see closed_under() */
	x->unanswered = x->fd >= 0;
	if (x->fd < 0) {
		int e = dial(p, m);
		if (e) {
			mark_down(p, m, e);
			pthread_mutex_unlock(&x->lock);
			return kvt_fail(e, "peer %s (%s): cannot connect: %s", x->name,
					x->addr, strerror(-e));
		}
	}
	return 0;
}

/*
 * After a round trip that failed with e: 1 when the member closed the
 * reused connection before it answered anything. A server closes a
 * connection idle for peers.idle_timeout_ms, or one that makes room for a
 * newer one of the same member, and that can cross a request on its way;
 * it then has served nothing of it. The connection is dropped, the lock
 * released, and the caller starts the round trip again, which dials anew,
 * instead of marking the member down. A fresh connection is never retried.
 */
static int closed_under(struct peer_tier *p, unsigned m, int e)
{
	struct member *x = &p->m[m];

	if (e != -ECONNRESET || !x->unanswered)
		return 0;
	close(x->fd);
	x->fd = -1;
	x->unanswered = 0;
	pthread_mutex_unlock(&x->lock);
	return 1;
}

/* Ends a round trip; e < 0 drops the connection and marks m down. */
static int end(struct peer_tier *p, unsigned m, int e)
{
	struct member *x = &p->m[m];
	char why[sizeof(x->why) + 24] = "malformed answer";

	if (x->why[0])
		snprintf(why, sizeof(why), "malformed answer: %s", x->why);
	x->why[0] = 0;
	if (e == -ENOMEM) {
		/* not the member's fault, but the exchange is broken off: an
		 * unread answer must never be read as the next one's */
		close(x->fd);
		x->fd = -1;
	} else if (e) {
		mark_down(p, m, e);
	}
	pthread_mutex_unlock(&x->lock);
	if (e)
		return kvt_fail(e == -ECONNRESET ? -EIO : e, "peer %s (%s): %s", x->name,
				x->addr, e == -EPROTO ? why : strerror(-e));
	return 0;
}

/* Reads a reply header of type t and count, handling ERROR frames. */
static int reply_hdr(struct peer_tier *p, unsigned m, unsigned t, uint32_t count,
		     uint64_t dl, struct hdr *h)
{
	struct member *x = &p->m[m];
	uint8_t b[HDR];
	size_t got = 0;
	int e = 0;

	if (x->unanswered) {
		/* the first byte apart: a close before it is closed_under() */
		e = peer_xfer(x->fd, b, 1, 0, dl, -1);
		if (e)
			return e;
		x->unanswered = 0;
		got = 1;
	}
	e = peer_xfer(x->fd, b + got, HDR - got, 0, dl, -1);
	if (e)
		return e;
	hdr_unpack(b, h);
	if (h->magic != MAGIC || h->version != VERSION)
		return -EPROTO;
	if (h->type == T_ERROR) {
		char msg[ERRMSG_MAX + 1];
		size_t l = (size_t)h->body_len;
		/* its count is its length, at most ERRMSG_MAX: else it is not
		 * waited for (a body that never comes) */
		if (h->body_len != h->count || h->body_len > ERRMSG_MAX) {
			kvt_log(KVT_LOG_ERR, "peer %s refused a request with a malformed "
				"ERROR frame (%llu bytes)", p->m[m].name,
				(unsigned long long)h->body_len);
			return -EPROTO;
		}
		if (peer_xfer(p->m[m].fd, msg, l, 0, dl, -1) == 0) {
			msg[l] = 0;
			kvt_log(KVT_LOG_ERR, "peer %s refused a request: %s", p->m[m].name, msg);
		}
		return -EPROTO;
	}
	if (h->type != (t | T_REPLY) || h->count != count)
		return -EPROTO;
	return 0;
}

static int send_keys(struct peer_tier *p, unsigned m, unsigned type, uint32_t flags,
		     const kvt_key *keys, size_t n, uint64_t dl)
{
	uint8_t *b = malloc(HDR + 16 * n);
	int e;

	if (!b)
		return -ENOMEM;
	hdr_pack(b, type, (uint32_t)n, flags, 16ull * n);
	for (size_t i = 0; i < n; i++)
		key_pack(b + HDR + 16 * i, keys[i]);
	e = peer_xfer(p->m[m].fd, b, HDR + 16 * n, 1, dl, -1);
	free(b);
	return e;
}

int peer_lookup(struct peer_tier *p, unsigned m, const kvt_key *keys, size_t n,
		int lease, uint8_t *present)
{
	struct hdr h;
	int e;

	memset(present, 0, n);
	if (n == 0)
		return 0;
	if (n > PEER_KEYS_MAX)
		n = PEER_KEYS_MAX; /* the rest read as absent */
	uint64_t dl0 = 0; /* a second try keeps the first one's deadline */
again:
	e = begin(p, m);
	if (e)
		return e;
	uint64_t dl = dl0 ? dl0 : req_deadline(p);
	dl0 = dl;
	e = send_keys(p, m, T_LOOKUP, lease ? 1 : 0, keys, n, dl);
	if (!e)
		e = reply_hdr(p, m, T_LOOKUP, (uint32_t)n, dl, &h);
	if (!e && h.body_len != n)
		e = -EPROTO;
	if (!e)
		e = peer_xfer(p->m[m].fd, present, n, 0, dl, -1);
	for (size_t i = 0; !e && i < n; i++)
		present[i] = present[i] == 1;
	if (e)
		memset(present, 0, n);
	if (closed_under(p, m, e))
		goto again;
	return end(p, m, e);
}

int peer_release(struct peer_tier *p, unsigned m, const kvt_key *keys, size_t n)
{
	int e = 0;
	uint64_t dl0 = 0; /* a second try keeps the first one's deadline */

	for (size_t done = 0; done < n && !e;) {
		size_t k = n - done < PEER_KEYS_MAX ? n - done : PEER_KEYS_MAX;
		struct hdr h;

		e = begin(p, m);
		if (e)
			return e;
		uint64_t dl = dl0 ? dl0 : req_deadline(p);
		dl0 = dl;
		e = send_keys(p, m, T_RELEASE, 0, keys + done, k, dl);
		if (!e)
			e = reply_hdr(p, m, T_RELEASE, (uint32_t)k, dl, &h);
		if (!e && h.body_len)
			e = -EPROTO;
		if (closed_under(p, m, e)) {
			e = 0;
			continue;
		}
		e = end(p, m, e);
		done += k;
		dl0 = 0;
	}
	return e;
}

/*
 * Sends the pins of a batch's descriptors back (one UNPIN frame, no answer
 * awaited): after the READs, whether they worked or not, since nothing of
 * them is in flight any more. A send that fails closes the connection, and
 * the owner drops that connection's pins.
 */
static void send_unpin(struct peer_tier *p, unsigned m, const struct rdesc *d, size_t n,
		       uint64_t dl)
{
	uint8_t *b = malloc(HDR + 8 * n);
	struct member *x = &p->m[m];
	int e = b ? 0 : -ENOMEM;

	if (!e) {
		hdr_pack(b, T_UNPIN, (uint32_t)n, 0, 8ull * n);
		for (size_t i = 0; i < n; i++)
			put64(b + HDR + 8 * i, d[i].pin);
		e = peer_xfer(x->fd, b, HDR + 8 * n, 1, dl, -1);
	}
	free(b);
	if (e) {
		close(x->fd);
		x->fd = -1;
	}
}

/* A GET_R descriptor (flags F_RDMA) for op o, whose item header ih was
 * read; the rest of the body follows. 0, or -EPROTO / the read's error. */
static int read_desc(struct peer_tier *p, unsigned m, const struct hdr *h,
		     const uint8_t *ih, const kvt_op *o, size_t op, uint64_t dl,
		     struct rdesc *d, uint64_t *hold_ms)
{
	uint8_t tail[DESC - ITEM];
	int e;

	if (h->body_len != DESC || get32(ih) != 0)
		return -EPROTO;
	e = peer_xfer(p->m[m].fd, tail, sizeof(tail), 0, dl, -1);
	if (e)
		return e;
	*d = (struct rdesc){ .op = op, .rkey = get32(ih + 4), .len = get64(ih + 8),
			     .sum = get64(ih + 16), .addr = get64(ih + 24),
			     .pin = get64(tail) };
	uint64_t hold = get64(tail + 8);
	if (d->len == 0 || d->len > o->len || !o->buf || d->len > UINT32_MAX)
		return -EPROTO;
	/* the member's READ deadline is computed from it: an absurd one
	 * would overflow */
	if (hold == 0 || hold > PEER_HOLD_MS_MAX) {
		snprintf(p->m[m].why, sizeof(p->m[m].why), "a descriptor with hold_ms "
			 "%llu (1 to %llu)", (unsigned long long)hold, PEER_HOLD_MS_MAX);
		return -EPROTO;
	}
	if (hold < *hold_ms)
		*hold_ms = hold;
	return 0;
}

/*
 * One inline answer of a GET (item header ih of frame h) for op o: its
 * bytes read into o->buf and verified (their checksum into *sum when
 * sum), or its status; counted as a hit or a miss. 0, or -EPROTO when the
 * frame breaks the protocol, or the connection's error.
 */
static int read_inline(struct peer_tier *p, unsigned m, const struct hdr *h,
		       const uint8_t *ih, kvt_op *o, uint64_t dl, uint64_t *sum)
{
	int st = (int32_t)get32(ih);
	uint64_t len = get64(ih + 8), want = get64(ih + 16);

	if (p->rdma)
		ctr_add(&p->m[m].rdma_inline, 1);
	if (st == 0) {
		if (h->body_len != ITEM + len || len == 0 || len > o->len || !o->buf)
			return -EPROTO;
		int e = peer_recv_bulk(p->m[m].fd, o->buf, len, dl);
		if (e)
			return e;
		ctr_add(&p->bytes_in, len);
		if (kvt_checksum(o->buf, len) != want) {
			char kb[34];
			ctr_add(&p->checksum_failures, 1);
			o->result = -EBADMSG;
			kvt_set_error("peer: block %s from member %u failed its checksum "
				      "(damaged in transit or at its owner); not used",
				      kvt_key_str(o->key, kb), m);
		} else {
			o->len = len;
			o->result = 0;
			if (sum)
				*sum = want;
		}
	} else if (h->body_len != ITEM || (st == -ENOBUFS && len <= o->len)) {
		return -EPROTO;
	} else if (st == -ENOBUFS) {
		o->result = -ENOBUFS;
		o->len = len;
	} else {
		o->result = st == -ENOENT || st == -EBADMSG ? st : -EIO;
	}
	ctr_add(o->result == 0 ? &p->hits : &p->misses, 1);
	return 0;
}

int peer_get_batch(struct peer_tier *p, unsigned m, kvt_op *ops, size_t n,
		   uint64_t *sums)
{
	size_t done = 0, got = 0;
	struct rdesc *d = NULL;
	int e = 0;
	uint64_t dl0 = 0; /* a second try of a chunk keeps the first one's deadline */

	/* nothing reads as loaded unless its answer said so */
	for (size_t i = 0; i < n; i++)
		ops[i].result = -EIO;
	if (p->rdma && !(d = malloc(sizeof(*d) * (n < PEER_KEYS_MAX ? n : PEER_KEYS_MAX) + 1)))
		return kvt_fail(-ENOMEM, "peer get: out of memory");

	while (done < n && !e) {
		size_t k = n - done < PEER_KEYS_MAX ? n - done : PEER_KEYS_MAX, nd = 0;
		kvt_op *o = ops + done;
		uint8_t *b = malloc(HDR + 24 * k);
		uint64_t hold_ms = UINT64_MAX;

		if (!b) {
			e = -ENOMEM;
			break;
		}
		e = begin(p, m);
		if (e) {
			free(b);
			break;
		}
		/* descriptors welcome only over a working link */
		int rd = d && peer_rdma_link(p, m);
		uint64_t want = 0, t0 = kvt_now_ns();
		for (size_t i = 0; i < k; i++)
			want += o[i].buf ? o[i].len : 0;
		uint64_t dl = dl0 ? dl0 : trip_deadline(p, want);
		dl0 = dl;
		hdr_pack(b, T_GET, (uint32_t)k, rd ? F_RDMA : 0, 24ull * k);
		for (size_t i = 0; i < k; i++) {
			key_pack(b + HDR + 24 * i, o[i].key);
			put64(b + HDR + 24 * i + 16, o[i].buf ? o[i].len : 0);
		}
		e = peer_xfer(p->m[m].fd, b, HDR + 24 * k, 1, dl, -1);
		free(b);
		for (size_t i = 0; i < k && !e; i++, got++) {
			struct hdr h;
			uint8_t ih[ITEM];

			e = reply_hdr(p, m, T_GET, 1, dl, &h);
			if (!e && h.body_len < ITEM)
				e = -EPROTO;
			if (!e && (h.flags & F_RDMA) && !rd)
				e = -EPROTO;
			if (!e)
				e = peer_xfer(p->m[m].fd, ih, ITEM, 0, dl, -1);
			if (!e && (h.flags & F_RDMA)) {
				e = read_desc(p, m, &h, ih, &o[i], i, dl, &d[nd], &hold_ms);
				if (e)
					break;
				nd++;
				continue; /* read (and counted) once all are described */
			}
			if (e)
				break;
			e = read_inline(p, m, &h, ih, &o[i], dl, sums ? &sums[done + i] : NULL);
			if (e)
				break;
		}
		if (!e && nd) {
			/* The owner holds each pin for hold_ms from after t0; the
			 * READs end (or are abandoned, their queue pair destroyed)
			 * by three quarters of that: the rest is the grace. */
			uint64_t rdl = t0 + hold_ms / 4 * 3 * 1000000ull;
			peer_rdma_read(p, m, d, nd, o, sums ? sums + done : NULL,
				       rdl < dl ? rdl : dl);
			send_unpin(p, m, d, nd, req_deadline(p));
			for (size_t j = 0; j < nd; j++)
				ctr_add(o[d[j].op].result == 0 ? &p->hits : &p->misses, 1);
		}
		if (closed_under(p, m, e)) {
			e = 0; /* nothing of this frame was answered: ask again */
			continue;
		}
		if (e) {
			e = end(p, m, e);
			break;
		}
		end(p, m, 0);
		done += k;
		got = done;
		dl0 = 0;
	}
	free(d);
	/* the answer broke off, or never came: what it did not deliver failed */
	for (size_t i = got; e && i < n; i++)
		ops[i].result = e;
	return e;
}

/*
 * Offers o[0..k) to m from staging (PUT with F_RDMA: descriptors, the owner
 * READs them) when stage is not NULL, else sends them inline. With the
 * member's lock; the bytes are copied to staging first.
 */
static int send_put(struct peer_tier *p, unsigned m, const kvt_op *o, size_t k,
		    uint8_t *stage, uint32_t rkey, uint64_t dl)
{
	int fd = p->m[m].fd;
	uint64_t body = 0, off = 0;
	uint8_t h0[HDR];
	int e;

	for (size_t i = 0; i < k; i++)
		body += stage ? OFFER : ITEM + o[i].len;
	hdr_pack(h0, T_PUT, (uint32_t)k, stage ? F_RDMA : 0, body);
	e = peer_xfer(fd, h0, HDR, 1, dl, -1);
	for (size_t i = 0; i < k && !e; i++) {
		uint8_t ih[OFFER];
		uint64_t sum = kvt_checksum(o[i].buf, o[i].len);

		key_pack(ih, o[i].key);
		put64(ih + 16, o[i].len);
		put64(ih + 24, sum);
		if (stage) {
			memcpy(stage + off, o[i].buf, o[i].len);
			put64(ih + 32, (uint64_t)(uintptr_t)(stage + off));
			put32(ih + 40, rkey);
			put32(ih + 44, 0);
			off += o[i].len;
			e = peer_xfer(fd, ih, OFFER, 1, dl, -1);
			continue;
		}
		e = peer_xfer(fd, ih, ITEM, 1, dl, -1);
		if (!e)
			e = peer_xfer(fd, o[i].buf, o[i].len, 1, dl, -1);
		if (!e)
			ctr_add(&p->bytes_out, o[i].len);
	}
	return e;
}

int peer_put_batch(struct peer_tier *p, unsigned m, const kvt_op *ops, size_t n,
		   int *results)
{
	size_t done = 0;
	int e = 0;
	uint64_t dl0 = 0; /* a second try of a chunk keeps the first one's deadline */

	for (size_t i = 0; i < n; i++)
		results[i] = -EIO;
	while (done < n && !e) {
		size_t k = n - done < PEER_KEYS_MAX ? n - done : PEER_KEYS_MAX;
		const kvt_op *o = ops + done;
		uint64_t body = 0;

		if (p->rdma) {
			/* an offer fits in staging (one block at least) */
			size_t j = 0;
			for (; j < k && (j == 0 || body + o[j].len <= peer_rdma_stage_max(p)); j++)
				body += o[j].len;
			k = j;
		} else {
			for (size_t i = 0; i < k; i++)
				body += o[i].len;
		}
		uint8_t *res = malloc(4 * k + 1);
		if (!res) {
			e = -ENOMEM;
			break;
		}
		e = begin(p, m);
		if (e) {
			free(res);
			break;
		}
		uint32_t rkey = 0;
		uint8_t *stage = p->rdma && peer_rdma_link(p, m) ?
				 peer_rdma_stage(p, m, body, &rkey) : NULL;
		uint64_t dl = dl0 ? dl0 : trip_deadline(p, body + ITEM * k);
		dl0 = dl;
		e = send_put(p, m, o, k, stage, rkey, dl);
		struct hdr h;
		if (!e)
			e = reply_hdr(p, m, T_PUT, (uint32_t)k, dl, &h);
		if (!e && h.body_len != 4ull * k)
			e = -EPROTO;
		if (!e)
			e = peer_xfer(p->m[m].fd, res, 4 * k, 0, dl, -1);
		for (size_t i = 0; i < k && !e; i++) {
			results[done + i] = (int32_t)get32(res + 4 * i);
			if (p->rdma)
				ctr_add(stage ? &p->m[m].rdma_offered : &p->m[m].rdma_inline,
					stage ? (results[done + i] == 0 ? o[i].len : 0) : 1);
		}
		free(res);
		if (closed_under(p, m, e)) {
			e = 0;
			continue;
		}
		if (e) {
			e = end(p, m, e);
			break;
		}
		end(p, m, 0);
		done += k;
		dl0 = 0;
	}
	return e;
}
/* --- open, close, stats --------------------------------------------------------------- */

static void tier_free(struct peer_tier *p)
{
	peer_rdma_close(p);
	for (unsigned i = 0; p->m && i < p->n; i++) {
		if (p->m[i].fd >= 0)
			close(p->m[i].fd);
		pthread_mutex_destroy(&p->m[i].lock);
		pthread_mutex_destroy(&p->m[i].rlock);
		free(p->m[i].name);
		free(p->m[i].addr);
	}
	free(p->m);
	if (p->lfd >= 0)
		close(p->lfd);
	if (p->wake[0] >= 0)
		close(p->wake[0]);
	if (p->wake[1] >= 0)
		close(p->wake[1]);
	pthread_mutex_destroy(&p->clock);
	pthread_mutex_destroy(&p->slock);
	pthread_cond_destroy(&p->ccv);
	free(p);
}

/*
 * Chooses the source of outgoing connections: the host of peers.listen, or
 * when that is the wildcard, of this node's entry in peers.members; and
 * checks now that it can be bound, so that a node without that address
 * fails at open rather than at its first request.
 */
static int source_open(struct peer_tier *p, const struct sockaddr_storage *la,
		       socklen_t ll)
{
	const char *what = "peers.listen";
	char h[INET6_ADDRSTRLEN], key[64];
	int fd, e;

	if (peer_any_host(la)) {
		snprintf(key, sizeof(key), "peers.members[%u].addr", p->self);
		what = key;
		la = &p->m[p->self].sa;
		ll = p->m[p->self].salen;
	}
	memcpy(&p->src, la, ll);
	p->srclen = ll;
	if (p->src.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&p->src)->sin6_port = 0;
	else
		((struct sockaddr_in *)&p->src)->sin_port = 0;
	fd = socket(p->src.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return kvt_fail(-errno, "peers: socket: %s", strerror(errno));
	e = peer_bind_source(p, fd);
	close(fd);
	if (e)
		return kvt_fail(e, "%s: cannot send from %s: %s (connections to the other "
				"members leave from this node's own address, so it must be an "
				"address of this host)", what, peer_host_str(&p->src, h, sizeof(h)),
				strerror(-e));
	return 0;
}

int peer_open(const struct peer_opts *o, const struct peer_local *local,
	      struct peer_tier **out)
{
	struct peer_tier *p;
	int e;

	*out = NULL;
	if (!o->nmembers)
		return kvt_fail(-EINVAL, "peers: no members");
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->lfd = p->wake[0] = p->wake[1] = -1;
	pthread_mutex_init(&p->clock, NULL);
	pthread_mutex_init(&p->slock, NULL);
	pthread_cond_init(&p->ccv, NULL);
	for (unsigned i = 0; i < CONNS_MAX; i++)
		p->slots[i] = (struct slot){ .fd = -1, .member = NOBODY };
	p->local = *local;
	p->max_block = o->max_block;
	p->connect_ms = o->connect_ms;
	p->request_ms = o->request_ms;
	p->down_ms = o->down_ms;
	p->log_ms = o->log_ms;
	p->idle_ms = o->idle_ms;
	p->max_conns = o->max_conns;
	p->self = o->self;
	p->m = calloc(o->nmembers, sizeof(*p->m));
	if (!p->m) {
		tier_free(p);
		return -ENOMEM;
	}
	p->n = o->nmembers;
	/* every member sound for tier_free before anything can fail */
	for (unsigned i = 0; i < p->n; i++) {
		p->m[i].fd = -1;
		pthread_mutex_init(&p->m[i].lock, NULL);
		pthread_mutex_init(&p->m[i].rlock, NULL);
	}
	for (unsigned i = 0; i < p->n; i++) {
		struct member *x = &p->m[i];
		char what[96];

		x->name = strdup(o->names[i]);
		x->addr = strdup(o->addrs[i]);
		if (!x->name || !x->addr) {
			tier_free(p);
			return -ENOMEM;
		}
		x->seed = XXH3_64bits(x->name, strlen(x->name));
		snprintf(what, sizeof(what), "peers.members[%u].addr", i);
		e = peer_resolve(what, x->addr, &x->sa, &x->salen);
		if (e) {
			tier_free(p);
			return e;
		}
	}
	/* members that share a host share its connections before HELLO */
	for (unsigned i = 0; i < p->n; i++) {
		unsigned h = i;
		for (unsigned j = 0; j < i; j++)
			if (j != p->self && peer_same_host(&p->m[i].sa, &p->m[j].sa)) {
				h = j;
				break;
			}
		p->m[i].host = h;
		if (i != p->self)
			p->m[h].at_host++;
	}

	struct sockaddr_storage la;
	socklen_t ll;
	e = peer_resolve("peers.listen", o->listen, &la, &ll);
	if (!e)
		e = source_open(p, &la, ll);
	if (!e)
		e = peer_rdma_open(p, o);
	if (!e && pipe2(p->wake, O_CLOEXEC) < 0)
		e = kvt_fail(-errno, "peers: pipe: %s", strerror(errno));
	if (!e) {
		int one = 1;
		p->lfd = socket(la.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (p->lfd < 0)
			e = kvt_fail(-errno, "peers.listen: socket: %s", strerror(errno));
		else
			setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	}
	if (!e && bind(p->lfd, (struct sockaddr *)&la, ll) < 0)
		e = kvt_fail(-errno, "peers.listen: cannot listen on %s: %s",
			     o->listen, strerror(errno));
	if (!e && listen(p->lfd, 64) < 0)
		e = kvt_fail(-errno, "peers.listen: %s: %s", o->listen, strerror(errno));
	if (!e && pthread_create(&p->listener, NULL, peer_listener_main, p))
		e = kvt_fail(-ENOMEM, "peers: cannot start the server thread");
	if (e) {
		tier_free(p);
		return e;
	}
	p->listener_started = 1;
	*out = p;
	return 0;
}

void peer_close(struct peer_tier *p)
{
	if (!p)
		return;
	if (p->listener_started) {
		char c = 1;
		ssize_t w = write(p->wake[1], &c, 1);
		(void)w;
		pthread_join(p->listener, NULL);
	}
	pthread_mutex_lock(&p->clock);
	for (unsigned i = 0; i < CONNS_MAX; i++)
		if (p->slots[i].fd >= 0)
			shutdown(p->slots[i].fd, SHUT_RDWR);
	while (p->nconns)
		pthread_cond_wait(&p->ccv, &p->clock);
	pthread_mutex_unlock(&p->clock);
	peer_strangers_summary(p, 1);
	tier_free(p);
}

void peer_stats(struct peer_tier *p, const struct stat_visitor *v)
{
	struct stat_visitor ms = stat_nest(v, "members", 1);

	for (unsigned i = 0; i < p->n; i++) {
		struct member *x = &p->m[i];
		struct stat_visitor o = stat_nest(&ms, NULL, 0);

		stat_str(&o, "name", x->name);
		stat_str(&o, "addr", x->addr);
		stat_bool(&o, "self", i == p->self);
		if (i != p->self) {
			stat_bool(&o, "up", atomic_load(&x->down_until) <= kvt_now_ns());
			stat_int(&o, "requests", (int64_t)ctr_get(&x->requests));
			stat_int(&o, "failures", (int64_t)ctr_get(&x->failures));
			stat_int(&o, "timeouts", (int64_t)ctr_get(&x->timeouts));
			peer_rdma_member_stats(p, i, &o);
		}
	}
#define C(name, field) stat_int(v, name, (int64_t)ctr_get(&p->field))
	C("hits", hits);
	C("misses", misses);
	C("bytes_in", bytes_in);
	C("bytes_out", bytes_out);
	C("checksum_failures", checksum_failures);
	C("served_lookups", served_lookups);
	C("served_gets", served_gets);
	C("served_puts", served_puts);
	C("served_bytes", served_bytes);
	C("connections_accepted", conns_accepted);
	C("connections_refused", refused_conns);
	C("connections_from_strangers", strangers);
	C("connections_reaped", conns_reaped);
	C("connections_evicted", conns_evicted);
	C("bad_messages", bad_messages);
#undef C
	stat_str(v, "transport", p->rdma ? "rdma" : "tcp");
	peer_rdma_stats(p, v);
}
