/*
 * measure.c - what kvbench measures with (see bench.h): the clock,
 * percentiles and summaries of samples, threads released together and
 * pinned, and token ids to hash or store.
 *
 * Knows nothing about the store or any particular command.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* --- time and statistics --------------------------------------------------- */

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

void bench_sort(double *v, size_t n)
{
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_double);
}

double bench_percentile_sorted(const double *v, size_t n, double p)
{
	double rank, frac;
	size_t lo, hi;

	if (n == 0 || isnan(p))
		return NAN;
	if (p < 0)
		p = 0;
	if (p > 100)
		p = 100;
	rank = p / 100.0 * (double)(n - 1);
	lo = (size_t)rank;
	if (lo >= n - 1)
		return v[n - 1];
	hi = lo + 1;
	frac = rank - (double)lo;
	return v[lo] + (v[hi] - v[lo]) * frac;
}

double bench_percentile(double *v, size_t n, double p)
{
	bench_sort(v, n);
	return bench_percentile_sorted(v, n, p);
}

double bench_median(double *v, size_t n)
{
	return bench_percentile(v, n, 50);
}

void bench_summarize(double *v, size_t n, struct bench_summary *s)
{
	double sum = 0;
	size_t i;

	s->n = n;
	if (n == 0) {
		s->min = s->max = s->mean = s->median = s->p90 = s->p99 = NAN;
		return;
	}
	bench_sort(v, n);
	for (i = 0; i < n; i++)
		sum += v[i];
	s->min = v[0];
	s->max = v[n - 1];
	s->mean = sum / (double)n;
	s->median = bench_percentile_sorted(v, n, 50);
	s->p90 = bench_percentile_sorted(v, n, 90);
	s->p99 = bench_percentile_sorted(v, n, 99);
}

int bench_samples_reserve(struct bench_samples *s, size_t want)
{
	size_t cap;
	double *v;

	if (want <= s->cap)
		return 0;
	cap = s->cap ? s->cap : 256;
	while (cap < want)
		cap *= 2;
	v = realloc(s->v, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	s->v = v;
	s->cap = cap;
	return 0;
}

int bench_samples_add(struct bench_samples *s, double x)
{
	if (s->n == s->cap && bench_samples_reserve(s, s->n + 1)) {
		s->lost++;
		return -ENOMEM;
	}
	s->v[s->n++] = x;
	return 0;
}

int bench_samples_append(struct bench_samples *dst,
			 const struct bench_samples *src)
{
	if (bench_samples_reserve(dst, dst->n + src->n)) {
		dst->lost += src->n;
		return -ENOMEM;
	}
	if (src->n)
		memcpy(dst->v + dst->n, src->v, src->n * sizeof(*src->v));
	dst->n += src->n;
	dst->lost += src->lost;
	return 0;
}

void bench_samples_clear(struct bench_samples *s)
{
	s->n = 0;
	s->lost = 0;
}

void bench_samples_free(struct bench_samples *s)
{
	free(s->v);
	s->v = NULL;
	s->n = s->cap = s->lost = 0;
}

/* --- threads ---------------------------------------------------------------- */

unsigned bench_ncpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (unsigned)n : 1;
}

/* One CPU's place: its package, its core, and its rank among the core's
 * hardware threads (0 for the first), from sysfs; -1 where unknown. */
struct cpu_place {
	int cpu, pkg, core, rank;
};

/* The first line of cpu's sysfs topology file name into buf (empty where
 * it cannot be read). */
static void topology_line(int cpu, const char *name, char *buf, int n)
{
	char path[96];

	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, name);
	FILE *f = fopen(path, "r");
	if (!f || !fgets(buf, n, f))
		buf[0] = 0;
	if (f)
		fclose(f);
}

/* A number from cpu's sysfs topology, or -1. */
static int read_topology_int(int cpu, const char *name)
{
	char line[64], *end;

	topology_line(cpu, name, line, sizeof(line));
	long v = strtol(line, &end, 10);
	return end == line ? -1 : (int)v;
}

unsigned bench_cpu_list_rank(const char *list, int cpu)
{
	unsigned rank = 0;

	for (const char *p = list; p && *p && *p != '\n';) {
		char *end;
		long a = strtol(p, &end, 10), b = a;

		if (end == p)
			break;
		if (*end == '-')
			b = strtol(end + 1, &end, 10);
		if (a <= cpu && cpu <= b)
			return rank + (unsigned)(cpu - a);
		if (b >= a)
			rank += (unsigned)(b - a + 1);
		p = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* cpu's rank among the hardware threads of its core (its
 * thread_siblings_list); 0 where unknown. */
static int sibling_rank(int cpu)
{
	char list[256];

	topology_line(cpu, "thread_siblings_list", list, sizeof(list));
	return (int)bench_cpu_list_rank(list, cpu);
}

static int cmp_place(const void *a, const void *b)
{
	const struct cpu_place *x = a, *y = b;

	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->pkg != y->pkg)
		return x->pkg < y->pkg ? -1 : 1;
	if (x->core != y->core)
		return x->core < y->core ? -1 : 1;
	return x->cpu < y->cpu ? -1 : x->cpu > y->cpu;
}

