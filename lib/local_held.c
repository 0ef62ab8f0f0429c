/*
 * local_held.c - the books of what each attached client holds: its leases
 * (a deadline per key), its pins and reservations (records named by
 * handles of its own connection, never by the store's), and, across
 * clients, how many hold a lease of each key (lease_map), so the tiers'
 * lease ends only with its last holder. When a connection ends, everything
 * its client held goes back to the store here. Knows the store only through
 * its public calls (kvt_release, kvt_unpin, kvt_put_abort); knows nothing
 * of sockets, frames or threads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "local_server_impl.h"

/* --- key map ------------------------------------------------------------------- */

static size_t kslot(const struct kmap *m, kvt_key k)
{
	return (size_t)((k.lo ^ (k.hi >> 7)) & (m->nb - 1));
}

struct kent *lsrv_kmap_find(const struct kmap *m, kvt_key k)
{
	if (!m->nb)
		return NULL;
	for (struct kent *e = m->b[kslot(m, k)]; e; e = e->next)
		if (kvt_key_eq(e->key, k))
			return e;
	return NULL;
}

/* Adds k (absent) with val; -ENOMEM. */
int lsrv_kmap_add(struct kmap *m, kvt_key k, uint64_t val)
{
	if (m->n >= m->nb) {
		size_t nb = m->nb ? m->nb * 2 : 64;
		struct kent **b = calloc(nb, sizeof(*b));
		if (!b)
			return -ENOMEM;
		for (size_t i = 0; i < m->nb; i++) {
			struct kent *e = m->b[i], *x;
			for (; e; e = x) {
				x = e->next;
				size_t j = (size_t)((e->key.lo ^ (e->key.hi >> 7)) & (nb - 1));
				e->next = b[j];
				b[j] = e;
			}
		}
		free(m->b);
		m->b = b;
		m->nb = nb;
	}
	struct kent *e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	size_t j = kslot(m, k);
	e->key = k;
	e->val = val;
	e->next = m->b[j];
	m->b[j] = e;
	m->n++;
	return 0;
}

void lsrv_kmap_del(struct kmap *m, kvt_key k)
{
	if (!m->nb)
		return;
	for (struct kent **p = &m->b[kslot(m, k)]; *p; p = &(*p)->next) {
		if (kvt_key_eq((*p)->key, k)) {
			struct kent *e = *p;
			*p = e->next;
			free(e);
			m->n--;
			return;
		}
	}
}

void lsrv_kmap_free(struct kmap *m)
{
	for (size_t i = 0; i < m->nb; i++) {
		struct kent *e = m->b[i], *x;
		for (; e; e = x) {
			x = e->next;
			free(e);
		}
	}
	free(m->b);
	m->b = NULL;
	m->nb = m->n = 0;
}

/* --- leases of a client ---------------------------------------------------------- */

/* One more client leases k. Lease lock held. */
int lsrv_lease_hold(struct local_server *srv, kvt_key k)
{
	struct kent *e = lsrv_kmap_find(&srv->lease_map, k);

	if (e) {
		e->val++;
		return 0;
	}
	return lsrv_kmap_add(&srv->lease_map, k, 1);
}

/* Ends c's lease of k (which it holds); the tiers' lease ends with the
 * last holder's, unless it lapsed already (then another caller may hold
 * it now). Returns 1 if the tiers' lease was ended. */
int lsrv_lease_drop(struct conn *c, struct kent *ce)
{
	struct local_server *srv = c->srv;
	kvt_key k = ce->key;
	int live = ce->val > kvt_now_ns(), last = 0, ended = 0;

	lsrv_kmap_del(&c->leases, k);
	atomic_fetch_sub(&srv->leased_blocks, 1);
	pthread_mutex_lock(&srv->lease_lock);
	struct kent *e = lsrv_kmap_find(&srv->lease_map, k);
	if (e && --e->val == 0) {
		lsrv_kmap_del(&srv->lease_map, k);
		last = 1;
	}
	if (last && live)
		ended = kvt_release(srv->s, &k, 1) > 0;
	pthread_mutex_unlock(&srv->lease_lock);
	return ended;
}

