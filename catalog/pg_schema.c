/*
 * pg_schema.c - the PostgreSQL catalog's schema, as an ordered list of
 * forward migrations: migration k takes the row of table schema_version
 * from k-1 to k. All of them run in one transaction that first takes an
 * advisory lock, so processes opening a fresh catalog at once apply each
 * step exactly once. Tables go into the first schema of the connection's
 * search_path (libpq's options=-csearch_path=NAME); the role needs only
 * CREATE on that schema.
 *
 * Not for: reading or writing rows. A released migration is never edited:
 * a new schema is a new migration appended to the list.
 */
#include "pg_i.h"

#include <errno.h>
#include <stdlib.h>

/* Version 1: the tables of SQLite's schema 5, in PostgreSQL's types,
 * and meta (the index mark). Times are unix seconds of the server's
 * clock where the backend writes them (heartbeats). */
static const char migration_1[] =
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);"
    "CREATE TABLE snapshots ("
    " fp text NOT NULL PRIMARY KEY,"
    " name text NOT NULL,"
    " shards bigint NOT NULL CHECK (shards > 0),"
    " spec_path text NOT NULL,"
    " compression text NOT NULL,"
    " suffix text NOT NULL DEFAULT '',"
    " chunk_size bigint NOT NULL,"
    " expire_after bigint NOT NULL DEFAULT -1,"
    " pending_expiry bigint NOT NULL,"
    " keep bigint NOT NULL DEFAULT 0,"
    " created bigint NOT NULL,"
    " last_read bigint NOT NULL DEFAULT 0,"
    " registered bigint NOT NULL DEFAULT 0);"
    "CREATE INDEX snapshots_name ON snapshots (name, registered);"
    "CREATE INDEX snapshots_last_read ON snapshots (last_read);"
    "CREATE TABLE runs ("
    " run_id text NOT NULL PRIMARY KEY,"
    " fp text NOT NULL REFERENCES snapshots (fp) ON DELETE CASCADE,"
    " host text NOT NULL,"
    " pid bigint NOT NULL,"
    " pid_start bigint NOT NULL,"
    " started bigint NOT NULL,"
    " heartbeat bigint NOT NULL,"
    " state text NOT NULL CHECK (state IN ('active', 'done', 'dead')),"
    " boot_id text NOT NULL DEFAULT '',"
    " pid_ns bigint NOT NULL DEFAULT 0);"
    "CREATE INDEX runs_fp ON runs (fp);"
    "CREATE TABLE shards ("
    " fp text NOT NULL REFERENCES snapshots (fp) ON DELETE CASCADE,"
    " idx bigint NOT NULL CHECK (idx >= 0),"
    " state text NOT NULL DEFAULT 'absent' CHECK (state IN"
    " ('absent', 'running', 'materialized', 'failed')),"
    " run_id text,"
    " raw_bytes bigint NOT NULL DEFAULT 0,"
    " stored_bytes bigint NOT NULL DEFAULT 0,"
    " chunks bigint NOT NULL DEFAULT 0,"
    " exit_status bigint NOT NULL DEFAULT -1,"
    " error text,"
    " stderr_tail text,"
    " last_read bigint NOT NULL DEFAULT 0,"
    " attempts bigint NOT NULL DEFAULT 0,"
    " generation bigint NOT NULL DEFAULT 0,"
    " PRIMARY KEY (fp, idx));"
    "CREATE INDEX shards_last_read ON shards (last_read);"
    "CREATE TABLE holds ("
    " fp text NOT NULL REFERENCES snapshots (fp) ON DELETE CASCADE,"
    " holder text NOT NULL,"
    " host text NOT NULL,"
    " pid bigint NOT NULL,"
    " pid_start bigint NOT NULL,"
    " heartbeat bigint NOT NULL,"
    " boot_id text NOT NULL,"
    " pid_ns bigint NOT NULL,"
    " PRIMARY KEY (fp, holder));"
    "CREATE INDEX holds_holder ON holds (holder);";

/* Version 2: totals - counters every process that computes adds to
 * (pg_totals.c). */
static const char migration_2[] =
    "CREATE TABLE totals (key text PRIMARY KEY, value bigint NOT NULL);";

/* Version 3: snapshots.owner, as SQLite's version 7. */
static const char migration_3[] =
    "ALTER TABLE snapshots ADD COLUMN owner bigint NOT NULL DEFAULT -1;";

/* migrations[k] takes the schema from version k to k + 1 */
static const char *const migrations[] = {migration_1, migration_2, migration_3};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == PG_SCHEMA_VERSION,
	       "one migration per schema version");

int pg_schema_version(struct mf_catalog *c, int *version)
{
	PGresult *r;
	/* to_regclass: NULL, not an error, before the first migration */
	int rc = pg_exec(c,
			 "SELECT CASE WHEN to_regclass('schema_version') IS"
			 " NULL THEN 0 ELSE -1 END",
			 0, NULL, &r);
	if (rc)
		return rc;
	bool exists = pg_get_int(r, 0, 0) != 0;
	PQclear(r);
	if (!exists) {
		*version = 0;
		return 0;
	}
	rc = pg_exec(c, "SELECT max(version) FROM schema_version", 0, NULL, &r);
	if (rc)
		return rc;
	*version = (int)pg_get_int(r, 0, 0);
	PQclear(r);
	return 0;
}

/* Inside the transaction, under the lock. */
static int migrate_locked(struct mf_catalog *c)
{
	int version;
	char v[PG_INT_LEN];
	int rc = pg_exec(c,
			 "CREATE TABLE IF NOT EXISTS schema_version"
			 " (version integer NOT NULL)",
			 0, NULL, NULL);
	rc = rc ? rc : pg_schema_version(c, &version);
	if (rc)
		return rc;
	if (version > PG_SCHEMA_VERSION)
		return -EPROTO; /* newer code wrote it: leave it untouched */
	if (version < 0)
		return MF_CORRUPT("negative schema version");
	for (; version < PG_SCHEMA_VERSION; version++) {
		/* several statements: the simple protocol */
		PGresult *r = PQexec(pg_db(c)->conn, migrations[version]);
		rc = PQresultStatus(r) == PGRES_COMMAND_OK
		    ? 0
		    : pg_errno(pg_db(c)->conn, r);
		PQclear(r);
		if (rc)
			return rc;
	}
	const char *p[] = {pg_int(v, version)};
	rc = pg_exec(c, "DELETE FROM schema_version", 0, NULL, NULL);
	return rc
	    ? rc
	    : pg_exec(c, "INSERT INTO schema_version VALUES ($1)", 1, p, NULL);
}

int pg_migrate(struct mf_catalog *c)
{
	int version;
	int rc = pg_schema_version(c, &version);
	if (rc)
		return rc;
	if (version > PG_SCHEMA_VERSION)
		return -EPROTO;
	if (version == PG_SCHEMA_VERSION)
		return 0; /* the common case writes nothing */
	rc = pg_begin(c);
	if (rc)
		return rc;
	rc = pg_exec(c, "SELECT pg_advisory_xact_lock(" PG_MIGRATE_LOCK ")", 0,
		     NULL, NULL);
	rc = rc ? rc : migrate_locked(c);
	return pg_finish(c, rc);
}
