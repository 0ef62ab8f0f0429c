/*
 * test_peer_members.c - the peer tier through the public ABI, its members
 * working: the peers config keys and their errors, a single member as a
 * plain store, keys owned by rendezvous hashing, puts copied to the owner,
 * gets, batches and lookups answered by the owner (with the checksum it
 * kept), and peer hits promoted only when asked.
 */

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvtier.h"
#include "opts.h"
#include "util.h"
#include "peer_util.h"

/* The owner of k among {"a", "b"}: 0 for a, 1 for b (see lib/peer.h). */
static unsigned owner_of(kvt_key k)
{
	static const char *const names[] = { "a", "b" };
	return test_owner(k, names, 2);
}

static size_t size_of(size_t i)
{
	return 1000 + i * 3001;
}

/* --- config --------------------------------------------------------------- */

#define MA "{\"name\": \"a\", \"addr\": \"127.0.0.1:40001\"}"

#define MB "{\"name\": \"b\", \"addr\": \"127.0.0.1:40002\"}"

#define ONLY_A "\"self\": \"a\", \"members\": [" MA "]"

#define A_B(name, addr) "\"self\": \"a\", \"members\": [" MA ", {\"name\": \"" name "\", \"addr\": \"" addr "\"}]"

static void test_config_errors(void **state)
{
	static const struct {
		const char *peers;
		int rc;
		const char *needle;
	} bad[] = {
		{ "\"self\": \"c\", \"members\": [" MA ", " MB "]", -EINVAL, "peers.self" },
		{ "\"members\": [" MA "]", -EINVAL, "peers.self" },
		{ A_B("a", "127.0.0.1:40002"), -EINVAL, "peers.members[1].name" },
		{ A_B("b", "127.0.0.1"), -EINVAL, "peers.members[1].addr" },
		{ A_B("b", "127.0.0.1:0"), -EINVAL, "peers.members[1].addr" },
		{ A_B("b", "127.0.0.1:70000"), -EINVAL, "peers.members[1].addr" },
		{ "\"self\": \"a\", \"members\": [{\"name\": \"a\", \"addr\": \"127.0.0.1:1\", \"port\": 1}]",
		  -EINVAL, "peers.members[0].port" },
		{ ONLY_A ", \"colour\": \"blue\"", -EINVAL, "peers.colour" },
		{ "\"self\": \"a\", \"members\": []", -EINVAL, "peers.members" },
		{ "\"self\": \"a\"", -EINVAL, "peers.members" },
		{ ONLY_A ", \"listen\": \"127.0.0.1\"", -EINVAL, "peers.listen" },
		{ ONLY_A ", \"connect_timeout_ms\": 0", -EINVAL, "peers.connect_timeout_ms" },
		{ ONLY_A ", \"transport\": \"udp\"", -EINVAL, "peers.transport" },
		{ NULL, -EADDRINUSE, NULL }, /* self's address taken */
	};
	struct fx *f = *state;
	int lfd = listen_on(f->pa);
	char cfg[1024], port[16], peers[256];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kvt_store *s = (kvt_store *)0x1;
		const char *p = bad[i].peers, *needle = bad[i].needle;
		if (!p) {
			snprintf(peers, sizeof(peers), "\"self\": \"a\", \"members\": [{\"name\": \"a\","
				 " \"addr\": \"127.0.0.1:%d\"}]", f->pa);
			snprintf(port, sizeof(port), "%d", f->pa);
			p = peers;
			needle = port;
		}
		snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false},"
			 " \"peers\": {%s}}", p);
		int rc = kvt_open(cfg, &s);
		if (rc != bad[i].rc)
			fail_msg("%s: got %d (%s), expected %d", cfg, rc, kvt_last_error(), bad[i].rc);
		if (!strstr(kvt_last_error(), needle))
			fail_msg("%s: error \"%s\" does not name %s", cfg, kvt_last_error(), needle);
		assert_ptr_equal(s, (kvt_store *)0x1);
	}
	close(lfd);
}

/* The peer tier is opened with struct peer_opts, never the configuration:
 * every "peers" key (and ram.max_block) reaches it through opts_peer. */
