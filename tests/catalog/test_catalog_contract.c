/*
 * test_catalog_contract.c - the contract every catalog backend keeps
 * (catalog_backend.h), run through the public API and so through the
 * backend table: the claim (MINE, WAIT, DONE), complete and fail, a
 * failure reaching its waiters, a lost claim answering -ESTALE everywhere,
 * abandon and reset, expire-if-unchanged, holds, a caller's unit
 * rolled back as one, the totals (added up; running counted from the
 * shards), and a waiter woken by a commit elsewhere (where the backend
 * can be woken).
 *
 * The location is MF_TEST_CATALOG_LOCATION when set (a backend's server:
 * every test uses fingerprints and run ids of its own, so a shared
 * database serves), else the fixture's file (a plain path, or
 * "sqlite:PATH" under MF_TEST_CATALOG_SCHEME=sqlite).
 *
 * Not for: what only SQLite shows (schema, WAL, migrations: the other
 * tests of this folder).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "catalog_test.h"

#define OTHER_HOST "other-host.invalid"

struct contract {
	struct cat_fixture *f;
	struct mf_catalog *cat;
	struct mf_snapshot_rec snap; /* 4 shards, pending_expiry 3600 s */
	const char *fp;
	const char *loc; /* the location opened */
};

static int setup(void **state)
{
	static struct contract x;
	if (ct_setup(state))
		return -1;
	memset(&x, 0, sizeof(x));
	x.f = *state;
	const char *loc = getenv("MF_TEST_CATALOG_LOCATION");
	if (mf_catalog_open(loc && *loc ? loc : x.f->loc, 0, &x.cat))
		return -1;
	ct_snapshot(&x.snap, 'a', "contract", 4);
	if (mf_random_hex(MF_FP_HEX_LEN / 2, x.snap.fp))
		return -1;
	x.fp = x.snap.fp;
	x.loc = loc && *loc ? loc : x.f->loc;
	x.f->cat = x.cat; /* closed by ct_teardown */
	*state = &x;
	return mf_catalog_put_snapshot(x.cat, &x.snap) ? -1 : 0;
}

static int teardown(void **state)
{
	struct contract *x = *state;
	*state = x->f;
	return ct_teardown(state);
}

/* A run of this process (alive), or of another host whose heartbeat
 * stopped long ago (dead), with a random id. */
static void run_of(const struct contract *x, struct mf_run_rec *r, bool alive)
{
	if (alive) {
		ct_run_self(r, '1', x->fp);
	} else {
		ct_run(r, '1', x->fp, OTHER_HOST, 1, 1, mf_now_s() - 100000);
	}
	assert_int_equal(mf_random_hex(MF_RUN_ID_HEX_LEN / 2, r->run_id), 0);
}

static enum mf_claim claim(const struct contract *x, uint32_t idx,
			   const struct mf_run_rec *me, uint64_t waited,
			   struct mf_shard_rec *cur)
{
	enum mf_claim got = (enum mf_claim) - 1;
	struct mf_shard_rec row;
	assert_int_equal(mf_catalog_claim_shard_waited(x->cat, x->fp, idx, me,
						       mf_now_s(), waited, &got,
						       &row),
			 0);
	if (cur)
		*cur = row;
	else
		mf_shard_rec_release(&row);
	return got;
}

static void test_claim_complete(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec a, b;
	struct mf_shard_rec cur;
	run_of(x, &a, true);
	run_of(x, &b, true);
	assert_int_equal(claim(x, 0, &a, 0, &cur), MF_CLAIM_MINE);
	assert_int_equal(cur.state, MF_SHARD_RUNNING);
	assert_string_equal(cur.run_id, a.run_id);
	assert_true(cur.generation != 0);
	uint64_t gen = cur.generation;
	mf_shard_rec_release(&cur);
	assert_int_equal(claim(x, 0, &b, 0, NULL), MF_CLAIM_WAIT);
	/* only the owner records the outcome */
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 0, b.run_id, 1, 1, 1),
	    -ESTALE);
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 0, a.run_id, 10, 4, 1), 0);
	assert_int_equal(claim(x, 0, &b, 0, &cur), MF_CLAIM_DONE);
	assert_int_equal(cur.state, MF_SHARD_MATERIALIZED);
	assert_int_equal(cur.raw_bytes, 10);
	assert_int_equal(cur.generation, gen); /* complete keeps it */
	mf_shard_rec_release(&cur);
	/* a second complete finds it no longer running */
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 0, a.run_id, 10, 4, 1),
	    -ESTALE);
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 9, a.run_id, 1, 1, 1),
	    -ENOENT);
}

