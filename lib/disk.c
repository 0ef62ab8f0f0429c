/*
 * disk.c - the NVMe tier's operations (disk.h): put (appending records in
 * batches, each checksummed while earlier writes are in flight), leases
 * and removal, statistics, and open and close. The read path is in
 * disk_read.c; index, regions, I/O plumbing and the on-disk format are in
 * disk_index.c, disk_region.c, disk_io.c and disk_format.c (disk_impl.h).
 * I/O goes through the device seam of dev.h (io_uring's, uring.h, unless the
 * opener passes another); the tier knows nothing about io_uring itself, nor
 * about the RAM tier, peers or the store facade.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk_impl.h"
#include "uring.h"

/* --- writes ---------------------------------------------------------------- */

struct append_ctx {
	struct disk_tier *d;
	struct wr *w;
	const uint32_t *own;      /* io index -> record */
	struct disk_beside *b;    /* work to run beside the writes, or NULL */
	const struct disk_each *each; /* told of each record as it ends, or NULL */
	size_t base;              /* w[0]'s index in the caller's batch */
	int reinsert;
};

static void publish_rec(struct disk_tier *d, struct wr *x, int reinsert);

/* Runs b's work unless it ran already (b or its fn may be NULL). */
static void beside_run(struct disk_beside *b)
{
	if (b && b->fn && !b->done) {
		b->done = 1;
		b->fn(b->arg);
	}
}

/*
 * dev_run's done hook of a batch with work beside it or a caller to tell
 * of each record: at the first write to complete, every write that fits
 * the queue is in flight (the work beside runs); once the last write of a
 * record is complete, the record is published (its index entry, under the
 * lock) and its caller told, while later records are in flight.
 */
static void append_done(void *arg, unsigned i, struct dev_io *io)
{
	struct append_ctx *c = arg;
	struct wr *x = &c->w[c->own[i]];

	(void)io;
	beside_run(c->b);
	if (!c->each || --x->left)
		return;
	pthread_mutex_lock(&c->d->lock);
	publish_rec(c->d, x, c->reinsert);
	pthread_mutex_unlock(&c->d->lock);
	x->published = 1;
	c->each->fn(c->each->arg, c->base + c->own[i]);
}

/*
 * dev_run's prep hook for a record's writes: just before the record's first
 * write goes out (while earlier records' writes are in flight), stages the
 * payload when it cannot be written from data directly, checksums what will
 * be written and fills the header page. A huge-page stage (taken by
 * append_ios) is filled and summed in one pass, each piece summed as it is
 * copied. A record with have_sum (a block read back, whose data may be a
 * caller's buffer that changed since) is always staged and written only if
 * the staged copy matches its sum.
 */
static int append_prep(void *arg, unsigned i, struct dev_io *io)
{
	struct append_ctx *c = arg;
	struct wr *x = &c->w[c->own[i]];
	uint64_t pad = pad_up(x->len, PAGE);
	char *payload;

	if (io != &x->io[0])
		return x->prep_err ? -ECANCELED : 0;
	if (!x->huge)
		x->stage = disk_stage_get(c->d, x->stage_bytes);
	if (!x->stage) {
		x->prep_err = -ENOMEM;
		return -ECANCELED;
	}
	payload = x->direct ? (char *)x->data : (char *)x->stage + PAGE;
	uint64_t sum;
	if (x->kept_sum && !x->have_sum) {
		sum = x->sum;
		if (!x->direct)
			memcpy(payload, x->data, x->len);
	} else if (x->huge) {
		sum = kvt_checksum_copy(payload, x->data, x->len, 1);
	} else {
		if (!x->direct)
			memcpy(payload, x->data, x->len);
		sum = kvt_checksum(payload, x->len);
	}
	if (!x->direct)
		memset(payload + x->len, 0, pad - x->len);
	if (x->have_sum && sum != x->sum) {
		x->prep_err = -EBADMSG;
		return -ECANCELED;
	}
	disk_hdr_fill(c->d, x->stage, x->key, x->len, x->seq, x->region_seq, sum);
	io->buf = x->stage;
	return 0;
}

