/*
 * hash.c - the namespace root and chained-prefix block keys (XXH3-128).
 *
 * Owns the byte layouts that make keys stable across processes, machines,
 * builds and library versions: the versioned namespace serialisation hashed
 * by kvt_ns_root() and the parent||tokens input of every chain step of
 * kvt_hash_chain(). Both are documented byte for byte in kvt_ns_root(3) and
 * kvt_hash_chain(3) and pinned by test vectors in tests/test_hash.c; changing
 * either one changes every key ever stored, so it needs a new version tag.
 * Knows nothing about stores, tiers or configuration.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* XXH3's output is fixed from xxHash 0.8.0 on; before it, XXH3 was
 * experimental and its output could change between releases, so a build
 * against an older xxhash.h (inlined here) could give other keys (and other
 * disk checksums and peer owners) than every other build. Refuse it rather
 * than build a library whose keys need not match; tests/test_hash.c's
 * vectors check the hash itself. */
#if !defined(XXH_VERSION_NUMBER) || XXH_VERSION_NUMBER < 800
#error "libkvtier needs xxHash 0.8.0 or later (XXH3 is stable from 0.8.0 on)"
#endif

#include "internal.h"
#include "kvtier.h"

/* Version tag that starts every namespace serialisation (no NUL). */
#define NS_TAG "kvtier-ns-v1"
#define NS_TAG_LEN (sizeof(NS_TAG) - 1)

/* Length field written for a NULL string, so that NULL and "" differ. */
#define NS_NULL_STR 0xffffffffu

/*
 * Blocks of up to SMALL_BLOCK_TOKENS tokens are copied with their parent into
 * one stack buffer and hashed in one shot; larger ones are streamed, which by
 * XXH3's definition yields the same value without a buffer of their size.
 */
#define SMALL_BLOCK_TOKENS 512u
/* Tokens byte-swapped per streaming update on big-endian hosts. */
#define SWAP_CHUNK_TOKENS 256u

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_IS_LE 0
#else
#define HOST_IS_LE 1
#endif

static inline void put_le32(unsigned char *p, uint32_t v)
{
#if !HOST_IS_LE
	v = __builtin_bswap32(v);
#endif
	memcpy(p, &v, 4);
}

static inline void put_le64(unsigned char *p, uint64_t v)
{
#if !HOST_IS_LE
	v = __builtin_bswap64(v);
#endif
	memcpy(p, &v, 8);
}

/* Writes n tokens as little-endian uint32 at dst. */
static inline void put_tokens_le(unsigned char *dst, const uint32_t *src,
				 size_t n)
{
#if HOST_IS_LE
	memcpy(dst, src, n * sizeof(uint32_t));
#else
	for (size_t i = 0; i < n; i++)
		put_le32(dst + 4 * i, src[i]);
#endif
}

static inline kvt_key key_from_hash(XXH128_hash_t h)
{
	kvt_key k = { .lo = h.low64, .hi = h.high64 };
	return k;
}

static inline void put_key_le(unsigned char *p, kvt_key k)
{
	put_le64(p, k.lo);
	put_le64(p + 8, k.hi);
}

/* --- namespace root ------------------------------------------------------- */

static void ns_update_u32(XXH3_state_t *st, uint32_t v)
{
	unsigned char b[4];

	put_le32(b, v);
	XXH3_128bits_update(st, b, sizeof(b));
}

/* A string field: u32 LE length then its bytes; NULL as NS_NULL_STR alone. */
static int ns_update_str(XXH3_state_t *st, const char *s, const char *field)
{
	if (!s) {
		ns_update_u32(st, NS_NULL_STR);
		return 0;
	}
	size_t len = strlen(s);
	if (len >= NS_NULL_STR) {
		kvt_set_error("kvt_ns_root: ns->%s is %zu bytes long, the limit is %u",
			      field, len, NS_NULL_STR - 1);
		return -1;
	}
	ns_update_u32(st, (uint32_t)len);
	XXH3_128bits_update(st, s, len);
	return 0;
}

