/*
 * local_proto.h - the frames between a node store (local_server.c,
 * local_requests.c) and the processes attached to it (local_client.c) over
 * its Unix socket. Both ends
 * run on one machine, so integers are in the host's byte order. Knows
 * nothing about tiers or the store; see kvtier(7), "Attached processes".
 *
 * Every frame is a header and len bytes of payload:
 *   u16 magic LP_MAGIC, u8 version LP_VERSION, u8 type, u32 len
 * A request's type is one of LP_*; its reply (when the request does not
 * carry LP_NOREPLY) has type | LP_REPLY and starts with an i32 status: 0 or
 * a count, or a negative errno followed by the error's text (no NUL). The
 * first request is HELLO; the server answers it with the arena's memfd and,
 * when it has one, the memfd of its directory of RAM blocks (ram_dir.h), in
 * that order (SCM_RIGHTS), or a refusal, and serves requests in order,
 * however many arrive in one read. Only an UNPIN or a HITS may carry
 * LP_NOREPLY, and a HITS must: a client sends the unpins of its gets and
 * the keys of the gets it served itself from the directory so, in front of
 * its next request and in the same send (or alone once LC_HITS keys wait),
 * and the server ends the pins and counts the hits before it serves that
 * request. A frame whose header or payload breaks these rules ends the
 * connection.
 *
 * Version 2 added the directory (lp_hello.dir_len, the second memfd) and
 * HITS; a server of one version refuses a client of another at HELLO.
 */
#ifndef KVT_LOCAL_PROTO_H
#define KVT_LOCAL_PROTO_H

#include <errno.h>
#include <stdint.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "internal.h"

#define LP_MAGIC 0x4c4bu      /* "KL" */
#define LP_VERSION 3u
#define LP_REPLY 0x40u        /* reply bit of type */
#define LP_NOREPLY 0x80u      /* request bit of type: send no reply */
#define LP_HELD 0x20u         /* request bit of LP_PIN (kept in the reply's
				 type): the pins are the client library's
				 own, for one get whose first pin may have
				 lapsed (its copy, or the wait for the
				 answer after its load landed, outlasted
				 ram.pin_ms); they do not lapse, and the
				 client unpins them at once */
#define LP_KEYS_MAX 4096u     /* keys or slots in one request */
#define LP_TEXT_MAX 1024u     /* error text in a reply */
#define LP_STATS_MAX (4u << 20) /* statistics document in a reply */

enum lp_type {
	LP_HELLO = 1,   /* u32 version -> hello reply (+ memfd) */
	LP_LOOKUP,      /* u32 flags, u32 n, key[n] -> u32 found */
	LP_RELEASE,     /* u32 n, key[n] -> status = leases ended */
	LP_REMOVE,      /* key -> status */
	LP_STATS,       /* (empty) -> the statistics JSON text */
	LP_PIN,         /* u32 n, key[n] -> u32 n, lp_slot[n] */
	LP_UNPIN,       /* u32 n, u64 ref[n] -> status = pins released */
	LP_RESERVE,     /* u32 n, lp_want[n] -> u32 n, lp_slot[n] */
	LP_COMMIT,      /* u32 n, lp_commit[n] -> u32 n, i32 result[n] */
	LP_ABORT,       /* u32 n, u64 ref[n] -> u32 n, i32 result[n] */
	LP_PUT,         /* key, u64 len, len bytes -> status */
	LP_HITS,        /* u32 n, key[n]: gets served from the directory
			   (LP_NOREPLY only) */
	LP_TYPE_END
};

struct lp_hdr {
	uint16_t magic;
	uint8_t version;
	uint8_t type;
	uint32_t len;
};

struct lp_key {
	uint64_t lo, hi;
};

/* The server's answer to HELLO (after the i32 status). */
struct lp_hello {
	uint32_t version;
	uint32_t lease_ms;
	uint64_t arena_len;   /* bytes of the memfd to map */
	uint64_t max_block;
	uint32_t pin_ms;
	uint32_t max_keys;    /* LP_KEYS_MAX */
	uint64_t dir_len;     /* bytes of the directory's memfd; 0: none
				 (and no second memfd) */
	uint32_t spin_us;     /* local.spin_us: how long either end polls for
				 the other's next frame before sleeping */
	uint32_t zero;        /* 0 */
};

/* The most local.spin_us allows. */
#define LP_SPIN_MAX 1000

/* One slot of a PIN or RESERVE reply. */
struct lp_slot {
	int32_t result;       /* as kvt_slot.result */
	uint32_t len;
	uint64_t off;         /* from the arena's start */
	uint64_t ref;         /* this connection's handle of the slot */
};

