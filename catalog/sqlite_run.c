/*
 * sqlite_run.c - run rows: one process's attempt to materialize (host,
 * boot id, pid namespace, pid and its start time, heartbeat, state
 * "active", "done" or "dead").
 *
 * Not for: whether a run is alive (mf_catalog_run_alive, catalog.c),
 * taking shards from dead runs (sqlite_shard.c) or the run's files in the
 * store.
 */
#include "sqlite_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_COLS                                                               \
	"run_id, fp, host, pid, pid_start, started, heartbeat, state,"         \
	" boot_id, pid_ns"
#define RUN_VALUES " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"

static const char sql_add[] = "INSERT INTO runs (" RUN_COLS ")" RUN_VALUES;
/* A claimer's own row: added when missing, its heartbeat refreshed when
 * it is still active (a run reused after a quiet spell must not look dead
 * to other hosts at the moment it takes a shard). */
static const char sql_ensure[] =
    "INSERT INTO runs (" RUN_COLS ")" RUN_VALUES
    " ON CONFLICT (run_id) DO UPDATE SET heartbeat = excluded.heartbeat"
    " WHERE state = 'active' AND heartbeat < excluded.heartbeat";
static const char sql_get[] = "SELECT " RUN_COLS " FROM runs WHERE run_id = ?1";
static const char sql_list[] = "SELECT " RUN_COLS " FROM runs"
			       " WHERE ?1 IS NULL OR fp = ?1"
			       " ORDER BY started, run_id";
static const char sql_heartbeat[] =
    "UPDATE runs SET heartbeat = ?2 WHERE run_id = ?1";
static const char sql_set_state[] =
    "UPDATE runs SET state = ?2 WHERE run_id = ?1";
static const char sql_del[] = "DELETE FROM runs WHERE run_id = ?1";

int cat_run_bind(struct mf_catalog *c, sqlite3_stmt *st,
		 const struct mf_run_rec *r)
{
	int rc = cat_bind_text(c, st, 1, r->run_id);
	rc = rc ? rc : cat_bind_text(c, st, 2, r->fp);
	rc = rc ? rc : cat_bind_text(c, st, 3, r->host);
	rc = rc ? rc : cat_bind_int64(c, st, 4, r->pid);
	rc = rc ? rc : cat_bind_int64(c, st, 5, (int64_t)r->pid_start);
	rc = rc ? rc : cat_bind_int64(c, st, 6, r->started);
	rc = rc ? rc : cat_bind_int64(c, st, 7, r->heartbeat);
	rc = rc ? rc : cat_bind_text(c, st, 8, r->state);
	rc = rc ? rc : cat_bind_text(c, st, 9, r->boot_id);
	rc = rc ? rc : cat_bind_int64(c, st, 10, (int64_t)r->pid_ns);
	return rc;
}

static int run_insert(struct mf_catalog *c, enum cat_stmt_id id,
		      const char *sql, const struct mf_run_rec *r)
{
	sqlite3_stmt *st;
	int rc = cat_stmt(c, id, sql, &st);
	if (rc)
		return rc;
	rc = cat_run_bind(c, st, r);
	if (!rc)
		rc = cat_step_done(c, st);
	cat_stmt_put(st);
	return rc;
}

int cat_run_ensure(struct mf_catalog *c, const struct mf_run_rec *r)
{
	struct mf_run_rec active = *r;
	snprintf(active.state, sizeof(active.state), "active");
	if (!cat_run_valid(&active))
		return -EINVAL;
	return run_insert(c, CAT_RUN_ENSURE, sql_ensure, &active);
}

int sq_add_run(struct mf_catalog *c, const struct mf_run_rec *run)
{
	int rc = cat_begin(c);
	if (rc)
		return rc;
	rc = run_insert(c, CAT_RUN_ADD, sql_add, run);
	if (rc) {
		cat_rollback(c);
		return rc;
	}
	return cat_commit(c);
}

