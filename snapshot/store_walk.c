/*
 * store_walk.c - the store's names: walking one folder of the store with
 * each entry classified (fingerprint, metadata, run, shard, temp file or
 * stray), the store-relative path of each kind of entry, and lstat of one
 * entry through descriptors that never follow a symlink.
 *
 * Not for: deciding what an entry means to a catalog (the engine does), or
 * removing anything (store_tree.c).
 */
#include "snapshot_i.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define METADATA_TMP_PREFIX SNAP_METADATA_NAME ".tmp-"

int snap_dir_open(int parent, const char *name, DIR **out)
{
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
	*out = d;
	return 0;
}

struct dirent *snap_next_entry(DIR *d, int *rc)
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

bool snap_parse_shard_name(const char *name, const char *ext, uint32_t *out)
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
	snap_shard_name((uint32_t)v, ext, canon);
	if (p == name + 6 || strcmp(canon, name) != 0)
		return false;
	*out = (uint32_t)v;
	return true;
}

/* ---- naming ---- */

/* "snapshots/FP/RUN/NAME", each part only when given and not empty. */
static void rel_join(char *buf, size_t len, const char *fp, const char *run,
		     const char *name)
{
	const char *parts[] = {fp, run, name};
	int n = snprintf(buf, len, "snapshots");
	for (size_t i = 0; i < 3 && n >= 0 && (size_t)n < len; i++)
		if (parts[i] && parts[i][0])
			n +=
			    snprintf(buf + n, len - (size_t)n, "/%s", parts[i]);
}

void mf_store_rel(char *buf, size_t len, enum mf_store_kind kind,
		  const char *fp, const char *run, uint32_t shard)
{
	char name[SNAP_NAME_MAX];
	if (!len)
		return;
	switch (kind) {
	case MF_STORE_FP:
		rel_join(buf, len, fp, NULL, NULL);
		return;
	case MF_STORE_METADATA:
		rel_join(buf, len, fp, NULL, SNAP_METADATA_NAME);
		return;
	case MF_STORE_RUN:
		rel_join(buf, len, fp, run, NULL);
		return;
	case MF_STORE_SHARD:
	case MF_STORE_SHARD_TMP:
		snap_shard_name(shard, kind == MF_STORE_SHARD ? ".mfs" : ".tmp",
				name);
		rel_join(buf, len, fp, run, name);
		return;
	case MF_STORE_METADATA_TMP:
	case MF_STORE_STRAY:
		break;
	}
	buf[0] = '\0';
}

/* ---- lstat of one entry ---- */

/* The folder holding an entry of kind (to close when *owned) and the
 * entry's name in it (*name, maybe built in buf). */
static int parent_of(struct mf_store *st, enum mf_store_kind kind,
		     const char *fp, const char *run, uint32_t shard, int *dfd,
		     bool *owned, const char **name, char buf[SNAP_NAME_MAX])
{
	*owned = kind != MF_STORE_FP;
	switch (kind) {
	case MF_STORE_FP:
		*dfd = st->snapfd;
		*name = fp;
		return snap_check_ids(fp, NULL);
	case MF_STORE_METADATA:
		*name = SNAP_METADATA_NAME;
		return snap_open_fp(st, fp, dfd);
	case MF_STORE_RUN:
		if (!run || snap_check_ids(fp, run))
			return -EINVAL;
		*name = run;
		return snap_open_fp(st, fp, dfd);
	case MF_STORE_SHARD:
		snap_shard_name(shard, ".mfs", buf);
		*name = buf;
		return snap_open_run(st, fp, run, dfd);
	default:
		return -EINVAL;
	}
}

