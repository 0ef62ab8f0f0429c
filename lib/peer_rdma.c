/*
 * peer_rdma.c - the RDMA transport of the peer tier: under the protocol of
 * peer.c and peer_server.c (which keep every control frame on TCP), it
 * moves the bytes of gets and puts one-sided through rlink.h.
 *
 *   - One rlink node per tier, listening on this node's own address at the
 *     port of its member address, admitting only members' addresses, at
 *     most QPS_PER_MEMBER queue pairs at once for each member of a host.
 *   - The RAM arena registered once at open (remote reads only, in pieces
 *     of at most 1 GiB); a staging buffer per member (remote reads only,
 *     grown on demand up to STAGE_MAX) for the client's side of both
 *     directions, so that no memory anywhere is remotely writable.
 *   - One outgoing link per member, used under the member's rlock by the
 *     client (READs of blocks the member pinned) and by the server (READs
 *     of blocks the member offered), dialled on first use and after a
 *     failure, not within down_ms of a failed dial.
 *   - Caller memory of kvt_mem_register, registered too (PEER_MEM_MAX
 *     ranges under a rwlock held across the READs into them), so gets
 *     into it READ straight there.
 *   - The pins of served blocks (pins.h), per server connection slot: held
 *     for hold_ms, released by the member's UNPIN frame, dropped when the
 *     connection ends, lapsed by the listener.
 * Knows nothing about the store: blocks come and go through struct
 * peer_local.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "peer_int.h"
#include "pins.h"
#include "rlink.h"

#define STAGE_MAX (64ull << 20)    /* staging of one member, and one round of
				      READs (or one block, if larger) */
#define STAGE_STEP (1ull << 20)
#define QPS_PER_MEMBER 16u         /* queue pairs accepted at once from one
				      member (one link, and links it redials
				      before the old one's end reached here) */

struct peer_rdma {
	struct rlink_node *node;
	struct rlink_region *arena;   /* NULL: nothing is served by descriptor */
	struct pins *pins;            /* per server connection slot */
	uint32_t hold_ms;
	pthread_rwlock_t mlock;       /* mem[] */
	struct { void *base; size_t len; struct rlink_region *reg; } mem[PEER_MEM_MAX];
	_Atomic uint64_t pinned, pulls, pull_failures, pulled_bytes, direct;
};

/* The members-only rule of the RDMA side, before any queue pair exists. */
static int admit(void *arg, const struct sockaddr *from)
{
	struct peer_tier *p = arg;
	struct sockaddr_storage ss;
	char h[INET6_ADDRSTRLEN];

	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, from, from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						       : sizeof(struct sockaddr_in));
	for (unsigned i = 0; i < p->n; i++)
		if (i != p->self && peer_same_host(&ss, &p->m[i].sa))
			return 1;
	peer_stranger(p, peer_host_str(&ss, h, sizeof(h)),
		      "an RDMA connection from an address that is no member's");
	return 0;
}

/* The queue pairs one host may have accepted at once: QPS_PER_MEMBER for
 * each member there, so that no process at a member's address can take all
 * RLINK_ACCEPTED_MAX. */
static unsigned per_host(void *arg, const struct sockaddr *from)
{
	struct peer_tier *p = arg;
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, from, from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						       : sizeof(struct sockaddr_in));
	for (unsigned i = 0; i < p->n; i++)
		if (i != p->self && peer_same_host(&ss, &p->m[i].sa))
			return QPS_PER_MEMBER * p->m[p->m[i].host].at_host;
	return QPS_PER_MEMBER;
}

static void unpin_cb(void *arg, uint64_t ref)
{
	struct peer_tier *p = arg;

	p->local.unpin(p->local.arg, ref);
}

