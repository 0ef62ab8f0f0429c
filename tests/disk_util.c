/* disk_util.c - see disk_util.h. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "config.h"
#include "disk.h"
#include "disk_util.h"
#include "internal.h"
#include "opts.h"
#include "stats.h"
#include "util.h"

char logbuf[1 << 16];

static pthread_mutex_t loglock = PTHREAD_MUTEX_INITIALIZER;

void grab_log(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	pthread_mutex_lock(&loglock);
	size_t n = strlen(logbuf);
	snprintf(logbuf + n, sizeof(logbuf) - n, "%s\n", msg);
	pthread_mutex_unlock(&loglock);
}

void log_clear(void)
{
	pthread_mutex_lock(&loglock);
	logbuf[0] = 0;
	pthread_mutex_unlock(&loglock);
}

int log_has(const char *s)
{
	pthread_mutex_lock(&loglock);
	int r = strstr(logbuf, s) != NULL;
	pthread_mutex_unlock(&loglock);
	return r;
}

void fix_init(struct fix *f, uint64_t capacity, uint64_t region)
{
	memset(f, 0, sizeof(*f));
	f->dir = make_temp_dir("disk");
	assert_non_null(f->dir);
	snprintf(f->path, sizeof(f->path), "%s/tier0", f->dir);
	snprintf(f->path2, sizeof(f->path2), "%s/tier1", f->dir);
	f->paths[0] = f->path;
	f->paths[1] = f->path2;
	f->cfg.ndisk = 1;
	f->cfg.disk_paths = f->paths;
	f->cfg.disk_capacity = capacity;
	f->cfg.region_size = region;
	f->cfg.queue_depth = 8;
}

void fix_done(struct fix *f)
{
	rm_rf(f->dir);
	free(f->dir);
}

struct disk_tier *open_ok(struct fix *f, const struct kvt_dev_ops *ops)
{
	struct disk_tier *d = NULL;
	int rc = disk_open_cfg(&f->cfg, NULL, 0, ops, &d);

	if (rc)
		fprintf(stderr, "disk_open: %d %s\n", rc, kvt_last_error());
	assert_int_equal(rc, 0);
	assert_non_null(d);
	return d;
}

long long stat_of(struct disk_tier *d, const char *name)
{
	json_t *o = json_object();
	struct stat_visitor sv = stats_json_visitor(o);
	disk_stats(d, &sv);
	json_t *v = json_object_get(o, name);
	assert_non_null(v);
	long long r = json_is_integer(v) ? json_integer_value(v)
					 : (long long)json_real_value(v);
	json_decref(o);
	return r;
}

size_t size_of(uint64_t i)
{
	return 4096 + (size_t)(i * 7919 % 60000);
}

int put_block(struct disk_tier *d, uint64_t i, size_t len)
{
	char *b = malloc(len + 1);
	fill_block(test_key(i), b + 1, len); /* deliberately unaligned */
	int rc = disk_put(d, test_key(i), b + 1, len);
	free(b);
	return rc;
}

int get_block(struct disk_tier *d, uint64_t i, size_t len)
{
	void *b = NULL;
	size_t got = 0;

	assert_int_equal(posix_memalign(&b, 4096, len + 8192), 0);
	int rc = disk_get(d, test_key(i), b, len + 8192, &got);
	if (rc == 0) {
		assert_int_equal(got, len);
		assert_true(check_block(test_key(i), b, len));
	} else {
		assert_true(rc == -ENOENT || rc == -EBADMSG || rc == -EIO);
	}
	free(b);
	return rc;
}
