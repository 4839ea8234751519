/*
 * pg_conn.c - the PostgreSQL backend's connection: connecting with its
 * settings (keepalives, lock timeout), the one libpq error translation,
 * statements with text parameters, transactions (an operation's own, or a
 * caller's unit), the index mark, the check, column helpers, and the
 * backend table itself.
 *
 * Not for: the schema (pg_schema.c), the liveness session (pg_live.c) or
 * the rows (pg_rows.c, pg_shard.c).
 */
#include "pg_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * TCP keepalives, on both ends of the connection: the client's socket
 * (libpq keywords) notices a dead server, and the server's socket
 * (settings of this session) notices a dead or cut-off client, ending its
 * session and so its advisory locks. Idle 5 s, then 3 probes 2 s apart:
 * a session of a dead host ends within about 11 s; tcp_user_timeout
 * bounds a connection with data unacknowledged to the same 11 s (on
 * Linux it also decides when unanswered keepalives end a connection:
 * at 15 s, every cut took 15 s). A location may set other values; these
 * come first and it overrides them.
 */
#define PG_KEEPALIVE_SETTINGS                                                  \
	"SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2;"        \
	" SET tcp_keepalives_count = 3; SET tcp_user_timeout = 11000;"

static void no_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message; /* a library never prints */
}

static int pg_connect_errno(PGconn *conn);

int pg_connect(const char *location, int busy_ms, PGconn **out)
{
	char timeout[PG_INT_LEN];
	int secs = busy_ms / 1000 < 2 ? 2 : busy_ms / 1000;
	const char *keys[] = {
	    "keepalives",	"keepalives_idle",  "keepalives_interval",
	    "keepalives_count", "tcp_user_timeout", "connect_timeout",
	    "application_name", "dbname",	    NULL};
	const char *vals[] = {"1",     "5",	 "2",
			      "3",     "11000",	 pg_int(timeout, secs),
			      "matfs", location, NULL};
	PGconn *conn = PQconnectdbParams(keys, vals, 1);
	if (!conn || PQstatus(conn) != CONNECTION_OK) {
		int rc = pg_connect_errno(conn);
		PQfinish(conn);
		return rc;
	}
	PQsetNoticeProcessor(conn, no_notice, NULL);
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SET lock_timeout = %d; SET client_min_messages = warning;"
		 " " PG_KEEPALIVE_SETTINGS,
		 busy_ms);
	PGresult *r = PQexec(conn, sql);
	int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_errno(conn, r);
	PQclear(r);
	if (rc) {
		PQfinish(conn);
		return rc;
	}
	*out = conn;
	return 0;
}

/* SQLSTATE classes and codes to errnos. */
static int state_errno(const char *s)
{
	static const struct {
		const char *code; /* a full code, or a class of two */
		int err;
	} map[] = {
	    {"23503", -ENOENT}, /* foreign key: the snapshot is not */
	    {"23505", -EEXIST}, {"23", -EINVAL},    {"40", -EBUSY},
	    {"55P03", -EBUSY},	{"57014", -EBUSY},  {"53100", -ENOSPC},
	    {"53200", -ENOMEM}, {"53300", -EBUSY},  {"42501", -EACCES},
	    {"28", -EACCES},	{"3D000", -ENOENT}, {"3F000", -ENOENT},
	    {"42P01", -ENOENT}, {"25006", -EROFS},  {"08", -ENOTCONN},
	    {"57P", -ENOTCONN}, /* the server shuts down or starts */
	};
	for (size_t i = 0; s && i < sizeof(map) / sizeof(map[0]); i++)
		if (strncmp(s, map[i].code, strlen(map[i].code)) == 0)
			return map[i].err;
	return -EIO;
}

/* A connection that could not be made says why only in words. */
static int connect_errno(const char *m)
{
	static const struct {
		const char *words;
		int err;
	} map[] = {
	    {"authentication failed", -EACCES},
	    {"no password supplied", -EACCES},
	    {"permission denied", -EACCES},
	    {"does not exist", -ENOENT},
	    {"invalid", -EINVAL},
	    {"missing \"=\"", -EINVAL},
	    {"timeout expired", -ETIMEDOUT},
	    {"No route to host", -EHOSTUNREACH},
	    {"Network is unreachable", -ENETUNREACH},
	    {"the database system is", -ECONNREFUSED}, /* starting, ... */
	    /* every slot of max_connections taken (those left reserved) */
	    {"too many clients", -EUSERS},
	    {"remaining connection slots are reserved", -EUSERS},
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strstr(m, map[i].words))
			return map[i].err;
	return -ECONNREFUSED;
}

