/*
 * store_impl.h - what the files of the store facade share: struct
 * kvt_store (the tiers, the worker pool and the evictor, store-wide
 * counters) and the functions one of them calls in another (store.c:
 * validation and routing across the local tiers; store_put.c: the put
 * path; batch.c: asynchronous
 * batches and their workers; store_peer.c: routing to peers and serving
 * them). Nothing outside the facade includes it.
 */
#ifndef KVT_STORE_IMPL_H
#define KVT_STORE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "config.h"
#include "disk.h"
#include "internal.h"
#include "local.h"
#include "memreg.h"
#include "opts.h"
#include "peer.h"
#include "ram.h"
#include "slot.h"
#include "stats.h"

struct kvt_store {
	struct kvt_config cfg;
	struct ram_tier *ram;
	struct disk_tier *disk;
	struct peer_tier *peer;   /* NULL: no peers configured */
	struct slot_table *slots; /* zero-copy slots (slot*.c) */
	struct local_server *local; /* local.socket: attached processes served */
	struct local_client *client; /* "attach": every call goes to the node
					store (local_client.c); no tiers here */
	struct memreg mreg;       /* caller ranges (store_mem.c) */

	/* async workers */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct kvt_batch *qhead, *qtail;
	int stopping;
	pthread_t *workers;
	unsigned nworkers;

	/* evictor */
	pthread_mutex_t elock;
	pthread_cond_t econd;
	int ekick, estop;
	pthread_t evictor;
	int evictor_started;

	struct hist get_lat, put_lat;
	_Atomic uint64_t gets, puts, hits_ram, hits_disk, hits_peer, misses, checksum_misses;
	_Atomic uint64_t peer_puts, peer_put_failures;
	_Atomic uint64_t refused_puts, write_arounds, write_through, promotions;
	_Atomic uint64_t batches, errors;
	/* moved by every kvt_lookup, on as many threads as the caller runs */
	struct kvt_striped lookups, lookup_keys, lookup_found;
};

/* Condition variables that time out on CLOCK_MONOTONIC, so a wall-clock
 * jump neither shortens nor stretches a wait. */
static inline void kvt_cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

static inline struct timespec kvt_deadline_in_ms(long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* Blocks handled together: one disk submission each (on the stack, so a
 * put never allocates). Above the disk's queue depth, so no I/O is lost. */
#define CHUNK 128

/* batch.c */
/* Starts cfg.threads workers (kvt_open: on failure, the text is set and
 * batch_workers_stop still joins those started). */
int batch_workers_start(kvt_store *s);
/* Stops and joins the workers: every batch queued runs first. */
void batch_workers_stop(kvt_store *s);

/* store_peer.c */
/* What this node serves its peers: its own tiers, never forwarding. */
struct peer_local store_peer_local(kvt_store *s);
/* Wakes the evictor thread. */
void store_kick_evictor(kvt_store *s);
int store_owner(kvt_store *s, kvt_key key);
int store_peer_result(int rc);
/* Lets the store's slots load blocks that peers own (after peer_open). */
void store_slot_peers(kvt_store *s);
int store_get_peer(kvt_store *s, int owner, kvt_key key, void *buf, size_t cap,
		   size_t *len);
size_t store_owner_group(const int *owner, uint8_t *taken, size_t n, size_t a,
			 size_t *idx);
void store_put_to_peers(kvt_store *s, kvt_op *ops, size_t n);
size_t store_lookup_peers(kvt_store *s, const kvt_key *keys, size_t n, size_t i,
			  int lease, uint64_t deadline);
void store_get_from_peers(kvt_store *s, kvt_op *ops, const size_t *miss,
			  const int *owner, const uint64_t *gen, size_t nmiss);

/* store.c */
void store_promote(kvt_store *s, kvt_key key, const void *buf, size_t len,
		   uint64_t gen, const uint64_t *sum);
void store_count_get(kvt_store *s, int rc, int tier_disk);

/* store_put.c */
/* Puts ops[0..n) chunk by chunk (and in their owners' tiers when forward);
 * returns the first failure or 0, naming the block and the reason when no
 * tier could take it. */
int store_put_ops_to(kvt_store *s, kvt_op *ops, size_t n, const char *fn, int forward);
/* Names a put batch's first failed op in kvt_last_error(): its index, key,
 * length and why, as kvt_get_batch does (the ops' own messages were each
 * set in turn, so the last one's would stand); an attached store's lost
 * connection keeps its own message. */
void store_put_batch_error(kvt_store *s, const kvt_op *ops, size_t n);
/* The result of the first op (lowest index) that failed, or 0. */
int store_first_failure(const kvt_op *ops, size_t n);

/* store.c */
/* The deadline of a lease taken now: ram.lease_ms from now, rounded up to
 * the RAM tier's lease grain (both tiers are given the same). */
uint64_t store_lease_deadline(const kvt_store *s);
int store_local_has(kvt_store *s, kvt_key k, int lease, uint64_t deadline);
int store_release_local(kvt_store *s, const kvt_key *keys, size_t n);
int store_run_put_batch(kvt_store *s, kvt_op *ops, size_t n);
size_t store_shared_last(kvt_op *ops, size_t *idx, size_t n);
int store_run_get_batch(kvt_store *s, kvt_op *ops, size_t n);

/*
 * The device layer kvt_open() gives the disk tier: NULL, the default, is
 * io_uring's (uring_dev_ops). Only tests set it, before kvt_open(), to wrap
 * the real device in one that injects faults; libkvtier.so does not export
 * it.
 */
extern const struct kvt_dev_ops *store_dev_ops;

#endif
