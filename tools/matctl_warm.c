/*
 * matctl_warm.c - `matctl warm`: materialize every shard of a snapshot on
 * -j threads, with a progress bar on a terminal (shards done/total, bytes,
 * rate, ETA, drawn from the start) and one plain line per shard computed
 * otherwise.
 */
#include "matctl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct warm {
	struct mf_engine *e;
	char fp[65];
	uint32_t shards;
	bool tty;
	bool *was_done; /* per shard: materialized before warm started */
	uint64_t *raw_before; /* per shard: its raw bytes then */
	uint32_t done_before; /* how many */
	uint64_t bytes_before; /* their raw bytes */
	pthread_mutex_t lock; /* guards everything below */
	uint32_t next; /* next shard to hand out */
	uint32_t done; /* finished, those done before included */
	uint32_t failed;
	uint64_t bytes_done; /* raw bytes of finished shards */
	uint64_t *in_flight; /* per shard, bytes produced so far */
	uint64_t start_ns, last_draw_ns;
};

static struct warm *g_warm; /* for the engine's progress callback */

#define RATE_MIN_NS 500000000ULL /* a rate over less time means nothing */

/* "1:05", "2:03:07", or "--:--" when secs is not a time to show. */
static void format_eta(double secs, char *buf, size_t len)
{
	if (!(secs >= 0) || secs > 99 * 3600.0) {
		snprintf(buf, len, "--:--");
		return;
	}
	unsigned s = (unsigned)(secs + 0.5);
	if (s >= 3600)
		snprintf(buf, len, "%u:%02u:%02u", s / 3600, s / 60 % 60,
			 s % 60);
	else
		snprintf(buf, len, "%u:%02u", s / 60, s % 60);
}

/*
 * One frame of the bar. Shards and bytes count everything finished
 * (shards materialized before warm started included); the rate and the
 * ETA count only what warm computed: the bytes of this run over its time
 * (shown from half a second on, and at the end), and the shards still to
 * do at the pace of those computed so far. At the end the ETA is 0:00.
 */
static void draw(struct warm *w, bool force)
{
	uint64_t now = mf_mono_ns();
	if (!w->tty || (!force && now - w->last_draw_ns < 100000000ULL))
		return;
	w->last_draw_ns = now;
	uint64_t bytes = w->bytes_done;
	for (uint32_t i = 0; i < w->shards; i++)
		bytes += w->in_flight[i];
	uint64_t ns = now - w->start_ns;
	double secs = (double)ns / 1e9;
	uint64_t made = bytes - w->bytes_before;
	uint32_t computed = w->done - w->done_before;
	char total[32], rate[32] = "--", eta[32];
	mf_format_size(bytes, total, sizeof(total));
	bool end = w->done >= w->shards; /* the rate is the average then */
	if (made > 0 && ns > 0 && (ns >= RATE_MIN_NS || end))
		mf_format_size((uint64_t)((double)made / secs), rate,
			       sizeof(rate));
	if (end)
		format_eta(0, eta, sizeof(eta));
	else
		format_eta(computed ? secs / computed * (w->shards - w->done)
				    : -1,
			   eta, sizeof(eta));
	int width = 30, fill = (int)((uint64_t)width * w->done / w->shards);
	char bar[31];
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[width] = '\0';
	fprintf(stderr, "\r[%s] %u/%u shards  %s  %s/s  ETA %s ", bar, w->done,
		w->shards, total, rate, eta);
}

static void on_progress(void *arg, const char *fp, uint32_t shard,
			uint64_t bytes, bool done)
{
	struct warm *w = g_warm;
	(void)arg;
	(void)done;
	if (!w || strcmp(fp, w->fp) != 0 || shard >= w->shards)
		return;
	pthread_mutex_lock(&w->lock);
	w->in_flight[shard] = bytes;
	draw(w, false);
	pthread_mutex_unlock(&w->lock);
}

static void finish_shard(struct warm *w, uint32_t shard, int rc, uint64_t raw,
			 const char *err)
{
	pthread_mutex_lock(&w->lock);
	w->in_flight[shard] = 0;
	if (w->was_done[shard] && rc == 0) { /* counted from the start */
		pthread_mutex_unlock(&w->lock);
		return;
	}
	if (w->was_done[shard]) { /* expired since, and failed: not done */
		w->bytes_done -= w->raw_before[shard];
		w->bytes_before -= w->raw_before[shard];
		w->done_before--;
	} else {
		w->done++;
	}
	if (rc) {
		w->failed++;
		if (w->tty)
			fputc('\n', stderr);
		ctl_err("shard %u: %s", shard, err ? err : strerror(-rc));
	} else {
		w->bytes_done += raw;
		if (!w->tty) {
			char sz[32];
			mf_format_size(raw, sz, sizeof(sz));
			printf("shard %u/%u done (%s)\n", w->done, w->shards,
			       sz);
			fflush(stdout);
		}
	}
	draw(w, true);
	pthread_mutex_unlock(&w->lock);
}

