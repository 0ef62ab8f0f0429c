/*
 * arena.c - the RAM arena: one anonymous mapping made at open (huge pages,
 * mlock, NUMA binding, pre-faulted) and an O(1) extent allocator over it.
 * Knows nothing about keys, tiers, eviction or the store: it hands out byte
 * offsets into the mapping and takes them back.
 *
 * The allocator. The arena is cut into units of ARENA_UNIT bytes; an extent
 * is a run of units, free or allocated, and the extents tile the arena. Free
 * extents sit in a two-level segregated free list in the manner of TLSF: the
 * first level is floor(log2(units)), the second splits each power-of-two range
 * into 16 lists of equal width (sizes below 16 units get one list each), and
 * two bitmaps find the first non-empty list above a size class with a couple
 * of bit scans. An allocation takes the head of its own size's list if that
 * extent is large enough (the tightest fit, which keeps uniform block sizes
 * packed), else the head of the next non-empty list above it (every extent
 * there fits), and gives the remainder back to its list. Boundary tags (the
 * extent's size at its first and its last unit) let a free find both
 * neighbours and merge with them in O(1). Only when both O(1) steps fail does
 * an allocation look through the rest of its own list (extents within 1/16 of
 * its size, some smaller, some not), so that -ENOSPC means that no free
 * extent is large enough, never that the fast path missed one; with uniform
 * block sizes that list holds equal extents and the first one fits.
 *
 * Metadata lives beside the arena, never in it, so the arena holds payload
 * only and every extent stays ARENA_UNIT aligned (O_DIRECT, CUDA and RDMA
 * registration). Per unit, three uint32: tag (size in units plus a head bit
 * and a free bit, set at an extent's first and last unit, zero everywhere
 * else), next and prev (free-list links, meaningful at a free extent's first
 * unit). That is 12 bytes per 4 KiB unit, 0.29% of the capacity: 3 MiB per
 * GiB, 3 GiB for a 1 TiB arena, in a separate lazily faulted mapping, plus a
 * fixed 1.8 KiB of list heads and bitmaps. Because interior tags are kept zero,
 * a free or a size query of an offset that is not the start of an allocated
 * extent is recognised and refused instead of corrupting the lists.
 *
 * Limits: 2^32 - 2 units (16 TiB) per arena, 2^30 - 1 units (4 TiB) per
 * extent; a larger free area is kept as several adjacent free extents.
 * One mutex guards the metadata; it is held only for the list and tag work.
 */
#include <errno.h>
#include <inttypes.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "arena.h"
#include "internal.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26)
#endif

#define HUGE_2M (2u << 20)

#define SL_LOG2 4u
#define SL_COUNT (1u << SL_LOG2)
#define SIZE_BITS 30u
#define FL_COUNT (SIZE_BITS - SL_LOG2 + 1u) /* fl 0: sizes < 16; fl k: log2 = k + 3 */

#define TAG_FREE (1u << 31)
#define TAG_HEAD (1u << 30)
#define TAG_SIZE (TAG_HEAD - 1u)
#define MAX_EXTENT TAG_SIZE            /* units in one extent */
#define MAX_UNITS (UINT32_MAX - 1u)   /* units in one arena */
#define NONE UINT32_MAX

struct arena {
	pthread_mutex_t lock;
	/* list heads and bitmaps: bit fl of fl_map is set when sl_map[fl] != 0,
	 * bit sl of sl_map[fl] when head[fl][sl] != NONE */
	uint32_t fl_map;
	uint32_t sl_map[FL_COUNT];
	uint32_t head[FL_COUNT][SL_COUNT];
	/* side metadata, one entry per unit (see the file comment) */
	uint32_t *tag, *next, *prev;
	void *meta;
	size_t meta_bytes;
	uint32_t nunits;
	uint64_t used_units;
	uint64_t allocs;
	/* the mapping */
	void *base;
	size_t size;
	int hugepages;
	int mlocked;
	int numa_node;
	int fd;                   /* memfd of a shared arena, or -1 */
	int64_t huge_bytes;       /* bytes on 2 MiB pages after the prefault, -1 unknown */
};

