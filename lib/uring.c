/*
 * uring.c - the io_uring implementation of the device seam (dev.h), under
 * the NVMe tier: opening devices for O_DIRECT and exclusively (creating and
 * preallocating files, locking them, opening block devices with O_EXCL and
 * checking their sizes, refusing file systems without O_DIRECT), and one
 * io_uring queue per caller with the RAM arena registered as fixed buffers;
 * vectored ios go out as one READV or WRITEV each.
 * The batch loop over any implementation is dev_run() (dev.c).
 * Knows nothing about regions, records, keys or the index (the disk tier,
 * disk*.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "internal.h"
#include "uring.h"

/* --- devices ---------------------------------------------------------------- */

static int blockdev_size(int fd, uint64_t *size)
{
	if (ioctl(fd, BLKGETSIZE64, size) < 0)
		return -errno;
	return 0;
}

/* flock_holder(): a lock is listed, but its process is not visible here. */
#define HOLDER_HIDDEN ((pid_t)-1)

/*
 * Who holds a flock on the file st describes, from /proc/locks ("1: FLOCK
 * ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF", device numbers in
 * hex). Returns the pid; HOLDER_HIDDEN when the lock is listed with pid 0,
 * which the kernel shows for an owner outside this pid namespace or one that
 * has exited and been reaped (inside a container); 0 when no lock is listed
 * (no /proc, or a file system that lists locks under another device number).
 */
static pid_t flock_holder(const struct stat *st)
{
	char line[256];
	pid_t pid = 0;
	FILE *f = fopen("/proc/locks", "re");

	if (!f)
		return 0;
	while (pid <= 0 && fgets(line, sizeof(line), f)) {
		char kind[16];
		unsigned maj, min;
		unsigned long long ino;
		int p;

		if (sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%llu", kind, &p, &maj,
			   &min, &ino) == 5 && !strcmp(kind, "FLOCK") &&
		    ino == (unsigned long long)st->st_ino && maj == major(st->st_dev) &&
		    min == minor(st->st_dev))
			pid = p > 0 ? p : HOLDER_HIDDEN;
	}
	fclose(f);
	return pid;
}

/* 1 if process pid has exited (reaped, or a zombie): whatever it still
 * holds is being released by the kernel. */
static int process_gone(pid_t pid)
{
	char p[64], buf[512];
	FILE *f;
	int gone = 0;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 1;
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	if ((f = fopen(p, "re"))) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = 0;
		const char *paren = strrchr(buf, ')');
		gone = paren && (paren[2] == 'Z' || paren[2] == 'X');
		fclose(f);
	}
	return gone;
}

/*
 * The lock of a device is held by its open file, so it ends only once the
 * kernel is done with the file, including the I/O a dead store left in
 * flight, which the kernel finishes in the background after the process is
 * gone. A holder that has exited is therefore waited for, up to this long.
 */
#define DEAD_HOLDER_WAIT_MS 10000

/* -EBUSY naming the device's holder where it can be known. */
static int busy(const char *path, int blockdev, pid_t pid)
{
	const char *what = blockdev ? "block device" : "file";
	char p[64], comm[64] = "";
	FILE *f;

	if (pid == getpid())
		return kvt_fail(-EBUSY, "disk.path %s: %s in use by another store of "
				"this process (a device serves one store at a time)",
				path, what);
	if (pid == HOLDER_HIDDEN)
		return kvt_fail(-EBUSY, "disk.path %s: %s in use by a process not visible "
				"here (in another pid namespace, or exited with I/O still "
				"in flight) (a device serves one store at a time)", path,
				what);
	if (pid <= 0)
		return kvt_fail(-EBUSY, "disk.path %s: %s in use by another store or "
				"program%s (a device serves one store at a time)", path,
				what, blockdev ? ", or mounted, or a RAID or LVM member" : "");
	snprintf(p, sizeof(p), "/proc/%d/comm", (int)pid);
	if ((f = fopen(p, "re"))) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
	}
	return kvt_fail(-EBUSY, "disk.path %s: %s in use by process %d%s%s%s (a "
			"device serves one store at a time)", path, what, (int)pid,
			comm[0] ? " (" : "", comm, comm[0] ? ")" : "");
}

/*
 * Calls try() until it stops failing with -EBUSY, or the device's holder
 * is alive, or DEAD_HOLDER_WAIT_MS have passed. Returns try()'s last result
 * (>= 0 on success) and the holder in *holder.
 */
