/*
 * bench_gpu.c - libmatgpu against its baselines, measured in one run, for
 * one file in the page cache on CUDA device 0:
 *   h2d_ceiling   cudaMemcpy from an already-filled pinned buffer
 *   host_ceiling  the host half of matgpu's pipeline alone: io_threads
 *                 threads pread() staging-sized pieces, in turn, into
 *                 pinned buffers of their own, reused (no copy to the GPU)
 *   host_whole    read() of the whole file into pinned memory, one thread
 *   naive         read() into malloc'd memory, then cudaMemcpy
 *   matgpu        mg_load() (pread into the pinned ring, cudaMemcpyAsync)
 * Buffers are allocated and touched once, outside the timings, as the
 * pool does for matgpu; each figure is the median of interleaved rounds.
 * Prints "gbps NAME VALUE" and "ratio NAME VALUE" lines, then the targets.
 *
 * Not for: a machine without a GPU (exits 77 saying so) or cold-cache
 * measurements (drop the cache yourself and use --rounds 1 for that).
 *
 * Usage: bench_gpu [--size MIB] [--rounds N] [--dir DIR | --file PATH]
 *                  [--staging MIB] [--count N] [--threads N]
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "matgpu.h"

struct cfg {
	size_t size;
	int rounds;
	const char *dir;
	const char *file;
	struct mg_ctx_opts opts;
};

struct bench {
	struct cfg cfg;
	char path[4096];
	bool made_file;
	void *pinned; /* size bytes, pinned */
	void *pageable; /* size bytes, malloc'd */
	void *dev; /* size bytes on the device */
	void *stage[64]; /* io_threads pinned buffers of staging_size */
	mg_ctx *ctx;
};

enum { H2D, HOST, WHOLE, NAIVE, MATGPU, NMETHODS };
static const char *const names[NMETHODS] = {"h2d_ceiling", "host_ceiling",
					    "host_whole", "naive", "matgpu"};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "bench_gpu: %s: %s\n", what, detail);
	exit(1);
}

static void cuda_check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		die(what, cudaGetErrorName(e));
}

/* read() of the whole file into p, one thread. */
static void read_all(const char *path, char *p, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t off = 0;
	ssize_t r;

	if (fd < 0)
		die(path, strerror(errno));
	while (off < size) {
		r = read(fd, p + off,
			 size - off < (64u << 20) ? size - off : (64u << 20));
		if (r <= 0)
			die(path, r ? strerror(errno) : "file shrank");
		off += (size_t)r;
	}
	close(fd);
}

struct reader {
	struct bench *b;
	int fd;
	unsigned index;
};

/* Thread index of host_ceiling: pieces index, index + n, ... */
static void *read_pieces(void *arg)
{
	struct reader *r = arg;
	const struct cfg *c = &r->b->cfg;
	size_t piece = c->opts.staging_size;
	size_t step = piece * c->opts.io_threads;

	for (size_t off = piece * r->index; off < c->size; off += step) {
		size_t want = c->size - off < piece ? c->size - off : piece;
		ssize_t got =
		    pread(r->fd, r->b->stage[r->index], want, (off_t)off);

		if (got != (ssize_t)want)
			die(r->b->path,
			    got < 0 ? strerror(errno) : "short read");
	}
	return NULL;
}

