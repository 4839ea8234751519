/*
 * test_catalog_records.c - snapshot and run rows through the catalog API:
 * every field round-trips, upserts keep what they must, shard rows follow
 * the shard count, lists are ordered, deletes cascade, and errors leave
 * outputs untouched.
 *
 * Not for: claims and shard transitions (test_catalog_claim.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog_test.h"

static void assert_snapshot_equal(const struct mf_snapshot_rec *a,
				  const struct mf_snapshot_rec *b)
{
	assert_string_equal(a->fp, b->fp);
	assert_string_equal(a->name, b->name);
	assert_int_equal(a->shards, b->shards);
	assert_string_equal(a->spec_path, b->spec_path);
	assert_string_equal(a->compression, b->compression);
	assert_string_equal(a->suffix, b->suffix);
	assert_int_equal(a->chunk_size, b->chunk_size);
	assert_int_equal(a->expire_after, b->expire_after);
	assert_int_equal(a->pending_expiry, b->pending_expiry);
	assert_int_equal(a->keep, b->keep);
	assert_int_equal(a->created, b->created);
	assert_int_equal(a->last_read, b->last_read);
}

static void test_snapshot_round_trip(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec in, out;
	ct_snapshot(&in, 'a', "wiki-tokens", 5);
	in.chunk_size = (1ull << 40) + 3; /* beyond 32 bits */
	in.expire_after = -1;
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &in), 0);
	assert_int_equal(mf_catalog_get_snapshot(f->cat, in.fp, &out), 0);
	assert_snapshot_equal(&in, &out);
	assert_int_equal(out.materialized, 0);
	assert_int_equal(out.raw_bytes, 0);
	assert_int_equal(out.stored_bytes, 0);
	mf_snapshot_rec_release(&out);
	assert_null(out.spec_path);
	mf_snapshot_rec_release(NULL);

	struct mf_shard_rec *sh = NULL;
	size_t n = 0;
	assert_int_equal(mf_catalog_list_shards(f->cat, in.fp, &sh, &n), 0);
	assert_int_equal(n, 5);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(sh[i].index, i);
		assert_int_equal(sh[i].state, MF_SHARD_ABSENT);
		assert_string_equal(sh[i].run_id, "");
		assert_int_equal(sh[i].exit_status, -1);
		assert_null(sh[i].error);
		assert_int_equal(sh[i].attempts, 0);
		mf_shard_rec_release(&sh[i]);
	}
	free(sh);
}

static void test_snapshot_upsert(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec in, out;
	static char suffix[] = "", comp[] = "snappy",
		    spec[] = "/elsewhere.yaml";
	ct_snapshot(&in, 'a', "wiki", 3);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &in), 0);
	assert_int_equal(mf_catalog_touch(f->cat, in.fp, 1, 1800000000), 0);

	/* again with other settings and times: created, last_read stay */
	struct mf_snapshot_rec again = in;
	snprintf(again.name, sizeof(again.name), "wiki-renamed");
	again.spec_path = spec;
	again.compression = comp;
	again.suffix = suffix;
	again.chunk_size = 1 << 20;
	again.expire_after = 60;
	again.pending_expiry = 120;
	again.keep = 0;
	again.created = 1;
	again.last_read = 2;
	again.shards = 2;
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &again), 0);
	assert_int_equal(mf_catalog_get_snapshot(f->cat, in.fp, &out), 0);
	again.created = in.created;
	again.last_read = 1800000000;
	assert_snapshot_equal(&again, &out);
	mf_snapshot_rec_release(&out);

	/* shard rows follow the count: trimmed to 2, grown back to 4 */
	struct mf_shard_rec h;
	assert_int_equal(mf_catalog_get_shard(f->cat, in.fp, 2, &h), -ENOENT);
	assert_int_equal(mf_catalog_get_shard(f->cat, in.fp, 1, &h), 0);
	assert_int_equal(h.last_read, 1800000000); /* kept */
	mf_shard_rec_release(&h);
	again.shards = 4;
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &again), 0);
	assert_int_equal(mf_catalog_get_shard(f->cat, in.fp, 3, &h), 0);
	assert_int_equal(h.state, MF_SHARD_ABSENT);
	mf_shard_rec_release(&h);
}

static void test_snapshot_created_default(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec in, out;
	ct_snapshot(&in, 'c', "now", 1);
	in.created = 0;
	int64_t t0 = mf_now_s();
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &in), 0);
	assert_int_equal(mf_catalog_get_snapshot(f->cat, in.fp, &out), 0);
	assert_true(out.created >= t0 && out.created <= mf_now_s());
	mf_snapshot_rec_release(&out);
}

