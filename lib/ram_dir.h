/*
 * ram_dir.h - the directory of the RAM tier's blocks that a node store
 * shares with its attached processes (ram_dir.c): a table in a memfd of its
 * own, written by the RAM tier (a block is published when it becomes
 * visible in RAM and unpublished before its arena extent can be freed or
 * reused) and mapped read-only by attached processes, which copy a block it
 * names straight out of the shared arena and then check that the entry did
 * not change meanwhile (the seqlock pattern), so a RAM hit of theirs needs
 * no round trip to the node store.
 *
 * The layout is shared by both processes of one machine (host byte order):
 * a head (struct dir_head) and nregions * region_slots entries (struct
 * dir_ent, one cache line each). A key's home is region h & (nregions - 1)
 * and slot (h >> 8) & (region_slots - 1) of it, h = dir_hash(key); it may
 * sit in any of the DIR_WINDOW slots from there on (wrapping inside the
 * region). A block whose window is full is not published: attached
 * processes ask the node store for it as before. An entry is empty when its
 * len is 0. Knows nothing about the index, eviction or sockets.
 */
#ifndef KVT_RAM_DIR_H
#define KVT_RAM_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define DIR_MAGIC 0x6b766472u /* "rdvk" */
#define DIR_VERSION 1u
#define DIR_WINDOW 8u         /* slots a key may sit in */
#define DIR_REGIONS_MAX 64u   /* regions, each with a lock of the writer's */
#define DIR_SLOTS_MAX (1u << 26)

struct dir_head {
	uint32_t magic, version;
	uint32_t nregions;      /* a power of two, at most DIR_REGIONS_MAX */
	uint32_t region_slots;  /* a power of two, at least DIR_WINDOW */
	uint32_t closed;        /* 1: the store closed; no entry is valid */
	uint32_t pad0;
	uint64_t pad[5];
};

/*
 * seq is odd while the writer changes the entry and grows by 2 with every
 * change, so a reader that reads the same even seq before and after reading
 * key, off and len (and the block's bytes) read one published state. The
 * block at off is immutable while published: the writer makes seq odd
 * before the extent can go back to the arena.
 */
struct dir_ent {
	uint64_t seq;
	uint64_t klo, khi;
	uint64_t off, len;      /* the block's extent in the arena */
	uint64_t pad[3];
};

_Static_assert(sizeof(struct dir_head) == 64, "the directory's head fills one line");
_Static_assert(sizeof(struct dir_ent) == 64, "a directory entry fills one line");

static inline uint64_t dir_hash(kvt_key k)
{
	uint64_t h = (k.lo ^ (k.hi << 29 | k.hi >> 35)) * 0x9e3779b97f4a7c15ull;
	return h ^ (h >> 32);
}

/* --- the writer: the RAM tier of a node store ---------------------------------- */

struct ram_dir;
struct stat_visitor;

/*
 * A directory of at least `slots` entries (rounded up to a power of two, at
 * least DIR_WINDOW, at most DIR_SLOTS_MAX) in a sealed memfd of its own.
 * slots 0: *out = NULL and 0 (no directory). 0, -EINVAL, -ENOMEM.
 */
int ram_dir_open(uint64_t slots, struct ram_dir **out);
/* Marks the directory closed (attached processes stop reading it) and
 * frees it. NULL: no-op. */
void ram_dir_close(struct ram_dir *d);

/* Publishes key's block at [off, off + len): 1, or 0 when its window is
 * full (not published). The caller holds the lock that orders every
 * publish and unpublish of key (the RAM tier's shard lock). */
int ram_dir_publish(struct ram_dir *d, kvt_key key, uint64_t off, uint64_t len);
/* Unpublishes key: once this returns, no reader that has not yet read the
 * block's bytes will return them. 1 if it was published, 0 if not. Same
 * lock as ram_dir_publish. */
int ram_dir_unpublish(struct ram_dir *d, kvt_key key);

/* The memfd (sealed against growing, shrinking and new writable mappings)
 * and its size, to send to attached processes. */
int ram_dir_fd(const struct ram_dir *d);
size_t ram_dir_len(const struct ram_dir *d);

void ram_dir_stats(struct ram_dir *d, const struct stat_visitor *v);

/* --- the reader: an attached process ----------------------------------------------- */

/* The directory as an attached process maps it (read-only). */
struct dir_view {
	const struct dir_head *head;
	const struct dir_ent *ents;
	size_t len;
	uint32_t nregions, region_slots;
};

/* Maps the directory's memfd fd of len bytes read-only and checks its head.
 * 0, or -EPROTO (not a directory of this version, or the file is shorter
 * than len), -ENOMEM. */
int dir_view_map(int fd, size_t len, struct dir_view *v);
void dir_view_unmap(struct dir_view *v);

/*
 * Copies key's block from the arena (mapped at arena, arena_len bytes) into
 * buf (cap bytes) when the directory names it, and checks the entry did
 * not change during the copy. 0 with *len set: the bytes in buf are the
 * block's. -ENOBUFS with *len set: it is larger than cap (nothing copied).
 * -ENOENT: not published, or changing on every try, or the store closed;
 * ask the node store (buf may have been written).
 */
int dir_read(const struct dir_view *v, const char *arena, size_t arena_len, kvt_key key,
	     void *buf, size_t cap, size_t *len);

#endif
