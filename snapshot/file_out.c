/*
 * file_out.c - appending a new file's bytes with O_DIRECT where the file
 * system takes it: the bytes are staged in one of two 2 MiB buffers, and a
 * full one is written by a thread of its own while the caller fills the
 * other, so the disk's time overlaps the caller's. The last partial
 * buffer goes through the page cache (O_DIRECT wants whole blocks), and so
 * does everything after an EINVAL (a file system that takes the flag but
 * not the write) or a short write (the disk or the file size limit
 * reached: the page cache's write then says why). Without O_DIRECT every
 * byte goes through the page cache at once.
 *
 * Why: a shard's bytes written through the page cache take a page of new
 * memory each, which on some machines costs more than the disk's write
 * (docs/performance.md), and the mount's readers have their own pages.
 *
 * Not for: what the bytes are (shard_writer.c).
 */
#include "snapshot_i.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A multiple of any block size; the unit of every O_DIRECT write. */
#define OUT_BUF ((size_t)2 << 20)

struct snap_out {
	int fd; /* the caller's */
	bool direct; /* O_DIRECT is on: bytes go through buf[cur] */
	uint8_t *buf[2]; /* OUT_BUF bytes each (mf_buf_alloc: aligned) */
	size_t cap[2];
	unsigned cur; /* the buffer being filled */
	size_t len; /* bytes in it */
	/* the write thread; the fields below are guarded by lock */
	pthread_t thread;
	bool thread_on;
	bool handed; /* a write was handed over and its result not seen */
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool busy; /* buf[!cur] is being written */
	bool stop;
	ssize_t res; /* the last write's result */
	int res_errno;
};

static void *write_main(void *arg)
{
	struct snap_out *o = arg;
	pthread_mutex_lock(&o->lock);
	for (;;) {
		while (!o->busy && !o->stop)
			pthread_cond_wait(&o->cv, &o->lock);
		if (!o->busy)
			break; /* stopped, nothing left */
		const uint8_t *p = o->buf[!o->cur];
		pthread_mutex_unlock(&o->lock);
		ssize_t n;
		do
			n = write(o->fd, p, OUT_BUF);
		while (n < 0 && errno == EINTR);
		int e = n < 0 ? errno : 0;
		pthread_mutex_lock(&o->lock);
		o->res = n;
		o->res_errno = e;
		o->busy = false;
		pthread_cond_broadcast(&o->cv);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

/* Clears O_DIRECT: what follows goes through the page cache. */
static int direct_off(struct snap_out *o)
{
	int fl = fcntl(o->fd, F_GETFL);
	if (fl < 0 || fcntl(o->fd, F_SETFL, fl & ~O_DIRECT) != 0)
		return -errno;
	o->direct = false;
	return 0;
}

/*
 * Waits for the write under way, if any. A failed one that the page cache
 * may still take (EINVAL, or short) has the rest of its buffer written
 * there, and O_DIRECT goes off.
 */
static int settle(struct snap_out *o)
{
	if (!o->handed)
		return 0;
	o->handed = false;
	pthread_mutex_lock(&o->lock);
	while (o->busy)
		pthread_cond_wait(&o->cv, &o->lock);
	ssize_t n = o->res;
	int e = o->res_errno;
	pthread_mutex_unlock(&o->lock);
	if (n == (ssize_t)OUT_BUF)
		return 0;
	if (n < 0 && e != EINVAL)
		return -e;
	size_t done = n > 0 ? (size_t)n : 0;
	int rc = direct_off(o);
	if (rc == 0)
		rc = mf_write_full(o->fd, o->buf[!o->cur] + done,
				   OUT_BUF - done);
	return rc;
}

/* Hands the full buffer to the thread, once the one before is written. */
static int hand_over(struct snap_out *o)
{
	int rc = settle(o);
	if (rc || !o->direct)
		return rc;
	if (!o->thread_on) {
		rc = -pthread_create(&o->thread, NULL, write_main, o);
		if (rc)
			return rc;
		o->thread_on = true;
	}
	pthread_mutex_lock(&o->lock);
	o->cur = !o->cur; /* the full one is buf[!cur] now */
	o->busy = true;
	pthread_cond_signal(&o->cv);
	pthread_mutex_unlock(&o->lock);
	o->handed = true;
	o->len = 0;
	return 0;
}

int snap_out_open(int fd, struct snap_out **out)
{
	struct snap_out *o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->fd = fd;
	(void)mf_mutex_init(&o->lock);
	pthread_cond_init(&o->cv, NULL);
	int fl = fcntl(fd, F_GETFL);
	o->buf[0] = fl < 0 ? NULL : mf_buf_alloc(OUT_BUF, &o->cap[0]);
	o->buf[1] = o->buf[0] ? mf_buf_alloc(OUT_BUF, &o->cap[1]) : NULL;
	/* EINVAL: a file system without O_DIRECT */
	o->direct = o->buf[1] && o->cap[0] == OUT_BUF && o->cap[1] == OUT_BUF &&
	    fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
	*out = o;
	return 0;
}

int snap_out_put(struct snap_out *o, const void *data, size_t len)
{
	const uint8_t *p = data;
	while (len > 0 && o->direct) {
		size_t n = OUT_BUF - o->len;
		n = n < len ? n : len;
		memcpy(o->buf[o->cur] + o->len, p, n);
		o->len += n;
		p += n;
		len -= n;
		if (o->len < OUT_BUF)
			continue;
		int rc = hand_over(o);
		if (rc)
			return rc;
		if (!o->direct) { /* fell back: this buffer too */
			rc = mf_write_full(o->fd, o->buf[o->cur], o->len);
			o->len = 0;
			if (rc)
				return rc;
		}
	}
	return len ? mf_write_full(o->fd, p, len) : 0;
}

int snap_out_end(struct snap_out *o)
{
	int rc = settle(o);
	if (rc || !o->direct)
		return rc;
	rc = direct_off(o);
	if (rc == 0)
		rc = mf_write_full(o->fd, o->buf[o->cur], o->len);
	o->len = 0;
	return rc;
}

void snap_out_free(struct snap_out *o)
{
	if (!o)
		return;
	if (o->thread_on) {
		pthread_mutex_lock(&o->lock);
		o->stop = true;
		pthread_cond_signal(&o->cv);
		pthread_mutex_unlock(&o->lock);
		pthread_join(o->thread, NULL);
	}
	for (int i = 0; i < 2; i++)
		mf_buf_free(o->buf[i], o->cap[i]);
	pthread_cond_destroy(&o->cv);
	pthread_mutex_destroy(&o->lock);
	free(o);
}
