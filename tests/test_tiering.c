/*
 * test_tiering.c - the store with a RAM tier and a file-backed NVMe tier:
 * eviction spills to disk and gets come back verified, lookups span tiers,
 * write-around when RAM holds only leased blocks (and refusal under
 * ram.refuse_when_leased), removal from both tiers, a restart that keeps
 * the disk's blocks, many threads under TSan, and one device per store:
 * a second store on a device in use, and one device listed twice, are
 * refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "kvtier.h"
#include "util.h"

#define MiB (1024u * 1024u)

static char *dir;

static int setup(void **state)
{
	(void)state;
	dir = make_temp_dir("tiering");
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rm_rf(dir);
	free(dir);
	return 0;
}

static kvt_store *open_tiered_disk(const char *file, unsigned ram_mib, double lease_cap,
				   const char *extra, const char *disk_extra)
{
	char cfg[1024];
	kvt_store *s = NULL;
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"%uMiB\", \"lease_ms\": 60000, \"lease_cap\": %g,"
		 " \"high_watermark\": 1.0, \"low_watermark\": 0.99, \"mlock\": false%s},"
		 " \"disk\": {\"path\": \"%s/%s\", \"capacity\": \"64MiB\","
		 " \"region_size\": \"4MiB\", \"queue_depth\": 8%s}}",
		 ram_mib, lease_cap, extra, dir, file, disk_extra);
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

static kvt_store *open_tiered(const char *file, unsigned ram_mib, double lease_cap,
			      const char *extra)
{
	return open_tiered_disk(file, ram_mib, lease_cap, extra, "");
}

/*
 * Promotion is an admission decision: with RAM full to its high watermark, a
 * disk hit read once is not copied (nothing evicted); read a second time it
 * is; with room in RAM, the first read is copied.
 */
static void test_promotion_admits_on_second_hit_when_full(void **state)
{
	(void)state;
	kvt_store *s = open_tiered("admit.dat", 4, 0.5, "");

	for (uint64_t i = 0; i < 16; i++)
		store_put_block(s, test_key(i), MiB);
	/* RAM holds 12..15, the disk 0..11 */
	long long ev = store_stat(s, "ram", "evictions");
	long long prom = store_stat(s, "store", "promotions");
	long long dec = store_stat(s, "ram", "promotions_declined");
	long long disk = store_stat(s, "store", "hits_disk");

	for (uint64_t i = 0; i < 8; i++)
		assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
	assert_int_equal(store_stat(s, "store", "hits_disk"), disk + 8);
	assert_int_equal(store_stat(s, "ram", "promotions_declined"), dec + 8);
	assert_int_equal(store_stat(s, "store", "promotions"), prom);
	assert_int_equal(store_stat(s, "ram", "evictions"), ev);

	/* the second read of key 0 is admitted and evicts to make room */
	assert_int_equal(store_get_block(s, test_key(0), MiB), 0);
	assert_int_equal(store_stat(s, "store", "promotions"), prom + 1);
	assert_true(store_stat(s, "ram", "evictions") > ev);
	long long ram = store_stat(s, "store", "hits_ram");
	assert_int_equal(store_get_block(s, test_key(0), MiB), 0);
	assert_int_equal(store_stat(s, "store", "hits_ram"), ram + 1);

	/* with room in RAM, a first read is copied */
	for (uint64_t i = 12; i < 16; i++)
		kvt_remove(s, test_key(i));
	prom = store_stat(s, "store", "promotions");
	assert_int_equal(store_get_block(s, test_key(9), MiB), 0);
	assert_int_equal(store_stat(s, "store", "promotions"), prom + 1);
	kvt_close(s);
}

static void test_eviction_spills_and_gets_come_back(void **state)
{
	(void)state;
	/* lease_cap 1: the blocks still in RAM (on no disk) can all be leased */
	kvt_store *s = open_tiered("spill.dat", 4, 1.0, "");
	for (uint64_t i = 0; i < 16; i++)
		store_put_block(s, test_key(i), MiB);
	assert_true(store_stat(s, "ram", "spills") >= 12);
	for (uint64_t i = 0; i < 16; i++)
		assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
	assert_true(store_stat(s, "store", "hits_disk") >= 12);
	/* The whole chain is available across the two tiers. */
	kvt_key keys[17];
	size_t found;
	for (uint64_t i = 0; i < 17; i++)
		keys[i] = test_key(i);
	assert_int_equal(kvt_lookup(s, keys, 17, KVT_LEASE, &found), 0);
	assert_int_equal(found, 16);
	kvt_op ops[16];
	char *bufs[16];
	for (int i = 0; i < 16; i++) {
		bufs[i] = malloc(MiB);
		ops[i] = (kvt_op){ keys[i], bufs[i], MiB, 1 };
	}
	assert_int_equal(kvt_get_batch(s, ops, 16), 0);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(ops[i].len, MiB);
		assert_true(check_block(keys[i], bufs[i], MiB));
		free(bufs[i]);
	}
	kvt_close(s);
}

/* A small tier configured as a user would, with neither disk.region_size
 * nor ram.max_block: it opens, spills, returns its newest blocks verified
 * and misses (never other bytes) on those it had to drop, before and after
 * a reopen. */
static void test_a_small_disk_with_defaults_spills(void **state)
{
	(void)state;
	char cfg[512];
	kvt_store *s = NULL;
	int hits = 0, rc;

	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"4MiB\"}, \"disk\": {\"path\": \"%s/small.dat\","
		 " \"capacity\": \"16MiB\"}}", dir);
	for (int round = 0; round < 2; round++) {
		rc = kvt_open(cfg, &s);
		if (rc)
			fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
		for (uint64_t i = 0; round == 0 && i < 40; i++)
			store_put_block(s, test_key(i), MiB);
		if (round == 0)
			assert_true(store_stat(s, "ram", "spills") >= 30);
		hits = 0;
		for (uint64_t i = 0; i < 40; i++) {
			rc = store_get_block(s, test_key(i), MiB); /* checks the bytes */
			assert_true(rc == 0 || rc == -ENOENT);
			hits += rc == 0;
			if (i >= 36) /* the newest are kept */
				assert_int_equal(rc, 0);
		}
		assert_true(hits >= 10); /* 3 in RAM, 14 on disk less its spares */
		kvt_close(s);
	}
}

