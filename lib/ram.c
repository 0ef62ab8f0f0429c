/*
 * ram.c - the RAM tier (see ram.h).
 *
 * Blocks live in the arena; the index is split in NSHARDS shards, each with
 * its own lock, pool, LRU list and held (leased) list. Recency is a
 * tier-wide tick stamped on put and hit; eviction takes, among the shards'
 * least recent evictable entries, the one with the oldest stamp, so the
 * order is the exact global LRU order of the evictable blocks.
 *
 * An entry is in one of these places:
 *   LRU list   - evictable unless pinned by an in-flight copy
 *   held list  - leased until lease_until, ordered by held_until (the
 *                deadline when it was placed, which a renewal without the
 *                lock may have pushed later); moved back to the LRU head
 *                when the lease lapses (checked lazily under the shard lock)
 *   EVICTING   - off both lists, pinned by the evictor while its bytes are
 *                spilled; still readable; a lease taken meanwhile cancels
 *                the eviction
 *   DEAD       - out of the table (removed), freed at its last unpin
 * Copies in and out of the arena run outside every lock: pins keep the
 * extent alive. Lookups take no lock at all when they can: presence is read
 * under the shard's sequence count (ram_index.c), and a lease in force is
 * renewed by raising its deadline with a compare-and-swap, which leaves the
 * entry's place on the held list behind until ram_expire_leases puts it
 * right. Deadlines are rounded up to a grain (RAM_LEASE_GRAIN_NS), so a
 * renewal finds its deadline stored already and writes nothing except
 * about once a grain per entry; so lookups on many threads, of the same
 * keys or not, write no cache line in common (the count of leases is a
 * striped counter, added to once per call, for the same reason). Knows
 * nothing about disks: spills go through a callback. Eviction (victims,
 * batched spills) is in ram_evict.c, the admission of new blocks in
 * ram_admit.c; what the files share is in ram_impl.h. Each shard keeps the
 * bytes of its blocks the evictor may drop (ram_note_droppable at every
 * change of an entry's state or pins).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "ram_index.h"
#include "internal.h"
#include "ram.h"
#include "ram_impl.h"
#include "stats.h"

int ram_open(const struct ram_opts *o, ram_spill_fn spill,
	     ram_unspill_fn unspill, void *arg, struct ram_tier **out)
{
	struct arena_opts ao = {
		.capacity = o->capacity,
		.hugepages = o->hugepages,
		.mlock = o->mlock,
		.numa_node = o->numa_node,
		.shared = o->shared,
	};
	struct ram_tier *r = NULL;
	unsigned i;
	int rc;

	/* Aligned as its shards ask: each shard's read-mostly half on lines
	 * of its own. */
	if (posix_memalign((void **)&r, _Alignof(struct ram_tier), sizeof(*r)))
		return kvt_fail(-ENOMEM, "RAM tier: out of memory");
	memset(r, 0, sizeof(*r));
	for (i = 0; i < NSHARDS; i++) {
		if (shard_init(&r->shards[i])) {
			rc = kvt_fail(-ENOMEM, "RAM tier: out of memory for the index");
			goto fail;
		}
	}
	rc = arena_open(&ao, &r->arena);
	if (rc)
		goto fail;
	r->base = arena_base(r->arena);
	r->capacity = arena_size(r->arena);
	r->high_bytes = (uint64_t)((double)r->capacity * o->high_watermark);
	r->low_bytes = (uint64_t)((double)r->capacity * o->low_watermark);
	r->lease_cap_bytes = (uint64_t)((double)r->capacity * o->lease_cap);
	r->max_block = o->max_block;
	r->spill = spill;
	r->unspill = unspill;
	r->arg = arg;
	if (o->shared && (rc = ram_dir_open(o->dir_slots, &r->dir))) {
		arena_close(r->arena);
		goto fail;
	}
	*out = r;
	return 0;
fail:
	while (i-- > 0)
		shard_destroy(&r->shards[i]);
	free(r);
	return rc;
}

void ram_close(struct ram_tier *r)
{
	if (!r)
		return;
	/* Attached processes stop reading blocks before the arena goes. */
	ram_dir_close(r->dir);
	for (unsigned i = 0; i < NSHARDS; i++)
		shard_destroy(&r->shards[i]);
	arena_close(r->arena);
	free(r);
}

