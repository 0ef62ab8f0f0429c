/*
 * checksum_avx2.c - the AVX2 build of kvt_checksum()'s XXH3-64. The Makefile
 * compiles this file, and only this one, with -mavx2, so xxHash's public
 * XXH3_64bits() is built with its AVX2 kernels here while the rest of the
 * library stays runnable on any x86-64. xxHash is included with
 * XXH_INLINE_ALL, so its functions are static to this file and no AVX2 code
 * can be merged into a caller elsewhere. checksum.c calls it only after
 * __builtin_cpu_supports("avx2"); the sums equal the portable ones.
 */
#if defined(__x86_64__) && defined(__AVX2__)
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checksum_copy.h"
#include "internal.h"

uint64_t kvt_checksum_avx2(const void *p, size_t len)
{
	return XXH3_64bits(p, len);
}

/* kvt_checksum_copy's AVX2 build */
uint64_t kvt_checksum_copy_avx2(void *dst, const void *src, size_t len, int of_dst)
{
	return checksum_copy_pieces(dst, src, len, of_dst);
}
#endif /* elsewhere checksum.c never calls it and this file is empty */