static void test_write_around_when_ram_is_all_leased(void **state)
{
	(void)state;
	kvt_store *s = open_tiered("around.dat", 2, 1.0, "");
	kvt_key k[2] = { test_key(1), test_key(2) };
	size_t found;
	store_put_block(s, k[0], MiB);
	store_put_block(s, k[1], MiB);
	assert_int_equal(kvt_lookup(s, k, 2, KVT_LEASE, &found), 0);
	assert_int_equal(found, 2);
	store_put_block(s, test_key(3), MiB); /* RAM cannot take it: disk does */
	assert_int_equal(store_stat(s, "store", "write_arounds"), 1);
	assert_int_equal(store_stat(s, "store", "refused_puts"), 0);
	assert_int_equal(store_get_block(s, test_key(3), MiB), 0);
	assert_int_equal(store_get_block(s, k[0], MiB), 0);
	kvt_close(s);

	s = open_tiered("refuse.dat", 2, 1.0, ", \"refuse_when_leased\": true");
	store_put_block(s, k[0], MiB);
	store_put_block(s, k[1], MiB);
	assert_int_equal(kvt_lookup(s, k, 2, KVT_LEASE, &found), 0);
	char *b = malloc(MiB);
	fill_block(test_key(3), b, MiB);
	assert_int_equal(kvt_put(s, test_key(3), b, MiB), -ENOSPC);
	assert_int_equal(store_stat(s, "store", "refused_puts"), 1);
	free(b);
	kvt_close(s);
}

static void test_batch_put_writes_around_in_one_go(void **state)
{
	(void)state;
	kvt_store *s = open_tiered("batch.dat", 2, 1.0, "");
	kvt_key k[2] = { test_key(1), test_key(2) };
	size_t found;
	store_put_block(s, k[0], MiB);
	store_put_block(s, k[1], MiB);
	assert_int_equal(kvt_lookup(s, k, 2, KVT_LEASE, &found), 0);
	kvt_op ops[6];
	char *bufs[6];
	for (int i = 0; i < 6; i++) {
		bufs[i] = malloc(MiB);
		fill_block(test_key(10 + (uint64_t)i), bufs[i], MiB);
		ops[i] = (kvt_op){ test_key(10 + (uint64_t)i), bufs[i], MiB, 1 };
	}
	assert_int_equal(kvt_put_batch(s, ops, 6), 0);
	assert_int_equal(store_stat(s, "store", "write_arounds"), 6);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(store_get_block(s, test_key(10 + (uint64_t)i), MiB), 0);
		free(bufs[i]);
	}
	kvt_close(s);
}

/*
 * A put batch larger than RAM writes its lead blocks to disk straight from
 * the caller's buffers (write-arounds) and keeps its newest blocks in RAM,
 * making room for them by spilling what RAM held before; with
 * ram.refuse_when_leased every block goes through RAM as before. Every
 * block reads back right either way.
 */
static void test_batch_larger_than_ram_writes_its_lead_around(void **state)
{
	(void)state;
	enum { OLD = 4, N = 10 };
	kvt_op ops[N];
	char *bufs[N];

	for (int pass = 0; pass < 2; pass++) {
		kvt_store *s = pass ? open_tiered("lead2.dat", 4, 1.0,
						  ", \"refuse_when_leased\": true")
				    : open_tiered("lead.dat", 4, 1.0, "");
		for (uint64_t i = 0; i < OLD; i++)
			store_put_block(s, test_key(i), MiB);
		for (int i = 0; i < N; i++) {
			bufs[i] = malloc(MiB);
			fill_block(test_key(10 + (uint64_t)i), bufs[i], MiB);
			ops[i] = (kvt_op){ test_key(10 + (uint64_t)i), bufs[i], MiB, 1 };
		}
		assert_int_equal(kvt_put_batch(s, ops, N), 0);
		long long around = store_stat(s, "store", "write_arounds");
		long long in_ram = store_stat(s, "ram", "objects");
		if (pass == 0) {
			/* 4 MiB of RAM keeps the last 4; the first 6 go around, and
			 * the 4 blocks RAM held before are spilled to make room */
			assert_int_equal(around, N - 4);
			assert_int_equal(in_ram, 4);
			assert_int_equal(store_stat(s, "ram", "spills"), OLD);
		} else {
			assert_int_equal(around, 0);
			assert_int_equal(store_stat(s, "ram", "spills"), OLD + N - in_ram);
		}
		long long ram_hits = store_stat(s, "store", "hits_ram");
		assert_int_equal(store_get_block(s, test_key(10 + N - 1), MiB), 0);
		assert_int_equal(store_stat(s, "store", "hits_ram"), ram_hits + 1);
		for (uint64_t i = 0; i < OLD; i++)
			assert_int_equal(store_get_block(s, test_key(i), MiB), 0);
		for (int i = 0; i < N; i++) {
			assert_int_equal(store_get_block(s, test_key(10 + (uint64_t)i), MiB), 0);
			free(bufs[i]);
		}
		kvt_close(s);
	}
}

/*
 * Put batches into a full RAM tier, as a long run of puts spills: RAM
 * makes room for each batch's blocks by spilling its oldest, the spills
 * and the batch's write-arounds going to disk together, and takes the
 * batch's blocks as the spills free room. Blocks of 1 MiB (a batch larger
 * than RAM: its lead goes around) and of 256 KiB (a batch RAM takes whole).
 * RAM ends with the newest blocks; every block reads back equal, and after
 * a reopen every block not in RAM at close reads back equal from disk.
 */
