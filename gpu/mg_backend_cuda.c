/*
 * mg_backend_cuda.c - the CUDA backend, on the CUDA runtime API: pinned
 * staging with cudaHostAlloc, device buffers with cudaMalloc, one
 * non-blocking stream per staging ring, cudaMemcpyAsync and events.
 *
 * Not for: kernels (there are none) or choosing between backends
 * (mg_ctx.c). Every function makes the context's device current and puts
 * the calling thread's device back, so callers' threads keep theirs; a
 * thread that had no current context is left on the context's device
 * (putting "device 0" back would create device 0's context).
 * cudaError_t is translated in cuda_err() only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "mg_i.h"

static int cuda_err(cudaError_t e)
{
	if (e == cudaSuccess)
		return 0;
	mg_set_cuda_error((int)e, cudaGetErrorName(e));
	/* Clear the runtime's record of a non-sticky error. */
	(void)cudaGetLastError();
	switch (e) {
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorInitializationError:
		return -ENODEV;
	case cudaErrorDevicesUnavailable:
		return -EBUSY;
	case cudaErrorInvalidValue:
		return -EINVAL;
	default:
		return -MG_ECUDA;
	}
}

int mg_cuda_device_count(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		cuda_err(e);
		return 0;
	}
	return n;
}

typedef int (*ctx_get_current_fn)(void **ctx);

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static ctx_get_current_fn ctx_get_current;

/* The driver's cuCtxGetCurrent, through the runtime (no libcuda link). */
static void find_driver(void)
{
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
	void *fn = NULL;
	cudaError_t e;

#if CUDART_VERSION >= 12050
	e = cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 4000,
					     cudaEnableDefault, &q);
#else
	e = cudaGetDriverEntryPoint("cuCtxGetCurrent", &fn, cudaEnableDefault,
				    &q);
#endif
	if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
		(void)cudaGetLastError();
		return;
	}
	memcpy(&ctx_get_current, &fn, sizeof(fn));
}

/* Whether the calling thread has a current context (a device it chose, or
 * one the runtime bound it to); true when that cannot be told. */
static bool thread_has_context(void)
{
	void *c = NULL;

	pthread_once(&driver_once, find_driver);
	if (!ctx_get_current)
		return true;
	return ctx_get_current(&c) != 0 || c != NULL;
}

/*
 * Makes ctx's device current; *saved is the caller's device to put back in
 * leave(), or -1 when there is none. cudaGetDevice answers 0 on a thread
 * that never chose a device; when such a thread has no current context it
 * is left on ctx's device, since putting "device 0" back would create
 * device 0's context, on a device nobody asked for.
 */
static int enter(const struct mg_ctx *ctx, int *saved)
{
	int cur = -1;

	if (cudaGetDevice(&cur) != cudaSuccess)
		cur = -1;
	if (cur == ctx->device) {
		*saved = cur;
		return 0;
	}
	*saved = cur > 0 || (cur == 0 && thread_has_context()) ? cur : -1;
	return cuda_err(cudaSetDevice(ctx->device));
}

static void leave(const struct mg_ctx *ctx, int saved)
{
	if (saved >= 0 && saved != ctx->device)
		(void)cudaSetDevice(saved);
}

/* Runs one runtime call with ctx's device current and returns its
 * translated result from the enclosing function. */
#define RETURN_ON_DEVICE(ctx, call)                                            \
	do {                                                                   \
		int saved_, r_ = enter((ctx), &saved_);                        \
		if (!r_)                                                       \
			r_ = cuda_err(call);                                   \
		leave((ctx), saved_);                                          \
		return r_;                                                     \
	} while (0)

int mg_cuda_current_device(void)
{
	cudaError_t e;
	int dev = 0;

	if (mg_cuda_device_count() == 0)
		return -ENODEV;
	e = cudaGetDevice(&dev);
	return e == cudaSuccess ? dev : cuda_err(e);
}

static int cu_host_alloc(struct mg_ctx *ctx, size_t n, void **out)
{
	RETURN_ON_DEVICE(ctx,
			 cudaHostAlloc(out, n ? n : 1, cudaHostAllocPortable));
}

static void cu_host_free(struct mg_ctx *ctx, void *p)
{
	int saved;

	if (enter(ctx, &saved) == 0)
		(void)cudaFreeHost(p);
	leave(ctx, saved);
}

static int cu_dev_alloc(struct mg_ctx *ctx, size_t n, void **out)
{
	RETURN_ON_DEVICE(ctx, cudaMalloc(out, n));
}

static void cu_dev_free(struct mg_ctx *ctx, struct mg_buf *buf)
{
	int saved;

	if (enter(ctx, &saved) == 0) {
		(void)cudaFree(buf->data);
		if (buf->ready)
			(void)cudaEventDestroy(buf->ready);
		for (unsigned i = 0; i < buf->nalloc; i++)
			(void)cudaEventDestroy(buf->fences[i].event);
	}
	leave(ctx, saved);
}

static int cu_stream_new(struct mg_ctx *ctx, void **out)
{
	RETURN_ON_DEVICE(ctx,
			 cudaStreamCreateWithFlags((cudaStream_t *)out,
						   cudaStreamNonBlocking));
}

