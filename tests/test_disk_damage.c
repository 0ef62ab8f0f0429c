/*
 * test_disk_damage.c - the disk tier's file as a user may leave it: cut
 * short while the store was closed (in a record, at a record's header, at
 * a region's edge, in the checkpoint, in the superblock), where the store
 * opens with the blocks before the cut and misses for the rest, never other
 * bytes, and works on; and on a file system without room for it, or
 * that cannot hold a file that large, or past the process's file size
 * limit, where kvt_open fails and says which.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "faultdev.h"
#include "kvtier.h"
#include "store_impl.h"
#include "util.h"

#define MiB (1024u * 1024u)
#define TIER_BYTES (64ull * MiB) /* disk.capacity */
#define NBLOCKS 40
#define REC_MAGIC 0x31434552524b564bull /* kvtier-disk(5), "Records" */

static char logbuf[1 << 16];
static pthread_mutex_t loglock = PTHREAD_MUTEX_INITIALIZER;

static void grab_log(int level, const char *msg, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&loglock);
	size_t n = strlen(logbuf);
	snprintf(logbuf + n, sizeof(logbuf) - n, "%d %s\n", level, msg);
	pthread_mutex_unlock(&loglock);
}

static int log_has(const char *what)
{
	pthread_mutex_lock(&loglock);
	int r = strstr(logbuf, what) != NULL;
	pthread_mutex_unlock(&loglock);
	if (!r)
		print_message("log lacks \"%s\"; it holds:\n%s", what, logbuf);
	return r;
}

static int log_lacks(const char *what)
{
	pthread_mutex_lock(&loglock);
	int r = strstr(logbuf, what) == NULL;
	pthread_mutex_unlock(&loglock);
	if (!r)
		print_message("log holds \"%s\":\n%s", what, logbuf);
	return r;
}

static size_t block_len(uint64_t i)
{
	return 64 * 1024 + (size_t)(i * 37 * 1024 % (900 * 1024));
}

/* The tier's files: dir/tier, and with two, dir/tier1 beside it. */
struct tier {
	char dir[4096];
	char path[2][4200];
	unsigned ndev;
	uint64_t file_bytes;       /* each file's share */
};

static void tier_init(struct tier *t, unsigned ndev)
{
	char *dir = make_temp_dir("damage-cut");

	assert_non_null(dir);
	memset(t, 0, sizeof(*t));
	snprintf(t->dir, sizeof(t->dir), "%s", dir);
	free(dir);
	snprintf(t->path[0], sizeof(t->path[0]), "%s/tier", t->dir);
	snprintf(t->path[1], sizeof(t->path[1]), "%s/tier1", t->dir);
	t->ndev = ndev;
	t->file_bytes = TIER_BYTES / ndev;
}

static kvt_store *open_tier(const struct tier *t)
{
	char cfg[12288], paths[8600];
	kvt_store *s = NULL;

	if (t->ndev == 1)
		snprintf(paths, sizeof(paths), "\"%s\"", t->path[0]);
	else
		snprintf(paths, sizeof(paths), "[\"%s\", \"%s\"]", t->path[0], t->path[1]);
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"4MiB\", \"mlock\": false,"
		 " \"high_watermark\": 1.0, \"low_watermark\": 0.99},"
		 " \"disk\": {\"path\": %s, \"capacity\": \"64MiB\","
		 " \"region_size\": \"4MiB\", \"queue_depth\": 8}}", paths);
	int rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open: %s: %s", kvt_strerror(rc), kvt_last_error());
	return s;
}

/*
 * open_tier() through the fault layer (tests/faultdev.h), which follows
 * the writes to each file: what the open wrote (zeroed headers of records
 * cut short, on whichever file, the checkpoint, superblocks) was made
 * durable on that file before kvt_open returned, so a power cut after the
 * open cannot bring back what it undid.
 */
