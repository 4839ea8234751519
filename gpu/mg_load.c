/*
 * mg_load.c - loading one whole file into a device buffer: open and check
 * the file, take a buffer from the pool and a staging ring from the
 * context, fill the buffer through the ring.
 *
 * Not for: prefetching over several files (mg_loader.c) or the ring's
 * mechanics (mg_ring.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mg_i.h"

int mg_fd_size(int fd, size_t *size)
{
	struct stat st;

	if (fstat(fd, &st))
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((uint64_t)st.st_size > SIZE_MAX / 2)
		return -EFBIG;
	*size = (size_t)st.st_size;
	return 0;
}

int mg_open_file(const char *path, int *fd, size_t *size)
{
	size_t sz;
	int f, r;

	if (!path)
		return -EINVAL;
	/* O_NONBLOCK: opening a FIFO without a writer (or some devices)
	 * would wait forever; they are refused below. It changes nothing for
	 * a regular file, and is cleared anyway. */
	f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (f < 0)
		return -errno;
	r = mg_fd_size(f, &sz);
	if (!r && fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK) < 0)
		r = -errno;
	if (r) {
		close(f);
		return r;
	}
	*fd = f;
	*size = sz;
	return 0;
}

int mg_load_with(struct mg_reader *rd, int fd, size_t size,
		 const atomic_bool *cancel, struct mg_buf **out)
{
	struct mg_buf *buf;
	struct mg_ctx *ctx;
	int r;

	r = mg_pool_get(mg_reader_ctx(rd), size, &buf);
	if (r)
		return r;
	ctx = buf->ctx;
	/* Only a hint for the read-ahead of cold files; failure is harmless. */
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	r = mg_reader_fill(rd, fd, size, buf, cancel);
	if (r) {
		mg_buf_release(buf);
		return r;
	}
	pthread_mutex_lock(&ctx->lock);
	ctx->stats.loads++;
	pthread_mutex_unlock(&ctx->lock);
	*out = buf;
	return 0;
}

/* Holds its own reference on ctx: another thread may close the context
 * meanwhile, and a failed load's release of its buffer would then end it
 * while its ring is still out. */
static int load_fd(mg_ctx *ctx, int fd, size_t size, mg_buf **out)
{
	struct mg_reader *rd;
	int r;

	mg_ctx_ref(ctx);
	r = mg_reader_get(ctx, &rd);
	if (!r) {
		r = mg_load_with(rd, fd, size, NULL, out);
		mg_reader_put(ctx, rd);
	}
	mg_ctx_unref(ctx);
	return r;
}

int mg_load(mg_ctx *ctx, const char *path, mg_buf **out)
{
	size_t size;
	int fd, r;

	r = mg_open_file(path, &fd, &size);
	if (r)
		return r;
	r = load_fd(ctx, fd, size, out);
	close(fd);
	return r;
}

int mg_load_fd(mg_ctx *ctx, int fd, mg_buf **out)
{
	size_t size;
	int r;

	r = mg_fd_size(fd, &size);
	if (r)
		return r;
	return load_fd(ctx, fd, size, out);
}
