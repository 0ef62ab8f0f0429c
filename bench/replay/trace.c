/*
 * trace.c - reads kvbench JSON-lines traces and Mooncake FAST'25 traces
 * into a workload (see trace.h; the formats are documented in kvbench(1)).
 * Every malformed line is reported with its line number and the field at
 * fault; nothing in a trace can crash the reader.
 *
 * Knows nothing about the store or the engine model.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "trace.h"

int trace_format_parse(const char *s, enum trace_format *out)
{
	if (!s)
		return -EINVAL;
	if (!strcmp(s, "auto"))
		*out = TRACE_AUTO;
	else if (!strcmp(s, "kvbench"))
		*out = TRACE_KVBENCH;
	else if (!strcmp(s, "mooncake"))
		*out = TRACE_MOONCAKE;
	else
		return -EINVAL;
	return 0;
}

const char *trace_format_name(enum trace_format f)
{
	switch (f) {
	case TRACE_KVBENCH:
		return "kvbench";
	case TRACE_MOONCAKE:
		return "mooncake";
	default:
		return "auto";
	}
}

/* The seed of the text every session starts from (the shared task text). */
#define COMMON_SEED 0x6b7662656e636801ull
/* A stream "as long as needed": the common text has no end. */
#define ENDLESS (UINT64_MAX / 4)

struct reader {
	const char *name;
	size_t line;
	char *err;
	size_t errlen;
};

static int fail(struct reader *rd, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct reader *rd, int code, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (rd->err && rd->errlen) {
		n = snprintf(rd->err, rd->errlen, "%s:%zu: ", rd->name, rd->line);
		if (n >= 0 && (size_t)n < rd->errlen) {
			va_start(ap, fmt);
			vsnprintf(rd->err + n, rd->errlen - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return code;
}

/* A non-negative JSON integer (an integral real is accepted too). */
static int get_uint(json_t *v, uint64_t max, uint64_t *out)
{
	double d;

	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);
		if (x < 0 || (uint64_t)x > max)
			return -ERANGE;
		*out = (uint64_t)x;
		return 0;
	}
	if (json_is_real(v)) {
		d = json_real_value(v);
		if (!(d >= 0) || d != floor(d) || d > (double)max)
			return -ERANGE;
		*out = (uint64_t)d;
		return 0;
	}
	return -EINVAL;
}

/* A non-negative JSON number. */
static int get_num(json_t *v, double *out)
{
	if (!json_is_number(v))
		return -EINVAL;
	*out = json_number_value(v);
	if (!(*out >= 0) || !isfinite(*out))
		return -ERANGE;
	return 0;
}

/* --- Mooncake --------------------------------------------------------------------- */

static int mooncake_line(struct reader *rd, json_t *o, uint32_t bt, struct wl *w)
{
	json_t *ts = json_object_get(o, "timestamp");
	json_t *in = json_object_get(o, "input_length");
	json_t *outl = json_object_get(o, "output_length");
	json_t *ids = json_object_get(o, "hash_ids");
	uint64_t ilen, olen, id, need;
	struct wl_call c;
	double t;
	size_t i, n;
	int rc;

	if (!ts)
		return fail(rd, -EINVAL, "missing field \"timestamp\"");
	if (!in)
		return fail(rd, -EINVAL, "missing field \"input_length\"");
	if (!outl)
		return fail(rd, -EINVAL, "missing field \"output_length\"");
	if (!ids)
		return fail(rd, -EINVAL, "missing field \"hash_ids\"");
	if (get_num(ts, &t))
		return fail(rd, -EINVAL, "\"timestamp\" must be a non-negative number of milliseconds");
	rc = get_uint(in, UINT32_MAX, &ilen);
	if (rc || ilen == 0)
		return fail(rd, -EINVAL, "\"input_length\" must be a positive integer%s",
			    rc == -ERANGE ? " (it is negative or too large)" : "");
	if (get_uint(outl, UINT32_MAX, &olen))
		return fail(rd, -EINVAL, "\"output_length\" must be a non-negative integer");
	if (!json_is_array(ids))
		return fail(rd, -EINVAL, "\"hash_ids\" must be an array of non-negative integers");
	n = json_array_size(ids);
	if (n == 0)
		return fail(rd, -EINVAL, "\"hash_ids\" is empty");
	need = (ilen + bt - 1) / bt;
	if (n > need)
		return fail(rd, -EINVAL,
			    "\"hash_ids\" has %zu ids but input_length %llu allows at most %llu blocks of %u tokens",
			    n, (unsigned long long)ilen, (unsigned long long)need, bt);
	if (n < need)
		return fail(rd, -EINVAL,
			    "\"hash_ids\" has %zu ids but input_length %llu needs %llu blocks of %u tokens",
			    n, (unsigned long long)ilen, (unsigned long long)need, bt);
	memset(&c, 0, sizeof(c));
	c.session = WL_NO_SESSION;
	c.prompt_tokens = ilen;
	c.output_tokens = olen;
	c.arrival_s = t / 1000.0;
	c.first = w->nids;
	c.n = (uint32_t)n;
	for (i = 0; i < n; i++) {
		if (get_uint(json_array_get(ids, i), UINT64_MAX >> 1, &id))
			return fail(rd, -EINVAL,
				    "\"hash_ids\" element %zu is not a non-negative integer", i);
		if (wl_add_id(w, id))
			return fail(rd, -ENOMEM, "out of memory");
	}
	if (wl_add_call(w, &c))
		return fail(rd, -ENOMEM, "out of memory");
	return 0;
}

/* --- kvbench format ---------------------------------------------------------------- */

/* What the reader remembers of a session while reading. */
struct sess {
	char *name;
	struct wl_seg *stream; /* its context: last prompt + last answer */
	size_t nstream, cap;
	uint64_t len;          /* tokens in stream */
	int64_t last_turn;
	uint64_t fresh;        /* counter for the seeds of new tokens */
	uint64_t hash;
};

struct sessions {
	struct sess *v;
	size_t n, cap;
	size_t *tab; /* open addressing: index + 1, 0 empty */
	size_t tabcap;
};

static uint64_t str_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 0x100000001b3ull;
	return h;
}

