/*
 * test_peer_faults.c - the peer tier when a member fails the loader: a
 * restarted, a dead, a silent and a lying peer (the fake member b of
 * peer_util.h: short, bad checksum, malformed, dying mid-transfer, blocks
 * in pieces), callers queued behind a failure, a failed open, and
 * connections the member closes across or late into a request.
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

/* Member b's (index 1) requests counter in a's stats: a request that a
 * member marked down refuses at once is not one. */
static long long b_requests(kvt_store *a)
{
	char *buf = NULL;
	int n = kvt_stats_json(a, NULL, 0);
	assert_true(n > 0);
	buf = malloc((size_t)n + 4096);
	assert_non_null(buf);
	assert_true(kvt_stats_json(a, buf, (size_t)n + 4096) > 0);
	json_t *j = json_loads(buf, 0, NULL);
	free(buf);
	assert_non_null(j);
	json_t *m = json_array_get(json_object_get(json_object_get(j, "peer"), "members"), 1);
	assert_non_null(m);
	assert_string_equal(json_string_value(json_object_get(m, "name")), "b");
	long long r = json_integer_value(json_object_get(m, "requests"));
	json_decref(j);
	return r;
}

/* --- failing peers ---------------------------------------------------------- */

/* A member that restarts is reached again at once: the connection it
 * closed is noticed before the next request, not failed on. */
static void test_restarted_peer_is_redialled(void **state)
{
	struct fx *f = *state;
	kvt_key kb[2];
	char st[8192];

	open_pair(f);
	owned_keys(1, 70000, kb, 2);
	store_put_block(f->b, kb[0], 9000);
	assert_int_equal(store_get_block(f->a, kb[0], 9000), 0); /* connected */
	kvt_close(f->b);
	f->b = node("b", f->pa, f->pb);
	store_put_block(f->b, kb[1], 9000);
	/* b's end of a's connection is gone; the get must dial again */
	assert_int_equal(store_get_block(f->a, kb[1], 9000), 0);
	assert_true(kvt_stats_json(f->a, st, sizeof(st)) > 0);
	assert_non_null(strstr(st, "\"failures\":0"));
}

static void test_dead_peer(void **state)
{
	struct fx *f = *state;
	kvt_key kb[3];
	char buf[4096];
	size_t len, found = 99;
	f->a = node("a", f->pa, f->pb); /* nothing listens on pb */
	owned_keys(1, 40000, kb, 3);
	long long t = now_ms();
	int rc = kvt_get(f->a, kb[0], buf, sizeof(buf), &len);
	if (rc >= 0 || (t = now_ms() - t) > CONNECT_MS + 1000)
		fail_msg("get from a dead owner: %d after %lld ms", rc, t);
	/* marked down: refused at once, nothing asked (the time bound only
	 * catches a wait for a connect, with room for a loaded machine) */
	long long asked = b_requests(f->a);
	t = now_ms();
	rc = kvt_get(f->a, kb[1], buf, sizeof(buf), &len);
	if (rc >= 0 || (t = now_ms() - t) >= CONNECT_MS)
		fail_msg("get from an owner marked down: %d after %lld ms", rc, t);
	assert_int_equal(b_requests(f->a), asked);
	t = now_ms();
	store_put_block(f->a, kb[2], 4096);
	assert_true(now_ms() - t < CONNECT_MS + 1000);
	assert_int_equal(store_get_block(f->a, kb[2], 4096), 0);
	assert_int_equal(kvt_lookup(f->a, kb, 2, 0, &found), 0);
	assert_int_equal(found, 0);

	/* Once b is up and down_ms has passed, a asks it again. */
	f->b = node("b", f->pa, f->pb);
	store_put_block(f->b, kb[0], 4096);
	long long end = now_ms() + DOWN_MS + 3000;
	while ((rc = store_get_block(f->a, kb[0], 4096)) != 0) {
		if (now_ms() > end)
			fail_msg("a never asked b again: %s", kvt_strerror(rc));
		usleep(20000);
	}
}

