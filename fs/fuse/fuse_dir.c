/*
 * fuse_dir.c - directory listings. opendir takes a picture of the
 * directory (the root: every fingerprint of the catalog and of the
 * registered specs, every pipeline name; a snapshot: every shard with its
 * catalog row), readdir and readdirplus serve it by offset, releasedir
 * frees it. One catalog query per listing, however many entries, so
 * `ls -l` of 10,000 shards costs one query.
 *
 * A listing is served in many READDIRPLUS replies, each newer to the
 * kernel than any invalidation before its request, so attributes taken at
 * opendir would overwrite what an open told the kernel since (a size 0
 * truncating the pages of a shard just computed). Once any shard's
 * attributes were invalidated after opendir (mfs.attr_epoch), shard
 * entries go without attributes and the kernel asks for them itself.
 *
 * Not for: lookups of single names (fuse_ops.c). Never computes.
 */
#include "fuse_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_batchpath.h"

struct dent {
	char name[MF_FP_HEX_LEN + 8]; /* longest: a fingerprint */
	struct stat st;
	double ttl;
	uint64_t gen;
	bool shard; /* attributes that an open may make stale */
};

struct mfs_listing {
	struct mfs_listing *prev, *next; /* in mfs.dirs, under node_lock */
	size_t n, cap;
	struct dent *v;
	uint64_t epoch; /* mfs.attr_epoch before the catalog was read */
	uid_t uid; /* the opener's, counted by mfs_user_take */
	size_t bytes; /* counted by mfs_user_take_bytes once built */
	/* a folder of the batch tree: after the entries above, its batch
	 * files 0 to batches - 1, named as they are read (no memory per
	 * batch), their inodes computed from the folder's */
	uint64_t batches;
	fuse_ino_t bdir;
};

/* Unlinks l from the open handles, where it is. */
static void listing_unlink(struct mfs *m, struct mfs_listing *l)
{
	pthread_mutex_lock(&m->node_lock);
	if (l->prev)
		l->prev->next = l->next;
	else if (m->dirs == l)
		m->dirs = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = l->next = NULL;
	pthread_mutex_unlock(&m->node_lock);
}

static void listing_free(struct mfs *m, struct mfs_listing *l)
{
	listing_unlink(m, l);
	mfs_user_give(m, l->uid, MFS_HANDLE_DIR);
	if (l->bytes)
		mfs_user_give_bytes(m, l->uid, l->bytes);
	free(l->v);
	free(l);
}

static struct dent *dent_add(struct mfs_listing *l, const char *name)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 32;
		void *p = realloc(l->v, cap * sizeof(*l->v));
		if (!p)
			return NULL;
		l->v = p;
		l->cap = cap;
	}
	struct dent *d = &l->v[l->n++];
	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "%s", name);
	return d;
}

static int dots(struct mfs *m, struct mfs_listing *l, const struct stat *self)
{
	struct dent *d = dent_add(l, ".");
	if (!d)
		return -ENOMEM;
	d->st = *self;
	if (!(d = dent_add(l, "..")))
		return -ENOMEM;
	mfs_attr_root(m, &d->st);
	return 0;
}

static int add_snap(struct mfs *m, struct mfs_listing *l, struct mfs_snap *s)
{
	struct mfs_snap_info si;
	if (mfs_snap_info(m, s, &si) != 0)
		return 0; /* gone meanwhile */
	for (size_t i = 2; i < l->n; i++)
		if (strcmp(l->v[i].name, si.fp) == 0)
			return 0;
	struct dent *d = dent_add(l, si.fp);
	if (!d)
		return -ENOMEM;
	mfs_attr_dir(m, &si, &d->st);
	d->ttl = MFS_ATTR_TTL;
	d->gen = si.gen;
	return 0;
}

/* Fingerprints the catalog knows, with their rows. */
static int root_catalog(struct mfs *m, struct mfs_listing *l)
{
	struct mf_engine_snapshot *recs;
	size_t n;
	int rc = mf_engine_list_snapshots(m->eng, &recs, &n);
	if (rc)
		return rc;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct mfs_snap *s;
		if (mfs_snap_get(m, recs[i].fp, &s) == 0) {
			mfs_snap_from_rec(m, s, &recs[i]);
			rc = add_snap(m, l, s);
		}
	}
	mf_engine_snapshot_recs_free(recs, n);
	return rc;
}