static kvt_store *open_tier_synced(const struct tier *t)
{
	for (unsigned fd = 0; fd < FAULT_FDS; fd++)
		atomic_store(&faults.unsynced[fd], 0);
	store_dev_ops = &fops;
	kvt_store *s = open_tier(t);
	store_dev_ops = NULL;
	for (unsigned fd = 0; fd < FAULT_FDS; fd++) {
		char link[64], name[4200] = "?";

		if (!atomic_load(&faults.unsynced[fd]))
			continue;
		snprintf(link, sizeof(link), "/proc/self/fd/%u", fd);
		ssize_t n = readlink(link, name, sizeof(name) - 1);
		name[n > 0 ? n : 1] = 0;
		fail_msg("the open wrote to %s (fd %u) and did not sync it", name, fd);
	}
	return s;
}

/* Where each block's record lies in the tier's files (by its header, as
 * kvtier-disk(5) lays it out), read before a file is cut. */
struct layout {
	uint64_t data_off, region_size;
	unsigned dev[NBLOCKS];                 /* the file holding its record */
	uint64_t start[NBLOCKS], end[NBLOCKS]; /* bytes in it; end 0: none */
};

static void read_file_layout(const struct tier *t, unsigned dev, struct layout *l)
{
	int fd = open(t->path[dev], O_RDONLY);
	unsigned char *img = malloc(t->file_bytes);

	assert_true(fd >= 0);
	assert_non_null(img);
	assert_int_equal(pread(fd, img, t->file_bytes, 0), (ssize_t)t->file_bytes);
	close(fd);
	memcpy(&l->region_size, img + 16, 8);
	memcpy(&l->data_off, img + 32, 8);
	for (uint64_t off = l->data_off; off < t->file_bytes; off += 4096) {
		const unsigned char *h = img + off;
		uint64_t magic, sum, len;
		kvt_key k;

		memcpy(&magic, h, 8);
		memcpy(&sum, h + 72, 8);
		if (magic != REC_MAGIC || sum != XXH3_64bits(h, 72))
			continue;
		memcpy(&k.lo, h + 16, 8);
		memcpy(&k.hi, h + 24, 8);
		memcpy(&len, h + 32, 8);
		for (uint64_t i = 0; i < NBLOCKS; i++) {
			kvt_key b = test_key(i);
			if (b.lo == k.lo && b.hi == k.hi) {
				assert_int_equal(l->end[i], 0); /* one record each */
				l->dev[i] = dev;
				l->start[i] = off;
				l->end[i] = off + 4096 + (len + 4095) / 4096 * 4096;
			}
		}
	}
	free(img);
}

static void read_layout(const struct tier *t, struct layout *l)
{
	memset(l, 0, sizeof(*l));
	for (unsigned dev = 0; dev < t->ndev; dev++)
		read_file_layout(t, dev, l);
	for (uint64_t i = 0; i < NBLOCKS; i++)
		assert_true(l->end[i] > 0);
}

/* Whether block i's record is whole in the tier with file dev (ALL_FILES:
 * each) cut at cut. */
#define ALL_FILES 2u
static int kept_by(const struct layout *l, uint64_t i, unsigned dev, uint64_t cut)
{
	return (dev != ALL_FILES && l->dev[i] != dev) || l->end[i] <= cut;
}

/*
 * Every block whose record is whole after file dev was cut at byte cut
 * is found by kvt_lookup and read back equal; every other one is a miss
 * (-ENOENT) to both, never another answer. Returns how many are kept.
 */
static unsigned check_kept(kvt_store *s, const struct layout *l, unsigned dev,
			   uint64_t cut)
{
	unsigned kept = 0;

	for (uint64_t i = 0; i < NBLOCKS; i++) {
		kvt_key k = test_key(i);
		size_t found = 9;
		int want = kept_by(l, i, dev, cut);

		assert_int_equal(kvt_lookup(s, &k, 1, 0, &found), 0);
		int rc = store_get_block(s, k, block_len(i));
		if (found != (size_t)want || rc != (want ? 0 : -ENOENT))
			fail_msg("block %llu (record in file %u at %llu..%llu, file %u cut "
				 "at %llu): lookup found %zu, get %d", (unsigned long long)i,
				 l->dev[i], (unsigned long long)l->start[i],
				 (unsigned long long)l->end[i], dev, (unsigned long long)cut,
				 found, rc);
		kept += want;
	}
	return kept;
}

static void copy_file(const char *from, const char *to)
{
	char cmd[9000];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	assert_int_equal(system(cmd), 0);
}

