/*
 * test_catalog_backend.c - what lies between mf_catalog.h and a backend:
 * the location (a plain path and "sqlite:PATH" open the same SQLite file,
 * "SCHEME://..." of any other scheme is -EPROTONOSUPPORT and creates
 * nothing), the backend table (every operation filled), and the integrity
 * check mf_catalog_check on sound, missing, empty, garbage and damaged
 * catalog files.
 *
 * Not for: the operations' behaviour (test_catalog_contract.c and the
 * other tests of this folder).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog_backend.h"
#include "catalog_test.h"

/* Entries of folder dir, "." and ".." aside. */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n +=
		    strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return n;
}

static void test_location_parse(void **state)
{
	(void)state;
	const struct mf_catalog_backend *be = NULL;
	const char *target = NULL;
	assert_int_equal(cat_backend_find("/s/catalog.db", &be, &target), 0);
	assert_ptr_equal(be, &cat_sqlite_backend);
	assert_string_equal(target, "/s/catalog.db");
	assert_int_equal(cat_backend_find("sqlite:/s/catalog.db", &be, &target),
			 0);
	assert_ptr_equal(be, &cat_sqlite_backend);
	assert_string_equal(target, "/s/catalog.db");
	assert_int_equal(cat_backend_find("sqlite:rel/c.db", &be, &target), 0);
	assert_string_equal(target, "rel/c.db");
	/* a colon alone makes no scheme: a relative path stays a path */
	assert_int_equal(cat_backend_find("a:b/catalog.db", &be, &target), 0);
	assert_ptr_equal(be, &cat_sqlite_backend);
	assert_string_equal(target, "a:b/catalog.db");

	/* PostgreSQL takes a URI whole, and KEY=VALUE after its name */
	assert_int_equal(
	    cat_backend_find("postgresql://db.example/matfs", &be, &target), 0);
	assert_ptr_equal(be, &cat_pg_backend);
	assert_string_equal(target, "postgresql://db.example/matfs");
	assert_int_equal(cat_backend_find("postgres://x", &be, &target), 0);
	assert_ptr_equal(be, &cat_pg_backend);
	assert_string_equal(target, "postgres://x");
	assert_int_equal(
	    cat_backend_find("postgresql:host=h dbname=d", &be, &target), 0);
	assert_ptr_equal(be, &cat_pg_backend);
	assert_string_equal(target, "host=h dbname=d");
	assert_int_equal(cat_backend_find("redis://db.example/0", &be, &target),
			 -EPROTONOSUPPORT);
	assert_int_equal(cat_backend_find("My+sql.v2-x://h", &be, &target),
			 -EPROTONOSUPPORT);
	assert_int_equal(cat_backend_find("sqlite:", &be, &target), -EINVAL);
	assert_int_equal(cat_backend_find("", &be, &target), -EINVAL);
}

/* A location as messages show it: every PostgreSQL password masked. */
static void test_location_shown(void **state)
{
	(void)state;
	static const char *const cases[][2] = {
	    {"postgresql://u:s3cret@db:5432/m?sslmode=require",
	     "postgresql://u:***@db:5432/m?sslmode=require"},
	    {"postgres://u:s3cret@db/m", "postgres://u:***@db/m"},
	    {"postgresql://u@db/m?password=s3cret&sslmode=disable",
	     "postgresql://u@db/m?password=***&sslmode=disable"},
	    {"postgresql://db/m", "postgresql://db/m"},
	    {"postgresql:host=db password=s3cret dbname=m",
	     "postgresql:host=db password=*** dbname=m"},
	    {"postgresql:host=db password = 'a b\\' s3cret' dbname=m",
	     "postgresql:host=db password = *** dbname=m"},
	    {"postgresql:host=db mypassword=x",
	     "postgresql:host=db mypassword=x"},
	    {"sqlite:/var/cache/matfs/catalog.db",
	     "sqlite:/var/cache/matfs/catalog.db"},
	};
	char buf[128];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		mf_catalog_location_shown(cases[i][0], buf, sizeof(buf));
		assert_string_equal(buf, cases[i][1]);
		assert_null(strstr(buf, "s3cret"));
	}
	/* cut to fit, never past the buffer */
	mf_catalog_location_shown(cases[0][0], buf, 12);
	assert_string_equal(buf, "postgresql:");
}

