/*
 * stallfs.c - a filesystem that stops answering, for the security tests:
 * `stallfs FLAG MOUNTPOINT [FUSE options]` serves a folder "d" holding a
 * file "f" ("stalled\n"); while the file FLAG exists, every getattr of
 * its root waits (polling FLAG every 50 ms): an lstat of the mount point
 * hangs, a path looked up through it does not. It stands in for a
 * hard-mounted NFS server that went away, or a user's own FUSE server
 * that she stops answering.
 *
 * Not for: anything but the tests (high-level libfuse API, one folder).
 */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fuse.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *flag;
static const char data[] = "stalled\n";

static void stall(void)
{
	while (access(flag, F_OK) == 0)
		usleep(50000);
}

static int sf_getattr(const char *path, struct stat *st,
		      struct fuse_file_info *fi)
{
	(void)fi;
	memset(st, 0, sizeof(*st));
	if (!strcmp(path, "/")) {
		stall();
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 3;
		return 0;
	}
	if (!strcmp(path, "/d")) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		st->st_ino = 2;
		return 0;
	}
	if (!strcmp(path, "/d/f")) {
		st->st_mode = S_IFREG | 0644;
		st->st_nlink = 1;
		st->st_size = sizeof(data) - 1;
		st->st_ino = 3;
		st->st_mtime = st->st_ctime = 1000000000;
		return 0;
	}
	return -ENOENT;
}

static int sf_readdir(const char *path, void *buf, fuse_fill_dir_t fill,
		      off_t off, struct fuse_file_info *fi,
		      enum fuse_readdir_flags flags)
{
	(void)off;
	(void)fi;
	(void)flags;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	if (!strcmp(path, "/"))
		fill(buf, "d", NULL, 0, 0);
	else if (!strcmp(path, "/d"))
		fill(buf, "f", NULL, 0, 0);
	else
		return -ENOENT;
	return 0;
}

static int sf_open(const char *path, struct fuse_file_info *fi)
{
	(void)fi;
	return strcmp(path, "/d/f") ? -ENOENT : 0;
}

static int sf_read(const char *path, char *buf, size_t n, off_t off,
		   struct fuse_file_info *fi)
{
	(void)path;
	(void)fi;
	size_t len = sizeof(data) - 1;
	if (off < 0 || (size_t)off >= len)
		return 0;
	if (n > len - (size_t)off)
		n = len - (size_t)off;
	memcpy(buf, data + off, n);
	return (int)n;
}

static void *sf_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	/* every lookup and getattr reaches stallfs: none is cached */
	cfg->entry_timeout = cfg->attr_timeout = cfg->negative_timeout = 0;
	cfg->use_ino = 1;
	return NULL;
}

static const struct fuse_operations ops = {
    .getattr = sf_getattr,
    .readdir = sf_readdir,
    .open = sf_open,
    .read = sf_read,
    .init = sf_init,
};

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: stallfs FLAG MOUNTPOINT [options]\n");
		return 2;
	}
	flag = argv[1];
	argv[1] = argv[0];
	return fuse_main(argc - 1, argv + 1, &ops, NULL);
}
