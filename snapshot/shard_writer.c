/*
 * shard_writer.c - writing one shard file: cutting the caller's bytes into
 * chunks, compressing them (inline, or on a small pool of threads with the
 * results appended in order), then the index, the trailer and the commit
 * protocol (fsync, rename, fsync of the folder), in two steps when the
 * caller serves the file before it is durable (seal, then commit). A tap,
 * when set, sees each raw chunk on the caller's thread just before it is
 * compressed. Each chunk's codec and level are picked as it is handed over
 * (codec_adapt.c), from how many chunks are still waiting to be
 * compressed, and recorded in its index entry.
 *
 * Not for: a chunk's compression and its append to the file, in order,
 * and the pool (shard_chunks.c), reading (shard_reader.c), the byte layout
 * (shard_format.c) or the rule that picks a chunk's level (codec_adapt.c).
 *
 * Memory: `nslots` chunk buffers (workers + 1, or 1 inline) of chunk_size
 * raw bytes plus their compression bound, and the index (32 bytes a chunk).
 */
#include "snapshot_i.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WRITER_THREADS_MAX 64

/* ---- open, write ---- */

static void slots_free(struct mf_shard_writer *w);
static void release_below(struct mf_shard_writer *w, uint64_t end);

static void writer_free(struct mf_shard_writer *w)
{
	snap_writer_pool_stop(w);
	snap_out_free(w->out); /* its writes done before fd closes */
	for (unsigned i = 0; i < w->nalloc; i++)
		snap_cctx_free(w->workers[i].cctx);
	free(w->workers);
	if (w->fd >= 0)
		close(w->fd);
	if (w->dirfd >= 0)
		close(w->dirfd);
	slots_free(w);
	snap_cctx_free(w->cctx);
	free(w->idx);
	snap_indexer_release(&w->ix);
	pthread_cond_destroy(&w->done_cv);
	pthread_cond_destroy(&w->work_cv);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

static int cfg_check(const struct mf_codec_cfg *cfg, int *level)
{
	if (cfg->chunk_size < MF_CHUNK_SIZE_MIN ||
	    cfg->chunk_size > MF_CHUNK_SIZE_MAX)
		return -EINVAL;
	int lv = cfg->level;
	if (cfg->codec == MF_CODEC_ZSTD && lv == 0)
		lv = MF_ZSTD_DEFAULT_LEVEL;
	if (cfg->codec != MF_CODEC_ZSTD)
		lv = 0;
	if (!snap_level_valid(cfg->codec, lv))
		return -EINVAL;
	*level = lv;
	return 0;
}

static int slots_alloc(struct mf_shard_writer *w, unsigned n)
{
	w->slots = calloc(n, sizeof(*w->slots));
	if (!w->slots)
		return -ENOMEM;
	w->nslots = n;
	for (unsigned i = 0; i < n; i++) {
		w->slots[i].raw = mf_buf_alloc(w->chunk_size, &w->raw_cap);
		if (!w->slots[i].raw)
			return -ENOMEM;
		if (w->codec == MF_CODEC_NONE)
			continue;
		w->slots[i].out = mf_buf_alloc(w->bound, &w->out_cap);
		if (!w->slots[i].out)
			return -ENOMEM;
	}
	return 0;
}

/* The file is written through file_out.c: with O_DIRECT where the file
 * system takes it. */
static int tmp_create(struct mf_shard_writer *w)
{
	w->fd = openat(w->dirfd, w->tmp,
		       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		       SNAP_FILE_MODE);
	if (w->fd < 0)
		return -errno;
	int rc = snap_out_open(w->fd, &w->out);
	if (rc)
		return rc;
	uint8_t hdr[SNAP_HEADER_SIZE];
	snap_header_encode(hdr);
	w->file_off = SNAP_HEADER_SIZE;
	return snap_out_put(w->out, hdr, sizeof(hdr));
}

/* How many compression workers a writer runs: 0 inline. */
static unsigned pool_size(const struct mf_codec_cfg *cfg)
{
	/* compressing nothing gains nothing from threads */
	if (cfg->codec == MF_CODEC_NONE)
		return 0;
	unsigned n = cfg->threads;
	if (n == 0) {
		n = snap_cores_available();
		if (n > MF_WRITER_THREADS_AUTO_MAX)
			n = MF_WRITER_THREADS_AUTO_MAX;
	}
	if (n > WRITER_THREADS_MAX)
		n = WRITER_THREADS_MAX;
	/* adapting needs a backlog to watch: a pool, even of one */
	bool adapt = cfg->adapt && cfg->codec == MF_CODEC_ZSTD;
	return n > 1 || adapt ? n : 0;
}

/* Everything but the folder, the file and the pool. */
static int writer_new(const struct mf_codec_cfg *cfg, int level,
		      unsigned threads, struct mf_shard_writer **out)
{
	struct mf_shard_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->dirfd = -1;
	w->fd = -1;
	w->codec = cfg->codec;
	w->level = level;
	snap_adapt_init(&w->adapt, cfg->codec, level, cfg->adapt);
	w->chunk_size = (size_t)cfg->chunk_size;
	w->bound = snap_codec_bound(cfg->codec, w->chunk_size);
	snap_indexer_init(&w->ix,
			  &(struct mf_records){MF_FRAMING_NONE, 0, false});
	(void)mf_mutex_init(&w->lock);
	pthread_cond_init(&w->work_cv, NULL);
	pthread_cond_init(&w->done_cv, NULL);
	int rc = slots_alloc(w, threads ? threads + 1 : 1);
	if (rc == 0)
		rc = snap_cctx_new(w->codec, &w->cctx);
	if (rc) {
		writer_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int mf_shard_writer_open(struct mf_store *st, const char *fp,
			 const char *run_id, uint32_t shard,
			 const struct mf_codec_cfg *cfg,
			 struct mf_shard_writer **out)
{
	int level;
	if (!cfg || !out)
		return -EINVAL;
	int rc = cfg_check(cfg, &level);
	if (rc)
		return rc;
	unsigned threads = pool_size(cfg);
	struct mf_shard_writer *w;
	rc = writer_new(cfg, level, threads, &w);
	if (rc)
		return rc;
	rc = snap_open_run(st, fp, run_id, &w->dirfd);
	if (rc)
		goto free_w;
	/* fp was checked by snap_open_run */
	w->seeds = (struct snap_seeds){MF_SHARD_FORMAT_VERSION,
				       snap_shard_key(fp, shard)};
	snap_shard_name(shard, ".tmp", w->tmp);
	snap_shard_name(shard, ".mfs", w->final);
	rc = tmp_create(w);
	if (rc == 0 && threads > 0)
		rc = snap_writer_pool_start(w, threads);
	if (rc)
		goto abort_w;
	*out = w;
	return 0;
abort_w:
	mf_shard_writer_abort(w);
	return rc;
free_w:
	writer_free(w);
	return rc;
}

int mf_shard_writer_set_tap(struct mf_shard_writer *w, mf_shard_tap_fn fn,
			    void *arg)
{
	if (!w)
		return -EINVAL;
	if (w->tail > 0 || w->fill > 0)
		return -EBUSY; /* it would miss chunks */
	w->tap = fn;
	w->tap_arg = fn ? arg : NULL;
	return 0;
}

int mf_shard_writer_set_release(struct mf_shard_writer *w,
				mf_shard_release_fn fn)
{
	if (!w || (fn && !w->tap))
		return -EINVAL;
	if (w->tail > 0 || w->fill > 0)
		return -EBUSY; /* chunks were shown as borrowed */
	if (fn && w->nslots == 1) { /* one to read while the next fills */
		struct wslot *slots = realloc(w->slots, 2 * sizeof(*slots));
		if (!slots)
			return -ENOMEM;
		w->slots = slots;
		struct wslot *t = &slots[1];
		memset(t, 0, sizeof(*t));
		t->raw = mf_buf_alloc(w->chunk_size, &w->raw_cap);
		if (t->raw && w->codec != MF_CODEC_NONE)
			t->out = mf_buf_alloc(w->bound, &w->out_cap);
		if (!t->raw || (w->codec != MF_CODEC_NONE && !t->out)) {
			mf_buf_free(t->raw, w->raw_cap);
			mf_buf_free(t->out, w->out_cap);
			return -ENOMEM; /* still one slot, no release */
		}
		w->nslots = 2;
	}
	w->release = fn;
	return 0;
}

int mf_shard_writer_set_pressure(struct mf_shard_writer *w,
				 mf_shard_pressure_fn fn, void *arg)
{
	if (!w)
		return -EINVAL;
	if (w->tail > 0 || w->fill > 0)
		return -EBUSY; /* chunks were handed over already */
	w->pressure = fn;
	w->pressure_arg = fn ? arg : NULL;
	return 0;
}

int mf_shard_writer_set_records(struct mf_shard_writer *w,
				const struct mf_records *r)
{
	if (!w || !r || (unsigned)r->framing > MF_FRAMING_MAX)
		return -EINVAL;
	if (r->framing == MF_FRAMING_FIXED &&
	    (r->size == 0 || r->size > MF_RECORD_SIZE_MAX))
		return -EINVAL;
	if (w->tail > 0 || w->fill > 0)
		return -EBUSY; /* the index would miss bytes */
	struct mf_records c = *r;
	if (c.framing != MF_FRAMING_FIXED) {
		c.size = 0;
		c.drop_tail = false;
	}
	snap_indexer_release(&w->ix);
	snap_indexer_init(&w->ix, &c);
	return 0;
}

int mf_shard_writer_set_ends(struct mf_shard_writer *w, const uint64_t *ends,
			     size_t n)
{
	if (!w || w->sealed || (!ends && n))
		return -EINVAL;
	int rc = snap_indexer_set_ends(&w->ix, ends, n);
	if (rc == -EBADMSG && w->err == 0)
		w->err = rc;
	return rc;
}

int mf_shard_writer_end_records(struct mf_shard_writer *w)
{
	if (!w || w->sealed)
		return -EINVAL;
	if (w->err)
		return w->err;
	w->err = snap_indexer_end(&w->ix);
	return w->err;
}

const char *mf_shard_writer_framing_error(const struct mf_shard_writer *w)
{
	return w && w->ix.err == -EBADMSG ? w->ix.why : "";
}

/* The slot being filled, after making room for it when it is the next
 * one and every slot is still in flight; a new chunk first releases the
 * one that slot held. */
static int fill_slot(struct mf_shard_writer *w, struct wslot **s)
{
	int rc;
	if (w->fill == 0 && w->tail - w->head == w->nslots &&
	    (rc = snap_writer_drain(w, w->head + 1)) != 0)
		return rc;
	if (w->fill == 0 && w->tail >= w->nslots)
		release_below(w, w->tail - w->nslots + 1);
	*s = &w->slots[w->tail % w->nslots];
	return 0;
}

/* n more bytes are in the filling slot s; submits it when full. */
static int filled(struct mf_shard_writer *w, struct wslot *s, size_t n)
{
	w->fill += n;
	if (w->fill < w->chunk_size)
		return 0;
	s->src = s->raw;
	s->raw_len = w->fill;
	w->fill = 0;
	return snap_writer_submit(w, s);
}

/* Copies what fits of buf into the filling slot; submits it when full. */
static int write_some(struct mf_shard_writer *w, const uint8_t *buf, size_t len,
		      size_t *used)
{
	if (w->fill == 0 && w->nworkers == 0 && len >= w->chunk_size &&
	    !w->release) {
		/* inline and aligned: compress straight from the caller */
		struct wslot *s = &w->slots[0];
		s->src = buf;
		s->raw_len = w->chunk_size;
		*used = w->chunk_size;
		int rc = snap_indexer_feed(&w->ix, buf, w->chunk_size);
		return rc ? rc : snap_writer_submit(w, s);
	}
	struct wslot *s;
	int rc = fill_slot(w, &s);
	if (rc)
		return rc;
	size_t n = w->chunk_size - w->fill;
	n = n < len ? n : len;
	memcpy(s->raw + w->fill, buf, n);
	*used = n;
	rc = snap_indexer_feed(&w->ix, buf, n);
	return rc ? rc : filled(w, s, n);
}

int mf_shard_writer_write(struct mf_shard_writer *w, const void *buf,
			  size_t len)
{
	if (!w || w->sealed || (!buf && len))
		return -EINVAL;
	const uint8_t *p = buf;
	while (len > 0 && w->err == 0) {
		size_t used = 0;
		w->err = write_some(w, p, len, &used);
		p += used;
		len -= used;
	}
	return w->err;
}

int mf_shard_writer_space(struct mf_shard_writer *w, void **buf, size_t *room)
{
	if (!w || w->sealed || !buf || !room)
		return -EINVAL;
	struct wslot *s;
	if (w->err == 0)
		w->err = fill_slot(w, &s);
	if (w->err)
		return w->err;
	*buf = s->raw + w->fill;
	*room = w->chunk_size - w->fill;
	return 0;
}

int mf_shard_writer_wrote(struct mf_shard_writer *w, size_t n)
{
	if (!w || w->sealed || n > w->chunk_size - w->fill)
		return -EINVAL;
	struct wslot *s = &w->slots[w->tail % w->nslots];
	if (w->err == 0 && n > 0)
		w->err = snap_indexer_feed(&w->ix, s->raw + w->fill, n);
	if (w->err == 0 && n > 0)
		w->err = filled(w, s, n);
	return w->err;
}

/* ---- commit, abort ---- */

/* The last chunk, then every chunk appended, then index and trailer. */
static int finish(struct mf_shard_writer *w)
{
	int rc;
	if (w->fill) {
		/* write_some made room for this slot before filling it */
		struct wslot *s = &w->slots[w->tail % w->nslots];
		s->src = s->raw;
		s->raw_len = w->fill;
		w->fill = 0;
		if ((rc = snap_writer_submit(w, s)) != 0)
			return rc;
	}
	if ((rc = snap_writer_drain(w, w->tail)) != 0)
		return rc;
	snap_writer_pool_stop(w);
	if ((rc = snap_indexer_end(&w->ix)) != 0)
		return rc;
	struct snap_trailer t = {
	    .records = w->ix.cfg,
	    .n_records = w->ix.count,
	};
	size_t n = (size_t)w->head;
	size_t ends = (size_t)snap_trailer_ends(&t);
	/* the ends, little-endian, straight from the indexer's array */
	uint8_t *sec = snap_records_encode(w->ix.ends, ends);
	size_t len = n * SNAP_ENTRY_SIZE + SNAP_TRAILER_SIZE;
	uint8_t *buf = malloc(len);
	if (!buf || (ends && !sec)) {
		free(buf);
		return -ENOMEM;
	}
	uint8_t *idx = buf;
	for (size_t i = 0; i < n; i++)
		snap_entry_encode(&w->idx[i], idx + i * SNAP_ENTRY_SIZE);
	t = (struct snap_trailer){
	    .records = w->ix.cfg,
	    .n_records = w->ix.count,
	    .records_checksum = snap_index_checksum(
		sec, 8 * ends, snap_records_seed(&w->seeds)),
	    .version = MF_SHARD_FORMAT_VERSION,
	    .codec = w->codec,
	    .level = w->level,
	    .chunks = (uint32_t)n,
	    .chunk_size = w->chunk_size,
	    .raw_size = w->raw_total,
	    .index_offset = w->file_off + 8 * ends,
	    .index_checksum = snap_index_checksum(idx, n * SNAP_ENTRY_SIZE,
						  snap_meta_seed(&w->seeds)),
	};
	snap_trailer_encode(&t, snap_meta_seed(&w->seeds),
			    idx + n * SNAP_ENTRY_SIZE);
	rc = ends ? snap_out_put(w->out, sec, 8 * ends) : 0;
	if (rc == 0)
		rc = snap_out_put(w->out, buf, len);
	free(buf);
	w->file_off += 8 * ends + len;
	return rc ? rc : snap_out_end(w->out);
}

/* fsync, close, rename, fsync the folder. A failed fsync is final. */
static int make_durable(struct mf_shard_writer *w)
{
	int rc = fsync(w->fd) == 0 ? 0 : -errno;
	if (close(w->fd) != 0 && rc == 0)
		rc = -errno;
	w->fd = -1;
	if (rc)
		goto unlink_tmp;
	if (renameat(w->dirfd, w->tmp, w->dirfd, w->final) != 0) {
		rc = -errno;
		goto unlink_tmp;
	}
	rc = mf_fsync_dir(w->dirfd);
	if (rc)
		unlinkat(w->dirfd, w->final, 0);
	return rc;
unlink_tmp:
	unlinkat(w->dirfd, w->tmp, 0);
	return rc;
}

static void stat_fill(const struct mf_shard_writer *w,
		      struct mf_shard_stat *stat)
{
	stat->raw_bytes = w->raw_total;
	stat->stored_bytes = w->file_off;
	stat->chunks = (uint32_t)w->head;
	stat->codec = w->codec;
	stat->chunk_size = w->chunk_size;
}

/* Releases the chunks below `end` shown to the tap (mf_shard_writer_set_
 * release): their bytes are about to be overwritten or freed. */
static void release_below(struct mf_shard_writer *w, uint64_t end)
{
	if (w->release && end > w->released) {
		w->release(w->tap_arg, (uint32_t)(end - 1));
		w->released = end;
	}
}

/* The chunk buffers are not needed once sealed: a sealed writer waiting
 * for its commit holds the index only. */
static void slots_free(struct mf_shard_writer *w)
{
	release_below(w, w->tail);
	for (unsigned i = 0; w->slots && i < w->nslots; i++) {
		mf_buf_free(w->slots[i].raw, w->raw_cap);
		mf_buf_free(w->slots[i].out, w->out_cap);
	}
	free(w->slots);
	w->slots = NULL;
	w->nslots = 0;
}

int mf_shard_writer_seal(struct mf_shard_writer *w, struct mf_shard_stat *stat,
			 int *fd)
{
	if (!w || w->sealed)
		return -EINVAL;
	int rc = w->err ? w->err : finish(w);
	int rfd = -1;
	if (rc == 0 && fd) {
		rfd =
		    openat(w->dirfd, w->tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		rc = rfd < 0 ? -errno : 0;
	}
	if (rc) {
		mf_shard_writer_abort(w);
		return rc;
	}
	w->sealed = true;
	slots_free(w);
	if (stat)
		stat_fill(w, stat);
	if (fd)
		*fd = rfd;
	return 0;
}

int mf_shard_writer_commit(struct mf_shard_writer *w,
			   struct mf_shard_stat *stat)
{
	if (!w)
		return -EINVAL;
	int rc = w->sealed ? 0 : w->err ? w->err : finish(w);
	if (rc) {
		mf_shard_writer_abort(w);
		return rc;
	}
	rc = make_durable(w);
	if (rc == 0 && stat)
		stat_fill(w, stat);
	writer_free(w);
	return rc;
}

void mf_shard_writer_abort(struct mf_shard_writer *w)
{
	if (!w)
		return;
	snap_writer_pool_stop(w);
	/* a write under way on its thread ends before the descriptor goes:
	 * after it, the number may be another file's */
	snap_out_free(w->out);
	w->out = NULL;
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
		unlinkat(w->dirfd, w->tmp, 0);
	}
	writer_free(w);
}
