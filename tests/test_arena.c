/*
 * test_arena.c - unit tests of the RAM arena (lib/arena.c): opening with each
 * option and its fallbacks, argument checks, and the extent allocator
 * (alignment, exhaustion, coalescing, a randomized stress against a shadow
 * bitmap, a multi-threaded stress). Knows nothing about tiers or the store.
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "arena.h"
#include "internal.h"

#define UNIT ARENA_UNIT
#define MIB (1024u * 1024u)

/* --- helpers ------------------------------------------------------------- */

/* Log lines seen, by level, through kvt_set_log(). */
static struct {
	pthread_mutex_t lock;
	int warns, errs;
	char last_warn[1024];
	char last_err[1024];
	char all_warns[4096];     /* every warning since logs_reset, one a line */
} logs = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void log_sink(int level, const char *msg, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&logs.lock);
	if (level == KVT_LOG_WARN) {
		logs.warns++;
		snprintf(logs.last_warn, sizeof(logs.last_warn), "%s", msg);
		size_t n = strlen(logs.all_warns);
		snprintf(logs.all_warns + n, sizeof(logs.all_warns) - n, "%s\n", msg);
	} else if (level == KVT_LOG_ERR) {
		logs.errs++;
		snprintf(logs.last_err, sizeof(logs.last_err), "%s", msg);
	}
	pthread_mutex_unlock(&logs.lock);
}

static void logs_reset(void)
{
	pthread_mutex_lock(&logs.lock);
	logs.warns = logs.errs = 0;
	logs.last_warn[0] = logs.last_err[0] = logs.all_warns[0] = '\0';
	pthread_mutex_unlock(&logs.lock);
}

static int setup_logs(void **state)
{
	(void)state;
	logs_reset();
	kvt_set_log(log_sink, NULL, KVT_LOG_DEBUG);
	return 0;
}

static int teardown_logs(void **state)
{
	(void)state;
	kvt_set_log(NULL, NULL, 0);
	return 0;
}

static struct arena_opts plain_opts(uint64_t capacity)
{
	struct arena_opts o = {
		.capacity = capacity,
		.hugepages = KVT_OFF,
		.mlock = KVT_OFF,
		.numa_node = -1,
	};
	return o;
}

static struct arena *open_plain(uint64_t capacity)
{
	struct arena_opts o = plain_opts(capacity);
	struct arena *a = NULL;
	int rc = arena_open(&o, &a);
	if (rc)
		fail_msg("arena_open(%" PRIu64 "): %d %s", capacity, rc, kvt_last_error());
	return a;
}

static uint64_t round_unit(uint64_t len)
{
	return (len + UNIT - 1) / UNIT * UNIT;
}

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64* */
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
	return rng_next(s) % n;
}

static void shuffle(int64_t *v, size_t n, uint64_t *s)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)rng_below(s, i);
		int64_t t = v[i - 1];
		v[i - 1] = v[j];
		v[j] = t;
	}
}

static void assert_stats(struct arena *a, uint64_t used, uint64_t allocs)
{
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_int_equal(st.used, used);
	assert_int_equal(st.allocs, allocs);
	assert_true(st.largest_free <= st.capacity - st.used);
}

/* After everything is freed, the whole arena is one extent again. */
static void assert_whole_arena_allocatable(struct arena *a)
{
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.allocs, 0);
	assert_int_equal(st.largest_free, st.capacity);
	int64_t off = arena_alloc(a, arena_size(a));
	assert_int_equal(off, 0);
	assert_int_equal(arena_extent_bytes(a, 0), arena_size(a));
	arena_free(a, 0);
	assert_stats(a, 0, 0);
}

/* --- opening ------------------------------------------------------------- */

static void test_open_rejects_zero_capacity(void **state)
{
	(void)state;
	struct arena_opts o = plain_opts(0);
	struct arena *a = (struct arena *)0x1;
	assert_int_equal(arena_open(&o, &a), -EINVAL);
	assert_null(a);
	assert_non_null(strstr(kvt_last_error(), "ram.capacity"));
}

static void test_open_rejects_capacity_above_physical_memory(void **state)
{
	(void)state;
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	struct arena_opts o = plain_opts(phys + UNIT);
	struct arena *a = NULL;
	assert_int_equal(arena_open(&o, &a), -EINVAL);
	assert_null(a);
	assert_non_null(strstr(kvt_last_error(), "ram.capacity"));
	assert_non_null(strstr(kvt_last_error(), "exceeds physical memory"));
	o.capacity = UINT64_MAX;
	assert_int_equal(arena_open(&o, &a), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "exceeds physical memory"));
}

