/*
 * fuse_register.c - registering the pipelines folder's specs on worker
 * threads, so that no spec can delay another: loading a spec, listing and
 * watching what it depends on, and hashing its deps and inputs
 * (mf_engine_register) run with no lock held, at most MFS_REG_THREADS at
 * once (MFS_REG_PER_OWNER per owner of spec files, so that one user's
 * slow specs never hold up another's) and one per spec file; the outcome
 * is recorded under mfs_specs.lock when the registration returns, then
 * its older registrations are forgotten and the tree published with the
 * lock released again.
 *
 * Each registration has a time limit (-o spec_timeout, MFS_SPEC_TIMEOUT_S
 * by default): past it the spec is logged and fails as a spec that does
 * not load does (its name goes), and its thread no longer counts against
 * MFS_REG_THREADS. Hashing stops between two reads past the limit
 * (mf_deadline_set); a read that never returns keeps its thread, which
 * still counts against its owner's MFS_REG_PER_OWNER. What it returns is
 * discarded; a registration that was only slow (it returned
 * on its own) is tried again then, one stopped at its limit is not until
 * its file or deps change. A file changed while
 * its registration runs is registered again when that one returns.
 * A registration the catalog could not record (an outage or a full disk:
 * the engine's -EAGAIN) is logged once and tried again, every MFS_REG_RETRY_MIN_MS
 * doubling up to MFS_REG_RETRY_MAX_MS, until the catalog answers: a
 * spec edited during an outage is never skipped for good.
 *
 * Not for: deciding what to register (fuse_specs.c) or what a
 * registration depends on (fuse_deps.c).
 */
#include "fuse_i.h"
#include "fuse_specs_i.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000ULL

struct mfs_reg {
	struct mfs_reg *next; /* in the queue */
	struct mfs *m;
	char *path;
	uid_t owner; /* of the spec file: registrations are shared by owner */
	bool check; /* register only if deps's identities changed */
	/* f->deps when submitted: the registration owns its identities
	 * until it installs what it loaded in its place */
	struct mfs_deps *deps;
	/* under s->lock */
	bool running;
	bool expired; /* past its limit: the outcome is discarded */
	bool returned; /* its thread is recording the outcome */
	uint64_t deadline_ns;
	/* the outcome, written by the worker before it takes s->lock */
	bool skipped; /* check found nothing changed */
	int rc;
	char fp[MF_FP_HEX_LEN + 1];
	char *err;
};

static void reg_free(struct mfs_reg *j)
{
	free(j->path);
	free(j->err);
	free(j);
}

static void *reg_main(void *arg);

/* Threads of owner's registrations, those past their limit included.
 * Caller holds s->lock. */
static unsigned owner_threads(const struct mfs_specs *s, uid_t owner)
{
	assert(mf_mutex_held(&s->lock));
	unsigned k = 0;
	for (size_t i = 0; i < s->n; i++) {
		const struct mfs_reg *j = s->files[i].job;
		k += j && j->running && j->owner == owner;
	}
	return k;
}

/* Whether queued j may start now: its owner runs fewer than
 * MFS_REG_PER_OWNER, and fewer than MFS_REG_THREADS run within their
 * limit - unless its owner runs none, then up to MFS_REG_MAX threads. */
static bool may_start(const struct mfs_specs *s, const struct mfs_reg *j)
{
	unsigned mine = owner_threads(s, j->owner);
	return mine < MFS_REG_PER_OWNER &&
	    (s->active < MFS_REG_THREADS ||
	     (mine == 0 && s->threads < MFS_REG_MAX));
}

/* Starts the queued registrations that may start, oldest first. Caller
 * holds s->lock. */
