/*
 * fuse_batch.c - opening batch files and reading them.
 *
 * A batch's open plans it (mf_engine_batch_plan: the segments of shard
 * bytes its records are) over the shard data of this file: readers of
 * the shards batches read last, kept in a table of MFS_BTAB_SLOTS, so
 * that consecutive batches of an epoch, which draw on the same window of
 * shards, share their readers and their chunks in the cache. A reader
 * kept is used again only while its shard is still that computation (the
 * row's generation, mf_engine_open_materialized).
 *
 * An open whose shards are materialized is answered on the spot. One that
 * needs a computation goes to the workers, keyed by its reader's uid as
 * shard opens are; its job first has the shards the order needs next
 * computed on other workers too (mf_engine_batch_wanted), so that a cold
 * epoch's first batch costs about one shard's time with enough workers,
 * then plans, each computation single-flight through the engine. A stage
 * of this daemon opening a batch that needs a computation gets EDEADLK,
 * as for shards.
 *
 * Each answered open has the view's next batch planned on a read-ahead
 * thread (from materialized shards only) and its chunks read ahead, so
 * that a reader going through its batches in order finds the next open
 * planned and its chunks loading while it reads this one; a plan kept
 * that way is used for at most MFS_SNAP_TTL_NS, as the kept readers.
 *
 * Reads go through the chunk cache (fuse_cache.c), each segment's chunks
 * from its shard's data; a chunk all of whose bytes were served is let
 * go at once (an epoch reads each record once). Opens keep the kernel's
 * pages of a batch only while they are of the same computations
 * (open_answer). What a uid's batch handles hold is bounded as its shard
 * handles are (fuse_users.c).
 *
 * Not for: the tree's names and inodes (fuse_btree.c) or the order (the
 * engine, order/).
 */
#include "fuse_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#define BTAB_WAYS 4
#define BTAB_SETS (MFS_BTAB_SLOTS / BTAB_WAYS)
#define WANTED_MAX 64
#define PREFETCH_MAX 256 /* chunks an open sends to read-ahead */
#define AHEAD_SLOTS 16 /* batches planned ahead, of 8 views or more */
#define AHEAD_DEPTH 2 /* batches of a view planned ahead of its reader */
/* A batch planned ahead holds no reader's handle, so its shard readers
 * (each may hold a descriptor) are no one's to count: one that draws on
 * more shards is not kept ahead (at most AHEAD_SLOTS x this of them). */
#define AHEAD_DATAS_MAX 64
#define SEEN_SLOTS 4096 /* batch inodes whose cached pages are known */
#define HINTS 64 /* shards a plan finds its data of at once */
#define WIN_SLOTS 8 /* windows read ahead, of 8 epochs read at once */
#define WIN_TTL_NS 10000000000ULL
/* Batches of more records are planned on the workers, in their reader's
 * turn (a plan costs about 0.2 us a record: a big one would hold a FUSE
 * thread), and not planned ahead (its memory is no reader's). */
#define INLINE_MAX 16384
#define MAX_PIECES                                                             \
	1000 /* iovecs of a reply (IOV_MAX less libfuse's
			  * header); more are copied into one */

struct bt_ent {
	struct mfs_data *d; /* a reference; NULL: empty */
	uint64_t tick;
	uint64_t checked_ns; /* when its row last said it is current */
};

struct mfs_bfh;

/* A batch planned ahead: the next of a view whose batch was just opened,
 * planned on a read-ahead thread while its reader reads that one. */
struct ahead {
	char fp[MF_FP_HEX_LEN + 1]; /* "": empty */
	struct mf_engine_batch_view v;
	uint64_t k;
	uint64_t made_ns; /* 0: being planned */
	uint64_t tick;
	struct mfs_bfh *fh; /* its handle, no reader's yet; NULL: none */
};

/* A window of an epoch's order whose chunks were sent to be read ahead
 * (win_ahead): its epoch's order (fingerprint, seed, epoch) and first
 * place, for WIN_TTL_NS (an epoch read again later has them read ahead
 * again). */
struct win_seen {
	char fp[MF_FP_HEX_LEN + 1]; /* "": empty */
	bool shuffled;
	uint64_t seed, epoch, first;
	uint64_t made_ns;
};

/* lock is a leaf: nothing is taken or called under it but the table's
 * own bookkeeping (references are put after it is let go). */
struct mfs_btab {
	pthread_mutex_t lock;
	struct bt_ent v[MFS_BTAB_SLOTS];
	uint64_t tick;
	struct mfs_bfh *fhs; /* every batch handle open */
	struct ahead ahead[AHEAD_SLOTS];
	pthread_cond_t ahead_done; /* an ahead slot was filled or let go */
	struct win_seen wins[WIN_SLOTS]; /* windows read ahead lately */
	size_t wins_at; /* the next one replaced */
	/* what the kernel may hold in the pages of a batch inode: the
	 * computations of the open that last let it keep them (an inode not
	 * here: unknown, its pages dropped at the next open) */
	struct {
		fuse_ino_t ino;
		uint64_t sig;
	} seen[SEEN_SLOTS];
};

/* One segment of an open batch: at `at` in the batch, bytes [off, off +
 * len) of d's shard, or of lit. */
struct bseg {
	uint64_t at, off, len;
	const uint8_t *lit;
	struct mfs_data *d; /* borrowed from the handle's datas */
};

struct mfs_bfh {
	struct mfs_bfh *prev, *next; /* btab->fhs, under its lock */
	fuse_ino_t ino;
	uid_t uid; /* counted by mfs_user_take, once counted */
	bool counted; /* false: planned ahead, no open's yet */
	size_t units, plan_bytes; /* taken beyond its handle (users) */
	uint64_t sig; /* of the computations its bytes are (fh_sig) */
	uint64_t size;
	size_t nsegs;
	struct bseg *segs;
	size_t ndatas;
	struct mfs_data **datas; /* references */
};

static void fh_free(struct mfs *m, struct mfs_bfh *fh);

