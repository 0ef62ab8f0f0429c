/*
 * fuzz_peer_wire.c - libFuzzer target for the peer server's frame handling
 * (lib/peer.c): whatever bytes a member may send once its HELLO is accepted.
 *
 * Once per process it opens a store "a" whose peers section has two members
 * on loopback: a at 127.0.0.1:<free port> and b at 127.0.0.1:<another free
 * port>, where nothing listens (the harness never makes a call that needs b:
 * its own keys are keys a owns). For each input it connects to a's server
 * from 127.0.0.1 (b's host), says HELLO as "b" and checks the HELLO_R, sends
 * the input as it is, shuts its side down and reads everything that comes
 * back until the server closes. The server must close within PW_SILENCE_MS
 * of its last byte (it has PW_REQUEST_MS per request), never stay silent.
 *
 * The answer is checked frame by frame against what kvtier-peer(7) says the
 * server sends for those bytes. The harness reads the input as the server
 * must (requests in order; a malformed one answered by ERROR and the end of
 * the connection, a truncated one by the end alone) and expects LOOKUP_R,
 * GET_R and PUT_R and RELEASE_R frames with the right types, counts, flags,
 * lengths and statuses (cut short only where the server closes with input
 * unread, which resets the connection: see pw_walk). The frames of the RDMA
 * transport are read as well: an UNPIN is not answered, and a PUT with flags
 * bit 0 (offers) gets -ENOTSUP for each offer from this store, which opened
 * without RDMA; a GET with flags bit 0 is answered inline. A block served in a
 * GET_R must match its checksum, fit the capacity asked, and be a block that
 * some PUT sent under that key: the harness records every PUT item it sends
 * that the server could store (its checksum right), and nothing else puts
 * into the store, so a key reported present by LOOKUP must be one of those
 * too. When the record fills up, its keys are removed from the store and it
 * starts afresh.
 *
 * After each input the store must still work: a put and a get of a small
 * block under a fresh key that a owns, bytes compared, then its removal. The
 * put must succeed: a block of one 4 KiB arena unit always finds room in a
 * RAM tier that leases may fill only to ram.lease_cap (0.5 by default).
 *
 * The wire constants are written out here from lib/peer.h and
 * kvtier-peer(7), not taken from lib/, so the target also pins the protocol.
 * Knows nothing about RAM, disk or the store's internals. Built by
 * `make fuzz` and replayed over tests/fuzz/corpus/peer_wire by
 * tests/test_fuzz_corpus.c (which renames LLVMFuzzerTestOneInput).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "common.h"
#include "kvtier.h"

/* The wire (lib/peer.h, kvtier-peer(7)); integers little-endian. */
#define PW_MAGIC 0x3150564bu     /* "KVP1" */
#define PW_VERSION 1u
#define PW_HDR 24u               /* frame header */
#define PW_ITEM 32u              /* PUT item header, GET_R item header */
#define PW_KEYS_MAX 4096u        /* keys or items in one frame */
#define PW_ERR_MAX 255u          /* an ERROR message from this server */
#define PW_OFFER 48u              /* PUT offer (flags bit 0, RDMA TRANSPORT) */
#define PW_F_RDMA 1u              /* flags bit 0 of GET, GET_R and PUT */
enum { PW_T_HELLO = 1, PW_T_LOOKUP = 2, PW_T_GET = 3, PW_T_PUT = 4, PW_T_RELEASE = 5,
       PW_T_UNPIN = 6, PW_T_REPLY = 0x80, PW_T_ERROR = 0xff };

/* The store under test. */
#define PW_MAX_BLOCK (64u << 10) /* ram.max_block */
#define PW_REQUEST_MS 200        /* peers.request_timeout_ms */
#define PW_CONFIG "{\"ram\": {\"capacity\": \"4MiB\", \"max_block\": \"64KiB\"," \
		  " \"mlock\": false, \"lease_ms\": 200}, \"threads\": 1," \
		  " \"peers\": {\"self\": \"a\", \"listen\": \"127.0.0.1:%d\", \"members\":" \
		  " [{\"name\": \"a\", \"addr\": \"127.0.0.1:%d\"}," \
		  " {\"name\": \"b\", \"addr\": \"127.0.0.1:%d\"}]," \
		  " \"connect_timeout_ms\": 100, \"request_timeout_ms\": %d, \"down_ms\": 100}}"

