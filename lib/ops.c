/*
 * ops.c - questions about an array of kvt_op that more than one module asks
 * (which ops' buffers overlap). Knows nothing about tiers.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct span {
	const char *lo, *hi;
	size_t i;
};

static int span_cmp(const void *x, const void *y)
{
	const struct span *a = x, *b = y;

	return a->lo < b->lo ? -1 : a->lo > b->lo;
}

void kvt_ops_shared(const kvt_op *ops, size_t n, uint8_t *shared)
{
	struct span *sp = n > 1 ? malloc(n * sizeof(*sp)) : NULL;
	size_t m = 0;

	memset(shared, n > 1 && !sp, n); /* no memory: assume the worst */
	if (!sp)
		return;
	for (size_t i = 0; i < n; i++)
		if (ops[i].buf && ops[i].len)
			sp[m++] = (struct span){ ops[i].buf, (const char *)ops[i].buf + ops[i].len, i };
	qsort(sp, m, sizeof(*sp), span_cmp);
	/* Sorted by start: the spans that overlap x are the ones right after
	 * it that start before it ends. */
	for (size_t x = 0; x < m; x++)
		for (size_t y = x + 1; y < m && sp[y].lo < sp[x].hi; y++)
			shared[sp[x].i] = shared[sp[y].i] = 1;
	free(sp);
}