static void test_silent_peer(void **state)
{
	struct fx *f = *state;
	kvt_key kb[2];
	char buf[4096];
	size_t len;
	f->fake = fake_start(f->pb, FAKE_SILENT);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 41000, kb, 2);
	long long t = now_ms();
	int rc = kvt_get(f->a, kb[0], buf, sizeof(buf), &len);
	if (rc >= 0 || (t = now_ms() - t) > CONNECT_MS + REQUEST_MS + 1000)
		fail_msg("get from a silent owner: %d after %lld ms", rc, t);
	assert_true(atomic_load(&f->fake->conns) >= 1);
	long long asked = b_requests(f->a);
	int conns = atomic_load(&f->fake->conns);
	t = now_ms();
	rc = kvt_get(f->a, kb[1], buf, sizeof(buf), &len);
	if (rc >= 0 || (t = now_ms() - t) >= REQUEST_MS / 2)
		fail_msg("get from a silent owner marked down: %d after %lld ms", rc, t);
	assert_int_equal(b_requests(f->a), asked);
	assert_int_equal(atomic_load(&f->fake->conns), conns);
	t = now_ms();
	store_put_block(f->a, kb[1], 4096);
	if ((t = now_ms() - t) > CONNECT_MS + REQUEST_MS + 1000)
		fail_msg("put with a silent owner took %lld ms", t);
	assert_int_equal(store_get_block(f->a, kb[1], 4096), 0);
}

/* a's get of a key b owns, answered by a fake b in mode; kvt_get's result. */
/* How long the get of the last get_from_fake took (ms). */
static long long fake_get_ms;

static int get_from_fake(struct fx *f, enum fake_mode mode)
{
	void *buf = malloc(FAKE_LEN);
	kvt_key kb, ka;
	size_t len = 0;
	assert_non_null(buf);
	f->fake = fake_start(f->pb, mode);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 42000, &kb, 1);
	owned_keys(0, 42000, &ka, 1);
	long long t = now_ms();
	int rc = kvt_get(f->a, kb, buf, FAKE_LEN, &len);
	if ((t = fake_get_ms = now_ms() - t) > CONNECT_MS + REQUEST_MS + 1000)
		fail_msg("get from the fake took %lld ms", t);
	if (rc == 0) {
		assert_int_equal(len, FAKE_LEN);
		assert_true(check_block(kb, buf, FAKE_LEN));
	}
	free(buf);
	assert_true(atomic_load(&f->fake->hellos) >= 1);
	assert_true(atomic_load(&f->fake->gets) >= 1);
	store_put_block(f->a, ka, 4096); /* a still works */
	assert_int_equal(store_get_block(f->a, ka, 4096), 0);
	return rc;
}

static void test_fake_peer_answers(void **state)
{
	int rc = get_from_fake(*state, FAKE_GOOD);
	if (rc)
		fail_msg("get from a well-behaved fake b: %s (%s)", kvt_strerror(rc), kvt_last_error());
}

static void test_peer_dies_mid_transfer(void **state)
{
	assert_true(get_from_fake(*state, FAKE_SHORT) < 0);
	/* the close is seen when it comes, not at the request's deadline
	 * (a block is received waking only for large pieces of it) */
	if (fake_get_ms >= REQUEST_MS)
		fail_msg("a member that closed mid-block took %lld ms to notice", fake_get_ms);
}

/*
 * Blocks that arrive in pieces smaller than what a block's receive waits
 * for (SO_RCVLOWAT) with pauses between them load whole; after them a
 * small answer on the same connection (a lookup's) is read at once, not at
 * the deadline: the receive's low mark is put back after each block.
 */
static void test_blocks_arriving_in_pieces(void **state)
{
	struct fx *f = *state;
	kvt_key kb[3];
	kvt_op ops[3];
	size_t found = 0;

	f->fake = fake_start(f->pb, FAKE_DRIP);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 43000, kb, 3);
	for (int i = 0; i < 3; i++) {
		ops[i] = (kvt_op){ .key = kb[i], .len = FAKE_LEN, .result = 1 };
		assert_non_null(ops[i].buf = malloc(FAKE_LEN));
	}
	assert_int_equal(kvt_get_batch(f->a, ops, 3), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_true(check_block(kb[i], ops[i].buf, FAKE_LEN));
		free(ops[i].buf);
	}
	long long t = now_ms();
	assert_int_equal(kvt_lookup(f->a, kb, 3, 0, &found), 0);
	assert_int_equal(found, 3);
	if ((t = now_ms() - t) >= REQUEST_MS)
		fail_msg("a lookup after the blocks took %lld ms", t);
	assert_int_equal(atomic_load(&f->fake->conns), 1);
}

