/*
 * store.c - the facade: validates every public call, routes it across the
 * tiers (RAM first, then disk), keeps store-wide counters and latencies, and
 * owns the library's threads: async batch workers and the evictor that
 * brings the RAM tier from its high watermark down to its low one.
 * Tiers know nothing of each other; only this file connects them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "config.h"
#include "disk.h"
#include "internal.h"
#include "peer.h"
#include "ram.h"
#include "slot.h"
#include "stats.h"

struct kvt_batch {
	kvt_store *s;
	int opcode;
	kvt_op *ops;
	size_t n;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;
	int result;
	int efd;
	struct kvt_batch *qnext;
};

struct kvt_store {
	struct kvt_config cfg;
	struct ram_tier *ram;
	struct disk_tier *disk;
	struct peer_tier *peer;   /* NULL: no peers configured */
	struct slot_table *slots; /* zero-copy slots (slot.c) */

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
	_Atomic uint64_t lookups, lookup_keys, lookup_found, batches, errors;
};

static void *worker_main(void *arg);

/* Condition variables that time out on CLOCK_MONOTONIC, so a wall-clock
 * jump neither shortens nor stretches a wait. */
static void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

static struct timespec deadline_in_ms(long ms)
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
static void store_teardown(kvt_store *s);

/* --- tier glue -------------------------------------------------------------- */

static void spill_to_disk(void *arg, kvt_op *ops, size_t n)
{
	kvt_store *s = arg;
	disk_put_batch(s->disk, ops, n);
}

/* Runs under a RAM shard lock (ram.h): takes the disk tier's lock inside
 * it. The disk tier never calls into the RAM tier, so the order holds. */
static void unspill_from_disk(void *arg, kvt_key key)
{
	kvt_store *s = arg;
	disk_remove(s->disk, key);
}

static void kick_evictor(kvt_store *s)
{
	pthread_mutex_lock(&s->elock);
	s->ekick = 1;
	pthread_cond_signal(&s->econd);
	pthread_mutex_unlock(&s->elock);
}

static void kick_evictor_cb(void *arg)
{
	kick_evictor(arg);
}

struct slot_table *store_slots(kvt_store *s)
{
	return s->slots;
}

static void *evictor_main(void *arg)
{
	kvt_store *s = arg;

	pthread_mutex_lock(&s->elock);
	while (!s->estop) {
		if (!s->ekick) {
			struct timespec ts = deadline_in_ms(100);
			pthread_cond_timedwait(&s->econd, &s->elock, &ts);
			continue;
		}
		s->ekick = 0;
		pthread_mutex_unlock(&s->elock);
		if (ram_above_high(s->ram))
			ram_evict_to_low(s->ram);
		pthread_mutex_lock(&s->elock);
	}
	pthread_mutex_unlock(&s->elock);
	return NULL;
}

/* --- single operations (arguments already checked) ------------------------ */

/*
 * Copies a block loaded from a lower tier into RAM. gen: ram_gen(key) from
 * before the load began (a removal since then wins); sum: the checksum the
 * disk verified (NULL for a peer's block), which the RAM copy must match:
 * buf is the caller's and may hold other bytes by now.
 */
static void promote(kvt_store *s, kvt_key key, const void *buf, size_t len,
		    uint64_t gen, const uint64_t *sum)
{
	if (!s->cfg.promote)
		return;
	if (ram_promote(s->ram, key, buf, len, gen, sum) == 0) {
		ctr_add(&s->promotions, 1);
		if (ram_above_high(s->ram))
			kick_evictor(s);
	}
}

static void count_get(kvt_store *s, int rc, int tier_disk)
{
	if (rc == 0)
		ctr_add(tier_disk ? &s->hits_disk : &s->hits_ram, 1);
	else if (rc == -ENOENT)
		ctr_add(&s->misses, 1);
	else if (rc == -EBADMSG) {
		ctr_add(&s->misses, 1);
		ctr_add(&s->checksum_misses, 1);
	} else if (rc != -ENOBUFS)
		ctr_add(&s->errors, 1);
}

/* The owner of key when it is another member, else -1. */
static int remote_owner(kvt_store *s, kvt_key key)
{
	if (!s->peer)
		return -1;
	unsigned o = peer_owner(s->peer, key);
	return o == peer_self(s->peer) ? -1 : (int)o;
}

/* A get from this node's own tiers; a miss is not counted when a peer is
 * still to be asked (defer). */
static int get_local(kvt_store *s, kvt_key key, void *buf, size_t cap, size_t *len,
		     int defer)
{
	uint64_t gen = ram_gen(s->ram, key), sum = 0;
	int rc = ram_get(s->ram, key, buf, cap, len);

	if (rc == -ENOENT && s->disk) {
		rc = disk_get_sum(s->disk, key, buf, cap, len, &sum);
		if (rc != -ENOENT || !defer)
			count_get(s, rc, 1);
		if (rc == 0)
			promote(s, key, buf, *len, gen, &sum);
	} else if (rc != -ENOENT || !defer) {
		count_get(s, rc, 0);
	}
	return rc;
}

/* A peer's answer as a get result: a member that cannot answer makes its
 * keys misses; only a slow one (-ETIMEDOUT) says so. */
