/*
 * disk.c - the NVMe tier: the on-disk format (superblock, checkpoint area,
 * regions of self-describing records; kvtier-disk(5)), the log (append into
 * the open region, FIFO reclaim of whole regions, reinsertion of blocks hit
 * near the tail), the compact in-memory index, leases, and recovery (from
 * the checkpoint written at close, else by walking record headers).
 * I/O goes through the device seam of uring.h; this file knows nothing about
 * io_uring itself, nor about the RAM tier, peers or the store facade.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* XXH3 inline, for the small header checksums; payloads: kvt_checksum(). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "disk.h"
#include "internal.h"
#include "stats.h"
#include "uring.h"

#define PAGE 4096u
#define FORMAT_VERSION 1u
#define SB_MAGIC 0x314b534452544b56ull  /* "VKTRDSK1" little-endian */
#define REC_MAGIC 0x31434552524b564bull /* "KVKRREC1" */
#define CK_MAGIC 0x31544b43504b564bull  /* "KVKPCKT1" */

#define NIL UINT32_MAX
#define NQUEUES 8                 /* batches that can run at once */
#define PAGE_BITS 34              /* global page numbers: 64 TiB of regions */
#define LEN_BITS 28               /* block length - 1: blocks up to 256 MiB */
#define MAX_LEN (1ull << LEN_BITS)
#define LEASE_BIT (1ull << 62)
#define REGION_MIN_BYTES (64u * 1024)
#define DATA_ALIGN (64u * 1024)
#define IO_CHUNK (8u << 20)       /* metadata I/O is split into pieces this big */
#define STAGE_CACHE (64u << 20)   /* staging bytes kept for reuse */

/* --- on-disk structures (little-endian, kvtier-disk(5)) --------------------- */

struct sb {
	uint64_t magic;
	uint32_t version;
	uint32_t sb_bytes;
	uint64_t region_size;
	uint64_t dev_bytes;       /* bytes of each device the tier uses */
	uint64_t data_off;        /* first region on every device */
	uint64_t ckpt_off;
	uint64_t ckpt_bytes;
	uint32_t nregions;        /* across all devices */
	uint32_t ndev;
	uint32_t dev_index;
	uint32_t reserved;
	uint64_t instance[2];
	uint64_t created_ns;      /* CLOCK_REALTIME at format time */
	uint64_t checksum;        /* XXH3-64 of the bytes above */
};

struct rec_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_bytes;       /* PAGE */
	uint64_t key_lo, key_hi;
	uint64_t len;             /* payload bytes */
	uint64_t seq;             /* record sequence number, tier-wide */
	uint64_t region_seq;      /* the region's generation when written */
	uint64_t instance;        /* sb.instance[0] */
	uint64_t payload_sum;     /* XXH3-64 of the payload */
	uint64_t checksum;        /* XXH3-64 of the bytes above */
};

struct ck_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nregions;
	uint64_t instance[2];
	uint64_t nentries;
	uint64_t rec_seq;
	uint64_t region_seq;
	uint64_t body_bytes;
	uint64_t body_sum;
	uint64_t checksum;
};

struct ck_region {
	uint64_t seq;
	uint32_t wp;
	uint32_t state;
};

struct ck_ent {
	uint64_t key_lo, key_hi;
	uint64_t page;
	uint32_t len;
	uint32_t reserved;
};

/* --- in-memory state ------------------------------------------------------ */

/*
 * One stored block: 28 bytes. w packs the global page of its header
 * (PAGE_BITS), its length - 1 (LEN_BITS) and the lease flag. next chains the
 * entries written into the same region, so reclaim finds them without I/O.
 */
struct ient {
	uint64_t lo, hi;
	uint64_t w;
	uint32_t next;
} __attribute__((packed, aligned(4)));

enum { R_FREE = 0, R_OPEN = 1, R_SEALED = 2 };

struct region {
	uint64_t seq;             /* generation: order of opening */
	uint64_t lease_until;     /* ns; leased blocks inside protect it */
	uint32_t wp;              /* pages reserved from its start */
	uint32_t head;            /* entry chain */
	uint32_t pins;            /* reads and writes in flight */
	uint32_t nleased;
	uint8_t state;
};

struct disk_tier {
	const struct kvt_dev_ops *ops;
	unsigned ndev;
	int *fds;
	char **paths;
	/* geometry */
	uint64_t region_size, dev_bytes, data_off, ckpt_off, ckpt_bytes;
	uint32_t region_pages, nregions;
	uint64_t instance[2];
	unsigned qd;
	/* queues */
	void *queues[NQUEUES];
	void *qfree[NQUEUES];
	unsigned nqfree, nqueues;
	pthread_mutex_t qlock;
	pthread_cond_t qcv;
	char *fixed_base;
	size_t fixed_len;
	unsigned nfixed;
	/* staging buffers: free lists by power-of-two class */
	pthread_mutex_t slock;
	void *sfree[64];
	uint64_t scached;
	/* everything below is under lock */
	pthread_mutex_t lock;
	struct region *regions;
	uint32_t cur;             /* open region or NIL */
	uint32_t nfree;           /* regions never written */
	uint64_t rec_seq, region_seq;
	struct ient *ents;
	size_t ents_map;          /* bytes mapped for ents */
	uint32_t max_ents, ents_hwm, ent_free;
	uint32_t *slots;
	uint32_t nslots, count;
	uint64_t bytes_used;
	/* counters */
	_Atomic uint64_t hits, misses, puts, reclaims, reinsertions;
	_Atomic uint64_t checksum_failures, io_errors, refused, inflight;
	_Atomic uint64_t queue_failures;
	_Atomic int lost;         /* a failed queue kept I/O we could not reap */
};

static inline uint64_t pad_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static inline uint32_t rec_pages(uint64_t len)
{
	return (uint32_t)(1 + pad_up(len, PAGE) / PAGE);
}

static inline uint64_t w_page(uint64_t w) { return w & ((1ull << PAGE_BITS) - 1); }
static inline uint64_t w_len(uint64_t w) { return ((w >> PAGE_BITS) & (MAX_LEN - 1)) + 1; }
static inline uint64_t w_make(uint64_t page, uint64_t len)
{
	return page | ((len - 1) << PAGE_BITS);
}

static inline uint32_t page_region(const struct disk_tier *d, uint64_t page)
{
	return (uint32_t)(page / d->region_pages);
}

/* Device and byte offset of a global page. */
static inline void page_addr(const struct disk_tier *d, uint64_t page,
			     uint16_t *dev, uint64_t *off)
{
	uint32_t r = page_region(d, page);
	uint64_t in = page % d->region_pages;

	*dev = (uint16_t)(r % d->ndev);
	*off = d->data_off + (uint64_t)(r / d->ndev) * d->region_size + in * PAGE;
}

/* --- staging buffers ---------------------------------------------------------- */

static unsigned stage_class(size_t bytes)
{
	unsigned c = 12;

	while ((1ull << c) < bytes)
		c++;
	return c;
}

static void *stage_get(struct disk_tier *d, size_t bytes)
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

