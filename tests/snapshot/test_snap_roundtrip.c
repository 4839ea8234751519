/*
 * test_snap_roundtrip.c - shards written with every codec, size and thread
 * count read back byte for byte: whole chunks, random preads (crossing chunk
 * boundaries and the end), concurrent readers and the threaded copy.
 *
 * Not for: corrupt files (test_snap_corrupt.c) or the store's folders
 * (test_snap_store.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mf_snapshot.h"
#include "snap_testutil.h"

#define CS (64 * 1024)

static const struct {
	enum mf_codec codec;
	int level;
} codecs[] = {
    {MF_CODEC_ZSTD, 3},
    {MF_CODEC_ZSTD, 19},
    {MF_CODEC_SNAPPY, 0},
    {MF_CODEC_NONE, 0},
};

static const size_t sizes[] = {0, 1, CS - 1, CS, CS + 1, 3 * CS + CS / 2};

static void check_random_reads(struct mf_shard_reader *r, const uint8_t *src,
			       size_t len, uint64_t seed)
{
	uint8_t *buf = malloc(3 * CS + 16);
	uint64_t rs = seed;
	for (int k = 0; k < 200; k++) {
		uint64_t off = tu_rand(&rs) % (len + CS / 2 + 1);
		size_t n = (size_t)(tu_rand(&rs) % (2 * CS + 1));
		if (k % 4 == 0 && len > CS) /* straddle a boundary */
			off = (uint64_t)CS - tu_rand(&rs) % 100;
		ssize_t got = mf_shard_reader_pread(r, buf, n, off);
		size_t want = off >= len ? 0 : (len - off < n ? len - off : n);
		assert_int_equal(got, (ssize_t)want);
		if (want)
			assert_memory_equal(buf, src + off, want);
	}
	free(buf);
}

static void check_reader(struct mf_shard_reader *r, const uint8_t *src,
			 size_t len, const struct mf_shard_stat *ws)
{
	struct mf_shard_stat rs;
	mf_shard_reader_stat(r, &rs);
	assert_int_equal(rs.raw_bytes, len);
	assert_int_equal(rs.stored_bytes, ws->stored_bytes);
	assert_int_equal(rs.chunks, (len + CS - 1) / CS);
	assert_int_equal(rs.chunks, ws->chunks);
	assert_int_equal(rs.codec, ws->codec);
	assert_int_equal(rs.chunk_size, CS);
	uint8_t *buf = malloc(len + 1);
	for (uint32_t i = 0; i < rs.chunks; i++) {
		size_t cl = mf_shard_reader_chunk_len(r, i);
		assert_int_equal(cl, i + 1 < rs.chunks ? CS : len - i * CS);
		assert_int_equal(mf_shard_reader_read_chunk(r, i, buf, cl - 1),
				 -EINVAL);
		assert_int_equal(mf_shard_reader_read_chunk(r, i, buf, CS),
				 (ssize_t)cl);
		assert_memory_equal(buf, src + (size_t)i * CS, cl);
	}
	assert_int_equal(mf_shard_reader_chunk_len(r, rs.chunks), 0);
	assert_int_equal(mf_shard_reader_read_chunk(r, rs.chunks, buf, CS),
			 -EINVAL);
	assert_int_equal(mf_shard_reader_pread(r, buf, len + 1, 0),
			 (ssize_t)len);
	if (len)
		assert_memory_equal(buf, src, len);
	assert_int_equal(mf_shard_reader_pread(r, buf, 1, len), 0);
	assert_int_equal(mf_shard_reader_verify(r, NULL), 0);
	free(buf);
}

