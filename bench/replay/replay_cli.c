/*
 * replay_cli.c - the "kvbench replay" and "kvbench sweep" commands: their
 * options, the presets that reproduce the seed study's experiments, the
 * workload they load or generate and the configuration they print; the
 * loop over their runs is replay_runs.c.
 *
 * Knows nothing about how a run works inside (replay.c) or how the report
 * is laid out (replay_report.c).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "replay.h"
#include "replay_cli.h"
#include "trace.h"
#include "workload.h"

static const char usage_replay[] =
	"usage: kvbench replay [--preset NAME] [--trace FILE] [OPTIONS]\n"
	"       kvbench sweep  [--over PARAM --values LIST] [OPTIONS]\n"
	"\n"
	"Replays agent sessions (generated, calibrated to the agent-fleet study) or a trace\n"
	"through a model of inference endpoints in front of a real libkvtier store, and\n"
	"reports where prompt tokens came from and the prefill time the store saved.\n"
	"\n"
	"presets (each sets the options below; later options override):\n"
	"  exp1       16 active sessions with think times, 2 endpoints, 256 GiB RAM\n"
	"             (policies recompute,gpu-only,ram-only,default)\n"
	"  exp2       reuse distance 128, 16 in flight, 2 endpoints, 256 GiB RAM\n"
	"             (policies ram-only,default)\n"
	"  fleet-W    W = 1, 2, 6, 12 or 18 fleet sessions (3 rounds, 300 s pause,\n"
	"             65,536-token context) on 2 endpoints (reasoner, coder),\n"
	"             32 GB RAM + disk; max(16, 4W) generated sessions are replayed\n"
	"  fleet      fleet-12 (policies default,ram-only)\n"
	"  lease      fleet-12 with a 300 s lease (policies default,refuse)\n"
	"  mooncake   trace timestamps, 4 endpoints, 3M-token RAM, 100M-token disk\n"
	"             (policies ram-only,default; give --trace FILE)\n"
	"\n"
	"workload:\n"
	"  --trace FILE            replay FILE instead of generating sessions\n"
	"  --trace-format F        auto (default: from the first line), kvbench, mooncake\n"
	"  --trace-block-tokens N  tokens per Mooncake hash id (512)\n"
	"  --seed N                generator seed (1)\n"
	"  --seeds N               run each point with the N seeds from --seed on\n"
	"                          and show the run whose gross saving is the\n"
	"                          median, with the seeds' range (replay 1, sweep\n"
	"                          3; at most 16)\n"
	"  --sessions N            keep only the first N sessions (all)\n"
	"  --shared-tokens N       leading task text common to all sessions (3072;\n"
	"                          fleet presets 864)\n"	"  --fleet-text T          fleet sessions: role (each role continues a text of\n"
	"                          its own) or session (each step's prompt is the\n"
	"                          session's text so far plus its own material) (role)\n"
	"  --pause SEC             fleet sessions: the pause between rounds, the test\n"
	"                          gate (300; 0: the study's runs without pause)\n"
	"  --tool-calls N          fleet role text: model calls a step makes, each\n"
	"                          after the first resending the one before, its\n"
	"                          tool call and the tool's output (4)\n"
	"  --tool-think on|off     fleet role text: a loop's call after the first\n"
	"                          arrives a think time after the start of the call\n"
	"                          before, as a step's first call does (off: as soon\n"
	"                          as it is done; the tool takes no time)\n"
	"  --tool-tokens N         median tool output, tokens (2048)\n"
	"  --tool-answer N         median tool-call answer, tokens (96)\n"
	"  --role-tokens N         fleet role text: median material of a role's first\n"
	"                          call (2048)\n"
	"schedule:\n"
	"  --schedule S            active | distance | arrival (traces with times)\n"
	"  --active N, --width N   sessions active at once (16)\n"
	"  --stagger SEC           the first group starts spread over SEC (30)\n"
	"  --reuse-distance N      other calls that must complete before a\n"
	"                          session's next turn (128; implies --schedule distance)\n"
	"  --max-inflight N        calls in flight under --schedule distance (16)\n"
	"  --speed X|max           simulated seconds per real second; leases and\n"
	"                          think times scale together (preset's default);\n"
	"                          max: back to back, leases in real time\n"
	"engine model:\n"
	"  --endpoints N           inference endpoints (1)\n"
	"  --gpu-tokens N          GPU prefix cache per endpoint, tokens (166512; 0 none)\n"
	"  --gpu-block N           tokens per GPU block (16)\n"
	"  --chunk-tokens N        tokens per store block, a multiple of the GPU block (256)\n"
	"  --sticky-slack N        queued tokens by which a session's endpoint may trail\n"
	"                          the least loaded before the call spills (65536)\n"
	"  --prefill-rate X        prefill tokens/s of an endpoint (14850)\n"
	"  --decode-rate X         output tokens/s of a call decoding alone (60)\n"
	"  --decode-growth X       a batch of B calls decodes at (1 + X (B - 1)) times\n"
	"                          the single call's per-token time (0.25)\n"
	"  --disaggregated         decode on replicas of its own: every call at\n"
	"                          --decode-rate, never waiting for a prefill (exp1,\n"
	"                          exp2, mooncake: prefill and decode served apart)\n"
	"  --gpu-hold on|off       a running call's KV takes its place in the GPU\n"
	"                          pool, whose rest alone keeps prefixes, and a call\n"
	"                          waits until the pool has room for it (on)\n"
	"bytes:\n"
	"  --model NAME            qwen3-coder-30b-a3b (96 KiB/token), llama-3.1-8b\n"
	"                          (128 KiB), llama-3.1-70b (320 KiB)\n"
	"  --kv-bytes-per-token N  instead of a model preset\n"
	"  --scale N               divide block bytes by N (1024)\n"
	"  --charge-scale X        charge X times the measured load time to prefill (1;\n"
	"                          the --scale value charges it as if at full size)\n"
	"store:\n"
	"  --policy LIST           default (= ram+disk), ram-only, refuse (Mooncake-like:\n"
	"                          no lease cap, refuse puts when RAM is all leased),\n"
	"                          gpu-only, recompute; a comma-separated list runs\n"
	"                          each\n"
	"  --ram-tokens N          RAM tier capacity in tokens (K, M, G suffixes)\n"
	"  --ram SIZE              RAM tier capacity as full-size bytes (e.g. 32GiB)\n"
	"  --disk-tokens N         disk tier capacity in tokens\n"
	"  --disk SIZE             disk tier capacity as full-size bytes\n"
	"  --disk-dir DIR          where the disk tier's file goes (a temporary dir)\n"
	"  --lease-ms N            lease length in simulated ms (5000)\n"
	"  --release-leases        end leases once the blocks are loaded\n"
	"  --threads N             library worker threads (2)\n"
	"  --nodes N               store nodes in this process, peers over loopback TCP\n"
	"                          (1..8; 1); endpoint e uses node e mod N; each node\n"
	"                          gets the RAM and disk capacities above\n"
	"output:\n"
	"  --json FILE             results as JSON (\"-\": stdout)\n"
	"  --csv FILE              results as CSV, one line per run\n"
	"  --no-progress           no progress bar on stderr\n"
	"  --reps N                accepted for symmetry; a replay is one run\n"
	"sweep only:\n"
	"  --over PARAM            width, ram-tokens, disk-tokens, reuse-distance,\n"
	"                          lease-ms, endpoints, gpu-tokens, decode-growth\n"
	"                          (width; ram-tokens with --trace)\n"
	"  --values LIST           comma-separated values (K/M suffixes allowed)\n"
	"\n"
	"See kvbench(1) for the trace format and the report's fields.\n";

enum {
	O_PRESET = BENCH_OPT_FIRST_FREE, O_TRACE, O_TRACE_FORMAT, O_TRACE_BT, O_SEED, O_SEEDS, O_SESSIONS,
	O_SHARED, O_SCHEDULE, O_ACTIVE, O_STAGGER, O_DISTANCE, O_INFLIGHT, O_SPEED, O_ENDPOINTS,
	O_GPU_TOKENS, O_GPU_BLOCK, O_CHUNK, O_SLACK, O_PREFILL, O_DECODE, O_MODEL, O_KVBPT,
	O_SCALE, O_POLICY, O_RAM_TOKENS, O_RAM, O_DISK_TOKENS, O_DISK, O_DISK_DIR, O_LEASE,
	O_RELEASE, O_THREADS, O_NODES, O_CSV, O_NO_PROGRESS, O_OVER, O_VALUES, O_CHARGE, O_GROWTH, O_DISAGG, O_FLEET_TEXT,
	O_GPU_HOLD, O_PAUSE, O_TOOL_CALLS, O_TOOL_TOKENS, O_TOOL_ANSWER,
	O_ROLE_TOKENS, O_TOOL_THINK, O_WIDTH
};

static const struct option longopts[] = {
	{ "preset", required_argument, NULL, O_PRESET },
	{ "trace", required_argument, NULL, O_TRACE },
	{ "trace-format", required_argument, NULL, O_TRACE_FORMAT },
	{ "trace-block-tokens", required_argument, NULL, O_TRACE_BT },
	{ "seed", required_argument, NULL, O_SEED },
	{ "seeds", required_argument, NULL, O_SEEDS },
	{ "sessions", required_argument, NULL, O_SESSIONS },
	{ "shared-tokens", required_argument, NULL, O_SHARED },
	{ "fleet-text", required_argument, NULL, O_FLEET_TEXT },
	{ "pause", required_argument, NULL, O_PAUSE },
	{ "tool-calls", required_argument, NULL, O_TOOL_CALLS },
	{ "tool-think", required_argument, NULL, O_TOOL_THINK },
	{ "tool-tokens", required_argument, NULL, O_TOOL_TOKENS },
	{ "tool-answer", required_argument, NULL, O_TOOL_ANSWER },
	{ "role-tokens", required_argument, NULL, O_ROLE_TOKENS },
	{ "schedule", required_argument, NULL, O_SCHEDULE },
	{ "active", required_argument, NULL, O_ACTIVE },
	{ "width", required_argument, NULL, O_WIDTH },
	{ "stagger", required_argument, NULL, O_STAGGER },
	{ "reuse-distance", required_argument, NULL, O_DISTANCE },
	{ "max-inflight", required_argument, NULL, O_INFLIGHT },
	{ "speed", required_argument, NULL, O_SPEED },
	{ "endpoints", required_argument, NULL, O_ENDPOINTS },
	{ "gpu-tokens", required_argument, NULL, O_GPU_TOKENS },
	{ "gpu-block", required_argument, NULL, O_GPU_BLOCK },
	{ "chunk-tokens", required_argument, NULL, O_CHUNK },
	{ "sticky-slack", required_argument, NULL, O_SLACK },
	{ "prefill-rate", required_argument, NULL, O_PREFILL },
	{ "decode-rate", required_argument, NULL, O_DECODE },
	{ "decode-growth", required_argument, NULL, O_GROWTH },
	{ "disaggregated", no_argument, NULL, O_DISAGG },
	{ "gpu-hold", required_argument, NULL, O_GPU_HOLD },
	{ "model", required_argument, NULL, O_MODEL },
	{ "kv-bytes-per-token", required_argument, NULL, O_KVBPT },
	{ "scale", required_argument, NULL, O_SCALE },
	{ "charge-scale", required_argument, NULL, O_CHARGE },
	{ "policy", required_argument, NULL, O_POLICY },
	{ "ram-tokens", required_argument, NULL, O_RAM_TOKENS },
	{ "ram", required_argument, NULL, O_RAM },
	{ "disk-tokens", required_argument, NULL, O_DISK_TOKENS },
	{ "disk", required_argument, NULL, O_DISK },
	{ "disk-dir", required_argument, NULL, O_DISK_DIR },
	{ "lease-ms", required_argument, NULL, O_LEASE },
	{ "release-leases", no_argument, NULL, O_RELEASE },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "nodes", required_argument, NULL, O_NODES },
	{ "csv", required_argument, NULL, O_CSV },
	{ "no-progress", no_argument, NULL, O_NO_PROGRESS },
	{ "over", required_argument, NULL, O_OVER },
	{ "values", required_argument, NULL, O_VALUES },
	BENCH_COMMON_LONGOPTS,
	{ NULL, 0, NULL, 0 }
};

/* A count: a decimal number with an optional fraction and K, M, G (10^3,
 * 10^6, 10^9) suffix. Returns 0 or -EINVAL. */
