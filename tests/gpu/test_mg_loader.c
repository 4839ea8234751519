/*
 * test_mg_loader.c - libmatgpu's loader on the CPU backend: files come back
 * in order with their exact bytes, prefetching is bounded by the count and
 * by the memory budget (asserted on the measured peaks), holding buffers
 * never deadlocks, failed files come back as their errno in their turn, a
 * directory is listed in name order, and closing early is clean.
 *
 * Not for: single loads (test_mg_load.c).
 */
#include <errno.h>
#include <sys/stat.h>
#include <time.h>

#include "mg_test_util.h"

#define STAGE 4096
#define NFILES 12

struct fixture {
	char *dir;
	char *paths[NFILES];
	size_t sizes[NFILES];
	mg_ctx *ctx;
};

static void sleep_ms(int ms)
{
	struct timespec ts = {0, ms * 1000000L};

	nanosleep(&ts, NULL);
}

/* Waits (5 s at most) until the loader has loaded n files, so that the
 * assertions on prefetching do not depend on the machine's speed. */
static void wait_loaded(mg_loader *ld, uint64_t n)
{
	struct mg_loader_stats st;

	for (int i = 0; i < 5000; i++) {
		mg_loader_stats(ld, &st);
		if (st.files_loaded >= n)
			return;
		sleep_ms(1);
	}
	fail_msg("the loader loaded %llu files, not %llu",
		 (unsigned long long)st.files_loaded, (unsigned long long)n);
}

/* NFILES files; file i has seed i + 1 and size sizes[i] (or every file
 * same_size bytes when same_size is not 0). */
static struct fixture *fixture_new(size_t same_size)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char name[32];

	assert_non_null(f);
	f->dir = mgt_tmpdir();
	for (int i = 0; i < NFILES; i++) {
		f->sizes[i] =
		    same_size ? same_size : (size_t)(i * 3 % 7) * STAGE + i;
		snprintf(name, sizeof(name), "shard-%05d.bin", i);
		f->paths[i] =
		    mgt_file(f->dir, name, f->sizes[i], (uint32_t)i + 1);
	}
	f->ctx = mgt_ctx(STAGE, 3, 2);
	return f;
}

static void fixture_free(struct fixture *f)
{
	for (int i = 0; i < NFILES; i++)
		free(f->paths[i]);
	mg_ctx_close(f->ctx);
	mgt_rmtree(f->dir);
	free(f);
}

static mg_loader *open_loader(struct fixture *f, unsigned prefetch,
			      uint64_t budget)
{
	struct mg_loader_opts o;
	mg_loader *ld = NULL;

	mg_loader_opts_init(&o);
	o.prefetch = prefetch;
	o.memory_budget = budget;
	assert_int_equal(mg_loader_open(f->ctx, (const char *const *)f->paths,
					NFILES, &o, &ld),
			 0);
	return ld;
}

static void test_order_and_bytes(void **state)
{
	struct fixture *f = fixture_new(0);
	mg_loader *ld = open_loader(f, 3, 0);
	struct mg_loader_stats st;
	mg_buf *buf = NULL;

	(void)state;
	for (int i = 0; i < NFILES; i++) {
		assert_int_equal(mg_loader_next(ld, &buf), 0);
		assert_non_null(buf);
		mgt_check(buf, f->sizes[i], (uint32_t)i + 1);
		mg_buf_release(buf);
	}
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	assert_null(buf);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	assert_null(buf);
	mg_loader_stats(ld, &st);
	assert_int_equal(st.files_loaded, NFILES);
	assert_int_equal(st.files_failed, 0);
	assert_int_equal(st.bytes_in_use, 0);
	mg_loader_close(ld);
	fixture_free(f);
}

/* A slow consumer that releases before asking again: prefetch fills the
 * budget (3 files) and never more, though the count would allow 8. The
 * consumer waits for the 3 files each time, so a loader that ignored the
 * budget would be caught loading more. */
