/*
 * test_hash.c - unit tests of lib/hash.c: the namespace root and chained
 * block keys. The expected keys below are fixed test vectors: they were
 * computed by this implementation and, independently, by a Python script
 * that builds the byte layouts of kvt_ns_root(3) and kvt_hash_chain(3) and
 * hashes them with Debian's xxh128sum. If one of them changes, every key ever
 * stored changes: that needs a new namespace version tag, not a new vector.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"
#include "kvtier.h"

#define K(l, h) ((kvt_key){ .lo = (l), .hi = (h) })

static void assert_key(kvt_key got, kvt_key want)
{
	if (!kvt_key_eq(got, want))
		fail_msg("key lo=0x%016llx hi=0x%016llx, expected lo=0x%016llx hi=0x%016llx",
			 (unsigned long long)got.lo, (unsigned long long)got.hi,
			 (unsigned long long)want.lo, (unsigned long long)want.hi);
}

static const kvt_namespace NS1 = {
	.model = "qwen3-coder-30b-a3b",
	.tokenizer = "qwen3-tokenizer-v1",
	.kv_format = "bf16/NHD",
	.tp_rank = 0, .tp_size = 1, .pp_rank = 0, .pp_size = 1,
	.block_tokens = 16,
	.salt = "tenant-a",
	.salt_len = 8,
};

static const kvt_key NS1_ROOT = K(0x4323be8f01f26b3aull, 0x65016d243d0047dfull);

/* tokens[i] = i * mul + add, wrapping in 32 bits */
static uint32_t *make_tokens(size_t n, uint32_t mul, uint32_t add)
{
	uint32_t *t = malloc(n * sizeof(*t));
	assert_non_null(t);
	for (size_t i = 0; i < n; i++)
		t[i] = (uint32_t)i * mul + add;
	return t;
}

/* --- test vectors --------------------------------------------------------- */

static void test_ns_root_matches_vectors(void **state)
{
	(void)state;
	kvt_namespace nul = { 0 };
	kvt_namespace empty = { .model = "", .tokenizer = "", .kv_format = "" };

	assert_key(kvt_ns_root(&NS1), NS1_ROOT);
	assert_key(kvt_ns_root(&nul),
		   K(0xdb7d61c42032241eull, 0xe7e635f45877a284ull));
	assert_key(kvt_ns_root(&empty),
		   K(0x0d32b8075b86c42aull, 0x3862e04169062238ull));
}

static void test_chain_from_zero_parent_matches_vectors(void **state)
{
	(void)state;
	uint32_t *t = make_tokens(32, 1, 0); /* 0, 1, ..., 31 */
	kvt_key keys[2];

	assert_int_equal(kvt_hash_chain(K(0, 0), t, 32, 16, keys, 2), 2);
	assert_key(keys[0], K(0x0b49a1755bdbc8b2ull, 0x16d310809c3605d6ull));
	assert_key(keys[1], K(0xf0c96fbf597b5c92ull, 0xe18227c6445d18b3ull));
	free(t);
}

static void test_chain_block16_matches_vectors(void **state)
{
	(void)state;
	uint32_t *t = make_tokens(48, 2654435761u, 0);
	kvt_key keys[3];

	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 48, 16, keys, 3), 3);
	assert_key(keys[0], K(0x9f8db56b43169de5ull, 0x6c9e5c2de5aceadfull));
	assert_key(keys[1], K(0xebacc77d9fa6fb98ull, 0x1442b992c3dbe08eull));
	assert_key(keys[2], K(0xb772f3b8c9c4fdb9ull, 0x6efb75632b6fb738ull));
	free(t);
}

static void test_chain_block32_and_48_match_vectors(void **state)
{
	(void)state;
	uint32_t *t = make_tokens(96, 2654435761u, 0);
	kvt_key keys[3];

	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 96, 32, keys, 3), 3);
	assert_key(keys[0], K(0x089592527dd87cc4ull, 0x8d509a73f0083ef5ull));
	assert_key(keys[1], K(0x7de808bc5a4b9480ull, 0xa20e3a261766c11full));
	assert_key(keys[2], K(0xfb9f12dfeecdb8e0ull, 0x7f8255ae794ddd39ull));

	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 96, 48, keys, 3), 2);
	assert_key(keys[0], K(0xf8a67b7004160d6aull, 0x82769312b01d711dull));
	assert_key(keys[1], K(0x46052e8b99fb23eeull, 0x5e4f78bcd340d157ull));
	free(t);
}

