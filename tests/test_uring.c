/*
 * test_uring.c - the io_uring implementation of the device seam
 * (lib/uring.c) on a file in a temp dir: round trip with plain and fixed
 * buffers, why a device is refused, a refused submission that sends
 * nothing later, vectored writes and reads (cut short, read back after a
 * reopen, a misaligned segment refused).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "uring.h"
#include "util.h"

/* --- the real io_uring ops ------------------------------------------------------- */

static void uring_round_trip_plain_and_fixed(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	char *dir = make_temp_dir("uring");
	char path[4200];
	void *arena = NULL, *q = NULL;
	unsigned nfixed = 9;
	const size_t len = 1 << 20;

	snprintf(path, sizeof(path), "%s/dev", dir);
	int fd = uring_dev_ops.dev_open(path, 4 << 20, NULL);
	assert_true(fd >= 0);
	struct stat sb;
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, 4 << 20);
	assert_true(sb.st_blocks * 512 >= (4 << 20)); /* preallocated */

	assert_int_equal(posix_memalign(&arena, 4096, 2 * len), 0);
	assert_int_equal(uring_dev_ops.queue_open(&fd, 1, 16, arena, 2 * len, &nfixed, &q), 0);
	assert_true(nfixed <= 1);
	char *a = arena, *b = (char *)arena + len;
	fill_block(test_key(3), a, len);
	struct dev_io io[2], *p[2] = { &io[0], &io[1] };
	memset(io, 0, sizeof(io));
	io[0] = (struct dev_io){ .op = DEV_WRITE, .buf = a, .off = 0, .len = (uint32_t)len,
				 .fixed = nfixed ? 0 : -1 };
	io[1] = (struct dev_io){ .op = DEV_WRITE, .buf = a, .off = len, .len = (uint32_t)len,
				 .fixed = -1 };
	assert_int_equal(dev_run(&uring_dev_ops, q, p, 2, 16, NULL), 0);
	assert_int_equal(io[0].res, (int)len);
	assert_int_equal(io[1].res, (int)len);
	assert_int_equal(uring_dev_ops.dev_sync(fd), 0);
	for (int i = 0; i < 2; i++) {
		memset(b, 0, len);
		io[0] = (struct dev_io){ .op = DEV_READ, .buf = b, .off = (uint64_t)i * len,
					 .len = (uint32_t)len, .fixed = (int8_t)(i ? -1 : (nfixed ? 0 : -1)) };
		assert_int_equal(dev_run(&uring_dev_ops, q, p, 1, 16, NULL), 0);
		assert_int_equal(io[0].res, (int)len);
		assert_true(check_block(test_key(3), b, len));
	}
	/* an unaligned buffer is refused by O_DIRECT, reported per io */
	io[0] = (struct dev_io){ .op = DEV_READ, .buf = b + 1, .off = 0, .len = 4096, .fixed = -1 };
	assert_int_equal(dev_run(&uring_dev_ops, q, p, 1, 16, NULL), 0);
	assert_int_equal(io[0].res, -EINVAL);
	uring_dev_ops.queue_close(q);
	uring_dev_ops.dev_close(fd);
	free(arena);
	rm_rf(dir);
	free(dir);
}

static void dev_open_reports_why_it_refuses(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	char *dir = make_temp_dir("uring");
	char path[4200];

	snprintf(path, sizeof(path), "%s/missing/dev", dir);
	assert_int_equal(uring_dev_ops.dev_open(path, 1 << 20, NULL), -ENOENT);
	assert_non_null(strstr(kvt_last_error(), "directory does not exist"));
	snprintf(path, sizeof(path), "%s/huge", dir);
	/* 1 PiB: past the largest file of ext4 (-EFBIG), or more than the
	 * room of others (-ENOSPC): which one it is, said so */
	int rc = uring_dev_ops.dev_open(path, 1ull << 50, NULL);
	if (rc == -EFBIG)
		assert_non_null(strstr(kvt_last_error(), "cannot hold a file of "
				       "1125899906842624 bytes"));
	else
		assert_int_equal(rc, -ENOSPC);
	if (rc == -ENOSPC)
		assert_non_null(strstr(kvt_last_error(), "has no room for"));
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(uring_dev_ops.dev_open(dir, 1 << 20, NULL), -EISDIR);
	/* an existing shorter file is extended, a longer one kept */
	snprintf(path, sizeof(path), "%s/f", dir);
	int fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 8192), 0);
	close(fd);
	fd = uring_dev_ops.dev_open(path, 1 << 20, NULL);
	assert_true(fd >= 0);
	struct stat sb;
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, 1 << 20);
	uring_dev_ops.dev_close(fd);
	rm_rf(dir);
	free(dir);
}

