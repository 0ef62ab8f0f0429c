/*
 * replay_report.c - the report of replay runs: the fields of a run by name
 * (shared by the terminal table, JSON, CSV and the plots), the figures the
 * seed study and the Mooncake paper published for each preset, and their
 * printing beside the measured ones.
 *
 * Knows nothing about how a run is made (replay.c) or the command line.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "replay.h"

enum {
	F_CALLS, F_PROMPT_MTOK,
	F_GPU_SHARE, F_RAM_SHARE, F_DISK_SHARE, F_PEER_SHARE, F_MISS_SHARE, F_STORE_SHARE,
	F_GPU_BSHARE, F_RAM_BSHARE, F_DISK_BSHARE, F_PEER_BSHARE, F_MISS_BSHARE,
	F_RAM_MIB, F_DISK_MIB, F_PEER_MIB,
	F_PUTS, F_REFUSED, F_REFUSED_SHARE, F_PUT_ERRORS, F_WRITE_AROUNDS,
	F_EVICTIONS, F_EVICTED_MIB, F_LEASE_EXPIRIES, F_LEASE_TRUNC,
	F_LOAD_P50, F_LOAD_P90, F_LOAD_P99, F_LOAD_RAM_S, F_LOAD_DISK_S, F_CHARGED_S, F_FULLSIZE_S,
	F_BUSY_S, F_PREFILL_S, F_DECODE_S, F_BUSY_UNION, F_MEAN_OUT, F_MEAN_RUN, F_STORE_GIB,
	F_EP_RUNNING, F_EP_CONTEXT, F_EP_RUN_KV, F_EP_PREFIX_KV, F_POOL_WAIT, F_POOL_WAITS, F_EP_INTAKE, F_MAKESPAN_S, F_THROUGHPUT,
	F_SAVED_STORE, F_SAVED_NET_DIV, F_SAVED_NET, F_SAVED_UNION, F_SAVED_DISK, F_DISK_OF_SAVING,
	F_SEEDS, F_SEED, F_SEED_SAVED_MIN, F_SEED_SAVED_MED, F_SEED_SAVED_MAX, F_SEED_UNION_MIN,
	F_SEED_UNION_MED, F_SEED_UNION_MAX, F_SEED_DISK_MIN, F_SEED_DISK_MED, F_SEED_DISK_MAX,
	F_SAVED_GPU,
	F_TTFT_P50, F_TTFT_P90, F_TTFT_P99,
	F_STICKY,
	F_BOUND_BLK, F_BOUND_TOK, F_GPU_OF_BOUND, F_RAM_OF_BOUND, F_DISK_OF_BOUND,
	F_ALL_OF_BOUND, F_AGED, F_REUSE_P99, F_REUSE_MAX,
	F_WALL_S, F_LAG_MAX, F_LAG_MEAN,
	F_N
};

struct field {
	const char *name, *label, *fmt;
};

static const struct field fields[F_N] = {
	[F_CALLS] = { "calls", "calls", "%.0f" },
	[F_PROMPT_MTOK] = { "prompt_mtokens", "prompt tokens (M)", "%.2f" },
	[F_GPU_SHARE] = { "gpu_share", "hit share GPU cache, tokens %", "%.1f" },
	[F_RAM_SHARE] = { "ram_share", "hit share RAM tier, tokens %", "%.1f" },
	[F_DISK_SHARE] = { "disk_share", "hit share disk tier, tokens %", "%.1f" },
	[F_PEER_SHARE] = { "peer_share", "hit share peers, tokens %", "%.1f" },
	[F_MISS_SHARE] = { "recomputed_share", "recomputed, tokens %", "%.1f" },
	[F_STORE_SHARE] = { "store_share", "hit share store (all tiers), tokens %", "%.1f" },
	[F_GPU_BSHARE] = { "gpu_block_share", "hit share GPU cache, blocks %", "%.1f" },
	[F_RAM_BSHARE] = { "ram_block_share", "hit share RAM tier, blocks %", "%.1f" },
	[F_DISK_BSHARE] = { "disk_block_share", "hit share disk tier, blocks %", "%.1f" },
	[F_PEER_BSHARE] = { "peer_block_share", "hit share peers, blocks %", "%.1f" },
	[F_MISS_BSHARE] = { "recomputed_block_share", "recomputed, blocks %", "%.1f" },
	[F_RAM_MIB] = { "ram_loaded_mib", "loaded from RAM (MiB, scaled)", "%.1f" },
	[F_DISK_MIB] = { "disk_loaded_mib", "loaded from disk (MiB, scaled)", "%.1f" },
	[F_PEER_MIB] = { "peer_loaded_mib", "loaded from peers (MiB, scaled)", "%.1f" },
	[F_PUTS] = { "puts_offered", "puts offered (blocks)", "%.0f" },
	[F_REFUSED] = { "puts_refused", "puts refused", "%.0f" },
	[F_REFUSED_SHARE] = { "refused_share", "puts refused %", "%.1f" },
	[F_PUT_ERRORS] = { "put_errors", "put errors", "%.0f" },
	[F_WRITE_AROUNDS] = { "write_arounds", "puts written around RAM", "%.0f" },
	[F_EVICTIONS] = { "evictions", "RAM evictions", "%.0f" },
	[F_EVICTED_MIB] = { "evicted_mib", "RAM evicted (MiB, scaled)", "%.1f" },
	[F_LEASE_EXPIRIES] = { "lease_expiries", "lease expiries", "%.0f" },
	[F_LEASE_TRUNC] = { "lease_truncations", "loads cut short after a lookup", "%.0f" },
	[F_LOAD_P50] = { "load_p50_us", "load latency p50 (us, measured)", "%.0f" },
	[F_LOAD_P90] = { "load_p90_us", "load latency p90 (us, measured)", "%.0f" },
	[F_LOAD_P99] = { "load_p99_us", "load latency p99 (us, measured)", "%.0f" },
	[F_LOAD_RAM_S] = { "load_ram_s", "load time, RAM-only batches (s)", "%.3f" },
	[F_LOAD_DISK_S] = { "load_disk_s", "load time, batches touching disk (s)", "%.3f" },
	[F_CHARGED_S] = { "charged_load_s", "lookup + load time charged (s)", "%.2f" },
	[F_FULLSIZE_S] = { "fullsize_load_s", "load time x scale, full-size bound (s)", "%.1f" },
	[F_BUSY_S] = { "busy_s", "endpoint busy time (s, modelled)", "%.0f" },
	[F_PREFILL_S] = { "prefill_s", "  of which GPU prefilling (s)", "%.0f" },
	[F_DECODE_S] = { "decode_s", "  of which GPU decoding (s)", "%.0f" },
	[F_MEAN_OUT] = { "mean_outstanding", "calls outstanding, mean while busy", "%.2f" },
	[F_BUSY_UNION] = { "busy_union_s", "busy time, union over endpoints (s)", "%.0f" },
	[F_MEAN_RUN] = { "mean_running", "calls outstanding, mean over makespan", "%.2f" },
	[F_STORE_GIB] = { "store_gib_900s", "store served, full-size GiB / 900 s", "%.1f" },
	[F_EP_RUNNING] = { "ep_running", "GPU pool: calls holding KV, per endpoint", "%.2f" },
	[F_EP_CONTEXT] = { "ep_context", "GPU pool: tokens of a running call", "%.0f" },
	[F_EP_RUN_KV] = { "ep_running_kv", "GPU pool: tokens held by running calls", "%.0f" },
	[F_EP_PREFIX_KV] = { "ep_prefix_kv", "GPU pool: tokens of kept prefixes", "%.0f" },
	[F_POOL_WAIT] = { "pool_wait", "GPU pool: time a call waits for room %", "%.1f" },
	[F_POOL_WAITS] = { "pool_waits_900s", "GPU pool: calls that waited for room / 900 s", "%.1f" },
	[F_EP_INTAKE] = { "ep_intake", "GPU pool: tokens/s entering, per endpoint", "%.0f" },
	[F_MAKESPAN_S] = { "makespan_s", "makespan (s, modelled)", "%.0f" },
	[F_THROUGHPUT] = { "throughput", "throughput (calls/s, modelled)", "%.3f" },
	[F_SAVED_STORE] = { "saved_store", "busy time saved by store, gross %", "%.2f" },
	[F_SAVED_NET_DIV] = { "saved_store_net_div", "  net, load charge / calls in flight %", "%.2f" },
	[F_SAVED_NET] = { "saved_store_net", "  net, full load charge %", "%.2f" },
	[F_SAVED_UNION] = { "saved_store_union", "  gross over the union of endpoints %", "%.2f" },
	[F_SAVED_DISK] = { "saved_disk", "  of gross: disk tier's part %", "%.2f" },
	[F_DISK_OF_SAVING] = { "disk_of_saving", "  disk tier's share of gross %", "%.1f" },
	[F_SEEDS] = { "seeds", "  generator seeds run (--seeds)", "%.0f" },
	[F_SEED] = { "seed", "  seed of the run shown (median gross)", "%.0f" },
	[F_SEED_SAVED_MIN] = { "saved_store_seeds_min", "  gross over the seeds: lowest %", "%.2f" },
	[F_SEED_SAVED_MED] = { "saved_store_seeds_median", "  gross over the seeds: median %", "%.2f" },
	[F_SEED_SAVED_MAX] = { "saved_store_seeds_max", "  gross over the seeds: highest %", "%.2f" },
	[F_SEED_UNION_MIN] = { "saved_store_union_seeds_min", "  gross over the union, seeds: lowest %", "%.2f" },
	[F_SEED_UNION_MED] = { "saved_store_union_seeds_median", "  gross over the union, seeds: median %", "%.2f" },
	[F_SEED_UNION_MAX] = { "saved_store_union_seeds_max", "  gross over the union, seeds: highest %", "%.2f" },
	[F_SEED_DISK_MIN] = { "disk_of_saving_seeds_min", "  disk tier's share over the seeds: lowest %", "%.1f" },
	[F_SEED_DISK_MED] = { "disk_of_saving_seeds_median", "  disk tier's share over the seeds: median %", "%.1f" },
	[F_SEED_DISK_MAX] = { "disk_of_saving_seeds_max", "  disk tier's share over the seeds: highest %", "%.1f" },
	[F_SAVED_GPU] = { "saved_gpu", "busy time saved by GPU cache %", "%.2f" },
	[F_TTFT_P50] = { "ttft_p50_s", "TTFT p50 (s, modelled)", "%.2f" },
	[F_TTFT_P90] = { "ttft_p90_s", "TTFT p90 (s, modelled)", "%.2f" },
	[F_TTFT_P99] = { "ttft_p99_s", "TTFT p99 (s, modelled)", "%.2f" },
	[F_STICKY] = { "sticky_share", "turns kept on preferred endpoint %", "%.1f" },
	[F_BOUND_BLK] = { "bound_block_hit", "unbounded cache hit rate, blocks %", "%.1f" },
	[F_BOUND_TOK] = { "bound_token_hit", "unbounded cache hit rate, tokens %", "%.1f" },
	[F_GPU_OF_BOUND] = { "gpu_of_bound", "GPU hits as share of bound %", "%.1f" },
	[F_RAM_OF_BOUND] = { "ram_of_bound", "RAM hits as share of bound %", "%.1f" },
	[F_DISK_OF_BOUND] = { "disk_of_bound", "disk hits as share of bound %", "%.1f" },
	[F_ALL_OF_BOUND] = { "hits_of_bound", "all hits as share of bound %", "%.1f" },
	[F_AGED] = { "aged_reuse", "reuse after the lease, % of block touches", "%.1f" },
	[F_REUSE_P99] = { "reuse_p99_s", "reuse distance p99 (s, modelled)", "%.1f" },
	[F_REUSE_MAX] = { "reuse_max_s", "reuse distance max (s, modelled)", "%.1f" },
	[F_WALL_S] = { "wall_s", "wall time (s)", "%.1f" },
	[F_LAG_MAX] = { "lag_max_s", "pacing lag max (s, real)", "%.3f" },
	[F_LAG_MEAN] = { "lag_mean_s", "pacing lag mean (s, real)", "%.4f" },
};

static double pct(double a, double b)
{
	return b > 0 ? 100.0 * a / b : 0;
}

/* The q-quantile (0, 0.5 or 1: lowest, median, highest; the lower of two
 * middles) of v[0..n) in percent, NAN when n < 2 (no spread to show). */
