/*
 * test_snap_store.c - the store folder: open and create, metadata written
 * atomically, runs, listings that skip junk, planted symlinks and FIFOs
 * refused and never followed, bad ids refused, and the writer's temp file
 * life cycle (commit, abort, a failed write).
 *
 * Not for: shard contents (test_snap_roundtrip.c, test_snap_corrupt.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mf_snapshot.h"
#include "snap_testutil.h"

#define CS 4096

struct fixture {
	struct tu_store s;
	char path[512], path2[512]; /* scratch for p() and q() */
};

static int setup(void **state)
{
	return tu_fixture_setup(state, sizeof(struct fixture));
}

static const char *p(struct fixture *f, const char *rel)
{
	snprintf(f->path, sizeof(f->path), "%s/%s", f->s.dir, rel);
	return f->path;
}

/* Same as p, for a second path in one call. */
static const char *q(struct fixture *f, const char *rel)
{
	snprintf(f->path2, sizeof(f->path2), "%s/%s", f->s.dir, rel);
	return f->path2;
}

/* The names in a folder, sorted, joined by spaces. */
static void names_of(const char *dir, char *out, size_t len)
{
	struct dirent **v;
	int n = scandir(dir, &v, NULL, alphasort);
	assert_true(n >= 0);
	out[0] = '\0';
	size_t used = 0;
	for (int i = 0; i < n; i++) {
		const char *s = v[i]->d_name;
		if (strcmp(s, ".") && strcmp(s, ".."))
			used += (size_t)snprintf(out + used, len - used, "%s%s",
						 used ? " " : "", s);
		free(v[i]);
	}
	free(v);
}

static const char *const bad_fps[] = {
    "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
    "../../../../../../../../../../../../../../../../../../../../etc",
    "0123456789abcdef0123456789abcdef/123456789abcdef0123456789abcdef",
    "",
    NULL,
};

static const char *const bad_runs[] = {
    "00112233445566778899AABBCCDDEEFF",
    "00112233445566778899aabbccddeef",
    "00112233445566778899aabbccddeeff0",
    "..",
    "",
    NULL,
};

static void test_open_create(void **state)
{
	struct fixture *f = *state;
	struct mf_store *st;
	assert_int_equal(mf_store_open(p(f, "nope"), false, &st), -ENOENT);
	assert_int_equal(tu_write_file(p(f, "file"), "x", 1), 0);
	assert_int_equal(mf_store_open(p(f, "file"), false, &st), -ENOTDIR);
	assert_int_equal(mf_store_open(p(f, "file"), true, &st), -ENOTDIR);
	/* a folder without snapshots/ is not a store */
	assert_int_equal(mkdir(p(f, "empty"), 0755), 0);
	assert_int_equal(mf_store_open(p(f, "empty"), false, &st), -ENOENT);
	assert_int_equal(mf_store_open(p(f, "a/b/c"), true, &st), 0);
	assert_string_equal(mf_store_path(st), p(f, "a/b/c"));
	struct stat sb;
	assert_int_equal(fstat(mf_store_dirfd(st), &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	assert_int_equal(stat(p(f, "a/b/c/snapshots"), &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	mf_store_close(st);
	assert_int_equal(mf_store_open(p(f, "a/b/c"), false, &st), 0);
	mf_store_close(st);
	mf_store_close(NULL);
	/* snapshots/ planted as a symlink */
	assert_int_equal(mkdir(p(f, "evil"), 0755), 0);
	assert_int_equal(
	    symlink(q(f, "a/b/c/snapshots"), p(f, "evil/snapshots")), 0);
	assert_int_equal(mf_store_open(p(f, "evil"), false, &st), -ELOOP);
	assert_int_equal(mf_store_open(p(f, "evil"), true, &st), -ELOOP);
}

static void test_metadata(void **state)
{
	struct fixture *f = *state;
	char *d;
	size_t n;
	assert_int_equal(mf_store_read_metadata(f->s.st, TU_FP, &d, &n),
			 -ENOENT);
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP, "hello\n", 6),
			 0);
	assert_int_equal(mf_store_read_metadata(f->s.st, TU_FP, &d, &n), 0);
	assert_int_equal(n, 6);
	assert_string_equal(d, "hello\n");
	free(d);
	/* a larger document replaces it whole */
	size_t big = 100000;
	uint8_t *src = malloc(big);
	tu_fill(src, big, 1, true);
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP, src, big), 0);
	assert_int_equal(mf_store_read_metadata(f->s.st, TU_FP, &d, &n), 0);
	assert_int_equal(n, big);
	assert_memory_equal(d, src, big);
	assert_int_equal(d[big], '\0');
	free(d);
	free(src);
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP, NULL, 0), 0);
	assert_int_equal(mf_store_read_metadata(f->s.st, TU_FP, &d, &n), 0);
	assert_int_equal(n, 0);
	assert_string_equal(d, "");
	free(d);
	/* no temp file is left beside it */
	char names[256];
	names_of(p(f, "snapshots/" TU_FP), names, sizeof(names));
	assert_string_equal(names, "snapshot.metadata");
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP, NULL, 1),
			 -EINVAL);
}

