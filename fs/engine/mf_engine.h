/*
 * mf_engine.h - the materialization engine: given a snapshot's fingerprint
 * (or a spec) and a shard index, hand back a reader over the materialized
 * shard, computing it first - once, however many threads and processes ask
 * - when it is not there yet. Both the matfs daemon and matctl are thin
 * layers over this.
 *
 * It ties the other modules together: pipeline/ (specs, fingerprints,
 * stages), catalog/ (who owns which shard) and snapshot/ (the chunk store).
 * It never includes a FUSE header and never prints. This header stands on
 * mf_util.h alone and says everything in the engine's own terms (shard and
 * snapshot records, a file's sizes, a reader's chunks, a spec's watch
 * list), so a front end needs no header below it; the few catalog and
 * store types only matctl and the tests use are declared opaque here.
 *
 * Single flight: inside one process, concurrent callers for one shard share
 * one attempt (and its result, success or error). Across processes on the
 * host the catalog's claim decides; a process that loses waits, polling the
 * catalog, until the owner commits or dies, and then reads or takes over.
 * When the attempt it waited on fails, that failure is its answer too
 * (-EIO): a failing stage runs once for all who waited, and the next open
 * tries again.
 *
 * Thread-safety: every function may be called from any thread at once,
 * except mf_engine_close, which must be called once nothing else runs.
 */
#ifndef MF_ENGINE_H
#define MF_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "mf_util.h"

#define MF_CATALOG_FILE "catalog.db"

/* The longest pipeline name, in bytes (a spec's `name`). */
#define MF_ENGINE_NAME_MAX 64

/* Opaque here: a reader of one shard file (mf_engine_open_shard), closed
 * with mf_engine_reader_close; the store, a catalog connection and the
 * run rows and totals of the catalog, whose definitions only matctl and
 * the tests take (mf_snapshot.h, mf_catalog.h). */
struct mf_shard_reader;
struct mf_store;
struct mf_catalog;
struct mf_run_rec;
struct mf_catalog_totals;

/* ---- records, in the engine's terms (engine_front.c) ---- */

/* A shard's state, as the catalog records it. */
enum mf_engine_state {
	MF_ENGINE_ABSENT = 0,
	MF_ENGINE_RUNNING = 1,
	MF_ENGINE_MATERIALIZED = 2,
	MF_ENGINE_FAILED = 3,
};
/* "absent", "running", "materialized", "failed"; "unknown" else. */
const char *mf_engine_state_name(enum mf_engine_state s);

/* The sizes of one shard file (its trailer's). */
struct mf_engine_file {
	uint64_t raw_bytes; /* uncompressed size of the shard */
	uint64_t stored_bytes; /* size of the file on disk */
	uint32_t chunks;
	enum mf_codec codec; /* the ceiling: each chunk has it or none */
	uint64_t chunk_size;
};

/* A shard's row. Copies: release with mf_engine_shard_release. */
struct mf_engine_shard {
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t index;
	enum mf_engine_state state;
	char run_id[MF_RUN_ID_HEX_LEN + 1]; /* "" when none */
	uint64_t raw_bytes, stored_bytes;
	uint32_t chunks;
	int32_t exit_status; /* wait status of the failing stage; -1: none */
	char *error; /* one line, or NULL; owned */
	char *stderr_tail; /* last 4 KiB of its stderr, or NULL; owned */
	int64_t last_read;
	uint32_t attempts; /* materializations started */
	/* the computation the row describes (a random nonzero 63-bit
	 * number each claim sets anew, never the same for two
	 * computations); 0: absent, or none recorded */
	uint64_t generation;
};
/* Frees what *s owns; NULL does nothing. */
void mf_engine_shard_release(struct mf_engine_shard *s);

/* A snapshot's row. Copies: release with mf_engine_snapshot_release. */
struct mf_engine_snapshot {
	char fp[MF_FP_HEX_LEN + 1];
	char name[MF_ENGINE_NAME_MAX + 1];
	uint32_t shards;
	char *spec_path; /* absolute; owned */
	char *compression; /* "zstd:3"; owned */
	char *suffix; /* "" when none; owned */
	uint64_t chunk_size;
	int64_t expire_after; /* seconds; -1: never */
	int64_t pending_expiry;
	uint32_t keep; /* 0: no limit */
	int64_t created; /* unix seconds */
	int64_t last_read; /* unix seconds; 0: never read */
	/* from its shard rows: */
	uint32_t materialized;
	uint64_t raw_bytes, stored_bytes;
};
/* Frees what *s owns; NULL does nothing. */
void mf_engine_snapshot_release(struct mf_engine_snapshot *s);

/* ---- a reader the engine returned (engine_front.c) ---- */

/* Closes r; NULL does nothing. */
void mf_engine_reader_close(struct mf_shard_reader *r);
/* The sizes of the file r reads. */
void mf_engine_reader_stat(const struct mf_shard_reader *r,
			   struct mf_engine_file *out);
/* Uncompressed length of chunk i: chunk_size but for the last one. */
size_t mf_engine_chunk_len(const struct mf_shard_reader *r, uint32_t i);
/* Decompresses chunk i into dst (cap >= its length) after checking its
 * checksum: its length, -EBADMSG (corrupt), -EINVAL (cap too small, i out
 * of range) or -errno. Many threads may read one reader. */
ssize_t mf_engine_read_chunk(struct mf_shard_reader *r, uint32_t i, void *dst,
			     size_t cap);

/* The store folder when none is given (engine_defaults.c):
 * $XDG_CACHE_HOME/matfs, else ~/.cache/matfs ($HOME, else the password
 * entry's home). Caller frees; NULL when out of memory or no home is
 * known (never /tmp). */
char *mf_engine_default_store(void);

/* Whether a catalog location (mf_engine_opts.catalog) carries a password:
 * one given in argv is visible to every user of the host, so a front end
 * warns (passwords belong in ~/.pgpass, PGPASSFILE or PGPASSWORD). */
bool mf_engine_catalog_has_password(const char *location);
/* Whether the catalog at location (NULL: the store's SQLite one) is shared
 * by several hosts' daemons (PostgreSQL). */
bool mf_engine_catalog_shared(const char *location);
/* The daemon's log file when none is given: STORE/matfs.log, or
 * STORE/matfs-HOST.log (HOST as gethostname says, [A-Za-z0-9._-] kept)
 * on a catalog several hosts share. Caller frees; NULL: no memory. */
char *mf_engine_default_log(const char *store, const char *catalog);
#define MF_ENGINE_BOOT_WAIT_S 60
/* location as messages show it: an SQLite catalog's path, a PostgreSQL
 * URL with its password written as "***". The text lives until the
 * calling thread's next call. */
