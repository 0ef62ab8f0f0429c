/*
 * test_slot.c - zero-copy slots: reserve, write in place, commit or abort;
 * a reservation refused with -EAGAIN rather than waiting for a spill or past
 * ram.pin_cap; a commit after the store filled up; pins of RAM blocks read
 * in place; disk hits loaded into fresh slots and reaped one by one (and
 * through the eventfd), promoted into RAM in place; blocks a peer owns
 * loaded the same way; committed blocks written through in the background
 * and copied to the members that own them;
 * a forgotten pin and a forgotten reservation lapsing, and a slow load
 * that never lapses while it is read;
 * a pin on a block that kvt_remove removes, also from another thread while
 * the store churns; the arena's regions; bad arguments; without a disk
 * tier, a put, a reservation and a commit refused where what the evictor
 * cannot drop (pins, other reservations) would have it drop the block at
 * once.
 */
#include <errno.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "faultdev.h"
#include "kvtier.h"
#include "store_impl.h"
#include "util.h"

#define MiB (1024u * 1024u)

static char *dir;

static int setup(void **state)
{
	(void)state;
	dir = make_temp_dir("slot");
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rm_rf(dir);
	free(dir);
	return 0;
}

/* A RAM-only store of ram_mib MiB; extra is more "ram" keys. */
static kvt_store *open_ram(unsigned ram_mib, const char *extra)
{
	char cfg[512];
	kvt_store *s = NULL;
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"%uMiB\", \"high_watermark\": 1.0,"
		 " \"low_watermark\": 0.99, \"mlock\": false%s}}", ram_mib, extra);
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

/* Disk keys of most cases: every put is written to disk at once. */
#define WT ", \"write_policy\": \"write_through\""

/* A store with a disk tier in file (kept across opens); extra is more
 * "ram" keys, dextra more "disk" keys. */
static kvt_store *open_disk_with(const char *file, unsigned ram_mib, const char *extra,
				 const char *dextra)
{
	char cfg[1024];
	kvt_store *s = NULL;
	TEST_NEED_DISK(); /* skips the case where the disk tier cannot run */
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"%uMiB\", \"high_watermark\": 1.0,"
		 " \"low_watermark\": 0.99, \"mlock\": false%s},"
		 " \"disk\": {\"path\": \"%s/%s\", \"capacity\": \"64MiB\","
		 " \"region_size\": \"4MiB\", \"queue_depth\": 16%s}}",
		 ram_mib, extra, dir, file, dextra);
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

static kvt_store *open_disk(const char *file, unsigned ram_mib, const char *extra)
{
	return open_disk_with(file, ram_mib, extra, WT);
}

static kvt_slot slot_of(kvt_key k, size_t len)
{
	return (kvt_slot){ .key = k, .len = len };
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void test_reserve_write_commit_then_get(void **state)
{
	(void)state;
	kvt_store *s = open_ram(16, "");
	kvt_slot sl[4];

	for (int i = 0; i < 4; i++)
		sl[i] = slot_of(test_key((uint64_t)i), 100000 + (size_t)i);
	assert_int_equal(kvt_put_reserve(s, sl, 4, 0), 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(sl[i].result, 0);
		assert_non_null(sl[i].addr);
		assert_int_equal((uintptr_t)sl[i].addr % 4096, 0);
		assert_int_not_equal(sl[i].ref, 0);
		fill_block(sl[i].key, sl[i].addr, sl[i].len);
	}
	/* Not visible before the commit. */
	size_t found = 1;
	kvt_key k0 = test_key(0);
	assert_int_equal(kvt_lookup(s, &k0, 1, 0, &found), 0);
	assert_int_equal(found, 0);
	assert_int_equal(store_stat(s, "slots", "held"), 4);

	assert_int_equal(kvt_put_commit(s, sl, 4), 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(sl[i].result, 0);
		assert_null(sl[i].addr);
		assert_int_equal(sl[i].ref, 0);
		assert_int_equal(store_get_block(s, test_key((uint64_t)i), 100000 + (size_t)i), 0);
	}
	assert_int_equal(store_stat(s, "slots", "held"), 0);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);

	/* Stored keys come back marked, with nothing reserved. */
	kvt_slot again[2] = { slot_of(test_key(1), 100001), slot_of(test_key(9), 4096) };
	assert_int_equal(kvt_put_reserve(s, again, 2, 0), 1);
	assert_int_equal(again[0].result, KVT_SLOT_STORED);
	assert_null(again[0].addr);
	assert_int_equal(again[0].ref, 0);
	assert_int_equal(again[1].result, 0);
	/* A second commit of the same slots is refused per slot. */
	kvt_slot copy = again[1];
	fill_block(again[1].key, again[1].addr, 4096);
	assert_int_equal(kvt_put_commit(s, &again[1], 1), 1);
	assert_int_equal(kvt_put_commit(s, &copy, 1), 0);
	assert_int_equal(copy.result, -ESTALE);
	assert_int_equal(store_stat(s, "slots", "stale"), 1);
	assert_int_equal(store_stat(s, "slots", "commits"), 5);
	kvt_close(s);
}

static void test_abort_gives_the_space_back(void **state)
{
	(void)state;
	kvt_store *s = open_ram(4, "");
	kvt_slot sl[3];

	for (int round = 0; round < 10; round++) {
		for (int i = 0; i < 3; i++)
			sl[i] = slot_of(test_key((uint64_t)i), MiB);
		assert_int_equal(kvt_put_reserve(s, sl, 3, 0), 2); /* pin_cap: half of 4 MiB */
		assert_int_equal(sl[2].result, -EAGAIN);
		assert_int_equal(kvt_put_abort(s, sl, 3), 2);
		assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);
		assert_int_equal(store_stat(s, "ram", "bytes_used"), 0);
	}
	size_t len;
	assert_int_equal(kvt_get(s, test_key(0), NULL, 0, &len), -ENOENT);
	/* An aborted slot cannot be committed. */
	sl[0] = slot_of(test_key(0), 4096);
	assert_int_equal(kvt_put_reserve(s, sl, 1, 0), 1);
	kvt_slot copy = sl[0];
	assert_int_equal(kvt_put_abort(s, sl, 1), 1);
	assert_int_equal(kvt_put_commit(s, &copy, 1), 0);
	assert_int_equal(copy.result, -ESTALE);
	assert_int_equal(store_stat(s, "slots", "aborts"), 21);
	kvt_close(s);
}

