/*
 * fuse_batchpath.h - the names of the batch tree (docs/format.md, "The
 * batch tree"): `B`, `seed-S` or `seed-none`, `epoch-E`, `rank-R-of-W`,
 * `rank-R-of-W-from-G` and `batch-NNNNNN`, one path component at a time.
 *
 * Numbers are decimal digits only (no sign, no spaces), with no leading
 * zero but the number 0 itself; a batch number has at least 6 digits,
 * zero-padded below 10^6 and without a leading zero above. B, W, R, G and
 * batch numbers are at most MFS_BATCH_MAX (2^63 - 1, the order's limit),
 * B and W at least 1, R below W; a seed and an epoch are any 64-bit
 * value. Anything else is not a name of the tree: -ENOENT.
 *
 * Not for: the order, the engine, or inodes; it needs the C library alone.
 */
#ifndef FUSE_BATCHPATH_H
#define FUSE_BATCHPATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MFS_BATCH_MAX ((uint64_t)INT64_MAX)

/* `B`: 0 and *b, or -ENOENT. */
int mfs_batch_parse_size(const char *name, uint64_t *b);
/* `seed-S` (*shuffled true, *seed S) or `seed-none` (*shuffled false,
 * *seed 0): 0, or -ENOENT. */
int mfs_batch_parse_seed(const char *name, bool *shuffled, uint64_t *seed);
/* `epoch-E`: 0 and *epoch, or -ENOENT. */
int mfs_batch_parse_epoch(const char *name, uint64_t *epoch);
/* `rank-R-of-W` (*from 0) or `rank-R-of-W-from-G`: 0, or -ENOENT. */
int mfs_batch_parse_rank(const char *name, uint64_t *rank, uint64_t *world,
			 uint64_t *from);
/* `batch-NNNNNN`: 0 and *n, or -ENOENT. */
int mfs_batch_parse_batch(const char *name, uint64_t *n);

/* The name of batch n (n <= MFS_BATCH_MAX) into buf of cap bytes: 0, or
 * -ERANGE when it does not fit (with its terminator) or n is too big. */
int mfs_batch_name(uint64_t n, char *buf, size_t cap);

#endif
