/*
 * engine_batches.c - a snapshot's batches as the batch order (order/)
 * places them: the order of an epoch fed with the record counts of the
 * materialized shards, in the order's own shard order, as far as they
 * go (a known prefix); the batches of a rank view listed from it; one
 * batch's place and size without computing; the shards a batch's plan
 * has computed to place it (engine_batchplan.c plans it and reads it).
 *
 * Not for: a batch's segments and framing (engine_batchplan.c), paths
 * or inodes (the FUSE batch tree is built on this).
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"
#include "mf_order.h"

_Static_assert(MF_ENGINE_ORDER_VERSION == MF_ORDER_VERSION,
	       "the order version the engine shows is order/'s");

/* The 32 bytes of a 64-hex-digit fingerprint. */
static int fp_bytes(const char *fp, uint8_t out[32])
{
	if (strlen(fp) != MF_FP_HEX_LEN)
		return -EINVAL;
	for (int i = 0; i < 32; i++) {
		int v = 0;
		for (int j = 0; j < 2; j++) {
			char ch = fp[2 * i + j];
			int d = (ch >= '0' && ch <= '9') ? ch - '0'
			    : (ch >= 'a' && ch <= 'f')	 ? ch - 'a' + 10
							 : -1;
			if (d < 0)
				return -EINVAL;
			v = v * 16 + d;
		}
		out[i] = (uint8_t)v;
	}
	return 0;
}

/* The bytes of a materialized shard's records: count x size for fixed
 * records, else the end of its last record (docs/format.md, "Batch
 * order"), from its records section. */
static int shard_bytes(struct mf_engine *e, const char *fp,
		       const struct mf_engine_shard *rec,
		       const struct mf_records *fr, uint64_t count,
		       uint64_t *bytes)
{
	if (count == 0) {
		*bytes = 0;
		return 0;
	}
	if (fr->framing == MF_FRAMING_FIXED) {
		if (count > MF_ORDER_MAX / fr->size)
			return -EOVERFLOW;
		*bytes = count * fr->size;
		return 0;
	}
	struct mf_shard_reader *r;
	int rc =
	    mf_shard_reader_open(e->store, fp, rec->run_id, rec->index, &r);
	if (rc)
		return rc;
	uint64_t off, len;
	rc = mf_shard_reader_record(r, count - 1, &off, &len);
	mf_shard_reader_close(r);
	if (rc == 0)
		*bytes = off + len;
	return rc;
}

/* Feeds o the counts of the shards it asks for next while they are
 * materialized; stops at the first that is not. */
static int feed_known(struct mf_engine *e, const char *fp, struct mf_order *o,
		      uint64_t *known, char **err)
{
	uint64_t shard;
	*known = 0;
	while (mf_order_next_shard(o, &shard) == 0) {
		struct mf_engine_shard rec;
		int rc = mf_engine_shard_rec(e, fp, (uint32_t)shard, &rec);
		if (rc == -ENOENT)
			return 0;
		if (rc)
			return rc;
		struct mf_records fr;
		uint64_t count, bytes = 0;
		if (rec.state != MF_ENGINE_MATERIALIZED || !rec.run_id[0]) {
			mf_engine_shard_release(&rec);
			return 0;
		}
		rc = mf_shard_file_records(e->store, fp, rec.run_id, rec.index,
					   &fr, &count);
		if (rc == 0)
			rc = shard_bytes(e, fp, &rec, &fr, count, &bytes);
		mf_engine_shard_release(&rec);
		if (rc == 0)
			rc = mf_order_set_shard(o, shard, count, bytes);
		if (rc) {
			eng_errf(err, "shard %llu: %s",
				 (unsigned long long)shard,
				 rc == -EOVERFLOW
				     ? "the epoch's records pass the order's "
				       "limit (2^63 - 1)"
				     : strerror(-rc));
			return rc;
		}
		(*known)++;
	}
	return 0;
}

int mf_engine_batch_framing(struct mf_engine *e, const char *fp,
			    struct mf_records *out, char **err)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct spec_entry *se;
	rc = eng_spec_for(e, c, fp, &se, err);
	if (rc == 0 && se->spec->records.framing == MF_FRAMING_NONE)
		rc = -ENOTSUP;
	if (rc == 0)
		*out = se->spec->records;
	eng_catalog_put(e, c);
	return rc;
}