int mfs_btab_new(struct mfs *m)
{
	struct mfs_btab *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	int rc = mf_mutex_init(&t->lock);
	if (rc) {
		free(t);
		return rc;
	}
	pthread_condattr_t ca;
	rc = -pthread_condattr_init(&ca);
	if (rc == 0) {
		(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		rc = -pthread_cond_init(&t->ahead_done, &ca);
		pthread_condattr_destroy(&ca);
	}
	if (rc) {
		pthread_mutex_destroy(&t->lock);
		free(t);
		return rc;
	}
	m->btab = t;
	return 0;
}

void mfs_btab_free(struct mfs *m)
{
	struct mfs_btab *t = m->btab;
	if (!t)
		return;
	mfs_batch_fhs_release(m);
	for (size_t i = 0; i < AHEAD_SLOTS; i++)
		if (t->ahead[i].fh)
			fh_free(m, t->ahead[i].fh);
	for (size_t i = 0; i < MFS_BTAB_SLOTS; i++)
		mfs_data_put(m, t->v[i].d);
	pthread_cond_destroy(&t->ahead_done);
	pthread_mutex_destroy(&t->lock);
	free(t);
	m->btab = NULL;
}

static size_t set_of(const char *fp, uint32_t shard)
{
	uint64_t h = 1469598103934665603ULL;
	for (const char *p = fp; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	h ^= shard;
	h *= 0xff51afd7ed558ccdULL;
	return (size_t)((h ^ (h >> 32)) % BTAB_SETS) * BTAB_WAYS;
}

/* The kept data of fp's shard (a reference), or NULL; *fresh when its
 * row said it is current less than MFS_SNAP_TTL_NS ago. */
static struct mfs_data *tab_find(struct mfs *m, const char *fp, uint32_t shard,
				 bool *fresh)
{
	struct mfs_btab *t = m->btab;
	struct mfs_data *d = NULL;
	size_t s = set_of(fp, shard);
	uint64_t now = mf_mono_ns();
	*fresh = false;
	pthread_mutex_lock(&t->lock);
	for (size_t i = s; i < s + BTAB_WAYS && !d; i++) {
		struct mfs_data *x = t->v[i].d;
		if (x && x->shard == shard && strcmp(x->fp, fp) == 0) {
			d = x;
			mfs_data_get(d);
			t->v[i].tick = ++t->tick;
			*fresh = now - t->v[i].checked_ns < MFS_SNAP_TTL_NS;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return d;
}

/* Keeps d (one more reference) in place of its shard's data, or of the
 * least recently used of its set. */
static void tab_put(struct mfs *m, struct mfs_data *d)
{
	struct mfs_btab *t = m->btab;
	size_t s = set_of(d->fp, d->shard), at = s;
	pthread_mutex_lock(&t->lock);
	for (size_t i = s; i < s + BTAB_WAYS; i++) {
		struct mfs_data *x = t->v[i].d;
		if (!x || (x->shard == d->shard && strcmp(x->fp, d->fp) == 0)) {
			at = i;
			break;
		}
		if (t->v[i].tick < t->v[at].tick)
			at = i;
	}
	struct mfs_data *old = t->v[at].d;
	if (old == d)
		old = NULL; /* the same: checked again */
	else
		mfs_data_get(d);
	t->v[at] = (struct bt_ent){d, ++t->tick, mf_mono_ns()};
	pthread_mutex_unlock(&t->lock);
	mfs_data_put(m, old);
}

/* ---- planning: the shard supplier ---- */

struct bopen {
	struct mfs *m;
	fuse_req_t req;
	struct fuse_file_info fi;
	fuse_ino_t ino;
	char fp[MF_FP_HEX_LEN + 1];
	struct mf_engine_batch_view v;
	uint64_t k;
	int64_t created;
	uid_t uid;
	bool compute; /* the supplier may compute: on a worker only */
	size_t nwarmed;
	uint32_t warmed[WANTED_MAX]; /* shards given to other workers */
	size_t ndatas, cap;
	struct mfs_data **datas; /* references, each shard once */
	size_t hint[HINTS]; /* 1 + the index in datas of a shard of that
			     * hash, or 0; checked before use */
};

static bool have_same(void *arg, const struct mf_engine_shard *rec)
{
	struct mfs_data *d = arg;
	return d && d->gen == rec->generation;
}

/* The current data of o's shard: the kept one while it is that
 * computation (its row read again at most once a MFS_SNAP_TTL_NS), else a
 * new reader (kept), computing the shard when o may (-EAGAIN when it may
 * not and must). A reference. */
static int shard_data(struct bopen *o, uint32_t shard, struct mfs_data **out,
		      char **err)
{
	struct mfs *m = o->m;
	bool fresh;
	struct mfs_data *d = tab_find(m, o->fp, shard, &fresh);
	if (d && fresh) {
		*out = d;
		return 0;
	}
	struct mf_shard_reader *r = NULL;
	struct mf_engine_shard rec;
	int rc = mf_engine_open_materialized(m->eng, o->fp, shard, have_same, d,
					     &r, &rec);
	bool adopt = false;
	if (rc == -EAGAIN && o->compute) {
		rc = mf_engine_open_shard_rec(m->eng, o->fp, shard, &r, &rec,
					      err);
		adopt = true;
	}
	if (rc == 0 && r) { /* another computation than the one kept */
		mfs_data_put(m, d);
		d = NULL;
		rc = mfs_data_new(m, &rec, r, adopt, o->created, &d);
		if (adopt)
			mfs_cache_unstage(m->cache);
	}
	if (rc == 0)
		tab_put(m, d); /* kept, or checked again */
	if (rc == 0)
		mf_engine_shard_release(&rec);
	if (rc) {
		mfs_data_put(m, d);
		return rc;
	}
	*out = d;
	return 0;
}

static void warm_ahead(struct bopen *o, uint32_t own);

static int supply(void *arg, uint32_t shard, struct mf_shard_reader **r,
		  char **err)
{
	struct bopen *o = arg;
	if (o->compute)
		warm_ahead(o, shard);
	size_t *h = &o->hint[shard % HINTS];
	if (*h && *h <= o->ndatas && o->datas[*h - 1]->shard == shard) {
		*r = o->datas[*h - 1]->r;
		return 0;
	}
	for (size_t i = o->ndatas; i-- > 0;) /* the last ones first */
		if (o->datas[i]->shard == shard) {
			*h = i + 1;
			*r = o->datas[i]->r;
			return 0;
		}
	if (o->ndatas == o->cap) {
		size_t c = o->cap ? o->cap * 2 : 16;
		void *p = realloc(o->datas, c * sizeof(*o->datas));
		if (!p)
			return -ENOMEM;
		o->datas = p;
		o->cap = c;
	}
	struct mfs_data *d;
	int rc = shard_data(o, shard, &d, err);
	if (rc)
		return rc;
	o->datas[o->ndatas++] = d;
	*h = o->ndatas;
	*r = d->r;
	return 0;
}

static void bopen_free(struct bopen *o)
{
	for (size_t i = 0; i < o->ndatas; i++)
		mfs_data_put(o->m, o->datas[i]);
	free(o->datas);
	free(o);
}

/* ---- handles ---- */

static void fh_free(struct mfs *m, struct mfs_bfh *fh)
{
	for (size_t i = 0; i < fh->ndatas; i++)
		mfs_data_put(m, fh->datas[i]);
	free(fh->datas);
	free(fh->segs);
	if (fh->counted) {
		mfs_user_give_batch(m, fh->uid, fh->units, fh->plan_bytes);
		mfs_user_give(m, fh->uid, MFS_HANDLE_SHARD);
	}
	free(fh);
}

static void fh_unlink(struct mfs *m, struct mfs_bfh *fh)
{
	struct mfs_btab *t = m->btab;
	pthread_mutex_lock(&t->lock);
	if (fh->prev)
		fh->prev->next = fh->next;
	else
		t->fhs = fh->next;
	if (fh->next)
		fh->next->prev = fh->prev;
	pthread_mutex_unlock(&t->lock);
}

static int by_shard(const void *a, const void *b)
{
	uint32_t x = (*(struct mfs_data *const *)a)->shard;
	uint32_t y = (*(struct mfs_data *const *)b)->shard;
	return (x > y) - (x < y);
}

/* o's data of shard (o->datas sorted by shard), or NULL. */
static struct mfs_data *data_of(const struct bopen *o, uint32_t shard)
{
	size_t h = o->hint[shard % HINTS];
	if (h && h <= o->ndatas && o->datas[h - 1]->shard == shard)
		return o->datas[h - 1];
	size_t lo = 0, hi = o->ndatas;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint32_t x = o->datas[mid]->shard;
		if (x == shard)
			return o->datas[mid];
		if (x < shard)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* A handle on plan p, taking o's data references over. */
static int fh_make(struct bopen *o, const struct mf_engine_batch_plan *p,
		   struct mfs_bfh **out)
{
	struct mfs_bfh *fh = calloc(1, sizeof(*fh));
	if (!fh)
		return -ENOMEM;
	fh->segs = calloc(p->nsegs ? p->nsegs : 1, sizeof(*fh->segs));
	if (!fh->segs) {
		free(fh);
		return -ENOMEM;
	}
	uint64_t at = 0;
	qsort(o->datas, o->ndatas, sizeof(*o->datas), by_shard);
	for (size_t i = 0; i < o->ndatas; i++)
		o->hint[o->datas[i]->shard % HINTS] = i + 1;
	for (size_t i = 0; i < p->nsegs; i++) {
		const struct mf_engine_batch_seg *s = &p->segs[i];
		struct bseg *b = &fh->segs[i];
		*b = (struct bseg){at, s->off, s->len, s->lit, NULL};
		if (!s->lit)
			b->d = data_of(o, s->shard);
		if (!s->lit &&
		    (!b->d || s->off > b->d->st.raw_bytes ||
		     s->len > b->d->st.raw_bytes - s->off)) {
			free(fh->segs);
			free(fh);
			return -ESTALE; /* a shard shorter than planned */
		}
		at += s->len;
	}
	fh->nsegs = p->nsegs;
	fh->size = at;
	fh->ino = o->ino;
	fh->uid = o->uid;
	fh->counted = o->req != NULL; /* an open's, not planned ahead */
	fh->datas = o->datas;
	fh->ndatas = o->ndatas;
	o->datas = NULL;
	o->ndatas = o->cap = 0;
	*out = fh;
	return 0;
}

/* The first and the last chunk segment s (of shard bytes, not empty)
 * reads. */
static void seg_chunks(const struct bseg *s, uint32_t *first, uint32_t *last)
{
	uint64_t cs = s->d->st.chunk_size;
	*first = (uint32_t)(s->off / cs);
	*last = (uint32_t)((s->off + s->len - 1) / cs);
}

/* Has the chunks a new handle reads decompressed on the read-ahead
 * threads, in parallel, before its reads ask for them one by one. */
static void prefetch(struct mfs *m, const struct mfs_bfh *fh)
{
	struct mfs_data *last = NULL;
	uint32_t last_chunk = 0;
	unsigned sent = 0;
	for (size_t i = 0; i < fh->nsegs && sent < PREFETCH_MAX; i++) {
		const struct bseg *s = &fh->segs[i];
		if (s->lit || s->len == 0)
			continue;
		uint32_t c, end;
		seg_chunks(s, &c, &end);
		for (; c <= end && sent < PREFETCH_MAX; c++) {
			if (s->d == last && c == last_chunk)
				continue;
			mfs_ra_submit(m, s->d, c);
			last = s->d;
			last_chunk = c;
			sent++;
		}
	}
}

static void ahead_plan(struct bopen *o);

/* Which computations fh's bytes are: its shards' (sorted by shard) and
 * their generations, and its size. */
static uint64_t fh_sig(const struct mfs_bfh *fh)
{
	uint64_t h = fh->size ^ 0x9e3779b97f4a7c15ULL;
	for (size_t i = 0; i < fh->ndatas; i++) {
		h = (h ^ fh->datas[i]->shard) * 0xff51afd7ed558ccdULL;
		h = (h ^ fh->datas[i]->gen) * 0xc4ceb9fe1a85ec53ULL;
		h ^= h >> 33;
	}
	return h;
}

/*
 * Links fh (o's batch) into the open handles and answers o's open with
 * it; then has the view's next batch planned ahead. A batch's inode is
 * its name's, whatever computations of its shards it is read from, so
 * the kernel keeps its pages (FOPEN_KEEP_CACHE) only when the last open
 * that let it keep them read the same computations; otherwise the open
 * drops them. One made while a handle of other computations is still
 * open is ESTALE: the two would share the inode's pages (reading around
 * them, FOPEN_DIRECT_IO, is no way out: a MAP_PRIVATE mapping still
 * fills them), and a reader never gets bytes of two computations (the
 * rule of shards: docs/guide.md, "ls, rm and the store").
 */
static void open_answer(struct bopen *o, struct mfs_bfh *fh, bool fetch)
{
	struct mfs *m = o->m;
	struct mfs_btab *t = m->btab;
	/* each shard it draws on may hold a descriptor, and its plan memory */
	size_t units = fh->ndatas > 1 ? fh->ndatas - 1 : 0;
	size_t bytes = fh->nsegs * sizeof(*fh->segs);
	int rc = mfs_user_take_batch(m, o->uid, units, bytes);
	if (rc) {
		fh_free(m, fh); /* its handle given back */
		fuse_reply_err(o->req, -rc);
		return;
	}
	fh->units = units;
	fh->plan_bytes = bytes;
	fh->sig = fh_sig(fh);
	size_t at =
	    (size_t)((o->ino * 0x9e3779b97f4a7c15ULL) >> 52) % SEEN_SLOTS;
	bool other = false, keep = false;
	pthread_mutex_lock(&t->lock);
	for (const struct mfs_bfh *x = t->fhs; x && !other; x = x->next)
		other = x->ino == o->ino && x->sig != fh->sig;
	if (other) {
		pthread_mutex_unlock(&t->lock);
		fh_free(m, fh); /* its handle and units given back */
		fuse_reply_err(o->req, ESTALE);
		return;
	}
	keep = t->seen[at].ino == o->ino && t->seen[at].sig == fh->sig;
	t->seen[at].ino = o->ino;
	t->seen[at].sig = fh->sig;
	fh->next = t->fhs;
	fh->prev = NULL;
	if (t->fhs)
		t->fhs->prev = fh;
	t->fhs = fh;
	pthread_mutex_unlock(&t->lock);
	o->fi.fh = (uint64_t)(uintptr_t)fh;
	o->fi.keep_cache = keep;
	o->fi.direct_io = 0;
	o->fi.noflush = 1;
	if (fetch)
		prefetch(m, fh);
	if (fuse_reply_open(o->req, &o->fi) != 0) { /* no release */
		fh_unlink(m, fh);
		fh_free(m, fh);
	}
	ahead_plan(o);
}

/* Plans o's batch and answers its open. Frees o. */
static void open_finish(struct bopen *o, int rc_plan,
			struct mf_engine_batch_plan *p)
{
	struct mfs *m = o->m;
	struct mfs_bfh *fh = NULL;
	int rc = rc_plan ? rc_plan : fh_make(o, p, &fh);
	if (rc == 0) {
		open_answer(o, fh, true);
	} else {
		mfs_user_give(m, o->uid, MFS_HANDLE_SHARD);
		if (rc == -EBADMSG || rc == -EAGAIN)
			rc = -EIO;
		fuse_reply_err(o->req, -rc);
	}
	bopen_free(o);
}

static int plan(struct bopen *o, struct mf_engine_batch_plan *p, char **err)
{
	int rc = mf_engine_batch_plan(o->m->eng, o->fp, &o->v, o->k, supply, o,
				      p, err);
	if (rc == -ESTALE) { /* its order was dropped: once more */
		free(*err);
		*err = NULL;
		rc = mf_engine_batch_plan(o->m->eng, o->fp, &o->v, o->k, supply,
					  o, p, err);
	}
	return rc;
}

/* ---- planning ahead ---- */

static bool same_view(const struct mf_engine_batch_view *a,
		      const struct mf_engine_batch_view *b)
{
	return a->shuffled == b->shuffled && a->seed == b->seed &&
	    a->epoch == b->epoch && a->batch == b->batch &&
	    a->world == b->world && a->rank == b->rank && a->from == b->from;
}

static bool ahead_is(const struct ahead *a, const char *fp,
		     const struct mf_engine_batch_view *v, uint64_t k)
{
	return a->fp[0] && a->k == k && same_view(&a->v, v) &&
	    strcmp(a->fp, fp) == 0;
}

/* ---- the next window ----
 *
 * Every batch of a window draws on all of its records, so the first
 * batch of a window asks for every chunk of it at once, and a reader
 * going through an epoch in order would wait at each window for all of
 * them to decompress. While the view's batches of one window are read,
 * the next window's chunks are read on the window threads instead, as
 * many as the chunk cache holds beside this window's. */

struct win_job {
	struct mfs *m;
	char fp[MF_FP_HEX_LEN + 1];
	struct mf_engine_batch_view v;
	uint64_t cur, next; /* the first places of this window and the next */
	int64_t created;
};

/* The bytes of the chunks fh's segments are in, each chunk once (the
 * segments of a window are one per shard, in order). */
static uint64_t chunk_bytes(const struct mfs_bfh *fh)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < fh->nsegs; i++) {
		const struct bseg *s = &fh->segs[i];
		if (s->lit || s->len == 0)
			continue;
		uint32_t c, end;
		seg_chunks(s, &c, &end);
		sum += (uint64_t)(end - c + 1) * s->d->st.chunk_size;
	}
	return sum;
}

/* The window at place planned over materialized shards into *fh. */
static int win_plan(struct win_job *j, uint64_t place, struct mfs_bfh **fh)
{
	struct bopen *o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	*o = (struct bopen){.m = j->m, .v = j->v, .created = j->created};
	memcpy(o->fp, j->fp, sizeof(o->fp));
	struct mf_engine_batch_plan p = {0};
	struct mf_engine_batch_window w;
	char *err = NULL;
	int rc = mf_engine_batch_window(j->m->eng, j->fp, &j->v, place, supply,
					o, &w, &p, &err);
	if (rc == 0)
		rc = fh_make(o, &p, fh);
	free(err);
	mf_engine_batch_plan_release(&p);
	bopen_free(o);
	return rc;
}

static void win_run(void *arg, bool cancelled)
{
	struct win_job *j = arg;
	struct mfs *m = j->m;
	struct mfs_bfh *cur = NULL, *next = NULL;
	if (!cancelled && win_plan(j, j->cur, &cur) == 0 &&
	    win_plan(j, j->next, &next) == 0) {
		/* room beside this window's chunks and a margin for the
		 * reads of other files */
		uint64_t budget = m->o.cache_bytes, held = chunk_bytes(cur),
			 margin = budget / 8, room = 0;
		if (budget > held + margin)
			room = budget - held - margin;
		for (size_t i = 0; i < next->nsegs; i++) {
			const struct bseg *s = &next->segs[i];
			if (s->lit || s->len == 0)
				continue;
			uint64_t cs = s->d->st.chunk_size;
			uint32_t c, end;
			seg_chunks(s, &c, &end);
			for (; c <= end && room >= cs; c++, room -= cs)
				mfs_ra_submit_to(m, m->win_pool, s->d, c);
		}
	}
	if (cur)
		fh_free(m, cur);
	if (next)
		fh_free(m, next);
	free(j);
}

/* Has the window after the one global batch g of view v ends in read
 * ahead, once: when the view's reader entered a window. */
static void win_ahead(struct mfs *m, const char *fp,
		      const struct mf_engine_batch_view *v, uint64_t g,
		      int64_t created)
{
	uint64_t last;
	struct mf_engine_batch_window w, nw;
	char *err = NULL;
	if (!m->win_pool || mfs_pool_backlog(m->win_pool) > 0 ||
	    __builtin_add_overflow(g, 1, &last) ||
	    __builtin_mul_overflow(last, v->batch, &last) ||
	    mf_engine_batch_window(m->eng, fp, v, last - 1, NULL, NULL, &w,
				   NULL, &err) != 0 ||
	    mf_engine_batch_window(m->eng, fp, v, w.first + w.count, NULL, NULL,
				   &nw, NULL, &err) != 0 ||
	    w.shards > AHEAD_DATAS_MAX || nw.shards > AHEAD_DATAS_MAX) {
		free(err);
		return; /* busy with one, no such window, or one of more
			 * shards than a plan ahead may hold readers of */
	}
	uint64_t next = nw.first, now = mf_mono_ns();
	struct mfs_btab *t = m->btab;
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < WIN_SLOTS; i++) {
		struct win_seen *x = &t->wins[i];
		if (x->first == next && x->seed == v->seed &&
		    x->epoch == v->epoch && x->shuffled == v->shuffled &&
		    now - x->made_ns < WIN_TTL_NS && strcmp(x->fp, fp) == 0) {
			pthread_mutex_unlock(&t->lock);
			return; /* sent already */
		}
	}
	struct win_seen *x = &t->wins[t->wins_at++ % WIN_SLOTS];
	*x = (struct win_seen){"", v->shuffled, v->seed, v->epoch, next, now};
	memcpy(x->fp, fp, sizeof(x->fp));
	pthread_mutex_unlock(&t->lock);
	struct win_job *j = malloc(sizeof(*j));
	if (!j)
		return;
	*j = (struct win_job){m, "", *v, w.first, next, created};
	memcpy(j->fp, fp, sizeof(j->fp));
	if (mfs_pool_submit(m->win_pool, win_run, j) != 0)
		free(j);
}

struct ahead_job {
	struct mfs *m;
	char fp[MF_FP_HEX_LEN + 1];
	struct mf_engine_batch_view v;
	uint64_t k;
	uint64_t behind; /* batches from the open that asked for it to k */
	int64_t created;
};

/* Plans the job's batch from materialized shards only (nothing is
 * computed ahead), has its chunks read ahead, and leaves the handle in
 * its slot, if the slot is still its own. */
static void ahead_run(void *arg, bool cancelled)
{
	struct ahead_job *j = arg;
	struct mfs *m = j->m;
	struct mfs_bfh *fh = NULL;
	struct bopen *o = cancelled ? NULL : calloc(1, sizeof(*o));
	if (o) {
		*o = (struct bopen){
		    .m = m, .v = j->v, .k = j->k, .created = j->created};
		memcpy(o->fp, j->fp, sizeof(o->fp));
		struct mf_engine_batch_plan p = {0};
		char *err = NULL;
		if (plan(o, &p, &err) == 0 && fh_make(o, &p, &fh) == 0) {
			/* the window after the reader's, once it is in it:
			 * the one after the planned batch's would have three
			 * windows' chunks held at a window's end */
			uint64_t back = j->behind * j->v.world;
			if (p.global >= back)
				win_ahead(m, j->fp, &j->v, p.global - back,
					  j->created);
			if (fh->ndatas <= AHEAD_DATAS_MAX) {
				prefetch(m, fh); /* its chunks load */
			} else { /* the open plans it itself */
				fh_free(m, fh);
				fh = NULL;
			}
		}
		free(err);
		mf_engine_batch_plan_release(&p);
		bopen_free(o);
	}
	struct mfs_btab *t = m->btab;
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < AHEAD_SLOTS; i++) {
		struct ahead *a = &t->ahead[i];
		if (ahead_is(a, j->fp, &j->v, j->k) && a->made_ns == 0) {
			if (fh) {
				a->fh = fh;
				a->made_ns = mf_mono_ns();
				fh = NULL;
			} else {
				a->fp[0] =
				    '\0'; /* past the end, or not there */
			}
			break;
		}
	}
	pthread_cond_broadcast(&t->ahead_done);
	pthread_mutex_unlock(&t->lock);
	if (fh)
		fh_free(m, fh); /* its slot went to another view */
	free(j);
}

/* Has batch k of o's view planned on a read-ahead thread, unless it is
 * planned or being planned already. */
static void ahead_one(struct bopen *o, uint64_t k);

/* Has the view's next AHEAD_DEPTH batches planned (and assembled) ahead:
 * while its reader reads one, the next is being made. */
static void ahead_plan(struct bopen *o)
{
	if (o->v.batch > INLINE_MAX)
		return;
	for (uint64_t d = 1; d <= AHEAD_DEPTH; d++)
		ahead_one(o, o->k + d);
}

static void ahead_one(struct bopen *o, uint64_t k)
{
	struct mfs *m = o->m;
	struct mfs_btab *t = m->btab;
	struct ahead_job *j = malloc(sizeof(*j));
	if (!j)
		return;
	*j = (struct ahead_job){m, "", o->v, k, k - o->k, o->created};
	memcpy(j->fp, o->fp, sizeof(j->fp));
	struct mfs_bfh *old = NULL;
	size_t at = 0;
	pthread_mutex_lock(&t->lock);
	uint64_t now = mf_mono_ns();
	struct mfs_bfh *stale[AHEAD_SLOTS];
	size_t nstale = 0;
	for (size_t i = 0; i < AHEAD_SLOTS; i++) {
		struct ahead *x = &t->ahead[i];
		if (x->fh && now - x->made_ns >= MFS_SNAP_TTL_NS) {
			stale[nstale++] = x->fh; /* no open will take it */
			x->fh = NULL;
			x->fp[0] = '\0';
		}
	}
	for (size_t i = 0; i < AHEAD_SLOTS; i++) {
		if (ahead_is(&t->ahead[i], o->fp, &o->v, k)) {
			pthread_mutex_unlock(&t->lock);
			for (size_t s = 0; s < nstale; s++)
				fh_free(m, stale[s]);
			free(j);
			return;
		}
		if (t->ahead[i].tick < t->ahead[at].tick)
			at = i;
	}
	struct ahead *a = &t->ahead[at];
	old = a->fh;
	*a = (struct ahead){.v = o->v, .k = k, .tick = ++t->tick};
	memcpy(a->fp, o->fp, sizeof(a->fp));
	pthread_mutex_unlock(&t->lock);
	for (size_t s = 0; s < nstale; s++)
		fh_free(m, stale[s]);
	if (old)
		fh_free(m, old);
	if (mfs_pool_submit(m->ra_pool, ahead_run, j) != 0) {
		pthread_mutex_lock(&t->lock);
		if (ahead_is(a, o->fp, &o->v, k) && a->made_ns == 0)
			a->fp[0] = '\0';
		pthread_cond_broadcast(&t->ahead_done);
		pthread_mutex_unlock(&t->lock);
		free(j);
	}
}

/* The handle planned ahead for fp's batch k of view v, taken out of its
 * slot, while it is younger than a catalog re-read (as the kept shard
 * readers it holds); NULL when there is none. One being planned is
 * waited for, up to AHEAD_WAIT_NS: planning it again here would do its
 * work twice. */
#define AHEAD_WAIT_NS 500000000ULL
static struct mfs_bfh *ahead_take(struct mfs *m, const char *fp,
				  const struct mf_engine_batch_view *v,
				  uint64_t k)
{
	struct mfs_btab *t = m->btab;
	struct mfs_bfh *fh = NULL, *stale = NULL;
	uint64_t until = mf_mono_ns() + AHEAD_WAIT_NS;
	pthread_mutex_lock(&t->lock);
	for (;;) {
		struct ahead *a = NULL;
		for (size_t i = 0; i < AHEAD_SLOTS && !a; i++)
			if (ahead_is(&t->ahead[i], fp, v, k))
				a = &t->ahead[i];
		uint64_t now = mf_mono_ns();
		if (a && !a->fh && a->made_ns == 0 && now < until) {
			struct timespec ts = {(time_t)(until / 1000000000ULL),
					      (long)(until % 1000000000ULL)};
			(void)pthread_cond_timedwait(&t->ahead_done, &t->lock,
						     &ts);
			continue;
		}
		if (a && a->fh) {
			if (now - a->made_ns < MFS_SNAP_TTL_NS)
				fh = a->fh;
			else
				stale = a->fh;
			a->fh = NULL;
			a->fp[0] = '\0';
		}
		break;
	}
	pthread_mutex_unlock(&t->lock);
	if (stale)
		fh_free(m, stale);
	return fh;
}

struct warm_job {
	struct mfs *m;
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	int64_t created;
};

/* Computes one shard a cold batch needs (its data kept for the batch). */
static void warm_run(void *arg, bool cancelled)
{
	struct warm_job *j = arg;
	struct bopen o = {.m = j->m, .created = j->created, .compute = true};
	memcpy(o.fp, j->fp, sizeof(o.fp));
	struct mfs_data *d;
	char *err = NULL;
	if (!cancelled && shard_data(&o, j->shard, &d, &err) == 0)
		mfs_data_put(j->m, d);
	free(err);
	free(j);
}

/* Has the shards the order needs next for o's batch, after own (this
 * job's to compute), computed by other workers, as many as there are:
 * asked again before each shard the job computes, so that a group of
 * many shards computes workers at a time. Each shard is given once. */
static void warm_ahead(struct bopen *o, uint32_t own)
{
	struct mfs *m = o->m;
	uint32_t shards[WANTED_MAX];
	size_t n = 0, cap = m->o.workers ? m->o.workers : m->cores;
	char *err = NULL;
	if (cap > WANTED_MAX)
		cap = WANTED_MAX;
	if (mf_engine_batch_wanted(m->eng, o->fp, &o->v, o->k, shards, cap, &n,
				   &err) != 0)
		n = 0;
	free(err);
	for (size_t i = 0; i < n && o->nwarmed < WANTED_MAX; i++) {
		bool given = shards[i] == own;
		for (size_t j = 0; j < o->nwarmed && !given; j++)
			given = o->warmed[j] == shards[i];
		if (given)
			continue;
		struct warm_job *j = malloc(sizeof(*j));
		if (!j)
			break;
		*j = (struct warm_job){m, "", shards[i], o->created};
		memcpy(j->fp, o->fp, sizeof(j->fp));
		if (mfs_pool_submit_keyed(m->open_pool, o->uid, warm_run, j,
					  NULL)) {
			free(j);
			break;
		}
		o->warmed[o->nwarmed++] = shards[i];
	}
}

static void open_job_run(void *arg, bool cancelled)
{
	struct bopen *o = arg;
	struct mf_engine_batch_plan p = {0};
	char *err = NULL;
	int rc = -ENODEV;
	if (!cancelled)
		rc = plan(o, &p, &err);
	if (rc && rc != -ENOENT && !cancelled) {
		char l[MFS_LABEL_MAX];
		mfs_logf(o->m, MFS_LOG_WARN, "batch %llu of %s: %s",
			 (unsigned long long)o->k,
			 mfs_label(o->m, o->fp, l, sizeof(l)),
			 err ? err : strerror(-rc));
	}
	free(err);
	open_finish(o, rc, &p);
	mf_engine_batch_plan_release(&p);
}

void mfs_batch_open(fuse_req_t req, fuse_ino_t ino, const struct mfs_inode *in,
		    struct fuse_file_info *fi)
{
	struct mfs *m = fuse_req_userdata(req);
	uid_t uid = mfs_reader_uid(fuse_req_ctx(req)->uid);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EACCES);
		return;
	}
	int rc = mfs_user_take(m, uid, MFS_HANDLE_SHARD);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	struct bopen *o = calloc(1, sizeof(*o));
	if (!o) {
		mfs_user_give(m, uid, MFS_HANDLE_SHARD);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	*o = (struct bopen){.m = m,
			    .req = req,
			    .fi = *fi,
			    .ino = ino,
			    .v = in->bkey.v,
			    .k = in->batch,
			    .created = in->si.created,
			    .uid = uid};
	memcpy(o->fp, in->si.fp, sizeof(o->fp));
	struct mfs_bfh *fh = ahead_take(m, o->fp, &o->v, o->k);
	if (fh) { /* planned while the view's batch before was read */
		fh->ino = ino;
		fh->uid = uid;
		fh->counted = true;
		open_answer(o, fh, false);
		bopen_free(o);
		return;
	}
	struct mf_engine_batch_plan p = {0};
	char *err = NULL;
	/* materialized shards only; a big batch is the workers' to plan
	 * (but for a stage of this daemon, which may wait for no worker) */
	rc = o->v.batch > INLINE_MAX &&
		!mf_engine_runs_process(m->eng, fuse_req_ctx(req)->pid)
	    ? -EAGAIN
	    : plan(o, &p, &err);
	free(err);
	if (rc == -EAGAIN) {
		mf_engine_batch_plan_release(&p);
		if (mf_engine_runs_process(m->eng, fuse_req_ctx(req)->pid)) {
			char l[MFS_LABEL_MAX];
			mfs_logf(m, MFS_LOG_WARN,
				 "batch %llu of %s: opened by a stage of this "
				 "daemon while its shards are not "
				 "materialized: refused (EDEADLK); "
				 "materialize them first (matctl warm)",
				 (unsigned long long)o->k,
				 mfs_label(m, o->fp, l, sizeof(l)));
			open_finish(o, -EDEADLK, NULL);
			return;
		}
		for (size_t i = 0; i < o->ndatas; i++)
			mfs_data_put(m, o->datas[i]);
		o->ndatas = 0;
		o->compute = true;
		rc = mfs_pool_submit_keyed(m->open_pool, uid, open_job_run, o,
					   NULL);
		if (rc)
			open_finish(o, rc, NULL);
		return;
	}
	open_finish(o, rc, &p);
	mf_engine_batch_plan_release(&p);
}

