/*
 * mg_backend_cpu.c - the CPU backend: "device" buffers and staging buffers
 * are ordinary page-aligned memory, the copy to the device is a memcpy done
 * by the loading thread while the ring's I/O threads fill the other slots,
 * so streams and events are trivially complete.
 *
 * Not for: anything CUDA. This backend is always built and is what a
 * machine without a GPU (or device "cpu") runs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mg_i.h"

#define CPU_ALIGN 4096

/* Streams and events carry no state; a non-NULL token stands for them. */
static char cpu_token;

static int cpu_alloc(struct mg_ctx *ctx, size_t n, void **out)
{
	void *p;

	if (posix_memalign(&p, CPU_ALIGN, n ? n : 1))
		return -ENOMEM;
	*out = p;
	return 0;
}

static void cpu_free(struct mg_ctx *ctx, void *p)
{
	free(p);
}

static void cpu_dev_free(struct mg_ctx *ctx, struct mg_buf *buf)
{
	free(buf->data);
}

static int cpu_token_new(struct mg_ctx *ctx, void **out)
{
	*out = &cpu_token;
	return 0;
}

static void cpu_token_free(struct mg_ctx *ctx, void *token)
{
}

static int cpu_copy(struct mg_ctx *ctx, void *stream, void *dst,
		    const void *src, size_t n)
{
	memcpy(dst, src, n);
	return 0;
}

static int cpu_record(struct mg_ctx *ctx, void *event, void *stream)
{
	return 0;
}

static int cpu_wait(struct mg_ctx *ctx, void *token)
{
	return 0;
}

static int cpu_consume(struct mg_ctx *ctx, struct mg_buf *buf, intptr_t stream)
{
	return 0;
}

static void cpu_fence(struct mg_ctx *ctx, struct mg_buf *buf, intptr_t stream)
{
}

static int cpu_acquire_fence(struct mg_ctx *ctx, void *stream,
			     struct mg_buf *buf)
{
	return 0;
}

const struct mg_backend mg_backend_cpu = {
    .name = "cpu",
    .dl_type = kDLCPU,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .dev_alloc = cpu_alloc,
    .dev_free = cpu_dev_free,
    .stream_new = cpu_token_new,
    .stream_free = cpu_token_free,
    .event_new = cpu_token_new,
    .event_free = cpu_token_free,
    .copy = cpu_copy,
    .record = cpu_record,
    .event_wait = cpu_wait,
    .sync = cpu_wait,
    .consume = cpu_consume,
    .fence = cpu_fence,
    .acquire_fence = cpu_acquire_fence,
};
