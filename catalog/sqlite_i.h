/*
 * sqlite_i.h - private to the SQLite backend of the catalog: its
 * connection, the cache of prepared statements, transactions, the one
 * SQLite error translation, the row reader and column helpers shared by
 * sqlite_db.c, sqlite_snap.c, sqlite_run.c, sqlite_hold.c, sqlite_shard.c,
 * sqlite_totals.c and sqlite_check.c, and the operations each of them provides to the
 * backend table (catalog_backend.h says what each must do).
 *
 * Not for: anything outside catalog/, nor catalog.c; the contract is
 * mf_catalog.h and catalog_backend.h.
 */
#ifndef MF_SQLITE_I_H
#define MF_SQLITE_I_H

#include <sqlite3.h>

#include "catalog_backend.h"

/* Every statement the catalog runs after open, prepared once per handle. */
enum cat_stmt_id {
	CAT_BEGIN,
	CAT_COMMIT,
	CAT_ROLLBACK,
	CAT_SNAP_UPSERT,
	CAT_SNAP_TRIM_SHARDS,
	CAT_SNAP_ADD_SHARDS,
	CAT_SNAP_GET,
	CAT_SNAP_LIST,
	CAT_SNAP_FIND_NAME,
	CAT_SNAP_BUSY,
	CAT_SNAP_DEL_SHARDS,
	CAT_SNAP_DEL_RUNS,
	CAT_SNAP_DEL,
	CAT_SNAP_PENDING_EXPIRY,
	CAT_SNAP_TOUCH,
	CAT_RUN_ADD,
	CAT_RUN_ENSURE,
	CAT_RUN_GET,
	CAT_RUN_LIST,
	CAT_RUN_HEARTBEAT,
	CAT_RUN_SET_STATE,
	CAT_RUN_DEL,
	CAT_HOLD_PUT,
	CAT_HOLD_RELEASE,
	CAT_HOLD_LIST,
	CAT_HOLD_HEARTBEAT,
	CAT_HOLD_DEL,
	CAT_HOLD_DEL_SNAP,
	CAT_SHARD_GET,
	CAT_SHARD_LIST,
	CAT_SHARD_EXISTS,
	CAT_SHARD_TAKE,
	CAT_SHARD_COMPLETE,
	CAT_SHARD_FAIL,
	CAT_SHARD_RESET,
	CAT_SHARD_RESET_RUN,
	CAT_SHARD_ABANDON,
	CAT_SHARD_EXPIRE,
	CAT_SHARD_TOUCH,
	CAT_TOTALS_ADD,
	CAT_TOTALS_GET,
	CAT_TOTALS_RUNNING,
	CAT_STMT_COUNT
};

/* One SQLite connection. Used by one thread at a time (mf_catalog.h).
 * The handle comes first: the operations receive &base and convert it
 * back with cat_db. */
struct cat_db {
	struct mf_catalog base;
	sqlite3 *db;
	sqlite3_stmt
	    *stmt[CAT_STMT_COUNT]; /* lazily prepared, NULL until then */
};

/* The one place SQLite result codes become negative errnos. rc is a primary
 * or extended SQLite code that is not SQLITE_OK, SQLITE_ROW or SQLITE_DONE;
 * db (may be NULL) tells why a file could not be opened. */
int cat_errno(sqlite3 *db, int rc);

/* The cached statement id with text sql, reset and unbound, in *out.
 * Give it back with cat_stmt_put whatever happens. */
int cat_stmt(struct mf_catalog *c, enum cat_stmt_id id, const char *sql,
	     sqlite3_stmt **out);
/* Resets st and clears its bindings; NULL does nothing. */
void cat_stmt_put(sqlite3_stmt *st);

/* Steps a statement that returns no row; 0 or -errno. */
int cat_step_done(struct mf_catalog *c, sqlite3_stmt *st);
/* Steps once: 1 when a row came, 0 at the end, or -errno. */
int cat_step_row(struct mf_catalog *c, sqlite3_stmt *st);
/* Rows changed by the last INSERT, UPDATE or DELETE of this handle. */
int cat_changes(struct mf_catalog *c);

