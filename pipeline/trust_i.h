/*
 * trust_i.h - private to pipeline/: the ownership rules a spec, its deps,
 * its programs and its stages' folder must pass (docs/security.md,
 * "Loading a spec"), examining them with the spec owner's rights, and
 * finding the program a stage runs. spec_trust.c implements them; the
 * loader, the watch list, the fingerprint and the job planner use them.
 *
 * Not for: anything outside pipeline/.
 */
#ifndef MF_TRUST_I_H
#define MF_TRUST_I_H

#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "mf_pipeline.h"

/* The stages' PATH unless the spec's env sets one (docs/security.md). */
#define TRUST_STAGE_PATH "/usr/local/bin:/usr/bin:/bin"
/* Symlinks followed on one path, as the kernel's own limit. */
#define TRUST_LINKS_MAX 40

/* The user a spec's stages run as (the "runner"): its owner when this
 * process is root (it switches to the owner before execve), else this
 * process's own euid. */
uid_t trust_runner(uid_t owner);

/* The symlinks met while resolving a path, in order. */
struct trust_links {
	char *path[TRUST_LINKS_MAX]; /* each link, absolute; owned */
	uid_t uid[TRUST_LINKS_MAX]; /* its owner (lstat) */
	size_t n;
};
void trust_links_release(struct trust_links *l);

/*
 * Resolves path (relative paths from the working directory) component by
 * component as the kernel does, with the calling thread's rights, into
 * real (absolute, no symlink, no "." or ".."), recording in *links every
 * symlink on the way. Returns 0, or -errno of the lstat or readlink that
 * failed (-ENOENT, -EACCES, -ENOTDIR), -ELOOP after TRUST_LINKS_MAX links,
 * -ENAMETOOLONG; *links holds what was met either way (release it).
 */
int trust_resolve(const char *path, char real[PATH_MAX],
		  struct trust_links *links);

/*
 * The ownership rule on a resolved path: "/", every folder on real and
 * real itself must be owned by root or runner and writable by nobody else
 * (no write bit for others, nor for the group unless it is the owner's
 * private group). A folder on the way may be writable by others when it
 * is sticky (/tmp), since the entry after it is checked in turn; real
 * itself may not. real must be a folder when dir, else a regular file;
 * *st gets its lstat (may be NULL). Returns 0; -EPERM with *why "REAL...:
 * refused (docs/security.md, ownership)"; -errno with *why "cannot
 * examine 'PATH': ..."; -ENOMEM. *why is malloc'd, the caller frees.
 */
int trust_check_real(const char *real, uid_t runner, bool dir, struct stat *st,
		     char **why);

/*
 * The same rule for every symlink in links: each must be owned by root or
 * runner, or whoever owns it could point it elsewhere. Returns 0, or
 * -EPERM with *why naming the first link that is not, its owner, the user
 * stages run as, and target (the real path) with its owner target_uid.
 */
int trust_check_links(const struct trust_links *links, uid_t runner,
		      const char *target, uid_t target_uid, char **why);

/* trust_resolve, trust_check_real and trust_check_links of path: what a
 * dep (dir false), a program (false) or the stages' folder (true) must
 * pass. Same returns, and -errno with *why "cannot examine 'PATH': ..."
 * when path cannot be resolved. */
int trust_check_path(const char *path, uid_t runner, bool dir, char **why);

/* "name (uid N)", or "uid N" for a uid without a passwd entry, into buf. */
#define TRUST_USER_TEXT 96
const char *trust_user_text(uid_t uid, char *buf, size_t size);

/*
 * Switches the calling thread to the spec owner's filesystem credentials
 * (uid owner, gid owner_gid and the owner's groups) when this process is
 * root and the owner is not; otherwise changes nothing. Returns 0 or
 * -errno (nothing changed). Pair with mf_fscreds_leave.
 */
int trust_enter(uid_t owner, gid_t owner_gid, struct mf_fscreds *saved);

/*
 * The program stage i of spec runs, found as mf_job_start runs it:
 * argv[0] holding a '/' relative to spec->dir (or absolute), else looked
 * up in the stages' PATH (the spec's env PATH, else TRUST_STAGE_PATH),
 * relative entries from spec->dir; the first regular file the calling
 * thread may execute. Returns 0 and *out (malloc'd), or -ENOENT / -EACCES
 * with *err "stage N: 'prog' not found in PATH", "... not found", "... is
 * not an executable file" (malloc'd; may stay NULL), or -ENOMEM.
 */
int trust_stage_program(const struct mf_spec *spec, size_t i, char **out,
			char **err);

/* The same for any program prog of spec (the identity command's), the
 * messages starting with what and ": " instead of "stage N: " (what
 * NULL: with nothing). */
int trust_program(const struct mf_spec *spec, const char *what,
		  const char *prog, char **out, char **err);

#endif
