/*
 * test_workload.c - the workload generator (bench/replay/workload.c): determinism
 * for a seed, calibration to the seed study (prompt-length groups and the
 * think-time distribution), the shape of sessions, bad parameters; the
 * agent fleet's generator (steps building on the session's text, parallel
 * steps, rounds and the pause, roles, the context limit, its keys and reuse
 * against the study's; or each role continuing a text of its own) and the
 * reuse statistics.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "workload.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double quantile(double *v, size_t n, double q)
{
	double pos = q * (double)(n - 1);
	size_t i = (size_t)pos;
	double f = pos - (double)i;

	return i + 1 < n ? v[i] * (1 - f) + v[i + 1] * f : v[n - 1];
}

static void generator_is_deterministic_for_a_seed(void **state)
{
	struct wl_gen g;
	struct wl a, b, c;
	size_t i, differ = 0;
	uint32_t *ta, *tb;

	(void)state;
	wl_gen_defaults(&g);
	g.seed = 7;
	assert_int_equal(wl_generate(&g, &a), 0);
	assert_int_equal(wl_generate(&g, &b), 0);
	g.seed = 8;
	assert_int_equal(wl_generate(&g, &c), 0);
	assert_int_equal(a.ncalls, b.ncalls);
	for (i = 0; i < a.ncalls; i++) {
		assert_int_equal(a.calls[i].session, b.calls[i].session);
		assert_int_equal(a.calls[i].prompt_tokens, b.calls[i].prompt_tokens);
		assert_int_equal(a.calls[i].output_tokens, b.calls[i].output_tokens);
		assert_true(a.calls[i].think_s == b.calls[i].think_s);
		if (a.calls[i].prompt_tokens != c.calls[i].prompt_tokens)
			differ++;
	}
	assert_true(differ > a.ncalls / 2); /* another seed, another workload */
	ta = malloc(a.calls[100].prompt_tokens * sizeof(*ta));
	tb = malloc(b.calls[100].prompt_tokens * sizeof(*tb));
	assert_non_null(ta);
	assert_non_null(tb);
	wl_call_tokens(&a, &a.calls[100], ta);
	wl_call_tokens(&b, &b.calls[100], tb);
	assert_memory_equal(ta, tb, a.calls[100].prompt_tokens * sizeof(*ta));
	free(ta);
	free(tb);
	wl_free(&a);
	wl_free(&b);
	wl_free(&c);
}

static void generator_matches_the_study_scale_and_length_groups(void **state)
{
	struct wl_gen g;
	struct wl w;
	size_t i, grp[4] = { 0 };
	const size_t want[4] = { 1116, 3061, 2779, 947 };
	uint64_t L;

	(void)state;
	wl_gen_defaults(&g);
	assert_int_equal(wl_generate(&g, &w), 0);
	assert_int_equal(w.ncalls, 7903);
	assert_int_equal(w.nsessions, 256);
	for (i = 0; i < w.ncalls; i++) {
		L = w.calls[i].prompt_tokens;
		grp[L <= 32768 ? 0 : L <= 65536 ? 1 : L <= 98304 ? 2 : 3]++;
	}
	for (i = 0; i < 4; i++) {
		assert_true(fabs((double)grp[i] - (double)want[i]) <= 0.03 * (double)want[i]);
	}
	wl_free(&w);
}

