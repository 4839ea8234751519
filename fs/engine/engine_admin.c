/*
 * engine_admin.c - taking data away: expiring shards and snapshots,
 * reacting to corruption, verifying checksums and collecting garbage.
 *
 * Files are removed only after the catalog stopped pointing at them, so a
 * crash in between leaves garbage for gc, never a catalog entry without
 * its data. Every catalog write is conditional on what was read before
 * it (the generation of a shard; no shard left but absent for a
 * snapshot), so a claim or a computation made in between is never taken
 * away, and only the files of what the catalog let go are removed. Open
 * readers keep their descriptors: unlinked files stay readable until
 * closed.
 *
 * Not for: deciding when to expire (the daemon's policy, matctl's user).
 */
#include "engine_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int eng_expire_recs(struct mf_engine *e, struct mf_catalog *c,
		    const struct mf_shard_rec *recs, size_t n)
{
	bool one, *done = n > 1 ? calloc(n, sizeof(*done)) : &one;
	if (!done)
		return -ENOMEM;
	int rc = mf_catalog_expire_shards(c, recs, n, done);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (!done[i] || recs[i].state != MF_SHARD_MATERIALIZED)
			continue;
		/* not served from memory in an outage once expired */
		struct mf_shard_rec gone = recs[i];
		gone.state = MF_SHARD_ABSENT;
		eng_known_remember(e, &gone);
		int r = mf_store_shard_remove(e->store, recs[i].fp,
					      recs[i].run_id, recs[i].index);
		if (r && r != -ENOENT && rc == 0)
			rc = r;
	}
	if (done != &one)
		free(done);
	return rc;
}

/* True when rec is the materialized computation generation names
 * (0: any). */
static bool rec_is(const struct mf_shard_rec *rec, uint64_t generation)
{
	if (!generation)
		return true;
	return rec->state == MF_SHARD_MATERIALIZED &&
	    rec->generation == generation;
}

/* Judged as the catalog's claim judges a run (mf_catalog_judge_run). */
static bool run_alive(struct mf_catalog *c, const char *run_id,
		      int64_t pending_expiry)
{
	struct mf_run_rec run;
	bool alive = true;
	int rc = mf_catalog_get_run(c, run_id, &run);
	if (rc)
		return rc != -ENOENT; /* a busy catalog proves nothing */
	rc = mf_catalog_judge_run(c, &run, mf_now_s(), pending_expiry, &alive);
	return rc != 0 || alive; /* nor does a failed judge */
}

/* True when rec is a computation under way: running, in a live run. */
static bool computing(struct mf_catalog *c, const struct mf_shard_rec *rec)
{
	if (rec->state != MF_SHARD_RUNNING)
		return false;
	struct mf_snapshot_rec snap;
	int64_t pending = 0; /* the catalog's floor, when the row is gone */
	if (mf_catalog_get_snapshot(c, rec->fp, &snap) == 0) {
		pending = snap.pending_expiry;
		mf_snapshot_rec_release(&snap);
	}
	return run_alive(c, rec->run_id, pending);
}

/* Expires the shard when its row is the computation generation names
 * (0: whatever it holds, but not a computation under way: -EBUSY, since
 * its result would land after the expiry); the expiry holds only while
 * the row is still the one read here. */
static int expire_if(struct mf_engine *e, const char *fp, uint32_t shard,
		     uint64_t generation)
{
	/* served here and still committing: expire it once it is done */
	eng_commit_wait(e, fp, (int64_t)shard);
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct mf_shard_rec rec;
	rc = mf_catalog_get_shard(c, fp, shard, &rec);
	if (rc == 0) {
		if (!generation && computing(c, &rec))
			rc = -EBUSY;
		else if (rec_is(&rec, generation))
			rc = eng_expire_recs(e, c, &rec, 1);
		mf_shard_rec_release(&rec);
	}
	eng_catalog_put(e, c);
	return rc;
}

int mf_engine_expire_shard(struct mf_engine *e, const char *fp, uint32_t shard)
{
	return expire_if(e, fp, shard, 0);
}

int mf_engine_report_corrupt(struct mf_engine *e, const char *fp,
			     uint32_t shard, uint64_t generation)
{
	return expire_if(e, fp, shard, generation);
}

/* Expires every shard of fp that is not being computed, and gives up the
 * claims of dead runs; -EBUSY when a live run computes one (the others
 * expired all the same), as mf_engine_expire_shard answers for that
 * shard. */