#define PW_HELLO_MS 2000         /* for the HELLO_R */
#define PW_SILENCE_MS 1000       /* the longest the server may say nothing */
#define PW_OUT_MAX (256u << 20)  /* more answer than any input here can ask */
#define PW_CHECK_MAX 4000u       /* bytes of the harness's own blocks */

#define PW_CHECK(cond, ...)                                                    \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_peer_wire: invariant broken: %s: ", \
				#cond);                                        \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			abort();                                               \
		}                                                              \
	} while (0)

static kvt_store *pw_store;
static int pw_port;              /* a's server */
static uint64_t pw_inputs;       /* inputs run: the harness's own keys */

/* --- little-endian --------------------------------------------------------- */

static void pw_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void pw_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void pw_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t pw_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t pw_get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t pw_get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

struct pw_hdr {
	uint32_t magic, count, flags;
	uint16_t version, type;
	uint64_t body_len;
};

static void pw_hdr_unpack(const uint8_t *b, struct pw_hdr *h)
{
	h->magic = pw_get32(b);
	h->version = pw_get16(b + 4);
	h->type = pw_get16(b + 6);
	h->count = pw_get32(b + 8);
	h->flags = pw_get32(b + 12);
	h->body_len = pw_get64(b + 16);
}

/* --- the record of blocks sent ------------------------------------------------ */

/*
 * Every (key, len, sum) of a PUT item the harness sent that the server could
 * store: an open-addressed set hashed on the key, so the entries of one key
 * sit on one probe run.
 */
struct pw_block {
	uint64_t lo, hi, len, sum;
	int used;
};

static struct pw_block *pw_set;
static size_t pw_set_cap, pw_set_n;

static size_t pw_slot(uint64_t lo, uint64_t hi)
{
	uint8_t kb[16];

	pw_put64(kb, lo);
	pw_put64(kb + 8, hi);
	return (size_t)XXH3_64bits(kb, 16) & (pw_set_cap - 1);
}

/* 1 if the set holds key (lo, hi) with len (any when len_too is 0) and sum
 * (any when sum_too is 0). */
static int pw_set_has(uint64_t lo, uint64_t hi, int len_too, uint64_t len, int sum_too,
		      uint64_t sum)
{
	for (size_t i = pw_slot(lo, hi); pw_set[i].used; i = (i + 1) & (pw_set_cap - 1)) {
		const struct pw_block *b = &pw_set[i];

		if (b->lo == lo && b->hi == hi && (!len_too || b->len == len) &&
		    (!sum_too || b->sum == sum))
			return 1;
	}
	return 0;
}

static void pw_set_add(uint64_t lo, uint64_t hi, uint64_t len, uint64_t sum)
{
	size_t i;

	for (i = pw_slot(lo, hi); pw_set[i].used; i = (i + 1) & (pw_set_cap - 1))
		if (pw_set[i].lo == lo && pw_set[i].hi == hi && pw_set[i].len == len &&
		    pw_set[i].sum == sum)
			return;
	PW_CHECK(pw_set_n + 1 < pw_set_cap, "record of %zu blocks full", pw_set_n);
	pw_set[i] = (struct pw_block){ lo, hi, len, sum, 1 };
	pw_set_n++;
}

/*
 * Makes room for `more` entries at under half load: when they do not fit,
 * removes every recorded key from the store and empties the record (growing
 * it when `more` alone needs that). Only between inputs: no connection open.
 */
static void pw_set_reserve(size_t more)
{
	if (pw_set && (pw_set_n + more) * 2 <= pw_set_cap)
		return;
	for (size_t i = 0; i < pw_set_cap; i++)
		if (pw_set[i].used) {
			kvt_key k = { pw_set[i].lo, pw_set[i].hi };
			int r = kvt_remove(pw_store, k);
			PW_CHECK(r == 0 || r == -ENOENT, "kvt_remove: %d %s", r,
				 kvt_last_error());
		}
	size_t cap = pw_set_cap ? pw_set_cap : 1u << 16;
	while (more * 2 > cap)
		cap *= 2;
	if (cap != pw_set_cap) {
		free(pw_set);
		pw_set = malloc(cap * sizeof(*pw_set));
		PW_CHECK(pw_set != NULL, "no memory for %zu records", cap);
		pw_set_cap = cap;
	}
	memset(pw_set, 0, pw_set_cap * sizeof(*pw_set));
	pw_set_n = 0;
}

