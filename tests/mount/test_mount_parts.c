/*
 * test_mount_parts.c - the FUSE layer's parts that need no mount: the
 * chunk cache (bytes, budget, held chunks, one decompression shared by
 * concurrent readers, corruption not cached, drop), the chunks a
 * materialization hands the cache (the engine's events, their stages,
 * adopted only for the exact committed computation by the thread that ran
 * it, dropped on failure, within the budget; each chunk's bytes lent
 * unchanged until its release, every chunk released before the end), the
 * worker pool (FIFO,
 * cancelling what is queued at stop), shard file names, and an inode
 * being pushed into retired when another computation shows up.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "fuse_i.h"
#include "mf_snapshot.h"

#define CHUNK 4096
#define CHUNKS 64
#define FP "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define RUN "0123456789abcdef0123456789abcdef"

struct fx {
	char dir[64];
	struct mf_store *st;
	struct mfs_data d;
	uint8_t *want;
};

static uint8_t byte_at(size_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/mf-parts.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(mf_store_open(f->dir, true, &f->st), 0);
	assert_int_equal(mf_store_run_create(f->st, FP, RUN), 0);
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 1, CHUNK, 1, false};
	struct mf_shard_writer *w;
	assert_int_equal(mf_shard_writer_open(f->st, FP, RUN, 0, &cfg, &w), 0);
	size_t n = CHUNKS * CHUNK - 100; /* a short last chunk */
	f->want = malloc(n);
	assert_non_null(f->want);
	for (size_t i = 0; i < n; i++)
		f->want[i] = byte_at(i);
	assert_int_equal(mf_shard_writer_write(w, f->want, n), 0);
	assert_int_equal(mf_shard_writer_commit(w, NULL), 0);
	assert_int_equal(mf_shard_reader_open(f->st, FP, RUN, 0, &f->d.r), 0);
	mf_engine_reader_stat(f->d.r, &f->d.st);
	f->d.id = 7;
	atomic_init(&f->d.refs, 1);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	mf_shard_reader_close(f->d.r);
	mf_store_close(f->st);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f->want);
	free(f);
	return 0;
}

static void check_chunk(struct fx *f, struct mfs_cache *c, uint32_t i)
{
	struct mfs_chunk ch;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, i, &ch, &ref), 0);
	size_t len = i == CHUNKS - 1 ? CHUNK - 100 : CHUNK;
	assert_int_equal(ch.len, len);
	assert_memory_equal(ch.buf, f->want + (size_t)i * CHUNK, len);
	mfs_cache_unref(c, ref);
}

static void test_cache_bytes_and_budget(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(4 * CHUNK, &c), 0);
	for (uint32_t i = 0; i < CHUNKS; i++)
		check_chunk(f, c, i);
	unsigned held = 0;
	for (uint32_t i = 0; i < CHUNKS; i++)
		held += mfs_cache_has(c, &f->d, i);
	assert_true(held <= 4);
	assert_true(mfs_cache_has(c, &f->d, CHUNKS - 1)); /* most recent */
	assert_false(mfs_cache_has(c, &f->d, 0)); /* evicted */
	struct mfs_chunk ch;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, CHUNKS, &ch, &ref), -EINVAL);
	mfs_cache_drop(c, f->d.id);
	assert_false(mfs_cache_has(c, &f->d, CHUNKS - 1));
	mfs_cache_free(c);
}

/* A reader's ask is a hit when the chunk is cached, a miss when it
 * decompresses it; read-ahead (mfs_cache_get) counts neither. */
static void test_cache_hits_and_misses(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(8 * CHUNK, &c), 0);
	struct mfs_chunk ch;
	void *ref;
	struct mfs_cache_stats cs;
	assert_int_equal(mfs_cache_read(c, &f->d, 0, &ch, &ref), 0);
	mfs_cache_unref(c, ref);
	assert_int_equal(mfs_cache_read(c, &f->d, 0, &ch, &ref), 0);
	assert_memory_equal(ch.buf, f->want, CHUNK);
	mfs_cache_unref(c, ref);
	check_chunk(f, c, 1); /* as read-ahead does */
	assert_int_equal(mfs_cache_read(c, &f->d, 1, &ch, &ref), 0);
	mfs_cache_unref(c, ref);
	mfs_cache_counts(c, &cs);
	assert_int_equal(cs.misses, 1);
	assert_int_equal(cs.hits, 2);
	assert_int_equal(cs.decompressed, 2);
	mfs_cache_free(c);
}

static void test_cache_held_chunk_stays(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(2 * CHUNK, &c), 0);
	struct mfs_chunk held;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, 3, &held, &ref), 0);
	for (uint32_t i = 10; i < 30; i++)
		check_chunk(f, c, i);
	assert_true(mfs_cache_has(c, &f->d, 3));
	assert_memory_equal(held.buf, f->want + 3 * CHUNK, CHUNK);
	mfs_cache_unref(c, ref);
	for (uint32_t i = 30; i < 34; i++)
		check_chunk(f, c, i);
	assert_false(mfs_cache_has(c, &f->d, 3)); /* released: evictable */
	mfs_cache_free(c);
}

/* A chunk all of whose bytes a batch reader was served goes at once,
 * within the budget (its buffer kept for the next load); one served in
 * part stays, and one held by another reader too (a read-ahead, another
 * view's batch) goes when that one lets it go. */
