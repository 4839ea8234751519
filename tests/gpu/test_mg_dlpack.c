/*
 * test_mg_dlpack.c - exporting libmatgpu buffers as DLPack tensors on the
 * CPU backend: the default 1-D uint8 tensor over the exact bytes without a
 * copy, typed views, refused views, and lifetimes (a tensor keeps its
 * buffer and context alive; its deleter frees everything).
 *
 * Not for: the Python protocol (test_matgpu.py runs torch.from_dlpack).
 */
#include <errno.h>

#include "mg_test_util.h"

#define SIZE 4099

struct fixture {
	char *dir;
	mg_ctx *ctx;
	mg_buf *buf;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char *path;

	f->dir = mgt_tmpdir();
	path = mgt_file(f->dir, "f.bin", SIZE, 3);
	f->ctx = mgt_ctx(1024, 2, 1);
	assert_int_equal(mg_load(f->ctx, path, &f->buf), 0);
	free(path);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	mg_buf_release(f->buf);
	mg_ctx_close(f->ctx);
	mgt_rmtree(f->dir);
	free(f);
	return 0;
}

static void test_bytes_tensor(void **state)
{
	struct fixture *f = *state;
	DLManagedTensor *m = NULL;
	uint8_t want[SIZE];
	DLTensor *t;

	assert_int_equal(mg_buf_dlpack(f->buf, NULL, &m), 0);
	t = &m->dl_tensor;
	assert_ptr_equal(t->data, mg_buf_data(f->buf)); /* no copy */
	assert_int_equal(t->device.device_type, kDLCPU);
	assert_int_equal(t->device.device_id, 0);
	assert_int_equal(t->ndim, 1);
	assert_int_equal(t->shape[0], SIZE);
	assert_null(t->strides);
	assert_int_equal(t->byte_offset, 0);
	assert_int_equal(t->dtype.code, kDLUInt);
	assert_int_equal(t->dtype.bits, 8);
	assert_int_equal(t->dtype.lanes, 1);
	/* The tensor's reference keeps the bytes after the caller's and the
	 * context's go (the sanitizer build sees any use after free). */
	mg_buf_release(f->buf);
	f->buf = NULL;
	mg_ctx_close(f->ctx);
	f->ctx = NULL;
	mgt_pattern(want, SIZE, 3);
	assert_memory_equal(t->data, want, SIZE);
	m->deleter(m);
}

static void test_typed_view(void **state)
{
	struct fixture *f = *state;
	int64_t shape[2] = {3, 5};
	struct mg_view v = {{kDLFloat, 32, 1}, 2, shape, 8};
	DLManagedTensor *m = NULL;

	assert_int_equal(mg_buf_dlpack(f->buf, &v, &m), 0);
	shape[0] = 100; /* the tensor has its own copy of the shape */
	assert_int_equal(m->dl_tensor.ndim, 2);
	assert_int_equal(m->dl_tensor.shape[0], 3);
	assert_int_equal(m->dl_tensor.shape[1], 5);
	assert_int_equal(m->dl_tensor.dtype.code, kDLFloat);
	/* dlpack.h: data stays aligned, the offset goes in byte_offset. */
	assert_ptr_equal(m->dl_tensor.data, mg_buf_data(f->buf));
	assert_int_equal(m->dl_tensor.byte_offset, 8);
	m->deleter(m);
	/* At a multiple of 256 the pointer itself moves (old consumers). */
	v.offset = 512 + 8;
	assert_int_equal(mg_buf_dlpack(f->buf, &v, &m), 0);
	assert_ptr_equal(m->dl_tensor.data, (char *)mg_buf_data(f->buf) + 512);
	assert_int_equal(m->dl_tensor.byte_offset, 8);
	m->deleter(m);
}

static void test_scalar_and_full_views(void **state)
{
	struct fixture *f = *state;
	int64_t all[1] = {SIZE / 1};
	int64_t words[1] = {SIZE / 8};
	struct mg_view scalar = {{kDLInt, 32, 1}, 0, NULL, 4};
	struct mg_view bytes = {{kDLInt, 8, 1}, 1, all, 0};
	struct mg_view longs = {{kDLInt, 64, 1}, 1, words, 0};
	DLManagedTensor *m = NULL;

	assert_int_equal(mg_buf_dlpack(f->buf, &scalar, &m), 0);
	assert_int_equal(m->dl_tensor.ndim, 0);
	m->deleter(m);
	assert_int_equal(mg_buf_dlpack(f->buf, &bytes, &m), 0);
	m->deleter(m);
	assert_int_equal(mg_buf_dlpack(f->buf, &longs, &m), 0);
	m->deleter(m);
}

