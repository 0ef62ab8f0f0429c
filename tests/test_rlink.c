/*
 * test_rlink.c - RDMA links (lib/rlink.c) on the CPU, through the device
 * seam: an in-process fabric stands in for libibverbs and librdmacm and
 * injects what a soft-RoCE VM cannot produce on demand: a completion with an
 * error status, a queue pair that refuses posts, a disconnect in the middle
 * of a transfer, completions that never come, a registration that fails.
 * Checks chaining and selective signalling, the members-only rule (no queue
 * pair for a stranger), registration in pieces, memory registered without
 * remote writes refusing WRITEs, nothing posted past a deadline, the
 * counters, and the
 * failure rule: a failed transfer destroys its queue pair before it returns,
 * so a late READ can no longer land in the caller's memory.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "fabric.h"
#include "rlink.h"
#include "util.h"

/* --- fixture: an owner at 10.0.0.1 and a requester at 10.0.0.2 ----------------- */

#define BLK 4096u
#define NB 100u

struct fx {
	struct rlink_node *owner, *req;
	uint8_t *src, *dst;
	struct rlink_region *rs, *rd;
	struct rlink *l;
	struct rlink_seg seg[NB];
};

static struct sockaddr_in sin_of(int host)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(7471) };
	a.sin_addr.s_addr = htonl(0x0a000000u | (uint32_t)host);
	return a;
}

static int admit_low(void *arg, const struct sockaddr *from)
{
	(void)arg;
	return (ntohl(((const struct sockaddr_in *)from)->sin_addr.s_addr) & 0xff) <= 2;
}