static void test_cache_served_chunk_goes(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(64 * CHUNK, &c), 0);
	struct mfs_chunk ch, again;
	void *ref, *ref2;
	assert_int_equal(mfs_cache_read(c, &f->d, 5, &ch, &ref), 0);
	mfs_cache_unref_served(c, ref, CHUNK / 2);
	assert_true(mfs_cache_has(c, &f->d, 5)); /* half read: kept */
	assert_int_equal(mfs_cache_read(c, &f->d, 5, &ch, &ref), 0);
	assert_int_equal(mfs_cache_read(c, &f->d, 5, &again, &ref2), 0);
	mfs_cache_unref_served(c, ref, CHUNK / 2);
	assert_true(mfs_cache_has(c, &f->d, 5)); /* another holds it */
	mfs_cache_unref(c, ref2);
	assert_false(mfs_cache_has(c, &f->d, 5)); /* the last let go */
	assert_int_equal(mfs_cache_read(c, &f->d, 5, &ch, &ref), 0);
	mfs_cache_unref_served(c, ref, CHUNK / 2);
	assert_true(mfs_cache_has(c, &f->d, 5));
	assert_int_equal(mfs_cache_read(c, &f->d, 5, &ch, &ref), 0);
	mfs_cache_unref_served(c, ref, CHUNK / 2);
	assert_false(mfs_cache_has(c, &f->d, 5)); /* every byte read */
	/* the next load gets the right bytes (in the buffer kept) */
	check_chunk(f, c, 6);
	mfs_cache_free(c);
}

struct racer {
	struct fx *f;
	struct mfs_cache *c;
	const uint8_t *buf;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	struct mfs_chunk ch;
	void *ref;
	if (mfs_cache_get(r->c, &r->f->d, 9, &ch, &ref) == 0) {
		r->buf = ch.buf;
		usleep(20000); /* all hold it at once */
		mfs_cache_unref(r->c, ref);
	}
	return NULL;
}

static void test_cache_one_load_for_all(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(1 << 20, &c), 0);
	struct racer r[8];
	pthread_t t[8];
	for (int i = 0; i < 8; i++) {
		r[i] = (struct racer){f, c, NULL};
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 8; i++) {
		assert_non_null(r[i].buf);
		assert_ptr_equal(r[i].buf, r[0].buf); /* one entry, one load */
	}
	mfs_cache_free(c);
}

static void test_cache_corrupt_not_kept(void **state)
{
	struct fx *f = *state;
	char path[256];
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s/shard-00000.mfs",
		 f->dir, FP, RUN);
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	/* a byte inside the first chunk's stored bytes */
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, 100), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, 100), 1);
	close(fd);
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(1 << 20, &c), 0);
	struct mfs_chunk ch;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, 0, &ch, &ref), -EBADMSG);
	assert_false(mfs_cache_has(c, &f->d, 0));
	assert_int_equal(mfs_cache_get(c, &f->d, 0, &ch, &ref), -EBADMSG);
	check_chunk(f, c, 1); /* the others still read */
	mfs_cache_free(c);
}

/* ---- chunks handed over by a materialization ---- */

static struct mf_chunk_event ev_data(uint64_t gen, uint32_t i,
				     const uint8_t *bytes)
{
	size_t len = i == CHUNKS - 1 ? CHUNK - 100 : CHUNK;
	return (struct mf_chunk_event){.kind = MF_CHUNK_DATA,
				       .fp = FP,
				       .shard = 0,
				       .generation = gen,
				       .index = i,
				       .raw = bytes + (size_t)i * CHUNK,
				       .len = len};
}

/* Taps chunks [0, n) of bytes as computation `gen`, then ends it. */
static void tap_all(struct mfs_cache *c, uint64_t gen, uint32_t n,
		    const uint8_t *bytes, enum mf_chunk_kind end,
		    const struct mf_engine_file *st)
{
	for (uint32_t i = 0; i < n; i++) {
		struct mf_chunk_event ev = ev_data(gen, i, bytes);
		mfs_cache_tap(c, &ev);
	}
	struct mf_chunk_event ev = {.kind = end,
				    .fp = FP,
				    .shard = 0,
				    .generation = gen,
				    .stat =
					end == MF_CHUNK_COMMITTED ? st : NULL};
	mfs_cache_tap(c, &ev);
}

/* The catalog row of the fixture's file as computation `gen`: run id and
 * attempts are the same for every computation, as after a recompute by
 * one run once the rows were made again. */
static struct mf_engine_shard rec_of(const struct fx *f, uint64_t gen)
{
	struct mf_engine_shard rec = {.index = 0,
				      .state = MF_ENGINE_MATERIALIZED,
				      .raw_bytes = f->d.st.raw_bytes,
				      .stored_bytes = f->d.st.stored_bytes,
				      .chunks = f->d.st.chunks,
				      .attempts = 1,
				      .generation = gen};
	snprintf(rec.fp, sizeof(rec.fp), "%s", FP);
	snprintf(rec.run_id, sizeof(rec.run_id), "%s", RUN);
	return rec;
}

static void assert_counts(struct mfs_cache *c, uint64_t dec, uint64_t tap)
{
	struct mfs_cache_stats cs;
	mfs_cache_counts(c, &cs);
	assert_int_equal(cs.decompressed, dec);
	assert_int_equal(cs.tapped, tap);
}

struct adopter {
	struct mfs_cache *c;
	struct mf_engine_shard rec;
	struct mf_engine_file st;
	uint64_t id;
};

