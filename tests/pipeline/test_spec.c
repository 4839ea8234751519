/*
 * test_spec.c - loading pipeline specs: one test per class of bad input,
 * each asserting the exact "FILE:LINE:COLUMN: message"; defaults; a spec
 * with every key; glob expansion, sorting and shard assignment.
 *
 * Not for: the fingerprint (test_fingerprint.c) or running stages.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_pipeline.h"
#include "mf_snapshot.h"
#include "pipeline_fixture.h"

/* Five lines; a test appends its own from line 6 on. */
#define BASE                                                                   \
	"name: wiki-tokens\n"                                                  \
	"inputs: raw/*.jsonl\n"                                                \
	"stages:\n"                                                            \
	"  - exec: [python3, tokenize.py]\n"                                   \
	"    deps: [tokenize.py, vocab.json]\n"

static void project(void)
{
	fx_write("raw/a.jsonl", "{\"a\":1}\n");
	fx_write("raw/b.jsonl", "{\"b\":2}\n");
	fx_write("raw/c.jsonl", "{\"c\":3}\n");
	fx_write("raw/d.jsonl", "{\"d\":4}\n");
	fx_write("tokenize.py", "print('hi')\n");
	fx_write("vocab.json", "{}\n");
}

/* Writes a.yaml as text and expects loading it to fail with want. */
static void expect(const char *text, const char *want)
{
	fx_write("a.yaml", text);
	fx_load_fails("a.yaml", want);
}

static void test_syntax_error(void **state)
{
	project();
	expect("name: x\n"
	       "  inputs: raw/*.jsonl\n",
	       "a.yaml:2:9: mapping values are not allowed in this context");
	expect(BASE "keep: *nothing\n", "a.yaml:6:7: found undefined alias");
	expect(BASE "---\nname: other\n",
	       "a.yaml:7:1: expected a single YAML document");
	expect("", "a.yaml:1:1: the spec is empty");
	expect("# only a comment\n", "a.yaml:1:1: the spec is empty");
	expect("name: \xff\n", "a.yaml:1:7: invalid leading UTF-8 octet");
}

/* A syntax error names where the culprit is: a construct never closed is
 * reported where it opens, with where the parser gave up. */
static void test_syntax_error_context(void **state)
{
	project();
	expect(BASE "suffix: \"abc\n",
	       "a.yaml:6:9: found unexpected end of stream, while scanning a "
	       "quoted scalar that starts here (gave up at 7:1)");
	expect("name: x\n"
	       "inputs: [raw/a.jsonl\n"
	       "stages:\n"
	       "  - exec: [cat]\n",
	       "a.yaml:2:9: did not find expected ',' or ']', while parsing a "
	       "flow sequence that starts here (gave up at 3:7)");
	/* a block construct: the problem is where the parser gave up */
	expect(BASE "   nice: 1\n",
	       "a.yaml:6:4: did not find expected '-' indicator, while "
	       "parsing a block collection that starts at 4:3");
}

/* A tab in the indentation is the usual cause of a puzzling YAML error:
 * the message says so, at the tab. */
static void test_syntax_error_tab(void **state)
{
	project();
	expect("name: x\n"
	       "inputs: raw/*.jsonl\n"
	       "stages:\n"
	       "\t- exec: [cat]\n",
	       "a.yaml:4:1: found character that cannot start any token (a "
	       "tab: YAML indents with spaces only)");
	expect(BASE "    \tdeps: [x]\n",
	       "a.yaml:6:5: found character that cannot start any token (a "
	       "tab: YAML indents with spaces only)");
	expect("name: x\n"
	       "\tinputs: raw/*.jsonl\n",
	       "a.yaml:2:1: found a tab character that violates indentation, "
	       "while scanning a plain scalar that starts at 1:7");
	/* a tab that is not the cause is not mentioned */
	expect("name:\tx\n"
	       "inputs: [raw/a.jsonl\n",
	       "a.yaml:2:9: did not find expected ',' or ']', while parsing a "
	       "flow sequence that starts here (gave up at 3:1)");
}

static void test_unknown_key(void **state)
{
	project();
	fx_write("pipes/a.yaml",
		 "name: wiki\n"
		 "inputs: ../raw/*.jsonl\n"
		 "shard: 2\n"
		 "stages:\n"
		 "  - exec: [cat]\n");
	fx_load_fails("pipes/a.yaml",
		      "pipes/a.yaml:3:1: unknown key 'shard'; "
		      "did you mean 'shards'?");
	expect(BASE "    dep: [x]\n",
	       "a.yaml:6:5: unknown key 'dep'; did you mean 'deps'?");
	expect(BASE "stgaes: 1\n",
	       "a.yaml:6:1: unknown key 'stgaes'; did you mean 'stages'?");
	expect(BASE "    timout: 1h\n",
	       "a.yaml:6:5: unknown key 'timout'; did you mean 'timeout'?");
	expect(BASE "Keep: 2\n",
	       "a.yaml:6:1: unknown key 'Keep'; did you mean 'keep'?");
	/* nothing near: no guess */
	expect(BASE "colour: red\n", "a.yaml:6:1: unknown key 'colour'");
	expect(BASE "x: 1\n", "a.yaml:6:1: unknown key 'x'");
	expect(BASE "? [a, b]\n: c\n", "a.yaml:6:3: expected a key name");
}

