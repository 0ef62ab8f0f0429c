/*
 * uring.c - the io_uring device layer of the NVMe tier: opening devices for
 * O_DIRECT (creating and preallocating files, checking block device sizes,
 * refusing file systems without O_DIRECT), one io_uring queue per caller
 * with the RAM arena registered as fixed buffers, and dev_run(), the loop
 * that keeps a batch's I/Os in flight together.
 * Knows nothing about regions, records, keys or the index (disk.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
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

static int uring_dev_open(const char *path, uint64_t want)
{
	struct stat st;
	int created = 0;

	if (stat(path, &st) == 0 && S_ISBLK(st.st_mode)) {
		uint64_t size = 0;
		int fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
		int err;

		if (fd < 0)
			return kvt_fail(-errno, "disk.path %s: %s", path,
					strerror(errno));
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

	/* A file: create it if missing, then preallocate with a plain fd. */
	int pfd = open(path, O_RDWR | O_CLOEXEC);
	if (pfd < 0 && errno == ENOENT) {
		pfd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (pfd < 0 && errno == ENOENT)
			return kvt_fail(-ENOENT, "disk.path %s: directory does not exist",
					path);
		created = pfd >= 0;
	}
	if (pfd < 0)
		return kvt_fail(-errno, "disk.path %s: %s", path, strerror(errno));
	if (fstat(pfd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(pfd);
		return kvt_fail(-EINVAL, "disk.path %s: neither a regular file nor a "
				"block device", path);
	}
	if ((uint64_t)st.st_size < want || created) {
		if (fallocate(pfd, 0, 0, (off_t)want) < 0) {
			int e = errno;

			if (e == EOPNOTSUPP && ftruncate(pfd, (off_t)want) == 0) {
				kvt_log(KVT_LOG_WARN, "disk.path %s: file system cannot "
					"preallocate, using a sparse file", path);
			} else {
				close(pfd);
				if (created)
					unlink(path);
				if (e == ENOSPC || e == EFBIG)
					return kvt_fail(-ENOSPC, "disk.path %s: no space for "
							"%llu bytes on its file system", path,
							(unsigned long long)want);
				return kvt_fail(-e, "disk.path %s: preallocating %llu bytes: %s",
						path, (unsigned long long)want, strerror(e));
			}
		}
	}
	close(pfd);

	int fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		if (created)
			unlink(path);
		if (e == EINVAL)
			return kvt_fail(-EINVAL, "disk.path %s: this file system does not "
					"support O_DIRECT (tmpfs?); refusing buffered I/O", path);
		return kvt_fail(-e, "disk.path %s: %s", path, strerror(e));
	}
	return fd;
}

static void uring_dev_close(int fd)
{
	if (fd >= 0)
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
	unsigned nfds;
	int fds[];
};

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
	ret = io_uring_queue_init(entries, &q->ring, 0);
	if (ret < 0) {
		free(q);
		return kvt_fail(ret, "io_uring_queue_init(%u): %s", entries,
				strerror(-ret));
	}
	if (io_uring_register_files(&q->ring, fds, nfds) == 0)
		q->files_registered = 1;
	if (fixed_base && fixed_len) {
		unsigned n = (unsigned)((fixed_len + DEV_FIXED_CHUNK - 1) / DEV_FIXED_CHUNK);
		struct iovec *iov = calloc(n, sizeof(*iov));

		if (!iov) {
			io_uring_queue_exit(&q->ring);
			free(q);
			return -ENOMEM;
		}
		for (unsigned i = 0; i < n; i++) {
			size_t off = (size_t)i * DEV_FIXED_CHUNK;
			iov[i].iov_base = (char *)fixed_base + off;
			iov[i].iov_len = fixed_len - off < DEV_FIXED_CHUNK ?
					 fixed_len - off : DEV_FIXED_CHUNK;
		}
		ret = io_uring_register_buffers(&q->ring, iov, n);
		free(iov);
		if (ret < 0)
			kvt_log(KVT_LOG_WARN, "disk: io_uring refused to register the "
				"%zu-byte arena as fixed buffers (%s; RLIMIT_MEMLOCK?): "
				"using plain reads and writes", fixed_len, strerror(-ret));
		else
			*nfixed = n;
	}
	*out = q;
	return 0;
}

static void uring_queue_close(void *qp)
{
	struct uring_queue *q = qp;

	if (!q)
		return;
	io_uring_queue_exit(&q->ring);
	free(q);
}

