/*
 * engine_backoff.c - a failed shard is not computed again on every open.
 * A stage that fails the same way each time (a missing column, a bug)
 * would otherwise run once per open: per DataLoader worker, per epoch.
 * Only a stage's failure counts (a row with an exit status): one of the
 * store or of a changing input is computed again at once, as before.
 * The first failed row of a shard this engine sees is computed again at
 * once, as before (it may be old: a process just started, a fix made
 * since). Each further failed computation it sees (a failed row, told
 * apart by its generation) answers EIO with its error at once for a
 * while: 5 s after the second failure, doubling with each one, up to 5
 * minutes. Then the next open computes it again. So a stage that always
 * fails runs twice, then once per backoff, whoever opens it.
 *
 * The catalog row clears it early: `matctl retry` makes the failed rows
 * absent, `rm` expires them (an absent row forgets the count), a spec edit
 * gives a new fingerprint.
 *
 * Bounded: one failure per slot, by hash (a slot taken by another shard
 * forgets the first one's count). Not for: who may see the error (the
 * FUSE layer), or the catalog's record of attempts.
 */
#include "engine_i.h"

#include <string.h>

#define BACKOFF_FIRST_S 5 /* after the second failure */
#define BACKOFF_MAX_S 300

static struct failed_shard *failed_slot(struct mf_engine *e, const char *fp,
					uint32_t index)
{
	return &e->failed[eng_shard_hash(fp, index) % ENG_FAILED_SLOTS];
}

static int64_t backoff_s(unsigned count)
{
	int64_t s = BACKOFF_FIRST_S;
	for (unsigned k = 1; k < count && s < BACKOFF_MAX_S; k++)
		s *= 2;
	return s < BACKOFF_MAX_S ? s : BACKOFF_MAX_S;
}

bool eng_backoff_holds(struct mf_engine *e, const struct mf_shard_rec *cur)
{
	/* a failure of the store or the world (exit status -1: a commit, an
	 * input changing) is no stage's to repeat: computed again at once */
	if ((cur->state != MF_SHARD_FAILED || cur->exit_status == -1) &&
	    cur->state != MF_SHARD_ABSENT)
		return false;
	int64_t now = (int64_t)(mf_mono_ns() / 1000000000ULL);
	bool holds = false;
	pthread_mutex_lock(&e->lock);
	struct failed_shard *f = failed_slot(e, cur->fp, cur->index);
	bool same_shard = f->index == cur->index && strcmp(f->fp, cur->fp) == 0;
	if (cur->state == MF_SHARD_ABSENT) { /* retried, removed: forgotten */
		if (same_shard)
			f->fp[0] = '\0';
	} else if (same_shard && f->generation == cur->generation) {
		holds = now < f->until;
	} else if (same_shard) { /* another failure of it: back off */
		f->generation = cur->generation;
		f->count++;
		f->until = now + backoff_s(f->count);
		holds = true;
	} else { /* the first failure seen here: computed again now */
		memcpy(f->fp, cur->fp, sizeof(f->fp));
		f->index = cur->index;
		f->generation = cur->generation;
		f->count = 0;
		f->until = 0;
	}
	pthread_mutex_unlock(&e->lock);
	return holds;
}
