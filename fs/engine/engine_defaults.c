/*
 * engine_defaults.c - where matfs keeps things when nobody says: the
 * default store folder, shared by the daemon and matctl so that both find
 * the same store; and whether a catalog location is one several hosts
 * share (their daemons then keep a log file each).
 *
 * Not for: anything that needs an open engine.
 */
#include "mf_catalog.h"
#include "mf_engine.h"
#include "mf_util.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

bool mf_engine_catalog_shared(const char *location)
{
	return location && mf_catalog_location_shared(location);
}

char *mf_engine_default_log(const char *store, const char *catalog)
{
	char h[256] = "", *s = NULL;
	/* hosts sharing a store on a shared catalog keep a file each: an
	 * append on a network filesystem is not atomic across clients */
	if (mf_engine_catalog_shared(catalog))
		mf_hostname(h, sizeof(h));
	for (char *p = h; *p; p++)
		if (!strchr("._-", *p) && !(*p >= '0' && *p <= '9') &&
		    !(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z'))
			*p = '_';
	if (asprintf(&s, "%s/matfs%s%s.log", store, h[0] ? "-" : "", h) < 0)
		return NULL;
	return s;
}
