/*
 * local_wait.c - reading from the other end of a node store's Unix socket
 * connection (local_proto.h) with a bound on the wait: the HELLO exchange,
 * which neither end lets the other stall for longer than lp_hello_ms. A
 * client attaching to something that accepts its connection but never
 * answers (not a node store, or one that is stopped) fails with
 * -ETIMEDOUT instead of hanging; the node store drops a connection that
 * sends no HELLO in time, so idle connections cannot hold the places of
 * local.max_clients. Also the client's connect, bounded as its HELLO is,
 * and its read of a reply and the descriptors passed with it (used for every
 * reply; after HELLO bounded by the attached store's attach_timeout_ms).
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "local_proto.h"

_Atomic unsigned lp_hello_ms = LP_HELLO_MS;

uint64_t lp_hello_deadline(void)
{
	unsigned ms = atomic_load_explicit(&lp_hello_ms, memory_order_relaxed);

	return kvt_now_ns() + (uint64_t)ms * 1000000ull;
}

int lp_send_timeout(int fd, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000,
			      .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
		return kvt_fail(-errno, "attach: SO_SNDTIMEO: %s", strerror(errno));
	return 0;
}

int lp_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	unsigned ms = atomic_load_explicit(&lp_hello_ms, memory_order_relaxed);
	int fd, e;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return kvt_fail(-errno, "attach: socket: %s", strerror(errno));
	if ((e = lp_send_timeout(fd, ms))) {
		close(fd);
		return e;
	}
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		return fd;
	e = errno;
	close(fd);
	if (e == EAGAIN || e == EINPROGRESS)
		return kvt_fail(-ETIMEDOUT, "attach: the node store at %s did not "
				"accept the connection in time (%u ms; a stopped or "
				"stuck store)", path, ms);
	return kvt_fail(-e, "attach: cannot connect to the node store at %s: %s%s",
			path, strerror(e), e == EACCES ?
			" (the socket's permissions do not let this process in)" : "");
}

int lp_wait_readable(int fd, uint64_t deadline)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	if (!deadline)
		return 1;
	for (;;) {
		int ms = kvt_ms_until(deadline, 60000);
		if (!ms)
			return poll(&pf, 1, 0) > 0;
		int r = poll(&pf, 1, ms);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return 1; /* the read that follows says how it failed */
	}
}

/* Keeps the descriptors of one recvmsg: the first two in fds[0], fds[1]
 * (which start at -1), closing any more. */
static void take_fds(struct msghdr *m, int *fds)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(sizeof(int)))
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (i < 2 && fds[i] < 0)
				fds[i] = fd;
			else
				close(fd); /* more than a HELLO answer has */
		}
	}
}

ssize_t lp_recv_some(int sock, void *p, size_t need, size_t cap, int *fds,
		     uint64_t deadline)
{
	size_t got = 0;

	while (got < need) {
		union {
			char buf[CMSG_SPACE(2 * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = { (char *)p + got, cap - got };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		if (fds) {
			m.msg_control = u.buf;
			m.msg_controllen = sizeof(u.buf);
		}
		if (!lp_wait_readable(sock, deadline))
			return LP_LATE;
		ssize_t r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		if (fds)
			take_fds(&m, fds);
		got += (size_t)r;
	}
	return (ssize_t)got;
}
