/*
 * pg_i.h - private to the PostgreSQL backend of the catalog (pg_*.c): its
 * connection, the one libpq error translation, statements with text
 * parameters, transactions, the liveness session (advisory locks), and the
 * operations each pg_*.c file provides to the backend table
 * (catalog_backend.h says what each must do).
 *
 * Not for: anything outside catalog/, nor catalog.c; the contract is
 * mf_catalog.h and catalog_backend.h.
 */
#ifndef MF_PG_I_H
#define MF_PG_I_H

#include <libpq-fe.h>
#include <pthread.h>
#include <sys/types.h>

#include "catalog_backend.h"

/* The schema of a PostgreSQL catalog, apart from SQLite's numbering: the
 * row of table schema_version (pg_schema.c). */
#define PG_SCHEMA_VERSION 3

struct pg_live;
struct pg_listen;

/* The server's clock in unix seconds, as SQL: every stamp a PostgreSQL
 * catalog compares (heartbeats, created, last_read) is written by it. */
#define PG_SERVER_NOW "extract(epoch FROM now())::bigint"

/* Keys of the transaction-level advisory locks that serialize a caller's
 * units (pg_conn.c), migrations (pg_schema.c) and registrations
 * (pg_rows.c): 64-bit numbers no run or holder key is likely to take. */
#define PG_UNIT_LOCK "7166459981"
#define PG_MIGRATE_LOCK "7166459980"
#define PG_REGISTER_LOCK "7166459982"

/* One PostgreSQL connection. Used by one thread at a time (mf_catalog.h).
 * The handle comes first: operations receive &base and convert it back
 * with pg_db. */
struct pg_db {
	struct mf_catalog base;
	PGconn *conn;
	char *location; /* as given to open: to connect again */
	int busy_ms;
	struct pg_live *live; /* this process's liveness session */
	struct pg_listen *listen; /* its listener, from the first wait on */
	bool in_tx; /* a transaction of ours is open on conn */
};

static inline struct pg_db *pg_db(struct mf_catalog *c)
{
	return (struct pg_db *)c; /* base is the first member */
}

/*
 * Connects to location (a libpq URI or "KEY=VALUE ..." string), with this
 * backend's settings: TCP keepalives on both ends, lock_timeout busy_ms,
 * connect_timeout, no notices printed. 0 or -errno (-ECONNREFUSED: no
 * server answered; -EACCES: refused the role; -ENOENT: no such
 * database); *out closed with PQfinish.
 */
int pg_connect(const char *location, int busy_ms, PGconn **out);

/* The one place libpq failures become negative errnos (with the failed
 * connect's, beside it in pg_conn.c): res (may be NULL) is a failed
 * result of conn, its SQLSTATE decides; a connection gone is -ENOTCONN.
 * Remembers the server's message for mf_catalog_last_error. */
int pg_errno(PGconn *conn, const PGresult *res);

/*
 * Runs sql with n text parameters (NULL: SQL NULL) on c. A result with
 * rows (PGRES_TUPLES_OK) or none (PGRES_COMMAND_OK) is 0 and lands in
 * *out when out is not NULL (PQclear it), else it is cleared. Outside a
 * transaction, a connection found broken is made again once and the
 * statement retried (a server restart costs a reconnect, nothing more).
 */
int pg_exec(struct mf_catalog *c, const char *sql, int n,
	    const char *const *params, PGresult **out);
/* As pg_exec, for a statement that changes rows: *changed (may be NULL)
 * receives how many. */
int pg_write(struct mf_catalog *c, const char *sql, int n,
	     const char *const *params, long *changed);

/* An operation's own transaction (a savepoint inside the caller's unit),
 * as cat_begin/cat_finish of the SQLite backend: pg_finish commits when
 * rc is 0, else rolls back, and returns rc or the commit's error. */
int pg_begin(struct mf_catalog *c);
int pg_finish(struct mf_catalog *c, int rc);

/* Text of integers for parameters: buf of PG_INT_LEN bytes. */
#define PG_INT_LEN 24
const char *pg_int(char buf[PG_INT_LEN], int64_t v);
/* Column helpers: a field of row 0 column i as an integer (NULL: 0), as
 * text copied into buf (MF_CORRUPT(why) when it does not fit), or as a
 * malloc'd copy (NULL for SQL NULL). */
int64_t pg_get_int(const PGresult *r, int row, int col);
int pg_get_copy(const PGresult *r, int row, int col, char *buf, size_t size,
		const char *why);
int pg_get_dup(const PGresult *r, int row, int col, char **out);

/* The schema (pg_schema.c): created or migrated forward on open, in one
 * transaction serialized by an advisory lock. -EPROTO: a newer schema. */
int pg_migrate(struct mf_catalog *c);
int pg_schema_version(struct mf_catalog *c, int *version);

