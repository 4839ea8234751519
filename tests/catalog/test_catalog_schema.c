/*
 * test_catalog_schema.c - opening the catalog: a fresh database, the
 * forward migration of a version-1 and of a version-2 database, refusal of
 * a newer one, errors of open, and waiting on (or timing out against)
 * another writer.
 *
 * Not for: rows (test_catalog_records.c) or claims (test_catalog_claim.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog_test.h"

static void test_fresh(void **state)
{
	struct cat_fixture *f = *state;
	assert_int_equal(access(f->db, F_OK), -1);
	assert_int_equal(mf_catalog_open(f->db, 0, &f->cat), 0);
	sqlite3 *db = ct_sqlite_open(f->db);
	char mode[16];
	assert_int_equal(ct_sqlite_int(db, "PRAGMA user_version"),
			 MF_CATALOG_SCHEMA_VERSION);
	ct_sqlite_text(db, "PRAGMA journal_mode", mode, sizeof(mode));
	assert_string_equal(mode, "wal");
	assert_int_equal(ct_sqlite_int(db,
				       "SELECT count(*) FROM sqlite_master"
				       " WHERE type = 'table' AND name IN"
				       " ('snapshots', 'runs', 'shards')"),
			 3);
	sqlite3_close(db);
	/* opening again migrates nothing and keeps the version */
	mf_catalog_close(f->cat);
	f->cat = NULL;
	assert_int_equal(mf_catalog_open(f->db, 1000, &f->cat), 0);
	db = ct_sqlite_open(f->db);
	assert_int_equal(ct_sqlite_int(db, "PRAGMA user_version"),
			 MF_CATALOG_SCHEMA_VERSION);
	sqlite3_close(db);
}

/* Every object, column, foreign key and index column of the schema, as
 * text: two databases with equal dumps have the same schema. */
static void dump_rows(sqlite3 *db, const char *sql, const char *arg, FILE *o)
{
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (arg)
		sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
	while (sqlite3_step(st) == SQLITE_ROW) {
		for (int i = 0; i < sqlite3_column_count(st); i++) {
			const unsigned char *s = sqlite3_column_text(st, i);
			fprintf(o, "%s|", s ? (const char *)s : "NULL");
		}
		fputc('\n', o);
	}
	sqlite3_finalize(st);
}

static char *dump_schema(const char *path)
{
	sqlite3 *db = ct_sqlite_open(path);
	char *buf = NULL;
	size_t len = 0;
	FILE *o = open_memstream(&buf, &len);
	assert_non_null(o);
	sqlite3_stmt *st = NULL;
	assert_int_equal(
	    sqlite3_prepare_v2(db,
			       "SELECT type, name FROM sqlite_master"
			       " ORDER BY type, name",
			       -1, &st, NULL),
	    SQLITE_OK);
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *type = (const char *)sqlite3_column_text(st, 0);
		const char *name = (const char *)sqlite3_column_text(st, 1);
		fprintf(o, "%s %s\n", type, name);
		if (strcmp(type, "table") == 0) {
			dump_rows(db, "SELECT * FROM pragma_table_info(?1)",
				  name, o);
			dump_rows(db,
				  "SELECT * FROM pragma_foreign_key_list(?1)",
				  name, o);
		} else if (strcmp(type, "index") == 0) {
			dump_rows(db, "SELECT * FROM pragma_index_xinfo(?1)",
				  name, o);
		}
	}
	sqlite3_finalize(st);
	fclose(o);
	sqlite3_close(db);
	return buf;
}

/* Makes path the database tests/catalog/schema_vVERSION.sql describes. */
static void load_fixture(const char *path, int version)
{
	const char *root = getenv("MF_SOURCE_ROOT");
	assert_non_null(root);
	char fixture[4096];
	snprintf(fixture, sizeof(fixture), "%s/tests/catalog/schema_v%d.sql",
		 root, version);
	FILE *in = fopen(fixture, "r");
	assert_non_null(in);
	char sql[16384];
	size_t n = fread(sql, 1, sizeof(sql) - 1, in);
	assert_true(n > 0 && n < sizeof(sql) - 1);
	sql[n] = '\0';
	fclose(in);
	sqlite3 *db = ct_sqlite_open(path);
	ct_sqlite_exec(db, sql);
	assert_int_equal(ct_sqlite_int(db, "PRAGMA user_version"), version);
	sqlite3_close(db);
}

