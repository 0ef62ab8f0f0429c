/*
 * replay.h - kvbench's replay of agent-fleet workloads and request traces on
 * the real store: the engine model (endpoints with a GPU prefix cache and
 * soft-sticky routing), the schedulers of the seed study (active sessions
 * with think times, minimum reuse distance, trace arrival times), the store
 * policies compared, and the report of one run.
 *
 * Uses only the public <kvtier.h>; knows nothing about the library's
 * internals nor about how the report is printed (replay_report.c) or how the
 * command line is read (replay_cli.c).
 */
#ifndef KVBENCH_REPLAY_H
#define KVBENCH_REPLAY_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "workload.h"

/* Where the tokens of a prompt came from. */
enum replay_tier { T_GPU = 0, T_RAM, T_DISK, T_PEER, T_MISS, T_NTIERS };
extern const char *const replay_tier_name[T_NTIERS];

enum replay_sched {
	SCHED_ACTIVE = 0, /* a fixed number of active sessions with think times */
	SCHED_DISTANCE,   /* a minimum reuse distance of N other completed calls */
	SCHED_ARRIVAL,    /* calls arrive at their trace timestamps */
};

enum replay_policy {
	POL_DEFAULT = 0, /* RAM + disk tier with the library's defaults */
	POL_RAM_ONLY,    /* no disk tier */
	POL_REFUSE,      /* RAM + disk, RAM refuses puts when all is leased (Mooncake) */
	POL_GPU_ONLY,    /* no store: GPU prefix cache alone */
	POL_RECOMPUTE,   /* no store, no GPU cache: every token is prefilled */
	POL_N
};
extern const char *const replay_policy_name[POL_N];
/* "default", "ram+disk" (the same), "ram-only", "refuse", "gpu-only",
 * "recompute". Returns 0 or -EINVAL. */
int replay_policy_parse(const char *s, enum replay_policy *out);

#define REPLAY_NODES_MAX 8
#define REPLAY_SEEDS_MAX 16 /* generator seeds a point runs with (--seeds) */
/* The figures a run keeps of every seed it was made with (seed_fig):
 * saved_store, saved_store_union, disk_of_saving. */
enum { SEED_SAVED, SEED_UNION, SEED_DISK, SEED_FIGS };

struct replay_opts {
	/* engine model */
	uint32_t endpoints;        /* E */
	uint64_t gpu_tokens;       /* GPU prefix cache per endpoint, tokens */
	uint32_t gpu_block;        /* tokens per GPU block (token workloads) */
	uint32_t chunk_tokens;     /* tokens per store block (multiple of gpu_block) */
	uint64_t sticky_slack;     /* queued tokens a preferred endpoint may lag by */
	double prefill_rate;       /* tokens/s of one endpoint */
	double decode_rate;        /* output tokens/s of a call decoding alone */
	double decode_growth;      /* per-token time grows by this share of the
				    * single call's for each other call in the
				    * batch: 1 / decode_rate x (1 + g (B - 1)) */
	int disaggregated;         /* decode on GPUs of its own (prefill x decode
				    * replicas): every call at decode_rate, never
				    * waiting for a prefill */
	int gpu_hold;              /* a call's KV takes its place in the GPU pool
				    * from its prefill to its last token (with
				    * disaggregated, to the end of its prefill):
				    * only the rest keeps earlier prefixes (1) */
	/* schedule */
	enum replay_sched sched;
	uint32_t active;           /* SCHED_ACTIVE: sessions at once */
	double stagger_s;          /* SCHED_ACTIVE: first group spread over */
	uint32_t reuse_distance;   /* SCHED_DISTANCE: N */
	uint32_t max_inflight;     /* SCHED_DISTANCE: calls in flight */
	double speed;              /* simulated s per real s; 0: back to back */
	/* model and bytes */
	const char *model;         /* namespace model id */
	uint64_t kv_bytes_per_token;
	uint32_t scale;            /* block bytes divided by this */
	double charge_scale;       /* measured load time x this is charged (1) */
	/* store */
	enum replay_policy policy;
	uint64_t ram_tokens;       /* RAM tier capacity in tokens (full size) */
	uint64_t disk_tokens;      /* disk tier capacity in tokens (full size) */
	uint64_t lease_ms;         /* simulated ms; scaled by speed for the library */
	int release_leases;        /* end leases once loaded */
	uint32_t threads;          /* library worker threads */
	const char *disk_dir;      /* NULL: a temporary directory */
	uint32_t nodes;            /* store nodes (1..REPLAY_NODES_MAX), peers over
				    * loopback TCP; endpoint e uses node e % nodes;
				    * each node gets the RAM and disk capacities */
	/* output */
	int progress;              /* progress bar on stderr (if a terminal) */
	int (*stop)(void);         /* NULL, or asked between events: nonzero
				    * ends the run early (res->interrupted) */
	const char *label;         /* printed in the report; may be NULL */
};

