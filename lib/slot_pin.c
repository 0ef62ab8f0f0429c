/*
 * slot_pin.c - the restore side of the zero-copy slots: kvt_get_pin pins
 * blocks where they lie in RAM (PIN_RAM records) and makes LOADING records
 * for disk hits and blocks a peer owns, which it queues to the loaders
 * (slot_load.c); pin batches
 * report finished loads (kvt_pin_reap, kvt_pin_fd, kvt_pin_free); kvt_unpin
 * ends pins. The caller's slots are written only by the calls themselves
 * and, for loads, under the batch's lock before the load is reported;
 * kvt_unpin only reads them. An attached store hands pins and unpins to the
 * node store (local.h). Knows nothing of reservations, nor of how a load
 * reads the disk.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "local.h"
#include "slot_impl.h"

/* --- restore: pin, loads, unpin ---------------------------------------------------- */

static void batch_destroy(struct kvt_pin_batch *b)
{
	if (b->efd >= 0)
		close(b->efd);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	free(b->done);
	free(b->res);
	free(b);
}

/* Drops a hold on b (b->lock held on entry, released on return); the last
 * one frees it. */
static void batch_put_locked(struct kvt_pin_batch *b)
{
	unsigned left = --b->refs;

	pthread_mutex_unlock(&b->lock);
	if (!left)
		batch_destroy(b);
}

/*
 * A landed load stays tied to its batch until its record is freed: an
 * unpin, a lapse or kvt_close that frees it before kvt_pin_reap reported
 * the load marks it cancelled there, and the reap says -ECANCELED (the
 * space may hold another block by then). The record holds the batch, so
 * kvt_pin_free before the unpin leaves the batch to the record's free.
 * Lock order: the table's lock, then the batch's.
 */
void pin_rec_tie(struct slot_table *t, uint32_t id, struct kvt_pin_batch *b, size_t i)
{
	struct slot_rec *r = &t->recs[id];

	pthread_mutex_lock(&b->lock);
	b->refs++;
	pthread_mutex_unlock(&b->lock);
	r->pb = b;
	r->pbi = i;
}

void pin_rec_untie(struct slot_rec *r)
{
	struct kvt_pin_batch *b = r->pb;

	r->pb = NULL;
	pthread_mutex_lock(&b->lock);
	b->res[r->pbi].cancelled = 1;
	batch_put_locked(b);
}

/* Pins slots[i] if the block is in RAM (0), or makes a LOADING record for a
 * disk hit or a block a peer owns (-EINPROGRESS), or fails. Table locked. */
static int pin_one(struct slot_table *t, kvt_slot *sl, uint32_t *rec)
{
	uint64_t ref, off;
	size_t len;
	uint32_t id;
	int rc = ram_pin(t->ram, sl->key, SIZE_MAX, &ref, &off, &len);

	if (rc == 0) {
		if (!under_cap(t, len)) {
			ram_unpin(t->ram, ref);
			return -EAGAIN;
		}
		id = slot_rec_new(t, sl->key, len, R_PIN_RAM);
		if (id == NIL) {
			ram_unpin(t->ram, ref);
			return -ENOMEM;
		}
		t->recs[id].ram_ref = ref;
		t->recs[id].off = off;
		sl->addr = t->base + off;
		sl->len = len;
		sl->ref = handle_of(t, id);
		ctr_add(&t->pins_ram, 1);
		return 0;
	}
	if (rc != -ENOENT)
		return rc;
	/* The generation first: a removal after it voids the promotion. */
	uint64_t gen = ram_gen(t->ram, sl->key);
	int owner = -1;
	if (!t->disk || !disk_contains(t->disk, sl->key, &len)) {
		/* Owned by a peer: its size is known once it is read, so the
		 * slot is ram.max_block until then. */
		if (t->peers.owner)
			owner = t->peers.owner(t->peers.arg, sl->key);
		if (owner < 0)
			return -ENOENT;
		len = t->max_block;
	}
	if (!under_cap(t, len))
		return -EAGAIN;
	id = slot_rec_new(t, sl->key, len, R_LOADING);
	if (id == NIL)
		return -ENOMEM;
	t->recs[id].ram_gen = gen;
	t->recs[id].owner = owner;
	sl->len = owner < 0 ? len : 0;
	sl->ref = handle_of(t, id);
	*rec = id;
	return -EINPROGRESS;
}

