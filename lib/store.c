/*
 * store.c - the facade: validates every public call, routes it across the
 * tiers (RAM first, then disk, then the key's owner among the peers),
 * keeps store-wide counters and latencies, and owns the evictor thread
 * that brings the RAM tier from its high watermark down to its low one.
 * Asynchronous batches and their workers are batch.c's; the put path,
 * store_put.c's; routing to peers and serving them, store_peer.c's
 * (store_impl.h). Tiers know nothing of
 * each other; only the facade connects them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

static void store_teardown(kvt_store *s);

const struct kvt_dev_ops *store_dev_ops;

/* --- tier glue -------------------------------------------------------------- */

/* A spill written as one disk batch: the RAM tier's blocks, all[0..sp->n),
 * then the put batch's write-arounds; each block of RAM's is finished
 * (its room freed) as soon as it is on disk. */
struct spill_each {
	struct ram_spill *sp;
	kvt_op *all;
};

static void spill_each_fn(void *arg, size_t i)
{
	struct spill_each *e = arg;

	if (i >= e->sp->n)
		return;
	e->sp->ops[i].result = e->all[i].result;
	ram_spill_done(e->sp, i);
}

static void spill_to_disk(void *arg, struct ram_spill *sp)
{
	kvt_store *s = arg;
	size_t n = sp->n + sp->nextra;
	kvt_op *all = sp->nextra ? malloc(n * sizeof(*all)) : sp->ops;

	if (!all) { /* the write-arounds in a batch of their own */
		disk_put_batch_sums(s->disk, sp->ops, sp->n, sp->sums, sp->has_sum, sp->n,
				    NULL, NULL);
		disk_put_batch(s->disk, sp->extra, sp->nextra);
		return;
	}
	if (all != sp->ops) {
		memcpy(all, sp->ops, sp->n * sizeof(*all));
		memcpy(all + sp->n, sp->extra, sp->nextra * sizeof(*all));
	}
	struct spill_each e = { sp, all };
	/* RAM's kept sums cover all[0..sp->n), the write-arounds have none */
	disk_put_batch_sums(s->disk, all, n, sp->sums, sp->has_sum, sp->n, spill_each_fn, &e);
	for (size_t j = 0; j < sp->nextra; j++)
		sp->extra[j].result = all[sp->n + j].result;
	if (all != sp->ops)
		free(all);
}

/* Runs under a RAM shard lock (ram.h): takes the disk tier's lock inside
 * it. The disk tier never calls into the RAM tier, so the order holds. */
static void unspill_from_disk(void *arg, kvt_key key)
{
	kvt_store *s = arg;
	disk_remove(s->disk, key);
}

void store_kick_evictor(kvt_store *s)
{
	pthread_mutex_lock(&s->elock);
	s->ekick = 1;
	pthread_cond_signal(&s->econd);
	pthread_mutex_unlock(&s->elock);
}

static void kick_evictor_cb(void *arg)
{
	store_kick_evictor(arg);
}

struct local_client *store_client(kvt_store *s)
{
	return s->client;
}

int store_directory(kvt_store *s, size_t *len)
{
	*len = 0;
	return s->ram ? ram_dir_memfd(s->ram, len) : -1;
}

void store_note_ram_hits(kvt_store *s, const kvt_key *keys, size_t n)
{
	ram_note_hits(s->ram, keys, n);
}

struct slot_table *store_slots(kvt_store *s)
{
	return s->slots;
}

static void *evictor_main(void *arg)
{
	kvt_store *s = arg;

	pthread_mutex_lock(&s->elock);
	while (!s->estop) {
		if (!s->ekick) {
			struct timespec ts = kvt_deadline_in_ms(100);
			pthread_cond_timedwait(&s->econd, &s->elock, &ts);
			continue;
		}
		s->ekick = 0;
		pthread_mutex_unlock(&s->elock);
		if (ram_above_high(s->ram))
			ram_evict_to_low(s->ram);
		pthread_mutex_lock(&s->elock);
	}
	pthread_mutex_unlock(&s->elock);
	return NULL;
}

