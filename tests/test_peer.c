/*
 * test_peer.c - the peer tier through the public ABI: keys owned by
 * rendezvous hashing, puts copied to the owner, gets, batches and lookups
 * answered by the owner; a dead, a silent and a lying peer; hostile frames
 * and strangers at the server; the peers config keys. Frames are built by
 * hand here from the layout in lib/peer.h, so the test also pins the wire.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvtier.h"
#include "opts.h"
#include "util.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

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

#define FAKE_LEN MiB  /* what the fake peer serves for every key */

/* --- little helpers ------------------------------------------------------ */

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

static void put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static unsigned get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* The owner of k among {"a", "b"}: 0 for a, 1 for b (see lib/peer.h). */
static unsigned owner_of(kvt_key k)
{
	static const char *const names[] = { "a", "b" };
	return test_owner(k, names, 2);
}

/* n keys that `owner` owns, from test_key(from) on. */
static void owned_keys(unsigned owner, uint64_t from, kvt_key *out, size_t n)
{
	static const char *const names[] = { "a", "b" };
	test_owned_keys(names, 2, owner, from, out, n);
}

/* Member b's (index 1) requests counter in a's stats: a request that a
 * member marked down refuses at once is not one. */
static long long b_requests(kvt_store *a)
{
	char *buf = NULL;
	int n = kvt_stats_json(a, NULL, 0);
	assert_true(n > 0);
	buf = malloc((size_t)n + 4096);
	assert_non_null(buf);
	assert_true(kvt_stats_json(a, buf, (size_t)n + 4096) > 0);
	json_t *j = json_loads(buf, 0, NULL);
	free(buf);
	assert_non_null(j);
	json_t *m = json_array_get(json_object_get(json_object_get(j, "peer"), "members"), 1);
	assert_non_null(m);
	assert_string_equal(json_string_value(json_object_get(m, "name")), "b");
	long long r = json_integer_value(json_object_get(m, "requests"));
	json_decref(j);
	return r;
}

static struct sockaddr_in loopback(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static int free_port(void)
{
	return test_free_port();
}

static int listen_on(int port)
{
	struct sockaddr_in a = loopback("127.0.0.1", port);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16))
		fail_msg("listen on 127.0.0.1:%d: %s", port, strerror(errno));
	return fd;
}

