/*
 * replay_setup.c - a run's life outside its events: the options checked
 * against the workload, the arrays allocated, the namespace, the store
 * nodes opened (each with its JSON config and disk file; ports for a peer
 * group), their statistics gathered, and everything closed and removed.
 *
 * Knows nothing about the event order or the model's figures.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "kvtier.h"
#include "lru.h"
#include "replay.h"
#include "replay_impl.h"

/*
 * Builds the store's JSON config for o (scaled capacities and lease); with
 * nodes > 1, node `node` of a peer group whose member i ("n<i>") listens on
 * 127.0.0.1:ports[i].
 */
static char *store_config(const struct replay_opts *o, const char *disk_path, uint32_t node,
			  uint32_t nodes, const int *ports)
{
	json_t *root = json_object(), *ram = json_object(), *disk;
	double lease = (double)o->lease_ms;
	char *text;

	if (o->speed > 0)
		lease /= o->speed;
	if (lease < 1)
		lease = 1;
	json_object_set_new(ram, "capacity",
			    json_integer((json_int_t)replay_block_bytes(o, o->ram_tokens)));
	json_object_set_new(ram, "lease_ms", json_integer((json_int_t)llround(lease)));
	if (o->policy == POL_REFUSE) {
		/* Mooncake Store: no cap on leased bytes, and a RAM tier that
		 * holds only live leases refuses the put */
		json_object_set_new(ram, "refuse_when_leased", json_true());
		json_object_set_new(ram, "lease_cap", json_real(1.0));
	}
	json_object_set_new(root, "ram", ram);
	json_object_set_new(root, "threads", json_integer(o->threads));
	if (disk_path && o->policy != POL_RAM_ONLY) {
		disk = json_object();
		json_object_set_new(disk, "path", json_string(disk_path));
		json_object_set_new(disk, "capacity",
				    json_integer((json_int_t)replay_block_bytes(o, o->disk_tokens)));
		json_object_set_new(root, "disk", disk);
	}
	if (nodes > 1) {
		json_t *peers = json_object(), *members = json_array();
		char name[16], addr[32];
		uint32_t i;

		for (i = 0; i < nodes; i++) {
			json_t *m = json_object();
			snprintf(name, sizeof(name), "n%u", i);
			snprintf(addr, sizeof(addr), "127.0.0.1:%d", ports[i]);
			json_object_set_new(m, "name", json_string(name));
			json_object_set_new(m, "addr", json_string(addr));
			json_array_append_new(members, m);
		}
		snprintf(name, sizeof(name), "n%u", node);
		json_object_set_new(peers, "self", json_string(name));
		json_object_set_new(peers, "members", members);
		json_object_set_new(peers, "request_timeout_ms", json_integer(5000));
		json_object_set_new(root, "peers", peers);
	}
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return text;
}

void replay_result_free(struct replay_result *r)
{
	if (r && r->store_stats) {
		json_decref(r->store_stats);
		r->store_stats = NULL;
	}
}

static void run_free(struct run *r)
{
	uint32_t i;

	if (r->ep) {
		for (i = 0; i < r->o->endpoints; i++) {
			lru_free(&r->ep[i].gpu);
			free(r->ep[i].q);
			free(r->ep[i].dec);
			free(r->ep[i].dleft);
		}
		free(r->ep);
	}
	free(r->arrive);
	free(r->done_t);
	free(r->compute_s);
	free(r->ttft);
	free(r->ep_of);
	free(r->put_from);
	if (r->pins)
		for (i = 0; i < r->w->ncalls; i++)
			free(r->pins[i]);
	free(r->pins);
	free(r->npins);
	free(r->held);
	free(r->pref);
	free(r->next_turn);
	free(r->issued);
	free(r->tokens);
	free(r->keys);
	free(r->skeys);
	free(r->ktok);
	free(r->stok);
	free(r->trip);
	free(r->ops);
	free(r->buf);
	free(r->wq);
	free(r->wstamp);
	free(r->h.v);
	bench_samples_free(&r->load_us);
	bench_samples_free(&r->reuse_s);
	lru_free(&r->bound);
}

