/*
 * disk.c - "kvbench disk": first what users call, a store with the default
 * configuration and a disk tier on a file in --dir, driven through
 * kvt_put_batch (spill) and, reopened cold, kvt_get_batch (load) into
 * caller buffers from posix_memalign (--huge-buffers: transparent huge
 * pages); then, as second rows, the NVMe tier alone (lib/disk.h, as the
 * store drives it, with an arena registered as fixed buffers): spill
 * bandwidth (one put at a time, and put batches), cold batch-load bandwidth
 * and latency percentiles (the tier closed and reopened between writing and
 * loading; O_DIRECT bypasses the page cache), reopen times after a clean
 * close and after kill -9, and index bytes per block.
 * Each figure is divided by the device limit measured in the same
 * repetition, on the same file, with the same block size and queue depth,
 * right before and right after it (the better of the two counts; kvbench(1)
 * gives the method): one pass of fio (--rw=write / --rw=randread,
 * io_uring, O_DIRECT) over the tier's own file, or the bench's raw io_uring
 * loop where fio is missing. A pass moves about as many bytes as the figure,
 * so both see the same moment of a shared machine's drifting device. fio's
 * write pass also overwrites the tier's superblock, so the next open starts
 * an empty tier on a file whose every block has been written once: the
 * steady state of a long-lived tier, and what fio itself rewrites. "New
 * file" spills into a freshly preallocated file instead, against fio
 * writing a new file (the file system converts unwritten extents on first
 * write, which costs both).
 * The limit's passes are disk_limit.c's, the store's rows disk_store.c's
 * (disk_cmd.h). Knows the tier only through disk.h and uring.h.
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


#define CMD "disk"

static const char usage[] =
	"usage: kvbench disk [OPTIONS]\n"
	"Measures spill and cold batch-load bandwidth as a share of fio (or a raw\n"
	"io_uring loop) on the same file: first through the public API (a store with\n"
	"the default configuration, kvt_put_batch, then kvt_get_batch after a cold\n"
	"reopen, into posix_memalign buffers), then of the NVMe tier alone (puts, put\n"
	"batches, batch loads); load latency percentiles, reopen times, index bytes\n"
	"per block.\n"
	"  --dir DIR          directory for the tier and the limit's file\n"
	"                     (default a new temp dir under /var/tmp or /tmp)\n"
	"  --size SIZE        tier capacity and limit file size (default 1GiB)\n"
	"  --block-size SIZE  block size (default 1MiB)\n"
	"  --qd N             queue depth (default 32)\n"
	"  --batch N          blocks per put/get batch (default 64)\n"
	"  --no-fio           use the raw io_uring loop even when fio is installed\n"
	"  --ram SIZE         the store's RAM tier (ram.capacity, default 32MiB; the\n"
	"                     other keys keep their defaults), so that puts spill\n"
	"  --huge-buffers     the store figures' caller buffers in transparent huge\n"
	"                     pages instead of plain posix_memalign memory\n"
	"  --reps N           timed repetitions (default 5); medians are reported\n"
	"  --json FILE        write the results as JSON to FILE\n"
	"  --help             this text\n";

enum { OPT_DIR = BENCH_OPT_FIRST_FREE, OPT_SIZE, OPT_BS, OPT_QD, OPT_BATCH, OPT_NOFIO, OPT_HUGE, OPT_RAM };

int db_tier_open(struct run *r, struct disk_tier **d)
{
	int rc = disk_open_cfg(&r->cfg, r->arena, r->arena_len, NULL, d);

	if (rc)
		fprintf(stderr, "kvbench disk: cannot open the tier: %s\n", kvt_last_error());
	return rc;
}

/* --- the tier ---------------------------------------------------------------------- */

/* Spills nblocks blocks under rep's keys; returns bytes/s or NAN. */
static double spill(struct run *r, struct disk_tier *d, unsigned rep, int batched)
{
	size_t n = r->nblocks, B = r->o.batch;
	kvt_op *ops = calloc(B, sizeof(*ops));
	uint64_t t0 = bench_now_ns();
	int err = 0;

	for (size_t i = 0; ops && i < n && !err; i += B) {
		size_t m = n - i < B ? n - i : B;

		for (size_t j = 0; j < m; j++) {
			ops[j].key = bkey(rep, i + j);
			ops[j].buf = r->arena + ((i + j) % B) * r->o.bs;
			ops[j].len = r->o.bs;
		}
		if (batched) {
			err = disk_put_batch(d, ops, m);
		} else {
			for (size_t j = 0; j < m && !err; j++)
				err = disk_put(d, ops[j].key, ops[j].buf, ops[j].len);
		}
	}
	double dt = (double)(bench_now_ns() - t0) / 1e9;
	free(ops);
	if (err) {
		fprintf(stderr, "kvbench disk: put failed: %s\n", kvt_last_error());
		return NAN;
	}
	return (double)n * (double)r->o.bs / dt;
}

