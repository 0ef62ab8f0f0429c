/*
 * test_disk.c - the NVMe tier (lib/disk*.c) on files in a temp dir: round
 * trips, batches, reclaim, leases, restart from the checkpoint and from a
 * region scan after kill -9, damaged files, injected device faults (through
 * a wrapper around the real io_uring ops), full devices, foreign superblocks,
 * bad configs, and concurrent use.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "config.h"
#include "disk.h"
#include "faultdev.h"
#include "internal.h"
#include "memreg.h"
#include "stats.h"
#include "uring.h"
#include "util.h"
#include "opts.h"


#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* --- helpers ------------------------------------------------------------------ */

static char logbuf[1 << 16];
static pthread_mutex_t loglock = PTHREAD_MUTEX_INITIALIZER;

static void grab_log(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	pthread_mutex_lock(&loglock);
	size_t n = strlen(logbuf);
	snprintf(logbuf + n, sizeof(logbuf) - n, "%s\n", msg);
	pthread_mutex_unlock(&loglock);
}

static void log_clear(void)
{
	pthread_mutex_lock(&loglock);
	logbuf[0] = 0;
	pthread_mutex_unlock(&loglock);
}

static int log_has(const char *s)
{
	pthread_mutex_lock(&loglock);
	int r = strstr(logbuf, s) != NULL;
	pthread_mutex_unlock(&loglock);
	return r;
}

struct fix {
	char *dir;
	char path[4096], path2[4096];
	char *paths[2];
	struct kvt_config cfg;
};

static void fix_init(struct fix *f, uint64_t capacity, uint64_t region)
{
	memset(f, 0, sizeof(*f));
	f->dir = make_temp_dir("disk");
	assert_non_null(f->dir);
	snprintf(f->path, sizeof(f->path), "%s/tier0", f->dir);
	snprintf(f->path2, sizeof(f->path2), "%s/tier1", f->dir);
	f->paths[0] = f->path;
	f->paths[1] = f->path2;
	f->cfg.ndisk = 1;
	f->cfg.disk_paths = f->paths;
	f->cfg.disk_capacity = capacity;
	f->cfg.region_size = region;
	f->cfg.queue_depth = 8;
}

static void fix_done(struct fix *f)
{
	rm_rf(f->dir);
	free(f->dir);
}

static struct disk_tier *open_ok(struct fix *f, const struct kvt_dev_ops *ops)
{
	struct disk_tier *d = NULL;
	int rc = disk_open_cfg(&f->cfg, NULL, 0, ops, &d);

	if (rc)
		fprintf(stderr, "disk_open: %d %s\n", rc, kvt_last_error());
	assert_int_equal(rc, 0);
	assert_non_null(d);
	return d;
}

/* open_ok with the fault layer, its device saying one request carries
 * max_req bytes in at most max_segs memory segments (0: the real one's) */
static struct disk_tier *open_limits(struct fix *f, uint64_t max_req, unsigned max_segs)
{
	atomic_store(&faults.max_req, max_req);
	atomic_store(&faults.max_segs, max_segs);
	struct disk_tier *d = open_ok(f, &fops);
	atomic_store(&faults.max_req, 0);
	atomic_store(&faults.max_segs, 0);
	return d;
}

static struct disk_tier *open_max_req(struct fix *f, uint64_t max_req)
{
	return open_limits(f, max_req, 0);
}

static long long stat_of(struct disk_tier *d, const char *name)
{
	json_t *o = json_object();
	struct stat_visitor sv = stats_json_visitor(o);
	disk_stats(d, &sv);
	json_t *v = json_object_get(o, name);
	assert_non_null(v);
	long long r = json_is_integer(v) ? json_integer_value(v)
					 : (long long)json_real_value(v);
	json_decref(o);
	return r;
}

static size_t pad_to(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static size_t size_of(uint64_t i)
{
	return 4096 + (size_t)(i * 7919 % 60000);
}

/* Puts block i (content a function of key and size). */
static int put_block(struct disk_tier *d, uint64_t i, size_t len)
{
	char *b = malloc(len + 1);
	fill_block(test_key(i), b + 1, len); /* deliberately unaligned */
	int rc = disk_put(d, test_key(i), b + 1, len);
	free(b);
	return rc;
}

/* 0: block i read back with the right bytes; else the error (never wrong bytes). */
static int get_block(struct disk_tier *d, uint64_t i, size_t len)
{
	void *b = NULL;
	size_t got = 0;

	assert_int_equal(posix_memalign(&b, 4096, len + 8192), 0);
	int rc = disk_get(d, test_key(i), b, len + 8192, &got);
	if (rc == 0) {
		assert_int_equal(got, len);
		assert_true(check_block(test_key(i), b, len));
	} else {
		assert_true(rc == -ENOENT || rc == -EBADMSG || rc == -EIO);
	}
	free(b);
	return rc;
}

/* --- tests ---------------------------------------------------------------------- */

static void put_get_round_trip_many_sizes(void **st)
{
	(void)st;
	struct fix f;
	static const size_t sizes[] = { 1, 100, 4095, 4096, 4097, 8192, 65536,
					65537, MiB, MiB + 123, 3 * MiB };
	fix_init(&f, 64 * MiB, 4 * MiB);
	struct disk_tier *d = open_ok(&f, NULL);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i];
		char *src = malloc(len + 64);
		void *al = NULL;
		char *dst = malloc(len + 64);
		size_t got = 0;

		assert_int_equal(posix_memalign(&al, 4096, len + 4096), 0);
		/* aligned source for even i, unaligned for odd */
		char *s = i % 2 ? src + 3 : al;
		fill_block(test_key(i), s, len);
		assert_int_equal(disk_put(d, test_key(i), s, len), 0);
		assert_int_equal(disk_put(d, test_key(i), s, len), 0); /* no-op */
		assert_int_equal(disk_contains(d, test_key(i), &got), 1);
		assert_int_equal(got, len);
		/* unaligned destination */
		memset(dst, 0, len + 64);
		assert_int_equal(disk_get(d, test_key(i), dst + 5, len, &got), 0);
		assert_int_equal(got, len);
		assert_true(check_block(test_key(i), dst + 5, len));
		/* aligned destination (direct path) */
		memset(al, 0, len + 4096);
		assert_int_equal(disk_get(d, test_key(i), al, len + 4096, &got), 0);
		assert_true(check_block(test_key(i), al, len));
		/* too small */
		if (len > 1) {
			got = 0;
			assert_int_equal(disk_get(d, test_key(i), dst, len - 1, &got), -ENOBUFS);
			assert_int_equal(got, len);
		}
		free(src);
		free(dst);
		free(al);
	}
	assert_int_equal(disk_get(d, test_key(999), logbuf, 10, NULL), -ENOENT);
	assert_int_equal(disk_contains(d, test_key(999), NULL), 0);
	assert_int_equal(stat_of(d, "objects"), 11);
	assert_int_equal(stat_of(d, "puts"), 11);
	assert_true(stat_of(d, "hits") >= 22);
	assert_int_equal(disk_put(d, test_key(5), NULL, 10), -EINVAL);
	assert_int_equal(disk_put(d, test_key(5), logbuf, 0), -EINVAL);
	assert_int_equal(disk_put(d, test_key(77), logbuf, 5 * MiB), -ENOSPC);
	assert_non_null(strstr(kvt_last_error(), "larger than a disk region"));
	/* (the length is refused before the bytes are looked at) */
	assert_int_equal(disk_put(d, test_key(78), logbuf, 256 * MiB + 1), -ENOSPC);
	assert_non_null(strstr(kvt_last_error(), "larger than the 268435456 bytes a disk record holds"));
	disk_close(d);
	fix_done(&f);
}

static void remove_forgets_block(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	struct disk_tier *d = open_ok(&f, NULL);

	assert_int_equal(put_block(d, 1, 5000), 0);
	assert_int_equal(disk_remove(d, test_key(1)), 0);
	assert_int_equal(disk_remove(d, test_key(1)), -ENOENT);
	assert_int_equal(get_block(d, 1, 5000), -ENOENT);
	assert_int_equal(stat_of(d, "objects"), 0);
	assert_int_equal(stat_of(d, "bytes_used"), 0);
	disk_close(d);
	fix_done(&f);
}

