/*
 * fuse_mount.c - the life of a mount: setting up the engine (which indexes
 * the store into a new catalog before any spec registers), the namespace,
 * the chunk cache and the pipelines folder (mfs_new); starting the worker
 * pools and the watcher once mounted (mfs_start, which tells the engine
 * the mount's device: deps and inputs on it are refused), with one
 * reclaim of what
 * dead runs left in the store (mf_engine_gc, on a worker, off the FUSE
 * threads), the expiry policy thread (fuse_expiry.c) and the watch of
 * the mount namespace (fuse_nswatch.c); stopping them after the session
 * loop (mfs_stop); freeing everything (mfs_free).
 *
 * Not for: the command line, daemonizing or where messages go
 * (tools/matfs.c), or any request (the other fuse_*.c files).
 */
#include "fuse_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static int copy_opts(struct mfs *m, const struct mfs_opts *o)
{
	m->o = *o;
	m->o.store_dir = strdup(o->store_dir);
	m->o.pipelines_dir = strdup(o->pipelines_dir);
	m->o.mountpoint = o->mountpoint ? strdup(o->mountpoint) : NULL;
	m->o.log_dest = o->log_dest ? strdup(o->log_dest) : NULL;
	m->o.catalog = o->catalog ? strdup(o->catalog) : NULL;
	if (!m->o.store_dir || !m->o.pipelines_dir ||
	    (o->mountpoint && !m->o.mountpoint) ||
	    (o->log_dest && !m->o.log_dest) || (o->catalog && !m->o.catalog))
		return -ENOMEM;
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	m->cores = n > 0 ? (unsigned)n : 1;
	if (m->o.workers == 0)
		m->o.workers = m->cores;
	if (m->o.cache_bytes == 0)
		m->o.cache_bytes = MFS_CACHE_DEFAULT;
	return 0;
}

/* The raw chunks of a shard the engine materializes for an open: they go
 * to the kernel's pages of the inode the open waits on, or else to the
 * cache, where its first reader gets them without decompressing. */
static void on_chunk(void *arg, const struct mf_chunk_event *ev)
{
	struct mfs *m = arg;
	if (!mfs_push_chunk(m, ev))
		mfs_cache_tap(m->cache, ev);
}

/* A shard served before it was durable could not be committed yet, or at
 * all (err says which): its readers keep their bytes. */
static void on_commit_failed(void *arg, const char *fp, uint32_t shard,
			     const char *err)
{
	struct mfs *m = arg;
	char l[MFS_LABEL_MAX];
	mfs_logf(m, MFS_LOG_ERR, "shard %u of %s: %s", shard,
		 mfs_label(m, fp, l, sizeof(l)), err);
}

/* A new catalog (the old one lost, emptied or replaced) being given the
 * store's data, at start-up or while mounted. */
static void on_indexed(void *arg, const struct mf_rebuild_item *it)
{
	struct mfs *m = arg;
	if (it->kind == MF_REBUILD_SNAPSHOT)
		mfs_logf(m, MFS_LOG_WARN,
			 "new catalog: recorded snapshot %s %.12s from the "
			 "store, %u/%u shards materialized",
			 it->name, it->fp, it->materialized, it->shards);
	else
		mfs_logf(m, MFS_LOG_INFO, "new catalog: skipped %s: %s",
			 it->path, it->detail);
}

static void on_note(void *arg, const char *msg)
{
	mfs_logf(arg, MFS_LOG_WARN, "%s", msg);
}

