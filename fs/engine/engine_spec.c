/*
 * engine_spec.c - the engine's registry of specs: registering a spec file
 * (catalog row and the store's metadata file), finding the spec of a fingerprint,
 * and resolving what a user typed into a fingerprint.
 *
 * Not for: parsing specs (pipeline/), computing shards (engine_run.c) or
 * whom a pipeline name belongs to (engine_names.c).
 */
#include "engine_i.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Writes the fingerprint folder's metadata file (mf_snapshot.h) for spec s,
 * with the bytes that were parsed: the file may have changed since, or
 * become a FIFO that an open here would wait on. */
static int write_metadata(struct mf_engine *e, const struct mf_spec *s,
			  const struct mf_fingerprint *fpr)
{
	char codec[32];
	mf_format_codec(s->codec, s->level, codec, sizeof(codec));
	struct mf_meta_part *parts =
	    calloc(fpr->n_parts ? fpr->n_parts : 1, sizeof(*parts));
	if (!parts)
		return -ENOMEM;
	for (size_t i = 0; i < fpr->n_parts; i++)
		parts[i] = (struct mf_meta_part){fpr->parts[i].hex,
						 fpr->parts[i].label};
	struct mf_snapshot_meta m = {
	    .fp = fpr->hex,
	    .name = s->name,
	    .spec_path = s->path,
	    .shards = s->shards,
	    .compression = codec,
	    .chunk_size = s->chunk_size,
	    .suffix = s->suffix,
	    .expire_after = s->expire_after,
	    .pending_expiry = s->pending_expiry,
	    .keep = s->keep,
	    .has_owner = !s->fingerprint_key,
	    .owner = s->owner_uid,
	    .parts = parts,
	    .n_parts = fpr->n_parts,
	    .spec = s->text,
	    .spec_len = s->text ? s->text_len : 0,
	};
	int rc = mf_store_put_metadata(e->store, &m);
	free(parts);
	return rc;
}

/* The snapshot row of spec s with fingerprint fp, its strings borrowed
 * from s and codec (32 bytes). */
static void snap_rec_of(const struct mf_spec *s, const char *fp, char codec[32],
			struct mf_snapshot_rec *rec)
{
	mf_format_codec(s->codec, s->level, codec, 32);
	memset(rec, 0, sizeof(*rec));
	snprintf(rec->fp, sizeof(rec->fp), "%s", fp);
	snprintf(rec->name, sizeof(rec->name), "%s", s->name);
	rec->shards = s->shards;
	rec->spec_path = s->path;
	rec->compression = codec;
	rec->suffix = s->suffix;
	rec->chunk_size = s->chunk_size;
	rec->expire_after = s->expire_after;
	rec->pending_expiry = s->pending_expiry;
	rec->keep = s->keep;
	/* a fixed key is a promise shared by whoever writes it */
	rec->has_owner = !s->fingerprint_key;
	rec->owner = s->owner_uid;
	rec->created = 0; /* now, by the catalog's clock (mf_catalog_now) */
}

static int put_snapshot(struct mf_catalog *c, const struct mf_spec *s,
			const char *fp)
{
	char codec[32];
	struct mf_snapshot_rec rec;
	snap_rec_of(s, fp, codec, &rec);
	return mf_catalog_put_snapshot(c, &rec);
}

static struct spec_entry *find_spec(struct mf_engine *e, const char *fp)
{
	for (struct spec_entry *s = e->specs; s; s = s->next)
		if (strcmp(s->fpr.hex, fp) == 0)
			return s;
	return NULL;
}

bool eng_is_registered(struct mf_engine *e, const char *fp)
{
	bool found = false;
	pthread_mutex_lock(&e->lock);
	for (struct spec_entry *s = e->specs; s && !found; s = s->next)
		found = s->registered && strcmp(s->fpr.hex, fp) == 0;
	pthread_mutex_unlock(&e->lock);
	return found;
}