static void batch_get_loads_every_block(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 48, LEN = 256 * 1024 };
	fix_init(&f, 64 * MiB, 4 * MiB);
	struct disk_tier *d = open_ok(&f, NULL);
	kvt_op ops[N + 1];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)(N + 1) * LEN), 0);
	for (int i = 0; i < N; i++) {
		ops[i].key = test_key(100 + (uint64_t)i);
		ops[i].buf = bufs + (size_t)i * LEN;
		ops[i].len = LEN - (i % 3) * 1000;
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(ops[i].result, 0);
	memset(bufs, 0, (size_t)(N + 1) * LEN);
	for (int i = 0; i < N; i++)
		ops[i].len = LEN;
	ops[N].key = test_key(5000);
	ops[N].buf = bufs + (size_t)N * LEN;
	ops[N].len = LEN;
	assert_int_equal(disk_get_batch(d, ops, N + 1), -ENOENT);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, LEN - (i % 3) * 1000);
		assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
	}
	assert_int_equal(ops[N].result, -ENOENT);
	free(bufs);
	disk_close(d);
	fix_done(&f);
}

static void reclaim_when_full_gives_misses_not_wrong_bytes(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 4 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);
	const uint64_t n = 400;

	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	assert_true(stat_of(d, "reclaims") > 0);
	int found = 0;
	for (uint64_t i = 0; i < n; i++)
		if (get_block(d, i, size_of(i)) == 0)
			found++;
		else
			assert_true(i < n - 10); /* the newest survive */
	assert_true(found > 10);
	assert_true(found < (int)n);
	/* (reads near the tail reinsert blocks where the log has room) */
	assert_true(stat_of(d, "objects") > 10);
	assert_true(stat_of(d, "bytes_used") <= stat_of(d, "capacity"));
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	disk_close(d);
	fix_done(&f);
}

static void lease_protects_block_from_reclaim(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 4 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);

	assert_int_equal(disk_lease(d, test_key(1), kvt_now_ns() + 60000000000ull), 0);
	assert_int_equal(put_block(d, 1, 9000), 0);
	assert_int_equal(disk_lease(d, test_key(1), kvt_now_ns() + 60000000000ull), 1);
	for (uint64_t i = 10; i < 400; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	assert_true(stat_of(d, "reclaims") > 10);
	assert_int_equal(get_block(d, 1, 9000), 0);
	assert_int_equal(disk_release(d, test_key(1)), 1);
	assert_int_equal(disk_release(d, test_key(1)), 0);
	for (uint64_t i = 400; i < 800; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	assert_int_equal(get_block(d, 1, 9000), -ENOENT);
	disk_close(d);
	fix_done(&f);
}

static void all_regions_leased_refuses_puts(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 2 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);
	uint64_t i = 0;
	int rc;

	while ((rc = put_block(d, i, 60000)) == 0) {
		assert_int_equal(disk_lease(d, test_key(i), kvt_now_ns() + 60000000000ull), 1);
		i++;
		assert_true(i < 1000);
	}
	assert_int_equal(rc, -ENOSPC);
	assert_true(stat_of(d, "refused_puts") >= 1);
	for (uint64_t j = 0; j < i; j++)
		assert_int_equal(get_block(d, j, 60000), 0);
	disk_close(d);
	fix_done(&f);
}

static void hits_near_tail_are_reinserted(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 4 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);

	assert_int_equal(put_block(d, 1, 20000), 0);
	for (uint64_t i = 10; i < 1000; i++) {
		assert_int_equal(put_block(d, i, 20000), 0);
		assert_int_equal(get_block(d, 1, 20000), 0);
	}
	assert_true(stat_of(d, "reclaims") > 20);
	assert_true(stat_of(d, "reinsertions") > 0);
	disk_close(d);
	fix_done(&f);
}

/*
 * Reads never drop a block, once the log has wrapped too: a hit in the
 * oldest region would be moved to the head, but where that needs a region
 * reclaimed (its own, the oldest) it stays where it is. With one block per
 * region and with three, every block read stays stored, read again and
 * after a restart.
 */
static void reads_never_drop_blocks(void **st)
{
	(void)st;
	const size_t lens[2] = { 1044480, 340000 };

	for (int v = 0; v < 2; v++) {
		struct fix f;
		fix_init(&f, 8 * MiB, 1 * MiB);
		struct disk_tier *d = open_ok(&f, NULL);
		uint64_t n = 0;

		while (stat_of(d, "reclaims") < 2)
			assert_int_equal(put_block(d, n++, lens[v]), 0);
		/* the blocks the log holds now: the newest run of them */
		uint64_t first = n;
		while (first > 0 && disk_contains(d, test_key(first - 1), NULL) == 1)
			first--;
		long long objects = stat_of(d, "objects");
		assert_int_equal(objects, (long long)(n - first));
		for (int pass = 0; pass < 2; pass++)
			for (uint64_t i = first; i < n; i++)
				assert_int_equal(get_block(d, i, lens[v]), 0);
		assert_int_equal(stat_of(d, "objects"), objects);
		disk_close(d);
		d = open_ok(&f, NULL);
		for (uint64_t i = first; i < n; i++)
			assert_int_equal(get_block(d, i, lens[v]), 0);
		disk_close(d);
		fix_done(&f);
	}
}

/* A batch whose ops share one buffer, read again and again while the log
 * wraps: aligned (payloads read straight into it, overwriting each other)
 * and unaligned (staged), no intact block is dropped, and blocks moved to
 * the log's head (near its tail) keep their own bytes, after a restart too. */
static void shared_buffer_batches_keep_every_blocks_bytes(void **st)
{
	(void)st;
	enum { N = 4, LEN = 20000 };
	struct fix f;
	fix_init(&f, 4 * MiB, 256 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);
	char *scratch = NULL;
	uint64_t filler = 100;

	assert_int_equal(posix_memalign((void **)&scratch, 4096, LEN + 8192), 0);
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(put_block(d, i, LEN), 0);
	while (stat_of(d, "reinsertions") < N) {
		kvt_op ops[N];

		assert_true(filler < 3000);
		assert_int_equal(put_block(d, filler, LEN), 0);
		for (int i = 0; i < N; i++)
			ops[i] = (kvt_op){ test_key((uint64_t)i), scratch + filler % 2,
					   LEN + 4096, 1 };
		filler++;
		assert_int_equal(disk_get_batch(d, ops, N), 0);
		for (int i = 0; i < N; i++) {
			assert_int_equal(ops[i].result, 0);
			assert_int_equal(ops[i].len, LEN);
		}
	}
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(get_block(d, i, LEN), 0);
	disk_close(d);
	d = open_ok(&f, NULL);
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(get_block(d, i, LEN), 0);
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	disk_close(d);
	free(scratch);
	fix_done(&f);
}

