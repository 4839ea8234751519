/*
 * test_fingerprint.c - the fingerprint of a spec: what changes it (argv,
 * deps contents, input size and mtime or contents, shards, the fixed key)
 * and what does not (layout, name, storage settings, the project's
 * location); `env`, a part only when it is not empty; the --explain parts and the byte layout of docs/spec.md,
 * recomputed here from the document; golden values of scheme 1.
 *
 * Not for: spec validation (test_spec.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "mf_pipeline.h"
#include "pipeline_fixture.h"

#define SPEC                                                                   \
	"name: wiki-tokens\n"                                                  \
	"inputs: raw/*.jsonl\n"                                                \
	"shards: 3\n"                                                          \
	"stages:\n"                                                            \
	"  - exec: [python3, tokenize.py, --max-len, \"512\"]\n"               \
	"    deps: [tokenize.py, vocab.json]\n"                                \
	"    timeout: 1h\n"                                                    \
	"suffix: .bin\n"                                                       \
	"compression: zstd\n"                                                  \
	"chunk_size: 4MiB\n"

#define T0 1700000000

/* proj/ with three inputs, two deps and spec.yaml = SPEC; fixed mtimes. */
static void project(void)
{
	fx_write("proj/raw/a.jsonl", "aaaa\n");
	fx_write("proj/raw/b.jsonl", "bbbbbb\n");
	fx_write("proj/raw/c.jsonl", "c\n");
	fx_write("proj/tokenize.py", "print(1)\n");
	fx_write("proj/vocab.json", "{\"v\": 1}\n");
	fx_write("proj/spec.yaml", SPEC);
	fx_mtime("proj/raw/a.jsonl", T0, 123456789);
	fx_mtime("proj/raw/b.jsonl", T0 + 1, 0);
	fx_mtime("proj/raw/c.jsonl", T0 + 2, 999999999);
}

/* text with the first `from` replaced by `to`, into out. */
static void replace(const char *text, const char *from, const char *to,
		    char *out, size_t len)
{
	const char *at = strstr(text, from);
	assert_non_null(at);
	int n = snprintf(out, len, "%.*s%s%s", (int)(at - text), text, to,
			 at + strlen(from));
	assert_true(n > 0 && (size_t)n < len);
}

/* SPEC with the first `from` replaced by `to`, written to path. */
static void spec_edit(const char *path, const char *from, const char *to)
{
	char text[2048];
	replace(SPEC, from, to, text, sizeof(text));
	fx_write(path, text);
}

/* SPEC with two replacements, written to path. */
static void spec_edit2(const char *path, const char *from1, const char *to1,
		       const char *from2, const char *to2)
{
	char one[2048], two[2048];
	replace(SPEC, from1, to1, one, sizeof(one));
	replace(one, from2, to2, two, sizeof(two));
	fx_write(path, two);
}

