/*
 * test_snap_codec.c - mf_chunk_decode, the pure chunk decoder: good chunks
 * of every codec decode; a wrong checksum, seed, length, codec or stored
 * stream is -EBADMSG and never writes past raw_len.
 *
 * Not for: files (test_snap_roundtrip.c, test_snap_corrupt.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <snappy-c.h>
#include <xxhash.h>
#include <zstd.h>

#include "mf_snapshot.h"
#include "snap_testutil.h"

#define RAW 10000

struct chunk {
	enum mf_codec codec;
	uint8_t stored[2 * RAW];
	size_t len;
	uint64_t sum; /* seeded with index 5 */
};

static uint8_t src[RAW];

static void make(struct chunk *c, enum mf_codec codec)
{
	c->codec = codec;
	if (codec == MF_CODEC_ZSTD) {
		c->len =
		    ZSTD_compress(c->stored, sizeof(c->stored), src, RAW, 3);
		assert_false(ZSTD_isError(c->len));
	} else if (codec == MF_CODEC_SNAPPY) {
		c->len = sizeof(c->stored);
		assert_int_equal(snappy_compress((const char *)src, RAW,
						 (char *)c->stored, &c->len),
				 SNAPPY_OK);
	} else {
		memcpy(c->stored, src, RAW);
		c->len = RAW;
	}
	c->sum = XXH3_64bits_withSeed(c->stored, c->len, 5);
}

static int decode(const struct chunk *c, size_t raw, uint8_t *dst)
{
	return mf_chunk_decode(c->codec, 5, c->stored, c->len, c->sum, dst,
			       raw);
}

static void test_good_chunks(void **state)
{
	(void)state;
	static const enum mf_codec codecs[] = {MF_CODEC_ZSTD, MF_CODEC_SNAPPY,
					       MF_CODEC_NONE};
	tu_fill(src, RAW, 11, true);
	for (int i = 0; i < 3; i++) {
		struct chunk c;
		make(&c, codecs[i]);
		uint8_t *dst = malloc(RAW);
		assert_int_equal(decode(&c, RAW, dst), 0);
		assert_memory_equal(dst, src, RAW);
		free(dst);
	}
}

static void test_bad_chunks(void **state)
{
	(void)state;
	static const enum mf_codec codecs[] = {MF_CODEC_ZSTD, MF_CODEC_SNAPPY,
					       MF_CODEC_NONE};
	tu_fill(src, RAW, 12, true);
	for (int i = 0; i < 3; i++) {
		struct chunk c;
		make(&c, codecs[i]);
		/* a canary after raw_len catches any overrun */
		uint8_t *dst = malloc(RAW + 64);
		memset(dst, 0xa5, RAW + 64);
		assert_int_equal(mf_chunk_decode(c.codec, 5, c.stored, c.len,
						 c.sum + 1, dst, RAW),
				 -EBADMSG);
		assert_int_equal(mf_chunk_decode(c.codec, 6, c.stored, c.len,
						 c.sum, dst, RAW),
				 -EBADMSG);
		assert_int_equal(decode(&c, RAW - 1, dst), -EBADMSG);
		for (int k = RAW - 1; k < RAW + 64; k++)
			assert_int_equal(dst[k], 0xa5);
		uint8_t *big = malloc(RAW + 1);
		assert_int_equal(decode(&c, RAW + 1, big), -EBADMSG);
		free(big);
		/* the right checksum over the wrong codec's view */
		enum mf_codec other = codecs[(i + 1) % 3];
		assert_int_equal(
		    mf_chunk_decode(other, 5, c.stored, c.len, c.sum, dst, RAW),
		    -EBADMSG);
		assert_int_equal(mf_chunk_decode((enum mf_codec)9, 5, c.stored,
						 c.len, c.sum, dst, RAW),
				 -EBADMSG);
		free(dst);
	}
}

