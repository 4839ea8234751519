/*
 * records.c - the record index of a shard, built as its bytes are
 * written: a streaming parser per framing (fixed size, lines, TFRecord
 * frames with their masked CRC32C checked, WebDataset samples of a tar
 * archive) that collects each record's end offset, and the checks of ends
 * a stage wrote to fd 3 (records: index). Output that breaks its framing
 * stops the parser with a message naming the byte offset.
 *
 * Not for: where the index goes in the file (shard_format.c, the
 * writer) or running stages. CRC32C is ISA-L's (crc32_iscsi).
 */
#include "snapshot_i.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/crc.h>

#define TAR_BLOCK 512
#define NONE_YET UINT64_MAX

uint32_t mf_crc32c(const void *p, size_t n)
{
	return ~snap_crc32c_update(0xffffffffu, p, n);
}

uint32_t snap_crc32c_update(uint32_t crc, const void *p, size_t n)
{
	const unsigned char *b = p;
	while (n > 0) { /* ISA-L takes an int length */
		size_t k = n > (1u << 30) ? (1u << 30) : n;
		crc = crc32_iscsi((unsigned char *)b, (int)k, crc);
		b += k;
		n -= k;
	}
	return crc;
}

uint32_t mf_tfrecord_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

__attribute__((format(printf, 2, 3))) static int
ix_fail(struct snap_indexer *ix, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ix->why, sizeof(ix->why), fmt, ap);
	va_end(ap);
	ix->err = -EBADMSG;
	return ix->err;
}

/* Doubles the ends' room. Their buffer comes from mf_buf_alloc: past
 * its mapping size a freed one is kept for the next shard's indexer of
 * the same size, whose pages are in already (a shard of 100-byte lines
 * holds 80 MiB of ends a GiB: new pages for them cost their zeroing and
 * faults every shard). */
static int grow_ends(struct snap_indexer *ix)
{
	size_t bytes = ix->cap ? 2 * ix->cap * sizeof(*ix->ends) : 8192;
	size_t got;
	uint64_t *v = mf_buf_alloc(bytes, &got);
	if (!v) {
		ix->err = -ENOMEM;
		return ix->err;
	}
	if (ix->n)
		memcpy(v, ix->ends, ix->n * sizeof(*v));
	mf_buf_free(ix->ends, ix->cap * sizeof(*ix->ends));
	ix->ends = v;
	ix->cap = got / sizeof(*v);
	return 0;
}

static inline int push_end(struct snap_indexer *ix, uint64_t end)
{
	if (ix->n == ix->cap && grow_ends(ix))
		return ix->err;
	ix->ends[ix->n++] = end;
	return 0;
}

void snap_indexer_init(struct snap_indexer *ix, const struct mf_records *r)
{
	memset(ix, 0, sizeof(*ix));
	ix->cfg = *r;
	ix->tar_pending = NONE_YET;
}

void snap_indexer_release(struct snap_indexer *ix)
{
	mf_buf_free(ix->ends, ix->cap * sizeof(*ix->ends));
	free(ix->meta);
	ix->ends = NULL;
	ix->meta = NULL;
	ix->n = ix->cap = 0;
}

/* ---- lines ---- */

static int feed_lines(struct snap_indexer *ix, const uint8_t *p, size_t n)
{
	const uint8_t *end = p + n, *q = p;
	while ((q = memchr(q, '\n', (size_t)(end - q))) != NULL) {
		q++;
		if (push_end(ix, ix->pos + (uint64_t)(q - p)))
			return ix->err;
	}
	return 0;
}

/* ---- TFRecord: u64 length, u32 masked CRC32C of it, data, u32 masked
 * CRC32C of the data ---- */

enum { TF_HEADER, TF_DATA, TF_FOOTER };

