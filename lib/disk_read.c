/*
 * disk_read.c - the NVMe tier's read path: a batch of gets in phases (find
 * and pin under the lock; reads set up, payloads straight into the
 * caller's buffers where they can go; each block verified as its reads
 * complete, while the others are in flight; results; unpin, dropping
 * damaged records and picking hits near the log's tail for reinsertion).
 * Knows nothing about io_uring, the RAM tier or the store.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "disk_impl.h"

/* --- reads ------------------------------------------------------------------- */

/* Where a record is read: whole into a stage of the tier's own
 * (RD_STAGED), its header into a stage and its payload straight into the
 * op's buffer (RD_DIRECT: two reads, or with vec one vectored read), or
 * whole, in one request, into a huge-page stage of the tier's own
 * (RD_HUGE). Staged payloads are verified there and copied out. */
enum { RD_STAGED = 0, RD_DIRECT = 1, RD_HUGE = 2 };

struct rd {
	uint32_t e;
	uint64_t w;
	int active;
	int mode;                 /* RD_* */
	int vec;                  /* RD_DIRECT as one vectored read */
	int alone;                /* op's buffer is shared with no other op */
	unsigned mr;              /* hold on a caller range, or 0 */
	void *stage;
	size_t stage_bytes;
	void *hstage;             /* RD_HUGE: the record's stage */
	size_t hstage_bytes;
	struct dev_io io[2];
	unsigned nio;
	unsigned left;            /* ios not complete yet */
	int err;                  /* the outcome once left is 0 */
	uint64_t sum;             /* the payload's checksum, once verified */
	int owed;                 /* verified, its each hook not run yet */
	struct rd *vnext;         /* the verifier's queue (vlock) */
	struct load_ctx *ctx;     /* the batch it is of, while queued */
};

struct load_ctx {
	struct disk_tier *d;
	struct rd *rd;
	kvt_op *ops;
	const uint32_t *own;      /* io index -> op */
	int async;                /* the verifier threads take records */
	unsigned pending;         /* records queued or being verified (vlock) */
	disk_verified_fn each;    /* run on each record verified, or NULL */
	void *each_arg;
	int held_next;            /* the run in progress is followed by the
				     batch's held records (run_reads) */
};

/* Where r's payload was read. */
static void *rd_payload(const struct rd *r, const kvt_op *op)
{
	return r->mode == RD_DIRECT ? op->buf : (char *)r->stage + PAGE;
}

/* Checks a record just read for op: header sound and naming op's key and
 * length, payload checksum right. A staged payload is summed and copied out
 * in one pass (kvt_checksum_copy) where op's buffer is its own, so it holds
 * the bytes whether the sum matched or not (a failed op's buffer is
 * unspecified); into a buffer other ops share, only once verified. */
static int rd_verify(const struct disk_tier *d, struct rd *r, kvt_op *op)
{
	const struct rec_hdr *h = r->stage;
	uint64_t len = w_len(r->w);
	const void *payload = rd_payload(r, op);

	if (!disk_hdr_ok(d, h) || h->key_lo != op->key.lo || h->key_hi != op->key.hi ||
	    h->len != len)
		return -EBADMSG;
	int fused = r->mode != RD_DIRECT && r->alone;
	uint64_t sum = fused ? kvt_checksum_copy(op->buf, payload, len, 0) :
		       kvt_checksum(payload, len);
	if (sum != h->payload_sum)
		return -EBADMSG;
	if (r->mode != RD_DIRECT && !fused)
		memcpy(op->buf, payload, len);
	r->sum = sum;
	return 0;
}

/* --- the verifier ------------------------------------------------------------ */

