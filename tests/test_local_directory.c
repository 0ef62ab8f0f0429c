/*
 * test_local_directory.c - gets of RAM blocks through the node store's
 * directory: without a request, counted as hits later, falling back when
 * the directory is full, never wrong while writers remove, replace and
 * evict, and after the node store is killed. Every wait is bounded.
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

/* --- gets from the directory of RAM blocks ------------------------------------------ */

/* Gets of blocks in RAM are served from the directory without a request;
 * their hits reach the node store's statistics with the next request (or
 * alone once 64 wait); a removed or evicted block is gone from the
 * directory at once; the directory's memfd cannot be written. */
static void test_directory_gets_need_no_request(void **state)
{
	(void)state;
	char sock[256];
	kvt_store *node = open_node(", \"directory\": 4096", sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	const size_t len = 65536;
	char *b = malloc(len);
	size_t got = 0, found = 0;
	kvt_key keys[20];

	for (uint64_t i = 0; i < 20; i++) {
		keys[i] = test_key(4000 + i);
		store_put_block(a, keys[i], len);
	}
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 20);
	assert_int_equal(store_stat(node, "ram", "directory_slots"), 4096);
	long long req0 = store_stat(node, "local", "requests");
	long long hits0 = store_stat(node, "ram", "hits");
	for (unsigned r = 0; r < 3; r++)
		for (uint64_t i = 0; i < 20; i++) {
			memset(b, 0, len);
			assert_int_equal(kvt_get(a, keys[i], b, len, &got), 0);
			assert_int_equal(got, len);
			assert_true(check_block(keys[i], b, len));
		}
	/* 60 gets: no request, no pin, nothing counted yet. */
	assert_int_equal(store_stat(node, "local", "requests"), req0);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 0);
	assert_int_equal(store_stat(node, "local", "directory_hits"), 0);
	assert_int_equal(kvt_get(a, keys[3], b, 100, &got), -ENOBUFS);
	assert_int_equal(got, len);
	assert_int_equal(store_stat(node, "local", "requests"), req0);
	/* The 64th hit goes to the node store alone. */
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(kvt_get(a, keys[i], b, len, &got), 0);
	expect_stat(node, "local", "directory_hits", 64);
	assert_int_equal(store_stat(node, "local", "requests"), req0 + 1);
	/* Ten more wait for the next request, which carries them. */
	for (uint64_t i = 0; i < 10; i++)
		assert_int_equal(kvt_get(a, keys[i], b, len, &got), 0);
	assert_int_equal(store_stat(node, "local", "directory_hits"), 64);
	assert_int_equal(kvt_lookup(a, keys, 1, 0, &found), 0);
	assert_int_equal(store_stat(node, "local", "requests"), req0 + 3);
	assert_int_equal(store_stat(node, "local", "directory_hits"), 74);
	assert_int_equal(store_stat(node, "ram", "hits"), hits0 + 74);
	assert_int_equal(store_stat(node, "local", "pinned_blocks"), 0);

	/* A batch, from the directory too. */
	kvt_op ops[20];
	for (uint64_t i = 0; i < 20; i++)
		ops[i] = (kvt_op){ .key = keys[i], .buf = malloc(len), .len = len };
	assert_int_equal(kvt_get_batch(a, ops, 20), 0);
	for (uint64_t i = 0; i < 20; i++) {
		assert_int_equal(ops[i].len, len);
		assert_true(check_block(keys[i], ops[i].buf, len));
		free(ops[i].buf);
	}
	assert_int_equal(store_stat(node, "local", "requests"), req0 + 3);

	/* Removed by the node store: the next get misses. */
	assert_int_equal(kvt_remove(node, keys[0]), 0);
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 19);
	assert_int_equal(kvt_get(a, keys[0], b, len, &got), -ENOENT);
	/* Evicted (no disk tier: dropped) by puts of 40 MiB into 32 MiB:
	 * every block left is in the directory, every evicted one misses. */
	char *big = malloc(1u << 20);
	for (uint64_t i = 0; i < 40; i++) {
		kvt_key k = test_key(4100 + i);
		fill_block(k, big, 1u << 20);
		assert_int_equal(kvt_put(node, k, big, 1u << 20), 0);
	}
	free(big);
	assert_true(store_stat(node, "ram", "evictions") > 0);
	assert_int_equal(store_stat(node, "ram", "directory_blocks"),
			 store_stat(node, "ram", "objects"));
	unsigned misses = 0;
	for (uint64_t i = 1; i < 20; i++) {
		int rc = kvt_get(a, keys[i], b, len, &got);
		if (rc == -ENOENT) {
			misses++;
			continue;
		}
		assert_int_equal(rc, 0);
		assert_true(check_block(keys[i], b, len));
	}
	assert_true(misses > 0);

	/* The directory's memfd: read-only for a client, sealed against a
	 * writable mapping, a write and a change of size. */
	int mfd = -1, dfd = -1;
	uint64_t alen = 0, dlen = 0;
	int fd = raw_hello_dir(sock, &mfd, &alen, &dfd, &dlen);
	assert_true(dfd >= 0 && dlen > 0);
	assert_true(mmap(NULL, dlen, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0) == MAP_FAILED);
	char zero[64] = { 0 };
	assert_int_equal(pwrite(dfd, zero, sizeof(zero), 0), -1);
	assert_int_equal(ftruncate(dfd, 0), -1);
	void *ro = mmap(NULL, dlen, PROT_READ, MAP_SHARED, dfd, 0);
	assert_true(ro != MAP_FAILED);
	munmap(ro, dlen);
	close(dfd);
	close(mfd);
	close(fd);
	free(b);
	kvt_close(a);
	kvt_close(node);
}

