/*
 * bench.h - what kvbench's subcommands share: the command table entry points,
 * option handling, timing, percentiles, size parsing, the machine-limit
 * probe (memcpy), threads, token ids, aligned tables, JSON results and
 * temporary directories, stop signals and child programs. The helpers
 * live, by concept, in bench/options.c (command line and sizes),
 * measure.c (clock, percentiles, samples, threads, token ids), limit.c
 * (the memcpy limit), report.c (tables, JSON, the store's stats) and
 * system.c (stop requests, children, paths, temporary directories);
 * verifiable block contents, key owners and held ports, which the tests
 * use too, are in common/common.h.
 *
 * kvbench is a user of libkvtier like any other: the commands use only
 * <kvtier.h>, so what they measure is what an engine linking the library
 * gets. Two exceptions reach lib/ internals: disk.c drives the disk tier
 * and device layer directly, and options.c parses sizes with the library's
 * own parser (lib/config.h), so both speak one grammar.
 *
 * Adding a subcommand: write bench/<name>.c with an int <name>_main(int argc,
 * char **argv) entry point (argv[0] is the subcommand's name; return 0 on
 * success, 1 when the run failed, 2 for a usage error), declare it below, and
 * add one line to the command table in bench/kvbench.c.
 */
#ifndef KVBENCH_H
#define KVBENCH_H

#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common.h"
#include "kvtier.h"

/* --- subcommands ---------------------------------------------------------- */

/* One entry of kvbench's command table (bench/kvbench.c). */
struct bench_cmd {
	const char *name;                  /* as typed: "kvbench <name>" */
	int (*fn)(int argc, char **argv);  /* argv[0] is name */
	const char *help;                  /* one line for "kvbench --help" */
};

/* Subcommand entry points, one per line; keep in the table's order. */
int bench_demo_main(int argc, char **argv);   /* demo.c: also "kvbench" alone */
int bench_ram_main(int argc, char **argv);    /* ram.c */
int bench_hash_main(int argc, char **argv);   /* hash.c */
int bench_attach_main(int argc, char **argv); /* attach.c */
int bench_disk_main(int argc, char **argv);   /* disk.c */
int bench_peer_main(int argc, char **argv);   /* peer.c */
int bench_replay_main(int argc, char **argv); /* replay_cli.c */
int bench_sweep_main(int argc, char **argv);  /* replay_cli.c */
int bench_plot_main(int argc, char **argv);   /* plot.c */

/* Exit statuses of a subcommand (and of kvbench). */
#define BENCH_EXIT_OK 0
#define BENCH_EXIT_FAIL 1  /* the run failed: store error, wrong bytes, I/O */
#define BENCH_EXIT_USAGE 2 /* bad command line */

/* --- options ---------------------------------------------------------------- */

/*
 * Options every subcommand takes. Put BENCH_COMMON_LONGOPTS in the
 * subcommand's struct option array (before the terminating zero entry), pass
 * each getopt_long() result to bench_common_option(), and start parsing with
 * bench_getopt_begin(). "--help" maps to 'h'.
 */
struct bench_common {
	const char *json_path; /* --json FILE: where to write results, or NULL */
	unsigned reps;         /* --reps N: timed repetitions (median reported) */
};

enum { BENCH_OPT_JSON = 0x100, BENCH_OPT_REPS, BENCH_OPT_FIRST_FREE = 0x180 };

#define BENCH_COMMON_LONGOPTS                                        \
	{ "json", required_argument, NULL, BENCH_OPT_JSON },         \
	{ "reps", required_argument, NULL, BENCH_OPT_REPS },         \
	{ "help", no_argument, NULL, 'h' }

/* Default --reps: the method (kvbench(1), MEASUREMENT) takes the median of at
 * least five repetitions. */
#define BENCH_DEFAULT_REPS 5u

/* Resets getopt's state (so a process may parse several argv) and turns off
 * getopt's own messages; call before the getopt_long() loop. */
void bench_getopt_begin(void);

/* Sets the defaults: no JSON file, BENCH_DEFAULT_REPS repetitions. */
void bench_common_init(struct bench_common *co);

