/*
 * test_local.c - one store per node: kvtierd (and a store in this process)
 * serving local.socket, and processes attached to it with
 * kvt_open("{\"attach\": PATH}").
 *
 * The attached processes are this test binary run again with "--child ROLE
 * SOCKET" (exec'd, never merely forked, since the parent has threads): one
 * puts blocks three ways (kvt_put, kvt_put_batch, reserve/commit in place),
 * one finds them (a lookup with lease) and loads every one with its bytes
 * verified (get, get_batch, pins read in place), and one holds pins,
 * reservations and leases until it is killed with SIGKILL. Further tests
 * speak the frames of the local protocol themselves: a malformed frame, a
 * commit whose checksum does not match the arena's bytes, a client stuck
 * mid-frame beside a working one, local.max_clients; and a process of
 * another user refused by the socket's mode and by local.uids. Gets of RAM
 * blocks through the node store's directory: without a request, counted
 * as hits later, falling back when the directory is full, never wrong
 * while writers remove, replace and evict, and after the node store is
 * killed. The HELLO exchange is bounded at both ends: an attach to a
 * socket that never answers (or answers half, or cannot queue the connect)
 * fails with -ETIMEDOUT, and the node store drops connections that say no
 * HELLO, so they cannot keep real clients out. The example
 * examples/node_local (a scheduler and two workers) runs against the same
 * kvtierd. Every wait is bounded.
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

#define START_MS 30000 /* kvtierd start-up, generous for TSan */
#define CHILD_MS 60000 /* a child's work */
#define AT_ONCE_MS 2000 /* "at once": far below ram.pin_ms and ram.lease_ms */

#define NBLK 24        /* blocks the putter stores */
#define NPIN 8         /* pins the holder takes */
#define NRES 4         /* reservations the holder takes */
#define NLEASE 8       /* leases the holder takes */

/* The wire (lib/local_proto.h, kvtier(7)), written out to pin it. */
#define W_MAGIC 0x4c4bu
#define W_VERSION 3u
#define W_HELLO 1u
#define W_LOOKUP 2u
#define W_RESERVE 8u
#define W_COMMIT 9u
#define W_HITS 12u
#define W_REPLY 0x40u
#define W_NOREPLY 0x80u

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t blk_len(uint64_t i)
{
	return (size_t)(64 * 1024 + (i % 5) * 4096 + (i % 3) * 100);
}

static char self_exe[PATH_MAX];

/* --- children ----------------------------------------------------------------- */

static int child_fail(const char *role, const char *what, int rc)
{
	fprintf(stderr, "child %s: %s: %s: %s\n", role, what, kvt_strerror(rc), kvt_last_error());
	return 1;
}

static int attach(const char *sock, kvt_store **s)
{
	char cfg[256];
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", sock);
	return kvt_open(cfg, s);
}

static int child_put(kvt_store *s)
{
	kvt_op ops[NBLK];
	size_t nops = 0;
	int rc;

	for (uint64_t i = 0; i < NBLK; i++) {
		kvt_key k = test_key(i);
		size_t len = blk_len(i);
		if (i % 3 == 0) {
			char *b = malloc(len);
			fill_block(k, b, len);
			rc = kvt_put(s, k, b, len);
			free(b);
			if (rc)
				return child_fail("put", "kvt_put", rc);
		} else if (i % 3 == 1) {
			ops[nops] = (kvt_op){ .key = k, .buf = malloc(len), .len = len };
			fill_block(k, ops[nops].buf, len);
			nops++;
		} else {
			kvt_slot sl = { .key = k, .len = len };
			rc = kvt_put_reserve(s, &sl, 1, 0);
			if (rc != 1 || sl.result)
				return child_fail("put", "kvt_put_reserve", rc < 0 ? rc : sl.result);
			fill_block(k, sl.addr, len); /* straight into the shared arena */
			rc = kvt_put_commit(s, &sl, 1);
			if (rc != 1 || sl.result)
				return child_fail("put", "kvt_put_commit", rc < 0 ? rc : sl.result);
		}
	}
	rc = kvt_put_batch(s, ops, nops);
	for (size_t i = 0; i < nops; i++)
		free(ops[i].buf);
	return rc ? child_fail("put", "kvt_put_batch", rc) : 0;
}

static int child_find(kvt_store *s)
{
	kvt_key keys[NBLK];
	kvt_op ops[NBLK];
	kvt_slot sl[NBLK];
	size_t found = 0, len = 0;
	int rc;

	for (uint64_t i = 0; i < NBLK; i++)
		keys[i] = test_key(i);
	rc = kvt_lookup(s, keys, NBLK, KVT_LEASE, &found);
	if (rc || found != NBLK) {
		fprintf(stderr, "child find: lookup found %zu of %d\n", found, NBLK);
		return rc ? child_fail("find", "kvt_lookup", rc) : 1;
	}
	for (uint64_t i = 0; i < NBLK; i++) {
		char *b = malloc(blk_len(i));
		rc = kvt_get(s, keys[i], b, blk_len(i), &len);
		if (rc || len != blk_len(i) || !check_block(keys[i], b, len)) {
			free(b);
			fprintf(stderr, "child find: block %llu wrong\n", (unsigned long long)i);
			return rc ? child_fail("find", "kvt_get", rc) : 1;
		}
		free(b);
		ops[i] = (kvt_op){ .key = keys[i], .buf = malloc(blk_len(i)), .len = blk_len(i) };
		sl[i] = (kvt_slot){ .key = keys[i] };
	}
	rc = kvt_get_batch(s, ops, NBLK);
	for (uint64_t i = 0; i < NBLK; i++) {
		if (!rc && (ops[i].len != blk_len(i) || !check_block(keys[i], ops[i].buf, ops[i].len)))
			rc = -EBADMSG;
		free(ops[i].buf);
	}
	if (rc)
		return child_fail("find", "kvt_get_batch", rc);
	kvt_pin_batch *pb = NULL;
	rc = kvt_get_pin(s, sl, NBLK, 0, &pb);
	if (rc != NBLK)
		return child_fail("find", "kvt_get_pin", rc < 0 ? rc : -EAGAIN);
	for (uint64_t i = 0; i < NBLK; i++)
		if (sl[i].result || sl[i].len != blk_len(i) || !check_block(keys[i], sl[i].addr, sl[i].len))
			return child_fail("find", "pinned block in place", -EBADMSG);
	size_t idx[4];
	if (kvt_pin_reap(pb, idx, 4, 0) != 0) /* every slot was ready at return */
		return child_fail("find", "kvt_pin_reap", -EINVAL);
	kvt_pin_free(pb);
	if ((rc = kvt_unpin(s, sl, NBLK)) != NBLK)
		return child_fail("find", "kvt_unpin", rc < 0 ? rc : -ESTALE);
	if ((rc = kvt_release(s, keys, NBLK)) != NBLK)
		return child_fail("find", "kvt_release", rc < 0 ? rc : -ESTALE);
	return 0;
}

/* Holds pins, reservations and leases, says so on stdout, and waits to be
 * killed. */
static int child_hold(kvt_store *s)
{
	kvt_slot pin[NPIN], res[NRES];
	kvt_key lk[NLEASE];
	kvt_pin_batch *pb = NULL;
	size_t found = 0;

	for (uint64_t i = 0; i < NPIN; i++)
		pin[i] = (kvt_slot){ .key = test_key(i) };
	if (kvt_get_pin(s, pin, NPIN, 0, &pb) != NPIN)
		return child_fail("hold", "kvt_get_pin", -EAGAIN);
	for (uint64_t i = 0; i < NRES; i++)
		res[i] = (kvt_slot){ .key = test_key(1000 + i), .len = blk_len(i) };
	if (kvt_put_reserve(s, res, NRES, 0) != NRES)
		return child_fail("hold", "kvt_put_reserve", -EAGAIN);
	for (uint64_t i = 0; i < NRES; i++)
		memset(res[i].addr, 0xab, res[i].len / 2); /* half written */
	for (uint64_t i = 0; i < NLEASE; i++)
		lk[i] = test_key(NPIN + i);
	if (kvt_lookup(s, lk, NLEASE, KVT_LEASE, &found) || found != NLEASE)
		return child_fail("hold", "kvt_lookup", -ENOENT);
	if (write(1, "R", 1) != 1)
		return 1;
	for (;;)
		pause();
}

