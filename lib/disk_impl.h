/*
 * disk_impl.h - what the files of the NVMe tier share and nothing outside
 * it sees: the record header's layout, the geometry and packing of index
 * entries, struct disk_tier itself, and the functions one file of the tier
 * calls in another (disk.c: put, leases, open and close; disk_read.c: get;
 * disk_io.c: staging buffers and the queue pool; disk_index.c: the index;
 * disk_region.c: regions, reclaim and the reinsertion decision;
 * disk_format.c: superblock, checkpoint and recovery).
 */
#ifndef KVT_DISK_IMPL_H
#define KVT_DISK_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* XXH3 inline, for the small header checksums; payloads: kvt_checksum(). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "disk.h"
#include "internal.h"
#include "stats.h"
#include "dev.h"
#include "memreg.h"

#define PAGE 4096u
#define FORMAT_VERSION 1u
#define SB_MAGIC 0x314b534452544b56ull  /* "VKTRDSK1" little-endian */
#define REC_MAGIC 0x31434552524b564bull /* "KVKRREC1" */
#define CK_MAGIC 0x31544b43504b564bull  /* "KVKPCKT1" */

#define NIL UINT32_MAX
#define NQUEUES 32                /* batches that can run at once (one per slot loader) */
#define PAGE_BITS 34              /* global page numbers: 64 TiB of regions */
#define LEN_BITS 28               /* block length - 1: blocks up to 256 MiB */
#define MAX_LEN (1ull << LEN_BITS)
#define LEASE_BIT (1ull << 62)
#define REGION_MIN_BYTES (64u * 1024)
#define DATA_ALIGN (64u * 1024)
#define IO_CHUNK (8u << 20)       /* metadata I/O is split into pieces this big */
#define STAGE_CACHE (64u << 20)   /* staging bytes kept for reuse */
#define HSTAGE_POOL (128u << 20)  /* record staging bytes in huge pages, at most,
				     for all the process's tiers */
#define HSTAGE_ALIGN (2u << 20)   /* a huge page */
#define HSTAGE_UNIT (64u << 10)   /* their pieces are multiples of this */
#define HSTAGE_CLASSES 128u       /* pieces up to 8 MiB */
#define VERIFIERS_MAX 4u          /* verifier threads a tier starts, at most */
#define DEFAULT_MAX_REQ (512u << 10) /* bytes per device request where the
					device's limit is not known */
#define DEFAULT_MAX_SEGS 127u     /* memory segments per device request where
				     the device's limit is not known (NVMe's
				     usual) */

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

/* --- in-memory state ------------------------------------------------------ */

/*
 * One stored block: 28 bytes. w packs the global page of its header
 * (PAGE_BITS), its length - 1 (LEN_BITS) and the lease flag. next chains the
 * entries written into the same region, so reclaim finds them without I/O.
 */
