/*
 * fuse_ops.c - the FUSE requests that only look: init, lookup, forget,
 * getattr, readlink and statfs, plus the operation table and logging.
 *
 * None of them computes: they read the namespace (fuse_model.c) and the
 * catalog. Not for: directory listings (fuse_dir.c), opening and reading
 * (fuse_open.c), changes (fuse_write.c) or xattrs (fuse_xattr.c).
 */
#include "fuse_i.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#define ENTRY_TTL 1.0

void mfs_logf(struct mfs *m, int level, const char *fmt, ...)
{
	if (!m->o.log)
		return;
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	m->o.log(m->o.log_arg, level, buf);
}

const char *mfs_label(struct mfs *m, const char *fp, char *buf, size_t len)
{
	struct mfs_snap *s;
	struct mfs_snap_info si;
	if (mfs_snap_known(m, fp, &s, &si) == 0 && si.name[0])
		snprintf(buf, len, "%s (%.12s)", si.name, fp);
	else
		snprintf(buf, len, "%.12s", fp);
	return buf;
}

void mfs_op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	/* Symlink targets change only when a spec does, and the specs
	 * watcher then invalidates them: without this cache every path
	 * through a name costs a READLINK. */
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* the kernel's pages of a shard go only when told (an open without
	 * FOPEN_KEEP_CACHE, an invalidation): a size that changes, as a
	 * shard's being computed does while its pages are pushed
	 * (fuse_push.c), only cuts those beyond it */
	if (conn->capable & FUSE_CAP_EXPLICIT_INVAL_DATA) {
		conn->want |= FUSE_CAP_EXPLICIT_INVAL_DATA;
		conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	}
	/* a listing costs one catalog query with or without attributes:
	 * always send them, so ls -l needs no LOOKUP per shard */
	if (conn->capable & FUSE_CAP_READDIRPLUS) {
		conn->want |= FUSE_CAP_READDIRPLUS;
		conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	}
}

static int entry_root_child(struct mfs *m, const char *name,
			    struct fuse_entry_param *e)
{
	if (mf_is_hex(name, MF_FP_HEX_LEN)) {
		struct mfs_snap *s;
		struct mfs_snap_info si;
		int rc = mfs_snap_known(m, name, &s, &si);
		if (rc)
			return rc;
		mfs_attr_dir(m, &si, &e->attr);
		e->generation = si.gen;
		e->attr_timeout = MFS_ATTR_TTL;
	} else {
		struct mfs_link l;
		mfs_specs_resolved(m); /* a polled spec may have moved it */
		int rc = mfs_link_find(m, name, &l);
		if (rc)
			return rc;
		mfs_attr_link(m, &l, &e->attr);
		e->attr_timeout = MFS_ATTR_TTL;
	}
	e->ino = e->attr.st_ino;
	e->entry_timeout = ENTRY_TTL;
	return 0;
}

static int entry_shard(struct mfs *m, const struct mfs_snap_info *si,
		       const char *name, struct fuse_entry_param *e)
{
	uint32_t k;
	int rc = mfs_shard_parse(si, name, &k);
	if (rc)
		return rc;
	struct mf_engine_shard rec;
	rc = mfs_shard_rec(m, si->fp, k, &rec);
	if (rc < 0)
		return rc;
	const struct mf_engine_shard *r = rc == 0 ? &rec : NULL;
	e->attr_timeout = mfs_attr_shard(m, mfs_shard_ino_rec(m, si->id, k, r),
					 si, r, &e->attr);
	if (rc == 0)
		mf_engine_shard_release(&rec);
	e->ino = e->attr.st_ino;
	e->entry_timeout = ENTRY_TTL;
	return 0;
}

int mfs_entry(struct mfs *m, fuse_req_t req, fuse_ino_t parent,
	      const char *name, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	struct mfs_inode in;
	int rc = mfs_inode_decode(m, parent, &in);
	if (rc)
		return rc;
	switch (in.kind) {
	case MFS_ROOT:
		return entry_root_child(m, name, e);
	case MFS_DIR:
		if (strcmp(name, "batches") == 0)
			return mfs_btree_entry(m, req, parent, &in, name, e);
		return entry_shard(m, &in.si, name, e);
	case MFS_BDIR:
		return mfs_btree_entry(m, req, parent, &in, name, e);
	default:
		return -ENOTDIR;
	}
}

void mfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mfs *m = fuse_req_userdata(req);
	struct fuse_entry_param e;
	int rc = mfs_entry(m, req, parent, name, &e);
	if (rc)
		fuse_reply_err(req, -rc);
	else if (fuse_reply_entry(req, &e) != 0 && mfs_ino_is_batch(e.ino))
		mfs_btree_forget(m, e.ino, 1); /* the kernel never got it */
}

/* Inodes are computed, so the kernel's references need no bookkeeping,
 * but for the batch tree's folders (fuse_btree.c). */
void mfs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	if (mfs_ino_is_batch(ino))
		mfs_btree_forget(fuse_req_userdata(req), ino, nlookup);
	fuse_reply_none(req);
}

