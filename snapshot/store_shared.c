/*
 * store_shared.c - where the data of a shard fingerprint was committed:
 * STORE/shared/SFP, lines "FP SHARD RUN OWNER PLACE\n", the latest commit
 * first, at most MF_STORE_HOLDERS of them, rewritten by atomic rename at
 * each commit. A hint, not a record: the catalog says whether that
 * shard is still materialized by that run, and its file's checksums
 * whether it is that shard's (docs/format.md, "The shared hints"). A hint lost, stale or clobbered by a concurrent commit
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

/* "FP SHARD RUN OWNER PLACE", each field in its exact form (PLACE: 16
 * lowercase hex digits). */
static int parse_line(const char *s, size_t len, struct mf_store_donor *d)
{
	char line[HINT_MAX];
	if (len >= sizeof(line))
		return -EBADMSG;
	memcpy(line, s, len);
	line[len] = '\0';
	char fp[MF_FP_HEX_LEN + 1], run[MF_RUN_ID_HEX_LEN + 1], place[17];
	unsigned shard, owner;
	int used = 0;
	if (sscanf(line, "%64s %u %32s %u %16s%n", fp, &shard, run, &owner,
		   place, &used) != 5 ||
	    (size_t)used != len || snap_check_ids(fp, run) ||
	    !mf_is_hex(place, 16))
		return -EBADMSG;
	memcpy(d->fp, fp, sizeof(d->fp));
	memcpy(d->run_id, run, sizeof(d->run_id));
	d->shard = shard;
	d->owner = (uid_t)owner;
	d->place = strtoull(place, NULL, 16);
	return 0;
}

/* The holders a hint's bytes list: -EBADMSG for any line not a holder or
 * more than MF_STORE_HOLDERS of them. */
static int parse_hint(const char *buf, size_t len, struct mf_store_donor *v,
		      size_t *n)
{
	*n = 0;
	size_t at = 0;
	while (at < len) {
		const char *nl = memchr(buf + at, '\n', len - at);
		if (!nl || *n == MF_STORE_HOLDERS)
			return -EBADMSG;
		size_t l = (size_t)(nl - (buf + at));
		if (parse_line(buf + at, l, &v[*n]))
			return -EBADMSG;
		(*n)++;
		at += l + 1;
	}
	return *n ? 0 : -EBADMSG;
}

static int read_hint(int dfd, const char *name, struct mf_store_donor *v,
		     size_t *n)
{
	int fd;
	int rc = snap_open_at(dfd, name, false, &fd);
	if (rc)
		return rc;
	char buf[HINT_MAX * MF_STORE_HOLDERS + 1];
	ssize_t got = read(fd, buf, sizeof(buf));
	rc = got < 0 ? -errno : 0;
	close(fd);
	if (rc)
		return rc;
	if ((size_t)got == sizeof(buf))
		return -EBADMSG;
	return parse_hint(buf, (size_t)got, v, n);
}

/* Writes v[0..n) as name's hint, by atomic rename (no fsync: a hint lost
 * in a crash costs a computation, no byte). */
static int write_hint(int dfd, const char *name, const struct mf_store_donor *v,
		      size_t n)
{
	char buf[HINT_MAX * MF_STORE_HOLDERS], rnd[17], tmp[MF_FP_HEX_LEN + 32];
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		int k = snprintf(buf + len, sizeof(buf) - len,
				 "%s %u %s %u %016llx\n", v[i].fp, v[i].shard,
				 v[i].run_id, (unsigned)v[i].owner,
				 (unsigned long long)v[i].place);
		if (k < 0 || (size_t)k >= sizeof(buf) - len)
			return -EINVAL;
		len += (size_t)k;
	}
	int rc = mf_random_hex(8, rnd);
	if (rc)
		return rc;
	snprintf(tmp, sizeof(tmp), "%s.tmp-%s", name, rnd);
	int fd = openat(dfd, tmp,
			O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			SNAP_FILE_MODE);
	if (fd < 0)
		return -errno;
	rc = mf_write_full(fd, buf, len);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dfd, tmp, dfd, name) != 0)
		rc = -errno;
	if (rc)
		(void)unlinkat(dfd, tmp, 0);
	return rc;
}

int mf_store_shared_put(struct mf_store *st, const char *sfp,
			const struct mf_store_donor *d)
{
	if (!st || !d || snap_check_ids(sfp, NULL) ||
	    snap_check_ids(d->fp, d->run_id))
		return -EINVAL;
	int dfd;
	int rc = open_shared(st, true, &dfd);
	if (rc)
		return rc;
	struct mf_store_donor old[MF_STORE_HOLDERS], v[MF_STORE_HOLDERS];
	size_t n_old = 0, n = 0;
	if (read_hint(dfd, sfp, old, &n_old) != 0)
		n_old = 0; /* none, or not one: written anew */
	v[n++] = *d;
	for (size_t i = 0; i < n_old && n < MF_STORE_HOLDERS; i++)
		if (strcmp(old[i].fp, d->fp) != 0 || old[i].shard != d->shard)
			v[n++] = old[i];
	/* two commits at once: the last rename wins, a holder is forgotten */
	rc = write_hint(dfd, sfp, v, n);
	close(dfd);
	return rc;
}

int mf_store_shared_get(struct mf_store *st, const char *sfp,
			struct mf_store_donor v[MF_STORE_HOLDERS], size_t *n)
{
	*n = 0;
	if (!st || snap_check_ids(sfp, NULL))
		return -EINVAL;
	int dfd;
	int rc = open_shared(st, false, &dfd);
	if (rc)
		return rc;
	rc = read_hint(dfd, sfp, v, n);
	close(dfd);
	return rc;
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
		if (tmp) {
			if (now - sb.st_mtime > TMP_STALE_S &&
			    unlinkat(dfd, de->d_name, 0) == 0)
				(*removed)++;
			continue;
		}
		struct mf_store_donor v[MF_STORE_HOLDERS];
		size_t n, k = 0;
		int g = read_hint(dfd, de->d_name, v, &n);
		if (g && g != -EBADMSG)
			continue;
		for (size_t i = 0; g == 0 && i < n; i++)
			if (keep(arg, de->d_name, &v[i]))
				v[k++] = v[i];
		if (g == 0 && k == n)
			continue;
		*removed += g ? 1 : (uint32_t)(n - k);
		/* a commit between the read and here: its holder is lost,
		 * which costs a computation at most */
		if (k == 0)
			(void)unlinkat(dfd, de->d_name, 0);
		else
			(void)write_hint(dfd, de->d_name, v, k);
	}
	closedir(dir);
	close(dfd);
	return 0;
}
