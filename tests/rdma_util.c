/* rdma_util.c - see rdma_util.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "rdma_util.h"

const char *const rdma_names[2] = { "a", "b" };

int rdma_open_member(const struct rdma_member_opts *o, int self, int port,
		     kvt_store **s)
{
	char cfg[1024];

	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"%s\"}, "
		 "\"peers\": {\"self\": \"%s\", \"transport\": \"rdma\", "
		 "\"request_timeout_ms\": %u, \"connect_timeout_ms\": 3000, "
		 "\"down_ms\": %u, \"members\": ["
		 "{\"name\": \"a\", \"addr\": \"10.77.0.1:%d\"}, "
		 "{\"name\": \"b\", \"addr\": \"10.77.0.2:%d\"}]}}",
		 o->capacity, rdma_names[self], o->request_ms, o->down_ms, port, port);
	int e = kvt_open(cfg, s);
	if (e) {
		printf("# kvt_open: %s\n", kvt_last_error());
		fflush(stdout);
	}
	return e;
}

long long rdma_stat_at(kvt_store *s, const char *path)
{
	int n = kvt_stats_json(s, NULL, 0);
	char *buf = malloc((size_t)n + 65536);
	assert_true(kvt_stats_json(s, buf, (size_t)n + 65536) > 0);
	json_t *root = json_loads(buf, 0, NULL), *v = root;
	free(buf);
	char p[256], *save = NULL;
	snprintf(p, sizeof(p), "%s", path);
	for (char *t = strtok_r(p, ".", &save); t && v; t = strtok_r(NULL, ".", &save))
		v = json_is_array(v) ? json_array_get(v, (size_t)atoi(t)) : json_object_get(v, t);
	if (!v)
		fail_msg("no statistic %s", path);
	long long r = json_is_true(v) ? 1 : json_integer_value(v);
	json_decref(root);
	return r;
}

void *rdma_big(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

pid_t rdma_spawn(const char *name, const char *role, int port, void *msg, size_t len)
{
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char ps[16], fs[16];
		close(fds[0]);
		snprintf(ps, sizeof(ps), "%d", port);
		snprintf(fs, sizeof(fs), "%d", fds[1]);
		execl("/proc/self/exe", name, role, ps, fs, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], msg, len), (ssize_t)len);
	close(fds[0]);
	return pid;
}

pid_t rdma_spawn_ready(const char *name, const char *role, int port)
{
	char ok = 0;
	pid_t pid = rdma_spawn(name, role, port, &ok, 1);

	assert_int_equal(ok, 1);
	return pid;
}