static void cu_stream_free(struct mg_ctx *ctx, void *stream)
{
	int saved;

	if (enter(ctx, &saved) == 0)
		(void)cudaStreamDestroy(stream);
	leave(ctx, saved);
}

static int cu_event_new(struct mg_ctx *ctx, void **out)
{
	RETURN_ON_DEVICE(ctx,
			 cudaEventCreateWithFlags((cudaEvent_t *)out,
						  cudaEventDisableTiming));
}

static void cu_event_free(struct mg_ctx *ctx, void *event)
{
	int saved;

	if (enter(ctx, &saved) == 0)
		(void)cudaEventDestroy(event);
	leave(ctx, saved);
}

static int cu_copy(struct mg_ctx *ctx, void *stream, void *dst, const void *src,
		   size_t n)
{
	RETURN_ON_DEVICE(
	    ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
}

static int cu_record(struct mg_ctx *ctx, void *event, void *stream)
{
	RETURN_ON_DEVICE(ctx, cudaEventRecord(event, stream));
}

static int cu_event_wait(struct mg_ctx *ctx, void *event)
{
	RETURN_ON_DEVICE(ctx, cudaEventSynchronize(event));
}

static int cu_sync(struct mg_ctx *ctx, void *stream)
{
	RETURN_ON_DEVICE(ctx, cudaStreamSynchronize(stream));
}

/* The stream a DLPack stream value names; -1 (no synchronization) and 2
 * (a per-thread default stream, which synchronizes with the legacy one, of
 * a thread that may not be this one) fence on the legacy stream. */
static cudaStream_t fence_stream(intptr_t stream)
{
	if (stream == -1 || stream == 1 || stream == 2)
		return cudaStreamLegacy;
	return (cudaStream_t)stream;
}

static int cu_consume(struct mg_ctx *ctx, struct mg_buf *buf, intptr_t stream)
{
	cudaStream_t s = stream == 1 ? cudaStreamLegacy
	    : stream == 2	     ? cudaStreamPerThread
				     : (cudaStream_t)stream;

	if (stream == -1 || !buf->ready)
		return 0;
	RETURN_ON_DEVICE(ctx, cudaStreamWaitEvent(s, buf->ready, 0));
}

/* Records buf's fence on s: the slot of s if it has one (a later record on
 * the same stream covers an earlier one), else the next. fence_lock held;
 * returns a CUDA error. */
static cudaError_t record_fence(struct mg_buf *buf, intptr_t key,
				cudaStream_t s)
{
	struct mg_fence *f;
	unsigned i;

	for (i = 0; i < buf->nfences; i++)
		if (buf->fences[i].stream == key)
			break;
	if (i == buf->nalloc) {
		f = realloc(buf->fences, (i + 1) * sizeof(*f));
		if (!f)
			return cudaErrorMemoryAllocation;
		buf->fences = f;
		if (cudaEventCreateWithFlags((cudaEvent_t *)&f[i].event,
					     cudaEventDisableTiming) !=
		    cudaSuccess)
			return cudaGetLastError();
		buf->nalloc++;
	}
	buf->fences[i].stream = key;
	if (cudaEventRecord(buf->fences[i].event, s) != cudaSuccess)
		return cudaGetLastError();
	if (i == buf->nfences)
		buf->nfences++;
	return cudaSuccess;
}

/*
 * The consumer queued its last work on the buffer on stream before this
 * (a tensor's deleter, or the last release). Without a fence (no event,
 * the runtime failing) its work is waited for instead; if even that fails,
 * the buffer is marked so that it is freed (cudaFree waits for the
 * device), never reused.
 */
static void cu_fence(struct mg_ctx *ctx, struct mg_buf *buf, intptr_t stream)
{
	cudaStream_t s = fence_stream(stream);
	intptr_t key = (intptr_t)s;
	int saved;

	pthread_mutex_lock(&buf->fence_lock);
	if (enter(ctx, &saved) != 0 ||
	    (record_fence(buf, key, s) != cudaSuccess &&
	     cudaStreamSynchronize(s) != cudaSuccess)) {
		(void)cudaGetLastError();
		buf->unfenced = true;
	}
	leave(ctx, saved);
	pthread_mutex_unlock(&buf->fence_lock);
}

static int cu_acquire_fence(struct mg_ctx *ctx, void *stream,
			    struct mg_buf *buf)
{
	int saved, r;

	pthread_mutex_lock(&buf->fence_lock);
	r = enter(ctx, &saved);
	for (unsigned i = 0; !r && i < buf->nfences; i++)
		r = cuda_err(
		    cudaStreamWaitEvent(stream, buf->fences[i].event, 0));
	if (!r)
		buf->nfences = 0;
	leave(ctx, saved);
	pthread_mutex_unlock(&buf->fence_lock);
	return r;
}

const struct mg_backend mg_backend_cuda = {
    .name = "cuda",
    .dl_type = kDLCUDA,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .dev_alloc = cu_dev_alloc,
    .dev_free = cu_dev_free,
    .stream_new = cu_stream_new,
    .stream_free = cu_stream_free,
    .event_new = cu_event_new,
    .event_free = cu_event_free,
    .copy = cu_copy,
    .record = cu_record,
    .event_wait = cu_event_wait,
    .sync = cu_sync,
    .consume = cu_consume,
    .fence = cu_fence,
    .acquire_fence = cu_acquire_fence,
};