static void clean_restart_keeps_all_blocks(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 32 * MiB, 1 * MiB);
	kvt_set_log(grab_log, NULL, KVT_LOG_DEBUG);
	struct disk_tier *d = open_ok(&f, NULL);

	for (uint64_t i = 0; i < 200; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	assert_int_equal(disk_remove(d, test_key(7)), 0);
	disk_close(d);
	log_clear();
	d = open_ok(&f, NULL);
	assert_true(log_has("from the checkpoint"));
	assert_int_equal(stat_of(d, "objects"), 199);
	for (uint64_t i = 0; i < 200; i++)
		assert_int_equal(get_block(d, i, size_of(i)), i == 7 ? -ENOENT : 0);
	/* writing continues after a restart, and a second restart keeps both */
	for (uint64_t i = 200; i < 250; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	disk_close(d);
	d = open_ok(&f, NULL);
	for (uint64_t i = 0; i < 250; i++)
		assert_int_equal(get_block(d, i, size_of(i)), i == 7 ? -ENOENT : 0);
	disk_close(d);
	kvt_set_log(NULL, NULL, 0);
	fix_done(&f);
}

/* Opens without closing: the checkpoint stays invalid, like after a crash. */
static void crash_restart_scans_regions(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 32 * MiB, 1 * MiB);
	kvt_set_log(grab_log, NULL, KVT_LOG_DEBUG);
	struct disk_tier *d = open_ok(&f, NULL);

	for (uint64_t i = 0; i < 100; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	disk_close(d);
	d = open_ok(&f, NULL); /* uses and invalidates the checkpoint */
	for (uint64_t i = 100; i < 150; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	/* copy the file as it is now: a crash image */
	char img[8400];
	snprintf(img, sizeof(img), "cp %s %s.crash", f.path, f.path);
	assert_int_equal(system(img), 0);
	disk_close(d);
	snprintf(img, sizeof(img), "mv %s.crash %s", f.path, f.path);
	assert_int_equal(system(img), 0);
	log_clear();
	d = open_ok(&f, NULL);
	assert_true(log_has("region scan"));
	for (uint64_t i = 0; i < 150; i++)
		assert_int_equal(get_block(d, i, size_of(i)), 0);
	disk_close(d);
	kvt_set_log(NULL, NULL, 0);
	fix_done(&f);
}

static void kill9_during_writes_never_returns_wrong_bytes(void **st)
{
	(void)st;
	struct fix f;
	int pfd[2];
	fix_init(&f, 16 * MiB, 1 * MiB);
	assert_int_equal(pipe(pfd), 0);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct disk_tier *d = NULL;
		close(pfd[0]);
		if (disk_open_cfg(&f.cfg, NULL, 0, NULL, &d))
			_exit(1);
		for (uint64_t i = 0;; i++) {
			if (put_block(d, i, size_of(i)) != 0)
				_exit(2);
			uint64_t done = i + 1;
			if (write(pfd[1], &done, sizeof(done)) != sizeof(done))
				_exit(3);
		}
	}
	close(pfd[1]);
	uint64_t written = 0, v;
	/* let it wrap the log a few times, then kill it mid-write */
	while (written < 1500 && read(pfd[0], &v, sizeof(v)) == sizeof(v))
		written = v;
	kill(pid, SIGKILL);
	int status = 0;
	waitpid(pid, &status, 0);
	assert_true(WIFSIGNALED(status));
	while (read(pfd[0], &v, sizeof(v)) == sizeof(v))
		written = v;
	close(pfd[0]);
	assert_true(written >= 1500);

	struct disk_tier *d = open_ok(&f, NULL);
	int found = 0;
	for (uint64_t i = 0; i < written + 64; i++)
		if (get_block(d, i, size_of(i)) == 0)
			found++;
	assert_true(found > 50);
	/* the most recent completed puts were durable (O_DIRECT, process crash) */
	assert_int_equal(get_block(d, written - 1, size_of(written - 1)), 0);
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	/* and the tier keeps working */
	assert_int_equal(put_block(d, 1u << 20, 7000), 0);
	assert_int_equal(get_block(d, 1u << 20, 7000), 0);
	disk_close(d);
	fix_done(&f);
}

static void junk_pages(const char *path, uint64_t from, uint64_t to, int n, unsigned seed)
{
	int fd = open(path, O_WRONLY);
	char junk[4096];

	assert_true(fd >= 0);
	srand(seed);
	for (int i = 0; i < n; i++) {
		uint64_t page = from + (uint64_t)rand() % (to - from);
		for (size_t j = 0; j < sizeof(junk); j++)
			junk[j] = (char)rand();
		assert_int_equal(pwrite(fd, junk, sizeof(junk), (off_t)(page * 4096)), 4096);
	}
	fsync(fd);
	close(fd);
}

static void junk_pages_read_as_misses(void **st)
{
	(void)st;
	for (int variant = 0; variant < 3; variant++) {
		struct fix f;
		fix_init(&f, 16 * MiB, 1 * MiB);
		struct disk_tier *d = open_ok(&f, NULL);
		uint64_t n = 180;

		for (uint64_t i = 0; i < n; i++)
			assert_int_equal(put_block(d, i, size_of(i)), 0);
		disk_close(d);
		struct stat sb;
		assert_int_equal(stat(f.path, &sb), 0);
		uint64_t pages = (uint64_t)sb.st_size / 4096;
		/* 0: data pages only (checkpoint valid); 1: also the checkpoint
		 * header (forces a scan); 2: anywhere, superblock included */
		if (variant == 1)
			junk_pages(f.path, 1, 2, 1, 7);
		junk_pages(f.path, variant == 2 ? 0 : 32, pages, 60, 100 + (unsigned)variant);
		if (variant == 2)
			junk_pages(f.path, 0, 1, 1, 9);
		d = open_ok(&f, NULL);
		int ok = 0, bad = 0;
		for (uint64_t i = 0; i < n; i++) {
			int rc = get_block(d, i, size_of(i));
			ok += rc == 0;
			bad += rc == -EBADMSG;
			/* a damaged block is dropped: the next read is a plain miss */
			if (rc == -EBADMSG)
				assert_int_equal(get_block(d, i, size_of(i)), -ENOENT);
		}
		if (variant == 0) {
			assert_true(ok > 50);
			assert_true(bad > 0);
			assert_int_equal(stat_of(d, "checksum_failures"), bad);
		}
		if (variant == 2)
			assert_int_equal(ok, 0); /* superblock gone: empty tier */
		/* still writable and readable */
		assert_int_equal(put_block(d, 9999, 12345), 0);
		assert_int_equal(get_block(d, 9999, 12345), 0);
		disk_close(d);
		fix_done(&f);
	}
}

static void injected_faults_fail_cleanly(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	struct disk_tier *d = open_ok(&f, &fops);

	assert_int_equal(put_block(d, 1, 100000), 0);
	/* EIO on a read: an error, not data; the block stays stored */
	atomic_store(&faults.fail_reads, 1);
	assert_int_equal(get_block(d, 1, 100000), -EIO);
	assert_int_equal(stat_of(d, "io_errors"), 1);
	assert_int_equal(get_block(d, 1, 100000), 0);
	/* EIO on a write: the put fails and the block is not indexed */
	atomic_store(&faults.fail_writes, 1);
	assert_int_equal(put_block(d, 2, 100000), -EIO);
	assert_int_equal(disk_contains(d, test_key(2), NULL), 0);
	assert_int_equal(put_block(d, 2, 100000), 0);
	assert_int_equal(get_block(d, 2, 100000), 0);
	/* short reads are completed by re-reading the rest */
	atomic_store(&faults.short_reads, 6);
	assert_int_equal(get_block(d, 1, 100000), 0);
	assert_int_equal(get_block(d, 2, 100000), 0);
	assert_int_equal(atomic_load(&faults.short_reads), 0);
	/* latency only delays */
	atomic_store(&faults.delay_us, 2000);
	assert_int_equal(get_block(d, 1, 100000), 0);
	atomic_store(&faults.delay_us, 0);
	/* a batch with one failing read: only that op fails */
	kvt_op ops[2];
	char *b = NULL;
	assert_int_equal(posix_memalign((void **)&b, 4096, 2 * 102400), 0);
	for (int i = 0; i < 2; i++) {
		ops[i].key = test_key((uint64_t)i + 1);
		ops[i].buf = b + i * 102400;
		ops[i].len = 102400;
	}
	atomic_store(&faults.fail_reads, 1);
	assert_int_equal(disk_get_batch(d, ops, 2), -EIO);
	assert_true((ops[0].result == -EIO) != (ops[1].result == -EIO));
	for (int i = 0; i < 2; i++)
		if (ops[i].result == 0)
			assert_true(check_block(ops[i].key, ops[i].buf, 100000));
	free(b);
	disk_close(d);
	/* the checkpoint write fails: the next open scans and still finds all */
	d = open_ok(&f, &fops);
	atomic_store(&faults.fail_writes, 100);
	disk_close(d);
	atomic_store(&faults.fail_writes, 0);
	d = open_ok(&f, &fops);
	assert_int_equal(get_block(d, 1, 100000), 0);
	assert_int_equal(get_block(d, 2, 100000), 0);
	disk_close(d);
	fix_done(&f);
}

/* A payload read straight into the caller's buffer that something else
 * overwrote before it was checked is read again into the tier's own memory:
 * the intact block is returned, not dropped as damaged. */
static void overwritten_direct_read_is_read_again(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	/* requests of 16 KiB: the 24 KiB record is read beside its header,
	 * straight into the caller's buffer, not staged */
	struct disk_tier *d = open_max_req(&f, 16384);

	assert_int_equal(put_block(d, 1, 20000), 0);
	atomic_store(&faults.scribble_len, 20480); /* the direct payload read */
	assert_int_equal(get_block(d, 1, 20000), 0);
	assert_int_equal(atomic_load(&faults.scribble_len), 0); /* it happened */
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	assert_int_equal(get_block(d, 1, 20000), 0);
	disk_close(d);
	fix_done(&f);
}

/* Records no longer than one device request but in more pages than it
 * carries segments are read whole, in one request, into the tier's
 * huge-page stages, verified there and copied into the caller's buffer;
 * longer ones go straight into it. A record changed after its read is
 * damaged (it was read into the tier's own memory). While the stages are
 * spent, reads go straight to the caller. */
static void long_payloads_are_staged_whole_and_verified(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 12, LEN = 100000, SHORT = 16384, STRIDE = 50 * 4096 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	/* requests of 1 MiB in 4 segments: every record here is staged */
	struct disk_tier *d = open_limits(&f, MiB, 4);
	kvt_op ops[N];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)N * STRIDE), 0);
	for (int i = 0; i < N; i++) {
		ops[i] = (kvt_op){ test_key(300 + (uint64_t)i), bufs + (size_t)i * STRIDE,
				   i < N - 2 ? LEN : SHORT, 0 };
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	/* stages for two records only, then for all */
	disk_set_stage_pool(d, 2 * pad_to(4096 + LEN, 65536));
	for (int round = 0; round < 2; round++) {
		long long before = stat_of(d, "staged_reads");
		memset(bufs, 0, (size_t)N * STRIDE);
		for (int i = 0; i < N; i++)
			ops[i].len = STRIDE;
		assert_int_equal(disk_get_batch(d, ops, N), 0);
		for (int i = 0; i < N; i++) {
			assert_int_equal(ops[i].result, 0);
			assert_int_equal(ops[i].len, i < N - 2 ? LEN : SHORT);
			assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
		}
		/* two, then all */
		assert_int_equal(stat_of(d, "staged_reads") - before, round ? N : 2);
		disk_set_stage_pool(d, 128 * MiB);
	}

	/* a record that changes after its read into a stage is damaged */
	atomic_store(&faults.scribble_len, (int)(4096 + pad_to(LEN, 4096)));
	assert_int_equal(get_block(d, 300, LEN), -EBADMSG);
	assert_int_equal(atomic_load(&faults.scribble_len), 0);
	assert_int_equal(stat_of(d, "checksum_failures"), 1);
	assert_int_equal(get_block(d, 300, LEN), -ENOENT); /* dropped */
	disk_close(d);

	/* requests of 64 KiB: a long record is split wherever it is read, so
	 * it goes straight into the caller's buffer; the short ones are staged */
	d = open_limits(&f, 64 * 1024, 4);
	for (int i = 0; i < N; i++)
		ops[i].len = STRIDE;
	assert_int_equal(disk_get_batch(d, ops + 1, N - 1), 0);
	for (int i = 1; i < N; i++)
		assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
	assert_int_equal(stat_of(d, "staged_reads"), 2);
	free(bufs);
	disk_close(d);
	fix_done(&f);
}

