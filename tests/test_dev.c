/*
 * test_dev.c - the device seam's batch loop (lib/dev.c): dev_run() driven
 * through a fake in-memory device that completes out of order, cuts
 * transfers short, takes part of a submission and fails on demand; the
 * hooks that prepare each io before it goes out and finish it as it
 * completes; a failed queue drained before dev_run returns; vectored ios
 * (several segments, one request) cut short, refused when malformed.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "dev.h"
#include "util.h"

/* --- a fake device: a byte array, completions in reverse order -------------- */

static struct {
	unsigned char mem[1 << 20];
	struct dev_io *pend[256];
	unsigned npend, max_inflight, short_every, zero_next, submits;
	unsigned seen_segs;   /* iovec entries the fake moved, over all reaps */
	unsigned submit_max;  /* a submission takes at most this many (0: all) */
	int fail_submit;
	int fail_reap_once;   /* the next reap with ios pending fails, -EIO */
	unsigned reaps_nowait; /* reaps asked not to wait (min 0) */
	unsigned hold;        /* a reap completes nothing while this is nonzero
				 (the idle hook counts it down) */
} fake;

static int fake_submit(void *q, struct dev_io *const *ios, unsigned n)
{
	(void)q;
	if (fake.fail_submit)
		return -EBUSY;
	fake.submits++;
	if (fake.submit_max && n > fake.submit_max)
		n = fake.submit_max;
	for (unsigned i = 0; i < n; i++)
		fake.pend[fake.npend++] = ios[i];
	if (fake.npend > fake.max_inflight)
		fake.max_inflight = fake.npend;
	return (int)n;
}

static int fake_reap(void *q, struct dev_io **done, unsigned max, unsigned min)
{
	unsigned got = 0;

	(void)q;
	if (!min)
		fake.reaps_nowait++;
	/* a real queue would wait for ever for ios it was never given */
	if (!fake.npend && min)
		return -EDEADLK;
	if (fake.hold) {
		assert_int_equal(min, 0); /* waiting would wait for ever */
		return 0;
	}
	if (fake.npend && fake.fail_reap_once) {
		fake.fail_reap_once = 0;
		return -EIO;
	}
	while (fake.npend && got < max) {
		struct dev_io *io = fake.pend[--fake.npend];
		uint32_t len = io->len;

		if (fake.zero_next) {
			fake.zero_next--;
			len = 0;
		} else if (fake.short_every && len > 512) {
			len /= 2;
		}
		struct iovec iov[DEV_SEG_MAX];
		unsigned k = dev_io_iov(io, iov);

		fake.seen_segs += k;
		if (io->off + len > sizeof(fake.mem) || !k) {
			io->res = -EINVAL;
		} else {
			/* len bytes across the segments, in order */
			uint64_t at = io->off, left = len;
			for (unsigned j = 0; j < k && left; j++) {
				size_t l = iov[j].iov_len < left ? iov[j].iov_len : left;
				if (io->op == DEV_READ)
					memcpy(iov[j].iov_base, fake.mem + at, l);
				else
					memcpy(fake.mem + at, iov[j].iov_base, l);
				at += l;
				left -= l;
			}
			io->res = (int32_t)len;
		}
		done[got++] = io;
	}
	return (int)got;
}

static const struct kvt_dev_ops fake_ops = {
	.submit = fake_submit,
	.reap = fake_reap,
};

static void fake_reset(void)
{
	memset(&fake, 0, sizeof(fake));
}

static void dev_run_keeps_depth_and_completes_all(void **st)
{
	(void)st;
	struct dev_io io[40], *p[40];
	static unsigned char src[40][4096], dst[40][4096];
	_Atomic uint64_t inflight = 0;

	fake_reset();
	for (int i = 0; i < 40; i++) {
		memset(src[i], i + 1, sizeof(src[i]));
		memset(&io[i], 0, sizeof(io[i]));
		io[i].op = DEV_WRITE;
		io[i].buf = src[i];
		io[i].off = (uint64_t)i * 4096;
		io[i].len = 4096;
		io[i].fixed = -1;
		p[i] = &io[i];
	}
	assert_int_equal(dev_run(&fake_ops, NULL, p, 40, 8, &inflight), 0);
	assert_int_equal(fake.max_inflight, 8);
	assert_int_equal(inflight, 0);
	for (int i = 0; i < 40; i++) {
		assert_int_equal(io[i].res, 4096);
		io[i].op = DEV_READ;
		io[i].buf = dst[i];
	}
	assert_int_equal(dev_run(&fake_ops, NULL, p, 40, 64, NULL), 0);
	assert_int_equal(fake.max_inflight, 40); /* all of a batch in flight together */
	for (int i = 0; i < 40; i++)
		assert_memory_equal(src[i], dst[i], 4096);
}

