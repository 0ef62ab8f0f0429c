/*
 * test_ram.c - the RAM tier's contract, driven directly (no store): the
 * lease cap, the watermarks and the exact LRU order of eviction, a lease or
 * a remove that lands while a block is being spilled, ram_visit(), which
 * hands a pinned block to a callback in place (the peer server sends blocks
 * this way) with the checksum kept beside it, the checksum each way of
 * making a block keeps, lookups that read and renew leases without the
 * shard locks while other threads put, remove, release and expire (run
 * under TSan too), the directory of blocks shared with attached processes,
 * which names exactly the blocks in RAM through puts, removals, evictions
 * and slots; and leases as kvt_lookup(3) promises them: never shorter than
 * asked (deadlines rounded up by less than a grain), extended by renewals
 * and never shortened by them, on one thread or several, ended by a release
 * or by themselves, and within the lease cap however many threads lease.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "config.h"
#include "internal.h"
#include "ram.h"
#include "ram_dir.h"
#include "ram_impl.h"
#include "stats.h"
#include "util.h"
#include "opts.h"


#define BLK (64u * 1024)  /* 16 blocks fill the 1 MiB arena of these tests */
#define FAR_NS (60ull * 1000000000ull)

/* 1 MiB of RAM: leases up to 256 KiB (4 blocks), eviction from above 768 KiB
 * (12 blocks) down to 512 KiB (8 blocks). */
static const char *const small_ram =
	"{\"ram\": {\"capacity\": \"1MiB\", \"lease_cap\": 0.25, \"high_watermark\": 0.75,"
	" \"low_watermark\": 0.5, \"mlock\": false}}";

/* What the spill and unspill callbacks saw, and what they do to the tier. */
struct spill_log {
	struct ram_tier *r;
	kvt_key spilled[64];
	size_t nspilled;
	kvt_key unspilled[8];
	size_t nunspilled;
	int fail;             /* spills report -EIO */
	int bytes_ok;         /* every spilled block held its bytes */
	kvt_key lease_key;    /* leased while its spill runs */
	kvt_key remove_key;   /* removed while its spill runs */
	kvt_key fail_key;     /* this one's spill fails */
	int lease_rc, remove_rc, get_rc;
};

static void log_spill(void *arg, struct ram_spill *sp)
{
	struct spill_log *l = arg;
	kvt_op *ops = sp->ops;
	size_t n = sp->n;
	uint8_t copy[BLK];
	size_t len;

	for (size_t i = 0; i < n; i++) {
		/* No tier lock is held here: the tier may be called back. */
		if (kvt_key_eq(ops[i].key, l->lease_key)) {
			l->lease_rc = ram_lookup(l->r, ops[i].key, 1, kvt_now_ns() + FAR_NS);
			/* still readable while it is being evicted */
			l->get_rc = ram_get(l->r, ops[i].key, copy, sizeof(copy), &len);
		}
		if (kvt_key_eq(ops[i].key, l->remove_key))
			l->remove_rc = ram_remove(l->r, ops[i].key);
		/* removed or not, the bytes stay until the spill returns */
		if (check_block(ops[i].key, ops[i].buf, ops[i].len) != 1)
			l->bytes_ok = 0;
		if (l->nspilled < 64)
			l->spilled[l->nspilled++] = ops[i].key;
		ops[i].result = l->fail || kvt_key_eq(ops[i].key, l->fail_key) ? -EIO : 0;
	}
}

static void log_unspill(void *arg, kvt_key key)
{
	struct spill_log *l = arg;

	if (l->nunspilled < 8)
		l->unspilled[l->nunspilled++] = key;
}

/* Picks one integer counter out of what ram_stats() reports. */
struct counter {
	const char *name;
	int64_t value;
	int found;
};

static void pick_counter(void *arg, const char *name, struct stat_val v)
{
	struct counter *c = arg;

	if (!strcmp(name, c->name)) {
		assert_int_equal(v.kind, STAT_INT);
		c->value = v.i;
		c->found++;
	}
}

static long long ram_counter(struct ram_tier *r, const char *name)
{
	struct counter c = { .name = name };
	struct stat_visitor v = { .emit = pick_counter, .arg = &c };

	ram_stats(r, &v);
	assert_int_equal(c.found, 1);
	return (long long)c.value;
}

static struct ram_tier *open_small(struct kvt_config *cfg, struct spill_log *l)
{
	struct ram_tier *r;

	assert_int_equal(config_parse(small_ram, cfg), 0);
	assert_int_equal(ram_open_cfg(cfg, l ? log_spill : NULL, l ? log_unspill : NULL, l, &r), 0);
	if (l) {
		memset(l, 0, sizeof(*l));
		l->r = r;
		l->bytes_ok = 1;
		l->lease_key = l->remove_key = l->fail_key = test_key(1000);
	}
	return r;
}

static void put_blocks(struct ram_tier *r, uint64_t from, uint64_t to)
{
	uint8_t buf[BLK];

	for (uint64_t i = from; i < to; i++) {
		fill_block(test_key(i), buf, sizeof(buf));
		assert_int_equal(ram_put(r, test_key(i), buf, sizeof(buf)), 0);
	}
}

/* A get of key i into buf: 1 when it read the block's bytes, 0 on a miss. */
static int got_block(int rc, uint64_t i, const uint8_t *buf, size_t len)
{
	if (rc == -ENOENT)
		return 0;
	assert_int_equal(rc, 0);
	assert_int_equal(len, BLK);
	assert_int_equal(check_block(test_key(i), buf, len), 1);
	return 1;
}

/* 1 when key i is stored with its bytes, 0 when it is not. */
static int has_block(struct ram_tier *r, uint64_t i)
{
	uint8_t buf[BLK];
	size_t len = 0;

	int rc = ram_get(r, test_key(i), buf, sizeof(buf), &len);

	return got_block(rc, i, buf, len);
}

static void lease(struct ram_tier *r, uint64_t i, int expect)
{
	assert_int_equal(ram_lookup(r, test_key(i), 1, kvt_now_ns() + FAR_NS), expect);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Checks each shard's count of droppable bytes (what the evictor may drop,
 * which ram_put_refused weighs) against its LRU list: the blocks on it that
 * no pin holds, each rounded up to 4 KiB. */
static void assert_droppable_books(struct ram_tier *r)
{
	for (unsigned i = 0; i < NSHARDS; i++) {
		struct shard *sh = &r->shards[i];
		uint64_t sum = 0;

		pthread_mutex_lock(&sh->lock);
		for (uint32_t id = sh->lru_head; id != IDX_NONE; id = shard_ent(sh, id)->next) {
			const struct ram_ent *e = shard_ent(sh, id);
			if (e->pins == 0)
				sum += (e->len + 4095u) & ~4095u;
		}
		uint64_t kept = atomic_load(&sh->droppable);
		pthread_mutex_unlock(&sh->lock);
		assert_int_equal(kept, sum);
	}
}

