/*
 * slot.c - zero-copy slots (see slot.h, kvt_put_reserve(3), kvt_get_pin(3)).
 *
 * Every slot the engine holds is a record in one table, named to the caller
 * by a handle (record index and generation, so a stale handle is refused),
 * kept on a list in the order it was made, which is also the order of
 * deadlines (every slot lives ram.pin_ms), so lapsed slots are found at the
 * head. A record is
 *   RESERVED  - an arena extent the engine writes, not yet a block
 *   PIN_RAM   - a pin on a RAM-tier block (ram_pin)
 *   LOADING   - a disk hit being read into a fresh extent by a loader
 *   PIN_OWN   - that extent, loaded and checked, private to the slot
 * A LOADING record released early (unpinned or lapsed) is marked and freed
 * by its loader once the read is done, so no I/O ever lands in reused space.
 *
 * Loader threads take disk loads in groups of LOAD_GROUP (one submission
 * each, several groups in flight), so each group completes on its own and
 * the engine starts copying a block as soon as its group has landed.
 * Lock order: table lock, then the RAM tier's locks; a pin batch's lock is
 * never held with the table lock. The caller's slots are written only by
 * the calls themselves and, for loads, under the batch's lock before the
 * load is reported; kvt_unpin only reads them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "local.h"
#include "slot.h"
#include "stats.h"

#define LOAD_GROUP 4u         /* disk loads per submission */
#define LOADERS_MAX 8u        /* loader threads */
#define LOAD_WAIT_MS 500      /* a load waits this long for arena space */
#define REGION_MAX (1ull << 30)
#define NIL UINT32_MAX

enum rec_state { R_FREE = 0, R_RESERVED, R_PIN_RAM, R_LOADING, R_PIN_OWN };

struct slot_rec {
	kvt_key key;
	uint64_t off;         /* arena offset (RESERVED, PIN_OWN, LOADING once allocated) */
	uint64_t ram_ref;     /* PIN_RAM */
	uint64_t deadline;    /* CLOCK_MONOTONIC ns */
	uint32_t len;
	uint32_t gen;         /* bumped at every free: stale handles do not match */
	uint32_t prev, next;  /* live list (made order), or free list through next */
	uint8_t state;
	uint8_t released;     /* LOADING: unpinned or lapsed; freed by its loader */
	uint8_t linked;       /* on the live list */
	uint8_t has_off;      /* LOADING: off is allocated */
};

/* Up to LOAD_GROUP disk loads of one pin batch. */
struct slot_job {
	struct kvt_pin_batch *b;
	struct slot_job *next;
	uint32_t n;
	uint32_t rec[LOAD_GROUP];
	size_t idx[LOAD_GROUP];   /* the slots' indexes in b->slots */
};

struct kvt_pin_batch {
	kvt_slot *slots;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t *done;             /* finished loads, in finishing order */
	size_t nloads, ndone, nreaped;
	int efd;
};

struct slot_table {
	struct ram_tier *ram;
	struct disk_tier *disk;
	char *base;
	size_t arena_len;
	uint64_t pin_ns, cap_bytes, max_block;
	void (*kick)(void *arg);
	void *kick_arg;

	pthread_mutex_t lock;
	struct slot_rec *recs;
	uint32_t nrecs, free_head, live_head, live_tail;
	uint64_t held_bytes;

	/* loaders (under lock) */
	pthread_cond_t qcond;
	struct slot_job *qhead, *qtail;
	int stop;
	pthread_t th[LOADERS_MAX];
	unsigned nth, want_th;

	_Atomic uint64_t reserves, reserved_stored, reserve_refusals, commits, aborts;
	_Atomic uint64_t pins_ram, loads, load_failures, unpins, lapses, stale;
};

static void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

static struct timespec ts_of_ns(uint64_t ns)
{
	return (struct timespec){ .tv_sec = (time_t)(ns / 1000000000ull),
				  .tv_nsec = (long)(ns % 1000000000ull) };
}

int slot_open(const struct kvt_config *cfg, struct ram_tier *ram,
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
	t->pin_ns = (uint64_t)cfg->pin_ms * 1000000ull;
	t->cap_bytes = (uint64_t)((double)t->arena_len * cfg->pin_cap);
	t->max_block = cfg->max_block;
	t->kick = kick;
	t->kick_arg = arg;
	t->free_head = t->live_head = t->live_tail = NIL;
	t->want_th = cfg->queue_depth / LOAD_GROUP;
	if (t->want_th < 2)
		t->want_th = 2;
	if (t->want_th > LOADERS_MAX)
		t->want_th = LOADERS_MAX;
	pthread_mutex_init(&t->lock, NULL);
	cond_init_monotonic(&t->qcond);
	*out = t;
	return 0;
}