void mf_engine_set_mount(struct mf_engine *e, const char *path, dev_t dev)
{
	pthread_mutex_lock(&e->lock);
	snprintf(e->mount_path, sizeof(e->mount_path), "%s", path ? path : "");
	e->mount_dev = path ? dev : 0;
	pthread_mutex_unlock(&e->lock);
}

/* The mount a spec's files must not be on, as mf_engine_set_mount set it. */
struct own_mount {
	char path[PATH_MAX]; /* "" when none */
	dev_t dev; /* 0: not mounted yet */
};

/* True when real (resolved) is the folder dir or inside it. */
static bool inside(const char *real, const char *dir)
{
	size_t n = strlen(dir);
	if (n > 0 && dir[n - 1] == '/')
		n--; /* "/" itself */
	return strncmp(real, dir, n) == 0 && (real[n] == '/' || !real[n]);
}

/*
 * 0 when the file at path (what it resolves to) is not on the mount om;
 * else -EINVAL and *err "SPEC: WHAT 'REL': REAL: on this matfs mount
 * itself: refused". Only stat and realpath: lookups the mount answers
 * without computing anything. Once the mount's device is known a path on
 * another device is not resolved.
 */
static int off_mount(const struct own_mount *om, const char *spec,
		     const char *what, const char *rel, const char *path,
		     char **err)
{
	struct stat st;
	bool on = om->dev && stat(path, &st) == 0 && st.st_dev == om->dev;
	char *real = on || !om->dev ? realpath(path, NULL) : NULL;
	on = on || (real && inside(real, om->path));
	if (on)
		eng_errf(err,
			 "%s: %s '%s': %s: on this matfs mount itself: "
			 "refused",
			 spec, what, rel, real ? real : path);
	free(real);
	return on ? -EINVAL : 0;
}

/* Refuses a spec whose deps or input files are on the engine's own mount,
 * before anything reads them (the fingerprint does). */
static int check_off_mount(struct mf_engine *e, const char *path,
			   const struct mf_spec *s, char **err)
{
	struct own_mount om;
	pthread_mutex_lock(&e->lock);
	memcpy(om.path, e->mount_path, sizeof(om.path));
	om.dev = e->mount_dev;
	pthread_mutex_unlock(&e->lock);
	if (!om.path[0])
		return 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < s->n_stages; i++)
		for (size_t k = 0; rc == 0 && k < s->stages[i].n_deps; k++)
			rc = off_mount(&om, path, "deps",
				       s->stages[i].deps_rel[k],
				       s->stages[i].deps[k], err);
	for (size_t i = 0; rc == 0 && i < s->n_inputs; i++)
		rc = off_mount(&om, path, "inputs", s->inputs_rel[i],
			       s->inputs[i], err);
	return rc;
}

/* Fingerprints spec, loaded from path (taken: freed on failure), into a
 * new registry entry. */
static int entry_of(struct mf_engine *e, const char *path, struct mf_spec *spec,
		    struct spec_entry **out, char **err)
{
	struct spec_entry *se = calloc(1, sizeof(*se));
	int rc = se ? check_off_mount(e, path, spec, err) : -ENOMEM;
	if (rc == 0)
		rc = mf_fingerprint_compute(spec, &se->fpr, err);
	if (rc) {
		mf_spec_free(spec);
		free(se);
		return rc;
	}
	se->spec = spec;
	*out = se;
	return 0;
}

/* Loads and fingerprints a spec file into a new registry entry. */
static int load_entry(struct mf_engine *e, const char *path,
		      struct spec_entry **out, char **err)
{
	struct mf_spec *spec;
	int rc = mf_spec_load(path, &spec, err);
	return rc ? rc : entry_of(e, path, spec, out, err);
}

static void free_entry(struct spec_entry *se)
{
	mf_fingerprint_release(&se->fpr);
	mf_spec_free(se->spec);
	free(se);
}

