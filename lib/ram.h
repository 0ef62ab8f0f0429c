/*
 * ram.h - the RAM tier: blocks in the arena, found through the sharded
 * index, kept by a lease-aware LRU with high and low watermarks. Evicted
 * blocks go to a spill callback (the store hands them to the disk tier).
 * Knows nothing about disks, peers or the store's threads.
 */
#ifndef KVT_RAM_H
#define KVT_RAM_H

#include <stddef.h>
#include <stdint.h>

#include "config.h" /* enum kvt_tri */
#include "kvtier.h"

struct ram_tier;

/*
 * One spill: the blocks evicted, ops[0..n) (ops[i].buf points at the bytes
 * in the arena, not freed until the spill returns or ram_spill_done names
 * it), and blocks of a put batch to write in the same submission,
 * extra[0..nextra) (ram_make_room_with; their results set there).
 */
struct ram_spill {
	kvt_op *ops;
	size_t n;
	const uint64_t *sums;     /* sums[i]: ops[i]'s kept checksum, where */
	const uint8_t *has_sum;   /* has_sum[i] (see ram_pin_sum) */
	kvt_op *extra;
	size_t nextra;
	void *tier;               /* the RAM tier's */
};

/*
 * Called by eviction with up to 128 blocks at once. Sets ops[i].result to
 * 0 for each block kept elsewhere, and may call ram_spill_done(sp, i) on
 * the calling thread as soon as ops[i]'s result is final, so that its
 * room is freed (and a block put there) while the rest is in flight.
 * Called with no lock of this tier held: it may call back into the tier (a
 * lease or a remove of a block being spilled is decided when its spill is
 * done).
 */
typedef void (*ram_spill_fn)(void *arg, struct ram_spill *sp);

/* Finishes the eviction of sp->ops[i], whose result is final: its room is
 * freed (or it stays, leased meanwhile). Once per block; those not named
 * are finished when the spill returns. */
void ram_spill_done(struct ram_spill *sp, size_t i);

/*
 * Called when an evicted block's spill raced with a removal of its key, so
 * the spilled copy must go too. Lock order: it runs with the key's shard
 * lock held, so it may take the locks of a lower tier (the disk tier's) but
 * must never call back into this tier, and no lower tier may call into this
 * one while holding its own locks: RAM shard lock, then disk tier lock,
 * never the reverse.
 */
typedef void (*ram_unspill_fn)(void *arg, kvt_key key);

/* What the RAM tier is opened with (opts.c fills it from the store's
 * configuration). */
struct ram_opts {
	uint64_t capacity;        /* bytes of the arena */
	enum kvt_tri hugepages;   /* back the arena with huge pages */
	enum kvt_tri mlock;       /* lock it in memory */
	int numa_node;            /* bind it to this node; -1: none */
	double high_watermark;    /* fractions of capacity: eviction starts */
	double low_watermark;     /* above high and stops at low */
	double lease_cap;         /* leased bytes at most */
	uint64_t max_block;       /* the largest block a put takes */
	int shared;               /* a memfd arena other processes can map
				     (ram_arena_fd): local.socket is set */
	uint64_t dir_slots;       /* with shared: entries of the directory of
				     blocks published to those processes
				     (ram_dir.h); 0: none */
};

int ram_open(const struct ram_opts *o, ram_spill_fn spill,
	     ram_unspill_fn unspill, void *arg, struct ram_tier **out);
void ram_close(struct ram_tier *r);

/*
 * Stores a copy of data. Returns 0 when stored, 1 when the key was present
 * (its recency refreshed), -ENOSPC when the block does not fit even after
 * evicting every unleased, unpinned block (the caller may write around) or
 * when ram_put_refused() refuses it, -ENOMEM when the index cannot grow.
 */
int ram_put(struct ram_tier *r, kvt_key key, const void *data, size_t len);
/* ram_put (may_spill) or ram_put_nospill, computing the block's checksum
 * as it is copied (one pass) and keeping it, for a block that is likely to
 * be spilled: its spill then writes that checksum instead of reading the
 * block again to compute it. */
int ram_put_summed(struct ram_tier *r, kvt_key key, const void *data, size_t len,
		   int may_spill);

/* ram_put, but -ENOSPC where the block fits only by evicting (spilling)
 * others: nothing is written to disk from within it. */
int ram_put_nospill(struct ram_tier *r, kvt_key key, const void *data, size_t len);

/*
 * Whether a new block of len bytes is refused because, without a disk
 * tier, the evictor would drop it as soon as it came in: it takes RAM past
 * the high watermark while what the evictor cannot drop (leased and pinned
 * blocks, slots not yet published) and it alone stay above the low one.
 * Returns 1, counted as a refused put, or 0. reserved: its bytes are
 * counted as used already (a reservation about to be published). ram_put
 * asks it; the slots ask it before reserving and before publishing.
 */
int ram_put_refused(struct ram_tier *r, size_t len, int reserved);

/* Why such a block was refused, for kvt_last_error(). */
#define RAM_DROPPED_WHY "RAM's leased, pinned and reserved blocks leave no room for it " \
	"below ram.low_watermark (the evictor would drop it at once) and there is no " \
	"disk tier"

