/*
 * test_catalog_claim.c - the single-flight claim and the shard transitions
 * around it: MINE, WAIT and DONE; taking over runs that died on this host
 * (process gone), in another pid namespace or boot, or on another host
 * (heartbeat older than pending_expiry); -ESTALE for a run that lost its
 * shard; reset, abandon, expiry of what a listing showed, and touch; the
 * generation each claim gives a computation; and sixteen
 * processes with their own connections racing for one shard. Opens the
 * catalog at the fixture's location, so it runs once with a plain path and
 * once with "sqlite:PATH" (MF_TEST_CATALOG_SCHEME).
 *
 * Not for: snapshot and run rows as such (test_catalog_records.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "catalog_test.h"

#define OTHER_HOST "other-host.invalid"

/* Fixture plus one snapshot of 4 shards, pending_expiry 3600 s. */
static int setup(void **state)
{
	if (ct_setup_open(state))
		return -1;
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec s;
	ct_snapshot(&s, 'a', "claims", 4);
	return mf_catalog_put_snapshot(f->cat, &s) ? -1 : 0;
}

static const char *fp_a(void)
{
	static char fp[MF_FP_HEX_LEN + 1];
	ct_fp('a', fp);
	return fp;
}

/* Claims and checks the answer; returns the row after the call. */
static struct mf_shard_rec claim(struct mf_catalog *cat, uint32_t idx,
				 const struct mf_run_rec *me, int64_t now,
				 enum mf_claim want)
{
	enum mf_claim got = (enum mf_claim) - 1;
	struct mf_shard_rec cur;
	assert_int_equal(
	    mf_catalog_claim_shard(cat, fp_a(), idx, me, now, &got, &cur), 0);
	assert_int_equal(got, want);
	assert_int_equal(cur.index, idx);
	assert_string_equal(cur.fp, fp_a());
	return cur;
}

static void assert_run_state(struct mf_catalog *cat, const char *run_id,
			     const char *state)
{
	struct mf_run_rec r;
	assert_int_equal(mf_catalog_get_run(cat, run_id, &r), 0);
	assert_string_equal(r.state, state);
}

static void test_claim_mine_wait_done(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, b;
	ct_run_self(&a, '1', fp_a());
	ct_run_self(&b, '2', fp_a());
	int64_t now = mf_now_s();
	struct mf_shard_rec cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	assert_int_equal(cur.state, MF_SHARD_RUNNING);
	assert_string_equal(cur.run_id, a.run_id);
	assert_int_equal(cur.attempts, 1);
	mf_shard_rec_release(&cur);
	assert_run_state(f->cat, a.run_id, "active"); /* claim added it */

	/* a live run (this very process) holds it */
	cur = claim(f->cat, 0, &b, now, MF_CLAIM_WAIT);
	assert_string_equal(cur.run_id, a.run_id);
	mf_shard_rec_release(&cur);
	/* its own run again: an attempt that could not record its outcome */
	cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	assert_int_equal(cur.attempts, 2);
	mf_shard_rec_release(&cur);

	assert_int_equal(mf_catalog_complete_shard(f->cat, fp_a(), 0, a.run_id,
						   1000, 300, 2),
			 0);
	cur = claim(f->cat, 0, &b, now, MF_CLAIM_DONE);
	assert_int_equal(cur.state, MF_SHARD_MATERIALIZED);
	assert_string_equal(cur.run_id, a.run_id);
	assert_int_equal(cur.raw_bytes, 1000);
	assert_int_equal(cur.stored_bytes, 300);
	assert_int_equal(cur.chunks, 2);
	assert_int_equal(cur.attempts, 2);
	mf_shard_rec_release(&cur);

	struct mf_snapshot_rec s;
	assert_int_equal(mf_catalog_get_snapshot(f->cat, fp_a(), &s), 0);
	assert_int_equal(s.materialized, 1);
	assert_int_equal(s.raw_bytes, 1000);
	assert_int_equal(s.stored_bytes, 300);
	mf_snapshot_rec_release(&s);

	/* cur may be NULL */
	enum mf_claim got;
	assert_int_equal(
	    mf_catalog_claim_shard(f->cat, fp_a(), 0, &b, now, &got, NULL), 0);
	assert_int_equal(got, MF_CLAIM_DONE);
}