void replay_opts_defaults(struct replay_opts *o);

/* Bytes of a block of t tokens under o (at least 1). */
uint64_t replay_block_bytes(const struct replay_opts *o, uint64_t tokens);

struct replay_result {
	char label[96];
	enum replay_policy policy;
	uint64_t calls, prompt_tokens, prompt_blocks;
	uint64_t tok[T_NTIERS], blk[T_NTIERS];   /* where prompt tokens came from */
	uint64_t bytes_loaded[T_NTIERS];         /* bytes moved (scaled) per tier */
	uint64_t puts_offered, puts_refused, put_errors, put_bytes;
	uint64_t lookups, lease_truncations;     /* load failures after a lease */
	uint64_t evictions, evicted_bytes, lease_expiries, write_arounds;
	uint64_t disk_evictions;
	/* measured (real) load time of each call's batch get, microseconds */
	double load_p50_us, load_p90_us, load_p99_us, load_max_us;
	double load_total_s;                     /* real */
	double load_ram_s, load_disk_s;          /* batches served by RAM only / touching disk */
	uint64_t load_ram_batches, load_disk_batches;
	double charged_load_s;                   /* simulated: lookup + load x charge_scale,
						  * summed over calls (full charge) */
	double charged_div_s;                    /* the same, each call's divided by the
						  * calls outstanding on its endpoint */
	double fullsize_load_s;                  /* real x scale: full-size bound */
	/* model */
	double busy_s, makespan_s, throughput;   /* simulated */
	double busy_union_s;                     /* time any endpoint is busy */
	double prefill_s, decode_s;              /* GPU time prefilling, decoding */
	double mean_outstanding;                 /* calls outstanding, mean over busy time */
	double mean_running;                     /* the same, mean over the makespan */
	double store_gib_900s;                   /* full-size GiB the store served per
						  * 900 simulated seconds of makespan */
	/* each endpoint's GPU pool (gpu_hold), means over the makespan and
	 * the endpoints: calls holding KV, their prompt + answer tokens (mean
	 * over the time they run), the tokens they hold, the tokens of earlier
	 * prefixes kept beside them, the share of time a call waits for room
	 * in the pool; the tokens a second entering it (prefilled or loaded
	 * from the store); and the calls per endpoint and 900 s that waited
	 * for room (a serving engine's nearest event: a preemption) */
	double ep_running, ep_context, ep_running_kv, ep_prefix_kv, pool_wait;
	double ep_intake, pool_waits_900s;
	/* shares of busy time (replay_savings) */
	double saved_store;                      /* gross: store tokens / prefill rate */
	double saved_store_net;                  /* net of the full charge */
	double saved_store_net_div;              /* net of the divided charge */
	double saved_disk;                       /* the disk tier's part of saved_store */
	double disk_of_saving;                   /* saved_disk / saved_store */
	double saved_gpu;                        /* GPU cache tokens / prefill rate */
	double saved_store_union;                /* gross over busy_union_s */
	double ttft_p50, ttft_p90, ttft_p99;     /* simulated seconds */
	uint64_t sticky_stay, sticky_spill, relaxed;
	/* the trace's bound: an unbounded cache in this order */
	uint64_t bound_blk, bound_tok, total_blk;
	/* reuse by age: the time since a prompt last touched the block, at
	 * each lookup of a block touched before (simulated seconds) */
	uint64_t aged_blk;                       /* touches aged past the lease */
	double reuse_p99_s, reuse_max_s;
	/* the run */
	double wall_s, lag_max_s, lag_mean_s;
	double sim_s;
	int interrupted;                         /* stopped by o->stop before every
						  * call was done: the figures are
						  * those of the calls replayed */
	/* generator seeds (kvbench --seeds; set by the command, not the run):
	 * nseeds runs were made of this point, one per seed in seeds[], and
	 * this is the one of seed `seed`, the seed whose run of the point's
	 * first policy had the median gross saving; seed_fig[f][i] is seed
	 * seeds[i]'s figure f (SEED_*) for this run's policy.
	 * nseeds 0: a trace (no seed) */
	unsigned nseeds;
	uint64_t seed;
	uint64_t seeds[REPLAY_SEEDS_MAX];
	double seed_fig[SEED_FIGS][REPLAY_SEEDS_MAX];
	json_t *store_stats;                     /* final kvt_stats_json, or NULL;
						  * with nodes > 1 an array of
						  * every node's, node 0 first */
};

