/*
 * pg_shard.c - the life of one shard in a PostgreSQL catalog: read, claim
 * (single-flight across hosts), complete, fail, reset, abandon, expire,
 * touch.
 *
 * The claim reads the row with SELECT ... FOR UPDATE: claimers of one
 * shard queue on its row lock, and each decides on the row as the one
 * before it left it. The owner of a running row is judged by the database
 * (pg_judge: its session's advisory lock). Every outcome is one UPDATE
 * whose WHERE names the claim (state and run): a writer that lost its
 * claim changes nothing and learns -ESTALE (fencing). Complete, fail,
 * abandon and reset notify the shard's waiters in the same transaction
 * (pg_notify.c), so only what commits wakes anyone.
 *
 * Not for: the shard's bytes (the store) or running its stages.
 */
#include "pg_i.h"
#include "catalog_sql.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SQL_RESET CAT_SQL_RESET("$1", "$2")

int pg_shard_from_row(const PGresult *r, int row, struct mf_shard_rec *out)
{
	struct mf_shard_rec s = {0};
	int rc = pg_get_copy(r, row, 0, s.fp, sizeof(s.fp), "fp length");
	rc = rc ? rc : cat_state_parse(PQgetvalue(r, row, 2), &s.state);
	rc = rc ? rc
		: pg_get_copy(r, row, 3, s.run_id, sizeof(s.run_id),
			      "run id length");
	rc = rc ? rc : pg_get_dup(r, row, 8, &s.error);
	rc = rc ? rc : pg_get_dup(r, row, 9, &s.stderr_tail);
	if (rc) {
		mf_shard_rec_release(&s);
		return rc;
	}
	s.index = (uint32_t)pg_get_int(r, row, 1);
	s.raw_bytes = (uint64_t)pg_get_int(r, row, 4);
	s.stored_bytes = (uint64_t)pg_get_int(r, row, 5);
	s.chunks = (uint32_t)pg_get_int(r, row, 6);
	s.exit_status = (int32_t)pg_get_int(r, row, 7);
	s.last_read = pg_get_int(r, row, 10);
	s.attempts = (uint32_t)pg_get_int(r, row, 11);
	s.generation = (uint64_t)pg_get_int(r, row, 12);
	*out = s;
	return 0;
}

/* The row of shard index of fp (FOR UPDATE when lock), -ENOENT. */
static int shard_read(struct mf_catalog *c, const char *fp, uint32_t index,
		      bool lock, struct mf_shard_rec *out)
{
	char i[PG_INT_LEN];
	const char *p[] = {fp, pg_int(i, index)};
	PGresult *r;
	int rc = pg_exec(c,
			 lock ? "SELECT " PG_SHARD_COLS " FROM shards WHERE"
				" fp = $1 AND idx = $2 FOR UPDATE"
			      : "SELECT " PG_SHARD_COLS " FROM shards WHERE"
				" fp = $1 AND idx = $2",
			 2, p, &r);
	if (rc)
		return rc;
	rc = PQntuples(r) == 1 ? pg_shard_from_row(r, 0, out) : -ENOENT;
	PQclear(r);
	return rc;
}

int pgb_get_shard(struct mf_catalog *c, const char *fp, uint32_t index,
		  struct mf_shard_rec *out)
{
	return shard_read(c, fp, index, false, out);
}

int pgb_list_shards(struct mf_catalog *c, const char *fp,
		    struct mf_shard_rec **out, size_t *n)
{
	const char *p[] = {fp};
	PGresult *r;
	int rc = pg_exec(c,
			 "SELECT " PG_SHARD_COLS
			 " FROM shards WHERE fp = $1 ORDER BY idx",
			 1, p, &r);
	if (rc)
		return rc;
	int rows = PQntuples(r), i;
	struct mf_shard_rec *a = rows ? calloc((size_t)rows, sizeof(*a)) : NULL;
	if (rows && !a)
		rc = -ENOMEM;
	for (i = 0; !rc && i < rows; i++)
		rc = pg_shard_from_row(r, i, &a[i]);
	PQclear(r);
	if (rc) {
		for (int k = 0; k < i - 1; k++)
			mf_shard_rec_release(&a[k]);
		free(a);
		return rc;
	}
	*out = a;
	*n = (size_t)rows;
	return 0;
}

