/*
 * catalog_sql.c - the loops both SQL backends run around statements that
 * differ only by dialect (catalog_sql.h): expiring listed rows, touching a
 * shard's last read, adding to and reading the totals.
 *
 * Not for: the statements themselves (catalog_sql.h, pg_*.c, sqlite_*.c).
 */
#include "catalog_sql.h"

#include <errno.h>
#include <string.h>

int cat_owner_check(struct mf_catalog *c, const struct mf_snapshot_rec *rec,
		    int (*get)(struct mf_catalog *c, const char *fp,
			       struct mf_snapshot_rec *out))
{
	if (!rec->has_owner)
		return 0;
	struct mf_snapshot_rec have;
	int rc = get(c, rec->fp, &have);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	bool other = have.has_owner && have.owner != rec->owner;
	mf_snapshot_rec_release(&have);
	return other ? -EEXIST : 0;
}

bool cat_expirable(const struct mf_shard_rec *r)
{
	return r->state == MF_SHARD_MATERIALIZED || r->state == MF_SHARD_FAILED;
}

int cat_expire_each(struct mf_catalog *c, const struct cat_tx *tx,
		    int (*one)(struct mf_catalog *c,
			       const struct mf_shard_rec *r, bool *done),
		    const struct mf_shard_rec *recs, size_t n, bool *expired)
{
	int rc = tx->begin(c);
	if (rc)
		return rc;
	for (size_t i = 0; !rc && i < n; i++)
		rc = one(c, &recs[i], &expired[i]);
	return tx->finish(c, rc);
}

int cat_touch_both(struct mf_catalog *c, const struct cat_tx *tx,
		   int (*snap)(struct mf_catalog *c, const char *fp,
			       int64_t now),
		   int (*shard)(struct mf_catalog *c, const char *fp,
				uint32_t index, int64_t now, long *changed),
		   const char *fp, uint32_t index, int64_t now)
{
	long changed = 0;
	int rc = tx->begin(c);
	if (rc)
		return rc;
	rc = snap(c, fp, now);
	rc = rc ? rc : shard(c, fp, index, now, &changed);
	if (!rc && changed == 0)
		rc = -ENOENT;
	return tx->finish(c, rc);
}

int cat_totals_add(struct mf_catalog *c, const struct cat_tx *tx,
		   int (*add)(struct mf_catalog *c, const char *key,
			      uint64_t v),
		   const struct mf_catalog_totals *d)
{
	int rc = tx->begin(c);
	if (rc)
		return rc;
	rc = add(c, "started", d->started);
	rc = rc ? rc : add(c, "failed", d->failed);
	rc = rc ? rc : add(c, "stage_ms", d->stage_ms);
	return tx->finish(c, rc);
}

int cat_totals_take(struct mf_catalog_totals *t, const char *key, int64_t v)
{
	if (!key || v < 0)
		return MF_CORRUPT("totals row");
	if (strcmp(key, "started") == 0)
		t->started = (uint64_t)v;
	else if (strcmp(key, "failed") == 0)
		t->failed = (uint64_t)v;
	else if (strcmp(key, "stage_ms") == 0)
		t->stage_ms = (uint64_t)v;
	return 0;
}
