/*
 * test_mg_cuda.c - libmatgpu's CUDA backend on a machine with a GPU: the
 * bytes that reach device memory (copied back with cudaMemcpy) at the ring's
 * edge sizes, DLPack device tensors, the loader's order and the pool's
 * steady state on the device, a second device, running out of device
 * memory; and, on the fake runtime only (its hooks, found with dlsym), the
 * contexts a load creates and the device a thread is left on, the ordering
 * of a buffer's reuse after its consumers' streams (also from many
 * threads), where device memory is freed, injected and sticky failures,
 * files changing and the context closing during a load. Skipped (77) where
 * the runtime reports no device (test_mg_errors.c covers that case). Runs on a GPU, or on any machine
 * against the fake runtime of fakecuda/ (test_mg_cuda_fake).
 *
 * Not for: the CPU backend (the other tests of this folder).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

#include <cuda_runtime_api.h>

#include "fake_cudart.h"
#include "mg_test_util.h"

#define STAGE 4096

/* Asserts that the device buffer holds the size bytes of seed. */
static void check_on_device(const mg_buf *buf, size_t size, uint32_t seed)
{
	uint8_t *want = malloc(size + 1), *got = malloc(size + 1);

	assert_int_equal(mg_buf_dl_device(buf).device_type, kDLCUDA);
	assert_int_equal(mg_buf_size(buf), size);
	assert_int_equal(cudaSetDevice(mg_buf_dl_device(buf).device_id),
			 cudaSuccess);
	mgt_pattern(want, size, seed);
	assert_int_equal(
	    cudaMemcpy(got, mg_buf_data(buf), size, cudaMemcpyDeviceToHost),
	    cudaSuccess);
	if (size)
		assert_memory_equal(got, want, size);
	free(want);
	free(got);
}

/* The fake runtime's hooks, NULL on a real one. */
static int (*fake_contexts)(int device);
static long (*fake_frees)(void);
static void (*fake_fail)(const char *call, cudaError_t err);
static void (*fake_sleep)(cudaStream_t stream, unsigned us);

static bool fake_hooks(void)
{
	void *p;

	if (!fake_contexts) {
		if ((p = dlsym(RTLD_DEFAULT, "fake_cudart_contexts")) != NULL)
			memcpy(&fake_contexts, &p, sizeof(p));
		if ((p = dlsym(RTLD_DEFAULT, "fake_cudart_frees")) != NULL)
			memcpy(&fake_frees, &p, sizeof(p));
		if ((p = dlsym(RTLD_DEFAULT, "fake_cudart_fail")) != NULL)
			memcpy(&fake_fail, &p, sizeof(p));
		if ((p = dlsym(RTLD_DEFAULT, "fake_cudart_stream_sleep")) !=
		    NULL)
			memcpy(&fake_sleep, &p, sizeof(p));
	}
	return fake_contexts && fake_frees && fake_fail && fake_sleep;
}

static mg_ctx *cuda_ctx(void)
{
	struct mg_ctx_opts o;
	mg_ctx *ctx = NULL;

	mg_ctx_opts_init(&o);
	o.staging_size = STAGE;
	o.staging_count = 3;
	o.io_threads = 2;
	assert_int_equal(mg_ctx_open(0, &o, &ctx), 0);
	assert_string_equal(mg_ctx_backend(ctx), "cuda");
	return ctx;
}

static void test_sizes_on_device(void **state)
{
	const size_t sizes[] = {0,     1,	  STAGE - 1,
				STAGE, STAGE + 1, 64 * STAGE + 123};
	char *dir = mgt_tmpdir();
	mg_ctx *ctx = cuda_ctx();
	mg_buf *buf = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char *path = mgt_file(dir, "f", sizes[i], (uint32_t)i + 1);

		assert_int_equal(mg_load(ctx, path, &buf), 0);
		check_on_device(buf, sizes[i], (uint32_t)i + 1);
		mg_buf_release(buf);
		free(path);
	}
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