static void test_wrong_type(void **state)
{
	project();
	expect("name: [a, b]\n", "a.yaml:1:7: 'name': expected a string");
	expect("name: ~\n", "a.yaml:1:7: 'name': expected a string");
	expect("- name\n", "a.yaml:1:1: expected a mapping of spec keys");
	expect("name: x\ninputs: {a: b}\n",
	       "a.yaml:2:9: 'inputs': expected a string or a list of strings");
	expect("name: x\ninputs: [raw/*.jsonl, [b]]\n",
	       "a.yaml:2:23: 'inputs': expected a string");
	expect(BASE "shards: [1]\n",
	       "a.yaml:6:9: 'shards': expected a positive integer");
	expect(BASE "keep: {n: 1}\n",
	       "a.yaml:6:7: 'keep': expected a non-negative integer");
	expect(BASE "chunk_size: [4MiB]\n",
	       "a.yaml:6:13: 'chunk_size': expected a size");
	expect(BASE "suffix: \"a\\0b\"\n",
	       "a.yaml:6:9: 'suffix': must not contain a NUL byte");
	expect("name: x\ninputs: raw/*.jsonl\nstages: cat\n",
	       "a.yaml:3:9: 'stages': expected a list of stages");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n  - cat\n",
	       "a.yaml:4:5: 'stages': expected a mapping with 'exec'");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n  - exec: {p: cat}\n",
	       "a.yaml:4:11: 'exec': expected a list of strings");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n  - exec: cat\n",
	       "a.yaml:4:11: 'exec': expected a list of strings");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n  - exec: [a, [b]]\n",
	       "a.yaml:4:15: 'exec': expected a string");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n  - exec: []\n",
	       "a.yaml:4:11: 'exec': at least one word is required");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n  - exec: ['', b]\n",
	       "a.yaml:4:12: 'exec': the program name is empty");
	expect(BASE "    timeout: [1h]\n",
	       "a.yaml:6:14: 'timeout': expected a duration");
	expect(BASE "input_identity: mtime\n",
	       "a.yaml:6:17: 'input_identity': bad value 'mtime' (expected "
	       "'stat' or 'content')");
	expect(BASE "shards: 2\nassign: random\n",
	       "a.yaml:7:9: 'assign': bad value 'random' (expected 'order' "
	       "or 'hash')");
	expect(BASE "assign: hash\n",
	       "a.yaml:6:9: 'assign: hash' needs 'shards: N': with one shard "
	       "per input, every new input would move the others");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n"
	       "  - exec: [cat]\n    deps: tokenize.py\n",
	       "a.yaml:5:11: 'deps': expected a list of paths");
	expect(BASE "identity: python3 --version\n",
	       "a.yaml:6:11: 'identity': expected a list of strings");
	expect(BASE "identity: []\n",
	       "a.yaml:6:11: 'identity': at least one word is required");
	expect(BASE "identity: ['', x]\n",
	       "a.yaml:6:12: 'identity': the program name is empty");
	expect(BASE "identity: [a, {b: c}]\n",
	       "a.yaml:6:15: 'identity': expected a string");
	/* a spec with one: its argv as written */
	fx_write("a.yaml", BASE "identity: [python3, -c, 'print(1)']\n");
	struct mf_spec *s = fx_load("a.yaml");
	assert_int_equal(s->identity_argc, 3);
	assert_string_equal(s->identity_argv[2], "print(1)");
	assert_null(s->identity_argv[3]);
	mf_spec_free(s);
}

static void test_bad_integer(void **state)
{
	project();
	expect(BASE "shards: 0\n",
	       "a.yaml:6:9: 'shards': expected a positive integer, not '0'");
	expect(BASE "shards: 2.5\n",
	       "a.yaml:6:9: 'shards': expected a positive integer, not '2.5'");
	expect(BASE "keep: -1\n",
	       "a.yaml:6:7: 'keep': expected a non-negative integer, not '-1'");
	expect(BASE "keep: 99999999999999999999999\n",
	       "a.yaml:6:7: 'keep': 99999999999999999999999 is too large (at "
	       "most 4294967295)");
}

static void test_bad_size(void **state)
{
	project();
	expect(BASE "chunk_size: 4XB\n",
	       "a.yaml:6:13: 'chunk_size': bad size '4XB'");
	expect(BASE "chunk_size: 1KiB\n",
	       "a.yaml:6:13: 'chunk_size': '1KiB' is out of range (4KiB to "
	       "1GiB)");
	expect(BASE "chunk_size: 99999999999TiB\n",
	       "a.yaml:6:13: 'chunk_size': '99999999999TiB' is out of range "
	       "(4KiB to 1GiB)");
}

/* The limits are the chunk store's own (mf_snapshot.h). */
static void test_chunk_size_limits(void **state)
{
	char text[512];
	project();
	snprintf(text, sizeof(text), BASE "chunk_size: %llu\n",
		 MF_CHUNK_SIZE_MIN - 1);
	fx_write("a.yaml", text);
	fx_load_fails("a.yaml",
		      "a.yaml:6:13: 'chunk_size': '4095' is out of "
		      "range (4KiB to 1GiB)");
	snprintf(text, sizeof(text), BASE "chunk_size: %llu\n",
		 MF_CHUNK_SIZE_MAX + 1);
	fx_write("a.yaml", text);
	fx_load_fails("a.yaml",
		      "a.yaml:6:13: 'chunk_size': '1073741825' is "
		      "out of range (4KiB to 1GiB)");
	unsigned long long ok[] = {MF_CHUNK_SIZE_MIN, MF_CHUNK_SIZE_MAX};
	for (int i = 0; i < 2; i++) {
		snprintf(text, sizeof(text), BASE "chunk_size: %llu\n", ok[i]);
		fx_write("a.yaml", text);
		struct mf_spec *s = fx_load("a.yaml");
		assert_int_equal(s->chunk_size, ok[i]);
		mf_spec_free(s);
	}
}

