/*
 * disk_format.c - the NVMe tier's on-disk format (kvtier-disk(5)): record
 * headers, the superblock of each device, the checkpoint written at clean
 * close, and recovery at open (from the checkpoint, else by walking the
 * record headers of every region).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "disk_impl.h"

/* --- on-disk structures (little-endian, kvtier-disk(5)) --------------------- */

struct sb {
	uint64_t magic;
	uint32_t version;
	uint32_t sb_bytes;
	uint64_t region_size;
	uint64_t dev_bytes;       /* bytes of each device the tier uses */
	uint64_t data_off;        /* first region on every device */
	uint64_t ckpt_off;
	uint64_t ckpt_bytes;
	uint32_t nregions;        /* across all devices */
	uint32_t ndev;
	uint32_t dev_index;
	uint32_t reserved;
	uint64_t instance[2];
	uint64_t created_ns;      /* CLOCK_REALTIME at format time */
	uint64_t checksum;        /* XXH3-64 of the bytes above */
};

struct ck_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nregions;
	uint64_t instance[2];
	uint64_t nentries;
	uint64_t rec_seq;
	uint64_t region_seq;
	uint64_t body_bytes;
	uint64_t body_sum;
	uint64_t checksum;
};

struct ck_region {
	uint64_t seq;
	uint32_t wp;
	uint32_t state;
};

struct ck_ent {
	uint64_t key_lo, key_hi;
	uint64_t page;
	uint32_t len;
	uint32_t reserved;
};

/* --- records ------------------------------------------------------------------ */

void disk_hdr_fill(struct disk_tier *d, struct rec_hdr *h, kvt_key k,
		   uint64_t len, uint64_t seq, uint64_t region_seq, uint64_t sum)
{
	memset(h, 0, PAGE);
	h->magic = REC_MAGIC;
	h->version = FORMAT_VERSION;
	h->hdr_bytes = PAGE;
	h->key_lo = k.lo;
	h->key_hi = k.hi;
	h->len = len;
	h->seq = seq;
	h->region_seq = region_seq;
	h->instance = d->instance[0];
	h->payload_sum = sum;
	h->checksum = XXH3_64bits(h, offsetof(struct rec_hdr, checksum));
}

/* A header is sound: its own checksum, format and instance match. */
int disk_hdr_ok(const struct disk_tier *d, const struct rec_hdr *h)
{
	return h->magic == REC_MAGIC && h->version == FORMAT_VERSION &&
	       h->hdr_bytes == PAGE && h->instance == d->instance[0] &&
	       h->len >= 1 && h->len <= MAX_LEN &&
	       h->checksum == XXH3_64bits(h, offsetof(struct rec_hdr, checksum));
}

/* --- superblock, checkpoint, recovery ------------------------------------------------ */

static void sb_fill(const struct disk_tier *d, struct sb *s, uint32_t dev)
{
	memset(s, 0, PAGE);
	s->magic = SB_MAGIC;
	s->version = FORMAT_VERSION;
	s->sb_bytes = sizeof(*s);
	s->region_size = d->region_size;
	s->dev_bytes = d->dev_bytes;
	s->data_off = d->data_off;
	s->ckpt_off = d->ckpt_off;
	s->ckpt_bytes = d->ckpt_bytes;
	s->nregions = d->nregions;
	s->ndev = d->ndev;
	s->dev_index = dev;
	s->instance[0] = d->instance[0];
	s->instance[1] = d->instance[1];
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	s->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	s->checksum = XXH3_64bits(s, offsetof(struct sb, checksum));
}

