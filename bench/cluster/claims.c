/*
 * claims.c - claim throughput of the catalog backends against each other,
 * in one run: for each backend given (SQLite, and PostgreSQL with --pg),
 * a fresh snapshot of N tiny shards, each claimed and completed through
 * the catalog API (mf_catalog_claim_shard, mf_catalog_complete_shard):
 *   BACKEND_t1   one thread, one connection
 *   BACKEND_tT   T threads, a connection and a run each, taking the next
 *                shard from a shared counter
 * rounds interleaved. Every claim must answer MINE and every completion
 * succeed, and afterwards every shard must read materialized: a run that
 * does not stops with an error, so a figure is never of wrong work.
 * Prints "rate NAME CLAIMS_PER_S" (medians; a claim counts with its
 * completion) and "ratio pg_vs_sqlite_tN VALUE" (PostgreSQL's rate over
 * SQLite's, higher is better) and "ratio BACKEND_tT_vs_t1 VALUE".
 *
 * Not for: claims contended by several runs for one shard (the catalog's
 * tests) or the stages (bench/cluster/run.sh). bench/cluster/run.sh starts
 * the server and builds this.
 *
 * usage: claims --sqlite PATH [--pg LOCATION] [--shards N] [--threads T]
 *               [--rounds R]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mf_catalog.h"

#define MAX_THREADS 64
#define MAX_ROUNDS 64

struct cfg {
	const char *loc[2]; /* [0] SQLite, [1] PostgreSQL (may be NULL) */
	uint32_t shards;
	unsigned threads;
	int rounds;
};

static const char *const backend_name[2] = {"sqlite", "pg"};

/* One timed pass: threads claim and complete shards of fp until none is
 * left. */
struct pass {
	const char *loc;
	const char *fp;
	uint32_t shards;
	atomic_uint next; /* the next shard index to claim */
};

struct worker {
	struct pass *p;
	pthread_t tid;
	int rc;
	char what[400]; /* what failed, when rc != 0 */
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
	const char *server = mf_catalog_last_error();
	fprintf(stderr, "claims: %s: %s%s%s\n", what, strerror(-rc),
		*server ? ": " : "", server);
	exit(1);
}

static int run_new(const char *fp, struct mf_run_rec *me)
{
	memset(me, 0, sizeof(*me));
	int rc = mf_random_hex(MF_RUN_ID_HEX_LEN / 2, me->run_id);
	if (rc)
		return rc;
	snprintf(me->fp, sizeof(me->fp), "%s", fp);
	mf_hostname(me->host, sizeof(me->host));
	me->pid = (int32_t)getpid();
	me->pid_start = mf_proc_start_time(getpid());
	me->started = me->heartbeat = mf_now_s();
	snprintf(me->state, sizeof(me->state), "active");
	(void)mf_boot_id(me->boot_id);
	me->pid_ns = mf_pid_ns();
	return 0;
}

/* Claims and completes one shard; 0, or -errno with w->what set. */
static int claim_one(struct worker *w, struct mf_catalog *c,
		     const struct mf_run_rec *me, uint32_t i)
{
	enum mf_claim res;
	int rc =
	    mf_catalog_claim_shard(c, w->p->fp, i, me, mf_now_s(), &res, NULL);
	if (rc == 0 && res != MF_CLAIM_MINE)
		rc = -EPROTO;
	if (rc) {
		snprintf(w->what, sizeof(w->what),
			 "claim of shard %u (answer %d)", i, (int)res);
		return rc;
	}
	rc = mf_catalog_complete_shard(c, w->p->fp, i, me->run_id, 1, 1, 1);
	if (rc)
		snprintf(w->what, sizeof(w->what), "completion of shard %u", i);
	return rc;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct mf_catalog *c = NULL;
	struct mf_run_rec me;

	snprintf(w->what, sizeof(w->what), "opening '%s'", w->p->loc);
	w->rc = mf_catalog_open(w->p->loc, 0, &c);
	if (w->rc == 0) {
		snprintf(w->what, sizeof(w->what), "a run id");
		w->rc = run_new(w->p->fp, &me);
	}
	for (;;) {
		if (w->rc)
			break;
		uint32_t i = atomic_fetch_add(&w->p->next, 1);
		if (i >= w->p->shards)
			break;
		w->rc = claim_one(w, c, &me, i);
	}
	if (w->rc && *mf_catalog_last_error()) {
		/* the server's message is this thread's: keep it */
		size_t len = strlen(w->what);
		snprintf(w->what + len, sizeof(w->what) - len, " (%s)",
			 mf_catalog_last_error());
	}
	mf_catalog_close(c);
	return NULL;
}

/* A fresh snapshot of n shards at loc; its fingerprint into fp. */
static void snapshot_new(const char *loc, uint32_t n,
			 char fp[MF_FP_HEX_LEN + 1])
{
	static char spec[] = "/nonexistent/bench.yaml";
	static char comp[] = "none";
	static char suffix[] = "";
	struct mf_snapshot_rec r = {0};
	struct mf_catalog *c;
	int rc = mf_random_hex(MF_FP_HEX_LEN / 2, fp);
	if (rc)
		die("a fingerprint", rc);
	memcpy(r.fp, fp, sizeof(r.fp));
	snprintf(r.name, sizeof(r.name), "bench-%.8s", fp);
	r.shards = n;
	r.spec_path = spec;
	r.compression = comp;
	r.suffix = suffix;
	r.chunk_size = 4u << 20;
	r.expire_after = -1;
	r.pending_expiry = 3600;
	r.created = mf_now_s();
	if ((rc = mf_catalog_open(loc, 0, &c)) != 0)
		die(loc, rc);
	if ((rc = mf_catalog_put_snapshot(c, &r)) != 0)
		die("putting the snapshot", rc);
	mf_catalog_close(c);
}