static int parse_count(const char *s, double max, double *out)
{
	char *end;
	double v;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	if (*end == 'k' || *end == 'K')
		v *= 1e3, end++;
	else if (*end == 'm' || *end == 'M')
		v *= 1e6, end++;
	else if (*end == 'g' || *end == 'G')
		v *= 1e9, end++;
	if (*end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	double v;

	if (parse_count(s, (double)max, &v) || v < (double)min || v != floor(v))
		return -EINVAL;
	*out = (uint64_t)v;
	return 0;
}

static int parse_pos(const char *s, double *out)
{
	return parse_count(s, 1e15, out) || !(*out > 0) ? -EINVAL : 0;
}

static int set_model(struct replay_opts *o, const char *m)
{
	if (!strcmp(m, "qwen3-coder-30b-a3b"))
		o->kv_bytes_per_token = 2ull * 48 * 4 * 128 * 2;
	else if (!strcmp(m, "llama-3.1-8b"))
		o->kv_bytes_per_token = 2ull * 32 * 8 * 128 * 2;
	else if (!strcmp(m, "llama-3.1-70b"))
		o->kv_bytes_per_token = 2ull * 80 * 8 * 128 * 2;
	else
		return -EINVAL;
	o->model = m;
	return 0;
}

static int set_policies(struct cli *c, const char *list)
{
	char buf[256], *tok, *save = NULL;

	/* strtok_r would skip an empty item, which ram and hash refuse */
	if (strlen(list) >= sizeof(buf) || bench_list_has_empty(list))
		return -EINVAL;
	strcpy(buf, list);
	c->npol = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (c->npol == MAX_POLICIES || replay_policy_parse(tok, &c->pol[c->npol]))
			return -EINVAL;
		c->npol++;
	}
	return c->npol ? 0 : -EINVAL;
}