/* --- single operations (arguments already checked) ------------------------ */

/*
 * Copies a block loaded from a lower tier or the key's owner into RAM. gen:
 * ram_gen(key) from before the load began (a removal since then wins); sum:
 * the checksum the disk or the peer client verified, which the RAM copy
 * must match: buf is the caller's and may hold other bytes by now.
 */
void store_promote(kvt_store *s, kvt_key key, const void *buf, size_t len,
		   uint64_t gen, const uint64_t *sum)
{
	if (!s->cfg.promote)
		return;
	if (ram_promote(s->ram, key, buf, len, gen, sum) == 0) {
		ctr_add(&s->promotions, 1);
		if (ram_above_high(s->ram))
			store_kick_evictor(s);
	}
}

void store_count_get(kvt_store *s, int rc, int tier_disk)
{
	if (rc == 0)
		ctr_add(tier_disk ? &s->hits_disk : &s->hits_ram, 1);
	else if (rc == -ENOENT)
		ctr_add(&s->misses, 1);
	else if (rc == -EBADMSG) {
		ctr_add(&s->misses, 1);
		ctr_add(&s->checksum_misses, 1);
	} else if (rc != -ENOBUFS)
		ctr_add(&s->errors, 1);
}

/* A get from this node's own tiers; a miss is not counted when a peer is
 * still to be asked (defer). */
static int get_local(kvt_store *s, kvt_key key, void *buf, size_t cap, size_t *len,
		     int defer)
{
	uint64_t gen = ram_gen(s->ram, key), sum = 0;
	int rc = ram_get(s->ram, key, buf, cap, len);

	if (rc == -ENOENT && s->disk) {
		rc = disk_get_sum(s->disk, key, buf, cap, len, &sum);
		if (rc != -ENOENT || !defer)
			store_count_get(s, rc, 1);
		if (rc == 0)
			store_promote(s, key, buf, *len, gen, &sum);
	} else if (rc != -ENOENT || !defer) {
		store_count_get(s, rc, 0);
	}
	return rc;
}

static int get_one(kvt_store *s, kvt_key key, void *buf, size_t cap, size_t *len)
{
	char kb[34];
	int owner = store_owner(s, key);
	int rc = get_local(s, key, buf, cap, len, owner >= 0);

	if (rc == -ENOENT && owner >= 0) {
		rc = store_get_peer(s, owner, key, buf, cap, len);
		/* a member that cannot answer: its keys read as misses */
		if (store_peer_result(rc) != rc) {
			kvt_set_error("key %s is not stored here, and its owner %s "
				      "cannot be asked", kvt_key_str(key, kb),
				      peer_name(s->peer, (unsigned)owner));
			return -ENOENT;
		}
	}
	if (rc == -ENOENT)
		kvt_set_error("key %s is not stored", kvt_key_str(key, kb));
	else if (rc == -ENOBUFS)
		kvt_set_error("block %s is %zu bytes; the buffer holds %zu",
			      kvt_key_str(key, kb), *len, cap);
	return rc;
}

/* --- argument checks ---------------------------------------------------------- */

static int check_get_args(const void *buf, size_t cap, const char *fn)
{
	if (!buf && cap)
		return kvt_fail(-EINVAL, "%s: buf is NULL but cap is %zu", fn, cap);
	return 0;
}

/* --- the local tiers only (lookups and releases; what peers are served) ---- */

uint64_t store_lease_deadline(const kvt_store *s)
{
	return ram_lease_round(kvt_now_ns() + (uint64_t)s->cfg.lease_ms * 1000000ull);
}

/* 1 when the disk tier holds k (leased until deadline with lease). */
static int disk_has(kvt_store *s, kvt_key k, int lease, uint64_t deadline)
{
	return s->disk && (lease ? disk_lease(s->disk, k, deadline)
				 : disk_contains(s->disk, k, NULL)) == 1;
}

