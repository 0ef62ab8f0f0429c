/*
 * internal.h - helpers shared by every module of the library: error text,
 * logging, time. Knows nothing about tiers or the store.
 */
#ifndef KVT_INTERNAL_H
#define KVT_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kvtier.h"

#define KVT_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Sets this thread's kvt_last_error() text. */
void kvt_set_error(const char *fmt, ...) KVT_PRINTF(1, 2);

/* Sets the error text and returns err (a negative errno): return kvt_fail(...). */
int kvt_fail(int err, const char *fmt, ...) KVT_PRINTF(2, 3);

/* Sends a line to the installed log callback, if any, at level (KVT_LOG_*). */
void kvt_log(int level, const char *fmt, ...) KVT_PRINTF(2, 3);

/* The completion eventfd of an asynchronous batch (kvt_batch_fd,
 * kvt_pin_fd), made on first use with the caller holding the batch's lock:
 * returns *efd, or -errno. A new one starts at count, the completions that
 * came before anyone asked for it, so a poll() on it does not miss them. */
int kvt_eventfd_lazy(int *efd, uint64_t count);

static inline uint64_t kvt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Whole milliseconds (rounded up) from now until deadline (kvt_now_ns()
 * time), 0 once it passed, at most cap: a poll() timeout. */
static inline int kvt_ms_until(uint64_t deadline, int cap)
{
	uint64_t now = kvt_now_ns();

	if (now >= deadline)
		return 0;
	uint64_t ms = (deadline - now + 999999) / 1000000;
	return ms > (uint64_t)cap ? cap : (int)ms;
}

static inline int kvt_key_eq(kvt_key a, kvt_key b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

/* XXH3-64 (seed 0) of p[0..len), the fastest way this CPU has (checksum.c):
 * the checksum of disk records and of blocks on the wire. */
uint64_t kvt_checksum(const void *p, size_t len);
/* The same sum built for AVX2 (checksum_avx2.c, x86-64 only); call it only
 * when __builtin_cpu_supports("avx2"). */
uint64_t kvt_checksum_avx2(const void *p, size_t len);
/* kvt_checksum(src, len), copying src[0..len) to dst on the way (they must
 * not overlap): each piece is summed and copied while it is in the cache,
 * so the bytes come from memory once instead of twice. of_dst: the sum of
 * the copy (each piece summed after it is copied), which is the sum of
 * what dst holds even if src changes meanwhile. */
uint64_t kvt_checksum_copy(void *dst, const void *src, size_t len, int of_dst);
uint64_t kvt_checksum_copy_avx2(void *dst, const void *src, size_t len, int of_dst);

/* shared[i] = 1 when ops[i].buf[0..len) overlaps the buffer of another op
 * of ops[0..n), else 0 (ops.c). A batch whose ops share a buffer must not
 * read one op's bytes back from it after loading another's. */
void kvt_ops_shared(const kvt_op *ops, size_t n, uint8_t *shared);

/* Key as "hi:lo" hex for messages; buf must hold 34 bytes. */
const char *kvt_key_str(kvt_key k, char buf[34]);

/*
 * A counter that many threads add to often (per key of a lookup): one
 * cache line per stripe, each thread adding to its own (threads take
 * stripes in turn at their first add, so a few threads share none), and
 * the reader adding them up. One atomic counter would bounce its line
 * between the adding threads' caches on every add.
 */
#define KVT_STRIPES 16

struct kvt_striped {
	struct {
		/* a line's worth on either side, so that each v has a cache
		 * line to itself however the counter is aligned */
		char lead[64];
		uint64_t v;
		char tail[64 - sizeof(uint64_t)];
	} s[KVT_STRIPES];
};

/* This thread's stripe (kvt_striped.c). */
unsigned kvt_stripe(void);

static inline void kvt_striped_add(struct kvt_striped *c, uint64_t n)
{
	__atomic_fetch_add(&c->s[kvt_stripe()].v, n, __ATOMIC_RELAXED);
}

static inline uint64_t kvt_striped_get(const struct kvt_striped *c)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < KVT_STRIPES; i++)
		sum += __atomic_load_n(&c->s[i].v, __ATOMIC_RELAXED);
	return sum;
}

#endif
