/*
 * slot_load.c - the loader threads of the zero-copy slots: they take disk
 * loads in groups of LOAD_GROUP (one submission each, as many in flight as
 * there are loaders: disk.queue_depth / LOAD_GROUP), read each group's
 * blocks from the disk tier into fresh arena extents, turn the records into
 * PIN_OWN (or free them when the load failed or was released meanwhile),
 * and report the loads to their pin batch, so the engine starts copying a
 * block as soon as it has landed. They also write committed blocks to disk
 * when the disk tier writes through, and copy them to the members that own
 * their keys (kvt_put_commit never waits for either).
 * The first loader also lapses slots whose deadline has passed, waking for
 * that while idle. Knows nothing of
 * reservations or of the public calls' arguments.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "slot_impl.h"

/* Reports the loads of a job, all finished: under the batch's lock. */
static void report(struct slot_table *t, const struct slot_job *j,
		   const int *res, const uint64_t *off, const size_t *len)
{
	struct kvt_pin_batch *b = j->b;

	pthread_mutex_lock(&b->lock);
	for (uint32_t k = 0; k < j->n; k++) {
		struct pin_done *d = &b->res[j->idx[k]];
		d->result = res[k];
		d->len = res[k] == 0 ? len[k] : 0; /* a failed load holds nothing */
		d->addr = res[k] == 0 ? t->base + off[k] : NULL;
		b->done[b->ndone++] = j->idx[k];
	}
	if (b->efd >= 0) {
		uint64_t v = j->n;
		ssize_t w = write(b->efd, &v, sizeof(v));
		(void)w; /* an eventfd counter far below its maximum cannot fail */
	}
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	/* b may be freed from here on. */
}

/*
 * A fresh extent for a load. When every block in RAM is pinned, the
 * engine's unpins (queued behind its copies) free space soon: wait for them
 * up to LOAD_WAIT_MS before failing the load with -ENOSPC.
 */
static int64_t load_extent(struct slot_table *t, size_t len)
{
	int64_t o;

	for (int ms = 0; (o = ram_slot_alloc(t->ram, len, 1)) == -ENOSPC &&
			 ms < LOAD_WAIT_MS; ms++) {
		struct timespec ts = { 0, 1000000L };
		nanosleep(&ts, NULL);
	}
	return o;
}

/*
 * A verified load (its checksum sum) whose key the RAM tier admits
 * (disk.promote) becomes its RAM block in place, pinned by the slot
 * (PIN_RAM), without a copy: later lookups and gets hit RAM. Otherwise it
 * stays private (PIN_OWN). Table locked.
 */
static void promote(struct slot_table *t, struct slot_rec *r, uint64_t sum)
{
	uint64_t ref;

	if (t->promote &&
	    ram_slot_promote(t->ram, r->key, r->off, r->len, r->ram_gen, &sum, &ref) == 0) {
		r->state = R_PIN_RAM;
		r->ram_ref = ref;
		ctr_add(&t->loads_promoted, 1);
	}
}

/*
 * Reads key's block from the member that owns it into the extent at *off
 * (*len = ram.max_block bytes); once it is there, moves it into an extent
 * of its own size when that is smaller (the large one is given back).
 * Returns 0 with *off, *len and *sum (the checksum it was verified
 * against) set, or the read's -errno.
 */
static int peer_load(struct slot_table *t, kvt_key key, int owner, uint64_t *off,
		     size_t *len, uint64_t *sum)
{
	size_t got = 0;
	int rc = t->peers.read(t->peers.arg, owner, key, t->base + *off, *len, &got, sum);

	if (rc)
		return rc;
	if ((got + 4095) / 4096 < (*len + 4095) / 4096) {
		int64_t o = ram_slot_alloc(t->ram, got, 1);
		if (o >= 0) {
			memcpy(t->base + o, t->base + *off, got);
			ram_slot_free(t->ram, *off);
			*off = (uint64_t)o;
		}
	}
	*len = got;
	return 0;
}

/* Reads a job's blocks from disk (or their owners) into fresh extents and
 * reports them. */
