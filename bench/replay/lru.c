/*
 * lru.c - kvbench replay's token-weighted LRU of keys (lru.h): an open
 * addressing table of node indices over a doubly linked list of the
 * evictable entries, most recent first; pinned entries stay findable but
 * off the list.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lru.h"

int lru_init(struct lru *l, uint64_t cap_tokens)
{
	memset(l, 0, sizeof(*l));
	l->cap = cap_tokens;
	l->mask = 1023;
	l->slot = calloc(l->mask + 1, sizeof(*l->slot));
	l->head = l->tail = l->freel = NIL;
	return l->slot ? 0 : -ENOMEM;
}

void lru_free(struct lru *l)
{
	free(l->slot);
	free(l->node);
	memset(l, 0, sizeof(*l));
}

static inline size_t lru_home(const struct lru *l, kvt_key k)
{
	return (size_t)(k.lo ^ (k.hi >> 7)) & l->mask;
}

uint32_t lru_find(const struct lru *l, kvt_key k)
{
	size_t i = lru_home(l, k);
	uint32_t n;

	while ((n = l->slot[i])) {
		if (l->node[n - 1].key.lo == k.lo && l->node[n - 1].key.hi == k.hi)
			return n - 1;
		i = (i + 1) & l->mask;
	}
	return NIL;
}

static void lru_unlink(struct lru *l, uint32_t n)
{
	struct lnode *x = &l->node[n];

	if (x->prev != NIL)
		l->node[x->prev].next = x->next;
	else
		l->head = x->next;
	if (x->next != NIL)
		l->node[x->next].prev = x->prev;
	else
		l->tail = x->prev;
}

void lru_push_head(struct lru *l, uint32_t n)
{
	l->node[n].prev = NIL;
	l->node[n].next = l->head;
	if (l->head != NIL)
		l->node[l->head].prev = n;
	l->head = n;
	if (l->tail == NIL)
		l->tail = n;
}

static void lru_slot_del(struct lru *l, kvt_key k)
{
	size_t i = lru_home(l, k), j, h;

	while (l->slot[i]) {
		struct lnode *x = &l->node[l->slot[i] - 1];
		if (x->key.lo == k.lo && x->key.hi == k.hi)
			break;
		i = (i + 1) & l->mask;
	}
	if (!l->slot[i])
		return;
	/* backward-shift deletion keeps probe sequences intact */
	j = i;
	for (;;) {
		j = (j + 1) & l->mask;
		if (!l->slot[j])
			break;
		h = lru_home(l, l->node[l->slot[j] - 1].key);
		if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
			l->slot[i] = l->slot[j];
			i = j;
		}
	}
	l->slot[i] = 0;
}

static int lru_grow_table(struct lru *l)
{
	size_t nm = l->mask * 2 + 1, i, k;
	uint32_t *ns = calloc(nm + 1, sizeof(*ns));
	uint32_t n;

	if (!ns)
		return -ENOMEM;
	for (i = 0; i <= l->mask; i++) {
		n = l->slot[i];
		if (!n)
			continue;
		k = (size_t)(l->node[n - 1].key.lo ^ (l->node[n - 1].key.hi >> 7)) & nm;
		while (ns[k])
			k = (k + 1) & nm;
		ns[k] = n;
	}
	free(l->slot);
	l->slot = ns;
	l->mask = nm;
	return 0;
}

static void lru_evict_tail(struct lru *l)
{
	uint32_t n = l->tail;

	lru_unlink(l, n);
	lru_slot_del(l, l->node[n].key);
	l->used -= l->node[n].tokens;
	l->node[n].next = l->freel;
	l->freel = n;
	l->count--;
}

/* Evicts least recent entries while used + held exceeds cap. */
void lru_trim(struct lru *l)
{
	while (l->used + l->held > l->cap && l->tail != NIL)
		lru_evict_tail(l);
}

/* A new entry for key k (not present) of tokens, off the list; *out its
 * index. */
int lru_add(struct lru *l, kvt_key k, uint64_t tokens, uint32_t *out)
{
	uint32_t n;
	size_t i;

	if ((l->count + 1) * 2 > l->mask + 1 && lru_grow_table(l))
		return -ENOMEM;
	if (l->freel != NIL) {
		n = l->freel;
		l->freel = l->node[n].next;
	} else {
		if (l->nnode == l->capnode) {
			uint32_t nc = l->capnode ? l->capnode * 2 : 1024;
			struct lnode *nn = realloc(l->node, (size_t)nc * sizeof(*nn));
			if (!nn)
				return -ENOMEM;
			l->node = nn;
			l->capnode = nc;
		}
		n = l->nnode++;
	}
	l->node[n].key = k;
	l->node[n].tokens = tokens;
	l->node[n].pins = 0;
	l->node[n].prev = l->node[n].next = NIL;
	i = lru_home(l, k);
	while (l->slot[i])
		i = (i + 1) & l->mask;
	l->slot[i] = n + 1;
	l->used += tokens;
	l->count++;
	*out = n;
	return 0;
}

/* Inserts or refreshes key as most recent; evicts least recent past cap.
 * A pinned entry stays pinned. */
int lru_insert(struct lru *l, kvt_key k, uint64_t tokens)
{
	uint32_t n = lru_find(l, k);

	if (n != NIL) {
		if (l->node[n].pins == 0) {
			lru_unlink(l, n);
			lru_push_head(l, n);
		}
		return 0;
	}
	if (tokens > l->cap)
		return 0;
	while (l->used + l->held + tokens > l->cap && l->tail != NIL)
		lru_evict_tail(l);
	if (lru_add(l, k, tokens, &n))
		return -ENOMEM;
	lru_push_head(l, n);
	return 0;
}

/* Pins entry n (taking it off the list at its first pin). */
void lru_pin(struct lru *l, uint32_t n)
{
	if (l->node[n].pins++ == 0) {
		lru_unlink(l, n);
		l->pinned += l->node[n].tokens;
	}
}

/* Pins key k, adding it when absent (a running call's KV always has its
 * place: a full pool evicts what it can and holds the rest over cap);
 * *out its index. */
int lru_pin_key(struct lru *l, kvt_key k, uint64_t tokens, uint32_t *out)
{
	uint32_t n = lru_find(l, k);

	if (n != NIL) {
		lru_pin(l, n);
	} else {
		if (lru_add(l, k, tokens, &n))
			return -ENOMEM;
		l->node[n].pins = 1; /* never on the list */
		l->pinned += tokens;
	}
	lru_trim(l);
	*out = n;
	return 0;
}

/* Drops a pin of entry n; at the last one the entry becomes most recent. */
void lru_unpin(struct lru *l, uint32_t n)
{
	if (--l->node[n].pins == 0) {
		lru_push_head(l, n);
		l->pinned -= l->node[n].tokens;
	}
}