static void test_opts_carry_every_peers_key(void **state)
{
	(void)state;
	struct kvt_config c;
	const char *json = "{\"ram\": {\"max_block\": \"3MiB\"}, \"peers\": {\"self\": \"b\","
		" \"members\": [" MA ", " MB "], \"listen\": \"127.0.0.1:40012\","
		" \"connect_timeout_ms\": 11, \"request_timeout_ms\": 12, \"down_ms\": 13,"
		" \"idle_timeout_ms\": 14, \"log_interval_ms\": 15,"
		" \"max_conns_per_member\": 16}}";
	int rc = config_parse(json, &c);
	if (rc)
		fail_msg("config_parse: %s", kvt_last_error());
	struct peer_opts o = opts_peer(&c);
	assert_int_equal(o.nmembers, 2);
	assert_string_equal(o.names[0], "a");
	assert_string_equal(o.names[1], "b");
	assert_string_equal(o.addrs[0], "127.0.0.1:40001");
	assert_string_equal(o.addrs[1], "127.0.0.1:40002");
	assert_int_equal(o.self, 1);
	assert_string_equal(o.listen, "127.0.0.1:40012");
	assert_int_equal(o.max_block, 3u << 20);
	assert_int_equal(o.connect_ms, 11);
	assert_int_equal(o.request_ms, 12);
	assert_int_equal(o.down_ms, 13);
	assert_int_equal(o.idle_ms, 14);
	assert_int_equal(o.log_ms, 15);
	assert_int_equal(o.max_conns, 16);
	config_free(&c);
}

static void test_single_member_is_plain_store(void **state)
{
	struct fx *f = *state;
	char cfg[512];
	kvt_key k[4];
	size_t found = 0;
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"64MiB\", \"mlock\": false},"
		 " \"peers\": {\"self\": \"solo\", \"members\": [{\"name\": \"solo\","
		 " \"addr\": \"127.0.0.1:%d\"}]}}", f->pa);
	int rc = kvt_open(cfg, &f->a);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	for (int i = 0; i < 4; i++)
		k[i] = test_key(100 + (uint64_t)i);
	for (int i = 0; i < 3; i++)
		store_put_block(f->a, k[i], size_of((size_t)i));
	for (int i = 0; i < 3; i++)
		assert_int_equal(store_get_block(f->a, k[i], size_of((size_t)i)), 0);
	assert_int_equal(store_get_block(f->a, k[3], 100), -ENOENT);
	assert_int_equal(kvt_lookup(f->a, k, 4, KVT_LEASE, &found), 0);
	assert_int_equal(found, 3);
	int fd = raw_connect(NULL, "127.0.0.1", f->pa); /* listen defaults to self's addr */
	assert_true(fd >= 0);
	close(fd);
}

/* --- two real nodes ------------------------------------------------------ */

