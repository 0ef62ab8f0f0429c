/*
 * opts.c - the tiers' options from the store's configuration (opts.h).
 * Knows the configuration and the tiers' option structs, nothing else.
 */
#include "opts.h"

/* The directory's entries: local.directory, or one per 64 KiB of RAM. */
static uint64_t dir_slots(const struct kvt_config *c)
{
	if (!c->local_socket)
		return 0;
	if (c->local_directory >= 0)
		return (uint64_t)c->local_directory;
	uint64_t n = c->ram_capacity >> 16;
	return n < (1u << 26) ? n : (1u << 26);
}

struct ram_opts opts_ram(const struct kvt_config *c)
{
	return (struct ram_opts){
		.capacity = c->ram_capacity,
		.hugepages = c->hugepages,
		.mlock = c->mlock,
		.numa_node = c->numa_node,
		.high_watermark = c->high_watermark,
		.low_watermark = c->low_watermark,
		.lease_cap = c->lease_cap,
		.max_block = c->max_block,
		.shared = c->local_socket != NULL,
		.dir_slots = dir_slots(c),
	};
}

struct disk_opts opts_disk(const struct kvt_config *c)
{
	return (struct disk_opts){
		.ndev = c->ndisk,
		.paths = c->disk_paths,
		.capacity = c->disk_capacity,
		.region_size = c->region_size,
		.queue_depth = c->queue_depth,
		.stage_reads = c->stage_reads == KVT_STAGE_ON ? DISK_STAGE_ON :
			       c->stage_reads == KVT_STAGE_OFF ? DISK_STAGE_OFF : DISK_STAGE_AUTO,
	};
}

struct peer_opts opts_peer(const struct kvt_config *c)
{
	return (struct peer_opts){
		.nmembers = c->npeers,
		.names = c->peer_names,
		.addrs = c->peer_addrs,
		.self = c->peer_self,
		.listen = c->peer_listen,
		.max_block = c->max_block,
		.connect_ms = c->peer_connect_ms,
		.request_ms = c->peer_request_ms,
		.down_ms = c->peer_down_ms,
		.idle_ms = c->peer_idle_ms,
		.log_ms = c->peer_log_ms,
		.max_conns = c->peer_max_conns,
		.transport = c->peer_transport,
	};
}

struct local_opts opts_local(const struct kvt_config *c)
{
	return (struct local_opts){
		.socket = c->local_socket,
		.mode = c->local_mode,
		.uids = c->local_uids,
		.nuids = c->local_nuids,
		.gids = c->local_gids,
		.ngids = c->local_ngids,
		.max_clients = c->local_max_clients,
		.max_held = c->local_max_held,
		.spin_us = c->local_spin_us,
		.max_block = c->max_block,
		.lease_ms = c->lease_ms,
		.pin_ms = c->pin_ms,
	};
}

int ram_open_cfg(const struct kvt_config *c, ram_spill_fn spill,
		 ram_unspill_fn unspill, void *arg, struct ram_tier **out)
{
	struct ram_opts o = opts_ram(c);

	return ram_open(&o, spill, unspill, arg, out);
}

int disk_open_cfg(const struct kvt_config *c, void *fixed_base, size_t fixed_len,
		  const struct kvt_dev_ops *ops, struct disk_tier **out)
{
	struct disk_opts o = opts_disk(c);

	return disk_open(&o, fixed_base, fixed_len, ops, out);
}

struct slot_opts opts_slot(const struct kvt_config *c)
{
	return (struct slot_opts){
		.pin_ms = c->pin_ms,
		.pin_cap = c->pin_cap,
		.max_block = c->max_block,
		.promote = c->promote,
		.write_through = c->write_policy == KVT_WRITE_THROUGH,
		.queue_depth = c->queue_depth,
	};
}
