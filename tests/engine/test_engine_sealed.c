/*
 * test_engine_sealed.c - serve_sealed: an open returns once the shard's
 * file is sealed, while its commit waits (mf_shard_writer_commit is
 * wrapped: it blocks until the test lets it go, or fails); the row stays
 * running until the commit is recorded; every open meanwhile reads the
 * same file without computing; a failed commit is recorded and reported,
 * the readers keep their bytes and the next open computes again; an
 * expiry waits for the commit; mf_engine_close too. The catalog's answer
 * to the commit is wrapped too: a reply lost after the server recorded
 * it is no loss, a refusal gives the claim up. An open that cannot get a
 * descriptor of a sealed file fails rather than computing it again. A
 * commit that fails before the computing open reads the row back leaves
 * that open its bytes, computed once.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_catalog.h"
#include "mf_catalog.h"
#include "mf_engine.h"
#include "mf_snapshot.h"
#include "mf_testlib.h"

/* ---- the commit, held or failed by the test ---- */

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static bool held; /* commits wait while true */
static int fail_with; /* commits fail with this (-errno) when nonzero */
static atomic_int commits; /* commits entered */

int __real_mf_shard_writer_commit(struct mf_shard_writer *w,
				  struct mf_shard_stat *stat);
int __wrap_mf_shard_writer_commit(struct mf_shard_writer *w,
				  struct mf_shard_stat *stat);
int __wrap_mf_shard_writer_commit(struct mf_shard_writer *w,
				  struct mf_shard_stat *stat)
{
	atomic_fetch_add(&commits, 1);
	pthread_mutex_lock(&hold_mu);
	while (held)
		pthread_cond_wait(&hold_cv, &hold_mu);
	int fail = fail_with;
	pthread_mutex_unlock(&hold_mu);
	if (fail) {
		mf_shard_writer_abort(w);
		return fail;
	}
	return __real_mf_shard_writer_commit(w, stat);
}

/* The catalog's answer to a commit: 1 records it and then answers as a
 * connection lost before the reply; 2 refuses it (-EBUSY); once each. */
static atomic_int reply_trick;

int __real_mf_catalog_complete_shard(struct mf_catalog *c, const char *fp,
				     uint32_t index, const char *run_id,
				     uint64_t raw_bytes, uint64_t stored_bytes,
				     uint32_t chunks);
int __wrap_mf_catalog_complete_shard(struct mf_catalog *c, const char *fp,
				     uint32_t index, const char *run_id,
				     uint64_t raw_bytes, uint64_t stored_bytes,
				     uint32_t chunks);
int __wrap_mf_catalog_complete_shard(struct mf_catalog *c, const char *fp,
				     uint32_t index, const char *run_id,
				     uint64_t raw_bytes, uint64_t stored_bytes,
				     uint32_t chunks)
{
	int trick = atomic_exchange(&reply_trick, 0);
	if (trick == 2)
		return -EBUSY;
	int rc = __real_mf_catalog_complete_shard(
	    c, fp, index, run_id, raw_bytes, stored_bytes, chunks);
	return trick == 1 && rc == 0 ? -ENOTCONN : rc;
}

/* While true, reading a shard's row answers as a catalog out of reach. */
static atomic_bool catalog_down;
/* While true, reading a shard's row after a commit was entered waits
 * until a failed commit was told (up to 2 s): the open's thread slower
 * than the commit thread. */
static atomic_bool slow_reread;
static atomic_int failed_told;

int __real_mf_catalog_get_shard(struct mf_catalog *c, const char *fp,
				uint32_t index, struct mf_shard_rec *out);
int __wrap_mf_catalog_get_shard(struct mf_catalog *c, const char *fp,
				uint32_t index, struct mf_shard_rec *out);