/* A missing device name under /dev fails as a missing device; it is not
 * created as a file in devtmpfs (where a store would keep its blocks in
 * RAM, under a name that looks like a disk). /dev/shm stays a place for
 * files. */
static void dev_open_never_creates_files_in_dev(void **st)
{
	(void)st;
	char path[128];

	snprintf(path, sizeof(path), "/dev/kvt-no-such-disk-%d", (int)getpid());
	unlink(path);
	int fd = uring_dev_ops.dev_open(path, 1 << 20, NULL);
	int made = access(path, F_OK) == 0;
	if (fd >= 0)
		uring_dev_ops.dev_close(fd);
	if (made)
		unlink(path);
	assert_int_equal(fd, -ENOENT);
	assert_false(made);
	assert_non_null(strstr(kvt_last_error(), "no such device"));
	assert_non_null(strstr(kvt_last_error(), path));

	snprintf(path, sizeof(path), "/dev/shm/kvt-uring-%d", (int)getpid());
	struct stat shm, dev;
	if (stat("/dev/shm", &shm) == 0 && stat("/dev", &dev) == 0 &&
	    shm.st_dev != dev.st_dev && access("/dev/shm", W_OK) == 0) {
		fd = uring_dev_ops.dev_open(path, 1 << 20, NULL);
		if (fd >= 0) /* tmpfs without O_DIRECT refuses: not this check */
			uring_dev_ops.dev_close(fd);
		assert_true(fd >= 0 || fd == -EINVAL);
		unlink(path);
	}
}

/* The real queue: a submission refused for a bad io sends none of its ios,
 * neither now nor with the next submission. */
static void uring_refused_submission_sends_nothing_later(void **st)
{
	(void)st;
	char *dir = make_temp_dir("uring");
	char path[4200];
	void *buf = NULL, *q = NULL;
	unsigned nfixed = 0;

	snprintf(path, sizeof(path), "%s/dev", dir);
	int fd = uring_dev_ops.dev_open(path, 1 << 20, NULL);
	assert_true(fd >= 0);
	assert_int_equal(posix_memalign(&buf, 4096, 3 * 4096), 0);
	memset(buf, 7, 3 * 4096);
	assert_int_equal(uring_dev_ops.queue_open(&fd, 1, 16, NULL, 0, &nfixed, &q), 0);
	struct dev_io a = { .op = DEV_WRITE, .buf = buf, .off = 0, .len = 4096, .fixed = -1 };
	struct dev_io b = { .op = DEV_WRITE, .buf = buf, .off = 4096, .len = 4096,
			    .dev = 3, .fixed = -1 }; /* no device 3 */
	struct dev_io c = { .op = DEV_READ, .buf = (char *)buf + 8192, .off = 8192,
			    .len = 4096, .fixed = -1 };
	struct dev_io *ab[2] = { &a, &b }, *cp = &c, *done[4] = { NULL };

	assert_int_equal(uring_dev_ops.submit(q, ab, 2), -EINVAL);
	assert_int_equal(uring_dev_ops.submit(q, &cp, 1), 1);
	assert_int_equal(uring_dev_ops.reap(q, done, 4, 1), 1);
	assert_ptr_equal(done[0], &c);
	assert_int_equal(c.res, 4096);
	usleep(20000);
	assert_int_equal(uring_dev_ops.reap(q, done, 4, 0), 0);
	uring_dev_ops.queue_close(q);
	uring_dev_ops.dev_close(fd);
	free(buf);
	rm_rf(dir);
	free(dir);
}

/* uring_dev_ops whose reap cuts the first completion of a vectored write
 * short (a device that took part of the request), so that dev_run sends
 * the rest of it from inside a segment. */
static int short_cut;

static int cut_reap(void *q, struct dev_io **done, unsigned max, unsigned min)
{
	int got = uring_dev_ops.reap(q, done, max, min);

	for (int i = 0; i < got; i++)
		if (short_cut && done[i]->nseg && done[i]->op == DEV_WRITE &&
		    done[i]->res == (int32_t)done[i]->len && done[i]->len > 3 * 4096) {
			short_cut = 0;
			done[i]->res = (int32_t)(done[i]->len / 2 / 4096 * 4096 + 4096);
		}
	return got;
}

/* A record's header page and payload (plain posix_memalign memory) go out
 * as one vectored write; cut short, the rest follows; after the device is
 * closed and opened again every byte reads back equal, through other
 * segments and as one plain read. A misaligned segment fails its io alone. */
