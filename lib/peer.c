/*
 * peer.c - the peer tier over TCP: membership and rendezvous hashing, the
 * wire protocol of peer.h, the server (a listener thread and one thread per
 * member connection, serving from the local tiers through struct
 * peer_local), and the client side (one connection per member, every wait
 * bounded, failing members marked down for a while).
 * Knows nothing about the store facade, RAM or disk.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"
#include "peer.h"
#include "stats.h"

#define MAGIC 0x3150564bu          /* "KVP1" little-endian */
#define VERSION 1u
#define HDR 24u
#define ITEM 32u                   /* PUT item and GET_R item headers */
#define NAME_MAX_WIRE 255u
#define ERRMSG_MAX 1024u
#define CONNS_MAX 1024u            /* server connections at once, all members */
#define NOBODY UINT32_MAX          /* a slot's member before HELLO */

enum { T_HELLO = 1, T_LOOKUP = 2, T_GET = 3, T_PUT = 4, T_RELEASE = 5,
       T_REPLY = 0x80, T_ERROR = 0xff };

struct hdr {
	uint32_t magic;
	uint16_t version, type;
	uint32_t count, flags;
	uint64_t body_len;
};

struct member {
	char *name, *addr;
	struct sockaddr_storage sa;
	socklen_t salen;
	uint64_t seed;            /* XXH3-64 of the name */
	unsigned host;            /* the first other member at this host */
	unsigned at_host;         /* other members at this host (of host's) */
	/* client side */
	pthread_mutex_t lock;     /* one request at a time on fd */
	int fd;
	int unanswered;           /* fd reused, nothing read back yet */
	_Atomic uint64_t down_until;
	_Atomic uint64_t requests, failures, timeouts;
};

struct peer_tier {
	struct member *m;
	unsigned n, self;
	/* where outgoing connections leave from: this node's own address,
	 * the one the others list for it (port 0) */
	struct sockaddr_storage src;
	socklen_t srclen;
	struct peer_local local;
	uint64_t max_block;
	uint32_t connect_ms, request_ms, down_ms, log_ms, idle_ms;
	unsigned max_conns;       /* per member */
	/* server */
	int lfd;
	int wake[2];              /* readable once closing */
	pthread_t listener;
	int listener_started;
	pthread_mutex_t clock;    /* conns below */
	pthread_cond_t ccv;
	unsigned nconns;
	struct slot {
		int fd;           /* -1: free */
		unsigned member;  /* after HELLO, else NOBODY */
		unsigned host;    /* member.host of the source address */
		int idle;         /* waiting for a request */
		int closing;      /* shut down to make room: not counted */
		uint64_t since;   /* accepted, or idle since (ns) */
	} slots[CONNS_MAX];
	/* refused strangers: each counted, the first logged, then at most one
	 * summary line per log_ms */
	pthread_mutex_t slock;
	uint64_t slog_next;       /* ns: no line about strangers before this */
	uint64_t slog_quiet;      /* strangers refused since the last line */
	char slog_last[192];      /* the latest of them */
	_Atomic uint64_t strangers;
	/* counters */
	_Atomic uint64_t served_lookups, served_gets, served_puts, served_bytes;
	_Atomic uint64_t refused_conns, bad_messages, conns_accepted;
	_Atomic uint64_t conns_reaped, conns_evicted;
	_Atomic uint64_t hits, misses, bytes_in, bytes_out, checksum_failures;
};

/* --- little-endian packing ------------------------------------------------ */

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void hdr_pack(uint8_t *b, unsigned type, uint32_t count, uint32_t flags,
		     uint64_t body_len)
{
	put32(b, MAGIC);
	put16(b + 4, VERSION);
	put16(b + 6, (uint16_t)type);
	put32(b + 8, count);
	put32(b + 12, flags);
	put64(b + 16, body_len);
}

static void hdr_unpack(const uint8_t *b, struct hdr *h)
{
	h->magic = get32(b);
	h->version = get16(b + 4);
	h->type = get16(b + 6);
	h->count = get32(b + 8);
	h->flags = get32(b + 12);
	h->body_len = get64(b + 16);
}

static void key_pack(uint8_t *b, kvt_key k)
{
	put64(b, k.lo);
	put64(b + 8, k.hi);
}

