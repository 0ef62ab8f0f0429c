/*
 * disk_io.c - the NVMe tier's I/O plumbing: staging buffers (page-aligned,
 * cached by power-of-two class), the pool of device queues, running a
 * batch of ios on one of them (counting and logging failures), and
 * synchronous metadata I/O. Knows nothing about records, regions or keys.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "disk_impl.h"

/* --- staging buffers ---------------------------------------------------------- */

static unsigned stage_class(size_t bytes)
{
	unsigned c = 12;

	while ((1ull << c) < bytes)
		c++;
	return c;
}

void *disk_stage_get(struct disk_tier *d, size_t bytes)
{
	unsigned c = stage_class(bytes);
	void *p = NULL;

	pthread_mutex_lock(&d->slock);
	if (d->sfree[c]) {
		p = d->sfree[c];
		memcpy(&d->sfree[c], p, sizeof(void *));
		d->scached -= 1ull << c;
	}
	pthread_mutex_unlock(&d->slock);
	if (!p && posix_memalign(&p, PAGE, (size_t)1 << c))
		p = NULL;
	return p;
}

void disk_stage_put(struct disk_tier *d, void *p, size_t bytes)
{
	unsigned c = stage_class(bytes);

	/* Once a failed queue kept I/O we could not reap, the kernel may still
	 * write into a buffer handed back after that: keep them all alive. */
	if (!p || atomic_load_explicit(&d->lost, memory_order_relaxed))
		return;
	pthread_mutex_lock(&d->slock);
	if (d->scached + (1ull << c) <= STAGE_CACHE) {
		memcpy(p, &d->sfree[c], sizeof(void *));
		d->sfree[c] = p;
		d->scached += 1ull << c;
		p = NULL;
	}
	pthread_mutex_unlock(&d->slock);
	free(p);
}

/*
 * Record stages in transparent huge pages: a record read into one is one
 * device request however long, where a caller's 4 KiB pages would take
 * more segments than the device carries in one request. Pieces (sizes
 * rounded up to HSTAGE_UNIT) are cut from one range of HSTAGE_POOL bytes
 * that the process's tiers share, reserved at the first use, its huge
 * pages faulted in as pieces are first used; freed pieces wait on a list
 * per size. The range lives as long as the process: faulting in fresh
 * huge pages (zeroing them) cost as much CPU as verifying the records read
 * into them, so a store closed and opened again reuses the pages the last
 * one faulted in. A tier holds at most its hpool_max bytes of pieces at
 * once. Returns NULL when that or the range is spent (the caller reads
 * another way).
 */
static struct {
	pthread_mutex_t lock;
	char *base;
	size_t used;
	int failed;
	int huge;                 /* the range gets transparent huge pages */
	void *free[HSTAGE_CLASSES];
} hpool = { .lock = PTHREAD_MUTEX_INITIALIZER };

static unsigned hstage_class(size_t bytes)
{
	size_t units = (bytes + HSTAGE_UNIT - 1) / HSTAGE_UNIT;

	return units < HSTAGE_CLASSES ? (unsigned)units : 0;
}

/* Whether the kernel gives a range advised MADV_HUGEPAGE transparent huge
 * pages: its mode is "always" or "madvise", not "never" (nor absent). */