static void test_spilling_put_batches_keep_every_block(void **state)
{
	(void)state;
	enum { BATCHES = 4 }; /* fewer blocks than the 64 MiB disk holds */
	const size_t lens[2] = { MiB, 256 * 1024 };
	const int per[2] = { 10, 8 };

	for (int c = 0; c < 2; c++) {
		size_t len = lens[c];
		int n = per[c], total = BATCHES * n;
		kvt_op ops[10];
		char *bufs = NULL;
		char file[32];

		snprintf(file, sizeof(file), "spilling%d.dat", c);
		kvt_store *s = open_tiered(file, 4, 1.0, "");
		assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)n * len), 0);
		for (int b = 0; b < BATCHES; b++) {
			for (int i = 0; i < n; i++) {
				uint64_t k = 5000 + (uint64_t)(b * n + i);
				ops[i] = (kvt_op){ test_key(k), bufs + (size_t)i * len, len, 1 };
				fill_block(ops[i].key, ops[i].buf, len);
			}
			assert_int_equal(kvt_put_batch(s, ops, (size_t)n), 0);
			for (int i = 0; i < n; i++)
				assert_int_equal(ops[i].result, 0);
		}
		long long in_ram = store_stat(s, "ram", "objects");
		long long keep = (long long)(4 * MiB / len);
		assert_int_equal(in_ram, keep);
		assert_int_equal(store_stat(s, "ram", "spill_failures"), 0);
		assert_int_equal(store_stat(s, "disk", "reclaims"), 0);
		assert_int_equal(store_stat(s, "disk", "objects"), total - keep);
		/* RAM holds the newest */
		for (int i = total - (int)keep; i < total; i++) {
			long long hits = store_stat(s, "store", "hits_ram");
			assert_int_equal(store_get_block(s, test_key(5000 + (uint64_t)i), len), 0);
			assert_int_equal(store_stat(s, "store", "hits_ram"), hits + 1);
		}
		for (int i = 0; i < total; i++)
			assert_int_equal(store_get_block(s, test_key(5000 + (uint64_t)i), len), 0);
		kvt_close(s);
		s = open_tiered(file, 4, 1.0, "");
		int back = 0;
		for (int i = 0; i < total; i++) {
			int rc = store_get_block(s, test_key(5000 + (uint64_t)i), len);
			assert_true(rc == 0 || rc == -ENOENT);
			back += rc == 0;
		}
		assert_true(back >= total - keep);
		kvt_close(s);
		free(bufs);
	}
}

static void test_remove_clears_both_tiers(void **state)
{
	(void)state;
	kvt_store *s = open_tiered("remove.dat", 2, 0.5, "");
	for (uint64_t i = 0; i < 6; i++)
		store_put_block(s, test_key(i), MiB);
	for (uint64_t i = 0; i < 6; i++)
		assert_int_equal(kvt_remove(s, test_key(i)), 0);
	for (uint64_t i = 0; i < 6; i++) {
		assert_int_equal(store_get_block(s, test_key(i), MiB), -ENOENT);
		assert_int_equal(kvt_remove(s, test_key(i)), -ENOENT);
	}
	kvt_close(s);
}

/* Without disk.flush_on_close, a reopen finds what was on disk at close,
 * and the blocks that were only in RAM are gone. */
static void test_restart_keeps_disk_blocks(void **state)
{
	(void)state;
	const char *noflush = ", \"flush_on_close\": false";
	kvt_store *s = open_tiered_disk("restart.dat", 2, 0.5, "", noflush);
	for (uint64_t i = 0; i < 20; i++)
		store_put_block(s, test_key(i), 512 * 1024);
	long long on_disk = store_stat(s, "disk", "objects");
	assert_true(on_disk >= 16);
	kvt_close(s);
	s = open_tiered_disk("restart.dat", 2, 0.5, "", noflush);
	assert_int_equal(store_stat(s, "disk", "objects"), on_disk);
	int back = 0;
	for (uint64_t i = 0; i < 20; i++) {
		int rc = store_get_block(s, test_key(i), 512 * 1024);
		assert_true(rc == 0 || rc == -ENOENT);
		back += rc == 0;
	}
	assert_int_equal(back, on_disk);
	kvt_close(s);
}

/*
 * By default kvt_close writes the blocks only RAM holds, leased ones
 * included, to disk (with the checksums RAM kept), so that a reopen finds
 * every block with its bytes.
 */
static void test_close_writes_ram_blocks_to_disk(void **state)
{
	(void)state;
	kvt_store *s = open_tiered("flush.dat", 2, 0.5, "");
	for (uint64_t i = 0; i < 20; i++)
		store_put_block(s, test_key(i), 512 * 1024);
	long long on_disk = store_stat(s, "disk", "objects");
	assert_true(on_disk >= 16 && on_disk < 20);
	kvt_key last = test_key(19);
	size_t found = 0;
	assert_int_equal(kvt_lookup(s, &last, 1, KVT_LEASE, &found), 0);
	assert_int_equal(found, 1);
	kvt_close(s);
	s = open_tiered("flush.dat", 2, 0.5, "");
	assert_int_equal(store_stat(s, "disk", "objects"), 20);
	for (uint64_t i = 0; i < 20; i++)
		assert_int_equal(store_get_block(s, test_key(i), 512 * 1024), 0);
	kvt_close(s);
}

/*
 * Where RAM holds more than the disk tier can, kvt_close writes only the
 * most recent blocks that fit: a reopen finds a run of the newest, every
 * one with its bytes, and none of the oldest.
 */
