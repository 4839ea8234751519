/*
 * test_snap_records.c - the records index of a shard file: every framing
 * written through the writer (in pieces of every size, records across
 * chunk boundaries, an empty shard, one record, a last line without a
 * newline) reads back with the ends the content was built with; every
 * way output can break its framing fails the write or the seal with its
 * message, and leaves no file; CRC32C and TensorFlow's mask match their
 * published values.
 *
 * Not for: the layout's byte offsets (test_snap_binding.c, docs/format.md).
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
#include "snap_records_gen.h"
#include "snap_testutil.h"

#define CS 4096

static const struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 2, false};

/* Writes data framed as r in pieces of `piece` bytes (0: at once), with
 * ends for records: index. Returns the write's or seal's error; with
 * why, the framing message. */
static int write_framed(struct mf_store *st, uint32_t shard,
			const struct mf_records *r, const uint8_t *data,
			size_t len, size_t piece, const uint64_t *ends,
			size_t n_ends, char *why, size_t wlen)
{
	assert_int_equal(mf_store_run_create(st, TU_FP, TU_RUN), 0);
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(st, TU_FP, TU_RUN, shard, &cfg, &w), 0);
	assert_int_equal(mf_shard_writer_set_records(w, r), 0);
	int rc = 0;
	for (size_t off = 0; rc == 0 && off < len;) {
		size_t n = piece && len - off > piece ? piece : len - off;
		rc = mf_shard_writer_write(w, data + off, n);
		off += n;
	}
	if (rc == 0 && r->framing == MF_FRAMING_INDEX)
		rc = mf_shard_writer_set_ends(w, ends, n_ends);
	if (rc == 0)
		rc = mf_shard_writer_end_records(w);
	if (why)
		snprintf(why, wlen, "%s", mf_shard_writer_framing_error(w));
	if (rc) {
		mf_shard_writer_abort(w);
		return rc;
	}
	return mf_shard_writer_commit(w, NULL);
}

/* The shard reads back with exactly these record ends. */
static void assert_ends(struct mf_store *st, uint32_t shard,
			const struct mf_records *r, const uint64_t *ends,
			size_t n)
{
	struct mf_shard_reader *rd;
	assert_int_equal(mf_shard_reader_open(st, TU_FP, TU_RUN, shard, &rd),
			 0);
	struct mf_records got;
	uint64_t count;
	mf_shard_reader_records(rd, &got, &count);
	assert_int_equal(got.framing, r->framing);
	assert_int_equal(count, n);
	uint64_t prev = 0, off, len;
	for (size_t k = 0; k < n; k++) {
		assert_int_equal(mf_shard_reader_record(rd, k, &off, &len), 0);
		assert_int_equal(off, prev);
		assert_int_equal(off + len, ends[k]);
		prev = ends[k];
	}
	assert_int_equal(mf_shard_reader_record(rd, n, &off, &len), -EINVAL);
	assert_int_equal(mf_shard_reader_verify(rd, NULL), 0);
	mf_shard_reader_close(rd);
	struct mf_records light;
	assert_int_equal(
	    mf_shard_file_records(st, TU_FP, TU_RUN, shard, &light, &count), 0);
	assert_int_equal(light.framing, r->framing);
	assert_int_equal(count, n);
}

static void assert_no_file(struct tu_store *t, uint32_t shard)
{
	char path[512];
	struct stat sb;
	tu_shard_path(t->dir, shard, path, sizeof(path));
	assert_int_equal(stat(path, &sb), -1);
	size_t l = strlen(path);
	memcpy(path + l - 4, ".tmp", 4);
	assert_int_equal(stat(path, &sb), -1);
}

static const size_t pieces[] = {0, 1, 13, 512, 4095, 4097};
#define N_PIECES (sizeof(pieces) / sizeof(pieces[0]))

