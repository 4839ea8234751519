/*
 * pg_live.c - liveness from the database: this process's liveness session
 * (one connection per location, shared by every handle of the process,
 * closed with the last of them) holds a session-level advisory lock for
 * each of its runs and holders, and a judge elsewhere tries to take that
 * lock. The server ends the session of a process that exits or dies, and
 * of a host that stops answering its keepalives (pg_conn.c), and with it
 * the locks: no pid is looked up, no host clock compared.
 *
 * Not for: which rows a process claims (pg_shard.c). The connection is
 * used under live_mu only.
 */
#include "pg_i.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A run's heartbeat older than this many seconds by the server's clock is
 * dead even while its session holds the lock (a process that hangs): six
 * heartbeats of an engine, as on one host. */
#define STALE_MIN_S MF_RUN_STALE_MIN_S

/* A server that restarted lost every session, and so every advisory
 * lock: a live process takes its locks back at its next heartbeat (every
 * 5 s, pg_live_ping before the heartbeat is written). Until this many
 * seconds after the server started, a run whose last heartbeat is from
 * before the start is not judged by its lock, only by its heartbeat. */
#define RESTART_GRACE_S 20

struct pg_live {
	struct pg_session s; /* first: the registry's entry */
	PGconn *conn; /* NULL until the first lock, or after a failure */
	int64_t *keys; /* the locks this session holds */
	size_t n, cap;
};

/* Guards the registry of sessions and every field of its entries. */
static pthread_mutex_t live_mu = MF_MUTEX_INITIALIZER;

static struct pg_session *live_make(void)
{
	struct pg_live *l = calloc(1, sizeof(*l));
	return l ? &l->s : NULL;
}

static void live_drop(struct pg_session *s)
{
	struct pg_live *l = (struct pg_live *)s;
	PQfinish(l->conn); /* the server drops every lock with the session */
	free(l->keys);
	free(l);
}

static struct pg_sessions lives = {&live_mu, NULL, live_make, live_drop};

const char *pg_live_key(char buf[PG_INT_LEN], const char *id)
{
	char hex[17];
	memcpy(hex, id, 16);
	hex[16] = '\0';
	return pg_int(buf, (int64_t)strtoull(hex, NULL, 16));
}

int pg_live_get(const char *location, int busy_ms, struct pg_live **out)
{
	struct pg_session *s;
	int rc = pg_session_get(&lives, location, busy_ms, &s);
	if (rc == 0)
		*out = (struct pg_live *)s;
	return rc;
}

void pg_live_put(struct pg_live *l)
{
	pg_session_put(&lives, l ? &l->s : NULL);
}

/* One statement on the session; 0, or -errno. */
static int live_exec(struct pg_live *l, const char *sql, const char *key,
		     bool *yes)
{
	const char *p[] = {key};
	PGresult *r =
	    PQexecParams(l->conn, sql, key ? 1 : 0, NULL, p, NULL, NULL, 0);
	int rc =
	    PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : pg_errno(l->conn, r);
	if (!rc && yes)
		*yes = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	return rc;
}

/* Tries the lock of key for up to the busy timeout: a judge holds it a
 * moment inside its transaction. -EBUSY when another session keeps it. */
static int live_take(struct pg_live *l, const char *key)
{
	uint64_t deadline = mf_mono_ns() + (uint64_t)l->s.busy_ms * 1000000u;
	for (;;) {
		bool got = false;
		int rc = live_exec(l, "SELECT pg_try_advisory_lock($1::bigint)",
				   key, &got);
		if (rc || got)
			return rc;
		if (mf_mono_ns() >= deadline)
			return -EBUSY;
		usleep(5000);
	}
}

/* A session, made again (taking back what locks it can) when there is
 * none or the server lost it. */
static int live_connect(struct pg_live *l)
{
	if (l->conn && PQstatus(l->conn) == CONNECTION_OK)
		return 0;
	PQfinish(l->conn);
	l->conn = NULL;
	int rc = pg_connect(l->s.location, l->s.busy_ms, &l->conn);
	if (rc)
		return rc;
	size_t kept = 0;
	for (size_t i = 0; i < l->n; i++) {
		char key[PG_INT_LEN];
		bool got = false;
		/* a lock another session took meanwhile (a judge declared
		 * the run dead) stays lost: the catalog fences its writes */
		if (live_exec(l, "SELECT pg_try_advisory_lock($1::bigint)",
			      pg_int(key, l->keys[i]), &got) == 0 &&
		    got)
			l->keys[kept++] = l->keys[i];
	}
	l->n = kept;
	return 0;
}