static void test_put_goes_to_owner(void **state)
{
	struct fx *f = *state;
	enum { N = 32 };
	kvt_key k[N];
	kvt_op ops[N / 2];
	unsigned nb = 0;
	open_pair(f);
	for (size_t i = 0; i < N; i++)
		nb += owner_of(k[i] = test_key(7000 + i));
	assert_true(nb > 0 && nb < N);
	long long before = store_stat(f->a, "ram", "objects");
	for (size_t i = 0; i < N / 2; i++)
		store_put_block(f->a, k[i], size_of(i));
	for (size_t i = 0; i < N / 2; i++) {
		ops[i] = (kvt_op){ .key = k[N / 2 + i], .len = size_of(N / 2 + i) };
		assert_non_null(ops[i].buf = malloc(ops[i].len));
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	assert_int_equal(kvt_put_batch(f->a, ops, N / 2), 0);
	for (size_t i = 0; i < N / 2; i++) {
		assert_int_equal(ops[i].result, 0);
		free(ops[i].buf);
	}
	/* Every block is on a, whoever owns it. */
	assert_int_equal(store_stat(f->a, "ram", "objects") - before, N);
	/* b's get of a key b owns reads only b's tiers. */
	long long end = now_ms() + 2000;
	for (size_t i = 0; i < N; i++)
		while (owner_of(k[i]) == 1 && store_get_block(f->b, k[i], size_of(i))) {
			if (now_ms() > end)
				fail_msg("key %zu (owned by b) never reached b", i);
			usleep(10000);
		}
	kvt_close(f->a);
	f->a = NULL;
	for (size_t i = 0; i < N; i++) {
		int rc = store_get_block(f->b, k[i], size_of(i));
		if (owner_of(k[i]) == 1 && rc != 0)
			fail_msg("key %zu owned by b: %s after a closed", i, kvt_strerror(rc));
		if (owner_of(k[i]) == 0 && rc >= 0)
			fail_msg("key %zu owned by a was copied to b", i);
	}
}

static void test_get_and_batch_from_owner(void **state)
{
	struct fx *f = *state;
	enum { NB = 40 };
	kvt_key kb[NB + 1], ka[3];
	kvt_op ops[NB + 4];
	char small[100];
	size_t len, n = 0;
	open_pair(f);
	owned_keys(1, 20000, kb, NB + 1); /* kb[NB] is never stored */
	owned_keys(0, 20000, ka, 3);      /* ka[2] is never stored */
	for (size_t i = 0; i < NB; i++) {
		ops[i] = (kvt_op){ .key = kb[i], .len = size_of(i) };
		assert_non_null(ops[i].buf = malloc(ops[i].len));
		fill_block(kb[i], ops[i].buf, ops[i].len);
	}
	assert_int_equal(kvt_put_batch(f->b, ops, NB), 0);
	for (size_t i = 0; i < NB; i++)
		free(ops[i].buf);
	store_put_block(f->a, ka[0], 5000);
	store_put_block(f->a, ka[1], 6000);

	assert_int_equal(store_get_block(f->a, kb[0], size_of(0)), 0);
	len = 0;
	assert_int_equal(kvt_get(f->a, kb[1], small, sizeof(small), &len), -ENOBUFS);
	assert_int_equal(len, size_of(1));
	len = 0;
	assert_int_equal(kvt_get(f->a, kb[1], NULL, 0, &len), -ENOBUFS);
	assert_int_equal(len, size_of(1));

	/* b's blocks, a's own, and a miss of each owner's. */
	for (size_t i = 0; i < NB; i++)
		ops[n++] = (kvt_op){ .key = kb[i], .len = size_of(i) + 64 };
	ops[n++] = (kvt_op){ .key = ka[0], .len = 5000 };
	ops[n++] = (kvt_op){ .key = kb[NB], .len = 4096 };
	ops[n++] = (kvt_op){ .key = ka[1], .len = 6000 };
	ops[n++] = (kvt_op){ .key = ka[2], .len = 4096 };
	for (size_t i = 0; i < n; i++) {
		assert_non_null(ops[i].buf = malloc(ops[i].len));
		ops[i].result = 1;
	}
	assert_int_equal(kvt_get_batch(f->a, ops, n), -ENOENT);
	for (size_t i = 0; i < NB; i++) {
		if (ops[i].result)
			fail_msg("op %zu: %s", i, kvt_strerror(ops[i].result));
		assert_int_equal(ops[i].len, size_of(i));
		assert_true(check_block(kb[i], ops[i].buf, size_of(i)));
	}
	assert_int_equal(ops[NB].result, 0);
	assert_int_equal(ops[NB].len, 5000);
	assert_true(check_block(ka[0], ops[NB].buf, 5000));
	assert_int_equal(ops[NB + 1].result, -ENOENT);
	assert_int_equal(ops[NB + 2].result, 0);
	assert_true(check_block(ka[1], ops[NB + 2].buf, 6000));
	assert_int_equal(ops[NB + 3].result, -ENOENT);
	for (size_t i = 0; i < n; i++)
		free(ops[i].buf);
}

/* Ops of one batch that share a buffer, loaded from the owner: each is
 * promoted (peers.promote) into this node's RAM with its own bytes (they
 * are asked one at a time), not with whichever block landed in the buffer
 * last. */
static void test_batch_ops_sharing_a_buffer_from_owner(void **state)
{
	struct fx *f = *state;
	enum { N = 4, LEN = 50000 };
	kvt_key kb[N];
	kvt_op ops[N];
	char *scratch = malloc(LEN);

	assert_non_null(scratch);
	open_pair_with(f, PROMOTE);
	owned_keys(1, 30000, kb, N);
	for (int i = 0; i < N; i++)
		store_put_block(f->b, kb[i], LEN);
	for (int i = 0; i < N; i++)
		ops[i] = (kvt_op){ kb[i], scratch, LEN, 1 };
	long long peer_hits = store_stat(f->a, "store", "hits_peer");
	assert_int_equal(kvt_get_batch(f->a, ops, N), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, LEN);
	}
	assert_int_equal(store_stat(f->a, "store", "hits_peer"), peer_hits + N);
	/* now from a's RAM, each with its own bytes */
	for (int i = 0; i < N; i++)
		assert_int_equal(store_get_block(f->a, kb[i], LEN), 0);
	assert_int_equal(store_stat(f->a, "store", "hits_peer"), peer_hits + N);
	free(scratch);
}