static void test_dlpack_and_steady_state(void **state)
{
	char *dir = mgt_tmpdir();
	char *path = mgt_file(dir, "f", 10 * STAGE + 1, 7);
	mg_ctx *ctx = cuda_ctx();
	struct mg_ctx_stats st;
	DLManagedTensor *m = NULL;
	mg_buf *buf = NULL;

	(void)state;
	for (int i = 0; i < 8; i++) {
		assert_int_equal(mg_load(ctx, path, &buf), 0);
		assert_int_equal(mg_buf_dlpack(buf, NULL, &m), 0);
		assert_int_equal(m->dl_tensor.device.device_type, kDLCUDA);
		assert_int_equal(m->dl_tensor.device.device_id, 0);
		mg_buf_release(buf);
		/* Released by the caller, alive through the tensor. */
		check_on_device(buf, 10 * STAGE + 1, 7);
		m->deleter(m);
	}
	mg_ctx_stats(ctx, &st);
	assert_int_equal(st.device_allocs, 1);
	free(path);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

static void test_loader_on_device(void **state)
{
	char *dir = mgt_tmpdir();
	char *paths[6];
	char name[16];
	mg_ctx *ctx = cuda_ctx();
	mg_loader *ld = NULL;
	mg_buf *buf = NULL;

	(void)state;
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		paths[i] = mgt_file(dir, name, (size_t)i * 3 * STAGE + 5,
				    (uint32_t)i + 1);
	}
	assert_int_equal(
	    mg_loader_open(ctx, (const char *const *)paths, 6, NULL, &ld), 0);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(mg_loader_next(ld, &buf), 0);
		check_on_device(buf, (size_t)i * 3 * STAGE + 5,
				(uint32_t)i + 1);
		mg_buf_release(buf);
		free(paths[i]);
	}
	mg_loader_close(ld);
	mg_ctx_close(ctx);
	mgt_rmtree(dir);
}

/* A context on device 1 leaves the calling thread's device alone. */
static void test_second_device(void **state)
{
	mg_ctx *ctx = NULL;
	mg_buf *buf = NULL;
	char *dir, *path;
	int dev = -1;

	(void)state;
	if (mg_device_count() < 2)
		skip();
	dir = mgt_tmpdir();
	path = mgt_file(dir, "f", 5 * STAGE, 11);
	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	assert_int_equal(mg_ctx_open(1, NULL, &ctx), 0);
	assert_int_equal(mg_load(ctx, path, &buf), 0);
	assert_int_equal(cudaGetDevice(&dev), cudaSuccess);
	assert_int_equal(dev, 0);
	assert_int_equal(mg_buf_dl_device(buf).device_id, 1);
	check_on_device(buf, 5 * STAGE, 11);
	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	mg_buf_release(buf);
	mg_ctx_close(ctx);
	free(path);
	mgt_rmtree(dir);
}

/* Device memory running out: the pool gives its cached buffers back and
 * retries; what still does not fit is -ENOMEM with the CUDA name. Needs
 * the fake runtime's memory limit, so runs only on it. */
