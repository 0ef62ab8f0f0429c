/*
 * fabric.c - the in-process RDMA fabric of fabric.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric.h"
#include "internal.h"

struct fabric F = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };


void fabric_reset(void)
{
	pthread_mutex_lock(&F.lock);
	memset(F.dev, 0, sizeof(F.dev));
	memset(F.mr, 0, sizeof(F.mr));
	F.fail_status_at = F.refuse_post = F.reset_after = F.stall = F.fail_reg_at = 0;
	F.nodev = 0;
	F.wrs = F.signalled = F.posts = F.max_chain = F.regs = 0;
	F.server_qps = F.server_drops = F.max_outstanding = F.outstanding = 0;
	F.dialled_drops = F.slow_ms = 0;
	F.gone_dev = NULL;
	F.gone_qp = NULL;
	pthread_mutex_unlock(&F.lock);
}

/* Waits on F.cv (with F.lock) until signalled or ms passed. */
static void wait_cv(int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&F.cv, &F.lock, &ts);
}

static int f_listen(const struct sockaddr *self, void **dev)
{
	pthread_mutex_lock(&F.lock);
	if (F.nodev) {
		pthread_mutex_unlock(&F.lock);
		return kvt_fail(-ENODEV, "rdma: no RDMA device serves that address");
	}
	for (int i = 0; i < DEVS; i++)
		if (!F.dev[i].live) {
			F.dev[i] = (struct fdev){ .live = 1 };
			memcpy(&F.dev[i].self, self, sizeof(struct sockaddr_in));
			*dev = &F.dev[i];
			pthread_mutex_unlock(&F.lock);
			return 0;
		}
	pthread_mutex_unlock(&F.lock);
	return -ENOMEM;
}

static void f_unlisten(void *dev)
{
	pthread_mutex_lock(&F.lock);
	((struct fdev *)dev)->live = 0;
	pthread_mutex_unlock(&F.lock);
}

static int f_event(void *dev, int wait_ms, struct rlink_ev *ev)
{
	struct fdev *d = dev;

	pthread_mutex_lock(&F.lock);
	if (!d->has_pending && F.gone_dev != d)
		wait_cv(wait_ms < 10 ? wait_ms : 10); /* a dial wakes it */
	if (!d->has_pending && F.gone_dev != d) {
		pthread_mutex_unlock(&F.lock);
		return 0;
	}
	if (F.gone_dev == d) {
		ev->type = RLINK_EV_GONE;
		ev->qp = F.gone_qp;
		F.gone_dev = NULL;
	} else {
		*ev = d->pending;
		d->has_pending = 0;
	}
	pthread_mutex_unlock(&F.lock);
	return 0;
}

static int f_accept(void *dev, void *req, void **qp)
{
	struct freq *r = req;
	struct fqp *q = calloc(1, sizeof(*q));

	(void)dev;
	q->server = 1;
	pthread_mutex_lock(&F.lock);
	r->decided = r->accepted = 1;
	r->sqp = q;
	F.server_qps++;
	pthread_cond_broadcast(&F.cv);
	pthread_mutex_unlock(&F.lock);
	*qp = q;
	return 0;
}

static void f_reject(void *dev, void *req)
{
	struct freq *r = req;

	(void)dev;
	pthread_mutex_lock(&F.lock);
	r->decided = 1;
	pthread_cond_broadcast(&F.cv);
	pthread_mutex_unlock(&F.lock);
}

static int f_reg(void *dev, void *addr, size_t len, int flags, void **mr,
		 uint32_t *lkey, uint32_t *rkey)
{
	(void)dev;
	pthread_mutex_lock(&F.lock);
	int n = ++F.regs;
	if (n == F.fail_reg_at) {
		pthread_mutex_unlock(&F.lock);
		return -ENOMEM;
	}
	for (int i = 0; i < MRS; i++)
		if (!F.mr[i].live) {
			F.mr[i] = (struct fmr){ 1, (flags & RLINK_REMOTE_WRITE) != 0,
						!(flags & RLINK_LOCAL_ONLY), addr, len,
						++F.next_key };
			*mr = &F.mr[i];
			*lkey = *rkey = F.mr[i].key;
			pthread_mutex_unlock(&F.lock);
			return 0;
		}
	pthread_mutex_unlock(&F.lock);
	return -ENOMEM;
}

static void f_dereg(void *mr)
{
	pthread_mutex_lock(&F.lock);
	((struct fmr *)mr)->live = 0;
	pthread_mutex_unlock(&F.lock);
}

int live_mrs(void)
{
	int n = 0;
	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < MRS; i++)
		n += F.mr[i].live;
	pthread_mutex_unlock(&F.lock);
	return n;
}

/* One of F's observations, read under its lock (the node threads write some). */
int seen(const int *field)
{
	pthread_mutex_lock(&F.lock);
	int v = *field;
	pthread_mutex_unlock(&F.lock);
	return v;
}

