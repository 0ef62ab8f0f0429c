/*
 * workload.h - the calls a replay drives through the engine model: the
 * in-memory workload (sessions of calls whose prompts are token streams, or
 * trace calls made of prefix-block ids), the deterministic generator of
 * agent sessions calibrated to the seed study, and the PRNG behind it.
 *
 * Knows nothing about the store, the engine model or trace file formats
 * (trace.c fills a workload from a file through the wl_* builders below).
 */
#ifndef KVBENCH_WORKLOAD_H
#define KVBENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

/* --- PRNG: xoshiro256** seeded through splitmix64 (never rand()) ------------- */

struct wl_rng {
	uint64_t s[4];
};

uint64_t wl_splitmix64(uint64_t *state);
void wl_rng_seed(struct wl_rng *r, uint64_t seed);
uint64_t wl_rng_next(struct wl_rng *r);
/* Uniform in [0, 1). */
double wl_rng_uniform(struct wl_rng *r);
/* Uniform integer in [lo, hi] (inclusive); lo when hi < lo. */
uint64_t wl_rng_range(struct wl_rng *r, uint64_t lo, uint64_t hi);
/* Standard normal (Box-Muller). */
double wl_rng_normal(struct wl_rng *r);

/* --- think time: clipped log-normal ------------------------------------------ */

/*
 * A log-normal fitted to a median and a 90th percentile, clipped at cap
 * seconds. The study's start-to-start interval: p50 5.16 s, p90 23.44 s
 * (which give mean 10.36 s and p99 80.56 s), cap 300 s.
 */
struct wl_think {
	double mu, sigma, cap;
};
void wl_think_fit(struct wl_think *t, double p50, double p90, double cap);
double wl_think_sample(const struct wl_think *t, struct wl_rng *r);
/* Mean of the clipped distribution (numerical integration). */
double wl_think_mean(const struct wl_think *t);

/* --- workloads --------------------------------------------------------------- */

/* How the tokens of a call's prompt are described. */
enum wl_kind {
	WL_TOKENS = 0, /* token streams (segments), hashed into 16-token blocks */
	WL_BLOCKS = 1, /* prefix-block ids of a fixed token size (Mooncake traces) */
};

/*
 * A run of tokens: seed != WL_SEG_EXPLICIT: token at absolute position
 * off + i is wl_token(seed, off + i); seed == WL_SEG_EXPLICIT: tokens
 * wl->tok[off .. off + len).
 */
#define WL_SEG_EXPLICIT UINT64_MAX
struct wl_seg {
	uint64_t seed, off, len;
};

#define WL_NO_SESSION UINT32_MAX

struct wl_call {
	uint32_t session;        /* index into sessions, or WL_NO_SESSION */
	uint32_t turn;           /* 0-based turn within the session */
	uint64_t prompt_tokens;  /* tokens of the prompt */
	uint64_t output_tokens;  /* tokens of the answer */
	double think_s;          /* start-to-start gap after the session's previous call */
	double arrival_s;        /* absolute arrival in simulated seconds, or < 0 */
	size_t first;            /* WL_TOKENS: first segment; WL_BLOCKS: first id */
	uint32_t n;              /* number of segments or ids */
	uint32_t role;           /* 0: routed by the engine model; k > 0: served
				  * by endpoint (k - 1) mod endpoints (the
				  * fleet's roles, each its own server) */
	int beside;              /* runs beside the session's call before it:
				  * arrives with it, not after it is done (the
				  * active schedule; the fleet's parallel steps) */
};

struct wl_session {
	size_t first_call; /* index of its first call in wl.calls */
	uint32_t ncalls;
};

struct wl {
	enum wl_kind kind;
	uint32_t block_tokens;   /* WL_BLOCKS: tokens per id (512 for Mooncake) */
	int timed;               /* calls carry arrival_s */
	struct wl_call *calls;
	size_t ncalls, cap_calls;
	struct wl_session *sessions;
	size_t nsessions, cap_sessions;
	struct wl_seg *segs;     /* WL_TOKENS */
	size_t nsegs, cap_segs;
	uint32_t *tok;           /* explicit token ids */
	size_t ntok, cap_tok;
	uint64_t *ids;           /* WL_BLOCKS */
	size_t nids, cap_ids;
};

/* The token id at absolute position pos of the stream seed (vocab 151,936). */
uint32_t wl_token(uint64_t seed, uint64_t pos);

/* Writes the prompt of call c into tokens[0 .. c->prompt_tokens). */
void wl_call_tokens(const struct wl *w, const struct wl_call *c, uint32_t *tokens);

/* Builders (return 0 or -ENOMEM). */
void wl_init(struct wl *w, enum wl_kind kind);
void wl_free(struct wl *w);
int wl_add_call(struct wl *w, const struct wl_call *c);
int wl_add_seg(struct wl *w, struct wl_seg s);
int wl_add_tokens(struct wl *w, const uint32_t *t, size_t n, size_t *off);
int wl_add_id(struct wl *w, uint64_t id);
/* Groups calls into sessions: stable-sorts the calls by session (keeping
 * each session's calls in their order) and fills w->sessions (sessions are
 * numbered 0..nsessions-1). Returns 0, -ENOMEM or -EINVAL (a call names a
 * session >= nsessions). */
int wl_index_sessions(struct wl *w, uint32_t nsessions);

/* --- the generator ------------------------------------------------------------ */

#define WL_NGROUPS 4

struct wl_gen {
	uint64_t seed;
	uint32_t sessions;               /* 256 */
	uint32_t calls;                  /* 7,903 */
	uint32_t group_calls[WL_NGROUPS];/* 1,116 / 3,061 / 2,779 / 947 */
	uint64_t group_edge[WL_NGROUPS + 1]; /* token bounds: min, 32K, 64K, 96K, max */
	uint32_t shared_tokens;          /* leading task text common to all sessions */
	double think_p50, think_p90, think_cap;
};

