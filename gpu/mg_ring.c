/*
 * mg_ring.c - the staging ring: a few pinned host buffers ("slots"), I/O
 * threads that pread() pieces of a file into them, and the loading thread
 * that queues the copy of each filled slot to the device and hands the slot
 * back for the next piece once its copy is done. With two or more slots,
 * reading piece k+1 overlaps copying piece k (double buffering).
 *
 * Not for: choosing files or buffers (mg_load.c, mg_loader.c). One loading
 * thread uses a ring at a time; rings are cached per context, and at most
 * opts.max_loads are in use at once (a load beyond waits for one).
 *
 * Slot life: FREE -> QUEUED (loading thread) -> READING (I/O thread) ->
 * DONE (I/O thread) -> FREE (loading thread, copy queued; the slot's event
 * completes when the copy has read the slot).
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "mg_i.h"

enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_READING, SLOT_DONE };

struct mg_slot {
	void *host; /* staging_size pinned bytes */
	void *event; /* complete once the last copy out of host is done */
	bool copying; /* a copy out of host may be in flight; loader only */
	enum slot_state state; /* rd->lock */
	uint64_t off; /* set before QUEUED, constant until FREE */
	size_t n;
	int err; /* rd->lock */
};

/* lock guards slot states and errors, fd and quit. */
struct mg_reader {
	struct mg_ctx *ctx;
	void *stream;
	unsigned nslots;
	unsigned nthreads; /* started */
	struct mg_slot *slots;
	pthread_t *threads;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int fd;
	bool quit;
	struct mg_reader *next; /* ctx->free_readers, ctx->lock */
};

