/*
 * store_mem.c - kvt_mem_register() and kvt_mem_deregister(): caller memory
 * the engine lends the store's batches so that their disk I/O moves
 * straight between the device and that memory as io_uring fixed buffers,
 * and, with peers over RDMA, peer gets READ straight into it.
 * The table of ranges is memreg.c; mapping a range onto the disk tier's
 * queues is the disk tier's (disk_mem_map), onto the RDMA device the peer
 * tier's (peer_mem_register).
 */
#include <errno.h>

#include "store_impl.h"

KVT_API int kvt_mem_register(kvt_store *s, void *base, size_t len, unsigned flags,
			     uint64_t *id)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_mem_register: store is NULL");
	if (!id)
		return kvt_fail(-EINVAL, "kvt_mem_register: id is NULL");
	void *arena = NULL;
	size_t arena_len = 0;
	kvt_arena(s, &arena, &arena_len); /* also an attached store's mapping */
	pthread_mutex_lock(&s->mreg.lock);
	int i = memreg_add(&s->mreg, base, len, flags, arena, arena_len);
	if (i >= 0) {
		/* A kernel that refuses (RLIMIT_MEMLOCK, no spare entries)
		 * leaves the range registered here, its I/O the plain way. */
		if (s->disk)
			disk_mem_map(s->disk, &s->mreg.e[i], 1);
		if (s->peer)
			peer_mem_register(s->peer, base, len);
		*id = s->mreg.e[i].id;
	}
	pthread_mutex_unlock(&s->mreg.lock);
	return i < 0 ? i : 0;
}

KVT_API int kvt_mem_deregister(kvt_store *s, uint64_t id)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_mem_deregister: store is NULL");
	pthread_mutex_lock(&s->mreg.lock);
	int i = memreg_find(&s->mreg, id);
	int rc = 0;
	if (i < 0) {
		rc = kvt_fail(-ENOENT, "kvt_mem_deregister: no registered range has id %llu",
			      (unsigned long long)id);
	} else if ((rc = memreg_can_del(&s->mreg, i)) == 0) {
		if (s->disk)
			disk_mem_map(s->disk, &s->mreg.e[i], 0);
		if (s->peer)
			peer_mem_deregister(s->peer, s->mreg.e[i].base);
		memreg_del(&s->mreg, i);
	}
	pthread_mutex_unlock(&s->mreg.lock);
	return rc;
}
