/*
 * adapt.c - what adapting the zstd level costs and gains: a Zipf-
 * distributed stream of u16 tokens (a tokenizer's output; 256 MiB by
 * default, vocabulary 65536, exponent 1.1, fixed seed) is made in memory,
 * then written through the shard writer as fast as it will take it, in
 * 1 MiB pieces, once with the level pinned at zstd:3 and once adapting
 * under the ceiling zstd:3, rounds interleaved. For each it prints
 *   MODE seconds S mb_per_s R stored BYTES ratio RAW/STORED
 * (the medians; seconds from open to a durable commit), then the
 * adaptive run's chunks per level of its last round and
 *   stored_vs_fixed ADAPTIVE/FIXED
 * the price of adapting in stored bytes. The writer here is fed faster
 * than any stage feeds it, so the adaptive run shows the far end: how low
 * the level goes when compression is the only work.
 *
 * Not for: conclusions on a loaded machine (timings move with the load;
 * sizes do not, for the pinned run), or the stage and the mount around
 * the writer (bench/mount, bench/engine/threads.c).
 *
 * usage: adapt [--size MIB] [--store DIR] [--threads N] [--rounds N]
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mf_snapshot.h"

#define FP "adab7adab7000000000000000000000000000000000000000000000000000001"
#define RUN "adab7000000000000000000000000001"
#define VOCAB 65536
#define PIECE (1 << 20)
#define MAX_ROUNDS 16
#define LEVEL_MIN -16 /* the lowest rung the writer uses */

struct opts {
	size_t size;
	const char *store;
	unsigned threads;
	int rounds;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* n u16 tokens, token k drawn with weight 1 / (k + 1)^1.1. */
static int zipf_fill(uint16_t *out, size_t n)
{
	double *cdf = malloc(VOCAB * sizeof(*cdf));
	if (!cdf)
		return -ENOMEM;
	double sum = 0;
	for (int k = 0; k < VOCAB; k++) {
		sum += 1.0 / pow(k + 1, 1.1);
		cdf[k] = sum;
	}
	uint64_t s = 42;
	for (size_t i = 0; i < n; i++) {
		double u = (double)(rnd(&s) >> 11) / 9007199254740992.0 * sum;
		int lo = 0, hi = VOCAB - 1;
		while (lo < hi) {
			int mid = (lo + hi) / 2;
			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		out[i] = (uint16_t)lo;
	}
	free(cdf);
	return 0;
}

/* Chunks of the committed shard per level; [LEVEL_MIN .. 22], raw apart. */
struct levels {
	unsigned at[22 - LEVEL_MIN + 1];
	unsigned raw;
};

static int count_levels(struct mf_store *st, uint32_t shard, struct levels *l)
{
	struct mf_shard_reader *r;
	int rc = mf_shard_reader_open(st, FP, RUN, shard, &r);
	if (rc)
		return rc;
	struct mf_shard_stat s;
	mf_shard_reader_stat(r, &s);
	memset(l, 0, sizeof(*l));
	for (uint32_t i = 0; i < s.chunks && rc == 0; i++) {
		enum mf_codec codec;
		int level;
		rc = mf_shard_reader_chunk_codec(r, i, &codec, &level);
		if (rc == 0 && codec == MF_CODEC_NONE)
			l->raw++;
		else if (rc == 0 && level >= LEVEL_MIN && level <= 22)
			l->at[level - LEVEL_MIN]++;
	}
	mf_shard_reader_close(r);
	return rc;
}

/* Writes buf as shard `shard`; *secs from open to commit. */
static int write_one(struct mf_store *st, uint32_t shard, bool adapt,
		     const struct opts *o, const uint8_t *buf, double *secs,
		     struct mf_shard_stat *stat)
{
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, 4 << 20, o->threads,
				   adapt};
	double t0 = now();
	struct mf_shard_writer *w;
	int rc = mf_shard_writer_open(st, FP, RUN, shard, &cfg, &w);
	if (rc)
		return rc;
	for (size_t off = 0; off < o->size && rc == 0; off += PIECE) {
		size_t n = o->size - off < PIECE ? o->size - off : PIECE;
		rc = mf_shard_writer_write(w, buf + off, n);
	}
	if (rc) {
		mf_shard_writer_abort(w);
		return rc;
	}
	rc = mf_shard_writer_commit(w, stat);
	*secs = now() - t0;
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: adapt [--size MIB] [--store DIR] "
		"[--threads N] [--rounds N]\n");
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.size = 256u << 20, .store = NULL, .rounds = 3};
	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--size"))
			o->size = (size_t)strtoul(argv[++i], NULL, 10) << 20;
		else if (!strcmp(argv[i], "--store"))
			o->store = argv[++i];
		else if (!strcmp(argv[i], "--threads"))
			o->threads = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--rounds"))
			o->rounds = atoi(argv[++i]);
		else
			usage();
	}
	if (o->size == 0 || o->rounds < 1 || o->rounds > MAX_ROUNDS)
		usage();
}

static void print_levels(const struct levels *l)
{
	printf("levels adaptive");
	for (int k = 22; k >= LEVEL_MIN; k--)
		if (l->at[k - LEVEL_MIN])
			printf(" %d:%u", k, l->at[k - LEVEL_MIN]);
	printf(" raw:%u\n", l->raw);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	char tmpl[] = "/tmp/matfs-adapt-XXXXXX";
	const char *dir = o.store ? o.store : mkdtemp(tmpl);
	uint8_t *buf = malloc(o.size + 1);
	struct mf_store *st = NULL;
	if (!dir || !buf || zipf_fill((uint16_t *)buf, o.size / 2) != 0 ||
	    mf_store_open(dir, true, &st) != 0 ||
	    mf_store_run_create(st, FP, RUN) != 0) {
		fprintf(stderr, "adapt: cannot set up the store\n");
		return 1;
	}
	static const char *const names[2] = {"fixed_zstd3", "adaptive_zstd3"};
	double secs[2][MAX_ROUNDS];
	struct mf_shard_stat stat[2];
	for (int r = 0; r < o.rounds; r++) {
		for (int m = 0; m < 2; m++) {
			uint32_t shard = (uint32_t)(r * 2 + m);
			int rc = write_one(st, shard, m == 1, &o, buf,
					   &secs[m][r], &stat[m]);
			if (rc) {
				fprintf(stderr, "adapt: %s: %s\n", names[m],
					strerror(-rc));
				return 1;
			}
		}
	}
	struct levels l;
	if (count_levels(st, (uint32_t)(o.rounds * 2 - 1), &l) != 0)
		return 1;
	for (int m = 0; m < 2; m++) {
		double s = median(secs[m], o.rounds);
		printf("%s seconds %.3f mb_per_s %.0f stored %llu ratio %.3f\n",
		       names[m], s, (double)o.size / 1e6 / s,
		       (unsigned long long)stat[m].stored_bytes,
		       (double)o.size / (double)stat[m].stored_bytes);
	}
	print_levels(&l);
	printf("stored_vs_fixed %.3f\n",
	       (double)stat[1].stored_bytes / (double)stat[0].stored_bytes);
	mf_store_snapshot_remove(st, FP);
	mf_store_close(st);
	if (!o.store) {
		char snaps[sizeof(tmpl) + 16];
		snprintf(snaps, sizeof(snaps), "%s/snapshots", dir);
		rmdir(snaps);
		rmdir(dir);
	}
	free(buf);
	return 0;
}
