/*
 * ram_evict.c - the RAM tier's eviction (see ram.h): picking the globally
 * least recent evictable block, spilling a batch of victims through the
 * tier's spill callback outside every lock, and finishing each one as soon
 * as its spill is done (freed,
 * kept because a lease came meanwhile, or its spilled copy taken back
 * because it was removed meanwhile); and, for the store's close, the list
 * of every block in recency order (ram_blocks), whose blocks the store
 * writes to disk. Lock order: a RAM shard lock, then the disk tier's lock
 * inside the unspill callback (ram.h).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ram_impl.h"
#include "stats.h"

/*
 * Picks the globally least recent evictable entry and marks it EVICTING,
 * pinned. Returns 0 with the shard and entry id set, or -ENOSPC when none is evictable.
 */
static int pick_victim(struct ram_tier *r, struct shard **shp, uint32_t *idp)
{
	for (int attempt = 0; attempt < 8; attempt++) {
		uint64_t now = kvt_now_ns(), best_stamp = UINT64_MAX;
		int best = -1;
		uint32_t best_id = IDX_NONE;

		for (unsigned i = 0; i < NSHARDS; i++) {
			struct shard *sh = &r->shards[i];
			pthread_mutex_lock(&sh->lock);
			ram_expire_leases(r, sh, now);
			uint32_t id = sh->lru_tail;
			for (int n = 0; id != IDX_NONE && n < EVICT_SCAN; n++) {
				if (shard_ent(sh, id)->pins == 0)
					break;
				id = shard_ent(sh, id)->prev;
			}
			if (id != IDX_NONE && shard_ent(sh, id)->pins == 0 &&
			    shard_ent(sh, id)->stamp < best_stamp) {
				best_stamp = shard_ent(sh, id)->stamp;
				best = (int)i;
				best_id = id;
			}
			pthread_mutex_unlock(&sh->lock);
		}
		if (best < 0)
			return -ENOSPC;
		struct shard *sh = &r->shards[best];
		pthread_mutex_lock(&sh->lock);
		struct ram_ent *e = shard_ent(sh, best_id);
		if (e->state == IENT_LRU && e->pins == 0 && e->stamp == best_stamp) {
			list_remove(sh, &sh->lru_head, &sh->lru_tail, best_id);
			ent_set_state(e, IENT_EVICTING);
			e->pins = 1;
			ram_note_droppable(sh, e, 1);
			pthread_mutex_unlock(&sh->lock);
			*shp = sh;
			*idp = best_id;
			return 0;
		}
		/* Someone touched it meanwhile; look again. */
		pthread_mutex_unlock(&sh->lock);
	}
	return -EAGAIN;
}

/* A block picked for eviction, pinned and off the lists. */
struct victim {
	struct shard *sh;
	uint32_t id;
};

/*
 * Finishes the eviction of a victim whose spill is done: frees it, or keeps
 * it when it was leased meanwhile, or takes the spilled copy back when it
 * was removed meanwhile.
 */
static void finish_eviction(struct ram_tier *r, struct victim v, int spilled)
{
	struct shard *sh = v.sh;
	uint32_t id = v.id;

	pthread_mutex_lock(&sh->lock);
	struct ram_ent *e = shard_ent(sh, id);
	e->pins--;
	if (e->state == IENT_DEAD) {
		/* Under the shard lock: RAM shard lock, then the disk tier's
		 * lock (ram.h); the callback never calls back into this tier. */
		if (spilled && r->unspill)
			r->unspill(r->arg, e->key);
		if (e->pins == 0)
			ram_release_entry(r, sh, id);
		pthread_mutex_unlock(&sh->lock);
		return;
	}
	uint64_t lu = ent_lease(e);
	if (lu > kvt_now_ns()) {
		/* Leased while we spilled: the lease wins, the block stays. */
		e->held_until = lu;
		ent_set_state(e, IENT_HELD);
		ram_held_insert(sh, id);
		pthread_mutex_unlock(&sh->lock);
		return;
	}
	if (ent_lease_take(e)) {
		ram_drop_lease(r, e);
		ctr_add(&r->lease_expiries, 1);
	}
	ctr_add(&r->evictions, 1);
	ctr_add(&r->evicted_bytes, e->len);
	ram_unlink(r, sh, id);
	if (e->pins == 0)
		ram_release_entry(r, sh, id);
	else
		ent_set_state(e, IENT_DEAD);
	pthread_mutex_unlock(&sh->lock);
}

/* A batch of victims being spilled: which are finished, and the caller
 * told of each room freed (ram_make_room_with). */
struct evict_run {
	struct ram_tier *r;
	struct victim *v;
	uint8_t *fin;
	struct ram_room *room;
	uint64_t added;           /* bytes room->fit put meanwhile */
};

void ram_spill_done(struct ram_spill *sp, size_t i)
{
	struct evict_run *er = sp->tier;
	struct ram_tier *r = er->r;

	if (i >= sp->n || er->fin[i])
		return;
	er->fin[i] = 1;
	if (r->spill)
		ctr_add(sp->ops[i].result == 0 ? &r->spills : &r->spill_failures, 1);
	finish_eviction(r, er->v[i], r->spill && sp->ops[i].result == 0);
	if (er->room && er->room->fit)
		er->added += er->room->fit(er->room->arg);
}

/*
 * Evicts up to max blocks (at least one, at most ROOM_BATCH), the least
 * recent first, stopping early once used bytes minus what is being
 * evicted reach `floor`. Their spills go out as one batch, outside every
 * lock, with room's extra blocks (then handed over: room->nextra 0); each
 * victim is finished as soon as its spill is (ram_spill_done) and room's
 * fit told. Returns the number evicted, or -ENOSPC / -EAGAIN when no
 * block could be picked; *added: the bytes room's fit put.
 */
