/*
 * bench.h - what kvbench's subcommands share: the command table entry points,
 * timing, percentiles, the machine-limit probes and JSON results.
 * Each subcommand lives in bench/<name>.c and is listed in kvbench.c.
 */
#ifndef KVBENCH_H
#define KVBENCH_H

#include <stddef.h>
#include <stdint.h>

/* Subcommand entry points: argv[0] is the subcommand's name. */
int bench_demo_main(int argc, char **argv);
int bench_ram_main(int argc, char **argv);
int bench_hash_main(int argc, char **argv);

#endif
