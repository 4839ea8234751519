/*
 * store.c - the store folder: opening it, the descriptor-relative and
 * symlink-refusing opens every other file of this module goes through,
 * run folders and the atomically written snapshot.metadata.
 *
 * Not for: listing or removing (store_tree.c), naming and walking
 * (store_walk.c), shard files themselves (shard_writer.c, shard_reader.c).
 * Here snapshot.metadata is opaque bytes; metadata.c knows what it says.
 */
#include "snapshot_i.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define METADATA_MAX (64ULL << 20) /* larger is not a metadata file */

/* ---- opening without following symlinks ---- */

static int type_check(const struct stat *sb, bool want_dir)
{
	if (S_ISLNK(sb->st_mode))
		return -ELOOP;
	if (want_dir ? !S_ISDIR(sb->st_mode) : !S_ISREG(sb->st_mode))
		return want_dir
		    ? MF_CORRUPT("store entry is not a folder")
		    : MF_CORRUPT("store entry is not a regular file");
	return 0;
}

static int type_of_name(int dirfd, const char *name, bool want_dir)
{
	struct stat sb;
	if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
		return -errno;
	return type_check(&sb, want_dir);
}

int snap_open_at(int dirfd, const char *name, bool want_dir, int *out)
{
	/* looking first keeps us from ever opening a FIFO or a device */
	int rc = type_of_name(dirfd, name, want_dir);
	if (rc)
		return rc;
	int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
	int fd = openat(dirfd, name, flags | (want_dir ? O_DIRECTORY : 0));
	if (fd < 0) {
		rc = -errno;
		/* swapped for a symlink since we looked: say which */
		if (rc == -ENOTDIR) {
			rc = type_of_name(dirfd, name, want_dir);
			rc = rc ? rc : MF_CORRUPT("store entry changed type");
		}
		return rc;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		rc = -errno;
		goto close_fd;
	}
	rc = type_check(&sb, want_dir);
	if (rc)
		goto close_fd;
	/* O_NONBLOCK only guarded the open; reads of a file must block */
	if (fcntl(fd, F_SETFL, 0) != 0) {
		rc = -errno;
		goto close_fd;
	}
	*out = fd;
	return 0;
close_fd:
	close(fd);
	return rc;
}

void snap_close_to_others(int fd)
{
	struct stat st;
	if (fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
	    (st.st_mode & 0007))
		(void)fchmod(fd, st.st_mode & 07770);
}

int snap_open_dir_create(int parent, const char *name, int *out)
{
	bool made = mkdirat(parent, name, SNAP_DIR_MODE) == 0;
	if (!made && errno != EEXIST)
		return -errno;
	int fd;
	int rc = snap_open_at(parent, name, true, &fd);
	if (rc)
		return rc;
	/* the new name is durable only once its parent is synced */
	if (made && fsync(parent) != 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

int snap_check_ids(const char *fp, const char *run_id)
{
	if (!mf_is_hex(fp, MF_FP_HEX_LEN))
		return -EINVAL;
	if (run_id && !mf_is_hex(run_id, MF_RUN_ID_HEX_LEN))
		return -EINVAL;
	return 0;
}

int snap_open_fp(struct mf_store *st, const char *fp, int *out)
{
	if (!st)
		return -EINVAL;
	int rc = snap_check_ids(fp, NULL);
	return rc ? rc : snap_open_at(st->snapfd, fp, true, out);
}

int snap_open_run(struct mf_store *st, const char *fp, const char *run_id,
		  int *out)
{
	if (!st || !run_id)
		return -EINVAL;
	int rc = snap_check_ids(fp, run_id);
	int fpfd;
	rc = rc ? rc : snap_open_fp(st, fp, &fpfd);
	if (rc)
		return rc;
	rc = snap_open_at(fpfd, run_id, true, out);
	close(fpfd);
	return rc;
}

void snap_shard_name(uint32_t shard, const char *ext, char *buf)
{
	snprintf(buf, SNAP_NAME_MAX, "shard-%05" PRIu32 "%s", shard, ext);
}

/* ---- the store ---- */

/* mkdir -p: 0755 for the folders above the store, 0700 for the store's
 * own (docs/security.md, "The store"). */
static int make_path(const char *dir)
{
	char *p = strdup(dir);
	if (!p)
		return -ENOMEM;
	int rc = 0;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, c == '\0' ? 0700 : 0755) != 0 && errno != EEXIST) {
			rc = -errno;
			break;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	free(p);
	return rc;
}

static int open_snapshots(int dirfd, bool create, int *out)
{
	if (create) {
		int rc = snap_open_dir_create(dirfd, "snapshots", out);
		return rc;
	}
	return snap_open_at(dirfd, "snapshots", true, out);
}

/* Whether st may hold a store this process trusts: owned by this
 * process's user or root, and, when others may write in it, sticky (as
 * /tmp is: none of them can move away what is not theirs). */
static bool trusted_dir(const struct stat *st, bool store_itself)
{
	if (st->st_uid != geteuid() && st->st_uid != 0)
		return false;
	if (store_itself)
		return !(st->st_mode & 0002);
	return !(st->st_mode & 0022) || (st->st_mode & S_ISVTX);
}

/*
 * The store folder and every folder above it must be trusted_dir: another
 * user who owns or may rename them could plant or read the store's files
 * (a catalog they made in /tmp/.cache/matfs, a folder they swap in).
 * -EPERM otherwise.
 */
static int check_trusted(int dirfd, const char *dir)
{
	struct stat st;
	if (fstat(dirfd, &st) != 0)
		return -errno;
	if (!trusted_dir(&st, true))
		return -EPERM;
	char *real = realpath(dir, NULL);
	if (!real)
		return -errno;
	int rc = 0;
	for (char *slash = strrchr(real, '/'); rc == 0 && slash;
	     slash = strrchr(real, '/')) {
		*slash = '\0';
		const char *up = real[0] ? real : "/";
		if (stat(up, &st) != 0)
			rc = -errno;
		else if (!trusted_dir(&st, false))
			rc = -EPERM;
		if (!real[0])
			break;
	}
	free(real);
	return rc;
}

int mf_store_open(const char *dir, bool create, struct mf_store **out)
{
	if (!dir || !*dir || !out)
		return -EINVAL;
	int rc = create ? make_path(dir) : 0;
	if (rc)
		return rc;
	struct mf_store *st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->path = strdup(dir);
	if (!st->path) {
		rc = -ENOMEM;
		goto free_st;
	}
	st->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->dirfd < 0) {
		rc = -errno;
		goto free_path;
	}
	rc = check_trusted(st->dirfd, dir);
	if (rc)
		goto close_dir;
	if (create)
		snap_close_to_others(st->dirfd);
	rc = open_snapshots(st->dirfd, create, &st->snapfd);
	if (rc)
		goto close_dir;
	*out = st;
	return 0;
close_dir:
	close(st->dirfd);
free_path:
	free(st->path);
free_st:
	free(st);
	return rc;
}

