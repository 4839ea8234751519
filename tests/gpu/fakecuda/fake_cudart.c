/*
 * fake_cudart.c - a stand-in for the CUDA runtime, with the real library's
 * soname and symbol version, loaded with LD_PRELOAD so that libmatgpu's
 * CUDA backend and bench_gpu run on machines without a GPU. "Device" memory
 * is host memory tagged with its device.
 *
 * What it models, as CUDA 12+ does:
 * - Primary contexts: one per device, created by the first call that needs
 *   one on the thread's current device (cudaSetDevice included), counted
 *   (fake_cudart_contexts()). A thread that never called cudaSetDevice has
 *   no current context; cudaGetDevice then answers 0 without creating one,
 *   and the driver's cuCtxGetCurrent (through cudaGetDriverEntryPoint*)
 *   answers NULL. The driver's cuDeviceGet, cuDevicePrimaryCtxRetain,
 *   cuCtxPushCurrent and cuCtxPopCurrent work on primary contexts: a
 *   thread's binding is put back exactly as it was by the pop.
 * - Streams: each is a worker thread running its operations late and in
 *   order (a copy sleeps FAKE_CUDART_COPY_DELAY_US, default 100, before it
 *   moves bytes), so an event completes only when the earlier work of its
 *   stream has. Each device has a legacy default stream; it and every
 *   blocking stream of the device are ordered with each other, as CUDA
 *   orders them; streams made with cudaStreamNonBlocking are not.
 * - Errors: a one-shot failure of a named call (fake_cudart_fail()), and an
 *   asynchronous one: the next copy fails on its stream, and that error is
 *   sticky: every later call on the device returns it. cudaGetLastError
 *   returns and clears the thread's last error (not a sticky one).
 * - cudaFree and cudaDeviceSynchronize wait for all work of the device;
 *   cudaFree calls are counted (fake_cudart_frees()).
 *
 * It aborts, naming the rule, when a caller breaks what a real GPU would
 * punish: using memory, a stream or an event with another device current,
 * an asynchronous host-to-device copy from memory that is not pinned,
 * touching past the end of a device buffer, freeing what was not allocated.
 *
 * Environment: FAKE_CUDART_DEVICES (default 1; 0 means no device),
 * FAKE_CUDART_MEM_LIMIT (bytes of device memory per device; default none),
 * FAKE_CUDART_COPY_DELAY_US.
 *
 * Not for: anything but the tests of tests/gpu. The fake_cudart_* functions
 * are for tests, which find them with dlsym.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "fake_cudart.h"

#define MAX_DEVICES 8

struct alloc {
	char *base;
	size_t size;
	int device; /* -1 for pinned host memory */
	struct alloc *next;
};

enum op_kind { OP_COPY, OP_RECORD, OP_WAIT, OP_SLEEP };

struct fevent {
	int device;
	bool implicit; /* made by the fake for stream ordering */
	uint64_t recorded, completed;
};

struct op {
	enum op_kind kind;
	void *dst;
	const void *src;
	size_t n; /* bytes, or microseconds for OP_SLEEP */
	bool fail; /* an injected asynchronous failure */
	struct fevent *ev;
	uint64_t gen;
	struct op *next;
};

struct fstream {
	int device;
	bool legacy, nonblocking;
	pthread_t thread;
	struct op *head, *tail;
	int busy, quit;
	struct fstream *next; /* streams */
};

/* One lock and one condition for the whole fake: speed does not matter. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct alloc *allocs;
static struct fstream *streams; /* every live stream, legacy ones too */
static size_t used[MAX_DEVICES];
static int contexts[MAX_DEVICES];
static struct fstream *legacy[MAX_DEVICES];
static cudaError_t sticky[MAX_DEVICES];
static long frees;
/* Injected failures: the next call named fail_call returns fail_err. */
static char fail_call[64];
static cudaError_t fail_err;
static int fail_async; /* the next copy fails on its stream */
static unsigned copy_delay_us; /* fake_cudart_copy_delay(); 0: environment */
static _Thread_local int current;
static _Thread_local bool bound; /* the thread has a current context */
static _Thread_local cudaError_t last_error;