/* Whether owner, which holds a running shard of fp, is dead: gone from
 * the table, or not alive as the database judges it. */
static int owner_dead(struct mf_catalog *c, const char *fp, const char *owner,
		      bool *dead)
{
	struct mf_run_rec r;
	int64_t expiry;
	bool alive;
	int rc = owner[0] ? pg_run_read(c, owner, &r) : -ENOENT;
	if (rc == -ENOENT) {
		*dead = true;
		return 0;
	}
	rc = rc ? rc : pg_pending_expiry(c, fp, &expiry);
	rc = rc ? rc : pg_judge(c, &r, expiry, &alive);
	if (!rc)
		*dead = !alive;
	return rc;
}

/* Gives the shard to run me: its row added when missing (heartbeat by
 * the server's clock), and refused (-ESTALE) when it is not active. The
 * heartbeat of this process's run (live_pid, its liveness session; 0:
 * not this process's) is written only while that session holds the
 * run's lock (PG_LIVE_HELD): -ENOTCONN when it does not (it was lost
 * with the server since pg_live_lock looked), and the claim is tried
 * again once the session took it back. */
static int shard_take(struct mf_catalog *c, const char *fp, uint32_t index,
		      const struct mf_run_rec *me, int live_pid)
{
	char v[8][PG_INT_LEN], key[PG_INT_LEN];
	struct mf_run_rec mine;
	int64_t gen = 0;
	long changed = 0;
	const char *p[] = {me->run_id,
			   me->fp,
			   me->host,
			   pg_int(v[0], me->pid),
			   pg_int(v[1], (int64_t)me->pid_start),
			   pg_int(v[2], me->started),
			   me->boot_id,
			   pg_int(v[3], (int64_t)me->pid_ns),
			   pg_live_key(key, me->run_id),
			   pg_int(v[6], live_pid)};
	int rc = pg_write(
	    c,
	    "INSERT INTO runs (" PG_RUN_COLS ") SELECT $1, $2, $3,"
	    " $4::bigint, $5::bigint, $6::bigint,"
	    " extract(epoch FROM now())::bigint, 'active', $7, $8::bigint"
	    " WHERE " PG_LIVE_HELD("$9",
				   "$10") " ON CONFLICT (run_id) DO UPDATE SET "
					  "heartbeat = excluded.heartbeat"
					  " WHERE runs.state = 'active'",
	    10, p, &changed);
	rc = rc ? rc : pg_run_read(c, me->run_id, &mine);
	if (!rc && strcmp(mine.state, "active") != 0)
		rc = -ESTALE; /* me was declared dead or done */
	else if ((!rc || rc == -ENOENT) && changed == 0)
		rc = -ENOTCONN; /* its session lost the lock meanwhile */
	rc = rc ? rc : cat_new_generation(&gen);
	if (rc)
		return rc;
	const char *q[] = {fp, pg_int(v[4], index), me->run_id,
			   pg_int(v[5], gen)};
	return pg_exec(c,
		       "UPDATE shards SET state = 'running', run_id = $3,"
		       " attempts = attempts + 1, generation = $4,"
		       " raw_bytes = 0, stored_bytes = 0, chunks = 0,"
		       " exit_status = -1, error = NULL, stderr_tail = NULL"
		       " WHERE fp = $1 AND idx = $2",
		       4, q, NULL);
}

