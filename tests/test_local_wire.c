/*
 * test_local_wire.c - the local protocol's frames, spoken by the test
 * itself: a malformed frame closes that client only, a commit whose
 * checksum does not match the arena's bytes is refused, a client stuck
 * mid-frame beside a working one, local.max_clients, and local.spin_us
 * carried in the HELLO answer. The HELLO exchange is bounded at both ends:
 * an attach to a socket that never answers (or answers half, or cannot
 * queue the connect) fails with -ETIMEDOUT, and the node store drops
 * connections that say no HELLO, so they cannot keep real clients out;
 * against a fake node store, answers that count past the keys asked are
 * refused and a request it never answers times out. Every wait is bounded.
 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvtier.h"
#include "local.h"
#include "local_proto.h"
#include "util.h"
#include "local_util.h"

static int raw_hello(const char *sock, int *mfd, uint64_t *arena_len)
{
	return raw_hello_dir(sock, mfd, arena_len, NULL, NULL);
}

/* Sends a request frame and reads its reply's status and body. */
static int32_t raw_rpc(int fd, unsigned type, const void *p, uint32_t len, void *body,
		       size_t cap)
{
	unsigned char h[8];
	uint16_t magic = W_MAGIC;
	memcpy(h, &magic, 2);
	h[2] = W_VERSION;
	h[3] = (unsigned char)type;
	memcpy(h + 4, &len, 4);
	assert_int_equal(send(fd, h, 8, MSG_NOSIGNAL), 8);
	assert_int_equal(send(fd, p, len, MSG_NOSIGNAL), (ssize_t)len);
	assert_int_equal(recv(fd, h, 8, MSG_WAITALL), 8);
	assert_int_equal(h[3], type | W_REPLY);
	uint32_t rl;
	int32_t st;
	memcpy(&rl, h + 4, 4);
	assert_true(rl >= 4 && rl - 4 <= cap);
	assert_int_equal(recv(fd, &st, 4, MSG_WAITALL), 4);
	if (rl > 4)
		assert_int_equal(recv(fd, body, rl - 4, MSG_WAITALL), (ssize_t)(rl - 4));
	return st;
}

/* Reads until the server closes, within ms; fails if it does not. */
static void expect_closed(int fd, int ms)
{
	long long end = now_ms() + ms;
	char b[256];
	for (;;) {
		struct pollfd pf = { fd, POLLIN, 0 };
		int left = (int)(end - now_ms());
		if (left <= 0 || poll(&pf, 1, left) <= 0)
			fail_msg("the server kept a connection open after a malformed frame");
		ssize_t r = recv(fd, b, sizeof(b), 0);
		if (r <= 0)
			return;
	}
}