/* Gets NGOT blocks in one batch, whose unpins wait for a next request that
 * never comes; says so on stdout and waits to be killed. */
#define NGOT 3
static int child_got(kvt_store *s)
{
	kvt_op ops[NGOT];
	char bufs[NGOT][64];

	for (uint64_t i = 0; i < NGOT; i++)
		ops[i] = (kvt_op){ .key = test_key(700 + i), .buf = bufs[i], .len = 64 };
	int rc = kvt_get_batch(s, ops, NGOT);
	if (rc)
		return child_fail("got", "kvt_get_batch", rc);
	if (write(1, "R", 1) != 1)
		return 1;
	for (;;)
		pause();
}

/* Attaches as another user (uid and gid uid); exit 0 attached, 2 refused
 * with -EACCES, 3 otherwise. */
static int child_as(const char *uid_s, const char *sock)
{
	unsigned uid = (unsigned)strtoul(uid_s, NULL, 10);
	kvt_store *s = NULL;

	if (setgroups(0, NULL) || setgid(uid) || setuid(uid))
		return 4;
	int rc = attach(sock, &s);
	if (rc == 0) {
		kvt_close(s);
		return 0;
	}
	fprintf(stderr, "child as %u: %s: %s\n", uid, kvt_strerror(rc), kvt_last_error());
	return rc == -EACCES ? 2 : 3;
}

static int child_main(int argc, char **argv)
{
	kvt_store *s = NULL;
	int rc;

	if (argc == 5 && !strcmp(argv[2], "as"))
		return child_as(argv[3], argv[4]);
	if (argc != 4)
		return 64;
	if ((rc = attach(argv[3], &s)))
		return child_fail(argv[2], "attach", rc);
	if (!strcmp(argv[2], "put"))
		rc = child_put(s);
	else if (!strcmp(argv[2], "find"))
		rc = child_find(s);
	else if (!strcmp(argv[2], "hold"))
		rc = child_hold(s);
	else if (!strcmp(argv[2], "got"))
		rc = child_got(s);
	else
		rc = 64;
	kvt_close(s);
	return rc;
}

/* --- the parent's side ------------------------------------------------------------ */

/* Runs this binary as a child of role; its stdout into *out_fd if asked. */
static pid_t spawn_child(const char *role, const char *arg, const char *sock, int *out_fd)
{
	int p[2] = { -1, -1 };
	if (out_fd)
		assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (out_fd && dup2(p[1], 1) < 0)
			_exit(126);
		if (arg)
			execl(self_exe, self_exe, "--child", role, arg, sock, (char *)NULL);
		else
			execl(self_exe, self_exe, "--child", role, sock, (char *)NULL);
		_exit(127);
	}
	if (out_fd) {
		close(p[1]);
		*out_fd = p[0];
	}
	return pid;
}

static int wait_child(pid_t pid, int ms)
{
	long long end = now_ms() + ms;
	int st;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fail_msg("child %d still running after %d ms (killed)", (int)pid, ms);
		}
		usleep(5000);
	}
}

/* The path of this binary's kvtierd: build/<x>/examples next to build/<x>/tests. */
static void kvtierd_path(char *out, size_t cap)
{
	char d[PATH_MAX];
	snprintf(d, sizeof(d), "%s", self_exe);
	char *slash = strrchr(d, '/');
	if (slash)
		*slash = 0;
	if ((slash = strrchr(d, '/')))
		*slash = 0;
	snprintf(out, cap, "%s/examples/kvtierd", d);
}

/* Attaches, retrying while the server starts, within ms. */
static kvt_store *attach_within(const char *sock, int ms)
{
	long long end = now_ms() + ms;
	kvt_store *s = NULL;
	int rc;
	while ((rc = attach(sock, &s)) != 0) {
		if (now_ms() > end)
			fail_msg("cannot attach to %s: %s: %s", sock, kvt_strerror(rc), kvt_last_error());
		usleep(20000);
	}
	return s;
}

/* Waits up to AT_ONCE_MS for local.name (and more) to read want. */
static void expect_stat(kvt_store *s, const char *tier, const char *name, long long want)
{
	long long end = now_ms() + AT_ONCE_MS, v;
	while ((v = store_stat(s, tier, name)) != want) {
		if (now_ms() > end)
			fail_msg("%s.%s is %lld, expected %lld", tier, name, v, want);
		usleep(2000);
	}
}

static void check_all_readable(kvt_store *s)
{
	for (uint64_t i = 0; i < NBLK; i++)
		if (store_get_block(s, test_key(i), blk_len(i)))
			fail_msg("block %llu unreadable or wrong", (unsigned long long)i);
}

/* Starts kvtierd with the configuration cfg (written to dir); its stdout
 * in *out. */
