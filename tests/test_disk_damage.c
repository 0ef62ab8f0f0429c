/*
 * test_disk_damage.c - the disk tier's file as a user may leave it: on a
 * file system without room for it, where kvt_open fails and says so.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvtier.h"
#include "util.h"

#define MiB (1024u * 1024u)

static int open_store(const char *path, const char *capacity, kvt_store **s)
{
	char cfg[8192];

	snprintf(cfg, sizeof(cfg),
		 "{\"ram\": {\"capacity\": \"4MiB\", \"mlock\": false},"
		 " \"disk\": {\"path\": \"%s\", \"capacity\": \"%s\","
		 " \"queue_depth\": 8}}", path, capacity);
	*s = NULL;
	return kvt_open(cfg, s);
}

/* A small tmpfs mounted on a temp dir, unmounted however the case ends. */
static char *mnt;
static int mounted;

static int mnt_teardown(void **st)
{
	(void)st;
	if (mounted)
		umount2(mnt, MNT_DETACH);
	mounted = 0;
	if (mnt)
		rm_rf(mnt);
	free(mnt);
	mnt = NULL;
	return 0;
}

/*
 * A tier file its file system has no room for: kvt_open fails with
 * -ENOSPC, whose kvt_strerror text is about puts, so kvt_last_error says
 * that the file system holding the path has no room for its bytes; a file
 * it created is not left behind, and one that was there is left as it was.
 */
static void full_file_system_is_named(void **st)
{
	(void)st;
	char path[4200], path2[4200], want[4400];
	kvt_store *s;

	TEST_NEED_DISK();
	mnt = make_temp_dir("damage-full");
	assert_non_null(mnt);
	if (mount("kvt-test", mnt, "tmpfs", 0, "size=8m") != 0) {
		print_message("skipped: cannot mount a small tmpfs (%s)\n", strerror(errno));
		skip();
	}
	mounted = 1;
	snprintf(path, sizeof(path), "%s/tier", mnt);
	assert_int_equal(open_store(path, "64MiB", &s), -ENOSPC);
	assert_null(s);
	assert_string_equal(kvt_strerror(-ENOSPC), "no tier can take the block");
	snprintf(want, sizeof(want), "the file system holding disk.path %s has no "
		 "room for %u bytes", path, 64 * MiB);
	if (!strstr(kvt_last_error(), want))
		fail_msg("kvt_last_error: \"%s\", wanted \"%s\"", kvt_last_error(), want);
	assert_int_equal(access(path, F_OK), -1);

	/* a tier that fits opens (where tmpfs takes O_DIRECT, Linux 6.6 on);
	 * asked to grow past the room, it stays as it was */
	snprintf(path2, sizeof(path2), "%s/probe", mnt);
	int probe = open(path2, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (probe < 0) {
		print_message("skipped: tmpfs refuses O_DIRECT here (%s)\n", strerror(errno));
		skip();
	}
	close(probe);
	unlink(path2);
	assert_int_equal(open_store(path, "4MiB", &s), 0);
	kvt_close(s);
	assert_int_equal(open_store(path, "64MiB", &s), -ENOSPC);
	assert_non_null(strstr(kvt_last_error(), want));
	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, 4 * MiB);
	assert_int_equal(open_store(path, "4MiB", &s), 0);
	kvt_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(full_file_system_is_named, mnt_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