/* ---- the orders last used ----
 *
 * Building an order reads a row and a shard file's trailer per known
 * shard: ENG_ORDER_SLOTS of them are kept, fed further when a batch
 * asks past what they know. A kept count is checked again whenever a
 * batch opens that shard's file (order_check): a shard computed anew
 * with other records drops the order, which is built again. */
struct eng_order_slot {
	bool used;
	char fp[MF_FP_HEX_LEN + 1];
	bool shuffled;
	uint64_t seed, epoch;
	struct mf_order *o;
	struct mf_records records;
	uint64_t window, nshards, shards_known;
	uint64_t tick; /* of its last use: the least is replaced */
};

void eng_orders_free(struct mf_engine *e)
{
	if (!e->orders)
		return;
	for (size_t i = 0; i < ENG_ORDER_SLOTS; i++)
		mf_order_free(e->orders[i].o);
	free(e->orders);
	e->orders = NULL;
}

static bool slot_is(const struct eng_order_slot *s, const char *fp,
		    const struct mf_engine_batch_view *v)
{
	return s->used && s->shuffled == v->shuffled &&
	    (!v->shuffled || (s->seed == v->seed && s->epoch == v->epoch)) &&
	    strcmp(s->fp, fp) == 0;
}

static void slot_clear(struct eng_order_slot *s)
{
	mf_order_free(s->o);
	memset(s, 0, sizeof(*s));
}

/* A new order of v's epoch for fp into s, with no count known. */
static int slot_build(struct mf_engine *e, const char *fp,
		      const struct mf_engine_batch_view *v,
		      struct eng_order_slot *s, char **err)
{
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct spec_entry *se;
	rc = eng_spec_for(e, c, fp, &se, err);
	eng_catalog_put(e, c);
	if (rc)
		return rc;
	if (se->spec->records.framing == MF_FRAMING_NONE) {
		eng_errf(err, "snapshot %s has no 'records' in its spec", fp);
		return -ENOTSUP;
	}
	struct mf_order_params p = {.shuffled = v->shuffled,
				    .seed = v->shuffled ? v->seed : 0,
				    .epoch = v->shuffled ? v->epoch : 0,
				    .window = se->spec->shuffle_window,
				    .nshards = se->spec->shards};
	if (fp_bytes(fp, p.fingerprint) != 0) {
		eng_errf(err, "'%s' is no fingerprint", fp);
		return -EINVAL;
	}
	struct mf_order *o;
	rc = mf_order_new(&p, &o);
	if (rc) {
		eng_errf(err, "snapshot %s: %s", fp, strerror(-rc));
		return rc;
	}
	*s = (struct eng_order_slot){.used = true,
				     .shuffled = p.shuffled,
				     .seed = p.seed,
				     .epoch = p.epoch,
				     .o = o,
				     .records = se->spec->records,
				     .window = p.window,
				     .nshards = p.nshards};
	snprintf(s->fp, sizeof(s->fp), "%s", fp);
	return 0;
}

/* The kept order of v's epoch for fp, built when missing, fed with the
 * counts materialized since. Caller holds orders_lock; the slot is
 * valid until it lets go. */
static int order_get(struct mf_engine *e, const char *fp,
		     const struct mf_engine_batch_view *v,
		     struct eng_order_slot **out, char **err)
{
	assert(mf_mutex_held(&e->orders_lock));
	if (!e->orders &&
	    !(e->orders = calloc(ENG_ORDER_SLOTS, sizeof(*e->orders))))
		return -ENOMEM;
	struct eng_order_slot *s = NULL, *old = &e->orders[0];
	for (size_t i = 0; i < ENG_ORDER_SLOTS && !s; i++) {
		if (slot_is(&e->orders[i], fp, v))
			s = &e->orders[i];
		else if (e->orders[i].tick < old->tick)
			old = &e->orders[i];
	}
	if (!s) {
		slot_clear(old);
		int rc = slot_build(e, fp, v, old, err);
		if (rc)
			return rc;
		s = old;
	}
	s->tick = ++e->orders_tick;
	if (!mf_order_complete(s->o)) {
		uint64_t known;
		int rc = feed_known(e, fp, s->o, &known, err);
		s->shards_known += known;
		if (rc) {
			slot_clear(s);
			return rc;
		}
	}
	*out = s;
	return 0;
}

