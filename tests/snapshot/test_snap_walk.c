/*
 * test_snap_walk.c - the store's names: mf_store_walk classifies every
 * entry of a folder (fingerprint, metadata and its temp file, run, shard,
 * shard temp file, stray) by name and own type, never follows a symlink
 * (a planted link is a stray, and a folder that is a link is refused);
 * mf_store_rel names each kind; mf_store_lstat stats one entry;
 * mf_store_tmp_remove takes only what the walk calls a shard temp file.
 *
 * Not for: listing and removing (test_snap_store.c), the metadata text
 * (test_snap_metadata.c).
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
#include <unistd.h>

#include "mf_snapshot.h"
#include "snap_testutil.h"

#define CS 4096
#define SEEN_MAX 32

/* What one walk saw, one row an entry. */
struct seen {
	size_t n;
	struct {
		enum mf_store_kind kind;
		char name[256], rel[MF_STORE_REL_MAX], fp[80], run[40];
		uint32_t shard;
		mode_t mode;
	} e[SEEN_MAX];
};

static int record(void *arg, const struct mf_store_entry *e)
{
	struct seen *s = arg;
	assert_true(s->n < SEEN_MAX);
	s->e[s->n].kind = e->kind;
	snprintf(s->e[s->n].name, sizeof(s->e[0].name), "%s", e->name);
	snprintf(s->e[s->n].rel, sizeof(s->e[0].rel), "%s", e->rel);
	snprintf(s->e[s->n].fp, sizeof(s->e[0].fp), "%s", e->fp);
	snprintf(s->e[s->n].run, sizeof(s->e[0].run), "%s", e->run);
	s->e[s->n].shard = e->shard;
	s->e[s->n].mode = e->mode;
	s->n++;
	return 0;
}

/* The row of name; fails the test when the walk did not see it. */
static size_t row(const struct seen *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->e[i].name, name) == 0)
			return i;
	fail_msg("the walk did not see '%s'", name);
	return 0;
}

static void expect(const struct seen *s, const char *name,
		   enum mf_store_kind kind, mode_t type)
{
	size_t i = row(s, name);
	if (s->e[i].kind != kind)
		fail_msg("'%s': kind %d, expected %d", name, s->e[i].kind,
			 kind);
	assert_int_equal(s->e[i].mode & S_IFMT, type);
}

static const char *at(const struct tu_store *f, const char *rel)
{
	static char path[1024];
	snprintf(path, sizeof(path), "%s/snapshots/%s", f->dir, rel);
	return path;
}

static void touch(const struct tu_store *f, const char *rel)
{
	assert_int_equal(tu_write_file(at(f, rel), "x", 1), 0);
}

static void link_to(const struct tu_store *f, const char *target,
		    const char *rel)
{
	assert_int_equal(symlink(target, at(f, rel)), 0);
}

#define FPD TU_FP "/"
#define RUND TU_FP "/" TU_RUN "/"

/* A store with one of each kind of entry, and strays at every level. */
static void plant(struct tu_store *f)
{
	uint8_t data[CS];
	const struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 1, false};
	tu_fill(data, sizeof(data), 7, true);
	assert_int_equal(tu_write_shard(f->st, 0, &cfg, data, CS, NULL), 0);
	assert_int_equal(mf_store_write_metadata(f->st, TU_FP, "m", 1), 0);
	/* the top */
	touch(f, "README");
	link_to(f, TU_FP, TU_FP2);
	assert_int_equal(mkdir(at(f,
				  "0123456789ABCDEF0123456789ABCDEF0123456"
				  "789ABCDEF0123456789ABCDEF"),
			       0755),
			 0);
	/* the fingerprint folder */
	touch(f, FPD "snapshot.metadata.tmp-0011223344556677");
	assert_int_equal(mkdir(at(f, FPD "junk"), 0755), 0);
	link_to(f, TU_RUN, FPD TU_RUN2);
	/* the run folder */
	touch(f, RUND "shard-00001.tmp");
	touch(f, RUND "shard-1.mfs");
	touch(f, RUND "shard-00005.mfs.bak");
	touch(f, RUND "notes.txt");
	link_to(f, "shard-00000.mfs", RUND "shard-00002.mfs");
	assert_int_equal(mkfifo(at(f, RUND "shard-00003.mfs"), 0644), 0);
	assert_int_equal(mkdir(at(f, RUND "shard-00004.mfs"), 0755), 0);
}

