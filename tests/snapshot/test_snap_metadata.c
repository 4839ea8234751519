/*
 * test_snap_metadata.c - snapshot.metadata's text: written from a struct
 * mf_snapshot_meta and parsed back field for field, the exact bytes of
 * the format (docs/format.md), a write skipped when the bytes are there,
 * and malformed files refused with -EBADMSG, a reason (MF_CORRUPT) and a
 * sentence that says what is wrong.
 *
 * Not for: writing the file's bytes atomically (test_snap_store.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mf_snapshot.h"
#include "snap_testutil.h"

#define HEX_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
/* a spec that holds a "spec:" line of its own, and no final newline */
#define SPEC "name: wiki\nspec:\nshards: 4"

static const struct mf_meta_part parts[] = {
    {HEX_A, "scheme"},
    {HEX_B, "input[raw/a b.jsonl]"},
};

static const struct mf_snapshot_meta sample = {
    .fp = TU_FP,
    .name = "wiki",
    .spec_path = "/etc/matfs/pipelines/wiki.yaml",
    .shards = 4,
    .compression = "zstd:3",
    .chunk_size = 1048576,
    .suffix = ".jsonl",
    .expire_after = -1,
    .pending_expiry = 86400,
    .keep = 2,
    .parts = parts,
    .n_parts = 2,
    .spec = SPEC,
    .spec_len = sizeof(SPEC) - 1,
};

static const char sample_text[] = "matfs-snapshot 1\n"
				  "fingerprint " TU_FP "\n"
				  "name wiki\n"
				  "spec_path /etc/matfs/pipelines/wiki.yaml\n"
				  "shards 4\n"
				  "compression zstd:3\n"
				  "chunk_size 1048576\n"
				  "suffix .jsonl\n"
				  "expire_after -1\n"
				  "pending_expiry 86400\n"
				  "keep 2\n"
				  "component " HEX_A " scheme\n"
				  "component " HEX_B " input[raw/a b.jsonl]\n"
				  "spec:\n" SPEC;

static void assert_same(const struct mf_snapshot_meta *a,
			const struct mf_snapshot_meta *b)
{
	assert_string_equal(a->fp, b->fp);
	assert_string_equal(a->name, b->name);
	assert_string_equal(a->spec_path, b->spec_path);
	assert_int_equal(a->shards, b->shards);
	assert_string_equal(a->compression, b->compression);
	assert_int_equal(a->chunk_size, b->chunk_size);
	assert_string_equal(a->suffix, b->suffix);
	assert_int_equal(a->expire_after, b->expire_after);
	assert_int_equal(a->pending_expiry, b->pending_expiry);
	assert_int_equal(a->keep, b->keep);
	assert_int_equal(a->n_parts, b->n_parts);
	for (size_t i = 0; i < a->n_parts; i++) {
		assert_string_equal(a->parts[i].hex, b->parts[i].hex);
		assert_string_equal(a->parts[i].label, b->parts[i].label);
	}
	assert_int_equal(a->spec_len, b->spec_len);
	assert_memory_equal(a->spec, b->spec, a->spec_len);
}

static void test_format_bytes(void **state)
{
	(void)state;
	char *text;
	size_t len;
	assert_int_equal(mf_snapshot_meta_format(&sample, &text, &len), 0);
	assert_int_equal(len, sizeof(sample_text) - 1);
	assert_memory_equal(text, sample_text, len);
	free(text);
	struct mf_snapshot_meta bad = sample;
	bad.spec_path = NULL;
	assert_int_equal(mf_snapshot_meta_format(&bad, &text, &len), -EINVAL);
	/* a line break in a field would be read as other keys: refused */
	bad.spec_path = "/p/aa\nowner 0\nspec:\nx.yaml";
	assert_int_equal(mf_snapshot_meta_format(&bad, &text, &len), -EINVAL);
	bad = sample;
	bad.suffix = ".x\nowner 0";
	assert_int_equal(mf_snapshot_meta_format(&bad, &text, &len), -EINVAL);
	/* a label (an input's path) keeps its line: control characters are
	 * written as '?', and no owner line comes of it */
	struct mf_meta_part odd[] = {
	    {TU_FP, "input[in/x\nowner 0\nname tokens\n.txt]"}};
	struct mf_snapshot_meta lab = sample;
	lab.parts = odd;
	lab.n_parts = 1;
	assert_int_equal(mf_snapshot_meta_format(&lab, &text, &len), 0);
	assert_non_null(
	    memmem(text, len, "input[in/x?owner 0?name tokens?.txt]\n", 37));
	struct mf_snapshot_meta m;
	char why[160];
	assert_int_equal(
	    mf_snapshot_meta_parse(text, len, TU_FP, &m, why, sizeof(why)), 0);
	free(text);
	assert_false(m.has_owner);
	assert_string_equal(m.name, "wiki");
	mf_snapshot_meta_release(&m);
}

