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

#include <errno.h>
#include <string.h>

static const char sql_add[] =
    "INSERT INTO totals (key, value) VALUES (?1, ?2)"
    " ON CONFLICT (key) DO UPDATE SET value = value + excluded.value";
static const char sql_get[] = "SELECT key, value FROM totals";
static const char sql_running[] =
    "SELECT count(*) FROM shards WHERE state = 'running'";

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

int sq_add_totals(struct mf_catalog *c, const struct mf_catalog_totals *d)
{
	int rc = cat_begin(c);
	if (rc)
		return rc;
	rc = add_one(c, "started", d->started);
	rc = rc ? rc : add_one(c, "failed", d->failed);
	rc = rc ? rc : add_one(c, "stage_ms", d->stage_ms);
	return cat_finish(c, rc);
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
		rc = 0;
		if (!key || v < 0) {
			rc = MF_CORRUPT("totals row");
			break;
		}
		if (strcmp(key, "started") == 0)
			out->started = (uint64_t)v;
		else if (strcmp(key, "failed") == 0)
			out->failed = (uint64_t)v;
		else if (strcmp(key, "stage_ms") == 0)
			out->stage_ms = (uint64_t)v;
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
