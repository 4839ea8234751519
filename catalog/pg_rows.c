/*
 * pg_rows.c - snapshot, run and hold rows in a PostgreSQL catalog:
 * register (upsert with the shard rows), read, list, delete; runs and
 * holds with their heartbeats written by the server's clock, and this
 * process's runs and holders kept alive by the liveness session.
 *
 * Not for: the life of one shard (pg_shard.c) or whether a run is alive
 * (pg_live.c).
 */
#include "pg_i.h"
#include "catalog_sql.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SERVER_NOW PG_SERVER_NOW

/* Holds: a holder refreshes its heartbeat every 60 s (fs/engine), so a
 * hold lives at least three refreshes, as on SQLite. */
#define HOLD_STALE_S 180

/* A snapshot row with its totals over materialized shards. */
/* The rows a statement returned, each read with from_row into a malloc'd
 * array (NULL when none); release (may be NULL) undoes a partial read. */
typedef int (*row_fn)(const PGresult *r, int row, void *elem);
typedef void (*release_fn)(void *elem);
static int collect(PGresult *r, size_t size, row_fn from_row,
		   release_fn release, void **out, size_t *n)
{
	int rows = PQntuples(r), i, rc = 0;
	char *a = rows ? calloc((size_t)rows, size) : NULL;
	if (rows && !a)
		rc = -ENOMEM;
	for (i = 0; !rc && i < rows; i++)
		rc = from_row(r, i, a + (size_t)i * size);
	if (rc) {
		for (int k = 0; release && k < i - 1; k++)
			release(a + (size_t)k * size);
		free(a);
		return rc;
	}
	*out = a;
	*n = (size_t)rows;
	return 0;
}

/* ---- snapshots ---- */

static int snap_from_row(const PGresult *r, int row, void *elem)
{
	struct mf_snapshot_rec s = {0};
	int rc = pg_get_copy(r, row, 0, s.fp, sizeof(s.fp), "fp length");
	rc = rc ? rc
		: pg_get_copy(r, row, 1, s.name, sizeof(s.name),
			      "snapshot name length");
	rc = rc ? rc : pg_get_dup(r, row, 3, &s.spec_path);
	rc = rc ? rc : pg_get_dup(r, row, 4, &s.compression);
	rc = rc ? rc : pg_get_dup(r, row, 5, &s.suffix);
	if (!rc && (!s.spec_path || !s.compression || !s.suffix))
		rc = MF_CORRUPT("snapshot column NULL");
	if (rc) {
		mf_snapshot_rec_release(&s);
		return rc;
	}
	s.shards = (uint32_t)pg_get_int(r, row, 2);
	s.chunk_size = (uint64_t)pg_get_int(r, row, 6);
	s.expire_after = pg_get_int(r, row, 7);
	s.pending_expiry = pg_get_int(r, row, 8);
	s.keep = (uint32_t)pg_get_int(r, row, 9);
	s.created = pg_get_int(r, row, 10);
	s.last_read = pg_get_int(r, row, 11);
	s.materialized = (uint32_t)pg_get_int(r, row, 12);
	s.raw_bytes = (uint64_t)pg_get_int(r, row, 13);
	s.stored_bytes = (uint64_t)pg_get_int(r, row, 14);
	int64_t owner = pg_get_int(r, row, 15);
	s.has_owner = owner >= 0;
	s.owner = s.has_owner ? (uid_t)owner : 0;
	*(struct mf_snapshot_rec *)elem = s;
	return 0;
}

static void snap_release(void *elem)
{
	mf_snapshot_rec_release(elem);
}