static void lease_cap_bounds_leased_bytes(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r = open_small(&cfg, NULL);

	(void)state;
	put_blocks(r, 0, 8);
	assert_int_equal(ram_counter(r, "lease_cap_bytes"), 4 * BLK);
	for (uint64_t i = 0; i < 4; i++)
		lease(r, i, 1);
	assert_int_equal(ram_counter(r, "leased_bytes"), 4 * BLK);
	/* past the cap: present, but not leased */
	lease(r, 4, -ENOSPC);
	assert_int_equal(ram_counter(r, "lease_refusals"), 1);
	assert_int_equal(ram_lookup(r, test_key(4), 0, 0), 1);
	assert_int_equal(ram_lookup(r, test_key(99), 1, kvt_now_ns() + FAR_NS), 0);
	/* renewing a lease counts its bytes once */
	lease(r, 0, 1);
	assert_int_equal(ram_counter(r, "leased_bytes"), 4 * BLK);
	assert_int_equal(ram_counter(r, "leased_objects"), 4);

	/* an ended lease makes room, once */
	assert_int_equal(ram_release(r, test_key(0)), 1);
	assert_int_equal(ram_release(r, test_key(0)), 0);
	assert_int_equal(ram_release(r, test_key(5)), 0);
	lease(r, 4, 1);
	lease(r, 5, -ENOSPC);

	/* a lapsed lease makes room too, collected when the cap is reached */
	assert_int_equal(ram_release(r, test_key(4)), 1);
	assert_int_equal(ram_lookup(r, test_key(4), 1, kvt_now_ns() + 1000000), 1);
	sleep_ms(5);
	lease(r, 5, 1);
	assert_true(ram_counter(r, "lease_expiries") >= 1);
	assert_int_equal(ram_counter(r, "leased_bytes"), 4 * BLK);
	/* a removed block gives its leased bytes back */
	assert_int_equal(ram_remove(r, test_key(5)), 0);
	assert_int_equal(ram_counter(r, "leased_bytes"), 3 * BLK);
	lease(r, 6, 1);
	ram_close(r);
	config_free(&cfg);
}

static void put_refused_when_only_leased_blocks_remain(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r;
	uint8_t buf[BLK];

	(void)state;
	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"1MiB\", \"lease_cap\": 1,"
				      " \"mlock\": false}}", &cfg), 0);
	assert_int_equal(ram_open_cfg(&cfg, NULL, NULL, NULL, &r), 0);
	put_blocks(r, 0, 16);
	for (uint64_t i = 0; i < 16; i++)
		lease(r, i, 1);
	fill_block(test_key(16), buf, sizeof(buf));
	assert_int_equal(ram_put(r, test_key(16), buf, sizeof(buf)), -ENOSPC);
	assert_int_equal(ram_counter(r, "refused_puts"), 1);
	assert_int_equal(ram_counter(r, "evictions"), 0);
	/* One lease ended: still refused, since the 15 leased blocks and this
	 * one stay above the low watermark (13.6 blocks), where the evictor
	 * would drop the new block as soon as it came in. */
	assert_int_equal(ram_release(r, test_key(3)), 1);
	assert_int_equal(ram_put(r, test_key(16), buf, sizeof(buf)), -ENOSPC);
	assert_int_equal(ram_counter(r, "refused_puts"), 2);
	/* Four ended: the unleased blocks make room for the put, and it stays. */
	for (uint64_t i = 4; i < 7; i++)
		assert_int_equal(ram_release(r, test_key(i)), 1);
	assert_int_equal(ram_put(r, test_key(16), buf, sizeof(buf)), 0);
	assert_int_equal(has_block(r, 3), 0);
	assert_int_equal(has_block(r, 16), 1);
	for (uint64_t i = 7; i < 16; i++)
		assert_int_equal(has_block(r, i), 1);
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(has_block(r, i), 1);
	ram_close(r);
	config_free(&cfg);
}

/* A RAM tier of 16 blocks (watermarks 0.8 and 0.7, all of it leasable) holding
 * 12: below the high watermark (12.8). */
static void open_twelve_of_sixteen(struct kvt_config *cfg, struct ram_tier **r)
{
	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"1MiB\", \"lease_cap\": 1,"
				      " \"high_watermark\": 0.8, \"low_watermark\": 0.7,"
				      " \"mlock\": false}}", cfg), 0);
	assert_int_equal(ram_open_cfg(cfg, NULL, NULL, NULL, r), 0);
	put_blocks(*r, 0, 12);
}

/*
 * Without a disk tier an evicted block is gone. With leased blocks alone
 * above the low watermark, a put that takes RAM past the high watermark
 * would be the evictor's victim at once (reported stored, then dropped):
 * it is refused and counted, though the arena still has room for it. A put
 * that stays below the high watermark is taken.
 */
static void put_refused_when_leases_would_drop_it_at_once(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r;
	uint8_t buf[BLK];

	(void)state;
	open_twelve_of_sixteen(&cfg, &r);
	for (uint64_t i = 0; i < 12; i++)
		lease(r, i, 1);
	fill_block(test_key(12), buf, sizeof(buf));
	assert_int_equal(ram_put(r, test_key(12), buf, sizeof(buf)), -ENOSPC);
	assert_int_equal(ram_counter(r, "refused_puts"), 1);
	assert_int_equal(has_block(r, 12), 0);
	/* Without leases the same put is taken (nothing above the high mark). */
	for (uint64_t i = 0; i < 12; i++)
		assert_int_equal(ram_release(r, test_key(i)), 1);
	assert_int_equal(ram_put(r, test_key(12), buf, sizeof(buf)), 0);
	assert_int_equal(has_block(r, 12), 1);
	assert_int_equal(ram_counter(r, "refused_puts"), 1);
	ram_close(r);
	config_free(&cfg);
}

/*
 * Pinned blocks count against a new one as leased blocks do: without a
 * disk tier, a put that takes RAM past the high watermark while the blocks
 * the evictor cannot drop (pinned or leased) and it alone stay above the
 * low one is refused (-ENOSPC, counted) rather than dropped at once. The
 * tier's count of droppable bytes follows every pin, unpin, lease,
 * release, lapse, removal and eviction.
 */