/* Why superblock s of device dev cannot be used, or NULL if it can. */
static const char *sb_problem(const struct disk_tier *d, const struct sb *s,
			      uint32_t dev, const struct sb *first)
{
	if (s->magic != SB_MAGIC)
		return "no superblock (new or foreign device)";
	if (s->checksum != XXH3_64bits(s, offsetof(struct sb, checksum)))
		return "superblock checksum mismatch";
	if (s->version != FORMAT_VERSION)
		return "another on-disk format version";
	if (s->sb_bytes != sizeof(*s) || s->region_size != d->region_size ||
	    s->dev_bytes != d->dev_bytes || s->data_off != d->data_off ||
	    s->ckpt_off != d->ckpt_off || s->ckpt_bytes != d->ckpt_bytes ||
	    s->nregions != d->nregions || s->ndev != d->ndev)
		return "another geometry (capacity, region size or device count changed)";
	if (s->dev_index != dev)
		return "devices listed in another order";
	if (first && (s->instance[0] != first->instance[0] ||
		      s->instance[1] != first->instance[1]))
		return "devices belong to different tiers";
	return NULL;
}

static int format_tier(struct disk_tier *d)
{
	void *page = disk_stage_get(d, PAGE);
	int err = 0;

	if (!page)
		return -ENOMEM;
	if (getrandom(d->instance, sizeof(d->instance), 0) != sizeof(d->instance)) {
		d->instance[0] = kvt_now_ns() ^ ((uint64_t)getpid() << 32);
		d->instance[1] = (uint64_t)(uintptr_t)d ^ d->instance[0] * 31;
	}
	if (d->instance[0] == 0)
		d->instance[0] = 1;
	/* Clear the checkpoint first so no older one can pair with the new sb. */
	memset(page, 0, PAGE);
	err = disk_meta_rw(d, DEV_WRITE, 0, page, PAGE, d->ckpt_off);
	for (uint32_t i = 0; i < d->ndev && !err; i++) {
		sb_fill(d, page, i);
		err = disk_meta_rw(d, DEV_WRITE, (uint16_t)i, page, PAGE, 0);
		if (!err)
			err = d->ops->dev_sync(d->fds[i]);
	}
	disk_stage_put(d, page, PAGE);
	if (err)
		return kvt_fail(err, "disk: writing the superblock failed: %s",
				strerror(-err));
	return 0;
}

/* Picks up the newest region as the open one if it has room left. */
static void resume_open_region(struct disk_tier *d)
{
	uint32_t best = NIL;

	for (uint32_t r = 0; r < d->nregions; r++)
		if (d->regions[r].state != R_FREE &&
		    (best == NIL || d->regions[r].seq > d->regions[best].seq))
			best = r;
	d->cur = NIL;
	if (best != NIL && d->regions[best].wp < d->region_pages) {
		d->regions[best].state = R_OPEN;
		d->cur = best;
	}
}

void disk_index_reset(struct disk_tier *d)
{
	memset(d->slots, 0xff, sizeof(*d->slots) * d->nslots);
	d->count = 0;
	d->ents_hwm = 0;
	d->ent_free = NIL;
	d->bytes_used = 0;
	for (uint32_t r = 0; r < d->nregions; r++) {
		memset(&d->regions[r], 0, sizeof(d->regions[r]));
		d->regions[r].head = NIL;
	}
	d->cur = NIL;
	d->rec_seq = d->region_seq = 0;
}