static int while_holder_dead(int (*try)(const char *, int), const char *path, int arg,
			     pid_t *holder)
{
	struct stat st;
	unsigned unlisted = 0;
	int r;

	for (unsigned waited = 0;; waited += 10) {
		r = try(path, arg);
		*holder = 0;
		if (r != -EBUSY)
			return r;
		if (stat(path, &st) == 0)
			*holder = flock_holder(&st);
		/* Waited for: a holder that has exited, and one the kernel
		 * lists without a pid (reaped; or alive in another pid
		 * namespace, which costs that one the wait before -EBUSY).
		 * No lock listed at all: released since the try, so try again,
		 * a few times (a file system that lists its locks under another
		 * device, or a block device claimed without a flock, is never
		 * listed). */
		if ((*holder == 0 && ++unlisted > 3) || *holder == getpid() ||
		    waited >= DEAD_HOLDER_WAIT_MS ||
		    (*holder > 0 && !process_gone(*holder)))
			return r;
		if (*holder != 0 && waited == 0)
			kvt_log(KVT_LOG_INFO, "disk.path %s: waiting for the kernel to "
				"release it from a process that has exited", path);
		usleep(10000);
	}
}

/* The same open file takes the flock, so it is released with the I/O. */
static int try_flock(const char *path, int fd)
{
	(void)path;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return fd;
	return errno == EWOULDBLOCK ? -EBUSY : -errno;
}

static int try_open_excl(const char *path, int flags)
{
	int fd = open(path, flags);

	return fd >= 0 ? fd : -errno;
}

/*
 * Takes the exclusive lock that keeps a second store (of this process or
 * another) off a file the tier uses. The lock belongs to the open file: it
 * ends when the tier closes it (uring_dev_close) or its process dies, and
 * is not inherited by exec. Returns 0 (also, with a warning, where the file
 * system cannot lock) or -EBUSY naming the holder.
 */
static int lock_file(int fd, const char *path)
{
	pid_t holder;
	int r = while_holder_dead(try_flock, path, fd, &holder);

	if (r == -EBUSY)
		return busy(path, 0, holder);
	if (r < 0) /* a file system without flock (ENOLCK, EOPNOTSUPP) */
		kvt_log(KVT_LOG_WARN, "disk.path %s: cannot lock it (%s): a second store "
			"on it would not be refused", path, strerror(-r));
	return 0;
}

static int open_blockdev(const char *path, uint64_t want)
{
	uint64_t size = 0;
	pid_t holder;
	/* O_EXCL: the kernel refuses the device while another exclusive
	 * opener (another store, a mount, a RAID or LVM member) has it. A flock
	 * on top names this process to the next opener that is refused. */
	int fd = while_holder_dead(try_open_excl, path,
				   O_RDWR | O_DIRECT | O_EXCL | O_CLOEXEC, &holder);
	int err;

	if (fd == -EBUSY)
		return busy(path, 1, holder);
	if (fd < 0)
		return kvt_fail(fd, "disk.path %s: %s", path, strerror(-fd));
	flock(fd, LOCK_EX | LOCK_NB);
	err = blockdev_size(fd, &size);
	if (err < 0) {
		close(fd);
		return kvt_fail(err, "disk.path %s: cannot read device size: %s",
				path, strerror(-err));
	}
	if (size < want) {
		close(fd);
		return kvt_fail(-ENOSPC, "disk.path %s: device holds %llu bytes, "
				"its share of disk.capacity needs %llu", path,
				(unsigned long long)size, (unsigned long long)want);
	}
	return fd;
}

/*
 * Grows the file to want bytes (preallocated where the file system can).
 * A size past this process's RLIMIT_FSIZE is refused before the kernel is
 * asked, since it would also send SIGXFSZ, which kills a process that does
 * not handle it. A file system that cannot hold a file that large (EFBIG,
 * from fallocate or, where the file system cannot preallocate, from
 * ftruncate) and one without room for it (ENOSPC) are told apart.
 */
