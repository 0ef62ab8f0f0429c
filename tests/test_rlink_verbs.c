/*
 * test_rlink_verbs.c - RDMA links over the real libibverbs, librdmacm and
 * kernel verbs stack. It needs an RDMA device serving 10.77.0.1, .2 and .3,
 * which the soft-RoCE VM of tests/rdma/vm.sh provides (`make check-rdma`);
 * anywhere else it exits 77. Covers: 128 blocks of 1 MiB read and written
 * one-sided with every byte verified and the byte counters, strangers
 * refused before a queue pair exists, an unreachable address, a bad rkey
 * (a completion error breaks the link; dialling again works), a WRITE into
 * memory registered without remote writes (fails, lands nowhere), a READ of
 * memory registered for local access only (fails), an owner
 * process killed in the middle of a READ (bounded failure, link broken), and
 * diallers that go away in the middle of the handshake (the queue pairs
 * accepted for them are dropped).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>
#include <rdma/rdma_cma.h>

#include "internal.h"
#include "rdma_util.h"
#include "rlink.h"
#include "util.h"

#define MiB (1024u * 1024u)
#define BLOCKS 128u
#define DIAL_MS 3000

static struct sockaddr_in addr_of(int host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	char ip[32];

	snprintf(ip, sizeof(ip), "10.77.0.%d", host);
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* admits 10.77.0.1 and 10.77.0.2 only */
static int admit_members(void *arg, const struct sockaddr *from)
{
	const struct sockaddr_in *in = (const struct sockaddr_in *)from;
	uint32_t h = ntohl(in->sin_addr.s_addr);

	(void)arg;
	return from->sa_family == AF_INET && (h == 0x0a4d0001 || h == 0x0a4d0002);
}

static int next_port = 7471;

/* The owner counts an accept once it returned, which may come after the
 * dialler's link is up: waits up to 2 s for the counter to reach want. */
static uint64_t accepted_soon(struct rlink_node *n, uint64_t want)
{
	for (int i = 0; i < 200 && atomic_load(&rlink_node_counters(n)->accepted) < want; i++)
		usleep(10000);
	return atomic_load(&rlink_node_counters(n)->accepted);
}

static struct rlink_node *open_node(int host)
{
	struct sockaddr_in a = addr_of(host, next_port++);
	struct rlink_node *n = NULL;

	assert_int_equal(rlink_node_open(&rlink_verbs_ops, (struct sockaddr *)&a,
					 admit_members, NULL, &n), 0);
	return n;
}

static void test_blocks_read_and_written(void **state)
{
	(void)state;
	int port = next_port;
	struct rlink_node *owner = open_node(1), *req = open_node(2);
	struct sockaddr_in oa = addr_of(1, port);
	size_t len = (size_t)BLOCKS * MiB;
	uint8_t *src = rdma_big(len), *dst = rdma_big(len), *in = rdma_big(len);
	struct rlink_region *rs, *rd, *ri;
	struct rlink_seg seg[BLOCKS];
	struct rlink *l;
	uint64_t sum[BLOCKS];

	for (unsigned i = 0; i < BLOCKS; i++) {
		fill_block(test_key(i), src + (size_t)i * MiB, MiB);
		sum[i] = kvt_checksum(src + (size_t)i * MiB, MiB);
	}
	assert_int_equal(rlink_reg(owner, src, len, 0, &rs), 0);
	assert_int_equal(rlink_reg(owner, in, len, RLINK_REMOTE_WRITE, &ri), 0);
	assert_int_equal(rlink_reg(req, dst, len, 0, &rd), 0);
	assert_int_equal(rlink_dial(req, (struct sockaddr *)&oa, DIAL_MS, &l), 0);

	/* the owner's descriptors: address, rkey, length */
	for (unsigned i = 0; i < BLOCKS; i++) {
		uint32_t lk, rk, dlk, drk;
		assert_int_equal(rlink_keys(rs, src + (size_t)i * MiB, MiB, &lk, &rk), 0);
		assert_int_equal(rlink_keys(rd, dst + (size_t)i * MiB, MiB, &dlk, &drk), 0);
		seg[i] = (struct rlink_seg){ .local = dst + (size_t)i * MiB, .lkey = dlk,
					     .remote = (uintptr_t)(src + (size_t)i * MiB),
					     .rkey = rk, .len = MiB };
	}
	assert_int_equal(rlink_move(l, 0, seg, BLOCKS, kvt_now_ns() + 120000000000ull), 0);
	for (unsigned i = 0; i < BLOCKS; i++) {
		assert_true(check_block(test_key(i), dst + (size_t)i * MiB, MiB));
		assert_true(kvt_checksum(dst + (size_t)i * MiB, MiB) == sum[i]);
	}
	struct rlink_counters *c = rlink_node_counters(req);
	assert_int_equal(atomic_load(&c->bytes_read), (uint64_t)len);
	assert_int_equal(atomic_load(&c->work_requests), BLOCKS);
	assert_int_equal(atomic_load(&c->completion_errors), 0);

	/* writes: the requester's blocks into the owner's other region */
	for (unsigned i = 0; i < BLOCKS; i++) {
		uint32_t lk, rk;
		fill_block(test_key(1000 + i), dst + (size_t)i * MiB, MiB);
		assert_int_equal(rlink_keys(ri, in + (size_t)i * MiB, MiB, &lk, &rk), 0);
		seg[i].remote = (uintptr_t)(in + (size_t)i * MiB);
		seg[i].rkey = rk;
	}
	assert_int_equal(rlink_move(l, 1, seg, BLOCKS, kvt_now_ns() + 120000000000ull), 0);
	for (unsigned i = 0; i < BLOCKS; i++)
		assert_true(check_block(test_key(1000 + i), in + (size_t)i * MiB, MiB));
	assert_int_equal(atomic_load(&c->bytes_written), (uint64_t)len);
	assert_int_equal(accepted_soon(owner, 1), 1);
	printf("# 2 x %u x 1 MiB moved one-sided and verified\n", BLOCKS);

	rlink_close(l);
	rlink_unreg(rs);
	rlink_unreg(ri);
	rlink_unreg(rd);
	rlink_node_close(req);
	rlink_node_close(owner);
	munmap(src, len);
	munmap(dst, len);
	munmap(in, len);
}

