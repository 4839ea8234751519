/*
 * test_util_buf.c - the buffers a forking process writes over and over
 * (mf_buf_alloc): every byte asked for is usable, big ones are their own
 * page-aligned mapping (2 MiB-aligned from 2 MiB) that a forked child
 * does not have, so the parent's writes after a fork never fault to copy
 * them, kept when freed for the next of the same size; small ones come
 * from malloc and the child has them as usual.
 *
 * Not for: who uses them (the chunk cache, the shard writer, the pump of
 * a stage's output).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_util.h"

/* In a forked child: 0 when [p, p + len) is mapped there, 1 when none of
 * it is (mincore fails with ENOMEM on an unmapped range), 2 otherwise. */
static int mapped_in_child(void *p, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);
	size_t n = ((uintptr_t)p + len - a + page - 1) / page;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		unsigned char *vec = malloc(n);
		int rc = mincore((void *)a, n * page, vec);
		_exit(rc == 0 ? 0 : errno == ENOMEM ? 1 : 2);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void fill_and_check(uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 31 + 7);
	for (size_t i = 0; i < len; i++)
		assert_int_equal(p[i], (uint8_t)(i * 31 + 7));
}

static void test_big_left_out_of_children(void **state)
{
	(void)state;
	const size_t sizes[] = {MF_BUF_MAP, MF_BUF_MAP + 1, (1u << 20) + 5,
				(2u << 20), (4u << 20) + 4096};
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t len = sizes[k], cap = 0;
		uint8_t *p = mf_buf_alloc(len, &cap);
		assert_non_null(p);
		assert_true(cap >= len);
		assert_int_equal((uintptr_t)p % page, 0);
		if (len >= (2u << 20))
			assert_int_equal((uintptr_t)p % (2u << 20), 0);
		fill_and_check(p, cap);
		assert_int_equal(mapped_in_child(p, cap), 1);
		/* the parent still has every byte after the fork */
		fill_and_check(p, cap);
		mf_buf_free(p, cap);
	}
}

static void test_small_from_malloc(void **state)
{
	(void)state;
	const size_t sizes[] = {0, 1, 4096, MF_BUF_MAP - 1};
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t cap = 0;
		uint8_t *p = mf_buf_alloc(sizes[k], &cap);
		assert_non_null(p);
		assert_true(cap >= sizes[k] && cap >= 1);
		assert_true(cap < MF_BUF_MAP);
		fill_and_check(p, cap);
		assert_int_equal(mapped_in_child(p, cap), 0);
		mf_buf_free(p, cap);
	}
	mf_buf_free(NULL, 0);
	mf_buf_free(NULL, 4u << 20);
}

static void test_too_big_refused(void **state)
{
	(void)state;
	size_t cap = 7;
	assert_null(mf_buf_alloc(SIZE_MAX - 4096, &cap));
	assert_int_equal(cap, 7); /* untouched on failure */
}

/* A mapping freed is kept for the next of its size (its pages in
 * already), never for one that wants it more aligned, nor beyond 64 MiB;
 * a forked child, which has none of them, gets new ones that work. */
static void test_freed_kept_for_the_same_size(void **state)
{
	(void)state;
	size_t cap, cap2;
	uint8_t *p = mf_buf_alloc(3u << 20, &cap);
	assert_non_null(p);
	fill_and_check(p, cap);
	mf_buf_free(p, cap);
	uint8_t *q = mf_buf_alloc(3u << 20, &cap2);
	assert_ptr_equal(q, p);
	assert_int_equal(cap2, cap);
	/* the child has no kept mapping: it maps a new one */
	mf_buf_free(q, cap2);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		size_t c;
		uint8_t *r = mf_buf_alloc(3u << 20, &c);
		if (!r || r == p)
			_exit(1);
		memset(r, 1, c);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_ptr_equal(mf_buf_alloc(3u << 20, &cap2), p);
	mf_buf_free(p, cap2);
	/* a page-aligned 2 MiB mapping is not handed out for 2 MiB, which
	 * wants 2 MiB alignment */
	uint8_t *a = mf_buf_alloc((2u << 20) - 1, &cap);
	assert_int_equal(cap, 2u << 20);
	bool huge = ((uintptr_t)a & ((2u << 20) - 1)) == 0;
	mf_buf_free(a, cap);
	uint8_t *b = mf_buf_alloc(2u << 20, &cap2);
	assert_int_equal((uintptr_t)b & ((2u << 20) - 1), 0);
	assert_true(huge || b != a);
	mf_buf_free(b, cap2);
	/* at most 64 MiB kept: of 80 MiB freed, some is unmapped */
	uint8_t *v[20];
	for (int i = 0; i < 20; i++)
		assert_non_null(v[i] = mf_buf_alloc(4u << 20, &cap));
	for (int i = 0; i < 20; i++)
		mf_buf_free(v[i], cap);
	int again = 0;
	for (int i = 0; i < 20; i++) {
		uint8_t *x = mf_buf_alloc(4u << 20, &cap);
		for (int j = 0; j < 20; j++)
			again += x == v[j];
		v[i] = x;
	}
	assert_true(again <= 16);
	for (int i = 0; i < 20; i++)
		mf_buf_free(v[i], cap);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_big_left_out_of_children),
	    cmocka_unit_test(test_small_from_malloc),
	    cmocka_unit_test(test_too_big_refused),
	    cmocka_unit_test(test_freed_kept_for_the_same_size),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
