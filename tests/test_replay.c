/*
 * test_replay.c - the replay engine (bench/replay/replay.c) on the real store:
 * tiny traces whose hits were worked out by hand replay to exactly those
 * counts, in the GPU prefix cache and in the RAM tier; the Mooncake
 * excerpt's unbounded bound; policies that turn caches off; two store
 * nodes serving each other as peers, on a trace whose arrival times alone
 * decide the routing; the endpoint's timeline (serialised prefill, a
 * decode batch that slows as it grows, busy time as the union of
 * outstanding intervals) and the saving computed from it, by hand; calls
 * routed by their role to an endpoint of their own; the fleet's steps on
 * the other server served by the RAM tier; a run asked to stop; a call
 * that runs beside the one before it; the KV of running calls taking its
 * place in the GPU pool, and a call waiting for room in it; the age of
 * reuse against the lease.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "replay.h"
#include "trace.h"

static const char *data_path(const char *name)
{
	static char buf[512];
	const char *slash = strrchr(__FILE__, '/');
	int dir = slash ? (int)(slash - __FILE__) : 0;

	snprintf(buf, sizeof(buf), "%.*s%sdata/%s", dir, __FILE__, slash ? "/" : "", name);
	return buf;
}

static void opts_for_tests(struct replay_opts *o)
{
	replay_opts_defaults(o);
	o->speed = 0; /* back to back */
	o->progress = 0;
	o->ram_tokens = 100000;
	o->disk_tokens = 0;
	o->active = 1; /* sessions one after another */
	o->stagger_s = 0;
}

static void load(const char *name, struct wl *w)
{
	char err[256];

	if (trace_load(data_path(name), TRACE_AUTO, 512, w, NULL, err, sizeof(err)))
		fail_msg("%s", err);
}

static void run(const struct replay_opts *o, const struct wl *w, struct replay_result *r)
{
	char err[512];
	int rc = replay_run(o, w, r, err, sizeof(err));

	if (rc)
		fail_msg("replay_run: %d %s", rc, err);
}

/*
 * tiny-sessions.jsonl, by hand (16-token GPU blocks):
 *   A0: 32 task-text tokens + 68 new = 100 tokens, 6 full blocks: all computed.
 *   A1: A0's prompt + 20 answer + 40 new = 160 tokens, 10 blocks: the 6
 *       blocks of A0 are cached (96 tokens); 64 tokens computed.
 *   B0: 48 task-text tokens + 16 new = 64 tokens, 4 blocks: the first 2
 *       blocks (32 task-text tokens) match A0; 32 tokens computed.
 */
static void tiny_trace_hits_the_gpu_cache_as_worked_out(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl w;

	(void)state;
	load("tiny-sessions.jsonl", &w);
	opts_for_tests(&o);
	o.policy = POL_GPU_ONLY;
	run(&o, &w, &r);
	assert_int_equal(r.calls, 3);
	assert_int_equal(r.prompt_tokens, 324);
	assert_int_equal(r.prompt_blocks, 20);
	assert_int_equal(r.tok[T_GPU], 128);
	assert_int_equal(r.blk[T_GPU], 8);
	assert_int_equal(r.tok[T_MISS], 196);
	assert_int_equal(r.blk[T_MISS], 12);
	assert_int_equal(r.tok[T_RAM], 0);
	assert_int_equal(r.puts_offered, 0);
	/* an unbounded cache would find the same blocks */
	assert_int_equal(r.bound_blk, 8);
	assert_int_equal(r.bound_tok, 128);
	replay_result_free(&r);
	wl_free(&w);
}

/*
 * The same trace with no GPU cache and 32-token store blocks:
 *   A0: 3 store blocks looked up, none found, 3 put.
 *   A1: 5 store blocks, the first 3 found and loaded (96 tokens), 2 put.
 *   B0: 2 store blocks, the first (task text) found (32 tokens), 1 put.
 */
