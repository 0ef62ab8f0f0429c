/*
 * batch.c - asynchronous batches (kvt_batch_submit and the calls on a
 * batch: wait, poll, eventfd, result, free) and the pool of worker threads
 * that runs them through the store's synchronous batch paths. Knows nothing
 * about the tiers.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "store_impl.h"

struct kvt_batch {
	kvt_store *s;
	int opcode;
	kvt_op *ops;
	size_t n;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;
	int result;
	char error[256];          /* the worker's kvt_last_error() of a failure */
	int efd;
	struct kvt_batch *qnext;
};

static void *worker_main(void *arg);

/* --- asynchronous batches ------------------------------------------------------ */

static void batch_complete(struct kvt_batch *b, int result)
{
	pthread_mutex_lock(&b->lock);
	b->result = result;
	if (result < 0) /* said on the worker's thread: kept for the caller's */
		snprintf(b->error, sizeof(b->error), "%s", kvt_last_error());
	b->done = 1;
	if (b->efd >= 0) {
		uint64_t one = 1;
		ssize_t w = write(b->efd, &one, sizeof(one));
		(void)w; /* an eventfd counter far below its maximum cannot fail */
	}
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

static void *worker_main(void *arg)
{
	kvt_store *s = arg;

	for (;;) {
		pthread_mutex_lock(&s->qlock);
		while (!s->qhead && !s->stopping)
			pthread_cond_wait(&s->qcond, &s->qlock);
		struct kvt_batch *b = s->qhead;
		if (!b) { /* stopping and drained */
			pthread_mutex_unlock(&s->qlock);
			return NULL;
		}
		s->qhead = b->qnext;
		if (!s->qhead)
			s->qtail = NULL;
		pthread_mutex_unlock(&s->qlock);

		int rc = b->opcode == KVT_OP_GET ? store_run_get_batch(s, b->ops, b->n)
						 : store_run_put_batch(s, b->ops, b->n);
		batch_complete(b, rc);
	}
}

int batch_workers_start(kvt_store *s)
{
	s->workers = calloc(s->cfg.threads, sizeof(*s->workers));
	if (!s->workers)
		return kvt_fail(-ENOMEM, "kvt_open: out of memory");
	for (; s->nworkers < s->cfg.threads; s->nworkers++) {
		if (pthread_create(&s->workers[s->nworkers], NULL, worker_main, s))
			return kvt_fail(-ENOMEM, "kvt_open: cannot start worker thread %u",
					s->nworkers);
	}
	return 0;
}

void batch_workers_stop(kvt_store *s)
{
	pthread_mutex_lock(&s->qlock);
	s->stopping = 1;
	pthread_cond_broadcast(&s->qcond);
	pthread_mutex_unlock(&s->qlock);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	free(s->workers);
}

KVT_API int kvt_batch_submit(kvt_store *s, int opcode, kvt_op *ops, size_t n,
			     kvt_batch **out)
{
	if (!s)
		return kvt_fail(-EINVAL, "kvt_batch_submit: store is NULL");
	if (!out)
		return kvt_fail(-EINVAL, "kvt_batch_submit: out is NULL");
	if (opcode != KVT_OP_GET && opcode != KVT_OP_PUT)
		return kvt_fail(-EINVAL, "kvt_batch_submit: unknown opcode %d", opcode);
	if (!ops && n)
		return kvt_fail(-EINVAL, "kvt_batch_submit: ops is NULL but n is %zu", n);

	struct kvt_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return kvt_fail(-ENOMEM, "kvt_batch_submit: out of memory");
	b->s = s;
	b->opcode = opcode;
	b->ops = ops;
	b->n = n;
	b->efd = -1;
	b->result = -EINPROGRESS;
	pthread_mutex_init(&b->lock, NULL);
	kvt_cond_init_monotonic(&b->cond);

	pthread_mutex_lock(&s->qlock);
	if (s->stopping) {
		pthread_mutex_unlock(&s->qlock);
		pthread_mutex_destroy(&b->lock);
		pthread_cond_destroy(&b->cond);
		free(b);
		return kvt_fail(-ESHUTDOWN, "kvt_batch_submit: the store is closing");
	}
	if (s->qtail)
		s->qtail->qnext = b;
	else
		s->qhead = b;
	s->qtail = b;
	pthread_cond_signal(&s->qcond);
	pthread_mutex_unlock(&s->qlock);
	*out = b;
	return 0;
}

KVT_API int kvt_batch_wait(kvt_batch *b, int timeout_ms)
{
	int rc = 0;

	if (!b)
		return kvt_fail(-EINVAL, "kvt_batch_wait: batch is NULL");
	pthread_mutex_lock(&b->lock);
	if (timeout_ms < 0) {
		while (!b->done)
			pthread_cond_wait(&b->cond, &b->lock);
	} else {
		struct timespec ts = kvt_deadline_in_ms(timeout_ms);
		while (!b->done && rc == 0)
			rc = pthread_cond_timedwait(&b->cond, &b->lock, &ts);
		rc = b->done ? 0 : -ETIMEDOUT;
	}
	pthread_mutex_unlock(&b->lock);
	if (rc)
		kvt_set_error("kvt_batch_wait: not complete after %d ms", timeout_ms);
	return rc;
}

KVT_API int kvt_batch_poll(kvt_batch *b)
{
	if (!b)
		return kvt_fail(-EINVAL, "kvt_batch_poll: batch is NULL");
	pthread_mutex_lock(&b->lock);
	int done = b->done;
	pthread_mutex_unlock(&b->lock);
	return done;
}

/* Declared in internal.h; kvt_pin_fd (slot_pin.c) uses it too. */
int kvt_eventfd_lazy(int *efd, uint64_t count)
{
	if (*efd >= 0)
		return *efd;
	*efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (*efd < 0)
		return -errno;
	if (count) {
		ssize_t w = write(*efd, &count, sizeof(count));
		(void)w;
	}
	return *efd;
}

KVT_API int kvt_batch_fd(kvt_batch *b)
{
	if (!b)
		return kvt_fail(-EINVAL, "kvt_batch_fd: batch is NULL");
	pthread_mutex_lock(&b->lock);
	int fd = kvt_eventfd_lazy(&b->efd, b->done ? 1 : 0);
	pthread_mutex_unlock(&b->lock);
	if (fd < 0)
		return kvt_fail(fd, "kvt_batch_fd: eventfd: %s", kvt_strerror(fd));
	return fd;
}

KVT_API int kvt_batch_result(kvt_batch *b)
{
	if (!b)
		return kvt_fail(-EINVAL, "kvt_batch_result: batch is NULL");
	pthread_mutex_lock(&b->lock);
	int rc = b->done ? b->result : -EINPROGRESS;
	if (rc < 0 && rc != -EINPROGRESS)
		kvt_set_error("%s", b->error[0] ? b->error : kvt_strerror(rc));
	pthread_mutex_unlock(&b->lock);
	return rc;
}

KVT_API void kvt_batch_free(kvt_batch *b)
{
	if (!b)
		return;
	kvt_batch_wait(b, -1);
	if (b->efd >= 0)
		close(b->efd);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	free(b);
}