/*
 * Phase 1 of append, under the lock: reserves space for each record that
 * is to be written (not stored yet; for a reinsertion, still the entry
 * being moved) and numbers it. Records that get space are marked active.
 * A reinsertion never reclaims a region: it would drop blocks (the moved
 * one's own region is the oldest, the first reclaimed) for a read, so it
 * takes only room the log has free and is skipped otherwise.
 */
static void append_reserve(struct disk_tier *d, struct wr *w, size_t n, int reinsert)
{
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		w[i].active = 0;
		if (!reinsert && disk_idx_find(d, w[i].key) != NIL) {
			w[i].result = 0;
			continue;
		}
		if (reinsert && (disk_idx_find(d, w[i].key) != w[i].old_e ||
				 d->ents[w[i].old_e].w != w[i].old_w))
			continue;
		int err = disk_reserve(d, rec_pages(w[i].len), !reinsert, &w[i].page);
		if (err < 0) {
			w[i].result = err;
			if (!reinsert)
				ctr_add(&d->refused, 1);
			continue;
		}
		w[i].seq = ++d->rec_seq;
		w[i].region_seq = d->regions[page_region(d, w[i].page)].seq;
		w[i].active = 1;
	}
	pthread_mutex_unlock(&d->lock);
}

/*
 * Phase 2: the writes of each active record, into ios/own (io -> record):
 * header and payload from one stage, or the header from a stage and the
 * payload straight from data (direct). A record no longer than one device
 * request whose data is not in registered memory (the arena's huge pages,
 * a kvt_mem_register range) is copied into a huge-page stage behind its
 * header and written in one request: written from a caller's scattered
 * 4 KiB pages, header and payload take two or three requests, and many
 * segments, which a virtio disk serves more slowly. Else direct where data
 * is page-aligned and whole pages, staged in plain memory otherwise.
 * Buffers and the header come from append_prep. Returns the number of ios.
 */
static unsigned append_ios(struct disk_tier *d, struct wr *w, size_t n,
			   struct dev_io **ios, uint32_t *own)
{
	unsigned nios = 0;

	for (size_t i = 0; i < n; i++) {
		struct wr *x = &w[i];
		uint64_t pad = pad_up(x->len, PAGE);
		uint16_t dev;
		uint64_t off;

		if (!x->active)
			continue;
		page_addr(d, x->page, &dev, &off);
		int whole = ((uintptr_t)x->data % PAGE) == 0 && x->len % PAGE == 0;
		x->stage = NULL;
		x->huge = 0;
		if (PAGE + pad <= d->max_req && !(whole && !x->have_sum &&
		    (disk_fixed_index(d, x->data, x->len) >= 0 ||
		     disk_registered(d, x->data, x->len))))
			x->stage = disk_hstage_get(d, PAGE + pad);
		if (x->stage) {
			x->huge = 1;
			ctr_add(&d->staged_writes, 1);
		}
		x->direct = !x->huge && !x->have_sum && whole;
		x->stage_bytes = x->direct ? PAGE : PAGE + pad;
		x->prep_err = 0;
		if (x->direct) {
			disk_io_set(&x->io[0], DEV_WRITE, dev, off, NULL, PAGE, -1);
			disk_io_set(&x->io[1], DEV_WRITE, dev, off + PAGE, (void *)x->data,
				    (uint32_t)x->len, disk_buf_fixed(d, x->data, x->len, &x->mr));
			x->nio = 2;
		} else {
			disk_io_set(&x->io[0], DEV_WRITE, dev, off, NULL,
				    (uint32_t)(PAGE + pad), -1);
			x->nio = 1;
		}
		x->left = x->nio;
		x->published = 0;
		for (unsigned j = 0; j < x->nio; j++) {
			own[nios] = (uint32_t)i;
			ios[nios++] = &x->io[j];
		}
	}
	return nios;
}

/* Moves the entry a reinsertion copied to the record just written, with
 * its lease, unless the block changed meanwhile. Locked. */