static pid_t start_kvtierd(const char *dir, const char *cfg, char *bin, size_t cap,
			   int *out)
{
	char cfgp[256];
	int p[2];

	kvtierd_path(bin, cap);
	if (access(bin, X_OK))
		fail_msg("kvtierd not found at %s: build it with make", bin);
	snprintf(cfgp, sizeof(cfgp), "%s/kvtierd.json", dir);
	FILE *f = fopen(cfgp, "w");
	assert_non_null(f);
	fputs(cfg, f);
	fclose(f);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t d = fork();
	assert_true(d >= 0);
	if (d == 0) {
		dup2(p[1], 1);
		execl(bin, bin, "--config", cfgp, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	*out = p[0];
	return d;
}

static void test_kvtierd_three_processes(void **state)
{
	(void)state;
	char bin[PATH_MAX + 32], sock[256], cfg[512];
	char *dir = make_temp_dir("local");
	int out[1];
	snprintf(sock, sizeof(sock), "%s/kv.sock", dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false, "
		 "\"pin_ms\": 600000, \"lease_ms\": 600000}, \"local\": {\"socket\": \"%s\", "
		 "\"mode\": 384}}", sock);
	pid_t d = start_kvtierd(dir, cfg, bin, sizeof(bin), &out[0]);
	kvt_store *s = attach_within(sock, START_MS);
	char line[256] = "";
	ssize_t n = read(out[0], line, sizeof(line) - 1);
	assert_true(n > 0);
	line[n] = 0;
	char want[320];
	snprintf(want, sizeof(want), "kvtierd: serving local processes on %s", sock);
	if (!strstr(line, want))
		fail_msg("kvtierd said \"%s\", expected \"%s\"", line, want);
	struct stat st;
	assert_int_equal(stat(sock, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);

	/* One process puts, another finds and loads every block. */
	assert_int_equal(wait_child(spawn_child("put", NULL, sock, NULL), CHILD_MS), 0);
	assert_int_equal(wait_child(spawn_child("find", NULL, sock, NULL), CHILD_MS), 0);
	expect_stat(s, "local", "leased_blocks", 0); /* the finder released */

	/* A third holds pins, reservations and leases, and is killed. */
	int hold_out = -1;
	pid_t h = spawn_child("hold", NULL, sock, &hold_out);
	struct pollfd pf = { hold_out, POLLIN, 0 };
	char c = 0;
	if (poll(&pf, 1, CHILD_MS) != 1 || read(hold_out, &c, 1) != 1 || c != 'R') {
		kill(h, SIGKILL);
		waitpid(h, NULL, 0);
		fail_msg("the holding child did not get ready");
	}
	assert_int_equal(store_stat(s, "local", "pinned_blocks"), NPIN);
	assert_int_equal(store_stat(s, "local", "reserved_blocks"), NRES);
	assert_int_equal(store_stat(s, "local", "leased_blocks"), NLEASE);
	assert_true(store_stat(s, "ram", "leased_bytes") > 0);
	assert_int_equal(store_stat(s, "local", "clients"), 2);
	assert_int_equal(kill(h, SIGKILL), 0);
	assert_int_equal(wait_child(h, CHILD_MS), 128 + SIGKILL);
	close(hold_out);
	expect_stat(s, "local", "pinned_blocks", 0);
	expect_stat(s, "local", "reserved_blocks", 0);
	expect_stat(s, "local", "leased_blocks", 0);
	expect_stat(s, "local", "pinned_bytes", 0);
	expect_stat(s, "local", "reserved_bytes", 0);
	expect_stat(s, "ram", "leased_bytes", 0);
	expect_stat(s, "slots", "held", 0);
	expect_stat(s, "local", "clients", 1);
	check_all_readable(s);
	/* The half-written reservations never became blocks. */
	for (uint64_t i = 0; i < NRES; i++) {
		kvt_key k = test_key(1000 + i);
		size_t found = 9;
		assert_int_equal(kvt_lookup(s, &k, 1, 0, &found), 0);
		assert_int_equal(found, 0);
	}

	/* The example: a scheduler and two workers against the same kvtierd. */
	char ex[PATH_MAX + 32];
	snprintf(ex, sizeof(ex), "%s", bin);
	char *slash = strrchr(ex, '/');
	snprintf(slash + 1, sizeof(ex) - (size_t)(slash + 1 - ex), "node_local");
	pid_t e = fork();
	assert_true(e >= 0);
	if (e == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execl(ex, ex, sock, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(wait_child(e, CHILD_MS), 0);
	expect_stat(s, "local", "leased_blocks", 0);
	kvt_close(s);

	assert_int_equal(kill(d, SIGTERM), 0);
	assert_int_equal(wait_child(d, START_MS), 0);
	assert_int_equal(access(sock, F_OK), -1); /* the socket file is gone */
	close(out[0]);
	rm_rf(dir);
	free(dir);
}

/* --- a node store in this process ----------------------------------------------- */

static char *g_dir;

static kvt_store *open_node_ram(const char *ram_extra, const char *extra, char *sock,
				size_t cap)
{
	char cfg[1024];
	kvt_store *s = NULL;
	static int nth;
	snprintf(sock, cap, "%s/node%d.sock", g_dir, nth++);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"32MiB\", \"mlock\": false%s}, "
		 "\"local\": {\"socket\": \"%s\"%s}}", ram_extra ? ram_extra : "", sock,
		 extra ? extra : "");
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open(%s): %s: %s", cfg, kvt_strerror(rc), kvt_last_error());
	return s;
}

static kvt_store *open_node(const char *extra, char *sock, size_t cap)
{
	return open_node_ram(NULL, extra, sock, cap);
}

/* local.spin_us as the last raw HELLO answer gave it. */
static uint32_t g_hello_spin;

/* A raw connection that has said HELLO; the arena's memfd in *mfd, the
 * directory's in *dfd (-1: none; closed when dfd is NULL). */
static int raw_hello_dir(const char *sock, int *mfd, uint64_t *arena_len, int *dfd,
			 uint64_t *dir_len)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	unsigned char q[12];
	uint16_t magic = W_MAGIC;
	uint32_t len = 4, v = W_VERSION;
	memcpy(q, &magic, 2);
	q[2] = W_VERSION;
	q[3] = W_HELLO;
	memcpy(q + 4, &len, 4);
	memcpy(q + 8, &v, 4);
	assert_int_equal(send(fd, q, 12, MSG_NOSIGNAL), 12);
	unsigned char r[8 + 4 + 48];
	union { char b[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr x; } u;
	struct iovec iov = { r, sizeof(r) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			    .msg_controllen = sizeof(u.b) };
	assert_int_equal(recvmsg(fd, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC), (ssize_t)sizeof(r));
	assert_int_equal(r[3], W_HELLO | W_REPLY);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	assert_non_null(cm);
	uint64_t dlen;
	memcpy(&dlen, r + 12 + 32, 8);
	/* The arena's memfd, then the directory's when there is one. */
	assert_int_equal(cm->cmsg_len, CMSG_LEN((dlen ? 2 : 1) * sizeof(int)));
	memcpy(mfd, CMSG_DATA(cm), sizeof(int));
	int d = -1;
	if (dlen)
		memcpy(&d, CMSG_DATA(cm) + sizeof(int), sizeof(int));
	if (dfd) {
		*dfd = d;
		*dir_len = dlen;
	} else if (d >= 0) {
		close(d);
	}
	memcpy(arena_len, r + 12 + 8, 8);
	memcpy(&g_hello_spin, r + 12 + 40, 4);
	uint32_t zero;
	memcpy(&zero, r + 12 + 44, 4);
	assert_int_equal(zero, 0);
	return fd;
}

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

static void test_other_users_refused(void **state)
{
	(void)state;
	char sock[256];
	if (geteuid() != 0) {
		skip(); /* needs to run a child as another user */
	}
	/* The directory lets everyone reach the socket; the socket decides. */
	assert_int_equal(chmod(g_dir, 0755), 0);
	/* The socket's mode keeps them out. */
	kvt_store *node = open_node(", \"mode\": 384", sock, sizeof(sock));
	assert_int_equal(wait_child(spawn_child("as", "65534", sock, NULL), CHILD_MS), 2);
	kvt_close(node);
	/* The mode lets them in, SO_PEERCRED does not. */
	node = open_node(", \"mode\": 438", sock, sizeof(sock));
	assert_int_equal(wait_child(spawn_child("as", "65534", sock, NULL), CHILD_MS), 2);
	assert_int_equal(store_stat(node, "local", "clients_refused"), 1);
	kvt_close(node);
	/* local.uids names them. */
	node = open_node(", \"mode\": 438, \"uids\": [65534]", sock, sizeof(sock));
	assert_int_equal(wait_child(spawn_child("as", "65534", sock, NULL), CHILD_MS), 0);
	kvt_close(node);
}

static void test_config(void **state)
{
	(void)state;
	static const struct { const char *cfg; int rc; const char *names; } bad[] = {
		{ "{\"local\": {}}", -EINVAL, "local.socket" },
		{ "{\"local\": {\"socket\": 5}}", -EINVAL, "local.socket" },
		{ "{\"local\": {\"socket\": \"\"}}", -EINVAL, "local.socket" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"colour\": 1}}", -EINVAL, "local.colour" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"mode\": 512}}", -EINVAL, "local.mode" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"uids\": [-1]}}", -EINVAL, "local.uids[0]" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"max_clients\": 0}}", -EINVAL, "local.max_clients" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"directory\": -1}}", -EINVAL, "local.directory" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"spin_us\": -1}}", -EINVAL, "local.spin_us" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"spin_us\": 1001}}", -EINVAL, "local.spin_us" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"spin_us\": \"50\"}}", -EINVAL, "local.spin_us" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"directory\": 67108865}}", -EINVAL, "local.directory" },
		{ "{\"local\": {\"socket\": \"/tmp/x\", \"directory\": \"8\"}}", -EINVAL, "local.directory" },
		{ "{\"attach\": \"/tmp/x\", \"ram\": {}}", -EINVAL, "ram" },
		{ "{\"attach\": 3}", -EINVAL, "attach" },
		{ "{\"attach_timeout_ms\": 1000}", -EINVAL, "attach_timeout_ms" },
		{ "{\"attach\": \"/tmp/x\", \"attach_timeout_ms\": -1}", -EINVAL, "attach_timeout_ms" },
		{ "{\"attach\": \"/tmp/x\", \"attach_timeout_ms\": 3600001}", -EINVAL, "attach_timeout_ms" },
		{ "{\"attach\": \"/tmp/x\", \"attach_timeout_ms\": \"5s\"}", -EINVAL, "attach_timeout_ms" },
		{ "{\"attach\": \"/nonexistent/kvtier.sock\"}", -ENOENT, "/nonexistent/kvtier.sock" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kvt_store *s = NULL;
		int rc = kvt_open(bad[i].cfg, &s);
		if (rc != bad[i].rc || !strstr(kvt_last_error(), bad[i].names))
			fail_msg("%s: %d (%s), expected %d naming %s", bad[i].cfg, rc,
				 kvt_last_error(), bad[i].rc, bad[i].names);
		assert_null(s);
	}
	char longp[200];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = 0;
	char cfg[400];
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"/%s\"}", longp);
	kvt_store *s = NULL;
	assert_int_equal(kvt_open(cfg, &s), -EINVAL);
	/* A path that is a file, not a socket: the node store refuses it. */
	char path[300];
	snprintf(path, sizeof(path), "%s/plain", g_dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"8MiB\", \"mlock\": false}, "
		 "\"local\": {\"socket\": \"%s\"}}", path);
	assert_int_equal(kvt_open(cfg, &s), -EEXIST);
	/* Two stores on one socket: the second is refused. */
	char sock[256];
	kvt_store *node = open_node(NULL, sock, sizeof(sock));
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"8MiB\", \"mlock\": false}, "
		 "\"local\": {\"socket\": \"%s\"}}", sock);
	assert_int_equal(kvt_open(cfg, &s), -EADDRINUSE);
	kvt_close(node);
}

/* The attached ABI beside the node store's own: misses, -ENOBUFS, remove,
 * a put the arena cannot take without spilling, arena regions. */
static void test_attached_calls(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node_ram(", \"lease_cap\": 1.0", NULL, sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	char buf[16384];
	size_t len = 0;
	kvt_key k = test_key(9);

	assert_int_equal(kvt_get(a, k, buf, sizeof(buf), &len), -ENOENT);
	store_put_block(a, k, 12288);
	assert_int_equal(kvt_get(a, k, buf, 100, &len), -ENOBUFS);
	assert_int_equal(len, 12288);
	assert_int_equal(store_get_block(node, k, 12288), 0); /* the node store has it */
	assert_int_equal(kvt_put(a, k, buf, 12288), 0);      /* stored already: no-op */
	assert_int_equal(kvt_remove(a, k), 0);
	assert_int_equal(kvt_remove(a, k), -ENOENT);
	assert_int_equal(kvt_get(node, k, buf, sizeof(buf), &len), -ENOENT);

	kvt_region r[2];
	void *base = NULL, *nbase = NULL;
	size_t alen = 0, nlen = 0;
	assert_int_equal(kvt_arena(a, &base, &alen), 0);
	assert_int_equal(kvt_arena(node, &nbase, &nlen), 0);
	assert_int_equal(alen, nlen);
	/* Both mappings 2 MiB aligned, so that the memfd's huge pages (when
	 * the kernel gives shared memory any) are mapped whole in each. */
	assert_int_equal((uintptr_t)base % (2u << 20), 0);
	assert_int_equal((uintptr_t)nbase % (2u << 20), 0);
	assert_int_equal(kvt_arena_regions(a, r, 2), 1);
	assert_ptr_equal(r[0].base, base);
	assert_int_equal(r[0].len, alen);

	/* A reservation's bad slots fail alone, as in a store with tiers: the
	 * others are reserved (or found stored) by the node store. */
	store_put_block(node, test_key(11), 8000);
	kvt_slot sl[5] = {
		{ .key = test_key(10), .len = 8000 },
		{ .key = test_key(11), .len = 8000 },
		{ .key = test_key(12), .len = 0 },
		{ .key = test_key(13), .len = 8000, .flags = 1 },
		{ .key = test_key(14), .len = 4096 },
	};
	assert_int_equal(kvt_put_reserve(a, sl, 5, 0), 2);
	assert_int_equal(sl[0].result, 0);
	assert_int_equal(sl[1].result, KVT_SLOT_STORED);
	assert_int_equal(sl[2].result, -EINVAL);
	assert_int_equal(sl[3].result, -EINVAL);
	assert_int_equal(sl[4].result, 0);
	assert_null(sl[2].addr);
	assert_null(sl[3].addr);
	assert_non_null(strstr(kvt_last_error(), "slot 3"));
	fill_block(sl[0].key, sl[0].addr, 8000);
	fill_block(sl[4].key, sl[4].addr, 4096);
	assert_int_equal(kvt_put_commit(a, sl, 5), 2);
	assert_int_equal(store_get_block(node, test_key(10), 8000), 0);
	assert_int_equal(store_get_block(node, test_key(14), 4096), 0);
	sl[0] = (kvt_slot){ .key = test_key(15), .len = 0 };
	assert_int_equal(kvt_put_reserve(a, sl, 1, 0), 0);
	assert_int_equal(sl[0].result, -EINVAL);

	/* A put batch names its first failed op, as a store with tiers does. */
	char small[4096];
	fill_block(test_key(16), small, sizeof(small));
	kvt_op bops[3] = { { test_key(16), small, sizeof(small), 1 },
			   { test_key(17), small, 0, 1 },
			   { test_key(18), NULL, 4096, 1 } };
	assert_int_equal(kvt_put_batch(a, bops, 3), -EINVAL);
	assert_int_equal(bops[0].result, 0);
	assert_non_null(strstr(kvt_last_error(), "kvt_put_batch: op 1 "));
	assert_non_null(strstr(kvt_last_error(), "len is 0"));

	/* Fill RAM with leased blocks: reservations find no room, so the
	 * puts carry their bytes in the frame and are refused as kvt_put()
	 * refuses them without a disk tier. */
	size_t big = 1u << 20, nput = 0, found = 0;
	char *blk = malloc(big);
	kvt_key keys[40];
	for (uint64_t i = 0; i < 40; i++) {
		keys[i] = test_key(500 + i);
		fill_block(keys[i], blk, big);
		int rc = kvt_put(a, keys[i], blk, big);
		if (rc == 0) {
			nput++;
			assert_int_equal(kvt_lookup(a, &keys[i], 1, KVT_LEASE, &found), 0);
		} else {
			assert_int_equal(rc, -ENOSPC);
		}
	}
	assert_true(nput >= 8 && nput < 40);
	for (uint64_t i = 0; i < nput; i++)
		assert_int_equal(store_get_block(a, keys[i], big), 0);
	free(blk);
	kvt_close(a); /* its leases go */
	expect_stat(node, "ram", "leased_bytes", 0);

	/* Asynchronous batches run on the attached store's own workers. */
	a = attach_within(sock, 1000);
	kvt_op ops[4];
	for (uint64_t i = 0; i < 4; i++) {
		ops[i] = (kvt_op){ .key = test_key(600 + i), .buf = malloc(8192), .len = 8192 };
		fill_block(ops[i].key, ops[i].buf, 8192);
	}
	kvt_batch *bt = NULL;
	assert_int_equal(kvt_batch_submit(a, KVT_OP_PUT, ops, 4, &bt), 0);
	assert_int_equal(kvt_batch_wait(bt, 10000), 0);
	assert_int_equal(kvt_batch_result(bt), 0);
	kvt_batch_free(bt);
	for (uint64_t i = 0; i < 4; i++) {
		assert_int_equal(store_get_block(node, ops[i].key, 8192), 0);
		free(ops[i].buf);
	}
	kvt_close(a);
	kvt_close(node);
}

/* With the directory off (local.directory 0), a get pins its block; its
 * unpin waits for the process's next request, which carries it in front of
 * itself; at most 16 wait so; they all end when the process closes its
 * store or is killed. */
/* The reservations behind an attached process's kvt_put are the library's
 * own, for the length of the call: they do not lapse after ram.pin_ms (1
 * ms here, far less than copying 32 MiB takes), so the copy never lands in
 * space given to another block meanwhile, and the put succeeds. */
static void test_attached_puts_outlast_pin_ms(void **state)
{
	(void)state;
	char sock[256];
	size_t len = 32u << 20, got = 0;
	char cfg[512];
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s/lapse.sock", g_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"160MiB\", \"mlock\": false, "
		 "\"pin_ms\": 1, \"max_block\": \"32MiB\"}, \"local\": {\"socket\": \"%s\", "
		 "\"directory\": 0}}", sock);
	assert_int_equal(kvt_open(cfg, &node), 0);
	kvt_store *a = attach_within(sock, 1000);
	unsigned char *buf = malloc(len), *back = malloc(len);

	assert_non_null(buf);
	assert_non_null(back);
	for (uint64_t i = 0; i < 4; i++) {
		kvt_key k = test_key(900 + i);
		fill_block(k, buf, len);
		int rc = kvt_put(a, k, buf, len);
		if (rc)
			fail_msg("put %u: %s: %s", (unsigned)i, kvt_strerror(rc), kvt_last_error());
		assert_int_equal(kvt_get(node, k, back, len, &got), 0);
		assert_int_equal(got, len);
		assert_true(check_block(k, back, len));
	}
	assert_int_equal(store_stat(node, "slots", "held"), 0);
	kvt_close(a);
	kvt_close(node);
	free(buf);
	free(back);
}

struct churn {
	kvt_store *node;
	kvt_key key;              /* the block the test reads */
	const unsigned char *want;
	size_t len;
	atomic_int ready;         /* the block is stored: the reader may get it */
	atomic_int asked;         /* gets the reader started */
	atomic_int stop;
};

/* Once the reader's get has pinned the block, removes it (its space is
 * given back once the pin ends or lapses) and puts 16 fresh 1 MiB blocks,
 * which may take that space, then puts the block back for the next get. */
static void *churn_main(void *p)
{
	struct churn *ch = p;
	size_t len = 1u << 20;
	unsigned char *buf = malloc(len);
	int seen = 0;

	for (uint64_t i = 0; buf; i++) {
		long long pins = store_stat(ch->node, "slots", "pins_ram");
		kvt_put(ch->node, ch->key, ch->want, ch->len);
		atomic_store(&ch->ready, 1);
		while (atomic_load(&ch->asked) == seen && !atomic_load(&ch->stop))
			sched_yield();
		if (atomic_load(&ch->stop))
			break;
		seen = atomic_load(&ch->asked);
		while (store_stat(ch->node, "slots", "pins_ram") == pins && !atomic_load(&ch->stop))
			sched_yield();
		kvt_remove(ch->node, ch->key);
		for (int j = 0; j < 16; j++) {
			kvt_key k = test_key(100000 + i * 16 + (uint64_t)j);
			fill_block(k, buf, len);
			kvt_put(ch->node, k, buf, len);
		}
	}
	free(buf);
	return NULL;
}

/* An attached process's get copies a block out of a pin of the node
 * store. With ram.pin_ms 1 that pin lapses while a 16 MiB block is being
 * copied, and the churn removes the block, whose space other blocks then
 * take: the get must still hand out the block's own bytes (or miss),
 * never others. */
static void test_attached_gets_outlast_pin_ms(void **state)
{
	(void)state;
	char sock[256], cfg[512];
	size_t len = 16u << 20, got = 0;
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s/lapse-get.sock", g_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false, "
		 "\"pin_ms\": 1, \"max_block\": \"16MiB\"}, \"local\": {\"socket\": \"%s\", "
		 "\"directory\": 0}}", sock);
	assert_int_equal(kvt_open(cfg, &node), 0);
	kvt_store *a = attach_within(sock, 1000);
	unsigned char *want = malloc(len), *buf = malloc(len);
	kvt_key k = test_key(990);
	struct churn ch = { .node = node, .key = k, .want = want, .len = len };
	pthread_t th;
	int hits = 0, wrong = 0, other = 0;

	assert_non_null(want);
	assert_non_null(buf);
	fill_block(k, want, len);
	assert_int_equal(pthread_create(&th, NULL, churn_main, &ch), 0);
	for (int i = 0; i < 100; i++) {
		while (!atomic_exchange(&ch.ready, 0))
			sched_yield();
		atomic_fetch_add(&ch.asked, 1);
		int rc = kvt_get(a, k, buf, len, &got);
		if (rc == -ENOENT)
			continue;
		if (rc || got != len) {
			other++;
			continue;
		}
		hits++;
		wrong += memcmp(buf, want, len) != 0;
	}
	atomic_store(&ch.stop, 1);
	pthread_join(th, NULL);
	print_message("    %d hits, %d with wrong bytes, %d failed otherwise\n", hits,
		      wrong, other);
	assert_int_equal(wrong, 0);
	assert_int_equal(other, 0);
	kvt_close(a);
	kvt_close(node);
	free(want);
	free(buf);
}

/* A get of a block only on the node store's disk: the node store loads it
 * into a fresh slot before it answers, and with ram.pin_ms 1 that pin
 * lapses while 16 MiB are read and checked. The get still loads the block
 * (under a pin that does not lapse) instead of failing with -ECANCELED. */
static void test_attached_disk_gets_outlast_pin_ms(void **state)
{
	(void)state;
	TEST_NEED_DISK();
	char sock[256], cfg[768];
	size_t len = 16u << 20, got = 0;
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s/lapse-disk.sock", g_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false, "
		 "\"pin_ms\": 1, \"max_block\": \"16MiB\"}, \"disk\": {\"path\": "
		 "\"%s/lapse.disk\", \"capacity\": \"160MiB\", \"region_size\": \"32MiB\"}, "
		 "\"local\": {\"socket\": \"%s\", \"directory\": 0}}", g_dir, sock);
	unsigned char *buf = malloc(len);

	assert_non_null(buf);
	/* Stored, then on disk only: closing writes RAM's blocks to disk. */
	assert_int_equal(kvt_open(cfg, &node), 0);
	for (uint64_t i = 0; i < 2; i++)
		store_put_block(node, test_key(980 + i), len);
	kvt_close(node);
	assert_int_equal(kvt_open(cfg, &node), 0);
	kvt_store *a = attach_within(sock, 1000);
	for (uint64_t i = 0; i < 2; i++) {
		kvt_key k = test_key(980 + i);
		int rc = kvt_get(a, k, buf, len, &got);
		if (rc)
			fail_msg("get %u: %s: %s", (unsigned)i, kvt_strerror(rc), kvt_last_error());
		assert_int_equal(got, len);
		assert_true(check_block(k, buf, len));
	}
	kvt_close(a);
	kvt_close(node);
	free(buf);
}

static void test_get_unpins_with_next_request(void **state)
{
	(void)state;
	char sock[256], buf[64];
	kvt_store *node = open_node(", \"directory\": 0", sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	kvt_op ops[20];
	size_t len = 0, found = 0;

	for (uint64_t i = 0; i < 20; i++)
		store_put_block(a, test_key(700 + i), 64);
	kvt_key k0 = test_key(700);

	/* One get: its pin stays until the next request ends it. */
	assert_int_equal(kvt_get(a, k0, buf, sizeof(buf), &len), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 1);
	assert_int_equal(store_stat(node, "slots", "held"), 1);
	assert_int_equal(kvt_get(a, test_key(701), buf, sizeof(buf), &len), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 1);
	assert_int_equal(kvt_lookup(a, &k0, 1, 0, &found), 0);
	assert_int_equal(found, 1);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 0);
	assert_int_equal(store_stat(node, "slots", "held"), 0);

	/* Ended before the request that carries them is served: a pin and
	 * its unpin count only the pins asked for. */
	assert_int_equal(kvt_get(a, k0, buf, sizeof(buf), &len), 0);
	kvt_slot sl[2] = { { .key = test_key(702) }, { .key = test_key(703) } };
	kvt_pin_batch *pb = NULL;
	assert_int_equal(kvt_get_pin(a, sl, 2, 0, &pb), 2);
	kvt_pin_free(pb);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 2);
	assert_int_equal(kvt_unpin(a, sl, 2), 2);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 0);

	/* Sixteen wait; the next get's pin carries them, and its own waits. */
	for (uint64_t i = 0; i < 16; i++)
		ops[i] = (kvt_op){ .key = test_key(700 + i), .buf = malloc(64), .len = 64 };
	assert_int_equal(kvt_get_batch(a, ops, 16), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 16);
	assert_int_equal(kvt_get(a, test_key(719), buf, sizeof(buf), &len), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 1);
	/* A batch of more than sixteen unpins at once (no request follows). */
	for (uint64_t i = 16; i < 20; i++)
		ops[i] = (kvt_op){ .key = test_key(700 + i), .buf = malloc(64), .len = 64 };
	for (uint64_t i = 0; i < 16; i++)
		ops[i].len = 64;
	assert_int_equal(kvt_get_batch(a, ops, 20), 0);
	for (uint64_t i = 0; i < 20; i++)
		assert_int_equal(ops[i].len, 64);
	expect_stat(node, "local", "pinned_blocks", 0);
	expect_stat(node, "slots", "held", 0);

	/* Closing the store ends the pins that wait. */
	for (uint64_t i = 0; i < 20; i++)
		ops[i].len = 64;
	assert_int_equal(kvt_get_batch(a, ops, 3), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 3);
	kvt_close(a);
	expect_stat(node, "local", "pinned_blocks", 0);
	expect_stat(node, "local", "pinned_bytes", 0);
	expect_stat(node, "slots", "held", 0);

	/* So does killing the process. */
	int out = -1;
	char c = 0;
	pid_t g = spawn_child("got", NULL, sock, &out);
	struct pollfd pf = { out, POLLIN, 0 };
	if (poll(&pf, 1, CHILD_MS) != 1 || read(out, &c, 1) != 1 || c != 'R') {
		kill(g, SIGKILL);
		waitpid(g, NULL, 0);
		fail_msg("the getting child did not get ready");
	}
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), NGOT);
	assert_int_equal(kill(g, SIGKILL), 0);
	assert_int_equal(wait_child(g, CHILD_MS), 128 + SIGKILL);
	close(out);
	expect_stat(node, "local", "pinned_blocks", 0);
	expect_stat(node, "local", "pinned_bytes", 0);
	expect_stat(node, "slots", "held", 0);
	for (uint64_t i = 0; i < 20; i++) {
		assert_int_equal(store_get_block(node, test_key(700 + i), 64), 0);
		free(ops[i].buf);
	}
	kvt_close(node);
}