void mfs_op_forget_multi(fuse_req_t req, size_t count,
			 struct fuse_forget_data *forgets)
{
	struct mfs *m = fuse_req_userdata(req);
	for (size_t i = 0; i < count; i++)
		if (mfs_ino_is_batch(forgets[i].ino))
			mfs_btree_forget(m, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

/* The attributes of a shard inode from what handles open on it read: the
 * size of their file, whatever the catalog and the specs say by now (it
 * expired, was computed anew, or no spec yields it any more). */
static void attr_held(struct mfs *m, fuse_ino_t ino,
		      const struct mf_engine_file *ss, int64_t created,
		      struct stat *st)
{
	struct mfs_snap_info si = {.created = created};
	(void)mfs_attr_shard(m, ino, &si, NULL, st);
	st->st_size = (off_t)ss->raw_bytes;
	st->st_blocks = (blkcnt_t)((ss->stored_bytes + 511) / 512);
}

/* The attributes of any inode and how long the kernel may keep them;
 * fh is the handle of an open shard, or 0. An inode with handles open
 * answers from them before anything else: its snapshot may be unknown by
 * now, and fstat on those handles must keep working. */
static int inode_attr(struct mfs *m, fuse_ino_t ino, uint64_t fh,
		      struct stat *st, double *ttl)
{
	struct mf_engine_file ss;
	int64_t created;
	*ttl = MFS_ATTR_TTL;
	if (mfs_ino_is_batch(ino))
		return mfs_btree_attr(m, ino, fh, st, ttl);
	if (fh) {
		const struct mfs_data *d = mfs_fh_data(fh);
		attr_held(m, ino, &d->st, d->created, st);
		return 0;
	}
	if (mfs_node_held(m, ino, &ss, &created)) {
		attr_held(m, ino, &ss, created, st);
		return 0;
	}
	struct mfs_inode in;
	int rc = mfs_inode_decode(m, ino, &in);
	if (rc)
		return rc;
	switch (in.kind) {
	case MFS_ROOT:
		mfs_attr_root(m, st);
		return 0;
	case MFS_DIR:
		mfs_attr_dir(m, &in.si, st);
		return 0;
	case MFS_LINK:
		mfs_attr_link(m, &in.link, st);
		return 0;
	case MFS_SHARD:
		break;
	case MFS_BDIR:
	case MFS_BFILE:
		return -ENOENT; /* decoded above */
	}
	struct mf_engine_shard rec;
	rc = mfs_shard_rec(m, in.si.fp, in.shard, &rec);
	if (rc < 0)
		return rc;
	*ttl = mfs_attr_shard(m, ino, &in.si, rc == 0 ? &rec : NULL, st);
	if (rc == 0)
		mf_engine_shard_release(&rec);
	return 0;
}

void mfs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mfs *m = fuse_req_userdata(req);
	struct stat st;
	double ttl;
	int rc = inode_attr(m, ino, fi ? fi->fh : 0, &st, &ttl);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, ttl);
}

/* A name's target is its fingerprint directory beside it: relative,
 * never absolute, never "..". */
void mfs_op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_inode in;
	int rc = mfs_inode_decode(m, ino, &in);
	if (rc == 0 && in.kind != MFS_LINK)
		rc = -EINVAL;
	if (rc == 0)
		mfs_specs_resolved(m);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_readlink(req, in.link.fp);
}

void mfs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct mfs *m = fuse_req_userdata(req);
	struct statvfs sv;
	if (statvfs(m->o.store_dir, &sv) != 0)
		memset(&sv, 0, sizeof(sv));
	sv.f_namemax = NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ops = {
    .init = mfs_op_init,
    .lookup = mfs_op_lookup,
    .forget = mfs_op_forget,
    .forget_multi = mfs_op_forget_multi,
    .getattr = mfs_op_getattr,
    .setattr = mfs_op_setattr,
    .readlink = mfs_op_readlink,
    .mknod = mfs_op_mknod,
    .mkdir = mfs_op_mkdir,
    .unlink = mfs_op_unlink,
    .rmdir = mfs_op_rmdir,
    .symlink = mfs_op_symlink,
    .rename = mfs_op_rename,
    .link = mfs_op_link,
    .open = mfs_op_open,
    .read = mfs_op_read,
    .write = mfs_op_write,
    .release = mfs_op_release,
    .opendir = mfs_op_opendir,
    .readdir = mfs_op_readdir,
    .readdirplus = mfs_op_readdirplus,
    .releasedir = mfs_op_releasedir,
    .statfs = mfs_op_statfs,
    .setxattr = mfs_op_setxattr,
    .getxattr = mfs_op_getxattr,
    .listxattr = mfs_op_listxattr,
    .removexattr = mfs_op_removexattr,
    .create = mfs_op_create,
    .access = mfs_op_access,
};

const struct fuse_lowlevel_ops *mfs_ops(void)
{
	return &ops;
}
