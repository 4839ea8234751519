/*
 * fuse_model.c - what the mounted tree is made of: the table of
 * fingerprints and pipeline names behind the inode numbers, shard file
 * names, and the attributes of every kind of inode.
 *
 * Not for: answering FUSE requests (fuse_ops.c, fuse_dir.c, ...) or
 * following the pipelines folder (fuse_specs.c). Never computes a shard:
 * everything here reads memory, or the catalog through the engine.
 */
#include "fuse_i.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- fingerprints and their ids ---- */

int mfs_ns_init(struct mfs *m)
{
	m->cap_id = 64;
	m->by_id = calloc(m->cap_id, sizeof(*m->by_id));
	return m->by_id ? 0 : -ENOMEM;
}

void mfs_ns_release(struct mfs *m)
{
	for (size_t i = 0; i < m->n_snaps; i++)
		free(m->snaps[i]);
	free(m->snaps);
	free(m->by_id);
	free(m->links);
}

static uint32_t hex_prefix(const char *fp)
{
	uint32_t v = 0;
	for (int i = 0; i < 8; i++) {
		char c = fp[i];
		v = (v << 4) | (uint32_t)(c <= '9' ? c - '0' : c - 'a' + 10);
	}
	return v >> 1; /* ids are 31 bits: inode bit 63 is MFS_INO_INC */
}

/* Valid ids are never 0 (the root lives there); caller holds ns_lock. */
static struct mfs_snap **id_slot(struct mfs *m, uint32_t id)
{
	assert(mf_mutex_held(&m->ns_lock));
	size_t mask = m->cap_id - 1;
	for (size_t i = id & mask;; i = (i + 1) & mask)
		if (!m->by_id[i] || m->by_id[i]->id == id)
			return &m->by_id[i];
}

static int id_grow(struct mfs *m)
{
	struct mfs_snap **old = m->by_id;
	size_t old_cap = m->cap_id;
	m->by_id = calloc(old_cap * 2, sizeof(*m->by_id));
	if (!m->by_id) {
		m->by_id = old;
		return -ENOMEM;
	}
	m->cap_id = old_cap * 2;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i])
			*id_slot(m, old[i]->id) = old[i];
	free(old);
	return 0;
}

struct mfs_snap *mfs_snap_by_id(struct mfs *m, uint32_t id)
{
	pthread_mutex_lock(&m->ns_lock);
	struct mfs_snap *s = *id_slot(m, id);
	pthread_mutex_unlock(&m->ns_lock);
	return s;
}

/* The id of fp is its first 32 bits, or the next free one after it: ids
 * are never released, so probing in the same order finds it again. */
static struct mfs_snap *snap_find(struct mfs *m, const char *fp,
				  uint32_t *free_id)
{
	uint32_t id = hex_prefix(fp);
	for (;; id = (id + 1) & 0x7fffffffu) {
		if (id == 0)
			continue;
		struct mfs_snap *s = *id_slot(m, id);
		if (!s) {
			*free_id = id;
			return NULL;
		}
		if (strcmp(s->fp, fp) == 0)
			return s;
	}
}

static int snap_add(struct mfs *m, struct mfs_snap *s)
{
	if ((m->n_snaps + 1) * 2 > m->cap_id && id_grow(m))
		return -ENOMEM;
	if (m->n_snaps == m->cap_snaps) {
		size_t cap = m->cap_snaps ? 2 * m->cap_snaps : 16;
		void *p = realloc(m->snaps, cap * sizeof(*m->snaps));
		if (!p)
			return -ENOMEM;
		m->snaps = p;
		m->cap_snaps = cap;
	}
	m->snaps[m->n_snaps++] = s;
	*id_slot(m, s->id) = s;
	return 0;
}

int mfs_snap_get(struct mfs *m, const char *fp, struct mfs_snap **out)
{
	if (!mf_is_hex(fp, MF_FP_HEX_LEN))
		return -ENOENT;
	pthread_mutex_lock(&m->ns_lock);
	uint32_t id = 0;
	struct mfs_snap *s = snap_find(m, fp, &id);
	int rc = 0;
	if (!s) {
		s = calloc(1, sizeof(*s));
		rc = s ? 0 : -ENOMEM;
		if (s) {
			memcpy(s->fp, fp, sizeof(s->fp));
			s->id = id;
			rc = snap_add(m, s);
		}
		if (rc) {
			free(s);
			s = NULL;
		}
	}
	pthread_mutex_unlock(&m->ns_lock);
	if (rc == 0)
		*out = s;
	return rc;
}

