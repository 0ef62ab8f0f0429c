/*
 * config.h - the store's configuration: parsed from JSON text (jansson),
 * validated, with defaults. Knows nothing about how the values are used.
 */
#ifndef KVT_CONFIG_H
#define KVT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum kvt_tri { KVT_OFF = 0, KVT_TRY = 1, KVT_REQUIRE = 2 };
enum kvt_write_policy { KVT_WRITE_ON_EVICT = 0, KVT_WRITE_THROUGH = 1 };
/* "disk.stage_reads": "auto" (0, the default), true, false */
enum kvt_stage_reads { KVT_STAGE_AUTO = 0, KVT_STAGE_ON = 1, KVT_STAGE_OFF = 2 };

struct kvt_config {
	/* ram */
	uint64_t ram_capacity;    /* bytes; "ram.capacity", default 1 GiB */
	uint32_t lease_ms;        /* "ram.lease_ms", default 5000 */
	double lease_cap;         /* "ram.lease_cap": fraction of capacity, default 0.5 */
	uint32_t pin_ms;          /* "ram.pin_ms": slots lapse after, default 10000 */
	double pin_cap;           /* "ram.pin_cap": fraction of capacity, default 0.5 */
	double high_watermark;    /* "ram.high_watermark", default 0.95 */
	double low_watermark;     /* "ram.low_watermark", default 0.85 */
	enum kvt_tri hugepages;   /* "ram.hugepages": false|true|"try", default false */
	enum kvt_tri mlock;       /* "ram.mlock": false|true|"try", default "try" */
	int numa_node;            /* "ram.numa_node": -1 (none, default) or a node */
	uint64_t max_block;       /* "ram.max_block", default 256 MiB */
	int refuse_when_leased;   /* "ram.refuse_when_leased", default false: when
				     RAM holds only leased blocks, refuse a put
				     (-ENOSPC) instead of writing it to disk */
	/* store */
	unsigned threads;         /* "threads": async workers, default 2 */
	/* disk (ndisk == 0: no disk tier) */
	unsigned ndisk;           /* number of "disk.path" entries */
	char **disk_paths;        /* "disk.path": string or array of strings */
	uint64_t disk_capacity;   /* "disk.capacity": total bytes across paths */
	uint64_t region_size;     /* "disk.region_size", default 64 MiB */
	unsigned queue_depth;     /* "disk.queue_depth", default 32 */
	enum kvt_write_policy write_policy; /* "disk.write_policy" */
	int promote;              /* "disk.promote": copy disk hits to RAM, default true */
	enum kvt_stage_reads stage_reads; /* "disk.stage_reads", default "auto" */
	int flush_on_close;       /* "disk.flush_on_close", default true: kvt_close
				     writes RAM's blocks that disk lacks to it */
	/* peers (npeers == 0: no peer tier) */
	unsigned npeers;          /* entries of "peers.members" */
	char **peer_names;        /* "peers.members[i].name" */
	char **peer_addrs;        /* "peers.members[i].addr": "host:port" */
	unsigned peer_self;       /* index of "peers.self" in the members */
	char *peer_listen;        /* "peers.listen", default self's addr */
	uint32_t peer_connect_ms; /* "peers.connect_timeout_ms", default 500 */
	uint32_t peer_request_ms; /* "peers.request_timeout_ms", default 2000 */
	uint32_t peer_down_ms;    /* "peers.down_ms", default 2000 */
	uint32_t peer_idle_ms;    /* "peers.idle_timeout_ms", default 60000: the
				     server closes a connection idle so long */
	int peer_transport;       /* "peers.transport": PEER_TCP (default), PEER_RDMA, PEER_AUTO */
	unsigned peer_max_conns;  /* "peers.max_conns_per_member", default 64 */
	int peer_promote;         /* "peers.promote", default 0: copy blocks
				     loaded from their owner into this RAM */
	uint32_t peer_log_ms;     /* "peers.log_interval_ms", default 10000: at
				     most one line a period about refused
				     strangers */
	/* local: processes of this node attached over a Unix socket
	 * (local_socket NULL: none) */
	char *local_socket;       /* "local.socket": the socket's path */
	unsigned local_mode;      /* "local.mode": its permission bits, default 0660 */
	unsigned local_nuids, local_ngids;
	uint32_t *local_uids;     /* "local.uids": users allowed besides this one */
	uint32_t *local_gids;     /* "local.gids": groups allowed */
	unsigned local_max_clients; /* "local.max_clients", default 64 */
	unsigned local_max_held;  /* "local.max_held": leases, pins and reservations
				     one client may hold, default 65536 */
	unsigned local_spin_us;   /* "local.spin_us": microseconds either end
				     polls for the other's next frame before
				     sleeping, default 50 (0: sleep at once) */
	long long local_directory; /* "local.directory": blocks the directory
				     shared with attached processes names at
				     most (0: none); -1 (default): one per
				     64 KiB of ram.capacity */
	/* attach: this store is a client of the node store at this socket */
	char *attach;             /* "attach" */
	uint32_t attach_timeout_ms; /* "attach_timeout_ms", default 60000: how
				     long an attached store waits for the
				     node store's answer to a request (0: no
				     bound) */
};

/*
 * Fills cfg with the defaults, then applies json (NULL or "" keeps the
 * defaults). Returns 0, or -EINVAL with kvt_last_error() naming the key for
 * malformed JSON, unknown keys, wrong types and impossible values. (Whether
 * an RDMA device serves "peers.transport": "rdma" is learnt at kvt_open.)
 * On failure cfg holds nothing to free.
 */
int config_parse(const char *json, struct kvt_config *cfg);

/* Frees what config_parse allocated (disk paths, peers). Safe on a zeroed
 * config. */
void config_free(struct kvt_config *cfg);

/*
 * Sets kvt_last_error() for text, which jansson refused with e, and returns
 * -EINVAL: malformed JSON by line and column; a key given twice, or an
 * integer beyond 64 bits, under the key path of its member (config_path.c).
 * The json_error_t of <jansson.h>, which a caller of it includes.
 */
struct json_error_t;
int config_json_error(const char *text, const struct json_error_t *e);

/*
 * Parses a size: a non-negative integer of bytes, or a string "N", "N B",
 * "N K|M|G|T", "N KB|MB|GB|TB" (powers of 1024, as are KiB..TiB), with an
 * optional fraction ("1.5GiB"). Returns 0 or -EINVAL (negative, empty,
 * unknown unit, overflow).
 */
int parse_size(const char *s, uint64_t *out);
/* Longest piece of user text quoted in a configuration error message. */
#define QUOTE_MAX 64
/* The parser behind parse_size() (config_size.c): 0, or -EINVAL with the
 * reason (without the input) written into why. */
int config_size_parse(const char *s, uint64_t *out, char *why, size_t whylen);

#endif