/* Loads the checkpoint; 1 if used, 0 if absent or not valid (why logged). */
static int load_checkpoint(struct disk_tier *d)
{
	struct ck_hdr *h = disk_stage_get(d, PAGE);
	void *body = NULL;
	uint64_t body_bytes = 0;
	const char *why = NULL;
	int used = 0;

	if (!h)
		return 0;
	if (disk_meta_rw(d, DEV_READ, 0, h, PAGE, d->ckpt_off) < 0) {
		why = "cannot read it";
		goto out;
	}
	if (h->magic != CK_MAGIC) {
		why = "none (crash or first open)";
		goto out;
	}
	if (h->checksum != XXH3_64bits(h, offsetof(struct ck_hdr, checksum)) ||
	    h->version != FORMAT_VERSION || h->nregions != d->nregions ||
	    h->instance[0] != d->instance[0] || h->instance[1] != d->instance[1] ||
	    h->nentries > d->max_ents ||
	    h->body_bytes != d->nregions * sizeof(struct ck_region) +
			     h->nentries * sizeof(struct ck_ent) ||
	    pad_up(h->body_bytes, PAGE) + PAGE > d->ckpt_bytes) {
		why = "header does not match this tier";
		goto out;
	}
	body_bytes = pad_up(h->body_bytes, PAGE);
	if (body_bytes) {
		body = disk_stage_get(d, body_bytes);
		if (!body || disk_meta_rw(d, DEV_READ, 0, body, body_bytes, d->ckpt_off + PAGE) < 0) {
			why = "cannot read its body";
			goto out;
		}
	}
	if (kvt_checksum(body, h->body_bytes) != h->body_sum) {
		why = "body checksum mismatch";
		goto out;
	}
	const struct ck_region *cr = body;
	const struct ck_ent *ce = (const struct ck_ent *)(cr + d->nregions);
	for (uint32_t r = 0; r < d->nregions; r++) {
		if (cr[r].wp > d->region_pages || cr[r].state > R_SEALED ||
		    cr[r].seq > h->region_seq) {
			why = "region table out of range";
			goto out;
		}
		d->regions[r].seq = cr[r].seq;
		d->regions[r].wp = cr[r].wp;
		d->regions[r].state = cr[r].state == R_FREE ? R_FREE : R_SEALED;
	}
	for (uint64_t i = 0; i < h->nentries; i++) {
		uint64_t page = ce[i].page, len = ce[i].len;
		kvt_key k = { ce[i].key_lo, ce[i].key_hi };
		uint32_t r = (uint32_t)(page / d->region_pages);

		if (len == 0 || len > MAX_LEN || r >= d->nregions ||
		    d->regions[r].state == R_FREE ||
		    page % d->region_pages + rec_pages(len) > d->regions[r].wp ||
		    disk_idx_find(d, k) != NIL || disk_ent_add(d, k, page, len) < 0) {
			why = "an entry is out of range or repeated";
			goto out;
		}
	}
	d->rec_seq = h->rec_seq;
	d->region_seq = h->region_seq;
	used = 1;
out:
	if (!used) {
		disk_index_reset(d);
		kvt_log(KVT_LOG_INFO, "disk: checkpoint not used: %s; scanning regions",
			why ? why : "unknown");
	}
	disk_stage_put(d, body, body_bytes);
	disk_stage_put(d, h, PAGE);
	return used;
}

/* --- a device cut short while the tier was closed -------------------------------- */

/* Whether the record of len bytes at global page reaches past the bytes its
 * device held at open (a file cut short: zeros there now). */
static int rec_cut(const struct disk_tier *d, uint64_t page, uint64_t len)
{
	uint16_t dev;
	uint64_t off;

	page_addr(d, page, &dev, &off);
	return off + (uint64_t)rec_pages(len) * PAGE > d->held[dev];
}

static int tier_cut(const struct disk_tier *d)
{
	for (uint32_t i = 0; i < d->ndev; i++)
		if (d->held[i] < d->dev_bytes)
			return 1;
	return 0;
}

/* The blocks a checkpoint listed whose records a cut took, and their devices. */
struct cut_loss {
	kvt_key *keys;
	uint16_t *dev;
	uint64_t n;
	int known;                /* a checkpoint listed what was stored */
};

/*
 * With a device cut short, a checkpoint (loaded: from_ckpt) is not used:
 * the write pointers of its regions lie past the cut, where records that
 * are gone would stay half there. Notes the blocks it lists whose records
 * the cut took (to count, after the region scan that follows, those the
 * scan finds nowhere else) and empties the index for that scan.
 */
static int cut_note(struct disk_tier *d, int from_ckpt, struct cut_loss *c)
{
	memset(c, 0, sizeof(*c));
	c->known = from_ckpt;
	if (from_ckpt && d->count) {
		c->keys = malloc(sizeof(*c->keys) * d->count);
		c->dev = malloc(sizeof(*c->dev) * d->count);
		if (!c->keys || !c->dev)
			return -ENOMEM;
	}
	for (uint32_t i = 0; from_ckpt && i < d->nslots; i++) {
		uint32_t e = d->slots[i];
		uint64_t w = e == NIL ? 0 : d->ents[e].w, off;

		if (e == NIL || !rec_cut(d, w_page(w), w_len(w)))
			continue;
		c->keys[c->n] = (kvt_key){ d->ents[e].lo, d->ents[e].hi };
		page_addr(d, w_page(w), &c->dev[c->n++], &off);
	}
	disk_index_reset(d);
	return 0;
}