/* Full-size bytes of RAM or disk as tokens of the model. */
static uint64_t bytes_to_tokens(const struct replay_opts *o, uint64_t bytes)
{
	return bytes / o->kv_bytes_per_token;
}

static int apply_preset(struct cli *c, const char *p)
{
	struct replay_opts *o = &c->o;
	unsigned w;

	c->preset = p;
	if (!strcmp(p, "exp1")) {
		o->endpoints = 2;
		o->sched = SCHED_ACTIVE;
		o->active = 16;
		o->stagger_s = 30;
		o->ram_tokens = bytes_to_tokens(o, 256ull << 30);
		o->disk_tokens = 32ull << 20;
		o->speed = 600;
		o->disaggregated = 1;
		return set_policies(c, "recompute,gpu-only,ram-only,default");
	}
	if (!strcmp(p, "exp2")) {
		o->endpoints = 2;
		o->sched = SCHED_DISTANCE;
		o->reuse_distance = 128;
		o->max_inflight = 16;
		o->ram_tokens = bytes_to_tokens(o, 256ull << 30);
		o->disk_tokens = 32ull << 20;
		o->speed = 800;
		o->disaggregated = 1;
		return set_policies(c, "ram-only,default");
	}
	if (!strcmp(p, "fleet") || !strcmp(p, "lease") || !strncmp(p, "fleet-", 6)) {
		w = 12;
		if (!strncmp(p, "fleet-", 6)) {
			char *end;
			w = (unsigned)strtoul(p + 6, &end, 10);
			if (*end || (w != 1 && w != 2 && w != 6 && w != 12 && w != 18))
				return -EINVAL;
		}
		o->endpoints = 2; /* the coder and the reasoner, a server each */
		o->sched = SCHED_ACTIVE;
		o->active = w;
		o->stagger_s = 60;
		o->ram_tokens = (uint64_t)(32e9 / (double)o->kv_bytes_per_token);
		o->disk_tokens = 32ull << 20;
		o->speed = 200;
		c->per_width = 1;
		c->fleet_wl = 1;
		if (!strcmp(p, "lease")) {
			o->lease_ms = 300000;
			return set_policies(c, "default,refuse");
		}
		return set_policies(c, !strcmp(p, "fleet") || w == 12 ? "default,ram-only" : "default");
	}
	if (!strcmp(p, "mooncake")) {
		o->endpoints = 4;
		o->sched = SCHED_ARRIVAL;
		o->ram_tokens = 3000000;
		o->disk_tokens = 100000000;
		o->speed = 90;
		o->disaggregated = 1; /* Mooncake serves prefill and decode apart */
		return set_policies(c, "ram-only,default");
	}
	return -EINVAL;
}

