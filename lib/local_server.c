/*
 * local_server.c - the node store's Unix socket (local.socket): processes
 * of this machine attach to the store (kvt_open with "attach") and share its
 * tiers and its arena, which they map from the memfd sent at HELLO.
 *
 * Owns the socket and the threads: binding (taking over a socket file
 * nobody listens on any more), one acceptor thread that checks each
 * process's credentials and local.max_clients, and one thread per client
 * (which closes the connection when no HELLO comes within lp_hello_ms),
 * so a client that is slow to send or to read its replies holds up nobody
 * else; reading and checking frame headers, the HELLO, writing replies;
 * open, close and counters. A client's thread hands each request to
 * lsrv_serve (local_requests.c), which records what it leaves held in the
 * client's books (local_held.c); when the connection ends (exit, crash,
 * kill -9) the thread gives all of it back before closing the socket.
 * Knows nothing of what a request means beyond its header; the frames are
 * in local_proto.h, what the three files share in local_server_impl.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "local_proto.h"
#include "local_server_impl.h"
#include "stats.h"

/* --- socket I/O ------------------------------------------------------------------- */

/* Reads exactly len bytes: 0, or -1 at end of file or on error. */
static int read_full(int fd, void *p, size_t len)
{
	while (len) {
		ssize_t r = recv(fd, p, len, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p = (char *)p + r;
		len -= (size_t)r;
	}
	return 0;
}

/* Reads exactly len bytes of the client's frames, taking first what an
 * earlier read brought: 0, -1 at end of file or on error, or LP_LATE when
 * the HELLO's deadline (c->hello_deadline, 0 once it is in) passed first. */
static int conn_read(struct conn *c, void *p, size_t len)
{
	while (len) {
		size_t k = c->rend - c->rpos;
		if (k > len)
			k = len;
		if (k) {
			memcpy(p, c->rb + c->rpos, k);
			c->rpos += k;
			p = (char *)p + k;
			len -= k;
			if (!len)
				break;
		}
		if (len >= sizeof(c->rb)) /* a large payload: straight there */
			return read_full(c->fd, p, len);
		if (c->hello_deadline && !lp_wait_readable(c->fd, c->hello_deadline))
			return LP_LATE;
		lp_spin_readable(c->fd, c->srv->spin_us);
		ssize_t r = recv(c->fd, c->rb, sizeof(c->rb), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c->rpos = 0;
		c->rend = (size_t)r;
	}
	return 0;
}

/* Set on this connection's thread (one per client) when a reply could not
 * be sent: the client went or stopped reading, which is not its frame
 * being malformed. */
static __thread int reply_lost;

/* Sends a reply in the frames of protocol version: header, the i32 status,
 * then body; with the nfds descriptors of fds passed along. 0 or -1. */
static int send_frame(int sock, uint8_t version, int type, int32_t status,
		      const void *body, size_t blen, const int *fds, int nfds)
{
	struct lp_hdr h = { LP_MAGIC, version, (uint8_t)(type | LP_REPLY),
			    (uint32_t)(sizeof(status) + blen) };
	struct iovec iov[3] = { { &h, sizeof(h) }, { &status, sizeof(status) },
				{ (void *)body, blen } };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = blen ? 3 : 2 };

	if (nfds > 0) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	int r = lp_send_all(sock, &m);
	if (r)
		reply_lost = 1;
	return r;
}

/* A reply of this protocol version (send_frame). */
static int send_reply_fds(int sock, int type, int32_t status, const void *body,
			  size_t blen, const int *fds, int nfds)
{
	return send_frame(sock, LP_VERSION, type, status, body, blen, fds, nfds);
}

int lsrv_send_reply(int sock, int type, int32_t status, const void *body,
		    size_t blen, int fd)
{
	return send_reply_fds(sock, type, status, body, blen, &fd, fd >= 0);
}

/* A failure reply: the status and kvt_last_error()'s text. */
int lsrv_send_error(int sock, int type, int err)
{
	const char *t = kvt_last_error();
	size_t n = strlen(t);

	return lsrv_send_reply(sock, type, err, t, n > LP_TEXT_MAX ? LP_TEXT_MAX : n, -1);
}

/* Reads a frame header and checks it; the payload's length in *len. 0, -2
 * for a malformed header, or conn_read's failure. */
static int read_header(struct conn *c, int *type, size_t *len)
{
	struct lp_hdr h;
	int r = conn_read(c, &h, sizeof(h));

	if (r)
		return r;
	if (h.magic != LP_MAGIC || h.version != LP_VERSION ||
	    h.len > lp_payload_max(c->srv->max_block))
		return -2;
	*type = h.type;
	*len = h.len;
	return 0;
}

/*
 * Refuses a HELLO of another protocol version with -EPROTONOSUPPORT and a
 * text naming both versions, in a frame of the client's version: its
 * header is the part every version shares, so the client can read why.
 */
static int refuse_version(struct conn *c, uint8_t version)
{
	char t[200];
	int n = snprintf(t, sizeof(t), "the node store at %s speaks version %u of the "
			 "local protocol, this process %u", c->srv->path, LP_VERSION,
			 (unsigned)version);

	kvt_log(KVT_LOG_WARN, "local: process %d (uid %u) speaks version %u of the local "
		"protocol, this node store %u: refused", (int)c->pid, (unsigned)c->uid,
		(unsigned)version, LP_VERSION);
	send_frame(c->fd, version, LP_HELLO, -EPROTONOSUPPORT, t,
		   n > 0 && (size_t)n < sizeof(t) ? (size_t)n : strlen(t), NULL, 0);
	return -1;
}

/* The HELLO: the client's version, answered with the arena's memfd. It
 * must be in within lp_hello_ms of the accept (c->hello_deadline), or the
 * connection is dropped, so processes that connect and say nothing cannot
 * hold the places of local.max_clients. A HELLO of another version is
 * refused in words the client can read. */
static int hello(struct conn *c)
{
	struct lp_hdr h;
	uint32_t version = 0;
	int r = conn_read(c, &h, sizeof(h));

	if (!r) {
		if (h.magic != LP_MAGIC || h.type != LP_HELLO || h.len != 4)
			return -2;
		r = conn_read(c, &version, 4);
		if (r && r != LP_LATE)
			return -2;
		if (!r && (h.version != LP_VERSION || version != LP_VERSION))
			return h.version == version ? refuse_version(c, h.version) : -2;
	}
	if (r == LP_LATE) {
		kvt_log(KVT_LOG_WARN, "local: process %d (uid %u) sent no HELLO within %u ms; "
			"its connection is closed", (int)c->pid, (unsigned)c->uid,
			(unsigned)lp_hello_ms);
		return -1;
	}
	if (r)
		return r;
	c->hello_deadline = 0; /* later frames wait as long as the client takes */
	struct lp_hello hl = {
		.version = LP_VERSION, .lease_ms = c->srv->lease_ms,
		.arena_len = c->srv->arena_len, .max_block = c->srv->max_block,
		.pin_ms = c->srv->pin_ms, .max_keys = LP_KEYS_MAX,
		.dir_len = c->srv->dir_fd >= 0 ? c->srv->dir_len : 0,
		.spin_us = c->srv->spin_us,
	};
	int fds[2] = { c->srv->arena_fd, c->srv->dir_fd };
	return send_reply_fds(c->fd, LP_HELLO, 0, &hl, sizeof(hl), fds,
			      c->srv->dir_fd >= 0 ? 2 : 1);
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct local_server *srv = c->srv;
	int r = hello(c);

	while (r == 0) {
		int type;
		size_t len;

		if ((r = read_header(c, &type, &len)))
			break;
		if (len > c->cap) {
			free(c->buf);
			c->cap = 0;
			if (!(c->buf = malloc(len))) {
				r = -1;
				break;
			}
			c->cap = len;
		}
		if (conn_read(c, c->buf, len)) {
			r = -1;
			break;
		}
		atomic_fetch_add_explicit(&srv->requests, 1, memory_order_relaxed);
		reply_lost = 0;
		r = lsrv_serve(c, type, c->buf, len) ? (reply_lost ? -1 : -2) : 0;
		/* A large PUT's buffer is not kept for a client that idles. */
		if (c->cap > (1u << 20)) {
			free(c->buf);
			c->buf = NULL;
			c->cap = 0;
		}
	}
	if (r == -2) {
		atomic_fetch_add(&srv->malformed, 1);
		kvt_log(KVT_LOG_WARN, "local: process %d (uid %u) sent a malformed frame; "
			"its connection is closed", (int)c->pid, (unsigned)c->uid);
	}
	/* Everything the client held goes back before its socket closes, so
	 * once it sees the end, the store shows nothing held for it. */
	lsrv_release_all(c);
	free(c->buf);
	c->buf = NULL;
	pthread_mutex_lock(&srv->lock);
	close(c->fd);
	c->fd = -1;
	struct conn **pp = &srv->conns;
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	c->next = srv->dead;
	srv->dead = c;
	srv->nconns--;
	pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
	/* Wake the acceptor to join this thread. */
	ssize_t w = write(srv->wake[1], "", 1);
	(void)w; /* a full pipe already wakes it */
	return NULL;
}

/* Joins the threads of closed connections. Takes srv->lock. */
static void reap_dead(struct local_server *srv)
{
	pthread_mutex_lock(&srv->lock);
	struct conn *d = srv->dead;
	srv->dead = NULL;
	pthread_mutex_unlock(&srv->lock);
	while (d) {
		struct conn *x = d->next;
		pthread_join(d->th, NULL);
		free(d);
		d = x;
	}
}

/* --- accepting --------------------------------------------------------------------- */

static int allowed(const struct local_server *srv, const struct ucred *cr)
{
	if (cr->uid == geteuid())
		return 1;
	if ((srv->mode & 0070) && cr->gid == getegid())
		return 1;
	for (unsigned i = 0; i < srv->nuids; i++)
		if (srv->uids[i] == cr->uid)
			return 1;
	for (unsigned i = 0; i < srv->ngids; i++)
		if (srv->gids[i] == cr->gid)
			return 1;
	return 0;
}

/* Answers a client's HELLO-to-be with a refusal and closes it. */
static void refuse(struct local_server *srv, int fd, int err, const char *why)
{
	size_t n = strlen(why);

	atomic_fetch_add(&srv->refused, 1);
	struct lp_hdr h = { LP_MAGIC, LP_VERSION, LP_HELLO | LP_REPLY, (uint32_t)(4 + n) };
	int32_t st = err;
	unsigned char b[sizeof(h) + 4 + 256];
	if (n > 256)
		n = 256;
	h.len = (uint32_t)(4 + n);
	memcpy(b, &h, sizeof(h));
	memcpy(b + sizeof(h), &st, 4);
	memcpy(b + sizeof(h) + 4, why, n);
	ssize_t w = send(fd, b, sizeof(h) + 4 + n, MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)w; /* a client that cannot take it learns from the close */
	close(fd);
}

static void accept_one(struct local_server *srv)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	char why[256];
	int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || !allowed(srv, &cr)) {
		snprintf(why, sizeof(why), "the node store at %s does not serve uid %u gid %u "
			 "(local.uids, local.gids)", srv->path, (unsigned)cr.uid, (unsigned)cr.gid);
		kvt_log(KVT_LOG_WARN, "local: refused process %d: uid %u gid %u is not allowed",
			(int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
		refuse(srv, fd, -EACCES, why);
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	pthread_mutex_lock(&srv->lock);
	int full = srv->nconns >= srv->max_clients;
	if (c && !full) {
		c->srv = srv;
		c->fd = fd;
		c->uid = cr.uid;
		c->pid = cr.pid;
		c->free_head = NIL;
		c->hello_deadline = lp_hello_deadline();
		if (pthread_create(&c->th, NULL, conn_main, c) == 0) {
			c->next = srv->conns;
			srv->conns = c;
			srv->nconns++;
			atomic_fetch_add(&srv->accepted, 1);
			pthread_mutex_unlock(&srv->lock);
			return;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	free(c);
	snprintf(why, sizeof(why), "the node store at %s %s", srv->path,
		 full ? "serves local.max_clients processes already" : "is out of memory");
	refuse(srv, fd, full ? -EUSERS : -ENOMEM, why);
}

static void *acceptor_main(void *arg)
{
	struct local_server *srv = arg;
	struct pollfd pf[2] = { { srv->lfd, POLLIN, 0 }, { srv->wake[0], POLLIN, 0 } };

	for (;;) {
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents) {
			char b[64];
			ssize_t r = read(srv->wake[0], b, sizeof(b));
			(void)r;
		}
		reap_dead(srv);
		pthread_mutex_lock(&srv->lock);
		int stop = srv->stopping;
		pthread_mutex_unlock(&srv->lock);
		if (stop)
			break;
		if (pf[0].revents & POLLIN)
			accept_one(srv);
	}
	return NULL;
}

/* Binds path, taking over a socket file nobody listens on any more. */
static int bind_socket(struct local_server *srv)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct stat st;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", srv->path);
	srv->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (srv->lfd < 0)
		return kvt_fail(-errno, "local.socket: socket: %s", strerror(errno));
	if (lstat(srv->path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return kvt_fail(-EEXIST, "local.socket: %s exists and is not a socket",
					srv->path);
		int t = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int live = t >= 0 && connect(t, (struct sockaddr *)&a, sizeof(a)) == 0;
		if (t >= 0)
			close(t);
		if (live)
			return kvt_fail(-EADDRINUSE, "local.socket: another store serves %s",
					srv->path);
		unlink(srv->path); /* left by a store that is gone */
	}
	/* The socket file is made with the mode asked, never wider. */
	mode_t old = umask(0777 & ~srv->mode);
	int rc = bind(srv->lfd, (struct sockaddr *)&a, sizeof(a));
	int e = errno;
	umask(old);
	if (rc)
		return kvt_fail(-e, "local.socket: bind %s: %s", srv->path, strerror(e));
	if (chmod(srv->path, srv->mode) || lstat(srv->path, &st)) {
		e = errno;
		unlink(srv->path);
		return kvt_fail(-e, "local.socket: chmod %s: %s", srv->path, strerror(e));
	}
	srv->dev = st.st_dev;
	srv->ino = st.st_ino;
	if (listen(srv->lfd, 128)) {
		e = errno;
		unlink(srv->path);
		return kvt_fail(-e, "local.socket: listen %s: %s", srv->path, strerror(e));
	}
	return 0;
}

int local_server_open(const struct local_opts *o, kvt_store *s, int arena_fd,
		      struct local_server **out)
{
	struct local_server *srv;
	void *base = NULL;
	size_t alen = 0;
	int rc;

	*out = NULL;
	if (!o || !o->socket || !o->socket[0])
		return kvt_fail(-EINVAL, "local.socket: no path to serve on");
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return kvt_fail(-ENOMEM, "local.socket: out of memory");
	kvt_arena(s, &base, &alen);
	srv->s = s;
	srv->base = base;
	srv->arena_len = alen;
	srv->arena_fd = arena_fd;
	srv->dir_fd = store_directory(s, &srv->dir_len);
	srv->max_block = o->max_block;
	srv->lease_ms = o->lease_ms;
	srv->lease_ns = (uint64_t)o->lease_ms * 1000000ull;
	srv->pin_ms = o->pin_ms;
	srv->max_clients = o->max_clients;
	srv->max_held = o->max_held;
	srv->spin_us = o->spin_us;
	srv->mode = o->mode;
	srv->lfd = srv->wake[0] = srv->wake[1] = -1;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->cond, NULL);
	pthread_mutex_init(&srv->lease_lock, NULL);
	srv->path = o->socket ? strdup(o->socket) : NULL;
	srv->nuids = o->nuids;
	srv->ngids = o->ngids;
	srv->uids = calloc(srv->nuids + 1, sizeof(uint32_t));
	srv->gids = calloc(srv->ngids + 1, sizeof(uint32_t));
	if (!srv->path || !srv->uids || !srv->gids) {
		rc = kvt_fail(-ENOMEM, "local.socket: out of memory");
		goto fail;
	}
	if (srv->nuids)
		memcpy(srv->uids, o->uids, srv->nuids * sizeof(uint32_t));
	if (srv->ngids)
		memcpy(srv->gids, o->gids, srv->ngids * sizeof(uint32_t));
	if (arena_fd < 0) {
		rc = kvt_fail(-EINVAL, "local.socket: the arena is not shared");
		goto fail;
	}
	if (pipe2(srv->wake, O_CLOEXEC | O_NONBLOCK)) {
		rc = kvt_fail(-errno, "local.socket: pipe: %s", strerror(errno));
		goto fail;
	}
	if ((rc = bind_socket(srv)))
		goto fail;
	/* Set before any client is served: their threads read the store's
	 * statistics, which name the server. */
	*out = srv;
	if (pthread_create(&srv->acceptor, NULL, acceptor_main, srv)) {
		*out = NULL;
		unlink(srv->path);
		rc = kvt_fail(-ENOMEM, "local.socket: cannot start the acceptor thread");
		goto fail;
	}
	srv->acceptor_started = 1;
	kvt_log(KVT_LOG_INFO, "local: serving attached processes on %s", srv->path);
	return 0;
fail:
	local_server_close(srv);
	return rc;
}

void local_server_close(struct local_server *srv)
{
	struct stat st;

	if (!srv)
		return;
	if (srv->acceptor_started) {
		pthread_mutex_lock(&srv->lock);
		srv->stopping = 1;
		pthread_mutex_unlock(&srv->lock);
		ssize_t w = write(srv->wake[1], "", 1);
		(void)w;
		pthread_join(srv->acceptor, NULL);
		/* Wake every client's thread; each releases what its client
		 * holds and leaves. */
		pthread_mutex_lock(&srv->lock);
		for (struct conn *c = srv->conns; c; c = c->next)
			shutdown(c->fd, SHUT_RDWR);
		while (srv->nconns)
			pthread_cond_wait(&srv->cond, &srv->lock);
		pthread_mutex_unlock(&srv->lock);
		reap_dead(srv);
		if (lstat(srv->path, &st) == 0 && st.st_dev == srv->dev && st.st_ino == srv->ino)
			unlink(srv->path);
	}
	if (srv->lfd >= 0)
		close(srv->lfd);
	for (int i = 0; i < 2; i++)
		if (srv->wake[i] >= 0)
			close(srv->wake[i]);
	lsrv_kmap_free(&srv->lease_map);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->cond);
	pthread_mutex_destroy(&srv->lease_lock);
	free(srv->path);
	free(srv->uids);
	free(srv->gids);
	free(srv);
}

void local_server_stats(struct local_server *srv, const struct stat_visitor *v)
{
	pthread_mutex_lock(&srv->lock);
	unsigned n = srv->nconns;
	pthread_mutex_unlock(&srv->lock);
	stat_int(v, "clients", n);
	stat_int(v, "max_clients", srv->max_clients);
	stat_int(v, "clients_accepted", (int64_t)ctr_get(&srv->accepted));
	stat_int(v, "clients_refused", (int64_t)ctr_get(&srv->refused));
	stat_int(v, "malformed_frames", (int64_t)ctr_get(&srv->malformed));
	stat_int(v, "requests", (int64_t)ctr_get(&srv->requests));
	stat_int(v, "directory_hits", (int64_t)ctr_get(&srv->directory_hits));
	stat_int(v, "checksum_refusals", (int64_t)ctr_get(&srv->checksum_refusals));
	stat_int(v, "leased_blocks", (int64_t)ctr_get(&srv->leased_blocks));
	stat_int(v, "pinned_blocks", (int64_t)ctr_get(&srv->pinned_blocks));
	stat_int(v, "pinned_bytes", (int64_t)ctr_get(&srv->pinned_bytes));
	stat_int(v, "reserved_blocks", (int64_t)ctr_get(&srv->reserved_blocks));
	stat_int(v, "reserved_bytes", (int64_t)ctr_get(&srv->reserved_bytes));
}
