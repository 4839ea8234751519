/*
 * engine_read.c - what the catalog says, for the front ends: snapshot and
 * shard rows, the fingerprints live engines hold, and the open of a shard
 * that is materialized already (the FUSE layer's fast path), each on a
 * connection of the engine's pool.
 *
 * Not for: opening a shard that must be computed or waited for
 * (engine_claim.c), or changing anything but a last-read time.
 */
#include "engine_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void mf_engine_snapshot_recs_free(struct mf_engine_snapshot *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		mf_engine_snapshot_release(&v[i]);
	free(v);
}

void mf_engine_shard_recs_free(struct mf_engine_shard *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		mf_engine_shard_release(&v[i]);
	free(v);
}

int64_t mf_engine_now(struct mf_engine *e)
{
	struct mf_catalog *c;
	int64_t now = 0;
	if (eng_catalog_get(e, &c) == 0) {
		if (mf_catalog_now(c, &now) != 0)
			now = 0;
		eng_catalog_put(e, c);
	}
	return now > 0 ? now : mf_now_s();
}

int mf_engine_list_snapshots(struct mf_engine *e,
			     struct mf_engine_snapshot **out, size_t *n)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct mf_snapshot_rec *v = NULL;
	size_t k = 0;
	rc = mf_catalog_list_snapshots(c, &v, &k);
	eng_catalog_put(e, c);
	struct mf_engine_snapshot *w = rc ? NULL : calloc(k + 1, sizeof(*w));
	for (size_t i = 0; w && i < k; i++)
		eng_snapshot_take(&v[i], &w[i]);
	for (size_t i = 0; v && i < k; i++)
		mf_snapshot_rec_release(&v[i]); /* only where not taken */
	free(v);
	if (rc == 0 && !w)
		return -ENOMEM;
	if (rc == 0) {
		*out = w;
		*n = k;
	}
	return rc;
}

int mf_engine_snapshot(struct mf_engine *e, const char *fp,
		       struct mf_engine_snapshot *out)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct mf_snapshot_rec rec;
	rc = mf_catalog_get_snapshot(c, fp, &rec);
	eng_catalog_put(e, c);
	if (rc == 0)
		eng_snapshot_take(&rec, out);
	return rc;
}

int mf_engine_list_shards(struct mf_engine *e, const char *fp,
			  struct mf_engine_shard **out, size_t *n)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct mf_shard_rec *v = NULL;
	size_t k = 0;
	rc = mf_catalog_list_shards(c, fp, &v, &k);
	eng_catalog_put(e, c);
	struct mf_engine_shard *w = rc ? NULL : calloc(k + 1, sizeof(*w));
	for (size_t i = 0; w && i < k; i++)
		eng_shard_take(&v[i], &w[i]);
	for (size_t i = 0; v && i < k; i++)
		mf_shard_rec_release(&v[i]); /* only where not taken */
	free(v);
	if (rc == 0 && !w)
		return -ENOMEM;
	if (rc == 0) {
		*out = w;
		*n = k;
	}
	return rc;
}

/* mf_engine_shard_rec, the catalog's row. */
static int shard_row(struct mf_engine *e, const char *fp, uint32_t shard,
		     struct mf_shard_rec *out)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc == 0) {
		rc = mf_catalog_get_shard(c, fp, shard, out);
		eng_catalog_put(e, c);
	}
	if (rc == 0)
		eng_known_remember(e, out);
	/* the catalog cannot be reached: a shard last seen materialized is
	 * served as such (its file is immutable), any other looks absent
	 * (an open of it waits for the catalog, a bounded time) */
	else if (mf_catalog_unreachable(rc) &&
		 (eng_known_recall(e, fp, shard, out) == 0 ||
		  eng_sealed_recall(e, fp, shard, out) == 0))
		rc = 0;
	else if (mf_catalog_unreachable(rc))
		rc = -ENOENT;
	return rc;
}

int mf_engine_shard_rec(struct mf_engine *e, const char *fp, uint32_t shard,
			struct mf_engine_shard *out)
{
	struct mf_shard_rec rec;
	int rc = shard_row(e, fp, shard, &rec);
	if (rc == 0)
		eng_shard_take(&rec, out);
	return rc;
}

int mf_engine_list_runs(struct mf_engine *e, const char *fp,
			struct mf_run_rec **out, size_t *n)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	rc = mf_catalog_list_runs(c, fp, out, n);
	eng_catalog_put(e, c);
	return rc;
}

int mf_engine_list_held(struct mf_engine *e, char (**out)[MF_FP_HEX_LEN + 1],
			size_t *n)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct mf_run_rec *h = NULL;
	size_t k = 0;
	rc = mf_catalog_prune_holds(c, mf_now_s(), NULL);
	if (rc == 0)
		rc = mf_catalog_list_holds(c, NULL, &h, &k);
	eng_catalog_put(e, c);
	if (rc)
		return rc;
	char(*v)[MF_FP_HEX_LEN + 1] = calloc(k + 1, sizeof(*v));
	if (!v) {
		free(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < k; i++)
		memcpy(v[i], h[i].fp, sizeof(v[i]));
	free(h);
	*out = v;
	*n = k;
	return 0;
}

