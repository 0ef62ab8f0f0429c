/*
 * config.c - the store's configuration: defaults, the JSON document of
 * kvtier-config(5) parsed with jansson (size strings such as "1.5GiB" in
 * config_size.c), and the validation of every value with an error text naming its key path
 * ("ram.capacity: ..."). Owns the ranges and cross-checks listed in
 * kvtier-config(5); knows nothing about how the tiers use the values.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "internal.h"
#include "peer.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* Ranges; kvtier-config(5) documents each one. */
#define RAM_CAPACITY_MIN  MiB
#define LEASE_MS_MAX      3600000u
#define THREADS_MAX       64u
#define QUEUE_DEPTH_MAX   4096u
#define REGION_MIN        MiB
#define REGION_DEFAULT    (64 * MiB)
#define REGIONS_WANTED    8 /* per device, when disk.region_size is not given */
#define REGION_MAX        (4 * GiB)
#define REGION_ALIGN      4096u
#define MAX_BLOCK_MIN     4096u
#define MAX_BLOCK_DEFAULT (256 * MiB)
/* A disk record is a 4 KiB header and the block, within one region; its
 * length field holds at most 256 MiB (kvtier-disk(5); disk_impl.h's MAX_LEN). */
#define DISK_RECORD_HEADER 4096u
#define DISK_BLOCK_MAX    (256 * MiB)
#define NUMA_NODE_MAX     1023
#define DISK_PATHS_MAX    64u
#define PEERS_MAX         256u
#define PEER_NAME_MAX     64u
#define PEER_ADDR_MAX     255u
#define PEER_CONNS_MAX    1024u   /* a server's connections, all members */
#define ATTACH_MS_DEFAULT 60000u
#define ATTACH_MS_MAX     3600000u


/* Which optional keys the document set, for defaults that depend on others. */
struct given {
	int max_block;
	int disk_capacity;
	int region_size;
	const char *disk_key; /* some "disk" key other than path, or NULL */
};

static void set_defaults(struct kvt_config *c)
{
	memset(c, 0, sizeof(*c));
	c->ram_capacity = GiB;
	c->lease_ms = 5000;
	c->lease_cap = 0.5;
	c->pin_ms = 10000;
	c->pin_cap = 0.5;
	c->high_watermark = 0.95;
	c->low_watermark = 0.85;
	c->hugepages = KVT_OFF;
	c->mlock = KVT_TRY;
	c->numa_node = -1;
	c->max_block = MAX_BLOCK_DEFAULT;
	c->refuse_when_leased = 0;
	c->threads = 2;
	c->ndisk = 0;
	c->disk_paths = NULL;
	c->disk_capacity = 0;
	c->region_size = REGION_DEFAULT;
	c->queue_depth = 32;
	c->write_policy = KVT_WRITE_ON_EVICT;
	c->promote = 1;
	c->stage_reads = KVT_STAGE_AUTO;
	c->flush_on_close = 1;
	c->peer_connect_ms = 500;
	c->peer_request_ms = 2000;
	c->attach_timeout_ms = ATTACH_MS_DEFAULT;
	c->peer_down_ms = 2000;
	c->peer_log_ms = 10000;
	c->peer_idle_ms = 60000;
	c->peer_max_conns = 64;
	c->local_mode = 0660;
	c->local_max_clients = 64;
	c->local_max_held = 65536;
	c->local_directory = -1;
	c->local_spin_us = 50;
}

void config_free(struct kvt_config *cfg)
{
	if (!cfg)
		return;
	if (cfg->disk_paths) {
		for (unsigned i = 0; i < cfg->ndisk; i++)
			free(cfg->disk_paths[i]);
		free(cfg->disk_paths);
	}
	cfg->disk_paths = NULL;
	cfg->ndisk = 0;
	for (unsigned i = 0; i < cfg->npeers; i++) {
		if (cfg->peer_names)
			free(cfg->peer_names[i]);
		if (cfg->peer_addrs)
			free(cfg->peer_addrs[i]);
	}
	free(cfg->peer_names);
	free(cfg->peer_addrs);
	free(cfg->peer_listen);
	cfg->peer_names = cfg->peer_addrs = NULL;
	cfg->peer_listen = NULL;
	cfg->npeers = 0;
	free(cfg->local_socket);
	free(cfg->local_uids);
	free(cfg->local_gids);
	free(cfg->attach);
	cfg->local_socket = cfg->attach = NULL;
	cfg->local_uids = cfg->local_gids = NULL;
	cfg->local_nuids = cfg->local_ngids = 0;
}

