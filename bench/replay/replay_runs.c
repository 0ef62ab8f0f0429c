/*
 * replay_runs.c - the runs of "kvbench replay" and "kvbench sweep": one
 * per policy (replay) or per value and policy (sweep); then the table, the
 * JSON and the CSV.
 *
 * Knows nothing about the options (replay_cli.c), how a run works inside
 * (replay.c) or how the report is laid out (replay_report.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay_cli.h"

/* The runs of a replay (one per policy) or a sweep (one per value and
 * policy) and what they measured. */
struct runs {
	struct replay_result *res;
	double *xs;   /* a sweep's value of each run */
	size_t n;     /* runs done (the last may have been stopped) */
	char err[1024];
};

/* Runs value i (a sweep) with policy k into rs->res[rs->n]. Returns 0 or
 * BENCH_EXIT_FAIL (the reason in rs->err). */
static int run_one(struct cli *c, const struct wl *w, int sweep, size_t i, size_t k,
		   struct runs *rs)
{
	struct replay_opts o = c->o;
	struct replay_result *res = &rs->res[rs->n];
	struct wl wr = *w; /* a view: fewer sessions for narrow fleets */
	char label[96] = "";
	int r;

	o.policy = c->pol[k];
	o.stop = bench_stop_signal;
	if (sweep) {
		set_param(&o, c->over, c->values[i]);
		if (c->npol > 1)
			snprintf(label, sizeof(label), "%s=%.15g %s", c->over, c->values[i],
				 replay_policy_name[o.policy]);
		else
			snprintf(label, sizeof(label), "%s=%.15g", c->over, c->values[i]);
		o.label = label;
		rs->xs[rs->n] = c->values[i];
	}
	if (c->per_width && !c->trace)
		wl_truncate_sessions(&wr, o.active * 4 > 16 ? o.active * 4 : 16);
	fprintf(stderr, "kvbench %s: running %s%s%s (%zu calls) ...\n", c->cmd,
		replay_policy_name[o.policy], sweep ? " at " : "", label, wr.ncalls);
	r = replay_run(&o, &wr, res, rs->err, sizeof(rs->err));
	if (r) {
		fprintf(stderr, "kvbench %s: policy %s: %s\n", c->cmd, replay_policy_name[o.policy],
			rs->err);
		return BENCH_EXIT_FAIL;
	}
	if (res->interrupted) /* what it replayed before the stop, marked */
		snprintf(res->label + strnlen(res->label, sizeof(res->label) - 12),
			 12, " (stopped)");
	rs->n++;
	return 0;
}

/* Every run in turn, until one fails or a stop signal comes. */
static int run_every(struct cli *c, const struct wl *w, int sweep, struct runs *rs)
{
	size_t i, k;
	int rc;

	for (i = 0; i < (sweep ? c->nvalues : 1); i++)
		for (k = 0; k < c->npol; k++) {
			if (bench_stop_signal())
				return BENCH_EXIT_OK;
			rc = run_one(c, w, sweep, i, k, rs);
			if (rc)
				return rc;
		}
	return BENCH_EXIT_OK;
}

/* The JSON document of the runs done (rc: how the runs ended). Returns rc
 * or BENCH_EXIT_FAIL when it cannot be written. */
static int write_json(struct cli *c, const struct wl *w, int sweep, const struct runs *rs,
		      int rc)
{
	json_t *doc = bench_json_new(c->cmd);
	size_t i;

	if (!doc)
		return BENCH_EXIT_FAIL;
	bench_json_config(doc, "replay", config_json(c, w));
	if (sweep)
		bench_json_config(doc, "sweep_param", json_string(c->over));
	add_published(doc, c->preset);
	for (i = 0; i < rs->n; i++) {
		json_t *o = replay_result_json(&rs->res[i]);
		if (sweep) {
			json_object_set_new(o, "sweep_param", json_string(c->over));
			json_object_set_new(o, "sweep_value", json_real(rs->xs[i]));
			if (!strcmp(c->over, "width"))
				replay_study_json(o, rs->xs[i]);
		}
		bench_json_result(doc, o);
	}
	if (rc)
		bench_json_error(doc, "%s", rs->err);
	if (bench_json_write(doc, c->co.json_path))
		rc = BENCH_EXIT_FAIL;
	json_decref(doc);
	return rc;
}

/* Prints and writes what the runs measured. */
static int report(struct cli *c, const struct wl *w, int sweep, const struct runs *rs, int rc)
{
	if (rs->n)
		replay_print(stdout, rs->res, rs->n, sweep ? NULL : c->preset,
			     sweep ? c->over : NULL, sweep ? rs->xs : NULL);
	if (c->co.json_path)
		rc = write_json(c, w, sweep, rs, rc);
	if (c->csv && rs->n &&
	    replay_write_csv(c->csv, rs->res, rs->n, sweep ? c->over : NULL,
			     sweep ? rs->xs : NULL))
		rc = BENCH_EXIT_FAIL;
	return rc;
}

/* parse -> run -> report: loads the workload, runs every point, reports
 * them; a stop signal ends the run in progress and keeps what was measured. */
int run_all(struct cli *c, int sweep)
{
	struct runs rs = { 0 };
	struct wl w;
	size_t nruns, i;
	int rc;

	memset(&w, 0, sizeof(w));
	bench_catch_stop();
	rc = load_workload(c, &w);
	if (!rc && sweep)
		rc = sweep_prepare(c);
	if (rc) {
		wl_free(&w);
		return rc;
	}
	nruns = (sweep ? c->nvalues : 1) * c->npol;
	rs.res = calloc(nruns, sizeof(*rs.res));
	rs.xs = calloc(nruns, sizeof(*rs.xs));
	if (!rs.res || !rs.xs) {
		fprintf(stderr, "kvbench %s: out of memory\n", c->cmd);
		rc = BENCH_EXIT_FAIL;
	} else {
		describe(stdout, c, &w);
		fflush(stdout);
		rc = report(c, &w, sweep, &rs, run_every(c, &w, sweep, &rs));
	}
	for (i = 0; i < rs.n; i++)
		replay_result_free(&rs.res[i]);
	free(rs.res);
	free(rs.xs);
	wl_free(&w);
	return bench_finish(c->cmd, rc);
}