/* Logs, once for each device cut short, what it held and what was lost. */
static void cut_report(struct disk_tier *d, const struct cut_loss *c)
{
	for (uint32_t i = 0; i < d->ndev; i++) {
		uint64_t lost = 0;
		char what[96];

		if (d->held[i] >= d->dev_bytes)
			continue;
		for (uint64_t j = 0; j < c->n; j++)
			lost += c->dev[j] == i && disk_idx_find(d, c->keys[j]) == NIL;
		if (c->known)
			snprintf(what, sizeof(what), "%llu blocks stored past its end are lost",
				 (unsigned long long)lost);
		else
			snprintf(what, sizeof(what), "the blocks stored past its end are "
				 "lost (no checkpoint counts them)");
		kvt_log(KVT_LOG_WARN, "disk: %s held only %llu of its %llu bytes (cut "
			"short while closed?): %s; it is extended back to its size, and "
			"the blocks before the cut are kept", d->paths[i],
			(unsigned long long)d->held[i], (unsigned long long)d->dev_bytes, what);
	}
}

/*
 * Zeros the header page of each record a region scan found cut short
 * (live[r] 2: the record at wp[r]): a later scan, of the device at its
 * full size again, stops there too instead of finding a block whose
 * payload is gone. Each device written is synced, so that no power cut
 * after the open can undo the zeroing.
 */
static int cut_heads_clear(struct disk_tier *d, const uint32_t *wp, const uint8_t *live)
{
	void *page = NULL;
	uint64_t wrote = 0; /* bit i: device i written (at most 64 devices) */
	int err = 0;

	for (uint32_t r = 0; r < d->nregions && !err; r++) {
		uint16_t dev;
		uint64_t off;

		if (live[r] != 2)
			continue;
		if (!page && !(page = disk_stage_get(d, PAGE)))
			return -ENOMEM;
		memset(page, 0, PAGE);
		page_addr(d, (uint64_t)r * d->region_pages + wp[r], &dev, &off);
		err = disk_meta_rw(d, DEV_WRITE, dev, page, PAGE, off);
		wrote |= 1ull << dev;
	}
	disk_stage_put(d, page, PAGE);
	for (uint32_t i = 0; i < d->ndev && !err; i++)
		if (wrote >> i & 1)
			err = d->ops->dev_sync(d->fds[i]);
	return err;
}

/* Invalidates the checkpoint so that a crash after this open cannot reuse it. */
static int kill_checkpoint(struct disk_tier *d)
{
	void *page = disk_stage_get(d, PAGE);
	int err;

	if (!page)
		return -ENOMEM;
	memset(page, 0, PAGE);
	err = disk_meta_rw(d, DEV_WRITE, 0, page, PAGE, d->ckpt_off);
	if (!err)
		err = d->ops->dev_sync(d->fds[0]);
	disk_stage_put(d, page, PAGE);
	return err;
}

/*
 * Rebuilds the index by walking each region's chain of record headers from
 * its start, all regions in parallel (one header read per region per round).
 * A region's walk ends at the first header that is not sound, belongs to
 * another generation of the region, or would run past the region's end
 * or past what a device cut short held (that record's header is zeroed).
 */
