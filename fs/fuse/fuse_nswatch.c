/*
 * fuse_nswatch.c - ending the session once the mount left the daemon's
 * mount namespace. The kernel keeps a FUSE connection while any copy of
 * the mount exists: a copy made into another namespace (a container,
 * `unshare -m`, systemd's private mounts) outlives `fusermount3 -u`
 * here, and the session loop would wait for requests for ever. A thread
 * polls /proc/self/mountinfo (POLLPRI: the kernel signals each change of
 * this namespace's mount table); when no mount of the mount's device is
 * left here and the connection still lives MFS_NSWATCH_GRACE_MS later, it
 * aborts the connection, as `fusermount3 -u` would have: the session
 * loop then ends as after an unmount, and the copies elsewhere answer
 * ENOTCONN, as after any end of the daemon. The abort is written to
 * fusectl (/sys/fs/fuse/connections/N/abort), mounted in a mount
 * namespace of this thread alone where it is not mounted; where neither
 * can be done (no privilege), the loop's thread gets SIGTERM, on which
 * the session ends as on a stop.
 *
 * Not for: unmounting (the daemon's main, libfuse) or parsing mountinfo
 * (fuse_mountinfo.c).
 */
#include "fuse_i.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MOUNTINFO "/proc/self/mountinfo"
#define FUSECTL "/sys/fs/fuse/connections"

struct mfs_nswatch {
	pthread_t th;
	pthread_t loop; /* the thread that runs the session loop */
	dev_t dev; /* the mount's */
	int info_fd; /* MOUNTINFO, polled for POLLPRI */
	int stop_fd; /* an eventfd: mfs_nswatch_stop */
};

/* Whether a mount of dev is left in this namespace: 1, 0, or -errno
 * (then the watch goes on as if it were). */
static int still_here(dev_t dev)
{
	FILE *f = fopen(MOUNTINFO, "re");
	if (!f)
		return -errno;
	int rc = mfs_mountinfo_has_dev(f, dev);
	fclose(f);
	return rc;
}

/* Waits up to ms for the connection to end (POLLERR on /dev/fuse: the
 * unmount here was the last copy) or for a stop; true when either came. */
static bool ended_within(struct mfs *m, const struct mfs_nswatch *w, int ms)
{
	struct pollfd p[2] = {{.fd = fuse_session_fd(m->se), .events = 0},
			      {.fd = w->stop_fd, .events = POLLIN}};
	/* an error too: nothing to judge by (its signals are blocked) */
	return poll(p, 2, ms) != 0;
}

static int write_abort(const char *path)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = write(fd, "1", 1) == 1 ? 0 : -errno;
	close(fd);
	return rc;
}

/* Aborts the connection of dev through fusectl. Where fusectl is not
 * mounted, mounts it in a private mount namespace of this thread alone
 * (root), which this thread never leaves: it ends after this. */