int pgb_put_snapshot(struct mf_catalog *c, const struct mf_snapshot_rec *rec)
{
	char v[8][PG_INT_LEN];
	int64_t created = rec->created; /* 0: now, by the server's clock */
	const char *p[] = {
	    rec->fp,
	    rec->name,
	    pg_int(v[0], rec->shards),
	    rec->spec_path,
	    rec->compression,
	    rec->suffix ? rec->suffix : "",
	    pg_int(v[1], (int64_t)rec->chunk_size),
	    pg_int(v[2], rec->expire_after),
	    pg_int(v[3], rec->pending_expiry),
	    pg_int(v[4], rec->keep),
	    pg_int(v[5], created),
	    pg_int(v[6], rec->last_read),
	    pg_int(v[7], rec->has_owner ? (int64_t)rec->owner : -1)};
	int rc = pg_begin(c);
	if (rc)
		return rc;
	/* registrations one at a time, so that registered (MAX + 1) is
	 * unique and orders them, as SQLite's one writer does */
	rc = pg_exec(c, "SELECT pg_advisory_xact_lock(" PG_REGISTER_LOCK ")", 0,
		     NULL, NULL);
	rc = rc ? rc : cat_owner_check(c, rec, pgb_get_snapshot);
	/* created and last_read of an existing row stay; registered moves
	 * on */
	rc = rc
	    ? rc
	    : pg_exec(
		  c,
		  "INSERT INTO snapshots (fp, name, shards, spec_path, "
		  "compression,"
		  " suffix, chunk_size, expire_after, pending_expiry, keep, "
		  "created,"
		  " last_read, owner, registered) VALUES ($1, $2, $3, $4, $5,"
		  " $6, $7, $8,"
		  " $9, $10, COALESCE(NULLIF($11::bigint, 0), " SERVER_NOW
		  "), $12, $13, (SELECT COALESCE(MAX(registered), 0) + 1"
		  " FROM snapshots)) ON CONFLICT (fp) DO UPDATE SET"
		  " owner = CASE WHEN snapshots.owner < 0 THEN excluded.owner"
		  " ELSE snapshots.owner END,"
		  " name = excluded.name, shards = excluded.shards,"
		  " spec_path = excluded.spec_path,"
		  " compression = excluded.compression, suffix = "
		  "excluded.suffix,"
		  " chunk_size = excluded.chunk_size,"
		  " expire_after = excluded.expire_after,"
		  " pending_expiry = excluded.pending_expiry, keep = "
		  "excluded.keep,"
		  " registered = excluded.registered",
		  13, p, NULL);
	const char *q[] = {rec->fp, v[0]};
	rc = rc ? rc
		: pg_exec(c, "DELETE FROM shards WHERE fp = $1 AND idx >= $2",
			  2, q, NULL);
	rc = rc ? rc
		: pg_exec(c,
			  "INSERT INTO shards (fp, idx) SELECT $1, i FROM"
			  " generate_series(0, $2::bigint - 1) i"
			  " ON CONFLICT DO NOTHING",
			  2, q, NULL);
	return pg_finish(c, rc);
}

int pgb_get_snapshot(struct mf_catalog *c, const char *fp,
		     struct mf_snapshot_rec *out)
{
	PGresult *r;
	const char *p[] = {fp};
	int rc = pg_exec(c, CAT_SQL_SNAP_GET("$1"), 1, p, &r);
	if (rc)
		return rc;
	rc = PQntuples(r) == 1 ? snap_from_row(r, 0, out) : -ENOENT;
	PQclear(r);
	return rc;
}

int pgb_find_name(struct mf_catalog *c, const char *name,
		  char fp[MF_FP_HEX_LEN + 1])
{
	PGresult *r;
	const char *p[] = {name};
	char found[MF_FP_HEX_LEN + 1];
	int rc = pg_exec(c,
			 "SELECT fp FROM snapshots WHERE name = $1"
			 " ORDER BY registered DESC LIMIT 1",
			 1, p, &r);
	if (rc)
		return rc;
	rc = PQntuples(r) == 1
	    ? pg_get_copy(r, 0, 0, found, sizeof(found), "fp length")
	    : -ENOENT;
	PQclear(r);
	if (!rc)
		memcpy(fp, found, sizeof(found));
	return rc;
}

