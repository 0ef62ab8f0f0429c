/*
 * test_peer_rdma_verbs.c - stores whose peers use peers.transport "rdma"
 * over the real libibverbs, librdmacm and kernel verbs stack. It needs an
 * RDMA device serving 10.77.0.1, .2 and .3, which the soft-RoCE VM of
 * tests/rdma/vm.sh provides (`make check-rdma`); anywhere else it exits 77.
 * The data is kept small where it can be (the VM's CPU is emulated).
 * Covers:
 *   - two stores at 10.77.0.1 and .2: 128 blocks of 1 MiB put on one and
 *     loaded on the other (into memory registered with kvt_mem_register,
 *     which the READs reach directly), every byte verified, the loader's
 *     counters showing every byte moved by RDMA and none inline; puts the other way
 *     pulled by their owner; lookups with leases; a stranger's RDMA
 *     connection refused; the closed store reads as misses in bounded time;
 *   - a requester process killed while it holds pins: the owner's pins all
 *     end (dropped with the connection, or lapsed);
 *   - a requester process killed while its owner READs its offer: what
 *     the owner could not READ and verify is not visible, no space leaks;
 *   - an offer whose READ fails (an rkey the member never had): never
 *     visible, its reservation freed, the failure counted.
 *   - kvbench peer --transport rdma between the two addresses (its figures
 *     here are emulated and checked only for being there).
 * A second process is a fresh exec of this program (fork alone would share
 * this process's verbs context, which librdmacm opened).
 */
#include <arpa/inet.h>
#include <errno.h>
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
#include <jansson.h>

#include "bench.h"
#include "internal.h"
#include "peer_int.h"
#include "rdma_util.h"
#include "rlink.h"
#include "util.h"

#define MiB (1024u * 1024u)
#define BLOCKS 128u
#define KILLED_BLOCKS 48u

static int next_port = 7600;

/* The members: 256 MiB of RAM, a request timeout long for the emulated CPU. */
static const struct rdma_member_opts members = { "256MiB", 30000, 500 };

static int admit_none(void *arg, const struct sockaddr *from)
{
	(void)arg;
	(void)from;
	return 0;
}

