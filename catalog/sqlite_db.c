/*
 * sqlite_db.c - the SQLite backend's connection: opening and closing it,
 * the statement cache, transactions (an operation's own, or a caller's
 * unit spanning operations), the file's identity (moved, index mark), the
 * one SQLite error translation, the row collector and column helpers the
 * other sqlite_*.c files share, and the backend table itself.
 *
 * Not for: the schema and its migrations (sqlite_schema.c), the rows
 * themselves (sqlite_snap.c, sqlite_run.c, sqlite_hold.c, sqlite_shard.c)
 * or the integrity check (sqlite_check.c).
 */
#include "sqlite_i.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct cat_db *cat_db(struct mf_catalog *c)
{
	return (struct cat_db *)c; /* base is the first member */
}

static int constraint_errno(int rc)
{
	switch (rc) {
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		return -ENOENT; /* the row refers to a snapshot that is not */
	case SQLITE_CONSTRAINT_PRIMARYKEY:
	case SQLITE_CONSTRAINT_UNIQUE:
		return -EEXIST;
	default:
		return -EINVAL; /* CHECK or NOT NULL: a bad value */
	}
}

/* The system's errno behind SQLite's last failure, as a negative errno;
 * 0 when SQLite saw none (its own finding). */
static int system_errno(sqlite3 *db)
{
	int sys = db ? sqlite3_system_errno(db) : 0;
	return sys > 0 ? -sys : 0;
}

int cat_errno(sqlite3 *db, int rc)
{
	mf_catalog_set_last_error(db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
	int sys = system_errno(db);
	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_CORRUPT: /* a disk that fails reads is no corruption */
		return sys == -EIO ? -EIO
				   : MF_CORRUPT("SQLite database disk image "
						"malformed");
	case SQLITE_NOTADB:
		return sys == -EIO ? -EIO
				   : MF_CORRUPT("not an SQLite database");
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_CANTOPEN: /* what open(2) said: EIO of a failed disk,
				 EACCES only when it was refused */
		return sys == -ENOTDIR ? -ENOENT : sys ? sys : -EIO;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_CONSTRAINT:
		return constraint_errno(rc);
	default:
		return -EIO;
	}
}

int cat_stmt(struct mf_catalog *c, enum cat_stmt_id id, const char *sql,
	     sqlite3_stmt **out)
{
	struct cat_db *d = cat_db(c);
	assert((unsigned)id < CAT_STMT_COUNT);
	if (!d->stmt[id]) {
		int rc = sqlite3_prepare_v3(d->db, sql, -1,
					    SQLITE_PREPARE_PERSISTENT,
					    &d->stmt[id], NULL);
		if (rc != SQLITE_OK)
			return cat_errno(d->db, rc);
	}
	/* one id, one text: a mismatch is a bug in the caller */
	assert(strcmp(sqlite3_sql(d->stmt[id]), sql) == 0);
	*out = d->stmt[id];
	return 0;
}

void cat_stmt_put(sqlite3_stmt *st)
{
	if (!st)
		return;
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
}

int cat_step_done(struct mf_catalog *c, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return 0;
	if (rc == SQLITE_ROW)
		return -EIO; /* a statement meant to return nothing did */
	return cat_errno(cat_db(c)->db, rc);
}

int cat_step_row(struct mf_catalog *c, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return cat_errno(cat_db(c)->db, rc);
}

int cat_changes(struct mf_catalog *c)
{
	return sqlite3_changes(cat_db(c)->db);
}

static int run_simple(struct mf_catalog *c, enum cat_stmt_id id,
		      const char *sql)
{
	sqlite3_stmt *st;
	int rc = cat_stmt(c, id, sql, &st);
	if (rc)
		return rc;
	rc = cat_step_done(c, st);
	cat_stmt_put(st);
	return rc;
}

static int exec_sql(struct mf_catalog *c, const char *sql)
{
	int rc = sqlite3_exec(cat_db(c)->db, sql, NULL, NULL, NULL);
	return rc == SQLITE_OK ? 0 : cat_errno(cat_db(c)->db, rc);
}

/* Inside mf_catalog_begin each call's transaction is the savepoint
 * cat_call; calls never nest, so one name serves. */
