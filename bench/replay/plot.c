/*
 * plot.c - "kvbench plot": draws the results of a replay or sweep JSON file
 * (kvbench replay/sweep --json) with gnuplot: hit shares per tier and the
 * endpoint busy time saved (gross, net of both load charges, the disk
 * tier's part, and the agent-fleet study's figures where a width sweep has
 * them) against the swept parameter (fleet width, reuse distance, store
 * capacity, decode growth), or per run when nothing was swept.
 *
 * Knows only the JSON results document (field names of replay_report.c);
 * nothing about the store or how runs are made.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <jansson.h>

#include "bench.h"

static const char usage_plot[] =
	"usage: kvbench plot FILE.json --out PLOT.png|PLOT.svg [--title TEXT]\n"
	"\n"
	"Draws hit shares (GPU cache, RAM, disk, all store tiers, recomputed) and the\n"
	"endpoint busy time the store saved (gross, net of the load charged divided by\n"
	"the calls in flight and in full, the disk tier's part; the study's range under\n"
	"a width sweep) from a kvbench replay or sweep JSON file, against the swept\n"
	"parameter (or per run). Needs gnuplot. The format follows --out.\n";

enum { P_OUT = BENCH_OPT_FIRST_FREE, P_TITLE };

static const struct option plot_opts[] = {
	{ "out", required_argument, NULL, P_OUT },
	{ "title", required_argument, NULL, P_TITLE },
	BENCH_COMMON_LONGOPTS,
	{ NULL, 0, NULL, 0 }
};

static const struct {
	const char *field, *title;
} series[] = {
	{ "gpu_share", "GPU cache" },
	{ "ram_share", "RAM tier" },
	{ "disk_share", "disk tier" },
	{ "store_share", "store, all tiers" },
	{ "recomputed_share", "recomputed" },
	{ "saved_store", "gross" },
	{ "saved_store_net_div", "net, load / calls in flight" },
	{ "saved_store_net", "net, full load charge" },
	{ "saved_disk", "disk tier, part of gross" },
};
#define NSHARES 5 /* the first five are shares of prompt tokens */
#define NSERIES (sizeof(series) / sizeof(series[0]))
#define LABEL_COL "13" /* x, the NSERIES (9) series, study low and high, label */

static double num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Writes s with gnuplot's double-quote escapes. */
static void gp_quote(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if (*s == '\n')
			continue;
		fputc(*s, f);
	}
	fputc('"', f);
}

