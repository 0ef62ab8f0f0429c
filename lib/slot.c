/*
 * slot.c - zero-copy slots (see slot.h, kvt_put_reserve(3), kvt_get_pin(3)):
 * the slot table and its records, open, close, counters, and
 * kvt_arena_regions.
 *
 * Every slot the engine holds is a record in one table, named to the caller
 * by a handle (record index and generation, so a stale handle is refused),
 * kept on a list in the order it was made, which is also the order of
 * deadlines (every slot lives ram.pin_ms), so lapsed slots are found at the
 * head. A record is
 *   RESERVED  - an arena extent the engine writes, not yet a block
 *   PIN_RAM   - a pin on a RAM-tier block (ram_pin)
 *   LOADING   - a disk hit (or a block a peer owns) being read into a fresh
 *               extent by a loader
 *   PIN_OWN   - that extent, loaded and checked, private to the slot
 * and a load that the RAM tier admits as a promotion becomes PIN_RAM: its
 * extent is then the RAM block of its key, pinned by the slot.
 * A LOADING record has no deadline yet: the library's own read never lapses
 * (a pin never expires while its transfer runs), and its ram.pin_ms starts
 * when the load lands. One released early (unpinned) is marked and freed
 * by its loader once the read is done, so no I/O ever lands in reused space.
 * This file knows what each state holds in the RAM tier, never how a slot
 * came to be (slot_save.c, slot_pin.c) or how a load runs (slot_load.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "slot_impl.h"
#include "stats.h"

int slot_open(const struct slot_opts *o, struct ram_tier *ram,
	      struct disk_tier *disk, void (*kick)(void *arg), void *arg,
	      struct slot_table **out)
{
	struct slot_table *t = calloc(1, sizeof(*t));

	if (!t)
		return kvt_fail(-ENOMEM, "slots: out of memory");
	t->ram = ram;
	t->disk = disk;
	t->base = ram_arena_base(ram);
	t->arena_len = ram_arena_size(ram);
	t->pin_ns = (uint64_t)o->pin_ms * 1000000ull;
	t->cap_bytes = (uint64_t)((double)t->arena_len * o->pin_cap);
	t->max_block = o->max_block;
	t->promote = o->promote;
	t->write_through = o->write_through;
	t->kick = kick;
	t->kick_arg = arg;
	t->free_head = t->live_head = t->live_tail = NIL;
	/* One thread per load in flight: a read that the kernel serves by
	 * copying (a file in tmpfs or the page cache) runs on an io_uring
	 * worker of the thread that submitted it, one at a time, so loads
	 * overlap only across loader threads. */
	t->want_th = o->queue_depth / LOAD_GROUP;
	if (t->want_th < 2)
		t->want_th = 2;
	if (t->want_th > LOADERS_MAX)
		t->want_th = LOADERS_MAX;
	pthread_mutex_init(&t->lock, NULL);
	cond_init_monotonic(&t->qcond);
	*out = t;
	return 0;
}

void slot_set_peers(struct slot_table *t, const struct slot_peers *p)
{
	t->peers = *p;
}

/* --- records (table locked) ----------------------------------------------- */

/* The live record a handle names in one of the states of mask, or NIL. */
uint32_t slot_rec_of(const struct slot_table *t, uint64_t ref, unsigned mask)
{
	uint32_t id = (uint32_t)ref;

	if (id >= t->nrecs || t->recs[id].gen != (uint32_t)(ref >> 32) ||
	    !(mask & (1u << t->recs[id].state)))
		return NIL;
	return id;
}

static void live_unlink(struct slot_table *t, uint32_t id)
{
	struct slot_rec *r = &t->recs[id];

	if (!r->linked)
		return;
	if (r->prev != NIL)
		t->recs[r->prev].next = r->next;
	else
		t->live_head = r->next;
	if (r->next != NIL)
		t->recs[r->next].prev = r->prev;
	else
		t->live_tail = r->prev;
	r->linked = 0;
}

