/*
 * test_snap_adapt.c - the compression level that keeps pace with the
 * stage: the ladder a chunk's level moves on (codec_adapt.c) driven by
 * any sequence of backlogs, a writer told "behind" or "keeping up"
 * through its pressure hook (never by timing) and the per-chunk codec
 * and level its index records, a pinned writer that never moves, and the
 * pool sized by the cores the process may run on.
 *
 * Not for: speed (bench/engine/adapt.c prints sizes and rates).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "snap_testutil.h"
#include "snapshot_i.h"

#define CS 4096
#define RAW_MARK 100 /* a level in the tables below: stored raw */

/* Steps a through backlogs (workers 2) and checks each chunk's level. */
static void walk(struct snap_adapt *a, const unsigned *backlog, const int *want,
		 size_t n)
{
	for (size_t i = 0; i < n; i++) {
		enum mf_codec codec;
		int level;
		snap_adapt_next(a, backlog[i], 2, &codec, &level);
		bool raw = want[i] == RAW_MARK;
		assert_int_equal(codec, raw ? MF_CODEC_NONE : a->codec);
		assert_int_equal(level, raw ? 0 : want[i]);
	}
}

static void test_ladder_down_and_up(void **state)
{
	(void)state;
	struct snap_adapt a;
	snap_adapt_init(&a, MF_CODEC_ZSTD, 3, true);
	assert_int_equal(snap_adapt_rungs(&a), 3 + 5 + 1);
	/* behind on every chunk: one rung down each, then raw stays raw */
	static const unsigned down[] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 5};
	static const int down_lv[] = {2,  1,   -1,	 -2,	   -4,
				      -8, -16, RAW_MARK, RAW_MARK, RAW_MARK};
	walk(&a, down, down_lv, 10);
	/* keeping up: one rung up per SNAP_ADAPT_CALM chunks in a row; a
	 * chunk behind starts the count again */
	static const unsigned up[] = {0, 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0};
	static const int up_lv[] = {RAW_MARK, RAW_MARK, RAW_MARK, -16,
				    -16,      -16,	-16,	  RAW_MARK,
				    RAW_MARK, RAW_MARK, RAW_MARK, -16};
	walk(&a, up, up_lv, 12);
	/* never above the ceiling */
	for (int i = 0; i < 200; i++) {
		enum mf_codec codec;
		int level;
		snap_adapt_next(&a, 0, 2, &codec, &level);
		assert_int_equal(codec, MF_CODEC_ZSTD);
		assert_true(level <= 3 && level != 0);
	}
	assert_int_equal(a.rung, 0);
}

static void test_ladder_high_ceiling(void **state)
{
	(void)state;
	struct snap_adapt a;
	snap_adapt_init(&a, MF_CODEC_ZSTD, 19, true);
	int want = 18;
	for (int i = 0; i < 18; i++, want--) {
		enum mf_codec codec;
		int level;
		snap_adapt_next(&a, 4, 4, &codec, &level);
		assert_int_equal(level, want > 0 ? want : -1);
	}
	/* every rung is a level zstd accepts, raw the last */
	for (unsigned r = 0; r < snap_adapt_rungs(&a); r++) {
		enum mf_codec codec;
		int level;
		snap_adapt_rung(&a, r, &codec, &level);
		assert_true(snap_chunk_level_valid(codec, level));
		assert_int_equal(codec,
				 r + 1 == snap_adapt_rungs(&a) ? MF_CODEC_NONE
							       : MF_CODEC_ZSTD);
	}
}

/* Pinned, snappy and none never move, whatever the backlog. */
static void test_ladder_fixed(void **state)
{
	(void)state;
	static const struct {
		enum mf_codec codec;
		int level;
		bool on;
	} cases[] = {
	    {MF_CODEC_ZSTD, 7, false},
	    {MF_CODEC_SNAPPY, 0, true},
	    {MF_CODEC_NONE, 0, true},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct snap_adapt a;
		snap_adapt_init(&a, cases[c].codec, cases[c].level,
				cases[c].on);
		assert_int_equal(snap_adapt_rungs(&a), 1);
		for (unsigned i = 0; i < 40; i++) {
			enum mf_codec codec;
			int level;
			snap_adapt_next(&a, i % 2 ? 9 : 0, 1, &codec, &level);
			assert_int_equal(codec, cases[c].codec);
			assert_int_equal(level, cases[c].level);
		}
	}
}

