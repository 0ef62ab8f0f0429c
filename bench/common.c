/*
 * common.c - helpers shared by kvbench's subcommands (see bench.h): option
 * handling, size parsing, time and percentiles, threads, the memcpy limit,
 * verifiable block contents, aligned tables, JSON results, the store's stats
 * and temporary directories.
 *
 * Uses only the public <kvtier.h>; knows nothing about any particular
 * subcommand or about the library's internals.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* --- options ---------------------------------------------------------------- */

void bench_getopt_begin(void)
{
	optind = 0; /* glibc: full re-initialisation */
	opterr = 0;
}

void bench_common_init(struct bench_common *co)
{
	co->json_path = NULL;
	co->reps = BENCH_DEFAULT_REPS;
}

static void vusage_error(const char *cmd, const char *usage, const char *fmt,
			 va_list ap)
{
	fprintf(stderr, "kvbench %s: ", cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	if (usage)
		fputs(usage, stderr);
}

int bench_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vusage_error(cmd, usage, fmt, ap);
	va_end(ap);
	return BENCH_EXIT_USAGE;
}

/* The command-line spelling of the option getopt just rejected. */
static void bad_option_name(char **argv, char *buf, size_t cap)
{
	const char *last = (argv && optind > 0) ? argv[optind - 1] : NULL;

	if (last && last[0] == '-' && last[1] == '-') {
		/* "--name" or "--name=value": report the name only */
		size_t len = strcspn(last, "=");
		snprintf(buf, cap, "%.*s", (int)len, last);
	} else if (optopt > 0 && optopt < 0x100 && isprint(optopt)) {
		snprintf(buf, cap, "-%c", optopt);
	} else if (last) {
		snprintf(buf, cap, "%s", last);
	} else {
		snprintf(buf, cap, "?");
	}
}

int bench_common_option(const char *cmd, const char *usage, int c,
			const char *arg, char **argv, struct bench_common *co)
{
	char name[64];
	unsigned long v;

	switch (c) {
	case BENCH_OPT_JSON:
		if (!arg || !*arg) {
			bench_usage_error(cmd, usage, "--json needs a file name");
			return -1;
		}
		co->json_path = arg;
		return 1;
	case BENCH_OPT_REPS:
		if (bench_parse_uint(arg, 1, 1000000, &v)) {
			bench_usage_error(cmd, usage,
					  "bad --reps '%s': an integer from 1 to 1000000",
					  arg ? arg : "");
			return -1;
		}
		co->reps = (unsigned)v;
		return 1;
	case '?':
		bad_option_name(argv, name, sizeof(name));
		bench_usage_error(cmd, usage, "unknown option '%s'", name);
		return -1;
	case ':':
		bad_option_name(argv, name, sizeof(name));
		bench_usage_error(cmd, usage, "option '%s' needs a value", name);
		return -1;
	default:
		return 0;
	}
}

int bench_parse_uint(const char *s, unsigned long min, unsigned long max,
		     unsigned long *out)
{
	unsigned long long v;
	char *end;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*out = (unsigned long)v;
	return 0;
}

/*
 * Copies the next comma-separated item of *s into item (cap bytes) and moves
 * *s past it. Returns 1 when more items follow, 0 after the last, -EINVAL for
 * an empty item or one of cap bytes or more.
 */
static int list_item(const char **s, char *item, size_t cap)
{
	size_t len = strcspn(*s, ",");

	if (len == 0 || len >= cap)
		return -EINVAL;
	memcpy(item, *s, len);
	item[len] = '\0';
	if (!(*s)[len])
		return 0;
	*s += len + 1;
	return 1;
}

int bench_parse_uint_list(const char *s, unsigned long min, unsigned long max,
			  unsigned long *out, size_t max_n, size_t *n)
{
	char item[32];
	size_t count = 0;
	int more = 1, err;

	if (!s)
		return -EINVAL;
	while (more) {
		more = list_item(&s, item, sizeof(item));
		if (more < 0)
			return more;
		if (count == max_n)
			return -E2BIG;
		err = bench_parse_uint(item, min, max, &out[count]);
		if (err)
			return err;
		count++;
	}
	*n = count;
	return 0;
}

/* --- sizes -------------------------------------------------------------------- */

