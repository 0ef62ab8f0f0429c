/*
 * test_skip.c - a test that cannot run here says so: the disk probe of
 * tests/util.c (io_uring, O_DIRECT in the test directory) makes a disk test
 * exit 77 with the reason, and tests/run.sh counts skipped programs and
 * skipped cases in its summary line.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "util.h"

/* Runs fn in a child with stderr into out (cap bytes); returns its exit status. */
static int in_child(void (*fn)(void), char *out, size_t cap)
{
	int p[2], st;
	size_t got = 0;
	ssize_t n;

	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 2);
		dup2(p[1], 1);
		close(p[0]);
		fn();
		fflush(stdout);
		_exit(0);
	}
	close(p[1]);
	while (got + 1 < cap && (n = read(p[0], out + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(p[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

#if defined(__x86_64__)
#define THIS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_ARCH AUDIT_ARCH_AARCH64
#endif

#ifdef THIS_ARCH
/*
 * Makes this process refuse, as a machine would: io_uring_setup with ENOSYS
 * (a seccomp profile such as a container's default, or a kernel without
 * io_uring) when no_uring, else every openat() with O_DIRECT with EINVAL
 * (a file system without direct I/O). Returns 0 or -1.
 */
static int refuse(int no_uring)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
			 no_uring ? __NR_io_uring_setup : __NR_openat, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		/* openat: flags are args[2], low word first on these arches */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, O_DIRECT, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (!no_uring) /* jump over the ENOSYS return to the openat test */
		f[4].jt = 2;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

static void probe_without_uring(void)
{
	if (refuse(1) == 0)
		test_skip_without_disk();
}

static void probe_without_o_direct(void)
{
	if (refuse(0) == 0)
		test_skip_without_disk();
}
#endif

/* Where io_uring is refused, a disk test exits 77 and its last line says
 * why; likewise where the test directory refuses O_DIRECT. */
static void disk_test_skips_where_the_disk_cannot_work(void **state)
{
	char out[1024];

	(void)state;
#ifdef THIS_ARCH
	assert_int_equal(in_child(probe_without_uring, out, sizeof(out)), TEST_EXIT_SKIP);
	assert_non_null(strstr(out, "skipped: io_uring is unavailable here"));
	assert_int_equal(in_child(probe_without_o_direct, out, sizeof(out)), TEST_EXIT_SKIP);
	assert_non_null(strstr(out, "skipped: the file system of "));
	assert_non_null(strstr(out, "has no O_DIRECT"));
#else
	(void)out;
	print_message("skipped: no seccomp filter for this architecture\n");
	skip();
#endif
}

static void probe_here(void)
{
	test_skip_without_disk();
	printf("disk available\n");
}

/* Where the probe finds the disk usable, the test goes on. */
static void disk_test_runs_where_the_disk_works(void **state)
{
	char out[1024];
	const char *why = test_disk_unavailable();

	(void)state;
	if (why) {
		print_message("skipped: %s\n", why);
		skip();
	}
	assert_int_equal(in_child(probe_here, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "disk available"));
}

/* Writes an executable script dir/name with the given body. */
static void script(char *path, size_t cap, const char *dir, const char *name,
		   const char *body)
{
	FILE *f;

	snprintf(path, cap, "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\n%s\n", body);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, 0755), 0);
}

/* tests/run.sh: a program exiting 77 is a skip with its reason; skipped
 * cases of a passing program are counted too; the summary says both. */
static void run_sh_counts_skips(void **state)
{
	char *dir = make_temp_dir("skip");
	char a[512], b[512], c[512], cmd[2048], out[4096];
	FILE *p;
	size_t n;

	(void)state;
	if (access("tests/run.sh", R_OK)) {
		print_message("skipped: not run from the source tree\n");
		skip();
	}
	assert_non_null(dir);
	script(a, sizeof(a), dir, "t_pass", "echo ok");
	script(b, sizeof(b), dir, "t_skip", "echo 'io_uring is unavailable here'; exit 77");
	script(c, sizeof(c), dir, "t_cases",
	       "echo '[  SKIPPED ] 2 test(s), listed below:'; exit 0");
	snprintf(cmd, sizeof(cmd), "SAN= sh tests/run.sh %s %s %s 2>&1", a, b, c);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	assert_int_equal(pclose(p), 0);
	assert_non_null(strstr(out, "SKIP t_skip: io_uring is unavailable here"));
	assert_non_null(strstr(out, "PASS t_cases"));
	assert_non_null(strstr(out, "tests: 2 passed, 0 failed, 1 skipped, 2 cases skipped"));
	rm_rf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(disk_test_skips_where_the_disk_cannot_work),
		cmocka_unit_test(disk_test_runs_where_the_disk_works),
		cmocka_unit_test(run_sh_counts_skips),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