enum cut_at { CUT_IN_RECORD, CUT_AT_HEADER, CUT_AT_REGION, CUT_IN_CHECKPOINT,
	      CUT_IN_SUPERBLOCK, CUT_TO_NOTHING };

/* Where file dev is cut: by the records it holds, in the middle one's
 * payload, at the header of the one a third in, at the start of the
 * middle one's region; or in its metadata. */
static uint64_t cut_point(enum cut_at at, const struct layout *l, unsigned dev)
{
	uint64_t on[NBLOCKS], n = 0;

	for (uint64_t i = 0; i < NBLOCKS; i++)
		if (l->dev[i] == dev) {
			uint64_t j = n++;
			for (; j > 0 && on[j - 1] > l->start[i]; j--)
				on[j] = on[j - 1];
			on[j] = l->start[i];
		}
	assert_true(n >= 3);
	uint64_t mid = on[n / 2];
	switch (at) {
	case CUT_IN_RECORD: return mid + 4096 + 1000;
	case CUT_AT_HEADER: return on[n / 3];
	case CUT_AT_REGION:
		return l->data_off + (mid - l->data_off) / l->region_size * l->region_size;
	case CUT_IN_CHECKPOINT: return 2 * 4096 + 10;
	case CUT_IN_SUPERBLOCK: return 60;
	case CUT_TO_NOTHING: return 0;
	}
	return 0;
}

/* What the warning of the open after the cut says, in part. */
static void check_warning(const struct tier *t, enum cut_at at, uint64_t cut,
			  unsigned dev, unsigned lost)
{
	char want[9000];

	/* a warning (level 4, KVT_LOG_WARN) names the file and its bytes */
	snprintf(want, sizeof(want), "4 disk: %s held only %llu of its %llu bytes",
		 t->path[dev], (unsigned long long)cut, (unsigned long long)t->file_bytes);
	if (at == CUT_IN_SUPERBLOCK)
		snprintf(want, sizeof(want), "4 disk: %s: superblock checksum mismatch (the "
			 "file held only %llu of its %llu bytes: cut short while closed?); "
			 "starting with an empty tier", t->path[dev],
			 (unsigned long long)cut, (unsigned long long)t->file_bytes);
	if (at != CUT_TO_NOTHING)
		assert_true(log_has(want));
	/* a file cut to nothing: a warning says it was empty */
	snprintf(want, sizeof(want), "4 disk.path %s was empty (0 bytes: cut to "
		 "nothing while closed?), so any blocks it held are gone", t->path[dev]);
	if (at == CUT_TO_NOTHING)
		assert_true(log_has(want));
	/* the first of several cut to nothing: the tier is not new, and a
	 * warning says the other files' blocks are dropped too */
	snprintf(want, sizeof(want), "4 disk: %s: no superblock (new or foreign device) "
		 "(but %s holds this tier's superblock: the blocks of every file are "
		 "dropped); starting with an empty tier", t->path[0], t->path[1]);
	if (at == CUT_TO_NOTHING && dev == 0 && t->ndev > 1)
		assert_true(log_has(want));
	snprintf(want, sizeof(want), "%u blocks stored past its end are lost", lost);
	if (at <= CUT_AT_REGION)
		assert_true(log_has(want));
	if (at == CUT_IN_CHECKPOINT && dev == 0)
		assert_true(log_has("lost (no checkpoint counts them)"));
}

/*
 * Writes NBLOCKS blocks through a store of ndev files (most spill to the
 * disk tier, the rest are written there at close), cuts file dev at
 * `at`, and reopens (what that open wrote, synced): the file is its size
 * again, the blocks before the cut come back verified and the rest are
 * misses, a warning names the file and counts what was lost (or says it
 * was empty; the first open, which created the files, says no such thing);
 * so too after a crash of that store (a scan of the files as it left
 * them); and new blocks are stored and read back, also after a restart.
 */