/* 1 when RAM or disk holds k (leased until deadline with lease). */
int store_local_has(kvt_store *s, kvt_key k, int lease, uint64_t deadline)
{
	return ram_lookup(s->ram, k, lease, deadline) == 1 || disk_has(s, k, lease, deadline);
}

/*
 * How many of keys[0..n) RAM or disk hold, from the first, as
 * store_local_has would count them: RAM's runs in one call each (their
 * leases counted once), the disk asked only for a key RAM did not give.
 */
static size_t local_prefix(kvt_store *s, const kvt_key *keys, size_t n, int lease,
			   uint64_t deadline)
{
	size_t i = 0;

	while (i < n) {
		i += ram_lookup_prefix(s->ram, keys + i, n - i, lease, deadline);
		if (i == n || !disk_has(s, keys[i], lease, deadline))
			break;
		i++;
	}
	return i;
}

/* Ends the local leases of keys; returns how many were ended. */
int store_release_local(kvt_store *s, const kvt_key *keys, size_t n)
{
	int ended = 0;

	for (size_t i = 0; i < n; i++) {
		int r = ram_release(s->ram, keys[i]);
		if (s->disk)
			r |= disk_release(s->disk, keys[i]);
		ended += r;
	}
	return ended;
}

/* --- public calls ------------------------------------------------------------- */

KVT_API int kvt_open(const char *config_json, kvt_store **out)
{
	kvt_store *s;
	int rc;

	if (!out)
		return kvt_fail(-EINVAL, "kvt_open: out is NULL");
	s = calloc(1, sizeof(*s));
	if (!s)
		return kvt_fail(-ENOMEM, "kvt_open: out of memory");
	rc = config_parse(config_json, &s->cfg);
	if (rc) {
		free(s);
		return rc;
	}
	pthread_mutex_init(&s->qlock, NULL);
	pthread_cond_init(&s->qcond, NULL);
	pthread_mutex_init(&s->elock, NULL);
	kvt_cond_init_monotonic(&s->econd);
	memreg_init(&s->mreg);

	if (s->cfg.attach) {
		rc = local_client_open(s->cfg.attach, s->cfg.attach_timeout_ms, &s->client);
		if (rc)
			goto fail;
		goto workers;
	}
	rc = ram_open_cfg(&s->cfg, s->cfg.ndisk ? spill_to_disk : NULL,
			  s->cfg.ndisk ? unspill_from_disk : NULL, s, &s->ram);
	if (rc)
		goto fail;
	if (s->cfg.ndisk) {
		rc = disk_open_cfg(&s->cfg, ram_arena_base(s->ram),
				   ram_arena_size(s->ram), store_dev_ops, &s->disk);
		if (rc)
			goto fail;
		disk_set_memreg(s->disk, &s->mreg);
	}
	struct slot_opts so = opts_slot(&s->cfg);
	rc = slot_open(&so, s->ram, s->disk, kick_evictor_cb, s, &s->slots);
	if (rc)
		goto fail;
	if (s->cfg.npeers) {
		struct peer_local local = store_peer_local(s);
		struct peer_opts po = opts_peer(&s->cfg);
		po.arena = ram_arena_base(s->ram);
		po.arena_len = ram_arena_size(s->ram);
		rc = peer_open(&po, &local, &s->peer);
		if (rc)
			goto fail;
		store_slot_peers(s);
	}
	if (pthread_create(&s->evictor, NULL, evictor_main, s)) {
		rc = kvt_fail(-ENOMEM, "kvt_open: cannot start the evictor thread");
		goto fail;
	}
	s->evictor_started = 1;
workers:
	rc = batch_workers_start(s);
	if (rc)
		goto fail;
	if (s->cfg.local_socket) {
		struct local_opts lo = opts_local(&s->cfg);
		rc = local_server_open(&lo, s, ram_arena_fd(s->ram), &s->local);
		if (rc)
			goto fail;
	}
	*out = s;
	return 0;
fail: {
		/* Keep the failure's text: teardown must not overwrite it. */
		char msg[512];
		strncpy(msg, kvt_last_error(), sizeof(msg) - 1);
		msg[sizeof(msg) - 1] = 0;
		store_teardown(s);
		kvt_set_error("%s", msg);
		return rc;
	}
}