const char *mf_engine_catalog_shown(const char *location);

/* Called from the materializing thread after each chunk is handed to the
 * store, and once more with done = true. Must not block. */
typedef void (*mf_progress_fn)(void *arg, const char *fp, uint32_t shard,
			       uint64_t bytes, bool done);

/*
 * The raw chunks of a materialization this engine performs, for a caller
 * that wants to serve them without reading the file back. A computation is
 * named by fp, shard and generation: the catalog row's generation while
 * the file it wrote is the shard's (struct mf_engine_shard), never the same
 * for two computations. Per computation: one MF_CHUNK_DATA per chunk, in
 * order (the bytes the file holds), then
 * exactly one MF_CHUNK_COMMITTED (the file is durable and the catalog
 * names it, with its stat), MF_CHUNK_SEALED (with serve_sealed: the file
 * is complete, its bytes and size final, with its stat; the commit
 * follows in the background and sends no event) or MF_CHUNK_FAILED
 * (stage or store failure, the shard was expired meanwhile, or the
 * computation was cancelled: forget its chunks). A computation whose
 * claim cannot be read back from the catalog gets no events.
 *
 * A DATA event's raw bytes stay readable after the call, by any thread,
 * until the MF_CHUNK_RELEASE that names its index or a later one: that
 * event comes, on the same thread, just before the engine reuses or frees
 * their memory, and when the callback returns nothing may read them any
 * more. Every chunk is released before the computation's last event; a
 * callback that copies what it keeps during the DATA call ignores it.
 */
enum mf_chunk_kind {
	MF_CHUNK_DATA = 0,
	MF_CHUNK_COMMITTED,
	MF_CHUNK_FAILED,
	MF_CHUNK_SEALED,
	MF_CHUNK_RELEASE, /* index: this chunk and those before it */
};

/* Every pointer is borrowed for the call, but DATA's raw (above). */
struct mf_chunk_event {
	enum mf_chunk_kind kind;
	const char *fp;
	uint32_t shard;
	uint64_t generation; /* the row's generation after this claim; > 0 */
	uint32_t index; /* DATA, RELEASE: the chunk's index */
	const void *raw; /* DATA: its uncompressed bytes */
	size_t len; /* DATA: their length */
	const struct mf_engine_file *stat; /* COMMITTED, SEALED: the file's */
};

/* Called on the materializing thread (the one in mf_engine_open_shard
 * that leads the shard's single flight). Must not block for long (a
 * RELEASE waits for what reads the bytes) or call the engine. */
typedef void (*mf_chunk_fn)(void *arg, const struct mf_chunk_event *ev);

struct mf_rebuild_item;

struct mf_engine_opts {
	const char *store_dir; /* required; created if missing */
	/* the catalog's location (mf_catalog_open): NULL for the store's
	 * own, "sqlite:STORE/catalog.db"; "postgresql://..." for a catalog
	 * shared by many hosts */
	const char *catalog;
	int busy_timeout_ms; /* catalog busy timeout; <= 0: 10 s */
	/* a catalog server that does not answer at open (a boot where
	 * PostgreSQL starts after the daemon) is tried again for this many
	 * seconds, each try after a backoff of 0.5 s doubling to 5 s, told
	 * to note; 0: not at all (matctl). The daemon waits
	 * MF_ENGINE_BOOT_WAIT_S. */
	unsigned catalog_wait_s;
	/* per materialization; 0: the cores the process may run on, at
	 * most 8 (the shard writer's threads) */
	unsigned compress_threads;
	unsigned heartbeat_s; /* run heartbeat period; 0: 5 s */
	mf_progress_fn progress; /* may be NULL */
	void *progress_arg;
	mf_chunk_fn chunk; /* may be NULL */
	void *chunk_arg;
	/* Serve a shard once its output is complete, before it is durable:
	 * when the stages ended well and the inputs still hash as they did,
	 * the file is sealed (mf_shard_writer_seal) and mf_engine_open_shard
	 * returns a reader of it at once, while one thread of the engine
	 * commits it (fsync, rename, fsync of the folder, then the catalog
	 * row). Until then the row stays running: the shard is recorded
	 * materialized only once durable, and every open of it in this
	 * engine gets a reader of the same file without computing it again
	 * (other processes wait for the commit). A failed commit is recorded
	 * as the shard's failure (the next open computes it again) and told
	 * to commit_failed; readers opened before keep reading the same
	 * bytes. mf_engine_close waits for the commits under way. false: an
	 * open returns only after the commit (matctl). */
	bool serve_sealed;
	/* may be NULL: a background commit failed; err says why ("store:
	 * committing shard 3: No space left on device"). Called on the
	 * engine's commit thread; must not call the engine. */
	void (*commit_failed)(void *arg, const char *fp, uint32_t shard,
			      const char *err);
	void *commit_failed_arg;
	/* may be NULL: told of each snapshot recorded and each thing skipped
	 * when the engine indexes a new or lost catalog (as
	 * mf_engine_rebuild's report), on whichever thread found it */
	void (*indexed)(void *arg, const struct mf_rebuild_item *it);
	void *indexed_arg;
	/* may be NULL: one line for the log about something that is not a
	 * failure ("shard 3 of 1a2b3c4d5e6f: input '/d/a.txt' changed while
	 * it was read (...): computing it again"), on the thread it
	 * happened on; must not call the engine */
	void (*note)(void *arg, const char *msg);
	void *note_arg;
};

struct mf_engine;

/*
 * Opens the store and its catalog. A catalog that does not carry the index
 * mark (a new one: the old was deleted, emptied or replaced) first gets
 * what the store holds: a snapshot row from each fingerprint folder's
 * metadata file, and every committed shard file of a run it does not
 * know recorded materialized under that run, marked "done" (as
 * mf_engine_rebuild, without moving anything aside); then the mark. So a
 * lost catalog never makes committed shards look absent, to be computed
 * again or reclaimed. Several processes may do this at once: each
 * fingerprint is recorded in one transaction that records only what the
 * catalog still lacks. The same happens whenever the engine finds its
 * catalog file replaced while open (see mf_engine_catalog_open).
 * Returns 0 or -errno, with *err (caller frees) saying what failed
 * ("store '/x': Permission denied").
 */
int mf_engine_open(const struct mf_engine_opts *opts, struct mf_engine **out,
		   char **err);
void mf_engine_close(struct mf_engine *e);

/* Borrowed for the life of e; thread-safe handle. */
struct mf_store *mf_engine_store(struct mf_engine *e);