static void generator_matches_think_time_percentiles(void **state)
{
	struct wl_gen g;
	struct wl w;
	struct wl_think t;
	double *v, sum = 0;
	size_t i, n = 0;

	(void)state;
	wl_gen_defaults(&g);
	assert_int_equal(wl_generate(&g, &w), 0);
	v = malloc(w.ncalls * sizeof(*v));
	assert_non_null(v);
	for (i = 0; i < w.ncalls; i++) {
		if (w.calls[i].turn == 0) {
			assert_true(w.calls[i].think_s == 0);
			continue;
		}
		assert_true(w.calls[i].think_s > 0 && w.calls[i].think_s <= 300);
		v[n++] = w.calls[i].think_s;
		sum += w.calls[i].think_s;
	}
	qsort(v, n, sizeof(*v), cmp_double);
	assert_true(fabs(quantile(v, n, 0.50) / 5.16 - 1) < 0.05);
	assert_true(fabs(quantile(v, n, 0.90) / 23.44 - 1) < 0.05);
	assert_true(fabs(quantile(v, n, 0.99) / 80.56 - 1) < 0.10);
	assert_true(fabs(sum / (double)n / 10.36 - 1) < 0.06);
	/* the fitted distribution itself: mean 10.36 s */
	wl_think_fit(&t, 5.16, 23.44, 300);
	assert_true(fabs(wl_think_mean(&t) / 10.36 - 1) < 0.01);
	free(v);
	wl_free(&w);
}

static void each_prompt_extends_the_previous_prompt_and_answer(void **state)
{
	struct wl_gen g;
	struct wl w;
	const struct wl_call *c;
	uint32_t *prev, *cur;
	size_t s, t;

	(void)state;
	wl_gen_defaults(&g);
	assert_int_equal(wl_generate(&g, &w), 0);
	for (s = 0; s < w.nsessions; s++) {
		c = &w.calls[w.sessions[s].first_call];
		for (t = 1; t < w.sessions[s].ncalls; t++) {
			assert_int_equal(c[t].session, s);
			assert_int_equal(c[t].turn, t);
			assert_true(c[t].prompt_tokens > c[t - 1].prompt_tokens + c[t - 1].output_tokens);
		}
	}
	/* token level, one session: turn t's prompt is a prefix of turn t+1's */
	c = &w.calls[w.sessions[3].first_call];
	prev = malloc(200000 * sizeof(*prev));
	cur = malloc(200000 * sizeof(*cur));
	assert_non_null(prev);
	assert_non_null(cur);
	wl_call_tokens(&w, &c[0], prev);
	wl_call_tokens(&w, &c[1], cur);
	assert_memory_equal(prev, cur, c[0].prompt_tokens * sizeof(*cur));
	wl_free(&w);
	free(prev);
	free(cur);
}

static void sessions_share_the_leading_task_text_only(void **state)
{
	struct wl_gen g;
	struct wl w;
	uint32_t *a, *b;
	const struct wl_call *ca, *cb;
	size_t i, same = 0;

	(void)state;
	wl_gen_defaults(&g);
	assert_int_equal(wl_generate(&g, &w), 0);
	ca = &w.calls[w.sessions[0].first_call];
	cb = &w.calls[w.sessions[1].first_call];
	a = malloc(ca->prompt_tokens * sizeof(*a));
	b = malloc(cb->prompt_tokens * sizeof(*b));
	assert_non_null(a);
	assert_non_null(b);
	wl_call_tokens(&w, ca, a);
	wl_call_tokens(&w, cb, b);
	assert_memory_equal(a, b, g.shared_tokens * sizeof(*a));
	for (i = g.shared_tokens; i < g.shared_tokens + 1000; i++)
		same += a[i] == b[i];
	assert_true(same < 10); /* after the task text, sessions diverge */
	free(a);
	free(b);
	wl_free(&w);
}

static void inconsistent_generator_parameters_are_rejected(void **state)
{
	struct wl_gen g;
	struct wl w;

	(void)state;
	wl_gen_defaults(&g);
	g.calls = 7900; /* groups sum to 7903 */
	assert_int_equal(wl_generate(&g, &w), -EINVAL);
	wl_gen_defaults(&g);
	g.sessions = 5000; /* fewer than 2 calls a session */
	assert_int_equal(wl_generate(&g, &w), -EINVAL);
	wl_gen_defaults(&g);
	g.think_p90 = 1; /* below the median */
	assert_int_equal(wl_generate(&g, &w), -EINVAL);
	wl_gen_defaults(&g);
	g.shared_tokens = 7000; /* longer than the shortest prompt */
	assert_int_equal(wl_generate(&g, &w), -EINVAL);
}