/* How a message names a catalog to a user: a SQLite catalog by its path,
 * whatever names it; a PostgreSQL one masked; and the location of a file
 * whose path reads as a location stays that file. */
static void test_location_told(void **state)
{
	(void)state;
	char buf[128];
	mf_catalog_location_told("sqlite:/var/cache/matfs/catalog.db", buf,
				 sizeof(buf));
	assert_string_equal(buf, "/var/cache/matfs/catalog.db");
	mf_catalog_location_told("./catalog.db", buf, sizeof(buf));
	assert_string_equal(buf, "./catalog.db");
	mf_catalog_location_told("postgres://u:s3cret@db/m", buf, sizeof(buf));
	assert_string_equal(buf, "postgres://u:***@db/m");
	mf_catalog_location_told(NULL, buf, sizeof(buf));
	assert_string_equal(buf, "");

	char *loc = NULL;
	assert_int_equal(mf_catalog_location_of_file("a://b/catalog.db", &loc),
			 0);
	assert_string_equal(loc, "sqlite:a://b/catalog.db");
	const struct mf_catalog_backend *be;
	const char *target;
	assert_int_equal(cat_backend_find(loc, &be, &target), 0);
	assert_ptr_equal(be, &cat_sqlite_backend);
	assert_string_equal(target, "a://b/catalog.db");
	mf_catalog_location_told(loc, buf, sizeof(buf));
	assert_string_equal(buf, "a://b/catalog.db");
	free(loc);
}

static void test_open_locations(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_catalog *c = NULL;
	struct mf_snapshot_rec s, got;
	char loc[200];

	/* nothing is created for a backend this build does not have */
	assert_int_equal(mf_catalog_open("redis://localhost/0", 0, &c),
			 -EPROTONOSUPPORT);
	assert_null(c);
	assert_int_equal(mf_catalog_open("sqlite:", 0, &c), -EINVAL);
	assert_int_equal(entries(f->dir), 0);

	/* sqlite:PATH writes the file a plain PATH reads */
	snprintf(loc, sizeof(loc), "sqlite:%s", f->db);
	assert_int_equal(mf_catalog_open(loc, 0, &c), 0);
	ct_snapshot(&s, 'a', "located", 2);
	assert_int_equal(mf_catalog_put_snapshot(c, &s), 0);
	mf_catalog_close(c);
	assert_int_equal(mf_catalog_open(f->db, 0, &c), 0);
	assert_int_equal(mf_catalog_get_snapshot(c, s.fp, &got), 0);
	assert_string_equal(got.name, "located");
	mf_snapshot_rec_release(&got);
	mf_catalog_close(c);

	/* a relative path with a colon is still a path, as before */
	char cwd[4096];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(f->dir), 0);
	int rc = mf_catalog_open("x:y.db", 0, &c);
	struct stat sb;
	int st = stat("x:y.db", &sb);
	assert_int_equal(chdir(cwd), 0);
	assert_int_equal(rc, 0);
	assert_int_equal(st, 0);
	mf_catalog_close(c);
}