static void test_budget_holds(void **state)
{
	struct fixture *f = fixture_new(16 * STAGE);
	const uint64_t cap = 16 * STAGE, budget = 3 * cap;
	mg_loader *ld = open_loader(f, 8, budget);
	struct mg_loader_stats st;
	struct mg_ctx_stats cs;
	mg_buf *buf = NULL;

	(void)state;
	for (int i = 0; i < NFILES; i++) {
		wait_loaded(ld, i + 3 < NFILES ? i + 3 : NFILES);
		assert_int_equal(mg_loader_next(ld, &buf), 0);
		mgt_check(buf, cap, (uint32_t)i + 1);
		mg_buf_release(buf);
	}
	mg_loader_stats(ld, &st);
	assert_true(st.peak_bytes <= budget);
	assert_int_equal(st.peak_bytes, budget); /* it did prefetch */
	assert_int_equal(st.over_budget, 0);
	assert_int_equal(st.peak_ahead, 3);
	mg_ctx_stats(f->ctx, &cs);
	assert_true(cs.peak_in_use <= budget);
	/* Steady state: buffers cycle through the pool. */
	assert_true(cs.device_allocs <= 3);
	mg_loader_close(ld);
	fixture_free(f);
}

/* Without a byte limit the count bounds prefetching. */
static void test_prefetch_count(void **state)
{
	struct fixture *f = fixture_new(2 * STAGE);
	mg_loader *ld = open_loader(f, 2, 0);
	struct mg_loader_stats st;
	mg_buf *buf = NULL;

	(void)state;
	wait_loaded(ld, 2);
	sleep_ms(20);
	mg_loader_stats(ld, &st);
	assert_int_equal(st.files_loaded, 2);
	for (int i = 0; i < NFILES; i++) {
		wait_loaded(ld, i + 2 < NFILES ? i + 2 : NFILES);
		assert_int_equal(mg_loader_next(ld, &buf), 0);
		mgt_check(buf, 2 * STAGE, (uint32_t)i + 1);
		mg_buf_release(buf);
	}
	mg_loader_stats(ld, &st);
	assert_int_equal(st.peak_ahead, 2);
	mg_loader_close(ld);
	fixture_free(f);
}

/* prefetch 0 loads on demand only. */
static void test_no_prefetch(void **state)
{
	struct fixture *f = fixture_new(STAGE);
	mg_loader *ld = open_loader(f, 0, 0);
	struct mg_loader_stats st;
	mg_buf *buf = NULL;

	(void)state;
	sleep_ms(20);
	mg_loader_stats(ld, &st);
	assert_int_equal(st.files_loaded, 0);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	mgt_check(buf, STAGE, 1);
	mg_buf_release(buf);
	sleep_ms(20);
	mg_loader_stats(ld, &st);
	assert_int_equal(st.files_loaded, 1);
	assert_int_equal(st.peak_ahead, 1);
	mg_loader_close(ld);
	fixture_free(f);
}

/* A caller holding every buffer: the budget stops prefetching, and each
 * file it asks for still comes (over budget, counted). */
static void test_holding_buffers(void **state)
{
	struct fixture *f = fixture_new(4 * STAGE);
	mg_loader *ld = open_loader(f, 4, 2 * 4 * STAGE);
	struct mg_loader_stats st;
	mg_buf *held[NFILES];

	(void)state;
	for (int i = 0; i < NFILES; i++) {
		assert_int_equal(mg_loader_next(ld, &held[i]), 0);
		mgt_check(held[i], 4 * STAGE, (uint32_t)i + 1);
	}
	mg_loader_stats(ld, &st);
	assert_int_equal(st.over_budget, NFILES - 2);
	assert_int_equal(st.bytes_in_use, NFILES * 4 * STAGE);
	mg_loader_close(ld);
	/* Released after the loader is gone: accounting outlives it. */
	for (int i = 0; i < NFILES; i++) {
		mgt_check(held[i], 4 * STAGE, (uint32_t)i + 1);
		mg_buf_release(held[i]);
	}
	fixture_free(f);
}

/* A file larger than the whole budget is loaded alone. */
static void test_file_over_budget(void **state)
{
	struct fixture *f = fixture_new(0);
	char *big = mgt_file(f->dir, "big", 40 * STAGE, 99);
	const char *paths[] = {f->paths[1], big, f->paths[2]};
	struct mg_loader_opts o = {2, 16 * STAGE};
	struct mg_loader_stats st;
	mg_loader *ld = NULL;
	mg_buf *buf = NULL;

	(void)state;
	assert_int_equal(mg_loader_open(f->ctx, paths, 3, &o, &ld), 0);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	mgt_check(buf, f->sizes[1], 2);
	mg_buf_release(buf);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	mgt_check(buf, 40 * STAGE, 99);
	mg_buf_release(buf);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	mgt_check(buf, f->sizes[2], 3);
	mg_buf_release(buf);
	mg_loader_stats(ld, &st);
	assert_int_equal(st.over_budget, 1);
	mg_loader_close(ld);
	free(big);
	fixture_free(f);
}

