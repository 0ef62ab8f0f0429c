/*
 * local_client.c - a store attached to the node store's Unix socket
 * (kvt_open with "attach"): every call but a get of a block in RAM is a
 * request to the node store (local_proto.h), on one connection shared by
 * the process's threads; the node store's arena is mapped here from the
 * memfd it sent, so block bytes move by one copy between the caller's
 * buffer and the shared arena and the slot calls hand out addresses in
 * this mapping.
 *
 * A get looks the key up first in the node store's directory of RAM blocks
 * (ram_dir.h, mapped read-only from the second memfd of the HELLO answer):
 * when it names the block, the bytes are copied straight from the arena and
 * kept only if the directory entry did not change during the copy (the
 * node store unpublishes a block before its extent can be freed or
 * reused), so a RAM hit costs no round trip. Such a hit is told to the
 * node store later: its key waits here (at most LC_HITS of them) for the
 * process's next request, which carries it in front of itself, or goes
 * alone, without a reply, once LC_HITS wait; the node store then counts
 * the hit and refreshes the block's recency. A get the directory cannot
 * answer (not in RAM, not published because its directory window was
 * full, changing on every try, or the buffer pointer missing) pins the
 * block (one round trip; a disk hit is loaded into the arena by the node
 * store) and copies it out; its unpin needs no reply and waits here until
 * the process's next request, which carries it in front of itself in the
 * same send (at most LC_DEFER pins wait so; the node store ends them
 * before serving the request, and all at once when the connection closes).
 * A put reserves arena space, copies the block in and commits it with its
 * checksum, which the server checks before the block becomes visible; a put
 * that finds no room without spilling sends its bytes in the frame instead.
 * Every reply is bounds-checked: an offset or length outside the mapping is
 * a protocol error, never a copy. The connect and the HELLO exchange end
 * within lp_hello_ms (local_wait.c; -ETIMEDOUT); later replies are waited
 * for attach_timeout_ms (0: as long as the node store takes), after which
 * the call fails with -ETIMEDOUT and the store is cut off from the node
 * store (every later call -ENOTCONN) but keeps its connection, and so what
 * it holds, until kvt_close(). The slot calls are local_slots.c's
 * (local_client_impl.h). Knows nothing about tiers.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "arena.h"
#include "internal.h"
#include "local_client_impl.h"

/* --- frames -------------------------------------------------------------------- */

int lc_broken(struct local_client *c)
{
	atomic_store_explicit(&c->broken, 1, memory_order_relaxed);
	return kvt_fail(-ENOTCONN, "the node store at %s closed the connection or "
			"broke the protocol", c->path);
}

/* A read or send that failed (r, from lp_recv_some; LP_LATE for a send
 * that timed out): an answer that did not come in time, else the connection
 * broke. A request that timed out leaves the connection open, so that what
 * this process holds (pins whose bytes it may be copying) stays held until
 * kvt_close(), but the store is cut off: a late answer cannot be told from
 * the next one. */
static int lost(struct local_client *c, ssize_t r)
{
	if (r != LP_LATE)
		return lc_broken(c);
	atomic_store_explicit(&c->broken, 1, memory_order_relaxed);
	if (c->deadline)
		return kvt_fail(-ETIMEDOUT, "attach: the node store at %s did not answer "
				"in time (%u ms; not a node store, or a stopped or stuck one)",
				c->path, (unsigned)lp_hello_ms);
	return kvt_fail(-ETIMEDOUT, "the node store at %s did not answer a request within "
			"%u ms (attach_timeout_ms; a stopped or stuck store): this store "
			"is cut off from it; close it and attach again", c->path,
			c->timeout_ms);
}

/* The failure of a send: timed out (SO_SNDTIMEO, a node store that reads
 * no more), else the connection broke. */
static int send_failed(struct local_client *c)
{
	return lost(c, errno == EAGAIN || errno == EWOULDBLOCK ? LP_LATE : -1);
}