static void info_copy(const struct mfs_snap *s, struct mfs_snap_info *out)
{
	memcpy(out->fp, s->fp, sizeof(out->fp));
	out->id = s->id;
	out->gen = s->gen;
	out->shards = s->shards;
	memcpy(out->suffix, s->suffix, sizeof(out->suffix));
	memcpy(out->name, s->name, sizeof(out->name));
	out->created = s->created;
	out->registered = s->registered;
}

void mfs_snap_from_rec(struct mfs *m, struct mfs_snap *s,
		       const struct mf_engine_snapshot *rec)
{
	pthread_mutex_lock(&m->ns_lock);
	s->known = rec || s->registered;
	if (rec && !s->registered) {
		s->shards = rec->shards;
		snprintf(s->suffix, sizeof(s->suffix), "%s",
			 rec->suffix ? rec->suffix : "");
		snprintf(s->name, sizeof(s->name), "%s", rec->name);
	}
	if (rec)
		s->created = rec->created;
	s->checked_ns = mf_mono_ns();
	pthread_mutex_unlock(&m->ns_lock);
}

/* Reads the catalog row of s; caller holds no lock. */
static void snap_refresh(struct mfs *m, struct mfs_snap *s)
{
	struct mf_engine_snapshot rec;
	int rc = mf_engine_snapshot(m->eng, s->fp, &rec);
	if (rc != 0 && rc != -ENOENT)
		return; /* keep what we had; asked again next time */
	mfs_snap_from_rec(m, s, rc == 0 ? &rec : NULL);
	if (rc == 0)
		mf_engine_snapshot_release(&rec);
}

int mfs_snap_info(struct mfs *m, struct mfs_snap *s, struct mfs_snap_info *out)
{
	pthread_mutex_lock(&m->ns_lock);
	bool fresh = s->checked_ns != 0 &&
	    mf_mono_ns() - s->checked_ns < MFS_SNAP_TTL_NS;
	pthread_mutex_unlock(&m->ns_lock);
	if (!fresh)
		snap_refresh(m, s);
	pthread_mutex_lock(&m->ns_lock);
	bool known = s->known;
	if (known)
		info_copy(s, out);
	pthread_mutex_unlock(&m->ns_lock);
	return known ? 0 : -ENOENT;
}

int mfs_snap_known(struct mfs *m, const char *fp, struct mfs_snap **out,
		   struct mfs_snap_info *si)
{
	if (!mf_is_hex(fp, MF_FP_HEX_LEN))
		return -ENOENT;
	pthread_mutex_lock(&m->ns_lock);
	uint32_t id = 0;
	struct mfs_snap *s = snap_find(m, fp, &id);
	pthread_mutex_unlock(&m->ns_lock);
	if (!s) {
		/* asked before it is kept: a lookup of a name nobody made
		 * must cost no memory (any 64 hex digits are well formed) */
		struct mf_engine_snapshot rec;
		int rc = mf_engine_snapshot(m->eng, fp, &rec);
		if (rc)
			return -ENOENT; /* unknown, or unknowable now */
		rc = mfs_snap_get(m, fp, &s);
		if (rc == 0)
			mfs_snap_from_rec(m, s, &rec);
		mf_engine_snapshot_release(&rec);
		if (rc)
			return rc;
	}
	int rc = mfs_snap_info(m, s, si);
	if (rc == 0)
		*out = s;
	return rc;
}

void mfs_snap_forget(struct mfs *m, struct mfs_snap *s, bool bump_gen)
{
	pthread_mutex_lock(&m->ns_lock);
	s->checked_ns = 0;
	if (bump_gen)
		s->gen++;
	pthread_mutex_unlock(&m->ns_lock);
}

/* ---- pipeline names ---- */