static void prng_is_reproducible_and_uniform(void **state)
{
	struct wl_rng a, b;
	double sum = 0;
	int i;

	(void)state;
	wl_rng_seed(&a, 42);
	wl_rng_seed(&b, 42);
	for (i = 0; i < 1000; i++)
		assert_true(wl_rng_next(&a) == wl_rng_next(&b));
	for (i = 0; i < 100000; i++) {
		double u = wl_rng_uniform(&a);
		assert_true(u >= 0 && u < 1);
		sum += u;
	}
	assert_true(fabs(sum / 100000 - 0.5) < 0.01);
	for (i = 0; i < 1000; i++) {
		uint64_t x = wl_rng_range(&a, 5, 9);
		assert_true(x >= 5 && x <= 9);
	}
}

/* Prompt + answer never exceed the context; a session whose next call
 * would not fit ends there (a small context forces it). */
static void fleet_calls_never_exceed_the_context(void **state)
{
	static const uint64_t ctx[] = { 65536, 16384 };
	struct wl_fleet f;
	struct wl_reuse ru;
	struct wl w;
	size_t i, k, short_sessions;

	(void)state;
	for (k = 0; k < 2; k++) {
		wl_fleet_defaults(&f);
		f.max_context = ctx[k];
		assert_int_equal(wl_generate_fleet(&f, &w), 0);
		assert_true(w.ncalls > 0);
		for (i = 0; i < w.ncalls; i++)
			assert_true(w.calls[i].prompt_tokens + w.calls[i].output_tokens <= ctx[k]);
		assert_int_equal(wl_reuse_stats(&w, ctx[k], &ru), 0);
		assert_int_equal(ru.over_context, 0);
		short_sessions = 0;
		for (i = 0; i < w.nsessions; i++)
			short_sessions += w.sessions[i].ncalls < f.rounds * f.round_calls;
		if (k == 1) /* sessions ended early rather than overflow */
			assert_true(short_sessions > w.nsessions / 4);
		wl_free(&w);
	}
}

/* Whether the first n tokens of call a's prompt (followed, with ans, by
 * its answer's tokens as the session's text holds them) begin call b's. */
static int prompt_is_prefix(const struct wl *w, const struct wl_call *a, uint64_t n,
			    const struct wl_call *b)
{
	uint32_t *x = malloc(a->prompt_tokens * sizeof(*x) + 1);
	uint32_t *y = malloc(b->prompt_tokens * sizeof(*y) + 1);
	int same;

	assert_non_null(x);
	assert_non_null(y);
	assert_true(n <= a->prompt_tokens && n <= b->prompt_tokens);
	wl_call_tokens(w, a, x);
	wl_call_tokens(w, b, y);
	same = !memcmp(x, y, n * sizeof(*x));
	free(x);
	free(y);
	return same;
}

/*
 * A session is one growing text: each step's prompt begins with the prompt
 * of the step before it followed by that step's answer (the answer's tokens
 * are the text's, not the prompt's: only the length is checked through it);
 * a parallel step ('p') begins with the text its neighbour saw, not with
 * the neighbour's own material; a later round begins, after the pause, with
 * the whole text of the round before; each call goes to its role's server.
 */