static void publish_moved(struct disk_tier *d, struct wr *x)
{
	uint32_t cur = disk_idx_find(d, x->key);

	if (cur != x->old_e || d->ents[cur].w != x->old_w)
		return;
	struct region *orr = &d->regions[page_region(d, w_page(x->old_w))];
	uint64_t until = (x->old_w & LEASE_BIT) && orr->lease_until > kvt_now_ns() ?
			 orr->lease_until : 0;

	disk_ent_drop(d, cur);
	if (disk_ent_add(d, x->key, x->page, x->len) == 0) {
		ctr_add(&d->reinsertions, 1);
		if (until) /* the lease moves with the block */
			disk_lease_ent(d, d->regions[page_region(d, x->page)].head, until);
	}
}

/*
 * Ends an active record whose writes are complete, under the lock: unpins
 * its region, seals the open region behind it where it failed, publishes
 * its index entry where it was written and sets its result.
 */
static void publish_rec(struct disk_tier *d, struct wr *x, int reinsert)
{
	int err = 0;
	int ioerr = 0;

	d->regions[page_region(d, x->page)].pins--;
	for (unsigned j = 0; j < x->nio; j++)
		if (x->io[j].res < 0) {
			err = -EIO;
			ioerr = x->io[j].res;
		}
	if (x->prep_err)
		err = x->prep_err;
	if (err && d->cur == page_region(d, x->page)) {
		/* A record that never made it would end a recovery scan of
		 * this region here: put later records in a fresh region. */
		d->regions[d->cur].state = R_SEALED;
		d->cur = NIL;
	}
	if (err == 0 && reinsert)
		publish_moved(d, x);
	else if (err == 0 && disk_idx_find(d, x->key) == NIL)
		err = disk_ent_add(d, x->key, x->page, x->len);
	if (err == -EIO)
		kvt_set_error("disk: writing block of %llu bytes failed: %s",
			      (unsigned long long)x->len, strerror(-ioerr));
	else if (err && err != -EBADMSG)
		kvt_set_error("disk: no index space for another block");
	x->result = err;
	if (!err && !reinsert)
		ctr_add(&d->puts, 1);
}

/* Phase 3 of append, under the lock: ends every active record not ended
 * at its completion (publish_rec). */
static void append_publish(struct disk_tier *d, struct wr *w, size_t n, int reinsert)
{
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++)
		if (w[i].active && !w[i].published)
			publish_rec(d, &w[i], reinsert);
	pthread_mutex_unlock(&d->lock);
}

/*
 * Appends records for w[0..n): reserves space under the lock, writes every
 * record of the batch in one dev_run (each record checksummed and submitted
 * as soon as its header is ready, so hashing overlaps the writes in
 * flight), then publishes the index entries.
 * reinsert: the records move existing entries (old_e) to the log's head.
 * b (may be NULL): work run once the first writes are in flight (the
 * caller runs it after, where it has not run).
 * disk_append_each: each (may be NULL): each->fn(arg, i) runs once for every w[i], on the
 * calling thread, as soon as its result is final: a record not written
 * (stored already, no space) before any I/O, a written one as soon as its
 * writes are complete and it is published, while later records are in
 * flight.
 */
/* One submission of disk_append_each: w[0..n), the caller's records from
 * base on. */
static void append_piece(struct disk_tier *d, struct wr *w, size_t n, size_t base,
			 int reinsert, struct disk_beside *b, const struct disk_each *each)
{
	struct dev_io **ios = calloc(2 * n + 1, sizeof(*ios));
	uint32_t *own = calloc(2 * n + 1, sizeof(*own));

	if (!ios || !own) {
		for (size_t i = 0; i < n; i++) {
			w[i].active = 0;
			w[i].result = -ENOMEM;
		}
		free(ios);
		free(own);
		return;
	}
	append_reserve(d, w, n, reinsert);
	unsigned nios = append_ios(d, w, n, ios, own);
	for (size_t i = 0; each && i < n; i++)
		if (!w[i].active)
			each->fn(each->arg, base + i);
	struct append_ctx ac = { .d = d, .w = w, .own = own, .b = b, .each = each,
				 .base = base, .reinsert = reinsert };
	struct dev_hooks hooks = { .prep = append_prep,
				   .done = b || each ? append_done : NULL, .arg = &ac };
	disk_run(d, ios, nios, &hooks);
	append_publish(d, w, n, reinsert);
	for (size_t i = 0; i < n; i++)
		if (w[i].active) {
			if (w[i].huge)
				disk_hstage_put(d, w[i].stage, w[i].stage_bytes);
			else
				disk_stage_put(d, w[i].stage, w[i].stage_bytes);
			memreg_put(d->mr, w[i].mr);
			w[i].mr = 0;
		}
	free(ios);
	free(own);
}