static void tiny_trace_hits_the_ram_tier_as_worked_out(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl w;

	(void)state;
	load("tiny-sessions.jsonl", &w);
	opts_for_tests(&o);
	o.policy = POL_RAM_ONLY;
	o.gpu_tokens = 0;
	o.chunk_tokens = 32;
	run(&o, &w, &r);
	assert_int_equal(r.tok[T_GPU], 0);
	assert_int_equal(r.tok[T_RAM], 128);
	assert_int_equal(r.blk[T_RAM], 8);
	assert_int_equal(r.tok[T_DISK], 0);
	assert_int_equal(r.tok[T_MISS], 196);
	assert_int_equal(r.puts_offered, 6);
	assert_int_equal(r.puts_refused, 0);
	assert_int_equal(r.put_errors, 0);
	assert_int_equal(r.lookups, 3);
	assert_int_equal(r.bytes_loaded[T_RAM], 4 * replay_block_bytes(&o, 32));
	assert_non_null(r.store_stats);
	/* the measured loads are charged: net <= net of the divided charge
	 * <= gross, and the divided charge is at most the full one */
	assert_true(r.busy_s > 0);
	assert_true(r.charged_load_s > 0);
	assert_true(r.charged_div_s <= r.charged_load_s);
	assert_true(r.saved_store > 0);
	assert_true(r.saved_store_net <= r.saved_store_net_div);
	assert_true(r.saved_store_net_div <= r.saved_store);
	replay_result_free(&r);
	wl_free(&w);
}

/*
 * mooncake-excerpt.jsonl: six lines of the conversation trace (lines 2, 31,
 * 67, 134, 138 and 192 of the file). Leading ids already seen, by hand:
 *   [0,14..27]             15 ids, 7322 tokens: 0
 *   [0,820,821]             3 ids: 1 (id 0)                   512 tokens
 *   [0,1541..1545]          6 ids: 1 (id 0)                   512 tokens
 *   [0,1541..1544,3753]     6 ids: 5 (0,1541..1544)          2560 tokens
 *   [0,14..26,3868,3869]   16 ids: 14 (0,14..26)             7168 tokens
 *   [0,820,5023..5025]      5 ids: 2 (0,820)                 1024 tokens
 * = 23 of 51 blocks, 11,776 of 24,410 tokens.
 */
static void mooncake_excerpt_replays_to_the_hand_counts(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl w;

	(void)state;
	load("mooncake-excerpt.jsonl", &w);
	opts_for_tests(&o);
	o.sched = SCHED_ARRIVAL;

	o.policy = POL_GPU_ONLY;
	run(&o, &w, &r);
	assert_int_equal(r.calls, 6);
	assert_int_equal(r.prompt_tokens, 24410);
	assert_int_equal(r.total_blk, 51);
	assert_int_equal(r.bound_blk, 23);
	assert_int_equal(r.bound_tok, 11776);
	assert_int_equal(r.blk[T_GPU], 23);
	assert_int_equal(r.tok[T_GPU], 11776);
	assert_int_equal(r.tok[T_MISS], 24410 - 11776);
	replay_result_free(&r);

	o.policy = POL_RAM_ONLY;
	o.gpu_tokens = 0;
	run(&o, &w, &r);
	assert_int_equal(r.blk[T_RAM], 23);
	assert_int_equal(r.tok[T_RAM], 11776);
	assert_int_equal(r.puts_offered, 51 - 23);
	assert_int_equal(r.bound_tok, 11776);
	replay_result_free(&r);

	/* a GPU cache of one 512-token block keeps only the last block put
	 * (the head of the last prompt), so only a request starting with
	 * that same id hits: every line starts with id 0 and the head is
	 * inserted last, so each later line hits exactly id 0 */
	o.policy = POL_GPU_ONLY;
	o.gpu_tokens = 512;
	run(&o, &w, &r);
	assert_int_equal(r.blk[T_GPU], 5);
	assert_int_equal(r.tok[T_GPU], 5 * 512);
	replay_result_free(&r);
	wl_free(&w);
}

static void recompute_policy_computes_every_token(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl_gen g;
	struct wl w;

	(void)state;
	wl_gen_defaults(&g);
	assert_int_equal(wl_generate(&g, &w), 0);
	wl_truncate_sessions(&w, 4);
	opts_for_tests(&o);
	o.policy = POL_RECOMPUTE;
	o.active = 2;
	run(&o, &w, &r);
	assert_int_equal(r.calls, w.ncalls);
	assert_int_equal(r.tok[T_MISS], r.prompt_tokens);
	assert_int_equal(r.tok[T_GPU] + r.tok[T_RAM] + r.tok[T_DISK], 0);
	assert_true(r.busy_s > 0);
	assert_true(r.saved_store == 0);
	replay_result_free(&r);
	wl_free(&w);
}

