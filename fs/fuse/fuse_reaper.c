/*
 * fuse_reaper.c - stopping computations nobody waits for any more. When
 * the last open parked on a shard inode is interrupted (its reader was
 * killed: fuse_open.c), the inode is watched here; if, MFS_CANCEL_GRACE_S
 * later, the same job still runs with no open parked on it, the engine is
 * told to cancel it (mf_engine_cancel: its stages are killed and the
 * shard goes back to absent, no failure recorded). A reader that came back
 * meanwhile keeps it.
 *
 * At the unmount every computation is cancelled at once, so neither the
 * unmount nor the daemon's exit waits for a stage, and no stage outlives
 * the daemon.
 *
 * Not for: the waiting opens themselves (fuse_open.c) or how a
 * computation is stopped (the engine).
 */
#include "fuse_i.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* One inode whose job lost its last waiting open. */
struct watch {
	struct watch *next;
	fuse_ino_t ino;
	uint64_t seq; /* the node's job_seq then */
	uint64_t due_ns; /* monotonic */
};

struct mfs_reaper {
	pthread_t th;
	pthread_mutex_t mu; /* a leaf: guards the list and stop */
	pthread_cond_t cv; /* on CLOCK_MONOTONIC */
	struct watch *list;
	bool stop;
};

/* Cancels the job of w's inode if it is still the same job, still queued
 * and still without any open waiting for it. */
static void reap(struct mfs *m, const struct watch *w)
{
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = mfs_node_get(m, w->ino);
	bool idle = n && n->queued && !n->waiters && n->job_seq == w->seq;
	uint32_t id = n ? n->snap_id : 0, k = n ? n->shard : 0;
	pthread_mutex_unlock(&m->node_lock);
	struct mfs_snap *s = idle ? mfs_snap_by_id(m, id) : NULL;
	if (s)
		mf_engine_cancel(m->eng, s->fp, k); /* fp is fixed */
}

/* The watches due by now, taken off the list; caller holds mu. */
static struct watch *take_due(struct mfs_reaper *r, uint64_t now,
			      uint64_t *next_due)
{
	assert(mf_mutex_held(&r->mu));
	struct watch *due = NULL;
	*next_due = UINT64_MAX;
	for (struct watch **p = &r->list; *p;) {
		struct watch *w = *p;
		if (w->due_ns <= now) {
			*p = w->next;
			w->next = due;
			due = w;
		} else {
			if (w->due_ns < *next_due)
				*next_due = w->due_ns;
			p = &w->next;
		}
	}
	return due;
}

static void wait_until(struct mfs_reaper *r, uint64_t due_ns)
{
	if (due_ns == UINT64_MAX) {
		pthread_cond_wait(&r->cv, &r->mu);
		return;
	}
	struct timespec ts = {(time_t)(due_ns / 1000000000ULL),
			      (long)(due_ns % 1000000000ULL)};
	pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

static void *reaper_main(void *arg)
{
	struct mfs *m = arg;
	struct mfs_reaper *r = m->reaper;
	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		uint64_t next;
		struct watch *due = take_due(r, mf_mono_ns(), &next);
		if (!due) {
			wait_until(r, next);
			continue;
		}
		pthread_mutex_unlock(&r->mu);
		while (due) {
			struct watch *w = due;
			due = w->next;
			reap(m, w);
			free(w);
		}
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int mfs_reaper_start(struct mfs *m)
{
	struct mfs_reaper *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	(void)mf_mutex_init(&r->mu);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cv, &ca);
	pthread_condattr_destroy(&ca);
	m->reaper = r;
	int rc = pthread_create(&r->th, NULL, reaper_main, m);
	if (rc) {
		m->reaper = NULL;
		pthread_cond_destroy(&r->cv);
		pthread_mutex_destroy(&r->mu);
		free(r);
		return -rc;
	}
	return 0;
}

void mfs_reaper_watch(struct mfs *m, fuse_ino_t ino, uint64_t seq)
{
	struct mfs_reaper *r = m->reaper;
	struct watch *w = malloc(sizeof(*w));
	if (!r || !w) {
		free(w); /* the computation then runs to its end */
		return;
	}
	*w = (struct watch){NULL, ino, seq,
			    mf_mono_ns() + MFS_CANCEL_GRACE_S * 1000000000ULL};
	pthread_mutex_lock(&r->mu);
	w->next = r->list;
	r->list = w;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

void mfs_reaper_stop(struct mfs *m)
{
	atomic_store(&m->stopping, true);
	if (m->eng)
		mf_engine_cancel_all(m->eng);
	struct mfs_reaper *r = m->reaper;
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	pthread_join(r->th, NULL);
	m->reaper = NULL;
	while (r->list) {
		struct watch *w = r->list;
		r->list = w->next;
		free(w);
	}
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
}
