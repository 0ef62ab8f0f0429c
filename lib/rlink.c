/*
 * rlink.c - RDMA links over the device seam of rlink.h: the node's accept
 * thread and members-only rule, memory registration in pieces, and one-sided
 * transfers with chained posts, selective signalling, deadlines and the
 * failure rule (a failed transfer destroys its queue pair before returning).
 * Knows nothing about verbs structures (rlink_verbs.c) nor about the peer
 * protocol, keys or tiers.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlink.h"
#include "stats.h"

#define ACCEPTED_MAX 1024u         /* queue pairs accepted at once */
#define EVENT_WAIT_MS 100

struct rlink_node {
	const struct rlink_ops *ops;
	void *dev;
	int (*admit)(void *arg, const struct sockaddr *from);
	void *arg;
	pthread_t thread;
	int thread_started;
	atomic_int closing;
	pthread_mutex_t lock;      /* accepted[] */
	void *accepted[ACCEPTED_MAX];
	struct rlink_counters ctr;
};

struct rlink_region {
	struct rlink_node *node;
	uint8_t *addr;
	size_t len, npieces;
	struct { void *mr; uint32_t lkey, rkey; } piece[];
};

struct rlink_counters *rlink_node_counters(struct rlink_node *n)
{
	return &n->ctr;
}

/* --- the listening side ---------------------------------------------------- */

static void on_request(struct rlink_node *n, struct rlink_ev *ev)
{
	void *qp = NULL;
	unsigned slot;

	/* the members-only rule, before any queue pair exists; counted
	 * before the dialler can learn of the refusal, and not logged here:
	 * admit reports it (the peer tier's, rate-limited, so that strangers
	 * cannot fill the log) */
	if (!n->admit(n->arg, (const struct sockaddr *)&ev->from)) {
		ctr_add(&n->ctr.refused, 1);
		n->ops->reject(n->dev, ev->req);
		return;
	}
	pthread_mutex_lock(&n->lock);
	for (slot = 0; slot < ACCEPTED_MAX && n->accepted[slot]; slot++)
		;
	if (slot == ACCEPTED_MAX) {
		pthread_mutex_unlock(&n->lock);
		ctr_add(&n->ctr.refused, 1);
		n->ops->reject(n->dev, ev->req);
		kvt_log(KVT_LOG_WARN, "rdma: refused a connection: %u queue pairs open",
			ACCEPTED_MAX);
		return;
	}
	if (n->ops->accept(n->dev, ev->req, &qp) == 0) {
		n->accepted[slot] = qp;
		ctr_add(&n->ctr.accepted, 1);
	}
	pthread_mutex_unlock(&n->lock);
}

static void on_gone(struct rlink_node *n, void *qp)
{
	int found = 0;

	pthread_mutex_lock(&n->lock);
	for (unsigned i = 0; i < ACCEPTED_MAX; i++)
		if (n->accepted[i] == qp) {
			n->accepted[i] = NULL;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&n->lock);
	if (found)
		n->ops->drop(qp);
}

static void *node_main(void *arg)
{
	struct rlink_node *n = arg;

	while (!atomic_load(&n->closing)) {
		struct rlink_ev ev = { .type = RLINK_EV_NONE };

		if (n->ops->event(n->dev, EVENT_WAIT_MS, &ev) < 0)
			continue;
		if (ev.type == RLINK_EV_REQUEST)
			on_request(n, &ev);
		else if (ev.type == RLINK_EV_GONE)
			on_gone(n, ev.qp);
	}
	return NULL;
}

int rlink_node_open(const struct rlink_ops *ops, const struct sockaddr *self,
		    int (*admit)(void *arg, const struct sockaddr *from), void *arg,
		    struct rlink_node **out)
{
	struct rlink_node *n = calloc(1, sizeof(*n));
	int e;

