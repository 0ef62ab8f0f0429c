/*
 * fuzz_trace.c - libFuzzer target for kvbench's trace readers (bench/replay/trace.c):
 * the input is read as a whole trace file three times, with the format
 * detected and forced to kvbench and to Mooncake. Errors must be clean
 * (-EINVAL/-ENOMEM, a "NAME:LINE: ..." message, an empty workload); an
 * accepted trace must be a consistent workload (every call's segments or ids
 * in range and covering its prompt, sessions grouping the calls).
 *
 * Knows only trace.h and workload.h; nothing about the store or the engine.
 * Built by `make fuzz` and replayed over tests/fuzz/corpus/trace by
 * tests/test_fuzz_corpus.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"
#include "workload.h"

/* Prompts up to this many tokens are also expanded with wl_call_tokens(). */
#define TR_EXPAND_MAX 4096u

#define TR_CHECK(cond, ...)                                                   \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "fuzz_trace: invariant broken: %s: ",  \
				#cond);                                       \
			fprintf(stderr, __VA_ARGS__);                         \
			fputc('\n', stderr);                                  \
			abort();                                              \
		}                                                             \
	} while (0)

static void tr_check_blocks(const struct wl *w)
{
	size_t next = 0;

	TR_CHECK(w->block_tokens > 0, "block_tokens 0");
	for (size_t i = 0; i < w->ncalls; i++) {
		const struct wl_call *c = &w->calls[i];
		uint64_t need = (c->prompt_tokens + w->block_tokens - 1) / w->block_tokens;

		TR_CHECK(c->session == WL_NO_SESSION, "call %zu has session %u", i, c->session);
		TR_CHECK(c->first == next, "call %zu starts at id %zu, expected %zu", i,
			 c->first, next);
		TR_CHECK(c->n > 0 && c->n == need, "call %zu: %u ids for %" PRIu64 " tokens",
			 i, c->n, c->prompt_tokens);
		TR_CHECK(c->arrival_s >= 0, "call %zu arrives at %g", i, c->arrival_s);
		next += c->n;
	}
	TR_CHECK(next == w->nids, "calls use %zu ids of %zu", next, w->nids);
}

static void tr_check_tokens(const struct wl *w)
{
	size_t seen = 0;

	TR_CHECK(w->nsessions > 0 && w->sessions, "no sessions");
	for (size_t s = 0; s < w->nsessions; s++) {
		const struct wl_session *ss = &w->sessions[s];

		TR_CHECK(ss->first_call == seen, "session %zu starts at call %zu, expected %zu",
			 s, ss->first_call, seen);
		TR_CHECK(ss->ncalls > 0, "session %zu has no calls", s);
		for (uint32_t k = 0; k < ss->ncalls; k++) {
			const struct wl_call *c = &w->calls[ss->first_call + k];

			TR_CHECK(c->session == s, "call %zu of session %zu names %u",
				 ss->first_call + k, s, c->session);
			if (k)
				TR_CHECK(c->turn > c[-1].turn, "session %zu turns %u then %u",
					 s, c[-1].turn, c->turn);
		}
		seen += ss->ncalls;
	}
	TR_CHECK(seen == w->ncalls, "sessions hold %zu of %zu calls", seen, w->ncalls);

	for (size_t i = 0; i < w->ncalls; i++) {
		const struct wl_call *c = &w->calls[i];
		uint64_t total = 0;

		TR_CHECK(c->prompt_tokens > 0, "call %zu has an empty prompt", i);
		TR_CHECK(c->first <= w->nsegs && c->n <= w->nsegs - c->first,
			 "call %zu segments %zu+%u of %zu", i, c->first, c->n, w->nsegs);
		for (uint32_t k = 0; k < c->n; k++) {
			const struct wl_seg *g = &w->segs[c->first + k];

			TR_CHECK(g->len > 0, "call %zu segment %u is empty", i, k);
			if (g->seed == WL_SEG_EXPLICIT)
				TR_CHECK(g->off <= w->ntok && g->len <= w->ntok - g->off,
					 "call %zu segment %u tokens %" PRIu64 "+%" PRIu64
					 " of %zu", i, k, g->off, g->len, w->ntok);
			total += g->len;
		}
		TR_CHECK(total == c->prompt_tokens, "call %zu segments hold %" PRIu64
			 " tokens, prompt %" PRIu64, i, total, c->prompt_tokens);
		if (c->prompt_tokens <= TR_EXPAND_MAX) {
			uint32_t *t = malloc(c->prompt_tokens * sizeof(*t));
			if (t) {
				wl_call_tokens(w, c, t);
				free(t);
			}
		}
	}
}

static void tr_read(const uint8_t *data, size_t size, enum trace_format fmt,
		    uint32_t block_tokens)
{
	/* fmemopen() refuses an empty buffer: give it one byte of nothing. */
	static char empty[1];
	FILE *f = size ? fmemopen((void *)data, size, "r") : fmemopen(empty, 1, "r");
	enum trace_format got = TRACE_AUTO;
	char err[256];
	struct wl w;
	int r;

	if (!f)
		return;
	if (!size)
		(void)fgetc(f);
	memset(err, 'x', sizeof(err));
	r = trace_read(f, "fuzz", fmt, block_tokens, &w, &got, err, sizeof(err));
	fclose(f);
	TR_CHECK(memchr(err, 0, sizeof(err)) != NULL, "error text not terminated");
	if (r) {
		TR_CHECK(r == -EINVAL || r == -ENOMEM || r == -EIO, "returned %d", r);
		TR_CHECK(strncmp(err, "fuzz:", 5) == 0, "error text \"%s\"", err);
		TR_CHECK(w.ncalls == 0 && !w.calls && !w.segs && !w.ids && !w.tok &&
			 !w.sessions, "refused trace left a workload");
		wl_free(&w);
		return;
	}
	TR_CHECK(err[0] == 0, "accepted with error text \"%s\"", err);
	TR_CHECK(w.ncalls > 0, "accepted a trace without calls");
	TR_CHECK(fmt == TRACE_AUTO || got == fmt, "asked for %d, got %d", (int)fmt, (int)got);
	if (got == TRACE_MOONCAKE) {
		TR_CHECK(w.kind == WL_BLOCKS && w.block_tokens == block_tokens && w.timed,
			 "mooncake workload kind %d bt %u", (int)w.kind, w.block_tokens);
		tr_check_blocks(&w);
	} else {
		TR_CHECK(got == TRACE_KVBENCH && w.kind == WL_TOKENS, "format %d kind %d",
			 (int)got, (int)w.kind);
		tr_check_tokens(&w);
	}
	wl_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tr_read(data, size, TRACE_AUTO, 512);
	tr_read(data, size, TRACE_KVBENCH, 512);
	tr_read(data, size, TRACE_MOONCAKE, 16);
	return 0;
}
