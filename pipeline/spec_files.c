/*
 * spec_files.c - the keys of a spec that name files: 'inputs' (globs
 * expanded with glob(3) relative to the spec folder, regular files only,
 * sorted by relative path, duplicates removed) and a stage's 'deps'
 * (relative paths of regular files, globs expanded as inputs are, and
 * folders walked for every regular file under them, each file under the
 * ownership rules of spec_trust.c), plus the path helpers. The loader calls them with the
 * spec owner's rights, so a glob sees what its owner sees.
 *
 * Not for: reading or hashing file contents (fingerprint.c).
 */
#include "spec_i.h"
#include "trust_i.h"

#include <dirent.h>
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

static int glob_fail(struct spec_ctx *c, const yaml_node_t *n, const char *key,
		     int rc)
{
	if (rc == GLOB_NOSPACE)
		return -ENOMEM;
	const char *dir = c->spec->dir;
	const char *shown = glob_err_path;
	size_t dl = strlen(dir);
	if (!strncmp(shown, dir, dl) && shown[dl] == '/')
		shown += dl + 1;
	return spec_fail(c, n, "'%s': cannot read '%s': %s", key, shown,
			 strerror(glob_err));
}

/* What a glob is expanded for: the key its messages name, and the most
 * files acc may hold. */
struct glob_use {
	const char *key; /* "inputs" or "deps" */
	size_t max;
	const char *over; /* the message past max */
};

static const struct glob_use inputs_use = {
    "inputs", MF_SPEC_MATCHES_MAX, "'inputs': more than %zu matched files"};

/* Appends the regular files that pattern matches to acc, as clean paths
 * relative to the spec folder; counts them in *found. */
static int add_matches(struct spec_ctx *c, const yaml_node_t *n,
		       const struct glob_use *u, const glob_t *g,
		       struct mf_strv *acc, size_t *found)
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
		if (acc->n >= u->max)
			return spec_fail(c, n, u->over, u->max);
		/* MATFS_INPUTS lists one path per line */
		if (u == &inputs_use && strchr(path + skip, '\n'))
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
		       const struct glob_use *u, const char *pattern,
		       struct mf_strv *acc)
{
	if (pattern[0] == '/')
		return spec_fail(c, n,
				 "'%s': '%s' is not relative to the spec "
				 "folder",
				 u->key, pattern);
	const char *at;
	size_t len = dot_pattern(pattern, &at);
	if (len)
		return spec_fail(c, n,
				 "'%s': '%.*s' in '%s' matches '.' and '..': "
				 "name them literally",
				 u->key, (int)len, at, pattern);
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
		rc = glob_fail(c, n, u->key, grc);
	else if (grc == 0)
		rc = add_matches(c, n, u, &g, acc, &found);
	globfree(&g);
	if (rc == 0 && found == 0)
		rc = spec_fail(c, n, "'%s': no file matches '%s'", u->key,
			       pattern);
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
		rc = expand_glob(c, g, &inputs_use, s->input_globs[i], &acc);
		if (rc)
			goto free_acc;
	}
	rc = set_inputs(s, &acc);
free_acc:
	mf_strv_release(&acc);
	return rc;
}

bool spec_is_pattern(const char *s)
{
	return strpbrk(s, "*?[\\") != NULL;
}

bool spec_dep_skipped(const char *name)
{
	return name[0] == '.' || !strcmp(name, "__pycache__");
}

static const struct glob_use deps_use = {
    "deps", MF_SPEC_DEP_FILES_MAX,
    "'deps': more than %zu files once globs and folders are expanded"};

/* A dep is code the stage reads: the ownership rules apply to it, its
 * folders and the symlinks on the way (docs/security.md); dir: the
 * folder of a folder dep itself. */
static int check_dep_owner(struct spec_ctx *c, const yaml_node_t *n,
			   const char *abs, bool dir)
{
	char *why = NULL;
	int rc =
	    trust_check_path(abs, trust_runner(c->spec->owner_uid), dir, &why);
	if (rc && why) {
		int frc = spec_fail(c, n, "'deps': %s", why);
		rc = frc == -ENOMEM ? frc : rc; /* -EPERM: refused */
	}
	free(why);
	return rc;
}

/* One folder dep being walked. */
struct dep_walk {
	struct spec_ctx *c;
	const yaml_node_t *n;
	const char *item; /* the folder, clean, as its files' paths start */
	struct mf_strv *acc; /* clean paths relative to the spec folder */
	size_t entries; /* examined, skipped ones included */
};

