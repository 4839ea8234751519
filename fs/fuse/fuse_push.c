/*
 * fuse_push.c - a computation's bytes put in the kernel's page cache of
 * the inode its opens wait on, as the stages write them.
 *
 * The first read of a cold shard would otherwise pay, after the stages,
 * for every page of the mount's cache it fills; put in while the stages
 * run (FUSE_NOTIFY_STORE), those pages cost the stages' time instead, on
 * a push thread beside the one that reads their output, and the waiting
 * readers read at page-cache speed once their opens return
 * (docs/performance.md).
 *
 * The open job (fuse_open.c) names its inode for the thread that runs the
 * materialization (mfs_push_begin); the engine's chunk events on that
 * thread for that shard come here first (fuse_mount.c). A computation's
 * pages go in only while no handle of this mount has the inode open
 * (which would read another computation), after the kernel was told to
 * forget the inode's old pages, in whole pages, and up to a quarter of
 * the machine's memory or -o push_max (pages put in earlier than that
 * would be evicted before a reader got to them). The node records the
 * computation being pushed (mfs_node.pushing: getattr answers the bytes
 * pushed so far, and a lookup or open of another computation gets a new
 * inode) and, once pages are in, as the one the kernel caches
 * (mfs_node.kept), so the opens it answers keep them. A computation that
 * fails or is given up has its pages dropped again. A store that fails
 * stops the pushing: the pages in so far are right, and the kernel asks
 * for the others with reads.
 *
 * The stores run on a push thread of the job's own, so that the thread
 * reading the stages' output goes on reading (and the stages on writing)
 * while the kernel fills its new pages, which on some machines cost as
 * much as the stages (docs/performance.md). They read the chunk's bytes
 * where the engine cut them, which it lends until it releases the chunk
 * (MF_CHUNK_RELEASE, which waits for the stores of that chunk): the only
 * copy is the kernel's into its pages. A page that joins two chunks (a
 * chunk size that is not a multiple of the page) is put together in a
 * page of its own first. Every event but a chunk's data and its release
 * waits for the push thread to be idle, so what follows a seal, a
 * failure or the end sees every store done.
 *
 * Not for: answering opens (fuse_open.c) or the chunk cache
 * (fuse_cache.c), which takes the chunks not pushed.
 */
#include "fuse_i.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

static _Thread_local struct mfs_push *cur;

void mfs_push_begin(struct mfs_push *p, struct mfs *m, fuse_ino_t ino,
		    const char *fp, uint32_t shard)
{
	memset(p, 0, sizeof(*p));
	p->m = m;
	p->ino = ino;
	memcpy(p->fp, fp, sizeof(p->fp));
	p->shard = shard;
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
	p->limit = pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size / 4
					 : m->o.cache_bytes;
	if (m->o.push_max)
		p->limit = m->o.push_max;
	p->page = size > 0 ? (size_t)size : 4096;
	(void)mf_mutex_init(&p->lock);
	pthread_cond_init(&p->cv, NULL);
	/* pages a store cannot send whole: not pushed */
	cur = m->o.no_push || MFS_PUSH_BUF % p->page ? NULL : p;
}

/* The kernel forgets the inode's attributes, and its pages from off on
 * (-1: none of them). */
static void inval(struct mfs_push *p, off_t off)
{
	atomic_fetch_add(&p->m->attr_epoch, 1); /* before the kernel's */
	(void)fuse_lowlevel_notify_inval_inode(p->m->se, p->ino, off, 0);
}

/* Ends the node's record of the push (kept too, unless done). */
static void node_end(struct mfs_push *p, bool done)
{
	struct mfs *m = p->m;
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = mfs_node_get(m, p->ino);
	if (n && n->pushing == p->gen) {
		n->pushing = 0;
		n->pushed = 0;
	}
	if (n && !done && n->kept == p->gen)
		n->kept = 0;
	pthread_mutex_unlock(&m->node_lock);
}

/* ---- the push thread ---- */

/* Announces `end` bytes pushed (before the store: getattr then never
 * answers less than the kernel holds) while the node is still ours; the
 * opens it answers will keep the pages once they are all in. */
static bool node_grow(struct mfs_push *p, uint64_t end)
{
	struct mfs *m = p->m;
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = mfs_node_get(m, p->ino);
	bool ok = n && n->pushing == p->gen && !n->retired &&
	    (!n->cur || n->cur->gen == p->gen); /* opened sealed: ours */
	if (ok) {
		n->pushed = end;
		n->kept = p->gen;
	}
	pthread_mutex_unlock(&m->node_lock);
	return ok;
}

