/*
 * fuzz_disk_scan.c - libFuzzer target for the NVMe tier's recovery
 * (lib/disk_format.c): the superblock check, the checkpoint loader and the
 * region scan, run by disk_open() on a damaged copy of a small valid tier.
 *
 * Once per process it builds two images of a small tier (512 KiB, seven
 * regions of 64 KiB, the smallest the disk tier takes: config_parse's 1 MiB
 * floor is bypassed so that an input costs well under a millisecond) on an in-memory
 * device behind the kvt_dev_ops seam: one closed cleanly (a checkpoint) and
 * one taken while open after more puts (no checkpoint: the scan path). The
 * log has wrapped, so regions hold records of older generations past their
 * write pointers. Each input picks an image and damages a copy: byte
 * patches, bit flips, 64-bit field stores, page copies and zeroing, and
 * re-sealing the checksums of the superblock, the checkpoint, or a record
 * header. A re-sealed record header always names a (key, length, payload
 * checksum) the harness really wrote, so no input can forge a record: wrong
 * bytes can only come from a bug in the tier.
 *
 * Then it opens the tier, reads every key ever written (a read may miss or
 * report damage, but one that succeeds must return the key's exact bytes),
 * puts a few blocks and reads them back, closes (writing a checkpoint),
 * reopens from that checkpoint and reads every key again. The device aborts
 * on any I/O beyond the tier's size or not 4 KiB aligned (what O_DIRECT
 * would refuse).
 *
 * It mirrors the on-disk layout of kvtier-disk(5) to re-seal checksums and
 * checks that mirror against the images it builds, so a format change makes
 * it stop with a clear message instead of fuzzing blindly. Knows nothing about
 * io_uring, the RAM tier or the store.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "config.h"
#include "disk.h"
#include "kvtier.h"
#include "uring.h"
#include "opts.h"


#define DS_PAGE 4096u
#define DS_DEV_BYTES (512u << 10)
#define DS_REGION (64u << 10)
#define DS_PAGES (DS_DEV_BYTES / DS_PAGE)
#define DS_CONFIG "{\"disk\": {\"path\": \"fuzz-memdev\", \"capacity\": \"2MiB\", " \
		  "\"region_size\": \"1MiB\", \"queue_depth\": 8}}"
#define DS_FD 1000           /* the memory device's descriptor */
#define DS_NBASE 48          /* blocks of the clean image: the log wraps */
#define DS_NMORE 6           /* then put while open: the crash image */
#define DS_NPOST 3           /* put by each input after recovery */
#define DS_NKEYS (DS_NBASE + DS_NMORE + DS_NPOST)

/* Offsets in the on-disk structures (kvtier-disk(5)), checked at setup. */
#define SB_SUM_OFF 96u        /* struct sb: checksum after 96 bytes */
#define REC_KEY_OFF 16u       /* struct rec_hdr: key_lo, key_hi */
#define REC_LEN_OFF 32u
#define REC_PSUM_OFF 64u
#define REC_SUM_OFF 72u
#define CK_OFF DS_PAGE        /* the checkpoint area follows the superblock */
#define CK_BODY_BYTES_OFF 56u
#define CK_BODY_SUM_OFF 64u
#define CK_SUM_OFF 72u

#define DS_CHECK(cond, ...)                                                    \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_disk_scan: invariant broken: %s: ", \
				#cond);                                        \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			abort();                                               \
		}                                                              \
	} while (0)

/* --- the in-memory device ---------------------------------------------------- */

static uint8_t *ds_dev;      /* the bytes the open tier sees */
static uint64_t ds_dev_want; /* what the tier asked for at dev_open */

struct ds_queue {
	struct dev_io **done;
	unsigned cap, head, n;
};

static int ds_dev_open(const char *path, uint64_t want, uint64_t *held)
{
	(void)path;
	if (held)
		*held = want;
	DS_CHECK(want <= DS_DEV_BYTES, "tier wants %" PRIu64 " bytes", want);
	ds_dev_want = want;
	return DS_FD;
}

static void ds_dev_close(int fd)
{
	DS_CHECK(fd == DS_FD, "closing fd %d", fd);
}

static int ds_dev_sync(int fd)
{
	DS_CHECK(fd == DS_FD, "syncing fd %d", fd);
	return 0;
}