static int expire_all(struct mf_engine *e, struct mf_catalog *c, const char *fp)
{
	struct mf_shard_rec *recs;
	size_t n;
	int rc = mf_catalog_list_shards(c, fp, &recs, &n);
	if (rc)
		return rc;
	rc = eng_expire_recs(e, c, recs, n);
	bool busy = false;
	for (size_t i = 0; i < n; i++) {
		if (rc == 0 && recs[i].state == MF_SHARD_RUNNING) {
			if (computing(c, &recs[i]))
				busy = true;
			else /* a dead run's claim: the next claim takes it
			      * over anyway; give it up so that the snapshot
			      * can go (-ESTALE: taken over meanwhile) */
				(void)mf_catalog_abandon_shard(
				    c, fp, recs[i].index, recs[i].run_id);
		}
		mf_shard_rec_release(&recs[i]);
	}
	free(recs);
	return rc ? rc : busy ? -EBUSY : 0;
}

/* The store side of a snapshot whose rows went: the folders of the runs
 * deleted with it, then the fingerprint folder with its metadata file
 * if no other run folder is left in it (one made since belongs to a claim
 * after a new registration, not to what was deleted). */
static int remove_dropped(struct mf_engine *e, const char *fp,
			  const struct mf_run_rec *runs, size_t n)
{
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		int r = mf_store_run_remove(e->store, fp, runs[i].run_id);
		if (r && r != -ENOENT && rc == 0)
			rc = r;
	}
	char **left;
	size_t nleft;
	int r = mf_store_list_runs(e->store, fp, &left, &nleft);
	if (r == 0) {
		mf_strv_free(left, nleft);
		if (nleft == 0)
			r = mf_store_snapshot_remove(e->store, fp);
	}
	if (r && r != -ENOENT && rc == 0)
		rc = r;
	return rc;
}

/* A snapshot nobody serves here leaves the catalog and the store, if
 * every shard is absent once what was listed has expired; a shard claimed
 * or computed since keeps it (-ENOTEMPTY from the catalog: nothing to
 * do, the next expiry tries again). */
static int drop_snapshot(struct mf_engine *e, struct mf_catalog *c,
			 const char *fp)
{
	struct mf_run_rec *runs = NULL;
	size_t n = 0;
	int rc = mf_catalog_delete_snapshot(c, fp, &runs, &n);
	if (rc == -ENOTEMPTY)
		return 0;
	if (rc == 0)
		rc = remove_dropped(e, fp, runs, n);
	free(runs);
	return rc;
}

int mf_engine_expire_snapshot(struct mf_engine *e, const char *fp)
{
	if (!mf_is_hex(fp, MF_FP_HEX_LEN))
		return -EINVAL;
	eng_commit_wait(e, fp, -1);
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct mf_snapshot_rec snap;
	rc = mf_catalog_get_snapshot(c, fp, &snap);
	if (rc == -ENOENT) { /* only in the store: remove it on purpose */
		eng_catalog_put(e, c);
		return mf_store_snapshot_remove(e->store, fp);
	}
	if (rc == 0) {
		mf_snapshot_rec_release(&snap);
		rc = expire_all(e, c, fp);
	}
	/* one still registered here stays listed, every shard absent */
	if (rc == 0 && !eng_is_registered(e, fp))
		rc = drop_snapshot(e, c, fp);
	eng_catalog_put(e, c);
	return rc;
}

/* ---- gc ---- */

static bool run_in_use(const struct mf_shard_rec *recs, size_t n,
		       const char *run_id)
{
	for (size_t i = 0; i < n; i++)
		if ((recs[i].state == MF_SHARD_MATERIALIZED ||
		     recs[i].state == MF_SHARD_RUNNING) &&
		    strcmp(recs[i].run_id, run_id) == 0)
			return true;
	return false;
}

/* run_in_use on the shards as they are now, read after the run's row: a
 * run that another process adopted (eng_index) after gc listed the shards
 * is dead and holds shards. Any doubt keeps the run. */
static bool run_in_use_now(struct mf_catalog *c, const char *fp,
			   const char *run_id)
{
	struct mf_shard_rec *recs;
	size_t n;
	if (mf_catalog_list_shards(c, fp, &recs, &n) != 0)
		return true;
	bool used = run_in_use(recs, n, run_id);
	for (size_t i = 0; i < n; i++)
		mf_shard_rec_release(&recs[i]);
	free(recs);
	return used;
}

