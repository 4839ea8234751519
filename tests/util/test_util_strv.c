/*
 * test_util_strv.c - the string vector of util/: strings pushed come back
 * in order past every growth of the array, a push owns its string also
 * when it fails (a NULL string, as a failed strdup gives, is -ENOMEM and
 * leaves the vector as it was), release empties it for reuse, and
 * mf_strv_free takes a vector handed out, or NULL.
 *
 * Not for: who uses it (tests/pipeline, tests/snapshot).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_util.h"

static void test_push_in_order_past_growth(void **state)
{
	(void)state;
	struct mf_strv a = {0};
	char want[32];
	for (int i = 0; i < 100; i++) {
		snprintf(want, sizeof(want), "s%d", i);
		assert_int_equal(mf_strv_push(&a, strdup(want)), 0);
		assert_int_equal(a.n, (size_t)i + 1);
		assert_true(a.cap >= a.n);
	}
	for (int i = 0; i < 100; i++) {
		snprintf(want, sizeof(want), "s%d", i);
		assert_string_equal(a.v[i], want);
	}
	mf_strv_release(&a);
	assert_null(a.v);
	assert_int_equal(a.n, 0);
	assert_int_equal(a.cap, 0);
}

static void test_null_is_enomem_and_changes_nothing(void **state)
{
	(void)state;
	struct mf_strv a = {0};
	assert_int_equal(mf_strv_push(&a, NULL), -ENOMEM);
	assert_null(a.v);
	assert_int_equal(a.n, 0);
	assert_int_equal(mf_strv_push(&a, strdup("one")), 0);
	assert_int_equal(mf_strv_push(&a, NULL), -ENOMEM);
	assert_int_equal(a.n, 1);
	assert_string_equal(a.v[0], "one");
	mf_strv_release(&a);
}

static void test_reuse_after_release(void **state)
{
	(void)state;
	struct mf_strv a = {0};
	assert_int_equal(mf_strv_push(&a, strdup("x")), 0);
	mf_strv_release(&a);
	mf_strv_release(&a); /* twice: still empty */
	assert_int_equal(mf_strv_push(&a, strdup("y")), 0);
	assert_int_equal(a.n, 1);
	assert_string_equal(a.v[0], "y");
	mf_strv_release(&a);
}

/* The array handed out is freed with mf_strv_free; NULL does nothing. */
static void test_handed_out(void **state)
{
	(void)state;
	struct mf_strv a = {0};
	assert_int_equal(mf_strv_push(&a, strdup("a")), 0);
	assert_int_equal(mf_strv_push(&a, strdup("b")), 0);
	char **v = a.v;
	size_t n = a.n;
	a = (struct mf_strv){0};
	assert_int_equal(n, 2);
	assert_string_equal(v[1], "b");
	mf_strv_free(v, n);
	mf_strv_free(NULL, 3);
	mf_strv_release(&a); /* empty: nothing */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_push_in_order_past_growth),
	    cmocka_unit_test(test_null_is_enomem_and_changes_nothing),
	    cmocka_unit_test(test_reuse_after_release),
	    cmocka_unit_test(test_handed_out),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
