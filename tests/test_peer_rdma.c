/*
 * test_peer_rdma.c - the peer tier's RDMA transport (lib/peer_rdma.c) on the
 * CPU: two stores' peer tiers on 127.0.0.1, their control frames over real
 * TCP and their bytes through the in-process fabric of fabric.h, which
 * injects what a soft-RoCE VM cannot produce on demand. Checks gets by
 * descriptor (READs of pinned RAM blocks, every byte verified, pins
 * released by UNPIN; straight into registered caller memory, which no
 * member can READ), puts by offer (the owner READs, verifies, publishes),
 * descriptors that carry the checksum kept with the block (bytes damaged in
 * the owner's RAM are a miss), the inline fallback (a block not in RAM, a
 * member without RDMA), and each
 * failure as a miss or a counted failure in bounded time with the link
 * redialled: a completion error, a queue pair in error, a disconnect in the
 * middle of a transfer, completions that never come (the deadline), an
 * offer whose READ fails (never visible, its reservation freed). An offer
 * whose space in the owner's arena crosses two registered pieces of it is
 * READ piece by piece and stored. Also: pins
 * lapse on the owner, a connection holding pins is not closed to make room
 * for another of its member, an owner's descriptor with an absurd hold_ms
 * is refused, one host's queue pairs are capped, a stranger's RDMA connection is refused, and
 * peers.transport "rdma" without a device fails kvt_open naming the address
 * while "auto" falls back to TCP.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fabric.h"
#include "internal.h"
#include "peer_int.h"
#include "ram.h"
#include "store_impl.h"
#include "util.h"

#define BLK 65536u
#define NB 24u
#define REQUEST_MS 300u

struct fx {
	kvt_store *s[2];
	struct peer_tier *t[2];
	int port[2];
	char addr[2][32];
	kvt_key keys[NB];          /* owned by b, stored in b's RAM */
	uint8_t *buf[NB];
};

static char logged[512];
static uint32_t tier_idle_ms = 60000, tier_request_ms = REQUEST_MS;
static unsigned tier_max_conns = 8;

/* Opens member self's tier over its store (local: instead of the store's
 * own, then with no arena to lend from). */
static int open_tier_with(struct fx *f, unsigned self, int transport,
			  const struct rlink_ops *ops, const struct peer_local *local,
			  struct peer_tier **out)
{
	char *names[] = { "a", "b" }, *addrs[] = { f->addr[0], f->addr[1] };
	struct ram_tier *r = f->s[self]->ram;
	struct peer_opts o = {
		.nmembers = 2, .names = names, .addrs = addrs, .self = self,
		.listen = f->addr[self], .max_block = 1 << 20, .connect_ms = 500,
		.request_ms = tier_request_ms, .down_ms = 100, .idle_ms = tier_idle_ms,
		.log_ms = 10000, .max_conns = tier_max_conns, .transport = transport,
		.rdma_ops = ops, .arena = local ? NULL : ram_arena_base(r),
		.arena_len = local ? 0 : ram_arena_size(r),
	};
	struct peer_local l = local ? *local : store_peer_local(f->s[self]);
	return peer_open(&o, &l, out);
}

static int open_tier(struct fx *f, unsigned self, int transport,
		     const struct rlink_ops *ops, struct peer_tier **out)
{
	return open_tier_with(f, self, transport, ops, NULL, out);
}

/* Two stores (b's RAM of b_ram), their tiers over the fabric; NB blocks
 * in b's RAM. */
static int setup_with(void **state, const char *b_ram)
{
	struct fx *f = calloc(1, sizeof(*f));
	char cfg[128];

	fabric_reset();
	for (int i = 0; i < 2; i++) {
		snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"%s\"%s}}",
			 i ? b_ram : "32MiB", i && strcmp(b_ram, "32MiB") ? ", \"mlock\": false" : "");
		assert_int_equal(kvt_open(cfg, &f->s[i]), 0);
		f->port[i] = test_free_port();
		snprintf(f->addr[i], sizeof(f->addr[i]), "127.0.0.1:%d", f->port[i]);
	}
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(open_tier(f, i, PEER_RDMA, &fake_ops, &f->t[i]), 0);
	for (unsigned i = 0; i < NB; i++) {
		f->keys[i] = test_key(1000 + i);
		store_put_block(f->s[1], f->keys[i], BLK);
		f->buf[i] = malloc(BLK);
	}
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_with(state, "32MiB");
}

/* b's arena is registered in two pieces (RLINK_PIECE each at most). */
static int setup_two_pieces(void **state)
{
	return setup_with(state, "1100MiB");
}

static int teardown(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < 2; i++) {
		peer_close(f->t[i]);
		kvt_close(f->s[i]);
	}
	for (unsigned i = 0; i < NB; i++)
		free(f->buf[i]);
	free(f);
	return 0;
}

/* A counter of the tier's stats: of member m (m >= 0), of the tier (-1) or
 * of its "rdma" section (-2). */
static long long tstat(struct peer_tier *t, int m, const char *name)
{
	json_t *o = json_object();
	struct stat_visitor v = stats_json_visitor(o);
	peer_stats(t, &v);
	json_t *sec = m >= 0 ? json_array_get(json_object_get(o, "members"), (size_t)m)
		     : m == -1 ? o : json_object_get(o, "rdma");
	json_t *x = json_object_get(sec, name);
	if (!x)
		fail_msg("no stat %s", name);
	long long r = json_is_true(x) ? 1 : json_integer_value(x);
	json_decref(o);
	return r;
}