static void cut_file_and_reopen(enum cut_at at, unsigned ndev, unsigned dev)
{
	struct tier t;
	struct layout l;
	struct stat sb;
	char crash[4300];

	tier_init(&t, ndev);
	logbuf[0] = 0;
	kvt_set_log(grab_log, NULL, KVT_LOG_INFO);
	kvt_store *s = open_tier(&t);
	kvt_set_log(NULL, NULL, 0);
	assert_true(log_lacks("was empty")); /* files it created */
	for (uint64_t i = 0; i < NBLOCKS; i++)
		store_put_block(s, test_key(i), block_len(i));
	kvt_close(s);
	read_layout(&t, &l);
	unsigned lost = 0;
	uint64_t cut = cut_point(at, &l, dev);
	for (uint64_t i = 0; i < NBLOCKS; i++)
		lost += !kept_by(&l, i, dev, cut);
	if (at == CUT_IN_SUPERBLOCK || at == CUT_TO_NOTHING)
		lost = NBLOCKS; /* the tier starts empty */
	assert_int_equal(truncate(t.path[dev], (off_t)cut), 0);

	logbuf[0] = 0;
	kvt_set_log(grab_log, NULL, KVT_LOG_INFO);
	s = open_tier_synced(&t);
	kvt_set_log(NULL, NULL, 0);
	assert_int_equal(stat(t.path[dev], &sb), 0);
	assert_int_equal(sb.st_size, t.file_bytes);
	check_warning(&t, at, cut, dev, lost);
	if (at == CUT_IN_SUPERBLOCK || at == CUT_TO_NOTHING) {
		dev = ALL_FILES; /* every block is a miss, wherever it was */
		cut = 0;
	}
	unsigned kept = check_kept(s, &l, dev, cut);
	assert_int_equal(kept, NBLOCKS - lost);
	if (at <= CUT_AT_REGION)
		assert_true(kept > 0 && lost > 0);

	/* a crash now: the next open scans the files as this store left them */
	for (unsigned i = 0; i < ndev; i++) {
		snprintf(crash, sizeof(crash), "%s.crash", t.path[i]);
		copy_file(t.path[i], crash);
	}
	kvt_close(s);
	for (unsigned i = 0; i < ndev; i++) {
		snprintf(crash, sizeof(crash), "%s.crash", t.path[i]);
		assert_int_equal(rename(crash, t.path[i]), 0);
	}
	s = open_tier(&t);
	assert_int_equal(check_kept(s, &l, dev, cut), kept);

	/* new blocks go in and come back, also after a restart */
	for (uint64_t i = 1000; i < 1024; i++)
		store_put_block(s, test_key(i), 256 * 1024);
	for (uint64_t i = 1000; i < 1024; i++)
		assert_int_equal(store_get_block(s, test_key(i), 256 * 1024), 0);
	kvt_close(s);
	s = open_tier(&t);
	for (uint64_t i = 1000; i < 1024; i++)
		assert_int_equal(store_get_block(s, test_key(i), 256 * 1024), 0);
	assert_int_equal(check_kept(s, &l, dev, cut), kept);
	kvt_close(s);
	rm_rf(t.dir);
}

/* The same, with the last file cut. */
static void cut_and_reopen(enum cut_at at, unsigned ndev)
{
	cut_file_and_reopen(at, ndev, ndev - 1);
}

static void cut_in_a_record(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_IN_RECORD, 1);
}

static void cut_at_a_records_header(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_AT_HEADER, 1);
}

static void cut_at_a_regions_edge(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_AT_REGION, 1);
}

static void cut_in_the_checkpoint(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_IN_CHECKPOINT, 1);
}

static void cut_in_the_superblock(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_IN_SUPERBLOCK, 1);
}

static void cut_to_nothing_of_the_second_device(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_TO_NOTHING, 2);
}

static void cut_in_a_record_of_the_second_device(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_IN_RECORD, 2);
}

static void cut_in_the_superblock_of_the_second_device(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_IN_SUPERBLOCK, 2);
}

static void cut_to_nothing_of_the_first_device(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_file_and_reopen(CUT_TO_NOTHING, 2, 0);
}

static void cut_to_nothing(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	cut_and_reopen(CUT_TO_NOTHING, 1);
}

static int open_store(const char *path, const char *capacity, kvt_store **s)
{
	char cfg[8192];

	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"4MiB\", \"mlock\": false},"
		 " \"disk\": {\"path\": \"%s\", \"capacity\": \"%s\","
		 " \"queue_depth\": 8}}", path, capacity);
	*s = NULL;
	return kvt_open(cfg, s);
}

