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
 * kvt_strerror(ENOENT) agree) or 0. An errno value outside the library's
 * own texts (for example EADDRINUSE from kvt_open) gives the C library's text
 * for it; anything else gives "unknown error". Never returns NULL.
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
 * differ in any field, or in salt bytes, get different roots. ns NULL, salt
 * NULL with salt_len non-zero, or a string field of 4 GiB or more returns
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
 * allocated or locked as required; with peers.transport "rdma", -ENODEV
 * when no RDMA device serves this node's own address (the message names the
 * address and why, e.g. "is rdma_ucm loaded?"; "auto" falls back to TCP
 * instead, with a log line); -EBUSY when a disk.path
 * device is in use by another store (of any process; each device is opened
 * exclusively until kvt_close) and -EINVAL when two entries of disk.path
 * reach the same file or block device; -ENOSPC when the file system holding
 * a disk.path file has no room for it, or a block device is smaller than its
 * share of disk.capacity (kvt_last_error() names the path and the bytes);
 * -EFBIG when that file system cannot hold a file of the file's share of
 * disk.capacity, or the share is past the process's RLIMIT_FSIZE (named
 * the same way);
 * -ENOENT when a disk.path file's directory does not exist, or the path is
 * a missing name under /dev (a device that is not there is never created as
 * a file); -EIO and others from opening disk tiers; -EADDRINUSE and others when peers.listen cannot be listened on;
 * -EADDRNOTAVAIL when this node's own address (the host of peers.listen, or
 * of its entry in peers.members) is not an address of this machine. With
 * local.socket the store also serves the processes of this machine on that
 * Unix socket (-EADDRINUSE when another store serves it, -EEXIST when the
 * path is not a socket). {"attach": PATH} alone returns a store attached to
 * the node store serving PATH, with no tiers of its own: every call goes
 * there (kvtier(7), "One store per node"); it fails with -ENOENT or
 * -ECONNREFUSED when nothing serves PATH, -EACCES when this process may not
 * attach, -EUSERS when local.max_clients are attached, -EPROTONOSUPPORT
 * when the node store speaks another version of the local protocol (the
 * text names both), -EPROTO when the other end does not speak the protocol
 * or closes the connection at HELLO (as node stores of earlier builds did
 * on a HELLO of another version), -ETIMEDOUT when it did not accept
 * the connection or answer its HELLO within 5 seconds (not a node store,
 * or a stopped or stuck one). A disk.path file found shorter than its share
 * of disk.capacity (cut while no store had it open) is extended back to it;
 * the blocks that lay past its old end are misses from then on, the others
 * are kept, and a warning names the file (kvtier-disk(5)).
 */
KVT_API int kvt_open(const char *config_json, kvt_store **out);

/*
 * Closes a store: waits for in-flight batches, stops the library's threads,
 * writes the RAM tier's blocks that the disk tier lacks to it (as many of
 * the most recent as fit; disk.flush_on_close, default true, so this can
 * take as long as writing them), writes the disk tier's index checkpoint,
 * and frees everything. NULL is a
 * no-op. As with free(), s must be a store that kvt_open() returned and that
 * is still open: closing it a second time, or passing any other pointer, is
 * undefined (the library cannot tell a stale pointer from a later store given
 * the same address). No other call may use the store concurrently with or
 * after kvt_close().
 */
KVT_API void kvt_close(kvt_store *s);

/* --- single-block operations ---------------------------------------------- */

/*
 * Stores len bytes under key. Blocks are immutable and content addressed: if
 * the key is already stored anywhere, the call returns 0 without copying
 * (refreshing the recency of a RAM copy). The block goes to the RAM tier, evicting (and
 * spilling to disk) the least recently used unleased, unpinned blocks; when
 * RAM holds only leased or pinned blocks it goes to the disk tier instead.
 * Without a disk tier, a put that takes RAM past ram.high_watermark while
 * the blocks the evictor cannot drop (leased and pinned blocks, slots
 * reserved or loading) and it alone stay above ram.low_watermark is refused
 * (-ENOSPC), since the evictor would drop it at once; a block larger than
 * ram.low_watermark of RAM by itself is not refused so, and such a put
 * evicts it with the rest.
 * With peers, the block is also stored in the tiers of the member that owns
 * its key (one round trip; a member that fails is logged and counted, and
 * the put still succeeds here). Returns 0, -EINVAL (NULL store or data, len
 * 0 or above ram.max_block), -ENOSPC when no tier can take it (counted as a
 * refused put), -ENOMEM (the RAM tier's index cannot grow) or -EIO.
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
 * by itself; the lease's end is rounded up to a multiple of 2^20 ns (about
 * a millisecond), so it may last that much longer, never shorter. Looking
 * up a leased block again extends its lease and never shortens it. Leased bytes in RAM are capped at ram.lease_cap of the RAM
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
 * Returns -EINVAL for a NULL store or buf NULL with cap non-zero, -ENOMEM,
 * or -EOVERFLOW when the document would be longer than INT_MAX.
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
 * or through it, in one submission per 128 blocks, with the spills RAM
 * makes room with; in a chunk larger than RAM keeps, RAM copies its newest
 * blocks while the others are written, each into room freed as a spill
 * completes, and any block RAM then turns away goes in a last submission)
 * and returns when
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
 * result -ENOBUFS); result is set as for kvt_get(). Returns -EINVAL
 * without touching any op for a NULL store, or ops NULL with n non-zero.
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

/* --- zero-copy slots: the GPU data path ------------------------------------ */