/*
 * Loads the spec at path, computes its fingerprint, records the snapshot
 * in the catalog, writes its metadata file and keeps the spec in
 * memory for materialization. fp receives the fingerprint. Returns 0 or
 * -errno with *err ("FILE:LINE:COL: ..." for a bad spec; -EINVAL with
 * "FILE: deps 'x': REAL: on this matfs mount itself: refused" for a deps
 * or input file on the mount mf_engine_set_mount named, found before
 * anything reads it). -EAGAIN with *err when the catalog could not be
 * reached (an outage, mf_catalog_unreachable): nothing was recorded, and
 * the same registration may succeed once the catalog answers. No lock of
 * the engine is held while the spec is loaded and its deps and inputs
 * are hashed: registrations of different specs run at once, and a slow
 * file delays only its own spec.
 */
int mf_engine_register(struct mf_engine *e, const char *spec_path,
		       char fp[MF_FP_HEX_LEN + 1], char **err);

/*
 * mf_engine_register in two steps, for a caller that must watch what a
 * spec depends on before its files are read (the FUSE layer), parsing
 * the spec once: mf_engine_spec_load parses spec_path (0, or -errno with
 * *err "FILE:LINE:COL: ..."), mf_engine_spec_watch_list lists what its
 * fingerprint depends on, and mf_engine_register_spec registers it (the
 * rest of mf_engine_register: hashing, the catalog, the registry), taking
 * s whatever it returns. mf_engine_spec_free frees a spec not registered;
 * NULL does nothing. Thread-safe, no lock held while files are read.
 */
struct mf_engine_spec;
int mf_engine_spec_load(const char *spec_path, struct mf_engine_spec **out,
			char **err);
int mf_engine_register_spec(struct mf_engine *e, struct mf_engine_spec *s,
			    char fp[MF_FP_HEX_LEN + 1], char **err);
void mf_engine_spec_free(struct mf_engine_spec *s);

/* One folder a fingerprint depends on, and the entry name (or glob
 * component, when glob) that matters in it. */
struct mf_engine_watch_dir {
	char *path; /* absolute, as built from the spec folder (may hold ..) */
	char *name;
	bool glob;
};
/* What a spec's fingerprint depends on: every component folder of each
 * dep's path, the links and real file of a symlinked one, every folder
 * its input globs walk, and the deps and input files. */
struct mf_engine_watch {
	struct mf_engine_watch_dir *dirs; /* sorted by path, no duplicates */
	size_t n_dirs;
	char **files; /* absolute: every deps file, then every input file */
	size_t n_files;
	void *own; /* the engine's: what mf_engine_watch_release frees */
};
/* Fills *out (release it with mf_engine_watch_release): 0 or -ENOMEM. */
int mf_engine_spec_watch_list(const struct mf_engine_spec *s,
			      struct mf_engine_watch *out);
/* Frees what *w holds and empties it; NULL does nothing. */
void mf_engine_watch_release(struct mf_engine_watch *w);

/*
 * The mount this engine serves, for a daemon: a spec whose deps or input
 * files (symlinks resolved) are on it is refused, since reading them would
 * call the daemon's own mount from its own threads. path is the
 * mountpoint, absolute and resolved (a file under it is refused even
 * before the mount is made); dev its st_dev once mounted (0: not known
 * yet). NULL path: none (the default). Thread-safe; affects later loads.
 */
void mf_engine_set_mount(struct mf_engine *e, const char *path, dev_t dev);

/*
 * Whether what a user typed names a spec file rather than a pipeline or a
 * fingerprint: it holds a '/' or ends in ".yaml" or ".yml". Any other word
 * is never read as a file, even when one of that name exists (a folder
 * ./corpus must not hide pipeline corpus).
 */
bool mf_engine_is_spec_path(const char *what);

/*
 * Turns what a user typed into a fingerprint. A spec file path
 * (mf_engine_is_spec_path) is registered on the way (the errors of
 * mf_engine_register). Any other word is 64 hex digits known to the
 * catalog, a pipeline name (its most recently registered fingerprint), or
 * a prefix of 8 or more hex digits (either case) that one fingerprint in
 * the catalog starts with (a name is tried first). -ENOENT with *err when
 * nothing matches (naming what was tried, and a file of that name in the
 * working directory, which is not read); -EINVAL with *err for a prefix
 * under 8 digits, one that more than one fingerprint starts with (*err
 * lists them), or a name that is also a prefix of another snapshot's
 * fingerprint.
 */
int mf_engine_resolve(struct mf_engine *e, const char *what,
		      char fp[MF_FP_HEX_LEN + 1], char **err);

/*
 * Returns a reader over shard `shard` of snapshot fp, materializing it
 * first if needed (blocks meanwhile). The caller closes the reader with
 * mf_engine_reader_close. Errors: -ENOENT (unknown snapshot or shard index
 * out of range), -EIO (a stage failed, or the store failed while writing:
 * *err says which and the catalog keeps it), -ESTALE (the spec's inputs or
 * deps changed, so this fingerprint can no longer be computed),
 * -ECANCELED (mf_engine_cancel stopped the computation, or the wait for
 * another process's), -EBADMSG never: a corrupt shard is recomputed.
 */
int mf_engine_open_shard(struct mf_engine *e, const char *fp, uint32_t shard,
			 struct mf_shard_reader **out, char **err);

/*
 * As mf_engine_open_shard, and *rec (may be NULL) receives the catalog row
 * the reader was opened from: materialized, with the generation and sizes
 * of the very file it reads, which a later catalog read may no longer
 * describe (the shard expired and recomputed meanwhile). With
 * serve_sealed it may instead be running: the file is sealed and its
 * commit under way in this engine (raw_bytes, stored_bytes and chunks
 * are then the file's). Written only on success; the caller releases it
 * with mf_engine_shard_release.
 */
int mf_engine_open_shard_rec(struct mf_engine *e, const char *fp,
			     uint32_t shard, struct mf_shard_reader **out,
			     struct mf_engine_shard *rec, char **err);

/*
 * Tells the engine that a read from a reader it returned found corrupt
 * data. generation names the computation whose file was read (the
 * generation of the row mf_engine_open_shard_rec returned): only while the
 * shard is still materialized as that computation does it go back to
 * absent and its file is removed, so the next open recomputes it. A shard
 * expired or recomputed since (by another run, or by this process's run
 * again after an rm) is left alone. generation 0: whatever computation is
 * current, as mf_engine_expire_shard. Returns 0 (also when nothing was
 * left to do), -ENOENT (unknown snapshot or shard) or another -errno of
 * the catalog or the store.
 */
int mf_engine_report_corrupt(struct mf_engine *e, const char *fp,
			     uint32_t shard, uint64_t generation);