/* Accounts for the end of a lease the caller took from a live entry
 * (ent_lease_take or a CAS to 0); the caller moves it. */
void ram_drop_lease(struct ram_tier *r, struct ram_ent *e)
{
	atomic_fetch_sub_explicit(&r->leased_bytes, e->len, memory_order_relaxed);
	atomic_fetch_sub_explicit(&r->leased_objects, 1, memory_order_relaxed);
}

/*
 * Puts a leased entry on the held list at the place of its held_until (the
 * list is ordered by it, earliest at the head). Renewed deadlines are the
 * latest ones, so the walk from the tail is short. Shard locked.
 */
void ram_held_insert(struct shard *sh, uint32_t id)
{
	struct ram_ent *e = shard_ent(sh, id);
	uint32_t at = sh->held_tail;

	while (at != IDX_NONE && shard_ent(sh, at)->held_until > e->held_until)
		at = shard_ent(sh, at)->prev;
	if (at == sh->held_tail) {
		list_push_tail(sh, &sh->held_head, &sh->held_tail, id);
	} else if (at == IDX_NONE) {
		list_push_head(sh, &sh->held_head, &sh->held_tail, id);
	} else {
		struct ram_ent *a = shard_ent(sh, at);
		e->prev = at;
		e->next = a->next;
		shard_ent(sh, a->next)->prev = id;
		a->next = id;
	}
}

/*
 * Moves lapsed leases of a shard back to the LRU head. A lookup renews a
 * lease without the lock (ram_lookup) and so without moving it on the held
 * list: an entry whose place has passed but whose lease has not is put back
 * at the place of its new deadline. Shard locked.
 */
void ram_expire_leases(struct ram_tier *r, struct shard *sh, uint64_t now)
{
	while (sh->held_head != IDX_NONE) {
		uint32_t id = sh->held_head;
		struct ram_ent *e = shard_ent(sh, id);
		if (e->held_until > now)
			break;
		uint64_t lu = ent_lease(e);
		if (lu > now) {
			list_remove(sh, &sh->held_head, &sh->held_tail, id);
			e->held_until = lu;
			ram_held_insert(sh, id);
			continue;
		}
		if (!ent_lease_cas(e, &lu, 0))
			continue; /* renewed this instant: look again */
		list_remove(sh, &sh->held_head, &sh->held_tail, id);
		ram_drop_lease(r, e);
		ent_set_state(e, IENT_LRU);
		e->stamp = next_tick(r); /* its list position says "recent" */
		list_push_head(sh, &sh->lru_head, &sh->lru_tail, id);
		ram_note_droppable(sh, e, 0);
		ctr_add(&r->lease_expiries, 1);
	}
}

void ram_expire_all(struct ram_tier *r)
{
	uint64_t now = kvt_now_ns();
	for (unsigned i = 0; i < NSHARDS; i++) {
		struct shard *sh = &r->shards[i];
		pthread_mutex_lock(&sh->lock);
		ram_expire_leases(r, sh, now);
		pthread_mutex_unlock(&sh->lock);
	}
}

/* Frees an entry already out of the table and unpinned. Shard locked. */
void ram_release_entry(struct ram_tier *r, struct shard *sh, uint32_t id)
{
	struct ram_ent *e = shard_ent(sh, id);
	uint64_t bytes = arena_extent_bytes(r->arena, e->off);

	/* ram_unlink unpublished it already; this is the last point before
	 * the extent can be reused, so it is checked here once more. */
	if (e->dir) {
		ram_dir_unpublish(r->dir, e->key);
		e->dir = 0;
	}

	arena_free(r->arena, e->off);
	atomic_fetch_sub_explicit(&r->used, bytes, memory_order_relaxed);
	atomic_fetch_sub_explicit(&r->objects, 1, memory_order_relaxed);
	shard_free_ent(sh, id);
}

/* Publishes a live entry in the directory when there is one (and room in
 * its window). Shard locked. */
static void publish(struct ram_tier *r, struct ram_ent *e)
{
	if (r->dir)
		e->dir = (uint8_t)ram_dir_publish(r->dir, e->key, e->off, e->len);
}

void ram_unlink(struct ram_tier *r, struct shard *sh, uint32_t id)
{
	struct ram_ent *e = shard_ent(sh, id);

	if (e->dir) {
		ram_dir_unpublish(r->dir, e->key);
		e->dir = 0;
	}
	shard_unlink(sh, id);
}