static const char *tri_name(enum kvt_tri t)
{
	return t == KVT_OFF ? "false" : t == KVT_TRY ? "\"try\"" : "true";
}

static double gib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0 * 1024.0);
}

/* --- the mapping --------------------------------------------------------- */

/* Maps len bytes at an address aligned to align (a power of two, at least a
 * page), trimming the slack. Returns NULL with errno set on failure. */
static void *map_aligned(size_t len, size_t align, int extra_flags)
{
	size_t over = len + align;
	char *p = mmap(NULL, over, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	uintptr_t start = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
	size_t head = start - (uintptr_t)p;
	size_t tail = over - head - len;
	if (head)
		munmap(p, head);
	if (tail)
		munmap((char *)start + len, tail);
	return (void *)start;
}

void *arena_map_fd(int fd, size_t len)
{
	size_t over = len + HUGE_2M;
	char *p = mmap(NULL, over, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	uintptr_t start = ((uintptr_t)p + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1);
	void *q = mmap((void *)start, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		       fd, 0);
	if (q == MAP_FAILED) {
		int e = errno;
		munmap(p, over);
		errno = e;
		return NULL;
	}
	size_t head = start - (uintptr_t)p, tail = over - head - len;
	if (head)
		munmap(p, head);
	if (tail)
		munmap((char *)start + len, tail);
	/* Refused for reserved huge pages (they need no advice) and where the
	 * kernel has no transparent ones: either way nothing is lost. */
	if (len >= HUGE_2M)
		(void)madvise(q, len, MADV_HUGEPAGE);
	return q;
}

/* A memfd of len bytes (of reserved 2 MiB pages with huge), mapped. 0, or
 * -errno with nothing left open. */
static int memfd_map(size_t len, int huge, int *fdp, void **basep)
{
	unsigned flags = MFD_CLOEXEC | (huge ? MFD_HUGETLB | MFD_HUGE_2MB : 0);
	int fd = memfd_create("kvtier-arena", flags);
	if (fd < 0)
		return -errno;
	/* A hugetlb file reserves its pages at mmap: an empty pool fails there. */
	void *p = ftruncate(fd, (off_t)len) == 0 ? arena_map_fd(fd, len) : NULL;
	if (!p) {
		int e = errno;
		close(fd);
		return -e;
	}
	*fdp = fd;
	*basep = p;
	return 0;
}

/*
 * A shared arena: a memfd of cap bytes mapped MAP_SHARED, so that processes
 * attached to this store map the same pages (see local_server.c). Reserved
 * 2 MiB pages when ram.hugepages asks and the pool has them; otherwise
 * normal pages with transparent huge pages advised, which the kernel gives
 * shared memory only when its shmem_enabled mode allows (arena_open logs
 * when it did not).
 */
static int map_shared(struct arena *a, const struct arena_opts *o, uint64_t cap)
{
	int fd = -1, rc = -ENOENT;
	void *p = NULL;
	size_t len = (size_t)cap;

	if (o->hugepages != KVT_OFF) {
		size_t hlen = (size_t)((cap + HUGE_2M - 1) & ~(uint64_t)(HUGE_2M - 1));
		rc = memfd_map(hlen, 1, &fd, &p);
		if (rc == 0) {
			len = hlen;
			a->hugepages = 1;
		} else if (o->hugepages == KVT_REQUIRE) {
			return kvt_fail(-ENOMEM, "ram.hugepages is true but a shared arena of "
					"%zu bytes of 2 MiB huge pages could not be made: %s "
					"(reserve them in /proc/sys/vm/nr_hugepages, or set "
					"ram.hugepages to \"try\")", hlen, strerror(-rc));
		} else {
			kvt_log(KVT_LOG_WARN, "ram.hugepages \"try\": a shared arena of %zu "
				"bytes of 2 MiB huge pages could not be made (%s; see "
				"/proc/sys/vm/nr_hugepages); using normal pages", hlen,
				strerror(-rc));
		}
	}
	if (rc) {
		rc = memfd_map(len, 0, &fd, &p);
		if (rc)
			return kvt_fail(-ENOMEM, "local.socket: cannot make a shared arena "
					"of %zu bytes (memfd): %s", len, strerror(-rc));
	}
	a->base = p;
	a->size = len;
	a->fd = fd;
	return 0;
}

static int map_arena(struct arena *a, const struct arena_opts *o, uint64_t cap)
{
	if (o->shared)
		return map_shared(a, o, cap);
	if (o->hugepages != KVT_OFF) {
		size_t len = (size_t)((cap + HUGE_2M - 1) & ~(uint64_t)(HUGE_2M - 1));
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB,
			       -1, 0);
		if (p != MAP_FAILED) {
			a->base = p;
			a->size = len;
			a->hugepages = 1;
			return 0;
		}
		int err = errno;
		if (o->hugepages == KVT_REQUIRE)
			return kvt_fail(-ENOMEM,
					"ram.hugepages is true but %zu bytes of 2 MiB huge pages "
					"could not be mapped: %s (reserve them in "
					"/proc/sys/vm/nr_hugepages, or set ram.hugepages to \"try\")",
					len, strerror(err));
		/* Fall back to normal pages, 2 MiB aligned so that transparent
		 * huge pages can back them. */
		void *q = map_aligned((size_t)cap, HUGE_2M, 0);
		if (!q)
			return kvt_fail(-ENOMEM, "ram.capacity: cannot map %" PRIu64
					" bytes for the RAM arena: %s", cap, strerror(errno));
		a->base = q;
		a->size = (size_t)cap;
		const char *thp = madvise(q, a->size, MADV_HUGEPAGE) == 0
			? "using normal pages with transparent huge pages advised"
			: "using normal pages (transparent huge pages unavailable too)";
		kvt_log(KVT_LOG_WARN,
			"ram.hugepages \"try\": %zu bytes of 2 MiB huge pages could not be "
			"mapped (%s; see /proc/sys/vm/nr_hugepages); %s",
			len, strerror(err), thp);
		return 0;
	}
	void *q = map_aligned((size_t)cap, cap >= HUGE_2M ? HUGE_2M : ARENA_UNIT, 0);
	if (!q)
		return kvt_fail(-ENOMEM, "ram.capacity: cannot map %" PRIu64
				" bytes for the RAM arena: %s", cap, strerror(errno));
	a->base = q;
	a->size = (size_t)cap;
	/* No reserved huge pages, but transparent ones where the kernel has
	 * them: large copies out of the arena then miss the TLB far less
	 * (measured: 7.2 -> 8.6 GB/s for 1 MiB gets on the development VM).
	 * A refusal costs nothing. */
	if (cap >= HUGE_2M)
		(void)madvise(q, a->size, MADV_HUGEPAGE);
	return 0;
}

static int check_numa_node(int node)
{
	if (node < -1)
		return kvt_fail(-EINVAL, "ram.numa_node %d is invalid: use -1 (no binding) "
				"or a NUMA node number", node);
	if (node == -1)
		return 0;
	if (numa_available() < 0)
		return kvt_fail(-EINVAL, "ram.numa_node %d: NUMA is not available on this "
				"machine (numa_available() failed); use -1", node);
	int max = numa_max_node();
	if (node > max)
		return kvt_fail(-EINVAL, "ram.numa_node %d is out of range: this machine's "
				"nodes are 0..%d", node, max);
	if (!numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)node))
		return kvt_fail(-EINVAL, "ram.numa_node %d has no memory this process may "
				"allocate from", node);
	return 0;
}

