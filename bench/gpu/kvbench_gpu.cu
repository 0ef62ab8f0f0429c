/*
 * kvbench_gpu.cu - the GPU data path measured beside the machine's limits,
 * in one run, written as JSON (built when nvcc is present; needs a GPU).
 *
 *   correctness  random KV of several layers, GPU -> store -> GPU through
 *                the zero-copy slots, RAM tier and forced through the disk
 *                tier, both layouts; compared element by element
 *   ram_restore  RAM tier -> GPU (bytes landed in the paged layout per
 *                second) beside pinned host-to-device copies of one block
 *   save         GPU -> store beside pinned device-to-host copies
 *   disk_restore for each --dir: disk tier -> GPU, beside a raw O_DIRECT
 *                io_uring read of the tier's own file at the same block size
 *                and queue depth, pinned H2D, and a host-bounce baseline
 *                (kvt_get_batch into pageable buffers, then the copy); the
 *                restore also with unpins from host callbacks and into the
 *                cross-layer layout, the host side alone and beside pinned
 *                copies, and the CPU seconds per GB, by thread
 *   cufile       when libcufile loads (dlopen; never linked): raw reads of
 *                the tier file straight into GPU memory, and whether
 *                nvidia-fs was present (without it cuFile runs in its
 *                compatibility mode, through host memory)
 * Limits and figures are interleaved (limit, figure, limit, ...) and each
 * reported as the median with every sample; the three disk restores take
 * turns at running first after the limits (use a multiple of 3 for --reps
 * to give each the same share).
 *
 *   kvbench-gpu [--json FILE] [--dir DIR]... [--gib N] [--reps N]
 *               [--layers N] [--heads N] [--head-size N] [--block-size N]
 *               [--cufile PATH] [--skip ram] [--window N]
 * --skip ram leaves out the RAM tier and save figures (a run about the disk
 * path alone). --window sets the blocks a restore pins at a time (two
 * windows in flight; default 128). Exit status 0 when every restored element matched, 1
 * otherwise, 2 for a bad option, 77 without a GPU.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <liburing.h>

#include "kvconn.cuh"

#define QD 32     /* the disk tier's loads in flight: 32 loaders x 1 */
#define MAXDIR 4
#define MAXREP 16

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process so far (its threads and its io_uring
 * workers, which do the copies of reads from tmpfs). */
static double cpu_s(void)
{
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
	       (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

/*
 * CPU time by thread while something runs, from /proc/self/task: the main
 * thread, the store's threads (the loaders: named as the program), the
 * io_uring workers (iou-*), CUDA's threads (cuda*), anything else, and
 * threads that ended meanwhile (the process's total less the rest).
 */
#define TSNAP_MAX 1024
enum { TC_MAIN, TC_STORE, TC_IOU, TC_CUDA, TC_OTHER, TC_EXITED, TC_N };
static const char *const tc_name[TC_N] = { "main_thread", "store_threads", "io_uring_workers",
					   "cuda_threads", "other_threads", "ended_threads" };
struct tsnap {
	int n;
	int tid[TSNAP_MAX];
	unsigned char cls[TSNAP_MAX];
	double s[TSNAP_MAX];
	double total;
};

static void tsnap_take(struct tsnap *t)
{
	static char self[32];
	double tick = (double)sysconf(_SC_CLK_TCK);
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	t->n = 0;
	if (!self[0]) {
		FILE *f = fopen("/proc/self/comm", "r");
		if (f && fgets(self, sizeof(self), f))
			self[strcspn(self, "\n")] = 0;
		if (f)
			fclose(f);
	}
	while (d && (e = readdir(d)) && t->n < TSNAP_MAX) {
		char path[300], buf[1024];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = 0;
		char *open = strchr(buf, '('), *close = strrchr(buf, ')');
		unsigned long ut = 0, st = 0;
		if (!open || !close ||
		    sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
			continue;
		*close = 0;
		const char *comm = open + 1;
		int tid = atoi(e->d_name);
		t->tid[t->n] = tid;
		t->cls[t->n] = tid == getpid() ? TC_MAIN : !strncmp(comm, "iou-", 4) ? TC_IOU :
			       !strncmp(comm, "cuda", 4) ? TC_CUDA : !strcmp(comm, self) ? TC_STORE : TC_OTHER;
		t->s[t->n++] = (double)(ut + st) / tick;
	}
	if (d)
		closedir(d);
	t->total = cpu_s();
}

/* CPU seconds by class between two snapshots, added to acc[]. */
static void tsnap_add(const struct tsnap *a, const struct tsnap *b, double *acc)
{
	double sum = 0;
	for (int i = 0; i < b->n; i++) {
		double d = b->s[i];
		for (int k = 0; k < a->n; k++)
			if (a->tid[k] == b->tid[i]) {
				d -= a->s[k];
				break;
			}
		acc[b->cls[i]] += d;
		sum += d;
	}
	acc[TC_EXITED] += b->total - a->total - sum;
}

static json_t *tcpu_json(const double *acc, double gb, const char *what)
{
	json_t *o = json_object();
	json_object_set_new(o, "what", json_string(what));
	for (int c = 0; c < TC_N; c++)
		json_object_set_new(o, tc_name[c], json_real(gb > 0 ? acc[c] / gb : 0));
	return o;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* A figure: samples in GB/s. */
struct fig {
	int n;
	double v[MAXREP];
};

static double median(const struct fig *f)
{
	double t[MAXREP];
	if (!f->n)
		return 0;
	memcpy(t, f->v, sizeof(double) * (size_t)f->n);
	qsort(t, (size_t)f->n, sizeof(double), cmp_d);
	return f->n % 2 ? t[f->n / 2] : (t[f->n / 2 - 1] + t[f->n / 2]) / 2;
}

/* A figure as JSON: median_<unit> and samples_<unit>. */
static json_t *fig_json_unit(const struct fig *f, const char *what, const char *unit)
{
	json_t *o = json_object(), *a = json_array();
	char k[64];
	for (int i = 0; i < f->n; i++)
		json_array_append_new(a, json_real(f->v[i]));
	json_object_set_new(o, "what", json_string(what));
	snprintf(k, sizeof(k), "median_%s", unit);
	json_object_set_new(o, k, json_real(median(f)));
	snprintf(k, sizeof(k), "samples_%s", unit);
	json_object_set_new(o, k, a);
	return o;
}

static json_t *fig_json(const struct fig *f, const char *what)
{
	return fig_json_unit(f, what, "GBps");
}

static void add(struct fig *f, double bytes, double secs)
{
	if (f->n < MAXREP)
		f->v[f->n++] = bytes / secs / 1e9;
}

/* --- limits ------------------------------------------------------------------ */

/* Copies total bytes in chunk-sized cudaMemcpyAsync calls over the streams
 * between host memory (pinned or not) and the GPU; returns seconds. */
static double copy_time(char *host, char *dev, size_t chunk, size_t total, int h2d,
			cudaStream_t *st)
{
	double t0 = now_s();
	size_t i = 0;
	for (size_t off = 0; off + chunk <= total; off += chunk, i++)
		CK(cudaMemcpyAsync(h2d ? dev + off : host + off, h2d ? host + off : dev + off,
				   chunk, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
				   st[i % CONN_STREAMS]));
	for (int k = 0; k < CONN_STREAMS; k++)
		CK(cudaStreamSynchronize(st[k]));
	return now_s() - t0;
}

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* One reader of raw_read: its own ring, qd reads in flight. */
struct raw_job {
	const char *path;
	size_t bs, span, n;
	unsigned qd;
	uint64_t seed;
	int err;
};

static void *raw_reader(void *arg)
{
	struct raw_job *j = (struct raw_job *)arg;
	int fd = open(j->path, O_RDONLY | O_DIRECT);
	struct io_uring ring;
	char *buf = NULL;

	if (fd < 0) {
		j->err = -errno;
		return NULL;
	}
	if (io_uring_queue_init(j->qd, &ring, 0) < 0) {
		j->err = -ENOSYS;
		close(fd);
		return NULL;
	}
	if (posix_memalign((void **)&buf, 4096, j->bs * j->qd))
		exit(1);
	memset(buf, 0, j->bs * j->qd);
	uint64_t pages = j->span / 4096 - j->bs / 4096, x = j->seed | 1;
	size_t issued = 0, done = 0, inflight = 0;
	while (done < j->n && !j->err) {
		while (inflight < j->qd && issued < j->n) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			io_uring_prep_read(sqe, fd, buf + (issued % j->qd) * j->bs, (unsigned)j->bs,
					   (off_t)((xorshift(&x) % pages) * 4096));
			issued++;
			inflight++;
		}
		io_uring_submit(&ring);
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&ring, &cqe) < 0) {
			j->err = -EIO;
			break;
		}
		if (cqe->res < 0)
			j->err = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		inflight--;
		done++;
	}
	io_uring_queue_exit(&ring);
	close(fd);
	free(buf);
	return NULL;
}

/*
 * Raw random O_DIRECT reads of bs bytes over the file's first span bytes
 * with io_uring, QD in flight from nth threads of QD / nth each: the device
 * limit at the same block size and queue depth. Two shapes are measured
 * and the faster one is the limit: 32 threads of one read each, as the
 * disk tier's slot loaders issue them, and 8 threads of 4. (A read the
 * kernel serves by copying, as from tmpfs, runs on an io_uring worker of
 * the submitting thread, one at a time, so the shape matters there.)
 * Returns bytes/s, or a negative errno.
 */
#define RAW_THREADS_MAX QD
static double raw_read(const char *path, size_t bs, size_t span, size_t total, int nth)
{
	pthread_t th[RAW_THREADS_MAX];
	struct raw_job j[RAW_THREADS_MAX];
	size_t per = total / bs / (size_t)nth;
	double t0 = now_s();

	for (int i = 0; i < nth; i++) {
		j[i] = (struct raw_job){ path, bs, span, per, (unsigned)(QD / nth),
					 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1), 0 };
		pthread_create(&th[i], NULL, raw_reader, &j[i]);
	}
	int err = 0;
	for (int i = 0; i < nth; i++) {
		pthread_join(th[i], NULL);
		if (j[i].err)
			err = j[i].err;
	}
	double dt = now_s() - t0;
	return err ? err : (double)per * (size_t)nth * bs / dt;
}