/* A directory too small for every block (local.directory 8: one window):
 * the blocks left out are got through the node store, with the same bytes,
 * and every get is counted as a hit. */
static void test_directory_full_falls_back(void **state)
{
	(void)state;
	char sock[256], b[8192];
	kvt_store *node = open_node(", \"directory\": 8", sock, sizeof(sock));
	kvt_store *a = attach_within(sock, 1000);
	size_t got = 0, found = 0;

	for (uint64_t i = 0; i < 24; i++)
		store_put_block(a, test_key(4200 + i), sizeof(b));
	assert_int_equal(store_stat(node, "ram", "directory_slots"), 8);
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 8);
	assert_int_equal(store_stat(node, "ram", "directory_full"), 16);
	long long hits0 = store_stat(node, "ram", "hits");
	long long pins0 = store_stat(node, "slots", "pins_ram");
	for (uint64_t i = 0; i < 24; i++) {
		kvt_key k = test_key(4200 + i);
		memset(b, 0, sizeof(b));
		assert_int_equal(kvt_get(a, k, b, sizeof(b), &got), 0);
		assert_int_equal(got, sizeof(b));
		assert_true(check_block(k, b, got));
	}
	kvt_key k0 = test_key(4200);
	assert_int_equal(kvt_lookup(a, &k0, 1, 0, &found), 0);
	assert_int_equal(store_stat(node, "local", "directory_hits"), 8);
	assert_int_equal(store_stat(node, "slots", "pins_ram"), pins0 + 16);
	assert_int_equal(store_stat(node, "ram", "hits"), hits0 + 24);
	/* Room again after removals: later blocks are published. */
	for (uint64_t i = 0; i < 24; i++)
		kvt_remove(a, test_key(4200 + i));
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 0);
	store_put_block(a, test_key(4300), sizeof(b));
	assert_int_equal(store_stat(node, "ram", "directory_blocks"), 1);
	kvt_close(a);
	kvt_close(node);
}

/*
 * A block removed, evicted or replaced while an attached process reads it
 * is never returned with wrong bytes. Writers on the node store (its own
 * calls) remove and put again keys whose bytes differ at every put (a
 * header of key and generation, then bytes drawn from both; the length
 * varies with the generation) into a small arena, so extents are reused
 * all the time and eviction runs; readers of an attached store check every
 * byte of every block they get. Misses are fine, a wrong byte fails.
 */
