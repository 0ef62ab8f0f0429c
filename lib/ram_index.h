/*
 * ram_index.h - the RAM tier's sharded hash index: key -> entry {location, len,
 * lease, pins, LRU links}. Each shard is an open-addressing table of 32-bit
 * entry ids over a pool of entries whose ids stay stable while the entry
 * lives, so LRU lists and pinned readers refer to entries by id. The caller
 * holds the shard's lock around every call here except shard_find_unlocked,
 * which reads under a sequence count (the seqlock pattern) instead. Knows
 * nothing about the arena, eviction policy or other tiers.
 */
#ifndef KVT_RAM_INDEX_H
#define KVT_RAM_INDEX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kvtier.h"

#define IDX_NONE UINT32_MAX
/* The pool grows by segments that never move: segment k holds
 * SEG_FIRST << k entries, so 27 of them cover every id below IDX_NONE. */
#define SEG_FIRST 32u
#define NSEGS 27

enum ram_ent_state {
	IENT_FREE = 0,  /* pool slot unused */
	IENT_LRU,       /* live, on the shard's LRU list (evictable unless pinned) */
	IENT_HELD,      /* live, leased: on the shard's held list, ordered by deadline */
	IENT_EVICTING,  /* live, being spilled: off both lists, pinned by the evictor */
	IENT_DEAD,      /* out of the table, waiting for its last pin to go */
};

/*
 * The entry fills one cache line, which lookups without the lock read;
 * the block's checksum, needed only by whoever copies the block out
 * under a pin, lives apart in a parallel array (shard_sum).
 *
 * key, state and lease_until are read without the shard lock by
 * shard_find_unlocked() and the RAM tier's lookups, so they are written
 * with atomic stores (ent_set_key, ent_set_state), and lease_until, which
 * such a lookup may renew, is only ever accessed atomically (ent_lease,
 * ent_lease_cas, ent_lease_renew, ent_lease_take). The other fields belong
 * to the lock.
 */
struct ram_ent {
	kvt_key key;
	uint64_t off;          /* arena offset */
	uint64_t stamp;        /* recency: tier-wide tick of the last put or hit */
	uint64_t lease_until;  /* CLOCK_MONOTONIC ns, 0: not leased (atomic) */
	uint64_t held_until;   /* the deadline the held list orders it by */
	uint32_t len;          /* block bytes */
	uint32_t prev, next;   /* LRU or held list links (entry ids) */
	uint16_t pins;         /* in-flight copies (and the evictor) */
	uint8_t state;
	/* Flags of their own bits, both written under the shard lock only. */
	uint8_t dir : 1;       /* 1: published in the tier's directory (ram_dir.h) */
	uint8_t has_sum : 1;   /* the block's checksum is kept (shard_sum) */
};

/* An open-addressing table: entry id + 1 per slot, 0 = empty. A grown
 * table replaces it whole; the old one is kept (retired) until the shard
 * is destroyed, since a reader without the lock may still be probing it. */
struct ram_table {
	struct ram_table *retired;  /* the table this one replaced */
	uint32_t mask;              /* slots - 1 */
	uint32_t slots[];
};

struct shard {
	pthread_mutex_t lock;
	uint32_t nents;        /* pool size */
	uint32_t free_head;    /* free pool slots, linked through .next */
	uint32_t count;        /* entries in the table */
	uint32_t lru_head, lru_tail;    /* most recent at head */
	uint32_t held_head, held_tail;  /* earliest deadline at head */
	/* The tier's hot counters of gets, kept per shard under its lock so
	 * that readers on different shards share no written cache line;
	 * stats add them up. */
	uint64_t hits, misses, pinned;
	/* Bytes (lengths rounded up to 4 KiB) of the entries on the LRU
	 * list that no pin holds: what the evictor may drop. Kept by the RAM
	 * tier under the lock; read without it. */
	_Atomic uint64_t droppable;
	/* The checksum (kvt_checksum) of each entry's block where has_sum
	 * says it is kept: segment k parallel to seg[k]. Shard locked. */
	uint64_t *sums[NSEGS];
	/* Read-mostly, on a cache line of their own, so that lookups on
	 * several threads keep it shared: odd while shard_unlink moves slots
	 * or a table is replaced, incremented again when done. */
	uint32_t seq __attribute__((aligned(64)));
	struct ram_table *table;
	struct ram_ent *seg[NSEGS];
} __attribute__((aligned(64)));