static int peer_result(int rc)
{
	switch (rc) {
	case 0:
	case -ENOENT:
	case -ENOBUFS:
	case -EBADMSG:
	case -ETIMEDOUT:
		return rc;
	default:
		return -ENOENT;
	}
}

/* After a local miss: the owner's copy, if another member owns key. */
static int get_peer(kvt_store *s, int owner, kvt_key key, void *buf, size_t cap,
		    size_t *len)
{
	kvt_op op = { .key = key, .buf = buf, .len = cap };
	uint64_t gen = ram_gen(s->ram, key);

	peer_get_batch(s->peer, (unsigned)owner, &op, 1);
	if (op.result == 0) {
		ctr_add(&s->hits_peer, 1);
		*len = op.len;
		promote(s, key, buf, op.len, gen, NULL);
	} else {
		if (op.result == -ENOBUFS)
			*len = op.len;
		count_get(s, peer_result(op.result), 0);
	}
	return op.result;
}

static int get_one(kvt_store *s, kvt_key key, void *buf, size_t cap, size_t *len)
{
	char kb[34];
	int owner = remote_owner(s, key);
	int rc = get_local(s, key, buf, cap, len, owner >= 0);

	if (rc == -ENOENT && owner >= 0) {
		rc = get_peer(s, owner, key, buf, cap, len);
		/* a member that cannot answer: its keys read as misses */
		if (peer_result(rc) != rc) {
			kvt_set_error("key %s is not stored here, and its owner %s "
				      "cannot be asked", kvt_key_str(key, kb),
				      peer_name(s->peer, (unsigned)owner));
			return -ENOENT;
		}
	}
	if (rc == -ENOENT)
		kvt_set_error("key %s is not stored", kvt_key_str(key, kb));
	else if (rc == -ENOBUFS)
		kvt_set_error("block %s is %zu bytes; the buffer holds %zu",
			      kvt_key_str(key, kb), *len, cap);
	return rc;
}

/* --- argument checks ---------------------------------------------------------- */

static int check_put_args(kvt_store *s, const void *data, size_t len, const char *fn)
{
	if (!data)
		return kvt_fail(-EINVAL, "%s: data is NULL", fn);
	if (len == 0)
		return kvt_fail(-EINVAL, "%s: len is 0", fn);
	if (len > s->cfg.max_block || len > UINT32_MAX)
		return kvt_fail(-EINVAL, "%s: len %zu exceeds ram.max_block (%llu bytes)",
				fn, len, (unsigned long long)s->cfg.max_block);
	return 0;
}

static int check_get_args(const void *buf, size_t cap, const char *fn)
{
	if (!buf && cap)
		return kvt_fail(-EINVAL, "%s: buf is NULL but cap is %zu", fn, cap);
	return 0;
}

/* Blocks handled together: one disk submission each (on the stack, so a
 * put never allocates). Above the disk's queue depth, so no I/O is lost. */
#define CHUNK 128

static int first_failure(const kvt_op *ops, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ops[i].result)
			return ops[i].result;
	return 0;
}

/* The disk's share of a put chunk: write-arounds and write-throughs. */
struct disk_leg {
	size_t op;        /* index in the chunk's ops */
	int write_around; /* 1: RAM refused it; 0: write-through copy */
};

/*
 * Puts ops[0..n), n <= CHUNK: RAM first; blocks RAM cannot take go around
 * to disk (unless ram.refuse_when_leased), write-through copies follow,
 * all of the chunk's disk writes in one submission.
 */
static void put_chunk(kvt_store *s, kvt_op *ops, size_t n, const char *fn)
{
	struct disk_leg leg[CHUNK];
	kvt_op dops[CHUNK];
	size_t nd = 0;

	for (size_t i = 0; i < n; i++) {
		kvt_op *op = &ops[i];
		int rc = check_put_args(s, op->buf, op->len, fn);
		op->result = rc;
		if (rc || (s->disk && disk_contains(s->disk, op->key, NULL)))
			continue; /* bad op, or immutable and already stored */
		rc = ram_put(s->ram, op->key, op->buf, op->len);
		if (rc == 0 && s->disk && s->cfg.write_policy == KVT_WRITE_THROUGH) {
			leg[nd] = (struct disk_leg){ i, 0 };
			dops[nd++] = *op;
		} else if (rc == -ENOSPC && s->disk && !s->cfg.refuse_when_leased) {
			leg[nd] = (struct disk_leg){ i, 1 };
			dops[nd++] = *op;
		} else if (rc == -ENOSPC) {
			ctr_add(&s->refused_puts, 1);
			op->result = -ENOSPC;
		} else if (rc < 0) {
			op->result = rc;
		}
	}
	if (nd)
		disk_put_batch(s->disk, dops, nd);
	for (size_t j = 0; j < nd; j++) {
		kvt_op *op = &ops[leg[j].op];
		int rc = dops[j].result;
		char kb[34];
		if (!leg[j].write_around) { /* RAM holds it: the put succeeded */
			if (rc == 0)
				ctr_add(&s->write_through, 1);
			else
				kvt_log(KVT_LOG_WARN, "write-through of %s to disk failed: %s",
					kvt_key_str(op->key, kb), kvt_strerror(rc));
			continue;
		}
		if (rc == 0)
			ctr_add(&s->write_arounds, 1);
		else if (rc == -ENOSPC)
			ctr_add(&s->refused_puts, 1);
		op->result = rc;
	}
}