static int evict_batch(struct ram_tier *r, size_t max, uint64_t floor,
		       struct ram_room *room, uint64_t *added)
{
	struct victim v[ROOM_BATCH];
	kvt_op ops[ROOM_BATCH];
	uint64_t sums[ROOM_BATCH];
	uint8_t has_sum[ROOM_BATCH];
	uint8_t fin[ROOM_BATCH] = { 0 };
	uint64_t pending = 0;
	size_t n = 0;
	int rc = 0;

	*added = 0;
	if (max > ROOM_BATCH)
		max = ROOM_BATCH;
	while (n < max) {
		if (n && atomic_load_explicit(&r->used, memory_order_relaxed) <= floor + pending)
			break;
		rc = pick_victim(r, &v[n].sh, &v[n].id);
		if (rc)
			break;
		/* Pinned and off the lists: key, offset and length are stable. */
		pthread_mutex_lock(&v[n].sh->lock);
		struct ram_ent *e = shard_ent(v[n].sh, v[n].id);
		ops[n] = (kvt_op){ e->key, r->base + e->off, e->len, -ENOENT };
		has_sum[n] = e->has_sum;
		sums[n] = e->has_sum ? *shard_sum(v[n].sh, v[n].id) : 0;
		pending += arena_extent_bytes(r->arena, e->off);
		pthread_mutex_unlock(&v[n].sh->lock);
		n++;
	}
	if (n == 0)
		return rc;
	struct evict_run er = { .r = r, .v = v, .fin = fin, .room = room };
	struct ram_spill sp = { .ops = ops, .n = n, .sums = sums, .has_sum = has_sum,
				.tier = &er };
	if (r->spill) {
		if (room && room->nextra) {
			sp.extra = room->extra;
			sp.nextra = room->nextra;
			room->extra = NULL;
			room->nextra = 0;
		}
		r->spill(r->arg, &sp);
	}
	for (size_t i = 0; i < n; i++)
		ram_spill_done(&sp, i);
	*added = er.added;
	return (int)n;
}

int ram_evict_batch(struct ram_tier *r, size_t max, uint64_t floor)
{
	uint64_t added;

	if (max > EVICT_BATCH)
		max = EVICT_BATCH;
	return evict_batch(r, max, floor, NULL, &added);
}

/* Evicts in batches of up to max until used bytes reach floor (or nothing
 * more can be picked), the floor raised by what room's fit puts meanwhile.
 * Returns the number evicted. */
static size_t evict_to(struct ram_tier *r, uint64_t floor, size_t max, struct ram_room *room)
{
	size_t n = 0;
	int again = 0;

	while (atomic_load_explicit(&r->used, memory_order_relaxed) > floor) {
		uint64_t added = 0;
		int rc = evict_batch(r, max, floor, room, &added);
		floor += added;
		if (rc == -EAGAIN && again++ < 4)
			continue;
		if (rc < 0)
			break;
		n += (size_t)rc;
	}
	return n;
}

size_t ram_evict_to_low(struct ram_tier *r)
{
	return evict_to(r, r->low_bytes, EVICT_BATCH, NULL);
}

size_t ram_make_room(struct ram_tier *r, uint64_t bytes)
{
	return ram_make_room_with(r, bytes, NULL);
}

size_t ram_make_room_with(struct ram_tier *r, uint64_t bytes, struct ram_room *room)
{
	return evict_to(r, bytes < r->high_bytes ? r->high_bytes - bytes : 0, ROOM_BATCH,
			room);
}

uint64_t ram_high_bytes(struct ram_tier *r)
{
	return r->high_bytes;
}

int ram_above_high(struct ram_tier *r)
{
	return atomic_load_explicit(&r->used, memory_order_relaxed) > r->high_bytes;
}

/* --- listing, for the store's close ---------------------------------------- */

/* Appends the entries of list head (linked through .next) of shard sh. */
static size_t list_blocks(struct ram_tier *r, struct shard *sh, uint32_t head,
			  struct ram_block *b)
{
	size_t n = 0;

	for (uint32_t id = head; id != IDX_NONE; id = shard_ent(sh, id)->next) {
		const struct ram_ent *e = shard_ent(sh, id);

		b[n] = (struct ram_block){ .key = e->key, .data = r->base + e->off,
					   .len = e->len, .stamp = e->stamp,
					   .has_sum = e->has_sum };
		if (e->has_sum)
			b[n].sum = *shard_sum(sh, id);
		n++;
	}
	return n;
}

static int by_stamp(const void *a, const void *b)
{
	uint64_t x = ((const struct ram_block *)a)->stamp;
	uint64_t y = ((const struct ram_block *)b)->stamp;

	return x < y ? -1 : x > y;
}

long ram_blocks(struct ram_tier *r, struct ram_block **out)
{
	size_t cap = 0, n = 0;

	*out = NULL;
	for (unsigned i = 0; i < NSHARDS; i++) {
		pthread_mutex_lock(&r->shards[i].lock);
		cap += r->shards[i].count;
		pthread_mutex_unlock(&r->shards[i].lock);
	}
	struct ram_block *b = malloc((cap ? cap : 1) * sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (unsigned i = 0; i < NSHARDS; i++) {
		struct shard *sh = &r->shards[i];

		pthread_mutex_lock(&sh->lock);
		/* the lists hold at most count entries: nothing else runs */
		if (n + sh->count <= cap) {
			n += list_blocks(r, sh, sh->lru_head, b + n);
			n += list_blocks(r, sh, sh->held_head, b + n);
		}
		pthread_mutex_unlock(&sh->lock);
	}
	qsort(b, n, sizeof(*b), by_stamp);
	*out = b;
	return (long)n;
}