int pg_errno(PGconn *conn, const PGresult *res)
{
	const char *m = res ? PQresultErrorMessage(res) : "";
	if (!m || !*m)
		m = conn ? PQerrorMessage(conn) : "";
	mf_catalog_set_last_error(m);
	/* a connection lost midway has no SQLSTATE, or a class 08 one */
	if (conn && PQstatus(conn) != CONNECTION_OK)
		return -ENOTCONN;
	if (res)
		return state_errno(PQresultErrorField(res, PG_DIAG_SQLSTATE));
	return conn ? -ENOMEM : -ENOTCONN;
}

/* The errno of a connection that could not be made (pg_connect). */
static int pg_connect_errno(PGconn *conn)
{
	const char *m = conn ? PQerrorMessage(conn) : "";
	mf_catalog_set_last_error(m);
	return conn ? connect_errno(m) : -ENOMEM;
}

const char *pg_int(char buf[PG_INT_LEN], int64_t v)
{
	snprintf(buf, PG_INT_LEN, "%" PRId64, v);
	return buf;
}

/* One try of sql on p's connection. */
static int exec_once(struct pg_db *p, const char *sql, int n,
		     const char *const *params, PGresult **out)
{
	PGresult *r =
	    PQexecParams(p->conn, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
		if (out)
			*out = r;
		else
			PQclear(r);
		return 0;
	}
	int rc = pg_errno(p->conn, r);
	PQclear(r);
	return rc;
}

/* Connects p again after its connection broke (server restart). */
static int reconnect(struct pg_db *p)
{
	PGconn *conn;
	int rc = pg_connect(p->location, p->busy_ms, &conn);
	if (rc)
		return rc;
	PQfinish(p->conn);
	p->conn = conn;
	p->in_tx = false;
	return 0;
}

int pg_exec(struct mf_catalog *c, const char *sql, int n,
	    const char *const *params, PGresult **out)
{
	struct pg_db *p = pg_db(c);
	int rc = exec_once(p, sql, n, params, out);
	/* a statement outside any transaction is safe to try again on a new
	 * connection: nothing of it ran on the one that broke */
	if (rc == -ENOTCONN && !p->in_tx && !c->outer) {
		int err = reconnect(p);
		rc = err ? err : exec_once(p, sql, n, params, out);
	}
	return rc;
}

int pg_write(struct mf_catalog *c, const char *sql, int n,
	     const char *const *params, long *changed)
{
	PGresult *r;
	int rc = pg_exec(c, sql, n, params, &r);
	if (rc)
		return rc;
	if (changed)
		*changed = strtol(PQcmdTuples(r), NULL, 10);
	PQclear(r);
	return 0;
}

int pg_begin(struct mf_catalog *c)
{
	struct pg_db *p = pg_db(c);
	if (c->outer)
		return pg_exec(c, "SAVEPOINT cat_call", 0, NULL, NULL);
	int rc = pg_exec(c, "BEGIN", 0, NULL, NULL);
	p->in_tx = rc == 0;
	return rc;
}

int pg_finish(struct mf_catalog *c, int rc)
{
	struct pg_db *p = pg_db(c);
	if (c->outer) {
		const char *sql = rc ? "ROLLBACK TO cat_call; RELEASE cat_call"
				     : "RELEASE cat_call";
		/* two statements: the simple protocol */
		PGresult *r = PQexec(p->conn, sql);
		int err = PQresultStatus(r) == PGRES_COMMAND_OK
		    ? 0
		    : pg_errno(p->conn, r);
		PQclear(r);
		return rc ? rc : err;
	}
	int err = pg_exec(c, rc ? "ROLLBACK" : "COMMIT", 0, NULL, NULL);
	/* a failed COMMIT rolled back; a broken connection took it along */
	p->in_tx = false;
	return rc ? rc : err;
}

