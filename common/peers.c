/*
 * peers.c - what a benchmark or a test of the peer tier needs besides the
 * library (see common.h): the rendezvous owner of a key, computed apart from
 * the library so that it can be checked against it, and loopback ports held
 * until the stores listen on them.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common.h"

unsigned common_key_owner(kvt_key k, const char *const *names, unsigned n)
{
	uint8_t b[16];
	uint64_t top = 0;
	unsigned best = 0;

	for (int i = 0; i < 8; i++) {
		b[i] = (uint8_t)(k.lo >> (8 * i));
		b[8 + i] = (uint8_t)(k.hi >> (8 * i));
	}
	for (unsigned i = 0; i < n; i++) {
		uint64_t seed = XXH3_64bits(names[i], strlen(names[i]));
		uint64_t h = XXH3_64bits_withSeed(b, sizeof(b), seed);

		if (i == 0 || h > top) {
			best = i;
			top = h;
		}
	}
	return best;
}

/* One socket bound to a fresh port of 127.0.0.1; returns the fd or -errno. */
static int hold_port(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int one = 1, fd, err;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

int common_ports_reserve(struct common_ports *p, unsigned n)
{
	unsigned k;
	int fd;

	if (!p || n > COMMON_PORTS_MAX)
		return -EINVAL;
	p->n = 0;
	for (k = 0; k < n; k++) {
		fd = hold_port(&p->port[k]);
		if (fd < 0) {
			common_ports_release(p);
			return fd;
		}
		p->fd[k] = fd;
		p->n = k + 1;
	}
	return 0;
}

void common_ports_release(struct common_ports *p)
{
	unsigned k;

	if (!p)
		return;
	for (k = 0; k < p->n; k++)
		close(p->fd[k]);
	p->n = 0;
}
