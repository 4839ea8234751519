/*
 * order.c - batch order 1 (docs/format.md, "Batch order"): the epoch key,
 * the keyed Feistel permutations, the shard order, the groups and windows
 * built from the counts of a prefix of the shard order, and locating a
 * place of the sequence. The rank views are in order_view.c.
 *
 * Not for: anything that reads records or knows about paths.
 */
#include "mf_order.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mf_util.h"

__extension__ typedef unsigned __int128 u128;

/* One shard by its position in the epoch's shard order. */
struct ord_shard {
	uint64_t records, bytes;
	uint32_t shard; /* the shard's index at this position */
	bool known;
};

/* A closed group: positions [first, first + n) of the shard order, places
 * [start, start + total) of the sequence, cut into m windows. */
struct ord_group {
	uint64_t first, n, start, total, m;
};

struct mf_order {
	struct mf_order_params p;
	uint8_t key[32]; /* the epoch key (shuffled only) */
	uint64_t shard_keys[MF_ORDER_ROUNDS]; /* the shard order's rounds */
	struct ord_shard *pos; /* nshards, by position */
	uint32_t *pos_of; /* nshards, by shard index */
	uint64_t known_pos; /* positions [0, known_pos) are known */
	uint64_t sum_records, sum_bytes; /* over every known shard */
	struct ord_group *groups;
	size_t ngroups, cap;
	/* The group being gathered: from position acc_first to known_pos. */
	uint64_t acc_first, acc_records, acc_bytes;
	uint64_t known; /* places of the closed groups */
};

/* The round function: SplitMix64's finalizer of x ^ k. */
static uint64_t ord_mix(uint64_t k, uint64_t x)
{
	uint64_t z = x ^ k;
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ULL;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z;
}

/* Half the bits of the Feistel domain for [0, n): h = ceil(b / 2), b the
 * bit length of n - 1 (n >= 2). */
static unsigned ord_half(uint64_t n)
{
	unsigned b = 64 - (unsigned)__builtin_clzll(n - 1);
	return (b + 1) / 2;
}

static uint64_t ord_feistel_once(const uint64_t *keys, unsigned h, uint64_t x)
{
	uint64_t mask = (1ULL << h) - 1; /* h <= 32 */
	uint64_t l = x >> h, r = x & mask;
	for (int i = 0; i < MF_ORDER_ROUNDS; i++) {
		uint64_t t = l ^ (ord_mix(keys[i], r) & mask);
		l = r;
		r = t;
	}
	return (l << h) | r;
}

/* The keyed permutation of [0, n) at x: the Feistel network over 2h bits,
 * applied again while the result is n or more (cycle walking). */
static uint64_t ord_permute(const uint64_t *keys, uint64_t n, uint64_t x)
{
	if (n < 2)
		return x;
	unsigned h = ord_half(n);
	do
		x = ord_feistel_once(keys, h, x);
	while (x >= n);
	return x;
}

/* ord_permute of x, x + 1, ... x + lanes - 1 (lanes <= ORD_LANES) into
 * e: the Feistel rounds of the lanes interleaved, then each lane's cycle
 * walk on its own (rare: the domain is less than 4n). */
#define ORD_LANES 4
static void ord_permute_lanes(const uint64_t *keys, uint64_t n, uint64_t x,
			      size_t lanes, uint64_t *e)
{
	if (n < 2 || lanes < ORD_LANES) {
		for (size_t l = 0; l < lanes; l++)
			e[l] = ord_permute(keys, n, x + l);
		return;
	}
	unsigned h = ord_half(n);
	uint64_t mask = (1ULL << h) - 1, lo[ORD_LANES], hi[ORD_LANES];
	for (size_t l = 0; l < ORD_LANES; l++) {
		lo[l] = (x + l) >> h;
		hi[l] = (x + l) & mask;
	}
	for (int i = 0; i < MF_ORDER_ROUNDS; i++)
		for (size_t l = 0; l < ORD_LANES; l++) {
			uint64_t t = lo[l] ^ (ord_mix(keys[i], hi[l]) & mask);
			lo[l] = hi[l];
			hi[l] = t;
		}
	for (size_t l = 0; l < ORD_LANES; l++) {
		e[l] = (lo[l] << h) | hi[l];
		while (e[l] >= n)
			e[l] = ord_feistel_once(keys, h, e[l]);
	}
}

