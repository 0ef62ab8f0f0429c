/*
 * local_client_impl.h - what the two files of an attached store share:
 * struct local_client, and the calls one makes in the other. local_client.c
 * holds the connection (frames, requests and their answers, open and
 * close), gets, puts and the control calls; local_slots.c the slot calls
 * (reserve, commit, abort, pin, unpin). Nothing else includes it.
 */
#ifndef KVT_LOCAL_CLIENT_IMPL_H
#define KVT_LOCAL_CLIENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvtier.h"
#include "local.h"
#include "local_proto.h"
#include "ram_dir.h"

/* The most pins of finished gets that wait for the next request to carry
 * their unpin; a get of more unpins them at once. */
#define LC_DEFER 16
/* The most keys of gets served from the directory that wait to be told to
 * the node store (as one frame in front of the next request, or alone). */
#define LC_HITS 64

struct local_client {
	char path[108];
	int fd;
	_Atomic int broken;    /* the connection failed: every call fails */
	pthread_mutex_t lock;  /* one request and its reply at a time */
	char *base;
	size_t arena_len;
	uint64_t max_block;
	unsigned spin_us;      /* the node store's local.spin_us */
	uint64_t pin_ns;       /* the node store's ram.pin_ms, in ns */
	struct dir_view dir;   /* the node store's directory (dir.head NULL: none) */
	uint64_t defer[LC_DEFER]; /* pins of finished gets, not yet unpinned */
	uint32_t ndefer;
	uint32_t nhits;
	struct lp_key hits[LC_HITS]; /* gets served from the directory, untold */
	uint64_t deadline;     /* of the HELLO answer (kvt_now_ns()); 0 after */
	unsigned timeout_ms;   /* attach_timeout_ms: how long a request's
				  answer is waited for after HELLO (0: no
				  bound) */
};

/* Scratch of n items of each bytes: on the stack when small. */
#define SMALL 16

static inline void lc_put_key(unsigned char *p, kvt_key k)
{
	struct lp_key w = { k.lo, k.hi };
	memcpy(p, &w, sizeof(w));
}

/* local_client.c */
/* Marks the connection broken (every later call fails); -ENOTCONN. */
int lc_broken(struct local_client *c);
/* rc, a count answered for asked keys (or an error), or a protocol error
 * where it counts more than were asked. */
int lc_counted(struct local_client *c, int rc, size_t asked);
/* A request of type with body a then b, and its answer's body into out
 * (cap bytes; *olen its length): the status the node store answered, or
 * -errno. lc_rpc_locked with c->lock held; fds: descriptors passed. */
int lc_rpc_locked(struct local_client *c, int type, const void *a, size_t alen,
		  const void *b, size_t blen, void *out, size_t cap, size_t *olen,
		  int *fds);
int lc_rpc(struct local_client *c, int type, const void *a, size_t alen,
	   const void *b, size_t blen, void *out, size_t cap, size_t *olen);

/* local_slots.c */
/* With LP_RESERVE or LP_PIN in lc_slots_rpc's type: the reservations
 * (LP_WANT_HELD) or pins (LP_HELD) are the library's own, for one kvt_put
 * or get: they do not lapse. */
#define LC_HELD 0x100
/* PIN or RESERVE (LC_HELD or not) of slots[0..n), n <= LP_KEYS_MAX:
 * returns the count. */
int lc_slots_rpc(struct local_client *c, int type, kvt_slot *slots, size_t n);
/* COMMIT (publish) or ABORT of up to LP_KEYS_MAX slots whose result is 0. */
int lc_end_piece(struct local_client *c, kvt_slot *slots, size_t n, int publish);

/* Names the first of slots[0..n) that the node store refused with -ENOSPC
 * (no tier can take its block) in kvt_last_error(), fn the call; 1 if
 * there was one, else 0 and the error text untouched. */
int lc_name_nospc(const char *fn, const kvt_slot *slots, size_t n);
/* The unpins of a finished get: carried by the next request where they fit
 * beside those waiting, else sent now without a reply. */
int lc_unpin_later(struct local_client *c, const uint64_t *refs, size_t n);
/* UNPIN of the refs (non-zero), answered: the pins released, or -errno. */
int lc_unpin_now(struct local_client *c, const uint64_t *refs, size_t n);

#endif
