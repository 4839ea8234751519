/*
 * engine.c - opening shards: the in-process single flight, the catalog
 * claim across processes, the spec registry and this process's runs.
 *
 * Not for: running stages (engine_run.c) or expiry and gc
 * (engine_admin.c).
 */
#include "engine_i.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ATTEMPTS 4 /* recomputations of a vanished shard */
#define WAIT_MIN_NS 5000000ULL /* polling a claim held elsewhere */
#define WAIT_MAX_NS 200000000ULL

void eng_errf(char **err, const char *fmt, ...)
{
	if (!err || *err)
		return;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(err, fmt, ap) < 0)
		*err = NULL;
	va_end(ap);
}

int eng_catalog_get(struct mf_engine *e, struct mf_catalog **out)
{
	pthread_mutex_lock(&e->lock);
	if (e->n_pool > 0) {
		*out = e->pool[--e->n_pool];
		pthread_mutex_unlock(&e->lock);
		return 0;
	}
	pthread_mutex_unlock(&e->lock);
	return mf_catalog_open(e->catalog_path, e->opts.busy_timeout_ms, out);
}

void eng_catalog_put(struct mf_engine *e, struct mf_catalog *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&e->lock);
	if (e->n_pool == e->cap_pool) {
		size_t cap = e->cap_pool ? 2 * e->cap_pool : 4;
		void *p = realloc(e->pool, cap * sizeof(*e->pool));
		if (!p) {
			pthread_mutex_unlock(&e->lock);
			mf_catalog_close(c);
			return;
		}
		e->pool = p;
		e->cap_pool = cap;
	}
	e->pool[e->n_pool++] = c;
	pthread_mutex_unlock(&e->lock);
}

int mf_engine_catalog_open(struct mf_engine *e, struct mf_catalog **out)
{
	return mf_catalog_open(e->catalog_path, e->opts.busy_timeout_ms, out);
}

struct mf_store *mf_engine_store(struct mf_engine *e)
{
	return e->store;
}

/* ---- heartbeat ---- */

static void heartbeat_once(struct mf_engine *e)
{
	char ids[64][MF_RUN_ID_HEX_LEN + 1];
	size_t n = 0;
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r && n < 64; r = r->next)
		if (r->active)
			memcpy(ids[n++], r->run_id, sizeof(ids[0]));
	pthread_mutex_unlock(&e->lock);
	if (n == 0)
		return;
	struct mf_catalog *c;
	if (eng_catalog_get(e, &c) != 0)
		return;
	for (size_t i = 0; i < n; i++)
		(void)mf_catalog_heartbeat(c, ids[i], mf_now_s());
	eng_catalog_put(e, c);
}

