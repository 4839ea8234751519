/*
 * mg_ctx.c - libmatgpu contexts: options, choosing the backend for a
 * device, reference counting, counters.
 *
 * Not for: the buffer pool (mg_pool.c), staging rings (mg_ring.c) or the
 * CUDA calls themselves (mg_backend_cuda.c).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mg_i.h"

const char *mg_version(void)
{
	return "0.1.0";
}

int mg_cuda_built(void)
{
#ifdef MG_HAVE_CUDA
	return 1;
#else
	return 0;
#endif
}

#ifndef MG_HAVE_CUDA
int mg_cuda_current_device(void)
{
	return -ENODEV;
}
#endif

int mg_device_count(void)
{
#ifdef MG_HAVE_CUDA
	return mg_cuda_device_count();
#else
	return 0;
#endif
}

void mg_mutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
#ifndef NDEBUG
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
#endif
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}

/* CPUs this process may use: its affinity mask (else those online),
 * lowered by a CPU quota of its cgroup (cgroup v2 cpu.max as a container
 * sees it: "max 100000", or "200000 100000" for 2 CPUs). */
static unsigned usable_cpus(void)
{
	cpu_set_t set;
	unsigned n;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		n = (unsigned)CPU_COUNT(&set);
	else
		n = sysconf(_SC_NPROCESSORS_ONLN) > 0
		    ? (unsigned)sysconf(_SC_NPROCESSORS_ONLN)
		    : 1;
	FILE *f = fopen("/sys/fs/cgroup/cpu.max", "re");
	if (f) {
		long long quota, period;
		if (fscanf(f, "%lld %lld", &quota, &period) == 2 && quota > 0 &&
		    period > 0) {
			long long q = (quota + period - 1) / period;
			if (q >= 1 && (unsigned long long)q < n)
				n = (unsigned)q;
		}
		fclose(f);
	}
	return n;
}

void mg_ctx_opts_init(struct mg_ctx_opts *opts)
{
	/* Page-cache reads, not the copy engine, bound a load: measured on
	 * a 16-CPU H100 host, 1 reader gave 5 GB/s, 2 gave 10, 4 gave 17, 8
	 * gave 23, against 55 for pinned H2D (docs/performance.md). So one
	 * reader per 4 CPUs, up to 8, leaving most CPUs to the job; 2 from 4
	 * CPUs; on 2 or 3 CPUs a second reader only competes with the
	 * copying thread. Two slots beyond the readers (4 at least) keep a
	 * copy in flight while each reader fills its own. */
	unsigned cpus = usable_cpus();
	unsigned readers = cpus / 4;
	if (readers < (cpus >= 4 ? 2u : 1u))
		readers = cpus >= 4 ? 2 : 1;
	if (readers > 8)
		readers = 8;
	opts->staging_size = (size_t)4 << 20;
	opts->staging_count = readers + 2 < 4 ? 4 : readers + 2;
	opts->io_threads = readers;
	opts->pool_max_bytes = 0;
	opts->max_loads = 4;
}

static int check_opts(const struct mg_ctx_opts *o)
{
	if (o->staging_size == 0 || o->staging_size > ((size_t)1 << 40))
		return -EINVAL;
	if (o->staging_count < 2 || o->staging_count > MG_MAX_STAGING_COUNT)
		return -EINVAL;
	if (o->io_threads < 1 || o->io_threads > MG_MAX_IO_THREADS)
		return -EINVAL;
	if (o->max_loads < 1 || o->max_loads > MG_MAX_LOADS)
		return -EINVAL;
	return 0;
}

static int pick_backend(int device, const struct mg_backend **be, int *dev)
{
	if (device == MG_DEVICE_CPU) {
		*be = &mg_backend_cpu;
		*dev = MG_DEVICE_CPU;
		return 0;
	}
	if (device < MG_DEVICE_AUTO)
		return -EINVAL;
#ifdef MG_HAVE_CUDA
	int n = mg_cuda_device_count();

	if (device == MG_DEVICE_AUTO) {
		*be = n > 0 ? &mg_backend_cuda : &mg_backend_cpu;
		*dev = n > 0 ? 0 : MG_DEVICE_CPU;
		return 0;
	}
	if (device >= n)
		return -ENODEV;
	*be = &mg_backend_cuda;
	*dev = device;
	return 0;
#else
	if (device != MG_DEVICE_AUTO)
		return -ENODEV;
	*be = &mg_backend_cpu;
	*dev = MG_DEVICE_CPU;
	return 0;
#endif
}

int mg_ctx_open(int device, const struct mg_ctx_opts *opts, mg_ctx **out)
{
	struct mg_ctx_opts o;
	const struct mg_backend *be;
	struct mg_ctx *ctx;
	int dev, r;

	if (opts)
		o = *opts;
	else
		mg_ctx_opts_init(&o);
	r = check_opts(&o);
	if (r)
		return r;
	/* a ring smaller than the default readers (which follow the CPUs)
	 * needs fewer of them, not an error on bigger machines only */
	if (o.io_threads > o.staging_count - 1)
		o.io_threads = o.staging_count - 1;
	r = pick_backend(device, &be, &dev);
	if (r)
		return r;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->be = be;
	ctx->device = dev;
	ctx->opts = o;
	atomic_init(&ctx->refs, 1);
	mg_mutex_init(&ctx->lock);
	pthread_cond_init(&ctx->rings_free, NULL);
	*out = ctx;
	return 0;
}

void mg_ctx_ref(struct mg_ctx *ctx)
{
	atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed);
}

void mg_ctx_unref(struct mg_ctx *ctx)
{
	if (atomic_fetch_sub_explicit(&ctx->refs, 1, memory_order_acq_rel) != 1)
		return;
	mg_pool_drain(ctx);
	mg_readers_drain(ctx);
	pthread_cond_destroy(&ctx->rings_free);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

void mg_ctx_close(mg_ctx *ctx)
{
	if (ctx)
		mg_ctx_unref(ctx);
}

int mg_ctx_device(const mg_ctx *ctx)
{
	return ctx->device;
}

const char *mg_ctx_backend(const mg_ctx *ctx)
{
	return ctx->be->name;
}

DLDevice mg_ctx_dl_device(const mg_ctx *ctx)
{
	DLDevice d = {ctx->be->dl_type, ctx->device < 0 ? 0 : ctx->device};

	return d;
}

void mg_ctx_trim(mg_ctx *ctx)
{
	mg_ctx_ref(ctx); /* another thread may close ctx meanwhile */
	mg_pool_drain(ctx);
	mg_readers_drain(ctx);
	mg_ctx_unref(ctx);
}

void mg_ctx_stats(mg_ctx *ctx, struct mg_ctx_stats *out)
{
	pthread_mutex_lock(&ctx->lock);
	*out = ctx->stats;
	pthread_mutex_unlock(&ctx->lock);
}
