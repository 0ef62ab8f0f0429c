/*
 * rlink.h - RDMA links: what a transport needs to move blocks one-sided
 * between registered memory of two nodes, and nothing of the peer protocol.
 *
 * A node (struct rlink_node) owns one listening connection id bound to its
 * own address, the protection domain of the device behind that address, the
 * memory it registered, and a thread that answers connection requests. A
 * request from an address the admit callback refuses is rejected before a
 * queue pair exists for it, so a stranger never reaches registered memory.
 * Outgoing links (struct rlink) are RC queue pairs created by dialling from
 * the node's own address; on them this node posts RDMA READs and WRITEs of
 * segments (local address and lkey, remote address and rkey, length),
 * chained per post and signalled every RLINK_SIGNAL_EVERY, and waits for
 * their completions up to a deadline.
 *
 * Failure rule: a transfer that fails (a post refused, a completion with an
 * error status, a disconnect, the deadline) breaks its link, and the link's
 * queue pair is destroyed before the call returns, so no READ or WRITE can
 * still touch either side's memory afterwards; the caller closes the link
 * and dials again later.
 *
 * Everything that touches the device goes through struct rlink_ops, the
 * seam (like rdma-core's provider ops) where tests replace libibverbs and
 * librdmacm with an in-process fabric that injects failures.
 */
#ifndef KVT_RLINK_H
#define KVT_RLINK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define RLINK_SIGNAL_EVERY 16u     /* one signalled work request per 16 */
#define RLINK_DEPTH 128u           /* work requests in flight on one link */
#define RLINK_PIECE (1ull << 30)   /* largest memory region registered at once */
#define RLINK_ACCEPTED_MAX 1024u   /* queue pairs a node keeps accepted at once */

/* One RDMA READ (remote to local) or WRITE (local to remote). */
struct rlink_seg {
	void *local;
	uint32_t lkey, rkey;
	uint64_t remote;
	uint32_t len;
};

/* One work request as the ops see it. */
struct rlink_wr {
	uint64_t id;
	int write;                 /* 0: RDMA READ, 1: RDMA WRITE */
	int signalled;
	struct rlink_seg seg;
};

/* One completion. */
struct rlink_wc {
	uint64_t id;
	int status;                /* 0, or a verbs status (nonzero: failed) */
};

enum { RLINK_EV_NONE, RLINK_EV_REQUEST, RLINK_EV_GONE };

/* A connection event seen by a node's listening side. */
struct rlink_ev {
	int type;
	void *req;                 /* REQUEST: to accept or reject */
	struct sockaddr_storage from;   /* REQUEST: the dialler's address */
	void *qp;                  /* GONE: an accepted queue pair that closed, or
				      whose connection failed before it was
				      established */
};

struct rlink_node;

/*
 * The device seam. Every call returns 0 or -errno unless said otherwise;
 * the opaque pointers (dev, mr, qp, req) belong to the ops.
 */
struct rlink_ops {
	const char *name;
	/* Binds a listening id to self and listens; *dev is the node's device
	 * state (event channel, id, protection domain). -ENODEV when no RDMA
	 * device serves that address. */
	int (*listen)(const struct sockaddr *self, void **dev);
	void (*unlisten)(void *dev);
	/* The next connection event, waiting up to wait_ms; 0 with
	 * ev->type RLINK_EV_NONE when none came. */
	int (*event)(void *dev, int wait_ms, struct rlink_ev *ev);
	/* Creates the queue pair of a request and accepts it; *qp is destroyed
	 * by drop. reject refuses a request (no queue pair is created). */
	int (*accept)(void *dev, void *req, void **qp);
	void (*reject)(void *dev, void *req);
	/* Registers for local writes, and for remote reads unless flags has
	 * RLINK_LOCAL_ONLY, and for remote writes too when it has
	 * RLINK_REMOTE_WRITE. */
	int (*reg)(void *dev, void *addr, size_t len, int flags, void **mr,
		   uint32_t *lkey, uint32_t *rkey);
	void (*dereg)(void *mr);
	/* Resolves dst from the node's own address, creates a queue pair and
	 * connects, all within wait_ms: -ETIMEDOUT, -ECONNREFUSED (rejected),
	 * -EHOSTUNREACH, -ENODEV (dst reached through another device). */
	int (*dial)(void *dev, const struct sockaddr *dst, int wait_ms, void **qp);
	/* Posts n work requests as one chain: 0, or -errno when the queue pair
	 * refused them (none of them then completes). */
	int (*post)(void *qp, const struct rlink_wr *wr, size_t n);
	/* Up to max completions, waiting up to wait_ms for the first: the count
	 * (0 when none came), or -ECONNRESET when the connection closed. With
	 * max 0 it only tells, without waiting, whether the connection closed
	 * (-ECONNRESET) or not (0). */
	int (*poll)(void *qp, int wait_ms, struct rlink_wc *wc, int max);
	/* Disconnects and destroys the queue pair: once it returns nothing of
	 * it touches memory any more. */
	void (*drop)(void *qp);
};

/* libibverbs and librdmacm (rlink_verbs.c). */
extern const struct rlink_ops rlink_verbs_ops;

/* Counters of a node, all links included. refused is counted before the
 * dialler learns of the refusal; accepted once accept returned, which may
 * be after the dialler's link is up. */
struct rlink_counters {
	_Atomic uint64_t bytes_read, bytes_written, work_requests, completion_errors;
	_Atomic uint64_t links_dialled, links_broken, accepted, refused;
	_Atomic uint64_t crowded;  /* of refused: admitted, but no room */
};

