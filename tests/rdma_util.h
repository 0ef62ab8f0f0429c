/*
 * rdma_util.h - what the RDMA tests of the soft-RoCE VM share
 * (test_peer_rdma_verbs.c, test_peer_rdma_owner.c, test_rlink_verbs.c):
 * a store that is a member of the two-member cluster {a at 10.77.0.1, b at
 * 10.77.0.2} with peers over RDMA, its statistics, large buffers, and this
 * program run again as a second process.
 */
#ifndef KVT_TEST_RDMA_UTIL_H
#define KVT_TEST_RDMA_UTIL_H

#include <stddef.h>
#include <sys/types.h>

#include "kvtier.h"

/* The members' names: rdma_names[0] "a" at 10.77.0.1, [1] "b" at .2. */
extern const char *const rdma_names[2];

/* What a test's members differ in: the RAM tier's capacity (a size as the
 * configuration writes it), peers.request_timeout_ms and peers.down_ms. */
struct rdma_member_opts {
	const char *capacity;
	unsigned request_ms, down_ms;
};

/* A store that is member self (0: a, 1: b) of {a, b}, both on port, peers
 * over RDMA with connect_timeout_ms 3000 and o's values. Returns
 * kvt_open's result; when it fails, says why on stdout (flushed, as a
 * child process may exit at once). */
int rdma_open_member(const struct rdma_member_opts *o, int self, int port,
		     kvt_store **s);

/* A JSON value at path (dot-separated, a number selects an array's element)
 * of the store's statistics, as an integer (true: 1); fails the test if
 * there is none. */
long long rdma_stat_at(kvt_store *s, const char *path);

/* len bytes of fresh anonymous memory; fails the test if there are none. */
void *rdma_big(size_t len);

/*
 * Runs this program again as a second process: a fresh exec of
 * /proc/self/exe (fork alone would share this process's verbs context,
 * which librdmacm opened, and so keep the child's memory registered) with
 * the arguments name (its argv[0]), role, port and the descriptor of a
 * pipe it writes to when it is ready. Reads len bytes from there into msg,
 * failing the test if the child ends first, and returns its pid.
 */
pid_t rdma_spawn(const char *name, const char *role, int port, void *msg, size_t len);

/* rdma_spawn() of a child whose one byte says it is ready (1) or not. */
pid_t rdma_spawn_ready(const char *name, const char *role, int port);

#endif
