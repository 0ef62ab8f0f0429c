/*
 * test_kvtierd.c - the kvtierd storage daemon (examples/kvtierd.c) as a
 * separate process: it serves blocks that a store in this process puts to
 * it, hands them back byte for byte after that store restarts empty, prints
 * its statistics on SIGUSR1, shrugs off SIGHUP, exits 0 on SIGTERM having
 * written its disk checkpoint; and it refuses bad command lines and bad
 * configurations with status 2 or 1 and a message.
 *
 * The binary is build/<x>/examples/kvtierd next to this test's
 * build/<x>/tests/ (else $BUILD/examples/kvtierd). Every wait is bounded:
 * a daemon that does not answer in time is killed with SIGKILL and the
 * test fails with its standard error.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvtier.h"
#include "util.h"

#define MiB (1024u * 1024u)

#define START_MS 30000 /* daemon start-up, generous for TSan */
#define LINE_MS 10000  /* a stats line after SIGUSR1 */
#define EXIT_MS 5000   /* exit after SIGTERM */
#define USAGE_MS 10000 /* a refused start */

#define NBLK 24 /* blocks put to the daemon */

static struct {
	char *dir;
	char bin[PATH_MAX + 32];
	pid_t pid;      /* the daemon while it runs, else 0 */
	int out;        /* read end of its stdout, or -1 */
	char buf[1 << 16]; /* its stdout read but not yet taken as lines */
	size_t len;
} g = { .out = -1 };

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

static int free_port(void)
{
	return test_free_port();
}

static int listen_on(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4))
		fail_msg("listen on 127.0.0.1:%d: %s", port, strerror(errno));
	return fd;
}

/* The owner of k among {"a", "d"} as lib/peer.h defines it: 0 a, 1 d. */
/* n keys that `owner` owns, from test_key(from) on. */
static void owned_keys(unsigned owner, uint64_t from, kvt_key *out, size_t n)
{
	static const char *const names[] = { "a", "d" };
	test_owned_keys(names, 2, owner, from, out, n);
}

static size_t size_of(size_t i)
{
	return 1000 + i * 40009; /* 1000 bytes to about 0.9 MiB */
}

