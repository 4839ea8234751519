/*
 * test_fsck_engine.c - mf_engine_fsck and mf_engine_rebuild through their
 * C API: errnos, the fields of what they report, which runs count as live
 * (this host's pid, another host's heartbeat, the run's state), the
 * snapshot.metadata the rebuild accepts and refuses, the rows it writes,
 * and old catalogs moved aside twice in one second.
 *
 * The end-to-end behaviour through matctl is test_fsck.sh.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_catalog.h"
#include "mf_engine.h"
#include "mf_snapshot.h"
#include "mf_testlib.h"

struct fx {
	char dir[64]; /* project: spec and inputs */
	char store[96];
	char spec[128];
	char fp[65];
	char run[MF_RUN_ID_HEX_LEN + 1]; /* the run that computed both shards */
	struct mf_engine_opts opts;
};

/* What a callback saw: the kinds (or skip details) in order. */
struct seen {
	unsigned n;
	int kind[32];
	int64_t shard[32];
	char run[32][MF_RUN_ID_HEX_LEN + 1];
	char path[32][256];
	char detail[32][512];
	uint32_t materialized; /* last snapshot recovered */
};

static void store_path(const struct fx *fx, char *buf, size_t len,
		       const char *fmt, const char *a, const char *b)
{
	char rel[256];
	snprintf(rel, sizeof(rel), fmt, a, b);
	snprintf(buf, len, "%s/%s", fx->store, rel);
}

/* A store with one snapshot of two shards, both computed by one run. */
static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-fsck-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	snprintf(fx->store, sizeof(fx->store), "%s/store", fx->dir);
	snprintf(fx->spec, sizeof(fx->spec), "%s/t.yaml", fx->dir);
	fx->opts.store_dir = fx->store;
	char path[512];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/in/a.txt", fx->dir);
	tl_write_file(path, "alpha\n");
	snprintf(path, sizeof(path), "%s/in/b.txt", fx->dir);
	tl_write_file(path, "beta\n");
	tl_write_file(fx->spec,
		      "name: t\ninputs: in/*.txt\nshards: 2\n"
		      "stages:\n  - exec: [cat]\n");
	struct mf_engine *e;
	char *err = NULL;
	struct mf_shard_reader *r;
	if (mf_engine_open(&fx->opts, &e, &err) ||
	    mf_engine_register(e, fx->spec, fx->fp, &err))
		return -1;
	for (uint32_t i = 0; i < 2; i++) {
		if (mf_engine_open_shard(e, fx->fp, i, &r, &err))
			return -1;
		mf_shard_reader_close(r);
	}
	mf_engine_close(e);
	struct mf_catalog *c;
	struct mf_shard_rec rec;
	snprintf(path, sizeof(path), "%s/catalog.db", fx->store);
	if (mf_catalog_open(path, 0, &c) ||
	    mf_catalog_get_shard(c, fx->fp, 0, &rec))
		return -1;
	memcpy(fx->run, rec.run_id, sizeof(fx->run));
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

static void on_problem(void *arg, const struct mf_fsck_problem *p)
{
	struct seen *s = arg;
	assert_true(s->n < 32);
	s->kind[s->n] = (int)p->kind;
	s->shard[s->n] = p->shard;
	snprintf(s->run[s->n], sizeof(s->run[0]), "%s", p->run);
	snprintf(s->path[s->n], sizeof(s->path[0]), "%s", p->path);
	snprintf(s->detail[s->n], sizeof(s->detail[0]), "%s", p->detail);
	s->n++;
}

static void fsck(struct fx *fx, struct seen *s)
{
	uint32_t n = 12345;
	char *err = NULL;
	memset(s, 0, sizeof(*s));
	int rc = mf_engine_fsck(&fx->opts, on_problem, s, &n, &err);
	if (rc)
		fail_msg("fsck: %s", err ? err : strerror(-rc));
	assert_int_equal(n, s->n);
}

static struct mf_catalog *catalog(struct fx *fx)
{
	char path[512];
	struct mf_catalog *c;
	snprintf(path, sizeof(path), "%s/catalog.db", fx->store);
	assert_int_equal(mf_catalog_open(path, 0, &c), 0);
	return c;
}