int pgb_list_snapshots(struct mf_catalog *c, struct mf_snapshot_rec **out,
		       size_t *n)
{
	PGresult *r;
	void *a = NULL;
	int rc = pg_exec(c, CAT_SQL_SNAP_LIST, 0, NULL, &r);
	if (rc)
		return rc;
	rc = collect(r, sizeof(**out), snap_from_row, snap_release, &a, n);
	PQclear(r);
	if (!rc)
		*out = a;
	return rc;
}

/* -ENOTEMPTY when a live holder holds fp; else its dead holds go. */
static int holds_check(struct mf_catalog *c, const char *fp)
{
	struct mf_run_rec *v = NULL;
	size_t n = 0;
	int64_t expiry;
	int rc = pg_pending_expiry(c, fp, &expiry);
	rc = rc ? rc : pgb_list_holds(c, fp, &v, &n);
	for (size_t i = 0; !rc && i < n; i++) {
		bool alive;
		rc = pg_judge(c, &v[i],
			      expiry > HOLD_STALE_S ? expiry : HOLD_STALE_S,
			      &alive);
		if (!rc && alive)
			rc = -ENOTEMPTY;
	}
	free(v);
	const char *p[] = {fp};
	return rc ? rc
		  : pg_exec(c, "DELETE FROM holds WHERE fp = $1", 1, p, NULL);
}

int pgb_delete_snapshot(struct mf_catalog *c, const char *fp,
			struct mf_run_rec **runs, size_t *nruns)
{
	struct mf_run_rec *list = NULL;
	size_t n = 0;
	long changed = 0;
	const char *p[] = {fp};
	PGresult *r = NULL;
	int rc = pg_begin(c);
	if (rc)
		return rc;
	/* the row first, locked: no claim or registration of fp runs
	 * between the checks and the delete */
	rc = pg_exec(c, "SELECT 1 FROM snapshots WHERE fp = $1 FOR UPDATE", 1,
		     p, &r);
	if (!rc && PQntuples(r) == 0)
		rc = -ENOENT;
	PQclear(r);
	r = NULL;
	rc = rc ? rc
		: pg_exec(c,
			  "SELECT 1 FROM shards WHERE fp = $1 AND"
			  " state <> 'absent' LIMIT 1 FOR UPDATE",
			  1, p, &r);
	if (!rc && PQntuples(r) > 0)
		rc = -ENOTEMPTY;
	PQclear(r);
	rc = rc ? rc : holds_check(c, fp);
	if (!rc)
		rc = pgb_list_runs(c, fp, &list, &n);
	rc = rc ? rc
		: pg_write(c, "DELETE FROM snapshots WHERE fp = $1", 1, p,
			   &changed);
	rc = pg_finish(c, rc);
	if (rc) {
		free(list);
		return rc;
	}
	for (size_t i = 0; i < n; i++) /* rows gone: their locks too */
		pg_live_unlock(pg_db(c)->live, list[i].run_id);
	if (runs) {
		*runs = list;
		*nruns = n;
	} else {
		free(list);
	}
	return 0;
}

int pg_pending_expiry(struct mf_catalog *c, const char *fp, int64_t *out)
{
	PGresult *r;
	const char *p[] = {fp};
	int rc = pg_exec(
	    c, "SELECT pending_expiry FROM snapshots WHERE fp = $1", 1, p, &r);
	if (rc)
		return rc;
	rc = PQntuples(r) == 1 ? 0 : -ENOENT;
	if (!rc)
		*out = pg_get_int(r, 0, 0);
	PQclear(r);
	return rc;
}

/* ---- runs ---- */