/* rel + "/" + name, or name alone when rel is "" (the spec folder). */
static char *rel_join(const char *rel, const char *name)
{
	return rel[0] ? spec_join(rel, name) : strdup(name);
}

static int walk_folder(struct dep_walk *w, const char *rel, unsigned depth);

/* One entry of a folder dep: a regular file (a symlink counts as the
 * file it points to) is a dep, a folder is walked in turn; a symlink to a
 * folder, or one that leads nowhere, is refused; anything else (a FIFO, a
 * socket, a device) holds no content and is left out. */
static int walk_entry(struct dep_walk *w, const char *rel, unsigned depth)
{
	struct spec_ctx *c = w->c;
	char *abs = spec_join(c->spec->dir, rel);
	struct stat st;
	int rc = 0;
	if (!abs)
		return -ENOMEM;
	if (lstat(abs, &st) != 0)
		rc = spec_fail(c, w->n, "'deps': cannot read '%s': %s", rel,
			       strerror(errno));
	else if (S_ISDIR(st.st_mode))
		rc = walk_folder(w, rel, depth + 1);
	else if (S_ISLNK(st.st_mode) && stat(abs, &st) != 0)
		rc = spec_fail(c, w->n, "'deps': cannot read '%s': %s", rel,
			       strerror(errno));
	else if (S_ISDIR(st.st_mode))
		rc = spec_fail(c, w->n,
			       "'deps': '%s' in folder '%s' is a symlink to a "
			       "folder: list that folder itself",
			       rel, w->item[0] ? w->item : ".");
	else if (S_ISREG(st.st_mode) && w->acc->n >= MF_SPEC_DEP_FILES_MAX)
		rc = spec_fail(c, w->n, deps_use.over,
			       (size_t)MF_SPEC_DEP_FILES_MAX);
	else if (S_ISREG(st.st_mode))
		rc = mf_strv_push(w->acc, strdup(rel));
	free(abs);
	return rc;
}

/* The entries of folder rel that are not skipped, read whole before any
 * is looked at, so that one folder at a time is open. */
static int walk_folder(struct dep_walk *w, const char *rel, unsigned depth)
{
	struct spec_ctx *c = w->c;
	if (depth > MF_SPEC_DEP_DEPTH_MAX)
		return spec_fail(c, w->n,
				 "'deps': folder '%s' nested deeper than %d "
				 "levels",
				 w->item[0] ? w->item : ".",
				 MF_SPEC_DEP_DEPTH_MAX);
	char *abs = spec_join(c->spec->dir, rel);
	if (!abs)
		return -ENOMEM;
	DIR *d = opendir(abs);
	int rc = d ? 0
		   : spec_fail(c, w->n, "'deps': cannot read '%s': %s",
			       rel[0] ? rel : ".", strerror(errno));
	free(abs);
	struct mf_strv names = {0};
	struct dirent *de;
	while (rc == 0 && d && (errno = 0, de = readdir(d))) {
		if (++w->entries > MF_SPEC_DEP_ENTRIES_MAX)
			rc = spec_fail(c, w->n,
				       "'deps': more than %d entries in "
				       "folders",
				       MF_SPEC_DEP_ENTRIES_MAX);
		else if (!spec_dep_skipped(de->d_name))
			rc = mf_strv_push(&names, rel_join(rel, de->d_name));
	}
	if (rc == 0 && d && errno)
		rc = spec_fail(c, w->n, "'deps': cannot read '%s': %s",
			       rel[0] ? rel : ".", strerror(errno));
	if (d)
		closedir(d);
	for (size_t i = 0; rc == 0 && i < names.n; i++)
		rc = walk_entry(w, names.v[i], depth);
	mf_strv_release(&names);
	return rc;
}

/* What one item of deps names, and its files appended to acc (clean
 * paths relative to the spec folder) with *kind; an item that is a file
 * is left to the caller (kind MF_DEP_FILE, acc unchanged). */
