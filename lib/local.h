/*
 * local.h - one store per node: the store's Unix socket, served to the
 * processes of this machine (local_server.c, with local_requests.c and
 * local_held.c), and a store that is attached to such a socket instead of
 * holding tiers of its own (local_client.c, its slot calls in
 * local_slots.c).
 * The frames between them are in local_proto.h. store.c opens the server
 * when local.socket is set and hands every public call of an attached store
 * to the client.
 */
#ifndef KVT_LOCAL_H
#define KVT_LOCAL_H

#include <stddef.h>

#include <stdint.h>

#include "kvtier.h"
#include "stats.h"

struct local_server;
struct local_client;

/* What the local server is opened with (opts.c fills it from the store's
 * configuration: the "local" section, and the ram keys it serves by). */
struct local_opts {
	const char *socket;       /* the socket's path (local.socket) */
	unsigned mode;            /* its permission bits (local.mode) */
	const uint32_t *uids;     /* users served besides this one (local.uids) */
	unsigned nuids;
	const uint32_t *gids;     /* primary groups served (local.gids) */
	unsigned ngids;
	unsigned max_clients;     /* processes served at once */
	unsigned max_held;        /* leases, pins and reservations per process */
	uint64_t max_block;       /* the largest block a client may put */
	uint32_t lease_ms;        /* how long a client's lease lasts */
	uint32_t pin_ms;          /* how long a client's slot lives */
	unsigned spin_us;         /* local.spin_us: polling before sleeping */
};

/*
 * Serves s on o->socket: binds it (taking over a socket file that
 * nobody listens on any more), sets its mode and starts the acceptor.
 * arena_fd is the memfd of s's arena, sent to every client. *out is set
 * before the first client can be served. Returns 0, or
 * -EADDRINUSE (another store serves the path), -EEXIST (the path is not a
 * socket), -ENOMEM, or another -errno of the socket calls.
 */
int local_server_open(const struct local_opts *o, kvt_store *s, int arena_fd,
		      struct local_server **out);
/* Closes every client's connection (releasing what it holds), stops the
 * acceptor and removes the socket file. NULL: no-op. */
void local_server_close(struct local_server *srv);
/* Reports the server's counters and what its clients hold to v. */
void local_server_stats(struct local_server *srv, const struct stat_visitor *v);

/*
 * Connects to the node store at path, says HELLO and maps its arena.
 * Returns 0, -ENOENT or -ECONNREFUSED (no store there), -EACCES (the
 * socket's permissions or the store's local.uids and local.gids refuse this
 * process), -EUSERS (the store serves local.max_clients processes already),
 * -EPROTONOSUPPORT, -EPROTO, -ETIMEDOUT (no connection or HELLO answer
 * within lp_hello_ms, local_proto.h), -ENOMEM. Each later request waits
 * timeout_ms at most for its answer (0: as long as the node store takes):
 * past that it fails with -ETIMEDOUT and every later call with -ENOTCONN.
 */
int local_client_open(const char *path, unsigned timeout_ms, struct local_client **out);
void local_client_close(struct local_client *c);

/* The public calls, for an attached store: the same arguments (already
 * checked by the caller where store.c checks them), results and errors as
 * kvtier.h says. */
int local_put_ops(struct local_client *c, kvt_op *ops, size_t n);
int local_get_ops(struct local_client *c, kvt_op *ops, size_t n);
int local_lookup(struct local_client *c, const kvt_key *keys, size_t n,
		 unsigned flags, size_t *found);
int local_release(struct local_client *c, const kvt_key *keys, size_t n);
int local_remove(struct local_client *c, kvt_key key);
int local_stats_json(struct local_client *c, char *buf, size_t cap);
void local_arena(struct local_client *c, void **base, size_t *len);
uint64_t local_max_block(struct local_client *c);
int local_reserve(struct local_client *c, kvt_slot *slots, size_t n);
int local_end(struct local_client *c, kvt_slot *slots, size_t n, int publish);
int local_pin(struct local_client *c, kvt_slot *slots, size_t n);
int local_unpin(struct local_client *c, const kvt_slot *slots, size_t n);

/* The client of an attached store, or NULL (store.c). */
struct local_client *store_client(kvt_store *s);
/* The memfd of the node store's directory of RAM blocks and its size, or
 * -1 (store.c). */
int store_directory(kvt_store *s, size_t *len);
/* Counts hits attached processes served from the directory (store.c). */
void store_note_ram_hits(kvt_store *s, const kvt_key *keys, size_t n);

#endif