/*
 * One block lent out of the RAM arena, for an engine that moves bytes
 * between the GPU and the store itself (cudaMemcpyAsync, or a kernel reading
 * or writing the mapped host address) instead of copying through its own
 * buffers. The caller fills key (and len, to reserve); the library fills
 * the rest. Keep the slot as it was returned: commit, abort and unpin read
 * ref. See kvt_put_reserve(3) and kvt_get_pin(3).
 */
typedef struct kvt_slot {
	kvt_key key;
	void *addr;      /* out: the block's bytes in the arena; NULL if none */
	size_t len;      /* reserve: bytes to reserve (in); pin: block bytes (out) */
	uint64_t ref;    /* out: the library's handle of the slot; 0 if none */
	int result;      /* out: 0, KVT_SLOT_STORED, -EINPROGRESS or -errno */
	uint32_t flags;  /* reserved: set to 0 */
} kvt_slot;

/* kvt_slot.result of kvt_put_reserve(): the key is stored already, so
 * there is nothing to copy; no space was reserved. */
#define KVT_SLOT_STORED 1

/* One piece of the RAM arena, as kvt_arena_regions() reports it. */
typedef struct kvt_region {
	void *base;      /* 4 KiB aligned */
	size_t len;      /* at most 1 GiB */
} kvt_region;

/* Loads started by kvt_get_pin() and still to be reaped. Opaque. */
typedef struct kvt_pin_batch kvt_pin_batch;

/*
 * Reserves arena space for n blocks about to be saved, so the caller can
 * write each block's bytes straight into slots[i].addr (slots[i].len bytes)
 * and then publish it with kvt_put_commit(), or give the space back with
 * kvt_put_abort(). Never waits for disk I/O: when a slot's bytes do not fit
 * without spilling blocks to disk first, that slot fails with -EAGAIN and
 * the evictor is woken (try again later, or put the block with
 * kvt_put_batch()). Per slot, result is 0 (addr and ref set),
 * KVT_SLOT_STORED (the key is stored already: skip its copy), -EAGAIN (no
 * space now, or ram.pin_cap of the RAM tier is held in slots), -ENOSPC
 * (without a disk tier: the evictor would drop the block as soon as it was
 * committed, as kvt_put() refuses it; counted as a refused put), -EINVAL (len
 * 0 or above ram.max_block, or flags not 0), -ENOMEM. A reservation not committed or
 * aborted within ram.pin_ms is taken to be forgotten: from then on it may
 * lapse at any moment, which the store does when it next sweeps its slots
 * (at each kvt_put_reserve() of a block not stored yet, each kvt_get_pin()
 * and kvt_stats_json(), and in the background on a loader thread once the
 * store has started its loaders). A lapse gives the space back for reuse,
 * and a commit or abort after it gets -ESTALE; a commit after ram.pin_ms
 * but before the lapse still publishes. Only a copy and commit that finish
 * within ram.pin_ms are sure to publish, and the caller must not write into
 * a slot past ram.pin_ms. Returns the number of slots reserved; -EINVAL
 * for a NULL store, slots NULL with n non-zero, n above INT32_MAX, or
 * flags non-zero.
 */
KVT_API int kvt_put_reserve(kvt_store *s, kvt_slot *slots, size_t n,
			    unsigned flags);