static const char *transport(struct peer_tier *t)
{
	static char s[16];
	json_t *o = json_object();
	struct stat_visitor v = stats_json_visitor(o);
	peer_stats(t, &v);
	snprintf(s, sizeof(s), "%s", json_string_value(json_object_get(o, "transport")));
	json_decref(o);
	return s;
}

/* a gets keys[from..from+n) from b; returns peer_get_batch's result. */
static int get_n(struct fx *f, unsigned from, unsigned n, kvt_op *ops)
{
	for (unsigned i = 0; i < n; i++) {
		memset(f->buf[from + i], 0, BLK);
		ops[i] = (kvt_op){ .key = f->keys[from + i], .buf = f->buf[from + i], .len = BLK };
	}
	return peer_get_batch(f->t[0], 1, ops, n, NULL);
}

static void all_loaded(struct fx *f, unsigned from, unsigned n, const kvt_op *ops)
{
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, BLK);
		assert_true(check_block(f->keys[from + i], f->buf[from + i], BLK));
	}
}

/* b's pins: released by UNPIN frames that no one waits for */
static void wait_unpinned(struct fx *f)
{
	for (int i = 0; i < 400 && tstat(f->t[1], -2, "pins_held"); i++)
		usleep(5000);
	assert_int_equal(tstat(f->t[1], -2, "pins_held"), 0);
}

static void test_get_reads_pinned_blocks(void **state)
{
	struct fx *f = *state;
	kvt_op ops[NB];

	assert_string_equal(transport(f->t[0]), "rdma");
	assert_int_equal(get_n(f, 0, NB, ops), 0);
	all_loaded(f, 0, NB, ops);
	assert_int_equal(tstat(f->t[0], 1, "rdma_bytes_read"), (long long)NB * BLK);
	assert_int_equal(tstat(f->t[0], 1, "rdma_work_requests"), NB);
	assert_int_equal(tstat(f->t[0], 1, "rdma_inline"), 0);
	assert_int_equal(tstat(f->t[0], 1, "rdma_link"), 1);
	assert_int_equal(tstat(f->t[0], -1, "hits"), NB);
	assert_int_equal(tstat(f->t[1], -2, "blocks_pinned"), NB);
	assert_int_equal(tstat(f->t[1], -2, "pins_taken"), NB);
	wait_unpinned(f);
	assert_int_equal(tstat(f->t[1], -2, "pins_released"), NB);
	/* chained and signalled as rlink does: one link, dialled once */
	assert_int_equal(seen(&F.wrs), NB);
	assert_int_equal(tstat(f->t[0], -2, "links_dialled"), 1);
	assert_int_equal(tstat(f->t[1], -2, "links_accepted"), 1);

	/* a missing key and one too large for its buffer answer as over TCP */
	kvt_op miss[2] = {
		{ .key = test_key(1), .buf = f->buf[0], .len = BLK },
		{ .key = f->keys[1], .buf = f->buf[1], .len = BLK / 2 },
	};
	assert_int_equal(peer_get_batch(f->t[0], 1, miss, 2, NULL), 0);
	assert_int_equal(miss[0].result, -ENOENT);
	assert_int_equal(miss[1].result, -ENOBUFS);
	assert_int_equal(miss[1].len, BLK);
}

/* Caller memory registered with the device (kvt_mem_register's path):
 * gets into it READ straight there, none through staging; once
 * deregistered, through staging again. Over TCP there is nothing to
 * register. */
static void test_get_into_registered_memory(void **state)
{
	struct fx *f = *state;
	kvt_op ops[NB];
	uint8_t *mem = malloc((size_t)NB * BLK);

	assert_int_equal(peer_mem_register(f->t[0], mem, (size_t)NB * BLK), 0);
	assert_int_equal(tstat(f->t[0], -2, "caller_ranges"), 1);
	for (unsigned i = 0; i < NB; i++) {
		memset(mem + (size_t)i * BLK, 0, BLK);
		ops[i] = (kvt_op){ .key = f->keys[i], .buf = mem + (size_t)i * BLK, .len = BLK };
	}
	assert_int_equal(peer_get_batch(f->t[0], 1, ops, NB, NULL), 0);
	for (unsigned i = 0; i < NB; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_true(check_block(f->keys[i], mem + (size_t)i * BLK, BLK));
	}
	assert_int_equal(tstat(f->t[0], -2, "direct_reads"), NB);
	assert_int_equal(f->t[0]->m[1].stage_len, 0); /* no staging was needed */
	/* registered for local writes only: a member's READ of it with its
	 * key (never sent, but keys can be guessed) fails */
	uint8_t peek[64];
	int reads = -1;
	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < MRS; i++)
		if (F.mr[i].live && F.mr[i].addr == mem) {
			struct rlink_wr w = { .seg = { .local = peek, .rkey = F.mr[i].key,
						       .remote = (uintptr_t)mem,
						       .len = sizeof(peek) } };
			reads = run_wr(&w) == 0;
		}
	pthread_mutex_unlock(&F.lock);
	assert_int_equal(reads, 0);
	/* a mix: half into registered memory, half into plain buffers */
	for (unsigned i = 0; i < NB; i++)
		ops[i] = (kvt_op){ .key = f->keys[i], .len = BLK,
				   .buf = i % 2 ? f->buf[i] : mem + (size_t)i * BLK };
	assert_int_equal(peer_get_batch(f->t[0], 1, ops, NB, NULL), 0);
	for (unsigned i = 0; i < NB; i++)
		assert_true(check_block(f->keys[i], ops[i].buf, BLK));
	assert_int_equal(tstat(f->t[0], -2, "direct_reads"), NB + NB / 2);
	peer_mem_deregister(f->t[0], mem);
	assert_int_equal(tstat(f->t[0], -2, "caller_ranges"), 0);
	assert_int_equal(get_n(f, 0, NB, ops), 0);
	all_loaded(f, 0, NB, ops);
	assert_int_equal(tstat(f->t[0], -2, "direct_reads"), NB + NB / 2);
	free(mem);

	peer_close(f->t[1]);
	assert_int_equal(open_tier(f, 1, PEER_TCP, NULL, &f->t[1]), 0);
	assert_int_equal(peer_mem_register(f->t[1], f->buf[0], BLK), -ENOTSUP);
}

