/*
 * test_local_attach.c - the calls of processes attached to a node store in
 * this process: the attached ABI beside the node store's own, a get's pin
 * ended by the process's next request, reservations and pins that outlast
 * ram.pin_ms while an attached put or get (from RAM or from the node
 * store's disk) copies, and dozens of processes' connections at once with
 * threads sharing one. Every wait is bounded.
 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvtier.h"
#include "local.h"
#include "local_proto.h"
#include "util.h"
#include "local_util.h"

/* The attached ABI beside the node store's own: misses, -ENOBUFS, remove,
 * a put the arena cannot take without spilling, arena regions. */
static void test_attached_calls(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node_ram(", \"lease_cap\": 1.0", NULL, sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	char buf[16384];
	size_t len = 0;
	kvt_key k = test_key(9);

	assert_int_equal(kvt_get(a, k, buf, sizeof(buf), &len), -ENOENT);
	store_put_block(a, k, 12288);
	assert_int_equal(kvt_get(a, k, buf, 100, &len), -ENOBUFS);
	assert_int_equal(len, 12288);
	assert_int_equal(store_get_block(node, k, 12288), 0); /* the node store has it */
	assert_int_equal(kvt_put(a, k, buf, 12288), 0);      /* stored already: no-op */
	assert_int_equal(kvt_remove(a, k), 0);
	assert_int_equal(kvt_remove(a, k), -ENOENT);
	assert_int_equal(kvt_get(node, k, buf, sizeof(buf), &len), -ENOENT);

	kvt_region r[2];
	void *base = NULL, *nbase = NULL;
	size_t alen = 0, nlen = 0;
	assert_int_equal(kvt_arena(a, &base, &alen), 0);
	assert_int_equal(kvt_arena(node, &nbase, &nlen), 0);
	assert_int_equal(alen, nlen);
	/* Both mappings 2 MiB aligned, so that the memfd's huge pages (when
	 * the kernel gives shared memory any) are mapped whole in each. */
	assert_int_equal((uintptr_t)base % (2u << 20), 0);
	assert_int_equal((uintptr_t)nbase % (2u << 20), 0);
	assert_int_equal(kvt_arena_regions(a, r, 2), 1);
	assert_ptr_equal(r[0].base, base);
	assert_int_equal(r[0].len, alen);

	/* A reservation's bad slots fail alone, as in a store with tiers: the
	 * others are reserved (or found stored) by the node store. */
	store_put_block(node, test_key(11), 8000);
	kvt_slot sl[5] = {
		{ .key = test_key(10), .len = 8000 },
		{ .key = test_key(11), .len = 8000 },
		{ .key = test_key(12), .len = 0 },
		{ .key = test_key(13), .len = 8000, .flags = 1 },
		{ .key = test_key(14), .len = 4096 },
	};
	assert_int_equal(kvt_put_reserve(a, sl, 5, 0), 2);
	assert_int_equal(sl[0].result, 0);
	assert_int_equal(sl[1].result, KVT_SLOT_STORED);
	assert_int_equal(sl[2].result, -EINVAL);
	assert_int_equal(sl[3].result, -EINVAL);
	assert_int_equal(sl[4].result, 0);
	assert_null(sl[2].addr);
	assert_null(sl[3].addr);
	assert_non_null(strstr(kvt_last_error(), "slot 3"));
	fill_block(sl[0].key, sl[0].addr, 8000);
	fill_block(sl[4].key, sl[4].addr, 4096);
	assert_int_equal(kvt_put_commit(a, sl, 5), 2);
	assert_int_equal(store_get_block(node, test_key(10), 8000), 0);
	assert_int_equal(store_get_block(node, test_key(14), 4096), 0);
	sl[0] = (kvt_slot){ .key = test_key(15), .len = 0 };
	assert_int_equal(kvt_put_reserve(a, sl, 1, 0), 0);
	assert_int_equal(sl[0].result, -EINVAL);

	/* A put batch names its first failed op, as a store with tiers does. */
	char small[4096];
	fill_block(test_key(16), small, sizeof(small));
	kvt_op bops[3] = { { test_key(16), small, sizeof(small), 1 },
			   { test_key(17), small, 0, 1 },
			   { test_key(18), NULL, 4096, 1 } };
	assert_int_equal(kvt_put_batch(a, bops, 3), -EINVAL);
	assert_int_equal(bops[0].result, 0);
	assert_non_null(strstr(kvt_last_error(), "kvt_put_batch: op 1 "));
	assert_non_null(strstr(kvt_last_error(), "len is 0"));

	/* Fill RAM with leased blocks: reservations find no room, so the
	 * puts carry their bytes in the frame and are refused as kvt_put()
	 * refuses them without a disk tier. */
	size_t big = 1u << 20, nput = 0, found = 0;
	char *blk = malloc(big);
	kvt_key keys[40];
	for (uint64_t i = 0; i < 40; i++) {
		keys[i] = test_key(500 + i);
		fill_block(keys[i], blk, big);
		int rc = kvt_put(a, keys[i], blk, big);
		if (rc == 0) {
			nput++;
			assert_int_equal(kvt_lookup(a, &keys[i], 1, KVT_LEASE, &found), 0);
		} else {
			assert_int_equal(rc, -ENOSPC);
		}
	}
	assert_true(nput >= 8 && nput < 40);
	for (uint64_t i = 0; i < nput; i++)
		assert_int_equal(store_get_block(a, keys[i], big), 0);
	free(blk);
	kvt_close(a); /* its leases go */
	expect_stat(node, "ram", "leased_bytes", 0);

	/* Asynchronous batches run on the attached store's own workers. */
	a = attach_within(sock, 1000);
	kvt_op ops[4];
	for (uint64_t i = 0; i < 4; i++) {
		ops[i] = (kvt_op){ .key = test_key(600 + i), .buf = malloc(8192), .len = 8192 };
		fill_block(ops[i].key, ops[i].buf, 8192);
	}
	kvt_batch *bt = NULL;
	assert_int_equal(kvt_batch_submit(a, KVT_OP_PUT, ops, 4, &bt), 0);
	assert_int_equal(kvt_batch_wait(bt, 10000), 0);
	assert_int_equal(kvt_batch_result(bt), 0);
	kvt_batch_free(bt);
	for (uint64_t i = 0; i < 4; i++) {
		assert_int_equal(store_get_block(node, ops[i].key, 8192), 0);
		free(ops[i].buf);
	}
	kvt_close(a);
	kvt_close(node);
}

/* Has node's evictor run (a put of another block wakes it when RAM is above
 * its high watermark) and waits until it has brought RAM down to that
 * mark, then gets key through a: 0 or the error. */
static int get_after_the_evictor(kvt_store *node, kvt_store *a, kvt_key key, size_t len)
{
	char small[4096];

	fill_block(test_key(899), small, sizeof(small));
	(void)kvt_put(node, test_key(899), small, sizeof(small));
	while (store_stat(node, "ram", "bytes_used") >
	       store_stat(node, "ram", "high_watermark_bytes"))
		usleep(1000);
	return store_get_block(a, key, len);
}

/* Without a disk tier, the node store refuses a block that its evictor
 * would drop as soon as it came in (its pinned blocks and the new one stay
 * above the low watermark): an attached process's kvt_put, kvt_put_reserve
 * and kvt_put_commit get -ENOSPC and a message that says so, where the put
 * and the commit used to return 0 for a block the evictor then dropped. */
static void test_attached_puts_refused_when_they_would_be_dropped(void **state)
{
	(void)state;
	char sock[256], why[512];
	/* 32 MiB: eviction from above 25.6 MiB down to 22.4 MiB */
	kvt_store *node = open_node_ram(", \"high_watermark\": 0.8, \"low_watermark\": 0.7,"
					" \"pin_cap\": 1.0", NULL, sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	size_t mib = 1u << 20;
	char *blk = malloc(mib);
	kvt_slot pins[25];
	kvt_pin_batch *b = NULL;

	for (uint64_t i = 0; i < 25; i++) {
		store_put_block(node, test_key(700 + i), mib);
		pins[i] = (kvt_slot){ .key = test_key(700 + i), .len = mib };
	}
	/* A reservation while the blocks may still be dropped is taken. */
	kvt_slot late = { .key = test_key(800), .len = mib };
	assert_int_equal(kvt_put_reserve(a, &late, 1, 0), 1);
	fill_block(late.key, late.addr, mib);
	assert_int_equal(kvt_get_pin(node, pins, 25, 0, &b), 25);
	kvt_pin_free(b);

	/* kvt_put: 26 MiB with it, 25 of them pinned */
	kvt_key k = test_key(801);
	fill_block(k, blk, mib);
	int rc = kvt_put(a, k, blk, mib);
	snprintf(why, sizeof(why), "%s", kvt_last_error());
	if (rc == 0 && get_after_the_evictor(node, a, k, mib) != 0)
		fail_msg("an attached kvt_put returned 0, but its block was dropped");
	assert_int_equal(rc, -ENOSPC);
	assert_non_null(strstr(why, "kvt_put: "));
	assert_non_null(strstr(why, "no tier of the node store can take it"));

	/* kvt_put_reserve: refused before the copy */
	kvt_slot sl = { .key = test_key(803), .len = mib };
	assert_int_equal(kvt_put_reserve(a, &sl, 1, 0), 0);
	assert_int_equal(sl.result, -ENOSPC);
	assert_null(sl.addr);
	assert_non_null(strstr(kvt_last_error(), "kvt_put_reserve: slot 0"));
	assert_non_null(strstr(kvt_last_error(), "no tier of the node store can take it"));

	/* kvt_put_commit of the reservation made before the pins */
	rc = kvt_put_commit(a, &late, 1) == 1 ? late.result : -1;
	snprintf(why, sizeof(why), "%s", kvt_last_error());
	if (rc == 0 && get_after_the_evictor(node, a, late.key, mib) != 0)
		fail_msg("an attached kvt_put_commit published a block that was dropped");
	assert_int_equal(late.result, -ENOSPC);
	assert_non_null(strstr(why, "kvt_put_commit: slot 0"));
	assert_non_null(strstr(why, "no tier of the node store can take it"));
	assert_int_equal(store_stat(node, "ram", "refused_puts"), 3);
	assert_int_equal(store_stat(node, "slots", "held"), 25); /* the pins alone */
	assert_int_equal(store_stat(node, "ram", "evictions"), 0);

	/* Unpinned, the blocks make room again. */
	assert_int_equal(kvt_unpin(node, pins, 25), 25);
	assert_int_equal(kvt_put(a, k, blk, mib), 0);
	assert_int_equal(get_after_the_evictor(node, a, k, mib), 0);
	free(blk);
	kvt_close(a);
	kvt_close(node);
}


/* With the directory off (local.directory 0), a get pins its block; its
 * unpin waits for the process's next request, which carries it in front of
 * itself; at most 16 wait so; they all end when the process closes its
 * store or is killed. */
/* The reservations behind an attached process's kvt_put are the library's
 * own, for the length of the call: they do not lapse after ram.pin_ms (1
 * ms here, far less than copying 32 MiB takes), so the copy never lands in
 * space given to another block meanwhile, and the put succeeds. */
static void test_attached_puts_outlast_pin_ms(void **state)
{
	(void)state;
	char sock[256];
	size_t len = 32u << 20, got = 0;
	char cfg[512];
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s/lapse.sock", g_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"160MiB\", \"mlock\": false, "
		 "\"pin_ms\": 1, \"max_block\": \"32MiB\"}, \"local\": {\"socket\": \"%s\", "
		 "\"directory\": 0}}", sock);
	assert_int_equal(kvt_open(cfg, &node), 0);
	kvt_store *a = attach_within(sock, 1000);
	unsigned char *buf = malloc(len), *back = malloc(len);

	assert_non_null(buf);
	assert_non_null(back);
	for (uint64_t i = 0; i < 4; i++) {
		kvt_key k = test_key(900 + i);
		fill_block(k, buf, len);
		int rc = kvt_put(a, k, buf, len);
		if (rc)
			fail_msg("put %u: %s: %s", (unsigned)i, kvt_strerror(rc), kvt_last_error());
		assert_int_equal(kvt_get(node, k, back, len, &got), 0);
		assert_int_equal(got, len);
		assert_true(check_block(k, back, len));
	}
	assert_int_equal(store_stat(node, "slots", "held"), 0);
	kvt_close(a);
	kvt_close(node);
	free(buf);
	free(back);
}

struct churn {
	kvt_store *node;
	kvt_key key;              /* the block the test reads */
	const unsigned char *want;
	size_t len;
	atomic_int ready;         /* the block is stored: the reader may get it */
	atomic_int asked;         /* gets the reader started */
	atomic_int stop;
};

/* Once the reader's get has pinned the block, removes it (its space is
 * given back once the pin ends or lapses) and puts 16 fresh 1 MiB blocks,
 * which may take that space, then puts the block back for the next get. */
static void *churn_main(void *p)
{
	struct churn *ch = p;
	size_t len = 1u << 20;
	unsigned char *buf = malloc(len);
	int seen = 0;

	for (uint64_t i = 0; buf; i++) {
		long long pins = store_stat(ch->node, "slots", "pins_ram");
		kvt_put(ch->node, ch->key, ch->want, ch->len);
		atomic_store(&ch->ready, 1);
		while (atomic_load(&ch->asked) == seen && !atomic_load(&ch->stop))
			sched_yield();
		if (atomic_load(&ch->stop))
			break;
		seen = atomic_load(&ch->asked);
		while (store_stat(ch->node, "slots", "pins_ram") == pins && !atomic_load(&ch->stop))
			sched_yield();
		kvt_remove(ch->node, ch->key);
		for (int j = 0; j < 16; j++) {
			kvt_key k = test_key(100000 + i * 16 + (uint64_t)j);
			fill_block(k, buf, len);
			kvt_put(ch->node, k, buf, len);
		}
	}
	free(buf);
	return NULL;
}

/* An attached process's get copies a block out of a pin of the node
 * store. With ram.pin_ms 1 that pin lapses while a 16 MiB block is being
 * copied, and the churn removes the block, whose space other blocks then
 * take: the get must still hand out the block's own bytes (or miss),
 * never others. */
static void test_attached_gets_outlast_pin_ms(void **state)
{
	(void)state;
	char sock[256], cfg[512];
	size_t len = 16u << 20, got = 0;
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s/lapse-get.sock", g_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false, "
		 "\"pin_ms\": 1, \"max_block\": \"16MiB\"}, \"local\": {\"socket\": \"%s\", "
		 "\"directory\": 0}}", sock);
	assert_int_equal(kvt_open(cfg, &node), 0);
	kvt_store *a = attach_within(sock, 1000);
	unsigned char *want = malloc(len), *buf = malloc(len);
	kvt_key k = test_key(990);
	struct churn ch = { .node = node, .key = k, .want = want, .len = len };
	pthread_t th;
	int hits = 0, wrong = 0, other = 0;

	assert_non_null(want);
	assert_non_null(buf);
	fill_block(k, want, len);
	assert_int_equal(pthread_create(&th, NULL, churn_main, &ch), 0);
	for (int i = 0; i < 100; i++) {
		while (!atomic_exchange(&ch.ready, 0))
			sched_yield();
		atomic_fetch_add(&ch.asked, 1);
		int rc = kvt_get(a, k, buf, len, &got);
		if (rc == -ENOENT)
			continue;
		if (rc || got != len) {
			other++;
			continue;
		}
		hits++;
		wrong += memcmp(buf, want, len) != 0;
	}
	atomic_store(&ch.stop, 1);
	pthread_join(th, NULL);
	print_message("    %d hits, %d with wrong bytes, %d failed otherwise\n", hits,
		      wrong, other);
	assert_int_equal(wrong, 0);
	assert_int_equal(other, 0);
	kvt_close(a);
	kvt_close(node);
	free(want);
	free(buf);
}