static void test_list_and_find(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec a1, a2, b1;
	ct_snapshot(&b1, 'b', "beta", 1);
	ct_snapshot(&a2, '2', "alpha", 2);
	a2.created = 1700000200;
	ct_snapshot(&a1, '1', "alpha", 3);
	a1.created = 1700000100;
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &b1), 0);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &a2), 0);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &a1), 0);

	struct mf_snapshot_rec *list = NULL;
	size_t n = 0;
	assert_int_equal(mf_catalog_list_snapshots(f->cat, &list, &n), 0);
	assert_int_equal(n, 3);
	assert_snapshot_equal(&list[0], &a1); /* name, then created */
	assert_snapshot_equal(&list[1], &a2);
	assert_snapshot_equal(&list[2], &b1);
	for (size_t i = 0; i < n; i++)
		mf_snapshot_rec_release(&list[i]);
	free(list);

	/* the most recently registered, not the newest created */
	char fp[MF_FP_HEX_LEN + 1];
	assert_int_equal(mf_catalog_find_name(f->cat, "alpha", fp), 0);
	assert_string_equal(fp, a1.fp);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &a2), 0);
	assert_int_equal(mf_catalog_find_name(f->cat, "alpha", fp), 0);
	assert_string_equal(fp, a2.fp);
	memset(fp, 'z', sizeof(fp));
	assert_int_equal(mf_catalog_find_name(f->cat, "gamma", fp), -ENOENT);
	assert_int_equal(fp[0], 'z');
}

static void test_list_empty(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec *list = (struct mf_snapshot_rec *)0x1;
	size_t n = 99;
	assert_int_equal(mf_catalog_list_snapshots(f->cat, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
}

static void test_delete(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec a, b, out;
	struct mf_run_rec r;
	ct_snapshot(&a, 'a', "a", 2);
	ct_snapshot(&b, 'b', "b", 2);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &a), 0);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &b), 0);
	ct_run(&r, '1', a.fp, "h", 10, 20, 30);
	assert_int_equal(mf_catalog_add_run(f->cat, &r), 0);
	ct_run(&r, '2', b.fp, "h", 10, 20, 30);
	assert_int_equal(mf_catalog_add_run(f->cat, &r), 0);

	struct mf_run_rec *gone = NULL;
	size_t ngone = 0;
	assert_int_equal(
	    mf_catalog_delete_snapshot(f->cat, a.fp, &gone, &ngone), 0);
	assert_int_equal(ngone, 1); /* the rows it deleted */
	char id[MF_RUN_ID_HEX_LEN + 1];
	ct_run_id('1', id);
	assert_string_equal(gone[0].run_id, id);
	free(gone);
	assert_int_equal(mf_catalog_get_snapshot(f->cat, a.fp, &out), -ENOENT);
	struct mf_shard_rec h;
	assert_int_equal(mf_catalog_get_shard(f->cat, a.fp, 0, &h), -ENOENT);
	assert_int_equal(mf_catalog_get_run(f->cat, id, &r), -ENOENT);
	assert_int_equal(mf_catalog_delete_snapshot(f->cat, a.fp, NULL, NULL),
			 -ENOENT);

	/* the other snapshot is untouched */
	assert_int_equal(mf_catalog_get_snapshot(f->cat, b.fp, &out), 0);
	mf_snapshot_rec_release(&out);
	assert_int_equal(mf_catalog_get_shard(f->cat, b.fp, 1, &h), 0);
	mf_shard_rec_release(&h);
	ct_run_id('2', id);
	assert_int_equal(mf_catalog_get_run(f->cat, id, &r), 0);
}

static void test_snapshot_errors(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec in, out;
	ct_snapshot(&in, 'a', "x", 1);
	in.fp[3] = 'G'; /* not lowercase hex */
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &in), -EINVAL);
	ct_snapshot(&in, 'a', "x", 0);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &in), -EINVAL);
	ct_snapshot(&in, 'a', "", 1);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &in), -EINVAL);
	ct_snapshot(&in, 'a', "x", 1);
	in.spec_path = NULL;
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &in), -EINVAL);
	assert_int_equal(mf_catalog_put_snapshot(NULL, &in), -EINVAL);

	/* a failed get leaves the output as it was */
	memset(&out, 0x5a, sizeof(out));
	struct mf_snapshot_rec copy = out;
	assert_int_equal(mf_catalog_get_snapshot(f->cat, in.fp, &out), -ENOENT);
	assert_memory_equal(&out, &copy, sizeof(out));
	struct mf_shard_rec h, hcopy;
	memset(&h, 0x5a, sizeof(h));
	hcopy = h;
	assert_int_equal(mf_catalog_get_shard(f->cat, in.fp, 0, &h), -ENOENT);
	assert_memory_equal(&h, &hcopy, sizeof(h));
}

