/*
 * sqlite_schema.c - the SQLite catalog's schema, as an ordered list of forward
 * migrations: migration k takes PRAGMA user_version from k-1 to k, each in
 * its own BEGIN IMMEDIATE transaction, so two processes opening a fresh
 * catalog at once apply each step exactly once.
 *
 * Not for: reading or writing rows. A released migration is never edited:
 * a new schema is a new migration appended to the list (and a checked-in
 * database of the old version in tests/catalog/ keeps it honest).
 */
#include "sqlite_i.h"

#include <errno.h>

/* Version 1: snapshots, runs and shards. `registered` orders the
 * registrations of a name (1 + the largest so far), for find_name. */
static const char migration_1[] =
    "CREATE TABLE snapshots ("
    " fp TEXT NOT NULL PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " shards INTEGER NOT NULL CHECK (shards > 0),"
    " spec_path TEXT NOT NULL,"
    " compression TEXT NOT NULL,"
    " suffix TEXT NOT NULL DEFAULT '',"
    " chunk_size INTEGER NOT NULL,"
    " expire_after INTEGER NOT NULL DEFAULT -1,"
    " pending_expiry INTEGER NOT NULL,"
    " keep INTEGER NOT NULL DEFAULT 0,"
    " created INTEGER NOT NULL,"
    " last_read INTEGER NOT NULL DEFAULT 0,"
    " registered INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX snapshots_name ON snapshots (name, registered);"
    "CREATE TABLE runs ("
    " run_id TEXT NOT NULL PRIMARY KEY,"
    " fp TEXT NOT NULL REFERENCES snapshots (fp) ON DELETE CASCADE,"
    " host TEXT NOT NULL,"
    " pid INTEGER NOT NULL,"
    " pid_start INTEGER NOT NULL,"
    " started INTEGER NOT NULL,"
    " heartbeat INTEGER NOT NULL,"
    " state TEXT NOT NULL CHECK (state IN ('active', 'done', 'dead')));"
    "CREATE INDEX runs_fp ON runs (fp);"
    "CREATE TABLE shards ("
    " fp TEXT NOT NULL REFERENCES snapshots (fp) ON DELETE CASCADE,"
    " idx INTEGER NOT NULL CHECK (idx >= 0),"
    " state TEXT NOT NULL DEFAULT 'absent' CHECK (state IN"
    " ('absent', 'running', 'materialized', 'failed')),"
    " run_id TEXT,"
    " raw_bytes INTEGER NOT NULL DEFAULT 0,"
    " stored_bytes INTEGER NOT NULL DEFAULT 0,"
    " chunks INTEGER NOT NULL DEFAULT 0,"
    " exit_status INTEGER NOT NULL DEFAULT -1,"
    " error TEXT,"
    " last_read INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (fp, idx)) WITHOUT ROWID;"
    "PRAGMA user_version = 1;";

/* Version 2: a failed stage's stderr tail, the number of attempts, and
 * indexes for eviction by last read. */
static const char migration_2[] =
    "ALTER TABLE shards ADD COLUMN stderr_tail TEXT;"
    "ALTER TABLE shards ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX shards_last_read ON shards (last_read);"
    "CREATE INDEX snapshots_last_read ON snapshots (last_read);"
    "PRAGMA user_version = 2;";

/* Version 3: the generation of a shard's computation, a random nonzero
 * 63-bit number set by each claim, so that one computation is told from
 * another even when run id and attempts repeat (rows deleted and made
 * again, a run that computes a shard again); 0 for an absent shard. Rows
 * an older version left running, materialized or failed get one now. */
static const char migration_3[] =
    "ALTER TABLE shards ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;"
    "UPDATE shards SET generation = max(1, random() & 9223372036854775807)"
    " WHERE state <> 'absent';"
    "PRAGMA user_version = 3;";

/* Version 4: where a run's pid means something - the kernel's boot id and
 * the inode of its pid namespace. Rows from before say '' and 0: their
 * liveness is judged by heartbeat alone (mf_catalog_run_alive). */
static const char migration_4[] =
    "ALTER TABLE runs ADD COLUMN boot_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE runs ADD COLUMN pid_ns INTEGER NOT NULL DEFAULT 0;"
    "PRAGMA user_version = 4;";

/* Version 5: holds - which processes serve a snapshot (have a spec
 * registered that yields it), so that another process's expiry keeps its
 * row. Liveness columns as in runs. */
static const char migration_5[] =
    "CREATE TABLE holds ("
    " fp TEXT NOT NULL REFERENCES snapshots (fp) ON DELETE CASCADE,"
    " holder TEXT NOT NULL,"
    " host TEXT NOT NULL,"
    " pid INTEGER NOT NULL,"
    " pid_start INTEGER NOT NULL,"
    " heartbeat INTEGER NOT NULL,"
    " boot_id TEXT NOT NULL,"
    " pid_ns INTEGER NOT NULL,"
    " PRIMARY KEY (fp, holder)) WITHOUT ROWID;"
    "CREATE INDEX holds_holder ON holds (holder);"
    "PRAGMA user_version = 5;";

/* Version 6: totals - counters every process that computes adds to
 * (materializations started and failed, the milliseconds they took), one
 * row per counter, for `matctl stats` without a daemon. */
static const char migration_6[] =
    "CREATE TABLE totals ("
    " key TEXT NOT NULL PRIMARY KEY,"
    " value INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
    "PRAGMA user_version = 6;";

/* Version 7: snapshots.owner - the uid of the spec that recorded the row
 * first (-1: unknown), so that another owner's spec never shares its
 * computation (docs/security.md). */
static const char migration_7[] =
    "ALTER TABLE snapshots ADD COLUMN owner INTEGER NOT NULL DEFAULT -1;"
    "PRAGMA user_version = 7;";

/* migrations[k] takes the schema from version k to k + 1 */
static const char *const migrations[] = {migration_1, migration_2, migration_3,
					 migration_4, migration_5, migration_6,
					 migration_7};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) ==
		   MF_CATALOG_SCHEMA_VERSION,
	       "one migration per schema version");

int cat_schema_version(sqlite3 *db, int *version)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*version = sqlite3_column_int(st, 0);
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : cat_errno(db, rc);
}

static int exec(sqlite3 *db, const char *sql)
{
	int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	return rc == SQLITE_OK ? 0 : cat_errno(db, rc);
}

/* One step under BEGIN IMMEDIATE: *done when nothing was left to do. The
 * version is read again inside the transaction, where no other writer can
 * change it. */
static int migrate_step(sqlite3 *db, bool *done)
{
	int version;
	int rc = exec(db, "BEGIN IMMEDIATE");
	if (rc)
		return rc;
	rc = cat_schema_version(db, &version);
	if (rc)
		goto out_rollback;
	if (version < 0 || version > MF_CATALOG_SCHEMA_VERSION) {
		rc = version < 0 ? MF_CORRUPT("negative schema version")
				 : -EPROTO;
		goto out_rollback;
	}
	*done = version == MF_CATALOG_SCHEMA_VERSION;
	if (!*done) {
		rc = exec(db, migrations[version]);
		if (rc)
			goto out_rollback;
	}
	rc = exec(db, "COMMIT");
	if (rc)
		goto out_rollback;
	return 0;

out_rollback:
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

int cat_migrate(sqlite3 *db)
{
	int version;
	int rc = cat_schema_version(db, &version);
	if (rc)
		return rc;
	/* the common case takes no write lock */
	bool done = version == MF_CATALOG_SCHEMA_VERSION;
	while (!done) {
		rc = migrate_step(db, &done);
		if (rc)
			return rc;
	}
	return 0;
}