static void fleet_steps_build_on_the_text_so_far(void **state)
{
	struct wl_fleet f;
	struct wl w;
	size_t s, t, later_rounds = 0, parallel = 0;

	(void)state;
	wl_fleet_defaults(&f);
	f.role_text = 0; /* the session text */
	f.sessions = 16;
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	for (s = 0; s < w.nsessions; s++) {
		const struct wl_call *c = &w.calls[w.sessions[s].first_call];

		assert_true(w.sessions[s].ncalls > f.round_calls); /* more than a round */
		for (t = 0; t < w.sessions[s].ncalls; t++) {
			uint32_t k = (uint32_t)(t % f.round_calls);
			const struct wl_call *p = t ? &c[t - 1] : NULL;

			assert_int_equal(c[t].turn, t);
			assert_int_equal(c[t].role, f.roles[k] == 'r' ? 1 : 2);
			if (t == 0) {
				assert_true(c[t].think_s == 0);
				continue;
			}
			if (k == 0)
				assert_true(c[t].think_s == f.pause_s);
			assert_int_equal(c[t].beside, f.steps[k] == 'p');
			if (f.steps[k] == 'p') {
				assert_true(c[t].think_s == 0); /* arrives with p */
				/* the text its neighbour saw: p's prompt without p's
				 * own material (p's last segment) */
				uint64_t base = p->prompt_tokens - w.segs[p->first + p->n - 1].len;

				assert_true(prompt_is_prefix(&w, p, base, &c[t]));
				assert_false(c[t].prompt_tokens >= p->prompt_tokens &&
					     prompt_is_prefix(&w, p, p->prompt_tokens, &c[t]));
				parallel++;
				continue;
			}
			/* the text so far: the step before's prompt and answer */
			assert_true(c[t].prompt_tokens >= p->prompt_tokens + p->output_tokens + 64);
			if (f.steps[(k + f.round_calls - 1) % f.round_calls] != 'p')
				assert_true(prompt_is_prefix(&w, p, p->prompt_tokens, &c[t]));
			else /* after a parallel pair: the first of the pair's prompt */
				assert_true(prompt_is_prefix(&w, &c[t - 2], c[t - 2].prompt_tokens, &c[t]));
			if (k == 0) { /* the whole earlier round, and the failing tests */
				assert_true(c[t].prompt_tokens >= p->prompt_tokens + p->output_tokens +
								  64 + 64);
				later_rounds++;
			}
		}
	}
	assert_true(later_rounds >= w.nsessions);
	assert_true(parallel >= w.nsessions);
	wl_free(&w);
}

/* The study's observables of its fleet workload that set the step size:
 * about 1,200 16-token store keys a call and 4-5% of prompt tokens sent
 * first by another session (the shared task text). The study measured
 * about 60% of touches reusing the session's own earlier context; a text
 * that every step resends whole reuses more (85%, said in kvbench(1)). */
static void fleet_matches_the_study_keys_and_cross_session_reuse(void **state)
{
	struct wl_fleet f;
	struct wl_reuse ru;
	struct wl w;

	(void)state;
	wl_fleet_defaults(&f);
	f.role_text = 0; /* the session text */
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	assert_int_equal(wl_reuse_stats(&w, f.max_context, &ru), 0);
	assert_true(ru.keys_per_call > 1100 && ru.keys_per_call < 1300);
	assert_true(ru.cross_session > 0.04 && ru.cross_session < 0.05);
	assert_true(ru.same_session > 0.80 && ru.same_session < 0.90);
	assert_true(fabs(ru.same_session + ru.cross_session + ru.fresh - 1) < 1e-9);
	assert_true(ru.max_prompt <= f.max_context);
	wl_free(&w);
}

/* With a text of its own per role (role_text): a role's prompt of round
 * r + 1 begins with its prompt of round r and its answer; two steps of a
 * round share the task text only; the study's keys and cross-session reuse
 * hold, and same-session reuse is near its ~60%. */