static void test_round_trip(void **state)
{
	(void)state;
	char *text;
	size_t len;
	char why[160];
	struct mf_snapshot_meta m;
	assert_int_equal(mf_snapshot_meta_format(&sample, &text, &len), 0);
	assert_int_equal(
	    mf_snapshot_meta_parse(text, len, TU_FP, &m, why, sizeof(why)), 0);
	free(text); /* the parse keeps a copy */
	assert_same(&m, &sample);
	mf_snapshot_meta_release(&m);
	assert_null(m.owned_text);
	mf_snapshot_meta_release(NULL);
	/* no components and no spec */
	struct mf_snapshot_meta bare = sample;
	bare.n_parts = 0;
	bare.spec = NULL;
	bare.spec_len = 0;
	bare.suffix = "";
	assert_int_equal(mf_snapshot_meta_format(&bare, &text, &len), 0);
	assert_int_equal(
	    mf_snapshot_meta_parse(text, len, TU_FP, &m, why, sizeof(why)), 0);
	free(text);
	bare.spec = "";
	assert_same(&m, &bare);
	assert_false(m.has_owner);
	mf_snapshot_meta_release(&m);
	/* the owner, when there is one, as a line of its own */
	struct mf_snapshot_meta owned = sample;
	owned.has_owner = true;
	owned.owner = 1234;
	assert_int_equal(mf_snapshot_meta_format(&owned, &text, &len), 0);
	assert_non_null(memmem(text, len, "\nowner 1234\n", 12));
	assert_int_equal(
	    mf_snapshot_meta_parse(text, len, TU_FP, &m, why, sizeof(why)), 0);
	free(text);
	assert_same(&m, &sample);
	assert_true(m.has_owner);
	assert_int_equal(m.owner, 1234);
	mf_snapshot_meta_release(&m);
	const char bad_owner[] = "matfs-snapshot 1\nowner -3\n";
	assert_int_equal(mf_snapshot_meta_parse(bad_owner,
						sizeof(bad_owner) - 1, TU_FP,
						&m, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "bad owner"));
}

/* Through the store: put writes once, load gives it back with its mtime. */
static void test_put_load(void **state)
{
	struct tu_store *f = *state;
	struct mf_snapshot_meta m;
	char why[160];
	assert_int_equal(
	    mf_store_load_metadata(f->st, TU_FP, &m, why, sizeof(why)),
	    -ENOENT);
	assert_string_equal(why, "");
	assert_int_equal(mf_store_put_metadata(f->st, &sample), 0);
	struct stat a, b;
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_METADATA, TU_FP, NULL, 0, &a), 0);
	assert_int_equal(
	    mf_store_load_metadata(f->st, TU_FP, &m, why, sizeof(why)), 0);
	assert_same(&m, &sample);
	assert_int_equal(m.mtime, a.st_mtime);
	mf_snapshot_meta_release(&m);
	/* the same bytes again: the file is left as it is (a rewrite is a
	 * rename, so a new inode) */
	assert_int_equal(mf_store_put_metadata(f->st, &sample), 0);
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_METADATA, TU_FP, NULL, 0, &b), 0);
	assert_int_equal(a.st_ino, b.st_ino);
	struct mf_snapshot_meta other = sample;
	other.keep = 3;
	assert_int_equal(mf_store_put_metadata(f->st, &other), 0);
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_METADATA, TU_FP, NULL, 0, &b), 0);
	assert_int_not_equal(a.st_ino, b.st_ino);
	/* a metadata file that is not one */
	assert_int_equal(mf_store_write_metadata(f->st, TU_FP, "hello\n", 6),
			 0);
	assert_int_equal(
	    mf_store_load_metadata(f->st, TU_FP, &m, why, sizeof(why)),
	    -EBADMSG);
	assert_string_equal(why, "line 1: not a matfs-snapshot 1 document");
	assert_string_equal(mf_corrupt_reason(), "metadata version line");
}