static void test_close_writes_the_newest_that_fit(void **state)
{
	(void)state;
	enum { N = 96 };
	kvt_store *s = open_tiered("flushfit.dat", 128, 0.5, "");
	for (uint64_t i = 0; i < N; i++)
		store_put_block(s, test_key(i), MiB);
	assert_int_equal(store_stat(s, "disk", "objects"), 0);
	kvt_close(s);
	s = open_tiered("flushfit.dat", 128, 0.5, "");
	long long kept = store_stat(s, "disk", "objects");
	/* a 64 MiB tier less the two regions kept free: dozens, not all */
	assert_true(kept >= 32 && kept < N);
	for (uint64_t i = 0; i < N; i++) {
		int rc = store_get_block(s, test_key(i), MiB);
		assert_int_equal(rc, i >= N - (uint64_t)kept ? 0 : -ENOENT);
	}
	kvt_close(s);
}

/*
 * One kvt_put_batch of more than the whole disk tier holds: every op
 * succeeds (the disk's later writes reclaim the regions its earlier ones
 * took, as between batches), and what stays is a run of the newest blocks,
 * each with its bytes, none older. (Written as one submission, the later
 * records found every region pinned by the earlier ones: -ENOSPC for some,
 * and an odd mix kept.)
 */
static void test_batch_larger_than_the_disk_keeps_its_newest(void **state)
{
	(void)state;
	enum { N = 80 };
	kvt_store *s = open_tiered("bigbatch.dat", 4, 0.5, "");
	kvt_op ops[N];
	char *buf = malloc((size_t)N * MiB);
	assert_non_null(buf);
	for (int i = 0; i < N; i++) {
		fill_block(test_key(5000 + (uint64_t)i), buf + (size_t)i * MiB, MiB);
		ops[i] = (kvt_op){ test_key(5000 + (uint64_t)i), buf + (size_t)i * MiB, MiB, 1 };
	}
	int rc = kvt_put_batch(s, ops, N);
	if (rc)
		fail_msg("kvt_put_batch: %s (%s)", kvt_strerror(rc), kvt_last_error());
	for (int i = 0; i < N; i++)
		assert_int_equal(ops[i].result, 0);
	int first = -1, kept = 0;
	for (int i = 0; i < N; i++) {
		int r = store_get_block(s, test_key(5000 + (uint64_t)i), MiB);
		assert_true(r == 0 || r == -ENOENT);
		if (r == 0 && first < 0)
			first = i;
		if (first >= 0 && r != 0)
			fail_msg("block %d missing after block %d was kept", i, first);
		kept += r == 0;
	}
	print_message("kept the newest %d of %d\n", kept, N);
	assert_true(kept >= 24 && kept < N);
	free(buf);
	kvt_close(s);
}

/* Puts blocks first..first+n-1 of len bytes, then enough others that RAM
 * (ram_mib) evicts those to disk; checks they are on disk only. */
static void put_disk_only(kvt_store *s, uint64_t first, uint64_t n, size_t len,
			  unsigned ram_mib)
{
	for (uint64_t i = first; i < first + n; i++)
		store_put_block(s, test_key(i), len);
	for (uint64_t i = 0; i < 2 * (uint64_t)ram_mib * MiB / len + 4; i++)
		store_put_block(s, test_key(1000000 + first + i), len);
	for (uint64_t i = first; i < first + n; i++) {
		kvt_key k = test_key(i);
		size_t found;
		assert_int_equal(kvt_lookup(s, &k, 1, 0, &found), 0);
		assert_int_equal(found, 1);
	}
	assert_true(store_stat(s, "ram", "spills") >= (long long)n);
}

/* A batch whose ops share one buffer (aligned: the disk reads straight into
 * it; unaligned: staged) loads every block, and what it promotes into RAM
 * and what the store gives back later are each key's own bytes. */
static void test_batch_ops_sharing_a_buffer_promote_their_own_bytes(void **state)
{
	(void)state;
	enum { N = 4, LEN = 256 * 1024 };
	kvt_store *s = open_tiered("shared.dat", 2, 0.5, "");
	char *scratch = NULL;

	assert_int_equal(posix_memalign((void **)&scratch, 4096, LEN + 4096), 0);
	put_disk_only(s, 0, 2 * N, LEN, 2);
	for (int pass = 0; pass < 2; pass++) {
		kvt_op ops[N];
		long long hits = store_stat(s, "store", "hits_disk");

		for (int i = 0; i < N; i++)
			ops[i] = (kvt_op){ test_key((uint64_t)(pass * N + i)),
					   scratch + (pass ? 1 : 0), LEN + 1, 1 };
		/* RAM is full: the first load of each key is declined
		 * promotion, the second is admitted */
		for (int twice = 0; twice < 2; twice++) {
			assert_int_equal(kvt_get_batch(s, ops, N), 0);
			for (int i = 0; i < N; i++) {
				assert_int_equal(ops[i].result, 0);
				assert_int_equal(ops[i].len, LEN);
			}
		}
		assert_int_equal(store_stat(s, "store", "hits_disk"), hits + 2 * N);
		/* every one was promoted (the buffer served to warm them) */
		for (int i = 0; i < N; i++)
			assert_int_equal(store_get_block(s, test_key((uint64_t)(pass * N + i)),
							 LEN), 0);
		assert_int_equal(store_stat(s, "store", "hits_disk"), hits + 2 * N);
	}
	assert_int_equal(store_stat(s, "store", "checksum_misses"), 0);
	kvt_close(s);
	/* and what is on disk after a restart is right too */
	s = open_tiered("shared.dat", 2, 0.5, "");
	for (uint64_t i = 0; i < 2 * N; i++) {
		int rc = store_get_block(s, test_key(i), LEN);
		assert_true(rc == 0 || rc == -ENOENT);
	}
	kvt_close(s);
	free(scratch);
}

