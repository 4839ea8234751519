/*
 * mf_snapshot.h - the chunk store: the store folder's layout, shard files
 * cut into checksummed, compressed chunks, their writer and their reader.
 *
 * Store layout (docs/format.md has the bytes):
 *   STORE/snapshots/FP/snapshot.metadata      written by atomic rename
 *   STORE/snapshots/FP/RUN/shard-NNNNN.mfs    one committed shard
 *   STORE/snapshots/FP/RUN/shard-NNNNN.tmp    a shard being written
 * FP is 64 lowercase hex digits, RUN 32. Every path is built from those
 * alone and opened relative to the store folder with O_NOFOLLOW; a symlink,
 * FIFO or device planted in the store is refused with -ELOOP or -EBADMSG.
 *
 * Not for: the catalog (which run holds which shard is the catalog's
 * business) or deciding when to compute. This module never prints.
 *
 * Errors: 0 or a negative errno. -EBADMSG means corrupt data (a checksum,
 * magic, size or index that does not add up); it is never retried silently.
 */
#ifndef MF_SNAPSHOT_H
#define MF_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "mf_util.h"

/* The version the writer writes; a reader also reads every earlier one. */
#define MF_SHARD_FORMAT_VERSION 4
#define MF_CHUNK_SIZE_MIN 4096ULL
/* The largest fixed record a shard file records (the spec's bound). */
#define MF_RECORD_SIZE_MAX (1ULL << 30)
#define MF_CHUNK_SIZE_MAX (1ULL << 30)
/* The most compression threads one writer runs when told 0 (the cores). */
#define MF_WRITER_THREADS_AUTO_MAX 8

struct mf_codec_cfg {
	enum mf_codec codec;
	int level; /* zstd level: the ceiling when adapting; ignored for the
		      others */
	uint64_t chunk_size; /* uncompressed bytes per chunk */
	/* compression threads in the writer: 0 as many as the cores this
	 * process may run on (sched_getaffinity), at most
	 * MF_WRITER_THREADS_AUTO_MAX; 1 inline on the caller's thread (a
	 * pool of one when adapting) */
	unsigned threads;
	/* zstd only: when the compressors fall behind the bytes written,
	 * store the next chunks at lower levels, down to raw, and climb back
	 * to `level` when they keep up (docs/format.md). false: every chunk
	 * at `level`, and the file's bytes depend on the data alone. */
	bool adapt;
};

/* What a committed shard file holds. */
struct mf_shard_stat {
	uint64_t raw_bytes; /* uncompressed size of the shard */
	uint64_t stored_bytes; /* size of the file on disk */
	uint32_t chunks;
	enum mf_codec codec; /* the ceiling: each chunk has it or none */
	uint64_t chunk_size;
};

/* ---- the store folder ---- */

struct mf_store;

/*
 * Opens the store at dir, creating dir (mode 0700; the folders above it
 * 0755) and its snapshots/ folder when create is true; with create, a
 * store folder this process owns that other users may enter loses those
 * bits (docs/security.md, "The store"). -EPERM when the store folder is
 * not this process's user's or root's, or others may write in it, or a
 * folder above it is another user's or writable by others without the
 * sticky bit: they could plant or swap the store's files. Returns 0,
 * -ENOENT, -ENOTDIR, -EACCES, ...
 * The handle is thread-safe (it holds only directory descriptors).
 */
int mf_store_open(const char *dir, bool create, struct mf_store **out);
void mf_store_close(struct mf_store *st);
/* Borrowed for the life of st. */
const char *mf_store_path(const struct mf_store *st);
/* The store folder's descriptor; borrowed. */
int mf_store_dirfd(const struct mf_store *st);

/* Writes STORE/snapshots/FP/snapshot.metadata atomically (temp file, fsync,
 * rename, fsync of the folder), creating the FP folder if needed. The bytes
 * are opaque here; mf_store_put_metadata writes a struct mf_snapshot_meta. */
int mf_store_write_metadata(struct mf_store *st, const char *fp,
			    const void *data, size_t len);