static void test_two_stores_over_rdma(void **state)
{
	(void)state;
	int port = next_port++;
	kvt_store *a, *b;
	kvt_key keys[BLOCKS], back[16];
	kvt_op ops[BLOCKS];
	uint8_t *mem = rdma_big((size_t)BLOCKS * MiB);

	assert_int_equal(rdma_open_member(&members, 0, port, &a), 0);
	assert_int_equal(rdma_open_member(&members, 1, port, &b), 0);
	/* blocks that a owns, put on a, where they stay */
	test_owned_keys(rdma_names, 2, 0, 1, keys, BLOCKS);
	for (unsigned i = 0; i < BLOCKS; i++) {
		ops[i] = (kvt_op){ .key = keys[i], .buf = mem + (size_t)i * MiB, .len = MiB };
		fill_block(keys[i], ops[i].buf, MiB);
	}
	assert_int_equal(kvt_put_batch(a, ops, BLOCKS), 0);
	for (unsigned i = 0; i < BLOCKS; i++)
		assert_int_equal(ops[i].result, 0);

	/* b looks them up (leased at a), then loads all 128 */
	size_t found = 0;
	assert_int_equal(kvt_lookup(b, keys, BLOCKS, KVT_LEASE, &found), 0);
	assert_int_equal(found, BLOCKS);
	assert_true(rdma_stat_at(a, "ram.leases") >= BLOCKS);
	memset(mem, 0, (size_t)BLOCKS * MiB);
	for (unsigned i = 0; i < BLOCKS; i++)
		ops[i] = (kvt_op){ .key = keys[i], .buf = mem + (size_t)i * MiB, .len = MiB };
	/* registered caller memory: the READs land in it directly */
	uint64_t mid;
	assert_int_equal(kvt_mem_register(b, mem, (size_t)BLOCKS * MiB, 0, &mid), 0);
	uint64_t t0 = kvt_now_ns();
	assert_int_equal(kvt_get_batch(b, ops, BLOCKS), 0);
	printf("# 128 x 1 MiB over soft-RoCE in %.1f s (emulated CPU: not a speed)\n",
	       (double)(kvt_now_ns() - t0) / 1e9);
	for (unsigned i = 0; i < BLOCKS; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, MiB);
		assert_true(check_block(keys[i], mem + (size_t)i * MiB, MiB));
	}
	assert_true(kvt_release(b, keys, BLOCKS) >= 0);
	assert_int_equal(rdma_stat_at(b, "peer.rdma.direct_reads"), BLOCKS);
	assert_int_equal(kvt_mem_deregister(b, mid), 0);
	assert_int_equal(rdma_stat_at(b, "peer.members.0.rdma_bytes_read"),
			 (long long)BLOCKS * MiB);
	assert_int_equal(rdma_stat_at(b, "peer.members.0.rdma_inline"), 0);
	assert_int_equal(rdma_stat_at(b, "peer.members.0.rdma_failures"), 0);
	assert_int_equal(rdma_stat_at(b, "peer.bytes_in"), (long long)BLOCKS * MiB);
	assert_int_equal(rdma_stat_at(b, "store.hits_peer"), BLOCKS);
	assert_int_equal(rdma_stat_at(a, "peer.rdma.blocks_pinned"), BLOCKS);
	for (int i = 0; i < 500 && rdma_stat_at(a, "peer.rdma.pins_held"); i++)
		usleep(10000);
	assert_int_equal(rdma_stat_at(a, "peer.rdma.pins_held"), 0);
	assert_int_equal(rdma_stat_at(a, "peer.rdma.pins_released"), BLOCKS);

	/* puts the other way: a offers blocks b owns, b READs them */
	test_owned_keys(rdma_names, 2, 1, 100000, back, 16);
	for (unsigned i = 0; i < 16; i++) {
		ops[i] = (kvt_op){ .key = back[i], .buf = mem + (size_t)i * MiB, .len = MiB };
		fill_block(back[i], ops[i].buf, MiB);
	}
	assert_int_equal(kvt_put_batch(a, ops, 16), 0);
	assert_int_equal(rdma_stat_at(a, "store.peer_puts"), 16);
	assert_int_equal(rdma_stat_at(b, "peer.rdma.pulled_bytes"), 16ll * MiB);
	assert_int_equal(rdma_stat_at(a, "peer.members.1.rdma_bytes_offered"), 16ll * MiB);
	for (unsigned i = 0; i < 16; i++)
		assert_int_equal(store_get_block(b, back[i], MiB), 0);
	assert_int_equal(rdma_stat_at(b, "store.hits_peer"), BLOCKS); /* local hits */

	/* a stranger at 10.77.0.3 is refused before any queue pair exists */
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(7599) };
	struct sockaddr_in aa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct rlink_node *n;
	struct rlink *l = NULL;
	inet_pton(AF_INET, "10.77.0.3", &sa.sin_addr);
	inet_pton(AF_INET, "10.77.0.1", &aa.sin_addr);
	assert_int_equal(rlink_node_open(&rlink_verbs_ops, (struct sockaddr *)&sa, admit_none,
					 NULL, &n), 0);
	assert_true(rlink_dial(n, (struct sockaddr *)&aa, 3000, &l) < 0);
	rlink_node_close(n);
	assert_int_equal(rdma_stat_at(a, "peer.rdma.links_refused"), 1);

	/* a closes: its keys read as misses on b (which drops the copies it
	 * promoted), in bounded time */
	for (unsigned i = 0; i < 8; i++)
		kvt_remove(b, keys[i]);
	kvt_close(a);
	uint8_t one[64];
	size_t len;
	t0 = kvt_now_ns();
	assert_int_equal(kvt_get(b, keys[0], one, sizeof(one), &len), -ENOENT);
	kvt_op miss[8];
	for (unsigned i = 0; i < 8; i++)
		miss[i] = (kvt_op){ .key = keys[i], .buf = mem + (size_t)i * MiB, .len = MiB };
	kvt_get_batch(b, miss, 8);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(miss[i].result, -ENOENT);
	assert_true(kvt_now_ns() - t0 < 40000000000ull);
	kvt_close(b);
	munmap(mem, (size_t)BLOCKS * MiB);
}

/* --- a second process: member b, doing gets or puts until it is killed ---- */

