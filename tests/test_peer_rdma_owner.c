/*
 * test_peer_rdma_owner.c - a loader's RDMA gets while the owner of the
 * blocks misbehaves, over the real libibverbs, librdmacm and kernel verbs
 * stack (the soft-RoCE VM of tests/rdma/vm.sh, `make check-rdma`; anywhere
 * else it exits 77). The owner is another process (a fresh exec of this
 * program, member a at 10.77.0.1) that puts its blocks and waits; the
 * loader is member b at 10.77.0.2 in this process, loading in a thread
 * while the main thread kills, stops or restarts the owner, or has it
 * close its store (kvt_close) in the middle of the READs. Each op of a
 * batch either holds the owner's exact bytes or fails (a miss, or
 * -ETIMEDOUT from a silent owner), and every batch returns within a bound
 * of the configured timeouts. An owner restarted while the loader is idle
 * serves the loader's next batch whole (its link is dialled again first).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "internal.h"
#include "rdma_util.h"
#include "util.h"

#define MiB (1024u * 1024u)
#define NB 32u
#define REQUEST_MS 4000u

static int next_port = 7700;

/* The members: 128 MiB of RAM, a request timeout of REQUEST_MS. */
static const struct rdma_member_opts members = { "128MiB", REQUEST_MS, 300 };

static volatile sig_atomic_t close_now;

static void on_usr1(int sig)
{
	(void)sig;
	close_now = 1;
}

/* The owner: member a, its NB blocks put, then waiting to be killed; on
 * SIGUSR1 it closes its store (and goes on waiting). */
static void owner(int port, int wfd)
{
	kvt_store *a;
	kvt_key keys[NB];
	uint8_t *blk = malloc(MiB);
	/* never outlives the test, even one that failed before it killed it */
	char ok = prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() != 1 && blk &&
		  rdma_open_member(&members, 0, port, &a) == 0;

	test_owned_keys(rdma_names, 2, 0, 1, keys, NB);
	for (unsigned i = 0; ok && i < NB; i++) {
		fill_block(keys[i], blk, MiB);
		ok = kvt_put(a, keys[i], blk, MiB) == 0;
	}
	if (!ok) {
		printf("# the owner could not start: %s\n", kvt_last_error());
		fflush(stdout);
	}
	signal(SIGUSR1, on_usr1);
	if (write(wfd, &ok, 1) != 1 || !ok)
		_exit(1);
	while (!close_now)
		pause();
	kvt_close(a);
	for (;;)
		pause();
}

/* The loader's side: batches of every key until told to stop. */
struct loader {
	kvt_store *b;
	kvt_key keys[NB];
	uint8_t *mem;
	atomic_int stop, batches;
	int wrong, hits, misses, timeouts, others;
	uint64_t longest_ns;
};

/* One batch: counts each op's outcome; a hit must hold the exact bytes. */
static void one_batch(struct loader *l)
{
	kvt_op ops[NB];

	memset(l->mem, 0xa5, (size_t)NB * MiB);
	for (unsigned i = 0; i < NB; i++)
		ops[i] = (kvt_op){ .key = l->keys[i], .buf = l->mem + (size_t)i * MiB, .len = MiB };
	uint64_t t0 = kvt_now_ns();
	kvt_get_batch(l->b, ops, NB);
	uint64_t took = kvt_now_ns() - t0;
	if (took > l->longest_ns)
		l->longest_ns = took;
	int h0 = l->hits, m0 = l->misses, t0s = l->timeouts;
	for (unsigned i = 0; i < NB; i++) {
		if (ops[i].result == 0) {
			l->hits++;
			if (ops[i].len != MiB || !check_block(l->keys[i], ops[i].buf, MiB))
				l->wrong++;
		} else if (ops[i].result == -ENOENT) {
			l->misses++;
		} else if (ops[i].result == -ETIMEDOUT) {
			l->timeouts++;
		} else {
			printf("# op %u: %s\n", i, kvt_strerror(ops[i].result));
			l->others++;
		}
	}
	printf("# batch %d: %d hits, %d misses, %d timeouts in %.1f s\n",
	       atomic_load(&l->batches), l->hits - h0, l->misses - m0, l->timeouts - t0s,
	       (double)took / 1e9);
	atomic_fetch_add(&l->batches, 1);
}