/* --- typed getters; each names its key path on failure ----------------------- */

static const char *json_type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a real number";
	case JSON_TRUE: return "true";
	case JSON_FALSE: return "false";
	case JSON_NULL: return "null";
	}
	return "an unknown JSON value";
}

static int bad_type(const char *key, const char *expected, const json_t *v)
{
	return kvt_fail(-EINVAL, "%s: expected %s, got %s", key, expected,
			json_type_name(v));
}

static int get_size(const char *key, const json_t *v, uint64_t *out)
{
	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		if (i < 0)
			return kvt_fail(-EINVAL, "%s: %" JSON_INTEGER_FORMAT
					" is negative", key, i);
		*out = (uint64_t)i;
		return 0;
	}
	if (json_is_string(v)) {
		char why[160];
		const char *s = json_string_value(v);
		if (config_size_parse(s, out, why, sizeof(why)) < 0)
			return kvt_fail(-EINVAL, "%s: \"%.*s\": %s", key,
					QUOTE_MAX, s, why);
		return 0;
	}
	return bad_type(key, "a size (an integer of bytes or a string such as \"4GiB\")", v);
}

static int get_int(const char *key, const json_t *v, long long min,
		   long long max, long long *out)
{
	if (!json_is_integer(v))
		return bad_type(key, "an integer", v);
	json_int_t i = json_integer_value(v);
	if (i < min || i > max)
		return kvt_fail(-EINVAL, "%s: %" JSON_INTEGER_FORMAT
				" is out of range (%lld to %lld)", key, i, min, max);
	*out = i;
	return 0;
}

static int get_number(const char *key, const json_t *v, double *out)
{
	if (!json_is_number(v))
		return bad_type(key, "a number", v);
	*out = json_number_value(v);
	return 0;
}

static int get_bool(const char *key, const json_t *v, int *out)
{
	if (!json_is_boolean(v))
		return bad_type(key, "true or false", v);
	*out = json_is_true(v);
	return 0;
}

/* true or false (*out 1 or 0), or the string word (*out 2). */
static int get_bool_or(const char *key, const json_t *v, const char *word, int *out)
{
	char want[64];

	if (json_is_boolean(v)) {
		*out = json_is_true(v);
		return 0;
	}
	if (json_is_string(v) && strcmp(json_string_value(v), word) == 0) {
		*out = 2;
		return 0;
	}
	if (json_is_string(v))
		return kvt_fail(-EINVAL, "%s: \"%.*s\" is not true, false or \"%s\"",
				key, QUOTE_MAX, json_string_value(v), word);
	snprintf(want, sizeof(want), "true, false or \"%s\"", word);
	return bad_type(key, want, v);
}

/* false -> KVT_OFF, true -> KVT_REQUIRE, "try" -> KVT_TRY */
static int get_tri(const char *key, const json_t *v, enum kvt_tri *out)
{
	int b;
	int r = get_bool_or(key, v, "try", &b);

	if (!r)
		*out = b == 2 ? KVT_TRY : b ? KVT_REQUIRE : KVT_OFF;
	return r;
}

/* "disk.stage_reads": false -> KVT_STAGE_OFF, true -> KVT_STAGE_ON,
 * "auto" -> KVT_STAGE_AUTO */
static int get_stage_reads(const json_t *v, enum kvt_stage_reads *out)
{
	int b;
	int r = get_bool_or("disk.stage_reads", v, "auto", &b);

	if (!r)
		*out = b == 2 ? KVT_STAGE_AUTO : b ? KVT_STAGE_ON : KVT_STAGE_OFF;
	return r;
}

/* --- sections ----------------------------------------------------------------- */