static void test_reserve_never_waits_for_a_spill(void **state)
{
	(void)state;
	/* RAM (4 MiB) full of blocks that eviction would have to write to disk. */
	kvt_store *s = open_disk("eagain.dat", 4, ", \"pin_cap\": 1.0");
	for (uint64_t i = 0; i < 4; i++)
		store_put_block(s, test_key(i), MiB);
	long long spills = store_stat(s, "ram", "spills");
	kvt_slot sl = slot_of(test_key(100), MiB);
	assert_int_equal(kvt_put_reserve(s, &sl, 1, 0), 0);
	assert_int_equal(sl.result, -EAGAIN);
	assert_null(sl.addr);
	assert_int_equal(sl.ref, 0);
	assert_non_null(strstr(kvt_last_error(), "without spilling"));
	assert_int_equal(store_stat(s, "ram", "spills"), spills);
	assert_int_equal(store_stat(s, "slots", "reserve_refusals"), 1);
	/* A plain put may spill; then there is room for the slot. */
	store_put_block(s, test_key(101), MiB);
	kvt_close(s);

	/* Without a disk, evicting writes nothing: the reservation evicts. */
	s = open_ram(4, ", \"pin_cap\": 1.0");
	for (uint64_t i = 0; i < 4; i++)
		store_put_block(s, test_key(i), MiB);
	sl = slot_of(test_key(100), MiB);
	assert_int_equal(kvt_put_reserve(s, &sl, 1, 0), 1);
	assert_int_equal(store_stat(s, "ram", "evictions"), 1);
	assert_int_equal(kvt_put_abort(s, &sl, 1), 1);
	kvt_close(s);
}

static void test_commit_after_the_store_fills(void **state)
{
	(void)state;
	kvt_store *s = open_ram(8, "");
	kvt_slot sl[2] = { slot_of(test_key(1000), MiB), slot_of(test_key(1001), MiB) };

	assert_int_equal(kvt_put_reserve(s, sl, 2, 0), 2);
	fill_block(sl[0].key, sl[0].addr, MiB);
	fill_block(sl[1].key, sl[1].addr, MiB);
	/* Fill the store several times over while the copies "run". */
	for (uint64_t i = 0; i < 32; i++)
		store_put_block(s, test_key(i), MiB);
	assert_true(store_stat(s, "ram", "evictions") >= 26);
	/* The reserved bytes were never handed to another block. */
	assert_true(check_block(sl[0].key, sl[0].addr, MiB));
	assert_true(check_block(sl[1].key, sl[1].addr, MiB));
	assert_int_equal(kvt_put_commit(s, sl, 2), 2);
	assert_int_equal(store_get_block(s, test_key(1000), MiB), 0);
	assert_int_equal(store_get_block(s, test_key(1001), MiB), 0);
	/* Full of blocks again: the committed ones evict like any other. */
	for (uint64_t i = 32; i < 48; i++)
		store_put_block(s, test_key(i), MiB);
	size_t len;
	assert_int_equal(kvt_get(s, test_key(1000), NULL, 0, &len), -ENOENT);
	kvt_close(s);
}

static void test_pin_ram_blocks_in_place(void **state)
{
	(void)state;
	kvt_store *s = open_ram(16, "");
	kvt_slot sl[3] = { slot_of(test_key(1), 0), slot_of(test_key(2), 0),
			   slot_of(test_key(3), 0) };
	kvt_pin_batch *b = NULL;
	size_t idx[4];

	store_put_block(s, test_key(1), 5000);
	store_put_block(s, test_key(2), MiB);
	assert_int_equal(kvt_get_pin(s, sl, 3, 0, &b), 2);
	assert_non_null(b);
	assert_int_equal(sl[0].result, 0);
	assert_int_equal(sl[0].len, 5000);
	assert_true(check_block(sl[0].key, sl[0].addr, 5000));
	assert_int_equal(sl[1].result, 0);
	assert_int_equal(sl[1].len, MiB);
	assert_true(check_block(sl[1].key, sl[1].addr, MiB));
	assert_int_equal(sl[2].result, -ENOENT);
	assert_int_equal(sl[2].ref, 0);
	/* Nothing loads: the batch has nothing to report. */
	assert_int_equal(kvt_pin_reap(b, idx, 4, 0), 0);
	assert_int_equal(kvt_pin_reap(b, idx, 4, -1), 0);
	kvt_pin_free(b);
	assert_int_equal(store_stat(s, "ram", "pinned"), 2);
	assert_int_equal(kvt_unpin(s, sl, 3), 2);
	assert_int_equal(store_stat(s, "ram", "pinned"), 0);
	/* A second unpin finds nothing live. */
	assert_int_equal(kvt_unpin(s, sl, 3), 0);
	assert_int_equal(store_stat(s, "slots", "stale"), 2);
	kvt_close(s);
}

/* Puts n blocks of len, closes and reopens so that they are on disk only. */
static kvt_store *blocks_on_disk_only(const char *file, uint64_t n, size_t len,
				      const char *extra, const char *dextra)
{
	kvt_store *s = open_disk_with(file, 32, extra, dextra);
	kvt_op *ops = calloc(n, sizeof(*ops));
	char *buf = malloc(n * len);
	for (uint64_t i = 0; i < n; i++) {
		ops[i] = (kvt_op){ test_key(i), buf + i * len, len, 0 };
		fill_block(ops[i].key, ops[i].buf, len);
	}
	assert_int_equal(kvt_put_batch(s, ops, n), 0);
	kvt_close(s);
	free(ops);
	free(buf);
	/* Reopened: the RAM tier is empty, the disk kept its blocks. */
	s = open_disk_with(file, 32, extra, dextra);
	assert_int_equal(store_stat(s, "ram", "objects"), 0);
	return s;
}

static void test_pin_loads_disk_hits_one_by_one(void **state)
{
	(void)state;
	const uint64_t n = 24;
	const size_t len = 300000;
	/* Not promoted: each load stays private to its slot. */
	kvt_store *s = blocks_on_disk_only("load.dat", n, len, "", WT ", \"promote\": false");
	kvt_slot sl[25];
	kvt_pin_batch *b = NULL;

	for (uint64_t i = 0; i <= n; i++)
		sl[i] = slot_of(test_key(i), 0);
	assert_int_equal(kvt_get_pin(s, sl, n + 1, 0, &b), (int)n);
	for (uint64_t i = 0; i < n; i++)
		assert_int_not_equal(sl[i].ref, 0);
	assert_int_equal(sl[n].result, -ENOENT);

	int fd = kvt_pin_fd(b);
	assert_true(fd >= 0);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 10000), 1);
	/* Every load finished (the eventfd counted them all), none reaped:
	 * each slot still reads as loading, so a scan of the results after
	 * kvt_get_pin can never take a load for a RAM hit and use it twice
	 * (the loaders wrote them into the caller's slots before). */
	uint64_t done = 0, v;
	while (done < n) {
		assert_int_equal(poll(&p, 1, 10000), 1);
		if (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
			done += v;
	}
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(sl[i].result, -EINPROGRESS);
		assert_null(sl[i].addr);
	}

	uint8_t seen[24] = { 0 };
	size_t got = 0, idx[5];
	int r;
	while ((r = kvt_pin_reap(b, idx, 5, 10000)) > 0) {
		assert_true(r <= 5);
		for (int k = 0; k < r; k++) {
			kvt_slot *x = &sl[idx[k]];
			assert_true(idx[k] < n);
			assert_false(seen[idx[k]]);
			seen[idx[k]] = 1;
			assert_int_equal(x->result, 0);
			assert_int_equal(x->len, len);
			assert_true(check_block(x->key, x->addr, len));
			got++;
		}
	}
	assert_int_equal(r, 0);
	assert_int_equal(got, n);
	kvt_pin_free(b);
	assert_int_equal(store_stat(s, "slots", "loads"), (long long)n);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), (long long)(n * len));
	assert_int_equal(kvt_unpin(s, sl, n + 1), (int)n);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);
	assert_int_equal(store_stat(s, "ram", "bytes_used"), 0);
	assert_int_equal(store_stat(s, "slots", "loads_promoted"), 0);
	kvt_close(s);
}