static void generated_sessions_replay_the_same_way_twice(void **state)
{
	struct replay_opts o;
	struct replay_result a, b;
	struct wl_gen g;
	struct wl w;
	int t;

	(void)state;
	wl_gen_defaults(&g);
	assert_int_equal(wl_generate(&g, &w), 0);
	wl_truncate_sessions(&w, 6);
	opts_for_tests(&o);
	o.policy = POL_GPU_ONLY;
	o.active = 3;
	o.gpu_tokens = 100000;
	run(&o, &w, &a);
	run(&o, &w, &b);
	for (t = 0; t < T_NTIERS; t++)
		assert_int_equal(a.tok[t], b.tok[t]);
	assert_true(a.tok[T_GPU] > 0); /* later turns reuse their prefix */
	assert_true(a.ttft_p50 == b.ttft_p50);
	replay_result_free(&a);
	replay_result_free(&b);
	wl_free(&w);
}

/*
 * Two store nodes, peers over loopback TCP, one per endpoint, no GPU cache,
 * the Mooncake excerpt at its arrival times. A put stores the blocks on the
 * putting node and at each block's owner. The calls are seconds apart, so
 * each finds both endpoints idle and goes to endpoint 0 (node n0), except
 * line 138: it arrives at the same instant as line 134, while endpoint 0 is
 * still prefilling that one, so it goes to endpoint 1 (node n1). Its 14
 * leading blocks (ids 0 and 14..26, all put by line 2 on n0) are found on
 * n1 where n1 owns them (the copies the puts sent their owner) and at n0,
 * as peer hits, where n0 does; the hits of the other calls stay local. The
 * routing depends only on the arrival times, never on how long the loads
 * take (which the timeline charges), so a slow machine gets the same
 * counts. Every loaded byte is verified by the replay.
 */
static void two_nodes_serve_each_other_as_peers(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl w;
	json_t *n1;

	(void)state;
	load("mooncake-excerpt.jsonl", &w);
	opts_for_tests(&o);
	o.sched = SCHED_ARRIVAL;
	o.policy = POL_RAM_ONLY;
	o.gpu_tokens = 0;
	o.endpoints = 2;
	o.nodes = 2;
	run(&o, &w, &r);
	assert_int_equal(r.calls, 6);
	assert_int_equal(r.put_errors, 0);
	/* the same 23 leading blocks as with one node, now from two places */
	assert_int_equal(r.blk[T_RAM] + r.blk[T_PEER], 23);
	assert_int_equal(r.tok[T_RAM] + r.tok[T_PEER], 11776);
	assert_int_equal(r.tok[T_DISK], 0);
	assert_true(r.blk[T_PEER] > 0 && r.blk[T_PEER] <= 14);
	assert_int_equal(r.tok[T_PEER], r.blk[T_PEER] * 512);
	assert_int_equal(r.bytes_loaded[T_PEER], r.blk[T_PEER] * replay_block_bytes(&o, 512));
	assert_int_equal(r.tok[T_GPU] + r.tok[T_RAM] + r.tok[T_DISK] + r.tok[T_PEER] +
				 r.tok[T_MISS],
			 r.prompt_tokens);
	/* both nodes' stats, node 0 first: the peer hits are n1's */
	assert_true(json_is_array(r.store_stats));
	assert_int_equal(json_array_size(r.store_stats), 2);
	n1 = json_object_get(json_array_get(r.store_stats, 1), "store");
	assert_int_equal(json_integer_value(json_object_get(n1, "hits_peer")), r.blk[T_PEER]);
	assert_int_equal(json_integer_value(json_object_get(n1, "hits_ram")),
			 14 - r.blk[T_PEER]);
	replay_result_free(&r);
	wl_free(&w);
}

/*
 * busy-calls.jsonl, no caches, prefill 100 tokens/s, decode 10 tokens/s
 * alone, and with decode growth 1 a batch of two at 0.2 s a token each:
 *   X (100 tokens, 10 out) arrives at 0: prefill 0-1.
 *   Y (50 tokens, 10 out) arrives at 0.5, waits: prefill 1-1.5, while
 *     X's decode makes no progress.
 *   X and Y decode together from 1.5: 10 tokens x 0.2 s, both done at 3.5.
 *   Z (100 tokens, 5 out) arrives at 10: prefill 10-11, decode 11-11.5.
 * Busy: [0, 3.5] + [10, 11.5] = 5 s; GPU prefilling 2.5 s, decoding 2.5 s;
 * outstanding (3.5 + 3 + 1.5) / 5 = 1.6 on average; each TTFT 1 s.
 * With growth 0 the pair decodes at 0.1 s a token: done at 2.5, busy 4 s.
 */
