/*
 * test_snap_golden.c - the compatibility promise: the checked-in golden
 * store (one fingerprint per format version, 1, 2 and 3, each made by
 * snap_golden_gen when its version was born) reads back bit for bit, a
 * version 1 file by version 1's rules (its checksums bound to nothing but
 * the chunk index), a version 2 or 3 file only as the shard it was
 * written for, version 3's adaptive shard with the codec and level its
 * index gives each chunk; and this writer reproduces the current
 * version's files byte for byte (codec none always; zstd when the zstd
 * library is the version that wrote them, since zstd does not promise
 * identical output across versions).
 *
 * Not for: exercising every code path (test_snap_roundtrip.c does).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "mf_snapshot.h"
#include "snap_golden.h"
#include "snap_records_gen.h"
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

static void golden_path(const char *dir, const char *fp, uint32_t shard,
			char *buf, size_t len)
{
	int k = snprintf(buf, len, "%s/snapshots/%s/%s/shard-%05u.mfs", dir, fp,
			 GOLDEN_RUN, (unsigned)shard);
	assert_true(k > 0 && (size_t)k < len);
}

/* r holds golden shard g, bit for bit. */
static void assert_golden(struct mf_shard_reader *r,
			  const struct golden_shard *g)
{
	uint8_t *want = malloc(g->raw + 1), *got = malloc(g->raw + 1);
	golden_fill(want, g->raw, g->index);
	struct mf_shard_stat s;
	mf_shard_reader_stat(r, &s);
	assert_int_equal(s.codec, g->codec);
	assert_int_equal(s.chunk_size, GOLDEN_CHUNK_SIZE);
	assert_int_equal(s.raw_bytes, g->raw);
	assert_int_equal(s.chunks,
			 (g->raw + GOLDEN_CHUNK_SIZE - 1) / GOLDEN_CHUNK_SIZE);
	assert_int_equal(mf_shard_reader_pread(r, got, g->raw + 1, 0),
			 (ssize_t)g->raw);
	if (g->raw)
		assert_memory_equal(got, want, g->raw);
	assert_int_equal(mf_shard_reader_verify(r, NULL), 0);
	free(want);
	free(got);
}

/* Each chunk of r is stored as the trailer's codec and level say. */
static void assert_fixed_levels(struct mf_shard_reader *r,
				const struct golden_shard *g)
{
	struct mf_shard_stat s;
	mf_shard_reader_stat(r, &s);
	for (uint32_t i = 0; i < s.chunks; i++) {
		enum mf_codec codec;
		int level;
		assert_int_equal(
		    mf_shard_reader_chunk_codec(r, i, &codec, &level), 0);
		assert_int_equal(codec, g->codec);
		assert_int_equal(level, g->level);
	}
}

static void test_golden_reads(void **state)
{
	(void)state;
	struct mf_store *st;
	assert_int_equal(mf_store_open(golden_dir(), false, &st), 0);
	for (size_t v = 0; v < GOLDEN_VERSIONS; v++) {
		for (size_t i = 0; i < GOLDEN_SHARDS; i++) {
			const struct golden_shard *g = &golden_shards[i];
			struct mf_shard_reader *r;
			assert_int_equal(
			    mf_shard_reader_open(st, golden_versions[v].fp,
						 GOLDEN_RUN, g->index, &r),
			    0);
			assert_golden(r, g);
			assert_fixed_levels(r, g);
			mf_shard_reader_close(r);
		}
	}
	mf_store_close(st);
}

/* The levels the adaptive shard's chunks were stored at: one rung down
 * the ladder (3, 2, 1, -1, -2, -4, -8, -16, raw) for each of the first 9
 * chunks, then one rung up after every 4 chunks that kept up. */
static const int adaptive_levels[] = {
    2, 1, -1, -2, -4, -8, -16, 100, 100, 100, 100, 100, -16, -16, -16, -16, -8};
#define RAW_LEVEL 100 /* in adaptive_levels: stored raw */

