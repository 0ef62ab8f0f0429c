/*
 * stats.h - counters and latency histograms (log-linear buckets, lock-free
 * recording) rendered into jansson objects. Knows nothing about tiers.
 */
#ifndef KVT_STATS_H
#define KVT_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include <jansson.h>

/* 64 powers of two, each split in 8 linear sub-buckets. */
#define HIST_SUB 8
#define HIST_BUCKETS (64 * HIST_SUB)

struct hist {
	_Atomic uint64_t b[HIST_BUCKETS];
	_Atomic uint64_t count;
	_Atomic uint64_t sum;
	_Atomic uint64_t max;
};

void hist_record(struct hist *h, uint64_t v);
/* Value at quantile q in [0,1] (upper bound of its bucket), 0 if empty. */
uint64_t hist_quantile(const struct hist *h, double q);
/* Adds {count, mean_us, p50_us, p90_us, p99_us, p999_us, max_us} for ns values. */
json_t *hist_json_us(const struct hist *h);

static inline void ctr_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline uint64_t ctr_get(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

#endif