/* --- cuFile, loaded at run time ------------------------------------------------- */

/* The few cuFile types used, as its public header declares them. */
typedef struct {
	int err;
	int cu_err;
} cf_error;
typedef struct {
	int type; /* 1: CU_FILE_HANDLE_TYPE_OPAQUE_FD */
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
} cf_descr;

struct cufile {
	void *lib;
	cf_error (*driver_open)(void);
	cf_error (*handle_register)(void **fh, cf_descr *d);
	void (*handle_deregister)(void *fh);
	cf_error (*buf_register)(const void *p, size_t len, int flags);
	cf_error (*buf_deregister)(const void *p);
	ssize_t (*read)(void *fh, void *dev, size_t size, off_t foff, off_t doff);
};

struct cf_job {
	struct cufile *cf;
	void *fh;
	char *dev;
	size_t bs, span, n;
	uint64_t seed;
	ssize_t err;
};

static void *cf_reader(void *arg)
{
	struct cf_job *j = (struct cf_job *)arg;
	uint64_t pages = j->span / 4096 - j->bs / 4096, x = j->seed | 1;
	for (size_t i = 0; i < j->n; i++) {
		ssize_t r = j->cf->read(j->fh, j->dev, j->bs,
					(off_t)((xorshift(&x) % pages) * 4096), 0);
		if (r != (ssize_t)j->bs) {
			j->err = r < 0 ? r : -EIO;
			return NULL;
		}
	}
	return NULL;
}

static json_t *cf_fail(json_t *o, json_t *why)
{
	json_object_set_new(o, "ran", json_false());
	json_object_set_new(o, "error", why);
	return o;
}

