/*
 * fuse_open.c - opening shards, reading them and letting them go.
 *
 * open never keeps a FUSE thread waiting for a computation. A shard the
 * catalog says is materialized is opened on the spot
 * (mf_engine_open_materialized: one catalog read and the file's index).
 * Any other open is parked on the shard's node and one job per shard goes
 * to the workers (workers=N bound concurrent materializations); the job
 * calls mf_engine_open_shard, which blocks until this or any other
 * process on the store has computed it, and then answers every parked
 * open at once with fuse_reply_open. Meanwhile the FUSE threads serve
 * everything else.
 *
 * Every handle opened on one committed file shares one mfs_data (one
 * reader); reads go through the chunk cache (fuse_cache.c) and a
 * sequential reader gets the next chunks decompressed ahead on the
 * read-ahead threads; the first reader of a shard this job computed gets
 * the chunks the engine handed the cache as it wrote them, without
 * decompressing.
 *
 * A computation is known by its generation (mf_engine_shard.generation),
 * never by run id and attempts, which repeat. FOPEN_KEEP_CACHE is set only
 * when the kernel last cached this very computation for the inode;
 * otherwise the inode's attributes and pages are invalidated before the
 * open is answered. An open on an inode whose open handles read another
 * computation is answered ESTALE after the shard got a new inode: the
 * kernel then looks the name up again and opens that one.
 *
 * A parked open whose process gets a signal is interrupted by the kernel:
 * it is answered EINTR at once, and when no open waits for the job any
 * more the reaper (fuse_reaper.c) cancels it after a grace period. A job
 * whose computation was cancelled while opens were parked again tries
 * once more for them.
 *
 * Not for: lookups (fuse_ops.c) or expiry (fuse_write.c).
 */
#include "fuse_i.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define RA_MIN_BYTES (8ULL << 20) /* read-ahead window, at least */
#define RA_MAX_CHUNKS 64

struct mfs_waiter {
	struct mfs_waiter *next;
	fuse_req_t req;
	struct fuse_file_info fi;
};

/* One open file description. */
struct mfs_fh {
	struct mfs_fh *prev, *next; /* m->fhs, under node_lock */
	struct mfs_data *d;
	fuse_ino_t ino;
	uid_t uid; /* the opener's, counted by mfs_user_take_locked */
	pthread_mutex_t lock; /* guards the read-ahead state below */
	uint64_t next_off; /* where a sequential reader reads next */
	uint32_t ra_next; /* first chunk not yet sent to read-ahead */
};

struct open_job {
	struct mfs *m;
	fuse_ino_t ino;
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	bool registered;
	int64_t created; /* the snapshot's */
};

/* ---- data and nodes ---- */

void mfs_data_put(struct mfs *m, struct mfs_data *d)
{
	if (!d)
		return;
	unsigned was = atomic_fetch_sub(&d->refs, 1);
	assert(was >= 1);
	if (was != 1)
		return;
	mfs_cache_drop(m->cache, d->id);
	mf_engine_reader_close(d->r);
	free(d);
}

void mfs_data_get(struct mfs_data *d)
{
	atomic_fetch_add(&d->refs, 1);
}

/* Wraps a reader of the computation rec describes (taken over, closed on
 * failure). With adopt, the chunks this thread's materialization of that
 * very file put in the cache become the data's. */
int mfs_data_new(struct mfs *m, const struct mf_engine_shard *rec,
		 struct mf_shard_reader *r, bool adopt, int64_t created,
		 struct mfs_data **out)
{
	struct mfs_data *d = calloc(1, sizeof(*d));
	if (!d) {
		mf_engine_reader_close(r);
		return -ENOMEM;
	}
	atomic_init(&d->refs, 1);
	d->r = r;
	mf_engine_reader_stat(r, &d->st);
	d->id = adopt ? mfs_cache_adopt(m->cache, rec, &d->st) : 0;
	if (d->id == 0)
		d->id = atomic_fetch_add(&m->next_data_id, 1);
	memcpy(d->fp, rec->fp, sizeof(d->fp));
	d->shard = rec->index;
	d->gen = rec->generation;
	d->created = created;
	*out = d;
	return 0;
}