static void *adopt_elsewhere(void *arg)
{
	struct adopter *a = arg;
	a->id = mfs_cache_adopt(a->c, &a->rec, &a->st);
	mfs_cache_unstage(a->c); /* not this thread's: changes nothing */
	return NULL;
}

static void test_tap_adopted_exactly(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(1 << 20, &c), 0);
	uint8_t *other = malloc(CHUNKS * CHUNK);
	assert_non_null(other);
	for (size_t i = 0; i < CHUNKS * CHUNK; i++)
		other[i] = (uint8_t)~byte_at(i);
	/* computation 1 produced other bytes, also committed */
	tap_all(c, 1, CHUNKS, other, MF_CHUNK_COMMITTED, &f->d.st);
	tap_all(c, 2, CHUNKS, f->want, MF_CHUNK_COMMITTED, &f->d.st);
	assert_counts(c, 0, 2 * CHUNKS);

	struct mf_engine_shard rec = rec_of(f, 2);
	struct adopter a = {c, rec, f->d.st, 99};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, adopt_elsewhere, &a), 0);
	pthread_join(t, NULL);
	assert_int_equal(a.id, 0); /* only the thread that ran it */
	/* a failed row names no file (a running one may: sealed and being
	 * committed by this engine, serve_sealed) */
	rec.state = MF_ENGINE_FAILED;
	assert_int_equal(mfs_cache_adopt(c, &rec, &f->d.st), 0);
	rec = rec_of(f, 3);
	assert_int_equal(mfs_cache_adopt(c, &rec, &f->d.st), 0);
	rec = rec_of(f, 2);
	struct mf_engine_file st = f->d.st;
	st.stored_bytes++; /* another file of that computation's name */
	assert_int_equal(mfs_cache_adopt(c, &rec, &st), 0);

	uint64_t id = mfs_cache_adopt(c, &rec, &f->d.st);
	assert_int_not_equal(id, 0);
	assert_int_not_equal(id, f->d.id);
	assert_int_equal(mfs_cache_adopt(c, &rec, &f->d.st), 0); /* once */
	f->d.id = id;
	for (uint32_t i = 0; i < CHUNKS; i++)
		check_chunk(f, c, i); /* computation 2's bytes, none of 1's */
	assert_counts(c, 0, 2 * CHUNKS);
	mfs_cache_unstage(c); /* computation 1: nobody took it */
	rec = rec_of(f, 1);
	assert_int_equal(mfs_cache_adopt(c, &rec, &f->d.st), 0);
	mfs_cache_free(c);
	free(other);
}

static void test_tap_failed_dropped(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	/* room for one computation's chunks, not two */
	assert_int_equal(mfs_cache_new(CHUNKS * CHUNK, &c), 0);
	tap_all(c, 1, CHUNKS, f->want, MF_CHUNK_FAILED, NULL);
	assert_counts(c, 0, CHUNKS);
	struct mf_engine_shard rec = rec_of(f, 1);
	assert_int_equal(mfs_cache_adopt(c, &rec, &f->d.st), 0);
	/* computation 1's chunks are gone: computation 2 fits whole */
	tap_all(c, 2, CHUNKS, f->want, MF_CHUNK_COMMITTED, &f->d.st);
	assert_counts(c, 0, 2 * CHUNKS);
	/* and so does 3 once 2 is unstaged by its thread */
	mfs_cache_unstage(c);
	tap_all(c, 3, CHUNKS, f->want, MF_CHUNK_COMMITTED, &f->d.st);
	assert_counts(c, 0, 3 * CHUNKS);
	rec = rec_of(f, 3);
	f->d.id = mfs_cache_adopt(c, &rec, &f->d.st);
	assert_int_not_equal(f->d.id, 0);
	for (uint32_t i = 0; i < CHUNKS; i++)
		check_chunk(f, c, i);
	assert_counts(c, 0, 3 * CHUNKS);
	mfs_cache_free(c);
}

static void test_tap_within_budget(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(4 * CHUNK, &c), 0);
	struct mfs_chunk held;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, 40, &held, &ref), 0);
	assert_counts(c, 1, 0);
	/* a held chunk stays: room for three, then the rest is left out */
	tap_all(c, 1, CHUNKS, f->want, MF_CHUNK_COMMITTED, &f->d.st);
	assert_counts(c, 1, 3);
	assert_true(mfs_cache_has(c, &f->d, 40));
	mfs_cache_unref(c, ref);
	struct mf_engine_shard rec = rec_of(f, 1);
	uint64_t old = f->d.id;
	f->d.id = mfs_cache_adopt(c, &rec, &f->d.st);
	assert_int_not_equal(f->d.id, 0);
	for (uint32_t i = 0; i < 3; i++)
		check_chunk(f, c, i);
	assert_counts(c, 1, 3);
	for (uint32_t i = 3; i < CHUNKS; i++)
		check_chunk(f, c, i); /* decompressed, evicting as usual */
	assert_counts(c, 1 + CHUNKS - 3, 3);
	f->d.id = old;
	mfs_cache_free(c);
}

/* A cache at its budget with readers' chunks nobody holds: a computation's
 * chunks take their place (the least recently read go), but never the
 * chunks tapped for another computation nobody opened yet. */