/* The migrated schema of path is the schema a fresh catalog gets. */
static void check_schema_fresh(struct cat_fixture *f)
{
	char fresh[160];
	struct mf_catalog *c2 = NULL;
	snprintf(fresh, sizeof(fresh), "%s/fresh.db", f->dir);
	assert_int_equal(mf_catalog_open(fresh, 0, &c2), 0);
	mf_catalog_close(c2);
	char *a = dump_schema(f->db), *b = dump_schema(fresh);
	assert_string_equal(a, b);
	free(a);
	free(b);
}

static void check_v1_rows(struct mf_catalog *cat)
{
	char fp[MF_FP_HEX_LEN + 1], run[MF_RUN_ID_HEX_LEN + 1];
	struct mf_snapshot_rec s;
	struct mf_shard_rec h;
	struct mf_run_rec r;
	ct_fp('a', fp);
	ct_run_id('1', run);
	assert_int_equal(mf_catalog_get_snapshot(cat, fp, &s), 0);
	assert_string_equal(s.name, "wiki-tokens");
	assert_string_equal(s.spec_path, "/srv/pipelines/wiki.yaml");
	assert_int_equal(s.shards, 3);
	assert_int_equal(s.keep, 2);
	assert_int_equal(s.last_read, 1690000900);
	assert_int_equal(s.materialized, 1);
	assert_int_equal(s.raw_bytes, 1000000);
	assert_int_equal(s.stored_bytes, 250000);
	mf_snapshot_rec_release(&s);
	assert_int_equal(mf_catalog_get_shard(cat, fp, 1, &h), 0);
	assert_int_equal(h.state, MF_SHARD_FAILED);
	assert_int_equal(h.exit_status, 256);
	assert_string_equal(h.error,
			    "stage 'tokenize.py' exited with status 1");
	assert_null(h.stderr_tail); /* new columns read as their defaults */
	assert_int_equal(h.attempts, 0);
	mf_shard_rec_release(&h);
	assert_int_equal(mf_catalog_get_run(cat, run, &r), 0);
	assert_string_equal(r.host, "node7");
	assert_int_equal(r.pid, 4242);
	assert_int_equal(r.pid_start, 987654);
	assert_string_equal(r.state, "done");
	/* where its pid meant something was not recorded then */
	assert_string_equal(r.boot_id, "");
	assert_int_equal(r.pid_ns, 0);
}

static void test_migrate_v1(void **state)
{
	struct cat_fixture *f = *state;
	load_fixture(f->db, 1);
	assert_int_equal(mf_catalog_open(f->db, 0, &f->cat), 0);
	sqlite3 *db = ct_sqlite_open(f->db);
	assert_int_equal(ct_sqlite_int(db, "PRAGMA user_version"),
			 MF_CATALOG_SCHEMA_VERSION);
	assert_int_equal(ct_sqlite_int(db, "SELECT count(*) FROM shards"), 3);
	assert_int_equal(ct_sqlite_int(db,
				       "SELECT count(*) FROM"
				       " pragma_table_info('shards') WHERE"
				       " name IN ('stderr_tail',"
				       " 'attempts')"),
			 2);
	assert_int_equal(ct_sqlite_int(db,
				       "SELECT count(*) FROM"
				       " pragma_table_info('runs') WHERE"
				       " name IN ('boot_id', 'pid_ns')"),
			 2);
	assert_int_equal(ct_sqlite_int(db,
				       "SELECT sum(attempts) +"
				       " count(stderr_tail) FROM shards"),
			 0);
	assert_int_equal(ct_sqlite_int(db,
				       "SELECT count(*) FROM sqlite_master"
				       " WHERE name = 'shards_last_read'"),
			 1);
	sqlite3_close(db);
	check_v1_rows(f->cat);
	/* version 6: totals start from zero, running counted from shards */
	struct mf_catalog_totals t;
	assert_int_equal(mf_catalog_get_totals(f->cat, &t), 0);
	assert_int_equal(t.started + t.failed + t.stage_ms, 0);
	assert_int_equal(t.running, 0);
	check_schema_fresh(f);
}

