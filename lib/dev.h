/*
 * dev.h - the device seam under the NVMe tier: a small ops table (open a
 * device, open an I/O queue over devices, submit reads/writes at offsets,
 * reap completions) that an implementation fills (uring.c: io_uring; tests:
 * wrappers that inject errors, short transfers and latency), and dev_run(),
 * which drives a batch of I/Os through any implementation with a bounded
 * number in flight, running the caller's per-io work (dev_hooks: checksums)
 * while the rest is in flight (dev.c).
 * Knows nothing about regions, records, keys or the index: that is the disk
 * tier (disk*.c).
 */
#ifndef KVT_DEV_H
#define KVT_DEV_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define DEV_ALIGN 4096u
/* Segments a vectored io carries at most. */
#define DEV_SEG_MAX 4u

enum dev_op { DEV_READ = 1, DEV_WRITE = 2 };

/*
 * One read or write. The caller fills everything above res. A plain io
 * moves len bytes from or into buf. A vectored one (nseg 1..DEV_SEG_MAX,
 * dev_io_setv) moves len bytes, its segments' sum, from or into seg[0..nseg)
 * in order, as one request to the device (a record's header page and its
 * payload, say, without copying them together); its buf is seg[0]'s base,
 * and it never uses a registered buffer (io_uring's vectored ops take none
 * on the kernels served), so its fixed is ignored. Each segment, like buf,
 * is DEV_ALIGN aligned and a multiple of DEV_ALIGN long for O_DIRECT.
 */
struct dev_io {
	void *buf;          /* DEV_ALIGN aligned for O_DIRECT */
	uint64_t off;       /* byte offset on the device, DEV_ALIGN aligned */
	uint32_t len;       /* bytes, a multiple of DEV_ALIGN */
	uint16_t dev;       /* index into the fds the queue was opened with */
	uint8_t op;         /* DEV_READ or DEV_WRITE */
	int8_t fixed;       /* registered buffer index, or -1 for a plain op */
	uint8_t nseg;       /* 0: plain; else the segments of a vectored io */
	struct iovec seg[DEV_SEG_MAX];
	struct iovec sub[DEV_SEG_MAX]; /* the implementation's, while in flight:
					  what is left of seg (dev_io_iov) */
	int32_t res;        /* set at completion: bytes moved or -errno */
	uint32_t done;      /* bytes dev_run has completed so far (retries) */
	uint32_t idx;       /* set by dev_run: the io's position in its batch */
	uint8_t lost;       /* set by dev_run: the queue failed with this io in
			       flight and it could not be reaped, so the
			       kernel may still use its buffer: never reuse it */
};

/*
 * Makes io a vectored one over the n segments iov[0..n) (1..DEV_SEG_MAX),
 * its len their sum. Returns 0, or -EINVAL (too many or none, or a sum past
 * 4 GiB) leaving io as it was.
 */
int dev_io_setv(struct dev_io *io, const struct iovec *iov, unsigned n);

/*
 * The iovec of what io has still to move: its len bytes from its done'th
 * on (a plain io: buf, which dev_run advances past what moved; a vectored
 * one: its segments, skipping the done bytes that moved). Fills iov (room
 * for DEV_SEG_MAX) and returns how many entries, 0 where io's segments do
 * not hold done + len bytes. For implementations of the seam.
 */
unsigned dev_io_iov(const struct dev_io *io, struct iovec *iov);

/*
 * The seam. Queue handles are opaque to callers; an implementation that wraps
 * another keeps the inner handle inside its own.
 */
struct kvt_dev_ops {
	/*
	 * Opens path for O_DIRECT read/write, exclusively: a file is locked
	 * (flock LOCK_EX on the returned open file), a block device opened
	 * with O_EXCL, so no second store of any process can open it until
	 * dev_close (or the process dies and the kernel has finished its
	 * I/O; a holder that has exited, or that /proc/locks lists without
	 * a pid, is waited for, up to 10 s). A
	 * missing file is created and preallocated to want bytes (a shorter
	 * existing file is extended the same way, what it held kept); a
	 * block device is used raw and must hold want bytes. *held (NULL:
	 * not wanted) = the bytes from offset 0 that hold what was there
	 * before this open: want, less for a file found shorter (0 for one
	 * created), whose bytes past that read as zeros now; an existing
	 * file found empty is logged at KVT_LOG_WARN (what it held is gone),
	 * one created is not. Returns an fd
	 * or a negative errno with kvt_last_error() set: -EBUSY (in use; the
	 * text names the holding process where /proc/locks tells it),
	 * -ENOENT (missing directory), -ENOSPC (no room on the file system,
	 * device too small), -EFBIG (a file of want bytes is past what the
	 * file system holds or past RLIMIT_FSIZE), -EINVAL (no O_DIRECT on
	 * this file system),
	 * others from open(2).
	 */
	int (*dev_open)(const char *path, uint64_t want, uint64_t *held);
	/* Ends the lock and closes fd. Close the queues over fd first: their
	 * registered files would keep the device open (and locked). */
	void (*dev_close)(int fd);
	/* Makes completed writes on fd durable (fdatasync). 0 or -errno. */
	int (*dev_sync)(int fd);
	/*
	 * Opens a queue of `entries` slots over fds[0..nfds) and registers
	 * [fixed_base, fixed_base+fixed_len) as fixed buffers (NULL: none;
	 * refusal by the kernel is logged and leaves *nfixed 0). Buffer i
	 * covers DEV_FIXED_CHUNK bytes from fixed_base + i * DEV_FIXED_CHUNK.
	 * Where the kernel allows, the table also holds DEV_FIXED_SPARE
	 * empty entries after the arena's (fewer when the arena's and the
	 * spare ones would pass DEV_FIXED_MAX), for buf_update.
	 * Returns 0 and *q, or -errno.
	 */
	int (*queue_open)(const int *fds, unsigned nfds, unsigned entries,
			  void *fixed_base, size_t fixed_len, unsigned *nfixed,
			  void **q);
	void (*queue_close)(void *q);
	/*
	 * Queues and submits ios[0..n) (n <= free slots): plain ones and
	 * vectored ones (what is left of them: dev_io_iov, which may keep its
	 * iovec in the io's sub while it is in flight). Returns how many of
	 * them went out, counted from ios[0] (at least 1; the caller submits
	 * the rest again), or -errno when none did and none ever will.
	 */
	int (*submit)(void *q, struct dev_io *const *ios, unsigned n);
	/*
	 * Waits until at least min ios have completed, stores up to max of them
	 * in done[] with res set, and returns how many, or -errno.
	 */
	int (*reap)(void *q, struct dev_io **done, unsigned max, unsigned min);
	/*
	 * Optional (NULL: caller memory is never registered). Makes
	 * [base, base+len) the fixed buffers from entry first on (one per
	 * DEV_FIXED_CHUNK), or with base NULL empties the entries len
	 * covers. The entries must be spare ones of this queue. Returns 0 or
	 * -errno (-ENOSPC: not spare entries of this queue; others from the
	 * kernel, such as -ENOMEM past RLIMIT_MEMLOCK).
	 */
	int (*buf_update)(void *q, unsigned first, void *base, size_t len);
	/*
	 * Optional (NULL: not known). The bytes one request to the device
	 * under fd carries whole (its max_sectors_kb): a longer transfer is
	 * split into several requests. 0 when not known.
	 */
	uint64_t (*max_request)(int fd);
	/*
	 * Optional (NULL: the implementation takes no vectored ios, and the
	 * disk tier sends it none). The memory segments one request to the
	 * device under fd carries (its max_segments): a transfer into more
	 * scattered pages than that is split. 0 when not known.
	 */
	unsigned (*max_segments)(int fd);
};