static void violation(const char *rule)
{
	fprintf(stderr, "fake_cudart: %s\n", rule);
	abort();
}

static int device_count(void)
{
	const char *s = getenv("FAKE_CUDART_DEVICES");
	int n = s ? atoi(s) : 1;

	return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

/* Counts the primary contexts created on device so far. */
int fake_cudart_contexts(int device)
{
	int n;

	pthread_mutex_lock(&lock);
	n = device >= 0 && device < MAX_DEVICES ? contexts[device] : 0;
	pthread_mutex_unlock(&lock);
	return n;
}

long fake_cudart_frees(void)
{
	long n;

	pthread_mutex_lock(&lock);
	n = frees;
	pthread_mutex_unlock(&lock);
	return n;
}

/* Every later copy takes us microseconds (0: FAKE_CUDART_COPY_DELAY_US or
 * its default again). */
void fake_cudart_copy_delay(unsigned us)
{
	pthread_mutex_lock(&lock);
	copy_delay_us = us;
	pthread_mutex_unlock(&lock);
}

/* The next call of the function named call returns err (one shot); call
 * "async" makes the next queued copy fail on its stream with err, which
 * then sticks to the device. */
void fake_cudart_fail(const char *call, cudaError_t err)
{
	pthread_mutex_lock(&lock);
	if (strcmp(call, "async") == 0) {
		fail_async = 1;
		fail_err = err;
	} else {
		snprintf(fail_call, sizeof(fail_call), "%s", call);
		fail_err = err;
	}
	pthread_mutex_unlock(&lock);
}

static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

static void *stream_main(void *arg);

/* A new stream of device, its worker started; lock held. */
static struct fstream *stream_new(int device, bool is_legacy, bool nonblock)
{
	struct fstream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->device = device;
	s->legacy = is_legacy;
	s->nonblocking = nonblock;
	if (pthread_create(&s->thread, NULL, stream_main, s)) {
		free(s);
		return NULL;
	}
	s->next = streams;
	streams = s;
	return s;
}

/* Creates device's primary context on first use; lock held. */
static void primary(int device)
{
	if (!contexts[device]) {
		contexts[device]++;
		legacy[device] = stream_new(device, true, false);
		if (!legacy[device])
			abort();
	}
}

/*
 * What every call that needs a context does first: binds the thread to its
 * current device (0 when it never chose one), creating the device's primary
 * context on first use, and answers the device's sticky error or an
 * injected failure of call. lock held.
 */
static cudaError_t enter(const char *call)
{
	bound = true;
	primary(current);
	if (sticky[current])
		return sticky[current];
	if (fail_call[0] && strcmp(fail_call, call) == 0) {
		fail_call[0] = '\0';
		return fail_err;
	}
	return cudaSuccess;
}

/* The allocation holding [p, p + n); lock held. */
static struct alloc *find(const void *p, size_t n)
{
	for (struct alloc *a = allocs; a; a = a->next)
		if ((const char *)p >= a->base &&
		    (const char *)p + n <= a->base + a->size)
			return a;
	return NULL;
}

static cudaError_t add_alloc(void **out, size_t size, bool host,
			     const char *call)
{
	const char *lim = getenv("FAKE_CUDART_MEM_LIMIT");
	struct alloc *a;
	cudaError_t e;
	int device;

	pthread_mutex_lock(&lock);
	e = enter(call);
	device = host ? -1 : current;
	if (!e && device >= 0 && lim &&
	    used[device] + size > strtoull(lim, 0, 10))
		e = cudaErrorMemoryAllocation;
	a = e ? NULL : calloc(1, sizeof(*a));
	if (!e &&
	    (!a || posix_memalign((void **)&a->base, 256, size ? size : 1))) {
		free(a);
		e = cudaErrorMemoryAllocation;
	}
	if (e) {
		pthread_mutex_unlock(&lock);
		return ret(e);
	}
	a->size = size;
	a->device = device;
	a->next = allocs;
	allocs = a;
	if (device >= 0)
		used[device] += size;
	pthread_mutex_unlock(&lock);
	*out = a->base;
	return cudaSuccess;
}

/* Waits until every stream of device ran all its work; lock held. */
static void device_idle(int device)
{
	bool busy;

	do {
		busy = false;
		for (struct fstream *s = streams; s; s = s->next)
			busy |= s->device == device && (s->head || s->busy);
		if (busy)
			pthread_cond_wait(&cond, &lock);
	} while (busy);
}

static cudaError_t remove_alloc(void *p, bool host, const char *call)
{
	struct alloc **pp, *a;
	cudaError_t e;

	pthread_mutex_lock(&lock);
	e = enter(call);
	frees += !host && !e;
	/* cudaFree synchronizes the device. Freed even when failing (a
	 * sticky error), so that tests of failures leak nothing: then too
	 * only once no queued copy can touch the memory. */
	if (!host)
		device_idle(current);
	if (!p) {
		pthread_mutex_unlock(&lock);
		return ret(e);
	}
	for (pp = &allocs; (a = *pp) != NULL; pp = &a->next)
		if (a->base == p)
			break;
	if (!a || (a->device < 0) != host)
		violation("free of memory not allocated so");
	if (!host && a->device != current)
		violation("cudaFree with another device current");
	*pp = a->next;
	if (a->device >= 0)
		used[a->device] -= a->size;
	pthread_mutex_unlock(&lock);
	free(a->base);
	free(a);
	return ret(e);
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = device_count();
	return *count ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
	cudaError_t e;

	if (device < 0 || device >= device_count())
		return ret(cudaErrorInvalidDevice);
	pthread_mutex_lock(&lock);
	current = device;
	e = enter("cudaSetDevice");
	pthread_mutex_unlock(&lock);
	return ret(e);
}

cudaError_t cudaGetDevice(int *device)
{
	*device = current;
	return cudaSuccess;
}

/*
 * The driver's context calls, for primary contexts only: a context handle
 * is its device + 1. The thread's context stack is its current binding
 * (current, bound) over the ones saved by cuCtxPushCurrent.
 */
#define CU_ERROR_INVALID_VALUE 1
#define CU_ERROR_INVALID_DEVICE 101
#define CU_ERROR_INVALID_CONTEXT 201
#define MAX_PUSHED 16

static _Thread_local struct {
	int current;
	bool bound;
} pushed[MAX_PUSHED];
static _Thread_local int npushed;

static int fake_cu_ctx_get_current(void **ctx)
{
	*ctx = bound ? (void *)(uintptr_t)(current + 1) : NULL;
	return 0;
}

static int fake_cu_device_get(int *dev, int ordinal)
{
	if (ordinal < 0 || ordinal >= device_count())
		return CU_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return 0;
}

static int fake_cu_primary_retain(void **ctx, int dev)
{
	if (dev < 0 || dev >= device_count())
		return CU_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&lock);
	primary(dev);
	pthread_mutex_unlock(&lock);
	*ctx = (void *)(uintptr_t)(dev + 1);
	return 0;
}

