/*
 * ram_index.c - the sharded hash index of the RAM tier (see ram_index.h). Keys are
 * already uniform hashes, so key.lo picks the slot directly; linear probing
 * with backward-shift deletion keeps probes short without tombstones.
 * Tables stay at most half full. The caller holds the shard lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ram_index.h"

#define SHARD_INIT_SLOTS 64u

int shard_init(struct shard *sh)
{
	memset(sh, 0, sizeof(*sh));
	if (pthread_mutex_init(&sh->lock, NULL))
		return -ENOMEM;
	sh->slots = calloc(SHARD_INIT_SLOTS, sizeof(*sh->slots));
	if (!sh->slots) {
		pthread_mutex_destroy(&sh->lock);
		return -ENOMEM;
	}
	sh->mask = SHARD_INIT_SLOTS - 1;
	sh->free_head = IDX_NONE;
	sh->lru_head = sh->lru_tail = IDX_NONE;
	sh->held_head = sh->held_tail = IDX_NONE;
	return 0;
}

void shard_destroy(struct shard *sh)
{
	free(sh->slots);
	free(sh->ents);
	pthread_mutex_destroy(&sh->lock);
	memset(sh, 0, sizeof(*sh));
}

/* The shard is chosen from key.hi (see ram.c), the slot from key.lo. */
static inline uint32_t home_slot(const struct shard *sh, kvt_key key)
{
	return (uint32_t)(key.lo ^ (key.lo >> 32)) & sh->mask;
}

uint32_t shard_find(const struct shard *sh, kvt_key key)
{
	for (uint32_t i = home_slot(sh, key);; i = (i + 1) & sh->mask) {
		uint32_t v = sh->slots[i];
		if (!v)
			return IDX_NONE;
		const struct ram_ent *e = &sh->ents[v - 1];
		if (e->key.lo == key.lo && e->key.hi == key.hi)
			return v - 1;
	}
}

static void table_place(struct shard *sh, uint32_t id)
{
	uint32_t i = home_slot(sh, sh->ents[id].key);
	while (sh->slots[i])
		i = (i + 1) & sh->mask;
	sh->slots[i] = id + 1;
}

static int table_grow(struct shard *sh)
{
	uint32_t nsize = (sh->mask + 1) * 2;
	uint32_t *old = sh->slots, osize = sh->mask + 1;

	if (nsize == 0 || nsize > (1u << 31))
		return -ENOMEM;
	uint32_t *n = calloc(nsize, sizeof(*n));
	if (!n)
		return -ENOMEM;
	sh->slots = n;
	sh->mask = nsize - 1;
	for (uint32_t i = 0; i < osize; i++)
		if (old[i])
			table_place(sh, old[i] - 1);
	free(old);
	return 0;
}

static uint32_t pool_take(struct shard *sh)
{
	if (sh->free_head == IDX_NONE) {
		uint32_t n = sh->nents ? sh->nents * 2 : 32;
		if (n <= sh->nents || n >= IDX_NONE)
			return IDX_NONE;
		struct ram_ent *e = realloc(sh->ents, (size_t)n * sizeof(*e));
		if (!e)
			return IDX_NONE;
		/* Thread the new slots onto the free list, lowest id first. */
		for (uint32_t i = n; i-- > sh->nents;) {
			memset(&e[i], 0, sizeof(e[i]));
			e[i].next = sh->free_head;
			sh->free_head = i;
		}
		sh->ents = e;
		sh->nents = n;
	}
	uint32_t id = sh->free_head;
	sh->free_head = sh->ents[id].next;
	return id;
}

uint32_t shard_insert(struct shard *sh, kvt_key key)
{
	if ((sh->count + 1) * 2 > sh->mask + 1 && table_grow(sh))
		return IDX_NONE;
	uint32_t id = pool_take(sh);
	if (id == IDX_NONE)
		return IDX_NONE;
	struct ram_ent *e = &sh->ents[id];
	memset(e, 0, sizeof(*e));
	e->key = key;
	e->prev = e->next = IDX_NONE;
	table_place(sh, id);
	sh->count++;
	return id;
}

void shard_unlink(struct shard *sh, uint32_t id)
{
	uint32_t i = home_slot(sh, sh->ents[id].key);

	while (sh->slots[i] != id + 1)
		i = (i + 1) & sh->mask;
	/* Backward-shift deletion: pull later members of the probe run back
	 * into the hole when their home slot allows it. */
	for (uint32_t j = (i + 1) & sh->mask;; j = (j + 1) & sh->mask) {
		uint32_t v = sh->slots[j];
		if (!v)
			break;
		uint32_t h = home_slot(sh, sh->ents[v - 1].key);
		/* v may move to i iff i lies cyclically in [h, j). */
		if (((j - h) & sh->mask) >= ((j - i) & sh->mask)) {
			sh->slots[i] = v;
			i = j;
		}
	}
	sh->slots[i] = 0;
	sh->count--;
}

void shard_free_ent(struct shard *sh, uint32_t id)
{
	struct ram_ent *e = &sh->ents[id];
	memset(e, 0, sizeof(*e));
	e->state = IENT_FREE;
	e->next = sh->free_head;
	sh->free_head = id;
}

uint64_t shard_mem_bytes(const struct shard *sh)
{
	return (uint64_t)(sh->mask + 1) * sizeof(*sh->slots) +
	       (uint64_t)sh->nents * sizeof(*sh->ents);
}

void list_push_head(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id)
{
	struct ram_ent *e = &sh->ents[id];
	e->prev = IDX_NONE;
	e->next = *head;
	if (*head != IDX_NONE)
		sh->ents[*head].prev = id;
	else
		*tail = id;
	*head = id;
}

void list_push_tail(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id)
{
	struct ram_ent *e = &sh->ents[id];
	e->next = IDX_NONE;
	e->prev = *tail;
	if (*tail != IDX_NONE)
		sh->ents[*tail].next = id;
	else
		*head = id;
	*tail = id;
}

void list_remove(struct shard *sh, uint32_t *head, uint32_t *tail, uint32_t id)
{
	struct ram_ent *e = &sh->ents[id];
	if (e->prev != IDX_NONE)
		sh->ents[e->prev].next = e->next;
	else
		*head = e->next;
	if (e->next != IDX_NONE)
		sh->ents[e->next].prev = e->prev;
	else
		*tail = e->prev;
	e->prev = e->next = IDX_NONE;
}