int cat_begin(struct mf_catalog *c)
{
	if (c->outer)
		return exec_sql(c, "SAVEPOINT cat_call");
	return run_simple(c, CAT_BEGIN, "BEGIN IMMEDIATE");
}

int cat_commit(struct mf_catalog *c)
{
	int rc = c->outer ? exec_sql(c, "RELEASE cat_call")
			  : run_simple(c, CAT_COMMIT, "COMMIT");
	if (rc)
		cat_rollback(c);
	return rc;
}

void cat_rollback(struct mf_catalog *c)
{
	/* SQLite may already have rolled back (some errors do that, to the
	 * outermost transaction: mf_catalog_end then fails to commit) */
	if (sqlite3_get_autocommit(cat_db(c)->db))
		return;
	if (c->outer)
		(void)exec_sql(c, "ROLLBACK TO cat_call; RELEASE cat_call");
	else
		(void)run_simple(c, CAT_ROLLBACK, "ROLLBACK");
}

int cat_finish(struct mf_catalog *c, int rc)
{
	if (rc) {
		cat_rollback(c);
		return rc;
	}
	return cat_commit(c);
}

int sq_begin(struct mf_catalog *c)
{
	return cat_begin(c);
}

int sq_end(struct mf_catalog *c, int rc)
{
	if (sqlite3_get_autocommit(
		cat_db(c)->db)) /* SQLite rolled it all back */
		return rc ? rc : -EIO;
	return cat_finish(c, rc);
}

int cat_read_one(struct mf_catalog *c, enum cat_stmt_id id, const char *sql,
		 const char *key, cat_row_fn from_row, void *out)
{
	sqlite3_stmt *st = NULL;
	int rc = cat_stmt(c, id, sql, &st);
	rc = rc ? rc : cat_bind_text(c, st, 1, key);
	rc = rc ? rc : cat_step_row(c, st);
	if (rc == 1)
		rc = from_row(st, out);
	else if (rc == 0)
		rc = -ENOENT;
	cat_stmt_put(st);
	return rc;
}

/* Grows *a (cap elements of size bytes) to hold one more than len. */
static int grow(void **a, size_t *cap, size_t len, size_t size)
{
	if (len < *cap)
		return 0;
	size_t want = *cap ? 2 * *cap : 16;
	void *grown = realloc(*a, want * size);
	if (!grown)
		return -ENOMEM;
	*a = grown;
	*cap = want;
	return 0;
}

int cat_collect(struct mf_catalog *c, sqlite3_stmt *st, size_t size,
		cat_row_fn from_row, cat_release_fn release, void **out,
		size_t *n)
{
	void *a = NULL;
	size_t len = 0, cap = 0;
	int rc;
	while ((rc = cat_step_row(c, st)) == 1) {
		rc = grow(&a, &cap, len, size);
		rc = rc ? rc : from_row(st, (char *)a + len * size);
		if (rc)
			break;
		len++;
	}
	if (rc) {
		for (size_t i = 0; release && i < len; i++)
			release((char *)a + i * size);
		free(a);
		return rc;
	}
	*out = a;
	*n = len;
	return 0;
}

int cat_col_copy(sqlite3_stmt *st, int i, char *buf, size_t size,
		 const char *why)
{
	const unsigned char *s = sqlite3_column_text(st, i);
	size_t n = s ? (size_t)sqlite3_column_bytes(st, i) : 0;
	if (n >= size)
		return mf_corrupt_at(__FILE__, __LINE__, why);
	if (n)
		memcpy(buf, s, n);
	buf[n] = '\0';
	return 0;
}

int cat_col_dup(sqlite3_stmt *st, int i, char **out)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL) {
		*out = NULL;
		return 0;
	}
	const unsigned char *s = sqlite3_column_text(st, i);
	if (!s)
		return -ENOMEM; /* text of a non-NULL value: only OOM fails */
	size_t n = (size_t)sqlite3_column_bytes(st, i);
	char *d = malloc(n + 1);
	if (!d)
		return -ENOMEM;
	memcpy(d, s, n);
	d[n] = '\0';
	*out = d;
	return 0;
}

int cat_bind_text(struct mf_catalog *c, sqlite3_stmt *st, int i, const char *s)
{
	int rc = s ? sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC)
		   : sqlite3_bind_null(st, i);
	return rc == SQLITE_OK ? 0 : cat_errno(cat_db(c)->db, rc);
}

