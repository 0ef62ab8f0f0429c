/*
 * kvlayout.cuh - vLLM's paged KV-cache layouts on the GPU and the kernels
 * that pack blocks of them into store slots and unpack them again.
 *
 * A store block holds all layers of block_size tokens, packed as
 * [layers][2 (K, V)][block_size][num_kv_heads][head_size] elements: the
 * same bytes whichever layout the GPU cache uses, so a block saved from one
 * layout can be restored into the other (the namespace's kv_format names
 * the packed form, not the GPU layout).
 *
 *   KV_FLASH  FlashAttention backend: one tensor per layer,
 *             [2][num_blocks][block_size][num_kv_heads][head_size]
 *   KV_CROSS  cross-layer (vLLM's offloading connector): one tensor,
 *             [num_blocks][layers][2][block_size][num_kv_heads][head_size],
 *             so each block is one contiguous region already.
 *
 * In both, the bytes of one (block, layer, K or V) are contiguous: a
 * "chunk" of block_size * num_kv_heads * head_size elements. Packing and
 * unpacking are chunk copies, done by one kernel with 16-byte accesses.
 */
#ifndef KVLAYOUT_CUH
#define KVLAYOUT_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum kv_kind { KV_FLASH = 0, KV_CROSS = 1 };

struct kv_shape {
	int layers, num_blocks, block_size, num_kv_heads, head_size;
	int elt_bytes; /* 2 for bf16 / fp16 */
};

static inline size_t kv_chunk_bytes(const struct kv_shape *s)
{
	return (size_t)s->block_size * s->num_kv_heads * s->head_size * s->elt_bytes;
}

/* Bytes of one store block: every layer's K and V. */
static inline size_t kv_block_bytes(const struct kv_shape *s)
{
	return kv_chunk_bytes(s) * 2 * (size_t)s->layers;
}

/* A paged KV cache on the GPU. */
struct kv_cache {
	enum kv_kind kind;
	struct kv_shape shape;
	char **layer;     /* KV_FLASH: device pointers, one tensor per layer (host array) */
	char **d_layer;   /* KV_FLASH: the same array in device memory */
	char *cross;      /* KV_CROSS: the one tensor */
};

/* Where the bytes of (block, layer, kv) live in the cache (device address). */
__host__ __device__ static inline char *kv_chunk(char *const *layer, char *cross,
						 int kind, const struct kv_shape s,
						 int block, int l, int kv)
{
	size_t chunk = (size_t)s.block_size * s.num_kv_heads * s.head_size * s.elt_bytes;
	if (kind == KV_FLASH)
		return layer[l] + ((size_t)kv * s.num_blocks + block) * chunk;
	return cross + (((size_t)block * s.layers + l) * 2 + kv) * chunk;
}

/* Up to KV_GROUP_MAX cache block ids, passed to a kernel by value. */
#define KV_GROUP_MAX 64
struct kv_ids {
	int id[KV_GROUP_MAX];
};

/*
 * Copies chunks between the cache and packed blocks: CTA x copies chunk
 * x % (2 * layers) of group block x / (2 * layers), between the cache's
 * block ids.id[b] and packed + b * block_bytes. pack 1: cache -> packed
 * (gather, for a save); 0: packed -> cache (scatter, for a restore).
 * Chunks are multiples of 16 bytes (checked by kv_cache_alloc).
 */
__global__ static void kv_copy_chunks(char *const *layer, char *cross, int kind,
				      struct kv_shape s, struct kv_ids ids,
				      char *packed, int pack)
{
	int per_block = 2 * s.layers;
	int b = blockIdx.x / per_block, c = blockIdx.x % per_block;
	size_t chunk = (size_t)s.block_size * s.num_kv_heads * s.head_size * s.elt_bytes;
	char *cache = kv_chunk(layer, cross, kind, s, ids.id[b], c / 2, c % 2);
	char *pk = packed + (size_t)b * chunk * per_block + (size_t)c * chunk;
	uint4 *dst = (uint4 *)(pack ? pk : cache);
	const uint4 *src = (const uint4 *)(pack ? cache : pk);
	size_t n = chunk / sizeof(uint4);

	for (size_t i = threadIdx.x; i < n; i += blockDim.x)
		dst[i] = src[i];
}

#define CK(call)                                                              \
	do {                                                                  \
		cudaError_t e_ = (call);                                      \
		if (e_ != cudaSuccess) {                                      \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, \
				#call, cudaGetErrorString(e_));               \
			exit(1);                                              \
		}                                                             \
	} while (0)

/* Gathers (pack 1) or scatters (pack 0) the n <= KV_GROUP_MAX blocks of
 * ids on stream st, to or from packed (device memory, n blocks). */
static inline void kv_launch(const struct kv_cache *c, const struct kv_ids *ids,
			     int n, char *packed, int pack, cudaStream_t st)
{
	if (n <= 0)
		return;
	kv_copy_chunks<<<(unsigned)n * 2u * (unsigned)c->shape.layers, 256, 0, st>>>(
		c->d_layer, c->cross, c->kind, c->shape, *ids, packed, pack);
	CK(cudaGetLastError());
}

/* Allocates a cache of the given layout, zeroed. */
static inline void kv_cache_alloc(struct kv_cache *c, enum kv_kind kind,
				  const struct kv_shape *s)
{
	size_t layer_bytes = 2 * (size_t)s->num_blocks * kv_chunk_bytes(s);

	if (kv_chunk_bytes(s) % 16) {
		fprintf(stderr, "kv_cache_alloc: a chunk of %zu bytes is not a multiple of 16\n",
			kv_chunk_bytes(s));
		exit(1);
	}
	c->kind = kind;
	c->shape = *s;
	c->layer = (char **)calloc((size_t)s->layers, sizeof(char *));
	c->cross = NULL;
	if (kind == KV_FLASH) {
		for (int l = 0; l < s->layers; l++) {
			CK(cudaMalloc((void **)&c->layer[l], layer_bytes));
			CK(cudaMemset(c->layer[l], 0, layer_bytes));
		}
	} else {
		CK(cudaMalloc((void **)&c->cross, layer_bytes * s->layers));
		CK(cudaMemset(c->cross, 0, layer_bytes * s->layers));
	}
	CK(cudaDeviceSynchronize()); /* other streams do not wait for the memsets */
	CK(cudaMalloc((void **)&c->d_layer, (size_t)s->layers * sizeof(char *)));
	CK(cudaMemcpy(c->d_layer, c->layer, (size_t)s->layers * sizeof(char *),
		      cudaMemcpyHostToDevice));
}

static inline void kv_cache_free(struct kv_cache *c)
{
	for (int l = 0; c->kind == KV_FLASH && l < c->shape.layers; l++)
		CK(cudaFree(c->layer[l]));
	if (c->cross)
		CK(cudaFree(c->cross));
	CK(cudaFree(c->d_layer));
	free(c->layer);
}

/* Bytes of the whole cache (all layers). */
static inline size_t kv_cache_bytes(const struct kv_cache *c)
{
	return 2 * (size_t)c->shape.num_blocks * kv_chunk_bytes(&c->shape) * c->shape.layers;
}

#endif
