/*
 * fuse_expiry.c - the daemon's expiry thread: every MFS_EXPIRY_PERIOD_MS it
 * reads the catalog's snapshots, asks the engine's policy which are due
 * (mf_engine_expiry_due: expire_after, keep, -o max_size; DESIGN.md,
 * "Expiry and eviction"), telling it what only the mount knows - which
 * fingerprints a registered spec yields, and which have a shard open
 * here or being computed - and what live engines elsewhere hold (another
 * host's daemon on a shared catalog, a matctl), and expires them. Then it
 * makes what it expired disappear from the mount at once: the kernel is
 * told to forget the entries and attributes it cached. A pass with nothing
 * due reads one catalog listing and the live engines' holds, nothing
 * else.
 *
 * Expiring goes through the engine (mf_engine_expire_snapshot): the catalog
 * first, then the files, so a descriptor open on expired data keeps
 * reading its unlinked file, and its inode is retired as after an rm.
 *
 * Not for: the rule itself (engine_expiry.c), how a snapshot is expired
 * (the engine), rm and rmdir (fuse_write.c).
 */
#include "fuse_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mfs_expiry {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* on CLOCK_MONOTONIC */
	bool stop;
};

/* Tells the kernel to forget what it cached of the snapshot: its entry in
 * the root when it left the tree, its directory's attributes and listing,
 * and each shard's entry and attributes (sizes went back to 0). */
static void forget_snap(struct mfs *m, const struct mfs_snap_info *si,
			bool gone)
{
	fuse_ino_t dir = mfs_ino_dir(si->id);
	atomic_fetch_add(&m->attr_epoch, 1); /* before the kernel's */
	for (uint32_t k = 0; k < si->shards; k++) {
		char name[64];
		if (mfs_shard_name(si, k, name, sizeof(name)) == 0)
			(void)fuse_lowlevel_notify_inval_entry(m->se, dir, name,
							       strlen(name));
		(void)fuse_lowlevel_notify_inval_inode(
		    m->se, mfs_shard_ino(m, si->id, k), -1, 0);
	}
	(void)fuse_lowlevel_notify_inval_inode(m->se, dir, 0, 0);
	if (gone)
		(void)fuse_lowlevel_notify_inval_entry(m->se, MFS_ROOT_INO,
						       si->fp, strlen(si->fp));
	(void)fuse_lowlevel_notify_inval_inode(m->se, MFS_ROOT_INO, 0, 0);
}

static void expire(struct mfs *m, const struct mf_engine_snapshot *r,
		   const char *why)
{
	struct mfs_snap *s;
	struct mfs_snap_info si;
	int rc = mfs_snap_known(m, r->fp, &s, &si);
	if (rc == 0)
		rc = mf_engine_expire_snapshot(m->eng, r->fp);
	if (rc == -EBUSY)
		rc = 0; /* a shard is being computed: the others expired, and
			   the next pass tries the snapshot again */
	if (rc == -ENOENT)
		return; /* gone meanwhile (matctl rm, rmdir) */
	if (rc) {
		mfs_logf(m, MFS_LOG_WARN, "expire %s (%.12s): %s", r->name,
			 r->fp, strerror(-rc));
		return;
	}
	mfs_snap_retire(m, si.id);
	mfs_snap_forget(m, s, false);
	if (m->se)
		forget_snap(m, &si, !si.registered);
	mfs_logf(m, MFS_LOG_INFO, "expired snapshot %.12s of %s (%s)", r->fp,
		 r->name, why);
}

/* What a pass asks about: the mount, and the fingerprints live engines
 * hold (their registered specs, on every host of a shared catalog). */
struct pass_arg {
	struct mfs *m;
	char (*held)[MF_FP_HEX_LEN + 1];
	size_t n_held;
};

/* The policy's registered(): a spec registers fp (its name points at
 * it, or will again), here or in any live engine on the store (another
 * host's daemon, a matctl). Unsure counts as registered. */
static bool registered(void *arg, const char *fp)
{
	struct pass_arg *a = arg;
	struct mfs_snap *s;
	struct mfs_snap_info si;
	if (mfs_snap_known(a->m, fp, &s, &si) != 0 || si.registered)
		return true;
	for (size_t i = 0; i < a->n_held; i++)
		if (strcmp(a->held[i], fp) == 0)
			return true;
	return false;
}

/* True when this daemon has a handle open on a shard of snapshot id, or
 * an open waiting for one. */
