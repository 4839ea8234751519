/*
 * snap_testutil.h - helpers shared by the snapshot tests: temporary
 * folders, deterministic data, whole-file reads, shards written in one
 * call, the documented checksum seeds.
 *
 * Not for: the library itself; test code only (it may abort on misuse).
 */
#ifndef SNAP_TESTUTIL_H
#define SNAP_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mf_snapshot.h"

#define TU_FP "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define TU_FP2                                                                 \
	"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define TU_RUN "00112233445566778899aabbccddeeff"
#define TU_RUN2 "ffeeddccbbaa99887766554433221100"

/* A store created in a fresh folder, for cmocka fixtures:
 * tu_store_setup puts a struct tu_store in *state, tu_store_teardown
 * removes the folder and frees it. */
struct tu_store {
	char *dir;
	struct mf_store *st;
};
int tu_store_setup(void **state);
int tu_store_teardown(void **state);
/* The same for a test's own fixture of size bytes, a struct whose first
 * member is a struct tu_store (zeroed but for it); tu_store_teardown
 * frees it. 0, or -1 when the store does not open. */
int tu_fixture_setup(void **state, size_t size);

/* A fresh folder under /tmp; caller frees the string after tu_rmtree. */
char *tu_mkdtemp(void);
/* rm -r without following symlinks. */
void tu_rmtree(const char *path);

/* splitmix64 */
uint64_t tu_rand(uint64_t *state);
/* Fills buf: text-like, compressible data, or random bytes. */
void tu_fill(uint8_t *buf, size_t n, uint64_t seed, bool compressible);

/* Reads a whole file; caller frees. Returns 0 or -errno. */
int tu_read_file(const char *path, uint8_t **data, size_t *len);
int tu_write_file(const char *path, const void *data, size_t len);

/*
 * Writes data as shard `shard` of TU_FP/TU_RUN in st (creating the run) in
 * pieces of pseudo-random sizes; returns the commit's result.
 */
int tu_write_shard(struct mf_store *st, uint32_t shard,
		   const struct mf_codec_cfg *cfg, const uint8_t *data,
		   size_t len, struct mf_shard_stat *stat);

/*
 * The checksum seeds of a format version 2 file as docs/format.md defines
 * them, computed here with xxHash alone (not with the library's code):
 * the shard's key, which seeds the index and trailer checksums, and the
 * seed of chunk i's checksum.
 */
uint64_t tu_v2_key(const char *fp, uint32_t shard);
uint64_t tu_v2_chunk_seed(uint64_t key, uint32_t i);

/* "DIR/snapshots/TU_FP/TU_RUN/shard-NNNNN.mfs" into buf. */
void tu_shard_path(const char *dir, uint32_t shard, char *buf, size_t len);

#endif