/*
 * The registry of a process's connections apart from every handle
 * (pg_session.c): an entry per process and location, shared by its
 * handles. An entry's type (struct pg_live, struct pg_listen) holds a
 * struct pg_session first; make gives a zeroed one (NULL: no memory),
 * drop frees it (its location already freed, or never set), after the
 * last put and outside mu.
 */
struct pg_session {
	struct pg_session *next; /* mu */
	pid_t pid; /* the process that made it: a child of a fork() never
		      uses (nor closes) its parent's connection */
	char *location;
	int busy_ms;
	int refs; /* mu */
};
struct pg_sessions {
	pthread_mutex_t *mu; /* guards the list and each entry's refs */
	struct pg_session *head;
	struct pg_session *(*make)(void);
	void (*drop)(struct pg_session *s);
};
/* This process's entry for location, made when there is none; a
 * reference for each call, given back by pg_session_put. */
int pg_session_get(struct pg_sessions *r, const char *location, int busy_ms,
		   struct pg_session **out);
void pg_session_put(struct pg_sessions *r, struct pg_session *s);

/*
 * The liveness session (pg_live.c): one connection per process and
 * location, apart from every handle, that holds a session-level advisory
 * lock for each run and holder of this process for as long as the
 * process or its last handle lives. A judge that can take the lock
 * (pg_try_advisory_xact_lock on its own connection) knows the process
 * behind it is gone: the server ended its session.
 */
int pg_live_get(const char *location, int busy_ms, struct pg_live **out);
void pg_live_put(struct pg_live *l);
/* Takes the lock of id (a run id or holder, 32 hex digits) if not held,
 * after checking with the server that a session that has it still lives
 * (connecting again, and taking back what it can, when not). *pid (may
 * be NULL) receives the session's backend pid, for PG_LIVE_HELD. */
int pg_live_lock(struct pg_live *l, const char *id, int *pid);
/* Gives it back if held; nothing otherwise. */
void pg_live_unlock(struct pg_live *l, const char *id);
/* Checks the session and, when the server lost it, connects again and
 * takes back every lock it can; *pid (may be NULL) receives its backend
 * pid, 0 when there is none. */
int pg_live_ping(struct pg_live *l, int *pid);
/*
 * SQL that is true when the session of backend pid P (a parameter, as
 * text) holds the session advisory lock of key K (a parameter: the
 * pg_live_key of an id), false otherwise; P 0 is true (a row not of this
 * process, with no lock to hold). A write that refreshes a heartbeat of
 * this process's run or holder is conditional on it, in the write's own
 * statement: a heartbeat newer than the server's start then proves that
 * the liveness session held the lock after that start, so a free lock
 * proves the session ended (pg_judge), never that it has not yet taken
 * its lock back.
 */
#define PG_LIVE_HELD(K, P)                                                     \
	"(" P "::int = 0 OR EXISTS (SELECT 1 FROM pg_locks WHERE"              \
	" locktype = 'advisory' AND granted AND objsubid = 1 AND"              \
	" database = (SELECT oid FROM pg_database WHERE"                       \
	" datname = current_database()) AND pid = " P "::int AND"              \
	" classid = ((" K "::bigint >> 32) & 4294967295)::oid AND"             \
	" objid = (" K "::bigint & 4294967295)::oid))"
/* The advisory lock key of id: its first 64 bits, as a signed decimal. */
const char *pg_live_key(char buf[PG_INT_LEN], const char *id);

/*
 * Whether the run or holder of row r (state, heartbeat as the server's
 * clock wrote it) is alive: active, its heartbeat no older than
 * stale_s by the server's clock, and its advisory lock held by some
 * session (not takeable from c). Inside c's transaction the try-lock
 * stays taken until it ends.
 */
int pg_judge(struct mf_catalog *c, const struct mf_run_rec *r, int64_t stale_s,
	     bool *alive);

/*
 * Wake-ups (pg_notify.c). pg_notify_send, inside the transaction of a
 * write that ends a computation of shard index of fp (complete, fail,
 * abandon), notifies every listener once that transaction commits, and
 * never when it rolls back. A listener (one connection per process and
 * location, apart from every handle) is taken by a handle's first wait
 * and given back by pg_listen_put when the handle closes.
 */
int pg_notify_send(struct mf_catalog *c, const char *fp, uint32_t index);
int pg_listen_get(const char *location, int busy_ms, struct pg_listen **out);
void pg_listen_put(struct pg_listen *l);

/* Rows (pg_rows.c). */
#define PG_RUN_COLS                                                            \
	"run_id, fp, host, pid, pid_start, started, heartbeat, state,"         \
	" boot_id, pid_ns"