static void test_tap_evicts_readers_chunks(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(4 * CHUNK, &c), 0);
	for (uint32_t i = 0; i < 4; i++)
		check_chunk(f, c, i); /* loaded, then let go */
	assert_counts(c, 4, 0);
	tap_all(c, 1, CHUNKS, f->want, MF_CHUNK_COMMITTED, &f->d.st);
	assert_counts(c, 4, 4);
	for (uint32_t i = 0; i < 4; i++)
		assert_false(mfs_cache_has(c, &f->d, i));
	/* computation 2 finds only computation 1's chunks: it keeps none */
	tap_all(c, 2, CHUNKS, f->want, MF_CHUNK_COMMITTED, &f->d.st);
	assert_counts(c, 4, 4);
	struct mf_engine_shard rec = rec_of(f, 1);
	uint64_t old = f->d.id;
	f->d.id = mfs_cache_adopt(c, &rec, &f->d.st);
	assert_int_not_equal(f->d.id, 0);
	for (uint32_t i = 0; i < 4; i++)
		check_chunk(f, c,
			    i); /* the tapped ones: nothing decompressed */
	assert_counts(c, 4, 4);
	f->d.id = old;
	mfs_cache_unstage(c);
	mfs_cache_free(c);
}

/* A tap that cannot fit even once readers' chunks made way evicts none
 * of them. */
static void test_tap_no_room_evicts_nothing(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(4 * CHUNK - 50, &c), 0);
	for (uint32_t i = 0; i < 3; i++) {
		struct mf_chunk_event ev = ev_data(1, i, f->want);
		mfs_cache_tap(c, &ev);
	}
	assert_counts(c, 0, 3);
	check_chunk(f, c, CHUNKS - 1); /* a reader's short last chunk */
	struct mf_chunk_event ev = ev_data(2, 0, f->want);
	mfs_cache_tap(c, &ev);
	assert_counts(c, 1, 3);
	assert_true(mfs_cache_has(c, &f->d, CHUNKS - 1));
	mfs_cache_unstage(c);
	mfs_cache_free(c);
}

static void test_tap_out_of_order_left_out(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(1 << 20, &c), 0);
	struct mf_chunk_event ev = ev_data(1, 1, f->want);
	mfs_cache_tap(c, &ev); /* no chunk 0 first: nothing kept */
	assert_counts(c, 0, 0);
	const uint32_t order[] = {0, 1, 3, 4};
	for (size_t i = 0; i < 4; i++) {
		ev = ev_data(2, order[i], f->want);
		mfs_cache_tap(c, &ev);
	}
	assert_counts(c, 0, 2); /* after a gap, the rest is left out */
	mfs_cache_unstage(c);
	mfs_cache_free(c);
}

/* ---- the engine's chunk events ---- */

#define LENT_MAX 64

struct events {
	uint8_t *bytes;
	size_t len;
	uint32_t data, committed, failed, bad;
	uint32_t released; /* chunks below this one were released */
	uint32_t stale; /* lent bytes changed before their release */
	/* DATA's raw of each chunk not yet released, and where its copy is
	 * in bytes */
	const uint8_t *lent[LENT_MAX];
	size_t lent_off[LENT_MAX], lent_len[LENT_MAX];
	uint64_t generation;
	struct mf_engine_file st;
	pthread_t thread;
};

/* Chunks up to index are released: their lent bytes must still be what
 * the DATA event showed. */
static void on_release(struct events *e, uint32_t index)
{
	if (index < e->released || index >= e->data)
		e->bad++;
	for (uint32_t c = e->released; c <= index && c < e->data; c++) {
		if (c >= LENT_MAX) {
			e->bad++;
			continue;
		}
		if (memcmp(e->lent[c], e->bytes + e->lent_off[c],
			   e->lent_len[c]) != 0)
			e->stale++;
	}
	e->released = index + 1;
}

static void on_event(void *arg, const struct mf_chunk_event *ev)
{
	struct events *e = arg;
	if (!pthread_equal(pthread_self(), e->thread) || e->committed ||
	    e->failed || ev->shard != 0 || ev->generation == 0 ||
	    (e->generation && ev->generation != e->generation))
		e->bad++;
	if (ev->kind == MF_CHUNK_DATA) {
		if (ev->index != e->data++)
			e->bad++;
		if (ev->index < LENT_MAX) {
			e->lent[ev->index] = ev->raw;
			e->lent_off[ev->index] = e->len;
			e->lent_len[ev->index] = ev->len;
		}
		e->bytes = realloc(e->bytes, e->len + ev->len);
		assert_non_null(e->bytes);
		memcpy(e->bytes + e->len, ev->raw, ev->len);
		e->len += ev->len;
	} else if (ev->kind == MF_CHUNK_RELEASE) {
		on_release(e, ev->index);
	} else {
		if (e->released != e->data) /* all released before the end */
			e->bad++;
		if (ev->kind == MF_CHUNK_COMMITTED) {
			e->committed++;
			e->st = *ev->stat;
		} else {
			e->failed++;
		}
	}
	e->generation = ev->generation;
}

static void write_text(const char *dir, const char *name, const char *text)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	assert_int_equal(fclose(fp), 0);
}

/* A store and a spec whose shard 0 prints a few chunks of 4 KiB, then
 * exits with the status in the file `status` (0 when missing). */
