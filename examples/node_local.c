/*
 * node_local.c - one store per node: a scheduler-like process and two
 * worker-like processes (tensor-parallel ranks 0 and 1) attached to one
 * kvtierd through its local socket, as an engine's processes would be.
 *
 *   kvtierd --config node.json &     (node.json: {"local": {"socket": PATH}})
 *   node_local PATH
 *
 * The scheduler hashes a prompt into block keys per rank and starts the
 * workers, which save their rank's blocks straight into the shared arena
 * (kvt_put_reserve, write, kvt_put_commit). It then asks how many leading
 * blocks each rank has stored, leasing them (kvt_lookup with KVT_LEASE),
 * and starts the workers again to restore them: each pins its blocks
 * (kvt_get_pin), reads them in place and checks every byte, then unpins.
 * Finally the scheduler releases its leases and prints what the node store
 * says its attached processes hold (nothing, by then). The scheduler never
 * touches the bytes, the workers never decide anything: the split of an
 * engine's scheduler and GPU workers.
 *
 * Exits 0 when every block of both ranks came back intact, 1 otherwise.
 * Uses only <kvtier.h> and jansson (to read the statistics).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <kvtier.h>

#define RANKS 2
#define BLOCK_TOKENS 16
#define PROMPT_TOKENS (BLOCK_TOKENS * 32)  /* 32 blocks per rank */
#define BLOCK_BYTES (256u * 1024u)         /* one rank's KV of 16 tokens */

/* The prompt: the same tokens for every rank. */
static void prompt(uint32_t *tok)
{
	for (uint32_t i = 0; i < PROMPT_TOKENS; i++)
		tok[i] = 1000 + (i * 7919u) % 32000u;
}

/* The block keys of one rank: the namespace differs per rank. */
static size_t rank_keys(unsigned rank, kvt_key *keys, size_t max)
{
	uint32_t tok[PROMPT_TOKENS];
	kvt_namespace ns = {
		.model = "example/model@1", .tokenizer = "example/tok@1",
		.kv_format = "bf16/NHD", .tp_rank = rank, .tp_size = RANKS,
		.pp_rank = 0, .pp_size = 1, .block_tokens = BLOCK_TOKENS,
	};
	prompt(tok);
	return kvt_hash_chain(kvt_ns_root(&ns), tok, PROMPT_TOKENS, BLOCK_TOKENS, keys, max);
}

/* A block's bytes: a function of its key (what a GPU would hold). */
static unsigned char byte_of(kvt_key k, size_t i)
{
	return (unsigned char)((k.lo >> (i % 8 * 8)) ^ (i * 131u) ^ k.hi);
}

static int attach(const char *sock, kvt_store **s)
{
	char cfg[256];
	snprintf(cfg, sizeof(cfg), "{\"attach\": \"%s\"}", sock);
	int rc = kvt_open(cfg, s);
	if (rc)
		fprintf(stderr, "node_local: attach to %s: %s: %s\n", sock, kvt_strerror(rc),
			kvt_last_error());
	return rc;
}

/* A worker: saves (writes into reserved slots) or restores (reads pinned
 * slots and checks them) its rank's blocks. */