/* 0..n-1 in a random order (malloc'd), or NULL. */
size_t *db_shuffled(size_t n)
{
	size_t *order = malloc(n * sizeof(*order));

	if (!order)
		return NULL;
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)rand() % i, t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
	return order;
}

/* Loads every block of rep in batches in a shuffled order; verifies. */
static double load(struct run *r, struct disk_tier *d, unsigned rep,
		   struct bench_samples *lat, int *bad)
{
	size_t n = r->nblocks, B = r->o.batch;
	size_t *order = db_shuffled(n);
	kvt_op *ops = calloc(B, sizeof(*ops));
	uint64_t busy = 0, bytes = 0;

	if (!order || !ops) {
		free(order);
		free(ops);
		return NAN;
	}
	for (size_t i = 0; i < n; i += B) {
		size_t m = n - i < B ? n - i : B;

		for (size_t j = 0; j < m; j++) {
			ops[j].key = bkey(rep, order[i + j]);
			ops[j].buf = r->arena + (B + j) * r->o.bs;
			ops[j].len = r->o.bs;
		}
		uint64_t t0 = bench_now_ns();
		disk_get_batch(d, ops, m);
		uint64_t dt = bench_now_ns() - t0;
		busy += dt;
		bench_samples_add(lat, (double)dt / 1e3);
		for (size_t j = 0; j < m; j++) {
			if (ops[j].result == 0) {
				bytes += ops[j].len;
				if (common_check(ops[j].buf, ops[j].len,
						order[i + j] % B + 1) != -1)
					(*bad)++;
			} else {
				(*bad)++;
			}
		}
	}
	free(order);
	free(ops);
	return (double)bytes / ((double)busy / 1e9);
}

/* Fills a fresh tier, then reopens it cleanly and after kill -9 (ms). */
static void reopen_times(struct run *r, double *clean_ms, double *crash_ms,
			 double *bpb)
{
	struct disk_tier *d = NULL;

	*clean_ms = *crash_ms = *bpb = NAN;
	if (db_tier_open(r, &d))
		return;
	json_t *st = json_object();
	struct stat_visitor sv = stats_json_visitor(st);
	disk_stats(d, &sv);
	*bpb = json_number_value(json_object_get(st, "index_bytes_per_block"));
	json_decref(st);
	disk_close(d);
	uint64_t t0 = bench_now_ns();
	if (db_tier_open(r, &d))
		return;
	*clean_ms = (double)(bench_now_ns() - t0) / 1e6;
	disk_close(d);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		/* opening invalidates the checkpoint; then die without closing */
		if (disk_open_cfg(&r->cfg, NULL, 0, NULL, &d) == 0)
			disk_put(d, bkey(999, 0), r->arena, r->o.bs);
		kill(getpid(), SIGKILL);
		_exit(1);
	}
	int status;
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		return;
	t0 = bench_now_ns();
	if (db_tier_open(r, &d))
		return;
	*crash_ms = (double)(bench_now_ns() - t0) / 1e6;
	disk_close(d);
}

/* A number for the report, or n/a (bench_fmt_real()). */
#define NA(buf, fmt, v) bench_fmt_real(buf, sizeof(buf), fmt, v)

static void row(struct bench_table *t, const char *name, const struct bench_summary *v,
		const struct bench_summary *lim, const struct bench_summary *share)
{
	char a[32], b[32];

	/* a figure a stopped run did not reach is n/a, as in the JSON (null) */
	bench_table_cell(t, "%s", name);
	bench_table_cell(t, "%s", NA(a, "%.2f GB/s", v->median / 1e9));
	bench_table_cell(t, "%s", NA(a, "%.2f GB/s", lim->median / 1e9));
	bench_table_cell(t, "%s", NA(a, "%.0f%%", 100.0 * share->median));
	if (isfinite(share->min) && isfinite(share->max))
		bench_table_cell(t, "%s-%s", NA(a, "%.0f%%", 100.0 * share->min),
				 NA(b, "%.0f%%", 100.0 * share->max));
	else
		bench_table_cell(t, "n/a");
	bench_table_end_row(t);
}

