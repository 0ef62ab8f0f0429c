/* util.c - see util.h. */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "bench.h"
#include "util.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void fill_block(kvt_key key, void *buf, size_t len)
{
	uint64_t seed = mix(key.lo ^ mix(key.hi ^ len));
	unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = mix(seed + i);
		memcpy(p + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = mix(seed + i);
		memcpy(p + i, &v, len - i);
	}
}

int check_block(kvt_key key, const void *buf, size_t len)
{
	uint64_t seed = mix(key.lo ^ mix(key.hi ^ len));
	const unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = mix(seed + i);
		if (memcmp(p + i, &v, 8))
			return 0;
	}
	if (i < len) {
		uint64_t v = mix(seed + i);
		if (memcmp(p + i, &v, len - i))
			return 0;
	}
	return 1;
}

kvt_key test_key(uint64_t i)
{
	kvt_key k = { mix(i), mix(i ^ 0x5555555555555555ull) };
	return k;
}

char *make_temp_dir(const char *tag)
{
	char *p = malloc(256);
	if (!p)
		return NULL;
	snprintf(p, 256, "/tmp/kvt-%s-XXXXXX", tag);
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void rm_rf(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void store_put_block(kvt_store *s, kvt_key k, size_t len)
{
	void *b = malloc(len);
	assert_non_null(b);
	fill_block(k, b, len);
	int rc = kvt_put(s, k, b, len);
	if (rc)
		fail_msg("kvt_put: %s: %s", kvt_strerror(rc), kvt_last_error());
	free(b);
}

int store_get_block(kvt_store *s, kvt_key k, size_t len)
{
	void *b = malloc(len);
	size_t got = 0;
	assert_non_null(b);
	int rc = kvt_get(s, k, b, len, &got);
	if (rc == 0) {
		assert_int_equal(got, len);
		assert_true(check_block(k, b, len));
	}
	free(b);
	return rc;
}

long long store_stat(kvt_store *s, const char *tier, const char *name)
{
	/* Counters move while other threads (a peer's server, the evictor)
	 * work, so the document can grow between the two calls: leave room. */
	char *buf = NULL;
	for (int tries = 0; tries < 100; tries++) {
		int n = kvt_stats_json(s, NULL, 0);
		assert_true(n > 0);
		size_t cap = (size_t)n + 4096;
		buf = malloc(cap);
		assert_non_null(buf);
		int m = kvt_stats_json(s, buf, cap);
		assert_true(m > 0);
		if ((size_t)m < cap)
			break;
		free(buf);
		buf = NULL;
	}
	assert_non_null(buf);
	json_t *j = json_loads(buf, 0, NULL);
	free(buf);
	assert_non_null(j);
	json_t *v = json_object_get(json_object_get(j, tier), name);
	if (!v)
		fail_msg("no stat %s.%s", tier, name);
	long long x = json_integer_value(v);
	json_decref(j);
	return x;
}

unsigned test_owner(kvt_key k, const char *const *names, unsigned n)
{
	return bench_key_owner(k, names, n);
}

void test_owned_keys(const char *const *names, unsigned nn, unsigned owner,
		     uint64_t from, kvt_key *out, size_t n)
{
	for (size_t got = 0; got < n; from++)
		if (test_owner(test_key(from), names, nn) == owner)
			out[got++] = test_key(from);
}

int test_free_port(void)
{
	int port = 0;

	assert_int_equal(bench_free_ports(&port, 1), 0);
	return port;
}