static void test_chain_block64_matches_vectors(void **state)
{
	(void)state;
	uint32_t *t = make_tokens(128, 2246822519u, 7);
	kvt_key keys[2];

	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 128, 64, keys, 2), 2);
	assert_key(keys[0], K(0x69ddd1c5f48425f1ull, 0x5287ce0ca5e89360ull));
	assert_key(keys[1], K(0xb8babdaa999c682dull, 0x25cc909fa15cd07eull));
	free(t);
}

static void test_chain_large_block_matches_vectors(void **state)
{
	(void)state;
	uint32_t *t = make_tokens(2000, 1, 0);
	kvt_key keys[2];
	kvt_key parent = K(0x0123456789abcdefull, 0xfedcba9876543210ull);

	assert_int_equal(kvt_hash_chain(parent, t, 2000, 1000, keys, 2), 2);
	assert_key(keys[0], K(0xbced09174a7cf1f4ull, 0x80d803d958f31a80ull));
	assert_key(keys[1], K(0x83ac4ab1ad2a35a6ull, 0x0e4e2446d50393cbull));
	free(t);
}

/* --- chain behaviour ---------------------------------------------------------- */

/* The documented rule, evaluated directly with one-shot XXH3-128. */
static kvt_key reference_step(kvt_key parent, const uint32_t *t, size_t bt)
{
	size_t len = 16 + 4 * bt;
	unsigned char *b = malloc(len);
	assert_non_null(b);
	for (int i = 0; i < 8; i++) {
		b[i] = (unsigned char)(parent.lo >> (8 * i));
		b[8 + i] = (unsigned char)(parent.hi >> (8 * i));
	}
	for (size_t j = 0; j < bt; j++)
		for (int i = 0; i < 4; i++)
			b[16 + 4 * j + i] = (unsigned char)(t[j] >> (8 * i));
	XXH128_hash_t h = XXH3_128bits(b, len);
	free(b);
	return K(h.low64, h.high64);
}

static void test_chain_follows_documented_rule_for_every_path(void **state)
{
	(void)state;
	/* fixed-size, generic one-shot, last one-shot and streaming sizes */
	static const uint32_t sizes[] = { 1, 2, 15, 16, 17, 32, 33, 64, 100,
					  511, 512, 513, 700, 4096 };
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t bt = sizes[s];
		size_t n = 3 * (size_t)bt;
		uint32_t *t = make_tokens(n, 2654435761u, bt);
		kvt_key keys[3];
		kvt_key p = NS1_ROOT;

		assert_int_equal(kvt_hash_chain(NS1_ROOT, t, n, bt, keys, 3), 3);
		for (size_t i = 0; i < 3; i++) {
			p = reference_step(p, t + i * bt, bt);
			assert_key(keys[i], p);
		}
		free(t);
	}
}

static void test_chain_continues_across_calls(void **state)
{
	(void)state;
	static const uint32_t sizes[] = { 16, 17, 64, 700 };
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t bt = sizes[s];
		size_t n = 10 * (size_t)bt;
		uint32_t *t = make_tokens(n, 40503u, 11);
		kvt_key whole[10], part[10];

		assert_int_equal(kvt_hash_chain(NS1_ROOT, t, n, bt, whole, 10), 10);
		/* 4 blocks, then the rest with the 4th key as parent */
		assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 4 * (size_t)bt, bt,
						part, 10), 4);
		assert_int_equal(kvt_hash_chain(part[3], t + 4 * (size_t)bt,
						n - 4 * (size_t)bt, bt,
						part + 4, 6), 6);
		assert_memory_equal(whole, part, sizeof(whole));
		free(t);
	}
}