/* Failed files come back in their turn; the others still load. */
static void test_errors_in_turn(void **state)
{
	struct fixture *f = fixture_new(0);
	char *missing = mgt_path(f->dir, "missing");
	const char *paths[] = {f->paths[0], missing, f->dir, f->paths[3]};
	struct mg_loader_stats st;
	mg_loader *ld = NULL;
	mg_buf *buf = NULL;

	(void)state;
	assert_int_equal(mg_loader_open(f->ctx, paths, 4, NULL, &ld), 0);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	mgt_check(buf, f->sizes[0], 1);
	mg_buf_release(buf);
	buf = NULL;
	assert_int_equal(mg_loader_next(ld, &buf), -ENOENT);
	assert_null(buf);
	assert_int_equal(mg_loader_next(ld, &buf), -EISDIR);
	assert_null(buf);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	mgt_check(buf, f->sizes[3], 4);
	mg_buf_release(buf);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	assert_null(buf);
	mg_loader_stats(ld, &st);
	assert_int_equal(st.files_loaded, 2);
	assert_int_equal(st.files_failed, 2);
	mg_loader_close(ld);
	free(missing);
	fixture_free(f);
}

static void test_directory(void **state)
{
	struct fixture *f = fixture_new(0);
	char *hidden = mgt_file(f->dir, ".hidden", 10, 1);
	char *sub = mgt_path(f->dir, "subdir");
	mg_loader *ld = NULL;
	mg_buf *buf = NULL;

	(void)state;
	assert_int_equal(mkdir(sub, 0755), 0);
	assert_int_equal(mg_loader_open_dir(f->ctx, f->dir, NULL, &ld), 0);
	for (int i = 0; i < NFILES; i++) {
		assert_int_equal(mg_loader_next(ld, &buf), 0);
		mgt_check(buf, f->sizes[i], (uint32_t)i + 1);
		mg_buf_release(buf);
	}
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	assert_null(buf);
	mg_loader_close(ld);
	assert_int_equal(mg_loader_open_dir(f->ctx, hidden, NULL, &ld),
			 -ENOTDIR);
	free(sub);
	assert_int_equal(
	    mg_loader_open_dir(f->ctx, "/nonexistent/mg", NULL, &ld), -ENOENT);
	free(hidden);
	fixture_free(f);
}

/* Closing with files prefetched or being loaded frees them; a buffer
 * handed out earlier stays valid. */
static void test_close_early(void **state)
{
	struct fixture *f = fixture_new(64 * STAGE);
	mg_loader *ld = open_loader(f, 4, 0);
	struct mg_ctx_stats cs;
	mg_buf *buf = NULL;

	(void)state;
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	sleep_ms(5);
	mg_loader_close(ld);
	mgt_check(buf, 64 * STAGE, 1);
	mg_buf_release(buf);
	mg_ctx_stats(f->ctx, &cs);
	assert_int_equal(cs.bytes_in_use, 0);
	mg_loader_close(NULL);
	fixture_free(f);
}

static void test_empty_list(void **state)
{
	mg_ctx *ctx = mgt_ctx(STAGE, 2, 1);
	mg_loader *ld = NULL;
	mg_buf *buf = (mg_buf *)&ld;

	(void)state;
	assert_int_equal(mg_loader_open(ctx, NULL, 0, NULL, &ld), 0);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	assert_null(buf);
	mg_loader_close(ld);
	mg_ctx_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_order_and_bytes),
	    cmocka_unit_test(test_budget_holds),
	    cmocka_unit_test(test_prefetch_count),
	    cmocka_unit_test(test_no_prefetch),
	    cmocka_unit_test(test_holding_buffers),
	    cmocka_unit_test(test_file_over_budget),
	    cmocka_unit_test(test_errors_in_turn),
	    cmocka_unit_test(test_directory),
	    cmocka_unit_test(test_close_early),
	    cmocka_unit_test(test_empty_list),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
