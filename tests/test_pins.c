/*
 * test_pins.c - the owner's pin table (lib/pins.c) over a real RAM tier
 * (ram_pin, ram_unpin): pins released by their member only, ids that cannot
 * end a slot's next pin, the per-member cap, lapse in deadline order, every
 * pin of a member ended when its connection goes, and the lapse-and-reuse
 * rule: a pinned block whose key was removed keeps its memory (no new block
 * lands there, its bytes stay intact) until the pin is released or lapses,
 * and only then is the memory reused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "config.h"
#include "internal.h"
#include "pins.h"
#include "ram.h"
#include "util.h"
#include "opts.h"


#define BLK 65536u
#define HOLD_MS 1000u
#define MS 1000000ull

struct fx {
	struct kvt_config cfg;
	struct ram_tier *r;
	struct pins *p;
	int unpins;
};

static void unpin_cb(void *arg, uint64_t ref)
{
	struct fx *f = arg;

	f->unpins++;
	ram_unpin(f->r, ref);
}

/* A block pinned through ram_pin. */
struct pin {
	uint64_t ref, off;
	size_t len;
};

static int pin_block(struct fx *f, uint64_t k, struct pin *pin)
{
	return ram_pin(f->r, test_key(k), BLK, &pin->ref, &pin->off, &pin->len);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"1MiB\"}}", &f->cfg), 0);
	assert_int_equal(ram_open_cfg(&f->cfg, NULL, NULL, NULL, &f->r), 0);
	assert_int_equal(pins_open(3, HOLD_MS, unpin_cb, f, &f->p), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	pins_close(f->p);
	ram_close(f->r);
	config_free(&f->cfg);
	free(f);
	return 0;
}

static void put(struct fx *f, uint64_t k)
{
	uint8_t buf[BLK];

	fill_block(test_key(k), buf, BLK);
	assert_int_equal(ram_put(f->r, test_key(k), buf, BLK), 0);
}

static uint64_t hold(struct fx *f, unsigned member, uint64_t k, uint64_t now,
		     struct pin *pin)
{
	assert_int_equal(pin_block(f, k, pin), 0);
	assert_int_equal(pin->len, BLK);
	return pins_hold(f->p, member, pin->ref, now);
}

static const uint8_t *bytes(struct fx *f, const struct pin *pin)
{
	return (const uint8_t *)ram_arena_base(f->r) + pin->off;
}

static void test_release_by_member_only(void **state)
{
	struct fx *f = *state;
	struct pin pin;
	uint64_t now = kvt_now_ns();

	put(f, 1);
	uint64_t id = hold(f, 0, 1, now, &pin);
	assert_true(id != 0);
	assert_int_equal(pins_held(f->p), 1);
	/* another member's release, an unknown id: ignored */
	assert_int_equal(pins_release(f->p, 1, &id, 1), 0);
	uint64_t bogus[3] = { 0, id + 1, (uint64_t)-1 };
	assert_int_equal(pins_release(f->p, 0, bogus, 3), 0);
	assert_int_equal(pins_release(f->p, 7, &id, 1), 0);
	assert_int_equal(f->unpins, 0);
	assert_int_equal(pins_release(f->p, 0, &id, 1), 1);
	assert_int_equal(f->unpins, 1);
	/* the same id again, after its slot was taken by the next pin */
	uint64_t id2 = hold(f, 0, 1, now, &pin);
	assert_true(id2 != 0 && id2 != id);
	assert_int_equal(pins_release(f->p, 0, &id, 1), 0);
	assert_int_equal(pins_held(f->p), 1);
	assert_int_equal(pins_release(f->p, 0, &id2, 1), 1);
	assert_int_equal(pins_held(f->p), 0);
	/* member out of range: refused, nothing held */
	struct pin pin3;
	assert_int_equal(pin_block(f, 1, &pin3), 0);
	assert_int_equal(pins_hold(f->p, 3, pin3.ref, now), 0);
	ram_unpin(f->r, pin3.ref);

	json_t *o = json_object();
	struct stat_visitor sv = stats_json_visitor(o);
	pins_stats(f->p, &sv);
	assert_int_equal(json_integer_value(json_object_get(o, "pins_taken")), 2);
	assert_int_equal(json_integer_value(json_object_get(o, "pins_released")), 2);
	assert_int_equal(json_integer_value(json_object_get(o, "pins_refused")), 1);
	assert_int_equal(json_integer_value(json_object_get(o, "pins_held")), 0);
	json_decref(o);
}