static void test_failure_reaches_waiters(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec a, b, c;
	struct mf_shard_rec cur;
	run_of(x, &a, true);
	run_of(x, &b, true);
	run_of(x, &c, true);
	assert_int_equal(claim(x, 1, &a, 0, NULL), MF_CLAIM_MINE);
	assert_int_equal(claim(x, 1, &b, 0, &cur), MF_CLAIM_WAIT);
	uint64_t waited = cur.generation;
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_fail_shard(x->cat, x->fp, 1, a.run_id, 256,
					       "stage 'tok' exited 1", "boom"),
			 0);
	assert_int_equal(claim(x, 1, &b, waited, &cur), MF_CLAIM_FAILED);
	assert_int_equal(cur.state, MF_SHARD_FAILED);
	assert_int_equal(cur.exit_status, 256);
	assert_string_equal(cur.error, "stage 'tok' exited 1");
	assert_string_equal(cur.stderr_tail, "boom");
	mf_shard_rec_release(&cur);
	/* one who did not wait on it tries again */
	assert_int_equal(claim(x, 1, &c, 0, &cur), MF_CLAIM_MINE);
	assert_true(cur.generation != waited);
	assert_null(cur.error);
	mf_shard_rec_release(&cur);
	/* what a stage printed may be any bytes: a surrogate, an overlong
	 * form, a stray continuation byte are kept as '?', valid text as is */
	assert_int_equal(mf_catalog_fail_shard(x->cat, x->fp, 1, c.run_id, 256,
					       "stage \xed\xa0\x80 exited 1",
					       "a\xe0\x80\xaf"
					       "b\x80"
					       "c \xc3\xa9"),
			 0);
	assert_int_equal(mf_catalog_get_shard(x->cat, x->fp, 1, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_FAILED);
	assert_string_equal(cur.error, "stage ??? exited 1");
	assert_string_equal(cur.stderr_tail, "a???b?c \xc3\xa9");
	mf_shard_rec_release(&cur);
}

static void test_lost_claim(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec dead, live;
	run_of(x, &dead, false);
	run_of(x, &live, true);
	assert_int_equal(claim(x, 2, &dead, 0, NULL), MF_CLAIM_MINE);
	/* its heartbeat is long gone: the shard is taken over */
	assert_int_equal(claim(x, 2, &live, 0, NULL), MF_CLAIM_MINE);
	struct mf_run_rec r;
	assert_int_equal(mf_catalog_get_run(x->cat, dead.run_id, &r), 0);
	assert_string_equal(r.state, "dead");
	/* the loser learns it from every write, and nothing changes */
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 2, dead.run_id, 1, 1, 1),
	    -ESTALE);
	assert_int_equal(mf_catalog_fail_shard(x->cat, x->fp, 2, dead.run_id, 1,
					       "late", NULL),
			 -ESTALE);
	assert_int_equal(
	    mf_catalog_abandon_shard(x->cat, x->fp, 2, dead.run_id), -ESTALE);
	enum mf_claim got;
	assert_int_equal(mf_catalog_claim_shard(x->cat, x->fp, 3, &dead,
						mf_now_s(), &got, NULL),
			 -ESTALE);
	struct mf_shard_rec cur;
	assert_int_equal(mf_catalog_get_shard(x->cat, x->fp, 2, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_RUNNING);
	assert_string_equal(cur.run_id, live.run_id);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_get_shard(x->cat, x->fp, 3, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	mf_shard_rec_release(&cur);
}

static void test_abandon_reset(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec a, b;
	struct mf_shard_rec cur;
	run_of(x, &a, true);
	run_of(x, &b, true);
	assert_int_equal(claim(x, 0, &a, 0, NULL), MF_CLAIM_MINE);
	assert_int_equal(mf_catalog_abandon_shard(x->cat, x->fp, 0, a.run_id),
			 0);
	assert_int_equal(mf_catalog_get_shard(x->cat, x->fp, 0, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	assert_int_equal(cur.generation, 0);
	mf_shard_rec_release(&cur);
	assert_int_equal(claim(x, 0, &a, 0, NULL), MF_CLAIM_MINE);
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 0, a.run_id, 5, 5, 1), 0);
	assert_int_equal(mf_catalog_reset_shard(x->cat, x->fp, 0, b.run_id),
			 -ESTALE);
	assert_int_equal(mf_catalog_reset_shard(x->cat, x->fp, 0, a.run_id), 0);
	assert_int_equal(claim(x, 0, &b, 0, NULL), MF_CLAIM_MINE);
	assert_int_equal(mf_catalog_reset_shard(x->cat, x->fp, 0, NULL), 0);
	assert_int_equal(mf_catalog_get_shard(x->cat, x->fp, 0, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	mf_shard_rec_release(&cur);
}

static void test_expire_if_unchanged(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec a;
	struct mf_shard_rec *list;
	size_t n;
	bool expired[4];
	run_of(x, &a, true);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(claim(x, i, &a, 0, NULL), MF_CLAIM_MINE);
		assert_int_equal(mf_catalog_complete_shard(x->cat, x->fp, i,
							   a.run_id, 1, 1, 1),
				 0);
	}
	assert_int_equal(mf_catalog_list_shards(x->cat, x->fp, &list, &n), 0);
	assert_int_equal(n, 4);
	/* shard 1 is computed again after the listing */
	assert_int_equal(mf_catalog_reset_shard(x->cat, x->fp, 1, NULL), 0);
	assert_int_equal(claim(x, 1, &a, 0, NULL), MF_CLAIM_MINE);
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 1, a.run_id, 1, 1, 1), 0);
	assert_int_equal(mf_catalog_expire_shards(x->cat, list, n, expired), 0);
	assert_true(expired[0]);
	assert_false(expired[1]);
	assert_false(expired[2]);
	assert_false(expired[3]);
	for (size_t i = 0; i < n; i++)
		mf_shard_rec_release(&list[i]);
	free(list);
}