int pg_run_from_row(const PGresult *r, int row, struct mf_run_rec *out)
{
	struct mf_run_rec v = {0};
	int rc =
	    pg_get_copy(r, row, 0, v.run_id, sizeof(v.run_id), "run id length");
	rc = rc ? rc : pg_get_copy(r, row, 1, v.fp, sizeof(v.fp), "fp length");
	rc = rc ? rc
		: pg_get_copy(r, row, 2, v.host, sizeof(v.host), "host length");
	rc = rc ? rc
		: pg_get_copy(r, row, 7, v.state, sizeof(v.state),
			      "run state length");
	rc = rc ? rc
		: pg_get_copy(r, row, 8, v.boot_id, sizeof(v.boot_id),
			      "boot id length");
	if (rc)
		return rc;
	v.pid = (int32_t)pg_get_int(r, row, 3);
	v.pid_start = (uint64_t)pg_get_int(r, row, 4);
	v.started = pg_get_int(r, row, 5);
	v.heartbeat = pg_get_int(r, row, 6);
	v.pid_ns = (uint64_t)pg_get_int(r, row, 9);
	*out = v;
	return 0;
}

static int run_row(const PGresult *r, int row, void *elem)
{
	return pg_run_from_row(r, row, elem);
}

int pg_runs_select(struct mf_catalog *c, const char *sql, const char *fp,
		   struct mf_run_rec **out, size_t *n)
{
	PGresult *r;
	void *a = NULL;
	const char *p[] = {fp};
	int rc = pg_exec(c, sql, 1, p, &r);
	if (rc)
		return rc;
	rc = collect(r, sizeof(**out), run_row, NULL, &a, n);
	PQclear(r);
	if (!rc)
		*out = a;
	return rc;
}

int pg_run_read(struct mf_catalog *c, const char *run_id,
		struct mf_run_rec *out)
{
	struct mf_run_rec *v = NULL;
	size_t n = 0;
	int rc = pg_runs_select(
	    c, "SELECT " PG_RUN_COLS " FROM runs WHERE run_id = $1", run_id, &v,
	    &n);
	if (!rc && n == 0)
		rc = -ENOENT;
	if (!rc)
		*out = v[0];
	free(v);
	return rc;
}

/* The ten columns of a run as parameters $1..$10 (vals: 5 buffers). */
static void run_params(const struct mf_run_rec *r, char vals[5][PG_INT_LEN],
		       const char *p[10])
{
	p[0] = r->run_id;
	p[1] = r->fp;
	p[2] = r->host;
	p[3] = pg_int(vals[0], r->pid);
	p[4] = pg_int(vals[1], (int64_t)r->pid_start);
	p[5] = pg_int(vals[2], r->started);
	p[6] = pg_int(vals[3], r->heartbeat);
	p[7] = r->state;
	p[8] = r->boot_id;
	p[9] = pg_int(vals[4], (int64_t)r->pid_ns);
}

int pgb_add_run(struct mf_catalog *c, const struct mf_run_rec *run)
{
	char v[5][PG_INT_LEN];
	const char *p[10];
	run_params(run, v, p);
	int rc = pg_begin(c);
	if (rc)
		return rc;
	rc = pg_exec(c,
		     "INSERT INTO runs (" PG_RUN_COLS ") VALUES ($1, $2, $3,"
		     " $4, $5, $6, $7, $8, $9, $10)",
		     10, p, NULL);
	return pg_finish(c, rc);
}

int pgb_get_run(struct mf_catalog *c, const char *run_id,
		struct mf_run_rec *out)
{
	return pg_run_read(c, run_id, out);
}

int pgb_list_runs(struct mf_catalog *c, const char *fp, struct mf_run_rec **out,
		  size_t *n)
{
	return pg_runs_select(c,
			      "SELECT " PG_RUN_COLS " FROM runs WHERE $1::text"
			      " IS NULL OR fp = $1 ORDER BY started, run_id",
			      fp, out, n);
}

/* One write of the row run_id in its own transaction; -ENOENT when no
 * row matched. */
