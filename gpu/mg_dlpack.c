/*
 * mg_dlpack.c - exporting a buffer as a DLPack tensor (DLManagedTensor,
 * DLPack 0.6 as in /usr/include/dlpack/dlpack.h), the consumer's stream of
 * the DLPack exchange, and the PyCapsule destructor the Python binding
 * gives its "dltensor" capsules (with the capsule API the binding hands
 * over: the library neither links nor looks up Python).
 *
 * Not for: copying or converting data: a tensor is a view of the buffer's
 * bytes and holds a reference on the buffer until its deleter runs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mg_i.h"

#define MAX_NDIM 32
#define DL_ALIGN_MASK ((uint64_t)255)

struct mg_dl {
	DLManagedTensor m;
	mg_buf *buf; /* one reference */
	intptr_t stream; /* the consumer's, a DLPack stream value */
	int64_t shape[];
};

/* The consumer is done queuing work on the tensor: fence the buffer's
 * reuse on its stream (the last release adds the legacy stream's). */
static void dl_deleter(DLManagedTensor *m)
{
	struct mg_dl *d = m->manager_ctx;
	struct mg_ctx *ctx = d->buf->ctx;

	if (d->stream != -1 && d->stream != 1)
		ctx->be->fence(ctx, d->buf, d->stream);
	mg_buf_release(d->buf);
	free(d);
}

static bool dtype_ok(DLDataType t)
{
	switch (t.code) {
	case kDLInt:
	case kDLUInt:
	case kDLFloat:
	case kDLBfloat:
	case kDLComplex:
		return t.lanes == 1 && t.bits > 0 && t.bits % 8 == 0;
	default:
		return false;
	}
}

/* Bytes covered by a view, checked against a buffer of size bytes. */
static int view_bytes(const struct mg_view *v, size_t size, uint64_t *out)
{
	uint64_t n, item;

	if (!dtype_ok(v->dtype) || v->ndim < 0 || v->ndim > MAX_NDIM ||
	    (v->ndim > 0 && !v->shape))
		return -EINVAL;
	item = v->dtype.bits / 8;
	if (v->offset % item)
		return -EINVAL;
	n = item;
	for (int i = 0; i < v->ndim; i++) {
		if (v->shape[i] < 0)
			return -EINVAL;
		if (__builtin_mul_overflow(n, (uint64_t)v->shape[i], &n))
			return -EOVERFLOW;
	}
	if (v->offset > size || n > size - v->offset)
		return -EINVAL;
	*out = n;
	return 0;
}

int mg_buf_dlpack_stream(mg_buf *buf, const struct mg_view *view,
			 intptr_t stream, DLManagedTensor **out)
{
	int64_t all = (int64_t)buf->size;
	struct mg_view bytes = {{kDLUInt, 8, 1}, 1, &all, 0};
	struct mg_ctx *ctx = buf->ctx;
	struct mg_dl *d;
	uint64_t n;
	int r;

	if (!view)
		view = &bytes;
	r = view_bytes(view, buf->size, &n);
	if (r)
		return r;
	if (ctx->be->dl_type != kDLCPU && (stream == 0 || stream < -1))
		return -EINVAL;
	d = calloc(1, sizeof(*d) + (size_t)view->ndim * sizeof(int64_t));
	if (!d)
		return -ENOMEM;
	r = ctx->be->consume(ctx, buf, stream);
	if (r) {
		free(d);
		return r;
	}
	if (view->ndim > 0)
		memcpy(d->shape, view->shape,
		       (size_t)view->ndim * sizeof(int64_t));
	/* dlpack.h: data stays aligned to 256 bytes, the rest of the view's
	 * start goes in byte_offset; consumers that ignore byte_offset
	 * (torch < 2) still read views at multiples of 256 right. */
	d->m.dl_tensor.data =
	    (char *)buf->data + (view->offset & ~DL_ALIGN_MASK);
	d->m.dl_tensor.byte_offset = view->offset & DL_ALIGN_MASK;
	d->m.dl_tensor.device = mg_buf_dl_device(buf);
	d->m.dl_tensor.ndim = view->ndim;
	d->m.dl_tensor.dtype = view->dtype;
	d->m.dl_tensor.shape = d->shape;
	d->m.dl_tensor.strides = NULL;
	d->m.manager_ctx = d;
	d->m.deleter = dl_deleter;
	d->buf = mg_buf_ref(buf);
	d->stream = ctx->be->dl_type == kDLCPU ? -1 : stream;
	*out = &d->m;
	return 0;
}

int mg_buf_dlpack(mg_buf *buf, const struct mg_view *view,
		  DLManagedTensor **out)
{
	return mg_buf_dlpack_stream(buf, view, 1, out);
}

typedef int (*capsule_is_valid_fn)(void *capsule, const char *name);
typedef void *(*capsule_get_fn)(void *capsule, const char *name);

/* Set once by the binding before it makes a capsule; read by destructors
 * on any thread. */
static _Atomic(capsule_is_valid_fn) capsule_is_valid;
static _Atomic(capsule_get_fn) capsule_get;
static atomic_uint_least64_t capsules_leaked;

void mg_dlpack_capsule_api(capsule_is_valid_fn is_valid, capsule_get_fn get)
{
	atomic_store(&capsule_get, get);
	atomic_store(&capsule_is_valid, is_valid);
}

uint64_t mg_dlpack_capsules_leaked(void)
{
	return atomic_load(&capsules_leaked);
}

void mg_dlpack_capsule_destructor(void *capsule)
{
	capsule_is_valid_fn is_valid = atomic_load(&capsule_is_valid);
	capsule_get_fn get = atomic_load(&capsule_get);
	DLManagedTensor *m;

	if (!is_valid || !get) {
		atomic_fetch_add(&capsules_leaked, 1);
		return;
	}
	/* A consumer renames the capsule "used_dltensor" and owns it then. */
	if (!is_valid(capsule, "dltensor"))
		return;
	m = get(capsule, "dltensor");
	if (m && m->deleter)
		m->deleter(m);
}
