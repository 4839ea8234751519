/*
 * catalog_test.c - the helpers declared in catalog_test.h.
 *
 * Not for: tests themselves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog_test.h"

int ct_setup(void **state)
{
	struct cat_fixture *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/mf-catalog-XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	snprintf(f->db, sizeof(f->db), "%s/catalog.db", f->dir);
	const char *scheme = getenv("MF_TEST_CATALOG_SCHEME");
	if (scheme && *scheme)
		snprintf(f->loc, sizeof(f->loc), "%s:%s", scheme, f->db);
	else
		snprintf(f->loc, sizeof(f->loc), "%s", f->db);
	*state = f;
	return 0;
}

int ct_setup_open(void **state)
{
	if (ct_setup(state))
		return -1;
	struct cat_fixture *f = *state;
	return mf_catalog_open(f->loc, 0, &f->cat) ? -1 : 0;
}

static int remove_entry(const char *path, const struct stat *sb, int type,
			struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	return remove(path);
}

int ct_teardown(void **state)
{
	struct cat_fixture *f = *state;
	mf_catalog_close(f->cat);
	int rc = nftw(f->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return rc ? -1 : 0;
}

void ct_fp(char c, char out[MF_FP_HEX_LEN + 1])
{
	memset(out, c, MF_FP_HEX_LEN);
	out[MF_FP_HEX_LEN] = '\0';
}

void ct_run_id(char c, char out[MF_RUN_ID_HEX_LEN + 1])
{
	memset(out, c, MF_RUN_ID_HEX_LEN);
	out[MF_RUN_ID_HEX_LEN] = '\0';
}

void ct_snapshot(struct mf_snapshot_rec *r, char seed, const char *name,
		 uint32_t shards)
{
	static char spec[] = "/srv/pipelines/wiki.yaml";
	static char comp[] = "zstd:7";
	static char suffix[] = ".bin";
	memset(r, 0, sizeof(*r));
	ct_fp(seed, r->fp);
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->shards = shards;
	r->spec_path = spec;
	r->compression = comp;
	r->suffix = suffix;
	r->chunk_size = 4u << 20;
	r->expire_after = 7 * 86400;
	r->pending_expiry = 3600;
	r->keep = 3;
	r->created = 1700000000;
	r->last_read = 1700000500;
}

void ct_run(struct mf_run_rec *r, char seed, const char *fp, const char *host,
	    int32_t pid, uint64_t pid_start, int64_t heartbeat)
{
	memset(r, 0, sizeof(*r));
	ct_run_id(seed, r->run_id);
	snprintf(r->fp, sizeof(r->fp), "%s", fp);
	snprintf(r->host, sizeof(r->host), "%s", host);
	r->pid = pid;
	r->pid_start = pid_start;
	r->started = heartbeat - 10;
	r->heartbeat = heartbeat;
	snprintf(r->state, sizeof(r->state), "active");
}

void ct_run_here(struct mf_run_rec *r, char seed, const char *fp, int32_t pid,
		 uint64_t pid_start, int64_t heartbeat)
{
	char host[256];
	mf_hostname(host, sizeof(host));
	ct_run(r, seed, fp, host, pid, pid_start, heartbeat);
	assert_int_equal(mf_boot_id(r->boot_id), 0);
	r->pid_ns = mf_pid_ns();
	assert_true(r->pid_ns != 0);
}

void ct_run_self(struct mf_run_rec *r, char seed, const char *fp)
{
	ct_run_here(r, seed, fp, (int32_t)getpid(),
		    mf_proc_start_time(getpid()), mf_now_s());
}

sqlite3 *ct_sqlite_open(const char *path)
{
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	return db;
}

void ct_sqlite_exec(sqlite3 *db, const char *sql)
{
	char *err = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK)
		fail_msg("sql '%s': %s", sql, err ? err : "?");
}

int64_t ct_sqlite_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int64_t v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

void ct_sqlite_text(sqlite3 *db, const char *sql, char *buf, size_t len)
{
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	const unsigned char *s = sqlite3_column_text(st, 0);
	snprintf(buf, len, "%s", s ? (const char *)s : "");
	sqlite3_finalize(st);
}

int64_t ct_ms(void)
{
	return (int64_t)(mf_mono_ns() / 1000000u);
}
