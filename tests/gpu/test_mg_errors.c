/*
 * test_mg_errors.c - what libmatgpu returns when things go wrong: missing
 * files, directories, other file types, bad descriptors, bad options and
 * devices, and the CUDA backend's answers on a machine without a GPU (it
 * is compiled and linked against the CUDA runtime when MG_TEST_CUDA_BUILT).
 *
 * Not for: successful loads (test_mg_load.c, test_mg_loader.c).
 */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mg_test_util.h"

static void test_missing_and_directory(void **state)
{
	char *dir = mgt_tmpdir();
	char *missing = mgt_path(dir, "missing");
	mg_ctx *ctx = mgt_ctx(4096, 2, 1);
	mg_buf *buf = NULL;

	(void)state;
	assert_int_equal(mg_load(ctx, missing, &buf), -ENOENT);
	assert_int_equal(mg_load(ctx, dir, &buf), -EISDIR);
	assert_int_equal(mg_load(ctx, "", &buf), -ENOENT);
	assert_int_equal(mg_load(ctx, NULL, &buf), -EINVAL);
	assert_null(buf);
	free(missing);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

static void test_not_regular(void **state)
{
	char *dir = mgt_tmpdir();
	char *fifo = mgt_path(dir, "fifo");
	mg_ctx *ctx = mgt_ctx(4096, 2, 1);
	mg_buf *buf = NULL;
	int fds[2], dfd;

	(void)state;
	assert_int_equal(mkfifo(fifo, 0600), 0);
	/* O_RDWR so that opening the FIFO does not wait for a writer. */
	dfd = open(fifo, O_RDWR);
	assert_true(dfd >= 0);
	assert_int_equal(mg_load_fd(ctx, dfd, &buf), -EINVAL);
	close(dfd);
	assert_int_equal(pipe(fds), 0);
	assert_int_equal(mg_load_fd(ctx, fds[0], &buf), -EINVAL);
	close(fds[0]);
	close(fds[1]);
	assert_int_equal(mg_load_fd(ctx, -1, &buf), -EBADF);
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_int_equal(mg_load_fd(ctx, dfd, &buf), -EISDIR);
	close(dfd);
	assert_null(buf);
	free(fifo);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

/* A FIFO nobody writes to, or a device, named by path: refused at once,
 * never waited on in open(2) (an alarm fails the test if it hangs), by
 * mg_load and by a loader's thread (whose close would then hang too). */
static void test_special_paths(void **state)
{
	char *dir = mgt_tmpdir();
	char *fifo = mgt_path(dir, "fifo");
	const char *paths[] = {fifo, "/dev/zero", "/dev/null"};
	mg_ctx *ctx = mgt_ctx(4096, 2, 1);
	mg_loader *ld = NULL;
	mg_buf *buf = NULL;

	(void)state;
	assert_int_equal(mkfifo(fifo, 0600), 0);
	alarm(20);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(mg_load(ctx, paths[i], &buf), -EINVAL);
	assert_int_equal(mg_loader_open(ctx, paths, 3, NULL, &ld), 0);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(mg_loader_next(ld, &buf), -EINVAL);
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	assert_null(buf);
	mg_loader_close(ld);
	alarm(0);
	free(fifo);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

static void expect_bad_opts(size_t staging, unsigned count, unsigned threads)
{
	struct mg_ctx_opts o;
	mg_ctx *ctx = NULL;

	mg_ctx_opts_init(&o);
	o.staging_size = staging;
	o.staging_count = count;
	o.io_threads = threads;
	assert_int_equal(mg_ctx_open(MG_DEVICE_CPU, &o, &ctx), -EINVAL);
	assert_null(ctx);
}

static void test_bad_options(void **state)
{
	mg_ctx *ctx = NULL;

	(void)state;
	expect_bad_opts(0, 2, 1);
	expect_bad_opts(4096, 1, 1);
	expect_bad_opts(4096, 65, 1);
	expect_bad_opts(4096, 2, 0);
	expect_bad_opts(4096, 64, 17);
	/* more readers than a ring of 2 can use: lowered to 1, not refused */
	struct mg_ctx_opts o;
	mg_ctx_opts_init(&o);
	o.staging_size = 4096;
	o.staging_count = 2;
	o.io_threads = 16;
	assert_int_equal(mg_ctx_open(MG_DEVICE_CPU, &o, &ctx), 0);
	char *dir = mgt_tmpdir();
	char *path = mgt_file(dir, "f", 3 * 4096 + 5, 3);
	mg_buf *buf = NULL;
	assert_int_equal(mg_load(ctx, path, &buf), 0);
	mgt_check(buf, 3 * 4096 + 5, 3);
	mg_buf_release(buf);
	mg_ctx_close(ctx);
	ctx = NULL;
	free(path);
	mgt_rmtree(dir);
	assert_int_equal(mg_ctx_open(-3, NULL, &ctx), -EINVAL);
	assert_null(ctx);
	assert_int_equal(mg_loader_open(NULL, NULL, 0, NULL, NULL), -EINVAL);
}

static void test_strerror(void **state)
{
	(void)state;
	assert_string_equal(mg_strerror(-MG_ECUDA), "CUDA error");
	assert_string_equal(mg_strerror(-ENOENT), "No such file or directory");
	assert_string_equal(mg_strerror(ENODEV), "No such device");
	assert_string_equal(mg_strerror(-123456), "Unknown error");
	assert_string_equal(mg_version(), "0.1.0");
}

/* No GPU here: device "cuda" is -ENODEV with the CUDA reason readable,
 * device "auto" falls back to the CPU backend. */
static void test_cuda_without_device(void **state)
{
	const char *name = NULL;
	mg_ctx *ctx = NULL;

	(void)state;
#ifdef MG_TEST_CUDA_BUILT
	assert_int_equal(mg_cuda_built(), 1);
#else
	assert_int_equal(mg_cuda_built(), 0);
#endif
	if (mg_device_count() > 0)
		skip(); /* test_mg_cuda covers machines with a GPU */
	mg_cuda_clear_error();
	assert_int_equal(mg_cuda_last_error(&name), 0);
	assert_string_equal(name, "cudaSuccess");
	assert_int_equal(mg_ctx_open(0, NULL, &ctx), -ENODEV);
	assert_null(ctx);
	if (mg_cuda_built()) {
		assert_int_not_equal(mg_cuda_last_error(&name), 0);
		assert_memory_equal(name, "cudaError", 9);
	}
	assert_int_equal(mg_ctx_open(MG_DEVICE_AUTO, NULL, &ctx), 0);
	assert_string_equal(mg_ctx_backend(ctx), "cpu");
	assert_int_equal(mg_ctx_device(ctx), MG_DEVICE_CPU);
	mg_ctx_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_missing_and_directory),
	    cmocka_unit_test(test_not_regular),
	    cmocka_unit_test(test_special_paths),
	    cmocka_unit_test(test_bad_options),
	    cmocka_unit_test(test_strerror),
	    cmocka_unit_test(test_cuda_without_device),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