/* Binds the (not yet faulted) mapping to node with MPOL_BIND. */
static int bind_node(struct arena *a, int node)
{
	/* The kernel reads maxnode - 1 bits; leave a spare word. */
	size_t words = (size_t)node / 64 + 2;
	unsigned long *mask = calloc(words, sizeof(*mask));
	if (!mask)
		return kvt_fail(-ENOMEM, "ram.numa_node: out of memory");
	mask[node / 64] |= 1ul << (node % 64);
	long rc = mbind(a->base, a->size, MPOL_BIND, mask, words * 64, 0);
	int err = errno;
	free(mask);
	if (rc != 0)
		return kvt_fail(-EINVAL, "ram.numa_node %d: binding %zu bytes to the node "
				"failed: %s", node, a->size, strerror(err));
	a->numa_node = node;
	return 0;
}

static int lock_pages(struct arena *a, enum kvt_tri want)
{
	if (want == KVT_OFF)
		return 0;
	if (mlock(a->base, a->size) == 0) {
		a->mlocked = 1;
		return 0;
	}
	int err = errno;
	munlock(a->base, a->size);
	struct rlimit rl;
	char lim[64] = "unknown";
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
		if (rl.rlim_cur == RLIM_INFINITY)
			strcpy(lim, "unlimited");
		else
			snprintf(lim, sizeof(lim), "%llu bytes", (unsigned long long)rl.rlim_cur);
	}
	if (want == KVT_REQUIRE)
		return kvt_fail(-ENOMEM, "ram.mlock is true but locking %zu bytes failed: %s "
				"(RLIMIT_MEMLOCK is %s; raise it with ulimit -l or "
				"LimitMEMLOCK=, or set ram.mlock to \"try\")",
				a->size, strerror(err), lim);
	kvt_log(KVT_LOG_WARN, "ram.mlock \"try\": locking %zu bytes failed: %s "
		"(RLIMIT_MEMLOCK is %s); the arena may be swapped out",
		a->size, strerror(err), lim);
	return 0;
}

