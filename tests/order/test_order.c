/*
 * test_order.c - the batch order (order/): every record once per epoch,
 * the same sequence whatever the batch and world sizes, another one per
 * epoch, seed and fingerprint and the same one again for the same three,
 * batches drawn from many shards, equal counts on every rank in whole
 * rounds, a resume on another world size that sees each record once, the
 * known prefix from the counts of a prefix of the shard order (any order
 * of counts gives the same places), windows within shuffle_window, seed-
 * none in shard order, the limits (no overflow up to 2^63 - 1), a count
 * kept when memory ran out, and a window's order uncorrelated with its
 * records' indexes.
 *
 * Not for: the test vectors of docs/format.md (order_vectors --check).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_order.h"

/* realloc, wrapped (-Wl,--wrap=realloc): fails once when fail_realloc
 * is set, so the order's growth of its groups can fail. */
void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);
static bool fail_realloc;
void *__wrap_realloc(void *p, size_t n)
{
	if (fail_realloc) {
		fail_realloc = false;
		return NULL;
	}
	return __real_realloc(p, n);
}

/* A small deterministic generator for the tests' own choices. */
static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(uint64_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return n ? rng_state % n : rng_state;
}

struct cfg {
	uint64_t nshards, window, seed, epoch, size; /* size: record bytes */
	bool shuffled;
	uint64_t counts[64];
	uint8_t fp;
};

static struct mf_order *make(const struct cfg *c, bool set_all)
{
	struct mf_order_params p = {.shuffled = c->shuffled,
				    .seed = c->seed,
				    .epoch = c->epoch,
				    .window = c->window,
				    .nshards = c->nshards};
	memset(p.fingerprint, c->fp, sizeof(p.fingerprint));
	struct mf_order *o = NULL;
	assert_int_equal(mf_order_new(&p, &o), 0);
	for (uint64_t s = 0; set_all && s < c->nshards; s++)
		assert_int_equal(mf_order_set_shard(o, s, c->counts[s],
						    c->counts[s] * c->size),
				 0);
	return o;
}

static uint64_t total_of(const struct cfg *c)
{
	uint64_t t = 0;
	for (uint64_t s = 0; s < c->nshards; s++)
		t += c->counts[s];
	return t;
}

/* The whole sequence as shard * 1000000 + record, through runs of at
 * most cap at a time. */
static uint64_t *sequence(const struct mf_order *o, uint64_t n, size_t cap)
{
	uint64_t *seq = calloc(n ? n : 1, sizeof(*seq));
	struct mf_order_run *runs = calloc(cap, sizeof(*runs));
	assert_non_null(seq);
	assert_non_null(runs);
	uint64_t at = 0;
	while (at < n) {
		size_t nr = 0;
		uint64_t cov = 0;
		assert_int_equal(
		    mf_order_runs(o, at, n - at, runs, cap, &nr, &cov), 0);
		assert_true(cov > 0);
		uint64_t k = at;
		for (size_t r = 0; r < nr; r++)
			for (uint64_t j = 0; j < runs[r].count; j++)
				seq[k++] = runs[r].shard * 1000000 +
				    runs[r].record + j;
		assert_int_equal(k, at + cov);
		at += cov;
	}
	free(runs);
	return seq;
}

static void random_cfg(struct cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->nshards = 1 + rnd(40);
	c->size = 1 + rnd(16);
	c->shuffled = true;
	c->seed = rnd(0);
	c->epoch = rnd(4);
	c->fp = (uint8_t)rnd(256);
	for (uint64_t s = 0; s < c->nshards; s++)
		c->counts[s] = rnd(5) == 0 ? 0 : rnd(300);
	c->window = 1 + rnd(2000) * c->size;
}