static void stage_put(struct disk_tier *d, void *p, size_t bytes)
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
	d->ops->queue_close(q);
	int err = d->ops->queue_open(d->fds, d->ndev, 2 * d->qd, d->fixed_base,
				     d->fixed_len, &nf, &nq);
	if (!err && nf < d->nfixed) { /* it must take the same fixed buffers */
		d->ops->queue_close(nq);
		err = -ENOMEM;
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
 * Runs ios on a free queue with hooks (NULL: none); counts failures. An io
 * its prep hook declined (-ECANCELED) never reached the device and is not
 * an I/O error.
 */
static void run_ios(struct disk_tier *d, struct dev_io **ios, unsigned n,
		    const struct dev_hooks *hooks)
{
	void *q;

	if (!n)
		return;
	q = queue_get(d);
	if (!q) {
		fail_ios(ios, n, hooks);
	} else if (dev_run_hooks(d->ops, q, ios, n, 2 * d->qd, &d->inflight, hooks) < 0) {
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

/* The registered buffer holding [p, p+len), or -1. */
static int8_t fixed_index(const struct disk_tier *d, const void *p, size_t len)
{
	const char *c = p;

	if (!d->nfixed || c < d->fixed_base || c + len > d->fixed_base + d->fixed_len)
		return -1;
	uint64_t a = (uint64_t)(c - d->fixed_base), b = a + len - 1;
	if (a / DEV_FIXED_CHUNK != b / DEV_FIXED_CHUNK || a / DEV_FIXED_CHUNK > 127)
		return -1;
	return (int8_t)(a / DEV_FIXED_CHUNK);
}

static void io_set(struct dev_io *io, int op, uint16_t dev, uint64_t off,
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
static int meta_rw(struct disk_tier *d, int op, uint16_t dev, void *buf,
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

		io_set(&io[i], op, dev, off + o, (char *)buf + o, (uint32_t)l, -1);
		p[i] = &io[i];
	}
	run_ios(d, p, n, NULL);
	for (unsigned i = 0; i < n; i++)
		if (io[i].res < 0 && !err)
			err = io[i].res;
	free(io);
	free(p);
	return err;
}

/* --- index ------------------------------------------------------------------ */

static inline uint32_t key_hash(uint64_t lo, uint64_t hi)
{
	uint64_t h = lo ^ (hi * 0x9E3779B97F4A7C15ull);

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return (uint32_t)h;
}

static uint32_t idx_find(const struct disk_tier *d, kvt_key k)
{
	uint32_t mask = d->nslots - 1;

	for (uint32_t i = key_hash(k.lo, k.hi) & mask;; i = (i + 1) & mask) {
		uint32_t e = d->slots[i];

		if (e == NIL)
			return NIL;
		if (d->ents[e].lo == k.lo && d->ents[e].hi == k.hi)
			return e;
	}
}

static void slots_put(uint32_t *slots, uint32_t mask, const struct ient *ents,
		      uint32_t e)
{
	uint32_t i = key_hash(ents[e].lo, ents[e].hi) & mask;

	while (slots[i] != NIL)
		i = (i + 1) & mask;
	slots[i] = e;
}

static int idx_insert(struct disk_tier *d, uint32_t e)
{
	if ((uint64_t)(d->count + 1) * 4 > (uint64_t)d->nslots * 3) {
		uint32_t n = d->nslots * 2;
		uint32_t *s = malloc(sizeof(*s) * n);

		if (!s || n < d->nslots) {
			free(s);
			return -ENOMEM;
		}
		memset(s, 0xff, sizeof(*s) * n);
		for (uint32_t i = 0; i < d->nslots; i++)
			if (d->slots[i] != NIL)
				slots_put(s, n - 1, d->ents, d->slots[i]);
		free(d->slots);
		d->slots = s;
		d->nslots = n;
	}
	slots_put(d->slots, d->nslots - 1, d->ents, e);
	d->count++;
	return 0;
}

/* Removes key's slot (backward-shift deletion, no tombstones). */
static void idx_delete(struct disk_tier *d, kvt_key k)
{
	uint32_t mask = d->nslots - 1, i = key_hash(k.lo, k.hi) & mask;

	for (;; i = (i + 1) & mask) {
		uint32_t e = d->slots[i];

		if (e == NIL)
			return;
		if (d->ents[e].lo == k.lo && d->ents[e].hi == k.hi)
			break;
	}
	for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
		uint32_t e = d->slots[j];

		if (e == NIL)
			break;
		uint32_t home = key_hash(d->ents[e].lo, d->ents[e].hi) & mask;
		/* Move e back into the hole at i unless its home lies in (i, j]. */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			d->slots[i] = e;
			i = j;
		}
	}
	d->slots[i] = NIL;
	d->count--;
}

static uint32_t ent_alloc(struct disk_tier *d)
{
	uint32_t e = d->ent_free;

	if (e != NIL) {
		d->ent_free = d->ents[e].next;
		return e;
	}
	if (d->ents_hwm >= d->max_ents)
		return NIL;
	return d->ents_hwm++;
}

/* Unlinks a live entry from the index, keeping it in its region's chain. */
static void ent_drop(struct disk_tier *d, uint32_t e)
{
	kvt_key k = { d->ents[e].lo, d->ents[e].hi };
	uint64_t w = d->ents[e].w;
	struct region *r = &d->regions[page_region(d, w_page(w))];

	if ((w & LEASE_BIT) && r->nleased && --r->nleased == 0)
		r->lease_until = 0;
	d->ents[e].w &= ~LEASE_BIT;
	idx_delete(d, k);
	d->bytes_used -= (uint64_t)rec_pages(w_len(w)) * PAGE;
}

/* Adds an entry for a record and links it into its region. */
static int ent_add(struct disk_tier *d, kvt_key k, uint64_t page, uint64_t len)
{
	uint32_t e = ent_alloc(d);
	struct region *r = &d->regions[page_region(d, page)];

	if (e == NIL)
		return -ENOSPC;
	d->ents[e].lo = k.lo;
	d->ents[e].hi = k.hi;
	d->ents[e].w = w_make(page, len);
	d->ents[e].next = r->head;
	if (idx_insert(d, e) < 0) {
		d->ents[e].next = d->ent_free;
		d->ent_free = e;
		return -ENOMEM;
	}
	r->head = e;
	d->bytes_used += (uint64_t)rec_pages(len) * PAGE;
	return 0;
}

/*
 * Leases entry e until deadline: its region is not reclaimed before then
 * (leases are per region, with a flag and a count per block so that
 * releasing every lease of a region frees it early).
 */
static void lease_entry(struct disk_tier *d, uint32_t e, uint64_t deadline)
{
	struct region *r = &d->regions[page_region(d, w_page(d->ents[e].w))];

	if (r->lease_until <= kvt_now_ns() && r->nleased) {
		/* Every lease in this region expired: clear their flags. */
		for (uint32_t x = r->head; x != NIL; x = d->ents[x].next)
			d->ents[x].w &= ~LEASE_BIT;
		r->nleased = 0;
	}
	if (!(d->ents[e].w & LEASE_BIT)) {
		d->ents[e].w |= LEASE_BIT;
		r->nleased++;
	}
	if (deadline > r->lease_until)
		r->lease_until = deadline;
}

/* --- regions ------------------------------------------------------------------ */

/* Forgets every block of region r and frees its entries. */
static void region_clear(struct disk_tier *d, uint32_t r)
{
	struct region *rg = &d->regions[r];

	for (uint32_t e = rg->head; e != NIL;) {
		uint32_t next = d->ents[e].next;
		kvt_key k = { d->ents[e].lo, d->ents[e].hi };

		if (idx_find(d, k) == e)
			ent_drop(d, e);
		d->ents[e].next = d->ent_free;
		d->ent_free = e;
		e = next;
	}
	rg->head = NIL;
	rg->nleased = 0;
	rg->lease_until = 0;
}

/*
 * Opens a new region for appending: a free one, else the oldest sealed one
 * that no I/O pins and no lease protects (FIFO), whose blocks are dropped.
 */
static int region_open_next(struct disk_tier *d)
{
	uint64_t now = kvt_now_ns();
	uint32_t best = NIL;

	for (uint32_t r = 0; r < d->nregions; r++) {
		struct region *rg = &d->regions[r];

		if (r == d->cur)
			continue;
		if (rg->state == R_FREE) {
			best = r;
			break;
		}
		if (rg->state == R_SEALED && rg->pins == 0 && rg->lease_until <= now &&
		    (best == NIL || rg->seq < d->regions[best].seq))
			best = r;
	}
	if (best == NIL)
		return -ENOSPC;
	if (d->cur != NIL)
		d->regions[d->cur].state = R_SEALED;
	if (d->regions[best].state == R_SEALED) {
		region_clear(d, best);
		ctr_add(&d->reclaims, 1);
	} else {
		d->nfree--;
	}
	d->regions[best].state = R_OPEN;
	d->regions[best].seq = ++d->region_seq;
	d->regions[best].wp = 0;
	d->cur = best;
	return 0;
}

/* Reserves pages in the open region; pins it. Returns the first page. */
static int reserve(struct disk_tier *d, uint32_t pages, uint64_t *page)
{
	if (pages > d->region_pages)
		return -ENOSPC;
	if (d->cur == NIL || d->regions[d->cur].wp + pages > d->region_pages) {
		int err = region_open_next(d);
		if (err < 0)
			return err;
	}
	struct region *rg = &d->regions[d->cur];
	*page = (uint64_t)d->cur * d->region_pages + rg->wp;
	rg->wp += pages;
	rg->pins++;
	return 0;
}

/* --- records ------------------------------------------------------------------ */

static void hdr_fill(struct disk_tier *d, struct rec_hdr *h, kvt_key k,
		     uint64_t len, uint64_t seq, uint64_t region_seq, uint64_t sum)
{
	memset(h, 0, PAGE);
	h->magic = REC_MAGIC;
	h->version = FORMAT_VERSION;
	h->hdr_bytes = PAGE;
	h->key_lo = k.lo;
	h->key_hi = k.hi;
	h->len = len;
	h->seq = seq;
	h->region_seq = region_seq;
	h->instance = d->instance[0];
	h->payload_sum = sum;
	h->checksum = XXH3_64bits(h, offsetof(struct rec_hdr, checksum));
}

/* A header is sound: its own checksum, format and instance match. */
static int hdr_ok(const struct disk_tier *d, const struct rec_hdr *h)
{
	return h->magic == REC_MAGIC && h->version == FORMAT_VERSION &&
	       h->hdr_bytes == PAGE && h->instance == d->instance[0] &&
	       h->len >= 1 && h->len <= MAX_LEN &&
	       h->checksum == XXH3_64bits(h, offsetof(struct rec_hdr, checksum));
}

struct wr {
	kvt_key key;
	const void *data;
	uint64_t len;
	int result;
	int active;               /* space reserved, I/O to run */
	uint64_t page, seq, region_seq;
	uint32_t old_e;           /* reinsertion: the entry being moved */
	uint64_t old_w;
	uint64_t sum;             /* with have_sum: the payload's verified sum */
	int have_sum;             /* data is not trusted: the copy must match sum */
	int direct;               /* payload written from data itself */
	int prep_err;             /* staging failed: nothing was written */
	void *stage;
	size_t stage_bytes;
	struct dev_io io[2];
	unsigned nio;
};

struct append_ctx {
	struct disk_tier *d;
	struct wr *w;
	const uint32_t *own;      /* io index -> record */
};

/*
 * dev_run's prep hook for a record's writes: just before the record's first
 * write goes out (while earlier records' writes are in flight), stages the
 * payload when it cannot be written from data directly, checksums what will
 * be written and fills the header page. A record with have_sum (a block
 * read back, whose data may be a caller's buffer that changed since) is
 * always staged and written only if the staged copy matches its sum.
 */
static int append_prep(void *arg, unsigned i, struct dev_io *io)
{
	struct append_ctx *c = arg;
	struct wr *x = &c->w[c->own[i]];
	uint64_t pad = pad_up(x->len, PAGE);
	char *payload;

	if (io != &x->io[0])
		return x->prep_err ? -ECANCELED : 0;
	x->stage = stage_get(c->d, x->stage_bytes);
	if (!x->stage) {
		x->prep_err = -ENOMEM;
		return -ECANCELED;
	}
	payload = x->direct ? (char *)x->data : (char *)x->stage + PAGE;
	if (!x->direct) {
		memcpy(payload, x->data, x->len);
		memset(payload + x->len, 0, pad - x->len);
	}
	uint64_t sum = kvt_checksum(payload, x->len);
	if (x->have_sum && sum != x->sum) {
		x->prep_err = -EBADMSG;
		return -ECANCELED;
	}
	hdr_fill(c->d, x->stage, x->key, x->len, x->seq, x->region_seq, sum);
	io->buf = x->stage;
	return 0;
}

/*
 * Appends records for w[0..n): reserves space under the lock, writes every
 * record of the batch in one dev_run (each record checksummed and submitted
 * as soon as its header is ready, so hashing overlaps the writes in
 * flight), then publishes the index entries.
 * reinsert: the records move existing entries (old_e) to the log's head.
 */
static void append(struct disk_tier *d, struct wr *w, size_t n, int reinsert)
{
	struct dev_io **ios = calloc(2 * n + 1, sizeof(*ios));
	uint32_t *own = calloc(2 * n + 1, sizeof(*own));
	unsigned nios = 0;

	if (!ios || !own) {
		free(ios);
		free(own);
		ios = NULL;
		own = NULL;
	}

	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		w[i].active = 0;
		if (!ios) {
			w[i].result = -ENOMEM;
			continue;
		}
		if (!reinsert && idx_find(d, w[i].key) != NIL) {
			w[i].result = 0;
			continue;
		}
		if (reinsert && (idx_find(d, w[i].key) != w[i].old_e ||
				 d->ents[w[i].old_e].w != w[i].old_w))
			continue;
		int err = reserve(d, rec_pages(w[i].len), &w[i].page);
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

	for (size_t i = 0; i < n; i++) {
		struct wr *x = &w[i];
		uint64_t pad = pad_up(x->len, PAGE);
		uint16_t dev;
		uint64_t off;

		if (!x->active)
			continue;
		page_addr(d, x->page, &dev, &off);
		x->direct = !x->have_sum && ((uintptr_t)x->data % PAGE) == 0 &&
			    x->len % PAGE == 0;
		x->stage_bytes = x->direct ? PAGE : PAGE + pad;
		x->stage = NULL;
		x->prep_err = 0;
		/* buffers and the header come from append_prep */
		if (x->direct) {
			io_set(&x->io[0], DEV_WRITE, dev, off, NULL, PAGE, -1);
			io_set(&x->io[1], DEV_WRITE, dev, off + PAGE, (void *)x->data,
			       (uint32_t)x->len, fixed_index(d, x->data, x->len));
			x->nio = 2;
		} else {
			io_set(&x->io[0], DEV_WRITE, dev, off, NULL,
			       (uint32_t)(PAGE + pad), -1);
			x->nio = 1;
		}
		for (unsigned j = 0; j < x->nio; j++) {
			own[nios] = (uint32_t)i;
			ios[nios++] = &x->io[j];
		}
	}
	struct append_ctx ac = { .d = d, .w = w, .own = own };
	struct dev_hooks hooks = { .prep = append_prep, .arg = &ac };
	run_ios(d, ios, nios, &hooks);

	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		struct wr *x = &w[i];
		int err = 0;

		if (!x->active)
			continue;
		d->regions[page_region(d, x->page)].pins--;
		for (unsigned j = 0; j < x->nio; j++)
			if (x->io[j].res < 0)
				err = -EIO;
		if (x->prep_err)
			err = x->prep_err;
		if (err && d->cur == page_region(d, x->page)) {
			/* A record that never made it would end a recovery scan of
			 * this region here: put later records in a fresh region. */
			d->regions[d->cur].state = R_SEALED;
			d->cur = NIL;
		}
		if (err == 0) {
			uint32_t cur = idx_find(d, x->key);

			if (reinsert) {
				if (cur == x->old_e && d->ents[cur].w == x->old_w) {
					struct region *orr = &d->regions[page_region(d, w_page(x->old_w))];
					uint64_t until = (x->old_w & LEASE_BIT) &&
							 orr->lease_until > kvt_now_ns() ?
							 orr->lease_until : 0;

					ent_drop(d, cur);
					if (ent_add(d, x->key, x->page, x->len) == 0) {
						ctr_add(&d->reinsertions, 1);
						if (until) /* the lease moves with the block */
							lease_entry(d, d->regions[page_region(d, x->page)].head,
								    until);
					}
				}
			} else if (cur == NIL) {
				err = ent_add(d, x->key, x->page, x->len);
			}
		}
		if (err == -EIO)
			kvt_set_error("disk: writing block of %llu bytes failed",
				      (unsigned long long)x->len);
		else if (err && err != -EBADMSG)
			kvt_set_error("disk: no index space for another block");
		x->result = err;
		if (!err && !reinsert)
			ctr_add(&d->puts, 1);
	}
	pthread_mutex_unlock(&d->lock);
	for (size_t i = 0; i < n; i++)
		if (w[i].active)
			stage_put(d, w[i].stage, w[i].stage_bytes);
	free(ios);
	free(own);
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
	append(d, &w, 1, 0);
	if (w.result == -ENOSPC) {
		char ks[34];
		kvt_set_error("disk: no region can take block %s (%zu bytes): all "
			      "are leased or in use", kvt_key_str(key, ks), len);
	}
	return w.result;
}