/* A figure: its median, its limits and its shares per repetition. */
static json_t *jfig(const char *name, const struct bench_summary *s,
		    const struct bench_summary *lim, const char *limname,
		    const struct bench_summary *share)
{
	json_t *o = json_object();
	json_object_set_new(o, "name", json_string(name));
	json_object_set_new(o, "unit", json_string("bytes/s"));
	json_object_set_new(o, "value", bench_json_real(s->median));
	json_object_set_new(o, "reps", bench_json_reps(s));
	json_object_set_new(o, "limit", json_string(limname));
	json_object_set_new(o, "limit_value", bench_json_real(lim->median));
	json_object_set_new(o, "limit_reps", bench_json_reps(lim));
	/* the median of the per-repetition shares */
	json_object_set_new(o, "share", bench_json_real(share->median));
	json_object_set_new(o, "share_reps", bench_json_reps(share));
	return o;
}

enum { F_SSPILL, F_SLOAD, F_SALOAD, F_ONE, F_BATCH, F_NEW, F_LOAD, NF };
static const char *const fname[NF] = {
	"store: kvt_put_batch spill", "store: cold kvt_get_batch",
	"store: cold async batches, 2 in flight",
	"tier alone: spill, one put at a time", "tier alone: spill, put batches",
	"tier alone: spill, put batches, new file", "tier alone: cold batch load" };
static const char *const jname[NF] = {
	"store_put_batch_spill", "store_get_batch_cold", "store_get_batch_async_cold",
	"spill_put", "spill_put_batch", "spill_put_batch_new_file", "batch_load" };
static const char *const jlim[NF] = { "write", "randread", "randread",
	"write", "write", "write_new_file", "randread" };

/* What the repetitions measured, and the summaries reported. */
struct figures {
	double *v;                        /* 5 * NF * reps, then reps to sort */
	double *fig[NF], *lim[NF], *shr[NF];
	double *pre[NF], *post[NF];       /* the passes before and after */
	unsigned done;                    /* counted repetitions completed */
	double *sorted;                   /* room to summarize a series in */
	struct bench_samples lat;         /* batch load latencies (us) */
	struct bench_samples slat;        /* the store's, likewise */
	int bad;                          /* blocks missing or wrong */
	double clean_ms, crash_ms, bpb;   /* reopen times, index bytes/block */
	struct bench_summary sf[NF], sl[NF], ss[NF], sla, ssla;
};

/* The tier's region size for o: 64 MiB from a 1 GiB tier up, 16 MiB
 * below, and at least four blocks with their header pages (MiB-aligned),
 * so that a region holds a batch's worth of spills. */
static uint64_t region_size(const struct opts *o)
{
	uint64_t rs = o->size >= (1ull << 30) ? 64ull << 20 : 16ull << 20;

	if (rs < 4 * (o->bs + 4096))
		rs = (4 * (o->bs + 4096) + (1 << 20) - 1) & ~((1ull << 20) - 1);
	return rs;
}

#define ROUND_UP(x, a) (((x) + (a) - 1) / (a) * (a))

/*
 * Whether a tier of size bytes in regions of rs holds the two regions the
 * library needs after its metadata, as disk_geometry() (lib/disk_format.c)
 * counts it: a page, then the checkpoint (a page, 16 bytes a region, 32 a
 * block of at least two pages, page-aligned), aligned to 64 KiB. Checked
 * up front so that a --size too small for --block-size is a usage error,
 * not a failure once the run has started.
 */
static int holds_two_regions(uint64_t size, uint64_t rs)
{
	uint64_t dev = size / 4096 * 4096, nreg = dev / rs;
	uint64_t ckpt = ROUND_UP(4096 + nreg * 16 + nreg * (rs / 8192) * 32, 4096);
	uint64_t data_off = ROUND_UP(4096 + ckpt, 64 << 10);

	return dev > data_off && (dev - data_off) / rs >= 2;
}

/*
 * The options together: a --size that holds fewer than two regions (named
 * with the least --size, MiB-aligned, that holds them), or a block larger
 * than the RAM tier, which takes every block first and refuses one above
 * its capacity (ram.max_block). Returns -1 or BENCH_EXIT_USAGE.
 */
