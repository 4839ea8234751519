/*
 * shard_format.c - the bytes of a shard file: little-endian encoding of the
 * header, the index entries and the trailer, the checksum seeds of each
 * format version, and every consistency check a reader makes before it
 * trusts them (docs/format.md is the reference).
 *
 * Not for: I/O, compression or checksums of chunk data. Pure functions.
 */
#include "snapshot_i.h"

#include <errno.h>
#include <string.h>

#include <xxhash.h>

const uint8_t snap_header_magic[SNAP_MAGIC_LEN] = {'M', 'A', 'T', 'F',
						   'S', 'H', 'R', 'D'};
const uint8_t snap_trailer_magic[SNAP_MAGIC_LEN] = {'M', 'A', 'T', 'F',
						    'S', 'E', 'N', 'D'};

void snap_put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void snap_put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t snap_get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

uint64_t snap_get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* ---- checksum seeds ---- */

uint64_t snap_shard_key(const char *fp, uint32_t shard)
{
	uint8_t b[MF_FP_HEX_LEN + 4];
	memcpy(b, fp, MF_FP_HEX_LEN);
	snap_put_u32(b + MF_FP_HEX_LEN, shard);
	return XXH3_64bits_withSeed(b, sizeof(b), 0);
}

uint64_t snap_chunk_seed(const struct snap_seeds *s, uint32_t i)
{
	if (s->version == 1)
		return i;
	uint8_t b[4];
	snap_put_u32(b, i);
	return XXH3_64bits_withSeed(b, sizeof(b), s->key);
}

uint64_t snap_meta_seed(const struct snap_seeds *s)
{
	return s->version == 1 ? 0 : s->key;
}

uint64_t snap_records_seed(const struct snap_seeds *s)
{
	return XXH3_64bits_withSeed("records", 7, s->key);
}

/* ---- header and trailer ---- */

void snap_header_encode(uint8_t out[SNAP_HEADER_SIZE])
{
	memcpy(out, snap_header_magic, SNAP_MAGIC_LEN);
	snap_put_u32(out + 8, MF_SHARD_FORMAT_VERSION);
	snap_put_u32(out + 12, 0);
}

static bool version_known(uint32_t v)
{
	return v >= SNAP_VERSION_MIN && v <= MF_SHARD_FORMAT_VERSION;
}

int snap_header_check(const uint8_t in[SNAP_HEADER_SIZE], uint32_t *version)
{
	if (memcmp(in, snap_header_magic, SNAP_MAGIC_LEN) != 0)
		return MF_CORRUPT("header magic");
	uint32_t v = snap_get_u32(in + 8);
	if (!version_known(v))
		return MF_CORRUPT("header version");
	/* reserved: zero in every version, so a flipped bit there is caught */
	if (snap_get_u32(in + 12) != 0)
		return MF_CORRUPT("header reserved bytes");
	*version = v;
	return 0;
}

size_t snap_trailer_size(uint32_t version)
{
	return version >= 4 ? SNAP_TRAILER_SIZE : SNAP_TRAILER_SIZE_V3;
}

/* The trailer checksum covers every byte before its own 8. */
static uint64_t trailer_sum(const uint8_t *t, size_t size, uint64_t seed)
{
	return XXH3_64bits_withSeed(t, size - 8, seed);
}

static bool stores_ends(enum mf_framing f)
{
	return f != MF_FRAMING_NONE && f != MF_FRAMING_FIXED;
}

uint64_t snap_trailer_ends(const struct snap_trailer *t)
{
	return stores_ends(t->records.framing) ? t->n_records : 0;
}

uint64_t snap_records_offset(const struct snap_trailer *t)
{
	return t->index_offset - 8 * snap_trailer_ends(t);
}

void snap_trailer_encode(const struct snap_trailer *t, uint64_t seed,
			 uint8_t out[SNAP_TRAILER_SIZE])
{
	memcpy(out, snap_trailer_magic, SNAP_MAGIC_LEN);
	snap_put_u32(out + 8, t->version);
	snap_put_u32(out + 12, (uint32_t)t->codec);
	snap_put_u32(out + 16, (uint32_t)t->level);
	snap_put_u32(out + 20, t->chunks);
	snap_put_u64(out + 24, t->chunk_size);
	snap_put_u64(out + 32, t->raw_size);
	snap_put_u64(out + 40, t->index_offset);
	snap_put_u64(out + 48, t->index_checksum);
	snap_put_u32(out + 56, (uint32_t)t->records.framing);
	snap_put_u32(out + 60, t->records.drop_tail ? 1 : 0);
	snap_put_u64(out + 64, t->records.size);
	snap_put_u64(out + 72, t->n_records);
	snap_put_u64(out + 80, t->records_checksum);
	snap_put_u64(out + 88, trailer_sum(out, SNAP_TRAILER_SIZE, seed));
}

