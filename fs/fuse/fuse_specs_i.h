/*
 * fuse_specs_i.h - shared by fuse_specs.c (the pipelines folder and the
 * watcher thread), fuse_register.c (registrations on worker threads, each
 * bounded in time) and fuse_deps.c (what one registration of a spec
 * depends on: its watches and identities). The spec files and their
 * state are guarded by mfs_specs.lock; a registration in flight owns the
 * identities of its file's deps (mfs_deps_changed) until it returns.
 *
 * Not for: the rest of the FUSE layer (fuse_i.h has mfs_specs_*).
 */
#ifndef MF_FUSE_SPECS_I_H
#define MF_FUSE_SPECS_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include "fuse_i.h"

/* Every folder a watcher watches gets the same mask: inotify keeps one
 * watch (and one mask) per inode, shared by whoever asked for it. */
#define MFS_WATCH_MASK                                                         \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |                 \
	 IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF |             \
	 IN_MOVE_SELF | IN_ONLYDIR)

/* The inotify instance and its watches, counted by their holders. mu
 * guards v, n and cap (registrations add watches without mfs_specs.lock);
 * a leaf: no lock is taken while it is held, and it is never taken with
 * mfs_specs.lock held. */
struct mfs_watches {
	pthread_mutex_t mu;
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
 * Lists what the fingerprint of spec (loaded by mf_engine_spec_load, the
 * one parse of the registration) depends on (mf_engine_spec_watch_list):
 * watches each folder when inotify is true, then records every folder's
 * and file's identity. Call it before registering the spec, so that a
 * change during the registration is seen. The result is polled
 * (mfs_deps_polled) when inotify is false, a watch failed, there are more
 * than MFS_DEPS_WATCH_MAX folders or one is remote; then why (why_len
 * bytes) says why, else it is "". Returns 0 and *out, or -ENOMEM.
 */
#define MFS_DEPS_WATCH_MAX 1024
int mfs_deps_new(struct mfs_watches *w, const struct mf_engine_spec *spec,
		 bool inotify, struct mfs_deps **out, char *why,
		 size_t why_len);
/* Gives back d's watches and frees it; NULL does nothing. */
void mfs_deps_free(struct mfs_watches *w, struct mfs_deps *d);

/* True when inotify does not cover d: only mfs_deps_changed sees changes.
 * Fixed once made. */
bool mfs_deps_polled(const struct mfs_deps *d);
/* The mf_mono_ns of the last identities taken; any thread. */
uint64_t mfs_deps_checked(const struct mfs_deps *d);
/* Stats every folder and file again: true when any identity differs from
 * the recorded one (which is then replaced). One thread at a time: the
 * registration in flight for d's spec file. */
bool mfs_deps_changed(struct mfs_deps *d);

/* True when the inotify event (wd, mask, name: NULL when none) can change
 * what d depends on: an entry of a watched folder that matters (the dep's
 * name or an entry the glob component matches), or the folder itself. */
bool mfs_deps_hit(const struct mfs_deps *d, int wd, uint32_t mask,
		  const char *name);
/* The watch wd went (IN_IGNORED): d no longer holds it. True when it did. */
bool mfs_deps_drop_wd(struct mfs_deps *d, int wd);

/* ---- spec files and their registrations ---- */

struct mfs_reg; /* one registration on a worker (fuse_register.c) */

struct spec_file {
	char *path;
	struct stat id; /* what was registered */
	char fp[MF_FP_HEX_LEN + 1]; /* "" when it failed to load */
	bool seen; /* in the folder at this scan */
	bool forget; /* still to unregister (was busy) */
	bool dirty; /* an event touched its deps or inputs */
	/* what its last good load depends on; kept while it fails, so a
	 * fix of its inputs is seen. Replaced only by its registration. */
	struct mfs_deps *deps;
	/* its registration, queued or in flight (also past its time limit,
	 * until its thread returns); the entry stays while there is one */
	struct mfs_reg *job;
	/* its registrations are being forgotten (mf_engine_unregister, with
	 * no lock held): none starts until that returns; the entry stays */
	bool unregistering;
	bool again; /* changed meanwhile: register again once free */
	/* its last registration met a catalog outage (-EAGAIN): registered
	 * again at retry_ns (monotonic; 0: not due), the wait doubling
	 * with each outage in a row, up to MFS_REG_RETRY_MAX_MS */
	uint64_t retry_ns;
	unsigned outages;
};
#define MFS_REG_RETRY_MIN_MS 500
#define MFS_REG_RETRY_MAX_MS 10000

#define MFS_REG_THREADS 4 /* registrations within their limit at once */
/* One owner's registrations at once, past their limit included, and the
 * most threads in all: an owner with none running starts one even when
 * MFS_REG_THREADS are busy with others', so no user's slow specs delay
 * another user's. */
#define MFS_REG_PER_OWNER 2
#define MFS_REG_MAX 64
#define MFS_SPEC_TIMEOUT_S 60 /* default limit of one registration */
#define MFS_SPEC_START_S 10 /* the longest the mount waits for one */
/* the watcher's (fuse_specs_watch.c) and a resolve's (fuse_specs.c) */
#define RECHECK_MS 1000 /* a resolved name's spec checked longer ago: now */
#define NS_PER_MS 1000000ULL

struct mfs_specs {
	/* Lock order: pub_lock -> lock. Never held across I/O: scans of the
	 * pipelines folder, loading and hashing specs, inotify and statfs
	 * calls, mf_engine_register and _unregister (catalog writes) and
	 * notifications to the kernel all run with lock released, their
	 * outcome recorded under it afterwards (only messages are logged
	 * under it). No other lock is taken while it is held.
	 *
	 * pub_lock serializes publications (mfs_specs_publish): each takes
	 * the engine's lock (mf_engine_list_specs), then lock, then ns_lock
	 * (mfs_ns_set_specs), one after the other, never two at once, and
	 * tells the kernel which names changed. It guards mfs.se for them. */
	pthread_mutex_t pub_lock;
	/* Guards the fields up to done_cv (but watches.ifd and what
	 * watches.mu guards). */
	pthread_mutex_t lock;
	struct spec_file *files;
	size_t n, cap;
	struct mfs_watches watches; /* ifd: the inotify instance */
	bool retry; /* something to do again without an event */
	bool dir_missing; /* logged once until it appears */
	bool dir_remote; /* the pipelines folder is on a network fs */
	int wd; /* the pipelines folder's watch; written by the watcher */
	uint64_t scanned_ns; /* last scan of the folder */
	/* scans run unlocked, several at once (the watcher, refreshes):
	 * each takes a ticket before it reads the folder, and one older
	 * than the last applied is dropped, never undoing a newer one */
	uint64_t scan_ticket, scan_applied;