static int root_links(struct mfs *m, struct mfs_listing *l)
{
	pthread_mutex_lock(&m->ns_lock);
	size_t n = m->n_links;
	struct mfs_link *v = malloc((n ? n : 1) * sizeof(*v));
	if (v)
		memcpy(v, m->links, n * sizeof(*v));
	pthread_mutex_unlock(&m->ns_lock);
	if (!v)
		return -ENOMEM;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (!v[i].present)
			continue;
		struct dent *d = dent_add(l, v[i].name);
		if (!d)
			rc = -ENOMEM;
		else
			mfs_attr_link(m, &v[i], &d->st);
		if (d)
			d->ttl = MFS_ATTR_TTL;
	}
	free(v);
	return rc;
}

static int list_root(struct mfs *m, struct mfs_listing *l)
{
	struct stat self;
	mfs_attr_root(m, &self);
	int rc = dots(m, l, &self);
	if (rc == 0)
		rc = root_catalog(m, l);
	struct mfs_snap **reg;
	size_t n;
	if (rc == 0)
		rc = mfs_snaps_registered(m, &reg, &n);
	if (rc == 0) {
		for (size_t i = 0; rc == 0 && i < n; i++)
			rc = add_snap(m, l, reg[i]);
		free(reg);
	}
	return rc ? rc : root_links(m, l);
}

static int list_snapshot(struct mfs *m, const struct mfs_snap_info *si,
			 struct mfs_listing *l)
{
	struct stat self;
	mfs_attr_dir(m, si, &self);
	l->epoch = atomic_load(&m->attr_epoch);
	int rc = dots(m, l, &self);
	struct mf_engine_shard *recs = NULL;
	size_t n = 0;
	if (rc)
		return rc;
	rc = mf_engine_list_shards(m->eng, si->fp, &recs, &n);
	if (rc == -ENOENT)
		rc = 0;
	if (rc)
		return rc;
	size_t j = 0;
	for (uint32_t k = 0; rc == 0 && k < si->shards; k++) {
		char name[sizeof(((struct dent *)0)->name)];
		while (j < n && recs[j].index < k)
			j++;
		const struct mf_engine_shard *rec =
		    j < n && recs[j].index == k ? &recs[j] : NULL;
		struct dent *d = NULL;
		rc = mfs_shard_name(si, k, name, sizeof(name));
		if (rc == 0 && !(d = dent_add(l, name)))
			rc = -ENOMEM;
		if (d) {
			d->ttl = mfs_attr_shard(
			    m, mfs_shard_ino_rec(m, si->id, k, rec), si, rec,
			    &d->st);
			d->shard = true;
		}
	}
	mf_engine_shard_recs_free(recs, n);
	return rc;
}

/* A folder of the batch tree: an epoch's or a rank's lists the batches
 * placed so far (a prefix in whole rounds, all of them once every shard
 * is materialized); the others list nothing (any B, seed or epoch is
 * there to look up). */
static int list_bdir(struct mfs *m, fuse_ino_t ino, const struct mfs_inode *in,
		     struct mfs_listing *l)
{
	struct stat self;
	double ttl;
	int rc = mfs_btree_attr(m, ino, 0, &self, &ttl);
	if (rc == 0)
		rc = dots(m, l, &self);
	if (rc || in->bkey.level < MFS_BL_EPOCH)
		return rc;
	bool complete;
	char *err = NULL;
	rc = mf_engine_batch_count(m->eng, in->si.fp, &in->bkey.v, &l->batches,
				   &complete, &err);
	free(err);
	if (rc == -ENOTSUP) { /* a framing not served: nothing to list */
		l->batches = 0;
		rc = 0;
	}
	if (l->batches > MFS_BT_FILE_MAX)
		l->batches = MFS_BT_FILE_MAX;
	l->bdir = ino;
	return rc;
}