static void put_refused_when_pins_would_drop_it_at_once(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r;
	uint8_t buf[BLK];
	uint64_t ref[12], off;
	size_t len;

	(void)state;
	open_twelve_of_sixteen(&cfg, &r);
	assert_droppable_books(r);
	for (uint64_t i = 0; i < 12; i++) /* 0-7 pinned, 8-11 leased */
		if (i < 8)
			assert_int_equal(ram_pin(r, test_key(i), BLK, &ref[i], &off, &len), 0);
		else
			lease(r, i, 1);
	assert_droppable_books(r);
	fill_block(test_key(12), buf, sizeof(buf));
	assert_int_equal(ram_put(r, test_key(12), buf, sizeof(buf)), -ENOSPC);
	assert_int_equal(ram_counter(r, "refused_puts"), 1);
	/* A pin ends: still refused (11 blocks and it, above 11.2). */
	ram_unpin(r, ref[0]);
	assert_droppable_books(r);
	assert_int_equal(ram_put(r, test_key(12), buf, sizeof(buf)), -ENOSPC);
	/* A pinned block removed stays until its unpin, and counts till then. */
	assert_int_equal(ram_remove(r, test_key(1)), 0);
	assert_droppable_books(r);
	assert_int_equal(ram_put(r, test_key(12), buf, sizeof(buf)), -ENOSPC);
	assert_int_equal(ram_counter(r, "refused_puts"), 3);
	ram_unpin(r, ref[1]);
	assert_droppable_books(r);
	/* Its bytes gone: 10 left with it, and it stays. */
	assert_int_equal(ram_put(r, test_key(12), buf, sizeof(buf)), 0);
	assert_droppable_books(r);
	ram_evict_to_low(r);
	assert_droppable_books(r);
	assert_int_equal(has_block(r, 0), 0);
	assert_int_equal(has_block(r, 12), 1);
	assert_int_equal(ram_counter(r, "refused_puts"), 3);
	assert_int_equal(ram_release(r, test_key(8)), 1);
	assert_droppable_books(r);
	/* A lease that lapses makes its block droppable again. */
	assert_int_equal(ram_lookup(r, test_key(12), 1, kvt_now_ns() + 1000000), 1);
	assert_droppable_books(r);
	sleep_ms(5);
	(void)ram_counter(r, "leased_bytes"); /* collects lapsed leases */
	assert_droppable_books(r);
	for (uint64_t i = 2; i < 8; i++)
		ram_unpin(r, ref[i]);
	assert_droppable_books(r);
	ram_close(r);
	config_free(&cfg);
}

static void watermarks_evict_least_recent_down_to_low(void **state)
{
	struct kvt_config cfg;
	struct spill_log l;
	struct ram_tier *r = open_small(&cfg, &l);

	(void)state;
	put_blocks(r, 0, 12);
	/* at the high watermark, not above it */
	assert_int_equal(ram_above_high(r), 0);
	put_blocks(r, 12, 13);
	assert_int_equal(ram_above_high(r), 1);
	assert_int_equal(ram_counter(r, "high_watermark_bytes"), 12 * BLK);
	assert_int_equal(ram_counter(r, "low_watermark_bytes"), 8 * BLK);

	/* 0 is leased, 1 was read: the five least recent others go */
	lease(r, 0, 1);
	assert_int_equal(has_block(r, 1), 1);
	assert_int_equal(ram_evict_to_low(r), 5);
	assert_int_equal(ram_above_high(r), 0);
	assert_int_equal(ram_counter(r, "bytes_used"), 8 * BLK);
	assert_int_equal(l.nspilled, 5);
	for (size_t i = 0; i < 5; i++)
		assert_true(kvt_key_eq(l.spilled[i], test_key(2 + i)));
	assert_true(l.bytes_ok);
	for (uint64_t i = 0; i < 13; i++)
		assert_int_equal(has_block(r, i), i < 2 || i > 6);
	assert_int_equal(ram_counter(r, "evictions"), 5);
	assert_int_equal(ram_counter(r, "evicted_bytes"), 5 * BLK);
	assert_int_equal(ram_counter(r, "spills"), 5);
	assert_int_equal(l.nunspilled, 0);

	/* a failed spill still evicts (the block is dropped), and says so */
	l.fail = 1;
	put_blocks(r, 13, 18);
	assert_int_equal(ram_above_high(r), 1);
	assert_int_equal(ram_evict_to_low(r), 5);
	assert_int_equal(ram_counter(r, "spill_failures"), 5);
	assert_int_equal(ram_counter(r, "bytes_used"), 8 * BLK);
	assert_int_equal(has_block(r, 0), 1);
	ram_close(r);
	config_free(&cfg);
}

static void lease_taken_during_spill_keeps_block(void **state)
{
	struct kvt_config cfg;
	struct spill_log l;
	struct ram_tier *r = open_small(&cfg, &l);

	(void)state;
	put_blocks(r, 0, 13);
	l.lease_key = test_key(0);
	ram_evict_to_low(r);
	assert_int_equal(l.lease_rc, 1);
	assert_int_equal(l.get_rc, 0);
	assert_true(l.bytes_ok);
	/* 0 was spilled but the lease won: it stays, and five others went */
	assert_true(kvt_key_eq(l.spilled[0], test_key(0)));
	assert_int_equal(has_block(r, 0), 1);
	assert_int_equal(ram_counter(r, "spills"), (long long)l.nspilled);
	assert_int_equal(ram_counter(r, "evictions"), 5);
	assert_int_equal(ram_counter(r, "bytes_used"), 8 * BLK);
	assert_int_equal(ram_counter(r, "leased_objects"), 1);
	for (uint64_t i = 1; i < 13; i++)
		assert_int_equal(has_block(r, i), i > 5);
	/* still leased: the next eviction passes it by */
	put_blocks(r, 13, 18);
	l.lease_key = test_key(1000);
	ram_evict_to_low(r);
	assert_int_equal(has_block(r, 0), 1);
	assert_int_equal(ram_release(r, test_key(0)), 1);
	assert_droppable_books(r);
	ram_close(r);
	config_free(&cfg);
}

static void remove_during_spill_takes_spilled_copy_back(void **state)
{
	struct kvt_config cfg;
	struct spill_log l;
	struct ram_tier *r = open_small(&cfg, &l);

	(void)state;
	put_blocks(r, 0, 13);
	/* 0: removed while spilled; its spilled copy must be taken back */
	l.remove_key = test_key(0);
	assert_int_equal(ram_evict_to_low(r), 5);
	assert_int_equal(l.remove_rc, 0);
	assert_true(l.bytes_ok);
	assert_int_equal(l.nunspilled, 1);
	assert_true(kvt_key_eq(l.unspilled[0], test_key(0)));
	assert_int_equal(has_block(r, 0), 0);
	assert_int_equal(ram_remove(r, test_key(0)), -ENOENT);
	assert_int_equal(ram_counter(r, "objects"), 8);
	assert_int_equal(ram_counter(r, "bytes_used"), 8 * BLK);
	/* a removal is not an eviction */
	assert_int_equal(ram_counter(r, "evictions"), 4);

	/* 5: removed while spilled, but its spill failed: nothing to take back */
	put_blocks(r, 13, 18);
	l.remove_key = l.fail_key = test_key(5);
	ram_evict_to_low(r);
	assert_int_equal(l.remove_rc, 0);
	assert_int_equal(l.nunspilled, 1);
	assert_int_equal(has_block(r, 5), 0);
	assert_int_equal(ram_counter(r, "bytes_used"), 8 * BLK);
	ram_close(r);
	config_free(&cfg);
}

struct visit {
	struct ram_tier *r;
	kvt_key key;
	size_t want;
	int calls;
	int ok;
	int remove_inside;
	uint64_t sum;         /* the checksum handed over */
};