static void assert_run_equal(const struct mf_run_rec *a,
			     const struct mf_run_rec *b)
{
	assert_string_equal(a->run_id, b->run_id);
	assert_string_equal(a->fp, b->fp);
	assert_string_equal(a->host, b->host);
	assert_int_equal(a->pid, b->pid);
	assert_int_equal(a->pid_start, b->pid_start);
	assert_int_equal(a->started, b->started);
	assert_int_equal(a->heartbeat, b->heartbeat);
	assert_string_equal(a->state, b->state);
	assert_string_equal(a->boot_id, b->boot_id);
	assert_int_equal(a->pid_ns, b->pid_ns);
}

static void test_runs(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec s;
	struct mf_run_rec r1, r2, out;
	ct_snapshot(&s, 'a', "a", 1);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &s), 0);
	ct_run(&r1, 'e', s.fp, "node-1.example", 77, 1ull << 40, 1000);
	ct_run(&r2, 'd', s.fp, "node-2", 78, 5, 900);
	memcpy(r1.boot_id, "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0",
	       MF_BOOT_ID_LEN);
	r1.pid_ns = 4026531836ull;
	assert_int_equal(mf_catalog_add_run(f->cat, &r1), 0);
	assert_int_equal(mf_catalog_add_run(f->cat, &r2), 0);
	assert_int_equal(mf_catalog_add_run(f->cat, &r1), -EEXIST);
	assert_int_equal(mf_catalog_get_run(f->cat, r1.run_id, &out), 0);
	assert_run_equal(&out, &r1);

	struct mf_run_rec *list = NULL;
	size_t n = 0;
	assert_int_equal(mf_catalog_list_runs(f->cat, s.fp, &list, &n), 0);
	assert_int_equal(n, 2);
	assert_run_equal(&list[0], &r2); /* by start time */
	assert_run_equal(&list[1], &r1);
	free(list);
	char other[MF_FP_HEX_LEN + 1];
	ct_fp('9', other);
	assert_int_equal(mf_catalog_list_runs(f->cat, other, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
	assert_int_equal(mf_catalog_list_runs(f->cat, NULL, &list, &n), 0);
	assert_int_equal(n, 2); /* every run */
	free(list);

	assert_int_equal(mf_catalog_heartbeat(f->cat, r1.run_id, 5000), 0);
	assert_int_equal(mf_catalog_set_run_state(f->cat, r1.run_id, "done"),
			 0);
	assert_int_equal(mf_catalog_get_run(f->cat, r1.run_id, &out), 0);
	assert_int_equal(out.heartbeat, 5000);
	assert_string_equal(out.state, "done");
	assert_int_equal(mf_catalog_set_run_state(f->cat, r1.run_id, "zombie"),
			 -EINVAL);

	assert_int_equal(mf_catalog_delete_run(f->cat, r2.run_id), 0);
	assert_int_equal(mf_catalog_delete_run(f->cat, r2.run_id), -ENOENT);
	assert_int_equal(mf_catalog_heartbeat(f->cat, r2.run_id, 1), -ENOENT);
	assert_int_equal(mf_catalog_set_run_state(f->cat, r2.run_id, "dead"),
			 -ENOENT);
	memset(&out, 0x5a, sizeof(out));
	struct mf_run_rec copy = out;
	assert_int_equal(mf_catalog_get_run(f->cat, r2.run_id, &out), -ENOENT);
	assert_memory_equal(&out, &copy, sizeof(out));
}

static void test_run_errors(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_run_rec r;
	char fp[MF_FP_HEX_LEN + 1];
	ct_fp('f', fp);
	ct_run(&r, '1', fp, "h", 1, 1, 1);
	/* a run of a snapshot the catalog does not know */
	assert_int_equal(mf_catalog_add_run(f->cat, &r), -ENOENT);
	r.run_id[0] = 'x';
	assert_int_equal(mf_catalog_add_run(f->cat, &r), -EINVAL);
	ct_run(&r, '1', fp, "", 1, 1, 1);
	assert_int_equal(mf_catalog_add_run(f->cat, &r), -EINVAL);
	ct_run(&r, '1', fp, "h", 1, 1, 1);
	snprintf(r.state, sizeof(r.state), "sleeping");
	assert_int_equal(mf_catalog_add_run(f->cat, &r), -EINVAL);
}

/* A hold by a live process keeps a snapshot's row from being deleted; a
 * released hold, a dead process's and a remote one past its snapshot's
 * pending_expiry do not, and prune deletes only dead ones. */
static void test_holds(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec snap;
	ct_snapshot(&snap, 'a', "held", 2);
	struct mf_run_rec me, dead, far, stale, *v;
	size_t n;
	ct_run_self(&me, '1', snap.fp);
	assert_int_equal(mf_catalog_hold(f->cat, &me), -ENOENT);
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &snap), 0);
	assert_int_equal(mf_catalog_hold(f->cat, &me), 0);
	assert_int_equal(mf_catalog_hold(f->cat, &me), 0); /* refresh */
	assert_int_equal(
	    mf_catalog_delete_snapshot(f->cat, snap.fp, NULL, NULL),
	    -ENOTEMPTY);
	assert_int_equal(mf_catalog_release(f->cat, me.run_id, snap.fp), 0);
	assert_int_equal(mf_catalog_list_holds(f->cat, snap.fp, &v, &n), 0);
	assert_int_equal(n, 0);
	free(v);

	/* this pid, another start time: a process that is gone */
	ct_run_here(&dead, '2', snap.fp, (int32_t)getpid(),
		    mf_proc_start_time(getpid()) + 1, mf_now_s());
	/* another host: alive while its heartbeat is recent */
	ct_run(&far, '3', snap.fp, "elsewhere", 1, 1, mf_now_s());
	ct_run(&stale, '4', snap.fp, "elsewhere", 1, 1,
	       mf_now_s() - snap.pending_expiry - 10);
	assert_int_equal(mf_catalog_hold(f->cat, &dead), 0);
	assert_int_equal(mf_catalog_hold(f->cat, &far), 0);
	assert_int_equal(mf_catalog_hold(f->cat, &stale), 0);
	assert_int_equal(
	    mf_catalog_delete_snapshot(f->cat, snap.fp, NULL, NULL),
	    -ENOTEMPTY);
	size_t pruned = 9;
	assert_int_equal(mf_catalog_prune_holds(f->cat, mf_now_s(), &pruned),
			 0);
	assert_int_equal(pruned, 2);
	assert_int_equal(mf_catalog_list_holds(f->cat, NULL, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0].run_id, far.run_id);
	assert_string_equal(v[0].host, "elsewhere");
	assert_string_equal(v[0].state, "active");
	free(v);
	assert_int_equal(
	    mf_catalog_heartbeat_holds(f->cat, far.run_id, mf_now_s() - 100000),
	    0);
	assert_int_equal(
	    mf_catalog_delete_snapshot(f->cat, snap.fp, NULL, NULL), 0);
	assert_int_equal(mf_catalog_list_holds(f->cat, NULL, &v, &n), 0);
	assert_int_equal(n, 0);
	free(v);

	/* release of every hold of a holder */
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &snap), 0);
	assert_int_equal(mf_catalog_hold(f->cat, &me), 0);
	assert_int_equal(mf_catalog_release(f->cat, me.run_id, NULL), 0);
	assert_int_equal(
	    mf_catalog_delete_snapshot(f->cat, snap.fp, NULL, NULL), 0);
	me.run_id[0] = 'x';
	assert_int_equal(mf_catalog_hold(f->cat, &me), -EINVAL);
	assert_int_equal(mf_catalog_release(f->cat, "x", NULL), -EINVAL);
}