static int parse_values(struct cli *c, const char *list)
{
	char buf[1024], *tok, *save = NULL;

	/* strtok_r would skip an empty item, which ram and hash refuse */
	if (strlen(list) >= sizeof(buf) || bench_list_has_empty(list))
		return -EINVAL;
	strcpy(buf, list);
	c->nvalues = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (c->nvalues == MAX_VALUES || parse_count(tok, 1e15, &c->values[c->nvalues]))
			return -EINVAL;
		c->nvalues++;
	}
	return c->nvalues ? 0 : -EINVAL;
}

static const char *const sweep_params[] = {
	"width", "ram-tokens", "disk-tokens", "reuse-distance", "lease-ms", "endpoints",
	"gpu-tokens", "decode-growth", NULL
};

/* An option parser of one group returns 0 (taken), BENCH_EXIT_USAGE (bad,
 * the message printed) or NOT_MINE (an option of another group). */
#define NOT_MINE (-2)
/* Names the option, the value and what it may be: a range, or choices. */
#define BAD(what, may, ...) \
	return bench_usage_error(c->cmd, "bad --%s '%s': " may, what, arg, ##__VA_ARGS__)

/* First pass: the preset, whose values later options override; a sweep
 * without a preset sweeps the fleet, one policy a point. */
static int parse_preset(struct cli *c, int argc, char **argv, int sweep)
{
	int ch, have_preset = 0, have_trace = 0, have_policy = 0, have_over_ram = 0;

	bench_getopt_begin();
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (ch == O_PRESET) {
			if (apply_preset(c, optarg))
				return bench_usage_error(c->cmd, "unknown --preset '%s'", optarg);
			have_preset = 1;
		}
		have_trace |= ch == O_TRACE;
		have_policy |= ch == O_POLICY;
		if (ch == O_OVER && optarg && (!strcmp(optarg, "ram-tokens") ||
					       !strcmp(optarg, "disk-tokens")))
			have_over_ram = 1;
	}
	if (sweep) {
		if (!have_preset && !have_trace) {
			apply_preset(c, "fleet-12");
			c->preset = NULL;
		}
		if (!have_policy)
			set_policies(c, have_trace || have_over_ram ? "ram-only" : "default");
	}
	return 0;
}

