/*
 * test_snap_tap.c - the shard writer's tap: it sees every chunk's raw
 * bytes exactly once, in order, on the writing thread, for 0, 1 and
 * several chunks, inline and with a compression pool, whatever the sizes
 * of the writes; the file it taps reads back the same bytes; a tap can
 * only be set before the first byte; with a release function, each chunk
 * stays as shown until released, every one by the end.
 *
 * Not for: the file format (test_snap_golden.c) or corrupt files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mf_snapshot.h"
#include "snap_testutil.h"

#define CS (16 * 1024)

/* A store with run TU_RUN of TU_FP made. */
static int setup(void **state)
{
	if (tu_store_setup(state) != 0)
		return -1;
	struct tu_store *f = *state;
	return mf_store_run_create(f->st, TU_FP, TU_RUN) == 0 ? 0 : -1;
}

/* What the tap saw: the bytes concatenated, the chunks' lengths. */
struct seen {
	uint8_t *bytes;
	size_t len, cap;
	uint32_t calls;
	uint32_t bad_index; /* calls whose index was not the next one */
	uint32_t bad_len; /* a chunk other than the last not CS long */
	uint32_t bad_thread;
	size_t last_len;
	pthread_t writer;
};

static void tap(void *arg, uint32_t chunk, const void *raw, size_t len)
{
	struct seen *s = arg;
	if (chunk != s->calls)
		s->bad_index++;
	if (s->calls > 0 && s->last_len != CS)
		s->bad_len++; /* only the last chunk may be short */
	if (!pthread_equal(pthread_self(), s->writer))
		s->bad_thread++;
	if (s->len + len > s->cap) {
		s->cap = 2 * (s->len + len);
		s->bytes = realloc(s->bytes, s->cap);
		assert_non_null(s->bytes);
	}
	memcpy(s->bytes + s->len, raw, len);
	s->len += len;
	s->last_len = len;
	s->calls++;
}

/* Writes src in pieces (aligned whole chunks when `aligned`, else of
 * pseudo-random sizes) with the tap on, then checks what it saw and the
 * file. */
static void tap_case(struct tu_store *f, enum mf_codec codec, unsigned threads,
		     size_t len, bool aligned, uint32_t shard)
{
	uint8_t *src = malloc(len ? len : 1);
	assert_non_null(src);
	tu_fill(src, len, 1000 + len + threads, true);
	struct mf_codec_cfg cfg = {codec, 1, CS, threads, false};
	struct mf_shard_writer *w;
	assert_int_equal(
	    mf_shard_writer_open(f->st, TU_FP, TU_RUN, shard, &cfg, &w), 0);
	struct seen s = {.writer = pthread_self()};
	assert_int_equal(mf_shard_writer_set_tap(w, tap, &s), 0);
	uint64_t rs = len * 31 + threads;
	for (size_t off = 0; off < len;) {
		size_t n = aligned ? 2 * CS : 1 + tu_rand(&rs) % (CS + CS / 3);
		n = n < len - off ? n : len - off;
		assert_int_equal(mf_shard_writer_write(w, src + off, n), 0);
		off += n;
	}
	struct mf_shard_stat st;
	assert_int_equal(mf_shard_writer_commit(w, &st), 0);

	uint32_t chunks = (uint32_t)((len + CS - 1) / CS);
	assert_int_equal(s.calls, chunks);
	assert_int_equal(st.chunks, chunks);
	assert_int_equal(s.bad_index, 0);
	assert_int_equal(s.bad_len, 0);
	assert_int_equal(s.bad_thread, 0);
	assert_int_equal(s.len, len);
	if (len)
		assert_memory_equal(s.bytes, src, len);

	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(f->st, TU_FP, TU_RUN, shard, &r),
			 0);
	uint8_t *back = malloc(len + 1);
	assert_non_null(back);
	assert_int_equal(mf_shard_reader_pread(r, back, len + 1, 0),
			 (ssize_t)len);
	if (len)
		assert_memory_equal(back, src, len);
	mf_shard_reader_close(r);
	free(back);
	free(s.bytes);
	free(src);
}

static const size_t lens[] = {0, 1, CS, 5 * CS + CS / 3};

static void test_tap_sees_every_chunk_in_order(void **state)
{
	struct tu_store *f = *state;
	const unsigned threads[] = {1, 3};
	uint32_t shard = 0;
	for (size_t t = 0; t < 2; t++)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
			for (int aligned = 0; aligned < 2; aligned++)
				tap_case(f, MF_CODEC_ZSTD, threads[t], lens[i],
					 aligned, shard++);
}

static void test_tap_other_codecs(void **state)
{
	struct tu_store *f = *state;
	tap_case(f, MF_CODEC_SNAPPY, 3, 4 * CS + 7, false, 0);
	tap_case(f, MF_CODEC_NONE, 3, 4 * CS + 7, false, 1);
	tap_case(f, MF_CODEC_NONE, 1, 4 * CS, true, 2);
}

