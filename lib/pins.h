/*
 * pins.h - what an owner has exposed to members by address: RAM blocks
 * pinned (ram_pin, named by its ref) on behalf of one member each, so that
 * the member can read them one-sided, until the member releases them, their
 * hold lapses, or the member's connection is torn down. Only then is a block unpinned, and only
 * then can RAM evict, free or reuse its memory.
 *
 * The lapse rule: a pin is held for hold_ms from the moment the owner
 * answered with it. The member's own deadline for the transfer started
 * before it asked and is shorter than hold_ms, and a member never posts a
 * READ past its deadline and destroys its queue pair before giving up
 * (rlink.h), so when a pin lapses no READ of that member can still be in
 * flight against the block: the grace is hold_ms minus the member's
 * deadline. A connection torn down on the owner's side (its queue pair
 * destroyed) ends every pin of that member at once, for the same reason.
 * Blocks are exposed for remote reads only, so even a READ that broke this
 * rule would read wrong bytes, which the member's checksum rejects; it
 * could never write into reused memory.
 *
 * Knows nothing about connections or the wire: the peer protocol calls it.
 */
#ifndef KVT_PINS_H
#define KVT_PINS_H

#include <stddef.h>
#include <stdint.h>

#include "stats.h"

#define PINS_PER_MEMBER 4096u      /* pins one member may hold at once */

struct pins;

/* Called (with no lock of this module held) for every pin that ends. */
typedef void (*pins_unpin_fn)(void *arg, uint64_t ref);

/* A table for members 0..members-1. Returns 0 or -ENOMEM. */
int pins_open(unsigned members, uint32_t hold_ms, pins_unpin_fn unpin, void *arg,
	      struct pins **out);

/* Ends every pin still held, then frees. */
void pins_close(struct pins *p);

/*
 * Holds the pin ref (of ram_pin) for member from now (kvt_now_ns()) for
 * hold_ms. Returns the
 * pin's id (never 0), or 0 when the member already holds PINS_PER_MEMBER
 * pins or member is out of range: the caller then unpins and answers a
 * miss.
 */
uint64_t pins_hold(struct pins *p, unsigned member, uint64_t ref, uint64_t now);

/* Ends those of ids that member holds; ids of other members, lapsed or
 * unknown ones are ignored. Returns the count ended. */
size_t pins_release(struct pins *p, unsigned member, const uint64_t *ids, size_t n);

/* Ends every pin whose hold lapsed by now. Returns the count. */
size_t pins_lapse(struct pins *p, uint64_t now);

/* Ends every pin of member (its connection is gone). Returns the count. */
size_t pins_drop_member(struct pins *p, unsigned member);

/* Pins held now. */
size_t pins_held(struct pins *p);

/* When the last pin member holds lapses (CLOCK_MONOTONIC ns), or 0 when it
 * holds none. */
uint64_t pins_until(struct pins *p, unsigned member);

/* pins_held (now), pins_taken, pins_released, pins_lapsed, pins_dropped,
 * pins_refused (since open) through v. */
void pins_stats(struct pins *p, const struct stat_visitor *v);

#endif