/*
 * A staged record is verified and copied out (about a third of a
 * millisecond per MiB) by the tier's verifier threads while the loading
 * thread goes on reaping and submitting, so the device's queue stays full
 * however long the checks take; where the verifiers fall behind, the
 * loading thread takes records from the queue itself, one at a time while
 * it would otherwise wait for the device (its idle hook), so that no
 * completion waits for more than one check to be sent on; once its reads
 * are done it helps until its batch is verified. A device that completes
 * the reads in flight together leaves a batch's last queue-depth records
 * to be checked after its last read: several verifiers (one per CPU the
 * process may run on, at most VERIFIERS_MAX) share that tail, and the
 * batch's last records are held back to shorten it (run_reads). Without a verifier (none could be started) every record is
 * verified inline, as its last read completes.
 */

/* Runs the batch's each hook on r, from the tier's copy where there is one. */
static void rd_each(struct load_ctx *c, struct rd *r)
{
	size_t i = (size_t)(r - c->rd);

	r->owed = 0;
	c->each(c->each_arg, i, rd_payload(r, &c->ops[i]), w_len(r->w), r->sum);
}

/*
 * Verifies r and, where it is sound, runs the batch's each hook on it on
 * this thread, or with defer owes it (rd_owed): the loading thread defers
 * while it holds a device queue with reads in flight, since a hook may
 * wait for I/O of its own (a promotion that makes room in RAM writes to
 * disk) and so for a queue.
 */
static void rd_check(struct load_ctx *c, struct rd *r, int defer)
{
	r->err = rd_verify(c->d, r, &c->ops[r - c->rd]);
	if (!r->err && c->each) {
		r->owed = 1;
		if (!defer)
			rd_each(c, r);
	}
}

/* Runs the each hooks owed by the records verified while the loading
 * thread held a queue. */
static void rd_owed(struct load_ctx *c, size_t n)
{
	for (size_t i = 0; c->each && i < n; i++)
		if (c->rd[i].owed)
			rd_each(c, &c->rd[i]);
}

/* The oldest queued record, or NULL. vlock held. */
static struct rd *vq_pop(struct disk_tier *d)
{
	struct rd *r = d->vhead;

	if (r) {
		d->vhead = r->vnext;
		if (!d->vhead)
			d->vtail = NULL;
		d->vlen--;
	}
	return r;
}

/* Verifies r (taken from the queue) and tells its batch; defer as for
 * rd_check. vlock held on entry and return, dropped meanwhile. */
static void vq_check(struct disk_tier *d, struct rd *r, int defer)
{
	pthread_mutex_unlock(&d->vlock);
	rd_check(r->ctx, r, defer);
	pthread_mutex_lock(&d->vlock);
	r->ctx->pending--;
	pthread_cond_broadcast(&d->vdone);
}

static void *verifier_main(void *arg)
{
	struct disk_tier *d = arg;

	pthread_mutex_lock(&d->vlock);
	for (;;) {
		struct rd *r = vq_pop(d);

		if (r)
			vq_check(d, r, 0);
		else if (d->vstop)
			break;
		else
			pthread_cond_wait(&d->vwork, &d->vlock);
	}
	pthread_mutex_unlock(&d->vlock);
	return NULL;
}

/* The verifiers to start: one per CPU the calling thread may run on, 1 to
 * VERIFIERS_MAX (the loading thread mostly waits for its reads). */
static unsigned verifier_count(void)
{
	cpu_set_t set;
	int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;

	if (cpus < 1)
		return 1;
	return (unsigned)cpus < VERIFIERS_MAX ? (unsigned)cpus : VERIFIERS_MAX;
}

void disk_set_verifiers(struct disk_tier *d, unsigned n)
{
	pthread_mutex_lock(&d->vlock);
	d->vwant = n < 1 ? 1 : n > VERIFIERS_MAX ? VERIFIERS_MAX : n;
	pthread_mutex_unlock(&d->vlock);
}

/* 1 when verifiers run (started at the tier's first batch load), else 0. */
static int verifier_on(struct disk_tier *d)
{
	pthread_mutex_lock(&d->vlock);
	if (d->vstate == 0) {
		unsigned want = d->vwant ? d->vwant : verifier_count();

		while (d->nverifiers < want &&
		       pthread_create(&d->vthread[d->nverifiers], NULL, verifier_main, d) == 0)
			d->nverifiers++;
		d->vstate = d->nverifiers ? 1 : -1;
	}
	int on = d->vstate == 1;
	pthread_mutex_unlock(&d->vlock);
	return on;
}

