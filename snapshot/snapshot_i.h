/*
 * snapshot_i.h - private details of the chunk store shared by its .c files:
 * the shard file's byte layout (docs/format.md), per-thread codec state,
 * the descriptor-relative open helpers, the folder walk's pieces and a
 * shard writer's state.
 *
 * Not for: anything outside snapshot/. Callers use mf_snapshot.h.
 */
#ifndef MF_SNAPSHOT_I_H
#define MF_SNAPSHOT_I_H

#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mf_snapshot.h"

/* ---- the shard file's layout (docs/format.md) ---- */

#define SNAP_MAGIC_LEN 8
extern const uint8_t snap_header_magic[SNAP_MAGIC_LEN];
extern const uint8_t snap_trailer_magic[SNAP_MAGIC_LEN];

#define SNAP_HEADER_SIZE 16 /* magic, version, reserved */
/* An index entry as the writer writes it (version 3): offset u64, stored
 * u32, raw u32, xxh3 u64, codec u32, level i32. Versions 1 and 2 have the
 * first 24 bytes only (snap_entry_size). */
#define SNAP_ENTRY_SIZE 32
#define SNAP_ENTRY_SIZE_V2 24
/* The trailer: 96 bytes from version 4 on (the records fields), 64
 * before; its checksum covers every byte before its own 8. */
#define SNAP_TRAILER_SIZE 96
#define SNAP_TRAILER_SIZE_V3 64
#define SNAP_TRAILER_MAX SNAP_TRAILER_SIZE
#define SNAP_VERSION_MIN 1 /* the oldest version a reader accepts */

/*
 * What a file's checksums are seeded with (docs/format.md, section 3):
 * version 1 seeds chunk i with i and the index and trailer with 0;
 * versions 2 and 3 derive every seed from key, a hash of the fingerprint
 * and shard index the reader expects (never read from the file), so a file
 * under another shard's name fails its checks.
 */
struct snap_seeds {
	uint32_t version;
	uint64_t key; /* snap_shard_key(fp, shard); unused in version 1 */
};

/* The key of shard `shard` of fp (64 lowercase hex digits, checked). */
uint64_t snap_shard_key(const char *fp, uint32_t shard);
/* The seed of chunk i's checksum. */
uint64_t snap_chunk_seed(const struct snap_seeds *s, uint32_t i);
/* The seed of the index and of the trailer checksum. */
uint64_t snap_meta_seed(const struct snap_seeds *s);

/* One chunk as the index records it. */
struct snap_entry {
	uint64_t offset; /* of its stored bytes in the file */
	uint32_t stored; /* stored (compressed) length */
	uint32_t raw; /* uncompressed length */
	uint64_t checksum; /* XXH3-64 of the stored bytes (snap_chunk_seed) */
	enum mf_codec codec; /* how it is stored: the trailer's codec, or
				none (version 3); the trailer's before 3 */
	int32_t level; /* its zstd level (negative: a fast level), else 0 */
};

/* What the trailer holds, decoded. Files before version 4 have no
 * records: framing none, the rest 0. */
struct snap_trailer {
	uint32_t version;
	enum mf_codec codec;
	int32_t level;
	uint32_t chunks;
	uint64_t chunk_size;
	uint64_t raw_size;
	uint64_t index_offset;
	uint64_t index_checksum;
	struct mf_records records; /* framing, size, drop_tail */
	uint64_t n_records;
	uint64_t records_checksum; /* of the ends (snap_records_seed) */
};

/* The trailer's size in a file of that version. */
size_t snap_trailer_size(uint32_t version);
/* How many u64 ends the records section holds: n_records for the
 * framings that store ends (lines, tfrecord, tar, index), else 0. */
uint64_t snap_trailer_ends(const struct snap_trailer *t);
/* Where the chunks end and the records section starts. */
uint64_t snap_records_offset(const struct snap_trailer *t);
/* The seed of the records section's checksum. */
uint64_t snap_records_seed(const struct snap_seeds *s);
/* Checks n ends (8 bytes each, little-endian, at buf) against t: strictly
 * increasing from above 0, the last at raw_size (tar: at most raw_size).
 * Decodes them into out (may be NULL). 0 or -EBADMSG. */
int snap_records_decode(const struct snap_trailer *t, const uint8_t *buf,
			uint64_t *out);

