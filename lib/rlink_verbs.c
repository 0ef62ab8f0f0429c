/*
 * rlink_verbs.c - the device seam of rlink.h over libibverbs and librdmacm:
 * a listening connection id bound to the node's own address, one protection
 * domain for the device behind it, RC queue pairs created at accept and at
 * dial (the dial's address resolution bound to the node's own address, so
 * the connection leaves through the member's own NIC), completion queues
 * waited on through a completion channel, and disconnects seen on each
 * connection's event channel. Knows nothing about links, deadlines or
 * counters (rlink.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "internal.h"
#include "rlink.h"

#define RD_ATOMIC 16               /* RDMA READs in flight per queue pair */
#define CQ_DEPTH (RLINK_DEPTH + 16)

struct vdev {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct sockaddr_storage self;
	uint8_t rd_atomic;
};

struct vqp {
	struct vdev *dev;
	struct rdma_cm_id *id;
	struct rdma_event_channel *ch;   /* a dialled connection's own; NULL when accepted */
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	int connected;
};

static socklen_t sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					 : sizeof(struct sockaddr_in);
}

static const char *sa_str(const struct sockaddr *sa, char *buf, size_t len)
{
	const void *a = sa->sa_family == AF_INET6
		? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
		: (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
	if (!inet_ntop(sa->sa_family, a, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

static int nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static int v_listen(const struct sockaddr *self, void **out)
{
	struct vdev *d = calloc(1, sizeof(*d));
	struct ibv_device_attr attr;
	char ab[INET6_ADDRSTRLEN];
	int e = 0;

	*out = NULL;
	if (!d)
		return -ENOMEM;
	memcpy(&d->self, self, sa_len(self));
	sa_str(self, ab, sizeof(ab));
	d->ch = rdma_create_event_channel();
	if (!d->ch)
		e = kvt_fail(errno == ENOENT || errno == ENODEV ? -ENODEV : -errno,
			     "rdma: no RDMA connection manager (%s): is rdma_ucm loaded?",
			     strerror(errno));
	if (!e && (e = nonblock(d->ch->fd)) == 0 &&
	    rdma_create_id(d->ch, &d->id, NULL, RDMA_PS_TCP))
		e = kvt_fail(-errno, "rdma: rdma_create_id: %s", strerror(errno));
	if (!e && rdma_bind_addr(d->id, (struct sockaddr *)&d->self))
		e = kvt_fail(errno == EADDRNOTAVAIL || errno == ENODEV ? -ENODEV : -errno,
			     "rdma: cannot bind to %s: %s", ab, strerror(errno));
	if (!e && !d->id->verbs)
		e = kvt_fail(-ENODEV, "rdma: no RDMA device serves %s", ab);
	if (!e && rdma_listen(d->id, 64))
		e = kvt_fail(-errno, "rdma: cannot listen on %s: %s", ab, strerror(errno));
	if (!e && !(d->pd = ibv_alloc_pd(d->id->verbs)))
		e = kvt_fail(-ENOMEM, "rdma: cannot allocate a protection domain");
	if (!e) {
		d->rd_atomic = RD_ATOMIC;
		if (!ibv_query_device(d->id->verbs, &attr)) {
			int m = attr.max_qp_rd_atom < attr.max_qp_init_rd_atom
				? attr.max_qp_rd_atom : attr.max_qp_init_rd_atom;
			if (m > 0 && m < d->rd_atomic)
				d->rd_atomic = (uint8_t)m;
		}
		*out = d;
		return 0;
	}
	if (d->id)
		rdma_destroy_id(d->id);
	if (d->ch)
		rdma_destroy_event_channel(d->ch);
	free(d);
	return e;
}

static void v_unlisten(void *dev)
{
	struct vdev *d = dev;

	if (!d)
		return;
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	rdma_destroy_id(d->id);
	rdma_destroy_event_channel(d->ch);
	free(d);
}

/* Next event on ch within wait_ms: 0 with *ev, -EAGAIN when none came. */
static int next_cm_event(struct rdma_event_channel *ch, int wait_ms,
			 struct rdma_cm_event **ev)
{
	struct pollfd pf = { .fd = ch->fd, .events = POLLIN };

	if (rdma_get_cm_event(ch, ev) == 0)
		return 0;
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return -errno;
	if (wait_ms <= 0 || poll(&pf, 1, wait_ms) <= 0)
		return -EAGAIN;
	return rdma_get_cm_event(ch, ev) == 0 ? 0 : -EAGAIN;
}

static int v_event(void *dev, int wait_ms, struct rlink_ev *out)
{
	struct vdev *d = dev;
	struct rdma_cm_event *ev;

	out->type = RLINK_EV_NONE;
	if (next_cm_event(d->ch, wait_ms, &ev))
		return 0;
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		struct sockaddr *from = rdma_get_peer_addr(ev->id);
		out->type = RLINK_EV_REQUEST;
		out->req = ev->id;
		memcpy(&out->from, from, sa_len(from));
		break;
	}
	/* an accepted connection that closed, or that failed before it was
	 * established (its dialler went away in the middle of the handshake):
	 * either way its queue pair is dropped */
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		if (ev->id->context) {
			out->type = RLINK_EV_GONE;
			out->qp = ev->id->context;
			((struct vqp *)ev->id->context)->connected = 0;
		}
		break;
	default:
		break;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

/* The completion queue and the queue pair of a connection id. */
static int make_qp(struct vdev *d, struct vqp *q)
{
	struct ibv_qp_init_attr a = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = RLINK_DEPTH, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};

	q->cc = ibv_create_comp_channel(q->id->verbs);
	if (!q->cc || nonblock(q->cc->fd))
		return -ENOMEM;
	q->cq = ibv_create_cq(q->id->verbs, CQ_DEPTH, q, q->cc, 0);
	if (!q->cq)
		return -ENOMEM;
	a.send_cq = a.recv_cq = q->cq;
	if (rdma_create_qp(q->id, d->pd, &a))
		return -errno;
	q->id->context = q;
	return 0;
}

static void v_drop(void *qp)
{
	struct vqp *q = qp;

	if (!q)
		return;
	if (q->connected)
		rdma_disconnect(q->id);
	if (q->id && q->id->qp)
		rdma_destroy_qp(q->id);
	if (q->cq)
		ibv_destroy_cq(q->cq);
	if (q->cc)
		ibv_destroy_comp_channel(q->cc);
	if (q->id)
		rdma_destroy_id(q->id);
	if (q->ch)
		rdma_destroy_event_channel(q->ch);
	free(q);
}

static int v_accept(void *dev, void *req, void **out)
{
	struct vdev *d = dev;
	struct vqp *q = calloc(1, sizeof(*q));
	struct rdma_conn_param cp = { .responder_resources = d->rd_atomic,
				      .initiator_depth = d->rd_atomic };
	int e;

	*out = NULL;
	if (!q) {
		rdma_reject(req, NULL, 0);
		rdma_destroy_id(req);
		return -ENOMEM;
	}
	q->dev = d;
	q->id = req;
	e = q->id->verbs == d->id->verbs ? make_qp(d, q) : -ENODEV;
	if (!e && rdma_accept(q->id, &cp))
		e = -errno;
	if (e) {
		if (!q->id->qp)
			rdma_reject(q->id, NULL, 0);
		v_drop(q);
		return e;
	}
	q->connected = 1;
	*out = q;
	return 0;
}

static void v_reject(void *dev, void *req)
{
	(void)dev;
	rdma_reject(req, NULL, 0);
	rdma_destroy_id(req);
}

static int v_reg(void *dev, void *addr, size_t len, int flags, void **mr,
		 uint32_t *lkey, uint32_t *rkey)
{
	struct vdev *d = dev;
	int access = IBV_ACCESS_LOCAL_WRITE;

	if (!(flags & RLINK_LOCAL_ONLY))
		access |= IBV_ACCESS_REMOTE_READ |
			  (flags & RLINK_REMOTE_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0);
	struct ibv_mr *m = ibv_reg_mr(d->pd, addr, len, access);

	if (!m)
		return errno ? -errno : -ENOMEM;
	*mr = m;
	*lkey = m->lkey;
	*rkey = m->rkey;
	return 0;
}

static void v_dereg(void *mr)
{
	ibv_dereg_mr(mr);
}

/* Waits for the event that ends one step of a dial. */
static int dial_step(struct vqp *q, enum rdma_cm_event_type want, uint64_t deadline)
{
	struct rdma_cm_event *ev;

	for (;;) {
		int t = kvt_ms_until(deadline, 1 << 30);
		if (t == 0)
			return -ETIMEDOUT;
		int e = next_cm_event(q->ch, t, &ev);
		if (e == -EAGAIN)
			continue;
		if (e)
			return e;
		enum rdma_cm_event_type got = ev->event;
		int status = ev->status;
		rdma_ack_cm_event(ev);
		if (got == want)
			return 0;
		switch (got) {
		case RDMA_CM_EVENT_REJECTED:
			return -ECONNREFUSED;
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
			return status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_DISCONNECTED:
			return -ECONNREFUSED;
		default:
			continue;
		}
	}
}

static int v_dial(void *dev, const struct sockaddr *dst, int wait_ms, void **out)
{
	struct vdev *d = dev;
	struct vqp *q = calloc(1, sizeof(*q));
	struct sockaddr_storage src;
	struct rdma_conn_param cp = { .responder_resources = d->rd_atomic,
				      .initiator_depth = d->rd_atomic,
				      .retry_count = 3, .rnr_retry_count = 3 };
	uint64_t deadline = kvt_now_ns() + (uint64_t)wait_ms * 1000000ull;
	int e = 0;

	*out = NULL;
	if (!q)
		return -ENOMEM;
	q->dev = d;
	memcpy(&src, &d->self, sizeof(src));
	if (src.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&src)->sin6_port = 0;
	else
		((struct sockaddr_in *)&src)->sin_port = 0;
	q->ch = rdma_create_event_channel();
	if (!q->ch || nonblock(q->ch->fd) || rdma_create_id(q->ch, &q->id, NULL, RDMA_PS_TCP))
		e = errno ? -errno : -ENOMEM;
	if (!e && rdma_resolve_addr(q->id, (struct sockaddr *)&src, (struct sockaddr *)dst,
				    wait_ms > 0 ? wait_ms : 1))
		e = -errno;
	if (!e)
		e = dial_step(q, RDMA_CM_EVENT_ADDR_RESOLVED, deadline);
	if (!e && q->id->verbs != d->id->verbs)
		e = -ENODEV;
	if (!e && rdma_resolve_route(q->id, kvt_ms_until(deadline, 1 << 30) + 1))
		e = -errno;
	if (!e)
		e = dial_step(q, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline);
	if (!e)
		e = make_qp(d, q);
	if (!e && rdma_connect(q->id, &cp))
		e = -errno;
	if (!e)
		e = dial_step(q, RDMA_CM_EVENT_ESTABLISHED, deadline);
	if (e) {
		v_drop(q);
		return e;
	}
	q->connected = 1;
	*out = q;
	return 0;
}

static int v_post(void *qp, const struct rlink_wr *w, size_t n)
{
	struct vqp *q = qp;
	struct ibv_send_wr wr[RLINK_SIGNAL_EVERY], *bad = NULL;
	struct ibv_sge sge[RLINK_SIGNAL_EVERY];

	if (n == 0 || n > RLINK_SIGNAL_EVERY)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)w[i].seg.local,
					   .length = w[i].seg.len, .lkey = w[i].seg.lkey };
		wr[i] = (struct ibv_send_wr){
			.wr_id = w[i].id, .sg_list = &sge[i], .num_sge = 1,
			.opcode = w[i].write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
			.send_flags = w[i].signalled ? IBV_SEND_SIGNALED : 0,
			.next = i + 1 < n ? &wr[i + 1] : NULL,
		};
		wr[i].wr.rdma.remote_addr = w[i].seg.remote;
		wr[i].wr.rdma.rkey = w[i].seg.rkey;
	}
	int e = ibv_post_send(q->id->qp, wr, &bad);
	return e > 0 ? -e : e;
}

