/*
 * mf_testlib.c - the fixtures of mf_testlib.h.
 */
#include "mf_testlib.h"

#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

void tl_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int failed;

static int rm_one(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	int rc = flag == FTW_DP ? rmdir(path) : unlink(path);
	if (rc != 0 || flag == FTW_DNR || flag == FTW_NS)
		failed = 1;
	return 0;
}

int tl_rm_rf(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0 && errno == ENOENT)
		return 0;
	failed = 0;
	int rc = nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return rc == 0 && !failed ? 0 : -1;
}
