/*
 * kv_connector.cu - a vLLM-style KV connector's data path over libkvtier,
 * end to end on one GPU, checked element by element.
 *
 * Random KV for several layers in a FlashAttention-layout paged cache is
 * saved block by block into the store (reserve -> gather -> copy -> commit),
 * then restored into a cross-layer-layout cache at other block ids (pin ->
 * copy as each block is ready -> unpin), and the other way round with a
 * second prompt; each restored element must equal the saved one, and once
 * the restore's streams are synchronized no slot may be left pinned. With
 * --disk DIR the store has a disk tier and the saved blocks are pushed out
 * of RAM before the restore, so they come back through the disk. --unpin
 * picks how the restore unpins: "poll" (the default: each block once its
 * copy is done, found by the restoring thread) or "callback" (a host
 * callback behind each group's scatter).
 *
 *   kv_connector [--disk DIR] [--unpin poll|callback] [--layers N]
 *                [--blocks N] [--block-size N] [--heads N] [--head-size N]
 * Exit status 0 when every element matched, 1 otherwise, 77 without a GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvconn.cuh"

/* Fills n bytes with a pattern from (seed, index). */
__global__ static void fill_random(uint32_t *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t x = (uint32_t)i * 2654435761u ^ seed;
		x ^= x >> 15;
		x *= 2246822519u;
		x ^= x >> 13;
		p[i] = x;
	}
}

static void cache_fill(struct kv_cache *c, uint32_t seed)
{
	size_t per_layer = kv_cache_bytes(c) / (size_t)c->shape.layers;
	for (int l = 0; c->kind == KV_FLASH && l < c->shape.layers; l++)
		fill_random<<<1024, 256>>>((uint32_t *)c->layer[l], per_layer / 4, seed + (uint32_t)l);
	if (c->kind == KV_CROSS)
		fill_random<<<1024, 256>>>((uint32_t *)c->cross, kv_cache_bytes(c) / 4, seed);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
}

/* The cache's contents on the host: one array per layer (KV_FLASH) or one. */
struct host_copy {
	char **layer;
	char *cross;
};

static void host_copy_of(const struct kv_cache *c, struct host_copy *h)
{
	size_t per_layer = kv_cache_bytes(c) / (size_t)c->shape.layers;
	h->layer = (char **)calloc((size_t)c->shape.layers, sizeof(char *));
	h->cross = NULL;
	if (c->kind == KV_FLASH) {
		for (int l = 0; l < c->shape.layers; l++) {
			h->layer[l] = (char *)malloc(per_layer);
			CK(cudaMemcpy(h->layer[l], c->layer[l], per_layer, cudaMemcpyDeviceToHost));
		}
	} else {
		h->cross = (char *)malloc(kv_cache_bytes(c));
		CK(cudaMemcpy(h->cross, c->cross, kv_cache_bytes(c), cudaMemcpyDeviceToHost));
	}
}

static void host_copy_free(const struct kv_cache *c, struct host_copy *h)
{
	for (int l = 0; c->kind == KV_FLASH && l < c->shape.layers; l++)
		free(h->layer[l]);
	free(h->layer);
	free(h->cross);
}

/*
 * Element (layer l, K/V kv, token t of block b, head hd, dim d) of a host
 * copy, as a 16-bit element, addressed from the layout's definition (not
 * through the kernels' chunk arithmetic).
 */
static uint16_t elem(const struct kv_cache *c, const struct host_copy *h, int b, int l,
		     int kv, int t, int hd, int d)
{
	const struct kv_shape *s = &c->shape;
	size_t i;
	if (c->kind == KV_FLASH) {
		/* [2][num_blocks][block_size][heads][head_size] per layer */
		i = (((((size_t)kv * s->num_blocks + b) * s->block_size + t) * s->num_kv_heads + hd) *
		     s->head_size + d);
		return ((const uint16_t *)h->layer[l])[i];
	}
	/* [num_blocks][layers][2][block_size][heads][head_size] */
	i = ((((((size_t)b * s->layers + l) * 2 + kv) * s->block_size + t) * s->num_kv_heads + hd) *
	     s->head_size + d);
	return ((const uint16_t *)h->cross)[i];
}