/* Reads it back; *data is NUL-terminated, caller frees. -ENOENT if absent. */
int mf_store_read_metadata(struct mf_store *st, const char *fp, char **data,
			   size_t *len);

/* Creates STORE/snapshots/FP/RUN (and FP) if missing; durable. */
int mf_store_run_create(struct mf_store *st, const char *fp,
			const char *run_id);
/* Removes one run folder with its files; -ENOENT if it was not there. */
int mf_store_run_remove(struct mf_store *st, const char *fp,
			const char *run_id);
/* Removes one committed shard file of a run; -ENOENT if not there. */
/* Where the data of a shard fingerprint (pipeline's mf_fingerprint_shard)
 * was last committed, and by whose spec (store_shared.c: a hint the
 * catalog and the file's checksums confirm or not). */
struct mf_store_donor {
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	char run_id[MF_RUN_ID_HEX_LEN + 1];
	uid_t owner; /* of the spec that computed it */
	uint64_t place; /* XXH3-64 of that spec's real folder */
};
#define MF_STORE_HOLDERS 4 /* holders a hint lists, the latest first */
/* Puts d first in the hint of sfp (the holders it listed after it, d's
 * shard once; atomic rename, not synced). 0, -EINVAL for bad ids,
 * -errno. */
int mf_store_shared_put(struct mf_store *st, const char *sfp,
			const struct mf_store_donor *d);
/* The holders the hint of sfp lists, the latest first, into v (*n of
 * them): 0, -ENOENT (none), -EBADMSG (not a hint), -EINVAL, -errno. */
int mf_store_shared_get(struct mf_store *st, const char *sfp,
			struct mf_store_donor v[MF_STORE_HOLDERS], size_t *n);
/* Drops from the hints the holders keep() says are stale (false), and
 * removes hints left with none, hints that do not parse, and temp files
 * of writers dead for an hour; *removed counts what went. Names not of
 * the hints' forms are left alone. 0 or -errno. */
typedef bool (*mf_store_hint_keep_fn)(void *arg, const char *sfp,
				      const struct mf_store_donor *d);
int mf_store_shared_sweep(struct mf_store *st, mf_store_hint_keep_fn keep,
			  void *arg, uint32_t *removed);

int mf_store_shard_remove(struct mf_store *st, const char *fp,
			  const char *run_id, uint32_t shard);
/* Removes the temp files (shard-NNNNN.tmp) a run left behind; only for a
 * run that is known to be dead. *removed (may be NULL) counts them. */
int mf_store_tmp_remove(struct mf_store *st, const char *fp, const char *run_id,
			uint32_t *removed);
/* Removes the whole FP folder, its snapshot.metadata first. */
int mf_store_snapshot_remove(struct mf_store *st, const char *fp);

/* Lists, unsorted, the fingerprints (folders named by 64 hex digits) and
 * the run ids of one fingerprint. Other names are skipped. Caller frees
 * with mf_strv_free (mf_util.h). */
int mf_store_list_snapshots(struct mf_store *st, char ***out, size_t *n);
int mf_store_list_runs(struct mf_store *st, const char *fp, char ***out,
		       size_t *n);
/* Lists the committed shard indexes of a run, sorted. Caller frees *idx. */
int mf_store_list_shards(struct mf_store *st, const char *fp,
			 const char *run_id, uint32_t **idx, size_t *n);

/* ---- walking and naming the store ---- */

/* What a name in the store is, judged by its name and its own type (a
 * symlink is never followed, so it is always a stray). */
enum mf_store_kind {
	MF_STORE_FP, /* snapshots/FP: a folder named by 64 hex digits */
	MF_STORE_METADATA, /* snapshots/FP/snapshot.metadata, a regular file */
	MF_STORE_METADATA_TMP, /* its temp file: a write in progress, or
				  one a crash left */
	MF_STORE_RUN, /* snapshots/FP/RUN: a folder named by 32 hex digits */
	MF_STORE_SHARD, /* snapshots/FP/RUN/shard-NNNNN.mfs, regular file */
	MF_STORE_SHARD_TMP, /* snapshots/FP/RUN/shard-NNNNN.tmp, regular */
	MF_STORE_STRAY, /* any other name or type: never made by matfs */
};

