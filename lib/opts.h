/*
 * opts.h - the options each tier is opened with, taken from the store's
 * parsed configuration: the one place that knows both, so that no tier
 * depends on the configuration and the store facade, the tests and the
 * benchmark open tiers alike.
 */
#ifndef KVT_OPTS_H
#define KVT_OPTS_H

#include "config.h"
#include "disk.h"
#include "local.h"
#include "peer.h"
#include "ram.h"
#include "slot.h"

struct ram_opts opts_ram(const struct kvt_config *c);
struct disk_opts opts_disk(const struct kvt_config *c);
struct peer_opts opts_peer(const struct kvt_config *c);
struct local_opts opts_local(const struct kvt_config *c);
struct slot_opts opts_slot(const struct kvt_config *c);

/* ram_open() and disk_open() with the options of a configuration. */
int ram_open_cfg(const struct kvt_config *c, ram_spill_fn spill,
		 ram_unspill_fn unspill, void *arg, struct ram_tier **out);
int disk_open_cfg(const struct kvt_config *c, void *fixed_base, size_t fixed_len,
		  const struct kvt_dev_ops *ops, struct disk_tier **out);

#endif
