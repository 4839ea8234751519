/*
 * fuse_deps.c - what one registration of a spec depends on, for the
 * pipelines watcher (fuse_specs.c): the folders and files that
 * mf_engine_spec_watch_list names, an inotify watch on each folder, and the
 * identity (stat) of each folder and file as it was just before the
 * registration.
 *
 * With inotify, an event on a watched folder that names an entry that
 * matters (a dep's name, or an entry an input glob's component matches)
 * sends the spec back to registration. Where inotify cannot help (a watch
 * limit, a network filesystem, or -o spec_poll), the watcher compares the
 * identities instead: inode, size, mtime and ctime of every deps and input
 * file, and of every folder (an entry added or removed changes its mtime).
 *
 * Not for: deciding when to register or look (fuse_specs.c).
 */
#include "fuse_i.h"
#include "fuse_specs_i.h"

#include <assert.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>

/* ---- the watches of one inotify instance ---- */

/* Counts one more holder of wd, just added. Caller holds w->mu. */
static int watch_hold(struct mfs_watches *w, int wd)
{
	assert(mf_mutex_held(&w->mu));
	for (size_t i = 0; i < w->n; i++)
		if (w->v[i].wd == wd) {
			w->v[i].refs++;
			return wd;
		}
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 16;
		struct mfs_wd_ref *v = realloc(w->v, cap * sizeof(*v));
		if (!v) {
			inotify_rm_watch(w->ifd, wd);
			return -ENOMEM;
		}
		w->v = v;
		w->cap = cap;
	}
	w->v[w->n].wd = wd;
	w->v[w->n++].refs = 1;
	return wd;
}

/* The watch is added under w->mu: a last holder's put of the same wd
 * cannot remove it between the add and the count. */
int mfs_watch_get(struct mfs_watches *w, const char *path)
{
	pthread_mutex_lock(&w->mu);
	int wd = inotify_add_watch(w->ifd, path, MFS_WATCH_MASK);
	wd = wd < 0 ? -errno : watch_hold(w, wd);
	pthread_mutex_unlock(&w->mu);
	return wd;
}

void mfs_watch_put(struct mfs_watches *w, int wd)
{
	pthread_mutex_lock(&w->mu);
	for (size_t i = 0; wd >= 0 && i < w->n; i++) {
		if (w->v[i].wd != wd)
			continue;
		assert(w->v[i].refs > 0);
		if (--w->v[i].refs == 0) {
			inotify_rm_watch(w->ifd, wd);
			w->v[i] = w->v[--w->n];
		}
		break;
	}
	pthread_mutex_unlock(&w->mu);
}

bool mfs_watch_gone(struct mfs_watches *w, int wd)
{
	bool had = false;
	pthread_mutex_lock(&w->mu);
	for (size_t i = 0; i < w->n && !had; i++)
		if (w->v[i].wd == wd) {
			w->v[i] = w->v[--w->n];
			had = true;
		}
	pthread_mutex_unlock(&w->mu);
	return had;
}

bool mfs_remote_fs(const char *path)
{
	static const unsigned long remote[] = {
	    0x6969, /* NFS */
	    0x517b, /* SMB */
	    0xff534d42, /* CIFS */
	    0xfe534d42, /* SMB2 */
	    0x00c36400, /* CephFS */
	    0x65735546, /* FUSE: sshfs, s3fs, ... */
	    0x0bd00bd0, /* Lustre */
	    0x47504653, /* GPFS */
	    0x5346414f, /* AFS */
	    0x01021997, /* 9p */
	    0x73757245, /* Coda */
	    0x7461636f, /* OCFS2 */
	    0x01161970, /* GFS2 */
	    0x19830326, /* BeeGFS */
	    0x20030528, /* OrangeFS */
	};
	struct statfs sf;
	if (statfs(path, &sf) != 0)
		return false;
	for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++)
		if ((unsigned long)sf.f_type == remote[i])
			return true;
	return false;
}

/* ---- one registration's dependencies ---- */

/* A path's identity as stat(2) gave it, or the errno it failed with. */
struct ident {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
	int err;
};

struct mfs_deps {
	struct mf_engine_watch w;
	int *wd; /* per w.dirs; -1: not watched */
	struct ident *dir_id; /* per w.dirs */
	struct ident *file_id; /* per w.files */
	bool polled;
	atomic_uint_fast64_t checked_ns; /* read by the watcher meanwhile */
};

static void ident_of(const char *path, struct ident *out)
{
	struct stat st;
	memset(out, 0, sizeof(*out));
	if (stat(path, &st) != 0) {
		out->err = errno;
		return;
	}
	out->dev = st.st_dev;
	out->ino = st.st_ino;
	out->size = st.st_size;
	out->mtime = st.st_mtim;
	out->ctime = st.st_ctim;
}