/* Dozens of processes' connections at once, and threads sharing one. */
#define NCLIENTS 32
#define NTHREADS 4

struct hammer {
	kvt_store *s;
	unsigned id;
	int failures;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	for (uint64_t i = 0; i < 50; i++) {
		kvt_key k = test_key(3000 + h->id * 100 + i % 10);
		char b[8192], back[8192];
		size_t len = 0, found = 0;
		fill_block(k, b, sizeof(b));
		if (kvt_put(h->s, k, b, sizeof(b)) ||
		    kvt_get(h->s, k, back, sizeof(back), &len) || len != sizeof(b) ||
		    memcmp(b, back, len) || kvt_lookup(h->s, &k, 1, KVT_LEASE, &found) ||
		    found != 1 || kvt_release(h->s, &k, 1) != 1)
			h->failures++;
	}
	return NULL;
}

static void test_dozens_of_clients(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node(", \"max_clients\": 40", sock, sizeof(sock));
	kvt_store *c[NCLIENTS];
	kvt_key keys[4];
	size_t found = 0;

	for (uint64_t i = 0; i < 4; i++) {
		keys[i] = test_key(2000 + i);
		store_put_block(node, keys[i], 4096);
	}
	for (unsigned i = 0; i < NCLIENTS; i++) {
		c[i] = attach_within(sock, 1000);
		assert_int_equal(kvt_lookup(c[i], keys, 4, KVT_LEASE, &found), 0);
		assert_int_equal(found, 4);
	}
	assert_int_equal(store_stat(node, "local", "clients"), NCLIENTS);
	assert_int_equal(store_stat(node, "local", "leased_blocks"), 4 * NCLIENTS);
	/* One process's release leaves the others' leases standing. */
	assert_int_equal(kvt_release(c[0], keys, 4), 4);
	assert_true(store_stat(node, "ram", "leased_bytes") > 0);
	for (unsigned i = 0; i < NCLIENTS; i++)
		assert_int_equal(store_get_block(c[i], keys[i % 4], 4096), 0);

	/* Threads of one process share its connection. */
	pthread_t th[NTHREADS];
	struct hammer h[NTHREADS];
	for (unsigned t = 0; t < NTHREADS; t++) {
		h[t] = (struct hammer){ .s = c[1], .id = t };
		assert_int_equal(pthread_create(&th[t], NULL, hammer_main, &h[t]), 0);
	}
	for (unsigned t = 0; t < NTHREADS; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(h[t].failures, 0);
	}
	for (unsigned i = 0; i < NCLIENTS; i++)
		kvt_close(c[i]);
	expect_stat(node, "local", "clients", 0);
	expect_stat(node, "local", "leased_blocks", 0);
	expect_stat(node, "ram", "leased_bytes", 0);
	kvt_close(node);
}