/* --- the server's reading of the input, and what it must answer ------------------ */

struct pw_rd {
	const uint8_t *p;
	size_t n;
	const uint8_t *base;
	int may_cut;             /* the answer may end anywhere (see pw_walk) */
};

/* The next n bytes, or NULL when fewer are left. */
static const uint8_t *pw_take(struct pw_rd *r, uint64_t n)
{
	const uint8_t *p = r->p;

	if (n > r->n)
		return NULL;
	r->p += n;
	r->n -= (size_t)n;
	return p;
}

static size_t pw_at(const struct pw_rd *r)
{
	return (size_t)(r->p - r->base);
}

/*
 * The next n bytes of the answer to the frame at input offset `at`. NULL
 * when the answer ends before them and may (the caller stops checking);
 * aborts when it may not.
 */
static const uint8_t *pw_answer(struct pw_rd *out, uint64_t n, size_t at, const char *what)
{
	const uint8_t *p = pw_take(out, n);

	PW_CHECK(p || out->may_cut, "frame at input offset %zu: the answer ends inside "
		 "%s (%zu bytes left at answer offset %zu, %" PRIu64 " due), though the "
		 "server read all the input", at, what, out->n, pw_at(out), n);
	if (!p)
		out->n = 0;
	return p;
}

/* Nothing more came: the server closed where it had to stop reading. */
static void pw_want_end(struct pw_rd *out, const char *why)
{
	PW_CHECK(out->n == 0, "after %s the server sent %zu more bytes (answer offset %zu)",
		 why, out->n, pw_at(out));
}

/* The server refused the frame at input offset `at`: ERROR, then nothing. */
static void pw_want_error(struct pw_rd *out, size_t at, const char *why)
{
	static const uint8_t head[8] = { 0x4b, 0x56, 0x50, 0x31, 1, 0, 0xff, 0 };
	size_t have = out->n < sizeof(head) ? out->n : sizeof(head);
	const uint8_t *b;
	struct pw_hdr h;

	/* the bytes that did arrive are an ERROR frame's */
	for (size_t i = 0; i < have; i++)
		PW_CHECK(out->p[i] == head[i], "frame at input offset %zu (%s): answered "
			 "with byte %#x at offset %zu of a frame header, not ERROR's %#x", at,
			 why, out->p[i], i, head[i]);
	if (!(b = pw_answer(out, PW_HDR, at, "the ERROR header")))
		return;
	pw_hdr_unpack(b, &h);
	PW_CHECK(h.flags == 0 && h.body_len <= PW_ERR_MAX && h.count == h.body_len,
		 "ERROR for the frame at input offset %zu (%s): count %u flags %#x "
		 "body_len %" PRIu64, at, why, h.count, h.flags, h.body_len);
	if (pw_answer(out, h.body_len, at, "the ERROR message"))
		pw_want_end(out, "an ERROR frame");
}

/* The next answer frame's header: type t, count, flags 0. 1 when cut. */
static int pw_want_hdr(struct pw_rd *out, size_t at, unsigned t, uint32_t count,
		       struct pw_hdr *h)
{
	const uint8_t *b = pw_answer(out, PW_HDR, at, "a header");

	if (!b)
		return 1;
	pw_hdr_unpack(b, h);
	PW_CHECK(h->magic == PW_MAGIC && h->version == PW_VERSION,
		 "frame at input offset %zu: answer at %zu has magic %#x version %u", at,
		 pw_at(out) - PW_HDR, h->magic, h->version);
	PW_CHECK(h->type == t && h->count == count && h->flags == 0,
		 "frame at input offset %zu: answered type %#x count %u flags %#x, "
		 "expected type %#x count %u", at, h->type, h->count, h->flags, t, count);
	return 0;
}