static void fleet_role_text_continues_each_role(void **state)
{
	struct wl_fleet f;
	struct wl_reuse ru;
	struct wl w;
	size_t s, t;

	(void)state;
	wl_fleet_defaults(&f);
	f.role_text = 1;
	f.tool_calls = 1; /* one call a step, with the material it had */
	f.role_median = 12288;
	f.sessions = 16;
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	for (s = 0; s < w.nsessions; s++) {
		const struct wl_call *c = &w.calls[w.sessions[s].first_call];

		for (t = 0; t < w.sessions[s].ncalls; t++) {
			uint32_t k = (uint32_t)(t % f.round_calls);

			assert_int_equal(c[t].role, f.roles[k] == 'r' ? 1 : 2);
			if (t && k == 0)
				assert_true(c[t].think_s == f.pause_s);
			if (k > 0) /* the step before: the task text, then its own */
				assert_true(prompt_is_prefix(&w, &c[t - 1], f.shared_tokens, &c[t]) &&
					    !prompt_is_prefix(&w, &c[t - 1], f.shared_tokens + 1, &c[t]));
			if (t < f.round_calls)
				continue;
			assert_true(c[t].prompt_tokens >= c[t - f.round_calls].prompt_tokens +
								  c[t - f.round_calls].output_tokens + 64);
			assert_true(prompt_is_prefix(&w, &c[t - f.round_calls],
						     c[t - f.round_calls].prompt_tokens, &c[t]));
		}
	}
	wl_free(&w);
	wl_fleet_defaults(&f);
	f.role_text = 1;
	f.tool_calls = 1;
	f.role_median = 12288;
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	assert_int_equal(wl_reuse_stats(&w, f.max_context, &ru), 0);
	assert_true(ru.keys_per_call > 1000 && ru.keys_per_call < 1400);
	assert_true(ru.same_session > 0.55 && ru.same_session < 0.65);
	assert_true(ru.cross_session > 0.04 && ru.cross_session < 0.055);
	wl_free(&w);
}

/* The default fleet (role text, steps of 4 tool calls): about 1,200 keys a
 * call and 4-5% cross-session reuse, as the study measured, and at least
 * the 83% of prompt tokens that its GPU cache and store together served at
 * 6 sessions (45.0 + 38.0) sent before; with one call a step no more than
 * 62% is. */
static void fleet_default_reuses_what_the_study_hit(void **state)
{
	struct wl_fleet f;
	struct wl_reuse ru;
	struct wl w;

	(void)state;
	wl_fleet_defaults(&f);
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	assert_int_equal(wl_reuse_stats(&w, f.max_context, &ru), 0);
	assert_true(ru.keys_per_call > 1100 && ru.keys_per_call < 1300);
	assert_true(ru.cross_session > 0.04 && ru.cross_session < 0.05);
	assert_true(ru.same_session + ru.cross_session >= 0.83);
	assert_int_equal(ru.over_context, 0);
	wl_free(&w);
	f.tool_calls = 1;
	f.role_median = 12288;
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	assert_int_equal(wl_reuse_stats(&w, f.max_context, &ru), 0);
	assert_true(ru.same_session + ru.cross_session < 0.63);
	wl_free(&w);
}

/* Where call t of a session of the role-text fleet f sits: its step *k and
 * its call *j in the step's loop, and the index of the call before it in
 * the same loop (*prev, when *j > 0). A step marked 'p' runs beside the
 * step before it: their loops go in step, call j of the first then call j
 * of the second. */
static void role_position(const struct wl_fleet *f, size_t t, uint32_t *k, uint32_t *j,
			  size_t *prev)
{
	size_t per_round = (size_t)f->round_calls * f->tool_calls, i = t % per_round;
	uint32_t g = 0, n;

	for (;;) {
		for (n = 1; g + n < f->round_calls && f->steps[0] && f->steps[g + n] == 'p';)
			n++;
		if (i < (size_t)n * f->tool_calls)
			break;
		i -= (size_t)n * f->tool_calls;
		g += n;
	}
	*k = g + (uint32_t)(i % n);
	*j = (uint32_t)(i / n);
	*prev = t - n;
}

/*
 * A step as an agent loop (tool_calls): each call of a step after the
 * first begins with the whole prompt of the call before and is longer by
 * that call's answer and at least 16 tokens of tool output, arrives as soon
 * as the call before is done (think 0), and goes to the same server; the
 * last call of a step gives the step's answer; the next step's first call
 * shares only the task text with it. The implementers (steps "....p.") run
 * beside each other: call j of the second implementer arrives with call j
 * of the first (beside) and shares only the task text with it; with steps
 * "" no call runs beside another. With one call a step the loop is absent
 * (the test above).
 */