static int check_in_place(void *arg, const void *block, size_t len, uint64_t sum)
{
	struct visit *v = arg;

	v->calls++;
	v->sum = sum;
	if (v->remove_inside)
		/* removed while pinned: the bytes must stay until we return */
		assert_int_equal(ram_remove(v->r, v->key), 0);
	v->ok = len == v->want && check_block(v->key, block, len) == 1 &&
		sum == kvt_checksum(block, len);
	return 7; /* handed back as the call's result */
}

/* --- the directory shared with attached processes ------------------------ */

/* 1 when the directory names block i and its bytes read back right through
 * it, 0 when it does not name it. */
static int in_dir(struct ram_tier *r, const struct dir_view *v, uint64_t i)
{
	uint8_t buf[BLK];
	size_t len = 0;
	int rc = dir_read(v, ram_arena_base(r), ram_arena_size(r), test_key(i), buf,
			  sizeof(buf), &len);

	return got_block(rc, i, buf, len);
}

static void directory_names_exactly_the_blocks_in_ram(void **state)
{
	struct kvt_config cfg;
	struct spill_log l;
	struct ram_tier *r;
	struct dir_view v;
	uint8_t buf[BLK];
	size_t dlen = 0, len = 0;
	uint64_t ref, off;

	(void)state;
	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"1MiB\", \"lease_cap\": 0.25,"
				      " \"high_watermark\": 0.75, \"low_watermark\": 0.5,"
				      " \"mlock\": false}, \"local\": {\"socket\": \"/nonexistent/s\","
				      " \"directory\": 64}}", &cfg), 0);
	assert_int_equal(ram_open_cfg(&cfg, log_spill, log_unspill, &l, &r), 0);
	memset(&l, 0, sizeof(l));
	l.r = r;
	l.bytes_ok = 1;
	l.lease_key = l.remove_key = l.fail_key = test_key(1000);
	int fd = ram_dir_memfd(r, &dlen);
	assert_true(fd >= 0);
	assert_int_equal(dir_view_map(fd, dlen, &v), 0);
	assert_int_equal(dir_view_map(fd, dlen - 64, &v), -EPROTO);
	assert_int_equal(dir_view_map(fd, dlen, &v), 0);

	put_blocks(r, 0, 12);
	for (uint64_t i = 0; i < 12; i++)
		assert_int_equal(in_dir(r, &v, i), 1);
	assert_int_equal(ram_counter(r, "directory_blocks"), 12);
	assert_int_equal(dir_read(&v, ram_arena_base(r), ram_arena_size(r), test_key(0), buf,
				  100, &len), -ENOBUFS);
	assert_int_equal(len, BLK);
	/* Removed: gone at once, pinned or not. */
	assert_int_equal(ram_remove(r, test_key(1)), 0);
	assert_int_equal(in_dir(r, &v, 1), 0);
	assert_int_equal(ram_pin(r, test_key(2), BLK, &ref, &off, &len), 0);
	assert_int_equal(ram_remove(r, test_key(2)), 0);
	assert_int_equal(in_dir(r, &v, 2), 0);
	ram_unpin(r, ref);
	/* Evicted (its spill done), removed while spilled, leased while
	 * spilled: the directory follows what RAM holds. */
	put_blocks(r, 12, 15);
	l.remove_key = test_key(0);
	l.lease_key = test_key(3);
	assert_true(ram_evict_to_low(r) > 0);
	assert_int_equal(l.remove_rc, 0);
	assert_int_equal(l.lease_rc, 1);
	assert_true(ram_counter(r, "evictions") > 0);
	for (uint64_t i = 0; i < 15; i++)
		assert_int_equal(in_dir(r, &v, i), has_block(r, i));
	assert_int_equal(in_dir(r, &v, 0), 0);
	assert_int_equal(in_dir(r, &v, 3), 1);
	/* Slots: a committed one and a promoted one are published. */
	int64_t o = ram_slot_alloc(r, BLK, 1);
	assert_true(o >= 0);
	fill_block(test_key(20), (char *)ram_arena_base(r) + o, BLK);
	assert_int_equal(ram_slot_publish(r, test_key(20), (uint64_t)o, BLK, NULL), 0);
	assert_int_equal(in_dir(r, &v, 20), 1);
	uint64_t gen = ram_gen(r, test_key(21));
	o = ram_slot_alloc(r, BLK, 1);
	assert_true(o >= 0);
	fill_block(test_key(21), (char *)ram_arena_base(r) + o, BLK);
	assert_int_equal(ram_slot_promote(r, test_key(21), (uint64_t)o, BLK, gen, NULL, &ref), 0);
	assert_int_equal(in_dir(r, &v, 21), 1);
	ram_unpin(r, ref);
	assert_int_equal(ram_counter(r, "directory_blocks"), ram_counter(r, "objects"));
	/* Closed: nothing is read through it any more. */
	ram_close(r);
	assert_int_equal(dir_read(&v, (const char *)buf, sizeof(buf), test_key(20), buf,
				  sizeof(buf), &len), -ENOENT);
	dir_view_unmap(&v);
	config_free(&cfg);
}

/* A table too small for every block: those left out are simply not named. */
static void directory_full_leaves_blocks_out(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r;
	struct dir_view v;
	size_t dlen = 0;

	(void)state;
	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"1MiB\", \"mlock\": false},"
				      " \"local\": {\"socket\": \"/nonexistent/s\","
				      " \"directory\": 3}}", &cfg), 0);
	assert_int_equal(ram_open_cfg(&cfg, NULL, NULL, NULL, &r), 0);
	int fd = ram_dir_memfd(r, &dlen);
	assert_int_equal(dir_view_map(fd, dlen, &v), 0);
	assert_int_equal(ram_counter(r, "directory_slots"), DIR_WINDOW);
	put_blocks(r, 0, 12);
	unsigned named = 0;
	for (uint64_t i = 0; i < 12; i++)
		named += (unsigned)in_dir(r, &v, i);
	assert_int_equal(named, DIR_WINDOW);
	assert_int_equal(ram_counter(r, "directory_full"), 12 - DIR_WINDOW);
	for (uint64_t i = 0; i < 12; i++)
		assert_int_equal(has_block(r, i), 1);
	ram_close(r);
	dir_view_unmap(&v);
	config_free(&cfg);
}

/* --- what a lease lasts -------------------------------------------------- */

/* The deadline of key's lease as the entry holds it; 0: none (or absent). */
static uint64_t lease_of(struct ram_tier *r, kvt_key key)
{
	struct shard *sh = shard_of(r, key);
	uint64_t until = 0;

	pthread_mutex_lock(&sh->lock);
	uint32_t id = shard_find(sh, key);
	if (id != IDX_NONE)
		until = ent_lease(shard_ent(sh, id));
	pthread_mutex_unlock(&sh->lock);
	return until;
}

/*
 * Whether key 0's lease is still counted (the count collects lapsed leases
 * first). *sure: 1 when the answer was taken wholly before the time
 * `before`, so that a lease lasting at least until then must be counted.
 */