/* Runs that share the device (hooks.shared) keep no more than their depth
 * leaves beside the others' ios in flight (the shared counter), at least
 * one; every io still completes, and the counter is left as it was. */
static void dev_run_shares_its_depth_with_other_runs(void **st)
{
	(void)st;
	static const struct { int share; unsigned others, depth, want; } c[] = {
		{ 0, 30, 8, 8 }, /* not sharing: the counter is not looked at */
		{ 1, 0, 8, 8 }, { 1, 4, 8, 4 }, { 1, 6, 8, 2 }, { 1, 7, 8, 1 },
		{ 1, 8, 8, 1 }, { 1, 30, 8, 1 },
	};
	struct dev_io io[40], *p[40];
	static unsigned char buf[40][4096];

	for (size_t t = 0; t < sizeof(c) / sizeof(c[0]); t++) {
		_Atomic uint64_t shared = c[t].others, inflight = 0;
		struct dev_hooks hooks = { .shared = c[t].share ? &shared : NULL };

		fake_reset();
		for (int i = 0; i < 40; i++) {
			memset(buf[i], i + 1, sizeof(buf[i]));
			io[i] = (struct dev_io){ .op = DEV_WRITE, .buf = buf[i],
						 .off = (uint64_t)i * 4096, .len = 4096,
						 .fixed = -1 };
			p[i] = &io[i];
		}
		assert_int_equal(dev_run_hooks(&fake_ops, NULL, p, 40, c[t].depth, &inflight,
					       &hooks), 0);
		assert_int_equal(fake.max_inflight, c[t].want);
		assert_int_equal(inflight, 0);
		assert_int_equal(shared, c[t].others); /* its own counted back */
		for (int i = 0; i < 40; i++) {
			assert_int_equal(io[i].res, 4096);
			assert_memory_equal(fake.mem + i * 4096, buf[i], 4096);
		}
	}
}

static void dev_run_finishes_short_transfers(void **st)
{
	(void)st;
	static unsigned char a[65536], b[65536];
	struct dev_io io = { .op = DEV_WRITE, .buf = a, .off = 8192, .len = sizeof(a),
			     .fixed = -1 };
	struct dev_io *p = &io;

	fake_reset();
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (unsigned char)(i * 7);
	fake.short_every = 1;
	assert_int_equal(dev_run(&fake_ops, NULL, &p, 1, 4, NULL), 0);
	assert_int_equal(io.res, (int)sizeof(a));
	/* the io is handed back as it was given */
	assert_ptr_equal(io.buf, a);
	assert_int_equal(io.off, 8192);
	assert_int_equal(io.len, sizeof(a));
	assert_true(fake.submits > 1);
	io.op = DEV_READ;
	io.buf = b;
	assert_int_equal(dev_run(&fake_ops, NULL, &p, 1, 4, NULL), 0);
	assert_memory_equal(a, b, sizeof(a));
}

static void dev_run_fails_transfer_without_progress(void **st)
{
	(void)st;
	static unsigned char a[8192];
	struct dev_io io[2], *p[2] = { &io[0], &io[1] };

	fake_reset();
	for (int i = 0; i < 2; i++) {
		memset(&io[i], 0, sizeof(io[i]));
		io[i].op = DEV_READ;
		io[i].buf = a;
		io[i].len = sizeof(a);
		io[i].off = (uint64_t)i * sizeof(a);
		io[i].fixed = -1;
	}
	fake.zero_next = 1;
	assert_int_equal(dev_run(&fake_ops, NULL, p, 2, 4, NULL), 0);
	assert_true((io[0].res == -EIO) != (io[1].res == -EIO));
	assert_true(io[0].res == 8192 || io[1].res == 8192);
	/* an error from the device is reported per io */
	io[1].off = sizeof(fake.mem);
	assert_int_equal(dev_run(&fake_ops, NULL, p, 2, 4, NULL), 0);
	assert_int_equal(io[0].res, 8192);
	assert_int_equal(io[1].res, -EINVAL);
	/* a queue that refuses submissions fails every io and says so */
	fake.fail_submit = 1;
	assert_int_equal(dev_run(&fake_ops, NULL, p, 2, 4, NULL), -EBUSY);
	assert_int_equal(io[0].res, -EBUSY);
	assert_int_equal(io[1].res, -EBUSY);
}