static void pump(struct mfs_specs *s)
{
	struct mfs_reg **p = &s->queue, *prev = NULL;
	while (*p && !s->stopping) {
		struct mfs_reg *j = *p;
		if (!may_start(s, j)) {
			prev = j;
			p = &j->next;
			continue;
		}
		j->deadline_ns = mf_mono_ns() + s->timeout_ns;
		pthread_attr_t a;
		pthread_t t;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		int rc = pthread_create(&t, &a, reg_main, j);
		pthread_attr_destroy(&a);
		if (rc) { /* tried again at the watcher's next retry */
			s->retry = true;
			return;
		}
		*p = j->next;
		if (s->queue_tail == j)
			s->queue_tail = prev;
		s->threads++;
		s->active++;
		j->running = true;
		mfs_specs_wake(s);
	}
}

void mfs_reg_submit(struct mfs *m, struct spec_file *f, bool check)
{
	struct mfs_specs *s = m->specs;
	if (f->job || f->unregistering) {
		f->again |= !check;
		return;
	}
	struct mfs_reg *j = calloc(1, sizeof(*j));
	if (!j || !(j->path = strdup(f->path))) {
		free(j);
		s->retry = true;
		memset(&f->id, 0, sizeof(f->id)); /* so it is tried again */
		return;
	}
	j->m = m;
	j->owner = f->id.st_uid;
	j->check = check;
	j->deps = f->deps;
	f->job = j;
	f->again = false;
	if (s->queue_tail)
		s->queue_tail->next = j;
	else
		s->queue = j;
	s->queue_tail = j;
	pump(s);
}

/* Lists what spec (NULL: it did not load) depends on and installs it as
 * its entry's deps, before the engine reads anything: a change made while
 * it reads is seen. Keeps the last good set (checked afresh) when the
 * spec does not load. */
static void deps_update(struct mfs *m, struct mfs_specs *s, struct mfs_reg *j,
			const struct mf_engine_spec *spec)
{
	struct mfs_deps *d;
	char why[PATH_MAX + 64];
	if (!spec ||
	    mfs_deps_new(&s->watches, spec, !s->poll_all, &d, why,
			 sizeof(why)) != 0) {
		if (j->deps)
			(void)mfs_deps_changed(j->deps);
		return;
	}
	pthread_mutex_lock(&s->lock);
	struct spec_file *f = mfs_specs_find(s, j->path);
	bool was = f && f->deps && mfs_deps_polled(f->deps);
	if (f && why[0] && !was)
		mfs_logf(m, MFS_LOG_WARN,
			 "spec '%s': %s: its deps and inputs are checked "
			 "every %llu ms instead",
			 j->path, why,
			 (unsigned long long)(s->poll_ns / 1000000));
	if (f) { /* the old set goes below, its watches with no lock */
		struct mfs_deps *old = f->deps;
		f->deps = d;
		d = old;
	}
	j->deps = NULL; /* freed, or no longer this registration's */
	pthread_mutex_unlock(&s->lock);
	mfs_deps_free(&s->watches, d);
}

/* The registration itself, with no lock held. */
static void reg_run(struct mfs *m, struct mfs_reg *j)
{
	struct mfs_specs *s = m->specs;
	if (j->check && !mfs_deps_changed(j->deps)) {
		j->skipped = true;
		return;
	}
	/* parsed once: for its watch list, then for the registration */
	struct mf_engine_spec *spec = NULL;
	j->rc = mf_engine_spec_load(j->path, &spec, &j->err);
	deps_update(m, s, j, spec);
	if (j->rc)
		return;
	/* hashing stops at the limit: a thread past it ends soon after,
	 * unless one read itself never returns */
	mf_deadline_set(j->deadline_ns);
	j->rc = mf_engine_register_spec(m->eng, spec, j->fp, &j->err);
	mf_deadline_set(0);
}

/* Records a registration that returned in time in f; true when what the
 * mount shows may have changed. Caller holds s->lock. */