static void *loader_main(void *arg)
{
	struct loader *l = arg;

	while (!atomic_load(&l->stop))
		one_batch(l);
	return NULL;
}

static void loader_open(struct loader *l, int port)
{
	memset(l, 0, sizeof(*l));
	l->mem = mmap(NULL, (size_t)NB * MiB, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(l->mem != MAP_FAILED);
	assert_int_equal(rdma_open_member(&members, 1, port, &l->b), 0);
	test_owned_keys(rdma_names, 2, 0, 1, l->keys, NB);
}

static void loader_close(struct loader *l)
{
	kvt_close(l->b);
	munmap(l->mem, (size_t)NB * MiB);
}

/* Waits until the loader has begun to READ from the owner again. */
static void wait_reading(struct loader *l)
{
	long long wrs = rdma_stat_at(l->b, "peer.members.0.rdma_work_requests");

	for (int i = 0; i < 6000; i++) {
		if (rdma_stat_at(l->b, "peer.members.0.rdma_work_requests") > wrs)
			return;
		usleep(10000);
	}
	fail_msg("the loader never READ from the owner");
}

static struct loader *running; /* the loader of run_with, for act_stop */

static void run_with(struct loader *l, void (*act)(pid_t *pid, int port), int port,
		     int serves_after)
{
	pthread_t t;
	pid_t pid = rdma_spawn_ready("test_peer_rdma_owner", "owner", port);

	/* one whole batch first: every block there, every byte right */
	one_batch(l);
	printf("# first batch: %d hits, %d misses, %d timeouts\n", l->hits, l->misses,
	       l->timeouts);
	assert_int_equal(l->hits, NB);
	assert_int_equal(l->wrong, 0);
	l->hits = l->misses = l->timeouts = 0;
	running = l;
	assert_int_equal(pthread_create(&t, NULL, loader_main, l), 0);
	wait_reading(l);
	act(&pid, port);
	int before = atomic_load(&l->batches);
	/* the loader goes on: batches keep ending */
	for (int i = 0; i < 3000 && atomic_load(&l->batches) < before + 3; i++)
		usleep(10000);
	atomic_store(&l->stop, 1);
	pthread_join(t, NULL);
	printf("# %d batches: %d hits, %d misses, %d timeouts, %d others, %d wrong; "
	       "longest %.1f s\n", atomic_load(&l->batches), l->hits, l->misses, l->timeouts,
	       l->others, l->wrong, (double)l->longest_ns / 1e9);
	if (pid > 0 && serves_after) {
		/* the owner is up: a batch after its member was marked down
		 * (down_ms) is whole again */
		usleep(400000);
		int before_hits = l->hits;
		one_batch(l);
		assert_int_equal(l->hits, before_hits + (int)NB);
	}
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	assert_int_equal(l->wrong, 0);
	assert_int_equal(l->others, 0);
	assert_true(atomic_load(&l->batches) >= before + 3);
	/* bounded: a batch asks one owner one round trip (request timeout,
	 * plus its bytes at 100 MB/s) after a dial (connect timeout) */
	assert_true(l->longest_ns < 10ull * (REQUEST_MS + 3000 + NB * 10) * 1000000ull);
}

static void act_kill(pid_t *pid, int port)
{
	(void)port;
	kill(*pid, SIGKILL);
	waitpid(*pid, NULL, 0);
	*pid = -1;
}

/* The owner killed while the loader READs its blocks. */
static void test_owner_killed_mid_get(void **state)
{
	(void)state;
	struct loader l;
	int port = next_port++;

	loader_open(&l, port);
	run_with(&l, act_kill, port, 1);
	assert_true(l.misses > 0);
	loader_close(&l);
}

static void act_stop(pid_t *pid, int port)
{
	(void)port;
	kill(*pid, SIGSTOP);
	/* stopped until the batch in flight ended and one more, sent while
	 * it was stopped, ended too (past the request timeout) */
	int b0 = atomic_load(&running->batches);
	for (int i = 0; i < 6000 && atomic_load(&running->batches) < b0 + 2; i++)
		usleep(10000);
	kill(*pid, SIGCONT);
}

/* The owner stopped (SIGSTOP) while the loader READs, then continued. */
static void test_owner_stopped_mid_get(void **state)
{
	(void)state;
	struct loader l;
	int port = next_port++;

	loader_open(&l, port);
	run_with(&l, act_stop, port, 1);
	/* a batch sent to the stopped owner waited for its answers past the
	 * request timeout: -ETIMEDOUT, as over TCP */
	assert_true(l.timeouts > 0);
	loader_close(&l);
}

static void act_close(pid_t *pid, int port)
{
	(void)port;
	kill(*pid, SIGUSR1);
}

/* The owner closes its store (kvt_close) while the loader READs from it. */
static void test_owner_closed_mid_get(void **state)
{
	(void)state;
	struct loader l;
	int port = next_port++;

	loader_open(&l, port);
	run_with(&l, act_close, port, 0);
	assert_true(l.misses > 0);
	loader_close(&l);
}

static void act_restart(pid_t *pid, int port)
{
	kill(*pid, SIGKILL);
	waitpid(*pid, NULL, 0);
	*pid = rdma_spawn_ready("test_peer_rdma_owner", "owner", port);
}

/* The owner killed and started again at its address, with its blocks. */
static void test_owner_restarted_mid_get(void **state)
{
	(void)state;
	struct loader l;
	int port = next_port++;

	loader_open(&l, port);
	run_with(&l, act_restart, port, 1);
	loader_close(&l);
}

/* The owner killed and started again while the loader is idle: the
 * loader's next batch after the new owner is up finds every block. */
static void test_owner_restarted_between_gets(void **state)
{
	(void)state;
	struct loader l;
	int port = next_port++;

	loader_open(&l, port);
	pid_t pid = rdma_spawn_ready("test_peer_rdma_owner", "owner", port);
	one_batch(&l);
	assert_int_equal(l.hits, NB);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	pid = rdma_spawn_ready("test_peer_rdma_owner", "owner", port);
	/* the link to the old process closed while the loader was idle: it
	 * is dialled again before the next get relies on it */
	long long fails = rdma_stat_at(l.b, "peer.members.0.rdma_failures");
	long long redials = rdma_stat_at(l.b, "peer.members.0.rdma_reconnects");
	l.hits = l.misses = 0;
	one_batch(&l);
	printf("# after the restart: %d hits, %d misses, %d timeouts, %d wrong\n", l.hits,
	       l.misses, l.timeouts, l.wrong);
	assert_int_equal(l.hits, NB);
	assert_int_equal(l.wrong, 0);
	assert_int_equal(rdma_stat_at(l.b, "peer.members.0.rdma_failures"), fails);
	assert_int_equal(rdma_stat_at(l.b, "peer.members.0.rdma_reconnects"), redials + 1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	loader_close(&l);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "owner"))
		owner(atoi(argv[2]), atoi(argv[3]));

	test_need_rdma_vm(7699);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_owner_killed_mid_get),
		cmocka_unit_test(test_owner_stopped_mid_get),
		cmocka_unit_test(test_owner_closed_mid_get),
		cmocka_unit_test(test_owner_restarted_mid_get),
		cmocka_unit_test(test_owner_restarted_between_gets),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
