/*
 * kvtierd.c - a storage node: a small daemon around libkvtier that lends
 * this machine's RAM and NVMe to the other members of a cluster, with no
 * GPU and no inference engine of its own.
 *
 * It opens the store its JSON configuration describes (which must have a
 * "peers" section, a "local" section or both: a node nobody can reach is of
 * no use), prints one line for each place it serves, and then does nothing
 * but wait for signals; the library's peer server thread answers the
 * members, its local server the processes of this machine that attach to
 * local.socket. A disk held by another store (the kvtierd it replaces,
 * still closing) is waited for, up to --busy-wait seconds. SIGINT and
 * SIGTERM close the store (which writes the disk tier's checkpoint) and
 * exit 0; SIGUSR1 prints the statistics; SIGHUP is logged and ignored. It never forks or
 * detaches: run it under systemd or a similar supervisor. See kvtierd(1).
 *
 * Uses only the public header <kvtier.h>, plus jansson to read the member
 * name and address back out of the configuration.
 */
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <jansson.h>
#include <kvtier.h>

#define EXIT_RUNTIME 1 /* the store could not be opened or its config read */
#define EXIT_USAGE 2   /* bad command line, or a config serving nobody */

#define CONFIG_MAX (16u << 20) /* largest configuration read, bytes */

static int log_max = KVT_LOG_WARN;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtierd --config FILE [--stats SECONDS] [--log-level LEVEL]\n"
		"               [--busy-wait SECONDS]\n"
		"       kvtierd --help | --version\n"
		"\n"
		"Serves this machine's RAM and disk tiers to the other members of a\n"
		"libkvtier cluster, or to the processes of this machine that attach\n"
		"to its local socket, until SIGINT or SIGTERM (see kvtierd(1)).\n"
		"\n"
		"  --config FILE      the store's JSON configuration (kvtier-config(5)),\n"
		"                     with a \"peers\" or a \"local\" section, or both;\n"
		"                     - reads standard input\n"
		"  --stats SECONDS    print the statistics as one JSON line on standard\n"
		"                     output every SECONDS (default 0: only on SIGUSR1)\n"
		"  --log-level LEVEL  error, warn (default), info or debug: messages to\n"
		"                     standard error\n"		"  --busy-wait SECONDS\n"
		"                     while another store holds a disk of the\n"
		"                     configuration (an old kvtierd still closing), retry\n"
		"                     for up to SECONDS (default 60; 0: fail at once)\n"
		"  --help             this text\n"
		"  --version          the version of libkvtier it is built with\n");
}

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("kvtierd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'kvtierd --help'.\n", stderr);
	return EXIT_USAGE;
}

static const char *level_name(int level)
{
	if (level <= KVT_LOG_ERR)
		return "error";
	if (level <= KVT_LOG_WARN)
		return "warn";
	if (level <= KVT_LOG_INFO)
		return "info";
	return "debug";
}

/*
 * The log sink, for the library's messages and ours: one line on standard
 * error with a UTC timestamp and the level. A single fprintf, so lines from
 * several threads never interleave; it never calls into the library.
 */
static void log_line(int level, const char *msg, void *arg)
{
	struct timespec ts;
	struct tm tm;
	char when[32] = "";

	(void)arg;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (gmtime_r(&ts.tv_sec, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ldZ %s %s\n", when, ts.tv_nsec / 1000000,
		level_name(level), msg);
}

/* A message of kvtierd's own, through the same sink and level filter. */
__attribute__((format(printf, 2, 3)))
static void say(int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (level > log_max)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_line(level, msg, NULL);
}

/* Reads all of f into a NUL-terminated string; NULL with errno set. */
static char *read_all(FILE *f)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap), *p;

	if (!buf)
		return NULL;
	for (;;) {
		len += fread(buf + len, 1, cap - 1 - len, f);
		if (ferror(f)) {
			free(buf);
			errno = EIO;
			return NULL;
		}
		if (feof(f))
			break;
		if (cap >= CONFIG_MAX) {
			free(buf);
			errno = EFBIG;
			return NULL;
		}
		if (!(p = realloc(buf, cap * 2))) {
			free(buf);
			errno = ENOMEM;
			return NULL;
		}
		buf = p;
		cap *= 2;
	}
	buf[len] = '\0';
	return buf;
}

