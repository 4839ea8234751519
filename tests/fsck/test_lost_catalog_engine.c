/*
 * test_lost_catalog_engine.c - the engine and a catalog that does not know
 * what the store holds, through the C API: mf_engine_open indexes a new
 * catalog (once, under the index mark, also with several processes at
 * once), gc adopts the shard files of runs and the folders the catalog
 * never knew instead of removing them, a catalog file replaced under an
 * open engine is followed, and the catalog calls this rests on
 * (mf_catalog_begin/end, mf_catalog_moved, the index mark).
 *
 * The same through matctl and a mount: test_lost_catalog.sh here and in
 * tests/lifecycle/.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_catalog.h"
#include "mf_engine.h"
#include "mf_snapshot.h"
#include "mf_testlib.h"

#define SHARDS 3

struct fx {
	char dir[64]; /* project: spec, inputs and the stage's call log */
	char store[96];
	char spec[128];
	char db[160];
	char fp[65];
	char run[MF_RUN_ID_HEX_LEN + 1]; /* the run that computed them all */
	struct mf_engine_opts opts;
	unsigned indexed, indexed_shards; /* what opts.indexed was told */
};

static unsigned count_calls(const struct fx *fx)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/calls", fx->dir);
	FILE *f = fopen(path, "r");
	unsigned n = 0;
	if (!f)
		return 0;
	for (int ch; (ch = fgetc(f)) != EOF;)
		n += ch == '\n';
	fclose(f);
	return n;
}

static void on_indexed(void *arg, const struct mf_rebuild_item *it)
{
	struct fx *fx = arg;
	if (it->kind == MF_REBUILD_SNAPSHOT) {
		fx->indexed++;
		fx->indexed_shards += it->materialized;
	}
}

static struct mf_engine *engine(struct fx *fx)
{
	struct mf_engine *e;
	char *err = NULL;
	int rc = mf_engine_open(&fx->opts, &e, &err);
	if (rc)
		fail_msg("engine: %s", err ? err : strerror(-rc));
	return e;
}

/* Reads every shard of fx->fp through e; each must be materialized. */
static void read_all(struct fx *fx, struct mf_engine *e)
{
	for (uint32_t i = 0; i < SHARDS; i++) {
		struct mf_shard_reader *r;
		char *err = NULL;
		int rc = mf_engine_open_shard(e, fx->fp, i, &r, &err);
		if (rc)
			fail_msg("shard %u: %s", i, err ? err : strerror(-rc));
		mf_shard_reader_close(r);
	}
}

/* A store with one snapshot of SHARDS shards, all computed by one run. */
static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-lost-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	snprintf(fx->store, sizeof(fx->store), "%s/store", fx->dir);
	snprintf(fx->spec, sizeof(fx->spec), "%s/t.yaml", fx->dir);
	snprintf(fx->db, sizeof(fx->db), "%s/catalog.db", fx->store);
	fx->opts.store_dir = fx->store;
	fx->opts.indexed = on_indexed;
	fx->opts.indexed_arg = fx;
	char path[512];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	for (int i = 0; i < SHARDS; i++) {
		snprintf(path, sizeof(path), "%s/in/%d.txt", fx->dir, i);
		tl_write_file(path, "some input\n");
	}
	tl_write_file(fx->spec,
		      "name: t\ninputs: in/*.txt\n"
		      "stages:\n  - exec: [/bin/sh, -c, "
		      "'echo x >> calls; cat']\n");
	struct mf_engine *e = engine(fx);
	char *err = NULL;
	if (mf_engine_register(e, fx->spec, fx->fp, &err))
		return -1;
	read_all(fx, e);
	mf_engine_close(e);
	struct mf_catalog *c;
	struct mf_shard_rec rec;
	if (mf_catalog_open(fx->db, 0, &c) ||
	    mf_catalog_get_shard(c, fx->fp, 0, &rec))
		return -1;
	memcpy(fx->run, rec.run_id, sizeof(fx->run));
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);
	fx->indexed = fx->indexed_shards = 0;
	*state = fx;
	return count_calls(fx) == SHARDS ? 0 : -1;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

