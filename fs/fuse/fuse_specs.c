/*
 * fuse_specs.c - the pipelines folder: every *.yaml and *.yml in it is
 * registered with the engine; a spec that fails to load is logged with its
 * FILE:LINE:COL message and skipped. A thread follows the folder with
 * inotify, so specs added, changed or removed take effect while mounted
 * (well within a second: events are coalesced for 50 ms, 250 ms at most).
 *
 * A file is registered again when its identity (device, inode, size,
 * mtime, ctime) changes; a removed or broken file's registration is
 * forgotten (mf_engine_unregister), which moves or removes its name's
 * symlink. Fingerprint directories stay while the catalog knows them.
 *
 * A name also follows its spec's deps and inputs (DESIGN.md: a name points
 * at the fingerprint of the spec as it is now). Each registration records
 * what it depends on (fuse_deps.c): the folders of its deps and every
 * folder its input globs walk are watched, and an event that names an
 * entry that matters there registers the spec again, as an edit of the
 * spec file does. Editors replace files by rename, so folders are watched,
 * never files. Where inotify cannot see changes (the user's watch limit,
 * more than MFS_DEPS_WATCH_MAX folders, a network filesystem, or
 * -o spec_poll=SECONDS), the spec is "polled": the watcher compares the
 * stat identities of its deps, inputs and folders every poll period (1 s,
 * or spec_poll), and as soon as a name is resolved (lookup, readlink) when
 * that was last done over RECHECK_MS ago; FUSE threads only kick the
 * watcher, they never wait for it.
 *
 * Registrations run on worker threads (fuse_register.c), at most
 * MFS_REG_THREADS at once and one per spec file, each bounded by
 * -o spec_timeout: a spec whose deps or inputs are slow to read delays no
 * other. The watcher only decides what to register and publishes; it
 * never reads a spec, its deps or its inputs itself.
 *
 * The specs lock guards memory only (fuse_specs_i.h): the folder is read,
 * watches added, registrations forgotten in the engine and the kernel
 * told with the lock released, and what they found recorded under it
 * afterwards, so that no slow folder, busy catalog or kernel delays a
 * registration, a refresh or the watcher.
 *
 * Not for: the watcher's thread, its inotify events and its sleeps
 * (fuse_specs_watch.c), or what the tree looks like (fuse_model.c).
 */
#include "fuse_i.h"
#include "fuse_specs_i.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS 1000 /* the default period of a polled spec */

int mfs_specs_new(struct mfs *m, struct mfs_specs **out)
{
	struct mfs_specs *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = mf_mutex_init(&s->pub_lock);
	if (rc == 0 && (rc = mf_mutex_init(&s->lock)) != 0)
		pthread_mutex_destroy(&s->pub_lock);
	if (rc == 0 && (rc = mf_mutex_init(&s->watches.mu)) != 0) {
		pthread_mutex_destroy(&s->lock);
		pthread_mutex_destroy(&s->pub_lock);
	}
	if (rc) {
		free(s);
		return rc;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* as mf_mono_ns */
	pthread_cond_init(&s->done_cv, &ca);
	pthread_condattr_destroy(&ca);
	s->wd = -1;
	s->poll_all = m->o.spec_poll_s > 0;
	s->poll_ns =
	    (s->poll_all ? m->o.spec_poll_s * 1000ULL : POLL_MS) * NS_PER_MS;
	s->timeout_ns =
	    (m->o.spec_timeout_s ? m->o.spec_timeout_s : MFS_SPEC_TIMEOUT_S) *
	    1000ULL * NS_PER_MS;
	atomic_init(&s->any_polled, false);
	atomic_init(&s->kick_ns, 0);
	/* before the first scan: its registrations add watches */
	s->watches.ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	s->wfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->kfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->jfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->watches.ifd < 0 || s->wfd < 0 || s->kfd < 0 || s->jfd < 0) {
		rc = -errno;
		mfs_specs_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void mfs_specs_free(struct mfs_specs *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		mfs_deps_free(&s->watches, s->files[i].deps);
		free(s->files[i].path);
	}
	free(s->files);
	free(s->watches.v);
	if (s->watches.ifd >= 0)
		close(s->watches.ifd);
	if (s->wfd >= 0)
		close(s->wfd);
	if (s->kfd >= 0)
		close(s->kfd);
	if (s->jfd >= 0)
		close(s->jfd);
	pthread_cond_destroy(&s->done_cv);
	pthread_mutex_destroy(&s->watches.mu);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->pub_lock);
	free(s);
}