static bool snap_open_here(struct mfs *m, uint32_t id)
{
	bool open = false;
	pthread_mutex_lock(&m->node_lock);
	for (size_t i = 0; !open && i < m->cap_nodes; i++)
		for (struct mfs_node *x = m->nodes[i]; x && !open; x = x->next)
			open = x->snap_id == id && !x->retired &&
			    (x->nfh > 0 || x->queued || x->waiters);
	pthread_mutex_unlock(&m->node_lock);
	return open;
}

/* True when a shard of fp is being computed (or the catalog is busy). */
static bool snap_running(struct mfs *m, const char *fp)
{
	struct mf_engine_shard *recs;
	size_t n;
	if (mf_engine_list_shards(m->eng, fp, &recs, &n) != 0)
		return true;
	bool running = false;
	for (size_t i = 0; i < n; i++)
		running |= recs[i].state == MF_ENGINE_RUNNING;
	mf_engine_shard_recs_free(recs, n);
	return running;
}

/* The policy's feeds(): a shard of the registered fp may be stored from
 * from's data (keep then leaves from until fp is whole). */
static bool feeds(void *arg, const char *fp, const char *from)
{
	return mf_engine_feeds(((struct pass_arg *)arg)->m->eng, fp, from);
}

/* The policy's in_use(): a shard of fp open here or being computed.
 * Unsure (not in the namespace, a busy catalog) counts as in use. */
static bool in_use(void *arg, const char *fp)
{
	struct mfs *m = ((struct pass_arg *)arg)->m;
	struct mfs_snap *s;
	struct mfs_snap_info si;
	return mfs_snap_known(m, fp, &s, &si) != 0 ||
	    snap_open_here(m, si.id) || snap_running(m, fp);
}

void mfs_expiry_pass(struct mfs *m)
{
	struct mf_engine_snapshot *v;
	size_t n;
	if (mf_engine_list_snapshots(m->eng, &v, &n) != 0)
		return; /* busy: the next pass */
	struct pass_arg a = {.m = m};
	if (mf_engine_list_held(m->eng, &a.held, &a.n_held) != 0) {
		mf_engine_snapshot_recs_free(v, n);
		return; /* busy: unsure what is held, the next pass */
	}
	struct mf_expiry_policy p = {
	    .now = mf_engine_now(m->eng), /* the catalog's clock */
	    .older_than = -1,
	    .max_size = m->o.max_size,
	    .registered = registered,
	    .in_use = in_use,
	    .feeds = feeds,
	    .arg = &a,
	};
	struct mf_expiry_due *due;
	size_t nd;
	if (mf_engine_expiry_due(v, n, &p, &due, &nd) == 0) {
		for (size_t i = 0; i < nd; i++)
			expire(m, &v[due[i].index],
			       mf_expiry_why_name(due[i].why));
		free(due);
	}
	free(a.held);
	mf_engine_snapshot_recs_free(v, n);
}

static void *loop(void *arg)
{
	struct mfs *m = arg;
	struct mfs_expiry *x = m->expiry;
	pthread_mutex_lock(&x->mu);
	while (!x->stop) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		t.tv_sec += MFS_EXPIRY_PERIOD_MS / 1000;
		t.tv_nsec += (MFS_EXPIRY_PERIOD_MS % 1000) * 1000000L;
		if (t.tv_nsec >= 1000000000L) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000L;
		}
		while (!x->stop &&
		       pthread_cond_timedwait(&x->cv, &x->mu, &t) != ETIMEDOUT)
			;
		if (x->stop)
			break;
		pthread_mutex_unlock(&x->mu);
		mfs_expiry_pass(m);
		pthread_mutex_lock(&x->mu);
	}
	pthread_mutex_unlock(&x->mu);
	return NULL;
}

int mfs_expiry_start(struct mfs *m)
{
	struct mfs_expiry *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&x->cv, &a);
	pthread_condattr_destroy(&a);
	(void)mf_mutex_init(&x->mu);
	m->expiry = x;
	int rc = -pthread_create(&x->th, NULL, loop, m);
	if (rc) {
		m->expiry = NULL;
		pthread_cond_destroy(&x->cv);
		pthread_mutex_destroy(&x->mu);
		free(x);
	}
	return rc;
}

void mfs_expiry_stop(struct mfs *m)
{
	struct mfs_expiry *x = m->expiry;
	if (!x)
		return;
	pthread_mutex_lock(&x->mu);
	x->stop = true;
	pthread_cond_signal(&x->cv);
	pthread_mutex_unlock(&x->mu);
	pthread_join(x->th, NULL);
	pthread_cond_destroy(&x->cv);
	pthread_mutex_destroy(&x->mu);
	free(x);
	m->expiry = NULL;
}
