/*
 * engine_commit.c - serving a shard before it is durable (serve_sealed):
 * the shards whose file is sealed (complete, not yet durable) are kept
 * here while one thread commits them in order (fsync, rename, fsync of
 * the folder, then the catalog row), and every open of such a shard in
 * this engine gets a reader of the same file meanwhile. The catalog row
 * stays running until the commit is recorded: a crash before that leaves
 * the claim of a dead run, which the next open takes over.
 *
 * Not for: running stages or sealing (engine_run.c), or deciding who
 * computes (engine_claim.c).
 */
#include "engine_i.h"

#include <xxhash.h>

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The shard just recorded materialized, as the claim loop would have seen
 * it had it read it back: what a catalog outage serves it from. */
static void remember(struct mf_engine *e, const struct sealed *s)
{
	struct mf_shard_rec rec = {0};
	memcpy(rec.fp, s->fp, sizeof(rec.fp));
	rec.index = s->shard;
	rec.state = MF_SHARD_MATERIALIZED;
	memcpy(rec.run_id, s->run_id, sizeof(rec.run_id));
	rec.raw_bytes = s->st.raw_bytes;
	rec.stored_bytes = s->st.stored_bytes;
	rec.chunks = s->st.chunks;
	rec.exit_status = -1;
	rec.generation = s->generation;
	eng_known_remember(e, &rec);
}

static bool stopping(struct mf_engine *e)
{
	pthread_mutex_lock(&e->lock);
	bool stop = e->commit_stop;
	pthread_mutex_unlock(&e->lock);
	return stop;
}

static void tell(struct mf_engine *e, const struct sealed *s, const char *err)
{
	if (e->opts.commit_failed)
		e->opts.commit_failed(e->opts.commit_failed_arg, s->fp,
				      s->shard, err);
}

/* Records the durable file s. While the catalog is unreachable it tries
 * again, past ENG_CATALOG_WAIT_S too (said once): until the row is
 * recorded, other processes wait on it, and giving up would leave it
 * running under this live run. Only an ending engine stops trying: its
 * run dies with it and the next claim takes the shard over. */
static int record(struct mf_engine *e, struct sealed *s, struct mf_catalog **c,
		  char **err)
{
	uint64_t down_until = 0, down_ns = 0;
	bool lost = false, told = false;
	for (;;) {
		if (*c) {
			eng_catalog_put(e, *c);
			*c = NULL;
		}
		int rc = eng_catalog_get(e, c);
		if (rc == 0)
			rc = mf_catalog_complete_shard(
			    *c, s->fp, s->shard, s->run_id, s->st.raw_bytes,
			    s->st.stored_bytes, s->st.chunks);
		/* a reply lost with the connection, after the server had
		 * recorded it: the row is already ours */
		if (rc == -ESTALE && lost &&
		    eng_recorded(*c, s->fp, s->shard, s->run_id, s->generation))
			rc = 0;
		if (!mf_catalog_unreachable(rc) || stopping(e))
			return rc;
		lost = true;
		if (eng_catalog_wait(e, rc, &down_until, &down_ns, err) == 0)
			continue;
		if (!told) {
			char *msg = NULL;
			eng_errf(&msg,
				 "%s; the file is durable, recorded once the "
				 "catalog answers",
				 *err);
			tell(e, s, msg ? msg : *err);
			free(msg);
			told = true;
		}
		free(*err);
		*err = NULL;
		down_until = 0; /* another bound, and so on */
	}
}

/* Makes s durable and records it; a failure is recorded as the shard's
 * (the next open computes it again) and told to commit_failed. */