static void test_golden_adaptive(void **state)
{
	(void)state;
	const struct golden_shard *g = &golden_adaptive;
	assert_int_equal(sizeof(adaptive_levels) / sizeof(adaptive_levels[0]),
			 (g->raw + GOLDEN_CHUNK_SIZE - 1) / GOLDEN_CHUNK_SIZE);
	struct mf_store *st;
	assert_int_equal(mf_store_open(golden_dir(), false, &st), 0);
	struct mf_shard_reader *r;
	assert_int_equal(
	    mf_shard_reader_open(st, GOLDEN_FP_V3, GOLDEN_RUN, g->index, &r),
	    0);
	assert_golden(r, g);
	for (uint32_t i = 0; i < sizeof(adaptive_levels) / sizeof(int); i++) {
		enum mf_codec codec;
		int level;
		assert_int_equal(
		    mf_shard_reader_chunk_codec(r, i, &codec, &level), 0);
		bool raw = adaptive_levels[i] == RAW_LEVEL;
		assert_int_equal(codec, raw ? MF_CODEC_NONE : MF_CODEC_ZSTD);
		assert_int_equal(level, raw ? 0 : adaptive_levels[i]);
	}
	enum mf_codec codec;
	int level;
	assert_int_equal(mf_shard_reader_chunk_codec(r, 17, &codec, &level),
			 -EINVAL);
	mf_shard_reader_close(r);
	mf_store_close(st);
}

/* Version 4's framed shards read back bit for bit with the record ends
 * their content was built with; the other shards of every version have
 * no records. */
static void test_golden_records(void **state)
{
	(void)state;
	struct mf_store *st;
	assert_int_equal(mf_store_open(golden_dir(), false, &st), 0);
	uint8_t *want = malloc(GOLDEN_FRAMED_MAX),
		*got = malloc(GOLDEN_FRAMED_MAX);
	uint64_t *ends = malloc(GOLDEN_FRAMED_MAX * sizeof(*ends));
	for (size_t i = 0; i < GOLDEN_RECORDS; i++) {
		const struct golden_framed_shard *g = &golden_records[i];
		size_t n;
		size_t len = golden_framed(&g->records, g->index, want, ends,
					   &n, golden_fill);
		struct mf_shard_reader *r;
		assert_int_equal(mf_shard_reader_open(st, GOLDEN_FP_V4,
						      GOLDEN_RUN, g->index, &r),
				 0);
		assert_int_equal(mf_shard_reader_pread(r, got, len + 1, 0),
				 (ssize_t)len);
		assert_memory_equal(got, want, len);
		struct mf_records fr;
		uint64_t count, off, rlen, prev = 0;
		mf_shard_reader_records(r, &fr, &count);
		assert_int_equal(fr.framing, g->records.framing);
		assert_int_equal(fr.size, g->records.size);
		assert_int_equal(fr.drop_tail, g->records.drop_tail);
		assert_int_equal(count, n);
		assert_true(n > 1);
		for (uint64_t k = 0; k < n; k++) {
			assert_int_equal(
			    mf_shard_reader_record(r, k, &off, &rlen), 0);
			assert_int_equal(off, prev);
			assert_int_equal(off + rlen, ends[k]);
			prev = ends[k];
		}
		mf_shard_reader_close(r);
	}
	for (size_t v = 0; v < GOLDEN_VERSIONS; v++) {
		struct mf_shard_reader *r;
		assert_int_equal(mf_shard_reader_open(st, golden_versions[v].fp,
						      GOLDEN_RUN, 1, &r),
				 0);
		struct mf_records fr;
		uint64_t count;
		mf_shard_reader_records(r, &fr, &count);
		assert_int_equal(fr.framing, MF_FRAMING_NONE);
		assert_int_equal(count, 0);
		mf_shard_reader_close(r);
	}
	free(want);
	free(got);
	free(ends);
	mf_store_close(st);
}

/* Writes golden framed shard g again and compares the files. */
static void rewrite_framed(const char *dir, const struct golden_version *gv,
			   const struct golden_framed_shard *g,
			   unsigned threads)
{
	struct mf_store *st;
	assert_int_equal(mf_store_open(dir, true, &st), 0);
	assert_int_equal(mf_store_run_create(st, gv->fp, GOLDEN_RUN), 0);
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, GOLDEN_CHUNK_SIZE, threads,
				   false};
	uint8_t *buf = malloc(GOLDEN_FRAMED_MAX);
	uint64_t *ends = malloc(GOLDEN_FRAMED_MAX * sizeof(*ends));
	size_t n;
	size_t len =
	    golden_framed(&g->records, g->index, buf, ends, &n, golden_fill);
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(st, gv->fp, GOLDEN_RUN, g->index, &cfg, &w),
	    0);
	assert_int_equal(mf_shard_writer_set_records(w, &g->records), 0);
	for (size_t off = 0; off < len; off += 777) {
		size_t k = len - off < 777 ? len - off : 777;
		assert_int_equal(mf_shard_writer_write(w, buf + off, k), 0);
	}
	if (g->records.framing == MF_FRAMING_INDEX)
		assert_int_equal(mf_shard_writer_set_ends(w, ends, n), 0);
	assert_int_equal(mf_shard_writer_commit(w, NULL), 0);
	mf_store_close(st);
	free(buf);
	free(ends);
	char a[1024], b[1024];
	golden_path(golden_dir(), gv->fp, g->index, a, sizeof(a));
	golden_path(dir, gv->fp, g->index, b, sizeof(b));
	uint8_t *da, *db;
	size_t na, nb;
	assert_int_equal(tu_read_file(a, &da, &na), 0);
	assert_int_equal(tu_read_file(b, &db, &nb), 0);
	assert_int_equal(na, nb);
	assert_memory_equal(da, db, na);
	free(da);
	free(db);
}