static int ds_queue_open(const int *fds, unsigned nfds, unsigned entries,
			 void *fixed_base, size_t fixed_len, unsigned *nfixed, void **q)
{
	struct ds_queue *dq = calloc(1, sizeof(*dq));

	(void)fixed_base;
	(void)fixed_len;
	DS_CHECK(nfds == 1 && fds[0] == DS_FD && entries > 0, "queue over %u fds", nfds);
	if (!dq)
		return -ENOMEM;
	dq->done = calloc(entries, sizeof(*dq->done));
	if (!dq->done) {
		free(dq);
		return -ENOMEM;
	}
	dq->cap = entries;
	*nfixed = 0;
	*q = dq;
	return 0;
}

static void ds_queue_close(void *q)
{
	struct ds_queue *dq = q;

	free(dq->done);
	free(dq);
}

/* Every I/O completes at submission; reap hands the completions back. */
static int ds_submit(void *q, struct dev_io *const *ios, unsigned n)
{
	struct ds_queue *dq = q;

	DS_CHECK(dq->n + n <= dq->cap, "%u ios submitted with %u of %u slots used",
		 n, dq->n, dq->cap);
	for (unsigned i = 0; i < n; i++) {
		struct dev_io *io = ios[i];

		DS_CHECK(io->dev == 0 && (io->op == DEV_READ || io->op == DEV_WRITE),
			 "io dev %u op %u", io->dev, io->op);
		DS_CHECK(io->off % DS_PAGE == 0 && io->len % DS_PAGE == 0 && io->len > 0 &&
			 (uintptr_t)io->buf % DS_PAGE == 0,
			 "unaligned %s of %u bytes at %" PRIu64 " from %p",
			 io->op == DEV_READ ? "read" : "write", io->len, io->off, io->buf);
		DS_CHECK(io->off <= ds_dev_want && io->len <= ds_dev_want - io->off,
			 "%s of %u bytes at %" PRIu64 " is past the device's %" PRIu64,
			 io->op == DEV_READ ? "read" : "write", io->len, io->off,
			 ds_dev_want);
		struct iovec v[DEV_SEG_MAX];
		unsigned nv = dev_io_iov(io, v);
		uint64_t at = io->off;

		DS_CHECK(nv > 0, "vectored io of %u segments short of its %u bytes",
			 io->nseg, io->len);
		for (unsigned k = 0; k < nv; at += v[k].iov_len, k++) {
			DS_CHECK((uintptr_t)v[k].iov_base % DS_PAGE == 0 &&
				 v[k].iov_len % DS_PAGE == 0, "unaligned segment %u", k);
			if (io->op == DEV_READ)
				memcpy(v[k].iov_base, ds_dev + at, v[k].iov_len);
			else
				memcpy(ds_dev + at, v[k].iov_base, v[k].iov_len);
		}
		io->res = (int32_t)io->len;
		dq->done[(dq->head + dq->n++) % dq->cap] = io;
	}
	return (int)n;
}

static int ds_reap(void *q, struct dev_io **done, unsigned max, unsigned min)
{
	struct ds_queue *dq = q;
	unsigned got = 0;

	DS_CHECK(dq->n >= min, "waiting for %u ios with %u in flight: would hang",
		 min, dq->n);
	while (got < max && dq->n) {
		done[got++] = dq->done[dq->head];
		dq->head = (dq->head + 1) % dq->cap;
		dq->n--;
	}
	return (int)got;
}

/* Vectored ios taken (header and payload of a record in one read). */
static unsigned ds_max_segments(int fd)
{
	(void)fd;
	return 64;
}

static const struct kvt_dev_ops ds_ops = {
	.dev_open = ds_dev_open,
	.dev_close = ds_dev_close,
	.dev_sync = ds_dev_sync,
	.queue_open = ds_queue_open,
	.queue_close = ds_queue_close,
	.submit = ds_submit,
	.reap = ds_reap,
	.max_segments = ds_max_segments,
};

/* --- blocks: content derived from the key ------------------------------------ */

/* 2, 2, 2, 2, 3, 4, 6 and 11 pages with the header: 32 per round of eight */
static const uint32_t ds_sizes[] = { 1, 100, 4095, 4096, 4097, 9000, 20000, 40000 };

struct ds_block {
	kvt_key key;
	uint32_t len;
	uint64_t sum; /* XXH3-64 of the content, as the record header holds it */
	uint8_t *content;
};