/* Version 2 to 3: every shard that is not absent gets a generation of its
 * own, nonzero; an absent one keeps 0; the rest of each row is kept. */
static void test_migrate_v2(void **state)
{
	struct cat_fixture *f = *state;
	char fp[MF_FP_HEX_LEN + 1], run[MF_RUN_ID_HEX_LEN + 1];
	struct mf_shard_rec h[4];
	load_fixture(f->db, 2);
	assert_int_equal(mf_catalog_open(f->db, 0, &f->cat), 0);
	sqlite3 *db = ct_sqlite_open(f->db);
	assert_int_equal(ct_sqlite_int(db, "PRAGMA user_version"),
			 MF_CATALOG_SCHEMA_VERSION);
	sqlite3_close(db);
	ct_fp('b', fp);
	ct_run_id('2', run);
	for (uint32_t k = 0; k < 4; k++)
		assert_int_equal(mf_catalog_get_shard(f->cat, fp, k, &h[k]), 0);
	assert_int_equal(h[0].state, MF_SHARD_MATERIALIZED);
	assert_string_equal(h[0].run_id, run);
	assert_int_equal(h[0].raw_bytes, 1000000);
	assert_int_equal(h[0].attempts, 3);
	assert_int_equal(h[1].state, MF_SHARD_FAILED);
	assert_int_equal(h[1].exit_status, 256);
	assert_string_equal(h[1].stderr_tail,
			    "Traceback (most recent call last):\n"
			    "ValueError: bad line");
	assert_int_equal(h[2].state, MF_SHARD_RUNNING);
	assert_int_equal(h[3].state, MF_SHARD_ABSENT);
	assert_int_equal(h[3].generation, 0);
	for (int i = 0; i < 3; i++) {
		assert_true(h[i].generation > 0);
		assert_true(h[i].generation <= (uint64_t)INT64_MAX);
		for (int k = 0; k < i; k++)
			assert_true(h[i].generation != h[k].generation);
	}
	for (int k = 0; k < 4; k++)
		mf_shard_rec_release(&h[k]);
	check_schema_fresh(f);
}

static char *read_all(const char *path, size_t *len)
{
	FILE *in = fopen(path, "rb");
	assert_non_null(in);
	char *buf = malloc(1 << 20);
	assert_non_null(buf);
	*len = fread(buf, 1, 1 << 20, in);
	fclose(in);
	return buf;
}

static void test_newer_refused(void **state)
{
	struct cat_fixture *f = *state;
	sqlite3 *db = ct_sqlite_open(f->db);
	ct_sqlite_exec(db,
		       "CREATE TABLE future (x); INSERT INTO future"
		       " VALUES (42); PRAGMA user_version = 99;");
	sqlite3_close(db);
	size_t n1, n2;
	char *before = read_all(f->db, &n1);
	struct mf_catalog *c = (struct mf_catalog *)0x1;
	assert_int_equal(mf_catalog_open(f->db, 0, &c), -EPROTO);
	assert_ptr_equal(c, (struct mf_catalog *)0x1);
	char *after = read_all(f->db, &n2);
	assert_int_equal(n1, n2);
	assert_memory_equal(before, after, n1);
	free(before);
	free(after);
	db = ct_sqlite_open(f->db);
	assert_int_equal(ct_sqlite_int(db, "PRAGMA user_version"), 99);
	char mode[16];
	ct_sqlite_text(db, "PRAGMA journal_mode", mode, sizeof(mode));
	assert_string_equal(mode, "delete");
	sqlite3_close(db);
}

