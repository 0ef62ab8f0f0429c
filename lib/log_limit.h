/*
 * log_limit.h - a log line that events cannot flood: the first event of a
 * period is logged in full, those that follow within it are counted and
 * told as one summary line (their count and the latest) once it ends. The
 * caller serialises the calls on one log_limit (its own lock) and writes
 * the lines itself, after dropping that lock.
 */
#ifndef KVT_LOG_LIMIT_H
#define KVT_LOG_LIMIT_H

#include <stddef.h>
#include <stdint.h>

struct log_limit {
	uint64_t next;            /* ns: no line in full before this */
	uint64_t quiet;           /* events counted since, not logged */
	char last[192];           /* the latest of those */
};

/* Counts one event, what its text. 1: it starts a period, to be logged in
 * full; 0: counted quietly (kept as the latest). */
int log_limit_note(struct log_limit *l, uint32_t period_ms, const char *what);

/* Where quiet events wait and their period is over (or force): returns
 * their count, the latest into last (cap bytes), and starts a new period.
 * Else 0, with *wait_ms (when not NULL) the ms until one is due, or -1
 * when none waits. */
uint64_t log_limit_due(struct log_limit *l, uint32_t period_ms, int force, char *last,
		       size_t cap, int *wait_ms);

#endif