static double seeds_q(const double *v, unsigned n, double q)
{
	double s[REPLAY_SEEDS_MAX];
	unsigned i, j;

	if (n < 2 || n > REPLAY_SEEDS_MAX)
		return NAN;
	for (i = 0; i < n; i++) { /* insertion sort: at most 16 */
		double x = v[i];
		for (j = i; j > 0 && s[j - 1] > x; j--)
			s[j] = s[j - 1];
		s[j] = x;
	}
	return 100.0 * s[q <= 0 ? 0 : q >= 1 ? n - 1 : (n - 1) / 2];
}

static double fget(const struct replay_result *r, int id)
{
	double pt = (double)r->prompt_tokens, pb = (double)r->prompt_blocks;
	double store = (double)(r->tok[T_RAM] + r->tok[T_DISK] + r->tok[T_PEER]);

	if (id >= F_SEED_SAVED_MIN && id <= F_SEED_DISK_MAX) {
		/* lowest, median, highest of each SEED_* figure, in that order */
		int k = id - F_SEED_SAVED_MIN;
		return seeds_q(r->seed_fig[k / 3], r->nseeds, (k % 3) * 0.5);
	}
	switch (id) {
	case F_CALLS: return (double)r->calls;
	case F_PROMPT_MTOK: return pt / 1e6;
	case F_GPU_SHARE: return pct((double)r->tok[T_GPU], pt);
	case F_RAM_SHARE: return pct((double)r->tok[T_RAM], pt);
	case F_DISK_SHARE: return pct((double)r->tok[T_DISK], pt);
	case F_PEER_SHARE: return pct((double)r->tok[T_PEER], pt);
	case F_MISS_SHARE: return pct((double)r->tok[T_MISS], pt);
	case F_STORE_SHARE: return pct(store, pt);
	case F_GPU_BSHARE: return pct((double)r->blk[T_GPU], pb);
	case F_RAM_BSHARE: return pct((double)r->blk[T_RAM], pb);
	case F_DISK_BSHARE: return pct((double)r->blk[T_DISK], pb);
	case F_PEER_BSHARE: return pct((double)r->blk[T_PEER], pb);
	case F_MISS_BSHARE: return pct((double)r->blk[T_MISS], pb);
	case F_RAM_MIB: return (double)r->bytes_loaded[T_RAM] / 1048576.0;
	case F_DISK_MIB: return (double)r->bytes_loaded[T_DISK] / 1048576.0;
	case F_PEER_MIB: return (double)r->bytes_loaded[T_PEER] / 1048576.0;
	case F_PUTS: return (double)r->puts_offered;
	case F_REFUSED: return (double)r->puts_refused;
	case F_REFUSED_SHARE: return pct((double)r->puts_refused, (double)r->puts_offered);
	case F_PUT_ERRORS: return (double)r->put_errors;
	case F_WRITE_AROUNDS: return (double)r->write_arounds;
	case F_EVICTIONS: return (double)r->evictions;
	case F_EVICTED_MIB: return (double)r->evicted_bytes / 1048576.0;
	case F_LEASE_EXPIRIES: return (double)r->lease_expiries;
	case F_LEASE_TRUNC: return (double)r->lease_truncations;
	case F_LOAD_P50: return r->load_p50_us;
	case F_LOAD_P90: return r->load_p90_us;
	case F_LOAD_P99: return r->load_p99_us;
	case F_LOAD_RAM_S: return r->load_ram_s;
	case F_LOAD_DISK_S: return r->load_disk_s;
	case F_CHARGED_S: return r->charged_load_s;
	case F_FULLSIZE_S: return r->fullsize_load_s;
	case F_BUSY_S: return r->busy_s;
	case F_PREFILL_S: return r->prefill_s;
	case F_DECODE_S: return r->decode_s;
	case F_MEAN_OUT: return r->mean_outstanding;
	case F_BUSY_UNION: return r->busy_union_s;
	case F_SAVED_UNION: return 100.0 * r->saved_store_union;
	case F_MEAN_RUN: return r->mean_running;
	case F_STORE_GIB: return r->store_gib_900s;
	case F_EP_RUNNING: return r->ep_running;
	case F_EP_CONTEXT: return r->ep_context;
	case F_EP_RUN_KV: return r->ep_running_kv;
	case F_EP_PREFIX_KV: return r->ep_prefix_kv;
	case F_POOL_WAIT: return 100.0 * r->pool_wait;
	case F_POOL_WAITS: return r->pool_waits_900s;
	case F_EP_INTAKE: return r->ep_intake;
	case F_MAKESPAN_S: return r->makespan_s;
	case F_THROUGHPUT: return r->throughput;
	case F_SAVED_STORE: return 100.0 * r->saved_store;
	case F_SAVED_NET: return 100.0 * r->saved_store_net;
	case F_SAVED_NET_DIV: return 100.0 * r->saved_store_net_div;
	case F_SAVED_DISK: return 100.0 * r->saved_disk;
	case F_DISK_OF_SAVING:
		return r->saved_store > 0 ? 100.0 * r->disk_of_saving : NAN;
	case F_SEEDS: return r->nseeds ? (double)r->nseeds : NAN;
	case F_SEED: return r->nseeds ? (double)r->seed : NAN;
	case F_SAVED_GPU: return 100.0 * r->saved_gpu;
	case F_TTFT_P50: return r->ttft_p50;
	case F_TTFT_P90: return r->ttft_p90;
	case F_TTFT_P99: return r->ttft_p99;
	case F_STICKY:
		if (r->sticky_stay + r->sticky_spill == 0)
			return NAN;
		return pct((double)r->sticky_stay, (double)(r->sticky_stay + r->sticky_spill));
	case F_BOUND_BLK: return pct((double)r->bound_blk, (double)r->total_blk);
	case F_BOUND_TOK: return pct((double)r->bound_tok, pt);
	case F_GPU_OF_BOUND: return pct((double)r->tok[T_GPU], (double)r->bound_tok);
	case F_RAM_OF_BOUND: return pct((double)r->tok[T_RAM], (double)r->bound_tok);
	case F_DISK_OF_BOUND: return pct((double)r->tok[T_DISK], (double)r->bound_tok);
	case F_ALL_OF_BOUND:
		return pct((double)r->tok[T_GPU] + store, (double)r->bound_tok);
	case F_AGED: return pct((double)r->aged_blk, (double)r->total_blk);
	case F_REUSE_P99: return r->bound_blk ? r->reuse_p99_s : NAN;
	case F_REUSE_MAX: return r->bound_blk ? r->reuse_max_s : NAN;
	case F_WALL_S: return r->wall_s;
	case F_LAG_MAX: return r->lag_max_s;
	case F_LAG_MEAN: return r->lag_mean_s;
	default: return NAN;
	}
}

