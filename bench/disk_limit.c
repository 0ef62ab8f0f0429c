/*
 * disk_limit.c - the device limit of "kvbench disk": one pass of fio
 * (--rw=write / --rw=randread, io_uring, O_DIRECT, buffers in transparent
 * huge pages) over the tier's own file, or the bench's raw io_uring loop
 * where fio is missing or --no-fio is given, with the figure's block size
 * and queue depth (kvbench(1) gives the method).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disk_cmd.h"
#include "stats.h"
#include "uring.h"
#include "opts.h"

int db_have_fio(void)
{
	return bench_system("exec fio --version >/dev/null 2>&1") == 0;
}

/* Runs fio on path for secs seconds (0: one pass over the file) and returns
 * bytes/s of the job's direction, or NAN. */
static double fio_run(const struct run *r, const char *path, const char *rw,
		      unsigned secs)
{
	char cmd[8800], out[4096 + 16], timed[64] = "";
	snprintf(out, sizeof(out), "%s.json", r->limpath);
	if (secs)
		snprintf(timed, sizeof(timed), "--runtime=%u --time_based ", secs);
	/* glibc.malloc.hugetlb=1: fio's buffers in transparent huge pages, the
	 * kind of memory the store's arena and this bench's buffers are (with
	 * 4 KiB pages a 1 MiB transfer takes 256 segments, and a virtio disk
	 * splits it in two) */
	snprintf(cmd, sizeof(cmd),
		 "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 exec fio --name=limit --filename=%s --rw=%s --bs=%llu --iodepth=%lu "
		 "--ioengine=io_uring --direct=1 --size=%llu %s"
		 "--output-format=json --output=%s >/dev/null 2>&1",
		 path, rw, (unsigned long long)r->o.bs, r->o.qd,
		 (unsigned long long)r->o.size, timed, out);
	if (bench_system(cmd) != 0) /* stopped with kvbench, too */
		return NAN;
	json_error_t e;
	json_t *doc = json_load_file(out, 0, &e);
	unlink(out);
	if (!doc)
		return NAN;
	json_t *job = json_array_get(json_object_get(doc, "jobs"), 0);
	json_t *dir = json_object_get(job, strcmp(rw, "write") ? "read" : "write");
	double bw = json_is_number(json_object_get(dir, "bw_bytes")) ?
		    json_number_value(json_object_get(dir, "bw_bytes")) : NAN;
	json_decref(doc);
	return bw;
}

/* The raw loop: the device layer alone, same sizes and depth, on path for
 * secs s (0: one pass of writes over the file). */
static double raw_run(const struct run *r, const char *path, int write, unsigned secs)
{
	int fd = uring_dev_ops.dev_open(path, r->o.size, NULL);
	void *q = NULL;
	unsigned nf = 0, qd = (unsigned)r->o.qd;
	uint64_t nb = r->o.size / r->o.bs, bytes = 0, pos = 0, seed = 88172645463325252ull;
	double bw = NAN;

	/* its own buffers: the arena holds the blocks the tier figures spill */
	char *buf = NULL;
	if (fd < 0 || posix_memalign((void **)&buf, 2u << 20, qd * r->o.bs) ||
	    uring_dev_ops.queue_open(&fd, 1, qd, NULL, 0, &nf, &q)) {
		if (fd >= 0)
			uring_dev_ops.dev_close(fd);
		free(buf);
		return NAN;
	}
	madvise(buf, qd * r->o.bs, MADV_HUGEPAGE); /* as the arena */
	memset(buf, 0x5a, qd * r->o.bs);
	/* many ios per dev_run, so the queue stays full as the tier's batches do */
	unsigned n = 8 * qd;
	struct dev_io *io = calloc(n, sizeof(*io));
	struct dev_io **p = calloc(n, sizeof(*p));
	uint64_t t0 = bench_now_ns();
	while (io && p && (secs ? bench_now_ns() - t0 < secs * 1000000000ull
				: pos < nb)) {
		for (unsigned i = 0; i < n; i++) {
			uint64_t b;
			if (write) {
				b = pos++ % nb;
			} else {
				seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
				b = seed % nb;
				pos++;
			}
			io[i] = (struct dev_io){ .op = write ? DEV_WRITE : DEV_READ,
				.buf = buf + (size_t)(i % qd) * r->o.bs, .off = b * r->o.bs,
				.len = (uint32_t)r->o.bs, .fixed = -1 };
			p[i] = &io[i];
		}
		if (dev_run(&uring_dev_ops, q, p, n, qd, NULL))
			break;
		bytes += n * r->o.bs;
	}
	free(buf);
	if (bytes)
		bw = (double)bytes / ((double)(bench_now_ns() - t0) / 1e9);
	free(io);
	free(p);
	uring_dev_ops.queue_close(q);
	uring_dev_ops.dev_close(fd);
	return bw;
}

