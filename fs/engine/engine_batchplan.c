/*
 * engine_batchplan.c - one batch's plan (engine_batches.c places it):
 * its runs as segments of shard bytes in their framing (docs/format.md,
 * "Batch files"), with the literal bytes a framing needs; its record
 * ends; the size of a placed batch from the materialized shards' files;
 * and a batch reader of its own, whose readers it opens (computing
 * them, single flight) through mf_engine_open_shard.
 *
 * Not for: the order and its kept slots (engine_batches.c), paths or
 * inodes (the FUSE batch tree), or a chunk cache: a batch reader reads
 * its shard readers directly.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"
#include "mf_order.h"

void mf_engine_batch_plan_release(struct mf_engine_batch_plan *p)
{
	free(p->segs);
	memset(p, 0, sizeof(*p));
}

/* Makes room for one more segment in p. */
static int plan_grow(struct mf_engine_batch_plan *p, size_t *cap)
{
	if (p->nsegs < *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 16;
	void *q = realloc(p->segs, c * sizeof(*p->segs));
	if (!q)
		return -ENOMEM;
	p->segs = q;
	*cap = c;
	return 0;
}

/* Appends a segment of shard's bytes [off, off + len) to p, joined to the
 * last one when it continues it. */
static int plan_add(struct mf_engine_batch_plan *p, size_t *cap, uint32_t shard,
		    uint64_t off, uint64_t len)
{
	struct mf_engine_batch_seg *last =
	    p->nsegs ? &p->segs[p->nsegs - 1] : NULL;
	if (last && !last->lit && last->shard == shard &&
	    last->off + last->len == off) {
		last->len += len;
		p->size += len;
		return 0;
	}
	int rc = plan_grow(p, cap);
	if (rc)
		return rc;
	p->segs[p->nsegs++] =
	    (struct mf_engine_batch_seg){shard, off, len, NULL};
	p->size += len;
	return 0;
}

/* The static framing bytes of batches (docs/format.md, "Batch files"):
 * the '\n' after a shard's last line when it has none, and the two
 * end-of-archive blocks of a tar batch. */
static const uint8_t lit_newline[1] = {'\n'};
static const uint8_t lit_tar_end[1024];

/* Appends len bytes of lit (static) to p. */
static int plan_lit(struct mf_engine_batch_plan *p, size_t *cap,
		    const uint8_t *lit, uint64_t len)
{
	int rc = plan_grow(p, cap);
	if (rc)
		return rc;
	p->segs[p->nsegs++] = (struct mf_engine_batch_seg){0, 0, len, lit};
	p->size += len;
	return 0;
}

/* A map of shard numbers to pointers, open addressing (keys stored as
 * shard + 1). */
struct shard_map {
	uint64_t *keys;
	void **vals;
	size_t cap, n; /* cap a power of 2 */
};

/* Where key is in m, or the free slot where it goes. */
static size_t map_slot(const struct shard_map *m, uint64_t key)
{
	size_t j = (size_t)(key * 0x9e3779b97f4a7c15ULL);
	while (m->keys[j & (m->cap - 1)] && m->keys[j & (m->cap - 1)] != key)
		j++;
	return j & (m->cap - 1);
}

/* Whether shard is in m, and then its value. */
static bool map_get(const struct shard_map *m, uint32_t shard, void **val)
{
	if (m->cap == 0)
		return false;
	size_t i = map_slot(m, (uint64_t)shard + 1);
	if (!m->keys[i])
		return false;
	*val = m->vals[i];
	return true;
}

/* Adds shard with val: 1 when it was not in m, 0 when it was (its value
 * kept), -ENOMEM. */
static int map_put(struct shard_map *m, uint32_t shard, void *val)
{
	if (2 * (m->n + 1) > m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 64;
		struct shard_map g = {calloc(cap, sizeof(*g.keys)),
				      calloc(cap, sizeof(*g.vals)), cap, 0};
		if (!g.keys || !g.vals) {
			free(g.keys);
			free(g.vals);
			return -ENOMEM;
		}
		for (size_t i = 0; i < m->cap; i++) {
			if (!m->keys[i])
				continue;
			size_t j = map_slot(&g, m->keys[i]);
			g.keys[j] = m->keys[i];
			g.vals[j] = m->vals[i];
			g.n++;
		}
		free(m->keys);
		free(m->vals);
		*m = g;
	}
	uint64_t key = (uint64_t)shard + 1;
	size_t i = map_slot(m, key);
	if (m->keys[i])
		return 0;
	m->keys[i] = key;
	m->vals[i] = val;
	m->n++;
	return 1;
}

static void map_free(struct shard_map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

/* The bytes of run ru in the shard r reads: [*off, *off + *len), one
 * segment (its records are consecutive); *nl when they end with the
 * shard's last line and it has no '\n' (one byte read, only then). */
static int run_bytes(struct mf_shard_reader *r, const struct mf_records *fr,
		     const struct mf_order_run *ru, uint64_t *off,
		     uint64_t *len, bool *nl)
{
	*nl = false;
	if (fr->framing == MF_FRAMING_FIXED) {
		*off = ru->record * fr->size;
		*len = ru->count * fr->size;
		return 0;
	}
	uint64_t o0, l0, o1, l1;
	int rc = mf_shard_reader_record(r, ru->record, &o0, &l0);
	if (rc == 0)
		rc = mf_shard_reader_record(r, ru->record + ru->count - 1, &o1,
					    &l1);
	if (rc)
		return rc;
	*off = o0;
	*len = o1 + l1 - o0;
	struct mf_records sr;
	uint64_t count;
	mf_shard_reader_records(r, &sr, &count);
	if (fr->framing != MF_FRAMING_LINES ||
	    ru->record + ru->count != count || l1 == 0)
		return 0;
	uint8_t ch;
	ssize_t got = mf_shard_reader_pread(r, &ch, 1, o1 + l1 - 1);
	if (got < 0)
		return (int)got;
	if (got != 1)
		return MF_CORRUPT("a shard is shorter than its records");
	*nl = ch != '\n';
	return 0;
}

/* The ends of run ru's records in its batch, whose bytes start at base
 * there and at off in the shard (run_bytes), into ends. */
static int run_ends(struct mf_shard_reader *r, const struct mf_records *fr,
		    const struct mf_order_run *ru, uint64_t base, uint64_t off,
		    bool nl, uint64_t *ends)
{
	for (uint64_t j = 0; j < ru->count; j++) {
		uint64_t o, l;
		if (fr->framing == MF_FRAMING_FIXED) {
			ends[j] = base + (j + 1) * fr->size;
			continue;
		}
		int rc = mf_shard_reader_record(r, ru->record + j, &o, &l);
		if (rc)
			return rc;
		ends[j] = base + (o + l - off);
	}
	if (nl)
		ends[ru->count - 1]++;
	return 0;
}

/* Plans a batch's runs (fr their framing) into p over the readers get
 * gives, checking each shard's file once against the order of v, and
 * fills ends (one per record; NULL: none). */
static int plan_runs(struct mf_engine *e, const char *fp,
		     const struct mf_engine_batch_view *v,
		     const struct mf_order_run *runs, size_t nr,
		     const struct mf_records *fr, mf_engine_batch_shard_fn get,
		     void *arg, struct mf_engine_batch_plan *p, uint64_t *ends,
		     char **err)
{
	struct shard_map seen = {0};
	size_t cap = 0, at = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < nr; i++) {
		struct mf_shard_reader *r;
		uint32_t shard = (uint32_t)runs[i].shard;
		uint64_t off = 0, len = 0;
		bool nl = false;
		if ((rc = get(arg, shard, &r, err)))
			break;
		int added = map_put(&seen, shard, NULL);
		if (added < 0)
			rc = added;
		else if (added)
			rc = eng_batch_order_check(e, fp, v, shard, r);
		if (rc == 0)
			rc = run_bytes(r, fr, &runs[i], &off, &len, &nl);
		if (rc == 0 && ends)
			rc = run_ends(r, fr, &runs[i], p->size, off, nl,
				      ends + at);
		if (rc == 0)
			rc = plan_add(p, &cap, shard, off, len);
		if (rc == 0 && nl)
			rc =
			    plan_lit(p, &cap, lit_newline, sizeof(lit_newline));
		at += runs[i].count;
	}
	if (rc == 0 && fr->framing == MF_FRAMING_TAR)
		rc = plan_lit(p, &cap, lit_tar_end, sizeof(lit_tar_end));
	map_free(&seen);
	return rc;
}

/* mf_engine_batch_plan, and the batch's record ends into *ends (caller
 * frees) when ends is set. */
static int plan_make(struct mf_engine *e, const char *fp,
		     const struct mf_engine_batch_view *v, uint64_t k,
		     mf_engine_batch_shard_fn get, void *arg,
		     struct mf_engine_batch_plan *out, uint64_t **ends,
		     char **err)
{
	struct mf_order_view ov;
	int rc = eng_batch_view_check(v, &ov, err);
	if (rc)
		return rc;
	if (v->batch > MF_ENGINE_BATCH_MAX_RUNS)
		return -EFBIG;
	struct mf_engine_batch_plan p = {0};
	struct mf_order_run *runs = NULL;
	struct mf_records fr;
	uint64_t *e_out = NULL;
	size_t nr = 0;
	rc = eng_batch_learn(e, fp, v, &ov, k, get, arg, &p.global, err);
	if (rc == 0)
		rc = eng_batch_runs(e, fp, v, p.global, &runs, &nr, &fr, err);
	if (rc == 0 && ends &&
	    !(e_out = malloc((size_t)v->batch * sizeof(*e_out))))
		rc = -ENOMEM;
	if (rc == 0)
		rc = plan_runs(e, fp, v, runs, nr, &fr, get, arg, &p, e_out,
			       err);
	free(runs);
	if (rc) {
		free(e_out);
		mf_engine_batch_plan_release(&p);
		return rc;
	}
	*out = p;
	if (ends)
		*ends = e_out;
	return 0;
}

int mf_engine_batch_plan(struct mf_engine *e, const char *fp,
			 const struct mf_engine_batch_view *v, uint64_t k,
			 mf_engine_batch_shard_fn get, void *arg,
			 struct mf_engine_batch_plan *out, char **err)
{
	return plan_make(e, fp, v, k, get, arg, out, NULL, err);
}

int mf_engine_batch_record_ends(struct mf_engine *e, const char *fp,
				const struct mf_engine_batch_view *v,
				uint64_t k, mf_engine_batch_shard_fn get,
				void *arg, uint64_t **ends, size_t *n,
				char **err)
{
	struct mf_engine_batch_plan p;
	uint64_t *out;
	int rc = plan_make(e, fp, v, k, get, arg, &p, &out, err);
	if (rc)
		return rc;
	mf_engine_batch_plan_release(&p);
	*ends = out;
	*n = (size_t)v->batch;
	return 0;
}

int mf_engine_batch_window(struct mf_engine *e, const char *fp,
			   const struct mf_engine_batch_view *v, uint64_t place,
			   mf_engine_batch_shard_fn get, void *arg,
			   struct mf_engine_batch_window *win,
			   struct mf_engine_batch_plan *out, char **err)
{
	struct mf_order_view ov;
	int rc = eng_batch_view_check(v, &ov, err);
	if (rc)
		return rc;
	struct mf_order_window w;
	struct mf_order_run *parts = NULL;
	struct mf_records fr;
	size_t np = 0;
	rc = eng_batch_window(e, fp, v, place, &w, out ? &parts : NULL, &np,
			      &fr, err);
	if (rc)
		return rc;
	*win = (struct mf_engine_batch_window){w.first, w.count, w.shards};
	if (!out)
		return 0;
	struct mf_engine_batch_plan p = {0};
	rc = plan_runs(e, fp, v, parts, np, &fr, get, arg, &p, NULL, err);
	free(parts);
	if (rc) {
		mf_engine_batch_plan_release(&p);
		return rc;
	}
	p.global = UINT64_MAX; /* no batch's */
	*out = p;
	return 0;
}

/* ---- a placed batch's size, from the materialized shards' files ----
 *
 * Its plan needs the record places of its runs, from the records
 * sections of the shard files: readers of them are kept across sizes
 * (ENG_SIZE_READERS, at most ENG_SIZE_RECORDS record places in all), so
 * that listing an epoch with sizes reads each section once. A kept
 * reader answers for the computation (row generation) it was opened on;
 * the row is read again each time, so a shard computed anew is read
 * anew. */
struct eng_size_reader {
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	uint64_t gen; /* the row's generation the file is */
	uint64_t records; /* its record places, counted against the bound */
	struct mf_shard_reader *r; /* NULL: a free slot */
	uint64_t tick; /* of the size it was last used for */
};

void eng_size_readers_free(struct mf_engine *e)
{
	if (!e->size_readers)
		return;
	for (size_t i = 0; i < ENG_SIZE_READERS; i++)
		mf_shard_reader_close(e->size_readers[i].r);
	free(e->size_readers);
	e->size_readers = NULL;
}

/* Readers for one size: the kept ones, and those of its own it closes
 * after (when the kept ones are all in use for it). Under sizes_lock. */
struct mat_readers {
	struct mf_engine *e;
	const char *fp;
	uint64_t tick; /* this size's: its kept readers are not replaced */
	struct shard_map m; /* shard -> its reader */
	struct mf_shard_reader **own;
	size_t nown, cap_own;
};

/* The kept reader of shard of gen, when there is one. */
static struct mf_shard_reader *kept_find(struct mat_readers *mr, uint32_t shard,
					 uint64_t gen)
{
	struct eng_size_reader *c = mr->e->size_readers;
	for (size_t i = 0; i < ENG_SIZE_READERS; i++)
		if (c[i].r && c[i].shard == shard && c[i].gen == gen &&
		    strcmp(c[i].fp, mr->fp) == 0) {
			c[i].tick = mr->tick;
			return c[i].r;
		}
	return NULL;
}

/* Keeps r (shard's, of gen), replacing the least recently used readers
 * not in use for this size as the bounds need: false when it does not
 * fit (the caller owns r then). */
static bool kept_add(struct mat_readers *mr, uint32_t shard, uint64_t gen,
		     struct mf_shard_reader *r)
{
	struct eng_size_reader *c = mr->e->size_readers;
	struct mf_records fr;
	uint64_t count;
	mf_shard_reader_records(r, &fr, &count);
	if (count > ENG_SIZE_RECORDS)
		return false;
	for (;;) {
		uint64_t held = 0;
		struct eng_size_reader *free_slot = NULL, *old = NULL;
		for (size_t i = 0; i < ENG_SIZE_READERS; i++) {
			if (!c[i].r) {
				free_slot = free_slot ? free_slot : &c[i];
				continue;
			}
			held += c[i].records;
			if (c[i].tick != mr->tick &&
			    (!old || c[i].tick < old->tick))
				old = &c[i];
		}
		if (free_slot && held + count <= ENG_SIZE_RECORDS) {
			*free_slot = (struct eng_size_reader){.shard = shard,
							      .gen = gen,
							      .records = count,
							      .r = r,
							      .tick = mr->tick};
			snprintf(free_slot->fp, sizeof(free_slot->fp), "%s",
				 mr->fp);
			return true;
		}
		if (!old)
			return false;
		mf_shard_reader_close(old->r);
		memset(old, 0, sizeof(*old));
	}
}

/* Opens shard of rec's computation, kept or owned by mr. */
static int mat_open(struct mat_readers *mr, uint32_t shard,
		    const struct mf_engine_shard *rec, uint64_t gen,
		    struct mf_shard_reader **r)
{
	int rc = mf_shard_reader_open(mr->e->store, mr->fp, rec->run_id,
				      rec->index, r);
	if (rc)
		return rc;
	if (kept_add(mr, shard, gen, *r))
		return 0;
	if (mr->nown == mr->cap_own) {
		size_t c = mr->cap_own ? 2 * mr->cap_own : 16;
		void *q = realloc(mr->own, c * sizeof(*mr->own));
		if (!q) {
			mf_shard_reader_close(*r);
			return -ENOMEM;
		}
		mr->own = q;
		mr->cap_own = c;
	}
	mr->own[mr->nown++] = *r;
	return 0;
}

/* A reader of materialized shard `shard` only: -EAGAIN for a shard that
 * is not (or whose file is gone or corrupt meanwhile: an open sorts it
 * out). */
static int mat_reader(void *arg, uint32_t shard, struct mf_shard_reader **r,
		      char **err)
{
	struct mat_readers *mr = arg;
	void *have;
	(void)err;
	if (map_get(&mr->m, shard, &have)) {
		*r = have;
		return 0;
	}
	struct mf_engine_shard rec;
	int rc = mf_engine_shard_rec(mr->e, mr->fp, shard, &rec);
	if (rc)
		return rc == -ENOENT ? -EAGAIN : rc;
	uint64_t gen = rec.generation;
	if (rec.state != MF_ENGINE_MATERIALIZED || !rec.run_id[0])
		rc = -EAGAIN;
	else if (!(*r = kept_find(mr, shard, gen)))
		rc = mat_open(mr, shard, &rec, gen, r);
	mf_engine_shard_release(&rec);
	if (rc)
		return rc == -ENOENT || rc == -EBADMSG ? -EAGAIN : rc;
	rc = map_put(&mr->m, shard, *r);
	return rc < 0 ? rc : 0;
}

int eng_batch_placed_size(struct mf_engine *e, const char *fp,
			  const struct mf_engine_batch_view *v, uint64_t g,
			  uint64_t *size, char **err)
{
	if (v->batch > MF_ENGINE_BATCH_MAX_RUNS)
		return -EFBIG;
	struct mf_order_run *runs;
	struct mf_records fr;
	size_t nr;
	int rc = eng_batch_runs(e, fp, v, g, &runs, &nr, &fr, err);
	if (rc)
		return rc;
	struct mat_readers mr = {.e = e, .fp = fp};
	struct mf_engine_batch_plan p = {0};
	pthread_mutex_lock(&e->sizes_lock);
	if (!e->size_readers &&
	    !(e->size_readers =
		  calloc(ENG_SIZE_READERS, sizeof(*e->size_readers))))
		rc = -ENOMEM;
	mr.tick = ++e->sizes_tick;
	if (rc == 0)
		rc = plan_runs(e, fp, v, runs, nr, &fr, mat_reader, &mr, &p,
			       NULL, err);
	for (size_t i = 0; i < mr.nown; i++)
		mf_shard_reader_close(mr.own[i]);
	pthread_mutex_unlock(&e->sizes_lock);
	if (rc == 0)
		*size = p.size;
	mf_engine_batch_plan_release(&p);
	free(mr.own);
	map_free(&mr.m);
	free(runs);
	return rc;
}

/* ---- a batch reader of its own (matctl, tests): the plan over
 * readers it opens ---- */

struct mf_engine_batch {
	struct mf_engine *e;
	const char *fp;
	struct mf_engine_batch_plan plan;
	struct shard_map readers; /* shard -> its reader, opened */
	struct mf_shard_reader **seg_reader; /* plan.nsegs */
};

void mf_engine_batch_close(struct mf_engine_batch *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->readers.cap; i++)
		if (b->readers.keys[i])
			mf_shard_reader_close(b->readers.vals[i]);
	mf_engine_batch_plan_release(&b->plan);
	map_free(&b->readers);
	free(b->seg_reader);
	free(b);
}

