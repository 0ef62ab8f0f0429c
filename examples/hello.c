/*
 * hello.c - the smallest complete libkvtier program, and a smoke test.
 *
 * Opens a store with a small RAM tier, turns a token sequence into chained
 * block keys, stores one block per key, asks with a lease how much of the
 * chain (and of a second prompt that shares its beginning) is stored, loads
 * the blocks back in one batch and checks every byte, prints the statistics
 * and closes. Any failure prints what went wrong and exits with status 1.
 *
 * Uses only the public header <kvtier.h>; knows nothing of the library's
 * internals. Build: cc hello.c $(pkg-config --cflags --libs kvtier)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvtier.h>

#define BLOCK_TOKENS 16
#define NTOKENS 100          /* 6 full blocks of 16; the last 4 tokens are not hashed */
#define MAX_BLOCKS 8
#define BLOCK_BYTES (64 * 1024)

/* Prints a failed call's result code and the library's explanation. */
static int fail(const char *what, int ret)
{
	fprintf(stderr, "hello: %s: %s (%s)\n", what, kvt_strerror(ret),
		kvt_last_error());
	return 1;
}

/*
 * Stands in for a block of KV tensors: bytes determined by the key, so that
 * a block loaded back can be checked without keeping the original.
 */
static void fill_block(unsigned char *buf, size_t len, kvt_key key)
{
	uint64_t x = key.lo ^ (key.hi * 0x9e3779b97f4a7c15ull) ^ 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (unsigned char)x;
	}
}

/* Stores one block under each of the n keys; storing a key again is a no-op. */
static int store_blocks(kvt_store *store, const kvt_key *keys, size_t n)
{
	static unsigned char blocks[MAX_BLOCKS][BLOCK_BYTES];
	int ret;

	for (size_t i = 0; i < n; i++) {
		fill_block(blocks[i], BLOCK_BYTES, keys[i]);
		ret = kvt_put(store, keys[i], blocks[i], BLOCK_BYTES);
		if (ret < 0)
			return fail("kvt_put", ret);
	}
	/* Blocks are immutable: storing a key again is a no-op. */
	ret = kvt_put(store, keys[0], blocks[0], BLOCK_BYTES);
	if (ret < 0)
		return fail("kvt_put (again)", ret);
	printf("stored %zu blocks of %d bytes (%zu tokens hashed, %d left over)\n",
	       n, BLOCK_BYTES, n * BLOCK_TOKENS, NTOKENS % BLOCK_TOKENS);
	return 0;
}

/*
 * A second prompt that shares the first 3 blocks of tokens[], then diverges:
 * only those 3 are stored. Its keys go to other_keys.
 */
static int lookup_second_prompt(kvt_store *store, kvt_key root, const uint32_t *tokens,
				kvt_key *other_keys)
{
	uint32_t other[NTOKENS];
	size_t n_other, found;
	int ret;

	memcpy(other, tokens, sizeof(other));
	other[3 * BLOCK_TOKENS + 5] += 1;
	n_other = kvt_hash_chain(root, other, NTOKENS, BLOCK_TOKENS, other_keys,
				 MAX_BLOCKS);
	ret = kvt_lookup(store, other_keys, n_other, 0, &found);
	if (ret < 0)
		return fail("kvt_lookup (second prompt)", ret);
	printf("second prompt: %zu of %zu leading blocks stored\n", found, n_other);
	if (found != 3) {
		fprintf(stderr, "hello: expected 3 shared blocks, found %zu\n", found);
		return 1;
	}
	return 0;
}

/*
 * How much of the first prompt is stored? Leases it, loads it in one batch,
 * checks every byte, then ends the leases.
 */
