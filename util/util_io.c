/*
 * util_io.c - reads and writes that go on until every byte is done, and
 * a folder's fsync. Not for: buffers (util_buf.c).
 */
#include "mf_util.h"

#include <errno.h>
#include <unistd.h>

int mf_write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t mf_pread_full(int fd, void *buf, size_t len, off_t off)
{
	char *p = buf;
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(fd, p + done, len - done, off + (off_t)done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

int mf_fsync_dir(int dirfd)
{
	return fsync(dirfd) == 0 ? 0 : -errno;
}