/* The options of the fleet's generated sessions. */
static int opt_fleet(struct cli *c, int ch, const char *arg)
{
	uint64_t u;

	switch (ch) {
	case O_FLEET_TEXT:
		if (strcmp(arg, "session") && strcmp(arg, "role"))
			BAD("fleet-text", "role or session");
		c->fleet.role_text = !strcmp(arg, "role");
		return 0;
	case O_PAUSE:
		if (parse_count(arg, 1e6, &c->fleet.pause_s))
			BAD("pause", "seconds from 0 to 1000000");
		return 0;
	case O_TOOL_CALLS:
		if (parse_u64(arg, 1, WL_FLEET_MAX_TOOL, &u))
			BAD("tool-calls", "an integer from 1 to %d", WL_FLEET_MAX_TOOL);
		c->fleet.tool_calls = (uint32_t)u;
		return 0;
	case O_TOOL_THINK:
		if (!strcmp(arg, "on"))
			c->fleet.tool_think = 1;
		else if (!strcmp(arg, "off"))
			c->fleet.tool_think = 0;
		else
			BAD("tool-think", "on or off");
		return 0;
	case O_TOOL_TOKENS:
		if (parse_pos(arg, &c->fleet.tool_median))
			BAD("tool-tokens", "a number of tokens above 0");
		return 0;
	case O_TOOL_ANSWER:
		if (parse_pos(arg, &c->fleet.tool_answer_median))
			BAD("tool-answer", "a number of tokens above 0");
		return 0;
	case O_ROLE_TOKENS:
		if (parse_pos(arg, &c->fleet.role_median))
			BAD("role-tokens", "a number of tokens above 0");
		return 0;
	}
	return NOT_MINE;
}

/* The workload's and the schedule's options. */
static int opt_workload(struct cli *c, int ch, const char *arg, int *schedule_set)
{
	uint64_t u;

	switch (ch) {
	case O_PRESET:
		return 0;
	case O_TRACE:
		c->trace = arg;
		return 0;
	case O_TRACE_FORMAT:
		if (trace_format_parse(arg, &c->trace_format))
			BAD("trace-format", "auto, kvbench or mooncake");
		return 0;
	case O_TRACE_BT:
		if (parse_u64(arg, 1, 1u << 20, &u))
			BAD("trace-block-tokens", "an integer from 1 to 1048576");
		c->trace_block_tokens = (uint32_t)u;
		return 0;
	case O_SEED:
		if (parse_u64(arg, 0, 1e15, &u))
			BAD("seed", "an integer from 0 to 10^15");
		c->gen.seed = u;
		c->fleet.seed = u;
		return 0;
	case O_SEEDS:
		if (parse_u64(arg, 1, REPLAY_SEEDS_MAX, &u))
			BAD("seeds", "an integer from 1 to %d", REPLAY_SEEDS_MAX);
		c->nseeds = (unsigned)u;
		return 0;
	case O_SESSIONS:
		if (parse_u64(arg, 1, 1e9, &c->sessions_limit))
			BAD("sessions", "an integer from 1 to 10^9");
		c->per_width = 0;
		return 0;
	case O_SHARED:
		if (parse_u64(arg, 0, 1 << 20, &u))
			BAD("shared-tokens", "an integer from 0 to 1048576");
		c->gen.shared_tokens = (uint32_t)u;
		c->fleet.shared_tokens = (uint32_t)u;
		return 0;
	case O_SCHEDULE:
		*schedule_set = 1;
		if (!strcmp(arg, "active"))
			c->o.sched = SCHED_ACTIVE;
		else if (!strcmp(arg, "distance"))
			c->o.sched = SCHED_DISTANCE;
		else if (!strcmp(arg, "arrival"))
			c->o.sched = SCHED_ARRIVAL;
		else
			BAD("schedule", "active, distance or arrival");
		return 0;
	case O_ACTIVE:
	case O_WIDTH:
		if (parse_u64(arg, 1, 1e6, &u))
			BAD(ch == O_WIDTH ? "width" : "active", "an integer from 1 to 1000000");
		c->o.active = (uint32_t)u;
		return 0;
	case O_STAGGER:
		if (parse_count(arg, 1e9, &c->o.stagger_s))
			BAD("stagger", "seconds from 0 to 10^9");
		return 0;
	case O_DISTANCE:
		if (parse_u64(arg, 0, 1e9, &u))
			BAD("reuse-distance", "an integer from 0 to 10^9");
		c->o.reuse_distance = (uint32_t)u;
		if (!*schedule_set)
			c->o.sched = SCHED_DISTANCE;
		return 0;
	case O_INFLIGHT:
		if (parse_u64(arg, 1, 1e6, &u))
			BAD("max-inflight", "an integer from 1 to 1000000");
		c->o.max_inflight = (uint32_t)u;
		return 0;
	case O_SPEED:
		if (!strcmp(arg, "max"))
			c->o.speed = 0;
		else if (parse_pos(arg, &c->o.speed))
			BAD("speed", "a number above 0 (up to 10^15), or max");
		return 0;
	}
	return NOT_MINE;
}