/* A registered range, in pieces of at most RLINK_PIECE bytes. */
struct rlink_region;

/* An outgoing link. */
struct rlink {
	struct rlink_node *node;
	void *qp;                  /* NULL once broken */
	uint64_t inflight;         /* unsignalled work requests not yet covered */
	uint64_t completion_errors; /* this link's, for its user's counters */
};

/*
 * Opens a node: listens on self (an RDMA CM port space of its own, so the
 * port may equal a TCP port of the same address) and starts the thread that
 * accepts requests from addresses for which admit(arg, from) returns 1 and
 * rejects every other (counted in refused; admit logs what it refuses, if
 * it wants to: a stranger's requests are not logged here). Returns 0, -ENODEV (no RDMA device for self, with
 * kvt_last_error() saying so), -EADDRINUSE, -ENOMEM.
 */
int rlink_node_open(const struct rlink_ops *ops, const struct sockaddr *self,
		    int (*admit)(void *arg, const struct sockaddr *from), void *arg,
		    struct rlink_node **out);

/* What a node keeps room for, besides admit's rule. */
struct rlink_limits {
	/* The most queue pairs kept accepted at once from the host of from
	 * (its address, the port not compared), for an address admit
	 * admitted; NULL: no cap but RLINK_ACCEPTED_MAX for all together. */
	unsigned (*per_host)(void *arg, const struct sockaddr *from);
	/* Requests refused for want of room (past per_host, or with
	 * RLINK_ACCEPTED_MAX accepted): the first is logged, those that follow
	 * within log_ms are counted quietly (crowded) and logged as one
	 * summary line once the period ends, or at close; 0: 10000 ms. */
	uint32_t log_ms;
};

/* rlink_node_open with the limits of lim (NULL: none but
 * RLINK_ACCEPTED_MAX, logged at most once per 10000 ms). */
int rlink_node_open_limited(const struct rlink_ops *ops, const struct sockaddr *self,
			    int (*admit)(void *arg, const struct sockaddr *from),
			    void *arg, const struct rlink_limits *lim,
			    struct rlink_node **out);

/* Stops the thread, drops every accepted queue pair and every region, frees. */
void rlink_node_close(struct rlink_node *n);

struct rlink_counters *rlink_node_counters(struct rlink_node *n);

/*
 * Registers [addr, addr + len) with the node's device for local writes and
 * remote reads; remote writes only with RLINK_REMOTE_WRITE in flags (a
 * member's WRITE into memory registered without it fails with a completion
 * error on its side and never lands); no remote access at all with
 * RLINK_LOCAL_ONLY (a member's READ of it fails the same way). Returns 0
 * or -errno (kvt_last_error() says why).
 */
#define RLINK_REMOTE_WRITE 1
#define RLINK_LOCAL_ONLY 2         /* no remote access at all: only this
				      node's READs land in it */
int rlink_reg(struct rlink_node *n, void *addr, size_t len, int flags,
	      struct rlink_region **out);

/* Deregisters (no link may still use the region's keys). */
void rlink_unreg(struct rlink_region *r);

/* The keys of [p, p + len), which must lie in one piece of r: 0 or -ERANGE. */
int rlink_keys(const struct rlink_region *r, const void *p, size_t len,
	       uint32_t *lkey, uint32_t *rkey);

/*
 * The segments that move [p, p + len) of r from or to remote (rkey): one
 * per piece of r that the range touches, each with that piece's lkey, the
 * remote address advancing with the local one. Writes at most max to out
 * and returns how many; 0 when the range is empty, not within r, or would
 * need more than max. A range touches at most len / RLINK_PIECE + 2 pieces.
 */
size_t rlink_segs(const struct rlink_region *r, void *p, size_t len, uint64_t remote,
		  uint32_t rkey, struct rlink_seg *out, size_t max);

/*
 * Dials dst from the node's own address, waiting up to wait_ms. Returns 0
 * with *out, or the dial error with kvt_last_error() naming dst.
 */
int rlink_dial(struct rlink_node *n, const struct sockaddr *dst, int wait_ms,
	       struct rlink **out);

/*
 * Moves n segments (all READs or all WRITEs) and waits for every one of them
 * until deadline (CLOCK_MONOTONIC ns, kvt_now_ns()); nothing is posted once
 * the deadline passed, and nothing is in flight once this returns. Returns 0 once all
 * completed without error; otherwise the link is broken (its queue pair
 * destroyed, so nothing is still in flight) and the result is -EIO (a
 * completion failed or the post was refused), -ECONNRESET (disconnected),
 * -ETIMEDOUT or -ENOTCONN (already broken).
 */
int rlink_move(struct rlink *l, int write, const struct rlink_seg *s, size_t n,
	       uint64_t deadline);

/* 1 while the link can carry transfers. */
int rlink_alive(const struct rlink *l);

/*
 * Asks the device, without waiting, whether the link's connection closed
 * since its last transfer (its member's process ended or restarted, say):
 * then the link is broken (its queue pair destroyed, counted in
 * links_broken) and 0 is returned, so that the caller dials again before
 * it relies on the link rather than failing a transfer on it. 1 while it
 * can carry transfers; 0 for a link already broken.
 */
int rlink_check(struct rlink *l);

/* Drops the link's queue pair (if still there) and frees it. */
void rlink_close(struct rlink *l);

#endif
