/*
 * test_mg_load.c - libmatgpu's whole-file load on the CPU backend: exact
 * bytes at the sizes where the staging ring's arithmetic can go wrong
 * (0, 1, a staging buffer +-1, many buffers' worth), several ring shapes,
 * concurrent loads, descriptors, and the buffer pool's reuse.
 *
 * Not for: the loader (test_mg_loader.c), DLPack (test_mg_dlpack.c) or
 * errors (test_mg_errors.c).
 */
#include <errno.h>
#include <pthread.h>

#include "mg_test_util.h"

#define STAGE 4096

static void load_and_check(mg_ctx *ctx, const char *dir, size_t size,
			   uint32_t seed)
{
	char *path = mgt_file(dir, "f.bin", size, seed);
	mg_buf *buf = NULL;

	assert_int_equal(mg_load(ctx, path, &buf), 0);
	assert_non_null(buf);
	mgt_check(buf, size, seed);
	mg_buf_release(buf);
	free(path);
}

/* Sizes around the staging size for one ring shape. */
static void sizes_for(size_t stage, unsigned count, unsigned threads)
{
	const size_t sizes[] = {
	    0,		1,	   stage - 1,	  stage,
	    stage + 1,	2 * stage, 3 * stage + 7, 64 * stage + 123,
	    100 * stage};
	mg_ctx *ctx = mgt_ctx(stage, count, threads);
	char *dir = mgt_tmpdir();

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		load_and_check(ctx, dir, sizes[i], (uint32_t)(i + 1));
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

static void test_sizes_double_buffer(void **state)
{
	(void)state;
	sizes_for(STAGE, 2, 1);
}

static void test_sizes_ring_of_many(void **state)
{
	(void)state;
	sizes_for(STAGE, 8, 7);
}

static void test_sizes_odd_staging(void **state)
{
	(void)state;
	sizes_for(1000, 3, 2);
	sizes_for(7, 5, 4);
}

static void test_default_options(void **state)
{
	char *dir = mgt_tmpdir();
	mg_ctx *ctx = NULL;
	struct mg_ctx_stats st;

	(void)state;
	assert_int_equal(mg_ctx_open(MG_DEVICE_CPU, NULL, &ctx), 0);
	assert_int_equal(mg_ctx_device(ctx), MG_DEVICE_CPU);
	assert_int_equal(mg_ctx_dl_device(ctx).device_type, kDLCPU);
	load_and_check(ctx, dir, ((size_t)9 << 20) + 3, 77);
	mg_ctx_stats(ctx, &st);
	struct mg_ctx_opts o;
	mg_ctx_opts_init(&o);
	assert_true(o.io_threads >= 1 && o.io_threads <= 8);
	assert_int_equal(o.staging_count,
			 o.io_threads + 2 < 4 ? 4 : o.io_threads + 2);
	assert_int_equal(st.staging_bytes, (uint64_t)o.staging_count << 22);
	assert_int_equal(st.loads, 1);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

static void test_load_fd(void **state)
{
	char *dir = mgt_tmpdir();
	char *path = mgt_file(dir, "f.bin", 5 * STAGE + 5, 9);
	mg_ctx *ctx = mgt_ctx(STAGE, 2, 1);
	mg_buf *buf = NULL;
	int fd = open(path, O_RDONLY);

	(void)state;
	assert_true(fd >= 0);
	/* The descriptor's position does not matter: reads are positioned. */
	assert_int_equal(lseek(fd, 100, SEEK_SET), 100);
	assert_int_equal(mg_load_fd(ctx, fd, &buf), 0);
	mgt_check(buf, 5 * STAGE + 5, 9);
	mg_buf_release(buf);
	close(fd);
	free(path);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

/* Steady state: same-sized files loaded and released allocate once. */
static void test_pool_reuse(void **state)
{
	char *dir = mgt_tmpdir();
	char *a = mgt_file(dir, "a", 10 * STAGE, 1);
	char *b = mgt_file(dir, "b", 10 * STAGE - 100, 2);
	mg_ctx *ctx = mgt_ctx(STAGE, 2, 1);
	struct mg_ctx_stats st;
	mg_buf *buf = NULL;

	(void)state;
	for (int i = 0; i < 10; i++) {
		assert_int_equal(mg_load(ctx, i % 2 ? b : a, &buf), 0);
		mgt_check(buf, i % 2 ? 10 * STAGE - 100 : 10 * STAGE,
			  i % 2 ? 2 : 1);
		mg_buf_release(buf);
	}
	mg_ctx_stats(ctx, &st);
	assert_int_equal(st.device_allocs, 1);
	assert_int_equal(st.pool_hits, 9);
	assert_int_equal(st.loads, 10);
	assert_int_equal(st.bytes_in_use, 0);
	assert_int_equal(st.peak_in_use, 10 * STAGE);
	assert_int_equal(st.bytes_cached, 10 * STAGE);
	mg_ctx_trim(ctx);
	mg_ctx_stats(ctx, &st);
	assert_int_equal(st.bytes_cached, 0);
	assert_int_equal(st.device_frees, 1);
	assert_int_equal(st.staging_bytes, 0);
	free(a);
	free(b);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

/* Two buffers alive need two allocations; a capped pool frees. */
static void test_pool_cap(void **state)
{
	char *dir = mgt_tmpdir();
	char *a = mgt_file(dir, "a", 8 * STAGE, 1);
	struct mg_ctx_opts o;
	struct mg_ctx_stats st;
	mg_buf *b1 = NULL, *b2 = NULL;
	mg_ctx *ctx = NULL;

	(void)state;
	mg_ctx_opts_init(&o);
	o.staging_size = STAGE;
	o.pool_max_bytes = 8 * STAGE;
	assert_int_equal(mg_ctx_open(MG_DEVICE_CPU, &o, &ctx), 0);
	assert_int_equal(mg_load(ctx, a, &b1), 0);
	assert_int_equal(mg_load(ctx, a, &b2), 0);
	assert_ptr_not_equal(mg_buf_data(b1), mg_buf_data(b2));
	mg_buf_release(b1);
	mg_buf_release(b2);
	mg_ctx_stats(ctx, &st);
	assert_int_equal(st.device_allocs, 2);
	assert_int_equal(st.device_frees, 1);
	assert_int_equal(st.bytes_cached, 8 * STAGE);
	free(a);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

struct job {
	mg_ctx *ctx;
	const char *path;
	size_t size;
	uint32_t seed;
	int ok;
};

static void *load_loop(void *arg)
{
	struct job *j = arg;
	uint8_t *want = malloc(j->size);
	mg_buf *buf = NULL;

	mgt_pattern(want, j->size, j->seed);
	j->ok = 1;
	for (int i = 0; i < 20; i++) {
		if (mg_load(j->ctx, j->path, &buf) != 0 ||
		    mg_buf_size(buf) != j->size ||
		    memcmp(mg_buf_data(buf), want, j->size) != 0)
			j->ok = 0;
		mg_buf_release(buf);
	}
	free(want);
	return NULL;
}

/* One context shared by threads: each load gets its own ring. */
static void test_concurrent_loads(void **state)
{
	char *dir = mgt_tmpdir();
	mg_ctx *ctx = mgt_ctx(STAGE, 3, 2);
	struct job jobs[4];
	pthread_t th[4];
	char name[8];

	(void)state;
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		jobs[i] = (struct job){
		    ctx, mgt_file(dir, name, 17 * STAGE + i, (uint32_t)i + 40),
		    17 * STAGE + (size_t)i, (uint32_t)i + 40, 0};
		assert_int_equal(
		    pthread_create(&th[i], NULL, load_loop, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(jobs[i].ok, 1);
		free((char *)jobs[i].path);
	}
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

/* Loads beyond max_loads wait for a ring: eight threads loading at once
 * never make more than max_loads rings (pinned memory, I/O threads). */
static void test_loads_bounded(void **state)
{
	char *dir = mgt_tmpdir();
	struct mg_ctx_opts o;
	struct mg_ctx_stats st;
	struct job jobs[8];
	mg_ctx *ctx = NULL;
	pthread_t th[8];
	char name[8];

	(void)state;
	mg_ctx_opts_init(&o);
	o.staging_size = STAGE;
	o.staging_count = 3;
	o.io_threads = 2;
	o.max_loads = 2;
	assert_int_equal(mg_ctx_open(MG_DEVICE_CPU, &o, &ctx), 0);
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		jobs[i] = (struct job){
		    ctx, mgt_file(dir, name, 64 * STAGE + i, (uint32_t)i + 50),
		    64 * STAGE + (size_t)i, (uint32_t)i + 50, 0};
	}
	for (int i = 0; i < 8; i++)
		assert_int_equal(
		    pthread_create(&th[i], NULL, load_loop, &jobs[i]), 0);
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(jobs[i].ok, 1);
		free((char *)jobs[i].path);
	}
	mg_ctx_stats(ctx, &st);
	assert_true(st.staging_bytes > 0);
	assert_true(st.staging_bytes <= 2 * 3 * STAGE);
	o.max_loads = 0;
	mg_ctx_close(ctx);
	assert_int_equal(mg_ctx_open(MG_DEVICE_CPU, &o, &ctx), -EINVAL);
	mgt_rmtree(dir);
}

/* A buffer keeps its context alive after mg_ctx_close. */
static void test_buffer_outlives_context(void **state)
{
	char *dir = mgt_tmpdir();
	char *path = mgt_file(dir, "f", 3 * STAGE + 1, 5);
	mg_ctx *ctx = mgt_ctx(STAGE, 2, 1);
	mg_buf *buf = NULL, *again;

	(void)state;
	assert_int_equal(mg_load(ctx, path, &buf), 0);
	mg_ctx_close(ctx);
	again = mg_buf_ref(buf);
	assert_ptr_equal(again, buf);
	mg_buf_release(buf);
	mgt_check(again, 3 * STAGE + 1, 5);
	assert_int_equal(mg_buf_dl_device(again).device_type, kDLCPU);
	mg_buf_release(again);
	mg_buf_release(NULL);
	mg_ctx_close(NULL);
	free(path);
	mgt_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sizes_double_buffer),
	    cmocka_unit_test(test_sizes_ring_of_many),
	    cmocka_unit_test(test_sizes_odd_staging),
	    cmocka_unit_test(test_default_options),
	    cmocka_unit_test(test_load_fd),
	    cmocka_unit_test(test_pool_reuse),
	    cmocka_unit_test(test_pool_cap),
	    cmocka_unit_test(test_concurrent_loads),
	    cmocka_unit_test(test_loads_bounded),
	    cmocka_unit_test(test_buffer_outlives_context),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