/*
 * One round trip's worth: the entries from a on whose owner is owner[a]
 * (owner -1: none to ask) and that no earlier group took. Marks them taken,
 * writes their indexes to idx and returns how many (0 when a is taken).
 */
static size_t owner_group(const int *owner, uint8_t *taken, size_t n, size_t a,
			  size_t *idx)
{
	size_t k = 0;

	if (taken[a] || owner[a] < 0)
		return 0;
	for (size_t b = a; b < n; b++)
		if (!taken[b] && owner[b] == owner[a]) {
			taken[b] = 1;
			idx[k++] = b;
		}
	return k;
}

/*
 * Stores ops[0..n), n <= CHUNK, that this node stored (or could not) in
 * their owners' tiers too: one round trip per owner. A block the owner took
 * is stored, even where this node had no room for it.
 */
static void put_to_peers(kvt_store *s, kvt_op *ops, size_t n)
{
	kvt_op pops[CHUNK];
	size_t idx[CHUNK];
	int owner[CHUNK], res[CHUNK];
	uint8_t taken[CHUNK] = { 0 };

	for (size_t i = 0; i < n; i++)
		owner[i] = ops[i].result == 0 || ops[i].result == -ENOSPC ?
			   remote_owner(s, ops[i].key) : -1;
	for (size_t a = 0; a < n; a++) {
		size_t k = owner_group(owner, taken, n, a, idx);

		if (!k)
			continue;
		for (size_t j = 0; j < k; j++)
			pops[j] = ops[idx[j]];
		peer_put_batch(s->peer, (unsigned)owner[a], pops, k, res);
		for (size_t j = 0; j < k; j++) {
			if (res[j] == 0) {
				ctr_add(&s->peer_puts, 1);
				ops[idx[j]].result = 0;
			} else {
				ctr_add(&s->peer_put_failures, 1);
			}
		}
	}
}

/* Puts ops[0..n) chunk by chunk (and in their owners' tiers when forward);
 * returns the first failure or 0, naming the block and the reason when no
 * tier could take it. */
static int put_ops_to(kvt_store *s, kvt_op *ops, size_t n, const char *fn, int forward)
{
	for (size_t i = 0; i < n; i += CHUNK) {
		size_t k = n - i < CHUNK ? n - i : CHUNK;

		put_chunk(s, ops + i, k, fn);
		if (forward && s->peer)
			put_to_peers(s, ops + i, k);
	}
	if (ram_above_high(s->ram))
		kick_evictor(s);
	int rc = first_failure(ops, n);
	if (rc != -ENOSPC)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (ops[i].result != -ENOSPC)
			continue;
		char kb[34];
		return kvt_fail(-ENOSPC, "%s: no tier can take block %s (%zu bytes): "
				"RAM holds only leased or pinned blocks and %s", fn,
				kvt_key_str(ops[i].key, kb), ops[i].len,
				!s->disk ? "there is no disk tier" :
				s->cfg.refuse_when_leased ? "ram.refuse_when_leased is set" :
				"the disk tier is full");
	}
	return rc;
}

static int put_ops(kvt_store *s, kvt_op *ops, size_t n, const char *fn)
{
	return put_ops_to(s, ops, n, fn, 1);
}

/* --- what this node serves its peers: its own tiers, never forwarding --- */

static int local_has(kvt_store *s, kvt_key k, int lease, uint64_t deadline)
{
	if (ram_lookup(s->ram, k, lease, deadline) == 1)
		return 1;
	return s->disk && (lease ? disk_lease(s->disk, k, deadline)
				 : disk_contains(s->disk, k, NULL)) == 1;
}

static void serve_lookup(void *arg, const kvt_key *keys, size_t n, int lease,
			 uint8_t *present)
{
	kvt_store *s = arg;
	uint64_t deadline = lease ? kvt_now_ns() + (uint64_t)s->cfg.lease_ms * 1000000ull : 0;

	for (size_t i = 0; i < n; i++)
		present[i] = (uint8_t)local_has(s, keys[i], lease, deadline);
}

/* Not counted in this node's gets and hits: the "peer" stats count what it
 * serves. */
static int serve_get(void *arg, kvt_key key, void *buf, size_t cap, size_t *len)
{
	kvt_store *s = arg;
	int rc = ram_get(s->ram, key, buf, cap, len);

	if (rc == -ENOENT && s->disk)
		rc = disk_get(s->disk, key, buf, cap, len);
	return rc;
}

static int serve_visit(void *arg, kvt_key key, size_t cap,
		       int (*fn)(void *fnarg, const void *block, size_t len),
		       void *fnarg, size_t *len)
{
	kvt_store *s = arg;

	return ram_visit(s->ram, key, cap, fn, fnarg, len);
}

static void serve_put(void *arg, kvt_op *ops, size_t n)
{
	put_ops_to(arg, ops, n, "peer put", 0);
}

static int release_local(kvt_store *s, const kvt_key *keys, size_t n)
{
	int ended = 0;

	for (size_t i = 0; i < n; i++) {
		int r = ram_release(s->ram, keys[i]);
		if (s->disk)
			r |= disk_release(s->disk, keys[i]);
		ended += r;
	}
	return ended;
}