static int uring_submit(void *qp, struct dev_io *const *ios, unsigned n)
{
	struct uring_queue *q = qp;

	for (unsigned i = 0; i < n; i++) {
		struct dev_io *io = ios[i];
		struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
		int fd;

		if (io->dev >= q->nfds)
			return -EINVAL;
		fd = q->files_registered ? io->dev : q->fds[io->dev];

		if (!sqe) {
			int r = io_uring_submit(&q->ring);
			if (r < 0)
				return r;
			sqe = io_uring_get_sqe(&q->ring);
			if (!sqe)
				return -EBUSY;
		}
		if (io->op == DEV_READ) {
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
	for (;;) {
		int r = io_uring_submit(&q->ring);
		if (r >= 0)
			break;
		if (r != -EINTR && r != -EAGAIN)
			return r;
	}
	return (int)n;
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
		io->res = cqe->res;
		io_uring_cqe_seen(&q->ring, cqe);
		done[got++] = io;
	}
	return (int)got;
}

const struct kvt_dev_ops uring_dev_ops = {
	.dev_open = uring_dev_open,
	.dev_close = uring_dev_close,
	.dev_sync = uring_dev_sync,
	.queue_open = uring_queue_open,
	.queue_close = uring_queue_close,
	.submit = uring_submit,
	.reap = uring_reap,
};

/* --- the batch loop ----------------------------------------------------------- */

/* Puts io back to its original extent after (partial) retries. */
static void io_rewind(struct dev_io *io)
{
	io->buf = (char *)io->buf - io->done;
	io->off -= io->done;
	io->len += io->done;
}

int dev_run(const struct kvt_dev_ops *ops, void *q, struct dev_io **ios,
	    unsigned n, unsigned depth, _Atomic uint64_t *inflight)
{
	struct dev_io **todo, **sub, **done;
	unsigned head = 0, ntodo = n, nin = 0;
	int qerr = 0;

	if (n == 0)
		return 0;
	if (depth == 0)
		depth = 1;
	todo = malloc(sizeof(*todo) * ((size_t)n + 2u * depth));
	if (!todo) {
		for (unsigned i = 0; i < n; i++)
			ios[i]->res = -ENOMEM;
		return -ENOMEM;
	}
	sub = todo + n;
	done = sub + depth;
	for (unsigned i = 0; i < n; i++) {
		todo[i] = ios[i];
		ios[i]->done = 0;
		ios[i]->res = 0;
	}

	while (ntodo || nin) {
		unsigned k = depth - nin < ntodo ? depth - nin : ntodo;

		for (unsigned i = 0; i < k; i++)
			sub[i] = todo[(head + i) % n];
		if (k) {
			int r = ops->submit(q, sub, k);

			if (r < 0) {
				/* Nothing of this round went out: fail all not yet sent. */
				qerr = r;
				for (unsigned i = 0; i < ntodo; i++) {
					struct dev_io *io = todo[(head + i) % n];
					io_rewind(io);
					io->res = r;
				}
				ntodo = 0;
				k = 0;
			} else {
				head = (head + k) % n;
				ntodo -= k;
				nin += k;
				if (inflight)
					atomic_fetch_add_explicit(inflight, k,
								  memory_order_relaxed);
			}
		}
		if (!nin)
			break;
		int got = ops->reap(q, done, depth, 1);
		if (got < 0) {
			/* The queue is broken: we cannot learn the outcome. */
			qerr = got;
			for (unsigned i = 0; i < n; i++)
				if (ios[i]->res == 0 && ios[i]->len) {
					ios[i]->res = got;
				}
			if (inflight)
				atomic_fetch_sub_explicit(inflight, nin, memory_order_relaxed);
			break;
		}
		nin -= (unsigned)got;
		if (inflight)
			atomic_fetch_sub_explicit(inflight, (unsigned)got,
						  memory_order_relaxed);
		for (int i = 0; i < got; i++) {
			struct dev_io *io = done[i];
			int32_t r = io->res;

			if (r >= 0 && (uint32_t)r < io->len) {
				if (r == 0) {
					io_rewind(io);
					io->res = -EIO;
					continue;
				}
				/* Short transfer: continue with the rest. */
				io->buf = (char *)io->buf + r;
				io->off += (uint32_t)r;
				io->len -= (uint32_t)r;
				io->done += (uint32_t)r;
				io->res = 0;
				todo[(head + ntodo) % n] = io;
				ntodo++;
				continue;
			}
			io_rewind(io);
			if (r >= 0)
				io->res = (int32_t)io->len;
		}
	}
	free(todo);
	return qerr;
}