int mfs_batch_record_ends(struct mfs *m, const struct mfs_inode *in,
			  uint64_t **ends, size_t *n)
{
	struct bopen *o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	*o = (struct bopen){
	    .m = m, .v = in->bkey.v, .k = in->batch, .created = in->si.created};
	memcpy(o->fp, in->si.fp, sizeof(o->fp));
	char *err = NULL;
	int rc = mf_engine_batch_record_ends(m->eng, o->fp, &o->v, o->k, supply,
					     o, ends, n, &err);
	free(err);
	bopen_free(o);
	return rc;
}

bool mfs_batch_held(struct mfs *m, fuse_ino_t ino, uint64_t *size)
{
	struct mfs_btab *t = m->btab;
	bool held = false;
	pthread_mutex_lock(&t->lock);
	for (struct mfs_bfh *fh = t->fhs; fh && !held; fh = fh->next)
		if (fh->ino == ino) {
			*size = fh->size;
			held = true;
		}
	pthread_mutex_unlock(&t->lock);
	return held;
}

uint64_t mfs_batch_fh_size(uint64_t fh)
{
	return ((const struct mfs_bfh *)(uintptr_t)fh)->size;
}

void mfs_batch_release(struct mfs *m, struct fuse_file_info *fi)
{
	struct mfs_bfh *fh = (struct mfs_bfh *)(uintptr_t)fi->fh;
	fh_unlink(m, fh);
	fh_free(m, fh);
}