static void test_errors(void **state)
{
	struct fx *fx = *state;
	char *err = NULL;
	assert_int_equal(mf_engine_fsck(NULL, NULL, NULL, NULL, &err), -EINVAL);
	assert_int_equal(mf_engine_rebuild(NULL, NULL, NULL, NULL, &err),
			 -EINVAL);
	char none[128];
	snprintf(none, sizeof(none), "%s/none", fx->dir);
	struct mf_engine_opts o = {.store_dir = none};
	uint32_t n = 7;
	assert_int_equal(mf_engine_fsck(&o, NULL, NULL, &n, &err), -ENOENT);
	assert_non_null(err);
	assert_non_null(strstr(err, none));
	free(err);
	err = NULL;
	assert_int_equal(n, 7); /* outputs only on success */
	assert_int_equal(mf_engine_rebuild(&o, NULL, NULL, NULL, &err),
			 -ENOENT);
	free(err);
	assert_int_equal(access(none, F_OK), -1); /* nothing created */
	assert_string_equal(mf_fsck_kind_name(MF_FSCK_ORPHAN_TMP),
			    "orphan-tmp");
	assert_string_equal(mf_fsck_kind_name((enum mf_fsck_kind)99),
			    "unknown");
}

static void test_problem_fields(void **state)
{
	struct fx *fx = *state;
	struct seen s;
	fsck(fx, &s);
	assert_int_equal(s.n, 0);
	char path[512], rel[256];
	store_path(fx, path, sizeof(path), "snapshots/%s/%s/shard-00001.mfs",
		   fx->fp, fx->run);
	assert_int_equal(unlink(path), 0);
	fsck(fx, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.kind[0], MF_FSCK_MISSING);
	assert_int_equal(s.shard[0], 1);
	assert_string_equal(s.run[0], fx->run);
	snprintf(rel, sizeof(rel), "snapshots/%s/%s/shard-00001.mfs", fx->fp,
		 fx->run);
	assert_string_equal(s.path[0], rel); /* relative to the store */

	/* a missing catalog is one problem, and fsck does not make one */
	store_path(fx, path, sizeof(path), "%s%s", "catalog.db", "");
	assert_int_equal(unlink(path), 0);
	fsck(fx, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.kind[0], MF_FSCK_CATALOG);
	assert_string_equal(s.path[0], "catalog.db");
	assert_int_equal(access(path, F_OK), -1);
}

/* A catalog that passes SQLite's integrity check but not the catalog's
 * own (a negative schema version) is one problem naming the check. */
static void test_catalog_reason(void **state)
{
	struct fx *fx = *state;
	char path[512];
	struct seen s;
	store_path(fx, path, sizeof(path), "%s%s", "catalog.db", "");
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	/* PRAGMA user_version: 4 bytes big-endian at offset 60 */
	const unsigned char minus_one[4] = {0xff, 0xff, 0xff, 0xff};
	assert_int_equal(pwrite(fd, minus_one, 4, 60), 4);
	assert_int_equal(close(fd), 0);
	fsck(fx, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.kind[0], MF_FSCK_CATALOG);
	assert_string_equal(s.path[0], "catalog.db");
	assert_string_equal(s.detail[0],
			    "not a usable catalog: Bad message "
			    "(negative schema version)");
}

/* A run folder holding only a .tmp, owned by run `id` in the state,
 * host, pid and heartbeat given; a run of this host is recorded in this
 * boot and pid namespace, so that its pid decides. */
static void add_run(struct fx *fx, const char *id, const char *host, pid_t pid,
		    int64_t heartbeat, const char *state)
{
	struct mf_catalog *c = catalog(fx);
	struct mf_run_rec r = {.pid = pid, .heartbeat = heartbeat};
	snprintf(r.run_id, sizeof(r.run_id), "%s", id);
	snprintf(r.fp, sizeof(r.fp), "%s", fx->fp);
	snprintf(r.host, sizeof(r.host), "%s", host);
	snprintf(r.state, sizeof(r.state), "%s", state);
	r.pid_start = pid > 0 ? mf_proc_start_time(pid) : 0;
	r.started = heartbeat;
	char here[256];
	mf_hostname(here, sizeof(here));
	if (strcmp(host, here) == 0) {
		assert_int_equal(mf_boot_id(r.boot_id), 0);
		r.pid_ns = mf_pid_ns();
	}
	(void)mf_catalog_delete_run(c, id);
	assert_int_equal(mf_catalog_add_run(c, &r), 0);
	mf_catalog_close(c);
	char path[512];
	store_path(fx, path, sizeof(path), "snapshots/%s/%s", fx->fp, id);
	mkdir(path, 0755);
	store_path(fx, path, sizeof(path), "snapshots/%s/%s/shard-00000.tmp",
		   fx->fp, id);
	tl_write_file(path, "partial");
}

