/*
 * test_fuzz_corpus.c - replays the seed corpora of tests/fuzz/corpus/ through
 * the fuzz targets of tests/fuzz/ (config parser, trace readers, disk-tier
 * recovery, the peer server's frames, the local socket's frames), so
 * `make check`, `make check-asan` and `make check-tsan` run them under each build without clang or libFuzzer. A
 * target aborts on a broken invariant, which fails this test; each test also
 * checks that its corpus is there and not empty. Crashers kept in
 * tests/fuzz/crashers/ are not replayed.
 *
 * Each target is included here with its entry point renamed, so one binary
 * holds all five; it knows nothing else about them.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#define LLVMFuzzerTestOneInput fuzz_config_one
#include "fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_trace_one
#include "fuzz/fuzz_trace.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_disk_scan_one
#include "fuzz/fuzz_disk_scan.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_peer_wire_one
#include "fuzz/fuzz_peer_wire.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_local_wire_one
#include "fuzz/fuzz_local_wire.c"
#undef LLVMFuzzerTestOneInput

/* Seeds of a target, expected at least this many. */
#define MIN_SEEDS 10

/* tests/fuzz/corpus/NAME, next to this source file. */
static const char *corpus_dir(const char *name)
{
	static char buf[512];
	const char *slash = strrchr(__FILE__, '/');
	int dir = slash ? (int)(slash - __FILE__) : 0;

	snprintf(buf, sizeof(buf), "%.*s%sfuzz/corpus/%s", dir, __FILE__,
		 slash ? "/" : "", name);
	return buf;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the whole file into an exact-size buffer; *size set. */
static uint8_t *slurp(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	long n;
	uint8_t *data;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	data = malloc(n ? (size_t)n : 1);
	assert_non_null(data);
	assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*size = (size_t)n;
	return data;
}

/* Feeds every file of the corpus to one(), in name order; returns the count. */
static unsigned replay(const char *name, int (*one)(const uint8_t *, size_t))
{
	const char *dir = corpus_dir(name);
	DIR *d = opendir(dir);
	struct dirent *e;
	char *paths[1024];
	unsigned n = 0;

	if (!d)
		fail_msg("cannot open the corpus %s", dir);
	while ((e = readdir(d))) {
		char path[768];
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		assert_true(n < sizeof(paths) / sizeof(paths[0]));
		paths[n] = strdup(path);
		assert_non_null(paths[n]);
		n++;
	}
	closedir(d);
	qsort(paths, n, sizeof(*paths), by_name);
	for (unsigned i = 0; i < n; i++) {
		size_t size;
		uint8_t *data = slurp(paths[i], &size);

		print_message("%s\n", paths[i]);
		assert_int_equal(one(data, size), 0);
		free(data);
		free(paths[i]);
	}
	return n;
}

static void config_corpus_parses_without_breaking_an_invariant(void **state)
{
	(void)state;
	assert_true(replay("config", fuzz_config_one) >= MIN_SEEDS);
}

static void trace_corpus_reads_without_breaking_an_invariant(void **state)
{
	(void)state;
	assert_true(replay("trace", fuzz_trace_one) >= MIN_SEEDS);
}

static void damaged_disk_corpus_never_reads_back_wrong_bytes(void **state)
{
	(void)state;
	assert_true(replay("disk_scan", fuzz_disk_scan_one) >= MIN_SEEDS);
}

static void local_wire_corpus_closes_that_client_and_leaks_nothing(void **state)
{
	(void)state;
	assert_true(replay("local_wire", fuzz_local_wire_one) >= MIN_SEEDS);
}

static void peer_wire_corpus_is_answered_as_the_protocol_says(void **state)
{
	(void)state;
	assert_true(replay("peer_wire", fuzz_peer_wire_one) >= MIN_SEEDS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(config_corpus_parses_without_breaking_an_invariant),
		cmocka_unit_test(trace_corpus_reads_without_breaking_an_invariant),
		cmocka_unit_test(damaged_disk_corpus_never_reads_back_wrong_bytes),
		cmocka_unit_test(peer_wire_corpus_is_answered_as_the_protocol_says),
		cmocka_unit_test(local_wire_corpus_closes_that_client_and_leaks_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