/* With disk.stage_reads false, a record that fits one request, its
 * payload's pages and its header's no more than the device's segments, is
 * read by one vectored request:
 * the header into the tier's memory, the payload straight into the
 * caller's page-aligned buffer; longer ones in more pages are staged. A
 * payload overwritten in the caller's buffer after its read is read again
 * into the tier's memory, not called damaged; a record damaged on disk is
 * refused (-EBADMSG) and dropped. */
static void fitting_records_are_one_vectored_read_uncopied(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 8, LEN = 100000, LONG = 300000, STRIDE = 80 * 4096 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	f.cfg.stage_reads = KVT_STAGE_OFF;
	/* requests of 1 MiB in 64 segments: 26 fit, 75 do not */
	struct disk_tier *d = open_limits(&f, MiB, 64);
	kvt_op ops[N];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)N * STRIDE), 0);
	for (int i = 0; i < N; i++) {
		ops[i] = (kvt_op){ test_key(700 + (uint64_t)i), bufs + (size_t)i * STRIDE,
				   i < N - 2 ? LEN : LONG, 0 };
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	memset(bufs, 0, (size_t)N * STRIDE);
	for (int i = 0; i < N; i++)
		ops[i].len = STRIDE;
	int r0 = atomic_load(&faults.nread_log);
	assert_int_equal(disk_get_batch(d, ops, N), 0);
	assert_int_equal(atomic_load(&faults.nread_log) - r0, N); /* one read each */
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, i < N - 2 ? LEN : LONG);
		assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
	}
	assert_int_equal(stat_of(d, "vectored_reads"), N - 2);
	assert_int_equal(stat_of(d, "staged_reads"), 2);
	assert_int_equal(stat_of(d, "stage_reads"), 0);

	/* the caller's copy overwritten right after the read: read again */
	atomic_store(&faults.scribble_len, (int)(4096 + pad_to(LEN, 4096)));
	assert_int_equal(get_block(d, 700, LEN), 0);
	assert_int_equal(atomic_load(&faults.scribble_len), 0); /* it happened */
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	disk_close(d);

	/* a payload damaged on disk: one byte of the record's last page */
	char *file = malloc(32 * MiB), *want = malloc(LEN);
	int fd = open(f.path, O_RDWR);
	assert_true(file && want && fd >= 0);
	ssize_t got = pread(fd, file, 32 * MiB, 0);
	assert_true(got > 0);
	fill_block(test_key(701), want, LEN);
	char *at = memmem(file, (size_t)got, want, LEN);
	assert_non_null(at);
	off_t bad = (off_t)(at - file) + LEN - 1;
	char c = (char)(at[LEN - 1] ^ 0x5a);
	assert_int_equal(pwrite(fd, &c, 1, bad), 1);
	fsync(fd);
	close(fd);
	free(file);
	free(want);
	d = open_limits(&f, MiB, 64);
	assert_int_equal(get_block(d, 701, LEN), -EBADMSG);
	assert_int_equal(stat_of(d, "checksum_failures"), 1);
	assert_int_equal(get_block(d, 701, LEN), -ENOENT); /* dropped */
	assert_int_equal(get_block(d, 702, LEN), 0);
	free(bufs);
	disk_close(d);
	fix_done(&f);
}

/* Reads n records of LEN bytes under keys 720.. into page-aligned buffers
 * of stride bytes (each alone in the batch), checking every byte; returns
 * how many went by a vectored read. */
static long long read_fitting(struct disk_tier *d, kvt_op *ops, char *bufs, int n,
			      size_t len, size_t stride)
{
	long long v0 = stat_of(d, "vectored_reads");

	memset(bufs, 0, (size_t)n * stride);
	for (int i = 0; i < n; i++)
		ops[i] = (kvt_op){ test_key(720 + (uint64_t)i), bufs + (size_t)i * stride,
				   stride, 0 };
	assert_int_equal(disk_get_batch(d, ops, n), 0);
	for (int i = 0; i < n; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].len, len);
		assert_true(check_block(ops[i].key, ops[i].buf, len));
	}
	return stat_of(d, "vectored_reads") - v0;
}

/* disk.stage_reads: true reads records that fit one request into the
 * huge-page stages first (vectored reads only once those are spent);
 * "auto" does so on a device that reports its segments when the stages
 * are huge pages, and never on one that does not say (tmpfs); false reads
 * them vectored. Every byte checked each way. */
static void stage_reads_orders_stages_and_vectored_reads(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 8, LEN = 100000, STRIDE = 32 * 4096 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	f.cfg.stage_reads = KVT_STAGE_ON;
	struct disk_tier *d = open_limits(&f, MiB, 64);
	kvt_op ops[N];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)N * STRIDE), 0);
	for (int i = 0; i < N; i++) {
		ops[i] = (kvt_op){ test_key(720 + (uint64_t)i), bufs + (size_t)i * STRIDE, LEN, 0 };
		fill_block(ops[i].key, ops[i].buf, LEN);
	}
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	assert_int_equal(stat_of(d, "stage_reads"), 1);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), 0);
	assert_int_equal(stat_of(d, "staged_reads"), N);
	/* no stage left: vectored */
	disk_set_stage_pool(d, 0);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), N);
	assert_int_equal(stat_of(d, "staged_reads"), N);
	disk_close(d);

	/* "auto", a device that reports its segments: stages where they are
	 * huge pages */
	int huge = disk_hstage_huge();
	f.cfg.stage_reads = KVT_STAGE_AUTO;
	d = open_limits(&f, MiB, 64);
	assert_int_equal(stat_of(d, "stage_reads"), huge);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), huge ? 0 : N);
	disk_close(d);
	/* "auto", a device that does not say: vectored */
	d = open_limits(&f, MiB, SEGS_UNKNOWN);
	assert_int_equal(stat_of(d, "stage_reads"), 0);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), N);
	disk_close(d);
	/* false */
	f.cfg.stage_reads = KVT_STAGE_OFF;
	d = open_limits(&f, MiB, 64);
	assert_int_equal(stat_of(d, "stage_reads"), 0);
	assert_int_equal(read_fitting(d, ops, bufs, N, LEN, STRIDE), N);
	assert_int_equal(stat_of(d, "staged_reads"), 0);
	free(bufs);
	disk_close(d);
	fix_done(&f);
}

/* A put batch writes each record no longer than one device request whole,
 * header and payload from one huge-page stage: one write per record,
 * whether the caller's buffer is whole pages or not. Longer records go as
 * before (header and page-aligned payload: two writes). Every byte reads
 * back after a reopen. */