/*
 * Stops this engine's attempt at shard `shard` of fp, if one is under way,
 * for a caller whose readers all went away: its stages' process group is
 * killed, its output dropped, and the shard goes back to absent without
 * a failure recorded (mf_catalog_abandon_shard); a wait for another
 * process's computation of it stops instead. Every caller of
 * mf_engine_open_shard sharing that attempt gets -ECANCELED; a later call
 * starts afresh. An attempt whose stages all ended well before they were
 * killed completes as usual.
 */
void mf_engine_cancel(struct mf_engine *e, const char *fp, uint32_t shard);
/* As mf_engine_cancel for every attempt under way and every later one:
 * for a process about to exit. Opens of materialized shards still work. */
void mf_engine_cancel_all(struct mf_engine *e);

/* Expires one shard / a whole snapshot: catalog rows back to absent (the
 * snapshot row stays while its spec is registered in this engine, else it
 * is deleted) and the files removed. Open readers keep reading.
 * mf_engine_expire_shard answers -EBUSY, changing nothing, for a shard a
 * live run is computing (its result would land after the expiry);
 * mf_engine_expire_snapshot expires the other shards, then answers -EBUSY
 * and keeps the snapshot when one is being computed. */
int mf_engine_expire_shard(struct mf_engine *e, const char *fp, uint32_t shard);
int mf_engine_expire_snapshot(struct mf_engine *e, const char *fp);

struct mf_gc_stats {
	uint32_t snapshots_removed; /* folders with no catalog entry */
	uint32_t hints_removed; /* STORE/shared hints of data gone */
	uint32_t runs_removed; /* run folders of dead runs no shard uses */
	uint32_t files_removed; /* shard files no catalog row points at, and
				   temp files of dead runs */
	/* unknown folders kept: they hold a metadata file, or shard
	 * files that could not be recorded (no metadata to record them by) */
	uint32_t snapshots_unindexed;
	/* what the catalog never knew, recorded instead of removed: folders
	 * given their snapshot row back, shard files of unknown runs */
	uint32_t snapshots_adopted;
	uint32_t shards_adopted;
};
/*
 * Reclaims store space that nothing in the catalog refers to. What the
 * catalog never knew is adopted first, never removed: the committed shard
 * files of runs it has no row for are recorded materialized (where their
 * shard is absent or failed), and a fingerprint folder it does not know
 * gets its snapshot row back from its metadata file when it holds such
 * files (as mf_engine_open does for a new catalog). Then: folders of
 * unknown fingerprints that hold neither a metadata file nor a shard
 * file, folders of dead runs no shard uses, temp files of dead runs, and
 * shard files no row points at are removed.
 */
int mf_engine_gc(struct mf_engine *e, struct mf_gc_stats *stats);

/*
 * Checks every materialized shard of fp: its file is the shard's own (its
 * checksums are bound to fp and the index), every checksum holds, and its
 * file size, raw size and chunk count are the catalog's (as
 * mf_engine_fsck compares them). A shard that fails any of it is expired
 * (as mf_engine_report_corrupt). Calls report, if not
 * NULL, per shard with its index and 0, -EBADMSG or -errno. Returns 0 when
 * every shard is sound, -EBADMSG when any was not.
 */
int mf_engine_verify(struct mf_engine *e, const char *fp,
		     void (*report)(void *arg, uint32_t shard, int rc),
		     void *arg);

/*
 * Opens a catalog connection of this engine's store for the caller's own
 * queries (one thread at a time); close it with mf_catalog_close. A new
 * catalog is indexed first, as in mf_engine_open. A caller that keeps
 * connections should close one for which mf_catalog_moved answers true
 * (its file was deleted or replaced) and open another: the engine does so
 * with its own.
 */
int mf_engine_catalog_open(struct mf_engine *e, struct mf_catalog **out);

/* ---- what the catalog says, for the front ends (the FUSE layer, matctl) ----
 *
 * Each call takes a connection from the engine's pool for its own query
 * (a catalog.db deleted or replaced meanwhile is noticed and the new one
 * indexed first, as in mf_engine_open). Records are copies: the caller
 * releases them (mf_engine_snapshot_release, mf_engine_shard_release, or the
 * _recs_free helpers for arrays). Thread-safe. Errors: -ENOENT where
 * said, -EBUSY (the catalog stayed locked past the busy timeout), -EIO,
 * -ENOMEM.
 */

/* Now, in unix seconds, by the clock the catalog's stamps are written by
 * (mf_catalog_now: the database server's on PostgreSQL), the one an
 * expiry policy compares created and last-read times with; this host's
 * when the catalog cannot be asked. */
int64_t mf_engine_now(struct mf_engine *e);

/* Every snapshot the catalog knows, ordered by name then created. */
int mf_engine_list_snapshots(struct mf_engine *e,
			     struct mf_engine_snapshot **out, size_t *n);
void mf_engine_snapshot_recs_free(struct mf_engine_snapshot *v, size_t n);
/* The row of snapshot fp (with its shard counts); -ENOENT when none. */
int mf_engine_snapshot(struct mf_engine *e, const char *fp,
		       struct mf_engine_snapshot *out);
/* The shard rows of fp by index (a shard never claimed may have none);
 * -ENOENT when fp is no snapshot. */
int mf_engine_list_shards(struct mf_engine *e, const char *fp,
			  struct mf_engine_shard **out, size_t *n);
void mf_engine_shard_recs_free(struct mf_engine_shard *v, size_t n);
/*
 * The records of materialized shard `shard` of fp, from its file's
 * trailer (the count lives in the shard file, docs/format.md): its
 * framing (MF_FRAMING_NONE for a spec without records) and count.
 * Returns 0, -ENODATA when the shard is not materialized, or the errors
 * of the catalog and of reading the file (-EBADMSG).
 */
int mf_engine_shard_records(struct mf_engine *e, const char *fp, uint32_t shard,
			    struct mf_records *framing, uint64_t *count);
/*
 * The same for the whole snapshot: the sum over its shards, once every
 * shard is materialized (-ENODATA before).
 */
int mf_engine_snapshot_records(struct mf_engine *e, const char *fp,
			       struct mf_records *framing, uint64_t *count);

/* The row of shard `shard` of fp; -ENOENT when it has none (absent).
 * While the catalog cannot be reached, a shard this engine last saw
 * materialized answers as that row (no error texts), any other as absent
 * (-ENOENT). */
int mf_engine_shard_rec(struct mf_engine *e, const char *fp, uint32_t shard,
			struct mf_engine_shard *out);
/* The sizes of rec's shard when rec (a `running` row) is a computation
 * this engine sealed and serves while its commit is under way
 * (opts.serve_sealed): 0 with *st, else -ENOENT. */
int mf_engine_sealed_stat(struct mf_engine *e,
			  const struct mf_engine_shard *rec,
			  struct mf_engine_file *st);
