/*
 * mg_backend_cuda.c - the CUDA backend, on the CUDA runtime API: pinned
 * staging with cudaHostAlloc, device buffers with cudaMalloc, one
 * non-blocking stream per staging ring, cudaMemcpyAsync and events.
 *
 * Not for: kernels (there are none) or choosing between backends
 * (mg_ctx.c). Every function makes the context's device current and
 * leaves the calling thread as it found it (see enter()).
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

/*
 * The driver's context calls, reached through the runtime (no libcuda
 * link). With them a thread gets the context's device by pushing that
 * device's primary context (the one the runtime uses) and is left exactly
 * as found by popping it: a thread that had no current context still has
 * none, so cudaGetDevice, torch.cuda.current_device() and matgpu's
 * device="cuda" still answer what they did.
 */
typedef int (*cu_ctx_get_current_fn)(void **ctx);
typedef int (*cu_device_get_fn)(int *dev, int ordinal);
typedef int (*cu_primary_retain_fn)(void **ctx, int dev);
typedef int (*cu_ctx_push_fn)(void *ctx);
typedef int (*cu_ctx_pop_fn)(void **ctx);

#define MAX_PRIMARY 64

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static struct {
	cu_ctx_get_current_fn get_current;
	cu_device_get_fn device_get;
	cu_primary_retain_fn primary_retain;
	cu_ctx_push_fn push;
	cu_ctx_pop_fn pop;
} drv;
/* Retained once per device and kept for the process: the runtime would
 * keep it too after a cudaSetDevice. */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(void *) primary[MAX_PRIMARY];

static void *driver_fn(const char *name)
{
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
	void *fn = NULL;
	cudaError_t e;

#if CUDART_VERSION >= 12050
	e = cudaGetDriverEntryPointByVersion(name, &fn, 12000,
					     cudaEnableDefault, &q);
#else
	e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
	if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	return fn;
}

static void find_driver(void)
{
	void *fn[5] = {driver_fn("cuCtxGetCurrent"), driver_fn("cuDeviceGet"),
		       driver_fn("cuDevicePrimaryCtxRetain"),
		       driver_fn("cuCtxPushCurrent"),
		       driver_fn("cuCtxPopCurrent")};

	for (int i = 0; i < 5; i++)
		if (!fn[i])
			return;
	memcpy(&drv.get_current, &fn[0], sizeof(fn[0]));
	memcpy(&drv.device_get, &fn[1], sizeof(fn[1]));
	memcpy(&drv.primary_retain, &fn[2], sizeof(fn[2]));
	memcpy(&drv.push, &fn[3], sizeof(fn[3]));
	memcpy(&drv.pop, &fn[4], sizeof(fn[4]));
}

/* device's primary context, retained on first use; NULL when the driver
 * cannot give it (then the runtime's cudaSetDevice is used). */
static void *primary_ctx(int device)
{
	void *c;
	int dev;

	if (device < 0 || device >= MAX_PRIMARY)
		return NULL;
	c = atomic_load(&primary[device]);
	if (c)
		return c;
	pthread_mutex_lock(&primary_lock);
	c = atomic_load(&primary[device]);
	if (!c && drv.device_get(&dev, device) == 0 &&
	    drv.primary_retain(&c, dev) == 0)
		atomic_store(&primary[device], c);
	pthread_mutex_unlock(&primary_lock);
	return c;
}

/* enter()'s record of what leave() undoes: a pushed context, a device to
 * put back, or nothing. */
#define SAVED_NONE (-1)
#define SAVED_PUSHED (-2)

/*
 * Makes ctx's device current. Where the driver can be asked, the calling
 * thread is left exactly as found: when its current context is not the
 * device's primary context, that one is pushed and leave() pops it, so
 * no context is ever created on a device nobody asked for and the
 * thread's device does not change. Without the driver, cudaSetDevice is
 * used and the device cudaGetDevice reported is put back.
 */
static int enter(const struct mg_ctx *ctx, int *saved)
{
	void *want, *cur = NULL;
	int dev = -1;

	*saved = SAVED_NONE;
	pthread_once(&driver_once, find_driver);
	want = drv.get_current ? primary_ctx(ctx->device) : NULL;
	if (want) {
		if (drv.get_current(&cur) == 0 && cur == want)
			return 0;
		if (drv.push(want) != 0)
			return cuda_err(cudaErrorInvalidResourceHandle);
		*saved = SAVED_PUSHED;
		return 0;
	}
	if (cudaGetDevice(&dev) != cudaSuccess)
		dev = -1;
	if (dev == ctx->device)
		return 0;
	*saved = dev;
	return cuda_err(cudaSetDevice(ctx->device));
}

static void leave(const struct mg_ctx *ctx, int saved)
{
	void *c;

	if (saved == SAVED_PUSHED)
		(void)drv.pop(&c);
	else if (saved >= 0 && saved != ctx->device)
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

/* Waits for the work a fence on s would have covered. Synchronizing the
 * legacy stream does not wait for the blocking streams ordered with it
 * (only work queued on it does), so for it the whole device is waited
 * for. */
static cudaError_t fence_sync(cudaStream_t s)
{
	return s == cudaStreamLegacy ? cudaDeviceSynchronize()
				     : cudaStreamSynchronize(s);
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
	     fence_sync(s) != cudaSuccess)) {
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
