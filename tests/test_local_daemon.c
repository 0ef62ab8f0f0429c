/*
 * test_local_daemon.c - the node store as a daemon: kvtierd serving
 * local.socket and processes attached to it with
 * kvt_open("{\"attach\": PATH}"). The attached processes are this test
 * binary run again with "--child ROLE SOCKET" (see local_util.h): one puts
 * blocks three ways (kvt_put, kvt_put_batch, reserve/commit in place), one
 * finds them (a lookup with lease) and loads every one with its bytes
 * verified (get, get_batch, pins read in place), and one holds pins,
 * reservations and leases until it is killed with SIGKILL. The example
 * examples/node_local (a scheduler and two workers) runs against the same
 * kvtierd. A process of another user is refused by the socket's mode and by
 * local.uids; the local section of the configuration and the server's own
 * options are checked. Every wait is bounded.
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

static void check_all_readable(kvt_store *s)
{
	for (uint64_t i = 0; i < NBLK; i++)
		if (store_get_block(s, test_key(i), blk_len(i)))
			fail_msg("block %llu unreadable or wrong", (unsigned long long)i);
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
		cmocka_unit_test(test_other_users_refused),
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_server_options),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