static kvt_key key_unpack(const uint8_t *b)
{
	kvt_key k = { get64(b), get64(b + 8) };
	return k;
}

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

/* Resolves "host:port" ([v6]:port too) into sa. */
static int resolve(const char *what, const char *addr, struct sockaddr_storage *sa,
		   socklen_t *salen)
{
	char host[256], port[8];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *res = NULL;
	size_t hl;

	if (!colon || strlen(colon + 1) >= sizeof(port))
		return kvt_fail(-EINVAL, "%s: \"%s\" is not host:port", what, addr);
	hl = (size_t)(colon - addr);
	if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']') {
		addr++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return kvt_fail(-EINVAL, "%s: \"%s\" has no host", what, addr);
	memcpy(host, addr, hl);
	host[hl] = 0;
	strcpy(port, colon + 1);
	int e = getaddrinfo(host, port, &hints, &res);
	if (e || !res) {
		if (res)
			freeaddrinfo(res);
		return kvt_fail(-EINVAL, "%s: cannot resolve \"%s\": %s", what, host,
				gai_strerror(e));
	}
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* The same host (address without port). */
static int same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family == AF_INET && b->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6 && b->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	/* an IPv4 peer seen on an IPv6 socket as ::ffff:a.b.c.d */
	const struct sockaddr_storage *v6 = a->ss_family == AF_INET6 ? a : b;
	const struct sockaddr_storage *v4 = a->ss_family == AF_INET ? a : b;
	if (v6->ss_family != AF_INET6 || v4->ss_family != AF_INET)
		return 0;
	const uint8_t *x = ((const struct sockaddr_in6 *)v6)->sin6_addr.s6_addr;
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return !memcmp(x, pre, 12) &&
	       !memcmp(x + 12, &((const struct sockaddr_in *)v4)->sin_addr.s_addr, 4);
}

