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
 * A pool may keep workers in reserve (mfs_pool_reserve): once jobs of two
 * keys were queued within its window, the last `reserve` idle threads take
 * only jobs of a key with none running. A job cannot be stopped, so one
 * reader's slow computations, started while it was alone, would
 * otherwise hold every thread when another reader comes.
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
	/* the reserve: none while reserve is 0 */
	unsigned reserve;
	uint64_t window_ns;
	struct key_seen {
		uint64_t key, at_ns; /* queued last at */
	} seen[2]; /* the last key queued, and the last other one */
	struct key_run {
		uint64_t key;
		unsigned n; /* 0: a free slot */
	} * runs; /* threads of them: the keys of running jobs */
};

/* Under lock: a job of key was queued now. */
static void note_key(struct mfs_pool *p, uint64_t key)
{
	uint64_t now = mf_mono_ns();
	if (p->seen[0].at_ns && p->seen[0].key != key)
		p->seen[1] = p->seen[0];
	p->seen[0] = (struct key_seen){key, now ? now : 1};
}

/* Under lock: whether a key other than key was queued within the window. */
static bool others_seen(const struct mfs_pool *p, uint64_t key)
{
	uint64_t now = mf_mono_ns();
	for (int k = 0; k < 2; k++) {
		const struct key_seen *s = &p->seen[k];
		if (s->at_ns && s->key != key && now - s->at_ns < p->window_ns)
			return true;
	}
	return false;
}

static struct key_run *run_of(struct mfs_pool *p, uint64_t key)
{
	struct key_run *free_slot = NULL;
	for (unsigned i = 0; i < p->threads; i++) {
		if (p->runs[i].n && p->runs[i].key == key)
			return &p->runs[i];
		if (!p->runs[i].n && !free_slot)
			free_slot = &p->runs[i];
	}
	if (free_slot)
		free_slot->key = key;
	return free_slot; /* never NULL: at most threads keys run */
}

/* Under lock: whether a job of key may take an idle thread now. */
static bool may_run(struct mfs_pool *p, uint64_t key)
{
	if (!p->reserve)
		return true;
	unsigned busy = 0, mine = 0;
	for (unsigned i = 0; i < p->threads; i++) {
		busy += p->runs[i].n;
		if (p->runs[i].n && p->runs[i].key == key)
			mine = p->runs[i].n;
	}
	return mine == 0 || p->threads - busy > p->reserve ||
	    !others_seen(p, key);
}

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
 * smallest key above the last one taken, else of the smallest key, among
 * the keys that may run (the reserve); the job's entries under other keys
 * go with it, *key is the one it runs under. NULL when none may run.
 * Caller holds the lock. Passes over the queue, which only holds jobs
 * waiting for a thread. */
static struct job *take_next(struct mfs_pool *p, uint64_t *key)
{
	assert(mf_mutex_held(&p->lock));
	struct entry **pick = NULL, **first = NULL;
	for (struct entry **pp = &p->head; *pp; pp = &(*pp)->next) {
		uint64_t k = (*pp)->key;
		bool as_first = !first || k < (*first)->key;
		bool as_pick = k > p->last_key && (!pick || k < (*pick)->key);
		if ((!as_first && !as_pick) || !may_run(p, k))
			continue;
		if (as_first)
			first = pp;
		if (as_pick)
			pick = pp;
	}
	if (!first)
		return NULL;
	struct entry *e = *(pick ? pick : first);
	struct job *j = e->job;
	p->last_key = e->key;
	*key = e->key;
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
		struct job *j = NULL;
		uint64_t key = 0;
		while (!p->stopping && !(p->head && (j = take_next(p, &key)))) {
			if (!p->head) {
				pthread_cond_wait(&p->work, &p->lock);
				continue;
			}
			/* jobs wait for the reserve: look again in a while,
			 * the window may have passed */
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_sec++;
			(void)pthread_cond_timedwait(&p->work, &p->lock, &dl);
		}
		if (p->stopping)
			break;
		p->backlog--;
		struct key_run *r = p->reserve ? run_of(p, key) : NULL;
		if (r)
			r->n++;
		pthread_mutex_unlock(&p->lock);
		j->fn(j->arg, false);
		free(j);
		pthread_mutex_lock(&p->lock);
		if (r) {
			r->n--;
			/* a job that had to wait for this thread may run */
			pthread_cond_broadcast(&p->work);
		}
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
	p->runs = calloc(threads ? threads : 1, sizeof(*p->runs));
	if (!p->tids || !p->runs) {
		free(p->tids);
		free(p->runs);
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
	note_key(p, key);
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
		note_key(p, key);
		append(p, e);
		pthread_cond_broadcast(&p->work); /* a key that may run */
	}
	pthread_mutex_unlock(&p->lock);
	if (rc)
		free(e);
	return rc;
}

void mfs_pool_reserve(struct mfs_pool *p, unsigned reserve, uint64_t window_ns)
{
	pthread_mutex_lock(&p->lock);
	p->reserve = reserve < p->threads ? reserve : 0;
	p->window_ns = window_ns;
	pthread_mutex_unlock(&p->lock);
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
	free(p->runs);
	free(p);
	return 0;
}