struct hook_log {
	unsigned prepped[64], nprep;
	unsigned donecount[64];
	int32_t doneres[64];
	int fail_prep_of;           /* index whose prep fails, or -1 */
	unsigned char *bufs;        /* 4096 bytes per io */
};

static int hook_prep(void *arg, unsigned i, struct dev_io *io)
{
	struct hook_log *h = arg;

	/* not yet handed to the device: the fake holds no io with this buffer */
	for (unsigned k = 0; k < fake.npend; k++)
		assert_ptr_not_equal(fake.pend[k], io);
	h->prepped[h->nprep++] = i;
	if ((int)i == h->fail_prep_of)
		return -ECANCELED;
	memset(h->bufs + (size_t)i * 4096, (int)i + 1, 4096);
	io->buf = h->bufs + (size_t)i * 4096; /* the hook may set buf */
	return 0;
}

static void hook_done(void *arg, unsigned i, struct dev_io *io)
{
	struct hook_log *h = arg;

	h->donecount[i]++;
	h->doneres[i] = io->res;
}

/* A submit that refuses ios whose prep hook has not run (buf still NULL). */
static int checked_submit(void *q, struct dev_io *const *ios, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		assert_non_null(ios[i]->buf);
	return fake_submit(q, ios, n);
}

static const struct kvt_dev_ops checked_ops = {
	.submit = checked_submit,
	.reap = fake_reap,
};

static void dev_run_hooks_prepare_in_order_before_submitting(void **st)
{
	(void)st;
	static unsigned char bufs[40 * 4096];
	struct dev_io io[40], *p[40];
	struct hook_log h = { .fail_prep_of = -1, .bufs = bufs };
	struct dev_hooks hooks = { .prep = hook_prep, .done = hook_done, .arg = &h };

	fake_reset();
	for (int i = 0; i < 40; i++) {
		io[i] = (struct dev_io){ .op = DEV_WRITE, .off = (uint64_t)i * 4096,
					 .len = 4096, .fixed = -1 };
		p[i] = &io[i];
	}
	assert_int_equal(dev_run_hooks(&checked_ops, NULL, p, 40, 8, NULL, &hooks), 0);
	assert_int_equal(h.nprep, 40);
	for (unsigned i = 0; i < 40; i++) {
		assert_int_equal(h.prepped[i], i);
		assert_int_equal(h.donecount[i], 1);
		assert_int_equal(h.doneres[i], 4096);
		assert_int_equal(io[i].res, 4096);
		assert_int_equal(fake.mem[i * 4096], i + 1); /* the prepared bytes */
	}
	assert_true(fake.max_inflight <= 8);
}

static void dev_run_hooks_finish_every_io_once(void **st)
{
	(void)st;
	static unsigned char bufs[8 * 4096];
	struct dev_io io[8], *p[8];
	struct hook_log h = { .fail_prep_of = 3, .bufs = bufs };
	struct dev_hooks hooks = { .prep = hook_prep, .done = hook_done, .arg = &h };

	fake_reset();
	fake.short_every = 1; /* every transfer comes back half done first */
	for (int i = 0; i < 8; i++) {
		io[i] = (struct dev_io){ .op = DEV_WRITE, .off = (uint64_t)i * 4096,
					 .len = 4096, .fixed = -1 };
		p[i] = &io[i];
	}
	io[5].off = sizeof(fake.mem); /* the device rejects this one */
	assert_int_equal(dev_run_hooks(&checked_ops, NULL, p, 8, 4, NULL, &hooks), 0);
	for (unsigned i = 0; i < 8; i++) {
		assert_int_equal(h.donecount[i], 1);
		assert_int_equal(h.doneres[i], io[i].res);
		assert_int_equal(io[i].len, 4096); /* handed back as given */
	}
	assert_int_equal(io[3].res, -ECANCELED); /* prep failed: never submitted */
	assert_int_equal(io[5].res, -EINVAL);
	assert_int_equal(io[0].res, 4096);
	assert_int_equal(io[7].res, 4096);
}

