/*
 * sqlite_snap.c - snapshot rows: register (upsert with the shard rows),
 * read one or all with their materialized totals, find by name, delete.
 *
 * Not for: runs (sqlite_run.c) or the life of one shard (sqlite_shard.c).
 */
#include "sqlite_i.h"
#include "catalog_sql.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A snapshot row with its totals over materialized shards, from column 0. */
static const char sql_get[] = CAT_SQL_SNAP_GET("?1");
static const char sql_list[] = CAT_SQL_SNAP_LIST;

/* created and last_read of an existing row stay; registered moves on */
static const char sql_upsert[] =
    "INSERT INTO snapshots (fp, name, shards, spec_path, compression,"
    " suffix, chunk_size, expire_after, pending_expiry, keep, created,"
    " last_read, owner, registered) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,"
    " ?8, ?9, ?10, ?11, ?12, ?13, (SELECT COALESCE(MAX(registered), 0) + 1"
    " FROM snapshots)) ON CONFLICT (fp) DO UPDATE SET"
    " owner = CASE WHEN snapshots.owner < 0 THEN excluded.owner"
    " ELSE snapshots.owner END,"
    " name = excluded.name, shards = excluded.shards,"
    " spec_path = excluded.spec_path, compression = excluded.compression,"
    " suffix = excluded.suffix, chunk_size = excluded.chunk_size,"
    " expire_after = excluded.expire_after,"
    " pending_expiry = excluded.pending_expiry, keep = excluded.keep,"
    " registered = excluded.registered";
static const char sql_trim_shards[] =
    "DELETE FROM shards WHERE fp = ?1 AND idx >= ?2";
static const char sql_add_shards[] =
    "WITH RECURSIVE n (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n"
    " WHERE i + 1 < ?2) INSERT OR IGNORE INTO shards (fp, idx)"
    " SELECT ?1, i FROM n";
static const char sql_find_name[] = "SELECT fp FROM snapshots WHERE name = ?1"
				    " ORDER BY registered DESC LIMIT 1";
static const char sql_busy[] =
    "SELECT 1 FROM shards WHERE fp = ?1 AND state != 'absent' LIMIT 1";
static const char sql_del_shards[] = "DELETE FROM shards WHERE fp = ?1";
static const char sql_del_runs[] = "DELETE FROM runs WHERE fp = ?1";
static const char sql_del[] = "DELETE FROM snapshots WHERE fp = ?1";

static int snap_bind(struct mf_catalog *c, sqlite3_stmt *st,
		     const struct mf_snapshot_rec *r)
{
	int64_t created = r->created ? r->created : mf_now_s();
	int rc = cat_bind_text(c, st, 1, r->fp);
	rc = rc ? rc : cat_bind_text(c, st, 2, r->name);
	rc = rc ? rc : cat_bind_int64(c, st, 3, r->shards);
	rc = rc ? rc : cat_bind_text(c, st, 4, r->spec_path);
	rc = rc ? rc : cat_bind_text(c, st, 5, r->compression);
	rc = rc ? rc : cat_bind_text(c, st, 6, r->suffix ? r->suffix : "");
	rc = rc ? rc : cat_bind_int64(c, st, 7, (int64_t)r->chunk_size);
	rc = rc ? rc : cat_bind_int64(c, st, 8, r->expire_after);
	rc = rc ? rc : cat_bind_int64(c, st, 9, r->pending_expiry);
	rc = rc ? rc : cat_bind_int64(c, st, 10, r->keep);
	rc = rc ? rc : cat_bind_int64(c, st, 11, created);
	rc = rc ? rc : cat_bind_int64(c, st, 12, r->last_read);
	rc = rc
	    ? rc
	    : cat_bind_int64(c, st, 13, r->has_owner ? (int64_t)r->owner : -1);
	return rc;
}

/* Runs statement id with ?1 = fp and, when n >= 0, ?2 = n. */
static int exec_fp(struct mf_catalog *c, enum cat_stmt_id id, const char *sql,
		   const char *fp, int64_t n)
{
	sqlite3_stmt *st;
	int rc = cat_stmt(c, id, sql, &st);
	if (rc)
		return rc;
	rc = cat_bind_text(c, st, 1, fp);
	if (!rc && n >= 0)
		rc = cat_bind_int64(c, st, 2, n);
	if (!rc)
		rc = cat_step_done(c, st);
	cat_stmt_put(st);
	return rc;
}

static int snap_upsert(struct mf_catalog *c, const struct mf_snapshot_rec *r)
{
	sqlite3_stmt *st;
	int rc = cat_stmt(c, CAT_SNAP_UPSERT, sql_upsert, &st);
	if (rc)
		return rc;
	rc = snap_bind(c, st, r);
	if (!rc)
		rc = cat_step_done(c, st);
	cat_stmt_put(st);
	return rc;
}

int sq_put_snapshot(struct mf_catalog *c, const struct mf_snapshot_rec *rec)
{
	int rc = cat_begin(c);
	if (rc)
		return rc;
	rc = cat_owner_check(c, rec, sq_get_snapshot);
	if (!rc)
		rc = snap_upsert(c, rec);
	if (!rc)
		rc = exec_fp(c, CAT_SNAP_TRIM_SHARDS, sql_trim_shards, rec->fp,
			     rec->shards);
	if (!rc)
		rc = exec_fp(c, CAT_SNAP_ADD_SHARDS, sql_add_shards, rec->fp,
			     rec->shards);
	if (rc) {
		cat_rollback(c);
		return rc;
	}
	return cat_commit(c);
}