static void test_malformed_frame_closes_that_client_only(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node(NULL, sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	store_put_block(a, test_key(1), 8192);
	int mfd = -1;
	uint64_t alen = 0;
	int fd = raw_hello(sock, &mfd, &alen);
	close(mfd);
	/* A lookup claiming more keys than the frame holds. */
	unsigned char q[8 + 8 + 16];
	uint16_t magic = W_MAGIC;
	uint32_t len = 8 + 16, flags = 0, nk = 5;
	memcpy(q, &magic, 2);
	q[2] = W_VERSION;
	q[3] = W_LOOKUP;
	memcpy(q + 4, &len, 4);
	memcpy(q + 8, &flags, 4);
	memcpy(q + 12, &nk, 4);
	memset(q + 16, 0, 16);
	assert_int_equal(send(fd, q, sizeof(q), MSG_NOSIGNAL), (ssize_t)sizeof(q));
	expect_closed(fd, 5000);
	close(fd);
	assert_int_equal(store_stat(node, "local", "malformed_frames"), 1);
	/* The other client goes on. */
	assert_int_equal(store_get_block(a, test_key(1), 8192), 0);
	/* A frame of another version too. */
	fd = raw_hello(sock, &mfd, &alen);
	close(mfd);
	q[2] = W_VERSION + 1;
	assert_int_equal(send(fd, q, sizeof(q), MSG_NOSIGNAL), (ssize_t)sizeof(q));
	expect_closed(fd, 5000);
	close(fd);
	assert_int_equal(store_stat(node, "local", "malformed_frames"), 2);
	assert_int_equal(store_get_block(a, test_key(1), 8192), 0);
	/* HITS frames: one asking for a reply, one whose count lies. */
	static const struct { unsigned char type; uint32_t n; } hits[] = {
		{ W_HITS, 1 }, { W_HITS | W_NOREPLY, 2 },
	};
	for (unsigned i = 0; i < 2; i++) {
		fd = raw_hello(sock, &mfd, &alen);
		close(mfd);
		len = 4 + 16;
		memcpy(q + 4, &len, 4);
		q[2] = W_VERSION;
		q[3] = hits[i].type;
		memcpy(q + 8, &hits[i].n, 4);
		memset(q + 12, 0, 16);
		assert_int_equal(send(fd, q, 8 + len, MSG_NOSIGNAL), (ssize_t)(8 + len));
		expect_closed(fd, 5000);
		close(fd);
		assert_int_equal(store_stat(node, "local", "malformed_frames"), 3 + i);
		assert_int_equal(store_get_block(a, test_key(1), 8192), 0);
	}
	/* A well-formed lookup whose client is gone before the answer: the
	 * reply cannot be sent, which is not a malformed frame. */
	long long served = store_stat(node, "local", "requests");
	fd = raw_hello(sock, &mfd, &alen);
	close(mfd);
	len = 8 + 16;
	nk = 1;
	memcpy(q + 4, &len, 4);
	q[2] = W_VERSION;
	q[3] = W_LOOKUP;
	memcpy(q + 8, &flags, 4);
	memcpy(q + 12, &nk, 4);
	memset(q + 16, 0, 16);
	assert_int_equal(send(fd, q, sizeof(q), MSG_NOSIGNAL), (ssize_t)sizeof(q));
	close(fd);
	expect_stat(node, "local", "requests", served + 1);
	expect_stat(node, "local", "clients", 1);
	assert_int_equal(store_stat(node, "local", "malformed_frames"), 4);
	kvt_close(a);
	kvt_close(node);
}

static void test_commit_checks_the_checksum(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node(NULL, sock, sizeof(sock));
	int mfd = -1;
	uint64_t alen = 0;
	int fd = raw_hello(sock, &mfd, &alen);
	char *arena = mmap(NULL, alen, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	assert_true(arena != MAP_FAILED);
	close(mfd);
	kvt_key k = test_key(77);
	unsigned char q[4 + 24];
	uint32_t one = 1;
	uint64_t blen = 8192;
	memcpy(q, &one, 4);
	memcpy(q + 4, &k, 16);
	memcpy(q + 20, &blen, 8);
	unsigned char r[4 + 24];
	assert_int_equal(raw_rpc(fd, W_RESERVE, q, sizeof(q), r, sizeof(r)), 1);
	int32_t res;
	uint64_t off, ref;
	memcpy(&res, r + 4, 4);
	memcpy(&off, r + 12, 8);
	memcpy(&ref, r + 20, 8);
	assert_int_equal(res, 0);
	fill_block(k, arena + off, blen);
	unsigned char cq[4 + 16];
	uint64_t wrong = XXH3_64bits(arena + off, blen) ^ 1;
	memcpy(cq, &one, 4);
	memcpy(cq + 4, &ref, 8);
	memcpy(cq + 12, &wrong, 8);
	unsigned char cr[8];
	assert_int_equal(raw_rpc(fd, W_COMMIT, cq, sizeof(cq), cr, sizeof(cr)), 0);
	memcpy(&res, cr + 4, 4);
	assert_int_equal(res, -EBADMSG);
	size_t found = 9;
	assert_int_equal(kvt_lookup(node, &k, 1, 0, &found), 0);
	assert_int_equal(found, 0);
	assert_int_equal(store_stat(node, "local", "checksum_refusals"), 1);
	assert_int_equal(store_stat(node, "local", "reserved_blocks"), 0);
	/* A handle that is not this connection's is refused as stale. */
	assert_int_equal(raw_rpc(fd, W_COMMIT, cq, sizeof(cq), cr, sizeof(cr)), 0);
	memcpy(&res, cr + 4, 4);
	assert_int_equal(res, -ESTALE);
	munmap(arena, alen);
	close(fd);
	kvt_close(node);
}

static void test_stuck_client_and_max_clients(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node(", \"max_clients\": 3", sock, sizeof(sock));
	int mfd = -1;
	uint64_t alen = 0;
	int stuck = raw_hello(sock, &mfd, &alen);
	close(mfd);
	/* Half a header, then nothing: its thread waits, nobody else does. */
	assert_int_equal(send(stuck, "KL", 2, MSG_NOSIGNAL), 2);
	kvt_store *a = attach_within(sock, 1000);
	kvt_store *b = attach_within(sock, 1000);
	store_put_block(a, test_key(5), 4096);
	assert_int_equal(store_get_block(b, test_key(5), 4096), 0);
	kvt_store *c = NULL;
	char cfg[320];
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", sock);
	assert_int_equal(kvt_open(cfg, &c), -EUSERS);
	assert_non_null(strstr(kvt_last_error(), "max_clients"));
	close(stuck);
	kvt_close(a);
	expect_stat(b, "local", "clients", 1);
	kvt_close(b);
	kvt_close(node);
}

/* --- bounded HELLO ---------------------------------------------------------------- */

/* kvt_open with attach in a thread of its own, so that a hang fails the
 * test instead of stopping it. */
struct timed_attach {
	char sock[200];
	int rc;
	char err[512];
	kvt_store *s;
};

static void *timed_attach_main(void *p)
{
	struct timed_attach *t = p;
	t->rc = attach(t->sock, &t->s);
	snprintf(t->err, sizeof(t->err), "%s", kvt_last_error());
	return NULL;
}

/* Attaches to sock, expecting -ETIMEDOUT after lp_hello_ms and within ms. */
static void expect_attach_times_out(const char *sock, int ms)
{
	struct timed_attach t = { .rc = 1 };
	pthread_t th;
	snprintf(t.sock, sizeof(t.sock), "%s", sock);
	long long t0 = now_ms();
	assert_int_equal(pthread_create(&th, NULL, timed_attach_main, &t), 0);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	if (pthread_timedjoin_np(th, NULL, &ts))
		fail_msg("kvt_open attach to %s still waits after %d ms", sock, ms);
	long long took = now_ms() - t0;
	assert_null(t.s);
	if (t.rc != -ETIMEDOUT)
		fail_msg("attach to %s: %s: %s", sock, kvt_strerror(t.rc), t.err);
	assert_true(took >= (long long)lp_hello_ms - 50);
	assert_non_null(strstr(t.err, sock));
	assert_non_null(strstr(t.err, "in time"));
}

/* The address of the socket at path sock. */
static struct sockaddr_un sun_of(const char *sock)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	size_t n = strlen(sock);
	assert_true(n < sizeof(a.sun_path));
	memcpy(a.sun_path, sock, n + 1);
	return a;
}

static int listen_at(const char *sock, int backlog)
{
	struct sockaddr_un a = sun_of(sock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, backlog), 0);
	return fd;
}

