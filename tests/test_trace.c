/*
 * test_trace.c - the trace readers (bench/replay/trace.c): kvbench JSON lines and
 * Mooncake FAST'25 lines become the right calls; format detection; every
 * kind of malformed line is refused with its line number and the problem.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "trace.h"

/* A data file next to this source file (tests/data/NAME). */
static const char *data_path(const char *name)
{
	static char buf[512];
	const char *slash = strrchr(__FILE__, '/');
	int dir = slash ? (int)(slash - __FILE__) : 0;

	snprintf(buf, sizeof(buf), "%.*s%sdata/%s", dir, __FILE__, slash ? "/" : "", name);
	return buf;
}

static int read_text(const char *text, enum trace_format fmt, struct wl *w, char *err,
		     size_t errlen, enum trace_format *got)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	int rc;

	assert_non_null(f);
	rc = trace_read(f, "t.jsonl", fmt, 512, w, got, err, errlen);
	fclose(f);
	return rc;
}

static void kvbench_trace_builds_sessions_that_extend_their_context(void **state)
{
	struct wl w;
	char err[256];
	enum trace_format got;
	uint32_t a0[200], a1[200], b0[200];

	(void)state;
	assert_int_equal(trace_load(data_path("tiny-sessions.jsonl"), TRACE_AUTO, 512, &w, &got,
				    err, sizeof(err)), 0);
	assert_int_equal(got, TRACE_KVBENCH);
	assert_int_equal(w.kind, WL_TOKENS);
	assert_int_equal(w.ncalls, 3);
	assert_int_equal(w.nsessions, 2);
	assert_false(w.timed);
	/* session A's two calls come first, then B */
	assert_int_equal(w.calls[0].prompt_tokens, 100);
	assert_int_equal(w.calls[1].prompt_tokens, 160);
	assert_int_equal(w.calls[2].prompt_tokens, 64);
	assert_true(w.calls[1].think_s == 2.0);
	wl_call_tokens(&w, &w.calls[0], a0);
	wl_call_tokens(&w, &w.calls[1], a1);
	wl_call_tokens(&w, &w.calls[2], b0);
	/* A's second prompt starts with its first prompt */
	assert_memory_equal(a0, a1, 100 * sizeof(uint32_t));
	/* both sessions start with the same 32 tokens of task text ... */
	assert_memory_equal(a0, b0, 32 * sizeof(uint32_t));
	/* ... B goes on with 16 more of it, A with its own tokens */
	assert_true(memcmp(a0 + 32, b0 + 32, 16 * sizeof(uint32_t)) != 0);
	wl_free(&w);
}

static void explicit_token_lists_are_kept_verbatim(void **state)
{
	struct wl w;
	char err[256];
	uint32_t t[8];

	(void)state;
	assert_int_equal(read_text("{\"session\": 1, \"tokens\": [5, 6, 7], \"output_tokens\": 2}\n"
				   "{\"session\": 1, \"prefix_tokens\": 5, \"new_tokens\": 1, \"time_ms\": 5}\n",
				   TRACE_KVBENCH, &w, err, sizeof(err), NULL),
			 -EINVAL);
	assert_non_null(strstr(err, "t.jsonl:2:"));
	assert_non_null(strstr(err, "time_ms"));
	assert_int_equal(read_text("{\"session\": 1, \"tokens\": [5, 6, 7], \"output_tokens\": 2}\n"
				   "{\"session\": 1, \"prefix_tokens\": 5, \"new_tokens\": 1}\n",
				   TRACE_AUTO, &w, err, sizeof(err), NULL),
			 0);
	assert_int_equal(w.ncalls, 2);
	wl_call_tokens(&w, &w.calls[0], t);
	assert_int_equal(t[0], 5);
	assert_int_equal(t[1], 6);
	assert_int_equal(t[2], 7);
	wl_call_tokens(&w, &w.calls[1], t);
	assert_int_equal(t[0], 5);
	assert_int_equal(t[2], 7);
	assert_int_equal(w.calls[1].prompt_tokens, 6);
	wl_free(&w);
}

static void mooncake_lines_become_timed_block_calls(void **state)
{
	struct wl w;
	char err[256];
	enum trace_format got;

	(void)state;
	assert_int_equal(trace_load(data_path("mooncake-excerpt.jsonl"), TRACE_AUTO, 512, &w, &got,
				    err, sizeof(err)), 0);
	assert_int_equal(got, TRACE_MOONCAKE);
	assert_int_equal(w.kind, WL_BLOCKS);
	assert_true(w.timed);
	assert_int_equal(w.ncalls, 6);
	assert_int_equal(w.nsessions, 0);
	assert_int_equal(w.calls[0].prompt_tokens, 7322);
	assert_int_equal(w.calls[0].n, 15);
	assert_int_equal(w.ids[w.calls[0].first + 1], 14);
	assert_true(w.calls[1].arrival_s == 9.0);
	assert_int_equal(w.calls[5].prompt_tokens, 2103); /* last block: 55 tokens */
	assert_int_equal(w.calls[5].n, 5);
	assert_int_equal(w.ids[w.calls[5].first + 2], 5023);
	wl_free(&w);
}