static void test_fail_then_retry(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, b;
	ct_run_self(&a, '1', fp_a());
	ct_run_self(&b, '2', fp_a());
	int64_t now = mf_now_s();
	struct mf_shard_rec cur = claim(f->cat, 1, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	char tail[6000];
	memset(tail, 'e', sizeof(tail) - 1);
	tail[sizeof(tail) - 1] = '\0';
	tail[sizeof(tail) - 2] = '!';
	assert_int_equal(mf_catalog_fail_shard(f->cat, fp_a(), 1, a.run_id, 256,
					       "stage 'x' exited 1", tail),
			 0);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 1, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_FAILED);
	assert_int_equal(cur.exit_status, 256);
	assert_string_equal(cur.error, "stage 'x' exited 1");
	assert_int_equal(strlen(cur.stderr_tail), 4096); /* the last 4 KiB */
	assert_string_equal(cur.stderr_tail, tail + sizeof(tail) - 1 - 4096);
	mf_shard_rec_release(&cur);

	/* a failed shard is retried by the next claimer */
	cur = claim(f->cat, 1, &b, now, MF_CLAIM_MINE);
	assert_int_equal(cur.state, MF_SHARD_RUNNING);
	assert_string_equal(cur.run_id, b.run_id);
	assert_int_equal(cur.attempts, 2);
	assert_int_equal(cur.exit_status, -1);
	assert_null(cur.error);
	assert_null(cur.stderr_tail);
	mf_shard_rec_release(&cur);
	/* the loser can neither fail nor complete it any more */
	assert_int_equal(
	    mf_catalog_fail_shard(f->cat, fp_a(), 1, a.run_id, 1, NULL, NULL),
	    -ESTALE);
	assert_int_equal(
	    mf_catalog_fail_shard(f->cat, fp_a(), 1, b.run_id, 9, NULL, NULL),
	    0);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 1, &cur), 0);
	assert_null(cur.error);
	assert_int_equal(cur.exit_status, 9);
	mf_shard_rec_release(&cur);
}

/* One failed attempt reaches everyone who waited on it; a claimer that
 * did not wait on that very attempt tries again. */
static void test_waiter_gets_the_failure(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, b, c;
	enum mf_claim got;
	struct mf_shard_rec cur;
	int64_t now = mf_now_s();
	ct_run_self(&a, '1', fp_a());
	ct_run_self(&b, '2', fp_a());
	ct_run_self(&c, '3', fp_a());
	cur = claim(f->cat, 1, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 1, &b, now, MF_CLAIM_WAIT);
	uint64_t waited = cur.generation;
	assert_int_equal(cur.attempts, 1);
	assert_true(waited != 0);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_fail_shard(f->cat, fp_a(), 1, a.run_id, 256,
					       "stage exited 1", "tail"),
			 0);
	assert_int_equal(mf_catalog_claim_shard_waited(f->cat, fp_a(), 1, &b,
						       now, waited, &got, &cur),
			 0);
	assert_int_equal(got, MF_CLAIM_FAILED);
	assert_int_equal(cur.state, MF_SHARD_FAILED); /* nothing changed */
	assert_int_equal(cur.attempts, 1);
	assert_string_equal(cur.error, "stage exited 1");
	assert_string_equal(cur.run_id, a.run_id);
	mf_shard_rec_release(&cur);

	/* c waited on nothing: it tries again; attempt 2 fails too */
	cur = claim(f->cat, 1, &c, now, MF_CLAIM_MINE);
	assert_int_equal(cur.attempts, 2);
	mf_shard_rec_release(&cur);
	assert_int_equal(
	    mf_catalog_fail_shard(f->cat, fp_a(), 1, c.run_id, 256, "x", NULL),
	    0);
	/* b's wait was on attempt 1's computation: attempt 2's failure is not
	 * its answer */
	assert_int_equal(mf_catalog_claim_shard_waited(f->cat, fp_a(), 1, &b,
						       now, waited, &got, &cur),
			 0);
	assert_int_equal(got, MF_CLAIM_MINE);
	assert_int_equal(cur.attempts, 3);
	mf_shard_rec_release(&cur);
}