int __wrap_mf_catalog_get_shard(struct mf_catalog *c, const char *fp,
				uint32_t index, struct mf_shard_rec *out)
{
	if (atomic_load(&catalog_down))
		return -ENOTCONN;
	for (int i = 0; atomic_load(&slow_reread) && atomic_load(&commits) &&
	     !atomic_load(&failed_told) && i < 1000;
	     i++)
		usleep(2000);
	return __real_mf_catalog_get_shard(c, fp, index, out);
}

static void hold(bool on, int fail)
{
	pthread_mutex_lock(&hold_mu);
	held = on;
	fail_with = fail;
	pthread_cond_broadcast(&hold_cv);
	pthread_mutex_unlock(&hold_mu);
}

/* ---- fixture ---- */

struct fx {
	char dir[64];
	char store[96];
	char spec[128];
	struct mf_engine *e;
	char fp[65];
	atomic_int failed; /* commit_failed calls */
	char why[256];
};

static void on_commit_failed(void *arg, const char *fp, uint32_t shard,
			     const char *err)
{
	struct fx *fx = arg;
	(void)fp;
	(void)shard;
	snprintf(fx->why, sizeof(fx->why), "%s", err);
	atomic_fetch_add(&fx->failed, 1);
	atomic_fetch_add(&failed_told, 1);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-sealed-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	snprintf(fx->store, sizeof(fx->store), "%s/store", fx->dir);
	snprintf(fx->spec, sizeof(fx->spec), "%s/spec.yaml", fx->dir);
	char path[256];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/in/a.txt", fx->dir);
	tl_write_file(path, "input a\n");
	tl_write_file(fx->spec,
		      "name: t\ninputs: in/*.txt\ncompression: zstd:1\n"
		      "chunk_size: 4KiB\nstages:\n"
		      "  - exec: [/bin/sh, -c, 'echo x >> calls; cat; "
		      "seq 1 20000']\n");
	struct mf_engine_opts o = {.store_dir = fx->store,
				   .serve_sealed = true,
				   .commit_failed = on_commit_failed,
				   .commit_failed_arg = fx};
	char *err = NULL;
	int rc = mf_engine_open(&o, &fx->e, &err);
	if (rc == 0)
		rc = mf_engine_register(fx->e, fx->spec, fx->fp, &err);
	free(err);
	hold(false, 0);
	atomic_store(&commits, 0);
	atomic_store(&reply_trick, 0);
	atomic_store(&catalog_down, false);
	*state = fx;
	return rc == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	atomic_store(&catalog_down, false);
	hold(false, 0);
	mf_engine_close(fx->e);
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

static int calls(const struct fx *fx)
{
	char path[256], line[64];
	snprintf(path, sizeof(path), "%s/calls", fx->dir);
	FILE *f = fopen(path, "r");
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n++;
	if (f)
		fclose(f);
	return n;
}

/* The stage's output, as the test computes it. */
static char *want(size_t *len)
{
	size_t cap = 200000, n = 0;
	char *s = malloc(cap);
	assert_non_null(s);
	n += (size_t)snprintf(s, cap, "input a\n");
	for (int i = 1; i <= 20000; i++)
		n += (size_t)snprintf(s + n, cap - n, "%d\n", i);
	*len = n;
	return s;
}

static void check_bytes(struct mf_shard_reader *r)
{
	size_t len;
	char *w = want(&len);
	struct mf_shard_stat st;
	mf_shard_reader_stat(r, &st);
	assert_int_equal(st.raw_bytes, len);
	char *got = malloc(len);
	assert_non_null(got);
	assert_int_equal(mf_shard_reader_pread(r, got, len, 0), (ssize_t)len);
	assert_memory_equal(got, w, len);
	free(got);
	free(w);
}

static enum mf_engine_state row_state(struct fx *fx)
{
	struct mf_engine_shard rec;
	assert_int_equal(mf_engine_shard_rec(fx->e, fx->fp, 0, &rec), 0);
	enum mf_engine_state s = rec.state;
	mf_engine_shard_release(&rec);
	return s;
}

static void wait_state(struct fx *fx, enum mf_engine_state s)
{
	for (int i = 0; i < 600 && row_state(fx) != s; i++)
		usleep(50000);
	assert_int_equal(row_state(fx), s);
}

/* ---- tests ---- */

static void test_served_before_commit(void **state)
{
	struct fx *fx = *state;
	hold(true, 0);
	struct mf_shard_reader *r, *r2, *r3;
	struct mf_engine_shard rec, rec2, rec3;
	char *err = NULL;
	assert_int_equal(
	    mf_engine_open_shard_rec(fx->e, fx->fp, 0, &r, &rec, &err), 0);
	assert_int_equal(rec.state, MF_ENGINE_RUNNING); /* not durable */
	assert_true(rec.generation > 0);
	check_bytes(r);
	/* in the window: the same file, nothing computed again */
	assert_int_equal(
	    mf_engine_open_shard_rec(fx->e, fx->fp, 0, &r2, &rec2, &err), 0);
	assert_int_equal(rec2.generation, rec.generation);
	assert_int_equal(rec2.raw_bytes, rec.raw_bytes);
	check_bytes(r2);
	assert_int_equal(mf_engine_open_materialized(fx->e, fx->fp, 0, NULL,
						     NULL, &r3, &rec3),
			 0);
	assert_int_equal(rec3.generation, rec.generation);
	check_bytes(r3);
	assert_int_equal(calls(fx), 1);
	assert_int_equal(row_state(fx), MF_ENGINE_RUNNING);
	/* the commit goes on: materialized, the same computation */
	hold(false, 0);
	wait_state(fx, MF_ENGINE_MATERIALIZED);
	struct mf_engine_shard now;
	assert_int_equal(mf_engine_shard_rec(fx->e, fx->fp, 0, &now), 0);
	assert_int_equal(now.generation, rec.generation);
	assert_int_equal(now.raw_bytes, rec.raw_bytes);
	mf_engine_shard_release(&now);
	check_bytes(r); /* renamed under its readers */
	assert_int_equal(atomic_load(&fx->failed), 0);
	mf_shard_reader_close(r);
	mf_shard_reader_close(r2);
	mf_shard_reader_close(r3);
	mf_engine_shard_release(&rec);
	mf_engine_shard_release(&rec2);
	mf_engine_shard_release(&rec3);
}

static void test_failed_commit_recomputes(void **state)
{
	struct fx *fx = *state;
	hold(true, -EIO);
	struct mf_shard_reader *r;
	struct mf_engine_shard rec;
	char *err = NULL;
	assert_int_equal(
	    mf_engine_open_shard_rec(fx->e, fx->fp, 0, &r, &rec, &err), 0);
	hold(false, -EIO);
	wait_state(fx, MF_ENGINE_FAILED);
	assert_int_equal(atomic_load(&fx->failed), 1);
	assert_non_null(strstr(fx->why, "committing shard 0"));
	assert_non_null(strstr(fx->why, strerror(EIO)));
	check_bytes(r); /* what was served stays readable */
	mf_shard_reader_close(r);
	mf_engine_shard_release(&rec);
	/* the next open computes it again, and this commit succeeds */
	hold(false, 0);
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	check_bytes(r);
	mf_shard_reader_close(r);
	assert_int_equal(calls(fx), 2);
	wait_state(fx, MF_ENGINE_MATERIALIZED);
}

/* A commit that fails before the computing open looks at the row again
 * (the commit thread faster than the open's): the open still gets the
 * bytes computed for it, from the file it sealed, and computes nothing
 * again (before, it found the shard failed, claimed it and computed it
 * again, as often as its commits failed first). */
static void test_failed_commit_before_the_open(void **state)
{
	struct fx *fx = *state;
	atomic_store(&commits, 0);
	atomic_store(&failed_told, 0);
	atomic_store(&slow_reread, true);
	hold(false, -EIO);
	struct mf_shard_reader *r;
	struct mf_engine_shard rec;
	char *err = NULL;
	int rc = mf_engine_open_shard_rec(fx->e, fx->fp, 0, &r, &rec, &err);
	atomic_store(&slow_reread, false);
	assert_int_equal(rc, 0);
	check_bytes(r);
	assert_int_equal(calls(fx), 1);
	wait_state(fx, MF_ENGINE_FAILED);
	assert_int_equal(atomic_load(&fx->failed), 1);
	mf_shard_reader_close(r);
	mf_engine_shard_release(&rec);
	hold(false, 0);
}

/* Holds the commit, then computes shard 0 and reads it once: it is served
 * sealed, its commit waiting for hold(false, ...). */
static void serve_held(struct fx *fx)
{
	hold(true, 0);
	struct mf_shard_reader *r;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	mf_shard_reader_close(r);
}

/* mf_engine_close waits for a commit under way. */
static void *release_later(void *arg)
{
	(void)arg;
	usleep(200000);
	hold(false, 0);
	return NULL;
}

static void test_close_commits(void **state)
{
	struct fx *fx = *state;
	serve_held(fx);
	while (atomic_load(&commits) == 0)
		usleep(10000);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, release_later, NULL), 0);
	mf_engine_close(fx->e);
	pthread_join(t, NULL);
	struct mf_engine_opts o = {.store_dir = fx->store};
	char *err = NULL;
	assert_int_equal(mf_engine_open(&o, &fx->e, &err), 0);
	assert_int_equal(row_state(fx), MF_ENGINE_MATERIALIZED);
	assert_int_equal(calls(fx), 1);
}