static int lease_counted(struct ram_tier *r, uint64_t before, int *sure)
{
	int counted = ram_counter(r, "leased_objects") == 1;

	*sure = kvt_now_ns() < before;
	return counted;
}

/* Polls until `until` has passed: the lease must be counted throughout.
 * Returns how many polls were sure of it. */
static int counted_until(struct ram_tier *r, uint64_t until)
{
	int checked = 0, sure;

	while (kvt_now_ns() < until) {
		int counted = lease_counted(r, until, &sure);
		if (sure) {
			assert_true(counted);
			checked++;
		}
		sleep_ms(2);
	}
	return checked;
}

static void lease_lasts_as_asked_rounded_up_to_the_grain(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r = open_small(&cfg, NULL);
	uint64_t d, u;

	(void)state;
	put_blocks(r, 0, 2);
	/* stored rounded up, by less than a grain */
	d = kvt_now_ns() + 40000000;
	assert_int_equal(ram_lookup(r, test_key(0), 1, d), 1);
	u = lease_of(r, test_key(0));
	assert_true(u >= d && u < d + RAM_LEASE_GRAIN_NS);
	assert_int_equal(u % RAM_LEASE_GRAIN_NS, 0);
	/* in force up to the deadline asked, lapsed by itself a grain after */
	assert_true(counted_until(r, d) > 0);
	while (kvt_now_ns() < d + RAM_LEASE_GRAIN_NS)
		sleep_ms(1);
	assert_int_equal(ram_counter(r, "leased_objects"), 0);
	assert_int_equal(ram_counter(r, "leased_bytes"), 0);
	assert_int_equal(ram_counter(r, "lease_expiries"), 1);
	assert_int_equal(lease_of(r, test_key(0)), 0);

	/* a renewal extends: in force until its own deadline */
	d = kvt_now_ns() + 20000000;
	assert_int_equal(ram_lookup(r, test_key(0), 1, d), 1);
	uint64_t d2 = d + 40000000;
	assert_int_equal(ram_lookup(r, test_key(0), 1, d2), 1);
	assert_true(lease_of(r, test_key(0)) >= d2);
	assert_true(counted_until(r, d2) > 0);

	/* a renewal asking less never shortens it */
	d = kvt_now_ns() + 60000000;
	assert_int_equal(ram_lookup(r, test_key(0), 1, d), 1);
	u = lease_of(r, test_key(0));
	assert_int_equal(ram_lookup(r, test_key(0), 1, kvt_now_ns() + 1000000), 1);
	assert_int_equal(ram_lookup(r, test_key(0), 1, 1), 1);
	assert_int_equal(lease_of(r, test_key(0)), u);
	assert_true(counted_until(r, d) > 0);

	/* a release ends it at once, whatever its deadline */
	assert_int_equal(ram_lookup(r, test_key(0), 1, kvt_now_ns() + FAR_NS), 1);
	assert_int_equal(ram_release(r, test_key(0)), 1);
	assert_int_equal(lease_of(r, test_key(0)), 0);
	assert_int_equal(ram_counter(r, "leased_objects"), 0);
	assert_int_equal(ram_release(r, test_key(0)), 0);
	/* a deadline too near the end of time to round is kept as asked */
	assert_int_equal(ram_lookup(r, test_key(1), 1, UINT64_MAX - 5), 1);
	assert_int_equal(lease_of(r, test_key(1)), UINT64_MAX - 5);
	ram_close(r);
	config_free(&cfg);
}

/* --- leases on several threads ------------------------------------------- */

#define SHARE_KEYS 64u      /* keys every thread leases */
#define SHARE_BLK 4096      /* bytes of each */
#define SHARE_ROUNDS 400

struct share {
	struct ram_tier *r;
	unsigned seed;
	_Atomic int *stop;
	_Atomic uint64_t *asked; /* per key: the latest deadline granted so far */
	int shorter;            /* a lease found shorter than its lookup asked */
	int bad;                /* an impossible return value */
	int refused;            /* -ENOSPC: past the cap */
	long granted;
};

/* Raises *a to at least v. */
static void raise_to(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t cur = atomic_load(a);

	while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
		;
}

/* Leases the shared keys with deadlines spread over several grains, so
 * that threads ask for both earlier and later deadlines than the one in
 * force; a lease must stay in force until at least the latest deadline
 * granted for its key by any thread so far (no release, no expiry here). */
static void *share_leases(void *arg)
{
	struct share *x = arg;
	uint64_t rnd = x->seed;

	for (int round = 0; round < SHARE_ROUNDS; round++) {
		for (unsigned k = 0; k < SHARE_KEYS; k++) {
			unsigned i = (k * 13 + x->seed) % SHARE_KEYS;
			kvt_key key = test_key(i);
			rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
			uint64_t d = kvt_now_ns() + FAR_NS + (rnd >> 40) % (8 * RAM_LEASE_GRAIN_NS);
			uint64_t before = atomic_load(&x->asked[i]);

			if (before && lease_of(x->r, key) < before)
				x->shorter++;
			int rc = ram_lookup(x->r, key, 1, d);

			if (rc == 1) {
				x->granted++;
				if (lease_of(x->r, key) < d)
					x->shorter++;
				raise_to(&x->asked[i], d);
			} else if (rc == -ENOSPC) {
				x->refused++;
			} else {
				x->bad++;
			}
		}
	}
	return NULL;
}

/* Puts and removes other keys of the same shards, so that lookups find
 * slots moving and take the locked path too; and counts leased bytes
 * against the cap all along. */
static void *share_churn(void *arg)
{
	struct share *x = arg;
	uint8_t buf[4096];

	for (unsigned n = 0; !*x->stop; n++) {
		kvt_key k = test_key(500000 + n % 256);
		if (n / 256 % 2 == 0) {
			fill_block(k, buf, sizeof(buf));
			int rc = ram_put(x->r, k, buf, sizeof(buf));
			if (rc != 0 && rc != 1)
				x->bad++;
		} else if (ram_remove(x->r, k) != 0) {
			x->bad++;
		}
		if (n % 64 == 0 && ram_counter(x->r, "leased_bytes") >
				   ram_counter(x->r, "lease_cap_bytes"))
			x->bad++;
	}
	return NULL;
}