/* Reaps every load of b into sl (failing on a timeout); returns how many. */
static size_t reap_all(kvt_pin_batch *b)
{
	size_t idx[8], got = 0;
	int r;
	while ((r = kvt_pin_reap(b, idx, 8, 10000)) > 0)
		got += (size_t)r;
	assert_int_equal(r, 0);
	kvt_pin_free(b);
	return got;
}

static void test_loads_become_ram_blocks_in_place(void **state)
{
	(void)state;
	const uint64_t n = 8;
	const size_t len = 300000; /* not a multiple of 4 KiB */
	kvt_store *s = blocks_on_disk_only("promote.dat", n, len, "", WT);
	kvt_slot sl[8], again[8];
	kvt_pin_batch *b = NULL;

	for (uint64_t i = 0; i < n; i++)
		sl[i] = slot_of(test_key(i), 0);
	assert_int_equal(kvt_get_pin(s, sl, n, 0, &b), (int)n);
	assert_int_equal(reap_all(b), n);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(sl[i].result, 0);
		assert_true(check_block(sl[i].key, sl[i].addr, len));
	}
	assert_int_equal(store_stat(s, "slots", "loads_promoted"), (long long)n);
	assert_int_equal(store_stat(s, "ram", "objects"), (long long)n);
	/* Pinned again while the first pins hold: RAM hits, ready at once,
	 * at the very bytes the loads landed in. */
	for (uint64_t i = 0; i < n; i++)
		again[i] = slot_of(test_key(i), 0);
	assert_int_equal(kvt_get_pin(s, again, n, 0, &b), (int)n);
	assert_int_equal(reap_all(b), 0);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(again[i].result, 0);
		assert_ptr_equal(again[i].addr, sl[i].addr);
		assert_int_equal(again[i].len, len);
	}
	assert_int_equal(store_stat(s, "slots", "pins_ram"), (long long)n);
	assert_int_equal(kvt_unpin(s, sl, n), (int)n);
	assert_int_equal(kvt_unpin(s, again, n), (int)n);
	/* Unpinned, they stay in RAM: a get hits RAM, not the disk. */
	long long disk_hits = store_stat(s, "disk", "hits");
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(store_get_block(s, test_key(i), len), 0);
	assert_int_equal(store_stat(s, "disk", "hits"), disk_hits);
	assert_int_equal(store_stat(s, "ram", "pinned"), 0);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);
	kvt_close(s);
}

static void test_load_racing_remove_is_not_promoted(void **state)
{
	(void)state;
	const uint64_t n = 24;
	kvt_store *s = blocks_on_disk_only("race.dat", n, 65536, "", WT);
	unsigned landed = 0;

	/* Each key removed right after its pin: before its read, while it
	 * runs, or after it landed. Whichever, the bytes lent out are the
	 * block's, and the removal wins once the pin ends. */
	for (uint64_t i = 0; i < n; i++) {
		kvt_slot sl = slot_of(test_key(i), 0);
		kvt_pin_batch *b = NULL;
		size_t len;
		assert_int_equal(kvt_get_pin(s, &sl, 1, 0, &b), 1);
		assert_int_equal(kvt_remove(s, test_key(i)), 0);
		assert_int_equal(reap_all(b), 1);
		if (sl.result == 0) {
			assert_true(check_block(sl.key, sl.addr, 65536));
			landed++;
		} else { /* a failed load holds nothing */
			assert_int_equal(sl.result, -ENOENT);
			assert_null(sl.addr);
			assert_int_equal(sl.len, 0);
		}
		kvt_unpin(s, &sl, 1);
		assert_int_equal(kvt_get(s, test_key(i), NULL, 0, &len), -ENOENT);
	}
	assert_int_equal(store_stat(s, "ram", "objects"), 0);
	assert_int_equal(store_stat(s, "ram", "bytes_used"), 0);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);
	print_message("%u of %u loads landed before their removal took the disk's copy\n",
		      landed, (unsigned)n);
	kvt_close(s);
}

/* Waits up to 10 s for the counter slots.name to reach want. */
static void wait_stat(kvt_store *s, const char *name, long long want)
{
	for (int ms = 0; store_stat(s, "slots", name) < want && ms < 10000; ms++)
		sleep_ms(1);
	assert_int_equal(store_stat(s, "slots", name), want);
}

static void test_commit_writes_through_in_the_background(void **state)
{
	(void)state;
	kvt_store *s = open_disk("wt.dat", 32, "");
	kvt_slot sl[4];

	for (int i = 0; i < 4; i++)
		sl[i] = slot_of(test_key((uint64_t)i), 200000);
	assert_int_equal(kvt_put_reserve(s, sl, 4, 0), 4);
	for (int i = 0; i < 4; i++)
		fill_block(sl[i].key, sl[i].addr, 200000);
	assert_int_equal(kvt_put_commit(s, sl, 4), 4);
	wait_stat(s, "write_throughs", 4);
	assert_int_equal(store_stat(s, "slots", "write_through_failures"), 0);
	assert_int_equal(store_stat(s, "disk", "objects"), 4);
	/* A removal after the commit wins over the write. */
	kvt_slot late = slot_of(test_key(9), 200000);
	assert_int_equal(kvt_put_reserve(s, &late, 1, 0), 1);
	fill_block(late.key, late.addr, 200000);
	assert_int_equal(kvt_put_commit(s, &late, 1), 1);
	assert_int_equal(kvt_remove(s, test_key(9)), 0);
	kvt_close(s);
	/* On disk across a restart: the blocks come back from the disk only. */
	s = open_disk("wt.dat", 32, "");
	assert_int_equal(store_stat(s, "ram", "objects"), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(store_get_block(s, test_key((uint64_t)i), 200000), 0);
	size_t len;
	assert_int_equal(kvt_get(s, test_key(9), NULL, 0, &len), -ENOENT);
	kvt_close(s);
	/* With "on_evict" a commit writes nothing until the block is evicted. */
	s = open_disk_with("oe.dat", 32, "", ", \"write_policy\": \"on_evict\"");
	sl[0] = slot_of(test_key(0), 200000);
	assert_int_equal(kvt_put_reserve(s, sl, 1, 0), 1);
	fill_block(sl[0].key, sl[0].addr, 200000);
	assert_int_equal(kvt_put_commit(s, sl, 1), 1);
	sleep_ms(50);
	assert_int_equal(store_stat(s, "slots", "write_throughs"), 0);
	assert_int_equal(store_stat(s, "disk", "objects"), 0);
	kvt_close(s);
}

/* Node self of the cluster {a, b} on 127.0.0.1:pa and :pb, RAM only. */
static kvt_store *peer_node(const char *self, int pa, int pb)
{
	char cfg[768];
	kvt_store *s = NULL;
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"32MiB\", \"max_block\": \"1MiB\", \"mlock\": false},"
		 " \"peers\": {\"self\": \"%s\", \"listen\": \"127.0.0.1:%d\", \"members\":"
		 " [{\"name\": \"a\", \"addr\": \"127.0.0.1:%d\"},"
		 " {\"name\": \"b\", \"addr\": \"127.0.0.1:%d\"}], \"transport\": \"tcp\","
		 " \"connect_timeout_ms\": 5000}}",
		 self, self[0] == 'a' ? pa : pb, pa, pb);
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open %s: %s: %s", self, kvt_strerror(rc), kvt_last_error());
	return s;
}

