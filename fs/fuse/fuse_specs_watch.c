/*
 * fuse_specs_watch.c - the watcher's thread of the pipelines folder
 * (fuse_specs.c): it watches the folder, reads the inotify events and marks
 * the specs they concern, waits for an editor's save to end (50 ms without
 * an event, 250 ms at most), sleeps until the next retry, polled check or
 * registration limit, and then has a pass look at everything; its start
 * and stop.
 *
 * Not for: what a pass decides, registers, forgets and publishes
 * (fuse_specs.c), a registration's deps and their watches (fuse_deps.c),
 * or the registrations' workers (fuse_register.c).
 */
#include "fuse_i.h"
#include "fuse_specs_i.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#define COALESCE_MS 50
#define COALESCE_MAX_MS 250 /* a file written without a pause is seen too */
#define RETRY_MS 500 /* a registration to forget is in use, or no folder */

/* Watches the pipelines folder if it is not; true when it (re)appeared.
 * The watcher's thread alone sets s->wd; the watch and statfs are made
 * with no lock held. */
static bool watch_folder(struct mfs *m, struct mfs_specs *s)
{
	pthread_mutex_lock(&s->lock);
	bool have = s->wd >= 0;
	pthread_mutex_unlock(&s->lock);
	if (have)
		return false;
	int wd = mfs_watch_get(&s->watches, m->o.pipelines_dir);
	if (wd < 0)
		return false;
	bool remote = mfs_remote_fs(m->o.pipelines_dir);
	pthread_mutex_lock(&s->lock);
	s->wd = wd;
	s->dir_remote = remote;
	pthread_mutex_unlock(&s->lock);
	if (remote)
		atomic_store(&s->any_polled, true);
	return true;
}

/* Marks the specs an event concerns; *put: the folder's watch to give
 * back (the watch list is updated after, with no lock held). Caller
 * holds s->lock. */
static void on_event(struct mfs_specs *s, const struct inotify_event *ev,
		     int *put)
{
	assert(mf_mutex_held(&s->lock));
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
		if (ev->wd == s->wd)
			s->wd = -1; /* the folder went: watch for it */
	} else if (ev->wd == s->wd &&
		   (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF))) {
		*put = s->wd; /* a new one may come */
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
		int put = -1;
		pthread_mutex_lock(&s->lock);
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			on_event(s, ev, &put);
			p += sizeof(*ev) + ev->len;
		}
		pthread_mutex_unlock(&s->lock);
		mfs_watch_put(&s->watches, put); /* -1: nothing */
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			if (ev->mask & IN_IGNORED) /* the kernel dropped it */
				(void)mfs_watch_gone(&s->watches, ev->wd);
			p += sizeof(*ev) + ev->len;
		}
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
		if (s->files[i].retry_ns && s->files[i].seen &&
		    s->files[i].retry_ns < due)
			due = s->files[i].retry_ns; /* after a catalog outage */
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
		bool look = watch_folder(m, s); /* (re)appeared: look */
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
		mfs_specs_pass(m, age);
	}
	return NULL;
}

int mfs_specs_start(struct mfs *m, struct fuse_session *se, dev_t dev)
{
	struct mfs_specs *s = m->specs;
	/* registrations of the first scan may still be publishing */
	pthread_mutex_lock(&s->pub_lock);
	m->se = se;
	pthread_mutex_unlock(&s->pub_lock);
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