static void set_timeouts(int fd, int secs)
{
	struct timeval tv = { .tv_sec = secs };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A TCP connection from src (NULL: any) to dst:port, or -1. */
static int raw_connect(const char *src, const char *dst, int port)
{
	struct sockaddr_in s = loopback(src ? src : "0.0.0.0", 0), a = loopback(dst, port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	set_timeouts(fd, 2);
	if ((src && bind(fd, (struct sockaddr *)&s, sizeof(s))) ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

static int send_all(int fd, const void *buf, size_t n)
{
	for (const uint8_t *p = buf; n;) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
		if (r <= 0 && errno != EINTR)
			return -1;
		if (r > 0)
			p += r, n -= (size_t)r;
	}
	return 0;
}

/*
 * Reads n bytes within timeout_ms. Returns 0; 1 when the other side closed
 * or reset; -1 on timeout or when *stop is set.
 */
static int recv_wait(int fd, void *buf, size_t n, int timeout_ms, atomic_int *stop)
{
	uint8_t *p = buf;
	long long end = now_ms() + timeout_ms;
	while (n) {
		long long left = end - now_ms();
		if (left <= 0 || (stop && atomic_load(stop)))
			return -1;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int pr = poll(&pfd, 1, left < 50 ? (int)left : 50);
		if (pr < 0 && errno != EINTR)
			return 1;
		if (pr <= 0)
			continue;
		ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
			return 1;
		if (r > 0)
			p += r, n -= (size_t)r;
	}
	return 0;
}

static void mkhdr(uint8_t *h, unsigned type, uint32_t count, uint32_t flags, uint64_t len)
{
	put32(h, MAGIC);
	put16(h + 4, 1);
	put16(h + 6, (uint16_t)type);
	put32(h + 8, count);
	put32(h + 12, flags);
	put64(h + 16, len);
}

static int send_frame(int fd, unsigned type, uint32_t count, uint32_t flags,
		      const void *body, uint64_t len)
{
	uint8_t h[HDR];
	mkhdr(h, type, count, flags, len);
	if (send_all(fd, h, HDR))
		return -1;
	return len ? send_all(fd, body, len) : 0;
}

/* Reads a frame header within 2 s; fails the test on anything else. */
static void recv_hdr(int fd, uint8_t *h, unsigned type, const char *what)
{
	int r = recv_wait(fd, h, HDR, 2000, NULL);
	if (r)
		fail_msg("%s: %s", what, r < 0 ? "no answer within 2 s" : "connection closed");
	assert_int_equal(get32(h), MAGIC);
	assert_int_equal(get16(h + 4), 1);
	if (get16(h + 6) != type)
		fail_msg("%s: answered with type %#x, expected %#x", what, get16(h + 6), type);
}

/* HELLO as name to a server named "a". */
static void raw_hello(int fd, const char *name)
{
	uint8_t h[HDR];
	char who[2];
	assert_int_equal(send_frame(fd, T_HELLO, (uint32_t)strlen(name), 0, name, strlen(name)), 0);
	recv_hdr(fd, h, T_HELLO | RESP, "HELLO");
	assert_int_equal(get64(h + 16), 1);
	assert_int_equal(recv_wait(fd, who, 1, 2000, NULL), 0);
	assert_int_equal(who[0], 'a');
}

/*
 * The server must answer a frame it refuses with ERROR and then close, or
 * just close, within 2 s, and never with another frame.
 */
static void expect_refused(int fd, const char *what)
{
	uint8_t h[HDR], junk[256];
	int r = recv_wait(fd, h, HDR, 2000, NULL);
	if (r < 0)
		fail_msg("%s: neither ERROR nor close within 2 s", what);
	if (r > 0)
		return;
	if (get16(h + 6) != T_ERROR)
		fail_msg("%s: answered with frame type %#x, not ERROR", what, get16(h + 6));
	uint64_t n = get64(h + 16);
	if (n > sizeof(junk))
		fail_msg("%s: ERROR body of %llu bytes", what, (unsigned long long)n);
	if (recv_wait(fd, junk, (size_t)n, 2000, NULL) == 0 &&
	    recv_wait(fd, junk, 1, 2000, NULL) != 1)
		fail_msg("%s: connection still open 2 s after ERROR", what);
}

/* A PUT frame of one block of n bytes under k (its sum xor bad); *len its size. */
static uint8_t *put_frame(kvt_key k, size_t n, uint64_t bad, size_t *len)
{
	uint8_t *b = malloc(HDR + PUT_SZ + n);
	assert_non_null(b);
	mkhdr(b, T_PUT, 1, 0, PUT_SZ + n);
	put64(b + HDR, k.lo);
	put64(b + HDR + 8, k.hi);
	put64(b + HDR + 16, n);
	fill_block(k, b + HDR + PUT_SZ, n);
	put64(b + HDR + 24, XXH3_64bits(b + HDR + PUT_SZ, n) ^ bad);
	*len = HDR + PUT_SZ + n;
	return b;
}

/* --- nodes ---------------------------------------------------------------- */

struct fake;
static void fake_stop(struct fake *f);

struct fx {
	int pa, pb;
	kvt_store *a, *b;
	struct fake *fake;
};

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	f->pa = free_port();
	do
		f->pb = free_port();
	while (f->pb == f->pa);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	kvt_set_log(NULL, NULL, 0);
	kvt_close(f->a);
	kvt_close(f->b);
	if (f->fake)
		fake_stop(f->fake);
	free(f);
	return 0;
}

/*
 * Node self of the cluster {a: ipa:pa, b: ipb:pb}, listening on its own
 * member address; extra is more "peers" keys (", \"key\": value") or "",
 * and replaces the CONNECT_MS and REQUEST_MS defaults when it gives
 * connect_timeout_ms or request_timeout_ms.
 */
static kvt_store *node_at(const char *self, const char *ipa, int pa, const char *ipb,
			  int pb, const char *extra)
{
	char cfg[1280], con[48] = "", req[48] = "";
	kvt_store *s = NULL;
	if (!strstr(extra, "connect_timeout_ms"))
		snprintf(con, sizeof(con), ", \"connect_timeout_ms\": %d", CONNECT_MS);
	if (!strstr(extra, "request_timeout_ms"))
		snprintf(req, sizeof(req), ", \"request_timeout_ms\": %d", REQUEST_MS);
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"64MiB\", \"max_block\": \"2MiB\", \"mlock\": false},"
		 " \"peers\": {\"self\": \"%s\", \"listen\": \"%s:%d\", \"members\":"
		 " [{\"name\": \"a\", \"addr\": \"%s:%d\"},"
		 " {\"name\": \"b\", \"addr\": \"%s:%d\"}], \"transport\": \"tcp\","
		 " \"down_ms\": %d%s%s%s}}",
		 self, self[0] == 'a' ? ipa : ipb, self[0] == 'a' ? pa : pb, ipa, pa, ipb, pb,
		 DOWN_MS, con, req, extra);
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open %s: %s: %s", self, kvt_strerror(rc), kvt_last_error());
	return s;
}

/* For a test whose one request must not fail on a loaded machine. */
#define SLOW_CONNECT ", \"connect_timeout_ms\": 5000"

/* Node self of the cluster {a: 127.0.0.1:pa, b: 127.0.0.1:pb}. */
static kvt_store *node(const char *self, int pa, int pb)
{
	return node_at(self, "127.0.0.1", pa, "127.0.0.1", pb, "");
}

/* 1 if this host can bind ip (127.0.0.2 is on lo on Linux). */
static int have_address(const char *ip)
{
	struct sockaddr_in a = loopback(ip, 0);
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;
	assert_true(fd >= 0);
	ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/* Peer hits copied into the loader's RAM (peers.promote). */
#define PROMOTE ", \"promote\": true"

/* Opens a and b (with more "peers" keys extra) and waits until each
 * reaches the other. */
static void open_pair_with(struct fx *f, const char *extra)
{
	kvt_key ka, kb;
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, extra);
	f->b = node_at("b", "127.0.0.1", f->pa, "127.0.0.1", f->pb, extra);
	owned_keys(0, 1000000, &ka, 1);
	owned_keys(1, 1000000, &kb, 1);
	store_put_block(f->a, ka, 4096);
	store_put_block(f->b, kb, 4096);
	long long end = now_ms() + 5000;
	while (store_get_block(f->a, kb, 4096) || store_get_block(f->b, ka, 4096)) {
		if (now_ms() > end)
			fail_msg("a and b never reached each other: %s", kvt_last_error());
		usleep(20000);
	}
}

static void open_pair(struct fx *f)
{
	open_pair_with(f, "");
}

static size_t size_of(size_t i)
{
	return 1000 + i * 3001;
}

/* --- a fake member b ---------------------------------------------------- */

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

/* Answers a GET of count items (body as read) the way the mode says: one
 * GET_R frame of count 1 per item. */
static int fake_get(struct fake *f, int fd, uint32_t count, const uint8_t *body)
{
	uint8_t *data = malloc(FAKE_LEN), item[HDR + GETR_SZ] = { 0 };
	int rc = -1;
	if (!data)
		goto out;
	for (uint32_t i = 0; i < count; i++) {
		kvt_key k = { get64(body + i * GET_SZ), get64(body + i * GET_SZ + 8) };
		if (f->mode == FAKE_BAD_ERROR) {
			uint8_t eh[HDR];
			mkhdr(eh, T_ERROR, 5, 0, MiB);
			if (send_all(fd, eh, HDR) || send_all(fd, "later", 5))
				goto out;
			while (!atomic_load(&f->stop))
				usleep(10000);
			goto out;
		}
		if (i == 1 && f->mode == FAKE_ERROR_SECOND) {
			send_frame(fd, T_ERROR, 5, 0, "later", 5);
			goto out; /* and close */
		}
		fill_block(k, data, FAKE_LEN);
		uint64_t sum = XXH3_64bits(data, FAKE_LEN);
		mkhdr(item, T_GET | RESP, 1, 0, GETR_SZ + FAKE_LEN);
		put64(item + HDR + 8, FAKE_LEN);
		if (f->mode == FAKE_MALFORMED) {
			/* a miss whose frame claims 8 bytes more than an item header */
			mkhdr(item, T_GET | RESP, 1, 0, GETR_SZ + 8);
			put32(item + HDR, (uint32_t)-ENOENT);
			put64(item + HDR + 8, 0);
			uint8_t pad[8] = { 0 };
			if (send_all(fd, item, sizeof(item)) || send_all(fd, pad, sizeof(pad)))
				goto out;
			continue;
		}
		put64(item + HDR + 16, f->mode == FAKE_BADSUM ? sum + 1 : sum);
		if (send_all(fd, item, sizeof(item)))
			goto out;
		if (f->mode == FAKE_SHORT) {
			send_all(fd, data, 100 * KiB);
			goto out; /* and close */
		}
		for (size_t off = 0, piece = FAKE_LEN / 8; off < FAKE_LEN; off += piece) {
			if (send_all(fd, data + off, f->mode == FAKE_DRIP ? piece : FAKE_LEN))
				goto out;
			if (f->mode != FAKE_DRIP)
				break;
			usleep(10000);
		}
	}
	rc = 0;
out:
	free(data);
	return rc;
}

/* Serves connection nth (0: the first), frame by frame, until it closes
 * or stop. */
static void fake_serve(struct fake *f, int fd, int nth)
{
	uint8_t h[HDR];
	int r = 0, requests = 0;
	while (!r && recv_wait(fd, h, HDR, 10000, &f->stop) == 0 && get32(h) == MAGIC) {
		unsigned type = get16(h + 6);
		if (type != T_HELLO && ++requests == 2 && f->mode == FAKE_DROP_SECOND)
			return;
		if (type != T_HELLO && f->mode == FAKE_LATE_CLOSE && (nth || requests == 2)) {
			if (!nth) {
				usleep(REQUEST_MS * 800);
				return;
			}
			while (!atomic_load(&f->stop))
				usleep(10000);
			return;
		}
		uint32_t count = get32(h + 8);
		uint64_t len = get64(h + 16);

		if (len > 16 * MiB || count > 4096)
			return;
		uint8_t *body = malloc(len + 1), *resp = calloc(count + 1, 4);
		r = -1;
		if (body && resp && recv_wait(fd, body, len, 5000, &f->stop) == 0) {
			if (type == T_HELLO) {
				if (len == 1 && body[0] == 'a')
					atomic_fetch_add(&f->hellos, 1);
				r = send_frame(fd, T_HELLO | RESP, 1, 0, "b", 1);
			} else if (type == T_LOOKUP) {
				memset(resp, 1, count);
				r = send_frame(fd, T_LOOKUP | RESP, count, 0, resp, count);
			} else if (type == T_GET && len == (uint64_t)count * GET_SZ) {
				atomic_fetch_add(&f->gets, 1);
				r = fake_get(f, fd, count, body);
			} else if (type == T_PUT) {
				r = send_frame(fd, T_PUT | RESP, count, 0, resp, 4ull * count);
			} else if (type == T_RELEASE) {
				r = send_frame(fd, T_RELEASE | RESP, count, 0, NULL, 0);
			}
		}
		free(body);
		free(resp);
	}
}

static void *fake_conn_main(void *arg)
{
	struct fake_conn *c = arg;
	char junk[4096];
	if (c->f->mode != FAKE_SILENT)
		fake_serve(c->f, c->fd, (int)(c - c->f->c));
	else /* reads and discards, never answers */
		while (!atomic_load(&c->f->stop)) {
			struct pollfd p = { .fd = c->fd, .events = POLLIN };
			if (poll(&p, 1, 50) <= 0)
				continue;
			ssize_t r = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
				break;
		}
	close(c->fd);
	return NULL;
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	while (!atomic_load(&f->stop)) {
		struct pollfd p = { .fd = f->lfd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		atomic_fetch_add(&f->conns, 1);
		set_timeouts(fd, 2);
		f->c[f->nc] = (struct fake_conn){ .f = f, .fd = fd };
		if (f->nc == FAKE_CONNS ||
		    pthread_create(&f->c[f->nc].thread, NULL, fake_conn_main, &f->c[f->nc]))
			close(fd);
		else
			f->nc++;
	}
	for (int i = 0; i < f->nc; i++)
		pthread_join(f->c[i].thread, NULL);
	return NULL;
}

static struct fake *fake_start(int port, enum fake_mode mode)
{
	struct fake *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->mode = mode;
	f->lfd = listen_on(port);
	assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
	return f;
}

static void fake_stop(struct fake *f)
{
	atomic_store(&f->stop, 1);
	pthread_join(f->thread, NULL);
	close(f->lfd);
	free(f);
}

/* --- config --------------------------------------------------------------- */

#define MA "{\"name\": \"a\", \"addr\": \"127.0.0.1:40001\"}"
#define MB "{\"name\": \"b\", \"addr\": \"127.0.0.1:40002\"}"
#define ONLY_A "\"self\": \"a\", \"members\": [" MA "]"
#define A_B(name, addr) "\"self\": \"a\", \"members\": [" MA ", {\"name\": \"" name "\", \"addr\": \"" addr "\"}]"

static void test_config_errors(void **state)
{
	static const struct {
		const char *peers;
		int rc;
		const char *needle;
	} bad[] = {
		{ "\"self\": \"c\", \"members\": [" MA ", " MB "]", -EINVAL, "peers.self" },
		{ "\"members\": [" MA "]", -EINVAL, "peers.self" },
		{ A_B("a", "127.0.0.1:40002"), -EINVAL, "peers.members[1].name" },
		{ A_B("b", "127.0.0.1"), -EINVAL, "peers.members[1].addr" },
		{ A_B("b", "127.0.0.1:0"), -EINVAL, "peers.members[1].addr" },
		{ A_B("b", "127.0.0.1:70000"), -EINVAL, "peers.members[1].addr" },
		{ "\"self\": \"a\", \"members\": [{\"name\": \"a\", \"addr\": \"127.0.0.1:1\", \"port\": 1}]",
		  -EINVAL, "peers.members[0].port" },
		{ ONLY_A ", \"colour\": \"blue\"", -EINVAL, "peers.colour" },
		{ "\"self\": \"a\", \"members\": []", -EINVAL, "peers.members" },
		{ "\"self\": \"a\"", -EINVAL, "peers.members" },
		{ ONLY_A ", \"listen\": \"127.0.0.1\"", -EINVAL, "peers.listen" },
		{ ONLY_A ", \"connect_timeout_ms\": 0", -EINVAL, "peers.connect_timeout_ms" },
		{ ONLY_A ", \"transport\": \"udp\"", -EINVAL, "peers.transport" },
		{ NULL, -EADDRINUSE, NULL }, /* self's address taken */
	};
	struct fx *f = *state;
	int lfd = listen_on(f->pa);
	char cfg[1024], port[16], peers[256];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kvt_store *s = (kvt_store *)0x1;
		const char *p = bad[i].peers, *needle = bad[i].needle;
		if (!p) {
			snprintf(peers, sizeof(peers), "\"self\": \"a\", \"members\": [{\"name\": \"a\","
				 " \"addr\": \"127.0.0.1:%d\"}]", f->pa);
			snprintf(port, sizeof(port), "%d", f->pa);
			p = peers;
			needle = port;
		}
		snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false},"
			 " \"peers\": {%s}}", p);
		int rc = kvt_open(cfg, &s);
		if (rc != bad[i].rc)
			fail_msg("%s: got %d (%s), expected %d", cfg, rc, kvt_last_error(), bad[i].rc);
		if (!strstr(kvt_last_error(), needle))
			fail_msg("%s: error \"%s\" does not name %s", cfg, kvt_last_error(), needle);
		assert_ptr_equal(s, (kvt_store *)0x1);
	}
	close(lfd);
}

/* The peer tier is opened with struct peer_opts, never the configuration:
 * every "peers" key (and ram.max_block) reaches it through opts_peer. */
static void test_opts_carry_every_peers_key(void **state)
{
	(void)state;
	struct kvt_config c;
	const char *json = "{\"ram\": {\"max_block\": \"3MiB\"}, \"peers\": {\"self\": \"b\","
		" \"members\": [" MA ", " MB "], \"listen\": \"127.0.0.1:40012\","
		" \"connect_timeout_ms\": 11, \"request_timeout_ms\": 12, \"down_ms\": 13,"
		" \"idle_timeout_ms\": 14, \"log_interval_ms\": 15,"
		" \"max_conns_per_member\": 16}}";
	int rc = config_parse(json, &c);
	if (rc)
		fail_msg("config_parse: %s", kvt_last_error());
	struct peer_opts o = opts_peer(&c);
	assert_int_equal(o.nmembers, 2);
	assert_string_equal(o.names[0], "a");
	assert_string_equal(o.names[1], "b");
	assert_string_equal(o.addrs[0], "127.0.0.1:40001");
	assert_string_equal(o.addrs[1], "127.0.0.1:40002");
	assert_int_equal(o.self, 1);
	assert_string_equal(o.listen, "127.0.0.1:40012");
	assert_int_equal(o.max_block, 3u << 20);
	assert_int_equal(o.connect_ms, 11);
	assert_int_equal(o.request_ms, 12);
	assert_int_equal(o.down_ms, 13);
	assert_int_equal(o.idle_ms, 14);
	assert_int_equal(o.log_ms, 15);
	assert_int_equal(o.max_conns, 16);
	config_free(&c);
}

