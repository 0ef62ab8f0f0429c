/*
 * kvtier.h - the public interface of libkvtier, a tiered KV-cache store for
 * large-language-model inference.
 *
 * This is the only header users include. Every exported symbol starts with
 * kvt_, every macro with KVT_. All functions returning int return 0 (or a
 * documented non-negative count) on success and a negative errno on failure;
 * kvt_last_error() then describes the failure in words. See kvtier(7).
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_VERSION_MAJOR 0
#define KVT_VERSION_MINOR 1
#define KVT_VERSION_PATCH 0

#if defined(__GNUC__) || defined(__clang__)
#define KVT_API __attribute__((visibility("default")))
#else
#define KVT_API
#endif

/* An open store. Opaque; created by kvt_open(), destroyed by kvt_close(). */
typedef struct kvt_store kvt_store;

/* A 128-bit block key: the chained hash of a token prefix (kvt_hash_chain). */
typedef struct kvt_key {
	uint64_t lo, hi;
} kvt_key;

/*
 * Everything that must match for two blocks with the same tokens to hold the
 * same bytes. Strings may be NULL (hashed differently from ""). The salt
 * separates tenants, cache_salt values or LoRA adapters; it may be NULL when
 * salt_len is 0.
 */
typedef struct kvt_namespace {
	const char *model;     /* model id and revision */
	const char *tokenizer; /* tokenizer id and revision */
	const char *kv_format; /* dtype, layout, attention backend, e.g. "bf16/NHD" */
	uint32_t tp_rank, tp_size, pp_rank, pp_size;
	uint32_t block_tokens; /* tokens per block */
	const void *salt;      /* tenant / cache_salt / LoRA id; may be NULL */
	size_t salt_len;
} kvt_namespace;

/* Flags for kvt_lookup(). */
#define KVT_LEASE 0x1u /* lease the reported blocks for ram.lease_ms */

/* Opcodes for kvt_batch_submit(). */
#define KVT_OP_GET 1
#define KVT_OP_PUT 2

/* Log levels passed to a kvt_log_fn. */
#define KVT_LOG_ERR 3
#define KVT_LOG_WARN 4
#define KVT_LOG_INFO 6
#define KVT_LOG_DEBUG 7

/* --- version and errors --------------------------------------------------- */

/*
 * Returns the library's version as a static string "MAJOR.MINOR.PATCH". It
 * may differ from the KVT_VERSION_* macros the caller was compiled with when
 * a newer compatible library is loaded at run time.
 */
KVT_API const char *kvt_version(void);

/*
 * Returns a static, human-readable text for a result of this library: a
 * negative errno (the sign is ignored, so kvt_strerror(-ENOENT) and
 * kvt_strerror(ENOENT) agree) or 0. Unknown codes give "unknown error".
 * Never returns NULL.
 */
KVT_API const char *kvt_strerror(int err);

/*
 * Returns the calling thread's most recent failure of a kvt_ function in
 * words, naming the argument, key, config entry, file or peer involved, or ""
 * when this thread has had none. The text stays valid until this thread's
 * next call into the library. Successful calls do not clear it.
 */
KVT_API const char *kvt_last_error(void);

/*
 * A log sink: receives one complete line (no trailing newline) at a
 * KVT_LOG_* level. The library never writes to stdout or stderr itself.
 */
typedef void (*kvt_log_fn)(int level, const char *msg, void *arg);

/*
 * Installs a process-wide log callback that receives messages at level
 * max_level or more severe (a lower number); fn NULL turns logging off, which
 * is the default. Messages include fallbacks the machine forced (no huge
 * pages, no mlock, no NUMA), recovery decisions and device errors. The
 * callback may be called from any thread, including the library's own, and
 * must not call back into the library.
 */
KVT_API void kvt_set_log(kvt_log_fn fn, void *arg, int max_level);

/* --- hashing ------------------------------------------------------------ */

/*
 * Returns the root key of a namespace: XXH3-128 of a fixed, versioned
 * serialisation of every field (see kvt_hash_chain(3)). Two namespaces that
 * differ in any field, or in salt bytes, get different roots. ns NULL returns
 * the all-zero key and sets kvt_last_error(). Stable across processes,
 * machines, builds and library versions.
 */
KVT_API kvt_key kvt_ns_root(const kvt_namespace *ns);

/*
 * Hashes full blocks of a token sequence into chained block keys:
 * keys[i] = XXH3-128(keys[i-1] as lo,hi little-endian 64-bit words ||
 * tokens of block i as little-endian uint32), with keys[-1] = parent.
 * Returns the number of keys written: min(ntokens / block_tokens, max_keys);
 * 0 for a NULL tokens or keys pointer (with ntokens or max_keys non-zero) or
 * block_tokens 0, with kvt_last_error() set. A partial last block is not
 * hashed. Pass the last key of a previous call as parent to continue a chain.
 */