/* A pid of a process that has exited and been reaped, with the start time
 * it had. */
static pid_t dead_pid(uint64_t *start)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		close(p[1]);
		_exit(read(p[0], &c, 1) == 0 ? 0 : 1);
	}
	close(p[0]);
	*start = mf_proc_start_time(pid);
	assert_true(*start != 0);
	assert_true(mf_process_alive(pid, *start));
	close(p[1]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_false(mf_process_alive(pid, *start));
	return pid;
}

static void test_take_over_dead_pid(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, d;
	uint64_t start;
	int64_t now = mf_now_s();
	pid_t pid = dead_pid(&start);
	ct_run_here(&d, 'd', fp_a(), pid, start, now); /* fresh heartbeat */
	assert_int_equal(mf_catalog_add_run(f->cat, &d), 0);
	ct_run_self(&a, '1', fp_a());
	struct mf_shard_rec cur = claim(f->cat, 2, &d, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);

	cur = claim(f->cat, 2, &a, now, MF_CLAIM_MINE);
	assert_string_equal(cur.run_id, a.run_id);
	assert_int_equal(cur.attempts, 2);
	mf_shard_rec_release(&cur);
	assert_run_state(f->cat, d.run_id, "dead");
	/* the dead run lost the shard */
	assert_int_equal(
	    mf_catalog_complete_shard(f->cat, fp_a(), 2, d.run_id, 1, 1, 1),
	    -ESTALE);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 2, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_RUNNING);
	assert_string_equal(cur.run_id, a.run_id);
	mf_shard_rec_release(&cur);
	/* and may not claim again */
	enum mf_claim got;
	assert_int_equal(
	    mf_catalog_claim_shard(f->cat, fp_a(), 3, &d, now, &got, NULL),
	    -ESTALE);
}