/* How many of b[0..m), from the most recent back, fit the disk tier
 * packed as its log packs them (disk_record_pages, never across regions)
 * into all its regions but two: those left over for the region being
 * filled and the room the log keeps free. Returns the index of the first
 * that fits (m: none). */
static size_t flush_first(kvt_store *s, const struct ram_block *b, size_t m)
{
	uint64_t region;
	uint32_t regions = disk_regions(s->disk, &region);
	uint64_t used = 0, fill = region;
	size_t first = m;

	while (first > 0) {
		uint64_t pages = disk_record_pages(b[first - 1].len);

		if (pages > region)
			break;
		if (fill + pages > region) { /* the next region */
			if (used + 2 >= regions)
				break;
			used++;
			fill = 0;
		}
		fill += pages;
		first--;
	}
	return first;
}

/*
 * At close, with disk.flush_on_close: writes the RAM tier's blocks that the
 * disk tier lacks to it, least recent first, so that the next open of the
 * same configuration finds them; where they exceed what the disk tier holds,
 * only the most recent that fit (the log would reclaim the others in turn).
 * Each block goes with the checksum RAM kept for it where there is one. A
 * block that cannot be written is lost, as it would have been without the
 * flush, and after a chunk with a device error (-EIO) the flush stops; the
 * counts are logged.
 */
static void flush_ram(kvt_store *s)
{
	struct ram_block *b;
	long n = ram_blocks(s->ram, &b);
	uint64_t t0 = kvt_now_ns();
	size_t m = 0, written = 0, failed = 0;

	if (n < 0)
		kvt_log(KVT_LOG_WARN, "kvt_close: no memory to list RAM's blocks; "
			"those not on disk are lost");
	for (long i = 0; i < n; i++)
		if (!disk_contains(s->disk, b[i].key, NULL))
			b[m++] = b[i];
	size_t first = flush_first(s, b, m);
	for (size_t i = first; i < m; i += CHUNK) {
		kvt_op ops[CHUNK];
		uint64_t sums[CHUNK];
		uint8_t has[CHUNK];
		size_t k = m - i < CHUNK ? m - i : CHUNK;

		for (size_t j = 0; j < k; j++) {
			ops[j] = (kvt_op){ b[i + j].key, (void *)b[i + j].data, b[i + j].len, 0 };
			sums[j] = b[i + j].sum;
			has[j] = (uint8_t)b[i + j].has_sum;
		}
		disk_put_batch_sums(s->disk, ops, k, sums, has, k, NULL, NULL);
		size_t eio = 0;
		for (size_t j = 0; j < k; j++) {
			eio += ops[j].result == -EIO;
			if (ops[j].result)
				failed++;
			else
				written++;
		}
		/* A failing device: each failed write closes its region, and
		 * going on would reclaim regions, dropping blocks it holds, for
		 * writes that fail too. The rest stay unwritten. */
		if (eio) {
			failed += m - i - k;
			break;
		}
	}
	if (written || failed || first)
		kvt_log(failed ? KVT_LOG_WARN : KVT_LOG_INFO, "kvt_close: wrote %zu blocks "
			"from RAM to disk in %.1f ms (%zu failed, %zu left out for want of "
			"room)", written, (double)(kvt_now_ns() - t0) / 1e6, failed, first);
	free(b);
}

