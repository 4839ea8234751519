/*
 * threads.c - the engine's thread counts against each other, in one run:
 *   stages    the stage command by hand into /dev/null       (baseline)
 *   cold_cN   mf_engine_open_shard of shard 0 of SPEC, cold, in a fresh
 *             store, with mf_engine_opts.compress_threads = N
 *   read_rN   mf_shard_reader_copy of that shard into /dev/null on N
 *             threads, its store file in the page cache
 *   zstd_dc   with --zst FILE: `zstd -dc FILE` into /dev/null    (baseline)
 * for N = 1 .. MAX, rounds interleaved. Prints "time NAME SECONDS"
 * (medians), "cpu NAME SECONDS" (this process's CPU time during the cold
 * materialization: the writer's copying and compression, not the stage),
 * "size" lines (raw and stored bytes of the shard) and "ratio" lines.
 *
 * Not for: reads through a mount (bench/mount) or matctl's own start-up
 * (bench/engine/run.sh). bench/engine/threads.sh writes the spec and
 * builds this.
 *
 * usage: threads --spec PATH --store DIR [--rounds N] [--max N]
 *                [--zst FILE] -- STAGE...
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mf_engine.h"
#include "mf_snapshot.h"

#define MAX_THREADS 8
#define MAX_ROUNDS 64

extern char **environ;

struct cfg {
	const char *spec;
	const char *store;
	const char *zst; /* may be NULL */
	int rounds;
	unsigned max;
	char **stage; /* argv of the stage by hand */
};

/* per round; [n] for n threads, 1 .. max */
struct times {
	double stages[MAX_ROUNDS];
	double zstd_dc[MAX_ROUNDS];
	double cold[MAX_THREADS + 1][MAX_ROUNDS];
	double cpu[MAX_THREADS + 1][MAX_ROUNDS];
	double read[MAX_THREADS + 1][MAX_ROUNDS];
	struct mf_shard_stat stat;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "threads: %s: %s\n", what, detail);
	exit(1);
}

static void usage(void)
{
	fputs("usage: threads --spec PATH --store DIR [--rounds N] [--max N] "
	      "[--zst FILE] -- STAGE...\n",
	      stderr);
	exit(2);
}

static long arg_num(const char *s, long max)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*end || v < 1 || v > max)
		die("bad number", s);
	return v;
}

static void parse(int argc, char **argv, struct cfg *c)
{
	int i = 1;

	*c = (struct cfg){.rounds = 3, .max = 2};
	for (; i + 1 < argc && strcmp(argv[i], "--") != 0; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];

		if (!strcmp(k, "--spec"))
			c->spec = v;
		else if (!strcmp(k, "--store"))
			c->store = v;
		else if (!strcmp(k, "--rounds"))
			c->rounds = (int)arg_num(v, MAX_ROUNDS);
		else if (!strcmp(k, "--zst"))
			c->zst = v;
		else if (!strcmp(k, "--max"))
			c->max = (unsigned)arg_num(v, MAX_THREADS);
		else
			die("unknown option", k);
	}
	if (i + 1 >= argc || strcmp(argv[i], "--") != 0 || !c->spec ||
	    !c->store)
		usage();
	c->stage = argv + i + 1;
}

/* Runs argv, stdout to /dev/null; returns its seconds. */
static double run_cmd(char **argv)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int status, rc;
	double t0;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
					 O_WRONLY, 0);
	t0 = now();
	rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		die(argv[0], strerror(rc));
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		die(argv[0], "failed");
	return now() - t0;
}

/*
 * Materializes shard 0 of the spec in store dir with n compression
 * threads; records the time and CPU time of the open, then reads it back
 * into /dev/null on 1 .. max threads.
 */