/* Compares n blocks: src's src_ids[i] against dst's dst_ids[i]. Returns
 * the number of elements that differ. */
static size_t compare(const struct kv_cache *src, const int *src_ids,
		      const struct kv_cache *dst, const int *dst_ids, size_t n)
{
	struct host_copy hs, hd;
	const struct kv_shape *s = &src->shape;
	size_t bad = 0;

	host_copy_of(src, &hs);
	host_copy_of(dst, &hd);
	for (size_t i = 0; i < n; i++)
		for (int l = 0; l < s->layers; l++)
			for (int kv = 0; kv < 2; kv++)
				for (int t = 0; t < s->block_size; t++)
					for (int h = 0; h < s->num_kv_heads; h++)
						for (int d = 0; d < s->head_size; d++)
							bad += elem(src, &hs, src_ids[i], l, kv, t, h, d) !=
							       elem(dst, &hd, dst_ids[i], l, kv, t, h, d);
	host_copy_free(src, &hs);
	host_copy_free(dst, &hd);
	return bad;
}

/* n distinct block ids out of num_blocks, shuffled (xorshift). */
static void pick_blocks(int *ids, int n, int num_blocks, uint32_t seed)
{
	int *all = (int *)malloc((size_t)num_blocks * sizeof(int));
	for (int i = 0; i < num_blocks; i++)
		all[i] = i;
	for (int i = num_blocks - 1; i > 0; i--) {
		seed ^= seed << 13;
		seed ^= seed >> 17;
		seed ^= seed << 5;
		int j = (int)(seed % (uint32_t)(i + 1)), x = all[i];
		all[i] = all[j];
		all[j] = x;
	}
	memcpy(ids, all, (size_t)n * sizeof(int));
	free(all);
}

/* Pushes every block out of the RAM tier (to disk) with filler puts. */
static void push_out_of_ram(kvt_store *s, size_t ram_bytes, size_t block_bytes)
{
	static uint64_t nround; /* new fillers each time: stored ones would not push */
	char *fill = (char *)calloc(1, block_bytes);
	nround++;
	for (uint64_t i = 0; i < 2 * ram_bytes / block_bytes + 8; i++) {
		kvt_key k = { 0xf111e7ull + (nround << 32), i };
		memcpy(fill, &i, sizeof(i));
		KVT_CK(kvt_put(s, k, fill, block_bytes));
	}
	free(fill);
}

static long long stat_of(kvt_store *s, const char *tier, const char *name)
{
	char buf[16384], pat[128];
	if (kvt_stats_json(s, buf, sizeof(buf)) < 0)
		return -1;
	char *t = strstr(buf, tier);
	snprintf(pat, sizeof(pat), "\"%s\":", name);
	char *p = t ? strstr(t, pat) : NULL;
	return p ? atoll(p + strlen(pat)) : -1;
}

/* One direction: save from `from` (blocks a), restore into `to` (blocks b). */
static int round_trip(kvt_store *s, kvt_key root, struct kv_cache *from,
		      struct kv_cache *to, int nblocks, uint32_t seed, const char *disk,
		      size_t ram_bytes, int poll)
{
	int bs = from->shape.block_size;
	size_t ntok = (size_t)nblocks * bs;
	uint32_t *tokens = (uint32_t *)malloc(ntok * sizeof(uint32_t));
	int *a = (int *)malloc((size_t)nblocks * sizeof(int));
	int *b = (int *)malloc((size_t)nblocks * sizeof(int));
	struct conn cs, cr;

	for (size_t i = 0; i < ntok; i++)
		tokens[i] = (uint32_t)(i * 7919u + seed) % 151936u;
	pick_blocks(a, nblocks, from->shape.num_blocks, seed | 1);
	pick_blocks(b, nblocks, to->shape.num_blocks, seed * 3 + 1);

	conn_open(&cs, s, root, from);
	conn_save(&cs, tokens, ntok, a);
	conn_sync(&cs);
	conn_close(&cs);
	if (disk)
		push_out_of_ram(s, ram_bytes, kv_block_bytes(&from->shape));
	long long loads0 = stat_of(s, "\"slots\"", "loads");

	conn_open(&cr, s, root, to);
	cr.poll = poll;
	size_t got = conn_restore(&cr, tokens, ntok, b);
	conn_sync(&cr);
	long long held = stat_of(s, "\"slots\"", "held"); /* pins left: none */
	conn_close(&cr);
	long long loads = stat_of(s, "\"slots\"", "loads") - loads0;

	size_t bad = compare(from, a, to, b, got);
	printf("%s -> %s: %zu blocks saved (%zu already stored, %zu not), %zu restored "
	       "(%lld from disk, unpinned by %s, %lld slots left held), %zu elements differ\n",
	       from->kind == KV_FLASH ? "flash" : "cross", to->kind == KV_FLASH ? "flash" : "cross",
	       cs.saved, cs.skipped_stored, cs.unsaved, got, loads, poll ? "poll" : "callback",
	       held, bad);
	int ok = bad == 0 && got == (size_t)nblocks && (!disk || loads == nblocks) && held == 0;
	free(tokens);
	free(a);
	free(b);
	return ok;
}