/* A remote hold is refreshed once a minute, whatever the snapshot's
 * pending_expiry (a spec key): one that short must not let another pid
 * namespace judge a live holder dead between two refreshes. */
static void test_hold_short_pending_expiry(void **state)
{
	struct cat_fixture *f = *state;
	struct mf_snapshot_rec snap;
	ct_snapshot(&snap, 'b', "short", 1);
	snap.pending_expiry = 2;
	struct mf_run_rec far;
	assert_int_equal(mf_catalog_put_snapshot(f->cat, &snap), 0);
	ct_run(&far, '5', snap.fp, "elsewhere", 1, 1, mf_now_s() - 30);
	assert_int_equal(mf_catalog_hold(f->cat, &far), 0);
	assert_int_equal(
	    mf_catalog_delete_snapshot(f->cat, snap.fp, NULL, NULL),
	    -ENOTEMPTY);
	size_t pruned = 9;
	assert_int_equal(mf_catalog_prune_holds(f->cat, mf_now_s(), &pruned),
			 0);
	assert_int_equal(pruned, 0);
	/* silent for several refreshes: gone */
	assert_int_equal(
	    mf_catalog_heartbeat_holds(f->cat, far.run_id, mf_now_s() - 1000),
	    0);
	assert_int_equal(
	    mf_catalog_delete_snapshot(f->cat, snap.fp, NULL, NULL), 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, ct_setup_open, ct_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_snapshot_round_trip),
	    T(test_snapshot_upsert),
	    T(test_snapshot_created_default),
	    T(test_list_and_find),
	    T(test_list_empty),
	    T(test_delete),
	    T(test_snapshot_errors),
	    T(test_runs),
	    T(test_run_errors),
	    T(test_holds),
	    T(test_hold_short_pending_expiry),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}