KVT_API size_t kvt_hash_chain(kvt_key parent, const uint32_t *tokens,
			      size_t ntokens, uint32_t block_tokens,
			      kvt_key *keys, size_t max_keys);

/* --- store lifetime ------------------------------------------------------- */

/*
 * Opens a store configured by config_json, a JSON object (see
 * kvtier-config(5)); NULL or "" uses the defaults (a 1 GiB RAM tier, no disk,
 * no peers). On success returns 0 and sets *out. Fails with -EINVAL for a
 * malformed document, an unknown key, a wrong type or an impossible value,
 * naming it in kvt_last_error(); -ENOMEM when the RAM arena cannot be
 * allocated or locked as required; -ENOTSUP for configured features this
 * build does not have (peers.transport "rdma"); -EIO and others from opening
 * disk tiers; -EADDRINUSE and others when peers.listen cannot be listened on;
 * -EADDRNOTAVAIL when this node's own address (the host of peers.listen, or
 * of its entry in peers.members) is not an address of this machine.
 */
KVT_API int kvt_open(const char *config_json, kvt_store **out);

/*
 * Closes a store: waits for in-flight batches, stops the library's threads,
 * writes the disk tier's index checkpoint, and frees everything. NULL is a
 * no-op, and so is a pointer that is not an open store (a second close of the
 * same store), which also sets kvt_last_error(). No other call may use the
 * store concurrently with or after kvt_close().
 */
KVT_API void kvt_close(kvt_store *s);

/* --- single-block operations ---------------------------------------------- */

/*
 * Stores len bytes under key. Blocks are immutable and content addressed: if
 * the key is already stored anywhere, the call returns 0 without copying
 * (refreshing the recency of a RAM copy). The block goes to the RAM tier, evicting (and
 * spilling to disk) the least recently used unleased, unpinned blocks; when
 * RAM holds only leased or pinned blocks it goes to the disk tier instead.
 * With peers, the block is also stored in the tiers of the member that owns
 * its key (one round trip; a member that fails is logged and counted, and
 * the put still succeeds here). Returns 0, -EINVAL (NULL store or data, len
 * 0 or above ram.max_block), -ENOSPC when no tier can take it (counted as a
 * refused put) or -EIO.
 */
KVT_API int kvt_put(kvt_store *s, kvt_key key, const void *data, size_t len);

/*
 * Loads the block stored under key into buf (capacity cap) and sets *len to
 * its size. Checks every tier, fastest first, then (with peers) the member
 * that owns the key; a disk or peer hit may be promoted to RAM. The block
 * cannot be evicted while it is being copied. Returns 0; -ENOENT on a miss
 * (also when the owner cannot be reached or is marked down); -ETIMEDOUT
 * when the owner did not connect within peers.connect_timeout_ms or answer
 * within peers.request_timeout_ms; -ENOBUFS when cap is too small, with *len set to the
 * size needed (buf NULL with cap 0 asks for the size this way); -EBADMSG when
 * stored bytes fail their checksum (counted as a miss, the copy is dropped);
 * -EIO on a device error; -EINVAL for a NULL store or len, or buf NULL with
 * cap non-zero.
 */
KVT_API int kvt_get(kvt_store *s, kvt_key key, void *buf, size_t cap,
		    size_t *len);

/*
 * Sets *found to the number of leading keys of keys[0..n) that are stored
 * (the longest available prefix) and returns 0. With KVT_LEASE, each of
 * those blocks is also leased: it stays loadable for ram.lease_ms
 * milliseconds (it is not evicted or reclaimed), after which the lease lapses
 * by itself. Leased bytes in RAM are capped at ram.lease_cap of the RAM
 * tier; past the cap a block counts only if its disk copy can be leased
 * instead, so the call reports only the prefix it could lease. With peers,
 * the prefix goes on through blocks the members that own them hold (and
 * lease, with KVT_LEASE): one round trip per owner. Returns -EINVAL
 * for a NULL store, found, or keys with n non-zero, or unknown flags.
 */
KVT_API int kvt_lookup(kvt_store *s, const kvt_key *keys, size_t n,
		       unsigned flags, size_t *found);

/*
 * Ends the leases of keys[0..n) early, e.g. once the engine has loaded them,
 * so their bytes count against the lease cap no longer. Keys without a lease
 * are ignored. With peers, the owners of the keys are asked to end theirs
 * too (best effort). Returns the number of keys whose lease was ended here (a
 * key counts once even when both its RAM and disk copies were leased), or
 * -EINVAL.
 */
KVT_API int kvt_release(kvt_store *s, const kvt_key *keys, size_t n);

/*
 * Removes key from every tier of this node (a copy its owner holds, with
 * peers, stays there). A block being copied out is removed once the copy
 * finishes. Returns 0, -ENOENT when the key is not stored, or -EINVAL.
 */