static bool ident_same(const struct ident *a, const struct ident *b)
{
	return a->err == b->err && a->dev == b->dev && a->ino == b->ino &&
	    a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
	    a->mtime.tv_nsec == b->mtime.tv_nsec &&
	    a->ctime.tv_sec == b->ctime.tv_sec &&
	    a->ctime.tv_nsec == b->ctime.tv_nsec;
}

bool mfs_deps_changed(struct mfs_deps *d)
{
	bool changed = false;
	struct ident now;
	for (size_t i = 0; i < d->w.n_dirs; i++) {
		ident_of(d->w.dirs[i].path, &now);
		changed |= !ident_same(&now, &d->dir_id[i]);
		d->dir_id[i] = now;
	}
	for (size_t i = 0; i < d->w.n_files; i++) {
		ident_of(d->w.files[i], &now);
		changed |= !ident_same(&now, &d->file_id[i]);
		d->file_id[i] = now;
	}
	atomic_store(&d->checked_ns, mf_mono_ns());
	return changed;
}

/* Watches every folder of d; on the first that cannot be watched, or is
 * remote, says why and stops. Folders watched stay watched (their events
 * still count). */
static void watch_all(struct mfs_watches *w, struct mfs_deps *d, char *why,
		      size_t why_len)
{
	dev_t checked = 0;
	bool any = false;
	for (size_t i = 0; i < d->w.n_dirs; i++) {
		const char *path = d->w.dirs[i].path;
		int wd = mfs_watch_get(w, path);
		if (wd == -ENOENT || wd == -ENOTDIR)
			continue; /* gone meanwhile: the folder above tells */
		if (wd < 0) {
			snprintf(why, why_len, "cannot watch '%s': %s", path,
				 strerror(-wd));
			d->polled = true;
			return;
		}
		d->wd[i] = wd;
		struct stat st;
		if (stat(path, &st) != 0 || (any && st.st_dev == checked))
			continue;
		any = true;
		checked = st.st_dev;
		if (mfs_remote_fs(path)) {
			snprintf(why, why_len,
				 "'%s' is on a network or FUSE filesystem",
				 path);
			d->polled = true;
			return;
		}
	}
}

int mfs_deps_new(struct mfs_watches *w, const struct mf_engine_spec *spec,
		 bool inotify, struct mfs_deps **out, char *why, size_t why_len)
{
	struct mfs_deps *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	int rc = mf_engine_spec_watch_list(spec, &d->w);
	if (rc)
		goto fail;
	size_t nd = d->w.n_dirs, nf = d->w.n_files;
	d->wd = malloc((nd ? nd : 1) * sizeof(*d->wd));
	d->dir_id = calloc(nd ? nd : 1, sizeof(*d->dir_id));
	d->file_id = calloc(nf ? nf : 1, sizeof(*d->file_id));
	if (!d->wd || !d->dir_id || !d->file_id) {
		rc = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < nd; i++)
		d->wd[i] = -1;
	why[0] = '\0';
	d->polled = !inotify || nd > MFS_DEPS_WATCH_MAX;
	if (nd > MFS_DEPS_WATCH_MAX)
		snprintf(why, why_len, "%zu folders to watch, more than %d", nd,
			 MFS_DEPS_WATCH_MAX);
	else if (inotify)
		watch_all(w, d, why, why_len);
	(void)mfs_deps_changed(d);
	*out = d;
	return 0;
fail:
	mfs_deps_free(w, d);
	return rc;
}

void mfs_deps_free(struct mfs_watches *w, struct mfs_deps *d)
{
	if (!d)
		return;
	for (size_t i = 0; d->wd && i < d->w.n_dirs; i++)
		mfs_watch_put(w, d->wd[i]);
	mf_engine_watch_release(&d->w);
	free(d->wd);
	free(d->dir_id);
	free(d->file_id);
	free(d);
}

bool mfs_deps_polled(const struct mfs_deps *d)
{
	return d->polled;
}

uint64_t mfs_deps_checked(const struct mfs_deps *d)
{
	return atomic_load(&d->checked_ns);
}

bool mfs_deps_hit(const struct mfs_deps *d, int wd, uint32_t mask,
		  const char *name)
{
	bool self = mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED);
	for (size_t i = 0; i < d->w.n_dirs; i++) {
		const struct mf_engine_watch_dir *dir = &d->w.dirs[i];
		if (d->wd[i] != wd)
			continue;
		if (self)
			return true;
		if (!name)
			continue;
		if (dir->glob ? fnmatch(dir->name, name, FNM_PERIOD) == 0
			      : strcmp(dir->name, name) == 0)
			return true;
	}
	return false;
}

bool mfs_deps_drop_wd(struct mfs_deps *d, int wd)
{
	bool had = false;
	for (size_t i = 0; i < d->w.n_dirs; i++)
		if (d->wd[i] == wd) {
			d->wd[i] = -1;
			had = true;
		}
	return had;
}