static int preallocate(int fd, const char *path, uint64_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    want > rl.rlim_cur)
		return kvt_fail(-EFBIG, "disk.path %s cannot hold a file of %llu bytes, "
				"its share of disk.capacity: that is past this "
				"process's file size limit (RLIMIT_FSIZE) of %llu bytes",
				path, (unsigned long long)want,
				(unsigned long long)rl.rlim_cur);
	if (fallocate(fd, 0, 0, (off_t)want) == 0)
		return 0;
	int e = errno;

	if (e == EOPNOTSUPP) {
		if (ftruncate(fd, (off_t)want) == 0) {
			kvt_log(KVT_LOG_WARN, "disk.path %s: file system cannot "
				"preallocate, using a sparse file", path);
			return 0;
		}
		e = errno; /* why the sparse file failed (ext2: EFBIG) */
	}
	if (e == EFBIG)
		return kvt_fail(-EFBIG, "the file system holding disk.path %s cannot "
				"hold a file of %llu bytes, its share of disk.capacity",
				path, (unsigned long long)want);
	if (e == ENOSPC)
		return kvt_fail(-ENOSPC, "the file system holding disk.path %s has no "
				"room for %llu bytes, its share of disk.capacity",
				path, (unsigned long long)want);
	return kvt_fail(-e, "disk.path %s: preallocating %llu bytes: %s", path,
			(unsigned long long)want, strerror(e));
}

/*
 * Whether a missing path would be created in the device file system (its
 * directory is /dev, or under it, on /dev's own mount; /dev/shm and other
 * mounts below /dev are ordinary places for a tier file). A mistyped or
 * absent device name there must not become a file in the RAM of devtmpfs.
 */
static int in_dev_fs(const char *path)
{
	char dir[4096], real[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat d, p;

	if (!slash || (size_t)(slash - path) >= sizeof(dir))
		return 0;
	snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	if (!realpath(dir, real) || strncmp(real, "/dev", 4) ||
	    (real[4] != 0 && real[4] != '/'))
		return 0;
	return stat("/dev", &d) == 0 && stat(real, &p) == 0 && d.st_dev == p.st_dev;
}

/*
 * Opens the regular file at path, creating it when missing (*created), and
 * takes its lock; *st is its fstat. Another process may create it between
 * the two opens (EEXIST): then what that one made is opened, and the lock
 * tells which of the two stores gets it. And one that created it, then
 * failed, unlinks it under its lock: a lock taken on a file no path names
 * any more is dropped and the path opened again. The descriptor, or
 * -errno with the text set.
 */
static int file_open_locked(const char *path, struct stat *st, int *created)
{
	for (int again = 0;; again++) {
		int fd = -1, err;

		*created = 0;
		for (int tries = 0; fd < 0 && tries < 8; tries++) {
			fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd >= 0 || errno != ENOENT)
				break;
			if (in_dev_fs(path))
				return kvt_fail(-ENOENT, "disk.path %s: no such device (a "
						"missing name under /dev is not created "
						"as a file)", path);
			fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			if (fd < 0 && errno == ENOENT)
				return kvt_fail(-ENOENT, "disk.path %s: directory does not "
						"exist", path);
			if (fd < 0 && errno != EEXIST)
				break;
			*created = fd >= 0;
		}
		if (fd < 0)
			return kvt_fail(-errno, "disk.path %s: %s", path, strerror(errno));
		if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
			close(fd);
			return kvt_fail(-EINVAL, "disk.path %s: neither a regular file nor a "
					"block device", path);
		}
		err = lock_file(fd, path);
		if (err) {
			close(fd); /* not unlinked even if created: the holder uses it */
			return err;
		}
		struct stat now;
		if (again == 8 || (stat(path, &now) == 0 && now.st_ino == st->st_ino &&
				   now.st_dev == st->st_dev))
			return fd;
		close(fd);
	}
}

static int uring_dev_open(const char *path, uint64_t want, uint64_t *held)
{
	struct stat st;
	int created, flags, err = 0;

	if (held)
		*held = want;
	if (stat(path, &st) == 0 && S_ISBLK(st.st_mode))
		return open_blockdev(path, want);

	/* A file: create it if missing, lock it, then preallocate and switch
	 * the same descriptor (which holds the lock) to O_DIRECT. */
	int fd = file_open_locked(path, &st, &created);
	if (fd < 0)
		return fd;
	if (held && (uint64_t)st.st_size < want)
		*held = created ? 0 : (uint64_t)st.st_size;
	if ((uint64_t)st.st_size < want || created)
		err = preallocate(fd, path, want);
	if (!err && ((flags = fcntl(fd, F_GETFL)) < 0 ||
		     fcntl(fd, F_SETFL, flags | O_DIRECT) < 0)) {
		err = -errno;
		if (err == -EINVAL)
			kvt_fail(-EINVAL, "disk.path %s: this file system does not "
				 "support O_DIRECT (tmpfs?); refusing buffered I/O", path);
		else
			kvt_fail(err, "disk.path %s: %s", path, strerror(-err));
	}
	if (err) {
		if (created)
			unlink(path); /* before close: still ours under the lock */
		close(fd);
		return err;
	}
	if (!created && st.st_size == 0)
		kvt_log(KVT_LOG_WARN, "disk.path %s was empty (0 bytes: cut to nothing "
			"while closed?), so any blocks it held are gone; it is taken as "
			"a new, empty tier file", path);
	return fd;
}