static void ord_le64(uint8_t *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static int ord_sha(const void *a, size_t na, const void *b, size_t nb,
		   uint8_t out[32])
{
	struct mf_sha256 h;
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	if ((rc = mf_sha256_update(&h, a, na)) ||
	    (rc = mf_sha256_update(&h, b, nb))) {
		mf_sha256_release(&h);
		return rc;
	}
	return mf_sha256_final(&h, out);
}

/* Round keys of permutation (domain d, a, b): round r's key is the first
 * 8 bytes, little-endian, of SHA-256(K || d || a || b || r), d and r one
 * byte, a and b 8 bytes little-endian. */
static int ord_round_keys(const uint8_t key[32], uint8_t d, uint64_t a,
			  uint64_t b, uint64_t *keys)
{
	uint8_t msg[18], dig[32];
	msg[0] = d;
	ord_le64(msg + 1, a);
	ord_le64(msg + 9, b);
	for (int r = 0; r < MF_ORDER_ROUNDS; r++) {
		msg[17] = (uint8_t)r;
		int rc = ord_sha(key, 32, msg, sizeof(msg), dig);
		if (rc)
			return rc;
		keys[r] = 0;
		for (int i = 7; i >= 0; i--)
			keys[r] = (keys[r] << 8) | dig[i];
	}
	return 0;
}

#define ORD_TAG "matfs-order-1"

static int ord_epoch_key(const struct mf_order_params *p, uint8_t key[32])
{
	uint8_t msg[32 + 16];
	memcpy(msg, p->fingerprint, 32);
	ord_le64(msg + 32, p->seed);
	ord_le64(msg + 40, p->epoch);
	return ord_sha(ORD_TAG, strlen(ORD_TAG), msg, sizeof(msg), key);
}

int mf_order_new(const struct mf_order_params *p, struct mf_order **out)
{
	if (p->window < 1 || p->window > MF_ORDER_MAX || p->nshards < 1 ||
	    p->nshards > MF_ORDER_MAX_SHARDS)
		return -EINVAL;
	struct mf_order *o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->p = *p;
	o->pos = calloc(p->nshards, sizeof(*o->pos));
	o->pos_of = calloc(p->nshards, sizeof(*o->pos_of));
	int rc = (o->pos && o->pos_of) ? 0 : -ENOMEM;
	if (rc == 0 && p->shuffled) {
		rc = ord_epoch_key(p, o->key);
		if (rc == 0)
			rc = ord_round_keys(o->key, 1, 0, 0, o->shard_keys);
	}
	if (rc) {
		mf_order_free(o);
		return rc;
	}
	for (uint64_t i = 0; i < p->nshards; i++) {
		uint64_t s =
		    p->shuffled ? ord_permute(o->shard_keys, p->nshards, i) : i;
		o->pos[i].shard = (uint32_t)s;
		o->pos_of[s] = (uint32_t)i;
	}
	*out = o;
	return 0;
}

void mf_order_free(struct mf_order *o)
{
	if (!o)
		return;
	free(o->pos);
	free(o->pos_of);
	free(o->groups);
	free(o);
}

uint64_t mf_order_shard_at(const struct mf_order *o, uint64_t pos)
{
	return o->pos[pos].shard;
}

/* Windows of a group: ceil(bytes / window), at least 1. Seed-none has
 * groups of one shard and one window each. */
static uint64_t ord_windows(const struct mf_order *o, uint64_t bytes)
{
	if (!o->p.shuffled || bytes == 0)
		return 1;
	return (bytes - 1) / o->p.window + 1;
}

static int ord_close(struct mf_order *o, uint64_t end)
{
	if (o->ngroups == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 16;
		struct ord_group *g = realloc(o->groups, cap * sizeof(*g));
		if (!g)
			return -ENOMEM;
		o->groups = g;
		o->cap = cap;
	}
	struct ord_group *g = &o->groups[o->ngroups++];
	g->first = o->acc_first;
	g->n = end - o->acc_first;
	g->start = o->known;
	g->total = o->acc_records;
	g->m = ord_windows(o, o->acc_bytes);
	o->known += o->acc_records;
	o->acc_first = end;
	o->acc_records = o->acc_bytes = 0;
	return 0;
}

/* Whether the group gathered so far closes after position p: the last
 * shard closes it; else it needs MF_ORDER_GROUP shards, window bytes, and
 * MF_ORDER_GROUP shards left after it (so no group of a few shards is left
 * at the end). Seed-none: every shard is a group. */
static bool ord_closes(const struct mf_order *o, uint64_t p)
{
	uint64_t n = o->p.nshards;
	if (p + 1 == n || !o->p.shuffled)
		return true;
	return p + 1 - o->acc_first >= MF_ORDER_GROUP &&
	    o->acc_bytes >= o->p.window && n - (p + 1) >= MF_ORDER_GROUP;
}

/* Extends the groups over the known positions after known_pos. On
 * -ENOMEM the order is as before the position that failed, and the next
 * call goes on from there. */
static int ord_advance(struct mf_order *o)
{
	while (o->known_pos < o->p.nshards && o->pos[o->known_pos].known) {
		uint64_t p = o->known_pos;
		/* Sums within the epoch's, so they cannot overflow. */
		o->acc_records += o->pos[p].records;
		o->acc_bytes += o->pos[p].bytes;
		int rc = ord_closes(o, p) ? ord_close(o, p + 1) : 0;
		if (rc) {
			o->acc_records -= o->pos[p].records;
			o->acc_bytes -= o->pos[p].bytes;
			return rc;
		}
		o->known_pos++;
	}
	return 0;
}

int mf_order_set_shard(struct mf_order *o, uint64_t shard, uint64_t records,
		       uint64_t bytes)
{
	if (shard >= o->p.nshards)
		return -EINVAL;
	struct ord_shard *s = &o->pos[o->pos_of[shard]];
	if (s->known) {
		if (s->records != records || s->bytes != bytes)
			return -EINVAL;
		return ord_advance(o);
	}
	if (records > MF_ORDER_MAX - o->sum_records ||
	    bytes > MF_ORDER_MAX - o->sum_bytes)
		return -EOVERFLOW;
	s->records = records;
	s->bytes = bytes;
	s->known = true;
	o->sum_records += records;
	o->sum_bytes += bytes;
	return ord_advance(o);
}

uint64_t mf_order_known_shards(const struct mf_order *o)
{
	return o->known_pos;
}

uint64_t mf_order_known(const struct mf_order *o)
{
	return o->known;
}

bool mf_order_complete(const struct mf_order *o)
{
	return o->known_pos == o->p.nshards;
}

int mf_order_next_shard(const struct mf_order *o, uint64_t *shard)
{
	if (mf_order_complete(o))
		return -ENOENT;
	*shard = o->pos[o->known_pos].shard;
	return 0;
}

/* The first place of part t of shard s of a group of m windows:
 * floor(t x records / m), t <= m. */
static uint64_t ord_part(const struct ord_shard *s, uint64_t t, uint64_t m)
{
	return (uint64_t)(((u128)t * s->records) / m);
}

/* The group's places before window t. */
static uint64_t ord_window_start(const struct mf_order *o,
				 const struct ord_group *g, uint64_t t)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < g->n; i++)
		sum += ord_part(&o->pos[g->first + i], t, g->m);
	return sum;
}