#define ST_KEYS 96

#define ST_WRITERS 2

#define ST_READERS 2

#define ST_MS 1500

#define ST_MAX (200u * 1024)

static size_t st_len(uint64_t gen)
{
	return 16384 + (size_t)(gen % 12) * 16384;
}

static uint64_t st_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void st_fill(kvt_key k, uint64_t gen, unsigned char *b, size_t len)
{
	uint64_t x = (k.lo ^ (gen * 0x9e3779b97f4a7c15ull)) | 1;
	memcpy(b, &k, 16);
	memcpy(b + 16, &gen, 8);
	for (size_t i = 24; i + 8 <= len; i += 8) {
		uint64_t v = st_next(&x);
		memcpy(b + i, &v, 8);
	}
}

/* 1 when b is a whole block of key k (of some generation). */
static int st_check(kvt_key k, const unsigned char *b, size_t len)
{
	kvt_key h;
	uint64_t gen, x;
	if (len < 24)
		return 0;
	memcpy(&h, b, 16);
	memcpy(&gen, b + 16, 8);
	if (h.lo != k.lo || h.hi != k.hi || len != st_len(gen))
		return 0;
	x = (k.lo ^ (gen * 0x9e3779b97f4a7c15ull)) | 1;
	for (size_t i = 24; i + 8 <= len; i += 8) {
		uint64_t v = st_next(&x), w;
		memcpy(&w, b + i, 8);
		if (v != w)
			return 0;
	}
	return 1;
}

struct st_arg {
	kvt_store *s;
	unsigned id;
	_Atomic int *stop;
	unsigned long ops, hits, misses, wrong;
};

static void *st_writer(void *p)
{
	struct st_arg *a = p;
	unsigned char *b = malloc(ST_MAX);
	uint64_t gen = a->id, x = 0x5eed + a->id;
	while (!atomic_load(a->stop)) {
		/* Each writer owns the keys of its residue. */
		uint64_t i = st_next(&x) % (ST_KEYS / ST_WRITERS) * ST_WRITERS + a->id;
		kvt_key k = test_key(5000 + i);
		gen += ST_WRITERS;
		size_t len = st_len(gen);
		st_fill(k, gen, b, len);
		kvt_remove(a->s, k);
		int rc = kvt_put(a->s, k, b, len);
		if (rc && rc != -ENOSPC)
			a->wrong++;
		a->ops++;
	}
	free(b);
	return NULL;
}

static void *st_reader(void *p)
{
	struct st_arg *a = p;
	unsigned char *b = malloc(ST_MAX);
	uint64_t x = 0xfeed + a->id;
	while (!atomic_load(a->stop)) {
		kvt_key k = test_key(5000 + st_next(&x) % ST_KEYS);
		size_t len = 0;
		memset(b, 0xee, 64);
		int rc = kvt_get(a->s, k, b, ST_MAX, &len);
		if (rc == 0 && st_check(k, b, len))
			a->hits++;
		else if (rc == -ENOENT)
			a->misses++;
		else
			a->wrong++;
		a->ops++;
	}
	free(b);
	return NULL;
}