static int fake_cu_ctx_push(void *ctx)
{
	int dev = (int)(uintptr_t)ctx - 1;

	if (dev < 0 || dev >= device_count() || npushed == MAX_PUSHED)
		return CU_ERROR_INVALID_CONTEXT;
	pushed[npushed].current = current;
	pushed[npushed].bound = bound;
	npushed++;
	current = dev;
	bound = true;
	return 0;
}

static int fake_cu_ctx_pop(void **ctx)
{
	if (npushed == 0 || !bound)
		return CU_ERROR_INVALID_CONTEXT;
	if (ctx)
		*ctx = (void *)(uintptr_t)(current + 1);
	npushed--;
	current = pushed[npushed].current;
	bound = pushed[npushed].bound;
	return 0;
}

static cudaError_t entry_point(const char *symbol, void **fn,
			       enum cudaDriverEntryPointQueryResult *status)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} syms[] = {
	    {"cuCtxGetCurrent", (void (*)(void))fake_cu_ctx_get_current},
	    {"cuDeviceGet", (void (*)(void))fake_cu_device_get},
	    {"cuDevicePrimaryCtxRetain",
	     (void (*)(void))fake_cu_primary_retain},
	    {"cuCtxPushCurrent", (void (*)(void))fake_cu_ctx_push},
	    {"cuCtxPopCurrent", (void (*)(void))fake_cu_ctx_pop},
	};

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		if (strcmp(symbol, syms[i].name) == 0) {
			memcpy(fn, &syms[i].fn, sizeof(*fn));
			if (status)
				*status = cudaDriverEntryPointSuccess;
			return cudaSuccess;
		}
	}
	*fn = NULL;
	if (status)
		*status = cudaDriverEntryPointSymbolNotFound;
	return cudaSuccess;
}

