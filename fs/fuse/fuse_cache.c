/*
 * fuse_cache.c - the cache of decompressed chunks, bounded by a memory
 * budget (-o cache=SIZE). A chunk is decompressed once however many
 * readers and read-ahead jobs want it: the first one loads it, the others
 * wait for it. The least recently used chunks that nobody holds go first
 * when the budget is exceeded; a chunk being read is never freed.
 *
 * Keys are (data id, chunk index): a data id names one opened committed
 * file, so chunks of a recomputed shard never mix with the old ones.
 *
 * The engine's chunk events (mfs_cache_tap) put the raw chunks of a shard
 * being materialized here as they are produced (those fuse_push.c did not
 * put in the kernel's page cache), while the budget has
 * room (readers' chunks nobody holds make way, another computation's
 * never), under a stage id no data has: one computation (fp, shard,
 * generation) per stage. The thread that received the events (the open job
 * that ran the materialization) gives the stage id to the data it makes
 * for the committed file (mfs_cache_adopt), so its first reader
 * decompresses nothing; a failed computation's chunks are dropped, and so
 * are a stage's that nobody adopted when its thread is done.
 *
 * Not for: deciding what to read ahead (fuse_open.c).
 */
#include "fuse_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct centry {
	struct centry *hnext; /* hash chain */
	struct centry *prev, *next; /* LRU list, most recent first */
	uint64_t data_id;
	uint32_t chunk;
	unsigned refs;
	int state; /* LOADING, READY or a negative errno */
	struct mf_corrupt_note note; /* why, when state is -EBADMSG */
	bool linked; /* in the hash and the LRU list */
	uint8_t *buf;
	size_t len, cap; /* bytes of the chunk, of buf */
	uint64_t served; /* bytes mfs_cache_unref_served said were read */
	bool spent; /* served whole while others held it: freed at the last
		     * unref */
};

/* A buffer kept for the next chunk: faulted-in memory saves the page
 * faults and zeroing a fresh 4 MiB allocation costs on every load. Kept
 * buffers and cached chunks together stay within the budget. Buffers come
 * from mf_buf_alloc: the stages' forks leave them alone. */
struct fbuf {
	struct fbuf *next;
	size_t cap;
};
#define FREE_MAX (64ULL << 20)

enum { LOADING = 1, READY = 0 };

/* Stage ids: above every data id (mfs.next_data_id counts from 1). */
#define STAGE_ID_BASE (1ULL << 63)

/* The chunks of one computation, cached under id. */
struct stage {
	struct stage *next;
	pthread_t owner; /* the thread the engine calls for it */
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	uint64_t generation;
	uint64_t id;
	uint32_t next_chunk; /* chunks offered so far */
	bool full; /* a chunk was left out: so is the rest */
	bool committed;
	struct mf_engine_file st; /* when committed */
};

struct mfs_cache {
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t loaded;
	struct centry **tab; /* power-of-2 buckets */
	size_t cap, n;
	struct centry lru; /* sentinel */
	uint64_t budget, used;
	struct fbuf *spare; /* buffers to reuse, at most free_max bytes */
	uint64_t spare_bytes, free_max;
	struct stage *stages;
	uint64_t next_stage;
	/* counters, read without the lock (mfs_cache_counts) */
	atomic_uint_fast64_t loads; /* chunks decompressed */
	atomic_uint_fast64_t tapped; /* chunks taken from a tap */
	atomic_uint_fast64_t hits, misses; /* readers' asks (mfs_cache_read) */
};

int mfs_cache_new(uint64_t budget, struct mfs_cache **out)
{
	struct mfs_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cap = 1024;
	c->tab = calloc(c->cap, sizeof(*c->tab));
	if (!c->tab) {
		free(c);
		return -ENOMEM;
	}
	(void)mf_mutex_init(&c->lock);
	pthread_cond_init(&c->loaded, NULL);
	c->lru.next = c->lru.prev = &c->lru;
	c->budget = budget;
	c->next_stage = STAGE_ID_BASE;
	c->free_max = budget / 4 < FREE_MAX ? budget / 4 : FREE_MAX;
	*out = c;
	return 0;
}