void snap_put_u32(uint8_t *p, uint32_t v);
void snap_put_u64(uint8_t *p, uint64_t v);
uint32_t snap_get_u32(const uint8_t *p);
uint64_t snap_get_u64(const uint8_t *p);

/* A header of MF_SHARD_FORMAT_VERSION, the one version written. */
void snap_header_encode(uint8_t out[SNAP_HEADER_SIZE]);
/* Checks magic and reserved bytes, and gives the version (one this reader
 * knows) in *version; 0 or -EBADMSG. */
int snap_header_check(const uint8_t in[SNAP_HEADER_SIZE], uint32_t *version);

/* Fills every field of a version 4 trailer, the trailer checksum (seeded
 * with seed) included. */
void snap_trailer_encode(const struct snap_trailer *t, uint64_t seed,
			 uint8_t out[SNAP_TRAILER_SIZE]);
/* Checks magic, checksum (seeded with snap_meta_seed(s)), the version
 * against s->version (the header's), and every field on its own; 0 or
 * -EBADMSG. */
int snap_trailer_decode(const uint8_t *in, const struct snap_seeds *s,
			struct snap_trailer *out);
/* Checks the trailer against the file size; 0 or -EBADMSG. */
int snap_trailer_check_size(const struct snap_trailer *t, uint64_t file_size);

/* XXH3-64 of the encoded index, seeded with seed (snap_meta_seed). */
uint64_t snap_index_checksum(const uint8_t *idx, size_t len, uint64_t seed);

/* The size of one index entry in a file of that version. */
size_t snap_entry_size(uint32_t version);
/* Encodes e as version MF_SHARD_FORMAT_VERSION writes it. */
void snap_entry_encode(const struct snap_entry *e,
		       uint8_t out[SNAP_ENTRY_SIZE]);
/*
 * Decodes t->chunks entries of t->version from idx (checksum already
 * checked) and checks that they tile the file from the header to the
 * index, with raw lengths that add up to t->raw_size, and (version 3) that
 * each chunk's codec and level are allowed under the trailer's (the
 * trailer's codec at a level no higher, or none). Entries of versions 1
 * and 2 get the trailer's codec and level. 0 or -EBADMSG.
 */
int snap_index_decode(const struct snap_trailer *t, const uint8_t *idx,
		      struct snap_entry *out);

/* ---- the record index (records.c) ---- */

#define SNAP_TAR_META_MAX 65536 /* a pax header or GNU long name */
#define SNAP_TAR_NAME_MAX 4096

/* CRC32C state (not inverted) after n more bytes: start with 0xffffffff,
 * end with ~. */
uint32_t snap_crc32c_update(uint32_t crc, const void *p, size_t n);

/*
 * Builds the record index of one shard from its bytes, in order, on the
 * writer's thread. Owned by its writer; no locking.
 */
struct snap_indexer {
	struct mf_records cfg;
	uint64_t pos; /* bytes fed */
	uint64_t *ends; /* n record ends (variable framings) */
	size_t n, cap;
	uint64_t count; /* records, once ended */
	bool ended;
	int err; /* sticky: -EBADMSG (why says it) or -ENOMEM */
	char why[256];
	/* TFRecord: the frame being read */
	int state;
	uint8_t hdr[16];
	uint8_t len_bytes[8];
	size_t have; /* bytes of hdr (TFRecord) or blk (tar) held */
	uint64_t rec_start, left;
	uint32_t crc;
	/* tar */
	uint8_t blk[512];
	uint64_t pos_of_blk, member_at, member_size;
	uint64_t tar_pending; /* start of pax/long-name headers waiting
				 for their member; UINT64_MAX: none */
	bool tar_ended;
	uint64_t tar_end; /* offset of the first end-of-archive block */
	bool have_key;
	char key[SNAP_TAR_NAME_MAX + 1]; /* the current sample's */
	char next_name[SNAP_TAR_NAME_MAX + 1]; /* from a pax or 'L' header */
	uint8_t *meta; /* SNAP_TAR_META_MAX, once needed */
	size_t meta_len;
	uint64_t meta_at;
	uint8_t meta_type;
	bool collecting;
};