static void serve_release(void *arg, const kvt_key *keys, size_t n)
{
	release_local(arg, keys, n);
}

/* --- public calls ------------------------------------------------------------- */

KVT_API int kvt_open(const char *config_json, kvt_store **out)
{
	kvt_store *s;
	int rc;

	if (!out)
		return kvt_fail(-EINVAL, "kvt_open: out is NULL");
	s = calloc(1, sizeof(*s));
	if (!s)
		return kvt_fail(-ENOMEM, "kvt_open: out of memory");
	rc = config_parse(config_json, &s->cfg);
	if (rc) {
		free(s);
		return rc;
	}
	pthread_mutex_init(&s->qlock, NULL);
	pthread_cond_init(&s->qcond, NULL);
	pthread_mutex_init(&s->elock, NULL);
	cond_init_monotonic(&s->econd);

	rc = ram_open(&s->cfg, s->cfg.ndisk ? spill_to_disk : NULL,
		      s->cfg.ndisk ? unspill_from_disk : NULL, s, &s->ram);
	if (rc)
		goto fail;
	if (s->cfg.ndisk) {
		rc = disk_open(&s->cfg, ram_arena_base(s->ram), ram_arena_size(s->ram),
			       NULL, &s->disk);
		if (rc)
			goto fail;
	}
	rc = slot_open(&s->cfg, s->ram, s->disk, kick_evictor_cb, s, &s->slots);
	if (rc)
		goto fail;
	if (s->cfg.npeers) {
		struct peer_local local = { .arg = s, .lookup = serve_lookup,
			.get = serve_get, .visit = serve_visit, .put = serve_put,
			.release = serve_release };
		rc = peer_open(&s->cfg, &local, s->cfg.max_block, &s->peer);
		if (rc)
			goto fail;
	}
	if (pthread_create(&s->evictor, NULL, evictor_main, s)) {
		rc = kvt_fail(-ENOMEM, "kvt_open: cannot start the evictor thread");
		goto fail;
	}
	s->evictor_started = 1;
	s->workers = calloc(s->cfg.threads, sizeof(*s->workers));
	if (!s->workers) {
		rc = kvt_fail(-ENOMEM, "kvt_open: out of memory");
		goto fail;
	}
	for (; s->nworkers < s->cfg.threads; s->nworkers++) {
		if (pthread_create(&s->workers[s->nworkers], NULL, worker_main, s)) {
			rc = kvt_fail(-ENOMEM, "kvt_open: cannot start worker thread %u",
				      s->nworkers);
			goto fail;
		}
	}
	*out = s;
	return 0;
fail: {
		/* Keep the failure's text: teardown must not overwrite it. */
		char msg[512];
		strncpy(msg, kvt_last_error(), sizeof(msg) - 1);
		msg[sizeof(msg) - 1] = 0;
		store_teardown(s);
		kvt_set_error("%s", msg);
		return rc;
	}
}

static void store_teardown(kvt_store *s)
{
	/* The workers first (their batches ask peers), then the peer server
	 * (its connection threads serve from the tiers), then the tiers. */
	pthread_mutex_lock(&s->qlock);
	s->stopping = 1;
	pthread_cond_broadcast(&s->qcond);
	pthread_mutex_unlock(&s->qlock);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	free(s->workers);
	peer_close(s->peer);
	s->peer = NULL;
	slot_close(s->slots); /* its loaders read from the tiers */
	if (s->evictor_started) {
		pthread_mutex_lock(&s->elock);
		s->estop = 1;
		pthread_cond_signal(&s->econd);
		pthread_mutex_unlock(&s->elock);
		pthread_join(s->evictor, NULL);
	}
	if (s->disk)
		disk_close(s->disk);
	if (s->ram)
		ram_close(s->ram);
	config_free(&s->cfg);
	pthread_mutex_destroy(&s->qlock);
	pthread_cond_destroy(&s->qcond);
	pthread_mutex_destroy(&s->elock);
	pthread_cond_destroy(&s->econd);
	free(s);
}

KVT_API void kvt_close(kvt_store *s)
{
	if (!s)
		return;
	store_teardown(s);
}

KVT_API int kvt_put(kvt_store *s, kvt_key key, const void *data, size_t len)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_put: store is NULL");
	kvt_op op = { key, (void *)data, len, 0 };
	uint64_t t0 = kvt_now_ns();
	int rc = put_ops(s, &op, 1, "kvt_put");
	hist_record(&s->put_lat, kvt_now_ns() - t0);
	ctr_add(&s->puts, 1);
	return rc;
}

KVT_API int kvt_get(kvt_store *s, kvt_key key, void *buf, size_t cap, size_t *len)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_get: store is NULL");
	if (!len)
		return kvt_fail(-EINVAL, "kvt_get: len is NULL");
	int rc = check_get_args(buf, cap, "kvt_get");
	if (rc)
		return rc;
	uint64_t t0 = kvt_now_ns();
	rc = get_one(s, key, buf, cap, len);
	hist_record(&s->get_lat, kvt_now_ns() - t0);
	ctr_add(&s->gets, 1);
	return rc;
}