/* Faults every page in now, so the first puts do not pay for it. */
static int prefault(struct arena *a)
{
	if (a->mlocked)
		return 0; /* mlock has faulted everything in */
	if (madvise(a->base, a->size, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno != EINVAL)
		return kvt_fail(-ENOMEM, "ram.capacity: faulting in %zu bytes of the RAM "
				"arena failed: %s", a->size, strerror(errno));
	/* Kernel older than 5.14: touch one byte per page. */
	size_t step = a->hugepages ? HUGE_2M : (size_t)sysconf(_SC_PAGESIZE);
	volatile char *p = a->base;
	for (size_t off = 0; off < a->size; off += step)
		p[off] = 0;
	return 0;
}

/* --- what the kernel gave -------------------------------------------------- */

/* Adds "Name:  N kB" from an smaps line to *sum when name matches, in bytes. */
static int smaps_field(const char *line, const char *name, uint64_t *sum)
{
	size_t n = strlen(name);
	unsigned long long kb;

	if (strncmp(line, name, n) || line[n] != ':' ||
	    sscanf(line + n + 1, "%llu kB", &kb) != 1)
		return 0;
	*sum += kb * 1024ull;
	return 1;
}

/*
 * Bytes of the arena that 2 MiB pages map, read from /proc/self/smaps after
 * the prefault: reserved pages (a KernelPageSize of 2048 kB) or transparent
 * ones (AnonHugePages for private memory, ShmemPmdMapped for a shared
 * arena). -1 when smaps cannot be read.
 */
static int64_t huge_mapped_bytes(const struct arena *a)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	uintptr_t lo = (uintptr_t)a->base, hi = lo + a->size;
	uint64_t huge = 0, vma_huge = 0, kps = 0;
	unsigned long start = 0, end = 0;
	int in = 0;
	char line[512];

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long s0, e0;
		/* A mapping's first line ("start-end perms ..."); the field lines
		 * ("Name:  N kB") have no '-' after leading hex digits. */
		if (sscanf(line, "%lx-%lx ", &s0, &e0) == 2) {
			if (in)
				huge += kps == 2048 * 1024 ? (uint64_t)(end - start) : vma_huge;
			start = s0;
			end = e0;
			in = s0 < hi && e0 > lo;
			vma_huge = kps = 0;
			continue;
		}
		if (!in)
			continue;
		if (!smaps_field(line, "AnonHugePages", &vma_huge) &&
		    !smaps_field(line, "ShmemPmdMapped", &vma_huge) &&
		    !smaps_field(line, "FilePmdMapped", &vma_huge))
			smaps_field(line, "KernelPageSize", &kps);
	}
	if (in)
		huge += kps == 2048 * 1024 ? (uint64_t)(end - start) : vma_huge;
	fclose(f);
	return (int64_t)(huge < a->size ? huge : a->size);
}