/* Refreshes recency of a live entry. Shard locked. */
static void touch(struct ram_tier *r, struct shard *sh, uint32_t id)
{
	struct ram_ent *e = shard_ent(sh, id);
	e->stamp = next_tick(r);
	if (e->state == IENT_LRU && sh->lru_head != id) {
		list_remove(sh, &sh->lru_head, &sh->lru_tail, id);
		list_push_head(sh, &sh->lru_head, &sh->lru_tail, id);
	}
}

/*
 * An extent of len bytes for a block, its bytes counted as used. When it
 * does not fit, evicts the least recent blocks (exact LRU order) down to
 * the low watermark, their spills in one batch, as the evictor thread
 * does between the watermarks, unless may_spill is 0 and evicting would
 * write to disk.
 * Returns the extent's offset or -ENOSPC.
 */
static int64_t alloc_extent(struct ram_tier *r, size_t len, int may_spill)
{
	int64_t off;
	int again = 0;

	if (len > r->capacity)
		return -ENOSPC;
	while ((off = arena_alloc(r->arena, len)) < 0) {
		if (off != -ENOSPC)
			return off;
		if (!may_spill && r->spill)
			return -ENOSPC;
		/* Down to the low watermark in one batch, whose spills go
		 * to disk together (at the disk's queue depth), rather than
		 * one block and one write at a time when puts outrun the
		 * evictor thread. */
		int rc = ram_evict_batch(r, EVICT_BATCH, r->low_bytes);
		if (rc == -EAGAIN && again++ < 4)
			continue;
		if (rc < 0)
			return -ENOSPC;
	}
	atomic_fetch_add_explicit(&r->used, arena_extent_bytes(r->arena, (uint64_t)off),
				  memory_order_relaxed);
	return off;
}

/* Gives back an extent from alloc_extent that holds no block. */
static void free_extent(struct ram_tier *r, uint64_t off)
{
	uint64_t bytes = arena_extent_bytes(r->arena, off);

	arena_free(r->arena, off);
	atomic_fetch_sub_explicit(&r->used, bytes, memory_order_relaxed);
}

/* Keeps sum as the checksum of entry id's block unless one is kept (the
 * one kept was verified, or computed from the same bytes). Shard locked. */
static void keep_sum(struct shard *sh, uint32_t id, const uint64_t *sum)
{
	struct ram_ent *e = shard_ent(sh, id);

	if (sum && !e->has_sum) {
		*shard_sum(sh, id) = *sum;
		e->has_sum = 1;
	}
}

/*
 * Publishes the extent at off, holding len bytes of key, as a block, its
 * checksum *sum when given. Returns 0; 1 when the key is stored already
 * (same bytes: the extent is freed and the stored block's recency
 * refreshed); -ENOMEM when the index cannot grow (the extent is freed).
 * With gen (a promotion), -ESTALE and the extent freed when a removal
 * changed key's generation since *gen.
 */
static int insert_extent(struct ram_tier *r, kvt_key key, uint64_t off, size_t len,
			 const uint64_t *gen, const uint64_t *sum)
{
	struct shard *sh = shard_of(r, key);

	pthread_mutex_lock(&sh->lock);
	uint32_t id = shard_find(sh, key);
	if (id == IDX_NONE && gen &&
	    atomic_load_explicit(gen_of(r, key), memory_order_relaxed) != *gen) {
		pthread_mutex_unlock(&sh->lock);
		free_extent(r, off);
		return -ESTALE;
	}
	if (id != IDX_NONE) {
		touch(r, sh, id);
		pthread_mutex_unlock(&sh->lock);
		free_extent(r, off);
		ctr_add(&r->dup_puts, 1);
		return 1;
	}
	id = shard_insert(sh, key);
	if (id == IDX_NONE) {
		pthread_mutex_unlock(&sh->lock);
		free_extent(r, off);
		return kvt_fail(-ENOMEM, "RAM tier: out of memory for the index");
	}
	struct ram_ent *e = shard_ent(sh, id);
	e->off = off;
	e->len = (uint32_t)len;
	e->stamp = next_tick(r);
	keep_sum(sh, id, sum);
	ent_set_state(e, IENT_LRU);
	list_push_head(sh, &sh->lru_head, &sh->lru_tail, id);
	ram_note_droppable(sh, e, 0);
	publish(r, e);
	pthread_mutex_unlock(&sh->lock);
	ctr_add(&r->objects, 1);
	ctr_add(&r->puts, 1);
	return 0;
}