/* Every operation of backend b is filled. */
static void table_complete(const struct mf_catalog_backend *b)
{
	const bool filled[] = {
	    b->open != NULL,	       b->close != NULL,
	    b->check != NULL,	       b->moved != NULL,
	    b->begin != NULL,	       b->end != NULL,
	    b->indexed != NULL,	       b->set_indexed != NULL,
	    b->judge != NULL,	       b->put_snapshot != NULL,
	    b->get_snapshot != NULL,   b->find_name != NULL,
	    b->list_snapshots != NULL, b->delete_snapshot != NULL,
	    b->add_run != NULL,	       b->get_run != NULL,
	    b->list_runs != NULL,      b->heartbeat != NULL,
	    b->set_run_state != NULL,  b->delete_run != NULL,
	    b->hold != NULL,	       b->release != NULL,
	    b->list_holds != NULL,     b->heartbeat_holds != NULL,
	    b->prune_holds != NULL,    b->get_shard != NULL,
	    b->list_shards != NULL,    b->claim != NULL,
	    b->complete != NULL,       b->fail != NULL,
	    b->reset != NULL,	       b->abandon != NULL,
	    b->expire != NULL,	       b->touch != NULL,
	    b->add_totals != NULL,     b->get_totals != NULL,
	};
	/* optional: now (NULL: the host's clock) and wait (NULL where no
	 * backend tells of changes) */
	const size_t optional = 2;
	/* every member after the name and alias is an operation, and each
	 * is listed */
	assert_int_equal(sizeof(filled) / sizeof(filled[0]) + optional,
			 (sizeof(*b) - sizeof(b->name) - sizeof(b->alias)) /
			     sizeof(void (*)(void)));
	for (size_t i = 0; i < sizeof(filled) / sizeof(filled[0]); i++)
		assert_true(filled[i]);
}

static void test_table_complete(void **state)
{
	(void)state;
	assert_string_equal(cat_sqlite_backend.name, "sqlite");
	assert_null(cat_sqlite_backend.alias);
	table_complete(&cat_sqlite_backend);
	assert_string_equal(cat_pg_backend.name, "postgresql");
	assert_string_equal(cat_pg_backend.alias, "postgres");
	table_complete(&cat_pg_backend);
	assert_null(cat_sqlite_backend.wait); /* its waiters poll */
	assert_non_null(cat_pg_backend.wait); /* LISTEN/NOTIFY */
}

/* Malformed rows answer -EBADMSG with the check that found them. */
static void test_corrupt_rows_name_the_check(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec s, got;
	struct mf_shard_rec r;
	ct_snapshot(&s, 'a', "bad", 2);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &s), 0);
	sqlite3 *db = ct_sqlite_open(f->db);
	ct_sqlite_exec(db,
		       "PRAGMA ignore_check_constraints = 1;"
		       "UPDATE shards SET state = 'bogus' WHERE idx = 0;"
		       "UPDATE shards SET fp = fp || 'x' WHERE idx = 1;"
		       "UPDATE snapshots SET name = printf('%.100c', 'n')");
	sqlite3_close(db);
	mf_corrupt_clear();
	assert_int_equal(mf_catalog_get_shard(f->cat, s.fp, 0, &r), -EBADMSG);
	assert_string_equal(mf_corrupt_reason(), "shard state");
	mf_corrupt_clear();
	struct mf_shard_rec *v;
	size_t n;
	char longer[MF_FP_HEX_LEN + 2];
	snprintf(longer, sizeof(longer), "%sx", s.fp);
	assert_int_equal(mf_catalog_list_shards(f->cat, longer, &v, &n),
			 -EBADMSG);
	assert_string_equal(mf_corrupt_reason(), "fp length");
	mf_corrupt_clear();
	assert_int_equal(mf_catalog_get_snapshot(f->cat, s.fp, &got), -EBADMSG);
	assert_string_equal(mf_corrupt_reason(), "snapshot name length");
}

/* ---- mf_catalog_check ---- */

struct seen {
	int n;
	char where[200];
	char detail[600];
};

static void on_problem(void *arg, const char *where, const char *detail)
{
	struct seen *s = arg;
	if (s->n++ == 0) {
		snprintf(s->where, sizeof(s->where), "%s", where);
		snprintf(s->detail, sizeof(s->detail), "%s", detail);
	}
}

/* Runs the check on f->db; returns what it saw, asserting rc 0. */
static struct seen check(const struct cat_fixture *f, bool *usable)
{
	struct seen s = {0};
	assert_int_equal(mf_catalog_check(f->db, 0, on_problem, &s, usable), 0);
	if (s.n)
		assert_string_equal(s.where, f->db);
	return s;
}

