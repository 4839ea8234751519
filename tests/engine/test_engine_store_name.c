/*
 * test_engine_store_name.c - a store folder is a folder whatever its name:
 * a relative store named like a catalog location ("sqlite:s", "a://b")
 * keeps its catalog inside it, and fsck checks that catalog.
 *
 * Not for: catalog locations themselves (tests/catalog).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_engine.h"
#include "mf_testlib.h"

/* Opens and closes an engine on store (relative to a fresh folder), then
 * checks it: its catalog is store/catalog.db, and nothing else is made. */
static void store_named(const char *store, const char *not_made)
{
	char dir[] = "/tmp/mf-store-name-XXXXXX", cwd[4096], path[512];
	assert_non_null(mkdtemp(dir));
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(dir), 0);

	struct mf_engine_opts o = {.store_dir = store};
	struct mf_engine *e = NULL;
	char *err = NULL;
	int rc = mf_engine_open(&o, &e, &err);
	mf_engine_close(e);
	free(err);
	err = NULL;
	struct stat sb;
	snprintf(path, sizeof(path), "%s/catalog.db", store);
	int in_store = stat(path, &sb);
	int other = stat(not_made, &sb);
	uint32_t problems = 99;
	int fsck = mf_engine_fsck(&o, NULL, NULL, &problems, &err);
	free(err);

	assert_int_equal(chdir(cwd), 0);
	assert_int_equal(tl_rm_rf(dir), 0);

	assert_int_equal(rc, 0);
	assert_int_equal(in_store, 0);
	assert_int_not_equal(other, 0);
	assert_int_equal(fsck, 0);
	assert_int_equal(problems, 0);
}

static void test_store_named_like_a_backend(void **state)
{
	(void)state;
	store_named("sqlite:s", "s");
}

static void test_store_named_like_a_uri(void **state)
{
	(void)state;
	store_named("pg://h", "h");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_store_named_like_a_backend),
	    cmocka_unit_test(test_store_named_like_a_uri),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