/* The decision, inside the caller's transaction, on the locked row. */
static int claim_decide(struct mf_catalog *c, const char *fp, uint32_t index,
			const struct mf_run_rec *me, uint64_t waited,
			int live_pid, enum mf_claim *res)
{
	struct mf_shard_rec row;
	char owner[MF_RUN_ID_HEX_LEN + 1];
	bool dead;
	/* the snapshot's row before the shard's, as a delete takes them:
	 * no two transactions wait for each other */
	const char *p[] = {fp};
	int rc =
	    pg_exec(c, "SELECT 1 FROM snapshots WHERE fp = $1 FOR KEY SHARE", 1,
		    p, NULL);
	rc = rc ? rc : shard_read(c, fp, index, true, &row);
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
		rc = owner_dead(c, fp, owner, &dead);
		if (rc)
			return rc;
		if (!dead) {
			*res = MF_CLAIM_WAIT;
			return 0;
		}
		rc = pg_run_set_state(c, owner, "dead");
		if (rc && rc != -ENOENT)
			return rc;
	}
	rc = shard_take(c, fp, index, me, live_pid);
	if (!rc)
		*res = MF_CLAIM_MINE;
	return rc;
}

int pgb_claim(struct mf_catalog *c, const char *fp, uint32_t index,
	      const struct mf_run_rec *me, int64_t now, uint64_t waited,
	      enum mf_claim *result, struct mf_shard_rec *cur)
{
	(void)now; /* the database judges liveness */
	struct mf_shard_rec row = {0};
	enum mf_claim res = MF_CLAIM_WAIT;
	/* this process's run is alive while its session is: the lock comes
	 * before the row that names the run can exist */
	int live_pid = 0;
	int rc = cat_run_is_self(me)
	    ? pg_live_lock(pg_db(c)->live, me->run_id, &live_pid)
	    : 0;
	rc = rc ? rc : pg_begin(c);
	if (rc)
		return rc;
	rc = claim_decide(c, fp, index, me, waited, live_pid, &res);
	/* this process's run was declared dead or done: it never claims
	 * again, so its lock (taken back after a reconnect) goes */
	if (rc == -ESTALE && cat_run_is_self(me))
		pg_live_unlock(pg_db(c)->live, me->run_id);
	if (!rc && cur)
		rc = shard_read(c, fp, index, false, &row);
	rc = pg_finish(c, rc);
	if (rc) {
		mf_shard_rec_release(&row);
		return rc;
	}
	*result = res;
	if (cur)
		*cur = row;
	return 0;
}

/* 0 when the last write matched; else -ENOENT when the shard does not
 * exist, -ESTALE when it is not as the write required. */
static int shard_matched(struct mf_catalog *c, long changed, const char *fp,
			 uint32_t index)
{
	struct mf_shard_rec row;
	if (changed > 0)
		return 0;
	int rc = shard_read(c, fp, index, false, &row);
	if (rc)
		return rc;
	mf_shard_rec_release(&row);
	return -ESTALE;
}

/* One conditional UPDATE of a shard ($1 fp, $2 index, then n - 2 more
 * parameters) in its own transaction. Each ends (or undoes) a
 * computation, so the shard's waiters everywhere are notified, at the
 * commit. */
static int shard_update(struct mf_catalog *c, const char *sql, const char *fp,
			uint32_t index, int n, const char **p)
{
	char i[PG_INT_LEN];
	long changed = 0;
	p[0] = fp;
	p[1] = pg_int(i, index);
	int rc = pg_begin(c);
	if (rc)
		return rc;
	rc = pg_write(c, sql, n, p, &changed);
	rc = rc ? rc : shard_matched(c, changed, fp, index);
	if (!rc)
		rc = pg_notify_send(c, fp, index);
	return pg_finish(c, rc);
}

int pgb_complete(struct mf_catalog *c, const char *fp, uint32_t index,
		 const char *run_id, uint64_t raw_bytes, uint64_t stored_bytes,
		 uint32_t chunks)
{
	char v[3][PG_INT_LEN];
	const char *p[] = {NULL,
			   NULL,
			   run_id,
			   pg_int(v[0], (int64_t)raw_bytes),
			   pg_int(v[1], (int64_t)stored_bytes),
			   pg_int(v[2], chunks)};
	/* the fence: only the claim's own run, only while it runs */
	return shard_update(
	    c,
	    "UPDATE shards SET state = 'materialized', raw_bytes = $4,"
	    " stored_bytes = $5, chunks = $6, exit_status = -1, error = NULL,"
	    " stderr_tail = NULL WHERE fp = $1 AND idx = $2 AND"
	    " state = 'running' AND run_id = $3",
	    fp, index, 6, p);
}