/* Fills info from a slot. */
static void slot_info(const struct eng_order_slot *s,
		      struct mf_engine_batches_info *info)
{
	info->order = MF_ORDER_VERSION;
	info->shards = s->nshards;
	info->window = s->window;
	info->shards_known = s->shards_known;
}

/* Calls fn for global batch g with its runs, MF_ENGINE_BATCH_RUNS at a
 * time (buf holds that many). */
static int one_batch(const struct mf_order *o, uint64_t batch, uint64_t k,
		     uint64_t g, struct mf_engine_batch_run *buf,
		     mf_engine_batch_fn fn, void *arg)
{
	struct mf_order_run runs[64];
	uint64_t at = g * batch, left = batch;
	size_t n = 0;
	bool first = true;
	while (left > 0) {
		size_t nr;
		uint64_t cov;
		int rc = mf_order_runs(o, at, left, runs, 64, &nr, &cov);
		if (rc)
			return rc;
		for (size_t i = 0; i < nr; i++) {
			struct mf_engine_batch_run *last =
			    n ? &buf[n - 1] : NULL;
			/* A run may continue the last one of the call before. */
			if (last && last->shard == runs[i].shard &&
			    last->record + last->count == runs[i].record) {
				last->count += runs[i].count;
				continue;
			}
			if (n == MF_ENGINE_BATCH_RUNS) {
				if ((rc = fn(arg, k, g, buf, n, first, false)))
					return rc;
				first = false;
				n = 0;
			}
			buf[n++] = (struct mf_engine_batch_run){
			    runs[i].shard, runs[i].record, runs[i].count};
		}
		at += cov;
		left -= cov;
	}
	return fn(arg, k, g, buf, n, first, true);
}

int eng_batch_view_check(const struct mf_engine_batch_view *v,
			 struct mf_order_view *ov, char **err)
{
	*ov = (struct mf_order_view){v->batch, v->world, v->rank, v->from};
	if (mf_order_view_check(ov)) {
		eng_errf(err,
			 "batch size, rank and world out of range (batch "
			 "and world 1 to 2^63 - 1, rank below world)");
		return -EINVAL;
	}
	return 0;
}

int mf_engine_batches(struct mf_engine *e, const char *fp,
		      const struct mf_engine_batch_view *v,
		      mf_engine_batch_fn fn, void *arg,
		      struct mf_engine_batches_info *info, char **err)
{
	struct mf_order_view ov;
	int rc = eng_batch_view_check(v, &ov, err);
	if (rc)
		return rc;
	struct mf_engine_batches_info in = {0};
	struct mf_engine_batch_run *buf =
	    malloc(MF_ENGINE_BATCH_RUNS * sizeof(*buf));
	if (!buf)
		return -ENOMEM;
	/* the listing runs under the lock: a listing is for matctl */
	pthread_mutex_lock(&e->orders_lock);
	struct eng_order_slot *s;
	rc = order_get(e, fp, v, &s, err);
	uint64_t count = 0;
	if (rc == 0) {
		slot_info(s, &in);
		rc = mf_order_view_count(s->o, &ov, &count, &in.complete);
	}
	for (uint64_t k = 0; rc == 0 && k < count; k++) {
		uint64_t g;
		rc = mf_order_view_batch(s->o, &ov, k, &g);
		if (rc == 0)
			rc = one_batch(s->o, v->batch, k, g, buf, fn, arg);
	}
	pthread_mutex_unlock(&e->orders_lock);
	free(buf);
	in.batches = count;
	if (rc == 0)
		*info = in;
	return rc;
}

/* ---- one batch: its place without computing, the shards a plan
 * computes to place it ---- */

int mf_engine_batch_count(struct mf_engine *e, const char *fp,
			  const struct mf_engine_batch_view *v, uint64_t *count,
			  bool *complete, char **err)
{
	struct mf_order_view ov;
	int rc = eng_batch_view_check(v, &ov, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&e->orders_lock);
	struct eng_order_slot *s;
	rc = order_get(e, fp, v, &s, err);
	if (rc == 0)
		rc = mf_order_view_count(s->o, &ov, count, complete);
	pthread_mutex_unlock(&e->orders_lock);
	return rc;
}

