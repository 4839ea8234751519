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
 * Not for: what the tree looks like (fuse_model.c).
 */
#include "fuse_i.h"
#include "fuse_specs_i.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COALESCE_MS 50
#define COALESCE_MAX_MS 250 /* a file written without a pause is seen too */
#define RETRY_MS 500 /* a registration to forget is in use, or no folder */
#define RECHECK_MS 1000 /* a resolved name's spec checked longer ago: now */
#define POLL_MS 1000 /* the default period of a polled spec */
#define NS_PER_MS 1000000ULL

int mfs_specs_new(struct mfs *m, struct mfs_specs **out)
{
	struct mfs_specs *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = mf_mutex_init(&s->lock);
	if (rc) {
		free(s);
		return rc;
	}
	rc = mf_mutex_init(&s->watches.mu);
	if (rc) {
		pthread_mutex_destroy(&s->lock);
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

/* Looks at every spec file of the folder and registers those that
 * changed (on workers: they show when registered). */
static void scan_folder(struct mfs *m, struct mfs_specs *s)
{
	s->scanned_ns = mf_mono_ns();
	DIR *dir = opendir(m->o.pipelines_dir);
	if (!dir) {
		if (!s->dir_missing)
			mfs_logf(m, MFS_LOG_WARN, "pipelines folder '%s': %s",
				 m->o.pipelines_dir, strerror(errno));
		s->dir_missing = true;
		return;
	}
	s->dir_missing = false;
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
		if (!same_file(&f->id, &st)) {
			f->id = st; /* what the registration will read */
			mfs_reg_submit(m, f, false);
		}
	}
	closedir(dir);
}

/*
 * Registers again the specs whose deps or inputs changed: those an event
 * marked, and the polled ones not checked for age_ns whose identities
 * differ (compared by their registration, on a worker: a stat that hangs
 * holds no lock).
 */
static void follow_deps(struct mfs *m, struct mfs_specs *s, uint64_t age_ns)
{
	bool polled = s->dir_remote || s->poll_all;
	for (size_t i = 0; i < s->n; i++) {
		struct spec_file *f = &s->files[i];
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

/* Forgets what left the folder or failed; keeps what is busy. A file
 * with a registration under way keeps its entry (and its registrations in
 * the engine, which that one may be adding to) until it returns. */
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
		if (f->job) {
			i++;
			continue;
		}
		if (f->forget) {
			const char *keep = f->fp[0] ? f->fp : NULL;
			f->forget = mf_engine_unregister(m->eng, f->path,
							 keep) == -EBUSY;
			s->retry |= f->forget;
		}
		if (!f->seen && !f->forget) {
			mfs_deps_free(&s->watches, f->deps);
			free(f->path);
			*f = s->files[--s->n];
			continue;
		}
		i++;
	}
	s->retry |= s->dir_missing;
	/* a registration waits for a thread that could not be made */
	s->retry |= s->queue && s->active < MFS_REG_THREADS;
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

void mfs_specs_publish(struct mfs *m, struct mfs_specs *s)
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

/* One look at everything: registrations past their limit, the folder,
 * the marked and due specs, what to forget. Polled specs last checked
 * age_ns ago or more are checked. Registrations started here publish
 * what they find when they return. */
static void specs_pass(struct mfs *m, uint64_t age_ns)
{
	struct mfs_specs *s = m->specs;
	pthread_mutex_lock(&s->lock);
	bool changed = mfs_reg_expire(m, s);
	for (size_t i = 0; i < s->n; i++)
		s->files[i].seen = false;
	scan_folder(m, s);
	follow_deps(m, s, age_ns);
	changed |= forget_gone(m, s);
	if (changed)
		mfs_specs_publish(m, s);
	pthread_mutex_unlock(&s->lock);
}

void mfs_specs_scan(struct mfs *m)
{
	struct mfs_specs *s = m->specs;
	specs_pass(m, UINT64_MAX);
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
	mfs_specs_publish(m, s);
	pthread_mutex_unlock(&s->lock);
}

void mfs_specs_refresh(struct mfs *m, const char *fp)
{
	struct mfs_specs *s = m->specs;
	char **paths = NULL;
	size_t n = 0;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++) {
		if (strcmp(s->files[i].fp, fp) != 0)
			continue;
		memset(&s->files[i].id, 0, sizeof(s->files[i].id));
		char **p = realloc(paths, (n + 1) * sizeof(*p));
		if (p && (p[n] = strdup(s->files[i].path)))
			n++;
		paths = p ? p : paths;
	}
	pthread_mutex_unlock(&s->lock);
	specs_pass(m, UINT64_MAX);
	/* the caller opens again: wait for the new registration, as long as
	 * it may take */
	uint64_t until = mf_mono_ns() + s->timeout_ns + 1000 * NS_PER_MS;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++)
		(void)mfs_reg_wait(s, paths[i], until);
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
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

/* ---- the watcher ---- */

/* Watches the pipelines folder if it is not; true when it (re)appeared. */
static bool watch_folder(struct mfs *m, struct mfs_specs *s)
{
	if (s->wd >= 0)
		return false;
	int wd = mfs_watch_get(&s->watches, m->o.pipelines_dir);
	if (wd < 0)
		return false;
	s->wd = wd;
	s->dir_remote = mfs_remote_fs(m->o.pipelines_dir);
	if (s->dir_remote)
		atomic_store(&s->any_polled, true);
	return true;
}

/* Marks the specs an event concerns. Caller holds s->lock. */
static void on_event(struct mfs_specs *s, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) { /* events were lost: look at all */
		for (size_t i = 0; i < s->n; i++)
			s->files[i].dirty = s->files[i].deps != NULL;
		return;
	}
	const char *name = ev->len ? ev->name : NULL;
	for (size_t i = 0; i < s->n; i++) {
		struct spec_file *f = &s->files[i];
		if (f->deps && !f->dirty &&
		    mfs_deps_hit(f->deps, ev->wd, ev->mask, name))
			f->dirty = true;
		if (f->deps && (ev->mask & IN_IGNORED))
			(void)mfs_deps_drop_wd(f->deps, ev->wd);
	}
	if (ev->mask & IN_IGNORED) {
		(void)mfs_watch_gone(&s->watches, ev->wd);
		if (ev->wd == s->wd)
			s->wd = -1; /* the folder went: watch for it */
	} else if (ev->wd == s->wd &&
		   (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF))) {
		mfs_watch_put(&s->watches, s->wd); /* a new one may come */
		s->wd = -1;
	}
}

