/*
 * sqlite_shard.c - the life of one shard in the catalog: read, claim
 * (single-flight across processes and hosts), complete, fail, reset, touch.
 *
 * Not for: the shard's bytes (the store) or running its stages. The claim
 * is only as single-flight as the transactions: every decision and its
 * write happen inside one BEGIN IMMEDIATE.
 */
#include "sqlite_i.h"
#include "catalog_sql.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char sql_get[] =
    "SELECT " CAT_SHARD_COLS " FROM shards WHERE fp = ?1 AND idx = ?2";
static const char sql_list[] =
    "SELECT " CAT_SHARD_COLS " FROM shards WHERE fp = ?1 ORDER BY idx";
static const char sql_exists[] =
    "SELECT 1 FROM shards WHERE fp = ?1 AND idx = ?2";
static const char sql_pending_expiry[] =
    "SELECT pending_expiry FROM snapshots WHERE fp = ?1";
static const char sql_take[] =
    "UPDATE shards SET state = 'running', run_id = ?3,"
    " attempts = attempts + 1, generation = ?4, raw_bytes = 0,"
    " stored_bytes = 0, chunks = 0, exit_status = -1, error = NULL,"
    " stderr_tail = NULL"
    " WHERE fp = ?1 AND idx = ?2";
static const char sql_complete[] =
    "UPDATE shards SET state = 'materialized', raw_bytes = ?4,"
    " stored_bytes = ?5, chunks = ?6, exit_status = -1, error = NULL,"
    " stderr_tail = NULL"
    " WHERE fp = ?1 AND idx = ?2 AND state = 'running' AND run_id = ?3";
static const char sql_fail[] =
    "UPDATE shards SET state = 'failed', exit_status = ?4, error = ?5,"
    " stderr_tail = ?6, raw_bytes = 0, stored_bytes = 0, chunks = 0"
    " WHERE fp = ?1 AND idx = ?2 AND state = 'running' AND run_id = ?3";
#define SQL_RESET CAT_SQL_RESET("?1", "?2")
static const char sql_reset[] = SQL_RESET;
static const char sql_reset_run[] =
    SQL_RESET " AND state IN ('materialized', 'failed') AND run_id = ?3";
static const char sql_abandon[] =
    SQL_RESET " AND state = 'running' AND run_id = ?3";
static const char sql_expire[] =
    SQL_RESET " AND state = ?3 AND generation = ?4";
static const char sql_touch[] =
    "UPDATE shards SET last_read = ?3 WHERE fp = ?1 AND idx = ?2";
static const char sql_snap_touch[] =
    "UPDATE snapshots SET last_read = ?2 WHERE fp = ?1";

int cat_shard_from_row(sqlite3_stmt *st, struct mf_shard_rec *out)
{
	struct mf_shard_rec r = {0};
	int rc = cat_col_copy(st, 0, r.fp, sizeof(r.fp), "fp length");
	rc = rc ? rc
		: cat_state_parse((const char *)sqlite3_column_text(st, 2),
				  &r.state);
	rc = rc
	    ? rc
	    : cat_col_copy(st, 3, r.run_id, sizeof(r.run_id), "run id length");
	rc = rc ? rc : cat_col_dup(st, 8, &r.error);
	rc = rc ? rc : cat_col_dup(st, 9, &r.stderr_tail);
	if (rc) {
		mf_shard_rec_release(&r);
		return rc;
	}
	r.index = (uint32_t)sqlite3_column_int64(st, 1);
	r.raw_bytes = (uint64_t)sqlite3_column_int64(st, 4);
	r.stored_bytes = (uint64_t)sqlite3_column_int64(st, 5);
	r.chunks = (uint32_t)sqlite3_column_int64(st, 6);
	r.exit_status = (int32_t)sqlite3_column_int64(st, 7);
	r.last_read = sqlite3_column_int64(st, 10);
	r.attempts = (uint32_t)sqlite3_column_int64(st, 11);
	r.generation = (uint64_t)sqlite3_column_int64(st, 12);
	*out = r;
	return 0;
}