static int unit_shift(const char *u, unsigned *shift)
{
	static const struct {
		const char *name;
		unsigned shift;
	} units[] = {
		{ "", 0 },    { "b", 0 },    { "k", 10 },   { "kb", 10 },
		{ "kib", 10 }, { "m", 20 },   { "mb", 20 },  { "mib", 20 },
		{ "g", 30 },  { "gb", 30 },  { "gib", 30 }, { "t", 40 },
		{ "tb", 40 }, { "tib", 40 },
	};
	char low[8];
	size_t i, len = strlen(u);

	if (len >= sizeof(low))
		return -EINVAL;
	for (i = 0; i <= len; i++)
		low[i] = (char)tolower((unsigned char)u[i]);
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcmp(low, units[i].name)) {
			*shift = units[i].shift;
			return 0;
		}
	}
	return -EINVAL;
}

int bench_parse_size(const char *s, uint64_t *out)
{
	uint64_t whole = 0, frac = 0, scale = 1, mult;
	unsigned shift;
	int digits = 0;
	unsigned __int128 total;

	if (!s || !out)
		return -EINVAL;
	for (; isdigit((unsigned char)*s); s++, digits++) {
		if (__builtin_mul_overflow(whole, 10, &whole) ||
		    __builtin_add_overflow(whole, (uint64_t)(*s - '0'), &whole))
			return -ERANGE;
	}
	if (*s == '.') {
		s++;
		for (; isdigit((unsigned char)*s); s++, digits++) {
			if (scale < 1000000000000000000ull) { /* 18 digits kept */
				frac = frac * 10 + (uint64_t)(*s - '0');
				scale *= 10;
			}
		}
	}
	if (digits == 0)
		return -EINVAL;
	if (*s == ' ') {
		while (*s == ' ')
			s++;
		if (!*s)
			return -EINVAL; /* a space, then no unit */
	}
	if (unit_shift(s, &shift))
		return -EINVAL;
	mult = 1ull << shift;
	total = (unsigned __int128)whole * mult +
		(unsigned __int128)frac * mult / scale;
	if (total > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)total;
	return 0;
}

int bench_parse_size_list(const char *s, uint64_t *out, size_t max_n,
			  size_t *n)
{
	char item[64];
	size_t count = 0;
	int more = 1, err;

	if (!s)
		return -EINVAL;
	while (more) {
		more = list_item(&s, item, sizeof(item));
		if (more < 0)
			return more;
		if (count == max_n)
			return -E2BIG;
		err = bench_parse_size(item, &out[count]);
		if (err)
			return err;
		if (out[count] == 0)
			return -EINVAL;
		count++;
	}
	*n = count;
	return 0;
}

const char *bench_fmt_size(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned i = 0;

	while (i < 4 && bytes != 0 && (bytes & 1023) == 0) {
		bytes >>= 10;
		i++;
	}
	snprintf(buf, cap, "%llu%s", (unsigned long long)bytes, names[i]);
	return buf;
}

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

static int samples_reserve(struct bench_samples *s, size_t want)
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
	if (s->n == s->cap && samples_reserve(s, s->n + 1)) {
		s->lost++;
		return -ENOMEM;
	}
	s->v[s->n++] = x;
	return 0;
}