static void store_teardown(kvt_store *s)
{
	/* The attached processes first (their threads call the store), then
	 * the workers (their batches ask peers), then the slot loaders (they
	 * load from owners and copy committed blocks to them), then the peer
	 * server (its connection threads serve from the tiers), then the
	 * tiers. */
	local_server_close(s->local);
	s->local = NULL;
	batch_workers_stop(s);
	local_client_close(s->client);
	s->client = NULL;
	slot_close(s->slots);
	peer_close(s->peer);
	s->peer = NULL;
	if (s->evictor_started) {
		pthread_mutex_lock(&s->elock);
		s->estop = 1;
		pthread_cond_signal(&s->econd);
		pthread_mutex_unlock(&s->elock);
		pthread_join(s->evictor, NULL);
	}
	if (s->disk && s->ram && s->cfg.flush_on_close)
		flush_ram(s);
	if (s->disk)
		disk_close(s->disk);
	if (s->ram)
		ram_close(s->ram);
	config_free(&s->cfg);
	pthread_mutex_destroy(&s->qlock);
	pthread_cond_destroy(&s->qcond);
	pthread_mutex_destroy(&s->elock);
	pthread_cond_destroy(&s->econd);
	memreg_destroy(&s->mreg);
	free(s);
}

KVT_API void kvt_close(kvt_store *s)
{
	if (!s)
		return;
	store_teardown(s);
}

KVT_API int kvt_put(kvt_store *s, kvt_key key, const void *data, size_t len)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_put: store is NULL");
	kvt_op op = { key, (void *)data, len, 0 };
	uint64_t t0 = kvt_now_ns();
	int rc = s->client ? local_put_ops(s->client, &op, 1) : store_put_ops_to(s, &op, 1, "kvt_put", 1);
	if (rc != -EINVAL) { /* a put refused for its arguments is not one */
		hist_record(&s->put_lat, kvt_now_ns() - t0);
		ctr_add(&s->puts, 1);
	}
	return rc;
}

KVT_API int kvt_get(kvt_store *s, kvt_key key, void *buf, size_t cap, size_t *len)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_get: store is NULL");
	if (!len)
		return kvt_fail(-EINVAL, "kvt_get: len is NULL");
	int rc = check_get_args(buf, cap, "kvt_get");
	if (rc)
		return rc;
	uint64_t t0 = kvt_now_ns();
	if (s->client) {
		kvt_op op = { key, buf, cap, 0 };
		rc = local_get_ops(s->client, &op, 1);
		if (rc == 0 || rc == -ENOBUFS)
			*len = op.len;
	} else {
		rc = get_one(s, key, buf, cap, len);
	}
	hist_record(&s->get_lat, kvt_now_ns() - t0);
	ctr_add(&s->gets, 1);
	return rc;
}

KVT_API int kvt_lookup(kvt_store *s, const kvt_key *keys, size_t n,
		       unsigned flags, size_t *found)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_lookup: store is NULL");
	if (!found)
		return kvt_fail(-EINVAL, "kvt_lookup: found is NULL");
	if (!keys && n)
		return kvt_fail(-EINVAL, "kvt_lookup: keys is NULL but n is %zu", n);
	if (flags & ~KVT_LEASE)
		return kvt_fail(-EINVAL, "kvt_lookup: unknown flags 0x%x", flags & ~KVT_LEASE);
	if (s->client)
		return local_lookup(s->client, keys, n, flags, found);

	int lease = (flags & KVT_LEASE) != 0;
	uint64_t deadline = lease ? store_lease_deadline(s) : 0;

	/* Absent from RAM, or present but past the RAM lease cap: a disk copy
	 * can still be leased (it holds no RAM); otherwise the prefix ends
	 * here, unless another member owns the key. */
	size_t i = local_prefix(s, keys, n, lease, deadline);
	if (i < n && s->peer && store_owner(s, keys[i]) >= 0)
		i = store_lookup_peers(s, keys, n, i, lease, deadline);
	*found = i;
	kvt_striped_add(&s->lookups, 1);
	kvt_striped_add(&s->lookup_keys, n);
	kvt_striped_add(&s->lookup_found, i);
	return 0;
}