/* rc, a count the node store answered for asked keys (or an error), or a
 * protocol error where it counts more than were asked. */
int lc_counted(struct local_client *c, int rc, size_t asked)
{
	return rc >= 0 && (size_t)rc > asked ? lc_broken(c) : rc;
}

static int send_all(int fd, struct iovec *iov, int n)
{
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };

	return lp_send_all(fd, &m);
}

/* Bytes of a reply read at once: its header, status and a short body. */
#define FIRST_READ 512

/* The frames without a reply that wait for the next send: the unpins of
 * finished gets, the keys of gets served from the directory. */
struct waiting {
	struct lp_hdr uh, hh;
	uint32_t nd, nh;
};

/* Puts the waiting frames into iov (6 at most); returns how many. Lock held. */
static int waiting_iov(struct local_client *c, struct waiting *w, struct iovec *iov)
{
	int k = 0;

	w->nd = c->ndefer;
	w->nh = c->nhits;
	if (w->nd) {
		w->uh = (struct lp_hdr){ LP_MAGIC, LP_VERSION, LP_UNPIN | LP_NOREPLY,
					 4 + w->nd * 8 };
		iov[k++] = (struct iovec){ &w->uh, sizeof(w->uh) };
		iov[k++] = (struct iovec){ &w->nd, 4 };
		iov[k++] = (struct iovec){ c->defer, (size_t)w->nd * 8 };
	}
	if (w->nh) {
		w->hh = (struct lp_hdr){ LP_MAGIC, LP_VERSION, LP_HITS | LP_NOREPLY,
					 (uint32_t)(4 + w->nh * sizeof(struct lp_key)) };
		iov[k++] = (struct iovec){ &w->hh, sizeof(w->hh) };
		iov[k++] = (struct iovec){ &w->nh, 4 };
		iov[k++] = (struct iovec){ c->hits, (size_t)w->nh * sizeof(struct lp_key) };
	}
	return k;
}

/* Sends the waiting frames now, alone. Lock held. 0, or -ENOTCONN. */
static int send_waiting(struct local_client *c)
{
	struct waiting w;
	struct iovec iov[6];
	int k = waiting_iov(c, &w, iov);

	if (!k || atomic_load_explicit(&c->broken, memory_order_relaxed))
		return 0;
	if (send_all(c->fd, iov, k))
		return send_failed(c);
	c->ndefer = c->nhits = 0;
	return 0;
}

/*
 * Sends a request of type with payload a then b, and (unless LP_NOREPLY)
 * reads its reply: returns its status (a negative one with the server's
 * text as kvt_last_error()), the body after the status copied to out (at
 * most cap bytes; *olen set). Lock held. fds: where passed descriptors go
 * (HELLO only). The frames that wait (unpins of finished gets, hits served
 * from the directory) go first, without a reply, in the same send. Nothing
 * follows a reply until the next request, so its first read takes what is
 * there at once.
 */