/* Stores len bytes at p->bytes, announced first; false stops the push. */
static bool store(struct mfs_push *p, const void *data, size_t len)
{
	if (!node_grow(p, p->bytes + len))
		return false;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);
	bv.buf[0].mem = (void *)data;
	if (fuse_lowlevel_notify_store(p->m->se, p->ino, (off_t)p->bytes, &bv,
				       0) != 0)
		return false;
	p->bytes += len;
	atomic_fetch_add(&p->m->bytes_pushed, len);
	return true;
}

/* Stores the items handed over, in order, until stopped; after a failed
 * store the rest of gen's are let go unstored. */
static void *push_main(void *arg)
{
	struct mfs_push *p = arg;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (p->q_n == 0 && !p->stop)
			pthread_cond_wait(&p->cv, &p->lock);
		if (p->q_n == 0)
			break;
		struct mfs_push_item it = p->q[p->q_head];
		bool skip = p->failed;
		pthread_mutex_unlock(&p->lock);
		bool ok = skip || store(p, it.data, it.len);
		pthread_mutex_lock(&p->lock);
		if (!ok)
			p->failed = true;
		p->q_head = (p->q_head + 1) % MFS_PUSH_Q;
		p->q_n--;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* ---- the job's thread ---- */

/* Waits until every item handed over is stored (or let go); true when
 * none failed. */
static bool idle(struct mfs_push *p)
{
	pthread_mutex_lock(&p->lock);
	while (p->q_n > 0)
		pthread_cond_wait(&p->cv, &p->lock);
	bool ok = !p->failed;
	pthread_mutex_unlock(&p->lock);
	return ok;
}

/* The carry pages and the push thread, once per job; false without
 * them. */
static bool thread_up(struct mfs_push *p)
{
	if (p->thread_on)
		return true;
	if (!p->carry_buf) {
		p->carry_buf =
		    mf_buf_alloc(MFS_PUSH_Q * p->page, &p->carry_cap);
		if (!p->carry_buf)
			return false;
		for (unsigned i = 0; i < MFS_PUSH_Q; i++)
			p->carry[i] = p->carry_buf + i * p->page;
	}
	p->thread_on = pthread_create(&p->thread, NULL, push_main, p) == 0;
	return p->thread_on;
}

/* Waits until queue slot tail is free (its carry page too); false when a
 * store failed. */
static bool room(struct mfs_push *p)
{
	pthread_mutex_lock(&p->lock);
	while (p->q_n == MFS_PUSH_Q && !p->failed)
		pthread_cond_wait(&p->cv, &p->lock);
	bool ok = !p->failed;
	pthread_mutex_unlock(&p->lock);
	return ok;
}

/* Hands len bytes at data, of chunk, to the push thread, once a slot is
 * free; false when a store failed. */
static bool hand_over(struct mfs_push *p, const uint8_t *data, size_t len,
		      uint32_t chunk)
{
	if (!room(p))
		return false;
	pthread_mutex_lock(&p->lock);
	p->q[p->tail] = (struct mfs_push_item){data, len, chunk};
	p->q_n++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->lock);
	p->tail = (p->tail + 1) % MFS_PUSH_Q;
	return true;
}

/* Hands the carry page over with its fill bytes (whole, or the file's
 * last page at the end). */
static bool hand_carry(struct mfs_push *p, uint32_t chunk)
{
	size_t n = p->fill;
	p->fill = 0;
	return hand_over(p, p->carry[p->tail], n, chunk);
}

/* Waits until no item handed over reads chunk `chunk` or one before it:
 * the engine reuses their memory once this returns. */
