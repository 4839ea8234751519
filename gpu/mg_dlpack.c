/*
 * mg_dlpack.c - exporting a buffer as a DLPack tensor (DLManagedTensor,
 * DLPack 0.6 as in /usr/include/dlpack/dlpack.h) and the PyCapsule
 * destructor the Python binding gives its "dltensor" capsules.
 *
 * Not for: copying or converting data: a tensor is a view of the buffer's
 * bytes and holds a reference on the buffer until its deleter runs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mg_i.h"

#define MAX_NDIM 32

struct mg_dl {
	DLManagedTensor m;
	mg_buf *buf; /* one reference */
	int64_t shape[];
};

static void dl_deleter(DLManagedTensor *m)
{
	struct mg_dl *d = m->manager_ctx;

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

int mg_buf_dlpack(mg_buf *buf, const struct mg_view *view,
		  DLManagedTensor **out)
{
	int64_t all = (int64_t)buf->size;
	struct mg_view bytes = {{kDLUInt, 8, 1}, 1, &all, 0};
	struct mg_dl *d;
	uint64_t n;
	int r;

	if (!view)
		view = &bytes;
	r = view_bytes(view, buf->size, &n);
	if (r)
		return r;
	d = calloc(1, sizeof(*d) + (size_t)view->ndim * sizeof(int64_t));
	if (!d)
		return -ENOMEM;
	if (view->ndim > 0)
		memcpy(d->shape, view->shape,
		       (size_t)view->ndim * sizeof(int64_t));
	/* Old consumers ignore byte_offset: point data at the first item. */
	d->m.dl_tensor.data = (char *)buf->data + view->offset;
	d->m.dl_tensor.device = mg_buf_dl_device(buf);
	d->m.dl_tensor.ndim = view->ndim;
	d->m.dl_tensor.dtype = view->dtype;
	d->m.dl_tensor.shape = d->shape;
	d->m.dl_tensor.strides = NULL;
	d->m.dl_tensor.byte_offset = 0;
	d->m.manager_ctx = d;
	d->m.deleter = dl_deleter;
	d->buf = mg_buf_ref(buf);
	*out = &d->m;
	return 0;
}

typedef int (*capsule_is_valid_fn)(void *capsule, const char *name);
typedef void *(*capsule_get_fn)(void *capsule, const char *name);

void mg_dlpack_capsule_destructor(void *capsule)
{
	void *s1 = dlsym(RTLD_DEFAULT, "PyCapsule_IsValid");
	void *s2 = dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer");
	capsule_is_valid_fn is_valid;
	capsule_get_fn get;
	DLManagedTensor *m;

	/* Without the Python C API there is no capsule to look into. */
	if (!s1 || !s2)
		return;
	memcpy(&is_valid, &s1, sizeof(is_valid));
	memcpy(&get, &s2, sizeof(get));
	/* A consumer renames the capsule "used_dltensor" and owns it then. */
	if (!is_valid(capsule, "dltensor"))
		return;
	m = get(capsule, "dltensor");
	if (m && m->deleter)
		m->deleter(m);
}
