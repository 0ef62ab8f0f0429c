/*
 * disk.h - the NVMe tier: blocks on one or more block devices or
 * preallocated files, written through the device seam (dev.h; io_uring in
 * uring.c) in a log of regions, each record self-describing and
 * checksummed, surviving restarts.
 * Knows nothing about the RAM tier, peers or the store facade: the store
 * calls it, never the other way round.
 */
#ifndef KVT_DISK_H
#define KVT_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

struct disk_tier;
struct kvt_dev_ops; /* the device seam, see dev.h */

/* disk.stage_reads: whether a record that fits one device request is read
 * into the tier's huge-page stages before the caller's buffer is tried;
 * AUTO (what a zeroed struct asks) decides at open */
enum disk_stage { DISK_STAGE_AUTO = 0, DISK_STAGE_ON, DISK_STAGE_OFF };

/* What the disk tier is opened with (opts.c fills it from the store's
 * configuration; its checks name the configuration keys). */
struct disk_opts {
	unsigned ndev;            /* disk.path: devices or files to stripe over */
	char *const *paths;       /* ndev paths */
	uint64_t capacity;        /* disk.capacity: bytes across all of them */
	uint64_t region_size;     /* disk.region_size */
	unsigned queue_depth;     /* disk.queue_depth */
	enum disk_stage stage_reads; /* disk.stage_reads */
};

/*
 * Opens the tier described by o (o->ndev > 0). fixed_base/fixed_len is
 * the RAM arena, registered with io_uring as fixed buffers so spills from it
 * and loads into it need no extra copy (NULL/0: none). ops NULL uses the real
 * io_uring device layer; tests pass their own to inject faults. Recovers the
 * index from the checkpoint or by scanning. Returns 0 or a negative errno
 * with kvt_last_error() set.
 */
int disk_open(const struct disk_opts *o, void *fixed_base, size_t fixed_len,
	      const struct kvt_dev_ops *ops, struct disk_tier **out);

/* Flushes, writes the index checkpoint, closes devices, frees. NULL: no-op. */
void disk_close(struct disk_tier *d);

/*
 * Stores a block. Present already: returns 0 (no-op). Returns -ENOSPC when the
 * block cannot fit even after reclaiming regions, -EIO on device errors.
 */
int disk_put(struct disk_tier *d, kvt_key key, const void *data, size_t len);

/* Stores ops[0..n) with one submission; sets each ops[i].result. Returns the
 * first failure or 0. */
int disk_put_batch(struct disk_tier *d, kvt_op *ops, size_t n);

/* disk_put_batch, running fn(arg) once on the calling thread while the
 * batch's writes are in flight (at the first to complete; after the batch
 * where none was written), so that work of the caller's own overlaps them.
 * fn runs exactly once, whatever the outcome. */
int disk_put_batch_beside(struct disk_tier *d, kvt_op *ops, size_t n,
			  void (*fn)(void *), void *arg);

/*
 * disk_put_batch, telling fn(arg, i) of each ops[i] on the calling thread
 * as soon as its result is final (set in ops[i]): a block written as soon
 * as its writes are complete and it is stored (disk_get finds it), while
 * the later blocks of the batch are in flight; one refused or found
 * stored already before any I/O. fn runs exactly once per op, whatever the
 * outcome (NULL: disk_put_batch).
 */
int disk_put_batch_each(struct disk_tier *d, kvt_op *ops, size_t n,
			void (*fn)(void *arg, size_t i), void *arg);

/*
 * disk_put_batch_each, where sums[i] (for each i < nsum with has_sum[i];
 * either array NULL: none) is the checksum ops[i]'s bytes were kept with
 * (the RAM tier's, computed as it copied them): it is written in the
 * record's header instead of being computed again from the bytes. The ops
 * from nsum on have none. A block whose bytes changed since reads back as
 * damaged (-EBADMSG), not as good.
 */
int disk_put_batch_sums(struct disk_tier *d, kvt_op *ops, size_t n,
			const uint64_t *sums, const uint8_t *has_sum, size_t nsum,
			void (*fn)(void *arg, size_t i), void *arg);

/*
 * Loads a block into buf (cap bytes), sets *len. buf NULL with cap 0 asks
 * for the size. Returns 0, -ENOENT, -ENOBUFS (*len = size needed), -EBADMSG
 * (checksum or header mismatch: the record is dropped from the index and
 * counted), -EIO. A block is called damaged only after a read into the
 * tier's own memory: a caller's buffer that something else wrote into
 * meanwhile never drops an intact block.
 */
int disk_get(struct disk_tier *d, kvt_key key, void *buf, size_t cap,
	     size_t *len);

/* disk_get, and on success *sum (NULL: not wanted) = the payload checksum
 * the block was verified against, for ram_promote(). */
int disk_get_sum(struct disk_tier *d, kvt_key key, void *buf, size_t cap,
		 size_t *len, uint64_t *sum);