static void test_metadata_symlink(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP, "a", 1), 0);
	assert_int_equal(tu_write_file(p(f, "secret"), "secret", 6), 0);
	char link[512];
	snprintf(link, sizeof(link), "%s/snapshots/%s/snapshot.metadata",
		 f->s.dir, TU_FP);
	assert_int_equal(unlink(link), 0);
	assert_int_equal(symlink(q(f, "secret"), link), 0);
	char *d;
	size_t n;
	assert_int_equal(mf_store_read_metadata(f->s.st, TU_FP, &d, &n),
			 -ELOOP);
	/* writing replaces the link itself, never its target */
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP, "b", 1), 0);
	assert_int_equal(mf_store_read_metadata(f->s.st, TU_FP, &d, &n), 0);
	assert_string_equal(d, "b");
	free(d);
	uint8_t *s;
	assert_int_equal(tu_read_file(p(f, "secret"), &s, &n), 0);
	assert_int_equal(n, 6);
	assert_memory_equal(s, "secret", 6);
	free(s);
}

static void test_bad_ids(void **state)
{
	struct fixture *f = *state;
	char *d, **v;
	size_t n;
	uint32_t *idx;
	struct mf_shard_writer *w;
	struct mf_shard_reader *r;
	struct mf_codec_cfg cfg = {MF_CODEC_NONE, 0, CS, 1, false};
	for (int i = 0; i < 7; i++) {
		const char *fp = bad_fps[i];
		assert_int_equal(mf_store_write_metadata(f->s.st, fp, "x", 1),
				 -EINVAL);
		assert_int_equal(mf_store_read_metadata(f->s.st, fp, &d, &n),
				 -EINVAL);
		assert_int_equal(mf_store_run_create(f->s.st, fp, TU_RUN),
				 -EINVAL);
		assert_int_equal(mf_store_run_remove(f->s.st, fp, TU_RUN),
				 -EINVAL);
		assert_int_equal(mf_store_snapshot_remove(f->s.st, fp),
				 -EINVAL);
		assert_int_equal(mf_store_list_runs(f->s.st, fp, &v, &n),
				 -EINVAL);
		assert_int_equal(
		    mf_store_list_shards(f->s.st, fp, TU_RUN, &idx, &n),
		    -EINVAL);
		assert_int_equal(mf_store_shard_remove(f->s.st, fp, TU_RUN, 0),
				 -EINVAL);
		assert_int_equal(
		    mf_shard_writer_open(f->s.st, fp, TU_RUN, 0, &cfg, &w),
		    -EINVAL);
		assert_int_equal(
		    mf_shard_reader_open(f->s.st, fp, TU_RUN, 0, &r), -EINVAL);
	}
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN), 0);
	for (int i = 0; i < 6; i++) {
		const char *run = bad_runs[i];
		assert_int_equal(mf_store_run_create(f->s.st, TU_FP, run),
				 -EINVAL);
		assert_int_equal(mf_store_run_remove(f->s.st, TU_FP, run),
				 -EINVAL);
		assert_int_equal(
		    mf_store_list_shards(f->s.st, TU_FP, run, &idx, &n),
		    -EINVAL);
		assert_int_equal(mf_store_shard_remove(f->s.st, TU_FP, run, 0),
				 -EINVAL);
		assert_int_equal(
		    mf_shard_writer_open(f->s.st, TU_FP, run, 0, &cfg, &w),
		    -EINVAL);
		assert_int_equal(
		    mf_shard_reader_open(f->s.st, TU_FP, run, 0, &r), -EINVAL);
	}
	/* nothing was made by any of them */
	char names[512];
	names_of(p(f, "snapshots"), names, sizeof(names));
	assert_string_equal(names, TU_FP);
	names_of(p(f, "snapshots/" TU_FP), names, sizeof(names));
	assert_string_equal(names, TU_RUN);
}