static void remove_catalog(struct fx *fx)
{
	char path[192];
	assert_int_equal(unlink(fx->db), 0);
	snprintf(path, sizeof(path), "%s-wal", fx->db);
	(void)unlink(path);
	snprintf(path, sizeof(path), "%s-shm", fx->db);
	(void)unlink(path);
}

/* A new catalog that carries the index mark but holds nothing: one that
 * replaced the old while the engine had indexed it already. */
static void marked_empty_catalog(struct fx *fx)
{
	remove_catalog(fx);
	struct mf_catalog *c;
	assert_int_equal(mf_catalog_open(fx->db, 0, &c), 0);
	assert_int_equal(mf_catalog_set_indexed(c), 0);
	mf_catalog_close(c);
}

static void shard_path(const struct fx *fx, uint32_t k, char *buf, size_t n)
{
	snprintf(buf, n, "%s/snapshots/%s/%s/shard-%05u.mfs", fx->store, fx->fp,
		 fx->run, k);
}

/* Every shard materialized under fx->run, its file in place, the run
 * "done"; no stage ran since setup. */
static void expect_intact(struct fx *fx)
{
	struct mf_catalog *c;
	assert_int_equal(mf_catalog_open(fx->db, 0, &c), 0);
	for (uint32_t k = 0; k < SHARDS; k++) {
		struct mf_shard_rec rec;
		char path[256];
		assert_int_equal(mf_catalog_get_shard(c, fx->fp, k, &rec), 0);
		assert_int_equal(rec.state, MF_SHARD_MATERIALIZED);
		assert_string_equal(rec.run_id, fx->run);
		assert_int_equal(rec.raw_bytes, 11);
		mf_shard_rec_release(&rec);
		shard_path(fx, k, path, sizeof(path));
		assert_int_equal(access(path, F_OK), 0);
	}
	struct mf_run_rec run;
	assert_int_equal(mf_catalog_get_run(c, fx->run, &run), 0);
	assert_string_equal(run.state, "done");
	mf_catalog_close(c);
	assert_int_equal(count_calls(fx), SHARDS);
}

static void test_open_indexes_a_new_catalog(void **state)
{
	struct fx *fx = *state;
	remove_catalog(fx);
	struct mf_engine *e = engine(fx);
	assert_int_equal(fx->indexed, 1);
	assert_int_equal(fx->indexed_shards, SHARDS);
	struct mf_gc_stats st;
	assert_int_equal(mf_engine_gc(e, &st), 0);
	assert_int_equal(st.runs_removed + st.files_removed, 0);
	assert_int_equal(st.shards_adopted, 0); /* open did it already */
	char *err = NULL;
	assert_int_equal(mf_engine_register(e, fx->spec, fx->fp, &err), 0);
	read_all(fx, e);
	mf_engine_close(e);
	expect_intact(fx);

	/* marked now: the next open records nothing */
	e = engine(fx);
	mf_engine_close(e);
	assert_int_equal(fx->indexed, 1);

	/* an empty file is a new catalog too */
	remove_catalog(fx);
	tl_write_file(fx->db, "");
	e = engine(fx);
	mf_engine_close(e);
	assert_int_equal(fx->indexed, 2);
	expect_intact(fx);
}

static void test_concurrent_opens(void **state)
{
	struct fx *fx = *state;
	remove_catalog(fx);
	enum { N = 4 };
	pid_t pids[N];
	for (int i = 0; i < N; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct mf_engine *e;
			char fp[65], *err = NULL;
			int rc = mf_engine_open(&fx->opts, &e, &err);
			if (rc == 0 && i % 2 == 0)
				rc = mf_engine_register(e, fx->spec, fp, &err);
			struct mf_gc_stats st;
			if (rc == 0)
				rc = mf_engine_gc(e, &st);
			for (uint32_t k = 0; rc == 0 && k < SHARDS; k++) {
				struct mf_shard_reader *r;
				rc = mf_engine_open_shard(e, fx->fp, k, &r,
							  &err);
				if (rc == 0)
					mf_shard_reader_close(r);
			}
			if (rc)
				fprintf(stderr, "child %d: %s\n", i,
					err ? err : strerror(-rc));
			_exit(rc ? 1 : 0);
		}
	}
	for (int i = 0; i < N; i++) {
		int status;
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	expect_intact(fx);
	struct mf_catalog *c;
	struct mf_run_rec *runs;
	size_t n;
	assert_int_equal(mf_catalog_open(fx->db, 0, &c), 0);
	assert_int_equal(mf_catalog_list_runs(c, NULL, &runs, &n), 0);
	free(runs);
	mf_catalog_close(c);
	assert_int_equal(n, 1);
}