static void *warm_thread(void *arg)
{
	struct warm *w = arg;
	for (;;) {
		pthread_mutex_lock(&w->lock);
		uint32_t shard = w->next < w->shards ? w->next++ : UINT32_MAX;
		pthread_mutex_unlock(&w->lock);
		if (shard == UINT32_MAX)
			return NULL;
		struct mf_shard_reader *r = NULL;
		char *err = NULL;
		int rc = mf_engine_open_shard(w->e, w->fp, shard, &r, &err);
		struct mf_shard_stat st = {0};
		if (rc == 0) {
			mf_shard_reader_stat(r, &st);
			mf_shard_reader_close(r);
		}
		finish_shard(w, shard, rc, st.raw_bytes, err);
		free(err);
	}
}

static int snapshot_shards(struct ctl *ctl, const char *fp, uint32_t *n)
{
	struct mf_engine_snapshot rec;
	int rc = mf_engine_snapshot(ctl->engine, fp, &rec);
	if (rc)
		return rc;
	*n = rec.shards;
	mf_engine_snapshot_release(&rec);
	return 0;
}

/* Marks the shards materialized before warm starts: done from the
 * start, and left out of the rate and the ETA. */
static int count_done(struct warm *w)
{
	w->was_done = calloc(w->shards, sizeof(*w->was_done));
	w->raw_before = calloc(w->shards, sizeof(*w->raw_before));
	if (!w->was_done || !w->raw_before)
		return -ENOMEM;
	struct mf_engine_shard *recs;
	size_t n;
	int rc = mf_engine_list_shards(w->e, w->fp, &recs, &n);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		uint32_t k = recs[i].index;
		if (k >= w->shards || recs[i].state != MF_ENGINE_MATERIALIZED)
			continue;
		w->was_done[k] = true;
		w->raw_before[k] = recs[i].raw_bytes;
		w->done_before++;
		w->bytes_before += recs[i].raw_bytes;
	}
	mf_engine_shard_recs_free(recs, n);
	w->done = w->done_before;
	w->bytes_done = w->bytes_before;
	return 0;
}

static int run_threads(struct warm *w, unsigned jobs)
{
	pthread_t tids[256];
	unsigned started = 0;
	for (; started < jobs; started++)
		if (pthread_create(&tids[started], NULL, warm_thread, w) != 0)
			break;
	if (started == 0)
		warm_thread(w);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	return 0;
}

int cmd_warm(struct ctl *ctl)
{
	static struct warm w;
	if (!ctl->engine) {
		struct mf_engine_opts o = {.store_dir = ctl->store,
					   .catalog = ctl->catalog,
					   .progress = on_progress,
					   .note = ctl_note};
		char *err = NULL;
		int rc = mf_engine_open(&o, &ctl->engine, &err);
		if (rc) {
			ctl_err("%s", err ? err : strerror(-rc));
			free(err);
			return 1;
		}
	}
	if (ctl_resolve(ctl, ctl->argv[0], w.fp))
		return 1;
	if (snapshot_shards(ctl, w.fp, &w.shards) || w.shards == 0) {
		ctl_err("warm '%s': no shards known", ctl->argv[0]);
		return 1;
	}
	w.e = ctl->engine;
	w.tty = isatty(STDERR_FILENO);
	w.in_flight = calloc(w.shards, sizeof(*w.in_flight));
	int rc = w.in_flight ? count_done(&w) : -ENOMEM;
	if (rc) {
		ctl_err("warm '%s': %s", ctl->argv[0], strerror(-rc));
		return 1;
	}
	(void)mf_mutex_init(&w.lock);
	w.start_ns = mf_mono_ns();
	draw(&w, true);
	g_warm = &w;
	unsigned jobs = ctl->jobs ? ctl->jobs : 1;
	run_threads(&w, jobs > w.shards ? w.shards : jobs);
	g_warm = NULL;
	if (w.tty)
		fputc('\n', stderr);
	char total[32];
	mf_format_size(w.bytes_done, total, sizeof(total));
	printf("%s: %u/%u shards materialized, %s\n", w.fp, w.done - w.failed,
	       w.shards, total);
	free(w.in_flight);
	free(w.was_done);
	free(w.raw_before);
	pthread_mutex_destroy(&w.lock);
	return w.failed ? 1 : 0;
}