static void endpoint_timeline_and_busy_time_as_worked_out(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl w;

	(void)state;
	load("busy-calls.jsonl", &w);
	opts_for_tests(&o);
	o.sched = SCHED_ARRIVAL;
	o.policy = POL_RECOMPUTE;
	o.prefill_rate = 100;
	o.decode_rate = 10;
	o.decode_growth = 1;
	run(&o, &w, &r);
	assert_int_equal(r.calls, 3);
	assert_float_equal(r.busy_s, 5.0, 1e-9);
	assert_float_equal(r.prefill_s, 2.5, 1e-9);
	assert_float_equal(r.decode_s, 2.5, 1e-9);
	assert_float_equal(r.mean_outstanding, 1.6, 1e-9);
	assert_float_equal(r.makespan_s, 11.5, 1e-9);
	assert_float_equal(r.ttft_p50, 1.0, 1e-9);
	assert_float_equal(r.ttft_p99, 1.0, 1e-9);
	assert_true(r.saved_store == 0 && r.saved_store_net_div == 0);
	replay_result_free(&r);

	o.decode_growth = 0;
	run(&o, &w, &r);
	assert_float_equal(r.busy_s, 4.0, 1e-9);
	assert_float_equal(r.decode_s, 1.5, 1e-9);
	replay_result_free(&r);

	/* decode replicas of their own: X decodes 1-2 while Y prefills, Y
	 * 1.5-2.5, Z 11-11.5 (growth ignored): busy [0, 2.5] + [10, 11.5] */
	o.decode_growth = 1;
	o.disaggregated = 1;
	run(&o, &w, &r);
	assert_float_equal(r.busy_s, 4.0, 1e-9);
	assert_float_equal(r.decode_s, 2.0, 1e-9);
	assert_float_equal(r.makespan_s, 11.5, 1e-9);
	replay_result_free(&r);
	wl_free(&w);
}

/* Overlapping, nested, touching and empty intervals, out of order:
 * [0,2] u [1,3] = 3; [5,6] holds [5.5,5.8]; [6,7] touches it: 2; [10,10]: 0. */
static void busy_time_is_the_union_of_intervals(void **state)
{
	struct replay_interval v[] = {
		{ 5.5, 5.8 }, { 1, 3 }, { 10, 10 }, { 6, 7 }, { 0, 2 }, { 5, 6 }, { 4, 4.5 },
	};

	(void)state;
	assert_float_equal(replay_busy_union(v, 6), 5.0, 1e-12);
	assert_float_equal(replay_busy_union(v, 0), 0.0, 0);
	/* and [4,4.5], disjoint from the rest: +0.5 */
	assert_float_equal(replay_busy_union(v, 7), 5.5, 1e-12);
}

/*
 * 594 RAM + 891 disk tokens at 14,850 tokens/s avoid 0.1 s of prefill; over
 * 1 s of busy time that is 10% gross; a full charge of 0.02 s leaves 8%, a
 * divided charge of 0.01 s 9%; the disk's part is 6 points, 60% of the
 * saving; 2,970 GPU tokens are 20%.
 */
static void saving_from_tokens_busy_time_and_charges(void **state)
{
	struct replay_result r;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.tok[T_RAM] = 594;
	r.tok[T_DISK] = 891;
	r.tok[T_GPU] = 2970;
	r.tok[T_MISS] = 12345; /* recomputed tokens save nothing */
	r.busy_s = 1.0;
	r.charged_load_s = 0.02;
	r.charged_div_s = 0.01;
	replay_savings(&r, 14850);
	assert_float_equal(r.saved_store, 0.10, 1e-12);
	assert_float_equal(r.saved_store_net, 0.08, 1e-12);
	assert_float_equal(r.saved_store_net_div, 0.09, 1e-12);
	assert_float_equal(r.saved_disk, 0.06, 1e-12);
	assert_float_equal(r.disk_of_saving, 0.60, 1e-12);
	assert_float_equal(r.saved_gpu, 0.20, 1e-12);
	/* peers count as store */
	r.tok[T_PEER] = 1485;
	replay_savings(&r, 14850);
	assert_float_equal(r.saved_store, 0.20, 1e-12);
	assert_float_equal(r.disk_of_saving, 0.30, 1e-12);
	/* over the union of the endpoints' busy time: 0.2 s / 0.5 s */
	r.busy_union_s = 0.5;
	replay_savings(&r, 14850);
	assert_float_equal(r.saved_store_union, 0.40, 1e-12);
	/* no busy time: no saving, and no division by zero */
	r.busy_s = 0;
	replay_savings(&r, 14850);
	assert_true(r.saved_store == 0 && r.saved_store_net == 0 && r.saved_store_net_div == 0);
	assert_true(r.saved_disk == 0 && r.saved_gpu == 0);
}