int peer_rdma_open(struct peer_tier *p, const struct peer_opts *o)
{
	const struct rlink_ops *ops = o->rdma_ops ? o->rdma_ops : &rlink_verbs_ops;
	struct sockaddr_storage self = p->src;
	struct peer_rdma *r;
	struct rlink_limits lim = { .per_host = per_host, .log_ms = p->log_ms };
	char h[INET6_ADDRSTRLEN], addr[INET6_ADDRSTRLEN + 8];
	int e;

	if (o->transport == PEER_TCP)
		return 0;
	/* the port of this node's member address, in RDMA CM's own port space */
	if (self.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&self)->sin6_port =
			((struct sockaddr_in6 *)&p->m[p->self].sa)->sin6_port;
	else
		((struct sockaddr_in *)&self)->sin_port =
			((struct sockaddr_in *)&p->m[p->self].sa)->sin_port;
	snprintf(addr, sizeof(addr), "%s", peer_host_str(&self, h, sizeof(h)));
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/* longer than any member's deadline for its READs (which it sets to
	 * three quarters of this from before it asked): the grace */
	r->hold_ms = 2 * p->request_ms + 1000;
	pthread_rwlock_init(&r->mlock, NULL);
	e = pins_open(CONNS_MAX, r->hold_ms, unpin_cb, p, &r->pins);
	if (!e)
		e = rlink_node_open_limited(ops, (struct sockaddr *)&self, admit, p, &lim,
					    &r->node);
	if (!e && o->arena && o->arena_len && p->local.pin)
		e = rlink_reg(r->node, o->arena, o->arena_len, 0, &r->arena);
	if (e) {
		char why[256];
		snprintf(why, sizeof(why), "%s", kvt_last_error());
		if (r->arena)
			rlink_unreg(r->arena);
		rlink_node_close(r->node);
		pins_close(r->pins);
		pthread_rwlock_destroy(&r->mlock);
		free(r);
		if (e == -ENOMEM && !why[0])
			return e;
		if (o->transport == PEER_AUTO) {
			kvt_log(KVT_LOG_WARN, "peers.transport \"auto\": no RDMA at %s (%s); "
				"peers use TCP", addr, why);
			return 0;
		}
		return kvt_fail(e == -ENODEV ? -ENODEV : e, "peers.transport \"rdma\": no RDMA "
				"at %s, this node's address (%s); use \"tcp\", or \"auto\" to "
				"fall back to TCP", addr, why);
	}
	p->rdma = r;
	kvt_log(KVT_LOG_INFO, "peers: RDMA transport at %s", addr);
	return 0;
}

static void stage_free(struct member *x)
{
	rlink_unreg(x->stage_reg);
	if (x->stage)
		munmap(x->stage, x->stage_len);
	x->stage_reg = NULL;
	x->stage = NULL;
	x->stage_len = 0;
}

void peer_rdma_close(struct peer_tier *p)
{
	struct peer_rdma *r = p->rdma;

	if (!r)
		return;
	for (unsigned i = 0; i < p->n; i++) {
		rlink_close(p->m[i].rl);
		p->m[i].rl = NULL;
		atomic_store(&p->m[i].rl_up, 0);
		stage_free(&p->m[i]);
	}
	pins_close(r->pins);          /* every pin ends: no link reads now */
	for (unsigned i = 0; i < PEER_MEM_MAX; i++)
		rlink_unreg(r->mem[i].reg);
	pthread_rwlock_destroy(&r->mlock);
	rlink_unreg(r->arena);
	rlink_node_close(r->node);
	free(r);
	p->rdma = NULL;
}

/* --- links ------------------------------------------------------------------- */

/* Closes m's link after a failed transfer (it is redialled on next use).
 * With rlock. */
static void link_broken(struct peer_tier *p, struct member *x, int e)
{
	rlink_close(x->rl);
	x->rl = NULL;
	atomic_store(&x->rl_up, 0);
	ctr_add(&x->rdma_errors, 1);
	kvt_log(KVT_LOG_WARN, "peer %s (%s): RDMA transfer failed: %s; the link is "
		"closed and dialled again on next use", x->name, x->addr, strerror(-e));
	(void)p;
}