/* A block loaded from its owner is returned, verified, and by default
 * not copied into the loader's RAM: the next get asks the owner again.
 * With peers.promote it is copied, and the next get is a RAM hit. */
static void test_peer_hits_are_promoted_only_when_asked(void **state)
{
	struct fx *f = *state;
	enum { LEN = 300000 };
	kvt_key kb[2];

	for (int promote = 0; promote < 2; promote++) {
		open_pair_with(f, promote ? PROMOTE : "");
		owned_keys(1, 46000, kb, 2);
		store_put_block(f->b, kb[0], LEN);
		store_put_block(f->b, kb[1], LEN);
		long long objects = store_stat(f->a, "ram", "objects");
		long long peer = store_stat(f->a, "store", "hits_peer");
		long long ram = store_stat(f->a, "store", "hits_ram");
		long long promotions = store_stat(f->a, "store", "promotions");
		char *buf = malloc(LEN);
		kvt_op ops[1] = { { kb[1], buf, LEN, 1 } };

		assert_non_null(buf);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(store_get_block(f->a, kb[0], LEN), 0);
			ops[0] = (kvt_op){ kb[1], buf, LEN, 1 };
			assert_int_equal(kvt_get_batch(f->a, ops, 1), 0);
			assert_int_equal(ops[0].result, 0);
			assert_int_equal(ops[0].len, LEN);
			assert_true(check_block(kb[1], buf, LEN));
		}
		/* the first get of each from b; the second from b again, or
		 * from a's RAM when promoted */
		assert_int_equal(store_stat(f->a, "store", "hits_peer"), peer + (promote ? 2 : 4));
		assert_int_equal(store_stat(f->a, "store", "hits_ram"), ram + (promote ? 2 : 0));
		assert_int_equal(store_stat(f->a, "store", "promotions"),
				 promotions + (promote ? 2 : 0));
		assert_int_equal(store_stat(f->a, "ram", "objects"), objects + (promote ? 2 : 0));
		free(buf);
		kvt_close(f->a);
		kvt_close(f->b);
		f->a = f->b = NULL;
	}
}

/*
 * Waits until s's RAM tier holds n pins: the sends of its server, which
 * pin each block they send, are over. Reading the count takes the locks
 * that those pins end under, so what the test writes into a block after
 * this comes after the sends read it (for the thread sanitizer too, which
 * does not see the order that the socket gives).
 */
static void wait_ram_pins(kvt_store *s, long long n)
{
	long long end = now_ms() + 5000;

	while (store_stat(s, "ram", "pinned") != n) {
		if (now_ms() > end)
			fail_msg("the server's pins never ended");
		usleep(1000);
	}
}

/*
 * An owner sends each block with the checksum kept beside it in RAM, not
 * one computed from its bytes as it sends them. Blocks made every way a
 * RAM block can be made (a put on the owner, a put forwarded to it by a
 * member, a committed slot, a disk hit copied into RAM, a disk hit loaded
 * into a slot and kept in place) all arrive verified, and so does one
 * served from the owner's disk (sent with the checksum the disk verified);
 * a block whose bytes change in the owner's RAM after it was made arrives
 * as a miss, counted as a checksum failure, never with the changed bytes.
 */