/* Reads pending events and marks what they concern; true when any. */
static bool drain(struct mfs_specs *s)
{
	char buf[8192]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	bool any = false;
	ssize_t n;
	while ((n = read(s->watches.ifd, buf, sizeof(buf))) > 0) {
		any = true;
		pthread_mutex_lock(&s->lock);
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			on_event(s, ev);
			p += sizeof(*ev) + ev->len;
		}
		pthread_mutex_unlock(&s->lock);
	}
	return any;
}

/* An editor's save is several events: waits for a pause, not for long. */
static void coalesce(struct mfs_specs *s)
{
	uint64_t end = mf_mono_ns() + COALESCE_MAX_MS * NS_PER_MS;
	struct pollfd one = {s->watches.ifd, POLLIN, 0};
	while (drain(s)) {
		uint64_t now = mf_mono_ns();
		if (now >= end)
			break;
		uint64_t left = (end - now) / NS_PER_MS;
		int ms = left < COALESCE_MS ? (int)left + 1 : COALESCE_MS;
		if (poll(&one, 1, ms) <= 0)
			break;
	}
}

/* How long the watcher may sleep: until a retry, a polled check or a
 * registration's time limit. */
static int sleep_ms(struct mfs_specs *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t due = mfs_reg_deadline(s);
	if ((s->dir_remote || s->poll_all) && /* spec files are polled too */
	    s->scanned_ns + s->poll_ns < due)
		due = s->scanned_ns + s->poll_ns;
	for (size_t i = 0; i < s->n; i++) {
		const struct mfs_deps *d = s->files[i].deps;
		if (d && s->files[i].seen && !s->files[i].job &&
		    mfs_deps_polled(d) &&
		    mfs_deps_checked(d) + s->poll_ns < due)
			due = mfs_deps_checked(d) + s->poll_ns;
	}
	int ms = s->wd < 0 || s->retry ? RETRY_MS : -1;
	pthread_mutex_unlock(&s->lock);
	if (due == UINT64_MAX)
		return ms;
	uint64_t now = mf_mono_ns();
	uint64_t wait = due > now ? (due - now + NS_PER_MS - 1) / NS_PER_MS : 0;
	if (wait > INT_MAX)
		wait = INT_MAX;
	return ms >= 0 && (uint64_t)ms < wait ? ms : (int)wait;
}

static void *watch_main(void *arg)
{
	struct mfs *m = arg;
	struct mfs_specs *s = m->specs;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		bool look = watch_folder(m, s); /* (re)appeared: look */
		pthread_mutex_unlock(&s->lock);
		int timeout = sleep_ms(s);
		struct pollfd pf[4] = {{s->watches.ifd, POLLIN, 0},
				       {s->wfd, POLLIN, 0},
				       {s->kfd, POLLIN, 0},
				       {s->jfd, POLLIN, 0}};
		int n = look ? 1 : poll(pf, 4, timeout);
		if (n < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		uint64_t age = s->poll_ns, count;
		if (pf[3].revents && read(s->jfd, &count, sizeof(count)) > 0 &&
		    n == 1 && !look)
			continue; /* only a registration came or went: sleep
				     again, until its limit */
		if (pf[2].revents && read(s->kfd, &count, sizeof(count)) > 0 &&
		    age > RECHECK_MS * NS_PER_MS)
			age = RECHECK_MS * NS_PER_MS; /* a name was resolved */
		if (pf[0].revents)
			coalesce(s);
		specs_pass(m, age);
	}
	return NULL;
}

int mfs_specs_start(struct mfs *m, struct fuse_session *se, dev_t dev)
{
	struct mfs_specs *s = m->specs;
	/* registrations of the first scan may still be publishing */
	pthread_mutex_lock(&s->lock);
	m->se = se;
	pthread_mutex_unlock(&s->lock);
	mf_engine_set_mount(m->eng, m->o.mountpoint, dev);
	int rc = -pthread_create(&s->thread, NULL, watch_main, m);
	s->started = rc == 0;
	return rc;
}

int mfs_specs_stop(struct mfs *m, unsigned timeout_ms)
{
	struct mfs_specs *s = m->specs;
	if (!s)
		return 0;
	uint64_t one = 1;
	if (s->started && write(s->wfd, &one, sizeof(one)) == sizeof(one)) {
		pthread_join(s->thread, NULL);
		s->started = false;
	}
	return mfs_reg_stop(s, timeout_ms);
}
