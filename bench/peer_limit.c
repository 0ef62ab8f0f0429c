/*
 * peer_limit.c - the limit "kvbench peer" divides its loads by, measured
 * in the same run: a plain TCP stream on 127.0.0.1 moving the same bytes in
 * block-size chunks into the same buffers (TCP_NODELAY on both ends), or,
 * over RDMA, the bench's own READ stream between the two hosts through
 * rlink (the same bytes in batches of the same size). Knows nothing about
 * the stores or how the figures are reported.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "peer_cmd.h"
#include "rlink.h"

/* CPU time of this process, all threads, user and system (ns). */
uint64_t pb_process_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --- the limit: a plain TCP stream on 127.0.0.1 ------------------------------ */

struct sender {
	int lfd;
	const char *src;
	size_t bs;
	uint64_t bytes;
	int err;
};

static void set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = LOOP_TIMEOUT_S };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Accepts one connection, waits for the receiver's go byte, then sends
 * bytes in chunks of bs from src. */
static void *sender_main(void *arg)
{
	struct sender *s = arg;
	int one = 1, fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
	uint64_t left = s->bytes;
	char go;

	if (fd < 0) {
		s->err = -errno;
		return NULL;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	set_timeouts(fd);
	if (recv(fd, &go, 1, MSG_WAITALL) != 1)
		s->err = -EIO;
	while (!s->err && left) {
		size_t chunk = left < s->bs ? (size_t)left : s->bs, off = 0;

		while (off < chunk) {
			ssize_t w = send(fd, s->src + off, chunk - off, MSG_NOSIGNAL);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				s->err = w < 0 ? -errno : -EIO;
				break;
			}
			off += (size_t)w;
		}
		left -= off;
	}
	close(fd);
	return NULL;
}

/*
 * One pass of the limit: r->nblocks * r->bs bytes over a fresh loopback
 * connection, received block by block into r->dst's batch buffers in turn,
 * as a's client receives them. Bytes/s from the go byte to the last byte
 * received, or NAN; r->cpu_ns: the process CPU time over the same span.
 */
static double tcp_loop(struct run *r)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct sender s = { .lfd = -1, .src = r->src, .bs = r->bs,
			    .bytes = (uint64_t)r->nblocks * r->bs };
	pthread_t t;
	int one = 1, cfd = -1, started = 0, ok = 0;
	uint64_t got = 0, t0 = 0, t1 = 0;

	s.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s.lfd < 0 || bind(s.lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(s.lfd, (struct sockaddr *)&sa, &sl) < 0 || listen(s.lfd, 1) < 0)
		goto out;
	if (pthread_create(&t, NULL, sender_main, &s))
		goto out;
	started = 1;
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cfd < 0 || connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	set_timeouts(cfd);
	t0 = bench_now_ns();
	r->cpu_ns = pb_process_cpu_ns();
	if (send(cfd, "g", 1, MSG_NOSIGNAL) != 1)
		goto out;
	for (size_t blk = 0; got < s.bytes; blk = (blk + 1) % r->batch) {
		char *b = r->dst + blk * r->bs;
		size_t off = 0;

		while (off < r->bs) {
			ssize_t n = recv(cfd, b + off, r->bs - off, 0);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				goto out;
			off += (size_t)n;
		}
		got += off;
	}
	t1 = bench_now_ns();
	r->cpu_ns = pb_process_cpu_ns() - r->cpu_ns;
	ok = 1;
out:
	if (!ok)
		r->cpu_ns = 0;
	if (cfd >= 0)
		close(cfd); /* a sender still sending fails and ends */
	if (s.lfd >= 0)
		shutdown(s.lfd, SHUT_RDWR); /* a sender still in accept ends */
	if (started)
		pthread_join(t, NULL);
	if (s.lfd >= 0)
		close(s.lfd);
	if (!ok || s.err) {
		fprintf(stderr, "kvbench peer: the TCP loop on 127.0.0.1 failed: %s\n",
			strerror(s.err ? -s.err : errno ? errno : EIO));
		return NAN;
	}
	return (double)got / ((double)(t1 - t0 ? t1 - t0 : 1) / 1e9);
}