static void test_put_offer_is_pulled_and_verified(void **state)
{
	struct fx *f = *state;
	kvt_op ops[8];
	int res[8];

	for (unsigned i = 0; i < 8; i++) {
		ops[i] = (kvt_op){ .key = test_key(5000 + i), .buf = f->buf[i], .len = BLK };
		fill_block(ops[i].key, f->buf[i], BLK);
	}
	assert_int_equal(peer_put_batch(f->t[0], 1, ops, 8, res), 0);
	for (unsigned i = 0; i < 8; i++) {
		assert_int_equal(res[i], 0);
		assert_int_equal(store_get_block(f->s[1], ops[i].key, BLK), 0);
	}
	assert_int_equal(tstat(f->t[0], 1, "rdma_bytes_offered"), 8ll * BLK);
	assert_int_equal(tstat(f->t[1], 0, "rdma_bytes_read"), 8ll * BLK);
	assert_int_equal(tstat(f->t[1], -2, "pulled_bytes"), 8ll * BLK);
	assert_int_equal(tstat(f->t[0], -1, "bytes_out"), 0); /* nothing inline */
}

/*
 * An offer whose space reserved in the owner's arena crosses from one
 * registered piece of the arena into the next (an arena larger than 1 GiB
 * is registered in pieces of 1 GiB, each with its own keys): the owner
 * READs it in two segments, one per piece, and stores it, as any other.
 */
static void test_offer_across_two_registered_pieces(void **state)
{
	struct fx *f = *state;
	struct ram_tier *r = f->s[1]->ram;
	kvt_op op = { .key = test_key(9100), .buf = f->buf[0], .len = BLK };
	uint64_t ref, off;
	size_t len;
	int res = 1;

	/* b's next free space starts at next; take it up to half a block
	 * short of the first piece's end, so the offer's space crosses it */
	int64_t next = ram_slot_alloc(r, 4096, 0);
	assert_true(next >= 0);
	ram_slot_free(r, (uint64_t)next);
	int64_t hole = ram_slot_alloc(r, RLINK_PIECE - BLK / 2 - (uint64_t)next, 0);
	assert_int_equal(hole, next);
	fill_block(op.key, f->buf[0], BLK);
	assert_int_equal(peer_put_batch(f->t[0], 1, &op, 1, &res), 0);
	assert_int_equal(res, 0);
	assert_int_equal(store_get_block(f->s[1], op.key, BLK), 0);
	assert_int_equal(ram_pin(r, op.key, BLK, &ref, &off, &len), 0);
	ram_unpin(r, ref);
	assert_true(off < RLINK_PIECE && off + len > RLINK_PIECE);
	assert_int_equal(tstat(f->t[1], -2, "pulled_bytes"), BLK);
	assert_int_equal(tstat(f->t[1], -2, "pull_failures"), 0);
	ram_slot_free(r, (uint64_t)hole);
}

/* Flips a byte of key's block in b's RAM (a fault or a stray write, after
 * the block was made). */
static void damage(struct fx *f, kvt_key key)
{
	struct ram_tier *r = f->s[1]->ram;
	uint64_t ref, off;
	size_t len;

	assert_int_equal(ram_pin(r, key, BLK, &ref, &off, &len), 0);
	((uint8_t *)ram_arena_base(r))[off + len / 2] ^= 0x10;
	ram_unpin(r, ref);
}

/*
 * A descriptor carries the checksum kept with the block in the owner's
 * RAM, not one computed from its bytes as it is lent: bytes that changed
 * there since the block was made (a put; an offer pulled and published)
 * fail the reader's verification, a miss counted as a checksum failure,
 * and the other blocks of the batch load.
 */
static void test_descriptor_carries_the_kept_checksum(void **state)
{
	struct fx *f = *state;
	kvt_op ops[NB];
	int res[1];

	assert_int_equal(get_n(f, 0, NB, ops), 0);
	all_loaded(f, 0, NB, ops);
	wait_unpinned(f);
	damage(f, f->keys[3]);
	assert_int_equal(get_n(f, 0, NB, ops), 0);
	assert_int_equal(ops[3].result, -EBADMSG);
	assert_int_equal(tstat(f->t[0], -1, "checksum_failures"), 1);
	for (unsigned i = 0; i < NB; i++)
		if (i != 3)
			assert_true(ops[i].result == 0 && check_block(f->keys[i], f->buf[i], BLK));
	wait_unpinned(f);

	/* an offer pulled by b: published with the checksum it was verified
	 * against, damaged before anyone asks */
	kvt_op put = { .key = test_key(7000), .buf = f->buf[0], .len = BLK };
	fill_block(put.key, f->buf[0], BLK);
	assert_int_equal(peer_put_batch(f->t[0], 1, &put, 1, res), 0);
	assert_int_equal(res[0], 0);
	damage(f, put.key);
	memset(f->buf[0], 0, BLK);
	ops[0] = (kvt_op){ .key = put.key, .buf = f->buf[0], .len = BLK };
	assert_int_equal(peer_get_batch(f->t[0], 1, ops, 1, NULL), 0);
	assert_int_equal(ops[0].result, -EBADMSG);
	assert_int_equal(tstat(f->t[0], -1, "checksum_failures"), 2);
	assert_int_equal(tstat(f->t[0], 1, "rdma_inline"), 0);
	wait_unpinned(f);
}