/* Threads whose batches read into the same buffers (each op alone in its
 * batch, and disk.stage_reads false, so the disk reads a 256 KiB block
 * straight into the buffer by one vectored read): a read another thread's read overwrote fails its check
 * and is read again into the tier's own memory, never called damaged (which
 * would drop a good block from disk); what is promoted into RAM is checked
 * against the verified sum; every block reads back as its own afterwards.
 * Not under ThreadSanitizer: the threads' sharing of the buffers is the
 * caller's own race, which it reports. */
struct xshare_arg {
	kvt_store *s;
	char *bufs;
	unsigned id;
	int failed;
};

enum { XS_BLOCKS = 48, XS_LEN = 256 * 1024, XS_OPS = 4 };

static __attribute__((unused)) void *xshare(void *p)
{
	struct xshare_arg *a = p;
	uint64_t x = a->id * 104729 + 7;

	for (int r = 0; r < 40; r++) {
		kvt_op ops[XS_OPS];
		for (int i = 0; i < XS_OPS; i++) {
			x ^= x << 13; x ^= x >> 7; x ^= x << 17;
			/* distinct keys within the batch: one per quarter */
			uint64_t k = (uint64_t)i * (XS_BLOCKS / XS_OPS) + x % (XS_BLOCKS / XS_OPS);
			ops[i] = (kvt_op){ test_key(k), a->bufs + (size_t)i * XS_LEN, XS_LEN, 1 };
		}
		kvt_get_batch(a->s, ops, XS_OPS);
		for (int i = 0; i < XS_OPS; i++)
			if (ops[i].result != 0 || ops[i].len != XS_LEN)
				a->failed++;
	}
	return NULL;
}

static void test_threads_sharing_buffers_lose_no_block(void **state)
{
	(void)state;
#if defined(__SANITIZE_THREAD__)
	print_message("skipped: under ThreadSanitizer the callers' shared buffers are "
		      "a race it reports\n");
	skip();
#else
	/* vectored reads into the callers' buffers rather than stages */
	kvt_store *s = open_tiered_disk("xshare.dat", 4, 0.5, "", ", \"stage_reads\": false");
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)XS_OPS * XS_LEN), 0);
	put_disk_only(s, 0, XS_BLOCKS, XS_LEN, 4);
	pthread_t t[4];
	struct xshare_arg a[4];
	for (unsigned i = 0; i < 4; i++) {
		a[i] = (struct xshare_arg){ s, bufs, i, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, xshare, &a[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(a[i].failed, 0);
	}
	assert_true(store_stat(s, "disk", "vectored_reads") > 0);
	assert_int_equal(store_stat(s, "disk", "checksum_failures"), 0);
	assert_int_equal(store_stat(s, "store", "checksum_misses"), 0);
	for (uint64_t k = 0; k < XS_BLOCKS; k++)
		assert_int_equal(store_get_block(s, test_key(k), XS_LEN), 0);
	kvt_close(s);
	free(bufs);
#endif
}

/* A batch's disk hits are promoted as the disk verifies them (on the
 * tier's verifier threads, while the batch's other reads are in flight):
 * with RAM full, the first batch is declined, the second admitted, its
 * promotions evicting (and spilling) other blocks from those threads; then
 * every block comes from RAM with its own bytes, though the caller zeroed
 * its buffers, and the evicted blocks from disk with theirs. */
static void test_batch_promotes_disk_hits_as_they_are_verified(void **state)
{
	(void)state;
	enum { N = 16, LEN = 256 * 1024 };
	kvt_store *s = open_tiered("each.dat", 8, 0.5, "");
	char *bufs = NULL;
	kvt_op ops[N];

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)N * LEN), 0);
	put_disk_only(s, 0, N, LEN, 8);
	long long prom = store_stat(s, "store", "promotions");
	long long dec = store_stat(s, "ram", "promotions_declined");
	long long disk = store_stat(s, "store", "hits_disk");
	long long spills = store_stat(s, "ram", "spills");
	for (int pass = 0; pass < 3; pass++) {
		memset(bufs, 0, (size_t)N * LEN);
		for (int i = 0; i < N; i++)
			ops[i] = (kvt_op){ test_key((uint64_t)i), bufs + (size_t)i * LEN, LEN, 1 };
		long long ram = store_stat(s, "store", "hits_ram");
		assert_int_equal(kvt_get_batch(s, ops, N), 0);
		for (int i = 0; i < N; i++) {
			assert_int_equal(ops[i].result, 0);
			assert_true(check_block(ops[i].key, ops[i].buf, LEN));
		}
		if (pass == 0) {
			assert_int_equal(store_stat(s, "ram", "promotions_declined"), dec + N);
			assert_int_equal(store_stat(s, "store", "promotions"), prom);
		} else if (pass == 1) {
			assert_int_equal(store_stat(s, "store", "promotions"), prom + N);
			assert_int_equal(store_stat(s, "store", "hits_disk"), disk + 2 * N);
		} else {
			assert_int_equal(store_stat(s, "store", "hits_ram"), ram + N);
			assert_int_equal(store_stat(s, "store", "hits_disk"), disk + 2 * N);
		}
	}
	assert_true(store_stat(s, "ram", "spills") > spills);
	for (uint64_t i = 0; i < 2 * 8 * MiB / LEN + 4; i++)
		assert_int_equal(store_get_block(s, test_key(1000000 + i), LEN), 0);
	assert_int_equal(store_stat(s, "store", "checksum_misses"), 0);
	free(bufs);
	kvt_close(s);
}

/* kvt_remove overlapping a disk read in flight (an async batch loading many
 * blocks, the removed one last): the read's promotion must not bring the
 * block back, neither into RAM nor, through a later eviction, onto disk. */
