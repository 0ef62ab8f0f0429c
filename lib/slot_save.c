/*
 * slot_save.c - the save side of the zero-copy slots: kvt_put_reserve lends
 * the engine an arena extent (a RESERVED record) to write a block into,
 * kvt_put_commit publishes it to the RAM tier as the block, kvt_put_abort
 * gives the space back. An attached store hands all three to the node
 * store (local.h). Knows nothing of pins or loads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "local.h"
#include "slot_impl.h"

/* --- save: reserve, commit, abort ---------------------------------------------- */

int slot_reserve(struct slot_table *t, kvt_slot *slots, size_t n, const uint8_t *keep)
{
	int reserved = 0, kick = 0;
	char kb[34];

	for (size_t i = 0; i < n; i++) {
		kvt_slot *sl = &slots[i];

		sl->addr = NULL;
		sl->ref = 0;
		if (sl->len == 0 || sl->len > t->max_block || sl->len > UINT32_MAX ||
		    sl->flags) {
			sl->result = kvt_fail(-EINVAL, "kvt_put_reserve: slot %zu: %s", i,
					      sl->flags ? "flags is not 0" :
					      "len is 0 or above ram.max_block");
			continue;
		}
		if (ram_lookup(t->ram, sl->key, 0, 0) == 1 ||
		    (t->disk && disk_contains(t->disk, sl->key, NULL))) {
			sl->result = KVT_SLOT_STORED;
			ctr_add(&t->reserved_stored, 1);
			continue;
		}
		pthread_mutex_lock(&t->lock);
		slot_expire(t, kvt_now_ns());
		/* -EDQUOT: the evictor would drop the block at once (RAM only) */
		int64_t off = !under_cap(t, sl->len) ? -EAGAIN :
			      ram_put_refused(t->ram, sl->len, 0) ? -EDQUOT :
			      ram_slot_alloc(t->ram, sl->len, 0);
		uint32_t id = off >= 0 ? slot_rec_new(t, sl->key, sl->len, R_RESERVED) : NIL;
		if (id != NIL) {
			t->recs[id].off = (uint64_t)off;
			sl->ref = handle_of(t, id);
			if (keep && keep[i])
				slot_rec_keep(t, id);
			else
				slot_start_timer(t);
		}
		pthread_mutex_unlock(&t->lock);
		if (off >= 0 && id == NIL) {
			ram_slot_free(t->ram, (uint64_t)off);
			sl->result = kvt_fail(-ENOMEM, "kvt_put_reserve: out of memory");
		} else if (off == -EDQUOT) {
			ctr_add(&t->reserve_refusals, 1);
			sl->result = kvt_fail(-ENOSPC, "kvt_put_reserve: no tier can take block "
					      "%s (%zu bytes): %s", kvt_key_str(sl->key, kb),
					      sl->len, RAM_DROPPED_WHY);
		} else if (off < 0) {
			kick |= off == -ENOSPC;
			ctr_add(&t->reserve_refusals, 1);
			sl->result = kvt_fail(-EAGAIN, "kvt_put_reserve: no room for block %s "
					      "(%zu bytes) without spilling to disk%s",
					      kvt_key_str(sl->key, kb), sl->len,
					      off == -EAGAIN ? ": ram.pin_cap is held in slots" : "");
		} else {
			sl->addr = t->base + off;
			sl->result = 0;
			reserved++;
			ctr_add(&t->reserves, 1);
		}
	}
	if (kick && t->kick)
		t->kick(t->kick_arg);
	return reserved;
}

KVT_API int kvt_put_reserve(kvt_store *s, kvt_slot *slots, size_t n, unsigned flags)
{
	int rc = slot_check_args(s, slots, n, "kvt_put_reserve");
	if (rc)
		return rc;
	if (flags)
		return kvt_fail(-EINVAL, "kvt_put_reserve: unknown flags 0x%x", flags);
	if (store_client(s)) /* attached: the node store reserves */
		return local_reserve(store_client(s), slots, n);
	return slot_reserve(store_slots(s), slots, n, NULL);
}