static int parse_ram(const json_t *ram, struct kvt_config *c, struct given *g)
{
	const char *k;
	json_t *v;
	long long i;
	int r = 0;

	if (!json_is_object(ram))
		return bad_type("ram", "an object", ram);
	json_object_foreach((json_t *)ram, k, v) {
		if (!strcmp(k, "capacity")) {
			r = get_size("ram.capacity", v, &c->ram_capacity);
			if (!r && c->ram_capacity < RAM_CAPACITY_MIN)
				r = kvt_fail(-EINVAL, "ram.capacity: %llu bytes is below the minimum of 1 MiB",
					     (unsigned long long)c->ram_capacity);
		} else if (!strcmp(k, "lease_ms")) {
			r = get_int("ram.lease_ms", v, 1, LEASE_MS_MAX, &i);
			if (!r)
				c->lease_ms = (uint32_t)i;
		} else if (!strcmp(k, "lease_cap")) {
			r = get_number("ram.lease_cap", v, &c->lease_cap);
			if (!r && !(c->lease_cap > 0 && c->lease_cap <= 1))
				r = kvt_fail(-EINVAL, "ram.lease_cap: %g is not a fraction in (0, 1]",
					     c->lease_cap);
		} else if (!strcmp(k, "pin_ms")) {
			r = get_int("ram.pin_ms", v, 1, LEASE_MS_MAX, &i);
			if (!r)
				c->pin_ms = (uint32_t)i;
		} else if (!strcmp(k, "pin_cap")) {
			r = get_number("ram.pin_cap", v, &c->pin_cap);
			if (!r && !(c->pin_cap > 0 && c->pin_cap <= 1))
				r = kvt_fail(-EINVAL, "ram.pin_cap: %g is not a fraction in (0, 1]",
					     c->pin_cap);
		} else if (!strcmp(k, "high_watermark")) {
			r = get_number("ram.high_watermark", v, &c->high_watermark);
			if (!r && !(c->high_watermark > 0 && c->high_watermark <= 1))
				r = kvt_fail(-EINVAL, "ram.high_watermark: %g is not a fraction in (0, 1]",
					     c->high_watermark);
		} else if (!strcmp(k, "low_watermark")) {
			r = get_number("ram.low_watermark", v, &c->low_watermark);
			if (!r && !(c->low_watermark > 0 && c->low_watermark < 1))
				r = kvt_fail(-EINVAL, "ram.low_watermark: %g is not a fraction in (0, 1)",
					     c->low_watermark);
		} else if (!strcmp(k, "hugepages")) {
			r = get_tri("ram.hugepages", v, &c->hugepages);
		} else if (!strcmp(k, "mlock")) {
			r = get_tri("ram.mlock", v, &c->mlock);
		} else if (!strcmp(k, "numa_node")) {
			r = get_int("ram.numa_node", v, -1, NUMA_NODE_MAX, &i);
			if (!r)
				c->numa_node = (int)i;
		} else if (!strcmp(k, "max_block")) {
			r = get_size("ram.max_block", v, &c->max_block);
			g->max_block = 1;
		} else if (!strcmp(k, "refuse_when_leased")) {
			r = get_bool("ram.refuse_when_leased", v, &c->refuse_when_leased);
		} else {
			r = kvt_fail(-EINVAL, "ram.%.*s: unknown key (known: capacity, lease_ms, lease_cap, pin_ms, pin_cap, high_watermark, low_watermark, hugepages, mlock, numa_node, max_block, refuse_when_leased)",
				     QUOTE_MAX, k);
		}
		if (r)
			return r;
	}
	return 0;
}

/* Appends a copy of path to c->disk_paths (sized for cap entries). */
static int add_disk_path(struct kvt_config *c, const char *key, const json_t *v)
{
	if (!json_is_string(v))
		return bad_type(key, "a string (a block device or file path)", v);
	const char *s = json_string_value(v);
	size_t len = strlen(s);
	if (len == 0)
		return kvt_fail(-EINVAL, "%s: empty path", key);
	if (len >= PATH_MAX)
		return kvt_fail(-EINVAL, "%s: path of %zu bytes exceeds PATH_MAX", key, len);
	for (unsigned i = 0; i < c->ndisk; i++)
		if (!strcmp(c->disk_paths[i], s))
			return kvt_fail(-EINVAL, "%s: \"%.*s\" is listed twice", key,
					QUOTE_MAX, s);
	char *dup = strdup(s);
	if (!dup)
		return kvt_fail(-ENOMEM, "%s: out of memory", key);
	c->disk_paths[c->ndisk++] = dup;
	return 0;
}