/* Reads the configuration from path, or standard input for "-". */
static char *read_config(const char *path)
{
	FILE *f;
	char *text;
	int err;

	f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	if (!f)
		return NULL;
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		if (f != stdin)
			fclose(f);
		errno = EISDIR; /* reading one would say only "Input/output error" */
		return NULL;
	}
	text = read_all(f);
	err = errno;
	if (f != stdin)
		fclose(f);
	errno = err;
	return text;
}

/*
 * This node's member name and the address its server listens on, from a
 * configuration kvt_open() accepted: peers.self, and peers.listen or else
 * the address of self's entry in peers.members.
 */
static void serving_where(json_t *peers, const char **name, const char **addr)
{
	json_t *members = json_object_get(peers, "members"), *m;
	size_t i;

	*name = json_string_value(json_object_get(peers, "self"));
	*addr = json_string_value(json_object_get(peers, "listen"));
	if (!*name)
		*name = "?";
	json_array_foreach(members, i, m) {
		const char *n = json_string_value(json_object_get(m, "name"));
		if (!*addr && n && !strcmp(n, *name))
			*addr = json_string_value(json_object_get(m, "addr"));
	}
	if (!*addr)
		*addr = "?";
	if (json_array_size(members) == 1)
		say(KVT_LOG_WARN, "kvtierd: peers.members lists only this node (%s): "
		    "no other member will send it blocks", *name);
}

/* Prints kvt_stats_json() as one line on standard output. */
static void print_stats(kvt_store *s)
{
	size_t cap = 0;
	char *buf = NULL, *p;
	int n;

	/* The document can grow between the sizing call and the real one. */
	for (;;) {
		n = kvt_stats_json(s, buf, cap);
		if (n < 0) {
			say(KVT_LOG_ERR, "kvtierd: kvt_stats_json: %s: %s",
			    kvt_strerror(n), kvt_last_error());
			free(buf);
			return;
		}
		if ((size_t)n < cap)
			break;
		cap = (size_t)n + 256;
		if (!(p = realloc(buf, cap))) {
			say(KVT_LOG_ERR, "kvtierd: statistics: out of memory");
			free(buf);
			return;
		}
		buf = p;
	}
	if (printf("%s\n", buf) < 0 || fflush(stdout) == EOF) {
		say(KVT_LOG_WARN, "kvtierd: writing statistics to standard output: %s",
		    strerror(errno));
		clearerr(stdout);
	}
	free(buf);
}

static const char *signal_name(int sig)
{
	switch (sig) {
	case SIGINT: return "SIGINT";
	case SIGTERM: return "SIGTERM";
	case SIGHUP: return "SIGHUP";
	case SIGUSR1: return "SIGUSR1";
	case SIGALRM: return "SIGALRM";
	}
	return "signal";
}

/* A whole number of seconds from 0 to INT_MAX into *out: 0, or -1. */
static int seconds(const char *arg, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(arg, &end, 10);
	return arg[0] < '0' || arg[0] > '9' || *end || errno || *out > INT_MAX ? -1 : 0;
}

/*
 * kvt_open, retried once a second for up to busy_s seconds while it fails
 * with -EBUSY: a disk of the configuration is held by another store, such
 * as the kvtierd this one replaces, still writing its checkpoint. SIGINT or
 * SIGTERM (blocked here, so taken with sigtimedwait) ends the wait and is
 * returned in *stop; other signals are dropped.
 */
static int open_store(const char *text, long busy_s, const sigset_t *set,
		      kvt_store **s, int *stop)
{
	struct timespec start, now, second = { .tv_sec = 1 };
	int ret, sig;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (int tries = 0;; tries++) {
		ret = kvt_open(text, s);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (ret != -EBUSY || now.tv_sec - start.tv_sec >= busy_s)
			return ret;
		if (tries == 0)
			say(KVT_LOG_WARN, "kvtierd: %s; retrying for up to %ld s",
			    kvt_last_error(), busy_s);
		sig = sigtimedwait(set, NULL, &second);
		if (sig == SIGINT || sig == SIGTERM) {
			*stop = sig;
			return ret;
		}
	}
}