static int connect_to(const char *sock)
{
	struct sockaddr_un a = sun_of(sock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* A fake node store: accepts one connection, reads the HELLO and answers
 * with a refusal whose header announces 1000 bytes of text, then sends
 * nothing more until the client goes (or 10 s pass). */
static void *half_answer_main(void *p)
{
	int lfd = *(int *)p, fd = accept(lfd, NULL, NULL);
	unsigned char q[12], h[12];
	if (fd < 0)
		return NULL;
	if (recv(fd, q, sizeof(q), MSG_WAITALL) == (ssize_t)sizeof(q)) {
		uint16_t magic = W_MAGIC;
		uint32_t len = 4 + 1000;
		int32_t st = -EIO;
		memcpy(h, &magic, 2);
		h[2] = W_VERSION;
		h[3] = W_HELLO | W_REPLY;
		memcpy(h + 4, &len, 4);
		memcpy(h + 8, &st, 4);
		ssize_t w = send(fd, h, sizeof(h), MSG_NOSIGNAL);
		(void)w;
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 10000) > 0)
			w = recv(fd, q, sizeof(q), 0);
	}
	close(fd);
	return NULL;
}

/* Defect: kvt_open with attach hung for ever when the other end accepted
 * (or the kernel queued) the connection but never answered HELLO, sent a
 * header and then nothing, or had no room left to queue the connect (a
 * stopped node store). Each now fails with -ETIMEDOUT after lp_hello_ms,
 * naming the path. */