/*
 * Extends a prefix that ends locally at keys[i] with the members that own
 * the keys: keys held here or by their owner, up to the first key that is
 * neither (or is its own here), one round trip per owner. Returns the new
 * prefix length.
 */
static size_t lookup_peers(kvt_store *s, const kvt_key *keys, size_t n, size_t i,
			   int lease, uint64_t deadline)
{
	size_t end = i, m = n - i < PEER_KEYS_MAX ? n - i : PEER_KEYS_MAX;
	uint8_t *here = calloc(m, 1);     /* held here, or its owner said so */
	uint8_t *taken = calloc(m, 1);
	int *owner = calloc(m, sizeof(int)); /* -1: nobody to ask */
	kvt_key *ask = calloc(m, sizeof(kvt_key));
	size_t *idx = calloc(m, sizeof(size_t));
	uint8_t *present = calloc(m, 1);

	if (!here || !taken || !owner || !ask || !idx || !present)
		goto out;
	for (; end < i + m; end++) {
		size_t j = end - i;

		owner[j] = remote_owner(s, keys[end]);
		if (end > i && local_has(s, keys[end], lease, deadline)) {
			here[j] = 1;
			owner[j] = -1;
		} else if (owner[j] < 0) {
			break;
		}
	}
	for (size_t a = 0; a < end - i; a++) {
		size_t k = owner_group(owner, taken, end - i, a, idx);

		for (size_t j = 0; j < k; j++)
			ask[j] = keys[i + idx[j]];
		if (k && peer_lookup(s->peer, (unsigned)owner[a], ask, k, lease, present) == 0)
			for (size_t j = 0; j < k; j++)
				here[idx[j]] = present[j];
	}
	size_t j = 0;
	while (i + j < end && here[j])
		j++;
	i += j;
out:
	free(here);
	free(taken);
	free(owner);
	free(ask);
	free(idx);
	free(present);
	return i;
}

KVT_API int kvt_lookup(kvt_store *s, const kvt_key *keys, size_t n,
		       unsigned flags, size_t *found)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_lookup: store is NULL");
	if (!found)
		return kvt_fail(-EINVAL, "kvt_lookup: found is NULL");
	if (!keys && n)
		return kvt_fail(-EINVAL, "kvt_lookup: keys is NULL but n is %zu", n);
	if (flags & ~KVT_LEASE)
		return kvt_fail(-EINVAL, "kvt_lookup: unknown flags 0x%x", flags & ~KVT_LEASE);

	int lease = (flags & KVT_LEASE) != 0;
	uint64_t deadline = lease ? kvt_now_ns() + (uint64_t)s->cfg.lease_ms * 1000000ull : 0;
	size_t i;

	/* Absent from RAM, or present but past the RAM lease cap: a disk copy
	 * can still be leased (it holds no RAM); otherwise the prefix ends
	 * here, unless another member owns the key. */
	for (i = 0; i < n && local_has(s, keys[i], lease, deadline); i++)
		;
	if (i < n && s->peer && remote_owner(s, keys[i]) >= 0)
		i = lookup_peers(s, keys, n, i, lease, deadline);
	*found = i;
	ctr_add(&s->lookups, 1);
	ctr_add(&s->lookup_keys, n);
	ctr_add(&s->lookup_found, i);
	return 0;
}

KVT_API int kvt_release(kvt_store *s, const kvt_key *keys, size_t n)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_release: store is NULL");
	if (!keys && n)
		return kvt_fail(-EINVAL, "kvt_release: keys is NULL but n is %zu", n);
	if (n > INT32_MAX)
		return kvt_fail(-EINVAL, "kvt_release: n %zu is too large", n);
	int ended = release_local(s, keys, n);
	/* leases the owners hold for this node end too (best effort) */
	if (s->peer && n) {
		int *owner = malloc(sizeof(int) * n);
		uint8_t *taken = calloc(n, 1);
		size_t *idx = malloc(sizeof(size_t) * n);
		kvt_key *ks = malloc(sizeof(*ks) * n);
		for (size_t i = 0; owner && taken && idx && ks && i < n; i++)
			owner[i] = remote_owner(s, keys[i]);
		for (size_t a = 0; owner && taken && idx && ks && a < n; a++) {
			size_t k = owner_group(owner, taken, n, a, idx);
			for (size_t j = 0; j < k; j++)
				ks[j] = keys[idx[j]];
			if (k)
				peer_release(s->peer, (unsigned)owner[a], ks, k);
		}
		free(owner);
		free(taken);
		free(idx);
		free(ks);
	}
	return ended;
}

KVT_API int kvt_remove(kvt_store *s, kvt_key key)
{
	char kb[34];

	if (!s)
		return kvt_fail(-EINVAL, "kvt_remove: store is NULL");
	int r1 = ram_remove(s->ram, key);
	int r2 = s->disk ? disk_remove(s->disk, key) : -ENOENT;
	/* Again, now that the disk has forgotten it: a get that read the disk
	 * before can no longer promote it (ram_promote), and one that promoted
	 * it meanwhile has its copy removed here. */
	int r3 = s->disk ? ram_remove(s->ram, key) : -ENOENT;
	if (r1 == 0 || r2 == 0 || r3 == 0)
		return 0;
	return kvt_fail(-ENOENT, "kvt_remove: key %s is not stored", kvt_key_str(key, kb));
}