void eng_hold_rec(struct mf_engine *e, const char *fp, struct mf_run_rec *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->run_id, e->holder, sizeof(h->run_id));
	snprintf(h->fp, sizeof(h->fp), "%s", fp);
	snprintf(h->host, sizeof(h->host), "%s", e->host);
	h->pid = (int32_t)e->pid;
	h->pid_start = e->pid_start;
	h->started = h->heartbeat = mf_now_s();
	memcpy(h->boot_id, e->boot_id, sizeof(h->boot_id));
	h->pid_ns = e->pid_ns;
}

/* The snapshot row of a registered spec, and this engine's hold on it, in
 * one transaction: no other process's expiry can drop the row in between. */
static int put_held(struct mf_engine *e, struct mf_catalog *c,
		    const struct mf_spec *s, const char *fp)
{
	struct mf_run_rec h;
	eng_hold_rec(e, fp, &h);
	int rc = mf_catalog_begin(c);
	if (rc)
		return rc;
	rc = put_snapshot(c, s, fp);
	if (rc == 0)
		rc = mf_catalog_hold(c, &h);
	return mf_catalog_end(c, rc);
}

void eng_release(struct mf_engine *e, struct mf_catalog *c, const char *fp)
{
	if (!eng_is_registered(e, fp))
		(void)mf_catalog_release(c, e->holder, fp);
}

/* The first registered fingerprint of the registry that is not in held
 * (this engine's holds): a copy of its snapshot row in *out (release
 * with mf_snapshot_rec_release). False when every one is held. */
static bool first_unheld(struct mf_engine *e, const struct mf_run_rec *held,
			 size_t n, struct mf_snapshot_rec *out)
{
	bool found = false;
	pthread_mutex_lock(&e->lock);
	for (const struct spec_entry *s = e->specs; s && !found; s = s->next) {
		bool have = !s->registered;
		for (size_t i = 0; i < n && !have; i++)
			have = strcmp(held[i].fp, s->fpr.hex) == 0;
		if (have)
			continue;
		char codec[32];
		snap_rec_of(s->spec, s->fpr.hex, codec, out);
		out->spec_path = strdup(out->spec_path);
		out->compression = strdup(codec);
		out->suffix = strdup(out->suffix);
		found = true;
	}
	pthread_mutex_unlock(&e->lock);
	if (found && (!out->spec_path || !out->compression || !out->suffix)) {
		mf_snapshot_rec_release(out);
		return false;
	}
	return found;
}

void eng_holds_refresh(struct mf_engine *e)
{
	struct mf_catalog *c;
	e->holds_refreshed = (int64_t)(mf_mono_ns() / 1000000000);
	if (eng_catalog_get(e, &c) != 0)
		return;
	(void)mf_catalog_heartbeat_holds(c, e->holder, mf_now_s());
	struct mf_run_rec *held = NULL;
	size_t n = 0;
	if (mf_catalog_list_holds(c, NULL, &held, &n) == 0) {
		size_t k = 0; /* keep this engine's */
		for (size_t i = 0; i < n; i++)
			if (strcmp(held[i].run_id, e->holder) == 0)
				held[k++] = held[i];
		n = k;
	} else {
		n = 0;
	}
	/* one missing hold per turn: the registry may change meanwhile */
	for (int turns = 0; turns < 1024; turns++) {
		struct mf_snapshot_rec rec;
		if (!first_unheld(e, held, n, &rec))
			break;
		struct mf_run_rec h, *grown;
		eng_hold_rec(e, rec.fp, &h);
		int rc = mf_catalog_begin(c);
		if (rc == 0) {
			struct mf_snapshot_rec have;
			rc = mf_catalog_get_snapshot(c, rec.fp, &have);
			/* lost: the row comes back; without an owner (fsck
			 * --rebuild, an older schema): it takes this spec's */
			bool put = rc == -ENOENT ||
			    (rc == 0 && !have.has_owner && rec.has_owner);
			if (rc == 0)
				mf_snapshot_rec_release(&have);
			if (put)
				rc = mf_catalog_put_snapshot(c, &rec);
			if (rc == 0)
				rc = mf_catalog_hold(c, &h);
			rc = mf_catalog_end(c, rc);
		}
		mf_snapshot_rec_release(&rec);
		grown = rc ? NULL : realloc(held, (n + 1) * sizeof(*held));
		if (!grown)
			break;
		held = grown;
		held[n++] = h;
	}
	free(held);
	eng_catalog_put(e, c);
}