static void test_attach_to_a_silent_socket_times_out(void **state)
{
	(void)state;
	char sock[256];
	lp_hello_ms = 300;
	/* Queued by the kernel, never accepted, never answered. */
	snprintf(sock, sizeof(sock), "%s/silent.sock", g_dir);
	int lfd = listen_at(sock, 8);
	expect_attach_times_out(sock, 5000);
	close(lfd);
	unlink(sock);
	/* A header announcing a body that never comes. */
	snprintf(sock, sizeof(sock), "%s/half.sock", g_dir);
	lfd = listen_at(sock, 8);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, half_answer_main, &lfd), 0);
	expect_attach_times_out(sock, 5000);
	pthread_join(th, NULL);
	close(lfd);
	unlink(sock);
	/* The backlog is full: the connect itself would wait. */
	snprintf(sock, sizeof(sock), "%s/full.sock", g_dir);
	lfd = listen_at(sock, 0);
	int q1 = connect_to(sock);
	expect_attach_times_out(sock, 5000);
	close(q1);
	close(lfd);
	unlink(sock);
	lp_hello_ms = LP_HELLO_MS;
}

static atomic_int g_no_hello_logged;

static void no_hello_log(int level, const char *msg, void *arg)
{
	(void)arg;
	if (level == KVT_LOG_WARN && strstr(msg, "sent no HELLO"))
		atomic_fetch_add(&g_no_hello_logged, 1);
}

/* Defect: connections that never said HELLO held places of
 * local.max_clients for ever, so a real attach failed with -EUSERS. The
 * node store now drops each after lp_hello_ms; a real attach then works. */
static void test_silent_connections_dropped(void **state)
{
	(void)state;
	char sock[256];
	lp_hello_ms = 1000;
	kvt_set_log(no_hello_log, NULL, KVT_LOG_WARN);
	kvt_store *node = open_node(", \"max_clients\": 3", sock, sizeof(sock));
	int raw[3];
	long long t0 = now_ms();
	for (int i = 0; i < 3; i++)
		raw[i] = connect_to(sock);
	/* One says half a header, then nothing. */
	assert_int_equal(send(raw[2], "KL", 2, MSG_NOSIGNAL), 2);
	kvt_store *c = NULL;
	char cfg[320];
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", sock);
	assert_int_equal(kvt_open(cfg, &c), -EUSERS);
	for (int i = 0; i < 3; i++) {
		expect_closed(raw[i], 1000 + 5000);
		close(raw[i]);
	}
	assert_true(now_ms() - t0 >= 900);
	lp_hello_ms = LP_HELLO_MS;
	kvt_set_log(NULL, NULL, 0);
	assert_int_equal(atomic_load(&g_no_hello_logged), 3);
	kvt_store *a = attach_within(sock, 2000);
	store_put_block(a, test_key(7), 4096);
	assert_int_equal(store_get_block(a, test_key(7), 4096), 0);
	expect_stat(a, "local", "clients", 1);
	kvt_close(a);
	kvt_close(node);
}

/* Sends a reply frame of type (| LP_REPLY) with status and body, and fd
 * (if >= 0) beside it. */
static void fake_reply(int fd, int type, int32_t status, const void *body, size_t blen,
		       int pass)
{
	struct lp_hdr h = { LP_MAGIC, LP_VERSION, (uint8_t)(type | LP_REPLY),
			    (uint32_t)(4 + blen) };
	struct iovec iov[3] = { { &h, sizeof(h) }, { &status, 4 }, { (void *)body, blen } };
	union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 3 };

	if (pass >= 0) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass, sizeof(int));
	}
	ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
	(void)w;
}

/* Reads one request frame: its header into h, its body into body (room
 * for cap bytes). 1, or 0 when the client went or sent a longer body. */
static int fake_request(int fd, struct lp_hdr *h, unsigned char *body, size_t cap)
{
	if (recv(fd, h, sizeof(*h), MSG_WAITALL) != (ssize_t)sizeof(*h))
		return 0;
	return h->len <= cap &&
	       (!h->len || recv(fd, body, h->len, MSG_WAITALL) == (ssize_t)h->len);
}

/* Answers a HELLO as a real node store does, with a 1 MiB arena: 0, or -1
 * where no memfd could be had. */
static int fake_hello(int fd)
{
	struct lp_hello hl = { .version = LP_VERSION, .lease_ms = 5000,
			       .arena_len = 1u << 20, .max_block = 1u << 20,
			       .pin_ms = 10000, .max_keys = LP_KEYS_MAX };
	int mfd = memfd_create("fake-node-arena", MFD_CLOEXEC);

	if (mfd < 0 || ftruncate(mfd, (off_t)1 << 20)) {
		if (mfd >= 0)
			close(mfd);
		return -1;
	}
	fake_reply(fd, LP_HELLO, 0, &hl, sizeof(hl), mfd);
	close(mfd);
	return 0;
}