/*
 * Handles one getopt_long() result c (with optarg arg) for the common
 * options. Returns 1 when c was a common option with a valid value, 0 when c
 * is not a common option (the caller handles it), -1 after printing a
 * one-line error to stderr (the caller returns BENCH_EXIT_USAGE): a bad
 * value, an unknown option ('?') or a missing argument (':'; start the
 * optstring with ':'). argv is getopt's argv, used to name an unknown
 * option. 'h' is left to the caller, which prints its usage to stdout and
 * returns 0.
 *
 * --json FILE is checked here, before any work: a directory, a missing
 * directory or one that cannot be written is an error. --json - sends the
 * JSON document to standard output and, from then on, everything else that
 * the command prints there (tables, progress) to standard error
 * (bench_json_stdout_only()), so that standard output parses as JSON.
 */
int bench_common_option(const char *cmd, int c, const char *arg, char **argv,
			struct bench_common *co);

/*
 * Prints "kvbench CMD: <message>" and "Try 'kvbench CMD --help'." to stderr
 * (CMD "" for kvbench itself) and returns BENCH_EXIT_USAGE, for:
 * return bench_usage_error(...).
 */
int bench_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Parses an unsigned decimal integer in [min, max]. Returns 0, -EINVAL (not
 * a plain decimal number) or -ERANGE (outside [min, max]); prints nothing.
 */
int bench_parse_uint(const char *s, unsigned long min, unsigned long max,
		     unsigned long *out);

/*
 * Parses a comma-separated list of unsigned integers in [min, max] ("1,2,4")
 * into out[0..max_n). Sets *n. Returns 0, -EINVAL (empty item, non-number),
 * -ERANGE (out of range) or -E2BIG (more than max_n items); prints nothing.
 */
int bench_parse_uint_list(const char *s, unsigned long min, unsigned long max,
			  unsigned long *out, size_t max_n, size_t *n);

/* Whether the comma-separated list s has an empty item ("", ",", "1,",
 * ",1", "1,,2"), which the list parsers refuse: for the message that says
 * so, since a list's other errors name a bad item. */
int bench_list_has_empty(const char *s);

/* --- sizes -------------------------------------------------------------------- */

/*
 * Parses a size in the library's own grammar, with the library's parser (the
 * one behind sizes in kvtier-config(5)): bytes, or a number with an optional
 * fraction and a unit B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (powers of
 * 1024, case-insensitive, with or without a space); a fraction needs a unit.
 * Returns 0 or -EINVAL, with the reason in kvt_last_error().
 */
int bench_parse_size(const char *s, uint64_t *out);

/*
 * The value of size option opt ("--size") for command cmd, in [min, max].
 * Returns 0, or BENCH_EXIT_USAGE after a one-line error naming the option
 * and the reason (bench_usage_error()).
 */
int bench_size_arg(const char *cmd, const char *opt, const char *arg,
		   uint64_t min, uint64_t max, uint64_t *out);

/* A comma-separated list of sizes ("64KiB,1MiB"), each > 0. Returns 0,
 * -EINVAL as bench_parse_size (the reason in kvt_last_error()), -ERANGE for
 * a zero, or -E2BIG beyond max_n items. */
int bench_parse_size_list(const char *s, uint64_t *out, size_t max_n,
			  size_t *n);

/*
 * Formats bytes with the largest binary unit that divides it exactly
 * ("64KiB", "1MiB", "1536KiB", "100B"). Returns buf.
 */
const char *bench_fmt_size(uint64_t bytes, char *buf, size_t cap);

/* --- time and statistics --------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* Sorts v[0..n) ascending in place. */
void bench_sort(double *v, size_t n);

/*
 * Percentile p in [0, 100] of sorted v[0..n), by linear interpolation between
 * the closest ranks (rank = p/100 * (n-1), as numpy's default and R's type
 * 7): p = 0 is the minimum, 100 the maximum, 50 the median (the mean of the
 * two middle values when n is even). Returns NAN for n == 0; p outside
 * [0, 100] is clamped.
 */
double bench_percentile_sorted(const double *v, size_t n, double p);

/* Sorts v in place, then as bench_percentile_sorted(). */
double bench_percentile(double *v, size_t n, double p);

/* Median of v[0..n) (sorts v in place); NAN for n == 0. */
double bench_median(double *v, size_t n);

/* Summary of a sample: n, min, max, mean, median, p90, p99. */
struct bench_summary {
	size_t n;
	double min, max, mean, median, p90, p99;
};

/* Fills *s from v[0..n) (sorting v in place). All fields NAN (n 0) for an
 * empty sample. */
void bench_summarize(double *v, size_t n, struct bench_summary *s);

/*
 * A growable array of doubles (latency samples). bench_samples_add() returns
 * 0 or -ENOMEM (the sample is then dropped and counted in lost).
 */
