/*
 * replay_figures.c - the model's figures from a finished run, all on the
 * simulated clock: busy time (the union of each endpoint's call intervals),
 * prefill time saved by each tier, makespan, throughput, TTFT and load
 * percentiles.
 *
 * Knows nothing about the store or the event order.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "kvtier.h"
#include "lru.h"
#include "replay.h"
#include "replay_impl.h"

static int interval_cmp(const void *a, const void *b)
{
	const struct replay_interval *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

double replay_busy_union(struct replay_interval *v, size_t n)
{
	double total = 0, s, e;
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), interval_cmp);
	s = v[0].start;
	e = v[0].end;
	for (i = 1; i < n; i++) {
		if (v[i].start > e) {
			total += e - s;
			s = v[i].start;
			e = v[i].end;
		} else if (v[i].end > e) {
			e = v[i].end;
		}
	}
	return total + (e - s);
}

void replay_savings(struct replay_result *res, double prefill_rate)
{
	double store = (double)(res->tok[T_RAM] + res->tok[T_DISK] + res->tok[T_PEER]);
	double avoided = store / prefill_rate;

	res->saved_store = res->saved_store_net = res->saved_store_net_div = 0;
	res->saved_store_union = 0;
	res->saved_disk = res->saved_gpu = 0;
	res->disk_of_saving = store > 0 ? (double)res->tok[T_DISK] / store : 0;
	if (!(res->busy_s > 0))
		return;
	res->saved_store = avoided / res->busy_s;
	res->saved_store_net = (avoided - res->charged_load_s) / res->busy_s;
	res->saved_store_net_div = (avoided - res->charged_div_s) / res->busy_s;
	res->saved_disk = (double)res->tok[T_DISK] / prefill_rate / res->busy_s;
	res->saved_gpu = (double)res->tok[T_GPU] / prefill_rate / res->busy_s;
	res->saved_store_union = res->busy_union_s > 0 ? avoided / res->busy_union_s : 0;
}

/* Where call i's interval ends: its decode's end, or, in a run stopped
 * before the call was done, the simulated time reached. */
static double call_end(const struct run *r, size_t i)
{
	return r->done_t[i] >= 0 ? r->done_t[i] : r->res->sim_s;
}

/* Busy time: per endpoint, the union of its calls' intervals from arrival
 * to the end of their decode; summed over endpoints. Also the union over
 * all endpoints and the mean number of calls outstanding while busy. Calls
 * that never arrived (a stopped run) count nothing. */
static int busy_time(struct run *r)
{
	const size_t n = r->w->ncalls;
	struct replay_interval *v = malloc((n ? n : 1) * sizeof(*v));
	double inside = 0;
	size_t i, k;
	uint32_t e;

	if (!v)
		return rp_fail(r, -ENOMEM, "out of memory");
	r->res->busy_s = 0;
	for (e = 0; e < r->o->endpoints; e++) {
		for (i = 0, k = 0; i < n; i++)
			if (r->arrive[i] >= 0 && r->ep_of[i] == e) {
				v[k].start = r->arrive[i];
				v[k].end = call_end(r, i);
				inside += v[k].end - v[k].start;
				k++;
			}
		r->res->busy_s += replay_busy_union(v, k);
	}
	for (i = 0, k = 0; i < n; i++)
		if (r->arrive[i] >= 0) {
			v[k].start = r->arrive[i];
			v[k].end = call_end(r, i);
			k++;
		}
	r->res->busy_union_s = replay_busy_union(v, k);
	free(v);
	r->res->mean_outstanding = r->res->busy_s > 0 ? inside / r->res->busy_s : 0;
	return 0;
}

/* The model's figures, all on the simulated clock, and the percentiles of
 * the measured loads. */
int rp_run_figures(struct run *r)
{
	const struct replay_opts *o = r->o;
	struct replay_result *res = r->res;
	size_t n = r->w->ncalls;
	int rc;

	rc = busy_time(r);
	if (rc)
		return rc;
	res->prefill_s = r->prefill_s;
	res->decode_s = r->decode_s;
	res->makespan_s = r->last_t - (r->first_t > 0 ? r->first_t : 0);
	res->throughput = res->makespan_s > 0 ? (double)n / res->makespan_s : 0;
	if (res->makespan_s > 0) {
		res->mean_running = res->mean_outstanding * res->busy_s / res->makespan_s;
		res->store_gib_900s = (double)(res->tok[T_RAM] + res->tok[T_DISK] + res->tok[T_PEER]) *
				      (double)o->kv_bytes_per_token / 1073741824.0 * 900.0 /
				      res->makespan_s;
		rp_pool_figures(r);
	}
	replay_savings(res, o->prefill_rate);
	bench_sort(r->ttft, r->nttft);
	res->ttft_p50 = bench_percentile_sorted(r->ttft, r->nttft, 50);
	res->ttft_p90 = bench_percentile_sorted(r->ttft, r->nttft, 90);
	res->ttft_p99 = bench_percentile_sorted(r->ttft, r->nttft, 99);
	if (r->reuse_s.n) {
		bench_sort(r->reuse_s.v, r->reuse_s.n);
		res->reuse_p99_s = bench_percentile_sorted(r->reuse_s.v, r->reuse_s.n, 99);
		res->reuse_max_s = r->reuse_s.v[r->reuse_s.n - 1];
	}
	if (r->load_us.n) {
		bench_sort(r->load_us.v, r->load_us.n);
		res->load_p50_us = bench_percentile_sorted(r->load_us.v, r->load_us.n, 50);
		res->load_p90_us = bench_percentile_sorted(r->load_us.v, r->load_us.n, 90);
		res->load_p99_us = bench_percentile_sorted(r->load_us.v, r->load_us.n, 99);
		res->load_max_us = r->load_us.v[r->load_us.n - 1];
	}
	res->lag_mean_s = r->lag_n ? r->lag_sum / (double)r->lag_n : 0;
	return 0;
}
