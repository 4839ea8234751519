/*
 * mg_test_util.h - helpers for the libmatgpu tests: temporary folders,
 * files of known pseudo-random bytes, and checking a buffer against them.
 *
 * Not for: the library itself. Everything is static inline so each test
 * executable takes what it uses.
 */
#ifndef MG_TEST_UTIL_H
#define MG_TEST_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "matgpu.h"

/* Byte i of the file made with seed: an xorshift stream, so that a piece
 * copied to the wrong offset or from the wrong file shows. */
static inline void mgt_pattern(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)(x >> 24);
	}
}

static inline char *mgt_tmpdir(void)
{
	char tmpl[] = "/tmp/mg-test-XXXXXX";

	assert_non_null(mkdtemp(tmpl));
	return strdup(tmpl);
}

static inline int mgt_rm_one(const char *path, const struct stat *st, int flag,
			     struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static inline void mgt_rmtree(char *dir)
{
	assert_int_equal(nftw(dir, mgt_rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
	free(dir);
}

static inline char *mgt_path(const char *dir, const char *name)
{
	size_t len = strlen(dir) + strlen(name) + 2;
	char *p = malloc(len);

	assert_non_null(p);
	snprintf(p, len, "%s/%s", dir, name);
	return p;
}

/* Writes size pattern bytes of seed to dir/name; returns the path. */
static inline char *mgt_file(const char *dir, const char *name, size_t size,
			     uint32_t seed)
{
	char *path = mgt_path(dir, name);
	uint8_t *data = malloc(size ? size : 1);
	int fd;

	assert_non_null(data);
	mgt_pattern(data, size, seed);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, size), (ssize_t)size);
	assert_int_equal(close(fd), 0);
	free(data);
	return path;
}

/* Asserts that buf holds exactly the size bytes of seed. */
static inline void mgt_check(const mg_buf *buf, size_t size, uint32_t seed)
{
	uint8_t *want = malloc(size ? size : 1);

	assert_non_null(want);
	mgt_pattern(want, size, seed);
	assert_int_equal(mg_buf_size(buf), size);
	assert_non_null(mg_buf_data(buf));
	assert_true(mg_buf_capacity(buf) >= size);
	if (size)
		assert_memory_equal(mg_buf_data(buf), want, size);
	free(want);
}

/* A CPU context with the given ring. */
static inline mg_ctx *mgt_ctx(size_t staging, unsigned count, unsigned threads)
{
	struct mg_ctx_opts o;
	mg_ctx *ctx = NULL;

	mg_ctx_opts_init(&o);
	o.staging_size = staging;
	o.staging_count = count;
	o.io_threads = threads;
	assert_int_equal(mg_ctx_open(MG_DEVICE_CPU, &o, &ctx), 0);
	assert_string_equal(mg_ctx_backend(ctx), "cpu");
	return ctx;
}

#endif /* MG_TEST_UTIL_H */