static int parse_disk_path(const json_t *v, struct kvt_config *c)
{
	size_t n = json_is_array(v) ? json_array_size(v) : 1;

	if (!json_is_string(v) && !json_is_array(v))
		return bad_type("disk.path", "a string or an array of strings", v);
	if (n == 0)
		return kvt_fail(-EINVAL, "disk.path: empty array (give at least one path)");
	if (n > DISK_PATHS_MAX)
		return kvt_fail(-EINVAL, "disk.path: %zu paths, the limit is %u",
				n, DISK_PATHS_MAX);
	c->disk_paths = calloc(n, sizeof(*c->disk_paths));
	if (!c->disk_paths)
		return kvt_fail(-ENOMEM, "disk.path: out of memory");
	if (json_is_string(v))
		return add_disk_path(c, "disk.path", v);
	for (size_t i = 0; i < n; i++) {
		char key[32];
		snprintf(key, sizeof(key), "disk.path[%zu]", i);
		int r = add_disk_path(c, key, json_array_get(v, i));
		if (r)
			return r;
	}
	return 0;
}

static int parse_disk(const json_t *disk, struct kvt_config *c, struct given *g)
{
	const char *k;
	json_t *v;
	long long i;
	int r = 0;

	if (!json_is_object(disk))
		return bad_type("disk", "an object", disk);
	json_object_foreach((json_t *)disk, k, v) {
		if (strcmp(k, "path") != 0 && !g->disk_key)
			g->disk_key = k;
		if (!strcmp(k, "path")) {
			r = parse_disk_path(v, c);
		} else if (!strcmp(k, "capacity")) {
			r = get_size("disk.capacity", v, &c->disk_capacity);
			g->disk_capacity = 1;
		} else if (!strcmp(k, "region_size")) {
			r = get_size("disk.region_size", v, &c->region_size);
			g->region_size = 1;
			if (!r && (c->region_size < REGION_MIN ||
				   c->region_size > REGION_MAX ||
				   c->region_size % REGION_ALIGN))
				r = kvt_fail(-EINVAL, "disk.region_size: %llu bytes is not a multiple of 4096 between 1 MiB and 4 GiB",
					     (unsigned long long)c->region_size);
		} else if (!strcmp(k, "queue_depth")) {
			r = get_int("disk.queue_depth", v, 1, QUEUE_DEPTH_MAX, &i);
			if (!r)
				c->queue_depth = (unsigned)i;
		} else if (!strcmp(k, "write_policy")) {
			const char *s = json_string_value(v);
			if (!s)
				r = bad_type("disk.write_policy", "\"on_evict\" or \"write_through\"", v);
			else if (!strcmp(s, "on_evict"))
				c->write_policy = KVT_WRITE_ON_EVICT;
			else if (!strcmp(s, "write_through"))
				c->write_policy = KVT_WRITE_THROUGH;
			else
				r = kvt_fail(-EINVAL, "disk.write_policy: \"%.*s\" is not \"on_evict\" or \"write_through\"",
					     QUOTE_MAX, s);
		} else if (!strcmp(k, "promote")) {
			r = get_bool("disk.promote", v, &c->promote);
		} else if (!strcmp(k, "stage_reads")) {
			r = get_stage_reads(v, &c->stage_reads);
		} else if (!strcmp(k, "flush_on_close")) {
			r = get_bool("disk.flush_on_close", v, &c->flush_on_close);
		} else {
			r = kvt_fail(-EINVAL, "disk.%.*s: unknown key (known: path, capacity, region_size, queue_depth, write_policy, promote, stage_reads, flush_on_close)",
				     QUOTE_MAX, k);
		}
		if (r)
			return r;
	}
	return 0;
}

/* "host:port": a host (name, IPv4, or [IPv6]) and a port 1..65535. */
static int check_addr(const char *key, const char *a)
{
	const char *colon = strrchr(a, ':');
	char *end;

	if (strlen(a) > PEER_ADDR_MAX)
		return kvt_fail(-EINVAL, "%s: longer than %u characters", key, PEER_ADDR_MAX);
	if (!colon || colon == a)
		return kvt_fail(-EINVAL, "%s: \"%.*s\" is not host:port", key, QUOTE_MAX, a);
	if ((a[0] == '[' && colon[-1] != ']') ||
	    (a[0] != '[' && memchr(a, ':', (size_t)(colon - a))))
		return kvt_fail(-EINVAL, "%s: \"%.*s\": an IPv6 host is written [addr]:port",
				key, QUOTE_MAX, a);
	errno = 0;
	long port = strtol(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || port < 1 || port > 65535)
		return kvt_fail(-EINVAL, "%s: \"%.*s\": the port must be 1..65535", key,
				QUOTE_MAX, a);
	return 0;
}