/* The snapshot registered again into a catalog that never knew its run:
 * absent rows, an unknown run folder holding committed files. */
static void test_gc_adopts_unknown_runs(void **state)
{
	struct fx *fx = *state;
	marked_empty_catalog(fx);
	struct mf_engine *e = engine(fx);
	assert_int_equal(fx->indexed, 0);
	char *err = NULL;
	assert_int_equal(mf_engine_register(e, fx->spec, fx->fp, &err), 0);
	struct mf_gc_stats st;
	assert_int_equal(mf_engine_gc(e, &st), 0);
	assert_int_equal(st.shards_adopted, SHARDS);
	assert_int_equal(st.snapshots_adopted, 0);
	assert_int_equal(st.runs_removed + st.files_removed, 0);
	read_all(fx, e);
	mf_engine_close(e);
	expect_intact(fx);
}

/* A shard the catalog holds under another run keeps it: the unknown
 * run's copy is garbage, and goes with its folder. */
static void test_gc_adopts_only_absent_shards(void **state)
{
	struct fx *fx = *state;
	char from[256], to[256], cmd[600];
	snprintf(from, sizeof(from), "%s/snapshots/%s/%s", fx->store, fx->fp,
		 fx->run);
	snprintf(to, sizeof(to), "%s/snapshots/%s/%032d", fx->store, fx->fp, 7);
	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", from, to);
	assert_int_equal(system(cmd), 0);
	struct mf_engine *e = engine(fx);
	struct mf_gc_stats st;
	assert_int_equal(mf_engine_gc(e, &st), 0);
	mf_engine_close(e);
	assert_int_equal(st.shards_adopted, 0);
	assert_int_equal(st.runs_removed, 1);
	assert_int_equal(access(to, F_OK), -1);
	struct mf_catalog *c;
	assert_int_equal(mf_catalog_open(fx->db, 0, &c), 0);
	struct mf_shard_rec rec;
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, 1, &rec), 0);
	assert_string_equal(rec.run_id, fx->run);
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);
}

static void test_gc_adopts_unknown_folders(void **state)
{
	struct fx *fx = *state;
	marked_empty_catalog(fx);
	struct mf_engine *e = engine(fx);
	struct mf_gc_stats st;
	assert_int_equal(mf_engine_gc(e, &st), 0);
	assert_int_equal(st.snapshots_adopted, 1);
	assert_int_equal(st.shards_adopted, SHARDS);
	assert_int_equal(st.snapshots_removed + st.runs_removed, 0);
	mf_engine_close(e);
	expect_intact(fx);

	/* without snapshot.metadata it cannot be recorded: kept, whole */
	char path[256];
	snprintf(path, sizeof(path), "%s/snapshots/%s/snapshot.metadata",
		 fx->store, fx->fp);
	assert_int_equal(unlink(path), 0);
	marked_empty_catalog(fx);
	e = engine(fx);
	assert_int_equal(mf_engine_gc(e, &st), 0);
	mf_engine_close(e);
	assert_int_equal(st.snapshots_unindexed, 1);
	assert_int_equal(st.snapshots_removed + st.runs_removed, 0);
	assert_int_equal(st.files_removed, 0);
	shard_path(fx, 0, path, sizeof(path));
	assert_int_equal(access(path, F_OK), 0);
}

/* catalog.db deleted under an open engine, then made again by another
 * process: the engine follows the new file, indexed, and recomputes
 * nothing. */