static bool is_spec_name(const char *name)
{
	size_t n = strlen(name);
	if (name[0] == '.')
		return false; /* editors' temporary files */
	for (const char *c = name; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return false; /* a line break would pass into the
				       * store's metadata and the log */
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

struct spec_file *mfs_specs_find(struct mfs_specs *s, const char *path)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->files[i].path, path) == 0)
			return &s->files[i];
	return NULL;
}

static struct spec_file *file_get(struct mfs_specs *s, const char *path)
{
	struct spec_file *f = mfs_specs_find(s, path);
	if (f)
		return f;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		void *p = realloc(s->files, cap * sizeof(*s->files));
		if (!p)
			return NULL;
		s->files = p;
		s->cap = cap;
	}
	f = &s->files[s->n];
	memset(f, 0, sizeof(*f));
	if (!(f->path = strdup(path)))
		return NULL;
	s->n++;
	return f;
}

/* What one look at the pipelines folder found, read with no lock. */
struct scan {
	uint64_t ticket; /* s->scan_ticket when it started */
	uint64_t at_ns; /* when it started */
	int err; /* the folder did not open: errno */
	struct scan_entry {
		char *path;
		struct stat st;
	} * v;
	size_t n, cap;
};

static void scan_release(struct scan *sc)
{
	for (size_t i = 0; i < sc->n; i++)
		free(sc->v[i].path);
	free(sc->v);
}

static int scan_add(struct scan *sc, const char *path, const struct stat *st)
{
	if (sc->n == sc->cap) {
		size_t cap = sc->cap ? 2 * sc->cap : 16;
		void *p = realloc(sc->v, cap * sizeof(*sc->v));
		if (!p)
			return -ENOMEM;
		sc->v = p;
		sc->cap = cap;
	}
	if (!(sc->v[sc->n].path = strdup(path)))
		return -ENOMEM;
	sc->v[sc->n++].st = *st;
	return 0;
}