/* A call with a role goes to its role's endpoint (the fleet's coder and
 * reasoner servers): the same prompt twice hits the GPU cache when the
 * session stays on one endpoint and misses it when the second call's role
 * sends it to the other. */
static void calls_with_roles_go_to_their_endpoint(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl w;
	struct wl_call c;
	int with_roles;

	(void)state;
	for (with_roles = 0; with_roles < 2; with_roles++) {
		wl_init(&w, WL_TOKENS);
		memset(&c, 0, sizeof(c));
		c.prompt_tokens = 160;
		c.output_tokens = 4;
		c.arrival_s = -1;
		c.n = 1;
		assert_int_equal(wl_add_seg(&w, (struct wl_seg){ 99, 0, 160 }), 0);
		c.role = with_roles ? 1 : 0;
		assert_int_equal(wl_add_call(&w, &c), 0);
		c.turn = 1;
		c.think_s = 1;
		c.role = with_roles ? 2 : 0;
		assert_int_equal(wl_add_call(&w, &c), 0);
		assert_int_equal(wl_index_sessions(&w, 1), 0);
		opts_for_tests(&o);
		o.endpoints = 2;
		o.policy = POL_GPU_ONLY;
		run(&o, &w, &r);
		assert_int_equal(r.calls, 2);
		/* one call after the other: the union over endpoints is the sum */
		assert_float_equal(r.busy_union_s, r.busy_s, 1e-9);
		if (with_roles)
			assert_int_equal(r.tok[T_GPU], 0);
		else
			assert_true(r.tok[T_GPU] >= 144);
		replay_result_free(&r);
		wl_free(&w);
	}
}

/*
 * The fleet's steps build on one text but run on two servers: the first
 * coder step of a round finds the text the reasoner's steps computed in
 * the store's RAM tier (no disk tier here), the reasoner's next step its
 * own earlier text in its GPU cache.
 */
static void fleet_steps_on_the_other_server_hit_the_ram_tier(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl_fleet f;
	struct wl w;
	uint64_t want = 0;
	size_t i;

	(void)state;
	wl_fleet_defaults(&f);
	f.role_text = 0; /* the session text */
	f.sessions = 2;
	f.rounds = 1;
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	assert_int_equal(w.ncalls, 2 * f.round_calls);
	opts_for_tests(&o);
	o.endpoints = 2;
	o.ram_tokens = 1000000;
	o.policy = POL_RAM_ONLY;
	run(&o, &w, &r);
	assert_int_equal(r.calls, w.ncalls);
	assert_true(r.tok[T_GPU] > 0);
	/* at least each session's first coder step (the third): the second
	 * step's prompt, in whole 256-token store blocks, less the shared
	 * task text the coder's GPU cache may hold from the other session */
	for (i = 0; i < w.nsessions; i++)
		want += w.calls[w.sessions[i].first_call + 1].prompt_tokens / 256 * 256 - 1024;
	assert_true(want > 2 * 2048);
	assert_true(r.tok[T_RAM] >= want);
	assert_int_equal(r.tok[T_DISK], 0);
	assert_int_equal(r.interrupted, 0);
	replay_result_free(&r);
	wl_free(&w);
}

static unsigned stop_after, stop_asked;

/* A stop request that comes on the stop_after-th question. */
static int stop_late(void)
{
	return ++stop_asked >= stop_after;
}

/* A run asked to stop ends there without an error, marked interrupted,
 * with the figures of the calls it replayed; one never asked runs whole. */
static void a_stopped_run_keeps_what_it_replayed(void **state)
{
	struct replay_opts o;
	struct replay_result whole, part;
	struct wl_fleet f;
	struct wl w;
	char err[256];

	(void)state;
	wl_fleet_defaults(&f);
	f.role_text = 0; /* the session text, parallel steps included */
	f.sessions = 4;
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	opts_for_tests(&o);
	o.endpoints = 2;
	o.active = 2;
	o.stop = stop_late;
	stop_after = UINT32_MAX;
	stop_asked = 0;
	run(&o, &w, &whole);
	assert_int_equal(whole.interrupted, 0);
	assert_int_equal(whole.calls, w.ncalls);
	stop_after = stop_asked / 2; /* half way through the events */
	stop_asked = 0;
	assert_int_equal(replay_run(&o, &w, &part, err, sizeof(err)), 0);
	assert_int_equal(part.interrupted, 1);
	assert_true(part.calls > 0 && part.calls < whole.calls);
	assert_true(part.busy_s > 0 && part.busy_s < whole.busy_s);
	assert_true(part.busy_union_s > 0 && part.busy_union_s <= part.busy_s);
	assert_true(part.sim_s < whole.sim_s);
	assert_true(part.prompt_tokens < whole.prompt_tokens);
	replay_result_free(&whole);
	replay_result_free(&part);
	wl_free(&w);
}