static int load_prefix(kvt_store *store, const kvt_key *keys, size_t n)
{
	static unsigned char loaded[MAX_BLOCKS][BLOCK_BYTES];
	static unsigned char expect[BLOCK_BYTES];
	kvt_op ops[MAX_BLOCKS];
	size_t found;
	int ret;

	ret = kvt_lookup(store, keys, n, KVT_LEASE, &found);
	if (ret < 0)
		return fail("kvt_lookup", ret);
	printf("first prompt: %zu of %zu leading blocks stored and leased\n",
	       found, n);
	if (found != n) {
		fprintf(stderr, "hello: expected all %zu blocks, found %zu\n", n, found);
		return 1;
	}

	/* Load the leased prefix in one batch. */
	for (size_t i = 0; i < found; i++) {
		ops[i].key = keys[i];
		ops[i].buf = loaded[i];
		ops[i].len = BLOCK_BYTES;  /* capacity in, bytes loaded out */
		ops[i].result = -EINPROGRESS;
	}
	ret = kvt_get_batch(store, ops, found);
	if (ret < 0)
		return fail("kvt_get_batch", ret);
	for (size_t i = 0; i < found; i++) {
		fill_block(expect, BLOCK_BYTES, keys[i]);
		if (ops[i].result != 0 || ops[i].len != BLOCK_BYTES ||
		    memcmp(loaded[i], expect, BLOCK_BYTES) != 0) {
			fprintf(stderr, "hello: block %zu: result %d, %zu bytes, %s\n",
				i, ops[i].result, ops[i].len,
				memcmp(loaded[i], expect, BLOCK_BYTES) ? "bytes differ" : "bytes match");
			return 1;
		}
	}
	printf("loaded and verified %zu blocks\n", found);

	/* Loaded: end the leases now rather than when they lapse. */
	ret = kvt_release(store, keys, found);
	if (ret < 0)
		return fail("kvt_release", ret);
	printf("released %d leases\n", ret);
	return 0;
}

/* A key that was never stored is a miss. */
static int get_unstored(kvt_store *store, kvt_key key)
{
	static unsigned char buf[BLOCK_BYTES];
	size_t len;
	int ret = kvt_get(store, key, buf, BLOCK_BYTES, &len);

	if (ret != -ENOENT) {
		fprintf(stderr, "hello: kvt_get of an unstored key returned %d, expected -ENOENT\n",
			ret);
		return 1;
	}
	return 0;
}

/* Statistics: size the document first, then fetch it. */
static int print_stats(kvt_store *store)
{
	char *stats;
	int ret = kvt_stats_json(store, NULL, 0);

	if (ret < 0)
		return fail("kvt_stats_json", ret);
	stats = malloc((size_t)ret + 1);
	if (!stats) {
		fprintf(stderr, "hello: out of memory\n");
		return 1;
	}
	ret = kvt_stats_json(store, stats, (size_t)ret + 1);
	if (ret < 0) {
		free(stats);
		return fail("kvt_stats_json", ret);
	}
	printf("stats: %s\n", stats);
	free(stats);
	return 0;
}

int main(void)
{
	const kvt_namespace ns = {
		.model = "example/tiny-llm@rev1",
		.tokenizer = "example/tiny-tokenizer@rev1",
		.kv_format = "bf16/NHD",
		.tp_rank = 0, .tp_size = 1, .pp_rank = 0, .pp_size = 1,
		.block_tokens = BLOCK_TOKENS,
		.salt = NULL, .salt_len = 0,
	};
	uint32_t tokens[NTOKENS];
	kvt_key keys[MAX_BLOCKS], other_keys[MAX_BLOCKS];
	kvt_store *store = NULL;
	size_t n;
	int ret, status = 1;

	printf("libkvtier %s (header %d.%d.%d)\n", kvt_version(),
	       KVT_VERSION_MAJOR, KVT_VERSION_MINOR, KVT_VERSION_PATCH);

	/* A RAM tier of 16 MiB, leases of two seconds, no disk tier. */
	ret = kvt_open("{\"ram\": {\"capacity\": \"16 MiB\", \"lease_ms\": 2000}}",
		       &store);
	if (ret < 0)
		return fail("kvt_open", ret);

	/* The token ids of a prompt; a real engine gets them from its tokenizer. */
	for (size_t i = 0; i < NTOKENS; i++)
		tokens[i] = (uint32_t)(1000 + i * 7);

	/* One key per full block, chained from the namespace's root. */
	kvt_key root = kvt_ns_root(&ns);
	n = kvt_hash_chain(root, tokens, NTOKENS, BLOCK_TOKENS, keys, MAX_BLOCKS);
	if (n != NTOKENS / BLOCK_TOKENS) {
		fprintf(stderr, "hello: kvt_hash_chain returned %zu keys, expected %d (%s)\n",
			n, NTOKENS / BLOCK_TOKENS, kvt_last_error());
		goto out;
	}

	if (store_blocks(store, keys, n) ||
	    lookup_second_prompt(store, root, tokens, other_keys) ||
	    load_prefix(store, keys, n) ||
	    get_unstored(store, other_keys[3]) ||
	    print_stats(store))
		goto out;
	status = 0;
out:
	kvt_close(store);
	if (status == 0)
		printf("ok\n");
	return status;
}