static void run_engine(const struct cfg *c, const char *dir, unsigned n,
		       int round, struct times *t)
{
	struct mf_engine_opts o = {.store_dir = dir, .compress_threads = n};
	struct mf_engine *e;
	struct mf_shard_reader *r;
	char fp[MF_FP_HEX_LEN + 1], *err = NULL;
	double t0, c0;
	int rc, null_fd;

	rc = mf_engine_open(&o, &e, &err);
	if (rc == 0)
		rc = mf_engine_register(e, c->spec, fp, &err);
	if (rc)
		die(dir, err ? err : strerror(-rc));
	t0 = now();
	c0 = cpu_now();
	rc = mf_engine_open_shard(e, fp, 0, &r, &err);
	t->cpu[n][round] = cpu_now() - c0;
	t->cold[n][round] = now() - t0;
	if (rc)
		die(c->spec, err ? err : strerror(-rc));
	mf_shard_reader_stat(r, &t->stat);
	null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (null_fd < 0)
		die("/dev/null", strerror(errno));
	for (unsigned k = 1; k <= c->max; k++) {
		t0 = now();
		rc = mf_shard_reader_copy(r, null_fd, k);
		if (rc)
			die("mf_shard_reader_copy", strerror(-rc));
		/* each engine reads: the reads of a round are interleaved */
		t->read[k][round] += (now() - t0) / c->max;
	}
	close(null_fd);
	mf_shard_reader_close(r);
	mf_engine_close(e);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static void report(const struct cfg *c, struct times *t)
{
	double stages = median(t->stages, c->rounds);
	double cold[MAX_THREADS + 1], read[MAX_THREADS + 1];
	double raw = (double)t->stat.raw_bytes;

	printf("size raw %llu\nsize stored %llu\n",
	       (unsigned long long)t->stat.raw_bytes,
	       (unsigned long long)t->stat.stored_bytes);
	printf("ratio compression %.2f  raw / stored bytes\n",
	       raw / (double)t->stat.stored_bytes);
	printf("time stages %.3f\n", stages);
	for (unsigned n = 1; n <= c->max; n++) {
		cold[n] = median(t->cold[n], c->rounds);
		read[n] = median(t->read[n], c->rounds);
		printf("time cold_c%u %.3f\ncpu cold_c%u %.3f\n", n, cold[n], n,
		       median(t->cpu[n], c->rounds));
		printf("time read_r%u %.3f  (%.2f GB/s)\n", n, read[n],
		       raw / read[n] / 1e9);
	}
	for (unsigned n = 1; n <= c->max; n++)
		printf("ratio cold_c%u_vs_stages %.2f  time / stages by hand\n",
		       n, cold[n] / stages);
	for (unsigned n = 2; n <= c->max; n++) {
		printf("ratio cold_c%u_vs_c1 %.2f  time / time with 1 "
		       "compression thread (< 1: faster)\n",
		       n, cold[n] / cold[1]);
		printf("ratio read_r%u_vs_r1 %.2f  speed / speed on 1 thread\n",
		       n, read[1] / read[n]);
	}
	if (!c->zst)
		return;
	double dc = median(t->zstd_dc, c->rounds);
	printf("time zstd_dc %.3f  (%.2f GB/s)\n", dc, raw / dc / 1e9);
	for (unsigned n = 1; n <= c->max; n++)
		printf("ratio read_r%u_vs_zstd_dc %.2f  speed / zstd -dc "
		       "speed\n",
		       n, dc / read[n]);
}

int main(int argc, char **argv)
{
	static struct times t;
	struct cfg c;
	char dir[4096];
	static char zstd[] = "zstd", dcq[] = "-dcq";
	char *dc[4] = {zstd, dcq, NULL, NULL};

	parse(argc, argv, &c);
	dc[2] = (char *)c.zst;
	for (int r = 0; r < c.rounds; r++) {
		t.stages[r] = run_cmd(c.stage);
		if (c.zst)
			t.zstd_dc[r] = run_cmd(dc);
		for (unsigned n = 1; n <= c.max; n++) {
			snprintf(dir, sizeof(dir), "%s/r%d-c%u", c.store, r, n);
			run_engine(&c, dir, n, r, &t);
		}
	}
	printf("# %d rounds, compression threads 1..%u, %ld cores\n", c.rounds,
	       c.max, sysconf(_SC_NPROCESSORS_ONLN));
	report(&c, &t);
	return 0;
}