/* Three threads leasing the same keys, lock-free and locked paths mixed. */
static void run_shared_leases(struct ram_tier *r, struct share *x)
{
	_Atomic int stop = 0;
	_Atomic uint64_t asked[SHARE_KEYS] = { 0 };
	struct share churn = { .r = r, .stop = &stop };
	pthread_t t[3], c;

	for (unsigned i = 0; i < 3; i++) {
		x[i] = (struct share){ .r = r, .seed = 7 * i + 1, .stop = &stop,
				       .asked = asked };
		assert_int_equal(pthread_create(&t[i], NULL, share_leases, &x[i]), 0);
	}
	assert_int_equal(pthread_create(&c, NULL, share_churn, &churn), 0);
	for (unsigned i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	stop = 1;
	pthread_join(c, NULL);
	assert_int_equal(churn.bad, 0);
}

/* A tier of cfg_text holding the SHARE_KEYS blocks the threads lease. */
static struct ram_tier *open_shared(const char *cfg_text, struct kvt_config *cfg)
{
	struct ram_tier *r;
	uint8_t buf[SHARE_BLK];

	assert_int_equal(config_parse(cfg_text, cfg), 0);
	assert_int_equal(ram_open_cfg(cfg, NULL, NULL, NULL, &r), 0);
	for (uint64_t i = 0; i < SHARE_KEYS; i++) {
		fill_block(test_key(i), buf, sizeof(buf));
		assert_int_equal(ram_put(r, test_key(i), buf, sizeof(buf)), 0);
	}
	return r;
}

static void renewals_on_many_threads_never_shorten_a_lease(void **state)
{
	static const char *const cfg_text =
		"{\"ram\": {\"capacity\": \"32MiB\", \"lease_cap\": 1.0, \"mlock\": false}}";
	struct kvt_config cfg;
	struct ram_tier *r = open_shared(cfg_text, &cfg);
	struct share x[3];

	(void)state;
	run_shared_leases(r, x);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(x[i].shorter, 0);
		assert_int_equal(x[i].bad, 0);
		assert_int_equal(x[i].refused, 0);
		assert_int_equal(x[i].granted, SHARE_ROUNDS * SHARE_KEYS);
	}
	/* each key's bytes counted once, however many threads renewed it */
	assert_int_equal(ram_counter(r, "leased_objects"), SHARE_KEYS);
	assert_int_equal(ram_counter(r, "leased_bytes"), SHARE_KEYS * SHARE_BLK);
	assert_int_equal(ram_counter(r, "leases"), 3 * SHARE_ROUNDS * SHARE_KEYS);
	ram_close(r);
	config_free(&cfg);
}

static void lease_cap_holds_across_threads(void **state)
{
	/* 32 MiB of RAM, leases up to 128 KiB: 32 of the 64 blocks of 4 KiB */
	static const char *const cfg_text =
		"{\"ram\": {\"capacity\": \"32MiB\", \"lease_cap\": 0.00390625, \"mlock\": false}}";
	struct kvt_config cfg;
	struct ram_tier *r = open_shared(cfg_text, &cfg);
	struct share x[3];
	long refused = 0;

	(void)state;
	assert_int_equal(ram_counter(r, "lease_cap_bytes"), 32 * SHARE_BLK);
	run_shared_leases(r, x);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(x[i].shorter, 0);
		assert_int_equal(x[i].bad, 0);
		refused += x[i].refused;
	}
	assert_true(refused > 0);
	/* exactly as many keys hold a lease as the books say, within the cap */
	long held = 0;
	for (uint64_t i = 0; i < SHARE_KEYS; i++)
		held += lease_of(r, test_key(i)) != 0;
	assert_int_equal(held, 32);
	assert_int_equal(ram_counter(r, "leased_objects"), held);
	assert_int_equal(ram_counter(r, "leased_bytes"), held * SHARE_BLK);
	ram_close(r);
	config_free(&cfg);
}

/* --- lookups without the lock, racing every writer ----------------------- */

#define RACE_STABLE 512u    /* keys stored throughout */
#define RACE_CHURN 2048u    /* keys put and removed over and over */
#define RACE_ROUNDS 300

struct race {
	struct ram_tier *r;
	_Atomic int stop;
	_Atomic int misses;     /* a stable key reported absent: must stay 0 */
	_Atomic int bad;        /* an impossible return value */
	unsigned seed;
};

static void *race_lookups(void *arg)
{
	struct race *x = arg;
	unsigned off = x->seed;

	for (int round = 0; round < RACE_ROUNDS; round++) {
		uint64_t now = kvt_now_ns();
		for (unsigned k = 0; k < 64; k++) {
			uint64_t i = (off + k * 7 + (unsigned)round) % RACE_STABLE;
			/* leases of 0.2 to 2 ms: they lapse while others renew them */
			int rc = ram_lookup(x->r, test_key(i), 1, now + 200000 + (i % 10) * 200000);
			if (rc == 0)
				x->misses++;
			else if (rc != 1)
				x->bad++;
			if (ram_lookup(x->r, test_key(i), 0, 0) != 1)
				x->misses++;
			rc = ram_lookup(x->r, test_key(100000 + (i * 5 + (unsigned)round) % RACE_CHURN),
					(int)(k & 1), now + 1000000);
			if (rc != 0 && rc != 1)
				x->bad++;
		}
	}
	return NULL;
}

static void *race_churn(void *arg)
{
	struct race *x = arg;
	uint8_t buf[4096];

	for (unsigned n = 0; !x->stop; n++) {
		kvt_key k = test_key(100000 + n % RACE_CHURN);
		if (n / RACE_CHURN % 2 == 0) {
			fill_block(k, buf, sizeof(buf));
			int rc = ram_put(x->r, k, buf, sizeof(buf));
			if (rc != 0 && rc != 1)
				x->bad++;
			if (n % 3 == 0 && ram_lookup(x->r, k, 1, kvt_now_ns() + 1000000) < 0)
				x->bad++;
		} else {
			int rc = ram_remove(x->r, k);
			if (rc != 0 && rc != -ENOENT)
				x->bad++;
		}
	}
	return NULL;
}

static void *race_expiry(void *arg)
{
	struct race *x = arg;

	for (unsigned n = 0; !x->stop; n++) {
		(void)ram_counter(x->r, "leased_bytes"); /* collects lapsed leases */
		(void)ram_release(x->r, test_key(n % RACE_STABLE));
	}
	return NULL;
}

static void lookups_without_lock_race_every_writer(void **state)
{
	static const char *const cfg_text =
		"{\"ram\": {\"capacity\": \"32MiB\", \"lease_cap\": 1.0, \"mlock\": false}}";
	struct kvt_config cfg;
	struct ram_tier *r;
	struct race x = { 0 };
	pthread_t look[2], churn, expiry;
	uint8_t buf[4096];

	(void)state;
	assert_int_equal(config_parse(cfg_text, &cfg), 0);
	assert_int_equal(ram_open_cfg(&cfg, NULL, NULL, NULL, &r), 0);
	x.r = r;
	for (uint64_t i = 0; i < RACE_STABLE; i++) {
		fill_block(test_key(i), buf, sizeof(buf));
		assert_int_equal(ram_put(r, test_key(i), buf, sizeof(buf)), 0);
	}
	struct race y = x;
	y.seed = 1;
	x.seed = 100;
	assert_int_equal(pthread_create(&churn, NULL, race_churn, &x), 0);
	assert_int_equal(pthread_create(&expiry, NULL, race_expiry, &x), 0);
	assert_int_equal(pthread_create(&look[0], NULL, race_lookups, &x), 0);
	assert_int_equal(pthread_create(&look[1], NULL, race_lookups, &y), 0);
	pthread_join(look[0], NULL);
	pthread_join(look[1], NULL);
	x.stop = 1;
	pthread_join(churn, NULL);
	pthread_join(expiry, NULL);
	assert_int_equal(x.misses + y.misses, 0);
	assert_int_equal(x.bad + y.bad, 0);
	assert_true(ram_counter(r, "leases") > 0);

	/* Every lease ends; the books come back to zero exactly. */
	for (uint64_t i = 0; i < RACE_STABLE; i++) {
		size_t len = 0;
		(void)ram_release(r, test_key(i));
		assert_int_equal(ram_get(r, test_key(i), buf, sizeof(buf), &len), 0);
		assert_int_equal(check_block(test_key(i), buf, len), 1);
	}
	for (uint64_t i = 0; i < RACE_CHURN; i++)
		(void)ram_remove(r, test_key(100000 + i));
	assert_int_equal(ram_counter(r, "leased_bytes"), 0);
	assert_int_equal(ram_counter(r, "leased_objects"), 0);
	assert_int_equal(ram_counter(r, "objects"), RACE_STABLE);
	assert_droppable_books(r);
	ram_close(r);
	config_free(&cfg);
}

