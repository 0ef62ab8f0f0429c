/*
 * async.c - asynchronous batches: loads that overlap with other work.
 *
 * Stores a prompt's blocks with one asynchronous put batch (completion by
 * kvt_batch_wait), then loads them back as several get batches in flight at
 * once, each completion reported through its eventfd (kvt_batch_fd) in an
 * epoll loop, the way an engine overlaps restores with compute. Every byte
 * loaded is checked. Any failure prints what went wrong and exits with
 * status 1, so this doubles as a smoke test.
 *
 * Uses only the public header <kvtier.h>; knows nothing of the library's
 * internals. Build: cc async.c $(pkg-config --cflags --libs kvtier)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <kvtier.h>

#define BLOCK_TOKENS 16
#define NBLOCKS 32
#define NTOKENS (NBLOCKS * BLOCK_TOKENS)
#define BLOCK_BYTES (32 * 1024)
#define PER_BATCH 8                     /* blocks per get batch */
#define NBATCHES (NBLOCKS / PER_BATCH)

static int fail(const char *what, int ret)
{
	fprintf(stderr, "async: %s: %s (%s)\n", what, kvt_strerror(ret),
		kvt_last_error());
	return 1;
}

/* Block bytes determined by the key, so loaded blocks can be checked. */
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

/* Checks one completed get batch: every op loaded the right bytes. */
static int check_batch(kvt_batch *b, const kvt_op *ops, size_t n)
{
	static unsigned char expect[BLOCK_BYTES];
	int ret = kvt_batch_result(b);

	if (ret < 0)
		return fail("get batch", ret);
	for (size_t i = 0; i < n; i++) {
		fill_block(expect, BLOCK_BYTES, ops[i].key);
		if (ops[i].result != 0 || ops[i].len != BLOCK_BYTES ||
		    memcmp(ops[i].buf, expect, BLOCK_BYTES) != 0) {
			fprintf(stderr, "async: op %zu: result %d, %zu bytes, wrong or missing data\n",
				i, ops[i].result, ops[i].len);
			return 1;
		}
	}
	return 0;
}

/*
 * Stores all NBLOCKS blocks with one asynchronous put batch and waits for
 * it. The batch reads the blocks from our buffer until it completes.
 */
static int store_blocks(kvt_store *store, const kvt_key *keys)
{
	static unsigned char blocks[NBLOCKS][BLOCK_BYTES];
	kvt_op ops[NBLOCKS];
	kvt_batch *pb = NULL;
	int ret;

	for (size_t i = 0; i < NBLOCKS; i++) {
		fill_block(blocks[i], BLOCK_BYTES, keys[i]);
		ops[i] = (kvt_op){ .key = keys[i], .buf = blocks[i],
				   .len = BLOCK_BYTES, .result = -EINPROGRESS };
	}
	ret = kvt_batch_submit(store, KVT_OP_PUT, ops, NBLOCKS, &pb);
	if (ret < 0)
		return fail("kvt_batch_submit (put)", ret);
	/* The puts run on the library's threads; this thread could work here.
	 * Wait in slices of 100 ms, as a loop that also watches a deadline would. */
	while ((ret = kvt_batch_wait(pb, 100)) == -ETIMEDOUT)
		;
	if (ret < 0) {
		kvt_batch_free(pb);
		return fail("kvt_batch_wait", ret);
	}
	ret = kvt_batch_result(pb);
	kvt_batch_free(pb);
	if (ret < 0)
		return fail("put batch", ret);
	printf("stored %d blocks with one asynchronous batch\n", NBLOCKS);
	return 0;
}

/*
 * Starts every get batch at once (batch b loads blocks b * PER_BATCH ...
 * into loaded[]) and adds each one's eventfd to the epoll set ep.
 */
static int start_loads(kvt_store *store, int ep, const kvt_key *keys,
		       unsigned char (*loaded)[BLOCK_BYTES], kvt_op *get_ops,
		       kvt_batch **batch)
{
	for (size_t b = 0; b < NBATCHES; b++) {
		kvt_op *ops = &get_ops[b * PER_BATCH];

		for (size_t i = 0; i < PER_BATCH; i++) {
			size_t k = b * PER_BATCH + i;
			ops[i] = (kvt_op){ .key = keys[k], .buf = loaded[k],
					   .len = BLOCK_BYTES, .result = -EINPROGRESS };
		}
		int ret = kvt_batch_submit(store, KVT_OP_GET, ops, PER_BATCH, &batch[b]);
		if (ret < 0)
			return fail("kvt_batch_submit (get)", ret);
		int fd = kvt_batch_fd(batch[b]);
		if (fd < 0)
			return fail("kvt_batch_fd", fd);
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = b };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			perror("async: epoll_ctl");
			return 1;
		}
	}
	printf("%d get batches of %d blocks in flight\n", NBATCHES, PER_BATCH);
	return 0;
}