void mfs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_inode in;
	uid_t uid = mfs_reader_uid(fuse_req_ctx(req)->uid);
	int rc = mfs_user_take(m, uid, MFS_HANDLE_DIR);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	struct mfs_listing *l = calloc(1, sizeof(*l));
	rc = l ? mfs_inode_decode(m, ino, &in) : -ENOMEM;
	if (l)
		l->uid = uid;
	if (rc == 0 && in.kind == MFS_ROOT)
		rc = list_root(m, l);
	else if (rc == 0 && in.kind == MFS_DIR)
		rc = list_snapshot(m, &in.si, l);
	else if (rc == 0 && in.kind == MFS_BDIR)
		rc = list_bdir(m, ino, &in, l);
	else if (rc == 0)
		rc = -ENOTDIR;
	size_t bytes = l ? sizeof(*l) + l->cap * sizeof(*l->v) : 0;
	if (rc == 0 && (rc = mfs_user_take_bytes(m, uid, bytes)) == 0)
		l->bytes = bytes;
	if (rc) {
		if (l)
			listing_free(m, l);
		else
			mfs_user_give(m, uid, MFS_HANDLE_DIR);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)l;
	pthread_mutex_lock(&m->node_lock);
	l->next = m->dirs;
	if (m->dirs)
		m->dirs->prev = l;
	m->dirs = l;
	pthread_mutex_unlock(&m->node_lock);
	if (fuse_reply_open(req, fi) != 0) /* no release will come */
		listing_free(m, l);
}

void mfs_dirs_release(struct mfs *m)
{
	for (;;) {
		pthread_mutex_lock(&m->node_lock);
		struct mfs_listing *l = m->dirs;
		pthread_mutex_unlock(&m->node_lock);
		if (!l)
			return;
		listing_free(m, l);
	}
}

static void reply_listing(fuse_req_t req, size_t size, off_t off,
			  struct fuse_file_info *fi, bool plus)
{
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_listing *l = (struct mfs_listing *)(uintptr_t)fi->fh;
	/* read after the kernel took this request's attr_version */
	bool stale = atomic_load(&m->attr_epoch) != l->epoch;
	char *buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0;
	bool full = false;
	for (size_t i = (size_t)off; off >= 0 && i < l->n; i++) {
		struct dent *d = &l->v[i];
		size_t left = size - used, want;
		if (plus) {
			/* ino 0: a name only, the kernel links nothing */
			struct fuse_entry_param e = {
			    .ino = d->shard && stale ? 0 : d->st.st_ino,
			    .generation = d->gen,
			    .attr = d->st,
			    .attr_timeout = d->ttl,
			    .entry_timeout = 1.0,
			};
			want = fuse_add_direntry_plus(
			    req, buf + used, left, d->name, &e, (off_t)(i + 1));
		} else {
			want = fuse_add_direntry(req, buf + used, left, d->name,
						 &d->st, (off_t)(i + 1));
		}
		if (want > left) {
			full = true;
			break;
		}
		used += want;
	}
	/* then the batch files, past the entries */
	uint64_t end = (uint64_t)l->n + l->batches;
	for (uint64_t i = off > (off_t)l->n ? (uint64_t)off : l->n;
	     off >= 0 && !full && i < end; i++) {
		char name[32];
		uint64_t k = i - l->n;
		struct stat st = {.st_mode = S_IFREG | 0444,
				  .st_ino = mfs_btree_file_ino(l->bdir, k)};
		size_t left = size - used, want;
		(void)mfs_batch_name(k, name, sizeof(name));
		if (plus) {
			/* names only: sizes are looked up */
			struct fuse_entry_param e = {.attr = st};
			want = fuse_add_direntry_plus(req, buf + used, left,
						      name, &e, (off_t)(i + 1));
		} else {
			want = fuse_add_direntry(req, buf + used, left, name,
						 &st, (off_t)(i + 1));
		}
		if (want > left)
			break;
		used += want;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

void mfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)ino;
	reply_listing(req, size, off, fi, false);
}

void mfs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	(void)ino;
	reply_listing(req, size, off, fi, true);
}

void mfs_op_releasedir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	(void)ino;
	struct mfs_listing *l = (struct mfs_listing *)(uintptr_t)fi->fh;
	if (l)
		listing_free(fuse_req_userdata(req), l);
	fuse_reply_err(req, 0);
}