static int scan_regions(struct disk_tier *d)
{
	uint32_t nr = d->nregions, batch = 64;
	uint32_t *wp = calloc(nr, sizeof(*wp));
	uint8_t *live = malloc(nr);
	struct dev_io *io = calloc(batch, sizeof(*io));
	struct dev_io **p = calloc(batch, sizeof(*p));
	uint32_t *who = calloc(batch, sizeof(*who));
	char *bufs = disk_stage_get(d, (size_t)batch * PAGE);
	uint64_t records = 0;
	int err = 0;

	if (!wp || !live || !io || !p || !who || !bufs) {
		err = -ENOMEM;
		goto out;
	}
	memset(live, 1, nr);
	for (uint32_t active = nr; active;) {
		uint32_t n = 0;

		active = 0;
		for (uint32_t r = 0; r < nr; r++) {
			if (live[r] != 1)
				continue;
			active++;
			if (n == batch)
				continue;
			uint16_t dev;
			uint64_t off;

			page_addr(d, (uint64_t)r * d->region_pages + wp[r], &dev, &off);
			disk_io_set(&io[n], DEV_READ, dev, off, bufs + (size_t)n * PAGE, PAGE, -1);
			p[n] = &io[n];
			who[n++] = r;
		}
		if (!n)
			break;
		disk_run(d, p, n, NULL);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t r = who[i];
			struct region *rg = &d->regions[r];
			const struct rec_hdr *h = (const void *)(bufs + (size_t)i * PAGE);
			uint32_t pages;

			if (io[i].res < 0 || !disk_hdr_ok(d, h) || h->region_seq == 0 ||
			    (rg->seq && h->region_seq != rg->seq) ||
			    (pages = rec_pages(h->len)) > d->region_pages - wp[r]) {
				live[r] = 0;
				continue;
			}
			uint64_t page = (uint64_t)r * d->region_pages + wp[r];
			if (rec_cut(d, page, h->len)) {
				live[r] = 2;
				continue;
			}
			rg->seq = h->region_seq;
			kvt_key k = { h->key_lo, h->key_hi };
			uint32_t old = disk_idx_find(d, k);
			int newer = old == NIL ||
				    d->regions[page_region(d, w_page(d->ents[old].w))].seq <=
				    rg->seq;
			if (old != NIL && newer)
				disk_ent_drop(d, old);
			if (newer && disk_ent_add(d, k, page, h->len) < 0) {
				live[r] = 0;
				continue;
			}
			records++;
			if (h->seq > d->rec_seq)
				d->rec_seq = h->seq;
			if (h->region_seq > d->region_seq)
				d->region_seq = h->region_seq;
			wp[r] += pages;
			if (wp[r] >= d->region_pages)
				live[r] = 0;
		}
	}
	for (uint32_t r = 0; r < nr; r++) {
		d->regions[r].wp = wp[r];
		d->regions[r].state = wp[r] ? R_SEALED : R_FREE;
		if (!wp[r])
			d->regions[r].seq = 0;
	}
	kvt_log(KVT_LOG_INFO, "disk: scan found %llu records, %u blocks indexed",
		(unsigned long long)records, d->count);
	err = cut_heads_clear(d, wp, live);
out:
	disk_stage_put(d, bufs, (size_t)batch * PAGE);
	free(wp);
	free(live);
	free(io);
	free(p);
	free(who);
	return err;
}