/*
 * ram_put, and with gen (a promotion) ram_promote: the copy must match *sum
 * (when given) and no removal may have changed key's generation since *gen.
 * With summed (and no sum), the copy's checksum is computed as it is made
 * and kept.
 */
static int put_copy(struct ram_tier *r, kvt_key key, const void *data, size_t len,
		    const uint64_t *gen, const uint64_t *sum, int may_spill, int summed)
{
	struct shard *sh = shard_of(r, key);
	uint32_t id;

	pthread_mutex_lock(&sh->lock);
	id = shard_find(sh, key);
	if (id != IDX_NONE) {
		touch(r, sh, id);
		pthread_mutex_unlock(&sh->lock);
		ctr_add(&r->dup_puts, 1);
		return 1;
	}
	pthread_mutex_unlock(&sh->lock);

	if (gen && !ram_admit_promotion(r, key, len)) {
		ctr_add(&r->promotions_declined, 1);
		return -EAGAIN;
	}
	if (!gen && ram_put_refused(r, len, 0))
		return -ENOSPC;
	int64_t off = alloc_extent(r, len, may_spill);
	if (off < 0) {
		if (off == -ENOSPC && may_spill)
			ctr_add(&r->refused_puts, 1);
		return (int)off;
	}
	uint64_t own_sum = 0;
	if (summed && !sum) {
		/* summed as copied, each piece while in the cache */
		own_sum = kvt_checksum_copy(r->base + off, data, len, 1);
		sum = &own_sum;
	} else {
		memcpy(r->base + off, data, len);
		/* A promotion's data may be a caller's buffer: what counts is
		 * the copy this tier owns, checked against the sum the disk
		 * verified. */
		if (sum && kvt_checksum(r->base + off, len) != *sum) {
			free_extent(r, (uint64_t)off);
			return -EBADMSG;
		}
	}
	/* Another thread may have stored the same key meanwhile: same bytes. */
	return insert_extent(r, key, (uint64_t)off, len, gen, sum);
}

int ram_put(struct ram_tier *r, kvt_key key, const void *data, size_t len)
{
	return put_copy(r, key, data, len, NULL, NULL, 1, 0);
}

int ram_put_nospill(struct ram_tier *r, kvt_key key, const void *data, size_t len)
{
	return put_copy(r, key, data, len, NULL, NULL, 0, 0);
}

int ram_put_summed(struct ram_tier *r, kvt_key key, const void *data, size_t len,
		   int may_spill)
{
	return put_copy(r, key, data, len, NULL, NULL, may_spill, 1);
}

uint64_t ram_gen(struct ram_tier *r, kvt_key key)
{
	return atomic_load_explicit(gen_of(r, key), memory_order_acquire);
}

int ram_promote(struct ram_tier *r, kvt_key key, const void *data, size_t len,
		uint64_t gen, const uint64_t *sum)
{
	return put_copy(r, key, data, len, &gen, sum, 1, 0);
}

int64_t ram_slot_alloc(struct ram_tier *r, size_t len, int may_spill)
{
	return alloc_extent(r, len, may_spill);
}

void ram_slot_free(struct ram_tier *r, uint64_t off)
{
	free_extent(r, off);
}

int ram_slot_publish(struct ram_tier *r, kvt_key key, uint64_t off, size_t len,
		     const uint64_t *sum)
{
	/* leases or pins taken since the reservation may leave the evictor
	 * no victim but this block (a key stored meanwhile is a duplicate) */
	if (!r->spill && ram_lookup(r, key, 0, 0) != 1 && ram_put_refused(r, len, 1)) {
		free_extent(r, off);
		return -ENOSPC;
	}
	return insert_extent(r, key, off, len, NULL, sum);
}