/* --- gets from the directory of RAM blocks ------------------------------------------ */

/* Gets of blocks in RAM are served from the directory without a request;
 * their hits reach the node store's statistics with the next request (or
 * alone once 64 wait); a removed or evicted block is gone from the
 * directory at once; the directory's memfd cannot be written. */
static void test_directory_gets_need_no_request(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node(", \"directory\": 4096", sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	const size_t len = 65536;
	char *b = malloc(len);
	size_t got = 0, found = 0;
	kvt_key keys[20];

	for (uint64_t i = 0; i < 20; i++) {
		keys[i] = test_key(4000 + i);
		store_put_block(a, keys[i], len);
	}
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 20);
	assert_int_equal(store_stat(node, "ram", "directory_slots"), 4096);
	long long req0 = store_stat(node, "local", "requests");
	long long hits0 = store_stat(node, "ram", "hits");
	for (unsigned r = 0; r < 3; r++)
		for (uint64_t i = 0; i < 20; i++) {
			memset(b, 0, len);
			assert_int_equal(kvt_get(a, keys[i], b, len, &got), 0);
			assert_int_equal(got, len);
			assert_true(check_block(keys[i], b, len));
		}
	/* 60 gets: no request, no pin, nothing counted yet. */
	assert_int_equal(store_stat(node, "local", "requests"), req0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 0);
	assert_int_equal(store_stat(node, "local", "directory_hits"), 0);
	assert_int_equal(kvt_get(a, keys[3], b, 100, &got), -ENOBUFS);
	assert_int_equal(got, len);
	assert_int_equal(store_stat(node, "local", "requests"), req0);
	/* The 64th hit goes to the node store alone. */
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(kvt_get(a, keys[i], b, len, &got), 0);
	expect_stat(node, "local", "directory_hits", 64);
	assert_int_equal(store_stat(node, "local", "requests"), req0 + 1);
	/* Ten more wait for the next request, which carries them. */
	for (uint64_t i = 0; i < 10; i++)
		assert_int_equal(kvt_get(a, keys[i], b, len, &got), 0);
	assert_int_equal(store_stat(node, "local", "directory_hits"), 64);
	assert_int_equal(kvt_lookup(a, keys, 1, 0, &found), 0);
	assert_int_equal(store_stat(node, "local", "requests"), req0 + 3);
	assert_int_equal(store_stat(node, "local", "directory_hits"), 74);
	assert_int_equal(store_stat(node, "ram", "hits"), hits0 + 74);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 0);

	/* A batch, from the directory too. */
	kvt_op ops[20];
	for (uint64_t i = 0; i < 20; i++)
		ops[i] = (kvt_op){ .key = keys[i], .buf = malloc(len), .len = len };
	assert_int_equal(kvt_get_batch(a, ops, 20), 0);
	for (uint64_t i = 0; i < 20; i++) {
		assert_int_equal(ops[i].len, len);
		assert_true(check_block(keys[i], ops[i].buf, len));
		free(ops[i].buf);
	}
	assert_int_equal(store_stat(node, "local", "requests"), req0 + 3);

	/* Removed by the node store: the next get misses. */
	assert_int_equal(kvt_remove(node, keys[0]), 0);
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 19);
	assert_int_equal(kvt_get(a, keys[0], b, len, &got), -ENOENT);
	/* Evicted (no disk tier: dropped) by puts of 40 MiB into 32 MiB:
	 * every block left is in the directory, every evicted one misses. */
	char *big = malloc(1u << 20);
	for (uint64_t i = 0; i < 40; i++) {
		kvt_key k = test_key(4100 + i);
		fill_block(k, big, 1u << 20);
		assert_int_equal(kvt_put(node, k, big, 1u << 20), 0);
	}
	free(big);
	assert_true(store_stat(node, "ram", "evictions") > 0);
	assert_int_equal(store_stat(node, "ram", "directory_blocks"),
			 store_stat(node, "ram", "objects"));
	unsigned misses = 0;
	for (uint64_t i = 1; i < 20; i++) {
		int rc = kvt_get(a, keys[i], b, len, &got);
		if (rc == -ENOENT) {
			misses++;
			continue;
		}
		assert_int_equal(rc, 0);
		assert_true(check_block(keys[i], b, len));
	}
	assert_true(misses > 0);

	/* The directory's memfd: read-only for a client, sealed against a
	 * writable mapping, a write and a change of size. */
	int mfd = -1, dfd = -1;
	uint64_t alen = 0, dlen = 0;
	int fd = raw_hello_dir(sock, &mfd, &alen, &dfd, &dlen);
	assert_true(dfd >= 0 && dlen > 0);
	assert_true(mmap(NULL, dlen, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0) == MAP_FAILED);
	char zero[64] = { 0 };
	assert_int_equal(pwrite(dfd, zero, sizeof(zero), 0), -1);
	assert_int_equal(ftruncate(dfd, 0), -1);
	void *ro = mmap(NULL, dlen, PROT_READ, MAP_SHARED, dfd, 0);
	assert_true(ro != MAP_FAILED);
	munmap(ro, dlen);
	close(dfd);
	close(mfd);
	close(fd);
	free(b);
	kvt_close(a);
	kvt_close(node);
}