/* The name of the metadata file in each fingerprint folder, for messages. */
#define MF_STORE_METADATA_NAME "snapshot.metadata"
/* Room for any path mf_store_rel writes or a walk entry's rel holds. */
#define MF_STORE_REL_MAX 512

/* One entry found by mf_store_walk; every pointer is borrowed for the
 * callback only. */
struct mf_store_entry {
	enum mf_store_kind kind;
	const char *fp; /* the fingerprint folder walked; "" at the top */
	const char *run; /* the run folder walked; "" above it */
	const char *name; /* the entry's own name */
	const char *rel; /* "snapshots/FP/RUN/NAME", relative to the store */
	uint32_t shard; /* MF_STORE_SHARD and _SHARD_TMP: the shard index */
	mode_t mode; /* the entry's own type (S_IFMT bits), not followed */
};

/* Returns 0 to go on, or a negative errno that ends the walk. */
typedef int (*mf_store_walk_fn)(void *arg, const struct mf_store_entry *e);

/*
 * Calls fn, in no particular order, for each entry of one folder of the
 * store: snapshots/ itself (fp NULL; entries are MF_STORE_FP or _STRAY),
 * snapshots/FP (run NULL; _METADATA, _METADATA_TMP, _RUN or _STRAY) or
 * snapshots/FP/RUN (_SHARD, _SHARD_TMP or _STRAY). It does not descend:
 * the caller walks a folder it wants from its callback. Folders are
 * opened relative to the store's descriptor without following a symlink;
 * an entry removed while the walk runs is passed over.
 * Returns 0, -EINVAL (a bad fp or run), -ENOENT, -ELOOP (a symlink where
 * the folder should be), -EBADMSG (not a folder), -errno, or what fn
 * returned.
 */
int mf_store_walk(struct mf_store *st, const char *fp, const char *run,
		  mf_store_walk_fn fn, void *arg);

/*
 * The store-relative path of the entry of that kind: "snapshots/FP"
 * (MF_STORE_FP), ".../FP/snapshot.metadata", ".../FP/RUN",
 * ".../FP/RUN/shard-NNNNN.mfs" and ".tmp". run and shard are read only for
 * the kinds that have them. For messages: stores are opened with
 * mf_store_open and their files with the calls of this header. Writes ""
 * for another kind; truncates to len.
 */
void mf_store_rel(char *buf, size_t len, enum mf_store_kind kind,
		  const char *fp, const char *run, uint32_t shard);

/*
 * lstat(2) of one store entry of kind MF_STORE_FP, _METADATA, _RUN or
 * _SHARD, whatever its type; the folders above it are opened without
 * following a symlink. Returns 0 with *sb, -EINVAL (bad ids or kind),
 * -ENOENT, -ELOOP or -EBADMSG (a folder above it is a symlink or not a
 * folder), -errno.
 */
int mf_store_lstat(struct mf_store *st, enum mf_store_kind kind, const char *fp,
		   const char *run, uint32_t shard, struct stat *sb);

/* ---- snapshot.metadata: what a fingerprint folder holds ---- */

/* The longest snapshot name (MF_NAME_MAX of the spec parser). */
#define MF_META_NAME_MAX 64

/* One component of a fingerprint, as the metadata file lists it. */
struct mf_meta_part {
	const char *hex; /* 64 lowercase hex digits */
	const char *label;
};

/*
 * The metadata file's content (docs/format.md). The writer reads a
 * struct whose strings the caller lends; mf_snapshot_meta_parse fills one
 * whose strings point into a copy it owns (freed by
 * mf_snapshot_meta_release).
 */