/* Bytes each registered buffer covers (the kernel caps one at 1 GiB). */
#define DEV_FIXED_CHUNK (1ull << 30)
/* Empty entries a queue keeps for caller memory, and the most entries a
 * dev_io can name (its fixed index is an int8_t). */
#define DEV_FIXED_SPARE 64u
#define DEV_FIXED_MAX 128u

/*
 * Work a caller overlaps with a batch's I/O (dev_run_hooks). Either hook may
 * be NULL; both run on the calling thread, never concurrently.
 *
 * prep(arg, i, io) runs once for ios[i], in index order, before that io
 * is first submitted and while earlier ios are in flight: it fills the
 * io's buffer (for example checksums a payload and writes the header that
 * carries the sum) and may set its buf and len. Returning a negative errno
 * fails the io without submitting it (res = that errno). An io failed
 * before its turn (the queue refused a submission) is never prepared.
 *
 * done(arg, i, io) runs exactly once for ios[i] as soon as it is complete
 * (res final, the io rewound to its original extent), while later ios are
 * still in flight: a read can be verified there. It is also called for ios
 * that failed or were never submitted.
 */
struct dev_hooks {
	int (*prep)(void *arg, unsigned i, struct dev_io *io);
	void (*done)(void *arg, unsigned i, struct dev_io *io);
	/* Optional: where the run would wait for a completion, a bounded
	 * piece of the caller's own work; nonzero when it did some (the run
	 * then looks for completions without waiting, and calls it again),
	 * 0 when it has none (the run waits). */
	int (*idle)(void *arg);
	void *arg;
	/* Optional: the ios in flight of the runs that share the device,
	 * this one's included (the runs count them). The run keeps no more
	 * than its depth leaves beside them in flight, but at least one:
	 * runs side by side keep one depth in flight between them (plus one
	 * for each run that found none left), not one depth each; a run takes
	 * what room the others leave, as soon as it fills its free slots. The
	 * room is taken on the counter before the ios go out. */
	_Atomic uint64_t *shared;
};

/*
 * Runs ios[0..n) on q, keeping at most depth in flight, resubmitting the rest
 * of short transfers (a transfer that makes no progress fails with -EIO) and
 * the ios a submission did not take. A vectored io whose segments do not
 * add up to its len, or has more than DEV_SEG_MAX, fails with -EINVAL
 * without being submitted. Returns when every io is complete; each
 * io's res is then its full length or a negative errno. *inflight (may be
 * NULL) tracks ios in flight. Returns 0, or a negative errno when the queue
 * itself failed (every io then has res set, the failed ones to that error).
 * A failed queue must not be used again (close it). Before returning, the
 * ios it had in flight are reaped (drained), so that no buffer is handed
 * back while the kernel may still write into it; an io that could not be
 * drained in 30 s has lost set.
 */
int dev_run(const struct kvt_dev_ops *ops, void *q, struct dev_io **ios,
	    unsigned n, unsigned depth, _Atomic uint64_t *inflight);

/*
 * dev_run() with hooks (NULL: none). With a prep hook, ios are prepared and
 * submitted a few at a time as soon as each is ready, and ios beyond the
 * free slots are prepared ahead while the queue is full, so that the
 * caller's CPU work runs under the device's; an idle hook does the same
 * with work of the caller's own, one piece between looks for completions,
 * so a completion waits at most one piece to be sent on.
 */
int dev_run_hooks(const struct kvt_dev_ops *ops, void *q, struct dev_io **ios,
		  unsigned n, unsigned depth, _Atomic uint64_t *inflight,
		  const struct dev_hooks *hooks);

#endif