/* Raw reads of the tier file into GPU memory through cuFile, QD threads. */
static json_t *cufile_try(const char *libpath, const char *path, size_t bs, size_t span,
			  size_t total, int reps)
{
	json_t *o = json_object();
	struct cufile cf;
	struct stat st;
	int nvfs = stat("/sys/module/nvidia_fs", &st) == 0;

	memset(&cf, 0, sizeof(cf));
	json_object_set_new(o, "nvidia_fs_loaded", json_boolean(nvfs));
	const char *force = getenv("CUFILE_FORCE_COMPAT_MODE");
	json_object_set_new(o, "CUFILE_FORCE_COMPAT_MODE", force ? json_string(force) : json_null());
	cf.lib = dlopen(libpath ? libpath : "libcufile.so.0", RTLD_NOW);
	if (!cf.lib && !libpath)
		cf.lib = dlopen("libcufile.so", RTLD_NOW);
	if (!cf.lib)
		return cf_fail(o, json_string(dlerror()));
	*(void **)&cf.driver_open = dlsym(cf.lib, "cuFileDriverOpen");
	*(void **)&cf.handle_register = dlsym(cf.lib, "cuFileHandleRegister");
	*(void **)&cf.handle_deregister = dlsym(cf.lib, "cuFileHandleDeregister");
	*(void **)&cf.buf_register = dlsym(cf.lib, "cuFileBufRegister");
	*(void **)&cf.buf_deregister = dlsym(cf.lib, "cuFileBufDeregister");
	*(void **)&cf.read = dlsym(cf.lib, "cuFileRead");
	if (!cf.driver_open || !cf.handle_register || !cf.handle_deregister || !cf.read ||
	    !cf.buf_register || !cf.buf_deregister)
		return cf_fail(o, json_string("libcufile lacks a needed symbol"));
	cf_error e = cf.driver_open();
	if (e.err)
		return cf_fail(o, json_sprintf("cuFileDriverOpen: error %d (cuda %d)", e.err, e.cu_err));
	int fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		return cf_fail(o, json_sprintf("open %s: %s", path, strerror(errno)));
	cf_descr d;
	memset(&d, 0, sizeof(d));
	d.type = 1;
	d.handle.fd = fd;
	void *fh = NULL;
	e = cf.handle_register(&fh, &d);
	if (e.err) {
		close(fd);
		return cf_fail(o, json_sprintf("cuFileHandleRegister: error %d", e.err));
	}
	char *dev;
	CK(cudaMalloc((void **)&dev, bs * QD));
	for (int i = 0; i < QD; i++)
		cf.buf_register(dev + (size_t)i * bs, bs, 0);
	struct fig f = { 0, { 0 } };
	ssize_t err = 0;
	for (int r = 0; r < reps && !err; r++) {
		pthread_t th[QD];
		struct cf_job j[QD];
		size_t per = total / bs / QD;
		double t0 = now_s();
		for (int i = 0; i < QD; i++) {
			j[i] = (struct cf_job){ &cf, fh, dev + (size_t)i * bs, bs, span, per,
						(uint64_t)(r * QD + i + 1) * 0x9e3779b97f4a7c15ull, 0 };
			pthread_create(&th[i], NULL, cf_reader, &j[i]);
		}
		for (int i = 0; i < QD; i++) {
			pthread_join(th[i], NULL);
			if (j[i].err)
				err = j[i].err;
		}
		add(&f, (double)per * QD * bs, now_s() - t0);
	}
	for (int i = 0; i < QD; i++)
		cf.buf_deregister(dev + (size_t)i * bs);
	json_object_set_new(o, "ran", json_boolean(!err));
	if (err)
		json_object_set_new(o, "error", json_sprintf("cuFileRead: %zd", err));
	json_object_set_new(o, "raw_read_to_gpu",
			    fig_json(&f, "cuFileRead of the tier file into GPU memory, bs = one block, QD threads"));
	/* Without the nvidia-fs kernel module cuFile can only move data through
	 * host memory (its compatibility mode). */
	json_object_set_new(o, "compat_mode", json_boolean(!nvfs));
	cf.handle_deregister(fh);
	close(fd);
	CK(cudaFree(dev));
	return o;
}

/* --- the store side ------------------------------------------------------------ */

struct setup {
	struct kv_shape sh;
	size_t bb;       /* block bytes */
	int nblocks;     /* blocks in the data set */
	int reps;
	uint32_t *tokens;
	size_t ntok;
	int *ids;        /* cache block ids of the data set, a permutation */
	size_t window;   /* blocks per pin window (two in flight) */
};

/* What went wrong during the run, reported in the JSON (exit status 1). */
static json_t *errors;

static void note_error(const char *fmt, size_t a, int b)
{
	char msg[256];
	snprintf(msg, sizeof(msg), fmt, a, b);
	fprintf(stderr, "kvbench-gpu: %s\n", msg);
	json_array_append_new(errors, json_string(msg));
}

/* Pushes every block of the data set out of RAM (onto the disk) by putting
 * twice the RAM's bytes of filler blocks, so that the next loads come from
 * the disk and a close loses nothing of the data set. */
static void push_out_of_ram(kvt_store *s, size_t ram_bytes, size_t bb)
{
	static uint64_t nround;
	char *fill = (char *)calloc(1, bb);
	nround++;
	for (uint64_t i = 0; i < 2 * ram_bytes / bb + 8; i++) {
		kvt_key k = { 0xf111e7ull + (nround << 32), i };
		memcpy(fill, &i, sizeof(i));
		KVT_CK(kvt_put(s, k, fill, bb));
	}
	free(fill);
}

static kvt_store *open_store(const char *cfg)
{
	kvt_store *s;
	KVT_CK(kvt_open(cfg, &s));
	return s;
}

static void fill_cache(struct kv_cache *c, uint32_t seed)
{
	size_t n = kv_cache_bytes(c) / (size_t)c->shape.layers;
	char *h = (char *)malloc(n);
	for (int l = 0; l < c->shape.layers; l++) {
		uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)l + 1;
		for (size_t i = 0; i + 8 <= n; i += 8) {
			uint64_t v = xorshift(&x);
			memcpy(h + i, &v, 8);
		}
		char *dst = c->kind == KV_FLASH ? c->layer[l] : c->cross + (size_t)l * n;
		CK(cudaMemcpy(dst, h, n, cudaMemcpyHostToDevice));
	}
	free(h);
}

static void zero_cache(struct kv_cache *c)
{
	for (int l = 0; c->kind == KV_FLASH && l < c->shape.layers; l++)
		CK(cudaMemset(c->layer[l], 0, kv_cache_bytes(c) / (size_t)c->shape.layers));
	if (c->kind == KV_CROSS)
		CK(cudaMemset(c->cross, 0, kv_cache_bytes(c)));
	/* The connector's streams do not wait for the default stream. */
	CK(cudaDeviceSynchronize());
}

/* A cache's contents copied to the host: one array per layer, or one. */
static char **host_copy(const struct kv_cache *c)
{
	size_t per = kv_cache_bytes(c) / (size_t)c->shape.layers;
	char **h = (char **)calloc((size_t)c->shape.layers, sizeof(char *));
	for (int l = 0; l < c->shape.layers; l++) {
		h[l] = (char *)malloc(per);
		CK(cudaMemcpy(h[l], c->kind == KV_FLASH ? c->layer[l] : c->cross + (size_t)l * per,
			      per, cudaMemcpyDeviceToHost));
	}
	return h;
}

/* Where (block, layer, kv)'s chunk lies in a host copy, by the layout's
 * definition (FlashAttention: [2][blocks][...] per layer; cross-layer:
 * [blocks][layers][2][...] as one array, split in equal pieces). */
static const uint16_t *host_chunk(const struct kv_cache *c, char **h, int b, int l, int kv)
{
	const struct kv_shape *s = &c->shape;
	size_t chunk = kv_chunk_bytes(s), per = kv_cache_bytes(c) / (size_t)s->layers;
	if (c->kind == KV_FLASH)
		return (const uint16_t *)(h[l] + ((size_t)kv * s->num_blocks + b) * chunk);
	size_t off = (((size_t)b * s->layers + l) * 2 + kv) * chunk;
	return (const uint16_t *)(h[off / per] + off % per);
}

/* Elements (16-bit) that differ between block ids[i] of cache a and of
 * cache b, over every layer, K and V, read from host copies of both. */