/* ---- the writer ---- */

struct probe {
	unsigned calls;
	uint32_t behind_from, behind_to; /* chunks [from, to) are behind */
};

static unsigned probe_fn(void *arg, uint32_t chunk, unsigned workers)
{
	struct probe *p = arg;
	assert_int_equal(chunk, p->calls); /* asked once a chunk, in order */
	p->calls++;
	return chunk >= p->behind_from && chunk < p->behind_to ? workers : 0;
}

/* Writes src (len) as shard 0 with cfg and the probe; opens it. */
static struct mf_shard_reader *write_probed(struct tu_store *s,
					    const struct mf_codec_cfg *cfg,
					    struct probe *p, const uint8_t *src,
					    size_t len)
{
	assert_int_equal(mf_store_run_create(s->st, TU_FP, TU_RUN), 0);
	struct mf_shard_writer *w;
	assert_int_equal(mf_shard_writer_open(s->st, TU_FP, TU_RUN, 0, cfg, &w),
			 0);
	assert_int_equal(mf_shard_writer_set_pressure(w, probe_fn, p), 0);
	for (size_t off = 0; off < len; off += 3000) {
		size_t n = len - off < 3000 ? len - off : 3000;
		assert_int_equal(mf_shard_writer_write(w, src + off, n), 0);
	}
	/* too late: chunks were handed over */
	assert_int_equal(mf_shard_writer_set_pressure(w, NULL, NULL), -EBUSY);
	assert_int_equal(mf_shard_writer_commit(w, NULL), 0);
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(s->st, TU_FP, TU_RUN, 0, &r), 0);
	uint8_t *got = malloc(len + 1);
	assert_int_equal(mf_shard_reader_pread(r, got, len + 1, 0),
			 (ssize_t)len);
	assert_memory_equal(got, src, len);
	free(got);
	assert_int_equal(mf_shard_reader_verify(r, NULL), 0);
	return r;
}

static void assert_levels(struct mf_shard_reader *r, const int *want, size_t n)
{
	struct mf_shard_stat st;
	mf_shard_reader_stat(r, &st);
	assert_int_equal(st.chunks, n);
	assert_int_equal(st.codec, MF_CODEC_ZSTD);
	for (uint32_t i = 0; i < n; i++) {
		enum mf_codec codec;
		int level;
		assert_int_equal(
		    mf_shard_reader_chunk_codec(r, i, &codec, &level), 0);
		bool raw = want[i] == RAW_MARK;
		assert_int_equal(codec, raw ? MF_CODEC_NONE : MF_CODEC_ZSTD);
		assert_int_equal(level, raw ? 0 : want[i]);
	}
}

/* Behind for chunks 2..10, keeping up after: the index records each
 * chunk's level, raw chunks are stored as they are, and the bytes read
 * back, on one worker or three. */
static void test_writer_behind(void **state)
{
	struct tu_store *s = *state;
	size_t len = 20 * CS + 123;
	uint8_t *src = malloc(len);
	tu_fill(src, len, 3, true);
	/* chunk 0 finds a worker free: the ceiling; chunks 1 to 10 go a
	 * rung down each, to raw; then a rung up every 4 chunks */
	static const int want[21] = {
	    3,	 2,	   1,	     -1,       -2,	 -4,	   -8,
	    -16, RAW_MARK, RAW_MARK, RAW_MARK, RAW_MARK, RAW_MARK, RAW_MARK,
	    -16, -16,	   -16,	     -16,      -8,	 -8,	   -8};
	for (unsigned threads = 1; threads <= 3; threads += 2) {
		struct probe p = {.behind_from = 1, .behind_to = 11};
		struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, threads, true};
		struct mf_shard_reader *r = write_probed(s, &cfg, &p, src, len);
		assert_int_equal(p.calls, 21);
		assert_levels(r, want, 21);
		mf_shard_reader_close(r);
		assert_int_equal(mf_store_run_remove(s->st, TU_FP, TU_RUN), 0);
	}
	free(src);
}