/* Looks a field up by name; NAN for an unknown one. */
static double field_value(const struct replay_result *r, const char *name)
{
	int i;

	for (i = 0; i < F_N; i++)
		if (!strcmp(fields[i].name, name))
			return fget(r, i);
	return NAN;
}

static const char *field_label(const char *name)
{
	int i;

	for (i = 0; i < F_N; i++)
		if (!strcmp(fields[i].name, name))
			return fields[i].label;
	return name;
}

/* --- published figures -------------------------------------------------------------- */

#define FLEET "agent-fleet study"
/* The study's width sweep ran at 6, 12 and 18 sessions; its HBM and Store
 * hit shares (45.0 -> 6.7, 38.0 -> 60.7) span those widths. */
static const struct replay_ref refs_fleet1[] = {
	{ "saved_store", NULL, 0.28, FLEET ", gross saving at 1 session (batch)" },
	{ "saved_store_net_div", NULL, 0.005, FLEET ", net at 1 session (batch; -0.089 to +0.098)" },
	{ NULL, NULL, 0, NULL }
};
static const struct replay_ref refs_fleet6[] = {
	{ "gpu_share", NULL, 45.0, FLEET ", HBM hit share at 6 sessions (width sweep)" },
	{ "store_share", NULL, 38.0, FLEET ", Store hit share at 6 sessions (width sweep)" },
	{ "saved_store", NULL, 9.10, FLEET ", 6 sessions steady state (16.12 in batch, no pause)" },
	{ "saved_store_net_div", NULL, 13.98, FLEET ", 6 sessions batch, net, load / in flight (of 16.12 gross)" },
	{ "saved_store_net", NULL, 2.98, FLEET ", 6 sessions batch, net, every load in full" },
	{ "aged_reuse", NULL, 19.5, FLEET ", reuse after the lease at 6 sessions, 300 s pause (7.5 without)" },
	{ NULL, NULL, 0, NULL }
};
static const struct replay_ref refs_fleet12[] = {
	{ "saved_store", "default", 16.01, FLEET ", 12 sessions, local disk tier (sweep window 14.65)" },
	{ "saved_store", "ram-only", 6.25, FLEET ", 12 sessions without disk tier (16.01 - 9.76)" },
	{ "disk_of_saving", "default", 61.0, FLEET ", disk tier's share of the saving, 9.76 of 16.01 points" },
	{ "store_share", "default", 45.1, FLEET ", Store hit rate at 12 sessions, short lease" },
	{ NULL, NULL, 0, NULL }
};
static const struct replay_ref refs_fleet18[] = {
	{ "gpu_share", NULL, 6.7, FLEET ", HBM hit share at 18 sessions" },
	{ "store_share", NULL, 60.7, FLEET ", Store hit share at 18 sessions" },
	{ "saved_store", NULL, 32.30, FLEET ", gross saving at 18 sessions (sweep window 30.68)" },
	{ NULL, NULL, 0, NULL }
};