static void test_bad_views(void **state)
{
	struct fixture *f = *state;
	int64_t one[1] = {1}, big[1] = {SIZE + 1}, neg[1] = {-1};
	int64_t huge[3] = {INT64_MAX / 2, 4, 4};
	struct mg_view bad[] = {
	    {{kDLFloat, 32, 1}, 1, one, 2}, /* misaligned offset */
	    {{kDLUInt, 8, 1}, 1, big, 0}, /* past the end */
	    {{kDLUInt, 8, 1}, 1, one, SIZE}, /* starts at the end */
	    {{kDLUInt, 8, 1}, 1, neg, 0},
	    {{kDLUInt, 12, 1}, 1, one, 0},
	    {{kDLUInt, 8, 2}, 1, one, 0},
	    {{kDLOpaqueHandle, 8, 1}, 1, one, 0},
	    {{kDLUInt, 8, 1}, 33, one, 0},
	    {{kDLUInt, 8, 1}, 1, NULL, 0},
	};
	struct mg_view overflow = {{kDLFloat, 64, 1}, 3, huge, 0};
	DLManagedTensor *m = NULL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(mg_buf_dlpack(f->buf, &bad[i], &m), -EINVAL);
	assert_int_equal(mg_buf_dlpack(f->buf, &overflow, &m), -EOVERFLOW);
	assert_null(m);
}

static void test_empty_file_tensor(void **state)
{
	struct fixture *f = *state;
	char *path = mgt_file(f->dir, "empty", 0, 0);
	DLManagedTensor *m = NULL;
	mg_buf *buf = NULL;

	assert_int_equal(mg_load(f->ctx, path, &buf), 0);
	assert_int_equal(mg_buf_dlpack(buf, NULL, &m), 0);
	mg_buf_release(buf);
	assert_int_equal(m->dl_tensor.shape[0], 0);
	assert_non_null(m->dl_tensor.data);
	m->deleter(m);
	free(path);
}

/* Before the binding hands over the capsule API the destructor cannot look
 * into a capsule: it calls nothing and counts the leak. */
static void test_capsule_destructor_without_api(void **state)
{
	uint64_t before = mg_dlpack_capsules_leaked();
	int not_a_capsule = 0;

	(void)state;
	mg_dlpack_capsule_destructor(&not_a_capsule);
	assert_int_equal(not_a_capsule, 0);
	assert_int_equal(mg_dlpack_capsules_leaked(), before + 1);
}

/* A stand-in for a PyCapsule and the two functions of the C API. */
struct fake_capsule {
	const char *name;
	void *pointer;
};

static int fake_is_valid(void *capsule, const char *name)
{
	return strcmp(((struct fake_capsule *)capsule)->name, name) == 0;
}

static void *fake_get_pointer(void *capsule, const char *name)
{
	return fake_is_valid(capsule, name)
	    ? ((struct fake_capsule *)capsule)->pointer
	    : NULL;
}

/* With the API, an unconsumed capsule's tensor is deleted (its buffer goes
 * back to the pool); a consumed one ("used_dltensor") is the consumer's. */
static void test_capsule_destructor_with_api(void **state)
{
	struct fixture *f = *state;
	struct fake_capsule cap = {"dltensor", NULL};
	uint64_t leaked = mg_dlpack_capsules_leaked();
	struct mg_ctx_stats st;
	DLManagedTensor *m = NULL;

	mg_dlpack_capsule_api(fake_is_valid, fake_get_pointer);
	assert_int_equal(mg_buf_dlpack(f->buf, NULL, &m), 0);
	cap.pointer = m;
	cap.name = "used_dltensor";
	mg_dlpack_capsule_destructor(&cap);
	cap.name = "dltensor";
	mg_dlpack_capsule_destructor(&cap);
	mg_buf_release(f->buf);
	f->buf = NULL;
	mg_ctx_stats(f->ctx, &st);
	assert_int_equal(st.bytes_in_use, 0);
	assert_int_equal(mg_dlpack_capsules_leaked(), leaked);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_bytes_tensor, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_typed_view, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_scalar_and_full_views, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_bad_views, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_empty_file_tensor, setup,
					    teardown),
	    cmocka_unit_test(test_capsule_destructor_without_api),
	    cmocka_unit_test_setup_teardown(test_capsule_destructor_with_api,
					    setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