/* The command line. */
struct args {
	const char *config_path;
	long stats_s;   /* --stats: 0, only on SIGUSR1 */
	long busy_s;    /* --busy-wait */
};

/*
 * Reads the command line into *a (and --log-level into log_max). Returns -1
 * when the node should run, else the exit status: 0 after --help or
 * --version, EXIT_USAGE after saying what was wrong.
 */
static int parse_args(int argc, char **argv, struct args *a)
{
	enum { OPT_CONFIG = 256, OPT_STATS, OPT_LOG, OPT_BUSY, OPT_HELP, OPT_VERSION };
	static const struct option opts[] = {
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "stats", required_argument, NULL, OPT_STATS },
		{ "log-level", required_argument, NULL, OPT_LOG },
		{ "busy-wait", required_argument, NULL, OPT_BUSY },
		{ "help", no_argument, NULL, OPT_HELP },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	static const struct { const char *name; int level; } levels[] = {
		{ "error", KVT_LOG_ERR }, { "warn", KVT_LOG_WARN },
		{ "info", KVT_LOG_INFO }, { "debug", KVT_LOG_DEBUG },
	};
	int opt;

	*a = (struct args){ .config_path = NULL, .stats_s = 0, .busy_s = 60 };
	opterr = 0; /* its messages start with argv[0], ours with kvtierd: */
	while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (opt) {
		case OPT_CONFIG:
			a->config_path = optarg;
			break;
		case OPT_STATS:
			if (seconds(optarg, &a->stats_s))
				return usage_error("--stats: \"%s\" is not a whole number "
						   "of seconds from 0 to %d", optarg, INT_MAX);
			break;
		case OPT_BUSY:
			if (seconds(optarg, &a->busy_s))
				return usage_error("--busy-wait: \"%s\" is not a whole number "
						   "of seconds from 0 to %d", optarg, INT_MAX);
			break;
		case OPT_LOG:
			log_max = -1;
			for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
				if (!strcmp(optarg, levels[i].name))
					log_max = levels[i].level;
			if (log_max < 0)
				return usage_error("--log-level: \"%s\" is not error, warn, "
						   "info or debug", optarg);
			break;
		case OPT_HELP:
			usage(stdout);
			return 0;
		case OPT_VERSION:
			printf("kvtierd (libkvtier %s)\n", kvt_version());
			return 0;
		case ':':
			return usage_error("option '%s' requires an argument",
					   argv[optind - 1]);
		default:
			return usage_error("unrecognized option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument \"%s\"", argv[optind]);
	if (!a->config_path)
		return usage_error("--config FILE is required");
	return -1;
}

/*
 * Reads the configuration once (standard input is never read again) into
 * *text and *root, which must be an object with a "peers" or a "local"
 * section (*peers, *local; NULL when absent). Returns 0, or the exit status
 * after saying what was wrong.
 */
static int load_config(const char *path, char **text, json_t **root, json_t **peers,
		       json_t **local)
{
	const char *shown = strcmp(path, "-") ? path : "standard input";
	json_error_t jerr;

	if (!(*text = read_config(path))) {
		fprintf(stderr, "kvtierd: %s: %s\n", shown, strerror(errno));
		return EXIT_RUNTIME;
	}
	if (!(*root = json_loads(*text, 0, &jerr))) {
		fprintf(stderr, "kvtierd: %s: malformed JSON at line %d, column %d: %s\n",
			shown, jerr.line, jerr.column, jerr.text);
		return EXIT_RUNTIME;
	}
	if (!json_is_object(*root)) {
		fprintf(stderr, "kvtierd: %s: the configuration is not a JSON object\n",
			shown);
		return EXIT_RUNTIME;
	}
	*peers = json_object_get(*root, "peers");
	*local = json_object_get(*root, "local");
	if (!*peers && !*local) {
		fprintf(stderr, "kvtierd: %s: no \"peers\" and no \"local\" section: a "
			"store that no member and no local process can reach is of no use "
			"(see kvtier-peer(7) and kvtier(7))\n", shown);
		return EXIT_USAGE;
	}
	return 0;
}

/*
 * Blocks the signals we wait for before the library starts its threads,
 * which inherit the mask: every one of them then reaches sigwait() in
 * serve(), and none interrupts a library thread.
 */
static void block_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGUSR1);
	sigaddset(set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	/* blocked now: back from SIG_IGN, so that sigwait() gets them */
	signal(SIGHUP, SIG_DFL);
	signal(SIGUSR1, SIG_DFL);
	signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the node */
}