KVT_API int kvt_release(kvt_store *s, const kvt_key *keys, size_t n)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_release: store is NULL");
	if (!keys && n)
		return kvt_fail(-EINVAL, "kvt_release: keys is NULL but n is %zu", n);
	if (n > INT32_MAX)
		return kvt_fail(-EINVAL, "kvt_release: n %zu is too large", n);
	if (s->client)
		return local_release(s->client, keys, n);
	int ended = store_release_local(s, keys, n);
	/* leases the owners hold for this node end too (best effort) */
	if (s->peer && n) {
		int *owner = malloc(sizeof(int) * n);
		uint8_t *taken = calloc(n, 1);
		size_t *idx = malloc(sizeof(size_t) * n);
		kvt_key *ks = malloc(sizeof(*ks) * n);
		for (size_t i = 0; owner && taken && idx && ks && i < n; i++)
			owner[i] = store_owner(s, keys[i]);
		for (size_t a = 0; owner && taken && idx && ks && a < n; a++) {
			size_t k = store_owner_group(owner, taken, n, a, idx);
			for (size_t j = 0; j < k; j++)
				ks[j] = keys[idx[j]];
			if (k)
				peer_release(s->peer, (unsigned)owner[a], ks, k);
		}
		free(owner);
		free(taken);
		free(idx);
		free(ks);
	}
	return ended;
}

KVT_API int kvt_remove(kvt_store *s, kvt_key key)
{
	char kb[34];

	if (!s)
		return kvt_fail(-EINVAL, "kvt_remove: store is NULL");
	if (s->client)
		return local_remove(s->client, key);
	int r1 = ram_remove(s->ram, key);
	int r2 = s->disk ? disk_remove(s->disk, key) : -ENOENT;
	/* Again, now that the disk has forgotten it: a get that read the disk
	 * before can no longer promote it (ram_promote), and one that promoted
	 * it meanwhile has its copy removed here. */
	int r3 = s->disk ? ram_remove(s->ram, key) : -ENOENT;
	if (r1 == 0 || r2 == 0 || r3 == 0)
		return 0;
	return kvt_fail(-ENOENT, "kvt_remove: key %s is not stored", kvt_key_str(key, kb));
}

KVT_API int kvt_arena(kvt_store *s, void **base, size_t *len)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_arena: store is NULL");
	if (s->client) {
		local_arena(s->client, base, len);
		return 0;
	}
	if (base)
		*base = ram_arena_base(s->ram);
	if (len)
		*len = ram_arena_size(s->ram);
	return 0;
}

/* The store's own counters and latencies. */
static void store_stats(kvt_store *s, const struct stat_visitor *v)
{
	stat_int(v, "gets", (int64_t)ctr_get(&s->gets));
	stat_int(v, "puts", (int64_t)ctr_get(&s->puts));
	stat_int(v, "hits_ram", (int64_t)ctr_get(&s->hits_ram));
	stat_int(v, "hits_disk", (int64_t)ctr_get(&s->hits_disk));
	stat_int(v, "hits_peer", (int64_t)ctr_get(&s->hits_peer));
	stat_int(v, "peer_puts", (int64_t)ctr_get(&s->peer_puts));
	stat_int(v, "peer_put_failures", (int64_t)ctr_get(&s->peer_put_failures));
	stat_int(v, "misses", (int64_t)ctr_get(&s->misses));
	stat_int(v, "checksum_misses", (int64_t)ctr_get(&s->checksum_misses));
	stat_int(v, "errors", (int64_t)ctr_get(&s->errors));
	stat_int(v, "refused_puts", (int64_t)ctr_get(&s->refused_puts));
	stat_int(v, "write_arounds", (int64_t)ctr_get(&s->write_arounds));
	stat_int(v, "write_throughs", (int64_t)ctr_get(&s->write_through));
	stat_int(v, "promotions", (int64_t)ctr_get(&s->promotions));
	stat_int(v, "lookups", (int64_t)kvt_striped_get(&s->lookups));
	stat_int(v, "lookup_keys", (int64_t)kvt_striped_get(&s->lookup_keys));
	stat_int(v, "lookup_found", (int64_t)kvt_striped_get(&s->lookup_found));
	stat_int(v, "batches", (int64_t)ctr_get(&s->batches));
	stat_hist(v, "get_latency", &s->get_lat);
	stat_hist(v, "put_latency", &s->put_lat);
}