/* The computation whose file an open of rec reads: rec's generation when
 * it is materialized, or running (the row of an open that this engine
 * serves from the sealed file while it commits it; for a row read
 * otherwise, mf_engine_sealed_stat says whether it is one); 0 when rec
 * is NULL, absent or failed. A front end names what an inode shows by
 * it, and never reads the state itself. */
uint64_t mf_engine_shard_file_gen(const struct mf_engine_shard *rec);
/* The run rows of fp, or of every snapshot when fp is NULL, with the
 * host each ran on; *out (caller frees) has *n entries. */
int mf_engine_list_runs(struct mf_engine *e, const char *fp,
			struct mf_run_rec **out, size_t *n);

/*
 * What this engine materialized since it was opened: materializations
 * started (stages about to run), failed (a failure recorded), running
 * now, and the seconds they took (stages and storing their output).
 * Atomic reads, no lock: callable from any thread at any rate.
 */
struct mf_engine_stats {
	uint64_t started, failed, running;
	double stage_seconds;
};
void mf_engine_stats(struct mf_engine *e, struct mf_engine_stats *out);
/* The catalog's totals over every process (mf_catalog_get_totals). */
int mf_engine_totals(struct mf_engine *e, struct mf_catalog_totals *out);

/*
 * The fingerprints a live engine holds (its registered specs, in any
 * process on the store, this one included): the holds of dead holders
 * are deleted first (as mf_engine_gc does), so every one listed was
 * alive a moment ago. *out (caller frees) has *n entries, possibly
 * repeated (one per holder).
 */
int mf_engine_list_held(struct mf_engine *e, char (**out)[MF_FP_HEX_LEN + 1],
			size_t *n);

/* Last-read times of shards opened by mf_engine_open_materialized are
 * kept to this many seconds. */
#define MF_ENGINE_TOUCH_EVERY_S 60

/*
 * The open of a materialized shard without a claim and without waiting,
 * for a front end that must not block (a FUSE thread): reads the shard's
 * row, and when it is materialized calls have(arg, row) (may be NULL),
 * which answers true when the caller already has a reader of that very
 * computation (the row's generation); else opens the file the row names.
 * Then the shard's last read is set to now, unless the row's is less than
 * MF_ENGINE_TOUCH_EVERY_S old. The row is read before the file, so the
 * file is never older than the row (at worst newer: a later computation
 * committed in between). With serve_sealed, a running row whose file
 * this engine sealed and is committing counts as materialized (as
 * mf_engine_open_shard_rec returns it; no last-read time is set).
 *
 * Returns 0 with *rec (release it) and *out: a reader the caller closes,
 * or NULL when have() answered true. -EAGAIN, with nothing written, when
 * the shard needs mf_engine_open_shard: it has no row, is not
 * materialized, or its file does not open (gone, corrupt: this function
 * changes nothing; mf_engine_open_shard sorts it out). Another -errno:
 * the catalog failed. Thread-safe; never computes, never waits for a
 * claim.
 */
int mf_engine_open_materialized(
    struct mf_engine *e, const char *fp, uint32_t shard,
    bool (*have)(void *arg, const struct mf_engine_shard *rec), void *arg,
    struct mf_shard_reader **out, struct mf_engine_shard *rec);

/* ---- the expiry policy (engine_expiry.c) ----
 *
 * The one rule for every process that expires by policy (the daemon's
 * expiry thread, `matctl expire`), as DESIGN.md's "Expiry and eviction":
 *   - expire_after: a snapshot whose last use (its last read, else its
 *     creation) is at least that old; a registered one only while it
 *     still holds data (materialized shards), as its row stays anyway;
 *   - keep N: beyond the N most recently used fingerprints of its name,
 *     never a registered one. A registered fingerprint counts as more
 *     recent than any other (it is the name's present), then the later
 *     last use, the later created, the larger fingerprint (created has
 *     one-second resolution: a spec edited within the second it was
 *     registered still expires its old fingerprint);
 *   - max_size: while the stored bytes of what the two rules above left
 *     exceed it, the least recently used snapshot holding data (the
 *     first listed among equals), skipping any in use.
 */
enum mf_expiry_why {
	MF_EXPIRY_AFTER = 1, /* expire_after (or the caller's older_than) */
	MF_EXPIRY_KEEP, /* keep */
	MF_EXPIRY_MAX_SIZE, /* max_size */
};
/* "expire_after", "keep", "max_size" */
const char *mf_expiry_why_name(enum mf_expiry_why why);

/* What the caller knows; the predicates may be NULL (never true). */
struct mf_expiry_policy {
	int64_t now; /* unix seconds */
	/* >= 0: this age instead of every snapshot's own expire_after
	 * (matctl expire --older-than); -1: each its own */
	int64_t older_than;
	uint64_t max_size; /* stored bytes; 0: no limit */
	/* true when a spec registered here (or, for matctl, held by a live
	 * daemon) yields fp; asked lazily and at most once per snapshot, so
	 * a pass with nothing due asks nothing. Unsure: answer true. */
	bool (*registered)(void *arg, const char *fp);
	/* true when fp is in use (a shard open or being computed); asked
	 * only of max_size candidates, in eviction order. Unsure: true. */
	bool (*in_use)(void *arg, const char *fp);
	/* true when a shard of fp (one keep retains), not materialized, may
	 * be stored from from's data (mf_engine_feeds); asked only of keep's
	 * candidates, which then stay until fp is whole. NULL: never. */
	bool (*feeds)(void *arg, const char *fp, const char *from);
	void *arg;
};

/* One snapshot due: v[index] of the listing, and why. */
struct mf_expiry_due {
	size_t index;
	enum mf_expiry_why why;
};

/*
 * Decides which snapshots of the listing v (as mf_engine_list_snapshots
 * gives it) are due under policy p, and why. Pure: it reads nothing but
 * v and the predicates, and changes nothing (the caller expires each with
 * mf_engine_expire_snapshot). *out (caller frees; NULL when *n is 0)
 * lists them in the order to expire them: the expire_after and keep ones
 * in listing order, then the max_size ones in eviction order. Returns 0
 * or -ENOMEM. Thread-safe.
 */
int mf_engine_expiry_due(const struct mf_engine_snapshot *v, size_t n,
			 const struct mf_expiry_policy *p,
			 struct mf_expiry_due **out, size_t *n_out);

/* ---- the registry, for a daemon that follows a pipelines folder ---- */

/* A spec this engine has registered (mf_engine_list_specs). */
struct mf_engine_spec_info {
	char fp[MF_FP_HEX_LEN + 1];
	char name[MF_ENGINE_NAME_MAX + 1];
	char *path; /* absolute path of the spec file; owned */
	char *suffix; /* "" when none; owned */
	uint32_t shards;
};