static int expand_dep(struct spec_ctx *c, const yaml_node_t *n, const char *rel,
		      const char *clean, const char *abs,
		      enum mf_dep_kind *kind, struct mf_strv *acc)
{
	struct stat st;
	if (rel[0] == '/')
		return spec_fail(c, n,
				 "'deps': '%s' is not relative to the spec "
				 "folder",
				 rel);
	if (spec_is_pattern(rel)) {
		*kind = MF_DEP_GLOB;
		return expand_glob(c, n, &deps_use, rel, acc);
	}
	*kind = MF_DEP_FILE;
	if (rel[0] && stat(abs, &st) == 0) {
		if (S_ISREG(st.st_mode))
			return 0;
		if (!S_ISDIR(st.st_mode))
			return spec_fail(
			    c, n, "'deps': not a regular file or folder '%s'",
			    rel);
		*kind = MF_DEP_FOLDER;
		int rc = check_dep_owner(c, n, abs, true);
		struct dep_walk w = {.c = c, .n = n, .item = clean, .acc = acc};
		size_t had = acc->n;
		if (rc == 0)
			rc = walk_folder(&w, clean, 0);
		if (rc == 0 && acc->n == had)
			rc = spec_fail(c, n, "'deps': no file in folder '%s'",
				       rel);
		return rc;
	}
	if (!rel[0] || errno == ENOENT || errno == ENOTDIR)
		return spec_fail(c, n, "'deps': no such file '%s'", rel);
	return spec_fail(c, n, "'deps': cannot stat '%s': %s", rel,
			 strerror(errno));
}

/* Appends path (relative, taken) and its absolute path to the stage's
 * files, after the ownership rules; the arrays have room. */
static int add_dep_file(struct spec_ctx *c, const yaml_node_t *n,
			struct mf_stage *st, char *rel)
{
	char *abs = rel ? spec_join(c->spec->dir, rel) : NULL;
	if (!abs) {
		free(rel);
		return -ENOMEM;
	}
	st->deps_rel[st->n_deps] = rel;
	st->deps[st->n_deps++] = abs;
	return check_dep_owner(c, n, abs, false);
}

/* Makes room in the stage's files for more of them. */
static int grow_deps(struct mf_stage *st, size_t *cap, size_t more)
{
	if (st->n_deps + more <= *cap)
		return 0;
	size_t want = st->n_deps + more;
	size_t ncap = *cap * 2 > want ? *cap * 2 : want;
	char **a = realloc(st->deps, ncap * sizeof(*a));
	if (a)
		st->deps = a;
	char **r = a ? realloc(st->deps_rel, ncap * sizeof(*r)) : NULL;
	if (r)
		st->deps_rel = r;
	if (!a || !r)
		return -ENOMEM;
	*cap = ncap;
	return 0;
}

/* One item of deps: its clean form and kind recorded, its files added. */
static int parse_dep(struct spec_ctx *c, const yaml_node_t *d,
		     struct mf_stage *st, size_t *cap)
{
	char *rel;
	int rc = spec_get_string(c, "deps", d, &rel);
	if (rc)
		return rc;
	char *clean = spec_clean_rel(rel);
	char *abs = spec_join(c->spec->dir, rel);
	struct mf_strv acc = {0};
	enum mf_dep_kind kind = MF_DEP_FILE;
	if (!clean || !abs) {
		free(clean);
		free(abs);
		free(rel);
		return -ENOMEM;
	}
	st->dep_items[st->n_dep_items] = clean;
	st->dep_kinds[st->n_dep_items++] = MF_DEP_FILE;
	rc = expand_dep(c, d, rel, clean, abs, &kind, &acc);
	free(abs);
	st->dep_kinds[st->n_dep_items - 1] = kind;
	if (rc == 0 && kind != MF_DEP_FILE && acc.n > 1)
		qsort(acc.v, acc.n, sizeof(*acc.v), cmp_str);
	size_t files = kind == MF_DEP_FILE ? 1 : acc.n;
	if (rc == 0 && st->n_deps + files > MF_SPEC_DEP_FILES_MAX)
		rc = spec_fail(c, d, deps_use.over,
			       (size_t)MF_SPEC_DEP_FILES_MAX);
	if (rc == 0)
		rc = grow_deps(st, cap, files);
	if (rc == 0 && kind == MF_DEP_FILE) {
		rc = add_dep_file(c, d, st, rel);
		rel = NULL;
	}
	for (size_t i = 0; rc == 0 && i < acc.n; i++) {
		rc = add_dep_file(c, d, st, acc.v[i]);
		acc.v[i] = NULL;
	}
	free(rel);
	mf_strv_release(&acc);
	return rc;
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
	size_t cap = n ? n : 1;
	st->deps = calloc(cap, sizeof(*st->deps));
	st->deps_rel = calloc(cap, sizeof(*st->deps_rel));
	st->dep_items = calloc(cap, sizeof(*st->dep_items));
	st->dep_kinds = calloc(cap, sizeof(*st->dep_kinds));
	if (!st->deps || !st->deps_rel || !st->dep_items || !st->dep_kinds)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int rc = parse_dep(
		    c, spec_node(c, v->data.sequence.items.start[i]), st, &cap);
		if (rc)
			return rc;
	}
	return 0;
}