KVT_API int kvt_remove(kvt_store *s, kvt_key key);

/*
 * Writes the store's statistics as a NUL-terminated JSON object into buf of
 * size cap, like snprintf: returns the length of the whole document (without
 * the NUL) even when it was truncated to fit, so a call with buf NULL and cap
 * 0 sizes the buffer. Per tier: capacity, bytes used, objects, hits, misses,
 * puts, refused puts, evictions and evicted bytes, leased bytes, lease
 * expiries; store-wide get and put latency percentiles. See kvtier(7).
 * Returns -EINVAL for a NULL store or buf NULL with cap non-zero.
 */
KVT_API int kvt_stats_json(kvt_store *s, char *buf, size_t cap);

/*
 * Reports the RAM arena so an engine can register it once (for example with
 * cudaHostRegister) and move bytes between the GPU and the arena itself. The
 * arena stays mapped until kvt_close(). Either pointer may be NULL. Returns 0
 * or -EINVAL.
 */
KVT_API int kvt_arena(kvt_store *s, void **base, size_t *len);

/* --- batches ---------------------------------------------------------------- */

/* One block of a batch. */
typedef struct kvt_op {
	kvt_key key;
	void *buf;  /* put: the bytes to store; get: where to load them */
	size_t len; /* put: bytes; get: capacity in, bytes loaded out */
	int result; /* set when the op completes: 0 or a negative errno */
} kvt_op;

/*
 * Stores n blocks together (the blocks that go to disk, written around RAM
 * or through it, in one submission per 128 blocks) and returns when
 * all are complete: 0 if every op succeeded, else the result of the first op
 * (lowest index) that failed. Each op's result is set as for kvt_put().
 * Returns -EINVAL without touching any op for a NULL store, or ops NULL with
 * n non-zero.
 */
KVT_API int kvt_put_batch(kvt_store *s, kvt_op *ops, size_t n);

/*
 * Loads n blocks together (the disk reads of up to 128 blocks are submitted
 * at once)
 * and returns when all are complete: 0 if every op succeeded, else the
 * result of the first op that failed. For each op, len is the capacity of
 * buf on entry and the bytes loaded on return (or the size needed, with
 * result -ENOBUFS); result is set as for kvt_get().
 */
KVT_API int kvt_get_batch(kvt_store *s, kvt_op *ops, size_t n);

/* --- asynchronous batches ---------------------------------------------------- */

/* An asynchronous batch in flight. Opaque. */
typedef struct kvt_batch kvt_batch;

/*
 * Starts a batch of n ops (opcode KVT_OP_GET or KVT_OP_PUT) on the library's
 * worker threads and returns at once. On success returns 0 and sets *out;
 * the ops and their buffers then belong to the library until the batch
 * completes (kvt_batch_wait() returns 0, kvt_batch_poll() returns 1, or the
 * eventfd from kvt_batch_fd() is readable), after which every op's result
 * and len are set exactly as kvt_get_batch()/kvt_put_batch() would set them.
 * On failure (-EINVAL for bad arguments, -ENOMEM, -ESHUTDOWN while the store
 * closes) returns a negative errno, no op is started and *out is untouched.
 * Every successful submission must be freed with kvt_batch_free().
 */
KVT_API int kvt_batch_submit(kvt_store *s, int opcode, kvt_op *ops, size_t n,
			     kvt_batch **out);

/*
 * Waits up to timeout_ms milliseconds (negative: forever) for the batch to
 * complete. Returns 0 when complete, -ETIMEDOUT when the time ran out first,
 * or -EINVAL for NULL. The batch's own outcome is kvt_batch_result().
 */
KVT_API int kvt_batch_wait(kvt_batch *b, int timeout_ms);

/*
 * Returns 1 if the batch has completed, 0 if it is still running, -EINVAL for
 * NULL. Never blocks.
 */
KVT_API int kvt_batch_poll(kvt_batch *b);

/*
 * Returns an eventfd (non-blocking, close-on-exec) that becomes readable
 * when the batch completes, for epoll or poll loops; or -EINVAL for NULL, or
 * a negative errno if the eventfd could not be created. The descriptor is
 * owned by the batch and closed by kvt_batch_free(); the caller only reads
 * it or waits on it.
 */
KVT_API int kvt_batch_fd(kvt_batch *b);

/*
 * Returns the outcome of a completed batch: 0 if every op succeeded, else
 * the result of the first op that failed; -EINPROGRESS while it runs,
 * -EINVAL for NULL.
 */
KVT_API int kvt_batch_result(kvt_batch *b);

/*
 * Frees a batch. If it is still running, first waits for it to complete (its
 * ops reference the caller's buffers). NULL is a no-op.
 */
KVT_API void kvt_batch_free(kvt_batch *b);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_H */