static void dev_run_hooks_report_a_refused_submission_to_every_io(void **st)
{
	(void)st;
	static unsigned char bufs[4 * 4096];
	struct dev_io io[4], *p[4];
	struct hook_log h = { .fail_prep_of = -1, .bufs = bufs };
	struct dev_hooks hooks = { .done = hook_done, .arg = &h };

	fake_reset();
	fake.fail_submit = 1;
	for (int i = 0; i < 4; i++) {
		io[i] = (struct dev_io){ .op = DEV_READ, .buf = bufs + i * 4096,
					 .off = (uint64_t)i * 4096, .len = 4096, .fixed = -1 };
		p[i] = &io[i];
	}
	assert_int_equal(dev_run_hooks(&fake_ops, NULL, p, 4, 2, NULL, &hooks), -EBUSY);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(h.donecount[i], 1);
		assert_int_equal(io[i].res, -EBUSY);
	}
}

/* An idle hook with work: called only while ios are in flight; after each
 * piece the run looks for completions without waiting (the fake completes
 * nothing until the hook's work is done); once it has none, the run waits.
 * Every io completes once, and its bytes land. */
struct idle_log {
	struct hook_log h;
	unsigned calls, worked;
};

static int hook_idle(void *arg)
{
	struct idle_log *l = arg;

	l->calls++;
	assert_true(fake.npend > 0);
	if (!fake.hold)
		return 0;
	fake.hold--;
	l->worked++;
	return 1;
}

static void hook_done_idle(void *arg, unsigned i, struct dev_io *io)
{
	hook_done(&((struct idle_log *)arg)->h, i, io);
}

static void dev_run_hooks_idle_works_between_looks_for_completions(void **st)
{
	(void)st;
	static unsigned char bufs[16 * 4096];
	struct dev_io io[16], *p[16];
	struct idle_log l = { .h = { .fail_prep_of = -1, .bufs = bufs } };
	struct dev_hooks hooks = { .done = hook_done_idle, .idle = hook_idle, .arg = &l };

	fake_reset();
	for (unsigned i = 0; i < 16; i++) {
		memset(fake.mem + i * 4096, (int)(i + 1), 4096);
		io[i] = (struct dev_io){ .op = DEV_READ, .buf = bufs + i * 4096,
					 .off = (uint64_t)i * 4096, .len = 4096, .fixed = -1 };
		p[i] = &io[i];
	}
	fake.hold = 5;
	assert_int_equal(dev_run_hooks(&fake_ops, NULL, p, 16, 4, NULL, &hooks), 0);
	assert_int_equal(l.worked, 5);
	assert_true(l.calls > 5);            /* and it said when it had none */
	assert_true(fake.reaps_nowait >= 5); /* a look after each piece */
	assert_true(fake.max_inflight <= 4);
	for (unsigned i = 0; i < 16; i++) {
		assert_int_equal(l.h.donecount[i], 1);
		assert_int_equal(io[i].res, 4096);
		assert_int_equal(bufs[i * 4096], i + 1);
		assert_int_equal(bufs[i * 4096 + 4095], i + 1);
	}
}

/* A submission that takes only some of the ios it is given (io_uring stops
 * at an SQE it cannot start): dev_run submits the rest again, and every io
 * is prepared once, completed once and lands where it should. */