void snap_indexer_init(struct snap_indexer *ix, const struct mf_records *r);
void snap_indexer_release(struct snap_indexer *ix);
/* The next n bytes of the shard. 0, -EBADMSG or -ENOMEM (sticky). */
int snap_indexer_feed(struct snap_indexer *ix, const void *buf, size_t n);
/* records: index: the ends the stage wrote, strictly increasing; once. */
int snap_indexer_set_ends(struct snap_indexer *ix, const uint64_t *ends,
			  size_t n);
/* The end of the shard: the checks that need it, the last record. */
int snap_indexer_end(struct snap_indexer *ix);
/* The records section's bytes: the n ends made little-endian in place (a
 * no-op on a little-endian host); returns ends as bytes. */
uint8_t *snap_records_encode(uint64_t *ends, size_t n);

/* ---- codecs (chunk_codec.c) ---- */

/* True for a level the trailer may record with this codec (the ceiling:
 * zstd 1 to ZSTD_maxCLevel, 0 for the others). */
bool snap_level_valid(enum mf_codec codec, int level);
/* True for a level one chunk may be stored at: those, and zstd's fast
 * (negative) levels down to ZSTD_minCLevel. */
bool snap_chunk_level_valid(enum mf_codec codec, int level);
/* Largest stored length a chunk of raw bytes may have; 0 if unknown codec. */
size_t snap_codec_bound(enum mf_codec codec, size_t raw);

/* One compression context, owned by one thread at a time. */
struct snap_cctx;
int snap_cctx_new(enum mf_codec codec, struct snap_cctx **out);
void snap_cctx_free(struct snap_cctx *c);
/* Compresses src into dst (cap >= snap_codec_bound). Returns 0 or -EIO. */
int snap_compress(struct snap_cctx *c, enum mf_codec codec, int level,
		  const void *src, size_t len, void *dst, size_t cap,
		  size_t *out_len);

/*
 * The codec and level of each chunk a writer compresses (codec_adapt.c),
 * zstd's --adapt idea: the level steps down a ladder (the ceiling, each
 * level below it to 1, the fast levels -1, -2, -4, -8, -16, then storing
 * the chunk raw) while the compressors fall behind, and back up toward
 * the ceiling while they keep up. Pure: the writer tells it, for each
 * chunk it hands over, how many chunks were handed to its workers and not
 * yet compressed (the backlog) and how many workers there are.
 */
struct snap_adapt {
	enum mf_codec codec; /* the ceiling's codec */
	int ceiling; /* its level */
	bool on; /* false: every chunk at the ceiling */
	unsigned rung; /* 0: the ceiling; snap_adapt_rungs() - 1: raw */
	unsigned calm; /* chunks in a row that found a worker free */
};
/* Chunks in a row that must find a worker free before a rung up. */
#define SNAP_ADAPT_CALM 4
/* Adapting applies to zstd only; codec none and snappy stay as they are. */
void snap_adapt_init(struct snap_adapt *a, enum mf_codec codec, int level,
		     bool on);
/* How many rungs the ladder has (1 when not adapting). */
unsigned snap_adapt_rungs(const struct snap_adapt *a);
/* The codec and level of a rung. */
void snap_adapt_rung(const struct snap_adapt *a, unsigned rung,
		     enum mf_codec *codec, int *level);
/*
 * The chunk being handed over found `backlog` chunks not yet compressed
 * ahead of it with `workers` workers: behind when backlog >= workers (no
 * worker free: it must queue), one rung down; calm otherwise, and after
 * SNAP_ADAPT_CALM calm chunks in a row, one rung up. Gives the chunk's
 * codec and level.
 */
void snap_adapt_next(struct snap_adapt *a, unsigned backlog, unsigned workers,
		     enum mf_codec *codec, int *level);
/* The cores this process may run on (sched_getaffinity), at least 1. */
unsigned snap_cores_available(void);

/* XXH3-64 of a chunk's stored bytes with the seed snap_chunk_seed gave. */
uint64_t snap_chunk_checksum(const void *p, size_t len, uint64_t seed);

/*
 * A scratch buffer of at least len bytes that belongs to the calling thread
 * until its next call with the same slot; freed when the thread exits.
 * NULL when out of memory.
 */
enum snap_scratch { SNAP_SCRATCH_STORED, SNAP_SCRATCH_RAW, SNAP_SCRATCH_N };
void *snap_thread_scratch(enum snap_scratch slot, size_t len);