/*
 * Publishes reserved slots once the caller's copy into them has completed:
 * each block becomes visible to lookups and loads, is counted as a put, is
 * checksummed when written to disk, and may be evicted and spilled like any
 * other. The block is slots[i].len bytes as reserved. Never waits for disk
 * or peer I/O: with disk.write_policy "write_through" the block is written
 * to disk in the background by the library's loader threads (a kvt_remove
 * after the commit wins), with "on_evict" when it is evicted; when another
 * member owns its key, it is stored there too, in the background. Slots
 * whose result is not 0 are skipped. Per
 * slot, result becomes 0 (published, or the key was stored meanwhile),
 * -ESTALE (not a live reservation of this store: aborted, committed, or
 * lapsed, which a reservation older than ram.pin_ms may have done; see
 * kvt_put_reserve()), -ENOSPC (without a disk tier, leases or pins taken
 * since the reservation would have the evictor drop the block at once, as
 * kvt_put() refuses it: not published, the space given back, counted as a
 * refused put) or -ENOMEM; ref and addr are cleared. Returns
 * the number of slots published; -EINVAL for a NULL store, slots NULL
 * with n non-zero, or n above INT32_MAX.
 */
KVT_API int kvt_put_commit(kvt_store *s, kvt_slot *slots, size_t n);

/*
 * Gives back reserved slots without publishing them. Slots whose result is
 * not 0 are skipped; a slot that is not a live reservation gets -ESTALE.
 * ref and addr are cleared. Returns the number of slots given back, or
 * -EINVAL as kvt_put_commit().
 */
KVT_API int kvt_put_abort(kvt_store *s, kvt_slot *slots, size_t n);

/*
 * Pins n blocks where they lie so the caller can copy from slots[i].addr
 * (slots[i].len bytes) in place, until kvt_unpin(). A block in RAM is ready
 * at return (result 0). A block only on disk gets a fresh arena slot and is
 * read into it, checked against its checksum, asynchronously (result
 * -EINPROGRESS): each such load completes on its own and is reported by
 * kvt_pin_reap() on *out, which is set on success (free it with
 * kvt_pin_free()), which alone sets its result, addr and len: until
 * then the slot reads -EINPROGRESS with its ref set. With
 * disk.promote, a loaded block the RAM tier admits becomes the key's RAM
 * block in place (no copy); otherwise it is private to its slot. A block
 * that another member owns is read from it the same way (its slot is
 * ram.max_block bytes until it lands). Other results: -ENOENT (stored
 * nowhere on this node and owned by no other member), -EAGAIN (ram.pin_cap
 * of the RAM tier is held in slots), -EINVAL; a slot whose result is
 * negative has addr NULL (and, reaped, len 0). A pinned block is never
 * evicted, moved or reused, even
 * when kvt_remove() removes its key meanwhile (the bytes stay until the
 * unpin). A pin not released within ram.pin_ms of its call (of its
 * landing, for a load: a load in flight never lapses, however slow) is
 * taken to be forgotten and lapses, like a lease. flags must be 0. Returns the number of
 * slots pinned or loading; -EINVAL for a NULL store or out, slots NULL with
 * n non-zero, n above INT32_MAX, or flags non-zero; -ENOMEM.
 */
KVT_API int kvt_get_pin(kvt_store *s, kvt_slot *slots, size_t n,
			unsigned flags, kvt_pin_batch **out);

/*
 * Reports loads of a pin batch that finished since the last call: writes up
 * to max slot indexes to idx (each slot is reported once, with its result,
 * addr and len set, 0 or -errno: -ENOENT, -EBADMSG, -EIO, -ENOSPC,
 * -ETIMEDOUT, -ECANCELED, -ENOBUFS (an owner's block longer than this
 * store's ram.max_block); a failed load holds nothing, its addr is NULL and
 * its len 0) and returns how many. Waits up to timeout_ms
 * milliseconds (0: not at all; negative: forever) for one to finish. Returns 0 once every load of the
 * batch has been reported, -ETIMEDOUT when the time ran out first, -EINVAL
 * for a NULL batch, idx NULL, or max 0.
 */
KVT_API int kvt_pin_reap(kvt_pin_batch *b, size_t *idx, size_t max,
			 int timeout_ms);

/*
 * Returns an eventfd (non-blocking, close-on-exec) whose counter grows by
 * one as each load of the batch finishes, for epoll or poll loops: wait on
 * it, read it, then call kvt_pin_reap() with timeout 0. Owned by the batch;
 * -EINVAL for NULL or a negative errno if it could not be created.
 */
KVT_API int kvt_pin_fd(kvt_pin_batch *b);

/*
 * Frees a pin batch, first waiting for its loads still in flight. It
 * unpins nothing: a load never reaped leaves its slot -EINPROGRESS, and
 * kvt_unpin() of that slot (by its ref) gives its space back. NULL is a
 * no-op.
 */