/* Starts a record's ram.pin_ms: its deadline is now + pin_ms, at the tail
 * of the live list (every deadline before it is earlier or the same). */
void slot_rec_arm(struct slot_table *t, uint32_t id)
{
	struct slot_rec *r = &t->recs[id];

	r->deadline = kvt_now_ns() + t->pin_ns;
	r->prev = t->live_tail;
	r->next = NIL;
	if (t->live_tail != NIL)
		t->recs[t->live_tail].next = id;
	else
		t->live_head = id;
	t->live_tail = id;
	r->linked = 1;
}

/* A new record for len bytes of key; NIL when the table cannot grow. It is
 * held until now + pin_ms, except a LOADING one: a pin never lapses while
 * the library's own read into it runs, so its ram.pin_ms starts when the
 * load lands (slot_rec_arm from the loader). */
uint32_t slot_rec_new(struct slot_table *t, kvt_key key, size_t len, int state)
{
	if (t->free_head == NIL) {
		uint32_t n = t->nrecs ? t->nrecs * 2 : 64;
		if (n < t->nrecs || n > NIL - 1)
			return NIL;
		struct slot_rec *g = realloc(t->recs, (size_t)n * sizeof(*g));
		if (!g)
			return NIL;
		memset(g + t->nrecs, 0, (size_t)(n - t->nrecs) * sizeof(*g));
		for (uint32_t i = n; i-- > t->nrecs;) {
			g[i].gen = 1;
			g[i].next = t->free_head;
			t->free_head = i;
		}
		t->recs = g;
		t->nrecs = n;
	}
	uint32_t id = t->free_head;
	struct slot_rec *r = &t->recs[id];
	uint32_t gen = r->gen;

	t->free_head = r->next;
	memset(r, 0, sizeof(*r));
	r->gen = gen;
	r->key = key;
	r->len = (uint32_t)len;
	r->state = (uint8_t)state;
	r->next = r->prev = NIL;
	if (state == R_LOADING)
		t->loading++;
	else
		slot_rec_arm(t, id);
	t->held_bytes += len;
	return id;
}

void slot_rec_keep(struct slot_table *t, uint32_t id)
{
	live_unlink(t, id);
	t->recs[id].kept = 1;
	if (t->recs[id].state != R_LOADING) /* counted as loading until it lands */
		t->nkept++;
}

/* Frees a record whose resources are given back or handed on. */
void slot_rec_drop(struct slot_table *t, uint32_t id)
{
	struct slot_rec *r = &t->recs[id];

	live_unlink(t, id);
	if (r->state == R_LOADING) {
		if (!r->released) /* one released was no longer counted */
			t->loading--;
	} else if (r->kept)
		t->nkept--;
	r->kept = 0;
	if (r->pb)
		pin_rec_untie(r);
	t->held_bytes -= r->len;
	r->state = R_FREE;
	r->gen = r->gen + 1 ? r->gen + 1 : 1;
	r->next = t->free_head;
	t->free_head = id;
}

/* Gives back what a record holds (for a LOADING one, only once its load has
 * finished) and frees it. */
void slot_rec_free(struct slot_table *t, uint32_t id)
{
	struct slot_rec *r = &t->recs[id];

	if (r->state == R_PIN_RAM)
		ram_unpin(t->ram, r->ram_ref);
	else if (r->state == R_RESERVED || r->state == R_PIN_OWN ||
		 (r->state == R_LOADING && r->has_off))
		ram_slot_free(t->ram, r->off);
	slot_rec_drop(t, id);
}

/* Releases a record: at once, or, while its load runs, when it is done. */
void slot_rec_release(struct slot_table *t, uint32_t id)
{
	if (t->recs[id].state == R_LOADING) {
		t->recs[id].released = 1;
		t->loading--; /* not held from now on, though its extent is */
		live_unlink(t, id);
	} else {
		slot_rec_free(t, id);
	}
}