static void test_walk_top(void **state)
{
	struct tu_store *f = *state;
	plant(f);
	struct seen s = {0};
	assert_int_equal(mf_store_walk(f->st, NULL, NULL, record, &s), 0);
	assert_int_equal(s.n, 4);
	expect(&s, TU_FP, MF_STORE_FP, S_IFDIR);
	expect(&s, TU_FP2, MF_STORE_STRAY, S_IFLNK);
	expect(&s, "README", MF_STORE_STRAY, S_IFREG);
	expect(
	    &s,
	    "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
	    MF_STORE_STRAY, S_IFDIR);
	size_t i = row(&s, TU_FP);
	assert_string_equal(s.e[i].rel, "snapshots/" TU_FP);
	assert_string_equal(s.e[i].fp, "");
	assert_string_equal(s.e[i].run, "");
}

static void test_walk_fp(void **state)
{
	struct tu_store *f = *state;
	plant(f);
	struct seen s = {0};
	assert_int_equal(mf_store_walk(f->st, TU_FP, NULL, record, &s), 0);
	assert_int_equal(s.n, 5);
	expect(&s, "snapshot.metadata", MF_STORE_METADATA, S_IFREG);
	expect(&s, "snapshot.metadata.tmp-0011223344556677",
	       MF_STORE_METADATA_TMP, S_IFREG);
	expect(&s, TU_RUN, MF_STORE_RUN, S_IFDIR);
	expect(&s, TU_RUN2, MF_STORE_STRAY, S_IFLNK);
	expect(&s, "junk", MF_STORE_STRAY, S_IFDIR);
	size_t i = row(&s, TU_RUN);
	assert_string_equal(s.e[i].rel, "snapshots/" TU_FP "/" TU_RUN);
	assert_string_equal(s.e[i].fp, TU_FP);
	assert_string_equal(s.e[i].run, "");
}

static void test_walk_run(void **state)
{
	struct tu_store *f = *state;
	plant(f);
	struct seen s = {0};
	assert_int_equal(mf_store_walk(f->st, TU_FP, TU_RUN, record, &s), 0);
	assert_int_equal(s.n, 8);
	expect(&s, "shard-00000.mfs", MF_STORE_SHARD, S_IFREG);
	expect(&s, "shard-00001.tmp", MF_STORE_SHARD_TMP, S_IFREG);
	/* names the writer never writes, and the wrong types */
	expect(&s, "shard-1.mfs", MF_STORE_STRAY, S_IFREG);
	expect(&s, "shard-00005.mfs.bak", MF_STORE_STRAY, S_IFREG);
	expect(&s, "notes.txt", MF_STORE_STRAY, S_IFREG);
	expect(&s, "shard-00002.mfs", MF_STORE_STRAY, S_IFLNK);
	expect(&s, "shard-00003.mfs", MF_STORE_STRAY, S_IFIFO);
	expect(&s, "shard-00004.mfs", MF_STORE_STRAY, S_IFDIR);
	size_t i = row(&s, "shard-00001.tmp");
	assert_int_equal(s.e[i].shard, 1);
	assert_string_equal(s.e[i].rel, "snapshots/" RUND "shard-00001.tmp");
	assert_string_equal(s.e[i].fp, TU_FP);
	assert_string_equal(s.e[i].run, TU_RUN);
}

/* A folder that is a symlink is never walked through. */
static void test_walk_symlinked_folders(void **state)
{
	struct tu_store *f = *state;
	plant(f);
	struct seen s = {0};
	assert_int_equal(mf_store_walk(f->st, TU_FP2, NULL, record, &s),
			 -ELOOP);
	assert_int_equal(mf_store_walk(f->st, TU_FP2, TU_RUN, record, &s),
			 -ELOOP);
	assert_int_equal(mf_store_walk(f->st, TU_FP, TU_RUN2, record, &s),
			 -ELOOP);
	assert_int_equal(s.n, 0);
	assert_int_equal(mf_store_walk(f->st, TU_FP,
				       "00000000000000000000"
				       "000000000000",
				       record, &s),
			 -ENOENT);
}

static int stop_at_first(void *arg, const struct mf_store_entry *e)
{
	(void)e;
	(*(int *)arg)++;
	return -ECANCELED;
}