static bool reg_apply(struct mfs *m, struct spec_file *f, struct mfs_reg *j)
{
	assert(mf_mutex_held(&m->specs->lock));
	bool had = f->fp[0] != 0;
	if (j->rc == -EAGAIN) { /* the catalog is away: tried again */
		unsigned ms = MFS_REG_RETRY_MIN_MS
		    << (f->outages < 5 ? f->outages : 5);
		if (ms > MFS_REG_RETRY_MAX_MS)
			ms = MFS_REG_RETRY_MAX_MS;
		if (f->outages++ == 0)
			mfs_logf(m, MFS_LOG_ERR,
				 "%s (spec not registered; tried again until "
				 "the catalog records it)",
				 j->err ? j->err : strerror(-j->rc));
		f->retry_ns = mf_mono_ns() + (uint64_t)ms * 1000000u;
	} else {
		f->retry_ns = 0;
	}
	if (j->rc) {
		if (j->rc != -EAGAIN)
			mfs_logf(m, MFS_LOG_ERR, "%s (spec skipped)",
				 j->err ? j->err : strerror(-j->rc));
		if (j->rc != -EAGAIN)
			f->outages = 0;
		f->fp[0] = 0;
		f->forget = true;
		return had;
	}
	if (f->outages)
		mfs_logf(m, MFS_LOG_INFO,
			 "spec '%s': registered, the catalog answers again",
			 f->path);
	f->outages = 0;
	if (!had || strcmp(j->fp, f->fp) != 0)
		mfs_logf(m, MFS_LOG_INFO, "spec '%s': fingerprint %s", f->path,
			 j->fp);
	memcpy(f->fp, j->fp, sizeof(f->fp));
	f->forget = true; /* its older registrations */
	return true;
}

/* f's registration passed its limit: logged, its name goes. True when
 * the name went. The caller counts it out of s->active. Caller holds
 * s->lock. */
static bool time_out(struct mfs *m, struct mfs_specs *s, struct spec_file *f)
{
	assert(mf_mutex_held(&s->lock));
	f->job->expired = true;
	mfs_logf(m, MFS_LOG_ERR,
		 "%s: reading its deps and inputs took longer than %llu s "
		 "(spec skipped)",
		 f->path, (unsigned long long)(s->timeout_ns / NS_PER_S));
	bool had = f->fp[0] != 0;
	f->fp[0] = 0;
	return had;
}

/* A registration returned: its outcome goes to its file, or is discarded
 * (past its limit, or the file left the folder meanwhile); *g is what to
 * forget in the engine. f->job stays j until reg_end, so that nothing
 * registers the file meanwhile. True when the tree is to be published.
 * Caller holds s->lock. */
static bool reg_done(struct mfs *m, struct mfs_specs *s, struct mfs_reg *j,
		     struct mfs_forget *g)
{
	assert(mf_mutex_held(&s->lock));
	struct spec_file *f = mfs_specs_find(s, j->path);
	bool changed = false;
	if (!j->expired)
		s->active--;
	j->returned = true;
	/* hashing saw the limit pass before the watcher did */
	if (!j->expired && j->rc == -ETIMEDOUT && f && f->job == j)
		changed = time_out(m, s, f);
	if (f && f->job == j) {
		if (j->expired || !f->seen) {
			/* whatever it added to the engine goes; a file
			 * that left goes at the next pass */
			f->forget = true;
			/* slow but done: try again; stopped at its limit
			 * (-ETIMEDOUT): failed until the file or its deps
			 * change, not hashed again and again */
			f->again |= j->expired && j->rc != -ETIMEDOUT;
			s->retry |= !f->seen;
		} else if (!j->skipped) {
			changed = reg_apply(m, f, j);
		}
		if (f->forget && !s->stopping)
			mfs_forget_begin(s, f, g);
	}
	return changed && !s->stopping;
}

/* After the unregistration: the file is free for the next registration,
 * which starts now if it changed meanwhile. Caller holds s->lock. */
static void reg_end(struct mfs *m, struct mfs_specs *s, struct mfs_reg *j,
		    struct mfs_forget *g)
{
	assert(mf_mutex_held(&s->lock));
	mfs_forget_end(s, g);
	struct spec_file *f = mfs_specs_find(s, j->path);
	if (!f || f->job != j)
		return;
	f->job = NULL;
	if (f->again && f->seen && !s->stopping)
		mfs_reg_submit(m, f, false);
}