/* Forgets c's leases that lapsed. */
void lsrv_leases_sweep(struct conn *c)
{
	uint64_t now = kvt_now_ns();

	for (size_t i = 0; i < c->leases.nb; i++) {
		struct kent *e = c->leases.b[i], *x;
		for (; e; e = x) {
			x = e->next;
			if (e->val <= now)
				lsrv_lease_drop(c, e);
		}
	}
}

/* --- pins and reservations of a client ---------------------------------------- */

uint32_t lsrv_held_count(const struct conn *c)
{
	return c->nheld + (uint32_t)c->leases.n;
}

/* A new held record; its handle in *ref. NIL when the table cannot grow. */
uint32_t lsrv_held_new(struct conn *c, int kind, kvt_key key, uint64_t sref,
		       uint64_t off, uint32_t len, uint64_t *ref)
{
	if (c->free_head == NIL) {
		uint32_t n = c->capheld ? c->capheld * 2 : 64;
		struct held *h = realloc(c->held, (size_t)n * sizeof(*h));
		if (!h)
			return NIL;
		memset(h + c->capheld, 0, (size_t)(n - c->capheld) * sizeof(*h));
		for (uint32_t i = n; i-- > c->capheld;) {
			h[i].gen = 1;
			h[i].next = c->free_head;
			c->free_head = i;
		}
		c->held = h;
		c->capheld = n;
	}
	uint32_t id = c->free_head;
	struct held *h = &c->held[id];
	c->free_head = h->next;
	h->kind = (uint8_t)kind;
	h->key = key;
	h->sref = sref;
	h->off = off;
	h->len = len;
	c->nheld++;
	*ref = (uint64_t)h->gen << 32 | id;
	struct local_server *srv = c->srv;
	atomic_fetch_add(kind == H_PIN ? &srv->pinned_blocks : &srv->reserved_blocks, 1);
	atomic_fetch_add(kind == H_PIN ? &srv->pinned_bytes : &srv->reserved_bytes, len);
	return id;
}

/* The record a client's handle names, of kind; NULL if none. */
struct held *lsrv_held_of(struct conn *c, uint64_t ref, int kind)
{
	uint32_t id = (uint32_t)ref;

	if (id >= c->capheld || c->held[id].gen != (uint32_t)(ref >> 32) ||
	    c->held[id].kind != kind)
		return NULL;
	return &c->held[id];
}

void lsrv_held_free(struct conn *c, struct held *h)
{
	struct local_server *srv = c->srv;
	uint32_t id = (uint32_t)(h - c->held);

	atomic_fetch_sub(h->kind == H_PIN ? &srv->pinned_blocks : &srv->reserved_blocks, 1);
	atomic_fetch_sub(h->kind == H_PIN ? &srv->pinned_bytes : &srv->reserved_bytes, h->len);
	h->kind = H_FREE;
	h->gen = h->gen + 1 ? h->gen + 1 : 1;
	h->next = c->free_head;
	c->free_head = id;
	c->nheld--;
}

/* Gives the store back what h holds (unpin, or abort) and frees it. */
int lsrv_held_end(struct conn *c, struct held *h)
{
	kvt_slot sl = { .key = h->key, .ref = h->sref, .len = h->len };
	int rc = h->kind == H_PIN ? kvt_unpin(c->srv->s, &sl, 1)
				  : kvt_put_abort(c->srv->s, &sl, 1);
	lsrv_held_free(c, h);
	return rc;
}

/* Everything a client holds, given back: at the end of its connection. */
void lsrv_release_all(struct conn *c)
{
	for (uint32_t i = 0; i < c->capheld; i++)
		if (c->held[i].kind != H_FREE)
			lsrv_held_end(c, &c->held[i]);
	for (size_t i = 0; i < c->leases.nb; i++) {
		struct kent *e = c->leases.b[i], *x;
		for (; e; e = x) {
			x = e->next;
			lsrv_lease_drop(c, e);
		}
	}
	lsrv_kmap_free(&c->leases);
	free(c->held);
	c->held = NULL;
	c->capheld = c->nheld = 0;
	c->free_head = NIL;
}