/* One injected failure during a get: every block of the batch a miss, the
 * link closed and counted, nothing hung; the next get redials and loads. */
static void get_fails_then_recovers(struct fx *f, const char *counter)
{
	kvt_op ops[NB];
	uint64_t t0 = kvt_now_ns();

	get_n(f, 0, NB, ops);
	/* bounded: the READ deadline is within the pins' hold (2 x 300 + 1000 ms) */
	assert_true(kvt_now_ns() - t0 < 5000000000ull);
	for (unsigned i = 0; i < NB; i++)
		assert_int_not_equal(ops[i].result, 0);
	assert_int_equal(tstat(f->t[0], 1, "rdma_failures"), 1);
	assert_int_equal(tstat(f->t[0], 1, "rdma_link"), 0);
	if (counter)
		assert_int_equal(tstat(f->t[0], 1, counter), 1);
	wait_unpinned(f);
	assert_true(tstat(f->t[0], 1, "up")); /* the member itself answered */

	pthread_mutex_lock(&F.lock);
	F.fail_status_at = F.refuse_post = F.reset_after = F.stall = 0;
	pthread_mutex_unlock(&F.lock);
	assert_int_equal(get_n(f, 0, NB, ops), 0);
	all_loaded(f, 0, NB, ops);
	assert_int_equal(tstat(f->t[0], 1, "rdma_reconnects"), 1);
	assert_int_equal(tstat(f->t[0], 1, "rdma_link"), 1);
}

static void test_completion_error_is_a_miss(void **state)
{
	struct fx *f = *state;

	pthread_mutex_lock(&F.lock);
	F.fail_status_at = F.wrs + 5;
	pthread_mutex_unlock(&F.lock);
	get_fails_then_recovers(f, "rdma_completion_errors");
}

static void test_qp_error_is_a_miss(void **state)
{
	struct fx *f = *state;

	pthread_mutex_lock(&F.lock);
	F.refuse_post = 1;
	pthread_mutex_unlock(&F.lock);
	get_fails_then_recovers(f, NULL);
	assert_int_equal(tstat(f->t[0], 1, "rdma_completion_errors"), 0);
}

static void test_disconnect_mid_transfer_is_a_miss(void **state)
{
	struct fx *f = *state;

	pthread_mutex_lock(&F.lock);
	F.reset_after = F.wrs + 10;
	pthread_mutex_unlock(&F.lock);
	get_fails_then_recovers(f, NULL);
}

static void test_deadline_is_a_miss(void **state)
{
	struct fx *f = *state;

	pthread_mutex_lock(&F.lock);
	F.stall = 1;
	pthread_mutex_unlock(&F.lock);
	get_fails_then_recovers(f, NULL);
}

/* The owner's READ of an offer fails (the requester's side broke): counted,
 * never visible, the reserved arena freed. */
struct put_arg {
	struct fx *f;
	kvt_op op;
	int res;
};

static void *put_one(void *arg)
{
	struct put_arg *a = arg;

	peer_put_batch(a->f->t[0], 1, &a->op, 1, &a->res);
	return NULL;
}

/*
 * The owner's statistics do not wait for a transfer in flight on a
 * member's link (which holds the link up to its deadline): with the READ
 * of an offer stalled, b's stats (its member a's rdma_link among them)
 * come back before the pull's deadline breaks the link.
 */
static void test_stats_do_not_wait_for_a_transfer(void **state)
{
	struct fx *f = *state;
	struct put_arg a = { .f = f, .op = { .key = test_key(7100), .buf = f->buf[0],
					     .len = BLK } };
	pthread_t t;

	fill_block(a.op.key, f->buf[0], BLK);
	pthread_mutex_lock(&F.lock);
	F.stall = 1;
	int wrs = F.wrs, drops = F.dialled_drops;
	pthread_mutex_unlock(&F.lock);
	assert_int_equal(pthread_create(&t, NULL, put_one, &a), 0);
	while (seen(&F.wrs) == wrs)
		usleep(1000);
	/* the pull's READ is posted and held back: b's link to a is busy
	 * until the pull's deadline breaks it (its queue pair dropped) */
	assert_int_equal(tstat(f->t[1], 0, "rdma_link"), 1);
	assert_int_equal(seen(&F.dialled_drops), drops);
	pthread_join(t, NULL);
	assert_int_equal(a.res, -EIO);
	/* then the pull ends at its deadline (after a's own, maybe) */
	for (int i = 0; i < 500 && !tstat(f->t[1], -2, "pull_failures"); i++)
		usleep(10000);
	assert_int_equal(tstat(f->t[1], -2, "pull_failures"), 1);
	assert_int_equal(seen(&F.dialled_drops), drops + 1);
	pthread_mutex_lock(&F.lock);
	F.stall = 0;
	pthread_mutex_unlock(&F.lock);
}