static void test_out_of_memory(void **state)
{
	struct cudaDeviceProp prop;
	const char *name = NULL;
	struct mg_ctx_stats st;
	char *dir, *a, *b, *c;
	mg_ctx *ctx = NULL;
	mg_buf *buf = NULL;

	(void)state;
	assert_int_equal(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
	if (strncmp(prop.name, "fake", 4) != 0)
		skip();
	dir = mgt_tmpdir();
	a = mgt_file(dir, "a", 32 * STAGE, 1);
	b = mgt_file(dir, "b", 48 * STAGE, 2);
	c = mgt_file(dir, "c", 100 * STAGE, 3);
	setenv("FAKE_CUDART_MEM_LIMIT", "262144", 1); /* 64 pages */
	ctx = cuda_ctx();
	assert_int_equal(mg_load(ctx, a, &buf), 0);
	mg_buf_release(buf); /* 32 pages cached */
	assert_int_equal(mg_load(ctx, b, &buf), 0); /* 48 more do not fit */
	check_on_device(buf, 48 * STAGE, 2);
	mg_buf_release(buf);
	mg_ctx_stats(ctx, &st);
	assert_int_equal(st.device_allocs, 2);
	assert_int_equal(st.device_frees, 1);
	assert_int_equal(mg_load(ctx, c, &buf), -ENOMEM);
	assert_int_not_equal(mg_cuda_last_error(&name), 0);
	assert_string_equal(name, "cudaErrorMemoryAllocation");
	unsetenv("FAKE_CUDART_MEM_LIMIT");
	mg_ctx_close(ctx);
	free(a);
	free(b);
	free(c);
	mgt_rmtree(dir);
}

/* Loads, tensors and a loader on device 1 from this thread (which never
 * chose a device) and from a loader's own thread. */
static void use_device1(const char *dir)
{
	char *a = mgt_file(dir, "a", 5 * STAGE + 3, 21);
	char *b = mgt_file(dir, "b", 2 * STAGE, 22);
	const char *paths[2] = {a, b};
	DLManagedTensor *m = NULL;
	mg_loader *ld = NULL;
	mg_ctx *ctx = NULL;
	mg_buf *buf = NULL;

	assert_int_equal(mg_ctx_open(1, NULL, &ctx), 0);
	assert_int_equal(mg_load(ctx, a, &buf), 0);
	assert_int_equal(mg_buf_dlpack(buf, NULL, &m), 0);
	mg_buf_release(buf);
	m->deleter(m);
	assert_int_equal(mg_loader_open(ctx, paths, 2, NULL, &ld), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(mg_loader_next(ld, &buf), 0);
		mg_buf_release(buf);
	}
	mg_loader_close(ld);
	mg_ctx_trim(ctx);
	mg_ctx_close(ctx);
	free(a);
	free(b);
}

/* Runs first, before anything in the process touched device 0: working on
 * device 1 creates no context on device 0 (CUDA 12+ creates one for any
 * cudaSetDevice(0)), whether this thread had a device or not. */
static void test_no_context_on_other_device(void **state)
{
	char *dir;

	(void)state;
	if (!fake_hooks() || mg_device_count() < 2)
		skip();
	assert_int_equal(fake_contexts(0), 0);
	dir = mgt_tmpdir();
	use_device1(dir);
	assert_int_equal(fake_contexts(0), 0);
	assert_int_equal(fake_contexts(1), 1);
	mgt_rmtree(dir);
}

/* Whether the calling thread has a current context, from the driver's
 * cuCtxGetCurrent (reached through the runtime); -1 when it cannot be
 * asked. */
static int thread_bound(void)
{
	enum cudaDriverEntryPointQueryResult q;
	int (*get)(void **) = NULL;
	void *fn = NULL, *c = NULL;

	if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000,
					     cudaEnableDefault,
					     &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess || !fn)
		return -1;
	memcpy(&get, &fn, sizeof(fn));
	if (get(&c) != 0)
		return -1;
	return c != NULL;
}

/* What a fresh thread (no device chosen) sees after working on device 1:
 * a load, a tensor deleted, a loader, the context's end. */
struct probe {
	const char *path;
	int err; /* first failure */
	int dev; /* cudaGetDevice afterwards */
	int bound; /* thread_bound() afterwards */
};

static void *probe_main(void *arg)
{
	struct probe *p = arg;
	DLManagedTensor *m = NULL;
	mg_loader *ld = NULL;
	mg_ctx *ctx = NULL;
	mg_buf *buf = NULL;

	p->err = mg_ctx_open(1, NULL, &ctx);
	if (!p->err)
		p->err = mg_load(ctx, p->path, &buf);
	if (!p->err) {
		p->err = mg_buf_dlpack(buf, NULL, &m);
		mg_buf_release(buf);
	}
	if (!p->err) {
		m->deleter(m);
		p->err = mg_loader_open(ctx, &p->path, 1, NULL, &ld);
	}
	if (!p->err) {
		p->err = mg_loader_next(ld, &buf);
		mg_buf_release(buf);
		mg_loader_close(ld);
	}
	mg_ctx_close(ctx);
	p->dev = -1;
	(void)cudaGetDevice(&p->dev);
	p->bound = thread_bound();
	return NULL;
}

/* A thread that never chose a device is left as it was found: no current
 * context, so cudaGetDevice (and with it torch.cuda.current_device() and
 * matgpu's device="cuda") still answers 0, not the context's device. */