static void test_every_record_once(void **state)
{
	(void)state;
	for (int round = 0; round < 200; round++) {
		struct cfg c;
		random_cfg(&c);
		c.shuffled = round % 10 != 0;
		struct mf_order *o = make(&c, true);
		uint64_t n = total_of(&c);
		assert_true(mf_order_complete(o));
		assert_int_equal(mf_order_known(o), n);
		uint64_t *seq = sequence(o, n, 1 + rnd(8));
		uint8_t *seen = calloc(64 * 1000000 / 8 + 1, 1);
		assert_non_null(seen);
		for (uint64_t i = 0; i < n; i++) {
			uint64_t s = seq[i] / 1000000, r = seq[i] % 1000000;
			assert_true(s < c.nshards);
			assert_true(r < c.counts[s]);
			assert_false(seen[seq[i] / 8] & (1u << (seq[i] % 8)));
			seen[seq[i] / 8] |= (uint8_t)(1u << (seq[i] % 8));
			uint64_t ls, lr;
			assert_int_equal(mf_order_locate(o, i, &ls, &lr), 0);
			assert_int_equal(ls * 1000000 + lr, seq[i]);
		}
		uint64_t ls, lr;
		assert_int_equal(mf_order_locate(o, n, &ls, &lr), -ERANGE);
		free(seen);
		free(seq);
		mf_order_free(o);
	}
}

/* Every global batch of every batch size is a slice of the one sequence,
 * and the ranks of a world hold the global batches G + R + kW, whole
 * rounds only, the same count each. */
static void test_views_slice_one_sequence(void **state)
{
	(void)state;
	struct cfg c;
	random_cfg(&c);
	c.nshards = 23;
	for (uint64_t s = 0; s < c.nshards; s++)
		c.counts[s] = 50 + rnd(200);
	c.window = 300 * c.size;
	struct mf_order *o = make(&c, true);
	uint64_t n = total_of(&c);
	uint64_t *seq = sequence(o, n, 1000);
	const uint64_t bs[] = {1, 3, 7, 64, 1000};
	const uint64_t ws[] = {1, 2, 3, 5, 8};
	for (size_t bi = 0; bi < 5; bi++) {
		for (size_t wi = 0; wi < 5; wi++) {
			for (uint64_t from = 0; from < 20; from += 7) {
				uint64_t nb = n / bs[bi], cnt0 = 0;
				uint8_t *hit = calloc(nb + 1, 1);
				for (uint64_t r = 0; r < ws[wi]; r++) {
					struct mf_order_view v = {
					    bs[bi], ws[wi], r, from};
					uint64_t cnt, g, k;
					bool complete;
					assert_int_equal(
					    mf_order_view_count(o, &v, &cnt,
								&complete),
					    0);
					assert_true(complete);
					if (r == 0)
						cnt0 = cnt;
					assert_int_equal(cnt, cnt0);
					for (k = 0; k < cnt; k++) {
						assert_int_equal(
						    mf_order_view_batch(o, &v,
									k, &g),
						    0);
						assert_int_equal(
						    g, from + r + k * ws[wi]);
						assert_true(g < nb);
						assert_false(hit[g]);
						hit[g] = 1;
						uint64_t sh, rec;
						uint64_t i =
						    g * bs[bi] + rnd(bs[bi]);
						assert_int_equal(
						    mf_order_locate(o, i, &sh,
								    &rec),
						    0);
						assert_int_equal(
						    sh * 1000000 + rec, seq[i]);
					}
					assert_int_equal(
					    mf_order_view_batch(o, &v, k, &g),
					    -ENOENT);
				}
				/* The batches of the rounds, each once:
				 * [from, from + cnt * W). */
				for (uint64_t g = 0; g < nb; g++)
					assert_int_equal(
					    hit[g],
					    g >= from &&
						g < from + cnt0 * ws[wi]);
				assert_true(nb < from ||
					    nb - from - cnt0 * ws[wi] < ws[wi]);
				free(hit);
			}
		}
	}
	free(seq);
	mf_order_free(o);
}

static bool same_sequence(struct cfg *a, struct cfg *b)
{
	struct mf_order *oa = make(a, true), *ob = make(b, true);
	uint64_t n = total_of(a);
	uint64_t *sa = sequence(oa, n, 64), *sb = sequence(ob, n, 64);
	bool same = memcmp(sa, sb, n * sizeof(*sa)) == 0;
	free(sa);
	free(sb);
	mf_order_free(oa);
	mf_order_free(ob);
	return same;
}

