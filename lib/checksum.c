/*
 * checksum.c - XXH3-64 (seed 0) of payloads: disk records, checkpoint
 * bodies and blocks on the wire. Payload checksums are most of the CPU time
 * of the disk and peer paths, so on x86-64 xxHash's AVX2 kernels are
 * compiled too (as xxHash's own x86 dispatcher does) and picked at run time
 * when the CPU has AVX2; the sums are the same either way.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX2__)
#include <immintrin.h>
#define KVT_XXH3_DISPATCH 1
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#endif
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"

#ifdef KVT_XXH3_DISPATCH
XXH_TARGET_AVX2 static uint64_t xxh3_long_avx2(const void *p, size_t len)
{
	return XXH3_hashLong_64b_internal(p, len, XXH3_kSecret, sizeof(XXH3_kSecret),
					  XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
}
#endif

uint64_t kvt_checksum(const void *p, size_t len)
{
#ifdef KVT_XXH3_DISPATCH
	if (len > XXH3_MIDSIZE_MAX && __builtin_cpu_supports("avx2"))
		return xxh3_long_avx2(p, len);
#endif
	return XXH3_64bits(p, len);
}
