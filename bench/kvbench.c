/*
 * kvbench.c - kvbench's main(): the command table and the dispatch to a
 * subcommand. "kvbench" alone (or with options only) runs the demo.
 * Knows nothing about what a subcommand measures; each lives in its own
 * bench/<name>.c and is declared in bench.h.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* One line per subcommand: name, entry point, help. */
static const struct bench_cmd commands[] = {
	{ "demo", bench_demo_main, "a short tour of the store on a RAM and a disk tier (the default)" },
	{ "ram", bench_ram_main, "RAM tier: put, get, batch get, lookup; gets as a share of memcpy" },
	{ "attach", bench_attach_main, "a process attached to a node store: gets and lookups beside an in-process store" },
	{ "hash", bench_hash_main, "chained-prefix hashing in tokens/s and namespace roots/s on one core" },
	{ "disk", bench_disk_main, "NVMe tier: spill and cold batch load as a share of fio, reopen times" },
	{ "peer", bench_peer_main, "peer tier over TCP: loads from a peer as a share of a TCP stream, lookups" },
	{ "replay", bench_replay_main, "agent sessions or a trace through GPU caches and the store: hit shares, time saved" },
	{ "sweep", bench_sweep_main, "replays over fleet width, store capacity or another parameter" },
	{ "plot", bench_plot_main, "draws a replay or sweep JSON file with gnuplot (PNG or SVG)" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	size_t i, w = 0;

	fprintf(f, "usage: kvbench [COMMAND] [OPTIONS]\n"
		   "       kvbench COMMAND --help\n\n"
		   "Benchmarks libkvtier %s; each speed is printed beside the machine's\n"
		   "limit measured in the same run. Without a command, runs the demo.\n\n"
		   "commands:\n",
		kvt_version());
	for (i = 0; i < NCOMMANDS; i++)
		if (strlen(commands[i].name) > w)
			w = strlen(commands[i].name);
	for (i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-*s  %s\n", (int)w, commands[i].name, commands[i].help);
	fprintf(f, "\noptions of every command:\n"
		   "  --json FILE  also write the results as JSON to FILE (\"-\": stdout)\n"
		   "  --reps N     timed repetitions; medians are reported (default %u)\n"
		   "  --help       the command's own options\n\n"
		   "kvbench --version prints the library's version.\n"
		   "See kvbench(1).\n",
		BENCH_DEFAULT_REPS);
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc < 2 || argv[1][0] == '-') {
		if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			usage(stdout);
			return BENCH_EXIT_OK;
		}
		if (argc >= 2 && !strcmp(argv[1], "--version")) {
			printf("kvbench (libkvtier %s)\n", kvt_version());
			return BENCH_EXIT_OK;
		}
		/* "kvbench" or "kvbench --json FILE ...": the demo, whose
		 * errors then name kvbench (argv[0] ""), not "kvbench demo". */
		argv[0] = (char *)"";
		return bench_demo_main(argc, argv);
	}
	if (!strcmp(argv[1], "help")) {
		usage(stdout);
		return BENCH_EXIT_OK;
	}
	for (i = 0; i < NCOMMANDS; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	return bench_usage_error("", "unknown command '%s'", argv[1]);
}
