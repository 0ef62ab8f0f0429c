/*
 * system.c - kvbench and the operating system (see bench.h): private
 * temporary directories removed at exit and on a signal, a stop request
 * (SIGINT, SIGTERM, SIGHUP) that a command may finish on its own, child
 * programs (fio) stopped with kvbench, and paths checked before a run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "bench.h"

/* --- temporary directories ---------------------------------------------------- */

/*
 * Registered directories are removed at exit and from the signal handler,
 * so removal uses only async-signal-safe calls (openat, getdents64,
 * unlinkat, close) on fixed buffers.
 */
#define TMPDIR_MAX 8
#define TMPDIR_PATH 256

static char tmpdirs[TMPDIR_MAX][TMPDIR_PATH];
static volatile sig_atomic_t tmpdir_used[TMPDIR_MAX];
static int tmpdir_hooks;

static int rm_tree_at(int parent, const char *name, unsigned depth)
{
	char buf[4096];
	int fd, err = 0;
	long n;

	if (unlinkat(parent, name, 0) == 0)
		return 0;
	if (errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	if (depth > 32)
		return -ELOOP;
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while ((n = getdents64(fd, buf, sizeof(buf))) > 0) {
		long off = 0;

		while (off < n) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			const char *e = d->d_name;

			off += d->d_reclen;
			if (e[0] == '.' && (!e[1] || (e[1] == '.' && !e[2])))
				continue;
			int r = rm_tree_at(fd, e, depth + 1);

			if (r && !err)
				err = r;
		}
	}
	if (n < 0 && !err)
		err = -errno;
	close(fd);
	if (unlinkat(parent, name, AT_REMOVEDIR) && !err)
		err = -errno;
	return err;
}

/*
 * A signal may run this on any thread while another one (the store's) still
 * creates files in the directory, so a failed removal is tried again.
 */
static void remove_registered(void)
{
	int i, tries;

	for (i = 0; i < TMPDIR_MAX; i++) {
		if (tmpdir_used[i]) {
			for (tries = 0; tries < 3; tries++)
				if (rm_tree_at(AT_FDCWD, tmpdirs[i], 0) == 0)
					break;
			tmpdir_used[i] = 0;
		}
	}
}

/* --- stop requests and children ------------------------------------------------ */

static volatile sig_atomic_t stop_sig;  /* the first stop signal, once soft */
static volatile sig_atomic_t soft_stop; /* the command finishes on its own */
static volatile sig_atomic_t child_pg;  /* a child's process group, or 0 */

/*
 * A stop signal stops the child first. Then, when the command said it
 * finishes on its own (bench_catch_stop()), the first one is only noted;
 * otherwise, or at the second, the temporary directories go and the signal
 * takes its default course.
 */
static void on_stop_signal(int sig)
{
	int saved = errno;

	if (child_pg > 0)
		kill(-(pid_t)child_pg, SIGTERM);
	if (soft_stop && !stop_sig) {
		stop_sig = sig;
		errno = saved;
		return;
	}
	remove_registered();
	signal(sig, SIG_DFL);
	errno = saved;
	raise(sig);
}

static void install_hooks(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa, old;
	unsigned i;

	if (tmpdir_hooks)
		return;
	tmpdir_hooks = 1;
	atexit(remove_registered);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		/* Leave signals the caller ignores (nohup) ignored. */
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		sigaction(sigs[i], &sa, NULL);
	}
}

void bench_catch_stop(void)
{
	install_hooks();
	soft_stop = 1;
}

int bench_stop_signal(void)
{
	return stop_sig;
}

int bench_finish(const char *cmd, int rc)
{
	int sig = stop_sig;

	if (!sig)
		return rc;
	fprintf(stderr, "kvbench %s: interrupted by SIG%s; the results are those "
		"measured before it\n", cmd, sigabbrev_np(sig));
	return 128 + sig;
}