/*
 * The engine's event loop: waits on ep until every get batch has completed,
 * checking and freeing each one as it does. Other work goes between the
 * waits.
 */
static int wait_loads(int ep, const kvt_op *get_ops, kvt_batch **batch)
{
	size_t pending = NBATCHES;
	unsigned long spins = 0;

	while (pending > 0) {
		struct epoll_event evs[NBATCHES];
		int nev = epoll_wait(ep, evs, NBATCHES, 1000);

		if (nev < 0) {
			if (errno == EINTR)
				continue;
			perror("async: epoll_wait");
			return 1;
		}
		if (nev == 0)
			spins++;
		for (int e = 0; e < nev; e++) {
			size_t b = (size_t)evs[e].data.u64;

			/* The eventfd is a wake-up; poll is the source of truth. */
			if (kvt_batch_poll(batch[b]) != 1)
				continue;
			if (epoll_ctl(ep, EPOLL_CTL_DEL, kvt_batch_fd(batch[b]), NULL) < 0) {
				perror("async: epoll_ctl");
				return 1;
			}
			if (check_batch(batch[b], &get_ops[b * PER_BATCH], PER_BATCH))
				return 1;
			printf("batch %zu complete and verified\n", b);
			kvt_batch_free(batch[b]);
			batch[b] = NULL;
			pending--;
		}
	}
	if (spins)
		printf("(%lu one-second waits without a completion)\n", spins);
	return 0;
}

int main(void)
{
	static unsigned char loaded[NBLOCKS][BLOCK_BYTES];
	const kvt_namespace ns = {
		.model = "example/tiny-llm@rev1",
		.tokenizer = "example/tiny-tokenizer@rev1",
		.kv_format = "bf16/NHD",
		.tp_size = 1, .pp_size = 1,
		.block_tokens = BLOCK_TOKENS,
	};
	uint32_t tokens[NTOKENS];
	kvt_key keys[NBLOCKS];
	kvt_op get_ops[NBLOCKS];
	kvt_batch *batch[NBATCHES] = { NULL };
	kvt_store *store = NULL;
	size_t found;
	int ep = -1, ret, status = 1;

	ret = kvt_open("{\"ram\": {\"capacity\": \"8 MiB\"}, \"threads\": 2}", &store);
	if (ret < 0)
		return fail("kvt_open", ret);

	for (size_t i = 0; i < NTOKENS; i++)
		tokens[i] = (uint32_t)(7 * i + 3);
	if (kvt_hash_chain(kvt_ns_root(&ns), tokens, NTOKENS, BLOCK_TOKENS, keys,
			   NBLOCKS) != NBLOCKS) {
		fprintf(stderr, "async: kvt_hash_chain: %s\n", kvt_last_error());
		goto out;
	}
	if (store_blocks(store, keys))
		goto out;

	/* Lease the stored prefix so it stays loadable while the loads run. */
	ret = kvt_lookup(store, keys, NBLOCKS, KVT_LEASE, &found);
	if (ret < 0 || found != NBLOCKS) {
		fprintf(stderr, "async: kvt_lookup: %d, found %zu of %d: %s\n",
			ret, ret < 0 ? 0 : found, NBLOCKS, kvt_last_error());
		goto out;
	}

	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		perror("async: epoll_create1");
		goto out;
	}
	if (start_loads(store, ep, keys, loaded, get_ops, batch) ||
	    wait_loads(ep, get_ops, batch))
		goto out;

	ret = kvt_release(store, keys, NBLOCKS);
	if (ret < 0) {
		fail("kvt_release", ret);
		goto out;
	}
	printf("loaded and verified %d blocks; released %d leases\n", NBLOCKS, ret);
	status = 0;
out:
	/* kvt_batch_free waits for a batch still running: its ops use our buffers. */
	for (size_t b = 0; b < NBATCHES; b++)
		kvt_batch_free(batch[b]);
	if (ep >= 0)
		close(ep);
	kvt_close(store);
	if (status == 0)
		printf("ok\n");
	return status;
}