/* compression_adapt: false: every chunk at the ceiling, the hook never
 * asked. */
static void test_writer_pinned(void **state)
{
	struct tu_store *s = *state;
	size_t len = 9 * CS;
	uint8_t *src = malloc(len);
	tu_fill(src, len, 4, true);
	struct probe p = {.behind_from = 0, .behind_to = 100};
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 5, CS, 2, false};
	struct mf_shard_reader *r = write_probed(s, &cfg, &p, src, len);
	assert_int_equal(p.calls, 0);
	static const int want[9] = {5, 5, 5, 5, 5, 5, 5, 5, 5};
	assert_levels(r, want, 9);
	mf_shard_reader_close(r);
	free(src);
}

/* The writer's own measure: whatever it decides, every chunk is within
 * the ladder and the shard reads back. */
static void test_writer_measured(void **state)
{
	struct tu_store *s = *state;
	size_t len = 64 * CS + 5;
	uint8_t *src = malloc(len);
	tu_fill(src, len, 5, true);
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 0, true};
	struct mf_shard_stat ws;
	assert_int_equal(tu_write_shard(s->st, 0, &cfg, src, len, &ws), 0);
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(s->st, TU_FP, TU_RUN, 0, &r), 0);
	for (uint32_t i = 0; i < ws.chunks; i++) {
		enum mf_codec codec;
		int level;
		assert_int_equal(
		    mf_shard_reader_chunk_codec(r, i, &codec, &level), 0);
		assert_true(codec == MF_CODEC_NONE ||
			    (codec == MF_CODEC_ZSTD && level <= 3 &&
			     level >= -16 && level != 0));
	}
	uint8_t *got = malloc(len);
	assert_int_equal(mf_shard_reader_pread(r, got, len, 0), (ssize_t)len);
	assert_memory_equal(got, src, len);
	free(got);
	mf_shard_reader_close(r);
	free(src);
}

static void test_pressure_args(void **state)
{
	struct tu_store *s = *state;
	assert_int_equal(mf_shard_writer_set_pressure(NULL, probe_fn, NULL),
			 -EINVAL);
	assert_int_equal(mf_store_run_create(s->st, TU_FP, TU_RUN), 0);
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, CS, 1, true};
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(s->st, TU_FP, TU_RUN, 0, &cfg, &w), 0);
	assert_int_equal(mf_shard_writer_write(w, "x", 1), 0);
	assert_int_equal(mf_shard_writer_set_pressure(w, probe_fn, NULL),
			 -EBUSY);
	mf_shard_writer_abort(w);
}

/* threads 0: as many as the cores the process may run on. */
static void test_cores(void **state)
{
	(void)state;
	cpu_set_t old, one;
	assert_int_equal(sched_getaffinity(0, sizeof(old), &old), 0);
	assert_int_equal(snap_cores_available(), (unsigned)CPU_COUNT(&old));
	int first = 0;
	while (!CPU_ISSET(first, &old))
		first++;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	assert_int_equal(snap_cores_available(), 1);
	assert_int_equal(sched_setaffinity(0, sizeof(old), &old), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ladder_down_and_up),
	    cmocka_unit_test(test_ladder_high_ceiling),
	    cmocka_unit_test(test_ladder_fixed),
	    cmocka_unit_test(test_cores),
	    cmocka_unit_test_setup_teardown(test_writer_behind, tu_store_setup,
					    tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_writer_pinned, tu_store_setup,
					    tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_writer_measured,
					    tu_store_setup, tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_pressure_args, tu_store_setup,
					    tu_store_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