static void test_open_rejects_bad_arguments(void **state)
{
	(void)state;
	struct arena_opts o = plain_opts(MIB);
	struct arena *a = NULL;
	assert_int_equal(arena_open(NULL, &a), -EINVAL);
	assert_true(kvt_last_error()[0] != '\0');
	assert_int_equal(arena_open(&o, NULL), -EINVAL);
	o.numa_node = -2;
	assert_int_equal(arena_open(&o, &a), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "ram.numa_node"));
	o = plain_opts(MIB);
	o.hugepages = (enum kvt_tri)7;
	assert_int_equal(arena_open(&o, &a), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "ram.hugepages"));
	o = plain_opts(MIB);
	o.mlock = (enum kvt_tri)-1;
	assert_int_equal(arena_open(&o, &a), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "ram.mlock"));
	assert_null(a);
}

static void test_open_rounds_capacity_up_to_unit(void **state)
{
	(void)state;
	struct arena *a = open_plain(10000);
	assert_int_equal(arena_size(a), 3 * UNIT);
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_int_equal(st.capacity, 3 * UNIT);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.largest_free, 3 * UNIT);
	assert_int_equal(st.hugepages, 0);
	assert_int_equal(st.mlocked, 0);
	assert_int_equal(st.numa_node, -1);
	arena_close(a);
}

static void test_open_prefaults_every_page(void **state)
{
	(void)state;
	size_t cap = 8 * MIB;
	struct arena *a = open_plain(cap);
	char *base = arena_base(a);
	assert_int_equal((uintptr_t)base % UNIT, 0);
	long psz = sysconf(_SC_PAGESIZE);
	size_t pages = cap / (size_t)psz;
	unsigned char *vec = malloc(pages);
	assert_non_null(vec);
	assert_int_equal(mincore(base, cap, vec), 0);
	for (size_t i = 0; i < pages; i++)
		if (!(vec[i] & 1))
			fail_msg("page %zu of the arena is not resident after open", i);
	free(vec);
	/* and all of it is writable */
	memset(base, 0xa5, cap);
	assert_int_equal((unsigned char)base[cap - 1], 0xa5);
	arena_close(a);
}

static void test_close_of_null_is_harmless(void **state)
{
	(void)state;
	arena_close(NULL);
	struct arena_stats st;
	arena_get_stats(NULL, &st);
	assert_int_equal(st.capacity, 0);
	assert_int_equal(st.numa_node, -1);
	assert_int_equal(arena_alloc(NULL, UNIT), -EINVAL);
	assert_null(arena_base(NULL));
	assert_int_equal(arena_size(NULL), 0);
	assert_int_equal(arena_extent_bytes(NULL, 0), 0);
	arena_free(NULL, 0);
}

static void test_hugepages_try_falls_back_with_warning(void **state)
{
	(void)state;
	struct arena_opts o = plain_opts(3 * MIB + 5);
	o.hugepages = KVT_TRY;
	struct arena *a = NULL;
	assert_int_equal(arena_open(&o, &a), 0);
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_true((uintptr_t)arena_base(a) % UNIT == 0);
	if (st.hugepages) {
		/* huge pages were available: rounded to 2 MiB and aligned */
		assert_int_equal(arena_size(a), 4 * MIB);
		assert_int_equal((uintptr_t)arena_base(a) % (2 * MIB), 0);
	} else {
		assert_int_equal(arena_size(a), round_unit(3 * MIB + 5));
		assert_true(logs.warns >= 1);
		assert_non_null(strstr(logs.last_warn, "huge pages"));
		assert_non_null(strstr(logs.last_warn, "ram.hugepages"));
	}
	memset(arena_base(a), 1, arena_size(a));
	assert_whole_arena_allocatable(a);
	arena_close(a);
}

static void test_hugepages_require_maps_or_fails_enomem(void **state)
{
	(void)state;
	struct arena_opts o = plain_opts(3 * MIB);
	o.hugepages = KVT_REQUIRE;
	struct arena *a = NULL;
	int rc = arena_open(&o, &a);
	if (rc == 0) {
		struct arena_stats st;
		arena_get_stats(a, &st);
		assert_int_equal(st.hugepages, 1);
		assert_int_equal(arena_size(a), 4 * MIB);
		assert_int_equal((uintptr_t)arena_base(a) % (2 * MIB), 0);
		memset(arena_base(a), 1, arena_size(a));
		arena_close(a);
	} else {
		assert_int_equal(rc, -ENOMEM);
		assert_null(a);
		assert_true(kvt_last_error()[0] != '\0');
		assert_non_null(strstr(kvt_last_error(), "ram.hugepages"));
	}
}

/* A shared arena's bytes seen through a second mapping of its memfd
 * (as an attached process maps it). */
static void assert_shared_mapping_sees_writes(struct arena *a)
{
	assert_true(arena_fd(a) >= 0);
	char *q = arena_map_fd(arena_fd(a), arena_size(a));
	assert_non_null(q);
	assert_int_equal((uintptr_t)q % (2 * MIB), 0);
	memset(arena_base(a), 0x5a, arena_size(a));
	assert_int_equal(q[0], 0x5a);
	assert_int_equal(q[arena_size(a) - 1], 0x5a);
	q[12345] = 0x11;
	assert_int_equal(((char *)arena_base(a))[12345], 0x11);
	munmap(q, arena_size(a));
}

