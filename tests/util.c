/* util.c - see util.h. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