int lc_rpc_locked(struct local_client *c, int type, const void *a, size_t alen,
		      const void *b, size_t blen, void *out, size_t cap, size_t *olen,
		      int *fds)
{
	struct lp_hdr h = { LP_MAGIC, LP_VERSION, (uint8_t)type, (uint32_t)(alen + blen) };
	struct waiting w;
	struct iovec iov[9];
	int k = waiting_iov(c, &w, iov);
	unsigned char first[FIRST_READ];
	int32_t status;

	iov[k++] = (struct iovec){ &h, sizeof(h) };
	iov[k++] = (struct iovec){ (void *)a, alen };
	iov[k++] = (struct iovec){ (void *)b, blen };
	if (atomic_load_explicit(&c->broken, memory_order_relaxed))
		return kvt_fail(-ENOTCONN, "the node store at %s is no longer connected",
				c->path);
	/* A refused HELLO may find the server gone already; its refusal is
	 * still there to read. */
	if (send_all(c->fd, iov, k) && type != LP_HELLO)
		return send_failed(c);
	c->ndefer = c->nhits = 0;
	if (type & LP_NOREPLY)
		return 0;
	uint64_t dl = c->deadline ? c->deadline : c->timeout_ms ?
		      kvt_now_ns() + (uint64_t)c->timeout_ms * 1000000ull : 0;
	size_t most = sizeof(h) + 4 + (cap < FIRST_READ - 12 ? cap : FIRST_READ - 12);
	/* The reply usually follows within microseconds: poll for it for up
	 * to local.spin_us before sleeping (the node store's connection thread
	 * does the same for this process's next request), so neither end pays
	 * for waking a sleeping CPU: tens of microseconds on an idle virtual
	 * machine, more than the request itself. */
	lp_spin_readable(c->fd, c->spin_us);
	ssize_t got = lp_recv_some(c->fd, first, sizeof(h) + 4, most, fds, dl);
	if (got < 0)
		return lost(c, got);
	memcpy(&h, first, sizeof(h));
	memcpy(&status, first + sizeof(h), 4);
	if (h.magic == LP_MAGIC && h.version != LP_VERSION && type == LP_HELLO)
		return kvt_fail(-EPROTONOSUPPORT, "attach: %s answered in version %u of "
				"the local protocol, this process speaks %u", c->path,
				(unsigned)h.version, LP_VERSION);
	if (h.magic != LP_MAGIC || h.version != LP_VERSION ||
	    h.type != ((type & ~LP_NOREPLY) | LP_REPLY) || h.len < 4 ||
	    h.len > 4 + (cap > LP_TEXT_MAX ? cap : LP_TEXT_MAX) ||
	    (size_t)got > sizeof(h) + h.len)
		return lc_broken(c);
	size_t body = h.len - 4, have = (size_t)got - sizeof(h) - 4;
	if (status < 0) {
		char t[LP_TEXT_MAX + 1];
		if (body > LP_TEXT_MAX)
			return lc_broken(c);
		memcpy(t, first + 12, have);
		got = lp_recv_some(c->fd, t + have, body - have, body - have, NULL, dl);
		if (got < 0)
			return lost(c, got);
		t[body] = 0;
		kvt_set_error("%s", t);
		return status;
	}
	if (body > cap)
		return lc_broken(c);
	if (have)
		memcpy(out, first + 12, have);
	if (body > have && (got = lp_recv_some(c->fd, (char *)out + have, body - have,
					       body - have, NULL, dl)) < 0)
		return lost(c, got);
	if (olen)
		*olen = body;
	return status;
}