static void test_stranger_refused(void **state)
{
	(void)state;
	int port = next_port;
	struct rlink_node *owner = open_node(1), *stranger = open_node(3);
	struct sockaddr_in oa = addr_of(1, port);
	struct rlink *l = NULL;

	assert_int_equal(rlink_dial(stranger, (struct sockaddr *)&oa, DIAL_MS, &l),
			 -ECONNREFUSED);
	assert_null(l);
	assert_int_equal(atomic_load(&rlink_node_counters(owner)->refused), 1);
	assert_int_equal(atomic_load(&rlink_node_counters(owner)->accepted), 0);
	rlink_node_close(stranger);
	rlink_node_close(owner);
}

static void test_unreachable_and_no_listener(void **state)
{
	(void)state;
	struct rlink_node *req = open_node(2);
	struct sockaddr_in nobody = addr_of(9, 7000), closed = addr_of(1, 7001);
	struct rlink *l = NULL;
	uint64_t t0 = kvt_now_ns();
	int e = rlink_dial(req, (struct sockaddr *)&nobody, 1000, &l);

	assert_true(e == -EHOSTUNREACH || e == -ETIMEDOUT);
	assert_true(kvt_now_ns() - t0 < 5000000000ull);
	/* an address of the device where nothing listens */
	e = rlink_dial(req, (struct sockaddr *)&closed, 1000, &l);
	assert_true(e == -ECONNREFUSED || e == -EHOSTUNREACH || e == -ETIMEDOUT);
	assert_null(l);
	rlink_node_close(req);
}

