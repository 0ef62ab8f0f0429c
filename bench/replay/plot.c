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
#define GROSS_COL ((size_t)NSHARES + 2) /* saved_store, the sixth series */
#define NSERIES (sizeof(series) / sizeof(series[0]))
#define LABEL_COL "15" /* x, the NSERIES (9) series, study low and high, the
			    seeds' lowest and highest gross, label */

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

/* The command line. */
struct plot_opts {
	struct bench_common co;
	const char *in, *out, *ext, *title;
};

/* The results to draw. */
struct plot_data {
	json_t *doc, *results;
	size_t n;
	int sweep, logx;
	const char *param; /* the swept parameter, or NULL */
};

/* Parses the command line into o. Returns -1 to run, else the exit status. */
static int plot_parse(int argc, char **argv, struct plot_opts *o)
{
	struct stat st;
	char why[256];
	int ch, rc;

	*o = (struct plot_opts){ 0 };
	bench_common_init(&o->co);
	bench_getopt_begin();
	while ((ch = getopt_long(argc, argv, ":h", plot_opts, NULL)) != -1) {
		rc = bench_common_option("plot", ch, optarg, argv, &o->co);
		if (rc < 0)
			return BENCH_EXIT_USAGE;
		if (rc > 0)
			continue;
		switch (ch) {
		case 'h':
			fputs(usage_plot, stdout);
			return BENCH_EXIT_OK;
		case P_OUT:
			o->out = optarg;
			break;
		case P_TITLE:
			o->title = optarg;
			break;
		default:
			return bench_usage_error("plot", "unexpected option");
		}
	}
	if (optind + 1 != argc)
		return bench_usage_error("plot", "give exactly one JSON file");
	o->in = argv[optind];
	if (stat(o->in, &st) == 0 && S_ISDIR(st.st_mode))
		return bench_usage_error("plot", "%s is a directory, not a JSON file", o->in);
	if (!o->out)
		return bench_usage_error("plot", "--out is required");
	o->ext = strrchr(o->out, '.');
	if (!o->ext || (strcmp(o->ext, ".png") && strcmp(o->ext, ".svg")))
		return bench_usage_error("plot", "--out must end in .png or .svg");
	if (bench_output_check(o->out, why, sizeof(why)))
		return bench_usage_error("plot", "--out %s: %s", o->out, why);
	return -1;
}

/* Loads and checks the replay or sweep results. Returns 0 or -1. */
static int plot_load(const char *in, struct plot_data *d)
{
	double xmin = INFINITY, xmax = -INFINITY;
	json_error_t je;
	json_t *r;
	size_t i;

	*d = (struct plot_data){ 0 };
	d->doc = json_load_file(in, 0, &je);
	if (!d->doc) {
		fprintf(stderr, "kvbench plot: %s:%d: %s\n", in, je.line, je.text);
		return -1;
	}
	d->results = json_object_get(d->doc, "results");
	d->n = json_array_size(d->results);
	if (!json_is_array(d->results) || d->n == 0) {
		fprintf(stderr, "kvbench plot: %s has no \"results\" of a replay or sweep\n", in);
		return -1;
	}
	for (i = 0; i < d->n; i++) {
		r = json_array_get(d->results, i);
		if (!json_is_object(r) || isnan(num(r, "gpu_share"))) {
			fprintf(stderr, "kvbench plot: %s: result %zu is not a replay result\n", in, i);
			return -1;
		}
		if (json_is_string(json_object_get(r, "sweep_param"))) {
			double x = num(r, "sweep_value");

			d->sweep = 1;
			d->param = json_string_value(json_object_get(r, "sweep_param"));
			if (x < xmin)
				xmin = x;
			if (x > xmax)
				xmax = x;
		}
	}
	d->logx = d->sweep && xmin > 0 && xmax / xmin >= 20;
	return 0;
}

/* The data block: x, the series, the study's range, the seeds' range of
 * the gross saving, the label. Returns whether any run has the study's
 * range (bit 0) and whether any has the seeds' (bit 1). */
static int plot_data_block(FILE *gp, const struct plot_data *d)
{
	int have_study = 0;
	size_t i, k;

	fprintf(gp, "$d << EOD\n");
	for (i = 0; i < d->n; i++) {
		json_t *r = json_array_get(d->results, i), *st = json_object_get(r, "study");
		const char *label = json_string_value(json_object_get(r, "label"));

		fprintf(gp, "%.17g", d->sweep ? num(r, "sweep_value") : (double)i);
		for (k = 0; k < NSERIES + 4; k++) {
			/* then the study's range, where a width sweep has one,
			 * and the seeds' (--seeds) */
			double v = k < NSERIES ? num(r, series[k].field)
				   : k == NSERIES + 2 ? num(r, "saved_store_seeds_min")
				   : k == NSERIES + 3 ? num(r, "saved_store_seeds_max")
				   : json_is_object(st) ? num(st, k == NSERIES ? "saved_store_lo"
									       : "saved_store_hi")
							: NAN;
			if (k >= NSERIES && !isnan(v))
				have_study |= k < NSERIES + 2 ? 1 : 2;
			fprintf(gp, " %s", isnan(v) ? "NaN" : "");
			if (!isnan(v))
				fprintf(gp, "%.6g", v);
		}
		fputc(' ', gp);
		gp_quote(gp, label ? label : "?");
		fputc('\n', gp);
	}
	fprintf(gp, "EOD\n");
	return have_study;
}