static void test_runs(void **state)
{
	struct fixture *f = *state;
	char **v;
	size_t n;
	assert_int_equal(mf_store_list_runs(f->s.st, TU_FP, &v, &n), -ENOENT);
	assert_int_equal(mf_store_run_remove(f->s.st, TU_FP, TU_RUN), -ENOENT);
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN), 0);
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN), 0);
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN2), 0);
	assert_int_equal(mf_store_list_runs(f->s.st, TU_FP, &v, &n), 0);
	assert_int_equal(n, 2);
	assert_true((!strcmp(v[0], TU_RUN) && !strcmp(v[1], TU_RUN2)) ||
		    (!strcmp(v[1], TU_RUN) && !strcmp(v[0], TU_RUN2)));
	mf_strv_free(v, n);
	uint8_t data[100] = {1};
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 1, false};
	assert_int_equal(tu_write_shard(f->s.st, 3, &cfg, data, 100, NULL), 0);
	/* a stray sub-folder inside the run goes too */
	assert_int_equal(mkdir(p(f, "snapshots/" TU_FP "/" TU_RUN "/x"), 0755),
			 0);
	assert_int_equal(
	    tu_write_file(p(f, "snapshots/" TU_FP "/" TU_RUN "/x/y"), "y", 1),
	    0);
	assert_int_equal(mf_store_run_remove(f->s.st, TU_FP, TU_RUN), 0);
	assert_int_equal(mf_store_run_remove(f->s.st, TU_FP, TU_RUN), -ENOENT);
	assert_int_equal(mf_store_list_runs(f->s.st, TU_FP, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], TU_RUN2);
	mf_strv_free(v, n);
	mf_strv_free(NULL, 0);
}

static void test_list_skips_junk(void **state)
{
	struct fixture *f = *state;
	char **v;
	size_t n;
	assert_int_equal(mf_store_list_snapshots(f->s.st, &v, &n), 0);
	assert_int_equal(n, 0);
	free(v);
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN), 0);
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP2, "m", 1), 0);
	assert_int_equal(mkdir(p(f, "snapshots/junk"), 0755), 0);
	assert_int_equal(
	    mkdir(p(f,
		    "snapshots/0123456789ABCDEF0123456789abcdef0123456789"
		    "abcdef0123456789abcdef"),
		  0755),
	    0);
	assert_int_equal(tu_write_file(p(f,
					 "snapshots/aaaaaaaaaaaaaaaaaaaaaaaaa"
					 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
					 "aaaaaaaa"),
				       "", 0),
			 0);
	assert_int_equal(symlink(TU_FP,
				 p(f,
				   "snapshots/bbbbbbbbbbbbbbbbbbbbbb"
				   "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
				   "bbbbbbbbbb")),
			 0);
	assert_int_equal(mf_store_list_snapshots(f->s.st, &v, &n), 0);
	assert_int_equal(n, 2);
	assert_true((!strcmp(v[0], TU_FP) && !strcmp(v[1], TU_FP2)) ||
		    (!strcmp(v[1], TU_FP) && !strcmp(v[0], TU_FP2)));
	mf_strv_free(v, n);
	/* runs: the metadata file, junk and a symlinked run are skipped */
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP, "m", 1), 0);
	assert_int_equal(mkdir(p(f, "snapshots/" TU_FP "/abc"), 0755), 0);
	assert_int_equal(symlink(TU_RUN, p(f, "snapshots/" TU_FP "/" TU_RUN2)),
			 0);
	assert_int_equal(mf_store_list_runs(f->s.st, TU_FP, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], TU_RUN);
	mf_strv_free(v, n);
}

