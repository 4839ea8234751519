/*
 * test_snap_golden.c - the compatibility promise: the checked-in golden
 * store (format version 1, made by snap_golden_gen) reads back bit for bit,
 * and this writer reproduces its files byte for byte (codec none always;
 * zstd when the zstd library is the version that wrote them, since zstd
 * does not promise identical output across versions).
 *
 * Not for: exercising every code path (test_snap_roundtrip.c does).
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
#include <zstd.h>

#include "mf_snapshot.h"
#include "snap_golden.h"
#include "snap_testutil.h"

static const char *golden_dir(void)
{
	static char buf[1024];
	const char *root = getenv("MF_SOURCE_ROOT");
	if (!root)
		return SNAP_GOLDEN_DIR;
	int k = snprintf(buf, sizeof(buf), "%s/tests/snapshot/golden", root);
	assert_true(k > 0 && (size_t)k < sizeof(buf));
	return buf;
}

static void golden_path(const char *dir, uint32_t shard, char *buf, size_t len)
{
	int k = snprintf(buf, len, "%s/snapshots/%s/%s/shard-%05u.mfs", dir,
			 GOLDEN_FP, GOLDEN_RUN, (unsigned)shard);
	assert_true(k > 0 && (size_t)k < len);
}

static void test_golden_reads(void **state)
{
	(void)state;
	struct mf_store *st;
	assert_int_equal(mf_store_open(golden_dir(), false, &st), 0);
	for (size_t i = 0; i < GOLDEN_SHARDS; i++) {
		const struct golden_shard *g = &golden_shards[i];
		uint8_t *want = malloc(g->raw + 1), *got = malloc(g->raw + 1);
		golden_fill(want, g->raw, g->index);
		struct mf_shard_reader *r;
		assert_int_equal(mf_shard_reader_open(st, GOLDEN_FP, GOLDEN_RUN,
						      g->index, &r),
				 0);
		struct mf_shard_stat s;
		mf_shard_reader_stat(r, &s);
		assert_int_equal(s.codec, g->codec);
		assert_int_equal(s.chunk_size, GOLDEN_CHUNK_SIZE);
		assert_int_equal(s.raw_bytes, g->raw);
		assert_int_equal(s.chunks,
				 (g->raw + GOLDEN_CHUNK_SIZE - 1) /
				     GOLDEN_CHUNK_SIZE);
		assert_int_equal(mf_shard_reader_pread(r, got, g->raw + 1, 0),
				 (ssize_t)g->raw);
		if (g->raw)
			assert_memory_equal(got, want, g->raw);
		assert_int_equal(mf_shard_reader_verify(r, NULL), 0);
		mf_shard_reader_close(r);
		free(want);
		free(got);
	}
	mf_store_close(st);
}

static void test_golden_store(void **state)
{
	(void)state;
	struct mf_store *st;
	assert_int_equal(mf_store_open(golden_dir(), false, &st), 0);
	char *d, **v;
	size_t n;
	assert_int_equal(mf_store_read_metadata(st, GOLDEN_FP, &d, &n), 0);
	assert_int_equal(n, strlen(GOLDEN_METADATA));
	assert_string_equal(d, GOLDEN_METADATA);
	free(d);
	assert_int_equal(mf_store_list_snapshots(st, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], GOLDEN_FP);
	mf_strv_free(v, n);
	assert_int_equal(mf_store_list_runs(st, GOLDEN_FP, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], GOLDEN_RUN);
	mf_strv_free(v, n);
	uint32_t *idx;
	assert_int_equal(
	    mf_store_list_shards(st, GOLDEN_FP, GOLDEN_RUN, &idx, &n), 0);
	assert_int_equal(n, GOLDEN_SHARDS);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(idx[i], golden_shards[i].index);
	free(idx);
	mf_store_close(st);
}

/* The golden file's first bytes spell the version 1 header. */
static void test_golden_header(void **state)
{
	(void)state;
	char path[1024];
	golden_path(golden_dir(), 4, path, sizeof(path));
	uint8_t *d;
	size_t n;
	assert_int_equal(tu_read_file(path, &d, &n), 0);
	assert_int_equal(n, 80);
	static const uint8_t head[16] = {'M', 'A', 'T', 'F', 'S', 'H', 'R', 'D',
					 1,   0,   0,	0,   0,	  0,   0,   0};
	assert_memory_equal(d, head, 16);
	assert_memory_equal(d + 16, "MATFSEND", 8);
	free(d);
}

/* Writes golden shard g again into a temp store and compares the files. */
static void rewrite_one(const char *dir, const struct golden_shard *g,
			unsigned threads)
{
	struct mf_store *st;
	assert_int_equal(mf_store_open(dir, true, &st), 0);
	assert_int_equal(mf_store_run_create(st, GOLDEN_FP, GOLDEN_RUN), 0);
	struct mf_codec_cfg cfg = {g->codec, g->level, GOLDEN_CHUNK_SIZE,
				   threads};
	uint8_t *buf = malloc(g->raw + 1);
	golden_fill(buf, g->raw, g->index);
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(st, GOLDEN_FP, GOLDEN_RUN, g->index, &cfg, &w),
	    0);
	/* odd pieces: the bytes may not depend on how they were handed in */
	for (size_t off = 0; off < g->raw; off += 1000) {
		size_t n = g->raw - off < 1000 ? g->raw - off : 1000;
		assert_int_equal(mf_shard_writer_write(w, buf + off, n), 0);
	}
	assert_int_equal(mf_shard_writer_commit(w, NULL), 0);
	mf_store_close(st);
	free(buf);
	char a[1024], b[1024];
	golden_path(golden_dir(), g->index, a, sizeof(a));
	golden_path(dir, g->index, b, sizeof(b));
	uint8_t *da, *db;
	size_t na, nb;
	assert_int_equal(tu_read_file(a, &da, &na), 0);
	assert_int_equal(tu_read_file(b, &db, &nb), 0);
	assert_int_equal(na, nb);
	assert_memory_equal(da, db, na);
	free(da);
	free(db);
}

static void test_golden_reproducible(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	bool same_zstd = ZSTD_versionNumber() == GOLDEN_ZSTD_VERSION;
	if (!same_zstd)
		print_message("zstd %u, golden files from %u: zstd shards "
			      "not compared byte for byte\n",
			      ZSTD_versionNumber(), GOLDEN_ZSTD_VERSION);
	for (size_t i = 0; i < GOLDEN_SHARDS; i++) {
		const struct golden_shard *g = &golden_shards[i];
		if (g->codec == MF_CODEC_SNAPPY)
			continue; /* snappy has no version to check against */
		if (g->codec == MF_CODEC_ZSTD && !same_zstd)
			continue;
		rewrite_one(dir, g, 1);
		rewrite_one(dir, g, 3);
	}
	tu_rmtree(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_golden_reads),
	    cmocka_unit_test(test_golden_store),
	    cmocka_unit_test(test_golden_header),
	    cmocka_unit_test(test_golden_reproducible),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
