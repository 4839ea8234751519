/*
 * engine_flight.c - single flight: the threads of this process opening the
 * same shard at once share one attempt. The first leads it (the claim
 * loop, engine_claim.c), the others wait for its outcome and look again.
 *
 * Not for: the claim across processes (engine_claim.c) or cancelling a
 * flight (engine_cancel.c).
 */
#include "engine_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct flight *eng_flight_find(struct mf_engine *e, const char *fp,
			       uint32_t shard)
{
	for (struct flight *f = e->flights; f; f = f->next)
		if (f->shard == shard && strcmp(f->fp, fp) == 0 && !f->done)
			return f;
	return NULL;
}

static void flight_unlink(struct mf_engine *e, struct flight *f)
{
	for (struct flight **p = &e->flights; *p; p = &(*p)->next) {
		if (*p == f) {
			*p = f->next;
			return;
		}
	}
}

/* Waits for another thread's attempt. Returns its rc (and a copy of its
 * error); 0 means it succeeded and the caller should look again. */
static int follow(struct mf_engine *e, struct flight *f, char **err)
{
	f->waiters++;
	while (!f->done)
		pthread_cond_wait(&e->flight_cv, &e->lock);
	int rc = f->rc;
	if (rc && f->err && err && !*err)
		*err = strdup(f->err);
	if (--f->waiters == 0) {
		free(f->err);
		free(f);
	}
	return rc;
}

int mf_engine_open_shard(struct mf_engine *e, const char *fp, uint32_t shard,
			 struct mf_shard_reader **out, char **err)
{
	return eng_open_shard_rec(e, fp, shard, out, NULL, err);
}

int eng_open_shard_rec(struct mf_engine *e, const char *fp, uint32_t shard,
		       struct mf_shard_reader **out, struct mf_shard_rec *rec,
		       char **err)
{
	if (!mf_is_hex(fp, MF_FP_HEX_LEN))
		return -EINVAL;
	for (;;) {
		pthread_mutex_lock(&e->lock);
		struct flight *f = eng_flight_find(e, fp, shard);
		if (f) {
			int rc = follow(e, f, err);
			pthread_mutex_unlock(&e->lock);
			if (rc)
				return rc;
			continue;
		}
		f = calloc(1, sizeof(*f));
		if (!f) {
			pthread_mutex_unlock(&e->lock);
			return -ENOMEM;
		}
		memcpy(f->fp, fp, sizeof(f->fp));
		f->shard = shard;
		f->cancelled = e->cancel_all;
		f->next = e->flights;
		e->flights = f;
		pthread_mutex_unlock(&e->lock);

		int rc = eng_claim_lead(e, f, out, rec, err);

		pthread_mutex_lock(&e->lock);
		flight_unlink(e, f);
		f->done = true;
		f->rc = rc;
		if (rc && err && *err)
			f->err = strdup(*err);
		bool orphan = f->waiters == 0;
		pthread_cond_broadcast(&e->flight_cv);
		pthread_mutex_unlock(&e->lock);
		if (orphan) {
			free(f->err);
			free(f);
		}
		return rc;
	}
}
