/*
 * pins.c - the table of pins.h. Each member has its own slots, allocated at
 * its first pin: a free list, and the slots in use on a list in the order
 * they were taken, which is also the order of their deadlines (every pin is
 * held for the same time), so lapsing pops from the head. An id names its
 * slot and the slot's generation, so an id that lapsed can never end the
 * slot's next pin. Pins end outside the lock (the unpin callback takes the
 * RAM tier's shard locks).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"
#include "pins.h"
#include "stats.h"

#define NONE UINT32_MAX
#define BATCH 64

struct slot {
	uint64_t ref;
	uint64_t deadline;
	uint32_t gen, prev, next;
	uint8_t used;
};

struct member_pins {
	struct slot *s;            /* PINS_PER_MEMBER, or NULL before the first pin */
	uint32_t free, head, tail;
	uint32_t held;
};

struct pins {
	pthread_mutex_t lock;
	unsigned n;
	uint64_t hold_ns;
	pins_unpin_fn unpin;
	void *arg;
	struct member_pins *m;
	_Atomic uint64_t taken, released, lapsed, dropped, refused;
};

int pins_open(unsigned members, uint32_t hold_ms, pins_unpin_fn unpin, void *arg,
	      struct pins **out)
{
	struct pins *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p || !(p->m = calloc(members ? members : 1, sizeof(*p->m)))) {
		free(p);
		return kvt_fail(-ENOMEM, "peers: out of memory for the pin table");
	}
	pthread_mutex_init(&p->lock, NULL);
	p->n = members;
	p->hold_ns = (uint64_t)hold_ms * 1000000ull;
	p->unpin = unpin;
	p->arg = arg;
	*out = p;
	return 0;
}

static int member_init(struct member_pins *m)
{
	m->s = calloc(PINS_PER_MEMBER, sizeof(*m->s));
	if (!m->s)
		return -ENOMEM;
	for (uint32_t i = 0; i < PINS_PER_MEMBER; i++) {
		m->s[i].next = i + 1 < PINS_PER_MEMBER ? i + 1 : NONE;
		m->s[i].gen = 1;
	}
	m->free = 0;
	m->head = m->tail = NONE;
	return 0;
}

uint64_t pins_hold(struct pins *p, unsigned member, uint64_t ref, uint64_t now)
{
	struct member_pins *m;
	uint64_t id = 0;

	if (member >= p->n) {
		ctr_add(&p->refused, 1);
		return 0;
	}
	pthread_mutex_lock(&p->lock);
	m = &p->m[member];
	if ((m->s || member_init(m) == 0) && m->free != NONE) {
		uint32_t i = m->free;
		struct slot *s = &m->s[i];
		m->free = s->next;
		*s = (struct slot){ .ref = ref, .deadline = now + p->hold_ns, .gen = s->gen,
				    .prev = m->tail, .next = NONE, .used = 1 };
		if (m->tail != NONE)
			m->s[m->tail].next = i;
		else
			m->head = i;
		m->tail = i;
		m->held++;
		id = (uint64_t)s->gen << 32 | i;
	}
	pthread_mutex_unlock(&p->lock);
	ctr_add(id ? &p->taken : &p->refused, 1);
	return id;
}

/* Takes slot i off m's list and frees it, copying its ref to *out. Locked. */
static void take(struct member_pins *m, uint32_t i, uint64_t *out)
{
	struct slot *s = &m->s[i];

	*out = s->ref;
	if (s->prev != NONE)
		m->s[s->prev].next = s->next;
	else
		m->head = s->next;
	if (s->next != NONE)
		m->s[s->next].prev = s->prev;
	else
		m->tail = s->prev;
	s->used = 0;
	s->gen = s->gen == UINT32_MAX ? 1 : s->gen + 1;
	s->next = m->free;
	m->free = i;
	m->held--;
}

static void end_all(struct pins *p, const uint64_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p->unpin(p->arg, v[i]);
}

size_t pins_release(struct pins *p, unsigned member, const uint64_t *ids, size_t n)
{
	uint64_t v[BATCH];
	size_t done = 0;

	if (member >= p->n)
		return 0;
	for (size_t at = 0; at < n;) {
		size_t k = 0;
		pthread_mutex_lock(&p->lock);
		struct member_pins *m = &p->m[member];
		for (; at < n && k < BATCH; at++) {
			uint32_t i = (uint32_t)ids[at], gen = (uint32_t)(ids[at] >> 32);
			if (m->s && i < PINS_PER_MEMBER && m->s[i].used && m->s[i].gen == gen)
				take(m, i, &v[k++]);
		}
		pthread_mutex_unlock(&p->lock);
		end_all(p, v, k);
		done += k;
	}
	ctr_add(&p->released, done);
	return done;
}

/* Ends pins of member from the head of its list: all, or those lapsed by now. */
static size_t end_from_head(struct pins *p, unsigned member, int all, uint64_t now)
{
	uint64_t v[BATCH];
	size_t done = 0, k;

	do {
		k = 0;
		pthread_mutex_lock(&p->lock);
		struct member_pins *m = &p->m[member];
		while (m->s && m->head != NONE && k < BATCH &&
		       (all || m->s[m->head].deadline <= now))
			take(m, m->head, &v[k++]);
		pthread_mutex_unlock(&p->lock);
		end_all(p, v, k);
		done += k;
	} while (k == BATCH);
	return done;
}

size_t pins_lapse(struct pins *p, uint64_t now)
{
	size_t done = 0;

	for (unsigned i = 0; i < p->n; i++)
		done += end_from_head(p, i, 0, now);
	ctr_add(&p->lapsed, done);
	return done;
}

size_t pins_drop_member(struct pins *p, unsigned member)
{
	size_t done = member < p->n ? end_from_head(p, member, 1, 0) : 0;

	ctr_add(&p->dropped, done);
	return done;
}

size_t pins_held(struct pins *p)
{
	size_t n = 0;

	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < p->n; i++)
		n += p->m[i].held;
	pthread_mutex_unlock(&p->lock);
	return n;
}

uint64_t pins_until(struct pins *p, unsigned member)
{
	uint64_t until = 0;

	if (member >= p->n)
		return 0;
	pthread_mutex_lock(&p->lock);
	struct member_pins *m = &p->m[member];
	/* the list is in the order of the deadlines: the tail's is the last */
	if (m->s && m->tail != NONE)
		until = m->s[m->tail].deadline;
	pthread_mutex_unlock(&p->lock);
	return until;
}

void pins_stats(struct pins *p, const struct stat_visitor *v)
{
	stat_int(v, "pins_held", (int64_t)pins_held(p));
	stat_int(v, "pins_taken", (int64_t)ctr_get(&p->taken));
	stat_int(v, "pins_released", (int64_t)ctr_get(&p->released));
	stat_int(v, "pins_lapsed", (int64_t)ctr_get(&p->lapsed));
	stat_int(v, "pins_dropped", (int64_t)ctr_get(&p->dropped));
	stat_int(v, "pins_refused", (int64_t)ctr_get(&p->refused));
}

void pins_close(struct pins *p)
{
	if (!p)
		return;
	for (unsigned i = 0; i < p->n; i++) {
		end_from_head(p, i, 1, 0);
		free(p->m[i].s);
	}
	free(p->m);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