/* --- records (table locked) ----------------------------------------------- */

static uint64_t handle_of(const struct slot_table *t, uint32_t id)
{
	return (uint64_t)t->recs[id].gen << 32 | id;
}

/* The live record a handle names in one of the states of mask, or NIL. */
static uint32_t rec_of(const struct slot_table *t, uint64_t ref, unsigned mask)
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

/* A new record for len bytes of key, held until now + pin_ms; NIL when the
 * table cannot grow. */
static uint32_t rec_new(struct slot_table *t, kvt_key key, size_t len, int state)
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
	r->deadline = kvt_now_ns() + t->pin_ns;
	r->prev = t->live_tail;
	r->next = NIL;
	if (t->live_tail != NIL)
		t->recs[t->live_tail].next = id;
	else
		t->live_head = id;
	t->live_tail = id;
	r->linked = 1;
	t->held_bytes += len;
	return id;
}

/* Frees a record whose resources are given back or handed on. */
static void rec_drop(struct slot_table *t, uint32_t id)
{
	struct slot_rec *r = &t->recs[id];

	live_unlink(t, id);
	t->held_bytes -= r->len;
	r->state = R_FREE;
	r->gen = r->gen + 1 ? r->gen + 1 : 1;
	r->next = t->free_head;
	t->free_head = id;
}

/* Gives back what a record holds (for a LOADING one, only once its load has
 * finished) and frees it. */
static void rec_free(struct slot_table *t, uint32_t id)
{
	struct slot_rec *r = &t->recs[id];

	if (r->state == R_PIN_RAM)
		ram_unpin(t->ram, r->ram_ref);
	else if (r->state == R_RESERVED || r->state == R_PIN_OWN ||
		 (r->state == R_LOADING && r->has_off))
		ram_slot_free(t->ram, r->off);
	rec_drop(t, id);
}

/* Releases a record: at once, or, while its load runs, when it is done. */
static void rec_release(struct slot_table *t, uint32_t id)
{
	if (t->recs[id].state == R_LOADING) {
		t->recs[id].released = 1;
		live_unlink(t, id);
	} else {
		rec_free(t, id);
	}
}

/* Lapses the slots whose deadline has passed. */
static void expire(struct slot_table *t, uint64_t now)
{
	while (t->live_head != NIL && t->recs[t->live_head].deadline <= now) {
		ctr_add(&t->lapses, 1);
		rec_release(t, t->live_head);
	}
}

/* Room for len more bytes under ram.pin_cap. */
static int under_cap(const struct slot_table *t, size_t len)
{
	return t->held_bytes + len <= t->cap_bytes;
}

/* --- argument checks ---------------------------------------------------------- */

static int check_slots(kvt_store *s, const kvt_slot *slots, size_t n, const char *fn)
{
	if (!s)
		return kvt_fail(-EINVAL, "%s: store is NULL", fn);
	if (!slots && n)
		return kvt_fail(-EINVAL, "%s: slots is NULL but n is %zu", fn, n);
	if (n > INT32_MAX)
		return kvt_fail(-EINVAL, "%s: n %zu is too large", fn, n);
	return 0;
}

/* --- save: reserve, commit, abort ---------------------------------------------- */