int bench_samples_append(struct bench_samples *dst,
			 const struct bench_samples *src)
{
	if (samples_reserve(dst, dst->n + src->n)) {
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

int bench_pin_cpu(unsigned cpu)
{
	cpu_set_t set;
	int err;

	CPU_ZERO(&set);
	CPU_SET(cpu % bench_ncpus(), &set);
	err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	return -err;
}

struct par_ctx {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state; /* 0: wait, 1: run, -1: abort (a thread failed to start) */
	bench_thread_fn fn;
	void *arg;
	unsigned nthreads;
	int pin;
};

struct par_thread {
	struct par_ctx *ctx;
	unsigned tid;
	pthread_t th;
};

static void *par_main(void *p)
{
	struct par_thread *t = p;
	struct par_ctx *c = t->ctx;
	int state;

	if (c->pin)
		bench_pin_cpu(t->tid);
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
			       .fn = fn, .arg = arg, .nthreads = nthreads,
			       .pin = pin };
	struct par_thread *t;
	uint64_t t0;
	unsigned i, started;
	int err = 0;

	if (nthreads == 0 || !fn)
		return -EINVAL;
	t = calloc(nthreads, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (started = 0; started < nthreads; started++) {
		t[started].ctx = &ctx;
		t[started].tid = started;
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
	free(t);
	return -err;
}

/* --- the machine's limit: memcpy ------------------------------------------- */

struct bench_memcpy {
	size_t block;
	size_t nblocks;
	unsigned max_dst;
	unsigned threads;
	char *src;
	size_t src_len;
	char **dst; /* [threads]: max_dst blocks each */
};

void *bench_buffer_alloc(size_t len)
{
	void *p = NULL;
	int err;

	if (len == 0) {
		errno = EINVAL;
		return NULL;
	}
	err = posix_memalign(&p, 4096, len);
	if (err) {
		errno = err;
		return NULL;
	}
	memset(p, 0x5a, len); /* fault every page in, with non-zero bytes */
	return p;
}

void bench_memcpy_free(struct bench_memcpy *m)
{
	unsigned i;

	if (!m)
		return;
	if (m->dst)
		for (i = 0; i < m->threads; i++)
			free(m->dst[i]);
	free(m->dst);
	if (m->src)
		munmap(m->src, m->src_len);
	free(m);
}

struct bench_memcpy *bench_memcpy_new(size_t block, size_t src_bytes,
				      unsigned max_dst, unsigned threads)
{
	struct bench_memcpy *m;
	unsigned i;
	int saved;

	if (block == 0 || src_bytes == 0 || max_dst == 0 || threads == 0) {
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->block = block;
	m->nblocks = src_bytes / block ? src_bytes / block : 1;
	m->max_dst = max_dst;
	m->threads = threads;
	if (__builtin_mul_overflow(m->nblocks, block, &m->src_len) ||
	    max_dst > SIZE_MAX / block) {
		free(m);
		errno = EOVERFLOW;
		return NULL;
	}
	m->src = mmap(NULL, m->src_len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m->src == MAP_FAILED) {
		m->src = NULL;
		goto fail;
	}
	/* Like the arena: transparent huge pages advised, touched by writing
	 * (no zero-page reads), locked when the machine allows it. */
	(void)madvise(m->src, m->src_len, MADV_HUGEPAGE);
	common_fill(m->src, m->src_len, 0x6d656d637079ull);
	(void)mlock(m->src, m->src_len);
	m->dst = calloc(threads, sizeof(*m->dst));
	if (!m->dst)
		goto fail;
	for (i = 0; i < threads; i++) {
		m->dst[i] = bench_buffer_alloc((size_t)max_dst * block);
		if (!m->dst[i])
			goto fail;
	}
	return m;
fail:
	saved = errno ? errno : ENOMEM;
	bench_memcpy_free(m);
	errno = saved;
	return NULL;
}

struct memcpy_run {
	struct bench_memcpy *m;
	uint64_t ops;
	unsigned ndst;
	const char *from; /* non-NULL: copy from[] into the region (puts) */
	size_t nfrom;     /* blocks in from */
	struct bench_samples *lat; /* [threads] or NULL */
};

static void memcpy_thread(unsigned tid, unsigned nthreads, void *arg)
{
	struct memcpy_run *r = arg;
	struct bench_memcpy *m = r->m;
	struct bench_samples *lat = r->lat ? &r->lat[tid] : NULL;
	char *dst = m->dst[tid];
	size_t idx = tid % m->nblocks;
	size_t step = nthreads % m->nblocks;
	unsigned d = 0;
	uint64_t k;

	for (k = 0; k < r->ops; k++) {
		uint64_t t0 = bench_now_ns();

		if (r->from)
			memcpy(m->src + idx * m->block,
			       r->from + (idx % r->nfrom) * m->block, m->block);
		else
			memcpy(dst + (size_t)d * m->block, m->src + idx * m->block,
			       m->block);
		uint64_t t1 = bench_now_ns();

		if (lat)
			lat->v[lat->n++] = (double)(t1 - t0) / 1e3;
		idx += step;
		if (idx >= m->nblocks)
			idx -= m->nblocks;
		if (++d == r->ndst)
			d = 0;
	}
	/* Keep the copies observable. */
	__asm__ volatile("" : : "r"(dst) : "memory");
}

static int memcpy_run(struct memcpy_run *pr, double *bytes_per_s,
		      struct bench_samples *lat)
{
	struct memcpy_run r = *pr;
	struct bench_memcpy *m = r.m;
	uint64_t ops_per_thread = r.ops, wall = 0;
	unsigned i;
	int err = 0;

	if (lat) {
		r.lat = calloc(m->threads, sizeof(*r.lat));
		if (!r.lat)
			return -ENOMEM;
		for (i = 0; i < m->threads && !err; i++)
			err = samples_reserve(&r.lat[i], ops_per_thread);
	}
	if (!err)
		err = bench_parallel(m->threads, 1, memcpy_thread, &r, &wall);
	if (!err) {
		*bytes_per_s = (double)m->block * (double)ops_per_thread *
			       (double)m->threads / ((double)wall / 1e9);
		if (lat)
			for (i = 0; i < m->threads && !err; i++)
				err = bench_samples_append(lat, &r.lat[i]);
	}
	if (r.lat) {
		for (i = 0; i < m->threads; i++)
			bench_samples_free(&r.lat[i]);
		free(r.lat);
	}
	return err;
}

int bench_memcpy_run(struct bench_memcpy *m, uint64_t ops_per_thread,
		     unsigned ndst, double *bytes_per_s, struct bench_samples *lat)
{
	struct memcpy_run r = { .m = m, .ops = ops_per_thread, .ndst = ndst };

	if (!m || !bytes_per_s || ops_per_thread == 0 || ndst == 0 ||
	    ndst > m->max_dst)
		return -EINVAL;
	return memcpy_run(&r, bytes_per_s, lat);
}

int bench_memcpy_run_into(struct bench_memcpy *m, const void *from,
			  size_t from_bytes, uint64_t ops_per_thread,
			  double *bytes_per_s, struct bench_samples *lat)
{
	struct memcpy_run r = { .m = m, .ops = ops_per_thread, .ndst = 1,
				.from = from };

	if (!m || !from || !bytes_per_s || ops_per_thread == 0 ||
	    from_bytes < m->block)
		return -EINVAL;
	r.nfrom = from_bytes / m->block;
	return memcpy_run(&r, bytes_per_s, lat);
}

double bench_memcpy_limit(size_t block, size_t src_bytes, unsigned ndst,
			  unsigned threads, uint64_t ops_per_thread,
			  unsigned reps)
{
	struct bench_memcpy *m;
	double *rate, med;
	unsigned i;
	int err;

	if (reps == 0)
		return -EINVAL;
	m = bench_memcpy_new(block, src_bytes, ndst, threads);
	if (!m)
		return -(double)errno;
	rate = calloc(reps, sizeof(*rate));
	if (!rate) {
		bench_memcpy_free(m);
		return -ENOMEM;
	}
	err = bench_memcpy_run(m, ops_per_thread, ndst, &rate[0], NULL); /* warm-up */
	for (i = 0; i < reps && !err; i++)
		err = bench_memcpy_run(m, ops_per_thread, ndst, &rate[i], NULL);
	med = err ? err : bench_median(rate, reps);
	free(rate);
	bench_memcpy_free(m);
	return med;
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

/* --- aligned tables --------------------------------------------------------- */

struct bench_table {
	unsigned ncols;
	char **cells; /* row-major, ncols per row; NULL: empty */
	size_t rows;  /* complete rows plus the header (row 0) */
	size_t cap;   /* rows allocated */
	unsigned col; /* next cell of the open row */
	int oom;
};

static int table_grow(struct bench_table *t)
{
	size_t cap = t->cap ? t->cap * 2 : 16;
	char **c = realloc(t->cells, cap * t->ncols * sizeof(*c));

	if (!c)
		return -ENOMEM;
	memset(c + t->cap * t->ncols, 0, (cap - t->cap) * t->ncols * sizeof(*c));
	t->cells = c;
	t->cap = cap;
	return 0;
}

struct bench_table *bench_table_new(unsigned ncols, const char *const *headers)
{
	struct bench_table *t;
	unsigned i;

	if (ncols == 0)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->ncols = ncols;
	if (table_grow(t)) {
		free(t);
		return NULL;
	}
	for (i = 0; i < ncols; i++) {
		t->cells[i] = strdup(headers && headers[i] ? headers[i] : "");
		if (!t->cells[i])
			t->oom = 1;
	}
	t->rows = 1;
	return t;
}

void bench_table_cell(struct bench_table *t, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (!t || t->oom)
		return;
	if (t->col == t->ncols)
		bench_table_end_row(t); /* too many cells: wrap */
	if (t->rows == t->cap && table_grow(t)) {
		t->oom = 1;
		return;
	}
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0) {
		t->oom = 1;
		s = NULL;
	}
	va_end(ap);
	t->cells[t->rows * t->ncols + t->col++] = s;
}

void bench_table_end_row(struct bench_table *t)
{
	if (!t || t->oom)
		return;
	if (t->rows == t->cap && table_grow(t)) {
		t->oom = 1;
		return;
	}
	t->rows++;
	t->col = 0;
}

void bench_table_print(const struct bench_table *t, FILE *f, unsigned indent)
{
	size_t *w, r, rows;
	unsigned c;

	if (!t)
		return;
	if (t->oom || !(w = calloc(t->ncols, sizeof(*w)))) {
		fprintf(f, "%*s(out of memory)\n", (int)indent, "");
		return;
	}
	rows = t->rows + (t->col > 0); /* an open row prints too */
	for (r = 0; r < rows; r++)
		for (c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];
			size_t len = s ? strlen(s) : 0;

			if (len > w[c])
				w[c] = len;
		}
	for (r = 0; r < rows; r++) {
		fprintf(f, "%*s", (int)indent, "");
		for (c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];

			if (!s)
				s = "";
			if (c == 0)
				fprintf(f, "%-*s", (int)w[c], s);
			else
				fprintf(f, "  %*s", (int)w[c], s);
		}
		fputc('\n', f);
		if (r == 0) {
			size_t total = 0;

			for (c = 0; c < t->ncols; c++)
				total += w[c] + (c ? 2 : 0);
			fprintf(f, "%*s", (int)indent, "");
			while (total--)
				fputc('-', f);
			fputc('\n', f);
		}
	}
	free(w);
}

void bench_table_free(struct bench_table *t)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < t->cap * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

/* --- JSON results ------------------------------------------------------------- */

static json_t *machine_json(void)
{
	json_t *m = json_object();
	struct utsname u;
	char line[256], *model = NULL;
	FILE *f;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	if (!m)
		return NULL;
	json_object_set_new(m, "cpus", json_integer(bench_ncpus()));
	f = fopen("/proc/cpuinfo", "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, "model name", 10)) {
				char *v = strchr(line, ':');

				if (v) {
					v += 1 + strspn(v + 1, " \t");
					v[strcspn(v, "\n")] = '\0';
					model = v;
				}
				break;
			}
		}
		fclose(f);
	}
	json_object_set_new(m, "cpu_model", model ? json_string(model) : json_null());
	json_object_set_new(m, "kernel",
			    uname(&u) == 0 ? json_string(u.release) : json_null());
	json_object_set_new(m, "mem_bytes",
			    pages > 0 && psz > 0 ?
				    json_integer((json_int_t)pages * psz) :
				    json_null());
	return m;
}

