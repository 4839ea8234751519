/*
 * store_shared.c - where the data of a shard fingerprint was last
 * committed: STORE/shared/SFP, a one-line file "FP SHARD RUN OWNER\n"
 * written by atomic rename at each commit. A hint, not a record: the
 * catalog says whether that shard is still materialized by that run, and
 * its file's checksums whether it is that shard's (docs/format.md, "The
 * shared hints"). A hint lost, stale or clobbered by a concurrent commit
 * only means a shard is computed where it could have been reused.
 *
 * Not for: deciding whether to reuse (the engine) or reading the data
 * (shard_reader.c).
 */
#include "snapshot_i.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHARED_DIR "shared"
#define HINT_MAX 256
#define TMP_STALE_S 3600 /* a hint's temp file older: its writer died */

static int open_shared(struct mf_store *st, bool create, int *out)
{
	return create ? snap_open_dir_create(st->dirfd, SHARED_DIR, out)
		      : snap_open_at(st->dirfd, SHARED_DIR, true, out);
}

int mf_store_shared_put(struct mf_store *st, const char *sfp,
			const struct mf_store_donor *d)
{
	if (!st || !d || snap_check_ids(sfp, NULL) ||
	    snap_check_ids(d->fp, d->run_id))
		return -EINVAL;
	char line[HINT_MAX], rnd[17], tmp[MF_FP_HEX_LEN + 32];
	int n = snprintf(line, sizeof(line), "%s %u %s %u\n", d->fp, d->shard,
			 d->run_id, (unsigned)d->owner);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -EINVAL;
	int rc = mf_random_hex(8, rnd);
	if (rc)
		return rc;
	snprintf(tmp, sizeof(tmp), "%s.tmp-%s", sfp, rnd);
	int dfd;
	if ((rc = open_shared(st, true, &dfd)))
		return rc;
	int fd = openat(dfd, tmp,
			O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			SNAP_FILE_MODE);
	if (fd < 0) {
		rc = -errno;
		close(dfd);
		return rc;
	}
	rc = mf_write_full(fd, line, (size_t)n);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	/* no fsync: a hint lost in a crash costs a computation, no byte */
	if (rc == 0 && renameat(dfd, tmp, dfd, sfp) != 0)
		rc = -errno;
	if (rc)
		(void)unlinkat(dfd, tmp, 0);
	close(dfd);
	return rc;
}

/* "FP SHARD RUN OWNER\n", each field in its exact form. */
static int parse_hint(const char *s, struct mf_store_donor *d)
{
	char fp[MF_FP_HEX_LEN + 1], run[MF_RUN_ID_HEX_LEN + 1];
	unsigned shard, owner;
	char end;
	if (sscanf(s, "%64s %u %32s %u%c", fp, &shard, run, &owner, &end) !=
		5 ||
	    end != '\n' || snap_check_ids(fp, run))
		return -EBADMSG;
	memcpy(d->fp, fp, sizeof(d->fp));
	memcpy(d->run_id, run, sizeof(d->run_id));
	d->shard = shard;
	d->owner = (uid_t)owner;
	return 0;
}

int mf_store_shared_get(struct mf_store *st, const char *sfp,
			struct mf_store_donor *d)
{
	if (!st || !d || snap_check_ids(sfp, NULL))
		return -EINVAL;
	int dfd, fd;
	int rc = open_shared(st, false, &dfd);
	if (rc)
		return rc;
	rc = snap_open_at(dfd, sfp, false, &fd);
	close(dfd);
	if (rc)
		return rc;
	char buf[HINT_MAX];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	rc = n < 0 ? -errno : 0;
	close(fd);
	if (rc)
		return rc;
	buf[n] = '\0';
	return parse_hint(buf, d);
}

/* Whether name is an SFP (64 lowercase hex digits), or SFP.tmp-HEX16. */
static bool hint_name(const char *name, bool *tmp)
{
	size_t n = strlen(name);
	*tmp = n == MF_FP_HEX_LEN + 21 &&
	    strncmp(name + MF_FP_HEX_LEN, ".tmp-", 5) == 0 &&
	    mf_is_hex(name + MF_FP_HEX_LEN + 5, 16);
	return (n == MF_FP_HEX_LEN || *tmp) && mf_is_hex(name, MF_FP_HEX_LEN);
}

int mf_store_shared_sweep(struct mf_store *st, mf_store_hint_keep_fn keep,
			  void *arg, uint32_t *removed)
{
	*removed = 0;
	int dfd;
	int rc = open_shared(st, false, &dfd);
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	int lfd = dup(dfd);
	DIR *dir = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!dir) {
		rc = -errno;
		if (lfd >= 0)
			close(lfd);
		close(dfd);
		return rc;
	}
	time_t now = time(NULL);
	struct dirent *de;
	while ((de = readdir(dir))) {
		bool tmp;
		if (!hint_name(de->d_name, &tmp))
			continue; /* not the store's: left alone */
		struct stat sb;
		if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(sb.st_mode))
			continue;
		bool drop;
		if (tmp) {
			drop = now - sb.st_mtime > TMP_STALE_S;
		} else {
			char sfp[MF_FP_HEX_LEN + 1];
			memcpy(sfp, de->d_name, MF_FP_HEX_LEN);
			sfp[MF_FP_HEX_LEN] = '\0';
			struct mf_store_donor d;
			int g = mf_store_shared_get(st, sfp, &d);
			drop = g == -EBADMSG || (g == 0 && !keep(arg, sfp, &d));
		}
		if (drop && unlinkat(dfd, de->d_name, 0) == 0)
			(*removed)++;
	}
	closedir(dir);
	close(dfd);
	return 0;
}