static void test_bad_rkey_breaks_link(void **state)
{
	(void)state;
	int port = next_port;
	struct rlink_node *owner = open_node(1), *req = open_node(2);
	struct sockaddr_in oa = addr_of(1, port);
	uint8_t *src = rdma_big(MiB), *dst = rdma_big(MiB);
	struct rlink_region *rs, *rd;
	struct rlink *l;
	uint32_t lk, rk, dlk, drk;

	fill_block(test_key(7), src, MiB);
	assert_int_equal(rlink_reg(owner, src, MiB, 0, &rs), 0);
	assert_int_equal(rlink_reg(req, dst, MiB, 0, &rd), 0);
	assert_int_equal(rlink_keys(rs, src, MiB, &lk, &rk), 0);
	assert_int_equal(rlink_keys(rd, dst, MiB, &dlk, &drk), 0);
	assert_int_equal(rlink_dial(req, (struct sockaddr *)&oa, DIAL_MS, &l), 0);
	struct rlink_seg s = { .local = dst, .lkey = dlk, .remote = (uintptr_t)src,
			       .rkey = rk ^ 0x5a5a00, .len = MiB };
	int e = rlink_move(l, 0, &s, 1, kvt_now_ns() + 20000000000ull);
	assert_true(e == -EIO || e == -ECONNRESET);
	assert_false(rlink_alive(l));
	assert_int_equal(rlink_move(l, 0, &s, 1, kvt_now_ns() + 1000000000ull), -ENOTCONN);
	rlink_close(l);
	/* dialling again works, and the right key reads the block */
	assert_int_equal(rlink_dial(req, (struct sockaddr *)&oa, DIAL_MS, &l), 0);
	s.rkey = rk;
	assert_int_equal(rlink_move(l, 0, &s, 1, kvt_now_ns() + 20000000000ull), 0);
	assert_true(check_block(test_key(7), dst, MiB));
	assert_int_equal(atomic_load(&rlink_node_counters(req)->links_dialled), 2);
	assert_int_equal(atomic_load(&rlink_node_counters(req)->links_broken), 1);
	/* src is registered without remote writes: a WRITE fails, lands nowhere */
	fill_block(test_key(8), dst, MiB);
	e = rlink_move(l, 1, &s, 1, kvt_now_ns() + 20000000000ull);
	assert_true(e == -EIO || e == -ECONNRESET);
	assert_true(check_block(test_key(7), src, MiB));
	rlink_close(l);
	/* registered for local access only (RLINK_LOCAL_ONLY): a READ of it
	 * with its own key fails too, and a READ into it lands */
	struct rlink_region *ro;
	uint8_t *hidden = rdma_big(MiB);
	fill_block(test_key(9), hidden, MiB);
	assert_int_equal(rlink_reg(owner, hidden, MiB, RLINK_LOCAL_ONLY, &ro), 0);
	assert_int_equal(rlink_keys(ro, hidden, MiB, &lk, &rk), 0);
	assert_int_equal(rlink_dial(req, (struct sockaddr *)&oa, DIAL_MS, &l), 0);
	memset(dst, 0, MiB);
	s = (struct rlink_seg){ .local = dst, .lkey = dlk, .remote = (uintptr_t)hidden,
				.rkey = rk, .len = MiB };
	e = rlink_move(l, 0, &s, 1, kvt_now_ns() + 20000000000ull);
	assert_true(e == -EIO || e == -ECONNRESET);
	assert_false(check_block(test_key(9), dst, MiB));
	rlink_close(l);
	rlink_unreg(ro);
	/* ... and this node's own READs land in such memory */
	assert_int_equal(rlink_reg(req, hidden, MiB, RLINK_LOCAL_ONLY, &ro), 0);
	assert_int_equal(rlink_keys(ro, hidden, MiB, &dlk, &drk), 0);
	assert_int_equal(rlink_keys(rs, src, MiB, &lk, &rk), 0);
	assert_int_equal(rlink_dial(req, (struct sockaddr *)&oa, DIAL_MS, &l), 0);
	s = (struct rlink_seg){ .local = hidden, .lkey = dlk, .remote = (uintptr_t)src,
				.rkey = rk, .len = MiB };
	assert_int_equal(rlink_move(l, 0, &s, 1, kvt_now_ns() + 20000000000ull), 0);
	assert_true(check_block(test_key(7), hidden, MiB));
	rlink_close(l);
	rlink_unreg(ro);
	munmap(hidden, MiB);
	rlink_unreg(rs);
	rlink_unreg(rd);
	rlink_node_close(req);
	rlink_node_close(owner);
	munmap(src, MiB);
	munmap(dst, MiB);
}

/* The owner in a child process: registers 64 MiB, hands out (addr, rkey) and
 * waits to be killed. */
static void owner_child(int port, int wfd)
{
	struct sockaddr_in a = addr_of(1, port);
	struct rlink_node *n;
	struct rlink_region *r;
	size_t len = 64u * MiB;
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t d[2] = { 0, 0 };
	uint32_t lk, rk;

	if (p != MAP_FAILED && rlink_node_open(&rlink_verbs_ops, (struct sockaddr *)&a,
					       admit_members, NULL, &n) == 0 &&
	    rlink_reg(n, p, len, 0, &r) == 0 && rlink_keys(r, p, len, &lk, &rk) == 0) {
		d[0] = (uintptr_t)p;
		d[1] = rk;
	}
	if (write(wfd, d, sizeof(d)) != sizeof(d))
		_exit(1);
	for (;;)
		pause();
}

static void *kill_later(void *arg)
{
	usleep(200000);
	kill(*(pid_t *)arg, SIGKILL);
	return NULL;
}