static void test_pin_loads_blocks_a_peer_owns(void **state)
{
	(void)state;
	const char *names[2] = { "a", "b" };
	int pa = test_free_port(), pb = test_free_port();
	kvt_store *b = peer_node("b", pa, pb), *a = peer_node("a", pa, pb);
	kvt_key k[5];
	size_t lens[4] = { 300000, 4096, 1 << 20, 70001 };
	kvt_slot sl[5];
	kvt_pin_batch *bt = NULL;

	/* Four blocks that b owns, stored at b only; a fifth nowhere. */
	test_owned_keys(names, 2, 1, 5000, k, 5);
	for (int i = 0; i < 4; i++)
		store_put_block(b, k[i], lens[i]);
	for (int i = 0; i < 5; i++)
		sl[i] = slot_of(k[i], 0);
	assert_int_equal(kvt_get_pin(a, sl, 5, 0, &bt), 5);
	/* All five load (reading their results before they are reaped would
	 * race with the loaders, kvt_get_pin(3)). */
	for (int i = 0; i < 5; i++)
		assert_int_not_equal(sl[i].ref, 0);
	assert_int_equal(reap_all(bt), 5);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(sl[i].result, 0);
		assert_int_equal(sl[i].len, lens[i]);
		assert_true(check_block(k[i], sl[i].addr, lens[i]));
	}
	assert_int_equal(sl[4].result, -ENOENT);
	assert_null(sl[4].addr);
	/* Held at the blocks' own sizes once they landed, and in a's RAM. */
	assert_int_equal(store_stat(a, "slots", "held_bytes"),
			 (long long)(lens[0] + lens[1] + lens[2] + lens[3]));
	assert_int_equal(store_stat(a, "slots", "loads_promoted"), 4);
	assert_int_equal(kvt_unpin(a, sl, 5), 4);
	assert_int_equal(store_stat(a, "slots", "held_bytes"), 0);
	assert_int_equal(store_stat(a, "ram", "objects"), 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(store_get_block(a, k[i], lens[i]), 0);
	/* The owner gone: its other keys read as misses, in bounded time. */
	kvt_close(b);
	kvt_key gone;
	test_owned_keys(names, 2, 1, 9000, &gone, 1);
	sl[0] = slot_of(gone, 0);
	assert_int_equal(kvt_get_pin(a, sl, 1, 0, &bt), 1);
	assert_int_equal(reap_all(bt), 1);
	assert_int_equal(sl[0].result, -ENOENT);
	assert_int_equal(store_stat(a, "slots", "held_bytes"), 0);
	kvt_close(a);
}

static void test_commit_is_copied_to_the_owner(void **state)
{
	(void)state;
	const char *names[2] = { "a", "b" };
	int pa = test_free_port(), pb = test_free_port();
	kvt_store *b = peer_node("b", pa, pb), *a = peer_node("a", pa, pb);
	kvt_key k[2];
	kvt_slot sl[2];

	/* One key b owns, one a owns: each committed on a. */
	test_owned_keys(names, 2, 1, 7000, &k[0], 1);
	test_owned_keys(names, 2, 0, 7000, &k[1], 1);
	for (int i = 0; i < 2; i++)
		sl[i] = slot_of(k[i], 250000);
	assert_int_equal(kvt_put_reserve(a, sl, 2, 0), 2);
	for (int i = 0; i < 2; i++)
		fill_block(k[i], sl[i].addr, 250000);
	assert_int_equal(kvt_put_commit(a, sl, 2), 2);
	/* b gets its own key in the background; a keeps both. */
	size_t found = 0;
	for (int ms = 0; ms < 10000; ms++) {
		assert_int_equal(kvt_lookup(b, &k[0], 1, 0, &found), 0);
		if (found)
			break;
		sleep_ms(1);
	}
	assert_int_equal(found, 1);
	assert_int_equal(store_get_block(b, k[0], 250000), 0);
	assert_int_equal(store_stat(b, "ram", "objects"), 1);
	for (int i = 0; i < 2; i++)
		assert_int_equal(store_get_block(a, k[i], 250000), 0);
	kvt_close(a);
	kvt_close(b);
}

static void test_unpin_while_loading_cancels(void **state)
{
	(void)state;
	const uint64_t n = 16;
	/* No promotion: a load that lands before the unpin (a loaded machine)
	 * would otherwise stay in RAM as a cached block, rightly. */
	kvt_store *s = blocks_on_disk_only("cancel.dat", n, MiB, "", WT ", \"promote\": false");
	kvt_slot sl[16];
	kvt_pin_batch *b = NULL;

	for (uint64_t i = 0; i < n; i++)
		sl[i] = slot_of(test_key(i), 0);
	assert_int_equal(kvt_get_pin(s, sl, n, 0, &b), (int)n);
	/* Released at once, before (or while) the reads land: never blocks. */
	assert_int_equal(kvt_unpin(s, sl, n), (int)n);
	size_t idx[16], got = 0;
	int r;
	while ((r = kvt_pin_reap(b, idx, 16, 10000)) > 0)
		got += (size_t)r;
	assert_int_equal(r, 0);
	assert_int_equal(got, n);
	kvt_pin_free(b);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);
	assert_int_equal(store_stat(s, "ram", "bytes_used"), 0);
	kvt_close(s);
}

/* An unpinned slot is not held, even while its load still runs (the
 * loader frees it when the read is done): kvt_stats_json's slots.held
 * counts slots reserved or pinned now. Each device reap is held 300 ms by
 * the fault layer, so the unpin mostly meets the load in flight; one that
 * has landed already is freed at once, which reads the same. */
static void test_unpinned_load_in_flight_is_not_held(void **state)
{
	(void)state;
	kvt_slot sl[1];
	kvt_pin_batch *b = NULL;
	size_t idx[1];
	int r;

	store_dev_ops = &fops;
	kvt_store *s = blocks_on_disk_only("unheld.dat", 1, MiB, "",
					   WT ", \"promote\": false");
	store_dev_ops = NULL;
	atomic_store(&faults.delay_us, 300000);
	sl[0] = slot_of(test_key(0), 0);
	assert_int_equal(kvt_get_pin(s, sl, 1, 0, &b), 1);
	assert_int_equal(store_stat(s, "slots", "held"), 1);
	assert_int_equal(kvt_unpin(s, sl, 1), 1);
	assert_int_equal(store_stat(s, "slots", "held"), 0);
	while ((r = kvt_pin_reap(b, idx, 1, -1)) > 0)
		assert_int_equal(sl[idx[0]].result, -ECANCELED);
	atomic_store(&faults.delay_us, 0);
	assert_int_equal(r, 0);
	kvt_pin_free(b);
	assert_int_equal(store_stat(s, "slots", "held"), 0);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);
	kvt_close(s);
}

/* Reaps every load of b; each must be result -ECANCELED with no address
 * (its record was freed before the reap); returns how many were reaped. */
