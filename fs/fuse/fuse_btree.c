/*
 * fuse_btree.c - the inodes of the batch tree (docs/format.md, "The batch
 * tree's names"): SNAP/batches/B/seed-S/epoch-E[/rank-R-of-W[-from-G]]/
 * batch-N, every name computed from its path, nothing stored.
 *
 * A folder of the tree is a node of a table, made by the lookup that
 * names it and freed when the kernel has forgotten each of its lookups,
 * so that the daemon holds what the kernel's dentry cache holds and no
 * more: at most MFS_BT_UID_CAP folders a reader uid and MFS_BT_CAP in
 * all, past which a lookup fails with ENFILE. A folder looked up again
 * while known is the same node. A batch file needs no node: its inode is
 * its folder's slot and its number (fuse_i.h), and its attributes come
 * from the engine's order (mf_engine_batch_find), which never computes:
 * the exact size once the shards that place it are materialized, 0
 * before, ENOENT when the epoch is known to have no such batch, and for
 * a number of MFS_BT_FILE_MAX or more, which has no inode.
 *
 * `batches` is looked up, never listed, in a snapshot folder: a listing
 * of a snapshot stays its shards, as every tool that reads them expects
 * (docs/decisions.md).
 *
 * Not for: opening or reading batches (fuse_batch.c), the names' grammar
 * (fuse_batchpath.c) or listings (fuse_dir.c).
 */
#include "fuse_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_batchpath.h"

#define ENTRY_TTL 1.0

struct bdir {
	struct bdir *next; /* hash chain on the key */
	uint32_t slot;
	uint64_t nlookup; /* lookups the kernel was given and not forgot */
	uint64_t gen; /* the entry generation it was made with */
	uid_t uid; /* whose lookup made it: counted against it */
	struct mfs_bkey key;
};

struct bt_user {
	struct bt_user *next;
	uid_t uid;
	size_t n;
};

/* A leaf lock: nothing else is taken under it, and nothing is called
 * holding it. */
struct mfs_bdirs {
	pthread_mutex_t lock;
	struct bdir **slots; /* by slot; NULL: free */
	size_t cap; /* slots */
	size_t n; /* folders held */
	size_t next_free; /* a hint: slots below it are taken */
	struct bdir **hash; /* MFS_BT_CAP chains */
	struct bt_user *users;
	uint64_t gens;
	int64_t capped_at; /* mono seconds of the last "capped" log line */
};

int mfs_btree_new(struct mfs *m)
{
	struct mfs_bdirs *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->hash = calloc(MFS_BT_CAP, sizeof(*t->hash));
	int rc = t->hash ? mf_mutex_init(&t->lock) : -ENOMEM;
	if (rc) {
		free(t->hash);
		free(t);
		return rc;
	}
	m->bdirs = t;
	return 0;
}

void mfs_btree_free(struct mfs *m)
{
	struct mfs_bdirs *t = m->bdirs;
	if (!t)
		return;
	for (size_t i = 0; i < t->cap; i++)
		free(t->slots[i]);
	while (t->users) {
		struct bt_user *u = t->users;
		t->users = u->next;
		free(u);
	}
	free(t->slots);
	free(t->hash);
	pthread_mutex_destroy(&t->lock);
	free(t);
	m->bdirs = NULL;
}

static uint64_t key_hash(const struct mfs_bkey *k)
{
	const uint64_t f[] = {k->snap_id, (uint64_t)k->level, k->v.shuffled,
			      k->v.seed,  k->v.epoch,	      k->v.batch,
			      k->v.world, k->v.rank,	      k->v.from};
	uint64_t h = 0x9e3779b97f4a7c15ULL;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		h ^= f[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
		h *= 0xff51afd7ed558ccdULL;
	}
	return h ^ (h >> 33);
}

static bool key_eq(const struct mfs_bkey *a, const struct mfs_bkey *b)
{
	return a->snap_id == b->snap_id && a->level == b->level &&
	    a->v.shuffled == b->v.shuffled && a->v.seed == b->v.seed &&
	    a->v.epoch == b->v.epoch && a->v.batch == b->v.batch &&
	    a->v.world == b->v.world && a->v.rank == b->v.rank &&
	    a->v.from == b->v.from;
}