/* The study's saving by fleet width, percent; NAN where it published none. */
static const struct replay_study_point study_width[] = {
	{ 1, 0.28, 0.28, 0.005, NAN, NAN,
	  "batch, no pause; net spans zero (-0.089 to +0.098)" },
	{ 6, 9.10, 16.12, 13.98, 2.98, NAN,
	  "9.10 steady state with pause; 16.12 batch without, net from the batch point" },
	{ 12, 14.65, 16.01, NAN, NAN, 61.0,
	  "steady state, 300 s pause; sweep window and five-window mean; disk 9.76 of 16.01" },
	{ 18, 30.68, 32.30, NAN, NAN, NAN,
	  "steady state, 300 s pause; sweep window and five-window mean" },
	{ 0, 0, 0, 0, 0, 0, NULL }
};

const struct replay_study_point *replay_study_width(double width)
{
	const struct replay_study_point *p;

	for (p = study_width; p->note; p++)
		if ((double)p->width == width)
			return p;
	return NULL;
}

/* measured / the study's range: 1 inside it, else the ratio to the nearer
 * end (NAN without a figure) */
static double study_factor(double measured, const struct replay_study_point *p)
{
	if (!p || isnan(p->gross_lo) || isnan(measured))
		return NAN;
	if (measured >= p->gross_lo && measured <= p->gross_hi)
		return 1.0;
	return measured < p->gross_lo ? measured / p->gross_lo : measured / p->gross_hi;
}

