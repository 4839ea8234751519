/*
 * fuse_pool.c - a fixed set of threads running queued jobs: the workers
 * that wait for materializations (workers=N) and the read-ahead
 * decompression threads. Jobs carry a key (the reader's uid for
 * materializations); the next job is the oldest of the next key in turn,
 * so one reader's thousand cold shards do not queue another's one behind
 * them. Jobs of one key run in FIFO order.
 *
 * Not for: knowing what a job does. A job queued when the pool stops runs
 * with cancelled = true on the stopping thread, so it can answer its
 * requests and free its memory.
 */
#include "fuse_i.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

struct job {
	struct job *next;
	uint64_t key;
	mfs_job_fn fn;
	void *arg;
};

struct mfs_pool {
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t work; /* a job was queued, or stopping */
	pthread_cond_t idle; /* a thread exited */
	struct job *head, *tail;
	size_t backlog;
	unsigned threads, running; /* started, not yet exited */
	bool stopping;
	uint64_t last_key; /* of the job taken last */
	pthread_t *tids;
};

/* Unlinks and returns the next job in turn: the oldest of the smallest key
 * above the last one taken, else of the smallest key. Caller holds the
 * lock; the queue is not empty. One pass over the queue, which only holds
 * jobs waiting for a thread. */
static struct job *take_next(struct mfs_pool *p)
{
	assert(mf_mutex_held(&p->lock));
	struct job **pick = NULL, **first = NULL;
	for (struct job **pp = &p->head; *pp; pp = &(*pp)->next) {
		uint64_t k = (*pp)->key;
		if (!first || k < (*first)->key)
			first = pp;
		if (k > p->last_key && (!pick || k < (*pick)->key))
			pick = pp;
	}
	struct job **pp = pick ? pick : first, *j = *pp;
	*pp = j->next;
	if (p->tail == j) { /* the new tail is the last job left */
		p->tail = NULL;
		for (struct job *q = p->head; q; q = q->next)
			p->tail = q;
	}
	p->last_key = j->key;
	return j;
}

static void *pool_main(void *arg)
{
	struct mfs_pool *p = arg;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->head && !p->stopping)
			pthread_cond_wait(&p->work, &p->lock);
		if (p->stopping)
			break;
		struct job *j = take_next(p);
		p->backlog--;
		pthread_mutex_unlock(&p->lock);
		j->fn(j->arg, false);
		free(j);
		pthread_mutex_lock(&p->lock);
	}
	p->running--;
	pthread_cond_broadcast(&p->idle);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int mfs_pool_new(unsigned threads, struct mfs_pool **out)
{
	struct mfs_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->tids = calloc(threads ? threads : 1, sizeof(*p->tids));
	if (!p->tids) {
		free(p);
		return -ENOMEM;
	}
	(void)mf_mutex_init(&p->lock);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->idle, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&p->work, NULL);
	int rc = 0;
	for (unsigned i = 0; i < threads && rc == 0; i++) {
		pthread_mutex_lock(&p->lock);
		rc = -pthread_create(&p->tids[i], NULL, pool_main, p);
		if (rc == 0) {
			p->threads++;
			p->running++;
		}
		pthread_mutex_unlock(&p->lock);
	}
	if (rc) {
		(void)mfs_pool_stop(p, 10000);
		return rc;
	}
	*out = p;
	return 0;
}

int mfs_pool_submit(struct mfs_pool *p, mfs_job_fn fn, void *arg)
{
	return mfs_pool_submit_keyed(p, 0, fn, arg);
}

int mfs_pool_submit_keyed(struct mfs_pool *p, uint64_t key, mfs_job_fn fn,
			  void *arg)
{
	struct job *j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (struct job){NULL, key, fn, arg};
	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->lock);
		free(j);
		return -ESHUTDOWN;
	}
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	p->backlog++;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

size_t mfs_pool_backlog(struct mfs_pool *p)
{
	pthread_mutex_lock(&p->lock);
	size_t n = p->backlog;
	pthread_mutex_unlock(&p->lock);
	return n;
}

int mfs_pool_stop(struct mfs_pool *p, unsigned timeout_ms)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->work);
	struct job *q = p->head;
	p->head = p->tail = NULL;
	p->backlog = 0;
	pthread_mutex_unlock(&p->lock);
	while (q) {
		struct job *next = q->next;
		q->fn(q->arg, true);
		free(q);
		q = next;
	}
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&p->lock);
	int rc = 0;
	while (p->running > 0 && rc == 0)
		rc = pthread_cond_timedwait(&p->idle, &p->lock, &dl);
	bool busy = p->running > 0;
	pthread_mutex_unlock(&p->lock);
	if (busy)
		return -EBUSY; /* threads still use p: it stays allocated */
	for (unsigned i = 0; i < p->threads; i++)
		pthread_join(p->tids[i], NULL);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->idle);
	pthread_mutex_destroy(&p->lock);
	free(p->tids);
	free(p);
	return 0;
}