static void *heartbeat_main(void *arg)
{
	struct mf_engine *e = arg;
	pthread_mutex_lock(&e->lock);
	while (!e->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += e->opts.heartbeat_s;
		pthread_cond_timedwait(&e->hb_cv, &e->lock, &ts);
		if (e->stopping)
			break;
		pthread_mutex_unlock(&e->lock);
		heartbeat_once(e);
		pthread_mutex_lock(&e->lock);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

static int start_heartbeat(struct mf_engine *e)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(&e->hb_cv, &ca);
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

/* ---- open and close ---- */

static int engine_init(struct mf_engine *e, const struct mf_engine_opts *o,
		       char **err)
{
	e->opts = *o;
	if (e->opts.compress_threads == 0)
		e->opts.compress_threads = 2;
	if (e->opts.heartbeat_s == 0)
		e->opts.heartbeat_s = 5;
	e->pid = getpid();
	e->pid_start = mf_proc_start_time(e->pid);
	mf_hostname(e->host, sizeof(e->host));
	(void)mf_boot_id(e->boot_id); /* "" when unknown: judged by heartbeat */
	e->pid_ns = mf_pid_ns();
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->flight_cv, NULL);

	int rc = mf_store_open(o->store_dir, true, &e->store);
	if (rc) {
		eng_errf(err, "store '%s': %s", o->store_dir, strerror(-rc));
		return rc;
	}
	if (asprintf(&e->catalog_path, "%s/%s", mf_store_path(e->store),
		     MF_CATALOG_FILE) < 0) {
		e->catalog_path = NULL;
		return -ENOMEM;
	}
	struct mf_catalog *c;
	rc = mf_catalog_open(e->catalog_path, o->busy_timeout_ms, &c);
	if (rc) {
		eng_errf(err, "catalog '%s': %s", e->catalog_path,
			 rc == -EPROTO ? "made by a newer matfs"
			     : rc == -EBADMSG
			     ? "not a valid catalog (matctl fsck "
			       "--rebuild rebuilds it from the "
			       "store)"
			     : strerror(-rc));
		return rc;
	}
	eng_catalog_put(e, c);
	return start_heartbeat(e);
}

int mf_engine_open(const struct mf_engine_opts *opts, struct mf_engine **out,
		   char **err)
{
	if (!opts || !opts->store_dir)
		return -EINVAL;
	struct mf_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	int rc = engine_init(e, opts, err);
	if (rc) {
		mf_engine_close(e);
		return rc;
	}
	*out = e;
	return 0;
}

void mf_engine_close(struct mf_engine *e)
{
	if (!e)
		return;
	if (e->hb_started) {
		pthread_mutex_lock(&e->lock);
		e->stopping = true;
		pthread_cond_signal(&e->hb_cv);
		pthread_mutex_unlock(&e->lock);
		pthread_join(e->hb_thread, NULL);
		pthread_cond_destroy(&e->hb_cv);
	}
	for (size_t i = 0; i < e->n_pool; i++)
		mf_catalog_close(e->pool[i]);
	free(e->pool);
	while (e->specs) {
		struct spec_entry *s = e->specs;
		e->specs = s->next;
		mf_fingerprint_release(&s->fpr);
		mf_spec_free(s->spec);
		free(s);
	}
	while (e->runs) {
		struct run_entry *r = e->runs;
		e->runs = r->next;
		free(r);
	}
	mf_store_close(e->store);
	free(e->catalog_path);
	pthread_cond_destroy(&e->flight_cv);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

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

/* Finds or creates (catalog row included) this process's run for fp. */
static int run_for(struct mf_engine *e, struct mf_catalog *c, const char *fp,
		   struct mf_run_rec *me)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next) {
		if (strcmp(r->fp, fp) == 0) {
			run_rec_fill(e, fp, r->run_id, me);
			pthread_mutex_unlock(&e->lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&e->lock);

	char id[MF_RUN_ID_HEX_LEN + 1];
	int rc = mf_random_hex(MF_RUN_ID_HEX_LEN / 2, id);
	if (rc)
		return rc;
	run_rec_fill(e, fp, id, me);
	rc = mf_catalog_add_run(c, me);
	if (rc)
		return rc;
	struct run_entry *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	memcpy(r->fp, me->fp, sizeof(r->fp));
	memcpy(r->run_id, id, sizeof(r->run_id));
	pthread_mutex_lock(&e->lock);
	r->next = e->runs;
	e->runs = r;
	pthread_mutex_unlock(&e->lock);
	return 0;
}

/* Forgets this process's run for fp: the catalog declared it dead (a
 * claimer elsewhere judged it so), so a new run takes over. */
static void run_drop(struct mf_engine *e, const char *fp)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry **p = &e->runs; *p; p = &(*p)->next) {
		struct run_entry *r = *p;
		if (strcmp(r->fp, fp) == 0 && r->active == 0) {
			*p = r->next;
			free(r);
			break;
		}
	}
	pthread_mutex_unlock(&e->lock);
}

static void run_set_active(struct mf_engine *e, const char *run_id, int delta)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next)
		if (strcmp(r->run_id, run_id) == 0)
			r->active = (unsigned)((int)r->active + delta);
	pthread_mutex_unlock(&e->lock);
}

/* ---- opening a shard ---- */

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ULL),
			      (long)(ns % 1000000000ULL)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Opens the committed file of a materialized shard; a file that is gone or
 * corrupt sends the shard back to absent and answers -EAGAIN. */
static int open_committed(struct mf_engine *e, struct mf_catalog *c,
			  const struct mf_shard_rec *rec,
			  struct mf_shard_reader **out)
{
	int rc = mf_shard_reader_open(e->store, rec->fp, rec->run_id,
				      rec->index, out);
	if (rc == -ENOENT || rc == -EBADMSG || rc == -ELOOP) {
		(void)mf_catalog_reset_shard(c, rec->fp, rec->index,
					     rec->run_id);
		(void)mf_store_shard_remove(e->store, rec->fp, rec->run_id,
					    rec->index);
		return -EAGAIN;
	}
	if (rc == 0)
		(void)mf_catalog_touch(c, rec->fp, rec->index, mf_now_s());
	return rc;
}