/* The engine model's options and the bytes of a block. */
static int opt_engine(struct cli *c, int ch, const char *arg)
{
	uint64_t u;

	switch (ch) {
	case O_ENDPOINTS:
		if (parse_u64(arg, 1, 4096, &u))
			BAD("endpoints", "an integer from 1 to 4096");
		c->o.endpoints = (uint32_t)u;
		return 0;
	case O_GPU_TOKENS:
		if (parse_u64(arg, 0, 1e12, &c->o.gpu_tokens))
			BAD("gpu-tokens", "an integer from 0 to 10^12");
		return 0;
	case O_GPU_BLOCK:
		if (parse_u64(arg, 1, 1 << 16, &u))
			BAD("gpu-block", "an integer from 1 to 65536");
		c->o.gpu_block = (uint32_t)u;
		return 0;
	case O_CHUNK:
		if (parse_u64(arg, 1, 1 << 20, &u))
			BAD("chunk-tokens", "an integer from 1 to 1048576");
		c->o.chunk_tokens = (uint32_t)u;
		return 0;
	case O_SLACK:
		if (parse_u64(arg, 0, 1e12, &c->o.sticky_slack))
			BAD("sticky-slack", "an integer from 0 to 10^12");
		return 0;
	case O_PREFILL:
		if (parse_pos(arg, &c->o.prefill_rate))
			BAD("prefill-rate", "a number of tokens/s above 0");
		return 0;
	case O_DECODE:
		if (parse_pos(arg, &c->o.decode_rate))
			BAD("decode-rate", "a number of tokens/s above 0");
		return 0;
	case O_GROWTH:
		if (parse_count(arg, 1e6, &c->o.decode_growth))
			BAD("decode-growth", "a number from 0 to 1000000");
		return 0;
	case O_DISAGG:
		c->o.disaggregated = 1;
		return 0;
	case O_GPU_HOLD:
		if (!strcmp(arg, "on"))
			c->o.gpu_hold = 1;
		else if (!strcmp(arg, "off"))
			c->o.gpu_hold = 0;
		else
			BAD("gpu-hold", "on or off");
		return 0;
	case O_MODEL:
		if (set_model(&c->o, arg))
			BAD("model", "qwen3-coder-30b-a3b, llama-3.1-8b or llama-3.1-70b");
		return 0;
	case O_KVBPT:
		if (parse_u64(arg, 1, 1ull << 30, &c->o.kv_bytes_per_token))
			BAD("kv-bytes-per-token", "an integer from 1 to 1073741824");
		c->o.model = "custom";
		return 0;
	case O_SCALE:
		if (parse_u64(arg, 1, 1ull << 30, &u))
			BAD("scale", "an integer from 1 to 1073741824");
		c->o.scale = (uint32_t)u;
		return 0;
	case O_CHARGE:
		if (parse_count(arg, 1e9, &c->o.charge_scale))
			BAD("charge-scale", "a number from 0 to 10^9");
		return 0;
	}
	return NOT_MINE;
}

/* The store's options. */
static int opt_store(struct cli *c, int ch, const char *arg)
{
	char why[256];
	uint64_t u;

	switch (ch) {
	case O_POLICY:
		if (bench_list_has_empty(arg))
			BAD("policy", "an empty item");
		if (set_policies(c, arg))
			BAD("policy",
			    "up to %d of default (ram+disk), ram-only, refuse, gpu-only, recompute, comma-separated",
			    MAX_POLICIES);
		return 0;
	case O_RAM_TOKENS:
		if (parse_u64(arg, 1, 1e13, &c->o.ram_tokens))
			BAD("ram-tokens", "an integer from 1 to 10^13");
		return 0;
	case O_RAM:
		if (bench_parse_size(arg, &u))
			return bench_usage_error(c->cmd, "bad --ram: %s", kvt_last_error());
		if (bytes_to_tokens(&c->o, u) == 0)
			BAD("ram", "at least one token (%llu bytes)",
			    (unsigned long long)c->o.kv_bytes_per_token);
		c->o.ram_tokens = bytes_to_tokens(&c->o, u);
		return 0;
	case O_DISK_TOKENS:
		if (parse_u64(arg, 0, 1e13, &c->o.disk_tokens))
			BAD("disk-tokens", "an integer from 0 to 10^13");
		return 0;
	case O_DISK:
		if (bench_parse_size(arg, &u))
			return bench_usage_error(c->cmd, "bad --disk: %s", kvt_last_error());
		c->o.disk_tokens = bytes_to_tokens(&c->o, u);
		return 0;
	case O_DISK_DIR:
		if (bench_dir_check(arg, why, sizeof(why)))
			return bench_usage_error(c->cmd, "--disk-dir %s: %s", arg, why);
		c->o.disk_dir = arg;
		return 0;
	case O_LEASE:
		if (parse_u64(arg, 1, 1e10, &c->o.lease_ms))
			BAD("lease-ms", "an integer from 1 to 10^10");
		return 0;
	case O_RELEASE:
		c->o.release_leases = 1;
		return 0;
	case O_THREADS:
		/* the library's "threads" takes 1 to 64 (kvtier-config(5)) */
		if (parse_u64(arg, 1, 64, &u))
			BAD("threads", "an integer from 1 to 64");
		c->o.threads = (uint32_t)u;
		return 0;
	case O_NODES:
		if (parse_u64(arg, 1, REPLAY_NODES_MAX, &u))
			BAD("nodes", "an integer from 1 to %d", REPLAY_NODES_MAX);
		c->o.nodes = (uint32_t)u;
		return 0;
	}
	return NOT_MINE;
}