cudaError_t
cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
				 unsigned int version, unsigned long long flags,
				 enum cudaDriverEntryPointQueryResult *status)
{
	(void)version;
	(void)flags;
	return entry_point(symbol, fn, status);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "fake device %d", device);
	return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "cudaSuccess";
	case cudaErrorMemoryAllocation:
		return "cudaErrorMemoryAllocation";
	case cudaErrorInvalidDevice:
		return "cudaErrorInvalidDevice";
	case cudaErrorNoDevice:
		return "cudaErrorNoDevice";
	case cudaErrorIllegalAddress:
		return "cudaErrorIllegalAddress";
	case cudaErrorLaunchFailure:
		return "cudaErrorLaunchFailure";
	default:
		return "cudaErrorUnknown";
	}
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	pthread_mutex_lock(&lock);
	if (bound && sticky[current])
		e = sticky[current];
	else
		last_error = cudaSuccess;
	pthread_mutex_unlock(&lock);
	return e;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
	return add_alloc(p, size, false, "cudaMalloc");
}

cudaError_t cudaFree(void *p)
{
	return remove_alloc(p, false, "cudaFree");
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
	(void)flags;
	return add_alloc(p, size, true, "cudaHostAlloc");
}

cudaError_t cudaFreeHost(void *p)
{
	return remove_alloc(p, true, "cudaFreeHost");
}

/* Runs one queued operation of s; lock held on entry and exit. */
static void run_op(struct fstream *s, struct op *op)
{
	const char *d = getenv("FAKE_CUDART_COPY_DELAY_US");
	useconds_t us = copy_delay_us ? copy_delay_us
	    : d			      ? (useconds_t)atoi(d)
				      : 100;

	switch (op->kind) {
	case OP_COPY:
		pthread_mutex_unlock(&lock);
		usleep(us); /* a late copy engine */
		if (!op->fail)
			memcpy(op->dst, op->src, op->n);
		pthread_mutex_lock(&lock);
		if (op->fail)
			sticky[s->device] = fail_err;
		break;
	case OP_SLEEP:
		pthread_mutex_unlock(&lock);
		usleep((useconds_t)op->n);
		pthread_mutex_lock(&lock);
		break;
	case OP_RECORD:
		if (op->ev->completed < op->gen)
			op->ev->completed = op->gen;
		break;
	case OP_WAIT:
		while (op->ev->completed < op->gen)
			pthread_cond_wait(&cond, &lock);
		if (op->ev->implicit)
			free(op->ev);
		break;
	}
}

