/* bench_util.c - see bench_util.h. */
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bench.h"
#include "bench_util.h"

void tmpfile_path(char *buf, size_t cap, const char *name)
{
	char dir[256];

	assert_int_equal(bench_tmpdir_create(dir, sizeof(dir)), 0);
	snprintf(buf, cap, "%s/%s", dir, name);
}

json_t *load(const char *path)
{
	json_error_t err;
	json_t *doc = json_load_file(path, 0, &err);

	if (!doc)
		fprintf(stderr, "%s: %s (line %d)\n", path, err.text, err.line);
	assert_non_null(doc);
	return doc;
}

int run_main(int (*fn)(int, char **), ...)
{
	char *argv[32];
	int argc = 0;
	va_list ap;

	va_start(ap, fn);
	while (argc < 31 && (argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	return fn(argc, argv);
}

json_t *result_named(json_t *doc, const char *name, size_t nth)
{
	json_t *arr = json_object_get(doc, "results"), *r;
	size_t i;

	json_array_foreach(arr, i, r) {
		const char *n = json_string_value(json_object_get(r, "name"));

		if (n && !strcmp(n, name) && nth-- == 0)
			return r;
	}
	return NULL;
}

const char *kvbench_path(void)
{
	static char path[PATH_MAX + 16];
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (path[0])
		return path;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	assert_non_null(slash);
	*slash = '\0';
	snprintf(path, sizeof(path), "%s/../kvbench", exe);
	assert_int_equal(access(path, X_OK), 0);
	return path;
}

/* All of fd's file from its start, NUL-terminated; closes fd. */
static char *slurp(int fd)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);
	ssize_t got;

	assert_non_null(b);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	while ((got = read(fd, b + n, cap - n - 1)) > 0) {
		n += (size_t)got;
		if (cap - n < 2) {
			b = realloc(b, cap *= 2);
			assert_non_null(b);
		}
	}
	b[n] = '\0';
	close(fd);
	return b;
}

pid_t start_kvbench(const char *const *args, int *outfd, int *errfd)
{
	char o[] = "/tmp/kvt-cli-out-XXXXXX", e[] = "/tmp/kvt-cli-err-XXXXXX";
	const char *argv[40] = { kvbench_path() };
	pid_t pid;
	size_t i;

	for (i = 0; args[i] && i < 38; i++)
		argv[i + 1] = args[i];
	*outfd = mkstemp(o);
	*errfd = mkstemp(e);
	assert_true(*outfd >= 0 && *errfd >= 0);
	unlink(o);
	unlink(e);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(*outfd, 1);
		dup2(*errfd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

void finish_kvbench(struct proc *p, pid_t pid, int outfd, int errfd, int sig,
		    unsigned after_ms)
{
	int st;

	if (sig) {
		usleep(after_ms * 1000u);
		kill(pid, sig);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	p->out = slurp(outfd);
	p->err = slurp(errfd);
}

void kvbench_run(struct proc *p, const char *const *args)
{
	int o, e;
	pid_t pid = start_kvbench(args, &o, &e);

	finish_kvbench(p, pid, o, e, 0, 0);
}

void proc_free(struct proc *p)
{
	free(p->out);
	free(p->err);
}

unsigned count_lines(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

void assert_usage_error(const struct proc *p, const char *cmd, const char *what)
{
	char try[64];

	snprintf(try, sizeof(try), "Try 'kvbench%s%s --help'.\n", *cmd ? " " : "", cmd);
	if (p->status != 2 || p->out[0] || count_lines(p->err) != 2 ||
	    !strstr(p->err, try) || !strstr(p->err, what))
		fail_msg("kvbench %s: exit %d, stdout %zu bytes, stderr:\n%s(wanted \"%s\")",
			 cmd, p->status, strlen(p->out), p->err, what);
}

void expect_usage_error(const char *const *args, const char *cmd, const char *what)
{
	struct proc p;

	kvbench_run(&p, args);
	assert_usage_error(&p, cmd, what);
	proc_free(&p);
}

json_t *assert_json_stdout(const struct proc *p, const char *cmd)
{
	json_error_t je;
	json_t *doc = json_loads(p->out, 0, &je);

	if (p->status != 0 || !doc)
		fail_msg("kvbench %s --json -: exit %d, stdout not JSON (%s):\n%.400s\nstderr:\n%.2000s",
			 cmd, p->status, je.text, p->out, p->err);
	assert_int_equal(json_integer_value(json_object_get(doc, "schema_version")),
			 BENCH_JSON_SCHEMA);
	assert_string_equal(json_string_value(json_object_get(doc, "command")), cmd);
	assert_true(json_is_null(json_object_get(doc, "interrupted")));
	assert_true(json_array_size(json_object_get(doc, "results")) > 0);
	return doc;
}

int wait_until_caught(pid_t pid, int sig)
{
	char path[64], line[256];
	unsigned long long mask = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	for (int i = 0; i < 3000 && !(mask >> (sig - 1) & 1); i++) {
		FILE *f = fopen(path, "r");

		if (!f)
			return 0;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "SigCgt: %llx", &mask) == 1)
				break;
		fclose(f);
		if (!(mask >> (sig - 1) & 1))
			usleep(10000);
	}
	return mask >> (sig - 1) & 1;
}