static void put_batches_write_one_request_per_record(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 16, WHOLE = 131072, PART = 100000 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	kvt_op ops[2 * N];
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, 2 * N * (size_t)WHOLE), 0);
	for (int i = 0; i < 2 * N; i++) {
		ops[i] = (kvt_op){ test_key(500 + (uint64_t)i), bufs + (size_t)i * WHOLE,
				   i % 2 ? PART : WHOLE, 0 };
		fill_block(ops[i].key, ops[i].buf, ops[i].len);
	}
	/* requests of 1 MiB: every record goes whole, one write each */
	struct disk_tier *d = open_max_req(&f, MiB);
	int w0 = atomic_load(&faults.writes);
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	assert_int_equal(atomic_load(&faults.writes) - w0, N);
	assert_int_equal(stat_of(d, "staged_writes"), N);
	disk_close(d);

	/* requests of 64 KiB: a record of whole pages goes as header and
	 * payload (two writes), one of part of a page staged in plain
	 * memory (one) */
	d = open_max_req(&f, 64 * 1024);
	w0 = atomic_load(&faults.writes);
	assert_int_equal(disk_put_batch(d, ops + N, N), 0);
	assert_int_equal(atomic_load(&faults.writes) - w0, N / 2 * 2 + N / 2);
	assert_int_equal(stat_of(d, "staged_writes"), 0);
	disk_close(d);

	d = open_ok(&f, NULL);
	memset(bufs, 0, 2 * N * (size_t)WHOLE);
	for (int i = 0; i < 2 * N; i++)
		ops[i].len = WHOLE;
	assert_int_equal(disk_get_batch(d, ops, 2 * N), 0);
	for (int i = 0; i < 2 * N; i++) {
		assert_int_equal(ops[i].len, i % 2 ? PART : WHOLE);
		assert_true(check_block(ops[i].key, ops[i].buf, ops[i].len));
	}
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* ops[0..n) for blocks first.. of len bytes each, in one page-aligned
 * allocation (returned, for free) filled by fill_block. */
static char *filled_ops(kvt_op *ops, int n, uint64_t first, size_t len)
{
	char *bufs = NULL;

	assert_int_equal(posix_memalign((void **)&bufs, 4096, (size_t)n * len), 0);
	for (int i = 0; i < n; i++) {
		ops[i] = (kvt_op){ test_key(first + (uint64_t)i), bufs + (size_t)i * len, len, 0 };
		fill_block(ops[i].key, ops[i].buf, len);
	}
	return bufs;
}

struct beside_probe {
	struct disk_tier *d;
	kvt_key key;              /* the batch's last block */
	int calls;
	int writes_out;           /* writes submitted when it ran */
	int stored;               /* key was stored when it ran */
};

static void beside_probe_run(void *arg)
{
	struct beside_probe *p = arg;

	p->calls++;
	p->writes_out = atomic_load(&faults.writes);
	p->stored = disk_contains(p->d, p->key, NULL);
}

/* disk_put_batch_beside runs its work exactly once: while the batch's
 * writes are out (all of them submitted, as the queue takes them all, and
 * the batch not stored yet); after a batch that wrote nothing; for an
 * empty batch. */
static void put_batch_runs_work_beside_its_writes(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 8, LEN = 65536 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, MiB);
	kvt_op ops[N];
	char *bufs = filled_ops(ops, N, 900, LEN);
	struct beside_probe p = { d, ops[N - 1].key, 0, 0, 0 };
	int w0 = atomic_load(&faults.writes);
	assert_int_equal(disk_put_batch_beside(d, ops, N, beside_probe_run, &p), 0);
	assert_int_equal(p.calls, 1);
	assert_int_equal(p.writes_out - w0, N);
	assert_int_equal(p.stored, 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(get_block(d, 900 + (uint64_t)i, LEN), 0);

	/* nothing to write: blocks stored already, bad ops, no ops */
	p.calls = 0;
	assert_int_equal(disk_put_batch_beside(d, ops, N, beside_probe_run, &p), 0);
	assert_int_equal(p.calls, 1);
	ops[0].len = 0;
	p.calls = 0;
	assert_int_equal(disk_put_batch_beside(d, ops, 1, beside_probe_run, &p), -EINVAL);
	assert_int_equal(p.calls, 1);
	p.calls = 0;
	assert_int_equal(disk_put_batch_beside(d, ops, 0, beside_probe_run, &p), 0);
	assert_int_equal(p.calls, 1);
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

struct each_probe {
	struct disk_tier *d;
	kvt_op *ops;
	int calls[16];
	int result[16];           /* ops[i].result when told */
	int stored[16];           /* ops[i] was found stored when told */
	int writes_out[16];       /* writes submitted when told */
};

static void each_probe_fn(void *arg, size_t i)
{
	struct each_probe *p = arg;

	assert_true(i < 16);
	p->calls[i]++;
	p->result[i] = p->ops[i].result;
	p->stored[i] = disk_contains(p->d, p->ops[i].key, NULL);
	p->writes_out[i] = atomic_load(&faults.writes);
}

/* disk_put_batch_each tells of every op exactly once, its result final
 * then: a bad op and one stored already before any write, each written
 * block once it is stored (found), a failed write with its error; a device
 * out of space says so. Every block written reads back equal after a
 * reopen. */
static void put_batch_each_tells_each_block_once(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 10, LEN = 65536 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, MiB);
	kvt_op ops[N];
	char *bufs = filled_ops(ops, N, 1300, LEN);

	assert_int_equal(disk_put(d, ops[1].key, ops[1].buf, LEN), 0);
	ops[2].len = 0;
	atomic_store(&faults.fail_writes, 1); /* the first record written */
	struct each_probe p = { .d = d, .ops = ops };
	int w0 = atomic_load(&faults.writes);
	int rc = disk_put_batch_each(d, ops, N, each_probe_fn, &p);
	assert_int_equal(rc, -EIO);
	assert_non_null(strstr(kvt_last_error(), "Input/output error"));
	for (int i = 0; i < N; i++) {
		assert_int_equal(p.calls[i], 1);
		assert_int_equal(p.result[i], ops[i].result);
	}
	assert_int_equal(ops[0].result, -EIO);
	assert_int_equal(p.stored[0], 0);
	assert_int_equal(ops[1].result, 0);         /* stored before */
	assert_int_equal(p.writes_out[1], w0);      /* told before any write */
	assert_int_equal(ops[2].result, -EINVAL);
	assert_int_equal(p.writes_out[2], w0);
	for (int i = 3; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(p.stored[i], 1);
	}
	/* a device out of space: the write fails, and the text says why */
	ops[2].len = LEN;
	atomic_store(&faults.fail_errno, ENOSPC);
	atomic_store(&faults.fail_writes, 1);
	memset(&p, 0, sizeof(p));
	p.d = d;
	p.ops = ops;
	assert_int_equal(disk_put_batch_each(d, ops, 3, each_probe_fn, &p), -EIO);
	atomic_store(&faults.fail_errno, 0);
	assert_non_null(strstr(kvt_last_error(), "No space left on device"));
	assert_int_equal(p.calls[0] + p.calls[1] + p.calls[2], 3);
	assert_int_equal(ops[1].result, 0);
	assert_int_equal(disk_contains(d, ops[0].key, NULL) + disk_contains(d, ops[2].key, NULL), 1);
	/* no callback: disk_put_batch */
	assert_int_equal(disk_put_batch_each(d, ops, N, NULL, NULL), 0);
	disk_close(d);

	d = open_ok(&f, NULL);
	for (int i = 0; i < N; i++)
		assert_int_equal(get_block(d, 1300 + (uint64_t)i, LEN), 0);
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* disk_put_batch_sums writes the checksum it is given where it is given
 * one: a block whose given sum is its bytes' reads back equal after a
 * reopen; one given a sum of other bytes reads back as damaged, never as
 * good; one given none is summed from its bytes. Staged (huge-page) and
 * header-and-payload records alike. */
static void put_batch_sums_write_the_given_checksum(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 4 };
	const size_t lens[2] = { 65536, 196608 };
	fix_init(&f, 32 * MiB, 4 * MiB);

	for (int c = 0; c < 2; c++) {
		/* requests of 1 MiB: staged; of 64 KiB: header and payload */
		struct disk_tier *d = open_max_req(&f, c ? 64 * 1024 : MiB);
		kvt_op ops[N];
		uint64_t first = 1400 + (uint64_t)c * 10;
		char *bufs = filled_ops(ops, N, first, lens[c]);
		uint64_t sums[N];
		uint8_t has[N] = { 1, 1, 0, 1 };
		for (int i = 0; i < N; i++)
			sums[i] = kvt_checksum(ops[i].buf, lens[c]);
		sums[1] ^= 1; /* not its bytes' */
		assert_int_equal(disk_put_batch_sums(d, ops, N, sums, has, N, NULL, NULL), 0);
		disk_close(d);
		d = open_ok(&f, NULL);
		assert_int_equal(get_block(d, first + 0, lens[c]), 0);
		assert_int_equal(get_block(d, first + 1, lens[c]), -EBADMSG);
		assert_int_equal(get_block(d, first + 2, lens[c]), 0);
		assert_int_equal(get_block(d, first + 3, lens[c]), 0);
		disk_close(d);
		free(bufs);
	}
	fix_done(&f);
}