/*
 * PUT with flags bit 0 is an offer of count 48-byte items (key, u64 len,
 * u64 sum, u64 address, u32 rkey, u32 0) whose blocks the owner would READ
 * over RDMA (kvtier-peer(7), RDMA TRANSPORT). The server reads the whole
 * body, then refuses the frame if an offer's len is 0 or past max_block:
 * 1 then. Otherwise 0.
 */
static int pw_offer_refused(const uint8_t *body, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		uint64_t len = pw_get64(body + PW_OFFER * i + 16);

		if (len == 0 || len > PW_MAX_BLOCK)
			return 1;
	}
	return 0;
}

/* The PUT_R of count offers: this store opened without RDMA, so it pulls
 * nothing and answers each -ENOTSUP. 1 when the answer was cut. */
static int pw_want_offer_r(struct pw_rd *out, size_t at, uint32_t count)
{
	const uint8_t *res;
	struct pw_hdr a;

	if (pw_want_hdr(out, at, PW_T_PUT | PW_T_REPLY, count, &a))
		return 1;
	PW_CHECK(a.body_len == 4ull * count, "PUT_R body_len %" PRIu64 " for %u offers",
		 a.body_len, count);
	if (!(res = pw_answer(out, a.body_len, at, "PUT_R of offers")))
		return 1;
	for (uint32_t i = 0; i < count; i++)
		PW_CHECK((int32_t)pw_get32(res + 4 * i) == -ENOTSUP, "PUT offer %u at input "
			 "offset %zu: status %d from a store without RDMA", i, at,
			 (int32_t)pw_get32(res + 4 * i));
	return 0;
}

/* Where the server stops: refusing the frame at `at`, or at the input's end. */
#define PW_REFUSE(why)                                  \
	do {                                            \
		if (out)                                \
			pw_want_error(out, at, why);    \
		return in.n;                            \
	} while (0)
#define PW_END(why)                                     \
	do {                                            \
		if (out)                                \
			pw_want_end(out, why);          \
		return 0;                               \
	} while (0)

/*
 * Walks the input as the server reads it, frame by frame, to where it stops:
 * the end of the input (it may end inside a frame) or a frame it refuses.
 * With out NULL, records the PUT items the server could store; otherwise
 * checks the answer in out. Returns the input bytes the server leaves unread.
 *
 * When the server refuses a frame with input left unread after it (the
 * frame's body, later frames), its close makes its kernel reset the
 * connection and drop what it had not sent yet, ERROR or earlier answers: then
 * the answer may end anywhere (out->may_cut), but what did arrive must still
 * be right. Otherwise every answer, ERROR too, must arrive whole.
 */
