/*
 * slot.h - zero-copy slots: arena space lent to the engine to write a block
 * into before it is published (kvt_put_reserve), and blocks pinned where
 * they lie to be read in place (kvt_get_pin), each behind a handle that
 * lapses after ram.pin_ms; disk hits (and blocks a peer owns) read into
 * fresh slots by loader threads and reported through pin batches. Reaches the tiers through ram.h and
 * disk.h only; the store owns one slot table.
 */
#ifndef KVT_SLOT_H
#define KVT_SLOT_H

#include "disk.h"
#include "ram.h"

struct slot_table;

/* What the slot table is opened with (opts_slot() fills it from a store's
 * configuration). */
struct slot_opts {
	uint32_t pin_ms;           /* a pin or reservation lapses after */
	double pin_cap;            /* fraction of the arena slots may hold */
	uint64_t max_block;        /* largest block (a peer load's first size) */
	int promote;               /* verified loads may become RAM blocks */
	int write_through;         /* committed blocks are written to disk */
	unsigned queue_depth;      /* the disk's depth: loader threads follow it */
};

/*
 * Creates the slot table of a store whose tiers are ram and disk (NULL: no
 * disk tier). kick(arg) is called when a reservation found no room, to wake
 * the evictor. Loader threads start at the first pin that needs one.
 * Returns 0 or -ENOMEM.
 */
int slot_open(const struct slot_opts *o, struct ram_tier *ram,
	      struct disk_tier *disk, void (*kick)(void *arg), void *arg,
	      struct slot_table **out);

/*
 * How the slots reach keys that another member of the node's cluster owns:
 * owner(arg, key) is that member, or -1 when this node owns key (or has no
 * peers); read(arg, owner, key, buf, cap, &len, &sum) reads the owner's copy
 * into buf (cap bytes), verified against sum and counted like a get's peer
 * hit or miss, and returns 0 (len and sum set) or a get's -errno (a member that cannot answer:
 * -ENOENT); put(arg, key, data, len) stores a block at the member that
 * owns it as kvt_put does (counted as a peer put or failure).
 */
struct slot_peers {
	int (*owner)(void *arg, kvt_key key);
	int (*read)(void *arg, int owner, kvt_key key, void *buf, size_t cap, size_t *len,
		    uint64_t *sum);
	void (*put)(void *arg, kvt_key key, const void *data, size_t len);
	void *arg;
};

/* Lets kvt_get_pin load blocks that a peer owns (the store, once its peers
 * are open, before any pin). */
void slot_set_peers(struct slot_table *t, const struct slot_peers *p);

/*
 * kvt_put_reserve of a store with tiers, its arguments checked. A slot
 * whose keep[i] is set (keep NULL: none) is reserved for the length of one
 * library call, that of an attached process's kvt_put: it never lapses
 * after ram.pin_ms, since that process writes it and commits or aborts it
 * at once (or its connection closes, which aborts it).
 */
int slot_reserve(struct slot_table *t, kvt_slot *slots, size_t n, const uint8_t *keep);

/*
 * kvt_get_pin, its arguments checked. With keep, the pins are the
 * library's own, those behind one get of an attached process whose first
 * pin may have lapsed (its copy, or the wait for the answer once the load
 * into it landed, outlasted ram.pin_ms): they never lapse, and that
 * process unpins them as soon as it has copied (or its connection closes,
 * which unpins them).
 */
int slot_get_pin(kvt_store *s, kvt_slot *slots, size_t n, int keep, kvt_pin_batch **out);

/* Finishes queued loads, stops the loaders and gives back every slot still
 * held; before the tiers close. NULL: no-op. */
void slot_close(struct slot_table *t);

/* Reports the slot counters through v (stats.h). */
struct stat_visitor;
void slot_stats(struct slot_table *t, const struct stat_visitor *v);

/* The slot table of an open store (store.c). */
struct slot_table *store_slots(kvt_store *s);

#endif