static int take(struct vqp *q, struct rlink_wc *out, int max)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(q->cq, max < 16 ? max : 16, wc);

	for (int i = 0; i < n; i++)
		out[i] = (struct rlink_wc){ .id = wc[i].wr_id, .status = (int)wc[i].status };
	return n < 0 ? -EIO : n;
}

/* A dialled connection's disconnect, noticed without waiting. */
static int gone(struct vqp *q)
{
	struct rdma_cm_event *ev;

	if (!q->ch)
		return !q->connected;
	while (next_cm_event(q->ch, 0, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
			q->connected = 0;
		rdma_ack_cm_event(ev);
	}
	return !q->connected;
}

static int v_poll(void *qp, int wait_ms, struct rlink_wc *out, int max)
{
	struct vqp *q = qp;

	if (max <= 0)
		return gone(q) ? -ECONNRESET : 0;
	int n = take(q, out, max);

	if (n)
		return n;
	if (ibv_req_notify_cq(q->cq, 0))
		return -EIO;
	n = take(q, out, max);
	if (n)
		return n;
	if (gone(q))
		return -ECONNRESET;
	struct pollfd pf[2] = { { .fd = q->cc->fd, .events = POLLIN },
				{ .fd = q->ch ? q->ch->fd : -1, .events = POLLIN } };
	if (poll(pf, 2, wait_ms) > 0 && (pf[0].revents & POLLIN)) {
		struct ibv_cq *cq;
		void *ctx;
		if (ibv_get_cq_event(q->cc, &cq, &ctx) == 0)
			ibv_ack_cq_events(cq, 1);
	}
	n = take(q, out, max);
	if (n == 0 && gone(q))
		return -ECONNRESET;
	return n;
}

const struct rlink_ops rlink_verbs_ops = {
	.name = "verbs",
	.listen = v_listen,
	.unlisten = v_unlisten,
	.event = v_event,
	.accept = v_accept,
	.reject = v_reject,
	.reg = v_reg,
	.dereg = v_dereg,
	.dial = v_dial,
	.post = v_post,
	.poll = v_poll,
	.drop = v_drop,
};
