/*
 * test_checksum.c - kvt_checksum() of lib/checksum.c: the XXH3-64 (seed 0)
 * of payloads that disk records, checkpoints and blocks on the wire carry.
 * The expected sums below are fixed test vectors computed independently with
 * Debian's `xxhsum -H3` over the same bytes; they are part of the on-disk and
 * wire formats, so a change of implementation (the AVX2 build, another
 * xxHash release) must give exactly these values.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The portable build of XXH3-64 (this file is compiled without -mavx2),
 * the reference for the library's AVX2 build. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"

/* byte i = bits 24..31 of i * 2654435761 */
static uint8_t *make_bytes(size_t n, size_t pad)
{
	uint8_t *p = malloc(n + pad + 1);
	assert_non_null(p);
	for (size_t i = 0; i < n + pad; i++)
		p[i] = (uint8_t)(((uint64_t)i * 2654435761u) >> 24);
	return p;
}

static const struct {
	size_t len;
	uint64_t sum;
} VECTORS[] = {
	{ 0, 0x2d06800538d394c2ull },       { 1, 0xc44bdff4074eecdbull },
	{ 3, 0xe14090f554a5ea90ull },       { 4, 0x2e8d078a566e9749ull },
	{ 8, 0xcd1c7f88482fcaefull },       { 9, 0xbfe43def699fa9e3ull },
	{ 16, 0x81e9eb8634460bb9ull },      { 17, 0x9998430fd0a655beull },
	{ 128, 0x75eca5c5d5594884ull },     { 129, 0xa05da42e7a4e4667ull },
	{ 240, 0x5eb2467c8c9e3969ull },     { 241, 0x2d431e984c441f15ull },
	{ 1024, 0xe99def1145f12936ull },    { 1025, 0x83cba9b371e4e7f4ull },
	{ 4096, 0x9bf67f8deff876aeull },    { 65543, 0xfa42662159a2e0f2ull },
	{ 1048576, 0xa60868b9a5018405ull }, { 4194305, 0x0b0b5cbb1ed64332ull },
};
#define NVEC (sizeof(VECTORS) / sizeof(VECTORS[0]))

static void test_checksum_matches_vectors(void **state)
{
	(void)state;
	size_t max = VECTORS[NVEC - 1].len;
	uint8_t *p = make_bytes(max, 0);
	uint8_t *shifted = malloc(max + 8);

	assert_non_null(shifted);
	for (size_t i = 0; i < NVEC; i++) {
		uint64_t got = kvt_checksum(p, VECTORS[i].len);

		if (got != VECTORS[i].sum)
			fail_msg("%zu bytes: 0x%016llx, expected 0x%016llx", VECTORS[i].len,
				 (unsigned long long)got, (unsigned long long)VECTORS[i].sum);
		/* The same bytes at an odd address sum the same. */
		memcpy(shifted + 3, p, VECTORS[i].len);
		assert_true(kvt_checksum(shifted + 3, VECTORS[i].len) == VECTORS[i].sum);
	}
	free(shifted);
	free(p);
}

/* Every length across the boundaries of XXH3's short, middle and long
 * paths (16, 128, 240 bytes; 64-byte stripes; 1 KiB blocks), at every
 * alignment of a word: the library's sum, its AVX2 build when this CPU has
 * AVX2, and the portable XXH3_64bits() compiled here agree. */
static void test_checksum_builds_agree(void **state)
{
	(void)state;
	const size_t max = 4200;
	uint8_t *p = make_bytes(max, 8);
	int avx2 = 0;

#if defined(__x86_64__) && defined(__GNUC__)
	avx2 = __builtin_cpu_supports("avx2");
#endif
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len <= max; len++) {
			uint64_t want = XXH3_64bits(p + off, len);

			if (kvt_checksum(p + off, len) != want)
				fail_msg("kvt_checksum of %zu bytes at +%zu differs", len, off);
#if defined(__x86_64__) && defined(__GNUC__)
			if (avx2 && kvt_checksum_avx2(p + off, len) != want)
				fail_msg("AVX2 sum of %zu bytes at +%zu differs", len, off);
#endif
		}
	free(p);
	if (!avx2)
		skip(); /* the portable sums agreed; no AVX2 build to compare here */
}

/* kvt_checksum_copy: the sum of the source (of the copy with of_dst: the
 * same bytes), the copy exact and nothing written past it, for lengths around its 16 KiB pieces and XXH3's own
 * boundaries, at odd alignments of both ends. */
static void test_checksum_copy_sums_and_copies(void **state)
{
	(void)state;
	static const size_t lens[] = { 0, 1, 16, 17, 128, 129, 240, 241, 1024, 4095,
				       16383, 16384, 16385, 32768 + 7, 65536,
				       262144, 1048576 + 4096 + 3 };
	const size_t max = 1048576 + 4096 + 3 + 64;
	uint8_t *p = make_bytes(max, 8);
	uint8_t *q = malloc(max);

	assert_non_null(q);
	for (size_t i = 0; i < 2 * sizeof(lens) / sizeof(lens[0]); i++)
		for (size_t off = 0; off < 8; off += 3) {
			size_t len = lens[i / 2];

			memset(q, 0xa5, max);
			uint64_t got = kvt_checksum_copy(q + 5 - off / 3, p + off, len, (int)(i % 2));
			if (got != XXH3_64bits(p + off, len))
				fail_msg("sum of a copy of %zu bytes at +%zu differs", len, off);
			if (memcmp(q + 5 - off / 3, p + off, len) != 0)
				fail_msg("copy of %zu bytes at +%zu differs", len, off);
			for (size_t j = 0; j < 5 - off / 3; j++)
				assert_int_equal(q[j], 0xa5);
			for (size_t j = 5 - off / 3 + len; j < max; j++)
				if (q[j] != 0xa5)
					fail_msg("copy of %zu bytes wrote byte %zu", len, j);
		}
	free(q);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checksum_matches_vectors),
		cmocka_unit_test(test_checksum_builds_agree),
		cmocka_unit_test(test_checksum_copy_sums_and_copies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