static void test_remove_wins_over_a_disk_read_in_flight(void **state)
{
	(void)state;
	enum { N = 32, LEN = MiB };
	kvt_store *s = open_tiered("race.dat", 4, 0.5, "");
	char *bufs = malloc((size_t)N * LEN), stats[8192];
	int overlapped = 0;

	assert_non_null(bufs);
	for (uint64_t round = 0; round < 4 && overlapped < 2; round++) {
		uint64_t first = 100 + round * N;
		kvt_op ops[N];
		kvt_batch *b = NULL;

		put_disk_only(s, first, N, LEN, 4);
		for (int i = 0; i < N; i++)
			ops[i] = (kvt_op){ test_key(first + (uint64_t)i), bufs + (size_t)i * LEN,
					   LEN, 1 };
		assert_int_equal(kvt_batch_submit(s, KVT_OP_GET, ops, N, &b), 0);
		/* Wait until the reads are in flight (the keys looked up). */
		for (;;) {
			assert_true(kvt_stats_json(s, stats, sizeof(stats)) > 0);
			const char *p = strstr(stats, "\"inflight\":");
			assert_non_null(p);
			if (atoi(p + 11) > 0 || kvt_batch_poll(b))
				break;
		}
		assert_int_equal(kvt_remove(s, ops[N - 1].key), 0);
		overlapped += kvt_batch_poll(b) == 0;
		assert_int_equal(kvt_batch_wait(b, -1), 0);
		assert_int_equal(kvt_batch_result(b), 0);
		kvt_batch_free(b);
		/* the load itself returned the bytes: it began before the removal */
		assert_int_equal(ops[N - 1].result, 0);
		assert_true(check_block(ops[N - 1].key, ops[N - 1].buf, LEN));
		/* Evict whatever the batch promoted, then look everywhere. */
		for (uint64_t i = 0; i < 8; i++)
			store_put_block(s, test_key(9000000 + round * 8 + i), LEN);
		size_t found;
		assert_int_equal(kvt_lookup(s, &ops[N - 1].key, 1, 0, &found), 0);
		assert_int_equal(found, 0);
		assert_int_equal(store_get_block(s, ops[N - 1].key, LEN), -ENOENT);
	}
	assert_true(overlapped >= 1);
	free(bufs);
	kvt_close(s);
}

/* kvt_get(s, key, NULL, 0, &len) and a batch op {key, NULL, 0} ask for the
 * size of a block that only the disk holds: -ENOBUFS and the size, and no
 * error counted. */
static void test_size_query_of_a_disk_only_block(void **state)
{
	(void)state;
	kvt_store *s = open_tiered("size.dat", 2, 0.5, "");
	size_t len = 0;

	put_disk_only(s, 7, 1, 300000, 2);
	assert_int_equal(kvt_get(s, test_key(7), NULL, 0, &len), -ENOBUFS);
	assert_int_equal(len, 300000);
	kvt_op op = { test_key(7), NULL, 0, 1 };
	assert_int_equal(kvt_get_batch(s, &op, 1), -ENOBUFS);
	assert_int_equal(op.result, -ENOBUFS);
	assert_int_equal(op.len, 300000);
	/* a missing key is still a miss */
	assert_int_equal(kvt_get(s, test_key(8), NULL, 0, &len), -ENOENT);
	assert_int_equal(store_stat(s, "store", "errors"), 0);
	assert_int_equal(store_get_block(s, test_key(7), 300000), 0);
	kvt_close(s);
}

struct hammer_arg {
	kvt_store *s;
	unsigned id;
	long wrong;
};

static void *hammer(void *p)
{
	struct hammer_arg *a = p;
	char *buf = malloc(256 * 1024);
	uint64_t x = a->id * 7919 + 1;
	for (int r = 0; r < 400; r++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		kvt_key k = test_key(x % 200);
		size_t len = 64 * 1024 + (size_t)(k.lo % 3) * 64 * 1024, got;
		if (x & 1) {
			fill_block(k, buf, len);
			int rc = kvt_put(a->s, k, buf, len);
			assert_true(rc == 0 || rc == -ENOSPC);
		} else {
			int rc = kvt_get(a->s, k, buf, 256 * 1024, &got);
			if (rc == 0 && (got != len || !check_block(k, buf, got)))
				a->wrong++;
			assert_true(rc == 0 || rc == -ENOENT || rc == -EBADMSG);
		}
		if (r % 64 == 0) {
			size_t found;
			assert_int_equal(kvt_lookup(a->s, &k, 1, KVT_LEASE, &found), 0);
			kvt_release(a->s, &k, found);
		}
	}
	free(buf);
	return NULL;
}

static void test_threads_across_tiers(void **state)
{
	(void)state;
	char cfg[1024];
	kvt_store *s = NULL;
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"4MiB\", \"mlock\": false},"
		 " \"disk\": {\"path\": \"%s/threads.dat\", \"capacity\": \"32MiB\","
		 " \"region_size\": \"2MiB\"}, \"threads\": 2}", dir);
	assert_int_equal(kvt_open(cfg, &s), 0);
	pthread_t t[4];
	struct hammer_arg a[4];
	for (unsigned i = 0; i < 4; i++) {
		a[i] = (struct hammer_arg){ s, i, 0 };
		pthread_create(&t[i], NULL, hammer, &a[i]);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(a[i].wrong, 0);
	}
	kvt_close(s);
}

/* kvt_open over disk.path = paths (JSON text); returns its result. */
static int open_on(const char *paths, kvt_store **s)
{
	char cfg[9300]; /* paths: up to 9000 bytes */

	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"4MiB\", \"mlock\": false},"
		 " \"disk\": {\"path\": %s, \"capacity\": \"32MiB\","
		 " \"region_size\": \"2MiB\"}}", paths);
	*s = NULL;
	return kvt_open(cfg, s);
}

static void put_spilling(kvt_store *s, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		store_put_block(s, test_key(i), 512 * 1024);
	assert_true(store_stat(s, "disk", "objects") > 0);
}