	*out = NULL;
	if (!n)
		return -ENOMEM;
	n->ops = ops;
	n->admit = admit;
	n->arg = arg;
	pthread_mutex_init(&n->lock, NULL);
	e = ops->listen(self, &n->dev);
	if (e) {
		pthread_mutex_destroy(&n->lock);
		free(n);
		return e;
	}
	if (pthread_create(&n->thread, NULL, node_main, n)) {
		ops->unlisten(n->dev);
		pthread_mutex_destroy(&n->lock);
		free(n);
		return kvt_fail(-ENOMEM, "rdma: cannot start the connection thread");
	}
	n->thread_started = 1;
	*out = n;
	return 0;
}

void rlink_node_close(struct rlink_node *n)
{
	if (!n)
		return;
	atomic_store(&n->closing, 1);
	if (n->thread_started)
		pthread_join(n->thread, NULL);
	for (unsigned i = 0; i < ACCEPTED_MAX; i++)
		if (n->accepted[i])
			n->ops->drop(n->accepted[i]);
	n->ops->unlisten(n->dev);
	pthread_mutex_destroy(&n->lock);
	free(n);
}

/* --- registration ------------------------------------------------------------ */

int rlink_reg(struct rlink_node *n, void *addr, size_t len, int flags,
	      struct rlink_region **out)
{
	size_t np = len ? (len + RLINK_PIECE - 1) / RLINK_PIECE : 0;
	struct rlink_region *r;

	*out = NULL;
	if (!addr || !len)
		return kvt_fail(-EINVAL, "rdma: registering an empty range");
	r = calloc(1, sizeof(*r) + np * sizeof(r->piece[0]));
	if (!r)
		return -ENOMEM;
	r->node = n;
	r->addr = addr;
	r->len = len;
	for (size_t i = 0; i < np; i++) {
		size_t off = i * RLINK_PIECE;
		size_t pl = len - off < RLINK_PIECE ? len - off : RLINK_PIECE;
		int e = n->ops->reg(n->dev, r->addr + off, pl,
				    flags & (RLINK_REMOTE_WRITE | RLINK_LOCAL_ONLY),
				    &r->piece[i].mr, &r->piece[i].lkey, &r->piece[i].rkey);
		if (e) {
			rlink_unreg(r);
			return kvt_fail(e, "rdma: cannot register %zu bytes with the device: %s",
					pl, strerror(-e));
		}
		r->npieces = i + 1;
	}
	*out = r;
	return 0;
}

void rlink_unreg(struct rlink_region *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->npieces; i++)
		r->node->ops->dereg(r->piece[i].mr);
	free(r);
}

int rlink_keys(const struct rlink_region *r, const void *p, size_t len,
	       uint32_t *lkey, uint32_t *rkey)
{
	const uint8_t *b = p;

	if (b < r->addr || len > r->len || (size_t)(b - r->addr) > r->len - len)
		return -ERANGE;
	size_t off = (size_t)(b - r->addr), i = off / RLINK_PIECE;
	if (len && (off + len - 1) / RLINK_PIECE != i)
		return -ERANGE;
	*lkey = r->piece[i].lkey;
	*rkey = r->piece[i].rkey;
	return 0;
}

size_t rlink_segs(const struct rlink_region *r, void *p, size_t len, uint64_t remote,
		  uint32_t rkey, struct rlink_seg *out, size_t max)
{
	uint8_t *b = p;
	size_t k = 0;

	if (!len || b < r->addr || len > r->len || (size_t)(b - r->addr) > r->len - len)
		return 0;
	while (len) {
		size_t off = (size_t)(b - r->addr), i = off / RLINK_PIECE;
		size_t take = RLINK_PIECE - off % RLINK_PIECE;

		if (k == max)
			return 0;
		if (take > len)
			take = len;
		out[k++] = (struct rlink_seg){ .local = b, .lkey = r->piece[i].lkey,
					       .rkey = rkey, .remote = remote,
					       .len = (uint32_t)take };
		b += take;
		remote += take;
		len -= take;
	}
	return k;
}

/* --- links ---------------------------------------------------------------------- */