static int tf_header_done(struct snap_indexer *ix)
{
	uint64_t len = snap_get_u64(ix->hdr);
	uint32_t want = snap_get_u32(ix->hdr + 8);
	if (mf_tfrecord_mask(mf_crc32c(ix->hdr, 8)) != want)
		return ix_fail(ix,
			       "TFRecord frame at offset %llu: length CRC "
			       "mismatch",
			       (unsigned long long)ix->rec_start);
	ix->left = len;
	ix->crc = 0xffffffffu;
	ix->state = len ? TF_DATA : TF_FOOTER;
	ix->have = 0;
	return 0;
}

static int tf_footer_done(struct snap_indexer *ix)
{
	uint32_t want = snap_get_u32(ix->hdr);
	if (mf_tfrecord_mask(~ix->crc) != want)
		return ix_fail(ix,
			       "TFRecord frame at offset %llu: data CRC "
			       "mismatch",
			       (unsigned long long)ix->rec_start);
	uint64_t end = ix->rec_start + 16 + snap_get_u64(ix->len_bytes);
	ix->rec_start = end;
	ix->state = TF_HEADER;
	ix->have = 0;
	return push_end(ix, end);
}

/* Takes what is missing of a want-byte field into ix->hdr. */
static size_t take_field(struct snap_indexer *ix, const uint8_t *p, size_t n,
			 size_t want)
{
	size_t k = want - ix->have < n ? want - ix->have : n;
	memcpy(ix->hdr + ix->have, p, k);
	ix->have += k;
	return k;
}

static int feed_tfrecord(struct snap_indexer *ix, const uint8_t *p, size_t n)
{
	while (n > 0) {
		size_t k;
		if (ix->state == TF_HEADER) {
			k = take_field(ix, p, n, 12);
			if (ix->have == 12) {
				memcpy(ix->len_bytes, ix->hdr, 8);
				if (tf_header_done(ix))
					return ix->err;
			}
		} else if (ix->state == TF_DATA) {
			k = ix->left < n ? (size_t)ix->left : n;
			ix->crc = snap_crc32c_update(ix->crc, p, k);
			ix->left -= k;
			if (ix->left == 0)
				ix->state = TF_FOOTER;
		} else {
			k = take_field(ix, p, n, 4);
			if (ix->have == 4 && tf_footer_done(ix))
				return ix->err;
		}
		p += k;
		n -= k;
	}
	return 0;
}

static int end_tfrecord(struct snap_indexer *ix)
{
	uint64_t got = ix->pos - ix->rec_start;
	if (ix->state == TF_HEADER && ix->have == 0)
		return 0;
	if (ix->state == TF_HEADER)
		return ix_fail(ix,
			       "TFRecord frame at offset %llu is cut short: "
			       "the output ends %llu bytes into its 12-byte "
			       "header",
			       (unsigned long long)ix->rec_start,
			       (unsigned long long)got);
	return ix_fail(ix,
		       "TFRecord frame at offset %llu is cut short: the "
		       "output ends %llu bytes into its %llu bytes",
		       (unsigned long long)ix->rec_start,
		       (unsigned long long)got,
		       (unsigned long long)(16 + snap_get_u64(ix->len_bytes)));
}

/* ---- tar: WebDataset samples, consecutive members sharing a key ---- */

/* An octal field (NUL or space terminated, leading spaces allowed), or
 * GNU's base-256 with the high bit of the first byte set. */
