/*
 * peer_net.c - the peer tier's TCP sockets: member addresses resolved and
 * compared by host, this node's own source address bound before a connect,
 * bounded non-blocking I/O that gives up at a deadline or when the tier
 * closes, and the socket options of every connection. Knows nothing about
 * frames, members' roles or the local tiers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_int.h"
#include "stats.h"

/* Resolves "host:port" ([v6]:port too) into sa. */
int peer_resolve(const char *what, const char *addr, struct sockaddr_storage *sa,
		   socklen_t *salen)
{
	char host[256], port[8];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *res = NULL;
	size_t hl;

	if (!colon || strlen(colon + 1) >= sizeof(port))
		return kvt_fail(-EINVAL, "%s: \"%s\" is not host:port", what, addr);
	hl = (size_t)(colon - addr);
	if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']') {
		addr++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return kvt_fail(-EINVAL, "%s: \"%s\" has no host", what, addr);
	memcpy(host, addr, hl);
	host[hl] = 0;
	strcpy(port, colon + 1);
	int e = getaddrinfo(host, port, &hints, &res);
	if (e || !res) {
		if (res)
			freeaddrinfo(res);
		return kvt_fail(-EINVAL, "%s: cannot resolve \"%s\": %s", what, host,
				gai_strerror(e));
	}
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* The same host (address without port). */
int peer_same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family == AF_INET && b->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6 && b->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	/* an IPv4 peer seen on an IPv6 socket as ::ffff:a.b.c.d */
	const struct sockaddr_storage *v6 = a->ss_family == AF_INET6 ? a : b;
	const struct sockaddr_storage *v4 = a->ss_family == AF_INET ? a : b;
	if (v6->ss_family != AF_INET6 || v4->ss_family != AF_INET)
		return 0;
	const uint8_t *x = ((const struct sockaddr_in6 *)v6)->sin6_addr.s6_addr;
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return !memcmp(x, pre, 12) &&
	       !memcmp(x + 12, &((const struct sockaddr_in *)v4)->sin_addr.s_addr, 4);
}

/* 1 for the wildcard address (0.0.0.0 or ::). */
int peer_any_host(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return a->ss_family == AF_INET6 &&
	       IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* The host of a, in numbers, for messages. */
const char *peer_host_str(const struct sockaddr_storage *a, char *buf, size_t n)
{
	if (getnameinfo((const struct sockaddr *)a, sizeof(*a), buf, (socklen_t)n, NULL, 0,
			NI_NUMERICHOST))
		snprintf(buf, n, "?");
	return buf;
}

/*
 * Binds fd to this node's own address before it connects, so that the
 * member sees the source address it lists for this node, whichever
 * interface the route leaves by. The port is left for connect to choose.
 */
int peer_bind_source(const struct peer_tier *p, int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	return bind(fd, (const struct sockaddr *)&p->src, p->srclen) < 0 ? -errno : 0;
}

/* A bulk receive wakes only once this many bytes (or all that is left)
 * wait in the socket (SO_RCVLOWAT), not for every segment. */
#define BULK_LOWAT (256u << 10)

/*
 * Moves n bytes on a non-blocking fd before deadline (0: no deadline, but
 * give up once wake is readable). more: a send that more bytes follow at
 * once (MSG_MORE: no segment of its own). lowat (NULL: none): a receive
 * that wakes for large pieces only; *lowat is the socket's SO_RCVLOWAT,
 * which this sets as it goes. Returns 0, -ETIMEDOUT, -ECONNRESET (peer
 * closed), -ECANCELED (closing) or -errno.
 */
static int xfer(int fd, void *buf, size_t n, int out, uint64_t deadline, int wake,
		int more, int *lowat)
{
	char *c = buf;

	while (n) {
		ssize_t r = out ? send(fd, c, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0))
				: recv(fd, c, n, 0);
		if (r > 0) {
			c += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == EPIPE ? -ECONNRESET : -errno;
		if (lowat) {
			int lw = n < BULK_LOWAT ? (int)n : (int)BULK_LOWAT;
			if (lw != *lowat &&
			    !setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lw, sizeof(lw)))
				*lowat = lw;
		}
		struct pollfd pf[2] = { { .fd = fd, .events = out ? POLLOUT : POLLIN },
					{ .fd = wake, .events = POLLIN } };
		int t = deadline ? kvt_ms_until(deadline, 1000000) : -1;
		if (deadline && t == 0)
			return -ETIMEDOUT;
		int pr = poll(pf, wake >= 0 ? 2 : 1, t);
		if (pr < 0 && errno != EINTR)
			return -errno;
		if (pr == 0)
			return -ETIMEDOUT;
		if (wake >= 0 && (pf[1].revents & POLLIN))
			return -ECANCELED;
	}
	return 0;
}

int peer_xfer(int fd, void *buf, size_t n, int out, uint64_t deadline, int wake)
{
	return xfer(fd, buf, n, out, deadline, wake, 0, NULL);
}

int peer_send_more(int fd, const void *buf, size_t n, uint64_t deadline)
{
	return xfer(fd, (void *)buf, n, 1, deadline, -1, 1, NULL);
}

int peer_recv_bulk(int fd, void *buf, size_t n, uint64_t deadline)
{
	int lowat = 1;
	int e = xfer(fd, buf, n, 0, deadline, -1, 0, &lowat);

	if (lowat != 1) {
		lowat = 1;
		setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
	}
	return e;
}

void peer_sock_opts(int fd)
{
	int one = 1, idle = 10, intvl = 5, cnt = 3;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a member host that vanishes without a FIN frees its connection (and
	 * the server's slot) within about 25 s */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}
