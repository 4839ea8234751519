/*
 * fuse_write.c - every request that would change the tree. Two are
 * meaningful: unlink of a shard expires it and rmdir of a snapshot
 * directory expires the snapshot (so `rm` and `rm -r` work); open
 * descriptors keep reading, because the engine's readers hold their files.
 *
 * Everything else is refused, the same way whatever the mount options:
 *   mkdir, mknod, create, symlink, link, rename     EROFS (the tree comes
 *                                                   from specs and the store)
 *   truncate (setattr of the size)                  EACCES (r--r--r--)
 *   chmod, chown, utimes, rm of a name's symlink    EPERM
 *   a name longer than 255 bytes                    ENAMETOOLONG, first
 * Opening for writing is refused with EACCES in fuse_open.c.
 *
 * Not for: reading anything (fuse_ops.c, fuse_open.c).
 */
#include "fuse_i.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

static int name_check(const char *name)
{
	return strlen(name) > NAME_MAX ? -ENAMETOOLONG : 0;
}

static int unlink_in_root(struct mfs *m, const char *name)
{
	struct mfs_link l;
	if (mfs_link_find(m, name, &l) == 0)
		return -EPERM; /* remove the spec to remove its name */
	struct mfs_snap *s;
	struct mfs_snap_info si;
	if (mfs_snap_known(m, name, &s, &si) == 0)
		return -EISDIR;
	return -ENOENT;
}

static int unlink_shard(struct mfs *m, const struct mfs_snap_info *si,
			const char *name)
{
	uint32_t k;
	int rc = mfs_shard_parse(si, name, &k);
	if (rc)
		return rc;
	rc = mf_engine_expire_shard(m->eng, si->fp, k);
	if (rc == -ENOENT) /* no catalog row: nothing was materialized */
		rc = 0;
	if (rc)
		return rc;
	mfs_shard_retire(m, si->id, k);
	mfs_logf(m, MFS_LOG_INFO, "expired shard %u of %.12s%s%s%s", k, si->fp,
		 si->name[0] ? " (" : "", si->name, si->name[0] ? ")" : "");
	return 0;
}

void mfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_inode in;
	int rc = name_check(name);
	if (rc == 0)
		rc = mfs_inode_decode(m, parent, &in);
	if (rc == 0 && in.kind == MFS_ROOT)
		rc = unlink_in_root(m, name);
	else if (rc == 0 && in.kind == MFS_DIR)
		rc = unlink_shard(m, &in.si, name);
	else if (rc == 0 && in.kind == MFS_BDIR)
		rc = -EPERM; /* the batch tree is computed, never removed */
	else if (rc == 0)
		rc = -ENOTDIR;
	fuse_reply_err(req, -rc);
}

static int rmdir_snapshot(struct mfs *m, const char *name)
{
	struct mfs_link l;
	struct mfs_snap *s;
	struct mfs_snap_info si;
	if (mfs_link_find(m, name, &l) == 0)
		return -ENOTDIR;
	if (mfs_snap_known(m, name, &s, &si))
		return -ENOENT;
	int rc = mf_engine_expire_snapshot(m->eng, si.fp);
	if (rc == -ENOENT)
		rc = 0;
	if (rc)
		return rc;
	/* the kernel marks the removed directory's inode dead: a listing of
	 * the same fingerprint needs a new inode, hence a new generation */
	mfs_snap_forget(m, s, true);
	mfs_snap_retire(m, si.id);
	mfs_logf(m, MFS_LOG_INFO, "expired snapshot %.12s%s%s", si.fp,
		 si.name[0] ? " of " : "", si.name);
	return 0;
}

void mfs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_inode in;
	int rc = name_check(name);
	if (rc == 0)
		rc = mfs_inode_decode(m, parent, &in);
	if (rc == 0 && in.kind == MFS_ROOT) {
		rc = rmdir_snapshot(m, name);
	} else if (rc == 0 && in.kind == MFS_DIR) {
		uint32_t k;
		rc = mfs_shard_parse(&in.si, name, &k) == 0 ? -ENOTDIR
		    : strcmp(name, "batches") == 0 &&
			mfs_btree_has(m, in.si.fp) == 1
		    ? -EPERM
		    : -ENOENT;
	} else if (rc == 0 && in.kind == MFS_BDIR) {
		rc = -EPERM;
	} else if (rc == 0) {
		rc = -ENOTDIR;
	}
	fuse_reply_err(req, -rc);
}

static void refuse(fuse_req_t req, const char *name, int err)
{
	int rc = name ? name_check(name) : 0;
	fuse_reply_err(req, rc ? -rc : err);
}

void mfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		  mode_t mode)
{
	(void)parent;
	(void)mode;
	refuse(req, name, EROFS);
}

void mfs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		  mode_t mode, dev_t rdev)
{
	(void)parent;
	(void)mode;
	(void)rdev;
	refuse(req, name, EROFS);
}

void mfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		   mode_t mode, struct fuse_file_info *fi)
{
	(void)parent;
	(void)mode;
	(void)fi;
	refuse(req, name, EROFS);
}

void mfs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		    const char *name)
{
	(void)link;
	(void)parent;
	refuse(req, name, EROFS);
}

void mfs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		 const char *newname)
{
	(void)ino;
	(void)newparent;
	refuse(req, newname, EROFS);
}

void mfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		   fuse_ino_t newparent, const char *newname,
		   unsigned int flags)
{
	(void)parent;
	(void)newparent;
	(void)flags;
	int rc = name_check(name);
	refuse(req, rc ? name : newname, EROFS);
}

void mfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		    int to_set, struct fuse_file_info *fi)
{
	(void)ino;
	(void)attr;
	(void)fi;
	fuse_reply_err(req, (to_set & FUSE_SET_ATTR_SIZE) ? EACCES : EPERM);
}

/* access(2) answers as the modes say: shards and names are never
 * writable; directories are (rm, rm -r), without default_permissions. */
void mfs_op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_inode in;
	int rc = mfs_inode_decode(m, ino, &in);
	if (rc == 0 && (in.kind == MFS_SHARD || in.kind == MFS_BFILE) &&
	    (mask & (W_OK | X_OK)))
		rc = -EACCES;
	if (rc == 0 && in.kind == MFS_BDIR && (mask & W_OK))
		rc = -EACCES; /* computed folders (r-x) */
	fuse_reply_err(req, -rc);
}

void mfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		  off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	(void)buf;
	(void)size;
	(void)off;
	(void)fi;
	fuse_reply_err(req, EBADF); /* no handle is ever open for writing */
}