/* The entry of id (below sh->nents). Shard locked. */
static inline struct ram_ent *shard_ent(const struct shard *sh, uint32_t id)
{
	uint32_t b = id + SEG_FIRST;
	unsigned k = 31u - (unsigned)__builtin_clz(b) - 5u; /* log2(SEG_FIRST) = 5 */
	return &sh->seg[k][b - (SEG_FIRST << k)];
}

/* The kept checksum of entry id's block (valid where has_sum is set).
 * Shard locked. */
static inline uint64_t *shard_sum(const struct shard *sh, uint32_t id)
{
	uint32_t b = id + SEG_FIRST;
	unsigned k = 31u - (unsigned)__builtin_clz(b) - 5u;
	return &sh->sums[k][b - (SEG_FIRST << k)];
}

static inline void ent_set_state(struct ram_ent *e, uint8_t st)
{
	__atomic_store_n(&e->state, st, __ATOMIC_RELAXED);
}

static inline uint64_t ent_lease(const struct ram_ent *e)
{
	return __atomic_load_n(&e->lease_until, __ATOMIC_ACQUIRE);
}

static inline void ent_set_lease(struct ram_ent *e, uint64_t v)
{
	__atomic_store_n(&e->lease_until, v, __ATOMIC_RELAXED);
}

/* Replaces lease_until by v if it is still *old (else *old = its value). */
static inline int ent_lease_cas(struct ram_ent *e, uint64_t *old, uint64_t v)
{
	return __atomic_compare_exchange_n(&e->lease_until, old, v, 0, __ATOMIC_RELAXED,
					   __ATOMIC_RELAXED);
}

/*
 * Renews a lease in force so that it lasts until at least v: raises
 * lease_until to v unless it is there already, never lowers it, and writes
 * nothing when it need not (lookups on several threads renewing the same
 * entry then share its cache line instead of taking it from each other).
 * Returns 1, or 0 without a write when there is no lease to renew
 * (lease_until 0: a first lease is counted against the cap, under the lock).
 */
static inline int ent_lease_renew(struct ram_ent *e, uint64_t v)
{
	uint64_t old = ent_lease(e);

	while (old < v) {
		if (!old)
			return 0;
		if (ent_lease_cas(e, &old, v))
			break;
	}
	return 1;
}

/* Ends the lease: returns what lease_until was (0: there was none). */
static inline uint64_t ent_lease_take(struct ram_ent *e)
{
	return __atomic_exchange_n(&e->lease_until, 0, __ATOMIC_RELAXED);
}

int shard_init(struct shard *sh);
void shard_destroy(struct shard *sh);

/* Entry id of key, or IDX_NONE. Shard locked. */
uint32_t shard_find(const struct shard *sh, kvt_key key);

/*
 * The same without the lock, for read-mostly paths. Call between
 * s = shard_read_begin() and shard_read_valid(s): only when the latter is
 * true was the answer (the entry *ep of key, or IDX_NONE) right at some
 * moment in between; otherwise take the lock and ask again. Never blocks.
 */
uint32_t shard_find_unlocked(const struct shard *sh, kvt_key key, struct ram_ent **ep);

static inline uint32_t shard_read_begin(const struct shard *sh)
{
	return __atomic_load_n(&sh->seq, __ATOMIC_ACQUIRE);
}

/* Whether nothing moved since s: the reader's loads before this are all
 * acquire loads, so this load cannot be answered before them. */
static inline int shard_read_valid(const struct shard *sh, uint32_t s)
{
	return !(s & 1) && __atomic_load_n(&sh->seq, __ATOMIC_RELAXED) == s;
}

/* Inserts key (not present) with a fresh zeroed entry; returns its id, or
 * IDX_NONE when memory for the table or pool could not be grown. */
uint32_t shard_insert(struct shard *sh, kvt_key key);

/* Takes entry id out of the table (lookups miss it); the pool slot stays
 * until shard_free_ent. */
void shard_unlink(struct shard *sh, uint32_t id);

/* Returns the pool slot of an entry already unlinked. */
void shard_free_ent(struct shard *sh, uint32_t id);

/* Bytes of index memory (tables + pools) this shard holds. */
uint64_t shard_mem_bytes(const struct shard *sh);

/* Doubly linked lists through ram_ent.prev/next. */
void list_push_head(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id);
void list_push_tail(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id);
void list_remove(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id);

#endif