static void commit_one(struct mf_engine *e, struct sealed *s)
{
	char *err = NULL;
	int rc = mf_shard_writer_commit(s->w, NULL);
	s->w = NULL;
	struct mf_catalog *c = NULL;
	if (rc) {
		eng_errf(&err, "store: committing shard %u: %s", s->shard,
			 strerror(-rc));
		if (eng_catalog_get(e, &c) == 0) /* -ESTALE: not ours now */
			(void)mf_catalog_fail_shard(c, s->fp, s->shard,
						    s->run_id, -1, err, NULL);
	} else {
		rc = record(e, s, &c, &err);
		if (rc == 0)
			eng_shared_hint(e, s->sfp, s->fp, s->shard, s->run_id,
					s->owner, s->place);
		/* read: what eviction orders by (an open of a committed shard
		 * sets it likewise). Now, not when it was served: the touch
		 * sets the snapshot's last read too, which another shard of
		 * it may have set later meanwhile, and must not go back */
		if (rc == 0) {
			int64_t now = mf_now_s();
			(void)mf_catalog_touch(
			    c, s->fp, s->shard,
			    now > s->sealed_at ? now : s->sealed_at);
			remember(e, s);
		} else if (rc == -ESTALE) { /* lost: no row names this file */
			(void)mf_store_shard_remove(e->store, s->fp, s->run_id,
						    s->shard);
		} else if (!mf_catalog_unreachable(rc)) {
			/* refused (busy, full, read-only): give the claim
			 * up, so that the next open anywhere computes it */
			if (!err)
				eng_errf(&err,
					 "catalog: recording shard %u: %s",
					 s->shard, strerror(-rc));
			if (c &&
			    mf_catalog_abandon_shard(c, s->fp, s->shard,
						     s->run_id) == 0)
				(void)mf_store_shard_remove(
				    e->store, s->fp, s->run_id, s->shard);
		} else if (!err) { /* the engine ends during an outage */
			eng_errf(&err, "catalog: recording shard %u: %s",
				 s->shard, strerror(-rc));
		}
	}
	if (c)
		eng_catalog_put(e, c);
	if (err) {
		char *msg = NULL;
		eng_errf(&msg,
			 "%s: not recorded, the next open computes it "
			 "again",
			 err);
		tell(e, s, msg ? msg : err);
		free(msg);
	}
	free(err);
}

/* Takes s out of the list; e->lock held. */
static void sealed_unlink(struct mf_engine *e, struct sealed *s)
{
	assert(mf_mutex_held(&e->lock));
	for (struct sealed **p = &e->sealed; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			return;
		}
	}
}

static void *commit_main(void *arg)
{
	struct mf_engine *e = arg;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		struct sealed *s = e->sealed; /* the oldest is last */
		struct sealed *next = NULL;
		for (; s; s = s->next)
			if (!s->started)
				next = s;
		if (!next && e->commit_stop)
			break;
		if (!next) {
			pthread_cond_wait(&e->commit_cv, &e->lock);
			continue;
		}
		next->started = true;
		pthread_mutex_unlock(&e->lock);
		commit_one(e, next);
		pthread_mutex_lock(&e->lock);
		/* the row says what it is now: nobody opens this file here
		 * any more */
		sealed_unlink(e, next);
		pthread_cond_broadcast(&e->commit_cv); /* eng_commit_wait */
		pthread_mutex_unlock(&e->lock);
		close(next->fd);
		eng_run_set_active(e, next->run_id, -1);
		free(next);
		pthread_mutex_lock(&e->lock);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

int eng_commit_start(struct mf_engine *e)
{
	int rc = pthread_cond_init(&e->commit_cv, NULL);
	if (rc)
		return -rc;
	rc = pthread_create(&e->commit_thread, NULL, commit_main, e);
	if (rc) {
		pthread_cond_destroy(&e->commit_cv);
		return -rc;
	}
	e->commit_started = true;
	return 0;
}

void eng_commit_stop(struct mf_engine *e)
{
	if (!e->commit_started)
		return;
	pthread_mutex_lock(&e->lock);
	e->commit_stop = true;
	pthread_cond_broadcast(&e->commit_cv);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->commit_thread, NULL);
	pthread_cond_destroy(&e->commit_cv);
	e->commit_started = false;
}

void eng_commit_queue(struct mf_engine *e, struct sealed *s)
{
	eng_run_set_active(e, s->run_id, 1);
	pthread_mutex_lock(&e->lock);
	s->next = e->sealed;
	e->sealed = s;
	pthread_cond_broadcast(&e->commit_cv);
	pthread_mutex_unlock(&e->lock);
}

static bool committing(const struct mf_engine *e, const char *fp, int64_t shard)
{
	assert(mf_mutex_held(&e->lock));
	for (const struct sealed *s = e->sealed; s; s = s->next)
		if ((shard < 0 || s->shard == (uint32_t)shard) &&
		    strcmp(s->fp, fp) == 0)
			return true;
	return false;
}

