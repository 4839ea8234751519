/*
 * pipeline_fixture.h - helpers shared by the pipeline tests: a temporary
 * project folder that is the current directory during a test, files
 * written into it with chosen modification times, and loaders that assert.
 *
 * Not for: production code; these helpers fail the running cmocka test.
 */
#ifndef PIPELINE_FIXTURE_H
#define PIPELINE_FIXTURE_H

#include <stddef.h>
#include <time.h>

#include "mf_pipeline.h"

/* cmocka setup/teardown: a fresh folder under /tmp, made the current
 * directory; *state points to its absolute path (struct fx). */
struct fx {
	char root[64]; /* the temporary folder, realpath'd */
	char cwd[4096]; /* where the test started */
};
int fx_setup(void **state);
int fx_teardown(void **state);

/* Writes rel (relative to the current directory, parent folders created)
 * with len bytes of data, or strlen(data) when len is (size_t)-1. */
void fx_write_n(const char *rel, const char *data, size_t len);
void fx_write(const char *rel, const char *text);

/* Sets the modification (and access) time of rel. */
void fx_mtime(const char *rel, time_t sec, long nsec);

/* mkdir -p of rel. */
void fx_mkdirs(const char *rel);

/* Loads path and fails the test, printing the message, unless it loads. */
struct mf_spec *fx_load(const char *path);

/* Asserts that loading path fails with -EINVAL and exactly message want. */
void fx_load_fails(const char *path, const char *want);

#endif