/* 1 for the wildcard address (0.0.0.0 or ::). */
static int any_host(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return a->ss_family == AF_INET6 &&
	       IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* The host of a, in numbers, for messages. */
static const char *host_str(const struct sockaddr_storage *a, char *buf, size_t n)
{
	if (getnameinfo((const struct sockaddr *)a, sizeof(*a), buf, (socklen_t)n, NULL, 0,
			NI_NUMERICHOST))
		snprintf(buf, n, "?");
	return buf;
}

/*
 * Binds fd to this node's own address before it connects, so that the
 * member sees the source address it lists for this node, whichever
 * interface the route leaves by. The port is left for connect to choose.
 */
static int bind_source(const struct peer_tier *p, int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	return bind(fd, (const struct sockaddr *)&p->src, p->srclen) < 0 ? -errno : 0;
}

/* --- bounded socket I/O --------------------------------------------------------- */

static int ms_left(uint64_t deadline)
{
	uint64_t now = kvt_now_ns();
	if (now >= deadline)
		return 0;
	uint64_t ms = (deadline - now + 999999) / 1000000;
	return ms > 1000000 ? 1000000 : (int)ms;
}

/*
 * Moves n bytes on a non-blocking fd before deadline (0: no deadline, but
 * give up once wake is readable). Returns 0, -ETIMEDOUT, -ECONNRESET (peer
 * closed), -ECANCELED (closing) or -errno.
 */
static int xfer(int fd, void *buf, size_t n, int out, uint64_t deadline, int wake)
{
	char *c = buf;

	while (n) {
		ssize_t r = out ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
		if (r > 0) {
			c += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == EPIPE ? -ECONNRESET : -errno;
		struct pollfd pf[2] = { { .fd = fd, .events = out ? POLLOUT : POLLIN },
					{ .fd = wake, .events = POLLIN } };
		int t = deadline ? ms_left(deadline) : -1;
		if (deadline && t == 0)
			return -ETIMEDOUT;
		int pr = poll(pf, wake >= 0 ? 2 : 1, t);
		if (pr < 0 && errno != EINTR)
			return -errno;
		if (pr == 0)
			return -ETIMEDOUT;
		if (wake >= 0 && (pf[1].revents & POLLIN))
			return -ECANCELED;
	}
	return 0;
}

static void set_sock_opts(int fd)
{
	int one = 1, idle = 10, intvl = 5, cnt = 3;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a member host that vanishes without a FIN frees its connection (and
	 * the server's slot) within about 25 s */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* --- server --------------------------------------------------------------------- */

struct conn {
	struct peer_tier *p;
	int fd;
	int slot;
	char from[INET6_ADDRSTRLEN]; /* source host, for messages */
	unsigned member;          /* after HELLO */
	uint8_t *buf;             /* a block's bytes */
	size_t cap;
};

/*
 * A connection refused as a stranger's: from an address that is no
 * member's, or whose first frame is not a member's HELLO. Counted always;
 * the first is logged, and those that follow within log_ms are counted
 * quietly and logged as one summary line when the period ends (by the
 * listener, or at close), so that strangers cannot flood the log.
 */
static void stranger(struct peer_tier *p, const char *from, const char *why)
{
	uint64_t now = kvt_now_ns();
	int quiet;

	ctr_add(&p->strangers, 1);
	pthread_mutex_lock(&p->slock);
	quiet = p->slog_quiet || now < p->slog_next;
	if (quiet) {
		p->slog_quiet++;
		snprintf(p->slog_last, sizeof(p->slog_last), "%s: %s", from, why);
	} else {
		p->slog_next = now + (uint64_t)p->log_ms * 1000000ull;
	}
	pthread_mutex_unlock(&p->slock);
	if (!quiet)
		kvt_log(KVT_LOG_WARN, "peer: refused a connection from %s: %s (more are "
			"counted in peer.connections_from_strangers and logged as one line "
			"per %u ms)", from, why, p->log_ms);
}

/*
 * Logs the summary of the strangers refused quietly, once their period has
 * ended (or now, with force). Returns the ms until it is due, or -1 when
 * none is pending.
 */
static int strangers_summary(struct peer_tier *p, int force)
{
	uint64_t now = kvt_now_ns(), n = 0;
	char last[sizeof(p->slog_last)];
	int wait = -1;

	pthread_mutex_lock(&p->slock);
	if (p->slog_quiet && (force || now >= p->slog_next)) {
		n = p->slog_quiet;
		memcpy(last, p->slog_last, sizeof(last));
		p->slog_quiet = 0;
		p->slog_next = now + (uint64_t)p->log_ms * 1000000ull;
	} else if (p->slog_quiet) {
		wait = ms_left(p->slog_next);
	}
	pthread_mutex_unlock(&p->slock);
	if (n)
		kvt_log(KVT_LOG_WARN, "peer: refused %llu more connection%s from non-members "
			"within %u ms; the latest from %s", (unsigned long long)n,
			n == 1 ? "" : "s", p->log_ms, last);
	return wait;
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
	xfer(c->fd, f, HDR + (size_t)len, 1,
	     kvt_now_ns() + (uint64_t)c->p->request_ms * 1000000ull, -1);
	ctr_add(&c->p->bad_messages, 1);
	f[HDR + len] = 0;
	if (c->member < c->p->n)
		kvt_log(KVT_LOG_WARN, "peer: closing a connection from %s: %s",
			c->p->m[c->member].name, (char *)f + HDR);
	else
		stranger(c->p, c->from, (char *)f + HDR);
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

static uint64_t req_deadline(const struct peer_tier *p)
{
	return kvt_now_ns() + (uint64_t)p->request_ms * 1000000ull;
}

/* A whole round trip that moves up to bytes of blocks: request_timeout_ms,
 * plus the time those bytes take at 100 MB/s. */
static uint64_t trip_deadline(const struct peer_tier *p, uint64_t bytes)
{
	return req_deadline(p) + bytes * 10;
}

/* A GET_R frame: header, item header, and the block when status is 0. */
static int send_get_r(struct conn *c, int st, const void *block, uint64_t len)
{
	uint8_t ih[HDR + ITEM];
	uint64_t dl = req_deadline(c->p);
	int e;

	hdr_pack(ih, T_GET | T_REPLY, 1, 0, ITEM + (st == 0 ? len : 0));
	put32(ih + HDR, (uint32_t)st);
	put32(ih + HDR + 4, 0);
	put64(ih + HDR + 8, st == 0 || st == -ENOBUFS ? len : 0);
	put64(ih + HDR + 16, st == 0 ? kvt_checksum(block, len) : 0);
	put64(ih + HDR + 24, 0);
	e = xfer(c->fd, ih, HDR + ITEM, 1, dl, -1);
	if (!e && st == 0) {
		e = xfer(c->fd, (void *)block, len, 1, dl, -1);
		ctr_add(&c->p->served_bytes, len);
	}
	return e;
}

struct visit_ctx {
	struct conn *c;
	int e;                    /* the connection's fate */
};

/* ram_visit's callback: sends the block straight from the arena. */
static int send_in_place(void *arg, const void *block, size_t len)
{
	struct visit_ctx *v = arg;

	v->e = send_get_r(v->c, 0, block, len);
	return 0;
}

/* Serves one request whose header is h. Returns 0 to go on, < 0 to close. */
static int serve(struct conn *c, const struct hdr *h)
{
	struct peer_tier *p = c->p;
	uint64_t dl = req_deadline(p);
	uint8_t out[HDR];
	int e;

	if (h->count > PEER_KEYS_MAX) {
		send_error(c, "count %u exceeds %u", h->count, PEER_KEYS_MAX);
		return -EPROTO;
	}
	switch (h->type) {
	case T_LOOKUP:
	case T_RELEASE: {
		if (h->body_len != 16ull * h->count) {
			send_error(c, "body of %llu bytes for %u keys",
				   (unsigned long long)h->body_len, h->count);
			return -EPROTO;
		}
		size_t n = h->count;
		uint8_t *kb = malloc(16 * n + 1);
		kvt_key *keys = malloc(sizeof(*keys) * n + 1);
		uint8_t *present = calloc(n + 1, 1);
		e = (!kb || !keys || !present) ? -ENOMEM : xfer(c->fd, kb, 16 * n, 0, dl, p->wake[0]);
		if (!e) {
			for (size_t i = 0; i < n; i++)
				keys[i] = key_unpack(kb + 16 * i);
			if (h->type == T_LOOKUP) {
				p->local.lookup(p->local.arg, keys, n, h->flags & 1, present);
				ctr_add(&p->served_lookups, 1);
				hdr_pack(out, T_LOOKUP | T_REPLY, h->count, 0, n);
				e = xfer(c->fd, out, HDR, 1, dl, -1);
				if (!e)
					e = xfer(c->fd, present, n, 1, dl, -1);
			} else {
				p->local.release(p->local.arg, keys, n);
				hdr_pack(out, T_RELEASE | T_REPLY, h->count, 0, 0);
				e = xfer(c->fd, out, HDR, 1, dl, -1);
			}
		}
		free(kb);
		free(keys);
		free(present);
		return e;
	}
	case T_GET: {
		if (h->body_len != 24ull * h->count) {
			send_error(c, "body of %llu bytes for %u GET items",
				   (unsigned long long)h->body_len, h->count);
			return -EPROTO;
		}
		size_t n = h->count;
		uint8_t *items = malloc(24 * n + 1);
		if (!items)
			return -ENOMEM;
		e = xfer(c->fd, items, 24 * n, 0, dl, p->wake[0]);
		for (size_t i = 0; i < n && !e; i++) {
			kvt_key k = key_unpack(items + 24 * i);
			uint64_t cap = get64(items + 24 * i + 16);
			size_t len = 0;
			int st = -ENOENT;

			if (cap > p->max_block)
				cap = p->max_block;
			ctr_add(&p->served_gets, 1);
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
					st = p->local.get(p->local.arg, k, c->buf, c->cap, &len);
				if (st == -ENOBUFS && len <= cap) {
					st = grow(c, len);
					if (!st)
						st = p->local.get(p->local.arg, k, c->buf, c->cap, &len);
				}
				if (st == 0 && len > cap)
					st = -ENOBUFS;
			}
			if (st && st != -ENOENT && st != -ENOBUFS && st != -EBADMSG)
				st = -EIO;
			e = send_get_r(c, st, c->buf, len);
		}
		free(items);
		return e;
	}
	case T_PUT: {
		size_t n = h->count;
		uint64_t left = h->body_len;

		dl = trip_deadline(p, h->body_len);
		uint8_t *res = calloc(4 * n + 1, 1);

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
			e = xfer(c->fd, ih, ITEM, 0, dl, p->wake[0]);
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
			e = xfer(c->fd, c->buf, len, 0, dl, p->wake[0]);
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
		if (!e) {
			hdr_pack(out, T_PUT | T_REPLY, h->count, 0, 4ull * n);
			e = xfer(c->fd, out, HDR, 1, dl, -1);
			if (!e)
				e = xfer(c->fd, res, 4 * n, 1, dl, -1);
		}
		free(res);
		return e;
	}
	default:
		send_error(c, "unknown request type %u", h->type);
		return -EPROTO;
	}
}

/*
 * Keeps one member, or the connections from one host that have not said
 * HELLO yet (member NOBODY), within limit, not counting slot self: when
 * limit are open, the one idle the longest (for pending ones: accepted
 * first) is shut down, and its thread frees its slot. Returns -1 when all
 * are busy with requests. Called with clock held.
 */
static int make_room(struct peer_tier *p, unsigned member, unsigned host,
		     unsigned limit, int self)
{
	unsigned count = 0;
	int victim = -1;

	for (int i = 0; i < (int)CONNS_MAX; i++) {
		struct slot *s = &p->slots[i];
		if (s->fd < 0 || s->closing || i == self || s->member != member ||
		    (member == NOBODY && s->host != host))
			continue;
		count++;
		if ((member == NOBODY || s->idle) &&
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
	int e = xfer(c->fd, b, HDR, 0, req_deadline(p), p->wake[0]);

	if (e)
		return e;
	hdr_unpack(b, &h);
	if (h.magic != MAGIC || h.version != VERSION || h.type != T_HELLO ||
	    h.count == 0 || h.count > NAME_MAX_WIRE || h.body_len != h.count) {
		send_error(c, "expected a HELLO frame of protocol version %u", VERSION);
		return -EPROTO;
	}
	e = xfer(c->fd, b, h.count, 0, req_deadline(p), p->wake[0]);
	if (e)
		return e;
	b[h.count] = 0;
	for (unsigned i = 0; i < p->n; i++)
		if (i != p->self && !strcmp((char *)b, p->m[i].name) &&
		    same_host(from, &p->m[i].sa)) {
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
				send_error(c, "member %s has %u connections open, all busy "
					   "(peers.max_conns_per_member)", p->m[i].name,
					   p->max_conns);
				return -EPERM;
			}
			size_t nl = strlen(p->m[p->self].name);
			hdr_pack(b, T_HELLO | T_REPLY, (uint32_t)nl, 0, nl);
			memcpy(b + HDR, p->m[p->self].name, nl);
			return xfer(c->fd, b, HDR + nl, 1, req_deadline(p), -1);
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
	struct conn c = { .p = a->p, .fd = a->fd, .slot = a->slot, .member = UINT32_MAX };
	struct peer_tier *p = a->p;
	uint8_t b[HDR];
	int e;

	host_str(&a->from, c.from, sizeof(c.from));
	e = hello(&c, &a->from);
	if (e == -ETIMEDOUT) {
		char why[64];
		snprintf(why, sizeof(why), "no HELLO within %u ms", p->request_ms);
		stranger(p, c.from, why);
	}

	while (!e) {
		struct hdr h;

		/* between requests: wait up to idle_ms for the first byte (or
		 * until closing), then the rest of the header in time */
		if (set_idle(p, c.slot, 1)) {
			e = -ECONNRESET;
			break;
		}
		e = xfer(c.fd, b, 1, 0, kvt_now_ns() + (uint64_t)p->idle_ms * 1000000ull,
			 p->wake[0]);
		if (e == -ETIMEDOUT) {
			ctr_add(&p->conns_reaped, 1);
			e = 0;
			break; /* idle: closed, the member dials again when needed */
		}
		if (!e && set_idle(p, c.slot, 0))
			e = -ECONNRESET; /* shut down to make room just now */
		if (!e)
			e = xfer(c.fd, b + 1, HDR - 1, 0, req_deadline(p), p->wake[0]);
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
		while (xfer(c.fd, sink, sizeof(sink), 0, until, p->wake[0]) == 0)
			;
	}
	free(c.buf);
	free(a);
	pthread_mutex_lock(&p->clock);
	p->slots[c.slot] = (struct slot){ .fd = -1, .member = NOBODY };
	close(c.fd);
	p->nconns--;
	pthread_cond_broadcast(&p->ccv);
	pthread_mutex_unlock(&p->clock);
	return NULL;
}

static void *listener_main(void *arg)
{
	struct peer_tier *p = arg;

	for (;;) {
		struct pollfd pf[2] = { { .fd = p->lfd, .events = POLLIN },
					{ .fd = p->wake[0], .events = POLLIN } };
		/* wakes when a summary of quiet strangers is due */
		if (poll(pf, 2, strangers_summary(p, 0)) < 0) {
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
			if (i != p->self && same_host(&from, &p->m[i].sa))
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
			set_sock_opts(fd);
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
				stranger(p, host_str(&from, h, sizeof(h)),
					 "no member has that address");
			close(fd);
		} else {
			ctr_add(&p->conns_accepted, 1);
		}
	}
	return NULL;
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
		e = bind_source(p, fd);
	if (e) {
		char h[INET6_ADDRSTRLEN];
		kvt_log(KVT_LOG_ERR, "peer: cannot send from %s, this node's address: %s",
			host_str(&p->src, h, sizeof(h)), strerror(-e));
	} else if (connect(fd, (struct sockaddr *)&x->sa, x->salen) < 0) {
		if (errno != EINPROGRESS) {
			e = -errno;
		} else {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			int pr;
			do
				pr = poll(&pf, 1, ms_left(dl));
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

		set_sock_opts(fd);
		hdr_pack(b, T_HELLO, (uint32_t)nl, 0, nl);
		memcpy(b + HDR, p->m[p->self].name, nl);
		e = xfer(fd, b, HDR + nl, 1, dl, -1);
		if (!e)
			e = xfer(fd, b, HDR, 0, dl, -1);
		if (!e) {
			hdr_unpack(b, &h);
			if (h.magic != MAGIC || h.version != VERSION ||
			    h.type != (T_HELLO | T_REPLY) || h.count == 0 || h.count > NAME_MAX_WIRE ||
			    h.body_len != h.count)
				e = -EPROTO;
		}
		if (!e)
			e = xfer(fd, b, h.count, 0, dl, -1);
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
				x->addr, e == -EPROTO ? "malformed answer" : strerror(-e));
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
		e = xfer(x->fd, b, 1, 0, dl, -1);
		if (e)
			return e;
		x->unanswered = 0;
		got = 1;
	}
	e = xfer(x->fd, b + got, HDR - got, 0, dl, -1);
	if (e)
		return e;
	hdr_unpack(b, h);
	if (h->magic != MAGIC || h->version != VERSION)
		return -EPROTO;
	if (h->type == T_ERROR) {
		char msg[ERRMSG_MAX + 1];
		size_t l = h->body_len < ERRMSG_MAX ? (size_t)h->body_len : ERRMSG_MAX;
		if (xfer(p->m[m].fd, msg, l, 0, dl, -1) == 0) {
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
	e = xfer(p->m[m].fd, b, HDR + 16 * n, 1, dl, -1);
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
again:
	e = begin(p, m);
	if (e)
		return e;
	uint64_t dl = req_deadline(p);
	e = send_keys(p, m, T_LOOKUP, lease ? 1 : 0, keys, n, dl);
	if (!e)
		e = reply_hdr(p, m, T_LOOKUP, (uint32_t)n, dl, &h);
	if (!e && h.body_len != n)
		e = -EPROTO;
	if (!e)
		e = xfer(p->m[m].fd, present, n, 0, dl, -1);
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

	for (size_t done = 0; done < n && !e;) {
		size_t k = n - done < PEER_KEYS_MAX ? n - done : PEER_KEYS_MAX;
		struct hdr h;

		e = begin(p, m);
		if (e)
			return e;
		uint64_t dl = req_deadline(p);
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
	}
	return e;
}

int peer_get_batch(struct peer_tier *p, unsigned m, kvt_op *ops, size_t n)
{
	size_t done = 0, got = 0;
	int e = 0;

	/* nothing reads as loaded unless its answer said so */
	for (size_t i = 0; i < n; i++)
		ops[i].result = -EIO;

	while (done < n && !e) {
		size_t k = n - done < PEER_KEYS_MAX ? n - done : PEER_KEYS_MAX;
		kvt_op *o = ops + done;
		uint8_t *b = malloc(HDR + 24 * k);

		if (!b) {
			e = -ENOMEM;
			break;
		}
		e = begin(p, m);
		if (e) {
			free(b);
			break;
		}
		uint64_t want = 0;
		for (size_t i = 0; i < k; i++)
			want += o[i].buf ? o[i].len : 0;
		uint64_t dl = trip_deadline(p, want);
		hdr_pack(b, T_GET, (uint32_t)k, 0, 24ull * k);
		for (size_t i = 0; i < k; i++) {
			key_pack(b + HDR + 24 * i, o[i].key);
			put64(b + HDR + 24 * i + 16, o[i].buf ? o[i].len : 0);
		}
		e = xfer(p->m[m].fd, b, HDR + 24 * k, 1, dl, -1);
		free(b);
		for (size_t i = 0; i < k && !e; i++, got++) {
			struct hdr h;
			uint8_t ih[ITEM];

			e = reply_hdr(p, m, T_GET, 1, dl, &h);
			if (!e && h.body_len < ITEM)
				e = -EPROTO;
			if (!e)
				e = xfer(p->m[m].fd, ih, ITEM, 0, dl, -1);
			if (e)
				break;
			int st = (int32_t)get32(ih);
			uint64_t len = get64(ih + 8), sum = get64(ih + 16);
			if (st == 0) {
				if (h.body_len != ITEM + len || len == 0 || len > o[i].len || !o[i].buf) {
					e = -EPROTO;
					break;
				}
				e = xfer(p->m[m].fd, o[i].buf, len, 0, dl, -1);
				if (e)
					break;
				ctr_add(&p->bytes_in, len);
				if (kvt_checksum(o[i].buf, len) != sum) {
					ctr_add(&p->checksum_failures, 1);
					o[i].result = -EBADMSG;
				} else {
					o[i].len = len;
					o[i].result = 0;
				}
			} else if (h.body_len != ITEM || (st == -ENOBUFS && len <= o[i].len)) {
				e = -EPROTO;
				break;
			} else if (st == -ENOBUFS) {
				o[i].result = -ENOBUFS;
				o[i].len = len;
			} else {
				o[i].result = st == -ENOENT || st == -EBADMSG ? st : -EIO;
			}
			if (o[i].result == 0)
				ctr_add(&p->hits, 1);
			else
				ctr_add(&p->misses, 1);
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
	}
	/* the answer broke off, or never came: what it did not deliver failed */
	for (size_t i = got; e && i < n; i++)
		ops[i].result = e;
	return e;
}

int peer_put_batch(struct peer_tier *p, unsigned m, const kvt_op *ops, size_t n,
		   int *results)
{
	size_t done = 0;
	int e = 0;

	for (size_t i = 0; i < n; i++)
		results[i] = -EIO;
	while (done < n && !e) {
		size_t k = n - done < PEER_KEYS_MAX ? n - done : PEER_KEYS_MAX;
		const kvt_op *o = ops + done;
		uint64_t body = 0;

		for (size_t i = 0; i < k; i++)
			body += ITEM + o[i].len;
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
		uint64_t dl = trip_deadline(p, body);
		uint8_t h0[HDR];
		hdr_pack(h0, T_PUT, (uint32_t)k, 0, body);
		e = xfer(p->m[m].fd, h0, HDR, 1, dl, -1);
		for (size_t i = 0; i < k && !e; i++) {
			uint8_t ih[ITEM];

			key_pack(ih, o[i].key);
			put64(ih + 16, o[i].len);
			put64(ih + 24, kvt_checksum(o[i].buf, o[i].len));
			e = xfer(p->m[m].fd, ih, ITEM, 1, dl, -1);
			if (!e)
				e = xfer(p->m[m].fd, o[i].buf, o[i].len, 1, dl, -1);
			if (!e)
				ctr_add(&p->bytes_out, o[i].len);
		}
		struct hdr h;
		if (!e)
			e = reply_hdr(p, m, T_PUT, (uint32_t)k, dl, &h);
		if (!e && h.body_len != 4ull * k)
			e = -EPROTO;
		if (!e)
			e = xfer(p->m[m].fd, res, 4 * k, 0, dl, -1);
		for (size_t i = 0; i < k && !e; i++)
			results[done + i] = (int32_t)get32(res + 4 * i);
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
	}
	return e;
}

/* --- open, close, stats --------------------------------------------------------------- */

static void tier_free(struct peer_tier *p)
{
	for (unsigned i = 0; p->m && i < p->n; i++) {
		if (p->m[i].fd >= 0)
			close(p->m[i].fd);
		pthread_mutex_destroy(&p->m[i].lock);
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

	if (any_host(la)) {
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
	e = bind_source(p, fd);
	close(fd);
	if (e)
		return kvt_fail(e, "%s: cannot send from %s: %s (connections to the other "
				"members leave from this node's own address, so it must be an "
				"address of this host)", what, host_str(&p->src, h, sizeof(h)),
				strerror(-e));
	return 0;
}

int peer_open(const struct kvt_config *cfg, const struct peer_local *local,
	      uint64_t max_block, struct peer_tier **out)
{
	struct peer_tier *p;
	int e;

	*out = NULL;
	if (!cfg->npeers)
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
	p->max_block = max_block;
	p->connect_ms = cfg->peer_connect_ms;
	p->request_ms = cfg->peer_request_ms;
	p->down_ms = cfg->peer_down_ms;
	p->log_ms = cfg->peer_log_ms;
	p->idle_ms = cfg->peer_idle_ms;
	p->max_conns = cfg->peer_max_conns;
	p->self = cfg->peer_self;
	p->m = calloc(cfg->npeers, sizeof(*p->m));
	if (!p->m) {
		tier_free(p);
		return -ENOMEM;
	}
	p->n = cfg->npeers;
	/* every member sound for tier_free before anything can fail */
	for (unsigned i = 0; i < p->n; i++) {
		p->m[i].fd = -1;
		pthread_mutex_init(&p->m[i].lock, NULL);
	}
	for (unsigned i = 0; i < p->n; i++) {
		struct member *x = &p->m[i];
		char what[96];

		x->name = strdup(cfg->peer_names[i]);
		x->addr = strdup(cfg->peer_addrs[i]);
		if (!x->name || !x->addr) {
			tier_free(p);
			return -ENOMEM;
		}
		x->seed = XXH3_64bits(x->name, strlen(x->name));
		snprintf(what, sizeof(what), "peers.members[%u].addr", i);
		e = resolve(what, x->addr, &x->sa, &x->salen);
		if (e) {
			tier_free(p);
			return e;
		}
	}
	/* members that share a host share its connections before HELLO */
	for (unsigned i = 0; i < p->n; i++) {
		unsigned h = i;
		for (unsigned j = 0; j < i; j++)
			if (j != p->self && same_host(&p->m[i].sa, &p->m[j].sa)) {
				h = j;
				break;
			}
		p->m[i].host = h;
		if (i != p->self)
			p->m[h].at_host++;
	}

	struct sockaddr_storage la;
	socklen_t ll;
	e = resolve("peers.listen", cfg->peer_listen, &la, &ll);
	if (!e)
		e = source_open(p, &la, ll);
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
			     cfg->peer_listen, strerror(errno));
	if (!e && listen(p->lfd, 64) < 0)
		e = kvt_fail(-errno, "peers.listen: %s: %s", cfg->peer_listen, strerror(errno));
	if (!e && pthread_create(&p->listener, NULL, listener_main, p))
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
	strangers_summary(p, 1);
	tier_free(p);
}

void peer_stats(struct peer_tier *p, json_t *obj)
{
	json_t *ms = json_array();

	for (unsigned i = 0; i < p->n; i++) {
		struct member *x = &p->m[i];
		json_t *o = json_object();
		json_object_set_new(o, "name", json_string(x->name));
		json_object_set_new(o, "addr", json_string(x->addr));
		json_object_set_new(o, "self", json_boolean(i == p->self));
		if (i != p->self) {
			json_object_set_new(o, "up", json_boolean(
				atomic_load(&x->down_until) <= kvt_now_ns()));
			json_object_set_new(o, "requests", json_integer((json_int_t)ctr_get(&x->requests)));
			json_object_set_new(o, "failures", json_integer((json_int_t)ctr_get(&x->failures)));
			json_object_set_new(o, "timeouts", json_integer((json_int_t)ctr_get(&x->timeouts)));
		}
		json_array_append_new(ms, o);
	}
	json_object_set_new(obj, "members", ms);
#define C(name, field) json_object_set_new(obj, name, json_integer((json_int_t)ctr_get(&p->field)))
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
}
