/*
 * matctl_warm.c - `matctl warm`: materialize every shard of a snapshot on
 * -j threads, with a progress bar on a terminal (shards done/total, bytes,
 * rate, ETA) and one plain line per shard otherwise.
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
	pthread_mutex_t lock; /* guards everything below */
	uint32_t next; /* next shard to hand out */
	uint32_t done;
	uint32_t failed;
	uint64_t bytes_done; /* raw bytes of finished shards */
	uint64_t *in_flight; /* per shard, bytes produced so far */
	uint64_t start_ns, last_draw_ns;
};

static struct warm *g_warm; /* for the engine's progress callback */

static void draw(struct warm *w, bool force)
{
	uint64_t now = mf_mono_ns();
	if (!w->tty || (!force && now - w->last_draw_ns < 100000000ULL))
		return;
	w->last_draw_ns = now;
	uint64_t bytes = w->bytes_done;
	for (uint32_t i = 0; i < w->shards; i++)
		bytes += w->in_flight[i];
	double secs = (double)(now - w->start_ns) / 1e9;
	char total[32], rate[32], eta[32] = "--:--";
	mf_format_size(bytes, total, sizeof(total));
	mf_format_size(secs > 0 ? (uint64_t)((double)bytes / secs) : 0, rate,
		       sizeof(rate));
	if (w->done > 0 && w->done < w->shards) {
		double left = secs / w->done * (w->shards - w->done);
		snprintf(eta, sizeof(eta), "%d:%02d", (int)left / 60,
			 (int)left % 60);
	}
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
	w->done++;
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
	struct mf_snapshot_rec rec;
	int rc = mf_engine_snapshot(ctl->engine, fp, &rec);
	if (rc)
		return rc;
	*n = rec.shards;
	mf_snapshot_rec_release(&rec);
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
					   .progress = on_progress};
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
	if (!w.in_flight)
		return 1;
	(void)mf_mutex_init(&w.lock);
	w.start_ns = mf_mono_ns();
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
	pthread_mutex_destroy(&w.lock);
	return w.failed ? 1 : 0;
}