static void test_list_shards(void **state)
{
	struct fixture *f = *state;
	uint8_t data[10] = {0};
	struct mf_codec_cfg cfg = {MF_CODEC_NONE, 0, CS, 1, false};
	uint32_t want[] = {2, 10, 99999, 100000, 4294967295u};
	for (int i = 4; i >= 0; i--)
		assert_int_equal(
		    tu_write_shard(f->s.st, want[i], &cfg, data, 10, NULL), 0);
	struct stat sb;
	assert_int_equal(
	    stat(p(f, "snapshots/" TU_FP "/" TU_RUN "/shard-100000.mfs"), &sb),
	    0);
	assert_int_equal(
	    stat(p(f, "snapshots/" TU_FP "/" TU_RUN "/shard-99999.mfs"), &sb),
	    0);
	static const char *const junk[] = {
	    "shard-1.mfs",	   "shard-000003.mfs", "shard-00004.tmp",
	    "shard-00005.mfsx",	   "xshard-00006.mfs", "shard-4294967296.mfs",
	    "shard-.mfs",	   "shard-0000a.mfs",  "shard-+0007.mfs",
	    "shard-00008.mfs.tmp", "SHARD-00009.MFS",
	};
	for (size_t i = 0; i < sizeof(junk) / sizeof(*junk); i++) {
		char rel[256];
		snprintf(rel, sizeof(rel), "snapshots/%s/%s/%s", TU_FP, TU_RUN,
			 junk[i]);
		assert_int_equal(tu_write_file(p(f, rel), "", 0), 0);
	}
	assert_int_equal(
	    mkdir(p(f, "snapshots/" TU_FP "/" TU_RUN "/shard-00011.mfs"), 0755),
	    0);
	assert_int_equal(
	    symlink("shard-00002.mfs",
		    p(f, "snapshots/" TU_FP "/" TU_RUN "/shard-00012.mfs")),
	    0);
	uint32_t *idx;
	size_t n;
	assert_int_equal(mf_store_list_shards(f->s.st, TU_FP, TU_RUN, &idx, &n),
			 0);
	assert_int_equal(n, 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(idx[i], want[i]);
	free(idx);
	assert_int_equal(
	    mf_store_list_shards(f->s.st, TU_FP, TU_RUN2, &idx, &n), -ENOENT);
	/* and one of them removed */
	assert_int_equal(mf_store_shard_remove(f->s.st, TU_FP, TU_RUN, 10), 0);
	assert_int_equal(mf_store_shard_remove(f->s.st, TU_FP, TU_RUN, 10),
			 -ENOENT);
	assert_int_equal(mf_store_list_shards(f->s.st, TU_FP, TU_RUN, &idx, &n),
			 0);
	assert_int_equal(n, 4);
	assert_int_equal(idx[1], 99999);
	free(idx);
}

static void test_planted_symlinks(void **state)
{
	struct fixture *f = *state;
	uint8_t data[5000];
	tu_fill(data, sizeof(data), 9, true);
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 1, false};
	assert_int_equal(tu_write_shard(f->s.st, 2, &cfg, data, 5000, NULL), 0);
	char real[512];
	tu_shard_path(f->s.dir, 2, real, sizeof(real));
	/* a shard file that is a symlink to a valid shard */
	assert_int_equal(
	    symlink(real,
		    p(f, "snapshots/" TU_FP "/" TU_RUN "/shard-00005.mfs")),
	    0);
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP, TU_RUN, 2, &r),
			 0);
	mf_shard_reader_close(r);
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP, TU_RUN, 5, &r),
			 -ELOOP);
	/* a run folder that is a symlink to a real run */
	assert_int_equal(symlink(q(f, "snapshots/" TU_FP "/" TU_RUN),
				 p(f, "snapshots/" TU_FP "/" TU_RUN2)),
			 0);
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP, TU_RUN2, 2, &r),
			 -ELOOP);
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(f->s.st, TU_FP, TU_RUN2, 7, &cfg, &w), -ELOOP);
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN2), -ELOOP);
	uint32_t *idx;
	size_t n;
	assert_int_equal(
	    mf_store_list_shards(f->s.st, TU_FP, TU_RUN2, &idx, &n), -ELOOP);
	assert_int_equal(mf_store_run_remove(f->s.st, TU_FP, TU_RUN2), -ELOOP);
	assert_int_equal(mf_store_shard_remove(f->s.st, TU_FP, TU_RUN2, 2),
			 -ELOOP);
	/* the target run is untouched by all of it */
	char names[512];
	names_of(p(f, "snapshots/" TU_FP "/" TU_RUN), names, sizeof(names));
	assert_string_equal(names, "shard-00002.mfs shard-00005.mfs");
	/* a fingerprint folder that is a symlink */
	assert_int_equal(
	    symlink(q(f, "snapshots/" TU_FP), p(f, "snapshots/" TU_FP2)), 0);
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP2, TU_RUN, 2, &r),
			 -ELOOP);
	assert_int_equal(mf_store_snapshot_remove(f->s.st, TU_FP2), -ELOOP);
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP2, "x", 1),
			 -ELOOP);
	names_of(p(f, "snapshots/" TU_FP "/" TU_RUN), names, sizeof(names));
	assert_string_equal(names, "shard-00002.mfs shard-00005.mfs");
}

