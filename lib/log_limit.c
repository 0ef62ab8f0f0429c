/*
 * log_limit.c - a log line that events cannot flood (log_limit.h): used for
 * the peer tier's strangers and the RDMA node's refusals for want of room.
 */
#include <stdio.h>

#include "internal.h"
#include "log_limit.h"

int log_limit_note(struct log_limit *l, uint32_t period_ms, const char *what)
{
	uint64_t now = kvt_now_ns();

	if (l->quiet || now < l->next) {
		l->quiet++;
		snprintf(l->last, sizeof(l->last), "%s", what);
		return 0;
	}
	l->next = now + (uint64_t)period_ms * 1000000ull;
	return 1;
}

uint64_t log_limit_due(struct log_limit *l, uint32_t period_ms, int force, char *last,
		       size_t cap, int *wait_ms)
{
	uint64_t now = kvt_now_ns(), n = 0;

	if (wait_ms)
		*wait_ms = -1;
	if (l->quiet && (force || now >= l->next)) {
		n = l->quiet;
		snprintf(last, cap, "%s", l->last);
		l->quiet = 0;
		l->next = now + (uint64_t)period_ms * 1000000ull;
	} else if (l->quiet && wait_ms) {
		*wait_ms = kvt_ms_until(l->next, 1000000);
	}
	return n;
}
