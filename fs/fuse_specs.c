/*
 * fuse_specs.c - the pipelines folder: every *.yaml and *.yml in it is
 * registered with the engine; a spec that fails to load is logged with its
 * FILE:LINE:COL message and skipped. A thread follows the folder with
 * inotify, so specs added, changed or removed take effect while mounted
 * (well within a second: events are coalesced for 50 ms).
 *
 * A file is registered again when its identity (device, inode, size,
 * mtime, ctime) changes; a removed or broken file's registration is
 * forgotten (mf_engine_unregister), which moves or removes its name's
 * symlink. Fingerprint directories stay while the catalog knows them.
 *
 * Not for: what the tree looks like (fuse_model.c).
 */
#include "fuse_i.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define COALESCE_MS 50
#define RETRY_MS 500 /* a registration to forget is in use, or no folder */

struct spec_file {
	char *path;
	struct stat id; /* what was registered */
	char fp[MF_FP_HEX_LEN + 1]; /* "" when it failed to load */
	bool seen; /* in the folder at this scan */
	bool forget; /* still to unregister (was busy) */
};

struct mfs_specs {
	pthread_mutex_t lock; /* guards the files and one scan at a time */
	struct spec_file *files;
	size_t n, cap;
	bool retry; /* something to do again without an event */
	bool dir_missing; /* logged once until it appears */
	int ifd, wfd, wd; /* inotify, wake-up eventfd, watch */
	pthread_t thread;
	bool started;
};

int mfs_specs_new(struct mfs *m, struct mfs_specs **out)
{
	(void)m;
	struct mfs_specs *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->ifd = s->wfd = s->wd = -1;
	*out = s;
	return 0;
}

void mfs_specs_free(struct mfs_specs *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->files[i].path);
	free(s->files);
	if (s->ifd >= 0)
		close(s->ifd);
	if (s->wfd >= 0)
		close(s->wfd);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static bool is_spec_name(const char *name)
{
	size_t n = strlen(name);
	if (name[0] == '.')
		return false; /* editors' temporary files */
	return (n > 5 && strcmp(name + n - 5, ".yaml") == 0) ||
	    (n > 4 && strcmp(name + n - 4, ".yml") == 0);
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
	    a->st_size == b->st_size &&
	    a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	    a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	    a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	    a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static struct spec_file *file_get(struct mfs_specs *s, const char *path)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->files[i].path, path) == 0)
			return &s->files[i];
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		void *p = realloc(s->files, cap * sizeof(*s->files));
		if (!p)
			return NULL;
		s->files = p;
		s->cap = cap;
	}
	struct spec_file *f = &s->files[s->n];
	memset(f, 0, sizeof(*f));
	if (!(f->path = strdup(path)))
		return NULL;
	s->n++;
	return f;
}

/* Registers f's file; true when what the mount shows may have changed. */
static bool file_register(struct mfs *m, struct spec_file *f,
			  const struct stat *st)
{
	char fp[MF_FP_HEX_LEN + 1], *err = NULL;
	bool had = f->fp[0] != 0;
	f->id = *st;
	int rc = mf_engine_register(m->eng, f->path, fp, &err);
	if (rc) {
		mfs_logf(m, MFS_LOG_ERR, "%s (spec skipped)",
			 err ? err : strerror(-rc));
		free(err);
		f->fp[0] = 0;
		f->forget = true;
		return had;
	}
	if (!had || strcmp(fp, f->fp) != 0)
		mfs_logf(m, MFS_LOG_INFO, "spec '%s': fingerprint %s", f->path,
			 fp);
	memcpy(f->fp, fp, sizeof(f->fp));
	f->forget = mf_engine_unregister(m->eng, f->path, f->fp) == -EBUSY;
	return true;
}