	/* registrations (fuse_register.c) */
	struct mfs_reg *queue, *queue_tail; /* waiting for a thread */
	unsigned active; /* running and within their limit */
	unsigned threads; /* alive, stuck ones past their limit included */
	bool stopping; /* mfs_specs_stop: nothing new starts */
	pthread_cond_t done_cv; /* a registration returned, a thread ended */

	/* fixed once created */
	int wfd, kfd; /* eventfds: stop the thread; a name was resolved */
	int jfd; /* eventfd: a registration started or returned */
	uint64_t poll_ns; /* period of polled specs */
	bool poll_all; /* -o spec_poll: everything is polled */
	uint64_t timeout_ns; /* -o spec_timeout: limit of a registration */

	/* read by FUSE threads, without the lock */
	atomic_bool any_polled; /* a polled spec, or a polled folder */
	atomic_uint_fast64_t kick_ns; /* last kick from a resolve */

	pthread_t thread; /* the watcher; mfs_specs_start and _stop */
	bool started;
};

/* The entry of path, or NULL. Caller holds s->lock. */
struct spec_file *mfs_specs_find(struct mfs_specs *s, const char *path);
/* Shows the folder's registered specs in the tree, as they are when it
 * runs: a publication that starts after a change shows it. Takes
 * s->pub_lock, then s->lock briefly; caller holds neither. */
void mfs_specs_publish(struct mfs *m, struct mfs_specs *s);
/* Wakes the watcher to look at its timers and retries again. */
void mfs_specs_wake(struct mfs_specs *s);
/* One look at everything (fuse_specs.c), for the watcher
 * (fuse_specs_watch.c): registrations past their limit, the folder, the
 * marked and due specs, what to forget; polled specs last checked age_ns
 * ago or more are checked. Caller holds no lock of s. */
void mfs_specs_pass(struct mfs *m, uint64_t age_ns);

/* Forgetting a file's registrations in the engine with no lock held:
 * begin (caller holds s->lock) marks f unregistering and copies what to
 * forget (all but f->fp when it is set; f->forget is cleared); run calls
 * mf_engine_unregister with no lock; end (caller holds s->lock) records
 * the outcome: -EBUSY sets f->forget and s->retry again. */
struct mfs_forget {
	char *path; /* NULL: nothing to forget (begin ran out of memory) */
	char keep[MF_FP_HEX_LEN + 1]; /* "" for none */
	int rc;
};
void mfs_forget_begin(struct mfs_specs *s, struct spec_file *f,
		      struct mfs_forget *g);
void mfs_forget_run(struct mfs *m, struct mfs_forget *g);
void mfs_forget_end(struct mfs_specs *s, struct mfs_forget *g);

/*
 * Registers f's file on a worker thread: loads what it depends on
 * (mfs_deps_new), installs it as f->deps, registers it with the engine,
 * then records the outcome in f and publishes. check: only if f->deps's
 * identities changed (a polled spec). f with a registration under way,
 * or being unregistered, gets f->again instead (check: nothing), and one
 * more registration once that one returns. Caller holds s->lock.
 */
void mfs_reg_submit(struct mfs *m, struct spec_file *f, bool check);
/*
 * Fails the registrations running past s->timeout_ns: logged, f->fp
 * cleared (the name goes), and their threads no longer counted against
 * MFS_REG_THREADS; what they return is discarded and the spec registered
 * again. True when a name went. Caller holds s->lock.
 */
bool mfs_reg_expire(struct mfs *m, struct mfs_specs *s);
/* The earliest deadline of a running registration; UINT64_MAX when none.
 * Caller holds s->lock. */
uint64_t mfs_reg_deadline(const struct mfs_specs *s);
/* Waits until no registration of path (NULL: of any file) is queued or
 * running within its limit, or until mf_mono_ns() reaches until. True
 * when none is. Caller holds s->lock. */
bool mfs_reg_wait(struct mfs_specs *s, const char *path, uint64_t until);
/* Stops starting registrations, drops the queued ones and waits up to
 * ms for the threads: 0, or -EBUSY when one is still stuck on a file.
 * Takes s->lock. */
int mfs_reg_stop(struct mfs_specs *s, unsigned ms);

#endif