static int link_locked(struct peer_tier *p, unsigned m)
{
	struct member *x = &p->m[m];
	uint64_t now = kvt_now_ns();

	/* a link whose member went away since (a restart, say) is dialled
	 * again now, before a request relies on it */
	if (rlink_check(x->rl))
		return 1;
	rlink_close(x->rl);
	x->rl = NULL;
	if (now < x->rl_retry)
		return 0;
	int e = rlink_dial(p->rdma->node, (struct sockaddr *)&x->sa, (int)p->connect_ms,
			   &x->rl);
	if (e) {
		x->rl_retry = now + (uint64_t)p->down_ms * 1000000ull;
		ctr_add(&x->rdma_errors, 1);
		kvt_log(KVT_LOG_WARN, "peer %s (%s): no RDMA link: %s; its blocks travel "
			"inline over TCP for %u ms", x->name, x->addr, strerror(-e), p->down_ms);
		return 0;
	}
	if (x->rl_dials++)
		ctr_add(&x->rdma_reconnects, 1);
	return 1;
}

int peer_rdma_link(struct peer_tier *p, unsigned m)
{
	if (!p->rdma)
		return 0;
	pthread_mutex_lock(&p->m[m].rlock);
	int ok = link_locked(p, m);
	atomic_store(&p->m[m].rl_up, ok);
	pthread_mutex_unlock(&p->m[m].rlock);
	return ok;
}

/* READs segments over m's link (dialled if needed) before deadline, counted
 * for m; a failure closes the link. */
static int move(struct peer_tier *p, unsigned m, const struct rlink_seg *s, size_t n,
		uint64_t deadline)
{
	struct member *x = &p->m[m];
	uint64_t bytes = 0;
	int e;

	for (size_t i = 0; i < n; i++)
		bytes += s[i].len;
	pthread_mutex_lock(&x->rlock);
	e = link_locked(p, m) ? 0 : -ENOTCONN;
	atomic_store(&x->rl_up, !e);
	if (!e) {
		uint64_t ce = x->rl->completion_errors;
		ctr_add(&x->rdma_wrs, n);
		e = rlink_move(x->rl, 0, s, n, deadline);
		ctr_add(&x->rdma_cerrs, x->rl->completion_errors - ce);
		if (e)
			link_broken(p, x, e);
		else
			ctr_add(&x->rdma_read, bytes);
	}
	pthread_mutex_unlock(&x->rlock);
	return e;
}

/* --- the client's side --------------------------------------------------------- */

/* m's staging grown to at least len bytes (len <= peer_rdma_stage_max()).
 * With lock. */
static int stage_grow(struct peer_tier *p, struct member *x, size_t len)
{
	if (x->stage_len >= len)
		return 0;
	stage_free(x);
	size_t n = (len + STAGE_STEP - 1) / STAGE_STEP * STAGE_STEP;
	void *b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return -ENOMEM;
	int e = rlink_reg(p->rdma->node, b, n, 0, &x->stage_reg);
	if (e) {
		munmap(b, n);
		return e;
	}
	x->stage = b;
	x->stage_len = n;
	return 0;
}

uint8_t *peer_rdma_stage(struct peer_tier *p, unsigned m, size_t len, uint32_t *rkey)
{
	struct member *x = &p->m[m];
	uint32_t lkey;

	if (!p->rdma || len > peer_rdma_stage_max(p) || stage_grow(p, x, len) ||
	    rlink_keys(x->stage_reg, x->stage, len, &lkey, rkey))
		return NULL;
	return x->stage;
}

size_t peer_rdma_stage_max(const struct peer_tier *p)
{
	return p->max_block > STAGE_MAX ? p->max_block : STAGE_MAX;
}

/* The lkey of [b, b + len) when it lies in registered caller memory
 * (with mlock held for reading), else -1. */
static int64_t caller_lkey(struct peer_rdma *r, const void *b, size_t len)
{
	uint32_t lkey, rkey;

	for (unsigned i = 0; i < PEER_MEM_MAX; i++)
		if (r->mem[i].reg && rlink_keys(r->mem[i].reg, b, len, &lkey, &rkey) == 0)
			return lkey;
	return -1;
}