static int run_write(struct mf_catalog *c, const char *sql, int n,
		     const char *const *p)
{
	long changed = 0;
	int rc = pg_begin(c);
	if (rc)
		return rc;
	rc = pg_write(c, sql, n, p, &changed);
	if (!rc && changed == 0)
		rc = -ENOENT;
	return pg_finish(c, rc);
}

int pgb_heartbeat(struct mf_catalog *c, const char *run_id, int64_t now)
{
	(void)now; /* the server's clock, never the host's */
	char key[PG_INT_LEN], pid[PG_INT_LEN];
	int live_pid = 0;
	/* a lost session comes back, with its locks, before the heartbeat
	 * says so; and the heartbeat is written only while the session
	 * holds the run's lock (PG_LIVE_HELD), so a judge takes a heartbeat
	 * newer than the server's start for a session that locked again */
	int rc = pg_live_ping(pg_db(c)->live, &live_pid);
	if (rc)
		return rc;
	/* no session (nothing locked): no row of a run of ours to refresh */
	const char *p[] = {run_id, pg_live_key(key, run_id),
			   pg_int(pid, live_pid ? live_pid : -1)};
	return run_write(c,
			 "UPDATE runs SET heartbeat = " SERVER_NOW
			 " WHERE run_id = $1 AND " PG_LIVE_HELD("$2", "$3"),
			 3, p);
}

int pg_run_set_state(struct mf_catalog *c, const char *run_id,
		     const char *state)
{
	long changed = 0;
	const char *p[] = {run_id, state};
	int rc = pg_write(c, "UPDATE runs SET state = $2 WHERE run_id = $1", 2,
			  p, &changed);
	return rc ? rc : changed ? 0 : -ENOENT;
}

int pgb_set_run_state(struct mf_catalog *c, const char *run_id,
		      const char *state)
{
	int rc = pg_begin(c);
	rc = rc ? rc : pg_finish(c, pg_run_set_state(c, run_id, state));
	/* over, whether or not the row could say so (none, an outage): the
	 * lock of a run that is over is never held again */
	if (strcmp(state, "active") != 0)
		pg_live_unlock(pg_db(c)->live, run_id);
	return rc;
}

int pgb_delete_run(struct mf_catalog *c, const char *run_id)
{
	const char *p[] = {run_id};
	int rc = run_write(c, "DELETE FROM runs WHERE run_id = $1", 1, p);
	if (!rc)
		pg_live_unlock(pg_db(c)->live, run_id);
	return rc;
}

/* ---- holds ---- */

int pgb_hold(struct mf_catalog *c, const struct mf_run_rec *h)
{
	char v[5][PG_INT_LEN];
	const char *r[10];
	int64_t expiry;
	run_params(h, v, r);
	char key[PG_INT_LEN], pid[PG_INT_LEN];
	int live_pid = 0;
	long changed = 0;
	/* this process's holder is alive while its session is */
	int rc = cat_run_is_self(h)
	    ? pg_live_lock(pg_db(c)->live, h->run_id, &live_pid)
	    : 0;
	/* the columns holds keep: not started, state nor heartbeat; the
	 * heartbeat only while the session holds the lock (PG_LIVE_HELD) */
	const char *p[] = {r[0],
			   r[1],
			   r[2],
			   r[3],
			   r[4],
			   r[8],
			   r[9],
			   pg_live_key(key, h->run_id),
			   pg_int(pid, live_pid)};
	rc = rc ? rc : pg_begin(c);
	if (rc)
		return rc;
	rc = pg_pending_expiry(c, h->fp, &expiry); /* -ENOENT: no snapshot */
	rc = rc
	    ? rc
	    : pg_write(
		  c,
		  "INSERT INTO holds (holder, fp, host, pid, pid_start,"
		  " heartbeat, boot_id, pid_ns) SELECT $1, $2, $3,"
		  " $4::bigint, $5::bigint, " SERVER_NOW ", $6,"
		  " $7::bigint WHERE " PG_LIVE_HELD(
		      "$8", "$9") " ON CONFLICT (fp, holder) DO UPDATE SET"
				  " heartbeat = excluded.heartbeat,"
				  " host = excluded.host, pid = excluded.pid,"
				  " pid_start = excluded.pid_start,"
				  " boot_id = excluded.boot_id,"
				  " pid_ns = excluded.pid_ns",
		  9, p, &changed);
	if (!rc && changed == 0)
		rc = -ENOTCONN; /* its session lost the lock meanwhile */
	return pg_finish(c, rc);
}