static void test_single_member_is_plain_store(void **state)
{
	struct fx *f = *state;
	char cfg[512];
	kvt_key k[4];
	size_t found = 0;
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false},"
		 " \"peers\": {\"self\": \"solo\", \"members\": [{\"name\": \"solo\","
		 " \"addr\": \"127.0.0.1:%d\"}]}}", f->pa);
	int rc = kvt_open(cfg, &f->a);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	for (int i = 0; i < 4; i++)
		k[i] = test_key(100 + (uint64_t)i);
	for (int i = 0; i < 3; i++)
		store_put_block(f->a, k[i], size_of((size_t)i));
	for (int i = 0; i < 3; i++)
		assert_int_equal(store_get_block(f->a, k[i], size_of((size_t)i)), 0);
	assert_int_equal(store_get_block(f->a, k[3], 100), -ENOENT);
	assert_int_equal(kvt_lookup(f->a, k, 4, KVT_LEASE, &found), 0);
	assert_int_equal(found, 3);
	int fd = raw_connect(NULL, "127.0.0.1", f->pa); /* listen defaults to self's addr */
	assert_true(fd >= 0);
	close(fd);
}

/* --- two real nodes ------------------------------------------------------ */

static void test_put_goes_to_owner(void **state)
{
	struct fx *f = *state;
	enum { N = 32 };
	kvt_key k[N];
	kvt_op ops[N / 2];
	unsigned nb = 0;
	open_pair(f);
	for (size_t i = 0; i < N; i++)
		nb += owner_of(k[i] = test_key(7000 + i));
	assert_true(nb > 0 && nb < N);
	long long before = store_stat(f->a, "ram", "objects");
	for (size_t i = 0; i < N / 2; i++)
		store_put_block(f->a, k[i], size_of(i));
	for (size_t i = 0; i < N / 2; i++) {
		ops[i] = (kvt_op){ .key = k[N / 2 + i], .len = size_of(N / 2 + i) };
		assert_non_null(ops[i].buf = malloc(ops[i].len));
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	assert_int_equal(kvt_put_batch(f->a, ops, N / 2), 0);
	for (size_t i = 0; i < N / 2; i++) {
		assert_int_equal(ops[i].result, 0);
		free(ops[i].buf);
	}
	/* Every block is on a, whoever owns it. */
	assert_int_equal(store_stat(f->a, "ram", "objects") - before, N);
	/* b's get of a key b owns reads only b's tiers. */
	long long end = now_ms() + 2000;
	for (size_t i = 0; i < N; i++)
		while (owner_of(k[i]) == 1 && store_get_block(f->b, k[i], size_of(i))) {
			if (now_ms() > end)
				fail_msg("key %zu (owned by b) never reached b", i);
			usleep(10000);
		}
	kvt_close(f->a);
	f->a = NULL;
	for (size_t i = 0; i < N; i++) {
		int rc = store_get_block(f->b, k[i], size_of(i));
		if (owner_of(k[i]) == 1 && rc != 0)
			fail_msg("key %zu owned by b: %s after a closed", i, kvt_strerror(rc));
		if (owner_of(k[i]) == 0 && rc >= 0)
			fail_msg("key %zu owned by a was copied to b", i);
	}
}

static void test_get_and_batch_from_owner(void **state)
{
	struct fx *f = *state;
	enum { NB = 40 };
	kvt_key kb[NB + 1], ka[3];
	kvt_op ops[NB + 4];
	char small[100];
	size_t len, n = 0;
	open_pair(f);
	owned_keys(1, 20000, kb, NB + 1); /* kb[NB] is never stored */
	owned_keys(0, 20000, ka, 3);      /* ka[2] is never stored */
	for (size_t i = 0; i < NB; i++) {
		ops[i] = (kvt_op){ .key = kb[i], .len = size_of(i) };
		assert_non_null(ops[i].buf = malloc(ops[i].len));
		fill_block(kb[i], ops[i].buf, ops[i].len);
	}
	assert_int_equal(kvt_put_batch(f->b, ops, NB), 0);
	for (size_t i = 0; i < NB; i++)
		free(ops[i].buf);
	store_put_block(f->a, ka[0], 5000);
	store_put_block(f->a, ka[1], 6000);

	assert_int_equal(store_get_block(f->a, kb[0], size_of(0)), 0);
	len = 0;
	assert_int_equal(kvt_get(f->a, kb[1], small, sizeof(small), &len), -ENOBUFS);
	assert_int_equal(len, size_of(1));
	len = 0;
	assert_int_equal(kvt_get(f->a, kb[1], NULL, 0, &len), -ENOBUFS);
	assert_int_equal(len, size_of(1));

	/* b's blocks, a's own, and a miss of each owner's. */
	for (size_t i = 0; i < NB; i++)
		ops[n++] = (kvt_op){ .key = kb[i], .len = size_of(i) + 64 };
	ops[n++] = (kvt_op){ .key = ka[0], .len = 5000 };
	ops[n++] = (kvt_op){ .key = kb[NB], .len = 4096 };
	ops[n++] = (kvt_op){ .key = ka[1], .len = 6000 };
	ops[n++] = (kvt_op){ .key = ka[2], .len = 4096 };
	for (size_t i = 0; i < n; i++) {
		assert_non_null(ops[i].buf = malloc(ops[i].len));
		ops[i].result = 1;
	}
	assert_int_equal(kvt_get_batch(f->a, ops, n), -ENOENT);
	for (size_t i = 0; i < NB; i++) {
		if (ops[i].result)
			fail_msg("op %zu: %s", i, kvt_strerror(ops[i].result));
		assert_int_equal(ops[i].len, size_of(i));
		assert_true(check_block(kb[i], ops[i].buf, size_of(i)));
	}
	assert_int_equal(ops[NB].result, 0);
	assert_int_equal(ops[NB].len, 5000);
	assert_true(check_block(ka[0], ops[NB].buf, 5000));
	assert_int_equal(ops[NB + 1].result, -ENOENT);
	assert_int_equal(ops[NB + 2].result, 0);
	assert_true(check_block(ka[1], ops[NB + 2].buf, 6000));
	assert_int_equal(ops[NB + 3].result, -ENOENT);
	for (size_t i = 0; i < n; i++)
		free(ops[i].buf);
}

/* Ops of one batch that share a buffer, loaded from the owner: each is
 * promoted (peers.promote) into this node's RAM with its own bytes (they
 * are asked one at a time), not with whichever block landed in the buffer
 * last. */
static void test_batch_ops_sharing_a_buffer_from_owner(void **state)
{
	struct fx *f = *state;
	enum { N = 4, LEN = 50000 };
	kvt_key kb[N];
	kvt_op ops[N];
	char *scratch = malloc(LEN);

	assert_non_null(scratch);
	open_pair_with(f, PROMOTE);
	owned_keys(1, 30000, kb, N);
	for (int i = 0; i < N; i++)
		store_put_block(f->b, kb[i], LEN);
	for (int i = 0; i < N; i++)
		ops[i] = (kvt_op){ kb[i], scratch, LEN, 1 };
	long long peer_hits = store_stat(f->a, "store", "hits_peer");
	assert_int_equal(kvt_get_batch(f->a, ops, N), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, LEN);
	}
	assert_int_equal(store_stat(f->a, "store", "hits_peer"), peer_hits + N);
	/* now from a's RAM, each with its own bytes */
	for (int i = 0; i < N; i++)
		assert_int_equal(store_get_block(f->a, kb[i], LEN), 0);
	assert_int_equal(store_stat(f->a, "store", "hits_peer"), peer_hits + N);
	free(scratch);
}

/* A block loaded from its owner is returned, verified, and by default
 * not copied into the loader's RAM: the next get asks the owner again.
 * With peers.promote it is copied, and the next get is a RAM hit. */
static void test_peer_hits_are_promoted_only_when_asked(void **state)
{
	struct fx *f = *state;
	enum { LEN = 300000 };
	kvt_key kb[2];

	for (int promote = 0; promote < 2; promote++) {
		open_pair_with(f, promote ? PROMOTE : "");
		owned_keys(1, 46000, kb, 2);
		store_put_block(f->b, kb[0], LEN);
		store_put_block(f->b, kb[1], LEN);
		long long objects = store_stat(f->a, "ram", "objects");
		long long peer = store_stat(f->a, "store", "hits_peer");
		long long ram = store_stat(f->a, "store", "hits_ram");
		long long promotions = store_stat(f->a, "store", "promotions");
		char *buf = malloc(LEN);
		kvt_op ops[1] = { { kb[1], buf, LEN, 1 } };

		assert_non_null(buf);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(store_get_block(f->a, kb[0], LEN), 0);
			ops[0] = (kvt_op){ kb[1], buf, LEN, 1 };
			assert_int_equal(kvt_get_batch(f->a, ops, 1), 0);
			assert_int_equal(ops[0].result, 0);
			assert_int_equal(ops[0].len, LEN);
			assert_true(check_block(kb[1], buf, LEN));
		}
		/* the first get of each from b; the second from b again, or
		 * from a's RAM when promoted */
		assert_int_equal(store_stat(f->a, "store", "hits_peer"), peer + (promote ? 2 : 4));
		assert_int_equal(store_stat(f->a, "store", "hits_ram"), ram + (promote ? 2 : 0));
		assert_int_equal(store_stat(f->a, "store", "promotions"),
				 promotions + (promote ? 2 : 0));
		assert_int_equal(store_stat(f->a, "ram", "objects"), objects + (promote ? 2 : 0));
		free(buf);
		kvt_close(f->a);
		kvt_close(f->b);
		f->a = f->b = NULL;
	}
}

/*
 * Waits until s's RAM tier holds n pins: the sends of its server, which
 * pin each block they send, are over. Reading the count takes the locks
 * that those pins end under, so what the test writes into a block after
 * this comes after the sends read it (for the thread sanitizer too, which
 * does not see the order that the socket gives).
 */
static void wait_ram_pins(kvt_store *s, long long n)
{
	long long end = now_ms() + 5000;

	while (store_stat(s, "ram", "pinned") != n) {
		if (now_ms() > end)
			fail_msg("the server's pins never ended");
		usleep(1000);
	}
}

/*
 * An owner sends each block with the checksum kept beside it in RAM, not
 * one computed from its bytes as it sends them. Blocks made every way a
 * RAM block can be made (a put on the owner, a put forwarded to it by a
 * member, a committed slot, a disk hit copied into RAM, a disk hit loaded
 * into a slot and kept in place) all arrive verified, and so does one
 * served from the owner's disk (sent with the checksum the disk verified);
 * a block whose bytes change in the owner's RAM after it was made arrives
 * as a miss, counted as a checksum failure, never with the changed bytes.
 */