/* The kernel's mode for transparent huge pages in shared memory ("never",
 * "advise", ...) into buf, or "unknown". */
static void shmem_thp_mode(char *buf, size_t cap)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "re");
	char line[256];

	snprintf(buf, cap, "unknown");
	if (!f)
		return;
	if (fgets(line, sizeof(line), f)) {
		char *o = strchr(line, '['), *c = o ? strchr(o, ']') : NULL;
		if (o && c)
			snprintf(buf, cap, "%.*s", (int)(c - o - 1), o + 1);
	}
	fclose(f);
}

/*
 * Notes which pages the arena got. A shared arena on 4 KiB pages is worth a
 * line to the operator: attached processes then copy through many more TLB
 * entries than an in-process store (gets about 30% slower measured). The
 * library changes no system setting; the line names the one to change.
 */
static void note_pages(struct arena *a, int shared)
{
	a->huge_bytes = huge_mapped_bytes(a);
	if (!shared || a->hugepages || a->huge_bytes != 0 || a->size < HUGE_2M)
		return;
	char mode[64];
	shmem_thp_mode(mode, sizeof(mode));
	kvt_log(KVT_LOG_WARN, "ram arena: the shared arena (local.socket) of %zu bytes "
		"is on 4 KiB pages: the kernel's transparent huge pages for shared memory "
		"are \"%s\"; set /sys/kernel/mm/transparent_hugepage/shmem_enabled to "
		"\"advise\" (or reserve 2 MiB pages in /proc/sys/vm/nr_hugepages and set "
		"ram.hugepages) so that attached processes copy as fast as this one",
		a->size, mode);
}

/* --- the allocator ------------------------------------------------------- */

static inline unsigned log2_u32(uint32_t x)
{
	return 31u - (unsigned)__builtin_clz(x);
}

/* The list (fl, sl) an extent of n units (1 <= n <= MAX_EXTENT) belongs to. */
static inline void size_class(uint32_t n, unsigned *fl, unsigned *sl)
{
	if (n < SL_COUNT) {
		*fl = 0;
		*sl = n;
	} else {
		unsigned l = log2_u32(n);
		*fl = l - (SL_LOG2 - 1);
		*sl = (n >> (l - SL_LOG2)) - SL_COUNT;
	}
}

/* Whether n is the smallest size of its class (so every extent there fits). */
static inline int class_start(uint32_t n)
{
	return n < SL_COUNT || (n & ((1u << (log2_u32(n) - SL_LOG2)) - 1)) == 0;
}

static inline void set_tags(struct arena *a, uint32_t h, uint32_t n, uint32_t free_bit)
{
	a->tag[h + n - 1] = n | free_bit; /* tail first: a 1-unit extent keeps the head bit */
	a->tag[h] = n | TAG_HEAD | free_bit;
}

static void list_insert(struct arena *a, uint32_t h, uint32_t n)
{
	unsigned fl, sl;
	size_class(n, &fl, &sl);
	uint32_t first = a->head[fl][sl];
	a->next[h] = first;
	a->prev[h] = NONE;
	if (first != NONE)
		a->prev[first] = h;
	a->head[fl][sl] = h;
	a->sl_map[fl] |= 1u << sl;
	a->fl_map |= 1u << fl;
}