static int disk_check_sizes(const struct opts *o)
{
	uint64_t rs = region_size(o), need = 2 * rs;
	char a[32], b[32], c[32], d[32];

	if (o->bs > o->ram)
		return bench_usage_error(CMD, "--block-size %s is larger than --ram %s, the "
					 "largest block the store takes; give --ram %s or more",
					 bench_fmt_size(o->bs, a, sizeof(a)),
					 bench_fmt_size(o->ram, b, sizeof(b)),
					 bench_fmt_size(o->bs, c, sizeof(c)));
	if (holds_two_regions(o->size, rs))
		return -1;
	while (!holds_two_regions(need, rs))
		need += 1 << 20;
	return bench_usage_error(CMD, "--size %s holds fewer than two regions of %s "
				 "(four blocks of --block-size %s each, with their headers) "
				 "after the tier's metadata; give --size %s or more, or a "
				 "smaller --block-size",
				 bench_fmt_size(o->size, a, sizeof(a)),
				 bench_fmt_size(rs, b, sizeof(b)),
				 bench_fmt_size(o->bs, c, sizeof(c)),
				 bench_fmt_size(need, d, sizeof(d)));
}

/* Parses the command line. Returns -1 to run, else the exit status. */
static int disk_parse(int argc, char **argv, struct opts *o, struct bench_common *co)
{
	static const struct option longopts[] = {
		{ "dir", required_argument, NULL, OPT_DIR },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "block-size", required_argument, NULL, OPT_BS },
		{ "qd", required_argument, NULL, OPT_QD },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "no-fio", no_argument, NULL, OPT_NOFIO },
		{ "huge-buffers", no_argument, NULL, OPT_HUGE },
		{ "ram", required_argument, NULL, OPT_RAM },
		BENCH_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	char why[256];
	int c, x;

	*o = (struct opts){ .size = 1ull << 30, .bs = 1ull << 20, .qd = 32, .batch = 64,
			    .fio = 1, .ram = 32ull << 20 };
	bench_common_init(co);
	bench_getopt_begin();
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		x = bench_common_option(CMD, c, optarg, argv, co);
		if (x < 0)
			return BENCH_EXIT_USAGE;
		if (x > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return BENCH_EXIT_OK;
		case OPT_DIR:
			if (strlen(optarg) > 3700)
				return bench_usage_error(CMD, "--dir %s: name too long", optarg);
			if (bench_dir_check(optarg, why, sizeof(why)))
				return bench_usage_error(CMD, "--dir %s: %s", optarg, why);
			o->dir = optarg;
			break;
		case OPT_SIZE:
			if (bench_size_arg(CMD, "--size", optarg, 64ull << 20, UINT64_MAX,
					   &o->size))
				return BENCH_EXIT_USAGE;
			break;
		case OPT_BS:
			if (bench_size_arg(CMD, "--block-size", optarg, 4096, 64ull << 20, &o->bs))
				return BENCH_EXIT_USAGE;
			if (o->bs % 4096)
				return bench_usage_error(CMD, "bad --block-size '%s': a multiple "
							 "of 4KiB", optarg);
			break;
		case OPT_QD:
			if (bench_parse_uint(optarg, 1, 1024, &o->qd))
				return bench_usage_error(CMD, "bad --qd '%s': 1..1024", optarg);
			break;
		case OPT_BATCH:
			if (bench_parse_uint(optarg, 1, 4096, &o->batch))
				return bench_usage_error(CMD, "bad --batch '%s': 1..4096", optarg);
			break;
		case OPT_NOFIO:
			o->fio = 0;
			break;
		case OPT_HUGE:
			o->huge = 1;
			break;
		case OPT_RAM:
			if (bench_size_arg(CMD, "--ram", optarg, 1ull << 20, 1ull << 40, &o->ram))
				return BENCH_EXIT_USAGE;
			break;
		default:
			return bench_usage_error(CMD, "unexpected option");
		}
	}
	if (optind < argc)
		return bench_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	return disk_check_sizes(o);
}

/* Removes the run's directory and what it holds. */
static void disk_cleanup(const struct run *r, const char *dir)
{
	char p[4096 + 8];

	if (r->o.dir) {
		unlink(r->tierpath);
		unlink(r->limpath);
		/* what a fio stopped half-way leaves */
		snprintf(p, sizeof(p), "%s.new", r->limpath);
		unlink(p);
		snprintf(p, sizeof(p), "%s.json", r->limpath);
		unlink(p);
		rmdir(dir);
	} else {
		bench_tmpdir_remove(dir);
	}
}

/*
 * The directory, the tier's configuration (region size, blocks per
 * repetition from a probe of the tier) and the block buffers. Returns 0 or
 * BENCH_EXIT_FAIL (the directory then removed).
 */