static size_t differ(struct kv_cache *a, struct kv_cache *b, const int *ids, int n)
{
	size_t chunk = kv_chunk_bytes(&a->shape), bad = 0;
	char **ha = host_copy(a), **hb = host_copy(b);
	for (int i = 0; i < n; i++)
		for (int l = 0; l < a->shape.layers; l++)
			for (int kv = 0; kv < 2; kv++) {
				const uint16_t *x = host_chunk(a, ha, ids[i], l, kv);
				const uint16_t *y = host_chunk(b, hb, ids[i], l, kv);
				for (size_t k = 0; k < chunk / 2; k++)
					bad += x[k] != y[k];
			}
	for (int l = 0; l < a->shape.layers; l++) {
		free(ha[l]);
		free(hb[l]);
	}
	free(ha);
	free(hb);
	return bad;
}

static void remove_all(kvt_store *s, kvt_key root, const struct setup *u)
{
	kvt_key *k = (kvt_key *)malloc((size_t)u->nblocks * sizeof(kvt_key));
	kvt_hash_chain(root, u->tokens, u->ntok, (uint32_t)u->sh.block_size, k, (size_t)u->nblocks);
	for (int i = 0; i < u->nblocks; i++)
		kvt_remove(s, k[i]);
	free(k);
}

/* Saves the data set from c's cache; every block must be saved. Seconds. */
static double save_all(struct conn *c, const struct setup *u)
{
	double t0 = now_s();
	conn_save(c, u->tokens, u->ntok, u->ids);
	conn_sync(c);
	double dt = now_s() - t0;
	if (c->saved != (size_t)u->nblocks)
		note_error("save: %zu of %d blocks saved", c->saved, u->nblocks);
	return dt;
}

/* Where a timed restore's time went besides landing blocks: the CPU
 * seconds of the process per GB, its lookup, the tail from the last block
 * handed to the GPU to the end of the copies, and its groups. */
struct rinfo {
	struct fig cpu, lookup_ms, tail_ms, groups;
};

static void rinfo_json(json_t *o, const char *name, const struct rinfo *ri)
{
	char k[96];
	snprintf(k, sizeof(k), "%s_cpu_s_per_GB", name);
	json_object_set_new(o, k, fig_json_unit(&ri->cpu, "CPU seconds of the process per GB restored", "cpu_s_per_GB"));
	snprintf(k, sizeof(k), "%s_lookup_ms", name);
	json_object_set_new(o, k, fig_json_unit(&ri->lookup_ms, "the restore's kvt_lookup (with leases) of every key, inside its time", "ms"));
	snprintf(k, sizeof(k), "%s_tail_ms", name);
	json_object_set_new(o, k, fig_json_unit(&ri->tail_ms, "from the last group handed to the GPU to the end of its copies, scatter and unpin", "ms"));
	snprintf(k, sizeof(k), "%s_groups", name);
	json_object_set_new(o, k, fig_json_unit(&ri->groups, "groups (scatter launches and unpin callbacks) per restore", "count"));
}

/* Restores the data set into c's cache; every block must come back.
 * Seconds; ri (if not NULL) gets where the time went. */
static double restore_all(struct conn *c, const struct setup *u, struct rinfo *ri)
{
	double c0 = cpu_s(), t0 = now_s();
	size_t got = conn_restore(c, u->tokens, u->ntok, u->ids);
	conn_sync(c);
	double t1 = now_s(), dt = t1 - t0;
	if (got != (size_t)u->nblocks)
		note_error("restore: %zu of %d blocks", got, u->nblocks);
	if (ri && ri->cpu.n < MAXREP) {
		ri->cpu.v[ri->cpu.n++] = (cpu_s() - c0) / ((double)u->nblocks * (double)u->bb / 1e9);
		ri->lookup_ms.v[ri->lookup_ms.n++] = c->lookup_s * 1e3;
		ri->tail_ms.v[ri->tail_ms.n++] = (t1 - c->last_land_s) * 1e3;
		ri->groups.v[ri->groups.n++] = (double)c->groups;
	}
	return dt;
}

/* Host bounce: kvt_get_batch into malloc'd memory, cudaMemcpy, scatter. */
static double bounce_all(kvt_store *s, kvt_key root, struct conn *c, const struct setup *u)
{
	kvt_key *keys = (kvt_key *)malloc((size_t)u->nblocks * sizeof(kvt_key));
	char *bounce = (char *)malloc(CONN_GROUP * u->bb);
	kvt_op ops[CONN_GROUP];
	double t0 = now_s();

	kvt_hash_chain(root, u->tokens, u->ntok, (uint32_t)u->sh.block_size, keys, (size_t)u->nblocks);
	for (int i = 0; i < u->nblocks; i += CONN_GROUP) {
		int n = u->nblocks - i < CONN_GROUP ? u->nblocks - i : CONN_GROUP;
		struct kv_ids ids;
		for (int k = 0; k < n; k++) {
			ops[k] = (kvt_op){ keys[i + k], bounce + (size_t)k * u->bb, u->bb, 0 };
			ids.id[k] = u->ids[i + k];
		}
		KVT_CK(kvt_get_batch(s, ops, (size_t)n));
		CK(cudaMemcpy(c->staging[0], bounce, (size_t)n * u->bb, cudaMemcpyHostToDevice));
		kv_launch(c->cache, &ids, n, c->staging[0], 0, c->st[0]);
		CK(cudaStreamSynchronize(c->st[0]));
	}
	double dt = now_s() - t0;
	free(bounce);
	free(keys);
	return dt;
}

/*
 * The host side of a disk restore alone: the connector's pins (windows of
 * u->window blocks, the next pinned before this one is reaped), each block
 * unpinned as soon as it is reported, no GPU copy. Seconds; *cpu the CPU
 * seconds the process spent meanwhile.
 */
static void pin_reap_window(kvt_store *s, kvt_slot *sl, size_t n, kvt_pin_batch *b)
{
	size_t idx[CONN_GROUP];
	int r;
	for (size_t i = 0; i < n; i++)
		if (sl[i].result == 0)
			kvt_unpin(s, &sl[i], 1);
	while ((r = kvt_pin_reap(b, idx, CONN_GROUP, -1)) > 0)
		for (int k = 0; k < r; k++)
			if (sl[idx[k]].result == 0)
				kvt_unpin(s, &sl[idx[k]], 1);
	kvt_pin_free(b);
	for (size_t i = 0; i < n; i++)
		if (sl[i].result != 0)
			note_error("pin_only: a block failed to load (%zu, %d)", i, sl[i].result);
}

