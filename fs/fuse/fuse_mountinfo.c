/*
 * fuse_mountinfo.c - what /proc/self/mountinfo (proc(5)) says about the
 * mount: the device of the mount at a mountpoint (its st_dev, known before
 * the session loop could answer a stat), and whether any mount of a device
 * is left in this mount namespace. Its paths come escaped (a space as
 * \040), undone here.
 *
 * Not for: watching the table (fuse_nswatch.c) or tuning the mount's
 * device (fuse_mount.c).
 */
#include "fuse_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

static bool is_octal(char c)
{
	return c >= '0' && c <= '7';
}

void mfs_mountinfo_unescape(char *s)
{
	char *w = s;
	for (const char *r = s; *r;) {
		/* \ooo of one byte only: the kernel writes no other escape,
		 * and anything else is a path's own bytes */
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' &&
		    is_octal(r[2]) && is_octal(r[3])) {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 +
				      (r[3] - '0'));
			r += 4;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
}

/* A line's device (field 3, "MAJ:MIN") and mountpoint (field 5, as
 * written: escaped); false for a line without them. */
#define MNT_MAX 4096
static bool parse_line(const char *line, char dev[64], char mnt[MNT_MAX])
{
	return sscanf(line, "%*s %*s %63s %*s %4095s", dev, mnt) == 2;
}

int mfs_mountinfo_devno(FILE *f, const char *mountpoint, char *out, size_t len)
{
	char *line = NULL, dev[64], mnt[MNT_MAX];
	size_t cap = 0;
	int rc = -ENOENT;
	while (getline(&line, &cap, f) > 0) {
		if (!parse_line(line, dev, mnt))
			continue;
		mfs_mountinfo_unescape(mnt);
		if (strcmp(mnt, mountpoint) == 0) { /* the last one wins */
			snprintf(out, len, "%s", dev);
			rc = 0;
		}
	}
	free(line);
	return rc;
}

int mfs_mountinfo_has_dev(FILE *f, dev_t dev)
{
	char *line = NULL;
	size_t cap = 0;
	int found = 0;
	while (!found && getline(&line, &cap, f) > 0) {
		char d[64], mnt[MNT_MAX];
		unsigned maj, min;
		found = parse_line(line, d, mnt) &&
		    sscanf(d, "%u:%u", &maj, &min) == 2 &&
		    makedev(maj, min) == dev;
	}
	free(line);
	return ferror(f) ? -EIO : found;
}