static int disk_setup(struct run *r, char *dir, size_t cap)
{
	uint64_t per_region, nregions = 0;
	struct disk_tier *probe = NULL;

	if (r->o.dir) {
		snprintf(dir, cap, "%s/kvbench-disk-XXXXXX", r->o.dir);
		if (!mkdtemp(dir)) {
			fprintf(stderr, "kvbench disk: --dir %s: %s\n", r->o.dir, strerror(errno));
			return BENCH_EXIT_FAIL;
		}
	} else if (bench_tmpdir_create(dir, cap)) {
		return BENCH_EXIT_FAIL;
	}
	snprintf(r->tierpath, sizeof(r->tierpath), "%s/tier", dir);
	snprintf(r->limpath, sizeof(r->limpath), "%s/limit", dir);
	r->paths[0] = r->tierpath;
	r->cfg.ndisk = 1;
	r->cfg.disk_paths = r->paths;
	r->cfg.disk_capacity = r->o.size;
	r->cfg.region_size = region_size(&r->o);
	r->cfg.queue_depth = (unsigned)r->o.qd;
	/* 80% of what the tier's regions hold (its metadata takes part of
	 * --size), so that nothing is reclaimed, nor moved by reinsertion,
	 * within a rep */
	per_region = r->cfg.region_size / (r->o.bs + 4096);
	if (db_tier_open(r, &probe) == 0) {
		json_t *st = json_object();
		struct stat_visitor sv = stats_json_visitor(st);
		disk_stats(probe, &sv);
		nregions = (uint64_t)json_integer_value(json_object_get(st, "regions"));
		json_decref(st);
		disk_close(probe);
	}
	db_drop_file(r->tierpath);
	if (!nregions) {
		disk_cleanup(r, dir);
		return BENCH_EXIT_FAIL;
	}
	r->nblocks = (size_t)(nregions * per_region * 8 / 10);
	if (r->nblocks < r->o.batch)
		r->nblocks = r->o.batch;
	/* --batch blocks to spill, then buffers for DB_ASYNC_DEPTH batches to
	 * load into (the synchronous loads use the first) */
	r->arena_len = (1 + DB_ASYNC_DEPTH) * r->o.batch * r->o.bs;
	r->arena = mmap(NULL, r->arena_len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r->arena == MAP_FAILED) {
		fprintf(stderr, "kvbench disk: no memory for %zu bytes of buffers\n", r->arena_len);
		r->arena = NULL;
		disk_cleanup(r, dir);
		return BENCH_EXIT_FAIL;
	}
	/* transparent huge pages, as the store's arena asks for (arena.c) */
	madvise(r->arena, r->arena_len, MADV_HUGEPAGE);
	memset(r->arena, 0, r->arena_len);
	for (size_t i = 0; i < r->o.batch; i++)
		common_fill(r->arena + i * r->o.bs, r->o.bs, i + 1);
	/* a caller's buffers: plain memory, as an engine's malloc gives */
	r->ubuf = r->arena;
	if (!r->o.huge) {
		if (posix_memalign((void **)&r->ubuf, 4096, r->arena_len)) {
			fprintf(stderr, "kvbench disk: no memory for %zu bytes of buffers\n",
				r->arena_len);
			r->ubuf = NULL;
			munmap(r->arena, r->arena_len);
			r->arena = NULL;
			disk_cleanup(r, dir);
			return BENCH_EXIT_FAIL;
		}
		memcpy(r->ubuf, r->arena, r->arena_len);
	}
	return 0;
}

/*
 * One repetition (left half-way, returning 0, when kvbench is asked to
 * stop), each figure between two passes of its limit over the same file:
 *   new file: fio writes a new file | the tier spills into a new file |
 *             fio writes a new file
 *   the tier's file, written once (untimed), then:
 *   write | spill one put at a time | write | spill put batches |
 *   randread | cold batch load | randread | write
 * Fills x[], before[], after[] and lat. Returns 0 or BENCH_EXIT_FAIL.
 */