static void test_owner_sends_the_kept_checksum(void **state)
{
	struct fx *f = *state;
	enum { N = 5, LEN = 200000 };
	char cfg[1280], *dir;
	kvt_key kb[N + 1];         /* kb[N]: on b's disk only throughout */
	kvt_slot sl;
	kvt_pin_batch *bt = NULL;
	kvt_op ops[N + 1];

	TEST_NEED_DISK();
	dir = make_temp_dir("peer-sums");
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"64MiB\", \"max_block\": \"2MiB\", \"mlock\": false},"
		 " \"disk\": {\"path\": \"%s/b.dat\", \"capacity\": \"64MiB\","
		 " \"region_size\": \"4MiB\", \"write_policy\": \"write_through\"},"
		 " \"peers\": {\"self\": \"b\", \"listen\": \"127.0.0.1:%d\", \"members\":"
		 " [{\"name\": \"a\", \"addr\": \"127.0.0.1:%d\"},"
		 " {\"name\": \"b\", \"addr\": \"127.0.0.1:%d\"}], \"transport\": \"tcp\","
		 " \"connect_timeout_ms\": 5000, \"request_timeout_ms\": 5000}}",
		 dir, f->pb, f->pa, f->pb);
	owned_keys(1, 52000, kb, N + 1);
	/* kb[3], kb[4], kb[N] only on b's disk: written through, b reopened */
	assert_int_equal(kvt_open(cfg, &f->b), 0);
	store_put_block(f->b, kb[3], LEN);
	store_put_block(f->b, kb[4], LEN);
	store_put_block(f->b, kb[N], LEN);
	kvt_close(f->b);
	assert_int_equal(kvt_open(cfg, &f->b), 0);
	assert_int_equal(store_stat(f->b, "ram", "objects"), 0);
	/* a disk hit copied into RAM; one loaded into a slot, kept in place */
	assert_int_equal(store_get_block(f->b, kb[3], LEN), 0);
	assert_int_equal(store_stat(f->b, "store", "promotions"), 1);
	sl = (kvt_slot){ .key = kb[4] };
	assert_int_equal(kvt_get_pin(f->b, &sl, 1, 0, &bt), 1);
	size_t idx;
	assert_int_equal(kvt_pin_reap(bt, &idx, 1, 10000), 1); /* loaded from disk */
	assert_int_equal(sl.result, 0);
	kvt_pin_free(bt);
	assert_int_equal(store_stat(f->b, "slots", "loads_promoted"), 1);
	assert_int_equal(kvt_unpin(f->b, &sl, 1), 1);
	/* a put on b; a committed slot on b */
	store_put_block(f->b, kb[0], LEN);
	sl = (kvt_slot){ .key = kb[2], .len = LEN };
	assert_int_equal(kvt_put_reserve(f->b, &sl, 1, 0), 1);
	fill_block(kb[2], sl.addr, LEN);
	assert_int_equal(kvt_put_commit(f->b, &sl, 1), 1);
	/* a put on a, forwarded to b; a reopened without it */
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, SLOW_CONNECT);
	store_put_block(f->a, kb[1], LEN);
	long long end = now_ms() + 5000;
	while (store_stat(f->b, "ram", "objects") < N) {
		if (now_ms() > end)
			fail_msg("the put forwarded by a never reached b");
		usleep(10000);
	}
	kvt_close(f->a);
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, SLOW_CONNECT);

	for (int i = 0; i <= N; i++) {
		ops[i] = (kvt_op){ .key = kb[i], .len = LEN, .result = 1 };
		assert_non_null(ops[i].buf = malloc(LEN));
	}
	assert_int_equal(kvt_get_batch(f->a, ops, N + 1), 0);
	for (int i = 0; i <= N; i++) {
		if (ops[i].result)
			fail_msg("block %d: %s", i, kvt_strerror(ops[i].result));
		assert_int_equal(ops[i].len, LEN);
		assert_true(check_block(kb[i], ops[i].buf, LEN));
	}
	assert_int_equal(store_stat(f->a, "store", "hits_peer"), N + 1);
	assert_int_equal(store_stat(f->b, "ram", "objects"), N); /* kb[N]: from disk */
	assert_int_equal(store_stat(f->a, "peer", "checksum_failures"), 0);

	/* each block's bytes changed in b's RAM (through a pin of it there):
	 * a miss at a, the damage caught; repaired, a hit again */
	for (int i = 0; i < N; i++) {
		sl = (kvt_slot){ .key = kb[i] };
		assert_int_equal(kvt_get_pin(f->b, &sl, 1, 0, &bt), 1);
		assert_int_equal(sl.result, 0); /* in RAM: pinned at once */
		kvt_pin_free(bt);
		wait_ram_pins(f->b, 1);
		((uint8_t *)sl.addr)[LEN / 3] ^= 0x40;
		size_t len = 0;
		int rc = kvt_get(f->a, kb[i], ops[i].buf, LEN, &len);
		if (rc >= 0)
			fail_msg("block %d, changed in the owner's RAM, was returned", i);
		assert_int_equal(store_stat(f->a, "peer", "checksum_failures"), i + 1);
		wait_ram_pins(f->b, 1);
		((uint8_t *)sl.addr)[LEN / 3] ^= 0x40;
		assert_int_equal(kvt_unpin(f->b, &sl, 1), 1);
		assert_int_equal(kvt_get(f->a, kb[i], ops[i].buf, LEN, &len), 0);
		assert_true(check_block(kb[i], ops[i].buf, LEN));
	}
	for (int i = 0; i <= N; i++)
		free(ops[i].buf);
	kvt_close(f->b);
	f->b = NULL;
	rm_rf(dir);
	free(dir);
}

static void test_lookup_through_owner_and_stats(void **state)
{
	struct fx *f = *state;
	kvt_key c[10], ka[2], kb[2], mix[4];
	size_t found = 99;
	open_pair(f);
	owned_keys(1, 30000, c, 10);
	for (int i = 0; i < 10; i++)
		if (i != 6) /* a gap */
			store_put_block(f->b, c[i], 4096);
	assert_int_equal(kvt_lookup(f->a, c, 6, 0, &found), 0);
	assert_int_equal(found, 6);
	assert_int_equal(kvt_lookup(f->a, c, 10, 0, &found), 0);
	assert_int_equal(found, 6);
	assert_int_equal(kvt_lookup(f->a, c, 10, KVT_LEASE, &found), 0);
	assert_int_equal(found, 6);
	assert_true(kvt_release(f->a, c, 6) >= 0);
	assert_int_equal(kvt_lookup(f->a, c + 7, 3, KVT_LEASE, &found), 0);
	assert_int_equal(found, 3);
	assert_true(kvt_release(f->a, c + 7, 3) >= 0);

	/* A chain whose blocks alternate owners, each put on its owner. */
	owned_keys(0, 31000, ka, 2);
	owned_keys(1, 31000, kb, 2);
	mix[0] = ka[0], mix[1] = kb[0], mix[2] = ka[1], mix[3] = kb[1];
	for (int i = 0; i < 4; i++)
		store_put_block(i & 1 ? f->b : f->a, mix[i], 4096);
	assert_int_equal(kvt_lookup(f->a, mix, 4, 0, &found), 0);
	assert_int_equal(found, 4);
	assert_int_equal(kvt_lookup(f->b, mix, 4, KVT_LEASE, &found), 0);
	assert_int_equal(found, 4);

	/* with room: a's server may count something between the two calls */
	int n = kvt_stats_json(f->a, NULL, 0);
	assert_true(n > 0);
	char *buf = malloc((size_t)n + 4096);
	assert_non_null(buf);
	int m2 = kvt_stats_json(f->a, buf, (size_t)n + 4096);
	assert_true(m2 > 0 && m2 < n + 4096);
	json_t *j = json_loads(buf, 0, NULL), *m;
	free(buf);
	assert_non_null(j);
	assert_true(json_is_object(json_object_get(j, "peer")));
	assert_non_null(m = json_object_get(json_object_get(j, "peer"), "members"));
	assert_int_equal(json_is_array(m) ? json_array_size(m) : json_object_size(m), 2);
	json_decref(j);
}

/* --- failing peers ---------------------------------------------------------- */

/* A member that restarts is reached again at once: the connection it
 * closed is noticed before the next request, not failed on. */
static void test_restarted_peer_is_redialled(void **state)
{
	struct fx *f = *state;
	kvt_key kb[2];
	char st[8192];

	open_pair(f);
	owned_keys(1, 70000, kb, 2);
	store_put_block(f->b, kb[0], 9000);
	assert_int_equal(store_get_block(f->a, kb[0], 9000), 0); /* connected */
	kvt_close(f->b);
	f->b = node("b", f->pa, f->pb);
	store_put_block(f->b, kb[1], 9000);
	/* b's end of a's connection is gone; the get must dial again */
	assert_int_equal(store_get_block(f->a, kb[1], 9000), 0);
	assert_true(kvt_stats_json(f->a, st, sizeof(st)) > 0);
	assert_non_null(strstr(st, "\"failures\":0"));
}

static void test_dead_peer(void **state)
{
	struct fx *f = *state;
	kvt_key kb[3];
	char buf[4096];
	size_t len, found = 99;
	f->a = node("a", f->pa, f->pb); /* nothing listens on pb */
	owned_keys(1, 40000, kb, 3);
	long long t = now_ms();
	int rc = kvt_get(f->a, kb[0], buf, sizeof(buf), &len);
	if (rc >= 0 || (t = now_ms() - t) > CONNECT_MS + 1000)
		fail_msg("get from a dead owner: %d after %lld ms", rc, t);
	/* marked down: refused at once, nothing asked (the time bound only
	 * catches a wait for a connect, with room for a loaded machine) */
	long long asked = b_requests(f->a);
	t = now_ms();
	rc = kvt_get(f->a, kb[1], buf, sizeof(buf), &len);
	if (rc >= 0 || (t = now_ms() - t) >= CONNECT_MS)
		fail_msg("get from an owner marked down: %d after %lld ms", rc, t);
	assert_int_equal(b_requests(f->a), asked);
	t = now_ms();
	store_put_block(f->a, kb[2], 4096);
	assert_true(now_ms() - t < CONNECT_MS + 1000);
	assert_int_equal(store_get_block(f->a, kb[2], 4096), 0);
	assert_int_equal(kvt_lookup(f->a, kb, 2, 0, &found), 0);
	assert_int_equal(found, 0);

	/* Once b is up and down_ms has passed, a asks it again. */
	f->b = node("b", f->pa, f->pb);
	store_put_block(f->b, kb[0], 4096);
	long long end = now_ms() + DOWN_MS + 3000;
	while ((rc = store_get_block(f->a, kb[0], 4096)) != 0) {
		if (now_ms() > end)
			fail_msg("a never asked b again: %s", kvt_strerror(rc));
		usleep(20000);
	}
}