/* A fake node store listening at g_dir/name (its path into sock, cap
 * bytes), served by fn on a thread of its own (th), which is handed the
 * listening socket: the socket's descriptor. fn reads it through a pointer,
 * so it lives in a static until fake_node_stop. */
static int fake_lfd;

static int fake_node_start(const char *name, void *(*fn)(void *), char *sock, size_t cap,
			   pthread_t *th)
{
	snprintf(sock, cap, "%s/%s", g_dir, name);
	fake_lfd = listen_at(sock, 8);
	assert_int_equal(pthread_create(th, NULL, fn, &fake_lfd), 0);
	return fake_lfd;
}

/* Waits for the fake node store's thread and removes its socket. */
static void fake_node_stop(int lfd, pthread_t th, const char *sock)
{
	pthread_join(th, NULL);
	close(lfd);
	unlink(sock);
}

/* Answers one connection as lying_counts_main says. */
static void lying_counts_serve(int fd)
{
	unsigned char body[8192], out[4 + 64 * sizeof(struct lp_slot)];
	struct lp_hdr h;

	while (fake_request(fd, &h, body, sizeof(body))) {
		int type = h.type & ~LP_NOREPLY;
		if (type == LP_HELLO) {
			if (fake_hello(fd))
				break;
		} else if (!(h.type & LP_NOREPLY)) {
			uint32_t k = 0;
			if (h.len >= 4)
				memcpy(&k, body, 4);
			if (type == LP_RESERVE && k <= 64) { /* each refused, -EAGAIN */
				memcpy(out, &k, 4);
				for (uint32_t i = 0; i < k; i++) {
					struct lp_slot sl = { .result = -EAGAIN };
					memcpy(out + 4 + i * sizeof(sl), &sl, sizeof(sl));
				}
				fake_reply(fd, type, (int32_t)k + 1000, out,
					   4 + k * sizeof(struct lp_slot), -1);
			} else {
				int lie = type == LP_RELEASE || type == LP_UNPIN;
				fake_reply(fd, type, lie ? (int32_t)k + 1000 : 0, NULL, 0, -1);
			}
		}
	}
}

/* A hostile node store for three connections in turn: answers HELLO as a
 * real one does (a 1 MiB arena), then every RELEASE, RESERVE or UNPIN of k keys
 * with a count of k + 1000 (a RESERVE's slots each refused), and anything
 * else with status 0 and no body, until the client goes. */
static void *lying_counts_main(void *p)
{
	int lfd = *(int *)p;

	for (int i = 0; i < 3; i++) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			return NULL;
		lying_counts_serve(fd);
		close(fd);
	}
	return NULL;
}

/* Defect: kvt_release(), kvt_put_reserve(), kvt_get_pin() and kvt_unpin()
 * through an attached store returned whatever count the node store
 * answered, so a node store that claimed more leases ended or slots
 * reserved or unpinned than keys asked made them return a count past n (and,
 * summed over long arrays, could overflow). A count past the keys asked is
 * now a protocol error, as a lookup's was. */
static void test_counts_past_the_keys_are_refused(void **state)
{
	(void)state;
	char sock[256], cfg[320];
	pthread_t th;
	int lfd = fake_node_start("lying.sock", lying_counts_main, sock, sizeof(sock), &th);
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", sock);
	kvt_store *c = NULL;
	assert_int_equal(kvt_open(cfg, &c), 0);
	kvt_key keys[3] = { test_key(1), test_key(2), test_key(3) };
	assert_true(kvt_release(c, keys, 3) < 0);
	assert_non_null(strstr(kvt_last_error(), "broke the protocol"));
	kvt_close(c);
	c = NULL;
	assert_int_equal(kvt_open(cfg, &c), 0);
	kvt_slot sl[3];
	for (int i = 0; i < 3; i++)
		sl[i] = (kvt_slot){ .key = keys[i], .len = 4096 };
	assert_true(kvt_put_reserve(c, sl, 3, 0) < 0);
	assert_non_null(strstr(kvt_last_error(), "broke the protocol"));
	kvt_close(c);
	c = NULL;
	assert_int_equal(kvt_open(cfg, &c), 0);
	for (int i = 0; i < 3; i++)
		sl[i].ref = (uint64_t)i + 1;
	assert_true(kvt_unpin(c, sl, 3) < 0);
	assert_non_null(strstr(kvt_last_error(), "broke the protocol"));
	kvt_close(c);
	fake_node_stop(lfd, th, sock);
}

