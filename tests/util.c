/* util.c - see util.h. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <liburing.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common.h"
#include "util.h"
#include "rlink.h"

/* The seed of a block: a function of its key and its length. */
static uint64_t block_seed(kvt_key key, size_t len)
{
	uint64_t s = common_key_seed(key) ^ (uint64_t)len;

	return common_mix64(&s);
}

void fill_block(kvt_key key, void *buf, size_t len)
{
	common_fill(buf, len, block_seed(key, len));
}

int check_block(kvt_key key, const void *buf, size_t len)
{
	return common_check(buf, len, block_seed(key, len)) < 0;
}

kvt_key test_key(uint64_t i)
{
	uint64_t a = i, b = i ^ 0x5555555555555555ull;
	kvt_key k = { common_mix64(&a), common_mix64(&b) };
	return k;
}

/* The directory tests make their temporary directories in. */
static const char *temp_base(void)
{
	const char *env = getenv("KVT_TEST_DIR");

	if (env && *env)
		return env;
	return access("/var/tmp", W_OK | X_OK) == 0 ? "/var/tmp" : "/tmp";
}

char *make_temp_dir(const char *tag)
{
	char *p = malloc(4096);
	if (!p)
		return NULL;
	snprintf(p, 4096, "%s/kvt-%s-XXXXXX", temp_base(), tag);
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void rm_rf(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void store_put_block(kvt_store *s, kvt_key k, size_t len)
{
	void *b = malloc(len);
	assert_non_null(b);
	fill_block(k, b, len);
	int rc = kvt_put(s, k, b, len);
	if (rc)
		fail_msg("kvt_put: %s: %s", kvt_strerror(rc), kvt_last_error());
	free(b);
}

int store_get_block(kvt_store *s, kvt_key k, size_t len)
{
	void *b = malloc(len);
	size_t got = 0;
	assert_non_null(b);
	int rc = kvt_get(s, k, b, len, &got);
	if (rc == 0) {
		assert_int_equal(got, len);
		assert_true(check_block(k, b, len));
	}
	free(b);
	return rc;
}

long long store_stat(kvt_store *s, const char *tier, const char *name)
{
	/* Counters move while other threads (a peer's server, the evictor)
	 * work, so the document can grow between the two calls: leave room. */
	char *buf = NULL;
	for (int tries = 0; tries < 100; tries++) {
		int n = kvt_stats_json(s, NULL, 0);
		assert_true(n > 0);
		size_t cap = (size_t)n + 4096;
		buf = malloc(cap);
		assert_non_null(buf);
		int m = kvt_stats_json(s, buf, cap);
		assert_true(m > 0);
		if ((size_t)m < cap)
			break;
		free(buf);
		buf = NULL;
	}
	assert_non_null(buf);
	json_t *j = json_loads(buf, 0, NULL);
	free(buf);
	assert_non_null(j);
	json_t *v = json_object_get(json_object_get(j, tier), name);
	if (!v)
		fail_msg("no stat %s.%s", tier, name);
	long long x = json_integer_value(v);
	json_decref(j);
	return x;
}

unsigned test_owner(kvt_key k, const char *const *names, unsigned n)
{
	return common_key_owner(k, names, n);
}

void test_owned_keys(const char *const *names, unsigned nn, unsigned owner,
		     uint64_t from, kvt_key *out, size_t n)
{
	for (size_t got = 0; got < n; from++)
		if (test_owner(test_key(from), names, nn) == owner)
			out[got++] = test_key(from);
}

/* Ports held until the test ends (see test_free_port in util.h): as many
 * as the test asks for, in an array that grows; the lock lets threads of a
 * test ask too. */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static struct common_ports *held;
static size_t nheld, held_cap;

int test_free_port(void)
{
	int rc = 0, port = -1;
	size_t n;

	pthread_mutex_lock(&held_lock);
	n = nheld;
	if (nheld == held_cap) {
		size_t cap = held_cap ? 2 * held_cap : 64;
		struct common_ports *p = realloc(held, cap * sizeof(*p));
		if (!p)
			rc = -ENOMEM;
		else {
			held = p;
			held_cap = cap;
		}
	}
	if (!rc)
		rc = common_ports_reserve(&held[nheld], 1);
	if (!rc)
		port = held[nheld++].port[0];
	pthread_mutex_unlock(&held_lock);
	if (rc)
		fail_msg("cannot hold one more port of 127.0.0.1 (%zu held): %s", n,
			 strerror(-rc));
	return port;
}

const char *test_disk_unavailable(void)
{
	static char why[512];
	static int probed;
	struct io_uring ring;
	char path[300];
	int rc, fd;

	if (probed)
		return why[0] ? why : NULL;
	probed = 1;
	rc = io_uring_queue_init(4, &ring, 0);
	if (rc < 0) {
		snprintf(why, sizeof(why), "io_uring is unavailable here: %s",
			 strerror(-rc));
		return why;
	}
	io_uring_queue_exit(&ring);
	char *dir = make_temp_dir("probe");
	if (!dir) {
		snprintf(why, sizeof(why), "cannot make a directory in %s: %s",
			 temp_base(), strerror(errno));
		return why;
	}
	snprintf(path, sizeof(path), "%s/direct", dir);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		snprintf(why, sizeof(why),
			 "the file system of %s has no O_DIRECT (%s); set KVT_TEST_DIR "
			 "to a directory on a disk", temp_base(), strerror(errno));
	else
		close(fd);
	rm_rf(dir);
	free(dir);
	return why[0] ? why : NULL;
}

void test_skip_without_disk(void)
{
	const char *why = test_disk_unavailable();

	if (!why)
		return;
	fflush(stdout);
	fprintf(stderr, "skipped: %s\n", why);
	exit(TEST_EXIT_SKIP);
}

static int admit_none(void *arg, const struct sockaddr *from)
{
	(void)arg;
	(void)from;
	return 0;
}

void test_need_rdma_vm(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct rlink_node *n;

	inet_pton(AF_INET, "10.77.0.1", &a.sin_addr);
	if (rlink_node_open(&rlink_verbs_ops, (struct sockaddr *)&a, admit_none, NULL, &n)) {
		printf("no RDMA device serves 10.77.0.1 (%s): run under tests/rdma/vm.sh "
		       "(make check-rdma)\n", kvt_last_error());
		exit(77);
	}
	rlink_node_close(n);
}

void test_count_warnings(int level, const char *msg, void *arg)
{
	(void)msg;
	if (level <= KVT_LOG_WARN)
		atomic_fetch_add((atomic_int *)arg, 1);
}
