/*
 * report.c - how kvbench reports (see bench.h): aligned tables, the JSON
 * results document every command writes, and numbers read from the store's
 * own statistics.
 *
 * Knows nothing about any particular command or what it measures.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* --- aligned tables --------------------------------------------------------- */

struct bench_table {
	unsigned ncols;
	char **cells; /* row-major, ncols per row; NULL: empty */
	size_t rows;  /* complete rows plus the header (row 0) */
	size_t cap;   /* rows allocated */
	unsigned col; /* next cell of the open row */
	int oom;
};

static int table_grow(struct bench_table *t)
{
	size_t cap = t->cap ? t->cap * 2 : 16;
	char **c = realloc(t->cells, cap * t->ncols * sizeof(*c));

	if (!c)
		return -ENOMEM;
	memset(c + t->cap * t->ncols, 0, (cap - t->cap) * t->ncols * sizeof(*c));
	t->cells = c;
	t->cap = cap;
	return 0;
}

struct bench_table *bench_table_new(unsigned ncols, const char *const *headers)
{
	struct bench_table *t;
	unsigned i;

	if (ncols == 0)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->ncols = ncols;
	if (table_grow(t)) {
		free(t);
		return NULL;
	}
	for (i = 0; i < ncols; i++) {
		t->cells[i] = strdup(headers && headers[i] ? headers[i] : "");
		if (!t->cells[i])
			t->oom = 1;
	}
	t->rows = 1;
	return t;
}

void bench_table_cell(struct bench_table *t, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (!t || t->oom)
		return;
	if (t->col == t->ncols)
		bench_table_end_row(t); /* too many cells: wrap */
	if (t->rows == t->cap && table_grow(t)) {
		t->oom = 1;
		return;
	}
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0) {
		t->oom = 1;
		s = NULL;
	}
	va_end(ap);
	t->cells[t->rows * t->ncols + t->col++] = s;
}

void bench_table_end_row(struct bench_table *t)
{
	if (!t || t->oom)
		return;
	if (t->rows == t->cap && table_grow(t)) {
		t->oom = 1;
		return;
	}
	t->rows++;
	t->col = 0;
}

void bench_table_print(const struct bench_table *t, FILE *f, unsigned indent)
{
	size_t *w, r, rows;
	unsigned c;

	if (!t)
		return;
	if (t->oom || !(w = calloc(t->ncols, sizeof(*w)))) {
		fprintf(f, "%*s(out of memory)\n", (int)indent, "");
		return;
	}
	rows = t->rows + (t->col > 0); /* an open row prints too */
	for (r = 0; r < rows; r++)
		for (c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];
			size_t len = s ? strlen(s) : 0;

			if (len > w[c])
				w[c] = len;
		}
	for (r = 0; r < rows; r++) {
		fprintf(f, "%*s", (int)indent, "");
		for (c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];

			if (!s)
				s = "";
			if (c == 0)
				fprintf(f, "%-*s", (int)w[c], s);
			else
				fprintf(f, "  %*s", (int)w[c], s);
		}
		fputc('\n', f);
		if (r == 0) {
			size_t total = 0;

			for (c = 0; c < t->ncols; c++)
				total += w[c] + (c ? 2 : 0);
			fprintf(f, "%*s", (int)indent, "");
			while (total--)
				fputc('-', f);
			fputc('\n', f);
		}
	}
	free(w);
}

void bench_table_free(struct bench_table *t)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < t->cap * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

/* --- JSON results ------------------------------------------------------------- */

static json_t *machine_json(void)
{
	json_t *m = json_object();
	struct utsname u;
	char line[256], *model = NULL;
	FILE *f;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	if (!m)
		return NULL;
	json_object_set_new(m, "cpus", json_integer(bench_ncpus()));
	f = fopen("/proc/cpuinfo", "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, "model name", 10)) {
				char *v = strchr(line, ':');

				if (v) {
					v += 1 + strspn(v + 1, " \t");
					v[strcspn(v, "\n")] = '\0';
					model = v;
				}
				break;
			}
		}
		fclose(f);
	}
	json_object_set_new(m, "cpu_model", model ? json_string(model) : json_null());
	json_object_set_new(m, "kernel",
			    uname(&u) == 0 ? json_string(u.release) : json_null());
	json_object_set_new(m, "mem_bytes",
			    pages > 0 && psz > 0 ?
				    json_integer((json_int_t)pages * psz) :
				    json_null());
	return m;
}

