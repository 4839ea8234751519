/*
 * test_engine_mount.c - what the engine does for a daemon that serves a
 * mount: deps and input files on the mount (mf_engine_set_mount, by path
 * before it is mounted and by device after) are refused with a message
 * naming the path; the registry tells a fingerprint's spec owner; and
 * every fingerprint registered for a file is listed until unregistered.
 * No mount is made: the "mount" is a folder of the test's.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_engine.h"
#include "mf_testlib.h"

struct fx {
	char dir[PATH_MAX]; /* resolved: messages name real paths */
	char spec[PATH_MAX + 16];
	struct mf_engine *e;
};

static void put(const struct fx *fx, const char *name, const char *text)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* A spec on the in folder's .txt files whose one stage has deps (the
 * insides of a YAML list). */
static void spec_with_deps(const struct fx *fx, const char *deps)
{
	char text[512];
	snprintf(text, sizeof(text),
		 "name: t\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n"
		 "    deps: [%s]\n",
		 deps);
	put(fx, "spec.yaml", text);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char tmpl[] = "/tmp/mf-engmnt-XXXXXX";
	if (!fx || !mkdtemp(tmpl) || !realpath(tmpl, fx->dir))
		return -1;
	snprintf(fx->spec, sizeof(fx->spec), "%s/spec.yaml", fx->dir);
	char path[PATH_MAX + 16], store[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/mnt", fx->dir);
	mkdir(path, 0755);
	put(fx, "in/a.txt", "payload\n");
	put(fx, "mnt/x.bin", "on the mount\n");
	put(fx, "dep.bin", "off the mount\n");
	snprintf(path, sizeof(path), "%s/mnt/x.bin", fx->dir);
	snprintf(store, sizeof(store), "%s/link.bin", fx->dir);
	if (symlink(path, store) != 0)
		return -1;
	snprintf(store, sizeof(store), "%s/store", fx->dir);
	struct mf_engine_opts o = {.store_dir = store};
	char *err = NULL;
	if (mf_engine_open(&o, &fx->e, &err) != 0) {
		free(err);
		return -1;
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	mf_engine_close(fx->e);
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

/* Registers the spec and expects it refused with exactly want. */
static void expect_refused(struct fx *fx, const char *want)
{
	char fp[MF_FP_HEX_LEN + 1], *err = NULL;
	assert_int_equal(mf_engine_register(fx->e, fx->spec, fp, &err),
			 -EINVAL);
	assert_non_null(err);
	assert_string_equal(err, want);
	free(err);
}

/* Before the mount is made: a dep under the mountpoint, directly or
 * through a symlink, is refused by its real path. */
static void test_refused_by_path(void **state)
{
	struct fx *fx = *state;
	char mnt[PATH_MAX + 16], want[3 * PATH_MAX];
	snprintf(mnt, sizeof(mnt), "%s/mnt", fx->dir);
	mf_engine_set_mount(fx->e, mnt, 0);

	spec_with_deps(fx, "dep.bin, mnt/x.bin");
	snprintf(want, sizeof(want),
		 "%s: deps 'mnt/x.bin': %s/x.bin: on this matfs mount "
		 "itself: refused",
		 fx->spec, mnt);
	expect_refused(fx, want);

	spec_with_deps(fx, "link.bin");
	snprintf(want, sizeof(want),
		 "%s: deps 'link.bin': %s/x.bin: on this matfs mount itself: "
		 "refused",
		 fx->spec, mnt);
	expect_refused(fx, want);

	/* a folder whose name starts as the mountpoint's is not inside */
	spec_with_deps(fx, "dep.bin");
	char fp[MF_FP_HEX_LEN + 1], *err = NULL;
	snprintf(mnt, sizeof(mnt), "%s/dep", fx->dir);
	mf_engine_set_mount(fx->e, mnt, 0);
	assert_int_equal(mf_engine_register(fx->e, fx->spec, fp, &err), 0);

	/* no mount: nothing refused */
	spec_with_deps(fx, "mnt/x.bin");
	mf_engine_set_mount(fx->e, NULL, 0);
	assert_int_equal(mf_engine_register(fx->e, fx->spec, fp, &err), 0);
	assert_null(err);
}

/* Once mounted: any file on the mount's device is refused, inputs too,
 * whatever its path. */
static void test_refused_by_device(void **state)
{
	struct fx *fx = *state;
	struct stat st;
	assert_int_equal(stat(fx->dir, &st), 0);
	mf_engine_set_mount(fx->e, "/nonexistent-matfs-mount", st.st_dev);
	spec_with_deps(fx, "");
	char want[3 * PATH_MAX];
	snprintf(want, sizeof(want),
		 "%s: inputs 'in/a.txt': %s/in/a.txt: on this matfs mount "
		 "itself: refused",
		 fx->spec, fx->dir);
	expect_refused(fx, want);
}

/* The owner of a fingerprint's spec, for the xattrs' readers. */
static void test_spec_owner(void **state)
{
	struct fx *fx = *state;
	char fp[MF_FP_HEX_LEN + 1], *err = NULL, *path = NULL;
	uid_t uid = (uid_t)-1;
	spec_with_deps(fx, "dep.bin");
	assert_int_equal(mf_engine_register(fx->e, fx->spec, fp, &err), 0);
	assert_int_equal(mf_engine_spec_owner(fx->e, fp, &uid, &path), 0);
	assert_int_equal(uid, getuid());
	assert_string_equal(path, fx->spec);
	free(path);
	char other[MF_FP_HEX_LEN + 1];
	memset(other, 'a', MF_FP_HEX_LEN);
	other[MF_FP_HEX_LEN] = 0;
	assert_int_equal(mf_engine_spec_owner(fx->e, other, &uid, &path),
			 -ENOENT);
}

static bool listed(struct fx *fx, const char *fp)
{
	struct mf_engine_spec_info *v;
	size_t n;
	bool found = false;
	assert_int_equal(mf_engine_list_specs(fx->e, &v, &n), 0);
	for (size_t i = 0; i < n; i++)
		found |= strcmp(v[i].fp, fp) == 0 &&
		    strcmp(v[i].path, fx->spec) == 0;
	mf_engine_spec_info_free(v, n);
	return found;
}

/* A file registered again is listed under both fingerprints until the
 * older one is unregistered: a daemon still showing the older one while
 * the newer is being registered finds it. */
static void test_list_every_registration(void **state)
{
	struct fx *fx = *state;
	char a[MF_FP_HEX_LEN + 1], b[MF_FP_HEX_LEN + 1], *err = NULL;
	spec_with_deps(fx, "dep.bin");
	assert_int_equal(mf_engine_register(fx->e, fx->spec, a, &err), 0);
	put(fx, "dep.bin", "changed\n");
	assert_int_equal(mf_engine_register(fx->e, fx->spec, b, &err), 0);
	assert_string_not_equal(a, b);
	assert_true(listed(fx, a));
	assert_true(listed(fx, b));
	assert_int_equal(mf_engine_register(fx->e, fx->spec, b, &err), 0);
	assert_int_equal(mf_engine_unregister(fx->e, fx->spec, b), 0);
	assert_false(listed(fx, a));
	assert_true(listed(fx, b));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_refused_by_path, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_refused_by_device, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_spec_owner, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_list_every_registration, setup,
					    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
