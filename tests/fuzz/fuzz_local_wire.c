/*
 * fuzz_local_wire.c - libFuzzer target for the node store's local socket
 * (lib/local_server.c, lib/local_requests.c): whatever bytes an attached
 * process may send once its HELLO is answered.
 *
 * Once per process it opens a store serving local.socket in a fresh
 * directory, and attaches a second store to it (the witness). For each
 * input it connects, says HELLO and checks the answer (status 0, the
 * memfds of the arena and of the directory of RAM blocks passed along),
 * sends the input as it is (often many frames in one read of the server's,
 * as a client's deferred unpins and directory hits arrive in front of its
 * next request) while reading what comes back, shuts its side down and
 * reads until the server closes, which it must do within LW_SILENCE_MS of
 * its last byte. Every frame that comes
 * back must be a well-formed reply: the magic, the version, the reply bit,
 * a status, and for a failure at most LW_TEXT_MAX bytes of text.
 *
 * Once the server has closed the connection, whatever it was sent, nothing
 * may stay held for it: the store's local.pinned_blocks,
 * local.reserved_blocks and local.leased_blocks read 0, as does
 * slots.held; and the witness must still work: a put and a get of a small
 * block under a fresh key, bytes compared, then its removal.
 *
 * The wire constants are written out here from lib/local_proto.h and
 * kvtier(7), not taken from lib/, so the target also pins the protocol.
 * Built by `make fuzz` and replayed over tests/fuzz/corpus/local_wire by
 * tests/test_fuzz_corpus.c (which renames LLVMFuzzerTestOneInput).
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "kvtier.h"

/* The wire (lib/local_proto.h); host byte order. */
#define LW_MAGIC 0x4c4bu
#define LW_VERSION 3u
#define LW_HELLO 1u
#define LW_REPLY 0x40u
#define LW_TEXT_MAX 1024u
#define LW_HELLO_LEN 48u          /* struct lp_hello */

#define LW_SILENCE_MS 2000        /* the longest the server may say nothing */
#define LW_OUT_MAX (64u << 20)    /* more answer than any input here can ask */

#define LW_CHECK(cond, ...)                                                    \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_local_wire: invariant broken: %s: ", \
				#cond);                                        \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			abort();                                               \
		}                                                              \
	} while (0)

static kvt_store *lw_node, *lw_witness;
static char lw_dir[] = "/tmp/kvt-fuzz-local-XXXXXX";
static char lw_sock[96];
static uint64_t lw_inputs;

/* At exit: the stores close (the socket file goes with the node store),
 * then their directory. */
static void lw_teardown(void)
{
	kvt_close(lw_witness);
	kvt_close(lw_node);
	rmdir(lw_dir);
}