static void test_silent_peer(void **state)
{
	struct fx *f = *state;
	kvt_key kb[2];
	char buf[4096];
	size_t len;
	f->fake = fake_start(f->pb, FAKE_SILENT);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 41000, kb, 2);
	long long t = now_ms();
	int rc = kvt_get(f->a, kb[0], buf, sizeof(buf), &len);
	if (rc >= 0 || (t = now_ms() - t) > CONNECT_MS + REQUEST_MS + 1000)
		fail_msg("get from a silent owner: %d after %lld ms", rc, t);
	assert_true(atomic_load(&f->fake->conns) >= 1);
	long long asked = b_requests(f->a);
	int conns = atomic_load(&f->fake->conns);
	t = now_ms();
	rc = kvt_get(f->a, kb[1], buf, sizeof(buf), &len);
	if (rc >= 0 || (t = now_ms() - t) >= REQUEST_MS / 2)
		fail_msg("get from a silent owner marked down: %d after %lld ms", rc, t);
	assert_int_equal(b_requests(f->a), asked);
	assert_int_equal(atomic_load(&f->fake->conns), conns);
	t = now_ms();
	store_put_block(f->a, kb[1], 4096);
	if ((t = now_ms() - t) > CONNECT_MS + REQUEST_MS + 1000)
		fail_msg("put with a silent owner took %lld ms", t);
	assert_int_equal(store_get_block(f->a, kb[1], 4096), 0);
}

/* a's get of a key b owns, answered by a fake b in mode; kvt_get's result. */
/* How long the get of the last get_from_fake took (ms). */
static long long fake_get_ms;

static int get_from_fake(struct fx *f, enum fake_mode mode)
{
	void *buf = malloc(FAKE_LEN);
	kvt_key kb, ka;
	size_t len = 0;
	assert_non_null(buf);
	f->fake = fake_start(f->pb, mode);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 42000, &kb, 1);
	owned_keys(0, 42000, &ka, 1);
	long long t = now_ms();
	int rc = kvt_get(f->a, kb, buf, FAKE_LEN, &len);
	if ((t = fake_get_ms = now_ms() - t) > CONNECT_MS + REQUEST_MS + 1000)
		fail_msg("get from the fake took %lld ms", t);
	if (rc == 0) {
		assert_int_equal(len, FAKE_LEN);
		assert_true(check_block(kb, buf, FAKE_LEN));
	}
	free(buf);
	assert_true(atomic_load(&f->fake->hellos) >= 1);
	assert_true(atomic_load(&f->fake->gets) >= 1);
	store_put_block(f->a, ka, 4096); /* a still works */
	assert_int_equal(store_get_block(f->a, ka, 4096), 0);
	return rc;
}

static void test_fake_peer_answers(void **state)
{
	int rc = get_from_fake(*state, FAKE_GOOD);
	if (rc)
		fail_msg("get from a well-behaved fake b: %s (%s)", kvt_strerror(rc), kvt_last_error());
}

static void test_peer_dies_mid_transfer(void **state)
{
	assert_true(get_from_fake(*state, FAKE_SHORT) < 0);
	/* the close is seen when it comes, not at the request's deadline
	 * (a block is received waking only for large pieces of it) */
	if (fake_get_ms >= REQUEST_MS)
		fail_msg("a member that closed mid-block took %lld ms to notice", fake_get_ms);
}

/*
 * Blocks that arrive in pieces smaller than what a block's receive waits
 * for (SO_RCVLOWAT) with pauses between them load whole; after them a
 * small answer on the same connection (a lookup's) is read at once, not at
 * the deadline: the receive's low mark is put back after each block.
 */
static void test_blocks_arriving_in_pieces(void **state)
{
	struct fx *f = *state;
	kvt_key kb[3];
	kvt_op ops[3];
	size_t found = 0;

	f->fake = fake_start(f->pb, FAKE_DRIP);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 43000, kb, 3);
	for (int i = 0; i < 3; i++) {
		ops[i] = (kvt_op){ .key = kb[i], .len = FAKE_LEN, .result = 1 };
		assert_non_null(ops[i].buf = malloc(FAKE_LEN));
	}
	assert_int_equal(kvt_get_batch(f->a, ops, 3), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_true(check_block(kb[i], ops[i].buf, FAKE_LEN));
		free(ops[i].buf);
	}
	long long t = now_ms();
	assert_int_equal(kvt_lookup(f->a, kb, 3, 0, &found), 0);
	assert_int_equal(found, 3);
	if ((t = now_ms() - t) >= REQUEST_MS)
		fail_msg("a lookup after the blocks took %lld ms", t);
	assert_int_equal(atomic_load(&f->fake->conns), 1);
}

/* An answer that breaks the protocol is a miss: never a success that leaves
 * the caller's buffer as it was (and never cached). */
static void test_peer_sends_malformed_answer(void **state)
{
	struct fx *f = *state;
	int rc = get_from_fake(f, FAKE_MALFORMED);
	if (rc >= 0)
		fail_msg("a malformed answer read as a hit (%d)", rc);
	/* nothing was cached: with b marked down, still a miss */
	kvt_key kb;
	char buf[64];
	size_t len;
	owned_keys(1, 42000, &kb, 1);
	assert_true(kvt_get(f->a, kb, buf, sizeof(buf), &len) < 0);
}

/*
 * Stands in for a second thread whose load lands in the buffer that this
 * thread's batch has just loaded a block into: at the first log line, which
 * comes after that block was received and verified but before the store
 * copied it into RAM, the buffer gets another block's bytes.
 */
struct scribble {
	char *buf;
	size_t len;
	kvt_key other;
	int lines;
};

static void scribble_log(int level, const char *msg, void *arg)
{
	struct scribble *sc = arg;

	(void)level;
	(void)msg;
	if (sc->lines++ == 0)
		fill_block(sc->other, sc->buf, sc->len);
}

/* A peer hit whose buffer changed before its promotion is not promoted:
 * what RAM keeps must match the checksum the block was verified with. */
static void test_peer_hit_is_promoted_only_as_verified(void **state)
{
	struct fx *f = *state;
	char *b0 = malloc(FAKE_LEN), *b1 = malloc(FAKE_LEN);
	kvt_key kb[3];
	size_t len = 0;

	assert_true(b0 && b1);
	f->fake = fake_start(f->pb, FAKE_ERROR_SECOND);
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, PROMOTE);
	owned_keys(1, 44000, kb, 3);
	kvt_op ops[2] = { { kb[0], b0, FAKE_LEN, 1 }, { kb[1], b1, FAKE_LEN, 1 } };
	struct scribble sc = { b0, FAKE_LEN, kb[2], 0 };
	long long promotions = store_stat(f->a, "store", "promotions");

	/* one round trip: kb[0] arrives and is verified, then b refuses kb[1]
	 * (a log line), then the store promotes kb[0] from b0 */
	kvt_set_log(scribble_log, &sc, KVT_LOG_WARN);
	assert_true(kvt_get_batch(f->a, ops, 2) < 0);
	kvt_set_log(NULL, NULL, 0);
	assert_true(sc.lines >= 1);
	assert_int_equal(ops[0].result, 0);
	assert_int_equal(ops[0].len, FAKE_LEN);
	assert_true(ops[1].result < 0);
	assert_int_equal(atomic_load(&f->fake->gets), 1);
	/* b0 held kb[2]'s bytes by then: kb[0] is not in a's RAM with them.
	 * b is marked down, so a miss (or, once b is asked again, kb[0]'s own
	 * bytes), never kb[2]'s */
	int rc = kvt_get(f->a, kb[0], b0, FAKE_LEN, &len);
	if (rc == 0) {
		assert_int_equal(len, FAKE_LEN);
		assert_true(check_block(kb[0], b0, FAKE_LEN));
	} else {
		assert_int_equal(rc, -ENOENT);
	}
	/* the batch promoted nothing (a later good answer promotes one) */
	assert_int_equal(store_stat(f->a, "store", "promotions"), promotions + (rc == 0));
	free(b0);
	free(b1);
}

/* Threads queued on a member that is being marked down do not each wait
 * out a timeout of their own. */
struct getter {
	kvt_store *s;
	kvt_key k;
	pthread_barrier_t *go;
	int rc;
	long long ms, end;
};

static void *getter_main(void *arg)
{
	struct getter *g = arg;
	char buf[4096];
	size_t len;
	pthread_barrier_wait(g->go);
	long long t = now_ms();
	g->rc = kvt_get(g->s, g->k, buf, sizeof(buf), &len);
	g->end = now_ms();
	g->ms = g->end - t;
	return NULL;
}

/* The getters start together (a barrier, so that how long a loaded
 * machine takes to start a thread does not count) and their ends are
 * compared: one timeout each would space them REQUEST_MS apart, as they
 * queue on the member; sharing the first failure ends them together. */
static void test_queued_callers_share_a_failure(void **state)
{
	struct fx *f = *state;
	enum { NT = 5 };
	struct getter g[NT];
	pthread_t t[NT];
	pthread_barrier_t go;
	kvt_key kb[NT];

	f->fake = fake_start(f->pb, FAKE_SILENT);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 43000, kb, NT);
	assert_int_equal(pthread_barrier_init(&go, NULL, NT), 0);
	for (int i = 0; i < NT; i++) {
		g[i] = (struct getter){ .s = f->a, .k = kb[i], .go = &go };
		assert_int_equal(pthread_create(&t[i], NULL, getter_main, &g[i]), 0);
	}
	for (int i = 0; i < NT; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&go);
	long long lo = g[0].end, hi = g[0].end;
	for (int i = 0; i < NT; i++) {
		if (g[i].rc >= 0)
			fail_msg("getter %d: %d from a silent owner", i, g[i].rc);
		if (g[i].ms > CONNECT_MS + REQUEST_MS + 1000)
			fail_msg("getter %d waited %lld ms", i, g[i].ms);
		lo = g[i].end < lo ? g[i].end : lo;
		hi = g[i].end > hi ? g[i].end : hi;
	}
	/* the first failure answers all of them: not one timeout each */
	if (hi - lo >= REQUEST_MS / 2)
		fail_msg("getters ended %lld ms apart: each waited its own timeout", hi - lo);
}

/* A failed open closes nothing it did not open (descriptor 0 included). */
static void test_failed_open_leaves_other_descriptors(void **state)
{
	char cfg[1024];
	kvt_store *s = NULL;
	int opened = -1;

	(void)state;
	if (fcntl(0, F_GETFD) < 0)
		opened = open("/dev/null", O_RDONLY); /* becomes descriptor 0 */
	assert_true(fcntl(0, F_GETFD) >= 0);
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"8MiB\", \"mlock\": false}, \"peers\": "
		 "{\"self\": \"a\", \"members\": [{\"name\": \"a\", \"addr\": "
		 "\"127.0.0.1:%d\"}, {\"name\": \"b\", \"addr\": \"no-such-host.invalid:7\"}, "
		 "{\"name\": \"c\", \"addr\": \"127.0.0.1:9\"}, {\"name\": \"d\", "
		 "\"addr\": \"127.0.0.1:10\"}]}}", free_port());
	assert_int_equal(kvt_open(cfg, &s), -EINVAL);
	assert_null(s);
	assert_true(fcntl(0, F_GETFD) >= 0);
	if (opened >= 0)
		close(opened);
}

static void test_peer_sends_bad_checksum(void **state)
{
	int rc = get_from_fake(*state, FAKE_BADSUM);
	if (rc >= 0)
		fail_msg("a payload with a wrong checksum was returned (%d)", rc);
	if (rc != -EBADMSG)
		print_message("note: a bad checksum gave %s, not -EBADMSG\n", kvt_strerror(rc));
	else if (!strstr(kvt_last_error(), "failed its checksum"))
		fail_msg("a bad checksum left kvt_last_error() as \"%s\"", kvt_last_error());
}