/* A get of a block only on the node store's disk: the node store loads it
 * into a fresh slot before it answers, and with ram.pin_ms 1 that pin
 * lapses while 16 MiB are read and checked. The get still loads the block
 * (under a pin that does not lapse) instead of failing with -ECANCELED. */
static void test_attached_disk_gets_outlast_pin_ms(void **state)
{
	(void)state;
	TEST_NEED_DISK();
	char sock[256], cfg[768];
	size_t len = 16u << 20, got = 0;
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s/lapse-disk.sock", g_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false, "
		 "\"pin_ms\": 1, \"max_block\": \"16MiB\"}, \"disk\": {\"path\": "
		 "\"%s/lapse.disk\", \"capacity\": \"160MiB\", \"region_size\": \"32MiB\"}, "
		 "\"local\": {\"socket\": \"%s\", \"directory\": 0}}", g_dir, sock);
	unsigned char *buf = malloc(len);

	assert_non_null(buf);
	/* Stored, then on disk only: closing writes RAM's blocks to disk. */
	assert_int_equal(kvt_open(cfg, &node), 0);
	for (uint64_t i = 0; i < 2; i++)
		store_put_block(node, test_key(980 + i), len);
	kvt_close(node);
	assert_int_equal(kvt_open(cfg, &node), 0);
	kvt_store *a = attach_within(sock, 1000);
	for (uint64_t i = 0; i < 2; i++) {
		kvt_key k = test_key(980 + i);
		int rc = kvt_get(a, k, buf, len, &got);
		if (rc)
			fail_msg("get %u: %s: %s", (unsigned)i, kvt_strerror(rc), kvt_last_error());
		assert_int_equal(got, len);
		assert_true(check_block(k, buf, len));
	}
	kvt_close(a);
	kvt_close(node);
	free(buf);
}