/* pread(2) of exactly n bytes; a file ending early is -EIO. */
static int pread_full(int fd, char *p, size_t n, uint64_t off)
{
	ssize_t r;

	while (n > 0) {
		r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* The queued slot of lowest offset, so pieces are read in file order. */
static struct mg_slot *next_queued(struct mg_reader *rd)
{
	struct mg_slot *best = NULL;

	for (unsigned i = 0; i < rd->nslots; i++) {
		struct mg_slot *s = &rd->slots[i];

		if (s->state == SLOT_QUEUED && (!best || s->off < best->off))
			best = s;
	}
	return best;
}

static void *io_main(void *arg)
{
	struct mg_reader *rd = arg;
	struct mg_slot *s = NULL;
	int fd, r;

	pthread_mutex_lock(&rd->lock);
	for (;;) {
		while (!rd->quit && (s = next_queued(rd)) == NULL)
			pthread_cond_wait(&rd->cond, &rd->lock);
		if (rd->quit)
			break;
		s->state = SLOT_READING;
		fd = rd->fd;
		pthread_mutex_unlock(&rd->lock);
		r = pread_full(fd, s->host, s->n, s->off);
		pthread_mutex_lock(&rd->lock);
		s->err = r;
		s->state = SLOT_DONE;
		pthread_cond_broadcast(&rd->cond);
	}
	pthread_mutex_unlock(&rd->lock);
	return NULL;
}

static void reader_free(struct mg_reader *rd)
{
	const struct mg_backend *be = rd->ctx->be;

	pthread_mutex_lock(&rd->lock);
	rd->quit = true;
	pthread_cond_broadcast(&rd->cond);
	pthread_mutex_unlock(&rd->lock);
	for (unsigned i = 0; i < rd->nthreads; i++)
		pthread_join(rd->threads[i], NULL);
	for (unsigned i = 0; rd->slots && i < rd->nslots; i++) {
		if (rd->slots[i].host)
			be->host_free(rd->ctx, rd->slots[i].host);
		if (rd->slots[i].event)
			be->event_free(rd->ctx, rd->slots[i].event);
	}
	if (rd->stream)
		be->stream_free(rd->ctx, rd->stream);
	pthread_cond_destroy(&rd->cond);
	pthread_mutex_destroy(&rd->lock);
	free(rd->threads);
	free(rd->slots);
	free(rd);
}

static int reader_alloc(struct mg_reader *rd)
{
	const struct mg_backend *be = rd->ctx->be;
	int r;

	r = be->stream_new(rd->ctx, &rd->stream);
	for (unsigned i = 0; !r && i < rd->nslots; i++) {
		r = be->host_alloc(rd->ctx, rd->ctx->opts.staging_size,
				   &rd->slots[i].host);
		if (!r)
			r = be->event_new(rd->ctx, &rd->slots[i].event);
	}
	return r;
}

static int reader_new(struct mg_ctx *ctx, struct mg_reader **out)
{
	unsigned nthreads = ctx->opts.io_threads;
	struct mg_reader *rd = calloc(1, sizeof(*rd));
	int r;

	if (!rd)
		return -ENOMEM;
	rd->ctx = ctx;
	rd->nslots = ctx->opts.staging_count;
	rd->fd = -1;
	mg_mutex_init(&rd->lock);
	pthread_cond_init(&rd->cond, NULL);
	rd->slots = calloc(rd->nslots, sizeof(*rd->slots));
	rd->threads = calloc(nthreads, sizeof(*rd->threads));
	r = rd->slots && rd->threads ? reader_alloc(rd) : -ENOMEM;
	while (!r && rd->nthreads < nthreads) {
		r = -pthread_create(&rd->threads[rd->nthreads], NULL, io_main,
				    rd);
		rd->nthreads += !r;
	}
	if (r) {
		reader_free(rd);
		return r;
	}
	*out = rd;
	return 0;
}

int mg_reader_get(struct mg_ctx *ctx, struct mg_reader **out)
{
	struct mg_reader *rd;
	int r;

	pthread_mutex_lock(&ctx->lock);
	while (ctx->rings_out >= ctx->opts.max_loads)
		pthread_cond_wait(&ctx->rings_free, &ctx->lock);
	ctx->rings_out++;
	rd = ctx->free_readers;
	if (rd)
		ctx->free_readers = rd->next;
	pthread_mutex_unlock(&ctx->lock);
	if (!rd) {
		r = reader_new(ctx, &rd);
		pthread_mutex_lock(&ctx->lock);
		if (r) {
			ctx->rings_out--;
			pthread_cond_signal(&ctx->rings_free);
		} else {
			ctx->stats.staging_bytes +=
			    (uint64_t)rd->nslots * ctx->opts.staging_size;
		}
		pthread_mutex_unlock(&ctx->lock);
		if (r)
			return r;
	}
	rd->next = NULL;
	*out = rd;
	return 0;
}

struct mg_ctx *mg_reader_ctx(const struct mg_reader *rd)
{
	return rd->ctx;
}

void mg_reader_put(struct mg_ctx *ctx, struct mg_reader *rd)
{
	pthread_mutex_lock(&ctx->lock);
	rd->next = ctx->free_readers;
	ctx->free_readers = rd;
	ctx->rings_out--;
	pthread_cond_signal(&ctx->rings_free);
	pthread_mutex_unlock(&ctx->lock);
}

void mg_readers_drain(struct mg_ctx *ctx)
{
	struct mg_reader *list, *rd;

	pthread_mutex_lock(&ctx->lock);
	list = ctx->free_readers;
	ctx->free_readers = NULL;
	for (rd = list; rd; rd = rd->next)
		ctx->stats.staging_bytes -=
		    (uint64_t)rd->nslots * ctx->opts.staging_size;
	pthread_mutex_unlock(&ctx->lock);
	while ((rd = list) != NULL) {
		list = rd->next;
		reader_free(rd);
	}
}

/* One fill in progress: pieces [0, n) of size bytes; dispatched pieces
 * were queued for reading, copied pieces had their copy queued. */
struct fill {
	struct mg_reader *rd;
	size_t size;
	size_t piece;
	uint64_t n, dispatched, copied;
};

/* Queues reads of the next pieces into every slot whose copy is done. */
static int dispatch(struct fill *f)
{
	struct mg_reader *rd = f->rd;
	struct mg_slot *s;
	uint64_t first = f->dispatched;
	int r;

	while (f->dispatched < f->n && f->dispatched - f->copied < rd->nslots) {
		s = &rd->slots[f->dispatched % rd->nslots];
		if (s->copying) {
			r = rd->ctx->be->event_wait(rd->ctx, s->event);
			if (r)
				return r;
			s->copying = false;
		}
		s->off = f->dispatched * f->piece;
		s->n =
		    f->size - s->off < f->piece ? f->size - s->off : f->piece;
		pthread_mutex_lock(&rd->lock);
		s->err = 0;
		s->state = SLOT_QUEUED;
		pthread_mutex_unlock(&rd->lock);
		f->dispatched++;
	}
	if (f->dispatched != first) {
		pthread_mutex_lock(&rd->lock);
		pthread_cond_broadcast(&rd->cond);
		pthread_mutex_unlock(&rd->lock);
	}
	return 0;
}

/* Waits for the next piece in file order and queues its copy. */
static int copy_next(struct fill *f, struct mg_buf *buf)
{
	struct mg_reader *rd = f->rd;
	const struct mg_backend *be = rd->ctx->be;
	struct mg_slot *s = &rd->slots[f->copied % rd->nslots];
	int r;

	pthread_mutex_lock(&rd->lock);
	while (s->state != SLOT_DONE)
		pthread_cond_wait(&rd->cond, &rd->lock);
	r = s->err;
	s->state = SLOT_FREE;
	pthread_mutex_unlock(&rd->lock);
	if (r)
		return r;
	r = be->copy(rd->ctx, rd->stream, (char *)buf->data + s->off, s->host,
		     s->n);
	if (!r)
		r = be->record(rd->ctx, s->event, rd->stream);
	if (r)
		return r;
	s->copying = true;
	f->copied++;
	return 0;
}

/* Leaves every slot FREE: queued reads are dropped, running ones waited
 * for, so the next fill starts clean. */
static void drain(struct mg_reader *rd)
{
	bool busy;

	pthread_mutex_lock(&rd->lock);
	do {
		busy = false;
		for (unsigned i = 0; i < rd->nslots; i++) {
			struct mg_slot *s = &rd->slots[i];

			if (s->state == SLOT_QUEUED || s->state == SLOT_DONE)
				s->state = SLOT_FREE;
			busy |= s->state == SLOT_READING;
		}
		if (busy)
			pthread_cond_wait(&rd->cond, &rd->lock);
	} while (busy);
	rd->fd = -1;
	pthread_mutex_unlock(&rd->lock);
}

int mg_reader_fill(struct mg_reader *rd, int fd, size_t size,
		   struct mg_buf *buf, const atomic_bool *cancel)
{
	const struct mg_backend *be = rd->ctx->be;
	size_t piece = rd->ctx->opts.staging_size;
	struct fill f = {rd, size, piece, (size + piece - 1) / piece, 0, 0};
	int r, r2;

	pthread_mutex_lock(&rd->lock);
	rd->fd = fd;
	pthread_mutex_unlock(&rd->lock);
	/* Copies into buf start after the consumers of its last use. */
	r = be->acquire_fence(rd->ctx, rd->stream, buf);
	if (!r && !buf->ready)
		r = be->event_new(rd->ctx, &buf->ready);
	while (!r && f.copied < f.n) {
		if (cancel && atomic_load(cancel)) {
			r = -ECANCELED;
			break;
		}
		r = dispatch(&f);
		if (!r)
			r = copy_next(&f, buf);
	}
	/* What a consumer's stream waits for (mg_buf_dlpack_stream). */
	if (!r)
		r = be->record(rd->ctx, buf->ready, rd->stream);
	drain(rd);
	r2 = be->sync(rd->ctx, rd->stream);
	for (unsigned i = 0; i < rd->nslots; i++)
		rd->slots[i].copying = false;
	return r ? r : r2;
}