struct disk_ent {
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
	/* per device, the bytes from its start that held what was there at
	 * open (dev_bytes, less for a file found cut short while closed,
	 * extended since: zeros past it); recovery drops what lay past */
	uint64_t *held;
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
	/* caller ranges (kvt_mem_register): the store's table, and the first
	 * fixed-buffer entry of its pieces */
	struct memreg *mr;
	unsigned mr_slot0;
	/* staging buffers: free lists by power-of-two class */
	pthread_mutex_t slock;
	void *sfree[64];
	uint64_t scached;
	/* record stages in huge pages (disk_hstage_get, from a range the
	 * process's tiers share): bytes this tier holds, and its most */
	size_t hused, hpool_max;
	/* the bytes one device request carries whole (the smallest over the
	 * devices): a record no longer than that is read whole into a
	 * huge-page stage, one request (disk_read.c) */
	uint64_t max_req;
	/* the memory segments one device request carries (the fewest over
	 * the devices): a record that fits one request and whose payload's
	 * pages, with its header's, are no more than that is read into the
	 * caller's page-aligned buffer by one vectored request, uncopied */
	unsigned max_segs;
	/* disk.stage_reads as resolved at open: a record that fits one
	 * request is read into a huge-page stage before the caller's buffer
	 * is tried (disk_read.c) */
	int stage_first;
	_Atomic uint64_t vectored_reads; /* records read so (disk_read.c) */
	/* everything below is under lock */
	pthread_mutex_t lock;
	struct region *regions;
	uint32_t cur;             /* open region or NIL */
	uint32_t nfree;           /* regions never written */
	uint64_t rec_seq, region_seq;
	struct disk_ent *ents;
	size_t ents_map;          /* bytes mapped for ents */
	uint32_t max_ents, ents_hwm, ent_free;
	uint32_t *slots;
	uint32_t nslots, count;
	uint64_t bytes_used;
	/* counters */
	_Atomic uint64_t hits, misses, puts, reclaims, reinsertions;
	_Atomic uint64_t checksum_failures, io_errors, refused, inflight;
	_Atomic uint64_t loads_out;   /* batch loads' reads in flight (disk_run_depth) */
	_Atomic uint64_t queue_failures;
	_Atomic uint64_t mem_fixed_ios, mem_plain_ios, mem_refusals;
	_Atomic uint64_t staged_reads; /* records read whole into a huge-page stage */
	_Atomic uint64_t staged_writes; /* records written whole from one */
	_Atomic int lost;         /* a failed queue kept I/O we could not reap */
	/* the verifier threads (disk_read.c, nverifiers of them) and their
	 * queue of records read, under vlock; vstate 0 not started, 1
	 * running, -1 none */
	pthread_mutex_t vlock;
	pthread_cond_t vwork, vdone;
	pthread_t vthread[VERIFIERS_MAX];
	unsigned nverifiers, vwant; /* started; to start (0: by the CPUs) */
	int vstate, vstop;
	struct rd *vhead, *vtail;
	unsigned vlen;
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

/* One record to append (disk_append), of a put or of a reinsertion. */
struct wr {
	kvt_key key;
	const void *data;
	uint64_t len;
	int result;
	int active;               /* space reserved, I/O to run */
	uint64_t page, seq, region_seq;
	uint32_t old_e;           /* reinsertion: the entry being moved */
	uint64_t old_w;
	uint64_t sum;             /* with have_sum or kept_sum: the payload's sum */
	int have_sum;             /* data is not trusted: the copy must match sum */
	int kept_sum;             /* sum is data's, kept as it was copied there:
				     written without computing it again */
	int direct;               /* payload written from data itself */
	unsigned mr;              /* hold on a caller range (memreg_hold), or 0 */
	int prep_err;             /* staging failed: nothing was written */
	void *stage;
	size_t stage_bytes;
	int huge;                 /* stage is a huge-page one (disk_hstage_get) */
	struct dev_io io[2];
	unsigned nio;
	unsigned left;            /* its ios not yet complete */
	int published;            /* ended at its completion (disk_append's each) */
};

/* disk_io.c */
void *disk_stage_get(struct disk_tier *d, size_t bytes);
void disk_stage_put(struct disk_tier *d, void *p, size_t bytes);
void *disk_hstage_get(struct disk_tier *d, size_t bytes);
void disk_hstage_put(struct disk_tier *d, void *p, size_t bytes);
void disk_run(struct disk_tier *d, struct dev_io **ios, unsigned n,
	      const struct dev_hooks *hooks);
/* The reads of a batch load, at most depth in flight, and with other batch
 * loads running beside it, no more than depth among them all (at least one
 * each: dev_hooks.shared). */
void disk_run_depth(struct disk_tier *d, struct dev_io **ios, unsigned n, unsigned depth,
		    const struct dev_hooks *hooks);
int8_t disk_fixed_index(const struct disk_tier *d, const void *p, size_t len);
int8_t disk_buf_fixed(struct disk_tier *d, const void *p, size_t len, unsigned *hold);
int disk_registered(struct disk_tier *d, const void *p, size_t len);
void disk_io_set(struct dev_io *io, int op, uint16_t dev, uint64_t off,
		 void *buf, uint32_t len, int8_t fixed);
int disk_meta_rw(struct disk_tier *d, int op, uint16_t dev, void *buf,
		 uint64_t len, uint64_t off);

/* disk_index.c */
uint32_t disk_idx_find(const struct disk_tier *d, kvt_key k);
void disk_ent_drop(struct disk_tier *d, uint32_t e);
int disk_ent_add(struct disk_tier *d, kvt_key k, uint64_t page, uint64_t len);

/* disk_region.c */
void disk_lease_ent(struct disk_tier *d, uint32_t e, uint64_t deadline);
int disk_reserve(struct disk_tier *d, uint32_t pages, int reclaim, uint64_t *page);
int disk_near_tail(const struct disk_tier *d, uint32_t r);

/* disk_format.c */
void disk_hdr_fill(struct disk_tier *d, struct rec_hdr *h, kvt_key k,
		   uint64_t len, uint64_t seq, uint64_t region_seq, uint64_t sum);
int disk_hdr_ok(const struct disk_tier *d, const struct rec_hdr *h);
void disk_index_reset(struct disk_tier *d);
int disk_write_checkpoint(struct disk_tier *d);
int disk_recover(struct disk_tier *d);
int disk_geometry(struct disk_tier *d, const struct disk_opts *o);

/* disk_read.c */
void disk_verifier_stop(struct disk_tier *d);

/* disk.c */
struct disk_beside {
	void (*fn)(void *);
	void *arg;
	int done;
};
struct disk_each {
	void (*fn)(void *arg, size_t i);
	void *arg;
};
void disk_append(struct disk_tier *d, struct wr *w, size_t n, int reinsert,
		 struct disk_beside *b);
void disk_append_each(struct disk_tier *d, struct wr *w, size_t n, int reinsert,
		      struct disk_beside *b, const struct disk_each *each);
int disk_fail_all(kvt_op *ops, size_t n, int err);

#endif
