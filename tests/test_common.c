/*
 * test_common.c - the helpers of common/ that kvbench and the tests share:
 * verifiable block contents, the rendezvous owner of a key, and loopback
 * ports held until a store listens on them (and test_free_port(), the
 * tests' own helper over them, held until the test exits).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "common.h"
#include "util.h"
#include "kvtier.h"

static void fill_and_check_find_the_first_wrong_byte(void **state)
{
	unsigned char buf[1003];
	kvt_key k1 = { 1, 2 }, k2 = { 2, 1 };

	(void)state;
	assert_true(common_key_seed(k1) != common_key_seed(k2));
	common_fill(buf, sizeof(buf), 42);
	assert_true(common_check(buf, sizeof(buf), 42) == -1);
	buf[1001] ^= 0x10; /* in the partial last word */
	assert_true(common_check(buf, sizeof(buf), 42) == 1001);
	buf[1001] ^= 0x10;
	buf[3] ^= 1;
	assert_true(common_check(buf, sizeof(buf), 42) == 3);
	buf[3] ^= 1;
	assert_true(common_check(buf, sizeof(buf), 43) >= 0);
	assert_true(common_check(buf, 0, 43) == -1);
}

static void owner_is_stable_and_spreads_keys(void **state)
{
	const char *const names[] = { "a", "b", "c" };
	unsigned count[3] = { 0 };

	(void)state;
	for (uint64_t i = 0; i < 3000; i++) {
		kvt_key k = { i * 0x9e3779b97f4a7c15ull, ~i };
		unsigned o = common_key_owner(k, names, 3);

		assert_true(o < 3);
		assert_int_equal(common_key_owner(k, names, 3), o);
		/* dropping another member never moves a key (rendezvous) */
		if (o == 0)
			assert_int_equal(common_key_owner(k, names, 2), 0);
		count[o]++;
	}
	for (unsigned m = 0; m < 3; m++)
		assert_true(count[m] > 700 && count[m] < 1300);
	assert_int_equal(common_key_owner((kvt_key){ 1, 2 }, names, 1), 0);
}

/* bind() of a plain socket (no SO_REUSEADDR) to 127.0.0.1:port. */
static int plain_bind(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;

	assert_true(fd >= 0);
	rc = bind(fd, (struct sockaddr *)&a, sizeof(a)) ? -errno : 0;
	close(fd);
	return rc;
}

/*
 * A held port is taken for everyone else (a plain bind fails) until it is
 * released, yet a store listens on it meanwhile: no window between finding
 * the port and listening on it.
 */
static void held_ports_are_distinct_taken_and_usable_by_a_store(void **state)
{
	struct common_ports p;
	char cfg[512];
	kvt_store *s = NULL;
	int rc;

	(void)state;
	assert_int_equal(common_ports_reserve(&p, 3), 0);
	assert_int_equal(p.n, 3);
	assert_true(p.port[0] != p.port[1] && p.port[1] != p.port[2] &&
		    p.port[0] != p.port[2]);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(plain_bind(p.port[i]), -EADDRINUSE);
	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"8MiB\", \"mlock\": false},"
		 " \"peers\": {\"self\": \"a\", \"listen\": \"127.0.0.1:%d\","
		 " \"members\": [{\"name\": \"a\", \"addr\": \"127.0.0.1:%d\"},"
		 " {\"name\": \"b\", \"addr\": \"127.0.0.1:%d\"}]}}",
		 p.port[0], p.port[0], p.port[1]);
	rc = kvt_open(cfg, &s);
	if (rc)
		fail_msg("kvt_open on a held port: %s: %s", kvt_strerror(rc),
			 kvt_last_error());
	common_ports_release(&p);
	assert_int_equal(p.n, 0);
	common_ports_release(&p); /* twice is harmless */
	/* the store still listens; the other released ports are free again */
	assert_int_equal(plain_bind(p.port[0]), -EADDRINUSE);
	kvt_close(s);
	assert_int_equal(common_ports_reserve(&p, COMMON_PORTS_MAX + 1), -EINVAL);
	assert_int_equal(common_ports_reserve(&p, 0), 0);
	common_ports_release(&p);
}

/* A test holds as many ports as it asks for (the peer tier's tests ask for
 * two per case): each distinct from the others, each taken for everyone else. */
static void a_test_holds_hundreds_of_ports(void **state)
{
	enum { N = 300 };
	static int port[N];

	(void)state;
	for (int i = 0; i < N; i++) {
		port[i] = test_free_port();
		assert_true(port[i] > 0 && port[i] < 65536);
		assert_int_equal(plain_bind(port[i]), -EADDRINUSE);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(port[i], port[j]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fill_and_check_find_the_first_wrong_byte),
		cmocka_unit_test(owner_is_stable_and_spreads_keys),
		cmocka_unit_test(held_ports_are_distinct_taken_and_usable_by_a_store),
		cmocka_unit_test(a_test_holds_hundreds_of_ports),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
