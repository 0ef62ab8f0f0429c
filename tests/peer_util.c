/* peer_util.c - see peer_util.h. */
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

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvtier.h"
#include "peer_util.h"
#include "util.h"

long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

void owned_keys(unsigned owner, uint64_t from, kvt_key *out, size_t n)
{
	static const char *const names[] = { "a", "b" };
	test_owned_keys(names, 2, owner, from, out, n);
}

struct sockaddr_in loopback(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

int free_port(void)
{
	return test_free_port();
}

int listen_on(int port)
{
	struct sockaddr_in a = loopback("127.0.0.1", port);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16))
		fail_msg("listen on 127.0.0.1:%d: %s", port, strerror(errno));
	return fd;
}

void set_timeouts(int fd, int secs)
{
	struct timeval tv = { .tv_sec = secs };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int raw_connect(const char *src, const char *dst, int port)
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

int send_all(int fd, const void *buf, size_t n)
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

int recv_wait(int fd, void *buf, size_t n, int timeout_ms, atomic_int *stop)
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

void mkhdr(uint8_t *h, unsigned type, uint32_t count, uint32_t flags, uint64_t len)
{
	put32(h, MAGIC);
	put16(h + 4, 1);
	put16(h + 6, (uint16_t)type);
	put32(h + 8, count);
	put32(h + 12, flags);
	put64(h + 16, len);
}

int send_frame(int fd, unsigned type, uint32_t count, uint32_t flags,
	       const void *body, uint64_t len)
{
	uint8_t h[HDR];
	mkhdr(h, type, count, flags, len);
	if (send_all(fd, h, HDR))
		return -1;
	return len ? send_all(fd, body, len) : 0;
}

int fx_setup(void **state)
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

int fx_teardown(void **state)
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

kvt_store *node_at(const char *self, const char *ipa, int pa, const char *ipb,
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

kvt_store *node(const char *self, int pa, int pb)
{
	return node_at(self, "127.0.0.1", pa, "127.0.0.1", pb, "");
}

void open_pair_with(struct fx *f, const char *extra)
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

void open_pair(struct fx *f)
{
	open_pair_with(f, "");
}

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

struct fake *fake_start(int port, enum fake_mode mode)
{
	struct fake *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->mode = mode;
	f->lfd = listen_on(port);
	assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
	return f;
}

void fake_stop(struct fake *f)
{
	atomic_store(&f->stop, 1);
	pthread_join(f->thread, NULL);
	close(f->lfd);
	free(f);
}
