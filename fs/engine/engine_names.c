/*
 * engine_names.c - who a pipeline name belongs to: the claim check a
 * registration passes (the owner of the spec file that registered the name
 * last, for as long as that file claims it), and the registrations this
 * engine forgot a moment ago, remembered so that a file removed and made
 * again keeps its name.
 *
 * Also whose computation a fingerprint is (eng_check_fp_claim).
 *
 * Not for: registering a spec (engine_spec.c), parsing specs (pipeline/) or
 * the catalog's name lookup (catalog/).
 */
#include "engine_i.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether the spec file at holder still claims name, and its owner then:
 * it exists and still says `name: NAME`. Only a file that is gone, or that
 * now names another pipeline, lets the name go: one that fails to load for
 * another reason (half-saved by an editor, a right revoked) keeps it, its
 * owner the file's, so that no one takes a name in the moment its owner's
 * file is broken. */
static bool still_claims(const char *holder, const char *name, uid_t *owner)
{
	struct mf_spec *s;
	struct stat st;
	int rc = mf_spec_load(holder, &s, NULL);
	if (rc == -ENOENT || rc == -ENOTDIR)
		return false;
	if (rc) {
		*owner = stat(holder, &st) == 0 ? st.st_uid : (uid_t)-1;
		return true;
	}
	bool same = strcmp(s->name, name) == 0;
	*owner = s->owner_uid;
	mf_spec_free(s);
	return same;
}

void eng_name_left(struct mf_engine *e, const char *fp, const char *name,
		   uid_t owner)
{
	struct left_name *l = &e->left[e->n_left++ % ENG_LEFT_SLOTS];
	snprintf(l->fp, sizeof(l->fp), "%s", fp);
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->owner = owner;
	l->at = (int64_t)(mf_mono_ns() / 1000000000ULL);
}

/* Whether fp's registration of name left this engine less than
 * ENG_LEFT_GRACE_S ago; its owner then. Caller holds e->lock. */
static bool left_recently(struct mf_engine *e, const char *fp, const char *name,
			  uid_t *owner)
{
	assert(mf_mutex_held(&e->lock));
	int64_t now = (int64_t)(mf_mono_ns() / 1000000000ULL);
	for (size_t i = 0; i < ENG_LEFT_SLOTS; i++) {
		const struct left_name *l = &e->left[i];
		if (l->fp[0] && now - l->at < ENG_LEFT_GRACE_S &&
		    strcmp(l->fp, fp) == 0 && strcmp(l->name, name) == 0) {
			*owner = l->owner;
			return true;
		}
	}
	return false;
}

/* still_claims, where a holder this engine has registered, or had until
 * less than ENG_LEFT_GRACE_S ago, claims whatever its file says this
 * instant: a file removed and made again (an editor, git checkout, ln -sf)
 * must not free the name for that moment. */
static bool holder_claims(struct mf_engine *e,
			  const struct mf_snapshot_rec *holder,
			  const char *name, uid_t *owner)
{
	bool held = false;
	pthread_mutex_lock(&e->lock);
	for (const struct spec_entry *se = e->specs; se && !held;
	     se = se->next) {
		held = se->registered && strcmp(se->fpr.hex, holder->fp) == 0 &&
		    strcmp(se->spec->name, name) == 0;
		if (held)
			*owner = se->spec->owner_uid;
	}
	held = held || left_recently(e, holder->fp, name, owner);
	pthread_mutex_unlock(&e->lock);
	return held || still_claims(holder->spec_path, name, owner);
}

/* True when the holder's row is another owner's and a live process other
 * than this one holds it (serves it from a registered spec): its spec file
 * claims the name there even if this host cannot see that file (a
 * cluster's hosts with pipelines folders of their own). */
static bool held_elsewhere(struct mf_engine *e, struct mf_catalog *c,
			   const struct mf_snapshot_rec *holder,
			   const struct mf_spec *s)
{
	if (!holder->has_owner || holder->owner == s->owner_uid ||
	    mf_catalog_prune_holds(c, mf_now_s(), NULL) != 0)
		return false;
	struct mf_run_rec *h = NULL;
	size_t n = 0;
	if (mf_catalog_list_holds(c, holder->fp, &h, &n) != 0)
		return false;
	bool other = false;
	for (size_t i = 0; i < n && !other; i++)
		other = strcmp(h[i].run_id, e->holder) != 0;
	free(h);
	return other;
}

/*
 * A name belongs to the owner of the spec file that registered it last in
 * the catalog (the one mf_catalog_find_name and so matctl follow), for as
 * long as that file claims it (still_claims): a spec file of another owner
 * is refused with -EEXIST and a message naming both files, and its
 * registration records nothing. An owner's own files may share a name
 * (versions of one pipeline, a cluster's hosts). docs/security.md,
 * "Pipeline names".
 */