void mfs_batch_fhs_release(struct mfs *m)
{
	struct mfs_btab *t = m->btab;
	for (;;) {
		pthread_mutex_lock(&t->lock);
		struct mfs_bfh *fh = t->fhs;
		pthread_mutex_unlock(&t->lock);
		if (!fh)
			return;
		fh_unlink(m, fh);
		fh_free(m, fh);
	}
}

/* ---- read ---- */

/* The pieces of a read reply: iovecs and the chunk references they
 * borrow from. */
#define MEMO 64 /* a power of 2 */
struct pieces {
	size_t n, cap, nref, refcap;
	struct iovec *iov;
	void **ref;
	size_t *served; /* bytes of ref[i]'s chunk in the reply */
	/* chunks this reply holds already, by a hash of the data and the
	 * chunk (d NULL: none): a read of small records draws on the same
	 * chunks of a window, a few dozen, many times */
	struct {
		const struct mfs_data *d;
		uint32_t chunk;
		struct mfs_chunk ch;
		size_t refi; /* its index in ref */
	} memo[MEMO];
};

static unsigned memo_slot(const struct mfs_data *d, uint32_t chunk)
{
	uint64_t h = (d->id * 0x9e3779b97f4a7c15ULL) ^ chunk;
	h *= 0xff51afd7ed558ccdULL;
	return (unsigned)(h >> 58) & (MEMO - 1);
}

