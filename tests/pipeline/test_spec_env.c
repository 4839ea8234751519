/*
 * test_spec_env.c - the keys that shape a stage's processes: the spec's
 * `env` (names, reserved names, caps, sorted result) and a stage's
 * `memory` and `nice`, each error with its exact "FILE:LINE:COLUMN".
 *
 * Not for: what a running stage sees (tests/job/test_job_env.c) or the
 * fingerprint (test_fingerprint.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mf_pipeline.h"
#include "pipeline_fixture.h"

/* Four lines; a test appends its own from line 5 on. */
#define BASE                                                                   \
	"name: x\n"                                                            \
	"inputs: raw/*.jsonl\n"                                                \
	"stages:\n"                                                            \
	"  - exec: [cat]\n"

static void project(void)
{
	fx_write("raw/a.jsonl", "{\"a\":1}\n");
}

static void expect(const char *text, const char *want)
{
	fx_write("a.yaml", text);
	fx_load_fails("a.yaml", want);
}

static struct mf_spec *load_text(const char *text)
{
	fx_write("a.yaml", text);
	return fx_load("a.yaml");
}

static void test_env_loads_sorted(void **state)
{
	project();
	struct mf_spec *s = load_text(BASE "env:\n"
					   "  PYTHONPATH: lib\n"
					   "  OMP_NUM_THREADS: 4\n"
					   "  _x: ''\n"
					   "  PATH: /opt/bin:/usr/bin\n");
	assert_int_equal(s->n_env, 4);
	assert_string_equal(s->env[0].name, "OMP_NUM_THREADS");
	assert_string_equal(s->env[0].value, "4");
	assert_string_equal(s->env[1].name, "PATH");
	assert_string_equal(s->env[1].value, "/opt/bin:/usr/bin");
	assert_string_equal(s->env[2].name, "PYTHONPATH");
	assert_string_equal(s->env[2].value, "lib");
	assert_string_equal(s->env[3].name, "_x");
	assert_string_equal(s->env[3].value, "");
	mf_spec_free(s);
	/* none, or an empty mapping: no variable */
	s = load_text(BASE);
	assert_int_equal(s->n_env, 0);
	assert_null(s->env);
	mf_spec_free(s);
	s = load_text(BASE "env: {}\n");
	assert_int_equal(s->n_env, 0);
	mf_spec_free(s);
}

static void test_env_errors(void **state)
{
	project();
	expect(BASE "env: [A, B]\n",
	       "a.yaml:5:6: 'env': expected a mapping of NAME: value");
	expect(BASE "env: {1A: x}\n",
	       "a.yaml:5:7: 'env': bad variable name '1A' (A-Z a-z 0-9 _, "
	       "not starting with a digit)");
	expect(BASE "env: {A-B: x}\n",
	       "a.yaml:5:7: 'env': bad variable name 'A-B' (A-Z a-z 0-9 _, "
	       "not starting with a digit)");
	expect(BASE "env: {\"A B\": x}\n",
	       "a.yaml:5:7: 'env': bad variable name (not shown: not a word "
	       "of A-Z a-z 0-9 _ . -) (A-Z a-z 0-9 _, not starting with a "
	       "digit)");
	expect(BASE "env: {[A]: x}\n",
	       "a.yaml:5:7: 'env': expected a variable name");
	expect(BASE "env: {MATFS_SHARD: 3}\n",
	       "a.yaml:5:7: 'env': 'MATFS_SHARD' is reserved: matfs sets "
	       "MATFS_* itself");
	expect(BASE "env: {A: x, B: y, A: z}\n",
	       "a.yaml:5:19: 'env': duplicate variable 'A'");
	expect(BASE "env: {A: [x]}\n", "a.yaml:5:10: 'env': expected a string");
	expect(BASE "env: {A: ~}\n", "a.yaml:5:10: 'env': expected a string");
	expect(BASE "env: {A: \"x\\0y\"}\n",
	       "a.yaml:5:10: 'env': must not contain a NUL byte");
}

static void test_env_caps(void **state)
{
	project();
	char text[16384];
	int n = snprintf(text, sizeof(text), BASE "env:\n");
	for (int i = 0; i < 65; i++)
		n += snprintf(text + n, sizeof(text) - (size_t)n, "  V%d: x\n",
			      i);
	expect(text, "a.yaml:6:3: 'env': more than 64 variables");

	char name[130];
	memset(name, 'N', 129);
	name[129] = '\0';
	snprintf(text, sizeof(text), BASE "env: {%s: x}\n", name);
	expect(text,
	       "a.yaml:5:7: 'env': a variable name is longer than 128 "
	       "bytes");
	name[128] = '\0';
	snprintf(text, sizeof(text), BASE "env: {%s: x}\n", name);
	struct mf_spec *s = load_text(text);
	assert_int_equal(strlen(s->env[0].name), 128);
	mf_spec_free(s);

	char value[4098];
	memset(value, 'v', 4097);
	value[4097] = '\0';
	snprintf(text, sizeof(text), BASE "env: {A: %s}\n", value);
	expect(text,
	       "a.yaml:5:10: 'env': the value of 'A' is longer than "
	       "4096 bytes");
	value[4096] = '\0';
	snprintf(text, sizeof(text), BASE "env: {A: %s}\n", value);
	s = load_text(text);
	assert_int_equal(strlen(s->env[0].value), 4096);
	mf_spec_free(s);
}

static void test_memory_and_nice(void **state)
{
	project();
	struct mf_spec *s = load_text(BASE "    memory: 64MiB\n"
					   "    nice: 10\n"
					   "  - exec: [cat]\n");
	assert_int_equal(s->stages[0].memory, 64ULL << 20);
	assert_int_equal(s->stages[0].nice, 10);
	assert_int_equal(s->stages[1].memory, 0);
	assert_int_equal(s->stages[1].nice, 0);
	mf_spec_free(s);
	s = load_text(BASE "    memory: 1MiB\n    nice: 19\n");
	assert_int_equal(s->stages[0].memory, 1ULL << 20);
	assert_int_equal(s->stages[0].nice, 19);
	mf_spec_free(s);
	s = load_text(BASE "    nice: 0\n");
	assert_int_equal(s->stages[0].nice, 0);
	mf_spec_free(s);

	expect(BASE "    memory: 64\n",
	       "a.yaml:5:13: 'memory': '64' is too small (at least 1MiB)");
	expect(BASE "    memory: lots\n",
	       "a.yaml:5:13: 'memory': bad size 'lots'");
	expect(BASE "    memory: [1GiB]\n",
	       "a.yaml:5:13: 'memory': expected a size");
	expect(BASE "    nice: 20\n",
	       "a.yaml:5:11: 'nice': 20 is too large (at most 19)");
	expect(BASE "    nice: -5\n",
	       "a.yaml:5:11: 'nice': expected a non-negative integer, not "
	       "'-5'");
}

#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_env_loads_sorted),
	    T(test_env_errors),
	    T(test_env_caps),
	    T(test_memory_and_nice),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
