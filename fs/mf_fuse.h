/*
 * mf_fuse.h - the matfs daemon's public interface: the mounted tree over
 * the engine (fs/engine/mf_engine.h). tools/matfs.c parses the command
 * line, mounts, and drives the daemon through these calls only; the rest
 * of the FUSE layer is private to fs/fuse/ (fuse_i.h).
 *
 * Not for: computing or storing shards (the engine), parsing the command
 * line or deciding where messages go (tools/matfs.c). Nothing here prints:
 * messages go to the log callback of mfs_opts.
 */
#ifndef MF_FUSE_H
#define MF_FUSE_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>

enum mfs_log_level { MFS_LOG_ERR = 0, MFS_LOG_WARN, MFS_LOG_INFO };

/* Receives one message (no trailing newline); called from any thread. */
typedef void (*mfs_log_fn)(void *arg, int level, const char *msg);

struct mfs_opts {
	const char *store_dir; /* absolute; created if missing */
	/* the catalog's location (mf_engine_opts.catalog); NULL: the
	 * store's own */
	const char *catalog;
	const char *pipelines_dir; /* absolute; may be missing (logged) */
	unsigned workers; /* concurrent materializations; 0: cores */
	uint64_t cache_bytes; /* decompressed chunk budget; 0: default */
	uint64_t max_size; /* store limit (fuse_expiry.c); 0: none */
	bool allow_other; /* others may enter: dirs get u+w */
	/* -o nopush: a computation's pages are not put in the kernel's
	 * cache as the stages write them (fuse_push.c) */
	bool no_push;
	uint64_t push_max; /* bytes of a shard pushed at most; 0: a quarter
			     of the memory (-o push_max) */
	const char *mountpoint; /* absolute; for the read-ahead below */
	unsigned readahead_kb; /* kernel read-ahead to set; 0: as is */
	/* 0: deps and inputs watched with inotify; N: checked by stat every
	 * N seconds instead (-o spec_poll, for filesystems inotify does not
	 * see) */
	unsigned spec_poll_s;
	/* the time limit of one spec's registration (-o spec_timeout); 0:
	 * MFS_SPEC_TIMEOUT_S */
	unsigned spec_timeout_s;
	mfs_log_fn log;
	void *log_arg;
	/* where the log goes, as the root's user.matfs.log shows it: a
	 * file's absolute path, "syslog" or "stderr"; NULL: not shown */
	const char *log_dest;
};

#define MFS_CACHE_DEFAULT (256ULL << 20)

struct mfs;

/*
 * Opens the engine on the store and registers every spec of the pipelines
 * folder (a bad one is logged with FILE:LINE:COL and skipped). The engine
 * starts a thread: call it after any fork. Returns 0 or -errno with *err
 * (caller frees).
 */
int mfs_new(const struct mfs_opts *o, struct mfs **out, char **err);

/* The operations to give fuse_session_new, with m as userdata. */
const struct fuse_lowlevel_ops *mfs_ops(void);

/*
 * Starts the worker pools and the pipelines watcher; se is mounted. Call
 * it from the thread that then runs the session loop, with libfuse's
 * signal handlers set (fuse_set_signal_handlers): once no mount of se is
 * left in this mount namespace while a copy elsewhere keeps the session
 * open, the session is ended (its connection aborted, else that thread
 * sent SIGTERM), and the loop returns as after an unmount.
 */
int mfs_start(struct mfs *m, struct fuse_session *se);

/*
 * After the session loop returned: stops the watcher and the pools, waiting
 * at most timeout_ms for materializations in progress and for spec
 * registrations. -EBUSY when some still run: the caller must then exit
 * without mfs_free.
 */
int mfs_stop(struct mfs *m, unsigned timeout_ms);

/* Whether the session ended, its connection alive, because no mount of it
 * was left in this mount namespace (mfs_start, the SIGTERM case): the
 * caller must then not unmount its mount point, which may hold another
 * mount by now. */
bool mfs_mount_left(struct mfs *m);
/* Frees m (NULL: nothing). A spec registration still stuck reading a file
 * after MFS_FREE_WAIT_MS uses m: m is then left allocated. */
#define MFS_FREE_WAIT_MS 2000
void mfs_free(struct mfs *m);

/*
 * Raises the kernel read-ahead of the FUSE mount at mountpoint (its bdi's
 * read_ahead_kb) to kb when lower: FUSE starts at 128 KiB, and 1 MiB
 * requests let the daemon decompress and reply in larger pieces. Only
 * sticks once the kernel has processed FUSE INIT, so the mount does it on
 * its first request (mfs_opts.readahead_kb). Needs root (-EACCES
 * otherwise); -ENOENT when nothing is mounted there.
 */
#define MFS_READAHEAD_KB 1024
int mfs_tune_readahead(const char *mountpoint, unsigned kb);

#endif /* MF_FUSE_H */