static void test_live_runs(void **state)
{
	struct fx *fx = *state;
	const char *id = "0123456789abcdef0123456789abcdef";
	char host[256];
	struct seen s;
	mf_hostname(host, sizeof(host));
	int64_t now = mf_now_s();

	add_run(fx, id, host, getpid(), now, "active"); /* this process */
	fsck(fx, &s);
	assert_int_equal(s.n, 0); /* a live writer's temp file is fine */

	add_run(fx, id, host, getpid(), now, "dead");
	fsck(fx, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.kind[0], MF_FSCK_ORPHAN_RUN);
	assert_string_equal(s.run[0], id);

	/* another host: alive while it heartbeats within pending_expiry (1d) */
	add_run(fx, id, "elsewhere.example", 1, now - 60, "active");
	fsck(fx, &s);
	assert_int_equal(s.n, 0);
	add_run(fx, id, "elsewhere.example", 1, now - 86400 - 60, "active");
	fsck(fx, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.kind[0], MF_FSCK_ORPHAN_RUN);

	/* a dead run that still holds a shard: its folder stays, its temp
	 * file is garbage */
	struct mf_catalog *c = catalog(fx);
	assert_int_equal(mf_catalog_set_run_state(c, fx->run, "dead"), 0);
	mf_catalog_close(c);
	char path[512];
	store_path(fx, path, sizeof(path), "snapshots/%s/%s/shard-00001.tmp",
		   fx->fp, fx->run);
	tl_write_file(path, "partial");
	fsck(fx, &s);
	assert_int_equal(s.n, 2);
	assert_int_equal(s.kind[0] + s.kind[1],
			 MF_FSCK_ORPHAN_RUN + MF_FSCK_ORPHAN_TMP);
}

static void on_item(void *arg, const struct mf_rebuild_item *it)
{
	struct seen *s = arg;
	if (it->kind == MF_REBUILD_SNAPSHOT) {
		s->materialized = it->materialized;
		return;
	}
	on_problem(arg,
		   &(struct mf_fsck_problem){MF_FSCK_STRAY, it->fp, it->shard,
					     it->run, it->path, it->detail});
}

static int rebuild(struct fx *fx, struct seen *s, struct mf_rebuild_stats *st)
{
	char *err = NULL;
	memset(s, 0, sizeof(*s));
	int rc = mf_engine_rebuild(&fx->opts, on_item, s, st, &err);
	if (rc)
		fail_msg("rebuild: %s", err ? err : strerror(-rc));
	return rc;
}

/* Rewrites snapshot.metadata with the line starting with `key ` replaced
 * by `line` (NULL: removed), or the whole file by `line` if key is NULL. */
static void edit_metadata(struct fx *fx, const char *orig, const char *key,
			  const char *line)
{
	char path[512];
	store_path(fx, path, sizeof(path), "snapshots/%s/%s", fx->fp,
		   "snapshot.metadata");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	for (const char *p = orig; key && *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p + 1) : strlen(p);
		if (strncmp(p, key, strlen(key)) != 0 || p[strlen(key)] != ' ')
			fwrite(p, 1, len, f);
		else if (line)
			fprintf(f, "%s\n", line);
		p += len;
	}
	if (!key)
		fputs(line, f);
	assert_int_equal(fclose(f), 0);
}

static void expect_skip(struct fx *fx, const char *orig, const char *key,
			const char *line, const char *why)
{
	struct seen s;
	struct mf_rebuild_stats st;
	edit_metadata(fx, orig, key, line);
	rebuild(fx, &s, &st);
	assert_int_equal(st.snapshots, 0);
	assert_int_equal(s.n, 1);
	if (!strstr(s.detail[0], why))
		fail_msg("skipped for '%s', expected '%s'", s.detail[0], why);
}

