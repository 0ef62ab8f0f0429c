/*
 * peer_util.h - what the tests of the peer tier (test_peer_members.c,
 * test_peer_faults.c, test_peer_server.c) share: the wire as lib/peer.h and
 * kvtier-peer(7) specify it, written out here so that the tests pin it;
 * raw sockets and frames built by hand; the fixture of two nodes a and b
 * on loopback; and a fake member b that answers as a test asks.
 */
#ifndef KVT_TEST_PEER_UTIL_H
#define KVT_TEST_PEER_UTIL_H

#include <endian.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvtier.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

/* The peers' timeouts of the tests' nodes (see node_at). */
#define CONNECT_MS 300
#define REQUEST_MS 1000
#define DOWN_MS 500

/* The wire, as lib/peer.h and kvtier-peer(7) specify it. */
#define MAGIC 0x3150564bu
#define HDR 24        /* frame header */
#define KEY_SZ 16     /* LOOKUP / RELEASE key */
#define GET_SZ 24     /* GET item: lo, hi, capacity */
#define GETR_SZ 32    /* GET_R header: i32 status, u32 0, u64 len, sum, 0 */
#define PUT_SZ 32     /* PUT item header: lo, hi, len, sum */
#define RESP 0x80u
enum { T_HELLO = 1, T_LOOKUP, T_GET, T_PUT, T_RELEASE, T_ERROR = 0xff };

/* CLOCK_MONOTONIC in milliseconds. */
long long now_ms(void);

/* Little-endian fields of the wire. */
static inline void put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static inline void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static inline void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static inline unsigned get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static inline uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static inline uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* n keys that `owner` owns, from test_key(from) on. */
void owned_keys(unsigned owner, uint64_t from, kvt_key *out, size_t n);

/* ip:port as a socket address. */
struct sockaddr_in loopback(const char *ip, int port);

/* test_free_port(). */
int free_port(void);

/* A socket listening on 127.0.0.1:port; fails the test if it cannot. */
int listen_on(int port);

/* SO_RCVTIMEO and SO_SNDTIMEO of secs seconds. */
void set_timeouts(int fd, int secs);

/* A TCP connection from src (NULL: any) to dst:port, or -1. */
int raw_connect(const char *src, const char *dst, int port);

/* Sends all n bytes: 0, or -1. */
int send_all(int fd, const void *buf, size_t n);

/*
 * Reads n bytes within timeout_ms. Returns 0; 1 when the other side closed
 * or reset; -1 on timeout or when *stop is set.
 */
int recv_wait(int fd, void *buf, size_t n, int timeout_ms, atomic_int *stop);

/* A frame header of type, count, flags and body length at h. */
void mkhdr(uint8_t *h, unsigned type, uint32_t count, uint32_t flags, uint64_t len);

/* A frame header and its body sent: 0, or -1. */
int send_frame(int fd, unsigned type, uint32_t count, uint32_t flags,
	       const void *body, uint64_t len);

/* The fixture of every test: two ports held, nodes a and b, a fake b. */
struct fx {
	int pa, pb;
	kvt_store *a, *b;
	struct fake *fake;
};

/* Holds two ports pa and pb; afterwards takes the log hook back, closes
 * the nodes a test opened and stops its fake. */
int fx_setup(void **state);
int fx_teardown(void **state);

/* A test with the fixture. */
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

/*
 * Node self of the cluster {a: ipa:pa, b: ipb:pb}, listening on its own
 * member address; extra is more "peers" keys (", \"key\": value") or "",
 * and replaces the CONNECT_MS and REQUEST_MS defaults when it gives
 * connect_timeout_ms or request_timeout_ms.
 */
kvt_store *node_at(const char *self, const char *ipa, int pa, const char *ipb,
		   int pb, const char *extra);

/* For a test whose one request must not fail on a loaded machine. */
#define SLOW_CONNECT ", \"connect_timeout_ms\": 5000"

/* Node self of the cluster {a: 127.0.0.1:pa, b: 127.0.0.1:pb}. */
kvt_store *node(const char *self, int pa, int pb);

/* Peer hits copied into the loader's RAM (peers.promote). */
#define PROMOTE ", \"promote\": true"

/* Opens a and b (with more "peers" keys extra) and waits until each
 * reaches the other. */
void open_pair_with(struct fx *f, const char *extra);

/* open_pair_with() with no more keys. */
void open_pair(struct fx *f);

#define FAKE_LEN MiB  /* what the fake peer serves for every key */

/* FAKE_DROP_SECOND answers the first request of each connection and closes
 * the connection on the second without answering it, as a server that
 * closes an idle connection just as a request arrives. FAKE_ERROR_SECOND
 * answers the first item of a GET and refuses the rest with an ERROR.
 * FAKE_DRIP sends each block in 8 pieces 10 ms apart. FAKE_LATE_CLOSE
 * answers the first request of its first connection, closes that
 * connection 0.8 request timeouts into the second without answering, and
 * answers nothing but HELLO on any later connection. FAKE_BAD_ERROR answers
 * a GET with an ERROR frame that claims a 1 MiB message, sends 5 bytes of
 * it and keeps the connection open. */
enum fake_mode { FAKE_GOOD, FAKE_SHORT, FAKE_BADSUM, FAKE_SILENT, FAKE_MALFORMED,
		 FAKE_DROP_SECOND, FAKE_ERROR_SECOND, FAKE_DRIP, FAKE_LATE_CLOSE,
		 FAKE_BAD_ERROR };

#define FAKE_CONNS 8
struct fake_conn {
	struct fake *f;
	int fd;
	pthread_t thread;
};

struct fake {
	int lfd;
	enum fake_mode mode;
	atomic_int stop, conns, hellos, gets;
	pthread_t thread;
	struct fake_conn c[FAKE_CONNS]; /* only the accepting thread */
	int nc;
};

/* A fake member b listening on port, answering as mode says. */
struct fake *fake_start(int port, enum fake_mode mode);
/* Stops the fake member and frees it. */
void fake_stop(struct fake *f);

#endif