/*
 * Writes w[0..n) as one submission where the log holds them all at once.
 * A batch of more than the log holds, less the open region and two spare,
 * goes in pieces that fit, each once the one before is complete: a region stays pinned while a
 * write into it is in flight, so one submission could not reclaim the
 * regions its own first records took, and its later records would be
 * refused (-ENOSPC) while earlier ones, then older than them, were kept.
 * In pieces, later records reclaim the earliest as the log does between
 * batches, and a batch keeps its newest.
 */
void disk_append_each(struct disk_tier *d, struct wr *w, size_t n, int reinsert,
		      struct disk_beside *b, const struct disk_each *each)
{
	/* regions a piece may fill: all but the open one and two spare,
	 * records packed into them as disk_reserve packs them */
	uint32_t budget = d->nregions > 3 ? d->nregions - 3 : 1;
	size_t at = 0;

	while (at < n) {
		uint32_t used = 1;
		uint64_t left = d->region_pages;
		size_t k = 0;
		for (; at + k < n; k++) {
			uint32_t p = rec_pages(w[at + k].len);
			if (p > left) {
				if (used == budget && k)
					break;
				used++;
				left = d->region_pages;
			}
			left -= p; /* p <= left: a record fits one region */
		}
		append_piece(d, w + at, k, at, reinsert, b, each);
		at += k;
	}
}

void disk_append(struct disk_tier *d, struct wr *w, size_t n, int reinsert,
		 struct disk_beside *b)
{
	disk_append_each(d, w, n, reinsert, b, NULL);
}

static int check_put(kvt_key key, const void *data, size_t len, uint32_t region_pages)
{
	char ks[34];

	if (!data || len == 0)
		return kvt_fail(-EINVAL, "disk_put: %s for key %s",
				data ? "len is 0" : "data is NULL", kvt_key_str(key, ks));
	if (len > MAX_LEN)
		return kvt_fail(-ENOSPC, "disk_put: block of %zu bytes for key %s is "
				"larger than the %llu bytes a disk record holds", len,
				kvt_key_str(key, ks), (unsigned long long)MAX_LEN);
	if (rec_pages(len) > region_pages)
		return kvt_fail(-ENOSPC, "disk_put: block of %zu bytes for key %s is "
				"larger than a disk region", len, kvt_key_str(key, ks));
	return 0;
}

int disk_put(struct disk_tier *d, kvt_key key, const void *data, size_t len)
{
	struct wr w;

	if (!d)
		return kvt_fail(-EINVAL, "disk_put: tier is NULL");
	int err = check_put(key, data, len, d->region_pages);
	if (err)
		return err;
	memset(&w, 0, sizeof(w));
	w.key = key;
	w.data = data;
	w.len = len;
	disk_append(d, &w, 1, 0, NULL);
	if (w.result == -ENOSPC) {
		char ks[34];
		kvt_set_error("disk: no region can take block %s (%zu bytes): all "
			      "are leased or in use", kvt_key_str(key, ks), len);
	}
	return w.result;
}

/* Every op of a batch that could not start fails with err: callers read
 * each op's result, so none may be left as it came in. */
int disk_fail_all(kvt_op *ops, size_t n, int err)
{
	for (size_t i = 0; i < n; i++)
		ops[i].result = err;
	return kvt_fail(err, "disk tier: out of memory for a batch of %zu", n);
}

/* put_batch's each: record j is op map[j]; sets its result, tells the caller. */
struct put_each {
	kvt_op *ops;
	const size_t *map;
	const struct wr *w;
	const struct disk_each *each;
};

static void put_each_fn(void *arg, size_t j)
{
	struct put_each *pe = arg;

	pe->ops[pe->map[j]].result = pe->w[j].result;
	pe->each->fn(pe->each->arg, pe->map[j]);
}

