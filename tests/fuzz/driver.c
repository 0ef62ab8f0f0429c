/*
 * driver.c - a stand-alone main() for the fuzz targets of tests/fuzz/, for
 * machines without libFuzzer: feeds every file named on the command line, and
 * every regular file inside every directory named (in name order), to
 * LLVMFuzzerTestOneInput() once. A broken invariant aborts inside the target;
 * the driver prints each file before running it so the culprit is named.
 *
 *   cc ... tests/fuzz/fuzz_config.c tests/fuzz/driver.c -o fuzz_config
 *   ./fuzz_config tests/fuzz/corpus/config tests/fuzz/crashers/config
 *
 * Exits 0 when every input ran, 1 when an input could not be read, 2 on usage.
 * Knows nothing about what the targets test.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target on one file. Returns 0, or -errno when it cannot be read. */
static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *data = NULL;
	size_t size = 0, cap = 0, got;
	int err = 0;

	if (!f)
		return -errno;
	do {
		if (size == cap) {
			size_t ncap = cap ? cap * 2 : 4096;
			uint8_t *p = realloc(data, ncap);
			if (!p) {
				err = -ENOMEM;
				break;
			}
			data = p;
			cap = ncap;
		}
		got = fread(data + size, 1, cap - size, f);
		size += got;
	} while (got > 0);
	if (!err && ferror(f))
		err = -EIO;
	fclose(f);
	if (!err) {
		fprintf(stderr, "running %s (%zu bytes)\n", path, size);
		/* an exact-size copy, so the sanitizers see reads past the end */
		uint8_t *exact = malloc(size ? size : 1);
		if (!exact) {
			err = -ENOMEM;
		} else {
			if (size)
				memcpy(exact, data, size);
			LLVMFuzzerTestOneInput(exact, size);
			free(exact);
		}
	}
	free(data);
	return err;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir; *ran counts them. Returns 0 or -errno. */
static int run_dir(const char *dir, unsigned *ran)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int err = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			char **p = realloc(names, ncap * sizeof(*p));
			if (!p) {
				err = -ENOMEM;
				break;
			}
			names = p;
			cap = ncap;
		}
		size_t len = strlen(dir) + strlen(e->d_name) + 2;
		names[n] = malloc(len);
		if (!names[n]) {
			err = -ENOMEM;
			break;
		}
		snprintf(names[n], len, "%s/%s", dir, e->d_name);
		n++;
	}
	closedir(d);
	if (!err)
		qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 0; i < n; i++) {
		struct stat st;

		if (!err && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
			err = run_file(names[i]);
			if (err)
				fprintf(stderr, "%s: %s\n", names[i], strerror(-err));
			else
				(*ran)++;
		}
		free(names[i]);
	}
	free(names);
	return err;
}

int main(int argc, char **argv)
{
	unsigned ran = 0;
	int status = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		int err;

		if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			err = run_dir(argv[i], &ran);
		} else {
			err = run_file(argv[i]);
			ran += err == 0;
		}
		if (err) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(-err));
			status = 1;
		}
	}
	fprintf(stderr, "%u inputs ran\n", ran);
	return status;
}