/* One line on standard output for each place the node serves. */
static void announce(json_t *peers, json_t *local)
{
	const char *name, *addr;

	if (peers) {
		serving_where(peers, &name, &addr);
		printf("kvtierd: serving as %s on %s\n", name, addr);
		say(KVT_LOG_INFO, "kvtierd: libkvtier %s serving as %s on %s", kvt_version(),
		    name, addr);
	}
	if (local) {
		/* kvt_open() accepted it, so local.socket is a string. */
		const char *path = json_string_value(json_object_get(local, "socket"));
		printf("kvtierd: serving local processes on %s\n", path);
		say(KVT_LOG_INFO, "kvtierd: libkvtier %s serving local processes on %s",
		    kvt_version(), path);
	}
	fflush(stdout);
}

/* With --stats, SIGALRM every stats_s seconds. */
static void start_stats_timer(long stats_s)
{
	struct itimerval it = {
		.it_interval = { .tv_sec = stats_s },
		.it_value = { .tv_sec = stats_s },
	};

	if (stats_s > 0 && setitimer(ITIMER_REAL, &it, NULL))
		say(KVT_LOG_ERR, "kvtierd: setitimer: %s; no periodic statistics",
		    strerror(errno));
}

/*
 * Waits for signals until SIGINT or SIGTERM, which it returns: SIGUSR1 and
 * the --stats timer's SIGALRM print the statistics, SIGHUP is logged.
 */
static int serve(kvt_store *s, const sigset_t *set)
{
	int sig = 0;

	for (;;) {
		if ((errno = sigwait(set, &sig))) {
			say(KVT_LOG_ERR, "kvtierd: sigwait: %s", strerror(errno));
			continue;
		}
		if (sig == SIGINT || sig == SIGTERM)
			break;
		if (sig == SIGHUP)
			say(KVT_LOG_WARN, "kvtierd: SIGHUP ignored: configuration reload is not "
			    "implemented; restart kvtierd to apply a new configuration");
		else
			print_stats(s);
	}
	return sig;
}

int main(int argc, char **argv)
{
	struct args a;
	json_t *root = NULL, *peers = NULL, *local = NULL;
	kvt_store *s = NULL;
	sigset_t set;
	char *text = NULL;
	int sig = 0, ret;

	ret = parse_args(argc, argv, &a);
	if (ret >= 0)
		return ret;
	/* Until the signals are waited for (block_signals), SIGHUP is ignored as
	 * later and SIGUSR1 has no statistics to print: neither may kill the
	 * daemon while it reads its configuration. SIGINT and SIGTERM still
	 * stop it there. */
	signal(SIGHUP, SIG_IGN);
	signal(SIGUSR1, SIG_IGN);
	ret = load_config(a.config_path, &text, &root, &peers, &local);
	if (ret)
		goto out;
	block_signals(&set);
	kvt_set_log(log_line, NULL, log_max);
	ret = open_store(text, a.busy_s, &set, &s, &sig);
	if (ret < 0) {
		/* the library's text names the cause in its own terms;
		 * kvt_strerror() reads codes as the data calls use them
		 * (ENOENT: a miss), which a failed bind is not */
		fprintf(stderr, "kvtierd: cannot open the store: %s%s%s\n",
			*kvt_last_error() ? kvt_last_error() : kvt_strerror(ret),
			sig ? "; stopped by " : "", sig ? signal_name(sig) : "");
		ret = EXIT_RUNTIME;
		goto out;
	}
	announce(peers, local);
	start_stats_timer(a.stats_s);
	sig = serve(s, &set);
	say(KVT_LOG_INFO, "kvtierd: %s: closing the store", signal_name(sig));
	if (a.stats_s > 0)
		setitimer(ITIMER_REAL, &(struct itimerval){ 0 }, NULL);
	kvt_close(s);
	say(KVT_LOG_INFO, "kvtierd: closed");
	ret = 0;
out:
	json_decref(root);
	free(text);
	return ret;
}