static void test_owner_killed_mid_read(void **state)
{
	(void)state;
	int port = next_port++;
	uint64_t d[2];

	/* a fresh process (see rdma_spawn), its region's address and rkey in d */
	pid_t pid = rdma_spawn("test_rlink_verbs", "--owner", port, d, sizeof(d));
	assert_true(d[0] != 0);

	struct rlink_node *req = open_node(2);
	struct sockaddr_in oa = addr_of(1, port);
	size_t len = 64u * MiB;
	uint8_t *dst = rdma_big(len);
	struct rlink_region *rd;
	struct rlink *l;
	struct rlink_seg seg[64];
	uint32_t dlk, drk;

	assert_int_equal(rlink_reg(req, dst, len, 0, &rd), 0);
	assert_int_equal(rlink_keys(rd, dst, len, &dlk, &drk), 0);
	assert_int_equal(rlink_dial(req, (struct sockaddr *)&oa, DIAL_MS, &l), 0);
	for (unsigned i = 0; i < 64; i++)
		seg[i] = (struct rlink_seg){ .local = dst + (size_t)i * MiB, .lkey = dlk,
					     .remote = d[0] + (uint64_t)i * MiB,
					     .rkey = (uint32_t)d[1], .len = MiB };
	/* a first read proves the link; the second is cut by the kill */
	assert_int_equal(rlink_move(l, 0, seg, 1, kvt_now_ns() + 20000000000ull), 0);
	pthread_t killer;
	assert_int_equal(pthread_create(&killer, NULL, kill_later, &pid), 0);
	uint64_t t0 = kvt_now_ns();
	int e = 0;
	/* 64 MiB take seconds here; go on until the kill cuts one */
	for (int round = 0; round < 20 && e == 0; round++)
		e = rlink_move(l, 0, seg, 64, kvt_now_ns() + 15000000000ull);
	uint64_t took = kvt_now_ns() - t0;
	printf("# owner killed: %s after %.1f s\n", strerror(-e), (double)took / 1e9);
	assert_true(e == -EIO || e == -ECONNRESET || e == -ETIMEDOUT);
	assert_false(rlink_alive(l));
	assert_true(took < 40000000000ull);
	pthread_join(killer, NULL);
	waitpid(pid, NULL, 0);
	rlink_close(l);
	/* nobody listens there any more */
	assert_true(rlink_dial(req, (struct sockaddr *)&oa, 1000, &l) < 0);
	rlink_unreg(rd);
	rlink_node_close(req);
	munmap(dst, len);
}

/* Descriptors this process has open. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* The next event on ch (a blocking channel), which must be want. */
static void expect_cm_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;

	assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
	assert_int_equal(ev->event, want);
	rdma_ack_cm_event(ev);
}

/*
 * A member that sends a connection request and goes away before the
 * connection is established (raw librdmacm from 10.77.0.2: the dialler
 * never reads the owner's reply, so it never completes the handshake, and
 * then destroys its id, as a process killed in the middle of its dial
 * would). The owner accepted it, so a queue pair exists for it there; it
 * must be dropped when the connection fails, not kept until the node
 * closes (each kept one holds a queue pair, a completion queue, a
 * descriptor and one of the node's 1024 places).
 */
static void test_dialler_gone_before_established(void **state)
{
	(void)state;
	int port = next_port;
	struct rlink_node *owner = open_node(1), *req = open_node(2);
	struct sockaddr_in oa = addr_of(1, port), src = addr_of(2, 0);
	struct rlink *l = NULL;

	/* one whole dial first: whatever librdmacm opens once is open */
	assert_int_equal(rlink_dial(req, (struct sockaddr *)&oa, DIAL_MS, &l), 0);
	rlink_close(l);
	rlink_node_close(req);
	usleep(200000);
	int fds = open_fds();
	for (unsigned i = 0; i < 4; i++) {
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_cm_id *id;
		struct ibv_qp_init_attr qa = {
			.qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};
		struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1,
					      .retry_count = 1 };
		assert_non_null(ch);
		assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
		assert_int_equal(rdma_resolve_addr(id, (struct sockaddr *)&src,
						   (struct sockaddr *)&oa, 2000), 0);
		expect_cm_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
		assert_int_equal(rdma_resolve_route(id, 2000), 0);
		expect_cm_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
		assert_int_equal(rdma_create_qp(id, NULL, &qa), 0);
		assert_int_equal(rdma_connect(id, &cp), 0);
		assert_int_equal(accepted_soon(owner, 2 + i), 2 + i);
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
		rdma_destroy_event_channel(ch);
	}
	/* every queue pair the owner accepted for them is gone again */
	int now = open_fds();
	for (int i = 0; i < 3000 && now > fds; i++) {
		usleep(10000);
		now = open_fds();
	}
	printf("# descriptors: %d before the half-open dials, %d after\n", fds, now);
	assert_int_equal(now, fds);
	rlink_node_close(owner);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "--owner"))
		owner_child(atoi(argv[2]), atoi(argv[3]));

	test_need_rdma_vm(7470);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocks_read_and_written),
		cmocka_unit_test(test_stranger_refused),
		cmocka_unit_test(test_unreachable_and_no_listener),
		cmocka_unit_test(test_bad_rkey_breaks_link),
		cmocka_unit_test(test_owner_killed_mid_read),
		cmocka_unit_test(test_dialler_gone_before_established),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