/* --- the server, spoken to by hand ----------------------------------------- */

static void test_raw_protocol_roundtrip(void **state)
{
	struct fx *f = *state;
	kvt_key k[3];
	uint8_t h[HDR], body[4 * GET_SZ], item[GETR_SZ], res[4], *put;
	size_t n;
	f->a = node("a", f->pa, f->pb);
	owned_keys(0, 50000, k, 3); /* k[1] is never stored */
	store_put_block(f->a, k[2], 7000);
	int idle = raw_connect(NULL, "127.0.0.1", f->pa); /* must not hold up others */
	int fd = raw_connect(NULL, "127.0.0.1", f->pa);
	assert_true(idle >= 0 && fd >= 0);
	raw_hello(fd, "b");

	put = put_frame(k[0], 5000, 0, &n);
	assert_int_equal(send_all(fd, put, n), 0);
	free(put);
	recv_hdr(fd, h, T_PUT | RESP, "PUT");
	assert_int_equal(get32(h + 8), 1);
	assert_int_equal(get64(h + 16), 4);
	assert_int_equal(recv_wait(fd, res, 4, 2000, NULL), 0);
	assert_int_equal((int32_t)get32(res), 0);
	assert_int_equal(store_get_block(f->a, k[0], 5000), 0);

	for (int i = 0; i < 3; i++) {
		put64(body + i * KEY_SZ, k[i].lo);
		put64(body + i * KEY_SZ + 8, k[i].hi);
	}
	assert_int_equal(send_frame(fd, T_LOOKUP, 3, 1, body, 3 * KEY_SZ), 0);
	recv_hdr(fd, h, T_LOOKUP | RESP, "LOOKUP");
	assert_int_equal(get32(h + 8), 3);
	assert_int_equal(get64(h + 16), 3);
	assert_int_equal(recv_wait(fd, res, 3, 2000, NULL), 0);
	assert_true(res[0] == 1 && res[1] == 0 && res[2] == 1);
	assert_int_equal(send_frame(fd, T_RELEASE, 3, 0, body, 3 * KEY_SZ), 0);
	recv_hdr(fd, h, T_RELEASE | RESP, "RELEASE");
	assert_int_equal(get32(h + 8), 3);
	assert_int_equal(get64(h + 16), 0);

	/* GET: one GET_R frame of count 1 per item, in order. */
	static const uint64_t cap[4] = { 8192, 8192, 100, 8192 }, want[4] = { 5000, 0, 7000, 7000 };
	static const int status[4] = { 0, -ENOENT, -ENOBUFS, 0 };
	for (int i = 0; i < 4; i++) {
		put64(body + i * GET_SZ, k[i < 3 ? i : 2].lo);
		put64(body + i * GET_SZ + 8, k[i < 3 ? i : 2].hi);
		put64(body + i * GET_SZ + 16, cap[i]);
	}
	assert_int_equal(send_frame(fd, T_GET, 4, 0, body, 4 * GET_SZ), 0);
	for (int i = 0; i < 4; i++) {
		recv_hdr(fd, h, T_GET | RESP, "GET");
		assert_int_equal(get32(h + 8), 1);
		assert_int_equal(get64(h + 16), GETR_SZ + (status[i] ? 0 : want[i]));
		assert_int_equal(recv_wait(fd, item, GETR_SZ, 2000, NULL), 0);
		assert_int_equal((int32_t)get32(item), status[i]);
		assert_int_equal(get64(item + 8), want[i]);
		if (status[i])
			continue;
		void *data = malloc(want[i]);
		assert_non_null(data);
		assert_int_equal(recv_wait(fd, data, want[i], 2000, NULL), 0);
		assert_true(check_block(k[i < 3 ? i : 2], data, want[i]));
		assert_true(get64(item + 16) == XXH3_64bits(data, want[i]));
		free(data);
	}
	close(fd);
	close(idle);
}

/* a still answers its own API and a well-formed peer; k is a's. */
static void still_serves(struct fx *f, kvt_key k)
{
	uint8_t h[HDR], key[KEY_SZ], present = 0;
	store_put_block(f->a, k, 4096);
	assert_int_equal(store_get_block(f->a, k, 4096), 0);
	int fd = raw_connect(NULL, "127.0.0.1", f->pa);
	assert_true(fd >= 0);
	raw_hello(fd, "b");
	put64(key, k.lo);
	put64(key + 8, k.hi);
	assert_int_equal(send_frame(fd, T_LOOKUP, 1, 0, key, KEY_SZ), 0);
	recv_hdr(fd, h, T_LOOKUP | RESP, "LOOKUP after a hostile frame");
	assert_int_equal(get64(h + 16), 1);
	assert_int_equal(recv_wait(fd, &present, 1, 2000, NULL), 0);
	assert_int_equal(present, 1);
	close(fd);
}

/* Sends hostile frame c; returns what it was, or NULL past the last. */
static const char *send_hostile(int fd, int c)
{
	static const char junk[] = "GET / HTTP/1.1\r\nHost: kvtier\r\n\r\n0123456789abcdef";
	uint8_t h[HDR], body[PUT_SZ + 100] = { 0 };
	mkhdr(h, T_HELLO, 1, 0, 1);
	switch (c) {
	case 0:
		send_all(fd, junk, sizeof(junk));
		return "garbage bytes";
	case 1:
		put32(h, 0x3150564c);
		send_all(fd, h, HDR);
		send_all(fd, "b", 1);
		return "wrong magic";
	case 2:
		put16(h + 4, 2);
		send_all(fd, h, HDR);
		send_all(fd, "b", 1);
		return "wrong version";
	case 3:
		send_frame(fd, T_HELLO, 2, 0, "zz", 2);
		return "HELLO naming a non-member";
	case 4:
		mkhdr(h, T_HELLO, 1u << 30, 0, 1u << 30);
		send_all(fd, h, HDR);
		send_all(fd, "b", 1);
		return "HELLO with a 1 GiB name";
	case 5:
		send_frame(fd, T_LOOKUP, 1, 0, body, KEY_SZ);
		return "LOOKUP before HELLO";
	case 6:
		return "no HELLO within request_timeout_ms";
	}
	raw_hello(fd, "b");
	switch (c) {
	case 7:
		mkhdr(h, T_LOOKUP, 0xffffffffu, 0, 0xffffffffull * KEY_SZ);
		send_all(fd, h, HDR);
		send_all(fd, body, KEY_SZ);
		return "LOOKUP of 2^32-1 keys";
	case 8:
		send_frame(fd, T_GET, 2, 0, body, GET_SZ);
		return "GET with body_len != count * 24";
	case 9:
		mkhdr(h, T_PUT, 1, 0, PUT_SZ + 4ull * MiB);
		put64(body + 16, 4ull * MiB);
		send_all(fd, h, HDR);
		send_all(fd, body, PUT_SZ);
		return "PUT above ram.max_block";
	case 10:
		put64(body + 16, 4096);
		send_frame(fd, T_PUT, 1, 0, body, PUT_SZ + 100);
		return "PUT item longer than its frame";
	case 11:
		send_frame(fd, 9, 0, 0, NULL, 0);
		return "unknown frame type";
	case 12:
		send_frame(fd, T_HELLO | RESP, 1, 0, "b", 1);
		return "a response sent as a request";
	case 13:
		send_frame(fd, T_HELLO, 1, 0, "b", 1);
		return "a second HELLO";
	case 14:
	case 15:
		mkhdr(h, T_LOOKUP, 1, 0, KEY_SZ);
		if (c == 14)
			put32(h, 0x3150564c);
		else
			put16(h + 4, 2);
		send_all(fd, h, HDR);
		send_all(fd, body, KEY_SZ);
		return c == 14 ? "LOOKUP with a wrong magic" : "LOOKUP with a wrong version";
	case 16:
		mkhdr(h, T_PUT, 1, 0, 1ull << 50);
		put64(body + 16, 4096);
		send_all(fd, h, HDR);
		send_all(fd, body, PUT_SZ);
		return "PUT whose body claims 2^50 bytes for one item";
	}
	return NULL;
}

static void test_hostile_frames(void **state)
{
	struct fx *f = *state;
	kvt_key k[20];
	const char *what;
	f->a = node("a", f->pa, f->pb);
	owned_keys(0, 60000, k, 20);
	for (int c = 0;; c++) {
		int fd = raw_connect(NULL, "127.0.0.1", f->pa);
		assert_true(fd >= 0);
		if (!(what = send_hostile(fd, c))) {
			close(fd);
			break;
		}
		expect_refused(fd, what);
		close(fd);
		still_serves(f, k[c]);
	}
}

/* A PUT whose checksum fails, and one cut off halfway: neither is stored. */
static void test_bad_puts_not_stored(void **state)
{
	struct fx *f = *state;
	kvt_key k[3];
	uint8_t h[HDR], res[4], *put;
	size_t n;
	f->a = node("a", f->pa, f->pb);
	owned_keys(0, 61000, k, 3);
	int fd = raw_connect(NULL, "127.0.0.1", f->pa);
	assert_true(fd >= 0);
	raw_hello(fd, "b");
	put = put_frame(k[0], 4096, 1, &n);
	send_all(fd, put, n);
	free(put);
	/* A PUT_R with a failed status, or ERROR, or a close. */
	int r = recv_wait(fd, h, HDR, 2000, NULL);
	if (r < 0)
		fail_msg("PUT with a wrong checksum: no answer within 2 s");
	if (r == 0 && get16(h + 6) == (T_PUT | RESP)) {
		assert_int_equal(get64(h + 16), 4);
		assert_int_equal(recv_wait(fd, res, 4, 2000, NULL), 0);
		assert_true((int32_t)get32(res) < 0);
	} else if (r == 0 && get16(h + 6) != T_ERROR) {
		fail_msg("PUT with a wrong checksum: answered with type %#x", get16(h + 6));
	}
	close(fd);
	assert_int_equal(store_get_block(f->a, k[0], 4096), -ENOENT);
	still_serves(f, k[2]);

	assert_true((fd = raw_connect(NULL, "127.0.0.1", f->pa)) >= 0);
	raw_hello(fd, "b");
	put = put_frame(k[1], 4096, 0, &n);
	send_all(fd, put, HDR + PUT_SZ + 2048);
	free(put);
	close(fd);
	still_serves(f, k[2]);
	assert_int_equal(store_get_block(f->a, k[1], 4096), -ENOENT);
}

static void test_non_member_address(void **state)
{
	struct fx *f = *state;
	uint8_t h[HDR];
	kvt_key k;
	f->a = node("a", f->pa, f->pb);
	owned_keys(0, 63000, &k, 1);
	int fd = raw_connect(NULL, "127.0.0.2", f->pa);
	if (fd >= 0)
		fail_msg("a listens on 127.0.0.2 too, not only on peers.listen");
	if ((fd = raw_connect("127.0.0.2", "127.0.0.1", f->pa)) < 0)
		skip(); /* no 127.0.0.2 on this loopback */
	mkhdr(h, T_HELLO, 1, 0, 1);
	send_all(fd, h, HDR);
	send_all(fd, "b", 1);
	expect_refused(fd, "valid HELLO as b from 127.0.0.2");
	close(fd);
	still_serves(f, k);
}