static void run_job(struct slot_table *t, struct slot_job *j)
{
	kvt_op ops[LOAD_GROUP];
	uint64_t off[LOAD_GROUP], sum[LOAD_GROUP], dsum[LOAD_GROUP];
	size_t len[LOAD_GROUP];
	int res[LOAD_GROUP], io[LOAD_GROUP] = { 0 }, has[LOAD_GROUP] = { 0 };
	uint32_t nio = 0;

	for (uint32_t k = 0; k < j->n; k++) {
		pthread_mutex_lock(&t->lock);
		struct slot_rec *r = &t->recs[j->rec[k]];
		len[k] = r->len;
		kvt_key key = r->key;
		int skip = r->released, owner = r->owner;
		pthread_mutex_unlock(&t->lock);

		/* May evict and spill: a loader can wait, unlike a reservation. */
		int64_t o = skip ? -ECANCELED : load_extent(t, len[k]);
		res[k] = o < 0 ? (int)o : 0;
		off[k] = o < 0 ? 0 : (uint64_t)o;
		has[k] = o >= 0;
		if (o >= 0 && owner >= 0) {
			res[k] = peer_load(t, key, owner, &off[k], &len[k], &sum[k]);
		} else if (o >= 0) {
			/* The extent's whole 4 KiB units: a payload whose length is
			 * not a multiple of them still lands in place, not staged. */
			size_t cap = (len[k] + 4095) & ~(size_t)4095;
			ops[nio] = (kvt_op){ key, t->base + o, cap, 0 };
			io[nio++] = (int)k;
		}
	}
	if (nio)
		disk_get_batch_sums(t->disk, ops, nio, dsum);
	for (uint32_t m = 0; m < nio; m++) {
		res[io[m]] = ops[m].result;
		sum[io[m]] = dsum[m];
	}

	/* Into the table before the caller hears of them, so that an unpin
	 * right after the reap finds them pinned; failed or released loads
	 * give their extent and record back (an unpin of them, which reads
	 * only the handle, then finds nothing). */
	pthread_mutex_lock(&t->lock);
	for (uint32_t k = 0; k < j->n; k++) {
		struct slot_rec *r = &t->recs[j->rec[k]];
		r->has_off = (uint8_t)has[k];
		r->off = off[k];
		if (res[k] == 0 && len[k] < r->len) { /* a peer's block: its own size */
			t->held_bytes -= r->len - len[k];
			r->len = (uint32_t)len[k];
		}
		if (r->released)
			res[k] = -ECANCELED;
		ctr_add(res[k] == 0 ? &t->loads : &t->load_failures, 1);
		if (res[k] == 0) {
			/* Landed: the pin's ram.pin_ms starts now, unless it
			 * is kept (it never lapses) */
			t->loading--;
			r->state = R_PIN_OWN;
			if (r->kept)
				t->nkept++;
			else
				slot_rec_arm(t, j->rec[k]);
			pin_rec_tie(t, j->rec[k], j->b, j->idx[k]);
			promote(t, r, sum[k]);
		} else {
			slot_rec_free(t, j->rec[k]);
		}
	}
	pthread_mutex_unlock(&t->lock);

	report(t, j, res, off, len);
	free(j);
}

/*
 * What follows a commit, from the block's RAM copy, pinned meanwhile: its
 * write to disk (disk.write_policy "write_through") and its copy to the
 * member that owns its key, as kvt_put does both. A removal of the key
 * since the commit wins over the disk write: the block is not written, or
 * is removed from the disk again once written (kvt_remove changes the RAM
 * generation before it removes the disk's copy, so a removal that this
 * check misses comes after the write and removes it itself).
 */
static void run_write(struct slot_table *t, struct slot_job *j)
{
	uint64_t ref, off;
	size_t len;
	int rc = ram_pin(t->ram, j->wkey, SIZE_MAX, &ref, &off, &len);

	if (rc == 0) {
		if (j->wowner >= 0)
			t->peers.put(t->peers.arg, j->wkey, t->base + off, len);
		if (j->wdisk) /* a removal since the commit: nothing to write */
			rc = ram_gen(t->ram, j->wkey) == j->wgen ?
			     disk_put(t->disk, j->wkey, t->base + off, len) : -ENOENT;
		ram_unpin(t->ram, ref);
		if (j->wdisk && rc == 0 && ram_gen(t->ram, j->wkey) != j->wgen)
			disk_remove(t->disk, j->wkey);
	}
	/* (The copy to the owner is counted by the store.) */
	if (j->wdisk && rc == 0) {
		ctr_add(&t->write_throughs, 1);
	} else if (j->wdisk && rc != -ENOENT) {
		char kb[34];
		ctr_add(&t->write_through_failures, 1);
		kvt_log(KVT_LOG_WARN, "write-through of committed block %s to disk failed: %s",
			kvt_key_str(j->wkey, kb), kvt_strerror(rc));
	}
	free(j);
}