/* The cached statement id with ?1 = fp, ?2 = index and, if run_id is not
 * NULL, ?3 = run_id. On failure *out is NULL or still needs cat_stmt_put. */
static int shard_stmt(struct mf_catalog *c, enum cat_stmt_id id,
		      const char *sql, const char *fp, uint32_t index,
		      const char *run_id, sqlite3_stmt **out)
{
	int rc = cat_stmt(c, id, sql, out);
	rc = rc ? rc : cat_bind_text(c, *out, 1, fp);
	rc = rc ? rc : cat_bind_int64(c, *out, 2, index);
	if (!rc && run_id)
		rc = cat_bind_text(c, *out, 3, run_id);
	return rc;
}

static int shard_read(struct mf_catalog *c, const char *fp, uint32_t index,
		      struct mf_shard_rec *out)
{
	sqlite3_stmt *st = NULL;
	int rc = shard_stmt(c, CAT_SHARD_GET, sql_get, fp, index, NULL, &st);
	rc = rc ? rc : cat_step_row(c, st);
	if (rc == 1)
		rc = cat_shard_from_row(st, out);
	else if (rc == 0)
		rc = -ENOENT;
	cat_stmt_put(st);
	return rc;
}

int sq_get_shard(struct mf_catalog *c, const char *fp, uint32_t index,
		 struct mf_shard_rec *out)
{
	return shard_read(c, fp, index, out);
}

static int shard_row(sqlite3_stmt *st, void *elem)
{
	return cat_shard_from_row(st, elem);
}

static void shard_release(void *elem)
{
	mf_shard_rec_release(elem);
}

int sq_list_shards(struct mf_catalog *c, const char *fp,
		   struct mf_shard_rec **out, size_t *n)
{
	void *a = NULL;
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, CAT_SHARD_LIST, sql_list, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, fp);
	rc = rc ? rc
		: cat_collect(c, st, sizeof(**out), shard_row, shard_release,
			      &a, n);
	cat_stmt_put(st);
	if (!rc)
		*out = a;
	return rc;
}

/* 0 when the last UPDATE matched a row; else -ENOENT when the shard does
 * not exist, -ESTALE when it is not in the state the update required. */
static int shard_matched(struct mf_catalog *c, const char *fp, uint32_t index)
{
	if (cat_changes(c) > 0)
		return 0;
	sqlite3_stmt *st = NULL;
	int rc =
	    shard_stmt(c, CAT_SHARD_EXISTS, sql_exists, fp, index, NULL, &st);
	rc = rc ? rc : cat_step_row(c, st);
	cat_stmt_put(st);
	if (rc < 0)
		return rc;
	return rc == 1 ? -ESTALE : -ENOENT;
}

int cat_pending_expiry(struct mf_catalog *c, const char *fp, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, CAT_SNAP_PENDING_EXPIRY, sql_pending_expiry, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, fp);
	rc = rc ? rc : cat_step_row(c, st);
	if (rc == 1) {
		*out = sqlite3_column_int64(st, 0);
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	cat_stmt_put(st);
	return rc;
}

/* Whether the run owner, which holds a running shard of fp, is dead: gone
 * from the table, or not alive as mf_catalog_run_alive judges it with the
 * snapshot's pending_expiry. */
static int owner_dead(struct mf_catalog *c, const char *fp, const char *owner,
		      int64_t now, bool *dead)
{
	struct mf_run_rec r;
	int64_t expiry;
	int rc = owner[0] ? cat_run_read(c, owner, &r) : -ENOENT;
	if (rc == -ENOENT) {
		*dead = true;
		return 0;
	}
	rc = rc ? rc : cat_pending_expiry(c, fp, &expiry);
	if (rc)
		return rc;
	*dead = !mf_catalog_run_alive(&r, now, expiry);
	return 0;
}

