/*
 * slot_impl.h - what the files of the zero-copy slots share and nothing
 * outside them sees: the slot table, its records and their states, pin
 * batches and loader jobs, and the calls one file makes into another.
 * slot.c owns the table and its records (handles, the live list in
 * deadline order, lapses), open, close, counters and kvt_arena_regions;
 * slot_save.c reserve, commit and abort; slot_pin.c pins, pin batches,
 * reaping and unpins; slot_load.c the loader threads that read disk hits
 * into fresh slots. Lock order: table lock, then the RAM tier's locks; a
 * pin batch's lock is never held with the table lock.
 */
#ifndef KVT_SLOT_IMPL_H
#define KVT_SLOT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "internal.h"
#include "slot.h"
#include "stats.h"

#define LOAD_GROUP 1u         /* disk loads per submission */
#define LOADERS_MAX 32u       /* loader threads */
#define LOAD_WAIT_MS 500      /* a load waits this long for arena space */
#define REGION_MAX (1ull << 30)
#define NIL UINT32_MAX

enum rec_state { R_FREE = 0, R_RESERVED, R_PIN_RAM, R_LOADING, R_PIN_OWN };

struct slot_rec {
	kvt_key key;
	uint64_t off;         /* arena offset (RESERVED, PIN_OWN, LOADING once allocated) */
	uint64_t ram_ref;     /* PIN_RAM */
	uint64_t ram_gen;     /* LOADING: the key's RAM generation at the pin */
	int32_t owner;        /* LOADING: the member read from, or -1: the disk */
	uint64_t deadline;    /* CLOCK_MONOTONIC ns; none while LOADING */
	uint32_t len;
	uint32_t gen;         /* bumped at every free: stale handles do not match */
	uint32_t prev, next;  /* live list (deadline order), or free list through next */
	uint8_t state;
	uint8_t released;     /* LOADING: unpinned; freed by its loader */
	uint8_t linked;       /* on the live list */
	uint8_t has_off;      /* LOADING: off is allocated */
	uint8_t kept;         /* RESERVED for the length of one library call
				 (an attached process's kvt_put): off the live
				 list, never lapses */
	struct kvt_pin_batch *pb; /* a landed load's batch, which it holds
				     (a ref) until the record is freed */
	size_t pbi;               /* the slot's index in pb */
};

/* Up to LOAD_GROUP disk loads of one pin batch, or (b NULL) what follows
 * the commit of one block: its write to disk, its copy to its owner. */
struct slot_job {
	struct kvt_pin_batch *b;
	struct slot_job *next;
	kvt_key wkey;             /* after a commit: the block, and its RAM */
	uint64_t wgen;            /* generation right after the commit */
	int wdisk;                /* write it to disk */
	int wowner;               /* the member that owns it, or -1 */
	uint32_t n;
	uint32_t rec[LOAD_GROUP];
	size_t idx[LOAD_GROUP];   /* the slots' indexes in b->slots */
};

/* A finished load's outcome, kept in the batch until it is reaped: the
 * loaders never write the caller's slots, so a slot the caller saw loading
 * (-EINPROGRESS) stays so until kvt_pin_reap reports it, and a scan of the
 * results right after kvt_get_pin cannot take a load for a RAM hit. */
struct pin_done {
	void *addr;
	size_t len;
	int result;
	uint8_t cancelled;        /* its record was freed (unpinned, lapsed, the
				     store closed) before it was reaped */
};

struct kvt_pin_batch {
	kvt_slot *slots;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t *done;             /* finished loads, in finishing order */
	struct pin_done *res;     /* by slot index: what the load gave, handed to
				     the caller's slot only by kvt_pin_reap */
	size_t nloads, ndone, nreaped;
	int efd;
	unsigned refs;            /* the caller's (until kvt_pin_free) and one
				     per record of a landed load (pin_rec) */
};

struct slot_table {
	struct ram_tier *ram;
	struct disk_tier *disk;
	char *base;
	size_t arena_len;
	uint64_t pin_ns, cap_bytes, max_block;
	int promote;              /* disk.promote: loads become RAM blocks */
	int write_through;        /* disk.write_policy "write_through" */
	struct slot_peers peers;  /* owner NULL: no peers */
	void (*kick)(void *arg);
	void *kick_arg;

	pthread_mutex_t lock;
	struct slot_rec *recs;
	uint32_t nrecs, free_head, live_head, live_tail;
	uint32_t nkept;           /* records kept off the live list (kept),
				     LOADING ones aside */
	uint32_t loading;         /* LOADING records not released: not on
				     the live list */
	uint64_t held_bytes;

	/* loaders (under lock) */
	pthread_cond_t qcond;
	struct slot_job *qhead, *qtail;
	int stop;
	pthread_t th[LOADERS_MAX];
	unsigned nth, want_th;

	_Atomic uint64_t reserves, reserved_stored, reserve_refusals, commits, aborts;
	_Atomic uint64_t pins_ram, loads, load_failures, loads_promoted, unpins, lapses, stale;
	_Atomic uint64_t write_throughs, write_through_failures;
};

static inline void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

static inline struct timespec ts_of_ns(uint64_t ns)
{
	return (struct timespec){ .tv_sec = (time_t)(ns / 1000000000ull),
				  .tv_nsec = (long)(ns % 1000000000ull) };
}

static inline uint64_t handle_of(const struct slot_table *t, uint32_t id)
{
	return (uint64_t)t->recs[id].gen << 32 | id;
}

/* Room for len more bytes under ram.pin_cap. */
static inline int under_cap(const struct slot_table *t, size_t len)
{
	return t->held_bytes + len <= t->cap_bytes;
}

/* slot.c: records, table locked. */
uint32_t slot_rec_of(const struct slot_table *t, uint64_t ref, unsigned mask);
/* Ties record id (a landed load) to slot i of batch b, so that freeing the
 * record before kvt_pin_reap reports the load makes the reap say
 * -ECANCELED instead of handing out space given back (slot_pin.c). Table
 * locked. */
void pin_rec_tie(struct slot_table *t, uint32_t id, struct kvt_pin_batch *b, size_t i);
/* Unties a freed record from its batch: marks its load cancelled and drops
 * the record's hold on the batch (the last hold frees it). Table locked. */
void pin_rec_untie(struct slot_rec *r);
uint32_t slot_rec_new(struct slot_table *t, kvt_key key, size_t len, int state);
void slot_rec_arm(struct slot_table *t, uint32_t id);
void slot_rec_drop(struct slot_table *t, uint32_t id);
void slot_rec_free(struct slot_table *t, uint32_t id);
void slot_rec_release(struct slot_table *t, uint32_t id);
/* Takes a new record off the live list for good: it never lapses, and
 * lives until it is ended or the table closes. Table locked. */
void slot_rec_keep(struct slot_table *t, uint32_t id);
void slot_expire(struct slot_table *t, uint64_t now);

/* slot.c: the checks every public call of the slots makes first. */
int slot_check_args(kvt_store *s, const kvt_slot *slots, size_t n, const char *fn);

/* slot_load.c: loader threads and their queue, table locked. */
int slot_start_loaders(struct slot_table *t);
void slot_start_timer(struct slot_table *t);
int slot_queue_loads(struct slot_table *t, struct kvt_pin_batch *b,
		     const size_t *load, const uint32_t *rec, size_t n);
/* Queues what follows the commit of key's RAM block (with RAM generation
 * gen): its write to disk (disk), its copy to member owner (-1: none).
 * Table locked. Returns 0 or -ENOMEM. */
int slot_queue_write(struct slot_table *t, kvt_key key, uint64_t gen, int disk, int owner);

#endif