static void test_get_unpins_with_next_request(void **state)
{
	(void)state;
	char sock[256], buf[64];
	kvt_store *node = open_node(", \"directory\": 0", sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	kvt_op ops[20];
	size_t len = 0, found = 0;

	for (uint64_t i = 0; i < 20; i++)
		store_put_block(a, test_key(700 + i), 64);
	kvt_key k0 = test_key(700);

	/* One get: its pin stays until the next request ends it. */
	assert_int_equal(kvt_get(a, k0, buf, sizeof(buf), &len), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 1);
	assert_int_equal(store_stat(node, "slots", "held"), 1);
	assert_int_equal(kvt_get(a, test_key(701), buf, sizeof(buf), &len), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 1);
	assert_int_equal(kvt_lookup(a, &k0, 1, 0, &found), 0);
	assert_int_equal(found, 1);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 0);
	assert_int_equal(store_stat(node, "slots", "held"), 0);

	/* Ended before the request that carries them is served: a pin and
	 * its unpin count only the pins asked for. */
	assert_int_equal(kvt_get(a, k0, buf, sizeof(buf), &len), 0);
	kvt_slot sl[2] = { { .key = test_key(702) }, { .key = test_key(703) } };
	kvt_pin_batch *pb = NULL;
	assert_int_equal(kvt_get_pin(a, sl, 2, 0, &pb), 2);
	kvt_pin_free(pb);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 2);
	assert_int_equal(kvt_unpin(a, sl, 2), 2);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 0);

	/* Sixteen wait; the next get's pin carries them, and its own waits. */
	for (uint64_t i = 0; i < 16; i++)
		ops[i] = (kvt_op){ .key = test_key(700 + i), .buf = malloc(64), .len = 64 };
	assert_int_equal(kvt_get_batch(a, ops, 16), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 16);
	assert_int_equal(kvt_get(a, test_key(719), buf, sizeof(buf), &len), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 1);
	/* A batch of more than sixteen unpins at once (no request follows). */
	for (uint64_t i = 16; i < 20; i++)
		ops[i] = (kvt_op){ .key = test_key(700 + i), .buf = malloc(64), .len = 64 };
	for (uint64_t i = 0; i < 16; i++)
		ops[i].len = 64;
	assert_int_equal(kvt_get_batch(a, ops, 20), 0);
	for (uint64_t i = 0; i < 20; i++)
		assert_int_equal(ops[i].len, 64);
	expect_stat(node, "local", "pinned_blocks", 0);
	expect_stat(node, "slots", "held", 0);

	/* Closing the store ends the pins that wait. */
	for (uint64_t i = 0; i < 20; i++)
		ops[i].len = 64;
	assert_int_equal(kvt_get_batch(a, ops, 3), 0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 3);
	kvt_close(a);
	expect_stat(node, "local", "pinned_blocks", 0);
	expect_stat(node, "local", "pinned_bytes", 0);
	expect_stat(node, "slots", "held", 0);

	/* So does killing the process. */
	int out = -1;
	char c = 0;
	pid_t g = spawn_child("got", NULL, sock, &out);
	struct pollfd pf = { out, POLLIN, 0 };
	if (poll(&pf, 1, CHILD_MS) != 1 || read(out, &c, 1) != 1 || c != 'R') {
		kill(g, SIGKILL);
		waitpid(g, NULL, 0);
		fail_msg("the getting child did not get ready");
	}
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), NGOT);
	assert_int_equal(kill(g, SIGKILL), 0);
	assert_int_equal(wait_child(g, CHILD_MS), 128 + SIGKILL);
	close(out);
	expect_stat(node, "local", "pinned_blocks", 0);
	expect_stat(node, "local", "pinned_bytes", 0);
	expect_stat(node, "slots", "held", 0);
	for (uint64_t i = 0; i < 20; i++) {
		assert_int_equal(store_get_block(node, test_key(700 + i), 64), 0);
		free(ops[i].buf);
	}
	kvt_close(node);
}