/*
 * A promotion: a copy of a block read from a lower tier or a peer. gen is
 * ram_gen(key) read before that read began: a ram_remove of the key since
 * then makes this return -ESTALE and store nothing, so a removal wins over
 * reads in flight. sum (NULL: none) is the payload checksum the disk or
 * the peer client verified; the copy made into the arena must match it,
 * else -EBADMSG and nothing is stored (data may be a caller's buffer that
 * changed since), and it is kept as the block's checksum. A promotion is an admission decision: while the block
 * fits below the high watermark it is stored; otherwise only on the key's
 * second try (-EAGAIN and nothing stored or evicted on the first).
 * Otherwise as ram_put.
 */
int ram_promote(struct ram_tier *r, kvt_key key, const void *data, size_t len,
		uint64_t gen, const uint64_t *sum);

/* key's removal generation, for ram_promote: it changes at every
 * ram_remove of key (and of a few other keys that share its slot). */
uint64_t ram_gen(struct ram_tier *r, kvt_key key);

/* Copies a block out (pinned during the copy), refreshing its recency.
 * Returns 0, -ENOENT, or -ENOBUFS with *len = size needed. */
int ram_get(struct ram_tier *r, kvt_key key, void *buf, size_t cap, size_t *len);

/*
 * Each block's checksum (kvt_checksum of its bytes) is kept with its entry,
 * so that whoever sends a block on (the peer server) need not read it twice:
 * a block that became visible with a verified checksum (a promotion, a
 * publish given one) keeps that one; any other has its checksum computed
 * from its bytes in the arena the first time one is asked for (the bytes of
 * a visible block never change) and kept from then on. A block's checksum
 * is thus never one of other bytes than the block was made of: bytes that
 * changed in the arena since (a fault, a stray write) fail the receiver's
 * verification instead of being sent as good.
 */

/*
 * Hands a block of at most cap bytes to fn(arg, its bytes in the arena, len,
 * its checksum) instead of copying it: pinned (never evicted, moved or
 * freed) until fn returns, however long that takes; fn must not call back
 * into this tier for the same key. Refreshes its recency. Returns fn's
 * result, -ENOENT, or -ENOBUFS with *len = size needed (fn not called).
 */
typedef int (*ram_visit_fn)(void *arg, const void *block, size_t len, uint64_t sum);
int ram_visit(struct ram_tier *r, kvt_key key, size_t cap, ram_visit_fn fn,
	      void *arg, size_t *len);

/*
 * Slots: extents handed out before (or instead of) holding a block, for the
 * store's zero-copy calls. ram_slot_alloc returns the offset of an extent of
 * len bytes (counted as used), evicting the least recent blocks to make room
 * but, unless may_spill, only when that writes nothing to disk; -ENOSPC when
 * it does not fit. ram_slot_free gives it back. ram_slot_publish makes the
 * extent the block of key: 0, or 1 when key was stored already (the extent
 * is freed), or -ENOMEM or -ENOSPC when ram_put_refused() refuses it (the
 * extent is freed); sum (NULL: none) is the
 * checksum its bytes were verified against, kept as the block's.
 */
int64_t ram_slot_alloc(struct ram_tier *r, size_t len, int may_spill);
void ram_slot_free(struct ram_tier *r, uint64_t off);
int ram_slot_publish(struct ram_tier *r, kvt_key key, uint64_t off, size_t len,
		     const uint64_t *sum);

/*
 * A promotion without a copy: the extent off (from ram_slot_alloc) holds
 * len bytes of key read and verified from a lower tier (against *sum, which
 * is kept as the block's checksum; NULL: none known). When admitted as
 * ram_promote admits a copy, and no ram_remove changed key's generation
 * since gen (ram_gen before the read began), it becomes key's block,
 * pinned once as ram_pin would (*ref; ram_unpin ends it), and returns 0.
 * Otherwise the extent stays the caller's: 1 (key is stored already),
 * -EAGAIN (not admitted), -ESTALE (removed meanwhile), -ENOMEM (index full).
 */
int ram_slot_promote(struct ram_tier *r, kvt_key key, uint64_t off, size_t len,
		     uint64_t gen, const uint64_t *sum, uint64_t *ref);

/*
 * Pins the block of key (at most cap bytes) as ram_visit does, but until
 * ram_unpin(ref): sets *off (its offset from ram_arena_base()), *len and
 * *ref, counts a hit and returns 0; -ENOENT; -ENOBUFS with *len set. A
 * removed block stays readable until its last pin goes.
 */
int ram_pin(struct ram_tier *r, kvt_key key, size_t cap, uint64_t *ref,
	    uint64_t *off, size_t *len);
void ram_unpin(struct ram_tier *r, uint64_t ref);

/* ram_pin, and on success *sum = the block's checksum (see above). */
int ram_pin_sum(struct ram_tier *r, kvt_key key, size_t cap, uint64_t *ref,
		uint64_t *off, size_t *len, uint64_t *sum);

