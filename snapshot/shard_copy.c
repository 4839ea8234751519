/*
 * shard_copy.c - streaming a whole shard to a descriptor, in order, with
 * chunks decoded ahead on several threads: chunk i is decoded by thread
 * i mod T into slot i mod 2T, and the calling thread writes the slots out
 * in order. At most 2T chunks are in flight.
 *
 * Not for: random access (shard_reader.c).
 */
#include "snapshot_i.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#define COPY_THREADS_MAX 64

struct copy_slot {
	uint8_t *buf; /* chunk_size bytes */
	uint64_t next; /* the chunk this slot is for; guarded by lock */
	bool ready; /* buf holds chunk next; guarded by lock */
	int err; /* its decode result; written before ready */
	struct mf_corrupt_note note; /* why, when err is -EBADMSG */
};

struct copy_worker {
	struct copy_job *job;
	unsigned id;
	pthread_t thread;
};

/* One lock guards every slot's next and ready, and stop. */
struct copy_job {
	struct mf_shard_reader *r;
	struct copy_slot *slots;
	unsigned nslots, nthreads;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool stop;
};

static void *copy_worker_main(void *arg)
{
	struct copy_worker *me = arg;
	struct copy_job *j = me->job;
	for (uint64_t i = me->id; i < j->r->st.chunks; i += j->nthreads) {
		struct copy_slot *s = &j->slots[i % j->nslots];
		pthread_mutex_lock(&j->lock);
		while (!j->stop && (s->next != i || s->ready))
			pthread_cond_wait(&j->cv, &j->lock);
		bool stop = j->stop;
		pthread_mutex_unlock(&j->lock);
		if (stop)
			break;
		int rc = snap_load_chunk(j->r, (uint32_t)i, s->buf);
		pthread_mutex_lock(&j->lock);
		s->err = rc;
		if (rc == -EBADMSG)
			mf_corrupt_save(&s->note);
		s->ready = true;
		pthread_cond_broadcast(&j->cv);
		pthread_mutex_unlock(&j->lock);
		if (rc)
			break;
	}
	return NULL;
}

/* Writes the chunks out in order as the workers decode them. */
static int copy_out(struct copy_job *j, int out_fd)
{
	int rc = 0;
	for (uint64_t i = 0; i < j->r->st.chunks && rc == 0; i++) {
		struct copy_slot *s = &j->slots[i % j->nslots];
		pthread_mutex_lock(&j->lock);
		while (s->next != i || !s->ready)
			pthread_cond_wait(&j->cv, &j->lock);
		pthread_mutex_unlock(&j->lock);
		rc = s->err;
		if (rc == -EBADMSG)
			rc = mf_corrupt_restore(&s->note);
		if (rc == 0)
			rc = mf_write_full(out_fd, s->buf, j->r->ent[i].raw);
		pthread_mutex_lock(&j->lock);
		s->ready = false;
		s->next = i + j->nslots;
		pthread_cond_broadcast(&j->cv);
		pthread_mutex_unlock(&j->lock);
	}
	return rc;
}

static void job_stop(struct copy_job *j, struct copy_worker *w, unsigned n)
{
	pthread_mutex_lock(&j->lock);
	j->stop = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(w[i].thread, NULL);
}

static int copy_parallel(struct copy_job *j, int out_fd)
{
	struct copy_worker *w = calloc(j->nthreads, sizeof(*w));
	if (!w)
		return -ENOMEM;
	unsigned started = 0;
	int rc = 0;
	for (; started < j->nthreads; started++) {
		w[started] = (struct copy_worker){.job = j, .id = started};
		rc = -pthread_create(&w[started].thread, NULL, copy_worker_main,
				     &w[started]);
		if (rc)
			break;
	}
	if (rc == 0)
		rc = copy_out(j, out_fd);
	job_stop(j, w, started);
	free(w);
	return rc;
}

static int copy_serial(struct mf_shard_reader *r, int out_fd)
{
	uint8_t *buf = malloc(r->st.chunk_size);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t i = 0; i < r->st.chunks && rc == 0; i++) {
		rc = snap_load_chunk(r, i, buf);
		if (rc == 0)
			rc = mf_write_full(out_fd, buf, r->ent[i].raw);
	}
	free(buf);
	return rc;
}

static void slots_free(struct copy_job *j)
{
	for (unsigned i = 0; i < j->nslots; i++)
		free(j->slots[i].buf);
	free(j->slots);
}

int mf_shard_reader_copy(struct mf_shard_reader *r, int out_fd,
			 unsigned threads)
{
	if (!r)
		return -EINVAL;
	if (threads > COPY_THREADS_MAX)
		threads = COPY_THREADS_MAX;
	if (threads > r->st.chunks)
		threads = r->st.chunks;
	if (threads <= 1)
		return copy_serial(r, out_fd);
	struct copy_job j = {.r = r, .nthreads = threads};
	/* a multiple of T: a slot is always filled by the same thread */
	j.nslots = 2 * threads;
	j.slots = calloc(j.nslots, sizeof(*j.slots));
	int rc = j.slots ? 0 : -ENOMEM;
	for (unsigned i = 0; rc == 0 && i < j.nslots; i++) {
		j.slots[i].next = i;
		j.slots[i].buf = malloc(r->st.chunk_size);
		if (!j.slots[i].buf)
			rc = -ENOMEM;
	}
	if (rc == 0) {
		(void)mf_mutex_init(&j.lock);
		pthread_cond_init(&j.cv, NULL);
		rc = copy_parallel(&j, out_fd);
		pthread_cond_destroy(&j.cv);
		pthread_mutex_destroy(&j.lock);
	}
	if (j.slots)
		slots_free(&j);
	return rc;
}