static void roundtrip_one(struct tu_store *f, int ci, size_t len, bool compr,
			  uint32_t shard)
{
	uint8_t *src = malloc(len + 1);
	tu_fill(src, len, shard, compr);
	uint8_t *files[2];
	size_t flen[2];
	for (int t = 0; t < 2; t++) {
		struct mf_codec_cfg cfg = {codecs[ci].codec, codecs[ci].level,
					   CS, t ? 3 : 1, false};
		struct mf_shard_stat ws;
		assert_int_equal(
		    tu_write_shard(f->st, shard, &cfg, src, len, &ws), 0);
		assert_int_equal(ws.raw_bytes, len);
		struct mf_shard_reader *r;
		assert_int_equal(
		    mf_shard_reader_open(f->st, TU_FP, TU_RUN, shard, &r), 0);
		check_reader(r, src, len, &ws);
		check_random_reads(r, src, len, shard * 31 + (uint64_t)t);
		mf_shard_reader_close(r);
		char path[512];
		tu_shard_path(f->dir, shard, path, sizeof(path));
		assert_int_equal(tu_read_file(path, &files[t], &flen[t]), 0);
		assert_int_equal(flen[t], ws.stored_bytes);
	}
	/* threads change nothing in the bytes written */
	assert_int_equal(flen[0], flen[1]);
	assert_memory_equal(files[0], files[1], flen[0]);
	free(files[0]);
	free(files[1]);
	free(src);
}

static void test_roundtrip_matrix(void **state)
{
	struct tu_store *f = *state;
	uint32_t shard = 0;
	for (int ci = 0; ci < 4; ci++)
		for (size_t si = 0; si < sizeof(sizes) / sizeof(*sizes); si++)
			for (int c = 0; c < 2; c++)
				roundtrip_one(f, ci, sizes[si], c == 0,
					      shard++);
}

/* In-place writes: the room is the rest of the chunk being filled, what
 * is written there is stored, and no more than the room is taken. */
static void test_in_place(void **state)
{
	struct tu_store *f = *state;
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 2, false};
	assert_int_equal(mf_store_run_create(f->st, TU_FP, TU_RUN), 0);
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(f->st, TU_FP, TU_RUN, 90, &cfg, &w), 0);
	size_t len = 3 * CS + 100;
	uint8_t *src = malloc(len);
	tu_fill(src, len, 90, true);
	assert_int_equal(mf_shard_writer_write(w, src, 10), 0);
	void *b;
	size_t room;
	assert_int_equal(mf_shard_writer_space(w, &b, &room), 0);
	assert_int_equal(room, CS - 10);
	assert_int_equal(mf_shard_writer_wrote(w, room + 1), -EINVAL);
	assert_int_equal(mf_shard_writer_wrote(w, 0), 0);
	size_t off = 10;
	while (off < len) {
		assert_int_equal(mf_shard_writer_space(w, &b, &room), 0);
		assert_true(room >= 1 && room <= CS);
		size_t n = room < len - off ? room : len - off;
		memcpy(b, src + off, n);
		assert_int_equal(mf_shard_writer_wrote(w, n), 0);
		off += n;
	}
	struct mf_shard_stat ws;
	assert_int_equal(mf_shard_writer_commit(w, &ws), 0);
	assert_int_equal(ws.raw_bytes, len);
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(f->st, TU_FP, TU_RUN, 90, &r), 0);
	check_reader(r, src, len, &ws);
	mf_shard_reader_close(r);
	assert_int_equal(mf_shard_writer_space(NULL, &b, &room), -EINVAL);
	assert_int_equal(mf_shard_writer_wrote(NULL, 1), -EINVAL);
	free(src);
}

static void test_compression_shrinks(void **state)
{
	struct tu_store *f = *state;
	size_t len = 4 * CS;
	uint8_t *src = malloc(len);
	tu_fill(src, len, 5, true);
	for (int ci = 0; ci < 4; ci++) {
		struct mf_codec_cfg cfg = {codecs[ci].codec, codecs[ci].level,
					   CS, 1, false};
		struct mf_shard_stat ws;
		assert_int_equal(
		    tu_write_shard(f->st, (uint32_t)ci, &cfg, src, len, &ws),
		    0);
		if (cfg.codec == MF_CODEC_NONE)
			assert_int_equal(ws.stored_bytes,
					 len + 16 + 4 * 32 + 96);
		else
			assert_true(ws.stored_bytes < len / 2);
	}
	free(src);
}