static struct ds_block ds_blocks[DS_NKEYS];
static struct kvt_config ds_cfg;
static uint8_t *ds_image[2];  /* 0: closed cleanly, 1: crashed while open */
static uint8_t *ds_work;      /* the damaged copy under test */
static uint8_t *ds_buf;       /* read and write buffer, page aligned */
#define DS_BUF_BYTES (64u << 10)

static uint8_t ds_byte(kvt_key k, uint32_t i)
{
	uint64_t x = (k.lo + i) * 0x9E3779B97F4A7C15ull ^ k.hi;

	return (uint8_t)(x >> 56 ^ x >> 29 ^ i);
}

static void ds_fill(kvt_key k, uint8_t *p, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = ds_byte(k, i);
}

static void ds_block_init(unsigned i)
{
	struct ds_block *b = &ds_blocks[i];

	b->key.lo = 0x6675787a00000000ull + i;
	b->key.hi = 0xd15c5ca7ull * (i + 1);
	b->len = ds_sizes[(i * 5) % (sizeof(ds_sizes) / sizeof(ds_sizes[0]))];
	b->content = malloc(b->len);
	DS_CHECK(b->content != NULL, "no memory");
	ds_fill(b->key, b->content, b->len);
	b->sum = XXH3_64bits(b->content, b->len);
}

/* Puts block i, even ones from page-aligned memory (written directly), odd
 * ones from the heap (staged). Returns the result. */
static int ds_put(struct disk_tier *d, unsigned i)
{
	const struct ds_block *b = &ds_blocks[i];
	const uint8_t *src = b->content;

	if (!(i & 1)) {
		memcpy(ds_buf, b->content, b->len);
		src = ds_buf;
	}
	return disk_put(d, b->key, src, b->len);
}

static void ds_build_put(struct disk_tier *d, unsigned i)
{
	int r = ds_put(d, i);

	DS_CHECK(r == 0, "building the image: put %u: %d %s", i, r, kvt_last_error());
}

static int ds_is_record(const uint8_t *page, const struct ds_block *b)
{
	uint64_t v;

	memcpy(&v, page + REC_KEY_OFF, 8);
	if (v != b->key.lo)
		return 0;
	memcpy(&v, page + REC_KEY_OFF + 8, 8);
	if (v != b->key.hi)
		return 0;
	memcpy(&v, page + REC_SUM_OFF, 8);
	return v == XXH3_64bits(page, REC_SUM_OFF);
}

/* The harness's mirror of the format must match what the tier wrote. */
static void ds_check_layout(const uint8_t *img)
{
	uint64_t v;
	unsigned found = 0;

	memcpy(&v, img + SB_SUM_OFF, 8);
	DS_CHECK(v == XXH3_64bits(img, SB_SUM_OFF),
		 "superblock layout changed: update fuzz_disk_scan.c");
	memcpy(&v, img + CK_OFF + CK_SUM_OFF, 8);
	DS_CHECK(v == XXH3_64bits(img + CK_OFF, CK_SUM_OFF),
		 "checkpoint layout changed: update fuzz_disk_scan.c");
	for (unsigned p = 0; p < DS_PAGES && !found; p++)
		for (unsigned i = 0; i < DS_NBASE; i++)
			if (ds_is_record(img + (size_t)p * DS_PAGE, &ds_blocks[i])) {
				memcpy(&v, img + (size_t)p * DS_PAGE + REC_PSUM_OFF, 8);
				DS_CHECK(v == ds_blocks[i].sum,
					 "record layout changed: update fuzz_disk_scan.c");
				found = 1;
				break;
			}
	DS_CHECK(found, "no record header found: update fuzz_disk_scan.c");
}

