/*
 * fuse_node.c - the shard inodes that carry state: their open handles'
 * data, opens waiting for a worker, and what the kernel caches of them
 * (fuse_open.c uses those fields). A node is created on the first open of
 * an inode and lives until the unmount.
 *
 * A shard removed (rm, rm -r, expiry) while handles are open on it keeps
 * its inode for those handles: fstat and mmap on them still see the size
 * of what they read, even once no spec yields the snapshot. Later lookups
 * of the shard answer a new inode number (MFS_INO_INC | counter), whose
 * node records which shard it is. The same happens when a lookup, or an
 * open, finds the shard computed anew by someone else (matctl rm, another
 * daemon) while handles are open on the old computation: the kernel keeps
 * one size and one page cache per inode, so two computations never share
 * one.
 *
 * Not for: the numbers of fingerprints and names (fuse_model.c).
 */
#include "fuse_i.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

static int nodes_grow(struct mfs *m)
{
	size_t cap = m->cap_nodes ? 2 * m->cap_nodes : 256;
	struct mfs_node **v = calloc(cap, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap_nodes; i++) {
		while (m->nodes[i]) {
			struct mfs_node *n = m->nodes[i];
			m->nodes[i] = n->next;
			n->next = v[n->ino % cap];
			v[n->ino % cap] = n;
		}
	}
	free(m->nodes);
	m->nodes = v;
	m->cap_nodes = cap;
	return 0;
}

/* Caller holds node_lock. */
static struct mfs_node *node_find(struct mfs *m, fuse_ino_t ino)
{
	assert(mf_mutex_held(&m->node_lock));
	if (m->cap_nodes == 0)
		return NULL;
	for (struct mfs_node *n = m->nodes[ino % m->cap_nodes]; n; n = n->next)
		if (n->ino == ino)
			return n;
	return NULL;
}

/* Caller holds node_lock. */
static struct mfs_node *node_add(struct mfs *m, fuse_ino_t ino, uint32_t id,
				 uint32_t k)
{
	assert(mf_mutex_held(&m->node_lock));
	if (m->n_nodes * 2 >= m->cap_nodes && nodes_grow(m) != 0)
		return NULL;
	struct mfs_node *n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->ino = ino;
	n->snap_id = id;
	n->shard = k;
	struct mfs_node **slot = &m->nodes[ino % m->cap_nodes];
	n->next = *slot;
	*slot = n;
	m->n_nodes++;
	return n;
}

struct mfs_node *mfs_node_get(struct mfs *m, fuse_ino_t ino)
{
	struct mfs_node *n = node_find(m, ino);
	if (n || (ino & MFS_INO_INC))
		return n; /* those are made by retire only */
	return node_add(m, ino, (uint32_t)(ino >> 32), (uint32_t)ino - 1);
}

fuse_ino_t mfs_shard_ino(struct mfs *m, uint32_t id, uint32_t k)
{
	fuse_ino_t base = mfs_ino_shard(id, k);
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = node_find(m, base);
	fuse_ino_t ino = n && n->live ? n->live : base;
	pthread_mutex_unlock(&m->node_lock);
	return ino;
}

int mfs_inc_decode(struct mfs *m, fuse_ino_t ino, uint32_t *id, uint32_t *k)
{
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = node_find(m, ino);
	if (n) {
		*id = n->snap_id;
		*k = n->shard;
	}
	pthread_mutex_unlock(&m->node_lock);
	return n ? 0 : -ENOENT;
}

/* Caller holds node_lock. */
static void retire_locked(struct mfs *m, uint32_t id, uint32_t k)
{
	assert(mf_mutex_held(&m->node_lock));
	struct mfs_node *base = mfs_node_get(m, mfs_ino_shard(id, k));
	if (!base)
		return;
	struct mfs_node *live = base->live ? node_find(m, base->live) : base;
	if (!live || (!live->cur && !live->pushing))
		return; /* the kernel drops an inode nobody holds */
	struct mfs_node *n = node_add(m, MFS_INO_INC | ++m->next_inc, id, k);
	if (!n)
		return; /* the handles then see the new state: still readable */
	live->retired = true;
	base->live = n->ino;
}

void mfs_node_retire_locked(struct mfs *m, struct mfs_node *n)
{
	if (!n->retired)
		retire_locked(m, n->snap_id, n->shard);
}

fuse_ino_t mfs_shard_ino_rec(struct mfs *m, uint32_t id, uint32_t k,
			     const struct mf_engine_shard *rec)
{
	/* running with the generation the handles read: this engine sealed
	 * it and commits it (serve_sealed), the same computation */
	uint64_t gen = mf_engine_shard_file_gen(rec);
	fuse_ino_t base = mfs_ino_shard(id, k);
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *b = node_find(m, base);
	struct mfs_node *live = b && b->live ? node_find(m, b->live) : b;
	/* a row read before the push's claim (absent, gen 0) names no
	 * other computation */
	if (live &&
	    ((live->cur && live->cur->gen != gen) ||
	     (live->pushing && gen && live->pushing != gen)))
		retire_locked(m, id, k); /* its pages are another's */
	fuse_ino_t ino = b && b->live ? b->live : base;
	pthread_mutex_unlock(&m->node_lock);
	return ino;
}

void mfs_shard_retire(struct mfs *m, uint32_t id, uint32_t k)
{
	pthread_mutex_lock(&m->node_lock);
	retire_locked(m, id, k);
	pthread_mutex_unlock(&m->node_lock);
}

void mfs_snap_retire(struct mfs *m, uint32_t id)
{
	pthread_mutex_lock(&m->node_lock);
	size_t n = 0;
	uint32_t *ks = malloc((m->n_nodes + 1) * sizeof(*ks));
	for (size_t i = 0; ks && i < m->cap_nodes; i++)
		for (struct mfs_node *x = m->nodes[i]; x; x = x->next)
			if (x->snap_id == id && !x->retired && x->cur)
				ks[n++] = x->shard;
	for (size_t i = 0; i < n; i++)
		retire_locked(m, id, ks[i]);
	pthread_mutex_unlock(&m->node_lock);
	free(ks);
}

bool mfs_node_pushed(struct mfs *m, fuse_ino_t ino, uint64_t gen,
		     uint64_t *bytes)
{
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = node_find(m, ino);
	bool ok = n && gen && n->pushing == gen;
	if (ok)
		*bytes = n->pushed;
	pthread_mutex_unlock(&m->node_lock);
	return ok;
}

bool mfs_node_held(struct mfs *m, fuse_ino_t ino, struct mf_engine_file *st,
		   int64_t *created)
{
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = node_find(m, ino);
	bool ok = n && n->cur;
	if (ok) {
		*st = n->cur->st;
		*created = n->cur->created;
	}
	pthread_mutex_unlock(&m->node_lock);
	return ok;
}

void mfs_nodes_release(struct mfs *m)
{
	for (size_t i = 0; i < m->cap_nodes; i++) {
		while (m->nodes[i]) {
			struct mfs_node *n = m->nodes[i];
			m->nodes[i] = n->next;
			mfs_data_put(m, n->cur);
			free(n);
		}
	}
	free(m->nodes);
	m->nodes = NULL;
}