static struct mf_engine *engine_with_spec(const char *dir, struct events *ev,
					  char fp[MF_FP_HEX_LEN + 1])
{
	char path[256];
	snprintf(path, sizeof(path), "%s/in", dir);
	assert_int_equal(mkdir(path, 0755), 0);
	write_text(dir, "in/a.txt", "input a\n");
	write_text(dir, "spec.yaml",
		   "name: ev\ninputs: in/*.txt\nchunk_size: 4KiB\n"
		   "compression: zstd:1\nstages:\n"
		   "  - exec: [/bin/sh, -c, 'cat; seq 1 5000; "
		   "exit $(cat status 2>/dev/null || echo 0)']\n");
	snprintf(path, sizeof(path), "%s/store", dir);
	struct mf_engine_opts o = {.store_dir = path,
				   .compress_threads = 3,
				   .chunk = on_event,
				   .chunk_arg = ev};
	struct mf_engine *e;
	char *err = NULL;
	assert_int_equal(mf_engine_open(&o, &e, &err), 0);
	snprintf(path, sizeof(path), "%s/spec.yaml", dir);
	assert_int_equal(mf_engine_register(e, path, fp, &err), 0);
	return e;
}

static void test_engine_chunk_events(void **state)
{
	(void)state;
	char dir[64];
	snprintf(dir, sizeof(dir), "/tmp/mf-parts-ev.XXXXXX");
	assert_non_null(mkdtemp(dir));
	struct events ev = {.thread = pthread_self()};
	char fp[MF_FP_HEX_LEN + 1];
	struct mf_engine *e = engine_with_spec(dir, &ev, fp);

	/* a failed stage: its chunks came, then FAILED */
	write_text(dir, "status", "3\n");
	struct mf_shard_reader *r;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(e, fp, 0, &r, &err), -EIO);
	free(err);
	err = NULL;
	assert_true(ev.data > 1);
	assert_int_equal(ev.released, ev.data);
	assert_int_equal(ev.failed, 1);
	assert_int_equal(ev.committed, 0);
	assert_int_equal(ev.bad, 0);
	uint64_t failed_gen = ev.generation;

	/* the next attempt: every chunk in order, then COMMITTED */
	write_text(dir, "status", "0\n");
	free(ev.bytes);
	ev = (struct events){.thread = pthread_self()};
	assert_int_equal(mf_engine_open_shard(e, fp, 0, &r, &err), 0);
	struct mf_engine_file st;
	mf_engine_reader_stat(r, &st);
	assert_int_equal(ev.bad, 0);
	assert_int_equal(ev.committed, 1);
	assert_int_equal(ev.failed, 0);
	assert_int_equal(ev.data, st.chunks);
	assert_true(st.chunks > 2);
	/* each chunk's bytes stayed as shown until released */
	assert_int_equal(ev.released, st.chunks);
	assert_int_equal(ev.stale, 0);
	assert_int_equal(ev.len, st.raw_bytes);
	assert_int_equal(ev.st.raw_bytes, st.raw_bytes);
	assert_int_equal(ev.st.stored_bytes, st.stored_bytes);
	uint8_t *back = malloc(st.raw_bytes);
	assert_non_null(back);
	assert_int_equal(mf_shard_reader_pread(r, back, st.raw_bytes, 0),
			 (ssize_t)st.raw_bytes);
	assert_memory_equal(back, ev.bytes, st.raw_bytes);
	mf_shard_reader_close(r);
	free(back);

	/* the events name the computation as the catalog does */
	struct mf_engine_shard rec;
	assert_int_equal(mf_engine_shard_rec(e, fp, 0, &rec), 0);
	assert_int_equal(rec.attempts, 2);
	assert_int_equal(ev.generation, rec.generation);
	assert_true(ev.generation != failed_gen);
	mf_engine_shard_release(&rec);

	/* reading a materialized shard computes nothing: no events */
	uint32_t seen = ev.data + ev.committed;
	assert_int_equal(mf_engine_open_shard(e, fp, 0, &r, &err), 0);
	mf_shard_reader_close(r);
	assert_int_equal(ev.data + ev.committed, seen);
	free(ev.bytes);
	mf_engine_close(e);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

struct order {
	pthread_mutex_t lock;
	int ran[16], n_ran, cancelled;
};

struct job_arg {
	struct order *o;
	int id;
	unsigned sleep_us;
};

static void job(void *arg, bool cancelled)
{
	struct job_arg *a = arg;
	usleep(a->sleep_us);
	pthread_mutex_lock(&a->o->lock);
	if (cancelled)
		a->o->cancelled++;
	else
		a->o->ran[a->o->n_ran++] = a->id;
	pthread_mutex_unlock(&a->o->lock);
}

static void test_pool_fifo_and_stop(void **state)
{
	(void)state;
	struct order o = {.lock = MF_MUTEX_INITIALIZER};
	struct job_arg a[8];
	struct mfs_pool *p;
	assert_int_equal(mfs_pool_new(1, &p), 0);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct job_arg){&o, i, 1000};
		assert_int_equal(mfs_pool_submit(p, job, &a[i]), 0);
	}
	for (int i = 0; i < 200 && mfs_pool_backlog(p) > 0; i++)
		usleep(5000);
	for (int i = 0; i < 400; i++) { /* the last job may still run */
		pthread_mutex_lock(&o.lock);
		int ran = o.n_ran;
		pthread_mutex_unlock(&o.lock);
		if (ran == 4)
			break;
		usleep(5000);
	}
	pthread_mutex_lock(&o.lock);
	assert_int_equal(o.n_ran, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(o.ran[i], i); /* first in, first run */
	pthread_mutex_unlock(&o.lock);
	a[4] = (struct job_arg){&o, 4, 200000}; /* runs while we stop */
	assert_int_equal(mfs_pool_submit(p, job, &a[4]), 0);
	usleep(50000);
	for (int i = 5; i < 8; i++) {
		a[i] = (struct job_arg){&o, i, 0};
		assert_int_equal(mfs_pool_submit(p, job, &a[i]), 0);
	}
	assert_int_equal(mfs_pool_stop(p, 5000), 0);
	assert_int_equal(o.n_ran, 5);
	assert_int_equal(o.cancelled, 3);
}

