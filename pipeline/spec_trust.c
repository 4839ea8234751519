/*
 * spec_trust.c - the ownership rules of docs/security.md ("Loading a
 * spec"), as sshd's StrictModes: a file a spec's stages run or read as
 * code, and every folder and symlink on the way to it, belong to root or
 * to the user the stages run as, and nobody else can write them. Also
 * resolving paths the way the kernel does (to see every symlink),
 * switching to the spec owner's filesystem credentials, and finding the
 * program a stage runs.
 *
 * Not for: what a spec says (spec*.c) or running it (job*.c). Looks at
 * the tree (lstat, readlink) and changes nothing.
 */
#include "trust_i.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RULE "refused (docs/security.md, ownership)"

uid_t trust_runner(uid_t owner)
{
	uid_t self = geteuid();
	return self == 0 ? owner : self;
}

void trust_links_release(struct trust_links *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->path[i]);
	l->n = 0;
}

/* Appends the n bytes of name to the folder real (length *len). */
static int append(char real[PATH_MAX], size_t *len, const char *name, size_t n)
{
	size_t at = *len > 1 ? *len + 1 : *len;
	if (at + n >= PATH_MAX)
		return -ENAMETOOLONG;
	if (*len > 1)
		real[*len] = '/';
	memcpy(real + at, name, n);
	real[at + n] = '\0';
	*len = at + n;
	return 0;
}

/* Follows the link real names: rest becomes its target then what was
 * left of the path (from next), real goes back to its folder (len), or to
 * "/" for an absolute target. */
static int follow(char real[PATH_MAX], size_t len, const struct stat *st,
		  char rest[PATH_MAX], const char *next,
		  struct trust_links *links)
{
	char target[PATH_MAX];
	if (links->n == TRUST_LINKS_MAX)
		return -ELOOP;
	if (!(links->path[links->n] = strdup(real)))
		return -ENOMEM;
	links->uid[links->n++] = st->st_uid;
	ssize_t n = readlink(real, target, sizeof(target) - 1);
	if (n < 0)
		return -errno;
	size_t tail = strlen(next);
	if ((size_t)n + tail >= sizeof(target))
		return -ENAMETOOLONG;
	memcpy(target + n, next, tail + 1);
	memcpy(rest, target, (size_t)n + tail + 1);
	if (rest[0] == '/')
		len = 1;
	real[len] = '\0';
	return 0;
}

int trust_resolve(const char *path, char real[PATH_MAX],
		  struct trust_links *links)
{
	char rest[PATH_MAX];
	int n = path[0] == '/' ? snprintf(rest, sizeof(rest), "%s", path) : -1;
	if (path[0] != '/') {
		if (!getcwd(real, PATH_MAX))
			return -errno;
		n = snprintf(rest, sizeof(rest), "%s/%s", real, path);
	}
	if (n < 0 || (size_t)n >= sizeof(rest))
		return -ENAMETOOLONG;
	memcpy(real, "/", 2);
	size_t len = 1;
	for (const char *p = rest; *p;) {
		while (*p == '/')
			p++;
		size_t plen = strcspn(p, "/");
		const char *next = p + plen;
		if (plen == 0 || (plen == 1 && p[0] == '.')) {
			p = next;
			continue;
		}
		if (plen == 2 && p[0] == '.' && p[1] == '.') {
			char *slash = strrchr(real, '/');
			len = slash == real ? 1 : (size_t)(slash - real);
			real[len] = '\0';
			p = next;
			continue;
		}
		size_t before = len;
		struct stat st;
		int rc = append(real, &len, p, plen);
		if (rc == 0 && lstat(real, &st) != 0)
			rc = -errno;
		if (rc)
			return rc;
		if (S_ISLNK(st.st_mode)) {
			rc = follow(real, before, &st, rest, next, links);
			if (rc)
				return rc;
			len = strlen(real);
			p = rest;
			continue;
		}
		if (*next && !S_ISDIR(st.st_mode))
			return -ENOTDIR;
		p = next;
	}
	return 0;
}

const char *trust_user_text(uid_t uid, char *buf, size_t size)
{
	char pwbuf[4096];
	struct passwd pw, *found = NULL;
	if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &found) == 0 && found &&
	    strlen(found->pw_name) < 32)
		snprintf(buf, size, "%s (uid %u)", found->pw_name,
			 (unsigned)uid);
	else
		snprintf(buf, size, "uid %u", (unsigned)uid);
	return buf;
}

static const char *group_text(gid_t gid, char *buf, size_t size)
{
	char grbuf[16384];
	struct group gr, *found = NULL;
	if (getgrgid_r(gid, &gr, grbuf, sizeof(grbuf), &found) == 0 && found &&
	    strlen(found->gr_name) < 32)
		snprintf(buf, size, "%s (gid %u)", found->gr_name,
			 (unsigned)gid);
	else
		snprintf(buf, size, "gid %u", (unsigned)gid);
	return buf;
}