static void test_fresh_thread_left_unbound(void **state)
{
	char *dir;
	struct probe p = {0};
	pthread_t th;
	int before;

	(void)state;
	if (!fake_hooks() || mg_device_count() < 2)
		skip();
	dir = mgt_tmpdir();
	p.path = mgt_file(dir, "a", 3 * STAGE + 1, 61);
	before = fake_contexts(0);
	assert_int_equal(pthread_create(&th, NULL, probe_main, &p), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(p.err, 0);
	assert_int_equal(p.bound, 0);
	assert_int_equal(p.dev, 0);
	assert_int_equal(fake_contexts(0), before);
	free((char *)p.path);
	mgt_rmtree(dir);
}

/* The consumer of a tensor that fences its release: a "kernel" on stream
 * that runs late, then reads the tensor back into host memory. */
static void consume_late(cudaStream_t stream, DLManagedTensor *m, uint8_t *host,
			 size_t n)
{
	fake_sleep(stream, 200 * 1000);
	assert_int_equal(cudaMemcpyAsync(host, m->dl_tensor.data, n,
					 cudaMemcpyDeviceToHost, stream),
			 cudaSuccess);
}

/*
 * A buffer exported to a consumer's stream is reused by the next load only
 * after the work queued on that stream before the tensor's deleter ran: a
 * non-blocking stream through mg_buf_dlpack_stream(), the legacy stream
 * through mg_buf_dlpack() even when the fence cannot be made (fail names
 * a call that then fails once).
 */
static void reuse_after_consumer(cudaStream_t stream, bool named,
				 const char *fail)
{
	const size_t n = 6 * STAGE;
	char *dir = mgt_tmpdir();
	char *a = mgt_file(dir, "a", n, 31), *b = mgt_file(dir, "b", n, 32);
	uint8_t *host = NULL, *want = malloc(n);
	DLManagedTensor *m = NULL;
	mg_ctx *ctx = cuda_ctx();
	mg_buf *buf = NULL;
	void *first;

	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	assert_int_equal(cudaHostAlloc((void **)&host, n, 0), cudaSuccess);
	assert_int_equal(mg_load(ctx, a, &buf), 0);
	first = mg_buf_data(buf);
	if (named)
		assert_int_equal(
		    mg_buf_dlpack_stream(buf, NULL, (intptr_t)stream, &m), 0);
	else
		assert_int_equal(mg_buf_dlpack(buf, NULL, &m), 0);
	mg_buf_release(buf);
	consume_late(stream, m, host, n);
	if (fail)
		fake_fail(fail, cudaErrorMemoryAllocation);
	m->deleter(m);
	assert_int_equal(mg_load(ctx, b, &buf), 0);
	if (!fail)
		assert_ptr_equal(mg_buf_data(buf), first); /* reused */
	assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
	mgt_pattern(want, n, 31);
	assert_memory_equal(host, want, n);
	check_on_device(buf, n, 32);
	mg_buf_release(buf);
	mg_ctx_close(ctx);
	assert_int_equal(cudaFreeHost(host), cudaSuccess);
	free(want);
	free(a);
	free(b);
	mgt_rmtree(dir);
}

static void test_release_fenced_on_consumer_stream(void **state)
{
	cudaStream_t s;

	(void)state;
	if (!fake_hooks())
		skip();
	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
			 cudaSuccess);
	reuse_after_consumer(s, true, NULL);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

static void test_release_fence_failures(void **state)
{
	cudaStream_t s;

	(void)state;
	if (!fake_hooks())
		skip();
	reuse_after_consumer(cudaStreamLegacy, false,
			     "cudaEventCreateWithFlags");
	reuse_after_consumer(cudaStreamLegacy, false, "cudaEventRecord");
	/* A blocking stream is ordered with the legacy one only by work
	 * queued on the legacy stream, not by synchronizing it. */
	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamDefault),
			 cudaSuccess);
	reuse_after_consumer(s, false, "cudaEventCreateWithFlags");
	reuse_after_consumer(s, false, "cudaEventRecord");
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

/* A pool over its limit frees the evicted buffer in the next load, not in
 * the DLPack deleter that released it (cudaFree waits for the device). */
