/*
 * checksum.c - XXH3-64 (seed 0) of payloads: disk records, checkpoint
 * bodies and blocks on the wire. The values are part of the on-disk and wire
 * formats, so they never change; only the speed of computing them does.
 * Payload checksums are most of the CPU time of the disk and peer paths, so
 * on x86-64 a second copy of xxHash's public XXH3_64bits() is compiled for
 * AVX2 (checksum_avx2.c, the only file built with -mavx2) and called for
 * inputs long enough to gain from it when the CPU has AVX2.
 * Knows nothing about what it sums.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checksum_copy.h"
#include "internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX2__)
#define KVT_CHECKSUM_DISPATCH 1
#endif

uint64_t kvt_checksum(const void *p, size_t len)
{
#ifdef KVT_CHECKSUM_DISPATCH
	/* Up to 240 bytes XXH3 runs no vector loop: nothing to gain. */
	if (len > 240 && __builtin_cpu_supports("avx2"))
		return kvt_checksum_avx2(p, len);
#endif
	return XXH3_64bits(p, len);
}

uint64_t kvt_checksum_copy(void *dst, const void *src, size_t len, int of_dst)
{
#ifdef KVT_CHECKSUM_DISPATCH
	if (len > 240 && __builtin_cpu_supports("avx2"))
		return kvt_checksum_copy_avx2(dst, src, len, of_dst);
#endif
	return checksum_copy_pieces(dst, src, len, of_dst);
}
