/*
 * spec_watch.c - what a loaded spec's fingerprint depends on, listed for a
 * watcher: the folders whose entries can change it, each with the entry
 * name (a dep's path component) or glob component (an input or deps
 * glob's, or "*" in every folder a folder dep walks) that matters in it,
 * and the files whose identity does (deps and inputs).
 *
 * Read-only: it looks at the tree (opendir, stat, lstat, readlink,
 * realpath) with the rights of the spec's owner, and keeps nothing. Not for: watching (the daemon does, in
 * fs/fuse_specs.c) or hashing (fingerprint.c).
 */
#include "spec_i.h"
#include "trust_i.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINK_HOPS 40 /* as the kernel's own limit on symlinks in a path */

struct watch_build {
	struct mf_spec_watch *w;
	size_t cap_dirs;
	struct mf_strv files; /* w->files once built */
};

static bool is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Adds (path, name), copying both; duplicates go at the end (dedup). */
static int add_dir(struct watch_build *b, const char *path, const char *name,
		   bool glob)
{
	struct mf_spec_watch *w = b->w;
	if (w->n_dirs == b->cap_dirs) {
		size_t cap = b->cap_dirs ? 2 * b->cap_dirs : 16;
		struct mf_watch_dir *v = realloc(w->dirs, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		w->dirs = v;
		b->cap_dirs = cap;
	}
	struct mf_watch_dir *d = &w->dirs[w->n_dirs];
	d->path = strdup(path);
	d->name = strdup(name);
	d->glob = glob;
	if (!d->path || !d->name) {
		free(d->path);
		free(d->name);
		return -ENOMEM;
	}
	w->n_dirs++;
	return 0;
}

static int add_file(struct watch_build *b, const char *path)
{
	return mf_strv_push(&b->files, strdup(path));
}

/* Splits path at its last slash: the folder ("/" for "/x") and the entry.
 * Both into buffers of PATH_MAX; -ENAMETOOLONG. */
static int split(const char *path, char *dir, char *name)
{
	const char *slash = strrchr(path, '/');
	if (!slash || strlen(path) >= PATH_MAX)
		return -ENAMETOOLONG;
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	memcpy(dir, path, n);
	dir[n] = '\0';
	memcpy(name, slash + 1, strlen(slash + 1) + 1);
	return 0;
}

/* Entries of folder matching pattern that are folders, into next. */
static int match_folders(const char *folder, const char *pattern,
			 struct mf_strv *next)
{
	DIR *d = opendir(folder);
	if (!d)
		return 0; /* gone or unreadable: matches nothing, as glob */
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    fnmatch(pattern, de->d_name, FNM_PERIOD) != 0)
			continue;
		char *p = spec_join(folder, de->d_name);
		if (p && !is_dir(p)) {
			free(p);
			continue;
		}
		rc = mf_strv_push(next, p);
	}
	closedir(d);
	return rc;
}

/* The folders of the next level: part of each folder in cur. */
static int next_level(const struct mf_strv *cur, const char *part, bool glob,
		      struct mf_strv *next)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < cur->n; i++) {
		if (glob && spec_is_pattern(part)) {
			rc = match_folders(cur->v[i], part, next);
			continue;
		}
		char *p = spec_join(cur->v[i], part);
		if (p && !is_dir(p)) {
			free(p);
			continue;
		}
		rc = mf_strv_push(next, p);
	}
	return rc;
}

/*
 * Walks rel (clean, relative to dir) level by level: each folder reached
 * is listed with the component that applies to its entries. glob: rel is
 * an input glob, whose components may be patterns; otherwise a dep's path.
 */
static int walk(struct watch_build *b, const char *dir, const char *rel,
		bool glob)
{
	struct mf_strv cur = {0}, next = {0};
	char part[NAME_MAX + 1];
	int rc = mf_strv_push(&cur, strdup(dir));
	for (const char *p = rel; rc == 0 && *p;) {
		size_t len = strcspn(p, "/");
		if (len > NAME_MAX)
			break; /* no such entry can exist */
		memcpy(part, p, len);
		part[len] = '\0';
		p += len + (p[len] == '/');
		bool dots = !strcmp(part, ".") || !strcmp(part, "..");
		for (size_t i = 0; rc == 0 && !dots && i < cur.n; i++)
			rc = add_dir(b, cur.v[i], part,
				     glob && spec_is_pattern(part));
		if (rc == 0 && *p)
			rc = next_level(&cur, part, glob, &next);
		mf_strv_release(&cur);
		cur = next;
		memset(&next, 0, sizeof(next));
	}
	mf_strv_release(&cur);
	return rc;
}

/* For a path that is a symlink: the folder and name of every link on the
 * way to the file, and of the file itself. */
static int add_links(struct watch_build *b, const char *path)
{
	char cur[PATH_MAX], dir[PATH_MAX], name[PATH_MAX], target[PATH_MAX];
	struct stat st;
	if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode))
		return 0;
	snprintf(cur, sizeof(cur), "%s", path);
	int rc = 0;
	for (int hop = 0; rc == 0 && hop < LINK_HOPS; hop++) {
		if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode) ||
		    split(cur, dir, name) != 0)
			break;
		ssize_t n = readlink(cur, target, sizeof(target) - 1);
		if (n < 0)
			break;
		target[n] = '\0';
		int len = target[0] == '/'
		    ? snprintf(cur, sizeof(cur), "%s", target)
		    : snprintf(cur, sizeof(cur), "%s/%s", dir, target);
		if (len < 0 || (size_t)len >= sizeof(cur) ||
		    split(cur, dir, name) != 0)
			break;
		rc = add_dir(b, dir, name, false);
	}
	if (rc == 0 && realpath(path, target) && split(target, dir, name) == 0)
		rc = add_dir(b, dir, name, false);
	return rc;
}

