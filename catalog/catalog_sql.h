/*
 * catalog_sql.h - what the two SQL backends share: the statements both
 * dialects take, written once with their placeholders as parameters
 * (PostgreSQL's "$1", SQLite's "?1": the one difference kept explicit at
 * each use), and the loops around the statements that differ (the
 * transaction, a statement's own placeholders or clock). The server's
 * clock is PostgreSQL's alone (now() in pg_*.c); SQLite's statements take
 * the host's time as a parameter.
 *
 * Not for: a statement only one dialect takes, or a backend's connection
 * (pg_conn.c, sqlite_db.c).
 */
#ifndef MF_CATALOG_SQL_H
#define MF_CATALOG_SQL_H

#include "catalog_backend.h"

/* A snapshot row with the totals of its materialized shards (a row of
 * CAT_SQL_SNAP_SELECT: pg_snapshot_from_row, sqlite_snap.c's snap_row). */
#define CAT_SQL_SNAP_SELECT                                                    \
	"SELECT s.fp, s.name, s.shards, s.spec_path, s.compression,"           \
	" s.suffix, s.chunk_size, s.expire_after, s.pending_expiry, s.keep,"   \
	" s.created, s.last_read, COUNT(h.idx),"                               \
	" COALESCE(SUM(h.raw_bytes), 0), COALESCE(SUM(h.stored_bytes), 0),"    \
	" s.owner FROM snapshots s LEFT JOIN shards h"                         \
	" ON h.fp = s.fp AND h.state = 'materialized'"
/* The snapshot of fingerprint FP (a placeholder). */
#define CAT_SQL_SNAP_GET(FP)                                                   \
	CAT_SQL_SNAP_SELECT " WHERE s.fp = " FP " GROUP BY s.fp"
#define CAT_SQL_SNAP_LIST                                                      \
	CAT_SQL_SNAP_SELECT " GROUP BY s.fp ORDER BY s.name, s.created, s.fp"

/* A shard back to absent: FP and IDX placeholders. */
#define CAT_SQL_RESET(FP, IDX)                                                 \
	"UPDATE shards SET state = 'absent', run_id = NULL, raw_bytes = 0,"    \
	" stored_bytes = 0, chunks = 0, exit_status = -1, error = NULL,"       \
	" stderr_tail = NULL, generation = 0 WHERE fp = " FP " AND idx = " IDX

/* A counter added to: KEY and VALUE placeholders. */
#define CAT_SQL_TOTALS_ADD(KEY, VALUE)                                         \
	"INSERT INTO totals (key, value) VALUES (" KEY ", " VALUE ")"          \
	" ON CONFLICT (key) DO UPDATE"                                         \
	" SET value = totals.value + excluded.value"
#define CAT_SQL_TOTALS_GET "SELECT key, value FROM totals"
#define CAT_SQL_RUNNING "SELECT count(*) FROM shards WHERE state = 'running'"

/* A backend's transaction: begin, then finish with the outcome (commit on
 * 0, else roll back), answering it. */
struct cat_tx {
	int (*begin)(struct mf_catalog *c);
	int (*finish)(struct mf_catalog *c, int rc);
};

/* Inside a put's transaction: 0, or -EEXIST when fp's row (read by get)
 * has an owner and rec another one (mf_catalog_put_snapshot). */
int cat_owner_check(struct mf_catalog *c, const struct mf_snapshot_rec *rec,
		    int (*get)(struct mf_catalog *c, const char *fp,
			       struct mf_snapshot_rec *out));

/* Whether a listed row may be expired (materialized or failed). */
bool cat_expirable(const struct mf_shard_rec *r);
/* The expire loop: in one transaction, each of recs expired by one (which
 * sets *done when its row was still as listed). */
int cat_expire_each(struct mf_catalog *c, const struct cat_tx *tx,
		    int (*one)(struct mf_catalog *c,
			       const struct mf_shard_rec *r, bool *done),
		    const struct mf_shard_rec *recs, size_t n, bool *expired);
/* The touch: in one transaction the snapshot's last read, then the
 * shard's (the order a delete takes them in), each moved to now where
 * older; -ENOENT when the shard has no row (shard says so: *changed 0). */
int cat_touch_both(struct mf_catalog *c, const struct cat_tx *tx,
		   int (*snap)(struct mf_catalog *c, const char *fp,
			       int64_t now),
		   int (*shard)(struct mf_catalog *c, const char *fp,
				uint32_t index, int64_t now, long *changed),
		   const char *fp, uint32_t index, int64_t now);
/* The counters of d added, in one transaction, by add (one counter). */
int cat_totals_add(struct mf_catalog *c, const struct cat_tx *tx,
		   int (*add)(struct mf_catalog *c, const char *key,
			      uint64_t v),
		   const struct mf_catalog_totals *d);
/* The row (key, v) of table totals into *t: a key this version does not
 * know (a newer one added it) is left out; a negative v is corrupt. */
int cat_totals_take(struct mf_catalog_totals *t, const char *key, int64_t v);

#endif