static int piece_add(struct pieces *p, const void *buf, size_t len, void *ref)
{
	if (p->n == p->cap) {
		size_t c = p->cap ? p->cap * 2 : 16;
		void *q = realloc(p->iov, c * sizeof(*p->iov));
		if (!q)
			return -ENOMEM;
		p->iov = q;
		p->cap = c;
	}
	if (ref && p->nref == p->refcap) {
		size_t c = p->refcap ? p->refcap * 2 : 16;
		void *q = realloc(p->ref, c * sizeof(*p->ref));
		if (!q)
			return -ENOMEM;
		p->ref = q;
		if (!(q = realloc(p->served, c * sizeof(*p->served))))
			return -ENOMEM;
		p->served = q;
		p->refcap = c;
	}
	p->iov[p->n++] = (struct iovec){(void *)buf, len};
	if (ref) {
		p->served[p->nref] = len;
		p->ref[p->nref++] = ref;
	}
	return 0;
}

/* Bytes [off, off + len) of segment s's shard, chunk by chunk. */
static int seg_pieces(struct mfs *m, const struct bseg *s, uint64_t off,
		      uint64_t len, struct pieces *p)
{
	struct mfs_data *d = s->d;
	uint64_t cs = d->st.chunk_size, pos = s->off + off, end = pos + len;
	while (pos < end) {
		uint32_t c = (uint32_t)(pos / cs);
		struct mfs_chunk ch = {0};
		void *ref = NULL;
		int rc = 0;
		unsigned i = memo_slot(d, c);
		if (p->memo[i].d == d && p->memo[i].chunk == c) {
			ch = p->memo[i].ch; /* held by an earlier piece */
		} else {
			if ((rc = mfs_cache_read(m->cache, d, c, &ch, &ref)))
				return rc;
			p->memo[i].d = d;
			p->memo[i].chunk = c;
			p->memo[i].ch = ch;
			p->memo[i].refi = p->nref; /* piece_add puts it there */
		}
		uint64_t in = pos - (uint64_t)c * cs;
		if (in >= ch.len) {
			if (ref)
				mfs_cache_unref(m->cache, ref);
			return MF_CORRUPT("a chunk is shorter than its place");
		}
		size_t n =
		    (size_t)(ch.len - in < end - pos ? ch.len - in : end - pos);
		if ((rc = piece_add(p, ch.buf + in, n, ref))) {
			if (ref)
				mfs_cache_unref(m->cache, ref);
			return rc;
		}
		if (!ref)
			p->served[p->memo[i].refi] += n;
		pos += n;
	}
	return 0;
}