/*
 * Lease deadlines are rounded up to a multiple of this (2^20 ns, about a
 * millisecond): a lease lasts at least until the deadline asked and less
 * than a grain longer. Renewals within one grain then find the deadline
 * stored already and write nothing, so lookups of the same keys on several
 * threads do not take the entries' cache lines from each other.
 */
#define RAM_LEASE_GRAIN_NS (1ull << 20)

/* deadline rounded up to the grain; one too near the end of time to round
 * stays as it is. */
static inline uint64_t ram_lease_round(uint64_t deadline)
{
	if (deadline > UINT64_MAX - (RAM_LEASE_GRAIN_NS - 1))
		return deadline;
	return (deadline + RAM_LEASE_GRAIN_NS - 1) & ~(RAM_LEASE_GRAIN_NS - 1);
}

/*
 * Presence of one key, for lookups. With lease, also leases it until
 * deadline_ns rounded up to RAM_LEASE_GRAIN_NS (a lease in force is never
 * shortened; a new one counts against the lease cap). Returns 1 present
 * (and leased if asked), 0 absent, -ENOSPC present but the lease cap is
 * reached.
 */
int ram_lookup(struct ram_tier *r, kvt_key key, int lease, uint64_t deadline_ns);

/*
 * ram_lookup of keys[0..n) in order, up to the first key that is not 1;
 * returns how many were (present, and leased if asked). The leases are
 * counted once for the call rather than once per key.
 */
size_t ram_lookup_prefix(struct ram_tier *r, const kvt_key *keys, size_t n, int lease,
			 uint64_t deadline_ns);

/* Ends a lease early; 1 if one was ended, else 0. */
int ram_release(struct ram_tier *r, kvt_key key);

/* Removes a key; 0 or -ENOENT. A pinned block is freed at its last unpin.
 * Either way voids promotions of key begun before (see ram_promote). */
int ram_remove(struct ram_tier *r, kvt_key key);

/* 1 when used bytes exceed the high watermark (time to wake the evictor). */
int ram_above_high(struct ram_tier *r);

/* Evicts (and spills) least recently used blocks until used bytes are at or
 * below the low watermark or nothing is evictable. Returns blocks evicted. */
size_t ram_evict_to_low(struct ram_tier *r);

/* Evicts (and spills, EVICT_BATCH blocks at a time) least recently used
 * blocks until bytes more fit below the high watermark or nothing is
 * evictable: room for a put batch's blocks made in a few large spills
 * instead of one small one per block. Returns blocks evicted. */
size_t ram_make_room(struct ram_tier *r, uint64_t bytes);

/*
 * What a put batch does while RAM makes room for it (ram_make_room_with):
 * fit(arg) runs each time a spill has freed an evicted block's room, on
 * the calling thread, while later spills are in flight, and returns the
 * bytes it put into this tier meanwhile (without spilling:
 * ram_put_nospill), which then need no more room; extra[0..nextra) are
 * blocks written with the first spill (write-arounds), handed over then
 * (extra NULL and nextra 0 afterwards; still set where nothing had to be
 * spilled).
 */
struct ram_room {
	uint64_t (*fit)(void *arg);
	void *arg;
	kvt_op *extra;
	size_t nextra;
};

/* ram_make_room, with room's work beside the spills (NULL: none). */
size_t ram_make_room_with(struct ram_tier *r, uint64_t bytes, struct ram_room *room);

/* A block of the tier as ram_blocks() lists it. */
struct ram_block {
	kvt_key key;
	const void *data;         /* in the arena */
	size_t len;
	uint64_t stamp;           /* recency: larger is more recent */
	uint64_t sum;             /* its checksum, where has_sum */
	int has_sum;
};

/*
 * Lists every block the tier holds, leased ones included, least recent
 * first, into *out (malloc'd; the caller frees it). For a tier that no
 * other thread uses any more (the store's close): the data pointers stay
 * valid only while nothing puts, evicts or removes. Returns the number of
 * blocks, or -ENOMEM (*out NULL).
 */
long ram_blocks(struct ram_tier *r, struct ram_block **out);

/* The high watermark in bytes (ram.high_watermark of the capacity). */
uint64_t ram_high_bytes(struct ram_tier *r);

void *ram_arena_base(struct ram_tier *r);
size_t ram_arena_size(struct ram_tier *r);
/* The memfd of a shared arena (local.socket set), or -1. */
int ram_arena_fd(struct ram_tier *r);

/* The memfd of the directory of published blocks (ram_dir.h) and its
 * size, or -1 and 0 when there is none. */
int ram_dir_memfd(struct ram_tier *r, size_t *len);

/*
 * Hits that attached processes served themselves from the directory: each
 * counts as a hit and refreshes the block's recency when it is still
 * stored (it may have been removed or evicted since it was read, which
 * was then still correct).
 */
void ram_note_hits(struct ram_tier *r, const kvt_key *keys, size_t n);

/* Reports the tier's counters through v (stats.h). */
struct stat_visitor;
void ram_stats(struct ram_tier *r, const struct stat_visitor *v);

#endif
