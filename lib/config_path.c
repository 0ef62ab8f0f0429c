/*
 * config_path.c - the error text of a configuration document that jansson
 * refused to parse. Most refusals are malformed JSON, reported by line and
 * column. Two concern one member of a well-formed document, and are
 * reported, as every other refusal of a value is (kvtier-config(5)), under
 * that member's key path: a key given twice in one object, and an integer
 * beyond jansson's 64-bit signed range (an impossible size or count). The
 * path is found by walking the text up to where jansson stopped.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "internal.h"

#define PATH_DEPTH 16  /* deeper than any key of kvtier-config(5) */
#define KEY_MAX    64  /* bytes of a key kept for the text */
#define TOKEN_MAX  64  /* bytes of the offending integer quoted */

struct path_frame {
	int array;        /* 1: an array, 0: an object */
	size_t index;     /* array: the element's index */
	char key[KEY_MAX + 1]; /* object: the member's key, as written */
};

struct path_walk {
	struct path_frame f[PATH_DEPTH];
	int depth;        /* frames open; past PATH_DEPTH, only counted */
	int want_key;     /* in an object, before a member's ':' */
};

/* Reads the string starting at text[*i] (its opening quote) up to its
 * closing quote or end, and keeps its first KEY_MAX bytes as written. */
static void walk_string(const char *text, size_t end, size_t *i, char *keep)
{
	size_t n = 0;

	for ((*i)++; *i < end && text[*i] != '"'; (*i)++) {
		if (text[*i] == '\\' && *i + 1 < end) {
			if (keep && n < KEY_MAX)
				keep[n++] = text[*i];
			(*i)++;
		}
		if (keep && n < KEY_MAX)
			keep[n++] = text[*i];
	}
	if (keep)
		keep[n] = '\0';
}

static void walk_open(struct path_walk *w, int array)
{
	if (w->depth < PATH_DEPTH) {
		w->f[w->depth].array = array;
		w->f[w->depth].index = 0;
		w->f[w->depth].key[0] = '\0';
	}
	w->depth++;
	w->want_key = !array;
}

/* Walks text[0, end) as the prefix of a JSON document and leaves in w the
 * containers open at end, each with the member or element it was in. */
static void walk(const char *text, size_t end, struct path_walk *w)
{
	memset(w, 0, sizeof(*w));
	for (size_t i = 0; i < end; i++) {
		struct path_frame *top = w->depth > 0 && w->depth <= PATH_DEPTH ?
					 &w->f[w->depth - 1] : NULL;
		switch (text[i]) {
		case '{':
		case '[':
			walk_open(w, text[i] == '[');
			break;
		case '}':
		case ']':
			if (w->depth > 0)
				w->depth--;
			w->want_key = 0;
			break;
		case ',':
			if (top && top->array)
				top->index++;
			w->want_key = top && !top->array;
			break;
		case ':':
			w->want_key = 0;
			break;
		case '"':
			walk_string(text, end, &i, top && w->want_key ? top->key : NULL);
			break;
		default:
			break;
		}
	}
}

/* Writes the key path of w ("ram.capacity", "disk.path[1]") into buf. */
static void path_text(const struct path_walk *w, char *buf, size_t cap)
{
	size_t n = 0;
	int depth = w->depth < PATH_DEPTH ? w->depth : PATH_DEPTH;

	buf[0] = '\0';
	for (int d = 0; d < depth && n < cap; d++) {
		const struct path_frame *f = &w->f[d];
		int r = f->array ? snprintf(buf + n, cap - n, "[%zu]", f->index) :
			snprintf(buf + n, cap - n, "%s%s", n ? "." : "", f->key);
		if (r < 0)
			break;
		n += (size_t)r;
	}
}

/* The integer that ends at text[end]: its digits and sign, quoted. */
static void token_before(const char *text, size_t end, char *buf, size_t cap)
{
	size_t start = end;

	while (start > 0 && strchr("0123456789+-.eE", text[start - 1]))
		start--;
	snprintf(buf, cap, "%.*s", (int)(end - start < TOKEN_MAX ? end - start : TOKEN_MAX),
		 text + start);
}

int config_json_error(const char *text, const json_error_t *e)
{
	enum json_error_code code = json_error_code(e);
	size_t len = strlen(text);
	size_t end = e->position > 0 && (size_t)e->position <= len ? (size_t)e->position : 0;
	struct path_walk w;
	char path[PATH_DEPTH * (KEY_MAX + 24)], tok[TOKEN_MAX + 1];

	if (end == 0 || (code != json_error_duplicate_key &&
			 code != json_error_numeric_overflow))
		return kvt_fail(-EINVAL, "config: malformed JSON at line %d, column %d: %s",
				e->line, e->column, e->text);
	walk(text, end, &w);
	path_text(&w, path, sizeof(path));
	if (!path[0])
		return kvt_fail(-EINVAL, "config: malformed JSON at line %d, column %d: %s",
				e->line, e->column, e->text);
	if (code == json_error_duplicate_key)
		return kvt_fail(-EINVAL, "%s: key given twice (line %d, column %d)",
				path, e->line, e->column);
	token_before(text, end, tok, sizeof(tok));
	return kvt_fail(-EINVAL, "%s: %s is out of range (line %d, column %d)",
			path, tok, e->line, e->column);
}
