/*
 * sqlite_hold.c - holds: which processes serve a snapshot. A daemon that
 * has a spec registered holds its fingerprint, so that an expiry in
 * another process (matctl rm, matctl expire, another daemon's keep) keeps
 * the snapshot's row while the daemon shows it; liveness as for runs.
 *
 * Not for: runs that compute shards (sqlite_run.c).
 */
#include "sqlite_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ?8 (a run's state) and ?6 (started) are bound but not stored */
static const char sql_put[] =
    "INSERT INTO holds (holder, fp, host, pid, pid_start, heartbeat,"
    " boot_id, pid_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?9, ?10)"
    " ON CONFLICT (fp, holder) DO UPDATE SET heartbeat = excluded.heartbeat,"
    " host = excluded.host, pid = excluded.pid,"
    " pid_start = excluded.pid_start, boot_id = excluded.boot_id,"
    " pid_ns = excluded.pid_ns";
static const char sql_release[] =
    "DELETE FROM holds WHERE holder = ?1 AND (?2 IS NULL OR fp = ?2)";
/* RUN_COLS order, for cat_run_from_row */
static const char sql_list[] =
    "SELECT holder, fp, host, pid, pid_start, heartbeat, heartbeat,"
    " 'active', boot_id, pid_ns FROM holds WHERE ?1 IS NULL OR fp = ?1"
    " ORDER BY fp, holder";
static const char sql_heartbeat[] =
    "UPDATE holds SET heartbeat = ?2 WHERE holder = ?1";
static const char sql_del[] = "DELETE FROM holds WHERE fp = ?1 AND holder = ?2";
static const char sql_del_snap[] = "DELETE FROM holds WHERE fp = ?1";

int sq_hold(struct mf_catalog *c, const struct mf_run_rec *h)
{
	struct mf_run_rec r = *h;
	memcpy(r.state, "active", sizeof("active"));
	int rc = cat_begin(c);
	if (rc)
		return rc;
	int64_t expiry;
	rc = cat_pending_expiry(c, r.fp, &expiry); /* -ENOENT: no snapshot */
	sqlite3_stmt *st = NULL;
	if (!rc)
		rc = cat_stmt(c, CAT_HOLD_PUT, sql_put, &st);
	if (!rc)
		rc = cat_run_bind(c, st, &r);
	if (!rc)
		rc = cat_step_done(c, st);
	cat_stmt_put(st);
	return cat_finish(c, rc);
}

int sq_release(struct mf_catalog *c, const char *holder, const char *fp)
{
	int rc = cat_begin(c);
	if (rc)
		return rc;
	sqlite3_stmt *st = NULL;
	rc = cat_stmt(c, CAT_HOLD_RELEASE, sql_release, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, holder);
	rc = rc ? rc : cat_bind_text(c, st, 2, fp);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	return cat_finish(c, rc);
}

int sq_list_holds(struct mf_catalog *c, const char *fp, struct mf_run_rec **out,
		  size_t *n)
{
	return cat_runs_select(c, CAT_HOLD_LIST, sql_list, fp, out, n);
}

int sq_heartbeat_holds(struct mf_catalog *c, const char *holder, int64_t now)
{
	int rc = cat_begin(c);
	if (rc)
		return rc;
	sqlite3_stmt *st = NULL;
	rc = cat_stmt(c, CAT_HOLD_HEARTBEAT, sql_heartbeat, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, holder);
	rc = rc ? rc : cat_bind_int64(c, st, 2, now);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	return cat_finish(c, rc);
}

static int del_hold(struct mf_catalog *c, const struct mf_run_rec *h)
{
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, CAT_HOLD_DEL, sql_del, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, h->fp);
	rc = rc ? rc : cat_bind_text(c, st, 2, h->run_id);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	return rc;
}

/* A holder refreshes its holds' heartbeats every 60 s (fs/engine/engine.c,
 * HOLDS_REFRESH_S), however short the snapshot's pending_expiry: a remote
 * hold lives at least three refreshes. */
#define HOLD_STALE_S 180

/* Whether hold h is alive at now, judged with its snapshot's
 * pending_expiry, at least HOLD_STALE_S (a snapshot gone: not alive). */
static int hold_alive(struct mf_catalog *c, const struct mf_run_rec *h,
		      int64_t now, bool *alive)
{
	int64_t expiry;
	int rc = cat_pending_expiry(c, h->fp, &expiry);
	if (rc == -ENOENT) {
		*alive = false;
		return 0;
	}
	if (rc == 0)
		*alive = mf_catalog_run_alive(
		    h, now, expiry > HOLD_STALE_S ? expiry : HOLD_STALE_S);
	return rc;
}

int cat_holds_check(struct mf_catalog *c, const char *fp)
{
	struct mf_run_rec *v;
	size_t n;
	int rc = sq_list_holds(c, fp, &v, &n);
	if (rc)
		return rc;
	int64_t now = mf_now_s();
	for (size_t i = 0; i < n && !rc; i++) {
		bool alive;
		rc = hold_alive(c, &v[i], now, &alive);
		if (!rc && alive)
			rc = -ENOTEMPTY;
	}
	free(v);
	if (rc)
		return rc;
	sqlite3_stmt *st = NULL;
	rc = cat_stmt(c, CAT_HOLD_DEL_SNAP, sql_del_snap, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, fp);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	return rc;
}

int sq_prune_holds(struct mf_catalog *c, int64_t now, size_t *pruned)
{
	int rc = cat_begin(c);
	if (rc)
		return rc;
	struct mf_run_rec *v = NULL;
	size_t n = 0, k = 0;
	rc = sq_list_holds(c, NULL, &v, &n);
	for (size_t i = 0; i < n && !rc; i++) {
		bool alive;
		rc = hold_alive(c, &v[i], now, &alive);
		if (!rc && !alive) {
			rc = del_hold(c, &v[i]);
			k += !rc;
		}
	}
	free(v);
	rc = cat_finish(c, rc);
	if (!rc)
		*pruned = k;
	return rc;
}