static size_t pw_walk(const uint8_t *data, size_t size, struct pw_rd *out)
{
	struct pw_rd in = { data, size, data, 0 };
	struct pw_hdr h, a;

	for (;;) {
		size_t at = pw_at(&in);
		const uint8_t *hb = pw_take(&in, PW_HDR), *body;

		if (!hb)
			PW_END("the last whole frame");
		pw_hdr_unpack(hb, &h);
		if (h.magic != PW_MAGIC || h.version != PW_VERSION)
			PW_REFUSE("wrong magic or version");
		if (h.count > PW_KEYS_MAX)
			PW_REFUSE("count above 4096");
		switch (h.type) {
		case PW_T_LOOKUP:
		case PW_T_RELEASE:
			if (h.body_len != 16ull * h.count)
				PW_REFUSE("LOOKUP or RELEASE body_len");
			if (!(body = pw_take(&in, h.body_len)))
				PW_END("a truncated LOOKUP or RELEASE");
			if (!out)
				break;
			if (h.type == PW_T_RELEASE) {
				if (pw_want_hdr(out, at, PW_T_RELEASE | PW_T_REPLY, h.count, &a))
					return 0;
				PW_CHECK(a.body_len == 0, "RELEASE_R body_len %" PRIu64, a.body_len);
				break;
			}
			if (pw_want_hdr(out, at, PW_T_LOOKUP | PW_T_REPLY, h.count, &a))
				return 0;
			PW_CHECK(a.body_len == h.count, "LOOKUP_R body_len %" PRIu64 " for %u keys",
				 a.body_len, h.count);
			const uint8_t *present = pw_answer(out, a.body_len, at, "LOOKUP_R");
			if (!present)
				return 0;
			for (uint32_t i = 0; i < h.count; i++) {
				uint64_t lo = pw_get64(body + 16 * i), hi = pw_get64(body + 16 * i + 8);
				PW_CHECK(present[i] <= 1, "LOOKUP_R byte %u is %u", i, present[i]);
				PW_CHECK(!present[i] || pw_set_has(lo, hi, 0, 0, 0, 0),
					 "LOOKUP at input offset %zu: key %u (%016" PRIx64 ":%016"
					 PRIx64 ") reported present but never put", at, i, hi, lo);
			}
			break;
		case PW_T_GET:
			if (h.body_len != 24ull * h.count)
				PW_REFUSE("GET body_len");
			if (!(body = pw_take(&in, h.body_len)))
				PW_END("a truncated GET");
			for (uint32_t i = 0; out && i < h.count; i++) {
				const uint8_t *it = body + 24 * i, *ih, *block;
				uint64_t lo = pw_get64(it), hi = pw_get64(it + 8), cap = pw_get64(it + 16);

				if (cap > PW_MAX_BLOCK)
					cap = PW_MAX_BLOCK;
				if (pw_want_hdr(out, at, PW_T_GET | PW_T_REPLY, 1, &a))
					return 0;
				PW_CHECK(a.body_len >= PW_ITEM, "GET_R %u for input offset %zu: "
					 "body_len %" PRIu64, i, at, a.body_len);
				if (!(ih = pw_answer(out, PW_ITEM, at, "a GET_R item header")))
					return 0;
				int st = (int32_t)pw_get32(ih);
				uint64_t len = pw_get64(ih + 8), sum = pw_get64(ih + 16);
				PW_CHECK(pw_get32(ih + 4) == 0 && pw_get64(ih + 24) == 0,
					 "GET_R %u: reserved fields not 0", i);
				if (st == 0) {
					PW_CHECK(a.body_len == PW_ITEM + len && len > 0 && len <= cap,
						 "GET_R %u for input offset %zu: block of %" PRIu64
						 " bytes, body_len %" PRIu64 ", capacity %" PRIu64,
						 i, at, len, a.body_len, cap);
					if (!(block = pw_answer(out, len, at, "a GET_R block")))
						return 0;
					PW_CHECK(XXH3_64bits(block, len) == sum,
						 "GET_R %u for input offset %zu: %" PRIu64 "-byte block "
						 "fails its checksum", i, at, len);
					PW_CHECK(pw_set_has(lo, hi, 1, len, 1, sum),
						 "GET_R %u for input offset %zu: key %016" PRIx64
						 ":%016" PRIx64 " served %" PRIu64 " bytes that no PUT "
						 "sent under it", i, at, hi, lo, len);
				} else if (st == -ENOBUFS) {
					PW_CHECK(a.body_len == PW_ITEM && len > cap && sum == 0 &&
						 pw_set_has(lo, hi, 1, len, 0, 0),
						 "GET_R %u for input offset %zu: -ENOBUFS with len %"
						 PRIu64 " (capacity %" PRIu64 "), sum %" PRIx64
						 ", body_len %" PRIu64, i, at, len, cap, sum, a.body_len);
				} else {
					PW_CHECK(st == -ENOENT || st == -EBADMSG || st == -EIO,
						 "GET_R %u for input offset %zu: status %d", i, at, st);
					PW_CHECK(a.body_len == PW_ITEM && len == 0 && sum == 0,
						 "GET_R %u status %d: len %" PRIu64 " sum %" PRIx64
						 " body_len %" PRIu64, i, st, len, sum, a.body_len);
				}
			}
			break;
		case PW_T_UNPIN: /* pin ids; not answered */
			if (h.body_len != 8ull * h.count)
				PW_REFUSE("UNPIN body_len");
			if (!pw_take(&in, h.body_len))
				PW_END("a truncated UNPIN");
			break;
		case PW_T_PUT: {
			uint64_t left = h.body_len;
			int32_t want[PW_KEYS_MAX];

			if (h.flags & PW_F_RDMA) {
				if (h.body_len != (uint64_t)PW_OFFER * h.count)
					PW_REFUSE("PUT offers body_len");
				if (!(body = pw_take(&in, h.body_len)))
					PW_END("truncated PUT offers");
				if (pw_offer_refused(body, h.count))
					PW_REFUSE("PUT offer length");
				if (out && pw_want_offer_r(out, at, h.count))
					return 0;
				break;
			}

			for (uint32_t i = 0; i < h.count; i++) {
				const uint8_t *ih, *block;

				if (left < PW_ITEM)
					PW_REFUSE("PUT body ends inside an item");
				if (!(ih = pw_take(&in, PW_ITEM)))
					PW_END("a truncated PUT item header");
				left -= PW_ITEM;
				uint64_t lo = pw_get64(ih), hi = pw_get64(ih + 8);
				uint64_t len = pw_get64(ih + 16), sum = pw_get64(ih + 24);
				if (len == 0 || len > PW_MAX_BLOCK || len > left)
					PW_REFUSE("PUT item length");
				if (!(block = pw_take(&in, len)))
					PW_END("a truncated PUT block");
				left -= len;
				int good = XXH3_64bits(block, len) == sum;
				want[i] = good ? 0 : -EBADMSG;
				if (!out && good)
					pw_set_add(lo, hi, len, sum);
			}
			if (left)
				PW_REFUSE("bytes past the last PUT item");
			if (!out)
				break;
			if (pw_want_hdr(out, at, PW_T_PUT | PW_T_REPLY, h.count, &a))
				return 0;
			PW_CHECK(a.body_len == 4ull * h.count, "PUT_R body_len %" PRIu64
				 " for %u items", a.body_len, h.count);
			const uint8_t *res = pw_answer(out, a.body_len, at, "PUT_R");
			if (!res)
				return 0;
			for (uint32_t i = 0; i < h.count; i++) {
				int st = (int32_t)pw_get32(res + 4 * i);
				if (want[i] == -EBADMSG)
					PW_CHECK(st == -EBADMSG, "PUT item %u at input offset %zu has "
						 "a wrong checksum but got status %d", i, at, st);
				else
					PW_CHECK(st == 0 || st == -ENOSPC || st == -ENOMEM ||
						 st == -EIO, "PUT item %u at input offset %zu: "
						 "status %d", i, at, st);
			}
			break;
		}
		default:
			PW_REFUSE("unknown request type");
		}
	}
}