static int stream_push(struct sess *s, struct wl_seg g)
{
	struct wl_seg *p;

	if (g.len == 0)
		return 0;
	if (s->nstream == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 8;
		p = realloc(s->stream, ncap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->stream = p;
		s->cap = ncap;
	}
	s->stream[s->nstream++] = g;
	s->len += g.len;
	return 0;
}

/* Finds or adds the session called name; returns its index or -ENOMEM. */
static long sess_get(struct sessions *ss, const char *name)
{
	uint64_t h = str_hash(name);
	size_t i, j;

	if (ss->tabcap == 0 || (ss->n + 1) * 2 > ss->tabcap) {
		size_t ncap = ss->tabcap ? ss->tabcap * 2 : 64;
		size_t *nt = calloc(ncap, sizeof(*nt));
		if (!nt)
			return -ENOMEM;
		for (i = 0; i < ss->n; i++) {
			j = ss->v[i].hash & (ncap - 1);
			while (nt[j])
				j = (j + 1) & (ncap - 1);
			nt[j] = i + 1;
		}
		free(ss->tab);
		ss->tab = nt;
		ss->tabcap = ncap;
	}
	j = h & (ss->tabcap - 1);
	while (ss->tab[j]) {
		struct sess *s = &ss->v[ss->tab[j] - 1];
		if (s->hash == h && !strcmp(s->name, name))
			return (long)(ss->tab[j] - 1);
		j = (j + 1) & (ss->tabcap - 1);
	}
	if (ss->n == ss->cap) {
		size_t ncap = ss->cap ? ss->cap * 2 : 16;
		struct sess *nv = realloc(ss->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		ss->v = nv;
		ss->cap = ncap;
	}
	memset(&ss->v[ss->n], 0, sizeof(ss->v[ss->n]));
	ss->v[ss->n].name = strdup(name);
	if (!ss->v[ss->n].name)
		return -ENOMEM;
	ss->v[ss->n].hash = h;
	ss->v[ss->n].last_turn = -1;
	if (stream_push(&ss->v[ss->n], (struct wl_seg){ COMMON_SEED, 0, ENDLESS })) {
		free(ss->v[ss->n].name);
		return -ENOMEM;
	}
	ss->tab[j] = ++ss->n;
	return (long)(ss->n - 1);
}

static void sessions_free(struct sessions *ss)
{
	size_t i;

	for (i = 0; i < ss->n; i++) {
		free(ss->v[i].name);
		free(ss->v[i].stream);
	}
	free(ss->v);
	free(ss->tab);
}

static uint64_t fresh_seed(struct sess *s)
{
	uint64_t st = s->hash ^ (++s->fresh * 0xd1342543de82ef95ull);

	return wl_splitmix64(&st);
}

static const char *const kvbench_keys[] = {
	"session", "turn", "tokens", "prefix_tokens", "new_tokens",
	"output_tokens", "time_ms", "think_ms", NULL
};

/* One kvbench line's fields, read and checked. */
struct kvline {
	json_t *jturn, *jtok, *jtime;
	const char *sname; /* the session's name: a string, or name[] */
	char name[64];
	uint64_t turn, pre, nnew, outt;
	double tms, think;
};

/* The line's session: a non-empty string, or a non-negative integer
 * written out as one. */
static int kvbench_session(struct reader *rd, json_t *jsess, struct kvline *l)
{
	if (!jsess)
		return fail(rd, -EINVAL, "missing field \"session\"");
	if (json_is_string(jsess)) {
		l->sname = json_string_value(jsess);
		if (!*l->sname)
			return fail(rd, -EINVAL, "\"session\" is an empty string");
	} else if (json_is_integer(jsess) && json_integer_value(jsess) >= 0) {
		snprintf(l->name, sizeof(l->name), "%lld", (long long)json_integer_value(jsess));
		l->sname = l->name;
	} else {
		return fail(rd, -EINVAL, "\"session\" must be a string or a non-negative integer");
	}
	return 0;
}

/* Reads and checks one kvbench line's fields into *l; *timed says whether
 * the lines before it have times (-1: no line read yet). */
static int kvbench_fields(struct reader *rd, json_t *o, int *timed, struct kvline *l)
{
	json_t *jpre = json_object_get(o, "prefix_tokens");
	json_t *jnew = json_object_get(o, "new_tokens");
	json_t *jout = json_object_get(o, "output_tokens");
	json_t *jthink = json_object_get(o, "think_ms");
	const char *key;
	json_t *val;
	size_t i;
	int rc;

	l->jturn = json_object_get(o, "turn");
	l->jtok = json_object_get(o, "tokens");
	l->jtime = json_object_get(o, "time_ms");
	json_object_foreach(o, key, val) {
		for (i = 0; kvbench_keys[i]; i++)
			if (!strcmp(key, kvbench_keys[i]))
				break;
		if (!kvbench_keys[i])
			return fail(rd, -EINVAL, "unknown field \"%s\"", key);
	}
	rc = kvbench_session(rd, json_object_get(o, "session"), l);
	if (rc)
		return rc;
	if (l->jturn && get_uint(l->jturn, UINT32_MAX, &l->turn))
		return fail(rd, -EINVAL, "\"turn\" must be a non-negative integer");
	if (l->jtok && (jpre || jnew))
		return fail(rd, -EINVAL,
			    "give either \"tokens\" or \"prefix_tokens\"/\"new_tokens\", not both");
	if (!l->jtok && !jpre && !jnew)
		return fail(rd, -EINVAL,
			    "missing the prompt: \"tokens\" or \"prefix_tokens\"/\"new_tokens\"");
	if (jpre && get_uint(jpre, UINT32_MAX, &l->pre))
		return fail(rd, -EINVAL, "\"prefix_tokens\" must be a non-negative integer");
	if (jnew && get_uint(jnew, UINT32_MAX, &l->nnew))
		return fail(rd, -EINVAL, "\"new_tokens\" must be a non-negative integer");
	if (jout && get_uint(jout, UINT32_MAX, &l->outt))
		return fail(rd, -EINVAL, "\"output_tokens\" must be a non-negative integer");
	if (l->jtime && get_num(l->jtime, &l->tms))
		return fail(rd, -EINVAL, "\"time_ms\" must be a non-negative number");
	if (jthink && get_num(jthink, &l->think))
		return fail(rd, -EINVAL, "\"think_ms\" must be a non-negative number");
	if (*timed < 0)
		*timed = l->jtime != NULL;
	else if (*timed != (l->jtime != NULL))
		return fail(rd, -EINVAL, *timed ? "missing \"time_ms\" (earlier lines have it)"
					       : "\"time_ms\" given but earlier lines have none");
	if (l->jtok) {
		if (!json_is_array(l->jtok))
			return fail(rd, -EINVAL, "\"tokens\" must be an array of token ids");
		if (json_array_size(l->jtok) == 0)
			return fail(rd, -EINVAL, "\"tokens\" is empty");
	} else if (l->pre + l->nnew == 0) {
		return fail(rd, -EINVAL, "the prompt is empty (prefix_tokens + new_tokens is 0)");
	}
	return 0;
}

/* The line's session (*si) and its turn there: the one given, which must
 * follow the session's last, or else the next. */
static int kvbench_turn(struct reader *rd, struct sessions *ss, struct kvline *l, long *si)
{
	struct sess *s;

	*si = sess_get(ss, l->sname);
	if (*si < 0)
		return fail(rd, -ENOMEM, "out of memory");
	s = &ss->v[*si];
	if (l->jturn) {
		if ((int64_t)l->turn <= s->last_turn)
			return fail(rd, -EINVAL,
				    "\"turn\" %llu of session \"%s\" does not follow its turn %lld",
				    (unsigned long long)l->turn, l->sname, (long long)s->last_turn);
		s->last_turn = (int64_t)l->turn;
	} else {
		l->turn = (uint64_t)++s->last_turn;
	}
	return 0;
}

/* A prompt given as token ids: one explicit segment, which becomes the
 * session's context. */
static int prompt_tokens(struct reader *rd, json_t *jtok, struct wl *w, struct sess *s,
			 struct wl_call *c)
{
	size_t i, n = json_array_size(jtok), off;
	uint32_t *t;
	uint64_t v;

	t = malloc(n * sizeof(*t));
	if (!t)
		return fail(rd, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		if (get_uint(json_array_get(jtok, i), UINT32_MAX, &v)) {
			free(t);
			return fail(rd, -EINVAL,
				    "\"tokens\" element %zu is not a token id (0 to 4294967295)", i);
		}
		t[i] = (uint32_t)v;
	}
	if (wl_add_tokens(w, t, n, &off)) {
		free(t);
		return fail(rd, -ENOMEM, "out of memory");
	}
	free(t);
	c->prompt_tokens = n;
	if (wl_add_seg(w, (struct wl_seg){ WL_SEG_EXPLICIT, off, n }))
		return fail(rd, -ENOMEM, "out of memory");
	c->n = 1;
	s->nstream = 0;
	s->len = 0;
	if (stream_push(s, (struct wl_seg){ WL_SEG_EXPLICIT, off, n }))
		return fail(rd, -ENOMEM, "out of memory");
	return 0;
}

/* A prompt given as lengths: the first pre tokens of the session's context
 * (the previous prompt and its answer), then nnew new tokens; it becomes
 * the session's context. */
static int prompt_prefix(struct reader *rd, const struct kvline *l, struct wl *w,
			 struct sess *s, struct wl_call *c)
{
	uint64_t done = 0;
	size_t i;

	if (l->pre > s->len)
		return fail(rd, -EINVAL,
			    "\"prefix_tokens\" %llu exceeds session \"%s\"'s context of %llu tokens (previous prompt + output)",
			    (unsigned long long)l->pre, l->sname, (unsigned long long)s->len);
	for (i = 0; i < s->nstream && done < l->pre; i++) {
		struct wl_seg g = s->stream[i];
		if (g.len > l->pre - done)
			g.len = l->pre - done;
		if (wl_add_seg(w, g))
			return fail(rd, -ENOMEM, "out of memory");
		done += g.len;
		c->n++;
	}
	if (l->nnew) {
		if (wl_add_seg(w, (struct wl_seg){ fresh_seed(s), 0, l->nnew }))
			return fail(rd, -ENOMEM, "out of memory");
		c->n++;
	}
	c->prompt_tokens = l->pre + l->nnew;
	/* the new context is this prompt */
	s->nstream = 0;
	s->len = 0;
	for (i = 0; i < c->n; i++)
		if (stream_push(s, w->segs[c->first + i]))
			return fail(rd, -ENOMEM, "out of memory");
	return 0;
}

/* Adds one kvbench line's call to w: fields, session and turn, prompt. */
static int kvbench_line(struct reader *rd, json_t *o, struct wl *w,
			struct sessions *ss, int *timed)
{
	struct kvline l;
	struct wl_call c;
	struct sess *s;
	long si;
	int rc;

	memset(&l, 0, sizeof(l));
	l.tms = -1;
	rc = kvbench_fields(rd, o, timed, &l);
	if (rc)
		return rc;
	rc = kvbench_turn(rd, ss, &l, &si);
	if (rc)
		return rc;
	s = &ss->v[si];

	memset(&c, 0, sizeof(c));
	c.session = (uint32_t)si;
	c.turn = (uint32_t)l.turn;
	c.output_tokens = l.outt;
	c.think_s = l.think / 1000.0;
	c.arrival_s = l.tms >= 0 ? l.tms / 1000.0 : -1;
	c.first = w->nsegs;
	rc = l.jtok ? prompt_tokens(rd, l.jtok, w, s, &c) : prompt_prefix(rd, &l, w, s, &c);
	if (rc)
		return rc;
	/* ... followed by the answer */
	if (l.outt && stream_push(s, (struct wl_seg){ fresh_seed(s), 0, l.outt }))
		return fail(rd, -ENOMEM, "out of memory");
	if (wl_add_call(w, &c))
		return fail(rd, -ENOMEM, "out of memory");
	return 0;
}

/* --- the reader ------------------------------------------------------------------------ */

static int blank(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
		s++;
	return *s == 0;
}

int trace_read(FILE *f, const char *name, enum trace_format fmt,
	       uint32_t block_tokens, struct wl *w, enum trace_format *detected,
	       char *err, size_t errlen)
{
	struct reader rd = { name ? name : "trace", 0, err, errlen };
	struct sessions ss;
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;
	json_error_t je;
	json_t *o;
	int rc = 0, timed = -1, any = 0;

	memset(&ss, 0, sizeof(ss));
	if (err && errlen)
		err[0] = 0;
	wl_init(w, fmt == TRACE_MOONCAKE ? WL_BLOCKS : WL_TOKENS);
	if (block_tokens == 0) {
		rd.line = 0;
		return fail(&rd, -EINVAL, "block tokens must be positive");
	}
	while ((got = getline(&line, &cap, f)) >= 0) {
		rd.line++;
		if (blank(line))
			continue;
		if (memchr(line, 0, (size_t)got)) {
			rc = fail(&rd, -EINVAL, "contains a NUL byte");
			break;
		}
		o = json_loadb(line, (size_t)got, JSON_DECODE_ANY, &je);
		if (!o) {
			rc = fail(&rd, -EINVAL, "not valid JSON: %s (column %d)", je.text, je.column);
			break;
		}
		if (!json_is_object(o)) {
			json_decref(o);
			rc = fail(&rd, -EINVAL, "not a JSON object");
			break;
		}
		if (fmt == TRACE_AUTO) {
			if (json_object_get(o, "hash_ids"))
				fmt = TRACE_MOONCAKE;
			else if (json_object_get(o, "session"))
				fmt = TRACE_KVBENCH;
			else {
				json_decref(o);
				rc = fail(&rd, -EINVAL,
					  "cannot tell the trace format: no \"hash_ids\" (mooncake) and no \"session\" (kvbench); use --trace-format");
				break;
			}
			wl_init(w, fmt == TRACE_MOONCAKE ? WL_BLOCKS : WL_TOKENS);
		}
		w->block_tokens = fmt == TRACE_MOONCAKE ? block_tokens : 16;
		if (fmt == TRACE_MOONCAKE)
			rc = mooncake_line(&rd, o, block_tokens, w);
		else
			rc = kvbench_line(&rd, o, w, &ss, &timed);
		json_decref(o);
		if (rc)
			break;
		any = 1;
	}
	if (!rc && ferror(f))
		rc = fail(&rd, -EIO, "read error");
	if (!rc && !any) {
		rd.line = 0;
		rc = fail(&rd, -EINVAL, "the trace has no calls");
	}
	free(line);
	if (!rc) {
		if (fmt == TRACE_MOONCAKE) {
			w->timed = 1;
		} else {
			w->timed = timed > 0;
			if (ss.n > UINT32_MAX - 1 || wl_index_sessions(w, (uint32_t)ss.n))
				rc = fail(&rd, -ENOMEM, "out of memory");
		}
	}
	sessions_free(&ss);
	if (rc) {
		wl_free(w);
		wl_init(w, WL_TOKENS);
		return rc;
	}
	if (detected)
		*detected = fmt;
	return 0;
}

int trace_load(const char *path, enum trace_format fmt, uint32_t block_tokens,
	       struct wl *w, enum trace_format *detected, char *err,
	       size_t errlen)
{
	FILE *f = fopen(path, "r");
	int rc;

	if (!f) {
		rc = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
		wl_init(w, WL_TOKENS);
		return rc;
	}
	rc = trace_read(f, path, fmt, block_tokens, w, detected, err, errlen);
	fclose(f);
	return rc;
}
