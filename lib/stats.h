/*
 * stats.h - counters, latency histograms (log-linear buckets, lock-free
 * recording), the visitor through which every component reports its
 * counters (struct stat_visitor: emit(arg, name, value) and nested sections
 * and lists, so no component knows the output format), and the statistics document of kvt_stats_json,
 * the one place that renders them as JSON (stats.c). Knows nothing about
 * tiers.
 */
#ifndef KVT_STATS_H
#define KVT_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct json_t; /* jansson's, for the two callers that hold one */

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
/* {count, mean_us, p50_us, p90_us, p99_us, p999_us, max_us} for ns values. */
struct json_t *hist_json_us(const struct hist *h);

/* --- reporting counters ----------------------------------------------------- */

enum stat_kind { STAT_INT, STAT_REAL, STAT_BOOL, STAT_HIST, STAT_STR };

struct stat_val {
	enum stat_kind kind;
	int64_t i;              /* STAT_INT; STAT_BOOL: 0 or 1 */
	double r;               /* STAT_REAL */
	const struct hist *h;   /* STAT_HIST: a latency histogram of ns values */
	const char *s;          /* STAT_STR: copied by the renderer */
};

/*
 * A component's stats call reports each counter once, by name, through
 * emit (the order does not matter); it never learns how they are shown.
 * nest (NULL: the visitor keeps no nested values) gives the visitor of a
 * nested section (list 0) or list (list 1) called name; inside a list,
 * name is NULL and each emit or nest adds the next item. Call it through
 * stat_nest().
 */
struct stat_visitor {
	void (*emit)(void *arg, const char *name, struct stat_val v);
	struct stat_visitor (*nest)(void *arg, const char *name, int list);
	void *arg;
};

static inline void stat_int(const struct stat_visitor *v, const char *name, int64_t x)
{
	v->emit(v->arg, name, (struct stat_val){ .kind = STAT_INT, .i = x });
}

static inline void stat_real(const struct stat_visitor *v, const char *name, double x)
{
	v->emit(v->arg, name, (struct stat_val){ .kind = STAT_REAL, .r = x });
}

static inline void stat_bool(const struct stat_visitor *v, const char *name, int x)
{
	v->emit(v->arg, name, (struct stat_val){ .kind = STAT_BOOL, .i = !!x });
}

static inline void stat_hist(const struct stat_visitor *v, const char *name,
			     const struct hist *h)
{
	v->emit(v->arg, name, (struct stat_val){ .kind = STAT_HIST, .h = h });
}

static inline void stat_str(const struct stat_visitor *v, const char *name, const char *x)
{
	v->emit(v->arg, name, (struct stat_val){ .kind = STAT_STR, .s = x });
}

/* The visitor of the section (list 0) or list (list 1) name of v; one
 * that drops what it is given when v keeps no nested values. */
struct stat_visitor stat_nest(const struct stat_visitor *v, const char *name, int list);

/* A visitor that sets each counter as a member of the jansson object obj
 * (histograms as hist_json_us objects, sections as objects, lists as
 * arrays). */
struct stat_visitor stats_json_visitor(struct json_t *obj);

/* --- the document of kvt_stats_json ------------------------------------------ */

struct stats_doc;

/* An empty document carrying the library's version; NULL: out of memory. */
struct stats_doc *stats_doc_new(const char *version);

/* A visitor that adds counters to the section `name` of the document. */
struct stat_visitor stats_doc_section(struct stats_doc *d, const char *name);

/* Renders the document as compact JSON with sorted keys into buf like
 * snprintf (kvt_stats_json's contract) and frees it. Returns the length,
 * or -ENOMEM / -EOVERFLOW with kvt_last_error() set. */
int stats_doc_render(struct stats_doc *d, char *buf, size_t cap);

static inline void ctr_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline uint64_t ctr_get(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

#endif
