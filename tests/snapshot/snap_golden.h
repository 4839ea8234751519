/*
 * snap_golden.h - what the golden store under tests/snapshot/golden holds:
 * its ids, its shards' codecs and sizes, and the deterministic content
 * every shard was written from. The generator (snap_golden_gen.c) and the
 * test (test_snap_golden.c) share it.
 *
 * Not for: changing. The golden files were made from exactly this; any
 * change here breaks the promise that old files still read.
 */
#ifndef SNAP_GOLDEN_H
#define SNAP_GOLDEN_H

#include <stddef.h>
#include <stdint.h>

#include "mf_snapshot.h"

#define GOLDEN_FP                                                              \
	"5eed5eed00000000000000000000000000000000000000000000000000000001"
#define GOLDEN_RUN "0000000000000000000000000000f00d"
#define GOLDEN_CHUNK_SIZE 4096
#define GOLDEN_METADATA                                                        \
	"# golden store of shard format version 1\n"                           \
	"name golden\nshards 5\nchunk_size 4096\n"
/* ZSTD_versionNumber() of the library that wrote the golden zstd shards */
#define GOLDEN_ZSTD_VERSION 10504

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
