/*
 * job_watch.c - the names on the way to each guarded input, watched while
 * its stages run. A stage may read an input by its path
 * (MATFS_INPUTS_FILE); the check once the stages ended (job_finish.c)
 * finds the file as it was, but not a symlink or a folder on its path
 * that was swapped and set back meanwhile, through which the stage read
 * another file. So every entry a path walk goes through (each folder
 * with the next component, symlinks followed as the kernel does) is
 * watched with inotify from before the first stage starts until the
 * check, and an entry created, removed or renamed in between fails the
 * attempt as a changed input. Other entries of those folders (files
 * added beside an input) do not.
 *
 * One inotify instance serves the process while any job watches (a user
 * has 128 by default, a job would use one each): the watches of every
 * running job, a table from (watch, name) to the jobs that walked it,
 * and a reference count per watch. Whoever drains the queue (each job's
 * poll loop, and each job at its check) hands every event to the jobs it
 * concerns, under one lock. A lost event (the queue overflowed) fails
 * every watching job. The walk itself runs without the lock (a path on a
 * hung filesystem holds up its own job only): an entry is looked at
 * again after it is in the table, so an event before then changes
 * nothing the walk goes on from.
 *
 * Not for: the input files' own bytes (the feeder and the identity
 * check in job_finish.c guard those) or the spec's dependencies
 * (spec_watch.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job_i.h"

#define WATCH_HOPS 40 /* symlinks in one path, as the kernel allows */
#define WATCH_MASK                                                             \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |                 \
	 IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
#define WATCH_BUCKETS 4096

/* One (watch, name) a job walked. */
struct watch_entry {
	struct watch_entry *next; /* in its bucket */
	struct job_watch *owner;
	int wd;
	char name[]; /* the component */
};

/* One inotify watch and how many entries use it. */
struct watch_ref {
	int wd;
	size_t n;
	char *dir; /* for the message */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ino_fd = -1;
static struct watch_entry *buckets[WATCH_BUCKETS];
static struct watch_ref *refs;
static size_t n_refs, cap_refs;
static size_t n_watching; /* jobs between start and end: the descriptor
			     is closed when none is left */
static uint64_t rm_count; /* watches given back so far */

static size_t bucket_of(int wd, const char *name)
{
	uint64_t h = 1469598103934665603ULL ^ (uint64_t)(unsigned)wd;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	return (size_t)(h % WATCH_BUCKETS);
}

static struct watch_ref *ref_of(int wd)
{
	for (size_t k = 0; k < n_refs; k++)
		if (refs[k].wd == wd)
			return &refs[k];
	return NULL;
}

/* The first change seen, for the message; the rest only counts. */
static void note_change(struct job_watch *w, const char *dir, const char *name)
{
	if (w->changed)
		return;
	w->changed = true;
	snprintf(w->what, sizeof w->what, "'%s' in '%s'", name,
		 dir ? dir : "?");
}

/* Under lock: one event to the jobs it concerns. */
static void dispatch(const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		for (size_t b = 0; b < WATCH_BUCKETS; b++)
			for (struct watch_entry *e = buckets[b]; e; e = e->next)
				note_change(e->owner, "the watch queue",
					    "events lost");
		return;
	}
	struct watch_ref *r = ref_of(ev->wd);
	if (!r)
		return; /* a watch given back already */
	if (ev->mask &
	    (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED)) {
		/* the folder itself went: every job that walked it */
		for (size_t b = 0; b < WATCH_BUCKETS; b++)
			for (struct watch_entry *e = buckets[b]; e; e = e->next)
				if (e->wd == ev->wd)
					note_change(e->owner, r->dir, ".");
		return;
	}
	if (!ev->len)
		return;
	for (struct watch_entry *e = buckets[bucket_of(ev->wd, ev->name)]; e;
	     e = e->next)
		if (e->wd == ev->wd && !strcmp(e->name, ev->name))
			note_change(e->owner, r->dir, e->name);
}

/* Under lock: everything queued, handed out. */
static void drain_locked(void)
{
	char buf[16384]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	if (ino_fd < 0)
		return;
	for (;;) {
		ssize_t n = read(ino_fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const void *)p;
			dispatch(ev);
			p += sizeof *ev + ev->len;
		}
	}
}

