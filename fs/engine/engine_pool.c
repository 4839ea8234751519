/*
 * engine_pool.c - the engine's catalog connections: where the catalog is,
 * the pool of idle connections (taken newest first, the oldest closed
 * after ENG_POOL_IDLE_S, one kept), a new connection opened when none is
 * idle, and whether a computation is the one the catalog recorded.
 *
 * Not for: what happens when the catalog cannot be reached
 * (engine_outage.c), or the catalog's own connection handling (catalog/).
 */
#include "engine_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int eng_catalog_location(const struct mf_engine_opts *o,
			 const struct mf_store *st, char **out)
{
	if (o->catalog) {
		*out = strdup(o->catalog);
		return *out ? 0 : -ENOMEM;
	}
	char *file;
	if (asprintf(&file, "%s/%s", mf_store_path(st), MF_CATALOG_FILE) < 0)
		return -ENOMEM;
	int rc = mf_catalog_location_of_file(file, out);
	free(file);
	return rc;
}

bool mf_engine_catalog_has_password(const char *location)
{
	return mf_catalog_location_has_password(location);
}

const char *mf_engine_catalog_shown(const char *location)
{
	static _Thread_local char shown[PATH_MAX + 64];
	mf_catalog_location_told(location, shown, sizeof(shown));
	return shown;
}

int eng_catalog_get(struct mf_engine *e, struct mf_catalog **out)
{
	bool moved = false;
	for (;;) {
		struct mf_catalog *c = NULL;
		pthread_mutex_lock(&e->lock);
		if (e->n_pool > 0) /* the newest: the oldest age out */
			c = e->pool[--e->n_pool];
		pthread_mutex_unlock(&e->lock);
		if (!c)
			break;
		/* catalog.db deleted or replaced: never answer from the old
		 * file; every idle connection to it goes the same way */
		if (!mf_catalog_moved(c)) {
			*out = c;
			return 0;
		}
		mf_catalog_close(c);
		moved = true;
	}
	int rc = mf_engine_catalog_open(e, out);
	/* a new catalog, whoever indexed it (matctl gc may have): it holds
	 * none of this engine's holds, which keep the registered specs'
	 * rows (and names) from another process's expiry */
	if (rc == 0 && moved)
		eng_holds_stale(e);
	return rc;
}

void eng_catalog_put(struct mf_engine *e, struct mf_catalog *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&e->lock);
	bool kept = e->n_pool < ENG_POOL_IDLE_MAX;
	if (kept) {
		e->pool_at[e->n_pool] = eng_mono_s();
		e->pool[e->n_pool++] = c;
	}
	pthread_mutex_unlock(&e->lock);
	if (!kept) /* a burst is over: its connections go */
		mf_catalog_close(c);
}

void eng_catalog_trim(struct mf_engine *e)
{
	struct mf_catalog *old[ENG_POOL_IDLE_MAX];
	size_t n = 0;
	int64_t before = eng_mono_s() - ENG_POOL_IDLE_S;
	pthread_mutex_lock(&e->lock);
	/* the oldest first; one stays, for a reader when the server has no
	 * slot left for a new connection */
	while (n + 1 < e->n_pool && e->pool_at[n] <= before)
		n++;
	memcpy(old, e->pool, n * sizeof(*old));
	memmove(e->pool, e->pool + n, (e->n_pool - n) * sizeof(*e->pool));
	memmove(e->pool_at, e->pool_at + n,
		(e->n_pool - n) * sizeof(*e->pool_at));
	e->n_pool -= n;
	pthread_mutex_unlock(&e->lock);
	for (size_t i = 0; i < n; i++)
		mf_catalog_close(old[i]);
}

int mf_engine_catalog_open(struct mf_engine *e, struct mf_catalog **out)
{
	struct mf_catalog *c;
	int rc = mf_catalog_open(e->catalog_path, e->opts.busy_timeout_ms, &c);
	if (rc)
		return rc;
	rc = eng_catalog_ready(e, c); /* a new catalog gets the store first */
	if (rc) {
		mf_catalog_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

bool eng_recorded(struct mf_catalog *c, const char *fp, uint32_t shard,
		  const char *run_id, uint64_t generation)
{
	struct mf_shard_rec cur;
	if (!c || mf_catalog_get_shard(c, fp, shard, &cur) != 0)
		return false;
	bool ours = cur.state == MF_SHARD_MATERIALIZED &&
	    strcmp(cur.run_id, run_id) == 0 &&
	    (generation == 0 || cur.generation == generation);
	mf_shard_rec_release(&cur);
	return ours;
}