static void test_owner_sends_the_kept_checksum(void **state)
{
	struct fx *f = *state;
	enum { N = 5, LEN = 200000 };
	char cfg[1280], *dir;
	kvt_key kb[N + 1];         /* kb[N]: on b's disk only throughout */
	kvt_slot sl;
	kvt_pin_batch *bt = NULL;
	kvt_op ops[N + 1];

	TEST_NEED_DISK();
	dir = make_temp_dir("peer-sums");
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"64MiB\", \"max_block\": \"2MiB\", \"mlock\": false},"
		 " \"disk\": {\"path\": \"%s/b.dat\", \"capacity\": \"64MiB\","
		 " \"region_size\": \"4MiB\", \"write_policy\": \"write_through\"},"
		 " \"peers\": {\"self\": \"b\", \"listen\": \"127.0.0.1:%d\", \"members\":"
		 " [{\"name\": \"a\", \"addr\": \"127.0.0.1:%d\"},"
		 " {\"name\": \"b\", \"addr\": \"127.0.0.1:%d\"}], \"transport\": \"tcp\","
		 " \"connect_timeout_ms\": 5000, \"request_timeout_ms\": 5000}}",
		 dir, f->pb, f->pa, f->pb);
	owned_keys(1, 52000, kb, N + 1);
	/* kb[3], kb[4], kb[N] only on b's disk: written through, b reopened */
	assert_int_equal(kvt_open(cfg, &f->b), 0);
	store_put_block(f->b, kb[3], LEN);
	store_put_block(f->b, kb[4], LEN);
	store_put_block(f->b, kb[N], LEN);
	kvt_close(f->b);
	assert_int_equal(kvt_open(cfg, &f->b), 0);
	assert_int_equal(store_stat(f->b, "ram", "objects"), 0);
	/* a disk hit copied into RAM; one loaded into a slot, kept in place */
	assert_int_equal(store_get_block(f->b, kb[3], LEN), 0);
	assert_int_equal(store_stat(f->b, "store", "promotions"), 1);
	sl = (kvt_slot){ .key = kb[4] };
	assert_int_equal(kvt_get_pin(f->b, &sl, 1, 0, &bt), 1);
	size_t idx;
	assert_int_equal(kvt_pin_reap(bt, &idx, 1, 10000), 1); /* loaded from disk */
	assert_int_equal(sl.result, 0);
	kvt_pin_free(bt);
	assert_int_equal(store_stat(f->b, "slots", "loads_promoted"), 1);
	assert_int_equal(kvt_unpin(f->b, &sl, 1), 1);
	/* a put on b; a committed slot on b */
	store_put_block(f->b, kb[0], LEN);
	sl = (kvt_slot){ .key = kb[2], .len = LEN };
	assert_int_equal(kvt_put_reserve(f->b, &sl, 1, 0), 1);
	fill_block(kb[2], sl.addr, LEN);
	assert_int_equal(kvt_put_commit(f->b, &sl, 1), 1);
	/* a put on a, forwarded to b; a reopened without it */
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, SLOW_CONNECT);
	store_put_block(f->a, kb[1], LEN);
	long long end = now_ms() + 5000;
	while (store_stat(f->b, "ram", "objects") < N) {
		if (now_ms() > end)
			fail_msg("the put forwarded by a never reached b");
		usleep(10000);
	}
	kvt_close(f->a);
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, SLOW_CONNECT);

	for (int i = 0; i <= N; i++) {
		ops[i] = (kvt_op){ .key = kb[i], .len = LEN, .result = 1 };
		assert_non_null(ops[i].buf = malloc(LEN));
	}
	assert_int_equal(kvt_get_batch(f->a, ops, N + 1), 0);
	for (int i = 0; i <= N; i++) {
		if (ops[i].result)
			fail_msg("block %d: %s", i, kvt_strerror(ops[i].result));
		assert_int_equal(ops[i].len, LEN);
		assert_true(check_block(kb[i], ops[i].buf, LEN));
	}
	assert_int_equal(store_stat(f->a, "store", "hits_peer"), N + 1);
	assert_int_equal(store_stat(f->b, "ram", "objects"), N); /* kb[N]: from disk */
	assert_int_equal(store_stat(f->a, "peer", "checksum_failures"), 0);

	/* each block's bytes changed in b's RAM (through a pin of it there):
	 * a miss at a, the damage caught; repaired, a hit again */
	for (int i = 0; i < N; i++) {
		sl = (kvt_slot){ .key = kb[i] };
		assert_int_equal(kvt_get_pin(f->b, &sl, 1, 0, &bt), 1);
		assert_int_equal(sl.result, 0); /* in RAM: pinned at once */
		kvt_pin_free(bt);
		wait_ram_pins(f->b, 1);
		((uint8_t *)sl.addr)[LEN / 3] ^= 0x40;
		size_t len = 0;
		int rc = kvt_get(f->a, kb[i], ops[i].buf, LEN, &len);
		if (rc >= 0)
			fail_msg("block %d, changed in the owner's RAM, was returned", i);
		assert_int_equal(store_stat(f->a, "peer", "checksum_failures"), i + 1);
		wait_ram_pins(f->b, 1);
		((uint8_t *)sl.addr)[LEN / 3] ^= 0x40;
		assert_int_equal(kvt_unpin(f->b, &sl, 1), 1);
		assert_int_equal(kvt_get(f->a, kb[i], ops[i].buf, LEN, &len), 0);
		assert_true(check_block(kb[i], ops[i].buf, LEN));
	}
	for (int i = 0; i <= N; i++)
		free(ops[i].buf);
	kvt_close(f->b);
	f->b = NULL;
	rm_rf(dir);
	free(dir);
}