static char *path_in(const char *name)
{
	static char p[4][PATH_MAX];
	static int next;
	char *r = p[next++ % 4];
	snprintf(r, PATH_MAX, "%s/%s", g.dir, name);
	return r;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* The last part of a file (the daemon's stderr) for failure messages. */
static const char *tail_of(const char *path)
{
	static char text[4096];
	size_t n = 0;
	FILE *f = fopen(path, "r");
	text[0] = '\0';
	if (!f)
		return "(none)";
	if (fseek(f, 0, SEEK_END) == 0 && ftell(f) > (long)sizeof(text) - 1)
		fseek(f, -(long)sizeof(text) + 1, SEEK_END);
	else
		fseek(f, 0, SEEK_SET);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

/* 1 if the line of text that holds needle starts "YYYY-MM-DDTHH:MM:SS.mmmZ ". */
static int stamped(const char *text, const char *needle)
{
	const char *at = strstr(text, needle), *p;
	if (!at)
		return 0;
	for (p = at; p > text && p[-1] != '\n'; p--)
		;
	for (int i = 0; i < 24; i++) {
		const char *shape = "dddd-dd-ddTdd:dd:dd.dddZ";
		if (shape[i] == 'd' ? (p[i] < '0' || p[i] > '9') : p[i] != shape[i])
			return 0;
	}
	return p[24] == ' ';
}

/* --- processes ------------------------------------------------------------- */

static int setup(void **state)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *build = getenv("BUILD");
	(void)state;

	g.bin[0] = '\0';
	if (n > 0) { /* .../tests/test_kvtierd -> .../examples/kvtierd */
		char *slash;
		exe[n] = '\0';
		if ((slash = strrchr(exe, '/')))
			*slash = '\0';
		if ((slash = strrchr(exe, '/'))) {
			*slash = '\0';
			snprintf(g.bin, sizeof(g.bin), "%s/examples/kvtierd", exe);
		}
	}
	if ((!g.bin[0] || access(g.bin, X_OK)) && build)
		snprintf(g.bin, sizeof(g.bin), "%s/examples/kvtierd", build);
	if (access(g.bin, X_OK)) {
		fprintf(stderr, "kvtierd not found (tried %s): build it with make\n", g.bin);
		return -1;
	}
	g.dir = make_temp_dir("kvtierd");
	return g.dir ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rm_rf(g.dir);
	free(g.dir);
	return 0;
}

/*
 * Starts kvtierd with args (NULL-terminated). Standard input gets in_text
 * (NULL: /dev/null); standard output and error go to out_fd and err_fd.
 */
static pid_t spawn(const char *const *args, const char *in_text, int out_fd, int err_fd)
{
	char *argv[16];
	int in[2] = { -1, -1 };
	size_t n = 0;
	argv[n++] = g.bin;
	while (args && *args && n < 15)
		argv[n++] = (char *)*args++;
	argv[n] = NULL;
	if (in_text)
		assert_int_equal(pipe2(in, O_CLOEXEC), 0);
	else
		assert_true((in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (dup2(in[0], 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	close(in[0]);
	if (in_text) { /* small: fits the pipe, so this cannot block */
		assert_int_equal(write(in[1], in_text, strlen(in_text)), (ssize_t)strlen(in_text));
		close(in[1]);
	}
	return pid;
}

/* Waits up to ms for pid to exit; SIGKILLs it and fails past that. */
static int wait_exit(pid_t pid, int ms, const char *what, const char *err_path)
{
	long long end = now_ms() + ms;
	int st;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		if (r < 0 && errno != EINTR)
			fail_msg("waitpid: %s", strerror(errno));
		if (now_ms() > end) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			if (pid == g.pid)
				g.pid = 0;
			fail_msg("%s: kvtierd still running after %d ms (killed); stderr:\n%s",
				 what, ms, tail_of(err_path));
		}
		usleep(10000);
	}
}

/* Kills a daemon a failed test left running. */
static void reap_daemon(void)
{
	if (g.pid > 0) {
		int st;
		kill(g.pid, SIGKILL);
		while (waitpid(g.pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	g.pid = 0;
	if (g.out >= 0)
		close(g.out);
	g.out = -1;
	g.len = 0;
}

/*
 * The daemon's next line of standard output, within ms: 0, -ETIMEDOUT, or
 * -EPIPE at end of file.
 */
static int read_line(char *line, size_t cap, int ms)
{
	long long end = now_ms() + ms;
	for (;;) {
		char *nl = memchr(g.buf, '\n', g.len);
		if (nl || g.len == sizeof(g.buf)) {
			size_t n = nl ? (size_t)(nl - g.buf) : g.len;
			size_t take = n < cap - 1 ? n : cap - 1;
			memcpy(line, g.buf, take);
			line[take] = '\0';
			n += nl != NULL;
			memmove(g.buf, g.buf + n, g.len - n);
			g.len -= n;
			return 0;
		}
		long long left = end - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = g.out, .events = POLLIN };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		ssize_t got = read(g.out, g.buf + g.len, sizeof(g.buf) - g.len);
		if (got == 0)
			return -EPIPE;
		if (got < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		if (got > 0)
			g.len += (size_t)got;
	}
}

/* Signals the daemon and returns the next stats line (a JSON object). */
static json_t *stats_after_usr1(const char *err_path)
{
	static char line[1 << 16];
	json_error_t e;
	assert_int_equal(kill(g.pid, SIGUSR1), 0);
	int r = read_line(line, sizeof(line), LINE_MS);
	if (r)
		fail_msg("no stats line after SIGUSR1: %s; stderr:\n%s", strerror(-r),
			 tail_of(err_path));
	json_t *j = json_loads(line, 0, &e);
	if (!json_is_object(j))
		fail_msg("stats line is not a JSON object: %s (%s)", line, e.text);
	return j;
}

static long long stat_of(json_t *j, const char *tier, const char *name)
{
	json_t *v = json_object_get(json_object_get(j, tier), name);
	if (!json_is_integer(v))
		fail_msg("no integer %s.%s in the stats line", tier, name);
	return json_integer_value(v);
}

/* --- the store in this process ---------------------------------------------- */

#define TIMEOUTS "\"connect_timeout_ms\": 2000, \"request_timeout_ms\": 10000, \"down_ms\": 200"

static void members(char *out, size_t cap, int pa, int pd)
{
	snprintf(out, cap, "\"members\": [{\"name\": \"a\", \"addr\": \"127.0.0.1:%d\"},"
		 " {\"name\": \"d\", \"addr\": \"127.0.0.1:%d\"}]", pa, pd);
}

static kvt_store *open_a(int pa, int pd)
{
	char cfg[1024], m[256];
	kvt_store *s = NULL;
	members(m, sizeof(m), pa, pd);
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"32MiB\", \"max_block\": \"2MiB\", \"mlock\": false},"
		 " \"peers\": {\"self\": \"a\", \"listen\": \"127.0.0.1:%d\", %s, " TIMEOUTS "}}",
		 pa, m);
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open a: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

/* The daemon's disk section: write-through, so every block it takes is on disk. */
static void disk_section(char *out, size_t cap)
{
	snprintf(out, cap, "\"disk\": {\"path\": \"%s/d.dat\", \"capacity\": \"64MiB\","
		 " \"region_size\": \"4MiB\", \"queue_depth\": 8,"
		 " \"write_policy\": \"write_through\"}", g.dir);
}

/*
 * Writes the daemon's configuration to path: member d with the disk
 * section, member a, on two free ports (*pa, *pd). No peers.listen: the
 * daemon listens on, and names, d's member address.
 */
static void daemon_config(const char *path, int *pa, int *pd)
{
	char cfg[2048], m[256], disk[512];

	*pa = free_port();
	do
		*pd = free_port();
	while (*pd == *pa);
	members(m, sizeof(m), *pa, *pd);
	disk_section(disk, sizeof(disk));
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"32MiB\", \"max_block\": \"2MiB\", \"mlock\": false},"
		 " %s, \"peers\": {\"self\": \"d\", %s, " TIMEOUTS "}}", disk, m);
	write_file(path, cfg);
}

static char logged[8192]; /* written under the library's log lock */
static size_t nlogged;

static void capture_log(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	nlogged += (size_t)snprintf(logged + nlogged, sizeof(logged) - nlogged, "%s\n", msg);
	if (nlogged >= sizeof(logged))
		nlogged = sizeof(logged) - 1;
}

/* --- tests ---------------------------------------------------------------- */

static void test_serves_blocks_and_checkpoints(void **state)
{
	char cfg[2048], disk[512], line[512], want[128];
	const char *cfg_path = path_in("d.json"), *err_path = path_in("d.err");
	kvt_key kd[NBLK], ka[2];
	kvt_op ops[NBLK];
	int out[2], pa, pd, st;
	(void)state;
	TEST_NEED_DISK();

	daemon_config(cfg_path, &pa, &pd);
	disk_section(disk, sizeof(disk));

	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(err >= 0);
	const char *args[] = { "--config", cfg_path, "--log-level", "info", NULL };
	g.pid = spawn(args, NULL, out[1], err);
	close(out[1]);
	close(err);
	g.out = out[0];

	int r = read_line(line, sizeof(line), START_MS);
	if (r)
		fail_msg("no line from kvtierd within %d ms (%s); stderr:\n%s", START_MS,
			 strerror(-r), tail_of(err_path));
	snprintf(want, sizeof(want), "kvtierd: serving as d on 127.0.0.1:%d", pd);
	if (strcmp(line, want))
		fail_msg("first line \"%s\", expected \"%s\"", line, want);

	/* Blocks d owns, put from a: half one by one, half in one batch. */
	owned_keys(1, 1000, kd, NBLK);
	owned_keys(0, 1000, ka, 2);
	kvt_store *a = open_a(pa, pd);
	for (size_t i = 0; i < NBLK / 2; i++)
		store_put_block(a, kd[i], size_of(i));
	for (size_t i = NBLK / 2; i < NBLK; i++) {
		ops[i] = (kvt_op){ .key = kd[i], .len = size_of(i) };
		assert_non_null(ops[i].buf = malloc(ops[i].len));
		fill_block(kd[i], ops[i].buf, ops[i].len);
	}
	assert_int_equal(kvt_put_batch(a, ops + NBLK / 2, NBLK - NBLK / 2), 0);
	for (size_t i = NBLK / 2; i < NBLK; i++) {
		assert_int_equal(ops[i].result, 0);
		free(ops[i].buf);
	}
	store_put_block(a, ka[0], 5000); /* a's own: stays on a */
	long long sent = store_stat(a, "store", "peer_puts");
	if (sent != NBLK)
		fail_msg("%lld of %d blocks reached kvtierd (%lld failures); its stderr:\n%s",
			 sent, NBLK, store_stat(a, "store", "peer_put_failures"), tail_of(err_path));

	/* a restarts with an empty RAM tier: every block comes back from d. */
	kvt_close(a);
	a = open_a(pa, pd);
	assert_int_equal(store_stat(a, "ram", "objects"), 0);
	for (size_t i = 0; i < NBLK / 2; i++) {
		int rc = store_get_block(a, kd[i], size_of(i)); /* checks every byte */
		if (rc)
			fail_msg("get of block %zu from kvtierd: %s; its stderr:\n%s", i,
				 kvt_strerror(rc), tail_of(err_path));
	}
	for (size_t i = NBLK / 2; i < NBLK; i++) {
		ops[i] = (kvt_op){ .key = kd[i], .len = size_of(i) + 100, .result = 1 };
		assert_non_null(ops[i].buf = malloc(ops[i].len));
	}
	assert_int_equal(kvt_get_batch(a, ops + NBLK / 2, NBLK - NBLK / 2), 0);
	for (size_t i = NBLK / 2; i < NBLK; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, size_of(i));
		assert_true(check_block(kd[i], ops[i].buf, size_of(i)));
		free(ops[i].buf);
	}
	assert_int_equal(store_stat(a, "store", "hits_peer"), NBLK);
	assert_int_equal(store_get_block(a, ka[0], 5000), -ENOENT); /* only a had it */
	kvt_close(a);

	/* SIGUSR1: one stats line with what d holds and served. */
	json_t *j = stats_after_usr1(err_path);
	assert_int_equal(stat_of(j, "ram", "objects"), NBLK);
	assert_int_equal(stat_of(j, "disk", "objects"), NBLK);
	assert_int_equal(stat_of(j, "peer", "served_puts"), NBLK);
	assert_true(stat_of(j, "peer", "served_gets") >= NBLK);
	json_decref(j);

	/* SIGHUP is logged and ignored: d still answers. */
	assert_int_equal(kill(g.pid, SIGHUP), 0);
	j = stats_after_usr1(err_path);
	json_decref(j);

	/* SIGTERM: a clean exit, status 0, within EXIT_MS. */
	assert_int_equal(kill(g.pid, SIGTERM), 0);
	st = wait_exit(g.pid, EXIT_MS, "SIGTERM", err_path);
	g.pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("kvtierd after SIGTERM: %s %d; stderr:\n%s",
			 WIFEXITED(st) ? "exit status" : "killed by signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), tail_of(err_path));
	assert_int_equal(read_line(line, sizeof(line), LINE_MS), -EPIPE);
	const char *err_text = tail_of(err_path);
	if (!strstr(err_text, "SIGHUP ignored") || !strstr(err_text, "SIGTERM"))
		fail_msg("stderr does not log SIGHUP and SIGTERM:\n%s", err_text);
	if (!stamped(err_text, "SIGHUP ignored"))
		fail_msg("stderr lines have no timestamp:\n%s", err_text);
	close(g.out);
	g.out = -1;

	/* Its clean close wrote the disk checkpoint: reopen the tier here. */
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"32MiB\", \"max_block\": \"2MiB\","
		 " \"mlock\": false}, %s}", disk);
	kvt_store *d = NULL;
	nlogged = 0;
	logged[0] = '\0';
	kvt_set_log(capture_log, NULL, KVT_LOG_INFO);
	int rc = kvt_open(cfg, &d);
	kvt_set_log(NULL, NULL, 0);
	if (rc)
		fail_msg("reopening kvtierd's disk tier: %s: %s", kvt_strerror(rc), kvt_last_error());
	if (!strstr(logged, "from the checkpoint"))
		fail_msg("the disk tier was not recovered from a checkpoint:\n%s", logged);
	assert_int_equal(store_stat(d, "disk", "objects"), NBLK);
	for (size_t i = 0; i < NBLK; i++)
		assert_int_equal(store_get_block(d, kd[i], size_of(i)), 0);
	assert_int_equal(store_stat(d, "store", "hits_disk"), NBLK);
	kvt_close(d);
}

static void test_refuses_bad_usage(void **state)
{
	static const struct {
		const char *args[6];
		const char *in;     /* standard input */
		const char *config; /* written to @CFG; @PORT: a port already taken */
		int status;
		const char *needle; /* in stderr (stdout for status 0) */
	} cases[] = {
		{ { NULL }, NULL, NULL, 2, "--config" },
		{ { "--config", NULL }, NULL, NULL, 2,
		  "kvtierd: option '--config' requires an argument" },
		{ { "--bogus", NULL }, NULL, NULL, 2, "kvtierd: unrecognized option '--bogus'" },
		{ { "--config", "@DIR", NULL }, NULL, NULL, 1, "Is a directory" },
		{ { "--config", "-", NULL }, "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false}}",
		  NULL, 2, "peers" },
		{ { "--config", "@CFG", NULL }, NULL, "{\"ram\": {\"capacity\": \"16MiB\"},\n",
		  1, "malformed JSON at line" },
		{ { "--config", "@CFG", NULL }, NULL, "[1, 2]", 1, "not a JSON object" },
		{ { "--config", "@DIR/missing.json", NULL }, NULL, NULL, 1, "missing.json" },
		{ { "--config", "@CFG", "--stats", "soon", NULL }, NULL, "{}", 2, "--stats" },
		{ { "--config", "@CFG", "--stats", "-1", NULL }, NULL, "{}", 2, "--stats" },
		{ { "--config", "@CFG", "--log-level", "loud", NULL }, NULL, "{}", 2, "--log-level" },
		{ { "--config", "@CFG", "--busy-wait", "-5", NULL }, NULL, "{}", 2, "--busy-wait" },
		{ { "--config", "@CFG", "extra", NULL }, NULL, "{}", 2, "extra" },
		{ { "--config", "@CFG", NULL }, NULL,
		  "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false}, \"peers\": {\"self\": \"d\","
		  " \"members\": [{\"name\": \"d\", \"addr\": \"127.0.0.1:1\"}], \"colour\": 1}}",
		  1, "peers.colour" },
		{ { "--config", "@CFG", NULL }, NULL,
		  "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false}, \"peers\": {\"self\": \"d\","
		  " \"members\": [{\"name\": \"d\", \"addr\": \"127.0.0.1:@PORT\"}]}}",
		  1, "cannot open the store" },
		{ { "--help", NULL }, NULL, NULL, 0, "usage: kvtierd --config FILE" },
		{ { "--version", NULL }, NULL, NULL, 0, "libkvtier" },
	};
	const char *out_path = path_in("out.txt"), *err_path = path_in("err.txt");
	const char *cfg_path = path_in("bad.json");
	char missing[PATH_MAX], port[16], text[1024];
	int taken = free_port(), lfd = listen_on(taken);
	(void)state;

	snprintf(missing, sizeof(missing), "%s/missing.json", g.dir);
	snprintf(port, sizeof(port), "%d", taken);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const char *args[6] = { NULL };
		for (int i = 0; i < 6 && cases[c].args[i]; i++) {
			const char *a = cases[c].args[i];
			args[i] = !strcmp(a, "@CFG") ? cfg_path :
				  !strcmp(a, "@DIR/missing.json") ? missing :
				  !strcmp(a, "@DIR") ? g.dir : a;
		}
		if (cases[c].config) {
			const char *at = strstr(cases[c].config, "@PORT");
			if (at)
				snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - cases[c].config),
					 cases[c].config, port, at + 5);
			else
				snprintf(text, sizeof(text), "%s", cases[c].config);
			write_file(cfg_path, text);
		}
		int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		assert_true(o >= 0 && e >= 0);
		pid_t pid = spawn(args, cases[c].in, o, e);
		close(o);
		close(e);
		int st = wait_exit(pid, USAGE_MS, args[0] ? args[0] : "(no arguments)", err_path);
		char out_text[4096], err_text[4096];
		snprintf(out_text, sizeof(out_text), "%s", tail_of(out_path));
		snprintf(err_text, sizeof(err_text), "%s", tail_of(err_path));
		if (!WIFEXITED(st) || WEXITSTATUS(st) != cases[c].status)
			fail_msg("case %zu (%s %s): status %#x, expected exit %d; stderr:\n%s",
				 c, args[0] ? args[0] : "", args[1] ? args[1] : "", st,
				 cases[c].status, err_text);
		const char *where = cases[c].status ? err_text : out_text;
		if (!strstr(where, cases[c].needle))
			fail_msg("case %zu (%s %s): \"%s\" not in its %s:\n%s", c,
				 args[0] ? args[0] : "", args[1] ? args[1] : "", cases[c].needle,
				 cases[c].status ? "stderr" : "stdout", where);
		if (cases[c].status && out_text[0])
			fail_msg("case %zu: a refused start wrote to stdout: %s", c, out_text);
		if (strstr(cases[c].needle, "cannot open") && !strstr(err_text, port))
			fail_msg("case %zu: the message does not name port %s:\n%s", c, port,
				 err_text);
	}
	close(lfd);
}

/*
 * SIGHUP and SIGUSR1 while kvtierd still reads its configuration (from a
 * pipe that has not delivered it yet) neither kill it nor are lost on it:
 * it starts once the configuration comes, and then SIGUSR1 prints the
 * statistics and SIGTERM stops it with status 0.
 */
static void test_signals_while_reading_the_config(void **state)
{
	(void)state;
	const char *out_path = path_in("sig.out"), *err_path = path_in("sig.err");
	char cfg[512];
	int in[2];
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false}, "
		 "\"local\": {\"socket\": \"%s/sig.sock\"}}", g.dir);
	int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(o >= 0 && e >= 0);
	assert_int_equal(pipe2(in, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (dup2(in[0], 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		execl(g.bin, g.bin, "--config", "-", (char *)NULL);
		_exit(127);
	}
	g.pid = pid;
	close(in[0]);
	close(o);
	close(e);
	usleep(300000); /* it waits for its configuration now */
	assert_int_equal(kill(pid, SIGHUP), 0);
	assert_int_equal(kill(pid, SIGUSR1), 0);
	usleep(100000);
	int st;
	if (waitpid(pid, &st, WNOHANG) == pid) {
		g.pid = 0;
		fail_msg("kvtierd ended by a signal while reading its configuration: %#x", st);
	}
	assert_int_equal(write(in[1], cfg, strlen(cfg)), (ssize_t)strlen(cfg));
	close(in[1]);
	long long end = now_ms() + START_MS;
	while (!strstr(tail_of(out_path), "serving local processes")) {
		if (now_ms() > end)
			fail_msg("kvtierd did not start; stderr:\n%s", tail_of(err_path));
		usleep(10000);
	}
	assert_int_equal(kill(pid, SIGUSR1), 0);
	end = now_ms() + LINE_MS;
	while (!strstr(tail_of(out_path), "\"malformed_frames\"")) {
		if (now_ms() > end)
			fail_msg("no statistics after SIGUSR1; stdout:\n%s", tail_of(out_path));
		usleep(10000);
	}
	assert_int_equal(kill(pid, SIGTERM), 0);
	st = wait_exit(pid, EXIT_MS, "SIGTERM", err_path);
	g.pid = 0;
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/*
 * A restart that overlaps the store it replaces. While another store (here
 * one of this process, in place of the old kvtierd) holds the disk, kvtierd
 * with --busy-wait 0 exits 1 at once naming the holder; by default it logs
 * the holder, waits, and serves as soon as the disk is released.
 */
static void test_waits_for_a_disk_in_use(void **state)
{
	char text[1024], disk[512], line[512], want[128], holder[64];
	const char *cfg_path = path_in("busy.json"), *err_path = path_in("busy.err");
	const char *err0_path = path_in("busy0.err");
	kvt_store *old = NULL;
	int out[2], pa, pd, st, r;
	(void)state;

	daemon_config(cfg_path, &pa, &pd);
	disk_section(disk, sizeof(disk));
	snprintf(text, sizeof(text), "{\"ram\": {\"capacity\": \"32MiB\", \"max_block\":"
		 " \"2MiB\", \"mlock\": false}, %s}", disk);
	r = kvt_open(text, &old);
	if (r)
		fail_msg("kvt_open of the disk here: %s: %s", kvt_strerror(r), kvt_last_error());
	snprintf(holder, sizeof(holder), "in use by process %d", (int)getpid());

	int e = open(err0_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(e >= 0);
	const char *args0[] = { "--config", cfg_path, "--busy-wait", "0", NULL };
	pid_t pid = spawn(args0, NULL, e, e);
	close(e);
	st = wait_exit(pid, USAGE_MS, "--busy-wait 0", err0_path);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(tail_of(err0_path), holder))
		fail_msg("--busy-wait 0 on a disk in use: status %#x, expected exit 1 and "
			 "\"%s\"; output:\n%s", st, holder, tail_of(err0_path));

	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(e >= 0);
	const char *args[] = { "--config", cfg_path, NULL };
	g.pid = spawn(args, NULL, out[1], e);
	close(out[1]);
	close(e);
	g.out = out[0];
	long long end = now_ms() + START_MS;
	while (!strstr(tail_of(err_path), "retrying") && now_ms() < end)
		usleep(20000);
	if (!strstr(tail_of(err_path), holder))
		fail_msg("no warning naming the holder (\"%s\"); stderr:\n%s", holder,
			 tail_of(err_path));
	assert_int_equal(read_line(line, sizeof(line), 300), -ETIMEDOUT); /* not serving */

	kvt_close(old); /* the old store is gone: kvtierd starts */
	r = read_line(line, sizeof(line), START_MS);
	snprintf(want, sizeof(want), "kvtierd: serving as d on 127.0.0.1:%d", pd);
	if (r || strcmp(line, want))
		fail_msg("after the disk was released: %s \"%s\", expected \"%s\"; stderr:\n%s",
			 r ? strerror(-r) : "line", r ? "" : line, want, tail_of(err_path));
	assert_int_equal(kill(g.pid, SIGTERM), 0);
	st = wait_exit(g.pid, EXIT_MS, "SIGTERM", err_path);
	g.pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("kvtierd after SIGTERM: status %#x; stderr:\n%s", st, tail_of(err_path));
	close(g.out);
	g.out = -1;
}

static int test_teardown(void **state)
{
	(void)state;
	reap_daemon();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_serves_blocks_and_checkpoints, test_teardown),
		cmocka_unit_test_teardown(test_refuses_bad_usage, test_teardown),
		cmocka_unit_test_teardown(test_signals_while_reading_the_config, test_teardown),
		cmocka_unit_test_teardown(test_waits_for_a_disk_in_use, test_teardown),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