int lc_rpc(struct local_client *c, int type, const void *a, size_t alen,
	       const void *b, size_t blen, void *out, size_t cap, size_t *olen)
{
	pthread_mutex_lock(&c->lock);
	int rc = lc_rpc_locked(c, type, a, alen, b, blen, out, cap, olen, NULL);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* --- open and close ------------------------------------------------------------- */

int local_client_open(const char *path, unsigned timeout_ms, struct local_client **out)
{
	struct local_client *c = calloc(1, sizeof(*c));
	struct lp_hello hl;
	int fds[2] = { -1, -1 }, rc;
	size_t got = 0;

	if (!c)
		return kvt_fail(-ENOMEM, "attach: out of memory");
	snprintf(c->path, sizeof(c->path), "%s", path);
	c->timeout_ms = timeout_ms;
	pthread_mutex_init(&c->lock, NULL);
	c->deadline = lp_hello_deadline();
	c->fd = lp_connect(path);
	if (c->fd < 0) {
		rc = c->fd;
		goto fail;
	}
	uint32_t v = LP_VERSION;
	pthread_mutex_lock(&c->lock);
	rc = lc_rpc_locked(c, LP_HELLO, &v, sizeof(v), NULL, 0, &hl, sizeof(hl), &got, fds);
	c->deadline = 0; /* later requests wait timeout_ms (0: as long as it takes) */
	pthread_mutex_unlock(&c->lock);
	if (rc >= 0)
		rc = lp_send_timeout(c->fd, timeout_ms);
	if (rc < 0) {
		if (rc == -ENOTCONN)
			rc = kvt_fail(-EPROTO, "attach: %s answered no HELLO (not a node "
				      "store, one of a local protocol version before %u, "
				      "or it closed the connection)", path, LP_VERSION);
		goto fail;
	}
	if (got != sizeof(hl) || fds[0] < 0 || hl.version != LP_VERSION || !hl.arena_len ||
	    hl.arena_len > SIZE_MAX / 2 || hl.max_keys != LP_KEYS_MAX ||
	    (hl.dir_len != 0) != (fds[1] >= 0) || hl.dir_len > SIZE_MAX / 2 ||
	    hl.spin_us > LP_SPIN_MAX || hl.zero) {
		rc = kvt_fail(-EPROTO, "attach: %s sent a malformed HELLO answer", path);
		goto fail;
	}
	c->arena_len = (size_t)hl.arena_len;
	c->max_block = hl.max_block;
	c->spin_us = hl.spin_us;
	c->pin_ns = (uint64_t)hl.pin_ms * 1000000ull;
	c->base = arena_map_fd(fds[0], c->arena_len);
	if (!c->base) {
		rc = kvt_fail(-ENOMEM, "attach: cannot map the node store's arena (%zu "
			      "bytes): %s", c->arena_len, strerror(errno));
		goto fail;
	}
	if (hl.dir_len && (rc = dir_view_map(fds[1], (size_t)hl.dir_len, &c->dir))) {
		rc = kvt_fail(rc, "attach: %s sent a directory of RAM blocks this process "
			      "cannot use (%zu bytes): %s", path, (size_t)hl.dir_len,
			      kvt_strerror(rc));
		goto fail;
	}
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	*out = c;
	return 0;
fail:
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	local_client_close(c);
	return rc;
}

void local_client_close(struct local_client *c)
{
	if (!c)
		return;
	/* The hits served from the directory are still counted. */
	if (c->fd >= 0) {
		pthread_mutex_lock(&c->lock);
		c->ndefer = 0; /* ended by the close anyway */
		send_waiting(c);
		pthread_mutex_unlock(&c->lock);
	}
	dir_view_unmap(&c->dir);
	if (c->base)
		munmap(c->base, c->arena_len);
	if (c->fd >= 0)
		close(c->fd); /* the server releases what this process held */
	pthread_mutex_destroy(&c->lock);
	free(c);
}

void local_arena(struct local_client *c, void **base, size_t *len)
{
	if (base)
		*base = c->base;
	if (len)
		*len = c->arena_len;
}

uint64_t local_max_block(struct local_client *c)
{
	return c->max_block;
}

/* --- gets and puts through the shared arena ------------------------------------- */

static int first_failure(const kvt_op *ops, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ops[i].result)
			return ops[i].result;
	return 0;
}

/* The key of a get served from the directory, to be told to the node
 * store; LC_HITS of them go at once. */
static void note_hit(struct local_client *c, kvt_key k)
{
	pthread_mutex_lock(&c->lock);
	c->hits[c->nhits++] = (struct lp_key){ k.lo, k.hi };
	if (c->nhits == LC_HITS)
		send_waiting(c); /* a failure makes the next call fail */
	pthread_mutex_unlock(&c->lock);
}

/* A get from the directory (no round trip): 1 when it answered (op's
 * result and len set), 0 when the node store must be asked. */