static void ds_setup(void)
{
	struct disk_tier *d;
	int r;

	kvt_set_log(NULL, NULL, 0);
	r = config_parse(DS_CONFIG, &ds_cfg);
	DS_CHECK(r == 0, "config: %s", kvt_last_error());
	ds_cfg.region_size = DS_REGION;
	ds_cfg.disk_capacity = DS_DEV_BYTES;
	ds_image[0] = malloc(DS_DEV_BYTES);
	ds_image[1] = malloc(DS_DEV_BYTES);
	ds_work = calloc(1, DS_DEV_BYTES); /* also the device the images are built on */
	ds_dev = ds_work;
	DS_CHECK(ds_image[0] && ds_image[1] && ds_work &&
		 posix_memalign((void **)&ds_buf, DS_PAGE, DS_BUF_BYTES) == 0, "no memory");
	for (unsigned i = 0; i < DS_NKEYS; i++)
		ds_block_init(i);

	/* The clean image: enough puts to wrap the log, one removal, a close. */
	r = disk_open_cfg(&ds_cfg, NULL, 0, &ds_ops, &d);
	DS_CHECK(r == 0, "building the image: open: %s", kvt_last_error());
	for (unsigned i = 0; i < DS_NBASE; i++)
		ds_build_put(d, i);
	DS_CHECK(disk_remove(d, ds_blocks[DS_NBASE - 2].key) == 0, "remove");
	disk_close(d);
	memcpy(ds_image[0], ds_dev, DS_DEV_BYTES);
	ds_check_layout(ds_image[0]);

	/* The crash image: reopened (the checkpoint is now void), more puts. */
	r = disk_open_cfg(&ds_cfg, NULL, 0, &ds_ops, &d);
	DS_CHECK(r == 0, "building the image: reopen: %s", kvt_last_error());
	for (unsigned i = DS_NBASE; i < DS_NBASE + DS_NMORE; i++)
		ds_build_put(d, i);
	memcpy(ds_image[1], ds_dev, DS_DEV_BYTES);
	disk_close(d);
}

/* --- damage ------------------------------------------------------------------ */

struct ds_in {
	const uint8_t *p;
	size_t n;
};

static unsigned ds_take(struct ds_in *in, unsigned bytes)
{
	unsigned v = 0;

	for (unsigned i = 0; i < bytes; i++) {
		v <<= 8;
		if (in->n) {
			v |= *in->p++;
			in->n--;
		}
	}
	return v;
}

static void ds_seal(uint8_t *p, unsigned sum_off)
{
	uint64_t v = XXH3_64bits(p, sum_off);

	memcpy(p + sum_off, &v, 8);
}

/* Applies the damage the input describes to ds_work (a copy of base). */
static void ds_damage(struct ds_in *in, const uint8_t *base)
{
	while (in->n) {
		unsigned op = ds_take(in, 1) % 8;

		switch (op) {
		case 0: { /* overwrite up to 32 bytes anywhere */
			unsigned off = ds_take(in, 3) % DS_DEV_BYTES;
			unsigned len = ds_take(in, 1) % 33;
			for (unsigned i = 0; i < len && off + i < DS_DEV_BYTES; i++)
				ds_work[off + i] = (uint8_t)ds_take(in, 1);
			break;
		}
		case 1: { /* flip one bit */
			unsigned off = ds_take(in, 3) % DS_DEV_BYTES;
			ds_work[off] ^= (uint8_t)(1u << (ds_take(in, 1) % 8));
			break;
		}
		case 2: { /* store a 64-bit field at an 8-byte slot of a header */
			unsigned page = ds_take(in, 2) % DS_PAGES;
			unsigned slot = ds_take(in, 1) % 16;
			uint64_t v = (uint64_t)ds_take(in, 4) << 32 | ds_take(in, 4);
			memcpy(ds_work + (size_t)page * DS_PAGE + slot * 8, &v, 8);
			break;
		}
		case 3: { /* re-seal a record header as a block of the images */
			uint8_t *p = ds_work + (size_t)(ds_take(in, 2) % DS_PAGES) * DS_PAGE;
			const struct ds_block *b = &ds_blocks[ds_take(in, 1) % (DS_NBASE + DS_NMORE)];
			uint64_t len = b->len;
			memcpy(p + REC_KEY_OFF, &b->key.lo, 8);
			memcpy(p + REC_KEY_OFF + 8, &b->key.hi, 8);
			memcpy(p + REC_LEN_OFF, &len, 8);
			memcpy(p + REC_PSUM_OFF, &b->sum, 8);
			ds_seal(p, REC_SUM_OFF);
			break;
		}
		case 4: /* re-seal the superblock */
			ds_seal(ds_work, SB_SUM_OFF);
			break;
		case 5: { /* re-seal the checkpoint: body, then header */
			uint8_t *h = ds_work + CK_OFF;
			uint64_t body, max = ds_cfg.region_size; /* far past the area */
			memcpy(&body, h + CK_BODY_BYTES_OFF, 8);
			if (body <= max) {
				uint64_t sum = XXH3_64bits(h + DS_PAGE, body);
				memcpy(h + CK_BODY_SUM_OFF, &sum, 8);
			}
			ds_seal(h, CK_SUM_OFF);
			break;
		}
		case 6: { /* copy pages of the undamaged image elsewhere (stale data) */
			unsigned src = ds_take(in, 2) % DS_PAGES, dst = ds_take(in, 2) % DS_PAGES;
			unsigned n = ds_take(in, 1) % 64 + 1;
			if (n > DS_PAGES - src)
				n = DS_PAGES - src;
			if (n > DS_PAGES - dst)
				n = DS_PAGES - dst;
			memcpy(ds_work + (size_t)dst * DS_PAGE, base + (size_t)src * DS_PAGE,
			       (size_t)n * DS_PAGE);
			break;
		}
		case 7: { /* zero pages (a torn or lost write) */
			unsigned page = ds_take(in, 2) % DS_PAGES;
			unsigned n = ds_take(in, 1) % 64 + 1;
			if (n > DS_PAGES - page)
				n = DS_PAGES - page;
			memset(ds_work + (size_t)page * DS_PAGE, 0, (size_t)n * DS_PAGE);
			break;
		}
		}
	}
}