struct bench_samples {
	double *v;
	size_t n, cap;
	size_t lost;
};
int bench_samples_add(struct bench_samples *s, double x);
/* Appends all of src to dst. Returns 0 or -ENOMEM. */
int bench_samples_append(struct bench_samples *dst,
			 const struct bench_samples *src);
/* Room for want samples in all. Returns 0 or -ENOMEM. */
int bench_samples_reserve(struct bench_samples *s, size_t want);
void bench_samples_clear(struct bench_samples *s); /* n = 0, keeps memory */
void bench_samples_free(struct bench_samples *s);

/* --- threads ---------------------------------------------------------------- */

/* Online CPUs (at least 1). */
unsigned bench_ncpus(void);

/* Pins the calling thread to cpu (modulo the online CPUs). Returns 0 or a
 * negative errno (the thread then stays unpinned). */
int bench_pin_cpu(unsigned cpu);

/* cpu's place in a sysfs CPU list ("0,8", "2-3", "0-1,16-17"): how many
 * CPUs the list names before it; 0 where it is not named or the list
 * cannot be parsed. */
unsigned bench_cpu_list_rank(const char *list, int cpu);

/* Cores among the CPUs the process may run on (their first hardware
 * threads; the CPUs where the topology cannot be read). */
unsigned bench_ncores(void);

typedef void (*bench_thread_fn)(unsigned tid, unsigned nthreads, void *arg);

/*
 * Runs fn(tid, nthreads, arg) on nthreads new threads, tid 0..nthreads-1,
 * all released together once every thread exists; with pin non-zero,
 * thread tid is pinned to one of the CPUs the process may run on, in an
 * order that gives threads one hardware thread of each core before any
 * core's second (sysfs topology; CPU number order where it cannot be
 * read), so that n threads run on n cores wherever there are n. Sets *wall_ns (may be NULL) to the
 * time from the release to the end of the last thread. Returns 0, or a
 * negative errno when threads could not be started (none then runs).
 */
int bench_parallel(unsigned nthreads, int pin, bench_thread_fn fn, void *arg,
		   uint64_t *wall_ns);

/* --- the machine's limit: memcpy ------------------------------------------- */

/*
 * The memcpy limit a RAM-tier figure is divided by (kvbench(1), MEASUREMENT): copies
 * of block bytes from a source region like the RAM arena (mmap'd, anonymous,
 * prefaulted by writing, mlock'd when allowed) into malloc'd, prefaulted
 * destination buffers, on the same number of threads as the figure.
 *
 * Access order, which a store benchmark should mirror: thread t of T makes
 * copies k = 0, 1, ... of source block (t + k*T) mod (src_bytes / block) into
 * its destination buffer k mod ndst. Each copy is timed (as a store
 * operation would be), so per-copy latencies are available too.
 */
struct bench_memcpy;

/*
 * A destination buffer of the kind the memcpy limit copies into: from the
 * heap (posix_memalign, page aligned), prefaulted by writing. Benchmarks that
 * compare against the limit should load into these. NULL with errno set on
 * failure; free with free().
 */
void *bench_buffer_alloc(size_t len);

/* Allocates and prefaults the buffers: src_bytes rounded down to whole
 * blocks (at least one), max_dst destination blocks per thread. Returns
 * NULL with errno set on failure (EINVAL for a zero argument). */
struct bench_memcpy *bench_memcpy_new(size_t block, size_t src_bytes,
				      unsigned max_dst, unsigned threads);

/*
 * Makes ops_per_thread copies on each thread (threads pinned as by
 * bench_parallel), cycling through ndst (1..max_dst) destination blocks.
 * Sets *bytes_per_s to the bytes of all threads divided by the wall time.
 * When lat is non-NULL, every copy's latency in microseconds is appended to
 * it. Returns 0 or a negative errno.
 */
int bench_memcpy_run(struct bench_memcpy *m, uint64_t ops_per_thread,
		     unsigned ndst, double *bytes_per_s,
		     struct bench_samples *lat);

/*
 * The other direction, the limit for puts: the same copies, but from the
 * caller's region "from" (whole blocks; block i of it for region block i
 * mod its block count) into the arena-like region, block by block in the
 * order above. Both sides then stream through memory that is not in the
 * cache, as a put from an engine's buffers into the arena does. Returns 0 or
 * a negative errno.
 */