static int get_peer_string(const char *key, const json_t *v, size_t max, char **out)
{
	const char *s = json_string_value(v);

	if (!s)
		return bad_type(key, "a string", v);
	if (!*s)
		return kvt_fail(-EINVAL, "%s: empty", key);
	if (strlen(s) > max)
		return kvt_fail(-EINVAL, "%s: longer than %zu characters", key, max);
	*out = strdup(s);
	return *out ? 0 : kvt_fail(-ENOMEM, "%s: out of memory", key);
}

static int parse_members(const json_t *v, struct kvt_config *c)
{
	size_t n = json_array_size(v);

	if (!json_is_array(v))
		return bad_type("peers.members", "an array of {\"name\", \"addr\"}", v);
	if (n == 0)
		return kvt_fail(-EINVAL, "peers.members: empty (list every node, this one too)");
	if (n > PEERS_MAX)
		return kvt_fail(-EINVAL, "peers.members: %zu members, the limit is %u", n, PEERS_MAX);
	c->peer_names = calloc(n, sizeof(char *));
	c->peer_addrs = calloc(n, sizeof(char *));
	if (!c->peer_names || !c->peer_addrs)
		return kvt_fail(-ENOMEM, "peers.members: out of memory");
	c->npeers = (unsigned)n;
	for (size_t i = 0; i < n; i++) {
		json_t *m = json_array_get(v, i), *x;
		const char *k;
		char key[64];
		int r;

		snprintf(key, sizeof(key), "peers.members[%zu]", i);
		if (!json_is_object(m))
			return bad_type(key, "an object {\"name\", \"addr\"}", m);
		json_object_foreach(m, k, x) {
			if (strcmp(k, "name") && strcmp(k, "addr"))
				return kvt_fail(-EINVAL, "%s.%.*s: unknown key (known: name, addr)",
						key, QUOTE_MAX, k);
		}
		snprintf(key, sizeof(key), "peers.members[%zu].name", i);
		if (!json_object_get(m, "name"))
			return kvt_fail(-EINVAL, "%s: missing", key);
		r = get_peer_string(key, json_object_get(m, "name"), PEER_NAME_MAX,
				    &c->peer_names[i]);
		if (r)
			return r;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(c->peer_names[j], c->peer_names[i]))
				return kvt_fail(-EINVAL, "%s: \"%s\" is also member %zu", key,
						c->peer_names[i], j);
		snprintf(key, sizeof(key), "peers.members[%zu].addr", i);
		if (!json_object_get(m, "addr"))
			return kvt_fail(-EINVAL, "%s: missing", key);
		r = get_peer_string(key, json_object_get(m, "addr"), PEER_ADDR_MAX,
				    &c->peer_addrs[i]);
		if (!r)
			r = check_addr(key, c->peer_addrs[i]);
		if (r)
			return r;
	}
	return 0;
}

static int get_ms(const char *key, const json_t *v, uint32_t *out)
{
	long long i = 0;
	int r = get_int(key, v, 1, PEER_MS_MAX, &i);

	if (!r)
		*out = (uint32_t)i;
	return r;
}