/* o's number k, or NAN. */
static double json_num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

void replay_study_json(json_t *o, double width)
{
	const struct replay_study_point *p = replay_study_width(width);
	json_t *st;

	if (!p) {
		json_object_set_new(o, "study", json_null());
		return;
	}
	st = json_object();
	json_object_set_new(st, "saved_store_lo", bench_json_real(p->gross_lo));
	json_object_set_new(st, "saved_store_hi", bench_json_real(p->gross_hi));
	json_object_set_new(st, "saved_store_net_div", bench_json_real(p->net_div));
	json_object_set_new(st, "saved_store_net", bench_json_real(p->net_full));
	json_object_set_new(st, "disk_of_saving", bench_json_real(p->disk_share));
	json_object_set_new(st, "note", json_string(p->note));
	json_object_set_new(o, "study", st);
	json_object_set_new(o, "study_factor",
			    bench_json_real(study_factor(json_num(o, "saved_store"), p)));
	json_object_set_new(o, "study_factor_union",
			    bench_json_real(study_factor(json_num(o, "saved_store_union"), p)));
}
static const struct replay_ref refs_lease[] = {
	{ "refused_share", "refuse", 87.2, FLEET ", writes refused at a 300 s lease (Mooncake Store)" },
	{ "store_share", "refuse", 19.8, FLEET ", Store hit rate at a 300 s lease (45.1 short)" },
	{ NULL, NULL, 0, NULL }
};
#define PART1 "controlled study"
static const struct replay_ref refs_exp1[] = {
	{ "ttft_p50_s", "recompute", 27.87, PART1 ", exp. 1 median TTFT, full recomputation" },
	{ "ttft_p50_s", "gpu-only", 12.24, PART1 ", exp. 1 median TTFT, local prefix cache" },
	{ "ttft_p50_s", "ram-only", 1.0, PART1 ", exp. 1 median TTFT with shared RAM: sub-second" },
	{ "throughput", "ram-only", 1.31, PART1 ", exp. 1 requests/s with shared RAM" },
	{ NULL, NULL, 0, NULL }
};
static const struct replay_ref refs_exp2[] = {
	{ "ttft_p99_s", "ram-only", 65.0, PART1 ", exp. 2 p99 TTFT, RAM-only (about 65 s)" },
	{ "ttft_p99_s", "default", 34.0, PART1 ", exp. 2 p99 TTFT, RAM + local RAID0 (about 34 s)" },
	{ "throughput", "default", 0.76, PART1 ", exp. 2 requests/s, RAM + local RAID0" },
	{ NULL, NULL, 0, NULL }
};
static const struct replay_ref refs_mooncake[] = {
	{ "bound_token_hit", NULL, 40.0, "Mooncake FAST'25: about 40% prefix-cache reuse (conversation)" },
	{ "ram_of_bound", "ram-only", 50.0, "Mooncake FAST'25: a 3M-token cache reaches less than half of the bound" },
	{ NULL, NULL, 0, NULL }
};