/* rm of a shard served and still committing expires it once committed,
 * rather than answering -EBUSY as for a shard being computed. */
static void test_expire_in_window(void **state)
{
	struct fx *fx = *state;
	hold(true, 0);
	struct mf_shard_reader *r;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, release_later, NULL), 0);
	assert_int_equal(mf_engine_expire_shard(fx->e, fx->fp, 0), 0);
	pthread_join(t, NULL);
	assert_int_equal(row_state(fx), MF_ENGINE_ABSENT);
	check_bytes(r); /* a descriptor opened before keeps reading */
	mf_shard_reader_close(r);
}

/* The server recorded the commit, the reply was lost with the connection:
 * trying again finds the row already ours, and the file stays. */
static void test_lost_reply_keeps_the_file(void **state)
{
	struct fx *fx = *state;
	atomic_store(&reply_trick, 1);
	struct mf_shard_reader *r;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	mf_shard_reader_close(r);
	wait_state(fx, MF_ENGINE_MATERIALIZED);
	while (atomic_load(&commits) == 0)
		usleep(10000);
	mf_engine_close(fx->e); /* the commit is over */
	struct mf_engine_opts o = {.store_dir = fx->store};
	assert_int_equal(mf_engine_open(&o, &fx->e, &err), 0);
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	check_bytes(r);
	mf_shard_reader_close(r);
	assert_int_equal(calls(fx), 1); /* served from the file, not again */
	assert_int_equal(atomic_load(&fx->failed), 0);
}

