/*
 * consumer.c - an outside program: built against an installed libkvtier
 * through pkg-config by tests/install-test.sh, the way users build theirs.
 * Exits 0 only if the ABI round trip works.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvtier.h>

int main(void)
{
	kvt_namespace ns = { .model = "m", .tokenizer = "t", .kv_format = "bf16/NHD",
			     .tp_size = 1, .pp_size = 1, .block_tokens = 16 };
	uint32_t tokens[64];
	kvt_key keys[4];
	kvt_store *s = NULL;
	char block[1000], out[1000];
	size_t len = 0, found = 0;

	for (int i = 0; i < 64; i++)
		tokens[i] = (uint32_t)i;
	if (kvt_hash_chain(kvt_ns_root(&ns), tokens, 64, 16, keys, 4) != 4)
		return 1;
	if (kvt_open("{\"ram\": {\"capacity\": \"8MiB\"}}", &s)) {
		fprintf(stderr, "kvt_open: %s\n", kvt_last_error());
		return 1;
	}
	memset(block, 7, sizeof(block));
	for (int i = 0; i < 3; i++)
		if (kvt_put(s, keys[i], block, sizeof(block)))
			return 1;
	if (kvt_lookup(s, keys, 4, KVT_LEASE, &found) || found != 3)
		return 1;
	if (kvt_get(s, keys[2], out, sizeof(out), &len) || len != sizeof(out) ||
	    memcmp(block, out, len))
		return 1;
	if (kvt_get(s, keys[3], out, sizeof(out), &len) != -ENOENT)
		return 1;
	kvt_close(s);
	printf("consumer: libkvtier %s works\n", kvt_version());
	return 0;
}