static void list_remove(struct arena *a, uint32_t h, uint32_t n)
{
	unsigned fl, sl;
	size_class(n, &fl, &sl);
	uint32_t p = a->prev[h], x = a->next[h];
	if (x != NONE)
		a->prev[x] = p;
	if (p != NONE) {
		a->next[p] = x;
	} else {
		a->head[fl][sl] = x;
		if (x == NONE) {
			a->sl_map[fl] &= ~(1u << sl);
			if (!a->sl_map[fl])
				a->fl_map &= ~(1u << fl);
		}
	}
}

/*
 * A free extent of at least n units, or NONE. First the head of n's own list
 * (the tightest fit, which keeps uniform sizes packed), then the first extent
 * of the next non-empty list above it (every one fits), and only then the
 * rest of n's own list.
 */
static uint32_t find_fit(struct arena *a, uint32_t n)
{
	unsigned fl, sl;
	size_class(n, &fl, &sl);
	uint32_t own = a->head[fl][sl];
	if (own != NONE && (a->tag[own] & TAG_SIZE) >= n)
		return own;
	if (++sl == SL_COUNT) {
		sl = 0;
		fl++;
	}
	if (fl < FL_COUNT) {
		uint32_t sm = a->sl_map[fl] & (~0u << sl);
		if (!sm) {
			uint32_t fm = a->fl_map & (~0u << (fl + 1));
			if (fm) {
				fl = (unsigned)__builtin_ctz(fm);
				sm = a->sl_map[fl];
			}
		}
		if (sm)
			return a->head[fl][__builtin_ctz(sm)];
	}
	if (own == NONE || class_start(n))
		return NONE;
	for (uint32_t h = a->next[own]; h != NONE; h = a->next[h])
		if ((a->tag[h] & TAG_SIZE) >= n)
			return h;
	return NONE;
}

/* Makes the whole arena free: as one extent, or several of MAX_EXTENT. */
static void init_free_lists(struct arena *a)
{
	a->fl_map = 0;
	memset(a->sl_map, 0, sizeof(a->sl_map));
	for (unsigned f = 0; f < FL_COUNT; f++)
		for (unsigned s = 0; s < SL_COUNT; s++)
			a->head[f][s] = NONE;
	for (uint32_t h = 0; h < a->nunits;) {
		uint32_t n = a->nunits - h < MAX_EXTENT ? a->nunits - h : MAX_EXTENT;
		set_tags(a, h, n, TAG_FREE);
		list_insert(a, h, n);
		h += n;
	}
}

/* --- public -------------------------------------------------------------- */