static int ord_find(const struct mf_order *o, uint64_t i,
		    const struct ord_group **gp)
{
	if (i >= o->known)
		return mf_order_complete(o) ? -ERANGE : -EAGAIN;
	size_t lo = 0, hi = o->ngroups; /* groups[lo].start <= i */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (o->groups[mid].start <= i)
			lo = mid;
		else
			hi = mid;
	}
	*gp = &o->groups[lo];
	return 0;
}

/* The window of g holding offset off: the largest t < m whose start is at
 * most off (windows may be empty). */
static uint64_t ord_window_of(const struct mf_order *o,
			      const struct ord_group *g, uint64_t off)
{
	uint64_t lo = 0, hi = g->m;
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (ord_window_start(o, g, mid) <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

int mf_order_window_at(const struct mf_order *o, uint64_t i,
		       struct mf_order_window *w)
{
	const struct ord_group *g;
	int rc = ord_find(o, i, &g);
	if (rc)
		return rc;
	uint64_t t = ord_window_of(o, g, i - g->start);
	uint64_t a = ord_window_start(o, g, t);
	uint64_t b = ord_window_start(o, g, t + 1);
	w->group = (uint64_t)(g - o->groups);
	w->part = t;
	w->first = g->start + a;
	w->count = b - a;
	w->shards = g->n;
	return 0;
}

int mf_order_window_parts(const struct mf_order *o, uint64_t i,
			  struct mf_order_run *parts, size_t cap, size_t *n)
{
	const struct ord_group *g;
	int rc = ord_find(o, i, &g);
	if (rc)
		return rc;
	if (cap < g->n)
		return -ENOSPC;
	uint64_t t = ord_window_of(o, g, i - g->start);
	size_t k = 0;
	for (uint64_t j = 0; j < g->n; j++) {
		const struct ord_shard *s = &o->pos[g->first + j];
		uint64_t a = ord_part(s, t, g->m), b = ord_part(s, t + 1, g->m);
		if (b > a)
			parts[k++] = (struct mf_order_run){s->shard, a, b - a};
	}
	*n = k;
	return 0;
}

/* One window being read: its permutation and where each shard's part
 * starts in it (ends[k] = the window's elements of shards 0..k). */
struct ord_win {
	const struct ord_group *g;
	uint64_t t, first, count;
	uint64_t keys[MF_ORDER_ROUNDS];
	uint64_t *ends; /* n: elements of shards 0..k */
	uint64_t *starts; /* n: the first record of shard k's part */
};

static int ord_win_open(const struct mf_order *o, uint64_t i, struct ord_win *w)
{
	const struct ord_group *g;
	int rc = ord_find(o, i, &g);
	if (rc)
		return rc;
	w->g = g;
	w->t = ord_window_of(o, g, i - g->start);
	w->ends = malloc(2 * g->n * sizeof(*w->ends));
	if (!w->ends)
		return -ENOMEM;
	w->starts = w->ends + g->n;
	uint64_t a = 0, sum = 0;
	for (uint64_t k = 0; k < g->n; k++) {
		const struct ord_shard *s = &o->pos[g->first + k];
		w->starts[k] = ord_part(s, w->t, g->m);
		a += w->starts[k];
		sum += ord_part(s, w->t + 1, g->m) - w->starts[k];
		w->ends[k] = sum;
	}
	w->first = g->start + a;
	w->count = sum;
	if (o->p.shuffled) {
		rc = ord_round_keys(o->key, 2, (uint64_t)(g - o->groups), w->t,
				    w->keys);
		if (rc) {
			free(w->ends);
			return rc;
		}
	}
	return 0;
}

/* Element e of the window (its shards' parts one after the other, in the
 * group's order) as a shard and record. */
static void ord_win_element(const struct mf_order *o, const struct ord_win *w,
			    uint64_t e, uint64_t *shard, uint64_t *record)
{
	/* the first k with e < ends[k] (ends rise, the last is the count):
	 * a search without branches on the data, which is random */
	uint64_t lo = 0, len = w->g->n;
	while (len > 1) {
		uint64_t half = len / 2;
		lo = w->ends[lo + half - 1] <= e ? lo + half : lo;
		len -= half;
	}
	const struct ord_shard *s = &o->pos[w->g->first + lo];
	uint64_t before = lo ? w->ends[lo - 1] : 0;
	*shard = s->shard;
	*record = w->starts[lo] + (e - before);
}

static void ord_win_at(const struct mf_order *o, const struct ord_win *w,
		       uint64_t q, uint64_t *shard, uint64_t *record)
{
	uint64_t e = o->p.shuffled ? ord_permute(w->keys, w->count, q) : q;
	ord_win_element(o, w, e, shard, record);
}

int mf_order_locate(const struct mf_order *o, uint64_t i, uint64_t *shard,
		    uint64_t *record)
{
	struct ord_win w;
	int rc = ord_win_open(o, i, &w);
	if (rc)
		return rc;
	ord_win_at(o, &w, i - w.first, shard, record);
	free(w.ends);
	return 0;
}

/* Appends (shard, record) to the runs; false when it needs a new run and
 * none is left. */
static bool ord_push(struct mf_order_run *runs, size_t cap, size_t *n,
		     uint64_t shard, uint64_t record)
{
	if (*n) {
		struct mf_order_run *r = &runs[*n - 1];
		if (r->shard == shard && r->record + r->count == record) {
			r->count++;
			return true;
		}
	}
	if (*n == cap)
		return false;
	runs[(*n)++] = (struct mf_order_run){shard, record, 1};
	return true;
}

/* Seed-none: the window is one shard in order, so a run is a slice. */
static bool ord_push_slice(const struct mf_order *o, const struct ord_win *w,
			   uint64_t q, uint64_t len, struct mf_order_run *runs,
			   size_t cap, size_t *n)
{
	uint64_t shard, record;
	ord_win_at(o, w, q, &shard, &record);
	if (!ord_push(runs, cap, n, shard, record))
		return false;
	runs[*n - 1].count += len - 1;
	return true;
}

int mf_order_runs(const struct mf_order *o, uint64_t first, uint64_t count,
		  struct mf_order_run *runs, size_t cap, size_t *nruns,
		  uint64_t *covered)
{
	if (cap == 0)
		return -EINVAL;
	if (count > MF_ORDER_MAX || first > MF_ORDER_MAX - count)
		return -ERANGE;
	if (first + count > o->known && count > 0)
		return mf_order_complete(o) ? -ERANGE : -EAGAIN;
	size_t n = 0;
	uint64_t done = 0;
	while (done < count) {
		struct ord_win w;
		int rc = ord_win_open(o, first + done, &w);
		if (rc)
			return rc;
		uint64_t q = first + done - w.first;
		uint64_t len = w.count - q;
		if (len > count - done)
			len = count - done;
		bool full = false;
		if (!o->p.shuffled) {
			full = !ord_push_slice(o, &w, q, len, runs, cap, &n);
			if (!full)
				done += len;
		}
		for (uint64_t k = 0; o->p.shuffled && k < len && !full;) {
			/* ORD_LANES places at a time: their permutations do
			 * not depend on each other, and overlap */
			uint64_t e[ORD_LANES];
			size_t lanes =
			    len - k < ORD_LANES ? (size_t)(len - k) : ORD_LANES;
			ord_permute_lanes(w.keys, w.count, q + k, lanes, e);
			for (size_t l = 0; l < lanes; l++, k++) {
				uint64_t shard, record;
				ord_win_element(o, &w, e[l], &shard, &record);
				if (!ord_push(runs, cap, &n, shard, record)) {
					full = true;
					break;
				}
				done++;
			}
		}
		free(w.ends);
		if (full)
			break;
	}
	*nruns = n;
	*covered = done;
	return 0;
}