/* The kernel's mode for transparent huge pages in shared memory, or "". */
static void shmem_mode(char *buf, size_t cap)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
	char line[256];
	buf[0] = '\0';
	if (f && fgets(line, sizeof(line), f)) {
		char *o = strchr(line, '['), *c = o ? strchr(o, ']') : NULL;
		if (o && c)
			snprintf(buf, cap, "%.*s", (int)(c - o - 1), o + 1);
	}
	if (f)
		fclose(f);
}

/*
 * A shared arena on normal pages reports how much of it 2 MiB pages map,
 * and when that is none, says so in a warning that names the setting to
 * change. Which case happens depends on the kernel's shmem_enabled mode
 * (this test changes no system setting): "never" and "deny" give none.
 */
static void test_shared_arena_reports_its_pages(void **state)
{
	(void)state;
	char mode[64];
	shmem_mode(mode, sizeof(mode));
	struct arena_opts o = plain_opts(8 * MIB);
	o.shared = 1;
	struct arena *a = NULL;
	assert_int_equal(arena_open(&o, &a), 0);
	assert_int_equal((uintptr_t)arena_base(a) % (2 * MIB), 0);
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_int_equal(st.hugepages, 0);
	assert_true(st.huge_bytes >= 0 && (uint64_t)st.huge_bytes <= arena_size(a));
	assert_int_equal(st.huge_bytes % (2 * MIB), 0);
	if (!strcmp(mode, "never") || !strcmp(mode, "deny"))
		assert_int_equal(st.huge_bytes, 0);
	if (st.huge_bytes == 0) {
		assert_int_equal(logs.warns, 1);
		assert_non_null(strstr(logs.last_warn, "shmem_enabled"));
		assert_non_null(strstr(logs.last_warn, "\"advise\""));
		if (mode[0])
			assert_non_null(strstr(logs.last_warn, mode));
	} else {
		assert_int_equal(logs.warns, 0);
	}
	assert_shared_mapping_sees_writes(a);
	arena_close(a);

	/* A private arena never warns about it. */
	logs_reset();
	o.shared = 0;
	assert_int_equal(arena_open(&o, &a), 0);
	arena_get_stats(a, &st);
	assert_true(st.huge_bytes >= 0);
	assert_int_equal(arena_fd(a), -1);
	assert_int_equal(logs.warns, 0);
	arena_close(a);
}

/* 2 MiB pages in the pool: HugePages_Free from /proc/meminfo, or -1. */
static long huge_free(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	long n = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "HugePages_Free: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

static long read_nr_hugepages(void)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "r");
	long n = -1;
	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

static int write_nr_hugepages(long n)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "w");
	if (!f)
		return -1;
	int ok = fprintf(f, "%ld\n", n) > 0;
	return fclose(f) == 0 && ok ? 0 : -1;
}

/*
 * A shared arena with ram.hugepages "try" or true on reserved 2 MiB pages.
 * Needs root to reserve a few pages in the pool for the test (given back at
 * the end); skipped otherwise. With an empty pool, "try" falls back with a
 * warning and true fails with -ENOMEM.
 */
static void test_shared_arena_on_reserved_hugepages(void **state)
{
	(void)state;
	struct arena_opts o = plain_opts(5 * MIB);
	struct arena *a = NULL;
	struct arena_stats st;
	o.shared = 1;

	if (huge_free() == 0) {
		o.hugepages = KVT_TRY;
		assert_int_equal(arena_open(&o, &a), 0);
		arena_get_stats(a, &st);
		assert_int_equal(st.hugepages, 0);
		assert_int_equal(arena_size(a), 5 * MIB);
		assert_non_null(strstr(logs.all_warns, "ram.hugepages \"try\""));
		assert_shared_mapping_sees_writes(a);
		arena_close(a);
		o.hugepages = KVT_REQUIRE;
		assert_int_equal(arena_open(&o, &a), -ENOMEM);
		assert_null(a);
		assert_non_null(strstr(kvt_last_error(), "nr_hugepages"));
	}
	long orig = read_nr_hugepages();
	if (geteuid() != 0 || orig < 0 || write_nr_hugepages(orig + 3) != 0) {
		print_message("skipped: reserving 2 MiB pages needs root and a writable "
			      "/proc/sys/vm/nr_hugepages\n");
		skip();
	}
	if (huge_free() < 3) {
		write_nr_hugepages(orig);
		print_message("skipped: the kernel could not reserve 3 huge pages\n");
		skip();
	}
	for (int i = 0; i < 2; i++) {
		logs_reset();
		o.hugepages = i ? KVT_REQUIRE : KVT_TRY;
		int rc = arena_open(&o, &a);
		if (rc)
			write_nr_hugepages(orig);
		assert_int_equal(rc, 0);
		arena_get_stats(a, &st);
		assert_int_equal(st.hugepages, 1);
		assert_int_equal(arena_size(a), 6 * MIB);
		assert_int_equal(st.huge_bytes, 6 * MIB);
		assert_int_equal(logs.warns, 0);
		assert_shared_mapping_sees_writes(a);
		assert_whole_arena_allocatable(a);
		arena_close(a);
	}
	assert_int_equal(write_nr_hugepages(orig), 0);
}

