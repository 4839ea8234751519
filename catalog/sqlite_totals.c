/*
 * sqlite_totals.c - the SQLite catalog's totals (schema version 6): the
 * counters every process that computes shards adds to, kept in the table
 * `totals` as one (key, value) row per counter, and the shards running
 * now, for `matctl stats` with no daemon.
 *
 * Not for: anything a reader of the mount does (a write per read would
 * serialize readers on the catalog's lock); the daemon's own counters live
 * in its memory (fs/fuse, fs/engine).
 */
#include "sqlite_i.h"
#include "catalog_sql.h"

#include <errno.h>
#include <string.h>

static const char sql_add[] = CAT_SQL_TOTALS_ADD("?1", "?2");
static const char sql_get[] = CAT_SQL_TOTALS_GET;
static const char sql_running[] = CAT_SQL_RUNNING;

static int add_one(struct mf_catalog *c, const char *key, uint64_t v)
{
	if (v == 0)
		return 0;
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, CAT_TOTALS_ADD, sql_add, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, key);
	rc = rc ? rc : cat_bind_int64(c, st, 2, (int64_t)v);
	rc = rc ? rc : cat_step_done(c, st);
	cat_stmt_put(st);
	return rc;
}

static const struct cat_tx sq_tx = {cat_begin, cat_finish};

int sq_add_totals(struct mf_catalog *c, const struct mf_catalog_totals *d)
{
	return cat_totals_add(c, &sq_tx, add_one, d);
}

/* Reads the totals rows into *out; a key this version does not know (a
 * newer one added it) is left out. */
static int read_rows(struct mf_catalog *c, struct mf_catalog_totals *out)
{
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, CAT_TOTALS_GET, sql_get, &st);
	while (rc == 0 && (rc = cat_step_row(c, st)) == 1) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		sqlite3_int64 v = sqlite3_column_int64(st, 1);
		rc = cat_totals_take(out, key, (int64_t)v);
		if (rc)
			break;
	}
	cat_stmt_put(st);
	return rc < 0 ? rc : 0;
}

int sq_get_totals(struct mf_catalog *c, struct mf_catalog_totals *out)
{
	struct mf_catalog_totals t = {0};
	sqlite3_stmt *st = NULL;
	int rc = read_rows(c, &t);
	rc = rc ? rc : cat_stmt(c, CAT_TOTALS_RUNNING, sql_running, &st);
	rc = rc ? rc : cat_step_row(c, st);
	if (rc == 1) {
		t.running = (uint64_t)sqlite3_column_int64(st, 0);
		rc = 0;
	} else if (rc == 0) {
		rc = -EIO; /* count(*) always answers a row */
	}
	cat_stmt_put(st);
	if (rc == 0)
		*out = t;
	return rc;
}