/* One slot of a RESERVE request. len with LP_WANT_HELD set: the
 * reservation is the client library's own, for one kvt_put that writes it
 * and commits it at once; the node store does not lapse it after
 * ram.pin_ms (the client's copy may take longer), only the connection's
 * end does. */
struct lp_want {
	struct lp_key key;
	uint64_t len;
};
#define LP_WANT_HELD (1ull << 63)

/* One slot of a COMMIT request: the checksum (kvt_checksum, XXH3-64) of
 * the bytes the client wrote, checked by the server before publishing. */
struct lp_commit {
	uint64_t ref;
	uint64_t sum;
};

/* Largest payload of a request: a PUT of max_block bytes, or a full list. */
static inline uint64_t lp_payload_max(uint64_t max_block)
{
	uint64_t list = 8 + (uint64_t)LP_KEYS_MAX * sizeof(struct lp_want);
	uint64_t put = sizeof(struct lp_key) + 8 + max_block;
	return put > list ? put : list;
}

/* Sends all of m's iovecs (its control data, if any, with the first
 * bytes), without SIGPIPE; the iovecs are consumed. 0, or -1 when the
 * connection failed. */
static inline int lp_send_all(int fd, struct msghdr *m)
{
	while (m->msg_iovlen) {
		ssize_t w = sendmsg(fd, m, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		m->msg_control = NULL;
		m->msg_controllen = 0;
		while (m->msg_iovlen && (size_t)w >= m->msg_iov->iov_len) {
			w -= (ssize_t)m->msg_iov->iov_len;
			m->msg_iov++;
			m->msg_iovlen--;
		}
		if (m->msg_iovlen) {
			m->msg_iov->iov_base = (char *)m->msg_iov->iov_base + w;
			m->msg_iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* Polls fd for input without sleeping for up to us microseconds: 1 when it
 * became readable (or failed: the read that follows says how), 0 when the
 * time ran out. Called before a read that would sleep, so that a reply or a
 * request that follows within microseconds does not pay for waking a
 * sleeping CPU (tens of microseconds on an idle virtual machine). */
static inline int lp_spin_readable(int fd, unsigned us)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	if (!us)
		return 0;
	for (uint64_t end = kvt_now_ns() + (uint64_t)us * 1000; kvt_now_ns() < end;) {
		int r = poll(&pf, 1, 0);
		if (r != 0 && !(r < 0 && errno == EINTR))
			return 1;
	}
	return 0;
}

/* --- bounded waits (local_wait.c) -------------------------------------------------- */

/* How long each end waits for the other's part of the HELLO exchange: the
 * client from its connect to the HELLO answer, the node store from the
 * accept to the HELLO. */
#define LP_HELLO_MS 5000
/* The bound in use: LP_HELLO_MS, lowered by the tests. */
extern _Atomic unsigned lp_hello_ms;
/* kvt_now_ns() + lp_hello_ms: the deadline of a HELLO exchange that starts
 * now. */
uint64_t lp_hello_deadline(void);
/* Bounds each send on fd to ms milliseconds (SO_SNDTIMEO; 0: no bound):
 * 0, or -errno with the error text. */
int lp_send_timeout(int fd, unsigned ms);
/* A Unix stream socket connected to the node store at path, the connect
 * waiting lp_hello_ms at most for room in a backlog (SO_SNDTIMEO, which
 * stays set for the HELLO that follows): the socket, or -errno with the
 * error text (-ETIMEDOUT for a store that accepts no more). */
int lp_connect(const char *path);
/* Waits until fd is readable (or failed: the read that follows says how)
 * or the deadline (kvt_now_ns() time; 0: none) passes: 1, or 0 when the
 * time ran out. */
int lp_wait_readable(int fd, uint64_t deadline);
/* What lp_recv_some (and the node store's reads) return when the deadline
 * passed first: apart from -1 (end of file, error) and the node store's -2
 * (a malformed frame). */
#define LP_LATE (-3)
/*
 * Reads at least need and at most cap bytes into p (with fds non-NULL, also
 * the descriptors passed along, at most 2, into fds[0] and fds[1], which
 * start at -1), waiting until deadline at most (0: no bound): the bytes
 * read, -1 at end of file or on error, LP_LATE when the time ran out.
 */
ssize_t lp_recv_some(int sock, void *p, size_t need, size_t cap, int *fds,
		     uint64_t deadline);

#endif