/* sample_text with the line starting with `key ` replaced by `line`. */
static char *edited(const char *key, const char *line)
{
	static char buf[2048];
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "\n%s ", key);
	const char *at = strstr(sample_text, prefix);
	assert_non_null(at);
	const char *eol = strchr(at + 1, '\n');
	snprintf(buf, sizeof(buf), "%.*s\n%s%s", (int)(at - sample_text),
		 sample_text, line, eol);
	return buf;
}

/* Parses text; expects -EBADMSG with that sentence and reason. */
static void refused(const char *text, size_t len, const char *why_want,
		    const char *reason)
{
	struct mf_snapshot_meta m = {0};
	char why[160];
	mf_corrupt_clear();
	assert_int_equal(
	    mf_snapshot_meta_parse(text, len, TU_FP, &m, why, sizeof(why)),
	    -EBADMSG);
	assert_string_equal(why, why_want);
	assert_string_equal(mf_corrupt_reason(), reason);
	assert_null(m.owned_text);
}

static void test_malformed(void **state)
{
	(void)state;
	const char *t;
	t = edited("spec_path", "spec_paths /x");
	refused(t, strlen(t), "no 'spec_path' line", "metadata field missing");
	t = edited("shards", "shards 0");
	refused(t, strlen(t), "line 5: bad shards '0'", "metadata field");
	t = edited("chunk_size", "chunk_size 12");
	refused(t, strlen(t), "line 7: bad chunk_size '12'", "metadata field");
	t = edited("compression", "compression lz4");
	refused(t, strlen(t), "line 6: bad compression 'lz4'",
		"metadata field");
	t = edited("spec_path", "spec_path relative.yaml");
	refused(t, strlen(t), "line 4: bad spec_path 'relative.yaml'",
		"metadata field");
	t = edited("name", "name a/b");
	refused(t, strlen(t), "line 3: bad name 'a/b'", "metadata field");
	t = edited("fingerprint", "fingerprint " TU_FP2);
	refused(t, strlen(t),
		"names fingerprint fedcba987654, not its folder's",
		"metadata fingerprint");
	refused("matfs-snapshot 2\n", 17, "unknown matfs-snapshot version '2'",
		"metadata version");
	refused("name x\nmatfs-snapshot 1\n", 24,
		"line 1: not a matfs-snapshot 1 document",
		"metadata version line");
	refused("", 0, "no 'matfs-snapshot' line", "metadata field missing");
	refused(sample_text, sizeof(sample_text), "holds a NUL byte",
		"metadata NUL byte");
}

static void test_lenient(void **state)
{
	(void)state;
	struct mf_snapshot_meta m;
	char why[160];
	/* a key a later matfs may add, a bare key, a component that is not */
	const char *t = edited("keep",
			       "keep 2\nfuture_key some value\n"
			       "component nothex label");
	char buf[2048];
	snprintf(buf, sizeof(buf), "%s", t);
	char *suffix = strstr(buf, "suffix .jsonl");
	memmove(suffix + 6, suffix + 13, strlen(suffix + 13) + 1);
	assert_int_equal(mf_snapshot_meta_parse(buf, strlen(buf), TU_FP, &m,
						why, sizeof(why)),
			 0);
	assert_string_equal(m.suffix, "");
	assert_int_equal(m.keep, 2);
	assert_int_equal(m.n_parts, 2);
	mf_snapshot_meta_release(&m);
}

int main(void)
{
#define T(fn)                                                                  \
	cmocka_unit_test_setup_teardown(fn, tu_store_setup, tu_store_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_format_bytes), T(test_round_trip), T(test_put_load),
	    T(test_malformed),	  T(test_lenient),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