/* Sets the shard's last read to now, unless rec's is recent enough. */
static void touch(struct mf_engine *e, const struct mf_shard_rec *rec)
{
	int64_t now = mf_now_s();
	if (rec->last_read + MF_ENGINE_TOUCH_EVERY_S > now)
		return;
	struct mf_catalog *c;
	if (eng_catalog_get(e, &c) == 0) {
		(void)mf_catalog_touch(c, rec->fp, rec->index, now);
		eng_catalog_put(e, c);
	}
}

int mf_engine_open_materialized(
    struct mf_engine *e, const char *fp, uint32_t shard,
    bool (*have)(void *arg, const struct mf_engine_shard *rec), void *arg,
    struct mf_shard_reader **out, struct mf_engine_shard *rec)
{
	struct mf_shard_rec cur;
	int rc = shard_row(e, fp, shard, &cur);
	if (rc)
		return rc == -ENOENT ? -EAGAIN : rc;
	struct mf_engine_shard view;
	eng_shard_view(&cur, &view);
	struct mf_shard_reader *r = NULL;
	if (cur.state == MF_SHARD_RUNNING) {
		/* sealed here and being committed: the same file */
		if (!(have && have(arg, &view)) &&
		    eng_sealed_open(e, &cur, &r) != 0) {
			mf_shard_rec_release(&cur);
			return -EAGAIN;
		}
		*out = r;
		eng_shard_take(&cur, rec);
		return 0;
	}
	if (cur.state != MF_SHARD_MATERIALIZED) {
		mf_shard_rec_release(&cur);
		return -EAGAIN;
	}
	/* the row first, then the file: never older than the row */
	if (!(have && have(arg, &view)) &&
	    mf_shard_reader_open(e->store, fp, cur.run_id, shard, &r) != 0) {
		mf_shard_rec_release(&cur);
		return -EAGAIN;
	}
	touch(e, &cur);
	*out = r;
	eng_shard_take(&cur, rec);
	return 0;
}

void mf_engine_stats(struct mf_engine *e, struct mf_engine_stats *out)
{
	out->started = atomic_load(&e->n_started);
	out->failed = atomic_load(&e->n_failed);
	out->running = atomic_load(&e->n_running);
	out->stage_seconds = (double)atomic_load(&e->stage_ns) / 1e9;
}

int mf_engine_totals(struct mf_engine *e, struct mf_catalog_totals *out)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	rc = mf_catalog_get_totals(c, out);
	eng_catalog_put(e, c);
	return rc;
}

/* The records of one row's file; -ENODATA unless it is materialized. */
static int rec_records(struct mf_engine *e, const char *fp,
		       const struct mf_engine_shard *rec,
		       struct mf_records *framing, uint64_t *count)
{
	if (rec->state != MF_ENGINE_MATERIALIZED || !rec->run_id[0])
		return -ENODATA;
	return mf_shard_file_records(e->store, fp, rec->run_id, rec->index,
				     framing, count);
}

int mf_engine_shard_records(struct mf_engine *e, const char *fp, uint32_t shard,
			    struct mf_records *framing, uint64_t *count)
{
	struct mf_engine_shard rec;
	int rc = mf_engine_shard_rec(e, fp, shard, &rec);
	if (rc == -ENOENT)
		return -ENODATA;
	if (rc)
		return rc;
	rc = rec_records(e, fp, &rec, framing, count);
	mf_engine_shard_release(&rec);
	return rc;
}

int mf_engine_snapshot_records(struct mf_engine *e, const char *fp,
			       struct mf_records *framing, uint64_t *count)
{
	struct mf_engine_snapshot snap;
	struct mf_engine_shard *recs = NULL;
	size_t n = 0;
	int rc = mf_engine_snapshot(e, fp, &snap);
	if (rc)
		return rc == -ENOENT ? -ENODATA : rc;
	uint32_t shards = snap.shards;
	mf_engine_snapshot_release(&snap);
	rc = mf_engine_list_shards(e, fp, &recs, &n);
	if (rc == 0 && n != shards)
		rc = -ENODATA;
	uint64_t total = 0;
	struct mf_records fr = {MF_FRAMING_NONE, 0, false};
	for (size_t i = 0; rc == 0 && i < n; i++) {
		uint64_t k;
		rc = rec_records(e, fp, &recs[i], &fr, &k);
		total += k;
	}
	mf_engine_shard_recs_free(recs, n);
	if (rc)
		return rc;
	*framing = fr;
	*count = total;
	return 0;
}
