/*
 * peer_int.h - the insides of the peer tier shared by its files (not a
 * public header): the wire's constants and frame header, the member and
 * tier state, little-endian packing, deadlines, and the functions one file
 * of the tier calls in another:
 *   peer.c        membership and owners, the client, open, close, stats
 *   peer_server.c the member-only server: listener, connection threads,
 *                 HELLO, requests served from the local tiers
 *   peer_net.c    TCP: addresses, the node's own source address, bounded
 *                 non-blocking I/O, socket options
 *   peer_rdma.c   the RDMA transport under the protocol: the rlink node,
 *                 the arena and staging registrations, links to members,
 *                 pins of served blocks, READs of descriptors and offers
 * The protocol itself is described in peer.h and kvtier-peer(7).
 */
#ifndef KVT_PEER_INT_H
#define KVT_PEER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "log_limit.h"
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
       T_UNPIN = 6, T_REPLY = 0x80, T_ERROR = 0xff };

/* flags bit 0 of GET (descriptors welcome), GET_R (this is a descriptor)
 * and PUT (an offer: descriptors, no bytes) */
#define F_RDMA 1u
#define DESC 48u                   /* a GET_R descriptor's body */
#define OFFER 48u                  /* a PUT offer item */

/* A block to READ: from a GET_R descriptor or a PUT offer. */
struct rdesc {
	size_t op;                 /* the op (or offer item) it is for */
	uint64_t len, sum, addr, pin;
	uint32_t rkey;
};

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
	char why[128];            /* what was malformed in its answer, for
				     kvt_last_error() (under lock) */
	_Atomic uint64_t down_until;
	_Atomic uint64_t requests, failures, timeouts;
	/* server side: the log of this member's connections closed for a
	 * malformed frame, one line per log_ms (peer_server.c) */
	_Atomic uint64_t elog_next, elog_quiet;
	/* RDMA (peer_rdma.c): the link to this member, used by the client
	 * and by the server's pulls of its offers */
	pthread_mutex_t rlock;    /* rl, rl_retry, rl_dials */
	struct rlink *rl;
	atomic_int rl_up;         /* rl can carry transfers: for the stats,
				     which never wait for rlock (a transfer
				     holds it up to its deadline) */
	uint64_t rl_retry;        /* ns: no dial before this after a failure */
	uint64_t rl_dials;
	/* client side, under lock: registered staging for gets and offers */
	uint8_t *stage;
	size_t stage_len;
	struct rlink_region *stage_reg;
	_Atomic uint64_t rdma_read, rdma_offered, rdma_wrs, rdma_errors;
	_Atomic uint64_t rdma_reconnects, rdma_inline, rdma_cerrs;
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
	struct peer_rdma *rdma;   /* NULL: transport tcp */
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
	struct log_limit slog;    /* the log of strangers refused (slock) */
	_Atomic uint64_t strangers;
	/* counters */
	_Atomic uint64_t served_lookups, served_gets, served_puts, served_bytes;
	_Atomic uint64_t refused_conns, bad_messages, conns_accepted;
	_Atomic uint64_t conns_reaped, conns_evicted;
	_Atomic uint64_t hits, misses, bytes_in, bytes_out, checksum_failures;
};

/* --- little-endian packing ------------------------------------------------ */

static inline void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
static inline uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline void hdr_pack(uint8_t *b, unsigned type, uint32_t count, uint32_t flags,
		     uint64_t body_len)
{
	put32(b, MAGIC);
	put16(b + 4, VERSION);
	put16(b + 6, (uint16_t)type);
	put32(b + 8, count);
	put32(b + 12, flags);
	put64(b + 16, body_len);
}

static inline void hdr_unpack(const uint8_t *b, struct hdr *h)
{
	h->magic = get32(b);
	h->version = get16(b + 4);
	h->type = get16(b + 6);
	h->count = get32(b + 8);
	h->flags = get32(b + 12);
	h->body_len = get64(b + 16);
}

static inline void key_pack(uint8_t *b, kvt_key k)
{
	put64(b, k.lo);
	put64(b + 8, k.hi);
}

static inline kvt_key key_unpack(const uint8_t *b)
{
	kvt_key k = { get64(b), get64(b + 8) };
	return k;
}

/* --- deadlines ------------------------------------------------------------- */

static inline uint64_t req_deadline(const struct peer_tier *p)
{
	return kvt_now_ns() + (uint64_t)p->request_ms * 1000000ull;
}

/* A whole round trip that moves up to bytes of blocks: request_timeout_ms,
 * plus the time those bytes take at 100 MB/s. */
static inline uint64_t trip_deadline(const struct peer_tier *p, uint64_t bytes)
{
	return req_deadline(p) + bytes * 10;
}

/* --- peer_net.c -------------------------------------------------------------- */

/* Resolves "host:port" ([v6]:port too) into sa; what names the setting. */
int peer_resolve(const char *what, const char *addr, struct sockaddr_storage *sa,
		 socklen_t *salen);