int slot_get_pin(kvt_store *s, kvt_slot *slots, size_t n, int keep, kvt_pin_batch **out)
{
	int rc;
	struct slot_table *t = store_slots(s);
	struct kvt_pin_batch *b = calloc(1, sizeof(*b));
	size_t *load = malloc((n ? n : 1) * sizeof(*load));
	uint32_t *rec = malloc((n ? n : 1) * sizeof(*rec));
	if (b) {
		b->done = malloc((n ? n : 1) * sizeof(*b->done));
		b->res = calloc(n ? n : 1, sizeof(*b->res));
	}
	if (!b || !load || !rec || !b->done || !b->res) {
		if (b) {
			free(b->done);
			free(b->res);
		}
		free(b);
		free(load);
		free(rec);
		return kvt_fail(-ENOMEM, "kvt_get_pin: out of memory");
	}
	b->slots = slots;
	b->efd = -1;
	b->refs = 1;
	pthread_mutex_init(&b->lock, NULL);
	cond_init_monotonic(&b->cond);
	if (store_client(s)) {
		/* Attached: the node store loads disk hits before it answers,
		 * so every slot is ready at return and the batch has no loads. */
		free(load);
		free(rec);
		rc = local_pin(store_client(s), slots, n);
		if (rc < 0) {
			batch_destroy(b);
			return rc;
		}
		*out = b;
		return rc;
	}

	size_t nload = 0;
	int pinned = 0;
	char kb[34];

	pthread_mutex_lock(&t->lock);
	slot_expire(t, kvt_now_ns());
	for (size_t i = 0; i < n; i++) {
		kvt_slot *sl = &slots[i];
		sl->ref = 0;
		sl->addr = NULL;
		if (sl->flags) {
			sl->result = -EINVAL;
			continue;
		}
		sl->result = pin_one(t, sl, &rec[nload]);
		if (sl->result == -EINPROGRESS)
			load[nload++] = i;
		if (sl->result == 0 || sl->result == -EINPROGRESS) {
			pinned++;
			if (keep)
				slot_rec_keep(t, (uint32_t)sl->ref);
		}
		else if (sl->result == -EAGAIN)
			kvt_set_error("kvt_get_pin: slot %zu (%s): ram.pin_cap is held in slots",
				      i, kvt_key_str(sl->key, kb));
	}
	if (pinned)
		slot_start_timer(t);
	rc = nload ? slot_start_loaders(t) : 0;
	if (!rc)
		rc = slot_queue_loads(t, b, load, rec, nload);
	if (rc) {
		for (size_t k = 0; k < nload; k++) {
			slots[load[k]].result = rc;
			slots[load[k]].ref = 0;
			slots[load[k]].addr = NULL;
			slot_rec_free(t, rec[k]);
		}
		pinned -= (int)nload;
		nload = 0;
	}
	b->nloads = nload;
	pthread_mutex_unlock(&t->lock);
	free(load);
	free(rec);
	*out = b;
	return pinned;
}

KVT_API int kvt_get_pin(kvt_store *s, kvt_slot *slots, size_t n, unsigned flags,
			kvt_pin_batch **out)
{
	int rc = slot_check_args(s, slots, n, "kvt_get_pin");
	if (rc)
		return rc;
	if (!out)
		return kvt_fail(-EINVAL, "kvt_get_pin: out is NULL");
	if (flags)
		return kvt_fail(-EINVAL, "kvt_get_pin: unknown flags 0x%x", flags);
	return slot_get_pin(s, slots, n, 0, out);
}