static int put_batch(struct disk_tier *d, kvt_op *ops, size_t n, struct disk_beside *b,
		     const struct disk_each *each, const uint64_t *sums,
		     const uint8_t *has_sum, size_t nsum)
{
	struct wr *w;
	size_t *map;
	int first = 0;

	if (!d || (!ops && n))
		return kvt_fail(-EINVAL, "disk_put_batch: %s is NULL", d ? "ops" : "tier");
	if (!n)
		return 0;
	w = calloc(n, sizeof(*w));
	map = malloc(sizeof(*map) * n);
	if (!w || !map) {
		free(w);
		free(map);
		int rc = disk_fail_all(ops, n, -ENOMEM);
		for (size_t i = 0; each && i < n; i++)
			each->fn(each->arg, i);
		return rc;
	}
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		ops[i].result = check_put(ops[i].key, ops[i].buf, ops[i].len,
					  d->region_pages);
		if (ops[i].result) {
			if (each)
				each->fn(each->arg, i);
			continue;
		}
		w[m].key = ops[i].key;
		w[m].data = ops[i].buf;
		w[m].len = ops[i].len;
		if (sums && has_sum && i < nsum && has_sum[i]) {
			w[m].sum = sums[i];
			w[m].kept_sum = 1;
		}
		map[m++] = i;
	}
	struct put_each pe = { .ops = ops, .map = map, .w = w, .each = each };
	struct disk_each pe_each = { .fn = put_each_fn, .arg = &pe };
	disk_append_each(d, w, m, 0, b, each ? &pe_each : NULL);
	for (size_t j = 0; j < m; j++)
		ops[map[j]].result = w[j].result;
	for (size_t i = 0; i < n; i++)
		if (ops[i].result && !first)
			first = ops[i].result;
	free(map);
	free(w);
	return first;
}

int disk_put_batch(struct disk_tier *d, kvt_op *ops, size_t n)
{
	return put_batch(d, ops, n, NULL, NULL, NULL, NULL, 0);
}

int disk_put_batch_beside(struct disk_tier *d, kvt_op *ops, size_t n,
			  void (*fn)(void *), void *arg)
{
	struct disk_beside b = { .fn = fn, .arg = arg };
	int rc = put_batch(d, ops, n, &b, NULL, NULL, NULL, 0);

	beside_run(&b);
	return rc;
}

int disk_put_batch_each(struct disk_tier *d, kvt_op *ops, size_t n,
			void (*fn)(void *arg, size_t i), void *arg)
{
	return disk_put_batch_sums(d, ops, n, NULL, NULL, 0, fn, arg);
}

int disk_put_batch_sums(struct disk_tier *d, kvt_op *ops, size_t n,
			const uint64_t *sums, const uint8_t *has_sum, size_t nsum,
			void (*fn)(void *arg, size_t i), void *arg)
{
	struct disk_each each = { .fn = fn, .arg = arg };

	return put_batch(d, ops, n, NULL, fn ? &each : NULL, sums, has_sum, nsum);
}

/* --- small calls --------------------------------------------------------------- */

uint32_t disk_regions(struct disk_tier *d, uint64_t *pages)
{
	*pages = d ? d->region_pages : 0;
	return d ? d->nregions : 0;
}

uint64_t disk_record_pages(uint64_t len)
{
	return rec_pages(len);
}

int disk_contains(struct disk_tier *d, kvt_key key, size_t *len)
{
	int found = 0;

	if (!d)
		return 0;
	pthread_mutex_lock(&d->lock);
	uint32_t e = disk_idx_find(d, key);
	if (e != NIL) {
		found = 1;
		if (len)
			*len = w_len(d->ents[e].w);
	}
	pthread_mutex_unlock(&d->lock);
	return found;
}

int disk_lease(struct disk_tier *d, kvt_key key, uint64_t deadline_ns)
{
	int found = 0;

	if (!d)
		return 0;
	pthread_mutex_lock(&d->lock);
	uint32_t e = disk_idx_find(d, key);
	if (e != NIL) {
		disk_lease_ent(d, e, deadline_ns);
		found = 1;
	}
	pthread_mutex_unlock(&d->lock);
	return found;
}

