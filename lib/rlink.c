/*
 * rlink.c - RDMA links over the device seam of rlink.h: the node's accept
 * thread and members-only rule, memory registration in pieces, and one-sided
 * transfers with chained posts, selective signalling, deadlines and the
 * failure rule (a failed transfer destroys its queue pair before returning).
 * The node keeps room for every host: at most lim.per_host queue pairs from
 * one, RLINK_ACCEPTED_MAX from all, and says so at a bounded rate.
 * Knows nothing about verbs structures (rlink_verbs.c) nor about the peer
 * protocol, keys or tiers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log_limit.h"
#include "internal.h"
#include "rlink.h"
#include "stats.h"

#define EVENT_WAIT_MS 100
#define LOG_MS_DEFAULT 10000u

struct rlink_node {
	const struct rlink_ops *ops;
	void *dev;
	int (*admit)(void *arg, const struct sockaddr *from);
	void *arg;
	pthread_t thread;
	int thread_started;
	atomic_int closing;
	struct rlink_limits lim;
	pthread_mutex_t lock;      /* accepted[], log_* */
	struct {
		void *qp;          /* NULL: free */
		struct sockaddr_storage from;
	} accepted[RLINK_ACCEPTED_MAX];
	/* requests refused for want of room: the first logged, then at most
	 * one summary line per lim.log_ms */
	struct log_limit log;
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

/* The host of a (an IPv4 address as IPv4-mapped IPv6) into h: 0 when a
 * is neither. */
static int host_of(const struct sockaddr_storage *a, uint8_t h[16])
{
	memset(h, 0, 16);
	if (a->ss_family == AF_INET) {
		h[10] = h[11] = 0xff;
		memcpy(h + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
		return 1;
	}
	if (a->ss_family == AF_INET6) {
		memcpy(h, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
		return 1;
	}
	return 0;
}

static int same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	uint8_t x[16], y[16];

	return host_of(a, x) && host_of(b, y) && !memcmp(x, y, 16);
}

static const char *host_str(const struct sockaddr_storage *a, char *buf, size_t n)
{
	const void *ad = a->ss_family == AF_INET6
		? (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr
		: (const void *)&((const struct sockaddr_in *)a)->sin_addr;

	if (!inet_ntop(a->ss_family, ad, buf, (socklen_t)n))
		snprintf(buf, n, "an address of family %d", a->ss_family);
	return buf;
}

/*
 * Counts a request from `from` refused for want of room (why). The first of
 * a period is to be logged: line is set and 1 returned (the caller logs it
 * once the lock is dropped); those that follow within log_ms are counted
 * quietly, the latest kept for the summary. With lock.
 */
static int crowded(struct rlink_node *n, const struct sockaddr_storage *from,
		   const char *why, char *line, size_t len)
{
	char h[INET6_ADDRSTRLEN], what[sizeof(n->log.last)];

	ctr_add(&n->ctr.crowded, 1);
	host_str(from, h, sizeof(h));
	snprintf(what, sizeof(what), "%s: %s", h, why);
	if (!log_limit_note(&n->log, n->lim.log_ms, what))
		return 0;
	snprintf(line, len, "rdma: refused a connection from %s: %s (more are counted "
		 "in links_refused and logged as one line per %u ms)", h, why, n->lim.log_ms);
	return 1;
}

/* Logs the summary of the requests refused quietly, once their period has
 * ended (or now, with force). */
static void crowded_summary(struct rlink_node *n, int force)
{
	char last[sizeof(n->log.last)];

	pthread_mutex_lock(&n->lock);
	uint64_t q = log_limit_due(&n->log, n->lim.log_ms, force, last, sizeof(last), NULL);
	pthread_mutex_unlock(&n->lock);
	if (q)
		kvt_log(KVT_LOG_WARN, "rdma: refused %llu more connection%s for want of room "
			"within %u ms; the latest from %s", (unsigned long long)q,
			q == 1 ? "" : "s", n->lim.log_ms, last);
}

static void on_request(struct rlink_node *n, struct rlink_ev *ev)
{
	unsigned cap = 0, same = 0, slot = RLINK_ACCEPTED_MAX;
	char why[96] = "", line[384];
	void *qp = NULL;
	int log = 0;

	/* the members-only rule, before any queue pair exists; counted
	 * before the dialler can learn of the refusal, and not logged here:
	 * admit reports it (the peer tier's, rate-limited, so that strangers
	 * cannot fill the log) */
	if (!n->admit(n->arg, (const struct sockaddr *)&ev->from)) {
		ctr_add(&n->ctr.refused, 1);
		n->ops->reject(n->dev, ev->req);
		return;
	}
	if (n->lim.per_host)
		cap = n->lim.per_host(n->arg, (const struct sockaddr *)&ev->from);
	pthread_mutex_lock(&n->lock);
	for (unsigned i = 0; i < RLINK_ACCEPTED_MAX; i++)
		if (!n->accepted[i].qp)
			slot = slot < i ? slot : i;
		else if (cap && same_host(&n->accepted[i].from, &ev->from))
			same++;
	/* room for every host: one cannot take every place */
	if (cap && same >= cap)
		snprintf(why, sizeof(why), "%u queue pairs open from that host, its cap", same);
	else if (slot == RLINK_ACCEPTED_MAX)
		snprintf(why, sizeof(why), "%u queue pairs open, the most at once",
			 RLINK_ACCEPTED_MAX);
	if (why[0]) {
		log = crowded(n, &ev->from, why, line, sizeof(line));
		ctr_add(&n->ctr.refused, 1);
	} else if (n->ops->accept(n->dev, ev->req, &qp) == 0) {
		n->accepted[slot].qp = qp;
		n->accepted[slot].from = ev->from;
		ctr_add(&n->ctr.accepted, 1);
	}
	pthread_mutex_unlock(&n->lock);
	if (why[0])
		n->ops->reject(n->dev, ev->req);
	if (log)
		kvt_log(KVT_LOG_WARN, "%s", line);
}

static void on_gone(struct rlink_node *n, void *qp)
{
	int found = 0;

	pthread_mutex_lock(&n->lock);
	for (unsigned i = 0; i < RLINK_ACCEPTED_MAX; i++)
		if (n->accepted[i].qp == qp) {
			n->accepted[i].qp = NULL;
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
		crowded_summary(n, 0);
	}
	return NULL;
}

int rlink_node_open(const struct rlink_ops *ops, const struct sockaddr *self,
		    int (*admit)(void *arg, const struct sockaddr *from), void *arg,
		    struct rlink_node **out)
{
	return rlink_node_open_limited(ops, self, admit, arg, NULL, out);
}

int rlink_node_open_limited(const struct rlink_ops *ops, const struct sockaddr *self,
			    int (*admit)(void *arg, const struct sockaddr *from),
			    void *arg, const struct rlink_limits *lim,
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
	if (lim)
		n->lim = *lim;
	if (!n->lim.log_ms)
		n->lim.log_ms = LOG_MS_DEFAULT;
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
	crowded_summary(n, 1);
	for (unsigned i = 0; i < RLINK_ACCEPTED_MAX; i++)
		if (n->accepted[i].qp)
			n->ops->drop(n->accepted[i].qp);
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