void job_watch_drain(void)
{
	if (pthread_mutex_trylock(&lock) != 0)
		return; /* another thread drains it now */
	drain_locked();
	pthread_mutex_unlock(&lock);
}

int job_watch_fd(void)
{
	return __atomic_load_n(&ino_fd, __ATOMIC_ACQUIRE);
}

/* Under lock: enters (wd, name) for w, wd being a live watch on dir.
 * -ENOMEM. */
static int enter_locked(struct job_watch *w, int wd, const char *dir,
			const char *name)
{
	struct watch_ref *r = ref_of(wd);
	if (!r) {
		if (n_refs == cap_refs) {
			size_t cap = cap_refs ? 2 * cap_refs : 16;
			struct watch_ref *v = realloc(refs, cap * sizeof *v);
			if (!v)
				return -ENOMEM;
			refs = v;
			cap_refs = cap;
		}
		char *copy = strdup(dir);
		if (!copy)
			return -ENOMEM;
		r = &refs[n_refs++];
		*r = (struct watch_ref){.wd = wd, .dir = copy};
	}
	size_t b = bucket_of(wd, name);
	for (struct watch_entry *o = buckets[b]; o; o = o->next)
		if (o->owner == w && o->wd == wd && !strcmp(o->name, name))
			return 0; /* walked already (inputs share folders) */
	size_t len = strlen(name);
	struct watch_entry *e = malloc(sizeof *e + len + 1);
	if (!e) {
		if (r->n == 0) { /* no one's: not kept */
			(void)inotify_rm_watch(ino_fd, wd);
			free(r->dir);
			*r = refs[--n_refs];
			rm_count++;
		}
		return -ENOMEM;
	}
	e->owner = w;
	e->wd = wd;
	memcpy(e->name, name, len + 1);
	e->next = buckets[b];
	buckets[b] = e;
	r->n++;
	w->n_entries++;
	return 0;
}

/*
 * Watches dir for name on behalf of w. The watch is added without the
 * lock (a folder on a hung filesystem holds this job only, not every
 * job's start and end); the lock is taken to enter it. A watch given
 * back meanwhile by the last other job using it (rm_count moved, and the
 * table does not hold it) may be dead: it is added again. -errno.
 */
static int add_entry(struct job_watch *w, const char *dir, const char *name)
{
	for (int tries = 0; tries < 8; tries++) {
		pthread_mutex_lock(&lock);
		uint64_t seen = rm_count;
		pthread_mutex_unlock(&lock);
		int wd = inotify_add_watch(ino_fd, dir, WATCH_MASK);
		if (wd < 0 && (errno == EACCES || errno == EPERM))
			return 0; /* a folder this process may not list: one
				     it cannot write in either, as a rule */
		if (wd < 0)
			return -errno;
		pthread_mutex_lock(&lock);
		int rc = -EAGAIN;
		if (ref_of(wd) || rm_count == seen)
			rc = enter_locked(w, wd, dir, name);
		pthread_mutex_unlock(&lock);
		if (rc != -EAGAIN)
			return rc;
	}
	return -EAGAIN;
}

