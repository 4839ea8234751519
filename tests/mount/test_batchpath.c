/*
 * test_batchpath.c - the batch tree's names (fs/fuse/fuse_batchpath.h):
 * every valid name parses to its numbers, each has one spelling (no
 * leading zeros, batch numbers padded to exactly 6 digits below 10^6),
 * the limits hold at their edges (2^63 - 1 for sizes, ranks and batch
 * numbers, 2^64 - 1 for seeds and epochs), and overflow, signs, spaces,
 * empty numbers, R >= W, W = 0, B = 0 and trailing garbage are ENOENT.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fuse_batchpath.h"

#define MAX63 "9223372036854775807"
#define OVER63 "9223372036854775808"
#define MAX64 "18446744073709551615"
#define OVER64 "18446744073709551616"

static void test_size(void **state)
{
	(void)state;
	uint64_t b = 7;
	assert_int_equal(mfs_batch_parse_size("1", &b), 0);
	assert_int_equal(b, 1);
	assert_int_equal(mfs_batch_parse_size("256", &b), 0);
	assert_int_equal(b, 256);
	assert_int_equal(mfs_batch_parse_size(MAX63, &b), 0);
	assert_true(b == MFS_BATCH_MAX);
	const char *bad[] = {"0",    "00",
			     "01",   "",
			     "+1",   "-1",
			     " 1",   "1 ",
			     "1x",   "0x10",
			     OVER63, MAX64,
			     OVER64, "99999999999999999999999999",
			     "1e3",  "１"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		b = 7;
		assert_int_equal(mfs_batch_parse_size(bad[i], &b), -ENOENT);
		assert_int_equal(b, 7);
	}
}

static void test_seed(void **state)
{
	(void)state;
	bool sh = false;
	uint64_t s = 9;
	assert_int_equal(mfs_batch_parse_seed("seed-0", &sh, &s), 0);
	assert_true(sh);
	assert_int_equal(s, 0);
	assert_int_equal(mfs_batch_parse_seed("seed-" MAX64, &sh, &s), 0);
	assert_true(sh);
	assert_true(s == UINT64_MAX);
	assert_int_equal(mfs_batch_parse_seed("seed-none", &sh, &s), 0);
	assert_false(sh);
	assert_int_equal(s, 0);
	const char *bad[] = {
	    "seed-",   "seed-00",   "seed-01",	  "seed-" OVER64, "seed--1",
	    "seed-+1", "seed-None", "seed-none ", "seed-nonex",	  "seed1",
	    "Seed-1",  "seed-1-",   "",		  "seed",	  "seed-42x"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(mfs_batch_parse_seed(bad[i], &sh, &s),
				 -ENOENT);
}

static void test_epoch(void **state)
{
	(void)state;
	uint64_t e = 5;
	assert_int_equal(mfs_batch_parse_epoch("epoch-0", &e), 0);
	assert_int_equal(e, 0);
	assert_int_equal(mfs_batch_parse_epoch("epoch-12", &e), 0);
	assert_int_equal(e, 12);
	assert_int_equal(mfs_batch_parse_epoch("epoch-" MAX64, &e), 0);
	assert_true(e == UINT64_MAX);
	const char *bad[] = {"epoch-",	   "epoch-01", "epoch-" OVER64,
			     "epoch-none", "epoch--0", "epoch-1/",
			     "epoch1",	   "epoch-1.0"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(mfs_batch_parse_epoch(bad[i], &e), -ENOENT);
}

static void test_rank(void **state)
{
	(void)state;
	uint64_t r = 1, w = 1, g = 1;
	assert_int_equal(mfs_batch_parse_rank("rank-0-of-1", &r, &w, &g), 0);
	assert_int_equal(r, 0);
	assert_int_equal(w, 1);
	assert_int_equal(g, 0);
	assert_int_equal(
	    mfs_batch_parse_rank("rank-3-of-8-from-120", &r, &w, &g), 0);
	assert_int_equal(r, 3);
	assert_int_equal(w, 8);
	assert_int_equal(g, 120);
	assert_int_equal(mfs_batch_parse_rank("rank-0-of-2-from-0", &r, &w, &g),
			 0);
	assert_int_equal(g, 0);
	/* the edges: R = W - 1 = 2^63 - 2, G = 2^63 - 1 */
	assert_int_equal(
	    mfs_batch_parse_rank("rank-9223372036854775806-of-" MAX63
				 "-from-" MAX63,
				 &r, &w, &g),
	    0);
	assert_true(r == MFS_BATCH_MAX - 1 && w == MFS_BATCH_MAX &&
		    g == MFS_BATCH_MAX);
	const char *bad[] = {"rank-1-of-1",
			     "rank-2-of-1",
			     "rank-0-of-0",
			     "rank-00-of-1",
			     "rank-0-of-01",
			     "rank-0-of-2-from-01",
			     "rank-0-of-2-from-",
			     "rank-0-of-2-from",
			     "rank-0-of-2-",
			     "rank-0-of-",
			     "rank--of-2",
			     "rank-0of-2",
			     "rank-0-of-2-to-3",
			     "rank-0-of-2-from-1-from-2",
			     "rank-0-of-" OVER63,
			     "rank-" OVER63 "-of-" MAX63,
			     "rank-0-of-2-from-" OVER63,
			     "rank-0-of-" MAX64,
			     "rank-0-of-2x",
			     "Rank-0-of-2",
			     "",
			     "rank-"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(mfs_batch_parse_rank(bad[i], &r, &w, &g),
				 -ENOENT);
}