static void test_bad_duration(void **state)
{
	project();
	expect(BASE "expire_after: 7x\n",
	       "a.yaml:6:15: 'expire_after': bad duration '7x'");
	expect(BASE "pending_expiry: 1h30\n",
	       "a.yaml:6:17: 'pending_expiry': bad duration '1h30'");
	expect(BASE "pending_expiry: 0s\n",
	       "a.yaml:6:17: 'pending_expiry': must be longer than 0s");
	expect(BASE "    timeout: soon\n",
	       "a.yaml:6:14: 'timeout': bad duration 'soon'");
}

/* A duration past MF_DURATION_MAX_S is refused, never wrapped: 2^63 s
 * and more once read as a negative timeout, that is none. */
static void test_duration_too_large(void **state)
{
	project();
	expect(BASE "    timeout: 300000000000d\n",
	       "a.yaml:6:14: 'timeout': duration '300000000000d' is too large "
	       "(at most 9223372036s)");
	expect(BASE "    timeout: 9223372036854775808s\n",
	       "a.yaml:6:14: 'timeout': duration '9223372036854775808s' is "
	       "too large (at most 9223372036s)");
	expect(BASE "expire_after: 18446744073709551615s\n",
	       "a.yaml:6:15: 'expire_after': duration '18446744073709551615s' "
	       "is too large (at most 9223372036s)");
	expect(BASE "pending_expiry: 106752d\n",
	       "a.yaml:6:17: 'pending_expiry': duration '106752d' is too "
	       "large (at most 9223372036s)");
}

/* A stage without a timeout gets MF_STAGE_TIMEOUT_DEFAULT (24h); 0 is
 * written out to mean none. */
static void test_stage_timeout_default(void **state)
{
	project();
	fx_write("a.yaml",
		 BASE "  - exec: [cat]\n"
		      "    timeout: 0\n"
		      "  - exec: [cat]\n"
		      "    timeout: 2s\n");
	struct mf_spec *s = fx_load("a.yaml");
	assert_int_equal(MF_STAGE_TIMEOUT_DEFAULT, 86400);
	assert_int_equal(s->n_stages, 3);
	assert_int_equal(s->stages[0].timeout_s, 86400);
	assert_int_equal(s->stages[1].timeout_s, 0);
	assert_int_equal(s->stages[2].timeout_s, 2);
	mf_spec_free(s);
}

static void test_bad_codec(void **state)
{
	project();
	expect(BASE "compression: lz4\n",
	       "a.yaml:6:14: 'compression': bad codec 'lz4' (zstd, zstd:1-19, "
	       "snappy or none)");
	expect(BASE "compression: zstd:20\n",
	       "a.yaml:6:14: 'compression': bad codec 'zstd:20' (zstd, "
	       "zstd:1-19, snappy or none)");
}

/* compression_adapt: true by default, YAML's core booleans, nothing
 * else. */
static void test_compression_adapt(void **state)
{
	project();
	fx_write("a.yaml", BASE);
	struct mf_spec *s = fx_load("a.yaml");
	assert_true(s->compression_adapt);
	mf_spec_free(s);
	static const char *const values[] = {"false", "False", "FALSE",
					     "true",  "True",  "TRUE"};
	for (size_t i = 0; i < 6; i++) {
		char text[256];
		snprintf(text, sizeof(text), BASE "compression_adapt: %s\n",
			 values[i]);
		fx_write("a.yaml", text);
		s = fx_load("a.yaml");
		assert_int_equal(s->compression_adapt, i >= 3);
		mf_spec_free(s);
	}
	expect(BASE "compression_adapt: no\n",
	       "a.yaml:6:20: 'compression_adapt': expected true or false, "
	       "not 'no'");
	expect(BASE "compression_adapt: [true]\n",
	       "a.yaml:6:20: 'compression_adapt': expected true or false");
}

static void test_no_matching_inputs(void **state)
{
	project();
	expect("name: x\ninputs: data/*.jsonl\n",
	       "a.yaml:2:9: 'inputs': no file matches 'data/*.jsonl'");
	expect("name: x\ninputs:\n  - raw/*.jsonl\n  - raw/*.csv\n",
	       "a.yaml:4:5: 'inputs': no file matches 'raw/*.csv'");
	/* a folder matched by the glob is not an input file */
	fx_mkdirs("raw/sub.jsonl.d");
	expect("name: x\ninputs: raw/*.d\n",
	       "a.yaml:2:9: 'inputs': no file matches 'raw/*.d'");
	expect("name: x\ninputs: []\n",
	       "a.yaml:2:9: 'inputs': at least one glob is required");
	char text[256];
	snprintf(text, sizeof(text), "name: x\ninputs: %s/raw/*.jsonl\n",
		 ((struct fx *)*state)->root);
	fx_write("a.yaml", text);
	char want[256];
	snprintf(want, sizeof(want),
		 "a.yaml:2:9: 'inputs': '%s/raw/*.jsonl' is not relative to "
		 "the spec folder",
		 ((struct fx *)*state)->root);
	fx_load_fails("a.yaml", want);
}