json_t *bench_json_new(const char *cmd)
{
	json_t *doc = json_object();
	char when[32];
	time_t now = time(NULL);
	struct tm tm;
	int bad = 0;

	if (!doc)
		return NULL;
	if (gmtime_r(&now, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	else
		snprintf(when, sizeof(when), "unknown");
	bad |= json_object_set_new(doc, "schema_version", json_integer(BENCH_JSON_SCHEMA));
	bad |= json_object_set_new(doc, "tool", json_string("kvbench"));
	bad |= json_object_set_new(doc, "command", json_string(cmd ? cmd : ""));
	bad |= json_object_set_new(doc, "library_version",
				   json_string(kvt_version()));
	bad |= json_object_set_new(doc, "started", json_string(when));
	bad |= json_object_set_new(doc, "machine", machine_json());
	bad |= json_object_set_new(doc, "config", json_object());
	bad |= json_object_set_new(doc, "limits", json_array());
	bad |= json_object_set_new(doc, "results", json_array());
	bad |= json_object_set_new(doc, "errors", json_array());
	bad |= json_object_set_new(doc, "interrupted", json_null());
	if (bad) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

int bench_json_config(json_t *doc, const char *key, json_t *value)
{
	json_t *cfg = doc ? json_object_get(doc, "config") : NULL;

	if (!cfg || !value) {
		json_decref(value);
		return -ENOMEM;
	}
	return json_object_set_new(cfg, key, value) ? -ENOMEM : 0;
}

static int append_to(json_t *doc, const char *field, json_t *obj)
{
	json_t *arr = doc ? json_object_get(doc, field) : NULL;

	if (!obj)
		return -ENOMEM;
	if (!json_is_object(obj) || !json_is_array(arr)) {
		json_decref(obj);
		return -EINVAL;
	}
	return json_array_append_new(arr, obj) ? -ENOMEM : 0;
}

int bench_json_limit(json_t *doc, json_t *obj)
{
	return append_to(doc, "limits", obj);
}

int bench_json_result(json_t *doc, json_t *obj)
{
	return append_to(doc, "results", obj);
}

void bench_json_error(json_t *doc, const char *fmt, ...)
{
	json_t *arr = doc ? json_object_get(doc, "errors") : NULL;
	va_list ap;
	char *s;
	int n;

	if (!json_is_array(arr))
		return;
	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	json_array_append_new(arr, json_string(s));
	free(s);
}

json_t *bench_json_real(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

json_t *bench_json_reps(const struct bench_summary *s)
{
	return json_pack("{s:o, s:o, s:o, s:I}", "median",
			 bench_json_real(s->median), "min",
			 bench_json_real(s->min), "max", bench_json_real(s->max),
			 "n", (json_int_t)s->n);
}

json_t *bench_json_latency(const struct bench_summary *s)
{
	return json_pack("{s:o, s:o, s:o, s:o, s:I}", "p50",
			 bench_json_real(s->median), "p90",
			 bench_json_real(s->p90), "p99", bench_json_real(s->p99),
			 "max", bench_json_real(s->max), "n", (json_int_t)s->n);
}

static int write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Where "--json -" and "--csv -" write: standard output as it was, set
 * aside. */
static int json_stdout = -1;

void bench_json_stdout_only(void)
{
	if (json_stdout >= 0)
		return;
	fflush(stdout);
	json_stdout = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	if (json_stdout >= 0)
		dup2(STDERR_FILENO, STDOUT_FILENO);
}

const char *bench_fmt_real(char *buf, size_t cap, const char *fmt, double v)
{
	if (isfinite(v))
		snprintf(buf, cap, fmt, v);
	else
		snprintf(buf, cap, "n/a");
	return buf;
}

int bench_result_stdout(void)
{
	return json_stdout >= 0 ? json_stdout : STDOUT_FILENO;
}

int bench_json_write(json_t *doc, const char *path)
{
	struct bench_out out;
	char *text, sig[16];
	int fd, err;

	if (!doc || !path || !*path)
		return -EINVAL;
	if (bench_stop_signal()) {
		snprintf(sig, sizeof(sig), "SIG%s", sigabbrev_np(bench_stop_signal()));
		json_object_set_new(doc, "interrupted", json_string(sig));
	}
	text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				       JSON_REAL_PRECISION(6));
	if (!text) {
		fprintf(stderr, "kvbench: cannot render JSON for %s\n", path);
		return -ENOMEM;
	}
	if (!strcmp(path, "-")) {
		fd = bench_result_stdout();
		err = write_all(fd, text, strlen(text));
		if (!err)
			err = write_all(fd, "\n", 1);
		free(text);
		return err;
	}
	err = bench_out_open(path, &out);
	if (!err) {
		err = write_all(out.fd, text, strlen(text));
		if (!err)
			err = write_all(out.fd, "\n", 1);
		err = bench_out_close(&out, err);
	}
	free(text);
	return err;
}

/* --- the store's statistics ---------------------------------------------------- */

json_t *bench_store_stats(kvt_store *s)
{
	size_t cap = 4096;
	json_error_t jerr;
	json_t *doc;
	char *buf = NULL;
	int n;

	for (;;) {
		char *nb = realloc(buf, cap);

		if (!nb) {
			free(buf);
			fprintf(stderr, "kvbench: out of memory for store stats\n");
			return NULL;
		}
		buf = nb;
		n = kvt_stats_json(s, buf, cap);
		if (n < 0) {
			fprintf(stderr, "kvbench: kvt_stats_json: %s (%s)\n",
				kvt_strerror(n), kvt_last_error());
			free(buf);
			return NULL;
		}
		if ((size_t)n < cap)
			break;
		cap = (size_t)n + 1024; /* the document may grow meanwhile */
	}
	doc = json_loads(buf, 0, &jerr);
	if (!doc)
		fprintf(stderr, "kvbench: store stats are not JSON: %s (line %d)\n",
			jerr.text, jerr.line);
	free(buf);
	return doc;
}

static const json_t *walk(const json_t *obj, const char *path)
{
	char key[128];

	while (obj && *path) {
		size_t len = strcspn(path, ".");

		if (len >= sizeof(key) || !json_is_object(obj))
			return NULL;
		memcpy(key, path, len);
		key[len] = '\0';
		obj = json_object_get(obj, key);
		path += len + (path[len] == '.');
	}
	return obj;
}

int bench_stats_number(const json_t *stats, const char *path, double *out)
{
	const json_t *v;

	if (!stats || !path)
		return -ENOENT;
	v = walk(stats, path);
	if (!json_is_number(v))
		v = walk(json_object_get(stats, "tiers"), path);
	if (!json_is_number(v))
		return -ENOENT;
	*out = json_number_value(v);
	return 0;
}