static void get_all(kvt_store *s, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(store_get_block(s, test_key(i), 512 * 1024), 0);
}

/* Two stores of one process on one file: the second is refused with
 * -EBUSY naming the file, the first keeps every block, and once it is
 * closed the file opens again with its blocks. */
static void test_a_disk_serves_one_store_at_a_time(void **state)
{
	(void)state;
	char paths[4200];
	kvt_store *s, *t;

	snprintf(paths, sizeof(paths), "\"%s/excl.dat\"", dir);
	assert_int_equal(open_on(paths, &s), 0);
	put_spilling(s, 24);
	assert_int_equal(open_on(paths, &t), -EBUSY);
	assert_null(t);
	assert_non_null(strstr(kvt_last_error(), "excl.dat"));
	assert_non_null(strstr(kvt_last_error(), "another store of this process"));
	assert_non_null(strstr(kvt_strerror(-EBUSY), "in use"));
	get_all(s, 24);
	kvt_close(s);
	assert_int_equal(open_on(paths, &t), 0);
	assert_true(store_stat(t, "disk", "objects") > 0);
	kvt_close(t);
}

/*
 * Processes that open one missing file at once: one creates it and gets
 * it, every other is refused with -EBUSY (not -EEXIST from losing the
 * race to create it), in every round.
 */
static void test_processes_racing_to_create_a_disk(void **state)
{
	(void)state;
	enum { KIDS = 4, ROUNDS = 12 };
	char paths[4300], file[4200];

	snprintf(file, sizeof(file), "%s/race.dat", dir);
	snprintf(paths, sizeof(paths), "\"%s\"", file);
	for (int round = 0; round < ROUNDS; round++) {
		int go[2], res[2], hold[2];
		pid_t pid[KIDS];

		unlink(file);
		assert_int_equal(pipe(go), 0);
		assert_int_equal(pipe(res), 0);
		assert_int_equal(pipe(hold), 0);
		fflush(NULL);
		for (int k = 0; k < KIDS; k++) {
			pid[k] = fork();
			assert_true(pid[k] >= 0);
			if (pid[k] == 0) {
				kvt_store *s;
				char c;
				close(go[1]);
				close(res[0]);
				close(hold[1]);
				if (read(go[0], &c, 1) != 1)
					_exit(2);
				int rc = open_on(paths, &s);
				signed char r = (signed char)rc;
				if (write(res[1], &r, 1) != 1)
					_exit(3);
				/* hold it until every other has tried: the
				 * parent closes hold[1] then */
				while (read(hold[0], &c, 1) > 0)
					;
				if (rc == 0)
					kvt_close(s);
				_exit(0);
			}
		}
		close(go[0]);
		close(res[1]);
		close(hold[0]);
		assert_int_equal(write(go[1], "gggg", KIDS), KIDS); /* all at once */
		int ok = 0, busy = 0;
		for (int k = 0; k < KIDS; k++) {
			signed char r = 0;
			assert_int_equal(read(res[0], &r, 1), 1);
			ok += r == 0;
			busy += r == -EBUSY;
			if (r != 0 && r != -EBUSY)
				print_message("round %d: a store got %d\n", round, r);
		}
		close(hold[1]);
		for (int k = 0; k < KIDS; k++) {
			int status = 0;
			assert_int_equal(waitpid(pid[k], &status, 0), pid[k]);
			assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		}
		close(go[1]);
		close(res[0]);
		assert_int_equal(ok, 1);
		assert_int_equal(busy, KIDS - 1);
	}
}

/* A store in another process holds the file: -EBUSY names that process;
 * after it closes its store, the file opens here. */
static void test_a_disk_held_by_another_process_is_refused(void **state)
{
	(void)state;
	char paths[4200], want[64];
	int up[2], down[2], status = 0, rc;
	kvt_store *t;
	char c = 0;

	snprintf(paths, sizeof(paths), "\"%s/other.dat\"", dir);
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		kvt_store *s;

		close(up[0]);
		close(down[1]);
		if (open_on(paths, &s))
			_exit(1);
		if (write(up[1], "o", 1) != 1 || read(down[0], &c, 1) < 0)
			_exit(2);
		kvt_close(s);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	assert_int_equal(read(up[0], &c, 1), 1);
	rc = open_on(paths, &t);
	snprintf(want, sizeof(want), "in use by process %d", (int)pid);
	int named = strstr(kvt_last_error(), want) != NULL;
	if (rc == 0)
		kvt_close(t);
	/* let the child close its store before any check can fail */
	assert_int_equal(write(down[1], "c", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(up[0]);
	close(down[1]);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(rc, -EBUSY);
	if (!named)
		fail_msg("no \"%s\" in: %s", want, kvt_last_error());
	assert_int_equal(open_on(paths, &t), 0);
	kvt_close(t);
}

/* One file under two names ("d" and "./d", a symlink, a hard link) would
 * give two devices whose regions overlap: refused with -EINVAL naming both
 * entries. Two distinct files are fine. */
static void test_one_file_listed_twice_is_refused(void **state)
{
	(void)state;
	char paths[9000], a[4200], b[4200];
	kvt_store *s;

	snprintf(paths, sizeof(paths), "[\"%s/dup.dat\", \"%s/./dup.dat\"]", dir, dir);
	assert_int_equal(open_on(paths, &s), -EINVAL);
	assert_null(s);
	snprintf(a, sizeof(a), "disk.path[0] \"%s/dup.dat\"", dir);
	snprintf(b, sizeof(b), "disk.path[1] \"%s/./dup.dat\"", dir);
	assert_non_null(strstr(kvt_last_error(), a));
	assert_non_null(strstr(kvt_last_error(), b));
	assert_non_null(strstr(kvt_last_error(), "same file"));

	snprintf(a, sizeof(a), "%s/dup.dat", dir);
	snprintf(b, sizeof(b), "%s/dup.link", dir);
	assert_int_equal(symlink(a, b), 0);
	snprintf(paths, sizeof(paths), "[\"%s/dup.link\", \"%s/dup.dat\"]", dir, dir);
	assert_int_equal(open_on(paths, &s), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "dup.link\" and disk.path[1]"));
	snprintf(b, sizeof(b), "%s/dup.hard", dir);
	assert_int_equal(link(a, b), 0);
	snprintf(paths, sizeof(paths), "[\"%s/dup.dat\", \"%s/one.dat\", \"%s/dup.hard\"]",
		 dir, dir, dir);
	assert_int_equal(open_on(paths, &s), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "disk.path[0]"));
	assert_non_null(strstr(kvt_last_error(), "disk.path[2]"));

	snprintf(paths, sizeof(paths), "[\"%s/dup.dat\", \"%s/one.dat\"]", dir, dir);
	assert_int_equal(open_on(paths, &s), 0);
	put_spilling(s, 24);
	get_all(s, 24);
	kvt_close(s);
}