int pgb_release(struct mf_catalog *c, const char *holder, const char *fp)
{
	const char *p[] = {holder, fp};
	int rc = pg_begin(c);
	if (rc)
		return rc;
	rc = pg_exec(c,
		     "DELETE FROM holds WHERE holder = $1 AND"
		     " ($2::text IS NULL OR fp = $2)",
		     2, p, NULL);
	rc = pg_finish(c, rc);
	if (!rc && !fp) /* every hold gone: the holder is over */
		pg_live_unlock(pg_db(c)->live, holder);
	return rc;
}

int pgb_list_holds(struct mf_catalog *c, const char *fp,
		   struct mf_run_rec **out, size_t *n)
{
	return pg_runs_select(
	    c,
	    "SELECT holder, fp, host, pid, pid_start, heartbeat, heartbeat,"
	    " 'active', boot_id, pid_ns FROM holds WHERE $1::text IS NULL OR"
	    " fp = $1 ORDER BY fp, holder",
	    fp, out, n);
}

int pgb_heartbeat_holds(struct mf_catalog *c, const char *holder, int64_t now)
{
	(void)now;
	char key[PG_INT_LEN], pid[PG_INT_LEN];
	int live_pid = 0;
	(void)pg_live_ping(pg_db(c)->live, &live_pid);
	/* a holder with no session now is not refreshed (PG_LIVE_HELD) */
	const char *p[] = {holder, pg_live_key(key, holder),
			   pg_int(pid, live_pid ? live_pid : -1)};
	int rc = pg_begin(c);
	if (rc)
		return rc;
	rc = pg_exec(c,
		     "UPDATE holds SET heartbeat = " SERVER_NOW
		     " WHERE holder = $1 AND " PG_LIVE_HELD("$2", "$3"),
		     3, p, NULL);
	return pg_finish(c, rc);
}

int pgb_prune_holds(struct mf_catalog *c, int64_t now, size_t *pruned)
{
	(void)now;
	struct mf_run_rec *v = NULL;
	size_t n = 0, k = 0;
	int rc = pg_begin(c);
	if (rc)
		return rc;
	rc = pgb_list_holds(c, NULL, &v, &n);
	for (size_t i = 0; i < n && !rc; i++) {
		int64_t expiry;
		bool alive = false;
		rc = pg_pending_expiry(c, v[i].fp, &expiry);
		rc = rc
		    ? rc
		    : pg_judge(c, &v[i],
			       expiry > HOLD_STALE_S ? expiry : HOLD_STALE_S,
			       &alive);
		if (!rc && !alive) {
			const char *p[] = {v[i].fp, v[i].run_id};
			rc = pg_exec(c,
				     "DELETE FROM holds WHERE fp = $1 AND"
				     " holder = $2",
				     2, p, NULL);
			k += !rc;
		}
	}
	free(v);
	rc = pg_finish(c, rc);
	if (!rc)
		*pruned = k;
	return rc;
}

int pgb_now(struct mf_catalog *c, int64_t *out)
{
	PGresult *r;
	int rc = pg_exec(c, "SELECT " SERVER_NOW, 0, NULL, &r);
	if (rc)
		return rc;
	*out = pg_get_int(r, 0, 0);
	PQclear(r);
	return 0;
}