/* A row of RUN_COLS into *out, written only on success. */
int cat_run_from_row(sqlite3_stmt *st, struct mf_run_rec *out)
{
	struct mf_run_rec r = {0};
	int rc =
	    cat_col_copy(st, 0, r.run_id, sizeof(r.run_id), "run id length");
	rc = rc ? rc : cat_col_copy(st, 1, r.fp, sizeof(r.fp), "fp length");
	rc = rc ? rc
		: cat_col_copy(st, 2, r.host, sizeof(r.host), "host length");
	rc = rc
	    ? rc
	    : cat_col_copy(st, 7, r.state, sizeof(r.state), "run state length");
	rc = rc ? rc
		: cat_col_copy(st, 8, r.boot_id, sizeof(r.boot_id),
			       "boot id length");
	if (rc)
		return rc;
	r.pid_ns = (uint64_t)sqlite3_column_int64(st, 9);
	r.pid = (int32_t)sqlite3_column_int64(st, 3);
	r.pid_start = (uint64_t)sqlite3_column_int64(st, 4);
	r.started = sqlite3_column_int64(st, 5);
	r.heartbeat = sqlite3_column_int64(st, 6);
	*out = r;
	return 0;
}

static int run_row(sqlite3_stmt *st, void *elem)
{
	return cat_run_from_row(st, elem);
}

int cat_run_read(struct mf_catalog *c, const char *run_id,
		 struct mf_run_rec *out)
{
	return cat_read_one(c, CAT_RUN_GET, sql_get, run_id, run_row, out);
}

int sq_get_run(struct mf_catalog *c, const char *run_id, struct mf_run_rec *out)
{
	return cat_run_read(c, run_id, out);
}

int sq_list_runs(struct mf_catalog *c, const char *fp, struct mf_run_rec **out,
		 size_t *n)
{
	return cat_runs_select(c, CAT_RUN_LIST, sql_list, fp, out, n);
}

int cat_runs_select(struct mf_catalog *c, enum cat_stmt_id id, const char *sql,
		    const char *fp, struct mf_run_rec **out, size_t *n)
{
	void *a = NULL;
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, id, sql, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, fp);
	rc = rc ? rc : cat_collect(c, st, sizeof(**out), run_row, NULL, &a, n);
	cat_stmt_put(st);
	if (!rc)
		*out = a;
	return rc;
}

int cat_run_set_state(struct mf_catalog *c, const char *run_id,
		      const char *state)
{
	sqlite3_stmt *st;
	int rc = cat_stmt(c, CAT_RUN_SET_STATE, sql_set_state, &st);
	if (rc)
		return rc;
	rc = cat_bind_text(c, st, 1, run_id);
	rc = rc ? rc : cat_bind_text(c, st, 2, state);
	rc = rc ? rc : cat_step_done(c, st);
	if (!rc && cat_changes(c) == 0)
		rc = -ENOENT;
	cat_stmt_put(st);
	return rc;
}

/* One UPDATE or DELETE of the row run_id (?1, and ?2 = v2 unless NULL) in
 * its own transaction; -ENOENT when no row matched. */
static int run_write(struct mf_catalog *c, enum cat_stmt_id id, const char *sql,
		     const char *run_id, const int64_t *v2)
{
	sqlite3_stmt *st;
	int rc = cat_begin(c);
	if (rc)
		return rc;
	rc = cat_stmt(c, id, sql, &st);
	if (rc)
		goto out_rollback;
	rc = cat_bind_text(c, st, 1, run_id);
	if (!rc && v2)
		rc = cat_bind_int64(c, st, 2, *v2);
	rc = rc ? rc : cat_step_done(c, st);
	if (!rc && cat_changes(c) == 0)
		rc = -ENOENT;
	cat_stmt_put(st);
	if (rc)
		goto out_rollback;
	return cat_commit(c);

out_rollback:
	cat_rollback(c);
	return rc;
}

int sq_heartbeat(struct mf_catalog *c, const char *run_id, int64_t now)
{
	return run_write(c, CAT_RUN_HEARTBEAT, sql_heartbeat, run_id, &now);
}

int sq_set_run_state(struct mf_catalog *c, const char *run_id,
		     const char *state)
{
	int rc = cat_begin(c);
	if (rc)
		return rc;
	rc = cat_run_set_state(c, run_id, state);
	if (rc) {
		cat_rollback(c);
		return rc;
	}
	return cat_commit(c);
}

int sq_delete_run(struct mf_catalog *c, const char *run_id)
{
	return run_write(c, CAT_RUN_DEL, sql_del, run_id, NULL);
}
