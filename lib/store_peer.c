/*
 * store_peer.c - the store's routing to peers: the owner of a key, puts
 * forwarded to owners, lookups and gets asked of them (results counted, and
 * promoted into RAM like a lower tier's only with peers.promote: the owner
 * keeps the block, and a copy here would cost the loader a second pass over
 * every byte it receives), and what this node serves its
 * peers (struct peer_local): its own tiers, never forwarding. The peer
 * tier's protocol and transports are peer.c's.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

/* The owner of key when it is another member, else -1. */
int store_owner(kvt_store *s, kvt_key key)
{
	if (!s->peer)
		return -1;
	unsigned o = peer_owner(s->peer, key);
	return o == peer_self(s->peer) ? -1 : (int)o;
}

/* A peer's answer as a get result: a member that cannot answer makes its
 * keys misses; only a slow one (-ETIMEDOUT) says so. */
int store_peer_result(int rc)
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

/* A block loaded from its owner into this node's RAM, with peers.promote
 * (and disk.promote) only. */
static void peer_promote(kvt_store *s, kvt_key key, const void *buf, size_t len,
			 uint64_t gen, const uint64_t *sum)
{
	if (s->cfg.peer_promote)
		store_promote(s, key, buf, len, gen, sum);
}

/* The owner's copy of key into buf, verified (*sum), counted as a hit or
 * a miss; the peer tier's result. */
static int read_peer(kvt_store *s, int owner, kvt_key key, void *buf, size_t cap,
		     size_t *len, uint64_t *sum)
{
	kvt_op op = { .key = key, .buf = buf, .len = cap };

	peer_get_batch(s->peer, (unsigned)owner, &op, 1, sum);
	if (op.result == 0) {
		ctr_add(&s->hits_peer, 1);
		*len = op.len;
	} else {
		if (op.result == -ENOBUFS)
			*len = op.len;
		store_count_get(s, store_peer_result(op.result), 0);
	}
	return op.result;
}

/* After a local miss: the owner's copy, if another member owns key. */
int store_get_peer(kvt_store *s, int owner, kvt_key key, void *buf, size_t cap,
		   size_t *len)
{
	uint64_t gen = ram_gen(s->ram, key), sum = 0;
	int rc = read_peer(s, owner, key, buf, cap, len, &sum);

	if (rc == 0)
		peer_promote(s, key, buf, *len, gen, &sum);
	return rc;
}

/* The slots' read of a block a peer owns (struct slot_peers): no
 * promotion here (the slot's own extent may become the RAM block), and a
 * member that cannot answer reads as a miss. */
static int slot_owner(void *arg, kvt_key key)
{
	return store_owner(arg, key);
}

static int slot_read(void *arg, int owner, kvt_key key, void *buf, size_t cap, size_t *len,
		     uint64_t *sum)
{
	return store_peer_result(read_peer(arg, owner, key, buf, cap, len, sum));
}

static void slot_put(void *arg, kvt_key key, const void *data, size_t len)
{
	kvt_op op = { .key = key, .buf = (void *)data, .len = len, .result = 0 };

	store_put_to_peers(arg, &op, 1);
}

void store_slot_peers(kvt_store *s)
{
	struct slot_peers p = { slot_owner, slot_read, slot_put, s };

	slot_set_peers(s->slots, &p);
}

/*
 * One round trip's worth: the entries from a on whose owner is owner[a]
 * (owner -1: none to ask) and that no earlier group took. Marks them taken,
 * writes their indexes to idx and returns how many (0 when a is taken).
 */