static int disk_rep(struct run *r, unsigned rep, double *x, double *before,
		    double *after, struct bench_samples *lat, struct bench_samples *slat,
		    int *bad)
{
	struct disk_tier *d = NULL;
	kvt_store *s;
	char fresh[4096 + 8];

	/* the store: write | kvt_put_batch | randread | cold kvt_get_batch |
	 * randread | cold async batches | randread, write */
	if (db_layout(r))
		return BENCH_EXIT_FAIL;
	before[F_SSPILL] = db_pass(r, r->tierpath, "write");
	if (!(s = db_store_open(r)))
		return BENCH_EXIT_FAIL;
	x[F_SSPILL] = db_store_spill(r, s, 4000 + rep);
	kvt_close(s);
	db_drop_page_cache();
	before[F_SLOAD] = db_pass(r, r->tierpath, "randread");
	if (!(s = db_store_open(r)))
		return BENCH_EXIT_FAIL;
	x[F_SLOAD] = db_store_load(r, s, 4000 + rep, slat, bad);
	kvt_close(s);
	db_drop_page_cache();
	after[F_SLOAD] = before[F_SALOAD] = db_pass(r, r->tierpath, "randread");
	if (!(s = db_store_open(r)))
		return BENCH_EXIT_FAIL;
	x[F_SALOAD] = db_store_load_async(r, s, 4000 + rep, bad);
	kvt_close(s);
	after[F_SALOAD] = db_pass(r, r->tierpath, "randread");
	after[F_SSPILL] = db_pass(r, r->tierpath, "write");

	snprintf(fresh, sizeof(fresh), "%s.new", r->limpath);
	before[F_NEW] = db_pass_new(r, fresh);
	db_drop_file(r->tierpath);
	if (db_tier_open(r, &d))
		return BENCH_EXIT_FAIL;
	x[F_NEW] = spill(r, d, 2000 + rep, 1);
	disk_close(d);
	after[F_NEW] = db_pass_new(r, fresh);
	if (bench_stop_signal())
		return 0;
	if (db_layout(r))
		return BENCH_EXIT_FAIL;
	before[F_ONE] = db_pass(r, r->tierpath, "write");
	if (db_tier_open(r, &d))
		return BENCH_EXIT_FAIL;
	x[F_ONE] = spill(r, d, 1000 + rep, 0);
	disk_close(d);
	after[F_ONE] = before[F_BATCH] = db_pass(r, r->tierpath, "write");
	if (bench_stop_signal())
		return 0;
	if (db_tier_open(r, &d))
		return BENCH_EXIT_FAIL;
	x[F_BATCH] = spill(r, d, rep, 1);
	disk_close(d); /* cold: the next open reads nothing from the page cache */
	before[F_LOAD] = db_pass(r, r->tierpath, "randread");
	if (bench_stop_signal())
		return 0;
	if (db_tier_open(r, &d))
		return BENCH_EXIT_FAIL;
	x[F_LOAD] = load(r, d, rep, lat, bad);
	disk_close(d);
	after[F_LOAD] = db_pass(r, r->tierpath, "randread");
	after[F_BATCH] = db_pass(r, r->tierpath, "write");
	return 0;
}

/* The repetitions (rep 0 warms up and is not counted), until done or
 * stopped; then the reopen times of a full tier. Returns the status. */
static int disk_measure(struct run *r, unsigned reps, struct figures *g)
{
	struct disk_tier *d = NULL;
	int rc = BENCH_EXIT_OK;

	g->v = calloc((5 * NF + 1) * (size_t)reps, sizeof(double));
	if (!g->v)
		return BENCH_EXIT_FAIL;
	g->sorted = g->v + 5 * NF * (size_t)reps;
	for (int f = 0; f < NF; f++) {
		g->fig[f] = g->v + (3 * f) * (size_t)reps;
		g->lim[f] = g->v + (3 * f + 1) * (size_t)reps;
		g->shr[f] = g->v + (3 * f + 2) * (size_t)reps;
		g->pre[f] = g->v + (3 * NF + 2 * f) * (size_t)reps;
		g->post[f] = g->v + (3 * NF + 2 * f + 1) * (size_t)reps;
	}
	for (unsigned rep = 0; rep <= reps && rc == BENCH_EXIT_OK; rep++) {
		double x[NF], before[NF], after[NF];
		struct bench_samples l = { 0 }, sl = { 0 };

		rc = disk_rep(r, rep, x, before, after, &l, &sl, &g->bad);
		if (bench_stop_signal()) { /* a pass cut short: not a figure */
			bench_samples_free(&l);
			bench_samples_free(&sl);
			return rc;
		}
		for (int f = 0; f < NF && rc == BENCH_EXIT_OK; f++)
			if (isnan(x[f]) || (isnan(before[f]) && isnan(after[f]))) {
				fprintf(stderr, "kvbench disk: %s: %s failed\n", fname[f],
					isnan(x[f]) ? "the tier" : "the limit");
				rc = BENCH_EXIT_FAIL;
			}
		if (rep > 0 && rc == BENCH_EXIT_OK) {
			for (int f = 0; f < NF; f++) {
				g->fig[f][rep - 1] = x[f];
				g->pre[f][rep - 1] = before[f];
				g->post[f][rep - 1] = after[f];
				g->lim[f][rep - 1] = db_better(before[f], after[f]);
				g->shr[f][rep - 1] = x[f] / g->lim[f][rep - 1];
			}
			g->done = rep;
			bench_samples_append(&g->lat, &l);
			bench_samples_append(&g->slat, &sl);
		}
		bench_samples_free(&l);
		bench_samples_free(&sl);
	}
	/* a full tier for the reopen times (the last pass overwrote it) */
	if (rc == BENCH_EXIT_OK && db_tier_open(r, &d) == 0) {
		if (isnan(spill(r, d, 3000, 1)))
			rc = BENCH_EXIT_FAIL;
		disk_close(d);
		reopen_times(r, &g->clean_ms, &g->crash_ms, &g->bpb);
	}
	return rc;
}