static bool tar_number(const uint8_t *f, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	if (f[0] & 0x80) {
		if (f[0] != 0x80)
			return false; /* negative or too large */
		for (size_t i = 1; i < len; i++) {
			if (v >> 56)
				return false;
			v = (v << 8) | f[i];
		}
		*out = v;
		return true;
	}
	size_t i = 0;
	while (i < len && f[i] == ' ')
		i++;
	size_t digits = 0;
	for (; i < len && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
		if (v >> 60)
			return false;
		v = v * 8 + (uint64_t)(f[i] - '0');
	}
	for (; i < len; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return false;
	*out = v;
	return digits > 0;
}

static bool tar_checksum_ok(const uint8_t *h)
{
	uint64_t want;
	if (!tar_number(h + 148, 8, &want))
		return false;
	uint64_t sum = 0;
	for (size_t i = 0; i < TAR_BLOCK; i++)
		sum += i >= 148 && i < 156 ? ' ' : h[i];
	return sum == want;
}

/* The member's name: the pending long name (pax path or GNU 'L'), or the
 * ustar prefix and name. */
static int tar_name(struct snap_indexer *ix, const uint8_t *h, char *out,
		    size_t cap)
{
	if (ix->next_name[0]) {
		snprintf(out, cap, "%s", ix->next_name);
		ix->next_name[0] = '\0';
		return 0;
	}
	char name[101], prefix[156];
	memcpy(name, h, 100);
	name[100] = '\0';
	prefix[0] = '\0';
	if (memcmp(h + 257, "ustar", 5) == 0) {
		memcpy(prefix, h + 345, 155);
		prefix[155] = '\0';
	}
	if (prefix[0])
		snprintf(out, cap, "%s/%s", prefix, name);
	else
		snprintf(out, cap, "%s", name);
	return 0;
}

/* The sample key: the name up to the first dot of its last component. */
static size_t tar_key_len(const char *name)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	const char *dot = strchr(base, '.');
	return dot ? (size_t)(dot - name) : strlen(name);
}

/* pax records "LEN key=value\n": the path, if one is given. */
static int tar_pax(struct snap_indexer *ix)
{
	size_t i = 0;
	while (i < ix->meta_len) {
		size_t len = 0, j = i;
		while (j < ix->meta_len && ix->meta[j] >= '0' &&
		       ix->meta[j] <= '9' && len < ix->meta_len)
			len = len * 10 + (size_t)(ix->meta[j++] - '0');
		if (len == 0 || j >= ix->meta_len || ix->meta[j] != ' ' ||
		    len > ix->meta_len - i || ix->meta[i + len - 1] != '\n')
			return ix_fail(ix,
				       "tar member at offset %llu: bad pax "
				       "extended header",
				       (unsigned long long)ix->meta_at);
		const char *kv = (const char *)ix->meta + j + 1;
		size_t kvlen = i + len - 1 - (j + 1);
		if (kvlen >= 5 && memcmp(kv, "path=", 5) == 0) {
			if (kvlen - 5 >= sizeof(ix->next_name))
				return ix_fail(ix,
					       "tar member at offset %llu: "
					       "name longer than %zu bytes",
					       (unsigned long long)ix->meta_at,
					       sizeof(ix->next_name) - 1);
			memcpy(ix->next_name, kv + 5, kvlen - 5);
			ix->next_name[kvlen - 5] = '\0';
		}
		i += len;
	}
	return 0;
}

static int tar_meta_done(struct snap_indexer *ix)
{
	ix->collecting = false;
	if (ix->meta_type == 'x')
		return tar_pax(ix);
	/* 'L': the next member's name, NUL-terminated */
	size_t len = strnlen((const char *)ix->meta, ix->meta_len);
	if (len >= sizeof(ix->next_name))
		return ix_fail(ix,
			       "tar member at offset %llu: name longer than "
			       "%zu bytes",
			       (unsigned long long)ix->meta_at,
			       sizeof(ix->next_name) - 1);
	memcpy(ix->next_name, ix->meta, len);
	ix->next_name[len] = '\0';
	return 0;
}

/* A regular file: a new sample when its key differs from the last. */
static int tar_file(struct snap_indexer *ix, const uint8_t *h, uint64_t at)
{
	char name[sizeof(ix->next_name) + 160];
	tar_name(ix, h, name, sizeof(name));
	size_t klen = tar_key_len(name);
	if (klen >= sizeof(ix->key))
		return ix_fail(ix,
			       "tar member at offset %llu: name longer than "
			       "%zu bytes",
			       (unsigned long long)at, sizeof(ix->key) - 1);
	uint64_t start = ix->tar_pending != NONE_YET ? ix->tar_pending : at;
	ix->tar_pending = NONE_YET;
	if (ix->have_key && klen == strlen(ix->key) &&
	    memcmp(ix->key, name, klen) == 0)
		return 0;
	if (ix->have_key && push_end(ix, start))
		return ix->err;
	memcpy(ix->key, name, klen);
	ix->key[klen] = '\0';
	ix->have_key = true;
	return 0;
}