int disk_release(struct disk_tier *d, kvt_key key)
{
	int ended = 0;

	if (!d)
		return 0;
	pthread_mutex_lock(&d->lock);
	uint32_t e = disk_idx_find(d, key);
	if (e != NIL && (d->ents[e].w & LEASE_BIT)) {
		struct region *r = &d->regions[page_region(d, w_page(d->ents[e].w))];

		ended = r->lease_until > kvt_now_ns();
		d->ents[e].w &= ~LEASE_BIT;
		if (r->nleased && --r->nleased == 0)
			r->lease_until = 0;
	}
	pthread_mutex_unlock(&d->lock);
	return ended;
}

int disk_remove(struct disk_tier *d, kvt_key key)
{
	int err = -ENOENT;

	if (!d)
		return kvt_fail(-EINVAL, "disk_remove: tier is NULL");
	pthread_mutex_lock(&d->lock);
	uint32_t e = disk_idx_find(d, key);
	if (e != NIL) {
		disk_ent_drop(d, e);
		err = 0;
	}
	pthread_mutex_unlock(&d->lock);
	if (err) {
		char ks[34];
		kvt_set_error("disk: key %s not stored", kvt_key_str(key, ks));
	}
	return err;
}

void disk_stats(struct disk_tier *d, const struct stat_visitor *v)
{
	uint64_t objects, used, idx_bytes;

	if (!d || !v)
		return;
	pthread_mutex_lock(&d->lock);
	objects = d->count;
	used = d->bytes_used;
	idx_bytes = (uint64_t)d->ents_hwm * sizeof(struct disk_ent) +
		    (uint64_t)d->nslots * sizeof(uint32_t);
	pthread_mutex_unlock(&d->lock);
	stat_int(v, "capacity", (int64_t)((uint64_t)d->nregions * d->region_size));
	stat_int(v, "bytes_used", (int64_t)used);
	stat_int(v, "objects", (int64_t)objects);
	stat_int(v, "hits", (int64_t)ctr_get(&d->hits));
	stat_int(v, "misses", (int64_t)ctr_get(&d->misses));
	stat_int(v, "puts", (int64_t)ctr_get(&d->puts));
	stat_int(v, "spills", (int64_t)ctr_get(&d->puts));
	stat_int(v, "refused_puts", (int64_t)ctr_get(&d->refused));
	stat_int(v, "reclaims", (int64_t)ctr_get(&d->reclaims));
	stat_int(v, "reinsertions", (int64_t)ctr_get(&d->reinsertions));
	stat_int(v, "checksum_failures", (int64_t)ctr_get(&d->checksum_failures));
	stat_int(v, "io_errors", (int64_t)ctr_get(&d->io_errors));
	stat_int(v, "queue_failures", (int64_t)ctr_get(&d->queue_failures));
	stat_int(v, "queue_depth", (int64_t)d->qd);
	stat_int(v, "inflight", (int64_t)ctr_get(&d->inflight));
	stat_int(v, "regions", (int64_t)d->nregions);
	stat_int(v, "region_size", (int64_t)d->region_size);
	stat_int(v, "devices", (int64_t)d->ndev);
	stat_int(v, "fixed_buffers", (int64_t)d->nfixed);
	stat_int(v, "staged_reads", (int64_t)ctr_get(&d->staged_reads));
	stat_int(v, "vectored_reads", (int64_t)ctr_get(&d->vectored_reads));
	stat_int(v, "stage_reads", d->stage_first);
	stat_int(v, "staged_writes", (int64_t)ctr_get(&d->staged_writes));
	stat_int(v, "mem_fixed_ios", (int64_t)ctr_get(&d->mem_fixed_ios));
	stat_int(v, "mem_plain_ios", (int64_t)ctr_get(&d->mem_plain_ios));
	stat_int(v, "mem_register_refusals", (int64_t)ctr_get(&d->mem_refusals));
	stat_int(v, "index_entry_bytes", (int64_t)(sizeof(struct disk_ent)));
	stat_real(v, "index_bytes_per_block",
		  objects ? (double)idx_bytes / (double)objects : 0.0);
}