/* Records se in the catalog and the store, then in the registry (newest
 * first, so the latest settings of a fingerprint win). A registered spec's
 * snapshot is held (mf_catalog_hold), so another process's expiry keeps
 * its row. Another process may still have removed the folder between the
 * two writes, when its expiry deleted the row just before this
 * registration: the folder vanishing under the metadata write (-ENOENT)
 * makes both writes start again, a few times, rather than leave the spec
 * unregistered. */
static int add_entry(struct mf_engine *e, struct mf_catalog *c,
		     struct spec_entry *se, bool registered, char **err)
{
	se->registered = registered;
	int rc = -ENOENT;
	for (int tries = 0; rc == -ENOENT && tries < 4; tries++) {
		rc = registered ? put_held(e, c, se->spec, se->fpr.hex)
				: put_snapshot(c, se->spec, se->fpr.hex);
		if (rc == -EEXIST) { /* another owner's since the check */
			struct mf_snapshot_rec rec;
			bool named =
			    mf_catalog_get_snapshot(c, se->fpr.hex, &rec) == 0;
			eng_errf(err,
				 "spec '%s': fingerprint %.12s belongs to spec "
				 "'%s' of another owner, recorded since this "
				 "spec was checked: refused",
				 se->spec->path, se->fpr.hex,
				 named ? rec.spec_path : "?");
			if (named)
				mf_snapshot_rec_release(&rec);
		} else if (rc)
			eng_errf(err, "catalog: recording '%s': %s",
				 se->spec->path, strerror(-rc));
		if (rc)
			return rc;
		rc = write_metadata(e, se->spec, &se->fpr);
	}
	if (rc) {
		eng_errf(err, "store: writing metadata of %s: %s", se->fpr.hex,
			 strerror(-rc));
		return rc;
	}
	pthread_mutex_lock(&e->lock);
	se->next = e->specs;
	e->specs = se;
	pthread_mutex_unlock(&e->lock);
	return 0;
}

/* Records the snapshot of se and publishes se in the registry; frees se
 * on failure. */
static int register_entry(struct mf_engine *e, struct spec_entry *se,
			  char fp[MF_FP_HEX_LEN + 1], char **err)
{
	/* copied first: once published, an unregister may free se */
	char hex[MF_FP_HEX_LEN + 1];
	memcpy(hex, se->fpr.hex, sizeof(hex));
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc == 0) {
		/* one claim check and record at a time in this process: two
		 * new spec files taking one new name cannot both pass */
		pthread_mutex_lock(&e->name_lock);
		rc = eng_check_name_claim(e, c, se->spec, err);
		if (rc == 0)
			rc = eng_check_fp_claim(e, c, se->spec, hex, err);
		if (rc == 0)
			rc = add_entry(e, c, se, true, err);
		pthread_mutex_unlock(&e->name_lock);
		eng_catalog_put(e, c);
	}
	if (mf_catalog_unreachable(rc)) { /* not the spec's fault */
		const char *why = mf_catalog_last_error();
		eng_errf(
		    err,
		    rc == -EUSERS ? "spec '%s': catalog '%s' refuses new "
				    "connections (max_connections): %s"
				  : "spec '%s': catalog '%s' unreachable: %s",
		    se->spec->path, mf_engine_catalog_shown(e->catalog_path),
		    why && *why ? why : strerror(-rc));
		rc = -EAGAIN;
	} else if (rc == -ENOSPC || rc == -EDQUOT) {
		rc = -EAGAIN; /* nor is a full disk: *err says which write */
	}
	if (rc) {
		free_entry(se);
		return rc;
	}
	memcpy(fp, hex, sizeof(hex));
	return 0;
}