static struct bt_user *user_of(struct mfs_bdirs *t, uid_t uid, bool make)
{
	struct bt_user *u = t->users;
	while (u && u->uid != uid)
		u = u->next;
	if (!u && make && (u = calloc(1, sizeof(*u)))) {
		u->uid = uid;
		u->next = t->users;
		t->users = u;
	}
	return u;
}

static void user_drop(struct mfs_bdirs *t, uid_t uid)
{
	for (struct bt_user **p = &t->users; *p; p = &(*p)->next) {
		if ((*p)->uid != uid)
			continue;
		struct bt_user *u = *p;
		if (--u->n == 0) {
			*p = u->next;
			free(u);
		}
		return;
	}
}

/* A free slot, the table grown when none is left: its index, or -1. */
static long slot_take(struct mfs_bdirs *t)
{
	for (size_t i = t->next_free; i < t->cap; i++)
		if (!t->slots[i]) {
			t->next_free = i + 1;
			return (long)i;
		}
	size_t cap = t->cap ? t->cap * 2 : 64;
	if (cap > MFS_BT_CAP)
		cap = MFS_BT_CAP;
	if (cap <= t->cap)
		return -1;
	struct bdir **v = realloc(t->slots, cap * sizeof(*v));
	if (!v)
		return -1;
	memset(v + t->cap, 0, (cap - t->cap) * sizeof(*v));
	t->slots = v;
	long i = (long)t->cap;
	t->cap = cap;
	t->next_free = (size_t)i + 1;
	return i;
}

/* The folder of key, made for uid when unknown, with one more lookup:
 * 0 and its inode and generation, -ENFILE past the caps, -ENOMEM. */
static int folder_ref(struct mfs *m, const struct mfs_bkey *key, uid_t uid,
		      fuse_ino_t *ino, uint64_t *gen)
{
	struct mfs_bdirs *t = m->bdirs;
	uint64_t h = key_hash(key) % MFS_BT_CAP;
	int rc = 0;
	bool capped = false;
	pthread_mutex_lock(&t->lock);
	struct bdir *d = t->hash[h];
	while (d && !key_eq(&d->key, key))
		d = d->next;
	if (!d) {
		struct bt_user *u = user_of(t, uid, true);
		long slot = -1;
		if (!u)
			rc = -ENOMEM;
		else if (u->n >= MFS_BT_UID_CAP || t->n >= MFS_BT_CAP)
			rc = -ENFILE;
		else if ((slot = slot_take(t)) < 0)
			rc = t->cap >= MFS_BT_CAP ? -ENFILE : -ENOMEM;
		else if (!(d = calloc(1, sizeof(*d))))
			rc = -ENOMEM;
		if (rc == 0) {
			*d = (struct bdir){t->hash[h], (uint32_t)slot,
					   0,	       ++t->gens,
					   uid,	       *key};
			t->hash[h] = d;
			t->slots[slot] = d;
			t->n++;
			u->n++;
		} else if (u && u->n == 0) {
			u->n = 1; /* user_drop frees it */
			user_drop(t, uid);
		}
		int64_t now = mf_mono_ns() / 1000000000LL;
		if (rc == -ENFILE && now - t->capped_at >= 60) {
			t->capped_at = now;
			capped = true;
		}
	}
	if (d) {
		d->nlookup++;
		*ino = MFS_INO_BATCH |
		    ((fuse_ino_t)(d->slot + 1) << MFS_BT_FILE_BITS);
		*gen = d->gen;
	}
	pthread_mutex_unlock(&t->lock);
	if (capped)
		mfs_logf(m, MFS_LOG_WARN,
			 "uid %u: batch tree folders past the bound (%u a "
			 "user, %u in all): lookups refused (ENFILE) until "
			 "the kernel forgets some",
			 (unsigned)uid, MFS_BT_UID_CAP, MFS_BT_CAP);
	return rc;
}