static int dir_get(struct local_client *c, kvt_op *op)
{
	size_t len = 0;
	char kb[34];

	if (!c->dir.head || (!op->buf && op->len) ||
	    atomic_load_explicit(&c->broken, memory_order_relaxed))
		return 0;
	int rc = dir_read(&c->dir, c->base, c->arena_len, op->key, op->buf, op->len, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc == -ENOBUFS) {
		kvt_set_error("block %s is %zu bytes; the buffer holds %zu",
			      kvt_key_str(op->key, kb), len, op->len);
	} else {
		note_hit(c, op->key);
	}
	op->result = rc;
	op->len = len;
	return 1;
}

/* kvt_op.result of an op whose copy out of its pin ended when the pin may
 * have lapsed (ram.pin_ms after the PIN was sent), so that the space may
 * have held another block by then, or whose disk hit's pin lapsed in the
 * node store after its load landed, before the answer (-ECANCELED): the op
 * is loaded again (held). */
#define LC_LATE 2

/* Copies the block of pinned slot sl into op (a result of 0 or -errno;
 * LC_LATE with op->len untouched when the copy ended past late, 0: never). */
static void copy_out(kvt_op *op, const kvt_slot *sl, uint64_t late)
{
	char kb[34];

	if (!op->buf && op->len) {
		op->result = kvt_fail(-EINVAL, "kvt_get: buf is NULL but cap is %zu", op->len);
	} else if (sl->len > op->len) {
		op->result = -ENOBUFS;
		kvt_set_error("block %s is %zu bytes; the buffer holds %zu",
			      kvt_key_str(op->key, kb), sl->len, op->len);
	} else {
		memcpy(op->buf, sl->addr, sl->len);
		op->result = 0;
		if (late && kvt_now_ns() >= late) {
			op->result = LC_LATE;
			return;
		}
	}
	op->len = sl->len;
}

/* Gets up to LP_KEYS_MAX ops: from the directory where it can, else pins,
 * copies out, unpins later. With held, the pins do not lapse and are
 * ended at once; without, a copy that ended when its pin may have lapsed,
 * or a disk hit's pin that lapsed between its load's landing and the
 * answer, leaves its op LC_LATE. */
static int get_piece(struct local_client *c, kvt_op *ops, size_t n, int held)
{
	kvt_slot small[SMALL], *sl = n <= SMALL ? small : calloc(n, sizeof(*sl));
	uint64_t rsmall[SMALL] = { 0 }, *refs = n <= SMALL ? rsmall : calloc(n, sizeof(*refs));
	size_t asmall[SMALL], *at = n <= SMALL ? asmall : calloc(n, sizeof(*at));
	size_t k = 0, m = 0;
	char kb[34];
	int rc = 0;

	if (!sl || !refs || !at) {
		rc = kvt_fail(-ENOMEM, "kvt_get: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (!dir_get(c, &ops[i])) {
			at[m] = i;
			sl[m++] = (kvt_slot){ .key = ops[i].key };
		}
	if (!m)
		goto out;
	/* The node store's pins lapse pin_ns after it made them, which is
	 * after this: a copy that ends before late read the pinned block. */
	uint64_t late = held ? 0 : kvt_now_ns() + c->pin_ns;
	rc = lc_slots_rpc(c, held ? LP_PIN | LC_HELD : LP_PIN, sl, m);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < m; i++) {
		kvt_op *op = &ops[at[i]];
		if (sl[i].result == 0) {
			refs[k++] = sl[i].ref;
			copy_out(op, &sl[i], late);
		} else if (sl[i].result == -ECANCELED && !held) {
			op->result = LC_LATE; /* lapsed after its load landed */
		} else if (sl[i].result == -ENOENT) {
			op->result = -ENOENT;
			kvt_set_error("key %s is not stored", kvt_key_str(op->key, kb));
		} else {
			op->result = sl[i].result;
			kvt_set_error("key %s: the node store cannot pin it now: %s",
				      kvt_key_str(op->key, kb), kvt_strerror(sl[i].result));
		}
	}
	rc = !k ? 0 : held ? lc_unpin_now(c, refs, k) : lc_unpin_later(c, refs, k);
out:
	if (sl != small)
		free(sl);
	if (refs != rsmall)
		free(refs);
	if (at != asmall)
		free(at);
	return rc < 0 ? rc : 0;
}