/* An answer that breaks the protocol is a miss: never a success that leaves
 * the caller's buffer as it was (and never cached). */
static void test_peer_sends_malformed_answer(void **state)
{
	struct fx *f = *state;
	int rc = get_from_fake(f, FAKE_MALFORMED);
	if (rc >= 0)
		fail_msg("a malformed answer read as a hit (%d)", rc);
	/* nothing was cached: with b marked down, still a miss */
	kvt_key kb;
	char buf[64];
	size_t len;
	owned_keys(1, 42000, &kb, 1);
	assert_true(kvt_get(f->a, kb, buf, sizeof(buf), &len) < 0);
}

/*
 * Stands in for a second thread whose load lands in the buffer that this
 * thread's batch has just loaded a block into: at the first log line, which
 * comes after that block was received and verified but before the store
 * copied it into RAM, the buffer gets another block's bytes.
 */
struct scribble {
	char *buf;
	size_t len;
	kvt_key other;
	int lines;
};

static void scribble_log(int level, const char *msg, void *arg)
{
	struct scribble *sc = arg;

	(void)level;
	(void)msg;
	if (sc->lines++ == 0)
		fill_block(sc->other, sc->buf, sc->len);
}

/* A peer hit whose buffer changed before its promotion is not promoted:
 * what RAM keeps must match the checksum the block was verified with. */
static void test_peer_hit_is_promoted_only_as_verified(void **state)
{
	struct fx *f = *state;
	char *b0 = malloc(FAKE_LEN), *b1 = malloc(FAKE_LEN);
	kvt_key kb[3];
	size_t len = 0;

	assert_true(b0 && b1);
	f->fake = fake_start(f->pb, FAKE_ERROR_SECOND);
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, PROMOTE);
	owned_keys(1, 44000, kb, 3);
	kvt_op ops[2] = { { kb[0], b0, FAKE_LEN, 1 }, { kb[1], b1, FAKE_LEN, 1 } };
	struct scribble sc = { b0, FAKE_LEN, kb[2], 0 };
	long long promotions = store_stat(f->a, "store", "promotions");

	/* one round trip: kb[0] arrives and is verified, then b refuses kb[1]
	 * (a log line), then the store promotes kb[0] from b0 */
	kvt_set_log(scribble_log, &sc, KVT_LOG_WARN);
	assert_true(kvt_get_batch(f->a, ops, 2) < 0);
	kvt_set_log(NULL, NULL, 0);
	assert_true(sc.lines >= 1);
	assert_int_equal(ops[0].result, 0);
	assert_int_equal(ops[0].len, FAKE_LEN);
	assert_true(ops[1].result < 0);
	assert_int_equal(atomic_load(&f->fake->gets), 1);
	/* b0 held kb[2]'s bytes by then: kb[0] is not in a's RAM with them.
	 * b is marked down, so a miss (or, once b is asked again, kb[0]'s own
	 * bytes), never kb[2]'s */
	int rc = kvt_get(f->a, kb[0], b0, FAKE_LEN, &len);
	if (rc == 0) {
		assert_int_equal(len, FAKE_LEN);
		assert_true(check_block(kb[0], b0, FAKE_LEN));
	} else {
		assert_int_equal(rc, -ENOENT);
	}
	/* the batch promoted nothing (a later good answer promotes one) */
	assert_int_equal(store_stat(f->a, "store", "promotions"), promotions + (rc == 0));
	free(b0);
	free(b1);
}

/* Threads queued on a member that is being marked down do not each wait
 * out a timeout of their own. */
struct getter {
	kvt_store *s;
	kvt_key k;
	pthread_barrier_t *go;
	int rc;
	long long ms, end;
};