static void test_tap_set_rules(void **state)
{
	struct tu_store *f = *state;
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 1, CS, 3, false};
	struct mf_shard_writer *w;
	assert_int_equal(mf_shard_writer_set_tap(NULL, tap, NULL), -EINVAL);
	assert_int_equal(
	    mf_shard_writer_open(f->st, TU_FP, TU_RUN, 0, &cfg, &w), 0);
	struct seen s = {.writer = pthread_self()};
	assert_int_equal(mf_shard_writer_set_tap(w, tap, &s), 0);
	assert_int_equal(mf_shard_writer_set_tap(w, NULL, NULL), 0);
	uint8_t buf[100] = {1, 2, 3};
	assert_int_equal(mf_shard_writer_write(w, buf, sizeof(buf)), 0);
	/* a tap set now would miss the bytes already given */
	assert_int_equal(mf_shard_writer_set_tap(w, tap, &s), -EBUSY);
	assert_int_equal(mf_shard_writer_commit(w, NULL), 0);
	assert_int_equal(s.calls, 0); /* removed before any chunk */
}

/* A tap that keeps the chunks it was shown until their release, as a
 * reader on another thread would: each one must stay as it was shown. */
#define LENT_MAX 16
struct lent {
	const uint8_t *raw[LENT_MAX];
	uint8_t copy[LENT_MAX][CS];
	size_t len[LENT_MAX];
	uint32_t shown, released, bad, stale;
};

static void lend_tap(void *arg, uint32_t chunk, const void *raw, size_t len)
{
	struct lent *l = arg;
	if (chunk != l->shown || chunk >= LENT_MAX || len > CS) {
		l->bad++;
		return;
	}
	l->raw[chunk] = raw;
	l->len[chunk] = len;
	memcpy(l->copy[chunk], raw, len);
	l->shown++;
}

static void lend_release(void *arg, uint32_t chunk)
{
	struct lent *l = arg;
	if (chunk < l->released || chunk >= l->shown)
		l->bad++;
	for (uint32_t c = l->released; c <= chunk && c < l->shown; c++)
		if (memcmp(l->raw[c], l->copy[c], l->len[c]) != 0)
			l->stale++;
	l->released = chunk + 1;
}

/* Fills w through mf_shard_writer_space and _wrote, as the engine does,
 * in pieces of CS / 3. */
static void lend_fill(struct mf_shard_writer *w, const uint8_t *src, size_t len)
{
	for (size_t off = 0; off < len;) {
		void *buf;
		size_t room;
		assert_int_equal(mf_shard_writer_space(w, &buf, &room), 0);
		size_t n = CS / 3 < room ? CS / 3 : room;
		n = n < len - off ? n : len - off;
		memcpy(buf, src + off, n);
		assert_int_equal(mf_shard_writer_wrote(w, n), 0);
		off += n;
	}
}

/* With a release function, the chunks shown stay as they were until
 * released, in order, every one by the end of a commit, a seal or an
 * abort, inline (codec none, one buffer otherwise) and with a pool. */
static void test_tap_release(void **state)
{
	struct tu_store *f = *state;
	size_t len = 7 * CS + 100;
	uint8_t *src = malloc(len);
	assert_non_null(src);
	tu_fill(src, len, 77, true);
	const struct mf_codec_cfg cfgs[] = {{MF_CODEC_NONE, 0, CS, 1, false},
					    {MF_CODEC_ZSTD, 1, CS, 3, false}};
	uint32_t shard = 0;
	for (int c = 0; c < 2; c++) {
		for (int end = 0; end < 3; end++) { /* commit, seal, abort */
			struct mf_shard_writer *w;
			assert_int_equal(mf_shard_writer_open(f->st, TU_FP,
							      TU_RUN, shard++,
							      &cfgs[c], &w),
					 0);
			struct lent *l = calloc(1, sizeof(*l));
			assert_non_null(l);
			assert_int_equal(
			    mf_shard_writer_set_release(w, lend_release),
			    -EINVAL); /* no tap yet */
			assert_int_equal(
			    mf_shard_writer_set_tap(w, lend_tap, l), 0);
			assert_int_equal(
			    mf_shard_writer_set_release(w, lend_release), 0);
			lend_fill(w, src, len);
			/* each chunk stays readable for a while: at least
			 * the last one is not released yet */
			assert_true(l->released < l->shown);
			if (end == 0) {
				assert_int_equal(
				    mf_shard_writer_commit(w, NULL), 0);
			} else if (end == 1) {
				int fd = -1;
				assert_int_equal(
				    mf_shard_writer_seal(w, NULL, &fd), 0);
				close(fd);
				assert_int_equal(l->released, 8);
				assert_int_equal(
				    mf_shard_writer_commit(w, NULL), 0);
			} else {
				mf_shard_writer_abort(w);
			}
			assert_int_equal(l->shown, end == 2 ? 7 : 8);
			assert_int_equal(l->released, l->shown);
			assert_int_equal(l->bad, 0);
			assert_int_equal(l->stale, 0);
			free(l);
		}
	}
	/* set before the first byte only */
	struct mf_shard_writer *w;
	assert_int_equal(mf_shard_writer_set_release(NULL, lend_release),
			 -EINVAL);
	assert_int_equal(
	    mf_shard_writer_open(f->st, TU_FP, TU_RUN, shard, &cfgs[0], &w), 0);
	struct lent *l = calloc(1, sizeof(*l));
	assert_non_null(l);
	assert_int_equal(mf_shard_writer_set_tap(w, lend_tap, l), 0);
	assert_int_equal(mf_shard_writer_write(w, src, 10), 0);
	assert_int_equal(mf_shard_writer_set_release(w, lend_release), -EBUSY);
	mf_shard_writer_abort(w);
	free(l);
	free(src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_tap_sees_every_chunk_in_order,
					    setup, tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_tap_other_codecs, setup,
					    tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_tap_set_rules, setup,
					    tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_tap_release, setup,
					    tu_store_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
