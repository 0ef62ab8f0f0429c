/*
 * replay_config.c - what a replay or sweep run was set up with: as lines
 * on the terminal before it runs (describe), and as the "config" and
 * "published" sections of its JSON document (config_json, add_published),
 * so a result file says how to make it again and what it compares with.
 * The options themselves are replay_cli.c's.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "replay.h"
#include "replay_cli.h"
#include "trace.h"
#include "workload.h"

void describe(FILE *f, const struct cli *c, const struct wl *w)
{
	struct wl_reuse ru;
	uint64_t tok = 0;
	size_t i;
	char speed[32];

	if (c->o.speed > 0)
		snprintf(speed, sizeof(speed), "x%g", c->o.speed);
	else
		snprintf(speed, sizeof(speed), "max");
	for (i = 0; i < w->ncalls; i++)
		tok += w->calls[i].prompt_tokens;
	fprintf(f, "kvbench %s%s%s: %zu calls, %zu sessions, %.1fM prompt tokens (%s)\n", c->cmd,
		c->preset ? " --preset " : "", c->preset ? c->preset : "", w->ncalls, w->nsessions,
		(double)tok / 1e6, c->trace ? c->trace : "generated");
	if (w->kind == WL_TOKENS && !wl_reuse_stats(w, c->fleet_wl ? c->fleet.max_context : 0, &ru)) {
		fprintf(f, "  workload: prompt %.0f tokens mean (%.0f 16-token keys a call), max %llu; answer %.0f mean;\n"
			   "    prompt tokens sent before by the same session %.1f%%, by another %.1f%%, new %.1f%%",
			ru.prompt_mean, ru.keys_per_call, (unsigned long long)ru.max_prompt,
			ru.answer_mean, 100 * ru.same_session, 100 * ru.cross_session, 100 * ru.fresh);
		if (c->fleet_wl)
			fprintf(f, "; %s text, %u rounds of %u steps of %u call(s), %.0f s pause, context %llu (%llu over)",
				c->fleet.role_text ? "role" : "session",
				c->fleet.rounds, c->fleet.round_calls, c->fleet.tool_calls, c->fleet.pause_s,
				(unsigned long long)c->fleet.max_context,
				(unsigned long long)ru.over_context);
		fputc('\n', f);
	}
	fprintf(f, "  engine: %u endpoint(s), GPU cache %llu tokens, prefill %.0f tok/s, schedule %s",
		c->o.endpoints, (unsigned long long)c->o.gpu_tokens, c->o.prefill_rate,
		c->o.sched == SCHED_ACTIVE ? "active" : c->o.sched == SCHED_DISTANCE ? "distance"
										  : "arrival");
	if (c->o.sched == SCHED_ACTIVE)
		fprintf(f, " (%u sessions at once)", c->o.active);
	else if (c->o.sched == SCHED_DISTANCE)
		fprintf(f, " (reuse distance %u, %u in flight)", c->o.reuse_distance,
			c->o.max_inflight);
	if (c->o.nodes > 1)
		fprintf(f, "\n  nodes: %u store nodes, peers over loopback TCP, each with the RAM and disk below",
			c->o.nodes);
	fprintf(f, "\n  store: RAM %llu tokens, disk %llu tokens, lease %llu ms simulated; %s %llu B/token / %u = %llu B per %u-token block; speed %s\n\n",
		(unsigned long long)c->o.ram_tokens, (unsigned long long)c->o.disk_tokens,
		(unsigned long long)c->o.lease_ms, c->o.model,
		(unsigned long long)c->o.kv_bytes_per_token, c->o.scale,
		(unsigned long long)replay_block_bytes(&c->o, w->kind == WL_BLOCKS ? w->block_tokens
										   : c->o.chunk_tokens),
		w->kind == WL_BLOCKS ? w->block_tokens : c->o.chunk_tokens,
		speed);
}

json_t *config_json(const struct cli *c, const struct wl *w)
{
	struct wl_reuse ru;
	json_t *o = json_object();

	json_object_set_new(o, "preset", c->preset ? json_string(c->preset) : json_null());
	json_object_set_new(o, "trace", c->trace ? json_string(c->trace) : json_null());
	json_object_set_new(o, "calls", json_integer((json_int_t)w->ncalls));
	json_object_set_new(o, "sessions", json_integer((json_int_t)w->nsessions));
	if (w->kind == WL_TOKENS && !wl_reuse_stats(w, c->fleet_wl ? c->fleet.max_context : 0, &ru)) {
		json_t *wj = json_object();

		json_object_set_new(wj, "generator", json_string(c->trace ? "trace" : c->fleet_wl ? "fleet" : "controlled"));
		json_object_set_new(wj, "prompt_mean", json_real(ru.prompt_mean));
		json_object_set_new(wj, "keys_per_call", json_real(ru.keys_per_call));
		json_object_set_new(wj, "max_prompt", json_integer((json_int_t)ru.max_prompt));
		json_object_set_new(wj, "answer_mean", json_real(ru.answer_mean));
		json_object_set_new(wj, "same_session_share", json_real(ru.same_session));
		json_object_set_new(wj, "cross_session_share", json_real(ru.cross_session));
		json_object_set_new(wj, "over_context", json_integer((json_int_t)ru.over_context));
		if (c->fleet_wl) {
			json_object_set_new(wj, "max_context", json_integer((json_int_t)c->fleet.max_context));
			json_object_set_new(wj, "fleet_text", json_string(c->fleet.role_text ? "role" : "session"));
			json_object_set_new(wj, "rounds", json_integer(c->fleet.rounds));
			json_object_set_new(wj, "round_calls", json_integer(c->fleet.round_calls));
			json_object_set_new(wj, "pause_s", json_real(c->fleet.pause_s));
			json_object_set_new(wj, "tool_calls", json_integer(c->fleet.tool_calls));
			json_object_set_new(wj, "tool_tokens", json_real(c->fleet.tool_median));
			json_object_set_new(wj, "tool_answer", json_real(c->fleet.tool_answer_median));
			json_object_set_new(wj, "tool_think", json_boolean(c->fleet.tool_think));
		}
		json_object_set_new(o, "workload", wj);
	}
	json_object_set_new(o, "seed", json_integer((json_int_t)c->gen.seed));
	json_object_set_new(o, "seeds", json_integer((json_int_t)c->nseeds));
	json_object_set_new(o, "endpoints", json_integer(c->o.endpoints));
	json_object_set_new(o, "gpu_tokens", json_integer((json_int_t)c->o.gpu_tokens));
	json_object_set_new(o, "gpu_block", json_integer(c->o.gpu_block));
	json_object_set_new(o, "chunk_tokens", json_integer(c->o.chunk_tokens));
	json_object_set_new(o, "schedule", json_string(c->o.sched == SCHED_ACTIVE ? "active"
						       : c->o.sched == SCHED_DISTANCE ? "distance"
										 : "arrival"));
	json_object_set_new(o, "active", json_integer(c->o.active));
	json_object_set_new(o, "reuse_distance", json_integer(c->o.reuse_distance));
	json_object_set_new(o, "max_inflight", json_integer(c->o.max_inflight));
	json_object_set_new(o, "speed", c->o.speed > 0 ? json_real(c->o.speed) : json_string("max"));
	json_object_set_new(o, "prefill_rate", json_real(c->o.prefill_rate));
	json_object_set_new(o, "decode_rate", json_real(c->o.decode_rate));
	json_object_set_new(o, "decode_growth", json_real(c->o.decode_growth));
	json_object_set_new(o, "disaggregated", json_boolean(c->o.disaggregated));
	json_object_set_new(o, "gpu_hold", json_boolean(c->o.gpu_hold));
	json_object_set_new(o, "model", json_string(c->o.model));
	json_object_set_new(o, "kv_bytes_per_token", json_integer((json_int_t)c->o.kv_bytes_per_token));
	json_object_set_new(o, "scale", json_integer(c->o.scale));
	json_object_set_new(o, "ram_tokens", json_integer((json_int_t)c->o.ram_tokens));
	json_object_set_new(o, "disk_tokens", json_integer((json_int_t)c->o.disk_tokens));
	json_object_set_new(o, "lease_ms", json_integer((json_int_t)c->o.lease_ms));
	json_object_set_new(o, "nodes", json_integer(c->o.nodes));
	return o;
}

void add_published(json_t *doc, const char *preset)
{
	const struct replay_ref *r = replay_refs(preset);
	json_t *a = json_array();

	for (; r && r->field; r++) {
		json_t *o = json_object();
		json_object_set_new(o, "field", json_string(r->field));
		json_object_set_new(o, "policy", r->policy ? json_string(r->policy) : json_null());
		json_object_set_new(o, "value", json_real(r->value));
		json_object_set_new(o, "note", json_string(r->note));
		json_array_append_new(a, o);
	}
	bench_json_config(doc, "published", a);
}