/*
 * Opens a handle on d, or on the node's current data when that is the same
 * computation (d is then dropped). *keep says whether the kernel's cached
 * pages and size are of this computation. -ESTALE when the handles open
 * on the node read another computation: the shard then has a new inode,
 * which the kernel finds when it looks the name up again. Takes the
 * caller's reference on d over.
 */
static int fh_open(struct mfs *m, fuse_ino_t ino, uid_t uid, struct mfs_data *d,
		   struct mfs_fh **out, bool *keep)
{
	struct mfs_fh *fh = calloc(1, sizeof(*fh));
	struct mfs_data *put = NULL;
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = fh ? mfs_node_get(m, ino) : NULL;
	int rc = n ? 0 : -ENOMEM;
	/* pages of another computation are being pushed: the same */
	if (n &&
	    ((n->cur && n->cur->gen != d->gen) ||
	     (n->pushing && n->pushing != d->gen))) {
		mfs_node_retire_locked(m, n);
		rc = -ESTALE;
	}
	if (rc == 0)
		rc = mfs_user_take_locked(m, uid, MFS_HANDLE_SHARD);
	if (rc) {
		pthread_mutex_unlock(&m->node_lock);
		free(fh);
		mfs_data_put(m, d);
		return rc;
	}
	if (n->cur) {
		put = d;
		d = n->cur;
		n->nfh++;
	} else {
		n->cur = d; /* the caller's reference becomes the node's */
		n->nfh = 1;
	}
	mfs_data_get(d); /* the handle's */
	*keep = n->kept != 0 && n->kept == d->gen;
	n->kept = d->gen;
	fh->d = d;
	fh->ino = ino;
	fh->uid = uid;
	(void)mf_mutex_init(&fh->lock);
	fh->next = m->fhs;
	if (m->fhs)
		m->fhs->prev = fh;
	m->fhs = fh;
	pthread_mutex_unlock(&m->node_lock);
	mfs_data_put(m, put);
	*out = fh;
	return 0;
}

static void fh_close(struct mfs *m, struct mfs_fh *fh)
{
	struct mfs_data *put = NULL;
	pthread_mutex_lock(&m->node_lock);
	if (fh->prev)
		fh->prev->next = fh->next;
	else
		m->fhs = fh->next;
	if (fh->next)
		fh->next->prev = fh->prev;
	mfs_user_give_locked(m, fh->uid, MFS_HANDLE_SHARD);
	struct mfs_node *n = mfs_node_get(m, fh->ino);
	if (n && n->cur == fh->d && --n->nfh == 0) {
		put = n->cur; /* nobody has it open: close the file */
		n->cur = NULL;
	}
	pthread_mutex_unlock(&m->node_lock);
	mfs_data_put(m, put);
	mfs_data_put(m, fh->d);
	pthread_mutex_destroy(&fh->lock);
	free(fh);
}

void mfs_fhs_release(struct mfs *m)
{
	for (;;) {
		pthread_mutex_lock(&m->node_lock);
		struct mfs_fh *fh = m->fhs;
		pthread_mutex_unlock(&m->node_lock);
		if (!fh)
			return;
		fh_close(m, fh);
	}
}

/* ---- open ---- */

/* Answers one open with a handle on d (takes a reference over). */
static void reply_opened(struct mfs *m, fuse_req_t req,
			 struct fuse_file_info *fi, fuse_ino_t ino,
			 struct mfs_data *d)
{
	struct mfs_fh *fh;
	bool keep;
	uid_t uid = mfs_reader_uid(fuse_req_ctx(req)->uid);
	int rc = fh_open(m, ino, uid, d, &fh, &keep);
	if (rc == -EMFILE)
		mfs_user_capped(m, uid, MFS_HANDLE_SHARD);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (!keep) { /* another computation: sizes the kernel holds are old */
		atomic_fetch_add(&m->attr_epoch, 1); /* before the kernel's */
		(void)fuse_lowlevel_notify_inval_inode(m->se, ino, -1, 0);
	}
	fi->fh = (uint64_t)(uintptr_t)fh;
	fi->keep_cache = keep;
	fi->direct_io = 0;
	fi->noflush = 1;
	/* the opener gone (ENOENT) or the mount (ENODEV): no release will
	 * come for this handle */
	if (fuse_reply_open(req, fi) != 0)
		fh_close(m, fh);
}