static int parse_peers(const json_t *peers, struct kvt_config *c)
{
	const char *k, *self = NULL;
	json_t *v;
	int r = 0;

	if (!json_is_object(peers))
		return bad_type("peers", "an object", peers);
	json_object_foreach((json_t *)peers, k, v) {
		if (!strcmp(k, "self")) {
			self = json_string_value(v);
			if (!self)
				r = bad_type("peers.self", "a string", v);
		} else if (!strcmp(k, "members")) {
			r = parse_members(v, c);
		} else if (!strcmp(k, "listen")) {
			r = get_peer_string("peers.listen", v, PEER_ADDR_MAX, &c->peer_listen);
			if (!r)
				r = check_addr("peers.listen", c->peer_listen);
		} else if (!strcmp(k, "transport")) {
			const char *t = json_string_value(v);
			if (!t)
				r = bad_type("peers.transport", "\"tcp\", \"rdma\" or \"auto\"", v);
			else if (!strcmp(t, "tcp"))
				c->peer_transport = PEER_TCP;
			else if (!strcmp(t, "rdma"))
				c->peer_transport = PEER_RDMA;
			else if (!strcmp(t, "auto"))
				c->peer_transport = PEER_AUTO;
			else
				r = kvt_fail(-EINVAL, "peers.transport: \"%.*s\" is not \"tcp\", "
					     "\"rdma\" or \"auto\"", QUOTE_MAX, t);
		} else if (!strcmp(k, "connect_timeout_ms")) {
			r = get_ms("peers.connect_timeout_ms", v, &c->peer_connect_ms);
		} else if (!strcmp(k, "request_timeout_ms")) {
			r = get_ms("peers.request_timeout_ms", v, &c->peer_request_ms);
		} else if (!strcmp(k, "down_ms")) {
			r = get_ms("peers.down_ms", v, &c->peer_down_ms);
		} else if (!strcmp(k, "log_interval_ms")) {
			r = get_ms("peers.log_interval_ms", v, &c->peer_log_ms);
		} else if (!strcmp(k, "idle_timeout_ms")) {
			r = get_ms("peers.idle_timeout_ms", v, &c->peer_idle_ms);
		} else if (!strcmp(k, "promote")) {
			r = get_bool("peers.promote", v, &c->peer_promote);
		} else if (!strcmp(k, "max_conns_per_member")) {
			long long i = 0;
			r = get_int("peers.max_conns_per_member", v, 1, PEER_CONNS_MAX, &i);
			c->peer_max_conns = (unsigned)i;
		} else {
			r = kvt_fail(-EINVAL, "peers.%.*s: unknown key (known: self, listen, members, transport, connect_timeout_ms, request_timeout_ms, down_ms, idle_timeout_ms, max_conns_per_member, log_interval_ms, promote)",
				     QUOTE_MAX, k);
		}
		if (r)
			return r;
	}
	if (!c->npeers)
		return kvt_fail(-EINVAL, "peers.members: missing (list every node, this one too)");
	if (!self)
		return kvt_fail(-EINVAL, "peers.self: missing (the name of this node in peers.members)");
	for (c->peer_self = 0; c->peer_self < c->npeers; c->peer_self++)
		if (!strcmp(c->peer_names[c->peer_self], self))
			break;
	if (c->peer_self == c->npeers)
		return kvt_fail(-EINVAL, "peers.self: \"%.*s\" is not the name of any of peers.members",
				QUOTE_MAX, self);
	if (!c->peer_listen) {
		c->peer_listen = strdup(c->peer_addrs[c->peer_self]);
		if (!c->peer_listen)
			return kvt_fail(-ENOMEM, "peers.listen: out of memory");
	}
	return 0;
}

/* --- local: the node store's Unix socket, and attaching to one ------------- */

#define LOCAL_PATH_MAX 107u    /* sun_path holds 108 bytes with its NUL */
#define LOCAL_IDS_MAX 256u
#define LOCAL_CLIENTS_MAX 4096u
#define LOCAL_HELD_MAX (1u << 24)
#define LOCAL_DIRECTORY_MAX (1u << 26) /* DIR_SLOTS_MAX of ram_dir.h */
#define LOCAL_SPIN_MAX 1000 /* LP_SPIN_MAX of local_proto.h */

static int get_socket_path(const char *key, const json_t *v, char **out)
{
	const char *p = json_string_value(v);

	if (!p)
		return bad_type(key, "a string (the socket's path)", v);
	if (!*p)
		return kvt_fail(-EINVAL, "%s: the path is empty", key);
	if (strlen(p) > LOCAL_PATH_MAX)
		return kvt_fail(-EINVAL, "%s: \"%.*s\" is longer than the %u bytes a Unix "
				"socket's path may have", key, QUOTE_MAX, p, LOCAL_PATH_MAX);
	free(*out);
	if (!(*out = strdup(p)))
		return kvt_fail(-ENOMEM, "%s: out of memory", key);
	return 0;
}

/* An array of user or group ids. */
static int get_ids(const char *key, const json_t *v, uint32_t **ids, unsigned *n)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v))
		return bad_type(key, "an array of numeric ids", v);
	if (json_array_size(v) > LOCAL_IDS_MAX)
		return kvt_fail(-EINVAL, "%s: more than %u ids", key, LOCAL_IDS_MAX);
	free(*ids);
	*ids = calloc(json_array_size(v) + 1, sizeof(**ids));
	*n = 0;
	if (!*ids)
		return kvt_fail(-ENOMEM, "%s: out of memory", key);
	json_array_foreach(v, i, e) {
		long long id = 0;
		char k[64];
		snprintf(k, sizeof(k), "%s[%zu]", key, i);
		int r = get_int(k, e, 0, UINT32_MAX - 1ll, &id);
		if (r)
			return r;
		(*ids)[(*n)++] = (uint32_t)id;
	}
	return 0;
}