static void test_rebuild_metadata(void **state)
{
	struct fx *fx = *state;
	struct mf_store *store;
	char *orig;
	size_t len;
	assert_int_equal(mf_store_open(fx->store, false, &store), 0);
	assert_int_equal(mf_store_read_metadata(store, fx->fp, &orig, &len), 0);
	mf_store_close(store);
	char bad_fp[80];
	snprintf(bad_fp, sizeof(bad_fp), "fingerprint %064d", 0);

	expect_skip(fx, orig, "matfs-snapshot", "matfs-snapshot 2",
		    "unknown matfs-snapshot version '2'");
	expect_skip(fx, orig, "matfs-snapshot", "hello world",
		    "line 1: not a matfs-snapshot 1 document");
	expect_skip(fx, orig, "fingerprint", bad_fp, "names fingerprint 0000");
	expect_skip(fx, orig, "compression", "compression lz4",
		    "bad compression 'lz4'");
	expect_skip(fx, orig, "shards", "shards 0", "bad shards '0'");
	expect_skip(fx, orig, "name", "name a/b", "bad name");
	expect_skip(fx, orig, "keep", NULL, "no 'keep' line");
	expect_skip(fx, orig, NULL, "", "no 'matfs-snapshot' line");
	expect_skip(fx, orig, "spec_path", "spec_path relative.yaml",
		    "bad spec_path");

	/* a trimmed "suffix " line still reads, as the empty suffix */
	struct seen s;
	struct mf_rebuild_stats st;
	edit_metadata(fx, orig, "suffix", "suffix");
	rebuild(fx, &s, &st);
	assert_int_equal(s.n, 0);
	assert_int_equal(st.snapshots, 1);

	/* unknown keys are skipped: a later matfs may add some */
	edit_metadata(fx, orig, "keep", "keep 2\nfuture_key some value");
	rebuild(fx, &s, &st);
	assert_int_equal(s.n, 0);
	assert_int_equal(st.snapshots, 1);
	assert_int_equal(st.shards, 2);
	assert_int_equal(s.materialized, 2);
	struct mf_catalog *c = catalog(fx);
	struct mf_snapshot_rec rec;
	assert_int_equal(mf_catalog_get_snapshot(c, fx->fp, &rec), 0);
	assert_int_equal(rec.keep, 2);
	assert_string_equal(rec.spec_path, fx->spec);
	assert_string_equal(rec.compression, "zstd:3");
	assert_string_equal(rec.suffix, "");
	assert_true(rec.last_read > 0);
	mf_snapshot_rec_release(&rec);
	mf_catalog_close(c);
	free(orig);
}

static void test_rebuild_rows(void **state)
{
	struct fx *fx = *state;
	struct seen s;
	struct mf_rebuild_stats st1, st2;
	char host[256], path[512];
	struct stat sb;
	mf_hostname(host, sizeof(host));
	rebuild(fx, &s, &st1);
	assert_int_equal(st1.runs, 1);
	assert_int_equal(st1.skipped, 0);
	assert_int_equal(strncmp(st1.old_catalog, "catalog.db.corrupt-", 19),
			 0);
	struct mf_catalog *c = catalog(fx);
	struct mf_run_rec run;
	assert_int_equal(mf_catalog_get_run(c, fx->run, &run), 0);
	assert_string_equal(run.state, "done");
	assert_string_equal(run.host, host);
	assert_int_equal(run.pid, 0);
	store_path(fx, path, sizeof(path), "snapshots/%s/%s/shard-00000.mfs",
		   fx->fp, fx->run);
	assert_int_equal(stat(path, &sb), 0);
	assert_true(run.started <= sb.st_mtime && sb.st_mtime <= run.heartbeat);
	struct mf_shard_rec rec;
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, 0, &rec), 0);
	assert_int_equal(rec.state, MF_SHARD_MATERIALIZED);
	assert_int_equal(rec.raw_bytes, 6); /* "alpha\n" */
	assert_int_equal(rec.stored_bytes, (uint64_t)sb.st_size);
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);

	/* again at once: the first old catalog is not overwritten */
	rebuild(fx, &s, &st2);
	assert_string_not_equal(st1.old_catalog, st2.old_catalog);
	store_path(fx, path, sizeof(path), "%s%s", st1.old_catalog, "");
	assert_int_equal(access(path, F_OK), 0);
	store_path(fx, path, sizeof(path), "%s%s", st2.old_catalog, "");
	assert_int_equal(access(path, F_OK), 0);
	fsck(fx, &s);
	assert_int_equal(s.n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_problem_fields, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_live_runs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_catalog_reason, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_rebuild_metadata, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_rebuild_rows, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