/* A job entered under a second key (mfs_pool_lift) runs at that key's
 * turn when it comes first, once: key 1 queues jobs 0..4, key 2 then
 * lifts job 4 (its first opener's last) into its own turn, so it runs
 * right after the one running, not fifth. Lifting a job that started, or
 * under a key it has, changes nothing; the stop cancels a lifted job
 * once. */
static void test_pool_lift(void **state)
{
	(void)state;
	struct order o = {.lock = MF_MUTEX_INITIALIZER};
	struct job_arg a[8];
	uint64_t id[8];
	struct mfs_pool *p;
	assert_int_equal(mfs_pool_new(1, &p), 0);
	a[0] = (struct job_arg){&o, 0, 100000}; /* holds the worker */
	assert_int_equal(mfs_pool_submit_keyed(p, 1, job, &a[0], &id[0]), 0);
	for (int i = 0; i < 200 && mfs_pool_backlog(p) > 0; i++)
		usleep(5000);
	assert_int_equal(mfs_pool_backlog(p), 0);
	for (int i = 1; i < 5; i++) {
		a[i] = (struct job_arg){&o, i, 1000};
		assert_int_equal(
		    mfs_pool_submit_keyed(p, 1, job, &a[i], &id[i]), 0);
	}
	assert_int_equal(mfs_pool_lift(p, id[0], 2), -ENOENT); /* started */
	assert_int_equal(mfs_pool_lift(p, id[4], 1), -EEXIST);
	assert_int_equal(mfs_pool_lift(p, id[4], 2), 0);
	assert_int_equal(mfs_pool_lift(p, id[4], 2), -EEXIST);
	assert_int_equal(mfs_pool_backlog(p), 4);
	for (int i = 0; i < 400; i++) {
		pthread_mutex_lock(&o.lock);
		int ran = o.n_ran;
		pthread_mutex_unlock(&o.lock);
		if (ran == 5)
			break;
		usleep(5000);
	}
	usleep(20000); /* a job run twice would show */
	pthread_mutex_lock(&o.lock);
	assert_int_equal(o.n_ran, 5);
	int want[] = {0, 4, 1, 2, 3};
	for (int i = 0; i < 5; i++)
		assert_int_equal(o.ran[i], want[i]);
	pthread_mutex_unlock(&o.lock);
	assert_int_equal(mfs_pool_lift(p, id[4], 3), -ENOENT); /* ran */
	a[5] = (struct job_arg){&o, 5, 200000}; /* runs while we stop */
	assert_int_equal(mfs_pool_submit_keyed(p, 1, job, &a[5], NULL), 0);
	usleep(50000);
	a[6] = (struct job_arg){&o, 6, 0};
	assert_int_equal(mfs_pool_submit_keyed(p, 1, job, &a[6], &id[6]), 0);
	assert_int_equal(mfs_pool_lift(p, id[6], 2), 0);
	assert_int_equal(mfs_pool_lift(p, id[6], 3), 0);
	assert_int_equal(mfs_pool_stop(p, 5000), 0);
	assert_int_equal(o.n_ran, 6);
	assert_int_equal(o.cancelled, 1);
}

/* Jobs that say when they start and wait for the test to let them end. */
struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	int started[16], n_started, n_ended;
};

struct gate_arg {
	struct gate *g;
	int id;
};

static void gated_job(void *arg, bool cancelled)
{
	struct gate_arg *a = arg;
	pthread_mutex_lock(&a->g->lock);
	if (!cancelled) {
		a->g->started[a->g->n_started++] = a->id;
		while (!a->g->open)
			pthread_cond_wait(&a->g->cond, &a->g->lock);
	}
	a->g->n_ended++;
	pthread_mutex_unlock(&a->g->lock);
}

/* Waits up to 2 s for n jobs to have started; returns how many did. */
static int started(struct gate *g, int n)
{
	int got = 0;
	for (int i = 0; i < 400; i++) {
		pthread_mutex_lock(&g->lock);
		got = g->n_started;
		pthread_mutex_unlock(&g->lock);
		if (got >= n)
			break;
		usleep(5000);
	}
	return got;
}

/* Lets the gated jobs end. */
static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

/* Waits up to 2 s for n jobs to have ended. */
static void ended(struct gate *g, int n)
{
	for (int i = 0; i < 400; i++) {
		pthread_mutex_lock(&g->lock);
		bool done = g->n_ended >= n;
		pthread_mutex_unlock(&g->lock);
		if (done)
			return;
		usleep(5000);
	}
}

/* The reserve: with two threads and one kept, a key alone gets both; once
 * two keys were queued within the window, key 1's slow jobs hold one
 * thread only, and key 2's job runs on the other at once, not after them. */