int bench_plot_main(int argc, char **argv)
{
	struct bench_common co;
	const char *out = NULL, *title = NULL, *in = NULL, *ext, *param = NULL;
	json_error_t je;
	json_t *doc, *results, *r;
	FILE *gp;
	size_t i, k, n;
	int ch, rc, sweep = 0, logx = 0, have_study = 0;
	double xmin = INFINITY, xmax = -INFINITY;
	struct sigaction sa, old;
	struct stat st;
	char why[256];

	bench_common_init(&co);
	bench_getopt_begin();
	while ((ch = getopt_long(argc, argv, ":h", plot_opts, NULL)) != -1) {
		rc = bench_common_option("plot", ch, optarg, argv, &co);
		if (rc < 0)
			return BENCH_EXIT_USAGE;
		if (rc > 0)
			continue;
		switch (ch) {
		case 'h':
			fputs(usage_plot, stdout);
			return BENCH_EXIT_OK;
		case P_OUT:
			out = optarg;
			break;
		case P_TITLE:
			title = optarg;
			break;
		default:
			return bench_usage_error("plot", "unexpected option");
		}
	}
	if (optind + 1 != argc)
		return bench_usage_error("plot", "give exactly one JSON file");
	in = argv[optind];
	if (stat(in, &st) == 0 && S_ISDIR(st.st_mode))
		return bench_usage_error("plot", "%s is a directory, not a JSON file", in);
	if (!out)
		return bench_usage_error("plot", "--out is required");
	ext = strrchr(out, '.');
	if (!ext || (strcmp(ext, ".png") && strcmp(ext, ".svg")))
		return bench_usage_error("plot", "--out must end in .png or .svg");
	if (bench_output_check(out, why, sizeof(why)))
		return bench_usage_error("plot", "--out %s: %s", out, why);

	doc = json_load_file(in, 0, &je);
	if (!doc) {
		fprintf(stderr, "kvbench plot: %s:%d: %s\n", in, je.line, je.text);
		return BENCH_EXIT_FAIL;
	}
	results = json_object_get(doc, "results");
	n = json_array_size(results);
	if (!json_is_array(results) || n == 0) {
		fprintf(stderr, "kvbench plot: %s has no \"results\" of a replay or sweep\n", in);
		json_decref(doc);
		return BENCH_EXIT_FAIL;
	}
	for (i = 0; i < n; i++) {
		r = json_array_get(results, i);
		if (!json_is_object(r) || isnan(num(r, "gpu_share"))) {
			fprintf(stderr, "kvbench plot: %s: result %zu is not a replay result\n", in, i);
			json_decref(doc);
			return BENCH_EXIT_FAIL;
		}
		if (json_is_string(json_object_get(r, "sweep_param"))) {
			double x = num(r, "sweep_value");
			sweep = 1;
			param = json_string_value(json_object_get(r, "sweep_param"));
			if (x < xmin)
				xmin = x;
			if (x > xmax)
				xmax = x;
		}
	}
	if (sweep && xmin > 0 && xmax / xmin >= 20)
		logx = 1;

	/* gnuplot runs as a child; a missing gnuplot shows as a failed close */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, &old);
	/* gnuplot's standard output is not ours: should "set output" fail, it
	 * would write the image there */
	gp = popen("exec gnuplot >/dev/null", "w");
	if (!gp) {
		fprintf(stderr, "kvbench plot: cannot run gnuplot: %s\n", strerror(errno));
		sigaction(SIGPIPE, &old, NULL);
		json_decref(doc);
		return BENCH_EXIT_FAIL;
	}
	if (!strcmp(ext, ".png"))
		fprintf(gp, "set terminal pngcairo size 1000,800 noenhanced\n");
	else
		fprintf(gp, "set terminal svg size 1000,800 noenhanced\n");
	fprintf(gp, "set output ");
	gp_quote(gp, out);
	fprintf(gp, "\n$d << EOD\n");
	for (i = 0; i < n; i++) {
		r = json_array_get(results, i);
		fprintf(gp, "%.17g", sweep ? num(r, "sweep_value") : (double)i);
		for (k = 0; k < NSERIES + 2; k++) {
			/* then the study's range, where a width sweep has one */
			json_t *st = json_object_get(r, "study");
			double v = k < NSERIES ? num(r, series[k].field)
				   : json_is_object(st) ? num(st, k == NSERIES ? "saved_store_lo"
									       : "saved_store_hi")
							: NAN;
			if (k >= NSERIES && !isnan(v))
				have_study = 1;
			fprintf(gp, " %s", isnan(v) ? "NaN" : "");
			if (!isnan(v))
				fprintf(gp, "%.6g", v);
		}
		fputc(' ', gp);
		gp_quote(gp, json_string_value(json_object_get(r, "label")) ?
				     json_string_value(json_object_get(r, "label")) : "?");
		fputc('\n', gp);
	}
	fprintf(gp, "EOD\n");
	fprintf(gp, "set datafile missing 'NaN'\nset grid\nset key outside right top\n"
		    "set multiplot layout 2,1 title ");
	gp_quote(gp, title ? title : in);
	fprintf(gp, "\n");
	if (logx)
		fprintf(gp, "set logscale x\n");
	if (sweep) {
		fprintf(gp, "set xlabel ");
		gp_quote(gp, param ? param : "value");
		fprintf(gp, "\n");
	} else {
		fprintf(gp, "set xrange [-0.5:%zu.5]\nset xtics rotate by -20\n", n - 1);
	}
	/* columns: x, the series, study low, study high, label */
	fprintf(gp, "set ylabel 'share of prompt tokens (%%)'\nset yrange [0:100]\nplot ");
	for (k = 0; k < NSHARES; k++)
		fprintf(gp, "%s$d using 1:%zu%s with linespoints lw 2 pt 7 title '%s'",
			k ? ", " : "", k + 2, sweep ? "" : ":xtic(" LABEL_COL ")", series[k].title);
	fprintf(gp, "\nset ylabel 'endpoint busy time saved by the store (%%)'\nset yrange [*:*]\n"
		    "plot ");
	for (k = NSHARES; k < NSERIES; k++)
		fprintf(gp, "%s$d using 1:%zu%s with linespoints lw 2 pt 7 title '%s'",
			k > NSHARES ? ", " : "", k + 2, sweep ? "" : ":xtic(" LABEL_COL ")",
			series[k].title);
	if (have_study)
		fprintf(gp, ", $d using 1:(($%zu+$%zu)/2):%zu:%zu with yerrorbars lc rgb 'black' lw 2 pt 5 "
			    "title 'agent-fleet study (range)'",
			NSERIES + 2, NSERIES + 3, NSERIES + 2, NSERIES + 3);
	fprintf(gp, "\nunset multiplot\n");
	rc = pclose(gp);
	sigaction(SIGPIPE, &old, NULL);
	json_decref(doc);
	if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
		fprintf(stderr, "kvbench plot: gnuplot failed (is it installed?)\n");
		return BENCH_EXIT_FAIL;
	}
	if (stat(out, &st) || st.st_size == 0) {
		fprintf(stderr, "kvbench plot: gnuplot wrote nothing to %s\n", out);
		return BENCH_EXIT_FAIL;
	}
	printf("kvbench plot: wrote %s (%zu runs)\n", out, n);
	if (co.json_path) {
		json_t *res = bench_json_new("plot");

		bench_json_config(res, "input", json_string(in));
		bench_json_result(res, json_pack("{s:s, s:s, s:s, s:I}", "name", "plot",
						 "file", out, "format", ext + 1, "runs",
						 (json_int_t)n));
		rc = bench_json_write(res, co.json_path);
		json_decref(res);
		if (rc)
			return BENCH_EXIT_FAIL;
	}
	return BENCH_EXIT_OK;
}