int pgb_fail(struct mf_catalog *c, const char *fp, uint32_t index,
	     const char *run_id, int32_t exit_status, const char *error,
	     const char *stderr_tail)
{
	char v[PG_INT_LEN];
	const char *p[] = {NULL,  NULL,	      run_id, pg_int(v, exit_status),
			   error, stderr_tail};
	return shard_update(c,
			    "UPDATE shards SET state = 'failed',"
			    " exit_status = $4, error = $5,"
			    " stderr_tail = $6, raw_bytes = 0,"
			    " stored_bytes = 0, chunks = 0 WHERE fp = $1"
			    " AND idx = $2 AND state = 'running' AND"
			    " run_id = $3",
			    fp, index, 6, p);
}

int pgb_reset(struct mf_catalog *c, const char *fp, uint32_t index,
	      const char *run_id)
{
	const char *p[] = {NULL, NULL, run_id};
	if (run_id)
		return shard_update(c,
				    SQL_RESET " AND state IN ('materialized',"
					      " 'failed') AND run_id = $3",
				    fp, index, 3, p);
	return shard_update(c, SQL_RESET, fp, index, 2, p);
}

int pgb_abandon(struct mf_catalog *c, const char *fp, uint32_t index,
		const char *run_id)
{
	const char *p[] = {NULL, NULL, run_id};
	return shard_update(c,
			    SQL_RESET " AND state = 'running' AND run_id = $3",
			    fp, index, 3, p);
}

/* Expires r if its row is still as listed; *done says whether. */
static int expire_rec(struct mf_catalog *c, const struct mf_shard_rec *r,
		      bool *done)
{
	char i[PG_INT_LEN], g[PG_INT_LEN];
	long changed = 0;
	*done = false;
	if (!cat_expirable(r))
		return 0;
	const char *p[] = {r->fp, pg_int(i, r->index),
			   mf_shard_state_name(r->state),
			   pg_int(g, (int64_t)r->generation)};
	int rc = pg_write(c, SQL_RESET " AND state = $3 AND generation = $4", 4,
			  p, &changed);
	*done = rc == 0 && changed > 0;
	return rc;
}

static const struct cat_tx pg_tx = {pg_begin, pg_finish};

int pgb_expire(struct mf_catalog *c, const struct mf_shard_rec *recs, size_t n,
	       bool *expired)
{
	return cat_expire_each(c, &pg_tx, expire_rec, recs, n, expired);
}

/* now is read by the server's clock, never the host's: the now given is
 * not used */
static int touch_snap(struct mf_catalog *c, const char *fp, int64_t now)
{
	(void)now;
	const char *p[] = {fp};
	return pg_exec(c,
		       "UPDATE snapshots SET last_read = GREATEST(last_read,"
		       " " PG_SERVER_NOW ") WHERE fp = $1",
		       1, p, NULL);
}

static int touch_shard(struct mf_catalog *c, const char *fp, uint32_t index,
		       int64_t now, long *changed)
{
	(void)now;
	char i[PG_INT_LEN];
	const char *p[] = {fp, pg_int(i, index)};
	return pg_write(c,
			"UPDATE shards SET last_read = GREATEST(last_read,"
			" " PG_SERVER_NOW ") WHERE fp = $1 AND idx = $2",
			2, p, changed);
}

int pgb_touch(struct mf_catalog *c, const char *fp, uint32_t index, int64_t now)
{
	return cat_touch_both(c, &pg_tx, touch_snap, touch_shard, fp, index,
			      now);
}
