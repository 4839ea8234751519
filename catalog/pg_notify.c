/*
 * pg_notify.c - waking waiters across hosts. complete, fail, abandon and
 * reset send a notification on channel PG_NOTIFY_CHANNEL with payload
 * "FP:INDEX" inside their own transaction (pg_notify_send), so the
 * server delivers it only when that transaction commits; a waiter
 * (pgb_wait) blocks until a notification for its shard comes, its row is
 * found changed already, or its timeout passes.
 *
 * One listening connection per process and location (struct pg_listen),
 * apart from every handle, so never in an engine's pool, and apart from
 * the liveness session; made at the first wait, closed with the last
 * handle that waited. It listens only while someone waits (a listener
 * never read would hold back the server's notification queue, which
 * every host's completions fill). Its waiters take turns reading it:
 * one at a time polls the socket with no lock held and posts what it
 * read to a ring under the listener's lock; the others sleep on its
 * condition variable and check the ring when woken.
 *
 * Not for: deciding what a woken waiter does (it claims again: the
 * engine), or liveness (pg_live.c: an owner that dies sends nothing, so
 * a waiter's timeout is its fallback).
 */
#include "pg_i.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PG_NOTIFY_CHANNEL "matfs_shard"
#define RING 256 /* notifications a waiter can miss before it re-checks */

struct pg_note {
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t index;
};

struct pg_listen {
	struct pg_session s; /* first: the registry's entry (listen_mu) */
	/* mu guards what follows; never held with listen_mu */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC: a read ended, a note came */
	PGconn *conn; /* NULL until a wait, or after a failure */
	bool listening; /* LISTEN is on: only while waiters > 0 */
	int waiters; /* in pgb_wait, past listen_start */
	bool reading; /* a waiter polls conn (unlocked): no one else uses it */
	uint64_t seq; /* notifications read; the last is ring[(seq-1)%RING] */
	uint64_t epoch; /* LISTENs begun: notes of an earlier one may be lost */
	struct pg_note ring[RING];
};

int pg_notify_send(struct mf_catalog *c, const char *fp, uint32_t index)
{
	char payload[MF_FP_HEX_LEN + PG_INT_LEN + 2];
	snprintf(payload, sizeof(payload), "%s:%u", fp, index);
	const char *p[] = {payload};
	return pg_exec(c, "SELECT pg_notify('" PG_NOTIFY_CHANNEL "', $1)", 1, p,
		       NULL);
}

static struct pg_session *listen_make(void)
{
	struct pg_listen *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rc) {
		free(l);
		return NULL;
	}
	(void)mf_mutex_init(&l->mu);
	return &l->s;
}