static void test_chain_ignores_partial_last_block(void **state)
{
	(void)state;
	uint32_t *t = make_tokens(48, 2654435761u, 0);
	kvt_key full[3];
	kvt_key keys[4];
	memset(keys, 0xab, sizeof(keys));

	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 48, 16, full, 3), 3);
	/* 47 tokens: the third block is partial */
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 47, 16, keys, 4), 2);
	assert_key(keys[0], full[0]);
	assert_key(keys[1], full[1]);
	assert_key(keys[2], K(0xababababababababull, 0xababababababababull));
	/* fewer tokens than one block: nothing */
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 15, 16, keys, 4), 0);
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 0, 16, keys, 4), 0);
	free(t);
}

static void test_chain_stops_at_max_keys(void **state)
{
	(void)state;
	uint32_t *t = make_tokens(48, 2654435761u, 0);
	kvt_key full[3];
	kvt_key keys[3];
	memset(keys, 0xcd, sizeof(keys));

	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 48, 16, full, 3), 3);
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 48, 16, keys, 1), 1);
	assert_key(keys[0], full[0]);
	assert_key(keys[1], K(0xcdcdcdcdcdcdcdcdull, 0xcdcdcdcdcdcdcdcdull));
	/* max_keys 0 with a NULL keys array is a valid empty request */
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 48, 16, NULL, 0), 0);
	free(t);
}

static void test_chain_depends_on_parent_and_token_order(void **state)
{
	(void)state;
	uint32_t t[16];
	kvt_key a, b, c;

	for (uint32_t i = 0; i < 16; i++)
		t[i] = 1000 + i;
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 16, 16, &a, 1), 1);
	assert_int_equal(kvt_hash_chain(K(NS1_ROOT.lo ^ 1, NS1_ROOT.hi), t, 16,
					16, &b, 1), 1);
	assert_false(kvt_key_eq(a, b));
	t[3] = 1004;
	t[4] = 1003;
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 16, 16, &c, 1), 1);
	assert_false(kvt_key_eq(a, c));
	/* the same tokens cut into other blocks are other keys */
	for (uint32_t i = 0; i < 16; i++)
		t[i] = 1000 + i;
	kvt_key d[2];
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 16, 8, d, 2), 2);
	assert_false(kvt_key_eq(a, d[1]));
}

static void test_chain_rejects_bad_arguments(void **state)
{
	(void)state;
	uint32_t t[32] = { 0 };
	kvt_key keys[2];

	kvt_set_error("marker");
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 32, 0, keys, 2), 0);
	assert_non_null(strstr(kvt_last_error(), "block_tokens"));

	kvt_set_error("marker");
	assert_int_equal(kvt_hash_chain(NS1_ROOT, NULL, 32, 16, keys, 2), 0);
	assert_non_null(strstr(kvt_last_error(), "tokens is NULL"));

	kvt_set_error("marker");
	assert_int_equal(kvt_hash_chain(NS1_ROOT, t, 32, 16, NULL, 2), 0);
	assert_non_null(strstr(kvt_last_error(), "keys is NULL"));

	/* NULL with a zero count is an empty request, not an error */
	kvt_set_error("marker");
	assert_int_equal(kvt_hash_chain(NS1_ROOT, NULL, 0, 16, keys, 2), 0);
	assert_int_equal(kvt_hash_chain(NS1_ROOT, NULL, 0, 16, NULL, 0), 0);
	assert_string_equal(kvt_last_error(), "marker");
}

/* --- namespace root behaviour ---------------------------------------------------- */

static void test_ns_root_differs_for_every_field(void **state)
{
	(void)state;
	kvt_namespace v[12];
	for (size_t i = 0; i < 12; i++)
		v[i] = NS1;
	v[1].model = "qwen3-coder-30b-a3b@rev2";
	v[2].tokenizer = "qwen3-tokenizer-v2";
	v[3].kv_format = "fp8/NHD";
	v[4].tp_rank = 1;
	v[5].tp_size = 2;
	v[6].pp_rank = 1;
	v[7].pp_size = 2;
	v[8].block_tokens = 32;
	v[9].salt = "tenant-b";
	v[10].salt_len = 7; /* "tenant-" */
	v[11].salt = NULL;
	v[11].salt_len = 0;

	kvt_key r[12];
	for (size_t i = 0; i < 12; i++)
		r[i] = kvt_ns_root(&v[i]);
	for (size_t i = 0; i < 12; i++)
		for (size_t j = i + 1; j < 12; j++)
			if (kvt_key_eq(r[i], r[j]))
				fail_msg("namespaces %zu and %zu share a root", i, j);
}