static size_t reap_all_cancelled(kvt_pin_batch *b, kvt_slot *sl)
{
	size_t idx[16], got = 0;
	int r;

	while ((r = kvt_pin_reap(b, idx, 16, 10000)) > 0)
		for (int k = 0; k < r; k++, got++) {
			assert_int_equal(sl[idx[k]].result, -ECANCELED);
			assert_null(sl[idx[k]].addr);
			assert_int_equal(sl[idx[k]].len, 0);
		}
	assert_int_equal(r, 0);
	return got;
}

/* Loads that landed but were not reaped yet when their slots were unpinned,
 * lapsed or the batch freed: the reap says -ECANCELED and hands out no
 * address (the space has been given back and may hold another block), and
 * nothing is held after. Freeing the batch before unpinning its landed
 * loads is allowed; the unpin then finishes with the batch. */
static void test_landed_but_unreaped_loads_are_cancelled(void **state)
{
	(void)state;
	const uint64_t n = 8;
	/* Pins that do not lapse meanwhile (a loaded machine may take longer
	 * than a short ram.pin_ms between a landing and the next step), and a
	 * store whose pins lapse after 300 ms for the lapse case. */
	kvt_store *s = blocks_on_disk_only("unreaped.dat", n, MiB, ", \"pin_cap\": 1.0",
					   WT ", \"promote\": false");
	kvt_store *q = blocks_on_disk_only("unreaped-lapse.dat", n, MiB,
					   ", \"pin_ms\": 300, \"pin_cap\": 1.0",
					   WT ", \"promote\": false");
	kvt_slot sl[8];
	kvt_pin_batch *b = NULL;

	for (uint64_t i = 0; i < n; i++)
		sl[i] = slot_of(test_key(i), 0);
	/* unpinned after they landed */
	assert_int_equal(kvt_get_pin(s, sl, n, 0, &b), (int)n);
	for (int ms = 0; store_stat(s, "slots", "loads") < (long long)n && ms < 10000; ms += 10)
		sleep_ms(10);
	assert_int_equal(store_stat(s, "slots", "loads"), n);
	assert_int_equal(kvt_unpin(s, sl, n), (int)n);
	for (uint64_t i = 100; i < 120; i++) /* the space goes to other blocks */
		store_put_block(s, test_key(i), MiB);
	assert_int_equal(reap_all_cancelled(b, sl), n);
	assert_int_equal(kvt_unpin(s, sl, n), 0);
	kvt_pin_free(b);

	/* lapsed (ram.pin_ms 300) before the reap */
	for (uint64_t i = 0; i < n; i++)
		sl[i] = slot_of(test_key(i), 0);
	int pinned = kvt_get_pin(q, sl, n, 0, &b);
	for (uint64_t i = 0; i < n; i++)
		if (sl[i].result != -EINPROGRESS)
			fail_msg("slot %llu: %d", (unsigned long long)i, sl[i].result);
	assert_int_equal(pinned, (int)n);
	sleep_ms(900);
	assert_true(store_stat(q, "slots", "lapses") >= (long long)n);
	assert_int_equal(reap_all_cancelled(b, sl), n);
	kvt_pin_free(b);
	kvt_close(q);

	/* the batch freed first, its landed loads unpinned after */
	for (uint64_t i = 0; i < n; i++)
		sl[i] = slot_of(test_key(i), 0);
	assert_int_equal(kvt_get_pin(s, sl, n, 0, &b), (int)n);
	kvt_pin_free(b); /* waits for the loads; they stay pinned */
	assert_int_equal(store_stat(s, "slots", "held"), n);
	assert_int_equal(kvt_unpin(s, sl, n), (int)n);
	assert_int_equal(store_stat(s, "slots", "held"), 0);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);
	kvt_close(s);
}

/* A pin never lapses while the library's own read into it runs: with a
 * ram.pin_ms far shorter than the loads (each reap of the device held 20 ms
 * by the fault layer), every load still lands and counts as loaded, none
 * as failed (before, a load still in flight at its deadline was cancelled
 * and reaped as -ECANCELED). Its ram.pin_ms starts when it lands, so a
 * landed load may lapse before its reap: the reap says 0 or -ECANCELED. */
static void test_slow_load_never_lapses_in_flight(void **state)
{
	(void)state;
	const uint64_t n = 4;
	kvt_slot sl[4];
	kvt_pin_batch *b = NULL;
	size_t idx[4], got = 0;
	int r;

	store_dev_ops = &fops;
	kvt_store *s = blocks_on_disk_only("slowload.dat", n, MiB,
					   ", \"pin_ms\": 1, \"pin_cap\": 1.0",
					   WT ", \"promote\": false");
	store_dev_ops = NULL;
	atomic_store(&faults.delay_us, 20000);
	for (uint64_t i = 0; i < n; i++)
		sl[i] = slot_of(test_key(i), 0);
	assert_int_equal(kvt_get_pin(s, sl, n, 0, &b), (int)n);
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(sl[i].result, -EINPROGRESS);
	while ((r = kvt_pin_reap(b, idx, 4, -1)) > 0)
		for (int k = 0; k < r; k++, got++)
			if (sl[idx[k]].result != 0 && sl[idx[k]].result != -ECANCELED)
				fail_msg("slot %zu: %d", idx[k], sl[idx[k]].result);
	atomic_store(&faults.delay_us, 0);
	assert_int_equal(r, 0);
	assert_int_equal(got, n);
	assert_int_equal(store_stat(s, "slots", "loads"), n);
	assert_int_equal(store_stat(s, "slots", "load_failures"), 0);
	kvt_unpin(s, sl, n);
	kvt_pin_free(b);
	kvt_close(s);
}

static void test_forgotten_pin_and_reservation_lapse(void **state)
{
	(void)state;
	kvt_store *s = open_ram(4, ", \"pin_ms\": 50, \"pin_cap\": 1.0");
	kvt_slot pin = slot_of(test_key(1), 0), res = slot_of(test_key(2), MiB);
	kvt_pin_batch *b = NULL;

	store_put_block(s, test_key(1), MiB);
	assert_int_equal(kvt_get_pin(s, &pin, 1, 0, &b), 1);
	kvt_pin_free(b);
	assert_int_equal(kvt_put_reserve(s, &res, 1, 0), 1);
	assert_int_equal(store_stat(s, "ram", "pinned"), 1);
	/* Forgotten: nobody calls the store, and still the slots lapse. */
	sleep_ms(400);
	assert_int_equal(store_stat(s, "slots", "lapses"), 2);
	assert_int_equal(store_stat(s, "slots", "held"), 0);
	assert_int_equal(store_stat(s, "ram", "pinned"), 0);
	/* The reservation's space is free again, the pinned block evictable. */
	assert_int_equal(store_stat(s, "ram", "bytes_used"), MiB);
	for (uint64_t i = 10; i < 14; i++)
		store_put_block(s, test_key(i), MiB);
	size_t len;
	assert_int_equal(kvt_get(s, test_key(1), NULL, 0, &len), -ENOENT);
	/* Late calls with the lapsed handles do nothing. */
	assert_int_equal(kvt_unpin(s, &pin, 1), 0);
	assert_int_equal(kvt_put_commit(s, &res, 1), 0);
	assert_int_equal(res.result, -ESTALE);
	kvt_close(s);
}