#undef PW_REFUSE
#undef PW_END

/* PUT items the input can hold at most (each takes 33 bytes or more). */
static size_t pw_max_items(size_t size)
{
	return size / (PW_ITEM + 1) + 1;
}

/* --- the store and the connection ----------------------------------------------- */

/* Rendezvous owner of k among {"a", "b"} (lib/peer.h): 0 for a. */
static unsigned pw_owner(kvt_key k)
{
	static const char *const names[] = { "a", "b" };

	return common_key_owner(k, names, 2);
}

static void pw_teardown(void)
{
	kvt_close(pw_store);
	pw_store = NULL;
	free(pw_set);
	pw_set = NULL;
	pw_set_cap = pw_set_n = 0;
}

static void pw_setup(void)
{
	char cfg[1024];
	struct common_ports held;
	int r;

	/* the ports stay held until the store listens on the first one */
	r = common_ports_reserve(&held, 2);
	PW_CHECK(r == 0, "no free port: %s", strerror(-r));
	int pa = held.port[0], pb = held.port[1];
	snprintf(cfg, sizeof(cfg), PW_CONFIG, pa, pa, pb, PW_REQUEST_MS);
	r = kvt_open(cfg, &pw_store);
	pw_port = pa;
	common_ports_release(&held);
	PW_CHECK(r == 0, "kvt_open: %s", kvt_last_error());
	pw_set_reserve(0);
	atexit(pw_teardown);
}

/*
 * Waits up to PW_HELLO_MS for events on fd. A signal only restarts the wait:
 * libFuzzer's -timeout alarm (SIGALRM, no SA_RESTART) lands in these polls
 * and in connect() now and then, which must not read as a silent server.
 */
