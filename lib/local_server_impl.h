/*
 * local_server_impl.h - what the three files of the node store's Unix
 * socket server share and nothing outside them sees: the server, a client's
 * connection and what the client holds (struct local_server, struct conn,
 * struct held, the key map), and the calls one file makes into another.
 * local_server.c owns the socket: accepting, the thread of each connection,
 * reading and writing frames, open, close and counters. local_requests.c
 * serves one request frame through the store's public calls.
 * local_held.c keeps the books of what each client holds (leases, pins,
 * reservations) and gives it all back when the client goes.
 */
#ifndef KVT_LOCAL_SERVER_IMPL_H
#define KVT_LOCAL_SERVER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "internal.h"
#include "local.h"

#define NIL UINT32_MAX

/* A map from keys to a value, chained. */
struct kent {
	kvt_key key;
	uint64_t val;
	struct kent *next;
};

struct kmap {
	struct kent **b;
	size_t nb, n;
};

enum held_kind { H_FREE = 0, H_PIN, H_RES };

/* A pin or reservation a client holds: its handle is (gen << 32 | index). */
struct held {
	kvt_key key;
	uint64_t sref;      /* the store's handle (kvt_slot.ref) */
	uint64_t off;
	uint32_t len;
	uint32_t gen;
	uint32_t next;      /* free list */
	uint8_t kind;
};

struct conn {
	struct local_server *srv;
	int fd;
	pthread_t th;
	struct conn *next;
	uid_t uid;
	pid_t pid;
	uint64_t hello_deadline; /* kvt_now_ns() by which HELLO must be in; 0 once in */
	/* the connection's own thread only */
	struct held *held;
	uint32_t nheld, capheld, free_head;
	struct kmap leases;  /* key -> lease deadline (ns) */
	unsigned char *buf;
	size_t cap;
	/* bytes read from the socket ahead of the frames that use them:
	 * a get's unpin and the next request arrive in one read */
	unsigned char rb[4096];
	size_t rpos, rend;
};

struct local_server {
	kvt_store *s;
	char *base;
	size_t arena_len;
	int arena_fd;
	int dir_fd;           /* the directory of RAM blocks (ram_dir.h), or -1 */
	size_t dir_len;
	uint64_t max_block, lease_ns;
	uint32_t lease_ms, pin_ms;
	unsigned max_clients, max_held, mode;
	unsigned spin_us;        /* local.spin_us */
	uint32_t *uids, *gids;
	unsigned nuids, ngids;
	char *path;
	dev_t dev;
	ino_t ino;
	int lfd;
	int wake[2];
	pthread_t acceptor;
	int acceptor_started;

	pthread_mutex_t lock;  /* conns, dead, nconns, stopping */
	pthread_cond_t cond;
	struct conn *conns, *dead;
	unsigned nconns;
	int stopping;

	pthread_mutex_t lease_lock;
	struct kmap lease_map; /* key -> clients holding a lease of it */

	_Atomic uint64_t accepted, refused, malformed, requests, directory_hits;
	_Atomic uint64_t leased_blocks, pinned_blocks, pinned_bytes;
	_Atomic uint64_t reserved_blocks, reserved_bytes, checksum_refusals;
};

/* local_held.c: the key map (key -> value, chained). */
struct kent *lsrv_kmap_find(const struct kmap *m, kvt_key k);
int lsrv_kmap_add(struct kmap *m, kvt_key k, uint64_t val);
void lsrv_kmap_del(struct kmap *m, kvt_key k);
void lsrv_kmap_free(struct kmap *m);

/* local_held.c: leases, pins and reservations a client holds. */
int lsrv_lease_hold(struct local_server *srv, kvt_key k);
int lsrv_lease_drop(struct conn *c, struct kent *ce);
void lsrv_leases_sweep(struct conn *c);
uint32_t lsrv_held_count(const struct conn *c);
uint32_t lsrv_held_new(struct conn *c, int kind, kvt_key key, uint64_t sref,
		       uint64_t off, uint32_t len, uint64_t *ref);
struct held *lsrv_held_of(struct conn *c, uint64_t ref, int kind);
void lsrv_held_free(struct conn *c, struct held *h);
int lsrv_held_end(struct conn *c, struct held *h);
void lsrv_release_all(struct conn *c);

/* local_server.c: replies on a client's socket. */
int lsrv_send_reply(int sock, int type, int32_t status, const void *body,
		    size_t blen, int fd);
int lsrv_send_error(int sock, int type, int err);

/* local_requests.c: serves one request; -1 ends the connection. */
int lsrv_serve(struct conn *c, int type, const unsigned char *p, size_t len);

#endif
