/*
 * bench_cpu.c - libmatgpu's CPU backend against plain reads, measured in
 * one run on one file in the page cache:
 *   memcpy      memcpy of the file's size between two touched buffers
 *   read_warm   read() of the file into an already-touched buffer
 *   read_fresh  read() of the file into a freshly malloc'd buffer (its
 *               page faults included), then free()
 *   mg_load     mg_load() on MG_DEVICE_CPU, then mg_buf_release() (the
 *               context's pool keeps the buffer for the next load)
 * Each figure is the median of interleaved rounds, after one warm-up
 * round. Prints "gbps NAME VALUE" and "ratio NAME VALUE" lines.
 *
 * Not for: GPU figures (bench_gpu, on a CUDA machine) or cold-cache reads.
 *
 * Usage: bench_cpu [--size MIB (256)] [--rounds N (7)] [--dir DIR]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "matgpu.h"

enum { MEMCPY, READ_WARM, READ_FRESH, MG_LOAD, NKINDS };
static const char *const kind_names[NKINDS] = {"memcpy", "read_warm",
					       "read_fresh", "mg_load"};

#define MAX_ROUNDS 99

struct run {
	size_t size;
	int rounds;
	const char *dir;
	char path[4096];
	char *src, *dst; /* size bytes each, touched */
	mg_ctx *ctx;
	double t[NKINDS][MAX_ROUNDS];
};

static double clock_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(const char *what, const char *why)
{
	fprintf(stderr, "bench_cpu: %s: %s\n", what, why);
	exit(1);
}

/* The whole file at path into dst, in reads of at most 64 MiB. */
static void slurp(const char *path, char *dst, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		fail(path, strerror(errno));
	for (size_t done = 0; done < size;) {
		size_t want =
		    size - done < (64u << 20) ? size - done : 64u << 20;
		ssize_t got = read(fd, dst + done, want);

		if (got <= 0)
			fail(path, got ? strerror(errno) : "file shrank");
		done += (size_t)got;
	}
	close(fd);
}

/* Writes src (size bytes) to a new file in dir; its name into r->path. */
static void write_file(struct run *r)
{
	int fd;

	snprintf(r->path, sizeof(r->path), "%s/bench-cpu-XXXXXX", r->dir);
	fd = mkstemp(r->path);
	if (fd < 0)
		fail(r->path, strerror(errno));
	for (size_t done = 0; done < r->size;) {
		ssize_t put = write(fd, r->src + done, r->size - done);

		if (put <= 0)
			fail(r->path, strerror(errno));
		done += (size_t)put;
	}
	close(fd);
}

static double time_one(struct run *r, int kind)
{
	double t0 = clock_s();
	mg_buf *buf;
	char *fresh;
	int rc;

	switch (kind) {
	case MEMCPY:
		memcpy(r->dst, r->src, r->size);
		break;
	case READ_WARM:
		slurp(r->path, r->dst, r->size);
		break;
	case READ_FRESH:
		fresh = malloc(r->size);
		if (!fresh)
			fail("malloc", strerror(ENOMEM));
		slurp(r->path, fresh, r->size);
		free(fresh);
		break;
	case MG_LOAD:
		rc = mg_load(r->ctx, r->path, &buf);
		if (rc)
			fail("mg_load", mg_strerror(rc));
		if (mg_buf_size(buf) != r->size ||
		    memcmp(mg_buf_data(buf), r->src, r->size) != 0)
			fail("mg_load", "bytes differ from the file");
		mg_buf_release(buf);
		return clock_s() - t0; /* the check is not timed */
	}
	return clock_s() - t0;
}

static size_t positive(const char *s, size_t max)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*end || v == 0 || v > max)
		fail("bad number", s);
	return (size_t)v;
}

static void options(int argc, char **argv, struct run *r)
{
	r->size = (size_t)256 << 20;
	r->rounds = 7;
	r->dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	if (argc % 2 == 0)
		fail("missing value after", argv[argc - 1]);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--size"))
			r->size = positive(argv[i + 1], 1u << 20) << 20;
		else if (!strcmp(argv[i], "--rounds"))
			r->rounds = (int)positive(argv[i + 1], MAX_ROUNDS);
		else if (!strcmp(argv[i], "--dir"))
			r->dir = argv[i + 1];
		else
			fail("unknown option", argv[i]);
	}
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void print_figures(struct run *r)
{
	double gbps[NKINDS];

	for (int k = 0; k < NKINDS; k++) {
		qsort(r->t[k], (size_t)r->rounds, sizeof(double), by_value);
		gbps[k] = (double)r->size / 1e9 / r->t[k][r->rounds / 2];
		printf("gbps %s %.2f\n", kind_names[k], gbps[k]);
	}
	printf("ratio mg_load_vs_read_warm %.2f  speed / read() into a "
	       "touched buffer\n",
	       gbps[MG_LOAD] / gbps[READ_WARM]);
	printf("ratio mg_load_vs_read_fresh %.2f  speed / read() into a "
	       "fresh buffer\n",
	       gbps[MG_LOAD] / gbps[READ_FRESH]);
}

int main(int argc, char **argv)
{
	static struct run r;
	int rc;

	options(argc, argv, &r);
	r.src = malloc(r.size);
	r.dst = malloc(r.size);
	if (!r.src || !r.dst)
		fail("malloc", strerror(ENOMEM));
	for (size_t i = 0; i < r.size; i++)
		r.src[i] = (char)(i * 2654435761u >> 13);
	memset(r.dst, 0, r.size);
	write_file(&r);
	rc = mg_ctx_open(MG_DEVICE_CPU, NULL, &r.ctx);
	if (rc)
		fail("mg_ctx_open", mg_strerror(rc));
	printf("bench_cpu: backend %s, file %zu MiB in the page cache, %d "
	       "rounds, %ld cores\n",
	       mg_ctx_backend(r.ctx), r.size >> 20, r.rounds,
	       sysconf(_SC_NPROCESSORS_ONLN));
	for (int k = 0; k < NKINDS; k++)
		time_one(&r, k); /* warm-up: page cache, pool */
	for (int i = 0; i < r.rounds; i++)
		for (int k = 0; k < NKINDS; k++)
			r.t[k][i] = time_one(&r, k);
	print_figures(&r);
	mg_ctx_close(r.ctx);
	unlink(r.path);
	free(r.src);
	free(r.dst);
	return 0;
}