/* Marks a run dead; a run whose row is gone needs nothing. */
static int mark_dead(struct mf_catalog *c, const char *owner)
{
	int rc = owner[0] ? cat_run_set_state(c, owner, "dead") : 0;
	return rc == -ENOENT ? 0 : rc;
}

/* Gives the shard to run me, which must be active (created if absent). */
static int shard_take(struct mf_catalog *c, const char *fp, uint32_t index,
		      const struct mf_run_rec *me)
{
	struct mf_run_rec mine;
	sqlite3_stmt *st = NULL;
	int64_t gen = 0;
	int rc = cat_run_ensure(c, me);
	rc = rc ? rc : cat_run_read(c, me->run_id, &mine);
	if (!rc && strcmp(mine.state, "active") != 0)
		rc = -ESTALE; /* me was declared dead or done */
	rc = rc ? rc : cat_new_generation(&gen);
	rc = rc ? rc
		: shard_stmt(c, CAT_SHARD_TAKE, sql_take, fp, index, me->run_id,
			     &st);
	rc = rc ? rc : cat_bind_int64(c, st, 4, gen);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	return rc ? rc : shard_matched(c, fp, index);
}

/* The decision, inside the caller's transaction. */
static int claim_decide(struct mf_catalog *c, const char *fp, uint32_t index,
			const struct mf_run_rec *me, int64_t now,
			uint64_t waited, enum mf_claim *res)
{
	struct mf_shard_rec row;
	char owner[MF_RUN_ID_HEX_LEN + 1];
	bool dead;
	int rc = shard_read(c, fp, index, &row);
	if (rc)
		return rc;
	enum cat_claim_step step = cat_claim_step(&row, me, waited);
	memcpy(owner, row.run_id, sizeof(owner));
	mf_shard_rec_release(&row);
	if (step == CAT_CLAIM_DONE || step == CAT_CLAIM_FAILED) {
		*res = step == CAT_CLAIM_DONE ? MF_CLAIM_DONE : MF_CLAIM_FAILED;
		return 0;
	}
	if (step == CAT_CLAIM_JUDGE) {
		rc = owner_dead(c, fp, owner, now, &dead);
		if (rc)
			return rc;
		if (!dead) {
			*res = MF_CLAIM_WAIT;
			return 0;
		}
		rc = mark_dead(c, owner);
		if (rc)
			return rc;
	}
	rc = shard_take(c, fp, index, me);
	if (!rc)
		*res = MF_CLAIM_MINE;
	return rc;
}

int sq_claim(struct mf_catalog *c, const char *fp, uint32_t index,
	     const struct mf_run_rec *me, int64_t now, uint64_t waited,
	     enum mf_claim *result, struct mf_shard_rec *cur)
{
	struct mf_shard_rec row = {0};
	enum mf_claim res = MF_CLAIM_WAIT;
	int rc = cat_begin(c);
	if (rc)
		return rc;
	rc = claim_decide(c, fp, index, me, now, waited, &res);
	if (!rc && cur)
		rc = shard_read(c, fp, index, &row);
	rc = cat_finish(c, rc);
	if (rc) {
		mf_shard_rec_release(&row);
		return rc;
	}
	*result = res;
	if (cur)
		*cur = row;
	return 0;
}

/* One UPDATE of a shard (?3 = run_id unless NULL) with up to three more
 * integers (?4..?6), in its own transaction. */
struct shard_vals {
	int n;
	int64_t v[3];
};

static int shard_update(struct mf_catalog *c, enum cat_stmt_id id,
			const char *sql, const char *fp, uint32_t index,
			const char *run_id, const struct shard_vals *vals)
{
	sqlite3_stmt *st = NULL;
	int rc = cat_begin(c);
	if (rc)
		return rc;
	rc = shard_stmt(c, id, sql, fp, index, run_id, &st);
	for (int i = 0; !rc && i < vals->n; i++) {
		rc = cat_bind_int64(c, st, 4 + i, vals->v[i]);
	}
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	rc = rc ? rc : shard_matched(c, fp, index);
	return cat_finish(c, rc);
}

