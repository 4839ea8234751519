/*
 * test_engine_cluster.c - engines sharing one store and one catalog, as
 * the daemons of a cluster's hosts do: -o max_size counts the store's
 * total, every engine's snapshots and not only the deciding one's, and
 * the engine that evicts another engine's snapshot removes that one's
 * files. The catalog is MF_TEST_CATALOG_LOCATION when set (a PostgreSQL
 * server from tests/catalog/pg_server.sh), else the store's SQLite.
 *
 * Not for: the policy's decisions on lists of records
 * (test_engine_expiry.c) or the claim across engines (test_engine.c).
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
#include <unistd.h>

#include <cmocka.h>

#include "mf_engine.h"
#include "mf_snapshot.h"
#include "mf_testlib.h"

struct fx {
	char dir[64];
	char store[96];
	char spec[2][128]; /* one spec per engine, in folders of their own */
	char fp[2][MF_FP_HEX_LEN + 1];
	struct mf_engine *e[2]; /* "host" A and "host" B */
};

/* Spec i: one shard whose input is `body` repeated, copied as is. */
static void make_spec(struct fx *fx, int i, const char *body, int repeat)
{
	char d[96], path[192];
	snprintf(d, sizeof(d), "%s/p%d", fx->dir, i);
	assert_int_equal(mkdir(d, 0755), 0);
	snprintf(path, sizeof(path), "%s/in.txt", d);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	for (int k = 0; k < repeat; k++)
		fprintf(f, "%s %d\n", body, k);
	assert_int_equal(fclose(f), 0);
	snprintf(fx->spec[i], sizeof(fx->spec[i]), "%s/spec.yaml", d);
	snprintf(path, sizeof(path),
		 "name: host%c\ninputs: in.txt\nstages:\n  - exec: [cat]\n"
		 "compression: none\n",
		 'a' + i);
	tl_write_file(fx->spec[i], path);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-engcl-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	snprintf(fx->store, sizeof(fx->store), "%s/store", fx->dir);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	for (int i = 0; i < 2; i++)
		mf_engine_close(fx->e[i]);
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

/* Engine i on the shared store and catalog, its spec registered and its
 * one shard computed. */
static void engine_up(struct fx *fx, int i)
{
	const char *loc = getenv("MF_TEST_CATALOG_LOCATION");
	struct mf_engine_opts o = {.store_dir = fx->store,
				   .catalog = loc && *loc ? loc : NULL};
	char *err = NULL;
	struct mf_shard_reader *r = NULL;
	int rc = mf_engine_open(&o, &fx->e[i], &err);
	if (rc == 0)
		rc = mf_engine_register(fx->e[i], fx->spec[i], fx->fp[i], &err);
	if (rc == 0)
		rc = mf_engine_open_shard(fx->e[i], fx->fp[i], 0, &r, &err);
	if (rc)
		fail_msg("engine %d: %s", i, err ? err : strerror(-rc));
	mf_shard_reader_close(r);
}

/* The stored bytes of fp in e's listing. */
static uint64_t stored(struct mf_engine *e, const char *fp)
{
	struct mf_engine_snapshot *v;
	size_t n;
	uint64_t b = 0;
	assert_int_equal(mf_engine_list_snapshots(e, &v, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].fp, fp) == 0)
			b = v[i].stored_bytes;
	mf_engine_snapshot_recs_free(v, n);
	return b;
}

/* What A's expiry would do under max_size with A's listing of the two
 * snapshots (a shared server may hold other tests' too): the
 * fingerprints due, into due (room for two). */
static size_t due_under(struct fx *fx, uint64_t max_size,
			char due[2][MF_FP_HEX_LEN + 1])
{
	struct mf_engine_snapshot *v;
	struct mf_expiry_due *d;
	size_t n, nd, k = 0;
	struct mf_expiry_policy p = {
	    .now = mf_now_s(), .older_than = -1, .max_size = max_size};
	assert_int_equal(mf_engine_list_snapshots(fx->e[0], &v, &n), 0);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v[i].fp, fx->fp[0]) == 0 ||
		    strcmp(v[i].fp, fx->fp[1]) == 0) {
			struct mf_engine_snapshot t = v[k];
			v[k++] = v[i];
			v[i] = t;
		}
	}
	assert_int_equal(k, 2);
	assert_int_equal(mf_engine_expiry_due(v, k, &p, &d, &nd), 0);
	assert_true(nd <= 2);
	for (size_t i = 0; i < nd; i++) {
		assert_int_equal(d[i].why, MF_EXPIRY_MAX_SIZE);
		memcpy(due[i], v[d[i].index].fp, MF_FP_HEX_LEN + 1);
	}
	free(d);
	mf_engine_snapshot_recs_free(v, n);
	return nd;
}

/* A's max_size counts B's snapshot: with room for A's own alone, B's
 * (read less recently) is evicted, by A, its file removed; B computes
 * it again on its next read. */
static void test_max_size_counts_every_engine(void **state)
{
	struct fx *fx = *state;
	char due[2][MF_FP_HEX_LEN + 1];
	make_spec(fx, 0, "host a's input line", 10);
	make_spec(fx, 1, "host b's input, which is longer", 200);
	engine_up(fx, 1); /* B first: its snapshot is the older one */
	sleep(1); /* not asserted: a later second for A's last read */
	engine_up(fx, 0);
	struct mf_engine *a = fx->e[0], *b = fx->e[1];
	uint64_t sa = stored(a, fx->fp[0]), sb = stored(a, fx->fp[1]);
	assert_true(sa > 0 && sb > 0);

	/* room for both: nothing; room for A's own alone: B's goes */
	assert_int_equal(due_under(fx, sa + sb, due), 0);
	assert_int_equal(due_under(fx, sa + sb - 1, due), 1);
	assert_string_equal(due[0], fx->fp[1]);
	assert_true(sa <= sa + sb - 1);

	struct mf_engine_shard rec;
	struct stat st;
	assert_int_equal(mf_engine_shard_rec(b, fx->fp[1], 0, &rec), 0);
	char run[MF_RUN_ID_HEX_LEN + 1];
	memcpy(run, rec.run_id, sizeof(run));
	mf_engine_shard_release(&rec);
	assert_int_equal(mf_store_lstat(mf_engine_store(a), MF_STORE_SHARD,
					fx->fp[1], run, 0, &st),
			 0);
	assert_int_equal(mf_engine_expire_snapshot(a, fx->fp[1]), 0);
	assert_int_equal(mf_store_lstat(mf_engine_store(a), MF_STORE_SHARD,
					fx->fp[1], run, 0, &st),
			 -ENOENT);
	assert_int_equal(stored(a, fx->fp[1]), 0);
	assert_int_equal(due_under(fx, sa + sb - 1, due), 0);

	char *err = NULL;
	struct mf_shard_reader *r;
	assert_int_equal(mf_engine_open_shard(b, fx->fp[1], 0, &r, &err), 0);
	mf_shard_reader_close(r);
	assert_int_equal(stored(a, fx->fp[1]), sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_max_size_counts_every_engine,
					    setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