/* True when a user other than uid has gid as its primary group, or when
 * the password database cannot be read through: such a user is in the
 * group without being listed in its gr_mem. The enumeration's position is
 * shared by the whole process, hence the lock. */
static bool group_has_other_primary(gid_t gid, uid_t uid)
{
	static pthread_mutex_t lock = MF_MUTEX_INITIALIZER;
	char buf[16384];
	struct passwd pw, *pwp;
	bool other = false;
	int rc;
	pthread_mutex_lock(&lock);
	setpwent();
	while ((rc = getpwent_r(&pw, buf, sizeof(buf), &pwp)) == 0 && pwp)
		if (pwp->pw_gid == gid && pwp->pw_uid != uid) {
			other = true;
			break;
		}
	endpwent();
	pthread_mutex_unlock(&lock);
	return other || (rc != 0 && rc != ENOENT);
}

/* True when gid is the primary group of uid and has no other members,
 * listed or by their own primary group: the user-private groups of a
 * umask 002 system. */
static bool group_is_private(gid_t gid, uid_t uid)
{
	char buf[16384];
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &pwp) != 0 || !pwp ||
	    pwp->pw_gid != gid)
		return false;
	if (getgrgid_r(gid, &gr, buf, sizeof(buf), &grp) != 0 || !grp)
		return false;
	return grp->gr_mem[0] == NULL && !group_has_other_primary(gid, uid);
}

__attribute__((format(printf, 3, 4))) static int why_fail(char **why, int rc,
							  const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(why, fmt, ap) < 0) {
		*why = NULL;
		rc = -ENOMEM;
	}
	va_end(ap);
	return rc;
}

/* One entry of a resolved path: the folder "path" (last false) or the
 * file or folder the path names (last true). */
static int check_entry(const char *path, const struct stat *st, uid_t runner,
		       bool last, char **why)
{
	char owner[TRUST_USER_TEXT], run[TRUST_USER_TEXT], grp[TRUST_USER_TEXT];
	unsigned mode = (unsigned)(st->st_mode & 07777);
	if (S_ISLNK(st->st_mode) || (!last && !S_ISDIR(st->st_mode)))
		return why_fail(why, -ELOOP,
				"%s: changed while it was examined", path);
	if (st->st_uid != 0 && st->st_uid != runner)
		return why_fail(
		    why, -EPERM,
		    "%s: owned by %s, mode %04o, but stages run "
		    "as %s: " RULE,
		    path, trust_user_text(st->st_uid, owner, sizeof(owner)),
		    mode, trust_user_text(runner, run, sizeof(run)));
	/* a sticky folder on the way: others may add entries but not
	 * replace ours, and the next entry is checked in turn */
	bool sticky = !last && (st->st_mode & S_ISVTX);
	if ((st->st_mode & S_IWOTH) && !sticky)
		return why_fail(
		    why, -EPERM,
		    "%s: owned by %s, mode %04o: writable by "
		    "others: " RULE,
		    path, trust_user_text(st->st_uid, owner, sizeof(owner)),
		    mode);
	if ((st->st_mode & S_IWGRP) && !sticky &&
	    !group_is_private(st->st_gid, st->st_uid))
		return why_fail(
		    why, -EPERM,
		    "%s: owned by %s, mode %04o: writable by "
		    "group %s, not its owner's own group: " RULE,
		    path, trust_user_text(st->st_uid, owner, sizeof(owner)),
		    mode, group_text(st->st_gid, grp, sizeof(grp)));
	return 0;
}

int trust_check_real(const char *real, uid_t runner, bool dir, struct stat *st,
		     char **why)
{
	char prefix[PATH_MAX];
	size_t len = strlen(real);
	struct stat sb;
	if (real[0] != '/' || len >= sizeof(prefix))
		return why_fail(why, -EINVAL, "%s: not an absolute path", real);
	for (size_t end = 1; end <= len; end++) {
		/* "/" first, then the path up to the end of each component */
		if (end > 1 && end < len && real[end] != '/')
			continue;
		size_t n = end;
		memcpy(prefix, real, n);
		prefix[n] = '\0';
		if (lstat(prefix, &sb) != 0)
			return why_fail(why, -errno, "cannot examine '%s': %s",
					prefix, strerror(errno));
		bool last = n == len;
		int rc = check_entry(prefix, &sb, runner, last, why);
		if (rc)
			return rc;
		if (last && (dir ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode)))
			return why_fail(why, -EINVAL, "%s: not a %s", prefix,
					dir ? "folder" : "regular file");
	}
	if (st)
		*st = sb;
	return 0;
}