/* The records fields on their own (version 4): a known framing, a size
 * and flag only for fixed records, whose count the size gives. */
static int records_fields_check(const struct snap_trailer *t, uint32_t flags)
{
	const struct mf_records *r = &t->records;
	if ((unsigned)r->framing > MF_FRAMING_MAX || flags > 1)
		return MF_CORRUPT("trailer framing");
	if (r->framing != MF_FRAMING_FIXED) {
		if (r->size != 0 || flags != 0)
			return MF_CORRUPT("trailer framing");
		if (r->framing == MF_FRAMING_NONE && t->n_records != 0)
			return MF_CORRUPT("trailer record count");
		/* each record holds at least one byte */
		if (t->n_records > t->raw_size)
			return MF_CORRUPT("trailer record count");
		return 0;
	}
	if (r->size == 0 || r->size > MF_RECORD_SIZE_MAX)
		return MF_CORRUPT("trailer record size");
	if (t->n_records != t->raw_size / r->size ||
	    (!r->drop_tail && t->raw_size % r->size != 0))
		return MF_CORRUPT("trailer record count");
	return 0;
}

/* Chunk count that raw_size bytes need at chunk_size; false on overflow. */
static bool chunks_for(uint64_t raw_size, uint64_t chunk_size, uint32_t *out)
{
	uint64_t n = raw_size == 0 ? 0 : (raw_size - 1) / chunk_size + 1;
	if (n > UINT32_MAX)
		return false;
	*out = (uint32_t)n;
	return true;
}

static int trailer_fields_check(const struct snap_trailer *t, uint32_t version)
{
	/* the header's version: a file is all of one version */
	if (t->version != version)
		return MF_CORRUPT("trailer version");
	if (!snap_level_valid(t->codec, t->level))
		return MF_CORRUPT("trailer codec or level");
	if (t->chunk_size < MF_CHUNK_SIZE_MIN ||
	    t->chunk_size > MF_CHUNK_SIZE_MAX)
		return MF_CORRUPT("trailer chunk size");
	uint32_t n;
	if (!chunks_for(t->raw_size, t->chunk_size, &n) || n != t->chunks)
		return MF_CORRUPT("trailer chunk count");
	return 0;
}

int snap_trailer_decode(const uint8_t *in, const struct snap_seeds *s,
			struct snap_trailer *out)
{
	size_t size = snap_trailer_size(s->version);
	if (memcmp(in, snap_trailer_magic, SNAP_MAGIC_LEN) != 0)
		return MF_CORRUPT("trailer magic");
	if (snap_get_u64(in + size - 8) !=
	    trailer_sum(in, size, snap_meta_seed(s)))
		return MF_CORRUPT("trailer checksum");
	struct snap_trailer t = {
	    .version = snap_get_u32(in + 8),
	    .codec = (enum mf_codec)snap_get_u32(in + 12),
	    .level = (int32_t)snap_get_u32(in + 16),
	    .chunks = snap_get_u32(in + 20),
	    .chunk_size = snap_get_u64(in + 24),
	    .raw_size = snap_get_u64(in + 32),
	    .index_offset = snap_get_u64(in + 40),
	    .index_checksum = snap_get_u64(in + 48),
	};
	int rc = trailer_fields_check(&t, s->version);
	if (rc)
		return rc;
	if (s->version >= 4) {
		uint32_t flags = snap_get_u32(in + 60);
		t.records = (struct mf_records){
		    .framing = (enum mf_framing)snap_get_u32(in + 56),
		    .size = snap_get_u64(in + 64),
		    .drop_tail = flags & 1,
		};
		t.n_records = snap_get_u64(in + 72);
		t.records_checksum = snap_get_u64(in + 80);
		rc = records_fields_check(&t, flags);
		if (rc)
			return rc;
	}
	*out = t;
	return 0;
}

int snap_trailer_check_size(const struct snap_trailer *t, uint64_t file_size)
{
	/* chunks < 2^32, so this cannot overflow */
	uint64_t tail = (uint64_t)t->chunks * snap_entry_size(t->version) +
	    snap_trailer_size(t->version);
	if (file_size < SNAP_HEADER_SIZE || file_size - SNAP_HEADER_SIZE < tail)
		return MF_CORRUPT("file too short for its index");
	/* the ends, 8 bytes each, lie between the chunks and the index */
	uint64_t ends = snap_trailer_ends(t);
	if (ends > (file_size - SNAP_HEADER_SIZE - tail) / 8)
		return MF_CORRUPT("file too short for its records");
	if (t->index_offset != file_size - tail)
		return MF_CORRUPT("trailer index offset");
	return 0;
}