struct loader_arg {
	struct slot_table *t;
	int timer;        /* this loader also lapses forgotten slots */
};

static void *loader_main(void *arg)
{
	struct slot_table *t = ((struct loader_arg *)arg)->t;
	int timer = ((struct loader_arg *)arg)->timer;

	free(arg);
	pthread_mutex_lock(&t->lock);
	for (;;) {
		slot_expire(t, kvt_now_ns());
		struct slot_job *j = t->qhead;
		if (!j) {
			if (t->stop)
				break;
			if (!timer) {
				pthread_cond_wait(&t->qcond, &t->lock);
				continue;
			}
			/* Wake at the next deadline (at least every 100 ms), so
			 * forgotten slots lapse even when nobody calls. */
			uint64_t now = kvt_now_ns(), wake = now + 100000000ull;
			if (t->live_head != NIL && t->recs[t->live_head].deadline < wake)
				wake = t->recs[t->live_head].deadline;
			struct timespec ts = ts_of_ns(wake);
			pthread_cond_timedwait(&t->qcond, &t->lock, &ts);
			continue;
		}
		t->qhead = j->next;
		if (!t->qhead)
			t->qtail = NULL;
		pthread_mutex_unlock(&t->lock);
		if (j->b)
			run_job(t, j);
		else
			run_write(t, j);
		pthread_mutex_lock(&t->lock);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

/* Starts loader threads until want of them run (the first also lapses
 * forgotten slots). Table locked. */
static int start_loaders_upto(struct slot_table *t, unsigned want)
{
	while (t->nth < want) {
		struct loader_arg *a = malloc(sizeof(*a));
		if (a) {
			a->t = t;
			a->timer = t->nth == 0;
		}
		if (!a || pthread_create(&t->th[t->nth], NULL, loader_main, a)) {
			free(a);
			return t->nth ? 0 : kvt_fail(-ENOMEM, "kvt_get_pin: cannot start a loader thread");
		}
		t->nth++;
	}
	return 0;
}

int slot_start_loaders(struct slot_table *t)
{
	return start_loaders_upto(t, t->want_th);
}

/* The first loader alone, whose timer lapses forgotten slots: started with
 * the first pin or reservation, so that a store without loads (its pins all
 * RAM hits) still lapses them without a call from anyone. Failing to start
 * it leaves lapses to the calls that sweep. Table locked. */
void slot_start_timer(struct slot_table *t)
{
	if (!t->nth && start_loaders_upto(t, 1))
		kvt_log(KVT_LOG_WARN, "slots: no thread to lapse forgotten slots: "
			"they lapse at the next reservation, pin or statistics call");
}

int slot_queue_write(struct slot_table *t, kvt_key key, uint64_t gen, int disk, int owner)
{
	struct slot_job *j = calloc(1, sizeof(*j));
	int rc = j ? slot_start_loaders(t) : -ENOMEM;

	if (rc) {
		free(j);
		return rc;
	}
	j->wkey = key;
	j->wgen = gen;
	j->wdisk = disk;
	j->wowner = owner;
	if (t->qtail)
		t->qtail->next = j;
	else
		t->qhead = j;
	t->qtail = j;
	pthread_cond_signal(&t->qcond);
	return 0;
}

/* Queues the loads of b (slot indexes load[0..n), records rec[]) in jobs of
 * LOAD_GROUP. Table locked. Returns 0 or -ENOMEM (nothing queued). */
int slot_queue_loads(struct slot_table *t, struct kvt_pin_batch *b,
		     const size_t *load, const uint32_t *rec, size_t n)
{
	struct slot_job *head = NULL, **tail = &head;

	for (size_t i = 0; i < n; i += LOAD_GROUP) {
		struct slot_job *j = calloc(1, sizeof(*j));
		if (!j) {
			while (head) {
				struct slot_job *x = head->next;
				free(head);
				head = x;
			}
			return -ENOMEM;
		}
		j->b = b;
		for (size_t k = i; k < n && k < i + LOAD_GROUP; k++) {
			j->idx[j->n] = load[k];
			j->rec[j->n++] = rec[k];
		}
		*tail = j;
		tail = &j->next;
	}
	if (!head)
		return 0;
	if (t->qtail)
		t->qtail->next = head;
	else
		t->qhead = head;
	struct slot_job *last = head;
	while (last->next)
		last = last->next;
	t->qtail = last;
	pthread_cond_broadcast(&t->qcond);
	return 0;
}