/* Loads ops[0..n) (len = capacity in, bytes out) with all reads submitted
 * together; sets each ops[i].result. Returns the first failure or 0. Ops may
 * share buffers; a caller's buffer is only ever written (a block read back
 * to the log's head is copied from the tier's own copy or checked against
 * its verified checksum first). */
int disk_get_batch(struct disk_tier *d, kvt_op *ops, size_t n);

/* disk_get_batch, and sums[i] (sums NULL: not wanted) = the verified payload
 * checksum of each op that succeeded. */
int disk_get_batch_sums(struct disk_tier *d, kvt_op *ops, size_t n, uint64_t *sums);

/*
 * disk_get_batch_sums, and each(arg, i, data, len, sum) (NULL: none) once
 * for each op that succeeds, as soon as its block is verified and while
 * the batch's other reads are in flight: data holds the block's len bytes
 * as verified against sum (the tier's own copy where it read one, else
 * ops[i].buf), valid only during the call. Hooks run on whichever thread
 * verified the block (the tier's verifier threads or the caller's), so
 * hooks of different ops may run at once; all have returned when the call
 * returns. A hook may use the tier (a promotion that makes room in RAM
 * spills to it): the caller's thread runs its hooks only while it holds
 * no device queue, after its reads.
 */
typedef void (*disk_verified_fn)(void *arg, size_t i, const void *data, size_t len,
				 uint64_t sum);
int disk_get_batch_each(struct disk_tier *d, kvt_op *ops, size_t n, uint64_t *sums,
			disk_verified_fn each, void *arg);

/*
 * The most bytes of huge-page memory the tier holds at once to stage whole
 * records in (HSTAGE_POOL, 128 MiB, a range the process's tiers share and
 * keep until it exits, unless lowered here; bytes above that are
 * ignored): a record that fits one device request is read into such a
 * stage, verified there and copied out, where its payload would take more
 * pages than the request carries or disk.stage_reads puts stages first;
 * once the stages are spent, reads go straight into the caller's
 * buffer (or into plain memory of the tier's own) instead.
 */
void disk_set_stage_pool(struct disk_tier *d, size_t bytes);

/* Whether those stages are transparent huge pages (their range was advised
 * so and the kernel's mode is not "never"): what disk.stage_reads "auto"
 * asks, with a device that reports its segment limit. */
int disk_hstage_huge(void);

/*
 * The verifier threads the tier starts at its first batch load, which
 * check staged records and copy them out beside the reads (1 to 4; by
 * default one per CPU the loading thread may run on, at most 4). Takes
 * effect only before that load.
 */
void disk_set_verifiers(struct disk_tier *d, unsigned n);

/* 1 and *len set if key is stored (len may be NULL), else 0. Counts nothing. */
int disk_contains(struct disk_tier *d, kvt_key key, size_t *len);

/* The tier's regions (0 for NULL) and in *pages the pages of each. */
uint32_t disk_regions(struct disk_tier *d, uint64_t *pages);

/* The pages the record of a block of len bytes takes in a region (its
 * header page and its payload's); a record never spans two regions. */
uint64_t disk_record_pages(uint64_t len);

/*
 * Leases key until deadline_ns (CLOCK_MONOTONIC, kvt_now_ns()): its region is
 * not reclaimed before then (or the block is reinserted). Returns 1 if the
 * key is stored and now leased, 0 if not stored.
 */
int disk_lease(struct disk_tier *d, kvt_key key, uint64_t deadline_ns);

/* Ends a lease early. Returns 1 if a lease was ended, else 0. */
int disk_release(struct disk_tier *d, kvt_key key);

/* Removes key. Returns 0 or -ENOENT. */
int disk_remove(struct disk_tier *d, kvt_key key);

/*
 * Caller ranges (kvt_mem_register): m is the store's table, set once after
 * disk_open and before any I/O. Payloads of a batch that lie in one piece
 * of a range the tier has mapped move with READ_FIXED/WRITE_FIXED; the
 * range is held (memreg_hold) until that I/O completes.
 */
struct memreg;
struct memreg_ent;
void disk_set_memreg(struct disk_tier *d, struct memreg *m);
/*
 * Called with m->lock held: makes e's pieces fixed buffers of every queue
 * of the tier (map 1; e->fixed set on success) or empties them (map 0).
 * Returns 0 or the kernel's -errno (then no queue keeps any of them, and a
 * refusal is counted).
 */
int disk_mem_map(struct disk_tier *d, struct memreg_ent *e, int map);

/* Reports the tier's counters through v (stats.h): capacity, used,
 * objects, hits, misses, spills, reclaims, reinsertions, checksum_failures,
 * io_errors, ... */
struct stat_visitor;
void disk_stats(struct disk_tier *d, const struct stat_visitor *v);

#endif
