/*
 * pipeline_fixture.c - the helpers of pipeline_fixture.h.
 *
 * Not for: assertions about the pipeline module itself.
 */
#include "pipeline_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	if (!f || !getcwd(f->cwd, sizeof(f->cwd)))
		return -1;
	char tmpl[] = "/tmp/mf-pipeline-XXXXXX";
	if (!mkdtemp(tmpl))
		return -1;
	char *real = realpath(tmpl, NULL);
	if (!real || strlen(real) >= sizeof(f->root))
		return -1;
	snprintf(f->root, sizeof(f->root), "%s", real);
	free(real);
	if (chdir(f->root) != 0)
		return -1;
	*state = f;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path);
	return unlink(path);
}

int fx_teardown(void **state)
{
	struct fx *f = *state;
	int rc = chdir(f->cwd);
	if (rc == 0)
		rc = nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return rc;
}

void fx_mkdirs(const char *rel)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", rel);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		assert_true(mkdir(buf, 0755) == 0 || errno == EEXIST);
		*p = '/';
	}
	assert_true(mkdir(buf, 0755) == 0 || errno == EEXIST);
}

void fx_write_n(const char *rel, const char *data, size_t len)
{
	char parent[4096];
	snprintf(parent, sizeof(parent), "%s", rel);
	char *slash = strrchr(parent, '/');
	if (slash) {
		*slash = '\0';
		fx_mkdirs(parent);
	}
	int fd = open(rel, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(mf_write_full(fd, data, len), 0);
	assert_int_equal(close(fd), 0);
}

void fx_write(const char *rel, const char *text)
{
	fx_write_n(rel, text, strlen(text));
}

void fx_mtime(const char *rel, time_t sec, long nsec)
{
	struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};
	assert_int_equal(utimensat(AT_FDCWD, rel, ts, 0), 0);
}

struct mf_spec *fx_load(const char *path)
{
	struct mf_spec *s = NULL;
	char *err = NULL;
	int rc = mf_spec_load(path, &s, &err);
	if (rc)
		print_error("mf_spec_load(%s): %d %s\n", path, rc,
			    err ? err : "(no message)");
	assert_int_equal(rc, 0);
	assert_null(err);
	assert_non_null(s);
	return s;
}

void fx_load_fails(const char *path, const char *want)
{
	struct mf_spec *s = (struct mf_spec *)(uintptr_t)1;
	char *err = NULL;
	int rc = mf_spec_load(path, &s, &err);
	assert_int_equal(rc, -EINVAL);
	assert_ptr_equal(s, (struct mf_spec *)(uintptr_t)1); /* untouched */
	assert_non_null(err);
	assert_string_equal(err, want);
	free(err);
}
