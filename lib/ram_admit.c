/*
 * ram_admit.c - the RAM tier's admission of new blocks (see ram.h): a
 * promotion from a lower tier is taken above the high watermark only on
 * its key's second try, and, without a disk tier, a put (or a reserved
 * block about to be published) that the evictor would drop as soon as it
 * came in is refused. Knows nothing of the store: ram.c and the slots ask.
 */
#include <stdatomic.h>

#include "ram_impl.h"
#include "stats.h"

/*
 * Whether a promotion of len bytes of key may take RAM: always while it
 * fits below the high watermark (free space, nothing evicted); otherwise
 * only on the key's second declined try since its slot in `seen` was last
 * taken, so that a stream of blocks read once (a cold load larger than
 * RAM) does not evict and copy on every disk hit, while a block read again
 * comes back to RAM.
 */
int ram_admit_promotion(struct ram_tier *r, kvt_key key, size_t len)
{
	uint64_t used = atomic_load_explicit(&r->used, memory_order_relaxed);

	if (used + len <= r->high_bytes)
		return 1;
	uint64_t fp = (key.lo ^ (key.hi << 17 | key.hi >> 47)) | 1;
	_Atomic uint64_t *slot = &r->seen[(key.lo ^ key.hi) >> 7 & (NSEEN - 1)];

	if (atomic_load_explicit(slot, memory_order_relaxed) == fp) {
		atomic_store_explicit(slot, 0, memory_order_relaxed);
		return 1;
	}
	atomic_store_explicit(slot, fp, memory_order_relaxed);
	return 0;
}

/* Bytes the evictor may drop now: unleased, unpinned blocks. */
static uint64_t droppable_bytes(struct ram_tier *r)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < NSHARDS; i++)
		sum += atomic_load_explicit(&r->shards[i].droppable, memory_order_relaxed);
	return sum;
}

/* Whether, with RAM's used bytes at used (the new block's among them),
 * the blocks the evictor may drop leave more than the low watermark. */
static int above_low_without_droppable(struct ram_tier *r, uint64_t used)
{
	return used > r->low_bytes + droppable_bytes(r);
}

/*
 * Without a disk tier an evicted block is gone. Once a new block takes RAM
 * past the high watermark, the evictor frees down to the low one, the
 * newest block last. What it cannot drop stays: leased blocks, pinned ones
 * (a kvt_get_pin slot, a copy or a send in flight, a removed block still
 * read), reservations and loads in slots not yet published. When that and
 * the new block alone stay above the low watermark, the new block is
 * dropped as soon as it comes in, and a put that returned 0 would have
 * reported a block that is gone. (A block above the low watermark by
 * itself is left to the evictor, as kvtier-config(5) says for
 * ram.max_block.)
 */
int ram_put_refused(struct ram_tier *r, size_t len, int reserved)
{
	uint64_t ext = ram_unit_bytes(len);

	if (r->spill || len > r->low_bytes)
		return 0;
	uint64_t used = atomic_load_explicit(&r->used, memory_order_relaxed);
	if (!reserved)
		used += ext;
	if (used <= r->high_bytes || !above_low_without_droppable(r, used))
		return 0;
	ram_expire_all(r); /* lapsed leases count until swept */
	used = atomic_load_explicit(&r->used, memory_order_relaxed) + (reserved ? 0 : ext);
	if (!above_low_without_droppable(r, used))
		return 0;
	ctr_add(&r->refused_puts, 1);
	return 1;
}