static void test_epoch_seed_fingerprint(void **state)
{
	(void)state;
	struct cfg a;
	random_cfg(&a);
	a.nshards = 20;
	for (uint64_t s = 0; s < a.nshards; s++)
		a.counts[s] = 100;
	a.window = 500 * a.size;
	struct cfg b = a;
	assert_true(same_sequence(&a, &b));
	b.epoch = a.epoch + 1;
	assert_false(same_sequence(&a, &b));
	b = a;
	b.seed = a.seed ^ 1;
	assert_false(same_sequence(&a, &b));
	b = a;
	b.fp = (uint8_t)(a.fp + 1);
	assert_false(same_sequence(&a, &b));
	/* seed-none: one order whatever the epoch. */
	a.shuffled = b.shuffled = false;
	b = a;
	b.epoch = a.epoch + 5;
	b.seed = 99;
	assert_true(same_sequence(&a, &b));
}

/* Big shards, a window smaller than one: each batch still draws from many
 * shards (the group's), and the shard order changes with the epoch. */
static void test_batches_mix_shards(void **state)
{
	(void)state;
	struct cfg c;
	random_cfg(&c);
	c.nshards = 16;
	c.size = 1;
	for (uint64_t s = 0; s < c.nshards; s++)
		c.counts[s] = 4000;
	c.window = 1000;
	struct mf_order *o = make(&c, true);
	uint64_t n = total_of(&c);
	uint64_t *seq = sequence(o, n, 256);
	for (uint64_t g = 0; g < n / 32; g++) {
		int shards[16] = {0}, distinct = 0;
		for (uint64_t j = 0; j < 32; j++)
			if (!shards[seq[g * 32 + j] / 1000000]++)
				distinct++;
		assert_true(distinct >= 4);
	}
	free(seq);
	mf_order_free(o);
}

/* A job on W ranks stops after G global batches (whole rounds); resumed
 * from G on W' ranks, the two see each record of the epoch once at most,
 * and miss only the last partial round. */
static void test_resume_other_world(void **state)
{
	(void)state;
	struct cfg c;
	random_cfg(&c);
	c.nshards = 30;
	for (uint64_t s = 0; s < c.nshards; s++)
		c.counts[s] = rnd(400);
	c.window = 700 * c.size;
	struct mf_order *o = make(&c, true);
	uint64_t n = total_of(&c), B = 16;
	uint8_t *seen = calloc(64 * 1000, 1);
	assert_non_null(seen);
	const uint64_t worlds[][2] = {{4, 3}, {3, 4}, {1, 7}, {8, 1}};
	for (size_t w = 0; w < 4; w++) {
		memset(seen, 0, 64 * 1000);
		uint64_t W = worlds[w][0], W2 = worlds[w][1];
		uint64_t G = 10 * W, seen_n = 0;
		for (int part = 0; part < 2; part++) {
			uint64_t world = part ? W2 : W;
			for (uint64_t r = 0; r < world; r++) {
				struct mf_order_view v = {B, world, r,
							  part ? G : 0};
				uint64_t cnt, g;
				bool complete;
				assert_int_equal(
				    mf_order_view_count(o, &v, &cnt, &complete),
				    0);
				if (!part)
					cnt = G / W; /* the job stopped at G */
				for (uint64_t k = 0; k < cnt; k++) {
					assert_int_equal(
					    mf_order_view_batch(o, &v, k, &g),
					    0);
					for (uint64_t j = 0; j < B; j++) {
						uint64_t sh, rec;
						assert_int_equal(
						    mf_order_locate(o,
								    g * B + j,
								    &sh, &rec),
						    0);
						uint64_t id = sh * 1000 + rec;
						assert_false(seen[id]);
						seen[id] = 1;
						seen_n++;
					}
				}
			}
		}
		assert_true(n - seen_n < (W2 + 1) * B);
	}
	free(seen);
	mf_order_free(o);
}

/* Counts learnt in any order: the known prefix is always a prefix of the
 * complete sequence, grows in whole groups, and needs only the shards the
 * order names next. */