static double pin_all(kvt_store *s, kvt_key root, const struct setup *u, double *cpu)
{
	size_t nb = (size_t)u->nblocks;
	kvt_key *keys = (kvt_key *)malloc(nb * sizeof(kvt_key));
	kvt_slot *sl = (kvt_slot *)calloc(nb, sizeof(kvt_slot));
	kvt_pin_batch *b[2] = { NULL, NULL };
	kvt_hash_chain(root, u->tokens, u->ntok, (uint32_t)u->sh.block_size, keys, nb);
	for (size_t i = 0; i < nb; i++)
		sl[i].key = keys[i];
	double c0 = cpu_s(), t0 = now_s();
	KVT_CK(kvt_get_pin(s, sl, nb < u->window ? nb : u->window, 0, &b[0]));
	for (size_t w = 0, cur = 0; w < nb; w += u->window, cur ^= 1) {
		size_t nx = w + u->window;
		if (nx < nb)
			KVT_CK(kvt_get_pin(s, sl + nx, nb - nx < u->window ? nb - nx : u->window,
					   0, &b[cur ^ 1]));
		pin_reap_window(s, sl + w, nb - w < u->window ? nb - w : u->window, b[cur]);
	}
	double dt = now_s() - t0;
	*cpu = cpu_s() - c0;
	free(sl);
	free(keys);
	return dt;
}

/* Pinned host-to-device copies running until stop is set: the memory
 * traffic a restore's own copies add while the disk is read. */
struct h2d_load {
	char *host, *dev;
	size_t chunk, total;
	volatile int stop;
	double bytes, secs;
};

static void *h2d_loop(void *arg)
{
	struct h2d_load *h = (struct h2d_load *)arg;
	cudaStream_t st[CONN_STREAMS];
	for (int i = 0; i < CONN_STREAMS; i++)
		CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
	while (!h->stop) {
		h->secs += copy_time(h->host, h->dev, h->chunk, h->total, 1, st);
		h->bytes += (double)h->total;
	}
	for (int i = 0; i < CONN_STREAMS; i++)
		CK(cudaStreamDestroy(st[i]));
	return NULL;
}