static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	h &= 0x7fffffffu; /* as fingerprint ids: inode bit 63 stays 0 */
	return h ? h : 1;
}

/* Caller holds ns_lock. */
static struct mfs_link *link_find_locked(struct mfs *m, const char *name)
{
	assert(mf_mutex_held(&m->ns_lock));
	for (size_t i = 0; i < m->n_links; i++)
		if (strcmp(m->links[i].name, name) == 0)
			return &m->links[i];
	return NULL;
}

int mfs_link_find(struct mfs *m, const char *name, struct mfs_link *out)
{
	pthread_mutex_lock(&m->ns_lock);
	struct mfs_link *l = link_find_locked(m, name);
	bool ok = l && l->present;
	if (ok)
		*out = *l;
	pthread_mutex_unlock(&m->ns_lock);
	return ok ? 0 : -ENOENT;
}

int mfs_link_id(struct mfs *m, const char *name, uint32_t *id)
{
	pthread_mutex_lock(&m->ns_lock);
	struct mfs_link *l = link_find_locked(m, name);
	if (l)
		*id = l->id;
	pthread_mutex_unlock(&m->ns_lock);
	return l ? 0 : -ENOENT;
}

int mfs_link_by_id(struct mfs *m, uint32_t id, struct mfs_link *out)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&m->ns_lock);
	for (size_t i = 0; i < m->n_links; i++) {
		if (m->links[i].id == id && m->links[i].present) {
			*out = m->links[i];
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&m->ns_lock);
	return rc;
}

/* Caller holds ns_lock. Ids never change once given to a name. */
static struct mfs_link *link_add(struct mfs *m, const char *name)
{
	assert(mf_mutex_held(&m->ns_lock));
	if (m->n_links == m->cap_links) {
		size_t cap = m->cap_links ? 2 * m->cap_links : 8;
		void *p = realloc(m->links, cap * sizeof(*m->links));
		if (!p)
			return NULL;
		m->links = p;
		m->cap_links = cap;
	}
	uint32_t id = name_hash(name);
	for (size_t i = 0; i < m->n_links;)
		if (m->links[i].id == id) {
			id =
			    (id + 1) & 0x7fffffffu ? (id + 1) & 0x7fffffffu : 1;
			i = 0;
		} else {
			i++;
		}
	if (!m->links)
		return NULL;
	struct mfs_link *l = &m->links[m->n_links++];
	memset(l, 0, sizeof(*l));
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->id = id;
	return l;
}

/* Caller holds ns_lock: marks the names of v present, the others not;
 * the first spec (by path) with a name wins it. */
static int links_update(struct mfs *m, const struct mf_engine_spec_info *v,
			size_t n, char **changed, size_t *k)
{
	assert(mf_mutex_held(&m->ns_lock));
	bool *seen = calloc(m->n_links + n + 1, sizeof(*seen));
	if (!seen)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct mfs_link *l = link_find_locked(m, v[i].name);
		if (!l && !(l = link_add(m, v[i].name))) {
			free(seen);
			return -ENOMEM;
		}
		size_t li = (size_t)(l - m->links);
		if (seen[li])
			continue;
		seen[li] = true;
		if (!l->present || strcmp(l->fp, v[i].fp) != 0)
			changed[(*k)++] = strdup(l->name);
		l->present = true;
		memcpy(l->fp, v[i].fp, sizeof(l->fp));
	}
	for (size_t i = 0; i < m->n_links; i++) {
		if (!seen[i] && m->links[i].present) {
			m->links[i].present = false;
			changed[(*k)++] = strdup(m->links[i].name);
		}
	}
	free(seen);
	return 0;
}

static void snaps_mark(struct mfs *m, const struct mf_engine_spec_info *v,
		       size_t n, struct mfs_snap **reg)
{
	for (size_t i = 0; i < m->n_snaps; i++) {
		m->snaps[i]->registered = false;
		m->snaps[i]->checked_ns = 0;
	}
	for (size_t i = n; i-- > 0;) { /* the first spec of a fp wins */
		struct mfs_snap *s = reg[i];
		s->registered = true;
		s->known = true;
		s->shards = v[i].shards;
		snprintf(s->suffix, sizeof(s->suffix), "%s", v[i].suffix);
		snprintf(s->name, sizeof(s->name), "%s", v[i].name);
	}
}

