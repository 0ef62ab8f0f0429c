/*
 * peer.h - the peer tier: membership, rendezvous hashing, the control and
 * data protocol over TCP, the server thread and the client side.
 *
 * Each key has one owner among peers.members, chosen by rendezvous hashing
 * (the member whose XXH3-64 of the key, seeded by the XXH3-64 of its name,
 * is highest), so no metadata server is needed and a membership change
 * moves only the keys of the member that changed. The store puts a block
 * locally and in its owner's tiers, and asks the owner on a local miss.
 *
 * The wire protocol (kvtier-peer(7)), all integers little-endian:
 *
 *   frame header, 24 bytes:
 *     u32 magic "KVP1" (0x3150564b), u16 version (1), u16 type,
 *     u32 count, u32 flags, u64 body_len
 *   HELLO    count = name bytes, body = this node's member name
 *   LOOKUP   count keys, flags bit 0 = lease, body = count x (u64 lo, u64 hi)
 *   GET      count items, body = count x (u64 lo, u64 hi, u64 capacity)
 *   PUT      count items, body = count x (u64 lo, u64 hi, u64 len, u64 sum,
 *            len bytes)
 *   RELEASE  count keys, body = count x (u64 lo, u64 hi)
 *   Each request is answered by a frame of type | 0x80 with the same count,
 *   except HELLO, whose answer's count is the length of the server's name,
 *   and GET, answered by count GET_R frames of count 1, one per item in
 *   order, so that no side holds more than one block of a batch at a time:
 *   HELLO_R  body = the server's member name
 *   LOOKUP_R body = count bytes, 1 where the key is stored (and leased)
 *   GET_R    body = i32 status, u32 0, u64 len, u64 sum, u64 0, then len
 *            bytes when status is 0 (len is the size needed when status is
 *            -ENOBUFS)
 *   PUT_R    body = count x i32 status
 *   RELEASE_R body empty
 *   ERROR (0xff) body = a message; the connection is then closed.
 *
 * Every count and length read from the wire is checked against the frame's
 * own body_len and the limits (PEER_KEYS_MAX keys, ram.max_block bytes per
 * block) before anything is allocated; payloads carry their XXH3-64 (seed
 * 0), checked
 * by the receiver before the bytes are stored or returned. A server accepts
 * connections only from the addresses of configured members, and only a
 * HELLO naming a member of that address; it listens only on peers.listen.
 * The server keeps at most peers.max_conns_per_member connections of a
 * member (a newer one closes the one idle the longest) and closes one idle
 * for peers.idle_timeout_ms; a client whose reused connection was closed
 * before any answer dials again and asks again, once.
 * Refused strangers are counted, and logged as the first and then one
 * summary line per peers.log_interval_ms.
 * A client binds each connection to this node's own address (the host of
 * peers.listen, or of its entry in peers.members when that is a wildcard),
 * the one the others list for it.
 * Every client wait is bounded (peers.connect_timeout_ms,
 * peers.request_timeout_ms); a member that fails is marked down for
 * peers.down_ms, during which its keys read as misses without a wait.
 */
#ifndef KVT_PEER_H
#define KVT_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "stats.h"

#define PEER_KEYS_MAX 4096u       /* keys or items in one frame */

/*
 * What a peer serves from: this node's own tiers, never forwarding. All four
 * are called from the server's connection threads, concurrently.
 */
struct peer_local {
	void *arg;
	/* present[i] = 1 where keys[i] is stored here (and leased if lease) */
	void (*lookup)(void *arg, const kvt_key *keys, size_t n, int lease,
		       uint8_t *present);
	/* as kvt_get, local tiers only */
	int (*get)(void *arg, kvt_key key, void *buf, size_t cap, size_t *len);
	/* a block of at most cap bytes held in RAM, handed to fn(fnarg, bytes,
	 * len) in place, pinned until fn returns (sent without a copy); returns
	 * fn's result, -ENOENT (not in RAM: use get) or -ENOBUFS with *len set.
	 * May be NULL. */
	int (*visit)(void *arg, kvt_key key, size_t cap,
		     int (*fn)(void *fnarg, const void *block, size_t len),
		     void *fnarg, size_t *len);
	/* as kvt_put_batch, local tiers only; sets each op's result */
	void (*put)(void *arg, kvt_op *ops, size_t n);
	void (*release)(void *arg, const kvt_key *keys, size_t n);
};

/* What the peer tier is opened with (opts_peer() in opts.c fills it from
 * the configuration's "peers" keys); the strings are copied at open. */
struct peer_opts {
	unsigned nmembers;            /* peers.members */
	char *const *names;           /* their names */
	char *const *addrs;           /* their addresses, "host:port" */
	unsigned self;                /* this node's index in the members */
	const char *listen;           /* peers.listen */
	uint64_t max_block;           /* the largest block sent or taken */
	uint32_t connect_ms;          /* peers.connect_timeout_ms */
	uint32_t request_ms;          /* peers.request_timeout_ms */
	uint32_t down_ms;             /* peers.down_ms */
	uint32_t idle_ms;             /* peers.idle_timeout_ms */
	uint32_t log_ms;              /* peers.log_interval_ms */
	unsigned max_conns;           /* peers.max_conns_per_member */
};

struct peer_tier;

/*
 * Resolves the members, starts listening on o->listen and the server
 * thread. Returns 0, or -errno with kvt_last_error() naming the address
 * (-EADDRINUSE, -EADDRNOTAVAIL, -EINVAL for a name that does not resolve).
 */
int peer_open(const struct peer_opts *o, const struct peer_local *local,
	      struct peer_tier **out);

/* Stops the server (connections closed, threads joined) and frees. */
void peer_close(struct peer_tier *p);

/* The member that owns key. */
unsigned peer_owner(const struct peer_tier *p, kvt_key key);

/* This node's member index. */
unsigned peer_self(const struct peer_tier *p);

/*
 * Client calls to member m (never self). Each is one round trip, bounded by
 * the timeouts; on failure the member is marked down.
 *
 * peer_lookup: present[i] = 1 where m stores keys[i]. Returns 0, -ETIMEDOUT,
 * -EHOSTDOWN (marked down, nothing asked), -ECONNREFUSED, -EPROTO, -EIO.
 *
 * peer_get_batch: loads ops from m; each op's result as for kvt_get
 * (-EBADMSG for a payload whose checksum fails); returns as peer_lookup,
 * and on failure every op not loaded has that result. sums (NULL: not
 * wanted) gets, for each op loaded, the payload checksum it was verified
 * against: a copy made later from ops[i].buf, which is the caller's and may
 * change meanwhile, is checked against it (ram_promote).
 *
 * peer_put_batch: stores ops on m; results[i] is m's result for ops[i].
 *
 * peer_release: ends leases m holds for keys (PEER_KEYS_MAX a frame).
 */
int peer_lookup(struct peer_tier *p, unsigned m, const kvt_key *keys, size_t n,
		int lease, uint8_t *present);
int peer_get_batch(struct peer_tier *p, unsigned m, kvt_op *ops, size_t n,
		   uint64_t *sums);
int peer_put_batch(struct peer_tier *p, unsigned m, const kvt_op *ops, size_t n,
		   int *results);
int peer_release(struct peer_tier *p, unsigned m, const kvt_key *keys, size_t n);

/* The member's name (for messages). */
const char *peer_name(const struct peer_tier *p, unsigned m);

/* Counters and the list of members through v ("peer" in kvt_stats_json). */
void peer_stats(struct peer_tier *p, const struct stat_visitor *v);

#endif