static void test_ns_root_tells_null_from_empty_string(void **state)
{
	(void)state;
	kvt_namespace a = NS1, b = NS1;

	a.model = NULL;
	b.model = "";
	assert_false(kvt_key_eq(kvt_ns_root(&a), kvt_ns_root(&b)));
	a = NS1;
	b = NS1;
	a.tokenizer = NULL;
	b.tokenizer = "";
	assert_false(kvt_key_eq(kvt_ns_root(&a), kvt_ns_root(&b)));
	a = NS1;
	b = NS1;
	a.kv_format = NULL;
	b.kv_format = "";
	assert_false(kvt_key_eq(kvt_ns_root(&a), kvt_ns_root(&b)));
}

static void test_ns_root_keeps_field_boundaries(void **state)
{
	(void)state;
	kvt_namespace a = NS1, b = NS1;

	/* the same concatenated bytes, split differently */
	a.model = "ab";
	a.tokenizer = "c";
	b.model = "a";
	b.tokenizer = "bc";
	assert_false(kvt_key_eq(kvt_ns_root(&a), kvt_ns_root(&b)));
}

static void test_ns_root_treats_null_and_empty_salt_alike(void **state)
{
	(void)state;
	kvt_namespace a = NS1, b = NS1;

	a.salt = NULL;
	a.salt_len = 0;
	b.salt = "ignored";
	b.salt_len = 0;
	assert_key(kvt_ns_root(&a), kvt_ns_root(&b));
}

static void test_ns_root_hashes_binary_salt(void **state)
{
	(void)state;
	const unsigned char s1[4] = { 0, 1, 2, 3 }, s2[4] = { 0, 1, 2, 4 };
	kvt_namespace a = NS1, b = NS1;

	a.salt = s1;
	a.salt_len = 4;
	b.salt = s2;
	b.salt_len = 4;
	assert_false(kvt_key_eq(kvt_ns_root(&a), kvt_ns_root(&b)));
	/* stable: the same input twice is the same root */
	assert_key(kvt_ns_root(&a), kvt_ns_root(&a));
}

static void test_ns_root_rejects_bad_arguments(void **state)
{
	(void)state;
	kvt_namespace bad = NS1;

	kvt_set_error("marker");
	assert_key(kvt_ns_root(NULL), K(0, 0));
	assert_non_null(strstr(kvt_last_error(), "ns is NULL"));

	bad.salt = NULL;
	bad.salt_len = 4;
	kvt_set_error("marker");
	assert_key(kvt_ns_root(&bad), K(0, 0));
	assert_non_null(strstr(kvt_last_error(), "salt"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ns_root_matches_vectors),
		cmocka_unit_test(test_chain_from_zero_parent_matches_vectors),
		cmocka_unit_test(test_chain_block16_matches_vectors),
		cmocka_unit_test(test_chain_block32_and_48_match_vectors),
		cmocka_unit_test(test_chain_block64_matches_vectors),
		cmocka_unit_test(test_chain_large_block_matches_vectors),
		cmocka_unit_test(test_chain_follows_documented_rule_for_every_path),
		cmocka_unit_test(test_chain_continues_across_calls),
		cmocka_unit_test(test_chain_ignores_partial_last_block),
		cmocka_unit_test(test_chain_stops_at_max_keys),
		cmocka_unit_test(test_chain_depends_on_parent_and_token_order),
		cmocka_unit_test(test_chain_rejects_bad_arguments),
		cmocka_unit_test(test_ns_root_differs_for_every_field),
		cmocka_unit_test(test_ns_root_tells_null_from_empty_string),
		cmocka_unit_test(test_ns_root_keeps_field_boundaries),
		cmocka_unit_test(test_ns_root_treats_null_and_empty_salt_alike),
		cmocka_unit_test(test_ns_root_hashes_binary_salt),
		cmocka_unit_test(test_ns_root_rejects_bad_arguments),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