void disk_verifier_stop(struct disk_tier *d)
{
	pthread_mutex_lock(&d->vlock);
	d->vstop = 1;
	pthread_cond_broadcast(&d->vwork);
	unsigned n = d->nverifiers;
	pthread_mutex_unlock(&d->vlock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(d->vthread[i], NULL);
	d->nverifiers = 0;
	d->vstate = -1;
}

/* Queues r of batch c for the verifiers. */
static void vq_push(struct load_ctx *c, struct rd *r)
{
	struct disk_tier *d = c->d;

	pthread_mutex_lock(&d->vlock);
	r->ctx = c;
	r->vnext = NULL;
	if (d->vtail)
		d->vtail->vnext = r;
	else
		d->vhead = r;
	d->vtail = r;
	d->vlen++;
	c->pending++;
	pthread_cond_signal(&d->vwork);
	pthread_mutex_unlock(&d->vlock);
}

/* The loads' idle hook: checks the oldest queued record on the loading
 * thread where one waits (the verifiers are behind), unless the batch's
 * held records are to go out as soon as the reads in progress are done.
 * 1 when it checked one. */
static int load_idle(void *arg)
{
	struct load_ctx *c = arg;
	struct disk_tier *d = c->d;

	if (!c->async || c->held_next)
		return 0;
	pthread_mutex_lock(&d->vlock);
	struct rd *r = vq_pop(d);
	if (r)
		vq_check(d, r, 1);
	pthread_mutex_unlock(&d->vlock);
	return r != NULL;
}

/* Returns once every record batch c queued is verified, verifying queued
 * records (its own or other batches') meanwhile. */
static void vq_wait(struct load_ctx *c)
{
	struct disk_tier *d = c->d;

	if (!c->async)
		return;
	pthread_mutex_lock(&d->vlock);
	while (c->pending) {
		struct rd *r = vq_pop(d);

		if (r)
			vq_check(d, r, 0);
		else
			pthread_cond_wait(&d->vdone, &d->vlock);
	}
	pthread_mutex_unlock(&d->vlock);
}

/* dev_run's done hook for loads: each block is verified as soon as its
 * last read completes (queued for the verifier, or here where its buffer
 * is shared with other ops), while the batch's other reads are in flight. */
static void load_done(void *arg, unsigned i, struct dev_io *io)
{
	struct load_ctx *c = arg;
	uint32_t b = c->own[i];
	struct rd *r = &c->rd[b];

	if (io->res < 0)
		r->err = -EIO;
	if (--r->left == 0 && !r->err) {
		/* copies into a buffer other ops share stay in order, here */
		if (c->async && r->alone)
			vq_push(c, r);
		else
			rd_check(c, r, 1);
	}
}

/* Sets up the reads of block i (rd[i] active, its stage not taken yet;
 * for RD_HUGE, r->hstage taken): header and payload into a stage (RD_HUGE:
 * that one), or the header into a stage and the payload into the op's
 * buffer. Returns ios added to ios/own at nios, 0 when no stage memory
 * could be had. */
static unsigned rd_setup(struct disk_tier *d, struct rd *r, kvt_op *op, int mode,
			 uint32_t i, struct dev_io **ios, uint32_t *own)
{
	uint64_t len = w_len(r->w), pad = pad_up(len, PAGE);
	uint16_t dev;
	uint64_t off;

	page_addr(d, w_page(r->w), &dev, &off);
	r->mode = mode;
	r->stage_bytes = mode == RD_DIRECT ? PAGE : PAGE + pad;
	r->stage = mode == RD_HUGE ? r->hstage : disk_stage_get(d, r->stage_bytes);
	r->nio = 0;
	if (!r->stage)
		return 0;
	disk_io_set(&r->io[0], DEV_READ, dev, off, r->stage, (uint32_t)r->stage_bytes, -1);
	r->nio = 1;
	if (mode == RD_DIRECT && r->vec) {
		struct iovec v[2] = { { r->stage, PAGE }, { op->buf, (size_t)pad } };
		dev_io_setv(&r->io[0], v, 2); /* two segments, under 4 GiB */
		ctr_add(&d->vectored_reads, 1);
	} else if (mode == RD_DIRECT) {
		disk_io_set(&r->io[1], DEV_READ, dev, off + PAGE, op->buf, (uint32_t)pad,
		       disk_buf_fixed(d, op->buf, pad, &r->mr));
		r->nio = 2;
	}
	r->left = r->nio;
	r->err = 0;
	for (unsigned j = 0; j < r->nio; j++) {
		own[j] = i;
		ios[j] = &r->io[j];
	}
	return r->nio;
}

/*
 * A payload read straight into a caller's buffer can fail its check only
 * because something else wrote there meanwhile (ops of the batch sharing
 * the buffer, another thread): such blocks are read again into memory of
 * the tier's own before they are called damaged.
 */
static void rd_again_staged(struct load_ctx *lc, size_t n, struct dev_io **ios,
			    uint32_t *own)
{
	struct disk_tier *d = lc->d;
	struct rd *rd = lc->rd;
	kvt_op *ops = lc->ops;
	unsigned nios = 0;

	for (size_t i = 0; i < n; i++) {
		struct rd *r = &rd[i];

		if (!r->active || !r->nio || r->mode != RD_DIRECT || r->err != -EBADMSG)
			continue;
		disk_stage_put(d, r->stage, r->stage_bytes);
		r->stage = NULL;
		memreg_put(d->mr, r->mr);
		r->mr = 0;
		nios += rd_setup(d, r, &ops[i], RD_STAGED, (uint32_t)i, ios + nios, own + nios);
		if (!r->nio)
			r->err = -ENOMEM;
	}
	struct dev_hooks hooks = { .done = load_done, .arg = lc };
	disk_run(d, ios, nios, &hooks);
	vq_wait(lc);
}

/* The records a batch reads (active ops with their reads set up). */
static size_t read_records(const struct rd *rd, size_t n)
{
	size_t recs = 0;

	for (size_t i = 0; i < n; i++)
		recs += rd[i].active && rd[i].nio;
	return recs;
}

/*
 * The ios a batch of reads keeps in flight: the tier's queue depth in
 * records, whether each record is one read or two (the device sees one
 * request either way where the two are adjacent and merged).
 */
static unsigned read_depth(const struct disk_tier *d, const struct rd *rd, size_t n,
			   unsigned nios)
{
	size_t recs = read_records(rd, n);

	if (!recs)
		return d->qd;
	return (unsigned)((nios * (uint64_t)d->qd + recs - 1) / recs);
}

/*
 * Runs a batch's reads at the tier's queue depth, its last queue_depth /
 * TAIL_HOLD_DIV records held back until the others are complete (the
 * verifiers alone check what completes meanwhile, so that the loading
 * thread sends them the moment it may). A device that completes the reads
 * in flight together (as the development VM's virtio disk does: 32 reads
 * of 1 MiB in one reap, 14 ms after they went out) would leave a batch's
 * last queue_depth records to be checked after its last read; held back,
 * the last are a quarter of that, and the others are checked while they
 * are read. Only where the records average TAIL_HOLD_MIN bytes or more:
 * there a few reads take the device about as long per byte as many (on
 * the VM, 8 MiB in 3.3 ms against 32 MiB in 14 ms), while with 256 KiB
 * records 8 reads took 2.2 ms, about as long as the 32 they followed,
 * and checking 32 such records after the last read only 0.8 ms.
 */
#define TAIL_HOLD_DIV 4u
#define TAIL_HOLD_MIN (1u << 20)

/* The bytes the batch's active records read. */
static uint64_t read_bytes(const struct rd *rd, size_t n)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < n; i++)
		if (rd[i].active && rd[i].nio)
			bytes += w_len(rd[i].w);
	return bytes;
}

