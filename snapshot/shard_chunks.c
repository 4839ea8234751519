/*
 * shard_chunks.c - a shard writer's chunks on their way to the file: the
 * codec and level each one gets, its compression (inline, or on the
 * writer's pool of threads), and appending the compressed chunks to the
 * file and the index in order; the pool's start and stop.
 *
 * Not for: opening a writer, filling its slots, the index and trailer or
 * the commit protocol (shard_writer.c), the byte layout (shard_format.c)
 * or the rule that picks a chunk's level (codec_adapt.c).
 */
#include "snapshot_i.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

/* ---- compressing and appending ---- */

static void compress_slot(const struct mf_shard_writer *w,
			  struct snap_cctx *cctx, struct wslot *s, uint64_t seq)
{
	uint64_t seed = snap_chunk_seed(&w->seeds, (uint32_t)seq);
	if (s->codec == MF_CODEC_NONE) {
		s->out_len = s->raw_len;
		s->checksum = snap_chunk_checksum(s->src, s->raw_len, seed);
		s->err = 0;
		return;
	}
	s->err = snap_compress(cctx, s->codec, s->level, s->src, s->raw_len,
			       s->out, w->bound, &s->out_len);
	if (s->err == 0)
		s->checksum = snap_chunk_checksum(s->out, s->out_len, seed);
}

static int push_entry(struct mf_shard_writer *w, const struct snap_entry *e)
{
	if (w->head == w->idx_cap) {
		size_t cap = w->idx_cap ? 2 * w->idx_cap : 64;
		void *p = realloc(w->idx, cap * sizeof(*w->idx));
		if (!p)
			return -ENOMEM;
		w->idx = p;
		w->idx_cap = cap;
	}
	w->idx[w->head] = *e;
	return 0;
}

/* Appends chunk head, held compressed in s, to the file. */
static int append(struct mf_shard_writer *w, struct wslot *s)
{
	if (s->err)
		return s->err;
	const uint8_t *data = s->codec == MF_CODEC_NONE ? s->src : s->out;
	struct snap_entry e = {
	    .offset = w->file_off,
	    .stored = (uint32_t)s->out_len,
	    .raw = (uint32_t)s->raw_len,
	    .checksum = s->checksum,
	    .codec = s->codec,
	    .level = s->level,
	};
	int rc = push_entry(w, &e);
	if (rc)
		return rc;
	rc = snap_out_put(w->out, data, s->out_len);
	if (rc)
		return rc;
	w->file_off += s->out_len;
	w->raw_total += s->raw_len;
	return 0;
}

/*
 * Appends the compressed chunks in order, waiting for those below `need`
 * and stopping at the first one not ready at or after it.
 */
int snap_writer_drain(struct mf_shard_writer *w, uint64_t need)
{
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	while (w->head < w->tail) {
		struct wslot *s = &w->slots[w->head % w->nslots];
		if (s->state != SLOT_DONE) {
			if (w->head >= need)
				break;
			pthread_cond_wait(&w->done_cv, &w->lock);
			continue;
		}
		/* never write while holding the lock */
		pthread_mutex_unlock(&w->lock);
		rc = append(w, s);
		pthread_mutex_lock(&w->lock);
		if (rc)
			break;
		s->state = SLOT_FREE;
		w->head++;
	}
	pthread_mutex_unlock(&w->lock);
	return rc;
}

/* Picks the codec and level of chunk tail, in s, from the chunks handed
 * to the pool and not yet compressed (none inline). */
static void pick_codec(struct mf_shard_writer *w, struct wslot *s)
{
	unsigned workers = w->nworkers ? w->nworkers : 1;
	uint64_t backlog = 0;
	if (w->adapt.on && w->nworkers) {
		pthread_mutex_lock(&w->lock);
		backlog = w->tail - w->compressed;
		pthread_mutex_unlock(&w->lock);
	}
	if (w->pressure && w->adapt.on)
		backlog =
		    w->pressure(w->pressure_arg, (uint32_t)w->tail, workers);
	unsigned b = backlog > workers ? workers : (unsigned)backlog;
	snap_adapt_next(&w->adapt, b, workers, &s->codec, &s->level);
}

/* Hands the chunk in slot tail (raw_len, src set) on, showing it to the
 * tap first: the slot is not the pool's yet, so nothing else reads it. */
int snap_writer_submit(struct mf_shard_writer *w, struct wslot *s)
{
	if (w->tail >= UINT32_MAX)
		return -EFBIG; /* the chunk count is 32 bits */
	if (w->tap)
		w->tap(w->tap_arg, (uint32_t)w->tail, s->src, s->raw_len);
	pick_codec(w, s);
	if (w->nworkers == 0) {
		compress_slot(w, w->cctx, s, w->tail);
		int rc = append(w, s);
		if (rc)
			return rc;
		w->tail++;
		w->head++;
		return 0;
	}
	pthread_mutex_lock(&w->lock);
	s->state = SLOT_QUEUED;
	w->tail++;
	pthread_cond_signal(&w->work_cv);
	pthread_mutex_unlock(&w->lock);
	return snap_writer_drain(w, 0);
}

/* ---- the pool ---- */

static void *worker_main(void *arg)
{
	struct worker *me = arg;
	struct mf_shard_writer *w = me->w;
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->stop && w->next_job == w->tail)
			pthread_cond_wait(&w->work_cv, &w->lock);
		if (w->stop)
			break;
		uint64_t seq = w->next_job++;
		struct wslot *s = &w->slots[seq % w->nslots];
		pthread_mutex_unlock(&w->lock);
		compress_slot(w, me->cctx, s, seq);
		pthread_mutex_lock(&w->lock);
		s->state = SLOT_DONE;
		w->compressed++;
		pthread_cond_broadcast(&w->done_cv);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

void snap_writer_pool_stop(struct mf_shard_writer *w)
{
	if (w->nworkers == 0)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->work_cv);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->nworkers; i++)
		pthread_join(w->workers[i].thread, NULL);
	w->nworkers = 0;
}

int snap_writer_pool_start(struct mf_shard_writer *w, unsigned n)
{
	w->workers = calloc(n, sizeof(*w->workers));
	if (!w->workers)
		return -ENOMEM;
	w->nalloc = n;
	for (unsigned i = 0; i < n; i++) {
		struct worker *k = &w->workers[i];
		k->w = w;
		int rc = snap_cctx_new(w->codec, &k->cctx);
		if (rc == 0)
			rc = -pthread_create(&k->thread, NULL, worker_main, k);
		if (rc) {
			snap_cctx_free(k->cctx);
			k->cctx = NULL;
			snap_writer_pool_stop(w);
			return rc;
		}
		w->nworkers = i + 1;
	}
	return 0;
}