static int worker(unsigned rank, const char *sock, int save)
{
	kvt_key keys[PROMPT_TOKENS / BLOCK_TOKENS];
	kvt_slot sl[PROMPT_TOKENS / BLOCK_TOKENS];
	size_t n = rank_keys(rank, keys, PROMPT_TOKENS / BLOCK_TOKENS), bad = 0;
	kvt_store *s;

	if (attach(sock, &s))
		return 1;
	for (size_t i = 0; i < n; i++)
		sl[i] = (kvt_slot){ .key = keys[i], .len = BLOCK_BYTES };
	if (save) {
		int r = kvt_put_reserve(s, sl, n, 0);
		for (size_t i = 0; r >= 0 && i < n; i++)
			if (sl[i].result == 0) /* a GPU -> host copy would go here */
				for (size_t b = 0; b < BLOCK_BYTES; b++)
					((unsigned char *)sl[i].addr)[b] = byte_of(keys[i], b);
		if (r >= 0)
			r = kvt_put_commit(s, sl, n);
		printf("worker %u: saved %d blocks into the shared arena\n", rank, r);
		kvt_close(s);
		return r < 0;
	}
	kvt_pin_batch *pb = NULL;
	int r = kvt_get_pin(s, sl, n, 0, &pb);
	for (size_t i = 0; r >= 0 && i < n; i++) {
		if (sl[i].result != 0) {
			bad++;
			continue;
		}
		for (size_t b = 0; b < sl[i].len; b++) /* a host -> GPU copy would go here */
			if (((unsigned char *)sl[i].addr)[b] != byte_of(keys[i], b)) {
				bad++;
				break;
			}
	}
	if (r >= 0) {
		kvt_unpin(s, sl, n);
		kvt_pin_free(pb);
	}
	printf("worker %u: restored %d blocks in place, %zu wrong or missing\n", rank, r, bad);
	kvt_close(s);
	return r < 0 || bad;
}

/* Runs every worker with one job and waits for them. */
static int run_workers(const char *self, const char *sock, const char *job)
{
	pid_t pid[RANKS];
	int failed = 0;

	fflush(stdout);
	for (unsigned r = 0; r < RANKS; r++) {
		char rank[16];
		snprintf(rank, sizeof(rank), "%u", r);
		if ((pid[r] = fork()) == 0) {
			execl(self, self, "--worker", rank, job, sock, (char *)NULL);
			_exit(127);
		}
	}
	for (unsigned r = 0; r < RANKS; r++) {
		int st = 0;
		if (pid[r] < 0 || waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st))
			failed = 1;
	}
	return failed;
}

static long long held(kvt_store *s, const char *name)
{
	static char buf[1 << 16];
	long long v = -1;
	if (kvt_stats_json(s, buf, sizeof(buf)) > 0) {
		json_t *j = json_loads(buf, 0, NULL);
		v = json_integer_value(json_object_get(json_object_get(j, "local"), name));
		json_decref(j);
	}
	return v;
}

int main(int argc, char **argv)
{
	char self[PATH_MAX];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (argc == 5 && !strcmp(argv[1], "--worker"))
		return worker((unsigned)atoi(argv[2]), argv[4], !strcmp(argv[3], "save"));
	if (argc != 2 || sl <= 0) {
		fprintf(stderr, "usage: node_local SOCKET  (a kvtierd's local.socket)\n");
		return 2;
	}
	self[sl] = 0;

	kvt_store *s;
	kvt_key keys[PROMPT_TOKENS / BLOCK_TOKENS];
	size_t n = 0, found[RANKS];
	int failed = 0;

	if (attach(argv[1], &s))
		return 1;
	failed |= run_workers(self, argv[1], "save");
	for (unsigned r = 0; r < RANKS; r++) {
		n = rank_keys(r, keys, PROMPT_TOKENS / BLOCK_TOKENS);
		if (kvt_lookup(s, keys, n, KVT_LEASE, &found[r]))
			found[r] = 0;
		printf("scheduler: rank %u has %zu of %zu blocks stored (leased)\n", r,
		       found[r], n);
		failed |= found[r] != n;
	}
	printf("scheduler: the node store holds %lld leases for attached processes\n",
	       held(s, "leased_blocks"));
	failed |= run_workers(self, argv[1], "load");
	for (unsigned r = 0; r < RANKS; r++) {
		n = rank_keys(r, keys, PROMPT_TOKENS / BLOCK_TOKENS);
		kvt_release(s, keys, found[r]);
	}
	printf("scheduler: after release: %lld leased, %lld pinned, %lld reserved\n",
	       held(s, "leased_blocks"), held(s, "pinned_blocks"), held(s, "reserved_blocks"));
	kvt_close(s);
	printf("%s\n", failed ? "node_local: FAILED" : "node_local: every block intact");
	return failed;
}
