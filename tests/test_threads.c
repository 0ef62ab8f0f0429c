/*
 * test_threads.c - many threads on one store: puts, leased lookups, batch
 * and async loads, releases and removes of overlapping chains under heavy
 * eviction pressure. Every byte that comes back is verified; a leased block
 * must always load. Run under TSan in CI.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier.h"
#include "util.h"

#define NTHREADS 4
#define CHAIN 24        /* blocks per prompt */
#define SHARED 8        /* leading blocks every thread's prompts share */
#define ROUNDS 150

struct worker {
	kvt_store *s;
	unsigned id;
	uint64_t rng;
	long wrong_bytes, lease_broken, loads, hits, puts, refused;
	int disk; /* the store has a disk tier */
};

static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Block size is a function of the key, so any thread can check any block. */
static size_t block_len(kvt_key k)
{
	return 16384 + (size_t)(k.lo % 7) * 16384 + (size_t)(k.hi % 3);
}

static void make_chain(kvt_key root, unsigned thread, unsigned prompt, kvt_key *keys)
{
	uint32_t tokens[CHAIN * 4];
	for (unsigned i = 0; i < CHAIN * 4; i++)
		tokens[i] = i < SHARED * 4 ? i : (thread << 20) ^ (prompt << 8) ^ i;
	size_t n = kvt_hash_chain(root, tokens, CHAIN * 4, 4, keys, CHAIN);
	assert_int_equal(n, CHAIN);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	kvt_namespace ns = { .model = "test-model", .tokenizer = "t", .kv_format = "bf16",
			     .tp_size = 1, .pp_size = 1, .block_tokens = 4 };
	kvt_key root = kvt_ns_root(&ns), keys[CHAIN];
	kvt_op ops[CHAIN];
	char *bufs[CHAIN];
	for (int i = 0; i < CHAIN; i++)
		bufs[i] = malloc(block_len((kvt_key){ 6, 2 }) + 65536);

	for (unsigned r = 0; r < ROUNDS; r++) {
		unsigned prompt = (unsigned)(next_rand(&w->rng) % 12);
		make_chain(root, w->id, prompt, keys);

		/* What is there? Lease it, load it, check it. */
		size_t found = 0;
		assert_int_equal(kvt_lookup(w->s, keys, CHAIN, KVT_LEASE, &found), 0);
		for (size_t i = 0; i < found; i++)
			ops[i] = (kvt_op){ keys[i], bufs[i], block_len(keys[i]) + 65536, 1 };
		int async = next_rand(&w->rng) % 2;
		if (async && found) {
			kvt_batch *b;
			assert_int_equal(kvt_batch_submit(w->s, KVT_OP_GET, ops, found, &b), 0);
			assert_int_equal(kvt_batch_wait(b, -1), 0);
			kvt_batch_free(b);
		} else {
			kvt_get_batch(w->s, ops, found);
		}
		for (size_t i = 0; i < found; i++) {
			w->loads++;
			if (ops[i].result == 0) {
				w->hits++;
				if (ops[i].len != block_len(keys[i]) ||
				    !check_block(keys[i], bufs[i], ops[i].len))
					w->wrong_bytes++;
			} else if (!w->disk || ops[i].result != -EBADMSG) {
				w->lease_broken++; /* a leased block must load */
			}
		}
		assert_true(kvt_release(w->s, keys, found) >= 0);

		/* Store the rest, as an engine would after prefill. */
		for (size_t i = found; i < CHAIN; i++) {
			size_t len = block_len(keys[i]);
			fill_block(keys[i], bufs[i], len);
			ops[i] = (kvt_op){ keys[i], bufs[i], len, 1 };
		}
		if (found < CHAIN) {
			kvt_put_batch(w->s, ops + found, CHAIN - found);
			for (size_t i = found; i < CHAIN; i++) {
				w->puts++;
				if (ops[i].result == -ENOSPC)
					w->refused++;
				else
					assert_int_equal(ops[i].result, 0);
			}
		}

		/* Single gets of random blocks; whatever comes back must be right. */
		for (int j = 0; j < 4; j++) {
			kvt_key k = keys[next_rand(&w->rng) % CHAIN];
			size_t len = 0;
			int rc = kvt_get(w->s, k, bufs[0], block_len(k), &len);
			if (rc == 0 && (len != block_len(k) || !check_block(k, bufs[0], len)))
				w->wrong_bytes++;
			assert_true(rc == 0 || rc == -ENOENT || rc == -EBADMSG);
		}

		/* Now and then drop a private block. */
		if (next_rand(&w->rng) % 4 == 0) {
			int rc = kvt_remove(w->s, keys[CHAIN - 1]);
			assert_true(rc == 0 || rc == -ENOENT);
		}
		if (r % 50 == 0) {
			char st[64];
			assert_true(kvt_stats_json(w->s, st, sizeof(st)) > 0);
		}
	}
	for (int i = 0; i < CHAIN; i++)
		free(bufs[i]);
	return NULL;
}

static void hammer(const char *cfg, int disk)
{
	kvt_store *s = NULL;
	pthread_t t[NTHREADS];
	struct worker w[NTHREADS];
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open: %s", kvt_last_error());
	for (unsigned i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){ .s = s, .id = i, .rng = 0x9e3779b9u * (i + 1), .disk = disk };
		assert_int_equal(pthread_create(&t[i], NULL, run, &w[i]), 0);
	}
	long wrong = 0, broken = 0, loads = 0, hits = 0, puts = 0, refused = 0;
	for (unsigned i = 0; i < NTHREADS; i++) {
		pthread_join(t[i], NULL);
		wrong += w[i].wrong_bytes;
		broken += w[i].lease_broken;
		loads += w[i].loads;
		hits += w[i].hits;
		puts += w[i].puts;
		refused += w[i].refused;
	}
	char st[8192];
	kvt_stats_json(s, st, sizeof(st));
	print_message("loads %ld hits %ld puts %ld refused %ld\n%s\n", loads, hits,
		      puts, refused, st);
	kvt_close(s);
	assert_int_equal(wrong, 0);
	assert_int_equal(broken, 0);
	assert_true(hits > 0);
}

static void test_threads_ram_under_eviction(void **state)
{
	(void)state;
	/* 8 MiB against a working set of about 4 x 12 x 24 x 64 KiB = 72 MiB. */
	hammer("{\"ram\": {\"capacity\": \"8MiB\", \"lease_ms\": 20000,"
	       " \"lease_cap\": 0.6, \"mlock\": false}, \"threads\": 2}", 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_threads_ram_under_eviction),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