static void test_lookup_through_owner_and_stats(void **state)
{
	struct fx *f = *state;
	kvt_key c[10], ka[2], kb[2], mix[4];
	size_t found = 99;
	open_pair(f);
	owned_keys(1, 30000, c, 10);
	for (int i = 0; i < 10; i++)
		if (i != 6) /* a gap */
			store_put_block(f->b, c[i], 4096);
	assert_int_equal(kvt_lookup(f->a, c, 6, 0, &found), 0);
	assert_int_equal(found, 6);
	assert_int_equal(kvt_lookup(f->a, c, 10, 0, &found), 0);
	assert_int_equal(found, 6);
	assert_int_equal(kvt_lookup(f->a, c, 10, KVT_LEASE, &found), 0);
	assert_int_equal(found, 6);
	assert_true(kvt_release(f->a, c, 6) >= 0);
	assert_int_equal(kvt_lookup(f->a, c + 7, 3, KVT_LEASE, &found), 0);
	assert_int_equal(found, 3);
	assert_true(kvt_release(f->a, c + 7, 3) >= 0);

	/* A chain whose blocks alternate owners, each put on its owner. */
	owned_keys(0, 31000, ka, 2);
	owned_keys(1, 31000, kb, 2);
	mix[0] = ka[0], mix[1] = kb[0], mix[2] = ka[1], mix[3] = kb[1];
	for (int i = 0; i < 4; i++)
		store_put_block(i & 1 ? f->b : f->a, mix[i], 4096);
	assert_int_equal(kvt_lookup(f->a, mix, 4, 0, &found), 0);
	assert_int_equal(found, 4);
	assert_int_equal(kvt_lookup(f->b, mix, 4, KVT_LEASE, &found), 0);
	assert_int_equal(found, 4);

	/* with room: a's server may count something between the two calls */
	int n = kvt_stats_json(f->a, NULL, 0);
	assert_true(n > 0);
	char *buf = malloc((size_t)n + 4096);
	assert_non_null(buf);
	int m2 = kvt_stats_json(f->a, buf, (size_t)n + 4096);
	assert_true(m2 > 0 && m2 < n + 4096);
	json_t *j = json_loads(buf, 0, NULL), *m;
	free(buf);
	assert_non_null(j);
	assert_true(json_is_object(json_object_get(j, "peer")));
	assert_non_null(m = json_object_get(json_object_get(j, "peer"), "members"));
	assert_int_equal(json_is_array(m) ? json_array_size(m) : json_object_size(m), 2);
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_config_errors),
		cmocka_unit_test(test_opts_carry_every_peers_key),
		T(test_single_member_is_plain_store),
		T(test_put_goes_to_owner),
		T(test_get_and_batch_from_owner),
		T(test_batch_ops_sharing_a_buffer_from_owner),
		T(test_peer_hits_are_promoted_only_when_asked),
		T(test_owner_sends_the_kept_checksum),
		T(test_lookup_through_owner_and_stats),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