/* Locked memory of this process in KiB (VmLck), or -1. */
static long vmlck_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/*
 * Whether mlock() really locks here: the sanitizer runtimes replace it with
 * a no-op that returns 0, which no test of the lock itself can see through.
 */
static int mlock_is_real(void)
{
	size_t len = (size_t)sysconf(_SC_PAGESIZE);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	long before = vmlck_kb();
	int real = mlock(p, len) == 0 && vmlck_kb() > before;
	munlock(p, len);
	munmap(p, len);
	return real;
}

static void test_mlock_require_locks_within_limit(void **state)
{
	(void)state;
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 2 * MIB && geteuid() != 0) {
		print_message("skipped: RLIMIT_MEMLOCK below 2 MiB and not root\n");
		skip();
	}
	struct arena_opts o = plain_opts(256 * 1024);
	o.mlock = KVT_REQUIRE;
	struct arena *a = NULL;
	int rc = arena_open(&o, &a);
	if (rc)
		fail_msg("mlock of 256 KiB: %d %s", rc, kvt_last_error());
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_int_equal(st.mlocked, 1);
	if (mlock_is_real())
		assert_true(vmlck_kb() >= 256);
	assert_whole_arena_allocatable(a);
	arena_close(a);
}

/* Drops CAP_IPC_LOCK (root ignores RLIMIT_MEMLOCK with it); 0 or -1. */
static int drop_ipc_lock(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	if (syscall(SYS_capget, &hdr, data))
		return -1;
	data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	return syscall(SYS_capset, &hdr, data) ? -1 : 0;
}

/*
 * In a child without CAP_IPC_LOCK and with RLIMIT_MEMLOCK at 64 KiB, an
 * arena of 4 MiB cannot be locked: "true" fails with -ENOMEM naming the
 * limit, "try" opens unlocked and warns naming it. Exit status 0 on success,
 * 77 where mlock() is a no-op (sanitizer builds).
 */
static int mlock_over_limit_child(void)
{
	if (!mlock_is_real())
		return 77;
	if (drop_ipc_lock())
		return 10;
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl))
		return 11;
	rl.rlim_cur = 64 * 1024;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < rl.rlim_cur)
		rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_MEMLOCK, &rl))
		return 12;
	struct arena_opts o = plain_opts(4 * MIB);
	o.mlock = KVT_REQUIRE;
	struct arena *a = NULL;
	int rc = arena_open(&o, &a);
	if (rc != -ENOMEM || a) {
		fprintf(stderr, "require: rc %d\n", rc);
		return 13;
	}
	if (!strstr(kvt_last_error(), "RLIMIT_MEMLOCK") || !strstr(kvt_last_error(), "ram.mlock")) {
		fprintf(stderr, "require: message \"%s\"\n", kvt_last_error());
		return 14;
	}
	logs_reset();
	o.mlock = KVT_TRY;
	rc = arena_open(&o, &a);
	if (rc) {
		fprintf(stderr, "try: rc %d %s\n", rc, kvt_last_error());
		return 15;
	}
	struct arena_stats st;
	arena_get_stats(a, &st);
	if (st.mlocked)
		return 16;
	if (logs.warns < 1 || !strstr(logs.last_warn, "RLIMIT_MEMLOCK")) {
		fprintf(stderr, "try: warning \"%s\"\n", logs.last_warn);
		return 17;
	}
	memset(arena_base(a), 3, arena_size(a));
	arena_close(a);
	return 0;
}

static void test_mlock_over_limit_fails_require_and_warns_try(void **state)
{
	(void)state;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(mlock_over_limit_child());
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77) {
		print_message("skipped: mlock over RLIMIT_MEMLOCK cannot fail here (root, or no limit)\n");
		skip();
	}
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_numa_node_out_of_range_rejected(void **state)
{
	(void)state;
	struct arena_opts o = plain_opts(MIB);
	struct arena *a = NULL;
	o.numa_node = numa_available() < 0 ? 0 : numa_max_node() + 1;
	assert_int_equal(arena_open(&o, &a), -EINVAL);
	assert_null(a);
	assert_non_null(strstr(kvt_last_error(), "ram.numa_node"));
	o.numa_node = 1 << 20;
	assert_int_equal(arena_open(&o, &a), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "ram.numa_node"));
}