/* Opens golden file (fp, shard) as shard `as` of fp `as_fp`. */
static int open_as(const char *fp, uint32_t shard, const char *as_fp,
		   uint32_t as, struct mf_shard_reader **r)
{
	char path[1024];
	golden_path(golden_dir(), fp, shard, path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	int rc = mf_shard_reader_open_fd(fd, as_fp, as, r);
	close(fd);
	return rc;
}

/* Version 1 bound nothing but the chunk index, and its files still read
 * by its rules under any name; a version 2 file reads only as its own. */
static void test_golden_binding(void **state)
{
	(void)state;
	for (size_t i = 0; i < GOLDEN_SHARDS; i++) {
		const struct golden_shard *g = &golden_shards[i];
		struct mf_shard_reader *r;
		assert_int_equal(open_as(GOLDEN_FP, g->index, GOLDEN_FP_V2,
					 g->index + 1, &r),
				 0);
		assert_golden(r, g);
		mf_shard_reader_close(r);
		assert_int_equal(
		    open_as(GOLDEN_FP_V2, g->index, GOLDEN_FP_V2, g->index, &r),
		    0);
		assert_golden(r, g);
		mf_shard_reader_close(r);
		assert_int_equal(open_as(GOLDEN_FP_V2, g->index, GOLDEN_FP_V2,
					 g->index + 1, &r),
				 -EBADMSG);
		assert_int_equal(
		    open_as(GOLDEN_FP_V2, g->index, GOLDEN_FP, g->index, &r),
		    -EBADMSG);
		/* version 3 binds as version 2 does */
		assert_int_equal(
		    open_as(GOLDEN_FP_V3, g->index, GOLDEN_FP_V3, g->index, &r),
		    0);
		assert_golden(r, g);
		mf_shard_reader_close(r);
		assert_int_equal(open_as(GOLDEN_FP_V3, g->index, GOLDEN_FP_V3,
					 g->index + 1, &r),
				 -EBADMSG);
		assert_int_equal(
		    open_as(GOLDEN_FP_V3, g->index, GOLDEN_FP_V2, g->index, &r),
		    -EBADMSG);
	}
}

static void test_golden_store(void **state)
{
	(void)state;
	struct mf_store *st;
	assert_int_equal(mf_store_open(golden_dir(), false, &st), 0);
	char *d, **v;
	size_t n;
	assert_int_equal(mf_store_list_snapshots(st, &v, &n), 0);
	assert_int_equal(n, GOLDEN_VERSIONS);
	for (size_t i = 0; i < GOLDEN_VERSIONS; i++) {
		const struct golden_version *gv = &golden_versions[i];
		size_t seen = 0;
		for (size_t k = 0; k < n; k++)
			seen += strcmp(v[k], gv->fp) == 0;
		assert_int_equal(seen, 1);
	}
	mf_strv_free(v, n);
	for (size_t i = 0; i < GOLDEN_VERSIONS; i++) {
		const struct golden_version *gv = &golden_versions[i];
		assert_int_equal(mf_store_read_metadata(st, gv->fp, &d, &n), 0);
		assert_int_equal(n, strlen(gv->metadata));
		assert_string_equal(d, gv->metadata);
		free(d);
		assert_int_equal(mf_store_list_runs(st, gv->fp, &v, &n), 0);
		assert_int_equal(n, 1);
		assert_string_equal(v[0], GOLDEN_RUN);
		mf_strv_free(v, n);
		uint32_t *idx;
		assert_int_equal(
		    mf_store_list_shards(st, gv->fp, GOLDEN_RUN, &idx, &n), 0);
		assert_int_equal(n,
				 GOLDEN_SHARDS + gv->adaptive +
				     (gv->records ? GOLDEN_RECORDS : 0));
		for (size_t k = 0; k < GOLDEN_SHARDS; k++)
			assert_int_equal(idx[k], golden_shards[k].index);
		if (gv->adaptive)
			assert_int_equal(idx[GOLDEN_SHARDS],
					 golden_adaptive.index);
		for (size_t k = 0; gv->records && k < GOLDEN_RECORDS; k++)
			assert_int_equal(idx[GOLDEN_SHARDS + 1 + k],
					 golden_records[k].index);
		free(idx);
	}
	mf_store_close(st);
}

/* Each version's empty shard spells its header, and its trailer names the
 * same version. */
static void test_golden_header(void **state)
{
	(void)state;
	for (size_t i = 0; i < GOLDEN_VERSIONS; i++) {
		const struct golden_version *gv = &golden_versions[i];
		char path[1024];
		golden_path(golden_dir(), gv->fp, 4, path, sizeof(path));
		uint8_t *d;
		size_t n;
		assert_int_equal(tu_read_file(path, &d, &n), 0);
		assert_int_equal(n, gv->version >= 4 ? 16 + 96 : 80);
		uint8_t head[16] = {'M', 'A', 'T',
				    'F', 'S', 'H',
				    'R', 'D', (uint8_t)gv->version};
		assert_memory_equal(d, head, 16);
		assert_memory_equal(d + 16, "MATFSEND", 8);
		assert_memory_equal(d + 24, head + 8, 4);
		free(d);
	}
}

/* Writes golden shard g of the current version again into a temp store
 * and compares the files. */
static void rewrite_one(const char *dir, const struct golden_version *gv,
			const struct golden_shard *g, unsigned threads,
			bool adapt)
{
	struct mf_store *st;
	assert_int_equal(mf_store_open(dir, true, &st), 0);
	assert_int_equal(mf_store_run_create(st, gv->fp, GOLDEN_RUN), 0);
	struct mf_codec_cfg cfg = {g->codec, g->level, GOLDEN_CHUNK_SIZE,
				   threads, adapt};
	uint8_t *buf = malloc(g->raw + 1);
	golden_fill(buf, g->raw, g->index);
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(st, gv->fp, GOLDEN_RUN, g->index, &cfg, &w),
	    0);
	if (adapt)
		assert_int_equal(
		    mf_shard_writer_set_pressure(w, golden_pressure, NULL), 0);
	/* odd pieces: the bytes may not depend on how they were handed in */
	for (size_t off = 0; off < g->raw; off += 1000) {
		size_t n = g->raw - off < 1000 ? g->raw - off : 1000;
		assert_int_equal(mf_shard_writer_write(w, buf + off, n), 0);
	}
	assert_int_equal(mf_shard_writer_commit(w, NULL), 0);
	mf_store_close(st);
	free(buf);
	char a[1024], b[1024];
	golden_path(golden_dir(), gv->fp, g->index, a, sizeof(a));
	golden_path(dir, gv->fp, g->index, b, sizeof(b));
	uint8_t *da, *db;
	size_t na, nb;
	assert_int_equal(tu_read_file(a, &da, &na), 0);
	assert_int_equal(tu_read_file(b, &db, &nb), 0);
	assert_int_equal(na, nb);
	assert_memory_equal(da, db, na);
	free(da);
	free(db);
}

