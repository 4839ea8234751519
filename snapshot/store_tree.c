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

/* A DIR stream over a fresh descriptor of dirfd; caller closedirs. */
static int dir_stream(int dirfd, DIR **out)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	*out = d;
	return 0;
}

/* Next entry other than . and ..; NULL at the end (*rc = 0) or on error. */
static struct dirent *next_entry(DIR *d, int *rc)
{
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			*rc = -errno;
			return NULL;
		}
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, ".."))
			return de;
	}
}

/* True when the entry is a real directory (want_dir) or regular file. */
static bool entry_is(DIR *d, const struct dirent *de, bool want_dir)
{
	if (de->d_type != DT_UNKNOWN)
		return de->d_type == (want_dir ? DT_DIR : DT_REG);
	struct stat sb;
	if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
		return false;
	return want_dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode);
}

/* ---- listing ---- */

/* Lists the sub-folders of dirfd named by hexlen lowercase hex digits. */
static int list_hex_dirs(int dirfd, size_t hexlen, char ***out, size_t *n)
{
	DIR *d;
	int rc = dir_stream(dirfd, &d);
	if (rc)
		return rc;
	struct mf_strv v = {0};
	struct dirent *de;
	while ((de = next_entry(d, &rc)) != NULL) {
		if (!mf_is_hex(de->d_name, hexlen) || !entry_is(d, de, true))
			continue;
		rc = mf_strv_push(&v, strdup(de->d_name));
		if (rc)
			break;
	}
	closedir(d);
	if (rc) {
		mf_strv_release(&v);
		return rc;
	}
	*out = v.v;
	*n = v.n;
	return 0;
}

int mf_store_list_snapshots(struct mf_store *st, char ***out, size_t *n)
{
	if (!st || !out || !n)
		return -EINVAL;
	return list_hex_dirs(st->snapfd, MF_FP_HEX_LEN, out, n);
}

int mf_store_list_runs(struct mf_store *st, const char *fp, char ***out,
		       size_t *n)
{
	if (!out || !n)
		return -EINVAL;
	int fpfd;
	int rc = snap_open_fp(st, fp, &fpfd);
	if (rc)
		return rc;
	rc = list_hex_dirs(fpfd, MF_RUN_ID_HEX_LEN, out, n);
	close(fpfd);
	return rc;
}

/* Parses exactly the name snap_shard_name(i, ".mfs") writes. */
static bool parse_shard_name(const char *name, uint32_t *out)
{
	if (strncmp(name, "shard-", 6) != 0)
		return false;
	uint64_t v = 0;
	const char *p = name + 6;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (uint64_t)(*p - '0');
		if (v > UINT32_MAX)
			return false;
	}
	char canon[SNAP_NAME_MAX];
	snap_shard_name((uint32_t)v, ".mfs", canon);
	if (p == name + 6 || strcmp(canon, name) != 0)
		return false;
	*out = (uint32_t)v;
	return true;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

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

static int list_shards_at(int runfd, uint32_t **idx, size_t *n)
{
	DIR *d;
	int rc = dir_stream(runfd, &d);
	if (rc)
		return rc;
	uint32_t *v = NULL, x;
	size_t len = 0, cap = 0;
	struct dirent *de;
	while ((de = next_entry(d, &rc)) != NULL) {
		if (!parse_shard_name(de->d_name, &x) ||
		    !entry_is(d, de, false))
			continue;
		rc = push_u32(&v, &len, &cap, x);
		if (rc)
			break;
	}
	closedir(d);
	if (rc) {
		free(v);
		return rc;
	}
	if (len)
		qsort(v, len, sizeof(*v), cmp_u32);
	*idx = v;
	*n = len;
	return 0;
}

int mf_store_list_shards(struct mf_store *st, const char *fp,
			 const char *run_id, uint32_t **idx, size_t *n)
{
	if (!idx || !n)
		return -EINVAL;
	int runfd;
	int rc = snap_open_run(st, fp, run_id, &runfd);
	if (rc)
		return rc;
	rc = list_shards_at(runfd, idx, n);
	close(runfd);
	return rc;
}

/* ---- removing ---- */

static bool is_shard_tmp(const char *name)
{
	size_t n = strlen(name);
	return strncmp(name, "shard-", 6) == 0 && n > 10 &&
	    strcmp(name + n - 4, ".tmp") == 0;
}

int mf_store_tmp_remove(struct mf_store *st, const char *fp, const char *run_id,
			uint32_t *removed)
{
	int runfd;
	int rc = snap_open_run(st, fp, run_id, &runfd);
	if (rc)
		return rc;
	DIR *d;
	rc = dir_stream(runfd, &d);
	if (rc) {
		close(runfd);
		return rc;
	}
	uint32_t count = 0;
	int failed = 0;
	struct dirent *de;
	while ((de = next_entry(d, &rc)) != NULL) {
		if (!is_shard_tmp(de->d_name) || !entry_is(d, de, false))
			continue;
		if (unlinkat(runfd, de->d_name, 0) == 0)
			count++;
		else if (errno != ENOENT)
			failed = -errno;
	}
	closedir(d);
	if (rc == 0)
		rc = failed;
	if (count && rc == 0)
		rc = mf_fsync_dir(runfd);
	close(runfd);
	if (removed)
		*removed = count;
	return rc;
}

static int remove_tree(int parent, const char *name, int depth);

/* Unlinks every entry of d once; sub-folders are emptied first. */
static int remove_entries(DIR *d, int depth)
{
	int rc = 0;
	struct dirent *de;
	while ((de = next_entry(d, &rc)) != NULL) {
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
	int fd = openat(parent, name,
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	int rc;
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
	if (unlinkat(fpfd, "snapshot.metadata", 0) != 0 && errno != ENOENT)
		rc = -errno;
	else if (fsync(fpfd) != 0)
		rc = -errno;
	close(fpfd);
	if (rc)
		return rc;
	return remove_folder(st->snapfd, fp);
}