/*
 * Two members on two addresses of one host (a on 127.0.0.1, b on
 * 127.0.0.2): b's connections to a must leave from b's own address, or a
 * refuses them (left to the kernel they leave from 127.0.0.1, a's own).
 */
static void test_source_is_own_member_address(void **state)
{
	struct fx *f = *state;
	kvt_key ka, kb;
	struct sockaddr_in b2 = loopback("127.0.0.2", 0);
	socklen_t bl = sizeof(b2);
	int one = 1, hold = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(hold >= 0);
	setsockopt(hold, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(hold, (struct sockaddr *)&b2, sizeof(b2))) {
		close(hold);
		skip(); /* no 127.0.0.2 on this loopback */
	}
	/* b's port is one free on 127.0.0.2 (f->pb is free on 127.0.0.1),
	 * held until b listens on it */
	assert_int_equal(getsockname(hold, (struct sockaddr *)&b2, &bl), 0);
	int pb = ntohs(b2.sin_port);
	/* one get each way, so no connect may time out on a loaded machine */
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.2", pb, SLOW_CONNECT);
	f->b = node_at("b", "127.0.0.1", f->pa, "127.0.0.2", pb, SLOW_CONNECT);
	close(hold);
	owned_keys(0, 64000, &ka, 1);
	owned_keys(1, 64000, &kb, 1);
	store_put_block(f->a, ka, 5000);
	store_put_block(f->b, kb, 5000);
	int rc = store_get_block(f->b, ka, 5000);
	if (rc)
		fail_msg("b (127.0.0.2) could not get a's key from a (127.0.0.1): %s: %s",
			 kvt_strerror(rc), kvt_last_error());
	assert_int_equal(store_get_block(f->a, kb, 5000), 0);
	assert_int_equal(store_stat(f->a, "peer", "connections_refused"), 0);
	assert_int_equal(store_stat(f->b, "peer", "connections_refused"), 0);
}

/*
 * An address this host does not have cannot be a source: with peers.listen
 * on every interface, a member address that is not local fails kvt_open.
 */
static void test_source_address_not_local(void **state)
{
	struct fx *f = *state;
	char cfg[512];
	kvt_store *s = (kvt_store *)0x1;
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false},"
		 " \"peers\": {\"self\": \"a\", \"listen\": \"0.0.0.0:%d\", \"members\":"
		 " [{\"name\": \"a\", \"addr\": \"192.0.2.1:%d\"},"
		 " {\"name\": \"b\", \"addr\": \"127.0.0.1:%d\"}]}}", f->pa, f->pa, f->pb);
	int rc = kvt_open(cfg, &s);
	if (rc != -EADDRNOTAVAIL) {
		if (rc == 0)
			kvt_close(s);
		fail_msg("non-local member address: got %d (%s)", rc, kvt_last_error());
	}
	assert_ptr_equal(s, (kvt_store *)0x1);
	assert_non_null(strstr(kvt_last_error(), "192.0.2.1"));
	assert_non_null(strstr(kvt_last_error(), "peers.members[0].addr"));
}

/* --- strangers in the log ---------------------------------------------- */

/* What the log said about refused strangers: lines, and the connections
 * they account for (1 for a line about one, N for a summary of N). */
static struct {
	pthread_mutex_t lock;
	long lines, refused;
} seen = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void count_refusals(int level, const char *msg, void *arg)
{
	unsigned long long n;
	(void)arg;
	if (level != KVT_LOG_WARN)
		return;
	pthread_mutex_lock(&seen.lock);
	if (!strncmp(msg, "peer: refused a connection", 26)) {
		seen.lines++;
		seen.refused++;
	} else if (sscanf(msg, "peer: refused %llu more", &n) == 1) {
		seen.lines++;
		seen.refused += (long)n;
	}
	pthread_mutex_unlock(&seen.lock);
}

static void seen_now(long *lines, long *refused)
{
	pthread_mutex_lock(&seen.lock);
	*lines = seen.lines;
	*refused = seen.refused;
	pthread_mutex_unlock(&seen.lock);
}

static void watch_refusals(void)
{
	pthread_mutex_lock(&seen.lock);
	seen.lines = seen.refused = 0;
	pthread_mutex_unlock(&seen.lock);
	kvt_set_log(count_refusals, NULL, KVT_LOG_WARN);
}

/* Waits (10 s at most) until stat tier.name of s reaches n. */
static void wait_stat(kvt_store *s, const char *tier, const char *name, long long n)
{
	long long end = now_ms() + 10000, v;
	while ((v = store_stat(s, tier, name)) < n) {
		if (now_ms() > end)
			fail_msg("%s.%s stayed at %lld, expected %lld", tier, name, v, n);
		usleep(5000);
	}
}

/* n connections to a from 127.0.0.2, an address that is no member's. */
static void strangers_by_address(struct fx *f, int n)
{
	long long base = store_stat(f->a, "peer", "connections_refused");
	for (int i = 0; i < n; i++) {
		int fd = raw_connect("127.0.0.2", "127.0.0.1", f->pa);
		if (fd < 0)
			fail_msg("connection %d from 127.0.0.2: %s", i, strerror(errno));
		close(fd);
		if (i % 32 == 31) /* within the listen backlog */
			wait_stat(f->a, "peer", "connections_refused", base + i + 1);
	}
	wait_stat(f->a, "peer", "connections_refused", base + n);
}

/* n connections from a member's address whose HELLO names no member. */
static void strangers_by_name(struct fx *f, int n)
{
	for (int i = 0; i < n; i++) {
		int fd = raw_connect(NULL, "127.0.0.1", f->pa);
		assert_true(fd >= 0);
		send_frame(fd, T_HELLO, 2, 0, "zz", 2);
		expect_refused(fd, "HELLO naming a non-member");
		close(fd);
	}
}

/*
 * Every stranger is counted, but the log gets one line for the first and
 * then at most a summary line per peers.log_interval_ms (10 s by default),
 * so 350 strangers write two lines or so, not 350.
 */
static void test_strangers_do_not_flood_the_log(void **state)
{
	struct fx *f = *state;
	long lines, refused;
	if (!have_address("127.0.0.2"))
		skip();
	f->a = node("a", f->pa, f->pb);
	watch_refusals();
	long long t0 = now_ms();
	strangers_by_address(f, 300);
	strangers_by_name(f, 50); /* each waits for its close: all told by now */
	seen_now(&lines, &refused);
	long long periods = (now_ms() - t0) / 10000;
	if (lines > 2 + periods)
		fail_msg("350 strangers in %lld ms wrote %ld log lines", now_ms() - t0, lines);
	assert_true(lines >= 1 && refused <= 350);
	/* the counters can trail the closes the client saw by a moment */
	wait_stat(f->a, "peer", "connections_from_strangers", 350);
	wait_stat(f->a, "peer", "connections_accepted", 50);
	assert_int_equal(store_stat(f->a, "peer", "connections_from_strangers"), 350);
	assert_int_equal(store_stat(f->a, "peer", "connections_accepted"), 50);
	/* what is still untold is told at close */
	kvt_close(f->a);
	f->a = NULL;
	seen_now(&lines, &refused);
	assert_int_equal(refused, 350);
}

/* The summary comes when its period ends, without a close; after a quiet
 * period the next stranger is logged at once. */
static void test_stranger_summary_each_interval(void **state)
{
	struct fx *f = *state;
	long lines, refused;
	if (!have_address("127.0.0.2"))
		skip();
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb,
		       ", \"log_interval_ms\": 200");
	watch_refusals();
	strangers_by_address(f, 20);
	long long end = now_ms() + 5000;
	for (seen_now(&lines, &refused); refused < 20; seen_now(&lines, &refused)) {
		if (now_ms() > end)
			fail_msg("after 5 s the log accounts for %ld of 20 strangers", refused);
		usleep(10000);
	}
	assert_int_equal(refused, 20);
	assert_true(lines >= 2); /* the first, then a summary */
	usleep(450000); /* a quiet period: the next one is told at once */
	long before = lines;
	strangers_by_address(f, 1);
	end = now_ms() + 5000;
	for (seen_now(&lines, &refused); refused < 21; seen_now(&lines, &refused)) {
		if (now_ms() > end)
			fail_msg("a stranger after a quiet period was not logged");
		usleep(10000);
	}
	assert_int_equal(lines, before + 1);
	assert_int_equal(store_stat(f->a, "peer", "connections_from_strangers"), 21);
}

/* --- connections per member and idle ones ------------------------------ */

/* Sends HELLO as name; returns 0 when a (named "a") answers HELLO_R, -1
 * when it refuses (ERROR or a close). */
static int try_hello(int fd, const char *name)
{
	uint8_t h[HDR];
	char who;
	if (send_frame(fd, T_HELLO, (uint32_t)strlen(name), 0, name, strlen(name)) ||
	    recv_wait(fd, h, HDR, 2000, NULL) || get16(h + 6) != (T_HELLO | RESP) ||
	    get64(h + 16) != 1 || recv_wait(fd, &who, 1, 2000, NULL) || who != 'a')
		return -1;
	return 0;
}