static int thp_on(void)
{
	char mode[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");

	if (!f)
		return 0;
	if (!fgets(mode, sizeof(mode), f))
		mode[0] = 0;
	fclose(f);
	return mode[0] && !strstr(mode, "[never]");
}

/* Reserves the range, aligned to a huge page. Locked. */
static void hpool_map(void)
{
	char *m = mmap(NULL, HSTAGE_POOL + HSTAGE_ALIGN, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (m == MAP_FAILED) {
		hpool.failed = 1;
		return;
	}
	char *a = (char *)pad_up((uintptr_t)m, HSTAGE_ALIGN);
	if (a > m)
		munmap(m, (size_t)(a - m));
	munmap(a + HSTAGE_POOL, (size_t)(m + HSTAGE_ALIGN - a));
	hpool.huge = madvise(a, HSTAGE_POOL, MADV_HUGEPAGE) == 0 && thp_on();
	hpool.base = a;
}

void *disk_hstage_get(struct disk_tier *d, size_t bytes)
{
	unsigned c = hstage_class(bytes);
	size_t piece = (size_t)c * HSTAGE_UNIT;
	void *p = NULL;

	if (!c)
		return NULL;
	pthread_mutex_lock(&hpool.lock);
	if (!hpool.base && !hpool.failed)
		hpool_map();
	if (d->hused + piece > d->hpool_max) {
		/* this tier's share is spent */
	} else if (hpool.free[c]) {
		p = hpool.free[c];
		memcpy(&hpool.free[c], p, sizeof(void *));
	} else if (hpool.base && hpool.used + piece <= HSTAGE_POOL) {
		p = hpool.base + hpool.used;
		hpool.used += piece;
	}
	if (p)
		d->hused += piece;
	pthread_mutex_unlock(&hpool.lock);
	return p;
}

int disk_hstage_huge(void)
{
	pthread_mutex_lock(&hpool.lock);
	if (!hpool.base && !hpool.failed)
		hpool_map();
	int huge = hpool.base && hpool.huge;
	pthread_mutex_unlock(&hpool.lock);
	return huge;
}

void disk_hstage_put(struct disk_tier *d, void *p, size_t bytes)
{
	unsigned c = hstage_class(bytes);

	if (!p || !c)
		return;
	pthread_mutex_lock(&hpool.lock);
	d->hused -= (size_t)c * HSTAGE_UNIT;
	/* as disk_stage_put: after a lost I/O, never handed out again */
	if (!atomic_load_explicit(&d->lost, memory_order_relaxed)) {
		memcpy(p, &hpool.free[c], sizeof(void *));
		hpool.free[c] = p;
	}
	pthread_mutex_unlock(&hpool.lock);
}

void disk_set_stage_pool(struct disk_tier *d, size_t bytes)
{
	pthread_mutex_lock(&hpool.lock);
	d->hpool_max = bytes < HSTAGE_POOL ? bytes : HSTAGE_POOL;
	pthread_mutex_unlock(&hpool.lock);
}

/* --- queues ------------------------------------------------------------------ */

/* A free queue, or NULL when every queue failed and none could replace it. */
static void *queue_get(struct disk_tier *d)
{
	void *q = NULL;

	pthread_mutex_lock(&d->qlock);
	while (d->nqfree == 0 && d->nqueues > 0)
		pthread_cond_wait(&d->qcv, &d->qlock);
	if (d->nqfree)
		q = d->qfree[--d->nqfree];
	pthread_mutex_unlock(&d->qlock);
	return q;
}

static void queue_put(struct disk_tier *d, void *q)
{
	pthread_mutex_lock(&d->qlock);
	d->qfree[d->nqfree++] = q;
	pthread_cond_signal(&d->qcv);
	pthread_mutex_unlock(&d->qlock);
}

/*
 * A queue that failed (dev_run_hooks says so) is never used again: it is
 * closed (dev_run_hooks drained it) and a fresh one takes its place in the
 * pool; when none can be opened, the pool is one queue smaller.
 */
static void queue_replace(struct disk_tier *d, void *q)
{
	void *nq = NULL;
	unsigned nf = 0;

	ctr_add(&d->queue_failures, 1);
	if (d->mr) /* no range is mapped or unmapped while queues change */
		pthread_mutex_lock(&d->mr->lock);
	d->ops->queue_close(q);
	int err = d->ops->queue_open(d->fds, d->ndev, 2 * d->qd, d->fixed_base,
				     d->fixed_len, &nf, &nq);
	if (!err && nf < d->nfixed) /* it must take the same fixed buffers */
		err = -ENOMEM;
	for (int i = 0; !err && d->mr && i < MEMREG_MAX; i++) {
		struct memreg_ent *e = &d->mr->e[i];
		if (e->base && e->fixed)
			err = d->ops->buf_update(nq, d->mr_slot0 + e->piece, e->base, e->len);
	}
	if (err && nq) {
		d->ops->queue_close(nq);
		nq = NULL;
	}
	pthread_mutex_lock(&d->qlock);
	for (unsigned i = 0; i < d->nqueues; i++)
		if (d->queues[i] == q) {
			d->queues[i] = err ? d->queues[--d->nqueues] : nq;
			break;
		}
	if (!err)
		d->qfree[d->nqfree++] = nq;
	pthread_cond_broadcast(&d->qcv);
	pthread_mutex_unlock(&d->qlock);
	if (d->mr)
		pthread_mutex_unlock(&d->mr->lock);
	kvt_log(KVT_LOG_ERR, "disk: an I/O queue failed; %s", err ?
		"no new one could be opened, fewer batches run at once" :
		"a new one replaces it");
}

/* The ios of a batch that found no queue left: each fails, hooks run. */
static void fail_ios(struct dev_io **ios, unsigned n, const struct dev_hooks *hooks)
{
	for (unsigned i = 0; i < n; i++) {
		ios[i]->res = -EIO;
		ios[i]->lost = 0;
		if (hooks && hooks->done)
			hooks->done(hooks->arg, i, ios[i]);
	}
}

/*
 * Runs ios on a free queue with hooks (NULL: none), at most depth in flight
 * (1 .. 2 * queue depth: the queue's slots); counts failures. An io its
 * prep hook declined (-ECANCELED) never reached the device and is not an
 * I/O error.
 */
static void run_on_queue(struct disk_tier *d, struct dev_io **ios, unsigned n,
			 unsigned depth, const struct dev_hooks *hooks)
{
	void *q;

	if (!n)
		return;
	if (depth < 1 || depth > 2 * d->qd)
		depth = 2 * d->qd;
	q = queue_get(d);
	if (!q) {
		fail_ios(ios, n, hooks);
	} else if (dev_run_hooks(d->ops, q, ios, n, depth, &d->inflight, hooks) < 0) {
		for (unsigned i = 0; i < n; i++)
			if (ios[i]->lost)
				atomic_store(&d->lost, 1);
		queue_replace(d, q);
	} else {
		queue_put(d, q);
	}
	for (unsigned i = 0; i < n; i++)
		if (ios[i]->res < 0 && ios[i]->res != -ECANCELED) {
			ctr_add(&d->io_errors, 1);
			kvt_log(KVT_LOG_ERR, "disk: %s of %u bytes at %llu on %s: %s",
				ios[i]->op == DEV_READ ? "read" : "write", ios[i]->len,
				(unsigned long long)ios[i]->off, d->paths[ios[i]->dev],
				strerror(-ios[i]->res));
		}
}

void disk_run(struct disk_tier *d, struct dev_io **ios, unsigned n,
	      const struct dev_hooks *hooks)
{
	run_on_queue(d, ios, n, 2 * d->qd, hooks);
}

/* Batch loads side by side (several threads', or async batches on the
 * store's workers) share the queue depth (dev_hooks' shared counter):
 * disk.queue_depth is the device's, not each load's. */
void disk_run_depth(struct disk_tier *d, struct dev_io **ios, unsigned n, unsigned depth,
		    const struct dev_hooks *hooks)
{
	struct dev_hooks h = hooks ? *hooks : (struct dev_hooks){ 0 };

	h.shared = &d->loads_out;
	run_on_queue(d, ios, n, depth, &h);
}

/* The registered buffer holding [p, p+len), or -1. */
int8_t disk_fixed_index(const struct disk_tier *d, const void *p, size_t len)
{
	const char *c = p;

	if (!d->nfixed || c < d->fixed_base || c + len > d->fixed_base + d->fixed_len)
		return -1;
	uint64_t a = (uint64_t)(c - d->fixed_base), b = a + len - 1;
	if (a / DEV_FIXED_CHUNK != b / DEV_FIXED_CHUNK || a / DEV_FIXED_CHUNK > 127)
		return -1;
	return (int8_t)(a / DEV_FIXED_CHUNK);
}

/*
 * The registered buffer holding [p, p+len): an arena chunk, or a piece of
 * a caller range (which is then held: *hold, released with memreg_put once
 * the I/O completed); -1 for a plain op. Counts the I/O of caller ranges.
 */
int8_t disk_buf_fixed(struct disk_tier *d, const void *p, size_t len, unsigned *hold)
{
	int8_t f = disk_fixed_index(d, p, len);
	int piece;

	*hold = 0;
	if (f >= 0 || !d->mr)
		return f;
	*hold = memreg_hold(d->mr, p, len, &piece);
	if (!*hold)
		return -1;
	if (piece < 0 || d->mr_slot0 + (unsigned)piece >= DEV_FIXED_MAX) {
		ctr_add(&d->mem_plain_ios, 1);
		return -1;
	}
	ctr_add(&d->mem_fixed_ios, 1);
	return (int8_t)(d->mr_slot0 + (unsigned)piece);
}

/* 1 if [p, p+len) lies in a caller range (kvt_mem_register): the caller
 * asked for I/O straight from and into it. */
int disk_registered(struct disk_tier *d, const void *p, size_t len)
{
	int piece;
	unsigned h = d->mr ? memreg_hold(d->mr, p, len, &piece) : 0;

	memreg_put(d->mr, h);
	return h != 0;
}

void disk_set_memreg(struct disk_tier *d, struct memreg *m)
{
	d->mr = m;
}

int disk_mem_map(struct disk_tier *d, struct memreg_ent *e, int map)
{
	unsigned first = d->mr_slot0 + e->piece;
	int err = 0;
	unsigned done = 0;

	if (!map && !e->fixed)
		return 0;
	if (map && !d->ops->buf_update)
		err = -ENOTSUP;
	pthread_mutex_lock(&d->qlock);
	for (; !err && done < d->nqueues; done++) {
		err = d->ops->buf_update(d->queues[done], first, map ? e->base : NULL, e->len);
		if (err && !map)
			err = 0; /* an entry left behind is never named again */
	}
	if (err && map) /* take back what the queues before took */
		for (unsigned i = 0; i < done; i++)
			d->ops->buf_update(d->queues[i], first, NULL, e->len);
	pthread_mutex_unlock(&d->qlock);
	e->fixed = map && !err;
	if (err) {
		ctr_add(&d->mem_refusals, 1);
		kvt_log(KVT_LOG_WARN, "disk: io_uring did not register the %zu bytes at %p "
			"as fixed buffers (%s): their I/O goes the plain way", e->len,
			(void *)e->base, strerror(-err));
	}
	return err;
}

void disk_io_set(struct dev_io *io, int op, uint16_t dev, uint64_t off,
		 void *buf, uint32_t len, int8_t fixed)
{
	memset(io, 0, sizeof(*io));
	io->op = (uint8_t)op;
	io->dev = dev;
	io->off = off;
	io->buf = buf;
	io->len = len;
	io->fixed = fixed;
}

/* Synchronous metadata I/O of len bytes (page multiple) at off on dev. */
int disk_meta_rw(struct disk_tier *d, int op, uint16_t dev, void *buf,
		 uint64_t len, uint64_t off)
{
	unsigned n = (unsigned)((len + IO_CHUNK - 1) / IO_CHUNK);
	struct dev_io *io = calloc(n, sizeof(*io));
	struct dev_io **p = calloc(n, sizeof(*p));
	int err = 0;

	if (!io || !p) {
		free(io);
		free(p);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		uint64_t o = (uint64_t)i * IO_CHUNK;
		uint64_t l = len - o < IO_CHUNK ? len - o : IO_CHUNK;

		disk_io_set(&io[i], op, dev, off + o, (char *)buf + o, (uint32_t)l, -1);
		p[i] = &io[i];
	}
	disk_run(d, p, n, NULL);
	for (unsigned i = 0; i < n; i++)
		if (io[i].res < 0 && !err)
			err = io[i].res;
	free(io);
	free(p);
	return err;
}