int ram_slot_promote(struct ram_tier *r, kvt_key key, uint64_t off, size_t len,
		     uint64_t gen, const uint64_t *sum, uint64_t *ref)
{
	struct shard *sh = shard_of(r, key);

	if (!ram_admit_promotion(r, key, len)) {
		ctr_add(&r->promotions_declined, 1);
		return -EAGAIN;
	}
	pthread_mutex_lock(&sh->lock);
	if (shard_find(sh, key) != IDX_NONE) {
		pthread_mutex_unlock(&sh->lock);
		return 1;
	}
	if (atomic_load_explicit(gen_of(r, key), memory_order_relaxed) != gen) {
		pthread_mutex_unlock(&sh->lock);
		return -ESTALE;
	}
	uint32_t id = shard_insert(sh, key);
	if (id == IDX_NONE) {
		pthread_mutex_unlock(&sh->lock);
		return -ENOMEM;
	}
	struct ram_ent *e = shard_ent(sh, id);
	e->off = off;
	e->len = (uint32_t)len;
	e->stamp = next_tick(r);
	keep_sum(sh, id, sum);
	ent_set_state(e, IENT_LRU);
	e->pins = 1;
	list_push_head(sh, &sh->lru_head, &sh->lru_tail, id);
	sh->pinned++;
	*ref = (uint64_t)(sh - r->shards) << 32 | id;
	publish(r, e);
	pthread_mutex_unlock(&sh->lock);
	ctr_add(&r->objects, 1);
	ctr_add(&r->puts, 1);
	return 0;
}

/* ram_pin; with sum, *sum = the block's kept checksum, or *sum unset
 * and *has = 0 when none is kept yet. */
static int pin_entry(struct ram_tier *r, kvt_key key, size_t cap, uint64_t *ref,
		     uint64_t *off, size_t *len, uint64_t *sum, int *has)
{
	struct shard *sh = shard_of(r, key);
	uint32_t id;

	pthread_mutex_lock(&sh->lock);
	id = shard_find(sh, key);
	if (id == IDX_NONE) {
		sh->misses++;
		pthread_mutex_unlock(&sh->lock);
		return -ENOENT;
	}
	struct ram_ent *e = shard_ent(sh, id);
	*len = e->len;
	if (e->len > cap) {
		pthread_mutex_unlock(&sh->lock);
		return -ENOBUFS;
	}
	if (e->pins == UINT16_MAX) {
		/* Absurdly many concurrent readers of one block: a miss, not a wrap. */
		sh->misses++;
		pthread_mutex_unlock(&sh->lock);
		return -ENOENT;
	}
	int was = ent_droppable(e);
	e->pins++;
	ram_note_droppable(sh, e, was);
	touch(r, sh, id);
	if (sum && (*has = e->has_sum))
		*sum = *shard_sum(sh, id);
	*off = e->off;
	*ref = (uint64_t)(sh - r->shards) << 32 | id;
	sh->pinned++;
	sh->hits++;
	pthread_mutex_unlock(&sh->lock);
	return 0;
}

int ram_pin(struct ram_tier *r, kvt_key key, size_t cap, uint64_t *ref,
	    uint64_t *off, size_t *len)
{
	return pin_entry(r, key, cap, ref, off, len, NULL, NULL);
}

/* Ends the pin ref, first keeping *sum (NULL: none) as its block's
 * checksum when none is kept yet. */
static void unpin_keep(struct ram_tier *r, uint64_t ref, const uint64_t *sum)
{
	struct shard *sh = &r->shards[ref >> 32];
	uint32_t id = (uint32_t)ref;

	pthread_mutex_lock(&sh->lock);
	keep_sum(sh, id, sum);
	sh->pinned--;
	struct ram_ent *e = shard_ent(sh, id);
	int was = ent_droppable(e);
	if (--e->pins == 0 && e->state == IENT_DEAD)
		ram_release_entry(r, sh, id);
	else
		ram_note_droppable(sh, e, was);
	pthread_mutex_unlock(&sh->lock);
}

void ram_unpin(struct ram_tier *r, uint64_t ref)
{
	unpin_keep(r, ref, NULL);
}

int ram_pin_sum(struct ram_tier *r, kvt_key key, size_t cap, uint64_t *ref,
		uint64_t *off, size_t *len, uint64_t *sum)
{
	int has = 0, rc = pin_entry(r, key, cap, ref, off, len, sum, &has);

	if (rc == 0 && !has) {
		/* The first ask: computed from the pinned bytes, kept. */
		struct shard *sh = &r->shards[*ref >> 32];
		*sum = kvt_checksum(r->base + *off, *len);
		pthread_mutex_lock(&sh->lock);
		keep_sum(sh, (uint32_t)*ref, sum);
		pthread_mutex_unlock(&sh->lock);
	}
	return rc;
}