/* 1 when the server has closed fd (EOF or reset is readable). */
static int closed_by_server(int fd)
{
	char c;
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	return poll(&pf, 1, 0) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/*
 * A process at b's address opens 1,100 connections to a, each with b's
 * HELLO, and holds them idle. a keeps at most peers.max_conns_per_member
 * (64) of them, closing the one idle the longest for each newer one, so a
 * restarted b still gets in; without the cap the squatter held every slot
 * and b's gets read as misses.
 */
static void test_member_cannot_take_every_slot(void **state)
{
	struct fx *f = *state;
	enum { SQUAT = 1100 };
	int *fds = malloc(SQUAT * sizeof(int)), held = 0;
	kvt_key ka;
	assert_non_null(fds);
	open_pair(f);
	owned_keys(0, 65000, &ka, 1);
	store_put_block(f->a, ka, 6000);
	kvt_close(f->b); /* b restarts meanwhile: it must connect anew */
	f->b = NULL;
	for (int i = 0; i < SQUAT; i++) {
		fds[i] = raw_connect(NULL, "127.0.0.1", f->pa);
		if (fds[i] >= 0 && try_hello(fds[i], "b")) {
			close(fds[i]);
			fds[i] = -1;
		}
		held += fds[i] >= 0;
	}
	f->b = node_at("b", "127.0.0.1", f->pa, "127.0.0.1", f->pb, SLOW_CONNECT);
	int rc = store_get_block(f->b, ka, 6000);
	if (rc)
		fail_msg("b was locked out by %d idle connections under its name: %s: %s",
			 held, kvt_strerror(rc), kvt_last_error());
	/* the squatter's connections beyond the cap were closed */
	wait_stat(f->a, "peer", "connections_evicted", SQUAT - 64);
	long long end = now_ms() + 5000;
	int open;
	do {
		open = 0;
		for (int i = 0; i < SQUAT; i++)
			open += fds[i] >= 0 && !closed_by_server(fds[i]);
		if (open > 64)
			usleep(20000);
	} while (open > 64 && now_ms() < end);
	if (open > 64)
		fail_msg("%d of the squatter's connections are still open at a", open);
	for (int i = 0; i < SQUAT; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
}

/*
 * With every connection of a member busy (a request begun), a further one
 * is refused with an ERROR naming the cap; connections that have not said
 * HELLO are held to the same share per host, the oldest closed first.
 */
static void test_member_cap_when_all_busy(void **state)
{
	struct fx *f = *state;
	int busy[2], pend[3];
	uint8_t h[HDR];
	char msg[256] = "";
	/* a request begun has 10 s to finish: no busy one runs out meanwhile */
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb,
		       ", \"max_conns_per_member\": 2, \"request_timeout_ms\": 10000");
	for (int i = 0; i < 2; i++) {
		assert_true((busy[i] = raw_connect(NULL, "127.0.0.1", f->pa)) >= 0);
		raw_hello(busy[i], "b");
		mkhdr(h, T_LOOKUP, 1, 0, KEY_SZ);
		send_all(busy[i], h, 1); /* a request begun */
	}
	for (int i = 0; i < 3; i++)
		assert_true((pend[i] = raw_connect(NULL, "127.0.0.1", f->pa)) >= 0);
	wait_stat(f->a, "peer", "connections_evicted", 1); /* pend[0], the oldest */
	assert_int_equal(store_stat(f->a, "peer", "connections_evicted"), 1);
	assert_int_equal(recv_wait(pend[0], h, 1, 2000, NULL), 1);
	send_frame(pend[2], T_HELLO, 1, 0, "b", 1);
	recv_hdr(pend[2], h, T_ERROR, "HELLO past the cap");
	uint64_t n = get64(h + 16);
	assert_true(n > 0 && n < sizeof(msg));
	assert_int_equal(recv_wait(pend[2], msg, (size_t)n, 2000, NULL), 0);
	if (!strstr(msg, "max_conns_per_member"))
		fail_msg("the ERROR does not name the cap: \"%s\"", msg);
	assert_int_equal(store_stat(f->a, "peer", "connections_refused"), 1);
	/* once the busy ones are gone, b gets in again */
	for (int i = 0; i < 2; i++)
		close(busy[i]);
	for (int i = 0; i < 3; i++)
		close(pend[i]);
	long long end = now_ms() + 5000;
	for (;;) {
		int fd = raw_connect(NULL, "127.0.0.1", f->pa), ok;
		assert_true(fd >= 0);
		ok = try_hello(fd, "b") == 0;
		close(fd);
		if (ok)
			break;
		if (now_ms() > end)
			fail_msg("b was still refused 5 s after its busy connections closed");
		usleep(20000);
	}
}

/*
 * a closes a connection idle for peers.idle_timeout_ms; b, whose
 * connection a closed, dials again at its next request without failing.
 */
static void test_idle_connections_are_reaped(void **state)
{
	struct fx *f = *state;
	kvt_key ka[2];
	char st[8192];
	uint8_t h[HDR];
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb,
		       ", \"idle_timeout_ms\": 300");
	f->b = node_at("b", "127.0.0.1", f->pa, "127.0.0.1", f->pb, SLOW_CONNECT);
	int fd = raw_connect(NULL, "127.0.0.1", f->pa);
	assert_true(fd >= 0);
	raw_hello(fd, "b");
	if (recv_wait(fd, h, 1, 5000, NULL) != 1)
		fail_msg("an idle connection was still open after 5 s");
	close(fd);
	assert_int_equal(store_stat(f->a, "peer", "connections_reaped"), 1);

	owned_keys(0, 66000, ka, 2);
	store_put_block(f->a, ka[0], 7000);
	store_put_block(f->a, ka[1], 7000);
	assert_int_equal(store_get_block(f->b, ka[0], 7000), 0);
	wait_stat(f->a, "peer", "connections_reaped", 2); /* b's, idle */
	assert_int_equal(store_get_block(f->b, ka[1], 7000), 0);
	assert_true(kvt_stats_json(f->b, st, sizeof(st)) > 0);
	if (!strstr(st, "\"failures\":0"))
		fail_msg("b marked a down after a closed its idle connection: %s", st);
}

/*
 * A server may close a connection just as a request is on its way (idle,
 * or to make room): nothing of it was answered, so the client dials again
 * and asks again instead of failing and marking the member down. Each kind
 * of request crosses such a close once: GET, LOOKUP, PUT, RELEASE.
 */
static void test_close_crossing_a_request_is_redialled(void **state)
{
	struct fx *f = *state;
	kvt_key kb[3];
	char st[8192];
	void *buf = malloc(FAKE_LEN);
	size_t len, found;
	assert_non_null(buf);
	f->fake = fake_start(f->pb, FAKE_DROP_SECOND);
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, SLOW_CONNECT);
	owned_keys(1, 67000, kb, 3);
	for (int i = 0; i < 2; i++) {
		int rc = kvt_get(f->a, kb[i], buf, FAKE_LEN, &len);
		if (rc)
			fail_msg("get %d: %s (%s)", i, kvt_strerror(rc), kvt_last_error());
		assert_true(check_block(kb[i], buf, FAKE_LEN));
	}
	assert_int_equal(atomic_load(&f->fake->conns), 2);
	/* a lookup crosses the close too (the fake answers every key) */
	assert_int_equal(kvt_lookup(f->a, kb, 3, 0, &found), 0);
	assert_int_equal(found, 3);
	assert_int_equal(atomic_load(&f->fake->conns), 3);
	/* and a put, and a release */
	store_put_block(f->a, kb[2], 4096);
	assert_int_equal(store_stat(f->a, "store", "peer_puts"), 1);
	assert_int_equal(store_stat(f->a, "store", "peer_put_failures"), 0);
	assert_int_equal(atomic_load(&f->fake->conns), 4);
	kvt_release(f->a, kb, 1);
	assert_int_equal(atomic_load(&f->fake->conns), 5);
	free(buf);
	assert_true(kvt_stats_json(f->a, st, sizeof(st)) > 0);
	if (!strstr(st, "\"failures\":0"))
		fail_msg("a marked b down: %s", st);
}

/*
 * A reused connection that the member closes late into a request, without
 * an answer, is dialed again once, but within the first try's deadline:
 * the call still ends within connect_timeout_ms + request_timeout_ms (it
 * took both deadlines in turn, 1.8 request timeouts, before).
 */
static void test_late_close_keeps_the_deadline(void **state)
{
	struct fx *f = *state;
	kvt_key kb[2];
	void *buf = malloc(FAKE_LEN);
	size_t len;
	assert_non_null(buf);
	f->fake = fake_start(f->pb, FAKE_LATE_CLOSE);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 68000, kb, 2);
	assert_int_equal(kvt_get(f->a, kb[0], buf, FAKE_LEN, &len), 0);
	assert_true(check_block(kb[0], buf, FAKE_LEN));
	long long t0 = now_ms();
	int rc = kvt_get(f->a, kb[1], buf, FAKE_LEN, &len);
	long long ms = now_ms() - t0;
	print_message("second get: %d after %lld ms\n", rc, ms);
	assert_true(rc == -ETIMEDOUT || rc == -ENOENT);
	assert_true(ms < CONNECT_MS + REQUEST_MS + 250);
	free(buf);
}

/*
 * A request's header and body are read within request_timeout_ms of its
 * first byte, however they trickle in: a LOOKUP whose header and body come
 * 0.7 request timeouts apart each is closed, not answered.
 */
static void test_trickled_request_is_cut_off(void **state)
{
	struct fx *f = *state;
	uint8_t h[HDR], key[KEY_SZ] = { 0 };
	f->a = node("a", f->pa, f->pb);
	int fd = raw_connect(NULL, "127.0.0.1", f->pa);
	assert_true(fd >= 0);
	raw_hello(fd, "b");
	mkhdr(h, T_LOOKUP, 1, 0, KEY_SZ);
	assert_int_equal(send_all(fd, h, 1), 0);
	usleep(REQUEST_MS * 700);
	assert_int_equal(send_all(fd, h + 1, HDR - 1), 0);
	usleep(REQUEST_MS * 700);
	(void)send_all(fd, key, KEY_SZ); /* may find the connection closed */
	int r = recv_wait(fd, h, HDR, 2000, NULL);
	if (r == 0 && get16(h + 6) == (T_LOOKUP | RESP))
		fail_msg("a LOOKUP 1.4 request timeouts in the making was answered");
	close(fd);
	kvt_key k[1];
	owned_keys(0, 69000, k, 1);
	still_serves(f, k[0]);
}

/* An ERROR frame whose length is not its message's (a body that never
 * comes) ends the call at once, the member marked down, rather than
 * after request_timeout_ms. */
static void test_malformed_error_frame_fails_at_once(void **state)
{
	int rc = get_from_fake(*state, FAKE_BAD_ERROR);
	print_message("get: %d after %lld ms\n", rc, fake_get_ms);
	assert_true(rc < 0);
	assert_true(fake_get_ms < REQUEST_MS / 2);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_config_errors),
		cmocka_unit_test(test_opts_carry_every_peers_key),
		T(test_single_member_is_plain_store),
		T(test_put_goes_to_owner),
		T(test_get_and_batch_from_owner),
		T(test_batch_ops_sharing_a_buffer_from_owner),
		T(test_peer_hits_are_promoted_only_when_asked),
		T(test_owner_sends_the_kept_checksum),
		T(test_lookup_through_owner_and_stats),
		T(test_restarted_peer_is_redialled),
		T(test_dead_peer),
		T(test_silent_peer),
		T(test_fake_peer_answers),
		T(test_peer_dies_mid_transfer),
		T(test_blocks_arriving_in_pieces),
		T(test_peer_sends_bad_checksum),
		T(test_peer_hit_is_promoted_only_as_verified),
		T(test_peer_sends_malformed_answer),
		T(test_queued_callers_share_a_failure),
		T(test_failed_open_leaves_other_descriptors),
		T(test_raw_protocol_roundtrip),
		T(test_hostile_frames),
		T(test_bad_puts_not_stored),
		T(test_non_member_address),
		T(test_source_is_own_member_address),
		T(test_source_address_not_local),
		T(test_strangers_do_not_flood_the_log),
		T(test_stranger_summary_each_interval),
		T(test_member_cannot_take_every_slot),
		T(test_member_cap_when_all_busy),
		T(test_idle_connections_are_reaped),
		T(test_close_crossing_a_request_is_redialled),
		T(test_late_close_keeps_the_deadline),
		T(test_trickled_request_is_cut_off),
		T(test_malformed_error_frame_fails_at_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