/*
 * Lists the registered specs: every fingerprint registered for each spec
 * file and not unregistered since (newest first), so a caller registering
 * a file again while it shows the file's previous fingerprint still finds
 * that one. Caller frees with mf_engine_spec_info_free. Returns 0 or
 * -ENOMEM.
 */
int mf_engine_list_specs(struct mf_engine *e, struct mf_engine_spec_info **out,
			 size_t *n);
void mf_engine_spec_info_free(struct mf_engine_spec_info *v, size_t n);

/*
 * The owner (*uid) and file (*path, caller frees) of the spec this engine
 * knows for fp: registered, or reloaded from the catalog to compute it.
 * Returns 0, -ENOENT when it knows none (a fingerprint only the catalog
 * knows), or -ENOMEM.
 */
/* The `records` of the spec this engine knows for fp (framing
 * MF_FRAMING_NONE without), before any shard is computed. Returns 0 or
 * -ENOENT as mf_engine_spec_owner. */
int mf_engine_spec_records(struct mf_engine *e, const char *fp,
			   struct mf_records *out);

int mf_engine_spec_owner(struct mf_engine *e, const char *fp, uid_t *uid,
			 char **path);

/*
 * Whether process pid belongs to a computation this engine runs now: its
 * session, or a parent's up to 64 levels (read from /proc), is one of a
 * running job's (a stage, the feeder, or a child of one, also one that
 * left the session with setsid). The FUSE layer refuses such a process an
 * open that would wait for a computation (a stage reading the mount would
 * hold a worker while the shard it waits for needs one). False when pid
 * is gone or /proc cannot tell.
 */
bool mf_engine_runs_process(struct mf_engine *e, pid_t pid);

/*
 * Whether snapshot fp can still be computed: registered here, or its spec
 * file (as the catalog names it) loads and still gives fp. 0; -ESTALE with
 * *why (caller frees) when its spec, deps or inputs changed or it no longer
 * loads: then the shards the store holds are its only copy. -ENOENT for no
 * such snapshot, -errno. Reads only (loads and fingerprints the spec).
 */
int mf_engine_computable(struct mf_engine *e, const char *fp, char **why);

/* Shard `shard` of fp holds the same data (the same shard fingerprint)
 * as shard their_shard of snapshot `fp` here. */
struct mf_engine_holder {
	uint32_t shard, their_shard;
	char fp[MF_FP_HEX_LEN + 1];
};
/*
 * The other snapshots' shards that hold the same data as fp's, as the
 * store's hints name them (the latest MF_STORE_HOLDERS commits of each
 * shard fingerprint) and the catalog confirms them materialized: *out
 * (caller frees), *n of them, by shard. Loads fp's spec and computes its
 * fingerprint (reads its deps and inputs): -ESTALE when the spec no
 * longer gives fp, -ENOENT for no such snapshot, -errno.
 */
int mf_engine_shared_with(struct mf_engine *e, const char *fp,
			  struct mf_engine_holder **out, size_t *n);

/*
 * True when a shard of fp that is not materialized has the shard
 * fingerprint of a materialized shard of snapshot `from` that reuse would
 * take (same owner, same folder): computing it would store from's data.
 * Uses fp's registered spec, or loads it once (then cached). Any error,
 * or a spec that no longer yields fp: false.
 */
bool mf_engine_feeds(struct mf_engine *e, const char *fp, const char *from);

/*
 * Forgets the registrations of the spec file spec_path (as the spec's
 * path, absolute), except its most recent one when that has fingerprint
 * keep_fp (NULL: forget them all): a spec file that was removed or now
 * yields another fingerprint. A fingerprint no longer registered is
 * computed only if its catalog spec_path still yields it, and
 * mf_engine_expire_snapshot then removes it from the catalog.
 * A registration whose fingerprint has an open in flight is kept and
 * -EBUSY returned: call again later. Returns 0 or -EBUSY.
 */
int mf_engine_unregister(struct mf_engine *e, const char *spec_path,
			 const char *keep_fp);

/* ==== fsck and catalog rebuild (engine_fsck.c, engine_rebuild.c) ==== */

/*
 * Both work on a store whose catalog may be missing or broken, so they take
 * the store's options rather than an open engine; run them with no daemon
 * (and no other matctl) using the store. Neither prints: what they find
 * goes to the caller's callback, one call per item, in store order.
 */

/* What mf_engine_fsck reports. */
enum mf_fsck_kind {
	MF_FSCK_CATALOG = 0, /* catalog.db missing, empty, not a database,
				or failing PRAGMA integrity_check */
	MF_FSCK_MISSING, /* materialized in the catalog, no file */
	MF_FSCK_SIZE, /* file size or trailer raw size (or chunk count)
			 differs from the catalog's row */
	MF_FSCK_CORRUPT, /* file does not open: bad header, trailer or index */
	MF_FSCK_ORPHAN_FILE, /* committed shard file no catalog row points at */
	MF_FSCK_ORPHAN_TMP, /* .tmp file left by a dead run */
	MF_FSCK_ORPHAN_RUN, /* folder of a dead run that holds no shard */
	MF_FSCK_ORPHAN_SNAPSHOT, /* fingerprint folder unknown to the catalog */
	MF_FSCK_NO_FOLDER, /* catalog snapshot without its folder */
	MF_FSCK_NO_METADATA, /* catalog snapshot without its metadata file */
	MF_FSCK_STRAY, /* a name in snapshots/ that matfs never writes */
};
/* "catalog", "missing", "size", "corrupt", "orphan-file", "orphan-tmp",
 * "orphan-run", "orphan-snapshot", "no-folder", "no-metadata", "stray" */
const char *mf_fsck_kind_name(enum mf_fsck_kind k);

/* One problem; every pointer is borrowed for the callback's duration. */
struct mf_fsck_problem {
	enum mf_fsck_kind kind;
	const char *fp; /* "" when none */
	int64_t shard; /* -1 when none */
	const char *run; /* "" when none */
	const char *path; /* relative to the store folder; "" when none */
	const char *detail; /* one line, for people */
};
typedef void (*mf_fsck_fn)(void *arg, const struct mf_fsck_problem *p);

/*
 * Checks the store opts->store_dir against its catalog and calls report
 * (may be NULL) once per problem; *problems (may be NULL) receives the
 * count. Changes nothing: it creates neither the store nor the catalog,
 * and never touches a store file (mf_engine_gc and mf_engine_verify
 * repair). A catalog that is missing or unreadable is one problem, after
 * which nothing else is checked. A run is dead as mf_catalog_claim_shard
 * judges it (mf_catalog_run_alive): no row, a state other than "active",
 * a pid gone in this pid namespace of this host and boot, or elsewhere a
 * heartbeat older than pending_expiry.
 * Returns 0 (whatever was found), or -errno with *err (caller frees) when
 * the check could not run: -ENOENT (no store), -EPROTO (catalog of a
 * newer matfs), -EBUSY, -ENOMEM, -EIO.
 */