struct bad {
	const char *text;
	enum trace_format fmt;
	const char *where; /* "t.jsonl:N:" */
	const char *what;  /* a word of the message */
};

static const struct bad bad_lines[] = {
	{ "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
	  "{\"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n",
	  TRACE_AUTO, "t.jsonl:2:", "timestamp" },
	{ "{\"timestamp\": 0, \"input_length\": -5, \"output_length\": 1, \"hash_ids\": [1]}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "input_length" },
	{ "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": -1, \"hash_ids\": [1]}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "output_length" },
	{ "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": []}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "empty" },
	{ "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "element 1" },
	{ "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, 2.5]}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "element 1" },
	{ "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "at most 2" },
	{ "{\"timestamp\": 0, \"input_length\": 5000, \"output_length\": 1, \"hash_ids\": [1, 2]}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "needs 10" },
	{ "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": 7}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "array" },
	{ "{\"timestamp\": -3, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n",
	  TRACE_MOONCAKE, "t.jsonl:1:", "timestamp" },
	{ "\n\n{\"timestamp\": 0, \"input_length\": 5,\n", TRACE_AUTO, "t.jsonl:3:", "JSON" },
	{ "[1, 2]\n", TRACE_AUTO, "t.jsonl:1:", "object" },
	{ "{\"foo\": 1}\n", TRACE_AUTO, "t.jsonl:1:", "trace-format" },
	{ "{\"session\": \"a\", \"prefix_tokens\": 10}\n{\"session\": \"a\"}\n", TRACE_AUTO,
	  "t.jsonl:2:", "prompt" },
	{ "{\"session\": \"a\", \"new_tokens\": 10, \"color\": 1}\n", TRACE_AUTO, "t.jsonl:1:",
	  "color" },
	{ "{\"session\": \"a\", \"new_tokens\": 10, \"output_tokens\": 2}\n"
	  "{\"session\": \"a\", \"prefix_tokens\": 13, \"new_tokens\": 1}\n",
	  TRACE_AUTO, "t.jsonl:2:", "exceeds" },
	{ "{\"session\": \"a\", \"turn\": 3, \"new_tokens\": 10}\n"
	  "{\"session\": \"a\", \"turn\": 2, \"new_tokens\": 10}\n",
	  TRACE_AUTO, "t.jsonl:2:", "turn" },
	{ "{\"session\": \"a\", \"tokens\": [1, -2]}\n", TRACE_AUTO, "t.jsonl:1:", "element 1" },
	{ "{\"session\": \"a\", \"tokens\": [1], \"new_tokens\": 3}\n", TRACE_AUTO, "t.jsonl:1:",
	  "not both" },
	{ "{\"session\": [], \"new_tokens\": 3}\n", TRACE_AUTO, "t.jsonl:1:", "session" },
	{ "{\"session\": \"a\", \"prefix_tokens\": 0, \"new_tokens\": 0}\n", TRACE_AUTO,
	  "t.jsonl:1:", "empty" },
	{ "", TRACE_AUTO, "t.jsonl:0:", "no calls" },
};

static void malformed_lines_are_refused_naming_the_line(void **state)
{
	struct wl w;
	char err[512];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad_lines) / sizeof(bad_lines[0]); i++) {
		int rc = read_text(bad_lines[i].text, bad_lines[i].fmt, &w, err, sizeof(err), NULL);
		if (rc != -EINVAL || !strstr(err, bad_lines[i].where) ||
		    !strstr(err, bad_lines[i].what))
			fail_msg("case %zu: rc %d, message \"%s\" (want %s ... %s)", i, rc, err,
				 bad_lines[i].where, bad_lines[i].what);
		assert_int_equal(w.ncalls, 0);
		wl_free(&w);
	}
}

static void a_missing_file_is_an_error_naming_it(void **state)
{
	struct wl w;
	char err[256];

	(void)state;
	assert_int_equal(trace_load("/nonexistent/trace.jsonl", TRACE_AUTO, 512, &w, NULL, err,
				    sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/trace.jsonl"));
	wl_free(&w);
}

static void format_names_parse(void **state)
{
	enum trace_format f;

	(void)state;
	assert_int_equal(trace_format_parse("mooncake", &f), 0);
	assert_int_equal(f, TRACE_MOONCAKE);
	assert_int_equal(trace_format_parse("kvbench", &f), 0);
	assert_int_equal(f, TRACE_KVBENCH);
	assert_int_equal(trace_format_parse("auto", &f), 0);
	assert_int_equal(f, TRACE_AUTO);
	assert_int_equal(trace_format_parse("csv", &f), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kvbench_trace_builds_sessions_that_extend_their_context),
		cmocka_unit_test(explicit_token_lists_are_kept_verbatim),
		cmocka_unit_test(mooncake_lines_become_timed_block_calls),
		cmocka_unit_test(malformed_lines_are_refused_naming_the_line),
		cmocka_unit_test(a_missing_file_is_an_error_naming_it),
		cmocka_unit_test(format_names_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