struct staged_loader {
	struct disk_tier *d;
	int first, rounds, bad;
};

static void *staged_loader_main(void *a)
{
	struct staged_loader *l = a;
	enum { N = 8, LEN = 100000 };
	kvt_op ops[N];
	char *bufs = NULL;

	if (posix_memalign((void **)&bufs, 4096, N * (size_t)LEN))
		return NULL;
	for (int r = 0; r < l->rounds; r++) {
		for (int i = 0; i < N; i++)
			ops[i] = (kvt_op){ test_key((uint64_t)(l->first + i)),
					   bufs + (size_t)i * LEN, LEN, 0 };
		l->bad += disk_get_batch(l->d, ops, N) != 0;
		for (int i = 0; i < N; i++)
			l->bad += !check_block(ops[i].key, ops[i].buf, LEN);
	}
	free(bufs);
	return NULL;
}

/* Staged records of a batch are verified and copied out beside the reads
 * (by the tier's verifier thread, or the loader where it falls behind):
 * a record damaged after its read fails alone with -EBADMSG and is
 * dropped, the batch's others load whole; batches of four threads at
 * once, sharing the verifier, each get their own bytes. */
static void staged_batches_are_verified_beside_their_reads(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 32, LEN = 100000 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, MiB);
	kvt_op ops[N];
	char *bufs = filled_ops(ops, N, 700, LEN);
	assert_int_equal(disk_put_batch(d, ops, N), 0);

	/* one record, the first read of the whole-record length to complete,
	 * changes after its read */
	memset(bufs, 0, N * (size_t)LEN);
	atomic_store(&faults.scribble_len, (int)(4096 + pad_to(LEN, 4096)));
	assert_int_equal(disk_get_batch(d, ops, N), -EBADMSG);
	assert_int_equal(atomic_load(&faults.scribble_len), 0);
	int bad = -1;
	for (int i = 0; i < N; i++) {
		if (ops[i].result == -EBADMSG) {
			assert_int_equal(bad, -1);
			bad = i;
			continue;
		}
		assert_int_equal(ops[i].result, 0);
		assert_true(check_block(ops[i].key, ops[i].buf, LEN));
	}
	assert_true(bad >= 0);
	assert_int_equal(stat_of(d, "checksum_failures"), 1);
	assert_int_equal(get_block(d, 700 + (uint64_t)bad, LEN), -ENOENT);
	assert_int_equal(stat_of(d, "staged_reads"), N);

	/* the three runs of 8 keys without the dropped one */
	int runs[3], k = 0;
	for (int g = 0; g < 4; g++)
		if (bad / 8 != g)
			runs[k++] = 700 + 8 * g;
	struct staged_loader l[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		l[i] = (struct staged_loader){ d, runs[i % 3], 20, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, staged_loader_main, &l[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(l[i].bad, 0);
	}
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* A batch keeps at most queue_depth reads out, and where its records
 * average 1 MiB or more, its last queue_depth / 4 records go out once
 * every other read is complete (so that a device which completes its
 * queue together leaves only those to be checked after its last read): 8
 * here, so the last two; every block loads whole. A batch of no more than
 * twice that many is not split. */
static void batch_holds_back_its_last_records(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 16, LEN = 1 << 20 };
	kvt_op ops[N];

	fix_init(&f, 64 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, 2 * MiB);
	char *bufs = filled_ops(ops, N, 1200, LEN);
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	memset(bufs, 0, N * (size_t)LEN);
	atomic_store(&faults.nread_log, 0);
	assert_int_equal(disk_get_batch(d, ops, N), 0);
	assert_int_equal(atomic_load(&faults.nread_log), N);
	for (int i = 0; i < N; i++) {
		assert_true(check_block(ops[i].key, ops[i].buf, LEN));
		assert_true(faults.read_log[i] < 8);
	}
	assert_int_equal(faults.read_log[N - 2], 0);
	int overlapped = 0;
	for (int i = 0; i < N - 2; i++)
		overlapped |= faults.read_log[i] > 0;
	assert_true(overlapped);

	memset(bufs, 0, N * (size_t)LEN);
	atomic_store(&faults.nread_log, 0);
	assert_int_equal(disk_get_batch(d, ops, 4), 0);
	assert_int_equal(atomic_load(&faults.nread_log), 4);
	for (int i = 0; i < 4; i++) {
		assert_true(check_block(ops[i].key, ops[i].buf, LEN));
		assert_int_equal(faults.read_log[i], i);
	}
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

/* What the each hook of disk_get_batch_each saw: calls per op, and hooks
 * whose bytes, length or sum were wrong. Hooks run on several threads. */
struct verified_probe {
	const kvt_op *ops;
	size_t len;
	_Atomic int calls[32];
	uint64_t sum[32];         /* the sum each op's hook was given */
	_Atomic int wrong;
};

static void verified_probe_run(void *arg, size_t i, const void *data, size_t len,
			       uint64_t sum)
{
	struct verified_probe *p = arg;

	atomic_fetch_add(&p->calls[i], 1);
	p->sum[i] = sum;
	if (len != p->len || kvt_checksum(data, len) != sum ||
	    !check_block(p->ops[i].key, data, len))
		atomic_fetch_add(&p->wrong, 1);
}

/* Checks a batch's hooks: once for each op that succeeded (with its own
 * bytes and the sum it reported), never for one that failed. */
static void verified_probe_check(struct verified_probe *p, const kvt_op *ops, int n,
			     const uint64_t *sums)
{
	assert_int_equal(atomic_load(&p->wrong), 0);
	for (int i = 0; i < n; i++) {
		assert_int_equal(atomic_load(&p->calls[i]), ops[i].result == 0);
		if (ops[i].result == 0)
			assert_int_equal(sums[i], p->sum[i]);
		atomic_store(&p->calls[i], 0);
	}
}

/* disk_get_batch_each runs its hook once for each block that loads, with
 * the verified bytes, as the blocks are verified (on the verifier threads
 * or the loading thread): never for a block damaged after its read (the
 * batch reports -EBADMSG for it alone and no wrong bytes), once for a
 * direct read that something overwrote and that was read again, and with
 * each key's own bytes where the ops share one buffer. */
static void each_hook_runs_once_per_verified_block(void **st)
{
	(void)st;
	struct fix f;
	enum { N = 32, LEN = 100000 };
	kvt_op ops[N];
	uint64_t sums[N];
	struct verified_probe p = { .ops = ops, .len = LEN };

	/* staged whole: one request carries a record; four verifiers */
	fix_init(&f, 32 * MiB, 4 * MiB);
	struct disk_tier *d = open_max_req(&f, MiB);
	disk_set_verifiers(d, 4);
	char *bufs = filled_ops(ops, N, 900, LEN);
	assert_int_equal(disk_put_batch(d, ops, N), 0);
	memset(bufs, 0, N * (size_t)LEN);
	atomic_store(&faults.scribble_len, (int)(4096 + pad_to(LEN, 4096)));
	assert_int_equal(disk_get_batch_each(d, ops, N, sums, verified_probe_run, &p), -EBADMSG);
	assert_int_equal(atomic_load(&faults.scribble_len), 0);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		bad += ops[i].result == -EBADMSG;
		if (ops[i].result == 0)
			assert_true(check_block(ops[i].key, ops[i].buf, LEN));
		else
			assert_int_equal(ops[i].result, -EBADMSG);
	}
	assert_int_equal(bad, 1);
	verified_probe_check(&p, ops, N, sums);

	/* a batch of one (verified inline), then four ops sharing a buffer
	 * (staged and copied in order): each hook sees its key's bytes */
	int one = ops[0].result == 0 ? 0 : 1;
	kvt_op single = ops[one];
	p.ops = &single;
	assert_int_equal(disk_get_batch_each(d, &single, 1, sums, verified_probe_run, &p), 0);
	verified_probe_check(&p, &single, 1, sums);
	kvt_op shared[4];
	for (int i = 0; i < 4; i++)
		shared[i] = (kvt_op){ ops[N - 4 + i].key, bufs, LEN, 0 };
	p.ops = shared;
	assert_int_equal(disk_get_batch_each(d, shared, 4, sums, verified_probe_run, &p), 0);
	verified_probe_check(&p, shared, 4, sums);
	disk_close(d);
	free(bufs);
	fix_done(&f);

	/* straight into the caller's buffers (records longer than a request,
	 * whole pages); one payload overwritten after its read is read again:
	 * one hook */
	enum { LEN2 = 25 * 4096 };
	fix_init(&f, 32 * MiB, 4 * MiB);
	d = open_max_req(&f, 16384);
	bufs = filled_ops(ops, 8, 950, LEN2);
	assert_int_equal(disk_put_batch(d, ops, 8), 0);
	memset(bufs, 0, 8 * (size_t)LEN2);
	p.ops = ops;
	p.len = LEN2;
	atomic_store(&faults.scribble_len, LEN2);
	assert_int_equal(disk_get_batch_each(d, ops, 8, sums, verified_probe_run, &p), 0);
	assert_int_equal(atomic_load(&faults.scribble_len), 0);
	for (int i = 0; i < 8; i++)
		assert_true(check_block(ops[i].key, ops[i].buf, LEN2));
	verified_probe_check(&p, ops, 8, sums);
	assert_int_equal(stat_of(d, "checksum_failures"), 0);
	disk_close(d);
	free(bufs);
	fix_done(&f);
}

struct held_get {
	struct disk_tier *d;
	kvt_op *ops;
	size_t n;
	int rc;
};

static void *held_get_main(void *a)
{
	struct held_get *h = a;

	h->rc = disk_get_batch(h->d, h->ops, h->n);
	return NULL;
}

/* A caller range (kvt_mem_register) mapped as fixed buffers: loads into it
 * move as fixed I/O with the right bytes, and while they are in flight the
 * range is held, so deregistering it is refused with -EBUSY. */
static void caller_range_is_held_while_its_io_runs(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	struct disk_tier *d = open_ok(&f, &fops);
	struct memreg m;
	char *pool = NULL;
	const size_t blk = 64 * KiB, n = 4;
	kvt_op ops[4];

	memreg_init(&m);
	disk_set_memreg(d, &m);
	assert_int_equal(posix_memalign((void **)&pool, 4096, n * blk), 0);
	pthread_mutex_lock(&m.lock);
	int i = memreg_add(&m, pool, n * blk, 0, NULL, 0);
	assert_true(i >= 0);
	int mapped = disk_mem_map(d, &m.e[i], 1) == 0;
	pthread_mutex_unlock(&m.lock);
	for (size_t k = 0; k < n; k++) {
		assert_int_equal(put_block(d, k, blk), 0);
		ops[k] = (kvt_op){ .key = test_key(k), .buf = pool + k * blk, .len = blk };
	}
	memset(pool, 0, n * blk);
	atomic_store(&faults.delay_us, 100000);
	struct held_get h = { .d = d, .ops = ops, .n = n };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, held_get_main, &h), 0);
	unsigned holds = 0;
	for (int w = 0; w < 10000 && !holds; w++) {
		pthread_mutex_lock(&m.lock);
		holds = m.e[i].holds;
		pthread_mutex_unlock(&m.lock);
		if (!holds)
			usleep(1000);
	}
	assert_true(holds > 0);
	pthread_mutex_lock(&m.lock);
	assert_int_equal(memreg_can_del(&m, i), -EBUSY);
	pthread_mutex_unlock(&m.lock);
	assert_int_equal(pthread_join(t, NULL), 0);
	atomic_store(&faults.delay_us, 0);
	assert_int_equal(h.rc, 0);
	for (size_t k = 0; k < n; k++)
		assert_true(check_block(test_key(k), pool + k * blk, blk));
	if (mapped)
		assert_int_equal(stat_of(d, "mem_fixed_ios"), n);
	else
		assert_int_equal(stat_of(d, "mem_plain_ios"), n);
	pthread_mutex_lock(&m.lock);
	assert_int_equal(m.e[i].holds, 0);
	assert_int_equal(memreg_can_del(&m, i), 0);
	disk_mem_map(d, &m.e[i], 0);
	memreg_del(&m, i);
	pthread_mutex_unlock(&m.lock);
	disk_close(d);
	memreg_destroy(&m);
	free(pool);
	fix_done(&f);
}