static void test_no_free_in_deleter(void **state)
{
	char *dir, *a;
	struct mg_ctx_opts o;
	struct mg_ctx_stats st;
	DLManagedTensor *m = NULL;
	mg_buf *b1 = NULL, *b2 = NULL;
	mg_ctx *ctx = NULL;
	long frees;

	(void)state;
	if (!fake_hooks())
		skip();
	dir = mgt_tmpdir();
	a = mgt_file(dir, "a", 8 * STAGE, 41);
	mg_ctx_opts_init(&o);
	o.staging_size = STAGE;
	o.pool_max_bytes = 8 * STAGE;
	assert_int_equal(mg_ctx_open(0, &o, &ctx), 0);
	assert_int_equal(mg_load(ctx, a, &b1), 0);
	assert_int_equal(mg_load(ctx, a, &b2), 0);
	assert_int_equal(mg_buf_dlpack(b2, NULL, &m), 0);
	mg_buf_release(b2);
	mg_buf_release(b1); /* the pool is full */
	frees = fake_frees();
	m->deleter(m); /* b2 is evicted */
	assert_int_equal(fake_frees(), frees);
	assert_int_equal(mg_load(ctx, a, &b1), 0);
	assert_int_equal(fake_frees(), frees + 1);
	mg_ctx_stats(ctx, &st);
	assert_int_equal(st.device_allocs, 2);
	assert_int_equal(st.device_frees, 1);
	mg_buf_release(b1);
	mg_ctx_close(ctx);
	free(a);
	mgt_rmtree(dir);
}

/* Tensors handed from loading threads to one deleting thread. */
struct tensor_queue {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	DLManagedTensor *items[64];
	unsigned n, producers;
};

struct stress {
	mg_ctx *ctx;
	char **paths;
	struct tensor_queue *q;
	uint32_t seed; /* of paths[0]; paths[k] has seed + k */
	int err; /* first failure: a CUDA error, -1 for wrong bytes */
};

#define STRESS_FILES 3
#define STRESS_ROUNDS 12

static const size_t stress_sizes[STRESS_FILES] = {1, 7 * STAGE + 5, 3 * STAGE};

/* Loads, reads the bytes back on its own non-blocking stream of device 1
 * through a tensor exported to that stream, and hands the tensor to the
 * deleting thread while the stream may still be reading it. */
static void *stress_main(void *arg)
{
	struct stress *st = arg;
	uint8_t *host = NULL, *want = malloc(8 * STAGE);
	DLManagedTensor *m;
	cudaStream_t s = NULL;
	mg_buf *buf;
	int r = 0;

	if (cudaSetDevice(1) || cudaStreamCreateWithFlags(&s, 1) ||
	    cudaHostAlloc((void **)&host, 8 * STAGE, 0) || !want)
		r = -MG_ECUDA;
	for (int i = 0; !r && i < STRESS_ROUNDS; i++) {
		unsigned k = (unsigned)i % STRESS_FILES;
		size_t n = stress_sizes[k];

		r = mg_load(st->ctx, st->paths[k], &buf);
		if (r)
			break;
		r = mg_buf_dlpack_stream(buf, NULL, (intptr_t)s, &m);
		mg_buf_release(buf);
		if (r)
			break;
		fake_sleep(s, 20000);
		if (cudaMemcpyAsync(host, m->dl_tensor.data, n,
				    cudaMemcpyDeviceToHost, s))
			r = -MG_ECUDA;
		pthread_mutex_lock(&st->q->lock);
		while (st->q->n == 64)
			pthread_cond_wait(&st->q->cond, &st->q->lock);
		st->q->items[st->q->n++] = m;
		pthread_cond_broadcast(&st->q->cond);
		pthread_mutex_unlock(&st->q->lock);
		if (!r && cudaStreamSynchronize(s))
			r = -MG_ECUDA;
		mgt_pattern(want, n, st->seed + k);
		if (!r && memcmp(host, want, n) != 0)
			r = -1;
	}
	pthread_mutex_lock(&st->q->lock);
	st->q->producers--;
	pthread_cond_broadcast(&st->q->cond);
	pthread_mutex_unlock(&st->q->lock);
	if (s)
		cudaStreamSynchronize(s);
	if (s)
		cudaStreamDestroy(s);
	if (host)
		cudaFreeHost(host);
	free(want);
	st->err = r;
	return NULL;
}