KVT_API int kvt_put_reserve(kvt_store *s, kvt_slot *slots, size_t n, unsigned flags)
{
	int rc = check_slots(s, slots, n, "kvt_put_reserve");
	if (rc)
		return rc;
	if (flags)
		return kvt_fail(-EINVAL, "kvt_put_reserve: unknown flags 0x%x", flags);
	if (store_client(s)) /* attached: the node store reserves */
		return local_reserve(store_client(s), slots, n);

	struct slot_table *t = store_slots(s);
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
		expire(t, kvt_now_ns());
		int64_t off = under_cap(t, sl->len) ? ram_slot_alloc(t->ram, sl->len, 0)
						     : -EAGAIN;
		uint32_t id = off >= 0 ? rec_new(t, sl->key, sl->len, R_RESERVED) : NIL;
		if (id != NIL) {
			t->recs[id].off = (uint64_t)off;
			sl->ref = handle_of(t, id);
		}
		pthread_mutex_unlock(&t->lock);
		if (off >= 0 && id == NIL) {
			ram_slot_free(t->ram, (uint64_t)off);
			sl->result = kvt_fail(-ENOMEM, "kvt_put_reserve: out of memory");
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

/* Takes the live reservation of slots[i] out of the table: 1 with *off and
 * *len set, or 0 (-ESTALE set in the slot). */
static int take_reservation(struct slot_table *t, kvt_slot *sl, const char *fn,
			    uint64_t *off, size_t *len)
{
	pthread_mutex_lock(&t->lock);
	uint32_t id = rec_of(t, sl->ref, 1u << R_RESERVED);
	if (id != NIL) {
		*off = t->recs[id].off;
		*len = t->recs[id].len;
		rec_drop(t, id); /* the extent goes to the caller */
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

/* Ends the live reservations of slots[0..n): publishes them, or gives their
 * space back. Returns how many were ended. */
static int end_reservations(kvt_store *s, kvt_slot *slots, size_t n, int publish,
			    const char *fn)
{
	int rc = check_slots(s, slots, n, fn);
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
		rc = ram_slot_publish(t->ram, slots[i].key, off, len);
		slots[i].result = rc < 0 ? rc : 0;
		if (rc >= 0) {
			ctr_add(&t->commits, 1);
			done++;
		}
	}
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

/* --- restore: pin, loads, unpin ---------------------------------------------------- */

static void batch_destroy(struct kvt_pin_batch *b)
{
	if (b->efd >= 0)
		close(b->efd);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	free(b->done);
	free(b);
}

/* Reports the loads of a job, all finished: under the batch's lock. */
static void report(struct slot_table *t, const struct slot_job *j,
		   const int *res, const uint64_t *off, const size_t *len)
{
	struct kvt_pin_batch *b = j->b;

	pthread_mutex_lock(&b->lock);
	for (uint32_t k = 0; k < j->n; k++) {
		kvt_slot *sl = &b->slots[j->idx[k]];
		sl->result = res[k];
		sl->len = len[k];
		sl->addr = res[k] == 0 ? t->base + off[k] : NULL;
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

/* Reads a job's blocks from disk into fresh extents and reports them. */
static void run_job(struct slot_table *t, struct slot_job *j)
{
	kvt_op ops[LOAD_GROUP];
	uint64_t off[LOAD_GROUP];
	size_t len[LOAD_GROUP];
	int res[LOAD_GROUP], io[LOAD_GROUP];
	uint32_t nio = 0;

	for (uint32_t k = 0; k < j->n; k++) {
		pthread_mutex_lock(&t->lock);
		struct slot_rec *r = &t->recs[j->rec[k]];
		len[k] = r->len;
		kvt_key key = r->key;
		int skip = r->released;
		pthread_mutex_unlock(&t->lock);

		/* May evict and spill: a loader can wait, unlike a reservation. */
		int64_t o = skip ? -ECANCELED : load_extent(t, len[k]);
		res[k] = o < 0 ? (int)o : 0;
		off[k] = o < 0 ? 0 : (uint64_t)o;
		if (o >= 0) {
			ops[nio] = (kvt_op){ key, t->base + o, len[k], 0 };
			io[nio++] = (int)k;
		}
	}
	if (nio)
		disk_get_batch(t->disk, ops, nio);
	for (uint32_t m = 0; m < nio; m++)
		res[io[m]] = ops[m].result;

	/* Into the table before the caller hears of them, so that an unpin
	 * right after the reap finds them pinned; failed or released loads
	 * give their extent and record back (an unpin of them, which reads
	 * only the handle, then finds nothing). */
	pthread_mutex_lock(&t->lock);
	for (uint32_t k = 0; k < j->n; k++) {
		struct slot_rec *r = &t->recs[j->rec[k]];
		r->has_off = 0;
		for (uint32_t m = 0; m < nio; m++)
			r->has_off |= io[m] == (int)k;
		r->off = off[k];
		if (r->released)
			res[k] = -ECANCELED;
		ctr_add(res[k] == 0 ? &t->loads : &t->load_failures, 1);
		if (res[k] == 0)
			r->state = R_PIN_OWN;
		else
			rec_free(t, j->rec[k]);
	}
	pthread_mutex_unlock(&t->lock);

	report(t, j, res, off, len);
	free(j);
}

static void *loader_main(void *arg)
{
	struct slot_table *t = arg;

	pthread_mutex_lock(&t->lock);
	for (;;) {
		expire(t, kvt_now_ns());
		struct slot_job *j = t->qhead;
		if (!j) {
			if (t->stop)
				break;
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
		run_job(t, j);
		pthread_mutex_lock(&t->lock);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

/* Starts the loaders if none run yet. Table locked. */
static int start_loaders(struct slot_table *t)
{
	while (t->nth < t->want_th) {
		if (pthread_create(&t->th[t->nth], NULL, loader_main, t))
			return t->nth ? 0 : kvt_fail(-ENOMEM, "kvt_get_pin: cannot start a loader thread");
		t->nth++;
	}
	return 0;
}

/* Pins slots[i] if the block is in RAM (0), or makes a LOADING record for a
 * disk hit (-EINPROGRESS), or fails. Table locked. */
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
		id = rec_new(t, sl->key, len, R_PIN_RAM);
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
	if (rc != -ENOENT || !t->disk || !disk_contains(t->disk, sl->key, &len))
		return rc == -ENOENT ? -ENOENT : rc;
	if (!under_cap(t, len))
		return -EAGAIN;
	id = rec_new(t, sl->key, len, R_LOADING);
	if (id == NIL)
		return -ENOMEM;
	sl->len = len;
	sl->ref = handle_of(t, id);
	*rec = id;
	return -EINPROGRESS;
}

/* Queues the loads of b (slot indexes load[0..n), records rec[]) in jobs of
 * LOAD_GROUP. Table locked. Returns 0 or -ENOMEM (nothing queued). */
static int queue_loads(struct slot_table *t, struct kvt_pin_batch *b,
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

KVT_API int kvt_get_pin(kvt_store *s, kvt_slot *slots, size_t n, unsigned flags,
			kvt_pin_batch **out)
{
	int rc = check_slots(s, slots, n, "kvt_get_pin");
	if (rc)
		return rc;
	if (!out)
		return kvt_fail(-EINVAL, "kvt_get_pin: out is NULL");
	if (flags)
		return kvt_fail(-EINVAL, "kvt_get_pin: unknown flags 0x%x", flags);

	struct slot_table *t = store_slots(s);
	struct kvt_pin_batch *b = calloc(1, sizeof(*b));
	size_t *load = malloc((n ? n : 1) * sizeof(*load));
	uint32_t *rec = malloc((n ? n : 1) * sizeof(*rec));
	if (b)
		b->done = malloc((n ? n : 1) * sizeof(*b->done));
	if (!b || !load || !rec || !b->done) {
		if (b)
			free(b->done);
		free(b);
		free(load);
		free(rec);
		return kvt_fail(-ENOMEM, "kvt_get_pin: out of memory");
	}
	b->slots = slots;
	b->efd = -1;
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
	expire(t, kvt_now_ns());
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
		if (sl->result == 0 || sl->result == -EINPROGRESS)
			pinned++;
		else if (sl->result == -EAGAIN)
			kvt_set_error("kvt_get_pin: slot %zu (%s): ram.pin_cap is held in slots",
				      i, kvt_key_str(sl->key, kb));
	}
	rc = nload ? start_loaders(t) : 0;
	if (!rc)
		rc = queue_loads(t, b, load, rec, nload);
	if (rc) {
		for (size_t k = 0; k < nload; k++) {
			slots[load[k]].result = rc;
			slots[load[k]].ref = 0;
			slots[load[k]].addr = NULL;
			rec_free(t, rec[k]);
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
		for (; k < max && b->nreaped < b->ndone; k++)
			idx[k] = b->done[b->nreaped++];
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
	if (b->efd < 0) {
		b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (b->efd < 0) {
			int e = errno;
			pthread_mutex_unlock(&b->lock);
			return kvt_fail(-e, "kvt_pin_fd: eventfd: %s", kvt_strerror(e));
		}
		if (b->ndone) {
			uint64_t v = b->ndone;
			ssize_t w = write(b->efd, &v, sizeof(v));
			(void)w;
		}
	}
	int fd = b->efd;
	pthread_mutex_unlock(&b->lock);
	return fd;
}

KVT_API void kvt_pin_free(kvt_pin_batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	while (b->ndone < b->nloads)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
	batch_destroy(b);
}

KVT_API int kvt_unpin(kvt_store *s, const kvt_slot *slots, size_t n)
{
	int rc = check_slots(s, slots, n, "kvt_unpin");
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
		uint32_t id = rec_of(t, ref, pins);
		if (id == NIL || t->recs[id].released) {
			ctr_add(&t->stale, 1);
			continue;
		}
		rec_release(t, id);
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
			rec_free(t, id);
	free(t->recs);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->qcond);
	free(t);
}

void slot_stats(struct slot_table *t, const struct stat_visitor *v)
{
	uint64_t held, live = 0;

	pthread_mutex_lock(&t->lock);
	expire(t, kvt_now_ns());
	held = t->held_bytes;
	for (uint32_t id = t->live_head; id != NIL; id = t->recs[id].next)
		live++;
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
	stat_int(v, "unpins", (int64_t)ctr_get(&t->unpins));
	stat_int(v, "lapses", (int64_t)ctr_get(&t->lapses));
	stat_int(v, "stale", (int64_t)ctr_get(&t->stale));
}