/* A directory too small for every block (local.directory 8: one window):
 * the blocks left out are got through the node store, with the same bytes,
 * and every get is counted as a hit. */
static void test_directory_full_falls_back(void **state)
{
	(void)state;
	char sock[256], b[8192];
	kvt_store *node = open_node(", \"directory\": 8", sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	size_t got = 0, found = 0;

	for (uint64_t i = 0; i < 24; i++)
		store_put_block(a, test_key(4200 + i), sizeof(b));
	assert_int_equal(store_stat(node, "ram", "directory_slots"), 8);
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 8);
	assert_int_equal(store_stat(node, "ram", "directory_full"), 16);
	long long hits0 = store_stat(node, "ram", "hits");
	long long pins0 = store_stat(node, "slots", "pins_ram");
	for (uint64_t i = 0; i < 24; i++) {
		kvt_key k = test_key(4200 + i);
		memset(b, 0, sizeof(b));
		assert_int_equal(kvt_get(a, k, b, sizeof(b), &got), 0);
		assert_int_equal(got, sizeof(b));
		assert_true(check_block(k, b, got));
	}
	kvt_key k0 = test_key(4200);
	assert_int_equal(kvt_lookup(a, &k0, 1, 0, &found), 0);
	assert_int_equal(store_stat(node, "local", "directory_hits"), 8);
	assert_int_equal(store_stat(node, "slots", "pins_ram"), pins0 + 16);
	assert_int_equal(store_stat(node, "ram", "hits"), hits0 + 24);
	/* Room again after removals: later blocks are published. */
	for (uint64_t i = 0; i < 24; i++)
		kvt_remove(a, test_key(4200 + i));
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 0);
	store_put_block(a, test_key(4300), sizeof(b));
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 1);
	kvt_close(a);
	kvt_close(node);
}

