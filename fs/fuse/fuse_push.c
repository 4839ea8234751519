/*
 * fuse_push.c - a computation's bytes put in the kernel's page cache of
 * the inode its opens wait on, as the stages write them.
 *
 * The first read of a cold shard would otherwise pay, after the stages,
 * for every page of the mount's cache it fills; put in while the stages
 * run (FUSE_NOTIFY_STORE), those pages cost the stages' time instead, on
 * the thread that reads their output, and the waiting readers read at
 * page-cache speed once their opens return (docs/performance.md).
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
 * Not for: answering opens (fuse_open.c) or the chunk cache
 * (fuse_cache.c), which takes the chunks not pushed.
 */
#include "fuse_i.h"

#include <errno.h>
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
	/* pages the carry cannot hold: not pushed */
	cur = m->o.no_push || p->page > MFS_PUSH_PAGE_MAX ? NULL : p;
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

/* Gives up the pages of the computation pushed, if any. */
static void unpush(struct mfs_push *p)
{
	if (p->gen == 0)
		return;
	node_end(p, false);
	if (p->bytes)
		inval(p, 0);
	p->gen = 0;
	p->bytes = 0;
	p->carry_len = 0;
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

/* Chunk 0 of computation gen: pushing starts when the node allows. */
static void start(struct mfs_push *p, uint64_t gen)
{
	unpush(p); /* an earlier computation on this thread */
	if (!node_begin(p, gen))
		return;
	p->gen = gen;
	p->next = 0;
	p->carry_len = 0;
	p->on = true;
	inval(p, 0); /* the kernel's pages of another computation */
}

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

/*
 * Pushes a chunk as whole pages: the carry completed first, then the
 * chunk's whole pages, its tail carried. A page stored in part would be
 * zero-filled by the kernel when it ends the file then; with whole pages
 * only, a push that stops (or a size that cuts the file meanwhile) leaves
 * whole pages or none.
 */
static bool push_pages(struct mfs_push *p, const uint8_t *data, size_t len)
{
	if (p->carry_len) {
		size_t n = p->page - p->carry_len;
		n = n < len ? n : len;
		memcpy(p->carry + p->carry_len, data, n);
		p->carry_len += n;
		data += n;
		len -= n;
		if (p->carry_len < p->page)
			return true;
		if (!store(p, p->carry, p->page))
			return false;
		p->carry_len = 0;
	}
	size_t whole = len - len % p->page;
	if (whole && !store(p, data, whole))
		return false;
	memcpy(p->carry, data + whole, len - whole);
	p->carry_len = len - whole;
	return true;
}

static bool push_data(struct mfs_push *p, const struct mf_chunk_event *ev)
{
	if (ev->index == 0)
		start(p, ev->generation);
	if (!p->on || ev->generation != p->gen || ev->index != p->next ||
	    p->bytes + p->carry_len + ev->len > p->limit ||
	    !push_pages(p, ev->raw, ev->len)) {
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
		if (p->on && p->carry_len && !store(p, p->carry, p->carry_len))
			p->on = false;
		p->carry_len = 0;
		break;
	case MF_CHUNK_FAILED:
		if (ev->generation == p->gen)
			unpush(p);
		break;
	}
	return false;
}

void mfs_push_end(struct mfs_push *p)
{
	cur = NULL;
	if (!p->done) {
		unpush(p);
		return;
	}
	node_end(p, true);
	/* the size the stores grew the inode to is the file's only when
	 * every chunk went in: the next stat asks */
	inval(p, -1);
}
