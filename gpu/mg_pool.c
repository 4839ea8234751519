/*
 * mg_pool.c - libmatgpu's device buffers and the per-context pool that
 * keeps released ones for reuse, so that a steady stream of loads does no
 * device allocation.
 *
 * Not for: filling buffers (mg_ring.c) or exporting them (mg_dlpack.c).
 * Buffers are matched by size class: a class is the size rounded up to a
 * quarter of its power of two, so reuse wastes at most 1/4 of a buffer.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "mg_i.h"

size_t mg_size_class(size_t size)
{
	size_t step;
	int k;

	if (size <= MG_MIN_CAPACITY)
		return MG_MIN_CAPACITY;
	if (size > SIZE_MAX / 2)
		return 0;
	k = 63 - __builtin_clzll((unsigned long long)(size - 1));
	step = (size_t)1 << (k - 2);
	return (size + step - 1) & ~(step - 1);
}

static void free_list(struct mg_ctx *ctx, struct mg_buf *b)
{
	struct mg_buf *next;

	for (; b; b = next) {
		next = b->next;
		ctx->be->dev_free(ctx, b);
		pthread_mutex_destroy(&b->fence_lock);
		free(b->fences);
		free(b);
	}
}

/* Unlinks a cached buffer of capacity cap; ctx->lock held. */
static struct mg_buf *take_cached(struct mg_ctx *ctx, size_t cap)
{
	struct mg_buf **pp, *b;

	for (pp = &ctx->free_bufs; (b = *pp) != NULL; pp = &b->next) {
		if (b->cap == cap) {
			*pp = b->next;
			ctx->stats.bytes_cached -= cap;
			ctx->stats.pool_hits++;
			return b;
		}
	}
	return NULL;
}

static int alloc_buf(struct mg_ctx *ctx, size_t cap, struct mg_buf **out)
{
	struct mg_buf *b = calloc(1, sizeof(*b));
	int r;

	if (!b)
		return -ENOMEM;
	r = ctx->be->dev_alloc(ctx, cap, &b->data);
	if (r == -ENOMEM) {
		mg_pool_drain(ctx);
		r = ctx->be->dev_alloc(ctx, cap, &b->data);
	}
	if (r) {
		free(b);
		return r;
	}
	mg_mutex_init(&b->fence_lock);
	b->cap = cap;
	*out = b;
	return 0;
}

int mg_pool_get(struct mg_ctx *ctx, size_t size, struct mg_buf **out)
{
	size_t cap = mg_size_class(size);
	struct mg_buf *b;
	bool fresh = false;
	int r;

	if (cap < size)
		return -ENOMEM;
	mg_pool_reap(ctx);
	pthread_mutex_lock(&ctx->lock);
	b = take_cached(ctx, cap);
	pthread_mutex_unlock(&ctx->lock);
	if (!b) {
		r = alloc_buf(ctx, cap, &b);
		if (r)
			return r;
		fresh = true;
	}
	pthread_mutex_lock(&ctx->lock);
	ctx->stats.device_allocs += fresh;
	ctx->stats.bytes_in_use += cap;
	if (ctx->stats.bytes_in_use > ctx->stats.peak_in_use)
		ctx->stats.peak_in_use = ctx->stats.bytes_in_use;
	pthread_mutex_unlock(&ctx->lock);
	mg_ctx_ref(ctx);
	b->ctx = ctx;
	b->size = size;
	b->budget = NULL;
	b->next = NULL;
	atomic_init(&b->refs, 1);
	*out = b;
	return 0;
}

/*
 * Takes back a released buffer. Called from mg_buf_release(), which may be
 * a DLPack deleter on a consumer's thread: buffers evicted over the pool's
 * limit (and one whose release could not be fenced) go to ctx->doomed, and
 * the next load, trim or the context's end frees them, since cudaFree
 * waits for the whole device.
 */
void mg_pool_put(struct mg_ctx *ctx, struct mg_buf *buf)
{
	size_t max = ctx->opts.pool_max_bytes;
	struct mg_buf **pp, *b;

	pthread_mutex_lock(&ctx->lock);
	ctx->stats.bytes_in_use -= buf->cap;
	if (buf->unfenced) {
		ctx->stats.device_frees++;
		buf->next = ctx->doomed;
		ctx->doomed = buf;
		pthread_mutex_unlock(&ctx->lock);
		return;
	}
	buf->next = ctx->free_bufs;
	ctx->free_bufs = buf;
	ctx->stats.bytes_cached += buf->cap;
	while (max && ctx->stats.bytes_cached > max) {
		/* Evict the least recently released: the list's tail. */
		for (pp = &ctx->free_bufs; (*pp)->next; pp = &(*pp)->next)
			;
		b = *pp;
		*pp = NULL;
		ctx->stats.bytes_cached -= b->cap;
		ctx->stats.device_frees++;
		b->next = ctx->doomed;
		ctx->doomed = b;
	}
	pthread_mutex_unlock(&ctx->lock);
}

void mg_pool_reap(struct mg_ctx *ctx)
{
	struct mg_buf *list;

	pthread_mutex_lock(&ctx->lock);
	list = ctx->doomed;
	ctx->doomed = NULL;
	pthread_mutex_unlock(&ctx->lock);
	free_list(ctx, list);
}

void mg_pool_drain(struct mg_ctx *ctx)
{
	struct mg_buf *list, *b;

	pthread_mutex_lock(&ctx->lock);
	list = ctx->free_bufs;
	ctx->free_bufs = NULL;
	for (b = list; b; b = b->next)
		ctx->stats.device_frees++;
	ctx->stats.bytes_cached = 0;
	pthread_mutex_unlock(&ctx->lock);
	free_list(ctx, list);
	mg_pool_reap(ctx);
}

mg_buf *mg_buf_ref(mg_buf *buf)
{
	atomic_fetch_add_explicit(&buf->refs, 1, memory_order_relaxed);
	return buf;
}

void mg_buf_release(mg_buf *buf)
{
	struct mg_budget *budget;
	struct mg_ctx *ctx;
	size_t cap;

	if (!buf)
		return;
	if (atomic_fetch_sub_explicit(&buf->refs, 1, memory_order_acq_rel) != 1)
		return;
	ctx = buf->ctx;
	budget = buf->budget;
	cap = buf->cap;
	/* The legacy stream: C callers' and mg_buf_dlpack() consumers'. */
	ctx->be->fence(ctx, buf, 1);
	buf->budget = NULL;
	buf->ctx = NULL;
	/* Back in the pool before the loader hears of the room, so the load
	 * it starts reuses this buffer instead of allocating. */
	mg_pool_put(ctx, buf);
	if (budget)
		mg_budget_put(budget, cap);
	mg_ctx_unref(ctx);
}

void *mg_buf_data(const mg_buf *buf)
{
	return buf->data;
}

size_t mg_buf_size(const mg_buf *buf)
{
	return buf->size;
}

size_t mg_buf_capacity(const mg_buf *buf)
{
	return buf->cap;
}

DLDevice mg_buf_dl_device(const mg_buf *buf)
{
	return mg_ctx_dl_device(buf->ctx);
}
