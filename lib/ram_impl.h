/*
 * ram_impl.h - what the RAM tier's files share (ram.c: entries, leases,
 * puts, gets, pins and lookups; ram_evict.c: eviction and spills;
 * ram_admit.c: the admission of new blocks): the tier's struct, its shard
 * and generation helpers, and the entry transitions they need. Nothing
 * outside the RAM tier includes it.
 */
#ifndef KVT_RAM_IMPL_H
#define KVT_RAM_IMPL_H

#include <stdatomic.h>

#include "arena.h"
#include "internal.h"
#include "ram.h"
#include "ram_dir.h"
#include "ram_index.h"

#define NSHARDS 64u
#define EVICT_SCAN 32 /* pinned entries skipped per shard before giving up */
#define EVICT_BATCH 32 /* blocks whose spills go to the disk tier together */
#define ROOM_BATCH 128 /* the same when making room for a put batch (ram_make_room) */
/* Removal generations: one per slot, slot = key.hi % NGENS, so a slot lies
 * in one shard (NGENS is a multiple of NSHARDS) and changes under its lock. */
#define NGENS 1024u
/* Promotion admission: fingerprints of keys whose promotion was declined
 * once (a power of two; a later key in the same slot takes it over). */
#define NSEEN 4096u

struct ram_tier {
	struct shard shards[NSHARDS];
	struct arena *arena;
	char *base;
	uint64_t capacity, high_bytes, low_bytes, lease_cap_bytes, max_block;
	ram_spill_fn spill;
	ram_unspill_fn unspill;
	void *arg;

	_Atomic uint64_t tick;
	_Atomic uint64_t used;      /* bytes in extents of live entries */
	_Atomic uint64_t objects;
	_Atomic uint64_t leased_bytes, leased_objects;
	_Atomic uint64_t puts, dup_puts, refused_puts;
	_Atomic uint64_t evictions, evicted_bytes, spills, spill_failures;
	_Atomic uint64_t lease_expiries, lease_refusals, releases;
	struct kvt_striped leases;  /* granted and renewed, by every lookup */
	_Atomic uint64_t gens[NGENS];
	_Atomic uint64_t seen[NSEEN];
	_Atomic uint64_t promotions_declined;
	struct ram_dir *dir;        /* blocks published to attached processes */
};

static inline struct shard *shard_of(struct ram_tier *r, kvt_key key)
{
	return &r->shards[key.hi & (NSHARDS - 1)];
}

static inline _Atomic uint64_t *gen_of(struct ram_tier *r, kvt_key key)
{
	return &r->gens[key.hi & (NGENS - 1)];
}

static inline uint64_t next_tick(struct ram_tier *r)
{
	return atomic_fetch_add_explicit(&r->tick, 1, memory_order_relaxed) + 1;
}

/* The arena bytes of a block of len bytes (whole ARENA_UNITs). */
static inline uint64_t ram_unit_bytes(uint64_t len)
{
	return (len + ARENA_UNIT - 1) & ~(uint64_t)(ARENA_UNIT - 1);
}

/* Whether the evictor may drop entry e: on the LRU list, no pin held. */
static inline int ent_droppable(const struct ram_ent *e)
{
	return e->state == IENT_LRU && e->pins == 0;
}

/*
 * Keeps sh->droppable right after a change of e's state or pins, where
 * was = ent_droppable(e) before the change. Shard locked.
 */
static inline void ram_note_droppable(struct shard *sh, const struct ram_ent *e, int was)
{
	int now = ent_droppable(e);

	if (now == was)
		return;
	uint64_t b = ram_unit_bytes(e->len);
	uint64_t v = atomic_load_explicit(&sh->droppable, memory_order_relaxed);
	atomic_store_explicit(&sh->droppable, now ? v + b : v - b, memory_order_relaxed);
}

/* Moves lapsed leases of every shard back to the LRU head. */
void ram_expire_all(struct ram_tier *r);

/* Whether a promotion of len bytes of key may take RAM (ram_admit.c). */
int ram_admit_promotion(struct ram_tier *r, kvt_key key, size_t len);

/* Accounts for the end of a lease the caller took from a live entry
 * (ent_lease_take or a CAS to 0); the caller moves it. */
void ram_drop_lease(struct ram_tier *r, struct ram_ent *e);

/* Puts a leased entry on the held list at the place of its held_until.
 * Shard locked. */
void ram_held_insert(struct shard *sh, uint32_t id);

/* Moves lapsed leases of a shard back to the LRU head. Shard locked. */
void ram_expire_leases(struct ram_tier *r, struct shard *sh, uint64_t now);

/* Frees an entry already out of the table and unpinned. Shard locked. */
void ram_release_entry(struct ram_tier *r, struct shard *sh, uint32_t id);

/* Takes a live entry out of the table: first out of the directory, so no
 * attached process reads its extent once it may be freed. Every removal
 * from the table goes through here. Shard locked. */
void ram_unlink(struct ram_tier *r, struct shard *sh, uint32_t id);

/*
 * Evicts up to max blocks (at least one, at most EVICT_BATCH), the least
 * recent first, stopping early once used bytes minus what is being evicted
 * reach floor; their spills go out as one batch outside every lock
 * (ram_evict.c). Returns the number evicted, or -ENOSPC / -EAGAIN when no
 * block could be picked.
 */
int ram_evict_batch(struct ram_tier *r, size_t max, uint64_t floor);

#endif
