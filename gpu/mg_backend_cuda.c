/*
 * mg_backend_cuda.c - the CUDA backend, on the CUDA runtime API: pinned
 * staging with cudaHostAlloc, device buffers with cudaMalloc, one
 * non-blocking stream per staging ring, cudaMemcpyAsync and events.
 *
 * Not for: kernels (there are none) or choosing between backends
 * (mg_ctx.c). Every function makes the context's device current and puts
 * the calling thread's device back, so callers' threads keep theirs.
 * cudaError_t is translated in cuda_err() only.
 */
#include <errno.h>

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

/* Makes ctx's device current; *saved is the caller's, for leave(). */
static int enter(const struct mg_ctx *ctx, int *saved)
{
	int cur = -1;

	if (cudaGetDevice(&cur) != cudaSuccess)
		cur = -1;
	*saved = cur;
	if (cur == ctx->device)
		return 0;
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

static void cu_dev_free(struct mg_ctx *ctx, void *p, void *event)
{
	int saved;

	if (enter(ctx, &saved) == 0) {
		(void)cudaFree(p);
		if (event)
			(void)cudaEventDestroy(event);
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

/*
 * The consumer of a buffer (a DLPack importer) queued its work on streams
 * we do not know; recording on the legacy default stream orders reuse after
 * everything queued there and on the streams that synchronize with it. On
 * failure (the runtime is being unloaded at exit) there is nothing to order.
 */
static void cu_release_fence(struct mg_ctx *ctx, void **event)
{
	cudaEvent_t ev = *event;
	int saved;

	if (enter(ctx, &saved) == 0) {
		if (!ev &&
		    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming))
			ev = NULL;
		if (ev && cudaEventRecord(ev, cudaStreamLegacy) != cudaSuccess)
			(void)cudaGetLastError();
		*event = ev;
	}
	leave(ctx, saved);
}

static int cu_acquire_fence(struct mg_ctx *ctx, void *stream, void *event)
{
	if (!event)
		return 0;
	RETURN_ON_DEVICE(ctx, cudaStreamWaitEvent(stream, event, 0));
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
    .release_fence = cu_release_fence,
    .acquire_fence = cu_acquire_fence,
};