/* True when shard k's file in run_id is, or is about to be, the one the
 * catalog points at. Asks the catalog again: the listing gc started from
 * may predate a commit. Any doubt keeps the file. */
static bool file_in_use(struct mf_catalog *c, const char *fp,
			const char *run_id, uint32_t k,
			const struct mf_shard_rec *recs, size_t n)
{
	if (k < n && recs[k].state == MF_SHARD_MATERIALIZED &&
	    strcmp(recs[k].run_id, run_id) == 0)
		return true;
	struct mf_shard_rec now;
	int rc = mf_catalog_get_shard(c, fp, k, &now);
	if (rc)
		return rc != -ENOENT;
	bool used = (now.state == MF_SHARD_MATERIALIZED ||
		     now.state == MF_SHARD_RUNNING) &&
	    strcmp(now.run_id, run_id) == 0;
	mf_shard_rec_release(&now);
	return used;
}

/* Removes shard files of a run that no catalog row points at. */
static void gc_files(struct mf_engine *e, struct mf_catalog *c, const char *fp,
		     const char *run_id, const struct mf_shard_rec *recs,
		     size_t n, struct mf_gc_stats *st)
{
	uint32_t *idx;
	size_t k;
	if (mf_store_list_shards(e->store, fp, run_id, &idx, &k) != 0)
		return;
	for (size_t i = 0; i < k; i++) {
		if (!file_in_use(c, fp, run_id, idx[i], recs, n) &&
		    mf_store_shard_remove(e->store, fp, run_id, idx[i]) == 0)
			st->files_removed++;
	}
	free(idx);
}

/* True when a run folder of fp holds a committed shard file. */
static bool holds_shards(struct mf_engine *e, const char *fp)
{
	char **runs;
	size_t nr;
	if (mf_store_list_runs(e->store, fp, &runs, &nr) != 0)
		return true;
	bool found = false;
	for (size_t i = 0; !found && i < nr; i++) {
		uint32_t *idx;
		size_t k;
		if (mf_store_list_shards(e->store, fp, runs[i], &idx, &k) != 0)
			found = true;
		else {
			found = k > 0;
			free(idx);
		}
	}
	mf_strv_free(runs, nr);
	return found;
}

/* A folder the catalog does not know, which eng_index did not adopt. With
 * its metadata file intact it is more likely a lost catalog than
 * garbage, and its shard files are data whatever the metadata says: keep
 * it (`matctl fsck --rebuild` indexes it, `matctl rm FP` removes it on
 * purpose). Only a folder with neither goes. */
static void gc_unknown(struct mf_engine *e, const char *fp,
		       struct mf_gc_stats *st)
{
	char *meta = NULL;
	size_t len;
	if (mf_store_read_metadata(e->store, fp, &meta, &len) == 0 ||
	    holds_shards(e, fp)) {
		free(meta);
		st->snapshots_unindexed++;
		return;
	}
	if (mf_store_snapshot_remove(e->store, fp) == 0)
		st->snapshots_removed++;
}

static void gc_run(struct mf_engine *e, struct mf_catalog *c, const char *fp,
		   const char *run_id, const struct mf_shard_rec *recs,
		   size_t n, int64_t pending_expiry, struct mf_gc_stats *st)
{
	bool alive = run_alive(c, run_id, pending_expiry);
	if (!alive && !run_in_use(recs, n, run_id) &&
	    !run_in_use_now(c, fp, run_id)) {
		if (mf_store_run_remove(e->store, fp, run_id) == 0)
			st->runs_removed++;
		return;
	}
	gc_files(e, c, fp, run_id, recs, n, st);
	uint32_t tmp = 0;
	if (!alive && mf_store_tmp_remove(e->store, fp, run_id, &tmp) == 0)
		st->files_removed += tmp;
}

static int gc_snapshot(struct mf_engine *e, struct mf_catalog *c,
		       const char *fp, struct mf_gc_stats *st)
{
	/* what the catalog never knew is recorded, not judged dead: the
	 * shard files of runs it has no row for (a lost or replaced
	 * catalog), and a folder it lacks that holds such files */
	struct mf_rebuild_stats ad = {0};
	int rc = eng_index(e->store, c, fp, NULL, NULL, &ad);
	if (rc)
		return rc;
	st->snapshots_adopted += ad.snapshots;
	st->shards_adopted += ad.shards;
	struct mf_snapshot_rec snap;
	rc = mf_catalog_get_snapshot(c, fp, &snap);
	if (rc == -ENOENT) {
		gc_unknown(e, fp, st);
		return 0;
	}
	if (rc)
		return rc;
	int64_t pending_expiry = snap.pending_expiry;
	mf_snapshot_rec_release(&snap);
	struct mf_shard_rec *recs;
	size_t n;
	char **runs;
	size_t nr;
	rc = mf_catalog_list_shards(c, fp, &recs, &n);
	if (rc)
		return rc;
	rc = mf_store_list_runs(e->store, fp, &runs, &nr);
	for (size_t i = 0; rc == 0 && i < nr; i++)
		gc_run(e, c, fp, runs[i], recs, n, pending_expiry, st);
	if (rc == 0)
		mf_strv_free(runs, nr);
	for (size_t i = 0; i < n; i++)
		mf_shard_rec_release(&recs[i]);
	free(recs);
	return rc;
}

