/*
 * sqlite_check.c - the integrity check of an SQLite catalog file, for
 * fsck: the file itself (missing, not a regular file, empty), then PRAGMA
 * integrity_check on a connection of its own that can create nothing.
 *
 * Not for: repairs (the engine rebuilds a catalog from the store) or
 * opening a catalog for use (sqlite_db.c).
 */
#include "sqlite_i.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define DETAIL_MAX 512

struct check {
	const char *path;
	mf_catalog_problem_fn report;
	void *arg;
};

__attribute__((format(printf, 2, 3))) static void problem(const struct check *x,
							  const char *fmt, ...)
{
	char detail[DETAIL_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (x->report)
		x->report(x->arg, x->path, detail);
}

/* PRAGMA integrity_check on a connection of its own, which creates no
 * database. *usable is false when the file is no database at all. */
static int integrity(const struct check *x, int busy, bool *usable)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_open_v2(x->path, &db, SQLITE_OPEN_READWRITE, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_busy_timeout(db, busy);
		rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check(20)", -1,
					&st, NULL);
	}
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *msg = (const char *)sqlite3_column_text(st, 0);
		if (!msg || strcmp(msg, "ok") != 0)
			problem(x, "integrity_check: %s", msg ? msg : "(null)");
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	int err = rc == SQLITE_DONE ? 0 : cat_errno(db, rc);
	sqlite3_close(db);
	*usable = rc == SQLITE_DONE;
	if (err != -EBADMSG)
		return err;
	problem(x, "not a usable SQLite database (%s)", sqlite3_errstr(rc));
	return 0;
}

/* The file before SQLite sees it: SQLite would take a missing or empty
 * file for a new database and write one. */
int sq_check(const char *path, int busy_ms, mf_catalog_problem_fn report,
	     void *arg, bool *usable)
{
	struct check x = {path, report, arg};
	struct stat sb;
	*usable = false;
	if (lstat(path, &sb) != 0) {
		if (errno != ENOENT)
			return -errno;
		problem(&x, "the catalog is missing");
	} else if (!S_ISREG(sb.st_mode)) {
		problem(&x, "the catalog is not a regular file");
	} else if (sb.st_size == 0) {
		problem(&x, "the catalog is empty (0 bytes)");
	} else {
		return integrity(&x, busy_ms, usable);
	}
	return 0;
}
