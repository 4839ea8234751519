/*
 * catalog_test.h - helpers shared by the catalog tests: a temporary folder
 * per test, records filled with every field, and direct SQLite access for
 * what the catalog API does not show (user_version, journal mode, schema).
 *
 * Not for: assertions; each test asserts on what it checks.
 */
#ifndef MF_CATALOG_TEST_H
#define MF_CATALOG_TEST_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "mf_catalog.h"

struct cat_fixture {
	char dir[64]; /* mkdtemp folder, removed by ct_teardown */
	char db[128]; /* dir/catalog.db */
	/* the location tests open: db, or "SCHEME:db" when the environment
	 * names a scheme in MF_TEST_CATALOG_SCHEME ("sqlite") */
	char loc[160];
	struct mf_catalog *cat; /* opened by ct_setup_open, or NULL */
};

/* cmocka group-less setup and teardown: *state is a struct cat_fixture.
 * ct_setup makes the folder only; ct_setup_open also opens the catalog. */
int ct_setup(void **state);
int ct_setup_open(void **state);
int ct_teardown(void **state);

/* A 64-digit fingerprint "cccc…" and a 32-digit run id "cccc…". */
void ct_fp(char c, char out[MF_FP_HEX_LEN + 1]);
void ct_run_id(char c, char out[MF_RUN_ID_HEX_LEN + 1]);

/* A snapshot record with every field set from seed; strings are borrowed
 * from static storage, so never release it. */
void ct_snapshot(struct mf_snapshot_rec *r, char seed, const char *name,
		 uint32_t shards);
/* An active run of fp on host with pid and pid_start, its boot id and
 * pid namespace unknown (as a row from before schema 4). */
void ct_run(struct mf_run_rec *r, char seed, const char *fp, const char *host,
	    int32_t pid, uint64_t pid_start, int64_t heartbeat);
/* An active run of pid here: this host, boot and pid namespace. */
void ct_run_here(struct mf_run_rec *r, char seed, const char *fp, int32_t pid,
		 uint64_t pid_start, int64_t heartbeat);
/* An active run of this process on this host. */
void ct_run_self(struct mf_run_rec *r, char seed, const char *fp);

/* Direct SQLite access, failing the test on error. */
sqlite3 *ct_sqlite_open(const char *path);
void ct_sqlite_exec(sqlite3 *db, const char *sql);
int64_t ct_sqlite_int(sqlite3 *db, const char *sql);
/* The first column of the first row as text into buf. */
void ct_sqlite_text(sqlite3 *db, const char *sql, char *buf, size_t len);

/* Milliseconds on a monotonic clock. */
int64_t ct_ms(void);

#endif