static void test_batch(void **state)
{
	(void)state;
	uint64_t n = 3;
	assert_int_equal(mfs_batch_parse_batch("batch-000000", &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(mfs_batch_parse_batch("batch-000042", &n), 0);
	assert_int_equal(n, 42);
	assert_int_equal(mfs_batch_parse_batch("batch-999999", &n), 0);
	assert_int_equal(n, 999999);
	assert_int_equal(mfs_batch_parse_batch("batch-1000000", &n), 0);
	assert_int_equal(n, 1000000);
	assert_int_equal(mfs_batch_parse_batch("batch-" MAX63, &n), 0);
	assert_true(n == MFS_BATCH_MAX);
	const char *bad[] = {"batch-0",	      "batch-42",      "batch-00000",
			     "batch-0000000", "batch-0000042", "batch-01000000",
			     "batch-" OVER63, "batch-" MAX64,  "batch-" OVER64,
			     "batch-",	      "batch--00001",  "batch-+00001",
			     "batch-000001 ", "batch-00000a",  "batch000001",
			     "Batch-000001",  "batch-000001/", ""};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(mfs_batch_parse_batch(bad[i], &n), -ENOENT);
}

/* every name made parses back to its number, and only that spelling */
static void test_name(void **state)
{
	(void)state;
	char buf[32];
	uint64_t ns[] = {0,	 1,	  9,	     10,	   99999,
			 999999, 1000000, 123456789, MFS_BATCH_MAX};
	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
		uint64_t n = 0;
		assert_int_equal(mfs_batch_name(ns[i], buf, sizeof buf), 0);
		assert_int_equal(mfs_batch_parse_batch(buf, &n), 0);
		assert_true(n == ns[i]);
	}
	assert_int_equal(mfs_batch_name(0, buf, sizeof buf), 0);
	assert_string_equal(buf, "batch-000000");
	assert_int_equal(mfs_batch_name(MFS_BATCH_MAX, buf, sizeof buf), 0);
	assert_string_equal(buf, "batch-" MAX63);
	assert_int_equal(mfs_batch_name(MFS_BATCH_MAX + 1, buf, sizeof buf),
			 -ERANGE);
	/* "batch-000000" needs 13 bytes with its terminator */
	assert_int_equal(mfs_batch_name(0, buf, 12), -ERANGE);
	assert_int_equal(mfs_batch_name(0, buf, 13), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_size),  cmocka_unit_test(test_seed),
	    cmocka_unit_test(test_epoch), cmocka_unit_test(test_rank),
	    cmocka_unit_test(test_batch), cmocka_unit_test(test_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
