/*
 * faultdev.c - the fault-injecting device layer of faultdev.h.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "dev.h"
#include "faultdev.h"
#include "uring.h"

struct fault_state faults;
struct kvt_dev_ops fops;


struct fq {
	void *inner;
	int broken;
	unsigned nfds;
	int fds[64];              /* the devices' fds, by io->dev */
	unsigned npend;
	struct dev_io *pend[8192];
};

static int f_queue_open(const int *fds, unsigned nfds, unsigned entries,
			void *base, size_t len, unsigned *nfixed, void **q)
{
	struct fq *f = calloc(1, sizeof(*f));
	int err;

	if (!f)
		return -ENOMEM;
	f->nfds = nfds < 64 ? nfds : 64;
	for (unsigned i = 0; i < f->nfds; i++)
		f->fds[i] = fds[i];
	err = uring_dev_ops.queue_open(fds, nfds, entries, base, len, nfixed, &f->inner);
	if (err) {
		free(f);
		return err;
	}
	*q = f;
	return 0;
}

static void f_queue_close(void *q)
{
	struct fq *f = q;

	atomic_fetch_add(&faults.closes, 1);
	uring_dev_ops.queue_close(f->inner);
	free(f);
}

static int take(_Atomic int *c)
{
	int v = atomic_load(c);

	while (v > 0)
		if (atomic_compare_exchange_weak(c, &v, v - 1))
			return 1;
	return 0;
}

/* Counts a write going to the device and marks its fd unsynced. */
static void note_write(struct fq *f, const struct dev_io *io)
{
	atomic_fetch_add(&faults.writes, 1);
	if (io->dev < f->nfds && f->fds[io->dev] >= 0 && f->fds[io->dev] < FAULT_FDS)
		atomic_store(&faults.unsynced[f->fds[io->dev]], 1);
}

static int f_dev_sync(int fd)
{
	int r = uring_dev_ops.dev_sync(fd);

	if (r == 0 && fd >= 0 && fd < FAULT_FDS)
		atomic_store(&faults.unsynced[fd], 0);
	return r;
}

static int f_submit(void *q, struct dev_io *const *ios, unsigned n)
{
	struct fq *f = q;
	struct dev_io *fwd[8192];
	unsigned m = 0;

	if (f->broken)
		atomic_fetch_add(&faults.broken_used, 1);
	for (unsigned i = 0; i < n; i++) {
		_Atomic int *c = ios[i]->op == DEV_READ ? &faults.fail_reads
							: &faults.fail_writes;
		if (take(c)) {
			int e = atomic_load(&faults.fail_errno);
			ios[i]->res = -(e ? e : EIO);
			f->pend[f->npend++] = ios[i];
		} else {
			fwd[m++] = ios[i];
			if (ios[i]->op == DEV_WRITE)
				note_write(f, ios[i]);
			if (ios[i]->op == DEV_READ) {
				int k = atomic_fetch_add(&faults.nread_log, 1);
				if (k < 256)
					faults.read_log[k] = atomic_load(&faults.reads_out);
				atomic_fetch_add(&faults.reads_out, 1);
			}
		}
	}
	if (m) {
		int r = uring_dev_ops.submit(f->inner, fwd, m);
		if (r < 0)
			return r;
	}
	return (int)n;
}

static int f_reap(void *q, struct dev_io **done, unsigned max, unsigned min)
{
	struct fq *f = q;
	unsigned got = 0;
	int d = atomic_load(&faults.delay_us);

	if (d)
		usleep((useconds_t)d);
	if (take(&faults.break_reaps)) {
		f->broken = 1;
		return -EBADR;
	}
	while (f->npend && got < max)
		done[got++] = f->pend[--f->npend];
	if (got < max && (got < min || got == 0)) {
		int r = uring_dev_ops.reap(f->inner, done + got, max - got,
					   got < min ? min - got : 0);
		if (r < 0)
			return got ? (int)got : r;
		for (int i = 0; i < r; i++) {
			struct dev_io *io = done[got + i];
			if (io->op == DEV_READ)
				atomic_fetch_sub(&faults.reads_out, 1);
			if (io->op == DEV_READ && io->res == (int32_t)io->len &&
			    io->len >= 2 * DEV_ALIGN && take(&faults.short_reads))
				io->res = (int32_t)(io->len / 2 / DEV_ALIGN * DEV_ALIGN);
			int sl = (int)io->len;
			if (io->op == DEV_READ && io->res == sl &&
			    atomic_compare_exchange_strong(&faults.scribble_len, &sl, 0))
				((unsigned char *)(io->nseg ? io->seg[io->nseg - 1].iov_base :
						   io->buf))[0] ^= 0xff;
		}
		got += (unsigned)r;
	}
	return (int)got;
}

static int f_buf_update(void *q, unsigned first, void *base, size_t len)
{
	struct fq *f = q;

	return uring_dev_ops.buf_update(f->inner, first, base, len);
}

static uint64_t f_max_request(int fd)
{
	uint64_t m = atomic_load(&faults.max_req);

	return m ? m : uring_dev_ops.max_request(fd);
}

static unsigned f_max_segments(int fd)
{
	unsigned m = atomic_load(&faults.max_segs);

	if (m == SEGS_UNKNOWN)
		return 0;
	return m ? m : uring_dev_ops.max_segments(fd);
}

void faultdev_init(void)
{
	fops = uring_dev_ops;
	fops.dev_sync = f_dev_sync;
	fops.queue_open = f_queue_open;
	fops.queue_close = f_queue_close;
	fops.submit = f_submit;
	fops.reap = f_reap;
	fops.buf_update = f_buf_update;
	fops.max_request = f_max_request;
	fops.max_segments = f_max_segments;
}