static void *deleter_main(void *arg)
{
	struct tensor_queue *q = arg;
	DLManagedTensor *m;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (q->n == 0 && q->producers > 0)
			pthread_cond_wait(&q->cond, &q->lock);
		if (q->n == 0)
			break;
		m = q->items[--q->n];
		pthread_cond_broadcast(&q->cond);
		pthread_mutex_unlock(&q->lock);
		m->deleter(m);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* Eight threads loading through a context of device 1 that allows two
 * loads at once, each consumer's stream still reading when another thread
 * deletes its tensor: every byte read back is right, at most two rings
 * exist, and everything is back in the pool at the end. */
static void test_many_threads_device1(void **state)
{
	struct tensor_queue q = {.n = 0};
	struct stress st[8];
	struct mg_ctx_opts o;
	struct mg_ctx_stats cs;
	char *dir, *paths[8][STRESS_FILES], name[16];
	pthread_t th[8], del;
	mg_ctx *ctx = NULL;

	(void)state;
	if (!fake_hooks() || mg_device_count() < 2)
		skip();
	dir = mgt_tmpdir();
	/* Each thread its own files: a buffer overwritten by another
	 * thread's load shows. */
	for (unsigned i = 0; i < 8; i++) {
		for (unsigned k = 0; k < STRESS_FILES; k++) {
			snprintf(name, sizeof(name), "f%u-%u", i, k);
			paths[i][k] = mgt_file(dir, name, stress_sizes[k],
					       70 + 10 * i + k);
		}
	}
	mg_ctx_opts_init(&o);
	o.staging_size = STAGE;
	o.staging_count = 3;
	o.io_threads = 2;
	o.max_loads = 2;
	assert_int_equal(mg_ctx_open(1, &o, &ctx), 0);
	pthread_mutex_init(&q.lock, NULL);
	pthread_cond_init(&q.cond, NULL);
	q.producers = 8;
	for (int i = 0; i < 8; i++) {
		st[i] = (struct stress){ctx, paths[i], &q, 70 + 10 * i, 0};
		assert_int_equal(
		    pthread_create(&th[i], NULL, stress_main, &st[i]), 0);
	}
	assert_int_equal(pthread_create(&del, NULL, deleter_main, &q), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	assert_int_equal(pthread_join(del, NULL), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(st[i].err, 0);
	mg_ctx_stats(ctx, &cs);
	assert_true(cs.staging_bytes <= 2 * 3 * STAGE);
	assert_int_equal(cs.bytes_in_use, 0);
	assert_int_equal(cs.loads, 8 * STRESS_ROUNDS);
	mg_ctx_close(ctx);
	pthread_cond_destroy(&q.cond);
	pthread_mutex_destroy(&q.lock);
	for (unsigned i = 0; i < 8; i++)
		for (unsigned k = 0; k < STRESS_FILES; k++)
			free(paths[i][k]);
	mgt_rmtree(dir);
}

/* A context's first load fails where it creates its ring or its buffer;
 * nothing is left half made (the sanitizer build checks) and the next
 * load works. */
static void test_failures_while_creating(void **state)
{
	static const struct {
		const char *call;
		int err;
	} fails[] = {
	    {"cudaStreamCreateWithFlags", -ENOMEM},
	    {"cudaHostAlloc", -ENOMEM},
	    {"cudaEventCreateWithFlags", -ENOMEM},
	    /* The pool drains and retries: one failure is absorbed. */
	    {"cudaMalloc", 0},
	};
	char *dir, *a;
	mg_ctx *ctx;
	mg_buf *buf = NULL;

	(void)state;
	if (!fake_hooks())
		skip();
	dir = mgt_tmpdir();
	a = mgt_file(dir, "a", 4 * STAGE + 2, 81);
	for (size_t i = 0; i < sizeof(fails) / sizeof(fails[0]); i++) {
		ctx = cuda_ctx();
		fake_fail(fails[i].call, cudaErrorMemoryAllocation);
		assert_int_equal(mg_load(ctx, a, &buf), fails[i].err);
		if (!fails[i].err)
			mg_buf_release(buf);
		assert_int_equal(mg_load(ctx, a, &buf), 0);
		check_on_device(buf, 4 * STAGE + 2, 81);
		mg_buf_release(buf);
		mg_ctx_close(ctx);
	}
	free(a);
	mgt_rmtree(dir);
}

struct bg_load {
	mg_ctx *ctx;
	const char *path;
	mg_buf *buf;
	int r;
};

static void *bg_load_main(void *arg)
{
	struct bg_load *p = arg;

	p->r = mg_load(p->ctx, p->path, &p->buf);
	return NULL;
}

/* Starts loading path on another thread and returns once the load took
 * its buffer (the file's size is known, its pieces are being read). */
static void bg_load_start(struct bg_load *p, pthread_t *th)
{
	struct mg_ctx_stats st;

	assert_int_equal(pthread_create(th, NULL, bg_load_main, p), 0);
	do {
		usleep(1000);
		mg_ctx_stats(p->ctx, &st);
	} while (st.bytes_in_use == 0);
}

/* A file that shrinks while it is loaded fails the load with -EIO; one
 * that grows loads the bytes it had when the load began. Copies are
 * slowed to 5 ms a piece so that the change lands mid-way. */
static void test_file_changes_during_load(void **state)
{
	const size_t n = 64 * STAGE;
	void (*delay)(unsigned);
	struct bg_load bl = {0};
	char *dir, *a, zeros[STAGE] = {0};
	pthread_t th;
	void *p;
	int fd;

	(void)state;
	p = dlsym(RTLD_DEFAULT, "fake_cudart_copy_delay");
	if (!p || !fake_hooks())
		skip();
	memcpy(&delay, &p, sizeof(p));
	dir = mgt_tmpdir();
	a = mgt_file(dir, "a", n, 91);
	bl.ctx = cuda_ctx();
	bl.path = a;
	delay(5000);
	bg_load_start(&bl, &th);
	assert_int_equal(truncate(a, STAGE), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(bl.r, -EIO);
	free(mgt_file(dir, "a", n, 91));
	bg_load_start(&bl, &th);
	fd = open(a, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(write(fd, zeros, STAGE), STAGE);
	assert_int_equal(close(fd), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	delay(0);
	assert_int_equal(bl.r, 0);
	check_on_device(bl.buf, n, 91);
	mg_buf_release(bl.buf);
	mg_ctx_close(bl.ctx);
	free(a);
	mgt_rmtree(dir);
}

/* The context closed by one thread while another loads through it: the
 * load ends normally and its buffer is valid, and the context ends with
 * the buffer; a load that fails after the close (its file shrank) ends
 * the context itself, after its last use of it (the sanitizer build sees
 * a use after free otherwise). */
static void test_close_during_load(void **state)
{
	const size_t n = 32 * STAGE;
	void (*delay)(unsigned);
	struct bg_load bl = {0};
	pthread_t th;
	char *dir;
	void *p;

	(void)state;
	p = dlsym(RTLD_DEFAULT, "fake_cudart_copy_delay");
	if (!p || !fake_hooks())
		skip();
	memcpy(&delay, &p, sizeof(p));
	dir = mgt_tmpdir();
	bl.path = mgt_file(dir, "a", n, 95);
	bl.ctx = cuda_ctx();
	delay(3000);
	bg_load_start(&bl, &th);
	mg_ctx_close(bl.ctx);
	assert_int_equal(pthread_join(th, NULL), 0);
	delay(0);
	assert_int_equal(bl.r, 0);
	check_on_device(bl.buf, n, 95);
	mg_buf_release(bl.buf);
	bl.ctx = cuda_ctx();
	delay(3000);
	bg_load_start(&bl, &th);
	mg_ctx_close(bl.ctx);
	assert_int_equal(truncate(bl.path, STAGE), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	delay(0);
	assert_int_equal(bl.r, -EIO);
	free((char *)bl.path);
	mgt_rmtree(dir);
}

/* Runtime failures reach the caller as CUDA errors and leave the context
 * usable; an asynchronous (sticky) one fails every later load on its
 * device. Runs last: the sticky error stays with the last device. */
static void test_injected_failures(void **state)
{
	static const char *const calls[] = {
	    "cudaMemcpyAsync", "cudaEventRecord", "cudaStreamSynchronize",
	    "cudaEventSynchronize", "cudaStreamWaitEvent"};
	const char *name = NULL, *paths[2];
	DLManagedTensor *m = NULL;
	mg_buf *buf = NULL, *pre = NULL;
	mg_loader *ld = NULL;
	mg_ctx *ctx = NULL;
	char *dir, *a;
	int dev = -1;

	(void)state;
	if (!fake_hooks())
		skip();
	dir = mgt_tmpdir();
	a = mgt_file(dir, "a", 5 * STAGE + 1, 51);
	paths[0] = paths[1] = a;
	ctx = cuda_ctx();
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		fake_fail(calls[i], cudaErrorLaunchFailure);
		assert_int_equal(mg_load(ctx, a, &buf), -MG_ECUDA);
		mg_cuda_last_error(&name);
		assert_string_equal(name, "cudaErrorLaunchFailure");
		assert_int_equal(mg_load(ctx, a, &buf), 0);
		check_on_device(buf, 5 * STAGE + 1, 51);
		mg_buf_release(buf);
	}
	mg_ctx_close(ctx);
	/* The sticky error, from a thread on device 0: every later call on
	 * the last device answers it (a tensor that needs no stream work
	 * excepted), and releasing, trimming and closing still free
	 * everything (the sanitizer build checks). */
	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	assert_int_equal(mg_ctx_open(mg_device_count() - 1, NULL, &ctx), 0);
	assert_int_equal(mg_load(ctx, a, &pre), 0);
	fake_fail("async", cudaErrorIllegalAddress);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(mg_load(ctx, a, &buf), -MG_ECUDA);
		mg_cuda_last_error(&name);
		assert_string_equal(name, "cudaErrorIllegalAddress");
	}
	assert_int_equal(mg_buf_dlpack(pre, NULL, &m), -MG_ECUDA);
	assert_int_equal(mg_buf_dlpack_stream(pre, NULL, -1, &m), 0);
	m->deleter(m);
	assert_int_equal(mg_loader_open(ctx, paths, 2, NULL, &ld), 0);
	for (int i = 0; i < 2; i++) {
		mg_cuda_clear_error();
		assert_int_equal(mg_loader_next(ld, &buf), -MG_ECUDA);
		mg_cuda_last_error(&name);
		assert_string_equal(name, "cudaErrorIllegalAddress");
	}
	assert_int_equal(mg_loader_next(ld, &buf), 0);
	assert_null(buf);
	mg_loader_close(ld);
	mg_buf_release(pre);
	mg_ctx_trim(ctx);
	mg_ctx_close(ctx);
	assert_int_equal(cudaGetDevice(&dev), cudaSuccess);
	assert_int_equal(dev, 0);
	free(a);
	mgt_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_no_context_on_other_device),
	    cmocka_unit_test(test_fresh_thread_left_unbound),
	    cmocka_unit_test(test_sizes_on_device),
	    cmocka_unit_test(test_dlpack_and_steady_state),
	    cmocka_unit_test(test_loader_on_device),
	    cmocka_unit_test(test_second_device),
	    cmocka_unit_test(test_out_of_memory),
	    cmocka_unit_test(test_release_fenced_on_consumer_stream),
	    cmocka_unit_test(test_release_fence_failures),
	    cmocka_unit_test(test_no_free_in_deleter),
	    cmocka_unit_test(test_many_threads_device1),
	    cmocka_unit_test(test_failures_while_creating),
	    cmocka_unit_test(test_file_changes_during_load),
	    cmocka_unit_test(test_close_during_load),
	    cmocka_unit_test(test_injected_failures),
	};

	if (mg_device_count() == 0) {
		const char *name;

		mg_cuda_last_error(&name);
		printf("test_mg_cuda: no CUDA device (%s): skipped\n", name);
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