static void test_missing_deps(void **state)
{
	project();
	assert_int_equal(unlink("vocab.json"), 0);
	expect(BASE, "a.yaml:5:25: 'deps': no such file 'vocab.json'");
	/* a folder is a folder dep: without a file, an error */
	fx_mkdirs("vocab.json/.git");
	fx_write("vocab.json/.hidden", "h");
	fx_write("vocab.json/__pycache__/x.pyc", "c");
	expect(BASE, "a.yaml:5:25: 'deps': no file in folder 'vocab.json'");
	assert_int_equal(mkfifo("fifo", 0600), 0);
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n"
	       "  - exec: [cat]\n    deps: [fifo]\n",
	       "a.yaml:5:12: 'deps': not a regular file or folder 'fifo'");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n"
	       "  - exec: [cat]\n    deps: [tokenize.py, 'lib/*.py']\n",
	       "a.yaml:5:25: 'deps': no file matches 'lib/*.py'");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n"
	       "  - exec: [cat]\n    deps: ['/etc/*']\n",
	       "a.yaml:5:12: 'deps': '/etc/*' is not relative to the spec "
	       "folder");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n"
	       "  - exec: [cat]\n    deps: ['.*/x']\n",
	       "a.yaml:5:12: 'deps': '.*' in '.*/x' matches '.' and '..': "
	       "name them literally");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n"
	       "  - exec: [cat]\n    deps: [/etc/passwd]\n",
	       "a.yaml:5:12: 'deps': '/etc/passwd' is not relative to the spec "
	       "folder");
}

/* deps globs and folders: each file they give, by its clean path, sorted
 * bytewise within its item; a folder's hidden entries and __pycache__
 * left out, a symlink to a file followed. */
static void test_deps_globs_and_folders(void **state)
{
	struct fx *f = *state;
	project();
	fx_write("lib/a.py", "a");
	fx_write("lib/a/z.py", "z");
	fx_write("lib/a-b.py", "ab");
	fx_write("lib/B.py", "B");
	fx_write("lib/.hidden", "h");
	fx_write("lib/.git/config", "g");
	fx_write("lib/__pycache__/a.cpython.pyc", "c");
	fx_write("lib/a/__pycache__/z.cpython.pyc", "c");
	fx_write("other.py", "o");
	assert_int_equal(symlink("../other.py", "lib/link.py"), 0);
	assert_int_equal(mkfifo("lib/fifo", 0600), 0);
	fx_write("conf/x.json", "x");
	fx_write("conf/y.json", "y");
	fx_write("conf/z.txt", "z");
	fx_mkdirs("conf/d.json");
	fx_write("a.yaml",
		 "name: x\ninputs: raw/*.jsonl\nstages:\n"
		 "  - exec: [cat]\n"
		 "    deps: [tokenize.py, ./lib/, 'conf//*.json']\n"
		 "  - exec: [cat]\n"
		 "    deps: [.]\n");
	struct mf_spec *s = fx_load("a.yaml");
	const struct mf_stage *st = &s->stages[0];
	static const char *const want[] = {
	    "tokenize.py", "lib/B.py",	  "lib/a-b.py",	 "lib/a.py",
	    "lib/a/z.py",  "lib/link.py", "conf/x.json", "conf/y.json",
	};
	assert_int_equal(st->n_dep_items, 3);
	assert_string_equal(st->dep_items[1], "lib");
	assert_string_equal(st->dep_items[2], "conf/*.json");
	assert_int_equal(st->dep_kinds[0], MF_DEP_FILE);
	assert_int_equal(st->dep_kinds[1], MF_DEP_FOLDER);
	assert_int_equal(st->dep_kinds[2], MF_DEP_GLOB);
	assert_int_equal(st->n_deps, 8);
	for (size_t i = 0; i < 8; i++) {
		char abs[512];
		assert_string_equal(st->deps_rel[i], want[i]);
		snprintf(abs, sizeof(abs), "%s/%s", f->root, want[i]);
		assert_string_equal(st->deps[i], abs);
	}
	/* the spec folder itself: paths without a leading "./" */
	st = &s->stages[1];
	assert_int_equal(st->dep_kinds[0], MF_DEP_FOLDER);
	assert_string_equal(st->dep_items[0], "");
	bool has_spec = false, has_link = false;
	for (size_t i = 0; i < st->n_deps; i++) {
		has_spec |= !strcmp(st->deps_rel[i], "a.yaml");
		has_link |= !strcmp(st->deps_rel[i], "lib/link.py");
		assert_true(st->deps_rel[i][0] != '.');
		assert_true(i == 0 ||
			    strcmp(st->deps_rel[i - 1], st->deps_rel[i]) < 0);
	}
	assert_true(has_spec && has_link);
	mf_spec_free(s);
}

/* What a folder dep refuses: a symlink to a folder, one that leads
 * nowhere, a file the ownership rules refuse. */
static void test_deps_folder_refused(void **state)
{
	project();
	fx_write("lib/a.py", "a");
	fx_write("elsewhere/b.py", "b");
	assert_int_equal(symlink("../elsewhere", "lib/sub"), 0);
	const char *spec = "name: x\ninputs: raw/*.jsonl\nstages:\n"
			   "  - exec: [cat]\n    deps: [lib]\n";
	expect(spec,
	       "a.yaml:5:12: 'deps': 'lib/sub' in folder 'lib' is a "
	       "symlink to a folder: list that folder itself");
	assert_int_equal(unlink("lib/sub"), 0);
	assert_int_equal(symlink("gone.py", "lib/dangling.py"), 0);
	expect(spec,
	       "a.yaml:5:12: 'deps': cannot read 'lib/dangling.py': No "
	       "such file or directory");
	assert_int_equal(unlink("lib/dangling.py"), 0);
	fx_write("a.yaml", spec);
	mf_spec_free(fx_load("a.yaml"));
	/* each file passes the ownership rules, as a listed one does */
	assert_int_equal(chmod("lib/a.py", 0646), 0);
	struct mf_spec *s = NULL;
	char *err = NULL;
	assert_int_equal(mf_spec_load("a.yaml", &s, &err), -EPERM);
	assert_non_null(strstr(err, "a.yaml:5:12: 'deps': "));
	assert_non_null(strstr(err, "/lib/a.py: owned by"));
	assert_non_null(strstr(err, "mode 0646: writable by others"));
	free(err);
	assert_int_equal(chmod("lib/a.py", 0644), 0);
	/* and so does the folder itself, sticky or not */
	assert_int_equal(chmod("lib", 01777), 0);
	assert_int_equal(mf_spec_load("a.yaml", &s, &err), -EPERM);
	assert_non_null(strstr(err, "/lib: owned by"));
	assert_non_null(strstr(err, "mode 1777: writable by others"));
	free(err);
	assert_int_equal(chmod("lib", 0755), 0);
}

