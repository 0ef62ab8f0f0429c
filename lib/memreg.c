/*
 * memreg.c - the table of caller ranges registered with kvt_mem_register()
 * and the holds that keep a range registered while I/O uses it. Every
 * range takes one piece per started GiB (the kernel registers at most
 * 1 GiB as one fixed buffer); the disk tier maps pieces to fixed buffers.
 * Knows nothing about io_uring or the tiers.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "memreg.h"

void memreg_init(struct memreg *m)
{
	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->lock, NULL);
}

void memreg_destroy(struct memreg *m)
{
	pthread_mutex_destroy(&m->lock);
}

static int overlaps(const char *a, size_t alen, const char *b, size_t blen)
{
	return a < b + blen && b < a + alen;
}

/* The first run of n free pieces, or -1. */
static int pieces_find(uint64_t used, unsigned n)
{
	for (unsigned p = 0; p + n <= MEMREG_PIECES; p++) {
		unsigned k = 0;

		while (k < n && !(used >> (p + k) & 1))
			k++;
		if (k == n)
			return (int)p;
	}
	return -1;
}

int memreg_add(struct memreg *m, void *base, size_t len, unsigned flags,
	       const void *avoid, size_t avoid_len)
{
	const char *fn = "kvt_mem_register";
	char *b = base;

	if (!base)
		return kvt_fail(-EINVAL, "%s: base is NULL", fn);
	if (!len)
		return kvt_fail(-EINVAL, "%s: len is 0", fn);
	if (flags)
		return kvt_fail(-EINVAL, "%s: unknown flags 0x%x", fn, flags);
	if ((uintptr_t)b % MEMREG_ALIGN || len % MEMREG_ALIGN)
		return kvt_fail(-EINVAL, "%s: base %p and len %zu must be multiples of %u",
				fn, base, len, MEMREG_ALIGN);
	if ((uintptr_t)b + len < (uintptr_t)b)
		return kvt_fail(-EINVAL, "%s: range %p + %zu wraps around", fn, base, len);
	if (len > (uint64_t)MEMREG_PIECES * MEMREG_PIECE)
		return kvt_fail(-ENOSPC, "%s: len %zu is above the %llu bytes all ranges "
				"together may hold", fn, len,
				(unsigned long long)MEMREG_PIECES * MEMREG_PIECE);
	if (avoid && overlaps(b, len, avoid, avoid_len))
		return kvt_fail(-EINVAL, "%s: range %p + %zu overlaps the store's RAM arena, "
				"which the library registers itself", fn, base, len);
	int slot = -1;
	for (int i = 0; i < MEMREG_MAX; i++) {
		if (m->e[i].base && overlaps(b, len, m->e[i].base, m->e[i].len))
			return kvt_fail(-EEXIST, "%s: range %p + %zu overlaps registered range "
					"%p + %zu", fn, base, len, (void *)m->e[i].base,
					m->e[i].len);
		if (!m->e[i].base && slot < 0)
			slot = i;
	}
	unsigned np = (unsigned)((len + MEMREG_PIECE - 1) / MEMREG_PIECE);
	int p = pieces_find(m->pieces_used, np);
	if (slot < 0 || p < 0)
		return kvt_fail(-ENOSPC, "%s: too many registrations (at most %u ranges, "
				"together at most %u started GiB)", fn, MEMREG_MAX,
				MEMREG_PIECES);
	struct memreg_ent *e = &m->e[slot];
	*e = (struct memreg_ent){ .base = b, .len = len, .id = ++m->next_id,
				  .piece = (unsigned)p, .npieces = np };
	for (unsigned k = 0; k < np; k++)
		m->pieces_used |= 1ull << (p + k);
	m->n++;
	return slot;
}

int memreg_find(const struct memreg *m, uint64_t id)
{
	for (int i = 0; i < MEMREG_MAX; i++)
		if (m->e[i].base && m->e[i].id == id)
			return i;
	return -1;
}

int memreg_can_del(const struct memreg *m, int i)
{
	unsigned h = m->e[i].holds;

	if (!h)
		return 0;
	return kvt_fail(-EBUSY, "kvt_mem_deregister: %u disk I/O%s on range %llu in flight",
			h, h == 1 ? " is" : "s are", (unsigned long long)m->e[i].id);
}

void memreg_del(struct memreg *m, int i)
{
	struct memreg_ent *e = &m->e[i];

	for (unsigned k = 0; k < e->npieces; k++)
		m->pieces_used &= ~(1ull << (e->piece + k));
	memset(e, 0, sizeof(*e));
	m->n--;
}

unsigned memreg_hold(struct memreg *m, const void *p, size_t len, int *piece)
{
	const char *c = p;
	unsigned hold = 0;

	*piece = -1;
	if (!m || !c || !len)
		return 0;
	pthread_mutex_lock(&m->lock);
	for (int i = 0; m->n && i < MEMREG_MAX; i++) {
		struct memreg_ent *e = &m->e[i];

		if (!e->base || c < e->base || c + len > e->base + e->len)
			continue;
		uint64_t a = (uint64_t)(c - e->base), b = a + len - 1;
		if (e->fixed && a / MEMREG_PIECE == b / MEMREG_PIECE)
			*piece = (int)(e->piece + a / MEMREG_PIECE);
		e->holds++;
		hold = (unsigned)i + 1;
		break;
	}
	pthread_mutex_unlock(&m->lock);
	return hold;
}

void memreg_put(struct memreg *m, unsigned hold)
{
	if (!hold)
		return;
	pthread_mutex_lock(&m->lock);
	m->e[hold - 1].holds--;
	pthread_mutex_unlock(&m->lock);
}