static void test_offer_whose_read_fails_is_never_visible(void **state)
{
	struct fx *f = *state;
	kvt_op ops[4];
	int res[4];
	long long used = store_stat(f->s[1], "ram", "bytes_used");

	for (unsigned i = 0; i < 4; i++) {
		ops[i] = (kvt_op){ .key = test_key(7000 + i), .buf = f->buf[i], .len = BLK };
		fill_block(ops[i].key, f->buf[i], BLK);
	}
	pthread_mutex_lock(&F.lock);
	F.fail_status_at = F.wrs + 2;
	pthread_mutex_unlock(&F.lock);
	assert_int_equal(peer_put_batch(f->t[0], 1, ops, 4, res), 0);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(res[i], -EIO);
		size_t len;
		assert_int_equal(kvt_get(f->s[1], ops[i].key, f->buf[4], BLK, &len), -ENOENT);
	}
	assert_int_equal(store_stat(f->s[1], "ram", "bytes_used"), used);
	assert_int_equal(tstat(f->t[1], -2, "pull_failures"), 1);
	assert_int_equal(tstat(f->t[1], 0, "rdma_completion_errors"), 1);
	/* the owner's link to a is redialled by the next offer */
	pthread_mutex_lock(&F.lock);
	F.fail_status_at = 0;
	pthread_mutex_unlock(&F.lock);
	assert_int_equal(peer_put_batch(f->t[0], 1, ops, 4, res), 0);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(res[i], 0);
	assert_int_equal(tstat(f->t[1], 0, "rdma_reconnects"), 1);
}

/* An offer to an owner without a disk tier whose leased blocks keep its RAM
 * above the low watermark: the evictor would drop the block as soon as it
 * was published, so the owner refuses it (-ENOSPC, counted), as it refuses
 * such a put of its own. Before, the offer was pulled and published, the
 * member's put returned 0, and the block was gone once the evictor ran. */
static void test_offer_refused_when_it_would_be_dropped(void **state)
{
	struct fx *f = *state;
	kvt_store *b = f->s[1];
	long long high = store_stat(b, "ram", "high_watermark_bytes");
	kvt_key k[64];
	size_t n = 0, found = 0;

	while (n < 64 && store_stat(b, "ram", "bytes_used") + (1 << 20) <= high) {
		k[n] = test_key(9000 + n);
		store_put_block(b, k[n], 1 << 20);
		n++;
	}
	/* half leased, half pinned: each is capped at half of RAM */
	size_t nl = n / 2;
	assert_int_equal(kvt_lookup(b, k, nl, KVT_LEASE, &found), 0);
	assert_int_equal(found, nl);
	kvt_slot pins[64];
	kvt_pin_batch *pb = NULL;
	for (size_t i = nl; i < n; i++)
		pins[i - nl] = (kvt_slot){ .key = k[i], .len = 1 << 20 };
	assert_int_equal(kvt_get_pin(b, pins, n - nl, 0, &pb), (int)(n - nl));
	kvt_pin_free(pb);
	uint8_t *blk = malloc(1 << 20);
	kvt_op op = { .key = test_key(9999), .buf = blk, .len = 1 << 20 };
	int res = 1;
	fill_block(op.key, blk, 1 << 20);
	assert_int_equal(peer_put_batch(f->t[0], 1, &op, 1, &res), 0);
	if (res == 0) { /* what the old code did: was it kept? */
		char small[4096];
		fill_block(test_key(9998), small, sizeof(small));
		(void)kvt_put(b, test_key(9998), small, sizeof(small)); /* wakes the evictor */
		for (int i = 0; i < 2000 && store_stat(b, "ram", "bytes_used") > high; i++)
			usleep(1000);
		size_t len = 0;
		if (kvt_get(b, op.key, blk, 1 << 20, &len) != 0)
			fail_msg("the owner took the offer (0) and its evictor dropped it");
	}
	assert_int_equal(res, -ENOSPC);
	size_t len = 0;
	assert_int_equal(kvt_get(b, op.key, blk, 1 << 20, &len), -ENOENT);
	assert_true(store_stat(b, "ram", "refused_puts") >= 1);
	assert_int_equal(kvt_unpin(b, pins, n - nl), (int)(n - nl));
	free(blk);
}

/* Pins the requester never releases lapse on the owner (the listener ends
 * them after hold_ms), and a slot's pins go with its connection. */
/*
 * A connection of the owner's server is not closed as idle while the
 * member may still READ blocks pinned for it (closing it would end their
 * pins, and RAM could reuse the blocks under the READs): with READs that
 * take eight times b's peers.idle_timeout_ms, every pin ends by the
 * member's UNPIN, none by a close.
 */
static void test_pins_outlive_an_idle_timeout(void **state)
{
	struct fx *f = *state;
	kvt_op ops[4];

	peer_close(f->t[1]);
	tier_idle_ms = 50;
	assert_int_equal(open_tier(f, 1, PEER_RDMA, &fake_ops, &f->t[1]), 0);
	tier_idle_ms = 60000;
	pthread_mutex_lock(&F.lock);
	F.slow_ms = 400;
	pthread_mutex_unlock(&F.lock);
	assert_int_equal(get_n(f, 0, 4, ops), 0);
	pthread_mutex_lock(&F.lock);
	F.slow_ms = 0;
	pthread_mutex_unlock(&F.lock);
	all_loaded(f, 0, 4, ops);
	wait_unpinned(f);
	assert_int_equal(tstat(f->t[1], -2, "pins_released"), 4);
	assert_int_equal(tstat(f->t[1], -2, "pins_dropped"), 0);
}

/* n bytes of a blocking socket (it gives up after 10 s): 0 or -1 */
static int raw_recv(int fd, void *b, size_t n)
{
	return recv(fd, b, n, MSG_WAITALL) == (ssize_t)n ? 0 : -1;
}

/* A TCP connection to b from a's host, as a process there would make one,
 * that says HELLO as member a; *type: the answer's frame type. */