/* ram_visit; without want_sum, fn's sum is 0 (no checksum computed). */
static int visit(struct ram_tier *r, kvt_key key, size_t cap, ram_visit_fn fn,
		 void *arg, size_t *len, int want_sum)
{
	uint64_t ref, off, sum = 0;
	int has = 0;
	int rc = pin_entry(r, key, cap, &ref, &off, len, want_sum ? &sum : NULL, &has);

	if (rc)
		return rc;
	if (want_sum && !has)
		sum = kvt_checksum(r->base + off, *len); /* the first ask: kept */
	rc = fn(arg, r->base + off, *len, sum);
	unpin_keep(r, ref, want_sum && !has ? &sum : NULL);
	return rc;
}

int ram_visit(struct ram_tier *r, kvt_key key, size_t cap, ram_visit_fn fn,
	      void *arg, size_t *len)
{
	return visit(r, key, cap, fn, arg, len, 1);
}

static int copy_out(void *buf, const void *block, size_t len, uint64_t sum)
{
	(void)sum;
	memcpy(buf, block, len);
	return 0;
}

int ram_get(struct ram_tier *r, kvt_key key, void *buf, size_t cap, size_t *len)
{
	return visit(r, key, cap, copy_out, buf, len, 0);
}

/* Leases a live entry until deadline. Shard locked. 1, or -ENOSPC at the cap. */
static int lease_entry(struct ram_tier *r, struct shard *sh, uint32_t id,
		       uint64_t deadline)
{
	struct ram_ent *e = shard_ent(sh, id);

	/* A lease in force is renewed, never shortened: lookups without the
	 * lock may have raised it past deadline meanwhile. A lease of 0 is
	 * renewed by no one without the lock (ent_lease_renew leaves it), so
	 * the first lease's test and store below race with nothing. */
	if (!ent_lease_renew(e, deadline)) {
		uint64_t cur = atomic_load_explicit(&r->leased_bytes, memory_order_relaxed);
		do {
			if (cur + e->len > r->lease_cap_bytes)
				return -ENOSPC;
		} while (!atomic_compare_exchange_weak_explicit(
			&r->leased_bytes, &cur, cur + e->len,
			memory_order_relaxed, memory_order_relaxed));
		ctr_add(&r->leased_objects, 1);
		ent_set_lease(e, deadline);
	}
	if (e->state == IENT_LRU) {
		int was = ent_droppable(e);
		list_remove(sh, &sh->lru_head, &sh->lru_tail, id);
		ent_set_state(e, IENT_HELD);
		ram_note_droppable(sh, e, was);
		e->held_until = ent_lease(e);
		ram_held_insert(sh, id);
	} else if (e->state == IENT_HELD && e->held_until < deadline) {
		/* Renewed past its place: keep the held list ordered. */
		list_remove(sh, &sh->held_head, &sh->held_tail, id);
		e->held_until = ent_lease(e);
		ram_held_insert(sh, id);
	}
	/* IENT_EVICTING: the evictor sees lease_until and keeps the block. */
	kvt_striped_add(&r->leases, 1);
	return 1;
}

/*
 * ram_lookup without the shard lock, so that lookups on several threads
 * write no shared cache line: presence from shard_find_unlocked, and with
 * lease, the renewal of a lease in force (ent_lease_renew: a write only
 * when the rounded deadline moves, about once a millisecond per entry),
 * which the held list learns of lazily (ram_expire_leases). 1 or 0 as
 * ram_lookup, a lease renewed here counted in *renewed; -EAGAIN when the
 * answer needs the lock: a first lease (the entry moves to the held list
 * and counts against the cap), or slots that moved meanwhile. A renewal
 * made before such a -EAGAIN is harmless: it only lengthened a lease in
 * force.
 */
static int lookup_unlocked(struct shard *sh, kvt_key key, int lease, uint64_t deadline,
			   uint64_t *renewed)
{
	uint32_t seq = shard_read_begin(sh);
	struct ram_ent *e = NULL;
	uint32_t id = shard_find_unlocked(sh, key, &e);
	int rc = id != IDX_NONE;

	if (rc && lease &&
	    (__atomic_load_n(&e->state, __ATOMIC_ACQUIRE) != IENT_HELD ||
	     !ent_lease_renew(e, deadline)))
		return -EAGAIN;
	if (!shard_read_valid(sh, seq))
		return -EAGAIN;
	if (rc && lease)
		(*renewed)++;
	return rc;
}

