/*
 * blocks.c - verifiable block contents (see common.h): a stream of bytes
 * determined by a seed, so that any reader can check any block without
 * keeping a copy.
 */
#include <string.h>

#include "common.h"

uint64_t common_mix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t common_key_seed(kvt_key key)
{
	uint64_t s = key.lo ^ (key.hi * 0x9e3779b97f4a7c15ull);

	return common_mix64(&s);
}

/*
 * The stream: word i (8 bytes, little-endian as stored by this machine) is a
 * cheap mix of seed and i, so the fill and the check run at memory speed and
 * any byte can be recomputed on its own.
 */
static inline uint64_t stream_word(uint64_t seed, uint64_t i)
{
	uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;

	z ^= z >> 29;
	z *= 0xbf58476d1ce4e5b9ull;
	return z ^ (z >> 32);
}

void common_fill(void *buf, size_t len, uint64_t seed)
{
	unsigned char *p = buf;
	size_t i, words = len / 8;
	uint64_t w;

	for (i = 0; i < words; i++) {
		w = stream_word(seed, i);
		memcpy(p + i * 8, &w, 8);
	}
	if (len % 8) {
		w = stream_word(seed, words);
		memcpy(p + words * 8, &w, len % 8);
	}
}

long long common_check(const void *buf, size_t len, uint64_t seed)
{
	const unsigned char *p = buf;
	size_t i, b, words = len / 8;
	uint64_t w, got;

	for (i = 0; i < words; i++) {
		w = stream_word(seed, i);
		memcpy(&got, p + i * 8, 8);
		if (got != w)
			break;
	}
	if (i == words && len % 8 == 0)
		return -1;
	w = stream_word(seed, i);
	for (b = 0; b < 8 && i * 8 + b < len; b++)
		if (p[i * 8 + b] != ((const unsigned char *)&w)[b])
			return (long long)(i * 8 + b);
	return -1;
}
