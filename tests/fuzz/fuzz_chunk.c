/*
 * fuzz_chunk.c - fuzz target for mf_chunk_decode, the decoder of one
 * stored chunk (snapshot/mf_snapshot.h). The checksum is computed over the
 * input as docs/format.md defines it, so the bytes reach the zstd and
 * snappy decompressors instead of stopping at the checksum.
 *
 * Input: an 8-byte header, then the stored bytes.
 *   byte 0   bits 0-1: codec (0 none, 1 zstd, 2 snappy, 3 an unknown id);
 *            bit 2: take the raw length from bytes 5-7 rather than from
 *            the stored bytes' own header (zstd frame content size,
 *            snappy preamble); bit 3: pass a wrong checksum;
 *            bit 4: decode in place (codec none only)
 *   1-4      the chunk index (little-endian), the checksum's seed
 *   5-7      a raw length (little-endian, at most FUZZ_RAW_MAX)
 * Each decode is checked against an independent decode of the same bytes
 * (ZSTD_decompress, snappy_uncompress, memcmp): same verdict, same bytes.
 *
 * Not for: shard files (fuzz_shard.c).
 */
#include "fuzz.h"
#include "mf_snapshot.h"

#include <errno.h>
#include <string.h>

#include <snappy-c.h>
#include <xxhash.h>
#include <zstd.h>

#define FUZZ_RAW_MAX (1U << 20)
#define HDR 8
#define POISON 0xa5

enum { F_EXPLICIT = 1 << 2, F_BADSUM = 1 << 3, F_INPLACE = 1 << 4 };

struct chunk_case {
	enum mf_codec codec;
	uint32_t index;
	const uint8_t *src; /* the stored bytes; NULL when src_len is 0 */
	size_t src_len;
	size_t raw_len;
	uint64_t checksum;
	unsigned flags;
};

static uint32_t get_le(const uint8_t *p, int n)
{
	uint32_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* The raw length the stored bytes announce themselves, or `fallback`. */
static size_t own_length(enum mf_codec codec, const uint8_t *src, size_t len,
			 size_t fallback)
{
	unsigned long long z;
	size_t s;
	switch (codec) {
	case MF_CODEC_ZSTD:
		z = ZSTD_getFrameContentSize(src, len);
		return z <= FUZZ_RAW_MAX ? (size_t)z : fallback;
	case MF_CODEC_SNAPPY:
		if (len &&
		    snappy_uncompressed_length((const char *)src, len, &s) ==
			SNAPPY_OK &&
		    s <= FUZZ_RAW_MAX)
			return s;
		return fallback;
	case MF_CODEC_NONE:
		return len;
	}
	return fallback;
}

/* Decodes c->src the way the format says, without mf_chunk_decode.
 * Returns true and fills ref (raw_len bytes) when it decodes to exactly
 * raw_len bytes. */
static bool reference_decode(const struct chunk_case *c, uint8_t *ref)
{
	size_t n;
	switch (c->codec) {
	case MF_CODEC_ZSTD:
		n = ZSTD_decompress(ref, c->raw_len, c->src, c->src_len);
		return !ZSTD_isError(n) && n == c->raw_len;
	case MF_CODEC_SNAPPY:
		if (!c->src_len ||
		    snappy_uncompressed_length((const char *)c->src, c->src_len,
					       &n) != SNAPPY_OK ||
		    n != c->raw_len)
			return false;
		return snappy_uncompress((const char *)c->src, c->src_len,
					 (char *)ref, &n) == SNAPPY_OK &&
		    n == c->raw_len;
	case MF_CODEC_NONE:
		if (c->src_len != c->raw_len)
			return false;
		if (c->raw_len)
			memcpy(ref, c->src, c->raw_len);
		return true;
	}
	return false;
}

static bool untouched(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != POISON)
			return false;
	}
	return true;
}

static void check_decode(const struct chunk_case *c)
{
	bool inplace = c->codec == MF_CODEC_NONE && (c->flags & F_INPLACE) &&
	    c->src_len == c->raw_len && c->src_len;
	uint8_t *dst = malloc(c->raw_len ? c->raw_len : 1);
	uint8_t *ref = malloc(c->raw_len ? c->raw_len : 1);
	FUZZ_CHECK(dst && ref);
	memset(dst, POISON, c->raw_len);
	if (inplace)
		memcpy(dst, c->src, c->raw_len);
	int rc = mf_chunk_decode(c->codec, c->index, inplace ? dst : c->src,
				 c->src_len, c->checksum, dst, c->raw_len);
	FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -ENOMEM);
	if (c->flags & F_BADSUM) {
		/* a bad checksum is refused before a byte is written */
		FUZZ_CHECK(rc == -EBADMSG);
		FUZZ_CHECK(inplace || untouched(dst, c->raw_len));
	} else if (rc != -ENOMEM) {
		bool ok = reference_decode(c, ref);
		FUZZ_CHECK(ok == (rc == 0));
		FUZZ_CHECK(!ok || !c->raw_len ||
			   memcmp(dst, ref, c->raw_len) == 0);
	}
	free(ref);
	free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t empty[1];
	if (size < HDR)
		return 0;
	unsigned flags = data[0];
	uint32_t sel = flags & 3;
	struct chunk_case c = {
	    .codec = (enum mf_codec)sel, /* 3: an id no codec has */
	    .index = get_le(data + 1, 4),
	    .src = size > HDR ? data + HDR : NULL,
	    .src_len = size - HDR,
	    .flags = flags,
	};
	size_t explicit_len = get_le(data + 5, 3);
	if (explicit_len > FUZZ_RAW_MAX)
		return 0;
	c.raw_len = (flags & F_EXPLICIT)
	    ? explicit_len
	    : own_length(c.codec, c.src, c.src_len, explicit_len);
	c.checksum =
	    XXH3_64bits_withSeed(c.src_len ? c.src : empty, c.src_len, c.index);
	if (flags & F_BADSUM)
		c.checksum ^= 1ULL << (c.index % 64);
	check_decode(&c);
	return 0;
}
