/*
 * fuzz_config.c - libFuzzer target for the configuration parser (lib/config.c):
 * config_parse() on the input as JSON text and parse_size() on the input as a
 * size string. Neither may crash or leak; every config it accepts must satisfy
 * the documented ranges and cross-checks, and must parse back to the same
 * values once written out as JSON with every key explicit.
 *
 * Knows only config.h and kvt_last_error(); nothing about how the store uses
 * the values. Built by `make fuzz` (clang, -fsanitize=fuzzer) and replayed
 * over tests/fuzz/corpus/config by tests/test_fuzz_corpus.c (which renames
 * LLVMFuzzerTestOneInput before including this file).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "kvtier.h"

#define CFG_MiB (1ull << 20)
#define CFG_GiB (1ull << 30)

/* Prints what broke and aborts, so the fuzzer keeps the input. */
#define CFG_CHECK(cond, ...)                                                  \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "fuzz_config: invariant broken: %s: ", \
				#cond);                                       \
			fprintf(stderr, __VA_ARGS__);                         \
			fputc('\n', stderr);                                  \
			abort();                                              \
		}                                                             \
	} while (0)

/* The ranges and cross-checks of kvtier-config(5) on an accepted config. */
static void cfg_check_invariants(const struct kvt_config *c)
{
	CFG_CHECK(c->ram_capacity >= CFG_MiB, "ram_capacity %" PRIu64, c->ram_capacity);
	CFG_CHECK(c->lease_ms >= 1 && c->lease_ms <= 3600000u, "lease_ms %u", c->lease_ms);
	CFG_CHECK(c->lease_cap > 0 && c->lease_cap <= 1, "lease_cap %g", c->lease_cap);
	CFG_CHECK(c->high_watermark > 0 && c->high_watermark <= 1, "high %g",
		  c->high_watermark);
	CFG_CHECK(c->low_watermark > 0 && c->low_watermark < 1, "low %g", c->low_watermark);
	CFG_CHECK(c->low_watermark < c->high_watermark, "low %g high %g",
		  c->low_watermark, c->high_watermark);
	CFG_CHECK(c->hugepages >= KVT_OFF && c->hugepages <= KVT_REQUIRE, "%d",
		  (int)c->hugepages);
	CFG_CHECK(c->mlock >= KVT_OFF && c->mlock <= KVT_REQUIRE, "%d", (int)c->mlock);
	CFG_CHECK(c->numa_node >= -1 && c->numa_node <= 1023, "%d", c->numa_node);
	CFG_CHECK(c->refuse_when_leased == 0 || c->refuse_when_leased == 1, "%d",
		  c->refuse_when_leased);
	CFG_CHECK(c->threads >= 1 && c->threads <= 64, "threads %u", c->threads);
	CFG_CHECK(c->write_policy == KVT_WRITE_ON_EVICT ||
		  c->write_policy == KVT_WRITE_THROUGH, "%d", (int)c->write_policy);
	CFG_CHECK(c->promote == 0 || c->promote == 1, "%d", c->promote);
	CFG_CHECK(c->max_block >= 4096, "max_block %" PRIu64, c->max_block);
	CFG_CHECK(c->max_block <= c->ram_capacity, "max_block %" PRIu64 " ram %" PRIu64,
		  c->max_block, c->ram_capacity);
	CFG_CHECK((c->ndisk == 0) == (c->disk_paths == NULL), "ndisk %u paths %p",
		  c->ndisk, (void *)c->disk_paths);
	CFG_CHECK(c->ndisk <= 64, "ndisk %u", c->ndisk);
	if (!c->ndisk)
		return;
	CFG_CHECK(c->region_size >= CFG_MiB && c->region_size <= 4 * CFG_GiB &&
		  c->region_size % 4096 == 0, "region_size %" PRIu64, c->region_size);
	CFG_CHECK(c->disk_capacity / 2 >= c->region_size, "capacity %" PRIu64
		  " region %" PRIu64, c->disk_capacity, c->region_size);
	CFG_CHECK(c->queue_depth >= 1 && c->queue_depth <= 4096, "qd %u", c->queue_depth);
	CFG_CHECK(c->max_block <= c->region_size - 4096, "max_block %" PRIu64
		  " region %" PRIu64, c->max_block, c->region_size);
	for (unsigned i = 0; i < c->ndisk; i++) {
		CFG_CHECK(c->disk_paths[i] != NULL, "path %u", i);
		size_t len = strlen(c->disk_paths[i]);
		CFG_CHECK(len > 0 && len < PATH_MAX, "path %u of %zu bytes", i, len);
		for (unsigned j = 0; j < i; j++)
			CFG_CHECK(strcmp(c->disk_paths[i], c->disk_paths[j]) != 0,
				  "paths %u and %u equal", j, i);
	}
}

static json_t *cfg_size_json(uint64_t v)
{
	char s[32];

	snprintf(s, sizeof(s), "%" PRIu64, v); /* a string: above INT64_MAX too */
	return json_string(s);
}

static json_t *cfg_tri_json(enum kvt_tri t)
{
	return t == KVT_TRY ? json_string("try") : json_boolean(t == KVT_REQUIRE);
}