static void run_reads(struct load_ctx *lc, struct dev_io **ios, unsigned nios,
		      uint32_t *own, size_t n)
{
	struct disk_tier *d = lc->d;
	struct dev_hooks hooks = { .done = load_done, .idle = load_idle, .arg = lc };
	unsigned depth = read_depth(d, lc->rd, n, nios), at = nios;
	size_t hold = d->qd / TAIL_HOLD_DIV, recs = read_records(lc->rd, n);

	if (lc->async && hold && recs > 2 * hold &&
	    read_bytes(lc->rd, n) >= (uint64_t)TAIL_HOLD_MIN * recs)
		for (size_t k = 0; k < hold; k++) { /* back to its first io */
			uint32_t b = own[at - 1];
			while (at > 0 && own[at - 1] == b)
				at--;
		}
	lc->held_next = at < nios;
	disk_run_depth(d, ios, at, depth, &hooks);
	if (at < nios) {
		lc->held_next = 0;
		lc->own = own + at;
		disk_run_depth(d, ios + at, nios - at, depth, &hooks);
		lc->own = own;
	}
}

int disk_get_batch(struct disk_tier *d, kvt_op *ops, size_t n)
{
	return disk_get_batch_sums(d, ops, n, NULL);
}

/*
 * Phase 1 of a get batch, under the lock: finds each op's entry, pins its
 * region (rd[i] active), and sets the result of ops that will read nothing
 * (-EINVAL, -ENOENT, -ENOBUFS with the size).
 */