/*
 * Refuses path i when it names a device or file that an earlier entry
 * already opened ("/x/d" and "/x/./d", a symlink or hard link beside its
 * target, two nodes of one block device): their regions would overlap.
 * Compares st_rdev for block devices, st_dev and st_ino for files. A path
 * that does not exist yet is about to be created, so it is none of them.
 */
static int refuse_same_device(const struct disk_tier *d, unsigned i)
{
	struct stat a, b;

	if (stat(d->paths[i], &a) < 0)
		return 0;
	for (unsigned j = 0; j < i; j++) {
		if (fstat(d->fds[j], &b) < 0 || (a.st_mode & S_IFMT) != (b.st_mode & S_IFMT))
			continue;
		if (S_ISBLK(a.st_mode) ? a.st_rdev == b.st_rdev :
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			return kvt_fail(-EINVAL, "disk.path[%u] \"%s\" and disk.path[%u] "
					"\"%s\" are the same %s; list each device once",
					j, d->paths[j], i, d->paths[i],
					S_ISBLK(a.st_mode) ? "block device" : "file");
	}
	return 0;
}

/* Closes queues and devices and frees everything; writes nothing. */
static void tier_free(struct disk_tier *d)
{
	disk_verifier_stop(d);
	for (unsigned i = 0; i < d->nqueues; i++)
		d->ops->queue_close(d->queues[i]);
	for (unsigned i = 0; d->fds && i < d->ndev; i++)
		if (d->fds[i] >= 0)
			d->ops->dev_close(d->fds[i]);
	for (unsigned i = 0; d->paths && i < d->ndev; i++)
		free(d->paths[i]);
	for (unsigned c = 0; c < 64; c++)
		while (d->sfree[c]) {
			void *p = d->sfree[c];
			memcpy(&d->sfree[c], p, sizeof(void *));
			free(p);
		}
	if (d->ents)
		munmap(d->ents, d->ents_map);
	free(d->slots);
	free(d->regions);
	free(d->paths);
	free(d->fds);
	free(d->held);
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->qlock);
	pthread_mutex_destroy(&d->slock);
	pthread_cond_destroy(&d->qcv);
	pthread_mutex_destroy(&d->vlock);
	pthread_cond_destroy(&d->vwork);
	pthread_cond_destroy(&d->vdone);
	free(d);
}

/*
 * Opens each device of o (refusing one listed twice) and takes the smallest
 * largest request among them. 0 or -errno; what was opened is in d, for
 * tier_free.
 */
static int open_devices(struct disk_tier *d, const struct disk_opts *o)
{
	int segs_known = 1;

	for (unsigned i = 0; i < d->ndev; i++) {
		d->paths[i] = strdup(o->paths[i]);
		if (!d->paths[i])
			return -ENOMEM;
		int err = refuse_same_device(d, i);
		if (err)
			return err;
		d->held[i] = d->dev_bytes; /* kept where a seam does not set it */
		int fd = d->ops->dev_open(d->paths[i], d->dev_bytes, &d->held[i]);
		if (fd < 0)
			return fd;
		d->fds[i] = fd;
		uint64_t bytes = d->ops->max_request ? d->ops->max_request(fd) : 0;
		bytes = bytes ? bytes : DEFAULT_MAX_REQ;
		if (!d->max_req || bytes < d->max_req)
			d->max_req = bytes;
		/* a seam without the op may not take vectored ios: 1, none */
		unsigned segs = d->ops->max_segments ? d->ops->max_segments(fd) : 1;
		segs_known &= segs > 0;
		segs = segs ? segs : DEFAULT_MAX_SEGS;
		if (!d->max_segs || segs < d->max_segs)
			d->max_segs = segs;
	}
	/* "auto": where every path is a block device, or a file on a file
	 * system over one, whose request queue reports a segment limit (each segment of a request costs there: a virtual disk read
	 * 256 KiB blocks into 4 KiB pages at a fifth of its speed into huge
	 * pages) and the stages are huge pages, not on tmpfs or without them */
	d->stage_first = o->stage_reads == DISK_STAGE_ON ||
			 (o->stage_reads == DISK_STAGE_AUTO && segs_known && disk_hstage_huge());
	return 0;
}