static int parse_local(const json_t *local, struct kvt_config *c)
{
	const char *k;
	json_t *v;
	long long i = 0;
	int r = 0;

	if (!json_is_object(local))
		return bad_type("local", "an object", local);
	json_object_foreach((json_t *)local, k, v) {
		if (!strcmp(k, "socket")) {
			r = get_socket_path("local.socket", v, &c->local_socket);
		} else if (!strcmp(k, "mode")) {
			r = get_int("local.mode", v, 0, 0777, &i);
			c->local_mode = (unsigned)i;
		} else if (!strcmp(k, "uids")) {
			r = get_ids("local.uids", v, &c->local_uids, &c->local_nuids);
		} else if (!strcmp(k, "gids")) {
			r = get_ids("local.gids", v, &c->local_gids, &c->local_ngids);
		} else if (!strcmp(k, "max_clients")) {
			r = get_int("local.max_clients", v, 1, LOCAL_CLIENTS_MAX, &i);
			c->local_max_clients = (unsigned)i;
		} else if (!strcmp(k, "max_held")) {
			r = get_int("local.max_held", v, 64, LOCAL_HELD_MAX, &i);
			c->local_max_held = (unsigned)i;
		} else if (!strcmp(k, "spin_us")) {
			r = get_int("local.spin_us", v, 0, LOCAL_SPIN_MAX, &i);
			c->local_spin_us = (unsigned)i;
		} else if (!strcmp(k, "directory")) {
			r = get_int("local.directory", v, 0, LOCAL_DIRECTORY_MAX, &i);
			c->local_directory = i;
		} else {
			r = kvt_fail(-EINVAL, "local.%.*s: unknown key (known: socket, mode, uids, gids, max_clients, max_held, spin_us, directory)",
				     QUOTE_MAX, k);
		}
		if (r)
			return r;
	}
	if (!c->local_socket)
		return kvt_fail(-EINVAL, "local.socket: missing (the path of the Unix socket to serve)");
	return 0;
}

/* A region of a power of two p of bytes below the default, as the default
 * sizing makes it: p and 1/64 more, for the record headers, so that it
 * holds a whole number of power-of-two blocks of 256 KiB or more with
 * theirs (two of 1 MiB in 2 MiB + 32 KiB). */
static uint64_t region_of(uint64_t p)
{
	return p >= REGION_DEFAULT ? p : p + p / 64;
}

/*
 * disk.region_size when the key is not given: 64 MiB, or, where a device
 * would hold fewer than REGIONS_WANTED of those, the largest power of two
 * down to 1 MiB of which it holds that many (or 1 MiB), plus 1/64
 * (region_of), so that a small tier still opens and reclaims a small share
 * of itself at a time; never smaller than a given ram.max_block and its
 * record header need.
 */
static uint64_t auto_region_size(const struct kvt_config *c, const struct given *g)
{
	uint64_t per_dev = c->disk_capacity / c->ndisk, p = REGION_DEFAULT;

	while (p / 2 >= REGION_MIN && per_dev / p < REGIONS_WANTED &&
	       (!g->max_block || region_of(p / 2) - DISK_RECORD_HEADER >= c->max_block))
		p /= 2;
	return region_of(p);
}