int disk_write_checkpoint(struct disk_tier *d)
{
	uint64_t body_bytes = d->nregions * sizeof(struct ck_region) +
			      (uint64_t)d->count * sizeof(struct ck_ent);
	uint64_t padded = pad_up(body_bytes, PAGE);
	struct ck_hdr *h = disk_stage_get(d, PAGE);
	void *body = padded ? disk_stage_get(d, padded) : NULL;
	int err = 0;

	if (!h || (padded && !body) || padded + PAGE > d->ckpt_bytes) {
		err = h && body ? -ENOSPC : -ENOMEM;
		goto out;
	}
	memset(body, 0, padded);
	struct ck_region *cr = body;
	struct ck_ent *ce = (struct ck_ent *)(cr + d->nregions);
	for (uint32_t r = 0; r < d->nregions; r++) {
		cr[r].seq = d->regions[r].seq;
		cr[r].wp = d->regions[r].wp;
		cr[r].state = d->regions[r].state == R_FREE ? R_FREE : R_SEALED;
	}
	uint64_t n = 0;
	for (uint32_t i = 0; i < d->nslots; i++) {
		uint32_t e = d->slots[i];

		if (e == NIL)
			continue;
		ce[n].key_lo = d->ents[e].lo;
		ce[n].key_hi = d->ents[e].hi;
		ce[n].page = w_page(d->ents[e].w);
		ce[n].len = (uint32_t)w_len(d->ents[e].w);
		n++;
	}
	memset(h, 0, PAGE);
	h->magic = CK_MAGIC;
	h->version = FORMAT_VERSION;
	h->nregions = d->nregions;
	h->instance[0] = d->instance[0];
	h->instance[1] = d->instance[1];
	h->nentries = n;
	h->rec_seq = d->rec_seq;
	h->region_seq = d->region_seq;
	h->body_bytes = body_bytes;
	h->body_sum = kvt_checksum(body, body_bytes);
	h->checksum = XXH3_64bits(h, offsetof(struct ck_hdr, checksum));
	/* Data first, then the body, then the header that makes it valid. */
	for (unsigned i = 0; i < d->ndev && !err; i++)
		err = d->ops->dev_sync(d->fds[i]);
	if (!err && padded)
		err = disk_meta_rw(d, DEV_WRITE, 0, body, padded, d->ckpt_off + PAGE);
	if (!err)
		err = d->ops->dev_sync(d->fds[0]);
	if (!err)
		err = disk_meta_rw(d, DEV_WRITE, 0, h, PAGE, d->ckpt_off);
	if (!err)
		err = d->ops->dev_sync(d->fds[0]);
out:
	if (err)
		kvt_log(KVT_LOG_WARN, "disk: checkpoint not written (%s); the next "
			"open will scan regions", strerror(-err));
	disk_stage_put(d, body, padded);
	disk_stage_put(d, h, PAGE);
	return err;
}

/*
 * Rebuilds the index of a tier whose superblocks agree with the config:
 * from the checkpoint, else (or where a device was cut short) by a region
 * scan; then invalidates the checkpoint and resumes the open region.
 */
static int recover_index(struct disk_tier *d)
{
	uint64_t t0 = kvt_now_ns();
	int from_ckpt = load_checkpoint(d), cut = tier_cut(d), err = 0;
	struct cut_loss c;

	if (cut)
		err = cut_note(d, from_ckpt, &c);
	if (!err && (cut || !from_ckpt))
		err = scan_regions(d);
	if (!err && cut)
		cut_report(d, &c);
	if (cut) {
		free(c.keys);
		free(c.dev);
	}
	if (!err)
		err = kill_checkpoint(d);
	if (!err)
		kvt_log(KVT_LOG_INFO, "disk: recovered %u blocks from %s in %.1f ms",
			d->count, from_ckpt && !cut ? "the checkpoint" : "a region scan",
			(double)(kvt_now_ns() - t0) / 1e6);
	resume_open_region(d);
	return err;
}