KVT_API int kvt_arena(kvt_store *s, void **base, size_t *len)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_arena: store is NULL");
	if (base)
		*base = ram_arena_base(s->ram);
	if (len)
		*len = ram_arena_size(s->ram);
	return 0;
}

KVT_API int kvt_stats_json(kvt_store *s, char *buf, size_t cap)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_stats_json: store is NULL");
	if (!buf && cap)
		return kvt_fail(-EINVAL, "kvt_stats_json: buf is NULL but cap is %zu", cap);

	json_t *root = json_object(), *st = json_object(), *ram = json_object();
#define SET_U(o, name, v) json_object_set_new(o, name, json_integer((json_int_t)(v)))
	json_object_set_new(root, "version", json_string(kvt_version()));
	SET_U(st, "gets", ctr_get(&s->gets));
	SET_U(st, "puts", ctr_get(&s->puts));
	SET_U(st, "hits_ram", ctr_get(&s->hits_ram));
	SET_U(st, "hits_disk", ctr_get(&s->hits_disk));
	SET_U(st, "hits_peer", ctr_get(&s->hits_peer));
	SET_U(st, "peer_puts", ctr_get(&s->peer_puts));
	SET_U(st, "peer_put_failures", ctr_get(&s->peer_put_failures));
	SET_U(st, "misses", ctr_get(&s->misses));
	SET_U(st, "checksum_misses", ctr_get(&s->checksum_misses));
	SET_U(st, "errors", ctr_get(&s->errors));
	SET_U(st, "refused_puts", ctr_get(&s->refused_puts));
	SET_U(st, "write_arounds", ctr_get(&s->write_arounds));
	SET_U(st, "write_throughs", ctr_get(&s->write_through));
	SET_U(st, "promotions", ctr_get(&s->promotions));
	SET_U(st, "lookups", ctr_get(&s->lookups));
	SET_U(st, "lookup_keys", ctr_get(&s->lookup_keys));
	SET_U(st, "lookup_found", ctr_get(&s->lookup_found));
	SET_U(st, "batches", ctr_get(&s->batches));
	json_object_set_new(st, "get_latency", hist_json_us(&s->get_lat));
	json_object_set_new(st, "put_latency", hist_json_us(&s->put_lat));
#undef SET_U
	json_object_set_new(root, "store", st);
	ram_stats(s->ram, ram);
	json_object_set_new(root, "ram", ram);
	if (s->disk) {
		json_t *d = json_object();
		disk_stats(s->disk, d);
		json_object_set_new(root, "disk", d);
	}
	json_t *sl = json_object();
	slot_stats(s->slots, sl);
	json_object_set_new(root, "slots", sl);
	if (s->peer) {
		json_t *p = json_object();
		peer_stats(s->peer, p);
		json_object_set_new(root, "peer", p);
	}
	char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(root);
	if (!text)
		return kvt_fail(-ENOMEM, "kvt_stats_json: out of memory");
	size_t n = strlen(text);
	if (cap) {
		size_t c = n < cap - 1 ? n : cap - 1;
		memcpy(buf, text, c);
		buf[c] = 0;
	}
	free(text);
	if (n > INT32_MAX)
		return kvt_fail(-EOVERFLOW, "kvt_stats_json: document too large");
	return (int)n;
}

/* --- batches ------------------------------------------------------------------- */

static int run_put_batch(kvt_store *s, kvt_op *ops, size_t n)
{
	uint64_t t0 = kvt_now_ns();
	int rc = put_ops(s, ops, n, "kvt_put_batch");
	uint64_t dt = n ? (kvt_now_ns() - t0) / n : 0;
	for (size_t i = 0; i < n; i++)
		hist_record(&s->put_lat, dt);
	ctr_add(&s->puts, n);
	ctr_add(&s->batches, 1);
	return rc;
}

/*
 * Reorders ops[0..n), n <= CHUNK, and idx[] with them so that the ops whose
 * buffer overlaps another's come last; returns how many come before. Those
 * are loaded one at a time, each promoted from its buffer before the next
 * load overwrites it.
 */
static size_t shared_last(kvt_op *ops, size_t *idx, size_t n)
{
	uint8_t shared[CHUNK];
	kvt_op t[CHUNK];
	size_t ti[CHUNK], a = 0, nalone = 0;

	kvt_ops_shared(ops, n, shared);
	for (size_t i = 0; i < n; i++)
		nalone += !shared[i];
	if (nalone == n)
		return n;
	for (uint8_t pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++)
			if (shared[i] == pass) {
				t[a] = ops[i];
				ti[a++] = idx[i];
			}
	memcpy(ops, t, n * sizeof(*ops));
	memcpy(idx, ti, n * sizeof(*idx));
	return nalone;
}

/* Sets op from its owner's answer p (gen: ram_gen before the ask); counts. */
static void peer_result_to(kvt_store *s, kvt_op *op, const kvt_op *p, uint64_t gen)
{
	int rc = peer_result(p->result);

	op->result = rc;
	if (rc == 0 || rc == -ENOBUFS)
		op->len = p->len;
	if (rc == 0) {
		ctr_add(&s->hits_peer, 1);
		promote(s, op->key, op->buf, op->len, gen, NULL);
	} else {
		count_get(s, rc, 0);
	}
}