static void get_find(struct disk_tier *d, kvt_op *ops, size_t n, struct rd *rd)
{
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		/* A NULL buf with len 0 asks for the size (-ENOBUFS). */
		uint32_t e = ops[i].buf || !ops[i].len ? disk_idx_find(d, ops[i].key) : NIL;

		if (!ops[i].buf && ops[i].len) {
			ops[i].result = -EINVAL;
			continue;
		}
		if (e == NIL) {
			ops[i].result = -ENOENT;
			ctr_add(&d->misses, 1);
			continue;
		}
		uint64_t len = w_len(d->ents[e].w);
		if (len > ops[i].len) {
			ops[i].result = -ENOBUFS;
			ops[i].len = len;
			continue;
		}
		rd[i].e = e;
		rd[i].w = d->ents[e].w;
		rd[i].active = 1;
		d->regions[page_region(d, w_page(rd[i].w))].pins++;
	}
	pthread_mutex_unlock(&d->lock);
}

/*
 * How block i is read. Straight into the caller's buffer where it may
 * (page-aligned, long enough, shared with no other op) and the record is
 * longer than a request (split wherever it is read) or the buffer lies in
 * the registered arena's huge pages or in a caller range registered for
 * such I/O. Else, where it may and the record is one request whose
 * payload pages and header page fit the device's segments, header and
 * payload by one vectored read, the payload into the caller's buffer
 * uncopied (a 256 KiB payload in 4 KiB pages is 65 segments; a 1 MiB one,
 * 257, is past the usual 127-254 and would be split). Else whole, in one
 * request, into a huge-page stage, verified there and copied out (the copy
 * runs while the batch's other reads are in flight). With stage_first
 * (disk.stage_reads), the stage comes before the vectored read: a request
 * into a stage's huge pages is a segment or two, where the caller's pages
 * are one each, and a device that pays per segment reads faster into it
 * even with the copy. Where no stage is left, straight into the caller's
 * buffer if it may (vectored where it fits), else staged with its header
 * in plain memory.
 */