static void pw_wait(int fd, short events, const char *what)
{
	struct pollfd pf = { .fd = fd, .events = events };
	int pr;

	while ((pr = poll(&pf, 1, PW_HELLO_MS)) < 0 && errno == EINTR)
		;
	PW_CHECK(pr == 1, "%s within %d ms (%s)", what, PW_HELLO_MS,
		 pr < 0 ? strerror(errno) : "timed out");
}

/* Sends all n bytes within PW_HELLO_MS (for the HELLO). */
static void pw_send_hello(int fd, const uint8_t *b, size_t n)
{
	while (n) {
		pw_wait(fd, POLLOUT, "HELLO not sent");
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		PW_CHECK(w > 0 || errno == EAGAIN || errno == EINTR, "sending HELLO: %s",
			 strerror(errno));
		if (w > 0) {
			b += w;
			n -= (size_t)w;
		}
	}
}

/* Reads n bytes within PW_HELLO_MS (for the HELLO_R). */
static void pw_recv_hello(int fd, uint8_t *b, size_t n)
{
	while (n) {
		pw_wait(fd, POLLIN, "no HELLO_R");
		ssize_t r = recv(fd, b, n, 0);
		PW_CHECK(r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)),
			 "the server refused a valid HELLO from b: %s",
			 r == 0 ? "closed" : strerror(errno));
		if (r > 0) {
			b += r;
			n -= (size_t)r;
		}
	}
}

/*
 * A connection to a's server, past a HELLO as "b": non-blocking. Not bound
 * to a source port: connect() picks one from 127.0.0.1 to 127.0.0.1, and may
 * reuse ports still in TIME_WAIT from earlier inputs, which bind() may not.
 */
static int pw_connect(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)pw_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	uint8_t b[PW_HDR + 1];
	struct pw_hdr h;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	PW_CHECK(fd >= 0, "socket: %s", strerror(errno));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		int err = errno;
		socklen_t el = sizeof(err);

		PW_CHECK(err == EINPROGRESS || err == EINTR, "connect to a at 127.0.0.1:%d: %s",
			 pw_port, strerror(err));
		pw_wait(fd, POLLOUT, "not connected");
		PW_CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0,
			 "connect to a at 127.0.0.1:%d: %s", pw_port, strerror(err));
	}

	pw_put32(b, PW_MAGIC);
	pw_put16(b + 4, PW_VERSION);
	pw_put16(b + 6, PW_T_HELLO);
	pw_put32(b + 8, 1);
	pw_put32(b + 12, 0);
	pw_put64(b + 16, 1);
	b[PW_HDR] = 'b';
	pw_send_hello(fd, b, sizeof(b));
	pw_recv_hello(fd, b, sizeof(b));
	pw_hdr_unpack(b, &h);
	PW_CHECK(h.magic == PW_MAGIC && h.version == PW_VERSION &&
		 h.type == (PW_T_HELLO | PW_T_REPLY) && h.count == 1 && h.body_len == 1 &&
		 b[PW_HDR] == 'a', "HELLO_R: magic %#x version %u type %#x count %u "
		 "body_len %" PRIu64 " name %c", h.magic, h.version, h.type, h.count,
		 h.body_len, b[PW_HDR]);
	return fd;
}

struct pw_buf {
	uint8_t *p;
	size_t n, cap;
};

/*
 * Sends data (reading all the while, so neither side blocks the other), then
 * shuts the sending side and reads until the server closes. The server
 * must not fall silent for PW_SILENCE_MS before it closes.
 */
