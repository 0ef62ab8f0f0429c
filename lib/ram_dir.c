/*
 * ram_dir.c - the directory of a node store's RAM blocks, shared read-only
 * with its attached processes (see ram_dir.h for the layout).
 *
 * Writer. The RAM tier publishes a block under the shard lock of its key
 * when it enters the index and unpublishes it under the same lock when it
 * leaves it (removal, the end of an eviction), which is always before its
 * extent is freed; a region lock of this file's orders writers of different
 * shards whose keys share a region (shard lock, then region lock, never the
 * reverse). A change makes the entry's seq odd (a relaxed store followed by
 * a release fence, so no later store of this thread, nor anything ordered
 * after it, such as the extent's reuse by another thread, process or the
 * kernel, can be seen without the odd seq), writes the fields and makes seq
 * even again with a release store.
 *
 * Reader. dir_read loads seq (acquire), skips it while odd, compares the
 * key, reads off and len, checks seq again after an acquire fence (so the
 * fields are one published state), bounds-checks the extent against the
 * arena's mapping, copies the bytes, and checks seq once more after another
 * acquire fence: unchanged means no unpublish began before the copy ended,
 * so the extent still held the block throughout. A reader never writes
 * here: the mapping is read-only and the memfd is sealed against new
 * writable mappings (F_SEAL_FUTURE_WRITE) where the kernel has the seal.
 *
 * The copy races with the extent's reuse by design and is thrown away when
 * the check fails. Under ThreadSanitizer it stays unreported without any
 * annotation: the reader copies from its own mapping of the memfd, at other
 * addresses than the node store's mapping, and the sanitizer relates
 * accesses by address only, so even a test that runs both in one process
 * shows it no shared location (the entries' fields are accessed atomically
 * on both sides anyway).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "ram_dir.h"
#include "stats.h"

#define DIR_TRIES 4 /* copies retried when the entry changed meanwhile */

struct ram_dir {
	struct dir_head *head;
	struct dir_ent *ents;
	size_t len;
	int fd;
	uint32_t nregions, region_slots;
	pthread_mutex_t lock[DIR_REGIONS_MAX];
	_Atomic uint64_t published, unpublished, full;
};

/* The first of key's DIR_WINDOW slots: its region's base and its home. */
static inline uint64_t home_of(uint32_t nregions, uint32_t region_slots, kvt_key k,
			       uint32_t *region)
{
	uint64_t h = dir_hash(k);
	*region = (uint32_t)(h & (nregions - 1));
	return (h >> 8) & (region_slots - 1);
}