static int snap_strings(sqlite3_stmt *st, struct mf_snapshot_rec *r)
{
	int rc = cat_col_dup(st, 3, &r->spec_path);
	rc = rc ? rc : cat_col_dup(st, 4, &r->compression);
	rc = rc ? rc : cat_col_dup(st, 5, &r->suffix);
	if (!rc && (!r->spec_path || !r->compression || !r->suffix))
		rc = MF_CORRUPT("snapshot column NULL"); /* NOT NULL */
	return rc;
}

/* A row of CAT_SQL_SNAP_SELECT into *out, written only on success. */
static int snap_from_row(sqlite3_stmt *st, struct mf_snapshot_rec *out)
{
	struct mf_snapshot_rec r = {0};
	int rc = cat_col_copy(st, 0, r.fp, sizeof(r.fp), "fp length");
	rc = rc ? rc
		: cat_col_copy(st, 1, r.name, sizeof(r.name),
			       "snapshot name length");
	rc = rc ? rc : snap_strings(st, &r);
	if (rc) {
		mf_snapshot_rec_release(&r);
		return rc;
	}
	r.shards = (uint32_t)sqlite3_column_int64(st, 2);
	r.chunk_size = (uint64_t)sqlite3_column_int64(st, 6);
	r.expire_after = sqlite3_column_int64(st, 7);
	r.pending_expiry = sqlite3_column_int64(st, 8);
	r.keep = (uint32_t)sqlite3_column_int64(st, 9);
	r.created = sqlite3_column_int64(st, 10);
	r.last_read = sqlite3_column_int64(st, 11);
	r.materialized = (uint32_t)sqlite3_column_int64(st, 12);
	r.raw_bytes = (uint64_t)sqlite3_column_int64(st, 13);
	r.stored_bytes = (uint64_t)sqlite3_column_int64(st, 14);
	int64_t owner = sqlite3_column_int64(st, 15);
	r.has_owner = owner >= 0;
	r.owner = r.has_owner ? (uid_t)owner : 0;
	*out = r;
	return 0;
}

static int snap_row(sqlite3_stmt *st, void *elem)
{
	return snap_from_row(st, elem);
}

int sq_get_snapshot(struct mf_catalog *c, const char *fp,
		    struct mf_snapshot_rec *out)
{
	return cat_read_one(c, CAT_SNAP_GET, sql_get, fp, snap_row, out);
}

static int fp_row(sqlite3_stmt *st, void *elem)
{
	return cat_col_copy(st, 0, elem, MF_FP_HEX_LEN + 1, "fp length");
}

int sq_find_name(struct mf_catalog *c, const char *name,
		 char fp[MF_FP_HEX_LEN + 1])
{
	char found[MF_FP_HEX_LEN + 1];
	int rc = cat_read_one(c, CAT_SNAP_FIND_NAME, sql_find_name, name,
			      fp_row, found);
	if (!rc)
		memcpy(fp, found, sizeof(found));
	return rc;
}

static void snap_release(void *elem)
{
	mf_snapshot_rec_release(elem);
}

int sq_list_snapshots(struct mf_catalog *c, struct mf_snapshot_rec **out,
		      size_t *n)
{
	void *a = NULL;
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, CAT_SNAP_LIST, sql_list, &st);
	rc = rc
	    ? rc
	    : cat_collect(c, st, sizeof(**out), snap_row, snap_release, &a, n);
	cat_stmt_put(st);
	if (!rc)
		*out = a;
	return rc;
}

/* -ENOTEMPTY when a shard of fp is not absent. */
static int snap_check_idle(struct mf_catalog *c, const char *fp)
{
	sqlite3_stmt *st;
	int rc = cat_stmt(c, CAT_SNAP_BUSY, sql_busy, &st);
	if (rc)
		return rc;
	rc = cat_bind_text(c, st, 1, fp);
	rc = rc ? rc : cat_step_row(c, st);
	cat_stmt_put(st);
	return rc == 1 ? -ENOTEMPTY : rc;
}

int sq_delete_snapshot(struct mf_catalog *c, const char *fp,
		       struct mf_run_rec **runs, size_t *nruns)
{
	struct mf_run_rec *list = NULL;
	size_t n = 0;
	int rc = cat_begin(c);
	if (rc)
		return rc;
	rc = snap_check_idle(c, fp);
	if (!rc)
		rc = cat_holds_check(c, fp);
	if (!rc && runs)
		rc = sq_list_runs(c, fp, &list, &n);
	if (!rc)
		rc = exec_fp(c, CAT_SNAP_DEL_SHARDS, sql_del_shards, fp, -1);
	if (!rc)
		rc = exec_fp(c, CAT_SNAP_DEL_RUNS, sql_del_runs, fp, -1);
	if (!rc)
		rc = exec_fp(c, CAT_SNAP_DEL, sql_del, fp, -1);
	if (!rc && cat_changes(c) == 0)
		rc = -ENOENT;
	rc = cat_finish(c, rc);
	if (rc) {
		free(list);
		return rc;
	}
	if (runs) {
		*runs = list;
		*nruns = n;
	}
	return 0;
}