/* --- the limit over RDMA: READs between the two hosts ----------------------- */

static int admit_any(void *arg, const struct sockaddr *from)
{
	(void)arg;
	(void)from;
	return 1;
}

static int sockaddr_of(const char *host, unsigned port, struct sockaddr_in *sa)
{
	*sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

/*
 * One pass of the RDMA limit: b's node lends r->src (one block), a's node
 * READs it r->nblocks times into r->dst's batch buffers in turn, one
 * rlink_move of r->batch blocks at a time, as a's peer client READs a
 * batch. Bytes/s over the moves, or NAN.
 */
static double rdma_loop(const struct run *r)
{
	struct sockaddr_in sa, sb;
	struct rlink_node *na = NULL, *nb = NULL;
	struct rlink_region *rs = NULL, *rd = NULL;
	struct rlink *l = NULL;
	struct rlink_seg *seg = calloc(r->batch, sizeof(*seg));
	uint64_t busy = 0, bytes = 0;
	uint32_t lk, rk, dlk, drk;
	int e = -ENOMEM;

	if (!seg || sockaddr_of(r->host[0], r->port_loop, &sa) ||
	    sockaddr_of(r->host[1], r->port_loop, &sb))
		goto out;
	if ((e = rlink_node_open(&rlink_verbs_ops, (struct sockaddr *)&sb, admit_any, NULL, &nb)) ||
	    (e = rlink_node_open(&rlink_verbs_ops, (struct sockaddr *)&sa, admit_any, NULL, &na)) ||
	    (e = rlink_reg(nb, r->src, r->bs, 0, &rs)) ||
	    (e = rlink_reg(na, r->dst, r->batch * r->bs, 0, &rd)) ||
	    (e = rlink_keys(rs, r->src, r->bs, &lk, &rk)) ||
	    (e = rlink_keys(rd, r->dst, r->batch * r->bs, &dlk, &drk)) ||
	    (e = rlink_dial(na, (struct sockaddr *)&sb, 3000, &l)))
		goto out;
	for (size_t j = 0; j < r->batch; j++)
		seg[j] = (struct rlink_seg){ .local = r->dst + j * r->bs, .lkey = dlk,
					     .remote = (uintptr_t)r->src, .rkey = rk,
					     .len = (uint32_t)r->bs };
	for (size_t i = 0; i < r->nblocks && !e; i += r->batch) {
		uint64_t t0 = bench_now_ns();
		e = rlink_move(l, 0, seg, r->batch,
			       t0 + (uint64_t)LOOP_TIMEOUT_S * 1000000000ull);
		busy += bench_now_ns() - t0;
		bytes += r->batch * r->bs;
	}
out:
	rlink_close(l);
	rlink_unreg(rd);
	rlink_unreg(rs);
	rlink_node_close(na);
	rlink_node_close(nb);
	free(seg);
	if (e) {
		fprintf(stderr, "kvbench peer: the RDMA loop between %s and %s failed: %s (%s)\n",
			r->host[0], r->host[1], strerror(-e), kvt_last_error());
		return NAN;
	}
	return (double)bytes / ((double)(busy ? busy : 1) / 1e9);
}

double pb_limit_loop(struct run *r)
{
	r->cpu_ns = 0;
	return r->rdma ? rdma_loop(r) : tcp_loop(r);
}

/* The first software RDMA device (soft-RoCE "rxe", soft-iWARP "siw") in
 * /sys/class/infiniband, into r->soft_dev ("" when none). */
void pb_find_soft_device(struct run *r)
{
	DIR *d = opendir("/sys/class/infiniband");
	struct dirent *e;

	r->soft_dev[0] = 0;
	while (d && (e = readdir(d)))
		if (!strncmp(e->d_name, "rxe", 3) || !strncmp(e->d_name, "siw", 3)) {
			snprintf(r->soft_dev, sizeof(r->soft_dev), "%.63s", e->d_name);
			break;
		}
	if (d)
		closedir(d);
}