static int rd_mode(struct disk_tier *d, const kvt_op *op, struct rd *r, int alone)
{
	uint64_t pad = pad_up(w_len(r->w), PAGE);
	int may = alone && ((uintptr_t)op->buf % PAGE) == 0 && op->len >= pad;
	/* header and payload in one request without a copy, where the
	 * payload's pages (each a segment at worst) and the header's fit one */
	int vec = may && 1 + pad / PAGE <= d->max_segs;

	r->vec = 0;
	/* staging helps only where the record is then one request: one
	 * longer than a request is split wherever it is read */
	if (may && (PAGE + pad > d->max_req || disk_fixed_index(d, op->buf, pad) >= 0 ||
		    disk_registered(d, op->buf, pad)))
		return RD_DIRECT;
	if (vec && !d->stage_first) {
		r->vec = 1;
		return RD_DIRECT;
	}
	r->hstage_bytes = PAGE + pad;
	r->hstage = disk_hstage_get(d, r->hstage_bytes);
	if (r->hstage) {
		ctr_add(&d->staged_reads, 1);
		return RD_HUGE;
	}
	r->vec = vec;
	return may ? RD_DIRECT : RD_STAGED;
}

/*
 * Phase 2: the reads of each active op, into ios/own (io -> op), each
 * payload where rd_mode() puts it; ops that share a buffer are staged,
 * verified in the tier's own memory and copied. Returns the number of ios.
 */
static unsigned get_ios(struct disk_tier *d, kvt_op *ops, size_t n, struct rd *rd,
			struct dev_io **ios, uint32_t *own)
{
	uint8_t *shared = malloc(n);
	unsigned nios = 0;

	if (shared)
		kvt_ops_shared(ops, n, shared);
	for (size_t i = 0; i < n; i++) {
		struct rd *r = &rd[i];

		if (!r->active)
			continue;
		r->alone = shared && !shared[i];
		int mode = rd_mode(d, &ops[i], r, r->alone);
		nios += rd_setup(d, r, &ops[i], mode, (uint32_t)i, ios + nios, own + nios);
	}
	free(shared);
	return nios;
}

/* Phase 3: each active op's result, length, sum and counters, and the
 * error text of a damaged or unreadable block. */
static void get_report(struct disk_tier *d, kvt_op *ops, size_t n, struct rd *rd,
		       uint64_t *sums)
{
	for (size_t i = 0; i < n; i++) {
		struct rd *r = &rd[i];
		char ks[34];

		if (!r->active)
			continue;
		uint64_t len = w_len(r->w);
		int err = r->nio ? r->err : -ENOMEM;

		if (err == -EBADMSG) {
			ctr_add(&d->checksum_failures, 1);
			kvt_log(KVT_LOG_WARN, "disk: block %s failed its checksum or "
				"header check; dropped", kvt_key_str(ops[i].key, ks));
			kvt_set_error("disk: block %s is damaged on disk (checksum)",
				      kvt_key_str(ops[i].key, ks));
		} else if (err == -EIO) {
			kvt_set_error("disk: reading block %s failed (I/O error)",
				      kvt_key_str(ops[i].key, ks));
		}
		ops[i].result = err;
		if (!err) {
			ops[i].len = len;
			if (sums)
				sums[i] = r->sum;
			ctr_add(&d->hits, 1);
		} else {
			ctr_add(&d->misses, 1);
		}
	}
}

/*
 * Phase 4, under the lock: unpins, drops the entries of damaged records,
 * and picks the hits near the log's tail to move to its head (into re[],
 * which may be NULL). Returns how many were picked.
 */
static size_t get_unpin(struct disk_tier *d, kvt_op *ops, size_t n, struct rd *rd,
			struct wr *re)
{
	size_t nre = 0;

	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		struct rd *r = &rd[i];

		if (!r->active)
			continue;
		uint32_t reg = page_region(d, w_page(r->w));
		d->regions[reg].pins--;
		int same = disk_idx_find(d, ops[i].key) == r->e &&
			   (d->ents[r->e].w & ~LEASE_BIT) == (r->w & ~LEASE_BIT);
		if (ops[i].result == -EBADMSG && same)
			disk_ent_drop(d, r->e);
		else if (ops[i].result == 0 && same && re && disk_near_tail(d, reg)) {
			/* From the tier's own copy where there is one; a caller's
			 * buffer may have changed, so the copy must match the sum. */
			re[nre].key = ops[i].key;
			re[nre].data = rd_payload(r, &ops[i]);
			re[nre].sum = r->sum;
			re[nre].have_sum = 1;
			re[nre].len = ops[i].len;
			re[nre].old_e = r->e;
			re[nre].old_w = d->ents[r->e].w;
			nre++;
		}
	}
	pthread_mutex_unlock(&d->lock);
	return nre;
}