static void test_take_over_reused_pid(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, r;
	int64_t now = mf_now_s();
	/* this pid is alive, but it is not the process that started then */
	ct_run_here(&r, 'c', fp_a(), (int32_t)getpid(),
		    mf_proc_start_time(getpid()) + 1, now);
	ct_run_self(&a, '1', fp_a());
	struct mf_shard_rec cur = claim(f->cat, 0, &r, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_run_state(f->cat, r.run_id, "dead");
}

/* Takes shard idx for owner, then answers what a claim by this process
 * sees: the owner judged alive (WAIT) or dead (MINE). */
static void judge(struct mf_catalog *cat, uint32_t idx,
		  const struct mf_run_rec *owner, int64_t now,
		  enum mf_claim want)
{
	struct mf_run_rec me;
	ct_run_self(&me, '1', fp_a());
	struct mf_shard_rec cur = claim(cat, idx, owner, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	cur = claim(cat, idx, &me, now, want);
	assert_string_equal(cur.run_id,
			    want == MF_CLAIM_WAIT ? owner->run_id : me.run_id);
	mf_shard_rec_release(&cur);
	assert_run_state(cat, owner->run_id,
			 want == MF_CLAIM_WAIT ? "active" : "dead");
}

/* Same hostname, but another pid namespace (a container beside this one)
 * or another boot, or a row that does not say: the pid means nothing
 * here, so only the heartbeat may decide. */
static void test_other_namespace_by_heartbeat(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec r;
	uint64_t start;
	int64_t now = mf_now_s();
	pid_t gone = dead_pid(&start);
	char host[256];
	mf_hostname(host, sizeof(host));

	/* this very pid lives here, yet the run is silent: dead */
	ct_run_self(&r, 'a', fp_a());
	r.pid_ns += 1;
	r.heartbeat = now - 7200;
	judge(f->cat, 0, &r, now, MF_CLAIM_MINE);
	/* its pid is gone here, yet it heartbeats: alive */
	ct_run_here(&r, 'b', fp_a(), gone, start, now - 60);
	r.pid_ns += 1;
	judge(f->cat, 1, &r, now, MF_CLAIM_WAIT);
	/* another boot of this host */
	ct_run_here(&r, 'c', fp_a(), gone, start, now);
	memcpy(r.boot_id, "00000000-0000-4000-8000-000000000000",
	       MF_BOOT_ID_LEN);
	judge(f->cat, 2, &r, now, MF_CLAIM_WAIT);
	/* a row from before schema 4 */
	ct_run(&r, 'd', fp_a(), host, gone, start, now);
	judge(f->cat, 3, &r, now, MF_CLAIM_WAIT);
}

/* The reverse: a run of this host, boot and pid namespace is judged by
 * its process, whatever its heartbeat says. */
static void test_same_namespace_by_pid(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec r;
	uint64_t start;
	int64_t now = mf_now_s();
	pid_t gone = dead_pid(&start);
	ct_run_self(&r, 'a', fp_a());
	r.heartbeat = now - 7200;
	judge(f->cat, 0, &r, now, MF_CLAIM_WAIT);
	ct_run_here(&r, 'b', fp_a(), gone, start, now);
	judge(f->cat, 1, &r, now, MF_CLAIM_MINE);

	/* the rule itself, for gc and fsck */
	ct_run_self(&r, 'c', fp_a());
	assert_true(mf_catalog_run_alive(&r, now + 100000, 3600));
	snprintf(r.state, sizeof(r.state), "done");
	assert_false(mf_catalog_run_alive(&r, now, 3600));
	ct_run(&r, 'd', fp_a(), OTHER_HOST, (int32_t)getpid(), 0, now);
	assert_true(mf_catalog_run_alive(&r, now + 3600, 3600));
	assert_false(mf_catalog_run_alive(&r, now + 3601, 3600));
	/* a pending_expiry shorter than a few heartbeats (a spec key) must
	 * not declare a live remote run dead between two of them */
	assert_true(mf_catalog_run_alive(&r, now + 5, 1));
	assert_true(mf_catalog_run_alive(&r, now + MF_RUN_STALE_MIN_S, 1));
	assert_false(mf_catalog_run_alive(&r, now + MF_RUN_STALE_MIN_S + 1, 1));
}

static void test_other_host(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, old, recent, edge;
	int64_t now = mf_now_s();
	ct_run_self(&a, '1', fp_a());
	/* pid 1 is alive here: only the heartbeat may decide */
	ct_run(&old, '7', fp_a(), OTHER_HOST, 1, 0, now - 7200);
	ct_run(&recent, '8', fp_a(), OTHER_HOST, 999999, 0, now - 60);
	ct_run(&edge, '9', fp_a(), OTHER_HOST, 999999, 0, now - 3600);
	struct mf_shard_rec cur = claim(f->cat, 0, &old, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 1, &recent, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 2, &edge, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);

	cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	assert_string_equal(cur.run_id, a.run_id);
	mf_shard_rec_release(&cur);
	assert_run_state(f->cat, old.run_id, "dead");
	cur = claim(f->cat, 1, &a, now, MF_CLAIM_WAIT);
	assert_string_equal(cur.run_id, recent.run_id);
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 2, &a, now, MF_CLAIM_WAIT); /* not beyond yet */
	mf_shard_rec_release(&cur);
	assert_run_state(f->cat, recent.run_id, "active");

	/* a heartbeat keeps a run alive; silence past the expiry ends it */
	assert_int_equal(mf_catalog_heartbeat(f->cat, recent.run_id, now), 0);
	cur = claim(f->cat, 1, &a, now + 3600, MF_CLAIM_WAIT);
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 1, &a, now + 3601, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
}

static void test_missing_run_row(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, h;
	int64_t now = mf_now_s();
	ct_run_self(&a, '1', fp_a());
	ct_run(&h, '7', fp_a(), OTHER_HOST, 1, 0, now);
	struct mf_shard_rec cur = claim(f->cat, 3, &h, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 3, &a, now, MF_CLAIM_WAIT);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_delete_run(f->cat, h.run_id), 0);
	cur = claim(f->cat, 3, &a, now, MF_CLAIM_MINE);
	assert_string_equal(cur.run_id, a.run_id);
	mf_shard_rec_release(&cur);
}