int arena_open(const struct arena_opts *o, struct arena **out)
{
	if (!out)
		return kvt_fail(-EINVAL, "arena_open: out is NULL");
	*out = NULL;
	if (!o)
		return kvt_fail(-EINVAL, "arena_open: options are NULL");
	if (o->capacity == 0)
		return kvt_fail(-EINVAL, "ram.capacity is 0: the RAM arena needs at least "
				"%u bytes", ARENA_UNIT);
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0) {
		uint64_t phys = (uint64_t)pages * (uint64_t)psz;
		if (o->capacity > phys)
			return kvt_fail(-EINVAL, "ram.capacity %" PRIu64 " (%.1f GiB) exceeds "
					"physical memory %" PRIu64 " (%.1f GiB)",
					o->capacity, gib(o->capacity), phys, gib(phys));
	}
	if ((unsigned)o->hugepages > KVT_REQUIRE)
		return kvt_fail(-EINVAL, "ram.hugepages: invalid value %d", (int)o->hugepages);
	if ((unsigned)o->mlock > KVT_REQUIRE)
		return kvt_fail(-EINVAL, "ram.mlock: invalid value %d", (int)o->mlock);
	uint64_t cap = (o->capacity + ARENA_UNIT - 1) & ~(uint64_t)(ARENA_UNIT - 1);
	if (cap / ARENA_UNIT > MAX_UNITS || cap > SIZE_MAX / 2)
		return kvt_fail(-EINVAL, "ram.capacity %" PRIu64 " exceeds the arena's limit "
				"of %" PRIu64 " bytes", o->capacity,
				(uint64_t)MAX_UNITS * ARENA_UNIT);
	int rc = check_numa_node(o->numa_node);
	if (rc)
		return rc;

	struct arena *a = calloc(1, sizeof(*a));
	if (!a)
		return kvt_fail(-ENOMEM, "arena_open: out of memory");
	a->numa_node = -1;
	a->fd = -1;
	rc = map_arena(a, o, cap);
	if (rc) {
		free(a);
		return rc;
	}
	if (o->numa_node >= 0 && (rc = bind_node(a, o->numa_node)))
		goto fail;
	if ((rc = lock_pages(a, o->mlock)) || (rc = prefault(a)))
		goto fail;
	note_pages(a, o->shared);

	a->nunits = (uint32_t)(a->size / ARENA_UNIT);
	a->meta_bytes = (size_t)a->nunits * 3 * sizeof(uint32_t);
	a->meta = mmap(NULL, a->meta_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a->meta == MAP_FAILED) {
		a->meta = NULL;
		rc = kvt_fail(-ENOMEM, "ram.capacity: cannot map %zu bytes of arena "
			      "metadata: %s", a->meta_bytes, strerror(errno));
		goto fail;
	}
	a->tag = a->meta;
	a->next = a->tag + a->nunits;
	a->prev = a->next + a->nunits;
	if ((rc = pthread_mutex_init(&a->lock, NULL))) {
		rc = kvt_fail(-ENOMEM, "arena_open: pthread_mutex_init: %s", strerror(rc));
		goto fail;
	}
	init_free_lists(a);
	kvt_log(KVT_LOG_INFO, "ram arena: %zu bytes%s, reserved huge pages %s (asked %s), "
		"%" PRId64 " bytes on 2 MiB pages, mlock %s (asked %s), NUMA node %d",
		a->size, o->shared ? " shared" : "", a->hugepages ? "yes" : "no",
		tri_name(o->hugepages), a->huge_bytes, a->mlocked ? "yes" : "no",
		tri_name(o->mlock), a->numa_node);
	*out = a;
	return 0;
fail:
	if (a->meta)
		munmap(a->meta, a->meta_bytes);
	munmap(a->base, a->size);
	if (a->fd >= 0)
		close(a->fd);
	free(a);
	return rc;
}

void arena_close(struct arena *a)
{
	if (!a)
		return;
	pthread_mutex_destroy(&a->lock);
	munmap(a->meta, a->meta_bytes);
	if (a->mlocked)
		munlock(a->base, a->size);
	munmap(a->base, a->size);
	if (a->fd >= 0)
		close(a->fd);
	free(a);
}

int arena_fd(const struct arena *a)
{
	return a ? a->fd : -1;
}

void *arena_base(const struct arena *a)
{
	return a ? a->base : NULL;
}

size_t arena_size(const struct arena *a)
{
	return a ? a->size : 0;
}

int64_t arena_alloc(struct arena *a, size_t len)
{
	if (!a)
		return kvt_fail(-EINVAL, "arena_alloc: arena is NULL");
	if (len == 0)
		return kvt_fail(-EINVAL, "arena_alloc: len is 0");
	if (len > a->size)
		return kvt_fail(-ENOSPC, "ram arena: an extent of %zu bytes is larger than "
				"the arena (%zu bytes)", len, a->size);
	if ((len - 1) / ARENA_UNIT >= MAX_EXTENT)
		return kvt_fail(-ENOSPC, "ram arena: an extent of %zu bytes is larger than "
				"the largest extent possible (%" PRIu64 " bytes)", len,
				(uint64_t)MAX_EXTENT * ARENA_UNIT);
	uint32_t n = (uint32_t)((len + ARENA_UNIT - 1) / ARENA_UNIT);

	pthread_mutex_lock(&a->lock);
	uint32_t h = find_fit(a, n);
	if (h == NONE) {
		pthread_mutex_unlock(&a->lock);
		return kvt_fail(-ENOSPC, "ram arena: no free extent of %zu bytes", len);
	}
	uint32_t have = a->tag[h] & TAG_SIZE;
	list_remove(a, h, have);
	if (have > n) {
		set_tags(a, h + n, have - n, TAG_FREE);
		list_insert(a, h + n, have - n);
	}
	set_tags(a, h, n, 0);
	a->used_units += n;
	a->allocs++;
	pthread_mutex_unlock(&a->lock);
	return (int64_t)h * ARENA_UNIT;
}