/* The batch's reader of shard, opened (computed) when first asked for. */
static int own_reader(void *arg, uint32_t shard, struct mf_shard_reader **r,
		      char **err)
{
	struct mf_engine_batch *b = arg;
	void *have;
	if (map_get(&b->readers, shard, &have)) {
		*r = have;
		return 0;
	}
	int rc = mf_engine_open_shard(b->e, b->fp, shard, r, err);
	if (rc)
		return rc;
	if ((rc = map_put(&b->readers, shard, *r)) < 0) {
		mf_shard_reader_close(*r);
		return rc;
	}
	return 0;
}

uint64_t mf_engine_batch_size(const struct mf_engine_batch *b)
{
	return b->plan.size;
}

int mf_engine_batch_open(struct mf_engine *e, const char *fp,
			 const struct mf_engine_batch_view *v, uint64_t k,
			 struct mf_engine_batch **out, char **err)
{
	struct mf_engine_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->e = e;
	b->fp = fp;
	int rc =
	    mf_engine_batch_plan(e, fp, v, k, own_reader, b, &b->plan, err);
	if (rc == 0 && b->plan.nsegs &&
	    !(b->seg_reader = calloc(b->plan.nsegs, sizeof(*b->seg_reader))))
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && i < b->plan.nsegs; i++)
		if (!b->plan.segs[i].lit)
			rc = own_reader(b, b->plan.segs[i].shard,
					&b->seg_reader[i], err);
	b->fp = NULL; /* the caller's: not kept */
	if (rc) {
		mf_engine_batch_close(b);
		return rc;
	}
	*out = b;
	return 0;
}

ssize_t mf_engine_batch_pread(struct mf_engine_batch *b, void *buf, size_t len,
			      uint64_t off)
{
	const struct mf_engine_batch_plan *p = &b->plan;
	size_t done = 0;
	uint64_t at = 0;
	for (size_t i = 0; i < p->nsegs && done < len; i++) {
		const struct mf_engine_batch_seg *s = &p->segs[i];
		uint64_t pos = off + done;
		if (pos >= at + s->len) {
			at += s->len;
			continue;
		}
		uint64_t in = pos - at;
		size_t n = (size_t)(s->len - in);
		if (n > len - done)
			n = len - done;
		if (s->lit) {
			memcpy((char *)buf + done, s->lit + in, n);
		} else {
			ssize_t got = mf_shard_reader_pread(b->seg_reader[i],
							    (char *)buf + done,
							    n, s->off + in);
			if (got < 0)
				return got;
			if ((size_t)got != n)
				return MF_CORRUPT(
				    "a shard is shorter than its records");
		}
		done += n;
		at += s->len;
	}
	return (ssize_t)done;
}