static void test_too_many_shards(void **state)
{
	project();
	expect(BASE "shards: 9\n",
	       "a.yaml:6:9: 'shards': 9 shards but only 4 input files");
	expect("shards: 2\nname: x\ninputs: raw/a.jsonl\n"
	       "stages: [{exec: [cat]}]\n",
	       "a.yaml:1:9: 'shards': 2 shards but only 1 input file");
}

static void test_no_stages(void **state)
{
	project();
	expect("name: x\ninputs: raw/*.jsonl\nstages: []\n",
	       "a.yaml:3:9: 'stages': at least one stage is required");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\nkeep: 1\n",
	       "a.yaml:3:8: 'stages': at least one stage is required");
}

static void test_bad_name(void **state)
{
	const char *want = "a.yaml:1:7: 'name': must be 1-64 characters of "
			   "A-Z a-z 0-9 . _ -";
	project();
	expect("name: wiki tokens\n", want);
	expect("name: wiki/tokens\n", want);
	expect("name: ''\n", want);
	expect(
	    "name: "
	    "a123456789b123456789c123456789d123456789e123456789f123456789g1234"
	    "\n",
	    want);
	expect("name: ..\n", "a.yaml:1:7: 'name': must not be '.' or '..'");
	expect("name: .\n", "a.yaml:1:7: 'name': must not be '.' or '..'");
	expect("name: -x\n", "a.yaml:1:7: 'name': must not begin with '-'");
	/* 64 hex digits of either case read as a fingerprint */
	expect(
	    "name: "
	    "0123456789abcdef0123456789abcdef0123456789ABCDEF0123456789abcdef"
	    "\n",
	    "a.yaml:1:7: 'name': 64 hex digits read as a fingerprint: "
	    "choose another name");
}

static void test_missing_required_key(void **state)
{
	project();
	expect("# a comment first\n"
	       "name: x\ninputs: raw/*.jsonl\n",
	       "a.yaml:2:1: missing required key 'stages'");
	expect("inputs: raw/*.jsonl\nstages: [{exec: [cat]}]\n",
	       "a.yaml:1:1: missing required key 'name'");
	expect("name: x\nstages: [{exec: [cat]}]\n",
	       "a.yaml:1:1: missing required key 'inputs'");
	expect("name: x\ninputs: raw/*.jsonl\nstages:\n  - deps: []\n",
	       "a.yaml:4:5: missing required key 'exec'");
}

static void test_duplicate_key(void **state)
{
	project();
	expect(BASE "name: again\n", "a.yaml:6:1: duplicate key 'name'");
	expect(BASE "    deps: []\n", "a.yaml:6:5: duplicate key 'deps'");
}

static void test_bad_suffix(void **state)
{
	project();
	expect(BASE "suffix: a/b\n",
	       "a.yaml:6:9: 'suffix': must not contain '/'");
	expect(BASE "suffix: .12345678901234567890123456789012\n",
	       "a.yaml:6:9: 'suffix': longer than 32 bytes");
	expect(BASE "suffix: [a]\n", "a.yaml:6:9: 'suffix': expected a string");
	/* 32 bytes is fine */
	fx_write("a.yaml", BASE "suffix: .1234567890123456789012345678901\n");
	struct mf_spec *s = fx_load("a.yaml");
	assert_string_equal(s->suffix, ".1234567890123456789012345678901");
	mf_spec_free(s);
}

static void test_file_errors(void **state)
{
	struct mf_spec *s = NULL;
	char *err = NULL;
	assert_int_equal(mf_spec_load("nope.yaml", &s, &err), -ENOENT);
	assert_null(s);
	assert_string_equal(
	    err, "nope.yaml: cannot open: No such file or directory");
	free(err);
	fx_mkdirs("dir.yaml");
	assert_int_equal(mf_spec_load("dir.yaml", &s, &err), -EINVAL);
	assert_string_equal(err, "dir.yaml: not a regular file");
	free(err);
	/* err may be NULL when the caller does not want the text */
	assert_int_equal(mf_spec_load("nope.yaml", &s, NULL), -ENOENT);
	assert_null(s);
}

/* A folder or spec others can write is refused, with the path, its owner
 * and mode and the rule; a sticky bit does not make the stages' own
 * folder safe, and a user-private group's write bit is not "others". */