/* Summarizes a per-repetition series through a copy (bench_summarize()
 * sorts what it is given), so that the JSON's per_rep keeps the order the
 * repetitions ran in. */
static void summarize(struct figures *g, const double *v, struct bench_summary *s)
{
	memcpy(g->sorted, v, g->done * sizeof(*v));
	bench_summarize(g->sorted, g->done, s);
}

/* The table and the notes under it. */
static void disk_print(const struct run *r, struct figures *g)
{
	static const char *const hdr[] = { "figure (median)", "tier", "limit", "share",
					   "share min-max" };
	struct bench_table *t;
	char a[32], b[32], c[32];

	for (int f = 0; f < NF; f++) {
		summarize(g, g->fig[f], &g->sf[f]);
		summarize(g, g->lim[f], &g->sl[f]);
		summarize(g, g->shr[f], &g->ss[f]);
	}
	bench_summarize(g->lat.v, g->lat.n, &g->sla);
	bench_summarize(g->slat.v, g->slat.n, &g->ssla);
	t = bench_table_new(5, hdr);
	for (int f = 0; f < NF; f++)
		row(t, fname[f], &g->sf[f], &g->sl[f], &g->ss[f]);
	bench_table_print(t, stdout, 2);
	bench_table_free(t);
	printf("  limits (bs %llu KiB, qd %lu, %s, one pass over the same file, the better "
	       "of the passes right before and after each figure): write, randread, "
	       "write to a new file\n", (unsigned long long)(r->o.bs >> 10), r->o.qd,
	       r->o.fio ? "fio" : "raw io_uring loop");
	printf("  store: default configuration but ram.capacity %llu MiB (--ram), "
	       "disk.path, disk.capacity, disk.region_size %llu MiB, disk.queue_depth %lu; "
	       "caller buffers from %s; spill counts the bytes on disk when the last "
	       "kvt_put_batch returns; loads after kvt_close and a reopen%s\n",
	       (unsigned long long)(r->o.ram >> 20),
	       (unsigned long long)(r->cfg.region_size >> 20), r->o.qd,
	       r->o.huge ? "transparent huge pages (--huge-buffers)" : "posix_memalign",
	       geteuid() == 0 ? ", page cache dropped" : "");
	printf("  store batch load latency per batch of %lu: p50 %s, p90 %s, p99 %s\n",
	       r->o.batch, NA(a, "%.0f us", g->ssla.median), NA(b, "%.0f us", g->ssla.p90),
	       NA(c, "%.0f us", g->ssla.p99));
	printf("  \"one put at a time\" waits for each block: one block in flight, "
	       "against the limit's %lu\n", r->o.qd);
	printf("  batch load latency per batch of %lu: p50 %s, p90 %s, p99 %s\n",
	       r->o.batch, NA(a, "%.0f us", g->sla.median), NA(b, "%.0f us", g->sla.p90),
	       NA(c, "%.0f us", g->sla.p99));
	printf("  reopen %llu MiB tier: after clean close %s, after kill -9 %s\n",
	       (unsigned long long)(r->o.size >> 20), NA(a, "%.1f ms", g->clean_ms),
	       NA(b, "%.1f ms", g->crash_ms));
	printf("  index bytes per block: %s\n", NA(a, "%.1f", g->bpb));
	if (g->bad)
		printf("  ERROR: %d blocks missing or with wrong bytes\n", g->bad);
}

/* Each counted repetition's figure f and the limit's passes right before
 * and right after it, in the order they ran, so that the shares can be
 * recomputed under another rule. */
static json_t *per_rep(const struct figures *g, int f)
{
	json_t *a = json_array();

	for (unsigned i = 0; i < g->done; i++)
		json_array_append_new(a, json_pack("{s:o,s:o,s:o}", "value",
						   bench_json_real(g->fig[f][i]), "limit_before",
						   bench_json_real(g->pre[f][i]), "limit_after",
						   bench_json_real(g->post[f][i])));
	return a;
}