static void fp_of(const char *path, char hex[MF_FP_HEX_LEN + 1])
{
	struct mf_spec *s = fx_load(path);
	struct mf_fingerprint fp;
	char *err = NULL;
	int rc = mf_fingerprint_compute(s, &fp, &err);
	if (rc)
		print_error("fingerprint: %s\n", err ? err : "?");
	assert_int_equal(rc, 0);
	assert_null(err);
	assert_true(mf_is_hex(fp.hex, MF_FP_HEX_LEN));
	memcpy(hex, fp.hex, MF_FP_HEX_LEN + 1);
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

/* The fingerprint of proj/spec.yaml. */
static void fp_proj(char hex[MF_FP_HEX_LEN + 1])
{
	fp_of("proj/spec.yaml", hex);
}

/* Scheme 1 of the project above. A change here changes every user's
 * fingerprints: it needs a new MF_FINGERPRINT_SCHEME. */
#define GOLDEN_STAT                                                            \
	"dec25c55473ec3f278bcf96ce2a4d45245f00b587eccb5c67c94a5e4a27930a7"
#define GOLDEN_KEY                                                             \
	"3f3106d5efe8c8db0d3aa6a82dbd71224326e186829f0c5fcc173929adb06841"

static void test_golden(void **state)
{
	char a[65];
	project();
	fp_proj(a);
	assert_string_equal(a, GOLDEN_STAT);
	spec_edit("proj/spec.yaml", "stages:",
		  "fingerprint: my-fixed-key\n"
		  "stages:");
	fp_proj(a);
	assert_string_equal(a, GOLDEN_KEY);
}

static void test_layout_ignored(void **state)
{
	char a[65], b[65], c[65];
	project();
	fp_proj(a);
	fx_write("proj/other.yaml",
		 "# wiki tokens, second take\n"
		 "stages:\n"
		 "    -   deps:\n"
		 "          - ./tokenize.py   # the script\n"
		 "          - vocab.json\n"
		 "        exec:\n"
		 "          - python3\n"
		 "          - 'tokenize.py'\n"
		 "          - --max-len\n"
		 "          - 512\n"
		 "\n"
		 "shards:   3\n"
		 "inputs: [ raw/*.jsonl ]\n"
		 "name: wiki-tokens\n");
	fp_of("proj/other.yaml", b);
	assert_string_equal(a, b);
	/* deps are a set: order and repeats do not matter */
	spec_edit("proj/third.yaml", "[tokenize.py, vocab.json]",
		  "[vocab.json, tokenize.py, vocab.json]");
	fp_of("proj/third.yaml", c);
	assert_string_equal(a, c);
}

static void test_project_move(void **state)
{
	char a[65], b[65];
	project();
	fp_proj(a);
	fx_mkdirs("elsewhere/deeper");
	assert_int_equal(rename("proj", "elsewhere/deeper/moved"), 0);
	struct mf_spec *s = fx_load("elsewhere/deeper/moved/spec.yaml");
	assert_non_null(strstr(s->dir, "/elsewhere/deeper/moved"));
	mf_spec_free(s);
	fp_of("elsewhere/deeper/moved/spec.yaml", b);
	assert_string_equal(a, b);
}

static void test_deps_byte(void **state)
{
	char a[65], b[65], c[65];
	project();
	fp_proj(a);
	fx_write("proj/vocab.json", "{\"v\": 2}\n"); /* same size */
	fp_proj(b);
	assert_string_not_equal(a, b);
	fx_write("proj/vocab.json", "{\"v\": 1}\n");
	fx_mtime("proj/vocab.json", T0 + 50, 0); /* only contents count */
	fp_proj(c);
	assert_string_equal(a, c);
}

/* The labels of the parts of path's fingerprint that start with prefix,
 * joined by spaces, into out. */
static void labels_of(const char *path, const char *prefix, char *out,
		      size_t len)
{
	struct mf_spec *s = fx_load(path);
	struct mf_fingerprint fp;
	assert_int_equal(mf_fingerprint_compute(s, &fp, NULL), 0);
	out[0] = '\0';
	for (size_t i = 0; i < fp.n_parts; i++) {
		if (strncmp(fp.parts[i].label, prefix, strlen(prefix)))
			continue;
		size_t used = strlen(out);
		snprintf(out + used, len - used, "%s%s", used ? " " : "",
			 fp.parts[i].label);
	}
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

/* A deps glob and a deps folder: each file they give is a deps part of
 * its own, as a listed file is (the same fingerprint as listing them),
 * sorted bytewise; a content change, a new file or a file gone changes
 * the fingerprint, a hidden file or __pycache__ in the folder does not. */
static void test_deps_glob_folder(void **state)
{
	char a[65], b[65], c[65], labels[1024];
	project();
	fx_write("proj/lib/a.py", "a\n");
	fx_write("proj/lib/a/z.py", "z\n");
	fx_write("proj/lib/a-b.py", "ab\n");
	fx_write("proj/lib/B.py", "B\n");
	fx_write("proj/conf/x.json", "x\n");
	fx_write("proj/conf/y.json", "y\n");
	spec_edit("proj/spec.yaml", "[tokenize.py, vocab.json]",
		  "[tokenize.py, vocab.json, lib, 'conf/*.json']");
	fp_proj(a);
	labels_of("proj/spec.yaml", "stage[0].deps", labels, sizeof(labels));
	assert_string_equal(labels,
			    "stage[0].deps[conf/x.json] "
			    "stage[0].deps[conf/y.json] "
			    "stage[0].deps[lib/B.py] "
			    "stage[0].deps[lib/a-b.py] "
			    "stage[0].deps[lib/a.py] "
			    "stage[0].deps[lib/a/z.py] "
			    "stage[0].deps[tokenize.py] "
			    "stage[0].deps[vocab.json]");
	/* the same parts as every file listed */
	spec_edit("proj/listed.yaml", "[tokenize.py, vocab.json]",
		  "[vocab.json, lib/a/z.py, lib/a.py, conf/y.json, "
		  "lib/B.py, conf/x.json, tokenize.py, lib/a-b.py]");
	fp_of("proj/listed.yaml", b);
	assert_string_equal(a, b);
	/* a byte of a file deep in the folder */
	fx_write("proj/lib/a/z.py", "Z\n");
	fp_proj(b);
	assert_string_not_equal(a, b);
	fx_write("proj/lib/a/z.py", "z\n");
	fp_proj(b);
	assert_string_equal(a, b);
	/* a byte of a file the glob matches */
	fx_write("proj/conf/y.json", "Y\n");
	fp_proj(b);
	assert_string_not_equal(a, b);
	fx_write("proj/conf/y.json", "y\n");
	/* left out: what the folder skips, what the glob does not match */
	fx_write("proj/lib/.swp", "s");
	fx_write("proj/lib/__pycache__/a.cpython-311.pyc", "c");
	fx_write("proj/conf/notes.txt", "n");
	fp_proj(b);
	assert_string_equal(a, b);
	/* a new file in a subfolder, and one the glob matches */
	fx_write("proj/lib/a/new.py", "n\n");
	fp_proj(b);
	assert_string_not_equal(a, b);
	fx_write("proj/conf/w.json", "w\n");
	fp_proj(c);
	assert_string_not_equal(b, c);
	assert_string_not_equal(a, c);
	labels_of("proj/spec.yaml", "stage[0].deps[conf/w", labels,
		  sizeof(labels));
	assert_string_equal(labels, "stage[0].deps[conf/w.json]");
	assert_int_equal(unlink("proj/lib/a/new.py"), 0);
	assert_int_equal(unlink("proj/conf/w.json"), 0);
	fp_proj(b);
	assert_string_equal(a, b);
	/* the golden project keeps its value: plain deps are as they were */
	spec_edit("proj/spec.yaml", "\"512\"", "\"512\"");
	fp_proj(b);
	assert_string_equal(b, GOLDEN_STAT);
}

static void test_argv_word(void **state)
{
	char a[65], b[65], c[65], d[65];
	project();
	fp_proj(a);
	spec_edit("proj/spec.yaml", "\"512\"", "\"1024\"");
	fp_proj(b);
	assert_string_not_equal(a, b);
	/* words are length-prefixed: ["a b"], ["a", "b"], ["ab"] differ */
	spec_edit("proj/spec.yaml", "python3, tokenize.py",
		  "'python3 tokenize.py'");
	fp_proj(b);
	spec_edit("proj/spec.yaml", "python3, tokenize.py",
		  "python3tokenize.py");
	fp_proj(c);
	spec_edit("proj/spec.yaml", "python3, tokenize.py",
		  "python3, tokenize.py, ''");
	fp_proj(d);
	assert_string_not_equal(a, b);
	assert_string_not_equal(a, c);
	assert_string_not_equal(b, c);
	assert_string_not_equal(a, d);
}

static void test_shards_covered(void **state)
{
	char a[65], b[65];
	project();
	fp_proj(a);
	spec_edit("proj/spec.yaml", "shards: 3", "shards: 2");
	fp_proj(b);
	assert_string_not_equal(a, b);
}

static void test_input_size(void **state)
{
	char a[65], b[65];
	project();
	fp_proj(a);
	fx_write("proj/raw/b.jsonl", "bbbbbbb\n");
	fx_mtime("proj/raw/b.jsonl", T0 + 1, 0); /* the same mtime */
	fp_proj(b);
	assert_string_not_equal(a, b);
}

static void test_input_mtime(void **state)
{
	char a[65], b[65], c[65];
	project();
	fp_proj(a);
	struct stat st;
	assert_int_equal(stat("proj/raw/a.jsonl", &st), 0);
	if (st.st_mtim.tv_nsec != 123456789)
		skip(); /* this filesystem keeps no nanoseconds */
	/* one nanosecond later, within the same second */
	fx_mtime("proj/raw/a.jsonl", T0, 123456790);
	fp_proj(b);
	assert_string_not_equal(a, b);
	fx_mtime("proj/raw/a.jsonl", T0, 123456789);
	fp_proj(c);
	assert_string_equal(a, c);
	/* one nanosecond later, into the next second */
	fx_mtime("proj/raw/c.jsonl", T0 + 3, 0);
	fp_proj(b);
	assert_string_not_equal(a, b);
}

static void test_input_set(void **state)
{
	char a[65], b[65];
	project();
	fp_proj(a);
	fx_write("proj/raw/d.jsonl", "d\n");
	fx_mtime("proj/raw/d.jsonl", T0, 0);
	fp_proj(b);
	assert_string_not_equal(a, b);
}

static void test_not_covered(void **state)
{
	static const char *const edits[][2] = {
	    {"name: wiki-tokens", "name: another-name"},
	    {"compression: zstd", "compression: snappy"},
	    {"compression: zstd",
	     "compression: zstd:9\ncompression_adapt: false"},
	    {"chunk_size: 4MiB", "chunk_size: 64KiB"},
	    {"suffix: .bin", "suffix: .tokens"},
	    {"timeout: 1h", "timeout: 5s"},
	    {"suffix: .bin", "expire_after: 7d\npending_expiry: 1h\nkeep: 3"},
	    {"timeout: 1h", "timeout: 1h\n    memory: 1GiB\n    nice: 5"},
	    {"suffix: .bin", "env: {}"},
	};
	char a[65], b[65];
	project();
	fp_proj(a);
	for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		spec_edit("proj/spec.yaml", edits[i][0], edits[i][1]);
		fp_proj(b);
		assert_string_equal(a, b);
	}
}

static void test_content_identity(void **state)
{
	char a[65], b[65], c[65], st[65];
	project();
	fp_proj(st);
	spec_edit("proj/spec.yaml", "shards: 3",
		  "shards: 3\ninput_identity: content");
	fp_proj(a);
	assert_string_not_equal(a, st);
	fx_mtime("proj/raw/a.jsonl", T0 + 100, 5);
	fp_proj(b);
	assert_string_equal(a, b);
	fx_write("proj/raw/a.jsonl", "aaab\n");
	fp_proj(c);
	assert_string_not_equal(a, c);
}

static void test_fixed_key(void **state)
{
	char a[65], b[65];
	project();
	spec_edit("proj/spec.yaml", "stages:", "fingerprint: k1\nstages:");
	fp_proj(a);
	/* inputs, deps and argv do not enter */
	fx_write("proj/raw/a.jsonl", "zz\n");
	fx_write("proj/vocab.json", "{}\n");
	spec_edit("proj/spec.yaml", "stages:",
		  "fingerprint: k1\ninput_identity: content\nstages:");
	fp_proj(b);
	assert_string_equal(a, b);
	spec_edit2("proj/spec.yaml", "\"512\"", "\"1\"",
		   "stages:", "fingerprint: k1\nstages:");
	fp_proj(b);
	assert_string_equal(a, b);
	spec_edit("proj/spec.yaml", "stages:", "fingerprint: k2\nstages:");
	fp_proj(b);
	assert_string_not_equal(a, b);
	spec_edit2("proj/spec.yaml", "shards: 3", "shards: 2",
		   "stages:", "fingerprint: k1\nstages:");
	fp_proj(b);
	assert_string_not_equal(a, b);

	struct mf_spec *s = fx_load("proj/spec.yaml");
	struct mf_fingerprint fp;
	assert_int_equal(mf_fingerprint_compute(s, &fp, NULL), 0);
	assert_int_equal(fp.n_parts, 3);
	assert_string_equal(fp.parts[0].label, "scheme");
	assert_string_equal(fp.parts[1].label, "key");
	assert_string_equal(fp.parts[1].detail, "k1");
	assert_string_equal(fp.parts[2].label, "shards");
	assert_string_equal(fp.parts[2].detail, "2");
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

/* ---- the byte layout, written from docs/spec.md ---- */

static void put_u64(struct mf_sha256 *h, uint64_t v)
{
	uint8_t b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (56 - 8 * i));
	assert_int_equal(mf_sha256_update(h, b, 8), 0);
}

static void put_str(struct mf_sha256 *h, const char *s)
{
	put_u64(h, strlen(s));
	assert_int_equal(mf_sha256_update(h, s, strlen(s)), 0);
}

static void put_raw(struct mf_sha256 *h, const uint8_t d[32])
{
	assert_int_equal(mf_sha256_update(h, d, 32), 0);
}

static void sha_of_text(const char *text, uint8_t d[32])
{
	struct mf_sha256 h;
	assert_int_equal(mf_sha256_init(&h), 0);
	assert_int_equal(mf_sha256_update(&h, text, strlen(text)), 0);
	assert_int_equal(mf_sha256_final(&h, d), 0);
}

struct want_part {
	const char *label;
	const char *detail; /* NULL: not checked */
	uint8_t d[32];
};

static void want_number(struct want_part *w, const char *label, uint64_t v)
{
	struct mf_sha256 h;
	assert_int_equal(mf_sha256_init(&h), 0);
	put_u64(&h, v);
	assert_int_equal(mf_sha256_final(&h, w->d), 0);
	w->label = label;
}

static void want_dep(struct want_part *w, const char *label, const char *rel,
		     const char *text)
{
	uint8_t content[32];
	struct mf_sha256 h;
	sha_of_text(text, content);
	assert_int_equal(mf_sha256_init(&h), 0);
	put_str(&h, rel);
	put_raw(&h, content);
	assert_int_equal(mf_sha256_final(&h, w->d), 0);
	w->label = label;
}

static void want_input(struct want_part *w, const char *label, const char *rel,
		       uint64_t size, uint64_t mtime_ns)
{
	struct mf_sha256 h;
	assert_int_equal(mf_sha256_init(&h), 0);
	put_str(&h, "stat");
	put_str(&h, rel);
	put_u64(&h, size);
	put_u64(&h, mtime_ns);
	assert_int_equal(mf_sha256_final(&h, w->d), 0);
	w->label = label;
}

static void want_argv(struct want_part *w)
{
	static const char *const argv[] = {"python3", "tokenize.py",
					   "--max-len", "512"};
	struct mf_sha256 h;
	assert_int_equal(mf_sha256_init(&h), 0);
	put_u64(&h, 4);
	for (int i = 0; i < 4; i++)
		put_str(&h, argv[i]);
	assert_int_equal(mf_sha256_final(&h, w->d), 0);
	w->label = "stage[0].argv";
	w->detail = "python3 tokenize.py --max-len 512";
}

static void test_explain_layout(void **state)
{
	struct want_part w[8] = {{0}};
	char hex[65];
	project();
	want_number(&w[0], "scheme", MF_FINGERPRINT_SCHEME);
	w[0].detail = "1";
	want_number(&w[1], "shards", 3);
	w[1].detail = "3";
	want_argv(&w[2]);
	want_dep(&w[3], "stage[0].deps[tokenize.py]", "tokenize.py",
		 "print(1)\n");
	want_dep(&w[4], "stage[0].deps[vocab.json]", "vocab.json",
		 "{\"v\": 1}\n");
	want_input(&w[5], "input[raw/a.jsonl]", "raw/a.jsonl", 5,
		   T0 * 1000000000ULL + 123456789);
	w[5].detail = "size=5 mtime=1700000000.123456789";
	want_input(&w[6], "input[raw/b.jsonl]", "raw/b.jsonl", 7,
		   (T0 + 1) * 1000000000ULL);
	w[6].detail = "size=7 mtime=1700000001.000000000";
	want_input(&w[7], "input[raw/c.jsonl]", "raw/c.jsonl", 2,
		   (T0 + 2) * 1000000000ULL + 999999999);

	struct mf_spec *s = fx_load("proj/spec.yaml");
	struct mf_fingerprint fp;
	assert_int_equal(mf_fingerprint_compute(s, &fp, NULL), 0);
	assert_int_equal(fp.n_parts, 8);
	struct mf_sha256 all;
	assert_int_equal(mf_sha256_init(&all), 0);
	for (size_t i = 0; i < 8; i++) {
		assert_string_equal(fp.parts[i].label, w[i].label);
		if (w[i].detail)
			assert_string_equal(fp.parts[i].detail, w[i].detail);
		mf_hex(w[i].d, 32, hex);
		assert_string_equal(fp.parts[i].hex, hex);
		put_str(&all, w[i].label);
		put_raw(&all, w[i].d);
	}
	uint8_t d[32];
	sha_of_text("print(1)\n", d);
	mf_hex(d, 32, hex);
	assert_non_null(strstr(fp.parts[3].detail, hex));
	assert_int_equal(mf_sha256_final(&all, d), 0);
	mf_hex(d, 32, hex);
	assert_string_equal(fp.hex, hex);
	mf_fingerprint_release(&fp);
	assert_null(fp.parts);
	mf_fingerprint_release(NULL);
	mf_spec_free(s);
}

/* `env` is covered when it is not empty, by name and value, whatever
 * the order it is written in; with no variable the fingerprint is the one
 * of a spec without the key (GOLDEN_STAT), so older specs keep theirs. */
#define GOLDEN_ENV                                                             \
	"e8730024c899e7a1ec5c60f3b043ce2aa4299c6ce542ded325735e6581cc7f6e"

static void want_env(struct want_part *w)
{
	struct mf_sha256 h;
	assert_int_equal(mf_sha256_init(&h), 0);
	put_u64(&h, 2);
	put_str(&h, "OMP_NUM_THREADS");
	put_str(&h, "4");
	put_str(&h, "PYTHONPATH");
	put_str(&h, "lib dir");
	assert_int_equal(mf_sha256_final(&h, w->d), 0);
	w->label = "env";
	w->detail = "OMP_NUM_THREADS=4 'PYTHONPATH=lib dir'";
}

static void test_env_covered(void **state)
{
	char a[65], b[65];
	project();
	spec_edit("proj/spec.yaml", "suffix: .bin",
		  "env: {PYTHONPATH: lib dir, OMP_NUM_THREADS: 4}");
	fp_proj(a);
	assert_string_not_equal(a, GOLDEN_STAT);
	assert_string_equal(a, GOLDEN_ENV);
	spec_edit("proj/spec.yaml", "suffix: .bin",
		  "env:\n  OMP_NUM_THREADS: \"4\"\n  PYTHONPATH: lib dir");
	fp_proj(b);
	assert_string_equal(a, b);
	spec_edit("proj/spec.yaml", "suffix: .bin",
		  "env: {PYTHONPATH: lib dir, OMP_NUM_THREADS: 8}");
	fp_proj(b);
	assert_string_not_equal(a, b);
	spec_edit("proj/spec.yaml", "suffix: .bin",
		  "env: {PYTHONPATH: lib dir, OMP_NUM_THREAD: 4}");
	fp_proj(b);
	assert_string_not_equal(a, b);
	spec_edit("proj/spec.yaml", "suffix: .bin", "env: {}");
	fp_proj(b);
	assert_string_equal(b, GOLDEN_STAT);

	/* the part, between shards and the stages, and the whole hash */
	spec_edit("proj/spec.yaml", "suffix: .bin",
		  "env: {PYTHONPATH: lib dir, OMP_NUM_THREADS: 4}");
	struct want_part w;
	want_env(&w);
	struct mf_spec *s = fx_load("proj/spec.yaml");
	struct mf_fingerprint fp;
	assert_int_equal(mf_fingerprint_compute(s, &fp, NULL), 0);
	assert_int_equal(fp.n_parts, 9);
	assert_string_equal(fp.parts[1].label, "shards");
	assert_string_equal(fp.parts[2].label, "env");
	assert_string_equal(fp.parts[2].detail, w.detail);
	char hex[65];
	mf_hex(w.d, 32, hex);
	assert_string_equal(fp.parts[2].hex, hex);
	assert_string_equal(fp.parts[3].label, "stage[0].argv");
	mf_fingerprint_release(&fp);
	mf_spec_free(s);

	/* with a fixed key, env does not enter either */
	spec_edit("proj/spec.yaml", "suffix: .bin",
		  "env: {A: b}\nfingerprint: my-fixed-key");
	fp_proj(b);
	assert_string_equal(b, GOLDEN_KEY);
}

static void test_quoted_detail(void **state)
{
	project();
	spec_edit("proj/spec.yaml", "--max-len", "'a b', \"it's\", ''");
	struct mf_spec *s = fx_load("proj/spec.yaml");
	struct mf_fingerprint fp;
	assert_int_equal(mf_fingerprint_compute(s, &fp, NULL), 0);
	assert_string_equal(fp.parts[2].detail,
			    "python3 tokenize.py 'a b' 'it'\\''s' '' 512");
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

static void test_unreadable_file(void **state)
{
	project();
	struct mf_spec *s = fx_load("proj/spec.yaml");
	assert_int_equal(unlink("proj/vocab.json"), 0);
	struct mf_fingerprint fp = {.n_parts = 77};
	char *err = NULL;
	assert_int_equal(mf_fingerprint_compute(s, &fp, &err), -ENOENT);
	assert_int_equal(fp.n_parts, 77); /* untouched */
	char want[256];
	snprintf(want, sizeof(want),
		 "%s: cannot read '%s/vocab.json': No such file or directory",
		 s->path, s->dir);
	assert_string_equal(err, want);
	free(err);
	assert_int_equal(unlink("proj/raw/b.jsonl"), 0);
	fx_write("proj/vocab.json", "{}\n");
	assert_int_equal(mf_fingerprint_compute(s, &fp, &err), -ENOENT);
	snprintf(want, sizeof(want),
		 "%s: cannot stat '%s/raw/b.jsonl': No such file or directory",
		 s->path, s->dir);
	assert_string_equal(err, want);
	free(err);
	mf_spec_free(s);
}

/* Three inputs in three shards: changing b (shard 1) spoils shard 1 only;
 * changing a deps file spoils every shard. */
static void test_check_shard(void **state)
{
	project();
	struct mf_spec *s = fx_load("proj/spec.yaml");
	struct mf_fingerprint fp;
	char *err = NULL;
	assert_int_equal(mf_fingerprint_compute(s, &fp, &err), 0);
	for (uint32_t k = 0; k < 3; k++)
		assert_int_equal(mf_fingerprint_check_shard(s, &fp, k, &err),
				 0);
	fx_write("proj/raw/b.jsonl", "bbbbbbb\n");
	assert_int_equal(mf_fingerprint_check_shard(s, &fp, 0, &err), 0);
	assert_int_equal(mf_fingerprint_check_shard(s, &fp, 1, &err), -ESTALE);
	assert_non_null(err);
	assert_non_null(strstr(err, "'input[raw/b.jsonl]' changed"));
	free(err);
	err = NULL;
	fx_write("proj/vocab.json", "{\"v\": 2}\n");
	assert_int_equal(mf_fingerprint_check_shard(s, &fp, 2, &err), -ESTALE);
	assert_non_null(strstr(err, "stage[0].deps[vocab.json]"));
	free(err);
	err = NULL;
	assert_int_equal(unlink("proj/raw/c.jsonl"), 0);
	assert_int_equal(mf_fingerprint_check_shard(s, &fp, 2, &err), -ENOENT);
	assert_non_null(err);
	free(err);
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

/* `records` and `shuffle_window` enter, after `shards`, also with a
 * fixed key; a spec without them keeps the parts it had. */
static void test_records_covered(void **state)
{
	char none[65], a[65], b[65];
	project();
	fp_proj(none);
	spec_edit("proj/spec.yaml", "stages:", "records: 2048\nstages:");
	fp_proj(a);
	assert_string_not_equal(none, a);
	spec_edit("proj/spec.yaml", "stages:", "records: 2KiB\nstages:");
	fp_proj(b);
	assert_string_equal(a, b); /* the same size */
	const char *other[] = {
	    "records: 1024\nstages:",
	    "records: {size: 2048, tail: drop}\nstages:",
	    "records: lines\nstages:",
	    "records: tar\nstages:",
	    "records: 2048\nshuffle_window: 1MiB\nstages:",
	};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		spec_edit("proj/spec.yaml", "stages:", other[i]);
		fp_proj(b);
		assert_string_not_equal(a, b);
	}
	spec_edit("proj/spec.yaml",
		  "stages:", "records: 2048\nshuffle_window: 256MiB\nstages:");
	fp_proj(b);
	assert_string_equal(a, b); /* the default, written out */

	spec_edit("proj/spec.yaml",
		  "stages:", "fingerprint: k1\nrecords: lines\nstages:");
	fp_proj(a);
	spec_edit("proj/spec.yaml", "stages:", "fingerprint: k1\nstages:");
	fp_proj(b);
	assert_string_not_equal(a, b);
	spec_edit("proj/spec.yaml",
		  "stages:", "fingerprint: k1\nrecords: lines\nstages:");
	struct mf_spec *s = fx_load("proj/spec.yaml");
	struct mf_fingerprint fp;
	assert_int_equal(mf_fingerprint_compute(s, &fp, NULL), 0);
	assert_int_equal(fp.n_parts, 5);
	assert_string_equal(fp.parts[3].label, "records");
	assert_string_equal(fp.parts[3].detail, "lines");
	assert_string_equal(fp.parts[4].label, "shuffle_window");
	assert_string_equal(fp.parts[4].detail, "268435456");
	/* records: str(framing), u64(size), u64(drop) */
	struct mf_sha256 h;
	uint8_t d[32];
	char hex[65];
	assert_int_equal(mf_sha256_init(&h), 0);
	put_str(&h, "lines");
	put_u64(&h, 0);
	put_u64(&h, 0);
	assert_int_equal(mf_sha256_final(&h, d), 0);
	mf_hex(d, 32, hex);
	assert_string_equal(fp.parts[3].hex, hex);
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

/* The fingerprints of every shard of path (n of them), and the
 * snapshot's into snap. */
static void shard_fps(const char *path, char snap[65], char (*out)[65],
		      uint32_t n)
{
	struct mf_spec *s = fx_load(path);
	struct mf_fingerprint fp;
	char *err = NULL;
	assert_int_equal(mf_fingerprint_compute(s, &fp, &err), 0);
	assert_int_equal(s->shards, n);
	memcpy(snap, fp.hex, 65);
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(mf_fingerprint_shard(s, &fp, k, out[k]), 0);
		assert_true(mf_is_hex(out[k], MF_FP_HEX_LEN));
	}
	char hex[65];
	assert_int_equal(mf_fingerprint_shard(s, &fp, n, hex), -EINVAL);
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

/* Scheme 1 of shard 0 of the project (docs/spec.md, "The shard
 * fingerprint", recomputed by hand from its table): a change here makes every stored
 * shard another's (a new MF_SHARD_FINGERPRINT_SCHEME). */
#define GOLDEN_SHARD0                                                          \
	"59e6ee51ea73627b9989d2e16df7cee320b2eab615335bd70b768b8f30ab68ed"

/* A shard's fingerprint covers the stages and its own inputs and index:
 * appending an input, adding records or editing another shard's input
 * keeps it; its own input or an argv word changes it. */
static void test_shard_fingerprint(void **state)
{
	char snap[65], snap2[65], a[4][65], b[4][65];
	project();
	shard_fps("proj/spec.yaml", snap, a, 3);
	assert_string_equal(a[0], GOLDEN_SHARD0);
	assert_string_not_equal(a[0], a[1]);
	assert_string_not_equal(a[1], a[2]);
	assert_string_not_equal(a[0], snap);
	/* one shard per input, one input appended: a new fourth shard */
	fx_write("proj/raw/d.jsonl", "dd\n");
	fx_mtime("proj/raw/d.jsonl", T0 + 3, 0);
	spec_edit("proj/four.yaml", "shards: 3", "shards: 4");
	shard_fps("proj/four.yaml", snap2, b, 4);
	assert_string_not_equal(snap, snap2);
	for (int k = 0; k < 3; k++)
		assert_string_equal(a[k], b[k]);
	assert_string_not_equal(b[3], a[0]);
	/* shards: 3 kept: the input lands in shard 0 (3 mod 3) alone */
	shard_fps("proj/spec.yaml", snap2, b, 3);
	assert_string_not_equal(a[0], b[0]);
	assert_string_equal(a[1], b[1]);
	assert_string_equal(a[2], b[2]);
	assert_int_equal(unlink("proj/raw/d.jsonl"), 0);
	/* records and shuffle_window: the same bytes, another snapshot */
	spec_edit("proj/rec.yaml",
		  "suffix:", "records: 8\nshuffle_window: 1KiB\nsuffix:");
	shard_fps("proj/rec.yaml", snap2, b, 3);
	assert_string_not_equal(snap, snap2);
	for (int k = 0; k < 3; k++)
		assert_string_equal(a[k], b[k]);
	/* an input of shard 1 touched: shard 1 alone */
	fx_mtime("proj/raw/b.jsonl", T0 + 7, 0);
	shard_fps("proj/spec.yaml", snap2, b, 3);
	assert_string_equal(a[0], b[0]);
	assert_string_not_equal(a[1], b[1]);
	assert_string_equal(a[2], b[2]);
	fx_mtime("proj/raw/b.jsonl", T0 + 1, 0);
	/* an argv word: every shard */
	spec_edit("proj/spec.yaml", "\"512\"", "\"1024\"");
	shard_fps("proj/spec.yaml", snap2, b, 3);
	for (int k = 0; k < 3; k++)
		assert_string_not_equal(a[k], b[k]);
	/* identity: its output, in every shard */
	fx_write("proj/ver.txt", "1.0\n");
	spec_edit("proj/spec.yaml",
		  "stages:", "identity: [cat, ver.txt]\nstages:");
	shard_fps("proj/spec.yaml", snap2, b, 3);
	for (int k = 0; k < 3; k++)
		assert_string_not_equal(a[k], b[k]);
	char c[3][65];
	fx_write("proj/ver.txt", "1.1\n");
	shard_fps("proj/spec.yaml", snap2, c, 3);
	for (int k = 0; k < 3; k++)
		assert_string_not_equal(b[k], c[k]);
	fx_write("proj/ver.txt", "1.0\n");
	shard_fps("proj/spec.yaml", snap2, c, 3);
	for (int k = 0; k < 3; k++)
		assert_string_equal(b[k], c[k]);
	/* a fixed key: the key, shards and the index */
	spec_edit("proj/spec.yaml", "stages:", "fingerprint: k1\nstages:");
	shard_fps("proj/spec.yaml", snap2, a, 3);
	spec_edit("proj/spec.yaml", "stages:", "fingerprint: k2\nstages:");
	shard_fps("proj/spec.yaml", snap2, b, 3);
	assert_string_not_equal(a[0], a[1]);
	assert_string_not_equal(a[0], b[0]);
}

/* assign: hash is a part of its own (other fingerprints stay), puts each
 * input in the shard XXH3-64 of its relative path says, and an input
 * sorting in the middle changes its own shard's fingerprint alone. */
static void test_assign_hash(void **state)
{
	char order[65], snap[65], a[3][65], b[3][65];
	project();
	fp_proj(order);
	spec_edit("proj/spec.yaml", "shards: 3", "shards: 3\nassign: hash");
	shard_fps("proj/spec.yaml", snap, a, 3);
	assert_string_not_equal(order, snap);
	struct mf_spec *s = fx_load("proj/spec.yaml");
	assert_int_equal(s->assign, MF_ASSIGN_HASH);
	for (size_t i = 0; i < s->n_inputs; i++)
		assert_int_equal(
		    mf_spec_input_shard(s, i),
		    XXH3_64bits(s->inputs_rel[i], strlen(s->inputs_rel[i])) %
			3);
	mf_spec_free(s);
	/* an input sorting between a and b */
	fx_write("proj/raw/ab.jsonl", "ab\n");
	fx_mtime("proj/raw/ab.jsonl", T0 + 5, 0);
	s = fx_load("proj/spec.yaml");
	uint32_t lands = 0;
	for (size_t i = 0; i < s->n_inputs; i++)
		if (strcmp(s->inputs_rel[i], "raw/ab.jsonl") == 0)
			lands = mf_spec_input_shard(s, i);
	mf_spec_free(s);
	shard_fps("proj/spec.yaml", snap, b, 3);
	for (uint32_t k = 0; k < 3; k++)
		if (k == lands)
			assert_string_not_equal(a[k], b[k]);
		else
			assert_string_equal(a[k], b[k]);
}

/* ---- identity ---- */

/* SPEC with `identity: ARGV` (a YAML flow list) in proj/id.yaml. */
static void identity_spec(const char *argv)
{
	char line[512];
	snprintf(line, sizeof(line), "identity: %s\nstages:", argv);
	spec_edit("proj/id.yaml", "stages:", line);
}

/* The part labelled label of path's fingerprint: its hex and detail. */
static void part_of(const char *path, const char *label, char hex[65],
		    char *detail, size_t len)
{
	struct mf_spec *s = fx_load(path);
	struct mf_fingerprint fp;
	char *err = NULL;
	int rc = mf_fingerprint_compute(s, &fp, &err);
	if (rc)
		print_error("fingerprint: %s\n", err ? err : "?");
	assert_int_equal(rc, 0);
	size_t i = 0;
	while (i < fp.n_parts && strcmp(fp.parts[i].label, label))
		i++;
	assert_true(i < fp.n_parts);
	memcpy(hex, fp.parts[i].hex, 65);
	snprintf(detail, len, "%s", fp.parts[i].detail);
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

/* The fingerprint of path fails with rc and a message holding want. */
static void fp_fails(const char *path, int want_rc, const char *want)
{
	struct mf_spec *s = fx_load(path);
	struct mf_fingerprint fp;
	char *err = NULL;
	int rc = mf_fingerprint_compute(s, &fp, &err);
	if (!err || !strstr(err, want))
		print_error("fingerprint: %d %s\n", rc, err ? err : "?");
	assert_int_equal(rc, want_rc);
	assert_non_null(err);
	assert_non_null(strstr(err, s->path)); /* the spec file */
	assert_non_null(strstr(err, want));
	free(err);
	mf_spec_free(s);
}

/* H(str(text)): the identity part of a command that printed text. */
static void identity_hex(const char *text, size_t len, char hex[65])
{
	struct mf_sha256 h;
	uint8_t d[32];
	assert_int_equal(mf_sha256_init(&h), 0);
	put_u64(&h, len);
	assert_int_equal(mf_sha256_update(&h, text, len), 0);
	assert_int_equal(mf_sha256_final(&h, d), 0);
	mf_hex(d, 32, hex);
}

/* The identity command's standard output is a part, after env and before
 * the stages; another output is another fingerprint, for every shard;
 * with a fixed key it is not run. */
static void test_identity_covered(void **state)
{
	char a[65], b[65], hex[65], want[65], detail[256];
	char snap[65], sa[3][65], sb[3][65];
	project();
	fx_write("proj/ver.txt", "1.0\n");
	fp_proj(a);
	identity_spec("[cat, ver.txt]");
	fp_of("proj/id.yaml", b);
	assert_string_not_equal(a, b);
	part_of("proj/id.yaml", "identity", hex, detail, sizeof(detail));
	identity_hex("1.0\n", 4, want);
	assert_string_equal(hex, want);
	assert_string_equal(detail, "size=4 1.0");
	labels_of("proj/id.yaml", "", detail, sizeof(detail));
	assert_non_null(
	    strstr(detail, "scheme shards identity stage[0].argv "));
	shard_fps("proj/id.yaml", snap, sa, 3);
	fx_write("proj/ver.txt", "1.1\n");
	fp_of("proj/id.yaml", a);
	assert_string_not_equal(a, b);
	shard_fps("proj/id.yaml", snap, sb, 3);
	for (int k = 0; k < 3; k++)
		assert_string_not_equal(sa[k], sb[k]);
	fx_write("proj/ver.txt", "1.0\n");
	fp_of("proj/id.yaml", a);
	assert_string_equal(a, b);
	/* the bytes as they came: a NUL, no newline */
	identity_spec("[printf, 'a\\0b']");
	part_of("proj/id.yaml", "identity", hex, detail, sizeof(detail));
	identity_hex("a\0b", 3, want);
	assert_string_equal(hex, want);
	assert_string_equal(detail, "size=3 'a?b'");
	/* a fixed key: not run, so a failing command does not matter */
	spec_edit("proj/id.yaml",
		  "stages:", "identity: [false]\nfingerprint: k\nstages:");
	fp_of("proj/id.yaml", a);
	spec_edit("proj/id.yaml", "stages:", "fingerprint: k\nstages:");
	fp_of("proj/id.yaml", b);
	assert_string_equal(a, b);
}

/* It runs in the spec folder with the stages' clean environment and the
 * spec's env, no MATFS_* variable, and stdin at its end. */
static void test_identity_environment(void **state)
{
	char hex[65], want[65], detail[256], text[512];
	struct fx *f = *state;
	project();
	assert_int_equal(setenv("MF_TEST_SECRET", "leak", 1), 0);
	spec_edit("proj/id.yaml", "stages:",
		  "env: {FOO: bar}\n"
		  "identity: [sh, -c, 'echo \"${MF_TEST_SECRET-unset} $FOO "
		  "$(pwd) $(env | grep -c ^MATFS_) $(wc -c)\"']\n"
		  "stages:");
	part_of("proj/id.yaml", "identity", hex, detail, sizeof(detail));
	unsetenv("MF_TEST_SECRET");
	snprintf(text, sizeof(text), "unset bar %s/proj 0 0\n", f->root);
	identity_hex(text, strlen(text), want);
	if (strcmp(hex, want))
		print_error("identity printed: %s\n", detail);
	assert_string_equal(hex, want);
}

/* A command that fails, is not found, prints too much or does not end
 * makes the fingerprint fail, naming the spec and the command; one that
 * never ends, or leaves a child holding its output, is killed with its
 * process group at the bound. */
static void test_identity_refused(void **state)
{
	project();
	identity_spec("[sh, -c, 'echo partial; echo first >&2; "
		      "echo \"no module\" >&2; exit 3']");
	fp_fails("proj/id.yaml", -EIO,
		 ": identity (sh -c 'echo partial; echo first >&2; echo "
		 "\"no "
		 "module\" >&2; exit 3'): exited with status 3: no module");
	identity_spec("[sh, -c, 'kill -9 $$']");
	fp_fails("proj/id.yaml", -EIO,
		 "identity (sh -c 'kill -9 $$'): killed by signal 9 "
		 "(SIGKILL)");
	identity_spec("[no-such-program-here]");
	fp_fails("proj/id.yaml", -ENOENT,
		 "identity (no-such-program-here): "
		 "'no-such-program-here' not "
		 "found in PATH");
	identity_spec("[./ver.txt]");
	fx_write("proj/ver.txt", "1\n");
	fp_fails("proj/id.yaml", -EACCES,
		 "identity (./ver.txt): './ver.txt' is not an executable "
		 "file");
	/* exactly the bound is fine, a byte more is not; a flood is cut */
	char hex[65], detail[256];
	identity_spec("[head, -c, '65536', /dev/zero]");
	part_of("proj/id.yaml", "identity", hex, detail, sizeof(detail));
	char nuls[128];
	memset(nuls, '?', 64);
	snprintf(nuls + 64, sizeof(nuls) - 64, "...'");
	assert_string_equal(detail + strlen("size=65536 '"), nuls);
	identity_spec("[head, -c, '65537', /dev/zero]");
	fp_fails("proj/id.yaml", -EFBIG,
		 "identity (head -c 65537 /dev/zero): wrote more than 65536 "
		 "bytes on its standard output");
	identity_spec("[yes]");
	fp_fails("proj/id.yaml", -EFBIG, "wrote more than 65536 bytes");
	/* it exits at once, a child it left holds its output: the bound,
	 * then the child is killed with the group */
	identity_spec("[sh, -c, 'sleep 1000 & echo $! >bg.pid; echo x']");
	fp_fails("proj/id.yaml", -ETIME, "did not end within 10 s");
	FILE *p = fopen("proj/bg.pid", "r");
	assert_non_null(p);
	int pid = 0;
	assert_int_equal(fscanf(p, "%d", &pid), 1);
	fclose(p);
	/* SIGKILL was sent before the call returned: the child is gone, or
	 * a zombie no init reaped yet, once the kernel delivered it */
	char st = 'S';
	for (int i = 0; i < 500 && st != 'Z' && st != 'X'; i++) {
		char path[64], stat[256] = "";
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		p = fopen(path, "r");
		if (!p) {
			st = 'X';
			break;
		}
		assert_non_null(fgets(stat, sizeof(stat), p));
		fclose(p);
		const char *close = strrchr(stat, ')');
		assert_non_null(close);
		st = close[2];
		if (st != 'Z' && st != 'X')
			usleep(10000);
	}
	if (st != 'Z' && st != 'X')
		kill(pid, SIGKILL);
	assert_true(st == 'Z' || st == 'X');
}

#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_golden),
	    T(test_layout_ignored),
	    T(test_project_move),
	    T(test_deps_byte),
	    T(test_deps_glob_folder),
	    T(test_argv_word),
	    T(test_shards_covered),
	    T(test_input_size),
	    T(test_input_mtime),
	    T(test_input_set),
	    T(test_not_covered),
	    T(test_content_identity),
	    T(test_fixed_key),
	    T(test_explain_layout),
	    T(test_quoted_detail),
	    T(test_unreadable_file),
	    T(test_check_shard),
	    T(test_env_covered),
	    T(test_records_covered),
	    T(test_shard_fingerprint),
	    T(test_assign_hash),
	    T(test_identity_covered),
	    T(test_identity_environment),
	    T(test_identity_refused),
	};
	return cmocka_run_group_tests_name("fingerprint", tests, NULL, NULL);
}
