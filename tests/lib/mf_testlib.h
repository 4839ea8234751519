/*
 * mf_testlib.h - fixtures the C tests of several folders share (cmocka):
 * writing a small file, removing a temporary folder. Link mf_testlib_dep.
 *
 * Not for: one module's own helpers (snapshot/snap_testutil.h,
 * pipeline/pipeline_fixture.h, job/job_fixture.h); test code only, it
 * fails the running test on misuse.
 */
#ifndef MF_TESTLIB_H
#define MF_TESTLIB_H

/* Writes text to path (created or truncated); fails the test if it
 * cannot. */
void tl_write_file(const char *path, const char *text);

/* rm -r path without following symlinks: 0, or -1 when something could
 * not be removed. A missing path is 0. */
int tl_rm_rf(const char *path);

#endif