KVT_API kvt_key kvt_ns_root(const kvt_namespace *ns)
{
	const kvt_key zero = { 0, 0 };
	XXH3_state_t st;
	unsigned char b[8];

	if (!ns) {
		kvt_set_error("kvt_ns_root: ns is NULL");
		return zero;
	}
	if (!ns->salt && ns->salt_len) {
		kvt_set_error("kvt_ns_root: ns->salt is NULL but ns->salt_len is %zu",
			      ns->salt_len);
		return zero;
	}

	XXH3_INITSTATE(&st);
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, NS_TAG, NS_TAG_LEN);
	if (ns_update_str(&st, ns->model, "model") ||
	    ns_update_str(&st, ns->tokenizer, "tokenizer") ||
	    ns_update_str(&st, ns->kv_format, "kv_format"))
		return zero;
	ns_update_u32(&st, ns->tp_rank);
	ns_update_u32(&st, ns->tp_size);
	ns_update_u32(&st, ns->pp_rank);
	ns_update_u32(&st, ns->pp_size);
	ns_update_u32(&st, ns->block_tokens);
	put_le64(b, (uint64_t)ns->salt_len);
	XXH3_128bits_update(&st, b, sizeof(b));
	if (ns->salt_len)
		XXH3_128bits_update(&st, ns->salt, ns->salt_len);
	return key_from_hash(XXH3_128bits_digest(&st));
}

/* --- chained block keys ------------------------------------------------------ */

/*
 * One-shot path: parent and tokens share one stack buffer. Always inlined so
 * that calls with a constant bt get a fixed-size copy and hash.
 */
static inline __attribute__((always_inline)) void
chain_small(kvt_key parent, const uint32_t *tokens, size_t bt, kvt_key *keys,
	    size_t n)
{
	unsigned char buf[16 + 4 * SMALL_BLOCK_TOKENS]
		__attribute__((aligned(16)));
	const size_t len = 16 + 4 * bt;

	put_key_le(buf, parent);
	for (size_t i = 0; i < n; i++) {
		put_tokens_le(buf + 16, tokens + i * bt, bt);
		kvt_key k = key_from_hash(XXH3_128bits(buf, len));
		keys[i] = k;
		put_key_le(buf, k);
	}
}

/* Streaming path for large blocks: the same value as one shot, no big copy. */
static void chain_large(kvt_key parent, const uint32_t *tokens, size_t bt,
			kvt_key *keys, size_t n)
{
	XXH3_state_t st;
	unsigned char pk[16];

	XXH3_INITSTATE(&st);
	for (size_t i = 0; i < n; i++) {
		const uint32_t *t = tokens + i * bt;

		XXH3_128bits_reset(&st);
		put_key_le(pk, parent);
		XXH3_128bits_update(&st, pk, sizeof(pk));
#if HOST_IS_LE
		XXH3_128bits_update(&st, t, bt * sizeof(uint32_t));
#else
		unsigned char sw[4 * SWAP_CHUNK_TOKENS];
		for (size_t off = 0; off < bt; off += SWAP_CHUNK_TOKENS) {
			size_t m = bt - off < SWAP_CHUNK_TOKENS ?
					   bt - off : SWAP_CHUNK_TOKENS;
			put_tokens_le(sw, t + off, m);
			XXH3_128bits_update(&st, sw, 4 * m);
		}
#endif
		parent = key_from_hash(XXH3_128bits_digest(&st));
		keys[i] = parent;
	}
}

KVT_API size_t kvt_hash_chain(kvt_key parent, const uint32_t *tokens,
			      size_t ntokens, uint32_t block_tokens,
			      kvt_key *keys, size_t max_keys)
{
	if (block_tokens == 0) {
		kvt_set_error("kvt_hash_chain: block_tokens is 0");
		return 0;
	}
	if (!tokens && ntokens) {
		kvt_set_error("kvt_hash_chain: tokens is NULL but ntokens is %zu",
			      ntokens);
		return 0;
	}
	if (!keys && max_keys) {
		kvt_set_error("kvt_hash_chain: keys is NULL but max_keys is %zu",
			      max_keys);
		return 0;
	}

	size_t n = ntokens / block_tokens;
	if (n > max_keys)
		n = max_keys;
	if (n == 0)
		return 0;
	/* Common block sizes get fixed-size code (about 1.5-2x faster at 16). */
	switch (block_tokens) {
	case 16:
		chain_small(parent, tokens, 16, keys, n);
		break;
	case 32:
		chain_small(parent, tokens, 32, keys, n);
		break;
	case 64:
		chain_small(parent, tokens, 64, keys, n);
		break;
	default:
		if (block_tokens <= SMALL_BLOCK_TOKENS)
			chain_small(parent, tokens, block_tokens, keys, n);
		else
			chain_large(parent, tokens, block_tokens, keys, n);
	}
	return n;
}
