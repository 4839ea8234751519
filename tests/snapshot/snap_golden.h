/*
 * snap_golden.h - what the golden store under tests/snapshot/golden holds:
 * one fingerprint folder per shard format version, their ids, their
 * shards' codecs and sizes, and the deterministic content every shard was
 * written from. The generator (snap_golden_gen.c) and the test
 * (test_snap_golden.c) share it.
 *
 * Not for: changing. The golden files were made from exactly this; any
 * change here breaks the promise that old files still read. A new format
 * version adds its own entry to golden_versions. Version 3 also holds one
 * shard whose chunks were stored at falling and rising levels
 * (golden_adaptive), the pressure that made them given by
 * golden_pressure.
 */
#ifndef SNAP_GOLDEN_H
#define SNAP_GOLDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mf_snapshot.h"

/* version 1 */
#define GOLDEN_FP                                                              \
	"5eed5eed00000000000000000000000000000000000000000000000000000001"
#define GOLDEN_RUN "0000000000000000000000000000f00d"
#define GOLDEN_CHUNK_SIZE 4096
#define GOLDEN_METADATA                                                        \
	"# golden store of shard format version 1\n"                           \
	"name golden\nshards 5\nchunk_size 4096\n"
/* ZSTD_versionNumber() of the library that wrote the golden zstd shards */
#define GOLDEN_ZSTD_VERSION 10504

/* version 2: its own fingerprint, so its checksums are bound to it */
#define GOLDEN_FP_V2                                                           \
	"5eed5eed00000000000000000000000000000000000000000000000000000002"
#define GOLDEN_METADATA_V2                                                     \
	"# golden store of shard format version 2\n"                           \
	"name golden\nshards 5\nchunk_size 4096\n"

/* version 3: a codec and level per chunk */
#define GOLDEN_FP_V3                                                           \
	"5eed5eed00000000000000000000000000000000000000000000000000000003"
#define GOLDEN_METADATA_V3                                                     \
	"# golden store of shard format version 3\n"                           \
	"name golden\nshards 6\nchunk_size 4096\n"

/* version 4: a records section, and the framing in the trailer */
#define GOLDEN_FP_V4                                                           \
	"5eed5eed00000000000000000000000000000000000000000000000000000004"
#define GOLDEN_METADATA_V4                                                     \
	"# golden store of shard format version 4\n"                           \
	"name golden\nshards 11\nchunk_size 4096\n"

/* One version's folder: STORE/snapshots/fp/GOLDEN_RUN/shard-NNNNN.mfs. */
struct golden_version {
	uint32_t version;
	const char *fp;
	const char *metadata;
	unsigned zstd_version; /* of the library that wrote it */
	bool adaptive; /* it also holds golden_adaptive */
	bool records; /* it also holds golden_records (version 4 on) */
};

static const struct golden_version golden_versions[] = {
    {1, GOLDEN_FP, GOLDEN_METADATA, GOLDEN_ZSTD_VERSION, false, false},
    {2, GOLDEN_FP_V2, GOLDEN_METADATA_V2, 10504, false, false},
    {3, GOLDEN_FP_V3, GOLDEN_METADATA_V3, 10504, true, false},
    {4, GOLDEN_FP_V4, GOLDEN_METADATA_V4, 10504, true, true},
};
#define GOLDEN_VERSIONS (sizeof(golden_versions) / sizeof(golden_versions[0]))

struct golden_shard {
	uint32_t index;
	enum mf_codec codec;
	int level;
	size_t raw;
};

static const struct golden_shard golden_shards[] = {
    {0, MF_CODEC_NONE, 0, 3 * GOLDEN_CHUNK_SIZE + 1234},
    {1, MF_CODEC_ZSTD, 3, 3 * GOLDEN_CHUNK_SIZE + 1234},
    {2, MF_CODEC_SNAPPY, 0, 3 * GOLDEN_CHUNK_SIZE + 1234},
    {3, MF_CODEC_ZSTD, 19, 2 * GOLDEN_CHUNK_SIZE},
    {4, MF_CODEC_ZSTD, 3, 0},
};
#define GOLDEN_SHARDS (sizeof(golden_shards) / sizeof(golden_shards[0]))

/* Version 3's shard 5: zstd with ceiling 3, written adapting, the writer
 * told "behind" (a backlog of every worker) for its first
 * GOLDEN_BEHIND_CHUNKS chunks and "keeping up" (none) after. */
static const struct golden_shard golden_adaptive = {
    5, MF_CODEC_ZSTD, 3, 16 * GOLDEN_CHUNK_SIZE + 100};
#define GOLDEN_BEHIND_CHUNKS 9

static inline unsigned golden_pressure(void *arg, uint32_t chunk,
				       unsigned workers)
{
	(void)arg;
	return chunk < GOLDEN_BEHIND_CHUNKS ? workers : 0;
}

/* Version 4's shards 6 to 10, one per framing, zstd:3 without adapting;
 * golden_framed builds their bytes (snap_records_gen.h). */
struct golden_framed_shard {
	uint32_t index;
	struct mf_records records;
};
static const struct golden_framed_shard golden_records[] = {
    {6, {MF_FRAMING_FIXED, 16, true}},	  {7, {MF_FRAMING_LINES, 0, false}},
    {8, {MF_FRAMING_TFRECORD, 0, false}}, {9, {MF_FRAMING_TAR, 0, false}},
    {10, {MF_FRAMING_INDEX, 0, false}},
};
#define GOLDEN_RECORDS (sizeof(golden_records) / sizeof(golden_records[0]))
#define GOLDEN_FRAMED_MAX (64 * 8192)

/* The entry of the version this writer writes; NULL if it has none. */
static inline const struct golden_version *golden_current(void)
{
	for (size_t i = 0; i < GOLDEN_VERSIONS; i++)
		if (golden_versions[i].version == MF_SHARD_FORMAT_VERSION)
			return &golden_versions[i];
	return NULL;
}

/* The content of shard `seed`: words from a small vocabulary picked by a
 * 32-bit LCG, with a stray byte now and then. */
static inline void golden_fill(uint8_t *buf, size_t n, uint32_t seed)
{
	static const char *const words[8] = {"matfs ",	  "chunk ", "shard ",
					     "snapshot ", "zstd ",  "index ",
					     "trailer ",  "\n"};
	uint32_t x = 0x2545f491u ^ seed;
	size_t i = 0;
	while (i < n) {
		x = x * 1103515245u + 12345u;
		uint32_t r = x >> 16;
		if (r % 8 == 0) {
			buf[i++] = (uint8_t)(r >> 3);
			continue;
		}
		for (const char *w = words[r % 8]; *w && i < n; w++)
			buf[i++] = (uint8_t)*w;
	}
}

#endif