int main(int argc, char **argv)
{
	struct kv_shape sh = { 8, 256, 16, 8, 128, 2 };
	const char *disk = NULL;
	int nblocks = 64, poll = 1;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--disk"))
			disk = argv[i + 1];
		else if (!strcmp(argv[i], "--unpin") && !strcmp(argv[i + 1], "poll"))
			poll = 1;
		else if (!strcmp(argv[i], "--unpin") && !strcmp(argv[i + 1], "callback"))
			poll = 0;
		else if (!strcmp(argv[i], "--layers"))
			sh.layers = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--blocks"))
			nblocks = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--block-size"))
			sh.block_size = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--heads"))
			sh.num_kv_heads = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--head-size"))
			sh.head_size = atoi(argv[i + 1]);
		else {
			fprintf(stderr, "usage: %s [--disk DIR] [--unpin poll|callback] [--layers N] "
				"[--blocks N] [--block-size N] [--heads N] [--head-size N]\n", argv[0]);
			return 2;
		}
	}
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	if (nblocks < 1 || nblocks > sh.num_blocks / 2)
		sh.num_blocks = 2 * (nblocks < 1 ? 1 : nblocks);

	size_t bb = kv_block_bytes(&sh), ram = 64 * bb < (256u << 20) ? (256u << 20) : 64 * bb;
	char cfg[1024];
	if (disk)
		snprintf(cfg, sizeof(cfg),
			 "{\"ram\": {\"capacity\": %zu, \"max_block\": %zu},"
			 " \"disk\": {\"path\": \"%s/kv_connector.tier\", \"capacity\": %zu}}",
			 ram, bb, disk, 8 * ram + (256u << 20));
	else
		snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": %zu, \"max_block\": %zu}}",
			 4 * (size_t)nblocks * bb + ram, bb);
	kvt_store *s;
	if (disk) { /* a fresh tier: blocks of an earlier run would be "stored already" */
		char path[600];
		snprintf(path, sizeof(path), "%s/kv_connector.tier", disk);
		unlink(path);
	}
	KVT_CK(kvt_open(cfg, &s));
	kvt_key root = conn_root("example/model@rev1", &sh, 0, 1);
	void *arena = conn_register(s);

	struct kv_cache flash, cross;
	kv_cache_alloc(&flash, KV_FLASH, &sh);
	kv_cache_alloc(&cross, KV_CROSS, &sh);
	cache_fill(&flash, 0x1234u);
	cache_fill(&cross, 0xabcdu);

	int ok = round_trip(s, root, &flash, &cross, nblocks, 11, disk, ram, poll);
	ok &= round_trip(s, root, &cross, &flash, nblocks, 12345, disk, ram, poll);

	kv_cache_free(&flash);
	kv_cache_free(&cross);
	conn_unregister(arena);
	kvt_close(s);
	printf("%s\n", ok ? "all restored blocks equal the saved ones" : "MISMATCH");
	return ok ? 0 : 1;
}