/* A store whose pins all hit RAM runs no loads, and still a forgotten pin
 * lapses with nobody calling anything that sweeps (kvt_put and kvt_get do
 * not): the pinned block becomes evictable again. */
static void test_forgotten_ram_pin_lapses_without_sweeping_calls(void **state)
{
	(void)state;
	kvt_store *s = open_ram(4, ", \"pin_ms\": 50, \"pin_cap\": 1.0");
	kvt_slot pin = slot_of(test_key(1), 0);
	kvt_pin_batch *b = NULL;
	size_t len;

	store_put_block(s, test_key(1), MiB);
	assert_int_equal(kvt_get_pin(s, &pin, 1, 0, &b), 1);
	kvt_pin_free(b);
	sleep_ms(400);
	/* the oldest block, evictable once its pin lapsed */
	for (uint64_t i = 10; i < 14; i++)
		store_put_block(s, test_key(i), MiB);
	assert_int_equal(kvt_get(s, test_key(1), NULL, 0, &len), -ENOENT);
	assert_int_equal(store_stat(s, "slots", "lapses"), 1);
	kvt_close(s);
}

static void test_pin_survives_remove(void **state)
{
	(void)state;
	kvt_store *s = open_ram(4, "");
	kvt_slot sl = slot_of(test_key(7), 0);
	kvt_pin_batch *b = NULL;

	store_put_block(s, test_key(7), MiB);
	assert_int_equal(kvt_get_pin(s, &sl, 1, 0, &b), 1);
	kvt_pin_free(b);
	assert_int_equal(kvt_remove(s, test_key(7)), 0);
	size_t len;
	assert_int_equal(kvt_get(s, test_key(7), NULL, 0, &len), -ENOENT);
	/* The store churns; the pinned bytes stay where they are. */
	for (uint64_t i = 100; i < 110; i++)
		store_put_block(s, test_key(i), MiB);
	assert_true(check_block(test_key(7), sl.addr, MiB));
	assert_int_equal(kvt_unpin(s, &sl, 1), 1);
	assert_int_equal(kvt_get(s, test_key(7), NULL, 0, &len), -ENOENT);
	/* Its space is reusable now: the RAM holds only live blocks. */
	assert_true(store_stat(s, "ram", "bytes_used") <= 4 * MiB);
	kvt_close(s);
}

struct churn {
	kvt_store *s;
	int stop;
	unsigned errors;
};

static void *remover(void *arg)
{
	struct churn *c = arg;
	for (int round = 0; !__atomic_load_n(&c->stop, __ATOMIC_RELAXED); round++) {
		for (uint64_t i = 0; i < 8; i++) {
			kvt_remove(c->s, test_key(i));
			store_put_block(c->s, test_key(i), 64 * 1024);
		}
	}
	return NULL;
}

static void test_pins_race_removals(void **state)
{
	(void)state;
	struct churn c = { .s = open_ram(4, "") };
	pthread_t th;

	for (uint64_t i = 0; i < 8; i++)
		store_put_block(c.s, test_key(i), 64 * 1024);
	assert_int_equal(pthread_create(&th, NULL, remover, &c), 0);
	unsigned pinned = 0;
	for (int round = 0; round < 400; round++) {
		kvt_slot sl[8];
		kvt_pin_batch *b = NULL;
		for (uint64_t i = 0; i < 8; i++)
			sl[i] = slot_of(test_key(i), 0);
		assert_true(kvt_get_pin(c.s, sl, 8, 0, &b) >= 0);
		kvt_pin_free(b);
		for (int i = 0; i < 8; i++) {
			if (sl[i].result != 0) {
				assert_int_equal(sl[i].result, -ENOENT);
				continue;
			}
			pinned++;
			if (!check_block(sl[i].key, sl[i].addr, 64 * 1024))
				c.errors++;
		}
		kvt_unpin(c.s, sl, 8);
	}
	__atomic_store_n(&c.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	assert_int_equal(c.errors, 0);
	assert_true(pinned > 0);
	assert_int_equal(store_stat(c.s, "ram", "pinned"), 0);
	kvt_close(c.s);
}

static void test_arena_regions(void **state)
{
	(void)state;
	kvt_store *s = NULL;
	assert_int_equal(kvt_open("{\"ram\": {\"capacity\": \"2600MiB\", \"mlock\": false}}", &s), 0);
	void *base;
	size_t len;
	assert_int_equal(kvt_arena(s, &base, &len), 0);
	assert_int_equal(kvt_arena_regions(s, NULL, 0), 3);
	kvt_region r[4];
	memset(r, 0, sizeof(r));
	assert_int_equal(kvt_arena_regions(s, r, 2), 3); /* only two written */
	assert_null(r[2].base);
	assert_int_equal(kvt_arena_regions(s, r, 4), 3);
	char *p = base;
	size_t total = 0;
	for (int i = 0; i < 3; i++) {
		assert_ptr_equal(r[i].base, p);
		assert_int_equal((uintptr_t)r[i].base % 4096, 0);
		assert_true(r[i].len <= (1ull << 30));
		p += r[i].len;
		total += r[i].len;
	}
	assert_int_equal(total, len);
	assert_int_equal(r[0].len, 1ull << 30);
	assert_int_equal(kvt_arena_regions(NULL, r, 4), -EINVAL);
	assert_int_equal(kvt_arena_regions(s, NULL, 4), -EINVAL);
	kvt_close(s);
}

static void test_bad_arguments(void **state)
{
	(void)state;
	kvt_store *s = open_ram(4, "");
	kvt_slot sl = slot_of(test_key(1), 4096);
	kvt_pin_batch *b = NULL;
	size_t idx[1];

	assert_int_equal(kvt_put_reserve(NULL, &sl, 1, 0), -EINVAL);
	assert_int_equal(kvt_put_reserve(s, NULL, 1, 0), -EINVAL);
	assert_int_equal(kvt_put_reserve(s, &sl, 1, 0x80), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "flags"));
	assert_int_equal(kvt_put_reserve(s, NULL, 0, 0), 0);
	sl.len = 0;
	assert_int_equal(kvt_put_reserve(s, &sl, 1, 0), 0);
	assert_int_equal(sl.result, -EINVAL);
	sl.len = 512 * MiB; /* above ram.max_block */
	assert_int_equal(kvt_put_reserve(s, &sl, 1, 0), 0);
	assert_int_equal(sl.result, -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "max_block"));
	sl = slot_of(test_key(1), 4096);
	sl.flags = 1;
	assert_int_equal(kvt_put_reserve(s, &sl, 1, 0), 0);
	assert_int_equal(sl.result, -EINVAL);

	assert_int_equal(kvt_put_commit(NULL, &sl, 1), -EINVAL);
	assert_int_equal(kvt_put_commit(s, NULL, 1), -EINVAL);
	assert_int_equal(kvt_put_abort(NULL, &sl, 1), -EINVAL);
	assert_int_equal(kvt_put_abort(s, NULL, 1), -EINVAL);
	/* A handle that was never given out. */
	sl = slot_of(test_key(1), 4096);
	sl.ref = 0x123456789ull;
	assert_int_equal(kvt_put_commit(s, &sl, 1), 0);
	assert_int_equal(sl.result, -ESTALE);
	sl.result = 0;
	sl.ref = 0x123456789ull;
	assert_int_equal(kvt_unpin(s, &sl, 1), 0);

	assert_int_equal(kvt_get_pin(NULL, &sl, 1, 0, &b), -EINVAL);
	assert_int_equal(kvt_get_pin(s, NULL, 1, 0, &b), -EINVAL);
	assert_int_equal(kvt_get_pin(s, &sl, 1, 0, NULL), -EINVAL);
	assert_int_equal(kvt_get_pin(s, &sl, 1, 2, &b), -EINVAL);
	assert_int_equal(kvt_unpin(NULL, &sl, 1), -EINVAL);
	assert_int_equal(kvt_unpin(s, NULL, 1), -EINVAL);
	assert_int_equal(kvt_pin_reap(NULL, idx, 1, 0), -EINVAL);
	assert_int_equal(kvt_pin_fd(NULL), -EINVAL);
	kvt_pin_free(NULL);
	assert_int_equal(kvt_get_pin(s, &sl, 1, 0, &b), 0);
	assert_int_equal(sl.result, -ENOENT);
	assert_int_equal(kvt_pin_reap(b, NULL, 1, 0), -EINVAL);
	assert_int_equal(kvt_pin_reap(b, idx, 0, 0), -EINVAL);
	kvt_pin_free(b);
	kvt_close(s);
}