int eng_check_name_claim(struct mf_engine *e, struct mf_catalog *c,
			 const struct mf_spec *s, char **err)
{
	char fp[MF_FP_HEX_LEN + 1];
	int rc = mf_catalog_find_name(c, s->name, fp);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	struct mf_snapshot_rec rec;
	rc = mf_catalog_get_snapshot(c, fp, &rec);
	if (rc == -ENOENT)
		return 0; /* expired meanwhile */
	if (rc)
		return rc;
	uid_t owner;
	if (strcmp(rec.spec_path, s->path) != 0 &&
	    ((holder_claims(e, &rec, s->name, &owner) &&
	      owner != s->owner_uid) ||
	     held_elsewhere(e, c, &rec, s))) {
		eng_errf(err,
			 "spec '%s': name '%s' belongs to spec '%s' of another "
			 "owner: refused (rename this pipeline, or remove or "
			 "rename that one)",
			 s->path, s->name, rec.spec_path);
		rc = -EEXIST;
	}
	mf_snapshot_rec_release(&rec);
	return rc;
}

/* True when this engine has a spec of another owner than s's registered
 * for fp. */
static bool registered_by_other(struct mf_engine *e, const char *fp,
				const struct mf_spec *s)
{
	bool other = false;
	pthread_mutex_lock(&e->lock);
	for (const struct spec_entry *se = e->specs; se && !other;
	     se = se->next)
		other = se->registered && strcmp(se->fpr.hex, fp) == 0 &&
		    se->spec->owner_uid != s->owner_uid;
	pthread_mutex_unlock(&e->lock);
	return other;
}

/* True when the row rec is, or may be, another owner's than spec s's. A
 * row without an owner is one from before schema 7 (fsck --rebuild and gc
 * take the owner from snapshot.metadata, which records it since): another
 * owner's while this engine has such a spec registered for it; else its
 * spec file's owner's while that file is there; with it gone, it is
 * taken only while no shard of it is materialized: nobody can prove the
 * data is s's owner's. */
static bool other_owner(struct mf_engine *e, const struct mf_snapshot_rec *rec,
			const struct mf_spec *s)
{
	if (rec->has_owner)
		return rec->owner != s->owner_uid;
	if (registered_by_other(e, rec->fp, s))
		return true;
	if (strcmp(rec->spec_path, s->path) == 0)
		return false;
	struct stat st;
	if (stat(rec->spec_path, &st) == 0)
		return st.st_uid != s->owner_uid;
	return rec->materialized > 0;
}

/* -EEXIST with *err: spec s may not take fp, which holder's is (whence
 * says what recorded it, when not the catalog). */
static int fp_refused(const struct mf_spec *s, const char *fp,
		      const char *holder, const char *whence, char **err)
{
	eng_errf(err,
		 "spec '%s': fingerprint %.12s belongs to spec '%s' of "
		 "another owner%s: refused (two owners' specs never share a "
		 "computation: add an env variable, or change a stage, to "
		 "give this one its own)",
		 s->path, fp, holder, whence);
	return -EEXIST;
}

/* A fingerprint the catalog has no row for, but whose folder the store
 * keeps (a catalog restored from a backup, or lost, before gc or fsck
 * --rebuild recorded the folder again): its snapshot.metadata names the
 * owner, and another owner's spec is refused as for a row. */
static int stored_owner_check(struct mf_engine *e, const struct mf_spec *s,
			      const char *fp, char **err)
{
	struct mf_snapshot_meta m;
	char why[160];
	if (mf_store_load_metadata(e->store, fp, &m, why, sizeof(why)) != 0)
		return 0; /* none, or unreadable: nothing recorded */
	int rc = m.has_owner && m.owner != s->owner_uid
	    ? fp_refused(s, fp, m.spec_path, " (the store's snapshot.metadata)",
			 err)
	    : 0;
	mf_snapshot_meta_release(&m);
	return rc;
}

/*
 * A fingerprint is one owner's computation: the catalog row keeps the
 * uid of the spec that recorded it first (mf_snapshot_rec.owner), and a
 * spec of another owner that yields it is refused with -EEXIST and a
 * message naming both files. Whatever the fingerprint covers, a stage
 * runs as its owner, in her folder, with her HOME and her programs; with
 * input_identity: stat anyone can also give files of her own the other's
 * relative paths, sizes and times (`touch -d`). So two owners' specs
 * never share a computation, and whichever spec computed a shard first
 * never stores its bytes under another owner's fingerprint. A fixed key
 * is exempt: it is a promise shared by whoever writes it. The put itself
 * refuses the same (mf_catalog_put_snapshot), for two registrations
 * racing. docs/security.md, "What a spec author can do".
 */
int eng_check_fp_claim(struct mf_engine *e, struct mf_catalog *c,
		       const struct mf_spec *s, const char *fp, char **err)
{
	if (s->fingerprint_key)
		return 0;
	struct mf_snapshot_rec rec;
	int rc = mf_catalog_get_snapshot(c, fp, &rec);
	if (rc == -ENOENT)
		return stored_owner_check(e, s, fp, err);
	if (rc)
		return rc;
	if (other_owner(e, &rec, s))
		rc = fp_refused(s, fp, rec.spec_path, "", err);
	mf_snapshot_rec_release(&rec);
	return rc;
}