static void test_writable_by_others(void **state)
{
	struct fx *f = *state;
	struct mf_spec *s = NULL;
	char *err = NULL;
	char want[512];
	fx_write("p/raw/a.jsonl", "a\n");
	fx_write("p/a.yaml",
		 "name: w\ninputs: raw/*.jsonl\n"
		 "stages: [{exec: [cat]}]\n");
	assert_int_equal(chmod("p", 0757), 0);
	assert_int_equal(mf_spec_load("p/a.yaml", &s, &err), -EPERM);
	snprintf(want, sizeof(want),
		 "p/a.yaml: %s/p: owned by %s, mode 0757: writable by "
		 "others: refused (docs/security.md, ownership)",
		 f->root, getuid() == 0 ? "root (uid 0)" : "");
	if (getuid() == 0)
		assert_string_equal(err, want);
	else
		assert_non_null(strstr(err, "mode 0757: writable by others"));
	free(err);
	assert_int_equal(chmod("p", 01777), 0); /* sticky does not help */
	assert_int_equal(mf_spec_load("p/a.yaml", &s, &err), -EPERM);
	assert_non_null(strstr(err, "mode 1777: writable by others"));
	free(err);
	assert_int_equal(chmod("p", 0755), 0);
	assert_int_equal(chmod("p/a.yaml", 0646), 0);
	assert_int_equal(mf_spec_load("p/a.yaml", &s, &err), -EPERM);
	snprintf(want, sizeof(want), "%s/p/a.yaml: owned by", f->root);
	assert_non_null(strstr(err, want));
	assert_non_null(strstr(err, "mode 0646: writable by others"));
	free(err);
	assert_int_equal(chmod("p/a.yaml", 0644), 0);
	s = fx_load("p/a.yaml");
	mf_spec_free(s);
}

static void test_newline_in_input_name(void **state)
{
	fx_write("raw/a.jsonl", "a\n");
	fx_write("raw/b\nc.jsonl", "b\n");
	fx_write("a.yaml",
		 "name: w\ninputs: raw/*.jsonl\n"
		 "stages: [{exec: [cat]}]\n");
	fx_load_fails("a.yaml",
		      "a.yaml:2:9: 'inputs': the name of a matched "
		      "file holds a newline: rename it");
}

static void test_dot_patterns(void **state)
{
	fx_write("raw/a.jsonl", "a\n");
	fx_write("a.yaml",
		 "name: w\ninputs: raw/.*/../*.jsonl\n"
		 "stages: [{exec: [cat]}]\n");
	fx_load_fails("a.yaml",
		      "a.yaml:2:9: 'inputs': '.*' in "
		      "'raw/.*/../*.jsonl' matches '.' and '..': "
		      "name them literally");
	fx_write("b.yaml",
		 "name: w\ninputs: ./raw/../raw/*.jsonl\n"
		 "stages: [{exec: [cat]}]\n");
	mf_spec_free(fx_load("b.yaml"));
}

static void test_defaults(void **state)
{
	struct fx *f = *state;
	project();
	fx_write("a.yaml",
		 "name: wiki\ninputs: raw/*.jsonl\n"
		 "stages: [{exec: [cat]}]\n");
	struct mf_spec *s = fx_load("a.yaml");
	char want[128];
	snprintf(want, sizeof(want), "%s/a.yaml", f->root);
	assert_string_equal(s->path, want);
	assert_string_equal(s->dir, f->root);
	assert_string_equal(s->name, "wiki");
	assert_int_equal(s->n_inputs, 4);
	assert_int_equal(s->shards, 4);
	assert_int_equal(s->identity, MF_IDENTITY_STAT);
	assert_int_equal(s->n_stages, 1);
	assert_int_equal(s->stages[0].argc, 1);
	assert_string_equal(s->stages[0].argv[0], "cat");
	assert_null(s->stages[0].argv[1]);
	assert_int_equal(s->stages[0].n_deps, 0);
	assert_int_equal(s->stages[0].timeout_s, MF_STAGE_TIMEOUT_DEFAULT);
	assert_string_equal(s->suffix, "");
	assert_int_equal(s->codec, MF_CODEC_ZSTD);
	assert_int_equal(s->level, 3);
	assert_int_equal(s->chunk_size, 4 << 20);
	assert_int_equal(s->expire_after, -1);
	assert_int_equal(s->pending_expiry, 86400);
	assert_int_equal(s->keep, 0);
	assert_null(s->fingerprint_key);
	assert_int_equal(s->owner_uid, getuid());
	assert_int_equal(s->owner_gid, getgid());
	mf_spec_free(s);
	mf_spec_free(NULL);
}

static void test_full_spec(void **state)
{
	struct fx *f = *state;
	project();
	fx_write("pipes/wiki.yaml",
		 "name: wiki-tokens.v2_x\n"
		 "inputs: ../raw/*.jsonl\n"
		 "shards: 2\n"
		 "input_identity: content\n"
		 "stages:\n"
		 "  - exec: [python3, ../tokenize.py, --max-len, \"512\"]\n"
		 "    deps: [../tokenize.py, ../vocab.json]\n"
		 "    timeout: 1h30m\n"
		 "  - exec: ['zstd', '-c']\n"
		 "    timeout: 90\n"
		 "suffix: .bin\n"
		 "compression: zstd:7\n"
		 "chunk_size: 8MiB\n"
		 "expire_after: 7d\n"
		 "pending_expiry: 1h\n"
		 "keep: 3\n"
		 "fingerprint: my-fixed-key\n");
	struct mf_spec *s = fx_load("pipes/wiki.yaml");
	char want[128];
	snprintf(want, sizeof(want), "%s/pipes", f->root);
	assert_string_equal(s->dir, want);
	assert_string_equal(s->name, "wiki-tokens.v2_x");
	assert_int_equal(s->n_globs, 1);
	assert_string_equal(s->input_globs[0], "../raw/*.jsonl");
	assert_int_equal(s->n_inputs, 4);
	assert_string_equal(s->inputs_rel[3], "../raw/d.jsonl");
	snprintf(want, sizeof(want), "%s/pipes/../raw/d.jsonl", f->root);
	assert_string_equal(s->inputs[3], want);
	assert_int_equal(s->shards, 2);
	assert_int_equal(s->identity, MF_IDENTITY_CONTENT);
	assert_int_equal(s->n_stages, 2);
	const struct mf_stage *st = &s->stages[0];
	assert_int_equal(st->argc, 4);
	assert_string_equal(st->argv[2], "--max-len");
	assert_string_equal(st->argv[3], "512");
	assert_null(st->argv[4]);
	assert_int_equal(st->n_deps, 2);
	assert_string_equal(st->deps_rel[1], "../vocab.json");
	snprintf(want, sizeof(want), "%s/pipes/../vocab.json", f->root);
	assert_string_equal(st->deps[1], want);
	assert_int_equal(st->timeout_s, 5400);
	assert_int_equal(s->stages[1].argc, 2);
	assert_string_equal(s->stages[1].argv[0], "zstd");
	assert_int_equal(s->stages[1].timeout_s, 90);
	assert_string_equal(s->suffix, ".bin");
	assert_int_equal(s->codec, MF_CODEC_ZSTD);
	assert_int_equal(s->level, 7);
	assert_int_equal(s->chunk_size, 8 << 20);
	assert_int_equal(s->expire_after, 7 * 86400);
	assert_int_equal(s->pending_expiry, 3600);
	assert_int_equal(s->keep, 3);
	assert_string_equal(s->fingerprint_key, "my-fixed-key");
	mf_spec_free(s);
}