static void fleet_steps_are_agent_loops_of_tool_calls(void **state)
{
	struct wl_fleet f;
	struct wl w;
	size_t s, t, prev, loops = 0, beside = 0;
	uint32_t k, j;
	int par;

	(void)state;
	for (par = 1; par >= 0; par--) {
		wl_fleet_defaults(&f);
		f.role_text = 1;
		f.tool_calls = 4;
		f.sessions = 16;
		if (!par)
			f.steps[0] = 0;
		assert_int_equal(wl_generate_fleet(&f, &w), 0);
		for (s = 0; s < w.nsessions; s++) {
			const struct wl_call *c = &w.calls[w.sessions[s].first_call];

			for (t = 0; t < w.sessions[s].ncalls; t++) {
				role_position(&f, t, &k, &j, &prev);
				assert_int_equal(c[t].role, f.roles[k] == 'r' ? 1 : 2);
				assert_true(c[t].prompt_tokens + c[t].output_tokens <= f.max_context);
				assert_int_equal(c[t].beside, par && k == 4);
				if (c[t].beside) {
					beside++;
					assert_true(c[t].think_s == 0);
					assert_true(!prompt_is_prefix(&w, &c[t - 1], f.shared_tokens + 1,
								       &c[t]));
				}
				if (j == 0) {
					if (t && k > 0)
						assert_true(!prompt_is_prefix(&w, &c[t - 1],
									       f.shared_tokens + 1, &c[t]));
					continue;
				}
				loops++;
				assert_true(c[t].think_s == 0);
				assert_true(c[t].prompt_tokens >=
					    c[prev].prompt_tokens + c[prev].output_tokens + 16);
				assert_true(prompt_is_prefix(&w, &c[prev], c[prev].prompt_tokens, &c[t]));
			}
		}
		assert_true(loops > 16 * 3);
		wl_free(&w);
	}
	assert_true(beside > 16 * 4); /* the first round's loop at least, each session */
	wl_fleet_defaults(&f);
	f.tool_calls = 0;
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	f.tool_calls = WL_FLEET_MAX_TOOL + 1;
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	f.tool_median = 0;
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
}

/* With tool_think a loop's call after the first arrives a think time
 * after the start of the call before (the inter-call plan: median 5.16 s)
 * instead of as soon as it is done; the call beside it still arrives with
 * it. */
static void fleet_tool_think_spaces_a_loop(void **state)
{
	struct wl_fleet f;
	struct wl w;
	double *v;
	size_t s, t, prev, n = 0;
	uint32_t k, j;

	(void)state;
	wl_fleet_defaults(&f);
	f.tool_think = 1;
	f.sessions = 32;
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	v = malloc(w.ncalls * sizeof(*v));
	assert_non_null(v);
	for (s = 0; s < w.nsessions; s++) {
		const struct wl_call *c = &w.calls[w.sessions[s].first_call];

		for (t = 0; t < w.sessions[s].ncalls; t++) {
			role_position(&f, t, &k, &j, &prev);
			if (j == 0)
				continue;
			if (c[t].beside) {
				assert_true(c[t].think_s == 0);
				continue;
			}
			assert_true(c[t].think_s > 0 && c[t].think_s <= f.think_cap);
			v[n++] = c[t].think_s;
		}
	}
	assert_true(n > 32 * 3 * 5);
	qsort(v, n, sizeof(*v), cmp_double);
	assert_true(quantile(v, n, 0.5) > 4.0 && quantile(v, n, 0.5) < 6.5);
	free(v);
	wl_free(&w);
}