/* Lists the spec files of the folder with their identities. No lock. */
static void scan_folder(const char *dir_path, struct scan *sc)
{
	DIR *dir = opendir(dir_path);
	if (!dir) {
		sc->err = errno;
		return;
	}
	struct dirent *de;
	while ((de = readdir(dir))) {
		char path[4096];
		struct stat st;
		if (!is_spec_name(de->d_name) ||
		    snprintf(path, sizeof(path), "%s/%s", dir_path,
			     de->d_name) >= (int)sizeof(path) ||
		    stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (scan_add(sc, path, &st) != 0) {
			sc->err = ENOMEM; /* looked at again at the retry */
			break;
		}
	}
	closedir(dir);
}

/* Records what sc found and registers the files that changed (on
 * workers: they show when registered); a scan older than one already
 * recorded is dropped. True when the folder just went missing (to log).
 * Caller holds s->lock. */
static bool scan_apply(struct mfs *m, struct mfs_specs *s,
		       const struct scan *sc)
{
	assert(mf_mutex_held(&s->lock));
	if (sc->ticket <= s->scan_applied)
		return false; /* a newer look at the folder was recorded */
	s->scan_applied = sc->ticket;
	s->scanned_ns = sc->at_ns;
	if (sc->err == ENOMEM) { /* a partial list: keep what was seen */
		s->retry = true;
		return false;
	}
	bool went = sc->err && !s->dir_missing;
	s->dir_missing = sc->err != 0;
	for (size_t i = 0; i < s->n; i++)
		s->files[i].seen = false;
	for (size_t i = 0; i < sc->n; i++) {
		struct spec_file *f = file_get(s, sc->v[i].path);
		if (!f)
			continue;
		f->seen = true;
		if (!same_file(&f->id, &sc->v[i].st)) {
			f->id = sc->v[i].st; /* what the registration reads */
			mfs_reg_submit(m, f, false);
		}
	}
	return went;
}
/*
 * Registers again the specs whose deps or inputs changed: those an event
 * marked, and the polled ones not checked for age_ns whose identities
 * differ (compared by their registration, on a worker: a stat that hangs
 * holds no lock); and those whose registration met a catalog outage,
 * once their retry is due.
 */
static void follow_deps(struct mfs *m, struct mfs_specs *s, uint64_t age_ns)
{
	bool polled = s->dir_remote || s->poll_all;
	for (size_t i = 0; i < s->n; i++) {
		struct spec_file *f = &s->files[i];
		if (f->seen && f->retry_ns && !f->job &&
		    mf_mono_ns() >= f->retry_ns) { /* after a catalog outage */
			f->dirty = false;
			f->retry_ns = 0;
			mfs_reg_submit(m, f, false);
			continue;
		}
		if (!f->seen || !f->deps)
			continue;
		polled |= mfs_deps_polled(f->deps);
		if (f->dirty) {
			f->dirty = false;
			mfs_reg_submit(m, f, false);
		} else if (!f->job && mfs_deps_polled(f->deps) &&
			   mf_mono_ns() - mfs_deps_checked(f->deps) >= age_ns) {
			mfs_reg_submit(m, f, true);
		}
	}
	atomic_store(&s->any_polled, polled);
}

void mfs_forget_begin(struct mfs_specs *s, struct spec_file *f,
		      struct mfs_forget *g)
{
	g->path = strdup(f->path);
	if (!g->path) { /* f->forget stays: tried again */
		s->retry = true;
		return;
	}
	memcpy(g->keep, f->fp, sizeof(g->keep));
	g->rc = 0;
	f->forget = false;
	f->unregistering = true;
}

void mfs_forget_run(struct mfs *m, struct mfs_forget *g)
{
	if (g->path)
		g->rc = mf_engine_unregister(m->eng, g->path,
					     g->keep[0] ? g->keep : NULL);
}

void mfs_forget_end(struct mfs_specs *s, struct mfs_forget *g)
{
	if (!g->path)
		return;
	struct spec_file *f = mfs_specs_find(s, g->path);
	if (f) { /* an entry being unregistered is never removed */
		f->unregistering = false;
		f->forget |= g->rc == -EBUSY;
		s->retry |= f->forget;
	}
	free(g->path);
	g->path = NULL;
}

/* What a pass forgets with no lock held: unregistrations, and the deps
 * of entries that left (their watches go). */
struct forgets {
	struct mfs_forget *v;
	size_t n;
	struct mfs_deps **deps;
	size_t n_deps;
};

/* Takes f out of s (it left the folder and is forgotten); its deps go
 * to fg, to free without the lock. Caller holds s->lock. */
static void file_remove(struct mfs_specs *s, struct spec_file *f,
			struct forgets *fg)
{
	assert(mf_mutex_held(&s->lock));
	if (f->deps)
		fg->deps[fg->n_deps++] = f->deps;
	free(f->path);
	*f = s->files[--s->n];
}

/* Decides what to forget: what left the folder or failed; what is busy
 * is kept. A file with a registration or unregistration under way keeps
 * its entry (and its registrations in the engine, which that one may be
 * adding to) until it returns. True when a name went. Caller holds
 * s->lock; fg is filled for forget_run. */
static bool forget_gone(struct mfs_specs *s, struct forgets *fg)
{
	assert(mf_mutex_held(&s->lock));
	bool changed = false;
	s->retry = false;
	fg->v = calloc(s->n ? s->n : 1, sizeof(*fg->v));
	fg->deps = calloc(s->n ? s->n : 1, sizeof(*fg->deps));
	if (!fg->v || !fg->deps) {
		s->retry = true;
		return false;
	}
	for (size_t i = 0; i < s->n;) {
		struct spec_file *f = &s->files[i];
		if (!f->seen) { /* a missing folder holds no spec */
			changed |= f->fp[0] != 0;
			f->fp[0] = 0;
			f->forget = true;
		}
		bool busy = f->job || f->unregistering;
		if (!busy && f->forget) {
			mfs_forget_begin(s, f, &fg->v[fg->n++]);
		} else if (!busy && !f->seen) {
			file_remove(s, f, fg); /* another entry is at i now */
			continue;
		}
		i++;
	}
	s->retry |= s->dir_missing;
	/* a registration waits for a thread that could not be made */
	s->retry |= s->queue && s->active < MFS_REG_THREADS;
	return changed;
}

/* Unregisters what forget_gone chose, with no lock, then records it and
 * takes out the entries that left; frees fg. */
static void forget_run(struct mfs *m, struct mfs_specs *s, struct forgets *fg)
{
	for (size_t i = 0; i < fg->n; i++)
		mfs_forget_run(m, &fg->v[i]);
	bool retry = false;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < fg->n; i++) {
		if (!fg->v[i].path)
			continue;
		struct spec_file *f = mfs_specs_find(s, fg->v[i].path);
		mfs_forget_end(s, &fg->v[i]);
		if (!f)
			continue;
		if (!f->seen && !f->forget && !f->job)
			file_remove(s, f, fg);
		else if (f->again && f->seen && !f->job && !s->stopping)
			mfs_reg_submit(m, f, false);
		retry |= f->forget;
	}
	pthread_mutex_unlock(&s->lock);
	if (retry) /* this may run on another thread than the watcher's */
		mfs_specs_wake(s);
	for (size_t i = 0; i < fg->n_deps; i++)
		mfs_deps_free(&s->watches, fg->deps[i]);
	free(fg->deps);
	free(fg->v);
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

/* Keeps in v the specs the folder's files registered last, sorted by
 * path: *k of them. Caller holds s->lock. */
static void ours_only(struct mfs_specs *s, struct mf_engine_spec_info *v,
		      size_t n, size_t *k)
{
	assert(mf_mutex_held(&s->lock));
	*k = 0;
	for (size_t i = 0; i < n; i++) {
		bool ours = false;
		for (size_t j = 0; j < s->n && !ours; j++)
			ours = s->files[j].fp[0] &&
			    strcmp(s->files[j].path, v[i].path) == 0 &&
			    strcmp(s->files[j].fp, v[i].fp) == 0;
		if (!ours)
			continue;
		struct mf_engine_spec_info t = v[*k];
		v[(*k)++] = v[i];
		v[i] = t;
	}
}

void mfs_specs_publish(struct mfs *m, struct mfs_specs *s)
{
	struct mf_engine_spec_info *v;
	size_t n, k;
	/* one at a time, each reading the engine and s afresh: the last to
	 * run shows the latest of both */
	pthread_mutex_lock(&s->pub_lock);
	if (mf_engine_list_specs(m->eng, &v, &n) != 0) {
		pthread_mutex_unlock(&s->pub_lock);
		return;
	}
	pthread_mutex_lock(&s->lock);
	ours_only(s, v, n, &k);
	pthread_mutex_unlock(&s->lock);
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
		for (size_t i = 0; i < nc; i++)
			forget_name(m, changed[i]);
		mf_strv_free(changed, nc);
	}
	pthread_mutex_unlock(&s->pub_lock);
	mf_engine_spec_info_free(v, n);
}