/*
 * The local misses ops[miss[0..nmiss)] (each len its capacity again) from
 * their owners: one round trip per owner. Counts every outcome; a member
 * that cannot answer makes its keys misses (-ENOENT), a slow one
 * -ETIMEDOUT.
 */
static void get_from_peers(kvt_store *s, kvt_op *ops, const size_t *miss,
			   const int *owner, const uint64_t *gen, size_t nmiss)
{
	kvt_op pops[CHUNK];
	size_t idx[CHUNK];
	uint8_t taken[CHUNK] = { 0 };

	for (size_t a = 0; a < nmiss; a++) {
		size_t k = owner_group(owner, taken, nmiss, a, idx);

		if (!k)
			continue;
		for (size_t j = 0; j < k; j++) {
			idx[j] = miss[idx[j]];
			pops[j] = ops[idx[j]];
		}
		size_t nalone = shared_last(pops, idx, k);
		for (size_t j = 0, m; j < k; j += m) {
			m = j < nalone ? nalone - j : 1;
			peer_get_batch(s->peer, (unsigned)owner[a], pops + j, m);
			for (size_t x = j; x < j + m; x++)
				peer_result_to(s, &ops[idx[x]], &pops[x], gen[idx[x]]);
		}
	}
}

/*
 * Loads ops[0..n), n <= CHUNK: RAM first, then every RAM miss of the chunk
 * from disk in one submission, promoting disk hits, then what is still
 * missing from the members that own it. Misses whose buffers overlap go to
 * the disk (and to their owner) one at a time, after the others.
 */
static void get_chunk(kvt_store *s, kvt_op *ops, size_t n)
{
	size_t miss[CHUNK], nmiss = 0, pmiss[CHUNK], npmiss = 0;
	size_t cap[CHUNK];
	int owner[CHUNK], powner[CHUNK];
	uint64_t gen[CHUNK], sum[CHUNK];
	kvt_op dops[CHUNK];

	for (size_t i = 0; i < n; i++) {
		int rc = check_get_args(ops[i].buf, ops[i].len, "kvt_get_batch");
		if (rc) {
			ops[i].result = rc;
			continue;
		}
		cap[i] = ops[i].len;
		owner[i] = remote_owner(s, ops[i].key);
		gen[i] = ram_gen(s->ram, ops[i].key);
		rc = ram_get(s->ram, ops[i].key, ops[i].buf, cap[i], &ops[i].len);
		if (rc == -ENOENT && s->disk) {
			ops[i].len = cap[i];
			miss[nmiss] = i;
			dops[nmiss++] = ops[i];
			continue;
		}
		if (rc == -ENOENT && owner[i] >= 0) {
			ops[i].len = cap[i];
			powner[npmiss] = owner[i];
			pmiss[npmiss++] = i;
			continue;
		}
		count_get(s, rc, 0);
		ops[i].result = rc;
	}
	size_t nalone = shared_last(dops, miss, nmiss);
	for (size_t j = 0, m; j < nmiss; j += m) {
		m = j < nalone ? nalone - j : 1;
		disk_get_batch_sums(s->disk, dops + j, m, sum + j);
		for (size_t x = j; x < j + m; x++) {
			size_t i = miss[x];
			kvt_op *op = &ops[i];

			op->result = dops[x].result;
			op->len = dops[x].len;
			if (op->result == -ENOENT && owner[i] >= 0) {
				op->len = cap[i];
				powner[npmiss] = owner[i];
				pmiss[npmiss++] = i;
				continue;
			}
			count_get(s, op->result, 1);
			if (op->result == 0)
				promote(s, op->key, op->buf, op->len, gen[i], &sum[x]);
		}
	}
	if (npmiss)
		get_from_peers(s, ops, pmiss, powner, gen, npmiss);
}

static int run_get_batch(kvt_store *s, kvt_op *ops, size_t n)
{
	uint64_t t0 = kvt_now_ns();

	for (size_t i = 0; i < n; i += CHUNK)
		get_chunk(s, ops + i, n - i < CHUNK ? n - i : CHUNK);
	uint64_t dt = n ? (kvt_now_ns() - t0) / n : 0;
	for (size_t i = 0; i < n; i++)
		hist_record(&s->get_lat, dt);
	ctr_add(&s->gets, n);
	ctr_add(&s->batches, 1);
	int rc = first_failure(ops, n);
	if (rc) {
		char kb[34];
		for (size_t i = 0; i < n; i++)
			if (ops[i].result == rc) {
				kvt_set_error("kvt_get_batch: op %zu (key %s): %s", i,
					      kvt_key_str(ops[i].key, kb), kvt_strerror(rc));
				break;
			}
	}
	return rc;
}

KVT_API int kvt_put_batch(kvt_store *s, kvt_op *ops, size_t n)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_put_batch: store is NULL");
	if (!ops && n)
		return kvt_fail(-EINVAL, "kvt_put_batch: ops is NULL but n is %zu", n);
	return run_put_batch(s, ops, n);
}

KVT_API int kvt_get_batch(kvt_store *s, kvt_op *ops, size_t n)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_get_batch: store is NULL");
	if (!ops && n)
		return kvt_fail(-EINVAL, "kvt_get_batch: ops is NULL but n is %zu", n);
	return run_get_batch(s, ops, n);
}