/* The node's current data when it is the computation rec describes. */
static struct mfs_data *node_current(struct mfs *m, fuse_ino_t ino,
				     const struct mf_engine_shard *rec)
{
	struct mfs_data *d = NULL;
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = mfs_node_get(m, ino);
	if (n && n->cur && n->cur->gen == rec->generation) {
		d = n->cur;
		mfs_data_get(d);
	}
	pthread_mutex_unlock(&m->node_lock);
	return d;
}

/* What open_fast asks the engine to skip: a reader of the computation
 * the node's handles read already (found then holds a reference). */
struct fast_have {
	struct mfs *m;
	fuse_ino_t ino;
	struct mfs_data *found;
};

static bool have_current(void *arg, const struct mf_engine_shard *rec)
{
	struct fast_have *h = arg;
	h->found = node_current(h->m, h->ino, rec);
	return h->found != NULL;
}

/*
 * Opens a shard the catalog says is materialized without a worker
 * (mf_engine_open_materialized): -EAGAIN when it is not (or its file is
 * not what the catalog says: the engine then sorts that out on a worker).
 * The row is read before the file, so the file is never older than the
 * name the handle gets (at worst newer, which costs the next open an
 * invalidation).
 */
static int open_fast(struct mfs *m, fuse_ino_t ino, const struct mfs_inode *in,
		     struct mfs_data **out)
{
	struct fast_have h = {m, ino, NULL};
	struct mf_shard_reader *r;
	struct mf_engine_shard rec;
	int rc = mf_engine_open_materialized(m->eng, in->si.fp, in->shard,
					     have_current, &h, &r, &rec);
	if (rc)
		return rc;
	struct mfs_data *d = h.found;
	if (!d)
		rc = mfs_data_new(m, &rec, r, false, in->si.created, &d);
	mf_engine_shard_release(&rec);
	if (rc == 0)
		*out = d;
	return rc;
}

/* The engine's open on a worker: blocks while the shard is computed. The
 * handle is named after the row the engine opened the file from: the
 * catalog read again could already name a later computation. */
static int open_engine(struct open_job *j, struct mfs_data **out, char **err)
{
	struct mfs *m = j->m;
	struct mf_shard_reader *r;
	struct mf_engine_shard rec;
	int rc =
	    mf_engine_open_shard_rec(m->eng, j->fp, j->shard, &r, &rec, err);
	if (rc == -ENOENT && j->registered) {
		/* its catalog rows were removed by another process */
		mfs_specs_refresh(m, j->fp);
		free(*err);
		*err = NULL;
		rc = mf_engine_open_shard_rec(m->eng, j->fp, j->shard, &r, &rec,
					      err);
	}
	if (rc)
		return rc;
	rc = mfs_data_new(m, &rec, r, true, j->created, out);
	mf_engine_shard_release(&rec);
	return rc;
}

/* Takes the parked opens for the job to answer, unless the computation
 * was cancelled (rc -ECANCELED) and some are parked again, the mount going
 * on: then *again is set and they stay for another try. */
static struct mfs_waiter *take_waiters(struct mfs *m, fuse_ino_t ino, int rc,
				       bool *again)
{
	struct mfs_waiter *w = NULL;
	*again = false;
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = mfs_node_get(m, ino);
	if (n && rc == -ECANCELED && n->waiters && !atomic_load(&m->stopping)) {
		*again = true;
	} else if (n) {
		w = n->waiters;
		n->waiters = NULL;
		n->queued = false;
	}
	pthread_mutex_unlock(&m->node_lock);
	struct mfs_waiter *rev = NULL; /* first come, first answered */
	while (w) {
		struct mfs_waiter *next = w->next;
		w->next = rev;
		rev = w;
		w = next;
	}
	return rev;
}

/* Runs the engine's open; again while it was cancelled with opens parked
 * again meanwhile. Returns the waiters to answer with rc and *d. */
