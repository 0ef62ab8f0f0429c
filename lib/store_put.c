/*
 * store_put.c - the facade's put path: a put batch chunk by chunk, RAM
 * first, blocks RAM cannot take written around it to disk, the lead blocks
 * of a chunk larger than RAM straight to disk, write-through copies after,
 * and RAM's room-making spills in the same submission as the chunk's disk
 * writes (store.c's kvt_put and kvt_put_batch call it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "store_impl.h"

/* Why a put's data and len are refused (written to why), or 0 when they
 * are not: the one text of a put's -EINVAL, alone or in a batch's op. */
static int put_args_why(uint64_t max_block, const void *data, size_t len, char *why,
			size_t cap)
{
	if (!data)
		snprintf(why, cap, "data is NULL");
	else if (len == 0)
		snprintf(why, cap, "len is 0");
	else if (len > max_block)
		snprintf(why, cap, "len %zu exceeds ram.max_block (%llu bytes)", len,
			 (unsigned long long)max_block);
	else if (len > UINT32_MAX)
		snprintf(why, cap, "len %zu exceeds the 4 GiB - 1 a block holds", len);
	else
		return 0;
	return -EINVAL;
}

static int check_put_args(kvt_store *s, const void *data, size_t len, const char *fn)
{
	char why[96];

	if (!put_args_why(s->cfg.max_block, data, len, why, sizeof(why)))
		return 0;
	return kvt_fail(-EINVAL, "%s: %s", fn, why);
}

/* Why no tier could take a block (-ENOSPC). */
static const char *nospc_why(const kvt_store *s)
{
	return !s->disk ? RAM_DROPPED_WHY :
	       s->cfg.refuse_when_leased ? "RAM holds only leased or pinned blocks and "
					   "ram.refuse_when_leased is set" :
	       "RAM holds only leased or pinned blocks and the disk tier is full";
}

int store_first_failure(const kvt_op *ops, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ops[i].result)
			return ops[i].result;
	return 0;
}

/* The disk's share of a put chunk: write-arounds and write-throughs. */
struct disk_leg {
	size_t op;        /* index in the chunk's ops */
	int write_around; /* 1: RAM refused it; 0: write-through copy */
};

/*
 * Where a put chunk holds more bytes than the RAM tier keeps below its high
 * watermark, its leading ops would be evicted (spilled) by its later ones
 * before it ends: returns how many lead ops go straight to disk, from the
 * caller's buffers, with the write-arounds, and in *ram_bytes the bytes of
 * the others, for which RAM then makes room in a few large spills
 * (ram_make_room). 0 and *ram_bytes 0 without a disk tier, with
 * write-through (every block goes to disk anyway) or ram.refuse_when_leased
 * (RAM refuses, nothing goes around): RAM then evicts as puts need.
 */
static size_t put_overflow(kvt_store *s, const kvt_op *ops, size_t n, uint64_t *ram_bytes)
{
	uint64_t keep = ram_high_bytes(s->ram), tail = 0;
	size_t lead = n;

	*ram_bytes = 0;
	if (!s->disk || s->cfg.write_policy == KVT_WRITE_THROUGH || s->cfg.refuse_when_leased)
		return 0;
	while (lead > 0 && ops[lead - 1].len <= keep - tail)
		tail += ops[--lead].len;
	*ram_bytes = tail;
	return lead;
}

/* The disk legs of a chunk: the ops going to disk and what each is. */
struct disk_legs {
	struct disk_leg leg[CHUNK];
	kvt_op dops[CHUNK];
	size_t nd;
};

/* The part of a chunk that RAM takes (ops[from..to)), and the disk legs it
 * leaves (write-through copies, blocks RAM refused). */
struct ram_part {
	kvt_store *s;
	kvt_op *ops;
	size_t from, to;
	const char *fn;
	int nospill;              /* RAM must not spill to make room */
	struct disk_legs *out;
	size_t next;              /* the first op not taken yet */
};