static int raw_member(struct fx *f, unsigned *type)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)f->port[1]) };
	struct timeval tv = { .tv_sec = 10 };
	uint8_t b[HDR + 256];
	struct hdr h;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(0x7f000001u);
	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	hdr_pack(b, T_HELLO, 1, 0, 1);
	b[HDR] = 'a';
	assert_int_equal(send(fd, b, HDR + 1, 0), HDR + 1);
	assert_int_equal(raw_recv(fd, b, HDR), 0);
	hdr_unpack(b, &h);
	assert_true(h.body_len < 256);
	assert_int_equal(raw_recv(fd, b + HDR, h.body_len), 0);
	b[HDR + h.body_len] = 0;
	if (h.type == T_ERROR)
		snprintf(logged, sizeof(logged), "%s", (char *)b + HDR);
	*type = h.type;
	return fd;
}

/*
 * With peers.max_conns_per_member 1, a member's new connection does not
 * close its idle one while blocks are pinned for that one (the member may
 * be READing them: closing would end their pins under the READs); it is
 * refused with ERROR instead, and the pin stays held.
 */
static void test_pinned_connection_is_not_closed_to_make_room(void **state)
{
	struct fx *f = *state;
	uint8_t b[HDR + DESC];
	unsigned type;
	struct hdr h;

	peer_close(f->t[1]);
	tier_max_conns = 1;
	tier_request_ms = 2000; /* pins held 5 s: they outlast the test */
	assert_int_equal(open_tier(f, 1, PEER_RDMA, &fake_ops, &f->t[1]), 0);
	tier_max_conns = 8;
	tier_request_ms = REQUEST_MS;
	int fd = raw_member(f, &type);
	assert_int_equal(type, T_HELLO | T_REPLY);
	/* a GET welcoming descriptors: keys[0] is pinned for fd, never unpinned */
	hdr_pack(b, T_GET, 1, F_RDMA, 24);
	key_pack(b + HDR, f->keys[0]);
	put64(b + HDR + 16, BLK);
	assert_int_equal(send(fd, b, HDR + 24, 0), HDR + 24);
	assert_int_equal(raw_recv(fd, b, HDR + DESC), 0);
	hdr_unpack(b, &h);
	assert_int_equal(h.flags, F_RDMA);
	assert_int_equal(tstat(f->t[1], -2, "pins_held"), 1);

	logged[0] = 0;
	int fd2 = raw_member(f, &type);
	assert_int_equal(type, T_ERROR);
	assert_non_null(strstr(logged, "pinned"));
	assert_int_equal(tstat(f->t[1], -1, "connections_evicted"), 0);
	assert_int_equal(tstat(f->t[1], -2, "pins_dropped"), 0);
	assert_int_equal(tstat(f->t[1], -2, "pins_held"), 1);
	close(fd2);
	close(fd);
}

static int admit_all(void *arg, const struct sockaddr *from)
{
	(void)arg;
	(void)from;
	return 1;
}

/* A hostile owner at b's address: answers HELLO, then a GET of one key
 * with a descriptor of the block at desc (its rkey, checksum, address) and
 * an absurd hold_ms; reads on until the member closes. */
struct hostile { int lfd; uint8_t desc[DESC]; };

static void *hostile_owner(void *arg)
{
	struct hostile *o = arg;
	struct timeval tv = { .tv_sec = 10 };
	uint8_t b[HDR + DESC];
	struct hdr h;
	int fd = accept(o->lfd, NULL, NULL);

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (raw_recv(fd, b, HDR) == 0) {
		hdr_unpack(b, &h);
		raw_recv(fd, b, h.body_len);
		hdr_pack(b, T_HELLO | T_REPLY, 1, 0, 1);
		b[HDR] = 'b';
		send(fd, b, HDR + 1, MSG_NOSIGNAL);
	}
	if (raw_recv(fd, b, HDR + 24) == 0) {
		hdr_pack(b, T_GET | T_REPLY, 1, F_RDMA, DESC);
		memcpy(b + HDR, o->desc, DESC);
		send(fd, b, HDR + DESC, MSG_NOSIGNAL);
	}
	while (recv(fd, b, sizeof(b), 0) > 0)
		;
	close(fd);
	return NULL;
}

/*
 * A descriptor's hold_ms is bounded by what an owner within the
 * configuration's limits offers (PEER_HOLD_MS_MAX): a hostile owner's
 * 2^60, which overflowed the READ deadline computed from it (to the time
 * of the request: the READs failed at once as if the link had), is
 * refused as a malformed answer, saying so.
 */
static void test_absurd_hold_is_refused(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)f->port[1]) };
	struct hostile o = { .lfd = socket(AF_INET, SOCK_STREAM, 0) };
	struct rlink_node *n;
	struct rlink_region *reg;
	uint32_t lkey, rkey;
	pthread_t t;
	int one = 1;
	kvt_op op;

	peer_close(f->t[1]);
	f->t[1] = NULL;
	sa.sin_addr.s_addr = htonl(0x7f000001u);
	assert_int_equal(rlink_node_open(&fake_ops, (struct sockaddr *)&sa, admit_all, NULL,
					 &n), 0);
	fill_block(f->keys[0], f->buf[1], BLK);
	assert_int_equal(rlink_reg(n, f->buf[1], BLK, 0, &reg), 0);
	assert_int_equal(rlink_keys(reg, f->buf[1], BLK, &lkey, &rkey), 0);
	put32(o.desc + 4, rkey);
	put64(o.desc + 8, BLK);
	put64(o.desc + 16, kvt_checksum(f->buf[1], BLK));
	put64(o.desc + 24, (uint64_t)(uintptr_t)f->buf[1]);
	put64(o.desc + 32, 1);
	put64(o.desc + 40, 1ull << 60);
	setsockopt(o.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(o.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(o.lfd, 4), 0);
	assert_int_equal(pthread_create(&t, NULL, hostile_owner, &o), 0);

	assert_int_equal(get_n(f, 0, 1, &op), -EPROTO);
	assert_non_null(strstr(kvt_last_error(), "hold_ms 1152921504606846976"));
	assert_int_equal(op.result, -EPROTO);
	assert_int_equal(tstat(f->t[0], 1, "rdma_failures"), 0);
	pthread_join(t, NULL);
	close(o.lfd);
	rlink_unreg(reg);
	rlink_node_close(n);
}