/* ---- appending a file's bytes, with O_DIRECT where taken (file_out.c) ---- */

struct snap_out;
/* Appends to fd (open for writing, at its end); fd must stay open until
 * snap_out_free. */
int snap_out_open(int fd, struct snap_out **out);
int snap_out_put(struct snap_out *o, const void *data, size_t len);
/* Every byte put is written (not yet durable: the caller's fsync). */
int snap_out_end(struct snap_out *o);
/* Waits for a write under way; NULL is fine. */
void snap_out_free(struct snap_out *o);

/* ---- the store and descriptors (store.c) ---- */

/* Immutable after mf_store_open, so shared freely between threads. */
struct mf_store {
	char *path; /* as given to mf_store_open */
	int dirfd; /* the store folder */
	int snapfd; /* STORE/snapshots */
};

/* -EINVAL unless fp is 64 lowercase hex and run_id (if not NULL) 32. */
int snap_check_ids(const char *fp, const char *run_id);

/*
 * Opens name under dirfd without following symlinks and checks that it is
 * a directory (want_dir) or a regular file. -ELOOP for a symlink, -EBADMSG
 * for any other wrong type, -ENOENT, -errno. The descriptor is O_CLOEXEC.
 */
int snap_open_at(int dirfd, const char *name, bool want_dir, int *out);
/* Modes of what the store makes inside it, before the umask: nothing for
 * other users, who read through the mount (docs/security.md, "The store");
 * the group's bits are the umask's, for a store a trusted group shares. */
#define SNAP_DIR_MODE 0770
#define SNAP_FILE_MODE 0660

/* Makes folder name under parent (SNAP_DIR_MODE) if missing, syncing
 * parent when it does, then opens it as snap_open_at does. */
int snap_open_dir_create(int parent, const char *name, int *out);
/* Takes the other users' bits off the folder or file fd when this process
 * owns it (a store made by an older version, or by hand). */
void snap_close_to_others(int fd);
/* Opens STORE/snapshots/FP (fp checked) as a directory. */
int snap_open_fp(struct mf_store *st, const char *fp, int *out);
/* Opens STORE/snapshots/FP/RUN after checking both names. */
int snap_open_run(struct mf_store *st, const char *fp, const char *run_id,
		  int *out);
/* "shard-NNNNN" + ext into buf (>= SNAP_NAME_MAX). */
#define SNAP_NAME_MAX 32
void snap_shard_name(uint32_t shard, const char *ext, char *buf);
/* Parses exactly the name snap_shard_name(i, ext) writes. */
bool snap_parse_shard_name(const char *name, const char *ext, uint32_t *out);

#define SNAP_METADATA_NAME MF_STORE_METADATA_NAME

/* Reads snapshot.metadata of fp as mf_store_read_metadata does; *mtime
 * (may be NULL) gets the file's modification time in unix seconds. */
int snap_read_metadata(struct mf_store *st, const char *fp, char **data,
		       size_t *len, int64_t *mtime);

/* ---- walking folders (store_walk.c) ---- */

/* A DIR stream over folder name under parent ("." for parent itself),
 * never following a symlink; caller closedirs. */
int snap_dir_open(int parent, const char *name, DIR **out);
/* Next entry other than . and ..; NULL at the end (*rc = 0) or on error. */
struct dirent *snap_next_entry(DIR *d, int *rc);
/* mf_store_walk of the run folder open at runfd (fp and run its names). */
int snap_walk_run(int runfd, const char *fp, const char *run,
		  mf_store_walk_fn fn, void *arg);

/* ---- readers (shard_reader.c) ---- */

struct mf_shard_reader {
	int fd; /* owned; read with pread only */
	struct mf_shard_stat st;
	int level;
	struct snap_seeds seeds; /* the file's version, the expected key */
	struct snap_entry *ent; /* st.chunks entries, immutable */
	struct mf_records records; /* framing none before version 4 */
	uint64_t n_records;
	struct snap_trailer trailer; /* where the records section lies */
	/* the records section's ends, read and checked on first use (a
	 * shard read as bytes never needs them); guarded by ends_lock */
	pthread_mutex_t ends_lock;
	bool ends_loaded;
	int ends_err; /* what loading them gave: 0 or -EBADMSG, -ENOMEM */
	uint64_t *ends; /* NULL until loaded, and when the file has none */
};