/* A queue that fails in the middle of a batch (its ios drained by dev_run)
 * is closed and replaced, never handed to the next batch. */
static void failed_queue_is_replaced_not_reused(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	struct disk_tier *d = open_ok(&f, &fops);

	for (uint64_t i = 0; i < 8; i++)
		assert_int_equal(put_block(d, i, 200000), 0);
	atomic_store(&faults.broken_used, 0);
	atomic_store(&faults.closes, 0);
	atomic_store(&faults.break_reaps, 1);
	void *b = NULL;
	kvt_op ops[8];
	assert_int_equal(posix_memalign(&b, 4096, 8 * 200704), 0);
	for (int i = 0; i < 8; i++)
		ops[i] = (kvt_op){ test_key((uint64_t)i), (char *)b + (size_t)i * 200704,
				   200704, 1 };
	assert_int_equal(disk_get_batch(d, ops, 8), -EIO);
	assert_int_equal(stat_of(d, "queue_failures"), 1);
	assert_int_equal(atomic_load(&faults.closes), 1);
	assert_int_equal(stat_of(d, "inflight"), 0);
	for (int r = 0; r < 20; r++)
		for (uint64_t i = 0; i < 8; i++)
			assert_int_equal(get_block(d, i, 200000), 0);
	assert_int_equal(put_block(d, 100, 5000), 0);
	assert_int_equal(atomic_load(&faults.broken_used), 0);
	free(b);
	disk_close(d);
	fix_done(&f);
}

static void full_device_is_refused(void **st)
{
	(void)st;
	struct fix f;
	struct disk_tier *d = NULL;
	fix_init(&f, 32ull << 40, 64 * MiB); /* 32 TiB: more than the disk has */
	assert_int_equal(disk_open_cfg(&f.cfg, NULL, 0, NULL, &d), -ENOSPC);
	assert_null(d);
	assert_non_null(strstr(kvt_last_error(), "no space"));
	assert_int_equal(access(f.path, F_OK), -1); /* nothing left behind */
	/* too small for two regions */
	f.cfg.disk_capacity = 1 * MiB;
	f.cfg.region_size = 1 * MiB;
	assert_int_equal(disk_open_cfg(&f.cfg, NULL, 0, NULL, &d), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "disk.capacity"));
	fix_done(&f);
}

static void bad_config_is_refused(void **st)
{
	(void)st;
	struct fix f;
	struct disk_tier *d = NULL;
	char missing[4400];
	fix_init(&f, 16 * MiB, 1 * MiB);

	snprintf(missing, sizeof(missing), "%s/no/such/dir/file", f.dir);
	f.paths[0] = missing;
	assert_int_equal(disk_open_cfg(&f.cfg, NULL, 0, NULL, &d), -ENOENT);
	assert_non_null(strstr(kvt_last_error(), "directory does not exist"));
	f.paths[0] = f.path;

	f.cfg.region_size = 1 * MiB + 1;
	assert_int_equal(disk_open_cfg(&f.cfg, NULL, 0, NULL, &d), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "disk.region_size"));
	f.cfg.region_size = 1 * MiB;
	f.cfg.queue_depth = 0;
	assert_int_equal(disk_open_cfg(&f.cfg, NULL, 0, NULL, &d), -EINVAL);
	assert_non_null(strstr(kvt_last_error(), "disk.queue_depth"));
	f.cfg.queue_depth = 8;
	f.cfg.ndisk = 0;
	assert_int_equal(disk_open_cfg(&f.cfg, NULL, 0, NULL, &d), -EINVAL);
	f.cfg.ndisk = 1;
	assert_int_equal(disk_open(NULL, NULL, 0, NULL, &d), -EINVAL);

	/* tmpfs refused O_DIRECT before Linux 6.6; where it still does, so must we */
	char shm[64];
	snprintf(shm, sizeof(shm), "/dev/shm/kvt-disk-test-%d", (int)getpid());
	int probe = open(shm, O_RDWR | O_CREAT | O_DIRECT, 0600);
	int no_direct = probe < 0 && errno == EINVAL;
	if (probe >= 0)
		close(probe);
	unlink(shm);
	if (!no_direct) {
		fprintf(stderr, "note: /dev/shm supports O_DIRECT here; "
			"the no-O_DIRECT case is not exercised\n");
	} else {
		f.paths[0] = shm;
		assert_int_equal(disk_open_cfg(&f.cfg, NULL, 0, NULL, &d), -EINVAL);
		assert_non_null(strstr(kvt_last_error(), "O_DIRECT"));
		assert_int_equal(access(shm, F_OK), -1);
		f.paths[0] = f.path;
	}
	assert_null(d);
	fix_done(&f);
}

