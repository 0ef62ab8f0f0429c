/*
 * ram_index.c - the sharded hash index of the RAM tier (see ram_index.h). Keys are
 * already uniform hashes, so key.lo picks the slot directly; linear probing
 * with backward-shift deletion keeps probes short without tombstones.
 * Tables stay at most half full. The caller holds the shard lock, except
 * around shard_find_unlocked.
 *
 * Reading without the lock. Lookups on several threads would otherwise
 * bounce each shard's lock between their caches on every key. A reader
 * instead probes with acquire loads and checks the shard's sequence count
 * before and after (the seqlock pattern, without fences, which the thread
 * sanitizer does not model: every store between the two bumps is a release
 * store, every load of the reader an acquire load, so a reader that sees a
 * store made after a bump sees the bump when it reads the count again): the two changes that could make
 * a probe answer wrongly, moving slots in a deletion and replacing the
 * table, make the count odd while they run and bump it again after. An
 * insertion needs no bump (a reader that misses a key inserted meanwhile
 * was merely earlier), nor does reusing a freed entry (it was unlinked
 * first, which a reader that still held its id sees in the count). What a
 * reader touches must stay mapped, so entries live in segments that never
 * move or go before the shard does, and a replaced table is kept until then
 * too (the tables retired add up to less than the current one).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ram_index.h"

#define SHARD_INIT_SLOTS 64u

_Static_assert(sizeof(struct ram_ent) == 64, "a RAM index entry fills one cache line");

static struct ram_table *table_new(uint32_t nslots)
{
	struct ram_table *t = calloc(1, sizeof(*t) + (size_t)nslots * sizeof(uint32_t));
	if (t)
		t->mask = nslots - 1;
	return t;
}

int shard_init(struct shard *sh)
{
	memset(sh, 0, sizeof(*sh));
	if (pthread_mutex_init(&sh->lock, NULL))
		return -ENOMEM;
	sh->table = table_new(SHARD_INIT_SLOTS);
	if (!sh->table) {
		pthread_mutex_destroy(&sh->lock);
		return -ENOMEM;
	}
	sh->free_head = IDX_NONE;
	sh->lru_head = sh->lru_tail = IDX_NONE;
	sh->held_head = sh->held_tail = IDX_NONE;
	return 0;
}

void shard_destroy(struct shard *sh)
{
	for (struct ram_table *t = sh->table, *o; t; t = o) {
		o = t->retired;
		free(t);
	}
	for (unsigned k = 0; k < NSEGS; k++) {
		free(sh->seg[k]);
		free(sh->sums[k]);
	}
	pthread_mutex_destroy(&sh->lock);
	memset(sh, 0, sizeof(*sh));
}

/* Odd from here: the stores that follow are release stores (slot_set, the
 * table pointer), so a reader that sees one of them sees this too. */
static inline void seq_enter(struct shard *sh)
{
	__atomic_store_n(&sh->seq, sh->seq + 1, __ATOMIC_RELAXED);
}

static inline void seq_leave(struct shard *sh)
{
	__atomic_store_n(&sh->seq, sh->seq + 1, __ATOMIC_RELEASE);
}

static inline void slot_set(struct ram_table *t, uint32_t i, uint32_t v)
{
	__atomic_store_n(&t->slots[i], v, __ATOMIC_RELEASE);
}

static inline void ent_set_key(struct ram_ent *e, kvt_key key)
{
	__atomic_store_n(&e->key.lo, key.lo, __ATOMIC_RELAXED);
	__atomic_store_n(&e->key.hi, key.hi, __ATOMIC_RELAXED);
}

/* The shard is chosen from key.hi (see ram.c), the slot from key.lo. */
static inline uint32_t home_slot(uint32_t mask, kvt_key key)
{
	return (uint32_t)(key.lo ^ (key.lo >> 32)) & mask;
}