/* Reads every superblock; formats the tier unless all agree with the config. */
int disk_recover(struct disk_tier *d)
{
	struct sb *s = disk_stage_get(d, (size_t)d->ndev * PAGE);
	const char *why = NULL;
	uint32_t bad = 0;
	int fresh = 1, later = -1, err = 0;

	if (!s)
		return -ENOMEM;
	/* Past the first file with a problem, only whether a file still holds
	 * the tier's superblock is asked (later): a tier whose first files are
	 * new or empty but whose later ones held blocks is not a new tier. An
	 * unreadable superblock there counts as none. */
	for (uint32_t i = 0; i < d->ndev; i++) {
		struct sb *si = (struct sb *)((char *)s + (size_t)i * PAGE);

		err = disk_meta_rw(d, DEV_READ, (uint16_t)i, si, PAGE, 0);
		if (err && !why) {
			disk_stage_put(d, s, (size_t)d->ndev * PAGE);
			return kvt_fail(err, "disk: reading the superblock of %s: %s",
					d->paths[i], strerror(-err));
		}
		if (why) {
			if (!err && later < 0 && si->magic == SB_MAGIC)
				later = (int)i;
			continue;
		}
		if (si->magic == SB_MAGIC)
			fresh = 0;
		why = sb_problem(d, si, i, i ? s : NULL);
		bad = i;
	}
	err = 0;
	if (why) {
		char cut[4200] = "";
		if (d->held[bad] > 0 && d->held[bad] < d->dev_bytes)
			snprintf(cut, sizeof(cut), " (the file held only %llu of its %llu "
				 "bytes: cut short while closed?)",
				 (unsigned long long)d->held[bad],
				 (unsigned long long)d->dev_bytes);
		else if (fresh && later >= 0)
			snprintf(cut, sizeof(cut), " (but %s holds this tier's superblock: "
				 "the blocks of every file are dropped)", d->paths[later]);
		if (!fresh || cut[0])
			kvt_log(KVT_LOG_WARN, "disk: %s: %s%s; starting with an empty tier",
				d->paths[bad], why, cut);
		else
			kvt_log(KVT_LOG_INFO, "disk: formatting new tier on %s", d->paths[0]);
		err = format_tier(d);
	} else {
		d->instance[0] = s->instance[0];
		d->instance[1] = s->instance[1];
		err = recover_index(d);
	}
	disk_stage_put(d, s, (size_t)d->ndev * PAGE);
	d->nfree = 0;
	for (uint32_t r = 0; r < d->nregions; r++)
		d->nfree += d->regions[r].state == R_FREE;
	if (err)
		return kvt_fail(err, "disk: recovery failed: %s", strerror(-err));
	return 0;
}

/* --- geometry ------------------------------------------------------------------------ */

int disk_geometry(struct disk_tier *d, const struct disk_opts *o)
{
	uint64_t rs = o->region_size;

	if (rs < REGION_MIN_BYTES || rs % PAGE || rs > (4ull << 30))
		return kvt_fail(-EINVAL, "disk.region_size: %llu is not a multiple of "
				"4096 between 64 KiB and 4 GiB", (unsigned long long)rs);
	if (o->queue_depth == 0 || o->queue_depth > 4096)
		return kvt_fail(-EINVAL, "disk.queue_depth: %u not in 1..4096",
				o->queue_depth);
	d->region_size = rs;
	d->region_pages = (uint32_t)(rs / PAGE);
	d->qd = o->queue_depth;
	d->dev_bytes = o->capacity / d->ndev / PAGE * PAGE;
	/* The checkpoint holds 16 bytes per region and 32 per block (a block
	 * takes at least two pages), so its area is sized from the capacity. */
	uint64_t max_regions = d->dev_bytes / rs * d->ndev;
	uint64_t max_ents = max_regions * (d->region_pages / 2);
	d->ckpt_off = PAGE;
	d->ckpt_bytes = pad_up(PAGE + max_regions * sizeof(struct ck_region) +
			       max_ents * sizeof(struct ck_ent), PAGE);
	d->data_off = pad_up(d->ckpt_off + d->ckpt_bytes, DATA_ALIGN);
	uint64_t per_dev = d->dev_bytes > d->data_off ?
			   (d->dev_bytes - d->data_off) / rs : 0;
	uint64_t nr = per_dev * d->ndev;
	if (per_dev == 0 || nr < 2)
		return kvt_fail(-EINVAL, "disk.capacity: %llu bytes over %u device(s) "
				"holds fewer than two regions of %llu bytes (plus "
				"%llu bytes of metadata per device)",
				(unsigned long long)o->capacity, d->ndev,
				(unsigned long long)rs, (unsigned long long)d->data_off);
	if (nr * d->region_pages >= (1ull << PAGE_BITS) || nr > UINT32_MAX / 2)
		return kvt_fail(-EINVAL, "disk.capacity: %llu bytes is more than the "
				"64 TiB one tier addresses",
				(unsigned long long)o->capacity);
	d->nregions = (uint32_t)nr;
	uint64_t me = nr * (d->region_pages / 2);
	d->max_ents = me > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)me;
	return 0;
}