/* A hint is kept while the shard it names is materialized by its run,
 * or when the catalog cannot say. */
static bool hint_current(void *arg, const char *sfp,
			 const struct mf_store_donor *d)
{
	(void)sfp;
	struct mf_shard_rec rec;
	int rc = mf_catalog_get_shard(arg, d->fp, d->shard, &rec);
	if (rc)
		return rc != -ENOENT;
	bool ok = rec.state == MF_SHARD_MATERIALIZED &&
	    strcmp(rec.run_id, d->run_id) == 0;
	mf_shard_rec_release(&rec);
	return ok;
}

int mf_engine_gc(struct mf_engine *e, struct mf_gc_stats *stats)
{
	struct mf_gc_stats st = {0};
	char **fps;
	size_t n;
	int rc = mf_store_list_snapshots(e->store, &fps, &n);
	if (rc)
		return rc;
	struct mf_catalog *c = NULL;
	rc = eng_catalog_get(e, &c);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = gc_snapshot(e, c, fps[i], &st);
	if (rc == 0) /* holds of processes that died without releasing */
		rc = mf_catalog_prune_holds(c, mf_now_s(), NULL);
	if (rc == 0) /* hints of data no longer there (engine_run.c) */
		rc = mf_store_shared_sweep(e->store, hint_current, c,
					   &st.hints_removed);
	eng_catalog_put(e, c);
	mf_strv_free(fps, n);
	if (rc == 0 && stats)
		*stats = st;
	return rc;
}

/* ---- verify ---- */

/* The file's sizes are the catalog's, as fsck compares them: a valid
 * file of another computation of the shard (restored from a backup, say)
 * is not the one the catalog describes. */
static int verify_sizes(const struct mf_shard_reader *r,
			const struct mf_shard_rec *rec)
{
	struct mf_shard_stat ss;
	mf_shard_reader_stat(r, &ss);
	if (ss.stored_bytes != rec->stored_bytes ||
	    ss.raw_bytes != rec->raw_bytes || ss.chunks != rec->chunks)
		return MF_CORRUPT("shard file sizes differ from the catalog");
	return 0;
}

static int verify_one(struct mf_engine *e, struct mf_catalog *c,
		      const struct mf_shard_rec *rec)
{
	struct mf_shard_reader *r;
	int rc = mf_shard_reader_open(e->store, rec->fp, rec->run_id,
				      rec->index, &r);
	if (rc == 0) {
		rc = verify_sizes(r, rec);
		if (rc == 0)
			rc = mf_shard_reader_verify(r, NULL);
		mf_shard_reader_close(r);
	}
	if (rc == -ENOENT)
		rc = MF_CORRUPT("shard file missing");
	else if (rc == -ELOOP)
		rc = MF_CORRUPT("shard file is a symbolic link");
	if (rc == -EBADMSG)
		(void)eng_expire_recs(e, c, rec, 1);
	return rc;
}

int mf_engine_verify(struct mf_engine *e, const char *fp,
		     void (*report)(void *arg, uint32_t shard, int rc),
		     void *arg)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct mf_shard_rec *recs;
	size_t n;
	rc = mf_catalog_list_shards(c, fp, &recs, &n);
	if (rc) {
		eng_catalog_put(e, c);
		return rc;
	}
	int worst = 0;
	for (size_t i = 0; i < n; i++) {
		if (recs[i].state == MF_SHARD_MATERIALIZED) {
			int r = verify_one(e, c, &recs[i]);
			if (report)
				report(arg, recs[i].index, r);
			if (r && worst != -EBADMSG)
				worst = r;
		}
		mf_shard_rec_release(&recs[i]);
	}
	free(recs);
	eng_catalog_put(e, c);
	return worst;
}