int mf_engine_fsck(const struct mf_engine_opts *opts, mf_fsck_fn report,
		   void *arg, uint32_t *problems, char **err);

enum mf_rebuild_kind {
	MF_REBUILD_SNAPSHOT = 0, /* a snapshot row re-created */
	MF_REBUILD_SKIPPED, /* a folder or file not recovered: detail says
			       why */
};

struct mf_rebuild_item {
	enum mf_rebuild_kind kind;
	const char *fp; /* "" when none */
	const char *name; /* the snapshot's name; "" when unknown */
	int64_t shard; /* -1 when none */
	const char *run; /* "" when none */
	const char *path; /* relative to the store folder; "" when none */
	const char *detail; /* SKIPPED: why; SNAPSHOT: "" */
	uint32_t shards; /* SNAPSHOT: its shard count */
	uint32_t materialized; /* SNAPSHOT: shards recovered */
	uint32_t runs; /* SNAPSHOT: runs they came from */
};
typedef void (*mf_rebuild_fn)(void *arg, const struct mf_rebuild_item *it);

struct mf_rebuild_stats {
	/* where the old catalog.db went, relative to the store
	   ("catalog.db.corrupt-1700000000"); "" when there was none */
	char old_catalog[64];
	uint32_t snapshots, shards, runs, skipped;
};

/*
 * Rebuilds the catalog of the store opts->store_dir from the store's own
 * files. The old catalog.db (with its -wal and -shm) is renamed to
 * catalog.db.corrupt-UNIXTIME[-N] beside it, never deleted, and a fresh
 * catalog is made. Every fingerprint folder whose metadata file reads
 * and names that folder's fingerprint gets its snapshot row back (name,
 * shards, spec_path, compression, suffix, chunk_size, expire_after,
 * pending_expiry, keep; created = the metadata file's mtime). Every
 * committed shard file that mf_shard_reader_open accepts is then recorded
 * materialized under its run, with the sizes from its trailer and, as its
 * last read, the file's atime as found (the latest one for the snapshot);
 * when several runs hold one shard, the newest file (mtime) wins and the
 * others are left as orphans for gc. Each run that holds a recovered
 * shard gets a row with state "done", this host, pid 0 and started /
 * heartbeat = the oldest / newest mtime of its files: it is dead, so gc
 * may remove its folder once no shard uses it. Shard errors and attempts
 * are not in the store and start afresh (attempts at 1).
 * report (may be NULL) gets each snapshot recovered and each thing
 * skipped; *stats (may be NULL) is written on success. Returns 0 or
 * -errno with *err (caller frees): -ENOENT (no store), -EIO, -ENOMEM,
 * -EBUSY; on failure after the old catalog was moved, the new one may be
 * partial: run it again.
 */
int mf_engine_rebuild(const struct mf_engine_opts *opts, mf_rebuild_fn report,
		      void *arg, struct mf_rebuild_stats *stats, char **err);

/* ==== end of fsck and catalog rebuild ==== */

/*
 * Batches (docs/format.md, "Batch order"; engine_batches.c): a view of
 * fp's batch order for a seed (or seed-none) and an epoch, batches of
 * `batch` records, rank `rank` of `world` resuming after `from` global
 * batches (the global batches: world 1, rank 0, from 0).
 */
/* The version of the batch order served (order/'s MF_ORDER_VERSION, which
 * engine_batches.c checks it against): user.matfs.order. */
#define MF_ENGINE_ORDER_VERSION 1
struct mf_engine_batch_view {
	bool shuffled; /* false: seed-none */
	uint64_t seed, epoch;
	uint64_t batch, world, rank, from;
};
struct mf_engine_batch_run {
	uint64_t shard, record, count; /* records [record, record + count) */
};
struct mf_engine_batches_info {
	unsigned order; /* the order's version (user.matfs.order) */
	uint64_t batches; /* batches of the view listed */
	bool complete; /* every shard's count known: all of them */
	uint64_t shards, shards_known; /* the prefix of the shard order known */
	uint64_t window; /* shuffle_window */
};
/* Called for the view's k-th batch, global batch g, with its records as
 * runs, in pieces of at most MF_ENGINE_BATCH_RUNS runs (borrowed for the
 * call; `first` on a batch's first piece, `last` on its last), so that a
 * batch of any size costs bounded memory. Runs are maximal, across pieces
 * too: no run continues the one before it in its shard. A non-zero
 * return stops the listing and is returned. */
#define MF_ENGINE_BATCH_RUNS 4096
typedef int (*mf_engine_batch_fn)(void *arg, uint64_t k, uint64_t g,
				  const struct mf_engine_batch_run *runs,
				  size_t n, bool first, bool last);
/*
 * Lists the batches of the view whose records are known from fp's
 * materialized shards (it computes nothing: a prefix while shards are
 * missing, in whole rounds), calling fn for each in order, and fills
 * *info. Returns 0, fn's non-zero value, -EINVAL for a bad view (docs:
 * the limits of order/), -ENOENT when fp is no snapshot, -ENOTSUP when
 * its spec has no records, -ESTALE when its spec no longer gives fp,
 * -EOVERFLOW past the order's limits, the errors of the catalog and of
 * reading shard files; *err (caller frees, may be NULL) says why.
 */
int mf_engine_batches(struct mf_engine *e, const char *fp,
		      const struct mf_engine_batch_view *v,
		      mf_engine_batch_fn fn, void *arg,
		      struct mf_engine_batches_info *info, char **err);

/* The framing of fp's records (its spec's `records`): 0, -ENOTSUP when
 * it has none (no batch tree), -ENOENT, -ESTALE as mf_engine_batches. */
int mf_engine_batch_framing(struct mf_engine *e, const char *fp,
			    struct mf_records *out, char **err);

/*
 * One batch of a view (engine_batches.c), for the batch tree: its k-th
 * batch is global batch `global`, of `size` bytes: the batch file's, in
 * its framing (docs/format.md, "Batch files"; B x size for fixed records).
 */
struct mf_engine_batch_place {
	uint64_t global, size;
	unsigned order; /* the order's version (user.matfs.order) */
};
/*
 * Where the view's k-th batch is, computing nothing (stat, lookup): 0,
 * -ENOENT when the epoch has none (its round is not whole, or k is past
 * the end), -EAGAIN when the shards materialized so far do not say yet,
 * and the errors of mf_engine_batches. Fixed records need no shard file;
 * the other framings' sizes come from the records sections of the shard
 * files the batch's records are in (opened, never computed: -EAGAIN when
 * one is not materialized, or its file went meanwhile): a catalog row
 * per shard of the batch, and a file open and records-section read per
 * shard the engine has not kept a reader of (it keeps 64, of 2^21 record
 * places in all, across calls); -EFBIG as mf_engine_batch_plan.
 * Thread-safe; sizes of non-fixed batches are read one at a time.
 */