static void test_numa_node_binds_pages_to_node(void **state)
{
	(void)state;
	if (numa_available() < 0) {
		print_message("skipped: no NUMA support (numa_available() < 0)\n");
		skip();
	}
	/* The highest node this process may allocate from. */
	int node = -1;
	for (int n = numa_max_node(); n >= 0 && node < 0; n--)
		if (numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)n))
			node = n;
	assert_true(node >= 0);
	struct arena_opts o = plain_opts(4 * MIB);
	o.numa_node = node;
	struct arena *a = NULL;
	int rc = arena_open(&o, &a);
	if (rc)
		fail_msg("numa node %d: %d %s", node, rc, kvt_last_error());
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_int_equal(st.numa_node, node);
	char *base = arena_base(a);
	for (size_t off = 0; off < arena_size(a); off += 256 * 1024) {
		int where = -1;
		assert_int_equal(get_mempolicy(&where, NULL, 0, base + off,
					       MPOL_F_NODE | MPOL_F_ADDR), 0);
		assert_int_equal(where, node);
		/* the policy itself, visible even on a single-node machine */
		int mode = -1;
		unsigned long mask[16] = { 0 };
		assert_int_equal(get_mempolicy(&mode, mask, sizeof(mask) * 8, base + off,
					       MPOL_F_ADDR), 0);
		assert_int_equal(mode, MPOL_BIND);
		for (int n = 0; n < (int)(sizeof(mask) * 8); n++)
			assert_int_equal(!!(mask[n / 64] & (1ul << (n % 64))), n == node);
	}
	arena_close(a);
}

/* --- allocation ---------------------------------------------------------- */

static void test_alloc_offsets_are_unit_aligned(void **state)
{
	(void)state;
	struct arena *a = open_plain(16 * MIB);
	static const size_t lens[] = { 1, 100, 4095, 4096, 4097, 8191, 65536,
				       100000, 3 * MIB / 2, 3 * MIB / 2 + 1, 1 };
	int64_t offs[sizeof(lens) / sizeof(lens[0])];
	uint64_t used = 0;
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		offs[i] = arena_alloc(a, lens[i]);
		assert_true(offs[i] >= 0);
		assert_int_equal(offs[i] % UNIT, 0);
		assert_int_equal(((uintptr_t)arena_base(a) + (uint64_t)offs[i]) % UNIT, 0);
		assert_true((uint64_t)offs[i] + round_unit(lens[i]) <= arena_size(a));
		assert_int_equal(arena_extent_bytes(a, (uint64_t)offs[i]), round_unit(lens[i]));
		used += round_unit(lens[i]);
		assert_stats(a, used, i + 1);
	}
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		arena_free(a, (uint64_t)offs[i]);
	assert_whole_arena_allocatable(a);
	arena_close(a);
}

static void test_alloc_rejects_zero_and_oversized_lengths(void **state)
{
	(void)state;
	struct arena *a = open_plain(MIB);
	assert_int_equal(arena_alloc(a, 0), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "len"));
	assert_int_equal(arena_alloc(a, MIB + 1), -ENOSPC);
	assert_true(kvt_last_error()[0] != '\0');
	assert_int_equal(arena_alloc(a, SIZE_MAX), -ENOSPC);
	assert_stats(a, 0, 0);
	arena_close(a);
}

static void test_alloc_fills_arena_then_returns_enospc(void **state)
{
	(void)state;
	struct arena *a = open_plain(MIB);
	size_t n = MIB / UNIT;
	int64_t *offs = calloc(n, sizeof(*offs));
	char *seen = calloc(n, 1);
	for (size_t i = 0; i < n; i++) {
		offs[i] = arena_alloc(a, UNIT);
		assert_true(offs[i] >= 0);
		size_t u = (size_t)offs[i] / UNIT;
		assert_true(u < n);
		assert_false(seen[u]);
		seen[u] = 1;
	}
	assert_int_equal(arena_alloc(a, 1), -ENOSPC);
	assert_non_null(strstr(kvt_last_error(), "no free extent"));
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_int_equal(st.used, MIB);
	assert_int_equal(st.allocs, n);
	assert_int_equal(st.largest_free, 0);

	/* every other unit free: plenty of space, but no two units together */
	for (size_t i = 0; i < n; i++)
		if (offs[i] / UNIT % 2 == 0)
			arena_free(a, (uint64_t)offs[i]);
	arena_get_stats(a, &st);
	assert_int_equal(st.used, MIB / 2);
	assert_int_equal(st.largest_free, UNIT);
	assert_int_equal(arena_alloc(a, UNIT + 1), -ENOSPC);
	int64_t one = arena_alloc(a, UNIT);
	assert_true(one >= 0 && one / UNIT % 2 == 0);
	arena_free(a, (uint64_t)one);
	for (size_t i = 0; i < n; i++)
		if (offs[i] / UNIT % 2 == 1)
			arena_free(a, (uint64_t)offs[i]);
	assert_whole_arena_allocatable(a);
	free(seen);
	free(offs);
	arena_close(a);
}