KVT_API int kvt_stats_json(kvt_store *s, char *buf, size_t cap)
{
	struct stats_doc *doc;
	struct stat_visitor v;

	if (!s)
		return kvt_fail(-EINVAL, "kvt_stats_json: store is NULL");
	if (!buf && cap)
		return kvt_fail(-EINVAL, "kvt_stats_json: buf is NULL but cap is %zu", cap);
	if (s->client) /* the node store's statistics */
		return local_stats_json(s->client, buf, cap);
	doc = stats_doc_new(kvt_version());
	if (!doc)
		return kvt_fail(-ENOMEM, "kvt_stats_json: out of memory");
	v = stats_doc_section(doc, "store");
	store_stats(s, &v);
	v = stats_doc_section(doc, "ram");
	ram_stats(s->ram, &v);
	if (s->disk) {
		v = stats_doc_section(doc, "disk");
		disk_stats(s->disk, &v);
	}
	v = stats_doc_section(doc, "slots");
	slot_stats(s->slots, &v);
	if (s->peer) {
		v = stats_doc_section(doc, "peer");
		peer_stats(s->peer, &v);
	}
	if (s->local) {
		v = stats_doc_section(doc, "local");
		local_server_stats(s->local, &v);
	}
	return stats_doc_render(doc, buf, cap);
}

/* --- batches ------------------------------------------------------------------- */

int store_run_put_batch(kvt_store *s, kvt_op *ops, size_t n)
{
	uint64_t t0 = kvt_now_ns();
	int rc = s->client ? local_put_ops(s->client, ops, n)
			   : store_put_ops_to(s, ops, n, "kvt_put_batch", 1);
	uint64_t dt = n ? (kvt_now_ns() - t0) / n : 0;
	size_t valid = 0;
	for (size_t i = 0; i < n; i++)
		if (ops[i].result != -EINVAL) { /* as kvt_put */
			hist_record(&s->put_lat, dt);
			valid++;
		}
	ctr_add(&s->puts, valid);
	ctr_add(&s->batches, 1);
	if (rc)
		store_put_batch_error(s, ops, n);
	return rc;
}

/*
 * Reorders ops[0..n), n <= CHUNK, and idx[] with them so that the ops whose
 * buffer overlaps another's come last; returns how many come before. Those
 * are loaded one at a time, each promoted (from the tier's copy, or from
 * its buffer where the disk read straight into it) before the next load
 * overwrites it.
 */
size_t store_shared_last(kvt_op *ops, size_t *idx, size_t n)
{
	uint8_t shared[CHUNK];
	kvt_op t[CHUNK];
	size_t ti[CHUNK], a = 0, nalone = 0;

	kvt_ops_shared(ops, n, shared);
	for (size_t i = 0; i < n; i++)
		nalone += !shared[i];
	if (nalone == n)
		return n;
	for (uint8_t pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++)
			if (shared[i] == pass) {
				t[a] = ops[i];
				ti[a++] = idx[i];
			}
	memcpy(ops, t, n * sizeof(*ops));
	memcpy(idx, ti, n * sizeof(*idx));
	return nalone;
}

/* A disk batch's hits to promote as each is verified (disk_get_batch_each):
 * op x of the batch is the chunk's op miss[x], whose generation was gen[]. */
struct promote_each {
	kvt_store *s;
	const kvt_op *dops;
	const size_t *miss;
	const uint64_t *gen;
};

/* Promotes a disk hit from the bytes the tier verified, on the thread that
 * verified them (one of the tier's verifiers, while the batch's other reads
 * are in flight), rather than from the caller's buffer after the batch. */
static void promote_verified(void *arg, size_t x, const void *data, size_t len,
			     uint64_t sum)
{
	const struct promote_each *p = arg;

	store_promote(p->s, p->dops[x].key, data, len, p->gen[p->miss[x]], &sum);
}

/*
 * Loads ops[0..n), n <= CHUNK: RAM first, then every RAM miss of the chunk
 * from disk in one submission, promoting disk hits as they are verified,
 * then what is still missing from the members that own it. Misses whose
 * buffers overlap go to the disk (and to their owner) one at a time, after
 * the others.
 */