int bench_system(const char *cmd)
{
	pid_t pid;
	int status;

	install_hooks();
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		/* a group of its own, which kvbench stops; and stopped with it
		 * should kvbench die without a word (SIGKILL) */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	child_pg = pid;
	if (stop_sig) /* asked to stop while it started */
		kill(-pid, SIGTERM);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			status = -1;
			break;
		}
	child_pg = 0;
	return status;
}

/* --- paths ------------------------------------------------------------------------ */

/*
 * The file a chain of symbolic links starting at path ends at: a path that
 * is not itself a link (and may not exist yet, for a dangling link). A
 * relative link is read from the directory of the link that holds it.
 * Returns a malloc'd path, or NULL with errno set (ELOOP after 40 links).
 */
static char *link_target(const char *path)
{
	char buf[4096], *cur = strdup(path), *next;
	struct stat st;
	const char *slash;
	ssize_t n;
	int hops;

	for (hops = 0; cur && hops < 40; hops++) {
		if (lstat(cur, &st) || !S_ISLNK(st.st_mode))
			return cur; /* missing or not a link: the end of the chain */
		n = readlink(cur, buf, sizeof(buf) - 1);
		if (n < 0) {
			free(cur);
			return NULL;
		}
		buf[n] = '\0';
		slash = strrchr(cur, '/');
		if (buf[0] == '/' || !slash)
			next = strdup(buf);
		else if (asprintf(&next, "%.*s/%s", (int)(slash - cur), cur, buf) < 0)
			next = NULL;
		free(cur);
		cur = next;
	}
	if (cur) {
		free(cur);
		errno = ELOOP;
	}
	return NULL;
}

/*
 * Where a result for path goes, the way bench_out_open() writes it: *dest
 * (malloc'd) is path, or the end of the symbolic links at path, so that a
 * link is kept and its target replaced; *in_place says that dest exists and
 * is neither a regular file nor a directory (a device such as /dev/null, a
 * FIFO), so it is written directly rather than replaced by a new file.
 * Returns 0, -EISDIR or a negative errno.
 */
static int output_dest(const char *path, char **dest, int *in_place)
{
	struct stat st;

	*in_place = 0;
	*dest = link_target(path);
	if (!*dest)
		return -errno;
	if (stat(*dest, &st))
		return 0; /* not there yet: created beside */
	if (S_ISDIR(st.st_mode)) {
		free(*dest);
		*dest = NULL;
		return -EISDIR;
	}
	*in_place = !S_ISREG(st.st_mode);
	return 0;
}

int bench_output_check(const char *path, char *why, size_t cap)
{
	char *dest, *tmp;
	int fd, err, in_place;

	if (!path || !*path) {
		snprintf(why, cap, "no file name");
		return -EINVAL;
	}
	err = output_dest(path, &dest, &in_place);
	if (err == -EISDIR) {
		snprintf(why, cap, "is a directory, not a file");
		return err;
	}
	if (err) {
		snprintf(why, cap, "cannot follow its link: %s", strerror(-err));
		return err;
	}
	/* a device or FIFO is written as it is: only ask whether we may
	 * (opening it here could block on a FIFO or disturb a device) */
	if (in_place) {
		err = access(dest, W_OK) ? -errno : 0;
		if (err)
			snprintf(why, cap, "cannot write it: %s", strerror(-err));
		free(dest);
		return err;
	}
	/* what the write will do: a temporary file beside it, renamed */
	err = asprintf(&tmp, "%s.XXXXXX", dest) < 0 ? -ENOMEM : 0;
	free(dest);
	if (err) {
		snprintf(why, cap, "out of memory");
		return err;
	}
	fd = mkstemp(tmp);
	if (fd < 0) {
		err = -errno;
		snprintf(why, cap, "cannot write a file there: %s", strerror(-err));
		free(tmp);
		return err;
	}
	close(fd);
	unlink(tmp);
	free(tmp);
	return 0;
}

/* Closes o and removes its temporary file, if any; returns err, or the
 * error of the rename that commits it when err is 0. */