/* Checks op i of a chunk; 1 when it goes on (valid, not on disk yet). */
static int put_wanted(kvt_store *s, kvt_op *op, const char *fn)
{
	op->result = check_put_args(s, op->buf, op->len, fn);
	return !op->result && !(s->disk && disk_contains(s->disk, op->key, NULL));
}

/* What RAM's answer rc to op i means: a write-through copy or a
 * write-around for disk, a refusal, a failure. */
static void ram_part_settle(struct ram_part *p, size_t i, int rc)
{
	kvt_store *s = p->s;
	struct disk_legs *o = p->out;
	kvt_op *op = &p->ops[i];

	if (rc == 0 && s->disk && s->cfg.write_policy == KVT_WRITE_THROUGH) {
		o->leg[o->nd] = (struct disk_leg){ i, 0 };
		o->dops[o->nd++] = *op;
	} else if (rc == -ENOSPC && s->disk && !s->cfg.refuse_when_leased) {
		o->leg[o->nd] = (struct disk_leg){ i, 1 };
		o->dops[o->nd++] = *op;
	} else if (rc == -ENOSPC) {
		ctr_add(&s->refused_puts, 1);
		op->result = -ENOSPC;
	} else if (rc < 0) {
		op->result = rc;
	}
}

/* Puts the ops of the part not taken yet into RAM. */
static void ram_part_run(void *arg)
{
	struct ram_part *p = arg;
	kvt_store *s = p->s;

	for (; p->next < p->to; p->next++) {
		kvt_op *op = &p->ops[p->next];
		if (!put_wanted(s, op, p->fn))
			continue; /* bad op, or immutable and already stored */
		ram_part_settle(p, p->next, p->nospill ?
				ram_put_nospill(s->ram, op->key, op->buf, op->len) :
				ram_put(s->ram, op->key, op->buf, op->len));
	}
}

/* RAM's fit (ram_room) while it makes room for the part: puts the next
 * ops while they fit without spilling, as the spills free room; stops at
 * the first that does not fit yet. Returns the bytes put. */
static uint64_t ram_part_fit(void *arg)
{
	struct ram_part *p = arg;
	kvt_store *s = p->s;
	uint64_t added = 0;

	for (; p->next < p->to; p->next++) {
		kvt_op *op = &p->ops[p->next];
		if (!put_wanted(s, op, p->fn))
			continue;
		/* RAM is full (it spills to take these): summed as copied, so
		 * that their own spills need not read them again */
		int rc = ram_put_summed(s->ram, op->key, op->buf, op->len, 0);
		if (rc == -ENOSPC)
			break; /* the next spill's room, or the last pass */
		ram_part_settle(p, p->next, rc);
		if (rc == 0)
			added += op->len;
	}
	return added;
}

/* Sets the results of a chunk's disk legs after their batch. */
static void disk_legs_done(kvt_store *s, kvt_op *ops, struct disk_legs *l)
{
	for (size_t j = 0; j < l->nd; j++) {
		kvt_op *op = &ops[l->leg[j].op];
		int rc = l->dops[j].result;
		char kb[34];
		if (!l->leg[j].write_around) { /* RAM holds it: the put succeeded */
			if (rc == 0)
				ctr_add(&s->write_through, 1);
			else
				kvt_log(KVT_LOG_WARN, "write-through of %s to disk failed: %s",
					kvt_key_str(op->key, kb), kvt_strerror(rc));
			continue;
		}
		if (rc == 0)
			ctr_add(&s->write_arounds, 1);
		else if (rc == -ENOSPC)
			ctr_add(&s->refused_puts, 1);
		op->result = rc;
	}
}