struct mf_snapshot_meta {
	const char *fp; /* 64 hex digits */
	const char *name; /* [A-Za-z0-9._-], 1 to MF_META_NAME_MAX bytes */
	const char *spec_path; /* absolute */
	uint32_t shards; /* >= 1 */
	const char *compression; /* as mf_format_codec writes it: "zstd:3" */
	uint64_t chunk_size; /* MF_CHUNK_SIZE_MIN to _MAX */
	const char *suffix; /* "" when none */
	int64_t expire_after; /* seconds; -1: never */
	int64_t pending_expiry; /* seconds */
	uint32_t keep; /* 0: no limit */
	/* the uid of the spec that wrote it (line "owner UID", optional:
	 * none for a fixed key, and in files of matfs before it) */
	bool has_owner;
	uid_t owner;
	const struct mf_meta_part *parts; /* the fingerprint's components */
	size_t n_parts;
	const char *spec; /* the spec file's bytes; NULL when none */
	size_t spec_len;
	int64_t mtime; /* mf_store_load_metadata: the file's, unix seconds */
	/* owned by a parsed struct; NULL in one a caller filled */
	char *owned_text;
	struct mf_meta_part *owned_parts;
};

/*
 * The text of m: "matfs-snapshot 1", then one "key value" line a field,
 * one "component HEX LABEL" line a part, a line "spec:" and the spec
 * verbatim. Caller frees *out. Returns 0, -EINVAL (a field missing or
 * holding a newline), -ENOMEM.
 */
int mf_snapshot_meta_format(const struct mf_snapshot_meta *m, char **out,
			    size_t *len);

/*
 * Parses len bytes of text (not changed; copied) as a metadata file of
 * the folder of fingerprint fp. Lines other than the version come in any
 * order; unknown keys are skipped (a later matfs may add some), a key
 * without a value has the empty value. Returns 0 with *out (release it
 * with mf_snapshot_meta_release), -ENOMEM, or -EBADMSG
 * (MF_CORRUPT: "metadata ..." names the check) with a sentence for a
 * person in why (wlen bytes, may be 0): "line 3: bad shards '0'",
 * "no 'spec_path' line", "names fingerprint 0123..., not its folder's".
 */
int mf_snapshot_meta_parse(const char *text, size_t len, const char *fp,
			   struct mf_snapshot_meta *out, char *why,
			   size_t wlen);
/* Frees what a parsed struct owns and zeroes it. NULL does nothing. */
void mf_snapshot_meta_release(struct mf_snapshot_meta *m);

/*
 * Writes m as the metadata file of m->fp (mf_store_write_metadata),
 * unless the file already holds exactly those bytes. Returns 0, -EINVAL,
 * -ENOMEM, or what the write returned.
 */
int mf_store_put_metadata(struct mf_store *st,
			  const struct mf_snapshot_meta *m);

/*
 * Reads and parses the metadata file of fp, with out->mtime the file's.
 * Returns 0 (release *out), or the error of mf_store_read_metadata with
 * why "" (-ENOENT, -ELOOP, ...), or that of mf_snapshot_meta_parse with
 * why saying what is wrong in the text (a NUL byte: "holds a NUL byte").
 */
int mf_store_load_metadata(struct mf_store *st, const char *fp,
			   struct mf_snapshot_meta *out, char *why,
			   size_t wlen);

/* ---- writing a shard ---- */

struct mf_shard_writer;

/*
 * Starts writing shard `shard` of run RUN under FP into a temp file. The run
 * folder must exist. Bytes given to mf_shard_writer_write are cut into
 * cfg->chunk_size pieces, compressed (on a pool of cfg->threads threads,
 * or inline; results appended in order) and appended with their
 * checksums, each chunk at the codec and level cfg->adapt picks for it.
 * Memory stays bounded by threads + 1 chunks whatever the shard's size.
 * Returns 0, -EINVAL (bad ids, chunk_size, codec or level; zstd level 0
 * means MF_ZSTD_DEFAULT_LEVEL), -ENOENT / -ELOOP / -EBADMSG (run folder),
 * -EEXIST (the shard's temp file exists: another writer holds it), -errno.
 * A writer belongs to one thread at a time.
 */