static void test_known_prefix(void **state)
{
	(void)state;
	for (int round = 0; round < 50; round++) {
		struct cfg c;
		random_cfg(&c);
		struct mf_order *full = make(&c, true);
		struct mf_order *o = make(&c, false);
		uint64_t n = total_of(&c);
		uint64_t *seq = sequence(full, n, 64);
		uint64_t perm[64], last = 0;
		for (uint64_t s = 0; s < c.nshards; s++)
			perm[s] = s;
		for (uint64_t s = c.nshards; s > 1; s--) {
			uint64_t j = rnd(s), t = perm[s - 1];
			perm[s - 1] = perm[j];
			perm[j] = t;
		}
		bool follow = round % 2; /* set counts as the order asks */
		for (uint64_t s = 0; s < c.nshards; s++) {
			uint64_t shard = perm[s];
			if (follow)
				assert_int_equal(mf_order_next_shard(o, &shard),
						 0);
			assert_int_equal(
			    mf_order_set_shard(o, shard, c.counts[shard],
					       c.counts[shard] * c.size),
			    0);
			/* Again, alike: nothing changes; unlike: refused. */
			assert_int_equal(
			    mf_order_set_shard(o, shard, c.counts[shard],
					       c.counts[shard] * c.size),
			    0);
			assert_int_equal(
			    mf_order_set_shard(o, shard, c.counts[shard] + 1,
					       c.counts[shard] * c.size),
			    -EINVAL);
			uint64_t known = mf_order_known(o);
			assert_true(known >= last);
			last = known;
			uint64_t sh, rec;
			for (uint64_t i = 0; i < known; i++) {
				assert_int_equal(
				    mf_order_locate(o, i, &sh, &rec), 0);
				assert_int_equal(sh * 1000000 + rec, seq[i]);
			}
			if (!mf_order_complete(o)) {
				assert_int_equal(
				    mf_order_locate(o, known, &sh, &rec),
				    -EAGAIN);
				struct mf_order_view v = {1, 1, 0, known};
				uint64_t g;
				assert_int_equal(
				    mf_order_view_batch(o, &v, 0, &g), -EAGAIN);
			}
		}
		assert_true(mf_order_complete(o));
		assert_int_equal(mf_order_known(o), n);
		uint64_t shard;
		assert_int_equal(mf_order_next_shard(o, &shard), -ENOENT);
		free(seq);
		mf_order_free(o);
		mf_order_free(full);
	}
}

/* A cold epoch: the first batch is known once the first group's shards
 * are, at most 2 x MF_ORDER_GROUP - 1 of 100. */
static void test_cold_first_batch(void **state)
{
	(void)state;
	struct cfg c;
	random_cfg(&c);
	c.nshards = 64;
	c.size = 4;
	for (uint64_t s = 0; s < c.nshards; s++)
		c.counts[s] = 1000;
	c.window = 4000; /* one shard's bytes */
	struct mf_order *o = make(&c, false);
	uint64_t needed = 0, shard, g;
	struct mf_order_view v = {32, 1, 0, 0};
	while (mf_order_view_batch(o, &v, 0, &g) == -EAGAIN) {
		assert_int_equal(mf_order_next_shard(o, &shard), 0);
		assert_int_equal(mf_order_set_shard(o, shard, 1000, 4000), 0);
		needed++;
	}
	assert_int_equal(needed, MF_ORDER_GROUP);
	mf_order_free(o);
}

/* Each window's records are within shuffle_window bytes, plus at most one
 * record per shard of its group (the parts are cut at whole records), and
 * come from the shards of its group only. */
static void test_windows_within_bound(void **state)
{
	(void)state;
	for (int round = 0; round < 100; round++) {
		struct cfg c;
		random_cfg(&c);
		struct mf_order *o = make(&c, true);
		uint64_t n = total_of(&c), i = 0;
		while (i < n) {
			struct mf_order_window w;
			assert_int_equal(mf_order_window_at(o, i, &w), 0);
			assert_int_equal(w.first, i);
			assert_true(w.count > 0);
			assert_true(w.count * c.size <=
				    c.window + w.shards * c.size);
			i += w.count;
		}
		mf_order_free(o);
	}
}

/* A window's parts are exactly its records: each of its places is in the
 * part of its shard, and the parts hold as many records as the window. */
