/*
 * test_spec_watch.c - mf_spec_watch_list: the folders a watcher must watch
 * for a spec (each with the entry or glob component that matters there)
 * and the files whose identity it compares: globs with wildcard folder
 * parts, "..", deps in subfolders and deps reached through symlinks,
 * deps folders and globs.
 *
 * Not for: watching itself (tests/mount/test_mount_follow.sh).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_pipeline.h"
#include "pipeline_fixture.h"

/* Asserts that w lists folder root/rel (rel "": root) with entry name. */
static void has_dir(const struct mf_spec_watch *w, const char *root,
		    const char *rel, const char *name, bool glob)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s%s%s", root, rel[0] ? "/" : "", rel);
	for (size_t i = 0; i < w->n_dirs; i++)
		if (!strcmp(w->dirs[i].path, path) &&
		    !strcmp(w->dirs[i].name, name) && w->dirs[i].glob == glob)
			return;
	fail_msg("no folder '%s' with '%s'", path, name);
}

static void has_file(const struct mf_spec_watch *w, const char *root,
		     const char *rel)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (size_t i = 0; i < w->n_files; i++)
		if (!strcmp(w->files[i], path))
			return;
	fail_msg("no file '%s'", path);
}

static void test_folders_and_files(void **state)
{
	const char *r = ((struct fx *)*state)->root;
	fx_write("p/raw/a/data/x.jsonl", "x");
	fx_mkdirs("p/raw/b");
	fx_write("p/raw/c/data/y.jsonl", "y");
	fx_write("top.txt", "t");
	fx_write("p/tok.py", "1");
	fx_write("p/lib/util.py", "2");
	fx_write("real/tok2.py", "3");
	assert_int_equal(symlink("../real/tok2.py", "p/link.py"), 0);
	fx_write("p/a.yaml",
		 "name: w\n"
		 "inputs: [raw/*/data/*.jsonl, ../top.txt]\n"
		 "stages:\n"
		 "  - exec: [cat]\n"
		 "    deps: [tok.py, ./lib//util.py, link.py]\n");
	struct mf_spec *s = fx_load("p/a.yaml");
	struct mf_spec_watch w;
	assert_int_equal(mf_spec_watch_list(s, &w), 0);
	/* the glob, level by level; raw/b has no data folder (yet) */
	has_dir(&w, r, "p", "raw", false);
	has_dir(&w, r, "p/raw", "*", true);
	has_dir(&w, r, "p/raw/a", "data", false);
	has_dir(&w, r, "p/raw/b", "data", false);
	has_dir(&w, r, "p/raw/c", "data", false);
	has_dir(&w, r, "p/raw/a/data", "*.jsonl", true);
	has_dir(&w, r, "p/raw/c/data", "*.jsonl", true);
	has_dir(&w, r, "p/..", "top.txt", false);
	/* deps: every component's folder; a symlink's target too */
	has_dir(&w, r, "p", "tok.py", false);
	has_dir(&w, r, "p", "lib", false);
	has_dir(&w, r, "p/lib", "util.py", false);
	has_dir(&w, r, "p", "link.py", false);
	has_dir(&w, r, "p/../real", "tok2.py", false);
	has_dir(&w, r, "real", "tok2.py", false);
	assert_int_equal(w.n_dirs, 14);
	for (size_t i = 1; i < w.n_dirs; i++)
		assert_true(strcmp(w.dirs[i - 1].path, w.dirs[i].path) <= 0);
	has_file(&w, r, "p/tok.py");
	has_file(&w, r, "p/./lib//util.py"); /* as the spec's deps hold it */
	has_file(&w, r, "p/link.py");
	has_file(&w, r, "p/raw/a/data/x.jsonl");
	has_file(&w, r, "p/raw/c/data/y.jsonl");
	has_file(&w, r, "p/../top.txt");
	assert_int_equal(w.n_files, 6);
	mf_spec_watch_release(&w);
	assert_int_equal(w.n_dirs + w.n_files, 0);
	mf_spec_watch_release(NULL);
	mf_spec_free(s);
}

/* The same folder reached by two globs is listed once per component. */
static void test_duplicates(void **state)
{
	const char *r = ((struct fx *)*state)->root;
	fx_write("in/a.txt", "a");
	fx_write("in/b.bin", "b");
	fx_write("a.yaml",
		 "name: w\n"
		 "inputs: [in/*.txt, in/*.txt, in/*.bin]\n"
		 "stages:\n"
		 "  - exec: [cat]\n");
	struct mf_spec *s = fx_load("a.yaml");
	struct mf_spec_watch w;
	assert_int_equal(mf_spec_watch_list(s, &w), 0);
	has_dir(&w, r, "", "in", false);
	has_dir(&w, r, "in", "*.txt", true);
	has_dir(&w, r, "in", "*.bin", true);
	assert_int_equal(w.n_dirs, 3);
	mf_spec_watch_release(&w);
	mf_spec_free(s);
}

/* A deps folder: its path, then every folder under it that it walks with
 * "*" (not a hidden one, not __pycache__), and each of its files; a deps
 * glob as an input glob. */
static void test_deps_folder_glob(void **state)
{
	const char *r = ((struct fx *)*state)->root;
	fx_write("in/a.txt", "a");
	fx_write("src/lib/a.py", "a");
	fx_write("src/lib/sub/deep/b.py", "b");
	fx_write("src/lib/.git/config", "g");
	fx_write("src/lib/__pycache__/a.pyc", "c");
	fx_write("conf/x.json", "x");
	fx_write("a.yaml",
		 "name: w\n"
		 "inputs: in/*.txt\n"
		 "stages:\n"
		 "  - exec: [cat]\n"
		 "    deps: [src/lib, 'conf/*.json']\n");
	struct mf_spec *s = fx_load("a.yaml");
	struct mf_spec_watch w;
	assert_int_equal(mf_spec_watch_list(s, &w), 0);
	has_dir(&w, r, "", "src", false);
	has_dir(&w, r, "src", "lib", false);
	has_dir(&w, r, "src/lib", "*", true);
	has_dir(&w, r, "src/lib/sub", "*", true);
	has_dir(&w, r, "src/lib/sub/deep", "*", true);
	has_dir(&w, r, "", "conf", false);
	has_dir(&w, r, "conf", "*.json", true);
	has_dir(&w, r, "", "in", false);
	has_dir(&w, r, "in", "*.txt", true);
	assert_int_equal(w.n_dirs, 9);
	has_file(&w, r, "src/lib/a.py");
	has_file(&w, r, "src/lib/sub/deep/b.py");
	has_file(&w, r, "conf/x.json");
	has_file(&w, r, "in/a.txt");
	assert_int_equal(w.n_files, 4);
	mf_spec_watch_release(&w);
	mf_spec_free(s);
}

#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_folders_and_files),
	    T(test_duplicates),
	    T(test_deps_folder_glob),
	};
	return cmocka_run_group_tests_name("spec_watch", tests, NULL, NULL);
}