/* Reuse counted on a workload built by hand. */
static void reuse_stats_count_same_and_cross_session_tokens(void **state)
{
	struct wl w;
	struct wl_reuse ru;
	struct wl_call c;

	(void)state;
	wl_init(&w, WL_TOKENS);
	memset(&c, 0, sizeof(c));
	/* session 0: [shared 100][own 0..200), then [shared 100][own 0..300) */
	c.session = 0;
	c.prompt_tokens = 300;
	c.output_tokens = 10;
	c.first = 0;
	c.n = 2;
	assert_int_equal(wl_add_seg(&w, (struct wl_seg){ 5, 0, 100 }), 0);
	assert_int_equal(wl_add_seg(&w, (struct wl_seg){ 6, 100, 200 }), 0);
	assert_int_equal(wl_add_call(&w, &c), 0);
	c.prompt_tokens = 400;
	c.first = 2;
	assert_int_equal(wl_add_seg(&w, (struct wl_seg){ 5, 0, 100 }), 0);
	assert_int_equal(wl_add_seg(&w, (struct wl_seg){ 6, 100, 300 }), 0);
	assert_int_equal(wl_add_call(&w, &c), 0);
	/* session 1: [shared 100][own 0..100) */
	c.session = 1;
	c.prompt_tokens = 200;
	c.first = 4;
	assert_int_equal(wl_add_seg(&w, (struct wl_seg){ 5, 0, 100 }), 0);
	assert_int_equal(wl_add_seg(&w, (struct wl_seg){ 7, 100, 100 }), 0);
	assert_int_equal(wl_add_call(&w, &c), 0);
	assert_int_equal(wl_index_sessions(&w, 2), 0);
	assert_int_equal(wl_reuse_stats(&w, 350, &ru), 0);
	/* 900 prompt tokens: same-session 100 + 200, cross-session 100 */
	assert_true(fabs(ru.same_session - 300.0 / 900) < 1e-12);
	assert_true(fabs(ru.cross_session - 100.0 / 900) < 1e-12);
	assert_true(fabs(ru.prompt_mean - 300) < 1e-12);
	assert_int_equal(ru.over_context, 1); /* 400 + 10 > 350 */
	assert_int_equal(ru.max_prompt, 400);
	wl_free(&w);
}

static void bad_fleet_parameters_are_rejected(void **state)
{
	struct wl_fleet f;
	struct wl w;

	(void)state;
	wl_fleet_defaults(&f);
	strcpy(f.roles, "rrc"); /* not one a call */
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	strcpy(f.roles, "rrcxcr"); /* neither role */
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	f.max_context = 2048; /* no room past the shared text */
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	f.rounds = 0;
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	f.think_p90 = 1;
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	strcpy(f.steps, "p....."); /* the first step beside nothing */
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	strcpy(f.steps, "..p."); /* not one a call */
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	strcpy(f.steps, "..x..."); /* neither after nor beside */
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	f.step_median = 0;
	assert_int_equal(wl_generate_fleet(&f, &w), -EINVAL);
	wl_fleet_defaults(&f);
	f.roles[0] = 0; /* no roles: routing left to the engine model */
	assert_int_equal(wl_generate_fleet(&f, &w), 0);
	assert_int_equal(w.calls[0].role, 0);
	wl_free(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(generator_is_deterministic_for_a_seed),
		cmocka_unit_test(generator_matches_the_study_scale_and_length_groups),
		cmocka_unit_test(generator_matches_think_time_percentiles),
		cmocka_unit_test(each_prompt_extends_the_previous_prompt_and_answer),
		cmocka_unit_test(sessions_share_the_leading_task_text_only),
		cmocka_unit_test(inconsistent_generator_parameters_are_rejected),
		cmocka_unit_test(prng_is_reproducible_and_uniform),
		cmocka_unit_test(fleet_calls_never_exceed_the_context),
		cmocka_unit_test(fleet_steps_build_on_the_text_so_far),
		cmocka_unit_test(fleet_matches_the_study_keys_and_cross_session_reuse),
		cmocka_unit_test(fleet_role_text_continues_each_role),
		cmocka_unit_test(fleet_steps_are_agent_loops_of_tool_calls),
		cmocka_unit_test(fleet_tool_think_spaces_a_loop),
		cmocka_unit_test(fleet_default_reuses_what_the_study_hit),
		cmocka_unit_test(reuse_stats_count_same_and_cross_session_tokens),
		cmocka_unit_test(bad_fleet_parameters_are_rejected),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