int cat_bind_int64(struct mf_catalog *c, sqlite3_stmt *st, int i, int64_t v)
{
	int rc = sqlite3_bind_int64(st, i, v);
	return rc == SQLITE_OK ? 0 : cat_errno(cat_db(c)->db, rc);
}

/*
 * Connection settings. WAL with synchronous=NORMAL: a crashed process loses
 * nothing and the database never corrupts; a power loss may roll back the
 * last commits, which leaves an older consistent state (a shard computed
 * again, a run taken for dead). The store's own durable files are the
 * truth, and the catalog can be rebuilt from them.
 */
static int configure(sqlite3 *db, int busy_timeout_ms)
{
	sqlite3_extended_result_codes(db, 1);
	int rc = sqlite3_busy_timeout(db, busy_timeout_ms);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL,
				  NULL);
	return rc == SQLITE_OK ? 0 : cat_errno(db, rc);
}

static int journal_mode_wal(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	int rc =
	    sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const unsigned char *mode = sqlite3_column_text(st, 0);
		/* a file system without shared memory leaves another mode */
		rc = mode && strcmp((const char *)mode, "wal") == 0
		    ? SQLITE_OK
		    : SQLITE_IOERR;
	}
	sqlite3_finalize(st);
	return rc;
}

/*
 * Switching a fresh database to WAL answers SQLITE_BUSY at once, without
 * the busy handler, while another connection holds a lock on it (several
 * processes opening a new catalog together), so it is retried here until
 * the busy timeout.
 */
static int set_wal(sqlite3 *db, int busy_timeout_ms)
{
	uint64_t deadline = mf_mono_ns() + (uint64_t)busy_timeout_ms * 1000000u;
	int rc;
	while (((rc = journal_mode_wal(db)) & 0xff) == SQLITE_BUSY &&
	       mf_mono_ns() < deadline)
		usleep(2000);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "PRAGMA synchronous = NORMAL", NULL, NULL,
				  NULL);
	return rc == SQLITE_OK ? 0 : cat_errno(db, rc);
}

/* Settings, version check before anything is written, then migrations. */
static int prepare_db(sqlite3 *db, int busy_timeout_ms)
{
	int version;
	int rc = configure(db, busy_timeout_ms);
	if (!rc)
		rc = cat_schema_version(db, &version);
	if (!rc && version > MF_CATALOG_SCHEMA_VERSION)
		rc = -EPROTO; /* newer code wrote it: leave it untouched */
	if (!rc)
		rc = set_wal(db, busy_timeout_ms);
	if (!rc)
		rc = cat_migrate(db);
	return rc;
}

/* Takes the other users' bits off the file at path when it is a regular
 * file this process owns; no descriptor is opened (see own_file). */
static void narrow(const char *path)
{
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	    st.st_uid == geteuid() && (st.st_mode & 0007))
		(void)chmod(path, st.st_mode & 07770);
}

/*
 * The catalog holds failed stages' errors and stderr, which only root,
 * the daemon's user and the spec's owner may see (docs/security.md): a new
 * one is made here 0660 before the umask (SQLite's default is 0644, and
 * its -wal and -shm files take the database's mode), and one this process
 * owns, with its -wal and -shm, loses the other users' bits. An existing
 * database is never opened here: closing any descriptor of it would drop
 * every POSIX lock this process's connections hold on it.
 */
