/*
 * mg_i.h - libmatgpu internals shared by its source files: the backend
 * table (CPU or CUDA), the context with its buffer pool and its staging
 * rings, buffers, and the error helpers.
 *
 * Not for: users of the library (matgpu.h is the contract) or anything the
 * version script exports.
 */
#ifndef MG_I_H
#define MG_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "matgpu.h"

#define MG_MIN_CAPACITY 4096u
#define MG_MAX_STAGING_COUNT 64u
#define MG_MAX_IO_THREADS 16u
#define MG_MAX_LOADS 64u

/*
 * What differs between devices. Every function runs with the context's
 * device current on the calling thread (the backend makes it so and leaves
 * the thread as found, so that no other device's context is ever created
 * and the caller's device does not change). Streams and
 * events are opaque; the CPU backend copies synchronously, so its events
 * are always complete. A consumer's stream is a DLPack stream value (see
 * mg_buf_dlpack_stream in matgpu.h).
 */
struct mg_backend {
	const char *name;
	DLDeviceType dl_type;
	int (*host_alloc)(struct mg_ctx *ctx, size_t n, void **out);
	void (*host_free)(struct mg_ctx *ctx, void *p);
	int (*dev_alloc)(struct mg_ctx *ctx, size_t n, void **out);
	/* Frees buf's memory and events; waits for the device on CUDA. */
	void (*dev_free)(struct mg_ctx *ctx, struct mg_buf *buf);
	int (*stream_new)(struct mg_ctx *ctx, void **out);
	void (*stream_free)(struct mg_ctx *ctx, void *stream);
	int (*event_new)(struct mg_ctx *ctx, void **out);
	void (*event_free)(struct mg_ctx *ctx, void *event);
	/* Queues a host-to-device copy of n bytes on stream. */
	int (*copy)(struct mg_ctx *ctx, void *stream, void *dst,
		    const void *src, size_t n);
	int (*record)(struct mg_ctx *ctx, void *event, void *stream);
	int (*event_wait)(struct mg_ctx *ctx, void *event);
	int (*sync)(struct mg_ctx *ctx, void *stream);
	/* Makes a consumer's stream wait for buf->ready (never blocks). */
	int (*consume)(struct mg_ctx *ctx, struct mg_buf *buf, intptr_t stream);
	/* Fences buf's reuse after the work queued on a consumer's stream so
	 * far; when no fence can be made, waits for that stream, and when
	 * that fails too sets buf->unfenced. */
	void (*fence)(struct mg_ctx *ctx, struct mg_buf *buf, intptr_t stream);
	/* Orders later work on stream after buf's fences, which it clears. */
	int (*acquire_fence)(struct mg_ctx *ctx, void *stream,
			     struct mg_buf *buf);
};
extern const struct mg_backend mg_backend_cpu;
#ifdef MG_HAVE_CUDA
extern const struct mg_backend mg_backend_cuda;
/* cudaGetDeviceCount, 0 on any error (recorded as the last CUDA error). */
int mg_cuda_device_count(void);
#endif

/* Per-thread record of the last CUDA error (mg_error.c). */
void mg_set_cuda_error(int code, const char *name);

struct mg_reader; /* one staging ring and its I/O threads (mg_ring.c) */

/* A release fence: event recorded on a consumer's stream. */
struct mg_fence {
	void *event;
	intptr_t stream;
};

/*
 * A device buffer. data, cap, ready and the fence events belong to the
 * buffer for its whole life; size and budget are set by the load that
 * fills it. next links the pool's lists (guarded by ctx->lock).
 * fence_lock guards fences, nfences and unfenced: tensors of one buffer
 * may be deleted on several threads at once.
 */
struct mg_buf {
	struct mg_ctx *ctx; /* holds a reference while the buffer is alive */
	void *data;
	size_t size;
	size_t cap;
	void *ready; /* backend event: the fill's copies are done */
	pthread_mutex_t fence_lock;
	struct mg_fence *fences; /* [0, nfences) recorded since the fill */
	unsigned nfences, nalloc; /* nalloc: fences with an event */
	bool unfenced; /* a release could not be fenced: never reused */
	atomic_uint refs;
	struct mg_budget *budget; /* loader accounting, NULL for mg_load */
	struct mg_buf *next;
};

/*
 * A context. lock guards the pool, the reader list, the ring count and the
 * counters; it is a leaf lock: nothing else is acquired while holding it,
 * and no backend call is made under it. rings_free is signalled when a
 * ring goes back.
 */
struct mg_ctx {
	const struct mg_backend *be;
	int device; /* MG_DEVICE_CPU or the CUDA ordinal */
	struct mg_ctx_opts opts;
	atomic_uint refs;
	pthread_mutex_t lock;
	pthread_cond_t rings_free;
	unsigned rings_out; /* rings in use by loads, <= opts.max_loads */
	struct mg_buf *free_bufs; /* pool, most recently released first */
	struct mg_buf *doomed; /* evicted or unfenced, to free off deleters */
	struct mg_reader *free_readers;
	struct mg_ctx_stats stats;
};

void mg_ctx_ref(struct mg_ctx *ctx);
void mg_ctx_unref(struct mg_ctx *ctx);
void mg_mutex_init(pthread_mutex_t *m);

/* The capacity a buffer of size bytes gets (mg_pool.c). */
size_t mg_size_class(size_t size);

/* A buffer of at least size bytes, one reference (mg_pool.c). */
int mg_pool_get(struct mg_ctx *ctx, size_t size, struct mg_buf **out);
/* Takes back a buffer whose last reference went. */
void mg_pool_put(struct mg_ctx *ctx, struct mg_buf *buf);
/* Frees every cached buffer; called with no lock held. */
void mg_pool_drain(struct mg_ctx *ctx);
/* Frees the buffers evicted since; called where freeing may wait for the
 * device (a load, a trim, the context's end), never from a release. */
void mg_pool_reap(struct mg_ctx *ctx);

/* A staging ring of ctx, from its free list or new (mg_ring.c); waits
 * while max_loads rings are in use. */
int mg_reader_get(struct mg_ctx *ctx, struct mg_reader **out);
void mg_reader_put(struct mg_ctx *ctx, struct mg_reader *rd);
struct mg_ctx *mg_reader_ctx(const struct mg_reader *rd);
/* Frees every idle ring of ctx; called with no lock held. */
void mg_readers_drain(struct mg_ctx *ctx);

/*
 * Fills buf->data with size bytes of fd from offset 0 through the ring and
 * waits until they are on the device. cancel, when not NULL, is polled
 * between pieces (-ECANCELED). Returns 0, -errno or a CUDA error.
 */
int mg_reader_fill(struct mg_reader *rd, int fd, size_t size,
		   struct mg_buf *buf, const atomic_bool *cancel);

/*
 * Opens path for reading and checks that it is a regular file. Returns 0 and
 * sets *fd and *size, or -errno (-EISDIR, -EINVAL for other file types).
 */
int mg_open_file(const char *path, int *fd, size_t *size);

/* Size of a descriptor that must be a regular file. */
int mg_fd_size(int fd, size_t *size);

/* Loads an open file of a known size into a new buffer with rd. */
int mg_load_with(struct mg_reader *rd, int fd, size_t size,
		 const atomic_bool *cancel, struct mg_buf **out);

/* Accounting shared by a loader and the buffers it handed out (mg_loader.c).
 * Called when such a buffer's last reference goes. */
void mg_budget_put(struct mg_budget *b, size_t cap);

#endif /* MG_I_H */