static int tar_header(struct snap_indexer *ix)
{
	const uint8_t *h = ix->blk;
	uint64_t at = ix->pos_of_blk;
	bool zero = true;
	for (size_t i = 0; i < TAR_BLOCK && zero; i++)
		zero = h[i] == 0;
	if (zero) {
		ix->tar_end = at;
		ix->tar_ended = true;
		return 0;
	}
	if (!tar_checksum_ok(h))
		return ix_fail(ix,
			       "tar member at offset %llu: header checksum "
			       "mismatch",
			       (unsigned long long)at);
	uint64_t size;
	if (!tar_number(h + 124, 12, &size))
		return ix_fail(ix, "tar member at offset %llu: bad size field",
			       (unsigned long long)at);
	ix->member_at = at;
	ix->member_size = size;
	ix->left = (size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
	uint8_t type = h[156];
	if (type == 'x' || type == 'L') {
		if (size > SNAP_TAR_META_MAX)
			return ix_fail(ix,
				       "tar member at offset %llu: extended "
				       "header of %llu bytes (at most %u)",
				       (unsigned long long)at,
				       (unsigned long long)size,
				       SNAP_TAR_META_MAX);
		if (!ix->meta && !(ix->meta = malloc(SNAP_TAR_META_MAX))) {
			ix->err = -ENOMEM;
			return ix->err;
		}
		ix->collecting = true;
		ix->meta_type = type;
		ix->meta_len = 0;
		ix->meta_at = at;
	}
	if (type == 'x' || type == 'L' || type == 'g' || type == 'K') {
		if (ix->tar_pending == NONE_YET)
			ix->tar_pending = at;
		if (ix->collecting && size == 0)
			return tar_meta_done(ix);
		return 0;
	}
	if (type == '0' || type == '\0' || type == '7')
		return tar_file(ix, h, at);
	ix->next_name[0] = '\0'; /* a directory, a link: in no sample key */
	return 0;
}

/* After the end-of-archive block only zeros may follow. */
static int tar_after_end(struct snap_indexer *ix, const uint8_t *p, size_t n,
			 uint64_t at)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return ix_fail(ix,
				       "tar: data at offset %llu, after the "
				       "end-of-archive block at offset %llu",
				       (unsigned long long)(at + i),
				       (unsigned long long)ix->tar_end);
	return 0;
}

static int feed_tar(struct snap_indexer *ix, const uint8_t *p, size_t n)
{
	uint64_t pos = ix->pos;
	while (n > 0) {
		if (ix->tar_ended)
			return tar_after_end(ix, p, n, pos);
		size_t k;
		if (ix->left > 0) {
			k = ix->left < n ? (size_t)ix->left : n;
			if (ix->collecting) {
				uint64_t room = ix->member_size - ix->meta_len;
				size_t c = k < room ? k : (size_t)room;
				memcpy(ix->meta + ix->meta_len, p, c);
				ix->meta_len += c;
			}
			ix->left -= k;
			if (ix->left == 0 && ix->collecting &&
			    tar_meta_done(ix))
				return ix->err;
		} else {
			if (ix->have == 0)
				ix->pos_of_blk = pos;
			k = TAR_BLOCK - ix->have < n ? TAR_BLOCK - ix->have : n;
			memcpy(ix->blk + ix->have, p, k);
			ix->have += k;
			if (ix->have == TAR_BLOCK) {
				ix->have = 0;
				if (tar_header(ix))
					return ix->err;
			}
		}
		p += k;
		n -= k;
		pos += k;
	}
	return 0;
}