/* Checks that involve several keys, and defaults that depend on others. */
static int cross_check(struct kvt_config *c, const struct given *g)
{
	if (c->low_watermark >= c->high_watermark)
		return kvt_fail(-EINVAL, "ram.low_watermark: %g must be below ram.high_watermark (%g)",
				c->low_watermark, c->high_watermark);

	if (c->ndisk == 0 && g->disk_key)
		return kvt_fail(-EINVAL, "disk.path: missing, but disk.%.*s is given (a disk tier needs a path)",
				QUOTE_MAX, g->disk_key);
	if (c->ndisk) {
		if (!g->disk_capacity)
			return kvt_fail(-EINVAL, "disk.capacity: required when disk.path is given");
		if (!g->region_size)
			c->region_size = auto_region_size(c, g);
		if (c->disk_capacity / 2 < c->region_size)
			return kvt_fail(-EINVAL, "disk.capacity: %llu bytes is less than two regions (disk.region_size %llu)",
					(unsigned long long)c->disk_capacity,
					(unsigned long long)c->region_size);
	}

	uint64_t limit = c->ram_capacity;
	const char *why = "ram.capacity";
	if (c->ndisk && c->region_size - DISK_RECORD_HEADER < limit) {
		limit = c->region_size - DISK_RECORD_HEADER;
		why = "disk.region_size less its 4096-byte record header";
	}
	/* A block RAM takes but the disk cannot hold would be acknowledged and
	 * then lost when RAM evicts it. */
	if (c->ndisk && DISK_BLOCK_MAX < limit) {
		limit = DISK_BLOCK_MAX;
		why = "the largest block the disk tier holds";
	}
	if (!g->max_block) {
		/* Without a disk tier an evicted block is dropped: one larger
		 * than the high watermark would start an eviction down to the
		 * low one as soon as it is put, and be the block it drops. */
		uint64_t high = (uint64_t)((double)c->ram_capacity * c->high_watermark) /
				4096 * 4096;
		if (!c->ndisk && high >= MAX_BLOCK_MIN && high < limit)
			limit = high;
		if (c->max_block > limit)
			c->max_block = limit;
		return 0;
	}
	if (c->max_block < MAX_BLOCK_MIN)
		return kvt_fail(-EINVAL, "ram.max_block: %llu bytes is below the minimum of 4096",
				(unsigned long long)c->max_block);
	if (c->max_block > limit)
		return kvt_fail(-EINVAL, "ram.max_block: %llu bytes exceeds %s (%llu)",
				(unsigned long long)c->max_block, why,
				(unsigned long long)limit);
	return 0;
}

static int apply(const json_t *root, struct kvt_config *c)
{
	struct given g = { 0 };
	const char *k;
	json_t *v;
	long long i;
	int r = 0;

	if (!json_is_object(root))
		return kvt_fail(-EINVAL, "config: the top level must be a JSON object, got %s",
				json_type_name(root));
	json_object_foreach((json_t *)root, k, v) {
		if (!strcmp(k, "ram")) {
			r = parse_ram(v, c, &g);
		} else if (!strcmp(k, "threads")) {
			r = get_int("threads", v, 1, THREADS_MAX, &i);
			if (!r)
				c->threads = (unsigned)i;
		} else if (!strcmp(k, "disk")) {
			r = parse_disk(v, c, &g);
		} else if (!strcmp(k, "peers")) {
			r = parse_peers(v, c);
		} else if (!strcmp(k, "local")) {
			r = parse_local(v, c);
		} else if (!strcmp(k, "attach")) {
			r = get_socket_path("attach", v, &c->attach);
		} else if (!strcmp(k, "attach_timeout_ms")) {
			r = get_int("attach_timeout_ms", v, 0, ATTACH_MS_MAX, &i);
			if (!r)
				c->attach_timeout_ms = (uint32_t)i;
		} else {
			r = kvt_fail(-EINVAL, "%.*s: unknown key (known: ram, threads, disk, "
				     "peers, local, attach, attach_timeout_ms)", QUOTE_MAX, k);
		}
		if (r)
			return r;
	}
	/* An attached store is the node store's: its own tiers are configured
	 * there, never here. */
	if (c->attach)
		json_object_foreach((json_t *)root, k, v)
			if (strcmp(k, "attach") && strcmp(k, "attach_timeout_ms"))
				return kvt_fail(-EINVAL, "%.*s: not allowed beside \"attach\" (an "
						"attached store uses the node store's configuration)",
						QUOTE_MAX, k);
	if (!c->attach && json_object_get(root, "attach_timeout_ms"))
		return kvt_fail(-EINVAL, "attach_timeout_ms: only beside \"attach\" (it bounds "
				"an attached store's requests to its node store)");
	return cross_check(c, &g);
}

int config_parse(const char *json, struct kvt_config *cfg)
{
	struct kvt_config c;
	json_error_t e;

	if (!cfg)
		return kvt_fail(-EINVAL, "config_parse: cfg is NULL");
	set_defaults(&c);
	if (!json || !*json) {
		*cfg = c;
		return 0;
	}
	json_t *root = json_loads(json, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
	if (!root) {
		set_defaults(cfg);
		return config_json_error(json, &e);
	}
	int r = apply(root, &c);
	json_decref(root);
	if (r) {
		config_free(&c);
		set_defaults(cfg);
		return r;
	}
	*cfg = c;
	return 0;
}
