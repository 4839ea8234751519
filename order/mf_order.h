/*
 * mf_order.h - the batch order of a snapshot with records (docs/format.md,
 * "Batch order"): one sequence of (shard, record) per (fingerprint, seed,
 * epoch), the same for every batch size and world size, mixed across shards
 * within windows of at most `shuffle_window` bytes of records, and the rank
 * views that slice it (global batch g is records [gB, (g+1)B); rank R of W
 * from G holds global batches G + R + kW, in whole rounds only).
 *
 * Record counts are learnt one shard at a time (mf_order_set_shard, from
 * the shard files); the sequence is defined so that a prefix of it is known
 * from the counts of a prefix of the epoch's shard order. Locating any
 * record costs O(shards of its group x log windows), never a replay of the
 * epoch; memory is O(shards), never O(records).
 *
 * Not for: reading records, materializing shards, paths or FUSE. It needs
 * util/ alone. Nothing here prints; fallible functions return 0 or a
 * negative errno.
 *
 * Threads: an order is not locked. Calls that change it (set_shard) need
 * the caller's exclusion; the const calls may run concurrently with each
 * other.
 */
#ifndef MF_ORDER_H
#define MF_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The version of the algorithm below (user.matfs.order is "1"). A change
 * of any order a given snapshot gets is a new version. */
#define MF_ORDER_VERSION 1

/* Order 1's constants (docs/format.md): a group of windows gathers at
 * least MF_ORDER_GROUP shards (all of them if there are fewer), and every
 * permutation is a Feistel network of MF_ORDER_ROUNDS rounds. */
#define MF_ORDER_GROUP 8
#define MF_ORDER_ROUNDS 6

/* The limits: batch sizes, world sizes, ranks, resume points, batch
 * numbers, record counts, byte counts and their sums over an epoch are at
 * most MF_ORDER_MAX (2^63 - 1), so that no sum or product the order forms
 * overflows; a seed and an epoch are any 64-bit value. At most
 * MF_ORDER_MAX_SHARDS shards (the order keeps 28 bytes per shard). */
#define MF_ORDER_MAX ((uint64_t)INT64_MAX)
#define MF_ORDER_MAX_SHARDS (1u << 24)

struct mf_order_params {
	uint8_t fingerprint[32]; /* the snapshot's, as bytes */
	bool shuffled; /* false: seed-none, records in shard order */
	uint64_t seed; /* ignored unless shuffled */
	uint64_t epoch; /* ignored unless shuffled */
	uint64_t window; /* shuffle_window, bytes: 1 to MF_ORDER_MAX */
	uint64_t nshards; /* 1 to MF_ORDER_MAX_SHARDS */
};

struct mf_order;

/*
 * Makes the order of one epoch with no shard's count known yet.
 * Returns 0, -EINVAL for a window or shard count out of range, -ENOMEM, or
 * -EIO when OpenSSL fails. The caller frees *out with mf_order_free.
 */
int mf_order_new(const struct mf_order_params *p, struct mf_order **out);
void mf_order_free(struct mf_order *o);

/* The shard at position pos (< nshards) of the epoch's shard order: the
 * order in which a cold epoch needs its shards. */
uint64_t mf_order_shard_at(const struct mf_order *o, uint64_t pos);

/*
 * Records a shard's record count and the bytes of its records (the end of
 * its last record: records x size for fixed records). Setting a known
 * shard again with the same values changes nothing. Returns 0, -EINVAL
 * for a shard out of range or other values than before, -EOVERFLOW when
 * the epoch's records or bytes would pass MF_ORDER_MAX, -ENOMEM (the
 * count is kept, the known prefix not yet extended by it: setting it
 * again goes on).
 */
int mf_order_set_shard(struct mf_order *o, uint64_t shard, uint64_t records,
		       uint64_t bytes);

/* The records of the known prefix of the sequence (all of them once every
 * count is known), and whether every count is known. */
uint64_t mf_order_known(const struct mf_order *o);
bool mf_order_complete(const struct mf_order *o);

/* The positions of the shard order whose counts are known: [0, n). So
 * mf_order_shard_at(o, n) is the shard mf_order_next_shard names, and
 * the ones after it are those a cold epoch needs next. */
uint64_t mf_order_known_shards(const struct mf_order *o);

/* The next shard whose count extends the known prefix: 0 and *shard, or
 * -ENOENT once every count is known. */
int mf_order_next_shard(const struct mf_order *o, uint64_t *shard);

/* The record at place i of the sequence: 0, -EAGAIN when i is past the
 * known prefix of an incomplete order, -ERANGE past the end of the epoch,
 * -ENOMEM. */
int mf_order_locate(const struct mf_order *o, uint64_t i, uint64_t *shard,
		    uint64_t *record);

/* A run of records consecutive in one shard. */
struct mf_order_run {
	uint64_t shard, record, count;
};

/*
 * The records at places [first, first + count) as runs, at most cap of
 * them: *nruns runs covering the first *covered records (less than count
 * when cap ran out; call again from first + *covered). Returns 0, -EAGAIN
 * when the range reaches past the known prefix of an incomplete order,
 * -ERANGE past the end, -EINVAL for cap 0, -ENOMEM.
 */
int mf_order_runs(const struct mf_order *o, uint64_t first, uint64_t count,
		  struct mf_order_run *runs, size_t cap, size_t *nruns,
		  uint64_t *covered);

/* The window holding place i: its group and part, its first place and its
 * records, and the shards of its group. 0, -EAGAIN or -ERANGE as locate. */
struct mf_order_window {
	uint64_t group, part, first, count, shards;
};
int mf_order_window_at(const struct mf_order *o, uint64_t i,
		       struct mf_order_window *w);

/* The records of the window holding place i, as one run per shard of its
 * group with records in it, in the group's position order (the window's
 * elements before its permutation): what reading the window needs, for
 * having it read ahead. At most `shards` of mf_order_window_at runs; 0,
 * -ENOSPC when cap is fewer, -EAGAIN or -ERANGE as locate. */
int mf_order_window_parts(const struct mf_order *o, uint64_t i,
			  struct mf_order_run *parts, size_t cap, size_t *n);

/*
 * A view of the sequence: batches of `batch` records, rank `rank` of
 * `world` resuming after `from` global batches. The global batches are
 * the view {batch, 1, 0, 0}.
 */
struct mf_order_view {
	uint64_t batch, world, rank, from;
};

/* 0 when 1 <= batch, world <= MF_ORDER_MAX, rank < world and from <=
 * MF_ORDER_MAX; -EINVAL otherwise. */
int mf_order_view_check(const struct mf_order_view *v);

/*
 * The view's batches whose records are known: whole rounds only, so every
 * rank of the same world and from gets the same count; *complete tells
 * whether that is the epoch's count. Returns 0 or -EINVAL for a bad view.
 */
int mf_order_view_count(const struct mf_order *o, const struct mf_order_view *v,
			uint64_t *count, bool *complete);

/*
 * The view's k-th batch: its global batch number (its records are places
 * [g x batch, (g+1) x batch)). Returns 0, -ENOENT when the epoch has no such
 * batch (its round is not whole), -EAGAIN when that is not known yet (the
 * known prefix is too short; mf_order_next_shard says which count is
 * needed next), -EINVAL for a bad view or k past MF_ORDER_MAX.
 */
int mf_order_view_batch(const struct mf_order *o, const struct mf_order_view *v,
			uint64_t k, uint64_t *g);

#endif