uint32_t shard_find(const struct shard *sh, kvt_key key)
{
	const struct ram_table *t = sh->table;

	for (uint32_t i = home_slot(t->mask, key);; i = (i + 1) & t->mask) {
		uint32_t v = t->slots[i];
		if (!v)
			return IDX_NONE;
		const struct ram_ent *e = shard_ent(sh, v - 1);
		if (e->key.lo == key.lo && e->key.hi == key.hi)
			return v - 1;
	}
}

uint32_t shard_find_unlocked(const struct shard *sh, kvt_key key, struct ram_ent **ep)
{
	const struct ram_table *t = __atomic_load_n(&sh->table, __ATOMIC_ACQUIRE);
	uint32_t mask = t->mask, i = home_slot(mask, key);

	/* A probe that runs into slots being moved may go round: give up
	 * after a table's worth (the count will not validate anyway). */
	for (uint32_t n = 0; n <= mask; n++, i = (i + 1) & mask) {
		uint32_t v = __atomic_load_n(&t->slots[i], __ATOMIC_ACQUIRE);
		if (!v || v - 1 >= IDX_NONE - SEG_FIRST)
			return IDX_NONE;
		uint32_t b = v - 1 + SEG_FIRST;
		unsigned k = 31u - (unsigned)__builtin_clz(b) - 5u;
		struct ram_ent *seg = __atomic_load_n(&sh->seg[k], __ATOMIC_ACQUIRE);
		if (!seg)
			return IDX_NONE;
		struct ram_ent *e = &seg[b - (SEG_FIRST << k)];
		if (__atomic_load_n(&e->key.lo, __ATOMIC_ACQUIRE) == key.lo &&
		    __atomic_load_n(&e->key.hi, __ATOMIC_ACQUIRE) == key.hi) {
			*ep = e;
			return v - 1;
		}
	}
	return IDX_NONE;
}

static void table_place(const struct shard *sh, struct ram_table *t, uint32_t id)
{
	uint32_t i = home_slot(t->mask, shard_ent(sh, id)->key);
	while (t->slots[i])
		i = (i + 1) & t->mask;
	slot_set(t, i, id + 1);
}

static int table_grow(struct shard *sh)
{
	struct ram_table *old = sh->table;
	uint32_t osize = old->mask + 1, nsize = osize * 2;

	if (nsize == 0 || nsize > (1u << 31))
		return -ENOMEM;
	struct ram_table *n = table_new(nsize);
	if (!n)
		return -ENOMEM;
	for (uint32_t i = 0; i < osize; i++)
		if (old->slots[i])
			table_place(sh, n, old->slots[i] - 1);
	n->retired = old;
	seq_enter(sh);
	__atomic_store_n(&sh->table, n, __ATOMIC_RELEASE);
	seq_leave(sh);
	return 0;
}

static uint32_t pool_take(struct shard *sh)
{
	if (sh->free_head == IDX_NONE) {
		uint32_t b = sh->nents + SEG_FIRST;
		unsigned k = 31u - (unsigned)__builtin_clz(b) - 5u;
		uint32_t n = SEG_FIRST << k;
		if (k >= NSEGS || sh->nents + n >= IDX_NONE - SEG_FIRST)
			return IDX_NONE;
		/* Line-aligned, one entry per cache line: lookups on two threads
		 * renew the leases of neighbouring entries without sharing one. */
		struct ram_ent *e = NULL;
		uint64_t *sums = calloc(n, sizeof(*sums));
		if (!sums || posix_memalign((void **)&e, 64, (size_t)n * sizeof(*e))) {
			free(sums);
			return IDX_NONE;
		}
		memset(e, 0, (size_t)n * sizeof(*e));
		sh->sums[k] = sums;
		/* Thread the new entries onto the free list, lowest id first. */
		for (uint32_t i = n; i-- > 0;) {
			e[i].next = sh->free_head;
			sh->free_head = sh->nents + i;
		}
		__atomic_store_n(&sh->seg[k], e, __ATOMIC_RELEASE);
		sh->nents += n;
	}
	uint32_t id = sh->free_head;
	sh->free_head = shard_ent(sh, id)->next;
	return id;
}

