/*
 * dev.c - dev_run(), the batch loop over the device seam (dev.h): keeps a
 * batch's I/Os (plain and vectored ones) in flight together on a queue of any implementation,
 * resubmits short transfers and what a submission did not take, runs the
 * caller's hooks (prepare an io before it goes out, finish one as it
 * completes) under the I/O still in flight, and drains a failed queue
 * before it returns. Knows nothing about io_uring (uring.c) nor about
 * regions, records or keys (the disk tier).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev.h"
#include "internal.h"

/* --- vectored ios -------------------------------------------------------------- */

int dev_io_setv(struct dev_io *io, const struct iovec *iov, unsigned n)
{
	uint64_t len = 0;

	if (n == 0 || n > DEV_SEG_MAX)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		len += iov[i].iov_len;
	if (len > UINT32_MAX)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		io->seg[i] = iov[i];
	io->nseg = (uint8_t)n;
	io->buf = iov[0].iov_base;
	io->len = (uint32_t)len;
	return 0;
}

unsigned dev_io_iov(const struct dev_io *io, struct iovec *iov)
{
	uint64_t skip = io->done, left = io->len;
	unsigned k = 0;

	if (!io->nseg) {
		iov[0].iov_base = io->buf;
		iov[0].iov_len = io->len;
		return 1;
	}
	for (unsigned i = 0; i < io->nseg && i < DEV_SEG_MAX && left; i++) {
		uint64_t l = io->seg[i].iov_len;

		if (skip >= l) {
			skip -= l;
			continue;
		}
		l -= skip;
		if (l > left)
			l = left;
		iov[k].iov_base = (char *)io->seg[i].iov_base + skip;
		iov[k].iov_len = (size_t)l;
		k++;
		left -= l;
		skip = 0;
	}
	return left ? 0 : k;
}

/* 1 when io's segments, if any, are as many as allowed and hold its len. */
static int segs_ok(const struct dev_io *io)
{
	uint64_t sum = 0;

	if (!io->nseg)
		return 1;
	if (io->nseg > DEV_SEG_MAX)
		return 0;
	for (unsigned i = 0; i < io->nseg; i++)
		sum += io->seg[i].iov_len;
	return sum == (uint64_t)io->len + io->done;
}

/* --- the batch loop ----------------------------------------------------------- */

/* With a prep hook, ready ios go to the device once this many bytes are
 * ready (or the free slots are used up), so the device starts early. */
#define SUBMIT_BYTES (512u << 10)

struct run {
	const struct kvt_dev_ops *ops;
	void *q;
	struct dev_io **ios;
	unsigned n, depth;
	_Atomic uint64_t *inflight;
	const struct dev_hooks *h;
	struct dev_io **retry;    /* ring of short transfers to resubmit */
	struct dev_io **sub;      /* ios of the submission being built */
	struct dev_io **reaped;
	struct dev_io **fin;      /* complete, their done hook not yet run */
	uint8_t *final;           /* per io: res is final */
	unsigned next;            /* first io never taken for submission */
	unsigned prepped;         /* ios [0, prepped) went through prep */
	unsigned rhead, nretry, nin, nfinal, nfin;
	unsigned held;            /* room taken on the shared counter, not used yet */
	int qerr;
};

/* Puts io back to its original extent after (partial) retries. */
static void io_rewind(struct dev_io *io)
{
	if (!io->nseg)
		io->buf = (char *)io->buf - io->done;
	io->off -= io->done;
	io->len += io->done;
	io->done = 0;
}

/* Makes io's outcome final: its full length when res >= 0, else res. Its
 * done hook runs now, or at the next run_done() when deferred. */
static void finish(struct run *r, struct dev_io *io, int32_t res, int defer)
{
	io_rewind(io);
	io->res = res >= 0 ? (int32_t)io->len : res;
	r->final[io->idx] = 1;
	r->nfinal++;
	if (!r->h || !r->h->done)
		return;
	if (defer)
		r->fin[r->nfin++] = io;
	else
		r->h->done(r->h->arg, io->idx, io);
}

static void run_done(struct run *r)
{
	for (unsigned i = 0; i < r->nfin; i++)
		r->h->done(r->h->arg, r->fin[i]->idx, r->fin[i]);
	r->nfin = 0;
}

/* Runs the prep hook on the next io not prepared yet. */
static void prep_next(struct run *r)
{
	struct dev_io *io = r->ios[r->prepped++];
	int e = r->h->prep(r->h->arg, io->idx, io);

	io->done = 0;
	io->res = e < 0 ? e : 0; /* a failure is seen when the io's turn comes */
}