static void uring_vectored_write_reads_back_after_reopen(void **st)
{
	(void)st;
	TEST_NEED_DISK();
	char *dir = make_temp_dir("uring");
	char path[4200];
	const size_t plen = (1 << 20) + 8192;
	unsigned char *hdr = NULL, *pay = NULL, *r0 = NULL, *r1 = NULL, *all = NULL;
	void *q = NULL;
	unsigned nfixed = 0;
	struct kvt_dev_ops ops = uring_dev_ops;

	ops.reap = cut_reap;
	snprintf(path, sizeof(path), "%s/dev", dir);
	int fd = uring_dev_ops.dev_open(path, 4 << 20, NULL);
	assert_true(fd >= 0);
	assert_int_equal(posix_memalign((void **)&hdr, 4096, 4096), 0);
	assert_int_equal(posix_memalign((void **)&pay, 4096, plen), 0);
	assert_int_equal(posix_memalign((void **)&r0, 4096, 12288), 0);
	assert_int_equal(posix_memalign((void **)&r1, 4096, plen), 0);
	assert_int_equal(posix_memalign((void **)&all, 4096, 4096 + plen), 0);
	memset(hdr, 0xa5, 4096);
	fill_block(test_key(9), pay, plen);
	assert_int_equal(ops.queue_open(&fd, 1, 16, NULL, 0, &nfixed, &q), 0);
	struct dev_io io[2], *p[2] = { &io[0], &io[1] };
	struct iovec w[2] = { { hdr, 4096 }, { pay, plen } };
	memset(io, 0, sizeof(io));
	io[0].op = DEV_WRITE;
	io[0].off = 8192;
	io[0].fixed = 0; /* ignored: a vectored io is never a fixed one */
	assert_int_equal(dev_io_setv(&io[0], w, 2), 0);
	short_cut = 1;
	assert_int_equal(dev_run(&ops, q, p, 1, 16, NULL), 0);
	assert_int_equal(short_cut, 0); /* it was cut, and finished */
	assert_int_equal(io[0].res, (int)(4096 + plen));
	assert_int_equal(ops.dev_sync(fd), 0);
	ops.queue_close(q);
	ops.dev_close(fd);

	fd = uring_dev_ops.dev_open(path, 4 << 20, NULL);
	assert_true(fd >= 0);
	assert_int_equal(ops.queue_open(&fd, 1, 16, NULL, 0, &nfixed, &q), 0);
	struct iovec r[2] = { { r0, 12288 }, { r1, plen - 8192 } };
	memset(io, 0, sizeof(io));
	io[0].op = DEV_READ;
	io[0].off = 8192;
	io[0].fixed = -1;
	assert_int_equal(dev_io_setv(&io[0], r, 2), 0);
	io[1] = (struct dev_io){ .op = DEV_READ, .buf = all, .off = 8192,
				 .len = (uint32_t)(4096 + plen), .fixed = -1 };
	assert_int_equal(dev_run(&ops, q, p, 2, 16, NULL), 0);
	assert_int_equal(io[0].res, (int)(4096 + plen));
	assert_int_equal(io[1].res, (int)(4096 + plen));
	assert_memory_equal(all, hdr, 4096);
	assert_true(check_block(test_key(9), all + 4096, plen));
	assert_memory_equal(r0, all, 12288);
	assert_memory_equal(r1, all + 12288, plen - 8192);

	/* a misaligned segment: O_DIRECT refuses that io alone */
	w[1].iov_base = pay + 1;
	w[1].iov_len = 4096;
	memset(io, 0, sizeof(io));
	io[0].op = DEV_WRITE;
	io[0].off = 0;
	io[0].fixed = -1;
	assert_int_equal(dev_io_setv(&io[0], w, 2), 0);
	io[1] = (struct dev_io){ .op = DEV_READ, .buf = all, .off = 0, .len = 4096,
				 .fixed = -1 };
	assert_int_equal(dev_run(&ops, q, p, 2, 16, NULL), 0);
	assert_int_equal(io[0].res, -EINVAL);
	assert_int_equal(io[1].res, 4096);
	ops.queue_close(q);
	ops.dev_close(fd);
	free(hdr);
	free(pay);
	free(r0);
	free(r1);
	free(all);
	rm_rf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(uring_round_trip_plain_and_fixed),
		cmocka_unit_test(dev_open_reports_why_it_refuses),
		cmocka_unit_test(dev_open_never_creates_files_in_dev),
		cmocka_unit_test(uring_refused_submission_sends_nothing_later),
		cmocka_unit_test(uring_vectored_write_reads_back_after_reopen),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