static void test_replaced_under_an_open_engine(void **state)
{
	struct fx *fx = *state;
	struct mf_engine *e = engine(fx);
	char *err = NULL;
	assert_int_equal(mf_engine_register(e, fx->spec, fx->fp, &err), 0);
	read_all(fx, e);
	remove_catalog(fx);
	struct mf_catalog *c;
	assert_int_equal(mf_catalog_open(fx->db, 0, &c), 0); /* "matctl ls" */
	mf_catalog_close(c);
	read_all(fx, e);
	assert_int_equal(fx->indexed, 1);
	/* what it does now goes to the new file */
	assert_int_equal(mf_engine_expire_shard(e, fx->fp, 2), 0);
	mf_engine_close(e);
	assert_int_equal(mf_catalog_open(fx->db, 0, &c), 0);
	struct mf_shard_rec rec;
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, 2, &rec), 0);
	assert_int_equal(rec.state, MF_SHARD_ABSENT);
	mf_shard_rec_release(&rec);
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, 1, &rec), 0);
	assert_int_equal(rec.state, MF_SHARD_MATERIALIZED);
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);
	assert_int_equal(count_calls(fx), SHARDS);
}

static void test_catalog_calls(void **state)
{
	struct fx *fx = *state;
	struct mf_catalog *c, *d;
	bool indexed = true;
	remove_catalog(fx);
	assert_int_equal(mf_catalog_open(fx->db, 0, &c), 0);
	assert_false(mf_catalog_moved(c));
	assert_int_equal(mf_catalog_indexed(c, &indexed), 0);
	assert_false(indexed);

	/* one transaction across calls: a failed call undoes only itself */
	char spec[] = "/x.yaml", codec[] = "zstd:3", suffix[] = "";
	struct mf_snapshot_rec s = {.shards = 2,
				    .spec_path = spec,
				    .compression = codec,
				    .suffix = suffix,
				    .chunk_size = 4096,
				    .expire_after = -1,
				    .pending_expiry = 60};
	memcpy(s.fp, fx->fp, sizeof(s.fp));
	snprintf(s.name, sizeof(s.name), "t");
	struct mf_run_rec run = {.pid = 1, .state = "active"};
	snprintf(run.run_id, sizeof(run.run_id), "%032d", 1);
	snprintf(run.fp, sizeof(run.fp), "%064d", 5); /* no such snapshot */
	snprintf(run.host, sizeof(run.host), "h");
	assert_int_equal(mf_catalog_begin(c), 0);
	assert_int_equal(mf_catalog_begin(c), -EBUSY);
	assert_int_equal(mf_catalog_put_snapshot(c, &s), 0);
	assert_int_equal(mf_catalog_add_run(c, &run), -ENOENT);
	assert_int_equal(mf_catalog_set_indexed(c), 0);
	assert_int_equal(mf_catalog_open(fx->db, 100, &d), 0);
	struct mf_snapshot_rec got;
	assert_int_equal(mf_catalog_get_snapshot(d, fx->fp, &got), -ENOENT);
	assert_int_equal(mf_catalog_end(c, 0), 0);
	assert_int_equal(mf_catalog_get_snapshot(d, fx->fp, &got), 0);
	mf_snapshot_rec_release(&got);
	assert_int_equal(mf_catalog_indexed(d, &indexed), 0);
	assert_true(indexed);

	/* rolled back as a whole */
	assert_int_equal(mf_catalog_begin(c), 0);
	assert_int_equal(mf_catalog_delete_snapshot(c, fx->fp, NULL, NULL), 0);
	assert_int_equal(mf_catalog_end(c, -EIO), -EIO);
	assert_int_equal(mf_catalog_get_snapshot(d, fx->fp, &got), 0);
	mf_snapshot_rec_release(&got);
	assert_int_equal(mf_catalog_end(c, 0), -EINVAL); /* none open */
	mf_catalog_close(d);

	/* deleted, then replaced */
	remove_catalog(fx);
	assert_true(mf_catalog_moved(c));
	assert_int_equal(mf_catalog_open(fx->db, 0, &d), 0);
	assert_true(mf_catalog_moved(c));
	assert_false(mf_catalog_moved(d));
	mf_catalog_close(d);
	mf_catalog_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_open_indexes_a_new_catalog,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent_opens, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_gc_adopts_unknown_runs, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_gc_adopts_only_absent_shards,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_gc_adopts_unknown_folders,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replaced_under_an_open_engine,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_catalog_calls, setup,
					    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