/*
 * A block removed, evicted or replaced while an attached process reads it
 * is never returned with wrong bytes. Writers on the node store (its own
 * calls) remove and put again keys whose bytes differ at every put (a
 * header of key and generation, then bytes drawn from both; the length
 * varies with the generation) into a small arena, so extents are reused
 * all the time and eviction runs; readers of an attached store check every
 * byte of every block they get. Misses are fine, a wrong byte fails.
 */
#define ST_KEYS 96
#define ST_WRITERS 2
#define ST_READERS 2
#define ST_MS 1500
#define ST_MAX (200u * 1024)

static size_t st_len(uint64_t gen)
{
	return 16384 + (size_t)(gen % 12) * 16384;
}

static uint64_t st_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void st_fill(kvt_key k, uint64_t gen, unsigned char *b, size_t len)
{
	uint64_t x = (k.lo ^ (gen * 0x9e3779b97f4a7c15ull)) | 1;
	memcpy(b, &k, 16);
	memcpy(b + 16, &gen, 8);
	for (size_t i = 24; i + 8 <= len; i += 8) {
		uint64_t v = st_next(&x);
		memcpy(b + i, &v, 8);
	}
}

/* 1 when b is a whole block of key k (of some generation). */
static int st_check(kvt_key k, const unsigned char *b, size_t len)
{
	kvt_key h;
	uint64_t gen, x;
	if (len < 24)
		return 0;
	memcpy(&h, b, 16);
	memcpy(&gen, b + 16, 8);
	if (h.lo != k.lo || h.hi != k.hi || len != st_len(gen))
		return 0;
	x = (k.lo ^ (gen * 0x9e3779b97f4a7c15ull)) | 1;
	for (size_t i = 24; i + 8 <= len; i += 8) {
		uint64_t v = st_next(&x), w;
		memcpy(&w, b + i, 8);
		if (v != w)
			return 0;
	}
	return 1;
}

struct st_arg {
	kvt_store *s;
	unsigned id;
	_Atomic int *stop;
	unsigned long ops, hits, misses, wrong;
};

static void *st_writer(void *p)
{
	struct st_arg *a = p;
	unsigned char *b = malloc(ST_MAX);
	uint64_t gen = a->id, x = 0x5eed + a->id;
	while (!atomic_load(a->stop)) {
		/* Each writer owns the keys of its residue. */
		uint64_t i = st_next(&x) % (ST_KEYS / ST_WRITERS) * ST_WRITERS + a->id;
		kvt_key k = test_key(5000 + i);
		gen += ST_WRITERS;
		size_t len = st_len(gen);
		st_fill(k, gen, b, len);
		kvt_remove(a->s, k);
		int rc = kvt_put(a->s, k, b, len);
		if (rc && rc != -ENOSPC)
			a->wrong++;
		a->ops++;
	}
	free(b);
	return NULL;
}

