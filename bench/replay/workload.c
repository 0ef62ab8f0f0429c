/*
 * workload.c - the replay's workloads in memory, the PRNG and the generator
 * of agent sessions calibrated to the seed study (see workload.h).
 *
 * Knows nothing about the store, the engine model or trace file formats.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

/* --- PRNG ---------------------------------------------------------------------- */

uint64_t wl_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void wl_rng_seed(struct wl_rng *r, uint64_t seed)
{
	uint64_t st = seed;
	int i;

	for (i = 0; i < 4; i++)
		r->s[i] = wl_splitmix64(&st);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t wl_rng_next(struct wl_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

double wl_rng_uniform(struct wl_rng *r)
{
	return (double)(wl_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t wl_rng_range(struct wl_rng *r, uint64_t lo, uint64_t hi)
{
	uint64_t span;

	if (hi <= lo)
		return lo;
	span = hi - lo + 1;
	if (span == 0) /* the whole 64-bit range */
		return wl_rng_next(r);
	return lo + wl_rng_next(r) % span;
}

double wl_rng_normal(struct wl_rng *r)
{
	double u1, u2;

	do
		u1 = wl_rng_uniform(r);
	while (u1 <= 0.0);
	u2 = wl_rng_uniform(r);
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* --- think time ------------------------------------------------------------------ */

void wl_think_fit(struct wl_think *t, double p50, double p90, double cap)
{
	const double z90 = 1.2815515655446004; /* standard normal 90th percentile */

	t->mu = log(p50);
	t->sigma = (log(p90) - t->mu) / z90;
	t->cap = cap;
}

double wl_think_sample(const struct wl_think *t, struct wl_rng *r)
{
	double x = exp(t->mu + t->sigma * wl_rng_normal(r));

	return x > t->cap ? t->cap : x;
}

double wl_think_mean(const struct wl_think *t)
{
	/* E[min(X, cap)] by the trapezoid rule over z in [-8, 8]. */
	const int n = 20000;
	double sum = 0, z, x, w, h = 16.0 / n;
	int i;

	for (i = 0; i <= n; i++) {
		z = -8.0 + i * h;
		x = exp(t->mu + t->sigma * z);
		if (x > t->cap)
			x = t->cap;
		w = (i == 0 || i == n) ? 0.5 : 1.0;
		sum += w * x * exp(-0.5 * z * z);
	}
	return sum * h / sqrt(2.0 * M_PI);
}

/* --- workloads -------------------------------------------------------------------- */

uint32_t wl_token(uint64_t seed, uint64_t pos)
{
	uint64_t z = seed + pos * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (uint32_t)(z % 151936u);
}

void wl_call_tokens(const struct wl *w, const struct wl_call *c, uint32_t *tokens)
{
	uint64_t done = 0, i, n;
	uint32_t k;

	for (k = 0; k < c->n && done < c->prompt_tokens; k++) {
		const struct wl_seg *s = &w->segs[c->first + k];

		n = s->len;
		if (n > c->prompt_tokens - done)
			n = c->prompt_tokens - done;
		if (s->seed == WL_SEG_EXPLICIT) {
			memcpy(tokens + done, w->tok + s->off, n * sizeof(*tokens));
		} else {
			for (i = 0; i < n; i++)
				tokens[done + i] = wl_token(s->seed, s->off + i);
		}
		done += n;
	}
	/* Segments always cover the prompt; zero anything left to be safe. */
	if (done < c->prompt_tokens)
		memset(tokens + done, 0, (c->prompt_tokens - done) * sizeof(*tokens));
}

void wl_init(struct wl *w, enum wl_kind kind)
{
	memset(w, 0, sizeof(*w));
	w->kind = kind;
	w->block_tokens = kind == WL_BLOCKS ? 512 : 16;
}

void wl_free(struct wl *w)
{
	free(w->calls);
	free(w->sessions);
	free(w->segs);
	free(w->tok);
	free(w->ids);
	memset(w, 0, sizeof(*w));
}

/* Grows *arr (elements of size sz) to hold at least need elements. */
static int grow(void **arr, size_t *cap, size_t need, size_t sz)
{
	size_t ncap;
	void *p;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 64;
	while (ncap < need)
		ncap *= 2;
	p = realloc(*arr, ncap * sz);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

int wl_add_call(struct wl *w, const struct wl_call *c)
{
	if (grow((void **)&w->calls, &w->cap_calls, w->ncalls + 1, sizeof(*c)))
		return -ENOMEM;
	w->calls[w->ncalls++] = *c;
	return 0;
}

int wl_add_seg(struct wl *w, struct wl_seg s)
{
	if (grow((void **)&w->segs, &w->cap_segs, w->nsegs + 1, sizeof(s)))
		return -ENOMEM;
	w->segs[w->nsegs++] = s;
	return 0;
}

int wl_add_tokens(struct wl *w, const uint32_t *t, size_t n, size_t *off)
{
	if (grow((void **)&w->tok, &w->cap_tok, w->ntok + n, sizeof(*t)))
		return -ENOMEM;
	if (n)
		memcpy(w->tok + w->ntok, t, n * sizeof(*t));
	*off = w->ntok;
	w->ntok += n;
	return 0;
}

int wl_add_id(struct wl *w, uint64_t id)
{
	if (grow((void **)&w->ids, &w->cap_ids, w->nids + 1, sizeof(id)))
		return -ENOMEM;
	w->ids[w->nids++] = id;
	return 0;
}

int wl_index_sessions(struct wl *w, uint32_t nsessions)
{
	struct wl_call *sorted;
	size_t *count, i, pos;

	for (i = 0; i < w->ncalls; i++)
		if (w->calls[i].session >= nsessions)
			return -EINVAL;
	free(w->sessions);
	w->sessions = calloc(nsessions ? nsessions : 1, sizeof(*w->sessions));
	count = calloc(nsessions + 1, sizeof(*count));
	sorted = malloc((w->ncalls ? w->ncalls : 1) * sizeof(*sorted));
	if (!w->sessions || !count || !sorted) {
		free(count);
		free(sorted);
		return -ENOMEM;
	}
	w->nsessions = w->cap_sessions = nsessions;
	/* counting sort: stable */
	for (i = 0; i < w->ncalls; i++)
		count[w->calls[i].session + 1]++;
	for (i = 0; i < nsessions; i++) {
		count[i + 1] += count[i];
		w->sessions[i].first_call = count[i];
		w->sessions[i].ncalls = (uint32_t)(count[i + 1] - count[i]);
	}
	for (i = 0; i < w->ncalls; i++) {
		pos = count[w->calls[i].session]++;
		sorted[pos] = w->calls[i];
	}
	if (w->ncalls)
		memcpy(w->calls, sorted, w->ncalls * sizeof(*sorted));
	free(sorted);
	free(count);
	return 0;
}

void wl_truncate_sessions(struct wl *w, size_t n)
{
	if (w->kind != WL_TOKENS || n >= w->nsessions || !w->sessions)
		return;
	w->ncalls = n ? w->sessions[n].first_call : 0;
	w->nsessions = n;
}

/* --- the generator ---------------------------------------------------------------- */

void wl_gen_defaults(struct wl_gen *g)
{
	memset(g, 0, sizeof(*g));
	g->seed = 1;
	g->sessions = 256;
	g->calls = 7903;
	g->group_calls[0] = 1116;
	g->group_calls[1] = 3061;
	g->group_calls[2] = 2779;
	g->group_calls[3] = 947;
	g->group_edge[0] = 6144;
	g->group_edge[1] = 32768;
	g->group_edge[2] = 65536;
	g->group_edge[3] = 98304;
	g->group_edge[4] = 131072;
	g->shared_tokens = 3072;
	g->think_p50 = 5.16;
	g->think_p90 = 23.44;
	g->think_cap = 300;
}

#define MIN_GROWTH 64

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Checks the generator's parameters: group edges rising, group counts
 * summing to the calls, at least two calls per session. */
static int gen_check(const struct wl_gen *g)
{
	size_t total = 0;
	uint32_t k;

	for (k = 0; k < WL_NGROUPS; k++) {
		total += g->group_calls[k];
		if (g->group_edge[k + 1] <= g->group_edge[k])
			return -EINVAL;
	}
	if (g->sessions == 0 || total != g->calls ||
	    g->calls < 2ull * g->sessions ||
	    g->group_edge[0] < (uint64_t)g->shared_tokens + MIN_GROWTH ||
	    !(g->think_p50 > 0) || !(g->think_p90 > g->think_p50) ||
	    !(g->think_cap > 0))
		return -EINVAL;
	return 0;
}

/* Turns per session: log-normal weights, at least 2, summing to calls. */
static void gen_turns(const struct wl_gen *g, struct wl_rng *r, double *wt, uint32_t *turns)
{
	double wsum = 0;
	size_t total = 0;
	uint32_t s;

	for (s = 0; s < g->sessions; s++) {
		wt[s] = exp(0.6 * wl_rng_normal(r));
		wsum += wt[s];
	}
	for (s = 0; s < g->sessions; s++) {
		turns[s] = (uint32_t)floor(wt[s] / wsum * g->calls);
		if (turns[s] < 2)
			turns[s] = 2;
		total += turns[s];
	}
	while (total < g->calls) {
		turns[wl_rng_range(r, 0, g->sessions - 1)]++;
		total++;
	}
	while (total > g->calls) {
		s = (uint32_t)wl_rng_range(r, 0, g->sessions - 1);
		if (turns[s] > 2) {
			turns[s]--;
			total--;
		}
	}
}

/* Prompt lengths: exact counts per group, uniform inside each group, in a
 * random order. */
static void gen_lengths(const struct wl_gen *g, struct wl_rng *r, uint64_t *len)
{
	uint64_t lo, hi, d;
	size_t i, j, pos = 0;
	uint32_t k;

	for (k = 0; k < WL_NGROUPS; k++) {
		lo = k == 0 ? g->group_edge[0] : g->group_edge[k] + 1;
		hi = g->group_edge[k + 1];
		for (j = 0; j < g->group_calls[k]; j++)
			len[pos++] = wl_rng_range(r, lo, hi);
	}
	for (i = g->calls - 1; i > 0; i--) { /* Fisher-Yates */
		j = wl_rng_range(r, 0, i);
		d = len[i];
		len[i] = len[j];
		len[j] = d;
	}
}

/* The output tokens of turn t of a session whose prompts are l[0..turns):
 * a part of the next prompt's growth, or for the last turn a log-normal
 * length around 300. */
static uint64_t gen_output(struct wl_rng *r, const uint64_t *l, uint32_t t, uint32_t turns)
{
	uint64_t a, d;

	if (t + 1 < turns) {
		d = l[t + 1] - l[t];
		a = (uint64_t)llround((double)d * (0.05 + 0.3 * wl_rng_uniform(r)));
		if (a < 1)
			a = 1;
		if (a > 4096)
			a = 4096;
		if (a > d - 1)
			a = d - 1;
	} else {
		a = (uint64_t)llround(exp(log(300.0) + 0.8 * wl_rng_normal(r)));
		a = a < 16 ? 16 : a > 4096 ? 4096 : a;
	}
	return a;
}

/* Session s's calls from its prompt lengths l[0..turns), which grow: the
 * task text common to all sessions, then the session's own text. */
static int gen_session(const struct wl_gen *g, struct wl_rng *r, const struct wl_think *think,
		       uint64_t common_seed, uint32_t s, uint64_t *l, uint32_t turns,
		       struct wl *out)
{
	uint64_t sseed = g->seed * 0x100000001b3ull + s + 1;
	uint64_t priv = wl_splitmix64(&sseed);
	struct wl_call c;
	uint32_t t;

	qsort(l, turns, sizeof(*l), cmp_u64);
	for (t = 1; t < turns; t++)
		if (l[t] < l[t - 1] + MIN_GROWTH)
			l[t] = l[t - 1] + MIN_GROWTH;
	for (t = 0; t < turns; t++) {
		memset(&c, 0, sizeof(c));
		c.session = s;
		c.turn = t;
		c.prompt_tokens = l[t];
		c.output_tokens = gen_output(r, l, t, turns);
		c.think_s = t == 0 ? 0 : wl_think_sample(think, r);
		c.arrival_s = -1;
		c.first = out->nsegs;
		c.n = 2;
		if (wl_add_seg(out, (struct wl_seg){ common_seed, 0, g->shared_tokens }) ||
		    wl_add_seg(out, (struct wl_seg){ priv, g->shared_tokens,
						     l[t] - g->shared_tokens }) ||
		    wl_add_call(out, &c))
			return -ENOMEM;
	}
	return 0;
}

int wl_generate(const struct wl_gen *g, struct wl *out)
{
	struct wl_rng r;
	struct wl_think think;
	uint64_t *len = NULL, common_seed, sst;
	uint32_t *turns = NULL, s;
	double *wt = NULL;
	size_t pos;
	int err = -ENOMEM;

	wl_init(out, WL_TOKENS);
	if (gen_check(g))
		return -EINVAL;

	wl_rng_seed(&r, g->seed);
	wl_think_fit(&think, g->think_p50, g->think_p90, g->think_cap);
	sst = g->seed ^ 0x7461736b74657874ull; /* "tasktext" */
	common_seed = wl_splitmix64(&sst);

	turns = calloc(g->sessions, sizeof(*turns));
	wt = calloc(g->sessions, sizeof(*wt));
	len = calloc(g->calls, sizeof(*len));
	if (!turns || !wt || !len)
		goto out;
	gen_turns(g, &r, wt, turns);
	gen_lengths(g, &r, len);
	/* Deal the lengths to sessions; each session's prompts grow. */
	pos = 0;
	for (s = 0; s < g->sessions; s++) {
		if (gen_session(g, &r, &think, common_seed, s, len + pos, turns[s], out))
			goto out;
		pos += turns[s];
	}
	err = wl_index_sessions(out, g->sessions);
out:
	free(turns);
	free(wt);
	free(len);
	if (err)
		wl_free(out);
	return err;
}

/* --- the agent-fleet generator ----------------------------------------------------- */

void wl_fleet_defaults(struct wl_fleet *f)
{
	memset(f, 0, sizeof(*f));
	f->seed = 1;
	f->sessions = 256;
	f->rounds = 3;
	f->round_calls = 6;
	strcpy(f->roles, "rrcccr");
	strcpy(f->steps, "....p.");
	f->max_context = 65536;
	f->shared_tokens = 864;
	f->role_text = 1;
	f->step_median = 896;
	f->role_median = 2048;
	f->fail_median = 2048;
	f->tool_calls = 4;
	f->tool_median = 2048;
	f->tool_answer_median = 96;
	f->answer_median = 600;
	f->think_p50 = 5.16;
	f->think_p90 = 23.44;
	f->think_cap = 300;
	f->pause_s = 300;
}

/* A log-normal of median m and log-sd sigma, rounded and clipped to [lo, hi]. */
static uint64_t lognormal_tokens(struct wl_rng *r, double m, double sigma, uint64_t lo,
				 uint64_t hi)
{
	double x = exp(log(m) + sigma * wl_rng_normal(r));

	if (x < (double)lo)
		return lo;
	if (x > (double)hi)
		return hi;
	return (uint64_t)llround(x);
}

static int fleet_check(const struct wl_fleet *f)
{
	size_t nroles = strnlen(f->roles, sizeof(f->roles));
	size_t nsteps = strnlen(f->steps, sizeof(f->steps));

	if (f->sessions == 0 || f->rounds == 0 || f->round_calls == 0 ||
	    f->round_calls > WL_FLEET_MAX_CALLS ||
	    f->max_context < 4ull * (f->shared_tokens + 256) || !(f->step_median >= 1) ||
	    !(f->role_median >= 1) ||
	    !(f->fail_median >= 1) || !(f->answer_median >= 1) ||
	    f->tool_calls == 0 || f->tool_calls > WL_FLEET_MAX_TOOL ||
	    !(f->tool_median >= 1) ||
	    !(f->tool_answer_median >= 1) ||
	    !(f->think_p50 > 0) || !(f->think_p90 > f->think_p50) || !(f->think_cap > 0) ||
	    !(f->pause_s >= 0))
		return -EINVAL;
	if (nroles == sizeof(f->roles) || (nroles && nroles != f->round_calls) ||
	    strspn(f->roles, "rc") != nroles)
		return -EINVAL;
	if (nsteps == sizeof(f->steps) || (nsteps && nsteps != f->round_calls) ||
	    strspn(f->steps, ".p") != nsteps || f->steps[0] == 'p')
		return -EINVAL;
	return 0;
}

/* One session's growing text: its segments and their tokens. */
struct fleet_text {
	struct wl_seg *seg;
	size_t n, cap;
	uint64_t len;
};

static int text_add(struct fleet_text *x, uint64_t seed, uint64_t len)
{
	if (grow((void **)&x->seg, &x->cap, x->n + 1, sizeof(*x->seg)))
		return -ENOMEM;
	x->seg[x->n++] = (struct wl_seg){ seed, 0, len };
	x->len += len;
	return 0;
}

/* Adds the call whose prompt is the first nseg segments of x (base tokens)
 * and the segment own. */
static int fleet_add_call(struct wl *out, struct wl_call *c, const struct fleet_text *x,
			  size_t nseg, struct wl_seg own)
{
	size_t i;

	c->first = out->nsegs;
	c->n = (uint32_t)(nseg + 1);
	for (i = 0; i < nseg; i++)
		if (wl_add_seg(out, x->seg[i]))
			return -ENOMEM;
	if (wl_add_seg(out, own) || wl_add_call(out, c))
		return -ENOMEM;
	return 0;
}

/* Generates session s's calls into out. */
static int fleet_session(const struct wl_fleet *f, uint32_t s, uint64_t common_seed,
			 const struct wl_think *think, struct wl_rng *r, struct fleet_text *x,
			 struct wl *out)
{
	uint64_t sseed = f->seed * 0x100000001b3ull + s + 1, mat, ans, base_len = 0;
	uint32_t round, k, turn = 0;
	size_t base = 0;
	struct wl_call c;

	x->n = 0;
	x->len = 0;
	if (text_add(x, common_seed, f->shared_tokens))
		return -ENOMEM;
	for (round = 0; round < f->rounds; round++) {
		if (round && text_add(x, wl_splitmix64(&sseed),
				      lognormal_tokens(r, f->fail_median, 0.5, 64, f->max_context)))
			return -ENOMEM;
		for (k = 0; k < f->round_calls; k++) {
			if (f->steps[0] == 0 || f->steps[k] != 'p') {
				base = x->n; /* after the step before: all the text so far */
				base_len = x->len;
			}
			mat = lognormal_tokens(r, f->step_median, 0.5, 64, f->max_context);
			ans = lognormal_tokens(r, f->answer_median, 0.8, 16, 4096);
			if (base_len + mat + ans > f->max_context)
				return 0; /* the session ends: its next call would not fit */
			memset(&c, 0, sizeof(c));
			c.session = s;
			c.turn = turn;
			c.prompt_tokens = base_len + mat;
			c.output_tokens = ans;
			c.role = f->roles[0] ? (f->roles[k] == 'r' ? 1 : 2) : 0;
			c.think_s = turn == 0 ? 0 : k == 0 ? f->pause_s : wl_think_sample(think, r);
			c.beside = f->steps[0] && f->steps[k] == 'p';
			if (c.beside)
				c.think_s = 0;
			c.arrival_s = -1;
			{
				struct wl_seg own = { wl_splitmix64(&sseed), 0, mat };

				if (fleet_add_call(out, &c, x, base, own) ||
				    text_add(x, own.seed, mat) ||
				    text_add(x, wl_splitmix64(&sseed), ans))
					return -ENOMEM;
			}
			turn++;
		}
	}
	return 0;
}

/* One session's role texts (role_text): each step's stream, its length so
 * far and its last answer. */
struct role_state {
	uint64_t len[WL_FLEET_MAX_CALLS], ans[WL_FLEET_MAX_CALLS], stream[WL_FLEET_MAX_CALLS];
	uint64_t common_seed;
	uint32_t session, turn;
};

/* Appends call j of step k's loop (after the first, the call before, its
 * tool call and the tool's output join the text); beside: it runs beside
 * the call before it. Returns 0, 1 when it would not fit the context (the
 * session ends), or -ENOMEM. */
static int role_call(const struct wl_fleet *f, struct role_state *x, uint32_t k, uint32_t j,
		     int beside, double think_s, struct wl_rng *r, struct wl *out)
{
	struct wl_call c;

	if (j) /* the call before, its tool call, the tool's output */
		x->len[k] += x->ans[k] + lognormal_tokens(r, f->tool_median, 0.8, 16, f->max_context);
	x->ans[k] = j + 1 < f->tool_calls
			    ? lognormal_tokens(r, f->tool_answer_median, 0.8, 16, 4096)
			    : lognormal_tokens(r, f->answer_median, 0.8, 16, 4096);
	if (x->len[k] + x->ans[k] > f->max_context)
		return 1;
	memset(&c, 0, sizeof(c));
	c.session = x->session;
	c.turn = x->turn++;
	c.prompt_tokens = x->len[k];
	c.output_tokens = x->ans[k];
	c.role = f->roles[0] ? (f->roles[k] == 'r' ? 1 : 2) : 0;
	c.think_s = beside ? 0 : think_s;
	c.beside = beside;
	c.arrival_s = -1;
	c.first = out->nsegs;
	c.n = 2;
	if (wl_add_seg(out, (struct wl_seg){ x->common_seed, 0, f->shared_tokens }) ||
	    wl_add_seg(out, (struct wl_seg){ x->stream[k], f->shared_tokens,
					     x->len[k] - f->shared_tokens }) ||
	    wl_add_call(out, &c))
		return -ENOMEM;
	return 0;
}

/* Generates session s's calls into out when each role has a text of its
 * own (role_text); a step is tool_calls calls, each after the first
 * resending the one before, its answer and the tool's output, and arriving
 * when it is done (the tool's own time is not modelled) or, with
 * tool_think, a think time after the start of the call before. Steps marked 'p'
 * run beside the step before them: the two loops go in step, call j of
 * each arriving together once both calls j - 1 are done. */
static int fleet_session_roles(const struct wl_fleet *f, uint32_t s, uint64_t common_seed,
			       const struct wl_think *think, struct wl_rng *r, struct wl *out)
{
	uint64_t sseed = f->seed * 0x100000001b3ull + s + 1, fail;
	struct role_state x;
	uint32_t k, m, n, j, round;
	double think_s;
	int rc;

	memset(&x, 0, sizeof(x));
	x.common_seed = common_seed;
	x.session = s;
	for (k = 0; k < f->round_calls; k++) {
		x.stream[k] = wl_splitmix64(&sseed);
		x.len[k] = f->shared_tokens + lognormal_tokens(r, f->role_median, 0.5, 256,
							       f->max_context / 2);
	}
	for (round = 0; round < f->rounds; round++) {
		fail = round ? lognormal_tokens(r, f->fail_median, 0.5, 64, f->max_context) : 0;
		for (k = 0; k < f->round_calls; k += n) {
			/* step k and the steps that run beside it */
			for (n = 1; k + n < f->round_calls && f->steps[0] && f->steps[k + n] == 'p';)
				n++;
			for (m = 0; round && m < n; m++) /* its previous prompt, answer, the tests */
				x.len[k + m] += x.ans[k + m] + fail;
			for (j = 0; j < f->tool_calls; j++)
				for (m = 0; m < n; m++) {
					if (x.turn == 0 || (j && !(f->tool_think && m == 0)))
						think_s = 0;
					else if (j == 0 && k == 0)
						think_s = f->pause_s;
					else
						think_s = wl_think_sample(think, r);
					rc = role_call(f, &x, k + m, j, m > 0, think_s, r, out);
					if (rc)
						return rc > 0 ? 0 : rc;
				}
		}
	}
	return 0;
}

int wl_generate_fleet(const struct wl_fleet *f, struct wl *out)
{
	struct fleet_text x = { 0 };
	struct wl_rng r;
	struct wl_think think;
	uint64_t sst, common_seed;
	uint32_t s;
	int err;

	wl_init(out, WL_TOKENS);
	err = fleet_check(f);
	if (err)
		return err;
	wl_rng_seed(&r, f->seed ^ 0x666c656574ull); /* "fleet" */
	wl_think_fit(&think, f->think_p50, f->think_p90, f->think_cap);
	sst = f->seed ^ 0x7461736b74657874ull; /* "tasktext" */
	common_seed = wl_splitmix64(&sst);
	for (s = 0; s < f->sessions && !err; s++)
		err = f->role_text ? fleet_session_roles(f, s, common_seed, &think, &r, out)
				   : fleet_session(f, s, common_seed, &think, &r, &x, out);
	free(x.seg);
	if (!err)
		err = wl_index_sessions(out, f->sessions);
	if (err)
		wl_free(out);
	return err;
}

/* --- reuse statistics --------------------------------------------------------------- */

struct seed_ext {
	uint64_t seed;
	uint64_t end;   /* tokens [0, end) of the stream have been sent */
	uint32_t owner; /* the session that sent them first */
	int used;
};

int wl_reuse_stats(const struct wl *w, uint64_t max_context, struct wl_reuse *out)
{
	struct seed_ext *tab;
	size_t cap = 64, i, k, h;
	double same = 0, cross = 0, all = 0, ans = 0;

	memset(out, 0, sizeof(*out));
	if (w->kind != WL_TOKENS || !w->ncalls)
		return 0;
	while (cap < 2 * w->nsegs + 2)
		cap *= 2;
	tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (i = 0; i < w->ncalls; i++) {
		const struct wl_call *c = &w->calls[i];
		uint64_t left = c->prompt_tokens;

		all += (double)c->prompt_tokens;
		ans += (double)c->output_tokens;
		if (c->prompt_tokens > out->max_prompt)
			out->max_prompt = c->prompt_tokens;
		if (max_context && c->prompt_tokens + c->output_tokens > max_context)
			out->over_context++;
		for (k = 0; k < c->n && left; k++) {
			const struct wl_seg *sg = &w->segs[c->first + k];
			uint64_t len = sg->len < left ? sg->len : left, seen;

			left -= len;
			if (sg->seed == WL_SEG_EXPLICIT)
				continue;
			h = (size_t)(sg->seed * 0x9e3779b97f4a7c15ull) & (cap - 1);
			while (tab[h].used && tab[h].seed != sg->seed)
				h = (h + 1) & (cap - 1);
			if (!tab[h].used) {
				tab[h].used = 1;
				tab[h].seed = sg->seed;
				tab[h].owner = c->session;
			}
			seen = tab[h].end > sg->off ? tab[h].end - sg->off : 0;
			if (seen > len)
				seen = len;
			if (tab[h].owner == c->session)
				same += (double)seen;
			else
				cross += (double)seen;
			if (sg->off + len > tab[h].end)
				tab[h].end = sg->off + len;
		}
	}
	free(tab);
	out->prompt_mean = all / (double)w->ncalls;
	out->answer_mean = ans / (double)w->ncalls;
	out->keys_per_call = out->prompt_mean / 16.0;
	out->same_session = all > 0 ? same / all : 0;
	out->cross_session = all > 0 ? cross / all : 0;
	out->fresh = all > 0 ? 1 - out->same_session - out->cross_session : 0;
	return 0;
}