/* --- checks ------------------------------------------------------------------- */

/*
 * Reads block i; a hit must be the block's exact bytes. Even blocks land in
 * page-aligned memory (read directly), odd ones one byte off (staged).
 * Returns the result.
 */
static int ds_read(struct disk_tier *d, unsigned i, const char *when)
{
	const struct ds_block *b = &ds_blocks[i];
	uint8_t *dst = ds_buf + (i & 1);
	size_t cap = DS_BUF_BYTES - (i & 1), len = 0;
	int r = disk_get(d, b->key, dst, cap, &len);

	DS_CHECK(r == 0 || r == -ENOENT || r == -EBADMSG || r == -ENOBUFS,
		 "%s: get of block %u returned %d (%s)", when, i, r, kvt_last_error());
	if (r)
		return r;
	DS_CHECK(len == b->len, "%s: block %u read back %zu bytes, wrote %u", when, i,
		 len, b->len);
	if (memcmp(dst, b->content, b->len) != 0)
		for (uint32_t k = 0; k < b->len; k++)
			DS_CHECK(dst[k] == b->content[k],
				 "%s: block %u read back wrong bytes at offset %u", when, i, k);
	return 0;
}

/* Newest first: a hit on an old block near the log's tail is reinserted at
 * its head, which may reclaim the oldest region before its blocks are read. */
static void ds_read_all(struct disk_tier *d, unsigned n, const char *when)
{
	for (unsigned i = n; i-- > 0;)
		ds_read(d, i, when);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	struct ds_in in = { data, size };
	struct disk_tier *d = NULL;
	int r;

	if (!ready) {
		ds_setup();
		ready = 1;
	}
	unsigned mode = ds_take(&in, 1);
	const uint8_t *base = ds_image[mode & 1];
	memcpy(ds_work, base, DS_DEV_BYTES);
	ds_damage(&in, base);

	r = disk_open_cfg(&ds_cfg, NULL, 0, &ds_ops, &d);
	DS_CHECK(r == 0, "open of a damaged tier failed: %d %s (damage must read as "
		 "misses or an empty tier)", r, kvt_last_error());
	ds_read_all(d, DS_NBASE + DS_NMORE, "after recovery");

	/* New puts on the recovered state must not disturb what is there. */
	for (unsigned i = DS_NBASE + DS_NMORE; i < DS_NKEYS; i++) {
		r = ds_put(d, i);
		DS_CHECK(r == 0 || r == -ENOSPC, "put %u after recovery: %d %s", i, r,
			 kvt_last_error());
		if (r == 0)
			DS_CHECK(ds_read(d, i, "just put") == 0,
				 "block %u put after recovery does not read back", i);
	}
	ds_read_all(d, DS_NKEYS, "after new puts");
	disk_close(d);

	/* And what the close wrote must reopen (from its checkpoint) as sound. */
	r = disk_open_cfg(&ds_cfg, NULL, 0, &ds_ops, &d);
	DS_CHECK(r == 0, "reopen after a clean close failed: %d %s", r, kvt_last_error());
	ds_read_all(d, DS_NKEYS, "after reopen");
	disk_close(d);
	return 0;
}