int mf_engine_register(struct mf_engine *e, const char *spec_path,
		       char fp[MF_FP_HEX_LEN + 1], char **err)
{
	struct spec_entry *se;
	int rc = load_entry(e, spec_path, &se, err);
	return rc ? rc : register_entry(e, se, fp, err);
}

int eng_register_loaded(struct mf_engine *e, const char *path,
			struct mf_spec *spec, char fp[MF_FP_HEX_LEN + 1],
			char **err)
{
	struct spec_entry *se;
	int rc = entry_of(e, path, spec, &se, err);
	return rc ? rc : register_entry(e, se, fp, err);
}

int mf_engine_computable(struct mf_engine *e, const char *fp, char **why)
{
	if (eng_is_registered(e, fp))
		return 0;
	struct mf_engine_snapshot rec;
	int rc = mf_engine_snapshot(e, fp, &rec);
	if (rc)
		return rc;
	struct spec_entry *se;
	char *err = NULL;
	rc = load_entry(e, rec.spec_path, &se, &err);
	if (rc == 0) {
		if (strcmp(se->fpr.hex, fp) != 0) {
			eng_errf(why,
				 "its spec '%s' now gives fingerprint %.12s "
				 "(the spec, its deps or its inputs changed)",
				 rec.spec_path, se->fpr.hex);
			rc = -ESTALE;
		}
		free_entry(se);
	} else {
		eng_errf(why, "its spec cannot be loaded: %s",
			 err ? err : strerror(-rc));
		rc = -ESTALE;
	}
	free(err);
	mf_engine_snapshot_release(&rec);
	return rc;
}

/* Holders of a hint other than shard k of fp, of se's owner and folder,
 * that the catalog says are materialized by their run, appended to *v. */
static int add_holders(struct mf_catalog *c, const struct spec_entry *se,
		       const char *fp, uint32_t k,
		       const struct mf_store_donor *h, size_t nh,
		       struct mf_engine_holder **v, size_t *n, size_t *cap)
{
	uint64_t place = eng_spec_place(se->spec);
	for (size_t i = 0; i < nh; i++) {
		/* only what reuse would take (engine_run.c, try_donor) */
		if ((strcmp(h[i].fp, fp) == 0 && h[i].shard == k) ||
		    h[i].owner != se->spec->owner_uid || h[i].place != place)
			continue;
		struct mf_shard_rec rec;
		if (mf_catalog_get_shard(c, h[i].fp, h[i].shard, &rec) != 0)
			continue;
		bool ok = rec.state == MF_SHARD_MATERIALIZED &&
		    strcmp(rec.run_id, h[i].run_id) == 0;
		mf_shard_rec_release(&rec);
		if (!ok)
			continue;
		if (*n == *cap) {
			size_t nc = *cap ? 2 * *cap : 16;
			void *p = realloc(*v, nc * sizeof(**v));
			if (!p)
				return -ENOMEM;
			*v = p;
			*cap = nc;
		}
		struct mf_engine_holder *o = &(*v)[(*n)++];
		o->shard = k;
		o->their_shard = h[i].shard;
		memcpy(o->fp, h[i].fp, sizeof(o->fp));
	}
	return 0;
}