/* Dozens of processes' connections at once, and threads sharing one. */
#define NCLIENTS 32

#define NTHREADS 4

struct hammer {
	kvt_store *s;
	unsigned id;
	int failures;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	for (uint64_t i = 0; i < 50; i++) {
		kvt_key k = test_key(3000 + h->id * 100 + i % 10);
		char b[8192], back[8192];
		size_t len = 0, found = 0;
		fill_block(k, b, sizeof(b));
		if (kvt_put(h->s, k, b, sizeof(b)) ||
		    kvt_get(h->s, k, back, sizeof(back), &len) || len != sizeof(b) ||
		    memcmp(b, back, len) || kvt_lookup(h->s, &k, 1, KVT_LEASE, &found) ||
		    found != 1 || kvt_release(h->s, &k, 1) != 1)
			h->failures++;
	}
	return NULL;
}

static void test_dozens_of_clients(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node(", \"max_clients\": 40", sock, sizeof(sock));
	kvt_store *c[NCLIENTS];
	kvt_key keys[4];
	size_t found = 0;

	for (uint64_t i = 0; i < 4; i++) {
		keys[i] = test_key(2000 + i);
		store_put_block(node, keys[i], 4096);
	}
	for (unsigned i = 0; i < NCLIENTS; i++) {
		c[i] = attach_within(sock, 1000);
		assert_int_equal(kvt_lookup(c[i], keys, 4, KVT_LEASE, &found), 0);
		assert_int_equal(found, 4);
	}
	assert_int_equal(store_stat(node, "local", "clients"), NCLIENTS);
	assert_int_equal(store_stat(node, "local", "leased_blocks"), 4 * NCLIENTS);
	/* One process's release leaves the others' leases standing. */
	assert_int_equal(kvt_release(c[0], keys, 4), 4);
	assert_true(store_stat(node, "ram", "leased_bytes") > 0);
	for (unsigned i = 0; i < NCLIENTS; i++)
		assert_int_equal(store_get_block(c[i], keys[i % 4], 4096), 0);

	/* Threads of one process share its connection. */
	pthread_t th[NTHREADS];
	struct hammer h[NTHREADS];
	for (unsigned t = 0; t < NTHREADS; t++) {
		h[t] = (struct hammer){ .s = c[1], .id = t };
		assert_int_equal(pthread_create(&th[t], NULL, hammer_main, &h[t]), 0);
	}
	for (unsigned t = 0; t < NTHREADS; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(h[t].failures, 0);
	}
	for (unsigned i = 0; i < NCLIENTS; i++)
		kvt_close(c[i]);
	expect_stat(node, "local", "clients", 0);
	expect_stat(node, "local", "leased_blocks", 0);
	expect_stat(node, "ram", "leased_bytes", 0);
	kvt_close(node);
}

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		return 1;
	self_exe[n] = 0;
	if (argc >= 2 && !strcmp(argv[1], "--child"))
		return child_main(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attached_calls),
		cmocka_unit_test(test_attached_puts_refused_when_they_would_be_dropped),
		cmocka_unit_test(test_get_unpins_with_next_request),
		cmocka_unit_test(test_attached_puts_outlast_pin_ms),
		cmocka_unit_test(test_attached_gets_outlast_pin_ms),
		cmocka_unit_test(test_attached_disk_gets_outlast_pin_ms),
		cmocka_unit_test(test_dozens_of_clients),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