static void own_file(const char *path)
{
	if (strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
		return;
	int fd = open(
	    path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
	    0660);
	if (fd >= 0) { /* new: nobody holds a lock on it yet */
		close(fd);
		return;
	}
	char side[PATH_MAX];
	narrow(path);
	if (snprintf(side, sizeof(side), "%s-wal", path) < (int)sizeof(side))
		narrow(side);
	if (snprintf(side, sizeof(side), "%s-shm", path) < (int)sizeof(side))
		narrow(side);
}

/* The longest path SQLite's unix VFS opens (its MAX_PATHNAME, 512 with
 * the NUL): past it every open fails with SQLITE_CANTOPEN and no errno. */
#define SQ_PATH_MAX 511

int sq_open(const char *path, int busy_ms, struct mf_catalog **out)
{
	char cwd[PATH_MAX];
	size_t len = strlen(path);
	if (path[0] != '/') /* SQLite makes it absolute first */
		len += getcwd(cwd, sizeof(cwd)) ? strlen(cwd) + 1 : PATH_MAX;
	if (len > SQ_PATH_MAX) {
		char msg[96];
		snprintf(msg, sizeof(msg),
			 "its path is %zu bytes; SQLite opens at most %d", len,
			 SQ_PATH_MAX);
		mf_catalog_set_last_error(msg);
		return -ENAMETOOLONG;
	}
	own_file(path);
	struct cat_db *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	int flags =
	    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
	int rc = sqlite3_open_v2(path, &d->db, flags, NULL);
	if (rc != SQLITE_OK) {
		rc = cat_errno(d->db, rc);
		goto out_close;
	}
	rc = prepare_db(d->db, busy_ms);
	if (rc)
		goto out_close;
	*out = &d->base;
	return 0;

out_close:
	sqlite3_close(d->db); /* NULL is fine */
	free(d);
	return rc;
}

bool sq_moved(struct mf_catalog *c)
{
	int moved = 0;
	/* the unix VFS compares the inode at the path with the open file's;
	 * a path that no longer exists counts as moved */
	if (sqlite3_file_control(cat_db(c)->db, "main", SQLITE_FCNTL_HAS_MOVED,
				 &moved) != SQLITE_OK)
		return false;
	return moved != 0;
}

/* The mark of a catalog that indexes its store: "mfIX" in the database
 * header's application id, which no migration touches. */
#define CAT_INDEXED_MARK 0x6d664958

int sq_indexed(struct mf_catalog *c, bool *out)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(cat_db(c)->db, "PRAGMA application_id", -1,
				    &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int(st, 0) == CAT_INDEXED_MARK;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : cat_errno(cat_db(c)->db, rc);
}

int sq_set_indexed(struct mf_catalog *c)
{
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA application_id = %d",
		 CAT_INDEXED_MARK);
	int rc = cat_begin(c);
	if (rc)
		return rc;
	return cat_finish(c, exec_sql(c, sql));
}

/* One rule on one host: mf_catalog_run_alive. */
static int sq_judge(struct mf_catalog *c, const struct mf_run_rec *r,
		    int64_t now, int64_t pending_expiry, bool *alive)
{
	(void)c;
	*alive = mf_catalog_run_alive(r, now, pending_expiry);
	return 0;
}

void sq_close(struct mf_catalog *c)
{
	struct cat_db *d = cat_db(c);
	for (size_t i = 0; i < CAT_STMT_COUNT; i++)
		sqlite3_finalize(d->stmt[i]);
	sqlite3_close(d->db);
	free(d);
}

const struct mf_catalog_backend cat_sqlite_backend = {
    .name = "sqlite",
    .alias = NULL,
    .open = sq_open,
    .close = sq_close,
    .check = sq_check,
    .moved = sq_moved,
    .begin = sq_begin,
    .end = sq_end,
    .indexed = sq_indexed,
    .set_indexed = sq_set_indexed,
    .judge = sq_judge,
    .put_snapshot = sq_put_snapshot,
    .get_snapshot = sq_get_snapshot,
    .find_name = sq_find_name,
    .list_snapshots = sq_list_snapshots,
    .delete_snapshot = sq_delete_snapshot,
    .add_run = sq_add_run,
    .get_run = sq_get_run,
    .list_runs = sq_list_runs,
    .heartbeat = sq_heartbeat,
    .set_run_state = sq_set_run_state,
    .delete_run = sq_delete_run,
    .hold = sq_hold,
    .release = sq_release,
    .list_holds = sq_list_holds,
    .heartbeat_holds = sq_heartbeat_holds,
    .prune_holds = sq_prune_holds,
    .get_shard = sq_get_shard,
    .list_shards = sq_list_shards,
    .claim = sq_claim,
    .complete = sq_complete,
    .fail = sq_fail,
    .reset = sq_reset,
    .abandon = sq_abandon,
    .expire = sq_expire,
    .touch = sq_touch,
    .add_totals = sq_add_totals,
    .get_totals = sq_get_totals,
};
