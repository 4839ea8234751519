/*
 * test_engine_batches.c - one batch of a snapshot of fixed records through
 * the engine (engine_batches.c): its place and size known without
 * computing once the shards say, EAGAIN before; a cold open computing only
 * the shards the order needs (fewer than all); its bytes the records of
 * its runs, read from the shards, the same records mf_engine_batches
 * lists; every record at most once per epoch and only the last partial
 * batch dropped; one sequence for two batch sizes; every rank of a world
 * the same count, rank R's k-th batch global batch R + kW; ENOENT past
 * the end; a bad view EINVAL.
 *
 * Each 4-byte record is its shard and its index (two u16 LE), so a batch's
 * bytes name its records.
 *
 * Then a snapshot of each other framing (lines, one shard in three ending
 * without '\n'; tfrecord; tar; index, ends written to fd 3): every batch
 * of an epoch, shuffled and seed-none, read through mf_engine_batch_open
 * is the framing's concatenation of the records the listing places there
 * (B '\n'-terminated lines; a tar of whole members and two end blocks),
 * find's size is the bytes read (EAGAIN while cold), and the record ends
 * are each record's.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_engine.h"
#include "mf_testlib.h"

#define SHARDS 20

struct fx {
	char dir[64];
	struct mf_engine *e;
	char fp[65];
	uint64_t total; /* records of the epoch */
	unsigned counts[SHARDS];
};