static void test_window_parts(void **state)
{
	(void)state;
	for (int round = 0; round < 100; round++) {
		struct cfg c;
		random_cfg(&c);
		c.shuffled = round % 5 != 0;
		struct mf_order *o = make(&c, true);
		uint64_t n = total_of(&c), i = 0;
		while (i < n) {
			struct mf_order_window w;
			struct mf_order_run parts[64], one;
			size_t np, got;
			uint64_t cov, sum = 0;
			assert_int_equal(mf_order_window_at(o, i, &w), 0);
			if (w.shards > 1)
				assert_int_equal(
				    mf_order_window_parts(o, i, parts,
							  w.shards - 1, &np),
				    -ENOSPC);
			assert_int_equal(
			    mf_order_window_parts(o, i, parts, 64, &np), 0);
			assert_true(np <= w.shards);
			for (size_t k = 0; k < np; k++) {
				assert_true(parts[k].count > 0);
				sum += parts[k].count;
			}
			assert_int_equal(sum, w.count);
			for (uint64_t q = 0; q < w.count; q++) {
				assert_int_equal(mf_order_runs(o, i + q, 1,
							       &one, 1, &got,
							       &cov),
						 0);
				size_t k = 0;
				while (k < np &&
				       !(parts[k].shard == one.shard &&
					 one.record >= parts[k].record &&
					 one.record <
					     parts[k].record + parts[k].count))
					k++;
				assert_true(k < np);
			}
			i += w.count;
		}
		struct mf_order_run parts[64];
		size_t np;
		assert_int_equal(mf_order_window_parts(o, n, parts, 64, &np),
				 -ERANGE);
		mf_order_free(o);
	}
}

static void test_seed_none_in_shard_order(void **state)
{
	(void)state;
	struct cfg c;
	random_cfg(&c);
	c.shuffled = false;
	c.nshards = 5;
	const uint64_t counts[] = {3, 0, 4, 1, 2};
	memcpy(c.counts, counts, sizeof(counts));
	struct mf_order *o = make(&c, true);
	for (uint64_t p = 0; p < 5; p++)
		assert_int_equal(mf_order_shard_at(o, p), p);
	struct mf_order_run runs[8];
	size_t nr;
	uint64_t cov;
	assert_int_equal(mf_order_runs(o, 1, 8, runs, 8, &nr, &cov), 0);
	assert_int_equal(cov, 8);
	assert_int_equal(nr, 4);
	const struct mf_order_run want[] = {
	    {0, 1, 2}, {2, 0, 4}, {3, 0, 1}, {4, 0, 1}};
	assert_memory_equal(runs, want, sizeof(want));
	assert_int_equal(mf_order_runs(o, 1, 8, runs, 2, &nr, &cov), 0);
	assert_int_equal(nr, 2);
	assert_int_equal(cov, 6);
	assert_int_equal(mf_order_runs(o, 1, 10, runs, 8, &nr, &cov), -ERANGE);
	mf_order_free(o);
}