void eng_commit_wait(struct mf_engine *e, const char *fp, int64_t shard)
{
	if (!e->commit_started)
		return;
	/* bounded: a commit waiting out a catalog outage keeps trying, and
	 * the caller then meets the outage itself */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ENG_CATALOG_WAIT_S;
	pthread_mutex_lock(&e->lock);
	while (committing(e, fp, shard) &&
	       pthread_cond_timedwait(&e->commit_cv, &e->lock, &until) !=
		   ETIMEDOUT)
		;
	pthread_mutex_unlock(&e->lock);
}

/* The one test of "served from the sealed file here": the file this
 * engine sealed for rec's claim (a running row, its fingerprint, shard,
 * run and generation) and is committing, or NULL. Caller holds e->lock. */
static const struct sealed *sealed_of(const struct mf_engine *e,
				      const struct mf_shard_rec *rec)
{
	assert(mf_mutex_held(&e->lock));
	if (rec->state != MF_SHARD_RUNNING || rec->generation == 0)
		return NULL;
	for (const struct sealed *s = e->sealed; s; s = s->next)
		if (s->generation == rec->generation &&
		    s->shard == rec->index && strcmp(s->fp, rec->fp) == 0 &&
		    strcmp(s->run_id, rec->run_id) == 0)
			return s;
	return NULL;
}

uint64_t mf_engine_shard_file_gen(const struct mf_engine_shard *rec)
{
	bool file = rec &&
	    (rec->state == MF_ENGINE_MATERIALIZED ||
	     rec->state == MF_ENGINE_RUNNING);
	return file ? rec->generation : 0;
}

int mf_engine_sealed_stat(struct mf_engine *e,
			  const struct mf_engine_shard *rec,
			  struct mf_engine_file *st)
{
	struct mf_shard_rec row;
	eng_shard_back(rec, &row);
	pthread_mutex_lock(&e->lock);
	const struct sealed *s = sealed_of(e, &row);
	if (s)
		eng_file_of(&s->st, st);
	pthread_mutex_unlock(&e->lock);
	return s ? 0 : -ENOENT;
}

void eng_sealed_row(const struct sealed *s, struct mf_shard_rec *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->fp, s->fp, sizeof(out->fp));
	memcpy(out->run_id, s->run_id, sizeof(out->run_id));
	out->index = s->shard;
	out->state = MF_SHARD_RUNNING;
	out->generation = s->generation;
	out->raw_bytes = s->st.raw_bytes;
	out->stored_bytes = s->st.stored_bytes;
	out->chunks = s->st.chunks;
	out->exit_status = -1;
	out->last_read = s->sealed_at;
}

int eng_sealed_recall(struct mf_engine *e, const char *fp, uint32_t shard,
		      struct mf_shard_rec *out)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&e->lock);
	for (const struct sealed *s = e->sealed; s; s = s->next) {
		if (s->shard == shard && strcmp(s->fp, fp) == 0) {
			eng_sealed_row(s, out);
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int eng_sealed_open(struct mf_engine *e, struct mf_shard_rec *cur,
		    struct mf_shard_reader **out)
{
	struct mf_shard_stat st;
	int fd = -1;
	/* the descriptor is duplicated under the lock: the commit thread
	 * closes the original once the row no longer names this claim */
	pthread_mutex_lock(&e->lock);
	const struct sealed *s = sealed_of(e, cur);
	if (s) {
		st = s->st;
		fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0);
	}
	int rc = !s ? -ENOENT : fd < 0 ? -errno : 0;
	pthread_mutex_unlock(&e->lock);
	if (rc)
		return rc;
	rc = mf_shard_reader_open_fd(fd, cur->fp, cur->index, out);
	close(fd);
	if (rc == 0) {
		cur->raw_bytes = st.raw_bytes;
		cur->stored_bytes = st.stored_bytes;
		cur->chunks = st.chunks;
	}
	return rc;
}

uint64_t eng_spec_place(const struct mf_spec *spec)
{
	return XXH3_64bits(spec->dir, strlen(spec->dir));
}

void eng_shared_hint(struct mf_engine *e, const char *sfp, const char *fp,
		     uint32_t shard, const char *run_id, uid_t owner,
		     uint64_t place)
{
	if (!sfp || !sfp[0])
		return;
	struct mf_store_donor d = {
	    .shard = shard, .owner = owner, .place = place};
	memcpy(d.fp, fp, sizeof(d.fp));
	memcpy(d.run_id, run_id, sizeof(d.run_id));
	(void)mf_store_shared_put(e->store, sfp, &d);
}