int pgb_begin(struct mf_catalog *c)
{
	struct pg_db *p = pg_db(c);
	int rc = pg_exec(c, "BEGIN", 0, NULL, NULL);
	p->in_tx = rc == 0;
	/* units serialize against each other (as SQLite's BEGIN
	 * IMMEDIATE), waiting up to lock_timeout; each operation inside
	 * takes its row locks as it goes */
	if (!rc)
		rc =
		    pg_exec(c, "SELECT pg_advisory_xact_lock(" PG_UNIT_LOCK ")",
			    0, NULL, NULL);
	if (rc && p->in_tx) {
		(void)pg_exec(c, "ROLLBACK", 0, NULL, NULL);
		p->in_tx = false;
	}
	return rc;
}

int pgb_end(struct mf_catalog *c, int rc)
{
	return pg_finish(c, rc);
}

int64_t pg_get_int(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return 0;
	return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

int pg_get_copy(const PGresult *r, int row, int col, char *buf, size_t size,
		const char *why)
{
	size_t n = (size_t)PQgetlength(r, row, col);
	if (n >= size)
		return mf_corrupt_at(__FILE__, __LINE__, why);
	memcpy(buf, PQgetvalue(r, row, col), n);
	buf[n] = '\0';
	return 0;
}

int pg_get_dup(const PGresult *r, int row, int col, char **out)
{
	if (PQgetisnull(r, row, col)) {
		*out = NULL;
		return 0;
	}
	char *d = strdup(PQgetvalue(r, row, col));
	if (!d)
		return -ENOMEM;
	*out = d;
	return 0;
}

bool cat_pg_has_password(const char *target)
{
	PQconninfoOption *opts = PQconninfoParse(target, NULL);
	bool found = false;
	for (PQconninfoOption *o = opts; o && o->keyword; o++)
		if (strcmp(o->keyword, "password") == 0 && o->val && *o->val)
			found = true;
	PQconninfoFree(opts);
	return found;
}

/* Copies the value at s (a keyword string's 'quoted \' value', or up to
 * white space or '&') as "***"; returns where it ends. */
static const char *mask_value(const char *s, char **o, char *end)
{
	if (*s == '\'') {
		for (s++; *s && *s != '\''; s++)
			if (*s == '\\' && s[1])
				s++;
		if (*s)
			s++;
	} else {
		while (*s && *s != ' ' && *s != '\t' && *s != '&')
			s++;
	}
	for (const char *m = "***"; *m && *o < end; m++)
		*(*o)++ = *m;
	return s;
}

void cat_pg_shown(const char *target, char *buf, size_t len)
{
	if (len == 0)
		return;
	char *o = buf, *end = buf + len - 1;
	const char *s = target;
	const char *scheme = strstr(s, "://");
	const char *at = NULL, *colon = NULL;
	if (scheme) { /* user:password@ in the authority */
		const char *a = scheme + 3;
		size_t n = strcspn(a, "/?");
		for (const char *q = a; q < a + n; q++)
			if (*q == '@')
				at = q;
		if (at)
			colon = memchr(a, ':', (size_t)(at - a));
	}
	while (*s && o < end) {
		if (colon && s == colon + 1) {
			s = at;
			for (const char *m = "***"; *m && o < end; m++)
				*o++ = *m;
			continue;
		}
		bool key_start = s == target || s[-1] == ' ' || s[-1] == '\t' ||
		    s[-1] == '?' || s[-1] == '&';
		if (key_start && strncmp(s, "password", 8) == 0) {
			const char *v = s + 8;
			while (*v == ' ' || *v == '\t')
				v++;
			if (*v == '=') {
				for (v++; *v == ' ' || *v == '\t'; v++)
					;
				while (s < v && o < end)
					*o++ = *s++;
				s = mask_value(s, &o, end);
				continue;
			}
		}
		*o++ = *s++;
	}
	*o = '\0';
}

/* ---- open, close, the index mark, the check ---- */

int pgb_open(const char *target, int busy_ms, struct mf_catalog **out)
{
	struct pg_db *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->busy_ms = busy_ms;
	p->location = strdup(target);
	int rc = p->location ? pg_connect(target, busy_ms, &p->conn) : -ENOMEM;
	rc = rc ? rc : pg_migrate(&p->base);
	rc = rc ? rc : pg_live_get(target, busy_ms, &p->live);
	if (rc) {
		pgb_close(&p->base);
		return rc;
	}
	*out = &p->base;
	return 0;
}

void pgb_close(struct mf_catalog *c)
{
	struct pg_db *p = pg_db(c);
	PQfinish(p->conn);
	pg_live_put(p->live);
	pg_listen_put(p->listen);
	free(p->location);
	free(p);
}

bool pgb_moved(struct mf_catalog *c)
{
	(void)c; /* a server's database is not replaced under a connection */
	return false;
}

/* The index mark: a row of table meta, which no migration touches. */
int pgb_indexed(struct mf_catalog *c, bool *out)
{
	PGresult *r;
	int rc =
	    pg_exec(c, "SELECT 1 FROM meta WHERE key = 'indexed'", 0, NULL, &r);
	if (rc)
		return rc;
	*out = PQntuples(r) > 0;
	PQclear(r);
	return 0;
}

int pgb_set_indexed(struct mf_catalog *c)
{
	int rc = pg_begin(c);
	if (rc)
		return rc;
	rc = pg_exec(c,
		     "INSERT INTO meta (key, value) VALUES ('indexed', '1')"
		     " ON CONFLICT (key) DO NOTHING",
		     0, NULL, NULL);
	return pg_finish(c, rc);
}

/* Connects without creating anything: a server that answers, and a
 * schema of a version this build reads. */
int pgb_check(const char *target, int busy_ms, mf_catalog_problem_fn report,
	      void *arg, bool *usable)
{
	/* in_tx: a connection that breaks is not made again here */
	struct pg_db p = {.busy_ms = busy_ms, .in_tx = true};
	char detail[128];
	int version = 0;
	*usable = false;
	int rc = pg_connect(target, busy_ms, &p.conn);
	if (rc)
		return rc;
	rc = pg_schema_version(&p.base, &version);
	if (rc == 0 && version == 0 && report)
		report(arg, "catalog", "the database holds no matfs catalog");
	if (rc == 0 && version > PG_SCHEMA_VERSION && report) {
		snprintf(detail, sizeof(detail),
			 "schema version %d is newer than this matfs (%d)",
			 version, PG_SCHEMA_VERSION);
		report(arg, "catalog", detail);
	}
	*usable = rc == 0 && version > 0 && version <= PG_SCHEMA_VERSION;
	PQfinish(p.conn);
	return rc;
}

const struct mf_catalog_backend cat_pg_backend = {
    .name = "postgresql",
    .alias = "postgres",
    .open = pgb_open,
    .close = pgb_close,
    .check = pgb_check,
    .moved = pgb_moved,
    .begin = pgb_begin,
    .end = pgb_end,
    .indexed = pgb_indexed,
    .set_indexed = pgb_set_indexed,
    .judge = pgb_judge,
    .put_snapshot = pgb_put_snapshot,
    .get_snapshot = pgb_get_snapshot,
    .find_name = pgb_find_name,
    .list_snapshots = pgb_list_snapshots,
    .delete_snapshot = pgb_delete_snapshot,
    .add_run = pgb_add_run,
    .get_run = pgb_get_run,
    .list_runs = pgb_list_runs,
    .heartbeat = pgb_heartbeat,
    .set_run_state = pgb_set_run_state,
    .delete_run = pgb_delete_run,
    .hold = pgb_hold,
    .release = pgb_release,
    .list_holds = pgb_list_holds,
    .heartbeat_holds = pgb_heartbeat_holds,
    .prune_holds = pgb_prune_holds,
    .get_shard = pgb_get_shard,
    .list_shards = pgb_list_shards,
    .claim = pgb_claim,
    .complete = pgb_complete,
    .fail = pgb_fail,
    .reset = pgb_reset,
    .abandon = pgb_abandon,
    .expire = pgb_expire,
    .touch = pgb_touch,
    .now = pgb_now,
    .wait = pgb_wait,
    .add_totals = pgb_add_totals,
    .get_totals = pgb_get_totals,
};