const struct replay_ref *replay_refs(const char *preset)
{
	if (!preset)
		return NULL;
	if (!strcmp(preset, "fleet-1"))
		return refs_fleet1;
	if (!strcmp(preset, "fleet-6"))
		return refs_fleet6;
	if (!strcmp(preset, "fleet-12") || !strcmp(preset, "fleet"))
		return refs_fleet12;
	if (!strcmp(preset, "fleet-18"))
		return refs_fleet18;
	if (!strcmp(preset, "lease"))
		return refs_lease;
	if (!strcmp(preset, "exp1"))
		return refs_exp1;
	if (!strcmp(preset, "exp2"))
		return refs_exp2;
	if (!strcmp(preset, "mooncake"))
		return refs_mooncake;
	return NULL;
}

/* --- printing ---------------------------------------------------------------------------- */

static int trace_fields(int id)
{
	return id >= F_BOUND_BLK && id <= F_REUSE_MAX;
}

/* The rows of a point's spread over generator seeds (shown where some run
 * was made with more than one). */
static int seed_fields(int id)
{
	return id >= F_SEEDS && id <= F_SEED_DISK_MAX;
}

/* A study figure as a cell: "-" when unpublished. */
static void study_cell(struct bench_table *t, double v)
{
	if (isnan(v))
		bench_table_cell(t, "-");
	else
		bench_table_cell(t, "%.2f", v);
}

/* The study's figures under a width sweep's columns. */
static void study_rows(struct bench_table *t, const struct replay_result *r, size_t n,
		       const double *width)
{
	const struct replay_study_point *p;
	size_t k;
	int row;

	for (row = 0; row < 6; row++) {
		static const char *const label[] = {
			"study: gross saved %", "  measured gross / study range (x)",
			"  measured over the union / study range (x)",
			"study: net, load / in flight %", "study: net, full load charge %",
			"study: disk tier's share of gross %",
		};
		bench_table_cell(t, "%s", label[row]);
		for (k = 0; k < n; k++) {
			p = replay_study_width(width[k]);
			if (!p) {
				bench_table_cell(t, "-");
				continue;
			}
			switch (row) {
			case 0:
				if (p->gross_lo == p->gross_hi)
					bench_table_cell(t, "%.2f", p->gross_lo);
				else
					bench_table_cell(t, "%.2f-%.2f", p->gross_lo, p->gross_hi);
				break;
			case 1:
				study_cell(t, study_factor(100.0 * r[k].saved_store, p));
				break;
			case 2:
				study_cell(t, study_factor(100.0 * r[k].saved_store_union, p));
				break;
			case 3:
				study_cell(t, p->net_div);
				break;
			case 4:
				study_cell(t, p->net_full);
				break;
			default:
				study_cell(t, p->disk_share);
				break;
			}
		}
		bench_table_end_row(t);
	}
}