static int setup(struct mfs *m, const struct mfs_opts *o, char **err)
{
	int rc = copy_opts(m, o);
	if (rc)
		return rc;
	m->uid = getuid();
	m->gid = getgid();
	m->t0 = mf_now_s();
	atomic_init(&m->next_data_id, 1);
	/* the cache first: the engine hands it chunks */
	rc = mfs_cache_new(m->o.cache_bytes, &m->cache);
	struct mf_engine_opts eo = {.store_dir = m->o.store_dir,
				    .catalog = m->o.catalog,
				    .chunk = on_chunk,
				    .chunk_arg = m,
				    .serve_sealed = true,
				    .catalog_wait_s = MF_ENGINE_BOOT_WAIT_S,
				    .commit_failed = on_commit_failed,
				    .commit_failed_arg = m,
				    .indexed = on_indexed,
				    .indexed_arg = m,
				    .note = on_note,
				    .note_arg = m};
	if (rc == 0)
		rc = mf_engine_open(&eo, &m->eng, err);
	if (rc == 0) /* a file under the mountpoint is refused already */
		mf_engine_set_mount(m->eng, m->o.mountpoint, 0);
	if (rc == 0)
		rc = mfs_ns_init(m);
	if (rc == 0)
		rc = mfs_btree_new(m);
	if (rc == 0)
		rc = mfs_btab_new(m);
	if (rc == 0)
		rc = mfs_specs_new(m, &m->specs);
	if (rc == 0)
		mfs_specs_scan(m);
	return rc;
}