/* The stats say how much of the arena 2 MiB pages map (-1: unknown). */
static void stats_report_huge_page_bytes(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r = open_small(&cfg, NULL);
	long long huge = ram_counter(r, "huge_page_bytes");

	(void)state;
	assert_true(huge >= -1 && huge <= ram_counter(r, "capacity"));
	assert_true(huge <= 0 || huge % (2 << 20) == 0);
	ram_close(r);
	config_free(&cfg);
}

static void visit_hands_over_pinned_blocks(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r;
	uint8_t buf[20000];
	size_t len = 0;

	(void)state;
	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"4MiB\"}}", &cfg), 0);
	assert_int_equal(ram_open_cfg(&cfg, NULL, NULL, NULL, &r), 0);
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

/* --- the checksum kept with each block ------------------------------------ */

/* The checksum kept with key's block (ram_pin_sum), and where it lies. */
static uint64_t kept_sum(struct ram_tier *r, kvt_key key, uint8_t **at, size_t *len)
{
	uint64_t ref, off, sum = 0;

	assert_int_equal(ram_pin_sum(r, key, SIZE_MAX, &ref, &off, len, &sum), 0);
	*at = (uint8_t *)ram_arena_base(r) + off;
	ram_unpin(r, ref);
	return sum;
}

/*
 * A block's bytes changed in the arena after it became visible (a fault,
 * a stray write): the checksum handed out stays the one of the bytes it
 * was made of, through ram_pin_sum and ram_visit alike, so a receiver that
 * verifies finds the damage. Returns that checksum.
 */
static uint64_t sum_survives_damage(struct ram_tier *r, kvt_key key, size_t want)
{
	uint8_t *at;
	size_t len = 0;
	uint64_t first = kept_sum(r, key, &at, &len);

	assert_int_equal(len, want);
	assert_true(check_block(key, at, len));
	assert_true(first == kvt_checksum(at, len));
	at[len / 2] ^= 0x5a;
	assert_true(kept_sum(r, key, &at, &len) == first);
	struct visit v = { .r = r, .key = key, .want = want };
	assert_int_equal(ram_visit(r, key, want, check_in_place, &v, &len), 7);
	assert_false(v.ok); /* the damaged bytes do not match it */
	assert_true(v.sum == first);
	at[len / 2] ^= 0x5a;
	assert_int_equal(ram_visit(r, key, want, check_in_place, &v, &len), 7);
	assert_true(v.ok);
	return first;
}

/*
 * Every way a block enters the RAM tier keeps the checksum of its bytes:
 * a put (computed from the arena at the first ask, then kept), a promotion
 * (the sum it was verified against, kept at once: damage before the first
 * ask does not change it), a published slot with and without a sum, and a
 * slot promoted in place. An entry reused for another key never hands out
 * the checksum of the block it held before.
 */
static void every_block_keeps_its_checksum(void **state)
{
	struct kvt_config cfg;
	struct ram_tier *r;
	enum { LEN = 100000 };
	uint8_t buf[LEN], *at;
	size_t len;

	(void)state;
	assert_int_equal(config_parse("{\"ram\": {\"capacity\": \"4MiB\"}}", &cfg), 0);
	assert_int_equal(ram_open_cfg(&cfg, NULL, NULL, NULL, &r), 0);

	/* put: nothing kept until asked; a plain get does not compute it */
	fill_block(test_key(1), buf, LEN);
	assert_int_equal(ram_put(r, test_key(1), buf, LEN), 0);
	assert_int_equal(ram_get(r, test_key(1), buf, LEN, &len), 0);
	uint64_t want = kvt_checksum(buf, LEN);
	assert_true(sum_survives_damage(r, test_key(1), LEN) == want);

	/* promotions, from a buffer and in place, and a publish with a
	 * sum: kept as given, before anyone asks */
	uint64_t ref, gen;
	for (uint64_t k = 2; k <= 4; k++) {
		kvt_key key = test_key(k);
		fill_block(key, buf, LEN);
		uint64_t sum = kvt_checksum(buf, LEN);
		gen = ram_gen(r, key);
		if (k == 2) {
			assert_int_equal(ram_promote(r, key, buf, LEN, gen, &sum), 0);
		} else {
			int64_t off = ram_slot_alloc(r, LEN, 1);
			assert_true(off >= 0);
			memcpy((uint8_t *)ram_arena_base(r) + off, buf, LEN);
			if (k == 3)
				assert_int_equal(ram_slot_publish(r, key, (uint64_t)off, LEN,
								  &sum), 0);
			else
				assert_int_equal(ram_slot_promote(r, key, (uint64_t)off, LEN,
								  gen, &sum, &ref), 0);
		}
		uint64_t off2, ref2;
		assert_int_equal(ram_pin(r, key, LEN, &ref2, &off2, &len), 0);
		at = (uint8_t *)ram_arena_base(r) + off2;
		at[7] ^= 1; /* damaged before the first ask */
		assert_true(kept_sum(r, key, &at, &len) == sum);
		at[7] ^= 1;
		ram_unpin(r, ref2);
		assert_true(sum_survives_damage(r, key, LEN) == sum);
		if (k == 4)
			ram_unpin(r, ref);
	}

	/* a publish without a sum: computed at the first ask */
	int64_t off = ram_slot_alloc(r, LEN, 1);
	assert_true(off >= 0);
	fill_block(test_key(5), (uint8_t *)ram_arena_base(r) + off, LEN);
	assert_int_equal(ram_slot_publish(r, test_key(5), (uint64_t)off, LEN, NULL), 0);
	fill_block(test_key(5), buf, LEN);
	assert_true(sum_survives_damage(r, test_key(5), LEN) == kvt_checksum(buf, LEN));

	/* entries freed and taken again by other keys, kept sums and all */
	for (uint64_t k = 1; k <= 5; k++)
		assert_int_equal(ram_remove(r, test_key(k)), 0);
	for (uint64_t k = 11; k <= 15; k++) {
		fill_block(test_key(k), buf, LEN);
		assert_int_equal(ram_put(r, test_key(k), buf, LEN), 0);
		assert_true(kept_sum(r, test_key(k), &at, &len) == kvt_checksum(buf, LEN));
	}
	ram_close(r);
	config_free(&cfg);
}