static void test_limits(void **state)
{
	(void)state;
	const uint64_t M = MF_ORDER_MAX;
	struct mf_order_params p = {.shuffled = true, .window = 1 << 20};
	struct mf_order *o = NULL;
	p.nshards = 0;
	assert_int_equal(mf_order_new(&p, &o), -EINVAL);
	p.nshards = MF_ORDER_MAX_SHARDS + 1ULL;
	assert_int_equal(mf_order_new(&p, &o), -EINVAL);
	p.nshards = 3;
	p.window = 0;
	assert_int_equal(mf_order_new(&p, &o), -EINVAL);
	p.window = M + 1;
	assert_int_equal(mf_order_new(&p, &o), -EINVAL);
	p.window = M;
	p.seed = UINT64_MAX;
	p.epoch = UINT64_MAX;
	assert_int_equal(mf_order_new(&p, &o), 0);
	assert_int_equal(mf_order_set_shard(o, 3, 1, 1), -EINVAL);
	/* Huge shards: 2^61 records each, the epoch just within the limit. */
	assert_int_equal(mf_order_set_shard(o, 0, 1ULL << 61, 1ULL << 61), 0);
	assert_int_equal(mf_order_set_shard(o, 1, 1ULL << 62, 1ULL << 62), 0);
	assert_int_equal(mf_order_set_shard(o, 2, 1ULL << 61, 1ULL << 61),
			 -EOVERFLOW);
	assert_int_equal(mf_order_set_shard(o, 2, (1ULL << 61) - 1, 1), 0);
	assert_int_equal(mf_order_known(o), M);
	/* Resume far into the epoch: located without a replay. */
	uint64_t sh, rec, g;
	struct mf_order_view v = {1024, 8, 7, 1000000};
	assert_int_equal(mf_order_view_batch(o, &v, 0, &g), 0);
	assert_int_equal(g, 1000007);
	assert_int_equal(mf_order_locate(o, g * 1024, &sh, &rec), 0);
	assert_int_equal(mf_order_locate(o, M - 1, &sh, &rec), 0);
	assert_int_equal(mf_order_locate(o, M, &sh, &rec), -ERANGE);
	struct mf_order_run run;
	size_t nr;
	uint64_t cov;
	assert_int_equal(mf_order_runs(o, M - 1, 1, &run, 1, &nr, &cov), 0);
	assert_int_equal(cov, 1);
	assert_int_equal(mf_order_runs(o, M, 1, &run, 1, &nr, &cov), -ERANGE);
	assert_int_equal(mf_order_runs(o, M, M, &run, 1, &nr, &cov), -ERANGE);
	assert_int_equal(mf_order_runs(o, 0, 1, &run, 0, &nr, &cov), -EINVAL);
	/* Views at the limits: no wrap, only ENOENT. */
	const struct mf_order_view far[] = {
	    {M, 1, 0, 0}, {1, M, M - 1, 0}, {1, 1, 0, M}, {M, M, M - 1, M}};
	for (size_t i = 0; i < 4; i++) {
		uint64_t cnt;
		bool complete;
		assert_int_equal(
		    mf_order_view_count(o, &far[i], &cnt, &complete), 0);
		assert_true(cnt <= 1);
		assert_int_equal(mf_order_view_batch(o, &far[i], M, &g),
				 -ENOENT);
	}
	assert_int_equal(mf_order_view_batch(o, &far[0], M + 1, &g), -EINVAL);
	const struct mf_order_view bad[] = {{0, 1, 0, 0}, {M + 1, 1, 0, 0},
					    {1, 0, 0, 0}, {1, M + 1, 0, 0},
					    {1, 2, 2, 0}, {1, 1, 0, M + 1}};
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(mf_order_view_check(&bad[i]), -EINVAL);
	mf_order_free(o);
	mf_order_free(NULL);
}

/* Within one window the order is a real shuffle: the place of a record
 * and its index are uncorrelated (|Pearson r| < 0.05 over 20000 records,
 * where the identity gives 1), and each record leaves its place. */
static void test_window_is_shuffled(void **state)
{
	(void)state;
	struct cfg c;
	random_cfg(&c);
	c.nshards = 1;
	c.size = 1;
	c.counts[0] = 20000;
	c.window = 1 << 20;
	for (uint64_t e = 0; e < 4; e++) {
		c.epoch = e;
		struct mf_order *o = make(&c, true);
		double n = 20000, sx = 0, sy = 0, sxy = 0, sxx = 0, syy = 0;
		uint64_t fixed = 0;
		for (uint64_t i = 0; i < 20000; i++) {
			uint64_t sh, r;
			assert_int_equal(mf_order_locate(o, i, &sh, &r), 0);
			double x = (double)i, y = (double)r;
			sx += x;
			sy += y;
			sxy += x * y;
			sxx += x * x;
			syy += y * y;
			fixed += r == i;
		}
		double cov = sxy / n - (sx / n) * (sy / n);
		double vx = sxx / n - (sx / n) * (sx / n);
		double vy = syy / n - (sy / n) * (sy / n);
		/* r^2 = cov^2 / (vx vy) < 0.05^2 */
		assert_true(cov * cov < 0.0025 * vx * vy);
		assert_true(fixed < 20); /* about 1 expected */
		mf_order_free(o);
	}
}

/* A group that cannot be recorded (no memory): the count is kept, and
 * setting it again extends the known prefix as it would have. */