static void test_pool_reserve(void **state)
{
	(void)state;
	struct gate g = {.lock = MF_MUTEX_INITIALIZER};
	pthread_cond_init(&g.cond, NULL);
	struct gate_arg a[8];
	for (int i = 0; i < 8; i++)
		a[i] = (struct gate_arg){&g, i};
	struct mfs_pool *p;
	assert_int_equal(mfs_pool_new(2, &p), 0);
	mfs_pool_reserve(p, 1, 60ULL * 1000000000ULL);
	/* key 1 alone: both threads */
	assert_int_equal(mfs_pool_submit_keyed(p, 1, gated_job, &a[0], NULL),
			 0);
	assert_int_equal(mfs_pool_submit_keyed(p, 1, gated_job, &a[1], NULL),
			 0);
	assert_int_equal(started(&g, 2), 2);
	gate_open(&g);
	ended(&g, 2);
	/* key 2 came: key 1's three slow jobs get one thread */
	pthread_mutex_lock(&g.lock);
	g.open = false;
	g.n_started = 0;
	pthread_mutex_unlock(&g.lock);
	assert_int_equal(mfs_pool_submit_keyed(p, 2, gated_job, &a[2], NULL),
			 0);
	assert_int_equal(started(&g, 1), 1);
	gate_open(&g); /* key 2's ends */
	ended(&g, 3);
	pthread_mutex_lock(&g.lock);
	assert_int_equal(g.n_ended, 3);
	g.open = false;
	g.n_started = 0;
	pthread_mutex_unlock(&g.lock);
	for (int i = 3; i < 6; i++)
		assert_int_equal(
		    mfs_pool_submit_keyed(p, 1, gated_job, &a[i], NULL), 0);
	assert_int_equal(started(&g, 2), 1); /* one of key 1's, not two */
	assert_int_equal(mfs_pool_backlog(p), 2);
	assert_int_equal(mfs_pool_submit_keyed(p, 2, gated_job, &a[6], NULL),
			 0);
	assert_int_equal(started(&g, 2), 2); /* key 2's, at once */
	pthread_mutex_lock(&g.lock);
	assert_int_equal(g.started[0], 3);
	assert_int_equal(g.started[1], 6);
	pthread_mutex_unlock(&g.lock);
	gate_open(&g);
	assert_int_equal(started(&g, 4), 4); /* the rest, once let go */
	assert_int_equal(mfs_pool_stop(p, 5000), 0);
	assert_int_equal(g.n_ended, 7);
	pthread_cond_destroy(&g.cond);
}