/* A fake node store that answers HELLO as a real one does (a 1 MiB arena)
 * and then reads every request without answering any (a stopped or stuck
 * node store), until the client goes. One connection. */
static void *silent_after_hello_main(void *p)
{
	int lfd = *(int *)p, fd = accept(lfd, NULL, NULL);
	unsigned char body[8192];
	struct lp_hdr h;

	if (fd < 0)
		return NULL;
	while (fake_request(fd, &h, body, sizeof(body)))
		if ((h.type & ~LP_NOREPLY) == LP_HELLO && fake_hello(fd))
			break;
	close(fd);
	return NULL;
}

/* Defect: after HELLO an attached store waited for each answer as long as
 * the node store took, so a stopped or stuck node store hung every call of
 * every thread for good. A request unanswered within attach_timeout_ms now
 * fails with -ETIMEDOUT naming the key to raise; later calls fail at once with
 * -ENOTCONN; kvt_close() returns. */
static void test_unanswered_request_times_out(void **state)
{
	(void)state;
	char sock[256], cfg[400];
	pthread_t th;
	int lfd = fake_node_start("silent-after-hello.sock", silent_after_hello_main, sock,
				  sizeof(sock), &th);
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\", \"attach_timeout_ms\": 300}", sock);
	kvt_store *c = NULL;
	assert_int_equal(kvt_open(cfg, &c), 0);
	kvt_key keys[2] = { test_key(1), test_key(2) };
	size_t found = 7;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(kvt_lookup(c, keys, 2, KVT_LEASE, &found), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long long ms = (t1.tv_sec - t0.tv_sec) * 1000LL + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms >= 250 && ms < 5000);
	assert_non_null(strstr(kvt_last_error(), "attach_timeout_ms"));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(kvt_remove(c, keys[0]), -ENOTCONN);
	char buf[64];
	size_t len = 0;
	assert_int_equal(kvt_get(c, keys[1], buf, sizeof(buf), &len), -ENOTCONN);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (t1.tv_sec - t0.tv_sec) * 1000LL + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms < 250); /* at once */
	kvt_close(c);
	fake_node_stop(lfd, th, sock);
}

/* A HELLO of another protocol version (an older libkvtier, here one that
 * speaks version W_VERSION - 1 throughout) is refused in a frame of that
 * version: status -EPROTONOSUPPORT and a text naming both versions, which
 * such a client reads where it could not read a frame of this version.
 * Before, the node store closed the connection as malformed. */
static void test_other_version_hello_is_refused_readably(void **state)
{
	(void)state;
	char sock[256], text[256];
	kvt_store *node = open_node(NULL, sock, sizeof(sock));
	int fd = connect_to(sock);
	unsigned char h[12];
	uint16_t magic = W_MAGIC;
	uint32_t len = 4, old = W_VERSION - 1, rl = 0;
	int32_t st = 0;

	memcpy(h, &magic, 2);
	h[2] = (unsigned char)old;
	h[3] = W_HELLO;
	memcpy(h + 4, &len, 4);
	memcpy(h + 8, &old, 4);
	assert_int_equal(send(fd, h, 12, MSG_NOSIGNAL), 12);
	assert_int_equal(recv(fd, h, 8, MSG_WAITALL), 8);
	assert_int_equal(h[2], old);
	assert_int_equal(h[3], W_HELLO | W_REPLY);
	memcpy(&rl, h + 4, 4);
	assert_true(rl > 4 && rl - 4 < sizeof(text));
	assert_int_equal(recv(fd, &st, 4, MSG_WAITALL), 4);
	assert_int_equal(st, -EPROTONOSUPPORT);
	assert_int_equal(recv(fd, text, rl - 4, MSG_WAITALL), (ssize_t)(rl - 4));
	text[rl - 4] = 0;
	char want[64];
	snprintf(want, sizeof(want), "speaks version %u", W_VERSION);
	assert_non_null(strstr(text, want));
	snprintf(want, sizeof(want), "this process %u", (unsigned)old);
	assert_non_null(strstr(text, want));
	expect_closed(fd, 5000);
	close(fd);
	assert_int_equal(store_stat(node, "local", "malformed_frames"), 0);
	kvt_close(node);
}