int rlink_dial(struct rlink_node *n, const struct sockaddr *dst, int wait_ms,
	       struct rlink **out)
{
	struct rlink *l = calloc(1, sizeof(*l));
	int e;

	*out = NULL;
	if (!l)
		return -ENOMEM;
	l->node = n;
	e = n->ops->dial(n->dev, dst, wait_ms, &l->qp);
	if (e) {
		free(l);
		return kvt_fail(e, "rdma: cannot connect: %s", strerror(-e));
	}
	ctr_add(&n->ctr.links_dialled, 1);
	*out = l;
	return 0;
}

int rlink_alive(const struct rlink *l)
{
	return l && l->qp;
}

static int brk(struct rlink *l, int e)
{
	if (l->qp) {
		l->node->ops->drop(l->qp);
		l->qp = NULL;
		ctr_add(&l->node->ctr.links_broken, 1);
	}
	return e;
}

int rlink_check(struct rlink *l)
{
	struct rlink_wc wc;

	if (!rlink_alive(l))
		return 0;
	if (l->node->ops->poll(l->qp, 0, &wc, 0) == -ECONNRESET) {
		brk(l, 0);
		return 0;
	}
	return 1;
}

/*
 * Reaps completions until at most target work requests are outstanding. Each signalled work request's
 * id is the count of requests it covers (RC completes in order, so its
 * completion means every unsignalled one before it completed too).
 */
static int reap(struct rlink *l, uint64_t *outstanding, uint64_t target,
		uint64_t deadline)
{
	const struct rlink_ops *ops = l->node->ops;
	struct rlink_wc wc[16];

	while (*outstanding > target) {
		int t = kvt_ms_until(deadline, 1000);
		if (t == 0)
			return -ETIMEDOUT;
		int got = ops->poll(l->qp, t, wc, 16);
		if (got < 0)
			return got;
		for (int i = 0; i < got; i++) {
			if (wc[i].status) {
				ctr_add(&l->node->ctr.completion_errors, 1);
				l->completion_errors++;
				return -EIO;
			}
			if (wc[i].id > *outstanding)
				return -EIO;
			*outstanding -= wc[i].id;
		}
	}
	return 0;
}

int rlink_move(struct rlink *l, int write, const struct rlink_seg *s, size_t n,
	       uint64_t deadline)
{
	const struct rlink_ops *ops;
	struct rlink_wr wr[RLINK_SIGNAL_EVERY];
	uint64_t outstanding = 0, bytes = 0;
	size_t i = 0;
	int e = 0;

	if (!l->qp)
		return -ENOTCONN;
	ops = l->node->ops;
	while (i < n && !e) {
		/* room for one more chain: wait for the oldest to complete */
		e = reap(l, &outstanding, RLINK_DEPTH - RLINK_SIGNAL_EVERY, deadline);
		if (e)
			break;
		/* a READ posted late could outlive the owner's pin */
		if (kvt_now_ns() >= deadline) {
			e = -ETIMEDOUT;
			break;
		}
		size_t k = n - i < RLINK_SIGNAL_EVERY ? n - i : RLINK_SIGNAL_EVERY;
		for (size_t j = 0; j < k; j++) {
			wr[j] = (struct rlink_wr){ .write = write, .seg = s[i + j] };
			bytes += s[i + j].len;
		}
		wr[k - 1].signalled = 1;
		wr[k - 1].id = k;
		e = ops->post(l->qp, wr, k);
		if (e) {
			e = -EIO;
			break;
		}
		ctr_add(&l->node->ctr.work_requests, k);
		outstanding += k;
		i += k;
	}
	if (!e)
		e = reap(l, &outstanding, 0, deadline);
	if (e)
		return brk(l, e);
	ctr_add(write ? &l->node->ctr.bytes_written : &l->node->ctr.bytes_read, bytes);
	return 0;
}

void rlink_close(struct rlink *l)
{
	if (!l)
		return;
	brk(l, 0);
	free(l);
}