static void test_shard_names(void **state)
{
	(void)state;
	assert_int_equal(mfs_shard_width(1), 5);
	assert_int_equal(mfs_shard_width(99999), 5);
	assert_int_equal(mfs_shard_width(100000), 6);
	assert_int_equal(mfs_shard_width(1000000), 7);
	struct mfs_snap_info si = {.shards = 12};
	snprintf(si.suffix, sizeof(si.suffix), ".bin");
	char name[64];
	uint32_t k = 99;
	assert_int_equal(mfs_shard_name(&si, 11, name, sizeof(name)), 0);
	assert_string_equal(name, "shard-00011.bin");
	assert_int_equal(mfs_shard_parse(&si, name, &k), 0);
	assert_int_equal(k, 11);
	const char *bad[] = {"shard-00012.bin", "shard-0011.bin",
			     "shard-00011",	"shard-00011.bi",
			     "shard-0001x.bin", "shard-000011.bin",
			     "Shard-00011.bin", ""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(mfs_shard_parse(&si, bad[i], &k), -ENOENT);
	si.shards = 100000;
	si.suffix[0] = 0;
	assert_int_equal(mfs_shard_name(&si, 7, name, sizeof(name)), 0);
	assert_string_equal(name, "shard-000007");
	assert_int_equal(mfs_shard_parse(&si, "shard-099999", &k), 0);
	assert_int_equal(k, 99999);
}

/* A shard's inode whose pages another computation is pushed into
 * (fuse_push.c) goes to a new inode as soon as a lookup finds the shard
 * computed anew, as one with handles open does; the pushed size is the
 * pushing computation's only. */
static void test_node_pushing_retired(void **state)
{
	(void)state;
	struct mfs *m = calloc(1, sizeof(*m));
	assert_non_null(m);
	assert_int_equal(mf_mutex_init(&m->node_lock), 0);
	fuse_ino_t base = mfs_ino_shard(3, 1);
	pthread_mutex_lock(&m->node_lock);
	struct mfs_node *n = mfs_node_get(m, base);
	assert_non_null(n);
	n->pushing = 5;
	n->pushed = 4096;
	pthread_mutex_unlock(&m->node_lock);
	uint64_t bytes = 0;
	assert_true(mfs_node_pushed(m, base, 5, &bytes));
	assert_int_equal(bytes, 4096);
	assert_false(mfs_node_pushed(m, base, 6, &bytes));
	struct mf_engine_shard rec = {.state = MF_ENGINE_RUNNING,
				      .generation = 5};
	/* the computation being pushed: the same inode */
	assert_int_equal(mfs_shard_ino_rec(m, 3, 1, &rec), base);
	/* a row read before its claim (absent): the same inode */
	struct mf_engine_shard absent = {.state = MF_ENGINE_ABSENT};
	assert_int_equal(mfs_shard_ino_rec(m, 3, 1, &absent), base);
	assert_int_equal(mfs_shard_ino_rec(m, 3, 1, NULL), base);
	/* another one committed meanwhile (a takeover): a new inode */
	rec.state = MF_ENGINE_MATERIALIZED;
	rec.generation = 6;
	fuse_ino_t ino = mfs_shard_ino_rec(m, 3, 1, &rec);
	assert_true(ino != base);
	assert_true(ino & MFS_INO_INC);
	pthread_mutex_lock(&m->node_lock);
	assert_true(mfs_node_get(m, base)->retired);
	pthread_mutex_unlock(&m->node_lock);
	/* and stays the shard's inode */
	assert_int_equal(mfs_shard_ino_rec(m, 3, 1, &rec), ino);
	mfs_nodes_release(m);
	pthread_mutex_destroy(&m->node_lock);
	free(m);
}

/* mountinfo's escapes: a backslash and three octal digits of one byte
 * become that byte; every other backslash stays, with what follows. */
static void test_mountinfo_unescape(void **state)
{
	(void)state;
	static const char *const cases[][2] = {
	    {"/mnt/a\\040b", "/mnt/a b"},
	    {"\\011tab\\012nl\\134bs", "\ttab\nnl\\bs"},
	    {"/plain", "/plain"},
	    {"\\0", "\\0"}, /* too short */
	    {"\\04", "\\04"}, /* too short */
	    {"\\04x1", "\\04x1"}, /* not three octal digits */
	    {"\\0x41", "\\0x41"}, /* not octal */
	    {"\\089", "\\089"}, /* 8 and 9 are not octal */
	    {"\\477", "\\477"}, /* past one byte */
	    {"\\\\040", "\\ "}, /* the first backslash stays */
	    {"end\\", "end\\"},
	    {"\\101\\102", "AB"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char buf[64];
		snprintf(buf, sizeof(buf), "%s", cases[i][0]);
		mfs_mountinfo_unescape(buf);
		assert_string_equal(buf, cases[i][1]);
	}
}

/* The device of the last mount at a mountpoint (escaped in the table),
 * and whether a device is mounted anywhere. */
static void test_mountinfo_lookups(void **state)
{
	(void)state;
	static const char table[] =
	    "22 1 0:21 / /proc rw - proc proc rw\n"
	    "40 22 0:55 / /tmp/a\\040b rw - fuse.matfs /s rw\n"
	    "41 22 0:56 / /tmp/x rw - fuse.matfs /s rw\n"
	    "42 41 0:57 /sub /tmp/a\\040b rw - fuse.matfs /s rw\n";
	char dev[64];
	FILE *f = fmemopen((void *)table, sizeof(table) - 1, "r");
	assert_non_null(f);
	assert_int_equal(mfs_mountinfo_devno(f, "/tmp/a b", dev, sizeof(dev)),
			 0);
	assert_string_equal(dev, "0:57");
	rewind(f);
	assert_int_equal(
	    mfs_mountinfo_devno(f, "/tmp/a\\040b", dev, sizeof(dev)), -ENOENT);
	rewind(f);
	assert_int_equal(mfs_mountinfo_has_dev(f, makedev(0, 56)), 1);
	rewind(f);
	assert_int_equal(mfs_mountinfo_has_dev(f, makedev(0, 58)), 0);
	rewind(f);
	assert_int_equal(mfs_mountinfo_has_dev(f, makedev(1, 56)), 0);
	fclose(f);
}

/* The listing bytes a reader uid may hold: its first listing always,
 * however large; past MFS_DIR_BYTES_CAP no further one, also when that
 * first one alone passed it; each uid on its own; given back, room again. */
static void test_user_listing_bytes(void **state)
{
	(void)state;
	struct mfs *m = calloc(1, sizeof(*m));
	assert_non_null(m);
	assert_int_equal(mf_mutex_init(&m->node_lock), 0);
	size_t cap = MFS_DIR_BYTES_CAP, big = 4 * MFS_DIR_BYTES_CAP;
	assert_int_equal(mfs_user_take_bytes(m, 1000, big), 0);
	assert_int_equal(mfs_user_take_bytes(m, 1000, 1), -EMFILE);
	assert_int_equal(mfs_user_take_bytes(m, 1001, cap / 2), 0);
	assert_int_equal(mfs_user_take_bytes(m, 1001, cap / 2), 0);
	assert_int_equal(mfs_user_take_bytes(m, 1001, 1), -EMFILE);
	mfs_user_give_bytes(m, 1000, big);
	assert_int_equal(mfs_user_take_bytes(m, 1000, cap), 0);
	mfs_user_give_bytes(m, 1000, cap);
	mfs_user_give_bytes(m, 1001, cap / 2);
	mfs_user_give_bytes(m, 1001, cap / 2);
	assert_null(m->user_fhs); /* nothing held: no entry left */
	pthread_mutex_destroy(&m->node_lock);
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_user_listing_bytes),
	    cmocka_unit_test_setup_teardown(test_cache_bytes_and_budget, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cache_hits_and_misses, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cache_held_chunk_stays, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cache_served_chunk_goes, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cache_one_load_for_all, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cache_corrupt_not_kept, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tap_adopted_exactly, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tap_failed_dropped, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tap_within_budget, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tap_evicts_readers_chunks,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tap_no_room_evicts_nothing,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tap_out_of_order_left_out,
					    setup, teardown),
	    cmocka_unit_test(test_engine_chunk_events),
	    cmocka_unit_test(test_pool_fifo_and_stop),
	    cmocka_unit_test(test_pool_lift),
	    cmocka_unit_test(test_pool_reserve),
	    cmocka_unit_test(test_shard_names),
	    cmocka_unit_test(test_node_pushing_retired),
	    cmocka_unit_test(test_mountinfo_unescape),
	    cmocka_unit_test(test_mountinfo_lookups),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