static void get_chunk(kvt_store *s, kvt_op *ops, size_t n)
{
	size_t miss[CHUNK], nmiss = 0, pmiss[CHUNK], npmiss = 0;
	size_t cap[CHUNK];
	int owner[CHUNK], powner[CHUNK];
	uint64_t gen[CHUNK];
	kvt_op dops[CHUNK];

	for (size_t i = 0; i < n; i++) {
		int rc = check_get_args(ops[i].buf, ops[i].len, "kvt_get_batch");
		if (rc) {
			ops[i].result = rc;
			continue;
		}
		cap[i] = ops[i].len;
		owner[i] = store_owner(s, ops[i].key);
		gen[i] = ram_gen(s->ram, ops[i].key);
		rc = ram_get(s->ram, ops[i].key, ops[i].buf, cap[i], &ops[i].len);
		if (rc == -ENOENT && s->disk) {
			ops[i].len = cap[i];
			miss[nmiss] = i;
			dops[nmiss++] = ops[i];
			continue;
		}
		if (rc == -ENOENT && owner[i] >= 0) {
			ops[i].len = cap[i];
			powner[npmiss] = owner[i];
			pmiss[npmiss++] = i;
			continue;
		}
		store_count_get(s, rc, 0);
		ops[i].result = rc;
	}
	size_t nalone = store_shared_last(dops, miss, nmiss);
	for (size_t j = 0, m; j < nmiss; j += m) {
		m = j < nalone ? nalone - j : 1;
		struct promote_each pe = { s, dops + j, miss + j, gen };
		disk_get_batch_each(s->disk, dops + j, m, NULL,
				    s->cfg.promote ? promote_verified : NULL, &pe);
		for (size_t x = j; x < j + m; x++) {
			size_t i = miss[x];
			kvt_op *op = &ops[i];

			op->result = dops[x].result;
			op->len = dops[x].len;
			if (op->result == -ENOENT && owner[i] >= 0) {
				op->len = cap[i];
				powner[npmiss] = owner[i];
				pmiss[npmiss++] = i;
				continue;
			}
			store_count_get(s, op->result, 1);
		}
	}
	if (npmiss)
		store_get_from_peers(s, ops, pmiss, powner, gen, npmiss);
}

int store_run_get_batch(kvt_store *s, kvt_op *ops, size_t n)
{
	uint64_t t0 = kvt_now_ns();

	if (s->client)
		local_get_ops(s->client, ops, n);
	for (size_t i = 0; !s->client && i < n; i += CHUNK)
		get_chunk(s, ops + i, n - i < CHUNK ? n - i : CHUNK);
	uint64_t dt = n ? (kvt_now_ns() - t0) / n : 0;
	for (size_t i = 0; i < n; i++)
		hist_record(&s->get_lat, dt);
	ctr_add(&s->gets, n);
	ctr_add(&s->batches, 1);
	int rc = store_first_failure(ops, n);
	if (rc) {
		char kb[34];
		for (size_t i = 0; i < n; i++)
			if (ops[i].result == rc) {
				kvt_set_error("kvt_get_batch: op %zu (key %s): %s", i,
					      kvt_key_str(ops[i].key, kb), kvt_strerror(rc));
				break;
			}
	}
	return rc;
}

KVT_API int kvt_put_batch(kvt_store *s, kvt_op *ops, size_t n)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_put_batch: store is NULL");
	if (!ops && n)
		return kvt_fail(-EINVAL, "kvt_put_batch: ops is NULL but n is %zu", n);
	return store_run_put_batch(s, ops, n);
}

KVT_API int kvt_get_batch(kvt_store *s, kvt_op *ops, size_t n)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_get_batch: store is NULL");
	if (!ops && n)
		return kvt_fail(-EINVAL, "kvt_get_batch: ops is NULL but n is %zu", n);
	return store_run_get_batch(s, ops, n);
}