/* The same host (address without port), IPv4-mapped IPv6 included. */
int peer_same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b);
/* 1 for the wildcard address (0.0.0.0 or ::). */
int peer_any_host(const struct sockaddr_storage *a);
/* The host of a, in numbers, for messages. */
const char *peer_host_str(const struct sockaddr_storage *a, char *buf, size_t n);
/* Binds fd to this node's own address (p->src) before it connects. */
int peer_bind_source(const struct peer_tier *p, int fd);
/* Moves n bytes on a non-blocking fd before deadline (0: none, but give up
 * once wake is readable): 0, -ETIMEDOUT, -ECONNRESET (peer closed),
 * -ECANCELED (closing) or -errno. */
int peer_xfer(int fd, void *buf, size_t n, int out, uint64_t deadline, int wake);
/* Sends n bytes as peer_xfer does (no wake), telling the kernel that more
 * follow at once (MSG_MORE): a frame's header and its block leave in the
 * same segments, not the header in one of its own. */
int peer_send_more(int fd, const void *buf, size_t n, uint64_t deadline);
/* Receives n bytes (a block) as peer_xfer does (no wake), waking only once
 * a large piece of them waits in the socket (SO_RCVLOWAT, put back to 1
 * after) rather than for every segment. */
int peer_recv_bulk(int fd, void *buf, size_t n, uint64_t deadline);
/* TCP_NODELAY, keepalive, non-blocking. */
void peer_sock_opts(int fd);

/* --- peer_rdma.c --------------------------------------------------------------- */

/* Opens the RDMA transport for o->transport rdma or auto (p->rdma stays
 * NULL for tcp, or for auto without a device, which is logged). Returns 0
 * or -errno with kvt_last_error() naming the address. */
int peer_rdma_open(struct peer_tier *p, const struct peer_opts *o);
void peer_rdma_close(struct peer_tier *p);
/* Member m's link, dialled now if needed (not within down_ms of a failed
 * dial): 1 when usable, 0 when not. Called with the member's lock. */
int peer_rdma_link(struct peer_tier *p, unsigned m);
/* READs the n blocks of d from m into staging before deadline, checks
 * each checksum and copies it into ops[d[i].op].buf: each op's result and
 * len set, sums (if not NULL) at op. Returns 0, or the link's error (then
 * every op of d is -EIO and the link is closed). With the member's lock. */
int peer_rdma_read(struct peer_tier *p, unsigned m, const struct rdesc *d, size_t n,
		   kvt_op *ops, uint64_t *sums, uint64_t deadline);
/* Staging of at least len bytes for an offer to m, and its rkey: NULL when
 * it cannot be had (then the offer goes inline). With the member's lock. */
uint8_t *peer_rdma_stage(struct peer_tier *p, unsigned m, size_t len, uint32_t *rkey);
/* The most bytes one offer (or one round of READs) moves. */
size_t peer_rdma_stage_max(const struct peer_tier *p);
/* Owner: pins key's RAM block for the connection in server slot, and fills
 * desc (DESC bytes): 0, or -ENOENT/-ENOBUFS (*len set)/-EAGAIN: serve it
 * inline instead. */
int peer_rdma_pin(struct peer_tier *p, unsigned slot, kvt_key key, uint64_t cap,
		  uint8_t *desc, size_t *len);
void peer_rdma_unpin(struct peer_tier *p, unsigned slot, const uint64_t *ids, size_t n);
/* Owner: every pin of a connection that ended. */
void peer_rdma_drop(struct peer_tier *p, unsigned slot);
/* Owner: when the last pin of server slot lapses (ns), 0 when it holds none. */
uint64_t peer_rdma_pinned_until(struct peer_tier *p, unsigned slot);
/* Owner: ends lapsed pins; returns the ms until the next look (-1: none). */
int peer_rdma_lapse(struct peer_tier *p);
/* Owner: READs the n offered blocks of member m into reserved arena,
 * checks and publishes each; res[i] per offer (-EIO for all when the READ
 * failed). */
void peer_rdma_pull(struct peer_tier *p, unsigned m, const kvt_key *keys,
		    const struct rdesc *d, size_t n, int32_t *res, uint64_t deadline);
/* The member's RDMA counters, and the transport's own. */
void peer_rdma_member_stats(struct peer_tier *p, unsigned m, const struct stat_visitor *v);
void peer_rdma_stats(struct peer_tier *p, const struct stat_visitor *v);

/* --- peer_server.c ----------------------------------------------------------- */

/* The listener thread (started by peer_open with the tier). */
void *peer_listener_main(void *arg);
/* Counts (and logs, rate-limited) a connection refused as a stranger's. */
void peer_stranger(struct peer_tier *p, const char *from, const char *why);
/* Logs the pending summary of quiet strangers when due (or now, with
 * force); returns the ms until it is due, or -1 when none is pending. */
int peer_strangers_summary(struct peer_tier *p, int force);

#endif