int mf_engine_batch_wanted(struct mf_engine *e, const char *fp,
			   const struct mf_engine_batch_view *v, uint64_t k,
			   uint32_t *shards, size_t cap, size_t *n, char **err)
{
	struct mf_order_view ov;
	int rc = eng_batch_view_check(v, &ov, err);
	if (rc)
		return rc;
	*n = 0;
	pthread_mutex_lock(&e->orders_lock);
	struct eng_order_slot *s;
	rc = order_get(e, fp, v, &s, err);
	uint64_t g;
	if (rc == 0 && mf_order_view_batch(s->o, &ov, k, &g) == -EAGAIN) {
		uint64_t pos = mf_order_known_shards(s->o);
		while (*n < cap && pos < s->nshards)
			shards[(*n)++] =
			    (uint32_t)mf_order_shard_at(s->o, pos++);
	}
	pthread_mutex_unlock(&e->orders_lock);
	return rc;
}

/* The shard's records as the order counts them, from its reader. */
static int reader_counts(struct mf_shard_reader *r, uint64_t *count,
			 uint64_t *bytes)
{
	struct mf_records fr;
	mf_shard_reader_records(r, &fr, count);
	if (*count == 0) {
		*bytes = 0;
		return 0;
	}
	if (fr.framing == MF_FRAMING_FIXED) {
		if (*count > MF_ORDER_MAX / fr.size)
			return -EOVERFLOW;
		*bytes = *count * fr.size;
		return 0;
	}
	uint64_t off, len;
	int rc = mf_shard_reader_record(r, *count - 1, &off, &len);
	if (rc == 0)
		*bytes = off + len;
	return rc;
}

/* Checks that the file r reads has the records the kept order of v
 * counts for shard: -ESTALE (and the order dropped) when it was computed
 * anew with others. */
int eng_batch_order_check(struct mf_engine *e, const char *fp,
			  const struct mf_engine_batch_view *v, uint64_t shard,
			  struct mf_shard_reader *r)
{
	uint64_t count, bytes;
	int rc = reader_counts(r, &count, &bytes);
	if (rc)
		return rc;
	pthread_mutex_lock(&e->orders_lock);
	for (size_t i = 0; e->orders && i < ENG_ORDER_SLOTS; i++) {
		struct eng_order_slot *s = &e->orders[i];
		if (!slot_is(s, fp, v))
			continue;
		rc = mf_order_set_shard(s->o, shard, count, bytes);
		if (rc == -EINVAL) {
			slot_clear(s);
			rc = -ESTALE;
		}
		break;
	}
	pthread_mutex_unlock(&e->orders_lock);
	return rc;
}

/* Computes (through get) the shards the order names next until batch k
 * of ov is known or known absent: 0 and *g, -ENOENT. */
int eng_batch_learn(struct mf_engine *e, const char *fp,
		    const struct mf_engine_batch_view *v,
		    const struct mf_order_view *ov, uint64_t k,
		    mf_engine_batch_shard_fn get, void *arg, uint64_t *g,
		    char **err)
{
	for (uint64_t before = UINT64_MAX;;) {
		pthread_mutex_lock(&e->orders_lock);
		struct eng_order_slot *s;
		uint64_t shard = 0, known = 0;
		int rc = order_get(e, fp, v, &s, err);
		if (rc == 0 &&
		    (rc = mf_order_view_batch(s->o, ov, k, g)) == -EAGAIN) {
			known = mf_order_known_shards(s->o);
			if (mf_order_next_shard(s->o, &shard) != 0)
				rc = -EIO; /* complete yet unknown: cannot be */
		}
		pthread_mutex_unlock(&e->orders_lock);
		if (rc != -EAGAIN)
			return rc;
		if (known == before)
			return -EAGAIN; /* expired as soon as computed */
		before = known;
		struct mf_shard_reader *r;
		if ((rc = get(arg, (uint32_t)shard, &r, err)))
			return rc;
		/* its counts from the file: a sealed shard's row does not
		 * say materialized yet */
		if ((rc = eng_batch_order_check(e, fp, v, shard, r)))
			return rc;
	}
}