static void test_pins_lapse_and_drop(void **state)
{
	struct fx *f = *state;
	uint8_t desc[DESC];
	size_t len;
	uint64_t t0 = kvt_now_ns();

	assert_int_equal(peer_rdma_pin(f->t[1], 7, f->keys[0], BLK, desc, &len), 0);
	assert_int_equal(len, BLK);
	assert_int_equal(get64(desc + 40), tstat(f->t[1], -2, "hold_ms"));
	assert_int_equal(tstat(f->t[1], -2, "pins_held"), 1);
	/* the block is pinned: removing it leaves its bytes readable */
	const uint8_t *b = (const uint8_t *)(uintptr_t)get64(desc + 24);
	assert_int_equal(kvt_remove(f->s[1], f->keys[0]), 0);
	assert_true(check_block(f->keys[0], b, BLK));
	while (tstat(f->t[1], -2, "pins_held") && kvt_now_ns() - t0 < 10000000000ull)
		usleep(20000);
	assert_int_equal(tstat(f->t[1], -2, "pins_held"), 0);
	assert_int_equal(tstat(f->t[1], -2, "pins_lapsed"), 1);
	assert_true(kvt_now_ns() - t0 >= (uint64_t)tstat(f->t[1], -2, "hold_ms") * 1000000ull);

	assert_int_equal(peer_rdma_pin(f->t[1], 9, f->keys[1], BLK, desc, &len), 0);
	peer_rdma_drop(f->t[1], 9);
	assert_int_equal(tstat(f->t[1], -2, "pins_dropped"), 1);
	assert_int_equal(tstat(f->t[1], -2, "pins_held"), 0);
}

static int admit_none(void *arg, const struct sockaddr *from)
{
	(void)arg;
	(void)from;
	return 0;
}

static atomic_int warn_lines;

/* A stranger's RDMA connection requests are refused before any queue pair
 * exists, each counted, and logged as the TCP side's are: the first one
 * line, those that follow within peers.log_interval_ms one summary line
 * at most (so that strangers cannot fill the log). */
static void test_stranger_is_refused(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(1) };
	struct sockaddr_in b = { .sin_family = AF_INET, .sin_port = htons((uint16_t)f->port[1]) };
	struct rlink_node *n;
	struct rlink *l = NULL;

	s.sin_addr.s_addr = htonl(0x0a000009u);
	b.sin_addr.s_addr = htonl(0x7f000001u);
	assert_int_equal(rlink_node_open(&fake_ops, (struct sockaddr *)&s,
					 admit_none, NULL, &n), 0);
	atomic_store(&warn_lines, 0);
	kvt_set_log(test_count_warnings, &warn_lines, KVT_LOG_DEBUG);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(rlink_dial(n, (struct sockaddr *)&b, 1000, &l), -ECONNREFUSED);
		assert_null(l);
	}
	kvt_set_log(NULL, NULL, 0);
	assert_int_equal(tstat(f->t[1], -2, "links_refused"), 5);
	assert_int_equal(tstat(f->t[1], -1, "connections_from_strangers"), 5);
	assert_int_equal(atomic_load(&warn_lines), 1);
	rlink_node_close(n);
}

/* One host (a's) has at most 16 queue pairs accepted at once per member
 * there, so that a process at a member's address cannot take all of the
 * owner's places: past them its requests are refused, counted, and logged
 * as strangers are (one line, then at most one summary per
 * peers.log_interval_ms). */
static void test_member_host_has_a_cap_of_queue_pairs(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in s = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)test_free_port()) };
	struct sockaddr_in b = { .sin_family = AF_INET, .sin_port = htons((uint16_t)f->port[1]) };
	struct rlink_node *n;
	struct rlink *l[20];

	s.sin_addr.s_addr = b.sin_addr.s_addr = htonl(0x7f000001u);
	assert_int_equal(rlink_node_open(&fake_ops, (struct sockaddr *)&s, admit_none, NULL,
					 &n), 0);
	atomic_store(&warn_lines, 0);
	kvt_set_log(test_count_warnings, &warn_lines, KVT_LOG_DEBUG);
	for (int i = 0; i < 20; i++)
		assert_int_equal(rlink_dial(n, (struct sockaddr *)&b, 1000, &l[i]),
				 i < 16 ? 0 : -ECONNREFUSED);
	kvt_set_log(NULL, NULL, 0);
	assert_int_equal(tstat(f->t[1], -2, "links_accepted"), 16);
	assert_int_equal(tstat(f->t[1], -2, "links_refused_for_room"), 4);
	assert_int_equal(atomic_load(&warn_lines), 1);
	for (int i = 0; i < 16; i++)
		rlink_close(l[i]);
	rlink_node_close(n);
}

/* A member without RDMA: the link cannot be dialled, so gets and puts
 * travel inline over TCP, counted as such. */
