/*
 * disk_index.c - the NVMe tier's compact in-memory index: a pool of
 * 28-byte entries (key, packed page + length + lease flag, region chain
 * link) and an open-addressing table of entry ids over it, with
 * backward-shift deletion. The caller holds the tier's lock. Knows nothing
 * about I/O.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "disk_impl.h"

static inline uint32_t key_hash(uint64_t lo, uint64_t hi)
{
	uint64_t h = lo ^ (hi * 0x9E3779B97F4A7C15ull);

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return (uint32_t)h;
}

uint32_t disk_idx_find(const struct disk_tier *d, kvt_key k)
{
	uint32_t mask = d->nslots - 1;

	for (uint32_t i = key_hash(k.lo, k.hi) & mask;; i = (i + 1) & mask) {
		uint32_t e = d->slots[i];

		if (e == NIL)
			return NIL;
		if (d->ents[e].lo == k.lo && d->ents[e].hi == k.hi)
			return e;
	}
}

static void slots_put(uint32_t *slots, uint32_t mask, const struct disk_ent *ents,
		      uint32_t e)
{
	uint32_t i = key_hash(ents[e].lo, ents[e].hi) & mask;

	while (slots[i] != NIL)
		i = (i + 1) & mask;
	slots[i] = e;
}

static int idx_insert(struct disk_tier *d, uint32_t e)
{
	if ((uint64_t)(d->count + 1) * 4 > (uint64_t)d->nslots * 3) {
		uint32_t n = d->nslots * 2;
		uint32_t *s = malloc(sizeof(*s) * n);

		if (!s || n < d->nslots) {
			free(s);
			return -ENOMEM;
		}
		memset(s, 0xff, sizeof(*s) * n);
		for (uint32_t i = 0; i < d->nslots; i++)
			if (d->slots[i] != NIL)
				slots_put(s, n - 1, d->ents, d->slots[i]);
		free(d->slots);
		d->slots = s;
		d->nslots = n;
	}
	slots_put(d->slots, d->nslots - 1, d->ents, e);
	d->count++;
	return 0;
}

/* Removes key's slot (backward-shift deletion, no tombstones). */
static void idx_delete(struct disk_tier *d, kvt_key k)
{
	uint32_t mask = d->nslots - 1, i = key_hash(k.lo, k.hi) & mask;

	for (;; i = (i + 1) & mask) {
		uint32_t e = d->slots[i];

		if (e == NIL)
			return;
		if (d->ents[e].lo == k.lo && d->ents[e].hi == k.hi)
			break;
	}
	for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
		uint32_t e = d->slots[j];

		if (e == NIL)
			break;
		uint32_t home = key_hash(d->ents[e].lo, d->ents[e].hi) & mask;
		/* Move e back into the hole at i unless its home lies in (i, j]. */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			d->slots[i] = e;
			i = j;
		}
	}
	d->slots[i] = NIL;
	d->count--;
}

static uint32_t ent_alloc(struct disk_tier *d)
{
	uint32_t e = d->ent_free;

	if (e != NIL) {
		d->ent_free = d->ents[e].next;
		return e;
	}
	if (d->ents_hwm >= d->max_ents)
		return NIL;
	return d->ents_hwm++;
}

/* Unlinks a live entry from the index, keeping it in its region's chain. */
void disk_ent_drop(struct disk_tier *d, uint32_t e)
{
	kvt_key k = { d->ents[e].lo, d->ents[e].hi };
	uint64_t w = d->ents[e].w;
	struct region *r = &d->regions[page_region(d, w_page(w))];

	if ((w & LEASE_BIT) && r->nleased && --r->nleased == 0)
		r->lease_until = 0;
	d->ents[e].w &= ~LEASE_BIT;
	idx_delete(d, k);
	d->bytes_used -= (uint64_t)rec_pages(w_len(w)) * PAGE;
}

/* Adds an entry for a record and links it into its region. */
int disk_ent_add(struct disk_tier *d, kvt_key k, uint64_t page, uint64_t len)
{
	uint32_t e = ent_alloc(d);
	struct region *r = &d->regions[page_region(d, page)];

	if (e == NIL)
		return -ENOSPC;
	d->ents[e].lo = k.lo;
	d->ents[e].hi = k.hi;
	d->ents[e].w = w_make(page, len);
	d->ents[e].next = r->head;
	if (idx_insert(d, e) < 0) {
		d->ents[e].next = d->ent_free;
		d->ent_free = e;
		return -ENOMEM;
	}
	r->head = e;
	d->bytes_used += (uint64_t)rec_pages(len) * PAGE;
	return 0;
}