/*
 * A loop device over a file in dir, detached by the kernel when its last
 * user closes it. Returns an fd on it and its path, or -1 when this machine
 * cannot make one (not root, no loop driver, no node in /dev).
 */
static int loop_device(const char *name, char *dev, size_t cap)
{
	char back[4200];
	int ctl, n, bfd, lfd = -1;

	snprintf(back, sizeof(back), "%s/%s", dir, name);
	bfd = open(back, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (bfd < 0 || ftruncate(bfd, 40 * MiB) < 0) {
		if (bfd >= 0)
			close(bfd);
		return -1;
	}
	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	n = ctl >= 0 ? ioctl(ctl, LOOP_CTL_GET_FREE) : -1;
	if (n >= 0) {
		snprintf(dev, cap, "/dev/loop%d", n);
		lfd = open(dev, O_RDWR | O_CLOEXEC);
	}
	if (lfd >= 0 && ioctl(lfd, LOOP_SET_FD, bfd) < 0) {
		close(lfd);
		lfd = -1;
	}
	if (lfd >= 0) {
		struct loop_info64 info;

		memset(&info, 0, sizeof(info));
		info.lo_flags = LO_FLAGS_AUTOCLEAR;
		ioctl(lfd, LOOP_SET_STATUS64, &info);
	}
	if (ctl >= 0)
		close(ctl);
	close(bfd);
	return lfd;
}

/* The same for block devices: a second store on a device in use is
 * refused (O_EXCL), and so is one device reached by two names (st_rdev). */
static void test_block_device_excl_and_twice(void **state)
{
	(void)state;
	char dev[64], node[4200], paths[9000];
	kvt_store *s, *t;
	int lfd = loop_device("loop.img", dev, sizeof(dev));

	if (lfd < 0)
		skip(); /* needs root and a loop device */
	snprintf(paths, sizeof(paths), "\"%s\"", dev);
	int rc = open_on(paths, &s);
	if (rc)
		close(lfd);
	if (rc == -ENOTSUP || rc == -EINVAL) /* no O_DIRECT on the loop device */
		skip();
	assert_int_equal(rc, 0);
	assert_int_equal(open_on(paths, &t), -EBUSY);
	assert_non_null(strstr(kvt_last_error(), dev));
	assert_non_null(strstr(kvt_last_error(), "block device in use by another store of this process"));
	put_spilling(s, 24);
	kvt_close(s);
	assert_int_equal(open_on(paths, &t), 0);
	get_all(t, 8);
	kvt_close(t);

	struct stat st;
	assert_int_equal(stat(dev, &st), 0);
	snprintf(node, sizeof(node), "%s/node", dir);
	assert_int_equal(mknod(node, S_IFBLK | 0600, st.st_rdev), 0);
	snprintf(paths, sizeof(paths), "[\"%s\", \"%s\"]", dev, node);
	assert_int_equal(open_on(paths, &t), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "same block device"));
	unlink(node);
	close(lfd);
}

int main(void)
{
	test_skip_without_disk();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_eviction_spills_and_gets_come_back),
		cmocka_unit_test(test_a_small_disk_with_defaults_spills),
		cmocka_unit_test(test_promotion_admits_on_second_hit_when_full),
		cmocka_unit_test(test_write_around_when_ram_is_all_leased),
		cmocka_unit_test(test_batch_put_writes_around_in_one_go),
		cmocka_unit_test(test_batch_larger_than_ram_writes_its_lead_around),
		cmocka_unit_test(test_spilling_put_batches_keep_every_block),
		cmocka_unit_test(test_remove_clears_both_tiers),
		cmocka_unit_test(test_restart_keeps_disk_blocks),
		cmocka_unit_test(test_close_writes_ram_blocks_to_disk),
		cmocka_unit_test(test_close_writes_the_newest_that_fit),
		cmocka_unit_test(test_batch_larger_than_the_disk_keeps_its_newest),
		cmocka_unit_test(test_threads_across_tiers),
		cmocka_unit_test(test_batch_ops_sharing_a_buffer_promote_their_own_bytes),
		cmocka_unit_test(test_threads_sharing_buffers_lose_no_block),
		cmocka_unit_test(test_batch_promotes_disk_hits_as_they_are_verified),
		cmocka_unit_test(test_remove_wins_over_a_disk_read_in_flight),
		cmocka_unit_test(test_size_query_of_a_disk_only_block),
		cmocka_unit_test(test_a_disk_serves_one_store_at_a_time),
		cmocka_unit_test(test_a_disk_held_by_another_process_is_refused),
		cmocka_unit_test(test_processes_racing_to_create_a_disk),
		cmocka_unit_test(test_one_file_listed_twice_is_refused),
		cmocka_unit_test(test_block_device_excl_and_twice),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