/*
 * Replays w on a fresh store configured from o and fills *res. When o->stop
 * asks to stop, the run ends there with res->interrupted set and its figures
 * over the calls that arrived (those in flight counted to the time reached);
 * that is no error. Returns 0; a
 * negative errno with a message in err when the store cannot be opened or
 * fails, or -EILSEQ when a loaded block's bytes differ from what was stored
 * (a fatal bench error).
 */
int replay_run(const struct replay_opts *o, const struct wl *w,
	       struct replay_result *res, char *err, size_t errlen);

void replay_result_free(struct replay_result *r);

/* A call's time outstanding on an endpoint, simulated seconds. */
struct replay_interval {
	double start, end;
};

/* The length of the union of v[0..n) (sorts v by start). An endpoint's busy
 * time is this over its calls: time with at least one call outstanding. */
double replay_busy_union(struct replay_interval *v, size_t n);

/*
 * Fills res's shares of busy time from its tok[], busy_s, charged_load_s
 * and charged_div_s: the prefill the store avoided (tokens served by RAM,
 * disk and peers / prefill_rate) over busy_s, gross, net of the full charge
 * and net of the divided one; the disk tier's part and its share of the
 * saving; and the GPU cache's. All 0 when busy_s is 0. Also the gross
 * saving over busy_union_s (0 when that is 0).
 */
void replay_savings(struct replay_result *res, double prefill_rate);

/* --- the report (replay_report.c) --------------------------------------------------- */

/* A figure published by the seed study (or the Mooncake paper) to print
 * beside a measured one. */
struct replay_ref {
	const char *field;  /* a report field: "gpu_share", "store_share", ... */
	const char *policy; /* the run it compares with (a policy name), NULL any */
	double value;       /* in the field's unit (percent, seconds, calls/s) */
	const char *note;   /* where it comes from */
};

/* The published figures for a preset (NULL-terminated array, or NULL). */
const struct replay_ref *replay_refs(const char *preset);

/* The agent-fleet study's saving at a fleet width, percent of endpoint busy
 * time (NAN where it published none). */
struct replay_study_point {
	unsigned width;
	double gross_lo, gross_hi; /* the range of its measurements */
	double net_div;            /* net, load time / requests in flight */
	double net_full;           /* net, every load in full */
	double disk_share;         /* the disk tier's share of gross */
	const char *note;
};

/* The study's figures at width (NULL at a width it did not measure). */
const struct replay_study_point *replay_study_width(double width);
/* Adds "study" (the figures above, or null), "study_factor" (the run's
 * saved_store over the study's range: 1 inside, else measured / the nearer
 * end) and "study_factor_union" (the same of saved_store_union) to a run's
 * JSON object o, which already holds both. */
void replay_study_json(json_t *o, double width);

/* Prints the runs as a table, one column per run; under a sweep over
 * width (sweep_param "width", one value per run) the study's figures too. */
void replay_print(FILE *f, const struct replay_result *r, size_t n,
		  const char *preset, const char *sweep_param, const double *sweep_values);
/* The disk tier's share of run k's gross saving as the study measured it:
 * (saved_store of k - that of a ram-only run) / saved_store of k, percent,
 * where k runs the default policy and a ram-only run of r[0..n) has the
 * same sweep value (xs, or any with xs NULL); else NAN. */
double replay_disk_by_difference(const struct replay_result *r, size_t n, const double *xs,
				 size_t k);
/* One JSON object per run. */
json_t *replay_result_json(const struct replay_result *r);
/* Writes the runs as CSV (a header line, one line per run). Returns 0 or
 * -errno (message on stderr). */
int replay_write_csv(const char *path, const struct replay_result *r, size_t n,
		     const char *sweep_param, const double *sweep_values);

#endif