static int end_tar(struct snap_indexer *ix)
{
	if (ix->have > 0)
		return ix_fail(ix,
			       "tar member at offset %llu is not a whole "
			       "header (%zu of 512 bytes)",
			       (unsigned long long)ix->pos_of_blk, ix->have);
	if (ix->left > 0)
		return ix_fail(
		    ix,
		    "tar member at offset %llu is cut short: its "
		    "%llu bytes of data and padding end %llu bytes "
		    "past the output",
		    (unsigned long long)ix->member_at,
		    (unsigned long long)((ix->member_size + TAR_BLOCK - 1) /
					 TAR_BLOCK * TAR_BLOCK),
		    (unsigned long long)ix->left);
	if (ix->tar_pending != NONE_YET)
		return ix_fail(ix,
			       "tar member at offset %llu: an extended header "
			       "with no member after it",
			       (unsigned long long)ix->tar_pending);
	if (!ix->have_key)
		return 0;
	return push_end(ix, ix->tar_ended ? ix->tar_end : ix->pos);
}

uint8_t *snap_records_encode(uint64_t *ends, size_t n)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	for (size_t i = 0; i < n; i++) {
		uint8_t b[8];
		snap_put_u64(b, ends[i]);
		memcpy(&ends[i], b, 8);
	}
#else
	(void)n;
#endif
	return (uint8_t *)ends;
}

/* ---- the indexer ---- */

int snap_indexer_feed(struct snap_indexer *ix, const void *buf, size_t n)
{
	if (ix->err || n == 0)
		return ix->err;
	int rc = 0;
	switch (ix->cfg.framing) {
	case MF_FRAMING_LINES:
		rc = feed_lines(ix, buf, n);
		break;
	case MF_FRAMING_TFRECORD:
		rc = feed_tfrecord(ix, buf, n);
		break;
	case MF_FRAMING_TAR:
		rc = feed_tar(ix, buf, n);
		break;
	default: /* none, fixed, index: nothing to see in the bytes */
		break;
	}
	ix->pos += n;
	return rc;
}

int snap_indexer_set_ends(struct snap_indexer *ix, const uint64_t *ends,
			  size_t n)
{
	if (ix->cfg.framing != MF_FRAMING_INDEX || ix->n)
		return -EINVAL;
	uint64_t last = 0;
	for (size_t i = 0; i < n; i++) {
		if (ends[i] <= last)
			return ix_fail(ix,
				       "record end %llu from fd 3 (number %zu) "
				       "does not increase on %llu",
				       (unsigned long long)ends[i], i,
				       (unsigned long long)last);
		last = ends[i];
		if (push_end(ix, last))
			return ix->err;
	}
	return 0;
}

static int end_fixed(struct snap_indexer *ix)
{
	uint64_t size = ix->cfg.size, over = ix->pos % size;
	if (over && !ix->cfg.drop_tail)
		return ix_fail(ix,
			       "stage output is %llu bytes, not a multiple of "
			       "the %llu-byte record (%llu bytes over)",
			       (unsigned long long)ix->pos,
			       (unsigned long long)size,
			       (unsigned long long)over);
	ix->count = ix->pos / size;
	return 0;
}

static int end_index(struct snap_indexer *ix)
{
	uint64_t last = ix->n ? ix->ends[ix->n - 1] : 0;
	if (last != ix->pos)
		return ix_fail(ix,
			       "the record ends from fd 3 end at %llu, but "
			       "the stage output is %llu bytes",
			       (unsigned long long)last,
			       (unsigned long long)ix->pos);
	return 0;
}

int snap_indexer_end(struct snap_indexer *ix)
{
	if (ix->err || ix->ended)
		return ix->err;
	int rc = 0;
	switch (ix->cfg.framing) {
	case MF_FRAMING_FIXED:
		rc = end_fixed(ix);
		break;
	case MF_FRAMING_LINES:
		if (ix->pos > (ix->n ? ix->ends[ix->n - 1] : 0))
			rc = push_end(ix, ix->pos); /* no newline at the end */
		break;
	case MF_FRAMING_TFRECORD:
		rc = end_tfrecord(ix);
		break;
	case MF_FRAMING_TAR:
		rc = end_tar(ix);
		break;
	case MF_FRAMING_INDEX:
		rc = end_index(ix);
		break;
	default:
		break;
	}
	if (rc == 0 && ix->cfg.framing != MF_FRAMING_FIXED)
		ix->count = ix->n;
	ix->ended = rc == 0;
	return rc;
}