/* The runs of global batch g, copied out of the kept order, and the
 * records' framing. */
int eng_batch_runs(struct mf_engine *e, const char *fp,
		   const struct mf_engine_batch_view *v, uint64_t g,
		   struct mf_order_run **out, size_t *n, struct mf_records *fr,
		   char **err)
{
	struct mf_order_run *runs = NULL;
	size_t nr = 0, cap = 0;
	pthread_mutex_lock(&e->orders_lock);
	struct eng_order_slot *s;
	int rc = order_get(e, fp, v, &s, err);
	uint64_t at = g * v->batch, left = v->batch;
	if (rc == 0)
		*fr = s->records;
	while (rc == 0 && left > 0) {
		if (cap - nr < 64) {
			size_t c = cap ? cap * 2 : 64;
			void *q = realloc(runs, c * sizeof(*runs));
			if (!q) {
				rc = -ENOMEM;
				break;
			}
			runs = q;
			cap = c;
		}
		size_t got;
		uint64_t cov;
		rc = mf_order_runs(s->o, at, left, runs + nr, cap - nr, &got,
				   &cov);
		nr += got;
		at += cov;
		left -= cov;
	}
	pthread_mutex_unlock(&e->orders_lock);
	if (rc) {
		free(runs);
		return rc;
	}
	*out = runs;
	*n = nr;
	return 0;
}

int eng_batch_window(struct mf_engine *e, const char *fp,
		     const struct mf_engine_batch_view *v, uint64_t place,
		     struct mf_order_window *w, struct mf_order_run **parts,
		     size_t *n, struct mf_records *fr, char **err)
{
	struct mf_order_run *runs = NULL;
	pthread_mutex_lock(&e->orders_lock);
	struct eng_order_slot *s;
	int rc = order_get(e, fp, v, &s, err);
	if (rc == 0)
		rc = mf_order_window_at(s->o, place, w);
	if (rc == 0 && parts &&
	    !(runs = malloc((w->shards ? w->shards : 1) * sizeof(*runs))))
		rc = -ENOMEM;
	if (rc == 0 && parts)
		rc = mf_order_window_parts(s->o, place, runs, w->shards, n);
	if (rc == 0)
		*fr = s->records;
	pthread_mutex_unlock(&e->orders_lock);
	if (rc) {
		free(runs);
		return rc;
	}
	if (parts)
		*parts = runs;
	return 0;
}

/* One try of mf_engine_batch_find. */
static int find_once(struct mf_engine *e, const char *fp,
		     const struct mf_engine_batch_view *v,
		     const struct mf_order_view *ov, uint64_t k,
		     struct mf_engine_batch_place *out, char **err)
{
	uint64_t g = 0, size = 0;
	struct mf_records fr = {0};
	pthread_mutex_lock(&e->orders_lock);
	struct eng_order_slot *s;
	int rc = order_get(e, fp, v, &s, err);
	if (rc == 0)
		rc = mf_order_view_batch(s->o, ov, k, &g);
	if (rc == 0)
		fr = s->records;
	pthread_mutex_unlock(&e->orders_lock);
	if (rc)
		return rc;
	if (fr.framing != MF_FRAMING_FIXED)
		rc = eng_batch_placed_size(e, fp, v, g, &size, err);
	else if (v->batch > MF_ORDER_MAX / fr.size)
		rc = -EOVERFLOW;
	else
		size = v->batch * fr.size; /* no reader needed */
	if (rc == 0) {
		out->global = g;
		out->size = size;
		out->order = MF_ORDER_VERSION;
	}
	return rc;
}

int mf_engine_batch_find(struct mf_engine *e, const char *fp,
			 const struct mf_engine_batch_view *v, uint64_t k,
			 struct mf_engine_batch_place *out, char **err)
{
	struct mf_order_view ov;
	int rc = eng_batch_view_check(v, &ov, err);
	if (rc)
		return rc;
	rc = find_once(e, fp, v, &ov, k, out, err);
	if (rc == -ESTALE) /* a shard was computed anew: its order is gone */
		rc = find_once(e, fp, v, &ov, k, out, err);
	return rc == -ESTALE ? -EAGAIN : rc;
}