/* A buffer of at least len bytes, reused when one fits; caller holds the
 * lock. NULL when out of memory. */
static uint8_t *buf_take(struct mfs_cache *c, size_t len, size_t *cap)
{
	for (struct fbuf **p = &c->spare; *p; p = &(*p)->next) {
		struct fbuf *b = *p;
		if (b->cap >= len && b->cap <= 2 * len + 4096) {
			*p = b->next;
			c->spare_bytes -= b->cap;
			*cap = b->cap;
			return (uint8_t *)b;
		}
	}
	return mf_buf_alloc(
	    len < sizeof(struct fbuf) ? sizeof(struct fbuf) : len, cap);
}

/* Keeps buf for reuse, or frees it; caller holds the lock. */
static void buf_give(struct mfs_cache *c, uint8_t *buf, size_t cap)
{
	if (!buf)
		return;
	if (c->spare_bytes + cap > c->free_max ||
	    c->used + c->spare_bytes + cap > c->budget) {
		mf_buf_free(buf, cap);
		return;
	}
	struct fbuf *b = (struct fbuf *)(void *)buf;
	b->cap = cap;
	b->next = c->spare;
	c->spare = b;
	c->spare_bytes += cap;
}

static void entry_free(struct mfs_cache *c, struct centry *e)
{
	buf_give(c, e->buf, e->cap);
	free(e);
}

