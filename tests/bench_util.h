/*
 * bench_util.h - helpers shared by the tests of kvbench (test_bench_*.c):
 * temporary result files and their JSON, a command's main() run in the
 * test's process, and the kvbench program run as a child with its exit
 * status and output kept (usage errors, JSON on stdout, stop requests).
 */
#ifndef KVT_TEST_BENCH_UTIL_H
#define KVT_TEST_BENCH_UTIL_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

/* A fresh path in a temporary directory, registered for removal at exit. */
void tmpfile_path(char *buf, size_t cap, const char *name);

/* The JSON document in the file at path; fails the test if it is none. */
json_t *load(const char *path);

/* Runs a command's main() with the NULL-terminated arguments (at most 31). */
int run_main(int (*fn)(int, char **), ...);

/* The nth (from 0) entry of doc's "results" with that name, or NULL. */
json_t *result_named(json_t *doc, const char *name, size_t nth);

/* The kvbench binary beside this test's directory ($BUILD/tests/..). */
const char *kvbench_path(void);

/* A finished kvbench: exit status (128 + signal when killed), its output. */
struct proc {
	int status;
	char *out, *err;
};

/* Starts kvbench args[] with stdout and stderr into temporary files. */
pid_t start_kvbench(const char *const *args, int *outfd, int *errfd);

/* Waits for pid; sig (0: none) is sent after_ms into the run. */
void finish_kvbench(struct proc *p, pid_t pid, int outfd, int errfd, int sig,
		    unsigned after_ms);

/* Runs kvbench with the NULL-terminated arguments. */
void kvbench_run(struct proc *p, const char *const *args);

/* Frees what finish_kvbench() kept of the output. */
void proc_free(struct proc *p);

/* The number of newlines in s. */
unsigned count_lines(const char *s);

/* A usage error: exit 2, nothing on stdout, one line of error and the
 * "Try" line naming cmd on stderr, the first containing what. */
void assert_usage_error(const struct proc *p, const char *cmd, const char *what);

/* Runs kvbench with args and expects the usage error of assert_usage_error(). */
void expect_usage_error(const char *const *args, const char *cmd, const char *what);

/* Fast arguments for each command, with --json FILE or - appended. */
#define HASH_ARGS "hash", "--reps", "1", "--tokens", "4096", "--block-tokens", "16"

#define RAM_ARGS "ram", "--sizes", "64KiB", "--threads", "1", "--working-set", "2MiB", \
		 "--capacity", "32MiB", "--volume", "1MiB", "--batch", "4", "--chain", \
		 "50", "--reps", "1"

#define PEER_ARGS "peer", "--block-size", "64KiB", "--blocks", "16", "--batch", "4", \
		  "--reps", "1"

#define DISK_ARGS "disk", "--no-fio", "--size", "64MiB", "--block-size", "256KiB", \
		  "--batch", "8", "--reps", "1"

#define DEMO_ARGS "demo", "--disk", "0"

#define REPLAY_ARGS "replay", "--sessions", "2"

#define SWEEP_ARGS "sweep", "--sessions", "2", "--over", "width", "--values", "1,2"

/* stdout must be one JSON document of the given command, and nothing else. */
json_t *assert_json_stdout(const struct proc *p, const char *cmd);

/* Whether process pid catches sig (its handler is installed), from
 * /proc/PID/status; waits up to 30 s for it. */
int wait_until_caught(pid_t pid, int sig);

#endif