uint32_t shard_insert(struct shard *sh, kvt_key key)
{
	if ((sh->count + 1) * 2 > sh->table->mask + 1 && table_grow(sh))
		return IDX_NONE;
	uint32_t id = pool_take(sh);
	if (id == IDX_NONE)
		return IDX_NONE;
	struct ram_ent *e = shard_ent(sh, id);
	/* Field by field: a reader without the lock may still look at key,
	 * state and lease_until of an entry that was freed. */
	ent_set_key(e, key);
	e->off = e->stamp = e->held_until = 0;
	ent_set_lease(e, 0);
	e->len = 0;
	e->pins = 0;
	e->dir = 0;
	e->has_sum = 0;
	ent_set_state(e, IENT_FREE);
	e->prev = e->next = IDX_NONE;
	table_place(sh, sh->table, id);
	sh->count++;
	return id;
}

void shard_unlink(struct shard *sh, uint32_t id)
{
	struct ram_table *t = sh->table;
	uint32_t mask = t->mask, i = home_slot(mask, shard_ent(sh, id)->key);

	while (t->slots[i] != id + 1)
		i = (i + 1) & mask;
	seq_enter(sh);
	/* Backward-shift deletion: pull later members of the probe run back
	 * into the hole when their home slot allows it. */
	for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
		uint32_t v = t->slots[j];
		if (!v)
			break;
		uint32_t h = home_slot(mask, shard_ent(sh, v - 1)->key);
		/* v may move to i iff i lies cyclically in [h, j). */
		if (((j - h) & mask) >= ((j - i) & mask)) {
			slot_set(t, i, v);
			i = j;
		}
	}
	slot_set(t, i, 0);
	seq_leave(sh);
	sh->count--;
}

void shard_free_ent(struct shard *sh, uint32_t id)
{
	struct ram_ent *e = shard_ent(sh, id);
	ent_set_key(e, (kvt_key){ 0, 0 });
	ent_set_lease(e, 0);
	ent_set_state(e, IENT_FREE);
	e->off = e->stamp = e->held_until = 0;
	e->len = 0;
	e->pins = 0;
	e->dir = 0;
	e->has_sum = 0;
	e->prev = IDX_NONE;
	e->next = sh->free_head;
	sh->free_head = id;
}

uint64_t shard_mem_bytes(const struct shard *sh)
{
	uint64_t b = (uint64_t)sh->nents * (sizeof(struct ram_ent) + sizeof(uint64_t));
	for (const struct ram_table *t = sh->table; t; t = t->retired)
		b += sizeof(*t) + (uint64_t)(t->mask + 1) * sizeof(uint32_t);
	return b;
}

void list_push_head(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id)
{
	struct ram_ent *e = shard_ent(sh, id);
	e->prev = IDX_NONE;
	e->next = *head;
	if (*head != IDX_NONE)
		shard_ent(sh, *head)->prev = id;
	else
		*tail = id;
	*head = id;
}

void list_push_tail(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id)
{
	struct ram_ent *e = shard_ent(sh, id);
	e->next = IDX_NONE;
	e->prev = *tail;
	if (*tail != IDX_NONE)
		shard_ent(sh, *tail)->next = id;
	else
		*head = id;
	*tail = id;
}

void list_remove(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id)
{
	struct ram_ent *e = shard_ent(sh, id);
	if (e->prev != IDX_NONE)
		shard_ent(sh, e->prev)->next = e->next;
	else
		*head = e->next;
	if (e->next != IDX_NONE)
		shard_ent(sh, e->next)->prev = e->prev;
	else
		*tail = e->prev;
	e->prev = e->next = IDX_NONE;
}