static bool live_has(const struct pg_live *l, int64_t k, size_t *at)
{
	for (size_t i = 0; i < l->n; i++) {
		if (l->keys[i] == k) {
			if (at)
				*at = i;
			return true;
		}
	}
	return false;
}

static int live_add(struct pg_live *l, int64_t k)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		int64_t *a = realloc(l->keys, cap * sizeof(*a));
		if (!a)
			return -ENOMEM;
		l->keys = a;
		l->cap = cap;
	}
	l->keys[l->n++] = k;
	return 0;
}

int pg_live_lock(struct pg_live *l, const char *id, int *pid)
{
	char key[PG_INT_LEN];
	int64_t k = strtoll(pg_live_key(key, id), NULL, 10);
	pthread_mutex_lock(&live_mu);
	int rc = live_connect(l);
	/* a lock held by a session the server lost (a restart) is no lock:
	 * libpq notices only when the session is used, so use it, and
	 * connect again (taking back what locks it can) when it is gone */
	if (!rc && live_has(l, k, NULL) &&
	    live_exec(l, "SELECT true", NULL, NULL) != 0) {
		PQfinish(l->conn);
		l->conn = NULL;
		rc = live_connect(l);
	}
	if (!rc && !live_has(l, k, NULL)) {
		rc = live_take(l, key);
		if (rc == -ENOTCONN) {
			rc = live_connect(l);
			rc = rc ? rc : live_take(l, key);
		}
		rc = rc ? rc : live_add(l, k);
	}
	if (!rc && pid)
		*pid = PQbackendPID(l->conn);
	pthread_mutex_unlock(&live_mu);
	return rc;
}

void pg_live_unlock(struct pg_live *l, const char *id)
{
	char key[PG_INT_LEN];
	size_t at;
	int64_t k = strtoll(pg_live_key(key, id), NULL, 10);
	pthread_mutex_lock(&live_mu);
	if (live_has(l, k, &at)) {
		l->keys[at] = l->keys[--l->n];
		if (l->conn)
			(void)live_exec(l,
					"SELECT pg_advisory_unlock($1::bigint)",
					key, NULL);
	}
	pthread_mutex_unlock(&live_mu);
}

int pg_live_ping(struct pg_live *l, int *pid)
{
	pthread_mutex_lock(&live_mu);
	int rc = 0;
	if (l->n > 0) {
		rc = live_connect(l);
		if (!rc && live_exec(l, "SELECT true", NULL, NULL) != 0) {
			PQfinish(l->conn); /* lost: connect and lock again */
			l->conn = NULL;
			rc = live_connect(l);
		}
	}
	if (pid)
		*pid = !rc && l->conn ? PQbackendPID(l->conn) : 0;
	pthread_mutex_unlock(&live_mu);
	return rc;
}

int pg_judge(struct mf_catalog *c, const struct mf_run_rec *r, int64_t stale_s,
	     bool *alive)
{
	char key[PG_INT_LEN], hb[PG_INT_LEN], stale[PG_INT_LEN];
	PGresult *res;
	if (strcmp(r->state, "active") != 0) {
		*alive = false;
		return 0;
	}
	if (stale_s < STALE_MIN_S)
		stale_s = STALE_MIN_S;
	char grace[PG_INT_LEN];
	const char *p[] = {pg_live_key(key, r->run_id),
			   pg_int(hb, r->heartbeat), pg_int(stale, stale_s),
			   pg_int(grace, RESTART_GRACE_S)};
	/* the lock is tried only for a fresh heartbeat; taken, it stays
	 * taken to the end of c's transaction (none: this statement). A
	 * free lock proves nothing of a run that has not heartbeaten since
	 * the server (re)started, for the grace that gives it to come back */
	int rc = pg_exec(
	    c,
	    "SELECT extract(epoch FROM now())::bigint - $2::bigint"
	    " <= $3::bigint AND (NOT pg_try_advisory_xact_lock($1::bigint) OR"
	    " (to_timestamp($2::bigint) <= pg_postmaster_start_time() AND"
	    " now() - pg_postmaster_start_time() <"
	    " make_interval(secs => $4::bigint)))",
	    4, p, &res);
	if (rc)
		return rc;
	*alive = PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	return 0;
}

int pgb_judge(struct mf_catalog *c, const struct mf_run_rec *r, int64_t now,
	      int64_t pending_expiry, bool *alive)
{
	(void)now; /* the server's clock judges */
	return pg_judge(c, r, pending_expiry, alive);
}
