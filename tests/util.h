/*
 * util.h - helpers shared by the tests: block contents derived from the key
 * (so any reader can verify any block), keys, owners, ports, temp dirs.
 * Built on common/ (shared with kvbench), never on kvbench itself.
 */
#ifndef KVT_TEST_UTIL_H
#define KVT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

/* Fills buf with len bytes that are a function of (key, len). */
void fill_block(kvt_key key, void *buf, size_t len);

/* 1 if buf holds exactly what fill_block(key, buf, len) writes. */
int check_block(kvt_key key, const void *buf, size_t len);

/* A key from a small integer (not a chain key; any 128 bits will do). */
kvt_key test_key(uint64_t i);

/* Puts a block of len bytes made by fill_block; fails the test on error. */
void store_put_block(kvt_store *s, kvt_key k, size_t len);

/* Gets a block and, when it is there, checks its size and bytes (failing
 * the test on a mismatch). Returns kvt_get's result. */
int store_get_block(kvt_store *s, kvt_key k, size_t len);

/* An integer statistic `tier.name` from kvt_stats_json; fails if absent. */
long long store_stat(kvt_store *s, const char *tier, const char *name);

/* The member of names[0..n) that owns key k: common_key_owner() of
 * common/, rendezvous hashing written out apart from the library, so that
 * the tests check it. */
unsigned test_owner(kvt_key k, const char *const *names, unsigned n);

/* n keys that member `owner` of names[0..nn) owns, from test_key(from) on. */
void test_owned_keys(const char *const *names, unsigned nn, unsigned owner,
		     uint64_t from, kvt_key *out, size_t n);

/*
 * A TCP port of 127.0.0.1 held for this test process until it exits
 * (common_ports_reserve): no other process can take it, while a store or a
 * socket of the test that sets SO_REUSEADDR (the library's listener does)
 * can still listen on it. A port nobody listens on refuses connections.
 * Any number may be held (each holds one descriptor until the test exits);
 * a port that cannot be held fails the test, naming the reason.
 */
int test_free_port(void);

/* mkdtemp under $KVT_TEST_DIR, else /var/tmp (a disk on most systems, where
 * /tmp may be tmpfs), else /tmp; returns a malloc'd path. rm_rf removes it. */
char *make_temp_dir(const char *tag);
void rm_rf(const char *path);

/* Exit status of a test program that cannot run on this machine (liburing's
 * T_EXIT_SKIP); tests/run.sh counts it as skipped and shows the last line. */
#define TEST_EXIT_SKIP 77

/*
 * Why the disk tier cannot run here, or NULL when it can: io_uring refused
 * (a kernel without it, kernel.io_uring_disabled, a seccomp filter), or the
 * file system of make_temp_dir()'s directory without O_DIRECT (tmpfs).
 * Probed once per process.
 */
const char *test_disk_unavailable(void);

/* For a test program that needs the disk throughout: exits TEST_EXIT_SKIP
 * with "skipped: <reason>" as its last line when test_disk_unavailable(). */
void test_skip_without_disk(void);

/* For one test case that needs the disk, in a program that does not
 * throughout: skips the case (cmocka) with the reason; run.sh counts it. */
#define TEST_NEED_DISK()                                                  \
	do {                                                              \
		const char *why_ = test_disk_unavailable();               \
		if (why_) {                                               \
			print_message("skipped: %s\n", why_);             \
			skip();                                           \
		}                                                         \
	} while (0)

/* Returns only when an RDMA device serves 10.77.0.1 (the soft-RoCE VM of
 * make check-rdma), probed by listening on port there; otherwise says so
 * and exits 77 (skip). */
void test_need_rdma_vm(int port);

/* A kvt_set_log() callback that counts the lines at KVT_LOG_WARN or worse
 * in the atomic_int that arg points to. */
void test_count_warnings(int level, const char *msg, void *arg);

#endif