static void test_member_without_rdma_gets_inline(void **state)
{
	struct fx *f = *state;
	kvt_op ops[NB], p[2];
	int res[2];

	peer_close(f->t[1]);
	assert_int_equal(open_tier(f, 1, PEER_TCP, NULL, &f->t[1]), 0);
	assert_string_equal(transport(f->t[1]), "tcp");
	assert_int_equal(get_n(f, 0, NB, ops), 0);
	all_loaded(f, 0, NB, ops);
	assert_int_equal(tstat(f->t[0], 1, "rdma_inline"), NB);
	assert_int_equal(tstat(f->t[0], 1, "rdma_bytes_read"), 0);
	for (unsigned i = 0; i < 2; i++) {
		p[i] = (kvt_op){ .key = test_key(9000 + i), .buf = f->buf[i], .len = BLK };
		fill_block(p[i].key, f->buf[i], BLK);
	}
	assert_int_equal(peer_put_batch(f->t[0], 1, p, 2, res), 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], 0);
	assert_int_equal(store_get_block(f->s[1], p[1].key, BLK), 0);
}

/* Not in the owner's RAM (on its disk, say): inline, while the rest of the
 * batch goes by descriptor. */
static void test_block_not_in_ram_goes_inline(void **state)
{
	struct fx *f = *state;
	kvt_op ops[4];

	/* no RAM pin possible: the owner's tier opened without pin */
	peer_close(f->t[1]);
	struct peer_local l = store_peer_local(f->s[1]);
	l.pin = NULL;
	assert_int_equal(open_tier_with(f, 1, PEER_RDMA, &fake_ops, &l, &f->t[1]), 0);
	assert_int_equal(get_n(f, 0, 4, ops), 0);
	all_loaded(f, 0, 4, ops);
	assert_int_equal(tstat(f->t[0], 1, "rdma_inline"), 4);
}

/* transport "rdma" where no device serves the address fails, naming it;
 * "auto" falls back to TCP (with a log line) and works. */
static void test_no_device(void **state)
{
	struct fx *f = *state;
	struct peer_tier *t;
	kvt_op ops[2];

	peer_close(f->t[0]);
	f->t[0] = NULL;
	pthread_mutex_lock(&F.lock);
	F.nodev = 1;
	pthread_mutex_unlock(&F.lock);
	assert_int_equal(open_tier(f, 0, PEER_RDMA, &fake_ops, &t), -ENODEV);
	assert_non_null(strstr(kvt_last_error(), "no RDMA at 127.0.0.1"));
	assert_int_equal(open_tier(f, 0, PEER_AUTO, &fake_ops, &f->t[0]), 0);
	assert_string_equal(transport(f->t[0]), "tcp");
	assert_int_equal(get_n(f, 0, 2, ops), 0);
	all_loaded(f, 0, 2, ops);
}

static void keep_log(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (strstr(msg, "peers.transport"))
		snprintf(logged, sizeof(logged), "%s", msg);
}

/* The same through kvt_open and libibverbs, on a host without RDMA; the
 * fallback of "auto" is said through the log callback. */
static void test_kvt_open_without_device(void **state)
{
	char cfg[512];
	kvt_store *s;
	int port = test_free_port(), other = test_free_port();

	(void)state;
	if (access("/dev/infiniband", F_OK) == 0)
		skip(); /* this host has RDMA devices */
	const char *fmt = "{\"ram\": {\"capacity\": \"8MiB\"}, \"peers\": {\"self\": \"a\", "
		"\"transport\": \"%s\", \"members\": [{\"name\": \"a\", \"addr\": "
		"\"127.0.0.1:%d\"}, {\"name\": \"b\", \"addr\": \"127.0.0.1:%d\"}]}}";
	snprintf(cfg, sizeof(cfg), fmt, "rdma", port, other);
	assert_int_equal(kvt_open(cfg, &s), -ENODEV);
	assert_non_null(strstr(kvt_last_error(), "peers.transport \"rdma\": no RDMA at 127.0.0.1"));
	snprintf(cfg, sizeof(cfg), fmt, "auto", port, other);
	logged[0] = 0;
	kvt_set_log(keep_log, NULL, KVT_LOG_WARN);
	assert_int_equal(kvt_open(cfg, &s), 0);
	kvt_set_log(NULL, NULL, 0);
	assert_non_null(strstr(logged, "peers.transport \"auto\": no RDMA at 127.0.0.1"));
	assert_non_null(strstr(logged, "peers use TCP"));
	char st[8192];
	assert_true(kvt_stats_json(s, st, sizeof(st)) > 0);
	assert_non_null(strstr(st, "\"transport\":\"tcp\""));
	kvt_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_get_reads_pinned_blocks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_get_into_registered_memory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_put_offer_is_pulled_and_verified, setup, teardown),
		cmocka_unit_test_setup_teardown(test_offer_across_two_registered_pieces,
						setup_two_pieces, teardown),
		cmocka_unit_test_setup_teardown(test_descriptor_carries_the_kept_checksum, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_completion_error_is_a_miss, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_error_is_a_miss, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_mid_transfer_is_a_miss, setup, teardown),
		cmocka_unit_test_setup_teardown(test_deadline_is_a_miss, setup, teardown),
		cmocka_unit_test_setup_teardown(test_offer_whose_read_fails_is_never_visible, setup, teardown),
		cmocka_unit_test_setup_teardown(test_offer_refused_when_it_would_be_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stats_do_not_wait_for_a_transfer, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pins_outlive_an_idle_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pinned_connection_is_not_closed_to_make_room,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_absurd_hold_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pins_lapse_and_drop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stranger_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_host_has_a_cap_of_queue_pairs, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_member_without_rdma_gets_inline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_block_not_in_ram_goes_inline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_device, setup, teardown),
		cmocka_unit_test(test_kvt_open_without_device),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