/*
 * The CPUs the process may run on, in the order threads take them: the
 * first hardware thread of every core (package by package), then the
 * second of every core, and so on, so that n threads run on n cores
 * wherever there are n, not on two threads of one core that share its
 * units (on a machine whose CPUs 0 and 1 are one core's two threads, two
 * threads pinned to them measure the core, not the code). Returns how
 * many were written to order (at most cap), 0 on failure.
 */
static unsigned cpu_order(int *order, unsigned cap, unsigned *cores)
{
	cpu_set_t set;
	struct cpu_place *pl;
	unsigned n = 0;

	if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1)
		return 0;
	pl = calloc((size_t)CPU_COUNT(&set), sizeof(*pl));
	if (!pl)
		return 0;
	for (int c = 0; c < CPU_SETSIZE && n < (unsigned)CPU_COUNT(&set); c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		pl[n].cpu = c;
		pl[n].pkg = read_topology_int(c, "physical_package_id");
		pl[n].core = read_topology_int(c, "core_id");
		pl[n].rank = sibling_rank(c);
		n++;
	}
	qsort(pl, n, sizeof(*pl), cmp_place);
	*cores = 0;
	for (unsigned i = 0; i < n; i++)
		*cores += pl[i].rank == 0;
	if (n > cap)
		n = cap;
	for (unsigned i = 0; i < n; i++)
		order[i] = pl[i].cpu;
	free(pl);
	return n;
}

int bench_pin_cpu(unsigned cpu)
{
	cpu_set_t set;
	int err;

	CPU_ZERO(&set);
	CPU_SET(cpu % bench_ncpus(), &set);
	err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	return -err;
}

unsigned bench_ncores(void)
{
	int *order = calloc(CPU_SETSIZE, sizeof(*order));
	unsigned cores = 0;

	if (order && !cpu_order(order, CPU_SETSIZE, &cores))
		cores = 0;
	free(order);
	return cores ? cores : bench_ncpus();
}

struct par_ctx {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state; /* 0: wait, 1: run, -1: abort (a thread failed to start) */
	bench_thread_fn fn;
	void *arg;
	unsigned nthreads;
};

struct par_thread {
	struct par_ctx *ctx;
	unsigned tid;
	int cpu;                  /* where it is pinned, or -1 */
	pthread_t th;
};

static void *par_main(void *p)
{
	struct par_thread *t = p;
	struct par_ctx *c = t->ctx;
	int state;

	if (t->cpu >= 0)
		bench_pin_cpu((unsigned)t->cpu);
	pthread_mutex_lock(&c->mu);
	while (c->state == 0)
		pthread_cond_wait(&c->cv, &c->mu);
	state = c->state;
	pthread_mutex_unlock(&c->mu);
	if (state > 0)
		c->fn(t->tid, c->nthreads, c->arg);
	return NULL;
}

int bench_parallel(unsigned nthreads, int pin, bench_thread_fn fn, void *arg,
		   uint64_t *wall_ns)
{
	struct par_ctx ctx = { .mu = PTHREAD_MUTEX_INITIALIZER,
			       .cv = PTHREAD_COND_INITIALIZER,
			       .fn = fn, .arg = arg, .nthreads = nthreads };
	struct par_thread *t;
	uint64_t t0;
	unsigned i, started;
	int err = 0;

	if (nthreads == 0 || !fn)
		return -EINVAL;
	t = calloc(nthreads, sizeof(*t));
	int *order = pin ? calloc(CPU_SETSIZE, sizeof(*order)) : NULL;
	unsigned norder = 0, cores;
	if (!t || (pin && !order)) {
		free(t);
		free(order);
		return -ENOMEM;
	}
	if (pin)
		norder = cpu_order(order, CPU_SETSIZE, &cores);
	for (started = 0; started < nthreads; started++) {
		t[started].ctx = &ctx;
		t[started].tid = started;
		t[started].cpu = !pin ? -1 : norder ? order[started % norder] :
				 (int)(started % bench_ncpus());
		err = pthread_create(&t[started].th, NULL, par_main, &t[started]);
		if (err)
			break;
	}
	if (err)
		fprintf(stderr, "kvbench: cannot start thread %u of %u: %s\n",
			started + 1, nthreads, strerror(err));
	/* Release everyone at once: to run, or (some thread missing) to quit. */
	pthread_mutex_lock(&ctx.mu);
	ctx.state = err ? -1 : 1;
	t0 = bench_now_ns();
	pthread_cond_broadcast(&ctx.cv);
	pthread_mutex_unlock(&ctx.mu);
	for (i = 0; i < started; i++)
		pthread_join(t[i].th, NULL);
	if (!err && wall_ns)
		*wall_ns = bench_now_ns() - t0;
	pthread_cond_destroy(&ctx.cv);
	pthread_mutex_destroy(&ctx.mu);
	free(order);
	free(t);
	return -err;
}

/* --- token ids ---------------------------------------------------------------- */

void bench_tokens(uint32_t *tokens, size_t n, uint32_t vocab, uint64_t seed)
{
	size_t i;

	if (vocab == 0)
		vocab = 1;
	for (i = 0; i < n; i++)
		tokens[i] = (uint32_t)(common_mix64(&seed) % vocab);
}