/* Reads chunk i (< chunks) into dst (its raw length), checksum checked.
 * 0, -EBADMSG, -ENOMEM or -errno. Thread-safe. */
int snap_load_chunk(struct mf_shard_reader *r, uint32_t i, void *dst);

/* ---- a shard writer (shard_writer.c, shard_chunks.c) ---- */

enum slot_state {
	SLOT_FREE, /* the caller may fill it */
	SLOT_QUEUED, /* handed to the pool, not yet compressed */
	SLOT_DONE, /* compressed, waiting to be appended in order */
};

struct wslot {
	uint8_t *raw; /* chunk_size bytes */
	uint8_t *out; /* the codec's bound; NULL for MF_CODEC_NONE */
	const uint8_t *src; /* raw, or the caller's bytes when inline */
	enum mf_codec codec; /* this chunk's, picked when it was handed over */
	int level;
	size_t raw_len, out_len;
	uint64_t checksum;
	int err;
	enum slot_state state; /* guarded by lock when the pool runs */
};

struct worker {
	struct mf_shard_writer *w;
	struct snap_cctx *cctx;
	pthread_t thread;
};

/*
 * Only the owning thread touches everything but the fields marked as
 * guarded by lock, which the pool's workers share. One lock, no order.
 */
struct mf_shard_writer {
	int dirfd, fd;
	char tmp[SNAP_NAME_MAX], final[SNAP_NAME_MAX];
	enum mf_codec codec; /* the ceiling: the trailer's codec and level */
	int level;
	struct snap_adapt adapt; /* picks each chunk's codec and level */
	mf_shard_pressure_fn pressure; /* NULL: the measured backlog */
	void *pressure_arg;
	struct snap_seeds seeds; /* MF_SHARD_FORMAT_VERSION, this shard's key */
	struct snap_out *out; /* appends to fd (file_out.c) */
	size_t chunk_size, bound;
	size_t raw_cap, out_cap; /* of each slot's buffers (mf_buf_alloc) */
	struct wslot *slots;
	unsigned nslots;
	uint64_t head; /* next chunk to append to the file */
	uint64_t tail; /* chunks submitted so far; guarded by lock */
	size_t fill; /* bytes in slots[tail % nslots].raw */
	uint64_t raw_total, file_off;
	struct snap_entry *idx; /* head entries */
	size_t idx_cap;
	int err; /* the first failure; sticky */
	struct snap_cctx *cctx; /* inline compression */
	struct worker *workers; /* nalloc of them, nworkers running */
	unsigned nalloc, nworkers;
	pthread_mutex_t lock;
	pthread_cond_t work_cv, done_cv;
	uint64_t next_job; /* guarded by lock */
	uint64_t compressed; /* chunks the pool has compressed; guarded by
				lock */
	bool stop; /* guarded by lock */
	mf_shard_tap_fn tap; /* NULL: none */
	void *tap_arg;
	mf_shard_release_fn release; /* NULL: tapped bytes borrowed per call */
	uint64_t released; /* chunks below this one were released */
	bool sealed; /* finish() wrote the index and trailer: only the
			commit protocol is left */
	struct snap_indexer ix; /* the records index (framing none: idle) */
};

/* Hands the chunk in slot s, the next one (raw_len, src set), on: shows it
 * to the tap, picks its codec and level, compresses and appends it inline
 * or queues it to the pool and appends what is ready. 0, -EFBIG past 2^32
 * chunks, or the first failure of a chunk appended. Owning thread only. */
int snap_writer_submit(struct mf_shard_writer *w, struct wslot *s);
/* Appends the compressed chunks in order, waiting for those below need
 * and stopping at the first one not ready at or after it. 0, or the
 * first failure. Owning thread only. */
int snap_writer_drain(struct mf_shard_writer *w, uint64_t need);
/* Starts n compression workers: 0, or -ENOMEM or a codec's or
 * pthread_create's error, with none left running. */
int snap_writer_pool_start(struct mf_shard_writer *w, unsigned n);
/* Stops and joins the workers; none running: nothing. */
void snap_writer_pool_stop(struct mf_shard_writer *w);

#endif
