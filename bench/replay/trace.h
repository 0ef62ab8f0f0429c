/*
 * trace.h - reading recorded traffic into a workload: kvbench's own
 * JSON-lines trace format and the Mooncake FAST'25 trace format (timestamp,
 * input_length, output_length, hash_ids), detected from the first line.
 * The formats are documented in kvbench(1).
 *
 * Knows nothing about the store or the engine model.
 */
#ifndef KVBENCH_TRACE_H
#define KVBENCH_TRACE_H

#include <stdio.h>

#include "workload.h"

enum trace_format {
	TRACE_AUTO = 0,
	TRACE_KVBENCH,  /* {"session", "turn", "tokens" | "prefix_tokens"+"new_tokens", ...} */
	TRACE_MOONCAKE, /* {"timestamp", "input_length", "output_length", "hash_ids"} */
};

/* "auto", "kvbench", "mooncake". Returns 0 or -EINVAL. */
int trace_format_parse(const char *s, enum trace_format *out);
const char *trace_format_name(enum trace_format f);

/*
 * Reads a trace from f (name is used in messages) into *w (initialised
 * here). fmt TRACE_AUTO detects the format from the first non-blank line.
 * block_tokens is the tokens of one Mooncake hash id (512). On success
 * returns 0 and sets *detected (may be NULL). On failure returns -EINVAL
 * for a malformed line, -ENOMEM, or -EIO for a read error, writes
 * "NAME:LINE: what is wrong" into err, and leaves *w empty.
 */
int trace_read(FILE *f, const char *name, enum trace_format fmt,
	       uint32_t block_tokens, struct wl *w, enum trace_format *detected,
	       char *err, size_t errlen);

/* Opens path and calls trace_read(); -errno with a message when it cannot
 * be opened. */
int trace_load(const char *path, enum trace_format fmt, uint32_t block_tokens,
	       struct wl *w, enum trace_format *detected, char *err,
	       size_t errlen);

#endif