static void test_no_memory_then_again(void **state)
{
	(void)state;
	struct cfg c;
	random_cfg(&c);
	c.nshards = 4;
	for (uint64_t s = 0; s < 4; s++)
		c.counts[s] = 10 + s;
	struct mf_order *full = make(&c, true);
	struct mf_order *o = make(&c, false);
	for (uint64_t s = 0; s < 3; s++)
		assert_int_equal(
		    mf_order_set_shard(o, s, c.counts[s], c.counts[s] * c.size),
		    0);
	assert_int_equal(mf_order_known(o), 0);
	fail_realloc = true;
	assert_int_equal(mf_order_set_shard(o, 3, 13, 13 * c.size), -ENOMEM);
	assert_int_equal(mf_order_known(o), 0);
	assert_false(mf_order_complete(o));
	assert_int_equal(mf_order_set_shard(o, 3, 13, 13 * c.size), 0);
	assert_true(mf_order_complete(o));
	assert_int_equal(mf_order_known(o), 46);
	for (uint64_t i = 0; i < 46; i++) {
		uint64_t a, b, x, y;
		assert_int_equal(mf_order_locate(o, i, &a, &b), 0);
		assert_int_equal(mf_order_locate(full, i, &x, &y), 0);
		assert_int_equal(a, x);
		assert_int_equal(b, y);
	}
	mf_order_free(o);
	mf_order_free(full);
}

/* The order is a format (docs/format.md, user.matfs.order 1): a faster
 * computation of it must give the same sequence. Two fixed orders, each
 * as a hash of its whole sequence and its first places, taken from the
 * straightforward computation before any was made faster. */
#define GOLDEN_HASH_0 0x2c59c236e602a59bULL
#define GOLDEN_HASH_1 0x457477d565c3fb6fULL
#define GOLDEN_FIRST_0                                                         \
	{                                                                      \
		40, 3000402, 3000401, 3000140                                  \
	}
#define GOLDEN_FIRST_1                                                         \
	{                                                                      \
		4020213, 7439, 1014629, 11293                                  \
	}
static void test_golden_sequences(void **state)
{
	(void)state;
	struct cfg c[2] = {
	    {.nshards = 5,
	     .window = 3000,
	     .seed = 42,
	     .epoch = 3,
	     .size = 4,
	     .shuffled = true,
	     .counts = {1000, 1, 777, 4096, 0},
	     .fp = 0xab},
	    {.nshards = 16,
	     .window = 64 << 20,
	     .seed = 1,
	     .epoch = 0,
	     .size = 256,
	     .shuffled = true,
	     .counts = {65536, 65536, 65536, 65536, 65536, 65536, 65536, 65536,
			65536, 65536, 65536, 65536, 65536, 65536, 65536, 65537,
			0},
	     .fp = 0x5a},
	};
	const uint64_t want_hash[2] = {GOLDEN_HASH_0, GOLDEN_HASH_1};
	const uint64_t want_first[2][4] = {GOLDEN_FIRST_0, GOLDEN_FIRST_1};
	uint64_t got_hash[2], got_first[2][4];
	for (int i = 0; i < 2; i++) {
		struct mf_order *o = make(&c[i], true);
		uint64_t n = total_of(&c[i]);
		uint64_t *seq = sequence(o, n, 1000);
		uint64_t h = 1469598103934665603ULL;
		for (uint64_t k = 0; k < n; k++)
			h = (h ^ seq[k]) * 1099511628211ULL;
		got_hash[i] = h;
		memcpy(got_first[i], seq, sizeof(got_first[i]));
		free(seq);
		mf_order_free(o);
	}
	for (int i = 0; i < 2; i++) {
		assert_int_equal(got_hash[i], want_hash[i]);
		for (int k = 0; k < 4; k++)
			assert_int_equal(got_first[i][k], want_first[i][k]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_record_once),
	    cmocka_unit_test(test_golden_sequences),
	    cmocka_unit_test(test_views_slice_one_sequence),
	    cmocka_unit_test(test_epoch_seed_fingerprint),
	    cmocka_unit_test(test_batches_mix_shards),
	    cmocka_unit_test(test_resume_other_world),
	    cmocka_unit_test(test_known_prefix),
	    cmocka_unit_test(test_cold_first_batch),
	    cmocka_unit_test(test_windows_within_bound),
	    cmocka_unit_test(test_window_parts),
	    cmocka_unit_test(test_seed_none_in_shard_order),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_no_memory_then_again),
	    cmocka_unit_test(test_window_is_shuffled),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