/* A catalog that refuses the commit (busy, full, read-only): the claim is
 * given up, so that the next open anywhere computes it, not left running
 * under this live run for others to wait on. */
static void test_refused_commit_gives_the_claim_up(void **state)
{
	struct fx *fx = *state;
	atomic_store(&reply_trick, 2);
	struct mf_shard_reader *r;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	wait_state(fx, MF_ENGINE_ABSENT);
	for (int i = 0; i < 200 && atomic_load(&fx->failed) == 0; i++)
		usleep(10000);
	assert_int_equal(atomic_load(&fx->failed), 1);
	assert_non_null(strstr(fx->why, strerror(EBUSY)));
	check_bytes(r);
	mf_shard_reader_close(r);
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	check_bytes(r);
	mf_shard_reader_close(r);
	assert_int_equal(calls(fx), 2);
	wait_state(fx, MF_ENGINE_MATERIALIZED);
}

/* No descriptor left for a second open of a sealed shard: that open
 * fails (EMFILE); it does not claim and compute the shard again under
 * the same run, which would fail the first computation's commit. */
static void test_no_descriptor_no_second_computation(void **state)
{
	struct fx *fx = *state;
	hold(true, 0);
	struct mf_shard_reader *r, *r2 = NULL;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	struct rlimit was, now;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
	int lowest = dup(0); /* every descriptor from here is refused */
	assert_true(lowest >= 0);
	close(lowest);
	now = was;
	now.rlim_cur = (rlim_t)lowest;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &now), 0);
	int rc = mf_engine_open_shard(fx->e, fx->fp, 0, &r2, &err);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
	assert_int_equal(rc, -EMFILE);
	assert_null(r2);
	free(err);
	err = NULL;
	hold(false, 0);
	wait_state(fx, MF_ENGINE_MATERIALIZED);
	assert_int_equal(calls(fx), 1);
	assert_int_equal(atomic_load(&fx->failed), 0);
	check_bytes(r);
	mf_shard_reader_close(r);
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	check_bytes(r);
	mf_shard_reader_close(r);
}