/* Only the current version: the writer writes no other. */
static void test_golden_reproducible(void **state)
{
	(void)state;
	const struct golden_version *gv = golden_current();
	assert_non_null(gv);
	char *dir = tu_mkdtemp();
	bool same_zstd = ZSTD_versionNumber() == gv->zstd_version;
	if (!same_zstd)
		print_message("zstd %u, golden files from %u: zstd shards "
			      "not compared byte for byte\n",
			      ZSTD_versionNumber(), gv->zstd_version);
	for (size_t i = 0; i < GOLDEN_SHARDS; i++) {
		const struct golden_shard *g = &golden_shards[i];
		if (g->codec == MF_CODEC_SNAPPY)
			continue; /* snappy has no version to check against */
		if (g->codec == MF_CODEC_ZSTD && !same_zstd)
			continue;
		rewrite_one(dir, gv, g, 1, false);
		rewrite_one(dir, gv, g, 3, false);
	}
	/* the adaptive shard: its levels come from the pressure alone, on
	 * any number of threads */
	if (gv->adaptive && same_zstd) {
		rewrite_one(dir, gv, &golden_adaptive, 1, true);
		rewrite_one(dir, gv, &golden_adaptive, 3, true);
	}
	for (size_t i = 0; gv->records && same_zstd && i < GOLDEN_RECORDS;
	     i++) {
		rewrite_framed(dir, gv, &golden_records[i], 1);
		rewrite_framed(dir, gv, &golden_records[i], 3);
	}
	tu_rmtree(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_golden_reads),
	    cmocka_unit_test(test_golden_adaptive),
	    cmocka_unit_test(test_golden_records),
	    cmocka_unit_test(test_golden_binding),
	    cmocka_unit_test(test_golden_store),
	    cmocka_unit_test(test_golden_header),
	    cmocka_unit_test(test_golden_reproducible),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