static void test_directory_reads_never_wrong_bytes(void **state)
{
	(void)state;
	char sock[256], cfg[512];
	kvt_store *node = NULL;
	snprintf(sock, sizeof(sock), "%s/stress.sock", g_dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"8MiB\", \"max_block\": \"256KiB\","
		 " \"mlock\": false}, \"local\": {\"socket\": \"%s\"}}", sock);
	assert_int_equal(kvt_open(cfg, &node), 0);
	kvt_store *a = attach_within(sock, 1000);
	pthread_t th[ST_WRITERS + ST_READERS];
	struct st_arg arg[ST_WRITERS + ST_READERS];
	_Atomic int stop = 0;

	for (unsigned i = 0; i < ST_WRITERS + ST_READERS; i++) {
		arg[i] = (struct st_arg){ .s = i < ST_WRITERS ? node : a,
					  .id = i < ST_WRITERS ? i : i - ST_WRITERS,
					  .stop = &stop };
		assert_int_equal(pthread_create(&th[i], NULL, i < ST_WRITERS ? st_writer : st_reader,
						&arg[i]), 0);
	}
	usleep(ST_MS * 1000);
	atomic_store(&stop, 1);
	unsigned long hits = 0, misses = 0, wrong = 0, writes = 0;
	for (unsigned i = 0; i < ST_WRITERS + ST_READERS; i++) {
		pthread_join(th[i], NULL);
		if (i < ST_WRITERS)
			writes += arg[i].ops;
		else
			hits += arg[i].hits, misses += arg[i].misses;
		wrong += arg[i].wrong;
	}
	size_t found = 0;
	kvt_key k = test_key(5000);
	assert_int_equal(kvt_lookup(a, &k, 1, 0, &found), 0); /* carries the last hits */
	long long dhits = store_stat(node, "local", "directory_hits");
	print_message("    %lu puts, %lu gets: %lu hits (%lld from the directory), %lu misses; "
		      "%lld evictions\n", writes, hits + misses, hits, dhits, misses,
		      store_stat(node, "ram", "evictions"));
	assert_int_equal(wrong, 0);
	assert_true(hits > 0 && dhits > 0);
	assert_true(store_stat(node, "ram", "evictions") > 0);
	kvt_close(a);
	kvt_close(node);
}

/* When the node store is killed, an attached process still serves gets of
 * RAM blocks from its own mappings of the arena and the directory (the
 * bytes are still the blocks') until it next talks to the node store: at
 * the latest when 64 such hits wait to be told. From then on every call
 * fails with -ENOTCONN. */
static void test_directory_after_the_node_store_is_killed(void **state)
{
	(void)state;
	char bin[PATH_MAX + 32], sock[256], cfg[512], buf[8192];
	char *dir = make_temp_dir("local");
	size_t found = 0, len = 0;
	unsigned served = 0;
	int out = -1, rc = 0;

	snprintf(sock, sizeof(sock), "%s/kv.sock", dir);
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": \"16MiB\", \"mlock\": false}, "
		 "\"local\": {\"socket\": \"%s\"}}", sock);
	pid_t d = start_kvtierd(dir, cfg, bin, sizeof(bin), &out);
	kvt_store *a = attach_within(sock, START_MS);
	for (uint64_t i = 0; i < 4; i++)
		store_put_block(a, test_key(6000 + i), sizeof(buf));
	kvt_key k0 = test_key(6000);
	assert_int_equal(kvt_lookup(a, &k0, 1, 0, &found), 0); /* no hit waits */
	assert_int_equal(kill(d, SIGKILL), 0);
	assert_int_equal(wait_child(d, START_MS), 128 + SIGKILL);
	for (unsigned n = 0; n < 200; n++) {
		kvt_key k = test_key(6000 + n % 4);
		memset(buf, 0, sizeof(buf));
		rc = kvt_get(a, k, buf, sizeof(buf), &len);
		if (rc)
			break;
		assert_int_equal(len, sizeof(buf));
		assert_true(check_block(k, buf, len));
		served++;
	}
	assert_int_equal(rc, -ENOTCONN);
	assert_int_equal(served, 64);
	assert_int_equal(kvt_get(a, k0, buf, sizeof(buf), &len), -ENOTCONN);
	assert_int_equal(kvt_lookup(a, &k0, 1, 0, &found), -ENOTCONN);
	kvt_close(a);
	close(out);
	rm_rf(dir);
	free(dir);
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
		cmocka_unit_test(test_directory_gets_need_no_request),
		cmocka_unit_test(test_directory_full_falls_back),
		cmocka_unit_test(test_directory_reads_never_wrong_bytes),
		cmocka_unit_test(test_directory_after_the_node_store_is_killed),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