static int count_calls(const struct fx *fx)
{
	char path[128], line[64];
	snprintf(path, sizeof(path), "%s/calls", fx->dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	return n;
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-ebatch-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	char path[192], text[512];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	for (unsigned s = 0; s < SHARDS; s++) {
		fx->counts[s] = (s * 7 % 23 + 1) * 5;
		fx->total += fx->counts[s];
		snprintf(path, sizeof(path), "%s/in/f%02u", fx->dir, s);
		FILE *f = fopen(path, "w");
		if (!f)
			return -1;
		for (unsigned r = 0; r < fx->counts[s]; r++) {
			unsigned char rec[4] = {s & 255, s >> 8, r & 255,
						r >> 8};
			fwrite(rec, 1, 4, f);
		}
		fclose(f);
	}
	snprintf(path, sizeof(path), "%s/spec.yaml", fx->dir);
	snprintf(text, sizeof(text),
		 "name: b\ninputs: in/f*\nstages:\n"
		 "  - exec: [/bin/sh, -c, 'echo $MATFS_SHARD >> calls; "
		 "exec cat']\nrecords: 4\nshuffle_window: 48\n");
	tl_write_file(path, text);
	char store[128];
	snprintf(store, sizeof(store), "%s/store", fx->dir);
	struct mf_engine_opts o = {.store_dir = store};
	char *err = NULL;
	int rc = mf_engine_open(&o, &fx->e, &err);
	if (rc == 0)
		rc = mf_engine_register(fx->e, path, fx->fp, &err);
	if (rc) {
		fprintf(stderr, "engine: %s\n", err ? err : strerror(-rc));
		free(err);
		return -1;
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	mf_engine_close(fx->e);
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

static struct mf_engine_batch_view view(uint64_t b, uint64_t w, uint64_t r)
{
	return (struct mf_engine_batch_view){.shuffled = true,
					     .seed = 7,
					     .epoch = 0,
					     .batch = b,
					     .world = w,
					     .rank = r};
}

/* Reads the view's k-th batch whole (in pieces of 5 bytes, crossing
 * runs) into recs (its records as shard << 16 | index): 0 or the error. */
static int read_batch(struct fx *fx, const struct mf_engine_batch_view *v,
		      uint64_t k, uint32_t *recs)
{
	struct mf_engine_batch *b;
	char *err = NULL;
	int rc = mf_engine_batch_open(fx->e, fx->fp, v, k, &b, &err);
	free(err);
	if (rc)
		return rc;
	uint64_t size = mf_engine_batch_size(b);
	assert_int_equal(size, v->batch * 4);
	unsigned char *buf = malloc(size + 1);
	uint64_t at = 0;
	while (at < size) {
		ssize_t n = mf_engine_batch_pread(b, buf + at, 5, at);
		assert_true(n > 0);
		at += (uint64_t)n;
	}
	assert_int_equal(mf_engine_batch_pread(b, buf, 5, size), 0);
	mf_engine_batch_close(b);
	for (uint64_t i = 0; i < v->batch; i++) {
		const unsigned char *p = buf + 4 * i;
		unsigned s = p[0] | p[1] << 8, r = p[2] | p[3] << 8;
		assert_true(s < SHARDS);
		assert_true(r < fx->counts[s]);
		recs[i] = (uint32_t)(s << 16 | r);
	}
	free(buf);
	return 0;
}

/* what mf_engine_batches lists for each batch, flattened */
struct listed {
	uint32_t *recs;
	size_t n;
};
static int list_fn(void *arg, uint64_t k, uint64_t g,
		   const struct mf_engine_batch_run *runs, size_t n, bool first,
		   bool last)
{
	struct listed *l = arg;
	for (size_t i = 0; i < n; i++)
		for (uint64_t j = 0; j < runs[i].count; j++)
			l->recs[l->n++] = (uint32_t)(runs[i].shard << 16 |
						     (runs[i].record + j));
	return 0;
}

static void test_cold_then_warm(void **state)
{
	struct fx *fx = *state;
	struct mf_engine_batch_view v3 = view(3, 1, 0);
	struct mf_engine_batch_place pl;
	uint64_t count;
	bool complete;
	char *err = NULL;

	/* cold: nothing is known, and asking computes nothing */
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v3, 0, &pl, &err),
			 -EAGAIN);
	assert_int_equal(
	    mf_engine_batch_count(fx->e, fx->fp, &v3, &count, &complete, &err),
	    0);
	assert_int_equal(count, 0);
	assert_false(complete);
	assert_int_equal(count_calls(fx), 0);

	/* a cold open of batch 0 computes some shards, not all */
	uint32_t first[3];
	assert_int_equal(read_batch(fx, &v3, 0, first), 0);
	int calls = count_calls(fx);
	assert_true(calls > 0 && calls < SHARDS);
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v3, 0, &pl, &err),
			 0);
	assert_int_equal(pl.global, 0);
	assert_int_equal(pl.size, 12);
	assert_int_equal(pl.order, 1);
	assert_int_equal(
	    mf_engine_batch_count(fx->e, fx->fp, &v3, &count, &complete, &err),
	    0);
	assert_true(count >= 1 && count < fx->total / 3);
	assert_int_equal(count_calls(fx), calls);

	/* every shard materialized: the whole epoch */
	for (uint32_t s = 0; s < SHARDS; s++) {
		struct mf_shard_reader *r;
		assert_int_equal(
		    mf_engine_open_shard(fx->e, fx->fp, s, &r, &err), 0);
		mf_engine_reader_close(r);
	}
	assert_int_equal(count_calls(fx), SHARDS);
	assert_int_equal(
	    mf_engine_batch_count(fx->e, fx->fp, &v3, &count, &complete, &err),
	    0);
	assert_true(complete);
	assert_int_equal(count, fx->total / 3);

	/* each batch's bytes are the records the listing names; every record
	 * once at most, the last partial batch alone dropped */
	uint32_t *seq = calloc(fx->total, sizeof(*seq));
	struct listed l = {calloc(fx->total, sizeof(uint32_t)), 0};
	struct mf_engine_batches_info info;
	assert_int_equal(
	    mf_engine_batches(fx->e, fx->fp, &v3, list_fn, &l, &info, &err), 0);
	assert_int_equal(l.n, count * 3);
	for (uint64_t k = 0; k < count; k++)
		assert_int_equal(read_batch(fx, &v3, k, seq + 3 * k), 0);
	assert_memory_equal(seq, l.recs, count * 3 * sizeof(uint32_t));
	assert_memory_equal(seq, first, sizeof(first));
	unsigned char *seen = calloc((size_t)SHARDS << 16, 1);
	for (uint64_t i = 0; i < count * 3; i++)
		assert_int_equal(seen[seq[i]]++, 0);
	free(seen);
	uint32_t none[5];
	assert_int_equal(read_batch(fx, &v3, count, none), -ENOENT);
	assert_int_equal(
	    mf_engine_batch_find(fx->e, fx->fp, &v3, count, &pl, &err),
	    -ENOENT);

	/* batches of 5 slice the same sequence */
	struct mf_engine_batch_view v5 = view(5, 1, 0);
	for (uint64_t k = 0; k < 4; k++) {
		assert_int_equal(read_batch(fx, &v5, k, none), 0);
		assert_memory_equal(none, seq + 5 * k, sizeof(none));
	}

	/* ranks: the same count each, rank R's k-th batch global R + 3k */
	uint64_t rc0 = 0;
	for (uint64_t r = 0; r < 3; r++) {
		struct mf_engine_batch_view vr = view(3, 3, r);
		uint64_t c;
		assert_int_equal(mf_engine_batch_count(fx->e, fx->fp, &vr, &c,
						       &complete, &err),
				 0);
		if (r == 0)
			rc0 = c;
		assert_int_equal(c, rc0);
		assert_int_equal(c, count / 3);
		for (uint64_t k = 0; k < c; k += 7) {
			uint32_t got[3];
			assert_int_equal(read_batch(fx, &vr, k, got), 0);
			assert_memory_equal(got, seq + 3 * (r + 3 * k),
					    sizeof(got));
		}
		assert_int_equal(
		    mf_engine_batch_find(fx->e, fx->fp, &vr, c, &pl, &err),
		    -ENOENT);
	}
	free(l.recs);
	free(seq);

	/* bad views */
	struct mf_engine_batch_view bad = view(3, 2, 2);
	assert_int_equal(
	    mf_engine_batch_find(fx->e, fx->fp, &bad, 0, &pl, &err), -EINVAL);
	free(err);
	err = NULL;
	bad = view(0, 1, 0);
	assert_int_equal(
	    mf_engine_batch_count(fx->e, fx->fp, &bad, &count, &complete, &err),
	    -EINVAL);
	free(err);
}

