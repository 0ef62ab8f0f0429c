/*
 * ram_index.h - the RAM tier's sharded hash index: key -> entry {location, len,
 * lease, pins, LRU links}. Each shard is an open-addressing table of 32-bit
 * entry ids over a pool of entries whose ids stay stable while the entry
 * lives, so LRU lists and pinned readers refer to entries by id. The caller
 * holds the shard's lock around every call here. Knows nothing about the
 * arena, eviction policy or other tiers.
 */
#ifndef KVT_RAM_INDEX_H
#define KVT_RAM_INDEX_H

#include <pthread.h>
#include <stdint.h>

#include "kvtier.h"

#define IDX_NONE UINT32_MAX

enum ram_ent_state {
	IENT_FREE = 0,  /* pool slot unused */
	IENT_LRU,       /* live, on the shard's LRU list (evictable unless pinned) */
	IENT_HELD,      /* live, leased: on the shard's held list, ordered by deadline */
	IENT_EVICTING,  /* live, being spilled: off both lists, pinned by the evictor */
	IENT_DEAD,      /* out of the table, waiting for its last pin to go */
};

struct ram_ent {
	kvt_key key;
	uint64_t off;          /* arena offset */
	uint64_t stamp;        /* recency: tier-wide tick of the last put or hit */
	uint64_t lease_until;  /* CLOCK_MONOTONIC ns; meaningful in IENT_HELD */
	uint32_t len;          /* block bytes */
	uint32_t prev, next;   /* LRU or held list links (entry ids) */
	uint16_t pins;         /* in-flight copies (and the evictor) */
	uint8_t state;
};

struct shard {
	pthread_mutex_t lock;
	struct ram_ent *ents;     /* pool */
	uint32_t nents;        /* pool size */
	uint32_t free_head;    /* free pool slots, linked through .next */
	uint32_t *slots;       /* table: entry id + 1, 0 = empty */
	uint32_t mask;         /* table size - 1 */
	uint32_t count;        /* entries in the table */
	uint32_t lru_head, lru_tail;    /* most recent at head */
	uint32_t held_head, held_tail;  /* earliest deadline at head */
	/* The tier's hot counters, kept per shard under its lock so that
	 * readers on different shards share no written cache line; stats
	 * add them up. */
	uint64_t hits, misses, leases, pinned;
} __attribute__((aligned(64)));

int shard_init(struct shard *sh);
void shard_destroy(struct shard *sh);

/* Entry id of key, or IDX_NONE. */
uint32_t shard_find(const struct shard *sh, kvt_key key);

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
