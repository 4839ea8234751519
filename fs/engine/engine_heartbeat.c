/*
 * engine_heartbeat.c - the heartbeat thread: every heartbeat_s it
 * refreshes the rows of this process's runs with work in flight, ends the
 * runs idle too long, trims the connection pool and, every
 * HOLDS_REFRESH_S or when the catalog was replaced, holds again what this
 * engine holds.
 *
 * Not for: the runs themselves (engine_run_registry.c) or the holds
 * (engine_spec.c).
 */
#include "engine_i.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOLDS_REFRESH_S 60 /* holds held again, heartbeats refreshed */

/* ---- heartbeat ---- */

/* Refreshes the rows of every run with work in flight: elsewhere (another
 * host or pid namespace) the heartbeat is all that tells it is alive.
 * Runs every heartbeat_s, work or not. */
static void heartbeat_once(struct mf_engine *e)
{
	typedef char run_id_t[MF_RUN_ID_HEX_LEN + 1];
	run_id_t *ids = NULL;
	size_t n = 0, cap = 0;
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next)
		cap += r->active && !r->retired;
	ids = cap ? calloc(cap, sizeof(*ids)) : NULL;
	for (struct run_entry *r = e->runs; ids && r; r = r->next)
		if (r->active && !r->retired)
			memcpy(ids[n++], r->run_id, sizeof(ids[0]));
	pthread_mutex_unlock(&e->lock);
	/* taking a connection also notices a catalog.db deleted or
	 * replaced (one stat): the new one is indexed, and this engine's
	 * holds put back at once (holds_stale), not at the next refresh */
	struct mf_catalog *c;
	if (eng_catalog_get(e, &c) == 0) {
		for (size_t i = 0; i < n; i++)
			(void)mf_catalog_heartbeat(c, ids[i], mf_now_s());
		eng_catalog_put(e, c);
	}
	free(ids);
}

/* Ends this process's runs idle for ENG_RUN_IDLE_HEARTBEATS heartbeats:
 * their rows say "done" (dead to claims and gc; their committed shards
 * stay), which on PostgreSQL gives their advisory locks back, so a
 * daemon's locks do not grow with every fingerprint it ever computed. */
static void runs_end_idle(struct mf_engine *e)
{
	typedef char run_id_t[MF_RUN_ID_HEX_LEN + 1];
	run_id_t *ids = NULL;
	size_t n = 0, cap = 0;
	int64_t before = eng_mono_s() -
	    (int64_t)e->opts.heartbeat_s * ENG_RUN_IDLE_HEARTBEATS;
	pthread_mutex_lock(&e->lock);
	for (struct run_entry **p = &e->runs; *p;) {
		struct run_entry *r = *p;
		bool over = !r->retired && r->active == 0 && r->users == 0 &&
		    r->idle_since <= before;
		if (over && n == cap) {
			size_t c = cap ? 2 * cap : 8;
			run_id_t *a = realloc(ids, c * sizeof(*a));
			over = a != NULL;
			if (a) {
				ids = a;
				cap = c;
			}
		}
		if (!over) {
			p = &r->next;
			continue;
		}
		memcpy(ids[n++], r->run_id, sizeof(ids[0]));
		*p = r->next;
		free(r);
	}
	pthread_mutex_unlock(&e->lock);
	struct mf_catalog *c;
	if (n > 0 && eng_catalog_get(e, &c) == 0) {
		/* no row (its claims all found the shard done or running
		 * elsewhere): nothing to record, its lock goes all the same */
		for (size_t i = 0; i < n; i++)
			(void)mf_catalog_set_run_state(c, ids[i], "done");
		eng_catalog_put(e, c);
	}
	free(ids);
}

void eng_holds_stale(struct mf_engine *e)
{
	pthread_mutex_lock(&e->lock);
	e->holds_stale = true;
	if (e->hb_started)
		pthread_cond_signal(&e->hb_cv);
	pthread_mutex_unlock(&e->lock);
}

static void *heartbeat_main(void *arg)
{
	struct mf_engine *e = arg;
	pthread_mutex_lock(&e->lock);
	while (!e->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += e->opts.heartbeat_s;
		if (!e->holds_stale)
			pthread_cond_timedwait(&e->hb_cv, &e->lock, &ts);
		if (e->stopping)
			break;
		bool holds = e->holds_stale ||
		    (int64_t)(mf_mono_ns() / 1000000000) - e->holds_refreshed >=
			HOLDS_REFRESH_S;
		e->holds_stale = false;
		pthread_mutex_unlock(&e->lock);
		heartbeat_once(e);
		runs_end_idle(e);
		eng_catalog_trim(e);
		if (holds)
			eng_holds_refresh(e);
		pthread_mutex_lock(&e->lock);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

int eng_heartbeat_start(struct mf_engine *e)
{
	pthread_condattr_t ca;
	int rc = pthread_condattr_init(&ca);
	if (rc)
		return -rc;
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(&e->hb_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rc)
		return -rc;
	rc = pthread_create(&e->hb_thread, NULL, heartbeat_main, e);
	if (rc) {
		pthread_cond_destroy(&e->hb_cv);
		return -rc;
	}
	e->hb_started = true;
	return 0;
}

void eng_heartbeat_stop(struct mf_engine *e)
{
	if (!e->hb_started)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_cond_signal(&e->hb_cv);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->hb_thread, NULL);
	pthread_cond_destroy(&e->hb_cv);
	e->hb_started = false;
}
