/*
 * pg_totals.c - the PostgreSQL catalog's totals (schema version 2): the
 * counters every process that computes shards adds to, one (key, value)
 * row per counter in table `totals`, and the shards running now, as
 * sqlite_totals.c keeps them for `matctl stats` with no daemon.
 *
 * Not for: a reader's counters (they live in the daemon's memory).
 */
#include "pg_i.h"
#include "catalog_sql.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int add_one(struct mf_catalog *c, const char *key, uint64_t v)
{
	if (v == 0)
		return 0;
	char b[PG_INT_LEN];
	const char *p[] = {key, pg_int(b, (int64_t)v)};
	return pg_exec(c, CAT_SQL_TOTALS_ADD("$1", "$2"), 2, p, NULL);
}

static const struct cat_tx pg_tx = {pg_begin, pg_finish};

int pgb_add_totals(struct mf_catalog *c, const struct mf_catalog_totals *d)
{
	return cat_totals_add(c, &pg_tx, add_one, d);
}

int pgb_get_totals(struct mf_catalog *c, struct mf_catalog_totals *out)
{
	struct mf_catalog_totals t = {0};
	PGresult *r = NULL;
	int rc =
	    pg_exec(c,
		    CAT_SQL_TOTALS_GET " UNION ALL"
				       " SELECT 'running', count(*) FROM shards"
				       " WHERE state = 'running'",
		    0, NULL, &r);
	for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
		const char *key = PQgetvalue(r, i, 0);
		int64_t v = pg_get_int(r, i, 1);
		if (v >= 0 && strcmp(key, "running") == 0)
			t.running = (uint64_t)v;
		else
			rc = cat_totals_take(&t, key, v);
	}
	PQclear(r);
	if (rc == 0)
		*out = t;
	return rc;
}