/*
 * Removes a file and flushes its file system, so that freeing its blocks
 * (and discarding them, on a file system mounted with -o discard) is done
 * before the next figure starts rather than under it.
 */
void db_drop_file(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	int fd;

	if (unlink(path) != 0)
		return;
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
		 slash ? path : ".");
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		syncfs(fd);
		close(fd);
	}
}

/* One pass of the limit over path: sequential writes ("write") or random
 * reads ("randread") of the whole file once, bytes/s or NAN. */
double db_pass(const struct run *r, const char *path, const char *rw)
{
	if (r->o.fio)
		return fio_run(r, path, rw, 0);
	return raw_run(r, path, strcmp(rw, "write") == 0, 0);
}

/* A pass of writes into a new file at path, removed again afterwards. */
double db_pass_new(const struct run *r, const char *path)
{
	db_drop_file(path);
	double bw = db_pass(r, path, "write");
	db_drop_file(path);
	return bw;
}

double db_better(double a, double b)
{
	return isnan(a) || b > a ? b : a;
}

/*
 * Recreates the tier's file and writes every byte of it once (zeros, so no
 * superblock: the tier formats it), as fio writes its own file before it
 * rewrites it. Returns 0 or -errno.
 */
int db_layout(const struct run *r)
{
	const uint32_t chunk = 8u << 20;
	uint64_t size = r->o.size / 4096 * 4096;
	unsigned n = (unsigned)((size + chunk - 1) / chunk), nf = 0;
	void *q = NULL, *buf = NULL;
	struct dev_io *io = calloc(n, sizeof(*io));
	struct dev_io **p = calloc(n, sizeof(*p));
	int fd, err = 0;

	db_drop_file(r->tierpath);
	fd = uring_dev_ops.dev_open(r->tierpath, size, NULL);
	if (fd < 0 || !io || !p || posix_memalign(&buf, 4096, chunk) ||
	    uring_dev_ops.queue_open(&fd, 1, 8, NULL, 0, &nf, &q)) {
		err = fd < 0 ? fd : -ENOMEM;
		goto out;
	}
	memset(buf, 0, chunk);
	for (unsigned i = 0; i < n; i++) {
		uint64_t off = (uint64_t)i * chunk;

		io[i] = (struct dev_io){ .op = DEV_WRITE, .buf = buf, .off = off,
			.len = (uint32_t)(size - off < chunk ? size - off : chunk),
			.fixed = -1 };
		p[i] = &io[i];
	}
	err = dev_run(&uring_dev_ops, q, p, n, 4, NULL);
	for (unsigned i = 0; i < n && !err; i++)
		if (io[i].res < 0)
			err = io[i].res;
	if (!err)
		err = uring_dev_ops.dev_sync(fd);
out:
	if (err)
		fprintf(stderr, "kvbench disk: writing %s once: %s\n", r->tierpath,
			strerror(-err));
	if (q)
		uring_dev_ops.queue_close(q);
	if (fd >= 0)
		uring_dev_ops.dev_close(fd);
	free(buf);
	free(io);
	free(p);
	return err;
}