/* Takes the live reservation of slots[i] out of the table: 1 with *off and
 * *len set, or 0 (-ESTALE set in the slot). */
static int take_reservation(struct slot_table *t, kvt_slot *sl, const char *fn,
			    uint64_t *off, size_t *len)
{
	pthread_mutex_lock(&t->lock);
	uint32_t id = slot_rec_of(t, sl->ref, 1u << R_RESERVED);
	if (id != NIL) {
		*off = t->recs[id].off;
		*len = t->recs[id].len;
		slot_rec_drop(t, id); /* the extent goes to the caller */
	}
	pthread_mutex_unlock(&t->lock);
	sl->ref = 0;
	sl->addr = NULL;
	if (id == NIL) {
		char kb[34];
		ctr_add(&t->stale, 1);
		sl->result = kvt_fail(-ESTALE, "%s: the slot of %s is not a live reservation "
				      "(aborted, committed or lapsed after ram.pin_ms)", fn,
				      kvt_key_str(sl->key, kb));
		return 0;
	}
	return 1;
}

/* Has a loader write a block just published to disk (write-through) and
 * copy it to the member that owns its key, if any. The block stays
 * published if that cannot even be queued: it reaches the disk when it is
 * evicted, as under disk.write_policy "on_evict", and not its owner. */
static void queue_write(struct slot_table *t, kvt_key key)
{
	int disk = t->disk && t->write_through;
	int owner = t->peers.owner ? t->peers.owner(t->peers.arg, key) : -1;

	if (!disk && owner < 0)
		return;
	uint64_t gen = ram_gen(t->ram, key);
	pthread_mutex_lock(&t->lock);
	int rc = slot_queue_write(t, key, gen, disk, owner);
	pthread_mutex_unlock(&t->lock);
	if (rc)
		ctr_add(&t->write_through_failures, 1);
}

/* Ends the live reservations of slots[0..n): publishes them, or gives their
 * space back. Returns how many were ended. */
static int end_reservations(kvt_store *s, kvt_slot *slots, size_t n, int publish,
			    const char *fn)
{
	int rc = slot_check_args(s, slots, n, fn);
	if (rc)
		return rc;
	if (store_client(s))
		return local_end(store_client(s), slots, n, publish);

	struct slot_table *t = store_slots(s);
	int done = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t off;
		size_t len;

		if (slots[i].result != 0 || !take_reservation(t, &slots[i], fn, &off, &len))
			continue;
		if (!publish) {
			ram_slot_free(t->ram, off);
			ctr_add(&t->aborts, 1);
			done++;
			continue;
		}
		rc = ram_slot_publish(t->ram, slots[i].key, off, len, NULL);
		slots[i].result = rc < 0 ? rc : 0;
		if (rc == -ENOSPC) { /* leases or pins taken since the reservation */
			char kb[34];
			slots[i].result = kvt_fail(-ENOSPC, "%s: no tier can take block %s "
						   "(%zu bytes): %s", fn,
						   kvt_key_str(slots[i].key, kb), len,
						   RAM_DROPPED_WHY);
		}
		if (rc >= 0) {
			ctr_add(&t->commits, 1);
			done++;
		}
		if (rc == 0)
			queue_write(t, slots[i].key);
	}
	/* as a put: what took RAM past its high watermark is evicted now,
	 * not at the next put */
	if (publish && done && t->kick && ram_above_high(t->ram))
		t->kick(t->kick_arg);
	return done;
}

KVT_API int kvt_put_commit(kvt_store *s, kvt_slot *slots, size_t n)
{
	return end_reservations(s, slots, n, 1, "kvt_put_commit");
}

KVT_API int kvt_put_abort(kvt_store *s, kvt_slot *slots, size_t n)
{
	return end_reservations(s, slots, n, 0, "kvt_put_abort");
}