static void write_sb_field(const char *path, size_t off, uint32_t v)
{
	int fd = open(path, O_RDWR);
	unsigned char sb[4096];

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, sb, sizeof(sb), 0), 4096);
	memcpy(sb + off, &v, 4);
	uint64_t sum = XXH3_64bits(sb, 96); /* the checksum covers bytes 0..95 */
	memcpy(sb + 96, &sum, 8);
	assert_int_equal(pwrite(fd, sb, sizeof(sb), 0), 4096);
	close(fd);
}

static void foreign_superblock_starts_empty(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	kvt_set_log(grab_log, NULL, KVT_LOG_DEBUG);
	struct disk_tier *d = open_ok(&f, NULL);

	for (uint64_t i = 0; i < 20; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	disk_close(d);
	/* another region size */
	log_clear();
	f.cfg.region_size = 2 * MiB;
	d = open_ok(&f, NULL);
	assert_true(log_has("another geometry"));
	assert_int_equal(stat_of(d, "objects"), 0);
	for (uint64_t i = 0; i < 20; i++)
		assert_int_equal(get_block(d, i, size_of(i)), -ENOENT);
	for (uint64_t i = 0; i < 20; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	disk_close(d);
	/* another format version (checksum still right) */
	write_sb_field(f.path, 8, 99);
	log_clear();
	d = open_ok(&f, NULL);
	assert_true(log_has("another on-disk format version"));
	assert_int_equal(stat_of(d, "objects"), 0);
	disk_close(d);
	/* and no stale record of the old instance is picked up by a scan */
	d = open_ok(&f, NULL);
	assert_int_equal(stat_of(d, "objects"), 0);
	disk_close(d);
	kvt_set_log(NULL, NULL, 0);
	fix_done(&f);
}

static void striped_devices_round_trip_and_restart(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 32 * MiB, 1 * MiB);
	f.cfg.ndisk = 2;
	struct disk_tier *d = open_ok(&f, NULL);

	for (uint64_t i = 0; i < 150; i++)
		assert_int_equal(put_block(d, i, size_of(i)), 0);
	assert_int_equal(stat_of(d, "devices"), 2);
	disk_close(d);
	struct stat a, b;
	assert_int_equal(stat(f.path, &a), 0);
	assert_int_equal(stat(f.path2, &b), 0);
	assert_int_equal(a.st_size, 16 * MiB);
	assert_int_equal(b.st_size, 16 * MiB);
	d = open_ok(&f, NULL);
	for (uint64_t i = 0; i < 150; i++)
		assert_int_equal(get_block(d, i, size_of(i)), 0);
	disk_close(d);
	/* the same files listed in the other order are not misread */
	f.paths[0] = f.path2;
	f.paths[1] = f.path;
	d = open_ok(&f, NULL);
	assert_int_equal(stat_of(d, "objects"), 0);
	disk_close(d);
	fix_done(&f);
}

static void stats_report_every_counter(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 16 * MiB, 1 * MiB);
	struct disk_tier *d = open_ok(&f, NULL);
	static const char *names[] = { "capacity", "bytes_used", "objects", "hits",
		"misses", "puts", "spills", "reclaims", "reinsertions",
		"checksum_failures", "io_errors", "queue_failures", "queue_depth", "inflight",
		"staged_reads", "vectored_reads", "stage_reads", "staged_writes",
		"index_bytes_per_block" };

	for (uint64_t i = 0; i < 40; i++)
		assert_int_equal(put_block(d, i, 60000), 0);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		(void)stat_of(d, names[i]);
	assert_int_equal(stat_of(d, "queue_depth"), 8);
	assert_int_equal(stat_of(d, "inflight"), 0);
	assert_int_equal(stat_of(d, "bytes_used"), 40 * (4096 + 61440));
	assert_true(stat_of(d, "index_bytes_per_block") > 0);
	disk_close(d);
	fix_done(&f);
}

struct thr {
	struct disk_tier *d;
	int id;
};

static void *worker(void *arg)
{
	struct thr *t = arg;
	void *b = NULL;

	if (posix_memalign(&b, 4096, 80000))
		return NULL;
	for (uint64_t j = 0; j < 150; j++) {
		uint64_t k = (uint64_t)t->id * 100000 + j;
		size_t len = 3000 + (size_t)(k % 70000);
		char *src = malloc(len);
		fill_block(test_key(k), src, len);
		int rc = disk_put(t->d, test_key(k), src, len);
		free(src);
		assert_int_equal(rc, 0);
		/* read someone's block: right bytes or a miss */
		uint64_t o = (uint64_t)((t->id + (int)j) % 4) * 100000 + j / 2;
		size_t olen = 3000 + (size_t)(o % 70000), got = 0;
		rc = disk_get(t->d, test_key(o), b, 80000, &got);
		if (rc == 0) {
			assert_int_equal(got, olen);
			assert_true(check_block(test_key(o), b, olen));
		} else {
			assert_int_equal(rc, -ENOENT);
		}
		if (j % 16 == 0)
			disk_lease(t->d, test_key(k), kvt_now_ns() + 1000000);
	}
	free(b);
	return NULL;
}

static void threads_put_and_get_concurrently(void **st)
{
	(void)st;
	struct fix f;
	fix_init(&f, 8 * MiB, 512 * KiB);
	struct disk_tier *d = open_ok(&f, NULL);
	pthread_t th[4];
	struct thr t[4];

	for (int i = 0; i < 4; i++) {
		t[i].d = d;
		t[i].id = i;
		assert_int_equal(pthread_create(&th[i], NULL, worker, &t[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_true(stat_of(d, "reclaims") > 0);
	disk_close(d);
	fix_done(&f);
}

int main(void)
{
	test_skip_without_disk();
	faultdev_init();

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(put_get_round_trip_many_sizes),
		cmocka_unit_test(remove_forgets_block),
		cmocka_unit_test(batch_get_loads_every_block),
		cmocka_unit_test(reclaim_when_full_gives_misses_not_wrong_bytes),
		cmocka_unit_test(lease_protects_block_from_reclaim),
		cmocka_unit_test(all_regions_leased_refuses_puts),
		cmocka_unit_test(hits_near_tail_are_reinserted),
		cmocka_unit_test(reads_never_drop_blocks),
		cmocka_unit_test(shared_buffer_batches_keep_every_blocks_bytes),
		cmocka_unit_test(clean_restart_keeps_all_blocks),
		cmocka_unit_test(crash_restart_scans_regions),
		cmocka_unit_test(kill9_during_writes_never_returns_wrong_bytes),
		cmocka_unit_test(junk_pages_read_as_misses),
		cmocka_unit_test(injected_faults_fail_cleanly),
		cmocka_unit_test(overwritten_direct_read_is_read_again),
		cmocka_unit_test(long_payloads_are_staged_whole_and_verified),
		cmocka_unit_test(fitting_records_are_one_vectored_read_uncopied),
		cmocka_unit_test(stage_reads_orders_stages_and_vectored_reads),
		cmocka_unit_test(put_batches_write_one_request_per_record),
		cmocka_unit_test(staged_batches_are_verified_beside_their_reads),
		cmocka_unit_test(each_hook_runs_once_per_verified_block),
		cmocka_unit_test(batch_holds_back_its_last_records),
		cmocka_unit_test(put_batch_runs_work_beside_its_writes),
		cmocka_unit_test(put_batch_each_tells_each_block_once),
		cmocka_unit_test(put_batch_sums_write_the_given_checksum),
		cmocka_unit_test(caller_range_is_held_while_its_io_runs),
		cmocka_unit_test(failed_queue_is_replaced_not_reused),
		cmocka_unit_test(full_device_is_refused),
		cmocka_unit_test(bad_config_is_refused),
		cmocka_unit_test(foreign_superblock_starts_empty),
		cmocka_unit_test(striped_devices_round_trip_and_restart),
		cmocka_unit_test(stats_report_every_counter),
		cmocka_unit_test(threads_put_and_get_concurrently),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