/* A buffer of at least size bytes, the calling thread's (kept for its
 * next read: a read's worth allocated and freed each time costs an mmap
 * and its page faults), freed when the thread ends. */
static pthread_key_t flat_key;
static pthread_once_t flat_once = PTHREAD_ONCE_INIT;
struct flat {
	size_t cap;
	char buf[];
};

static void flat_make(void)
{
	if (pthread_key_create(&flat_key, free) != 0)
		abort(); /* no key left: cannot go on */
}

static char *flat_buf(size_t size)
{
	(void)pthread_once(&flat_once, flat_make);
	struct flat *f = pthread_getspecific(flat_key);
	if (f && f->cap >= size)
		return f->buf;
	size_t cap = size < (1u << 20) ? 1u << 20 : size;
	struct flat *g = malloc(sizeof(*g) + cap);
	if (!g || pthread_setspecific(flat_key, g) != 0) {
		free(g);
		return NULL;
	}
	free(f);
	g->cap = cap;
	return g->buf;
}

static void read_error(struct mfs *m, fuse_req_t req, const struct bseg *s,
		       int rc)
{
	if (rc == -EBADMSG && s && s->d) {
		char l[MFS_LABEL_MAX];
		mfs_logf(m, MFS_LOG_ERR,
			 "shard %u of %s: corrupt chunk (%s, %s), read for a "
			 "batch: it will be computed again",
			 s->d->shard, mfs_label(m, s->d->fp, l, sizeof(l)),
			 mf_corrupt_reason(), mf_corrupt_where());
		(void)mf_engine_report_corrupt(m->eng, s->d->fp, s->d->shard,
					       s->d->gen);
		rc = -EIO;
	}
	fuse_reply_err(req, -rc);
}

