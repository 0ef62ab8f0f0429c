/*
 * disk_util.h - what the tests of the NVMe tier (test_disk_*.c) share: a
 * tier's configuration on files in a temporary directory, the tier opened
 * on it, its statistics, blocks put and read back checked, and the
 * library's log captured.
 */
#ifndef KVT_TEST_DISK_UTIL_H
#define KVT_TEST_DISK_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "disk.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* What the library logged since log_clear() while grab_log() is its log
 * function (kvt_set_log); a test may use it as scratch memory otherwise. */
extern char logbuf[1 << 16];
void grab_log(int level, const char *msg, void *arg);
void log_clear(void);
/* 1 if the log since log_clear() holds s. */
int log_has(const char *s);

/* A disk tier's configuration on one (or two: path2) files in a new
 * temporary directory. */
struct fix {
	char *dir;
	char path[4096], path2[4096];
	char *paths[2];
	struct kvt_config cfg;
};

/* One file of capacity bytes in regions of region bytes, queue depth 8. */
void fix_init(struct fix *f, uint64_t capacity, uint64_t region);
/* Removes the directory. */
void fix_done(struct fix *f);

/* The tier opened on f's configuration through ops (NULL: the real
 * io_uring ops); fails the test if it cannot be. */
struct disk_tier *open_ok(struct fix *f, const struct kvt_dev_ops *ops);

/* The tier's statistic name; fails the test if it has none. */
long long stat_of(struct disk_tier *d, const char *name);

/* The size of block i: 4 KiB and up to 60000 bytes more. */
size_t size_of(uint64_t i);

/* Puts block i (content a function of key and size). */
int put_block(struct disk_tier *d, uint64_t i, size_t len);

/* 0: block i read back with the right bytes; else the error (never wrong bytes). */
int get_block(struct disk_tier *d, uint64_t i, size_t len);

#endif