/* A small tmpfs mounted on a temp dir, unmounted however the case ends. */
static char *mnt;
static char mnt_at[4200]; /* where it is mounted: mnt or below it */
static int mounted;

static int mnt_teardown(void **st)
{
	(void)st;
	if (mounted)
		umount2(mnt_at, MNT_DETACH);
	mounted = 0;
	if (mnt)
		rm_rf(mnt);
	free(mnt);
	mnt = NULL;
	return 0;
}

/*
 * A tier file its file system has no room for: kvt_open fails with
 * -ENOSPC, whose kvt_strerror text is about puts, so kvt_last_error says
 * that the file system holding the path has no room for its bytes; a file
 * it created is not left behind, and one that was there is left as it was.
 */
static void full_file_system_is_named(void **st)
{
	(void)st;
	char path[4200], path2[4200], want[4400];
	kvt_store *s;

	TEST_NEED_DISK();
	mnt = make_temp_dir("damage-full");
	assert_non_null(mnt);
	snprintf(mnt_at, sizeof(mnt_at), "%s", mnt);
	if (mount("kvt-test", mnt, "tmpfs", 0, "size=8m") != 0) {
		print_message("skipped: cannot mount a small tmpfs (%s)\n", strerror(errno));
		skip();
	}
	mounted = 1;
	snprintf(path, sizeof(path), "%s/tier", mnt);
	assert_int_equal(open_store(path, "64MiB", &s), -ENOSPC);
	assert_null(s);
	assert_string_equal(kvt_strerror(-ENOSPC), "no tier can take the block");
	snprintf(want, sizeof(want), "the file system holding disk.path %s has no "
		 "room for %u bytes", path, 64 * MiB);
	if (!strstr(kvt_last_error(), want))
		fail_msg("kvt_last_error: \"%s\", wanted \"%s\"", kvt_last_error(), want);
	assert_int_equal(access(path, F_OK), -1);

	/* a tier that fits opens (where tmpfs takes O_DIRECT, Linux 6.6 on);
	 * asked to grow past the room, it stays as it was */
	snprintf(path2, sizeof(path2), "%s/probe", mnt);
	int probe = open(path2, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (probe < 0) {
		print_message("skipped: tmpfs refuses O_DIRECT here (%s)\n", strerror(errno));
		skip();
	}
	close(probe);
	unlink(path2);
	assert_int_equal(open_store(path, "4MiB", &s), 0);
	kvt_close(s);
	assert_int_equal(open_store(path, "64MiB", &s), -ENOSPC);
	assert_non_null(strstr(kvt_last_error(), want));
	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, 4 * MiB);
	assert_int_equal(open_store(path, "4MiB", &s), 0);
	kvt_close(s);
}

static volatile sig_atomic_t xfsz_seen;

static void on_xfsz(int sig)
{
	(void)sig;
	xfsz_seen++;
}

/* open_store() with this process's RLIMIT_FSIZE at limit bytes, and
 * SIGXFSZ counted in xfsz_seen; both as they were on return. */
static int open_store_limited(const char *path, const char *capacity,
			      uint64_t limit, kvt_store **s)
{
	struct rlimit was, lim;
	struct sigaction sa = { .sa_handler = on_xfsz }, old_sa;

	assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
	if (was.rlim_max != RLIM_INFINITY && was.rlim_max < limit) {
		print_message("skipped: RLIMIT_FSIZE is capped below %llu bytes\n",
			      (unsigned long long)limit);
		skip();
	}
	lim = was;
	lim.rlim_cur = limit;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGXFSZ, &sa, &old_sa), 0);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	int rc = open_store(path, capacity, s);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	assert_int_equal(sigaction(SIGXFSZ, &old_sa, NULL), 0);
	return rc;
}

/*
 * A tier file larger than this process may write (RLIMIT_FSIZE): kvt_open
 * fails with -EFBIG, not -ENOSPC, and kvt_last_error names the path, the
 * bytes and the limit; the kernel is not asked (no SIGXFSZ); a file it
 * created is not left behind, and one that was there is left as it was.
 */