static void test_open_errors(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_catalog *c = NULL;
	char path[160];
	snprintf(path, sizeof(path), "%s/no/such/folder/catalog.db", f->dir);
	assert_int_equal(mf_catalog_open(path, 0, &c), -ENOENT);
	assert_int_equal(mf_catalog_open(NULL, 0, &c), -EINVAL);
	assert_int_equal(mf_catalog_open(f->db, 0, NULL), -EINVAL);

	char junk[8192];
	memset(junk, 'x', sizeof(junk));
	int fd = open(f->db, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	assert_int_equal(mf_catalog_open(f->db, 0, &c), -EBADMSG);
	assert_null(c);
}

/* Another connection holding the write lock for hold_ms. */
struct holder {
	const char *path;
	int hold_ms;
	sem_t locked;
	int rc;
};

static void *hold_lock(void *arg)
{
	struct holder *h = arg;
	sqlite3 *db = NULL;
	h->rc = sqlite3_open(h->path, &db);
	if (h->rc == SQLITE_OK)
		h->rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	sem_post(&h->locked);
	if (h->rc == SQLITE_OK) {
		usleep((useconds_t)h->hold_ms * 1000);
		h->rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	}
	sqlite3_close(db);
	return NULL;
}

/* Puts a snapshot through a catalog with busy_ms while another connection
 * holds the lock for hold_ms; returns the result and the time taken. */
static int put_against(struct cat_fixture *f, int busy_ms, int hold_ms,
		       int64_t *took_ms)
{
	struct mf_catalog *c = NULL;
	struct mf_snapshot_rec s;
	struct holder h = {.path = f->db, .hold_ms = hold_ms};
	pthread_t t;
	assert_int_equal(mf_catalog_open(f->db, busy_ms, &c), 0);
	ct_snapshot(&s, 'b', "busy", 2);
	assert_int_equal(sem_init(&h.locked, 0, 0), 0);
	assert_int_equal(pthread_create(&t, NULL, hold_lock, &h), 0);
	sem_wait(&h.locked);
	int64_t t0 = ct_ms();
	int rc = mf_catalog_put_snapshot(c, &s);
	*took_ms = ct_ms() - t0;
	pthread_join(t, NULL);
	sem_destroy(&h.locked);
	assert_int_equal(h.rc, SQLITE_OK);
	mf_catalog_close(c);
	return rc;
}

static void test_busy_waits(void **state)
{
	struct cat_fixture *f = *state;
	int64_t took;
	assert_int_equal(put_against(f, 5000, 300, &took), 0);
	assert_true(took >= 250); /* it waited for the other writer */
	assert_true(took < 4000);
}

static void test_busy_times_out(void **state)
{
	struct cat_fixture *f = *state;
	int64_t took;
	assert_int_equal(put_against(f, 100, 1000, &took), -EBUSY);
	assert_true(took >= 90);
	assert_true(took < 900);
	/* nothing was written */
	struct mf_snapshot_rec s;
	char fp[MF_FP_HEX_LEN + 1];
	ct_fp('b', fp);
	assert_int_equal(mf_catalog_get_snapshot(f->cat, fp, &s), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_fresh, ct_setup, ct_teardown),
	    cmocka_unit_test_setup_teardown(test_migrate_v1, ct_setup,
					    ct_teardown),
	    cmocka_unit_test_setup_teardown(test_migrate_v2, ct_setup,
					    ct_teardown),
	    cmocka_unit_test_setup_teardown(test_newer_refused, ct_setup,
					    ct_teardown),
	    cmocka_unit_test_setup_teardown(test_open_errors, ct_setup,
					    ct_teardown),
	    cmocka_unit_test_setup_teardown(test_busy_waits, ct_setup_open,
					    ct_teardown),
	    cmocka_unit_test_setup_teardown(test_busy_times_out, ct_setup_open,
					    ct_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