static void *getter_main(void *arg)
{
	struct getter *g = arg;
	char buf[4096];
	size_t len;
	pthread_barrier_wait(g->go);
	long long t = now_ms();
	g->rc = kvt_get(g->s, g->k, buf, sizeof(buf), &len);
	g->end = now_ms();
	g->ms = g->end - t;
	return NULL;
}

/* The getters start together (a barrier, so that how long a loaded
 * machine takes to start a thread does not count) and their ends are
 * compared: one timeout each would space them REQUEST_MS apart, as they
 * queue on the member; sharing the first failure ends them together. */
static void test_queued_callers_share_a_failure(void **state)
{
	struct fx *f = *state;
	enum { NT = 5 };
	struct getter g[NT];
	pthread_t t[NT];
	pthread_barrier_t go;
	kvt_key kb[NT];

	f->fake = fake_start(f->pb, FAKE_SILENT);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 43000, kb, NT);
	assert_int_equal(pthread_barrier_init(&go, NULL, NT), 0);
	for (int i = 0; i < NT; i++) {
		g[i] = (struct getter){ .s = f->a, .k = kb[i], .go = &go };
		assert_int_equal(pthread_create(&t[i], NULL, getter_main, &g[i]), 0);
	}
	for (int i = 0; i < NT; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&go);
	long long lo = g[0].end, hi = g[0].end;
	for (int i = 0; i < NT; i++) {
		if (g[i].rc >= 0)
			fail_msg("getter %d: %d from a silent owner", i, g[i].rc);
		if (g[i].ms > CONNECT_MS + REQUEST_MS + 1000)
			fail_msg("getter %d waited %lld ms", i, g[i].ms);
		lo = g[i].end < lo ? g[i].end : lo;
		hi = g[i].end > hi ? g[i].end : hi;
	}
	/* the first failure answers all of them: not one timeout each */
	if (hi - lo >= REQUEST_MS / 2)
		fail_msg("getters ended %lld ms apart: each waited its own timeout", hi - lo);
}

/* A failed open closes nothing it did not open (descriptor 0 included). */
static void test_failed_open_leaves_other_descriptors(void **state)
{
	char cfg[1024];
	kvt_store *s = NULL;
	int opened = -1;

	(void)state;
	if (fcntl(0, F_GETFD) < 0)
		opened = open("/dev/null", O_RDONLY); /* becomes descriptor 0 */
	assert_true(fcntl(0, F_GETFD) >= 0);
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"8MiB\", \"mlock\": false}, \"peers\": "
		 "{\"self\": \"a\", \"members\": [{\"name\": \"a\", \"addr\": "
		 "\"127.0.0.1:%d\"}, {\"name\": \"b\", \"addr\": \"no-such-host.invalid:7\"}, "
		 "{\"name\": \"c\", \"addr\": \"127.0.0.1:9\"}, {\"name\": \"d\", "
		 "\"addr\": \"127.0.0.1:10\"}]}}", free_port());
	assert_int_equal(kvt_open(cfg, &s), -EINVAL);
	assert_null(s);
	assert_true(fcntl(0, F_GETFD) >= 0);
	if (opened >= 0)
		close(opened);
}

static void test_peer_sends_bad_checksum(void **state)
{
	int rc = get_from_fake(*state, FAKE_BADSUM);
	if (rc >= 0)
		fail_msg("a payload with a wrong checksum was returned (%d)", rc);
	if (rc != -EBADMSG)
		print_message("note: a bad checksum gave %s, not -EBADMSG\n", kvt_strerror(rc));
	else if (!strstr(kvt_last_error(), "failed its checksum"))
		fail_msg("a bad checksum left kvt_last_error() as \"%s\"", kvt_last_error());
}

/*
 * A server may close a connection just as a request is on its way (idle,
 * or to make room): nothing of it was answered, so the client dials again
 * and asks again instead of failing and marking the member down. Each kind
 * of request crosses such a close once: GET, LOOKUP, PUT, RELEASE.
 */