/* Checks the options against the workload before anything is allocated. */
int rp_run_check(struct run *r)
{
	const struct replay_opts *o = r->o;
	const struct wl *w = r->w;
	uint32_t nodes = o->nodes ? o->nodes : 1;
	size_t n = w->ncalls;

	if (o->endpoints == 0 || o->gpu_block == 0 || o->chunk_tokens < o->gpu_block ||
	    o->chunk_tokens % o->gpu_block || !(o->prefill_rate > 0) || !(o->decode_rate > 0) ||
	    !(o->decode_growth >= 0) ||
	    o->scale == 0 || o->kv_bytes_per_token == 0 || !(o->charge_scale >= 0))
		return rp_fail(r, -EINVAL, "bad engine options (endpoints, blocks, rates or scale)");
	if (nodes > REPLAY_NODES_MAX)
		return rp_fail(r, -EINVAL, "bad nodes %u (1 to %u)", nodes, REPLAY_NODES_MAX);
	if (n == 0)
		return rp_fail(r, -EINVAL, "the workload has no calls");
	if (n > UINT32_MAX - 1)
		return rp_fail(r, -E2BIG, "too many calls");
	if (o->sched == SCHED_ARRIVAL && !w->timed)
		return rp_fail(r, -EINVAL, "arrival scheduling needs a trace with timestamps");
	if (o->sched != SCHED_ARRIVAL && w->nsessions == 0)
		return rp_fail(r, -EINVAL, "this workload has no sessions: schedule it by arrival time");
	return 0;
}

/* The per-call, per-session and scratch arrays (scratch sized for the
 * longest call) and the caches: the endpoints' and the unbounded one. */
int rp_run_alloc(struct run *r)
{
	const struct replay_opts *o = r->o;
	const struct wl *w = r->w;
	size_t i, maxp = 0, maxn = 0, n = w->ncalls;

	for (i = 0; i < n; i++) {
		if (w->calls[i].prompt_tokens > maxp)
			maxp = w->calls[i].prompt_tokens;
		if (w->calls[i].n > maxn)
			maxn = w->calls[i].n;
	}
	r->maxg = w->kind == WL_BLOCKS ? maxn : maxp / o->gpu_block + 1;
	r->arrive = calloc(n, sizeof(*r->arrive));
	r->done_t = calloc(n, sizeof(*r->done_t));
	r->compute_s = calloc(n, sizeof(*r->compute_s));
	r->ttft = calloc(n, sizeof(*r->ttft));
	r->ep_of = calloc(n, sizeof(*r->ep_of));
	r->put_from = calloc(n, sizeof(*r->put_from));
	r->pins = calloc(n, sizeof(*r->pins));
	r->npins = calloc(n, sizeof(*r->npins));
	r->held = calloc(n, sizeof(*r->held));
	r->pref = malloc((w->nsessions + 1) * sizeof(*r->pref));
	r->next_turn = calloc(w->nsessions + 1, sizeof(*r->next_turn));
	r->issued = calloc(w->nsessions + 1, sizeof(*r->issued));
	r->wq = calloc(w->nsessions + 1, sizeof(*r->wq));
	r->wstamp = calloc(w->nsessions + 1, sizeof(*r->wstamp));
	r->tokens = malloc((maxp + 1) * sizeof(*r->tokens));
	r->keys = malloc((r->maxg + 1) * sizeof(*r->keys));
	r->skeys = malloc((r->maxg + 1) * sizeof(*r->skeys));
	r->ktok = malloc((r->maxg + 1) * sizeof(*r->ktok));
	r->stok = malloc((r->maxg + 1) * sizeof(*r->stok));
	r->trip = malloc((3 * maxn + 3) * sizeof(*r->trip));
	r->ops = malloc((r->maxg + 1) * sizeof(*r->ops));
	r->ep = calloc(o->endpoints, sizeof(*r->ep));
	if (!r->arrive || !r->done_t || !r->compute_s || !r->ttft || !r->ep_of || !r->put_from ||
	    !r->pins || !r->npins || !r->held || !r->pref || !r->next_turn || !r->issued || !r->wq || !r->wstamp || !r->tokens ||
	    !r->keys || !r->skeys || !r->ktok || !r->stok || !r->trip || !r->ops || !r->ep ||
	    lru_init(&r->bound, UINT64_MAX))
		return rp_fail(r, -ENOMEM, "out of memory");
	for (i = 0; i <= w->nsessions; i++)
		r->pref[i] = -1;
	for (i = 0; i < n; i++)
		r->arrive[i] = r->done_t[i] = -1; /* not arrived, not done */
	for (i = 0; i < o->endpoints; i++)
		if (lru_init(&r->ep[i].gpu, o->gpu_tokens))
			return rp_fail(r, -ENOMEM, "out of memory");
	return 0;
}

/* The namespace every key of the run is chained from. */
void rp_run_root(struct run *r)
{
	const struct wl *w = r->w;
	kvt_namespace ns;

	memset(&ns, 0, sizeof(ns));
	ns.model = r->o->model;
	ns.tokenizer = w->kind == WL_BLOCKS ? "mooncake-trace-hash-ids" : "kvbench-synthetic";
	ns.kv_format = "bf16/NHD";
	ns.tp_size = 1;
	ns.pp_size = 1;
	ns.block_tokens = w->kind == WL_BLOCKS ? w->block_tokens : r->o->gpu_block;
	r->root = kvt_ns_root(&ns);
}

/* One attempt to open the nodes, each with its config (listening on the
 * ports held, when more than one); the ports are released once the nodes
 * listen. On a failure the nodes opened are closed again. */