static void release(struct mfs_push *p, uint32_t chunk)
{
	pthread_mutex_lock(&p->lock);
	while (p->q_n > 0 && p->q[p->q_head].chunk <= chunk)
		pthread_cond_wait(&p->cv, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

/* Gives up the pages of the computation pushed, if any. */
static void unpush(struct mfs_push *p)
{
	(void)idle(p);
	if (p->gen == 0)
		return;
	node_end(p, false);
	if (p->bytes)
		inval(p, 0);
	p->gen = 0;
	p->bytes = 0;
	p->queued = 0;
	p->fill = 0;
	pthread_mutex_lock(&p->lock);
	p->failed = false;
	pthread_mutex_unlock(&p->lock);
	p->on = false;
	p->done = false;
}

/*
 * Records gen as the computation pushed into the node, when it has no
 * handle open (which would read another) and is not retired: opens of
 * another computation are then sent to a new inode (fh_open), and
 * getattr answers the bytes pushed. kept is cleared meanwhile.
 */
static bool node_begin(struct mfs_push *p, uint64_t gen)
{
	struct mfs *m = p->m;
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = mfs_node_get(m, p->ino);
	bool ok = n && !n->cur && !n->retired && !n->pushing;
	if (ok) {
		n->kept = 0;
		n->pushing = gen;
		n->pushed = 0;
	}
	pthread_mutex_unlock(&m->node_lock);
	return ok;
}

/* Chunk 0 of computation gen, of len bytes: pushing starts when the
 * node allows and the chunk fits the limit; the push thread and its
 * buffers only then. */
static void start(struct mfs_push *p, uint64_t gen, size_t len)
{
	unpush(p); /* an earlier computation on this thread */
	if (len > p->limit || !node_begin(p, gen))
		return;
	p->gen = gen;
	if (!thread_up(p)) {
		node_end(p, false);
		p->gen = 0;
		return;
	}
	p->next = 0;
	p->on = true;
	inval(p, 0); /* the kernel's pages of another computation */
}

/*
 * Hands a chunk's bytes over where they lie, in stores of whole pages of
 * at most MFS_PUSH_BUF: first the page the last chunk left partial, made
 * whole in its carry page, then the chunk's own whole pages, and its last
 * partial page goes to the carry page for the next chunk or the end. With
 * whole pages only, a push that stops (or a size that cuts the file
 * meanwhile) leaves whole pages or none.
 */
static bool push_pages(struct mfs_push *p, const uint8_t *data, size_t len,
		       uint32_t chunk)
{
	p->queued += len;
	if (p->fill) { /* room() was waited for when it began */
		size_t n = p->page - p->fill;
		n = n < len ? n : len;
		memcpy(p->carry[p->tail] + p->fill, data, n);
		p->fill += n;
		data += n;
		len -= n;
		if (p->fill < p->page)
			return true; /* a chunk smaller than the page's rest */
		if (!hand_carry(p, chunk))
			return false;
	}
	while (len >= p->page) {
		size_t n =
		    len < MFS_PUSH_BUF ? len - len % p->page : MFS_PUSH_BUF;
		if (!hand_over(p, data, n, chunk))
			return false;
		data += n;
		len -= n;
	}
	if (len == 0)
		return true;
	if (!room(p))
		return false;
	memcpy(p->carry[p->tail], data, len);
	p->fill = len;
	return true;
}

static bool push_data(struct mfs_push *p, const struct mf_chunk_event *ev)
{
	if (ev->index == 0)
		start(p, ev->generation, ev->len);
	if (!p->on || ev->generation != p->gen || ev->index != p->next ||
	    p->queued + ev->len > p->limit ||
	    !push_pages(p, ev->raw, ev->len, ev->index)) {
		p->on = false;
		return false;
	}
	p->next++;
	return true;
}

bool mfs_push_chunk(struct mfs *m, const struct mf_chunk_event *ev)
{
	struct mfs_push *p = cur;
	if (!p || p->m != m || p->shard != ev->shard ||
	    strcmp(p->fp, ev->fp) != 0)
		return false;
	switch (ev->kind) {
	case MF_CHUNK_DATA:
		return push_data(p, ev);
	case MF_CHUNK_SEALED:
	case MF_CHUNK_COMMITTED:
		if (ev->generation != p->gen)
			break;
		p->done = true;
		/* the last page, which ends the file */
		if (p->on && p->fill && !hand_carry(p, p->next))
			p->on = false;
		if (!idle(p))
			p->on = false;
		break;
	case MF_CHUNK_FAILED:
		if (ev->generation == p->gen)
			unpush(p);
		break;
	case MF_CHUNK_RELEASE: /* whatever it was: only ours read it */
		release(p, ev->index);
		break;
	}
	return false;
}

/* Stops the push thread and lets the carry pages go. */
static void thread_down(struct mfs_push *p)
{
	if (p->thread_on) {
		pthread_mutex_lock(&p->lock);
		p->stop = true;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
		p->thread_on = false;
	}
	mf_buf_free(p->carry_buf, p->carry_cap);
	p->carry_buf = NULL;
}

void mfs_push_end(struct mfs_push *p)
{
	cur = NULL;
	if (!p->done)
		unpush(p);
	thread_down(p);
	if (p->done) {
		node_end(p, true);
		/* the size the stores grew the inode to is the file's only
		 * when every chunk went in: the next stat asks */
		inval(p, -1);
	}
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->lock);
}