/* Every op of a batch that could not start fails with err: callers read
 * each op's result, so none may be left as it came in. */
static int fail_all(kvt_op *ops, size_t n, int err)
{
	for (size_t i = 0; i < n; i++)
		ops[i].result = err;
	return kvt_fail(err, "disk tier: out of memory for a batch of %zu", n);
}

int disk_put_batch(struct disk_tier *d, kvt_op *ops, size_t n)
{
	struct wr *w;
	int first = 0;

	if (!d || (!ops && n))
		return kvt_fail(-EINVAL, "disk_put_batch: %s is NULL", d ? "ops" : "tier");
	if (!n)
		return 0;
	w = calloc(n, sizeof(*w));
	if (!w)
		return fail_all(ops, n, -ENOMEM);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		ops[i].result = check_put(ops[i].key, ops[i].buf, ops[i].len,
					  d->region_pages);
		if (ops[i].result)
			continue;
		w[m].key = ops[i].key;
		w[m].data = ops[i].buf;
		w[m].len = ops[i].len;
		w[m].result = (int)i; /* remembers the op until append sets it */
		m++;
	}
	size_t *map = malloc(sizeof(*map) * (m ? m : 1));
	if (!map) {
		free(w);
		return -ENOMEM;
	}
	for (size_t j = 0; j < m; j++)
		map[j] = (size_t)w[j].result;
	append(d, w, m, 0);
	for (size_t j = 0; j < m; j++)
		ops[map[j]].result = w[j].result;
	for (size_t i = 0; i < n; i++)
		if (ops[i].result && !first)
			first = ops[i].result;
	free(map);
	free(w);
	return first;
}