/* A spill that finishes its blocks one by one, in order (ram_spill_done),
 * as a disk tier telling of each write does, and a fit that puts the
 * chunk's blocks as room appears. */
struct room_probe {
	struct ram_tier *r;
	size_t spills, victims, finished, nextra;
	kvt_key extra_keys[4];
	uint64_t next, to;        /* the chunk's blocks not put yet */
	unsigned fits;
	size_t finished_at_first_fit;
	size_t with_sum;          /* victims that came with a kept checksum */
};

static void room_spill(void *arg, struct ram_spill *sp)
{
	struct room_probe *p = arg;

	p->spills++;
	p->victims += sp->n;
	for (size_t j = 0; j < sp->nextra && p->nextra < 4; j++) {
		p->extra_keys[p->nextra++] = sp->extra[j].key;
		sp->extra[j].result = 0;
	}
	for (size_t i = 0; i < sp->n; i++) {
		assert_int_equal(check_block(sp->ops[i].key, sp->ops[i].buf, sp->ops[i].len), 1);
		/* a block put summed comes with its kept checksum */
		if (sp->has_sum[i]) {
			p->with_sum++;
			assert_true(sp->sums[i] == kvt_checksum(sp->ops[i].buf, sp->ops[i].len));
		}
		sp->ops[i].result = 0;
		p->finished++;
		ram_spill_done(sp, i);
		ram_spill_done(sp, i); /* a second time does nothing */
	}
}

static uint64_t room_fit(void *arg)
{
	struct room_probe *p = arg;
	uint8_t buf[BLK];
	uint64_t added = 0;

	if (p->fits++ == 0)
		p->finished_at_first_fit = p->finished;
	while (p->next < p->to) {
		fill_block(test_key(p->next), buf, sizeof(buf));
		if (ram_put_summed(p->r, test_key(p->next), buf, sizeof(buf), 0) != 0)
			break;
		p->next++;
		added += BLK;
	}
	return added;
}

/* ram_make_room_with: the spill gets the extra blocks with its first batch
 * (handed over); each victim is finished as soon as the spill names it,
 * and fit puts the chunk's blocks into the room freed while the rest of
 * the spill is still out; what fit put needs no more room, so no more is
 * evicted than the chunk needs. With nothing to evict, the extra blocks
 * stay with the caller and fit is not called. A block put summed
 * (ram_put_summed) is spilled with the checksum kept as it was copied. */
static void make_room_fits_blocks_as_spills_finish(void **st)
{
	(void)st;
	struct kvt_config cfg;
	struct ram_tier *r;
	struct room_probe p = { 0 };
	uint8_t xb[2][4096];
	kvt_op extra[2] = { { test_key(900), xb[0], sizeof(xb[0]), -1 },
			    { test_key(901), xb[1], sizeof(xb[1]), -1 } };

	assert_int_equal(config_parse(small_ram, &cfg), 0);
	assert_int_equal(ram_open_cfg(&cfg, room_spill, NULL, &p, &r), 0);
	p.r = r;
	/* nothing to evict: the extra blocks stay, fit is not called */
	struct ram_room room = { room_fit, &p, extra, 2 };
	assert_int_equal(ram_make_room_with(r, 4 * BLK, &room), 0);
	assert_int_equal(room.nextra, 2);
	assert_int_equal(p.fits, 0);
	assert_int_equal(p.spills, 0);

	put_blocks(r, 0, 12); /* at the high watermark, 12 blocks */
	p.next = 100;
	p.to = 108;
	assert_int_equal(ram_make_room_with(r, 8 * BLK, &room), 8);
	assert_int_equal(room.nextra, 0);
	assert_null(room.extra);
	assert_int_equal(p.nextra, 2);
	assert_true(kvt_key_eq(p.extra_keys[0], test_key(900)));
	assert_int_equal(extra[0].result, 0);
	assert_int_equal(extra[1].result, 0);
	assert_int_equal(p.victims, 8);
	assert_int_equal(p.spills, 1);            /* one batch for the chunk */
	assert_int_equal(p.fits, 8);              /* once per victim finished */
	assert_int_equal(p.finished_at_first_fit, 1);
	assert_int_equal(p.next, 108);            /* all of the chunk put */
	assert_int_equal(ram_counter(r, "evictions"), 8);
	assert_int_equal(ram_counter(r, "spills"), 8);
	for (uint64_t i = 0; i < 8; i++)
		assert_int_equal(has_block(r, i), 0);
	for (uint64_t i = 8; i < 12; i++)
		assert_int_equal(has_block(r, i), 1);
	for (uint64_t i = 100; i < 108; i++)
		assert_int_equal(has_block(r, i), 1);
	assert_int_equal(p.with_sum, 0); /* put by ram_put: no sum kept */

	/* the next room evicts 8..11 (no sum) and 100..103, put summed, whose
	 * kept checksums come with them */
	p.next = 200;
	p.to = 208;
	assert_int_equal(ram_make_room_with(r, 8 * BLK, NULL), 8);
	assert_int_equal(p.with_sum, 4);
	uint64_t ref, off, sum;
	size_t len;
	assert_int_equal(ram_pin_sum(r, test_key(104), BLK, &ref, &off, &len, &sum), 0);
	ram_unpin(r, ref);
	uint8_t buf[BLK];
	fill_block(test_key(104), buf, sizeof(buf));
	assert_true(sum == kvt_checksum(buf, sizeof(buf)));
	ram_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lease_cap_bounds_leased_bytes),
		cmocka_unit_test(put_refused_when_only_leased_blocks_remain),
		cmocka_unit_test(put_refused_when_leases_would_drop_it_at_once),
		cmocka_unit_test(put_refused_when_pins_would_drop_it_at_once),
		cmocka_unit_test(watermarks_evict_least_recent_down_to_low),
		cmocka_unit_test(lease_taken_during_spill_keeps_block),
		cmocka_unit_test(remove_during_spill_takes_spilled_copy_back),
		cmocka_unit_test(visit_hands_over_pinned_blocks),
		cmocka_unit_test(every_block_keeps_its_checksum),
		cmocka_unit_test(stats_report_huge_page_bytes),
		cmocka_unit_test(lookups_without_lock_race_every_writer),
		cmocka_unit_test(directory_names_exactly_the_blocks_in_ram),
		cmocka_unit_test(directory_full_leaves_blocks_out),
		cmocka_unit_test(lease_lasts_as_asked_rounded_up_to_the_grain),
		cmocka_unit_test(renewals_on_many_threads_never_shorten_a_lease),
		cmocka_unit_test(lease_cap_holds_across_threads),
		cmocka_unit_test(make_room_fits_blocks_as_spills_finish),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