size_t store_owner_group(const int *owner, uint8_t *taken, size_t n, size_t a,
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
void store_put_to_peers(kvt_store *s, kvt_op *ops, size_t n)
{
	kvt_op pops[CHUNK];
	size_t idx[CHUNK];
	int owner[CHUNK], res[CHUNK];
	uint8_t taken[CHUNK] = { 0 };

	for (size_t i = 0; i < n; i++)
		owner[i] = ops[i].result == 0 || ops[i].result == -ENOSPC ?
			   store_owner(s, ops[i].key) : -1;
	for (size_t a = 0; a < n; a++) {
		size_t k = store_owner_group(owner, taken, n, a, idx);

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

static void serve_lookup(void *arg, const kvt_key *keys, size_t n, int lease,
		  uint8_t *present)
{
	kvt_store *s = arg;
	uint64_t deadline = lease ? store_lease_deadline(s) : 0;

	for (size_t i = 0; i < n; i++)
		present[i] = (uint8_t)store_local_has(s, keys[i], lease, deadline);
}

struct copy_sum {
	void *buf;
	uint64_t sum;
};

/* ram_visit's callback for serve_get: the block's bytes and its checksum. */
static int copy_with_sum(void *arg, const void *block, size_t len, uint64_t sum)
{
	struct copy_sum *c = arg;

	memcpy(c->buf, block, len);
	c->sum = sum;
	return 0;
}

/* Not counted in this node's gets and hits: the "peer" stats count what it
 * serves. A disk hit comes with the checksum the disk verified. */
static int serve_get(void *arg, kvt_key key, void *buf, size_t cap, size_t *len,
		     uint64_t *sum)
{
	kvt_store *s = arg;
	struct copy_sum c = { .buf = buf };
	int rc = ram_visit(s->ram, key, cap, copy_with_sum, &c, len);

	if (rc == 0)
		*sum = c.sum;
	else if (rc == -ENOENT && s->disk)
		rc = disk_get_sum(s->disk, key, buf, cap, len, sum);
	return rc;
}

static int serve_visit(void *arg, kvt_key key, size_t cap,
		int (*fn)(void *fnarg, const void *block, size_t len, uint64_t sum),
		void *fnarg, size_t *len)
{
	kvt_store *s = arg;

	return ram_visit(s->ram, key, cap, fn, fnarg, len);
}

static void serve_put(void *arg, kvt_op *ops, size_t n)
{
	store_put_ops_to(arg, ops, n, "peer put", 0);
}

static void serve_release(void *arg, const kvt_key *keys, size_t n)
{
	store_release_local(arg, keys, n);
}

/*
 * Extends a prefix that ends locally at keys[i] with the members that own
 * the keys: keys held here or by their owner, up to the first key that is
 * neither (or is its own here), one round trip per owner. Returns the new
 * prefix length.
 */
size_t store_lookup_peers(kvt_store *s, const kvt_key *keys, size_t n, size_t i,
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

		owner[j] = store_owner(s, keys[end]);
		if (end > i && store_local_has(s, keys[end], lease, deadline)) {
			here[j] = 1;
			owner[j] = -1;
		} else if (owner[j] < 0) {
			break;
		}
	}
	for (size_t a = 0; a < end - i; a++) {
		size_t k = store_owner_group(owner, taken, end - i, a, idx);

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

/* Sets op from its owner's answer p (gen: ram_gen before the ask; sum: the
 * checksum the answer was verified against); counts. */
static void peer_result_to(kvt_store *s, kvt_op *op, const kvt_op *p, uint64_t gen,
			   const uint64_t *sum)
{
	int rc = store_peer_result(p->result);

	op->result = rc;
	if (rc == 0 || rc == -ENOBUFS)
		op->len = p->len;
	if (rc == 0) {
		ctr_add(&s->hits_peer, 1);
		peer_promote(s, op->key, op->buf, op->len, gen, sum);
	} else {
		store_count_get(s, rc, 0);
	}
}

/*
 * The local misses ops[miss[0..nmiss)] (each len its capacity again) from
 * their owners: one round trip per owner. Counts every outcome; a member
 * that cannot answer makes its keys misses (-ENOENT), a slow one
 * -ETIMEDOUT.
 */
void store_get_from_peers(kvt_store *s, kvt_op *ops, const size_t *miss,
			  const int *owner, const uint64_t *gen, size_t nmiss)
{
	kvt_op pops[CHUNK];
	size_t idx[CHUNK];
	uint64_t sum[CHUNK];
	uint8_t taken[CHUNK] = { 0 };

	for (size_t a = 0; a < nmiss; a++) {
		size_t k = store_owner_group(owner, taken, nmiss, a, idx);

		if (!k)
			continue;
		for (size_t j = 0; j < k; j++) {
			idx[j] = miss[idx[j]];
			pops[j] = ops[idx[j]];
		}
		size_t nalone = store_shared_last(pops, idx, k);
		for (size_t j = 0, m; j < k; j += m) {
			m = j < nalone ? nalone - j : 1;
			peer_get_batch(s->peer, (unsigned)owner[a], pops + j, m, sum + j);
			for (size_t x = j; x < j + m; x++)
				peer_result_to(s, &ops[idx[x]], &pops[x], gen[idx[x]], &sum[x]);
		}
	}
}

/* The RDMA transport's: blocks pinned in place for members to READ, and
 * arena reserved for blocks members offer, published once verified. */
static int serve_pin(void *arg, kvt_key key, size_t cap, uint64_t *ref, void **block,
		     size_t *len, uint64_t *sum)
{
	kvt_store *s = arg;
	uint64_t off;
	int rc = ram_pin_sum(s->ram, key, cap, ref, &off, len, sum);

	if (rc == 0)
		*block = (uint8_t *)ram_arena_base(s->ram) + off;
	return rc;
}

static void serve_unpin(void *arg, uint64_t ref)
{
	kvt_store *s = arg;

	ram_unpin(s->ram, ref);
}

/* A member's RDMA offer reserves space here and is published once READ and
 * verified. Without a disk tier, a block the evictor would drop as soon as
 * it came in is refused (-ENOSPC) at both steps, as a put here would be:
 * else the member's put returned 0 for a block that was gone. */
static int serve_reserve(void *arg, size_t len, void **at, uint64_t *handle)
{
	kvt_store *s = arg;

	if (ram_put_refused(s->ram, len, 0))
		return -ENOSPC;
	int64_t off = ram_slot_alloc(s->ram, len, 1);

	if (off < 0)
		return (int)off;
	*handle = (uint64_t)off;
	*at = (uint8_t *)ram_arena_base(s->ram) + off;
	return 0;
}

static int serve_publish(void *arg, kvt_key key, uint64_t handle, size_t len,
			 uint64_t sum)
{
	kvt_store *s = arg;
	int rc = ram_slot_publish(s->ram, key, handle, len, &sum);

	if (rc >= 0 && ram_above_high(s->ram))
		store_kick_evictor(s);
	return rc < 0 ? rc : 0;
}

static void serve_unreserve(void *arg, uint64_t handle)
{
	kvt_store *s = arg;

	ram_slot_free(s->ram, handle);
}

struct peer_local store_peer_local(kvt_store *s)
{
	struct peer_local local = { .arg = s, .lookup = serve_lookup,
		.get = serve_get, .visit = serve_visit, .put = serve_put,
		.release = serve_release, .pin = serve_pin, .unpin = serve_unpin,
		.reserve = serve_reserve, .publish = serve_publish,
		.unreserve = serve_unreserve };
	return local;
}
