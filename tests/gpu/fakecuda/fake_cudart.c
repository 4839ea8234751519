/*
 * fake_cudart.c - a stand-in for the CUDA runtime, with the real library's
 * soname and symbol version, loaded with LD_PRELOAD so that libmatgpu's
 * CUDA backend and bench_gpu run on machines without a GPU. "Device" memory
 * is host memory tagged with its device; a stream is a thread that runs its
 * copies late (so a staging buffer rewritten before its copy ran shows as
 * wrong bytes); events follow stream order.
 *
 * It aborts, naming the rule, when a caller breaks what a real GPU would
 * punish: using memory or a stream with another device current, an
 * asynchronous copy from memory that is not pinned or past the end of a
 * device buffer, freeing what was not allocated.
 *
 * Environment: FAKE_CUDART_DEVICES (default 1; 0 means no device),
 * FAKE_CUDART_MEM_LIMIT (bytes of device memory per device; default none).
 *
 * Not for: anything but the tests of tests/gpu.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define MAX_DEVICES 8

struct alloc {
	char *base;
	size_t size;
	int device; /* -1 for pinned host memory */
	struct alloc *next;
};

enum op_kind { OP_COPY, OP_RECORD, OP_WAIT };

struct op {
	enum op_kind kind;
	void *dst;
	const void *src;
	size_t n;
	struct fevent *ev;
	uint64_t gen;
	struct op *next;
};

struct fevent {
	int device;
	uint64_t recorded, completed;
};

struct fstream {
	int device;
	pthread_t thread;
	struct op *head, *tail;
	int busy, quit;
};

/* One lock and one condition for the whole fake: speed does not matter. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct alloc *allocs;
static size_t used[MAX_DEVICES];
static _Thread_local int current;

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

/* The allocation holding [p, p + n); lock held. */
static struct alloc *find(const void *p, size_t n)
{
	for (struct alloc *a = allocs; a; a = a->next)
		if ((const char *)p >= a->base &&
		    (const char *)p + n <= a->base + a->size)
			return a;
	return NULL;
}

static cudaError_t add_alloc(void **out, size_t size, int device)
{
	const char *lim = getenv("FAKE_CUDART_MEM_LIMIT");
	struct alloc *a;

	pthread_mutex_lock(&lock);
	if (device >= 0 && lim && used[device] + size > strtoull(lim, 0, 10)) {
		pthread_mutex_unlock(&lock);
		return cudaErrorMemoryAllocation;
	}
	a = calloc(1, sizeof(*a));
	if (!a || posix_memalign((void **)&a->base, 256, size ? size : 1)) {
		pthread_mutex_unlock(&lock);
		free(a);
		return cudaErrorMemoryAllocation;
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

static cudaError_t remove_alloc(void *p, int host)
{
	struct alloc **pp, *a;

	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&lock);
	for (pp = &allocs; (a = *pp) != NULL; pp = &a->next)
		if (a->base == p)
			break;
	if (!a || (a->device < 0) != host)
		violation("free of memory not allocated so");
	*pp = a->next;
	if (a->device >= 0)
		used[a->device] -= a->size;
	pthread_mutex_unlock(&lock);
	free(a->base);
	free(a);
	return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = device_count();
	return *count ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device)
{
	if (device < 0 || device >= device_count())
		return cudaErrorInvalidDevice;
	current = device;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
	*device = current;
	return cudaSuccess;
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
	default:
		return "cudaErrorUnknown";
	}
}

cudaError_t cudaGetLastError(void)
{
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
	return add_alloc(p, size, current);
}

cudaError_t cudaFree(void *p)
{
	return remove_alloc(p, 0);
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
	(void)flags;
	return add_alloc(p, size, -1);
}

cudaError_t cudaFreeHost(void *p)
{
	return remove_alloc(p, 1);
}

/* Runs one queued operation; lock held on entry and exit. */
static void run_op(struct op *op)
{
	switch (op->kind) {
	case OP_COPY:
		pthread_mutex_unlock(&lock);
		usleep(100); /* late, as a copy engine can be */
		memcpy(op->dst, op->src, op->n);
		pthread_mutex_lock(&lock);
		break;
	case OP_RECORD:
		if (op->ev->completed < op->gen)
			op->ev->completed = op->gen;
		break;
	case OP_WAIT:
		while (op->ev->completed < op->gen)
			pthread_cond_wait(&cond, &lock);
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
		run_op(op);
		free(op);
		s->busy = 0;
		pthread_cond_broadcast(&cond);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* Queues op on s; lock held. */
static void enqueue(struct fstream *s, struct op *op)
{
	if (s->device != current)
		violation("stream used with another device current");
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	pthread_cond_broadcast(&cond);
}

static struct op *new_op(enum op_kind kind)
{
	struct op *op = calloc(1, sizeof(*op));

	if (!op)
		abort();
	op->kind = kind;
	return op;
}

static int is_default(cudaStream_t s)
{
	return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags)
{
	struct fstream *s = calloc(1, sizeof(*s));

	(void)flags;
	if (!s)
		return cudaErrorMemoryAllocation;
	s->device = current;
	if (pthread_create(&s->thread, NULL, stream_main, s)) {
		free(s);
		return cudaErrorMemoryAllocation;
	}
	*out = (cudaStream_t)s;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	struct fstream *s = (struct fstream *)stream;

	if (is_default(stream))
		return cudaSuccess;
	pthread_mutex_lock(&lock);
	while (s->head || s->busy)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	struct fstream *s = (struct fstream *)stream;

	pthread_mutex_lock(&lock);
	if (s->device != current)
		violation("stream destroyed with another device current");
	s->quit = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	pthread_join(s->thread, NULL);
	free(s);
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
	struct fevent *e = calloc(1, sizeof(*e));

	(void)flags;
	if (!e)
		return cudaErrorMemoryAllocation;
	e->device = current;
	*out = (cudaEvent_t)e;
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	free(event);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	struct fevent *e = (struct fevent *)event;
	struct op *op;

	pthread_mutex_lock(&lock);
	if (e->device != current)
		violation("event recorded with another device current");
	e->recorded++;
	if (is_default(stream)) {
		/* Nothing runs on the default stream in this fake. */
		e->completed = e->recorded;
		pthread_cond_broadcast(&cond);
	} else {
		op = new_op(OP_RECORD);
		op->ev = e;
		op->gen = e->recorded;
		enqueue((struct fstream *)stream, op);
	}
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	struct fevent *e = (struct fevent *)event;

	pthread_mutex_lock(&lock);
	while (e->completed < e->recorded)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
				unsigned int flags)
{
	struct fevent *e = (struct fevent *)event;
	struct op *op = new_op(OP_WAIT);

	(void)flags;
	pthread_mutex_lock(&lock);
	op->ev = e;
	op->gen = e->recorded;
	enqueue((struct fstream *)stream, op);
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
			    enum cudaMemcpyKind kind, cudaStream_t stream)
{
	struct alloc *d, *h;
	struct op *op;

	if (kind != cudaMemcpyHostToDevice || is_default(stream))
		violation("only host-to-device copies on a stream are faked");
	pthread_mutex_lock(&lock);
	d = find(dst, n);
	h = find(src, n);
	if (!d || d->device != current)
		violation("copy to memory not on the current device");
	if (!h || h->device != -1)
		violation("asynchronous copy from memory that is not pinned");
	op = new_op(OP_COPY);
	op->dst = dst;
	op->src = src;
	op->n = n;
	enqueue((struct fstream *)stream, op);
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
		       enum cudaMemcpyKind kind)
{
	(void)kind;
	memcpy(dst, src, n);
	return cudaSuccess;
}