/* Lapses the slots whose deadline has passed. */
void slot_expire(struct slot_table *t, uint64_t now)
{
	while (t->live_head != NIL && t->recs[t->live_head].deadline <= now) {
		ctr_add(&t->lapses, 1);
		slot_rec_release(t, t->live_head);
	}
}

/* --- argument checks ---------------------------------------------------------- */

int slot_check_args(kvt_store *s, const kvt_slot *slots, size_t n, const char *fn)
{
	if (!s)
		return kvt_fail(-EINVAL, "%s: store is NULL", fn);
	if (!slots && n)
		return kvt_fail(-EINVAL, "%s: slots is NULL but n is %zu", fn, n);
	if (n > INT32_MAX)
		return kvt_fail(-EINVAL, "%s: n %zu is too large", fn, n);
	return 0;
}

/* --- arena regions, teardown, counters ------------------------------------------ */

KVT_API int kvt_arena_regions(kvt_store *s, kvt_region *regions, size_t max)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_arena_regions: store is NULL");
	if (!regions && max)
		return kvt_fail(-EINVAL, "kvt_arena_regions: regions is NULL but max is %zu", max);

	void *vbase;
	size_t alen;
	kvt_arena(s, &vbase, &alen); /* this process's mapping, attached or not */
	char *base = vbase;
	size_t n = (alen + REGION_MAX - 1) / REGION_MAX;

	for (size_t i = 0; i < n && i < max; i++) {
		size_t off = i * REGION_MAX;
		regions[i].base = base + off;
		regions[i].len = alen - off < REGION_MAX ? alen - off : REGION_MAX;
	}
	return (int)n;
}

void slot_close(struct slot_table *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = 1;
	pthread_cond_broadcast(&t->qcond);
	pthread_mutex_unlock(&t->lock);
	for (unsigned i = 0; i < t->nth; i++)
		pthread_join(t->th[i], NULL);
	/* No load runs now: every record still held is given back. */
	for (uint32_t id = 0; id < t->nrecs; id++)
		if (t->recs[id].state != R_FREE)
			slot_rec_free(t, id);
	free(t->recs);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->qcond);
	free(t);
}

void slot_stats(struct slot_table *t, const struct stat_visitor *v)
{
	uint64_t held, live;

	pthread_mutex_lock(&t->lock);
	slot_expire(t, kvt_now_ns());
	held = t->held_bytes;
	live = t->nkept;
	for (uint32_t id = t->live_head; id != NIL; id = t->recs[id].next)
		live++;
	live += t->loading;
	pthread_mutex_unlock(&t->lock);
	stat_int(v, "held", (int64_t)live);
	stat_int(v, "held_bytes", (int64_t)held);
	stat_int(v, "cap_bytes", (int64_t)t->cap_bytes);
	stat_int(v, "reserves", (int64_t)ctr_get(&t->reserves));
	stat_int(v, "reserved_stored", (int64_t)ctr_get(&t->reserved_stored));
	stat_int(v, "reserve_refusals", (int64_t)ctr_get(&t->reserve_refusals));
	stat_int(v, "commits", (int64_t)ctr_get(&t->commits));
	stat_int(v, "aborts", (int64_t)ctr_get(&t->aborts));
	stat_int(v, "pins_ram", (int64_t)ctr_get(&t->pins_ram));
	stat_int(v, "loads", (int64_t)ctr_get(&t->loads));
	stat_int(v, "load_failures", (int64_t)ctr_get(&t->load_failures));
	stat_int(v, "loads_promoted", (int64_t)ctr_get(&t->loads_promoted));
	stat_int(v, "write_throughs", (int64_t)ctr_get(&t->write_throughs));
	stat_int(v, "write_through_failures", (int64_t)ctr_get(&t->write_through_failures));
	stat_int(v, "unpins", (int64_t)ctr_get(&t->unpins));
	stat_int(v, "lapses", (int64_t)ctr_get(&t->lapses));
	stat_int(v, "stale", (int64_t)ctr_get(&t->stale));
}