/* The pieces of bytes [pos, pos + size) of fh into p; *bad is the
 * segment whose chunk failed. */
static int gather(struct mfs *m, const struct mfs_bfh *fh, uint64_t pos,
		  size_t size, struct pieces *p, const struct bseg **bad)
{
	/* the segment holding pos: the last with at <= pos */
	size_t lo = 0, hi = fh->nsegs;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (fh->segs[mid].at <= pos)
			lo = mid;
		else
			hi = mid;
	}
	int rc = 0;
	uint64_t end = pos + size;
	for (size_t i = lo; rc == 0 && i < fh->nsegs && pos < end; i++) {
		const struct bseg *s = &fh->segs[i];
		uint64_t in = pos - s->at;
		uint64_t n = s->len - in < end - pos ? s->len - in : end - pos;
		if (s->lit)
			rc = piece_add(p, s->lit + in, (size_t)n, NULL);
		else if ((rc = seg_pieces(m, s, in, n, p)))
			*bad = s;
		pos += n;
	}
	return rc;
}

/* Gives back the chunks p borrowed (served: its bytes went out). */
static void pieces_release(struct mfs *m, struct pieces *p, bool served)
{
	/* an epoch reads each record once: chunks all read are let go */
	for (size_t i = 0; i < p->nref; i++)
		mfs_cache_unref_served(m->cache, p->ref[i],
				       served ? p->served[i] : 0);
	free(p->iov);
	free(p->ref);
	free(p->served);
}