static inline uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void st(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/*
 * The two fences of the seqlock. GCC refuses atomic_thread_fence under
 * ThreadSanitizer, which does not model fences; a TSan build uses the full
 * barrier __sync_synchronize instead, which is at least as strong on every
 * architecture (and costs nothing that matters in a sanitizer build).
 */
static inline void fence_release(void)
{
#if defined(__SANITIZE_THREAD__)
	__sync_synchronize();
#else
	__atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

static inline void fence_acquire(void)
{
#if defined(__SANITIZE_THREAD__)
	__sync_synchronize();
#else
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

/* --- the writer ---------------------------------------------------------------- */

static int dir_memfd(size_t len, int *fdp, void **basep)
{
	int fd = memfd_create("kvtier-directory", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	void *p = ftruncate(fd, (off_t)len) == 0
		? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		return -e;
	}
	/* Mapped writable here first: from now on nobody can map it so, nor
	 * change its size (a reader never faults past its end). */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE |
		  F_SEAL_SEAL))
		(void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	*fdp = fd;
	*basep = p;
	return 0;
}

int ram_dir_open(uint64_t slots, struct ram_dir **out)
{
	struct ram_dir *d;
	uint64_t n = DIR_WINDOW;

	*out = NULL;
	if (!slots)
		return 0;
	if (slots > DIR_SLOTS_MAX)
		return kvt_fail(-EINVAL, "local.directory: %llu entries, above the %u "
				"allowed", (unsigned long long)slots, DIR_SLOTS_MAX);
	while (n < slots)
		n <<= 1;
	d = calloc(1, sizeof(*d));
	if (!d)
		return kvt_fail(-ENOMEM, "local.directory: out of memory");
	d->nregions = (uint32_t)(n / DIR_WINDOW < DIR_REGIONS_MAX ? n / DIR_WINDOW
								  : DIR_REGIONS_MAX);
	d->region_slots = (uint32_t)(n / d->nregions);
	d->len = sizeof(struct dir_head) + (size_t)n * sizeof(struct dir_ent);
	void *p = NULL;
	int rc = dir_memfd(d->len, &d->fd, &p);
	if (rc) {
		free(d);
		return kvt_fail(rc, "local.directory: cannot make its memfd of %llu bytes: %s",
				(unsigned long long)(sizeof(struct dir_head) +
						     n * sizeof(struct dir_ent)), strerror(-rc));
	}
	d->head = p;
	d->ents = (struct dir_ent *)((char *)p + sizeof(struct dir_head));
	for (unsigned i = 0; i < DIR_REGIONS_MAX; i++)
		pthread_mutex_init(&d->lock[i], NULL);
	d->head->nregions = d->nregions;
	d->head->region_slots = d->region_slots;
	d->head->version = DIR_VERSION;
	__atomic_store_n(&d->head->magic, DIR_MAGIC, __ATOMIC_RELEASE);
	*out = d;
	return 0;
}

void ram_dir_close(struct ram_dir *d)
{
	if (!d)
		return;
	__atomic_store_n(&d->head->closed, 1, __ATOMIC_SEQ_CST);
	munmap(d->head, d->len);
	close(d->fd);
	for (unsigned i = 0; i < DIR_REGIONS_MAX; i++)
		pthread_mutex_destroy(&d->lock[i]);
	free(d);
}

/* Writes an entry: seq odd, the fields, seq even. Region locked. */
static void ent_write(struct dir_ent *e, kvt_key key, uint64_t off, uint64_t len)
{
	uint64_t s = ld(&e->seq);

	st(&e->seq, s + 1);
	fence_release();
	st(&e->klo, key.lo);
	st(&e->khi, key.hi);
	st(&e->off, off);
	st(&e->len, len);
	__atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
}

int ram_dir_publish(struct ram_dir *d, kvt_key key, uint64_t off, uint64_t len)
{
	uint32_t reg;
	uint64_t home = home_of(d->nregions, d->region_slots, key, &reg);
	struct dir_ent *base = d->ents + (uint64_t)reg * d->region_slots;

	if (!len)
		return 0;
	pthread_mutex_lock(&d->lock[reg]);
	for (uint32_t i = 0; i < DIR_WINDOW; i++) {
		struct dir_ent *e = &base[(home + i) & (d->region_slots - 1)];
		if (ld(&e->len))
			continue;
		ent_write(e, key, off, len);
		pthread_mutex_unlock(&d->lock[reg]);
		atomic_fetch_add_explicit(&d->published, 1, memory_order_relaxed);
		return 1;
	}
	pthread_mutex_unlock(&d->lock[reg]);
	atomic_fetch_add_explicit(&d->full, 1, memory_order_relaxed);
	return 0;
}

int ram_dir_unpublish(struct ram_dir *d, kvt_key key)
{
	uint32_t reg;
	uint64_t home = home_of(d->nregions, d->region_slots, key, &reg);
	struct dir_ent *base = d->ents + (uint64_t)reg * d->region_slots;
	int found = 0;

	pthread_mutex_lock(&d->lock[reg]);
	for (uint32_t i = 0; i < DIR_WINDOW; i++) {
		struct dir_ent *e = &base[(home + i) & (d->region_slots - 1)];
		if (ld(&e->len) && ld(&e->klo) == key.lo && ld(&e->khi) == key.hi) {
			ent_write(e, (kvt_key){ 0, 0 }, 0, 0);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&d->lock[reg]);
	if (found)
		atomic_fetch_add_explicit(&d->unpublished, 1, memory_order_relaxed);
	return found;
}

int ram_dir_fd(const struct ram_dir *d)
{
	return d->fd;
}

size_t ram_dir_len(const struct ram_dir *d)
{
	return d->len;
}

void ram_dir_stats(struct ram_dir *d, const struct stat_visitor *v)
{
	uint64_t pub = ctr_get(&d->published), unpub = ctr_get(&d->unpublished);

	stat_int(v, "directory_slots", (int64_t)d->nregions * d->region_slots);
	stat_int(v, "directory_blocks", (int64_t)(pub > unpub ? pub - unpub : 0));
	stat_int(v, "directory_full", (int64_t)ctr_get(&d->full));
}

/* --- the reader ----------------------------------------------------------------- */

static int is_pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

int dir_view_map(int fd, size_t len, struct dir_view *v)
{
	struct stat sb;

	memset(v, 0, sizeof(*v));
	if (len < sizeof(struct dir_head) || fstat(fd, &sb) || (uint64_t)sb.st_size < len)
		return -EPROTO;
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	const struct dir_head *h = p;
	uint32_t nr = __atomic_load_n(&h->nregions, __ATOMIC_RELAXED);
	uint32_t rs = __atomic_load_n(&h->region_slots, __ATOMIC_RELAXED);
	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != DIR_MAGIC ||
	    __atomic_load_n(&h->version, __ATOMIC_RELAXED) != DIR_VERSION ||
	    !is_pow2(nr) || nr > DIR_REGIONS_MAX || !is_pow2(rs) || rs < DIR_WINDOW ||
	    (uint64_t)nr * rs > DIR_SLOTS_MAX ||
	    len != sizeof(struct dir_head) + (size_t)nr * rs * sizeof(struct dir_ent)) {
		munmap(p, len);
		return -EPROTO;
	}
	v->head = h;
	v->ents = (const struct dir_ent *)((const char *)p + sizeof(struct dir_head));
	v->len = len;
	v->nregions = nr;
	v->region_slots = rs;
	return 0;
}

void dir_view_unmap(struct dir_view *v)
{
	if (v->head)
		munmap((void *)v->head, v->len);
	memset(v, 0, sizeof(*v));
}

/* One try: 0, -ENOBUFS, -ENOENT (not there), -EAGAIN (changed: again). */
static int read_once(const struct dir_view *v, const char *arena, size_t arena_len,
		     kvt_key key, void *buf, size_t cap, size_t *len)
{
	uint32_t reg;
	uint64_t home = home_of(v->nregions, v->region_slots, key, &reg);
	const struct dir_ent *base = v->ents + (uint64_t)reg * v->region_slots;

	for (uint32_t i = 0; i < DIR_WINDOW; i++) {
		const struct dir_ent *e = &base[(home + i) & (v->region_slots - 1)];
		uint64_t s1 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
		if (s1 & 1)
			continue; /* changing: if it was key's, the node store answers */
		if (!ld(&e->len) || ld(&e->klo) != key.lo || ld(&e->khi) != key.hi)
			continue;
		uint64_t off = ld(&e->off), n = ld(&e->len);
		fence_acquire();
		if (ld(&e->seq) != s1)
			return -EAGAIN;
		/* One published state: still never trusted past the mapping. */
		if (!n || off > arena_len || n > arena_len - off)
			return -ENOENT;
		if (n > cap) {
			*len = (size_t)n;
			return -ENOBUFS;
		}
		memcpy(buf, arena + off, (size_t)n);
		fence_acquire();
		if (ld(&e->seq) != s1)
			return -EAGAIN;
		*len = (size_t)n;
		return 0;
	}
	return -ENOENT;
}

int dir_read(const struct dir_view *v, const char *arena, size_t arena_len, kvt_key key,
	     void *buf, size_t cap, size_t *len)
{
	for (int t = 0; t < DIR_TRIES; t++) {
		if (__atomic_load_n(&v->head->closed, __ATOMIC_ACQUIRE))
			return -ENOENT;
		int rc = read_once(v, arena, arena_len, key, buf, cap, len);
		if (rc != -EAGAIN)
			return rc;
	}
	return -ENOENT;
}