static void test_planted_fifo(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN), 0);
	assert_int_equal(
	    mkfifo(p(f, "snapshots/" TU_FP "/" TU_RUN "/shard-00001.mfs"),
		   0644),
	    0);
	assert_int_equal(tu_write_file(p(f, "snapshots/" TU_FP "/" TU_RUN2),
				       "not a folder", 12),
			 0);
	struct mf_shard_reader *r;
	/* refused without blocking on the FIFO */
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP, TU_RUN, 1, &r),
			 -EBADMSG);
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP, TU_RUN2, 1, &r),
			 -EBADMSG);
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN2),
			 -EBADMSG);
	assert_int_equal(
	    mkfifo(p(f, "snapshots/" TU_FP "/snapshot.metadata"), 0644), 0);
	char *d;
	size_t n;
	assert_int_equal(mf_store_read_metadata(f->s.st, TU_FP, &d, &n),
			 -EBADMSG);
}

static void test_snapshot_remove(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(mf_store_snapshot_remove(f->s.st, TU_FP), -ENOENT);
	uint8_t data[100] = {0};
	struct mf_codec_cfg cfg = {MF_CODEC_SNAPPY, 0, CS, 1, false};
	assert_int_equal(tu_write_shard(f->s.st, 0, &cfg, data, 100, NULL), 0);
	assert_int_equal(mf_store_write_metadata(f->s.st, TU_FP, "m", 1), 0);
	/* an outside folder linked from inside the snapshot survives */
	assert_int_equal(mkdir(p(f, "outside"), 0755), 0);
	assert_int_equal(tu_write_file(p(f, "outside/keep"), "k", 1), 0);
	assert_int_equal(
	    symlink(q(f, "outside"), p(f, "snapshots/" TU_FP "/" TU_RUN2)), 0);
	assert_int_equal(symlink(q(f, "outside"),
				 p(f, "snapshots/" TU_FP "/" TU_RUN "/link")),
			 0);
	assert_int_equal(mf_store_snapshot_remove(f->s.st, TU_FP), 0);
	struct stat sb;
	assert_int_equal(lstat(p(f, "snapshots/" TU_FP), &sb), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(stat(p(f, "outside/keep"), &sb), 0);
	char **v;
	size_t n;
	assert_int_equal(mf_store_list_snapshots(f->s.st, &v, &n), 0);
	assert_int_equal(n, 0);
	free(v);
}

static void test_writer_files(void **state)
{
	struct fixture *f = *state;
	const char *run = p(f, "snapshots/" TU_FP "/" TU_RUN);
	char rundir[512], names[512];
	snprintf(rundir, sizeof(rundir), "%s", run);
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 3, false};
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(f->s.st, TU_FP, TU_RUN, 0, &cfg, &w), -ENOENT);
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN), 0);
	uint8_t data[3 * CS];
	tu_fill(data, sizeof(data), 4, true);
	/* while writing, only the temp file exists; commit leaves none */
	assert_int_equal(
	    mf_shard_writer_open(f->s.st, TU_FP, TU_RUN, 0, &cfg, &w), 0);
	assert_int_equal(mf_shard_writer_write(w, data, sizeof(data)), 0);
	names_of(rundir, names, sizeof(names));
	assert_string_equal(names, "shard-00000.tmp");
	/* a second writer of the same shard is refused */
	struct mf_shard_writer *w2;
	assert_int_equal(
	    mf_shard_writer_open(f->s.st, TU_FP, TU_RUN, 0, &cfg, &w2),
	    -EEXIST);
	assert_int_equal(mf_shard_writer_commit(w, NULL), 0);
	names_of(rundir, names, sizeof(names));
	assert_string_equal(names, "shard-00000.mfs");
	/* abort leaves nothing */
	assert_int_equal(
	    mf_shard_writer_open(f->s.st, TU_FP, TU_RUN, 1, &cfg, &w), 0);
	assert_int_equal(mf_shard_writer_write(w, data, sizeof(data)), 0);
	mf_shard_writer_abort(w);
	mf_shard_writer_abort(NULL);
	names_of(rundir, names, sizeof(names));
	assert_string_equal(names, "shard-00000.mfs");
}