int mf_engine_shared_with(struct mf_engine *e, const char *fp,
			  struct mf_engine_holder **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct mf_engine_snapshot rec;
	int rc = mf_engine_snapshot(e, fp, &rec);
	if (rc)
		return rc;
	struct spec_entry *se;
	char *err = NULL;
	rc = load_entry(e, rec.spec_path, &se, &err);
	free(err);
	mf_engine_snapshot_release(&rec);
	if (rc)
		return -ESTALE;
	if (strcmp(se->fpr.hex, fp) != 0) {
		free_entry(se);
		return -ESTALE;
	}
	struct mf_catalog *c = NULL;
	rc = eng_catalog_get(e, &c);
	size_t cap = 0;
	for (uint32_t k = 0; rc == 0 && k < se->spec->shards; k++) {
		char sfp[MF_FP_HEX_LEN + 1];
		struct mf_store_donor h[MF_STORE_HOLDERS];
		size_t nh = 0;
		if (mf_fingerprint_shard(se->spec, &se->fpr, k, sfp) != 0 ||
		    mf_store_shared_get(e->store, sfp, h, &nh) != 0)
			continue;
		rc = add_holders(c, se, fp, k, h, nh, out, n, &cap);
	}
	eng_catalog_put(e, c);
	free_entry(se);
	if (rc) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return rc;
}

/* True when one of the holders in v[0..n) is a shard of `from`. */
static bool holder_of(const struct mf_engine_holder *v, size_t n,
		      const char *from)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].fp, from) == 0)
			return true;
	return false;
}

/* Shard k of fp may be stored from a shard of `from` (mf_engine_feeds). */
static bool shard_feeds(struct mf_engine *e, struct mf_catalog *c,
			const struct spec_entry *se, const char *fp, uint32_t k,
			const char *from)
{
	char sfp[MF_FP_HEX_LEN + 1];
	struct mf_store_donor h[MF_STORE_HOLDERS];
	size_t nh = 0;
	if (mf_fingerprint_shard(se->spec, &se->fpr, k, sfp) != 0 ||
	    mf_store_shared_get(e->store, sfp, h, &nh) != 0)
		return false;
	struct mf_engine_holder *v = NULL;
	size_t n = 0, cap = 0;
	bool feeds = add_holders(c, se, fp, k, h, nh, &v, &n, &cap) == 0 &&
	    holder_of(v, n, from);
	free(v);
	return feeds;
}

bool mf_engine_feeds(struct mf_engine *e, const char *fp, const char *from)
{
	struct mf_catalog *c = NULL;
	if (eng_catalog_get(e, &c) != 0)
		return false;
	struct spec_entry *se;
	char *err = NULL;
	struct mf_shard_rec *recs = NULL;
	size_t nr = 0;
	bool feeds = false;
	if (eng_spec_for(e, c, fp, &se, &err) == 0 &&
	    mf_catalog_list_shards(c, fp, &recs, &nr) == 0) {
		uint32_t shards = se->spec->shards;
		bool *done = calloc(shards + 1, sizeof(*done));
		for (size_t i = 0; done && i < nr; i++)
			if (recs[i].index < shards &&
			    recs[i].state == MF_SHARD_MATERIALIZED)
				done[recs[i].index] = true;
		for (uint32_t k = 0; done && !feeds && k < shards; k++)
			feeds = !done[k] && shard_feeds(e, c, se, fp, k, from);
		free(done);
	}
	for (size_t i = 0; i < nr; i++)
		mf_shard_rec_release(&recs[i]);
	free(recs);
	free(err);
	eng_catalog_put(e, c);
	return feeds;
}

int eng_spec_for(struct mf_engine *e, struct mf_catalog *c, const char *fp,
		 struct spec_entry **out, char **err)
{
	pthread_mutex_lock(&e->lock);
	struct spec_entry *se = find_spec(e, fp);
	pthread_mutex_unlock(&e->lock);
	if (se) {
		*out = se;
		return 0;
	}
	struct mf_snapshot_rec rec;
	int rc = mf_catalog_get_snapshot(c, fp, &rec);
	if (rc) {
		eng_errf(err, "no snapshot %s in the catalog", fp);
		return rc;
	}
	rc = load_entry(e, rec.spec_path, &se, err);
	if (rc == 0 && strcmp(se->fpr.hex, fp) != 0) {
		eng_errf(err,
			 "spec '%s' now has fingerprint %s: snapshot %s can no "
			 "longer be computed",
			 rec.spec_path, se->fpr.hex, fp);
		free_entry(se);
		rc = -ESTALE;
	}
	mf_snapshot_rec_release(&rec);
	if (rc)
		return rc;
	rc = add_entry(e, c, se, false, err);
	if (rc) {
		free_entry(se);
		return rc;
	}
	*out = se;
	return 0;
}