int mf_shard_writer_open(struct mf_store *st, const char *fp,
			 const char *run_id, uint32_t shard,
			 const struct mf_codec_cfg *cfg,
			 struct mf_shard_writer **out);
int mf_shard_writer_write(struct mf_shard_writer *w, const void *buf,
			  size_t len);
/*
 * Writing in place, without a copy: mf_shard_writer_space gives the room
 * left in the chunk being filled (*buf, *room >= 1 bytes, the writer's,
 * valid until the next call on w); the caller puts up to *room bytes
 * there and tells how many with mf_shard_writer_wrote (0 is allowed), as
 * if they were given to mf_shard_writer_write. Both return 0, -EINVAL
 * (w NULL or sealed, n past the room given) or the writer's first error,
 * as mf_shard_writer_write does.
 */
int mf_shard_writer_space(struct mf_shard_writer *w, void **buf, size_t *room);
int mf_shard_writer_wrote(struct mf_shard_writer *w, size_t n);
/*
 * Seals w: writes the last chunk, the index and the trailer, so that the
 * temp file is complete (its size and bytes are final) but not yet
 * durable; frees the chunk buffers. *stat (may be NULL) gets what the
 * file holds; with fd not NULL, *fd gets a new read-only descriptor of
 * the temp file (the caller closes it), which mf_shard_reader_open_fd
 * reads while the commit runs and after it (a rename keeps the inode;
 * after a failed commit the unlinked file still reads). Writes to w
 * after it fail with -EINVAL; mf_shard_writer_commit makes it durable, or
 * mf_shard_writer_abort drops it. Returns 0, -EINVAL (w NULL or sealed
 * already: nothing changes), or the -errno of a write or of opening the
 * descriptor, after which w is freed as by abort.
 */
int mf_shard_writer_seal(struct mf_shard_writer *w, struct mf_shard_stat *stat,
			 int *fd);
/*
 * Seals w if it is not sealed yet, then fsyncs, renames the temp file to
 * its final name and fsyncs the folder. Frees w in every case; on failure
 * the temp file is gone and nothing was committed. *stat is written on
 * success (may be NULL). A writer may be sealed on one thread and
 * committed on another (one at a time).
 */
int mf_shard_writer_commit(struct mf_shard_writer *w,
			   struct mf_shard_stat *stat);
/* Drops everything written and frees w. NULL does nothing. */
void mf_shard_writer_abort(struct mf_shard_writer *w);

/*
 * For tests and the golden files: fn, when set, replaces the backlog the
 * writer measures (chunks handed to its workers, not yet compressed) when
 * it picks the level of chunk `chunk`, so a test can say "behind" or
 * "keeping up" without relying on timing; with `workers` workers, a
 * backlog >= workers is behind. Only an adapting writer (cfg->adapt, zstd)
 * asks. Returns 0, -EINVAL (w NULL), -EBUSY once bytes were written.
 */
typedef unsigned (*mf_shard_pressure_fn)(void *arg, uint32_t chunk,
					 unsigned workers);
int mf_shard_writer_set_pressure(struct mf_shard_writer *w,
				 mf_shard_pressure_fn fn, void *arg);

/*
 * A tap sees every chunk of the shard uncompressed, as the writer cuts it:
 * chunk 0, 1, ... in order, each chunk_size bytes but the last (a shard of
 * n bytes gives ceil(n / chunk_size) calls, none for an empty one), the
 * bytes being exactly those the file will hold. fn runs on the thread
 * calling mf_shard_writer_write (or mf_shard_writer_commit, for the last
 * chunk) before the chunk is compressed; raw is borrowed for the call
 * only. fn must not call the writer. Seeing a chunk does not mean it will
 * be stored: only a commit that returns 0 makes the chunks a file.
 */
typedef void (*mf_shard_tap_fn)(void *arg, uint32_t chunk, const void *raw,
				size_t len);
/* Sets (fn NULL: removes) w's tap. Returns 0, -EINVAL (w NULL), or
 * -EBUSY once bytes were written (the tap would miss chunks). */