static void pw_exchange(int fd, const uint8_t *data, size_t size, struct pw_buf *out)
{
	size_t sent = 0;
	int sending = 1;

	for (;;) {
		if (sending && sent == size) {
			shutdown(fd, SHUT_WR);
			sending = 0;
		}
		struct pollfd pf = { .fd = fd, .events = POLLIN | (sending ? POLLOUT : 0) };
		int pr = poll(&pf, 1, PW_SILENCE_MS);
		if (pr < 0 && errno == EINTR)
			continue;
		PW_CHECK(pr >= 0, "poll: %s", strerror(errno));
		PW_CHECK(pr > 0, "the server neither answered nor closed for %d ms, with %zu of "
			 "%zu input bytes sent and %zu answer bytes read (request_timeout_ms "
			 "%d)", PW_SILENCE_MS, sent, size, out->n, PW_REQUEST_MS);
		if (pf.revents & (POLLIN | POLLHUP | POLLERR)) {
			if (out->cap - out->n < 65536) {
				PW_CHECK(out->cap < PW_OUT_MAX, "the server sent over %u bytes",
					 PW_OUT_MAX);
				out->cap = out->cap ? out->cap * 2 : 1u << 17;
				out->p = realloc(out->p, out->cap);
				PW_CHECK(out->p != NULL, "no memory for %zu bytes", out->cap);
			}
			ssize_t r = recv(fd, out->p + out->n, out->cap - out->n, 0);
			if (r == 0 || (r < 0 && errno == ECONNRESET))
				return; /* closed (reset when it left input unread) */
			PW_CHECK(r > 0 || errno == EAGAIN || errno == EINTR, "recv: %s",
				 strerror(errno));
			if (r > 0)
				out->n += (size_t)r;
		}
		if (sending && (pf.revents & POLLOUT)) {
			ssize_t w = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
			if (w > 0) {
				sent += (size_t)w;
			} else if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) {
				sending = 0; /* the server closed: it read all it will */
			} else {
				PW_CHECK(w < 0 && (errno == EAGAIN || errno == EINTR), "send: %s",
					 w == 0 ? "0 bytes" : strerror(errno));
			}
		}
	}
}

/* A fresh key that a owns, and a block of bytes of its own for it. */
static kvt_key pw_check_key(uint8_t *block, size_t *len)
{
	kvt_key k;

	do {
		uint64_t n = pw_inputs++;
		k.lo = XXH3_64bits_withSeed(&n, sizeof(n), 0x70772d6c6f);
		k.hi = XXH3_64bits_withSeed(&n, sizeof(n), 0x70772d6869);
	} while (pw_owner(k) != 0);
	*len = 1 + (size_t)(k.lo % PW_CHECK_MAX);
	for (size_t i = 0; i < *len; i++)
		block[i] = (uint8_t)(k.hi >> (8 * (i % 8))) ^ (uint8_t)(i * 131);
	return k;
}

/* The store still stores and serves: put, get, compare, remove. */
static void pw_check_store(void)
{
	static uint8_t block[PW_CHECK_MAX], back[PW_CHECK_MAX];
	size_t len, got = 0;
	kvt_key k = pw_check_key(block, &len);
	int r;

	kvt_remove(pw_store, k); /* in case an input guessed it */
	r = kvt_put(pw_store, k, block, len);
	PW_CHECK(r == 0, "kvt_put of %zu bytes after the input: %d %s", len, r,
		 kvt_last_error());
	r = kvt_get(pw_store, k, back, sizeof(back), &got);
	PW_CHECK(r == 0, "kvt_get of the block just put: %d %s", r, kvt_last_error());
	PW_CHECK(got == len && memcmp(back, block, len) == 0,
		 "kvt_get returned %zu bytes, not the %zu just put", got, len);
	r = kvt_remove(pw_store, k);
	PW_CHECK(r == 0, "kvt_remove of the block just put: %d %s", r, kvt_last_error());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct pw_buf out;
	static const uint8_t none[1];

	if (!data)
		data = none; /* size 0: no pointer arithmetic on NULL */
	if (!pw_store)
		pw_setup();
	pw_set_reserve(pw_max_items(size));
	/* record what the PUTs may store, and whether the answer may be cut */
	size_t unread = pw_walk(data, size, NULL);

	int fd = pw_connect();
	if (!out.p) {
		out.cap = 1u << 17;
		out.p = malloc(out.cap);
		PW_CHECK(out.p != NULL, "no memory");
	}
	out.n = 0;
	pw_exchange(fd, data, size, &out);
	close(fd);

	struct pw_rd rd = { out.p, out.n, out.p, unread > 0 };
	pw_walk(data, size, &rd);
	pw_check_store();
	return 0;
}