static void *stream_main(void *arg)
{
	struct fstream *s = arg;
	struct op *op;

	pthread_mutex_lock(&lock);
	for (;;) {
		while (!s->head && !s->quit)
			pthread_cond_wait(&cond, &lock);
		if (!s->head)
			break;
		op = s->head;
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = 1;
		run_op(s, op);
		free(op);
		s->busy = 0;
		pthread_cond_broadcast(&cond);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

static struct op *new_op(enum op_kind kind)
{
	struct op *op = calloc(1, sizeof(*op));

	if (!op)
		abort();
	op->kind = kind;
	return op;
}

static void push(struct fstream *s, struct op *op)
{
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	pthread_cond_broadcast(&cond);
}

/* Makes to wait for the work queued on from so far; lock held. */
static void order_after(struct fstream *to, struct fstream *from)
{
	struct fevent *e = calloc(1, sizeof(*e));
	struct op *rec = new_op(OP_RECORD), *wait = new_op(OP_WAIT);

	if (!e)
		abort();
	e->implicit = true;
	e->recorded = 1;
	rec->ev = wait->ev = e;
	rec->gen = wait->gen = 1;
	push(from, rec);
	push(to, wait);
}

/* The stream a handle names, with the implicit ordering of the legacy
 * stream; lock held. */
static struct fstream *resolve(cudaStream_t stream)
{
	/* The per-thread default stream is taken for the legacy one. */
	if (stream == NULL || stream == cudaStreamLegacy ||
	    stream == cudaStreamPerThread)
		return legacy[current];
	return (struct fstream *)stream;
}

/* Queues op on stream after what CUDA orders it after; lock held. */
static void enqueue(cudaStream_t stream, struct op *op)
{
	struct fstream *s = resolve(stream);

	if (s->device != current)
		violation("stream used with another device current");
	if (s->legacy) {
		for (struct fstream *o = streams; o; o = o->next)
			if (o != s && o->device == s->device && !o->nonblocking)
				order_after(s, o);
	} else if (!s->nonblocking) {
		order_after(s, legacy[s->device]);
	}
	push(s, op);
}

/* Adds an OP_SLEEP of us microseconds to stream: a kernel, for tests. */
void fake_cudart_stream_sleep(cudaStream_t stream, unsigned us)
{
	struct op *op = new_op(OP_SLEEP);

	op->n = us;
	pthread_mutex_lock(&lock);
	(void)enter("sleep");
	enqueue(stream, op);
	pthread_mutex_unlock(&lock);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags)
{
	struct fstream *s = NULL;
	cudaError_t e;

	pthread_mutex_lock(&lock);
	e = enter("cudaStreamCreateWithFlags");
	if (!e) {
		s = stream_new(current, false, flags & cudaStreamNonBlocking);
		e = s ? cudaSuccess : cudaErrorMemoryAllocation;
	}
	pthread_mutex_unlock(&lock);
	if (!e)
		*out = (cudaStream_t)s;
	return ret(e);
}

cudaError_t cudaStreamCreate(cudaStream_t *out)
{
	return cudaStreamCreateWithFlags(out, cudaStreamDefault);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	struct fstream *s;
	cudaError_t e;

	pthread_mutex_lock(&lock);
	e = enter("cudaStreamSynchronize");
	s = resolve(stream);
	if (s->device != current)
		violation("stream synchronized with another device current");
	while (s->head || s->busy)
		pthread_cond_wait(&cond, &lock);
	if (!e)
		e = sticky[current];
	pthread_mutex_unlock(&lock);
	return ret(e);
}

cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t e;

	pthread_mutex_lock(&lock);
	e = enter("cudaDeviceSynchronize");
	device_idle(current);
	if (!e)
		e = sticky[current];
	pthread_mutex_unlock(&lock);
	return ret(e);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	struct fstream *s = (struct fstream *)stream, **pp;

	pthread_mutex_lock(&lock);
	(void)enter("cudaStreamDestroy");
	if (s->device != current || s->legacy)
		violation("stream destroyed with another device current");
	s->quit = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	/* Work queued before runs to its end, as on a GPU. */
	pthread_join(s->thread, NULL);
	pthread_mutex_lock(&lock);
	for (pp = &streams; *pp != s; pp = &(*pp)->next)
		;
	*pp = s->next;
	pthread_mutex_unlock(&lock);
	free(s);
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
	struct fevent *ev = NULL;
	cudaError_t e;

	(void)flags;
	pthread_mutex_lock(&lock);
	e = enter("cudaEventCreateWithFlags");
	if (!e) {
		ev = calloc(1, sizeof(*ev));
		e = ev ? cudaSuccess : cudaErrorMemoryAllocation;
	}
	if (ev)
		ev->device = current;
	pthread_mutex_unlock(&lock);
	if (!e)
		*out = (cudaEvent_t)ev;
	return ret(e);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	pthread_mutex_lock(&lock);
	(void)enter("cudaEventDestroy");
	pthread_mutex_unlock(&lock);
	free(event);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	struct fevent *ev = (struct fevent *)event;
	struct op *op;
	cudaError_t e;

	pthread_mutex_lock(&lock);
	e = enter("cudaEventRecord");
	if (ev->device != current)
		violation("event recorded with another device current");
	if (!e) {
		ev->recorded++;
		op = new_op(OP_RECORD);
		op->ev = ev;
		op->gen = ev->recorded;
		enqueue(stream, op);
	}
	pthread_mutex_unlock(&lock);
	return ret(e);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	struct fevent *ev = (struct fevent *)event;
	uint64_t gen;
	cudaError_t e;

	pthread_mutex_lock(&lock);
	e = enter("cudaEventSynchronize");
	gen = ev->recorded;
	while (ev->completed < gen)
		pthread_cond_wait(&cond, &lock);
	if (!e)
		e = sticky[current];
	pthread_mutex_unlock(&lock);
	return ret(e);
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	struct fevent *ev = (struct fevent *)event;
	cudaError_t e;

	pthread_mutex_lock(&lock);
	e = enter("cudaEventQuery");
	if (!e && ev->completed < ev->recorded)
		e = cudaErrorNotReady;
	pthread_mutex_unlock(&lock);
	return e == cudaErrorNotReady ? e : ret(e);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
				unsigned int flags)
{
	struct fevent *ev = (struct fevent *)event;
	struct op *op;
	cudaError_t e;

	(void)flags;
	pthread_mutex_lock(&lock);
	e = enter("cudaStreamWaitEvent");
	if (!e) {
		op = new_op(OP_WAIT);
		op->ev = ev;
		op->gen = ev->recorded;
		enqueue(stream, op);
	}
	pthread_mutex_unlock(&lock);
	return ret(e);
}

/* Checks a copy's memory and queues it on stream; lock held. */
static cudaError_t queue_copy(void *dst, const void *src, size_t n,
			      enum cudaMemcpyKind kind, cudaStream_t stream,
			      bool async)
{
	struct alloc *d = find(dst, n), *h = find(src, n);
	bool to_dev =
	    kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	bool from_dev =
	    kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
	struct op *op;

	if (to_dev && (!d || d->device != current))
		violation("copy to memory not on the current device");
	if (from_dev && (!h || h->device != current))
		violation("copy from memory not on the current device");
	if (async && kind == cudaMemcpyHostToDevice && (!h || h->device != -1))
		violation("asynchronous copy from memory that is not pinned");
	op = new_op(OP_COPY);
	op->dst = dst;
	op->src = src;
	op->n = n;
	op->fail = fail_async;
	fail_async = 0;
	enqueue(stream, op);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
			    enum cudaMemcpyKind kind, cudaStream_t stream)
{
	cudaError_t e;

	pthread_mutex_lock(&lock);
	e = enter("cudaMemcpyAsync");
	if (!e)
		e = queue_copy(dst, src, n, kind, stream, true);
	pthread_mutex_unlock(&lock);
	return ret(e);
}

/* On the legacy stream, and waits for it. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
		       enum cudaMemcpyKind kind)
{
	cudaError_t e;
	struct fstream *s;

	pthread_mutex_lock(&lock);
	e = enter("cudaMemcpy");
	if (!e)
		e = queue_copy(dst, src, n, kind, cudaStreamLegacy, false);
	s = legacy[current];
	while (s->head || s->busy)
		pthread_cond_wait(&cond, &lock);
	if (!e)
		e = sticky[current];
	pthread_mutex_unlock(&lock);
	return ret(e);
}