void mfs_specs_wake(struct mfs_specs *s)
{
	uint64_t one = 1;
	if (write(s->jfd, &one, sizeof(one)) < 0)
		return; /* the counter is full: it wakes anyway */
}

/* One look at everything: registrations past their limit, the folder,
 * the marked and due specs, what to forget. Polled specs last checked
 * age_ns ago or more are checked. Registrations started here publish
 * what they find when they return. The folder is read and registrations
 * forgotten with s->lock released. */
void mfs_specs_pass(struct mfs *m, uint64_t age_ns)
{
	struct mfs_specs *s = m->specs;
	struct scan sc = {.at_ns = mf_mono_ns()};
	struct forgets fg = {0};
	pthread_mutex_lock(&s->lock);
	bool changed = mfs_reg_expire(m, s);
	sc.ticket = ++s->scan_ticket;
	pthread_mutex_unlock(&s->lock);
	scan_folder(m->o.pipelines_dir, &sc);
	pthread_mutex_lock(&s->lock);
	bool went = scan_apply(m, s, &sc);
	follow_deps(m, s, age_ns);
	changed |= forget_gone(s, &fg);
	pthread_mutex_unlock(&s->lock);
	if (went)
		mfs_logf(m, MFS_LOG_WARN, "pipelines folder '%s': %s",
			 m->o.pipelines_dir, strerror(sc.err));
	scan_release(&sc);
	forget_run(m, s, &fg);
	if (changed)
		mfs_specs_publish(m, s);
}