static int compute_claimed(struct mf_engine *e, struct mf_catalog *c,
			   const char *fp, uint32_t shard, const char *run_id,
			   char **err)
{
	struct spec_entry *se;
	int rc = eng_spec_for(e, c, fp, &se, err);
	if (rc) {
		(void)mf_catalog_fail_shard(c, fp, shard, run_id, -1,
					    err && *err ? *err : strerror(-rc),
					    NULL);
		return rc == -ENOENT ? -ESTALE : rc;
	}
	rc = mf_store_run_create(e->store, fp, run_id);
	if (rc) {
		eng_errf(err, "store: creating run folder: %s", strerror(-rc));
		(void)mf_catalog_fail_shard(c, fp, shard, run_id, -1, *err,
					    NULL);
		return -EIO;
	}
	run_set_active(e, run_id, 1);
	rc = eng_materialize(e, c, se, shard, run_id, err);
	run_set_active(e, run_id, -1);
	return rc;
}

/* Opens the file of cur (open_committed); on success the row goes to *rec
 * when rec is not NULL, else it is released. */
static int open_committed_rec(struct mf_engine *e, struct mf_catalog *c,
			      struct mf_shard_rec *cur,
			      struct mf_shard_reader **out,
			      struct mf_shard_rec *rec)
{
	int rc = open_committed(e, c, cur, out);
	if (rc == 0 && rec)
		*rec = *cur;
	else
		mf_shard_rec_release(cur);
	return rc;
}

/* One step of the claim loop. Returns 0 with *out (and *rec, the row it
 * was opened from), -EAGAIN to go round again (after waiting when *wait
 * is set), or an error. */
static int claim_step(struct mf_engine *e, struct mf_catalog *c, const char *fp,
		      uint32_t shard, struct mf_shard_reader **out,
		      struct mf_shard_rec *rec, bool *wait, char **err)
{
	struct mf_shard_rec cur;
	int rc = mf_catalog_get_shard(c, fp, shard, &cur);
	if (rc)
		return rc;
	*wait = false;
	if (cur.state == MF_SHARD_MATERIALIZED)
		return open_committed_rec(e, c, &cur, out, rec);
	mf_shard_rec_release(&cur);

	struct mf_run_rec me;
	rc = run_for(e, c, fp, &me);
	if (rc)
		return rc;
	enum mf_claim got;
	rc = mf_catalog_claim_shard(c, fp, shard, &me, mf_now_s(), &got, &cur);
	if (rc == -ESTALE) {
		run_drop(e, fp);
		return -EAGAIN;
	}
	if (rc)
		return rc;
	if (got == MF_CLAIM_DONE)
		return open_committed_rec(e, c, &cur, out, rec);
	if (got == MF_CLAIM_WAIT) {
		*wait = true;
		rc = -EAGAIN;
	} else {
		rc = compute_claimed(e, c, fp, shard, me.run_id, err);
		if (rc == 0) /* read it through the catalog like anyone */
			rc = -EAGAIN;
	}
	mf_shard_rec_release(&cur);
	return rc;
}

static int lead(struct mf_engine *e, const char *fp, uint32_t shard,
		struct mf_shard_reader **out, struct mf_shard_rec *rec,
		char **err)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	uint64_t wait_ns = WAIT_MIN_NS;
	int attempts = 0;
	for (;;) {
		bool wait = false;
		rc = claim_step(e, c, fp, shard, out, rec, &wait, err);
		if (rc != -EAGAIN)
			break;
		if (wait) {
			sleep_ns(wait_ns);
			wait_ns = wait_ns * 2 > WAIT_MAX_NS ? WAIT_MAX_NS
							    : wait_ns * 2;
		} else if (++attempts > MAX_ATTEMPTS) {
			eng_errf(err,
				 "shard %u of %.12s vanished %d times "
				 "after it was computed",
				 shard, fp, MAX_ATTEMPTS);
			rc = -EIO;
			break;
		}
	}
	eng_catalog_put(e, c);
	return rc;
}

static struct flight *flight_find(struct mf_engine *e, const char *fp,
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
	return mf_engine_open_shard_rec(e, fp, shard, out, NULL, err);
}

int mf_engine_open_shard_rec(struct mf_engine *e, const char *fp,
			     uint32_t shard, struct mf_shard_reader **out,
			     struct mf_shard_rec *rec, char **err)
{
	if (!mf_is_hex(fp, MF_FP_HEX_LEN))
		return -EINVAL;
	for (;;) {
		pthread_mutex_lock(&e->lock);
		struct flight *f = flight_find(e, fp, shard);
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
		f->next = e->flights;
		e->flights = f;
		pthread_mutex_unlock(&e->lock);

		int rc = lead(e, fp, shard, out, rec, err);

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