static void test_reset(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, b;
	int64_t now = mf_now_s();
	ct_run_self(&a, '1', fp_a());
	ct_run_self(&b, '2', fp_a());
	struct mf_shard_rec cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	/* only a materialized (or failed) shard resets under a run id */
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 0, a.run_id),
			 -ESTALE);
	assert_int_equal(
	    mf_catalog_complete_shard(f->cat, fp_a(), 0, a.run_id, 10, 5, 1),
	    0);
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 0, b.run_id),
			 -ESTALE);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 0, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_MATERIALIZED);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 0, a.run_id),
			 0);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 0, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	assert_string_equal(cur.run_id, "");
	assert_int_equal(cur.raw_bytes, 0);
	assert_int_equal(cur.stored_bytes, 0);
	assert_int_equal(cur.chunks, 0);
	mf_shard_rec_release(&cur);

	cur = claim(f->cat, 0, &b, now, MF_CLAIM_MINE);
	assert_int_equal(cur.attempts, 2);
	mf_shard_rec_release(&cur);
	/* without a run id, whatever the state; the owner then goes stale */
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 0, NULL), 0);
	assert_int_equal(
	    mf_catalog_complete_shard(f->cat, fp_a(), 0, b.run_id, 1, 1, 1),
	    -ESTALE);
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 0, NULL), 0);
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 9, NULL),
			 -ENOENT);

	/* a failed attempt resets under its own run id only */
	cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_fail_shard(f->cat, fp_a(), 0, a.run_id, 256,
					       "boom", NULL),
			 0);
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 0, b.run_id),
			 -ESTALE);
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 0, a.run_id),
			 0);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 0, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	mf_shard_rec_release(&cur);
}

/* An expiry decides from a listing, then writes: what changed in between
 * on another connection - a shard expired and computed again by the same
 * run, a shard claimed - is left alone, and the snapshot stays. */