static void test_plain_integers(void **state)
{
	project();
	fx_write("a.yaml",
		 BASE "chunk_size: 65536\nexpire_after: 60\n"
		      "pending_expiry: 120\ncompression: none\n"
		      "keep: 0\nexpire_after: never\n");
	fx_load_fails("a.yaml", "a.yaml:11:1: duplicate key 'expire_after'");
	fx_write("a.yaml",
		 BASE "chunk_size: 65536\nexpire_after: 60\n"
		      "pending_expiry: 120\ncompression: snappy\n"
		      "shards: \"2\"\n");
	struct mf_spec *s = fx_load("a.yaml");
	assert_int_equal(s->chunk_size, 65536);
	assert_int_equal(s->expire_after, 60);
	assert_int_equal(s->pending_expiry, 120);
	assert_int_equal(s->codec, MF_CODEC_SNAPPY);
	assert_int_equal(s->shards, 2);
	mf_spec_free(s);
	fx_write("a.yaml", BASE "expire_after: never\n");
	s = fx_load("a.yaml");
	assert_int_equal(s->expire_after, -1);
	mf_spec_free(s);
}

static void test_globs_sorted_and_sharded(void **state)
{
	project();
	fx_write("raw/b/x.jsonl", "x");
	fx_write("raw/b/a.jsonl", "a");
	fx_write("raw/.hidden.jsonl", "h");
	fx_mkdirs("raw/e.jsonl");
	assert_int_equal(symlink("a.jsonl", "raw/link.jsonl"), 0);
	fx_write("a.yaml",
		 "name: g\n"
		 "inputs: [raw/b/*.jsonl, raw/*.jsonl, ./raw//a.jsonl,"
		 " raw/b/a.jsonl]\n"
		 "shards: 3\n"
		 "stages: [{exec: [cat]}]\n");
	struct mf_spec *s = fx_load("a.yaml");
	static const char *const want[] = {
	    "raw/a.jsonl", "raw/b.jsonl", "raw/b/a.jsonl",  "raw/b/x.jsonl",
	    "raw/c.jsonl", "raw/d.jsonl", "raw/link.jsonl",
	};
	assert_int_equal(s->n_globs, 4);
	assert_string_equal(s->input_globs[2], "./raw//a.jsonl");
	assert_int_equal(s->n_inputs, 7);
	for (size_t i = 0; i < 7; i++) {
		assert_string_equal(s->inputs_rel[i], want[i]);
		char abs[256];
		snprintf(abs, sizeof(abs), "%s/%s", s->dir, want[i]);
		assert_string_equal(s->inputs[i], abs);
	}
	/* input k goes to shard k mod 3 */
	for (uint32_t k = 0; k < 3; k++) {
		const char **paths = NULL;
		size_t n = 0;
		assert_int_equal(mf_spec_shard_inputs(s, k, &paths, &n), 0);
		assert_int_equal(n, k == 0 ? 3 : 2);
		for (size_t j = 0; j < n; j++)
			assert_ptr_equal(paths[j], s->inputs[k + 3 * j]);
		free(paths);
	}
	const char **paths = NULL;
	size_t n = 99;
	assert_int_equal(mf_spec_shard_inputs(s, 3, &paths, &n), -EINVAL);
	assert_null(paths);
	assert_int_equal(n, 99);
	mf_spec_free(s);
}

static void test_glob_special_folder(void **state)
{
	/* the spec folder's own name is not a pattern */
	project();
	fx_write("p[1]*/x.jsonl", "x");
	fx_write("p[1]*/a.yaml",
		 "name: p\ninputs: '*.jsonl'\nstages: [{exec: [cat]}]\n");
	fx_write("p1x/y.jsonl", "y");
	struct mf_spec *s = fx_load("p[1]*/a.yaml");
	assert_int_equal(s->n_inputs, 1);
	assert_string_equal(s->inputs_rel[0], "x.jsonl");
	mf_spec_free(s);
}