void mfs_specs_scan(struct mfs *m)
{
	struct mfs_specs *s = m->specs;
	mfs_specs_pass(m, UINT64_MAX);
	/* the mount serves once every spec is registered, or once it has
	 * waited MFS_SPEC_START_S (less with a shorter limit): one still
	 * being read shows when done, or fails at its limit */
	uint64_t wait = MFS_SPEC_START_S * 1000ULL * NS_PER_MS;
	if (s->timeout_ns < wait)
		wait = s->timeout_ns;
	pthread_mutex_lock(&s->lock);
	if (!mfs_reg_wait(s, NULL, mf_mono_ns() + wait))
		for (size_t i = 0; i < s->n; i++)
			if (s->files[i].job)
				mfs_logf(m, MFS_LOG_WARN,
					 "spec '%s': still reading its deps "
					 "and inputs; it shows when done",
					 s->files[i].path);
	pthread_mutex_unlock(&s->lock);
	mfs_specs_publish(m, s);
}

void mfs_specs_refresh(struct mfs *m, const char *fp)
{
	struct mfs_specs *s = m->specs;
	struct mf_strv paths = {0};
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++) {
		if (strcmp(s->files[i].fp, fp) != 0)
			continue;
		memset(&s->files[i].id, 0, sizeof(s->files[i].id));
		(void)mf_strv_push(&paths, strdup(s->files[i].path));
	}
	pthread_mutex_unlock(&s->lock);
	mfs_specs_pass(m, UINT64_MAX);
	/* the caller opens again: wait for the new registration, as long as
	 * it may take */
	uint64_t until = mf_mono_ns() + s->timeout_ns + 1000 * NS_PER_MS;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < paths.n; i++)
		(void)mfs_reg_wait(s, paths.v[i], until);
	pthread_mutex_unlock(&s->lock);
	mf_strv_release(&paths);
}

void mfs_specs_resolved(struct mfs *m)
{
	struct mfs_specs *s = m->specs;
	if (!s || !atomic_load(&s->any_polled))
		return;
	uint64_t now = mf_mono_ns(), last = atomic_load(&s->kick_ns);
	if (now - last < RECHECK_MS * NS_PER_MS ||
	    !atomic_compare_exchange_strong(&s->kick_ns, &last, now))
		return;
	uint64_t one = 1;
	if (write(s->kfd, &one, sizeof(one)) < 0)
		return; /* the counter is full: a kick is pending anyway */
}