/* --- reads ------------------------------------------------------------------- */

struct rd {
	uint32_t e;
	uint64_t w;
	int active;
	int direct;
	void *stage;
	size_t stage_bytes;
	struct dev_io io[2];
	unsigned nio;
	unsigned left;            /* ios not complete yet */
	int err;                  /* the outcome once left is 0 */
	uint64_t sum;             /* the payload's checksum, once verified */
};

struct load_ctx {
	struct disk_tier *d;
	struct rd *rd;
	kvt_op *ops;
	const uint32_t *own;      /* io index -> op */
};

/* Checks a record just read for op: header sound and naming op's key and
 * length, payload checksum right; copies a staged payload out. */
static int rd_verify(const struct disk_tier *d, struct rd *r, kvt_op *op)
{
	const struct rec_hdr *h = r->stage;
	uint64_t len = w_len(r->w);
	const void *payload = r->direct ? op->buf : (char *)r->stage + PAGE;

	if (!hdr_ok(d, h) || h->key_lo != op->key.lo || h->key_hi != op->key.hi ||
	    h->len != len || h->payload_sum != kvt_checksum(payload, len))
		return -EBADMSG;
	if (!r->direct)
		memcpy(op->buf, payload, len);
	r->sum = h->payload_sum;
	return 0;
}

/* dev_run's done hook for loads: verifies each block as soon as its last
 * read completes, while the batch's other reads are in flight. */
static void load_done(void *arg, unsigned i, struct dev_io *io)
{
	struct load_ctx *c = arg;
	uint32_t b = c->own[i];
	struct rd *r = &c->rd[b];

	if (io->res < 0)
		r->err = -EIO;
	if (--r->left == 0 && !r->err)
		r->err = rd_verify(c->d, r, &c->ops[b]);
}

/* A block read from a region this close to the log's tail moves to its head. */
static int near_tail(const struct disk_tier *d, uint32_t r)
{
	const struct region *rg = &d->regions[r];

	if (r == d->cur || rg->state != R_SEALED)
		return 0;
	/* Only once the log has wrapped: while free regions remain, nothing is
	 * about to be reclaimed. */
	if (d->nfree)
		return 0;
	return (d->region_seq - rg->seq) * 4 >= (uint64_t)d->nregions * 3;
}

/* Sets up the reads of block i (rd[i] active, its stage not taken yet):
 * header and payload into a stage, or the header into a stage and the
 * payload straight into the op's buffer (direct). Returns ios added to
 * ios/own at nios, 0 when no stage memory could be had. */
