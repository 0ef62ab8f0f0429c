/*
 * test_ram.c - the RAM tier's internal interface that the public calls do
 * not reach directly: ram_visit(), which hands a pinned block to a callback
 * in place (the peer server sends blocks this way).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "ram.h"
#include "util.h"

struct visit {
	struct ram_tier *r;
	kvt_key key;
	size_t want;
	int calls;
	int ok;
	int remove_inside;
};

static int check_in_place(void *arg, const void *block, size_t len)
{
	struct visit *v = arg;

	v->calls++;
	if (v->remove_inside)
		/* removed while pinned: the bytes must stay until we return */
		assert_int_equal(ram_remove(v->r, v->key), 0);
	v->ok = len == v->want && check_block(v->key, block, len) == 1;
	return 7; /* handed back as the call's result */
}

static void visit_hands_over_pinned_blocks(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r;
	uint8_t buf[20000];
	size_t len = 0;

	(void)state;
	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"4MiB\"}}", &cfg), 0);
	assert_int_equal(ram_open(&cfg, NULL, NULL, NULL, &r), 0);
	struct visit v = { .r = r, .key = test_key(1), .want = sizeof(buf) };

	fill_block(v.key, buf, sizeof(buf));
	assert_int_equal(ram_put(r, v.key, buf, sizeof(buf)), 0);

	assert_int_equal(ram_visit(r, v.key, sizeof(buf), check_in_place, &v, &len), 7);
	assert_int_equal(v.calls, 1);
	assert_true(v.ok);
	assert_int_equal(len, sizeof(buf));

	/* too small a capacity: the size, and no call */
	assert_int_equal(ram_visit(r, v.key, 100, check_in_place, &v, &len), -ENOBUFS);
	assert_int_equal(len, sizeof(buf));
	assert_int_equal(v.calls, 1);
	/* a miss: no call */
	assert_int_equal(ram_visit(r, test_key(2), sizeof(buf), check_in_place, &v, &len),
			 -ENOENT);
	assert_int_equal(v.calls, 1);

	/* removed during the visit: intact inside, gone after */
	v.remove_inside = 1;
	assert_int_equal(ram_visit(r, v.key, sizeof(buf), check_in_place, &v, &len), 7);
	assert_true(v.ok);
	assert_int_equal(ram_get(r, v.key, buf, sizeof(buf), &len), -ENOENT);
	ram_close(r);
	config_free(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(visit_hands_over_pinned_blocks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