void mfs_cache_free(struct mfs_cache *c)
{
	if (!c)
		return;
	while (c->lru.next != &c->lru) {
		struct centry *e = c->lru.next;
		c->lru.next = e->next;
		mf_buf_free(e->buf, e->cap);
		free(e);
	}
	while (c->spare) {
		struct fbuf *b = c->spare;
		c->spare = b->next;
		mf_buf_free(b, b->cap);
	}
	while (c->stages) {
		struct stage *g = c->stages;
		c->stages = g->next;
		free(g);
	}
	free(c->tab);
	pthread_cond_destroy(&c->loaded);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static size_t bucket(const struct mfs_cache *c, uint64_t id, uint32_t chunk)
{
	uint64_t h =
	    (id * 0x9e3779b97f4a7c15ULL) ^ (chunk * 0xff51afd7ed558ccdULL);
	return (size_t)(h ^ (h >> 29)) & (c->cap - 1);
}

static struct centry *find(struct mfs_cache *c, uint64_t id, uint32_t chunk)
{
	for (struct centry *e = c->tab[bucket(c, id, chunk)]; e; e = e->hnext)
		if (e->data_id == id && e->chunk == chunk)
			return e;
	return NULL;
}

static void grow(struct mfs_cache *c)
{
	size_t old_cap = c->cap;
	struct centry **old = c->tab;
	struct centry **tab = calloc(old_cap * 2, sizeof(*tab));
	if (!tab)
		return; /* longer chains, still correct */
	c->tab = tab;
	c->cap = old_cap * 2;
	for (size_t i = 0; i < old_cap; i++) {
		while (old[i]) {
			struct centry *e = old[i];
			old[i] = e->hnext;
			size_t b = bucket(c, e->data_id, e->chunk);
			e->hnext = tab[b];
			tab[b] = e;
		}
	}
	free(old);
}

static void lru_remove(struct centry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

static void lru_front(struct mfs_cache *c, struct centry *e)
{
	e->next = c->lru.next;
	e->prev = &c->lru;
	c->lru.next->prev = e;
	c->lru.next = e;
}

static void link_entry(struct mfs_cache *c, struct centry *e)
{
	if (c->n >= c->cap)
		grow(c);
	size_t b = bucket(c, e->data_id, e->chunk);
	e->hnext = c->tab[b];
	c->tab[b] = e;
	lru_front(c, e);
	e->linked = true;
	c->n++;
	c->used += e->len;
}

static void unlink_entry(struct mfs_cache *c, struct centry *e)
{
	struct centry **p = &c->tab[bucket(c, e->data_id, e->chunk)];
	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	lru_remove(e);
	e->linked = false;
	c->n--;
	c->used -= e->len;
}

/* True when id is a computation's that no opened file adopted yet;
 * caller holds the lock. */
static bool staged(const struct mfs_cache *c, uint64_t id)
{
	if (id < STAGE_ID_BASE)
		return false;
	for (const struct stage *g = c->stages; g; g = g->next)
		if (g->id == id)
			return true;
	return false;
}

/* Whether e may go to make room: nobody holds it, it is loaded, and with
 * keep_staged it is no computation's chunk that nobody adopted yet. */
static bool evictable(const struct mfs_cache *c, const struct centry *e,
		      bool keep_staged)
{
	return e->refs == 0 && e->state == READY &&
	    !(keep_staged && staged(c, e->data_id));
}

/* Frees unheld chunks from the least recently used end until `len` more
 * bytes fit in the budget; with keep_staged, not those tapped for a
 * computation nobody opened yet. Called before a chunk's buffer is taken,
 * so that the buffers freed are the spares it reuses: a cache at its
 * budget then loads into memory already faulted in, instead of mapping
 * fresh memory for every chunk and unmapping a victim's after. */
static void make_room(struct mfs_cache *c, size_t len, bool keep_staged)
{
	struct centry *e = c->lru.prev;
	while (c->used + len > c->budget && e != &c->lru) {
		struct centry *prev = e->prev;
		if (evictable(c, e, keep_staged)) {
			unlink_entry(c, e);
			entry_free(c, e);
		}
		e = prev;
	}
}

/* Whether make_room(c, len, keep_staged) would get len bytes to fit. */
static bool room_possible(const struct mfs_cache *c, size_t len,
			  bool keep_staged)
{
	uint64_t freed = 0;
	for (const struct centry *e = c->lru.prev;
	     e != &c->lru && c->used - freed + len > c->budget; e = e->prev)
		if (evictable(c, e, keep_staged))
			freed += e->len;
	return c->used - freed + len <= c->budget;
}

static void evict(struct mfs_cache *c)
{
	make_room(c, 0, false);
}

static void unref_locked(struct mfs_cache *c, struct centry *e)
{
	if (--e->refs > 0)
		return;
	if (e->spent && e->linked)
		unlink_entry(c, e);
	if (!e->linked)
		entry_free(c, e);
}

/* Decompresses e's chunk with the lock released; e is held. */
static int load(struct mfs_cache *c, struct mfs_data *d, struct centry *e)
{
	size_t cap;
	uint8_t *buf = buf_take(c, e->len, &cap);
	atomic_fetch_add_explicit(&c->loads, 1, memory_order_relaxed);
	pthread_mutex_unlock(&c->lock);
	ssize_t n =
	    buf ? mf_engine_read_chunk(d->r, e->chunk, buf, e->len) : -ENOMEM;
	pthread_mutex_lock(&c->lock);
	if (n >= 0 && (size_t)n != e->len)
		n = MF_CORRUPT("chunk length differs from the index");
	if (n < 0) {
		buf_give(c, buf, cap);
		e->state = (int)n;
		if (n == -EBADMSG)
			mf_corrupt_save(&e->note);
		unlink_entry(c, e); /* the next reader tries again */
	} else {
		e->buf = buf;
		e->cap = cap;
		e->state = READY;
	}
	pthread_cond_broadcast(&c->loaded);
	return n < 0 ? (int)n : 0;
}

/* mfs_cache_get; a reader's ask (count) adds to hits or misses. */
static int cache_get(struct mfs_cache *c, struct mfs_data *d, uint32_t chunk,
		     struct mfs_chunk *out, void **ref, bool count)
{
	if (chunk >= d->st.chunks)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	struct centry *e = find(c, d->id, chunk);
	int rc = 0;
	if (count)
		atomic_fetch_add_explicit(e ? &c->hits : &c->misses, 1,
					  memory_order_relaxed);
	if (e) {
		e->refs++;
		while (e->state == LOADING)
			pthread_cond_wait(&c->loaded, &c->lock);
		rc = e->state < 0 ? e->state : 0;
		if (rc == -EBADMSG) /* found by the thread that loaded it */
			rc = mf_corrupt_restore(&e->note);
		if (rc == 0) {
			lru_remove(e);
			lru_front(c, e);
		}
	} else if ((e = calloc(1, sizeof(*e)))) {
		*e = (struct centry){.data_id = d->id,
				     .chunk = chunk,
				     .refs = 1,
				     .state = LOADING,
				     .len = mf_engine_chunk_len(d->r, chunk)};
		make_room(c, e->len, false);
		link_entry(c, e);
		rc = load(c, d, e);
	} else {
		rc = -ENOMEM;
	}
	if (rc && e)
		unref_locked(c, e);
	if (rc == 0)
		evict(c);
	pthread_mutex_unlock(&c->lock);
	if (rc == 0) {
		*out = (struct mfs_chunk){e->buf, e->len};
		*ref = e;
	}
	return rc;
}

int mfs_cache_get(struct mfs_cache *c, struct mfs_data *d, uint32_t chunk,
		  struct mfs_chunk *out, void **ref)
{
	return cache_get(c, d, chunk, out, ref, false);
}

int mfs_cache_read(struct mfs_cache *c, struct mfs_data *d, uint32_t chunk,
		   struct mfs_chunk *out, void **ref)
{
	return cache_get(c, d, chunk, out, ref, true);
}

void mfs_cache_unref(struct mfs_cache *c, void *ref)
{
	pthread_mutex_lock(&c->lock);
	unref_locked(c, ref);
	if (c->used > c->budget)
		evict(c);
	pthread_mutex_unlock(&c->lock);
}

void mfs_cache_unref_served(struct mfs_cache *c, void *ref, size_t bytes)
{
	struct centry *e = ref;
	pthread_mutex_lock(&c->lock);
	e->served += bytes;
	/* every byte read once: dead for its reader, and likely for all
	 * (another reader of it loads it again); freed when the last one
	 * holding it (a read-ahead, another batch) lets it go, its buffer
	 * then the next chunk's */
	if (e->served >= e->len)
		e->spent = true;
	unref_locked(c, e);
	if (c->used > c->budget)
		evict(c);
	pthread_mutex_unlock(&c->lock);
}

bool mfs_cache_has(struct mfs_cache *c, const struct mfs_data *d,
		   uint32_t chunk)
{
	pthread_mutex_lock(&c->lock);
	bool has = find(c, d->id, chunk) != NULL;
	pthread_mutex_unlock(&c->lock);
	return has;
}

/* Frees every unheld chunk of id; caller holds the lock. */
static void drop_locked(struct mfs_cache *c, uint64_t id)
{
	struct centry *e = c->lru.next;
	while (e != &c->lru) {
		struct centry *next = e->next;
		if (e->data_id == id && e->refs == 0) {
			unlink_entry(c, e);
			entry_free(c, e);
		}
		e = next;
	}
}

void mfs_cache_drop(struct mfs_cache *c, uint64_t data_id)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	drop_locked(c, data_id);
	pthread_mutex_unlock(&c->lock);
}

void mfs_cache_counts(struct mfs_cache *c, struct mfs_cache_stats *out)
{
	out->decompressed = atomic_load(&c->loads);
	out->tapped = atomic_load(&c->tapped);
	out->hits = atomic_load(&c->hits);
	out->misses = atomic_load(&c->misses);
}

/* ---- chunks from the engine's tap ---- */

/* The link to the stage of one computation (*link NULL: none); caller
 * holds the lock. */
static struct stage **stage_find(struct mfs_cache *c, const char *fp,
				 uint32_t shard, uint64_t generation)
{
	struct stage **p = &c->stages;
	for (; *p; p = &(*p)->next) {
		struct stage *g = *p;
		if (g->generation == generation && g->shard == shard &&
		    strcmp(g->fp, fp) == 0)
			break;
	}
	return p;
}

static struct stage *stage_new(struct mfs_cache *c,
			       const struct mf_chunk_event *ev)
{
	struct stage *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->owner = pthread_self();
	snprintf(g->fp, sizeof(g->fp), "%s", ev->fp);
	g->shard = ev->shard;
	g->generation = ev->generation;
	g->id = c->next_stage++;
	g->next = c->stages;
	c->stages = g;
	return g;
}

/* Copies chunk ev->index in under g's id when it comes in order and the
 * budget has room for it once readers' unheld chunks made way; leaves out
 * the rest of g otherwise. Caller holds the lock, released for the copy:
 * the entry is held meanwhile. */
static void stage_put(struct mfs_cache *c, struct stage *g,
		      const struct mf_chunk_event *ev)
{
	/* readers' old chunks make way, if that is enough */
	if (!g->full && ev->index == g->next_chunk &&
	    room_possible(c, ev->len, true))
		make_room(c, ev->len, true);
	if (g->full || ev->index != g->next_chunk ||
	    c->used + ev->len > c->budget) {
		g->full = true;
		return;
	}
	struct centry *e = calloc(1, sizeof(*e));
	size_t cap = 0;
	uint8_t *buf = e ? buf_take(c, ev->len, &cap) : NULL;
	if (!buf) {
		free(e);
		g->full = true;
		return;
	}
	g->next_chunk++;
	*e = (struct centry){.data_id = g->id,
			     .chunk = ev->index,
			     .refs = 1,
			     .state = LOADING,
			     .buf = buf,
			     .len = ev->len,
			     .cap = cap};
	link_entry(c, e);
	pthread_mutex_unlock(&c->lock);
	memcpy(buf, ev->raw, ev->len);
	pthread_mutex_lock(&c->lock);
	e->state = READY; /* nobody waits: no data has g's id yet */
	atomic_fetch_add_explicit(&c->tapped, 1, memory_order_relaxed);
	unref_locked(c, e);
}

void mfs_cache_tap(struct mfs_cache *c, const struct mf_chunk_event *ev)
{
	pthread_mutex_lock(&c->lock);
	struct stage **p = stage_find(c, ev->fp, ev->shard, ev->generation);
	struct stage *g = *p;
	switch (ev->kind) {
	case MF_CHUNK_DATA:
		if (!g && ev->index == 0)
			g = stage_new(c, ev);
		if (g)
			stage_put(c, g, ev);
		break;
	case MF_CHUNK_COMMITTED:
	case MF_CHUNK_SEALED: /* complete: what a reader of the file gets */
		if (g && ev->stat) {
			g->committed = true;
			g->st = *ev->stat;
		}
		break;
	case MF_CHUNK_FAILED:
		if (g) {
			*p = g->next;
			drop_locked(c, g->id);
			free(g);
		}
		break;
	case MF_CHUNK_RELEASE: /* stage_put copied what it keeps */
		break;
	}
	pthread_mutex_unlock(&c->lock);
}

/* The committed file g wrote is the one rec names and st describes. */
static bool stage_is(const struct stage *g, const struct mf_engine_shard *rec,
		     const struct mf_engine_file *st)
{
	return g->committed && pthread_equal(g->owner, pthread_self()) &&
	    g->st.raw_bytes == st->raw_bytes &&
	    g->st.stored_bytes == st->stored_bytes &&
	    g->st.chunks == st->chunks && g->st.chunk_size == st->chunk_size &&
	    g->st.codec == st->codec && rec->raw_bytes == st->raw_bytes &&
	    rec->stored_bytes == st->stored_bytes && rec->chunks == st->chunks;
}

uint64_t mfs_cache_adopt(struct mfs_cache *c, const struct mf_engine_shard *rec,
			 const struct mf_engine_file *st)
{
	/* running: sealed, its commit under way (serve_sealed) */
	if (!mf_engine_shard_file_gen(rec))
		return 0;
	uint64_t id = 0;
	pthread_mutex_lock(&c->lock);
	struct stage **p = stage_find(c, rec->fp, rec->index, rec->generation);
	struct stage *g = *p;
	if (g && stage_is(g, rec, st)) {
		id = g->id;
		*p = g->next;
		free(g);
	}
	pthread_mutex_unlock(&c->lock);
	return id;
}

void mfs_cache_unstage(struct mfs_cache *c)
{
	pthread_mutex_lock(&c->lock);
	struct stage **p = &c->stages;
	while (*p) {
		struct stage *g = *p;
		if (!pthread_equal(g->owner, pthread_self())) {
			p = &g->next;
			continue;
		}
		*p = g->next;
		drop_locked(c, g->id);
		free(g);
	}
	pthread_mutex_unlock(&c->lock);
}