int mf_engine_batch_find(struct mf_engine *e, const char *fp,
			 const struct mf_engine_batch_view *v, uint64_t k,
			 struct mf_engine_batch_place *out, char **err);
/* The view's batches whose place is known, computing nothing (readdir):
 * 0 and *count (whole rounds, the same for every rank), *complete when
 * that is all of them; the errors of mf_engine_batches. */
int mf_engine_batch_count(struct mf_engine *e, const char *fp,
			  const struct mf_engine_batch_view *v, uint64_t *count,
			  bool *complete, char **err);

/*
 * The shards the order of v needs next to place the view's k-th batch,
 * computing nothing: at most cap of them, in the order a cold epoch needs
 * them (none when the batch is placed or known absent), so that a front
 * end can have them computed in parallel before it opens the batch. 0 and
 * *n, or the errors of mf_engine_batches.
 */
int mf_engine_batch_wanted(struct mf_engine *e, const char *fp,
			   const struct mf_engine_batch_view *v, uint64_t k,
			   uint32_t *shards, size_t cap, size_t *n, char **err);

/*
 * A batch's plan: its bytes as segments, each bytes [off, off + len) of
 * a shard's output (the shard file's uncompressed bytes) or, when lit is
 * set, of lit (framing bytes of the batch's own, static).
 */
struct mf_engine_batch_seg {
	uint32_t shard;
	uint64_t off, len;
	const uint8_t *lit;
};
struct mf_engine_batch_plan {
	uint64_t global; /* its global batch */
	uint64_t size; /* the sum of the segments' lengths */
	size_t nsegs;
	struct mf_engine_batch_seg *segs; /* mf_engine_batch_plan_release */
};
/* Gives the planner a reader of shard `shard` of the plan's snapshot,
 * computing it (mf_engine_open_shard) when it is not materialized. The
 * reader is the supplier's, and must stay open until the plan is made:
 * the planner reads record places (and, for lines, the last byte of a
 * shard's last record) through it. 0 or -errno (*err may say
 * why). */
typedef int (*mf_engine_batch_shard_fn)(void *arg, uint32_t shard,
					struct mf_shard_reader **r, char **err);
/* A batch holds at most this many records (one shard run each at
 * worst): larger ones are -EFBIG. */
#define MF_ENGINE_BATCH_MAX_RUNS (1u << 20)
/*
 * Plans the view's k-th batch: has get compute the shards the order
 * needs to place it, one at a time in the order's shard order, then
 * those its records are in, and no others. Each shard opened is checked
 * against the counts the order holds for it. Every framing is planned
 * (docs/format.md, "Batch files"): each run of consecutive records of a
 * shard is one segment; a lines run that ends with its shard's last line
 * is followed by a literal "\n" when that line has none (one byte read
 * through the reader, only for such a run); a tar batch ends with its two
 * zero end blocks, a literal. Returns 0 with *out (release it), -ENOENT
 * (no such batch), -EFBIG, -ESTALE (a shard was computed anew with other
 * records: ask again), -EBADMSG (a corrupt records section), get's errors
 * and those of mf_engine_batches. Many threads may plan at once; the
 * engine keeps the last orders used.
 */
int mf_engine_batch_plan(struct mf_engine *e, const char *fp,
			 const struct mf_engine_batch_view *v, uint64_t k,
			 mf_engine_batch_shard_fn get, void *arg,
			 struct mf_engine_batch_plan *out, char **err);
void mf_engine_batch_plan_release(struct mf_engine_batch_plan *p);
/*
 * The record ends of the view's k-th batch (user.matfs.record_ends of a
 * `records: index` batch; any framing's): planned as mf_engine_batch_plan
 * plans it, with get as there, *n = v->batch offsets in *ends (caller
 * frees), record i being bytes [ends[i-1], ends[i]) of the batch file
 * (ends[-1] = 0), so ends[n-1] is its size (for tar, that less the end
 * blocks; a lines record includes the "\n" the batch adds). Costs one
 * record-place lookup per record (B up to MF_ENGINE_BATCH_MAX_RUNS: 8
 * MiB at most). Returns 0 or the errors of mf_engine_batch_plan.
 */
int mf_engine_batch_record_ends(struct mf_engine *e, const char *fp,
				const struct mf_engine_batch_view *v,
				uint64_t k, mf_engine_batch_shard_fn get,
				void *arg, uint64_t **ends, size_t *n,
				char **err);

/*
 * The window of v's order holding place of the epoch's sequence: *w, its
 * first place, its records and its group's shards; and, when out is set,
 * its records as segments of shard bytes, one per shard of its group
 * with records in it (in the order's position order, its records before
 * they are permuted), planned over the readers get gives as
 * mf_engine_batch_plan plans (a tar plan ends with its end blocks;
 * out->global is UINT64_MAX). Every batch of a window draws on all of
 * it: a front end reading an epoch in order has the next window's chunks
 * read while this one's are served. 0, -EAGAIN when place is past the
 * order's known prefix, -ERANGE past the epoch, or the errors of
 * mf_engine_batch_plan.
 */
struct mf_engine_batch_window {
	uint64_t first, count, shards;
};
int mf_engine_batch_window(struct mf_engine *e, const char *fp,
			   const struct mf_engine_batch_view *v, uint64_t place,
			   mf_engine_batch_shard_fn get, void *arg,
			   struct mf_engine_batch_window *w,
			   struct mf_engine_batch_plan *out, char **err);

/* A reader of one batch's bytes of its own: mf_engine_batch_plan over
 * readers it opens with mf_engine_open_shard (matctl, tests). */
struct mf_engine_batch;
/* Opens the view's k-th batch: 0 or the errors of mf_engine_batch_plan.
 * Close with mf_engine_batch_close. */
int mf_engine_batch_open(struct mf_engine *e, const char *fp,
			 const struct mf_engine_batch_view *v, uint64_t k,
			 struct mf_engine_batch **out, char **err);
uint64_t mf_engine_batch_size(const struct mf_engine_batch *b);
/* Reads up to len bytes at off: their count (short only at the end),
 * -EBADMSG (corrupt) or -errno. Many threads may read one batch. */
ssize_t mf_engine_batch_pread(struct mf_engine_batch *b, void *buf, size_t len,
			      uint64_t off);
/* NULL does nothing. */
void mf_engine_batch_close(struct mf_engine_batch *b);

#endif