static void dev_run_resubmits_what_a_submission_did_not_take(void **st)
{
	(void)st;
	static unsigned char bufs[40 * 4096];
	struct dev_io io[40], *p[40];
	struct hook_log h = { .fail_prep_of = -1, .bufs = bufs };
	struct dev_hooks hooks = { .prep = hook_prep, .done = hook_done, .arg = &h };
	_Atomic uint64_t inflight = 0;

	fake_reset();
	fake.submit_max = 3;
	for (int i = 0; i < 40; i++) {
		io[i] = (struct dev_io){ .op = DEV_WRITE, .off = (uint64_t)i * 4096,
					 .len = 4096, .fixed = -1 };
		p[i] = &io[i];
	}
	assert_int_equal(dev_run_hooks(&checked_ops, NULL, p, 40, 8, &inflight, &hooks), 0);
	assert_int_equal(inflight, 0);
	assert_int_equal(h.nprep, 40);
	assert_true(fake.submits >= 14);
	for (unsigned i = 0; i < 40; i++) {
		assert_int_equal(h.donecount[i], 1);
		assert_int_equal(io[i].res, 4096);
		assert_int_equal(fake.mem[i * 4096], i + 1);
	}
	/* the same without hooks, one io per submission */
	fake.submit_max = 1;
	for (int i = 0; i < 40; i++) {
		io[i].op = DEV_READ;
		io[i].buf = bufs + (size_t)i * 4096;
		memset(io[i].buf, 0, 4096);
	}
	assert_int_equal(dev_run(&fake_ops, NULL, p, 40, 8, &inflight), 0);
	assert_int_equal(inflight, 0);
	for (unsigned i = 0; i < 40; i++) {
		assert_int_equal(io[i].res, 4096);
		assert_int_equal(bufs[i * 4096], i + 1);
	}
}

/* A queue that fails while ios are in flight: dev_run reaps (drains) them
 * before it returns, since the device may still be writing into their
 * buffers; nothing more is submitted; each io is finished once. */
static void dev_run_drains_a_failed_queue_before_returning(void **st)
{
	(void)st;
	static unsigned char bufs[16 * 4096];
	struct dev_io io[16], *p[16];
	struct hook_log h = { .fail_prep_of = -1, .bufs = bufs };
	struct dev_hooks hooks = { .done = hook_done, .arg = &h };
	_Atomic uint64_t inflight = 0;

	fake_reset();
	fake.fail_reap_once = 1;
	for (int i = 0; i < 16; i++) {
		io[i] = (struct dev_io){ .op = DEV_READ, .buf = bufs + i * 4096,
					 .off = (uint64_t)i * 4096, .len = 4096, .fixed = -1 };
		p[i] = &io[i];
	}
	assert_int_equal(dev_run_hooks(&fake_ops, NULL, p, 16, 8, &inflight, &hooks), -EIO);
	assert_int_equal(fake.npend, 0);  /* nothing left in flight */
	assert_int_equal(fake.submits, 1); /* and nothing sent after the failure */
	assert_int_equal(inflight, 0);
	for (unsigned i = 0; i < 16; i++) {
		assert_int_equal(h.donecount[i], 1);
		assert_int_equal(io[i].res, -EIO);
		assert_int_equal(io[i].lost, 0);
	}
}

/* A vectored io writes its segments in order as one request; cut short
 * (halved at every completion), the rest of it goes out from the right
 * byte of the right segment, and it reads back into other segments. */
static void dev_run_vectored_ios_survive_short_transfers(void **st)
{
	(void)st;
	static unsigned char h[4096], a[16384], b[8192], back[4096 + 16384 + 8192];
	static unsigned char r0[8192], r1[20480];
	struct dev_io io, *p = &io;
	struct iovec w[3] = { { h, sizeof(h) }, { a, sizeof(a) }, { b, sizeof(b) } };

	fake_reset();
	for (size_t i = 0; i < sizeof(h); i++)
		h[i] = (unsigned char)(i * 3 + 1);
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (unsigned char)(i * 5 + 2);
	for (size_t i = 0; i < sizeof(b); i++)
		b[i] = (unsigned char)(i * 11 + 7);
	memset(&io, 0, sizeof(io));
	io.op = DEV_WRITE;
	io.off = 4096;
	io.fixed = -1;
	assert_int_equal(dev_io_setv(&io, w, 3), 0);
	assert_int_equal(io.len, sizeof(back));
	assert_ptr_equal(io.buf, h);
	fake.short_every = 1;
	assert_int_equal(dev_run(&fake_ops, NULL, &p, 1, 4, NULL), 0);
	assert_int_equal(io.res, (int)sizeof(back));
	assert_true(fake.submits > 3);
	/* handed back as given */
	assert_ptr_equal(io.buf, h);
	assert_int_equal(io.off, 4096);
	assert_int_equal(io.len, sizeof(back));
	memcpy(back, h, sizeof(h));
	memcpy(back + sizeof(h), a, sizeof(a));
	memcpy(back + sizeof(h) + sizeof(a), b, sizeof(b));
	assert_memory_equal(fake.mem + 4096, back, sizeof(back));
	/* read back through other segment boundaries */
	struct iovec r[2] = { { r0, sizeof(r0) }, { r1, sizeof(r1) } };
	memset(&io, 0, sizeof(io));
	io.op = DEV_READ;
	io.off = 4096;
	io.fixed = -1;
	assert_int_equal(dev_io_setv(&io, r, 2), 0);
	assert_int_equal(dev_run(&fake_ops, NULL, &p, 1, 4, NULL), 0);
	assert_int_equal(io.res, (int)sizeof(back));
	assert_memory_equal(r0, back, sizeof(r0));
	assert_memory_equal(r1, back + sizeof(r0), sizeof(r1));
}

