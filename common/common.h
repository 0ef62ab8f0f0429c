/*
 * common.h - the few helpers that kvbench (bench/) and the test suite
 * (tests/) both use, kept in a home of their own so that a test of the
 * library links neither the benchmark nor a copy of these: verifiable block
 * contents, the rendezvous owner of a key written out apart from the
 * library, and loopback ports held for stores that are peers.
 *
 * Uses only the public <kvtier.h> (for kvt_key) and xxHash.
 */
#ifndef KVT_COMMON_H
#define KVT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

/* --- verifiable block contents (blocks.c) ------------------------------------ */

/* One step of splitmix64: advances *state and returns the next value. */
uint64_t common_mix64(uint64_t *state);

/* A seed for block contents derived from a key (mixes both halves). */
uint64_t common_key_seed(kvt_key key);

/* Fills buf with len bytes of a pseudo-random stream determined by seed
 * (fast: 8 bytes per step; any len; any byte can be recomputed alone). */
void common_fill(void *buf, size_t len, uint64_t seed);

/* Returns the offset of the first byte of buf that differs from
 * common_fill(seed), or -1 when all len bytes match. */
long long common_check(const void *buf, size_t len, uint64_t seed);

/* --- peers (peers.c) ----------------------------------------------------------- */

/*
 * The member of names[0..n) that owns key k: rendezvous hashing as the
 * library's peer tier defines it (the highest XXH3-64 of the key, lo then
 * hi little-endian, seeded by the XXH3-64 of the name; a tie goes to the
 * member listed first), written out again so that benchmarks and tests can
 * pick keys by owner and check the library against it.
 */
unsigned common_key_owner(kvt_key k, const char *const *names, unsigned n);

/*
 * Ports of 127.0.0.1 held for stores that listen on them. Each port is
 * bound (SO_REUSEADDR, not listening) by a socket kept open until
 * common_ports_release(): meanwhile no other bind, and no port-0 or
 * outgoing connection of any process, can take it, while a store, whose
 * listener also sets SO_REUSEADDR, can still bind and listen on it. Release
 * once the stores listen (or failed to).
 */
#define COMMON_PORTS_MAX 16
struct common_ports {
	unsigned n;
	int port[COMMON_PORTS_MAX];
	int fd[COMMON_PORTS_MAX];
};

/* Holds n distinct ports in *p (p->port[0..n)). Returns 0 or -errno
 * (-EINVAL above COMMON_PORTS_MAX); on failure nothing is held. */
int common_ports_reserve(struct common_ports *p, unsigned n);

/* Closes the holding sockets; the ports are then the stores' alone. Safe
 * to call twice and on a zeroed struct. */
void common_ports_release(struct common_ports *p);

#endif