int trust_check_links(const struct trust_links *links, uid_t runner,
		      const char *target, uid_t target_uid, char **why)
{
	char owner[TRUST_USER_TEXT], run[TRUST_USER_TEXT], tgt[TRUST_USER_TEXT];
	for (size_t i = 0; i < links->n; i++) {
		uid_t uid = links->uid[i];
		if (uid == 0 || uid == runner)
			continue;
		return why_fail(
		    why, -EPERM,
		    "symlink %s: owned by %s, but stages run as %s (its "
		    "target %s is owned by %s): " RULE,
		    links->path[i], trust_user_text(uid, owner, sizeof(owner)),
		    trust_user_text(runner, run, sizeof(run)), target,
		    trust_user_text(target_uid, tgt, sizeof(tgt)));
	}
	return 0;
}

int trust_check_path(const char *path, uid_t runner, bool dir, char **why)
{
	char real[PATH_MAX];
	struct trust_links links = {0};
	struct stat st;
	int rc = trust_resolve(path, real, &links);
	if (rc && rc != -ENOMEM)
		rc = why_fail(why, rc, "cannot examine '%s': %s", path,
			      strerror(-rc));
	if (rc == 0)
		rc = trust_check_real(real, runner, dir, &st, why);
	if (rc == 0)
		rc = trust_check_links(&links, runner, real, st.st_uid, why);
	trust_links_release(&links);
	return rc;
}

int trust_enter(uid_t owner, gid_t owner_gid, struct mf_fscreds *saved)
{
	memset(saved, 0, sizeof(*saved));
	if (geteuid() != 0 || owner == 0)
		return 0;
	struct mf_user u;
	int rc = mf_user_init(&u, owner, owner_gid);
	if (rc)
		return rc;
	rc = mf_fscreds_enter(saved, &u);
	mf_user_release(&u);
	return rc;
}

static bool is_executable(const char *path)
{
	struct stat sb;
	if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode))
		return false;
	return faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0;
}

/* Looks prog up in path (the stages' PATH); relative entries are relative
 * to dir, the stages' working directory, as execvp in the stage would see
 * them. */
static int search_path(const char *path, const char *dir, const char *prog,
		       char **out)
{
	for (const char *p = path;;) {
		const char *elem = p, *end = strchrnul(p, ':');
		int len = (int)(end - p), rc;
		char *cand;
		if (len == 0) {
			elem = ".";
			len = 1;
		}
		if (elem[0] == '/')
			rc = asprintf(&cand, "%.*s/%s", len, elem, prog);
		else
			rc =
			    asprintf(&cand, "%s/%.*s/%s", dir, len, elem, prog);
		if (rc < 0)
			return -ENOMEM;
		if (is_executable(cand)) {
			*out = cand;
			return 0;
		}
		free(cand);
		if (*end == '\0')
			return -ENOENT;
		p = end + 1;
	}
}

/* The stages' PATH: the spec's env sets it, or the default. */
static const char *stage_path(const struct mf_spec *spec)
{
	for (size_t i = 0; i < spec->n_env; i++)
		if (!strcmp(spec->env[i].name, "PATH"))
			return spec->env[i].value;
	return TRUST_STAGE_PATH;
}

int trust_program(const struct mf_spec *spec, const char *what,
		  const char *prog, char **out, char **err)
{
	char *path;
	int rc;
	if (!strchr(prog, '/')) {
		rc = search_path(stage_path(spec), spec->dir, prog, out);
		if (rc == -ENOENT &&
		    asprintf(err, "%s%s'%s' not found in PATH",
			     what ? what : "", what ? ": " : "", prog) < 0)
			*err = NULL;
		return rc;
	}
	if (prog[0] == '/')
		path = strdup(prog);
	else if (asprintf(&path, "%s/%s", spec->dir, prog) < 0)
		path = NULL;
	if (!path)
		return -ENOMEM;
	if (!is_executable(path)) {
		rc = faccessat(AT_FDCWD, path, F_OK, AT_EACCESS) == 0 ? -EACCES
								      : -ENOENT;
		if (asprintf(err, "%s%s'%s' %s", what ? what : "",
			     what ? ": " : "", prog,
			     rc == -ENOENT ? "not found"
					   : "is not an executable file") < 0)
			*err = NULL;
		free(path);
		return rc;
	}
	*out = path;
	return 0;
}

int trust_stage_program(const struct mf_spec *spec, size_t i, char **out,
			char **err)
{
	char what[32];
	snprintf(what, sizeof(what), "stage %zu", i);
	return trust_program(spec, what, spec->stages[i].argv[0], out, err);
}