/* A call beside the one before it arrives with it (the fleet's parallel
 * steps): the two are outstanding together, and the next call waits for
 * both; without it, one call at a time. */
static void a_call_beside_the_one_before_arrives_with_it(void **state)
{
	struct replay_opts o;
	struct replay_result r[2];
	struct wl w;
	struct wl_call c;
	int beside, i;

	(void)state;
	for (beside = 0; beside < 2; beside++) {
		wl_init(&w, WL_TOKENS);
		assert_int_equal(wl_add_seg(&w, (struct wl_seg){ 99, 0, 160 }), 0);
		for (i = 0; i < 3; i++) {
			memset(&c, 0, sizeof(c));
			c.turn = (uint32_t)i;
			c.prompt_tokens = 160;
			c.output_tokens = 30;
			c.arrival_s = -1;
			c.n = 1;
			c.beside = beside && i == 1;
			assert_int_equal(wl_add_call(&w, &c), 0);
		}
		assert_int_equal(wl_index_sessions(&w, 1), 0);
		opts_for_tests(&o);
		o.policy = POL_GPU_ONLY;
		run(&o, &w, &r[beside]);
		assert_int_equal(r[beside].calls, 3);
		wl_free(&w);
	}
	/* one at a time: exactly one outstanding whenever busy */
	assert_float_equal(r[0].mean_outstanding, 1.0, 1e-9);
	/* beside: two together for a while, never three (the third waits) */
	assert_true(r[1].mean_outstanding > 1.2 && r[1].mean_outstanding < 2.0);
	assert_true(r[1].makespan_s < r[0].makespan_s);
	replay_result_free(&r[0]);
	replay_result_free(&r[1]);
}

/* Three timed calls (A, B, C below): A and C share stream 1, B is stream 2. */
static void three_timed_calls(struct wl *w)
{
	static const struct {
		uint64_t seed, len, out;
		double at;
	} calls[] = { { 1, 512, 1, 0 }, { 2, 480, 100, 1 }, { 1, 576, 1, 5 } };
	struct wl_call c;
	size_t i;

	wl_init(w, WL_TOKENS);
	w->timed = 1;
	for (i = 0; i < 3; i++) {
		memset(&c, 0, sizeof(c));
		c.session = WL_NO_SESSION;
		c.prompt_tokens = calls[i].len;
		c.output_tokens = calls[i].out;
		c.arrival_s = calls[i].at;
		c.first = w->nsegs;
		c.n = 1;
		assert_int_equal(wl_add_seg(w, (struct wl_seg){ calls[i].seed, 0, calls[i].len }), 0);
		assert_int_equal(wl_add_call(w, &c), 0);
	}
}

static void opts_for_three_calls(struct replay_opts *o)
{
	opts_for_tests(o);
	o->sched = SCHED_ARRIVAL;
	o->policy = POL_GPU_ONLY;
	o->gpu_tokens = 1024;
	o->prefill_rate = 1000;
	o->decode_rate = 10;
	o->decode_growth = 0;
}

/*
 * A running call's KV takes its place in the GPU pool (gpu_hold), 1,024
 * tokens here, 1,000 tokens/s prefill, 10 tokens/s decode, one endpoint:
 *   A (stream 1, 512 tokens, 1 out) at 0: done at 0.612; its 32 blocks
 *     are kept, its head most recent.
 *   B (stream 2, 480 tokens, 100 out) at 1: from its prefill to its last
 *     token (11.48) it holds 480 + 100 tokens; 512 + 580 > 1,024 evicts
 *     A's last 5 blocks (80 tokens).
 *   C (stream 1, 576 tokens) at 5, while B decodes: finds 27 blocks (432
 *     tokens) of A. Without the hold the pool keeps A and B (992 tokens)
 *     and C finds all 512; with decode apart, B leaves the pool at the
 *     end of its prefill, having held 480 tokens, and C finds 512 too.
 */