/*
 * Puts ops[0..n), n <= CHUNK: RAM first; blocks RAM cannot take go around
 * to disk (unless ram.refuse_when_leased), as do the lead blocks of a chunk
 * larger than RAM (put_overflow); write-through copies follow. Where RAM
 * must make room for the chunk, its spills and the lead blocks go to disk
 * in one submission, and RAM takes the chunk's blocks as each spill frees
 * room, while the later writes are in flight (ram_make_room_with), so the
 * device's queue stays full; where it need not, the lead blocks go in one
 * submission and RAM copies the rest while those are in flight (without
 * spilling, a block that no longer fits going around). What that leaves
 * for disk goes in a last submission.
 */
static void put_chunk(kvt_store *s, kvt_op *ops, size_t n, const char *fn)
{
	struct disk_legs lead_legs = { .nd = 0 }, rest = { .nd = 0 };
	uint64_t ram_bytes;
	size_t lead = put_overflow(s, ops, n, &ram_bytes);

	for (size_t i = 0; i < lead; i++)
		if (put_wanted(s, &ops[i], fn)) {
			lead_legs.leg[lead_legs.nd] = (struct disk_leg){ i, 1 };
			lead_legs.dops[lead_legs.nd++] = ops[i];
		}
	struct ram_part part = { s, ops, lead, n, fn, 0, &rest, lead };
	struct ram_room room = { ram_part_fit, &part, lead_legs.dops, lead_legs.nd };
	/* room for the chunk's RAM part in large spills, not in one small
	 * spill (down to the low watermark) every few puts */
	if (ram_bytes)
		ram_make_room_with(s->ram, ram_bytes, &room);
	if (room.nextra) { /* nothing had to be spilled: the lead blocks alone */
		part.nospill = 1;
		disk_put_batch_beside(s->disk, lead_legs.dops, lead_legs.nd,
				      ram_part_run, &part);
	} else {
		ram_part_run(&part);
	}
	if (rest.nd)
		disk_put_batch(s->disk, rest.dops, rest.nd);
	disk_legs_done(s, ops, &lead_legs);
	disk_legs_done(s, ops, &rest);
}

/* Puts ops[0..n) chunk by chunk (and in their owners' tiers when forward);
 * returns the first failure or 0, naming the block and the reason when no
 * tier could take it. */
int store_put_ops_to(kvt_store *s, kvt_op *ops, size_t n, const char *fn, int forward)
{
	for (size_t i = 0; i < n; i += CHUNK) {
		size_t k = n - i < CHUNK ? n - i : CHUNK;

		put_chunk(s, ops + i, k, fn);
		if (forward && s->peer)
			store_put_to_peers(s, ops + i, k);
	}
	if (ram_above_high(s->ram))
		store_kick_evictor(s);
	int rc = store_first_failure(ops, n);
	if (rc != -ENOSPC)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (ops[i].result != -ENOSPC)
			continue;
		char kb[34];
		return kvt_fail(-ENOSPC, "%s: no tier can take block %s (%zu bytes): %s", fn,
				kvt_key_str(ops[i].key, kb), ops[i].len, nospc_why(s));
	}
	return rc;
}

void store_put_batch_error(kvt_store *s, const kvt_op *ops, size_t n)
{
	char kb[34], why[256];
	uint64_t max = s->client ? local_max_block(s->client) : s->cfg.max_block;

	for (size_t i = 0; i < n; i++) {
		const kvt_op *op = &ops[i];
		int r = op->result;
		if (!r)
			continue;
		/* a lost node store: its own message says more */
		if (r != -EINVAL && r != -ENOSPC && r != -EIO && r != -ENOMEM)
			return;
		if (r == -ENOSPC)
			snprintf(why, sizeof(why), "no tier can take it: %s",
				 s->client ? "the node store's tiers cannot" : nospc_why(s));
		else if (r != -EINVAL || !put_args_why(max, op->buf, op->len, why, sizeof(why)))
			snprintf(why, sizeof(why), "%s", kvt_strerror(r));
		kvt_set_error("kvt_put_batch: op %zu (key %s, %zu bytes): %s", i,
			      kvt_key_str(op->key, kb), op->len, why);
		return;
	}
}
