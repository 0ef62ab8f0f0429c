/*
 * local_util.h - what the tests of the node store (test_local_*.c) share:
 * the wire's constants written out, this binary run again as an attached
 * child ("--child ROLE SOCKET"; exec'd, never merely forked, since the
 * parent has threads), kvtierd started, a node store in this process, a raw
 * connection that has said HELLO, and bounded waits on statistics.
 */
#ifndef KVT_TEST_LOCAL_UTIL_H
#define KVT_TEST_LOCAL_UTIL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvtier.h"

#define START_MS 30000 /* kvtierd start-up, generous for TSan */

#define CHILD_MS 60000 /* a child's work */

#define AT_ONCE_MS 2000 /* "at once": far below ram.pin_ms and ram.lease_ms */

#define NBLK 24        /* blocks the putter stores */

#define NPIN 8         /* pins the holder takes */

#define NRES 4         /* reservations the holder takes */

#define NLEASE 8       /* leases the holder takes */

/* The wire (lib/local_proto.h, kvtier(7)), written out to pin it. */
#define W_MAGIC 0x4c4bu

#define W_VERSION 3u

#define W_HELLO 1u

#define W_LOOKUP 2u

#define W_RESERVE 8u

#define W_COMMIT 9u

#define W_HITS 12u

#define W_REPLY 0x40u

#define W_NOREPLY 0x80u

/* CLOCK_MONOTONIC in milliseconds. */
long long now_ms(void);

/* The length of the putter's block i (they differ). */
size_t blk_len(uint64_t i);

/* This test binary's path (main() reads it first). */
extern char self_exe[PATH_MAX];

/* kvt_open of {"attach": sock}. */
int attach(const char *sock, kvt_store **s);

/* The blocks the "got" child gets in one batch. */
#define NGOT 3

/*
 * The child's side, for main() when argv[1] is "--child": "--child ROLE
 * SOCKET" attaches to SOCKET and, as ROLE "put", puts NBLK blocks three ways
 * (kvt_put, kvt_put_batch, reserve/commit in place); "find" finds them (a
 * lookup with lease) and loads every one with its bytes verified (get,
 * get_batch, pins read in place); "hold" holds NPIN pins, NRES reservations
 * and NLEASE leases, says so on stdout and waits to be killed; "got" gets
 * NGOT blocks in one batch, whose unpins wait for a next request that never
 * comes, says so and waits to be killed. "--child as UID SOCKET" attaches
 * as another user: exit 0 attached, 2 refused with -EACCES, 3 otherwise.
 * Returns the child's exit status.
 */
int child_main(int argc, char **argv);

/* Runs this binary as a child of role; its stdout into *out_fd if asked. */
pid_t spawn_child(const char *role, const char *arg, const char *sock, int *out_fd);

/* The exit status of child pid (128 + signal when killed), waiting at most
 * ms; after that it is killed and the test fails. */
int wait_child(pid_t pid, int ms);

/* Attaches, retrying while the server starts, within ms. */
kvt_store *attach_within(const char *sock, int ms);

/* Waits up to AT_ONCE_MS for local.name (and more) to read want. */
void expect_stat(kvt_store *s, const char *tier, const char *name, long long want);

/* Starts kvtierd with the configuration cfg (written to dir); its stdout
 * in *out. */
pid_t start_kvtierd(const char *dir, const char *cfg, char *bin, size_t cap,
		    int *out);

/* The group's temporary directory (group_setup, group_teardown). */
extern char *g_dir;

/* A node store in this process (32 MiB of RAM) serving a new socket under
 * g_dir, its path in sock; ram_extra and extra are added to its ram and local sections. */
kvt_store *open_node_ram(const char *ram_extra, const char *extra, char *sock,
			 size_t cap);

/* open_node_ram() with the default ram section. */
kvt_store *open_node(const char *extra, char *sock, size_t cap);

/* local.spin_us as the last raw HELLO answer gave it. */
extern uint32_t g_hello_spin;

/* A raw connection that has said HELLO; the arena's memfd in *mfd, the
 * directory's in *dfd (-1: none; closed when dfd is NULL). */
int raw_hello_dir(const char *sock, int *mfd, uint64_t *arena_len, int *dfd,
		  uint64_t *dir_len);

/* The cmocka group's set-up and tear-down: g_dir made, then removed. */
int group_setup(void **state);
int group_teardown(void **state);

#endif