/* Every folder under folder (clean, relative to the spec folder) that a
 * folder dep walks, with "*" for its entries: a file added, removed or
 * written there matters. The entries a folder dep skips are not walked
 * ("*" does not match a hidden name either); at most MF_SPEC_DEP_DEPTH_MAX
 * levels and MF_SPEC_DEP_ENTRIES_MAX entries are looked at, as the
 * loader does. */
static int walk_tree(struct watch_build *b, const char *top, unsigned depth,
		     size_t *entries)
{
	if (depth > MF_SPEC_DEP_DEPTH_MAX)
		return 0;
	int rc = add_dir(b, top, "*", true);
	DIR *d = rc == 0 ? opendir(top) : NULL;
	if (!d)
		return rc;
	struct mf_strv sub = {0};
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)) &&
	       ++*entries <= MF_SPEC_DEP_ENTRIES_MAX) {
		if (spec_dep_skipped(de->d_name))
			continue;
		char *p = spec_join(top, de->d_name);
		struct stat st;
		if (p && (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode))) {
			free(p);
			continue;
		}
		rc = mf_strv_push(&sub, p);
	}
	closedir(d);
	for (size_t i = 0; rc == 0 && i < sub.n; i++)
		rc = walk_tree(b, sub.v[i], depth + 1, entries);
	mf_strv_release(&sub);
	return rc;
}

/* Each item of a stage's deps: the folders on a file's or a folder's
 * path, those a glob walks, and every folder inside a folder dep; then
 * every file the deps hold, with the symlinks on the way to it. */
static int list_deps(struct watch_build *b, const struct mf_spec *spec)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < spec->n_stages; i++) {
		const struct mf_stage *st = &spec->stages[i];
		size_t entries = 0;
		for (size_t j = 0; rc == 0 && j < st->n_dep_items; j++) {
			const char *rel = st->dep_items[j];
			enum mf_dep_kind kind = st->dep_kinds[j];
			rc = walk(b, spec->dir, rel, kind == MF_DEP_GLOB);
			if (rc || kind != MF_DEP_FOLDER)
				continue;
			char *top = spec_join(spec->dir, rel);
			rc = top ? walk_tree(b, top, 0, &entries) : -ENOMEM;
			free(top);
		}
		for (size_t j = 0; rc == 0 && j < st->n_deps; j++) {
			rc = add_links(b, st->deps[j]);
			if (rc == 0)
				rc = add_file(b, st->deps[j]);
		}
	}
	return rc;
}

static int list_inputs(struct watch_build *b, const struct mf_spec *spec)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < spec->n_globs; i++) {
		char *rel = spec_clean_rel(spec->input_globs[i]);
		rc = rel ? walk(b, spec->dir, rel, true) : -ENOMEM;
		free(rel);
	}
	for (size_t i = 0; rc == 0 && i < spec->n_inputs; i++) {
		rc = add_links(b, spec->inputs[i]);
		if (rc == 0)
			rc = add_file(b, spec->inputs[i]);
	}
	return rc;
}

static int cmp_dir(const void *a, const void *b)
{
	const struct mf_watch_dir *x = a, *y = b;
	int c = strcmp(x->path, y->path);
	if (c == 0)
		c = strcmp(x->name, y->name);
	return c ? c : (int)x->glob - (int)y->glob;
}

/* Sorts the folders and drops repeated ones. */
static void dedup(struct mf_spec_watch *w)
{
	if (w->n_dirs < 2)
		return;
	qsort(w->dirs, w->n_dirs, sizeof(*w->dirs), cmp_dir);
	size_t n = 1;
	for (size_t i = 1; i < w->n_dirs; i++) {
		if (cmp_dir(&w->dirs[n - 1], &w->dirs[i]) == 0) {
			free(w->dirs[i].path);
			free(w->dirs[i].name);
		} else {
			w->dirs[n++] = w->dirs[i];
		}
	}
	w->n_dirs = n;
}

int mf_spec_watch_list(const struct mf_spec *spec, struct mf_spec_watch *out)
{
	struct mf_spec_watch w = {0};
	struct watch_build b = {.w = &w};
	struct mf_fscreds saved;
	int rc = trust_enter(spec->owner_uid, spec->owner_gid, &saved);
	if (rc)
		return rc;
	rc = list_deps(&b, spec);
	if (rc == 0)
		rc = list_inputs(&b, spec);
	mf_fscreds_leave(&saved);
	w.files = b.files.v;
	w.n_files = b.files.n;
	if (rc) {
		mf_spec_watch_release(&w);
		return rc;
	}
	dedup(&w);
	*out = w;
	return 0;
}

void mf_spec_watch_release(struct mf_spec_watch *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n_dirs; i++) {
		free(w->dirs[i].path);
		free(w->dirs[i].name);
	}
	free(w->dirs);
	mf_strv_free(w->files, w->n_files);
	memset(w, 0, sizeof(*w));
}