int pg_run_from_row(const PGresult *r, int row, struct mf_run_rec *out);
int pg_runs_select(struct mf_catalog *c, const char *sql, const char *fp,
		   struct mf_run_rec **out, size_t *n);
int pg_run_read(struct mf_catalog *c, const char *run_id,
		struct mf_run_rec *out);
int pg_run_set_state(struct mf_catalog *c, const char *run_id,
		     const char *state);
int pg_pending_expiry(struct mf_catalog *c, const char *fp, int64_t *out);
#define PG_SHARD_COLS                                                          \
	"fp, idx, state, run_id, raw_bytes, stored_bytes, chunks, "            \
	"exit_status, error, stderr_tail, last_read, attempts, generation"
int pg_shard_from_row(const PGresult *r, int row, struct mf_shard_rec *out);

/* The operations of the backend table (catalog_backend.h). */
int pgb_open(const char *target, int busy_ms, struct mf_catalog **out);
void pgb_close(struct mf_catalog *c);
int pgb_check(const char *target, int busy_ms, mf_catalog_problem_fn report,
	      void *arg, bool *usable);
bool pgb_moved(struct mf_catalog *c);
int pgb_begin(struct mf_catalog *c);
int pgb_end(struct mf_catalog *c, int rc);
int pgb_indexed(struct mf_catalog *c, bool *out);
int pgb_set_indexed(struct mf_catalog *c);
int pgb_judge(struct mf_catalog *c, const struct mf_run_rec *r, int64_t now,
	      int64_t pending_expiry, bool *alive);
int pgb_put_snapshot(struct mf_catalog *c, const struct mf_snapshot_rec *rec);
int pgb_get_snapshot(struct mf_catalog *c, const char *fp,
		     struct mf_snapshot_rec *out);
int pgb_find_name(struct mf_catalog *c, const char *name,
		  char fp[MF_FP_HEX_LEN + 1]);
int pgb_list_snapshots(struct mf_catalog *c, struct mf_snapshot_rec **out,
		       size_t *n);
int pgb_delete_snapshot(struct mf_catalog *c, const char *fp,
			struct mf_run_rec **runs, size_t *nruns);
int pgb_add_run(struct mf_catalog *c, const struct mf_run_rec *run);
int pgb_get_run(struct mf_catalog *c, const char *run_id,
		struct mf_run_rec *out);
int pgb_list_runs(struct mf_catalog *c, const char *fp, struct mf_run_rec **out,
		  size_t *n);
int pgb_heartbeat(struct mf_catalog *c, const char *run_id, int64_t now);
int pgb_set_run_state(struct mf_catalog *c, const char *run_id,
		      const char *state);
int pgb_delete_run(struct mf_catalog *c, const char *run_id);
int pgb_hold(struct mf_catalog *c, const struct mf_run_rec *h);
int pgb_release(struct mf_catalog *c, const char *holder, const char *fp);
int pgb_list_holds(struct mf_catalog *c, const char *fp,
		   struct mf_run_rec **out, size_t *n);
int pgb_heartbeat_holds(struct mf_catalog *c, const char *holder, int64_t now);
int pgb_prune_holds(struct mf_catalog *c, int64_t now, size_t *pruned);
int pgb_get_shard(struct mf_catalog *c, const char *fp, uint32_t index,
		  struct mf_shard_rec *out);
int pgb_list_shards(struct mf_catalog *c, const char *fp,
		    struct mf_shard_rec **out, size_t *n);
int pgb_claim(struct mf_catalog *c, const char *fp, uint32_t index,
	      const struct mf_run_rec *me, int64_t now, uint64_t waited,
	      enum mf_claim *result, struct mf_shard_rec *cur);
int pgb_complete(struct mf_catalog *c, const char *fp, uint32_t index,
		 const char *run_id, uint64_t raw_bytes, uint64_t stored_bytes,
		 uint32_t chunks);
int pgb_fail(struct mf_catalog *c, const char *fp, uint32_t index,
	     const char *run_id, int32_t exit_status, const char *error,
	     const char *stderr_tail);
int pgb_reset(struct mf_catalog *c, const char *fp, uint32_t index,
	      const char *run_id);
int pgb_abandon(struct mf_catalog *c, const char *fp, uint32_t index,
		const char *run_id);
int pgb_expire(struct mf_catalog *c, const struct mf_shard_rec *recs, size_t n,
	       bool *expired);
int pgb_touch(struct mf_catalog *c, const char *fp, uint32_t index,
	      int64_t now);
int pgb_now(struct mf_catalog *c, int64_t *out);
int pgb_wait(struct mf_catalog *c, const char *fp, uint32_t index,
	     uint64_t generation, int timeout_ms);
int pgb_add_totals(struct mf_catalog *c, const struct mf_catalog_totals *d);
int pgb_get_totals(struct mf_catalog *c, struct mf_catalog_totals *out);

#endif
