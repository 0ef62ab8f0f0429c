/*
 * replay_cli.h - what the "kvbench replay" and "kvbench sweep" commands
 * share between their option parsing (replay_cli.c) and the loop over their
 * runs (replay_runs.c), and what describes a run's set-up
 * (replay_config.c): the parsed command line and the steps of a run.
 */
#ifndef KVT_REPLAY_CLI_H
#define KVT_REPLAY_CLI_H

#include <stdio.h>

#include <jansson.h>

#include "bench.h"
#include "replay.h"
#include "trace.h"
#include "workload.h"

#define MAX_POLICIES 8
#define MAX_VALUES 64

struct cli {
	const char *cmd;
	struct replay_opts o;
	struct wl_gen gen;
	struct wl_fleet fleet;
	int fleet_wl;    /* generate the agent fleet's sessions (fleet presets) */
	struct bench_common co;
	const char *preset;
	const char *trace;
	enum trace_format trace_format;
	uint32_t trace_block_tokens;
	uint64_t sessions_limit;
	enum replay_policy pol[MAX_POLICIES];
	size_t npol;
	const char *csv;
	/* sweep */
	const char *over;
	double values[MAX_VALUES];
	size_t nvalues;
	int per_width;   /* fleet: use max(16, 4 x width) sessions a run */
	unsigned nseeds; /* generator seeds each point runs with (--seeds;
			    0 until run_all: 3 for a sweep, else 1) */
};

/* Loads or generates the workload (the generator's seed from c) and fixes
 * what depends on it. Returns 0 or BENCH_EXIT_*. */
int load_workload(struct cli *c, struct wl *w);
/* Fills in a sweep's parameter and values where not given and checks the
 * values. Returns 0 or BENCH_EXIT_USAGE. */
int sweep_prepare(struct cli *c);
/* Prints what is replayed: the workload, the engine model, the store. */
void describe(FILE *f, const struct cli *c, const struct wl *w);
/* The replay's configuration as a JSON object. */
json_t *config_json(const struct cli *c, const struct wl *w);
/* Adds the preset's published figures to doc's configuration. */
void add_published(json_t *doc, const char *preset);
/* Sets a swept parameter p (a --over name) to v in o. */
void set_param(struct replay_opts *o, const char *p, double v);

/* parse -> run -> report: loads the workload, runs every point (once per
 * generator seed of --seeds), reports them; a stop signal ends the run in
 * progress and keeps what was measured. Returns the exit status. */
int run_all(struct cli *c, int sweep);

#endif