void mfs_btree_forget(struct mfs *m, fuse_ino_t ino, uint64_t nlookup)
{
	struct mfs_bdirs *t = m->bdirs;
	if (!t || (ino & MFS_BT_FILE_MAX) != 0)
		return; /* a batch file: nothing held */
	size_t slot = (size_t)((ino & ~MFS_INO_BATCH) >> MFS_BT_FILE_BITS);
	struct bdir *d = NULL;
	pthread_mutex_lock(&t->lock);
	if (slot >= 1 && slot <= t->cap && (d = t->slots[slot - 1])) {
		d->nlookup = d->nlookup > nlookup ? d->nlookup - nlookup : 0;
		if (d->nlookup == 0) {
			uint64_t h = key_hash(&d->key) % MFS_BT_CAP;
			struct bdir **p = &t->hash[h];
			while (*p != d)
				p = &(*p)->next;
			*p = d->next;
			t->slots[slot - 1] = NULL;
			if (slot - 1 < t->next_free)
				t->next_free = slot - 1;
			t->n--;
			user_drop(t, d->uid);
		} else {
			d = NULL;
		}
	}
	pthread_mutex_unlock(&t->lock);
	free(d);
}

fuse_ino_t mfs_btree_file_ino(fuse_ino_t dir, uint64_t n)
{
	return dir | (fuse_ino_t)(n + 1);
}

int mfs_btree_decode(struct mfs *m, fuse_ino_t ino, struct mfs_inode *out)
{
	struct mfs_bdirs *t = m->bdirs;
	size_t slot = (size_t)((ino & ~MFS_INO_BATCH) >> MFS_BT_FILE_BITS);
	uint64_t low = ino & MFS_BT_FILE_MAX;
	bool found = false;
	pthread_mutex_lock(&t->lock);
	if (slot >= 1 && slot <= t->cap && t->slots[slot - 1]) {
		out->bkey = t->slots[slot - 1]->key;
		found = true;
	}
	pthread_mutex_unlock(&t->lock);
	if (!found)
		return -ENOENT;
	out->snap = mfs_snap_by_id(m, out->bkey.snap_id);
	if (!out->snap)
		return -ENOENT;
	int rc = mfs_snap_info(m, out->snap, &out->si);
	if (rc)
		return rc;
	if (low == 0) {
		out->kind = MFS_BDIR;
	} else {
		if (out->bkey.level < MFS_BL_EPOCH)
			return -ENOENT;
		out->kind = MFS_BFILE;
		out->batch = low - 1;
	}
	return 0;
}

int mfs_btree_has(struct mfs *m, const char *fp)
{
	struct mf_records r;
	char *err = NULL;
	int rc = mf_engine_batch_framing(m->eng, fp, &r, &err);
	free(err);
	if (rc == -ENOTSUP)
		return 0;
	return rc ? rc : 1;
}

/* The attributes of batch file n of folder key: its size once placed. */
static int file_attr(struct mfs *m, const struct mfs_inode *in, fuse_ino_t ino,
		     struct stat *st, double *ttl)
{
	(void)mfs_attr_shard(m, ino, &in->si, NULL, st);
	uint64_t size;
	if (mfs_batch_held(m, ino, &size)) { /* what its handles read */
		st->st_size = (off_t)size;
		st->st_blocks = (blkcnt_t)((size + 511) / 512);
		*ttl = MFS_ATTR_TTL;
		return 0;
	}
	struct mf_engine_batch_place pl;
	char *err = NULL;
	int rc = mf_engine_batch_find(m->eng, in->si.fp, &in->bkey.v, in->batch,
				      &pl, &err);
	free(err);
	*ttl = 0.0;
	if (rc == -EAGAIN || rc == -ENOTSUP)
		return 0; /* not placed yet: 0, never kept */
	if (rc)
		return rc == -EINVAL ? -ENOENT : rc;
	st->st_size = (off_t)pl.size;
	st->st_blocks = (blkcnt_t)((pl.size + 511) / 512);
	*ttl = MFS_ATTR_TTL;
	return 0;
}