KVT_API int kvt_pin_reap(kvt_pin_batch *b, size_t *idx, size_t max, int timeout_ms)
{
	if (!b)
		return kvt_fail(-EINVAL, "kvt_pin_reap: batch is NULL");
	if (!idx || !max)
		return kvt_fail(-EINVAL, "kvt_pin_reap: idx is NULL or max is 0");

	int rc = 0;
	struct timespec ts = ts_of_ns(kvt_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull);

	pthread_mutex_lock(&b->lock);
	while (b->nreaped == b->ndone && b->ndone < b->nloads) {
		if (timeout_ms == 0) {
			rc = ETIMEDOUT;
			break;
		}
		rc = timeout_ms < 0 ? pthread_cond_wait(&b->cond, &b->lock)
				    : pthread_cond_timedwait(&b->cond, &b->lock, &ts);
		if (rc == ETIMEDOUT && b->nreaped == b->ndone)
			break;
		rc = 0;
	}
	size_t k = 0;
	if (b->nreaped < b->ndone) {
		for (; k < max && b->nreaped < b->ndone; k++) {
			size_t i = b->done[b->nreaped++];
			idx[k] = i;
			if (b->res[i].cancelled && b->res[i].result == 0) {
				/* freed before this reap: its space is not the
				 * caller's any more */
				b->res[i].result = -ECANCELED;
				b->res[i].len = 0;
				b->res[i].addr = NULL;
			}
			b->slots[i].result = b->res[i].result;
			b->slots[i].len = b->res[i].len;
			b->slots[i].addr = b->res[i].addr;
		}
		rc = 0;
	}
	pthread_mutex_unlock(&b->lock);
	if (rc)
		return kvt_fail(-ETIMEDOUT, "kvt_pin_reap: no load finished within %d ms",
				timeout_ms);
	return (int)(k > INT32_MAX ? INT32_MAX : k);
}

KVT_API int kvt_pin_fd(kvt_pin_batch *b)
{
	if (!b)
		return kvt_fail(-EINVAL, "kvt_pin_fd: batch is NULL");
	pthread_mutex_lock(&b->lock);
	int fd = kvt_eventfd_lazy(&b->efd, (uint64_t)b->ndone);
	pthread_mutex_unlock(&b->lock);
	if (fd < 0)
		return kvt_fail(fd, "kvt_pin_fd: eventfd: %s", kvt_strerror(fd));
	return fd;
}

KVT_API void kvt_pin_free(kvt_pin_batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	while (b->ndone < b->nloads)
		pthread_cond_wait(&b->cond, &b->lock);
	batch_put_locked(b);
}

KVT_API int kvt_unpin(kvt_store *s, const kvt_slot *slots, size_t n)
{
	int rc = slot_check_args(s, slots, n, "kvt_unpin");
	if (rc)
		return rc;
	if (store_client(s))
		return local_unpin(store_client(s), slots, n);

	struct slot_table *t = store_slots(s);
	int done = 0;
	unsigned pins = 1u << R_PIN_RAM | 1u << R_PIN_OWN | 1u << R_LOADING;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < n; i++) {
		uint64_t ref = slots[i].ref;
		if (!ref)
			continue;
		uint32_t id = slot_rec_of(t, ref, pins);
		if (id == NIL || t->recs[id].released) {
			ctr_add(&t->stale, 1);
			continue;
		}
		slot_rec_release(t, id);
		done++;
	}
	pthread_mutex_unlock(&t->lock);
	ctr_add(&t->unpins, (uint64_t)done);
	if (done < (int)n)
		kvt_set_error("kvt_unpin: %zu of the %zu slots were not live pins "
			      "(ref 0, unpinned before, or lapsed after ram.pin_ms)",
			      n - (size_t)done, n);
	return done;
}