static void test_alloc_of_whole_arena_succeeds_for_any_capacity(void **state)
{
	(void)state;
	/* capacities whose unit count is not a size-class boundary, so only
	 * the exact search of the request's own class can find the extent */
	static const uint64_t units[] = { 1, 15, 17, 33, 1000, 4097, 12345 };
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		struct arena *a = open_plain(units[i] * UNIT);
		assert_whole_arena_allocatable(a);
		/* and one unit short of it, leaving a one-unit extent */
		int64_t big = arena_alloc(a, (units[i] - 1) * UNIT + 1);
		assert_int_equal(big, 0);
		if (units[i] > 1) {
			arena_free(a, 0);
			big = arena_alloc(a, (units[i] - 1) * UNIT);
			assert_int_equal(big, 0);
			int64_t last = arena_alloc(a, 1);
			assert_int_equal(last, (int64_t)((units[i] - 1) * UNIT));
			assert_int_equal(arena_alloc(a, 1), -ENOSPC);
			arena_free(a, (uint64_t)last);
		}
		arena_free(a, 0);
		assert_whole_arena_allocatable(a);
		arena_close(a);
	}
}

static void test_alloc_finds_fit_behind_smaller_extent_of_same_class(void **state)
{
	(void)state;
	/* free extents of 33 and 32 units share a size class; the 32 is freed
	 * last and heads the list, yet a request for 33 units must succeed */
	struct arena *a = open_plain(67 * UNIT);
	int64_t x = arena_alloc(a, 33 * UNIT);
	int64_t gap1 = arena_alloc(a, UNIT);
	int64_t y = arena_alloc(a, 32 * UNIT);
	int64_t gap2 = arena_alloc(a, UNIT);
	assert_true(x >= 0 && gap1 >= 0 && y >= 0 && gap2 >= 0);
	assert_int_equal(arena_alloc(a, 1), -ENOSPC);
	arena_free(a, (uint64_t)x);
	arena_free(a, (uint64_t)y);
	assert_int_equal(arena_alloc(a, 33 * UNIT), x);
	assert_int_equal(arena_alloc(a, 33 * UNIT), -ENOSPC);
	assert_int_equal(arena_alloc(a, 32 * UNIT), y);
	arena_free(a, (uint64_t)x);
	arena_free(a, (uint64_t)y);
	arena_free(a, (uint64_t)gap1);
	arena_free(a, (uint64_t)gap2);
	assert_whole_arena_allocatable(a);
	arena_close(a);
}

static void test_largest_free_tracks_fragmentation(void **state)
{
	(void)state;
	struct arena *a = open_plain(256 * UNIT);
	int64_t x = arena_alloc(a, 64 * UNIT);
	int64_t y = arena_alloc(a, 64 * UNIT);
	int64_t z = arena_alloc(a, 96 * UNIT);
	assert_true(x >= 0 && y >= 0 && z >= 0);
	struct arena_stats st;
	arena_get_stats(a, &st);
	assert_int_equal(st.largest_free, 32 * UNIT);
	arena_free(a, (uint64_t)y);
	arena_get_stats(a, &st);
	assert_int_equal(st.largest_free, 64 * UNIT);
	assert_int_equal(st.used, 160 * UNIT);
	arena_free(a, (uint64_t)x); /* merges with y's extent on its right */
	arena_get_stats(a, &st);
	assert_int_equal(st.largest_free, 128 * UNIT);
	assert_int_equal(st.allocs, 1);
	arena_free(a, (uint64_t)z); /* merges with both neighbours */
	assert_whole_arena_allocatable(a);
	arena_close(a);
}

static void test_free_of_invalid_offset_is_refused(void **state)
{
	(void)state;
	struct arena *a = open_plain(MIB);
	int64_t x = arena_alloc(a, 3 * UNIT);
	int64_t y = arena_alloc(a, 2 * UNIT);
	assert_true(x >= 0 && y >= 0);
	uint64_t bad[] = { (uint64_t)x + UNIT, (uint64_t)x + 2 * UNIT, (uint64_t)x + 1,
			   MIB, UINT64_MAX,
			   (uint64_t)y + 2 * UNIT /* head of the free extent */,
			   (uint64_t)y + 4 * UNIT /* inside the free extent */ };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		logs_reset();
		arena_free(a, bad[i]);
		assert_int_equal(logs.errs, 1);
		assert_non_null(strstr(logs.last_err, "not an allocated extent"));
		assert_int_equal(arena_extent_bytes(a, bad[i]), 0);
		assert_stats(a, 5 * UNIT, 2);
	}
	arena_free(a, (uint64_t)x);
	logs_reset();
	arena_free(a, (uint64_t)x); /* double free */
	assert_int_equal(logs.errs, 1);
	assert_stats(a, 2 * UNIT, 1);
	arena_free(a, (uint64_t)y);
	assert_whole_arena_allocatable(a);
	arena_close(a);
}