int bench_memcpy_run_into(struct bench_memcpy *m, const void *from,
			  size_t from_bytes, uint64_t ops_per_thread,
			  double *bytes_per_s, struct bench_samples *lat);

void bench_memcpy_free(struct bench_memcpy *m);

/* One-shot: a warm-up run, then reps runs of ops_per_thread copies; returns
 * the median bytes/s, or a negative errno. */
double bench_memcpy_limit(size_t block, size_t src_bytes, unsigned ndst,
			  unsigned threads, uint64_t ops_per_thread,
			  unsigned reps);

/* --- token ids ---------------------------------------------------------------- */

/* Fills tokens[0..n) with pseudo-random token ids below vocab (> 0). */
void bench_tokens(uint32_t *tokens, size_t n, uint32_t vocab, uint64_t seed);

/* --- aligned tables --------------------------------------------------------- */

/*
 * A table printed with aligned columns: the first column left-aligned, the
 * others right-aligned, a header line and a rule under it. Cells are added
 * left to right; bench_table_end_row() closes a row. Memory failures make
 * the table print "(out of memory)" rather than crash.
 */
struct bench_table;

struct bench_table *bench_table_new(unsigned ncols, const char *const *headers);
void bench_table_cell(struct bench_table *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void bench_table_end_row(struct bench_table *t);
/* Prints the table to f, each line prefixed by indent spaces. */
void bench_table_print(const struct bench_table *t, FILE *f, unsigned indent);
void bench_table_free(struct bench_table *t);

/* --- JSON results ------------------------------------------------------------- */

/*
 * The version of the results document's schema: the "schema_version" of
 * every document, raised when a field changes meaning or goes (fields may be
 * added without a change). kvbench(1) documents each version's fields.
 */
#define BENCH_JSON_SCHEMA 1

/*
 * A results document, the same shape for every subcommand:
 *   { "schema_version": BENCH_JSON_SCHEMA, "tool": "kvbench",
 *     "command": CMD, "library_version": "...", "started": "ISO 8601 UTC",
 *     "machine": { "cpus", "cpu_model", "kernel", "mem_bytes" },
 *     "config": { ... }, "limits": [ ... ], "results": [ ... ],
 *     "errors": [ "..." ], "interrupted": null or "SIGINT" ... }
 * "config" holds the options of the run, "limits" the machine limits measured
 * in the run (each an object with at least "name" and "value"), "results"
 * one object per measured figure, "errors" anything that went wrong (a
 * verification failure, a missing tier), "interrupted" the stop signal that
 * cut the run short (its results are then partial). Returns NULL on
 * allocation failure.
 */
json_t *bench_json_new(const char *cmd);

/* Sets config[key] = value (steals the reference). Returns 0 or -ENOMEM. */
int bench_json_config(json_t *doc, const char *key, json_t *value);

/* Appends an object to doc's "limits" / "results" (steals the reference).
 * Returns 0, -EINVAL (obj not an object) or -ENOMEM. */
int bench_json_limit(json_t *doc, json_t *obj);
int bench_json_result(json_t *doc, json_t *obj);

/* Appends a printf-formatted message to doc's "errors". */
void bench_json_error(json_t *doc, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* {"median", "min", "max", "n"} of a per-repetition sample (NAN as null). */
json_t *bench_json_reps(const struct bench_summary *s);

/* {"p50", "p90", "p99", "max", "n"} of a latency sample (NAN as null). */
json_t *bench_json_latency(const struct bench_summary *s);

/*
 * v through fmt (one double conversion, such as "%.2f GB/s"), or "n/a" for
 * NAN and infinities, a figure not measured (a run stopped before it): the
 * tables' word for the JSON's null. Returns buf.
 */
const char *bench_fmt_real(char *buf, size_t cap, const char *fmt, double v);

/* A number, or null for NAN and infinities (JSON has no NaN). */
json_t *bench_json_real(double x);

/*
 * Writes doc to path (indented, with a final newline) as bench_out_open()
 * does: through a temporary file renamed into place, so a reader never sees
 * half a document, or straight into a device or FIFO; sets
 * "interrupted" first when the run was stopped. path "-" writes to standard
 * output (the one set aside by bench_json_stdout_only()). Returns 0, or a
 * negative errno after printing a message naming the path to stderr.
 */
int bench_json_write(json_t *doc, const char *path);

/*
 * For --json - (and replay's --csv -): keeps standard output for the
 * results document alone and points file descriptor 1 (printf, children)
 * at standard error from now on. Safe to call twice.
 */
void bench_json_stdout_only(void);

/* The file descriptor of standard output as it was before
 * bench_json_stdout_only(), where a result for "-" goes. */
int bench_result_stdout(void);

/* --- the store's statistics ---------------------------------------------------- */

/* Fetches kvt_stats_json(s) parsed by jansson; NULL (message on stderr) on
 * failure. */
json_t *bench_store_stats(kvt_store *s);

/*
 * Looks a number up in a stats document by a dotted path ("ram.hits"),
 * also trying it under a "tiers" object ("tiers.ram.hits"). Returns 0 with
 * *out set, or -ENOENT when absent or not a number. Integers and reals both
 * count.
 */
int bench_stats_number(const json_t *stats, const char *path, double *out);

/* --- the system: stop requests, children, paths (system.c) ------------------------ */

/*
 * Says that the calling command finishes on its own when asked to stop: the
 * first SIGINT, SIGTERM or SIGHUP is then only noted (and stops a child
 * program at once); the command checks bench_stop_signal() between steps,
 * reports what it measured and ends with bench_finish(). A second signal,
 * or one before this call, ends kvbench (removing its temporary
 * directories).
 */
void bench_catch_stop(void);

/* The stop signal received since bench_catch_stop(), or 0. */
int bench_stop_signal(void);

/*
 * What a command returns at its end: rc when it was not stopped; else,
 * after the line "kvbench CMD: interrupted by SIGxxx; the results are those
 * measured before it" on stderr, 128 + the signal (as a shell reports it).
 */
int bench_finish(const char *cmd, int rc);

/*
 * Runs /bin/sh -c cmd as system() does, but in a process group of its own
 * that a stop signal to kvbench stops too (SIGTERM), and that is stopped
 * should kvbench die. Returns the wait status, or -1.
 */
int bench_system(const char *cmd);

/*
 * Checks, before any work, that a result can be written to path the way
 * bench_out_open() writes it: not a directory; a device or FIFO that may be
 * written; else (through any symbolic links) in a directory that exists and
 * can be written. Returns 0, or a negative errno with the reason in why.
 */
int bench_output_check(const char *path, char *why, size_t cap);

/*
 * A result file being written (bench_json_write(), --csv). A reader must
 * never see half a document, so a regular file (or a new one) is written
 * as a temporary file beside it, mode 0644, renamed over it at the end. A
 * symbolic link is kept: its final target is what gets replaced. A device
 * or FIFO (/dev/null, /dev/stdout as a pipe) cannot be replaced by a file
 * without breaking it, so it is opened and written directly.
 */
struct bench_out {
	int fd;		  /* write here; -1 once closed */
	const char *path; /* as the user gave it, for messages */
	char *dest;	  /* path with its links followed */
	char *tmp;	  /* the temporary file, or NULL when written in place */
};

/* Opens path for a result. Returns 0, or a negative errno after a message
 * naming path on stderr (o then needs no bench_out_close()). */
int bench_out_open(const char *path, struct bench_out *o);

/*
 * Ends the write of o: err is the caller's write error (a negative errno)
 * or 0. On success the temporary file is renamed into place; on failure it
 * is removed and a message naming the path goes to stderr. The caller may
 * have closed o->fd itself (fclose of an fdopen) and set it to -1. Returns
 * 0 or the first error.
 */
int bench_out_close(struct bench_out *o, int err);

/* Checks that path is a directory kvbench can create files in. Returns 0,
 * or a negative errno with the reason in why. */
int bench_dir_check(const char *path, char *why, size_t cap);

/* --- temporary directories ---------------------------------------------------- */

/*
 * Creates a fresh private directory (mkdtemp, mode 0700) named
 * kvbench-XXXXXX under /var/tmp, or /tmp when /var/tmp is not writable, and
 * writes its path to buf (cap at least 24 bytes, else -ENAMETOOLONG). The
 * directory is registered for removal, with everything in it, at exit and
 * on SIGINT, SIGTERM and SIGHUP, unless removed earlier with
 * bench_tmpdir_remove(); at most 8 are registered at once (-EMFILE). Returns
 * 0 or a negative errno (message on stderr).
 */
int bench_tmpdir_create(char *buf, size_t cap);

/* Removes path and everything under it (files, subdirectories; symlinks are
 * removed, not followed) and unregisters it. Returns 0 or a negative errno
 * (the first failure; removal goes on past it). */
int bench_tmpdir_remove(const char *path);

#endif
