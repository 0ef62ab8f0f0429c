/*
 * disk_region.c - the NVMe tier's log of regions: leases (per region, with
 * a flag per block), opening the next region to append to (a free one,
 * else FIFO reclaim of the oldest sealed region no I/O pins and no lease
 * protects), reserving pages in it, and the reinsertion decision (a block
 * hit near the tail moves to the head). The caller holds the tier's lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "disk_impl.h"

/*
 * Leases entry e until deadline: its region is not reclaimed before then
 * (leases are per region, with a flag and a count per block so that
 * releasing every lease of a region frees it early).
 */
void disk_lease_ent(struct disk_tier *d, uint32_t e, uint64_t deadline)
{
	struct region *r = &d->regions[page_region(d, w_page(d->ents[e].w))];

	if (r->lease_until <= kvt_now_ns() && r->nleased) {
		/* Every lease in this region expired: clear their flags. */
		for (uint32_t x = r->head; x != NIL; x = d->ents[x].next)
			d->ents[x].w &= ~LEASE_BIT;
		r->nleased = 0;
	}
	if (!(d->ents[e].w & LEASE_BIT)) {
		d->ents[e].w |= LEASE_BIT;
		r->nleased++;
	}
	if (deadline > r->lease_until)
		r->lease_until = deadline;
}

/* Forgets every block of region r and frees its entries. */
static void region_clear(struct disk_tier *d, uint32_t r)
{
	struct region *rg = &d->regions[r];

	for (uint32_t e = rg->head; e != NIL;) {
		uint32_t next = d->ents[e].next;
		kvt_key k = { d->ents[e].lo, d->ents[e].hi };

		if (disk_idx_find(d, k) == e)
			disk_ent_drop(d, e);
		d->ents[e].next = d->ent_free;
		d->ent_free = e;
		e = next;
	}
	rg->head = NIL;
	rg->nleased = 0;
	rg->lease_until = 0;
}

/*
 * Opens a new region for appending: a free one, else, with reclaim, the
 * oldest sealed one that no I/O pins and no lease protects (FIFO), whose
 * blocks are dropped.
 */
static int region_open_next(struct disk_tier *d, int reclaim)
{
	uint64_t now = kvt_now_ns();
	uint32_t best = NIL;

	for (uint32_t r = 0; r < d->nregions; r++) {
		struct region *rg = &d->regions[r];

		if (r == d->cur)
			continue;
		if (rg->state == R_FREE) {
			best = r;
			break;
		}
		if (reclaim && rg->state == R_SEALED && rg->pins == 0 &&
		    rg->lease_until <= now &&
		    (best == NIL || rg->seq < d->regions[best].seq))
			best = r;
	}
	if (best == NIL)
		return -ENOSPC;
	if (d->cur != NIL)
		d->regions[d->cur].state = R_SEALED;
	if (d->regions[best].state == R_SEALED) {
		region_clear(d, best);
		ctr_add(&d->reclaims, 1);
	} else {
		d->nfree--;
	}
	d->regions[best].state = R_OPEN;
	d->regions[best].seq = ++d->region_seq;
	d->regions[best].wp = 0;
	d->cur = best;
	return 0;
}

/* Reserves pages in the open region, opening another where they do not
 * fit (reclaiming one only with reclaim); pins it. Returns the first page. */
int disk_reserve(struct disk_tier *d, uint32_t pages, int reclaim, uint64_t *page)
{
	if (pages > d->region_pages)
		return -ENOSPC;
	if (d->cur == NIL || d->regions[d->cur].wp + pages > d->region_pages) {
		int err = region_open_next(d, reclaim);
		if (err < 0)
			return err;
	}
	struct region *rg = &d->regions[d->cur];
	*page = (uint64_t)d->cur * d->region_pages + rg->wp;
	rg->wp += pages;
	rg->pins++;
	return 0;
}

/* A block read from a region this close to the log's tail moves to its head. */
int disk_near_tail(const struct disk_tier *d, uint32_t r)
{
	const struct region *rg = &d->regions[r];

	if (r == d->cur || rg->state != R_SEALED)
		return 0;
	/* Only once the log has wrapped: while free regions remain, nothing is
	 * about to be reclaimed. */
	if (d->nfree)
		return 0;
	return (d->region_seq - rg->seq) * 4 >= (uint64_t)d->nregions * 3;
}
