/*
 * peer_cmd.h - what the files of "kvbench peer" share: the run (options,
 * the two member stores, the keys, the buffers) and the calls one makes in
 * another. peer.c is the command (options, set-up, repetitions through the
 * public API, report); peer_limit.c measures the limit the loads are
 * divided by: a plain TCP stream on 127.0.0.1, or RDMA READs between the
 * two hosts.
 */
#ifndef KVBENCH_PEER_CMD_H
#define KVBENCH_PEER_CMD_H

#include <stdint.h>

#include "kvtier.h"

#define LOOKUP_KEYS 64            /* keys of the lookup chain */
#define LOOP_TIMEOUT_S 30         /* a stalled limit loop gives up */

struct run {
	uint64_t bs;
	unsigned long nblocks, batch;
	unsigned reps;
	unsigned port_a, port_b, port_loop;
	unsigned request_ms;
	int rdma;                 /* --transport rdma */
	int promote;              /* --promote: peers.promote true on a */
	uint64_t cpu_ns;          /* process CPU time of the last load or loop */
	char host[2][64];         /* --hosts */
	char soft_dev[64];        /* a software RDMA device found, or "" */
	kvt_store *a, *b;
	kvt_key *keys;            /* nblocks keys owned by b */
	kvt_key chain[LOOKUP_KEYS]; /* lookup keys owned by b */
	char *dst;                /* batch * bs: where a loads into */
	char *src;                /* bs: what the limit's sender sends */
};

/* peer_limit.c */
/* CPU time of this process, all threads, user and system (ns). */
uint64_t pb_process_cpu_ns(void);
/* One pass of the limit (TCP, or RDMA with --transport rdma) moving
 * r->nblocks * r->bs bytes into r->dst's batch buffers: bytes/s, or NAN
 * (said on stderr); r->cpu_ns: the process CPU time it took. */
double pb_limit_loop(struct run *r);
/* The first software RDMA device (rxe, siw) into r->soft_dev, or "". */
void pb_find_soft_device(struct run *r);

#endif