static int abort_conn(dev_t dev)
{
	char path[96];
	/* fusectl names a connection by the kernel's dev_t of its
	 * superblock: the major in the bits above 20 */
	snprintf(path, sizeof(path), FUSECTL "/%u/abort",
		 (major(dev) << 20) | minor(dev));
	int rc = write_abort(path);
	if (rc != -ENOENT)
		return rc;
	if (unshare(CLONE_NEWNS) != 0)
		return -errno;
	/* nothing mounted here reaches the namespace this thread left */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("fusectl", FUSECTL, "fusectl",
		  MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		return -errno;
	return write_abort(path);
}

/* Ends the session whose mount is only elsewhere now. */
static void end_session(struct mfs *m, const struct mfs_nswatch *w)
{
	mfs_logf(m, MFS_LOG_INFO,
		 "the mount left this mount namespace (a copy elsewhere keeps "
		 "it alive): ending the session as after an unmount");
	int rc = abort_conn(w->dev);
	if (rc == 0 || ended_within(m, w, 0))
		return; /* the loop reads ENODEV, as after an unmount */
	struct sigaction sa;
	if (sigaction(SIGTERM, NULL, &sa) != 0 || sa.sa_handler == SIG_DFL ||
	    sa.sa_handler == SIG_IGN) {
		mfs_logf(m, MFS_LOG_WARN,
			 "cannot end the session (abort: %s; no SIGTERM "
			 "handler)",
			 strerror(-rc));
		return;
	}
	mfs_logf(m, MFS_LOG_INFO, "connection not aborted (%s): stopping",
		 strerror(-rc));
	/* the session then ends with its connection alive: libfuse's
	 * unmount would unmount whatever the point holds by now (after an
	 * abort it sees the connection gone and unmounts nothing) */
	atomic_store(&m->mount_left, true);
	/* the handler (libfuse's) ends the loop; only a signal wakes the
	 * loop's thread, which waits for its workers */
	fuse_session_exit(m->se);
	pthread_kill(w->loop, SIGTERM);
}

/* True when the watch is over: stopped, or the connection ended. Between
 * changes of the mount table it waits on MOUNTINFO and the stop only: a
 * poll of /dev/fuse would wake on every request queued there (its wait
 * queue is the readers'), a wake-up and the queue's lock taken again for
 * each request of the mount. An unmount here changes the table first;
 * the loop's end stops the watch. */
static bool watch_once(struct mfs *m, const struct mfs_nswatch *w)
{
	struct pollfd p[2] = {{.fd = w->info_fd, .events = POLLPRI},
			      {.fd = w->stop_fd, .events = POLLIN}};
	if (poll(p, 2, -1) < 0)
		return true; /* its signals are blocked: nothing to wait on */
	if (p[1].revents)
		return true; /* stopped */
	if (!p[0].revents || still_here(w->dev) != 0)
		return false;
	/* an unmount here ends the connection once its last reference
	 * goes, a moment after the table changed: wait for that first */
	if (!ended_within(m, w, MFS_NSWATCH_GRACE_MS))
		end_session(m, w);
	return true;
}

static void *nswatch_main(void *arg)
{
	struct mfs *m = arg;
	while (!watch_once(m, m->nswatch))
		;
	return NULL;
}

/* Starts the thread with every signal blocked: a signal for the process
 * is the session loop's to take, and its polls are never interrupted. */
static int start_thread(struct mfs_nswatch *w, struct mfs *m)
{
	sigset_t all, old;
	sigfillset(&all);
	int rc = pthread_sigmask(SIG_SETMASK, &all, &old);
	if (rc)
		return -rc;
	rc = pthread_create(&w->th, NULL, nswatch_main, m);
	(void)pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -rc;
}

static void nswatch_free(struct mfs_nswatch *w)
{
	if (w->info_fd >= 0)
		close(w->info_fd);
	if (w->stop_fd >= 0)
		close(w->stop_fd);
	free(w);
}

int mfs_nswatch_start(struct mfs *m, dev_t dev)
{
	struct mfs_nswatch *w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct mfs_nswatch){.loop = pthread_self(), .dev = dev};
	/* opened before the check below: a change after it is signalled */
	w->info_fd = open(MOUNTINFO, O_RDONLY | O_CLOEXEC);
	int rc = w->info_fd < 0 ? -errno : 0;
	w->stop_fd = rc ? -1 : eventfd(0, EFD_CLOEXEC);
	if (rc == 0 && w->stop_fd < 0)
		rc = -errno;
	if (rc == 0 && still_here(dev) != 1)
		rc = -ENOENT;
	m->nswatch = w;
	if (rc == 0)
		rc = start_thread(w, m);
	if (rc) {
		m->nswatch = NULL;
		nswatch_free(w);
	}
	return rc;
}

void mfs_nswatch_stop(struct mfs *m)
{
	struct mfs_nswatch *w = m->nswatch;
	if (!w)
		return;
	uint64_t one = 1;
	while (write(w->stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	pthread_join(w->th, NULL);
	m->nswatch = NULL;
	nswatch_free(w);
}