/* Hex digits a fingerprint prefix needs at least (git accepts 4): with 8,
 * a chance collision needs tens of thousands of fingerprints in one
 * catalog, and a typo of a short name is not taken for a prefix. */
#define PREFIX_MIN 8

/* True when s is 1 to 64 hex digits of either case. */
static bool is_hex_prefix(const char *s)
{
	size_t n = strspn(s, "0123456789abcdefABCDEF");
	return n > 0 && n <= MF_FP_HEX_LEN && s[n] == '\0';
}

/* "FP (NAME), FP (NAME)" of the snapshots v[i] that match, for a message. */
static char *list_matches(const struct mf_snapshot_rec *v, size_t n,
			  const char *prefix)
{
	size_t len = 1;
	for (size_t i = 0; i < n; i++)
		if (strncmp(v[i].fp, prefix, strlen(prefix)) == 0)
			len += strlen(v[i].fp) + strlen(v[i].name) + 5;
	char *s = malloc(len), *p = s;
	if (!s)
		return NULL;
	*p = '\0';
	for (size_t i = 0; i < n; i++) {
		if (strncmp(v[i].fp, prefix, strlen(prefix)) != 0)
			continue;
		p += snprintf(p, len - (size_t)(p - s), "%s%s (%s)",
			      p == s ? "" : ", ", v[i].fp, v[i].name);
	}
	return s;
}

/* The one fingerprint in the catalog that starts with what (8 to 64 hex
 * digits, either case): -ENOENT when none, -EINVAL when it is too short
 * or more than one starts with it (*err lists them). */
static int resolve_prefix(struct mf_catalog *c, const char *what,
			  char fp[MF_FP_HEX_LEN + 1], char **err)
{
	size_t len = strlen(what);
	if (len < PREFIX_MIN) {
		eng_errf(err,
			 "no pipeline named '%s', and a fingerprint prefix "
			 "needs at least %d hex digits",
			 what, PREFIX_MIN);
		return -EINVAL;
	}
	char prefix[MF_FP_HEX_LEN + 1];
	for (size_t i = 0; i <= len; i++)
		prefix[i] = (char)tolower((unsigned char)what[i]);
	struct mf_snapshot_rec *v;
	size_t n, found = 0, at = 0;
	int rc = mf_catalog_list_snapshots(c, &v, &n);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (strncmp(v[i].fp, prefix, len) == 0) {
			found++;
			at = i;
		}
	}
	if (found == 1) {
		memcpy(fp, v[at].fp, MF_FP_HEX_LEN + 1);
	} else if (found == 0) {
		rc = -ENOENT;
	} else {
		char *list = list_matches(v, n, prefix);
		eng_errf(err, "fingerprint prefix '%s' is ambiguous: %s", what,
			 list ? list : "several snapshots match");
		free(list);
		rc = -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		mf_snapshot_rec_release(&v[i]);
	free(v);
	return rc;
}

/* what names pipeline fp; when it is also a prefix that another
 * fingerprint starts with, neither is taken: -EINVAL with *err listing
 * both, so that a spec author cannot name a pipeline after the digits
 * ls prints of someone else's snapshot and have matctl act on theirs. */