/* ram_lookup of a deadline already rounded; see lookup_unlocked for
 * *renewed. */
static int lookup_one(struct ram_tier *r, kvt_key key, int lease, uint64_t deadline,
		      uint64_t *renewed)
{
	struct shard *sh = shard_of(r, key);
	int rc = lookup_unlocked(sh, key, lease, deadline, renewed);

	if (rc != -EAGAIN)
		return rc;
	pthread_mutex_lock(&sh->lock);
	uint32_t id = shard_find(sh, key);
	if (id == IDX_NONE || !lease) {
		pthread_mutex_unlock(&sh->lock);
		return id != IDX_NONE;
	}
	rc = lease_entry(r, sh, id, deadline);
	pthread_mutex_unlock(&sh->lock);
	if (rc != -ENOSPC)
		return rc;

	/* At the cap: lapsed leases may still be counted; collect, retry once. */
	ram_expire_all(r);
	pthread_mutex_lock(&sh->lock);
	id = shard_find(sh, key);
	rc = id == IDX_NONE ? 0 : lease_entry(r, sh, id, deadline);
	pthread_mutex_unlock(&sh->lock);
	if (rc == -ENOSPC)
		ctr_add(&r->lease_refusals, 1);
	return rc;
}

int ram_lookup(struct ram_tier *r, kvt_key key, int lease, uint64_t deadline_ns)
{
	uint64_t renewed = 0;
	int rc = lookup_one(r, key, lease, lease ? ram_lease_round(deadline_ns) : 0, &renewed);

	if (renewed)
		kvt_striped_add(&r->leases, renewed);
	return rc;
}

size_t ram_lookup_prefix(struct ram_tier *r, const kvt_key *keys, size_t n, int lease,
			 uint64_t deadline_ns)
{
	uint64_t deadline = lease ? ram_lease_round(deadline_ns) : 0, renewed = 0;
	size_t i;

	for (i = 0; i < n && lookup_one(r, keys[i], lease, deadline, &renewed) == 1; i++)
		;
	if (renewed)
		kvt_striped_add(&r->leases, renewed);
	return i;
}

int ram_release(struct ram_tier *r, kvt_key key)
{
	struct shard *sh = shard_of(r, key);
	int ended = 0;

	pthread_mutex_lock(&sh->lock);
	uint32_t id = shard_find(sh, key);
	if (id != IDX_NONE && ent_lease_take(shard_ent(sh, id))) {
		struct ram_ent *e = shard_ent(sh, id);
		ram_drop_lease(r, e);
		if (e->state == IENT_HELD) {
			list_remove(sh, &sh->held_head, &sh->held_tail, id);
			ent_set_state(e, IENT_LRU);
			e->stamp = next_tick(r);
			list_push_head(sh, &sh->lru_head, &sh->lru_tail, id);
			ram_note_droppable(sh, e, 0);
		}
		ended = 1;
		ctr_add(&r->releases, 1);
	}
	pthread_mutex_unlock(&sh->lock);
	return ended;
}

int ram_remove(struct ram_tier *r, kvt_key key)
{
	struct shard *sh = shard_of(r, key);

	pthread_mutex_lock(&sh->lock);
	/* Promotions of this key read from a lower tier before now are void. */
	atomic_fetch_add_explicit(gen_of(r, key), 1, memory_order_release);
	uint32_t id = shard_find(sh, key);
	if (id == IDX_NONE) {
		pthread_mutex_unlock(&sh->lock);
		return -ENOENT;
	}
	struct ram_ent *e = shard_ent(sh, id);
	int was = ent_droppable(e);
	if (ent_lease_take(e))
		ram_drop_lease(r, e);
	if (e->state == IENT_LRU)
		list_remove(sh, &sh->lru_head, &sh->lru_tail, id);
	else if (e->state == IENT_HELD)
		list_remove(sh, &sh->held_head, &sh->held_tail, id);
	ram_unlink(r, sh, id);
	ent_set_state(e, IENT_DEAD);
	ram_note_droppable(sh, e, was);
	if (e->pins == 0)
		ram_release_entry(r, sh, id);
	pthread_mutex_unlock(&sh->lock);
	return 0;
}

void *ram_arena_base(struct ram_tier *r)
{
	return r->base;
}