/* Malformed vectored ios are refused, each alone, without reaching the
 * device: too many segments, none, segments that do not add up. */
static void dev_run_refuses_malformed_vectored_ios(void **st)
{
	(void)st;
	static unsigned char m[4 * 4096];
	struct iovec v[DEV_SEG_MAX + 1];
	struct dev_io io[2], *p[2] = { &io[0], &io[1] };

	fake_reset();
	for (unsigned i = 0; i <= DEV_SEG_MAX; i++)
		v[i] = (struct iovec){ m, 4096 };
	memset(io, 0, sizeof(io));
	assert_int_equal(dev_io_setv(&io[0], v, DEV_SEG_MAX + 1), -EINVAL);
	assert_int_equal(dev_io_setv(&io[0], v, 0), -EINVAL);
	assert_int_equal(io[0].nseg, 0); /* left as it was */
	for (int i = 0; i < 2; i++) {
		io[i].op = DEV_WRITE;
		io[i].off = (uint64_t)i * 8192;
		io[i].fixed = -1;
		assert_int_equal(dev_io_setv(&io[i], v, 2), 0);
	}
	io[1].len -= 4096; /* its segments hold more than its len */
	assert_int_equal(dev_run(&fake_ops, NULL, p, 2, 4, NULL), 0);
	assert_int_equal(io[0].res, 8192);
	assert_int_equal(io[1].res, -EINVAL);
	assert_int_equal(fake.submits, 1);
	assert_int_equal(fake.seen_segs, 2);
	io[1].len += 4096;
	io[1].nseg = DEV_SEG_MAX + 1;
	assert_int_equal(dev_run(&fake_ops, NULL, p, 2, 4, NULL), 0);
	assert_int_equal(io[0].res, 8192);
	assert_int_equal(io[1].res, -EINVAL);
	/* the segments a plain io would move: its buffer alone */
	struct dev_io pl = { .buf = m, .len = 4096, .fixed = -1 };
	struct iovec out[DEV_SEG_MAX];
	assert_int_equal(dev_io_iov(&pl, out), 1);
	assert_ptr_equal(out[0].iov_base, m);
	assert_int_equal(out[0].iov_len, 4096);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dev_run_keeps_depth_and_completes_all),
		cmocka_unit_test(dev_run_shares_its_depth_with_other_runs),
		cmocka_unit_test(dev_run_finishes_short_transfers),
		cmocka_unit_test(dev_run_fails_transfer_without_progress),
		cmocka_unit_test(dev_run_hooks_prepare_in_order_before_submitting),
		cmocka_unit_test(dev_run_hooks_finish_every_io_once),
		cmocka_unit_test(dev_run_hooks_report_a_refused_submission_to_every_io),
		cmocka_unit_test(dev_run_hooks_idle_works_between_looks_for_completions),
		cmocka_unit_test(dev_run_resubmits_what_a_submission_did_not_take),
		cmocka_unit_test(dev_run_drains_a_failed_queue_before_returning),
		cmocka_unit_test(dev_run_vectored_ios_survive_short_transfers),
		cmocka_unit_test(dev_run_refuses_malformed_vectored_ios),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
