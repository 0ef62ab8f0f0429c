/*
 * stats.c - latency histograms: log-linear buckets (each power of two split
 * in HIST_SUB linear steps, so a quantile is within 12.5% of the truth),
 * recorded with relaxed atomics from any thread. Knows nothing about tiers.
 */
#include <math.h>

#include "stats.h"

static unsigned bucket_of(uint64_t v)
{
	if (v < HIST_SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);   /* >= 3 */
	unsigned sub = (unsigned)(v >> (msb - 3)) & (HIST_SUB - 1);
	return (msb - 2) * HIST_SUB + sub;
}

/* Largest value that falls in bucket i. */
static uint64_t bucket_top(unsigned i)
{
	if (i < HIST_SUB)
		return i;
	unsigned msb = i / HIST_SUB + 2, sub = i % HIST_SUB;
	uint64_t lo = (1ull << msb) | ((uint64_t)sub << (msb - 3));
	return lo + (1ull << (msb - 3)) - 1;
}

void hist_record(struct hist *h, uint64_t v)
{
	ctr_add(&h->b[bucket_of(v)], 1);
	ctr_add(&h->count, 1);
	ctr_add(&h->sum, v);
	uint64_t m = atomic_load_explicit(&h->max, memory_order_relaxed);
	while (v > m && !atomic_compare_exchange_weak_explicit(
			&h->max, &m, v, memory_order_relaxed, memory_order_relaxed))
		;
}

uint64_t hist_quantile(const struct hist *h, double q)
{
	uint64_t n = 0, seen = 0, counts[HIST_BUCKETS];

	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		n += counts[i] = atomic_load_explicit(&h->b[i], memory_order_relaxed);
	if (n == 0)
		return 0;
	if (q < 0)
		q = 0;
	if (q > 1)
		q = 1;
	uint64_t rank = (uint64_t)ceil(q * (double)n);
	if (rank == 0)
		rank = 1;
	uint64_t max = atomic_load_explicit(&h->max, memory_order_relaxed);
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += counts[i];
		if (seen >= rank) {
			uint64_t top = bucket_top(i);
			return top < max ? top : max;
		}
	}
	return max;
}

json_t *hist_json_us(const struct hist *h)
{
	uint64_t n = ctr_get((_Atomic uint64_t *)&h->count);
	uint64_t sum = ctr_get((_Atomic uint64_t *)&h->sum);
	json_t *o = json_object();

	json_object_set_new(o, "count", json_integer((json_int_t)n));
	json_object_set_new(o, "mean_us", json_real(n ? (double)sum / (double)n / 1e3 : 0.0));
	json_object_set_new(o, "p50_us", json_real((double)hist_quantile(h, 0.50) / 1e3));
	json_object_set_new(o, "p90_us", json_real((double)hist_quantile(h, 0.90) / 1e3));
	json_object_set_new(o, "p99_us", json_real((double)hist_quantile(h, 0.99) / 1e3));
	json_object_set_new(o, "p999_us", json_real((double)hist_quantile(h, 0.999) / 1e3));
	json_object_set_new(o, "max_us", json_real((double)ctr_get((_Atomic uint64_t *)&h->max) / 1e3));
	return o;
}
