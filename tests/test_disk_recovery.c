/*
 * test_disk_recovery.c - the NVMe tier's on-disk format and recovery:
 * restart from the checkpoint and from a region scan after kill -9 (never
 * wrong bytes), damaged files read as misses, injected device faults
 * (through a wrapper around the real io_uring ops) failing cleanly, a
 * failed queue replaced, bad configs, foreign superblocks, and striped
 * devices across a restart.
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
#include "disk_util.h"

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

int main(void)
{
	test_skip_without_disk();
	faultdev_init();

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(clean_restart_keeps_all_blocks),
		cmocka_unit_test(crash_restart_scans_regions),
		cmocka_unit_test(kill9_during_writes_never_returns_wrong_bytes),
		cmocka_unit_test(junk_pages_read_as_misses),
		cmocka_unit_test(injected_faults_fail_cleanly),
		cmocka_unit_test(failed_queue_is_replaced_not_reused),
		cmocka_unit_test(bad_config_is_refused),
		cmocka_unit_test(foreign_superblock_starts_empty),
		cmocka_unit_test(striped_devices_round_trip_and_restart),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