/* Whether off names the first unit of an allocated extent; lock held. */
static int is_extent(const struct arena *a, uint64_t off)
{
	if (off % ARENA_UNIT || off / ARENA_UNIT >= a->nunits)
		return 0;
	uint32_t t = a->tag[off / ARENA_UNIT];
	return (t & TAG_HEAD) && !(t & TAG_FREE);
}

void arena_free(struct arena *a, uint64_t off)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	if (!is_extent(a, off)) {
		pthread_mutex_unlock(&a->lock);
		kvt_log(KVT_LOG_ERR, "ram arena: free of offset %" PRIu64 ", which is not "
			"an allocated extent; ignored", off);
		return;
	}
	uint32_t h = (uint32_t)(off / ARENA_UNIT);
	uint32_t n = a->tag[h] & TAG_SIZE;
	a->used_units -= n;
	a->allocs--;
	if (h > 0 && (a->tag[h - 1] & TAG_FREE)) {
		uint32_t ln = a->tag[h - 1] & TAG_SIZE;
		if (ln <= MAX_EXTENT - n) {
			list_remove(a, h - ln, ln);
			a->tag[h - 1] = 0;
			a->tag[h] = 0;
			h -= ln;
			n += ln;
		}
	}
	uint32_t r = h + n;
	if (r < a->nunits && (a->tag[r] & TAG_FREE)) {
		uint32_t rn = a->tag[r] & TAG_SIZE;
		if (rn <= MAX_EXTENT - n) {
			list_remove(a, r, rn);
			a->tag[r - 1] = 0;
			a->tag[r] = 0;
			n += rn;
		}
	}
	set_tags(a, h, n, TAG_FREE);
	list_insert(a, h, n);
	pthread_mutex_unlock(&a->lock);
}

uint64_t arena_extent_bytes(struct arena *a, uint64_t off)
{
	if (!a)
		return 0;
	pthread_mutex_lock(&a->lock);
	uint64_t n = is_extent(a, off) ? a->tag[off / ARENA_UNIT] & TAG_SIZE : 0;
	pthread_mutex_unlock(&a->lock);
	return n * ARENA_UNIT;
}

void arena_get_stats(struct arena *a, struct arena_stats *st)
{
	if (!st)
		return;
	memset(st, 0, sizeof(*st));
	st->numa_node = -1;
	st->huge_bytes = -1;
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	uint32_t largest = 0;
	if (a->fl_map) {
		/* The largest free extent is in the highest non-empty list. */
		unsigned fl = log2_u32(a->fl_map);
		unsigned sl = log2_u32(a->sl_map[fl]);
		for (uint32_t h = a->head[fl][sl]; h != NONE; h = a->next[h])
			if ((a->tag[h] & TAG_SIZE) > largest)
				largest = a->tag[h] & TAG_SIZE;
	}
	st->capacity = a->size;
	st->used = a->used_units * ARENA_UNIT;
	st->largest_free = (uint64_t)largest * ARENA_UNIT;
	st->allocs = a->allocs;
	pthread_mutex_unlock(&a->lock);
	st->hugepages = a->hugepages;
	st->huge_bytes = a->huge_bytes;
	st->mlocked = a->mlocked;
	st->numa_node = a->numa_node;
}