void mfs_batch_read(fuse_req_t req, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct mfs *m = fuse_req_userdata(req);
	struct mfs_bfh *fh = (struct mfs_bfh *)(uintptr_t)fi->fh;
	if (off < 0 || (uint64_t)off >= fh->size || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	uint64_t pos = (uint64_t)off;
	if (size > fh->size - pos)
		size = (size_t)(fh->size - pos);
	struct pieces p = {0};
	const struct bseg *bad = NULL;
	int rc = gather(m, fh, pos, size, &p, &bad);
	char *flat = NULL;
	/* past what one writev takes, or pieces so small that pinning each
	 * page of them in the kernel costs more than one copy here */
	if (rc == 0 && (p.n > MAX_PIECES || (p.n > 8 && size / p.n < 4096))) {
		if (!(flat = flat_buf(size))) {
			rc = -ENOMEM;
		} else {
			size_t at = 0;
			for (size_t i = 0; i < p.n; i++) {
				memcpy(flat + at, p.iov[i].iov_base,
				       p.iov[i].iov_len);
				at += p.iov[i].iov_len;
			}
			p.iov[0] = (struct iovec){flat, size};
			p.n = 1;
		}
	}
	bool served = false;
	if (rc)
		read_error(m, req, bad, rc);
	else if ((served = fuse_reply_iov(req, p.iov, (int)p.n) == 0))
		atomic_fetch_add_explicit(&m->bytes_served, size,
					  memory_order_relaxed);
	pieces_release(m, &p, served);
}
