/*
 * limit.c - the machine's limit for the RAM tier's figures (see bench.h):
 * memcpy between an arena-like region and heap buffers, on the threads and
 * in the access order of the store benchmark it is compared with.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

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
			err = bench_samples_reserve(&r.lat[i], ops_per_thread);
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