int mf_shard_writer_set_tap(struct mf_shard_writer *w, mf_shard_tap_fn fn,
			    void *arg);
/*
 * With a release function, the tap may go on reading a chunk's raw bytes
 * after it returns (another thread may, too): the writer keeps them as
 * they are until it calls fn(arg, chunk) with the tap's arg, on the
 * writing thread, just before it reuses or frees the memory that held
 * that chunk and every chunk before it; when fn returns, nothing may read
 * them any more. fn runs once for each chunk index it names, in order
 * (one call may release several), and every chunk shown to the tap is
 * released by the end of mf_shard_writer_seal, _commit or _abort. The
 * writer then holds two chunk buffers at least, so that one can be read
 * while the next fills. Set after the tap, before the first byte, with
 * mf_shard_writer_space and _wrote (mf_shard_writer_write copies into the
 * writer's buffers). Returns 0, -EINVAL (w NULL or no tap), -EBUSY once
 * bytes were written, or -ENOMEM.
 */
typedef void (*mf_shard_release_fn)(void *arg, uint32_t chunk);
int mf_shard_writer_set_release(struct mf_shard_writer *w,
				mf_shard_release_fn fn);

/*
 * Records (docs/format.md, "The records section"): set before the first
 * byte, r says how the shard's bytes are framed; the writer then indexes
 * them as they are written, on the caller's thread, and stores the index
 * with the shard. Output that breaks its framing fails the write (or the
 * seal, for what only the end shows: a fixed-size remainder, a frame cut
 * short) with -EBADMSG, and mf_shard_writer_framing_error says what and
 * at which byte offset. Returns 0, -EINVAL (w NULL, a framing out of
 * range, a fixed size of 0 or above MF_RECORD_SIZE_MAX), -EBUSY once
 * bytes were written.
 */
int mf_shard_writer_set_records(struct mf_shard_writer *w,
				const struct mf_records *r);
/*
 * records: index: the n record ends the last stage wrote, before the
 * seal (once): strictly increasing, the last equal to the shard's length
 * (checked at the seal). Returns 0, -EINVAL (not framing index, or given
 * already), -EBADMSG (not increasing: see mf_shard_writer_framing_error),
 * -ENOMEM.
 */
int mf_shard_writer_set_ends(struct mf_shard_writer *w, const uint64_t *ends,
			     size_t n);
/*
 * Ends the records (idempotent): the checks the end of the output needs,
 * the last record. The seal does it too; calling it first gives the
 * caller the message of a failure while w is still there. Returns 0,
 * -EBADMSG, -ENOMEM, or the writer's earlier error.
 */
int mf_shard_writer_end_records(struct mf_shard_writer *w);
/* Why the output broke its framing: "TFRecord frame at offset 1234: data
 * CRC mismatch"; "" when it did not. Borrowed until w is freed. */
const char *mf_shard_writer_framing_error(const struct mf_shard_writer *w);

/* CRC32C (Castagnoli) of n bytes, and TensorFlow's masking of a CRC in
 * TFRecord frames: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t mf_crc32c(const void *p, size_t n);
uint32_t mf_tfrecord_mask(uint32_t crc);

/* ---- reading a shard ---- */

struct mf_shard_reader;

/*
 * Opens the committed file of shard `shard` of run RUN under FP and checks
 * its trailer and index. The file's checksums must be those of shard
 * `shard` of FP (format versions 2 and 3 bind them to both), so a file copied or
 * restored under another shard's name, or another fingerprint's, fails
 * here or at its first chunk read. Returns 0, -EBADMSG (corrupt, or not
 * this shard's file), -EINVAL (bad ids), -ENOENT, -ELOOP, -errno.
 */
int mf_shard_reader_open(struct mf_store *st, const char *fp,
			 const char *run_id, uint32_t shard,
			 struct mf_shard_reader **out);
/* Same over an open file descriptor, which the reader dups, expected to
 * hold shard `shard` of fp. For tests and fuzzing. */