static struct mfs_waiter *job_open(struct open_job *j, bool cancelled,
				   struct mfs_data **d, int *rc_out)
{
	struct mfs *m = j->m;
	struct mfs_waiter *w;
	bool again;
	int rc;
	do {
		char *err = NULL;
		struct mfs_push push;
		mfs_push_begin(&push, m, j->ino, j->fp, j->shard);
		rc = cancelled ? -ENODEV : open_engine(j, d, &err);
		mfs_push_end(&push);
		mfs_cache_unstage(m->cache); /* what this thread computed */
		if (rc == -EAGAIN)
			rc = -EIO;
		w = take_waiters(m, j->ino, rc, &again);
		char l[MFS_LABEL_MAX];
		if (rc == -ECANCELED && !again)
			mfs_logf(m, MFS_LOG_INFO,
				 "shard %u of %s: stopped, no reader left",
				 j->shard, mfs_label(m, j->fp, l, sizeof(l)));
		else if (rc && rc != -ECANCELED && !cancelled)
			mfs_logf(m, MFS_LOG_WARN, "shard %u of %s: %s",
				 j->shard, mfs_label(m, j->fp, l, sizeof(l)),
				 err ? err : strerror(-rc));
		free(err);
	} while (again);
	*rc_out = rc;
	return w;
}

static void open_job_run(void *arg, bool cancelled)
{
	struct open_job *j = arg;
	struct mfs *m = j->m;
	struct mfs_data *d = NULL;
	int rc;
	struct mfs_waiter *w = job_open(j, cancelled, &d, &rc);
	if (rc == -ESTALE && j->registered)
		mfs_specs_refresh(m, j->fp); /* inputs changed: a new fp */
	if (rc == -ECANCELED) /* only the unmount leaves opens to it */
		rc = -ENODEV;
	while (w) {
		struct mfs_waiter *next = w->next;
		if (rc) {
			fuse_reply_err(w->req, rc == -EBADMSG ? EIO : -rc);
		} else {
			mfs_data_get(d);
			reply_opened(m, w->req, &w->fi, j->ino, d);
		}
		free(w);
		w = next;
	}
	mfs_data_put(m, d);
	free(j);
}

/*
 * libfuse calls this when the kernel interrupts an open parked on node n
 * (its process got a signal), from another thread than the one parking
 * it, or within fuse_req_interrupt_func when the open was interrupted
 * before: open_slow registers it before it parks the open, so that then
 * it finds nothing here and answers the open itself. An open found parked
 * is taken off the node and answered EINTR; libfuse holds req meanwhile.
 * Nodes are never freed before the unmount.
 */
static void on_interrupt(fuse_req_t req, void *arg)
{
	struct mfs_node *n = arg;
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_waiter *w = NULL;
	pthread_mutex_lock(&m->node_lock);
	for (struct mfs_waiter **p = &n->waiters; *p; p = &(*p)->next) {
		if ((*p)->req == req) {
			w = *p;
			*p = w->next;
			break;
		}
	}
	bool alone = w && n->queued && !n->waiters;
	uint64_t seq = n->job_seq;
	fuse_ino_t ino = n->ino;
	pthread_mutex_unlock(&m->node_lock);
	if (!w)
		return; /* answered, or not parked yet */
	fuse_reply_err(req, EINTR);
	free(w);
	if (alone)
		mfs_reaper_watch(m, ino, seq);
}

/* Parks the open on the shard's node and queues the node's job, in the
 * opener's turn; an open of another uid parking on a job still queued
 * enters it in its own turn too (mfs_pool_lift), so a reader who opened
 * another's cold shards first does not make that other wait in its turn.
 * The node is looked up first, so that the interrupt callback is
 * registered before the open can be answered (after which req is gone). */
static int open_slow(struct mfs *m, fuse_req_t req, struct fuse_file_info *fi,
		     fuse_ino_t ino, const struct mfs_inode *in)
{
	struct mfs_waiter *w = calloc(1, sizeof(*w));
	struct open_job *j = calloc(1, sizeof(*j));
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = w && j ? mfs_node_get(m, ino) : NULL;
	pthread_mutex_unlock(&m->node_lock);
	if (!n) {
		free(w);
		free(j);
		return -ENOMEM;
	}
	w->req = req;
	w->fi = *fi;
	*j = (struct open_job){
	    m, ino, "", in->shard, in->si.registered, in->si.created};
	memcpy(j->fp, in->si.fp, sizeof(j->fp));
	fuse_req_interrupt_func(req, on_interrupt, n);
	pthread_mutex_lock(&m->node_lock);
	int rc = fuse_req_interrupted(req) ? -EINTR : 0;
	bool submit = rc == 0 && !n->queued;
	uid_t uid = mfs_reader_uid(fuse_req_ctx(req)->uid);
	if (submit)
		rc = mfs_pool_submit_keyed(m->open_pool, uid, open_job_run, j,
					   &n->job_id);
	else if (rc == 0) /* also in this uid's turn, unless it started */
		(void)mfs_pool_lift(m->open_pool, n->job_id, uid);
	if (rc == 0) {
		w->next = n->waiters;
		n->waiters = w;
		n->job_seq += submit;
		n->queued = true;
	}
	pthread_mutex_unlock(&m->node_lock);
	if (rc)
		free(w);
	if (rc || !submit)
		free(j);
	return rc;
}