/* BEGIN IMMEDIATE, waiting up to the busy timeout: 0, -EBUSY, -errno.
 * Inside mf_catalog_begin, a savepoint instead: cat_commit releases it and
 * cat_rollback undoes only what came after it. */
int cat_begin(struct mf_catalog *c);
/* COMMIT; on failure the transaction is rolled back and -errno returned. */
int cat_commit(struct mf_catalog *c);
/* ROLLBACK if a transaction is open; never fails from the caller's view. */
void cat_rollback(struct mf_catalog *c);

/* Copies text column i into buf (size bytes, NUL-terminated); NULL reads
 * as "". MF_CORRUPT(why) when it does not fit: why names the field
 * ("fp length"), a string literal. */
int cat_col_copy(sqlite3_stmt *st, int i, char *buf, size_t size,
		 const char *why);
/* A malloc'd copy of text column i in *out, NULL for SQL NULL. 0 or
 * -ENOMEM. */
int cat_col_dup(sqlite3_stmt *st, int i, char **out);

/* Binds s as text (static lifetime for the step), NULL as SQL NULL. */
int cat_bind_text(struct mf_catalog *c, sqlite3_stmt *st, int i, const char *s);
int cat_bind_int64(struct mf_catalog *c, sqlite3_stmt *st, int i, int64_t v);

/*
 * The one row collector: steps st (bound, owned by the caller) to its end,
 * reading each row with from_row into a malloc'd array of size-byte
 * elements. On success *out (caller frees; NULL when no row) and *n; on
 * failure the rows read so far are released with release (may be NULL)
 * and the array freed.
 */
typedef int (*cat_row_fn)(sqlite3_stmt *st, void *elem);
typedef void (*cat_release_fn)(void *elem);
int cat_collect(struct mf_catalog *c, sqlite3_stmt *st, size_t size,
		cat_row_fn from_row, cat_release_fn release, void **out,
		size_t *n);
/* The one row statement id (sql, ?1 = key) returns, read with from_row
 * into out (written only on success); -ENOENT when there is none. */
int cat_read_one(struct mf_catalog *c, enum cat_stmt_id id, const char *sql,
		 const char *key, cat_row_fn from_row, void *out);

/* Reads a row of CAT_SHARD_COLS starting at column 0 into *out. */
#define CAT_SHARD_COLS                                                         \
	"fp, idx, state, run_id, raw_bytes, stored_bytes, chunks, "            \
	"exit_status, error, stderr_tail, last_read, attempts, generation"
int cat_shard_from_row(sqlite3_stmt *st, struct mf_shard_rec *out);

/* Finishes a write transaction: COMMIT when rc is 0, else ROLLBACK and rc. */
int cat_finish(struct mf_catalog *c, int rc);

/* Runs (sqlite_run.c), for use inside a caller's transaction. Inserts run
 * r as "active" unless a row with its id exists. */
int cat_run_ensure(struct mf_catalog *c, const struct mf_run_rec *r);
/* The row of run_id in *out (written only on success); -ENOENT. */
int cat_run_read(struct mf_catalog *c, const char *run_id,
		 struct mf_run_rec *out);
/* Binds a run's ten columns (RUN_COLS order) as ?1..?10, and reads them
 * from a row of the same order into *out (written only on success). */
int cat_run_bind(struct mf_catalog *c, sqlite3_stmt *st,
		 const struct mf_run_rec *r);
int cat_run_from_row(sqlite3_stmt *st, struct mf_run_rec *out);
/* Every row statement id (sql, RUN_COLS order, ?1 an fp or NULL) returns,
 * into a malloc'd array: runs and holds. */
int cat_runs_select(struct mf_catalog *c, enum cat_stmt_id id, const char *sql,
		    const char *fp, struct mf_run_rec **out, size_t *n);
/* Holds (sqlite_hold.c) inside a caller's transaction: -ENOTEMPTY when a
 * live process holds fp, else the dead holds of fp are deleted. */
int cat_holds_check(struct mf_catalog *c, const char *fp);
/* The pending_expiry of snapshot fp; -ENOENT. */
int cat_pending_expiry(struct mf_catalog *c, const char *fp, int64_t *out);
/* Sets the state of run_id; -ENOENT when there is no such run. */
int cat_run_set_state(struct mf_catalog *c, const char *run_id,
		      const char *state);