int disk_get_batch_sums(struct disk_tier *d, kvt_op *ops, size_t n, uint64_t *sums)
{
	return disk_get_batch_each(d, ops, n, sums, NULL, NULL);
}

int disk_get_batch_each(struct disk_tier *d, kvt_op *ops, size_t n, uint64_t *sums,
			disk_verified_fn each, void *arg)
{
	struct rd *rd;
	struct dev_io **ios;
	int first = 0;

	if (!d || (!ops && n))
		return kvt_fail(-EINVAL, "disk_get_batch: %s is NULL", d ? "ops" : "tier");
	if (!n)
		return 0;
	rd = calloc(n, sizeof(*rd));
	ios = calloc(2 * n, sizeof(*ios));
	uint32_t *own = calloc(2 * n, sizeof(*own));
	if (!rd || !ios || !own) {
		free(rd);
		free(ios);
		free(own);
		return disk_fail_all(ops, n, -ENOMEM);
	}
	get_find(d, ops, n, rd);
	unsigned nios = get_ios(d, ops, n, rd, ios, own);
	/* A lone record has no other reads to overlap its check with: it is
	 * verified inline (the slot loaders' batches of one, many threads at
	 * once, would otherwise all queue for one verifier). */
	struct load_ctx lc = { .d = d, .rd = rd, .ops = ops, .own = own,
			       .async = read_records(rd, n) > 1 && verifier_on(d),
			       .each = each, .each_arg = arg };
	run_reads(&lc, ios, nios, own, n);
	vq_wait(&lc);
	rd_again_staged(&lc, n, ios, own);
	rd_owed(&lc, n);
	get_report(d, ops, n, rd, sums);

	struct wr *re = calloc(n, sizeof(*re));
	size_t nre = get_unpin(d, ops, n, rd, re);
	if (nre)
		disk_append(d, re, nre, 1, NULL);
	free(re);

	for (size_t i = 0; i < n; i++) {
		if (rd[i].active) {
			if (rd[i].mode != RD_HUGE)
				disk_stage_put(d, rd[i].stage, rd[i].stage_bytes);
			disk_hstage_put(d, rd[i].hstage, rd[i].hstage_bytes);
			memreg_put(d->mr, rd[i].mr);
		}
		if (ops[i].result && !first)
			first = ops[i].result;
	}
	free(ios);
	free(own);
	free(rd);
	return first;
}

int disk_get(struct disk_tier *d, kvt_key key, void *buf, size_t cap, size_t *len)
{
	return disk_get_sum(d, key, buf, cap, len, NULL);
}

int disk_get_sum(struct disk_tier *d, kvt_key key, void *buf, size_t cap,
		 size_t *len, uint64_t *sum)
{
	kvt_op op = { .key = key, .buf = buf, .len = cap };
	int err;

	if (!d || (!buf && cap))
		return kvt_fail(-EINVAL, "disk_get: %s", d ? "buf is NULL but cap is not 0"
							: "tier is NULL");
	err = disk_get_batch_sums(d, &op, 1, sum);
	if (len && (err == 0 || err == -ENOBUFS))
		*len = op.len;
	if (err == -ENOENT) {
		char ks[34];
		kvt_set_error("disk: key %s not stored", kvt_key_str(key, ks));
	} else if (err == -ENOBUFS) {
		char ks[34];
		kvt_set_error("disk_get: cap %zu too small for block %s of %zu bytes",
			      cap, kvt_key_str(key, ks), op.len);
	}
	return err;
}