/* `records`: every form, and every way it can be wrong. */
static void test_records(void **state)
{
	project();
	struct {
		const char *text;
		enum mf_framing framing;
		uint64_t size;
		bool drop;
	} ok[] = {
	    {"records: 2048\n", MF_FRAMING_FIXED, 2048, false},
	    {"records: 2KiB\n", MF_FRAMING_FIXED, 2048, false},
	    {"records: {size: 8, tail: drop}\n", MF_FRAMING_FIXED, 8, true},
	    {"records:\n  size: 4\n  tail: error\n", MF_FRAMING_FIXED, 4,
	     false},
	    {"records: {size: 1}\n", MF_FRAMING_FIXED, 1, false},
	    {"records: lines\n", MF_FRAMING_LINES, 0, false},
	    {"records: tfrecord\n", MF_FRAMING_TFRECORD, 0, false},
	    {"records: tar\n", MF_FRAMING_TAR, 0, false},
	    {"records: index\n", MF_FRAMING_INDEX, 0, false},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char text[512];
		snprintf(text, sizeof(text), BASE "%s", ok[i].text);
		fx_write("a.yaml", text);
		struct mf_spec *s = fx_load("a.yaml");
		assert_int_equal(s->records.framing, ok[i].framing);
		assert_int_equal(s->records.size, ok[i].size);
		assert_int_equal(s->records.drop_tail, ok[i].drop);
		assert_int_equal(s->shuffle_window, MF_SHUFFLE_WINDOW_DEFAULT);
		mf_spec_free(s);
	}
	expect(BASE "records: line\n",
	       "a.yaml:6:10: 'records': bad value 'line'; did you mean "
	       "'lines'?");
	expect(BASE "records: tfrecords\n",
	       "a.yaml:6:10: 'records': bad value 'tfrecords'; did you mean "
	       "'tfrecord'?");
	expect(BASE "records: json\n",
	       "a.yaml:6:10: 'records': bad value 'json' (expected a record "
	       "size, {size: SIZE, tail: error|drop}, lines, tfrecord, tar "
	       "or index)");
	expect(BASE "records: 0\n",
	       "a.yaml:6:10: 'records': record size '0' is out of range (1 "
	       "byte to 1GiB)");
	expect(BASE "records: 2GiB\n",
	       "a.yaml:6:10: 'records': record size '2GiB' is out of range (1 "
	       "byte to 1GiB)");
	expect(BASE "records: [lines]\n",
	       "a.yaml:6:10: 'records': expected a record size, {size: SIZE, "
	       "tail: error|drop}, lines, tfrecord, tar or index");
	expect(BASE "records: {size: 8, tial: drop}\n",
	       "a.yaml:6:20: unknown key 'tial'; did you mean 'tail'?");
	expect(BASE "records: {tail: drop}\n",
	       "a.yaml:6:10: missing required key 'size'");
	expect(BASE "records: {size: 8, tail: keep}\n",
	       "a.yaml:6:26: 'tail': expected 'error' or 'drop'");
	expect(BASE "records: {size: abc}\n",
	       "a.yaml:6:17: 'size': expected a record size");
	expect(BASE "record: lines\n",
	       "a.yaml:6:1: unknown key 'record'; did you mean 'records'?");
}

/* `shuffle_window`: a size, and only beside `records`. */
static void test_shuffle_window(void **state)
{
	project();
	fx_write("a.yaml", BASE "shuffle_window: 64MiB\nrecords: 2048\n");
	struct mf_spec *s = fx_load("a.yaml");
	assert_int_equal(s->shuffle_window, 64ULL << 20);
	mf_spec_free(s);
	fx_write("a.yaml", BASE);
	s = fx_load("a.yaml");
	assert_int_equal(s->records.framing, MF_FRAMING_NONE);
	assert_int_equal(s->shuffle_window, 0);
	mf_spec_free(s);
	expect(BASE "shuffle_window: 64MiB\n",
	       "a.yaml:6:17: 'shuffle_window': needs 'records' (it bounds the "
	       "bytes of records a batch order mixes)");
	expect(BASE "records: lines\nshuffle_window: big\n",
	       "a.yaml:7:17: 'shuffle_window': expected a size");
	expect(BASE "records: lines\nshuffle_window: 0\n",
	       "a.yaml:7:17: 'shuffle_window': '0' is out of range (1 byte to "
	       "1TiB)");
	expect(BASE "records: lines\nshufle_window: 1MiB\n",
	       "a.yaml:7:1: unknown key 'shufle_window'; did you mean "
	       "'shuffle_window'?");
}

#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_syntax_error),
	    T(test_syntax_error_context),
	    T(test_syntax_error_tab),
	    T(test_unknown_key),
	    T(test_wrong_type),
	    T(test_bad_integer),
	    T(test_bad_size),
	    T(test_chunk_size_limits),
	    T(test_bad_duration),
	    T(test_duration_too_large),
	    T(test_stage_timeout_default),
	    T(test_bad_codec),
	    T(test_compression_adapt),
	    T(test_no_matching_inputs),
	    T(test_missing_deps),
	    T(test_deps_globs_and_folders),
	    T(test_deps_folder_refused),
	    T(test_too_many_shards),
	    T(test_no_stages),
	    T(test_bad_name),
	    T(test_missing_required_key),
	    T(test_duplicate_key),
	    T(test_bad_suffix),
	    T(test_file_errors),
	    T(test_writable_by_others),
	    T(test_dot_patterns),
	    T(test_newline_in_input_name),
	    T(test_defaults),
	    T(test_full_spec),
	    T(test_plain_integers),
	    T(test_globs_sorted_and_sharded),
	    T(test_glob_special_folder),
	    T(test_records),
	    T(test_shuffle_window),
	};
	return cmocka_run_group_tests_name("spec", tests, NULL, NULL);
}
