/*
 * fscreds.c - examining files with another user's rights, on the calling
 * thread only: its filesystem uid and gid (setfsuid, setfsgid) and its
 * supplementary groups. Each is set with a raw system call, since glibc's
 * setgroups() and setuid() families change every thread of the process
 * and the kernel keeps credentials per thread.
 *
 * Not for: becoming another user for good (a stage's child does that with
 * setresuid before execve). A process that is not root needs no switch: it
 * examines files with its own rights already, and nothing here changes it.
 */
#include "mf_util.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int mf_user_init(struct mf_user *u, uid_t uid, gid_t gid)
{
	struct passwd pw, *found = NULL;
	char buf[16384];
	int ng = 16;

	memset(u, 0, sizeof(*u));
	u->uid = uid;
	u->gid = gid;
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) != 0)
		found = NULL;
	for (;;) {
		gid_t *g = realloc(u->groups, (size_t)ng * sizeof(*g));
		if (!g) {
			mf_user_release(u);
			return -ENOMEM;
		}
		u->groups = g;
		if (!found) { /* no passwd entry: its gid is all it has */
			g[0] = gid;
			ng = 1;
			break;
		}
		if (getgrouplist(found->pw_name, gid, g, &ng) >= 0)
			break;
	}
	u->n_groups = (size_t)ng;
	return 0;
}

void mf_user_release(struct mf_user *u)
{
	if (!u)
		return;
	free(u->groups);
	memset(u, 0, sizeof(*u));
}

/* The thread's supplementary groups, malloc'd (NULL for none). */
static int get_groups(gid_t **out, size_t *n)
{
	for (;;) {
		long count = syscall(SYS_getgroups, 0, NULL);
		if (count < 0)
			return -errno;
		gid_t *g = malloc((size_t)(count ? count : 1) * sizeof(*g));
		if (!g)
			return -ENOMEM;
		long got = syscall(SYS_getgroups, count, g);
		if (got >= 0) {
			*out = g;
			*n = (size_t)got;
			return 0;
		}
		free(g);
		if (errno != EINVAL) /* EINVAL: the list grew meanwhile */
			return -errno;
	}
}

/* setfsuid and setfsgid return the previous id and never fail visibly:
 * an id of -1 is refused and answers the current one, which tells
 * whether the switch took. */
static bool set_fsuid(uid_t uid)
{
	syscall(SYS_setfsuid, uid);
	return (uid_t)syscall(SYS_setfsuid, (uid_t)-1) == uid;
}

static bool set_fsgid(gid_t gid)
{
	syscall(SYS_setfsgid, gid);
	return (gid_t)syscall(SYS_setfsgid, (gid_t)-1) == gid;
}

int mf_fscreds_enter(struct mf_fscreds *saved, const struct mf_user *u)
{
	memset(saved, 0, sizeof(*saved));
	if (geteuid() != 0 || u->uid == 0)
		return 0;
	int rc = get_groups(&saved->groups, &saved->n_groups);
	if (rc)
		return rc;
	saved->fsuid = (uid_t)syscall(SYS_setfsuid, (uid_t)-1);
	saved->fsgid = (gid_t)syscall(SYS_setfsgid, (gid_t)-1);
	saved->switched = true;
	/* groups and gid first: the fs capabilities the uid switch drops
	 * are not needed for them, but CAP_SETGID is kept either way */
	if (syscall(SYS_setgroups, u->n_groups, u->groups) != 0) {
		rc = -errno;
	} else if (!set_fsgid(u->gid) || !set_fsuid(u->uid)) {
		rc = -EPERM;
	}
	if (rc)
		mf_fscreds_leave(saved);
	return rc;
}

void mf_fscreds_leave(struct mf_fscreds *saved)
{
	if (!saved->switched)
		return;
	int err = errno;
	/* the uid first: back to fsuid 0 brings the fs capabilities back */
	bool ok = set_fsuid(saved->fsuid) && set_fsgid(saved->fsgid) &&
	    syscall(SYS_setgroups, saved->n_groups, saved->groups) == 0;
	/* A thread that cannot get its own rights back would go on serving
	 * other users with one user's rights, or the other way round. */
	if (!ok)
		abort();
	free(saved->groups);
	memset(saved, 0, sizeof(*saved));
	errno = err;
}