static void running_calls_hold_their_kv_in_the_gpu_pool(void **state)
{
	static const struct {
		int hold, disagg;
		uint64_t want;
	} cases[] = { { 1, 0, 432 }, { 0, 0, 512 }, { 1, 1, 512 } };
	struct replay_opts o;
	struct replay_result r;
	struct wl w;
	size_t k;

	(void)state;
	three_timed_calls(&w);
	for (k = 0; k < 3; k++) {
		opts_for_three_calls(&o);
		o.gpu_hold = cases[k].hold;
		o.disaggregated = cases[k].disagg;
		run(&o, &w, &r);
		assert_int_equal(r.calls, 3);
		assert_int_equal(r.tok[T_GPU], cases[k].want);
		assert_int_equal(r.tok[T_MISS], 512 + 480 + 576 - cases[k].want);
		replay_result_free(&r);
	}
	wl_free(&w);
}

/*
 * A call waits for room in the GPU pool, on the calls above: C (576
 * tokens and 1 out, 27 blocks of which the pool keeps from A) arrives at 5
 * while B holds 580 of the 1,024 tokens; 580 + 577 does not fit, so C
 * waits for B's last token (11.48) and prefills its 144 missed tokens
 * then: TTFT 6.624 s, one wait. Without the hold, or with decode apart
 * (B left the pool at 1.48), C prefills at once: TTFT 0.144 s. (A's TTFT
 * is 0.512 s, B's 0.48 s; the report gives the 99th percentile.)
 */
static double p99_of_three(double a, double b, double c)
{
	double v[3] = { a, b, c }, x;
	int i, j;

	for (i = 0; i < 3; i++) /* sort */
		for (j = i + 1; j < 3; j++)
			if (v[j] < v[i]) {
				x = v[i];
				v[i] = v[j];
				v[j] = x;
			}
	return v[1] + 0.98 * (v[2] - v[1]); /* rank 0.99 x 2, interpolated */
}

/*
 * The pool's figures of the run with the hold, by hand (makespan 11.724 s):
 * A holds 513 tokens from 0 to 0.612, B 580 from 1 to 11.48, C 577 (432 of
 * them A's blocks) from 11.48 to 11.724; kept beside them: A's 512 tokens
 * from 0.612 to 1, then the 432 that B's 580 left, until the end (C's
 * take evicts 48 tokens of B's released 480, and C pins A's 432); C waits
 * from 5 to 11.48; 512 + 480 + 576 - 432 tokens enter the pool.
 */
static void pool_figures_by_hand(const struct replay_result *r)
{
	const double span = 11.724, run_t = 0.612 + 10.48 + 0.244;
	const double kv = 513 * 0.612 + 580 * 10.48 + 577 * 0.244;

	assert_float_equal(r->makespan_s, span, 1e-9);
	assert_float_equal(r->ep_running, run_t / span, 1e-9);
	assert_float_equal(r->ep_context, kv / run_t, 1e-6);
	assert_float_equal(r->ep_running_kv, kv / span, 1e-6);
	assert_float_equal(r->ep_prefix_kv, (512 * 0.388 + 432 * 10.724) / span, 1e-6);
	assert_float_equal(r->pool_wait, 6.48 / span, 1e-9);
	assert_float_equal(r->ep_intake, (512 + 480 + 576 - 432) / span, 1e-9);
}

static void a_call_waits_for_room_in_the_gpu_pool(void **state)
{
	static const struct {
		int hold, disagg;
		double ttft;
	} cases[] = { { 1, 0, 6.624 }, { 0, 0, 0.144 }, { 1, 1, 0.144 } };
	struct replay_opts o;
	struct replay_result r;
	struct wl w;
	size_t k;

	(void)state;
	three_timed_calls(&w);
	for (k = 0; k < 3; k++) {
		opts_for_three_calls(&o);
		o.gpu_hold = cases[k].hold;
		o.disaggregated = cases[k].disagg;
		run(&o, &w, &r);
		assert_int_equal(r.calls, 3);
		assert_float_equal(r.ttft_p99, p99_of_three(0.512, 0.48, cases[k].ttft), 1e-6);
		if (k == 0) {
			pool_figures_by_hand(&r);
			assert_float_equal(r.pool_waits_900s, 900.0 / r.makespan_s, 1e-9);
		} else
			assert_float_equal(r.pool_waits_900s, 0, 0);
		replay_result_free(&r);
	}
	wl_free(&w);
}

