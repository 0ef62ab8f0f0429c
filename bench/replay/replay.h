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

struct replay_opts {
	/* engine model */
	uint32_t endpoints;        /* E */
	uint64_t gpu_tokens;       /* GPU prefix cache per endpoint, tokens */
	uint32_t gpu_block;        /* tokens per GPU block (token workloads) */
	uint32_t chunk_tokens;     /* tokens per store block (multiple of gpu_block) */
	uint64_t sticky_slack;     /* queued tokens a preferred endpoint may lag by */
	double prefill_rate;       /* tokens/s of one endpoint */
	double decode_rate;        /* output tokens/s of one request */
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
	double charged_load_s;                   /* simulated: real x charge_scale */
	double fullsize_load_s;                  /* real x scale: full-size bound */
	/* model */
	double busy_s, makespan_s, throughput;   /* simulated */
	double saved_store, saved_store_net, saved_gpu; /* shares of busy time */
	double ttft_p50, ttft_p90, ttft_p99;     /* simulated seconds */
	uint64_t sticky_stay, sticky_spill, relaxed;
	/* the trace's bound: an unbounded cache in this order */
	uint64_t bound_blk, bound_tok, total_blk;
	/* the run */
	double wall_s, lag_max_s, lag_mean_s;
	double sim_s;
	json_t *store_stats;                     /* final kvt_stats_json, or NULL;
						  * with nodes > 1 an array of
						  * every node's, node 0 first */
};

/*
 * Replays w on a fresh store configured from o and fills *res. Returns 0; a
 * negative errno with a message in err when the store cannot be opened or
 * fails, or -EILSEQ when a loaded block's bytes differ from what was stored
 * (a fatal bench error).
 */
int replay_run(const struct replay_opts *o, const struct wl *w,
	       struct replay_result *res, char *err, size_t errlen);

void replay_result_free(struct replay_result *r);

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

/* Prints the runs as a table, one column per run. */
void replay_print(FILE *f, const struct replay_result *r, size_t n,
		  const char *preset);
/* One JSON object per run. */
json_t *replay_result_json(const struct replay_result *r);
/* Writes the runs as CSV (a header line, one line per run). Returns 0 or
 * -errno (message on stderr). */
int replay_write_csv(const char *path, const struct replay_result *r, size_t n,
		     const char *sweep_param, const double *sweep_values);

#endif