int mfs_ns_set_specs(struct mfs *m, const struct mf_engine_spec_info *v,
		     size_t n, char ***changed, size_t *n_changed)
{
	struct mfs_snap **reg = calloc(n + 1, sizeof(*reg));
	if (!reg)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int rc = mfs_snap_get(m, v[i].fp, &reg[i]);
		if (rc) {
			free(reg);
			return rc;
		}
	}
	pthread_mutex_lock(&m->ns_lock);
	size_t k = 0;
	char **ch = calloc(m->n_links + n + 1, sizeof(*ch));
	int rc = ch ? links_update(m, v, n, ch, &k) : -ENOMEM;
	if (rc == 0)
		snaps_mark(m, v, n, reg);
	pthread_mutex_unlock(&m->ns_lock);
	free(reg);
	if (rc) {
		for (size_t i = 0; ch && i < k; i++)
			free(ch[i]);
		free(ch);
		return rc;
	}
	*changed = ch;
	*n_changed = k;
	return 0;
}

/* ---- shard names ---- */

unsigned mfs_shard_width(uint32_t shards)
{
	unsigned w = 1;
	for (uint32_t v = shards; v >= 10; v /= 10)
		w++;
	return w < 5 ? 5 : w;
}

int mfs_shard_name(const struct mfs_snap_info *si, uint32_t k, char *buf,
		   size_t len)
{
	int n = snprintf(buf, len, "shard-%0*u%s",
			 (int)mfs_shard_width(si->shards), k, si->suffix);
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int mfs_shard_parse(const struct mfs_snap_info *si, const char *name,
		    uint32_t *k)
{
	unsigned w = mfs_shard_width(si->shards);
	size_t sl = strlen(si->suffix), nl = strlen(name);
	if (strncmp(name, "shard-", 6) != 0 || nl != 6 + w + sl ||
	    strcmp(name + 6 + w, si->suffix) != 0)
		return -ENOENT;
	uint64_t v = 0;
	for (unsigned i = 0; i < w; i++) {
		char c = name[6 + i];
		if (c < '0' || c > '9')
			return -ENOENT;
		v = v * 10 + (uint64_t)(c - '0');
	}
	if (v >= si->shards)
		return -ENOENT;
	*k = (uint32_t)v;
	return 0;
}

/* ---- attributes ---- */

static void attr_base(struct mfs *m, struct stat *st, int64_t t)
{
	memset(st, 0, sizeof(*st));
	st->st_uid = m->uid;
	st->st_gid = m->gid;
	st->st_blksize = 128 * 1024;
	st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec =
	    (time_t)(t > 0 ? t : m->t0);
}

/* Directories are r-x for all; with allow_other the owner gets w so that
 * the kernel's default_permissions lets the owner (only) rm. */
static mode_t dir_mode(struct mfs *m)
{
	return S_IFDIR | (m->o.allow_other ? 0755 : 0555);
}

void mfs_attr_root(struct mfs *m, struct stat *st)
{
	attr_base(m, st, m->t0);
	st->st_ino = MFS_ROOT_INO;
	st->st_mode = dir_mode(m);
	pthread_mutex_lock(&m->ns_lock);
	st->st_nlink = 2 + m->n_snaps;
	pthread_mutex_unlock(&m->ns_lock);
}

void mfs_attr_dir(struct mfs *m, const struct mfs_snap_info *si,
		  struct stat *st)
{
	attr_base(m, st, si->created);
	st->st_ino = mfs_ino_dir(si->id);
	st->st_mode = dir_mode(m);
	st->st_nlink = 2;
}

void mfs_attr_link(struct mfs *m, const struct mfs_link *l, struct stat *st)
{
	attr_base(m, st, m->t0);
	st->st_ino = mfs_ino_link(l->id);
	st->st_mode = S_IFLNK | 0777;
	st->st_nlink = 1;
	st->st_size = MF_FP_HEX_LEN;
}

double mfs_attr_shard(struct mfs *m, fuse_ino_t ino,
		      const struct mfs_snap_info *si,
		      const struct mf_engine_shard *rec, struct stat *st)
{
	attr_base(m, st, si->created);
	st->st_ino = ino;
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	/* sealed and served by this mount, its commit under way: an inode
	 * with handles open keeps the size they read (a lookup must not
	 * shrink what the kernel knows of it), and one with none gets the
	 * sealed file's size from the engine (a stat after a read shows what
	 * the read got); not cached, since the commit may still fail */
	struct mf_engine_file held;
	int64_t created;
	if (rec && rec->state == MF_ENGINE_RUNNING &&
	    (mfs_node_held(m, ino, &held, &created) ||
	     mf_engine_sealed_stat(m->eng, rec, &held) == 0)) {
		st->st_size = (off_t)held.raw_bytes;
		st->st_blocks = (blkcnt_t)((held.stored_bytes + 511) / 512);
		return 0.0;
	}
	/* running and being pushed into this inode's pages: the bytes
	 * pushed so far, or the kernel would drop them (not cached) */
	uint64_t pushed;
	if (rec && rec->state == MF_ENGINE_RUNNING &&
	    mfs_node_pushed(m, ino, rec->generation, &pushed)) {
		st->st_size = (off_t)pushed;
		return 0.0;
	}
	/* the size 0 of a shard not materialized is never kept: a reply
	 * made before a computation can reach the kernel after an open
	 * that told it to forget what it cached, and another process may
	 * compute the shard at any time */
	if (!rec || rec->state != MF_ENGINE_MATERIALIZED)
		return 0.0;
	st->st_size = (off_t)rec->raw_bytes;
	st->st_blocks = (blkcnt_t)((rec->stored_bytes + 511) / 512);
	if (rec->last_read > 0)
		st->st_atim.tv_sec = (time_t)rec->last_read;
	return MFS_ATTR_TTL;
}

/* ---- inodes ---- */

int mfs_shard_rec(struct mfs *m, const char *fp, uint32_t k,
		  struct mf_engine_shard *rec)
{
	int rc = mf_engine_shard_rec(m->eng, fp, k, rec);
	return rc == -ENOENT ? 1 : rc;
}

int mfs_inode_decode(struct mfs *m, fuse_ino_t ino, struct mfs_inode *out)
{
	if (!atomic_load_explicit(&m->ra_tuned, memory_order_relaxed))
		mfs_tune_once(m);
	memset(out, 0, sizeof(*out));
	if (ino == MFS_ROOT_INO) {
		out->kind = MFS_ROOT;
		return 0;
	}
	if (mfs_ino_is_batch(ino))
		return mfs_btree_decode(m, ino, out);
	uint32_t id = (uint32_t)(ino >> 32), low = (uint32_t)ino;
	if (ino & MFS_INO_INC) {
		uint32_t k;
		int rc = mfs_inc_decode(m, ino, &id, &k);
		if (rc)
			return rc;
		low = k + 1;
	} else if (low == MFS_LINK_LOW) {
		out->kind = MFS_LINK;
		return mfs_link_by_id(m, id, &out->link);
	}
	out->snap = mfs_snap_by_id(m, id);
	if (!out->snap)
		return -ENOENT;
	int rc = mfs_snap_info(m, out->snap, &out->si);
	if (rc)
		return rc;
	out->kind = low == 0 ? MFS_DIR : MFS_SHARD;
	out->shard = low - 1;
	if (low != 0 && out->shard >= out->si.shards)
		return -ENOENT;
	return 0;
}

int mfs_snaps_registered(struct mfs *m, struct mfs_snap ***out, size_t *n)
{
	pthread_mutex_lock(&m->ns_lock);
	struct mfs_snap **v = calloc(m->n_snaps + 1, sizeof(*v));
	size_t k = 0;
	for (size_t i = 0; v && i < m->n_snaps; i++)
		if (m->snaps[i]->registered)
			v[k++] = m->snaps[i];
	pthread_mutex_unlock(&m->ns_lock);
	if (!v)
		return -ENOMEM;
	*out = v;
	*n = k;
	return 0;
}