int peer_rdma_read(struct peer_tier *p, unsigned m, const struct rdesc *d, size_t n,
		   kvt_op *ops, uint64_t *sums, uint64_t deadline)
{
	struct peer_rdma *r = p->rdma;
	struct member *x = &p->m[m];
	struct rlink_seg *s = malloc(sizeof(*s) * (n ? n : 1));
	size_t i = 0;
	int e = s ? 0 : -ENOMEM;

	/* held across the READs: a range is not deregistered under them */
	pthread_rwlock_rdlock(&r->mlock);
	while (i < n && !e) {
		size_t k = 0;
		uint64_t staged = 0;

		/* a round: what fits in staging; blocks bound for registered
		 * caller memory take no staging */
		for (; i + k < n; k++) {
			int64_t lk = caller_lkey(r, ops[d[i + k].op].buf, d[i + k].len);
			if (lk >= 0) {
				s[k] = (struct rlink_seg){ .local = ops[d[i + k].op].buf,
							   .lkey = (uint32_t)lk };
			} else {
				if (k && staged + d[i + k].len > peer_rdma_stage_max(p))
					break;
				s[k] = (struct rlink_seg){ .local = NULL,
							   .lkey = (uint32_t)staged };
				staged += d[i + k].len;
			}
		}
		e = staged > peer_rdma_stage_max(p) ? -EPROTO : stage_grow(p, x, staged);
		for (size_t j = 0; j < k && !e; j++) {
			uint32_t rkey;
			if (!s[j].local) {
				s[j].local = x->stage + s[j].lkey;
				e = rlink_keys(x->stage_reg, s[j].local, d[i + j].len, &s[j].lkey,
					       &rkey);
			}
			s[j].rkey = d[i + j].rkey;
			s[j].remote = d[i + j].addr;
			s[j].len = (uint32_t)d[i + j].len;
		}
		if (!e)
			e = move(p, m, s, k, deadline);
		for (size_t j = 0; j < k && !e; j++) {
			kvt_op *o = &ops[d[i + j].op];
			const uint8_t *b = s[j].local;
			if (kvt_checksum(b, d[i + j].len) != d[i + j].sum) {
				ctr_add(&p->checksum_failures, 1);
				o->result = -EBADMSG;
				continue;
			}
			if (b == o->buf)
				ctr_add(&r->direct, 1);
			else
				memcpy(o->buf, b, d[i + j].len);
			o->len = d[i + j].len;
			o->result = 0;
			ctr_add(&p->bytes_in, d[i + j].len);
			if (sums)
				sums[d[i + j].op] = d[i + j].sum;
		}
		if (!e)
			i += k;
	}
	pthread_rwlock_unlock(&r->mlock);
	for (; i < n; i++)
		ops[d[i].op].result = -EIO;
	free(s);
	return e;
}

int peer_mem_register(struct peer_tier *p, void *base, size_t len)
{
	struct peer_rdma *r = p->rdma;
	struct rlink_region *reg;
	int e;

	if (!r)
		return -ENOTSUP;
	/* local writes only: the device writes READ data into it, and no
	 * member can READ it (its rkey is never sent, but keys are guessable) */
	e = rlink_reg(r->node, base, len, RLINK_LOCAL_ONLY, &reg);
	if (e) {
		kvt_log(KVT_LOG_WARN, "peers: caller memory of %zu bytes not registered with "
			"the RDMA device (%s); gets into it go through staging", len,
			kvt_last_error());
		return e;
	}
	pthread_rwlock_wrlock(&r->mlock);
	unsigned i = 0;
	while (i < PEER_MEM_MAX && r->mem[i].reg)
		i++;
	if (i < PEER_MEM_MAX) {
		r->mem[i].base = base;
		r->mem[i].len = len;
		r->mem[i].reg = reg;
	}
	pthread_rwlock_unlock(&r->mlock);
	if (i == PEER_MEM_MAX) {
		rlink_unreg(reg);
		kvt_log(KVT_LOG_WARN, "peers: %u caller ranges are registered with the RDMA "
			"device already; gets into another go through staging", PEER_MEM_MAX);
		return -ENOSPC;
	}
	return 0;
}