static void test_expire_what_was_listed(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_catalog *other;
	struct mf_run_rec a, b;
	struct mf_shard_rec *list, cur;
	size_t n;
	bool done[4];
	int64_t now = mf_now_s();
	assert_int_equal(mf_catalog_open(f->loc, 0, &other), 0);
	ct_run_self(&a, '1', fp_a());
	ct_run_self(&b, '2', fp_a());
	cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(
	    mf_catalog_complete_shard(f->cat, fp_a(), 0, a.run_id, 10, 5, 1),
	    0);
	cur = claim(f->cat, 1, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(
	    mf_catalog_fail_shard(f->cat, fp_a(), 1, a.run_id, 256, "x", NULL),
	    0);
	assert_int_equal(mf_catalog_list_shards(f->cat, fp_a(), &list, &n), 0);
	assert_int_equal(n, 4);

	assert_int_equal(mf_catalog_reset_shard(other, fp_a(), 0, a.run_id), 0);
	cur = claim(other, 0, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(
	    mf_catalog_complete_shard(other, fp_a(), 0, a.run_id, 10, 5, 1), 0);
	cur = claim(other, 2, &b, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);

	assert_int_equal(mf_catalog_expire_shards(f->cat, list, n, done), 0);
	assert_false(done[0]); /* the same run, but a newer attempt */
	assert_true(done[1]);
	assert_false(done[2]); /* absent when listed, never expired */
	assert_false(done[3]);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 0, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_MATERIALIZED);
	assert_int_equal(cur.attempts, 2);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 1, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	mf_shard_rec_release(&cur);
	for (size_t i = 0; i < n; i++)
		mf_shard_rec_release(&list[i]);
	free(list);

	/* a snapshot with a claim in flight is not deleted */
	assert_int_equal(mf_catalog_delete_snapshot(f->cat, fp_a(), NULL, NULL),
			 -ENOTEMPTY);
	assert_run_state(f->cat, b.run_id, "active");
	assert_int_equal(
	    mf_catalog_complete_shard(other, fp_a(), 2, b.run_id, 7, 7, 1), 0);
	mf_catalog_close(other);

	/* once all it lists has expired, it goes, with its runs */
	assert_int_equal(mf_catalog_list_shards(f->cat, fp_a(), &list, &n), 0);
	assert_int_equal(mf_catalog_expire_shards(f->cat, list, n, done), 0);
	assert_true(done[0] && !done[1] && done[2] && !done[3]);
	for (size_t i = 0; i < n; i++)
		mf_shard_rec_release(&list[i]);
	free(list);
	struct mf_run_rec *runs;
	assert_int_equal(mf_catalog_delete_snapshot(f->cat, fp_a(), &runs, &n),
			 0);
	assert_int_equal(n, 2);
	free(runs);
	assert_int_equal(mf_catalog_get_run(f->cat, a.run_id, &a), -ENOENT);
}

static void test_unknown_and_invalid(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a;
	enum mf_claim got = (enum mf_claim)77;
	struct mf_shard_rec cur, copy;
	memset(&cur, 0x5a, sizeof(cur));
	copy = cur;
	ct_run_self(&a, '1', fp_a());
	assert_int_equal(
	    mf_catalog_claim_shard(f->cat, fp_a(), 4, &a, 0, &got, &cur),
	    -ENOENT);
	assert_int_equal(got, 77);
	assert_memory_equal(&cur, &copy, sizeof(cur));
	char other[MF_FP_HEX_LEN + 1];
	ct_fp('b', other);
	assert_int_equal(
	    mf_catalog_claim_shard(f->cat, other, 0, &a, 0, &got, NULL),
	    -EINVAL);
	assert_int_equal(
	    mf_catalog_complete_shard(f->cat, fp_a(), 4, a.run_id, 1, 1, 1),
	    -ENOENT);
	assert_int_equal(
	    mf_catalog_fail_shard(f->cat, fp_a(), 4, a.run_id, 1, NULL, NULL),
	    -ENOENT);
	/* never claimed: complete is stale, and nothing changed */
	assert_int_equal(
	    mf_catalog_complete_shard(f->cat, fp_a(), 0, a.run_id, 1, 1, 1),
	    -ESTALE);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 0, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	mf_shard_rec_release(&cur);
}

/* Each claim raises the claimer's heartbeat, never lowers it, and leaves
 * a dead run dead. */
static void test_claim_refreshes_heartbeat(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, got;
	int64_t now = mf_now_s();
	ct_run_self(&a, '1', fp_a());
	a.heartbeat = now - 500;
	struct mf_shard_rec cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_get_run(f->cat, a.run_id, &got), 0);
	assert_int_equal(got.heartbeat, now - 500);
	a.heartbeat = now;
	cur = claim(f->cat, 1, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_get_run(f->cat, a.run_id, &got), 0);
	assert_int_equal(got.heartbeat, now);
	a.heartbeat = now - 900; /* older: kept as it was */
	cur = claim(f->cat, 2, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_get_run(f->cat, a.run_id, &got), 0);
	assert_int_equal(got.heartbeat, now);
	assert_int_equal(mf_catalog_set_run_state(f->cat, a.run_id, "dead"), 0);
	a.heartbeat = now + 10;
	enum mf_claim res;
	assert_int_equal(
	    mf_catalog_claim_shard(f->cat, fp_a(), 3, &a, now, &res, NULL),
	    -ESTALE);
	assert_int_equal(mf_catalog_get_run(f->cat, a.run_id, &got), 0);
	assert_string_equal(got.state, "dead");
	assert_int_equal(got.heartbeat, now);
}

static void test_touch(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_shard_rec cur;
	struct mf_snapshot_rec s;
	assert_int_equal(mf_catalog_touch(f->cat, fp_a(), 2, 1900000000), 0);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 2, &cur), 0);
	assert_int_equal(cur.last_read, 1900000000);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 1, &cur), 0);
	assert_int_equal(cur.last_read, 0);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_get_snapshot(f->cat, fp_a(), &s), 0);
	assert_int_equal(s.last_read, 1900000000);
	mf_snapshot_rec_release(&s);
	assert_int_equal(mf_catalog_touch(f->cat, fp_a(), 4, 1), -ENOENT);
	assert_int_equal(mf_catalog_get_snapshot(f->cat, fp_a(), &s), 0);
	assert_int_equal(s.last_read, 1900000000); /* rolled back */
	mf_snapshot_rec_release(&s);
}