static void write_file(const char *path, char byte, size_t n, off_t at)
{
	char buf[4096];
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	memset(buf, byte, sizeof(buf));
	while (n > 0) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf);
		assert_int_equal(pwrite(fd, buf, k, at), (ssize_t)k);
		n -= k;
		at += (off_t)k;
	}
	close(fd);
}

static void test_check_sound_missing_empty(void **state)
{
	struct cat_fixture *f = *state;
	bool usable = true;
	struct seen s = check(f, &usable);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.detail, "the catalog is missing");
	assert_false(usable);
	assert_int_equal(entries(f->dir), 0); /* the check created nothing */

	write_file(f->db, 0, 0, 0);
	s = check(f, &usable);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.detail, "the catalog is empty (0 bytes)");
	assert_false(usable);
	assert_int_equal(unlink(f->db), 0);

	assert_int_equal(mkdir(f->db, 0755), 0);
	s = check(f, &usable);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.detail, "the catalog is not a regular file");
	assert_int_equal(rmdir(f->db), 0);

	struct mf_catalog *c;
	struct mf_snapshot_rec r;
	assert_int_equal(mf_catalog_open(f->db, 0, &c), 0);
	ct_snapshot(&r, 'a', "sound", 3);
	assert_int_equal(mf_catalog_put_snapshot(c, &r), 0);
	mf_catalog_close(c);
	s = check(f, &usable);
	assert_int_equal(s.n, 0);
	assert_true(usable);

	/* a location, as mf_catalog_open takes it */
	char loc[200];
	snprintf(loc, sizeof(loc), "sqlite:%s", f->db);
	usable = false;
	assert_int_equal(mf_catalog_check(loc, 0, NULL, NULL, &usable), 0);
	assert_true(usable);
	assert_int_equal(
	    mf_catalog_check("redis://h/0", 0, on_problem, &s, &usable),
	    -EPROTONOSUPPORT);
	assert_int_equal(s.n, 0);
	assert_false(usable);
}

static void test_check_garbage(void **state)
{
	struct cat_fixture *f = *state;
	bool usable = true;
	write_file(f->db, 'x', 9000, 0);
	struct seen s = check(f, &usable);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.detail,
			    "not a usable SQLite database (file is not a "
			    "database)");
	assert_false(usable);
	struct stat sb;
	assert_int_equal(stat(f->db, &sb), 0);
	assert_int_equal(sb.st_size, 9000); /* left as it was */
}

static void test_check_damaged(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_catalog *c;
	struct mf_snapshot_rec r;
	assert_int_equal(mf_catalog_open(f->db, 0, &c), 0);
	ct_snapshot(&r, 'a', "damaged", 3000); /* shard rows over many pages */
	assert_int_equal(mf_catalog_put_snapshot(c, &r), 0);
	mf_catalog_close(c); /* the last connection checkpoints the WAL */
	struct stat sb;
	assert_int_equal(stat(f->db, &sb), 0);
	assert_true(sb.st_size >= 8 * 4096);

	write_file(f->db, 0x55, 4096, 4 * 4096); /* page 5 */
	bool usable;
	struct seen s = check(f, &usable);
	assert_true(s.n >= 1);
	assert_string_equal(s.where, f->db); /* names the file */
	assert_true(strncmp(s.detail, "integrity_check: ", 17) == 0 ||
		    strncmp(s.detail, "not a usable SQLite database", 28) == 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, ct_setup, ct_teardown)
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_location_parse),
	    cmocka_unit_test(test_location_shown),
	    cmocka_unit_test(test_location_told),
	    cmocka_unit_test(test_table_complete),
	    T(test_open_locations),
	    cmocka_unit_test_setup_teardown(test_corrupt_rows_name_the_check,
					    ct_setup_open, ct_teardown),
	    T(test_check_sound_missing_empty),
	    T(test_check_garbage),
	    T(test_check_damaged),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}
