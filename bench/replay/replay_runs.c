/*
 * replay_runs.c - the runs of "kvbench replay" and "kvbench sweep": one
 * per policy (replay) or per value and policy (sweep), each once per
 * generator seed asked for (--seeds); the run shown for a point is that of
 * the seed with the median gross saving, carrying every seed's figures;
 * then the table, the JSON and the CSV.
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
			json_object_set_new(o, "disk_of_saving_by_difference",
					    bench_json_real(replay_disk_by_difference(
						    rs->res, rs->n, rs->xs, i)));
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

/* Keeps run from's seed and figures as seed i of run to. */
static void seed_take(struct replay_result *to, unsigned i, const struct replay_result *from)
{
	to->seeds[i] = from->seed;
	to->seed_fig[SEED_SAVED][i] = from->saved_store;
	to->seed_fig[SEED_UNION][i] = from->saved_store_union;
	to->seed_fig[SEED_DISK][i] = from->disk_of_saving;
}

/* Marks run r as made with the generator's seed (none for a trace). */
static void seed_mark(const struct cli *c, struct replay_result *r)
{
	if (c->trace)
		return;
	r->nseeds = 1;
	r->seed = c->gen.seed;
	seed_take(r, 0, r);
}

/*
 * Folds the runs of nseeds complete seeds (rs->res: seed s's nruns runs at
 * s * nruns, in run_every's order) into nruns: for each point (a value),
 * the seed whose run of the first policy has the median gross saving (the
 * lower of two middles) gives every policy's run shown, which carries every
 * seed's gross saving and disk share. The other runs are freed.
 */
static void seeds_fold(struct runs *rs, size_t nruns, size_t npol, unsigned nseeds)
{
	for (size_t p = 0; p < nruns; p += npol) {
		unsigned order[REPLAY_SEEDS_MAX], i, j;

		for (i = 0; i < nseeds; i++) { /* seeds by the first policy's gross */
			double x = rs->res[i * nruns + p].saved_store;
			for (j = i; j > 0 && rs->res[order[j - 1] * nruns + p].saved_store > x; j--)
				order[j] = order[j - 1];
			order[j] = i;
		}
		unsigned m = order[(nseeds - 1) / 2];
		for (size_t k = p; k < p + npol; k++) {
			struct replay_result *shown = &rs->res[m * nruns + k];
			for (i = 0; i < nseeds; i++)
				seed_take(shown, i, &rs->res[i * nruns + k]);
			shown->nseeds = nseeds;
			if (m) {
				replay_result_free(&rs->res[k]);
				rs->res[k] = *shown;
				memset(shown, 0, sizeof(*shown));
			}
		}
	}
	for (size_t i = nruns; i < (size_t)nseeds * nruns; i++)
		replay_result_free(&rs->res[i]);
	rs->n = nruns;
}

/*
 * The runs of every seed from the first on (the first's workload is w; the
 * others are generated here), into rs one seed after another. Returns how
 * the runs ended; *seeds_done is the seeds whose runs are all complete.
 */
static int run_seeds(struct cli *c, const struct wl *w, int sweep, struct runs *rs,
		     size_t nruns, unsigned *seeds_done)
{
	uint64_t seed0 = c->gen.seed;
	int rc = BENCH_EXIT_OK;

	*seeds_done = 0;
	for (unsigned s = 0; s < c->nseeds && !rc && !bench_stop_signal(); s++) {
		struct wl ws;
		const struct wl *wp = w;
		size_t first = rs->n;

		memset(&ws, 0, sizeof(ws));
		c->gen.seed = c->fleet.seed = seed0 + s;
		if (s > 0) {
			fprintf(stderr, "kvbench %s: seed %llu (%u of %u)\n", c->cmd,
				(unsigned long long)c->gen.seed, s + 1, c->nseeds);
			rc = load_workload(c, &ws);
			wp = &ws;
		}
		if (!rc)
			rc = run_every(c, wp, sweep, rs);
		for (size_t i = first; i < rs->n; i++)
			seed_mark(c, &rs->res[i]);
		if (rs->n - first == nruns && !rs->res[rs->n - 1].interrupted)
			(*seeds_done)++;
		if (s > 0)
			wl_free(&ws);
	}
	c->gen.seed = c->fleet.seed = seed0;
	return rc;
}

/* The runs to show: with two seeds or more complete, one per point (the
 * median seed's); with one, that seed's; before that, those done. */
static void seeds_settle(struct cli *c, struct runs *rs, size_t nruns, unsigned done)
{
	if (c->nseeds > 1 && done < c->nseeds && done > 0)
		fprintf(stderr, "kvbench %s: stopped at seed %u of %u; the %u complete shown\n",
			c->cmd, done + 1, c->nseeds, done);
	if (!done)
		return;
	for (size_t i = (size_t)done * nruns; i < rs->n; i++) /* a seed cut short */
		replay_result_free(&rs->res[i]);
	rs->n = (size_t)done * nruns;
	if (done > 1)
		seeds_fold(rs, nruns, c->npol, done);
}

/* parse -> run -> report: loads the workload, runs every point (once per
 * generator seed), reports them; a stop signal ends the run in progress
 * and keeps what was measured. */
int run_all(struct cli *c, int sweep)
{
	struct runs rs = { 0 };
	struct wl w;
	size_t nruns, i;
	unsigned done = 0;
	int rc;

	memset(&w, 0, sizeof(w));
	bench_catch_stop();
	if (c->trace && c->nseeds > 1)
		return bench_usage_error(c->cmd, "--seeds needs generated sessions, not --trace");
	if (!c->nseeds) /* a sweep compares points: one draw each is not enough */
		c->nseeds = sweep && !c->trace ? 3 : 1;
	rc = load_workload(c, &w);
	if (!rc && sweep)
		rc = sweep_prepare(c);
	if (rc) {
		wl_free(&w);
		return rc;
	}
	nruns = (sweep ? c->nvalues : 1) * c->npol;
	rs.res = calloc(nruns * c->nseeds, sizeof(*rs.res));
	rs.xs = calloc(nruns * c->nseeds, sizeof(*rs.xs));
	if (!rs.res || !rs.xs) {
		fprintf(stderr, "kvbench %s: out of memory\n", c->cmd);
		rc = BENCH_EXIT_FAIL;
	} else {
		describe(stdout, c, &w);
		if (c->nseeds > 1)
			printf("  seeds: every point runs with generator seeds %llu-%llu; each column is the run of the seed whose gross saving (first policy) is the median\n\n",
			       (unsigned long long)c->gen.seed,
			       (unsigned long long)(c->gen.seed + c->nseeds - 1));
		fflush(stdout);
		int ran = run_seeds(c, &w, sweep, &rs, nruns, &done);
		seeds_settle(c, &rs, nruns, done);
		rc = report(c, &w, sweep, &rs, ran);
	}
	for (i = 0; i < rs.n; i++)
		replay_result_free(&rs.res[i]);
	free(rs.res);
	free(rs.xs);
	wl_free(&w);
	return bench_finish(c->cmd, rc);
}