/* The config as a document naming every key, or NULL on out of memory. */
static char *cfg_to_json(const struct kvt_config *c)
{
	json_t *root = json_object(), *ram = json_object();
	char *text = NULL;

	if (!root || !ram)
		goto out;
	json_object_set_new(ram, "capacity", cfg_size_json(c->ram_capacity));
	json_object_set_new(ram, "lease_ms", json_integer(c->lease_ms));
	json_object_set_new(ram, "lease_cap", json_real(c->lease_cap));
	json_object_set_new(ram, "high_watermark", json_real(c->high_watermark));
	json_object_set_new(ram, "low_watermark", json_real(c->low_watermark));
	json_object_set_new(ram, "hugepages", cfg_tri_json(c->hugepages));
	json_object_set_new(ram, "mlock", cfg_tri_json(c->mlock));
	json_object_set_new(ram, "numa_node", json_integer(c->numa_node));
	json_object_set_new(ram, "max_block", cfg_size_json(c->max_block));
	json_object_set_new(ram, "refuse_when_leased", json_boolean(c->refuse_when_leased));
	json_object_set_new(root, "ram", ram);
	ram = NULL;
	json_object_set_new(root, "threads", json_integer(c->threads));
	if (c->ndisk) {
		json_t *disk = json_object(), *paths = json_array();
		if (!disk || !paths) {
			json_decref(disk);
			json_decref(paths);
			goto out;
		}
		for (unsigned i = 0; i < c->ndisk; i++)
			json_array_append_new(paths, json_string(c->disk_paths[i]));
		json_object_set_new(disk, "path", paths);
		json_object_set_new(disk, "capacity", cfg_size_json(c->disk_capacity));
		json_object_set_new(disk, "region_size", cfg_size_json(c->region_size));
		json_object_set_new(disk, "queue_depth", json_integer(c->queue_depth));
		json_object_set_new(disk, "write_policy",
				    json_string(c->write_policy == KVT_WRITE_THROUGH ?
						"write_through" : "on_evict"));
		json_object_set_new(disk, "promote", json_boolean(c->promote));
		json_object_set_new(root, "disk", disk);
	}
	text = json_dumps(root, JSON_REAL_PRECISION(17));
out:
	json_decref(ram);
	json_decref(root);
	return text;
}

/* Every field of a and b is equal (paths by content). */
static void cfg_check_same(const struct kvt_config *a, const struct kvt_config *b,
			   const char *text)
{
	CFG_CHECK(a->ram_capacity == b->ram_capacity && a->lease_ms == b->lease_ms &&
		  a->lease_cap == b->lease_cap && a->high_watermark == b->high_watermark &&
		  a->low_watermark == b->low_watermark && a->hugepages == b->hugepages &&
		  a->mlock == b->mlock && a->numa_node == b->numa_node &&
		  a->max_block == b->max_block &&
		  a->refuse_when_leased == b->refuse_when_leased &&
		  a->threads == b->threads && a->ndisk == b->ndisk,
		  "round trip through %s changed a value", text);
	if (!a->ndisk)
		return;
	CFG_CHECK(a->disk_capacity == b->disk_capacity && a->region_size == b->region_size &&
		  a->queue_depth == b->queue_depth && a->write_policy == b->write_policy &&
		  a->promote == b->promote, "round trip through %s changed a disk value", text);
	for (unsigned i = 0; i < a->ndisk; i++)
		CFG_CHECK(strcmp(a->disk_paths[i], b->disk_paths[i]) == 0,
			  "round trip through %s changed path %u", text, i);
}

/* A refused config leaves nothing to free and says why. */
static void cfg_check_refusal(int r, const struct kvt_config *c)
{
	const char *why = kvt_last_error();

	CFG_CHECK(r == -EINVAL || r == -ENOTSUP || r == -ENOMEM, "returned %d", r);
	CFG_CHECK(c->disk_paths == NULL && c->ndisk == 0, "refused config holds paths");
	CFG_CHECK(why && *why, "refused without an error text");
}

/* parse_size(): whatever it accepts is consistent with its own output. */
static void cfg_fuzz_size(const char *s)
{
	uint64_t v = 0, again = 0;
	char text[32];
	int r = parse_size(s, &v);

	if (r) {
		CFG_CHECK(r == -EINVAL, "parse_size returned %d", r);
		return;
	}
	/* plain digits are bytes */
	size_t n = strspn(s, "0123456789");
	if (n > 0 && s[n] == '\0') {
		errno = 0;
		unsigned long long u = strtoull(s, NULL, 10);
		CFG_CHECK(errno == 0 && u == v, "\"%s\" parsed as %" PRIu64, s, v);
	}
	snprintf(text, sizeof(text), "%" PRIu64, v);
	CFG_CHECK(parse_size(text, &again) == 0 && again == v,
		  "\"%s\" gave %" PRIu64 " but \"%s\" gives %" PRIu64, s, v, text, again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_config c, back;
	char *text = malloc(size + 1);
	int r;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';

	r = config_parse(text, &c);
	if (r) {
		cfg_check_refusal(r, &c);
	} else {
		cfg_check_invariants(&c);
		char *again = cfg_to_json(&c);
		if (again) {
			r = config_parse(again, &back);
			CFG_CHECK(r == 0, "%s refused on re-parse: %s", again,
				  kvt_last_error());
			cfg_check_same(&c, &back, again);
			config_free(&back);
			free(again);
		}
		config_free(&c);
		CFG_CHECK(c.disk_paths == NULL && c.ndisk == 0, "config_free left paths");
	}
	cfg_fuzz_size(text);
	free(text);
	return 0;
}