static void test_crc32c_vectors(void **state)
{
	(void)state;
	assert_int_equal(mf_crc32c("123456789", 9), 0xe3069283u);
	assert_int_equal(mf_crc32c("", 0), 0);
	/* TensorFlow's masked CRC of an empty record's length field */
	uint8_t zero[8] = {0};
	assert_int_equal(
	    mf_tfrecord_mask(mf_crc32c(zero, 8)),
	    ((mf_crc32c(zero, 8) >> 15) | (mf_crc32c(zero, 8) << 17)) +
		0xa282ead8u);
}

static void test_fixed(void **state)
{
	struct tu_store *t = *state;
	uint8_t *data = malloc(3 * CS + 16);
	tu_fill(data, 3 * CS + 16, 1, true);
	struct mf_records r = {MF_FRAMING_FIXED, 24, false};
	/* 3 * 4096 + 16 = 12304 = 24 * 512 + 16: error, then drop */
	char why[256];
	assert_int_equal(write_framed(t->st, 0, &r, data, 3 * CS + 16, 100,
				      NULL, 0, why, sizeof(why)),
			 -EBADMSG);
	assert_string_equal(why,
			    "stage output is 12304 bytes, not a multiple "
			    "of the 24-byte record (16 bytes over)");
	assert_no_file(t, 0);
	r.drop_tail = true;
	assert_int_equal(write_framed(t->st, 0, &r, data, 3 * CS + 16, 100,
				      NULL, 0, NULL, 0),
			 0);
	uint64_t ends[600];
	for (size_t k = 0; k < 512; k++)
		ends[k] = 24 * (k + 1);
	assert_ends(t->st, 0, &r, ends, 512);
	r.drop_tail = false;
	assert_int_equal(
	    write_framed(t->st, 1, &r, data, 24 * 512, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 1, &r, ends, 512);
	/* one record, and none */
	assert_int_equal(
	    write_framed(t->st, 2, &r, data, 24, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 2, &r, ends, 1);
	assert_int_equal(
	    write_framed(t->st, 3, &r, data, 0, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 3, &r, ends, 0);
	free(data);
}

static void test_lines(void **state)
{
	struct tu_store *t = *state;
	size_t len = 5 * CS + 77;
	uint8_t *data = malloc(len);
	uint64_t *ends = malloc(len * sizeof(*ends));
	tu_fill(data, len, 2, true);
	for (size_t i = 0; i < len; i += 61 + i % 1000) /* some long lines */
		data[i] = '\n';
	data[len - 1] = 'x'; /* a last line without a newline */
	struct mf_records r = {MF_FRAMING_LINES, 0, false};
	for (size_t p = 0; p < N_PIECES; p++) {
		size_t n = gen_line_ends(data, len, ends);
		assert_int_equal(write_framed(t->st, (uint32_t)p, &r, data, len,
					      pieces[p], NULL, 0, NULL, 0),
				 0);
		assert_ends(t->st, (uint32_t)p, &r, ends, n);
	}
	/* with the newline; one line; empty lines; nothing */
	data[len - 1] = '\n';
	size_t n = gen_line_ends(data, len, ends);
	assert_int_equal(
	    write_framed(t->st, 10, &r, data, len, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 10, &r, ends, n);
	assert_int_equal(write_framed(t->st, 11, &r, (const uint8_t *)"one", 3,
				      0, NULL, 0, NULL, 0),
			 0);
	ends[0] = 3;
	assert_ends(t->st, 11, &r, ends, 1);
	assert_int_equal(write_framed(t->st, 12, &r, (const uint8_t *)"\n\n", 2,
				      0, NULL, 0, NULL, 0),
			 0);
	ends[0] = 1;
	ends[1] = 2;
	assert_ends(t->st, 12, &r, ends, 2);
	assert_int_equal(
	    write_framed(t->st, 13, &r, data, 0, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 13, &r, ends, 0);
	free(data);
	free(ends);
}

static void test_tfrecord(void **state)
{
	struct tu_store *t = *state;
	size_t n = 40;
	uint8_t *src = malloc(4000), *buf = malloc(16 * n + 3000 * n);
	uint64_t ends[64];
	tu_fill(src, 4000, 3, false);
	size_t len = gen_tfrecord(buf, src, n, ends);
	struct mf_records r = {MF_FRAMING_TFRECORD, 0, false};
	for (size_t p = 0; p < N_PIECES; p++) {
		assert_int_equal(write_framed(t->st, (uint32_t)p, &r, buf, len,
					      pieces[p], NULL, 0, NULL, 0),
				 0);
		assert_ends(t->st, (uint32_t)p, &r, ends, n);
	}
	/* one empty frame, one frame, nothing */
	size_t one = gen_tfrecord(buf, src, 1, ends);
	assert_int_equal(one, 16);
	assert_int_equal(
	    write_framed(t->st, 10, &r, buf, one, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 10, &r, ends, 1);
	assert_int_equal(
	    write_framed(t->st, 11, &r, buf, 0, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 11, &r, ends, 0);
	free(src);
	free(buf);
}

static void test_tfrecord_bad(void **state)
{
	struct tu_store *t = *state;
	uint8_t *src = malloc(4000), *buf = malloc(16 * 4 + 3000 * 4);
	uint64_t ends[4];
	tu_fill(src, 4000, 4, false);
	size_t len = gen_tfrecord(buf, src, 4, ends);
	/* frames at 0, 16, 39, 76 (lengths 0, 7, 14, 21) */
	assert_int_equal(ends[2], 16 + 23 + 30);
	struct mf_records r = {MF_FRAMING_TFRECORD, 0, false};
	char why[256];
	struct {
		size_t at;
		size_t cut; /* 0: the whole output */
		const char *want;
	} bad[] = {
	    {16 + 12 + 3, 0, "TFRecord frame at offset 16: data CRC mismatch"},
	    {39 + 2, 0, "TFRecord frame at offset 39: length CRC mismatch"},
	    {39 + 9, 0, "TFRecord frame at offset 39: length CRC mismatch"},
	    {39 + 12 + 14, 0, "TFRecord frame at offset 39: data CRC mismatch"},
	    {SIZE_MAX, 39 + 5,
	     "TFRecord frame at offset 39 is cut short: the output ends 5 "
	     "bytes into its 12-byte header"},
	    {SIZE_MAX, len - 1,
	     "TFRecord frame at offset 69 is cut short: the output ends 36 "
	     "bytes into its 37 bytes"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		for (size_t p = 0; p < 3; p++) {
			if (bad[i].at != SIZE_MAX)
				buf[bad[i].at] ^= 0x20;
			size_t n = bad[i].cut ? bad[i].cut : len;
			assert_int_equal(write_framed(t->st, 0, &r, buf, n,
						      pieces[p], NULL, 0, why,
						      sizeof(why)),
					 -EBADMSG);
			assert_string_equal(why, bad[i].want);
			assert_no_file(t, 0);
			if (bad[i].at != SIZE_MAX)
				buf[bad[i].at] ^= 0x20;
		}
	}
	free(src);
	free(buf);
}

static void test_tar(void **state)
{
	struct tu_store *t = *state;
	size_t n = 12;
	uint8_t *src = malloc(2000), *buf = malloc(n * 8192 + 4096);
	uint64_t ends[16];
	tu_fill(src, 2000, 5, true);
	struct mf_records r = {MF_FRAMING_TAR, 0, false};
	for (int blocks = 0; blocks < 2; blocks++) {
		size_t len = gen_tar(buf, src, n, ends, blocks);
		for (size_t p = 0; p < N_PIECES; p++) {
			uint32_t k = (uint32_t)(p + 10 * blocks);
			assert_int_equal(write_framed(t->st, k, &r, buf, len,
						      pieces[p], NULL, 0, NULL,
						      0),
					 0);
			assert_ends(t->st, k, &r, ends, n);
		}
	}
	/* one sample; only the end blocks; nothing */
	size_t len = gen_tar(buf, src, 1, ends, true);
	assert_int_equal(
	    write_framed(t->st, 30, &r, buf, len, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 30, &r, ends, 1);
	memset(buf, 0, 10240);
	assert_int_equal(
	    write_framed(t->st, 31, &r, buf, 10240, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 31, &r, ends, 0);
	assert_int_equal(
	    write_framed(t->st, 32, &r, buf, 0, 0, NULL, 0, NULL, 0), 0);
	assert_ends(t->st, 32, &r, ends, 0);
	free(src);
	free(buf);
}

static void test_tar_bad(void **state)
{
	struct tu_store *t = *state;
	uint8_t *src = malloc(2000), *buf = malloc(4 * 8192 + 4096);
	uint64_t ends[4];
	tu_fill(src, 2000, 6, true);
	size_t len = gen_tar(buf, src, 1, ends, true);
	/* s0000.txt: header at 0, 1 byte of data; s0000.cls at 1024 */
	struct mf_records r = {MF_FRAMING_TAR, 0, false};
	char why[256];
	struct {
		size_t at;
		size_t cut;
		const char *want;
	} bad[] = {
	    {1024 + 3, 0,
	     "tar member at offset 1024: header checksum mismatch"},
	    {SIZE_MAX, 1024 + 100,
	     "tar member at offset 1024 is not a whole header (100 of 512 "
	     "bytes)"},
	    {SIZE_MAX, 300,
	     "tar member at offset 0 is not a whole header (300 of 512 "
	     "bytes)"},
	    {SIZE_MAX, 700,
	     "tar member at offset 0 is cut short: its 512 bytes of data and "
	     "padding end 324 bytes past the output"},
	    {len - 7, 0,
	     "tar: data at offset 3065, after the end-of-archive block at "
	     "offset 2048"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		for (size_t p = 0; p < 3; p++) {
			if (bad[i].at != SIZE_MAX)
				buf[bad[i].at] ^= 0x01;
			size_t n = bad[i].cut ? bad[i].cut : len;
			assert_int_equal(write_framed(t->st, 0, &r, buf, n,
						      pieces[p], NULL, 0, why,
						      sizeof(why)),
					 -EBADMSG);
			assert_string_equal(why, bad[i].want);
			assert_no_file(t, 0);
			if (bad[i].at != SIZE_MAX)
				buf[bad[i].at] ^= 0x01;
		}
	}
	/* a size field that is not a number: its checksum made right */
	gen_tar_header(buf, "x.txt", 1, '0');
	buf[124] = 'z';
	memset(buf + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += buf[i];
	snprintf((char *)buf + 148, 8, "%06o", sum);
	assert_int_equal(
	    write_framed(t->st, 0, &r, buf, 1024, 0, NULL, 0, why, sizeof(why)),
	    -EBADMSG);
	assert_string_equal(why, "tar member at offset 0: bad size field");
	free(src);
	free(buf);
}

static void test_index(void **state)
{
	struct tu_store *t = *state;
	size_t len = 3 * CS + 5;
	uint8_t *data = malloc(len);
	tu_fill(data, len, 7, true);
	uint64_t ends[] = {1, 100, 4096, 4097, 9000, 3 * CS + 5};
	size_t n = sizeof(ends) / sizeof(ends[0]);
	struct mf_records r = {MF_FRAMING_INDEX, 0, false};
	assert_int_equal(
	    write_framed(t->st, 0, &r, data, len, 1000, ends, n, NULL, 0), 0);
	assert_ends(t->st, 0, &r, ends, n);
	assert_int_equal(
	    write_framed(t->st, 1, &r, data, 0, 0, ends, 0, NULL, 0), 0);
	assert_ends(t->st, 1, &r, ends, 0);
	char why[256];
	uint64_t flat[] = {1, 100, 100, len};
	assert_int_equal(
	    write_framed(t->st, 2, &r, data, len, 0, flat, 4, why, sizeof(why)),
	    -EBADMSG);
	assert_string_equal(why,
			    "record end 100 from fd 3 (number 2) does "
			    "not increase on 100");
	assert_no_file(t, 2);
	assert_int_equal(write_framed(t->st, 2, &r, data, len, 0, ends, n - 1,
				      why, sizeof(why)),
			 -EBADMSG);
	assert_string_equal(why,
			    "the record ends from fd 3 end at 9000, but "
			    "the stage output is 12293 bytes");
	assert_int_equal(write_framed(t->st, 2, &r, data, len - 1, 0, ends, n,
				      why, sizeof(why)),
			 -EBADMSG);
	assert_string_equal(why,
			    "the record ends from fd 3 end at 12293, but "
			    "the stage output is 12292 bytes");
	assert_int_equal(
	    write_framed(t->st, 2, &r, data, 10, 0, ends, 0, why, sizeof(why)),
	    -EBADMSG);
	assert_string_equal(why,
			    "the record ends from fd 3 end at 0, but the "
			    "stage output is 10 bytes");
	assert_no_file(t, 2);
	free(data);
}

/* A flipped byte of the records section is corrupt when the section is
 * first used (a record's place, verify), not at open (a shard read as
 * bytes never reads it); one in the index or the trailer, at open. */
static void test_records_corrupt(void **state)
{
	struct tu_store *t = *state;
	struct mf_records r = {MF_FRAMING_LINES, 0, false};
	const char *text = "a\nbb\nccc\n";
	assert_int_equal(write_framed(t->st, 0, &r, (const uint8_t *)text, 9, 0,
				      NULL, 0, NULL, 0),
			 0);
	char path[512];
	tu_shard_path(t->dir, 0, path, sizeof(path));
	uint8_t *d;
	size_t n;
	assert_int_equal(tu_read_file(path, &d, &n), 0);
	/* 16 header, one chunk, 3 ends, one entry, 96 trailer */
	size_t ends_at = n - 96 - 32 - 24;
	assert_int_equal(d[ends_at], 2);
	for (size_t i = ends_at; i < n; i++) {
		d[i] ^= 0x40;
		assert_int_equal(tu_write_file(path, d, n), 0);
		struct mf_shard_reader *rd;
		int rc = mf_shard_reader_open(t->st, TU_FP, TU_RUN, 0, &rd);
		if (i < ends_at + 24) {
			uint64_t off, len;
			assert_int_equal(rc, 0);
			assert_int_equal(
			    mf_shard_reader_record(rd, 1, &off, &len),
			    -EBADMSG);
			assert_int_equal(mf_shard_reader_verify(rd, NULL),
					 -EBADMSG);
			uint8_t buf[9];
			assert_int_equal(mf_shard_reader_pread(rd, buf, 9, 0),
					 9);
			assert_memory_equal(buf, text, 9);
			mf_shard_reader_close(rd);
		} else {
			assert_int_equal(rc, -EBADMSG);
		}
		d[i] ^= 0x40;
	}
	free(d);
}

static void test_set_records_args(void **state)
{
	struct tu_store *t = *state;
	assert_int_equal(mf_store_run_create(t->st, TU_FP, TU_RUN), 0);
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(t->st, TU_FP, TU_RUN, 0, &cfg, &w), 0);
	struct mf_records bad[] = {
	    {MF_FRAMING_FIXED, 0, false},
	    {MF_FRAMING_FIXED, MF_RECORD_SIZE_MAX + 1, false},
	    {(enum mf_framing)99, 0, false},
	};
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(mf_shard_writer_set_records(w, &bad[i]),
				 -EINVAL);
	uint64_t e = 1;
	assert_int_equal(mf_shard_writer_set_ends(w, &e, 1), -EINVAL);
	assert_string_equal(mf_shard_writer_framing_error(w), "");
	assert_int_equal(mf_shard_writer_write(w, "x", 1), 0);
	struct mf_records lines = {MF_FRAMING_LINES, 0, false};
	assert_int_equal(mf_shard_writer_set_records(w, &lines), -EBUSY);
	mf_shard_writer_abort(w);
}

#define T(f)                                                                   \
	cmocka_unit_test_setup_teardown(f, tu_store_setup, tu_store_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crc32c_vectors),
	    T(test_fixed),
	    T(test_lines),
	    T(test_tfrecord),
	    T(test_tfrecord_bad),
	    T(test_tar),
	    T(test_tar_bad),
	    T(test_index),
	    T(test_records_corrupt),
	    T(test_set_records_args),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
