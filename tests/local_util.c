/* local_util.c - see local_util.h. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvtier.h"
#include "local_util.h"
#include "util.h"

long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

size_t blk_len(uint64_t i)
{
	return (size_t)(64 * 1024 + (i % 5) * 4096 + (i % 3) * 100);
}

char self_exe[PATH_MAX];

static int child_fail(const char *role, const char *what, int rc)
{
	fprintf(stderr, "child %s: %s: %s: %s\n", role, what, kvt_strerror(rc), kvt_last_error());
	return 1;
}

int attach(const char *sock, kvt_store **s)
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

int child_main(int argc, char **argv)
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

pid_t spawn_child(const char *role, const char *arg, const char *sock, int *out_fd)
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

int wait_child(pid_t pid, int ms)
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

kvt_store *attach_within(const char *sock, int ms)
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

void expect_stat(kvt_store *s, const char *tier, const char *name, long long want)
{
	long long end = now_ms() + AT_ONCE_MS, v;
	while ((v = store_stat(s, tier, name)) != want) {
		if (now_ms() > end)
			fail_msg("%s.%s is %lld, expected %lld", tier, name, v, want);
		usleep(2000);
	}
}

pid_t start_kvtierd(const char *dir, const char *cfg, char *bin, size_t cap,
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

char *g_dir;

kvt_store *open_node_ram(const char *ram_extra, const char *extra, char *sock,
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

kvt_store *open_node(const char *extra, char *sock, size_t cap)
{
	return open_node_ram(NULL, extra, sock, cap);
}

/* local.spin_us as the last raw HELLO answer gave it. */
uint32_t g_hello_spin;

int raw_hello_dir(const char *sock, int *mfd, uint64_t *arena_len, int *dfd,
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

int group_setup(void **state)
{
	(void)state;
	g_dir = make_temp_dir("local");
	return g_dir ? 0 : -1;
}

int group_teardown(void **state)
{
	(void)state;
	rm_rf(g_dir);
	free(g_dir);
	return 0;
}
