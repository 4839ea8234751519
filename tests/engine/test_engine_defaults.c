/*
 * test_engine_defaults.c - where the daemon and matctl look for the store
 * when none is given (mf_engine_default_store): $XDG_CACHE_HOME/matfs, an
 * empty XDG_CACHE_HOME counting as unset, else $HOME/.cache/matfs, else
 * the password entry's home/.cache/matfs: never /tmp, where another user
 * could make the folder first.
 *
 * Not for: the command lines that use it (tests/tools).
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_engine.h"

static void store_is(const char *xdg, const char *home, const char *want)
{
	if (xdg)
		assert_int_equal(setenv("XDG_CACHE_HOME", xdg, 1), 0);
	else
		assert_int_equal(unsetenv("XDG_CACHE_HOME"), 0);
	if (home)
		assert_int_equal(setenv("HOME", home, 1), 0);
	else
		assert_int_equal(unsetenv("HOME"), 0);
	char *s = mf_engine_default_store();
	assert_non_null(s);
	assert_string_equal(s, want);
	free(s);
}

static void test_default_store(void **state)
{
	(void)state;
	store_is("/x/cache", "/home/u", "/x/cache/matfs");
	store_is("", "/home/u", "/home/u/.cache/matfs");
	store_is(NULL, "/home/u", "/home/u/.cache/matfs");
	struct passwd *pw = getpwuid(geteuid());
	assert_non_null(pw);
	char want[4096];
	snprintf(want, sizeof(want), "%s/.cache/matfs", pw->pw_dir);
	store_is(NULL, "", want);
	store_is(NULL, NULL, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_default_store),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