static void fill_segs(struct fx *f)
{
	for (unsigned i = 0; i < NB; i++) {
		uint32_t lk, rk, dlk, drk;
		assert_int_equal(rlink_keys(f->rs, f->src + i * BLK, BLK, &lk, &rk), 0);
		assert_int_equal(rlink_keys(f->rd, f->dst + i * BLK, BLK, &dlk, &drk), 0);
		f->seg[i] = (struct rlink_seg){ .local = f->dst + i * BLK, .lkey = dlk,
						.remote = (uintptr_t)(f->src + i * BLK),
						.rkey = rk, .len = BLK };
	}
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct sockaddr_in o = sin_of(1), r = sin_of(2);

	fabric_reset();
	assert_int_equal(rlink_node_open(&fake_ops, (struct sockaddr *)&o, admit_low, NULL, &f->owner), 0);
	assert_int_equal(rlink_node_open(&fake_ops, (struct sockaddr *)&r, admit_low, NULL, &f->req), 0);
	f->src = malloc(NB * BLK);
	f->dst = calloc(NB, BLK);
	for (unsigned i = 0; i < NB; i++)
		fill_block(test_key(i), f->src + i * BLK, BLK);
	assert_int_equal(rlink_reg(f->owner, f->src, NB * BLK, 0, &f->rs), 0);
	assert_int_equal(rlink_reg(f->req, f->dst, NB * BLK, 0, &f->rd), 0);
	assert_int_equal(rlink_dial(f->req, (struct sockaddr *)&o, 1000, &f->l), 0);
	fill_segs(f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	rlink_close(f->l);
	rlink_unreg(f->rs);
	rlink_unreg(f->rd);
	rlink_node_close(f->req);
	rlink_node_close(f->owner);
	assert_int_equal(live_mrs(), 0);
	free(f->src);
	free(f->dst);
	free(f);
	return 0;
}

static uint64_t soon(unsigned ms)
{
	return kvt_now_ns() + (uint64_t)ms * 1000000ull;
}

static struct rlink_counters *ctr(struct rlink_node *n)
{
	return rlink_node_counters(n);
}

/* --- tests ------------------------------------------------------------------------ */

static void test_read_chained_and_signalled(void **state)
{
	struct fx *f = *state;

	assert_int_equal(rlink_move(f->l, 0, f->seg, NB, soon(5000)), 0);
	for (unsigned i = 0; i < NB; i++)
		assert_true(check_block(test_key(i), f->dst + i * BLK, BLK));
	/* 100 requests: 7 chains of at most 16, the last of each signalled */
	assert_int_equal(F.wrs, NB);
	assert_int_equal(F.posts, 7);
	assert_int_equal(F.signalled, 7);
	assert_int_equal(F.max_chain, RLINK_SIGNAL_EVERY);
	assert_true(F.max_outstanding <= (int)RLINK_DEPTH);
	assert_int_equal(atomic_load(&ctr(f->req)->bytes_read), NB * BLK);
	assert_int_equal(atomic_load(&ctr(f->req)->work_requests), NB);
	/* counted once accept returned, maybe after the dial saw it */
	for (int i = 0; i < 200 && atomic_load(&ctr(f->owner)->accepted) == 0; i++)
		usleep(10000);
	assert_int_equal(atomic_load(&ctr(f->owner)->accepted), 1);
	assert_true(rlink_alive(f->l));
}

static void test_depth_is_bounded(void **state)
{
	struct fx *f = *state;
	struct rlink_seg many[1000];

	for (unsigned i = 0; i < 1000; i++)
		many[i] = f->seg[i % NB];
	assert_int_equal(rlink_move(f->l, 0, many, 1000, soon(5000)), 0);
	assert_true(F.max_outstanding <= (int)RLINK_DEPTH);
	assert_int_equal(F.wrs, 1000);
}

static void test_write(void **state)
{
	struct fx *f = *state;
	struct rlink_region *rw;

	assert_int_equal(rlink_reg(f->owner, f->src, NB * BLK, RLINK_REMOTE_WRITE, &rw), 0);
	for (unsigned i = 0; i < NB; i++) {
		uint32_t lk, rk;
		assert_int_equal(rlink_keys(rw, f->src + i * BLK, BLK, &lk, &rk), 0);
		f->seg[i].rkey = rk;
		fill_block(test_key(500 + i), f->dst + i * BLK, BLK);
	}
	assert_int_equal(rlink_move(f->l, 1, f->seg, NB, soon(5000)), 0);
	for (unsigned i = 0; i < NB; i++)
		assert_true(check_block(test_key(500 + i), f->src + i * BLK, BLK));
	assert_int_equal(atomic_load(&ctr(f->req)->bytes_written), NB * BLK);
	assert_int_equal(atomic_load(&ctr(f->req)->bytes_read), 0);
	rlink_unreg(rw);
}

static void redial_works(struct fx *f);

static void test_write_into_read_only_memory_fails(void **state)
{
	struct fx *f = *state;

	/* the owner's blocks are registered without RLINK_REMOTE_WRITE */
	for (unsigned i = 0; i < NB; i++)
		fill_block(test_key(500 + i), f->dst + i * BLK, BLK);
	assert_int_equal(rlink_move(f->l, 1, f->seg, NB, soon(5000)), -EIO);
	for (unsigned i = 0; i < NB; i++)
		assert_true(check_block(test_key(i), f->src + i * BLK, BLK));
	assert_int_equal(atomic_load(&ctr(f->req)->completion_errors), 1);
	redial_works(f);
}

static void test_nothing_posted_past_the_deadline(void **state)
{
	struct fx *f = *state;

	assert_int_equal(rlink_move(f->l, 0, f->seg, NB, kvt_now_ns() - 1), -ETIMEDOUT);
	assert_int_equal(F.posts, 0);
	assert_int_equal(F.wrs, 0);
	redial_works(f);
}

static void redial_works(struct fx *f)
{
	struct sockaddr_in o = sin_of(1);

	assert_false(rlink_alive(f->l));
	assert_int_equal(rlink_move(f->l, 0, f->seg, 1, soon(100)), -ENOTCONN);
	rlink_close(f->l);
	f->l = NULL;
	F.fail_status_at = F.refuse_post = F.reset_after = F.stall = 0;
	assert_int_equal(rlink_dial(f->req, (struct sockaddr *)&o, 1000, &f->l), 0);
	memset(f->dst, 0, NB * BLK);
	assert_int_equal(rlink_move(f->l, 0, f->seg, NB, soon(5000)), 0);
	assert_true(check_block(test_key(NB - 1), f->dst + (NB - 1) * BLK, BLK));
	assert_int_equal(atomic_load(&ctr(f->req)->links_dialled), 2);
	assert_int_equal(atomic_load(&ctr(f->req)->links_broken), 1);
}

static void test_completion_error(void **state)
{
	struct fx *f = *state;

	F.fail_status_at = 37;
	assert_int_equal(rlink_move(f->l, 0, f->seg, NB, soon(5000)), -EIO);
	assert_int_equal(atomic_load(&ctr(f->req)->completion_errors), 1);
	assert_int_equal(atomic_load(&ctr(f->req)->bytes_read), 0);
	redial_works(f);
}

static void test_post_refused(void **state)
{
	struct fx *f = *state;

	F.refuse_post = 1;
	assert_int_equal(rlink_move(f->l, 1, f->seg, NB, soon(5000)), -EIO);
	assert_int_equal(atomic_load(&ctr(f->req)->work_requests), 0);
	redial_works(f);
}

static void test_disconnect_mid_transfer(void **state)
{
	struct fx *f = *state;

	/* the connection goes after 40 requests: those complete, the rest never */
	F.reset_after = 40;
	int e = rlink_move(f->l, 0, f->seg, NB, soon(5000));
	assert_int_equal(e, -ECONNRESET);
	redial_works(f);
}

static void test_completions_never_come(void **state)
{
	struct fx *f = *state;

	F.stall = 1;
	uint64_t t0 = kvt_now_ns();
	struct fqp *q = f->l->qp;
	int e = rlink_move(f->l, 0, f->seg, NB, soon(200));
	uint64_t took = kvt_now_ns() - t0;
	assert_int_equal(e, -ETIMEDOUT);
	assert_true(took >= 200000000ull && took < 3000000000ull);
	/* the queue pair was destroyed before the call returned: q is freed,
	 * and nothing of the held-back READs can land in dst any more */
	assert_null(f->l->qp);
	(void)q;
	for (unsigned i = 0; i < NB; i++)
		assert_false(check_block(test_key(i), f->dst + i * BLK, BLK));
	redial_works(f);
}

static void test_late_reads_land_without_the_rule(void **state)
{
	struct fx *f = *state;

	/* the fabric's own check: held-back READs of a live queue pair land
	 * when released, which is what the failure rule prevents above */
	F.stall = 1;
	struct fqp *q = f->l->qp;
	struct rlink_wr w = { .id = 1, .signalled = 1, .seg = f->seg[0] };
	assert_int_equal(fake_ops.post(q, &w, 1), 0);
	assert_false(check_block(test_key(0), f->dst, BLK));
	release_stalled(q);
	assert_true(check_block(test_key(0), f->dst, BLK));
}

static void test_stranger_gets_no_queue_pair(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in o = sin_of(1), s = sin_of(9);
	struct rlink_node *stranger;
	struct rlink *l = NULL;

	assert_int_equal(rlink_node_open(&fake_ops, (struct sockaddr *)&s, admit_low, NULL,
					 &stranger), 0);
	int qps = seen(&F.server_qps);
	assert_int_equal(rlink_dial(stranger, (struct sockaddr *)&o, 1000, &l), -ECONNREFUSED);
	assert_null(l);
	assert_int_equal(seen(&F.server_qps), qps);
	assert_int_equal(atomic_load(&ctr(f->owner)->refused), 1);
	rlink_node_close(stranger);
}

static atomic_int warn_lines;

/* With RLINK_ACCEPTED_MAX queue pairs accepted, a member's requests are
 * refused, each counted; the first is logged, those that follow within
 * the period only counted (and summed up in one line at close), so that
 * a member dialling in a loop cannot fill the log. */
static void test_full_node_refuses_and_logs_once(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in o = sin_of(1);
	struct rlink *l;

	for (unsigned i = 1; i < RLINK_ACCEPTED_MAX; i++) {
		assert_int_equal(rlink_dial(f->req, (struct sockaddr *)&o, 1000, &l), 0);
		rlink_close(l);
	}
	atomic_store(&warn_lines, 0);
	kvt_set_log(test_count_warnings, &warn_lines, KVT_LOG_DEBUG);
	for (int i = 0; i < 5; i++)
		assert_int_equal(rlink_dial(f->req, (struct sockaddr *)&o, 1000, &l),
				 -ECONNREFUSED);
	assert_int_equal(atomic_load(&warn_lines), 1);
	assert_int_equal(atomic_load(&ctr(f->owner)->refused), 5);
	assert_int_equal(atomic_load(&ctr(f->owner)->crowded), 5);
	rlink_unreg(f->rs);
	f->rs = NULL;
	rlink_node_close(f->owner);
	f->owner = NULL;
	kvt_set_log(NULL, NULL, 0);
	assert_int_equal(atomic_load(&warn_lines), 2); /* the summary, at close */
}

static void test_gone_queue_pair_dropped(void **state)
{
	struct fx *f = *state;
	struct fqp *sq = ((struct fqp *)f->l->qp)->peer;

	/* the requester went away: the owner sees its queue pair close */
	pthread_mutex_lock(&F.lock);
	F.gone_qp = sq;
	F.gone_dev = &F.dev[0];
	pthread_mutex_unlock(&F.lock);
	for (int i = 0; i < 200 && seen(&F.server_drops) == 0; i++)
		usleep(5000);
	assert_int_equal(seen(&F.server_drops), 1);
}

static void test_registration(void **state)
{
	(void)state;
	struct sockaddr_in a = sin_of(5);
	struct rlink_node *n;
	struct rlink_region *r;
	size_t len = 2 * RLINK_PIECE + RLINK_PIECE / 2;
	uint8_t *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uint32_t lk, rk;

	assert_true(p != MAP_FAILED);
	fabric_reset();
	assert_int_equal(rlink_node_open(&fake_ops, (struct sockaddr *)&a, admit_low, NULL, &n), 0);
	/* in pieces of RLINK_PIECE */
	assert_int_equal(rlink_reg(n, p, len, 0, &r), 0);
	assert_int_equal(F.regs, 3);
	assert_int_equal(rlink_keys(r, p + 10, 100, &lk, &rk), 0);
	uint32_t k0 = rk;
	assert_int_equal(rlink_keys(r, p + RLINK_PIECE, 100, &lk, &rk), 0);
	assert_true(rk != k0);
	assert_int_equal(rlink_keys(r, p + RLINK_PIECE - 50, 100, &lk, &rk), -ERANGE);
	assert_int_equal(rlink_keys(r, p + len - 50, 100, &lk, &rk), -ERANGE);
	assert_int_equal(rlink_keys(r, p - 1, 10, &lk, &rk), -ERANGE);
	/* a range across pieces moves in one segment per piece */
	struct rlink_seg sg[4];
	uint32_t lk1;
	assert_int_equal(rlink_keys(r, p, 1, &lk, &rk), 0);
	assert_int_equal(rlink_keys(r, p + RLINK_PIECE, 1, &lk1, &rk), 0);
	assert_int_equal(rlink_segs(r, p + RLINK_PIECE - 50, 100, 7000, 9, sg, 4), 2);
	assert_ptr_equal(sg[0].local, p + RLINK_PIECE - 50);
	assert_int_equal(sg[0].len, 50);
	assert_int_equal(sg[0].lkey, lk);
	assert_ptr_equal(sg[1].local, p + RLINK_PIECE);
	assert_int_equal(sg[1].len, 50);
	assert_int_equal(sg[1].lkey, lk1);
	assert_int_equal(sg[1].remote, 7050);
	assert_int_equal(sg[0].rkey, 9);
	assert_int_equal(sg[1].rkey, 9);
	assert_int_equal(rlink_segs(r, p + 10, 100, 0, 9, sg, 4), 1);
	assert_int_equal(rlink_segs(r, p + 10, 2 * RLINK_PIECE, 0, 9, sg, 4), 3);
	assert_int_equal(rlink_segs(r, p + 10, 2 * RLINK_PIECE, 0, 9, sg, 2), 0);
	assert_int_equal(rlink_segs(r, p + len - 50, 100, 0, 9, sg, 4), 0);
	assert_int_equal(rlink_segs(r, p, 0, 0, 9, sg, 4), 0);
	rlink_unreg(r);
	assert_int_equal(live_mrs(), 0);
	/* a piece that fails: the others are undone, the error is clear */
	F.fail_reg_at = F.regs + 2;
	assert_int_equal(rlink_reg(n, p, len, 0, &r), -ENOMEM);
	assert_null(r);
	assert_non_null(strstr(kvt_last_error(), "cannot register"));
	assert_int_equal(live_mrs(), 0);
	assert_int_equal(rlink_reg(n, NULL, 10, 0, &r), -EINVAL);
	rlink_node_close(n);
	munmap(p, len);
}

static void test_no_device(void **state)
{
	(void)state;
	struct sockaddr_in a = sin_of(6);
	struct rlink_node *n = (void *)1;

	fabric_reset();
	F.nodev = 1;
	assert_int_equal(rlink_node_open(&fake_ops, (struct sockaddr *)&a, admit_low, NULL, &n),
			 -ENODEV);
	assert_null(n);
	assert_non_null(strstr(kvt_last_error(), "no RDMA device"));
	F.nodev = 0;
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_read_chained_and_signalled),
		T(test_depth_is_bounded),
		T(test_write),
		T(test_write_into_read_only_memory_fails),
		T(test_nothing_posted_past_the_deadline),
		T(test_completion_error),
		T(test_post_refused),
		T(test_disconnect_mid_transfer),
		T(test_completions_never_come),
		T(test_late_reads_land_without_the_rule),
		T(test_stranger_gets_no_queue_pair),
		T(test_full_node_refuses_and_logs_once),
		T(test_gone_queue_pair_dropped),
		cmocka_unit_test(test_registration),
		cmocka_unit_test(test_no_device),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
