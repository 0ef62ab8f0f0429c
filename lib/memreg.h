/*
 * memreg.h - ranges of caller memory registered with kvt_mem_register():
 * the table of ranges (validation, overlap, a bounded number of 1 GiB
 * pieces), and holds taken by the I/O that uses a range so that it cannot
 * be deregistered under that I/O (memreg.c). Knows nothing about io_uring
 * or the disk tier; the disk tier maps the pieces of a range to fixed
 * buffers of its queues (disk_io.c).
 */
#ifndef KVT_MEMREG_H
#define KVT_MEMREG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define MEMREG_MAX 64          /* ranges at once */
#define MEMREG_PIECES 64       /* 1 GiB pieces, over all ranges */
#define MEMREG_PIECE (1ull << 30)
#define MEMREG_ALIGN 4096u

struct memreg_ent {
	char *base;               /* NULL: free entry */
	size_t len;
	uint64_t id;
	unsigned piece, npieces;  /* the pieces it takes, from piece */
	int fixed;                /* its pieces are fixed buffers of the disk queues */
	unsigned holds;           /* I/O in flight on the range */
};

struct memreg {
	pthread_mutex_t lock;     /* everything below */
	struct memreg_ent e[MEMREG_MAX];
	unsigned n;
	uint64_t next_id;
	uint64_t pieces_used;     /* bitmap of MEMREG_PIECES */
};

void memreg_init(struct memreg *m);
void memreg_destroy(struct memreg *m);

/*
 * Locked by the caller (m->lock). Checks [base, base+len) (flags 0; base
 * and len MEMREG_ALIGN aligned, len non-zero; not overlapping [avoid,
 * avoid+avoid_len) nor another range) and takes an entry and its pieces,
 * with fixed 0. Returns the entry's index, or -EINVAL, -EEXIST (overlaps a
 * range), -ENOSPC (no entry or pieces left), with kvt_last_error() set.
 */
int memreg_add(struct memreg *m, void *base, size_t len, unsigned flags,
	       const void *avoid, size_t avoid_len);
/* Locked. The index of the range with this id, or -1. */
int memreg_find(const struct memreg *m, uint64_t id);
/* Locked. 0 when entry i may be deleted; -EBUSY with kvt_last_error()
 * set while I/O holds it. */
int memreg_can_del(const struct memreg *m, int i);
/* Locked. Frees entry i and its pieces (holds must be 0). */
void memreg_del(struct memreg *m, int i);

/*
 * Takes a hold on the range holding all of [p, p+len), if any: returns its
 * index + 1 (0: no range holds it) and sets *piece to the piece holding
 * the span when the range is fixed and the span lies in one piece, else
 * -1. Takes the lock itself. Release with memreg_put().
 */
unsigned memreg_hold(struct memreg *m, const void *p, size_t len, int *piece);
/* Ends a hold memreg_hold() returned (0: none). */
void memreg_put(struct memreg *m, unsigned hold);

#endif