/* The output's options and the sweep's. */
static int opt_output(struct cli *c, int ch, const char *arg, int sweep)
{
	char why[256];
	int i;

	switch (ch) {
	case O_CSV:
		if (strcmp(arg, "-") && bench_output_check(arg, why, sizeof(why)))
			return bench_usage_error(c->cmd, "--csv %s: %s", arg, why);
		/* standard output for the CSV alone, as for --json - */
		if (!strcmp(arg, "-"))
			bench_json_stdout_only();
		c->csv = arg;
		return 0;
	case O_NO_PROGRESS:
		c->o.progress = 0;
		return 0;
	case O_OVER:
		if (!sweep)
			return bench_usage_error(c->cmd, "--over belongs to kvbench sweep");
		for (i = 0; sweep_params[i]; i++)
			if (!strcmp(arg, sweep_params[i]))
				break;
		if (!sweep_params[i])
			BAD("over",
			    "width, ram-tokens, disk-tokens, reuse-distance, lease-ms, endpoints, gpu-tokens or decode-growth");
		c->over = sweep_params[i];
		return 0;
	case O_VALUES:
		if (!sweep)
			return bench_usage_error(c->cmd, "--values belongs to kvbench sweep");
		if (bench_list_has_empty(arg))
			BAD("values", "an empty item");
		if (parse_values(c, arg))
			BAD("values",
			    "up to %d numbers from 0 to 10^15 (K, M, G suffixes), comma-separated",
			    MAX_VALUES);
		return 0;
	}
	return NOT_MINE;
}
#undef BAD

/* Reads the command line into c. Returns 0, -1 after --help (printed), or
 * BENCH_EXIT_USAGE after a one-line error. */
static int parse_args(struct cli *c, int argc, char **argv, int sweep)
{
	int ch, r, schedule_set = 0;

	r = parse_preset(c, argc, argv, sweep);
	if (r)
		return r;
	bench_getopt_begin();
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		r = bench_common_option(c->cmd, ch, optarg, argv, &c->co);
		if (r < 0)
			return BENCH_EXIT_USAGE;
		if (r > 0)
			continue;
		if (ch == 'h') {
			fputs(usage_replay, stdout);
			return -1;
		}
		r = opt_workload(c, ch, optarg, &schedule_set);
		if (r == NOT_MINE)
			r = opt_fleet(c, ch, optarg);
		if (r == NOT_MINE)
			r = opt_engine(c, ch, optarg);
		if (r == NOT_MINE)
			r = opt_store(c, ch, optarg);
		if (r == NOT_MINE)
			r = opt_output(c, ch, optarg, sweep);
		if (r == NOT_MINE)
			return bench_usage_error(c->cmd, "unexpected option");
		if (r)
			return r;
	}
	if (optind < argc)
		return bench_usage_error(c->cmd, "unexpected argument '%s'", argv[optind]);
	if (c->csv && c->co.json_path && !strcmp(c->csv, "-") && !strcmp(c->co.json_path, "-"))
		return bench_usage_error(c->cmd, "--json - and --csv - cannot share standard output");
	if (c->o.chunk_tokens % c->o.gpu_block)
		return bench_usage_error(c->cmd,
					 "--chunk-tokens %u is not a multiple of --gpu-block %u",
					 c->o.chunk_tokens, c->o.gpu_block);
	return 0;
}