/* The catalog out of reach while a shard sealed here commits: its row
 * reads as this claim's, with its size, and an open reads the same file
 * at once rather than waiting for the catalog. */
static void test_sealed_served_in_an_outage(void **state)
{
	struct fx *fx = *state;
	hold(true, 0);
	struct mf_shard_reader *r, *r2;
	struct mf_engine_shard rec, now;
	char *err = NULL;
	assert_int_equal(
	    mf_engine_open_shard_rec(fx->e, fx->fp, 0, &r, &rec, &err), 0);
	atomic_store(&catalog_down, true);
	assert_int_equal(mf_engine_shard_rec(fx->e, fx->fp, 0, &now), 0);
	assert_int_equal(now.state, MF_ENGINE_RUNNING);
	assert_int_equal(now.generation, rec.generation);
	struct mf_engine_file st;
	assert_int_equal(mf_engine_sealed_stat(fx->e, &now, &st), 0);
	assert_int_equal(st.raw_bytes, rec.raw_bytes);
	mf_engine_shard_release(&now);
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r2, &err), 0);
	check_bytes(r2);
	mf_shard_reader_close(r2);
	atomic_store(&catalog_down, false);
	hold(false, 0);
	wait_state(fx, MF_ENGINE_MATERIALIZED);
	assert_int_equal(calls(fx), 1);
	check_bytes(r);
	mf_shard_reader_close(r);
	mf_engine_shard_release(&rec);
}

/* The snapshot read by another process (another host) while a shard is
 * sealed and committing: the commit's touch does not take the snapshot's
 * last read back to when the shard was served. */
static void test_commit_keeps_later_reads(void **state)
{
	struct fx *fx = *state;
	serve_held(fx);
	usleep(1100000);
	int64_t later = time(NULL); /* read later, elsewhere */
	struct mf_catalog *c;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_touch(c, fx->fp, 0, later), 0);
	hold(false, 0);
	wait_state(fx, MF_ENGINE_MATERIALIZED);
	struct mf_snapshot_rec snap;
	assert_int_equal(mf_catalog_get_snapshot(c, fx->fp, &snap), 0);
	assert_true(snap.last_read >= later);
	mf_snapshot_rec_release(&snap);
	mf_catalog_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_served_before_commit, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_failed_commit_recomputes,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failed_commit_before_the_open,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_close_commits, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_expire_in_window, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_lost_reply_keeps_the_file,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(
		test_refused_commit_gives_the_claim_up, setup, teardown),
	    cmocka_unit_test_setup_teardown(
		test_no_descriptor_no_second_computation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sealed_served_in_an_outage,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_commit_keeps_later_reads,
					    setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