/* Fails every io that is neither final nor in flight with err. */
static void fail_unsent(struct run *r, int err)
{
	while (r->nretry) {
		finish(r, r->retry[r->rhead], err, 0);
		r->rhead = (r->rhead + 1) % r->depth;
		r->nretry--;
	}
	for (; r->next < r->n; r->next++)
		finish(r, r->ios[r->next], err, 0);
}

/* The counter of ios in flight the runs sharing the device keep together
 * (hooks->shared), or NULL where the run does not share. */
static _Atomic uint64_t *shared_of(const struct run *r)
{
	return r->h ? r->h->shared : NULL;
}

/* n of the run's ios are no longer in flight: off its counters. */
static void count_back(struct run *r, unsigned n)
{
	_Atomic uint64_t *sh = shared_of(r);

	if (r->inflight)
		atomic_fetch_sub_explicit(r->inflight, n, memory_order_relaxed);
	if (sh)
		atomic_fetch_sub_explicit(sh, n, memory_order_relaxed);
}

/* Submits sub[0..k). What the queue did not take goes back to the retry
 * ring, to be submitted again. On failure nothing of it went out: it and
 * every io not yet sent fail with the error, and no more is submitted. */
static void flush(struct run *r, unsigned k)
{
	int e = r->ops->submit(r->q, r->sub, k);

	if (e == 0)
		e = -EAGAIN; /* no progress: the queue is of no use */
	if (e < 0) {
		r->qerr = e;
		for (unsigned i = 0; i < k; i++)
			finish(r, r->sub[i], e, 0);
		fail_unsent(r, e);
		return;
	}
	unsigned sent = (unsigned)e < k ? (unsigned)e : k;
	for (unsigned i = sent; i < k; i++)
		r->retry[(r->rhead + r->nretry++) % r->depth] = r->sub[i];
	r->nin += sent;
	if (r->inflight)
		atomic_fetch_add_explicit(r->inflight, sent, memory_order_relaxed);
	_Atomic uint64_t *sh = shared_of(r);
	if (sh) {
		/* those the fill took room for are counted already */
		unsigned held = sent < r->held ? sent : r->held;

		r->held -= held;
		if (sent > held)
			atomic_fetch_add_explicit(sh, sent - held, memory_order_relaxed);
	}
}

/*
 * The most ios the run may have in flight once this fill is done: its
 * depth, and where runs share the device (hooks->shared), no more than the
 * depth leaves beside what they have in flight together, but at least one
 * while none of its own is. The room it may use is taken on the shared
 * counter before its ios go out (r->held), so that runs filling at once
 * cannot take the same room.
 */
static unsigned fill_limit(struct run *r)
{
	_Atomic uint64_t *sh = shared_of(r);

	if (!sh)
		return r->depth;
	uint64_t all = atomic_load_explicit(sh, memory_order_relaxed), want;

	do {
		uint64_t room = all < r->depth ? r->depth - all : 0;

		want = r->depth - r->nin;
		if (want > room)
			want = room;
		if (!want && !r->nin)
			want = 1;
	} while (want && !atomic_compare_exchange_weak_explicit(sh, &all, all + want,
								 memory_order_relaxed,
								 memory_order_relaxed));
	r->held = (unsigned)want;
	return r->nin + (unsigned)want;
}

/* Fills the free slots: retries first, then fresh ios (prepared first). */
static void fill(struct run *r)
{
	int prep = r->h && r->h->prep;
	uint64_t bytes = 0;
	unsigned k = 0, depth = fill_limit(r);

	while (!r->qerr && r->nin + k < depth) {
		struct dev_io *io;

		if (r->nretry) {
			io = r->retry[r->rhead];
			r->rhead = (r->rhead + 1) % r->depth;
			r->nretry--;
		} else if (r->next < r->n) {
			if (prep && r->next == r->prepped)
				prep_next(r);
			io = r->ios[r->next++];
			if (io->res >= 0 && !segs_ok(io))
				io->res = -EINVAL;
			if (io->res < 0) {
				finish(r, io, io->res, 0);
				continue;
			}
		} else {
			break;
		}
		r->sub[k++] = io;
		bytes += io->len;
		if (prep && bytes >= SUBMIT_BYTES) {
			flush(r, k);
			k = 0;
			bytes = 0;
		}
	}
	if (k && !r->qerr)
		flush(r, k);
	if (r->held) { /* room taken and not used: given back */
		atomic_fetch_sub_explicit(shared_of(r), r->held, memory_order_relaxed);
		r->held = 0;
	}
}

/*
 * Reaps the ios in flight of a run whose queue failed until none is left,
 * retrying failed reaps with a growing pause (1 ms to 100 ms) for up to
 * DRAIN_MS; each reaped io fails with the queue's error. Those still in
 * flight after that are left to the caller as lost.
 */