KVT_API void kvt_pin_free(kvt_pin_batch *b);

/*
 * Releases pinned slots: each block becomes evictable again (a removed one
 * is freed; a block loaded from disk gives its slot back). Reads only each
 * slot's ref and writes nothing to the slots. Never waits for I/O and takes
 * only short internal locks, so it may be called from a CUDA host callback
 * (cudaLaunchHostFunc) once the copies out of the slots have completed. A
 * slot still loading may be unpinned (to cancel): it is given back when its
 * read lands, and kvt_pin_reap() reports it with -ECANCELED. Slots with ref
 * 0 are skipped; one that is not a live pin of this store (unpinned before,
 * a failed load, or lapsed after ram.pin_ms) is ignored. Returns the number
 * of pins released; -EINVAL for a NULL store, slots NULL with n non-zero,
 * or n above INT32_MAX.
 */
KVT_API int kvt_unpin(kvt_store *s, const kvt_slot *slots, size_t n);

/*
 * Reports the RAM arena, where every slot lies, as consecutive regions of
 * at most 1 GiB, each 4 KiB aligned, so an engine can register each once
 * (cudaHostRegister, in the background if it likes); with a disk tier the
 * library registers the same regions with io_uring as fixed buffers (as many
 * as the kernel allows). A block may straddle two
 * regions. Writes up to max regions and returns the number the arena has
 * (call with max 0 to size the array); -EINVAL for a NULL store, or regions
 * NULL with max non-zero.
 */
KVT_API int kvt_arena_regions(kvt_store *s, kvt_region *regions, size_t max);

/* --- caller memory ---------------------------------------------------------- */

/*
 * Registers [base, base+len) of the caller's memory (typically a pinned
 * pool it also cudaHostRegister()s) with the store, so that the disk I/O of
 * kvt_get_batch(), kvt_put_batch(), kvt_get(), kvt_put() and asynchronous
 * batches whose op buffers lie inside it moves straight between the device
 * and that memory as io_uring fixed buffers (READ_FIXED/WRITE_FIXED); other
 * buffers keep the plain path (straight into a page-aligned buffer whose
 * capacity covers the padded block, else through the tier's own memory and
 * a copy). An op buffer's payload must lie in one started GiB of the range
 * to go fixed. base and len must be multiples of 4096, len non-zero, flags
 * 0. When the kernel refuses the fixed buffers (RLIMIT_MEMLOCK, a kernel
 * before 5.13), or the store has no disk tier of its own (none configured,
 * or a store attached to a node store, whose batches run in the node
 * store's process), the range is still registered and its I/O takes the
 * plain path; the disk tier's statistics
 * count mem_register_refusals, mem_fixed_ios and mem_plain_ios. With peers
 * over RDMA (peers.transport "rdma", or "auto" where a device serves this
 * node) the range is also registered with the RDMA device, for local writes
 * only (never exposed to other members), and a peer get whose buffer lies in
 * it READs the block straight there instead of through staging (counted as
 * peer.rdma.direct_reads); a device that refuses, or 64 ranges registered
 * with it already, leaves the range working through staging (logged).
 * On success returns 0 and sets *id. Returns -EINVAL for a NULL
 * store, base or id, len 0, base or len not 4096 aligned, flags non-zero,
 * or a range overlapping the RAM arena (the library registers that
 * itself); -EEXIST when it overlaps a registered range; -ENOSPC past 64
 * ranges, or when no run of consecutive free 1 GiB pieces (one per GiB the
 * range starts, 64 in all) is long enough for it. Thread-safe.
 */
KVT_API int kvt_mem_register(kvt_store *s, void *base, size_t len,
			     unsigned flags, uint64_t *id);

/*
 * Ends the registration id returned by kvt_mem_register(); the memory is
 * the caller's again. It never waits for disk I/O: while a batch of this
 * store has disk I/O into or out of the range in flight, it fails with
 * -EBUSY and the range stays registered (call again once the batches using
 * it have completed). With peers over RDMA it does wait for the peer
 * tier's RDMA READs in flight, each bounded by its request deadline, before
 * it takes the range off the RDMA device. Returns 0; -ENOENT when id is
 * not a live registration of this store (never registered, or
 * deregistered already); -EBUSY; -EINVAL for a NULL store. kvt_close()
 * ends every registration.
 */
KVT_API int kvt_mem_deregister(kvt_store *s, uint64_t id);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_H */