int mfs_new(const struct mfs_opts *o, struct mfs **out, char **err)
{
	if (!o || !o->store_dir || !o->pipelines_dir)
		return -EINVAL;
	struct mfs *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	(void)mf_mutex_init(&m->ns_lock);
	(void)mf_mutex_init(&m->node_lock);
	int rc = setup(m, o, err);
	if (rc) {
		mfs_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

/* Once per mount: the temp files, run folders and orphan shard files of
 * runs that died with an earlier daemon (kill -9, a crash). Live runs and
 * what the catalog points at are kept (mf_engine_gc's rules). */
static void reclaim(void *arg, bool cancelled)
{
	struct mfs *m = arg;
	if (cancelled)
		return;
	struct mf_gc_stats st;
	int rc = mf_engine_gc(m->eng, &st);
	if (rc) {
		mfs_logf(m, MFS_LOG_WARN, "start-up reclaim: %s",
			 strerror(-rc));
		return;
	}
	if (st.snapshots_adopted || st.shards_adopted)
		mfs_logf(m, MFS_LOG_WARN,
			 "start-up reclaim recorded %u shards and %u snapshots "
			 "the catalog did not know",
			 st.shards_adopted, st.snapshots_adopted);
	if (st.snapshots_unindexed)
		mfs_logf(m, MFS_LOG_WARN,
			 "kept %u snapshot folders the catalog does not know "
			 "(matctl fsck --rebuild)",
			 st.snapshots_unindexed);
	if (st.snapshots_removed || st.runs_removed || st.files_removed)
		mfs_logf(m, MFS_LOG_INFO,
			 "start-up reclaim removed %u snapshot folders, %u "
			 "run folders, %u files",
			 st.snapshots_removed, st.runs_removed,
			 st.files_removed);
	else
		mfs_logf(m, MFS_LOG_INFO,
			 "start-up reclaim: nothing to remove");
}

static int mount_devno(const char *mountpoint, char *out, size_t len);

/* The st_dev of the mount's files, from /proc/self/mountinfo: a stat of
 * the mountpoint would wait for the session loop, not yet running. 0 when
 * it cannot be read (files under the mountpoint are refused still). */
static dev_t mount_dev(struct mfs *m)
{
	char devno[64];
	unsigned maj, min;
	if (!m->o.mountpoint ||
	    mount_devno(m->o.mountpoint, devno, sizeof(devno)) != 0 ||
	    sscanf(devno, "%u:%u", &maj, &min) != 2) {
		mfs_logf(m, MFS_LOG_WARN,
			 "the mount's device is unknown: deps and inputs on it "
			 "are found by path only");
		return 0;
	}
	return makedev(maj, min);
}

/* Ends the session once the mount is only in other namespaces. Without
 * it the daemon outlives an unmount here while a copy is elsewhere, as
 * it always did: a warning, not a failure to mount. */
static void watch_namespace(struct mfs *m, dev_t dev)
{
	int rc = dev ? mfs_nswatch_start(m, dev) : -ENOENT;
	if (rc)
		mfs_logf(m, MFS_LOG_WARN,
			 "the mount is not watched (%s): with a copy of it in "
			 "another mount namespace, the daemon outlives an "
			 "unmount here",
			 strerror(-rc));
}

int mfs_start(struct mfs *m, struct fuse_session *se)
{
	dev_t dev = mount_dev(m);
	int rc = mfs_specs_start(m, se, dev);
	if (rc == 0)
		rc = mfs_pool_new(m->o.workers, &m->open_pool);
	if (rc == 0) /* a quarter of the workers, for a reader with none */
		mfs_pool_reserve(m->open_pool, (m->o.workers + 3) / 4,
				 MFS_RESERVE_WINDOW_S * 1000000000ULL);
	if (rc == 0)
		rc = mfs_pool_new(m->cores, &m->ra_pool);
	if (rc == 0)
		rc = mfs_pool_new((m->cores + 1) / 2, &m->win_pool);
	if (rc == 0 && mfs_pool_submit(m->ra_pool, reclaim, m) != 0)
		mfs_logf(m, MFS_LOG_WARN, "start-up reclaim not run");
	if (rc == 0)
		rc = mfs_expiry_start(m);
	if (rc == 0)
		rc = mfs_reaper_start(m);
	if (rc == 0)
		watch_namespace(m, dev);
	return rc;
}

int mfs_stop(struct mfs *m, unsigned timeout_ms)
{
	mfs_nswatch_stop(m); /* the loop ended: nothing left to end */
	mfs_reaper_stop(m); /* cancels computations: no stage is waited for */
	mfs_expiry_stop(m);
	int rc = mfs_specs_stop(m, timeout_ms);
	if (rc)
		mfs_logf(m, MFS_LOG_WARN,
			 "a spec registration is still reading a file");
	int rc2 = mfs_pool_stop(m->win_pool, timeout_ms); /* it feeds none */
	m->win_pool = NULL;
	int rc3 = mfs_pool_stop(m->ra_pool, timeout_ms);
	m->ra_pool = NULL;
	int rc4 = mfs_pool_stop(m->open_pool, timeout_ms);
	m->open_pool = NULL;
	return rc ? rc : rc2 ? rc2 : rc3 ? rc3 : rc4;
}

bool mfs_mount_left(struct mfs *m)
{
	return atomic_load(&m->mount_left);
}

void mfs_free(struct mfs *m)
{
	if (!m || mfs_specs_stop(m, MFS_FREE_WAIT_MS) != 0)
		return;
	/* first: the engine's commits under way may still log, naming
	 * their snapshot through the namespace */
	mf_engine_close(m->eng);
	mfs_fhs_release(m);
	mfs_dirs_release(m);
	mfs_btab_free(m); /* its handles too */
	mfs_btree_free(m);
	mfs_nodes_release(m);
	mfs_cache_free(m->cache);
	mfs_specs_free(m->specs);
	mfs_ns_release(m);
	free((char *)m->o.store_dir);
	free((char *)m->o.pipelines_dir);
	free((char *)m->o.mountpoint);
	free((char *)m->o.log_dest);
	free((char *)m->o.catalog);
	pthread_mutex_destroy(&m->node_lock);
	pthread_mutex_destroy(&m->ns_lock);
	free(m);
}

/* "MAJ:MIN" of the mount at mountpoint, from /proc/self/mountinfo. */
static int mount_devno(const char *mountpoint, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	int rc = mfs_mountinfo_devno(f, mountpoint, out, len);
	fclose(f);
	return rc;
}

int mfs_tune_readahead(const char *mountpoint, unsigned kb)
{
	char dev[64], path[128];
	int rc = mount_devno(mountpoint, dev, sizeof(dev));
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	FILE *f = fopen(path, "r+e");
	if (!f)
		return -errno;
	unsigned cur = 0;
	if (fscanf(f, "%u", &cur) == 1 && cur >= kb) {
		fclose(f);
		return 0;
	}
	rewind(f);
	fprintf(f, "%u\n", kb);
	rc = fflush(f) == 0 ? 0 : -errno;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

void mfs_tune_once(struct mfs *m)
{
	if (atomic_exchange(&m->ra_tuned, true))
		return;
	if (!m->o.mountpoint || m->o.readahead_kb == 0)
		return;
	int rc = mfs_tune_readahead(m->o.mountpoint, m->o.readahead_kb);
	if (rc)
		mfs_logf(m, MFS_LOG_INFO, "kernel read-ahead left as is: %s",
			 strerror(-rc));
}
