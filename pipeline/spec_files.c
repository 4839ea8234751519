/*
 * spec_files.c - the keys of a spec that name files: 'inputs' (globs
 * expanded with glob(3) relative to the spec folder, regular files only,
 * sorted by relative path, duplicates removed) and a stage's 'deps'
 * (relative paths that must be regular files under the ownership rules of
 * spec_trust.c), plus the path helpers. The loader calls them with the
 * spec owner's rights, so a glob sees what its owner sees.
 *
 * Not for: reading or hashing file contents (fingerprint.c).
 */
#include "spec_i.h"
#include "trust_i.h"

#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char *spec_join(const char *dir, const char *rel)
{
	char *out = NULL;
	size_t n = strlen(dir);
	const char *sep = n && dir[n - 1] == '/' ? "" : "/";
	if (asprintf(&out, "%s%s%s", dir, sep, rel) < 0)
		return NULL;
	return out;
}

char *spec_clean_rel(const char *rel)
{
	size_t len = strlen(rel);
	char *out = malloc(len + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	const char *p = rel;
	while (*p) {
		size_t n = strcspn(p, "/");
		bool skip = n == 0 || (n == 1 && p[0] == '.');
		if (!skip) {
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p += n;
		if (*p == '/')
			p++;
	}
	out[o] = '\0';
	return out;
}

/* dir with the characters glob(3) treats specially escaped. */
static char *glob_escape(const char *dir)
{
	char *out = malloc(2 * strlen(dir) + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (const char *p = dir; *p; p++) {
		if (strchr("*?[]\\", *p))
			out[o++] = '\\';
		out[o++] = *p;
	}
	out[o] = '\0';
	return out;
}

/* glob(3) has no user pointer for its error callback. */
static _Thread_local int glob_err;
static _Thread_local char glob_err_path[256];

static int glob_error(const char *path, int err)
{
	if (err == ENOENT || err == ENOTDIR)
		return 0; /* a folder that is not there matches nothing */
	glob_err = err;
	snprintf(glob_err_path, sizeof(glob_err_path), "%s", path);
	return 1;
}

static int glob_fail(struct spec_ctx *c, const yaml_node_t *n, int rc)
{
	if (rc == GLOB_NOSPACE)
		return -ENOMEM;
	const char *dir = c->spec->dir;
	const char *shown = glob_err_path;
	size_t dl = strlen(dir);
	if (!strncmp(shown, dir, dl) && shown[dl] == '/')
		shown += dl + 1;
	return spec_fail(c, n, "'inputs': cannot read '%s': %s", shown,
			 strerror(glob_err));
}

/* Appends the regular files that pattern matches to acc, as clean paths
 * relative to the spec folder; counts them in *found. */
static int add_matches(struct spec_ctx *c, const yaml_node_t *n,
		       const glob_t *g, struct mf_strv *acc, size_t *found)
{
	const char *dir = c->spec->dir;
	size_t dl = strlen(dir);
	size_t skip = dir[dl - 1] == '/' ? dl : dl + 1;
	for (size_t i = 0; i < g->gl_pathc; i++) {
		const char *path = g->gl_pathv[i];
		struct stat st;
		if (strncmp(path, dir, dl) != 0 || strlen(path) < skip)
			continue; /* cannot happen: every match has our prefix */
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (acc->n >= MF_SPEC_MATCHES_MAX)
			return spec_fail(c, n,
					 "'inputs': more than %d matched files",
					 MF_SPEC_MATCHES_MAX);
		/* MATFS_INPUTS lists one path per line */
		if (strchr(path + skip, '\n'))
			return spec_fail(c, n,
					 "'inputs': the name of a matched file "
					 "holds a newline: rename it");
		int rc = mf_strv_push(acc, spec_clean_rel(path + skip));
		if (rc)
			return rc;
		(*found)++;
	}
	return 0;
}

/* A path component that is a pattern matching "." or ".." (".*", ".?*")
 * walks up and across the tree, and each one doubles glob(3)'s work; only
 * the literal "." and ".." may name those. Returns the offending
 * component's length, or 0. */
static size_t dot_pattern(const char *pattern, const char **at)
{
	for (const char *p = pattern; *p;) {
		size_t len = strcspn(p, "/");
		char part[256];
		if (len < sizeof(part)) {
			memcpy(part, p, len);
			part[len] = '\0';
			bool literal =
			    !strcmp(part, ".") || !strcmp(part, "..");
			if (!literal &&
			    (fnmatch(part, ".", FNM_PERIOD) == 0 ||
			     fnmatch(part, "..", FNM_PERIOD) == 0)) {
				*at = p;
				return len;
			}
		}
		p += len + (p[len] == '/');
	}
	return 0;
}

static int expand_glob(struct spec_ctx *c, const yaml_node_t *n,
		       const char *pattern, struct mf_strv *acc)
{
	if (pattern[0] == '/')
		return spec_fail(c, n,
				 "'inputs': '%s' is not relative to the spec "
				 "folder",
				 pattern);
	const char *at;
	size_t len = dot_pattern(pattern, &at);
	if (len)
		return spec_fail(
		    c, n,
		    "'inputs': '%.*s' in '%s' matches '.' and '..': "
		    "name them literally",
		    (int)len, at, pattern);
	char *esc = glob_escape(c->spec->dir);
	char *full = esc ? spec_join(esc, pattern) : NULL;
	free(esc);
	if (!full)
		return -ENOMEM;
	glob_t g;
	memset(&g, 0, sizeof(g));
	glob_err = 0;
	int grc = glob(full, GLOB_NOSORT, glob_error, &g);
	free(full);
	size_t found = 0;
	int rc = 0;
	if (grc == GLOB_NOSPACE || grc == GLOB_ABORTED)
		rc = glob_fail(c, n, grc);
	else if (grc == 0)
		rc = add_matches(c, n, &g, acc, &found);
	globfree(&g);
	if (rc == 0 && found == 0)
		rc = spec_fail(c, n, "'inputs': no file matches '%s'", pattern);
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts acc, drops duplicates and moves it into the spec. */
static int set_inputs(struct mf_spec *s, struct mf_strv *acc)
{
	qsort(acc->v, acc->n, sizeof(*acc->v), cmp_str);
	size_t n = 0;
	for (size_t i = 0; i < acc->n; i++) {
		if (n && !strcmp(acc->v[n - 1], acc->v[i]))
			free(acc->v[i]);
		else
			acc->v[n++] = acc->v[i];
	}
	acc->n = n;
	s->inputs = calloc(n, sizeof(*s->inputs));
	if (!s->inputs)
		return -ENOMEM;
	s->inputs_rel = acc->v;
	s->n_inputs = n;
	acc->v = NULL;
	for (size_t i = 0; i < n; i++) {
		s->inputs[i] = spec_join(s->dir, s->inputs_rel[i]);
		if (!s->inputs[i])
			return -ENOMEM;
	}
	return 0;
}

/* The glob nodes of v: itself for a string, its items for a list. */
static int glob_nodes(struct spec_ctx *c, const yaml_node_t *v,
		      const yaml_node_item_t **first, size_t *n)
{
	if (v->type == YAML_SCALAR_NODE && !spec_is_null(v)) {
		*first = NULL;
		*n = 1;
		return 0;
	}
	if (v->type != YAML_SEQUENCE_NODE)
		return spec_fail(c, v,
				 "'inputs': expected a string or a list of "
				 "strings");
	*first = v->data.sequence.items.start;
	*n = (size_t)(v->data.sequence.items.top - *first);
	if (*n == 0)
		return spec_fail(c, v,
				 "'inputs': at least one glob is "
				 "required");
	if (*n > MF_SPEC_GLOBS_MAX)
		return spec_fail(c, v, "'inputs': more than %d globs",
				 MF_SPEC_GLOBS_MAX);
	return 0;
}

int spec_parse_inputs(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_spec *s = c->spec;
	const yaml_node_item_t *items = NULL;
	size_t n = 0;
	int rc = glob_nodes(c, v, &items, &n);
	if (rc)
		return rc;
	s->input_globs = calloc(n, sizeof(*s->input_globs));
	if (!s->input_globs)
		return -ENOMEM;
	struct mf_strv acc = {0};
	for (size_t i = 0; i < n; i++) {
		const yaml_node_t *g = items ? spec_node(c, items[i]) : v;
		rc = spec_get_string(c, "inputs", g, &s->input_globs[i]);
		if (rc)
			goto free_acc;
		s->n_globs++;
		rc = expand_glob(c, g, s->input_globs[i], &acc);
		if (rc)
			goto free_acc;
	}
	rc = set_inputs(s, &acc);
free_acc:
	mf_strv_release(&acc);
	return rc;
}

/* A dep is code the stage reads: the ownership rules apply to it, its
 * folders and the symlinks on the way (docs/security.md). */
static int check_dep_owner(struct spec_ctx *c, const yaml_node_t *n,
			   const char *abs)
{
	char *why = NULL;
	int rc = trust_check_path(abs, trust_runner(c->spec->owner_uid), false,
				  &why);
	if (rc && why) {
		int frc = spec_fail(c, n, "'deps': %s", why);
		rc = frc == -ENOMEM ? frc : rc; /* -EPERM: refused */
	}
	free(why);
	return rc;
}

static int check_dep(struct spec_ctx *c, const yaml_node_t *n, const char *rel,
		     const char *abs)
{
	struct stat st;
	if (rel[0] == '/')
		return spec_fail(c, n,
				 "'deps': '%s' is not relative to the spec "
				 "folder",
				 rel);
	if (rel[0] && stat(abs, &st) == 0) {
		if (!S_ISREG(st.st_mode))
			return spec_fail(
			    c, n, "'deps': not a regular file '%s'", rel);
		return check_dep_owner(c, n, abs);
	}
	if (!rel[0] || errno == ENOENT || errno == ENOTDIR)
		return spec_fail(c, n, "'deps': no such file '%s'", rel);
	return spec_fail(c, n, "'deps': cannot stat '%s': %s", rel,
			 strerror(errno));
}

int spec_parse_deps(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_stage *st = arg;
	if (v->type != YAML_SEQUENCE_NODE)
		return spec_fail(c, v, "'deps': expected a list of paths");
	size_t n =
	    (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n > MF_SPEC_DEPS_MAX)
		return spec_fail(c, v, "'deps': more than %d files",
				 MF_SPEC_DEPS_MAX);
	st->deps = calloc(n ? n : 1, sizeof(*st->deps));
	st->deps_rel = calloc(n ? n : 1, sizeof(*st->deps_rel));
	if (!st->deps || !st->deps_rel)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const yaml_node_t *d =
		    spec_node(c, v->data.sequence.items.start[i]);
		char *rel;
		int rc = spec_get_string(c, "deps", d, &rel);
		if (rc)
			return rc;
		char *abs = spec_join(c->spec->dir, rel);
		if (!abs) {
			free(rel);
			return -ENOMEM;
		}
		st->deps_rel[i] = rel;
		st->deps[i] = abs;
		st->n_deps++;
		rc = check_dep(c, d, rel, abs);
		if (rc)
			return rc;
	}
	return 0;
}