/* --- asynchronous batches ------------------------------------------------------ */

static void batch_complete(struct kvt_batch *b, int result)
{
	pthread_mutex_lock(&b->lock);
	b->result = result;
	b->done = 1;
	if (b->efd >= 0) {
		uint64_t one = 1;
		ssize_t w = write(b->efd, &one, sizeof(one));
		(void)w; /* an eventfd counter far below its maximum cannot fail */
	}
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

static void *worker_main(void *arg)
{
	kvt_store *s = arg;

	for (;;) {
		pthread_mutex_lock(&s->qlock);
		while (!s->qhead && !s->stopping)
			pthread_cond_wait(&s->qcond, &s->qlock);
		struct kvt_batch *b = s->qhead;
		if (!b) { /* stopping and drained */
			pthread_mutex_unlock(&s->qlock);
			return NULL;
		}
		s->qhead = b->qnext;
		if (!s->qhead)
			s->qtail = NULL;
		pthread_mutex_unlock(&s->qlock);

		int rc = b->opcode == KVT_OP_GET ? run_get_batch(s, b->ops, b->n)
						 : run_put_batch(s, b->ops, b->n);
		batch_complete(b, rc);
	}
}

KVT_API int kvt_batch_submit(kvt_store *s, int opcode, kvt_op *ops, size_t n,
			     kvt_batch **out)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_batch_submit: store is NULL");
	if (!out)
		return kvt_fail(-EINVAL, "kvt_batch_submit: out is NULL");
	if (opcode != KVT_OP_GET && opcode != KVT_OP_PUT)
		return kvt_fail(-EINVAL, "kvt_batch_submit: unknown opcode %d", opcode);
	if (!ops && n)
		return kvt_fail(-EINVAL, "kvt_batch_submit: ops is NULL but n is %zu", n);

	struct kvt_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return kvt_fail(-ENOMEM, "kvt_batch_submit: out of memory");
	b->s = s;
	b->opcode = opcode;
	b->ops = ops;
	b->n = n;
	b->efd = -1;
	b->result = -EINPROGRESS;
	pthread_mutex_init(&b->lock, NULL);
	cond_init_monotonic(&b->cond);

	pthread_mutex_lock(&s->qlock);
	if (s->stopping) {
		pthread_mutex_unlock(&s->qlock);
		pthread_mutex_destroy(&b->lock);
		pthread_cond_destroy(&b->cond);
		free(b);
		return kvt_fail(-ESHUTDOWN, "kvt_batch_submit: the store is closing");
	}
	if (s->qtail)
		s->qtail->qnext = b;
	else
		s->qhead = b;
	s->qtail = b;
	pthread_cond_signal(&s->qcond);
	pthread_mutex_unlock(&s->qlock);
	*out = b;
	return 0;
}

KVT_API int kvt_batch_wait(kvt_batch *b, int timeout_ms)
{
	int rc = 0;

	if (!b)
		return kvt_fail(-EINVAL, "kvt_batch_wait: batch is NULL");
	pthread_mutex_lock(&b->lock);
	if (timeout_ms < 0) {
		while (!b->done)
			pthread_cond_wait(&b->cond, &b->lock);
	} else {
		struct timespec ts = deadline_in_ms(timeout_ms);
		while (!b->done && rc == 0)
			rc = pthread_cond_timedwait(&b->cond, &b->lock, &ts);
		rc = b->done ? 0 : -ETIMEDOUT;
	}
	pthread_mutex_unlock(&b->lock);
	if (rc)
		kvt_set_error("kvt_batch_wait: not complete after %d ms", timeout_ms);
	return rc;
}

KVT_API int kvt_batch_poll(kvt_batch *b)
{
	if (!b)
		return kvt_fail(-EINVAL, "kvt_batch_poll: batch is NULL");
	pthread_mutex_lock(&b->lock);
	int done = b->done;
	pthread_mutex_unlock(&b->lock);
	return done;
}

KVT_API int kvt_batch_fd(kvt_batch *b)
{
	if (!b)
		return kvt_fail(-EINVAL, "kvt_batch_fd: batch is NULL");
	pthread_mutex_lock(&b->lock);
	if (b->efd < 0) {
		b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (b->efd < 0) {
			int e = errno;
			pthread_mutex_unlock(&b->lock);
			return kvt_fail(-e, "kvt_batch_fd: eventfd: %s", kvt_strerror(e));
		}
		if (b->done) {
			uint64_t one = 1;
			ssize_t w = write(b->efd, &one, sizeof(one));
			(void)w;
		}
	}
	int fd = b->efd;
	pthread_mutex_unlock(&b->lock);
	return fd;
}

KVT_API int kvt_batch_result(kvt_batch *b)
{
	if (!b)
		return kvt_fail(-EINVAL, "kvt_batch_result: batch is NULL");
	pthread_mutex_lock(&b->lock);
	int rc = b->done ? b->result : -EINPROGRESS;
	pthread_mutex_unlock(&b->lock);
	return rc;
}

KVT_API void kvt_batch_free(kvt_batch *b)
{
	if (!b)
		return;
	kvt_batch_wait(b, -1);
	if (b->efd >= 0)
		close(b->efd);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	free(b);
}