/* The JSON document. Returns 0 or BENCH_EXIT_FAIL. */
static int disk_json(const struct run *r, const char *dir, unsigned reps,
		     const struct figures *g, const char *path)
{
	json_t *doc = bench_json_new(CMD), *ro;
	int rc = BENCH_EXIT_OK;

	if (!doc)
		return BENCH_EXIT_FAIL;
	bench_json_config(doc, "dir", json_string(dir));
	bench_json_config(doc, "size", json_integer((json_int_t)r->o.size));
	bench_json_config(doc, "block_size", json_integer((json_int_t)r->o.bs));
	bench_json_config(doc, "queue_depth", json_integer((json_int_t)r->o.qd));
	bench_json_config(doc, "batch", json_integer((json_int_t)r->o.batch));
	bench_json_config(doc, "reps", json_integer(reps));
	bench_json_config(doc, "limit_tool", json_string(r->o.fio ? "fio" : "raw io_uring loop"));
	bench_json_config(doc, "store_ram_capacity", json_integer((json_int_t)r->o.ram));
	bench_json_config(doc, "caller_buffers",
			  json_string(r->o.huge ? "transparent huge pages" : "posix_memalign"));
	for (int f = 0; f < NF; f++) {
		json_t *l = json_object();
		char nm[64];

		snprintf(nm, sizeof(nm), "%s %s", r->o.fio ? "fio" : "raw", jlim[f]);
		json_object_set_new(l, "name", json_string(nm));
		json_object_set_new(l, "for", json_string(jname[f]));
		json_object_set_new(l, "value", bench_json_real(g->sl[f].median));
		json_object_set_new(l, "reps", bench_json_reps(&g->sl[f]));
		bench_json_limit(doc, l);
	}
	for (int f = 0; f < NF; f++) {
		json_t *o = jfig(jname[f], &g->sf[f], &g->sl[f], jlim[f], &g->ss[f]);

		json_object_set_new(o, "per_rep", per_rep(g, f));

		if (f == F_LOAD)
			json_object_set_new(o, "batch_latency_us", bench_json_latency(&g->sla));
		if (f == F_SLOAD)
			json_object_set_new(o, "batch_latency_us", bench_json_latency(&g->ssla));
		bench_json_result(doc, o);
	}
	ro = json_object();
	json_object_set_new(ro, "name", json_string("reopen"));
	json_object_set_new(ro, "clean_ms", bench_json_real(g->clean_ms));
	json_object_set_new(ro, "after_kill9_ms", bench_json_real(g->crash_ms));
	json_object_set_new(ro, "index_bytes_per_block", bench_json_real(g->bpb));
	bench_json_result(doc, ro);
	if (g->bad)
		bench_json_error(doc, "%d blocks missing or wrong", g->bad);
	if (bench_json_write(doc, path))
		rc = BENCH_EXIT_FAIL;
	json_decref(doc);
	return rc;
}

int bench_disk_main(int argc, char **argv)
{
	struct run r = { 0 };
	struct figures g = { .clean_ms = NAN, .crash_ms = NAN, .bpb = NAN };
	struct bench_common co;
	char dir[3800];
	int rc = disk_parse(argc, argv, &r.o, &co);

	if (rc >= 0)
		return rc;
	if (r.o.fio && !db_have_fio()) {
		fprintf(stderr, "kvbench disk: fio not found; the limit is a raw io_uring loop\n");
		r.o.fio = 0;
	}
	if ((rc = disk_setup(&r, dir, sizeof(dir))))
		return rc;
	printf("kvbench disk: %s, tier %llu MiB, blocks %llu KiB x %zu, qd %lu, batch %lu, "
	       "limit: %s\n", dir, (unsigned long long)(r.o.size >> 20),
	       (unsigned long long)(r.o.bs >> 10), r.nblocks, r.o.qd, r.o.batch,
	       r.o.fio ? "fio" : "raw io_uring loop");
	fflush(stdout);
	bench_catch_stop(); /* a stop ends the repetitions, and fio, not the report */
	rc = disk_measure(&r, co.reps, &g);
	disk_print(&r, &g);
	if (g.bad)
		rc = BENCH_EXIT_FAIL;
	if (co.json_path && disk_json(&r, dir, co.reps, &g, co.json_path))
		rc = BENCH_EXIT_FAIL;
	free(g.v);
	bench_samples_free(&g.lat);
	bench_samples_free(&g.slat);
	if (r.ubuf != r.arena)
		free(r.ubuf);
	munmap(r.arena, r.arena_len);
	disk_cleanup(&r, dir);
	return bench_finish(CMD, rc);
}
