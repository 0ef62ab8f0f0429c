/*
 * test_stats.c - latency histograms: quantiles within one bucket (12.5%)
 * of the exact value, edge values, JSON rendering; counters reported
 * through a stat_visitor and rendered as the statistics document.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "stats.h"

static struct hist h; /* large: keep it off the stack */

static void test_quantiles_within_a_bucket(void **state)
{
	(void)state;
	memset(&h, 0, sizeof(h));
	for (uint64_t v = 1; v <= 100000; v++)
		hist_record(&h, v * 10);
	double qs[] = { 0.5, 0.9, 0.99, 0.999 };
	for (size_t i = 0; i < 4; i++) {
		double exact = qs[i] * 1000000.0;
		double got = (double)hist_quantile(&h, qs[i]);
		assert_true(got >= exact * 0.999);
		assert_true(got <= exact * 1.126);
	}
	assert_int_equal(hist_quantile(&h, 1.0), 1000000);
	assert_int_equal(hist_quantile(&h, 0.0), 10);
}

static void test_empty_and_extreme_values(void **state)
{
	(void)state;
	memset(&h, 0, sizeof(h));
	assert_int_equal(hist_quantile(&h, 0.5), 0);
	hist_record(&h, 0);
	hist_record(&h, UINT64_MAX);
	assert_int_equal(hist_quantile(&h, 0.5), 0);
	assert_int_equal(hist_quantile(&h, 1.0), UINT64_MAX);
	hist_record(&h, 7);
	assert_int_equal(hist_quantile(&h, 0.5), 7);
}

static void test_json_has_percentiles(void **state)
{
	(void)state;
	memset(&h, 0, sizeof(h));
	hist_record(&h, 2000);
	hist_record(&h, 4000);
	json_t *o = hist_json_us(&h);
	assert_int_equal(json_integer_value(json_object_get(o, "count")), 2);
	assert_true(json_real_value(json_object_get(o, "mean_us")) == 3.0);
	assert_true(json_real_value(json_object_get(o, "max_us")) == 4.0);
	assert_non_null(json_object_get(o, "p999_us"));
	json_decref(o);
}

static void report(const struct stat_visitor *v)
{
	stat_int(v, "big", INT64_MAX);
	stat_int(v, "negative", -1);
	stat_real(v, "ratio", 0.25);
	stat_bool(v, "flag", 7);
	stat_hist(v, "latency", &h);
}

static void test_visitor_renders_every_kind(void **state)
{
	char buf[1024], small[8];

	(void)state;
	memset(&h, 0, sizeof(h));
	hist_record(&h, 2000);
	struct stats_doc *d = stats_doc_new("9.9.9");
	assert_non_null(d);
	struct stat_visitor v = stats_doc_section(d, "tier");
	report(&v);
	int n = stats_doc_render(d, buf, sizeof(buf));
	assert_true(n > 0 && (size_t)n < sizeof(buf));
	assert_int_equal((size_t)n, strlen(buf));

	json_t *o = json_loads(buf, 0, NULL);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "version")), "9.9.9");
	json_t *t = json_object_get(o, "tier");
	assert_true(json_is_integer(json_object_get(t, "big")));
	assert_true(json_integer_value(json_object_get(t, "big")) == INT64_MAX);
	assert_int_equal(json_integer_value(json_object_get(t, "negative")), -1);
	assert_true(json_real_value(json_object_get(t, "ratio")) == 0.25);
	assert_true(json_is_true(json_object_get(t, "flag")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(t, "latency"),
							   "count")), 1);
	json_decref(o);

	/* like snprintf: cut to the buffer, the full length returned */
	d = stats_doc_new("9.9.9");
	v = stats_doc_section(d, "tier");
	report(&v);
	assert_int_equal(stats_doc_render(d, small, sizeof(small)), n);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, buf, sizeof(small) - 1);
}

static void count_emit(void *arg, const char *name, struct stat_val v)
{
	(void)name;
	(void)v;
	++*(int *)arg;
}

/* Sections and lists nest; a string is copied; a visitor without nest
 * drops what is reported under a nested one and keeps its own counters. */
static void test_visitor_nests_sections_and_lists(void **state)
{
	char buf[1024], name[8] = "first";

	(void)state;
	struct stats_doc *d = stats_doc_new("1");
	struct stat_visitor v = stats_doc_section(d, "tier");
	struct stat_visitor l = stat_nest(&v, "members", 1);
	for (int i = 0; i < 3; i++) {
		struct stat_visitor o = stat_nest(&l, NULL, 0);
		stat_str(&o, "name", name);
		stat_int(&o, "i", i);
		struct stat_visitor in = stat_nest(&o, "inner", 0);
		stat_bool(&in, "deep", i == 2);
		name[0] = 'F'; /* the renderer copied the earlier ones */
	}
	stat_int(&l, NULL, 42);
	stat_int(&v, "after", 7);
	assert_true(stats_doc_render(d, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "{\"tier\":{\"after\":7,\"members\":["
			    "{\"i\":0,\"inner\":{\"deep\":false},\"name\":\"first\"},"
			    "{\"i\":1,\"inner\":{\"deep\":false},\"name\":\"First\"},"
			    "{\"i\":2,\"inner\":{\"deep\":true},\"name\":\"First\"},42]},"
			    "\"version\":\"1\"}");

	int count = 0;
	struct stat_visitor flat = { .emit = count_emit, .arg = &count };
	struct stat_visitor n = stat_nest(&flat, "members", 1);
	stat_int(&n, NULL, 1);
	struct stat_visitor n2 = stat_nest(&n, NULL, 0);
	stat_str(&n2, "name", "x");
	stat_int(&flat, "kept", 1);
	assert_int_equal(count, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quantiles_within_a_bucket),
		cmocka_unit_test(test_empty_and_extreme_values),
		cmocka_unit_test(test_json_has_percentiles),
		cmocka_unit_test(test_visitor_renders_every_kind),
		cmocka_unit_test(test_visitor_nests_sections_and_lists),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
