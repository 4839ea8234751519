/*
 * engine_batches.c - a snapshot's batches as the batch order (order/)
 * places them: the order of an epoch fed with the record counts of the
 * materialized shards, in the order's own shard order, as far as they
 * go (a known prefix); the batches of a rank view listed from it; one
 * batch's place and size without computing; and a batch reader, whose
 * open computes (through mf_engine_open_shard, single flight) the shards
 * the order needs to place the batch and those its records are in, and
 * reads its runs' bytes (fixed records so far).
 *
 * Not for: paths or inodes (the FUSE batch tree is built on this), or a
 * chunk cache: a batch reader reads its shard readers directly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"
#include "mf_order.h"

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

/* The order of v's epoch for fp with its known counts fed. */
static int open_order(struct mf_engine *e, const char *fp,
		      const struct mf_engine_batch_view *v,
		      struct mf_engine_batches_info *info,
		      struct mf_records *records, struct mf_order **out,
		      char **err)
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
				    .seed = v->seed,
				    .epoch = v->epoch,
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
	if (records)
		*records = se->spec->records;
	info->order = MF_ORDER_VERSION;
	info->shards = p.nshards;
	info->window = p.window;
	rc = feed_known(e, fp, o, &info->shards_known, err);
	if (rc) {
		mf_order_free(o);
		return rc;
	}
	*out = o;
	return 0;
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

int mf_engine_batches(struct mf_engine *e, const char *fp,
		      const struct mf_engine_batch_view *v,
		      mf_engine_batch_fn fn, void *arg,
		      struct mf_engine_batches_info *info, char **err)
{
	struct mf_order_view ov = {v->batch, v->world, v->rank, v->from};
	if (mf_order_view_check(&ov)) {
		eng_errf(err,
			 "batch size, rank and world out of range (batch "
			 "and world 1 to 2^63 - 1, rank below world)");
		return -EINVAL;
	}
	struct mf_engine_batches_info in = {0};
	struct mf_order *o;
	int rc = open_order(e, fp, v, &in, NULL, &o, err);
	if (rc)
		return rc;
	uint64_t count;
	rc = mf_order_view_count(o, &ov, &count, &in.complete);
	struct mf_engine_batch_run *buf = NULL;
	if (rc == 0 && count > 0 &&
	    !(buf = malloc(MF_ENGINE_BATCH_RUNS * sizeof(*buf))))
		rc = -ENOMEM;
	for (uint64_t k = 0; rc == 0 && k < count; k++) {
		uint64_t g;
		rc = mf_order_view_batch(o, &ov, k, &g);
		if (rc == 0)
			rc = one_batch(o, v->batch, k, g, buf, fn, arg);
	}
	free(buf);
	mf_order_free(o);
	in.batches = count;
	if (rc == 0)
		*info = in;
	return rc;
}

/* ---- one batch: its place without computing, and its reader ---- */

static int check_view(const struct mf_engine_batch_view *v,
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

/* The view v checked into *ov, then the order of fp for it (records: its
 * framing, or NULL); the caller frees *o. */
static int view_order(struct mf_engine *e, const char *fp,
		      const struct mf_engine_batch_view *v,
		      struct mf_order_view *ov, struct mf_records *records,
		      struct mf_order **o, char **err)
{
	struct mf_engine_batches_info in = {0};
	int rc = check_view(v, ov, err);
	return rc ? rc : open_order(e, fp, v, &in, records, o, err);
}

/* The bytes of a batch of fixed records; -ENOTSUP for other framings
 * (not served yet), -EOVERFLOW past 2^63 - 1. */
static int batch_bytes(const struct mf_records *fr, uint64_t batch,
		       uint64_t *size)
{
	if (fr->framing != MF_FRAMING_FIXED)
		return -ENOTSUP;
	if (batch > MF_ORDER_MAX / fr->size)
		return -EOVERFLOW;
	*size = batch * fr->size;
	return 0;
}

int mf_engine_batch_find(struct mf_engine *e, const char *fp,
			 const struct mf_engine_batch_view *v, uint64_t k,
			 struct mf_engine_batch_place *out, char **err)
{
	struct mf_order_view ov;
	struct mf_records fr;
	struct mf_order *o;
	int rc = view_order(e, fp, v, &ov, &fr, &o, err);
	if (rc)
		return rc;
	uint64_t g, size = 0;
	rc = mf_order_view_batch(o, &ov, k, &g);
	if (rc == 0)
		rc = batch_bytes(&fr, v->batch, &size);
	mf_order_free(o);
	if (rc == 0) {
		out->global = g;
		out->size = size;
		out->order = MF_ORDER_VERSION;
	}
	return rc;
}

int mf_engine_batch_count(struct mf_engine *e, const char *fp,
			  const struct mf_engine_batch_view *v, uint64_t *count,
			  bool *complete, char **err)
{
	struct mf_order_view ov;
	struct mf_order *o;
	int rc = view_order(e, fp, v, &ov, NULL, &o, err);
	if (rc)
		return rc;
	rc = mf_order_view_count(o, &ov, count, complete);
	mf_order_free(o);
	return rc;
}

/* A run of a batch: bytes [off, off + len) of a shard's file, at `at` in
 * the batch. */
struct batch_seg {
	struct mf_shard_reader *r; /* one of the batch's readers */
	uint64_t off, len, at;
};

/* Each shard is opened once however many runs it has. The arrays grow
 * with the runs and shards the batch has: memory O(runs), not O(B). */
struct mf_engine_batch {
	uint64_t size;
	size_t nsegs, segs_cap, nreaders, readers_cap;
	struct batch_seg *segs;
	uint64_t *shards; /* readers_cap of them, beside readers */
	struct mf_shard_reader **readers;
};

/* Room for one more of n elements at p, of *cap: p itself, p grown
 * (*cap updated), or NULL when out of memory (p unchanged). */
static void *grow(void *p, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return p;
	size_t c = *cap ? *cap * 2 : 16;
	void *q = realloc(p, c * elem);
	if (q)
		*cap = c;
	return q;
}

void mf_engine_batch_close(struct mf_engine_batch *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->nreaders; i++)
		mf_shard_reader_close(b->readers[i]);
	free(b->segs);
	free(b->shards);
	free(b->readers);
	free(b);
}