static void cli_defaults(struct cli *c, const char *cmd)
{
	memset(c, 0, sizeof(*c));
	c->cmd = cmd;
	replay_opts_defaults(&c->o);
	c->o.progress = 1;
	c->o.speed = 200;
	wl_gen_defaults(&c->gen);
	wl_fleet_defaults(&c->fleet);
	bench_common_init(&c->co);
	c->trace_block_tokens = 512;
	c->pol[0] = POL_DEFAULT;
	c->npol = 1;
	c->nseeds = 0; /* run_all: 3 for a sweep of generated sessions, else 1 */
}

/* Loads or generates the workload and fixes what depends on it. */
int load_workload(struct cli *c, struct wl *w)
{
	char err[512];
	enum trace_format got = TRACE_AUTO;
	int rc;

	if (c->trace) {
		rc = trace_load(c->trace, c->trace_format, c->trace_block_tokens, w, &got, err,
				sizeof(err));
		if (rc) {
			fprintf(stderr, "kvbench %s: %s\n", c->cmd, err);
			return BENCH_EXIT_FAIL;
		}
		if (w->timed && c->o.sched != SCHED_DISTANCE)
			c->o.sched = SCHED_ARRIVAL;
		if (!w->timed && c->o.sched == SCHED_ARRIVAL) {
			fprintf(stderr, "kvbench %s: %s has no timestamps; use --schedule active or distance\n",
				c->cmd, c->trace);
			return BENCH_EXIT_USAGE;
		}
		if (w->nsessions == 0 && c->o.sched != SCHED_ARRIVAL) {
			fprintf(stderr, "kvbench %s: %s has no sessions; it can only be replayed by arrival time\n",
				c->cmd, c->trace);
			return BENCH_EXIT_USAGE;
		}
	} else {
		if (c->o.sched == SCHED_ARRIVAL) {
			fprintf(stderr, "kvbench %s: --schedule arrival needs a --trace with timestamps\n",
				c->cmd);
			return BENCH_EXIT_USAGE;
		}
		rc = c->fleet_wl ? wl_generate_fleet(&c->fleet, w) : wl_generate(&c->gen, w);
		if (rc) {
			fprintf(stderr, "kvbench %s: cannot generate the workload: %s\n", c->cmd,
				strerror(-rc));
			return BENCH_EXIT_FAIL;
		}
	}
	if (c->sessions_limit && w->kind == WL_TOKENS)
		wl_truncate_sessions(w, c->sessions_limit);
	return 0;
}

void set_param(struct replay_opts *o, const char *p, double v)
{
	if (!strcmp(p, "width"))
		o->active = (uint32_t)v;
	else if (!strcmp(p, "ram-tokens"))
		o->ram_tokens = (uint64_t)v;
	else if (!strcmp(p, "disk-tokens"))
		o->disk_tokens = (uint64_t)v;
	else if (!strcmp(p, "reuse-distance"))
		o->reuse_distance = (uint32_t)v;
	else if (!strcmp(p, "lease-ms"))
		o->lease_ms = (uint64_t)v;
	else if (!strcmp(p, "endpoints"))
		o->endpoints = (uint32_t)v;
	else if (!strcmp(p, "gpu-tokens"))
		o->gpu_tokens = (uint64_t)v;
	else if (!strcmp(p, "decode-growth"))
		o->decode_growth = v;
}

/* Fills in a sweep's parameter and values where not given and checks the
 * values. Returns 0 or BENCH_EXIT_USAGE. */
int sweep_prepare(struct cli *c)
{
	size_t i;

	if (!c->over)
		c->over = c->trace ? "ram-tokens" : "width";
	if (!c->nvalues) {
		if (!strcmp(c->over, "ram-tokens"))
			parse_values(c, "0.5M,1M,2M,3M,5M,10M,20M,50M");
		else if (!strcmp(c->over, "width"))
			parse_values(c, "1,2,6,12,18");
		else
			return bench_usage_error(c->cmd, "--over %s needs --values", c->over);
	}
	for (i = 0; i < c->nvalues; i++)
		if (c->values[i] < 1 && strcmp(c->over, "disk-tokens") &&
		    strcmp(c->over, "gpu-tokens") && strcmp(c->over, "reuse-distance") &&
		    strcmp(c->over, "decode-growth"))
			return bench_usage_error(c->cmd, "--values: %g is not valid for --over %s",
						 c->values[i], c->over);
	return 0;
}

int bench_replay_main(int argc, char **argv)
{
	struct cli c;
	int r;

	cli_defaults(&c, "replay");
	r = parse_args(&c, argc, argv, 0);
	if (r)
		return r < 0 ? BENCH_EXIT_OK : r;
	return run_all(&c, 0);
}

int bench_sweep_main(int argc, char **argv)
{
	struct cli c;
	int r;

	cli_defaults(&c, "sweep");
	r = parse_args(&c, argc, argv, 1);
	if (r)
		return r < 0 ? BENCH_EXIT_OK : r;
	return run_all(&c, 1);
}
