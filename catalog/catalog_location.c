/*
 * catalog_location.c - the syntax of a catalog location, in one place: a
 * plain path or "sqlite:PATH" names the SQLite backend, "postgresql://",
 * "postgres://" or "postgresql:CONNINFO" the PostgreSQL one; which
 * backend a location names, whether it carries a password, whether it is
 * shared by several hosts, and how messages show it.
 *
 * Not for: opening or checking a catalog (catalog.c) or the backends' own
 * connection strings (pg_conn.c masks a password).
 */
#include "catalog_backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct mf_catalog_backend *const backends[] = {
    &cat_sqlite_backend,
    &cat_pg_backend,
};

/* Whether location is "scheme://..." */
static bool is_uri_of(const char *location, const char *scheme)
{
	size_t n = scheme ? strlen(scheme) : 0;
	return n && strncmp(location, scheme, n) == 0 &&
	    strncmp(location + n, "://", 3) == 0;
}

/* The length of the scheme of "SCHEME://...", RFC 3986's letters, or 0
 * when location does not start with one. */
static size_t uri_scheme_len(const char *location)
{
	size_t i = 0;
	if (!((location[0] >= 'a' && location[0] <= 'z') ||
	      (location[0] >= 'A' && location[0] <= 'Z')))
		return 0;
	while (location[i] &&
	       (strchr("+-.", location[i]) ||
		(location[i] >= '0' && location[i] <= '9') ||
		(location[i] >= 'a' && location[i] <= 'z') ||
		(location[i] >= 'A' && location[i] <= 'Z')))
		i++;
	return strncmp(location + i, "://", 3) == 0 ? i : 0;
}

int cat_backend_find(const char *location, const struct mf_catalog_backend **be,
		     const char **target)
{
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		if (backends[i]->alias &&
		    (is_uri_of(location, backends[i]->name) ||
		     is_uri_of(location, backends[i]->alias))) {
			*be = backends[i];
			*target = location; /* the URI, whole */
			return 0;
		}
	}
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		size_t n = strlen(backends[i]->name);
		if (strncmp(location, backends[i]->name, n) == 0 &&
		    location[n] == ':') {
			*be = backends[i];
			*target = location + n + 1;
			return **target ? 0 : -EINVAL;
		}
	}
	if (uri_scheme_len(location) > 0)
		return -EPROTONOSUPPORT;
	*be = &cat_sqlite_backend; /* a plain path */
	*target = location;
	return *location ? 0 : -EINVAL;
}

bool mf_catalog_location_has_password(const char *location)
{
	const struct mf_catalog_backend *be;
	const char *target;
	return location && cat_backend_find(location, &be, &target) == 0 &&
	    be == &cat_pg_backend && cat_pg_has_password(target);
}

bool mf_catalog_location_shared(const char *location)
{
	const struct mf_catalog_backend *be;
	const char *target;
	return location && cat_backend_find(location, &be, &target) == 0 &&
	    be == &cat_pg_backend;
}

void mf_catalog_location_shown(const char *location, char *buf, size_t len)
{
	const struct mf_catalog_backend *be;
	const char *target;
	if (len == 0)
		return;
	if (!location) {
		buf[0] = '\0';
		return;
	}
	if (cat_backend_find(location, &be, &target) == 0 &&
	    be == &cat_pg_backend) {
		/* what names the backend, then the target masked */
		size_t pre = (size_t)(target - location);
		if (pre >= len)
			pre = len - 1;
		memcpy(buf, location, pre);
		cat_pg_shown(target, buf + pre, len - pre);
		return;
	}
	snprintf(buf, len, "%s", location);
}

/* The target of a location that names the SQLite backend by its prefix
 * ("sqlite:PATH"), else NULL. */
static const char *sqlite_named(const char *location)
{
	size_t n = strlen(cat_sqlite_backend.name);
	return strncmp(location, cat_sqlite_backend.name, n) == 0 &&
		location[n] == ':'
	    ? location + n + 1
	    : NULL;
}

int mf_catalog_location_of_file(const char *path, char **out)
{
	if (asprintf(out, "%s:%s", cat_sqlite_backend.name, path) < 0) {
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

void mf_catalog_location_told(const char *location, char *buf, size_t len)
{
	const char *path = location ? sqlite_named(location) : NULL;
	if (path && len > 0)
		snprintf(buf, len, "%s", path);
	else
		mf_catalog_location_shown(location, buf, len);
}
