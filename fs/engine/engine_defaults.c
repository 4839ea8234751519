/*
 * engine_defaults.c - where matfs keeps things when nobody says: the
 * default store folder, shared by the daemon and matctl so that both find
 * the same store.
 *
 * Not for: anything that needs an open engine.
 */
#include "mf_engine.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Without $HOME (a daemon started by init), the home of the password
 * entry: never /tmp, where another user could make the folder first. */
char *mf_engine_default_store(void)
{
	const char *x = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char *s = NULL;
	int n = -1;
	if (x && *x) {
		n = asprintf(&s, "%s/matfs", x);
	} else if (home && *home) {
		n = asprintf(&s, "%s/.cache/matfs", home);
	} else {
		struct passwd pw, *found = NULL;
		char buf[16384];
		if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &found) == 0 &&
		    found && found->pw_dir[0] == '/')
			n = asprintf(&s, "%s/.cache/matfs", found->pw_dir);
	}
	return n < 0 ? NULL : s;
}