/* Every shard of fp at loc must be materialized. */
static void check_all_done(const char *loc, const char *fp, uint32_t n)
{
	struct mf_catalog *c;
	struct mf_shard_rec *s;
	size_t got, done = 0;
	int rc = mf_catalog_open(loc, 0, &c);
	if (rc)
		die(loc, rc);
	if ((rc = mf_catalog_list_shards(c, fp, &s, &got)) != 0)
		die("listing the shards", rc);
	for (size_t i = 0; i < got; i++) {
		done += s[i].state == MF_SHARD_MATERIALIZED;
		mf_shard_rec_release(&s[i]);
	}
	free(s);
	mf_catalog_close(c);
	if (got != n || done != n) {
		fprintf(stderr, "claims: %zu of %u shards materialized\n", done,
			n);
		exit(1);
	}
}

/* Seconds that threads took to claim and complete every shard of a fresh
 * snapshot at loc. */
static double timed_pass(const char *loc, uint32_t n, unsigned threads)
{
	char fp[MF_FP_HEX_LEN + 1];
	struct worker w[MAX_THREADS];
	struct pass p = {.loc = loc, .fp = fp, .shards = n};

	snapshot_new(loc, n, fp);
	atomic_init(&p.next, 0);
	double t0 = now();
	for (unsigned k = 0; k < threads; k++) {
		w[k] = (struct worker){.p = &p};
		if (pthread_create(&w[k].tid, NULL, worker_main, &w[k]))
			die("a thread", -EAGAIN);
	}
	for (unsigned k = 0; k < threads; k++)
		pthread_join(w[k].tid, NULL);
	double t = now() - t0;
	for (unsigned k = 0; k < threads; k++)
		if (w[k].rc)
			die(w[k].what, w[k].rc);
	check_all_done(loc, fp, n);
	return t;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long num_arg(const char *opt, const char *v, long lo, long hi)
{
	char *end;
	long x = strtol(v, &end, 10);
	if (!*v || *end || x < lo || x > hi) {
		fprintf(stderr, "claims: %s wants a number from %ld to %ld\n",
			opt, lo, hi);
		exit(2);
	}
	return x;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: claims --sqlite PATH [--pg LOCATION]"
		" [--shards N] [--threads T] [--rounds R]\n");
	exit(2);
}

static void parse(int argc, char **argv, struct cfg *cfg)
{
	*cfg = (struct cfg){.shards = 10000, .threads = 8, .rounds = 3};
	for (int i = 1; i < argc; i += 2) {
		const char *o = argv[i], *v = argv[i + 1];
		if (!v)
			usage();
		else if (!strcmp(o, "--sqlite"))
			cfg->loc[0] = v;
		else if (!strcmp(o, "--pg"))
			cfg->loc[1] = v;
		else if (!strcmp(o, "--shards"))
			cfg->shards = (uint32_t)num_arg(o, v, 1, 10000000);
		else if (!strcmp(o, "--threads"))
			cfg->threads = (unsigned)num_arg(o, v, 1, MAX_THREADS);
		else if (!strcmp(o, "--rounds"))
			cfg->rounds = (int)num_arg(o, v, 1, MAX_ROUNDS);
		else
			usage();
	}
	if (!cfg->loc[0])
		usage();
}

int main(int argc, char **argv)
{
	struct cfg cfg;
	/* [backend][0: one thread, 1: T threads][round] */
	static double t[2][2][MAX_ROUNDS];
	double rate[2][2] = {{0}};

	parse(argc, argv, &cfg);
	unsigned nt[2] = {1, cfg.threads};
	for (int r = 0; r < cfg.rounds; r++)
		for (int m = 0; m < 2; m++)
			for (int b = 0; b < 2; b++)
				if (cfg.loc[b])
					t[b][m][r] = timed_pass(
					    cfg.loc[b], cfg.shards, nt[m]);
	for (int b = 0; b < 2; b++) {
		if (!cfg.loc[b])
			continue;
		for (int m = 0; m < 2; m++) {
			rate[b][m] = cfg.shards / median(t[b][m], cfg.rounds);
			printf("rate %s_t%u %.0f\n", backend_name[b], nt[m],
			       rate[b][m]);
		}
	}
	for (int m = 0; m < 2 && cfg.loc[1]; m++)
		printf("ratio pg_vs_sqlite_t%u %.2f\n", nt[m],
		       rate[1][m] / rate[0][m]);
	for (int b = 0; b < 2; b++)
		if (cfg.loc[b])
			printf("ratio %s_t%u_vs_t1 %.2f\n", backend_name[b],
			       nt[1], rate[b][1] / rate[b][0]);
	return 0;
}
