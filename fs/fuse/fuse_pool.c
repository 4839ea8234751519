/*
 * fuse_pool.c - a fixed set of threads running queued jobs: the workers
 * that wait for materializations (workers=N) and the read-ahead
 * decompression threads. Jobs carry a key (the reader's uid for
 * materializations); the next job is the oldest of the next key in turn,
 * so one reader's thousand cold shards do not queue another's one behind
 * them. Jobs of one key run in FIFO order. A queued job may be entered
 * under more keys (mfs_pool_lift: a shard other readers wait for too); it
 * then runs once, at the first turn any of them reaches.
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
	uint64_t id; /* mfs_pool_submit_keyed's, never 0 */
	mfs_job_fn fn;
	void *arg;
	unsigned entries; /* in the queue */
};

/* A job's place in one key's turn. */
struct entry {
	struct entry *next;
	uint64_t key;
	struct job *job;
};

struct mfs_pool {
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t work; /* a job was queued, or stopping */
	pthread_cond_t idle; /* a thread exited */
	struct entry *head, *tail; /* in the order they were queued */
	size_t backlog; /* jobs queued, whatever their entries */
	unsigned threads, running; /* started, not yet exited */
	bool stopping;
	uint64_t last_key; /* of the entry taken last */
	uint64_t next_id;
	pthread_t *tids;
};

static void fix_tail(struct mfs_pool *p)
{
	p->tail = NULL;
	for (struct entry *q = p->head; q; q = q->next)
		p->tail = q;
}

static void append(struct mfs_pool *p, struct entry *e)
{
	e->next = NULL;
	if (p->tail)
		p->tail->next = e;
	else
		p->head = e;
	p->tail = e;
	e->job->entries++;
}

/* Unlinks and returns the next job in turn: the oldest entry of the
 * smallest key above the last one taken, else of the smallest key; the
 * job's entries under other keys go with it. Caller holds the lock; the
 * queue is not empty. Passes over the queue, which only holds jobs
 * waiting for a thread. */
static struct job *take_next(struct mfs_pool *p)
{
	assert(mf_mutex_held(&p->lock));
	struct entry **pick = NULL, **first = NULL;
	for (struct entry **pp = &p->head; *pp; pp = &(*pp)->next) {
		uint64_t k = (*pp)->key;
		if (!first || k < (*first)->key)
			first = pp;
		if (k > p->last_key && (!pick || k < (*pick)->key))
			pick = pp;
	}
	struct entry *e = *(pick ? pick : first);
	struct job *j = e->job;
	p->last_key = e->key;
	for (struct entry **pp = &p->head; *pp && j->entries > 0;) {
		struct entry *q = *pp;
		if (q->job != j) {
			pp = &q->next;
			continue;
		}
		*pp = q->next;
		j->entries--;
		free(q);
	}
	fix_tail(p);
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
	return mfs_pool_submit_keyed(p, 0, fn, arg, NULL);
}

int mfs_pool_submit_keyed(struct mfs_pool *p, uint64_t key, mfs_job_fn fn,
			  void *arg, uint64_t *id)
{
	struct job *j = malloc(sizeof(*j));
	struct entry *e = malloc(sizeof(*e));
	if (!j || !e) {
		free(j);
		free(e);
		return -ENOMEM;
	}
	*j = (struct job){0, fn, arg, 0};
	*e = (struct entry){NULL, key, j};
	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->lock);
		free(j);
		free(e);
		return -ESHUTDOWN;
	}
	j->id = ++p->next_id;
	if (id)
		*id = j->id;
	append(p, e);
	p->backlog++;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int mfs_pool_lift(struct mfs_pool *p, uint64_t id, uint64_t key)
{
	struct entry *e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	pthread_mutex_lock(&p->lock);
	struct job *j = NULL;
	bool has = false;
	for (struct entry *q = p->head; q; q = q->next) {
		if (q->job->id != id)
			continue;
		j = q->job;
		has = has || q->key == key;
	}
	int rc = !j ? -ENOENT : has ? -EEXIST : 0;
	if (rc == 0) {
		*e = (struct entry){NULL, key, j};
		append(p, e);
	}
	pthread_mutex_unlock(&p->lock);
	if (rc)
		free(e);
	return rc;
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
	struct entry *q = p->head;
	p->head = p->tail = NULL;
	p->backlog = 0;
	pthread_mutex_unlock(&p->lock);
	while (q) { /* each job once, at its last entry */
		struct entry *next = q->next;
		struct job *j = q->job;
		if (--j->entries == 0) {
			j->fn(j->arg, true);
			free(j);
		}
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