static void lw_setup(void)
{
	char cfg[512];

	LW_CHECK(mkdtemp(lw_dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(lw_sock, sizeof(lw_sock), "%s/node.sock", lw_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"4MiB\", \"max_block\": \"64KiB\","
		 " \"mlock\": false, \"lease_ms\": 200, \"pin_ms\": 1000}, \"threads\": 1,"
		 " \"local\": {\"socket\": \"%s\", \"max_held\": 256}}", lw_sock);
	int rc = kvt_open(cfg, &lw_node);
	LW_CHECK(rc == 0, "kvt_open: %s", kvt_last_error());
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", lw_sock);
	rc = kvt_open(cfg, &lw_witness);
	LW_CHECK(rc == 0, "attach: %s", kvt_last_error());
	atexit(lw_teardown);
}

/* A connection that has said HELLO and had its answer checked. */
static int lw_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	uint8_t q[12], r[8 + 4 + LW_HELLO_LEN];
	uint16_t magic = LW_MAGIC;
	uint32_t len = 4, v = LW_VERSION;
	union { char b[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr x; } u;
	struct iovec iov = { r, sizeof(r) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			    .msg_controllen = sizeof(u.b) };

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", lw_sock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	LW_CHECK(fd >= 0, "socket: %s", strerror(errno));
	LW_CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s",
		 strerror(errno));
	memcpy(q, &magic, 2);
	q[2] = LW_VERSION;
	q[3] = LW_HELLO;
	memcpy(q + 4, &len, 4);
	memcpy(q + 8, &v, 4);
	/* a signal (libFuzzer's -timeout alarm, no SA_RESTART) may cut any of
	 * these calls short: that is no fault of the server's */
	ssize_t got;
	while ((got = send(fd, q, sizeof(q), MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	LW_CHECK(got == (ssize_t)sizeof(q), "HELLO not sent: %s", strerror(errno));
	while ((got = recvmsg(fd, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	LW_CHECK(got > 0, "no HELLO answer: %s", got ? strerror(errno) : "closed");
	while (got < (ssize_t)sizeof(r)) { /* the rest, after the memfds came */
		ssize_t g = recv(fd, r + got, sizeof(r) - (size_t)got, MSG_WAITALL);
		LW_CHECK(g > 0 || (g < 0 && errno == EINTR), "HELLO answer of %zd bytes: %s",
			 got, g ? strerror(errno) : "closed");
		got += g > 0 ? g : 0;
	}
	int32_t st;
	memcpy(&magic, r, 2);
	memcpy(&len, r + 4, 4);
	memcpy(&st, r + 8, 4);
	LW_CHECK(magic == LW_MAGIC && r[2] == LW_VERSION && r[3] == (LW_HELLO | LW_REPLY) &&
		 len == 4 + LW_HELLO_LEN && st == 0, "bad HELLO answer");
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	LW_CHECK(cm && cm->cmsg_type == SCM_RIGHTS &&
		 cm->cmsg_len == CMSG_LEN(2 * sizeof(int)),
		 "no memfds (arena, directory) with the HELLO answer");
	for (int i = 0; i < 2; i++) {
		int mfd;
		memcpy(&mfd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
		close(mfd);
	}
	return fd;
}

/* Sends data while reading the answers into *out, then reads to the end. */
static void lw_exchange(int fd, const uint8_t *data, size_t size, uint8_t **out,
			size_t *n, size_t *cap)
{
	size_t sent = 0;
	int shut = 0;

	for (;;) {
		if (sent == size && !shut) {
			shutdown(fd, SHUT_WR);
			shut = 1;
		}
		struct pollfd pf = { fd, (short)(POLLIN | (shut ? 0 : POLLOUT)), 0 };
		int r = poll(&pf, 1, LW_SILENCE_MS);
		if (r < 0 && errno == EINTR)
			continue;
		LW_CHECK(r > 0, "the server said nothing for %d ms and did not close",
			 LW_SILENCE_MS);
		if (pf.revents & POLLOUT && !shut) {
			ssize_t w = send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w > 0)
				sent += (size_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EINTR)
				sent = size; /* it closed: what is left cannot go */
		}
		if (pf.revents & (POLLIN | POLLHUP | POLLERR)) {
			if (*n == *cap) {
				LW_CHECK(*cap < LW_OUT_MAX, "more than %u bytes of answer", LW_OUT_MAX);
				*cap = *cap ? *cap * 2 : 1u << 16;
				*out = realloc(*out, *cap);
				LW_CHECK(*out != NULL, "no memory");
			}
			ssize_t g = recv(fd, *out + *n, *cap - *n, MSG_DONTWAIT);
			if (g == 0 || (g < 0 && errno != EAGAIN && errno != EINTR))
				return;
			if (g > 0)
				*n += (size_t)g;
		}
	}
}

/* Every frame of the answer is a well-formed reply (the last may be cut
 * short only where the server closed). */
static void lw_check_replies(const uint8_t *p, size_t n)
{
	size_t at = 0;

	while (n - at >= 12) {
		uint16_t magic;
		uint32_t len;
		int32_t st;
		memcpy(&magic, p + at, 2);
		memcpy(&len, p + at + 4, 4);
		memcpy(&st, p + at + 8, 4);
		LW_CHECK(magic == LW_MAGIC && p[at + 2] == LW_VERSION && (p[at + 3] & LW_REPLY) &&
			 len >= 4, "a malformed reply at byte %zu", at);
		LW_CHECK(st >= 0 || (st >= -4095 && len - 4 <= LW_TEXT_MAX),
			 "a failure reply with status %d and %u bytes", st, len);
		if (n - at < 8 + (size_t)len)
			break;
		at += 8 + len;
	}
}

static long long lw_stat(json_t *j, const char *tier, const char *name)
{
	json_t *v = json_object_get(json_object_get(j, tier), name);
	LW_CHECK(json_is_integer(v), "no stat %s.%s", tier, name);
	return json_integer_value(v);
}

/* Nothing held for the closed connection; the witness still works. */
static void lw_check_store(void)
{
	static char buf[1 << 16];
	int n = kvt_stats_json(lw_node, buf, sizeof(buf));
	LW_CHECK(n > 0 && (size_t)n < sizeof(buf), "kvt_stats_json: %d", n);
	json_t *j = json_loads(buf, 0, NULL);
	LW_CHECK(j != NULL, "statistics are not JSON");
	LW_CHECK(lw_stat(j, "local", "pinned_blocks") == 0 &&
		 lw_stat(j, "local", "reserved_blocks") == 0 &&
		 lw_stat(j, "local", "leased_blocks") == 0 &&
		 lw_stat(j, "local", "pinned_bytes") == 0 &&
		 lw_stat(j, "local", "reserved_bytes") == 0 &&
		 lw_stat(j, "slots", "held") == 0,
		 "a closed connection left something held: %s", buf);
	json_decref(j);

	uint8_t blk[4096], back[4096];
	kvt_key k = { 0x10ca1 + lw_inputs, 0xfeedull << 32 | 0x5eed };
	size_t len = 0;
	for (size_t i = 0; i < sizeof(blk); i++)
		blk[i] = (uint8_t)(i * 31 + lw_inputs);
	int rc = kvt_put(lw_witness, k, blk, sizeof(blk));
	LW_CHECK(rc == 0, "witness put: %s", kvt_last_error());
	rc = kvt_get(lw_witness, k, back, sizeof(back), &len);
	LW_CHECK(rc == 0 && len == sizeof(blk) && !memcmp(blk, back, len),
		 "witness get: %d %s", rc, kvt_last_error());
	LW_CHECK(kvt_remove(lw_witness, k) == 0, "witness remove: %s", kvt_last_error());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t *out;
	static size_t cap;
	static const uint8_t none[1];
	size_t n = 0;

	if (!data)
		data = none;
	if (!lw_node)
		lw_setup();
	lw_inputs++;
	int fd = lw_connect();
	lw_exchange(fd, data, size, &out, &n, &cap);
	close(fd);
	lw_check_replies(out, n);
	lw_check_store();
	return 0;
}