int mf_store_lstat(struct mf_store *st, enum mf_store_kind kind, const char *fp,
		   const char *run, uint32_t shard, struct stat *sb)
{
	if (!st || !sb)
		return -EINVAL;
	char buf[SNAP_NAME_MAX];
	const char *name;
	int dfd;
	bool owned;
	int rc = parent_of(st, kind, fp, run, shard, &dfd, &owned, &name, buf);
	if (rc)
		return rc;
	if (fstatat(dfd, name, sb, AT_SYMLINK_NOFOLLOW) != 0)
		rc = -errno;
	if (owned)
		close(dfd);
	return rc;
}

/* ---- walking one folder ---- */

enum level { AT_TOP, AT_FP, AT_RUN };

static enum mf_store_kind classify(enum level lv, const char *name, mode_t mode,
				   uint32_t *shard)
{
	bool reg = S_ISREG(mode), dir = S_ISDIR(mode);
	switch (lv) {
	case AT_TOP:
		if (dir && mf_is_hex(name, MF_FP_HEX_LEN))
			return MF_STORE_FP;
		break;
	case AT_FP:
		if (reg && strcmp(name, SNAP_METADATA_NAME) == 0)
			return MF_STORE_METADATA;
		if (reg &&
		    strncmp(name, METADATA_TMP_PREFIX,
			    sizeof(METADATA_TMP_PREFIX) - 1) == 0)
			return MF_STORE_METADATA_TMP;
		if (dir && mf_is_hex(name, MF_RUN_ID_HEX_LEN))
			return MF_STORE_RUN;
		break;
	case AT_RUN:
		if (reg && snap_parse_shard_name(name, ".mfs", shard))
			return MF_STORE_SHARD;
		if (reg && snap_parse_shard_name(name, ".tmp", shard))
			return MF_STORE_SHARD_TMP;
		break;
	}
	return MF_STORE_STRAY;
}

/* The entry's own type: from readdir when it says, else lstat. 1 when
 * the entry is gone. */
static int entry_mode(DIR *d, const struct dirent *de, mode_t *mode)
{
	if (de->d_type != DT_UNKNOWN) {
		*mode = DTTOIF(de->d_type);
		return 0;
	}
	struct stat sb;
	if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? 1 : -errno;
	*mode = sb.st_mode & S_IFMT;
	return 0;
}

static int walk_dir(int dfd, enum level lv, const char *fp, const char *run,
		    mf_store_walk_fn fn, void *arg)
{
	DIR *d;
	int rc = snap_dir_open(dfd, ".", &d);
	if (rc)
		return rc;
	char rel[MF_STORE_REL_MAX];
	struct mf_store_entry e = {.fp = fp ? fp : "", .run = run ? run : ""};
	struct dirent *de;
	while ((de = snap_next_entry(d, &rc)) != NULL) {
		e.shard = 0;
		rc = entry_mode(d, de, &e.mode);
		if (rc == 1)
			continue;
		if (rc)
			break;
		e.name = de->d_name;
		e.kind = classify(lv, e.name, e.mode, &e.shard);
		rel_join(rel, sizeof(rel), fp, run, e.name);
		e.rel = rel;
		rc = fn(arg, &e);
		if (rc)
			break;
	}
	closedir(d);
	return rc;
}

int snap_walk_run(int runfd, const char *fp, const char *run,
		  mf_store_walk_fn fn, void *arg)
{
	return walk_dir(runfd, AT_RUN, fp, run, fn, arg);
}

int mf_store_walk(struct mf_store *st, const char *fp, const char *run,
		  mf_store_walk_fn fn, void *arg)
{
	if (!st || !fn)
		return -EINVAL;
	if (!fp)
		return run ? -EINVAL
			   : walk_dir(st->snapfd, AT_TOP, NULL, NULL, fn, arg);
	int dfd;
	int rc =
	    run ? snap_open_run(st, fp, run, &dfd) : snap_open_fp(st, fp, &dfd);
	if (rc)
		return rc;
	rc = walk_dir(dfd, run ? AT_RUN : AT_FP, fp, run, fn, arg);
	close(dfd);
	return rc;
}
