/*
 * checksum_copy.h - the loop of kvt_checksum_copy(), included by checksum.c
 * and by checksum_avx2.c (after xxhash.h with XXH_INLINE_ALL), so that each
 * build of XXH3 gets its own copy of it. Pieces of 16 KiB stay in the L1/L2
 * cache between being summed and being copied, so each byte is read from
 * memory once. of_dst: the sum of the copy, each piece summed after it is
 * copied (the bytes written are the bytes summed even if src changes).
 */
#ifndef KVT_CHECKSUM_COPY_H
#define KVT_CHECKSUM_COPY_H

#include <stddef.h>
#include <string.h>

#define SUM_COPY_PIECE (16u << 10)

static inline uint64_t checksum_copy_pieces(void *dst, const void *src, size_t len,
					    int of_dst)
{
	const char *s = src;
	char *d = dst;
	XXH3_state_t st;

	if (len <= SUM_COPY_PIECE) {
		memcpy(dst, src, len);
		return XXH3_64bits(of_dst ? dst : src, len);
	}
	XXH3_64bits_reset(&st);
	for (size_t o = 0; o < len; o += SUM_COPY_PIECE) {
		size_t k = len - o < SUM_COPY_PIECE ? len - o : SUM_COPY_PIECE;

		if (of_dst) {
			memcpy(d + o, s + o, k);
			XXH3_64bits_update(&st, d + o, k);
		} else {
			XXH3_64bits_update(&st, s + o, k);
			memcpy(d + o, s + o, k);
		}
	}
	return XXH3_64bits_digest(&st);
}

#endif
