/*
 * error.c - error text and logging: kvt_strerror, the per-thread
 * kvt_last_error buffer, the process-wide log callback, kvt_version.
 * Knows nothing about stores or tiers.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "internal.h"

static _Thread_local char last_error[512];

KVT_API const char *kvt_version(void)
{
#define KVT_STR2(x) #x
#define KVT_STR(x) KVT_STR2(x)
	return KVT_STR(KVT_VERSION_MAJOR) "." KVT_STR(KVT_VERSION_MINOR) "." KVT_STR(KVT_VERSION_PATCH);
}

/*
 * Codes outside the table below get the C library's text. kvt_strerror()
 * promises a string that is the same for every thread and never changes, so
 * each such text is copied once into the heap and kept for the life of the
 * process (one per code ever asked about, at most ERRNO_TEXTS of them).
 */
#define ERRNO_TEXTS 1024 /* errno values are small; larger codes are unknown */
static _Atomic(char *) errno_texts[ERRNO_TEXTS];

/*
 * Whether err is an errno value the C library knows. GNU strerror_r() does
 * not fail for others but formats "Unknown error N", which must read as
 * "unknown error" as kvt_strerror(3) promises; glibc 2.32 and later tell
 * by strerrorname_np(). XSI strerror_r() fails for them instead.
 */
static int is_errno_value(int err)
{
#if defined(__GLIBC__) && defined(_GNU_SOURCE) && \
	(__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
	return strerrorname_np(err) != NULL;
#else
	(void)err;
	return 1;
#endif
}

static const char *libc_text(int err)
{
	char buf[256];
	const char *t;
	char *copy, *none = NULL;

	if (err <= 0 || err >= ERRNO_TEXTS || !is_errno_value(err))
		return NULL;
	copy = atomic_load_explicit(&errno_texts[err], memory_order_acquire);
	if (copy)
		return copy;
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
	t = strerror_r(err, buf, sizeof(buf));   /* GNU: may return its own */
#else
	t = strerror_r(err, buf, sizeof(buf)) ? NULL : buf; /* XSI: 0 or errno */
#endif
	if (!t || !t[0] || !(copy = strdup(t)))
		return NULL;
	if (!atomic_compare_exchange_strong_explicit(&errno_texts[err], &none, copy,
						     memory_order_acq_rel,
						     memory_order_acquire)) {
		free(copy); /* another thread stored the same text first */
		return none;
	}
	return copy;
}

static const char *table_text(int err)
{
	switch (err) {
	case 0: return "success";
	case ENOENT: return "not stored (a miss)";
	case ENOBUFS: return "buffer too small for the block";
	case ENOSPC: return "no tier can take the block";
	case EINVAL: return "invalid argument";
	case EIO: return "device I/O error";
	case EBADMSG: return "stored bytes failed their checksum (a miss)";
	case ETIMEDOUT: return "timed out";
	case ENOMEM: return "out of memory";
	case ENOTSUP: return "not supported by this build or machine";
	case EBUSY: return "in use by another store or program";
	case EINPROGRESS: return "still in progress";
	case ESHUTDOWN: return "store is closing";
	case EEXIST: return "already exists";
	case EACCES: return "permission denied";
	case EPERM: return "operation not permitted";
	case EAGAIN: return "resource temporarily unavailable";
	case EMFILE: return "too many open files";
	case ENODEV: return "no such device";
	case EROFS: return "read-only file system";
	case EFBIG: return "file too large";
	case EOVERFLOW: return "value too large";
	case ERANGE: return "value out of range";
	case ECONNREFUSED: return "connection refused";
	case ECONNRESET: return "connection reset by peer";
	case EPROTO: return "protocol error";
	default: return NULL;
	}
}

KVT_API const char *kvt_strerror(int err)
{
	const char *t;

	if (err == INT_MIN) /* has no positive counterpart */
		return "unknown error";
	if (err < 0)
		err = -err;
	if ((t = table_text(err)) || (t = libc_text(err)))
		return t;
	return "unknown error";
}

KVT_API const char *kvt_last_error(void)
{
	return last_error;
}

static void set_errorv(const char *fmt, va_list ap)
{
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
}

void kvt_set_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	set_errorv(fmt, ap);
	va_end(ap);
}

int kvt_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	set_errorv(fmt, ap);
	va_end(ap);
	return err;
}

/* The log sink is process-wide; the pair is swapped under a lock and read
 * under it too, so a callback is never called with another's argument. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static kvt_log_fn log_fn;
static void *log_arg;
static atomic_int log_max = -1;

KVT_API void kvt_set_log(kvt_log_fn fn, void *arg, int max_level)
{
	pthread_mutex_lock(&log_lock);
	log_fn = fn;
	log_arg = arg;
	atomic_store(&log_max, fn ? max_level : -1);
	pthread_mutex_unlock(&log_lock);
}

void kvt_log(int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (level > atomic_load_explicit(&log_max, memory_order_relaxed))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_lock);
	if (log_fn && level <= atomic_load_explicit(&log_max, memory_order_relaxed))
		log_fn(level, msg, log_arg);
	pthread_mutex_unlock(&log_lock);
}

const char *kvt_key_str(kvt_key k, char buf[34])
{
	snprintf(buf, 34, "%016" PRIx64 "%016" PRIx64, k.hi, k.lo);
	return buf;
}