double replay_disk_by_difference(const struct replay_result *r, size_t n, const double *xs,
				 size_t k)
{
	if (r[k].policy != POL_DEFAULT || !(r[k].saved_store > 0))
		return NAN;
	for (size_t j = 0; j < n; j++)
		if (r[j].policy == POL_RAM_ONLY && (!xs || xs[j] == xs[k]))
			return 100.0 * (r[k].saved_store - r[j].saved_store) / r[k].saved_store;
	return NAN;
}

/* Under a sweep run with the default and the ram-only policy: a row of
 * each default run's disk share by difference. */
static void difference_row(struct bench_table *t, const struct replay_result *r, size_t n,
			   const double *xs)
{
	int any = 0;
	size_t k;

	for (k = 0; k < n && !any; k++)
		any = !isnan(replay_disk_by_difference(r, n, xs, k));
	if (!any)
		return;
	bench_table_cell(t, "%s", "  disk tier's share by difference %");
	for (k = 0; k < n; k++) {
		double v = replay_disk_by_difference(r, n, xs, k);
		if (isnan(v))
			bench_table_cell(t, "-");
		else
			bench_table_cell(t, "%.1f", v);
	}
	bench_table_end_row(t);
}

/* With a default and a ram-only run side by side (a replay, not a sweep):
 * the disk tier's share of the gross saving as the study measured it, the
 * difference between the two runs. */
static void disk_by_difference(FILE *f, const struct replay_result *r, size_t n)
{
	const struct replay_result *d = NULL, *m = NULL;
	size_t k;

	for (k = 0; k < n; k++) {
		if (r[k].policy == POL_DEFAULT && !d)
			d = &r[k];
		if (r[k].policy == POL_RAM_ONLY && !m)
			m = &r[k];
	}
	if (!d || !m || !(d->saved_store > 0))
		return;
	fprintf(f, "\n  disk tier's share of the gross saving, (%s - %s) / %s: %.1f%% "
		   "(%.2f of %.2f points; tokens served from disk in %s: %.1f%%)\n",
		d->label, m->label, d->label,
		100.0 * (d->saved_store - m->saved_store) / d->saved_store,
		100.0 * (d->saved_store - m->saved_store), 100.0 * d->saved_store, d->label,
		100.0 * d->disk_of_saving);
}

void replay_print(FILE *f, const struct replay_result *r, size_t n, const char *preset,
		  const char *sweep_param, const double *sweep_values)
{
	const char **hdr = calloc(n + 1, sizeof(*hdr));
	const struct replay_ref *ref = replay_refs(preset);
	struct bench_table *t;
	int bound = 0, seeds = 0, i;
	size_t k;

	if (!hdr)
		return;
	hdr[0] = "";
	for (k = 0; k < n; k++) {
		hdr[k + 1] = r[k].label;
		if (r[k].total_blk && r[k].bound_blk)
			bound = 1;
		if (r[k].nseeds > 1)
			seeds = 1;
	}
	t = bench_table_new((unsigned)n + 1, hdr);
	for (i = 0; i < F_N; i++) {
		if ((trace_fields(i) && !bound) || (seed_fields(i) && !seeds))
			continue;
		bench_table_cell(t, "%s", fields[i].label);
		for (k = 0; k < n; k++) {
			double v = fget(&r[k], i);
			if (isnan(v))
				bench_table_cell(t, "-");
			else
				bench_table_cell(t, fields[i].fmt, v);
		}
		bench_table_end_row(t);
	}
	if (sweep_values)
		difference_row(t, r, n, sweep_values);
	if (sweep_param && sweep_values && !strcmp(sweep_param, "width"))
		study_rows(t, r, n, sweep_values);
	bench_table_print(t, f, 2);
	bench_table_free(t);
	free(hdr);

	if (!sweep_values) /* a sweep has its row per width above */
		disk_by_difference(f, r, n);
	if (!ref)
		return;
	fprintf(f, "\n  published beside measured (%s):\n", preset);
	for (; ref->field; ref++) {
		const struct replay_result *m = NULL;
		for (k = 0; k < n && !m; k++)
			if (!ref->policy || !strcmp(ref->policy, replay_policy_name[r[k].policy]))
				m = &r[k];
		fprintf(f, "    %-40s published %8.2f", field_label(ref->field), ref->value);
		if (m)
			fprintf(f, "  measured %8.2f (%s)", field_value(m, ref->field), m->label);
		else
			fprintf(f, "  (run --policy %s to compare)", ref->policy);
		fprintf(f, "\n      %s\n", ref->note);
	}
}