/* ---- every framing: a snapshot of each, its batches' bytes ---- */

#define FSHARDS 10
#define FMAXREC 16

/* a snapshot of one framing, with each record's bytes as a batch file
 * holds it */
struct ffx {
	char dir[64];
	struct mf_engine *e;
	char fp[65];
	enum mf_framing framing;
	unsigned counts[FSHARDS];
	unsigned char *rec[FSHARDS][FMAXREC];
	size_t len[FSHARDS][FMAXREC];
	uint64_t total;
};

static uint32_t crc32c(const unsigned char *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

static uint32_t masked(uint32_t c)
{
	return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le(unsigned char *p, uint64_t x, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(x >> (8 * i));
}

/* a ustar header of a regular file */
static void tar_header(unsigned char *h, const char *name, size_t size)
{
	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011o", (unsigned)size);
	snprintf((char *)h + 136, 12, "%011o", 0u);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

static bool tar_header_ok(const unsigned char *h, size_t *size)
{
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += (i >= 148 && i < 156) ? ' ' : h[i];
	char f[13] = {0};
	memcpy(f, h + 148, 8);
	if (strtoul(f, NULL, 8) != sum || memcmp(h + 257, "ustar", 5) != 0)
		return false;
	memcpy(f, h + 124, 12);
	*size = strtoul(f, NULL, 8);
	return true;
}

/* Record r of shard s as the shard holds it (*len bytes, caller frees),
 * and *in_batch as a batch holds it when it differs (a lines shard's
 * last line without '\n', for s % 3 == 0). */
static unsigned char *make_record(enum mf_framing fr, unsigned s, unsigned r,
				  bool last, size_t *len)
{
	char pay[64];
	int n =
	    snprintf(pay, sizeof(pay), "%u:%u%.*s", s, r, (int)(r % 4), "xyzw");
	unsigned char *b = calloc(1, 2048);
	switch (fr) {
	case MF_FRAMING_LINES:
		memcpy(b, pay, (size_t)n);
		b[n] = '\n';
		*len = (size_t)n + !(last && s % 3 == 0);
		break;
	case MF_FRAMING_TFRECORD:
		put_le(b, (uint64_t)n, 8);
		put_le(b + 8, masked(crc32c(b, 8)), 4);
		memcpy(b + 12, pay, (size_t)n);
		put_le(b + 12 + n, masked(crc32c((unsigned char *)pay, n)), 4);
		*len = 16 + (size_t)n;
		break;
	case MF_FRAMING_TAR: {
		char name[64];
		snprintf(name, sizeof(name), "s%u_r%u.txt", s, r);
		tar_header(b, name, (size_t)n);
		memcpy(b + 512, pay, (size_t)n);
		*len = 1024;
		break;
	}
	default:
		memcpy(b, pay, (size_t)n);
		*len = (size_t)n;
	}
	return b;
}

static const char *framing_name(enum mf_framing fr)
{
	return fr == MF_FRAMING_LINES	? "lines"
	    : fr == MF_FRAMING_TFRECORD ? "tfrecord"
	    : fr == MF_FRAMING_TAR	? "tar"
					: "index";
}

static int fsetup(void **state, enum mf_framing framing)
{
	struct ffx *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	fx->framing = framing;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-efram-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	char path[192], text[512];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	for (unsigned s = 0; s < FSHARDS; s++) {
		fx->counts[s] = s * 5 % 7 + 3;
		fx->total += fx->counts[s];
		snprintf(path, sizeof(path), "%s/in/f%02u.dat", fx->dir, s);
		FILE *f = fopen(path, "w");
		snprintf(path, sizeof(path), "%s/in/f%02u.end", fx->dir, s);
		FILE *fe = fopen(path, "w");
		if (!f || !fe)
			return -1;
		uint64_t end = 0;
		for (unsigned r = 0; r < fx->counts[s]; r++) {
			size_t n;
			unsigned char *b = make_record(
			    framing, s, r, r + 1 == fx->counts[s], &n);
			fwrite(b, 1, n, f);
			end += n;
			unsigned char le[8];
			put_le(le, end, 8);
			fwrite(le, 1, 8, fe);
			if (framing == MF_FRAMING_LINES && s % 3 == 0 &&
			    r + 1 == fx->counts[s])
				n++; /* the batch's "\n" */
			fx->rec[s][r] = b;
			fx->len[s][r] = n;
		}
		if (framing == MF_FRAMING_TAR) {
			static const unsigned char z[1024];
			fwrite(z, 1, sizeof(z), f);
		}
		fclose(f);
		fclose(fe);
	}
	snprintf(path, sizeof(path), "%s/spec.yaml", fx->dir);
	snprintf(text, sizeof(text),
		 "name: f\ninputs: in/*.dat\nstages:\n"
		 "  - exec: [/bin/sh, -c, '%sexec cat']\n"
		 "records: %s\nshuffle_window: 64\n",
		 framing == MF_FRAMING_INDEX
		     ? "cat \"${MATFS_INPUTS%.dat}.end\" >&3; "
		     : "",
		 framing_name(framing));
	tl_write_file(path, text);
	char store[128];
	snprintf(store, sizeof(store), "%s/store", fx->dir);
	struct mf_engine_opts o = {.store_dir = store};
	char *err = NULL;
	int rc = mf_engine_open(&o, &fx->e, &err);
	if (rc == 0)
		rc = mf_engine_register(fx->e, path, fx->fp, &err);
	if (rc) {
		fprintf(stderr, "engine: %s\n", err ? err : strerror(-rc));
		free(err);
		return -1;
	}
	*state = fx;
	return 0;
}

static int setup_lines(void **state)
{
	return fsetup(state, MF_FRAMING_LINES);
}
static int setup_tfrecord(void **state)
{
	return fsetup(state, MF_FRAMING_TFRECORD);
}
static int setup_tar(void **state)
{
	return fsetup(state, MF_FRAMING_TAR);
}
static int setup_index(void **state)
{
	return fsetup(state, MF_FRAMING_INDEX);
}

static int fteardown(void **state)
{
	struct ffx *fx = *state;
	mf_engine_close(fx->e);
	for (unsigned s = 0; s < FSHARDS; s++)
		for (unsigned r = 0; r < fx->counts[s]; r++)
			free(fx->rec[s][r]);
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

/* readers for mf_engine_batch_record_ends, opened by the test */
struct supply {
	struct mf_engine *e;
	const char *fp;
	struct mf_shard_reader *r[FSHARDS];
};
static int supply_fn(void *arg, uint32_t shard, struct mf_shard_reader **r,
		     char **err)
{
	struct supply *sp = arg;
	assert_true(shard < FSHARDS);
	if (!sp->r[shard]) {
		int rc = mf_engine_open_shard(sp->e, sp->fp, shard,
					      &sp->r[shard], err);
		if (rc)
			return rc;
	}
	*r = sp->r[shard];
	return 0;
}

/* Checks that a tar batch is whole members and its two end blocks. */
static void check_tar(const unsigned char *b, size_t n, uint64_t members)
{
	size_t at = 0, size = 0;
	for (uint64_t i = 0; i < members; i++) {
		assert_true(at + 512 <= n);
		assert_true(tar_header_ok(b + at, &size));
		at += 512 + (size + 511) / 512 * 512;
	}
	assert_int_equal(n - at, 1024);
	for (size_t i = at; i < n; i++)
		assert_int_equal(b[i], 0);
}

/* Every batch of v's epoch, read whole in pieces of 7 bytes: the
 * framing's concatenation of the records the listing places there, its
 * size find's, its record ends each record's; returns the lines that got
 * a "\n" the shard lacked. */
static unsigned check_epoch(struct ffx *fx,
			    const struct mf_engine_batch_view *v)
{
	struct listed l = {calloc(fx->total, sizeof(uint32_t)), 0};
	struct mf_engine_batches_info info;
	char *err = NULL;
	assert_int_equal(
	    mf_engine_batches(fx->e, fx->fp, v, list_fn, &l, &info, &err), 0);
	assert_true(info.complete);
	assert_int_equal(l.n, info.batches * v->batch);
	assert_true(info.batches > 0);
	unsigned added = 0;
	for (uint64_t k = 0; k < info.batches; k++) {
		unsigned char *want = malloc(v->batch * 2048 + 1024);
		uint64_t *wends = calloc(v->batch, sizeof(*wends));
		size_t wn = 0;
		for (uint64_t i = 0; i < v->batch; i++) {
			uint32_t x = l.recs[k * v->batch + i];
			unsigned s = x >> 16, r = x & 0xffff;
			memcpy(want + wn, fx->rec[s][r], fx->len[s][r]);
			wn += fx->len[s][r];
			wends[i] = wn;
			if (fx->framing == MF_FRAMING_LINES && s % 3 == 0 &&
			    r + 1 == fx->counts[s])
				added++;
		}
		if (fx->framing == MF_FRAMING_TAR) {
			memset(want + wn, 0, 1024);
			wn += 1024;
		}
		struct mf_engine_batch_place pl;
		assert_int_equal(
		    mf_engine_batch_find(fx->e, fx->fp, v, k, &pl, &err), 0);
		assert_int_equal(pl.size, wn);
		struct mf_engine_batch *b;
		assert_int_equal(
		    mf_engine_batch_open(fx->e, fx->fp, v, k, &b, &err), 0);
		assert_int_equal(mf_engine_batch_size(b), wn);
		unsigned char *got = malloc(wn + 7);
		uint64_t at = 0;
		while (at < wn) {
			ssize_t n = mf_engine_batch_pread(b, got + at, 7, at);
			assert_true(n > 0);
			at += (uint64_t)n;
		}
		assert_int_equal(at, wn);
		assert_int_equal(mf_engine_batch_pread(b, got, 7, wn), 0);
		mf_engine_batch_close(b);
		assert_memory_equal(got, want, wn);
		if (fx->framing == MF_FRAMING_TAR)
			check_tar(got, wn, v->batch);
		if (fx->framing == MF_FRAMING_LINES) {
			size_t lines = 0;
			for (size_t i = 0; i < wn; i++)
				lines += got[i] == '\n';
			assert_int_equal(lines, v->batch);
			assert_int_equal(got[wn - 1], '\n');
		}
		struct supply sp = {.e = fx->e, .fp = fx->fp};
		uint64_t *ends;
		size_t ne;
		assert_int_equal(mf_engine_batch_record_ends(fx->e, fx->fp, v,
							     k, supply_fn, &sp,
							     &ends, &ne, &err),
				 0);
		for (unsigned s = 0; s < FSHARDS; s++)
			mf_engine_reader_close(sp.r[s]);
		assert_int_equal(ne, v->batch);
		assert_memory_equal(ends, wends, ne * sizeof(*ends));
		free(ends);
		free(got);
		free(wends);
		free(want);
	}
	free(l.recs);
	free(err);
	return added;
}

static void test_framings(void **state)
{
	struct ffx *fx = *state;
	struct mf_engine_batch_view v = {
	    .shuffled = true, .seed = 3, .batch = 4, .world = 1};
	struct mf_engine_batch_place pl;
	char *err = NULL;
	/* cold: find computes nothing */
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v, 0, &pl, &err),
			 -EAGAIN);
	/* a cold open places and plans batch 0; find then has its size */
	struct mf_engine_batch *b;
	assert_int_equal(mf_engine_batch_open(fx->e, fx->fp, &v, 0, &b, &err),
			 0);
	uint64_t size0 = mf_engine_batch_size(b);
	mf_engine_batch_close(b);
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v, 0, &pl, &err),
			 0);
	assert_int_equal(pl.size, size0);
	for (uint32_t s = 0; s < FSHARDS; s++) {
		struct mf_shard_reader *r;
		assert_int_equal(
		    mf_engine_open_shard(fx->e, fx->fp, s, &r, &err), 0);
		mf_engine_reader_close(r);
	}
	unsigned added = check_epoch(fx, &v);
	/* seed-none: runs across whole shards, each shard's last line */
	struct mf_engine_batch_view vn = {.batch = 5, .world = 1};
	added += check_epoch(fx, &vn);
	if (fx->framing == MF_FRAMING_LINES)
		assert_true(added > 0);

	/* a shard of batch 0 expired: its size is not known, and asking
	 * computes nothing; once computed again, it is */
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v, 0, &pl, &err),
			 0);
	uint64_t size = pl.size;
	struct listed l = {calloc(fx->total, sizeof(uint32_t)), 0};
	struct mf_engine_batches_info info;
	assert_int_equal(
	    mf_engine_batches(fx->e, fx->fp, &v, list_fn, &l, &info, &err), 0);
	uint32_t shard = l.recs[0] >> 16;
	free(l.recs);
	assert_int_equal(mf_engine_expire_shard(fx->e, fx->fp, shard), 0);
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v, 0, &pl, &err),
			 -EAGAIN);
	struct mf_engine_shard rec;
	assert_int_equal(mf_engine_shard_rec(fx->e, fx->fp, shard, &rec), 0);
	assert_int_not_equal(rec.state, MF_ENGINE_MATERIALIZED);
	mf_engine_shard_release(&rec);
	struct mf_shard_reader *r;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, shard, &r, &err),
			 0);
	mf_engine_reader_close(r);
	assert_int_equal(mf_engine_batch_find(fx->e, fx->fp, &v, 0, &pl, &err),
			 0);
	assert_int_equal(pl.size, size);
	free(err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_cold_then_warm, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_framings, setup_lines,
					    fteardown),
	    cmocka_unit_test_setup_teardown(test_framings, setup_tfrecord,
					    fteardown),
	    cmocka_unit_test_setup_teardown(test_framings, setup_tar,
					    fteardown),
	    cmocka_unit_test_setup_teardown(test_framings, setup_index,
					    fteardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