static void folder_attr(struct mfs *m, const struct mfs_snap_info *si,
			fuse_ino_t ino, struct stat *st)
{
	mfs_attr_dir(m, si, st);
	st->st_ino = ino;
	st->st_mode = S_IFDIR | 0555;
}

int mfs_btree_attr(struct mfs *m, fuse_ino_t ino, uint64_t fh, struct stat *st,
		   double *ttl)
{
	struct mfs_inode in;
	memset(&in, 0, sizeof(in));
	int rc = mfs_btree_decode(m, ino, &in);
	if (rc)
		return rc;
	*ttl = MFS_ATTR_TTL;
	if (in.kind == MFS_BDIR) {
		folder_attr(m, &in.si, ino, st);
		return 0;
	}
	if (fh) { /* what the handle reads */
		(void)mfs_attr_shard(m, ino, &in.si, NULL, st);
		uint64_t size = mfs_batch_fh_size(fh);
		st->st_size = (off_t)size;
		st->st_blocks = (blkcnt_t)((size + 511) / 512);
		return 0;
	}
	return file_attr(m, &in, ino, st, ttl);
}

/* The key of name under folder `in` (or under a snapshot folder): 0, 1
 * for a batch file (its number in *n), -ENOENT. */
static int child_key(const struct mfs_inode *in, const char *name,
		     struct mfs_bkey *k, uint64_t *n)
{
	if (in->kind == MFS_DIR) {
		if (strcmp(name, "batches") != 0)
			return -ENOENT;
		*k = (struct mfs_bkey){.snap_id = in->si.id,
				       .level = MFS_BL_TOP,
				       .v = {.world = 1}};
		return 0;
	}
	*k = in->bkey;
	switch (in->bkey.level) {
	case MFS_BL_TOP:
		k->level = MFS_BL_SIZE;
		return mfs_batch_parse_size(name, &k->v.batch);
	case MFS_BL_SIZE:
		k->level = MFS_BL_SEED;
		return mfs_batch_parse_seed(name, &k->v.shuffled, &k->v.seed);
	case MFS_BL_SEED:
		k->level = MFS_BL_EPOCH;
		return mfs_batch_parse_epoch(name, &k->v.epoch);
	case MFS_BL_EPOCH:
		if (mfs_batch_parse_batch(name, n) == 0)
			return 1;
		k->level = MFS_BL_RANK;
		return mfs_batch_parse_rank(name, &k->v.rank, &k->v.world,
					    &k->v.from);
	case MFS_BL_RANK:
		return mfs_batch_parse_batch(name, n) == 0 ? 1 : -ENOENT;
	}
	return -ENOENT;
}

int mfs_btree_entry(struct mfs *m, fuse_req_t req, fuse_ino_t parent,
		    const struct mfs_inode *in, const char *name,
		    struct fuse_entry_param *e)
{
	struct mfs_bkey k;
	uint64_t n = 0;
	int rc = child_key(in, name, &k, &n);
	if (rc < 0)
		return rc;
	if (in->kind == MFS_DIR) {
		int has = mfs_btree_has(m, in->si.fp);
		if (has <= 0)
			return has < 0 ? has : -ENOENT;
	}
	e->entry_timeout = ENTRY_TTL;
	if (rc == 1) { /* a batch file of folder in */
		if (n >= MFS_BT_FILE_MAX)
			return -ENOENT; /* no epoch reaches it: see fuse_i.h */
		struct mfs_inode f = *in;
		f.kind = MFS_BFILE;
		f.batch = n;
		e->ino = mfs_btree_file_ino(parent, n);
		return file_attr(m, &f, e->ino, &e->attr, &e->attr_timeout);
	}
	uint64_t gen;
	rc = folder_ref(m, &k, mfs_reader_uid(fuse_req_ctx(req)->uid), &e->ino,
			&gen);
	if (rc)
		return rc;
	e->generation = gen;
	folder_attr(m, &in->si, e->ino, &e->attr);
	e->attr_timeout = MFS_ATTR_TTL;
	return 0;
}