void peer_mem_deregister(struct peer_tier *p, void *base)
{
	struct peer_rdma *r = p->rdma;
	struct rlink_region *reg = NULL;

	if (!r)
		return;
	pthread_rwlock_wrlock(&r->mlock);
	for (unsigned i = 0; i < PEER_MEM_MAX && !reg; i++)
		if (r->mem[i].reg && r->mem[i].base == base) {
			reg = r->mem[i].reg;
			r->mem[i].reg = NULL;
		}
	pthread_rwlock_unlock(&r->mlock);
	rlink_unreg(reg);
}

/* --- the owner's side ---------------------------------------------------------- */

int peer_rdma_pin(struct peer_tier *p, unsigned slot, kvt_key key, uint64_t cap,
		  uint8_t *desc, size_t *len)
{
	struct peer_rdma *r = p->rdma;
	uint64_t ref, id;
	uint32_t lkey, rkey;
	void *block;
	size_t l = 0;

	if (!r || !r->arena)
		return -EAGAIN;
	uint64_t sum;
	int st = p->local.pin(p->local.arg, key, cap, &ref, &block, &l, &sum);
	*len = l;
	if (st)
		return st;
	if (rlink_keys(r->arena, block, l, &lkey, &rkey) ||
	    !(id = pins_hold(r->pins, slot, ref, kvt_now_ns()))) {
		/* across two registered pieces, or the slot holds too many */
		p->local.unpin(p->local.arg, ref);
		return -EAGAIN;
	}
	put32(desc, 0);
	put32(desc + 4, rkey);
	put64(desc + 8, l);
	put64(desc + 16, sum); /* kept with the block: the loader verifies */
	put64(desc + 24, (uint64_t)(uintptr_t)block);
	put64(desc + 32, id);
	put64(desc + 40, r->hold_ms);
	ctr_add(&r->pinned, 1);
	return 0;
}

void peer_rdma_unpin(struct peer_tier *p, unsigned slot, const uint64_t *ids, size_t n)
{
	if (p->rdma)
		pins_release(p->rdma->pins, slot, ids, n);
}

void peer_rdma_drop(struct peer_tier *p, unsigned slot)
{
	if (p->rdma)
		pins_drop_member(p->rdma->pins, slot);
}

uint64_t peer_rdma_pinned_until(struct peer_tier *p, unsigned slot)
{
	return p->rdma ? pins_until(p->rdma->pins, slot) : 0;
}

int peer_rdma_lapse(struct peer_tier *p)
{
	struct peer_rdma *r = p->rdma;

	if (!r)
		return -1;
	pins_lapse(r->pins, kvt_now_ns());
	int every = (int)(r->hold_ms / 8);
	return every < 10 ? 10 : every > 1000 ? 1000 : every;
}

/* Segments one offered block's READ may take: one per registered piece of
 * the arena that its reservation touches (a block is at most 4 GiB). */
#define PULL_SEGS (UINT32_MAX / RLINK_PIECE + 2)

void peer_rdma_pull(struct peer_tier *p, unsigned m, const kvt_key *keys,
		    const struct rdesc *d, size_t n, int32_t *res, uint64_t deadline)
{
	struct peer_rdma *r = p->rdma;
	struct rlink_seg *s = malloc(sizeof(*s) * (n * PULL_SEGS + 1));
	/* the blocks reserved: offer, reserved space and its handle */
	struct { size_t i; uint8_t *at; uint64_t h; } *b = malloc(sizeof(*b) * (n ? n : 1));
	size_t k = 0, ns = 0;
	int e = 0;

	for (size_t i = 0; i < n; i++)
		res[i] = -EIO;
	if (!s || !b)
		goto out;
	if (!r || !r->arena || !p->local.reserve) {
		for (size_t i = 0; i < n; i++)
			res[i] = -ENOTSUP;
		goto out;
	}
	ctr_add(&r->pulls, 1);
	for (size_t i = 0; i < n; i++) {
		void *at;
		int st = p->local.reserve(p->local.arg, d[i].len, &at, &b[k].h);
		if (st) {
			res[i] = st;
			continue;
		}
		/* space that crosses from one registered piece of the arena
		 * into the next is READ in one segment per piece */
		size_t g = rlink_segs(r->arena, at, d[i].len, d[i].addr, d[i].rkey, s + ns,
				      PULL_SEGS);
		if (!g) {
			p->local.unreserve(p->local.arg, b[k].h);
			continue;
		}
		ns += g;
		b[k].i = i;
		b[k++].at = at;
	}
	e = ns ? move(p, m, s, ns, deadline) : 0;
	for (size_t j = 0; j < k; j++) {
		size_t i = b[j].i;
		if (e) {
			p->local.unreserve(p->local.arg, b[j].h);
			continue;
		}
		if (kvt_checksum(b[j].at, d[i].len) != d[i].sum) {
			/* never visible: the reservation is freed unpublished */
			ctr_add(&p->checksum_failures, 1);
			p->local.unreserve(p->local.arg, b[j].h);
			res[i] = -EBADMSG;
			continue;
		}
		res[i] = p->local.publish(p->local.arg, keys[i], b[j].h, d[i].len, d[i].sum);
		if (res[i] == 0) {
			ctr_add(&r->pulled_bytes, d[i].len);
			ctr_add(&p->served_puts, 1);
		}
	}
	if (e)
		ctr_add(&r->pull_failures, 1);
out:
	free(s);
	free(b);
}

