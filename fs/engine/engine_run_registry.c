/*
 * engine_run_registry.c - this process's runs, one per fingerprint: made
 * by the first claim, shared by the threads claiming shards of it,
 * counted in and out by its materializations, retired when the catalog
 * declared it dead or done, freed after its last materialization.
 *
 * Not for: running a run's stages (engine_run.c), its heartbeat and idle
 * end (engine_heartbeat.c) or its catalog row (catalog/).
 */
#include "engine_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- this process's runs ---- */

static void run_rec_fill(struct mf_engine *e, const char *fp,
			 const char *run_id, struct mf_run_rec *me)
{
	memset(me, 0, sizeof(*me));
	snprintf(me->run_id, sizeof(me->run_id), "%s", run_id);
	snprintf(me->fp, sizeof(me->fp), "%s", fp);
	snprintf(me->host, sizeof(me->host), "%s", e->host);
	me->pid = (int32_t)e->pid;
	me->pid_start = e->pid_start;
	me->started = me->heartbeat = mf_now_s();
	snprintf(me->state, sizeof(me->state), "active");
	memcpy(me->boot_id, e->boot_id, sizeof(me->boot_id));
	me->pid_ns = e->pid_ns;
}

/* This process's run for fp, found or made under e->lock, so that threads
 * opening shards of fp at once share one run. Its catalog row is added by
 * its first claim (mf_catalog_claim_shard). */
int eng_run_for(struct mf_engine *e, const char *fp, struct mf_run_rec *me)
{
	int rc = 0;
	pthread_mutex_lock(&e->lock);
	struct run_entry *r = e->runs;
	while (r && (r->retired || strcmp(r->fp, fp) != 0))
		r = r->next;
	if (!r) {
		r = calloc(1, sizeof(*r));
		rc = r ? mf_random_hex(MF_RUN_ID_HEX_LEN / 2, r->run_id)
		       : -ENOMEM;
		if (rc == 0) {
			memcpy(r->fp, fp, sizeof(r->fp));
			r->idle_since = eng_mono_s();
			r->next = e->runs;
			e->runs = r;
		} else {
			free(r);
		}
	}
	if (rc == 0) {
		r->users++; /* not over while a claim uses it (run_unuse) */
		run_rec_fill(e, fp, r->run_id, me);
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

/* The claim that run_for gave run_id to ended. */
void eng_run_unuse(struct mf_engine *e, const char *run_id)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next) {
		if (strcmp(r->run_id, run_id) == 0) {
			if (--r->users == 0 && r->active == 0)
				r->idle_since = eng_mono_s();
			break;
		}
	}
	pthread_mutex_unlock(&e->lock);
}

/* Unlinks and frees r; e->lock held. */
static void run_free_locked(struct mf_engine *e, struct run_entry *r)
{
	for (struct run_entry **p = &e->runs; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			free(r);
			return;
		}
	}
}

void eng_run_set_active(struct mf_engine *e, const char *run_id, int delta)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next) {
		if (strcmp(r->run_id, run_id) == 0) {
			r->active = (unsigned)((int)r->active + delta);
			if (r->active == 0)
				r->idle_since = eng_mono_s();
			if (r->retired && r->active == 0)
				run_free_locked(e, r);
			break;
		}
	}
	pthread_mutex_unlock(&e->lock);
}

/* The catalog declared run_id dead or done (a claimer elsewhere judged
 * it so): no new claim may use it, so the next run_for makes a new run.
 * Its materializations still in flight finish (their outcome is recorded
 * only where their claim still holds); it is freed after the last. */
void eng_run_retire(struct mf_engine *e, const char *run_id)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next) {
		if (strcmp(r->run_id, run_id) == 0) {
			r->retired = true;
			if (r->active == 0)
				run_free_locked(e, r);
			break;
		}
	}
	pthread_mutex_unlock(&e->lock);
}