static void test_empty_shard(void **state)
{
	struct tu_store *f = *state;
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 2, false};
	struct mf_shard_stat ws;
	assert_int_equal(mf_store_run_create(f->st, TU_FP, TU_RUN), 0);
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(f->st, TU_FP, TU_RUN, 9, &cfg, &w), 0);
	assert_int_equal(mf_shard_writer_write(w, "", 0), 0);
	assert_int_equal(mf_shard_writer_commit(w, &ws), 0);
	assert_int_equal(ws.raw_bytes, 0);
	assert_int_equal(ws.chunks, 0);
	assert_int_equal(ws.stored_bytes, 16 + 96);
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(f->st, TU_FP, TU_RUN, 9, &r), 0);
	struct mf_shard_stat rs;
	mf_shard_reader_stat(r, &rs);
	assert_int_equal(rs.raw_bytes, 0);
	assert_int_equal(rs.chunks, 0);
	char b[4];
	assert_int_equal(mf_shard_reader_pread(r, b, 4, 0), 0);
	assert_int_equal(mf_shard_reader_verify(r, NULL), 0);
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(mf_shard_reader_copy(r, p[1], 2), 0);
	close(p[1]);
	assert_int_equal(read(p[0], b, 4), 0);
	close(p[0]);
	mf_shard_reader_close(r);
}

/* Copies a shard into a temp file with `threads` and compares. */
static void copy_and_compare(struct tu_store *f, uint32_t shard,
			     const uint8_t *src, size_t len, unsigned threads)
{
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(f->st, TU_FP, TU_RUN, shard, &r),
			 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/copy-out", f->dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(mf_shard_reader_copy(r, fd, threads), 0);
	close(fd);
	mf_shard_reader_close(r);
	uint8_t *out;
	size_t n;
	assert_int_equal(tu_read_file(path, &out, &n), 0);
	assert_int_equal(n, len);
	assert_memory_equal(out, src, len);
	free(out);
	unlink(path);
}

static void test_copy(void **state)
{
	struct tu_store *f = *state;
	size_t len = 20 * CS + 123;
	uint8_t *src = malloc(len);
	tu_fill(src, len, 77, true);
	for (int ci = 0; ci < 4; ci++) {
		if (ci == 1)
			continue; /* zstd:19 adds time, not coverage */
		struct mf_codec_cfg cfg = {codecs[ci].codec, codecs[ci].level,
					   CS, 2, false};
		assert_int_equal(
		    tu_write_shard(f->st, (uint32_t)ci, &cfg, src, len, NULL),
		    0);
		for (unsigned t = 0; t <= 4; t++)
			copy_and_compare(f, (uint32_t)ci, src, len, t);
	}
	free(src);
}

struct par_arg {
	struct mf_shard_reader *r;
	const uint8_t *src;
	size_t len;
	uint64_t seed;
	int bad;
};

static void *par_main(void *p)
{
	struct par_arg *a = p;
	uint8_t *buf = malloc(2 * CS);
	uint64_t rs = a->seed;
	for (int k = 0; k < 300; k++) {
		uint64_t off = tu_rand(&rs) % a->len;
		size_t n = (size_t)(tu_rand(&rs) % (2 * CS)) + 1;
		size_t want = a->len - off < n ? a->len - off : n;
		ssize_t got = mf_shard_reader_pread(a->r, buf, n, off);
		if (got != (ssize_t)want || memcmp(buf, a->src + off, want))
			a->bad++;
	}
	free(buf);
	return NULL;
}

static void test_concurrent_readers(void **state)
{
	struct tu_store *f = *state;
	size_t len = 10 * CS + 5;
	uint8_t *src = malloc(len);
	tu_fill(src, len, 3, true);
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 1, CS, 1, false};
	assert_int_equal(tu_write_shard(f->st, 1, &cfg, src, len, NULL), 0);
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(f->st, TU_FP, TU_RUN, 1, &r), 0);
	pthread_t th[4];
	struct par_arg a[4];
	for (int i = 0; i < 4; i++) {
		a[i] = (struct par_arg){r, src, len, (uint64_t)i + 100, 0};
		assert_int_equal(pthread_create(&th[i], NULL, par_main, &a[i]),
				 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].bad, 0);
	}
	mf_shard_reader_close(r);
	free(src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_roundtrip_matrix,
					    tu_store_setup, tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_in_place, tu_store_setup,
					    tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_compression_shrinks,
					    tu_store_setup, tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_empty_shard, tu_store_setup,
					    tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_copy, tu_store_setup,
					    tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent_readers,
					    tu_store_setup, tu_store_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
