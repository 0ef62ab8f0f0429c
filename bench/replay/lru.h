/*
 * lru.h - kvbench replay's least-recently-used cache of keys weighted by
 * tokens: the endpoints' GPU prefix caches (whose entries running calls
 * pin) and the unbounded cache behind the trace's bound.
 *
 * Knows nothing about the replay's events or the store.
 */
#ifndef KVBENCH_LRU_H
#define KVBENCH_LRU_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define NIL UINT32_MAX

struct lnode {
	kvt_key key;
	uint64_t tokens;
	uint32_t prev, next;
	uint32_t pins; /* running calls using it: off the list, never evicted */
	double t;      /* the bound's entries: when a prompt last touched it */
};

/*
 * The list holds the evictable entries, most recent first; pinned ones
 * (the KV of running calls) stay findable but off the list. used counts
 * every entry's tokens, held the tokens running calls hold outside any
 * entry (blocks still being computed, their answers); entries are evicted
 * while used + held exceeds cap.
 */
struct lru {
	uint64_t cap, used, held;
	uint64_t pinned; /* tokens of the pinned entries */
	uint32_t *slot; /* node index + 1; 0 empty */
	size_t mask;
	struct lnode *node;
	uint32_t nnode, capnode, freel;
	uint32_t head, tail; /* head: most recent */
	size_t count;
};

int lru_init(struct lru *l, uint64_t cap_tokens);
void lru_free(struct lru *l);
/* The entry of key k, or NIL. */
uint32_t lru_find(const struct lru *l, kvt_key k);
/* Puts entry n (off the list) at the head: most recent. */
void lru_push_head(struct lru *l, uint32_t n);
/* Evicts least recent entries while used + held exceeds cap. */
void lru_trim(struct lru *l);
/* A new entry for key k (not present) of tokens, off the list; *out its
 * index. Returns 0 or -ENOMEM. */
int lru_add(struct lru *l, kvt_key k, uint64_t tokens, uint32_t *out);
/* Inserts or refreshes key as most recent; evicts least recent past cap.
 * A pinned entry stays pinned. Returns 0 or -ENOMEM. */
int lru_insert(struct lru *l, kvt_key k, uint64_t tokens);
/* Pins entry n (taking it off the list at its first pin). */
void lru_pin(struct lru *l, uint32_t n);
/* Pins key k, adding it when absent (a running call's KV always has its
 * place: a full pool evicts what it can and holds the rest over cap);
 * *out its index. Returns 0 or -ENOMEM. */
int lru_pin_key(struct lru *l, kvt_key k, uint64_t tokens, uint32_t *out);
/* Drops a pin of entry n; at the last one the entry becomes most recent. */
void lru_unpin(struct lru *l, uint32_t n);

#endif
