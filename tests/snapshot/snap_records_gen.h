/*
 * snap_records_gen.h - builds framed test content, with the record ends
 * it must index: TFRecord frames, tar archives of WebDataset samples,
 * lines. The golden generator, the golden test and test_snap_records.c
 * share it; the ends come from how the bytes were built, not from the
 * indexer under test.
 *
 * Not for: changing once golden files use it (the version 4 folder was
 * written from it).
 */
#ifndef SNAP_RECORDS_GEN_H
#define SNAP_RECORDS_GEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mf_snapshot.h"

static inline void gen_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Appends one TFRecord frame of len bytes of data at buf + *pos. */
static inline void gen_tf_frame(uint8_t *buf, size_t *pos, const uint8_t *data,
				size_t len)
{
	uint8_t *p = buf + *pos;
	gen_le(p, len, 8);
	gen_le(p + 8, mf_tfrecord_mask(mf_crc32c(p, 8)), 4);
	memcpy(p + 12, data, len);
	gen_le(p + 12 + len, mf_tfrecord_mask(mf_crc32c(data, len)), 4);
	*pos += 16 + len;
}

/* n frames of lengths 0, 7, 14, ... (mod 3000) of data; ends[k] each
 * frame's end. Returns the bytes written (buf holds 16 * n + 3000 * n). */
static inline size_t gen_tfrecord(uint8_t *buf, const uint8_t *data, size_t n,
				  uint64_t *ends)
{
	size_t pos = 0;
	for (size_t k = 0; k < n; k++) {
		gen_tf_frame(buf, &pos, data + k, (k * 7) % 3000);
		ends[k] = pos;
	}
	return pos;
}

/* A ustar header for name (< 100 bytes) of size bytes and type. */
static inline void gen_tar_header(uint8_t *h, const char *name, size_t size,
				  char type)
{
	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	snprintf((char *)h + 100, 8, "%07o", 0644);
	snprintf((char *)h + 108, 8, "%07o", 0);
	snprintf((char *)h + 116, 8, "%07o", 0);
	snprintf((char *)h + 124, 12, "%011zo", size);
	snprintf((char *)h + 136, 12, "%011o", 1700000000);
	h[156] = (uint8_t)type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
}

/* Appends a member (header, data, padding). */
static inline void gen_tar_member(uint8_t *buf, size_t *pos, const char *name,
				  const uint8_t *data, size_t size, char type)
{
	gen_tar_header(buf + *pos, name, size, type);
	*pos += 512;
	memcpy(buf + *pos, data, size);
	memset(buf + *pos + size, 0, (512 - size % 512) % 512);
	*pos += (size + 511) / 512 * 512;
}

/* n samples "dir/sNNNN.txt" + "dir/sNNNN.cls" (sample 1 also with a
 * pax path header naming its .json; a directory member after sample 1),
 * then two end blocks. Returns the bytes (buf holds n * 8 KiB + 4 KiB). */
static inline size_t gen_tar(uint8_t *buf, const uint8_t *data, size_t n,
			     uint64_t *ends, bool end_blocks)
{
	size_t pos = 0;
	char name[100];
	for (size_t k = 0; k < n; k++) {
		if (k == 2) { /* belongs to the sample it follows */
			gen_tar_member(buf, &pos, "dir/", data, 0, '5');
			ends[1] = pos;
		}
		snprintf(name, sizeof(name), "dir/s%04zu.txt", k);
		gen_tar_member(buf, &pos, name, data + k, 1 + (k * 37) % 900,
			       '0');
		if (k == 1) {
			char pax[64];
			const char *rec = "path=dir/s0001.meta.json\n";
			int len = (int)strlen(rec) + 3;
			snprintf(pax, sizeof(pax), "%d %s", len, rec);
			gen_tar_member(buf, &pos, "PaxHeader", (uint8_t *)pax,
				       strlen(pax), 'x');
			gen_tar_member(buf, &pos, "ignored", data, 5, '0');
		}
		snprintf(name, sizeof(name), "dir/s%04zu.cls", k);
		gen_tar_member(buf, &pos, name, (const uint8_t *)"7", 1, '0');
		ends[k] = pos;
	}
	if (end_blocks) {
		memset(buf + pos, 0, 1024);
		pos += 1024;
	}
	return pos;
}

/* The ends of lines of buf: after each '\n', and at n when the last
 * line has none. Returns the count. */
static inline size_t gen_line_ends(const uint8_t *buf, size_t n, uint64_t *ends)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '\n')
			ends[k++] = i + 1;
	if (n && (k == 0 || ends[k - 1] != n))
		ends[k++] = n;
	return k;
}

/* The bytes of a golden framed shard (snap_golden.h's golden_records)
 * into buf (GOLDEN_FRAMED_MAX bytes) and its record ends (as many);
 * returns the length, *n the ends. Content from golden_fill. Fixed
 * records get ends too, for the test: size, 2 * size, ... */
static inline size_t golden_framed(const struct mf_records *r, uint32_t seed,
				   uint8_t *buf, uint64_t *ends, size_t *n,
				   void (*fill)(uint8_t *, size_t, uint32_t))
{
	static uint8_t src[8192];
	fill(src, sizeof(src), seed);
	size_t len = 0;
	switch (r->framing) {
	case MF_FRAMING_FIXED:
		len = 3 * 4096 + 1234;
		fill(buf, len, seed);
		*n = len / r->size;
		for (size_t k = 0; k < *n; k++)
			ends[k] = (k + 1) * r->size;
		break;
	case MF_FRAMING_LINES:
		len = 3 * 4096 + 1234;
		fill(buf, len, seed);
		*n = gen_line_ends(buf, len, ends);
		break;
	case MF_FRAMING_TFRECORD:
		*n = 30;
		len = gen_tfrecord(buf, src, *n, ends);
		break;
	case MF_FRAMING_TAR:
		*n = 9;
		len = gen_tar(buf, src, *n, ends, true);
		break;
	default: /* index: a record every 1000 bytes or so */
		len = 3 * 4096 + 1234;
		fill(buf, len, seed);
		*n = 0;
		for (size_t at = 999; at < len; at += 1000 + *n % 7)
			ends[(*n)++] = at;
		ends[(*n)++] = len;
		break;
	}
	return len;
}

#endif
