/*
 * test_engine_batches.c - one batch of a snapshot of fixed records through
 * the engine (engine_batches.c): its place and size known without
 * computing once the shards say, EAGAIN before; a cold open computing only
 * the shards the order needs (fewer than all); its bytes the records of
 * its runs, read from the shards, the same records mf_engine_batches
 * lists; every record at most once per epoch and only the last partial
 * batch dropped; one sequence for two batch sizes; every rank of a world
 * the same count, rank R's k-th batch global batch R + kW; ENOENT past
 * the end; a bad view EINVAL.
 *
 * Each 4-byte record is its shard and its index (two u16 LE), so a batch's
 * bytes name its records.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_engine.h"
#include "mf_testlib.h"

#define SHARDS 20

struct fx {
	char dir[64];
	struct mf_engine *e;
	char fp[65];
	uint64_t total; /* records of the epoch */
	unsigned counts[SHARDS];
};

static int count_calls(const struct fx *fx)
{
	char path[128], line[64];
	snprintf(path, sizeof(path), "%s/calls", fx->dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	return n;
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-ebatch-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	char path[192], text[512];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	for (unsigned s = 0; s < SHARDS; s++) {
		fx->counts[s] = (s * 7 % 23 + 1) * 5;
		fx->total += fx->counts[s];
		snprintf(path, sizeof(path), "%s/in/f%02u", fx->dir, s);
		FILE *f = fopen(path, "w");
		if (!f)
			return -1;
		for (unsigned r = 0; r < fx->counts[s]; r++) {
			unsigned char rec[4] = {s & 255, s >> 8, r & 255,
						r >> 8};
			fwrite(rec, 1, 4, f);
		}
		fclose(f);
	}
	snprintf(path, sizeof(path), "%s/spec.yaml", fx->dir);
	snprintf(text, sizeof(text),
		 "name: b\ninputs: in/f*\nstages:\n"
		 "  - exec: [/bin/sh, -c, 'echo $MATFS_SHARD >> calls; "
		 "exec cat']\nrecords: 4\nshuffle_window: 48\n");
	tl_write_file(path, text);
	char store[128];
	snprintf(store, sizeof(store), "%s/store", fx->dir);
	struct mf_engine_opts o = {.store_dir = store};
	char *err = NULL;
	int rc = mf_engine_open(&o, &fx->e, &err);
	if (rc == 0)
		rc = mf_engine_register(fx->e, path, fx->fp, &err);
	if (rc) {
		fprintf(stderr, "engine: %s\n", err ? err : strerror(-rc));
		free(err);
		return -1;
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	mf_engine_close(fx->e);
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

static struct mf_engine_batch_view view(uint64_t b, uint64_t w, uint64_t r)
{
	return (struct mf_engine_batch_view){.shuffled = true,
					     .seed = 7,
					     .epoch = 0,
					     .batch = b,
					     .world = w,
					     .rank = r};
}

/* Reads the view's k-th batch whole (in pieces of 5 bytes, crossing
 * runs) into recs (its records as shard << 16 | index): 0 or the error. */
static int read_batch(struct fx *fx, const struct mf_engine_batch_view *v,
		      uint64_t k, uint32_t *recs)
{
	struct mf_engine_batch *b;
	char *err = NULL;
	int rc = mf_engine_batch_open(fx->e, fx->fp, v, k, &b, &err);
	free(err);
	if (rc)
		return rc;
	uint64_t size = mf_engine_batch_size(b);
	assert_int_equal(size, v->batch * 4);
	unsigned char *buf = malloc(size + 1);
	uint64_t at = 0;
	while (at < size) {
		ssize_t n = mf_engine_batch_pread(b, buf + at, 5, at);
		assert_true(n > 0);
		at += (uint64_t)n;
	}
	assert_int_equal(mf_engine_batch_pread(b, buf, 5, size), 0);
	mf_engine_batch_close(b);
	for (uint64_t i = 0; i < v->batch; i++) {
		const unsigned char *p = buf + 4 * i;
		unsigned s = p[0] | p[1] << 8, r = p[2] | p[3] << 8;
		assert_true(s < SHARDS);
		assert_true(r < fx->counts[s]);
		recs[i] = (uint32_t)(s << 16 | r);
	}
	free(buf);
	return 0;
}

/* what mf_engine_batches lists for each batch, flattened */
struct listed {
	uint32_t *recs;
	size_t n;
};
static int list_fn(void *arg, uint64_t k, uint64_t g,
		   const struct mf_engine_batch_run *runs, size_t n, bool first,
		   bool last)
{
	struct listed *l = arg;
	for (size_t i = 0; i < n; i++)
		for (uint64_t j = 0; j < runs[i].count; j++)
			l->recs[l->n++] = (uint32_t)(runs[i].shard << 16 |
						     (runs[i].record + j));
	return 0;
}

static void test_cold_then_warm(void **state)
{
	struct fx *fx = *state;
	struct mf_engine_batch_view v3 = view(3, 1, 0);
	struct mf_engine_batch_place pl;
	uint64_t count;
	bool complete;
	char *err = NULL;

	/* cold: nothing is known, and asking computes nothing */
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v3, 0, &pl, &err),
			 -EAGAIN);
	assert_int_equal(
	    mf_engine_batch_count(fx->e, fx->fp, &v3, &count, &complete, &err),
	    0);
	assert_int_equal(count, 0);
	assert_false(complete);
	assert_int_equal(count_calls(fx), 0);

	/* a cold open of batch 0 computes some shards, not all */
	uint32_t first[3];
	assert_int_equal(read_batch(fx, &v3, 0, first), 0);
	int calls = count_calls(fx);
	assert_true(calls > 0 && calls < SHARDS);
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v3, 0, &pl, &err),
			 0);
	assert_int_equal(pl.global, 0);
	assert_int_equal(pl.size, 12);
	assert_int_equal(pl.order, 1);
	assert_int_equal(
	    mf_engine_batch_count(fx->e, fx->fp, &v3, &count, &complete, &err),
	    0);
	assert_true(count >= 1 && count < fx->total / 3);
	assert_int_equal(count_calls(fx), calls);

	/* every shard materialized: the whole epoch */
	for (uint32_t s = 0; s < SHARDS; s++) {
		struct mf_shard_reader *r;
		assert_int_equal(
		    mf_engine_open_shard(fx->e, fx->fp, s, &r, &err), 0);
		mf_engine_reader_close(r);
	}
	assert_int_equal(count_calls(fx), SHARDS);
	assert_int_equal(
	    mf_engine_batch_count(fx->e, fx->fp, &v3, &count, &complete, &err),
	    0);
	assert_true(complete);
	assert_int_equal(count, fx->total / 3);

	/* each batch's bytes are the records the listing names; every record
	 * once at most, the last partial batch alone dropped */
	uint32_t *seq = calloc(fx->total, sizeof(*seq));
	struct listed l = {calloc(fx->total, sizeof(uint32_t)), 0};
	struct mf_engine_batches_info info;
	assert_int_equal(
	    mf_engine_batches(fx->e, fx->fp, &v3, list_fn, &l, &info, &err), 0);
	assert_int_equal(l.n, count * 3);
	for (uint64_t k = 0; k < count; k++)
		assert_int_equal(read_batch(fx, &v3, k, seq + 3 * k), 0);
	assert_memory_equal(seq, l.recs, count * 3 * sizeof(uint32_t));
	assert_memory_equal(seq, first, sizeof(first));
	unsigned char *seen = calloc((size_t)SHARDS << 16, 1);
	for (uint64_t i = 0; i < count * 3; i++)
		assert_int_equal(seen[seq[i]]++, 0);
	free(seen);
	uint32_t none[5];
	assert_int_equal(read_batch(fx, &v3, count, none), -ENOENT);
	assert_int_equal(
	    mf_engine_batch_find(fx->e, fx->fp, &v3, count, &pl, &err),
	    -ENOENT);

	/* batches of 5 slice the same sequence */
	struct mf_engine_batch_view v5 = view(5, 1, 0);
	for (uint64_t k = 0; k < 4; k++) {
		assert_int_equal(read_batch(fx, &v5, k, none), 0);
		assert_memory_equal(none, seq + 5 * k, sizeof(none));
	}

	/* ranks: the same count each, rank R's k-th batch global R + 3k */
	uint64_t rc0 = 0;
	for (uint64_t r = 0; r < 3; r++) {
		struct mf_engine_batch_view vr = view(3, 3, r);
		uint64_t c;
		assert_int_equal(mf_engine_batch_count(fx->e, fx->fp, &vr, &c,
						       &complete, &err),
				 0);
		if (r == 0)
			rc0 = c;
		assert_int_equal(c, rc0);
		assert_int_equal(c, count / 3);
		for (uint64_t k = 0; k < c; k += 7) {
			uint32_t got[3];
			assert_int_equal(read_batch(fx, &vr, k, got), 0);
			assert_memory_equal(got, seq + 3 * (r + 3 * k),
					    sizeof(got));
		}
		assert_int_equal(
		    mf_engine_batch_find(fx->e, fx->fp, &vr, c, &pl, &err),
		    -ENOENT);
	}
	free(l.recs);
	free(seq);

	/* bad views */
	struct mf_engine_batch_view bad = view(3, 2, 2);
	assert_int_equal(
	    mf_engine_batch_find(fx->e, fx->fp, &bad, 0, &pl, &err), -EINVAL);
	free(err);
	err = NULL;
	bad = view(0, 1, 0);
	assert_int_equal(
	    mf_engine_batch_count(fx->e, fx->fp, &bad, &count, &complete, &err),
	    -EINVAL);
	free(err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_cold_then_warm, setup,
					    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
