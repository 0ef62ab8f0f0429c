/*
 * fabric.h - an in-process RDMA fabric behind rlink.h's device seam, for the
 * tests on the CPU (test_rlink, test_peer_rdma): nodes, registrations and
 * queue pairs in one process, work requests run against the registered
 * memory, and what a soft-RoCE VM cannot produce on demand injected through
 * F: a completion with an error status, a queue pair that refuses posts, a
 * disconnect after some requests, completions that never come, a failing
 * registration, no device.
 */
#ifndef KVT_TEST_FABRIC_H
#define KVT_TEST_FABRIC_H

#include <netinet/in.h>
#include <pthread.h>

#include "rlink.h"

#define MRS 64
#define DEVS 8

/* readable: by members (remote reads and writes); writable: by their WRITEs */
struct fmr { int live, writable, readable; uint8_t *addr; size_t len; uint32_t key; };
struct fqp;
struct fdev {
	int live;
	struct sockaddr_in self;
	struct rlink_ev pending;   /* one connection request at a time */
	int has_pending;
};
struct freq { struct fdev *from; int decided, accepted; struct fqp *sqp; };
struct fqp {
	int server, dropped;
	int reset;                 /* poll answers -ECONNRESET */
	struct rlink_wc wc[RLINK_DEPTH];
	int nwc;
	struct rlink_wr stalled[RLINK_DEPTH];
	int nstalled;
	struct fqp *peer;
};

struct fabric {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct fdev dev[DEVS];
	struct fmr mr[MRS];
	uint32_t next_key;
	/* injection */
	int fail_status_at;        /* work request number that completes in error (1-based) */
	int refuse_post;
	int reset_after;           /* disconnect once this many requests ran */
	int stall;                 /* hold requests back without completing them */
	int slow_ms;               /* completions reported this much late */
	int fail_reg_at;           /* registration number that fails (1-based) */
	int nodev;
	/* observations */
	int wrs, signalled, posts, max_chain, regs, server_qps, server_drops;
	int dialled_drops;         /* queue pairs of dialled links destroyed */
	int max_outstanding, outstanding;
	struct fdev *gone_dev;
	struct fqp *gone_qp;
};
extern struct fabric F;

/* Clears every device, registration, injection and observation. */
void fabric_reset(void);
/* Registrations alive now. */
int live_mrs(void);
/* One of F's observations, read under its lock. */
int seen(const int *field);
/* Runs one work request against the fabric's memory: 0 or a status
 * (call with F.lock held). */
int run_wr(const struct rlink_wr *w);
/* What a queue pair that was never destroyed would still do: the held-back
 * requests land now. */
void release_stalled(struct fqp *q);

extern const struct rlink_ops fake_ops;

#endif