static int f_dial(void *dev, const struct sockaddr *dst, int wait_ms, void **qp)
{
	const struct sockaddr_in *in = (const struct sockaddr_in *)dst;
	struct freq r = { .from = dev };
	struct fdev *to = NULL;

	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < DEVS; i++)
		if (F.dev[i].live && F.dev[i].self.sin_port == in->sin_port &&
		    F.dev[i].self.sin_addr.s_addr == in->sin_addr.s_addr)
			to = &F.dev[i];
	if (!to) {
		pthread_mutex_unlock(&F.lock);
		return -ECONNREFUSED;
	}
	to->pending = (struct rlink_ev){ .type = RLINK_EV_REQUEST, .req = &r };
	memcpy(&to->pending.from, &r.from->self, sizeof(struct sockaddr_in));
	to->has_pending = 1;
	pthread_cond_broadcast(&F.cv);
	uint64_t dl = kvt_now_ns() + (uint64_t)wait_ms * 1000000ull;
	while (!r.decided && kvt_now_ns() < dl)
		wait_cv(1);
	pthread_mutex_unlock(&F.lock);
	if (!r.decided)
		return -ETIMEDOUT;
	if (!r.accepted)
		return -ECONNREFUSED;
	struct fqp *q = calloc(1, sizeof(*q));
	q->peer = r.sqp;
	*qp = q;
	return 0;
}

/* Runs one work request against the fabric's memory: 0 or a status. */
int run_wr(const struct rlink_wr *w)
{
	for (int i = 0; i < MRS; i++) {
		struct fmr *m = &F.mr[i];
		if (!m->live || m->key != w->seg.rkey)
			continue;
		uint8_t *r = (uint8_t *)(uintptr_t)w->seg.remote;
		if (r < m->addr || r + w->seg.len > m->addr + m->len ||
		    (w->write && !m->writable) || !m->readable)
			return 10;
		if (w->write)
			memcpy(r, w->seg.local, w->seg.len);
		else
			memcpy(w->seg.local, r, w->seg.len);
		return 0;
	}
	return 10;                  /* IBV_WC_REM_ACCESS_ERR */
}

static int f_post(void *qp, const struct rlink_wr *w, size_t n)
{
	struct fqp *q = qp;

	pthread_mutex_lock(&F.lock);
	if (F.refuse_post || q->dropped) {
		pthread_mutex_unlock(&F.lock);
		return -EINVAL;
	}
	F.posts++;
	if ((int)n > F.max_chain)
		F.max_chain = (int)n;
	F.outstanding += (int)n;
	if (F.outstanding > F.max_outstanding)
		F.max_outstanding = F.outstanding;
	for (size_t i = 0; i < n; i++) {
		int st = 0;
		F.wrs++;
		F.signalled += w[i].signalled;
		if (F.reset_after && F.wrs > F.reset_after) {
			q->reset = 1;
			continue;
		}
		if (F.stall) {
			q->stalled[q->nstalled++] = w[i];
			continue;
		}
		if (F.wrs == F.fail_status_at)
			st = 12;            /* IBV_WC_RETRY_EXC_ERR */
		if (!st)
			st = run_wr(&w[i]);
		if (w[i].signalled || st)
			q->wc[q->nwc++] = (struct rlink_wc){ .id = w[i].id, .status = st };
	}
	pthread_mutex_unlock(&F.lock);
	return 0;
}

static int f_poll(void *qp, int wait_ms, struct rlink_wc *wc, int max)
{
	struct fqp *q = qp;

	pthread_mutex_lock(&F.lock);
	if (F.slow_ms && q->nwc && max) {
		/* a slow fabric: the completions come late */
		int ms = F.slow_ms;
		pthread_mutex_unlock(&F.lock);
		usleep((useconds_t)ms * 1000);
		pthread_mutex_lock(&F.lock);
	}
	if (q->nwc == 0) {
		int reset = q->reset;
		pthread_mutex_unlock(&F.lock);
		if (reset)
			return -ECONNRESET;
		usleep((useconds_t)(wait_ms < 5 ? wait_ms : 5) * 1000);
		return 0;
	}
	int n = q->nwc < max ? q->nwc : max;
	memcpy(wc, q->wc, sizeof(*wc) * (size_t)n);
	memmove(q->wc, q->wc + n, sizeof(*wc) * (size_t)(q->nwc - n));
	q->nwc -= n;
	for (int i = 0; i < n; i++)
		F.outstanding -= wc[i].status ? 0 : (int)wc[i].id;
	pthread_mutex_unlock(&F.lock);
	return n;
}

static void f_drop(void *qp)
{
	struct fqp *q = qp;

	pthread_mutex_lock(&F.lock);
	if (q->server)
		F.server_drops++;
	else
		F.dialled_drops++;
	pthread_mutex_unlock(&F.lock);
	free(q);
}

/* What a queue pair that was never destroyed would still do: the held-back
 * requests land now. A dropped one is gone, so nothing happens. */
void release_stalled(struct fqp *q)
{
	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < q->nstalled; i++)
		run_wr(&q->stalled[i]);
	q->nstalled = 0;
	pthread_mutex_unlock(&F.lock);
}

const struct rlink_ops fake_ops = {
	.name = "fake", .listen = f_listen, .unlisten = f_unlisten, .event = f_event,
	.accept = f_accept, .reject = f_reject, .reg = f_reg, .dereg = f_dereg,
	.dial = f_dial, .post = f_post, .poll = f_poll, .drop = f_drop,
};

