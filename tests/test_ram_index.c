/*
 * test_ram_index.c - the RAM tier's sharded index's table: inserts, finds and
 * backward-shift deletions checked against a reference under random
 * operations, growth, pool reuse, and the LRU/held list links.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ram_index.h"
#include "util.h"

static void test_insert_find_unlink_match_reference(void **state)
{
	(void)state;
	enum { UNIVERSE = 5000, STEPS = 200000 };
	struct shard sh;
	uint32_t *id = malloc(UNIVERSE * sizeof(*id));
	uint64_t x = 12345;
	assert_int_equal(shard_init(&sh), 0);
	for (int i = 0; i < UNIVERSE; i++)
		id[i] = IDX_NONE;
	for (int step = 0; step < STEPS; step++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		int k = (int)(x % UNIVERSE);
		/* Clustered keys: many collide on their home slot. */
		kvt_key key = { (uint64_t)(k % 97), test_key((uint64_t)k).hi };
		if (id[k] == IDX_NONE) {
			assert_int_equal(shard_find(&sh, key), IDX_NONE);
			id[k] = shard_insert(&sh, key);
			assert_int_not_equal(id[k], IDX_NONE);
		} else {
			assert_int_equal(shard_find(&sh, key), id[k]);
			if (x & 1) {
				shard_unlink(&sh, id[k]);
				shard_free_ent(&sh, id[k]);
				id[k] = IDX_NONE;
				assert_int_equal(shard_find(&sh, key), IDX_NONE);
			}
		}
	}
	uint32_t live = 0;
	for (int k = 0; k < UNIVERSE; k++) {
		kvt_key key = { (uint64_t)(k % 97), test_key((uint64_t)k).hi };
		assert_int_equal(shard_find(&sh, key), id[k]);
		live += id[k] != IDX_NONE;
	}
	assert_int_equal(sh.count, live);
	assert_true(sh.count * 2 <= sh.table->mask + 1); /* at most half full */
	assert_true(shard_mem_bytes(&sh) > 0);
	shard_destroy(&sh);
	free(id);
}

static void test_lists_keep_order(void **state)
{
	(void)state;
	struct shard sh;
	uint32_t ids[5];
	assert_int_equal(shard_init(&sh), 0);
	for (int i = 0; i < 5; i++) {
		ids[i] = shard_insert(&sh, test_key((uint64_t)i));
		list_push_head(&sh, &sh.lru_head, &sh.lru_tail, ids[i]);
	}
	/* head: 4 3 2 1 0 :tail */
	assert_int_equal(sh.lru_head, ids[4]);
	assert_int_equal(sh.lru_tail, ids[0]);
	list_remove(&sh, &sh.lru_head, &sh.lru_tail, ids[0]);
	assert_int_equal(sh.lru_tail, ids[1]);
	list_remove(&sh, &sh.lru_head, &sh.lru_tail, ids[4]);
	assert_int_equal(sh.lru_head, ids[3]);
	list_push_tail(&sh, &sh.lru_head, &sh.lru_tail, ids[4]);
	assert_int_equal(sh.lru_tail, ids[4]);
	uint32_t walk[5], n = 0;
	for (uint32_t i = sh.lru_head; i != IDX_NONE; i = shard_ent(&sh, i)->next)
		walk[n++] = i;
	assert_int_equal(n, 4);
	assert_int_equal(walk[0], ids[3]);
	assert_int_equal(walk[1], ids[2]);
	assert_int_equal(walk[2], ids[1]);
	assert_int_equal(walk[3], ids[4]);
	shard_destroy(&sh);
}

static void test_pool_slots_are_reused(void **state)
{
	(void)state;
	struct shard sh;
	assert_int_equal(shard_init(&sh), 0);
	uint32_t a = shard_insert(&sh, test_key(1));
	shard_unlink(&sh, a);
	shard_free_ent(&sh, a);
	uint32_t b = shard_insert(&sh, test_key(2));
	assert_int_equal(a, b);
	assert_int_equal(shard_find(&sh, test_key(1)), IDX_NONE);
	assert_int_equal(shard_find(&sh, test_key(2)), b);
	shard_destroy(&sh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_insert_find_unlink_match_reference),
		cmocka_unit_test(test_lists_keep_order),
		cmocka_unit_test(test_pool_slots_are_reused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