static void uring_dev_close(int fd)
{
	if (fd < 0)
		return;
	/* The lock ends now, even if a child forked since holds a copy of fd. */
	flock(fd, LOCK_UN);
	close(fd);
}

static int uring_dev_sync(int fd)
{
	return fdatasync(fd) < 0 ? -errno : 0;
}

/* --- queues ----------------------------------------------------------------- */

struct uring_queue {
	struct io_uring ring;
	int files_registered;
	unsigned spare0, nspare;  /* spare fixed-buffer entries [spare0, +nspare) */
	unsigned nfds;
	int fds[];
};

/*
 * Registers the arena's fixed buffers followed by empty entries for caller
 * memory (IORING_REGISTER_BUFFERS2, kernels from 5.13); where the kernel
 * refuses that, the arena alone; where it refuses the arena, the empty
 * entries alone. Returns 0 or -ENOMEM; a refusal only logs.
 */
static int register_fixed(struct uring_queue *q, void *fixed_base, size_t fixed_len,
			  unsigned *nfixed)
{
	unsigned n = fixed_base && fixed_len ?
		     (unsigned)((fixed_len + DEV_FIXED_CHUNK - 1) / DEV_FIXED_CHUNK) : 0;
	unsigned spare = n >= DEV_FIXED_MAX ? 0 : DEV_FIXED_MAX - n;
	int ret;

	if (spare > DEV_FIXED_SPARE)
		spare = DEV_FIXED_SPARE;
	struct iovec *iov = calloc(n + spare + 1, sizeof(*iov));
	if (!iov)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		size_t off = (size_t)i * DEV_FIXED_CHUNK;
		iov[i].iov_base = (char *)fixed_base + off;
		iov[i].iov_len = fixed_len - off < DEV_FIXED_CHUNK ?
				 fixed_len - off : DEV_FIXED_CHUNK;
	}
	ret = spare ? io_uring_register_buffers_tags(&q->ring, iov, NULL, n + spare) : -EINVAL;
	if (ret == 0) {
		*nfixed = n;
		q->spare0 = n;
		q->nspare = spare;
	} else if (n && (ret = io_uring_register_buffers(&q->ring, iov, n)) == 0) {
		*nfixed = n;
	} else if (n) {
		kvt_log(KVT_LOG_WARN, "disk: io_uring refused to register the "
			"%zu-byte arena as fixed buffers (%s; RLIMIT_MEMLOCK?): "
			"using plain reads and writes", fixed_len, strerror(-ret));
		if (spare && io_uring_register_buffers_sparse(&q->ring, n + spare) == 0) {
			q->spare0 = n;
			q->nspare = spare;
		}
	}
	free(iov);
	return 0;
}

static void uring_queue_close(void *qp);

static int uring_queue_open(const int *fds, unsigned nfds, unsigned entries,
			    void *fixed_base, size_t fixed_len, unsigned *nfixed,
			    void **out)
{
	struct uring_queue *q = calloc(1, sizeof(*q) + nfds * sizeof(int));
	int ret;

	*nfixed = 0;
	if (!q)
		return -ENOMEM;
	q->nfds = nfds;
	memcpy(q->fds, fds, nfds * sizeof(int));
	/* No interrupt of the thread per completion (it collects them at its
	 * next io_uring_enter anyway); kernels before 5.19 refuse the flag. */
	ret = io_uring_queue_init(entries, &q->ring, IORING_SETUP_COOP_TASKRUN);
	if (ret == -EINVAL)
		ret = io_uring_queue_init(entries, &q->ring, 0);
	if (ret < 0) {
		free(q);
		return kvt_fail(ret, "io_uring_queue_init(%u): %s", entries,
				strerror(-ret));
	}
	if (io_uring_register_files(&q->ring, fds, nfds) == 0)
		q->files_registered = 1;
	ret = register_fixed(q, fixed_base, fixed_len, nfixed);
	if (ret < 0) {
		uring_queue_close(q);
		return ret;
	}
	*out = q;
	return 0;
}