/* Loads again, with held pins, the ops of ops[0..n) left LC_LATE. */
static int get_late(struct local_client *c, kvt_op *ops, size_t n)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		m += ops[i].result == LC_LATE;
	if (!m)
		return 0;
	kvt_op *late = malloc(m * sizeof(*late));
	size_t *at = malloc(m * sizeof(*at));
	int rc = late && at ? 0 : kvt_fail(-ENOMEM, "kvt_get: out of memory");

	for (size_t i = 0, j = 0; !rc && i < n; i++)
		if (ops[i].result == LC_LATE) {
			at[j] = i;
			late[j++] = ops[i];
		}
	if (!rc)
		rc = get_piece(c, late, m, 1);
	for (size_t j = 0; !rc && j < m; j++)
		ops[at[j]] = late[j];
	free(late);
	free(at);
	return rc;
}

int local_get_ops(struct local_client *c, kvt_op *ops, size_t n)
{
	for (size_t i = 0; i < n; i += LP_KEYS_MAX) {
		size_t k = n - i < LP_KEYS_MAX ? n - i : LP_KEYS_MAX;
		int rc = get_piece(c, ops + i, k, 0);
		if (!rc)
			rc = get_late(c, ops + i, k);
		if (rc < 0) {
			for (size_t j = i; j < n; j++)
				ops[j].result = rc;
			return rc;
		}
	}
	return first_failure(ops, n);
}

/* A put the arena had no room for without spilling: the bytes go in the
 * frame, and the node store puts them as kvt_put() would. */
static int put_inline(struct local_client *c, kvt_op *op)
{
	unsigned char h[sizeof(struct lp_key) + 8];
	uint64_t l = op->len;

	lc_put_key(h, op->key);
	memcpy(h + sizeof(struct lp_key), &l, 8);
	return lc_rpc(c, LP_PUT, h, sizeof(h), op->buf, op->len, NULL, 0, NULL);
}

static int put_piece(struct local_client *c, kvt_op *ops, size_t n)
{
	kvt_slot small[SMALL], *sl = n <= SMALL ? small : calloc(n, sizeof(*sl));
	int rc;

	if (!sl)
		return kvt_fail(-ENOMEM, "kvt_put: out of memory");
	for (size_t i = 0; i < n; i++)
		sl[i] = (kvt_slot){ .key = ops[i].key, .len = ops[i].len };
	rc = lc_slots_rpc(c, LP_RESERVE | LC_HELD, sl, n);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (sl[i].result == 0)
			memcpy(sl[i].addr, ops[i].buf, ops[i].len);
	rc = lc_end_piece(c, sl, n, 1);
	if (rc < 0)
		goto out;
	lc_name_nospc("kvt_put", sl, n); /* refused at the reservation or the commit */
	for (size_t i = 0; i < n; i++) {
		int r = sl[i].result;
		if (r == -EAGAIN)
			r = put_inline(c, &ops[i]);
		ops[i].result = r == KVT_SLOT_STORED ? 0 : r;
	}
	rc = 0;
out:
	if (sl != small)
		free(sl);
	return rc;
}

int local_put_ops(struct local_client *c, kvt_op *ops, size_t n)
{
	int named = 0; /* the first bad op's message stands */

	for (size_t i = 0; i < n; i++) {
		ops[i].result = 0;
		if (ops[i].buf && ops[i].len && ops[i].len <= c->max_block)
			continue;
		ops[i].result = -EINVAL;
		if (!named++)
			kvt_fail(-EINVAL, "kvt_put: op %zu: %s", i,
				 !ops[i].buf ? "data is NULL" : !ops[i].len ?
				 "len is 0" : "len exceeds ram.max_block");
	}
	for (size_t i = 0; i < n;) {
		size_t k = 0;
		kvt_op piece[SMALL];
		size_t at[SMALL];
		/* the valid ops, SMALL at a time */
		for (; i < n && k < SMALL; i++)
			if (ops[i].result == 0) {
				at[k] = i;
				piece[k++] = ops[i];
			}
		if (!k)
			continue;
		int rc = put_piece(c, piece, k);
		for (size_t j = 0; j < k; j++)
			ops[at[j]].result = rc < 0 ? rc : piece[j].result;
		if (rc < 0)
			return rc;
	}
	return first_failure(ops, n);
}