/* The JSON names of the SEED_* figures of a seed's run. */
static const char *const seed_fig_name[SEED_FIGS] = {
	[SEED_SAVED] = "saved_store", [SEED_UNION] = "saved_store_union",
	[SEED_DISK] = "disk_of_saving",
};

json_t *replay_result_json(const struct replay_result *r)
{
	json_t *o = json_object(), *tiers = json_object();
	int i;

	if (!o || !tiers) {
		json_decref(o);
		json_decref(tiers);
		return NULL;
	}
	json_object_set_new(o, "label", json_string(r->label));
	json_object_set_new(o, "policy", json_string(replay_policy_name[r->policy]));
	json_object_set_new(o, "incomplete", json_boolean(r->interrupted));
	for (i = 0; i < F_N; i++)
		json_object_set_new(o, fields[i].name, bench_json_real(fget(r, i)));
	for (i = 0; i < T_NTIERS; i++) {
		json_t *t = json_object();
		json_object_set_new(t, "tokens", json_integer((json_int_t)r->tok[i]));
		json_object_set_new(t, "blocks", json_integer((json_int_t)r->blk[i]));
		json_object_set_new(t, "bytes_loaded", json_integer((json_int_t)r->bytes_loaded[i]));
		json_object_set_new(tiers, replay_tier_name[i], t);
	}
	json_object_set_new(o, "tiers", tiers);
	json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)r->prompt_tokens));
	json_object_set_new(o, "prompt_blocks", json_integer((json_int_t)r->prompt_blocks));
	json_object_set_new(o, "evicted_bytes", json_integer((json_int_t)r->evicted_bytes));
	json_object_set_new(o, "simulated_s", bench_json_real(r->sim_s));
	if (r->nseeds > 1) {
		json_t *a = json_array();
		for (unsigned k = 0; k < r->nseeds && k < REPLAY_SEEDS_MAX; k++) {
			json_t *e = json_object();
			json_object_set_new(e, "seed", json_integer((json_int_t)r->seeds[k]));
			for (int f = 0; f < SEED_FIGS; f++)
				json_object_set_new(e, seed_fig_name[f],
						    bench_json_real(100.0 * r->seed_fig[f][k]));
			json_array_append_new(a, e);
		}
		json_object_set_new(o, "seed_runs", a);
	}
	if (r->store_stats)
		json_object_set(o, "store_stats", r->store_stats);
	return o;
}

/* The CSV lines of replay_write_csv() to f. */
static void csv_lines(FILE *f, const struct replay_result *r, size_t n,
		      const char *sweep_param, const double *sweep_values)
{
	size_t k;
	int i;

	fprintf(f, "label,policy");
	if (sweep_param)
		fprintf(f, ",%s", sweep_param);
	for (i = 0; i < F_N; i++)
		fprintf(f, ",%s", fields[i].name);
	fputc('\n', f);
	for (k = 0; k < n; k++) {
		fprintf(f, "\"%s\",%s", r[k].label, replay_policy_name[r[k].policy]);
		if (sweep_param)
			fprintf(f, ",%.17g", sweep_values ? sweep_values[k] : 0.0);
		for (i = 0; i < F_N; i++) {
			double v = fget(&r[k], i);
			if (isnan(v))
				fprintf(f, ",");
			else
				fprintf(f, ",%.6g", v);
		}
		fputc('\n', f);
	}
}

int replay_write_csv(const char *path, const struct replay_result *r, size_t n,
		     const char *sweep_param, const double *sweep_values)
{
	struct bench_out out;
	FILE *f;
	int err;

	if (!strcmp(path, "-")) {
		/* the standard output set aside for results (--csv - sent
		 * the tables to stderr), through a copy that fclose may close */
		out = (struct bench_out){ .fd = dup(bench_result_stdout()), .path = path };
		if (out.fd < 0)
			return bench_out_close(&out, -errno);
	} else {
		/* as --json: a temporary file renamed over a regular file, a
		 * device written in place (bench_out_open()) */
		err = bench_out_open(path, &out);
		if (err)
			return err;
	}
	f = fdopen(out.fd, "w");
	if (!f)
		return bench_out_close(&out, -errno);
	out.fd = -1; /* f owns it now */
	csv_lines(f, r, n, sweep_param, sweep_values);
	err = ferror(f) ? -EIO : 0;
	if (fclose(f) && !err)
		err = -errno;
	return bench_out_close(&out, err);
}
