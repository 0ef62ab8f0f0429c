/*
 * options.c - kvbench's command line (see bench.h): getopt set-up, the
 * options every command takes, one-line usage errors, integers, lists and
 * sizes in the library's own size grammar.
 *
 * Knows nothing about any particular command or what it measures.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "config.h"

/* --- options ---------------------------------------------------------------- */

void bench_getopt_begin(void)
{
	optind = 0; /* glibc: full re-initialisation */
	opterr = 0;
}

void bench_common_init(struct bench_common *co)
{
	co->json_path = NULL;
	co->reps = BENCH_DEFAULT_REPS;
}

int bench_usage_error(const char *cmd, const char *fmt, ...)
{
	const char *sep = cmd && *cmd ? " " : "";
	va_list ap;

	if (!cmd)
		cmd = "";
	fprintf(stderr, "kvbench%s%s: ", sep, cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'kvbench%s%s --help'.\n", sep, cmd);
	return BENCH_EXIT_USAGE;
}

/* The command-line spelling of the option getopt just rejected. */
static void bad_option_name(char **argv, char *buf, size_t cap)
{
	const char *last = (argv && optind > 0) ? argv[optind - 1] : NULL;

	if (last && last[0] == '-' && last[1] == '-') {
		/* "--name" or "--name=value": report the name only */
		size_t len = strcspn(last, "=");
		snprintf(buf, cap, "%.*s", (int)len, last);
	} else if (optopt > 0 && optopt < 0x100 && isprint(optopt)) {
		snprintf(buf, cap, "-%c", optopt);
	} else if (last) {
		snprintf(buf, cap, "%s", last);
	} else {
		snprintf(buf, cap, "?");
	}
}

int bench_common_option(const char *cmd, int c, const char *arg, char **argv,
			struct bench_common *co)
{
	char name[64], why[256];
	unsigned long v;

	switch (c) {
	case BENCH_OPT_JSON:
		if (!arg || !*arg) {
			bench_usage_error(cmd, "--json needs a file name");
			return -1;
		}
		if (strcmp(arg, "-") && bench_output_check(arg, why, sizeof(why))) {
			bench_usage_error(cmd, "--json %s: %s", arg, why);
			return -1;
		}
		if (!strcmp(arg, "-"))
			bench_json_stdout_only();
		co->json_path = arg;
		return 1;
	case BENCH_OPT_REPS:
		if (bench_parse_uint(arg, 1, 1000000, &v)) {
			bench_usage_error(cmd,
					  "bad --reps '%s': an integer from 1 to 1000000",
					  arg ? arg : "");
			return -1;
		}
		co->reps = (unsigned)v;
		return 1;
	case '?':
		bad_option_name(argv, name, sizeof(name));
		bench_usage_error(cmd, "unknown option '%s'", name);
		return -1;
	case ':':
		bad_option_name(argv, name, sizeof(name));
		bench_usage_error(cmd, "option '%s' needs a value", name);
		return -1;
	default:
		return 0;
	}
}

int bench_parse_uint(const char *s, unsigned long min, unsigned long max,
		     unsigned long *out)
{
	unsigned long long v;
	char *end;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*out = (unsigned long)v;
	return 0;
}

/*
 * Copies the next comma-separated item of *s into item (cap bytes) and moves
 * *s past it. Returns 1 when more items follow, 0 after the last, -EINVAL for
 * an empty item or one of cap bytes or more.
 */
static int list_item(const char **s, char *item, size_t cap)
{
	size_t len = strcspn(*s, ",");

	if (len == 0 || len >= cap)
		return -EINVAL;
	memcpy(item, *s, len);
	item[len] = '\0';
	if (!(*s)[len])
		return 0;
	*s += len + 1;
	return 1;
}

int bench_list_has_empty(const char *s)
{
	if (!s || !*s || *s == ',')
		return 1;
	return strstr(s, ",,") != NULL || s[strlen(s) - 1] == ',';
}

/*
 * Hands each comma-separated item of s to one(item, index, ctx), at most
 * max_n of them, and sets *n. Returns 0, -EINVAL (NULL, an empty item),
 * -E2BIG (too many) or what one() returned.
 */
static int parse_list(const char *s, size_t max_n, size_t *n,
		      int (*one)(const char *item, size_t i, void *ctx), void *ctx)
{
	char item[64];
	size_t count = 0;
	int more = 1, err;

	if (!s)
		return -EINVAL;
	while (more) {
		more = list_item(&s, item, sizeof(item));
		if (more < 0)
			return more;
		if (count == max_n)
			return -E2BIG;
		err = one(item, count, ctx);
		if (err)
			return err;
		count++;
	}
	*n = count;
	return 0;
}

struct uint_list {
	unsigned long min, max, *out;
};

static int one_uint(const char *item, size_t i, void *ctx)
{
	struct uint_list *l = ctx;

	return bench_parse_uint(item, l->min, l->max, &l->out[i]);
}

int bench_parse_uint_list(const char *s, unsigned long min, unsigned long max,
			  unsigned long *out, size_t max_n, size_t *n)
{
	struct uint_list l = { min, max, out };

	return parse_list(s, max_n, n, one_uint, &l);
}

/* --- sizes -------------------------------------------------------------------- */

int bench_parse_size(const char *s, uint64_t *out)
{
	return parse_size(s, out);
}

int bench_size_arg(const char *cmd, const char *opt, const char *arg,
		   uint64_t min, uint64_t max, uint64_t *out)
{
	char lo[32], hi[32];

	if (bench_parse_size(arg, out))
		return bench_usage_error(cmd, "bad %s: %s", opt, kvt_last_error());
	if (*out < min && max == UINT64_MAX)
		return bench_usage_error(cmd, "bad %s '%s': at least %s", opt, arg,
					 bench_fmt_size(min, lo, sizeof(lo)));
	if (*out < min || *out > max)
		return bench_usage_error(cmd, "bad %s '%s': from %s to %s", opt, arg,
					 bench_fmt_size(min, lo, sizeof(lo)),
					 bench_fmt_size(max, hi, sizeof(hi)));
	return 0;
}

static int one_size(const char *item, size_t i, void *ctx)
{
	uint64_t *out = ctx;
	int err = bench_parse_size(item, &out[i]);

	return err ? err : out[i] == 0 ? -ERANGE : 0;
}

int bench_parse_size_list(const char *s, uint64_t *out, size_t max_n, size_t *n)
{
	return parse_list(s, max_n, n, one_size, out);
}

const char *bench_fmt_size(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned i = 0;

	while (i < 4 && bytes != 0 && (bytes & 1023) == 0) {
		bytes >>= 10;
		i++;
	}
	snprintf(buf, cap, "%llu%s", (unsigned long long)bytes, names[i]);
	return buf;
}