/* Under lock: every entry of w given back, and watches no one uses. */
static void remove_entries(struct job_watch *w)
{
	if (!w->n_entries)
		return;
	for (size_t b = 0; b < WATCH_BUCKETS; b++) {
		struct watch_entry **pp = &buckets[b];
		while (*pp) {
			struct watch_entry *e = *pp;
			if (e->owner != w) {
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			struct watch_ref *r = ref_of(e->wd);
			if (r && --r->n == 0) {
				(void)inotify_rm_watch(ino_fd, r->wd);
				free(r->dir);
				*r = refs[--n_refs];
				rm_count++;
			}
			free(e);
		}
	}
	w->n_entries = 0;
}

/*
 * The walk of path as the kernel resolves it, from "/", each
 * folder watched for the component looked up in it; symlinks followed
 * (WATCH_HOPS at most). A component that is missing ends the walk: the
 * identity check fails such an input already. -errno.
 */
static int walk(struct job_watch *w, const char *path)
{
	char dir[PATH_MAX], rest[PATH_MAX], full[PATH_MAX], target[PATH_MAX];
	int hops = 0;

	if (path[0] == '/')
		snprintf(rest, sizeof rest, "%s", path);
	else if (!getcwd(dir, sizeof dir) ||
		 (size_t)snprintf(rest, sizeof rest, "%s/%s", dir, path) >=
		     sizeof rest)
		return -ENAMETOOLONG;
	memcpy(dir, "/", 2);
	for (char *p = rest; *p;) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		size_t len = strcspn(p, "/");
		char name[NAME_MAX + 1];
		if (len > NAME_MAX)
			return -ENAMETOOLONG;
		memcpy(name, p, len);
		name[len] = '\0';
		p += len;
		if (!strcmp(name, "."))
			continue;
		if (!strcmp(name, "..")) {
			char *slash = strrchr(dir, '/');
			if (slash == dir)
				dir[1] = '\0';
			else if (slash)
				*slash = '\0';
			continue;
		}
		int rc = add_entry(w, dir, name);
		if (rc < 0)
			return rc;
		if ((size_t)snprintf(full, sizeof full, "%s%s%s", dir,
				     dir[1] ? "/" : "", name) >= sizeof full)
			return -ENAMETOOLONG;
		struct stat st;
		if (lstat(full, &st) < 0)
			return 0;
		if (!S_ISLNK(st.st_mode)) {
			memcpy(dir, full, strlen(full) + 1);
			continue;
		}
		if (++hops > WATCH_HOPS)
			return -ELOOP;
		ssize_t n = readlink(full, target, sizeof target - 1);
		if (n < 0)
			return 0;
		target[n] = '\0';
		/* the target, then what was left of the path after it */
		if ((size_t)snprintf(full, sizeof full, "%s/%s", target, p) >=
		    sizeof full)
			return -ENAMETOOLONG;
		memcpy(rest, full, strlen(full) + 1);
		p = rest;
		if (target[0] == '/')
			memcpy(dir, "/", 2);
	}
	return 0;
}

/* Under lock: the descriptor closed once no job watches (no one polls
 * it then: only watching jobs do). */
static void close_unused(void)
{
	if (n_watching || ino_fd < 0)
		return;
	close(ino_fd);
	__atomic_store_n(&ino_fd, -1, __ATOMIC_RELEASE);
}

int job_watch_start(struct job_watch *w, char *const *paths, size_t n,
		    char **err)
{
	int rc = 0;
	size_t k = 0;

	memset(w, 0, sizeof *w);
	if (n == 0)
		return 0;
	pthread_mutex_lock(&lock);
	if (ino_fd < 0) {
		int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
		if (fd < 0)
			rc = -errno;
		else
			__atomic_store_n(&ino_fd, fd, __ATOMIC_RELEASE);
	}
	bool held = rc == 0;
	if (held)
		n_watching++; /* the descriptor stays while this job walks */
	pthread_mutex_unlock(&lock);
	for (; rc == 0 && k < n; k++)
		rc = walk(w, paths[k]);
	/* a path that cannot be walked as it is now (a folder on it turned
	 * into a symlink meanwhile, a loop): a change; the attempt goes
	 * again */
	if (held && rc < 0 && rc != -ENOSPC && rc != -ENOMEM && rc != -EMFILE &&
	    rc != -ENFILE && rc != -EAGAIN) {
		pthread_mutex_lock(&lock);
		if (!w->changed) {
			w->changed = true;
			snprintf(w->what, sizeof w->what,
				 "the path of '%s' (%s)", paths[k - 1],
				 job_strerror(-rc));
		}
		pthread_mutex_unlock(&lock);
		rc = 0;
	}
	if (rc < 0) {
		pthread_mutex_lock(&lock);
		remove_entries(w);
		if (held)
			n_watching--;
		close_unused();
		pthread_mutex_unlock(&lock);
	}
	if (rc < 0 && err &&
	    asprintf(err,
		     "cannot watch the path of input '%s' while its stages "
		     "run: %s%s",
		     paths[k ? k - 1 : 0], job_strerror(-rc),
		     rc == -ENOSPC ? " (fs.inotify.max_user_watches)" : "") < 0)
		*err = NULL;
	return rc;
}

bool job_watch_end(struct job_watch *w, char *what, size_t len)
{
	bool changed;

	pthread_mutex_lock(&lock);
	drain_locked();
	changed = w->changed;
	remove_entries(w);
	n_watching--;
	close_unused();
	pthread_mutex_unlock(&lock);
	if (changed && what)
		snprintf(what, len, "%s", w->what);
	w->changed = false;
	return changed;
}