static unsigned rd_setup(struct disk_tier *d, struct rd *r, kvt_op *op, int direct,
			 uint32_t i, struct dev_io **ios, uint32_t *own)
{
	uint64_t len = w_len(r->w), pad = pad_up(len, PAGE);
	uint16_t dev;
	uint64_t off;

	page_addr(d, w_page(r->w), &dev, &off);
	r->direct = direct;
	r->stage_bytes = direct ? PAGE : PAGE + pad;
	r->stage = stage_get(d, r->stage_bytes);
	r->nio = 0;
	if (!r->stage)
		return 0;
	io_set(&r->io[0], DEV_READ, dev, off, r->stage, (uint32_t)r->stage_bytes, -1);
	r->nio = 1;
	if (direct) {
		io_set(&r->io[1], DEV_READ, dev, off + PAGE, op->buf, (uint32_t)pad,
		       fixed_index(d, op->buf, pad));
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
static void rd_again_staged(struct disk_tier *d, struct rd *rd, kvt_op *ops, size_t n,
			    struct dev_io **ios, uint32_t *own)
{
	unsigned nios = 0;

	for (size_t i = 0; i < n; i++) {
		struct rd *r = &rd[i];

		if (!r->active || !r->nio || !r->direct || r->err != -EBADMSG)
			continue;
		stage_put(d, r->stage, r->stage_bytes);
		nios += rd_setup(d, r, &ops[i], 0, (uint32_t)i, ios + nios, own + nios);
		if (!r->nio)
			r->err = -ENOMEM;
	}
	struct load_ctx lc = { .d = d, .rd = rd, .ops = ops, .own = own };
	struct dev_hooks hooks = { .done = load_done, .arg = &lc };
	run_ios(d, ios, nios, &hooks);
}

int disk_get_batch(struct disk_tier *d, kvt_op *ops, size_t n)
{
	return disk_get_batch_sums(d, ops, n, NULL);
}

int disk_get_batch_sums(struct disk_tier *d, kvt_op *ops, size_t n, uint64_t *sums)
{
	struct rd *rd;
	struct dev_io **ios;
	unsigned nios = 0;
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
		return fail_all(ops, n, -ENOMEM);
	}

	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		/* A NULL buf with len 0 asks for the size (-ENOBUFS). */
		uint32_t e = ops[i].buf || !ops[i].len ? idx_find(d, ops[i].key) : NIL;

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

	/* Payloads go straight into the caller's buffers, except where ops share
	 * one: those are staged, verified in the tier's own memory and copied. */
	uint8_t *shared = malloc(n);
	if (shared)
		kvt_ops_shared(ops, n, shared);
	for (size_t i = 0; i < n; i++) {
		struct rd *r = &rd[i];

		if (!r->active)
			continue;
		uint64_t pad = pad_up(w_len(r->w), PAGE);
		int direct = shared && !shared[i] && ((uintptr_t)ops[i].buf % PAGE) == 0 &&
			     ops[i].len >= pad;
		nios += rd_setup(d, r, &ops[i], direct, (uint32_t)i, ios + nios, own + nios);
	}
	free(shared);
	struct load_ctx lc = { .d = d, .rd = rd, .ops = ops, .own = own };
	struct dev_hooks hooks = { .done = load_done, .arg = &lc };
	run_ios(d, ios, nios, &hooks);
	rd_again_staged(d, rd, ops, n, ios, own);

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

	/* Unpin; drop damaged records; pick hits near the tail to move. */
	struct wr *re = calloc(n, sizeof(*re));
	size_t nre = 0;

	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		struct rd *r = &rd[i];

		if (!r->active)
			continue;
		uint32_t reg = page_region(d, w_page(r->w));
		d->regions[reg].pins--;
		int same = idx_find(d, ops[i].key) == r->e &&
			   (d->ents[r->e].w & ~LEASE_BIT) == (r->w & ~LEASE_BIT);
		if (ops[i].result == -EBADMSG && same)
			ent_drop(d, r->e);
		else if (ops[i].result == 0 && same && re && near_tail(d, reg)) {
			/* From the tier's own copy where there is one; a caller's
			 * buffer may have changed, so the copy must match the sum. */
			re[nre].key = ops[i].key;
			re[nre].data = r->direct ? ops[i].buf : (char *)r->stage + PAGE;
			re[nre].sum = r->sum;
			re[nre].have_sum = 1;
			re[nre].len = ops[i].len;
			re[nre].old_e = r->e;
			re[nre].old_w = d->ents[r->e].w;
			nre++;
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (nre)
		append(d, re, nre, 1);
	free(re);

	for (size_t i = 0; i < n; i++) {
		if (rd[i].active)
			stage_put(d, rd[i].stage, rd[i].stage_bytes);
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

/* --- small calls --------------------------------------------------------------- */

int disk_contains(struct disk_tier *d, kvt_key key, size_t *len)
{
	int found = 0;

	if (!d)
		return 0;
	pthread_mutex_lock(&d->lock);
	uint32_t e = idx_find(d, key);
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
	uint32_t e = idx_find(d, key);
	if (e != NIL) {
		lease_entry(d, e, deadline_ns);
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
	uint32_t e = idx_find(d, key);
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
	uint32_t e = idx_find(d, key);
	if (e != NIL) {
		ent_drop(d, e);
		err = 0;
	}
	pthread_mutex_unlock(&d->lock);
	if (err) {
		char ks[34];
		kvt_set_error("disk: key %s not stored", kvt_key_str(key, ks));
	}
	return err;
}

void disk_stats(struct disk_tier *d, json_t *obj)
{
	uint64_t objects, used, idx_bytes;

	if (!d || !obj)
		return;
	pthread_mutex_lock(&d->lock);
	objects = d->count;
	used = d->bytes_used;
	idx_bytes = (uint64_t)d->ents_hwm * sizeof(struct ient) +
		    (uint64_t)d->nslots * sizeof(uint32_t);
	pthread_mutex_unlock(&d->lock);
	json_object_set_new(obj, "capacity",
			    json_integer((json_int_t)((uint64_t)d->nregions * d->region_size)));
	json_object_set_new(obj, "bytes_used", json_integer((json_int_t)used));
	json_object_set_new(obj, "objects", json_integer((json_int_t)objects));
	json_object_set_new(obj, "hits", json_integer((json_int_t)ctr_get(&d->hits)));
	json_object_set_new(obj, "misses", json_integer((json_int_t)ctr_get(&d->misses)));
	json_object_set_new(obj, "puts", json_integer((json_int_t)ctr_get(&d->puts)));
	json_object_set_new(obj, "spills", json_integer((json_int_t)ctr_get(&d->puts)));
	json_object_set_new(obj, "refused_puts", json_integer((json_int_t)ctr_get(&d->refused)));
	json_object_set_new(obj, "reclaims", json_integer((json_int_t)ctr_get(&d->reclaims)));
	json_object_set_new(obj, "reinsertions",
			    json_integer((json_int_t)ctr_get(&d->reinsertions)));
	json_object_set_new(obj, "checksum_failures",
			    json_integer((json_int_t)ctr_get(&d->checksum_failures)));
	json_object_set_new(obj, "io_errors", json_integer((json_int_t)ctr_get(&d->io_errors)));
	json_object_set_new(obj, "queue_failures",
			    json_integer((json_int_t)ctr_get(&d->queue_failures)));
	json_object_set_new(obj, "queue_depth", json_integer((json_int_t)d->qd));
	json_object_set_new(obj, "inflight", json_integer((json_int_t)ctr_get(&d->inflight)));
	json_object_set_new(obj, "regions", json_integer((json_int_t)d->nregions));
	json_object_set_new(obj, "region_size", json_integer((json_int_t)d->region_size));
	json_object_set_new(obj, "devices", json_integer((json_int_t)d->ndev));
	json_object_set_new(obj, "fixed_buffers", json_integer((json_int_t)d->nfixed));
	json_object_set_new(obj, "index_entry_bytes", json_integer((json_int_t)sizeof(struct ient)));
	json_object_set_new(obj, "index_bytes_per_block",
			    json_real(objects ? (double)idx_bytes / (double)objects : 0.0));
}

/* --- superblock, checkpoint, recovery ------------------------------------------------ */

static void sb_fill(const struct disk_tier *d, struct sb *s, uint32_t dev)
{
	memset(s, 0, PAGE);
	s->magic = SB_MAGIC;
	s->version = FORMAT_VERSION;
	s->sb_bytes = sizeof(*s);
	s->region_size = d->region_size;
	s->dev_bytes = d->dev_bytes;
	s->data_off = d->data_off;
	s->ckpt_off = d->ckpt_off;
	s->ckpt_bytes = d->ckpt_bytes;
	s->nregions = d->nregions;
	s->ndev = d->ndev;
	s->dev_index = dev;
	s->instance[0] = d->instance[0];
	s->instance[1] = d->instance[1];
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	s->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	s->checksum = XXH3_64bits(s, offsetof(struct sb, checksum));
}

/* Why superblock s of device dev cannot be used, or NULL if it can. */
static const char *sb_problem(const struct disk_tier *d, const struct sb *s,
			      uint32_t dev, const struct sb *first)
{
	if (s->magic != SB_MAGIC)
		return "no superblock (new or foreign device)";
	if (s->checksum != XXH3_64bits(s, offsetof(struct sb, checksum)))
		return "superblock checksum mismatch";
	if (s->version != FORMAT_VERSION)
		return "another on-disk format version";
	if (s->sb_bytes != sizeof(*s) || s->region_size != d->region_size ||
	    s->dev_bytes != d->dev_bytes || s->data_off != d->data_off ||
	    s->ckpt_off != d->ckpt_off || s->ckpt_bytes != d->ckpt_bytes ||
	    s->nregions != d->nregions || s->ndev != d->ndev)
		return "another geometry (capacity, region size or device count changed)";
	if (s->dev_index != dev)
		return "devices listed in another order";
	if (first && (s->instance[0] != first->instance[0] ||
		      s->instance[1] != first->instance[1]))
		return "devices belong to different tiers";
	return NULL;
}

static int format_tier(struct disk_tier *d)
{
	void *page = stage_get(d, PAGE);
	int err = 0;

	if (!page)
		return -ENOMEM;
	if (getrandom(d->instance, sizeof(d->instance), 0) != sizeof(d->instance)) {
		d->instance[0] = kvt_now_ns() ^ ((uint64_t)getpid() << 32);
		d->instance[1] = (uint64_t)(uintptr_t)d ^ d->instance[0] * 31;
	}
	if (d->instance[0] == 0)
		d->instance[0] = 1;
	/* Clear the checkpoint first so no older one can pair with the new sb. */
	memset(page, 0, PAGE);
	err = meta_rw(d, DEV_WRITE, 0, page, PAGE, d->ckpt_off);
	for (uint32_t i = 0; i < d->ndev && !err; i++) {
		sb_fill(d, page, i);
		err = meta_rw(d, DEV_WRITE, (uint16_t)i, page, PAGE, 0);
		if (!err)
			err = d->ops->dev_sync(d->fds[i]);
	}
	stage_put(d, page, PAGE);
	if (err)
		return kvt_fail(err, "disk: writing the superblock failed: %s",
				strerror(-err));
	return 0;
}

/* Picks up the newest region as the open one if it has room left. */
static void resume_open_region(struct disk_tier *d)
{
	uint32_t best = NIL;

	for (uint32_t r = 0; r < d->nregions; r++)
		if (d->regions[r].state != R_FREE &&
		    (best == NIL || d->regions[r].seq > d->regions[best].seq))
			best = r;
	d->cur = NIL;
	if (best != NIL && d->regions[best].wp < d->region_pages) {
		d->regions[best].state = R_OPEN;
		d->cur = best;
	}
}

static void index_reset(struct disk_tier *d)
{
	memset(d->slots, 0xff, sizeof(*d->slots) * d->nslots);
	d->count = 0;
	d->ents_hwm = 0;
	d->ent_free = NIL;
	d->bytes_used = 0;
	for (uint32_t r = 0; r < d->nregions; r++) {
		memset(&d->regions[r], 0, sizeof(d->regions[r]));
		d->regions[r].head = NIL;
	}
	d->cur = NIL;
	d->rec_seq = d->region_seq = 0;
}

/* Loads the checkpoint; 1 if used, 0 if absent or not valid (why logged). */
static int load_checkpoint(struct disk_tier *d)
{
	struct ck_hdr *h = stage_get(d, PAGE);
	void *body = NULL;
	uint64_t body_bytes = 0;
	const char *why = NULL;
	int used = 0;

	if (!h)
		return 0;
	if (meta_rw(d, DEV_READ, 0, h, PAGE, d->ckpt_off) < 0) {
		why = "cannot read it";
		goto out;
	}
	if (h->magic != CK_MAGIC) {
		why = "none (crash or first open)";
		goto out;
	}
	if (h->checksum != XXH3_64bits(h, offsetof(struct ck_hdr, checksum)) ||
	    h->version != FORMAT_VERSION || h->nregions != d->nregions ||
	    h->instance[0] != d->instance[0] || h->instance[1] != d->instance[1] ||
	    h->nentries > d->max_ents ||
	    h->body_bytes != d->nregions * sizeof(struct ck_region) +
			     h->nentries * sizeof(struct ck_ent) ||
	    pad_up(h->body_bytes, PAGE) + PAGE > d->ckpt_bytes) {
		why = "header does not match this tier";
		goto out;
	}
	body_bytes = pad_up(h->body_bytes, PAGE);
	if (body_bytes) {
		body = stage_get(d, body_bytes);
		if (!body || meta_rw(d, DEV_READ, 0, body, body_bytes, d->ckpt_off + PAGE) < 0) {
			why = "cannot read its body";
			goto out;
		}
	}
	if (kvt_checksum(body, h->body_bytes) != h->body_sum) {
		why = "body checksum mismatch";
		goto out;
	}
	const struct ck_region *cr = body;
	const struct ck_ent *ce = (const struct ck_ent *)(cr + d->nregions);
	for (uint32_t r = 0; r < d->nregions; r++) {
		if (cr[r].wp > d->region_pages || cr[r].state > R_SEALED ||
		    cr[r].seq > h->region_seq) {
			why = "region table out of range";
			goto out;
		}
		d->regions[r].seq = cr[r].seq;
		d->regions[r].wp = cr[r].wp;
		d->regions[r].state = cr[r].state == R_FREE ? R_FREE : R_SEALED;
	}
	for (uint64_t i = 0; i < h->nentries; i++) {
		uint64_t page = ce[i].page, len = ce[i].len;
		kvt_key k = { ce[i].key_lo, ce[i].key_hi };
		uint32_t r = (uint32_t)(page / d->region_pages);

		if (len == 0 || len > MAX_LEN || r >= d->nregions ||
		    d->regions[r].state == R_FREE ||
		    page % d->region_pages + rec_pages(len) > d->regions[r].wp ||
		    idx_find(d, k) != NIL || ent_add(d, k, page, len) < 0) {
			why = "an entry is out of range or repeated";
			goto out;
		}
	}
	d->rec_seq = h->rec_seq;
	d->region_seq = h->region_seq;
	used = 1;
out:
	if (!used) {
		index_reset(d);
		kvt_log(KVT_LOG_INFO, "disk: checkpoint not used: %s; scanning regions",
			why ? why : "unknown");
	}
	stage_put(d, body, body_bytes);
	stage_put(d, h, PAGE);
	return used;
}

/* Invalidates the checkpoint so that a crash after this open cannot reuse it. */
static int kill_checkpoint(struct disk_tier *d)
{
	void *page = stage_get(d, PAGE);
	int err;

	if (!page)
		return -ENOMEM;
	memset(page, 0, PAGE);
	err = meta_rw(d, DEV_WRITE, 0, page, PAGE, d->ckpt_off);
	if (!err)
		err = d->ops->dev_sync(d->fds[0]);
	stage_put(d, page, PAGE);
	return err;
}

/*
 * Rebuilds the index by walking each region's chain of record headers from
 * its start, all regions in parallel (one header read per region per round).
 * A region's walk ends at the first header that is not sound, belongs to
 * another generation of the region, or would run past the region's end.
 */
static int scan_regions(struct disk_tier *d)
{
	uint32_t nr = d->nregions, batch = 64;
	uint32_t *wp = calloc(nr, sizeof(*wp));
	uint8_t *live = malloc(nr);
	struct dev_io *io = calloc(batch, sizeof(*io));
	struct dev_io **p = calloc(batch, sizeof(*p));
	uint32_t *who = calloc(batch, sizeof(*who));
	char *bufs = stage_get(d, (size_t)batch * PAGE);
	uint64_t records = 0;
	int err = 0;

	if (!wp || !live || !io || !p || !who || !bufs) {
		err = -ENOMEM;
		goto out;
	}
	memset(live, 1, nr);
	for (uint32_t active = nr; active;) {
		uint32_t n = 0;

		active = 0;
		for (uint32_t r = 0; r < nr; r++) {
			if (!live[r])
				continue;
			active++;
			if (n == batch)
				continue;
			uint16_t dev;
			uint64_t off;

			page_addr(d, (uint64_t)r * d->region_pages + wp[r], &dev, &off);
			io_set(&io[n], DEV_READ, dev, off, bufs + (size_t)n * PAGE, PAGE, -1);
			p[n] = &io[n];
			who[n++] = r;
		}
		if (!n)
			break;
		run_ios(d, p, n, NULL);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t r = who[i];
			struct region *rg = &d->regions[r];
			const struct rec_hdr *h = (const void *)(bufs + (size_t)i * PAGE);
			uint32_t pages;

			if (io[i].res < 0 || !hdr_ok(d, h) || h->region_seq == 0 ||
			    (rg->seq && h->region_seq != rg->seq) ||
			    (pages = rec_pages(h->len)) > d->region_pages - wp[r]) {
				live[r] = 0;
				continue;
			}
			rg->seq = h->region_seq;
			kvt_key k = { h->key_lo, h->key_hi };
			uint64_t page = (uint64_t)r * d->region_pages + wp[r];
			uint32_t old = idx_find(d, k);
			int newer = old == NIL ||
				    d->regions[page_region(d, w_page(d->ents[old].w))].seq <=
				    rg->seq;
			if (old != NIL && newer)
				ent_drop(d, old);
			if (newer && ent_add(d, k, page, h->len) < 0) {
				live[r] = 0;
				continue;
			}
			records++;
			if (h->seq > d->rec_seq)
				d->rec_seq = h->seq;
			if (h->region_seq > d->region_seq)
				d->region_seq = h->region_seq;
			wp[r] += pages;
			if (wp[r] >= d->region_pages)
				live[r] = 0;
		}
	}
	for (uint32_t r = 0; r < nr; r++) {
		d->regions[r].wp = wp[r];
		d->regions[r].state = wp[r] ? R_SEALED : R_FREE;
		if (!wp[r])
			d->regions[r].seq = 0;
	}
	kvt_log(KVT_LOG_INFO, "disk: scan found %llu records, %u blocks indexed",
		(unsigned long long)records, d->count);
out:
	stage_put(d, bufs, (size_t)batch * PAGE);
	free(wp);
	free(live);
	free(io);
	free(p);
	free(who);
	return err;
}

static int write_checkpoint(struct disk_tier *d)
{
	uint64_t body_bytes = d->nregions * sizeof(struct ck_region) +
			      (uint64_t)d->count * sizeof(struct ck_ent);
	uint64_t padded = pad_up(body_bytes, PAGE);
	struct ck_hdr *h = stage_get(d, PAGE);
	void *body = padded ? stage_get(d, padded) : NULL;
	int err = 0;

	if (!h || (padded && !body) || padded + PAGE > d->ckpt_bytes) {
		err = h && body ? -ENOSPC : -ENOMEM;
		goto out;
	}
	memset(body, 0, padded);
	struct ck_region *cr = body;
	struct ck_ent *ce = (struct ck_ent *)(cr + d->nregions);
	for (uint32_t r = 0; r < d->nregions; r++) {
		cr[r].seq = d->regions[r].seq;
		cr[r].wp = d->regions[r].wp;
		cr[r].state = d->regions[r].state == R_FREE ? R_FREE : R_SEALED;
	}
	uint64_t n = 0;
	for (uint32_t i = 0; i < d->nslots; i++) {
		uint32_t e = d->slots[i];

		if (e == NIL)
			continue;
		ce[n].key_lo = d->ents[e].lo;
		ce[n].key_hi = d->ents[e].hi;
		ce[n].page = w_page(d->ents[e].w);
		ce[n].len = (uint32_t)w_len(d->ents[e].w);
		n++;
	}
	memset(h, 0, PAGE);
	h->magic = CK_MAGIC;
	h->version = FORMAT_VERSION;
	h->nregions = d->nregions;
	h->instance[0] = d->instance[0];
	h->instance[1] = d->instance[1];
	h->nentries = n;
	h->rec_seq = d->rec_seq;
	h->region_seq = d->region_seq;
	h->body_bytes = body_bytes;
	h->body_sum = kvt_checksum(body, body_bytes);
	h->checksum = XXH3_64bits(h, offsetof(struct ck_hdr, checksum));
	/* Data first, then the body, then the header that makes it valid. */
	for (unsigned i = 0; i < d->ndev && !err; i++)
		err = d->ops->dev_sync(d->fds[i]);
	if (!err && padded)
		err = meta_rw(d, DEV_WRITE, 0, body, padded, d->ckpt_off + PAGE);
	if (!err)
		err = d->ops->dev_sync(d->fds[0]);
	if (!err)
		err = meta_rw(d, DEV_WRITE, 0, h, PAGE, d->ckpt_off);
	if (!err)
		err = d->ops->dev_sync(d->fds[0]);
out:
	if (err)
		kvt_log(KVT_LOG_WARN, "disk: checkpoint not written (%s); the next "
			"open will scan regions", strerror(-err));
	stage_put(d, body, padded);
	stage_put(d, h, PAGE);
	return err;
}

/* Reads every superblock; formats the tier unless all agree with the config. */
static int recover(struct disk_tier *d)
{
	struct sb *s = stage_get(d, (size_t)d->ndev * PAGE);
	const char *why = NULL;
	uint32_t bad = 0;
	int fresh = 1, err = 0;

	if (!s)
		return -ENOMEM;
	for (uint32_t i = 0; i < d->ndev && !why; i++) {
		struct sb *si = (struct sb *)((char *)s + (size_t)i * PAGE);

		err = meta_rw(d, DEV_READ, (uint16_t)i, si, PAGE, 0);
		if (err) {
			stage_put(d, s, (size_t)d->ndev * PAGE);
			return kvt_fail(err, "disk: reading the superblock of %s: %s",
					d->paths[i], strerror(-err));
		}
		if (si->magic == SB_MAGIC)
			fresh = 0;
		why = sb_problem(d, si, i, i ? s : NULL);
		bad = i;
	}
	if (why) {
		if (!fresh)
			kvt_log(KVT_LOG_WARN, "disk: %s: %s; starting with an empty tier",
				d->paths[bad], why);
		else
			kvt_log(KVT_LOG_INFO, "disk: formatting new tier on %s", d->paths[0]);
		err = format_tier(d);
	} else {
		d->instance[0] = s->instance[0];
		d->instance[1] = s->instance[1];
		uint64_t t0 = kvt_now_ns();
		int from_ckpt = load_checkpoint(d);
		if (!from_ckpt)
			err = scan_regions(d);
		if (!err)
			err = kill_checkpoint(d);
		if (!err)
			kvt_log(KVT_LOG_INFO, "disk: recovered %u blocks from %s in %.1f ms",
				d->count, from_ckpt ? "the checkpoint" : "a region scan",
				(double)(kvt_now_ns() - t0) / 1e6);
		resume_open_region(d);
	}
	stage_put(d, s, (size_t)d->ndev * PAGE);
	d->nfree = 0;
	for (uint32_t r = 0; r < d->nregions; r++)
		d->nfree += d->regions[r].state == R_FREE;
	if (err)
		return kvt_fail(err, "disk: recovery failed: %s", strerror(-err));
	return 0;
}

/* --- open / close ------------------------------------------------------------------- */

static int geometry(struct disk_tier *d, const struct kvt_config *cfg)
{
	uint64_t rs = cfg->region_size;

	if (rs < REGION_MIN_BYTES || rs % PAGE || rs > (4ull << 30))
		return kvt_fail(-EINVAL, "disk.region_size: %llu is not a multiple of "
				"4096 between 64 KiB and 4 GiB", (unsigned long long)rs);
	if (cfg->queue_depth == 0 || cfg->queue_depth > 4096)
		return kvt_fail(-EINVAL, "disk.queue_depth: %u not in 1..4096",
				cfg->queue_depth);
	d->region_size = rs;
	d->region_pages = (uint32_t)(rs / PAGE);
	d->qd = cfg->queue_depth;
	d->dev_bytes = cfg->disk_capacity / d->ndev / PAGE * PAGE;
	/* The checkpoint holds 16 bytes per region and 32 per block (a block
	 * takes at least two pages), so its area is sized from the capacity. */
	uint64_t max_regions = d->dev_bytes / rs * d->ndev;
	uint64_t max_ents = max_regions * (d->region_pages / 2);
	d->ckpt_off = PAGE;
	d->ckpt_bytes = pad_up(PAGE + max_regions * sizeof(struct ck_region) +
			       max_ents * sizeof(struct ck_ent), PAGE);
	d->data_off = pad_up(d->ckpt_off + d->ckpt_bytes, DATA_ALIGN);
	uint64_t per_dev = d->dev_bytes > d->data_off ?
			   (d->dev_bytes - d->data_off) / rs : 0;
	uint64_t nr = per_dev * d->ndev;
	if (per_dev == 0 || nr < 2)
		return kvt_fail(-EINVAL, "disk.capacity: %llu bytes over %u device(s) "
				"holds fewer than two regions of %llu bytes (plus "
				"%llu bytes of metadata per device)",
				(unsigned long long)cfg->disk_capacity, d->ndev,
				(unsigned long long)rs, (unsigned long long)d->data_off);
	if (nr * d->region_pages >= (1ull << PAGE_BITS) || nr > UINT32_MAX / 2)
		return kvt_fail(-EINVAL, "disk.capacity: %llu bytes is more than the "
				"64 TiB one tier addresses",
				(unsigned long long)cfg->disk_capacity);
	d->nregions = (uint32_t)nr;
	uint64_t me = nr * (d->region_pages / 2);
	d->max_ents = me > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)me;
	return 0;
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
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->qlock);
	pthread_mutex_destroy(&d->slock);
	pthread_cond_destroy(&d->qcv);
	free(d);
}

int disk_open(const struct kvt_config *cfg, void *fixed_base, size_t fixed_len,
	      const struct kvt_dev_ops *ops, struct disk_tier **out)
{
	struct disk_tier *d;
	int err;

	if (!cfg || !out)
		return kvt_fail(-EINVAL, "disk_open: %s is NULL", cfg ? "out" : "cfg");
	*out = NULL;
	if (cfg->ndisk == 0 || !cfg->disk_paths)
		return kvt_fail(-EINVAL, "disk.path: no device configured");
	if (cfg->ndisk > 64)
		return kvt_fail(-EINVAL, "disk.path: %u devices, at most 64", cfg->ndisk);
	for (unsigned i = 0; i < cfg->ndisk; i++)
		if (!cfg->disk_paths[i] || !cfg->disk_paths[i][0])
			return kvt_fail(-EINVAL, "disk.path[%u]: empty path", i);
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->ops = ops ? ops : &uring_dev_ops;
	d->ndev = cfg->ndisk;
	d->cur = NIL;
	d->ent_free = NIL;
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->qlock, NULL);
	pthread_mutex_init(&d->slock, NULL);
	pthread_cond_init(&d->qcv, NULL);
	d->fds = malloc(sizeof(int) * d->ndev);
	d->paths = calloc(d->ndev, sizeof(char *));
	if (!d->fds || !d->paths) {
		err = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < d->ndev; i++)
		d->fds[i] = -1;
	err = geometry(d, cfg);
	if (err)
		goto fail;
	for (unsigned i = 0; i < d->ndev; i++) {
		d->paths[i] = strdup(cfg->disk_paths[i]);
		if (!d->paths[i]) {
			err = -ENOMEM;
			goto fail;
		}
		err = refuse_same_device(d, i);
		if (err)
			goto fail;
		int fd = d->ops->dev_open(d->paths[i], d->dev_bytes);
		if (fd < 0) {
			err = fd;
			goto fail;
		}
		d->fds[i] = fd;
	}
	if (fixed_base && fixed_len) {
		d->fixed_base = fixed_base;
		d->fixed_len = fixed_len;
	}
	d->nfixed = UINT32_MAX;
	for (unsigned i = 0; i < NQUEUES; i++) {
		unsigned nf = 0;

		err = d->ops->queue_open(d->fds, d->ndev, 2 * d->qd, d->fixed_base,
					 d->fixed_len, &nf, &d->queues[i]);
		if (err)
			goto fail;
		d->nqueues++;
		d->qfree[d->nqfree++] = d->queues[i];
		if (nf < d->nfixed)
			d->nfixed = nf;
	}
	/* Index: entries mapped for the most blocks the tier can hold, touched
	 * only as used; slots grow by doubling. */
	d->ents_map = (size_t)d->max_ents * sizeof(struct ient);
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
	index_reset(d);
	err = recover(d);
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
	write_checkpoint(d);
	pthread_mutex_unlock(&d->lock);
	tier_free(d);
}
