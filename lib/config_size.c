/*
 * config_size.c - size strings of kvtier-config(5) ("4GiB", "1.5 M",
 * "65536"): digits, an optional fraction, and a unit (B, or K, M, G, T
 * alone or with "B" or "iB", powers of 1024, either case); the result must
 * fit 64 bits, a fraction needs a unit, and spaces only separate a unit.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "internal.h"

static int is_letter(char ch, char upper)
{
	return ch == upper || ch == upper + ('a' - 'A');
}

/*
 * Multiplier of a unit: "" or "B" is 1; K, M, G, T alone or followed by "B"
 * or "iB" are powers of 1024. Letters match in either case. 0 if unknown.
 */
static uint64_t unit_multiplier(const char *u)
{
	static const char prefixes[] = "KMGT";
	size_t n = strlen(u);
	uint64_t mult = 0;

	if (n == 0 || (n == 1 && is_letter(u[0], 'B')))
		return 1;
	for (int i = 0; i < 4; i++)
		if (is_letter(u[0], prefixes[i]))
			mult = 1ull << (10 * (i + 1));
	if (!mult)
		return 0;
	if (n == 1 || (n == 2 && is_letter(u[1], 'B')) ||
	    (n == 3 && is_letter(u[1], 'I') && is_letter(u[2], 'B')))
		return mult;
	return 0;
}

int config_size_parse(const char *s, uint64_t *out, char *why, size_t whylen)
{
	const char *p = s;
	uint64_t ip = 0, frac = 0, scale = 1;
	int has_frac = 0;

	if (!s) {
		snprintf(why, whylen, "no size given");
		return -EINVAL;
	}
	if (*p == '\0') {
		snprintf(why, whylen, "empty size");
		return -EINVAL;
	}
	if (*p == '-') {
		snprintf(why, whylen, "negative size");
		return -EINVAL;
	}
	if (*p < '0' || *p > '9') {
		snprintf(why, whylen, "not a number (expected digits, e.g. \"4GiB\")");
		return -EINVAL;
	}
	for (; *p >= '0' && *p <= '9'; p++) {
		if (__builtin_mul_overflow(ip, 10, &ip) ||
		    __builtin_add_overflow(ip, (uint64_t)(*p - '0'), &ip)) {
			snprintf(why, whylen, "too large for 64 bits");
			return -EINVAL;
		}
	}
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9') {
			snprintf(why, whylen, "expected digits after the decimal point");
			return -EINVAL;
		}
		has_frac = 1;
		/* 18 digits are exact in 64 bits; later ones are below a byte */
		for (int nd = 0; *p >= '0' && *p <= '9'; p++, nd++) {
			if (nd < 18) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				scale *= 10;
			}
		}
	}
	const char *gap = p;
	while (*p == ' ')
		p++;
	if (!*p)
		p = gap; /* spaces only separate a unit: "1 " is as bad as "1G " */
	uint64_t mult = unit_multiplier(p);
	if (!mult) {
		snprintf(why, whylen,
			 "unknown unit \"%.*s\" (use B, K/KB/KiB, M/MB/MiB, G/GB/GiB or T/TB/TiB)",
			 QUOTE_MAX, p);
		return -EINVAL;
	}
	if (has_frac && mult == 1) {
		snprintf(why, whylen, "a fraction needs a unit (K, M, G or T): bytes are whole");
		return -EINVAL;
	}
	unsigned __int128 v = (unsigned __int128)ip * mult +
			      (unsigned __int128)frac * mult / scale;
	if (v > UINT64_MAX) {
		snprintf(why, whylen, "too large for 64 bits");
		return -EINVAL;
	}
	*out = (uint64_t)v;
	return 0;
}

int parse_size(const char *s, uint64_t *out)
{
	char why[160];
	uint64_t v;

	if (!out)
		return kvt_fail(-EINVAL, "parse_size: out is NULL");
	if (config_size_parse(s, &v, why, sizeof(why)) < 0) {
		if (!s)
			return kvt_fail(-EINVAL, "parse_size: %s", why);
		return kvt_fail(-EINVAL, "size \"%.*s\": %s", QUOTE_MAX, s, why);
	}
	*out = v;
	return 0;
}