static void test_writer_cfg(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN), 0);
	struct mf_shard_writer *w;
	static const struct mf_codec_cfg bad[] = {
	    {MF_CODEC_ZSTD, 3, 4095, 1, false},
	    {MF_CODEC_ZSTD, 3, (1ULL << 30) + 1, 1, false},
	    {(enum mf_codec)7, 0, CS, 1, false},
	    {MF_CODEC_ZSTD, -1, CS, 1, false},
	    {MF_CODEC_ZSTD, 23, CS, 1, false},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		assert_int_equal(mf_shard_writer_open(f->s.st, TU_FP, TU_RUN, 0,
						      &bad[i], &w),
				 -EINVAL);
	assert_int_equal(
	    mf_shard_writer_open(f->s.st, TU_FP, TU_RUN, 0, NULL, &w), -EINVAL);
	/* zstd level 0 means the default, and the trailer records it */
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 0, CS, 1, false};
	assert_int_equal(
	    tu_write_shard(f->s.st, 0, &cfg, (const uint8_t *)"ab", 2, NULL),
	    0);
	char path[512];
	uint8_t *d;
	size_t n;
	tu_shard_path(f->s.dir, 0, path, sizeof(path));
	assert_int_equal(tu_read_file(path, &d, &n), 0);
	assert_int_equal(d[n - 96 + 16], MF_ZSTD_DEFAULT_LEVEL);
	free(d);
}

static void test_write_failure(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(mf_store_run_create(f->s.st, TU_FP, TU_RUN), 0);
	struct rlimit old, lim;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
	/* more than the writer stages for O_DIRECT (two buffers of 2 MiB,
	 * one written while the other fills), incompressible: the write
	 * itself meets the limit */
	size_t len = (5u << 20) + 64 * CS;
	uint8_t *data = malloc(len);
	tu_fill(data, len, 8, false);
	for (int threads = 1; threads <= 2; threads++) {
		struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 1, CS,
					   (unsigned)threads, false};
		struct mf_shard_writer *w;
		assert_int_equal(
		    mf_shard_writer_open(f->s.st, TU_FP, TU_RUN, 0, &cfg, &w),
		    0);
		lim = old;
		lim.rlim_cur = 20000; /* the disk is "full" at 20 kB */
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
		int rc = mf_shard_writer_write(w, data, len);
		int rc2 = mf_shard_writer_commit(w, NULL);
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
		assert_int_equal(rc, -EFBIG);
		assert_int_equal(rc2, -EFBIG);
		char names[512];
		names_of(p(f, "snapshots/" TU_FP "/" TU_RUN), names,
			 sizeof(names));
		assert_string_equal(names, "");
	}
	signal(SIGXFSZ, prev);
	free(data);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, tu_store_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_open_create),
	    T(test_metadata),
	    T(test_metadata_symlink),
	    T(test_bad_ids),
	    T(test_runs),
	    T(test_list_skips_junk),
	    T(test_list_shards),
	    T(test_planted_symlinks),
	    T(test_planted_fifo),
	    T(test_snapshot_remove),
	    T(test_writer_files),
	    T(test_writer_cfg),
	    T(test_write_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
