/*
 * engine_defaults.c - where matfs keeps things when nobody says: the
 * default store folder, shared by the daemon and matctl so that both find
 * the same store.
 *
 * Not for: anything that needs an open engine.
 */
#include "mf_engine.h"

#include <stdio.h>
#include <stdlib.h>

char *mf_engine_default_store(void)
{
	const char *x = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char *s = NULL;
	int n;
	if (x && *x)
		n = asprintf(&s, "%s/matfs", x);
	else
		n = asprintf(&s, "%s/.cache/matfs",
			     home && *home ? home : "/tmp");
	return n < 0 ? NULL : s;
}