static void file_size_limit_is_named(void **st)
{
	(void)st;
	char path[4200], want[4400];
	kvt_store *s;
	struct stat sb;

	TEST_NEED_DISK();
	char *dir = make_temp_dir("damage-fsize");
	assert_non_null(dir);
	snprintf(path, sizeof(path), "%s/tier", dir);
	xfsz_seen = 0;
	assert_int_equal(open_store_limited(path, "64MiB", 16 * MiB, &s), -EFBIG);
	assert_null(s);
	snprintf(want, sizeof(want), "disk.path %s cannot hold a file of %u bytes, "
		 "its share of disk.capacity: that is past this process's file "
		 "size limit (RLIMIT_FSIZE) of %u bytes", path, 64 * MiB, 16 * MiB);
	if (!strstr(kvt_last_error(), want))
		fail_msg("kvt_last_error: \"%s\", wanted \"%s\"", kvt_last_error(), want);
	assert_int_equal(access(path, F_OK), -1);

	/* a tier within the limit opens; grown past it, it stays as it was */
	assert_int_equal(open_store_limited(path, "8MiB", 16 * MiB, &s), 0);
	kvt_close(s);
	assert_int_equal(open_store_limited(path, "64MiB", 16 * MiB, &s), -EFBIG);
	assert_non_null(strstr(kvt_last_error(), want));
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, 8 * MiB);
	assert_int_equal(xfsz_seen, 0);
	rm_rf(dir);
	free(dir);
}

/*
 * A tier file larger than the largest file of its file system (an ext2
 * of 1 KiB blocks holds about 16 GiB in one file; mounted from an image
 * where mkfs.ext2 and loop devices are at hand): kvt_open fails with
 * -EFBIG and says that the file system holding the path cannot hold a
 * file of its bytes; a file it created is not left behind.
 */
static void file_system_too_small_for_the_file_is_named(void **st)
{
	(void)st;
	char img[4200], path[4300], cmd[13000], want[4600];
	kvt_store *s;

	TEST_NEED_DISK();
	mnt = make_temp_dir("damage-ext2");
	assert_non_null(mnt);
	snprintf(img, sizeof(img), "%s/img", mnt);
	snprintf(mnt_at, sizeof(mnt_at), "%s/fs", mnt);
	assert_int_equal(mkdir(mnt_at, 0700), 0);
	int fd = open(img, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 8 * MiB), 0);
	close(fd);
	snprintf(cmd, sizeof(cmd), "mkfs.ext2 -q -F -b 1024 '%s' >/dev/null 2>&1 && "
		 "mount -o loop '%s' '%s' >/dev/null 2>&1", img, img, mnt_at);
	if (system(cmd) != 0) {
		print_message("skipped: cannot make and mount an ext2 image here\n");
		skip();
	}
	mounted = 1;
	snprintf(path, sizeof(path), "%s/tier", mnt_at);
	assert_int_equal(open_store(path, "64GiB", &s), -EFBIG);
	assert_null(s);
	snprintf(want, sizeof(want), "the file system holding disk.path %s cannot "
		 "hold a file of %llu bytes, its share of disk.capacity", path,
		 64ull << 30);
	if (!strstr(kvt_last_error(), want))
		fail_msg("kvt_last_error: \"%s\", wanted \"%s\"", kvt_last_error(), want);
	assert_int_equal(access(path, F_OK), -1);
}

int main(void)
{
	faultdev_init();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cut_in_a_record),
		cmocka_unit_test(cut_at_a_records_header),
		cmocka_unit_test(cut_at_a_regions_edge),
		cmocka_unit_test(cut_in_the_checkpoint),
		cmocka_unit_test(cut_in_the_superblock),
		cmocka_unit_test(cut_to_nothing),
		cmocka_unit_test(cut_in_a_record_of_the_second_device),
		cmocka_unit_test(cut_in_the_superblock_of_the_second_device),
		cmocka_unit_test(cut_to_nothing_of_the_second_device),
		cmocka_unit_test(cut_to_nothing_of_the_first_device),
		cmocka_unit_test_teardown(full_file_system_is_named, mnt_teardown),
		cmocka_unit_test(file_size_limit_is_named),
		cmocka_unit_test_teardown(file_system_too_small_for_the_file_is_named,
					  mnt_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
