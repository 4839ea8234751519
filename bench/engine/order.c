/*
 * order.c - what the batch order (order/) costs: building an epoch's order
 * from every shard's count, resuming at global batch 10^6 (the order of a
 * fresh epoch, then that batch's records as runs) and the records of one
 * batch once the order is built, per shard count. CPU time of this
 * process (CLOCK_PROCESS_CPUTIME_ID) beside wall time, medians of 9.
 *
 * build/dev/bench/engine/order [RECORDS_PER_SHARD]
 *
 * Not for: reading records (the batch tree's bench is bench/batches).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mf_order.h"

static double now(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

#define ROUNDS 9
#define BATCH 1024

static struct mf_order *build(uint64_t shards, uint64_t per, uint64_t epoch)
{
	struct mf_order_params p = {.shuffled = true,
				    .seed = 1,
				    .epoch = epoch,
				    .window = 256ULL << 20,
				    .nshards = shards};
	memset(p.fingerprint, 0x5a, 32);
	struct mf_order *o;
	if (mf_order_new(&p, &o))
		exit(1);
	for (uint64_t s = 0; s < shards; s++)
		if (mf_order_set_shard(o, s, per, per * 2048))
			exit(1);
	return o;
}

static void one_batch(const struct mf_order *o, uint64_t g)
{
	static struct mf_order_run runs[BATCH];
	size_t n;
	uint64_t cov;
	if (mf_order_runs(o, g * BATCH, BATCH, runs, BATCH, &n, &cov) ||
	    cov != BATCH)
		exit(1);
}

int main(int argc, char **argv)
{
	uint64_t per = argc > 1 ? strtoull(argv[1], NULL, 10) : 131072;
	const uint64_t shard_counts[] = {16, 1024, 65536};
	printf("records per shard %llu (2 KiB each), batch %d, window 256 "
	       "MiB; medians of %d\n",
	       (unsigned long long)per, BATCH, ROUNDS);
	printf("| shards | records | build ms (CPU) | resume at 10^6 ms (CPU) "
	       "| one batch us (CPU) |\n| --- | --- | --- | --- | --- |\n");
	for (size_t i = 0; i < 3; i++) {
		uint64_t shards = shard_counts[i];
		if (shards * per / BATCH <= 1000000)
			continue;
		double bw[ROUNDS], bc[ROUNDS], rw[ROUNDS], rc[ROUNDS],
		    ow[ROUNDS], oc[ROUNDS];
		for (int r = 0; r < ROUNDS; r++) {
			double w0 = now(CLOCK_MONOTONIC),
			       c0 = now(CLOCK_PROCESS_CPUTIME_ID);
			struct mf_order *o = build(shards, per, (uint64_t)r);
			one_batch(o, 1000000);
			double w1 = now(CLOCK_MONOTONIC),
			       c1 = now(CLOCK_PROCESS_CPUTIME_ID);
			rw[r] = (w1 - w0) * 1e3;
			rc[r] = (c1 - c0) * 1e3;
			mf_order_free(o);
			w0 = now(CLOCK_MONOTONIC);
			c0 = now(CLOCK_PROCESS_CPUTIME_ID);
			o = build(shards, per, (uint64_t)r);
			w1 = now(CLOCK_MONOTONIC);
			c1 = now(CLOCK_PROCESS_CPUTIME_ID);
			bw[r] = (w1 - w0) * 1e3;
			bc[r] = (c1 - c0) * 1e3;
			for (int k = 0; k < 100; k++)
				one_batch(o,
					  (1000000 + (uint64_t)k * 7919) %
					      (shards * per / BATCH));
			double w2 = now(CLOCK_MONOTONIC),
			       c2 = now(CLOCK_PROCESS_CPUTIME_ID);
			ow[r] = (w2 - w1) * 1e6 / 100;
			oc[r] = (c2 - c1) * 1e6 / 100;
			mf_order_free(o);
		}
		double *all[] = {bw, bc, rw, rc, ow, oc};
		for (int k = 0; k < 6; k++)
			qsort(all[k], ROUNDS, sizeof(double), cmp);
		int m = ROUNDS / 2;
		printf(
		    "| %llu | %llu | %.2f (%.2f) | %.2f (%.2f) | %.0f (%.0f) "
		    "|\n",
		    (unsigned long long)shards,
		    (unsigned long long)(shards * per), bw[m], bc[m], rw[m],
		    rc[m], ow[m], oc[m]);
	}
	return 0;
}