int mf_shard_reader_open_fd(int fd, const char *fp, uint32_t shard,
			    struct mf_shard_reader **out);
void mf_shard_reader_close(struct mf_shard_reader *r);

void mf_shard_reader_stat(const struct mf_shard_reader *r,
			  struct mf_shard_stat *out);
/* The shard's framing (MF_FRAMING_NONE for a file before version 4 or
 * written without records) and its record count. */
void mf_shard_reader_records(const struct mf_shard_reader *r,
			     struct mf_records *framing, uint64_t *count);
/* Record k's place in the shard's bytes: [*off, *off + *len). The first
 * call reads the records section and checks it (its checksum and order:
 * a shard read only as bytes never pays for it). Returns 0, -EINVAL for
 * k >= the count (or a shard without records), -EBADMSG for a corrupt
 * records section, -ENOMEM, -errno. Thread-safe. */
int mf_shard_reader_record(struct mf_shard_reader *r, uint64_t k, uint64_t *off,
			   uint64_t *len);

/*
 * Reads only the header and trailer of shard `shard` of run RUN under FP
 * (checked as mf_shard_reader_open checks them, bound to the shard) and
 * gives its framing and record count: cheaper than opening a reader,
 * which also reads the index. Returns 0, or the errors of
 * mf_shard_reader_open.
 */
int mf_shard_file_records(struct mf_store *st, const char *fp,
			  const char *run_id, uint32_t shard,
			  struct mf_records *framing, uint64_t *count);
/* Uncompressed length of chunk i: chunk_size but for the last one. */
size_t mf_shard_reader_chunk_len(const struct mf_shard_reader *r, uint32_t i);
/* How chunk i is stored: format version 3 records a codec and level per
 * chunk (the trailer's codec at its level or below, or none); an older
 * file gives the trailer's. Returns 0 or -EINVAL (i out of range). */
int mf_shard_reader_chunk_codec(const struct mf_shard_reader *r, uint32_t i,
				enum mf_codec *codec, int *level);

/*
 * Decompresses chunk i into dst (cap >= its length), after checking its
 * checksum. Returns its length, -EBADMSG if corrupt, -EINVAL if cap is too
 * small or i out of range, -errno for I/O. Thread-safe: many threads may
 * read one reader.
 */
ssize_t mf_shard_reader_read_chunk(struct mf_shard_reader *r, uint32_t i,
				   void *dst, size_t cap);

/*
 * Reads up to len bytes at uncompressed offset off, touching only the
 * chunks that overlap. Returns the bytes read (short only at the end), 0 at
 * or past the end, or -EBADMSG / -errno. Thread-safe.
 */
ssize_t mf_shard_reader_pread(struct mf_shard_reader *r, void *buf, size_t len,
			      uint64_t off);

/* Checks the records section, then every chunk's checksum (and that it
 * decompresses to its length). Returns 0 or -EBADMSG with the first bad
 * chunk in *bad (may be NULL; not set for a bad records section). */
int mf_shard_reader_verify(struct mf_shard_reader *r, uint32_t *bad);

/*
 * Writes the whole shard, in order, to out_fd, decompressing on `threads`
 * threads (0 or 1: this thread only). Returns 0, -EBADMSG or -errno; on
 * error some bytes may have been written already.
 */
int mf_shard_reader_copy(struct mf_shard_reader *r, int out_fd,
			 unsigned threads);

/*
 * Decodes one stored chunk: checks the checksum (XXH3-64 of the stored
 * bytes with the chunk's seed: its index in format version 1, derived from
 * fingerprint, shard and index since version 2; docs/format.md) and
 * decompresses into dst, which must receive exactly raw_len bytes. Returns
 * 0, -EBADMSG, or -ENOMEM when the calling thread's decompression context
 * cannot be made. Pure function, thread-safe; the fuzz target drives it.
 */
int mf_chunk_decode(enum mf_codec codec, uint64_t seed, const void *src,
		    size_t src_len, uint64_t checksum, void *dst,
		    size_t raw_len);

#endif