static void test_lapse_in_order(void **state)
{
	struct fx *f = *state;
	struct pin pin;
	uint64_t t0 = kvt_now_ns();

	for (uint64_t k = 1; k <= 4; k++)
		put(f, k);
	uint64_t a = hold(f, 0, 1, t0, &pin);
	hold(f, 0, 2, t0 + 10 * MS, &pin);
	hold(f, 1, 3, t0 + 20 * MS, &pin);
	uint64_t d = hold(f, 0, 4, t0 + 30 * MS, &pin);
	assert_true(a && d);
	assert_int_equal(pins_lapse(f->p, t0 + HOLD_MS * MS - 1), 0);
	assert_int_equal(pins_lapse(f->p, t0 + HOLD_MS * MS + 15 * MS), 2);
	assert_int_equal(pins_held(f->p), 2);
	/* a lapsed pin cannot be released twice */
	assert_int_equal(pins_release(f->p, 0, &a, 1), 0);
	assert_int_equal(pins_release(f->p, 0, &d, 1), 1);
	assert_int_equal(pins_lapse(f->p, t0 + 10 * HOLD_MS * MS), 1);
	assert_int_equal(f->unpins, 4);
}

static void test_member_cap_and_drop(void **state)
{
	struct fx *f = *state;
	struct pin pin;
	uint64_t now = kvt_now_ns();

	put(f, 1);
	for (unsigned i = 0; i < PINS_PER_MEMBER; i++) {
		assert_int_equal(pin_block(f, 1, &pin), 0);
		assert_true(pins_hold(f->p, 2, pin.ref, now) != 0);
	}
	assert_int_equal(pin_block(f, 1, &pin), 0);
	assert_int_equal(pins_hold(f->p, 2, pin.ref, now), 0);
	ram_unpin(f->r, pin.ref);
	/* other members are not limited by member 2's pins */
	assert_true(hold(f, 1, 1, now, &pin) != 0);
	/* member 2's connection goes: all of its pins end, member 1's stay */
	assert_int_equal(pins_drop_member(f->p, 2), PINS_PER_MEMBER);
	assert_int_equal(pins_held(f->p), 1);
	assert_int_equal(pins_drop_member(f->p, 2), 0);
}

static void test_lapse_and_reuse(void **state)
{
	struct fx *f = *state;
	struct pin pin, other;
	uint64_t now = kvt_now_ns();

	/* fill RAM: 1 MiB holds 16 blocks of 64 KiB */
	for (uint64_t k = 1; k <= 16; k++)
		put(f, k);
	uint64_t id = hold(f, 0, 5, now, &pin);
	assert_true(id != 0);
	/* the key goes away while a member may be reading its bytes */
	assert_int_equal(ram_remove(f->r, test_key(5)), 0);
	assert_int_equal(pin_block(f, 5, &other), -ENOENT);
	/* new blocks come: none may land in the pinned memory */
	for (uint64_t k = 100; k < 140; k++) {
		uint8_t buf[BLK];
		fill_block(test_key(k), buf, BLK);
		int rc = ram_put(f->r, test_key(k), buf, BLK);
		assert_true(rc == 0 || rc == -ENOSPC);
		assert_true(check_block(test_key(5), bytes(f, &pin), BLK));
	}
	/* the hold lapses: the memory is free again, and reused */
	assert_int_equal(pins_lapse(f->p, now + HOLD_MS * MS), 1);
	int reused = 0;
	for (uint64_t k = 200; k < 240 && !reused; k++) {
		put(f, k);
		assert_int_equal(pin_block(f, k, &other), 0);
		reused = other.off == pin.off;
		ram_unpin(f->r, other.ref);
	}
	assert_true(reused);
	assert_int_equal(pins_release(f->p, 0, &id, 1), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_release_by_member_only),
		T(test_lapse_in_order),
		T(test_member_cap_and_drop),
		T(test_lapse_and_reuse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