/* Streams that pass their checksum but are not what they claim. */
static void test_garbage_with_good_checksum(void **state)
{
	(void)state;
	uint8_t junk[4096], dst[RAW];
	uint64_t rs = 99;
	for (int round = 0; round < 200; round++) {
		size_t n = (size_t)(tu_rand(&rs) % sizeof(junk)) + 1;
		for (size_t k = 0; k < n; k++)
			junk[k] = (uint8_t)tu_rand(&rs);
		uint64_t sum = XXH3_64bits_withSeed(junk, n, 0);
		int rc = mf_chunk_decode(MF_CODEC_ZSTD, 0, junk, n, sum, dst,
					 sizeof(dst));
		assert_int_equal(rc, -EBADMSG);
		rc = mf_chunk_decode(MF_CODEC_SNAPPY, 0, junk, n, sum, dst,
				     sizeof(dst));
		assert_int_equal(rc, -EBADMSG);
	}
	/* a valid zstd frame of another length */
	tu_fill(src, RAW, 13, true);
	uint8_t frame[RAW + 512];
	size_t fl = ZSTD_compress(frame, sizeof(frame), src, RAW - 10, 1);
	uint64_t sum = XXH3_64bits_withSeed(frame, fl, 1);
	assert_int_equal(
	    mf_chunk_decode(MF_CODEC_ZSTD, 1, frame, fl, sum, dst, RAW),
	    -EBADMSG);
	assert_int_equal(
	    mf_chunk_decode(MF_CODEC_ZSTD, 1, frame, fl, sum, dst, RAW - 10),
	    0);
	assert_memory_equal(dst, src, RAW - 10);
	/* empty and NULL inputs */
	assert_int_equal(
	    mf_chunk_decode(MF_CODEC_ZSTD, 0, NULL, 10, 0, dst, RAW), -EBADMSG);
	sum = XXH3_64bits_withSeed(NULL, 0, 0);
	assert_int_equal(
	    mf_chunk_decode(MF_CODEC_ZSTD, 0, "", 0, sum, dst, RAW), -EBADMSG);
	assert_int_equal(
	    mf_chunk_decode(MF_CODEC_SNAPPY, 0, "", 0, sum, dst, RAW),
	    -EBADMSG);
	assert_int_equal(mf_chunk_decode(MF_CODEC_NONE, 0, "", 0, sum, dst, 0),
			 0);
}

/* The checksum the module computes (with the CPU's widest vector unit
 * where it can choose one) is XXH3's reference value: every length from 0
 * to 1100 and a few around the stripes and blocks, from aligned and
 * unaligned addresses, up to a chunk of 4 MiB and a bit. */
static void test_checksum_is_xxh3(void **state)
{
	(void)state;
	size_t big = (4u << 20) + 7;
	uint8_t *buf = malloc(big + 64);
	uint8_t *dst = malloc(big);
	assert_non_null(buf);
	assert_non_null(dst);
	tu_fill(buf, big + 64, 21, false);
	static const size_t lens[] = {1023,  1024,  1025,	    65535,
				      65536, 65537, (1u << 20) + 3, 4u << 20};
	size_t n = 1101 + sizeof(lens) / sizeof(lens[0]) + 1;
	for (size_t i = 0; i < n; i++) {
		size_t len = i < 1101 ? i : i < n - 1 ? lens[i - 1101] : big;
		for (size_t off = 0; off < 3; off++) {
			const uint8_t *p = buf + off * 17;
			uint64_t sum = XXH3_64bits_withSeed(p, len, 7 + off);
			assert_int_equal(mf_chunk_decode(MF_CODEC_NONE, 7 + off,
							 p, len, sum, dst, len),
					 0);
			assert_int_equal(mf_chunk_decode(MF_CODEC_NONE, 7 + off,
							 p, len, sum ^ 1, dst,
							 len),
					 -EBADMSG);
		}
	}
	free(dst);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_checksum_is_xxh3),
	    cmocka_unit_test(test_good_chunks),
	    cmocka_unit_test(test_bad_chunks),
	    cmocka_unit_test(test_garbage_with_good_checksum),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
