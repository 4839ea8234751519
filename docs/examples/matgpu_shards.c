/*
 * matgpu_shards.c - reads every shard of a matfs snapshot directory (any
 * directory of files) into device memory with libmatgpu's loader, the next
 * shards loading while the current one is used, and prints each shard's
 * size and the throughput.
 *
 * Not for: production use as is; it shows the calls and their error
 * handling. On a CUDA device the bytes stay on the GPU; on the CPU backend
 * the example sums them to show they are there.
 *
 * Build: cc -o matgpu_shards matgpu_shards.c $(pkg-config --cflags --libs matgpu)
 * Run:   ./matgpu_shards /mnt/data/wiki-tokens [cpu|auto|CUDA-ORDINAL]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <matgpu.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t byte_sum(const mg_buf *buf)
{
	const uint8_t *p = mg_buf_data(buf);
	uint64_t sum = 0;

	for (size_t i = 0; i < mg_buf_size(buf); i++)
		sum += p[i];
	return sum;
}

/* Reads every file of ld, from folder dir: each one's size (on the CPU,
 * its byte sum too), then the totals. */
static void read_all(mg_ctx *ctx, mg_loader *ld, const char *dir)
{
	mg_buf *buf = NULL;
	uint64_t total = 0;
	int r, n = 0;
	double t0;

	printf("reading '%s' on %s\n", dir, mg_ctx_backend(ctx));
	t0 = now();
	for (;;) {
		r = mg_loader_next(ld, &buf);
		if (r) {
			/* This file failed; the loader goes on with the next. */
			fprintf(stderr, "matgpu_shards: file %d: %s\n", n,
				mg_strerror(r));
			n++;
			continue;
		}
		if (!buf)
			break;
		if (mg_ctx_device(ctx) == MG_DEVICE_CPU)
			printf("file %d: %zu bytes, byte sum %llu\n", n,
			       mg_buf_size(buf),
			       (unsigned long long)byte_sum(buf));
		else
			printf("file %d: %zu bytes at device address %p\n", n,
			       mg_buf_size(buf), mg_buf_data(buf));
		total += mg_buf_size(buf);
		mg_buf_release(buf); /* back to the pool for the next files */
		n++;
	}
	printf("%d files, %.1f MB in %.3f s\n", n, (double)total / 1e6,
	       now() - t0);
}

int main(int argc, char **argv)
{
	struct mg_loader_opts lo;
	mg_loader *ld = NULL;
	mg_ctx *ctx = NULL;
	const char *name;
	int device = MG_DEVICE_AUTO, r;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s DIR [cpu|auto|CUDA-ORDINAL]\n",
			argv[0]);
		return 2;
	}
	if (argc == 3)
		device = !strcmp(argv[2], "cpu") ? MG_DEVICE_CPU
		    : !strcmp(argv[2], "auto")	 ? MG_DEVICE_AUTO
						 : atoi(argv[2]);
	r = mg_ctx_open(device, NULL, &ctx);
	if (r) {
		mg_cuda_last_error(&name);
		fprintf(stderr, "matgpu_shards: device '%s': %s (%s)\n",
			argc == 3 ? argv[2] : "auto", mg_strerror(r), name);
		return 1;
	}
	mg_loader_opts_init(&lo);
	lo.prefetch = 2;
	lo.memory_budget = (uint64_t)2 << 30;
	r = mg_loader_open_dir(ctx, argv[1], &lo, &ld);
	if (r) {
		fprintf(stderr, "matgpu_shards: '%s': %s\n", argv[1],
			mg_strerror(r));
		mg_ctx_close(ctx);
		return 1;
	}
	read_all(ctx, ld, argv[1]);
	mg_loader_close(ld);
	mg_ctx_close(ctx);
	return 0;
}