static int out_end(struct bench_out *o, int err)
{
	if (o->fd >= 0 && close(o->fd) && !err)
		err = -errno;
	o->fd = -1;
	if (o->tmp) {
		if (!err && rename(o->tmp, o->dest))
			err = -errno;
		if (err)
			unlink(o->tmp);
	}
	free(o->tmp);
	free(o->dest);
	o->tmp = o->dest = NULL;
	return err;
}

int bench_out_open(const char *path, struct bench_out *o)
{
	int err, in_place;

	*o = (struct bench_out){ .fd = -1, .path = path };
	err = output_dest(path, &o->dest, &in_place);
	if (!err && in_place) {
		/* no O_CREAT: the node is there; O_NOCTTY for a terminal */
		o->fd = open(o->dest, O_WRONLY | O_NOCTTY | O_CLOEXEC);
		err = o->fd < 0 ? -errno : 0;
	} else if (!err) {
		if (asprintf(&o->tmp, "%s.XXXXXX", o->dest) < 0) {
			o->tmp = NULL;
			err = -ENOMEM;
		} else {
			o->fd = mkstemp(o->tmp);
			err = o->fd < 0 ? -errno : 0;
			if (!err && fchmod(o->fd, 0644))
				err = -errno;
		}
	}
	if (err) {
		fprintf(stderr, "kvbench: cannot write %s: %s\n", path, strerror(-err));
		if (o->fd < 0) {
			free(o->tmp); /* mkstemp made nothing to remove */
			o->tmp = NULL;
		}
		out_end(o, err);
	}
	return err;
}

int bench_out_close(struct bench_out *o, int err)
{
	err = out_end(o, err);
	if (err)
		fprintf(stderr, "kvbench: cannot write %s: %s\n", o->path, strerror(-err));
	return err;
}

int bench_dir_check(const char *path, char *why, size_t cap)
{
	struct stat st;

	if (!path || !*path) {
		snprintf(why, cap, "no directory name");
		return -EINVAL;
	}
	if (stat(path, &st)) {
		snprintf(why, cap, "%s", strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, cap, "not a directory");
		return -ENOTDIR;
	}
	if (access(path, W_OK | X_OK)) {
		snprintf(why, cap, "cannot create files in it: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* --- temporary directories, continued ---------------------------------------------- */

int bench_tmpdir_create(char *buf, size_t cap)
{
	static const char *const bases[] = { "/var/tmp", "/tmp" };
	char path[TMPDIR_PATH];
	sigset_t block, old;
	unsigned i;
	int slot, err = -ENOENT;

	for (slot = 0; slot < TMPDIR_MAX && tmpdir_used[slot]; slot++)
		;
	if (slot == TMPDIR_MAX) {
		fprintf(stderr, "kvbench: too many temporary directories\n");
		return -EMFILE;
	}
	if (!buf || cap < sizeof("/var/tmp/kvbench-XXXXXX"))
		return -ENAMETOOLONG;
	install_hooks();
	/* No signal between creating the directory and registering it. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	for (i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		snprintf(path, sizeof(path), "%s/kvbench-XXXXXX", bases[i]);
		if (mkdtemp(path)) {
			err = 0;
			break;
		}
		err = -errno;
	}
	if (!err) {
		memcpy(tmpdirs[slot], path, sizeof(path));
		tmpdir_used[slot] = 1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		fprintf(stderr,
			"kvbench: cannot create a directory in /var/tmp or /tmp: %s\n",
			strerror(-err));
		return err;
	}
	memcpy(buf, path, strlen(path) + 1);
	return 0;
}

int bench_tmpdir_remove(const char *path)
{
	int i;

	if (!path || !*path)
		return -EINVAL;
	for (i = 0; i < TMPDIR_MAX; i++)
		if (tmpdir_used[i] && !strcmp(tmpdirs[i], path))
			tmpdir_used[i] = 0;
	return rm_tree_at(AT_FDCWD, path, 0);
}