static void uring_queue_close(void *qp)
{
	struct uring_queue *q = qp;

	if (!q)
		return;
	/* The ring's registered files are released by the kernel only after
	 * the ring itself is gone, which it finishes in the background; drop
	 * them here, so that closing the devices right after closes them now
	 * (ending an O_EXCL claim: another store may open them at once). */
	if (q->files_registered)
		io_uring_unregister_files(&q->ring);
	io_uring_queue_exit(&q->ring);
	free(q);
}

/*
 * Turns the SQEs queued but not taken by the kernel into no-ops without
 * data (uring_reap skips their completions), so that no later submit sends
 * I/O the caller was told did not go out. Only this thread enters the ring
 * (no SQPOLL), so the kernel cannot take them meanwhile.
 */
static void void_unsent(struct uring_queue *q)
{
	struct io_uring_sq *sq = &q->ring.sq;
	unsigned head = io_uring_smp_load_acquire(sq->khead);

	for (; head != sq->sqe_tail; head++) {
		unsigned i = head & sq->ring_mask;
		struct io_uring_sqe *sqe = &sq->sqes[sq->array ? sq->array[i] : i];

		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, NULL);
	}
}

#define SUBMIT_TRIES 64

static int uring_submit(void *qp, struct dev_io *const *ios, unsigned n)
{
	struct uring_queue *q = qp;
	/* no-ops left by an earlier failure go out first */
	unsigned before = io_uring_sq_ready(&q->ring), sent = 0;
	int r = 0;

	if (before && io_uring_sq_space_left(&q->ring) < n) {
		io_uring_submit(&q->ring); /* send those no-ops first */
		before = io_uring_sq_ready(&q->ring);
	}

	/* Everything is checked before an SQE is taken: a taken SQE is sent by
	 * the next submit whether or not this one fails. */
	if (io_uring_sq_space_left(&q->ring) < n)
		return kvt_fail(-EBUSY, "io_uring: %u I/Os for %u free slots", n,
				io_uring_sq_space_left(&q->ring));
	for (unsigned i = 0; i < n; i++) {
		struct iovec iov[DEV_SEG_MAX];

		if (ios[i]->dev >= q->nfds)
			return kvt_fail(-EINVAL, "io_uring: device %u of %u", ios[i]->dev,
					q->nfds);
		if (ios[i]->nseg && !dev_io_iov(ios[i], iov))
			return kvt_fail(-EINVAL, "io_uring: a vectored I/O of %u bytes "
					"whose %u segments do not hold them", ios[i]->len,
					ios[i]->nseg);
	}
	for (unsigned i = 0; i < n; i++) {
		struct dev_io *io = ios[i];
		struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
		int fd = q->files_registered ? io->dev : q->fds[io->dev];

		if (io->nseg) {
			/* the kernel reads the iovec at submission or later,
			 * so it lives in the io while that is in flight */
			unsigned k = dev_io_iov(io, io->sub);
			if (io->op == DEV_READ)
				io_uring_prep_readv(sqe, fd, io->sub, k, io->off);
			else
				io_uring_prep_writev(sqe, fd, io->sub, k, io->off);
		} else if (io->op == DEV_READ) {
			if (io->fixed >= 0)
				io_uring_prep_read_fixed(sqe, fd, io->buf, io->len,
							 io->off, io->fixed);
			else
				io_uring_prep_read(sqe, fd, io->buf, io->len, io->off);
		} else {
			if (io->fixed >= 0)
				io_uring_prep_write_fixed(sqe, fd, io->buf, io->len,
							  io->off, io->fixed);
			else
				io_uring_prep_write(sqe, fd, io->buf, io->len, io->off);
		}
		if (q->files_registered)
			sqe->flags |= IOSQE_FIXED_FILE;
		io_uring_sqe_set_data(sqe, io);
	}
	/* The kernel may take fewer SQEs than queued (it stops at one it cannot
	 * start): submit the rest again, and what it never takes is voided. */
	for (int tries = 0; sent < before + n && tries < SUBMIT_TRIES;) {
		r = io_uring_submit(&q->ring);
		if (r > 0) {
			sent += (unsigned)r;
			tries = 0;
		} else if (r == 0 || r == -EINTR || r == -EAGAIN || r == -EBUSY) {
			tries++;
		} else {
			break;
		}
	}
	if (sent < before + n)
		void_unsent(q);
	sent = sent > before ? sent - before : 0;
	if (sent)
		return (int)sent;
	return r < 0 ? r : -EAGAIN;
}