static void test_holds_and_delete(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec h, *v;
	size_t n;
	run_of(x, &h, true);
	assert_int_equal(mf_catalog_hold(x->cat, &h), 0);
	assert_int_equal(mf_catalog_list_holds(x->cat, x->fp, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0].run_id, h.run_id);
	free(v);
	assert_int_equal(mf_catalog_delete_snapshot(x->cat, x->fp, NULL, NULL),
			 -ENOTEMPTY);
	assert_int_equal(mf_catalog_release(x->cat, h.run_id, x->fp), 0);
	assert_int_equal(mf_catalog_delete_snapshot(x->cat, x->fp, NULL, NULL),
			 0);
	struct mf_snapshot_rec s;
	assert_int_equal(mf_catalog_get_snapshot(x->cat, x->fp, &s), -ENOENT);
	assert_int_equal(mf_catalog_hold(x->cat, &h), -ENOENT);
	assert_int_equal(mf_catalog_heartbeat(x->cat, h.run_id, 1), -ENOENT);
}

static void test_unit_rolls_back(void **state)
{
	struct contract *x = *state;
	struct mf_snapshot_rec s = x->snap, got;
	struct mf_run_rec h;
	assert_int_equal(mf_random_hex(MF_FP_HEX_LEN / 2, s.fp), 0);
	run_of(x, &h, true);
	memcpy(h.fp, s.fp, sizeof(h.fp));
	assert_int_equal(mf_catalog_begin(x->cat), 0);
	assert_int_equal(mf_catalog_put_snapshot(x->cat, &s), 0);
	assert_int_equal(mf_catalog_hold(x->cat, &h), 0);
	assert_int_equal(mf_catalog_end(x->cat, -EIO), -EIO);
	assert_int_equal(mf_catalog_get_snapshot(x->cat, s.fp, &got), -ENOENT);
	/* and committed as one */
	assert_int_equal(mf_catalog_begin(x->cat), 0);
	assert_int_equal(mf_catalog_put_snapshot(x->cat, &s), 0);
	assert_int_equal(mf_catalog_hold(x->cat, &h), 0);
	assert_int_equal(mf_catalog_end(x->cat, 0), 0);
	assert_int_equal(mf_catalog_get_snapshot(x->cat, s.fp, &got), 0);
	mf_snapshot_rec_release(&got);
	assert_int_equal(mf_catalog_release(x->cat, h.run_id, NULL), 0);
}

/* Totals add up across calls (relative to what a shared database held
 * before), a zero delta writes nothing, and running counts the shards
 * claimed and not yet done. */