static void listen_free(struct pg_session *s)
{
	struct pg_listen *l = (struct pg_listen *)s;
	/* no waiter is left: each held a reference through its handle */
	PQfinish(l->conn);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

/* Guards the registry of listeners and each entry's refs. */
static pthread_mutex_t listen_mu = MF_MUTEX_INITIALIZER;
static struct pg_sessions listens = {&listen_mu, NULL, listen_make,
				     listen_free};

int pg_listen_get(const char *location, int busy_ms, struct pg_listen **out)
{
	struct pg_session *s;
	int rc = pg_session_get(&listens, location, busy_ms, &s);
	if (rc == 0)
		*out = (struct pg_listen *)s;
	return rc;
}

void pg_listen_put(struct pg_listen *l)
{
	pg_session_put(&listens, l ? &l->s : NULL);
}

/* One statement on the listener's connection; l->mu held, no reader. */
static int listen_exec(struct pg_listen *l, const char *sql)
{
	PGresult *r = PQexec(l->conn, sql);
	int rc =
	    PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_errno(l->conn, r);
	PQclear(r);
	return rc;
}

/* The connection made when there is none, LISTEN sent when it is off;
 * l->mu held, no reader unless LISTEN is on. */
static int listen_on(struct pg_listen *l)
{
	int rc = 0;
	if (!l->conn)
		rc = pg_connect(l->s.location, l->s.busy_ms, &l->conn);
	if (!rc && !l->listening) {
		rc = listen_exec(l, "LISTEN " PG_NOTIFY_CHANNEL);
		l->listening = rc == 0;
		l->epoch++;
	}
	return rc;
}

static void listen_drop(struct pg_listen *l)
{
	PQfinish(l->conn);
	l->conn = NULL;
	l->listening = false;
}

/* Joins the waiters, listening from here on; l->mu held. A connection
 * kept idle that the server dropped meanwhile (a restart) is made again
 * once. */
static int listen_start(struct pg_listen *l)
{
	int rc = listen_on(l);
	if (rc && l->waiters == 0) {
		listen_drop(l);
		rc = listen_on(l);
		if (rc)
			listen_drop(l);
	}
	if (!rc)
		l->waiters++;
	return rc;
}

/* Leaves the waiters. The last one stops listening: a connection that
 * listens and is never read would hold the server's notification queue
 * (every host's completions) from advancing. l->mu held. */
static void listen_stop(struct pg_listen *l)
{
	if (--l->waiters > 0 || !l->conn)
		return;
	PGnotify *n;
	while ((n = PQnotifies(l->conn)) != NULL) /* nobody waits for them */
		PQfreemem(n);
	if (l->listening && listen_exec(l, "UNLISTEN *") != 0)
		listen_drop(l);
	l->listening = false;
}

/* Posts what conn has received to the ring; l->mu held. */
static void drain(struct pg_listen *l, PGconn *conn)
{
	PGnotify *n;
	bool any = false;
	while ((n = PQnotifies(conn)) != NULL) {
		struct pg_note *note = &l->ring[l->seq % RING];
		const char *colon = strrchr(n->extra, ':');
		size_t len = colon ? (size_t)(colon - n->extra) : 0;
		if (len == MF_FP_HEX_LEN) {
			memcpy(note->fp, n->extra, len);
			note->fp[len] = '\0';
			note->index = (uint32_t)strtoul(colon + 1, NULL, 10);
			l->seq++;
			any = true;
		}
		PQfreemem(n);
	}
	if (any)
		pthread_cond_broadcast(&l->cv);
}

/* Whether a note for (fp, index) came since seq of epoch, or notes may
 * have been missed (the ring wrapped, the connection was lost); l->mu
 * held. */
static bool noted(const struct pg_listen *l, uint64_t seq, uint64_t epoch,
		  const char *fp, uint32_t index)
{
	if (l->epoch != epoch || l->seq - seq > RING)
		return true;
	for (uint64_t s = seq; s < l->seq; s++) {
		const struct pg_note *n = &l->ring[s % RING];
		if (n->index == index && strcmp(n->fp, fp) == 0)
			return true;
	}
	return false;
}

/* Reads conn until something comes or the deadline; l->mu held on entry
 * and return, released while polling. A connection that fails is
 * dropped (the next wait makes another). */
static void read_some(struct pg_listen *l, uint64_t deadline)
{
	PGconn *conn = l->conn;
	l->reading = true;
	pthread_mutex_unlock(&l->mu);
	uint64_t now = mf_mono_ns();
	int ms =
	    now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
	struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
	int n = pfd.fd < 0 ? -1 : poll(&pfd, 1, ms);
	bool ok = n >= 0 || errno == EINTR;
	if (n > 0)
		ok = PQconsumeInput(conn) == 1;
	pthread_mutex_lock(&l->mu);
	drain(l, conn);
	if (!ok || PQstatus(conn) != CONNECTION_OK)
		listen_drop(l);
	l->reading = false;
	pthread_cond_broadcast(&l->cv); /* another waiter reads on */
}

/* Whether the row is no longer running as generation (or is gone). */
static int row_changed(struct mf_catalog *c, const char *fp, uint32_t index,
		       uint64_t generation, bool *changed)
{
	char i[PG_INT_LEN], g[PG_INT_LEN];
	const char *p[] = {fp, pg_int(i, index),
			   pg_int(g, (int64_t)generation)};
	PGresult *r;
	int rc = pg_exec(c,
			 "SELECT 1 FROM shards WHERE fp = $1 AND idx = $2 AND"
			 " state = 'running' AND generation = $3",
			 3, p, &r);
	if (rc)
		return rc;
	*changed = PQntuples(r) == 0;
	PQclear(r);
	return 0;
}

static void deadline_ts(uint64_t deadline, struct timespec *ts)
{
	ts->tv_sec = (time_t)(deadline / 1000000000u);
	ts->tv_nsec = (long)(deadline % 1000000000u);
}

/* Until a note for (fp, index) since seq of epoch (0), the deadline
 * (-ETIMEDOUT) or the connection lost (0: claim again, and the next
 * wait connects); l->mu held, released while this waiter reads. */
static int wait_noted(struct pg_listen *l, uint64_t seq, uint64_t epoch,
		      const char *fp, uint32_t index, uint64_t deadline)
{
	for (;;) {
		if (noted(l, seq, epoch, fp, index) || !l->conn)
			return 0;
		if (mf_mono_ns() >= deadline)
			return -ETIMEDOUT;
		if (!l->reading) {
			read_some(l, deadline);
			continue;
		}
		struct timespec ts;
		deadline_ts(deadline, &ts);
		(void)pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	}
}

int pgb_wait(struct mf_catalog *c, const char *fp, uint32_t index,
	     uint64_t generation, int timeout_ms)
{
	struct pg_db *p = pg_db(c);
	uint64_t deadline = mf_mono_ns() + (uint64_t)timeout_ms * 1000000u;
	int rc =
	    p->listen ? 0 : pg_listen_get(p->location, p->busy_ms, &p->listen);
	if (rc)
		return rc;
	struct pg_listen *l = p->listen;
	pthread_mutex_lock(&l->mu);
	rc = listen_start(l);
	uint64_t seq = l->seq, epoch = l->epoch;
	pthread_mutex_unlock(&l->mu);
	if (rc)
		return rc;
	bool changed = false;
	/* listening from here on: a commit this read does not see notifies
	 * after it, so it reaches the ring after seq */
	rc = row_changed(c, fp, index, generation, &changed);
	pthread_mutex_lock(&l->mu);
	if (!rc && !changed)
		rc = wait_noted(l, seq, epoch, fp, index, deadline);
	listen_stop(l);
	pthread_mutex_unlock(&l->mu);
	return rc;
}