/* --- control -------------------------------------------------------------------- */

int local_lookup(struct local_client *c, const kvt_key *keys, size_t n,
		 unsigned flags, size_t *found)
{
	size_t done = 0;

	/* Longer chains in pieces, each continuing only while all was found. */
	while (done < n || n == 0) {
		uint32_t k = (uint32_t)(n - done < LP_KEYS_MAX ? n - done : LP_KEYS_MAX);
		unsigned char small[8 + 64 * sizeof(struct lp_key)];
		size_t qlen = 8 + (size_t)k * sizeof(struct lp_key), got = 0;
		unsigned char *q = k <= 64 ? small : malloc(qlen);
		uint32_t f32 = flags, f = 0;

		if (!q)
			return kvt_fail(-ENOMEM, "kvt_lookup: out of memory");
		memcpy(q, &f32, 4);
		memcpy(q + 4, &k, 4);
		for (uint32_t i = 0; i < k; i++)
			lc_put_key(q + 8 + (size_t)i * sizeof(struct lp_key), keys[done + i]);
		int rc = lc_rpc(c, LP_LOOKUP, q, qlen, NULL, 0, &f, sizeof(f), &got);
		if (q != small)
			free(q);
		if (rc < 0)
			return rc;
		if (got != 4 || f > k)
			return lc_broken(c);
		done += f;
		if (f < k || n == 0)
			break;
	}
	*found = done;
	return 0;
}

int local_release(struct local_client *c, const kvt_key *keys, size_t n)
{
	int total = 0;

	for (size_t i = 0; i < n; i += LP_KEYS_MAX) {
		uint32_t k = (uint32_t)(n - i < LP_KEYS_MAX ? n - i : LP_KEYS_MAX);
		unsigned char *q = malloc(4 + (size_t)k * sizeof(struct lp_key));
		if (!q)
			return kvt_fail(-ENOMEM, "kvt_release: out of memory");
		memcpy(q, &k, 4);
		for (uint32_t j = 0; j < k; j++)
			lc_put_key(q + 4 + (size_t)j * sizeof(struct lp_key), keys[i + j]);
		int rc = lc_counted(c, lc_rpc(c, LP_RELEASE, q, 4 + (size_t)k * sizeof(struct lp_key),
					NULL, 0, NULL, 0, NULL), k);
		free(q);
		if (rc < 0)
			return rc;
		total += rc;
	}
	return total;
}

int local_remove(struct local_client *c, kvt_key key)
{
	unsigned char q[sizeof(struct lp_key)];

	lc_put_key(q, key);
	return lc_rpc(c, LP_REMOVE, q, sizeof(q), NULL, 0, NULL, 0, NULL);
}

int local_stats_json(struct local_client *c, char *buf, size_t cap)
{
	char *t = malloc(LP_STATS_MAX + 1);
	size_t got = 0;

	if (!t)
		return kvt_fail(-ENOMEM, "kvt_stats_json: out of memory");
	int rc = lc_rpc(c, LP_STATS, NULL, 0, NULL, 0, t, LP_STATS_MAX, &got);
	if (rc >= 0) {
		t[got] = 0;
		if (cap) {
			size_t k = got < cap - 1 ? got : cap - 1;
			memcpy(buf, t, k);
			buf[k] = 0;
		}
		rc = (int)got;
	}
	free(t);
	return rc;
}