static int uring_reap(void *qp, struct dev_io **done, unsigned max, unsigned min)
{
	struct uring_queue *q = qp;
	unsigned got = 0;

	while (got < max) {
		struct io_uring_cqe *cqe;
		int r = got >= min ? io_uring_peek_cqe(&q->ring, &cqe)
				   : io_uring_wait_cqe(&q->ring, &cqe);

		if (r == -EINTR)
			continue;
		if (r == -EAGAIN && got >= min)
			break;
		if (r < 0)
			return got ? (int)got : r;
		struct dev_io *io = io_uring_cqe_get_data(cqe);
		io_uring_cqe_seen(&q->ring, cqe);
		if (!io)
			continue; /* a voided SQE (void_unsent) */
		io->res = cqe->res;
		done[got++] = io;
	}
	return (int)got;
}

static int uring_buf_update(void *qp, unsigned first, void *base, size_t len)
{
	struct uring_queue *q = qp;
	unsigned n = (unsigned)((len + DEV_FIXED_CHUNK - 1) / DEV_FIXED_CHUNK);
	struct iovec iov[DEV_FIXED_MAX];

	if (!n || first < q->spare0 || first + n > q->spare0 + q->nspare)
		return -ENOSPC;
	for (unsigned i = 0; i < n; i++) {
		size_t off = (size_t)i * DEV_FIXED_CHUNK;
		iov[i].iov_base = base ? (char *)base + off : NULL;
		iov[i].iov_len = !base ? 0 : len - off < DEV_FIXED_CHUNK ? len - off :
					 DEV_FIXED_CHUNK;
	}
	int ret = io_uring_register_buffers_update_tag(&q->ring, first, iov, NULL, n);
	if (ret < 0)
		return ret;
	return (unsigned)ret == n ? 0 : -EIO;
}

/* A number from the sysfs file dir/name, or 0. */
static unsigned long sysfs_num(const char *dir, const char *name)
{
	char p[256];
	unsigned long v = 0;
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	if (!(f = fopen(p, "re")))
		return 0;
	if (fscanf(f, "%lu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

/* A number from the request queue of the block device under fd (the
 * device itself, or the one holding the file system of a file; a
 * partition's request queue is its disk's). 0 when not known. */
static unsigned long queue_num(int fd, const char *name)
{
	struct stat st;
	char dir[128];
	unsigned long v;

	if (fstat(fd, &st) < 0)
		return 0;
	dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
	snprintf(dir, sizeof(dir), "/sys/dev/block/%u:%u/queue", major(dev), minor(dev));
	v = sysfs_num(dir, name);
	if (!v) {
		snprintf(dir, sizeof(dir), "/sys/dev/block/%u:%u/../queue", major(dev),
			 minor(dev));
		v = sysfs_num(dir, name);
	}
	return v;
}

/* The bytes one request carries: max_sectors_kb. 0 when not known. */
static uint64_t uring_max_request(int fd)
{
	unsigned long kb = queue_num(fd, "max_sectors_kb");

	return kb > (1ul << 30) ? 1ull << 40 : (uint64_t)kb * 1024;
}

/* The memory segments one request carries: max_segments. 0 when not known. */
static unsigned uring_max_segments(int fd)
{
	unsigned long n = queue_num(fd, "max_segments");

	return n > 65535 ? 65535u : (unsigned)n;
}

const struct kvt_dev_ops uring_dev_ops = {
	.dev_open = uring_dev_open,
	.dev_close = uring_dev_close,
	.dev_sync = uring_dev_sync,
	.queue_open = uring_queue_open,
	.queue_close = uring_queue_close,
	.submit = uring_submit,
	.reap = uring_reap,
	.buf_update = uring_buf_update,
	.max_request = uring_max_request,
	.max_segments = uring_max_segments,
};
