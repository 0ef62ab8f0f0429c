/*
 * stats.c - latency histograms: log-linear buckets (each power of two split
 * in HIST_SUB linear steps, so a quantile is within 12.5% of the truth),
 * recorded with relaxed atomics from any thread; and the JSON rendering of
 * every counter a component reports through a stat_visitor, the only place
 * the library renders statistics. Knows nothing about tiers.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "internal.h"
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

/* --- rendering ------------------------------------------------------------- */

/* Sets x as name of the object o, or appends it when o is an array. */
static void json_put(json_t *o, const char *name, json_t *x)
{
	if (json_is_array(o))
		json_array_append_new(o, x);
	else
		json_object_set_new(o, name, x);
}

static void json_emit(void *arg, const char *name, struct stat_val v)
{
	json_t *x = NULL;

	switch (v.kind) {
	case STAT_INT:
		x = json_integer((json_int_t)v.i);
		break;
	case STAT_REAL:
		x = json_real(v.r);
		break;
	case STAT_BOOL:
		x = json_boolean(v.i);
		break;
	case STAT_HIST:
		x = hist_json_us(v.h);
		break;
	case STAT_STR:
		x = json_string(v.s ? v.s : "");
		break;
	}
	json_put(arg, name, x);
}

static struct stat_visitor json_nest(void *arg, const char *name, int list)
{
	json_t *x = list ? json_array() : json_object();

	json_put(arg, name, x);
	return stats_json_visitor(x);
}

struct stat_visitor stats_json_visitor(json_t *obj)
{
	return (struct stat_visitor){ .emit = json_emit, .nest = json_nest, .arg = obj };
}

static void drop_emit(void *arg, const char *name, struct stat_val v)
{
	(void)arg;
	(void)name;
	(void)v;
}

struct stat_visitor stat_nest(const struct stat_visitor *v, const char *name, int list)
{
	if (v->nest)
		return v->nest(v->arg, name, list);
	return (struct stat_visitor){ .emit = drop_emit };
}

struct stats_doc {
	json_t *root;
};

struct stats_doc *stats_doc_new(const char *version)
{
	struct stats_doc *d = malloc(sizeof(*d));

	if (!d)
		return NULL;
	d->root = json_object();
	if (!d->root) {
		free(d);
		return NULL;
	}
	json_object_set_new(d->root, "version", json_string(version));
	return d;
}

static json_t *doc_section(struct stats_doc *d, const char *name)
{
	json_t *o = json_object_get(d->root, name);

	if (!o) {
		o = json_object();
		json_object_set_new(d->root, name, o);
	}
	return o;
}

struct stat_visitor stats_doc_section(struct stats_doc *d, const char *name)
{
	return stats_json_visitor(doc_section(d, name));
}

int stats_doc_render(struct stats_doc *d, char *buf, size_t cap)
{
	char *text = json_dumps(d->root, JSON_COMPACT | JSON_SORT_KEYS);

	json_decref(d->root);
	free(d);
	if (!text)
		return kvt_fail(-ENOMEM, "kvt_stats_json: out of memory");
	size_t n = strlen(text);
	if (cap) {
		size_t c = n < cap - 1 ? n : cap - 1;
		memcpy(buf, text, c);
		buf[c] = 0;
	}
	free(text);
	if (n > INT32_MAX)
		return kvt_fail(-EOVERFLOW, "kvt_stats_json: document too large");
	return (int)n;
}