static int check_name_prefix(struct mf_catalog *c, const char *what,
			     const char fp[MF_FP_HEX_LEN + 1], char **err)
{
	size_t len = strlen(what);
	if (!is_hex_prefix(what) || len < PREFIX_MIN)
		return 0;
	char prefix[MF_FP_HEX_LEN + 1];
	for (size_t i = 0; i <= len; i++)
		prefix[i] = (char)tolower((unsigned char)what[i]);
	struct mf_snapshot_rec *v;
	size_t n, others = 0;
	int rc = mf_catalog_list_snapshots(c, &v, &n);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		others += strncmp(v[i].fp, prefix, len) == 0 &&
		    strcmp(v[i].fp, fp) != 0;
	if (others) {
		char *list = list_matches(v, n, prefix);
		eng_errf(err,
			 "'%s' is ambiguous: it names pipeline %s (%s) and is "
			 "a fingerprint prefix of %s",
			 what, fp, what, list ? list : "other snapshots");
		free(list);
		rc = -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		mf_snapshot_rec_release(&v[i]);
	free(v);
	return rc;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), t = strlen(tail);
	return n >= t && strcmp(s + n - t, tail) == 0;
}

bool mf_engine_is_spec_path(const char *what)
{
	return strchr(what, '/') || ends_with(what, ".yaml") ||
	    ends_with(what, ".yml");
}

/* Registers the spec file what; a file that is not there says why it was
 * taken for one when nothing but its ending made it a path. */
static int resolve_spec(struct mf_engine *e, const char *what,
			char fp[MF_FP_HEX_LEN + 1], char **err)
{
	char *why = NULL;
	int rc = mf_engine_register(e, what, fp, &why);
	if (rc == -ENOENT && !strchr(what, '/'))
		eng_errf(err,
			 "%s (an argument ending in .yaml or .yml is a spec "
			 "file)",
			 why ? why : strerror(-rc));
	else if (why)
		eng_errf(err, "%s", why);
	free(why);
	return rc;
}

/* *err for a word that names nothing in the catalog; a file of that name
 * here is pointed out, since a bare word is never read as one. */
static void not_found(const char *what, char **err)
{
	struct stat st;
	char hint[PATH_MAX + 128] = "";
	if (stat(what, &st) == 0)
		snprintf(hint, sizeof(hint),
			 "; to use the file '%s' as a spec file, write './%s'",
			 what, what);
	if (mf_is_hex(what, MF_FP_HEX_LEN))
		eng_errf(err, "no snapshot with fingerprint %s in the catalog",
			 what);
	else if (is_hex_prefix(what))
		eng_errf(err,
			 "no pipeline named '%s' and no fingerprint starting "
			 "with it%s",
			 what, hint);
	else
		eng_errf(err, "no pipeline named '%s'%s", what, hint);
}

int mf_engine_resolve(struct mf_engine *e, const char *what,
		      char fp[MF_FP_HEX_LEN + 1], char **err)
{
	if (mf_engine_is_spec_path(what))
		return resolve_spec(e, what, fp, err);
	if (mf_is_hex(what, MF_FP_HEX_LEN)) {
		memcpy(fp, what, MF_FP_HEX_LEN + 1);
		if (eng_is_registered(e, what))
			return 0;
	}
	struct mf_catalog *c;
	int rc = eng_catalog_get(e, &c);
	if (rc)
		return rc;
	struct mf_snapshot_rec rec;
	if (mf_is_hex(what, MF_FP_HEX_LEN)) {
		rc = mf_catalog_get_snapshot(c, what, &rec);
		if (rc == 0)
			mf_snapshot_rec_release(&rec);
	} else {
		/* a name first: a pipeline may be named like hex digits */
		rc = mf_catalog_find_name(c, what, fp);
		if (rc == 0)
			rc = check_name_prefix(c, what, fp, err);
		else if (rc == -ENOENT && is_hex_prefix(what))
			rc = resolve_prefix(c, what, fp, err);
	}
	eng_catalog_put(e, c);
	if (rc == -ENOENT)
		not_found(what, err);
	return rc;
}