static void read_threaded(struct bench *b)
{
	unsigned n = b->cfg.opts.io_threads;
	struct reader r[64];
	pthread_t t[64];
	int fd = open(b->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		die(b->path, strerror(errno));
	for (unsigned i = 0; i < n; i++) {
		r[i] = (struct reader){b, fd, i};
		if (pthread_create(&t[i], NULL, read_pieces, &r[i]))
			die("pthread_create", strerror(errno));
	}
	for (unsigned i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	close(fd);
}

static void make_file(struct bench *b)
{
	char *p = b->pageable;
	int fd;

	snprintf(b->path, sizeof(b->path), "%s/bench-gpu-XXXXXX", b->cfg.dir);
	fd = mkstemp(b->path);
	if (fd < 0)
		die(b->path, strerror(errno));
	for (size_t i = 0; i < b->cfg.size; i += 8) {
		uint64_t v = i * 0x9e3779b97f4a7c15ull;

		memcpy(p + i, &v, b->cfg.size - i < 8 ? b->cfg.size - i : 8);
	}
	for (size_t off = 0; off < b->cfg.size;) {
		ssize_t r = write(fd, p + off, b->cfg.size - off);

		if (r <= 0)
			die(b->path, strerror(errno));
		off += (size_t)r;
	}
	close(fd);
	b->made_file = true;
}

static double run_one(struct bench *b, int m)
{
	size_t size = b->cfg.size;
	mg_buf *buf = NULL;
	double t0 = now();
	int r;

	switch (m) {
	case H2D:
		cuda_check(
		    cudaMemcpy(b->dev, b->pinned, size, cudaMemcpyHostToDevice),
		    "cudaMemcpy");
		break;
	case HOST:
		read_threaded(b);
		break;
	case WHOLE:
		read_all(b->path, b->pinned, size);
		break;
	case NAIVE:
		read_all(b->path, b->pageable, size);
		cuda_check(cudaMemcpy(b->dev, b->pageable, size,
				      cudaMemcpyHostToDevice),
			   "cudaMemcpy");
		break;
	case MATGPU:
		r = mg_load(b->ctx, b->path, &buf);
		if (r)
			die("mg_load", mg_strerror(r));
		mg_buf_release(buf);
		break;
	}
	return now() - t0;
}

/* The bytes mg_load put on the device are the file's. */
static void verify(struct bench *b)
{
	mg_buf *buf = NULL;
	int r = mg_load(b->ctx, b->path, &buf);

	if (r)
		die("mg_load", mg_strerror(r));
	read_all(b->path, b->pageable, b->cfg.size);
	cuda_check(cudaMemcpy(b->pinned, mg_buf_data(buf), b->cfg.size,
			      cudaMemcpyDeviceToHost),
		   "cudaMemcpy back");
	if (mg_buf_size(buf) != b->cfg.size ||
	    memcmp(b->pinned, b->pageable, b->cfg.size) != 0)
		die("verify", "bytes on the device differ from the file");
	mg_buf_release(buf);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static size_t arg_size(const char *s, size_t unit)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*end || v == 0)
		die("bad number", s);
	return (size_t)v * unit;
}

static void parse(int argc, char **argv, struct cfg *c)
{
	c->size = (size_t)1 << 30;
	c->rounds = 7;
	c->dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	c->file = NULL;
	mg_ctx_opts_init(&c->opts);
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];

		if (!strcmp(k, "--size"))
			c->size = arg_size(v, 1u << 20);
		else if (!strcmp(k, "--rounds"))
			c->rounds = (int)arg_size(v, 1);
		else if (!strcmp(k, "--dir"))
			c->dir = v;
		else if (!strcmp(k, "--file"))
			c->file = v;
		else if (!strcmp(k, "--staging"))
			c->opts.staging_size = arg_size(v, 1u << 20);
		else if (!strcmp(k, "--count"))
			c->opts.staging_count = (unsigned)arg_size(v, 1);
		else if (!strcmp(k, "--threads"))
			c->opts.io_threads = (unsigned)arg_size(v, 1);
		else
			die("unknown option", k);
	}
	if (argc % 2 == 0)
		die("missing value after", argv[argc - 1]);
}