static void test_close_crossing_a_request_is_redialled(void **state)
{
	struct fx *f = *state;
	kvt_key kb[3];
	char st[8192];
	void *buf = malloc(FAKE_LEN);
	size_t len, found;
	assert_non_null(buf);
	f->fake = fake_start(f->pb, FAKE_DROP_SECOND);
	f->a = node_at("a", "127.0.0.1", f->pa, "127.0.0.1", f->pb, SLOW_CONNECT);
	owned_keys(1, 67000, kb, 3);
	for (int i = 0; i < 2; i++) {
		int rc = kvt_get(f->a, kb[i], buf, FAKE_LEN, &len);
		if (rc)
			fail_msg("get %d: %s (%s)", i, kvt_strerror(rc), kvt_last_error());
		assert_true(check_block(kb[i], buf, FAKE_LEN));
	}
	assert_int_equal(atomic_load(&f->fake->conns), 2);
	/* a lookup crosses the close too (the fake answers every key) */
	assert_int_equal(kvt_lookup(f->a, kb, 3, 0, &found), 0);
	assert_int_equal(found, 3);
	assert_int_equal(atomic_load(&f->fake->conns), 3);
	/* and a put, and a release */
	store_put_block(f->a, kb[2], 4096);
	assert_int_equal(store_stat(f->a, "store", "peer_puts"), 1);
	assert_int_equal(store_stat(f->a, "store", "peer_put_failures"), 0);
	assert_int_equal(atomic_load(&f->fake->conns), 4);
	kvt_release(f->a, kb, 1);
	assert_int_equal(atomic_load(&f->fake->conns), 5);
	free(buf);
	assert_true(kvt_stats_json(f->a, st, sizeof(st)) > 0);
	if (!strstr(st, "\"failures\":0"))
		fail_msg("a marked b down: %s", st);
}

/*
 * A reused connection that the member closes late into a request, without
 * an answer, is dialed again once, but within the first try's deadline:
 * the call still ends within connect_timeout_ms + request_timeout_ms (it
 * took both deadlines in turn, 1.8 request timeouts, before).
 */
static void test_late_close_keeps_the_deadline(void **state)
{
	struct fx *f = *state;
	kvt_key kb[2];
	void *buf = malloc(FAKE_LEN);
	size_t len;
	assert_non_null(buf);
	f->fake = fake_start(f->pb, FAKE_LATE_CLOSE);
	f->a = node("a", f->pa, f->pb);
	owned_keys(1, 68000, kb, 2);
	assert_int_equal(kvt_get(f->a, kb[0], buf, FAKE_LEN, &len), 0);
	assert_true(check_block(kb[0], buf, FAKE_LEN));
	long long t0 = now_ms();
	int rc = kvt_get(f->a, kb[1], buf, FAKE_LEN, &len);
	long long ms = now_ms() - t0;
	print_message("second get: %d after %lld ms\n", rc, ms);
	assert_true(rc == -ETIMEDOUT || rc == -ENOENT);
	assert_true(ms < CONNECT_MS + REQUEST_MS + 250);
	free(buf);
}

/* An ERROR frame whose length is not its message's (a body that never
 * comes) ends the call at once, the member marked down, rather than
 * after request_timeout_ms. */
static void test_malformed_error_frame_fails_at_once(void **state)
{
	int rc = get_from_fake(*state, FAKE_BAD_ERROR);
	print_message("get: %d after %lld ms\n", rc, fake_get_ms);
	assert_true(rc < 0);
	assert_true(fake_get_ms < REQUEST_MS / 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_restarted_peer_is_redialled),
		T(test_dead_peer),
		T(test_silent_peer),
		T(test_fake_peer_answers),
		T(test_peer_dies_mid_transfer),
		T(test_blocks_arriving_in_pieces),
		T(test_peer_sends_bad_checksum),
		T(test_peer_hit_is_promoted_only_as_verified),
		T(test_peer_sends_malformed_answer),
		T(test_queued_callers_share_a_failure),
		T(test_failed_open_leaves_other_descriptors),
		T(test_close_crossing_a_request_is_redialled),
		T(test_late_close_keeps_the_deadline),
		T(test_malformed_error_frame_fails_at_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