json_t *bench_json_new(const char *cmd)
{
	json_t *doc = json_object();
	char when[32];
	time_t now = time(NULL);
	struct tm tm;
	int bad = 0;

	if (!doc)
		return NULL;
	if (gmtime_r(&now, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	else
		snprintf(when, sizeof(when), "unknown");
	bad |= json_object_set_new(doc, "tool", json_string("kvbench"));
	bad |= json_object_set_new(doc, "command", json_string(cmd ? cmd : ""));
	bad |= json_object_set_new(doc, "library_version",
				   json_string(kvt_version()));
	bad |= json_object_set_new(doc, "started", json_string(when));
	bad |= json_object_set_new(doc, "machine", machine_json());
	bad |= json_object_set_new(doc, "config", json_object());
	bad |= json_object_set_new(doc, "limits", json_array());
	bad |= json_object_set_new(doc, "results", json_array());
	bad |= json_object_set_new(doc, "errors", json_array());
	if (bad) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

int bench_json_config(json_t *doc, const char *key, json_t *value)
{
	json_t *cfg = doc ? json_object_get(doc, "config") : NULL;

	if (!cfg || !value) {
		json_decref(value);
		return -ENOMEM;
	}
	return json_object_set_new(cfg, key, value) ? -ENOMEM : 0;
}

static int append_to(json_t *doc, const char *field, json_t *obj)
{
	json_t *arr = doc ? json_object_get(doc, field) : NULL;

	if (!obj)
		return -ENOMEM;
	if (!json_is_object(obj) || !json_is_array(arr)) {
		json_decref(obj);
		return -EINVAL;
	}
	return json_array_append_new(arr, obj) ? -ENOMEM : 0;
}

int bench_json_limit(json_t *doc, json_t *obj)
{
	return append_to(doc, "limits", obj);
}

int bench_json_result(json_t *doc, json_t *obj)
{
	return append_to(doc, "results", obj);
}

void bench_json_error(json_t *doc, const char *fmt, ...)
{
	json_t *arr = doc ? json_object_get(doc, "errors") : NULL;
	va_list ap;
	char *s;
	int n;

	if (!json_is_array(arr))
		return;
	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	json_array_append_new(arr, json_string(s));
	free(s);
}

json_t *bench_json_real(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

json_t *bench_json_reps(const struct bench_summary *s)
{
	return json_pack("{s:o, s:o, s:o, s:I}", "median",
			 bench_json_real(s->median), "min",
			 bench_json_real(s->min), "max", bench_json_real(s->max),
			 "n", (json_int_t)s->n);
}

json_t *bench_json_latency(const struct bench_summary *s)
{
	return json_pack("{s:o, s:o, s:o, s:o, s:I}", "p50",
			 bench_json_real(s->median), "p90",
			 bench_json_real(s->p90), "p99", bench_json_real(s->p99),
			 "max", bench_json_real(s->max), "n", (json_int_t)s->n);
}

static int write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int bench_json_write(const json_t *doc, const char *path)
{
	char *text, *tmp = NULL;
	int fd, err;

	if (!doc || !path || !*path)
		return -EINVAL;
	text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				       JSON_REAL_PRECISION(6));
	if (!text) {
		fprintf(stderr, "kvbench: cannot render JSON for %s\n", path);
		return -ENOMEM;
	}
	if (!strcmp(path, "-")) {
		err = write_all(STDOUT_FILENO, text, strlen(text));
		if (!err)
			err = write_all(STDOUT_FILENO, "\n", 1);
		free(text);
		return err;
	}
	if (asprintf(&tmp, "%s.XXXXXX", path) < 0) {
		free(text);
		return -ENOMEM;
	}
	fd = mkstemp(tmp);
	if (fd < 0) {
		err = -errno;
		fprintf(stderr, "kvbench: cannot write %s: %s\n", path,
			strerror(-err));
		free(tmp);
		free(text);
		return err;
	}
	err = write_all(fd, text, strlen(text));
	if (!err)
		err = write_all(fd, "\n", 1);
	if (!err && fchmod(fd, 0644))
		err = -errno;
	if (close(fd) && !err)
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err) {
		fprintf(stderr, "kvbench: cannot write %s: %s\n", path,
			strerror(-err));
		unlink(tmp);
	}
	free(tmp);
	free(text);
	return err;
}

/* --- the store's statistics ---------------------------------------------------- */

json_t *bench_store_stats(kvt_store *s)
{
	size_t cap = 4096;
	json_error_t jerr;
	json_t *doc;
	char *buf = NULL;
	int n;

	for (;;) {
		char *nb = realloc(buf, cap);

		if (!nb) {
			free(buf);
			fprintf(stderr, "kvbench: out of memory for store stats\n");
			return NULL;
		}
		buf = nb;
		n = kvt_stats_json(s, buf, cap);
		if (n < 0) {
			fprintf(stderr, "kvbench: kvt_stats_json: %s (%s)\n",
				kvt_strerror(n), kvt_last_error());
			free(buf);
			return NULL;
		}
		if ((size_t)n < cap)
			break;
		cap = (size_t)n + 1024; /* the document may grow meanwhile */
	}
	doc = json_loads(buf, 0, &jerr);
	if (!doc)
		fprintf(stderr, "kvbench: store stats are not JSON: %s (line %d)\n",
			jerr.text, jerr.line);
	free(buf);
	return doc;
}

static const json_t *walk(const json_t *obj, const char *path)
{
	char key[128];

	while (obj && *path) {
		size_t len = strcspn(path, ".");

		if (len >= sizeof(key) || !json_is_object(obj))
			return NULL;
		memcpy(key, path, len);
		key[len] = '\0';
		obj = json_object_get(obj, key);
		path += len + (path[len] == '.');
	}
	return obj;
}

int bench_stats_number(const json_t *stats, const char *path, double *out)
{
	const json_t *v;

	if (!stats || !path)
		return -ENOENT;
	v = walk(stats, path);
	if (!json_is_number(v))
		v = walk(json_object_get(stats, "tiers"), path);
	if (!json_is_number(v))
		return -ENOENT;
	*out = json_number_value(v);
	return 0;
}

/* --- temporary directories ---------------------------------------------------- */

/*
 * Registered directories are removed at exit and from the signal handler,
 * so removal uses only async-signal-safe calls (openat, getdents64,
 * unlinkat, close) on fixed buffers.
 */
#define TMPDIR_MAX 8
#define TMPDIR_PATH 256

static char tmpdirs[TMPDIR_MAX][TMPDIR_PATH];
static volatile sig_atomic_t tmpdir_used[TMPDIR_MAX];
static int tmpdir_hooks;

static int rm_tree_at(int parent, const char *name, unsigned depth)
{
	char buf[4096];
	int fd, err = 0;
	long n;

	if (unlinkat(parent, name, 0) == 0)
		return 0;
	if (errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	if (depth > 32)
		return -ELOOP;
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while ((n = getdents64(fd, buf, sizeof(buf))) > 0) {
		long off = 0;

		while (off < n) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			const char *e = d->d_name;

			off += d->d_reclen;
			if (e[0] == '.' && (!e[1] || (e[1] == '.' && !e[2])))
				continue;
			int r = rm_tree_at(fd, e, depth + 1);

			if (r && !err)
				err = r;
		}
	}
	if (n < 0 && !err)
		err = -errno;
	close(fd);
	if (unlinkat(parent, name, AT_REMOVEDIR) && !err)
		err = -errno;
	return err;
}

/*
 * A signal may run this on any thread while another one (the store's) still
 * creates files in the directory, so a failed removal is tried again.
 */
static void remove_registered(void)
{
	int i, tries;

	for (i = 0; i < TMPDIR_MAX; i++) {
		if (tmpdir_used[i]) {
			for (tries = 0; tries < 3; tries++)
				if (rm_tree_at(AT_FDCWD, tmpdirs[i], 0) == 0)
					break;
			tmpdir_used[i] = 0;
		}
	}
}

static void tmpdir_signal(int sig)
{
	int saved = errno;

	remove_registered();
	signal(sig, SIG_DFL);
	errno = saved;
	raise(sig);
}

static void install_hooks(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa, old;
	unsigned i;

	if (tmpdir_hooks)
		return;
	tmpdir_hooks = 1;
	atexit(remove_registered);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = tmpdir_signal;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		/* Leave signals the caller ignores (nohup) ignored. */
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		sigaction(sigs[i], &sa, NULL);
	}
}

int bench_tmpdir_create(char *buf, size_t cap)
{
	static const char *const bases[] = { "/var/tmp", "/tmp" };
	char path[TMPDIR_PATH];
	sigset_t block, old;
	unsigned i;
	int slot, err = -ENOENT;

	for (slot = 0; slot < TMPDIR_MAX && tmpdir_used[slot]; slot++)
		;
	if (slot == TMPDIR_MAX) {
		fprintf(stderr, "kvbench: too many temporary directories\n");
		return -EMFILE;
	}
	if (!buf || cap < sizeof("/var/tmp/kvbench-XXXXXX"))
		return -ENAMETOOLONG;
	install_hooks();
	/* No signal between creating the directory and registering it. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	for (i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		snprintf(path, sizeof(path), "%s/kvbench-XXXXXX", bases[i]);
		if (mkdtemp(path)) {
			err = 0;
			break;
		}
		err = -errno;
	}
	if (!err) {
		memcpy(tmpdirs[slot], path, sizeof(path));
		tmpdir_used[slot] = 1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		fprintf(stderr,
			"kvbench: cannot create a directory in /var/tmp or /tmp: %s\n",
			strerror(-err));
		return err;
	}
	memcpy(buf, path, strlen(path) + 1);
	return 0;
}

int bench_tmpdir_remove(const char *path)
{
	int i;

	if (!path || !*path)
		return -EINVAL;
	for (i = 0; i < TMPDIR_MAX; i++)
		if (tmpdir_used[i] && !strcmp(tmpdirs[i], path))
			tmpdir_used[i] = 0;
	return rm_tree_at(AT_FDCWD, path, 0);
}