/* The first owner recorded holds the row: a put of another owner's is
 * -EEXIST and writes nothing; one without an owner (a fixed key, fsck
 * --rebuild) passes and keeps it; a row without one takes the next. */
static void test_owner_holds_the_row(void **state)
{
	struct contract *x = *state;
	struct mf_snapshot_rec s = x->snap, got;
	assert_int_equal(mf_random_hex(MF_FP_HEX_LEN / 2, s.fp), 0);
	s.has_owner = false;
	assert_int_equal(mf_catalog_put_snapshot(x->cat, &s), 0);
	assert_int_equal(mf_catalog_get_snapshot(x->cat, s.fp, &got), 0);
	assert_false(got.has_owner);
	mf_snapshot_rec_release(&got);
	s.has_owner = true;
	s.owner = 1001;
	assert_int_equal(mf_catalog_put_snapshot(x->cat, &s), 0);
	s.owner = 1002;
	char elsewhere[] = "/elsewhere/spec.yaml";
	s.spec_path = elsewhere;
	assert_int_equal(mf_catalog_put_snapshot(x->cat, &s), -EEXIST);
	assert_int_equal(mf_catalog_get_snapshot(x->cat, s.fp, &got), 0);
	assert_string_equal(got.spec_path, x->snap.spec_path);
	assert_int_equal(got.owner, 1001);
	mf_snapshot_rec_release(&got);
	s.has_owner = false;
	assert_int_equal(mf_catalog_put_snapshot(x->cat, &s), 0);
	assert_int_equal(mf_catalog_get_snapshot(x->cat, s.fp, &got), 0);
	assert_true(got.has_owner);
	assert_int_equal(got.owner, 1001);
	mf_snapshot_rec_release(&got);
	s.has_owner = true;
	s.owner = 1001;
	s.spec_path = x->snap.spec_path;
	assert_int_equal(mf_catalog_put_snapshot(x->cat, &s), 0);
	assert_int_equal(mf_catalog_get_snapshot(x->cat, s.fp, &got), 0);
	assert_string_equal(got.spec_path, x->snap.spec_path);
	assert_int_equal(got.owner, 1001);
	mf_snapshot_rec_release(&got);
}

static void test_totals(void **state)
{
	struct contract *x = *state;
	struct mf_catalog_totals t0, t1, t2;
	assert_int_equal(mf_catalog_get_totals(x->cat, &t0), 0);
	struct mf_catalog_totals d = {.started = 2, .stage_ms = 1500};
	assert_int_equal(mf_catalog_add_totals(x->cat, &d), 0);
	d = (struct mf_catalog_totals){
	    .failed = 1, .stage_ms = 250, .running = 99};
	assert_int_equal(mf_catalog_add_totals(x->cat, &d), 0);
	d = (struct mf_catalog_totals){0};
	assert_int_equal(mf_catalog_add_totals(x->cat, &d), 0);
	struct mf_run_rec me;
	run_of(x, &me, true);
	assert_int_equal(claim(x, 0, &me, 0, NULL), MF_CLAIM_MINE);
	assert_int_equal(mf_catalog_get_totals(x->cat, &t1), 0);
	assert_int_equal(t1.started - t0.started, 2);
	assert_int_equal(t1.failed - t0.failed, 1);
	assert_int_equal(t1.stage_ms - t0.stage_ms, 1750);
	assert_int_equal(t1.running - t0.running, 1);
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 0, me.run_id, 1, 1, 1), 0);
	assert_int_equal(mf_catalog_get_totals(x->cat, &t2), 0);
	assert_int_equal(t2.running, t0.running);
	assert_int_equal(t2.started, t1.started);
}

/* Claimers on connections of their own, all at once. */
#define CLAIMERS 6
struct claimer {
	const struct contract *x;
	pthread_barrier_t *go;
	enum mf_claim got;
	int rc;
};

static void *claimer_main(void *arg)
{
	struct claimer *k = arg;
	struct mf_catalog *c = NULL;
	struct mf_run_rec me;
	k->rc = mf_catalog_open(k->x->loc, 0, &c);
	ct_run_self(&me, '1', k->x->fp);
	if (!k->rc)
		k->rc = mf_random_hex(MF_RUN_ID_HEX_LEN / 2, me.run_id);
	pthread_barrier_wait(k->go);
	if (!k->rc)
		k->rc = mf_catalog_claim_shard(c, k->x->fp, 3, &me, mf_now_s(),
					       &k->got, NULL);
	mf_catalog_close(c);
	return NULL;
}