/* --- counters -------------------------------------------------------------------- */

void peer_rdma_member_stats(struct peer_tier *p, unsigned m, const struct stat_visitor *v)
{
	struct member *x = &p->m[m];

	if (!p->rdma)
		return;
	stat_bool(v, "rdma_link", atomic_load(&x->rl_up));
	stat_int(v, "rdma_bytes_read", (int64_t)ctr_get(&x->rdma_read));
	stat_int(v, "rdma_bytes_offered", (int64_t)ctr_get(&x->rdma_offered));
	stat_int(v, "rdma_work_requests", (int64_t)ctr_get(&x->rdma_wrs));
	stat_int(v, "rdma_completion_errors", (int64_t)ctr_get(&x->rdma_cerrs));
	stat_int(v, "rdma_failures", (int64_t)ctr_get(&x->rdma_errors));
	stat_int(v, "rdma_reconnects", (int64_t)ctr_get(&x->rdma_reconnects));
	stat_int(v, "rdma_inline", (int64_t)ctr_get(&x->rdma_inline));
}

void peer_rdma_stats(struct peer_tier *p, const struct stat_visitor *v)
{
	struct peer_rdma *r = p->rdma;

	if (!r)
		return;
	struct rlink_counters *c = rlink_node_counters(r->node);
	struct stat_visitor o = stat_nest(v, "rdma", 0);
	stat_int(&o, "bytes_read", (int64_t)ctr_get(&c->bytes_read));
	stat_int(&o, "work_requests", (int64_t)ctr_get(&c->work_requests));
	stat_int(&o, "completion_errors", (int64_t)ctr_get(&c->completion_errors));
	stat_int(&o, "links_dialled", (int64_t)ctr_get(&c->links_dialled));
	stat_int(&o, "links_broken", (int64_t)ctr_get(&c->links_broken));
	stat_int(&o, "links_accepted", (int64_t)ctr_get(&c->accepted));
	stat_int(&o, "links_refused", (int64_t)ctr_get(&c->refused));
	stat_int(&o, "links_refused_for_room", (int64_t)ctr_get(&c->crowded));
	stat_int(&o, "blocks_pinned", (int64_t)ctr_get(&r->pinned));
	stat_int(&o, "pulls", (int64_t)ctr_get(&r->pulls));
	stat_int(&o, "pull_failures", (int64_t)ctr_get(&r->pull_failures));
	stat_int(&o, "pulled_bytes", (int64_t)ctr_get(&r->pulled_bytes));
	stat_int(&o, "hold_ms", r->hold_ms);
	stat_int(&o, "direct_reads", (int64_t)ctr_get(&r->direct));
	pthread_rwlock_rdlock(&r->mlock);
	int64_t nmem = 0;
	for (unsigned i = 0; i < PEER_MEM_MAX; i++)
		nmem += r->mem[i].reg != NULL;
	pthread_rwlock_unlock(&r->mlock);
	stat_int(&o, "caller_ranges", nmem);
	pins_stats(r->pins, &o);
}