/* Looks at every spec file of the folder; true when something changed. */
static bool scan_folder(struct mfs *m, struct mfs_specs *s)
{
	DIR *dir = opendir(m->o.pipelines_dir);
	if (!dir) {
		if (!s->dir_missing)
			mfs_logf(m, MFS_LOG_WARN, "pipelines folder '%s': %s",
				 m->o.pipelines_dir, strerror(errno));
		s->dir_missing = true;
		return false;
	}
	s->dir_missing = false;
	bool changed = false;
	struct dirent *de;
	while ((de = readdir(dir))) {
		char path[4096];
		struct stat st;
		if (!is_spec_name(de->d_name) ||
		    snprintf(path, sizeof(path), "%s/%s", m->o.pipelines_dir,
			     de->d_name) >= (int)sizeof(path) ||
		    stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		struct spec_file *f = file_get(s, path);
		if (!f)
			continue;
		f->seen = true;
		if (!same_file(&f->id, &st))
			changed |= file_register(m, f, &st);
	}
	closedir(dir);
	return changed;
}

/* Forgets what left the folder or failed; keeps what is busy. */
static bool forget_gone(struct mfs *m, struct mfs_specs *s)
{
	bool changed = false;
	s->retry = false;
	for (size_t i = 0; i < s->n;) {
		struct spec_file *f = &s->files[i];
		if (!f->seen) { /* a missing folder holds no spec */
			changed |= f->fp[0] != 0;
			f->fp[0] = 0;
			f->forget = true;
		}
		if (f->forget) {
			const char *keep = f->fp[0] ? f->fp : NULL;
			f->forget = mf_engine_unregister(m->eng, f->path,
							 keep) == -EBUSY;
			s->retry |= f->forget;
		}
		if (!f->seen && !f->forget) {
			free(f->path);
			*f = s->files[--s->n];
			continue;
		}
		i++;
	}
	s->retry |= s->dir_missing;
	return changed;
}

static int by_path(const void *a, const void *b)
{
	const struct mf_engine_spec_info *x = a, *y = b;
	return strcmp(x->path, y->path);
}

/* Makes the kernel forget a name whose target changed: its dentry and
 * the target it caches (FUSE_CAP_CACHE_SYMLINKS). */
static void forget_name(struct mfs *m, const char *name)
{
	uint32_t id;
	if (!m->se || !name)
		return;
	(void)fuse_lowlevel_notify_inval_entry(m->se, MFS_ROOT_INO, name,
					       strlen(name));
	if (mfs_link_id(m, name, &id) == 0)
		(void)fuse_lowlevel_notify_inval_inode(m->se, mfs_ino_link(id),
						       0, 0);
}

/* Shows the folder's registered specs in the tree. Caller holds s->lock. */
static void publish(struct mfs *m, struct mfs_specs *s)
{
	struct mf_engine_spec_info *v;
	size_t n, k = 0;
	if (mf_engine_list_specs(m->eng, &v, &n) != 0)
		return;
	for (size_t i = 0; i < n; i++) {
		bool ours = false;
		for (size_t j = 0; j < s->n && !ours; j++)
			ours = s->files[j].fp[0] &&
			    strcmp(s->files[j].path, v[i].path) == 0 &&
			    strcmp(s->files[j].fp, v[i].fp) == 0;
		if (!ours)
			continue;
		struct mf_engine_spec_info t = v[k];
		v[k++] = v[i];
		v[i] = t;
	}
	qsort(v, k, sizeof(*v), by_path);
	for (size_t i = 1; i < k; i++)
		for (size_t j = 0; j < i; j++)
			if (strcmp(v[i].name, v[j].name) == 0 &&
			    strcmp(v[i].fp, v[j].fp) != 0) {
				mfs_logf(m, MFS_LOG_WARN,
					 "spec '%s': name '%s' is taken by "
					 "'%s'; only its fingerprint "
					 "directory is shown",
					 v[i].path, v[i].name, v[j].path);
				break;
			}
	char **changed;
	size_t nc;
	if (mfs_ns_set_specs(m, v, k, &changed, &nc) == 0) {
		for (size_t i = 0; i < nc; i++) {
			forget_name(m, changed[i]);
			free(changed[i]);
		}
		free(changed);
	}
	mf_engine_spec_info_free(v, n);
}

void mfs_specs_scan(struct mfs *m)
{
	struct mfs_specs *s = m->specs;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++)
		s->files[i].seen = false;
	bool changed = scan_folder(m, s);
	changed |= forget_gone(m, s);
	if (changed || !m->se)
		publish(m, s);
	pthread_mutex_unlock(&s->lock);
}

void mfs_specs_refresh(struct mfs *m, const char *fp)
{
	struct mfs_specs *s = m->specs;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->files[i].fp, fp) == 0)
			memset(&s->files[i].id, 0, sizeof(s->files[i].id));
	pthread_mutex_unlock(&s->lock);
	mfs_specs_scan(m);
}

/* ---- the watcher ---- */

static void watch_add(struct mfs *m, struct mfs_specs *s)
{
	if (s->wd >= 0)
		return;
	s->wd = inotify_add_watch(s->ifd, m->o.pipelines_dir,
				  IN_CREATE | IN_DELETE | IN_MOVED_FROM |
				      IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY |
				      IN_ATTRIB | IN_DELETE_SELF |
				      IN_MOVE_SELF | IN_ONLYDIR);
}

/* Reads pending events; true when there were any. */
static bool drain(struct mfs_specs *s)
{
	char buf[8192]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	bool any = false;
	ssize_t n;
	while ((n = read(s->ifd, buf, sizeof(buf))) > 0) {
		any = true;
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			if (ev->mask &
			    (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
				if (ev->wd == s->wd && s->wd >= 0)
					inotify_rm_watch(s->ifd, s->wd);
				s->wd = -1; /* the folder went: watch for it */
			}
			p += sizeof(*ev) + ev->len;
		}
	}
	return any;
}

static void *watch_main(void *arg)
{
	struct mfs *m = arg;
	struct mfs_specs *s = m->specs;
	for (;;) {
		bool had = s->wd >= 0;
		watch_add(m, s);
		bool dirty = !had && s->wd >= 0; /* (re)appeared: look */
		pthread_mutex_lock(&s->lock);
		int timeout = s->wd < 0 || s->retry ? RETRY_MS : -1;
		pthread_mutex_unlock(&s->lock);
		struct pollfd pf[2] = {{s->ifd, POLLIN, 0},
				       {s->wfd, POLLIN, 0}};
		if (!dirty && poll(pf, 2, timeout) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		if (drain(s)) { /* an editor's save is several events */
			struct pollfd one = {s->ifd, POLLIN, 0};
			while (poll(&one, 1, COALESCE_MS) > 0 && drain(s))
				;
		}
		mfs_specs_scan(m);
	}
	return NULL;
}

int mfs_specs_start(struct mfs *m)
{
	struct mfs_specs *s = m->specs;
	s->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	s->wfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->ifd < 0 || s->wfd < 0)
		return -errno;
	int rc = -pthread_create(&s->thread, NULL, watch_main, m);
	s->started = rc == 0;
	return rc;
}

void mfs_specs_stop(struct mfs *m)
{
	struct mfs_specs *s = m->specs;
	if (!s || !s->started)
		return;
	uint64_t one = 1;
	if (write(s->wfd, &one, sizeof(one)) < 0)
		return;
	pthread_join(s->thread, NULL);
	s->started = false;
}