size_t ram_arena_size(struct ram_tier *r)
{
	return (size_t)r->capacity;
}

int ram_arena_fd(struct ram_tier *r)
{
	return arena_fd(r->arena);
}

int ram_dir_memfd(struct ram_tier *r, size_t *len)
{
	*len = r->dir ? ram_dir_len(r->dir) : 0;
	return r->dir ? ram_dir_fd(r->dir) : -1;
}

void ram_note_hits(struct ram_tier *r, const kvt_key *keys, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct shard *sh = shard_of(r, keys[i]);
		pthread_mutex_lock(&sh->lock);
		uint32_t id = shard_find(sh, keys[i]);
		if (id != IDX_NONE)
			touch(r, sh, id);
		sh->hits++;
		pthread_mutex_unlock(&sh->lock);
	}
}

void ram_stats(struct ram_tier *r, const struct stat_visitor *v)
{
	struct arena_stats as;
	uint64_t idx_bytes = 0, hits = 0, misses = 0, pinned = 0;

	ram_expire_all(r);
	for (unsigned i = 0; i < NSHARDS; i++) {
		struct shard *sh = &r->shards[i];
		pthread_mutex_lock(&sh->lock);
		idx_bytes += shard_mem_bytes(sh);
		hits += sh->hits;
		misses += sh->misses;
		pinned += sh->pinned;
		pthread_mutex_unlock(&sh->lock);
	}
	arena_get_stats(r->arena, &as);
	uint64_t objects = ctr_get(&r->objects);
	uint64_t used = ctr_get(&r->used);
	uint64_t free_bytes = as.capacity > as.used ? as.capacity - as.used : 0;

	stat_int(v, "capacity", (int64_t)r->capacity);
	stat_int(v, "bytes_used", (int64_t)used);
	stat_int(v, "objects", (int64_t)objects);
	stat_int(v, "hits", (int64_t)hits);
	stat_int(v, "misses", (int64_t)misses);
	stat_int(v, "puts", (int64_t)ctr_get(&r->puts));
	stat_int(v, "duplicate_puts", (int64_t)ctr_get(&r->dup_puts));
	stat_int(v, "refused_puts", (int64_t)ctr_get(&r->refused_puts));
	stat_int(v, "promotions_declined", (int64_t)ctr_get(&r->promotions_declined));
	stat_int(v, "evictions", (int64_t)ctr_get(&r->evictions));
	stat_int(v, "evicted_bytes", (int64_t)ctr_get(&r->evicted_bytes));
	stat_int(v, "spills", (int64_t)ctr_get(&r->spills));
	stat_int(v, "spill_failures", (int64_t)ctr_get(&r->spill_failures));
	stat_int(v, "leased_bytes", (int64_t)ctr_get(&r->leased_bytes));
	stat_int(v, "leased_objects", (int64_t)ctr_get(&r->leased_objects));
	stat_int(v, "lease_cap_bytes", (int64_t)r->lease_cap_bytes);
	stat_int(v, "leases", (int64_t)kvt_striped_get(&r->leases));
	stat_int(v, "lease_expiries", (int64_t)ctr_get(&r->lease_expiries));
	stat_int(v, "lease_refusals", (int64_t)ctr_get(&r->lease_refusals));
	stat_int(v, "lease_releases", (int64_t)ctr_get(&r->releases));
	stat_int(v, "pinned", (int64_t)pinned);
	stat_int(v, "high_watermark_bytes", (int64_t)r->high_bytes);
	stat_int(v, "low_watermark_bytes", (int64_t)r->low_bytes);
	stat_int(v, "largest_free", (int64_t)as.largest_free);
	stat_real(v, "fragmentation",
		  free_bytes ? 1.0 - (double)as.largest_free / (double)free_bytes : 0.0);
	stat_int(v, "index_bytes", (int64_t)idx_bytes);
	stat_real(v, "index_bytes_per_block",
		  objects ? (double)idx_bytes / (double)objects : 0.0);
	stat_bool(v, "hugepages", as.hugepages);
	stat_bool(v, "transparent_hugepages", !as.hugepages && as.huge_bytes > 0);
	stat_int(v, "huge_page_bytes", as.huge_bytes);
	stat_bool(v, "mlocked", as.mlocked);
	stat_int(v, "numa_node", (int64_t)as.numa_node);
	if (r->dir)
		ram_dir_stats(r->dir, v);
}