static int nodes_open(struct run *r, const struct run_files *f, int with_disk,
		      struct common_ports *held)
{
	uint32_t nodes = r->o->nodes ? r->o->nodes : 1, j;
	char *cfg = NULL;
	int rc = 0;

	for (j = 0; j < nodes; j++) {
		free(cfg);
		cfg = store_config(r->o, with_disk ? f->path[j] : NULL, j, nodes, held->port);
		if (!cfg)
			return rp_fail(r, -ENOMEM, "out of memory");
		rc = kvt_open(cfg, &r->st[j]);
		if (rc < 0)
			break;
		r->nst = j + 1;
	}
	common_ports_release(held); /* the nodes listen now */
	if (rc < 0) {
		rc = rp_fail(r, rc, "kvt_open(%s): %s", cfg, kvt_last_error());
		while (r->nst > 0) {
			kvt_close(r->st[--r->nst]);
			r->st[r->nst] = NULL;
		}
	}
	free(cfg);
	return rc < 0 ? rc : 0;
}

/* Opens the store's nodes, each with its own disk file when the policy
 * has a disk tier. */
int rp_stores_open(struct run *r, struct run_files *f)
{
	const struct replay_opts *o = r->o;
	uint32_t nodes = o->nodes ? o->nodes : 1, j;
	int with_disk = o->policy != POL_RAM_ONLY && o->disk_tokens > 0, attempt, rc = 0;
	struct common_ports held = { 0 };

	if (with_disk && !o->disk_dir && bench_tmpdir_create(f->tmp, sizeof(f->tmp)) < 0)
		return rp_fail(r, -EIO, "cannot create a temporary directory");
	/* each node its own disk file; node 0's is named as without nodes */
	for (j = 0; with_disk && j < nodes; j++) {
		const char *dir = o->disk_dir ? o->disk_dir : f->tmp;
		const char *base = o->disk_dir ? "kvbench-replay" : "replay";
		if (j == 0)
			snprintf(f->path[j], sizeof(f->path[j]), "%s/%s.disk", dir, base);
		else
			snprintf(f->path[j], sizeof(f->path[j]), "%s/%s-n%u.disk", dir, base, j);
	}
	/* a port found free may be taken before the node listens on it: then
	 * try again with new ports */
	for (attempt = 0; attempt < 3; attempt++) {
		if (nodes > 1 && (rc = common_ports_reserve(&held, nodes)) < 0)
			return rp_fail(r, rc, "cannot find free ports on 127.0.0.1: %s",
				     strerror(-rc));
		rc = nodes_open(r, f, with_disk, &held);
		common_ports_release(&held);
		if (rc != -EADDRINUSE)
			break;
	}
	return rc;
}

/* The store's stats and counters: one node's document, or every node's
 * (node 0 first) with the counters summed. */
void rp_run_store_stats(struct run *r)
{
	struct replay_result *res = r->res;
	uint32_t j;

	if (r->nst == 1) {
		json_t *s = bench_store_stats(r->st[0]);
		res->store_stats = s;
		res->evictions = (uint64_t)rp_stat_num(s, "ram.evictions");
		res->evicted_bytes = (uint64_t)rp_stat_num(s, "ram.evicted_bytes");
		res->lease_expiries = (uint64_t)rp_stat_num(s, "ram.lease_expiries");
		res->write_arounds = (uint64_t)rp_stat_num(s, "store.write_arounds");
		res->disk_evictions = (uint64_t)rp_stat_num(s, "disk.evictions");
	} else if (r->nst > 1) {
		json_t *a = json_array();
		for (j = 0; j < r->nst; j++) {
			json_t *s = bench_store_stats(r->st[j]);
			res->evictions += (uint64_t)rp_stat_num(s, "ram.evictions");
			res->evicted_bytes += (uint64_t)rp_stat_num(s, "ram.evicted_bytes");
			res->lease_expiries += (uint64_t)rp_stat_num(s, "ram.lease_expiries");
			res->write_arounds += (uint64_t)rp_stat_num(s, "store.write_arounds");
			res->disk_evictions += (uint64_t)rp_stat_num(s, "disk.evictions");
			json_array_append_new(a, s ? s : json_null());
		}
		res->store_stats = a;
	}
}

/* Closes the nodes and gives their disk space back at once (a sweep runs
 * many stores), then frees the run. */
void rp_run_close(struct run *r, const struct run_files *f)
{
	uint32_t j;

	rp_progress(r, 0, 1);
	while (r->nst > 0) {
		kvt_close(r->st[--r->nst]);
		r->st[r->nst] = NULL;
	}
	if (f->tmp[0])
		(void)bench_tmpdir_remove(f->tmp);
	else
		for (j = 0; j < REPLAY_NODES_MAX; j++)
			if (f->path[j][0])
				(void)unlink(f->path[j]);
	run_free(r);
}