#define RACERS 16

/* One racer: its own connection on a catalog that may not exist yet; loops
 * on the claim until DONE, writing 'M' to out when it got MINE. Exit
 * status 0 when all went well, else the step that failed. */
static int racer(const char *db, int go, int out, char seed)
{
	struct mf_catalog *cat = NULL;
	struct mf_snapshot_rec s;
	struct mf_run_rec me;
	char c;
	if (read(go, &c, 1) != 0)
		return 2;
	if (mf_catalog_open(db, 0, &cat))
		return 3;
	ct_snapshot(&s, 'a', "claims", 4);
	if (mf_catalog_put_snapshot(cat, &s))
		return 4;
	ct_run_self(&me, seed, s.fp);
	for (int spins = 0; spins < 2000; spins++) {
		enum mf_claim got;
		if (mf_catalog_claim_shard(cat, s.fp, 1, &me, mf_now_s(), &got,
					   NULL))
			return 5;
		if (got == MF_CLAIM_DONE) {
			mf_catalog_close(cat);
			return 0;
		}
		if (got == MF_CLAIM_MINE) {
			if (write(out, "M", 1) != 1)
				return 6;
			usleep(200 * 1000);
			if (mf_catalog_complete_shard(cat, s.fp, 1, me.run_id,
						      42, 21, 1))
				return 7;
		} else {
			usleep(5 * 1000);
		}
	}
	return 8;
}

static void test_cross_process(void **state)
{
	struct cat_fixture *f = *state;
	int go[2], out[2];
	pid_t pids[RACERS];
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(out), 0);
	for (int i = 0; i < RACERS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			close(go[1]);
			close(out[0]);
			_exit(racer(f->loc, go[0], out[1],
				    "0123456789abcdef"[i]));
		}
	}
	close(go[0]);
	close(out[1]);
	close(go[1]); /* all start at once */
	for (int i = 0; i < RACERS; i++) {
		int status;
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	char buf[RACERS + 1];
	ssize_t n = read(out[0], buf, sizeof(buf));
	close(out[0]);
	assert_int_equal(n, 1); /* exactly one computed it */

	assert_int_equal(mf_catalog_open(f->loc, 0, &f->cat), 0);
	struct mf_shard_rec cur;
	char fp[MF_FP_HEX_LEN + 1];
	ct_fp('a', fp);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp, 1, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_MATERIALIZED);
	assert_int_equal(cur.attempts, 1);
	assert_int_equal(cur.raw_bytes, 42);
	mf_shard_rec_release(&cur);
	struct mf_run_rec *runs = NULL;
	size_t nruns = 0;
	assert_int_equal(mf_catalog_list_runs(f->cat, fp, &runs, &nruns), 0);
	assert_int_equal(nruns, 1); /* only the winner needed a run row */
	free(runs);
}

/* Every claim gives the shard a new generation, nonzero and never seen
 * before, even when run id and attempts repeat (the rows deleted and made
 * again); complete and fail keep it; reset and abandon clear it. */