static void setup(struct bench *b)
{
	size_t size = b->cfg.size;
	int r;

	if (b->cfg.file) {
		int fd = open(b->cfg.file, O_RDONLY);
		off_t end = fd < 0 ? -1 : lseek(fd, 0, SEEK_END);

		if (end <= 0)
			die(b->cfg.file, "cannot open, or empty");
		close(fd);
		b->cfg.size = size = (size_t)end;
		snprintf(b->path, sizeof(b->path), "%s", b->cfg.file);
	}
	cuda_check(cudaSetDevice(0), "cudaSetDevice");
	cuda_check(cudaHostAlloc(&b->pinned, size, cudaHostAllocDefault),
		   "cudaHostAlloc");
	cuda_check(cudaMalloc(&b->dev, size), "cudaMalloc");
	b->pageable = malloc(size);
	if (!b->pageable)
		die("malloc", strerror(ENOMEM));
	memset(b->pageable, 1, size);
	memset(b->pinned, 1, size);
	if (!b->cfg.file)
		make_file(b);
	r = mg_ctx_open(0, &b->cfg.opts, &b->ctx);
	if (r)
		die("mg_ctx_open", mg_strerror(r));
	if (b->cfg.opts.io_threads > 64)
		die("--threads", "more than 64");
	for (unsigned i = 0; i < b->cfg.opts.io_threads; i++) {
		cuda_check(cudaHostAlloc(&b->stage[i], b->cfg.opts.staging_size,
					 cudaHostAllocDefault),
			   "cudaHostAlloc");
		memset(b->stage[i], 1, b->cfg.opts.staging_size);
	}
	read_all(b->path, b->pinned, size); /* into the page cache */
	verify(b);
}

static void report(const struct bench *b, double med[NMETHODS])
{
	double gb = (double)b->cfg.size / 1e9, gbps[NMETHODS];
	double ceiling, r_ceiling, r_naive;

	for (int m = 0; m < NMETHODS; m++) {
		gbps[m] = gb / med[m];
		printf("gbps %s %.2f\n", names[m], gbps[m]);
	}
	ceiling = gbps[HOST] < gbps[H2D] ? gbps[HOST] : gbps[H2D];
	r_ceiling = gbps[MATGPU] / ceiling;
	r_naive = gbps[MATGPU] / gbps[NAIVE];
	printf("ratio matgpu_vs_h2d_ceiling %.3f\n", gbps[MATGPU] / gbps[H2D]);
	printf("ratio matgpu_vs_host_ceiling %.3f\n",
	       gbps[MATGPU] / gbps[HOST]);
	printf("ratio matgpu_vs_min_ceiling %.3f\n", r_ceiling);
	printf("ratio matgpu_vs_naive %.3f\n", r_naive);
	printf("target matgpu_vs_min_ceiling >= 0.8: %s\n",
	       r_ceiling >= 0.8 ? "PASS" : "FAIL");
	printf("target matgpu_vs_naive >= 1.5: %s\n",
	       r_naive >= 1.5 ? "PASS" : "FAIL");
}

int main(int argc, char **argv)
{
	struct bench b = {0};
	struct cudaDeviceProp prop;
	double *t[NMETHODS], med[NMETHODS];
	const char *why;

	parse(argc, argv, &b.cfg);
	if (mg_device_count() == 0) {
		mg_cuda_last_error(&why);
		printf("bench_gpu: no CUDA device (%s): nothing measured\n",
		       why);
		return 77;
	}
	setup(&b);
	cuda_check(cudaGetDeviceProperties(&prop, 0), "device properties");
	printf("bench_gpu: device 0 '%s', file %zu MiB in the page cache, "
	       "%d rounds, staging %u x %zu KiB, %u I/O threads\n",
	       prop.name, b.cfg.size >> 20, b.cfg.rounds,
	       b.cfg.opts.staging_count, b.cfg.opts.staging_size >> 10,
	       b.cfg.opts.io_threads);
	for (int m = 0; m < NMETHODS; m++) {
		t[m] = calloc((size_t)b.cfg.rounds, sizeof(double));
		run_one(&b, m); /* warm-up, not counted */
	}
	for (int r = 0; r < b.cfg.rounds; r++)
		for (int m = 0; m < NMETHODS; m++)
			t[m][r] = run_one(&b, m);
	for (int m = 0; m < NMETHODS; m++) {
		qsort(t[m], (size_t)b.cfg.rounds, sizeof(double), cmp_double);
		med[m] = t[m][b.cfg.rounds / 2];
		free(t[m]);
	}
	report(&b, med);
	mg_ctx_close(b.ctx);
	if (b.made_file)
		unlink(b.path);
	cudaFree(b.dev);
	cudaFreeHost(b.pinned);
	for (unsigned i = 0; i < b.cfg.opts.io_threads && i < 64; i++)
		cudaFreeHost(b.stage[i]);
	free(b.pageable);
	return 0;
}