uint64_t snap_index_checksum(const uint8_t *idx, size_t len, uint64_t seed)
{
	static const uint8_t empty[1];
	return XXH3_64bits_withSeed(len ? idx : empty, len, seed);
}

size_t snap_entry_size(uint32_t version)
{
	return version >= 3 ? SNAP_ENTRY_SIZE : SNAP_ENTRY_SIZE_V2;
}

void snap_entry_encode(const struct snap_entry *e, uint8_t out[SNAP_ENTRY_SIZE])
{
	snap_put_u64(out, e->offset);
	snap_put_u32(out + 8, e->stored);
	snap_put_u32(out + 12, e->raw);
	snap_put_u64(out + 16, e->checksum);
	snap_put_u32(out + 24, (uint32_t)e->codec);
	snap_put_u32(out + 28, (uint32_t)e->level);
}

/* The raw length chunk i of a valid file has. */
static uint64_t expected_raw(const struct snap_trailer *t, uint32_t i)
{
	if (i + 1 < t->chunks)
		return t->chunk_size;
	return t->raw_size - (uint64_t)i * t->chunk_size;
}

static bool stored_len_ok(enum mf_codec codec, uint32_t raw, uint32_t stored)
{
	if (codec == MF_CODEC_NONE)
		return stored == raw;
	return stored >= 1 && stored <= snap_codec_bound(codec, raw);
}

/* A chunk's codec and level under the trailer's: the trailer's codec at
 * a level no higher, or none (version 3). */
static bool chunk_codec_ok(const struct snap_trailer *t,
			   const struct snap_entry *e)
{
	if (e->codec != t->codec && e->codec != MF_CODEC_NONE)
		return false;
	if (!snap_chunk_level_valid(e->codec, e->level))
		return false;
	return e->codec != MF_CODEC_ZSTD || e->level <= t->level;
}

/* Entry i of idx; the codec and level are the trailer's before version
 * 3. */
static struct snap_entry entry_decode(const struct snap_trailer *t,
				      const uint8_t *idx, uint32_t i)
{
	const uint8_t *p = idx + (size_t)i * snap_entry_size(t->version);
	struct snap_entry e = {
	    .offset = snap_get_u64(p),
	    .stored = snap_get_u32(p + 8),
	    .raw = snap_get_u32(p + 12),
	    .checksum = snap_get_u64(p + 16),
	    .codec = t->codec,
	    .level = t->level,
	};
	if (t->version >= 3) {
		e.codec = (enum mf_codec)snap_get_u32(p + 24);
		e.level = (int32_t)snap_get_u32(p + 28);
	}
	return e;
}

int snap_index_decode(const struct snap_trailer *t, const uint8_t *idx,
		      struct snap_entry *out)
{
	uint64_t pos = SNAP_HEADER_SIZE;
	for (uint32_t i = 0; i < t->chunks; i++) {
		struct snap_entry e = entry_decode(t, idx, i);
		/* chunks tile the file in order, with no gap and no overlap */
		if (e.offset != pos)
			return MF_CORRUPT("index entry offset");
		if (e.raw != expected_raw(t, i))
			return MF_CORRUPT("index entry raw length");
		if (!chunk_codec_ok(t, &e))
			return MF_CORRUPT("index entry codec or level");
		if (!stored_len_ok(e.codec, e.raw, e.stored))
			return MF_CORRUPT("index entry stored length");
		pos += e.stored;
		if (pos > snap_records_offset(t))
			return MF_CORRUPT("index entry past the index");
		out[i] = e;
	}
	return pos == snap_records_offset(t) ? 0
					     : MF_CORRUPT("index leaves a gap");
}

int snap_records_decode(const struct snap_trailer *t, const uint8_t *buf,
			uint64_t *out)
{
	uint64_t n = snap_trailer_ends(t), last = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t end = snap_get_u64(buf + 8 * i);
		if (end <= last || end > t->raw_size)
			return MF_CORRUPT("records end out of order");
		last = end;
		if (out)
			out[i] = end;
	}
	/* every framing but tar ends its last record at the shard's end */
	if (t->records.framing != MF_FRAMING_TAR &&
	    stores_ends(t->records.framing) && last != t->raw_size)
		return MF_CORRUPT("records end before the shard");
	return 0;
}