static void *st_reader(void *p)
{
	struct st_arg *a = p;
	unsigned char *b = malloc(ST_MAX);
	uint64_t x = 0xfeed + a->id;
	while (!atomic_load(a->stop)) {
		kvt_key k = test_key(5000 + st_next(&x) % ST_KEYS);
		size_t len = 0;
		memset(b, 0xee, 64);
		int rc = kvt_get(a->s, k, b, ST_MAX, &len);
		if (rc == 0 && st_check(k, b, len))
			a->hits++;
		else if (rc == -ENOENT)
			a->misses++;
		else
			a->wrong++;
		a->ops++;
	}
	free(b);
	return NULL;
}

static void test_directory_reads_never_wrong_bytes(void **state)
{
	(void)state;
	char sock[256], cfg[512];
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s/stress.sock", g_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"8MiB\", \"max_block\": \"256KiB\","
		 " \"mlock\": false}, \"local\": {\"socket\": \"%s\"}}", sock);
	assert_int_equal(kvt_open(cfg, &node), 0);
	kvt_store *a = attach_within(sock, 1000);
	pthread_t th[ST_WRITERS + ST_READERS];
	struct st_arg arg[ST_WRITERS + ST_READERS];
	_Atomic int stop = 0;

	for (unsigned i = 0; i < ST_WRITERS + ST_READERS; i++) {
		arg[i] = (struct st_arg){ .s = i < ST_WRITERS ? node : a,
					  .id = i < ST_WRITERS ? i : i - ST_WRITERS,
					  .stop = &stop };
		assert_int_equal(pthread_create(&th[i], NULL, i < ST_WRITERS ? st_writer : st_reader,
						&arg[i]), 0);
	}
	usleep(ST_MS * 1000);
	atomic_store(&stop, 1);
	unsigned long hits = 0, misses = 0, wrong = 0, writes = 0;
	for (unsigned i = 0; i < ST_WRITERS + ST_READERS; i++) {
		pthread_join(th[i], NULL);
		if (i < ST_WRITERS)
			writes += arg[i].ops;
		else
			hits += arg[i].hits, misses += arg[i].misses;
		wrong += arg[i].wrong;
	}
	size_t found = 0;
	kvt_key k = test_key(5000);
	assert_int_equal(kvt_lookup(a, &k, 1, 0, &found), 0); /* carries the last hits */
	long long dhits = store_stat(node, "local", "directory_hits");
	print_message("    %lu puts, %lu gets: %lu hits (%lld from the directory), %lu misses; "
		      "%lld evictions\n", writes, hits + misses, hits, dhits, misses,
		      store_stat(node, "ram", "evictions"));
	assert_int_equal(wrong, 0);
	assert_true(hits > 0 && dhits > 0);
	assert_true(store_stat(node, "ram", "evictions") > 0);
	kvt_close(a);
	kvt_close(node);
}

/* When the node store is killed, an attached process still serves gets of
 * RAM blocks from its own mappings of the arena and the directory (the
 * bytes are still the blocks') until it next talks to the node store: at
 * the latest when 64 such hits wait to be told. From then on every call
 * fails with -ENOTCONN. */
static void test_directory_after_the_node_store_is_killed(void **state)
{
	(void)state;
	char bin[PATH_MAX + 32], sock[256], cfg[512], buf[8192];
	char *dir = make_temp_dir("local");
	size_t found = 0, len = 0;
	unsigned served = 0;
	int out = -1, rc = 0;

	snprintf(sock, sizeof(sock), "%s/kv.sock", dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false}, "
		 "\"local\": {\"socket\": \"%s\"}}", sock);
	pid_t d = start_kvtierd(dir, cfg, bin, sizeof(bin), &out);
	kvt_store *a = attach_within(sock, START_MS);
	for (uint64_t i = 0; i < 4; i++)
		store_put_block(a, test_key(6000 + i), sizeof(buf));
	kvt_key k0 = test_key(6000);
	assert_int_equal(kvt_lookup(a, &k0, 1, 0, &found), 0); /* no hit waits */
	assert_int_equal(kill(d, SIGKILL), 0);
	assert_int_equal(wait_child(d, START_MS), 128 + SIGKILL);
	for (unsigned n = 0; n < 200; n++) {
		kvt_key k = test_key(6000 + n % 4);
		memset(buf, 0, sizeof(buf));
		rc = kvt_get(a, k, buf, sizeof(buf), &len);
		if (rc)
			break;
		assert_int_equal(len, sizeof(buf));
		assert_true(check_block(k, buf, len));
		served++;
	}
	assert_int_equal(rc, -ENOTCONN);
	assert_int_equal(served, 64);
	assert_int_equal(kvt_get(a, k0, buf, sizeof(buf), &len), -ENOTCONN);
	assert_int_equal(kvt_lookup(a, &k0, 1, 0, &found), -ENOTCONN);
	kvt_close(a);
	close(out);
	rm_rf(dir);
	free(dir);
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

static int group_setup(void **state)
{
	(void)state;
	g_dir = make_temp_dir("local");
	return g_dir ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	rm_rf(g_dir);
	free(g_dir);
	return 0;
}

/* The server's own options: one without a socket path is refused, and
 * one that names a path serves it with the options given (mode). */
static void test_server_options(void **state)
{
	(void)state;
	char path[512], cfg[700];
	kvt_store *s = NULL;
	struct local_server *srv = (struct local_server *)&path;
	struct stat st;

	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"8MiB\", \"mlock\": false},"
		 " \"local\": {\"socket\": \"%s/opts-a.sock\"}}", g_dir);
	assert_int_equal(kvt_open(cfg, &s), 0);
	struct local_opts o = { .mode = 0600, .max_clients = 4, .max_held = 64,
				.max_block = 1 << 20, .lease_ms = 1000, .pin_ms = 1000 };
	assert_int_equal(local_server_open(&o, s, 3, &srv), -EINVAL);
	assert_null(srv);
	assert_non_null(strstr(kvt_last_error(), "local.socket"));
	assert_int_equal(local_server_open(NULL, s, 3, &srv), -EINVAL);
	assert_null(srv);

	void *base;
	size_t len;
	int fd = memfd_create("test-local-opts", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(kvt_arena(s, &base, &len), 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	snprintf(path, sizeof(path), "%s/opts-b.sock", g_dir);
	o.socket = path;
	assert_int_equal(local_server_open(&o, s, fd, &srv), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	local_server_close(srv);
	assert_int_equal(stat(path, &st), -1);
	close(fd);
	kvt_close(s);
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
		cmocka_unit_test(test_kvtierd_three_processes),
		cmocka_unit_test(test_malformed_frame_closes_that_client_only),
		cmocka_unit_test(test_commit_checks_the_checksum),
		cmocka_unit_test(test_stuck_client_and_max_clients),
		cmocka_unit_test(test_other_users_refused),
		cmocka_unit_test(test_attach_to_a_silent_socket_times_out),
		cmocka_unit_test(test_silent_connections_dropped),
		cmocka_unit_test(test_counts_past_the_keys_are_refused),
		cmocka_unit_test(test_unanswered_request_times_out),
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_spin_setting),
		cmocka_unit_test(test_attached_calls),
		cmocka_unit_test(test_get_unpins_with_next_request),
		cmocka_unit_test(test_attached_puts_outlast_pin_ms),
		cmocka_unit_test(test_attached_gets_outlast_pin_ms),
		cmocka_unit_test(test_attached_disk_gets_outlast_pin_ms),
		cmocka_unit_test(test_dozens_of_clients),
		cmocka_unit_test(test_server_options),
		cmocka_unit_test(test_directory_gets_need_no_request),
		cmocka_unit_test(test_directory_full_falls_back),
		cmocka_unit_test(test_directory_reads_never_wrong_bytes),
		cmocka_unit_test(test_directory_after_the_node_store_is_killed),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