static int parse(int argc, char **argv, struct setup *u, const char **json_path,
		 const char **cufile, const char **dirs, int *ndir, double *gib, int *skip_ram)
{
	for (int i = 1; i < argc; i += 2) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "kvbench-gpu: %s needs a value\n", a);
			return 2;
		}
		if (!strcmp(a, "--json")) *json_path = v;
		else if (!strcmp(a, "--dir") && *ndir < MAXDIR) dirs[(*ndir)++] = v;
		else if (!strcmp(a, "--gib")) *gib = atof(v);
		else if (!strcmp(a, "--reps")) u->reps = atoi(v);
		else if (!strcmp(a, "--layers")) u->sh.layers = atoi(v);
		else if (!strcmp(a, "--heads")) u->sh.num_kv_heads = atoi(v);
		else if (!strcmp(a, "--head-size")) u->sh.head_size = atoi(v);
		else if (!strcmp(a, "--block-size")) u->sh.block_size = atoi(v);
		else if (!strcmp(a, "--cufile")) *cufile = v;
		else if (!strcmp(a, "--skip") && !strcmp(v, "ram")) *skip_ram = 1;
		else if (!strcmp(a, "--window")) u->window = (size_t)atol(v);
		else {
			fprintf(stderr, "kvbench-gpu: unknown option %s\n", a);
			return 2;
		}
	}
	if (u->reps < 1 || u->reps > MAXREP || *gib <= 0 || u->sh.layers < 1 || u->window < 1 ||
	    u->sh.num_kv_heads < 1 || u->sh.head_size < 1 || u->sh.block_size < 1) {
		fprintf(stderr, "kvbench-gpu: --reps 1..%d; --gib, --layers, --heads, "
			"--head-size, --block-size, --window above 0\n", MAXREP);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct setup u;
	const char *json_path = NULL, *cufile = NULL, *dirs[MAXDIR];
	int ndir = 0;
	double gib = 4;

	memset(&u, 0, sizeof(u));
	u.sh = (struct kv_shape){ 48, 0, 16, 4, 128, 2 }; /* Qwen3-Coder-30B-A3B: 1.5 MiB blocks */
	u.reps = 5;
	u.window = 128;
	int skip_ram = 0;
	int rc = parse(argc, argv, &u, &json_path, &cufile, dirs, &ndir, &gib, &skip_ram);
	if (rc)
		return rc;
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || !ndev) {
		fprintf(stderr, "kvbench-gpu: no CUDA device\n");
		return 77;
	}
	/* Threads waiting for the GPU sleep instead of spinning, so a thread
	 * running copies beside a measurement takes no CPU from it. */
	CK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
	u.bb = kv_block_bytes(&u.sh);
	u.nblocks = (int)(gib * (double)(1u << 30) / (double)u.bb);
	if (u.nblocks < 8)
		u.nblocks = 8;
	u.sh.num_blocks = u.nblocks;
	u.ntok = (size_t)u.nblocks * u.sh.block_size;
	u.tokens = (uint32_t *)malloc(u.ntok * sizeof(uint32_t));
	for (size_t i = 0; i < u.ntok; i++)
		u.tokens[i] = (uint32_t)((i * 2654435761u) % 151936u);
	u.ids = (int *)malloc((size_t)u.nblocks * sizeof(int));
	for (int i = 0; i < u.nblocks; i++)
		u.ids[i] = i;
	uint64_t x = 0x243f6a8885a308d3ull;
	for (int i = u.nblocks - 1; i > 0; i--) { /* a shuffled block table */
		int j = (int)(xorshift(&x) % (uint64_t)(i + 1)), t = u.ids[i];
		u.ids[i] = u.ids[j];
		u.ids[j] = t;
	}
	size_t set = (size_t)u.nblocks * u.bb;

	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	json_t *root = json_object(), *res = json_object(), *corr = json_object();
	errors = json_array();
	char host[256] = "", date[64], cmd[1024] = "";
	gethostname(host, sizeof(host) - 1);
	time_t now = time(NULL);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	for (int i = 0; i < argc; i++)
		snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), "%s%s", i ? " " : "", argv[i]);
	json_object_set_new(root, "date", json_string(date));
	json_object_set_new(root, "command", json_string(cmd));
	json_object_set_new(root, "gpu", json_string(prop.name));
	json_object_set_new(root, "host", json_string(host));
	json_object_set_new(root, "block_bytes", json_integer((json_int_t)u.bb));
	json_object_set_new(root, "blocks", json_integer(u.nblocks));
	json_object_set_new(root, "shape", json_pack("{s:i,s:i,s:i,s:i,s:s}", "layers", u.sh.layers,
						     "block_size", u.sh.block_size, "num_kv_heads",
						     u.sh.num_kv_heads, "head_size", u.sh.head_size,
						     "dtype", "bf16"));
	json_object_set_new(root, "reps", json_integer(u.reps));
	json_object_set_new(root, "window", json_integer((json_int_t)u.window));
	json_object_set_new(root, "connector", json_pack("{s:i,s:i,s:i,s:s}", "copy_streams", CONN_STREAMS,
							 "group_blocks", CONN_GROUP, "staging_buffers", CONN_STAGES,
							 "gpu_waits", "cudaDeviceScheduleBlockingSync"));

	/* GPU caches of both layouts, and the limit buffers. */
	struct kv_cache fa, cr, fa2;
	kv_cache_alloc(&fa, KV_FLASH, &u.sh);
	kv_cache_alloc(&cr, KV_CROSS, &u.sh);
	kv_cache_alloc(&fa2, KV_FLASH, &u.sh);
	fill_cache(&fa, 1);
	fill_cache(&cr, 2);
	cudaStream_t lst[CONN_STREAMS];
	for (int i = 0; i < CONN_STREAMS; i++)
		CK(cudaStreamCreateWithFlags(&lst[i], cudaStreamNonBlocking));
	size_t lim_total = set < (1ull << 30) ? set : (1ull << 30);
	char *pinned, *pageable = (char *)malloc(lim_total), *dbuf;
	CK(cudaHostAlloc((void **)&pinned, lim_total, cudaHostAllocDefault));
	memset(pinned, 1, lim_total);
	memset(pageable, 1, lim_total);
	CK(cudaMalloc((void **)&dbuf, lim_total));
	copy_time(pinned, dbuf, u.bb, lim_total, 1, lst); /* warm up */

	/* --- RAM tier --- */
	char cfg[1024];
	snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": %zu, \"max_block\": %zu, \"pin_cap\": 1.0,"
		 " \"lease_cap\": 1.0, \"high_watermark\": 1.0, \"low_watermark\": 0.99}}", set + set / 4 + (64u << 20), u.bb);
	kvt_key rk = conn_root("bench/qwen3-coder-30b-a3b", &u.sh, 0, 1);
	struct conn cfa, ccr, cfa2;
	kvt_store *s = NULL;
	void *arena = NULL;
	size_t bad = 0;
	if (!skip_ram) {
		s = open_store(cfg);
		arena = conn_register(s);
		conn_open(&cfa, s, rk, &fa);
		conn_open(&ccr, s, rk, &cr);
		conn_open(&cfa2, s, rk, &fa2);
		ccr.window = cfa2.window = u.window;

		struct fig h2d = { 0, { 0 } }, d2h = { 0, { 0 } }, pg = { 0, { 0 } };
		struct fig rst_fa = { 0, { 0 } }, rst_cr = { 0, { 0 } }, sv_fa = { 0, { 0 } }, sv_cr = { 0, { 0 } };
		struct fig rst_fcb = { 0, { 0 } };
		struct rinfo ri_fa, ri_cr, ri_fcb;
		memset(&ri_fa, 0, sizeof(ri_fa));
		memset(&ri_cr, 0, sizeof(ri_cr));
		memset(&ri_fcb, 0, sizeof(ri_fcb));

		/* correctness through RAM: flash -> store -> cross, and -> flash again */
		save_all(&cfa, &u);
		zero_cache(&cr);
		restore_all(&ccr, &u, NULL);
		zero_cache(&fa2);
		restore_all(&cfa2, &u, NULL);
		bad = differ(&fa, &cr, u.ids, u.nblocks);
		size_t b2 = differ(&fa, &fa2, u.ids, u.nblocks);
		json_object_set_new(corr, "ram_flash_to_cross_elements_differing", json_integer((json_int_t)bad));
		json_object_set_new(corr, "ram_flash_to_flash_elements_differing", json_integer((json_int_t)b2));
		bad += b2;
		zero_cache(&fa2);
		cfa2.poll = 0;
		restore_all(&cfa2, &u, NULL);
		cfa2.poll = 1;
		b2 = differ(&fa, &fa2, u.ids, u.nblocks);
		json_object_set_new(corr, "ram_flash_to_flash_callbacks_elements_differing", json_integer((json_int_t)b2));
		bad += b2;

		for (int r = 0; r < u.reps; r++) {
			add(&h2d, (double)lim_total, copy_time(pinned, dbuf, u.bb, lim_total, 1, lst));
			add(&rst_fa, (double)set, restore_all(&cfa2, &u, &ri_fa));
			cfa2.poll = 0;
			add(&rst_fcb, (double)set, restore_all(&cfa2, &u, &ri_fcb));
			cfa2.poll = 1;
			add(&h2d, (double)lim_total, copy_time(pinned, dbuf, u.bb, lim_total, 1, lst));
			add(&rst_cr, (double)set, restore_all(&ccr, &u, &ri_cr));
		}
		add(&h2d, (double)lim_total, copy_time(pinned, dbuf, u.bb, lim_total, 1, lst));
		for (int r = 0; r < u.reps; r++) {
			add(&pg, (double)lim_total, copy_time(pageable, dbuf, u.bb, lim_total, 1, lst));
			add(&d2h, (double)lim_total, copy_time(pinned, dbuf, u.bb, lim_total, 0, lst));
			remove_all(s, rk, &u);
			add(&sv_fa, (double)set, save_all(&cfa, &u));
			add(&d2h, (double)lim_total, copy_time(pinned, dbuf, u.bb, lim_total, 0, lst));
			remove_all(s, rk, &u);
			add(&sv_cr, (double)set, save_all(&ccr, &u));
		}
		add(&d2h, (double)lim_total, copy_time(pinned, dbuf, u.bb, lim_total, 0, lst));
		json_t *rj = json_object(), *sj = json_object();
		json_object_set_new(rj, "pinned_h2d", fig_json(&h2d, "cudaMemcpyAsync pinned -> GPU, one block per copy, 4 streams"));
		json_object_set_new(rj, "pageable_h2d", fig_json(&pg, "cudaMemcpyAsync malloc'd memory -> GPU, one block per copy"));
		json_object_set_new(rj, "restore_flash", fig_json(&rst_fa, "lookup+pin -> H2D -> scatter into the FlashAttention layout; each block unpinned once its copy is done"));
		json_object_set_new(rj, "restore_cross", fig_json(&rst_cr, "lookup+pin -> H2D into the cross-layer layout; each block unpinned once its copy is done"));
		rinfo_json(rj, "restore_flash", &ri_fa);
		json_object_set_new(rj, "restore_flash_callbacks", fig_json(&rst_fcb, "restore_flash with the blocks unpinned by a host callback behind each group's scatter (kvconn with poll 0) instead of as each block's copy is done"));
		json_object_set_new(rj, "restore_flash_callbacks_over_pinned_h2d", json_real(median(&rst_fcb) / median(&h2d)));
		rinfo_json(rj, "restore_flash_callbacks", &ri_fcb);
		rinfo_json(rj, "restore_cross", &ri_cr);
		json_object_set_new(rj, "restore_flash_over_pinned_h2d", json_real(median(&rst_fa) / median(&h2d)));
		json_object_set_new(rj, "restore_cross_over_pinned_h2d", json_real(median(&rst_cr) / median(&h2d)));
		json_object_set_new(res, "ram_restore", rj);
		json_object_set_new(sj, "pinned_d2h", fig_json(&d2h, "cudaMemcpyAsync GPU -> pinned, one block per copy, 4 streams"));
		json_object_set_new(sj, "save_flash", fig_json(&sv_fa, "reserve -> gather -> D2H into slots -> commit (host callback)"));
		json_object_set_new(sj, "save_cross", fig_json(&sv_cr, "reserve -> D2H into slots -> commit (host callback)"));
		json_object_set_new(sj, "save_flash_over_pinned_d2h", json_real(median(&sv_fa) / median(&d2h)));
		json_object_set_new(sj, "save_cross_over_pinned_d2h", json_real(median(&sv_cr) / median(&d2h)));
		json_object_set_new(res, "save", sj);
		conn_close(&cfa);
		conn_close(&ccr);
		conn_close(&cfa2);
		conn_unregister(arena);
		kvt_close(s);
	}

	/* --- the disk tier, per directory --- */
	json_t *disks = json_array();
	for (int d = 0; d < ndir; d++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/kvbench-gpu.tier", dirs[d]);
		unlink(path);
		/* RAM a quarter of the data set, so the save spills as it goes; no
		 * promotion, so every round reads the disk again. */
		snprintf(cfg, sizeof(cfg), "{\"ram\": {\"capacity\": %zu, \"max_block\": %zu, \"pin_cap\": 1.0,"
			 " \"lease_cap\": 1.0}, \"disk\": {\"path\": \"%s\", \"capacity\": %zu, \"queue_depth\": %d,"
			 " \"promote\": false}}", set / 4 + (256u << 20), u.bb, path,
			 2 * set + ((size_t)4 << 30), QD);
		s = open_store(cfg);
		arena = conn_register(s);
		conn_open(&cfa, s, rk, &fa);
		save_all(&cfa, &u);
		conn_close(&cfa);
		/* Blocks still only in RAM would be lost at the close: push them
		 * out first, then reopen, so every load is a cold disk read. */
		push_out_of_ram(s, set / 4 + (256u << 20), u.bb);
		conn_unregister(arena);
		kvt_close(s);
		s = open_store(cfg);
		arena = conn_register(s);
		conn_open(&cfa2, s, rk, &fa2);
		conn_open(&ccr, s, rk, &cr);
		cfa2.window = ccr.window = u.window;
		json_t *dj = json_object();
		json_object_set_new(dj, "dir", json_string(dirs[d]));
		zero_cache(&cr);
		restore_all(&ccr, &u, NULL);
		zero_cache(&fa2);
		restore_all(&cfa2, &u, NULL);
		size_t d1 = differ(&fa, &cr, u.ids, u.nblocks), d2 = differ(&fa, &fa2, u.ids, u.nblocks);
		bad += d1 + d2;
		json_object_set_new(dj, "flash_to_cross_elements_differing", json_integer((json_int_t)d1));
		json_object_set_new(dj, "flash_to_flash_elements_differing", json_integer((json_int_t)d2));
		zero_cache(&fa2);
		cfa2.poll = 0;
		restore_all(&cfa2, &u, NULL);
		cfa2.poll = 1;
		d2 = differ(&fa, &fa2, u.ids, u.nblocks);
		bad += d2;
		json_object_set_new(dj, "flash_to_flash_callbacks_elements_differing", json_integer((json_int_t)d2));
		struct stat stt;
		stat(path, &stt);
		size_t span = (size_t)stt.st_size < set ? (size_t)stt.st_size : set;
		struct fig raw = { 0, { 0 } }, rst = { 0, { 0 } }, bnc = { 0, { 0 } }, lim = { 0, { 0 } };
		struct fig pin = { 0, { 0 } }, rawc = { 0, { 0 } }, rawh = { 0, { 0 } }, h2dc = { 0, { 0 } };
		struct fig pinc = { 0, { 0 } }, raw8 = { 0, { 0 } }, rstc = { 0, { 0 } };
		struct fig pinh = { 0, { 0 } }, h2dp = { 0, { 0 } }, pinhc = { 0, { 0 } };
		struct fig rstcb = { 0, { 0 } };
		struct rinfo ri, ric, ricb;
		memset(&ri, 0, sizeof(ri));
		memset(&ric, 0, sizeof(ric));
		memset(&ricb, 0, sizeof(ricb));
		double tc_rst[TC_N] = { 0 }, tc_rstcb[TC_N] = { 0 }, tc_pin[TC_N] = { 0 };
		static struct tsnap ta, tb;
		double rr = 0;
		for (int r = 0; r <= u.reps; r++) {
			double c0 = cpu_s();
			rr = raw_read(path, u.bb, span, set, QD);
			if (rr < 0)
				break;
			raw.v[raw.n++] = rr / 1e9;
			rawc.v[rawc.n++] = (cpu_s() - c0) / ((double)set / 1e9);
			double r8 = raw_read(path, u.bb, span, set, 8);
			if (r8 > 0)
				raw8.v[raw8.n++] = r8 / 1e9;
			if (r == u.reps)
				break; /* limit, figure, ..., limit */
			add(&lim, (double)lim_total, copy_time(pinned, dbuf, u.bb, lim_total, 1, lst));
			/* The three restores in turn, each first in a third of the
			 * repetitions: whichever runs first after the limits has been
			 * the slowest, so a fixed order would favour the later ones. */
			for (int k = 0; k < 3; k++) {
				switch ((r + k) % 3) {
				case 0:
					tsnap_take(&ta);
					add(&rst, (double)set, restore_all(&cfa2, &u, &ri));
					tsnap_take(&tb);
					tsnap_add(&ta, &tb, tc_rst);
					break;
				case 1:
					cfa2.poll = 0;
					tsnap_take(&ta);
					add(&rstcb, (double)set, restore_all(&cfa2, &u, &ricb));
					tsnap_take(&tb);
					tsnap_add(&ta, &tb, tc_rstcb);
					cfa2.poll = 1;
					break;
				default:
					add(&rstc, (double)set, restore_all(&ccr, &u, &ric));
				}
			}
			add(&bnc, (double)set, bounce_all(s, rk, &cfa2, &u));
			double pc;
			tsnap_take(&ta);
			add(&pin, (double)set, pin_all(s, rk, &u, &pc));
			tsnap_take(&tb);
			tsnap_add(&ta, &tb, tc_pin);
			pinc.v[pinc.n++] = pc / ((double)set / 1e9);
			/* the host side again, while pinned H2D copies run beside it */
			struct h2d_load hp = { pinned, dbuf, u.bb, lim_total, 0, 0, 0 };
			pthread_t pth;
			pthread_create(&pth, NULL, h2d_loop, &hp);
			add(&pinh, (double)set, pin_all(s, rk, &u, &pc));
			pinhc.v[pinhc.n++] = pc / ((double)set / 1e9);
			hp.stop = 1;
			pthread_join(pth, NULL);
			if (hp.secs > 0)
				h2dp.v[h2dp.n++] = hp.bytes / hp.secs / 1e9;
			/* the raw read again, while pinned H2D copies run beside it */
			struct h2d_load hl = { pinned, dbuf, u.bb, lim_total, 0, 0, 0 };
			pthread_t hth;
			pthread_create(&hth, NULL, h2d_loop, &hl);
			double rh = raw_read(path, u.bb, span, set, QD);
			hl.stop = 1;
			pthread_join(hth, NULL);
			if (rh > 0)
				rawh.v[rawh.n++] = rh / 1e9;
			if (hl.secs > 0)
				h2dc.v[h2dc.n++] = hl.bytes / hl.secs / 1e9;
		}
		if (rr < 0)
			json_object_set_new(dj, "error", json_sprintf("raw read of %s: %s", path, strerror((int)-rr)));
		double rawbest = median(&raw) > median(&raw8) ? median(&raw) : median(&raw8);
		double limit = rawbest < median(&lim) ? rawbest : median(&lim);
		json_object_set_new(dj, "raw_read", fig_json(&raw, "io_uring O_DIRECT random reads of the tier file, bs = one block, QD 32 from 32 threads (1 each, as the loaders)"));
		json_object_set_new(dj, "raw_read_8x4", fig_json(&raw8, "the same reads, QD 32 from 8 threads of 4 each"));
		json_object_set_new(dj, "limit_GBps", json_real(limit));
		json_object_set_new(dj, "limit_is", json_string("min(the faster raw_read shape, pinned_h2d), medians"));
		json_object_set_new(dj, "pinned_h2d", fig_json(&lim, "cudaMemcpyAsync pinned -> GPU, one block per copy"));
		json_object_set_new(dj, "restore_flash", fig_json(&rst, "lookup+pin (disk loads into fresh slots) -> H2D of each block as it lands -> scatter per group; each block unpinned once its copy is done"));
		json_object_set_new(dj, "host_bounce_flash", fig_json(&bnc, "kvt_get_batch into malloc'd buffers -> cudaMemcpy -> scatter"));
		json_object_set_new(dj, "restore_over_limit", json_real(limit > 0 ? median(&rst) / limit : 0));
		rinfo_json(dj, "restore_flash", &ri);
		json_object_set_new(dj, "restore_flash_callbacks", fig_json(&rstcb, "restore_flash with the blocks unpinned by a host callback behind each group's scatter (kvconn with poll 0) instead of as each block's copy is done"));
		json_object_set_new(dj, "restore_callbacks_over_limit", json_real(limit > 0 ? median(&rstcb) / limit : 0));
		rinfo_json(dj, "restore_flash_callbacks", &ricb);
		{
			double gb = (double)set / 1e9 * u.reps;
			json_t *tc = json_object();
			json_object_set_new(tc, "restore_flash", tcpu_json(tc_rst, gb, "CPU seconds per GB by thread, over every repetition"));
			json_object_set_new(tc, "restore_flash_callbacks", tcpu_json(tc_rstcb, gb, "the same for restore_flash_callbacks"));
			json_object_set_new(tc, "pin_only", tcpu_json(tc_pin, gb, "the same for pin_only"));
			json_object_set_new(dj, "cpu_by_thread", tc);
		}
		json_object_set_new(dj, "restore_cross", fig_json(&rstc, "the same into the cross-layer layout: no staging, no scatter"));
		json_object_set_new(dj, "restore_cross_over_limit", json_real(limit > 0 ? median(&rstc) / limit : 0));
		rinfo_json(dj, "restore_cross", &ric);
		json_object_set_new(dj, "pin_only_beside_h2d", fig_json(&pinh, "pin_only again while pinned H2D copies (4 streams, one block each) run beside it: the host side under a restore's own copy traffic"));
		json_object_set_new(dj, "pin_only_beside_h2d_cpu_s_per_GB", fig_json_unit(&pinhc, "CPU seconds of the process per GB of pin_only_beside_h2d (the copies' own thread included)", "cpu_s_per_GB"));
		json_object_set_new(dj, "h2d_beside_pin_only", fig_json(&h2dp, "the pinned H2D copies during pin_only_beside_h2d"));
		json_object_set_new(dj, "raw_read_cpu_s_per_GB", fig_json_unit(&rawc, "CPU seconds of the process (io_uring workers included) per GB of raw_read", "cpu_s_per_GB"));
		json_object_set_new(dj, "pin_only", fig_json(&pin, "host side of the restore alone: lookup-free kvt_get_pin windows of 128 (two in flight), each block unpinned as it is reaped, no GPU copy"));
		json_object_set_new(dj, "pin_only_cpu_s_per_GB", fig_json_unit(&pinc, "CPU seconds of the process per GB of pin_only", "cpu_s_per_GB"));
		json_object_set_new(dj, "pin_only_over_faster_raw_read", json_real(rawbest > 0 ? median(&pin) / rawbest : 0));
		json_object_set_new(dj, "raw_read_beside_h2d", fig_json(&rawh, "raw_read again while pinned H2D copies (4 streams) run beside it: the device limit under a restore's own copy traffic"));
		json_object_set_new(dj, "h2d_beside_raw_read", fig_json(&h2dc, "the pinned H2D copies during raw_read_beside_h2d"));
		json_object_set_new(dj, "restore_over_raw_read_beside_h2d", json_real(median(&rawh) > 0 ? median(&rst) / median(&rawh) : 0));
		json_object_set_new(dj, "host_bounce_over_limit", json_real(limit > 0 ? median(&bnc) / limit : 0));
		json_object_set_new(dj, "cufile", cufile_try(cufile, path, u.bb, span,
							     set < (2ull << 30) ? set : (2ull << 30), u.reps));
		json_array_append_new(disks, dj);
		conn_close(&cfa2);
		conn_close(&ccr);
		conn_unregister(arena);
		kvt_close(s);
		unlink(path);
	}
	json_object_set_new(res, "disk_restore", disks);
	json_object_set_new(root, "correctness", corr);
	json_object_set_new(root, "errors", errors);
	json_object_set_new(root, "results", res);

	char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
	FILE *f = json_path ? fopen(json_path, "w") : stdout;
	if (!f || !text) {
		fprintf(stderr, "kvbench-gpu: cannot write %s\n", json_path ? json_path : "stdout");
		return 1;
	}
	fprintf(f, "%s\n", text);
	if (f != stdout)
		fclose(f);
	free(text);
	json_decref(root);
	kv_cache_free(&fa);
	kv_cache_free(&cr);
	kv_cache_free(&fa2);
	return bad == 0 && json_array_size(errors) == 0 ? 0 : 1;
}