/* A fake node store of a newer protocol version: answers the HELLO with a
 * refusal in a frame of its own version, as one that did not read the
 * client's version would. One connection. */
static void *newer_node_main(void *p)
{
	int lfd = *(int *)p, fd = accept(lfd, NULL, NULL);
	unsigned char body[64];
	struct lp_hdr h;

	if (fd < 0)
		return NULL;
	if (fake_request(fd, &h, body, sizeof(body))) {
		struct lp_hdr r = { LP_MAGIC, LP_VERSION + 1, LP_HELLO | LP_REPLY, 4 };
		int32_t st = -EPROTONOSUPPORT;
		struct iovec iov[2] = { { &r, sizeof(r) }, { &st, 4 } };
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
		ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
		(void)w;
	}
	close(fd);
	return NULL;
}

/* kvt_open attached to a node store that answers in another protocol
 * version fails with -EPROTONOSUPPORT naming both versions (it was -EPROTO,
 * "malformed"). */
static void test_attach_to_a_newer_node_store(void **state)
{
	(void)state;
	char sock[256], cfg[400], want[64];
	pthread_t th;
	int lfd = fake_node_start("newer.sock", newer_node_main, sock, sizeof(sock), &th);
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", sock);
	kvt_store *c = NULL;
	assert_int_equal(kvt_open(cfg, &c), -EPROTONOSUPPORT);
	assert_null(c);
	snprintf(want, sizeof(want), "version %u of the local protocol", LP_VERSION + 1);
	assert_non_null(strstr(kvt_last_error(), want));
	fake_node_stop(lfd, th, sock);
}

/* local.spin_us travels to every client in the HELLO answer; with 0 (sleep
 * at once) and with the most allowed, lookups with lease, gets through a
 * pin (no directory) and releases work the same. */
static void test_spin_setting(void **state)
{
	(void)state;
	static const unsigned spins[] = { 0, 1000, 50 };
	for (size_t k = 0; k < 3; k++) {
		char sock[128], extra[64];
		snprintf(extra, sizeof(extra), ", \"directory\": 0%s",
			 k < 2 ? (k ? ", \"spin_us\": 1000" : ", \"spin_us\": 0") : "");
		kvt_store *node = open_node(extra, sock, sizeof(sock)), *c = NULL;
		int mfd;
		uint64_t alen;
		int raw = raw_hello(sock, &mfd, &alen);
		assert_int_equal(g_hello_spin, spins[k]);
		close(raw);
		close(mfd);
		assert_int_equal(attach(sock, &c), 0);
		char buf[4096], out[4096];
		kvt_key key = { 77, k };
		memset(buf, 0x40 + (int)k, sizeof(buf));
		assert_int_equal(kvt_put(c, key, buf, sizeof(buf)), 0);
		size_t found = 0, len = 0;
		assert_int_equal(kvt_lookup(c, &key, 1, KVT_LEASE, &found), 0);
		assert_int_equal(found, 1);
		assert_int_equal(kvt_get(c, key, out, sizeof(out), &len), 0);
		assert_int_equal(len, sizeof(out));
		assert_memory_equal(buf, out, sizeof(out));
		assert_int_equal(kvt_release(c, &key, 1), 1); /* the one lease ended */
		kvt_close(c);
		kvt_close(node);
	}
}

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		return 1;
	self_exe[n] = 0;
	if (argc >= 2 && !strcmp(argv[1], "--child"))
		return child_main(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_malformed_frame_closes_that_client_only),
		cmocka_unit_test(test_commit_checks_the_checksum),
		cmocka_unit_test(test_stuck_client_and_max_clients),
		cmocka_unit_test(test_attach_to_a_silent_socket_times_out),
		cmocka_unit_test(test_silent_connections_dropped),
		cmocka_unit_test(test_counts_past_the_keys_are_refused),
		cmocka_unit_test(test_unanswered_request_times_out),
		cmocka_unit_test(test_spin_setting),
		cmocka_unit_test(test_other_version_hello_is_refused_readably),
		cmocka_unit_test(test_attach_to_a_newer_node_store),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