void mf_store_close(struct mf_store *st)
{
	if (!st)
		return;
	close(st->snapfd);
	close(st->dirfd);
	free(st->path);
	free(st);
}

const char *mf_store_path(const struct mf_store *st)
{
	return st->path;
}

int mf_store_dirfd(const struct mf_store *st)
{
	return st->dirfd;
}

int mf_store_run_create(struct mf_store *st, const char *fp, const char *run_id)
{
	if (!st || !run_id)
		return -EINVAL;
	int rc = snap_check_ids(fp, run_id);
	if (rc)
		return rc;
	int fpfd, runfd;
	rc = snap_open_dir_create(st->snapfd, fp, &fpfd);
	if (rc)
		return rc;
	rc = snap_open_dir_create(fpfd, run_id, &runfd);
	if (rc == 0)
		close(runfd);
	close(fpfd);
	return rc;
}

/* ---- snapshot.metadata ---- */

static int write_file_durably(int fd, const void *data, size_t len)
{
	int rc = mf_write_full(fd, data, len);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	/* close reports late write errors on network filesystems */
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

static int write_metadata_at(int fpfd, const void *data, size_t len)
{
	char rnd[17];
	char tmp[sizeof(SNAP_METADATA_NAME) + 24];
	/* a random name: several daemons may share the store */
	int rc = mf_random_hex(8, rnd);
	if (rc)
		return rc;
	snprintf(tmp, sizeof(tmp), "%s.tmp-%s", SNAP_METADATA_NAME, rnd);
	int fd =
	    openat(fpfd, tmp,
		   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	rc = write_file_durably(fd, data, len);
	if (rc)
		goto unlink_tmp;
	if (renameat(fpfd, tmp, fpfd, SNAP_METADATA_NAME) != 0) {
		rc = -errno;
		goto unlink_tmp;
	}
	return mf_fsync_dir(fpfd);
unlink_tmp:
	unlinkat(fpfd, tmp, 0);
	return rc;
}

int mf_store_write_metadata(struct mf_store *st, const char *fp,
			    const void *data, size_t len)
{
	if (!st || (!data && len))
		return -EINVAL;
	int rc = snap_check_ids(fp, NULL);
	if (rc)
		return rc;
	int fpfd;
	rc = snap_open_dir_create(st->snapfd, fp, &fpfd);
	if (rc)
		return rc;
	rc = write_metadata_at(fpfd, data, len);
	close(fpfd);
	return rc;
}

/* Doubles *buf, refusing to pass METADATA_MAX. */
static int grow(char **buf, size_t *cap)
{
	if (*cap >= METADATA_MAX)
		return MF_CORRUPT("metadata file too large");
	char *p = realloc(*buf, 2 * *cap);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap *= 2;
	return 0;
}

/* Reads all of fd to its end into a NUL-terminated buffer. */
static int read_all(int fd, char **data, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (;;) {
		if (n + 1 == cap && (rc = grow(&buf, &cap)) != 0)
			goto free_buf;
		size_t want = cap - 1 - n;
		ssize_t r = mf_pread_full(fd, buf + n, want, (off_t)n);
		if (r < 0) {
			rc = (int)r;
			goto free_buf;
		}
		n += (size_t)r;
		if ((size_t)r < want)
			break;
	}
	buf[n] = '\0';
	*data = buf;
	*len = n;
	return 0;
free_buf:
	free(buf);
	return rc;
}

int snap_read_metadata(struct mf_store *st, const char *fp, char **data,
		       size_t *len, int64_t *mtime)
{
	if (!st || !data || !len)
		return -EINVAL;
	int fpfd, fd;
	int rc = snap_open_fp(st, fp, &fpfd);
	if (rc)
		return rc;
	rc = snap_open_at(fpfd, SNAP_METADATA_NAME, false, &fd);
	close(fpfd);
	if (rc)
		return rc;
	struct stat sb;
	if (mtime && fstat(fd, &sb) != 0)
		rc = -errno;
	if (rc == 0)
		rc = read_all(fd, data, len);
	close(fd);
	if (rc == 0 && mtime)
		*mtime = (int64_t)sb.st_mtime;
	return rc;
}

int mf_store_read_metadata(struct mf_store *st, const char *fp, char **data,
			   size_t *len)
{
	return snap_read_metadata(st, fp, data, len, NULL);
}
