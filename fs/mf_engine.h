/*
 * mf_engine.h - the materialization engine: given a snapshot's fingerprint
 * (or a spec) and a shard index, hand back a reader over the materialized
 * shard, computing it first - once, however many threads and processes ask
 * - when it is not there yet. Both the matfs daemon and matctl are thin
 * layers over this.
 *
 * It ties the other modules together: pipeline/ (specs, fingerprints,
 * stages), catalog/ (who owns which shard) and snapshot/ (the chunk store).
 * It never includes a FUSE header and never prints.
 *
 * Single flight: inside one process, concurrent callers for one shard share
 * one attempt (and its result, success or error). Across processes on the
 * host the catalog's claim decides; a process that loses waits, polling the
 * catalog, until the owner commits or dies, and then reads or takes over.
 *
 * Thread-safety: every function may be called from any thread at once,
 * except mf_engine_close, which must be called once nothing else runs.
 */
#ifndef MF_ENGINE_H
#define MF_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "mf_catalog.h"
#include "mf_pipeline.h"
#include "mf_snapshot.h"

#define MF_CATALOG_FILE "catalog.db"

/* Called from the materializing thread after each chunk is handed to the
 * store, and once more with done = true. Must not block. */
typedef void (*mf_progress_fn)(void *arg, const char *fp, uint32_t shard,
			       uint64_t bytes, bool done);

struct mf_engine_opts {
	const char *store_dir; /* required; created if missing */
	int busy_timeout_ms; /* catalog busy timeout; <= 0: 10 s */
	unsigned compress_threads; /* per materialization; 0: 2 */
	unsigned heartbeat_s; /* run heartbeat period; 0: 5 s */
	mf_progress_fn progress; /* may be NULL */
	void *progress_arg;
};

struct mf_engine;

/* Opens the store and its catalog. Returns 0 or -errno, with *err (caller
 * frees) saying what failed ("store '/x': Permission denied"). */
int mf_engine_open(const struct mf_engine_opts *opts, struct mf_engine **out,
		   char **err);
void mf_engine_close(struct mf_engine *e);

/* Borrowed for the life of e; thread-safe handle. */
struct mf_store *mf_engine_store(struct mf_engine *e);

/*
 * Loads the spec at path, computes its fingerprint, records the snapshot
 * in the catalog, writes its snapshot.metadata and keeps the spec in
 * memory for materialization. fp receives the fingerprint. Returns 0 or
 * -errno with *err ("FILE:LINE:COL: ..." for a bad spec).
 */
int mf_engine_register(struct mf_engine *e, const char *spec_path,
		       char fp[MF_FP_HEX_LEN + 1], char **err);

/*
 * Turns what a user typed into a fingerprint: a path to a spec file
 * (registered on the way), 64 hex digits known to the catalog, or a
 * pipeline name (its most recently registered fingerprint). -ENOENT with
 * *err when nothing matches.
 */
int mf_engine_resolve(struct mf_engine *e, const char *what,
		      char fp[MF_FP_HEX_LEN + 1], char **err);

/*
 * Returns a reader over shard `shard` of snapshot fp, materializing it
 * first if needed (blocks meanwhile). The caller closes the reader with
 * mf_shard_reader_close. Errors: -ENOENT (unknown snapshot or shard index
 * out of range), -EIO (a stage failed, or the store failed while writing:
 * *err says which and the catalog keeps it), -ESTALE (the spec's inputs or
 * deps changed, so this fingerprint can no longer be computed), -EBADMSG
 * never: a corrupt shard is recomputed.
 */
int mf_engine_open_shard(struct mf_engine *e, const char *fp, uint32_t shard,
			 struct mf_shard_reader **out, char **err);

/*
 * Tells the engine that a read from a reader it returned found corrupt
 * data: the shard goes back to absent (if still held by that run) and its
 * file is removed, so the next open recomputes it.
 */
int mf_engine_report_corrupt(struct mf_engine *e, const char *fp,
			     uint32_t shard);

/* Expires one shard / a whole snapshot: catalog rows back to absent (the
 * snapshot row stays while its spec is registered in this engine, else it
 * is deleted) and the files removed. Open readers keep reading. */
int mf_engine_expire_shard(struct mf_engine *e, const char *fp, uint32_t shard);
int mf_engine_expire_snapshot(struct mf_engine *e, const char *fp);

struct mf_gc_stats {
	uint32_t snapshots_removed; /* folders with no catalog entry */
	uint32_t runs_removed; /* run folders of dead runs no shard uses */
	uint32_t files_removed; /* shard files no catalog row points at */
};
/* Reclaims store space that nothing in the catalog refers to. */
int mf_engine_gc(struct mf_engine *e, struct mf_gc_stats *stats);

/*
 * Checks every checksum of every materialized shard of fp. A shard with a
 * bad chunk is expired (as mf_engine_report_corrupt). Calls report, if not
 * NULL, per shard with its index and 0, -EBADMSG or -errno. Returns 0 when
 * every shard is sound, -EBADMSG when any was not.
 */
int mf_engine_verify(struct mf_engine *e, const char *fp,
		     void (*report)(void *arg, uint32_t shard, int rc),
		     void *arg);

/* Opens a catalog connection of this engine's store for the caller's own
 * queries (one thread at a time); close it with mf_catalog_close. */
int mf_engine_catalog_open(struct mf_engine *e, struct mf_catalog **out);

/* ---- the registry, for a daemon that follows a pipelines folder ---- */

/* A spec this engine has registered (mf_engine_list_specs). */
struct mf_engine_spec_info {
	char fp[MF_FP_HEX_LEN + 1];
	char name[MF_NAME_MAX + 1];
	char *path; /* absolute path of the spec file; owned */
	char *suffix; /* "" when none; owned */
	uint32_t shards;
};

/*
 * Lists the registered specs, one per spec file: its most recent
 * registration. Specs reloaded from the catalog to compute a fingerprint
 * nobody registered in this process are listed too. Caller frees with
 * mf_engine_spec_info_free. Returns 0 or -ENOMEM.
 */
int mf_engine_list_specs(struct mf_engine *e, struct mf_engine_spec_info **out,
			 size_t *n);
void mf_engine_spec_info_free(struct mf_engine_spec_info *v, size_t n);

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

#endif