/*
 * Opens the NQUEUES queues, each with [fixed_base, +fixed_len) (the arena)
 * as fixed buffers where the device allows; nfixed is the fewest any queue
 * registered. 0 or -errno; the queues opened are in d, for tier_free.
 */
static int open_queues(struct disk_tier *d, void *fixed_base, size_t fixed_len)
{
	if (fixed_base && fixed_len) {
		d->fixed_base = fixed_base;
		d->fixed_len = fixed_len;
		d->mr_slot0 = (unsigned)((fixed_len + DEV_FIXED_CHUNK - 1) / DEV_FIXED_CHUNK);
	}
	d->nfixed = UINT32_MAX;
	for (unsigned i = 0; i < NQUEUES; i++) {
		unsigned nf = 0;
		int err = d->ops->queue_open(d->fds, d->ndev, 2 * d->qd, d->fixed_base,
					     d->fixed_len, &nf, &d->queues[i]);
		if (err)
			return err;
		d->nqueues++;
		d->qfree[d->nqfree++] = d->queues[i];
		if (nf < d->nfixed)
			d->nfixed = nf;
	}
	return 0;
}

int disk_open(const struct disk_opts *o, void *fixed_base, size_t fixed_len,
	      const struct kvt_dev_ops *ops, struct disk_tier **out)
{
	struct disk_tier *d;
	int err;

	if (!o || !out)
		return kvt_fail(-EINVAL, "disk_open: %s is NULL", o ? "out" : "opts");
	*out = NULL;
	if (o->ndev == 0 || !o->paths)
		return kvt_fail(-EINVAL, "disk.path: no device configured");
	if (o->ndev > 64)
		return kvt_fail(-EINVAL, "disk.path: %u devices, at most 64", o->ndev);
	for (unsigned i = 0; i < o->ndev; i++)
		if (!o->paths[i] || !o->paths[i][0])
			return kvt_fail(-EINVAL, "disk.path[%u]: empty path", i);
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->ops = ops ? ops : &uring_dev_ops;
	d->ndev = o->ndev;
	d->hpool_max = HSTAGE_POOL;
	d->cur = NIL;
	d->ent_free = NIL;
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->qlock, NULL);
	pthread_mutex_init(&d->slock, NULL);
	pthread_cond_init(&d->qcv, NULL);
	pthread_mutex_init(&d->vlock, NULL);
	pthread_cond_init(&d->vwork, NULL);
	pthread_cond_init(&d->vdone, NULL);
	d->fds = malloc(sizeof(int) * d->ndev);
	d->paths = calloc(d->ndev, sizeof(char *));
	d->held = calloc(d->ndev, sizeof(*d->held));
	if (!d->fds || !d->paths || !d->held) {
		err = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < d->ndev; i++)
		d->fds[i] = -1;
	err = disk_geometry(d, o);
	if (err)
		goto fail;
	err = open_devices(d, o);
	if (err)
		goto fail;
	err = open_queues(d, fixed_base, fixed_len);
	if (err)
		goto fail;
	/* Index: entries mapped for the most blocks the tier can hold, touched
	 * only as used; slots grow by doubling. */
	d->ents_map = (size_t)d->max_ents * sizeof(struct disk_ent);
	d->ents = mmap(NULL, d->ents_map, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	d->regions = calloc(d->nregions, sizeof(*d->regions));
	d->nslots = 1024;
	d->slots = malloc(sizeof(*d->slots) * d->nslots);
	if (d->ents == MAP_FAILED || !d->regions || !d->slots) {
		if (d->ents == MAP_FAILED)
			d->ents = NULL;
		err = kvt_fail(-ENOMEM, "disk: no memory for the index of %u regions",
			       d->nregions);
		goto fail;
	}
	disk_index_reset(d);
	err = disk_recover(d);
	if (err)
		goto fail;
	*out = d;
	return 0;
fail:
	tier_free(d);
	return err;
}

void disk_close(struct disk_tier *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	disk_write_checkpoint(d);
	pthread_mutex_unlock(&d->lock);
	tier_free(d);
}
