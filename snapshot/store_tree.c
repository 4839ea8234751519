/*
 * store_tree.c - listing and removing what the store folder holds:
 * fingerprints, runs and committed shards. Names that are not ours are
 * skipped when listing; removal walks folders with unlinkat relative to
 * descriptors and never follows a symlink (a planted link is unlinked, its
 * target left alone).
 *
 * Not for: deciding what to remove (the catalog and the engine do).
 */
#include "snapshot_i.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REMOVE_DEPTH_MAX 16 /* our tree is 2 deep; anything deeper is junk */

/* ---- listing ---- */

static int push_u32(uint32_t **v, size_t *n, size_t *cap, uint32_t x)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 16;
		uint32_t *p = realloc(*v, c * sizeof(*p));
		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = c;
	}
	(*v)[(*n)++] = x;
	return 0;
}

/* What a listing collects: names of one kind, or shard indexes. */
struct listing {
	enum mf_store_kind kind;
	struct mf_strv names; /* folders */
	uint32_t *idx; /* shards */
	size_t n, cap; /* of idx */
};

static int collect_name(void *arg, const struct mf_store_entry *e)
{
	struct listing *l = arg;
	if (e->kind != l->kind)
		return 0;
	if (l->kind == MF_STORE_SHARD)
		return push_u32(&l->idx, &l->n, &l->cap, e->shard);
	return mf_strv_push(&l->names, strdup(e->name));
}

/* The names of the folders of one kind under fp (NULL: the top). */
static int list_folders(struct mf_store *st, const char *fp,
			enum mf_store_kind kind, char ***out, size_t *n)
{
	struct listing l = {.kind = kind};
	int rc = mf_store_walk(st, fp, NULL, collect_name, &l);
	if (rc) {
		mf_strv_release(&l.names);
		return rc;
	}
	*out = l.names.v;
	*n = l.names.n;
	return 0;
}

int mf_store_list_snapshots(struct mf_store *st, char ***out, size_t *n)
{
	if (!st || !out || !n)
		return -EINVAL;
	return list_folders(st, NULL, MF_STORE_FP, out, n);
}

int mf_store_list_runs(struct mf_store *st, const char *fp, char ***out,
		       size_t *n)
{
	if (!out || !n || !fp)
		return -EINVAL;
	return list_folders(st, fp, MF_STORE_RUN, out, n);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

int mf_store_list_shards(struct mf_store *st, const char *fp,
			 const char *run_id, uint32_t **idx, size_t *n)
{
	if (!idx || !n || !run_id)
		return -EINVAL;
	struct listing l = {.kind = MF_STORE_SHARD};
	int rc = mf_store_walk(st, fp, run_id, collect_name, &l);
	if (rc) {
		free(l.idx);
		return rc;
	}
	if (l.n)
		qsort(l.idx, l.n, sizeof(*l.idx), cmp_u32);
	*idx = l.idx;
	*n = l.n;
	return 0;
}

/* ---- removing ---- */

struct tmp_removal {
	int runfd;
	uint32_t count;
	int failed;
};

static int remove_tmp(void *arg, const struct mf_store_entry *e)
{
	struct tmp_removal *t = arg;
	if (e->kind != MF_STORE_SHARD_TMP)
		return 0;
	if (unlinkat(t->runfd, e->name, 0) == 0)
		t->count++;
	else if (errno != ENOENT)
		t->failed = -errno;
	return 0;
}

int mf_store_tmp_remove(struct mf_store *st, const char *fp, const char *run_id,
			uint32_t *removed)
{
	struct tmp_removal t = {0};
	int rc = snap_open_run(st, fp, run_id, &t.runfd);
	if (rc)
		return rc;
	/* the folder walked is the one unlinked from */
	rc = snap_walk_run(t.runfd, fp, run_id, remove_tmp, &t);
	if (rc == 0)
		rc = t.failed;
	if (t.count && rc == 0)
		rc = mf_fsync_dir(t.runfd);
	close(t.runfd);
	if (removed)
		*removed = t.count;
	return rc;
}

static int remove_tree(int parent, const char *name, int depth);

/* Unlinks every entry of d once; sub-folders are emptied first. */
static int remove_entries(DIR *d, int depth)
{
	int rc = 0;
	struct dirent *de;
	while ((de = snap_next_entry(d, &rc)) != NULL) {
		if (unlinkat(dirfd(d), de->d_name, 0) == 0 || errno == ENOENT)
			continue;
		/* Linux answers EISDIR for a folder */
		if (errno != EISDIR)
			return -errno;
		rc = remove_tree(dirfd(d), de->d_name, depth + 1);
		if (rc && rc != -ENOENT)
			return rc;
	}
	return rc;
}

/* Removes folder name under parent with everything in it. */
static int remove_tree(int parent, const char *name, int depth)
{
	if (depth > REMOVE_DEPTH_MAX)
		return -ELOOP;
	DIR *d;
	int rc = snap_dir_open(parent, name, &d);
	if (rc)
		return rc;
	/* a second pass catches entries a concurrent writer added */
	for (int pass = 0; pass < 3; pass++) {
		rc = remove_entries(d, depth);
		if (rc)
			break;
		if (unlinkat(parent, name, AT_REMOVEDIR) == 0)
			break;
		rc = -errno;
		if (rc != -ENOTEMPTY && rc != -EEXIST)
			break;
		rewinddir(d);
	}
	closedir(d);
	return rc;
}

/* Removes folder name under parent, refusing anything but a folder. */
static int remove_folder(int parent, const char *name)
{
	int fd;
	int rc = snap_open_at(parent, name, true, &fd);
	if (rc)
		return rc;
	close(fd);
	rc = remove_tree(parent, name, 0);
	if (rc)
		return rc;
	return mf_fsync_dir(parent);
}

int mf_store_run_remove(struct mf_store *st, const char *fp, const char *run_id)
{
	if (!st || !run_id)
		return -EINVAL;
	int rc = snap_check_ids(fp, run_id);
	int fpfd;
	rc = rc ? rc : snap_open_fp(st, fp, &fpfd);
	if (rc)
		return rc;
	rc = remove_folder(fpfd, run_id);
	close(fpfd);
	return rc;
}

int mf_store_shard_remove(struct mf_store *st, const char *fp,
			  const char *run_id, uint32_t shard)
{
	int runfd;
	int rc = snap_open_run(st, fp, run_id, &runfd);
	if (rc)
		return rc;
	char name[SNAP_NAME_MAX];
	snap_shard_name(shard, ".mfs", name);
	if (unlinkat(runfd, name, 0) != 0)
		rc = -errno;
	else
		rc = mf_fsync_dir(runfd);
	close(runfd);
	return rc;
}

int mf_store_snapshot_remove(struct mf_store *st, const char *fp)
{
	int fpfd;
	int rc = snap_open_fp(st, fp, &fpfd);
	if (rc)
		return rc;
	/* metadata first: a removal cut short leaves a folder that is
	 * visibly garbage rather than a snapshot with holes */
	if (unlinkat(fpfd, SNAP_METADATA_NAME, 0) != 0 && errno != ENOENT)
		rc = -errno;
	else if (fsync(fpfd) != 0)
		rc = -errno;
	close(fpfd);
	if (rc)
		return rc;
	return remove_folder(st->snapfd, fp);
}