static void test_free_in_random_order_coalesces_to_one_extent(void **state)
{
	(void)state;
	size_t nunits = 4096;
	struct arena *a = open_plain(nunits * UNIT);
	int64_t *offs = calloc(nunits, sizeof(*offs));
	for (uint64_t seed = 1; seed <= 20; seed++) {
		uint64_t s = seed * 0x9E3779B97F4A7C15ull;
		size_t n = 0;
		uint64_t used = 0;
		/* fill with random sizes, then the leftovers unit by unit */
		for (;;) {
			size_t len = 1 + (size_t)rng_below(&s, 40 * UNIT);
			int64_t off = arena_alloc(a, len);
			if (off == -ENOSPC)
				break;
			assert_true(off >= 0);
			offs[n++] = off;
			used += round_unit(len);
		}
		for (;;) {
			int64_t off = arena_alloc(a, 1);
			if (off == -ENOSPC)
				break;
			offs[n++] = off;
			used += UNIT;
		}
		assert_int_equal(used, nunits * UNIT);
		assert_stats(a, used, n);
		shuffle(offs, n, &s);
		for (size_t i = 0; i < n; i++) {
			used -= arena_extent_bytes(a, (uint64_t)offs[i]);
			arena_free(a, (uint64_t)offs[i]);
			assert_stats(a, used, n - i - 1);
		}
		assert_whole_arena_allocatable(a);
	}
	free(offs);
	arena_close(a);
}

/* Largest run of clear bits in the shadow map, in units. */
static size_t shadow_largest_free(const unsigned char *shadow, size_t n)
{
	size_t best = 0, run = 0;
	for (size_t i = 0; i < n; i++) {
		run = shadow[i] ? 0 : run + 1;
		if (run > best)
			best = run;
	}
	return best;
}

static void test_random_stress_never_overlaps_and_counts_exactly(void **state)
{
	(void)state;
	size_t nunits = 8192; /* 32 MiB */
	struct arena *a = open_plain(nunits * UNIT);
	unsigned char *shadow = calloc(nunits, 1);
	size_t cap = 4096, live = 0;
	int64_t *offs = calloc(cap, sizeof(*offs));
	uint64_t s = 0x5eed1234abcdull, used = 0;
	unsigned enospc = 0;
	for (int op = 0; op < 30000; op++) {
		int do_alloc = live == 0 || (live < cap && rng_below(&s, 100) < 55);
		if (do_alloc) {
			size_t len;
			uint64_t kind = rng_below(&s, 10);
			if (kind < 4)
				len = 96 * UNIT; /* the uniform block size */
			else if (kind < 7)
				len = 1 + (size_t)rng_below(&s, 64 * UNIT);
			else if (kind < 9)
				len = 1 + (size_t)rng_below(&s, MIB);
			else
				len = 1 + (size_t)rng_below(&s, nunits * UNIT / 4);
			int64_t off = arena_alloc(a, len);
			if (off == -ENOSPC) {
				/* only when no free extent is large enough */
				struct arena_stats st;
				arena_get_stats(a, &st);
				assert_true(st.largest_free < round_unit(len));
				assert_int_equal(st.largest_free,
						 shadow_largest_free(shadow, nunits) * UNIT);
				enospc++;
				continue;
			}
			assert_true(off >= 0);
			assert_int_equal(off % UNIT, 0);
			uint64_t bytes = arena_extent_bytes(a, (uint64_t)off);
			assert_int_equal(bytes, round_unit(len));
			size_t u0 = (size_t)off / UNIT, nu = bytes / UNIT;
			assert_true(u0 + nu <= nunits);
			for (size_t u = u0; u < u0 + nu; u++) {
				if (shadow[u])
					fail_msg("op %d: unit %zu handed out twice", op, u);
				shadow[u] = 1;
			}
			offs[live++] = off;
			used += bytes;
		} else {
			size_t i = (size_t)rng_below(&s, live);
			uint64_t off = (uint64_t)offs[i];
			uint64_t bytes = arena_extent_bytes(a, off);
			memset(shadow + off / UNIT, 0, bytes / UNIT);
			arena_free(a, off);
			offs[i] = offs[--live];
			used -= bytes;
		}
		assert_stats(a, used, live);
		if (op % 97 == 0) {
			struct arena_stats st;
			arena_get_stats(a, &st);
			assert_int_equal(st.largest_free,
					 shadow_largest_free(shadow, nunits) * UNIT);
		}
	}
	assert_true(enospc > 0); /* the stress did reach a full arena */
	for (size_t i = 0; i < live; i++)
		arena_free(a, (uint64_t)offs[i]);
	assert_whole_arena_allocatable(a);
	free(offs);
	free(shadow);
	arena_close(a);
}