static void *reg_main(void *arg)
{
	struct mfs_reg *j = arg;
	struct mfs *m = j->m;
	struct mfs_specs *s = m->specs;
	struct mfs_forget g = {0};
	(void)pthread_setname_np(pthread_self(), "matfs-register");
	reg_run(m, j);
	pthread_mutex_lock(&s->lock);
	bool publish = reg_done(m, s, j, &g);
	pthread_mutex_unlock(&s->lock);
	mfs_forget_run(m, &g);
	if (publish)
		mfs_specs_publish(m, s);
	/* before threads-- lets mfs_stop, and so the process's exit, go on:
	 * OpenSSL's state of this thread would otherwise be freed only as it
	 * exits, maybe after the process did (reported as a leak) */
	mf_thread_end();
	pthread_mutex_lock(&s->lock);
	reg_end(m, s, j, &g);
	reg_free(j);
	s->threads--;
	pump(s);
	mfs_specs_wake(s);
	pthread_cond_broadcast(&s->done_cv);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

bool mfs_reg_expire(struct mfs *m, struct mfs_specs *s)
{
	bool changed = false;
	uint64_t now = mf_mono_ns();
	for (size_t i = 0; i < s->n; i++) {
		struct spec_file *f = &s->files[i];
		struct mfs_reg *j = f->job;
		if (!j || !j->running || j->expired || j->returned ||
		    now < j->deadline_ns)
			continue;
		s->active--;
		changed |= time_out(m, s, f);
	}
	if (changed)
		pthread_cond_broadcast(&s->done_cv);
	pump(s);
	return changed;
}

uint64_t mfs_reg_deadline(const struct mfs_specs *s)
{
	uint64_t due = UINT64_MAX;
	for (size_t i = 0; i < s->n; i++) {
		const struct mfs_reg *j = s->files[i].job;
		if (j && j->running && !j->expired && !j->returned &&
		    j->deadline_ns < due)
			due = j->deadline_ns;
	}
	return due;
}

/* True when a registration of path (NULL: any) is queued or running
 * within its limit. Caller holds s->lock. */
static bool busy(const struct mfs_specs *s, const char *path)
{
	assert(mf_mutex_held(&s->lock));
	for (size_t i = 0; i < s->n; i++) {
		const struct mfs_reg *j = s->files[i].job;
		if (j && !j->expired &&
		    (!path || strcmp(s->files[i].path, path) == 0))
			return true;
	}
	return false;
}

bool mfs_reg_wait(struct mfs_specs *s, const char *path, uint64_t until)
{
	while (busy(s, path)) {
		uint64_t now = mf_mono_ns();
		if (now >= until)
			return false;
		uint64_t left = until - now;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)(left / NS_PER_S);
		ts.tv_nsec += (long)(left % NS_PER_S);
		if (ts.tv_nsec >= (long)NS_PER_S) {
			ts.tv_sec++;
			ts.tv_nsec -= (long)NS_PER_S;
		}
		pthread_cond_timedwait(&s->done_cv, &s->lock, &ts);
	}
	return true;
}

int mfs_reg_stop(struct mfs_specs *s, unsigned ms)
{
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	while (s->queue) {
		struct mfs_reg *j = s->queue;
		s->queue = j->next;
		struct spec_file *f = mfs_specs_find(s, j->path);
		if (f && f->job == j)
			f->job = NULL;
		reg_free(j);
	}
	s->queue_tail = NULL;
	uint64_t until = mf_mono_ns() + ms * 1000000ULL;
	while (s->threads > 0 && mf_mono_ns() < until) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 50 * 1000000L;
		if (ts.tv_nsec >= (long)NS_PER_S) {
			ts.tv_sec++;
			ts.tv_nsec -= (long)NS_PER_S;
		}
		pthread_cond_timedwait(&s->done_cv, &s->lock, &ts);
	}
	int rc = s->threads > 0 ? -EBUSY : 0;
	pthread_mutex_unlock(&s->lock);
	return rc;
}
