/*
 * test_fscreds.c - mf_fscreds_enter and mf_fscreds_leave: as root, a
 * thread that entered another user's credentials is refused what that
 * user may not open (EACCES), gets what that user's uid or groups allow,
 * and is root again after leave; another thread meanwhile keeps root's
 * rights, fsuid and groups. Skipped unless run as root.
 *
 * Not for: where the pipeline uses it (tests/pipeline/test_spec_trust.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_util.h"

#define OWNER 4242 /* owns the private folder; need not exist */
#define OTHER 4343 /* another user without a passwd entry either */
#define GROUP 4444 /* the group the shared folder grants */

struct fx {
	char root[64];
	char priv[128]; /* 0700, owned by OWNER: priv/f */
	char shared[128]; /* 0070, root:GROUP: shared/f */
};

static int setup(void **state)
{
	if (geteuid() != 0)
		return 0;
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->root, sizeof(f->root), "/tmp/mf-fscreds-XXXXXX");
	if (!mkdtemp(f->root) || chmod(f->root, 0755) != 0)
		return -1;
	snprintf(f->priv, sizeof(f->priv), "%s/priv", f->root);
	snprintf(f->shared, sizeof(f->shared), "%s/shared", f->root);
	char p[256];
	if (mkdir(f->priv, 0700) != 0 || mkdir(f->shared, 0070) != 0 ||
	    chmod(f->shared, 0070) != 0)
		return -1;
	snprintf(p, sizeof(p), "%s/f", f->priv);
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0 || close(fd) != 0 || chown(p, OWNER, OWNER) != 0 ||
	    chown(f->priv, OWNER, OWNER) != 0)
		return -1;
	snprintf(p, sizeof(p), "%s/f", f->shared);
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0 || close(fd) != 0 || chown(f->shared, 0, GROUP) != 0)
		return -1;
	*state = f;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	if (!f)
		return 0;
	int rc = nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return rc;
}

/* 0 when dir/f opens for reading, else -errno. */
static int try_open(const char *dir)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/f", dir);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static uid_t fsuid_now(void)
{
	return (uid_t)syscall(SYS_setfsuid, (uid_t)-1);
}

static size_t groups_now(void)
{
	return (size_t)syscall(SYS_getgroups, 0, NULL);
}

static void test_enter_leave(void **state)
{
	struct fx *f = *state;
	if (!f)
		skip();
	size_t groups = groups_now();
	struct mf_user other = {.uid = OTHER, .gid = OTHER};
	struct mf_fscreds saved;
	assert_int_equal(mf_user_init(&other, OTHER, OTHER), 0);
	assert_int_equal(other.n_groups, 1); /* no passwd entry */
	assert_int_equal(try_open(f->priv), 0);

	assert_int_equal(mf_fscreds_enter(&saved, &other), 0);
	assert_int_equal(fsuid_now(), OTHER);
	assert_int_equal(try_open(f->priv), -EACCES);
	assert_int_equal(try_open(f->shared), -EACCES);
	mf_fscreds_leave(&saved);

	assert_int_equal(fsuid_now(), 0);
	assert_int_equal(groups_now(), groups);
	assert_int_equal(try_open(f->priv), 0);
	assert_int_equal(try_open(f->shared), 0);
	mf_user_release(&other);
	mf_user_release(NULL);
}

/* The owner's uid opens its own folder; a supplementary group opens the
 * folder that group may read: the switch is to that user, not to "no
 * rights at all". */
static void test_uid_and_groups_count(void **state)
{
	struct fx *f = *state;
	if (!f)
		skip();
	struct mf_fscreds saved;
	struct mf_user owner = {.uid = OWNER, .gid = OWNER};
	assert_int_equal(mf_fscreds_enter(&saved, &owner), 0);
	assert_int_equal(try_open(f->priv), 0);
	assert_int_equal(try_open(f->shared), -EACCES);
	mf_fscreds_leave(&saved);

	gid_t g[] = {OTHER, GROUP};
	struct mf_user member = {
	    .uid = OTHER, .gid = OTHER, .groups = g, .n_groups = 2};
	assert_int_equal(mf_fscreds_enter(&saved, &member), 0);
	assert_int_equal(try_open(f->shared), 0);
	assert_int_equal(try_open(f->priv), -EACCES);
	mf_fscreds_leave(&saved);
}

/* Root's own uid needs no switch. */
static void test_root_is_no_switch(void **state)
{
	struct fx *f = *state;
	if (!f)
		skip();
	struct mf_fscreds saved;
	struct mf_user root = {.uid = 0, .gid = 0};
	assert_int_equal(mf_fscreds_enter(&saved, &root), 0);
	assert_false(saved.switched);
	assert_int_equal(try_open(f->priv), 0);
	mf_fscreds_leave(&saved);
}

struct peer {
	const struct fx *f;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int step; /* 1: the main thread switched; 2: the peer looked */
	int open_rc;
	uid_t fsuid;
	size_t groups;
};

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	pthread_mutex_lock(&p->lock);
	while (p->step != 1)
		pthread_cond_wait(&p->cond, &p->lock);
	p->open_rc = try_open(p->f->priv);
	p->fsuid = fsuid_now();
	p->groups = groups_now();
	p->step = 2;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* While one thread examines files as another user, a thread started
 * before keeps root's rights, its fsuid and its groups. */
static void test_other_threads_untouched(void **state)
{
	struct fx *f = *state;
	if (!f)
		skip();
	struct peer p = {.f = f, .open_rc = 1};
	pthread_t th;
	assert_int_equal(mf_mutex_init(&p.lock), 0);
	pthread_cond_init(&p.cond, NULL);
	size_t groups = groups_now();
	assert_int_equal(pthread_create(&th, NULL, peer_main, &p), 0);

	gid_t g[] = {OTHER, GROUP, GROUP + 1};
	struct mf_user other = {
	    .uid = OTHER, .gid = OTHER, .groups = g, .n_groups = 3};
	struct mf_fscreds saved;
	assert_int_equal(mf_fscreds_enter(&saved, &other), 0);
	assert_int_equal(groups_now(), 3);
	pthread_mutex_lock(&p.lock);
	p.step = 1;
	pthread_cond_broadcast(&p.cond);
	while (p.step != 2)
		pthread_cond_wait(&p.cond, &p.lock);
	pthread_mutex_unlock(&p.lock);
	assert_int_equal(try_open(f->priv), -EACCES);
	mf_fscreds_leave(&saved);
	assert_int_equal(pthread_join(th, NULL), 0);

	assert_int_equal(p.open_rc, 0);
	assert_int_equal(p.fsuid, 0);
	assert_int_equal(p.groups, groups);
	pthread_mutex_destroy(&p.lock);
	pthread_cond_destroy(&p.cond);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_enter_leave, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_uid_and_groups_count, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_root_is_no_switch, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_other_threads_untouched, setup,
					    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