/* The batch's reader of shard, opened (computed) on its first run. */
static int batch_reader(struct mf_engine *e, const char *fp,
			struct mf_engine_batch *b, uint64_t shard,
			struct mf_shard_reader **r, char **err)
{
	for (size_t i = 0; i < b->nreaders; i++)
		if (b->shards[i] == shard) {
			*r = b->readers[i];
			return 0;
		}
	size_t cap = b->readers_cap;
	uint64_t *sh = grow(b->shards, &cap, b->nreaders, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	b->shards = sh;
	struct mf_shard_reader **rd =
	    grow(b->readers, &b->readers_cap, b->nreaders, sizeof(*rd));
	if (!rd)
		return -ENOMEM;
	b->readers = rd;
	int rc = mf_engine_open_shard(e, fp, (uint32_t)shard, r, err);
	if (rc == 0) {
		b->shards[b->nreaders] = shard;
		b->readers[b->nreaders++] = *r;
	}
	return rc;
}

uint64_t mf_engine_batch_size(const struct mf_engine_batch *b)
{
	return b->size;
}

/* Computes (single flight, as a shard open) the shards o names next
 * until batch k of ov is known or known absent: 0 and *g, -ENOENT. */
static int learn_batch(struct mf_engine *e, const char *fp, struct mf_order *o,
		       const struct mf_order_view *ov, uint64_t k, uint64_t *g,
		       char **err)
{
	for (;;) {
		int rc = mf_order_view_batch(o, ov, k, g);
		if (rc != -EAGAIN)
			return rc;
		uint64_t shard;
		if (mf_order_next_shard(o, &shard) != 0)
			return -EIO; /* complete yet unknown: cannot be */
		struct mf_shard_reader *r;
		if ((rc =
			 mf_engine_open_shard(e, fp, (uint32_t)shard, &r, err)))
			return rc;
		mf_shard_reader_close(r);
		uint64_t known;
		if ((rc = feed_known(e, fp, o, &known, err)))
			return rc;
		if (known == 0)
			return -EAGAIN; /* expired as soon as computed */
	}
}

int mf_engine_batch_open(struct mf_engine *e, const char *fp,
			 const struct mf_engine_batch_view *v, uint64_t k,
			 struct mf_engine_batch **out, char **err)
{
	struct mf_order_view ov;
	struct mf_records fr;
	struct mf_order *o;
	int rc = view_order(e, fp, v, &ov, &fr, &o, err);
	if (rc)
		return rc;
	uint64_t g, size = 0;
	struct mf_engine_batch *b = NULL;
	rc = learn_batch(e, fp, o, &ov, k, &g, err);
	if (rc == 0)
		rc = batch_bytes(&fr, v->batch, &size);
	if (rc == 0 && v->batch > MF_ENGINE_BATCH_MAX_RUNS)
		rc = -EFBIG;
	if (rc == 0 && !(b = calloc(1, sizeof(*b))))
		rc = -ENOMEM;
	uint64_t at = g * v->batch, left = v->batch, pos = 0;
	while (rc == 0 && left > 0) {
		struct mf_order_run runs[64];
		size_t nr;
		uint64_t cov;
		rc = mf_order_runs(o, at, left, runs, 64, &nr, &cov);
		for (size_t i = 0; rc == 0 && i < nr; i++) {
			struct batch_seg *sg =
			    grow(b->segs, &b->segs_cap, b->nsegs, sizeof(*sg));
			if (!sg) {
				rc = -ENOMEM;
				break;
			}
			b->segs = sg;
			struct batch_seg *s = &b->segs[b->nsegs];
			rc = batch_reader(e, fp, b, runs[i].shard, &s->r, err);
			if (rc)
				break;
			s->off = runs[i].record * fr.size;
			s->len = runs[i].count * fr.size;
			s->at = pos;
			pos += s->len;
			b->nsegs++;
		}
		at += cov;
		left -= cov;
	}
	mf_order_free(o);
	if (rc) {
		mf_engine_batch_close(b);
		return rc;
	}
	b->size = size;
	*out = b;
	return 0;
}

ssize_t mf_engine_batch_pread(struct mf_engine_batch *b, void *buf, size_t len,
			      uint64_t off)
{
	if (off >= b->size || len == 0)
		return 0;
	if (len > b->size - off)
		len = (size_t)(b->size - off);
	/* the first segment holding off: the last with at <= off */
	size_t lo = 0, hi = b->nsegs;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (b->segs[mid].at <= off)
			lo = mid;
		else
			hi = mid;
	}
	size_t done = 0;
	for (size_t i = lo; i < b->nsegs && done < len; i++) {
		const struct batch_seg *s = &b->segs[i];
		uint64_t in = off + done - s->at;
		size_t n = (size_t)(s->len - in);
		if (n > len - done)
			n = len - done;
		ssize_t got = mf_shard_reader_pread(s->r, (char *)buf + done, n,
						    s->off + in);
		if (got < 0)
			return got;
		if ((size_t)got != n)
			return MF_CORRUPT(
			    "a shard is shorter than its records");
		done += n;
	}
	return (ssize_t)done;
}