/* The study's prepared workload (the defaults above). */
void wl_gen_defaults(struct wl_gen *g);

/*
 * Generates the sessions: every call's prompt is the session's previous
 * prompt + the previous answer + new tokens, every session starts with the
 * shared task text, prompt lengths fall in the configured groups (exactly,
 * up to the minimum growth of 64 tokens a turn), think times follow the
 * clipped log-normal. Deterministic for g->seed. Returns 0, -EINVAL for
 * inconsistent parameters (group counts not summing to calls, fewer than 2
 * calls a session, empty groups), or -ENOMEM.
 */
int wl_generate(const struct wl_gen *g, struct wl *out);

/* --- the agent-fleet generator ------------------------------------------------ */

/*
 * The agent-fleet study's sessions (adev): a session runs up to `rounds`
 * rounds of `round_calls` model calls, one a step of its fixed loop
 * (architect, contract, test writer, implementers, integrator), each
 * step's role on a server of its own. Two readings of what the steps of a
 * round share: with role_text each role continues a text of its own (see
 * role_text below); without it a session is one text that grows:
 * it begins with the leading task text shared by all sessions; a step's
 * prompt is the session's text so far followed by the step's own new
 * material, and the step's material and answer are then appended to the
 * text, so the next step sees them (the contract sees the architect's
 * split, the tests the contract, ...). Steps marked 'p' in `steps` run
 * beside the step before them (the implementers work in parallel): they
 * see the same text it saw, not its material or answer. A later round
 * begins, after a pause (the test gate), with the full text of the round
 * before plus the failing tests' text. No call's prompt + answer exceeds
 * max_context: a session whose next call would not fit ends there, as a
 * framework that always resends the full earlier text must.
 */
#define WL_FLEET_MAX_CALLS 15
#define WL_FLEET_MAX_TOOL 64
struct wl_fleet {
	uint64_t seed;
	uint32_t sessions;        /* 256 */
	uint32_t rounds;          /* 3 (the study) */
	uint32_t round_calls;     /* 6 (assumed), at most WL_FLEET_MAX_CALLS */
	char roles[WL_FLEET_MAX_CALLS + 1]; /* the server of each call of a
				   * round: 'r' (reasoner, role 1) or 'c'
				   * (coder, role 2); "rrcccr" (assumed); ""
				   * leaves routing to the engine model. Else
				   * round_calls long */
	char steps[WL_FLEET_MAX_CALLS + 1]; /* per call of a round: 'p' runs
				   * beside the call before it (same text,
				   * arriving with it: wl_call.beside), '.'
				   * after it; "....p." (the two
				   * implementers); "" all '.'. Else
				   * round_calls long, never 'p' first. With
				   * role_text a 'p' step's loop runs beside
				   * the loop of the step before: call j of
				   * each arrives together, once both calls
				   * j - 1 are done */
	int role_text;            /* 1 (the default): each role a text of its
				   * own instead: a role's prompt is the task
				   * text and its own material, and in a later
				   * round its previous prompt, its answer and
				   * the failing tests (no sharing between the
				   * steps of a round);
				   * 0: the session's one growing text (above) */
	uint64_t max_context;     /* 65,536 (the study) */
	uint32_t shared_tokens;   /* 864: the leading task text */
	double step_median;       /* a step's own new material: 896 */
	double role_median;       /* role_text: a role's own material in
				   * round 1: 2,048 (12,288 with one call a
				   * step) */
	double fail_median;       /* failing-test text of a later round: 2,048 */
	uint32_t tool_calls;      /* role_text: model calls a step makes, an
				   * agent loop: each call after the first
				   * resends the one before, its answer (a tool
				   * call) and the tool's output: 4 (1: one
				   * call a step). At most WL_FLEET_MAX_TOOL;
				   * the session text has no loop */
	int tool_think;           /* 0 (the default): a loop's call after the
				   * first arrives when the call before is done
				   * (the tool takes no time); 1: a think time
				   * after the start of the call before, as a
				   * step's first call */
	double tool_median;       /* a tool's output: 2,048 */
	double tool_answer_median;/* a tool call's answer: 96 */
	double answer_median;     /* 600 */
	double think_p50, think_p90, think_cap; /* gaps inside a round */
	double pause_s;           /* 300: between rounds (the study's pause) */
};

void wl_fleet_defaults(struct wl_fleet *f);
/* Generates the sessions above, deterministic for f->seed. Returns 0,
 * -EINVAL (no sessions, rounds or calls, a context too small for the shared
 * text, bad medians or think times) or -ENOMEM. */
int wl_generate_fleet(const struct wl_fleet *f, struct wl *out);

/*
 * What a token workload's prompts touch, counted per token in session
 * order: a token is same-session reuse when its session sent it before,
 * cross-session reuse when another session did first, new otherwise
 * (explicit trace tokens count as new). Also the mean prompt, its 16-token
 * blocks (the study's store keys a call) and the calls whose prompt +
 * answer exceed max_context (0: not counted).
 */
struct wl_reuse {
	double prompt_mean, answer_mean, keys_per_call;
	double same_session, cross_session, fresh;  /* shares of prompt tokens */
	uint64_t over_context;
	uint64_t max_prompt;
};
int wl_reuse_stats(const struct wl *w, uint64_t max_context, struct wl_reuse *out);

/* Keeps the first n sessions of w (all when n >= w->nsessions). */
void wl_truncate_sessions(struct wl *w, size_t n);

#endif