static void test_one_claimer_wins(void **state)
{
	struct contract *x = *state;
	struct claimer k[CLAIMERS];
	pthread_t t[CLAIMERS];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, CLAIMERS);
	for (int i = 0; i < CLAIMERS; i++) {
		k[i] = (struct claimer){.x = x, .go = &go, .got = -1};
		assert_int_equal(
		    pthread_create(&t[i], NULL, claimer_main, &k[i]), 0);
	}
	int mine = 0;
	for (int i = 0; i < CLAIMERS; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(k[i].rc, 0);
		mine += k[i].got == MF_CLAIM_MINE;
		assert_true(k[i].got == MF_CLAIM_MINE ||
			    k[i].got == MF_CLAIM_WAIT);
	}
	pthread_barrier_destroy(&go);
	assert_int_equal(mine, 1);
}

/* A child process claims shard 2 on a connection of its own, says so on
 * a pipe, and waits for its stdin to close. */
static pid_t claiming_child(const struct contract *x, int *ready, int *hold)
{
	int up[2], down[2];
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct mf_catalog *c;
		struct mf_run_rec me;
		enum mf_claim got = -1;
		char b;
		close(up[0]);
		close(down[1]);
		ct_run_self(&me, '1', x->fp);
		if (mf_random_hex(MF_RUN_ID_HEX_LEN / 2, me.run_id) ||
		    mf_catalog_open(x->loc, 0, &c) ||
		    mf_catalog_claim_shard(c, x->fp, 2, &me, mf_now_s(), &got,
					   NULL) ||
		    got != MF_CLAIM_MINE)
			_exit(1);
		b = 'y';
		if (write(up[1], &b, 1) != 1)
			_exit(1);
		(void)read(down[0], &b, 1);
		_exit(0); /* no close: a process that dies */
	}
	close(up[1]);
	close(down[0]);
	*ready = up[0];
	*hold = down[1];
	return pid;
}

static void test_dead_process_taken_over(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec me;
	struct mf_shard_rec cur;
	int ready, hold, status;
	char b = 0;
	run_of(x, &me, true);
	pid_t pid = claiming_child(x, &ready, &hold);
	assert_int_equal(read(ready, &b, 1), 1);
	/* the child lives: its claim holds */
	assert_int_equal(claim(x, 2, &me, 0, &cur), MF_CLAIM_WAIT);
	char owner[MF_RUN_ID_HEX_LEN + 1];
	memcpy(owner, cur.run_id, sizeof(owner));
	mf_shard_rec_release(&cur);
	close(hold);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(ready);
	/* the child is gone: taken over at once (the server may take a
	 * moment to see the connection closed) */
	enum mf_claim got = MF_CLAIM_WAIT;
	for (int i = 0; i < 500 && got == MF_CLAIM_WAIT; i++) {
		got = claim(x, 2, &me, 0, NULL);
		if (got == MF_CLAIM_WAIT)
			usleep(10000);
	}
	assert_int_equal(got, MF_CLAIM_MINE);
	struct mf_run_rec r;
	assert_int_equal(mf_catalog_get_run(x->cat, owner, &r), 0);
	assert_string_equal(r.state, "dead");
	bool alive = true;
	assert_int_equal(
	    mf_catalog_judge_run(x->cat, &r, mf_now_s(), 3600, &alive), 0);
	assert_false(alive);
	assert_int_equal(mf_catalog_get_run(x->cat, me.run_id, &r), 0);
	assert_int_equal(
	    mf_catalog_judge_run(x->cat, &r, mf_now_s(), 3600, &alive), 0);
	assert_true(alive);
}

/* A waiter on a connection of its own, for up to an hour: only a
 * notification (or the row found changed) ends its wait in a test's
 * time. */
struct waiter {
	const struct contract *x;
	uint32_t idx;
	uint64_t gen;
	int timeout_ms;
	int rc;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	struct mf_catalog *c = NULL;
	w->rc = mf_catalog_open(w->x->loc, 0, &c);
	if (!w->rc)
		w->rc = mf_catalog_wait_shard(c, w->x->fp, w->idx, w->gen,
					      w->timeout_ms);
	mf_catalog_close(c);
	return NULL;
}

#define HOUR_MS (3600 * 1000)