static void test_walk_errors(void **state)
{
	struct tu_store *f = *state;
	plant(f);
	int calls = 0;
	assert_int_equal(
	    mf_store_walk(f->st, TU_FP, TU_RUN, stop_at_first, &calls),
	    -ECANCELED);
	assert_int_equal(calls, 1);
	struct seen s = {0};
	assert_int_equal(mf_store_walk(f->st, NULL, TU_RUN, record, &s),
			 -EINVAL);
	assert_int_equal(mf_store_walk(f->st, "../x", NULL, record, &s),
			 -EINVAL);
	assert_int_equal(mf_store_walk(f->st, TU_FP, "..", record, &s),
			 -EINVAL);
	assert_int_equal(mf_store_walk(f->st, TU_FP, NULL, NULL, &s), -EINVAL);
	assert_int_equal(s.n, 0);
}

static void test_rel(void **state)
{
	(void)state;
	char buf[MF_STORE_REL_MAX];
	mf_store_rel(buf, sizeof(buf), MF_STORE_FP, TU_FP, NULL, 0);
	assert_string_equal(buf, "snapshots/" TU_FP);
	mf_store_rel(buf, sizeof(buf), MF_STORE_METADATA, TU_FP, NULL, 0);
	assert_string_equal(buf, "snapshots/" FPD "snapshot.metadata");
	mf_store_rel(buf, sizeof(buf), MF_STORE_RUN, TU_FP, TU_RUN, 0);
	assert_string_equal(buf, "snapshots/" TU_FP "/" TU_RUN);
	mf_store_rel(buf, sizeof(buf), MF_STORE_SHARD, TU_FP, TU_RUN, 42);
	assert_string_equal(buf, "snapshots/" RUND "shard-00042.mfs");
	mf_store_rel(buf, sizeof(buf), MF_STORE_SHARD_TMP, TU_FP, TU_RUN,
		     123456);
	assert_string_equal(buf, "snapshots/" RUND "shard-123456.tmp");
	mf_store_rel(buf, sizeof(buf), MF_STORE_STRAY, TU_FP, TU_RUN, 0);
	assert_string_equal(buf, "");
	mf_store_rel(buf, 12, MF_STORE_FP, TU_FP, NULL, 0);
	assert_string_equal(buf, "snapshots/0");
}

static void test_lstat(void **state)
{
	struct tu_store *f = *state;
	plant(f);
	struct stat sb;
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_FP, TU_FP, NULL, 0, &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_METADATA, TU_FP, NULL, 0, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_int_equal(sb.st_size, 1);
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_RUN, TU_FP, TU_RUN, 0, &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_SHARD, TU_FP, TU_RUN, 0, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	/* the entry itself may be a link: it is not followed */
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_SHARD, TU_FP, TU_RUN, 2, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_FP, TU_FP2, NULL, 0, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	/* a link above it is refused */
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_METADATA, TU_FP2, NULL, 0, &sb),
	    -ELOOP);
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_SHARD, TU_FP, TU_RUN2, 0, &sb),
	    -ELOOP);
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_SHARD, TU_FP, TU_RUN, 9, &sb),
	    -ENOENT);
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_STRAY, TU_FP, NULL, 0, &sb),
	    -EINVAL);
	assert_int_equal(
	    mf_store_lstat(f->st, MF_STORE_RUN, TU_FP, NULL, 0, &sb), -EINVAL);
}

/* gc's removal of a dead run's temp files takes exactly what the walk
 * calls MF_STORE_SHARD_TMP (what fsck reports as an orphan temp file),
 * never a stray that only looks like one. */
static void test_tmp_remove_only_temp_files(void **state)
{
	struct tu_store *f = *state;
	plant(f);
	touch(f, RUND "shard-abc.tmp");
	touch(f, RUND "shard-1.tmp");
	uint32_t removed = 99;
	assert_int_equal(mf_store_tmp_remove(f->st, TU_FP, TU_RUN, &removed),
			 0);
	assert_int_equal(removed, 1);
	assert_int_equal(access(at(f, RUND "shard-00001.tmp"), F_OK), -1);
	assert_int_equal(access(at(f, RUND "shard-abc.tmp"), F_OK), 0);
	assert_int_equal(access(at(f, RUND "shard-1.tmp"), F_OK), 0);
	assert_int_equal(access(at(f, RUND "shard-00000.mfs"), F_OK), 0);
}

int main(void)
{
#define T(fn)                                                                  \
	cmocka_unit_test_setup_teardown(fn, tu_store_setup, tu_store_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_walk_top),	 T(test_walk_fp),
	    T(test_walk_run),	 T(test_walk_symlinked_folders),
	    T(test_walk_errors), T(test_rel),
	    T(test_lstat),	 T(test_tmp_remove_only_temp_files),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