int sq_complete(struct mf_catalog *c, const char *fp, uint32_t index,
		const char *run_id, uint64_t raw_bytes, uint64_t stored_bytes,
		uint32_t chunks)
{
	struct shard_vals vals = {
	    .n = 3,
	    .v = {(int64_t)raw_bytes, (int64_t)stored_bytes, chunks},
	};
	return shard_update(c, CAT_SHARD_COMPLETE, sql_complete, fp, index,
			    run_id, &vals);
}

int sq_fail(struct mf_catalog *c, const char *fp, uint32_t index,
	    const char *run_id, int32_t exit_status, const char *error,
	    const char *stderr_tail)
{
	sqlite3_stmt *st = NULL;
	int rc = cat_begin(c);
	if (rc)
		return rc;
	/* error and the tail may be NULL: bound as SQL NULL */
	rc = shard_stmt(c, CAT_SHARD_FAIL, sql_fail, fp, index, run_id, &st);
	rc = rc ? rc : cat_bind_int64(c, st, 4, exit_status);
	rc = rc ? rc : cat_bind_text(c, st, 5, error);
	rc = rc ? rc : cat_bind_text(c, st, 6, stderr_tail);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	rc = rc ? rc : shard_matched(c, fp, index);
	return cat_finish(c, rc);
}

int sq_reset(struct mf_catalog *c, const char *fp, uint32_t index,
	     const char *run_id)
{
	struct shard_vals none = {0};
	if (run_id)
		return shard_update(c, CAT_SHARD_RESET_RUN, sql_reset_run, fp,
				    index, run_id, &none);
	return shard_update(c, CAT_SHARD_RESET, sql_reset, fp, index, NULL,
			    &none);
}

int sq_abandon(struct mf_catalog *c, const char *fp, uint32_t index,
	       const char *run_id)
{
	struct shard_vals none = {0};
	return shard_update(c, CAT_SHARD_ABANDON, sql_abandon, fp, index,
			    run_id, &none);
}

/* Expires recs[i] if its row is still as listed; *done says whether. */
static int expire_rec(struct mf_catalog *c, const struct mf_shard_rec *r,
		      bool *done)
{
	*done = false;
	if (!cat_expirable(r))
		return 0;
	sqlite3_stmt *st = NULL;
	int rc = shard_stmt(c, CAT_SHARD_EXPIRE, sql_expire, r->fp, r->index,
			    NULL, &st);
	rc = rc ? rc : cat_bind_text(c, st, 3, mf_shard_state_name(r->state));
	rc = rc ? rc : cat_bind_int64(c, st, 4, (int64_t)r->generation);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	*done = rc == 0 && cat_changes(c) > 0;
	return rc;
}

static const struct cat_tx sq_tx = {cat_begin, cat_finish};

int sq_expire(struct mf_catalog *c, const struct mf_shard_rec *recs, size_t n,
	      bool *expired)
{
	return cat_expire_each(c, &sq_tx, expire_rec, recs, n, expired);
}

static int touch_snap(struct mf_catalog *c, const char *fp, int64_t now)
{
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, CAT_SNAP_TOUCH, sql_snap_touch, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, fp);
	rc = rc ? rc : cat_bind_int64(c, st, 2, now);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	return rc;
}

static int touch_shard(struct mf_catalog *c, const char *fp, uint32_t index,
		       int64_t now, long *changed)
{
	sqlite3_stmt *st = NULL;
	int rc =
	    shard_stmt(c, CAT_SHARD_TOUCH, sql_touch, fp, index, NULL, &st);
	rc = rc ? rc : cat_bind_int64(c, st, 3, now);
	rc = rc ? rc : cat_step_done(c, st);
	*changed = rc ? 0 : cat_changes(c);
	cat_stmt_put(st);
	return rc;
}

int sq_touch(struct mf_catalog *c, const char *fp, uint32_t index, int64_t now)
{
	return cat_touch_both(c, &sq_tx, touch_snap, touch_shard, fp, index,
			      now);
}
