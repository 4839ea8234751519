/*
 * fuse_expiry.c - the daemon's expiry policy (DESIGN.md, "Expiry and
 * eviction"): a thread that, every MFS_EXPIRY_PERIOD_MS, reads the
 * catalog's snapshots and expires
 *   - each snapshot not read (else not created) for its expire_after;
 *   - for each name with keep N > 0, every fingerprint beyond the N most
 *     recently used (last read, else created), never one a registered
 *     spec yields;
 *   - with -o max_size, while the store's stored bytes exceed it, the
 *     least recently read snapshots, skipping any with a shard open in
 *     this daemon or being computed;
 * then makes what it expired disappear from the mount at once: the kernel
 * is told to forget the entries and attributes it cached. A pass with
 * nothing due reads one catalog listing and nothing else.
 *
 * Expiring goes through the engine (mf_engine_expire_snapshot): the catalog
 * first, then the files, so a descriptor open on expired data keeps
 * reading its unlinked file, and its inode is retired as after an rm.
 *
 * Not for: how a snapshot is expired (the engine), rm and rmdir
 * (fuse_write.c).
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

/* Last use of a snapshot: its last read, else its creation. */
static int64_t last_use(const struct mf_snapshot_rec *r)
{
	return r->last_read > 0 ? r->last_read : r->created;
}

/* The mount's snapshot of fp and whether a spec registers it. */
static int snap_lookup(struct mfs *m, const char *fp, struct mfs_snap **s,
		       struct mfs_snap_info *si)
{
	int rc = mfs_snap_get(m, fp, s);
	if (rc == 0)
		rc = mfs_snap_info(m, *s, si);
	return rc;
}

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

static void expire(struct mfs *m, const struct mf_snapshot_rec *r,
		   const char *why)
{
	struct mfs_snap *s;
	struct mfs_snap_info si;
	int rc = snap_lookup(m, r->fp, &s, &si);
	if (rc == 0)
		rc = mf_engine_expire_snapshot(m->eng, r->fp);
	if (rc == -ENOENT)
		return; /* gone meanwhile (matctl rm, rmdir) */
	if (rc) {
		mfs_logf(m, MFS_LOG_WARN, "expire %.12s: %s", r->fp,
			 strerror(-rc));
		return;
	}
	mfs_snap_retire(m, si.id);
	mfs_snap_forget(m, s, false);
	if (m->se)
		forget_snap(m, &si, !si.registered);
	mfs_logf(m, MFS_LOG_INFO, "expired snapshot %.12s of %s (%s)", r->fp,
		 r->name, why);
}

/* True when a spec registers fp: its name points at it, or will again. */
static bool registered(struct mfs *m, const char *fp)
{
	struct mfs_snap *s;
	struct mfs_snap_info si;
	return snap_lookup(m, fp, &s, &si) != 0 || si.registered;
}

/* Number of snapshots of r's name used more recently than r. A
 * fingerprint a registered spec yields now counts as more recent than any
 * other (it is the name's present), then the later last use, then the
 * later created, then the larger fingerprint: created has one-second
 * resolution, and a spec edited within the second it was registered must
 * still expire its old fingerprint under keep. */
static size_t newer_of_name(struct mfs *m, const struct mf_snapshot_rec *v,
			    size_t n, const struct mf_snapshot_rec *r)
{
	size_t k = 0;
	bool reg_r = registered(m, r->fp);
	for (size_t i = 0; i < n; i++) {
		const struct mf_snapshot_rec *o = &v[i];
		if (o == r || strcmp(o->name, r->name) != 0)
			continue;
		bool reg_o = registered(m, o->fp);
		int64_t a = last_use(o), b = last_use(r);
		if (reg_o != reg_r) {
			k += reg_o;
			continue;
		}
		if (a > b ||
		    (a == b &&
		     (o->created > r->created ||
		      (o->created == r->created && strcmp(o->fp, r->fp) > 0))))
			k++;
	}
	return k;
}

/* Why r is due, or NULL. Unsure (a busy catalog) means not due. */
static const char *due(struct mfs *m, const struct mf_snapshot_rec *v, size_t n,
		       const struct mf_snapshot_rec *r, int64_t now)
{
	bool expired =
	    r->expire_after >= 0 && now - last_use(r) >= r->expire_after;
	bool surplus = r->keep > 0 && newer_of_name(m, v, n, r) >= r->keep;
	if (!expired && !surplus)
		return NULL;
	bool reg = registered(m, r->fp);
	if (expired && (r->materialized > 0 || !reg))
		return "expire_after";
	if (surplus && !reg)
		return "keep";
	return NULL; /* registered: nothing left to take */
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
	struct mf_catalog *c;
	struct mf_shard_rec *recs;
	size_t n;
	if (mfs_cat_get(m, &c) != 0)
		return true;
	int rc = mf_catalog_list_shards(c, fp, &recs, &n);
	mfs_cat_put(m, c);
	if (rc)
		return true;
	bool running = false;
	for (size_t i = 0; i < n; i++) {
		running |= recs[i].state == MF_SHARD_RUNNING;
		mf_shard_rec_release(&recs[i]);
	}
	free(recs);
	return running;
}

/* The least recently read snapshot holding data that may be evicted:
 * not taken yet, no shard open here nor running. NULL when none. */
static struct mf_snapshot_rec *victim(struct mfs *m, struct mf_snapshot_rec *v,
				      size_t n, bool *taken)
{
	for (;;) {
		struct mf_snapshot_rec *best = NULL;
		for (size_t i = 0; i < n; i++)
			if (!taken[i] && v[i].stored_bytes > 0 &&
			    (!best || last_use(&v[i]) < last_use(best)))
				best = &v[i];
		if (!best)
			return NULL;
		taken[best - v] = true;
		struct mfs_snap *s;
		struct mfs_snap_info si;
		if (snap_lookup(m, best->fp, &s, &si) == 0 &&
		    !snap_open_here(m, si.id) && !snap_running(m, best->fp))
			return best;
	}
}

/* max_size: evicts the least recently read snapshots while the store's
 * stored bytes (of what the pass left) exceed it. */
static void evict(struct mfs *m, struct mf_snapshot_rec *v, size_t n,
		  bool *taken)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		if (!taken[i])
			total += v[i].stored_bytes;
	while (total > m->o.max_size) {
		struct mf_snapshot_rec *r = victim(m, v, n, taken);
		if (!r)
			break;
		expire(m, r, "max_size");
		total -= r->stored_bytes;
	}
}

void mfs_expiry_pass(struct mfs *m)
{
	struct mf_catalog *c;
	struct mf_snapshot_rec *v;
	size_t n;
	if (mfs_cat_get(m, &c) != 0)
		return;
	int rc = mf_catalog_list_snapshots(c, &v, &n);
	mfs_cat_put(m, c);
	if (rc)
		return; /* busy: the next pass */
	bool *taken = calloc(n + 1, sizeof(*taken));
	int64_t now = mf_now_s();
	for (size_t i = 0; taken && i < n; i++) {
		const char *why = due(m, v, n, &v[i], now);
		if (why)
			expire(m, &v[i], why);
		taken[i] = why != NULL;
	}
	if (taken && m->o.max_size)
		evict(m, v, n, taken);
	free(taken);
	for (size_t i = 0; i < n; i++)
		mf_snapshot_rec_release(&v[i]);
	free(v);
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