static void test_generation(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a;
	ct_run_self(&a, '1', fp_a());
	int64_t now = mf_now_s();
	uint64_t seen[8];
	int n = 0;
	for (int round = 0; round < 2; round++) {
		struct mf_shard_rec cur =
		    claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
		assert_int_equal(cur.attempts, 1);
		seen[n++] = cur.generation;
		mf_shard_rec_release(&cur);
		assert_int_equal(mf_catalog_complete_shard(f->cat, fp_a(), 0,
							   a.run_id, 10, 5, 1),
				 0);
		assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 0, &cur),
				 0);
		assert_int_equal(cur.generation, seen[n - 1]);
		mf_shard_rec_release(&cur);
		/* as matctl rm: the shard expires, the rows go and come
		 * back, attempts at 0 */
		struct mf_snapshot_rec s;
		assert_int_equal(
		    mf_catalog_reset_shard(f->cat, fp_a(), 0, NULL), 0);
		assert_int_equal(
		    mf_catalog_delete_snapshot(f->cat, fp_a(), NULL, NULL), 0);
		ct_snapshot(&s, 'a', "claims", 4);
		assert_int_equal(mf_catalog_put_snapshot(f->cat, &s), 0);
	}
	struct mf_shard_rec cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE);
	seen[n++] = cur.generation;
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_fail_shard(f->cat, fp_a(), 0, a.run_id, 256,
					       "failed", NULL),
			 0);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 0, &cur), 0);
	assert_int_equal(cur.generation, seen[n - 1]);
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE); /* after a failure */
	seen[n++] = cur.generation;
	mf_shard_rec_release(&cur);
	cur = claim(f->cat, 0, &a, now, MF_CLAIM_MINE); /* the same run again */
	seen[n++] = cur.generation;
	mf_shard_rec_release(&cur);
	for (int i = 0; i < n; i++) {
		assert_true(seen[i] > 0 && seen[i] <= (uint64_t)INT64_MAX);
		for (int k = 0; k < i; k++)
			assert_true(seen[i] != seen[k]);
	}
	assert_int_equal(
	    mf_catalog_complete_shard(f->cat, fp_a(), 0, a.run_id, 10, 5, 1),
	    0);
	assert_int_equal(mf_catalog_reset_shard(f->cat, fp_a(), 0, a.run_id),
			 0);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 0, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	assert_int_equal(cur.generation, 0);
	mf_shard_rec_release(&cur);
}

/* A claim nobody wants any more goes back to absent, with no error, and
 * only while it is running under the run that gives it up. */
static void test_abandon(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec a, b;
	ct_run_self(&a, '1', fp_a());
	ct_run_self(&b, '2', fp_a());
	int64_t now = mf_now_s();
	struct mf_shard_rec cur = claim(f->cat, 1, &a, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(mf_catalog_abandon_shard(f->cat, fp_a(), 1, b.run_id),
			 -ESTALE);
	assert_int_equal(mf_catalog_abandon_shard(f->cat, fp_a(), 1, a.run_id),
			 0);
	assert_int_equal(mf_catalog_get_shard(f->cat, fp_a(), 1, &cur), 0);
	assert_int_equal(cur.state, MF_SHARD_ABSENT);
	assert_string_equal(cur.run_id, "");
	assert_null(cur.error);
	assert_int_equal(cur.exit_status, -1);
	assert_int_equal(cur.generation, 0);
	assert_int_equal(cur.attempts, 1);
	mf_shard_rec_release(&cur);
	/* not running any more: nothing to give up */
	assert_int_equal(mf_catalog_abandon_shard(f->cat, fp_a(), 1, a.run_id),
			 -ESTALE);
	cur = claim(f->cat, 1, &b, now, MF_CLAIM_MINE);
	mf_shard_rec_release(&cur);
	assert_int_equal(
	    mf_catalog_complete_shard(f->cat, fp_a(), 1, b.run_id, 1, 1, 1), 0);
	assert_int_equal(mf_catalog_abandon_shard(f->cat, fp_a(), 1, b.run_id),
			 -ESTALE);
	assert_int_equal(mf_catalog_abandon_shard(f->cat, fp_a(), 9, b.run_id),
			 -ENOENT);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, ct_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_claim_mine_wait_done),
	    T(test_fail_then_retry),
	    T(test_waiter_gets_the_failure),
	    T(test_take_over_dead_pid),
	    T(test_take_over_reused_pid),
	    T(test_other_host),
	    T(test_other_namespace_by_heartbeat),
	    T(test_same_namespace_by_pid),
	    T(test_missing_run_row),
	    T(test_reset),
	    T(test_expire_what_was_listed),
	    T(test_claim_refreshes_heartbeat),
	    T(test_unknown_and_invalid),
	    T(test_touch),
	    T(test_generation),
	    T(test_abandon),
	    cmocka_unit_test_setup_teardown(test_cross_process, ct_setup,
					    ct_teardown),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}
