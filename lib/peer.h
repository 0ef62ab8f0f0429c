/*
 * peer.h - the peer tier: membership, rendezvous hashing, the control and
 * data protocol over TCP, the server thread and the client side, and the
 * transports that move a block's bytes beneath the protocol: "tcp" (inline
 * in the frames) and "rdma" (one-sided READs, peer_rdma.c).
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
 *
 * The transport seam. Everything that decides (membership, HELLO, owners,
 * lookups and leases, pins and deadlines) stays in these control frames on
 * the TCP connection, for both transports; only where a block's bytes
 * travel differs. Keeping one protocol means one set of checks, one
 * members-only rule and one failure model, and a member without RDMA is
 * still served (inline). With peers.transport "rdma" (or "auto" where a
 * device serves this node's address):
 *   GET      flags bit 0 = descriptors welcome (sent only over a working
 *            link). The owner answers a block in its RAM with a GET_R of
 *            flags bit 0 whose 48-byte body is a descriptor: i32 0, u32
 *            rkey, u64 len, u64 sum, u64 address, u64 pin id, u64 hold_ms;
 *            it pinned the block for hold_ms first (a hold_ms of 0 or
 *            above PEER_HOLD_MS_MAX is a malformed answer). Anything else (not in
 *            RAM, too large, no pin left) is answered inline as before, so
 *            a block on the owner's disk is not promoted to be lent.
 *            The requester READs all descriptors of the batch into its
 *            registered staging in one chain (rlink_move) that ends by
 *            three quarters of hold_ms from before it asked (straight into
 *            a caller buffer in memory registered with kvt_mem_register),
 *            checks every checksum, copies each staged block to the
 *            caller's buffer, and then sends one UNPIN with the pin ids.
 *   UNPIN    (0x06) count pin ids, body = count x u64; no answer.
 *   PUT      flags bit 0 = an offer: body = count x (u64 lo, u64 hi, u64
 *            len, u64 sum, u64 address, u32 rkey, u32 0) describing the
 *            bytes in the requester's staging. The owner reserves arena
 *            space, READs them over its own link to the requester, checks
 *            each checksum and only then publishes it; PUT_R as before.
 *            Owner-pull rather than the requester WRITing into reserved
 *            space: no memory anywhere is registered for remote writes,
 *            there is no reserve round trip, and a requester that dies
 *            after its offer makes the owner's READ fail, which frees the
 *            reservation unpublished and counts a failed put.
 * Exposed memory: the RAM arena (registered once at open) and each
 * member's staging, both for remote reads only. A block is lent from the
 * arena only while pinned: the pin ends at the UNPIN, when the connection
 * that took it ends, or when hold_ms (2 x peers.request_timeout_ms + 1 s)
 * lapses; the requester gave up and destroyed its queue pair by three
 * quarters of that, so no READ is in flight when RAM may reuse the space
 * (pins.h), and a READ that raced a reuse would fail its checksum.
 */
#ifndef KVT_PEER_H
#define KVT_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "stats.h"

#define PEER_KEYS_MAX 4096u       /* keys or items in one frame */
#define PEER_MS_MAX 600000u       /* the largest peers.*_ms setting */
/* the longest hold_ms an owner within the configuration's limits offers
 * (2 x peers.request_timeout_ms + 1 s): a descriptor offering more is
 * malformed */
#define PEER_HOLD_MS_MAX (2ull * PEER_MS_MAX + 1000)

/*
 * What a peer serves from: this node's own tiers, never forwarding. All four
 * are called from the server's connection threads, concurrently.
 */
struct peer_local {
	void *arg;
	/* present[i] = 1 where keys[i] is stored here (and leased if lease) */
	void (*lookup)(void *arg, const kvt_key *keys, size_t n, int lease,
		       uint8_t *present);
	/* as kvt_get, local tiers only; on 0, *sum is the checksum of the
	 * bytes (the one the disk verified them against, or the RAM block's
	 * kept one), so that they need not be read again for it */
	int (*get)(void *arg, kvt_key key, void *buf, size_t cap, size_t *len,
		   uint64_t *sum);
	/* a block of at most cap bytes held in RAM, handed to fn(fnarg, bytes,
	 * len, sum) in place, pinned until fn returns (sent without a copy),
	 * sum the checksum kept with the block (its bytes are not read for
	 * it); returns fn's result, -ENOENT (not in RAM: use get) or -ENOBUFS
	 * with *len set. May be NULL. */
	int (*visit)(void *arg, kvt_key key, size_t cap,
		     int (*fn)(void *fnarg, const void *block, size_t len, uint64_t sum),
		     void *fnarg, size_t *len);
	/* as kvt_put_batch, local tiers only; sets each op's result */
	void (*put)(void *arg, kvt_op *ops, size_t n);
	void (*release)(void *arg, const kvt_key *keys, size_t n);
	/* The RDMA transport's (all NULL: blocks always travel inline).
	 * pin: the RAM block of key (at most cap bytes), pinned in the arena
	 * until unpin(ref): 0 with *block, *len and *sum (the checksum kept
	 * with it, as visit's), -ENOENT (not in RAM), -ENOBUFS with *len.
	 * reserve: len bytes of arena for a block that is not visible yet: 0
	 * with *at and *handle, or -errno. publish makes it key's block, its
	 * bytes verified against sum (0, or -errno with the space freed);
	 * unreserve frees it unpublished. */
	int (*pin)(void *arg, kvt_key key, size_t cap, uint64_t *ref, void **block,
		   size_t *len, uint64_t *sum);
	void (*unpin)(void *arg, uint64_t ref);
	int (*reserve)(void *arg, size_t len, void **at, uint64_t *handle);
	int (*publish)(void *arg, kvt_key key, uint64_t handle, size_t len, uint64_t sum);
	void (*unreserve)(void *arg, uint64_t handle);
};

/* peers.transport */
enum { PEER_TCP, PEER_RDMA, PEER_AUTO };

struct rlink_ops;

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
	int transport;                /* peers.transport: PEER_TCP, _RDMA, _AUTO */
	const struct rlink_ops *rdma_ops; /* NULL: libibverbs (tests: a fake) */
	void *arena;                  /* the RAM arena, registered once for */
	size_t arena_len;             /* RDMA (NULL: blocks go inline) */
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

/*
 * Caller memory (kvt_mem_register) registered with the RDMA device too, so
 * that a get whose buffer lies in it READs straight there instead of
 * through staging. peer_mem_register returns 0, or -errno when the range
 * is not registered with the device (TCP transport: -ENOTSUP; the device
 * refused, or PEER_MEM_MAX ranges: logged); the range then works through
 * staging. peer_mem_deregister ends the registration of the range at base
 * (waiting for READs into it in flight, each bounded by its deadline).
 */
#define PEER_MEM_MAX 64
int peer_mem_register(struct peer_tier *p, void *base, size_t len);
void peer_mem_deregister(struct peer_tier *p, void *base);

/* The member's name (for messages). */
const char *peer_name(const struct peer_tier *p, unsigned m);

/* Counters and the list of members through v ("peer" in kvt_stats_json). */
void peer_stats(struct peer_tier *p, const struct stat_visitor *v);

#endif