static void child(const char *what, int port, int wfd)
{
	kvt_store *b;
	kvt_key keys[KILLED_BLOCKS];
	kvt_op ops[KILLED_BLOCKS];
	uint8_t *mem = mmap(NULL, (size_t)KILLED_BLOCKS * MiB, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char ok = rdma_open_member(&members, 1, port, &b) == 0 && mem != MAP_FAILED;

	if (write(wfd, &ok, 1) != 1 || !ok)
		_exit(1);
	test_owned_keys(rdma_names, 2, 0, strcmp(what, "get") ? 50000 : 1, keys, KILLED_BLOCKS);
	for (unsigned i = 0; i < KILLED_BLOCKS; i++)
		fill_block(keys[i], mem + (size_t)i * MiB, MiB);
	for (;;) {
		for (unsigned i = 0; i < KILLED_BLOCKS; i++)
			ops[i] = (kvt_op){ .key = keys[i], .buf = mem + (size_t)i * MiB, .len = MiB };
		if (!strcmp(what, "get"))
			kvt_get_batch(b, ops, KILLED_BLOCKS);
		else
			kvt_put_batch(b, ops, KILLED_BLOCKS);
	}
}

/* Waits up to s seconds for stat of a to satisfy cmp against want. */
static long long wait_stat(kvt_store *a, const char *stat, int above, long long want, int s)
{
	long long v = 0;
	for (int i = 0; i < s * 100; i++) {
		v = rdma_stat_at(a, stat);
		if (above ? v > want : v == want)
			break;
		usleep(10000);
	}
	return v;
}

static void test_requester_killed_holding_pins(void **state)
{
	(void)state;
	int port = next_port++;
	kvt_store *a;
	kvt_key keys[KILLED_BLOCKS];
	uint8_t *blk = rdma_big(MiB);

	assert_int_equal(rdma_open_member(&members, 0, port, &a), 0);
	test_owned_keys(rdma_names, 2, 0, 1, keys, KILLED_BLOCKS);
	for (unsigned i = 0; i < KILLED_BLOCKS; i++) {
		fill_block(keys[i], blk, MiB);
		assert_int_equal(kvt_put(a, keys[i], blk, MiB), 0);
	}
	pid_t pid = rdma_spawn_ready("test_peer_rdma_verbs", "get", port);
	/* kill b while a lends it blocks: its READs are under way */
	assert_true(wait_stat(a, "peer.rdma.pins_held", 1, 0, 60) > 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	uint64_t t0 = kvt_now_ns();
	/* every pin ends: with the connection, or at its lapse (61 s here) */
	assert_int_equal(wait_stat(a, "peer.rdma.pins_held", 0, 0, 90), 0);
	printf("# pins of the killed requester ended %.1f s after the kill\n",
	       (double)(kvt_now_ns() - t0) / 1e9);
	assert_true(rdma_stat_at(a, "peer.rdma.pins_dropped") +
		    rdma_stat_at(a, "peer.rdma.pins_lapsed") > 0);
	assert_int_equal(rdma_stat_at(a, "peer.rdma.pins_taken"),
			 rdma_stat_at(a, "peer.rdma.pins_released") +
			 rdma_stat_at(a, "peer.rdma.pins_dropped") +
			 rdma_stat_at(a, "peer.rdma.pins_lapsed"));
	/* the blocks are a's as before */
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(store_get_block(a, keys[i], MiB), 0);
	kvt_close(a);
	munmap(blk, MiB);
}

/* A requester killed while its owner READs its offer: whatever the owner
 * could not READ and verify is not visible, and no reserved space leaks. */
static void test_offer_of_killed_requester(void **state)
{
	(void)state;
	int port = next_port++;
	kvt_store *a;
	kvt_key keys[KILLED_BLOCKS];
	uint8_t *blk = rdma_big(MiB);

	assert_int_equal(rdma_open_member(&members, 0, port, &a), 0);
	long long used = rdma_stat_at(a, "ram.bytes_used");
	pid_t pid = rdma_spawn_ready("test_peer_rdma_verbs", "put", port);
	/* kill b once a has begun to READ its offer */
	assert_true(wait_stat(a, "peer.rdma.pulls", 1, 0, 120) > 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* every pull ends, one way or the other, within its deadline */
	long long pulls = rdma_stat_at(a, "peer.rdma.pulls"), done = 0;
	for (int i = 0; i < 6000; i++) {
		done = rdma_stat_at(a, "peer.rdma.pull_failures") +
		       rdma_stat_at(a, "peer.rdma.pulled_bytes") / ((long long)KILLED_BLOCKS * MiB);
		if (done >= pulls)
			break;
		usleep(10000);
	}
	assert_true(done >= pulls);
	long long pulled = rdma_stat_at(a, "peer.rdma.pulled_bytes");
	printf("# %lld pulls, %lld failed, %lld MiB published\n", pulls,
	       rdma_stat_at(a, "peer.rdma.pull_failures"), pulled / MiB);
	assert_int_equal(rdma_stat_at(a, "ram.bytes_used"),
			 used + (pulled ? KILLED_BLOCKS * MiB : 0));
	test_owned_keys(rdma_names, 2, 0, 50000, keys, KILLED_BLOCKS);
	for (unsigned i = 0; i < KILLED_BLOCKS; i++)
		assert_int_equal(store_get_block(a, keys[i], MiB), pulled ? 0 : -ENOENT);
	kvt_close(a);
	munmap(blk, MiB);
}

/* The owner's READ of an offer fails (an rkey the member never had): the
 * block is never visible, its reservation is freed, the failure counted.
 * The offer comes from a raw connection that says HELLO as b from b's
 * address, while a real store b is up so that a's link to b works. */
static void test_offer_whose_read_fails(void **state)
{
	(void)state;
	int port = next_port++;
	kvt_store *a, *b;
	kvt_key key;
	uint8_t f[HDR + OFFER];
	struct hdr h;

	assert_int_equal(rdma_open_member(&members, 0, port, &a), 0);
	assert_int_equal(rdma_open_member(&members, 1, port, &b), 0);
	long long used = rdma_stat_at(a, "ram.bytes_used");
	test_owned_keys(rdma_names, 2, 0, 70000, &key, 1);

	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET,
		.sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "10.77.0.2", &src.sin_addr);
	inet_pton(AF_INET, "10.77.0.1", &dst.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&dst, sizeof(dst)), 0);
	hdr_pack(f, T_HELLO, 1, 0, 1);
	f[HDR] = 'b';
	assert_int_equal(write(fd, f, HDR + 1), HDR + 1);
	assert_int_equal(recv(fd, f, HDR + 1, MSG_WAITALL), HDR + 1);
	hdr_unpack(f, &h);
	assert_int_equal(h.type, T_HELLO | T_REPLY);
	hdr_pack(f, T_PUT, 1, F_RDMA, OFFER);
	key_pack(f + HDR, key);
	put64(f + HDR + 16, MiB);
	put64(f + HDR + 24, 12345);
	put64(f + HDR + 32, 0x10000);
	put32(f + HDR + 40, 0xdead);
	put32(f + HDR + 44, 0);
	assert_int_equal(write(fd, f, HDR + OFFER), HDR + OFFER);
	assert_int_equal(recv(fd, f, HDR + 4, MSG_WAITALL), HDR + 4);
	hdr_unpack(f, &h);
	assert_int_equal(h.type, T_PUT | T_REPLY);
	assert_int_equal((int32_t)get32(f + HDR), -EIO);
	close(fd);
	assert_int_equal(rdma_stat_at(a, "peer.rdma.pull_failures"), 1);
	assert_int_equal(rdma_stat_at(a, "peer.members.1.rdma_failures"), 1);
	assert_int_equal(rdma_stat_at(a, "ram.bytes_used"), used);
	uint8_t one[64];
	size_t len;
	assert_int_equal(kvt_get(a, key, one, sizeof(one), &len), -ENOENT);
	kvt_close(b);
	kvt_close(a);
}

/* kvbench peer over RDMA: runs, every block by RDMA and verified, its
 * limit the RDMA READ loop, and labelled emulated on the soft-RoCE device. */
static void test_kvbench_peer_over_rdma(void **state)
{
	(void)state;
	char path[] = "/tmp/kvbench-peer-rdma.json";
	char *argv[] = { "peer", "--transport", "rdma", "--hosts", "10.77.0.1,10.77.0.2",
			 "--blocks", "32", "--batch", "16", "--reps", "1", "--json", path, NULL };

	assert_int_equal(bench_peer_main(13, argv), 0);
	json_t *doc = json_load_file(path, 0, NULL);
	assert_non_null(doc);
	assert_int_equal(json_array_size(json_object_get(doc, "errors")), 0);
	json_t *c = json_object_get(doc, "config");
	assert_string_equal(json_string_value(json_object_get(c, "transport")), "rdma");
	assert_true(json_is_true(json_object_get(c, "emulated")));
	json_t *l = json_array_get(json_object_get(doc, "limits"), 0);
	assert_string_equal(json_string_value(json_object_get(l, "name")), "rdma_read_loop");
	assert_true(json_number_value(json_object_get(l, "value")) > 0);
	json_t *r = json_array_get(json_object_get(doc, "results"), 0);
	assert_string_equal(json_string_value(json_object_get(r, "name")), "peer_get_batch");
	assert_int_equal(json_integer_value(json_object_get(r, "wrong_blocks")), 0);
	json_decref(doc);
	unlink(path);
}

int main(int argc, char **argv)
{
	if (argc == 4)
		child(argv[1], atoi(argv[2]), atoi(argv[3]));

	test_need_rdma_vm(7599);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_stores_over_rdma),
		cmocka_unit_test(test_requester_killed_holding_pins),
		cmocka_unit_test(test_offer_of_killed_requester),
		cmocka_unit_test(test_offer_whose_read_fails),
		cmocka_unit_test(test_kvbench_peer_over_rdma),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