static void test_pin_cap(void **state)
{
	(void)state;
	kvt_store *s = open_ram(8, ", \"pin_cap\": 0.25");
	kvt_slot sl[3] = { slot_of(test_key(1), 0), slot_of(test_key(2), 0),
			   slot_of(test_key(3), 0) };
	kvt_pin_batch *b = NULL;

	for (uint64_t i = 1; i <= 3; i++)
		store_put_block(s, test_key(i), MiB);
	assert_int_equal(kvt_get_pin(s, sl, 3, 0, &b), 2);
	assert_int_equal(sl[2].result, -EAGAIN);
	kvt_pin_free(b);
	assert_int_equal(kvt_unpin(s, sl, 3), 2);
	assert_int_equal(kvt_get_pin(s, &sl[2], 1, 0, &b), 1);
	kvt_pin_free(b);
	assert_int_equal(kvt_unpin(s, &sl[2], 1), 1);
	kvt_close(s);
}

/* --- without a disk tier, no put reported stored is dropped at once ----------- */

/* A RAM-only store of 16 MiB whose evictor frees from above 12.8 MiB down to
 * 11.2 MiB, and whose slots may hold all of it. */
static kvt_store *open_ram_marks(void)
{
	kvt_store *s = NULL;
	int rc = kvt_open("{\"ram\": {\"capacity\": \"16MiB\", \"high_watermark\": 0.8,"
			  " \"low_watermark\": 0.7, \"pin_cap\": 1.0, \"mlock\": false}}", &s);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

/* Pins the stored blocks from..from+n-1 of 1 MiB (RAM hits), in sl. */
static void pin_blocks(kvt_store *s, uint64_t from, size_t n, kvt_slot *sl)
{
	kvt_pin_batch *b = NULL;

	for (size_t i = 0; i < n; i++)
		sl[i] = slot_of(test_key(from + i), MiB);
	assert_int_equal(kvt_get_pin(s, sl, n, 0, &b), (int)n);
	kvt_pin_free(b);
}

/* Waits until the evictor has brought RAM down to its high watermark (at
 * once when it is there already), then says whether key's block of len
 * bytes is stored: 0 or kvt_get's error. */
static int get_after_the_evictor(kvt_store *s, kvt_key key, size_t len)
{
	while (store_stat(s, "ram", "bytes_used") >
	       store_stat(s, "ram", "high_watermark_bytes"))
		sleep_ms(1);
	return store_get_block(s, key, len);
}

/* A put of another block, whatever its result: it wakes the evictor when
 * RAM is above its high watermark (a commit does not). */
static void wake_the_evictor(kvt_store *s)
{
	char small[4096];

	fill_block(test_key(999), small, sizeof(small));
	(void)kvt_put(s, test_key(999), small, sizeof(small));
}

/* A call that reported block `what` stored (rc 0) must leave it loadable. */
static void stored_means_loadable(int rc, int got, const char *what)
{
	if (rc == 0 && got != 0)
		fail_msg("%s reported the block stored, but once the evictor ran it was "
			 "gone (kvt_get: %s)", what, kvt_strerror(got));
}

/* Pinned blocks, which the evictor cannot drop, count as leased ones do: a
 * put that takes RAM past the high watermark while they and it alone stay
 * above the low one is refused (-ENOSPC, counted), where it used to return
 * 0 and be dropped by the evictor as its only victim. */
static void test_put_refused_when_pins_would_drop_it_at_once(void **state)
{
	(void)state;
	kvt_store *s = open_ram_marks();
	kvt_slot sl[12];
	char *buf = malloc(MiB);
	kvt_key k = test_key(12);

	for (uint64_t i = 0; i < 12; i++) /* 12 MiB: below the high watermark */
		store_put_block(s, test_key(i), MiB);
	pin_blocks(s, 0, 12, sl);
	fill_block(k, buf, MiB);
	int rc = kvt_put(s, k, buf, MiB);
	char why[512];
	snprintf(why, sizeof(why), "%s", kvt_last_error());
	stored_means_loadable(rc, get_after_the_evictor(s, k, MiB), "kvt_put");
	assert_int_equal(rc, -ENOSPC);
	assert_non_null(strstr(why, "kvt_put: no tier can take block"));
	assert_non_null(strstr(why, "pinned"));
	assert_int_equal(store_stat(s, "store", "refused_puts"), 1);
	assert_int_equal(store_stat(s, "ram", "refused_puts"), 1);
	assert_int_equal(store_stat(s, "ram", "evictions"), 0);
	/* Four unpinned: the evictor drops two of those, and the put stays. */
	assert_int_equal(kvt_unpin(s, sl, 4), 4);
	assert_int_equal(kvt_put(s, k, buf, MiB), 0);
	assert_int_equal(get_after_the_evictor(s, k, MiB), 0);
	for (uint64_t i = 4; i < 12; i++)
		assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
	assert_int_equal(store_stat(s, "store", "refused_puts"), 1);
	assert_int_equal(kvt_unpin(s, sl + 4, 8), 8);
	free(buf);
	kvt_close(s);
}

/* Commits that take RAM past its high watermark wake the evictor, as puts
 * do: RAM comes back under the mark without another call. Before, it stayed
 * above until the next put (16 MiB RAM, 14 blocks of 1 MiB committed: 14
 * MiB used against a high watermark of 12.8 MiB, for good). */
static void test_commit_above_the_high_watermark_wakes_the_evictor(void **state)
{
	(void)state;
	kvt_store *s = open_ram_marks();
	kvt_slot sl[14];

	for (uint64_t i = 0; i < 14; i++) {
		sl[i] = slot_of(test_key(300 + i), MiB);
		assert_int_equal(kvt_put_reserve(s, &sl[i], 1, 0), 1);
		fill_block(sl[i].key, sl[i].addr, MiB);
		assert_int_equal(kvt_put_commit(s, &sl[i], 1), 1);
		assert_int_equal(sl[i].result, 0);
	}
	/* bounded wait: the evictor runs on its own thread */
	for (int ms = 0; store_stat(s, "ram", "bytes_used") >
			 store_stat(s, "ram", "high_watermark_bytes"); ms++) {
		if (ms > 5000)
			fail_msg("RAM stayed at %lld bytes, above its high watermark (%lld), "
				 "5 s after the last commit", store_stat(s, "ram", "bytes_used"),
				 store_stat(s, "ram", "high_watermark_bytes"));
		usleep(1000);
	}
	assert_true(store_stat(s, "ram", "evictions") > 0);
	/* the newest blocks stay */
	assert_int_equal(store_get_block(s, test_key(313), MiB), 0);
	kvt_close(s);
}

/*
 * A slot whose block the evictor would drop at once, after the call that
 * should have refused it (rc: its result, 0 where it was reserved and
 * committed; why: kvt_last_error() then): were it stored, it must load
 * after the evictor ran; it is refused instead, -ENOSPC with the slot
 * cleared, why naming call, counted in ram.refused_puts.
 */
static void expect_refused_slot(kvt_store *s, kvt_slot *sl, int rc, const char *why,
				const char *call)
{
	char want[128];

	if (rc == 0)
		wake_the_evictor(s);
	stored_means_loadable(rc, get_after_the_evictor(s, sl->key, MiB), "kvt_put_commit");
	assert_int_equal(sl->result, -ENOSPC);
	assert_null(sl->addr);
	assert_int_equal(sl->ref, 0);
	snprintf(want, sizeof(want), "%s: no tier can take block", call);
	assert_non_null(strstr(why, want));
	assert_int_equal(store_stat(s, "ram", "refused_puts"), 1);
}

/* A reservation that the evictor would drop as soon as it was committed
 * (here the other reservations, which it cannot drop, fill RAM above the
 * low watermark) is refused at kvt_put_reserve, before the caller copies:
 * -ENOSPC, counted. It used to be reserved, and once committed the block
 * was the evictor's only victim at the next eviction. */
static void test_reserve_refused_when_the_block_would_be_dropped(void **state)
{
	(void)state;
	kvt_store *s = open_ram_marks();
	kvt_slot held[12], sl = slot_of(test_key(12), MiB);

	for (uint64_t i = 0; i < 12; i++)
		held[i] = slot_of(test_key(100 + i), MiB);
	assert_int_equal(kvt_put_reserve(s, held, 12, 0), 12);
	int n = kvt_put_reserve(s, &sl, 1, 0);
	assert_int_equal(n, sl.result == 0);
	char why[512];
	snprintf(why, sizeof(why), "%s", kvt_last_error());
	int rc = sl.result; /* 0: reserved, then published */
	if (rc == 0) {
		fill_block(sl.key, sl.addr, MiB);
		rc = kvt_put_commit(s, &sl, 1) == 1 ? sl.result : -1;
	}
	expect_refused_slot(s, &sl, rc, why, "kvt_put_reserve");
	assert_int_equal(store_stat(s, "slots", "reserve_refusals"), 1);
	assert_int_equal(store_stat(s, "slots", "held"), 12);
	/* The twelve below the high watermark are published, as blocks the
	 * evictor may drop from then on. */
	for (int i = 0; i < 12; i++)
		fill_block(held[i].key, held[i].addr, MiB);
	assert_int_equal(kvt_put_commit(s, held, 12), 12);
	assert_int_equal(store_stat(s, "slots", "held_bytes"), 0);
	for (uint64_t i = 0; i < 12; i++)
		assert_int_equal(store_get_block(s, test_key(100 + i), MiB), 0);
	kvt_close(s);
}

/* Pins taken between a reservation and its commit can leave the block the
 * evictor's only victim: the commit refuses it (-ENOSPC, counted) and gives
 * the space back, where it used to publish a block soon dropped. */
static void test_commit_refused_when_the_block_would_be_dropped(void **state)
{
	(void)state;
	kvt_store *s = open_ram_marks();
	kvt_slot pins[12], sl = slot_of(test_key(12), MiB);

	for (uint64_t i = 0; i < 12; i++)
		store_put_block(s, test_key(i), MiB);
	/* 13 MiB with it, but 12 of them the evictor may drop: reserved. */
	assert_int_equal(kvt_put_reserve(s, &sl, 1, 0), 1);
	fill_block(sl.key, sl.addr, MiB);
	pin_blocks(s, 0, 12, pins);
	kvt_slot copy = sl;
	int rc = kvt_put_commit(s, &sl, 1) == 1 ? sl.result : -1;
	char why[512];
	snprintf(why, sizeof(why), "%s", kvt_last_error());
	expect_refused_slot(s, &sl, rc, why, "kvt_put_commit");
	assert_int_equal(store_stat(s, "slots", "commits"), 0);
	/* Nothing leaks: the reservation is gone, its bytes free. */
	assert_int_equal(kvt_put_commit(s, &copy, 1), 0);
	assert_int_equal(copy.result, -ESTALE);
	assert_int_equal(store_stat(s, "slots", "held"), 12);
	assert_int_equal(store_stat(s, "ram", "bytes_used"), 12 * (long long)MiB);
	assert_int_equal(kvt_unpin(s, pins, 12), 12);
	kvt_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reserve_write_commit_then_get),
		cmocka_unit_test(test_abort_gives_the_space_back),
		cmocka_unit_test(test_reserve_never_waits_for_a_spill),
		cmocka_unit_test(test_commit_after_the_store_fills),
		cmocka_unit_test(test_put_refused_when_pins_would_drop_it_at_once),
		cmocka_unit_test(test_reserve_refused_when_the_block_would_be_dropped),
		cmocka_unit_test(test_commit_refused_when_the_block_would_be_dropped),
		cmocka_unit_test(test_commit_above_the_high_watermark_wakes_the_evictor),
		cmocka_unit_test(test_pin_ram_blocks_in_place),
		cmocka_unit_test(test_pin_loads_disk_hits_one_by_one),
		cmocka_unit_test(test_loads_become_ram_blocks_in_place),
		cmocka_unit_test(test_load_racing_remove_is_not_promoted),
		cmocka_unit_test(test_commit_writes_through_in_the_background),
		cmocka_unit_test(test_pin_loads_blocks_a_peer_owns),
		cmocka_unit_test(test_commit_is_copied_to_the_owner),
		cmocka_unit_test(test_unpin_while_loading_cancels),
		cmocka_unit_test(test_unpinned_load_in_flight_is_not_held),
		cmocka_unit_test(test_landed_but_unreaped_loads_are_cancelled),
		cmocka_unit_test(test_slow_load_never_lapses_in_flight),
		cmocka_unit_test(test_forgotten_pin_and_reservation_lapse),
		cmocka_unit_test(test_forgotten_ram_pin_lapses_without_sweeping_calls),
		cmocka_unit_test(test_pin_survives_remove),
		cmocka_unit_test(test_pins_race_removals),
		cmocka_unit_test(test_arena_regions),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_pin_cap),
	};
	faultdev_init();
	return cmocka_run_group_tests(tests, setup, teardown);
}