/* One of this daemon's own stages opened a shard that is not materialized:
 * waiting would hold the stage's worker while the shard needs one, and
 * with every worker so held nothing would ever finish (docs/guide.md,
 * "Pipelines that read other pipelines"). EDEADLK, and the log says how
 * to compose instead. */
static int refuse_own_stage(struct mfs *m, const struct mfs_inode *in)
{
	char l[MFS_LABEL_MAX];
	mfs_logf(m, MFS_LOG_WARN,
		 "shard %u of %s: opened by a stage of this daemon while not "
		 "materialized: refused (EDEADLK); materialize it first "
		 "(matctl warm)",
		 in->shard, mfs_label(m, in->si.fp, l, sizeof(l)));
	return -EDEADLK;
}

void mfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_inode in;
	int rc = mfs_inode_decode(m, ino, &in);
	if (rc == 0 && in.kind == MFS_BFILE) {
		mfs_batch_open(req, ino, &in, fi);
		return;
	}
	if (rc == 0 && in.kind != MFS_SHARD)
		rc = in.kind == MFS_LINK ? -ELOOP : -EISDIR;
	/* shards are read-only files (r--r--r--): what the kernel answers
	 * itself under default_permissions */
	if (rc == 0 &&
	    ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)))
		rc = -EACCES;
	struct mfs_data *d = NULL;
	if (rc == 0)
		rc = open_fast(m, ino, &in, &d);
	if (rc == 0) {
		reply_opened(m, req, fi, ino, d);
		return;
	}
	if (rc == -EAGAIN &&
	    mf_engine_runs_process(m->eng, fuse_req_ctx(req)->pid))
		rc = refuse_own_stage(m, &in);
	if (rc == -EAGAIN)
		rc = open_slow(m, req, fi, ino, &in);
	if (rc)
		fuse_reply_err(req, -rc);
}

const struct mfs_data *mfs_fh_data(uint64_t fh)
{
	return ((struct mfs_fh *)(uintptr_t)fh)->d;
}

void mfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mfs *m = fuse_req_userdata(req);
	if (mfs_ino_is_batch(ino))
		mfs_batch_release(m, fi);
	else
		fh_close(m, (struct mfs_fh *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* ---- read ---- */

struct ra_job {
	struct mfs *m;
	struct mfs_data *d; /* a reference */
	uint32_t chunk;
};

static void ra_run(void *arg, bool cancelled)
{
	struct ra_job *j = arg;
	struct mfs_chunk ch;
	void *ref;
	if (!cancelled &&
	    mfs_cache_get(j->m->cache, j->d, j->chunk, &ch, &ref) == 0)
		mfs_cache_unref(j->m->cache, ref);
	mfs_data_put(j->m, j->d);
	free(j);
}

static uint32_t ra_window(struct mfs *m, const struct mfs_data *d)
{
	uint64_t cs = d->st.chunk_size, bytes = RA_MIN_BYTES;
	if (bytes < 2ULL * m->cores * cs)
		bytes = 2ULL * m->cores * cs;
	if (bytes > m->o.cache_bytes / 4)
		bytes = m->o.cache_bytes / 4;
	uint64_t n = bytes / cs;
	return (uint32_t)(n < 1 ? 1 : n > RA_MAX_CHUNKS ? RA_MAX_CHUNKS : n);
}

void mfs_ra_submit(struct mfs *m, struct mfs_data *d, uint32_t chunk)
{
	if (mfs_pool_backlog(m->ra_pool) <= 4 * RA_MAX_CHUNKS)
		mfs_ra_submit_to(m, m->ra_pool, d, chunk);
}

void mfs_ra_submit_to(struct mfs *m, struct mfs_pool *p, struct mfs_data *d,
		      uint32_t chunk)
{
	if (chunk >= d->st.chunks || mfs_cache_has(m->cache, d, chunk))
		return;
	struct ra_job *j = malloc(sizeof(*j));
	if (!j)
		return;
	*j = (struct ra_job){m, d, chunk};
	mfs_data_get(d);
	if (mfs_pool_submit(p, ra_run, j) != 0) {
		mfs_data_put(m, d);
		free(j);
	}
}

/*
 * Sends the chunks after [first, last] to the read-ahead threads when the
 * handle reads sequentially (the kernel's own read-ahead may reorder its
 * requests a little), and the chunks of this request after the first, so
 * that they decompress in parallel with it.
 */
static void read_ahead(struct mfs *m, struct mfs_fh *fh, uint64_t off,
		       size_t size, uint32_t first, uint32_t last)
{
	struct mfs_data *d = fh->d;
	uint32_t to = 0, from = first + 1;
	pthread_mutex_lock(&fh->lock);
	uint64_t slack = 4 * d->st.chunk_size + (2u << 20);
	bool seq = off + slack >= fh->next_off && off <= fh->next_off + slack;
	if (!seq || off + size > fh->next_off)
		fh->next_off = off + size;
	to = last;
	if (!seq)
		fh->ra_next = last + 1;
	if (seq) { /* chunks below ra_next were sent already */
		to = last + ra_window(m, d);
		if (from < fh->ra_next)
			from = fh->ra_next;
		if (fh->ra_next < to + 1)
			fh->ra_next = to + 1;
	}
	pthread_mutex_unlock(&fh->lock);
	for (uint32_t c = from; c <= to && c < d->st.chunks; c++)
		mfs_ra_submit(m, d, c);
}

static void read_failed(struct mfs *m, fuse_req_t req, struct mfs_data *d,
			int rc)
{
	if (rc == -EBADMSG) {
		char l[MFS_LABEL_MAX];
		mfs_logf(m, MFS_LOG_ERR,
			 "shard %u of %s: corrupt chunk (%s, %s): it will "
			 "be computed again",
			 d->shard, mfs_label(m, d->fp, l, sizeof(l)),
			 mf_corrupt_reason(), mf_corrupt_where());
		/* only this computation: the shard may be another by now */
		(void)mf_engine_report_corrupt(m->eng, d->fp, d->shard, d->gen);
		rc = -EIO;
	}
	fuse_reply_err(req, -rc);
}

void mfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	if (mfs_ino_is_batch(ino)) {
		mfs_batch_read(req, size, off, fi);
		return;
	}
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_fh *fh = (struct mfs_fh *)(uintptr_t)fi->fh;
	struct mfs_data *d = fh->d;
	uint64_t raw = d->st.raw_bytes, cs = d->st.chunk_size;
	if (off < 0 || (uint64_t)off >= raw || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > raw - (uint64_t)off)
		size = (size_t)(raw - (uint64_t)off);
	uint32_t first = (uint32_t)((uint64_t)off / cs);
	uint32_t last = (uint32_t)(((uint64_t)off + size - 1) / cs);
	size_t n = last - first + 1;
	struct iovec iov_s[8], *iov = n <= 8 ? iov_s : calloc(n, sizeof(*iov));
	void *ref_s[8], **ref = n <= 8 ? ref_s : calloc(n, sizeof(*ref));
	int rc = iov && ref ? 0 : -ENOMEM;
	read_ahead(m, fh, (uint64_t)off, size, first, last);
	size_t got = 0, left = size;
	for (; rc == 0 && got < n; got++) {
		struct mfs_chunk ch;
		rc = mfs_cache_read(m->cache, d, first + (uint32_t)got, &ch,
				    &ref[got]);
		if (rc)
			break;
		size_t in = got == 0 ? (size_t)((uint64_t)off - first * cs) : 0;
		size_t len = ch.len - in < left ? ch.len - in : left;
		iov[got] = (struct iovec){(void *)(ch.buf + in), len};
		left -= len;
	}
	if (rc)
		read_failed(m, req, d, rc);
	else if (fuse_reply_iov(req, iov, (int)n) == 0)
		atomic_fetch_add_explicit(&m->bytes_served, size,
					  memory_order_relaxed);
	for (size_t i = 0; i < got; i++)
		mfs_cache_unref(m->cache, ref[i]);
	if (iov != iov_s)
		free(iov);
	if (ref != ref_s)
		free(ref);
}