/* Claims shard idx for a and answers b's WAIT generation. */
static uint64_t running_elsewhere(const struct contract *x, uint32_t idx,
				  struct mf_run_rec *a, struct mf_run_rec *b)
{
	struct mf_shard_rec cur;
	run_of(x, a, true);
	run_of(x, b, true);
	assert_int_equal(claim(x, idx, a, 0, NULL), MF_CLAIM_MINE);
	assert_int_equal(claim(x, idx, b, 0, &cur), MF_CLAIM_WAIT);
	uint64_t gen = cur.generation;
	mf_shard_rec_release(&cur);
	return gen;
}

/* A waiter is woken by a commit on another connection, not by its
 * timeout (an hour): complete and fail each wake it, the notification
 * leaving only with the commit. A backend that cannot be woken says so
 * at once (SQLite), and so does every backend when the environment
 * turns notifications off. */
static void test_waiter_woken(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec a, b;
	pthread_t t;
	uint64_t gen = running_elsewhere(x, 0, &a, &b);
	bool pg = strncmp(x->loc, "postgres", 8) == 0;
	int rc = mf_catalog_wait_shard(x->cat, x->fp, 0, gen, 1);
	if (!pg) {
		assert_int_equal(rc, -EOPNOTSUPP);
		return;
	}
	assert_int_equal(rc, -ETIMEDOUT);
	assert_int_equal(setenv("MATFS_CATALOG_NOTIFY", "0", 1), 0);
	assert_int_equal(mf_catalog_wait_shard(x->cat, x->fp, 0, gen, HOUR_MS),
			 -EOPNOTSUPP);
	assert_int_equal(unsetenv("MATFS_CATALOG_NOTIFY"), 0);

	/* the completion is written, not committed, before the waiter
	 * starts: its own look at the row finds it running */
	struct waiter w = {.x = x, .idx = 0, .gen = gen, .timeout_ms = HOUR_MS};
	assert_int_equal(mf_catalog_begin(x->cat), 0);
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 0, a.run_id, 3, 3, 1), 0);
	assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
	usleep(200000); /* not asserted: lets the waiter block first */
	assert_int_equal(mf_catalog_end(x->cat, 0), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.rc, 0);
	assert_int_equal(claim(x, 0, &b, gen, NULL), MF_CLAIM_DONE);
	/* a row no longer running as gen: at once */
	assert_int_equal(mf_catalog_wait_shard(x->cat, x->fp, 0, gen, HOUR_MS),
			 0);

	/* a failure wakes too */
	gen = running_elsewhere(x, 1, &a, &b);
	w = (struct waiter){
	    .x = x, .idx = 1, .gen = gen, .timeout_ms = HOUR_MS};
	assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
	usleep(200000);
	assert_int_equal(
	    mf_catalog_fail_shard(x->cat, x->fp, 1, a.run_id, 256, "x", NULL),
	    0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.rc, 0);
}

/* A completion rolled back notifies nobody: the waiter's own timeout
 * ends its wait, and the row still runs. */
static void test_rollback_wakes_nobody(void **state)
{
	struct contract *x = *state;
	struct mf_run_rec a, b;
	pthread_t t;
	uint64_t gen = running_elsewhere(x, 2, &a, &b);
	if (strncmp(x->loc, "postgres", 8) != 0)
		return; /* nothing wakes: the test above */
	struct waiter w = {.x = x, .idx = 2, .gen = gen, .timeout_ms = 1500};
	assert_int_equal(mf_catalog_begin(x->cat), 0);
	assert_int_equal(
	    mf_catalog_complete_shard(x->cat, x->fp, 2, a.run_id, 3, 3, 1), 0);
	assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
	assert_int_equal(mf_catalog_end(x->cat, -ECANCELED), -ECANCELED);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.rc, -ETIMEDOUT);
	assert_int_equal(claim(x, 2, &b, gen, NULL), MF_CLAIM_WAIT);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_claim_complete),
	    T(test_failure_reaches_waiters),
	    T(test_lost_claim),
	    T(test_abandon_reset),
	    T(test_expire_if_unchanged),
	    T(test_holds_and_delete),
	    T(test_unit_rolls_back),
	    T(test_one_claimer_wins),
	    T(test_dead_process_taken_over),
	    T(test_owner_holds_the_row),
	    T(test_totals),
	    T(test_waiter_woken),
	    T(test_rollback_wakes_nobody),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}
