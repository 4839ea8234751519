/*
 * fuse_specs_i.h - shared by fuse_specs.c (the pipelines folder, the
 * registrations and the watcher thread) and fuse_deps.c (what one
 * registration of a spec depends on: its watches and identities). Both
 * run under mfs_specs.lock; nothing here is thread-safe on its own.
 *
 * Not for: the rest of the FUSE layer (fuse_i.h has mfs_specs_*).
 */
#ifndef MF_FUSE_SPECS_I_H
#define MF_FUSE_SPECS_I_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/inotify.h>

/* Every folder a watcher watches gets the same mask: inotify keeps one
 * watch (and one mask) per inode, shared by whoever asked for it. */
#define MFS_WATCH_MASK                                                         \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |                 \
	 IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF |             \
	 IN_MOVE_SELF | IN_ONLYDIR)

/* The inotify instance and its watches, counted by their holders. */
struct mfs_watches {
	int ifd;
	struct mfs_wd_ref {
		int wd;
		unsigned refs;
	} * v;
	size_t n, cap;
};

/* Watches the folder path (or takes one more hold on its watch): the
 * watch descriptor, or -errno (-ENOSPC past the user's watch limit). */
int mfs_watch_get(struct mfs_watches *w, const char *path);
/* Gives back a hold; the last one removes the watch. wd < 0: nothing. */
void mfs_watch_put(struct mfs_watches *w, int wd);
/* The kernel dropped wd (IN_IGNORED): forgets it. True when it was ours. */
bool mfs_watch_gone(struct mfs_watches *w, int wd);

/* True when path is on a filesystem whose changes made elsewhere (another
 * host, a server) inotify never reports: NFS, SMB, CephFS, Lustre, GPFS,
 * FUSE, ... */
bool mfs_remote_fs(const char *path);

/* What one registration of a spec depends on (fuse_deps.c). */
struct mfs_deps;

/*
 * Loads the spec at spec_path and lists what its fingerprint depends on
 * (mf_spec_watch_list): watches each folder when inotify is true, then
 * records every folder's and file's identity. Call it before registering
 * the spec, so that a change during the registration is seen. The result
 * is polled (mfs_deps_polled) when inotify is false, a watch failed, there
 * are more than MFS_DEPS_WATCH_MAX folders or one is remote; then why
 * (why_len bytes) says why, else it is "". Returns 0 and *out, or -errno
 * when the spec does not load (the registration then reports why).
 */
#define MFS_DEPS_WATCH_MAX 1024
int mfs_deps_new(struct mfs_watches *w, const char *spec_path, bool inotify,
		 struct mfs_deps **out, char *why, size_t why_len);
/* Gives back d's watches and frees it; NULL does nothing. */
void mfs_deps_free(struct mfs_watches *w, struct mfs_deps *d);

/* True when inotify does not cover d: only mfs_deps_changed sees changes. */
bool mfs_deps_polled(const struct mfs_deps *d);
/* The mf_mono_ns of the last identities taken. */
uint64_t mfs_deps_checked(const struct mfs_deps *d);
/* Stats every folder and file again: true when any identity differs from
 * the recorded one (which is then replaced). */
bool mfs_deps_changed(struct mfs_deps *d);

/* True when the inotify event (wd, mask, name: NULL when none) can change
 * what d depends on: an entry of a watched folder that matters (the dep's
 * name or an entry the glob component matches), or the folder itself. */
bool mfs_deps_hit(const struct mfs_deps *d, int wd, uint32_t mask,
		  const char *name);
/* The watch wd went (IN_IGNORED): d no longer holds it. True when it did. */
bool mfs_deps_drop_wd(struct mfs_deps *d, int wd);

#endif
