/*
 * arena.h - the RAM arena: one mapping allocated at open (mmap, optional huge
 * pages, mlock, NUMA binding) and an O(1) extent allocator over it in units of
 * ARENA_UNIT bytes (so every block is 4 KiB aligned, ready for O_DIRECT).
 * Knows nothing about keys, tiers or eviction.
 */
#ifndef KVT_ARENA_H
#define KVT_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define ARENA_UNIT 4096u

struct arena;

struct arena_opts {
	uint64_t capacity;        /* bytes, rounded up to ARENA_UNIT */
	enum kvt_tri hugepages;
	enum kvt_tri mlock;
	int numa_node;            /* -1: no binding */
	int shared;               /* 1: backed by a memfd that other processes
				     can map (arena_fd()); 0: private memory */
};

struct arena_stats {
	uint64_t capacity;        /* usable bytes */
	uint64_t used;            /* bytes in allocated extents (rounded to units) */
	uint64_t largest_free;    /* largest free extent, bytes */
	uint64_t allocs;          /* extents currently allocated */
	int hugepages;            /* 1 if backed by reserved (hugetlb) 2 MiB pages */
	int64_t huge_bytes;       /* bytes mapped by 2 MiB pages, reserved or
				     transparent, when the arena was faulted
				     in; -1 when /proc/self/smaps is unreadable */
	int mlocked;              /* 1 if locked in memory */
	int numa_node;            /* node bound to, or -1 */
};

/*
 * Maps and prepares the arena. KVT_TRY features that the machine refuses fall
 * back with a KVT_LOG_WARN message; KVT_REQUIRE ones fail. Returns 0, -EINVAL
 * (capacity 0 or above physical memory, bad node) or -ENOMEM, with
 * kvt_last_error() set.
 */
int arena_open(const struct arena_opts *o, struct arena **out);
void arena_close(struct arena *a);

void *arena_base(const struct arena *a);

/* The memfd behind a shared arena (arena_opts.shared), or -1. Owned by the
 * arena and closed by arena_close(). */
int arena_fd(const struct arena *a);
size_t arena_size(const struct arena *a);

/*
 * Maps len bytes of a shared arena's memfd (this one's, or one received
 * from a node store) read-write, MAP_SHARED, at a 2 MiB aligned address with
 * transparent huge pages advised, so that the huge pages the file has are
 * mapped whole (one TLB entry per 2 MiB). NULL with errno set on failure;
 * munmap(p, len) undoes it.
 */
void *arena_map_fd(int fd, size_t len);

/*
 * Allocates an extent of at least len bytes. Returns its byte offset from
 * arena_base(), or -ENOSPC when no free extent is large enough (the caller
 * evicts and retries). Thread-safe, O(1).
 */
int64_t arena_alloc(struct arena *a, size_t len);

/* Frees the extent at off (from arena_alloc), coalescing neighbours. O(1). */
void arena_free(struct arena *a, uint64_t off);

/* Bytes the extent at off really occupies (len rounded up to units). */
uint64_t arena_extent_bytes(struct arena *a, uint64_t off);

void arena_get_stats(struct arena *a, struct arena_stats *st);

#endif