struct worker {
	struct arena *a;
	unsigned id;
	unsigned done;
	unsigned corrupt;
	unsigned enospc;
};

#define WINDOW 8

static void fill(char *p, size_t len, uint64_t tag)
{
	uint64_t *w = (uint64_t *)p;
	for (size_t i = 0; i < len / 8; i++)
		w[i] = tag ^ (i * 0x9E3779B97F4A7C15ull);
}

static int check(const char *p, size_t len, uint64_t tag)
{
	const uint64_t *w = (const uint64_t *)p;
	for (size_t i = 0; i < len / 8; i++)
		if (w[i] != (tag ^ (i * 0x9E3779B97F4A7C15ull)))
			return 0;
	return 1;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char *base = arena_base(w->a);
	int64_t off[WINDOW];
	size_t len[WINDOW];
	uint64_t tag[WINDOW];
	unsigned n = 0;
	uint64_t s = 0xabcdef0123ull + w->id * 7919;
	for (unsigned it = 0; it < 3000; it++) {
		if (n == WINDOW || (n > 0 && rng_below(&s, 3) == 0)) {
			unsigned i = (unsigned)rng_below(&s, n);
			if (!check(base + off[i], len[i], tag[i]))
				w->corrupt++;
			arena_free(w->a, (uint64_t)off[i]);
			n--;
			off[i] = off[n];
			len[i] = len[n];
			tag[i] = tag[n];
			continue;
		}
		size_t l = (1 + (size_t)rng_below(&s, 8)) * UNIT;
		int64_t o = arena_alloc(w->a, l);
		if (o == -ENOSPC) {
			w->enospc++;
			continue;
		}
		if (o < 0) {
			w->corrupt++;
			continue;
		}
		off[n] = o;
		len[n] = l;
		tag[n] = ((uint64_t)w->id << 48) ^ it;
		fill(base + o, l, tag[n]);
		n++;
		w->done++;
	}
	while (n > 0) {
		n--;
		if (!check(base + off[n], len[n], tag[n]))
			w->corrupt++;
		arena_free(w->a, (uint64_t)off[n]);
	}
	return NULL;
}

static void test_threads_alloc_write_verify_free(void **state)
{
	(void)state;
	/* small enough that the threads compete for space and hit -ENOSPC */
	struct arena *a = open_plain(96 * UNIT);
	struct worker w[4];
	pthread_t t[4];
	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){ .a = a, .id = i + 1 };
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	unsigned done = 0;
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(w[i].corrupt, 0);
		done += w[i].done;
	}
	/* Enough allocations that the threads overlapped; how many of the
	 * 12,000 tries find space depends on scheduling (under TSan on a
	 * loaded machine a third of them did not). */
	assert_true(done > 4 * 100);
	assert_whole_arena_allocatable(a);
	arena_close(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_rejects_zero_capacity),
		cmocka_unit_test(test_open_rejects_capacity_above_physical_memory),
		cmocka_unit_test(test_open_rejects_bad_arguments),
		cmocka_unit_test(test_open_rounds_capacity_up_to_unit),
		cmocka_unit_test(test_open_prefaults_every_page),
		cmocka_unit_test(test_close_of_null_is_harmless),
		cmocka_unit_test_setup_teardown(test_hugepages_try_falls_back_with_warning,
						setup_logs, teardown_logs),
		cmocka_unit_test(test_hugepages_require_maps_or_fails_enomem),
		cmocka_unit_test_setup_teardown(test_shared_arena_reports_its_pages,
						setup_logs, teardown_logs),
		cmocka_unit_test_setup_teardown(test_shared_arena_on_reserved_hugepages,
						setup_logs, teardown_logs),
		cmocka_unit_test(test_mlock_require_locks_within_limit),
		cmocka_unit_test_setup_teardown(test_mlock_over_limit_fails_require_and_warns_try,
						setup_logs, teardown_logs),
		cmocka_unit_test(test_numa_node_out_of_range_rejected),
		cmocka_unit_test(test_numa_node_binds_pages_to_node),
		cmocka_unit_test(test_alloc_offsets_are_unit_aligned),
		cmocka_unit_test(test_alloc_rejects_zero_and_oversized_lengths),
		cmocka_unit_test(test_alloc_fills_arena_then_returns_enospc),
		cmocka_unit_test(test_alloc_of_whole_arena_succeeds_for_any_capacity),
		cmocka_unit_test(test_alloc_finds_fit_behind_smaller_extent_of_same_class),
		cmocka_unit_test(test_largest_free_tracks_fragmentation),
		cmocka_unit_test_setup_teardown(test_free_of_invalid_offset_is_refused,
						setup_logs, teardown_logs),
		cmocka_unit_test(test_free_in_random_order_coalesces_to_one_extent),
		cmocka_unit_test(test_random_stress_never_overlaps_and_counts_exactly),
		cmocka_unit_test(test_threads_alloc_write_verify_free),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