/*
 * The age of reuse, on the calls above: C looks its prompt up when its
 * prefill starts, at 11.48 s (it waited for room, as the test before
 * shows), and its first 32 blocks were last touched by A's lookup at 0, so
 * 32 of the 98 block touches are reuse 11.48 s old: within a 12 s lease,
 * past an 11 s one.
 */
static void reuse_is_aged_past_the_lease(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl w;

	(void)state;
	three_timed_calls(&w);
	opts_for_three_calls(&o);
	o.lease_ms = 12000;
	run(&o, &w, &r);
	assert_int_equal(r.total_blk, 32 + 30 + 36);
	assert_int_equal(r.bound_blk, 32);
	assert_int_equal(r.aged_blk, 0);
	assert_float_equal(r.reuse_max_s, 11.48, 1e-9);
	assert_float_equal(r.reuse_p99_s, 11.48, 1e-9);
	replay_result_free(&r);
	o.lease_ms = 11000;
	run(&o, &w, &r);
	assert_int_equal(r.aged_blk, 32);
	replay_result_free(&r);
	wl_free(&w);
}

static void bad_engine_options_are_refused(void **state)
{
	struct replay_opts o;
	struct replay_result r;
	struct wl w;
	char err[256];

	(void)state;
	load("tiny-sessions.jsonl", &w);
	opts_for_tests(&o);
	o.chunk_tokens = 24; /* not a multiple of 16 */
	assert_int_equal(replay_run(&o, &w, &r, err, sizeof(err)), -EINVAL);
	opts_for_tests(&o);
	o.decode_growth = -0.5;
	assert_int_equal(replay_run(&o, &w, &r, err, sizeof(err)), -EINVAL);
	opts_for_tests(&o);
	o.sched = SCHED_ARRIVAL; /* the trace has no timestamps */
	assert_int_equal(replay_run(&o, &w, &r, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "timestamps"));
	wl_free(&w);
}

/* The study's factor: 1 inside its range, else measured over the nearer
 * end, of the gross over the per-endpoint sum and over the union alike. */
static void study_factors_of_sum_and_union(void **state)
{
	(void)state;
	json_t *o = json_object();

	json_object_set_new(o, "saved_store", json_real(9.6));
	json_object_set_new(o, "saved_store_union", json_real(16.88));
	replay_study_json(o, 12);
	assert_float_equal(json_number_value(json_object_get(o, "study_factor")), 9.6 / 14.65,
			   1e-9);
	assert_float_equal(json_number_value(json_object_get(o, "study_factor_union")),
			   16.88 / 16.01, 1e-9);
	json_decref(o);
	o = json_object();
	json_object_set_new(o, "saved_store", json_real(15.0));
	json_object_set_new(o, "saved_store_union", json_real(40.0));
	replay_study_json(o, 12);
	assert_float_equal(json_number_value(json_object_get(o, "study_factor")), 1.0, 1e-12);
	assert_float_equal(json_number_value(json_object_get(o, "study_factor_union")),
			   40.0 / 16.01, 1e-9);
	json_decref(o);
	o = json_object();
	replay_study_json(o, 7); /* no figure at 7 sessions */
	assert_true(json_is_null(json_object_get(o, "study")));
	json_decref(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(study_factors_of_sum_and_union),
		cmocka_unit_test(tiny_trace_hits_the_gpu_cache_as_worked_out),
		cmocka_unit_test(tiny_trace_hits_the_ram_tier_as_worked_out),
		cmocka_unit_test(mooncake_excerpt_replays_to_the_hand_counts),
		cmocka_unit_test(recompute_policy_computes_every_token),
		cmocka_unit_test(generated_sessions_replay_the_same_way_twice),
		cmocka_unit_test(two_nodes_serve_each_other_as_peers),
		cmocka_unit_test(endpoint_timeline_and_busy_time_as_worked_out),
		cmocka_unit_test(busy_time_is_the_union_of_intervals),
		cmocka_unit_test(saving_from_tokens_busy_time_and_charges),
		cmocka_unit_test(calls_with_roles_go_to_their_endpoint),
		cmocka_unit_test(fleet_steps_on_the_other_server_hit_the_ram_tier),
		cmocka_unit_test(a_stopped_run_keeps_what_it_replayed),
		cmocka_unit_test(a_call_beside_the_one_before_arrives_with_it),
		cmocka_unit_test(running_calls_hold_their_kv_in_the_gpu_pool),
		cmocka_unit_test(a_call_waits_for_room_in_the_gpu_pool),
		cmocka_unit_test(reuse_is_aged_past_the_lease),
		cmocka_unit_test(bad_engine_options_are_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