/* Opening: schema version check and forward migrations (sqlite_schema.c).
 * cat_schema_version reads PRAGMA user_version. */
int cat_schema_version(sqlite3 *db, int *version);
int cat_migrate(sqlite3 *db);

/* The operations of the backend table, as catalog_backend.h describes
 * them; sqlite_db.c fills cat_sqlite_backend with them. */
int sq_open(const char *path, int busy_ms, struct mf_catalog **out);
void sq_close(struct mf_catalog *c);
int sq_check(const char *path, int busy_ms, mf_catalog_problem_fn report,
	     void *arg, bool *usable);
bool sq_moved(struct mf_catalog *c);
int sq_begin(struct mf_catalog *c);
int sq_end(struct mf_catalog *c, int rc);
int sq_indexed(struct mf_catalog *c, bool *out);
int sq_set_indexed(struct mf_catalog *c);
int sq_put_snapshot(struct mf_catalog *c, const struct mf_snapshot_rec *rec);
int sq_get_snapshot(struct mf_catalog *c, const char *fp,
		    struct mf_snapshot_rec *out);
int sq_find_name(struct mf_catalog *c, const char *name,
		 char fp[MF_FP_HEX_LEN + 1]);
int sq_list_snapshots(struct mf_catalog *c, struct mf_snapshot_rec **out,
		      size_t *n);
int sq_delete_snapshot(struct mf_catalog *c, const char *fp,
		       struct mf_run_rec **runs, size_t *nruns);
int sq_add_run(struct mf_catalog *c, const struct mf_run_rec *run);
int sq_get_run(struct mf_catalog *c, const char *run_id,
	       struct mf_run_rec *out);
int sq_list_runs(struct mf_catalog *c, const char *fp, struct mf_run_rec **out,
		 size_t *n);
int sq_heartbeat(struct mf_catalog *c, const char *run_id, int64_t now);
int sq_set_run_state(struct mf_catalog *c, const char *run_id,
		     const char *state);
int sq_delete_run(struct mf_catalog *c, const char *run_id);
int sq_hold(struct mf_catalog *c, const struct mf_run_rec *h);
int sq_release(struct mf_catalog *c, const char *holder, const char *fp);
int sq_list_holds(struct mf_catalog *c, const char *fp, struct mf_run_rec **out,
		  size_t *n);
int sq_heartbeat_holds(struct mf_catalog *c, const char *holder, int64_t now);
int sq_prune_holds(struct mf_catalog *c, int64_t now, size_t *pruned);
int sq_get_shard(struct mf_catalog *c, const char *fp, uint32_t index,
		 struct mf_shard_rec *out);
int sq_list_shards(struct mf_catalog *c, const char *fp,
		   struct mf_shard_rec **out, size_t *n);
int sq_claim(struct mf_catalog *c, const char *fp, uint32_t index,
	     const struct mf_run_rec *me, int64_t now, uint64_t waited,
	     enum mf_claim *result, struct mf_shard_rec *cur);
int sq_complete(struct mf_catalog *c, const char *fp, uint32_t index,
		const char *run_id, uint64_t raw_bytes, uint64_t stored_bytes,
		uint32_t chunks);
int sq_fail(struct mf_catalog *c, const char *fp, uint32_t index,
	    const char *run_id, int32_t exit_status, const char *error,
	    const char *stderr_tail);
int sq_reset(struct mf_catalog *c, const char *fp, uint32_t index,
	     const char *run_id);
int sq_abandon(struct mf_catalog *c, const char *fp, uint32_t index,
	       const char *run_id);
int sq_expire(struct mf_catalog *c, const struct mf_shard_rec *recs, size_t n,
	      bool *expired);
int sq_touch(struct mf_catalog *c, const char *fp, uint32_t index, int64_t now);
/* sqlite_totals.c */
int sq_add_totals(struct mf_catalog *c, const struct mf_catalog_totals *d);
int sq_get_totals(struct mf_catalog *c, struct mf_catalog_totals *out);

#endif