#define DRAIN_MS 30000u

static void drain(struct run *r)
{
	unsigned pause_ms = 1, waited_ms = 0;

	while (r->nin && waited_ms < DRAIN_MS) {
		int got = r->ops->reap(r->q, r->reaped, r->depth, 1);

		if (got < 0) {
			struct timespec ts = { 0, (long)pause_ms * 1000000L };

			nanosleep(&ts, NULL);
			waited_ms += pause_ms;
			pause_ms = pause_ms < 100 ? pause_ms * 2 : 100;
			continue;
		}
		r->nin -= (unsigned)got;
		count_back(r, (unsigned)got);
		for (int i = 0; i < got; i++)
			finish(r, r->reaped[i], r->qerr, 0);
	}
	if (r->nin) {
		kvt_log(KVT_LOG_ERR, "disk: an I/O queue failed (%s) with %u I/Os in "
			"flight that could not be reaped in %u ms", strerror(-r->qerr),
			r->nin, DRAIN_MS);
		count_back(r, r->nin);
	}
}

int dev_run_hooks(const struct kvt_dev_ops *ops, void *q, struct dev_io **ios,
		  unsigned n, unsigned depth, _Atomic uint64_t *inflight,
		  const struct dev_hooks *hooks)
{
	struct run r = { .ops = ops, .q = q, .ios = ios, .n = n, .depth = depth,
			 .inflight = inflight, .h = hooks };
	struct dev_io **mem;

	if (n == 0)
		return 0;
	if (r.depth == 0)
		r.depth = 1;
	for (unsigned i = 0; i < n; i++) {
		ios[i]->idx = i;
		ios[i]->done = 0;
		ios[i]->res = 0;
		ios[i]->lost = 0;
	}
	mem = malloc(sizeof(*mem) * (4u * (size_t)r.depth));
	r.final = calloc(n, 1);
	if (!mem || !r.final) {
		free(mem);
		free(r.final);
		for (unsigned i = 0; i < n; i++) {
			ios[i]->res = -ENOMEM;
			if (hooks && hooks->done)
				hooks->done(hooks->arg, i, ios[i]);
		}
		return -ENOMEM;
	}
	r.retry = mem;
	r.sub = mem + r.depth;
	r.reaped = mem + 2 * r.depth;
	r.fin = mem + 3 * r.depth;

	while (r.nfinal < n) {
		fill(&r);
		run_done(&r);
		if (r.nfinal == n || !r.nin)
			continue;

		/* While the queue is full, prepare the next ios instead of
		 * sleeping; look for completions after each. */
		unsigned min = 1;
		if (r.h && r.h->prep && !r.qerr && r.prepped < n &&
		    r.prepped - r.next < r.depth) {
			prep_next(&r);
			min = 0;
		} else if (r.h && r.h->idle && !r.qerr && r.h->idle(r.h->arg)) {
			min = 0;
		}
		int got = ops->reap(q, r.reaped, r.depth, min);
		if (got < 0) {
			/* The queue is broken: nothing more goes out, and the
			 * batch fails; but the kernel may still be writing into
			 * the buffers of the ios in flight, so they are drained
			 * before any is handed back. */
			r.qerr = got;
			fail_unsent(&r, got);
			drain(&r);
			for (unsigned i = 0; i < n; i++)
				if (!r.final[i]) {
					ios[i]->lost = 1;
					finish(&r, ios[i], got, 0);
				}
			break;
		}
		r.nin -= (unsigned)got;
		count_back(&r, (unsigned)got);
		for (int i = 0; i < got; i++) {
			struct dev_io *io = r.reaped[i];
			int32_t res = io->res;

			if (res >= 0 && (uint32_t)res < io->len) {
				if (res == 0) {
					finish(&r, io, -EIO, 1);
					continue;
				}
				/* Short transfer: continue with the rest. */
				if (!io->nseg)
					io->buf = (char *)io->buf + res;
				io->off += (uint32_t)res;
				io->len -= (uint32_t)res;
				io->done += (uint32_t)res;
				io->res = 0;
				r.retry[(r.rhead + r.nretry++) % r.depth] = io;
				continue;
			}
			finish(&r, io, res, 1);
		}
	}
	run_done(&r);
	free(mem);
	free(r.final);
	return r.qerr;
}

int dev_run(const struct kvt_dev_ops *ops, void *q, struct dev_io **ios,
	    unsigned n, unsigned depth, _Atomic uint64_t *inflight)
{
	return dev_run_hooks(ops, q, ios, n, depth, inflight, NULL);
}