/* The whole gnuplot script: terminal, output, data, the two plots. */
static void plot_script(FILE *gp, const struct plot_opts *o, const struct plot_data *d)
{
	const char *xtic = d->sweep ? "" : ":xtic(" LABEL_COL ")";
	int have_study;
	size_t k;

	if (!strcmp(o->ext, ".png"))
		fprintf(gp, "set terminal pngcairo size 1000,800 noenhanced\n");
	else
		fprintf(gp, "set terminal svg size 1000,800 noenhanced\n");
	fprintf(gp, "set output ");
	gp_quote(gp, o->out);
	fprintf(gp, "\n");
	have_study = plot_data_block(gp, d);
	fprintf(gp, "set datafile missing 'NaN'\nset grid\nset key outside right top\n"
		    "set multiplot layout 2,1 title ");
	gp_quote(gp, o->title ? o->title : o->in);
	fprintf(gp, "\n");
	if (d->logx)
		fprintf(gp, "set logscale x\n");
	if (d->sweep) {
		fprintf(gp, "set xlabel ");
		gp_quote(gp, d->param ? d->param : "value");
		fprintf(gp, "\n");
	} else {
		fprintf(gp, "set xrange [-0.5:%zu.5]\nset xtics rotate by -20\n", d->n - 1);
	}
	/* columns: x, the series, study low, study high, label */
	fprintf(gp, "set ylabel 'share of prompt tokens (%%)'\nset yrange [0:100]\nplot ");
	for (k = 0; k < NSHARES; k++)
		fprintf(gp, "%s$d using 1:%zu%s with linespoints lw 2 pt 7 title '%s'",
			k ? ", " : "", k + 2, xtic, series[k].title);
	fprintf(gp, "\nset ylabel 'endpoint busy time saved by the store (%%)'\nset yrange [*:*]\n"
		    "plot ");
	for (k = NSHARES; k < NSERIES; k++)
		fprintf(gp, "%s$d using 1:%zu%s with linespoints lw 2 pt 7 title '%s'",
			k > NSHARES ? ", " : "", k + 2, xtic, series[k].title);
	if (have_study & 2) /* the gross saving's column is saved_store's */
		fprintf(gp, ", $d using 1:%zu:%zu:%zu with yerrorbars lc rgb 'gray40' lw 1 pt 0 "
			    "title 'gross, seeds (lowest-highest)'",
			GROSS_COL, NSERIES + 4, NSERIES + 5);
	if (have_study & 1)
		fprintf(gp, ", $d using 1:(($%zu+$%zu)/2):%zu:%zu with yerrorbars lc rgb 'black' lw 2 pt 5 "
			    "title 'agent-fleet study (range)'",
			NSERIES + 2, NSERIES + 3, NSERIES + 2, NSERIES + 3);
	fprintf(gp, "\nunset multiplot\n");
}

/* Runs gnuplot on the script. Returns 0, or -1 after saying why. */
static int plot_draw(const struct plot_opts *o, const struct plot_data *d)
{
	struct sigaction sa, old;
	struct stat st;
	FILE *gp;
	int rc;

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
		return -1;
	}
	plot_script(gp, o, d);
	rc = pclose(gp);
	sigaction(SIGPIPE, &old, NULL);
	if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
		fprintf(stderr, "kvbench plot: gnuplot failed (is it installed?)\n");
		return -1;
	}
	if (stat(o->out, &st) || st.st_size == 0) {
		fprintf(stderr, "kvbench plot: gnuplot wrote nothing to %s\n", o->out);
		return -1;
	}
	return 0;
}

/* What was written, and the JSON result. Returns the exit status. */
static int plot_report(const struct plot_opts *o, size_t n)
{
	json_t *res;
	int rc;

	printf("kvbench plot: wrote %s (%zu runs)\n", o->out, n);
	if (!o->co.json_path)
		return BENCH_EXIT_OK;
	res = bench_json_new("plot");
	bench_json_config(res, "input", json_string(o->in));
	bench_json_result(res, json_pack("{s:s, s:s, s:s, s:I}", "name", "plot", "file",
					 o->out, "format", o->ext + 1, "runs", (json_int_t)n));
	rc = bench_json_write(res, o->co.json_path);
	json_decref(res);
	return rc ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
}

int bench_plot_main(int argc, char **argv)
{
	struct plot_opts o;
	struct plot_data d;
	int rc = plot_parse(argc, argv, &o);

	if (rc >= 0)
		return rc;
	if (plot_load(o.in, &d) || plot_draw(&o, &d))
		rc = BENCH_EXIT_FAIL;
	else
		rc = plot_report(&o, d.n);
	json_decref(d.doc);
	return rc;
}
