/*
 * engine_names.c - who a pipeline name belongs to: the claim check a
 * registration passes (the owner of the spec file that registered the name
 * last, for as long as that file claims it), and the registrations this
 * engine forgot a moment ago, remembered so that a file removed and made
 * again keeps its name.
 *
 * Also whose computation a fingerprint is, where its inputs enter by
 * their metadata only (eng_check_fp_claim).
 *
 * Not for: registering a spec (engine_spec.c), parsing specs (pipeline/) or
 * the catalog's name lookup (catalog/).
 */
#include "engine_i.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
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
	    holder_claims(e, &rec, s->name, &owner) && owner != s->owner_uid) {
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

/* True when a and b list the same files, by device and inode, in order:
 * whatever the paths, a stage of either reads the other's bytes. */
static bool same_inputs(const struct mf_spec *a, const struct mf_spec *b)
{
	if (a->n_inputs != b->n_inputs)
		return false;
	for (size_t i = 0; i < a->n_inputs; i++) {
		struct stat x, y;
		if (stat(a->inputs[i], &x) != 0 ||
		    stat(b->inputs[i], &y) != 0 || x.st_dev != y.st_dev ||
		    x.st_ino != y.st_ino)
			return false;
	}
	return true;
}

/*
 * With input_identity: stat an input enters the fingerprint by its path
 * relative to the spec folder, its size and its time, all of which anyone
 * can give a file of her own in a folder of hers (`touch -d`): a spec of
 * another owner that copied the stages would yield the same fingerprint,
 * and whichever spec computed a shard first would store its bytes under
 * it. So a fingerprint already recorded for another spec file (the
 * catalog row's spec_path) is taken by s only when that file is gone, is
 * of the same owner, or lists the very same input files; else -EEXIST and
 * a message naming both files. Content identity, fixed keys and specs
 * without inputs are not asked: their bytes are the fingerprint's.
 * A file that does not load (half-saved, a right revoked) keeps the
 * fingerprint, as it keeps a name. docs/security.md, "What a spec author
 * can do".
 */
int eng_check_fp_claim(struct mf_catalog *c, const struct mf_spec *s,
		       const char *fp, char **err)
{
	if (s->identity != MF_IDENTITY_STAT || s->fingerprint_key ||
	    s->n_inputs == 0)
		return 0;
	struct mf_snapshot_rec rec;
	int rc = mf_catalog_get_snapshot(c, fp, &rec);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	struct mf_spec *other = NULL;
	struct stat st;
	bool refused = false;
	if (strcmp(rec.spec_path, s->path) != 0) {
		int lrc = mf_spec_load(rec.spec_path, &other, NULL);
		if (lrc == 0)
			refused = other->owner_uid != s->owner_uid &&
			    !same_inputs(s, other);
		else if (lrc != -ENOENT && lrc != -ENOTDIR)
			refused = stat(rec.spec_path, &st) != 0 ||
			    st.st_uid != s->owner_uid;
	}
	if (refused) {
		eng_errf(err,
			 "spec '%s': fingerprint %.12s is that of spec '%s' "
			 "of another owner, whose inputs are other files of "
			 "the same relative paths, sizes and times "
			 "(input_identity: stat): refused (use "
			 "input_identity: content, or change a stage)",
			 s->path, fp, rec.spec_path);
		rc = -EEXIST;
	}
	mf_spec_free(other);
	mf_snapshot_rec_release(&rec);
	return rc;
}
