/*
 * engine_fsck.c - checking a store against its catalog: catalog shards
 * whose file is missing, of the wrong size or unreadable, store files and
 * folders no catalog row accounts for, catalog snapshots without their
 * folder or metadata, and the catalog database itself.
 *
 * It works on a store whose catalog may be unusable, so it opens no
 * engine, and it changes nothing.
 *
 * Not for: repairing (mf_engine_gc, mf_engine_verify, and engine_rebuild.c
 * for the catalog), or the catalog database's own integrity check
 * (mf_catalog_check).
 */
#include "engine_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DETAIL_MAX 512
#define BUSY_DEFAULT_MS 10000

static const char *const kind_names[] = {
    [MF_FSCK_CATALOG] = "catalog",
    [MF_FSCK_MISSING] = "missing",
    [MF_FSCK_SIZE] = "size",
    [MF_FSCK_CORRUPT] = "corrupt",
    [MF_FSCK_ORPHAN_FILE] = "orphan-file",
    [MF_FSCK_ORPHAN_TMP] = "orphan-tmp",
    [MF_FSCK_ORPHAN_RUN] = "orphan-run",
    [MF_FSCK_ORPHAN_SNAPSHOT] = "orphan-snapshot",
    [MF_FSCK_NO_FOLDER] = "no-folder",
    [MF_FSCK_NO_METADATA] = "no-metadata",
    [MF_FSCK_STRAY] = "stray",
};

const char *mf_fsck_kind_name(enum mf_fsck_kind k)
{
	if ((unsigned)k >= sizeof(kind_names) / sizeof(kind_names[0]))
		return "unknown";
	return kind_names[k];
}

/* ---- helpers ---- */

const char *eng_strerror(int rc, char *buf, size_t len)
{
	const char *why = rc == -EBADMSG ? mf_corrupt_reason() : "";
	snprintf(buf, len, why[0] ? "%s (%s)" : "%s", strerror(-rc), why);
	return buf;
}

static int busy_ms(const struct mf_engine_opts *o)
{
	return o->busy_timeout_ms > 0 ? o->busy_timeout_ms : BUSY_DEFAULT_MS;
}

/* ---- fsck ---- */

struct fsck {
	struct mf_store *st;
	struct mf_catalog *c;
	int64_t now;
	mf_fsck_fn report;
	void *arg;
	uint32_t problems;
};

__attribute__((format(printf, 7, 8))) static void
problem(struct fsck *x, enum mf_fsck_kind kind, const char *fp, int64_t shard,
	const char *run, const char *path, const char *fmt, ...)
{
	char detail[DETAIL_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	struct mf_fsck_problem p = {kind, fp, shard, run, path, detail};
	x->problems++;
	if (x->report)
		x->report(x->arg, &p);
}

static void catalog_problem(void *arg, const char *where, const char *detail)
{
	(void)where; /* the catalog's path: reported relative to the store */
	problem(arg, MF_FSCK_CATALOG, "", -1, "", MF_CATALOG_FILE, "%s",
		detail);
}

/* The file of a materialized shard opens, and its trailer agrees with
 * the catalog's row. */
static void check_trailer(struct fsck *x, const struct mf_snapshot_rec *s,
			  const struct mf_shard_rec *r, const char *rel)
{
	struct mf_shard_reader *rd;
	mf_corrupt_clear();
	int rc = mf_shard_reader_open(x->st, r->fp, r->run_id, r->index, &rd);
	if (rc == -ENOENT || rc == -ENOTDIR) {
		problem(x, MF_FSCK_MISSING, r->fp, r->index, r->run_id, rel,
			"shard %u of '%s' is materialized in the catalog but "
			"its file is gone",
			r->index, s->name);
		return;
	}
	if (rc) {
		char msg[96];
		problem(x, MF_FSCK_CORRUPT, r->fp, r->index, r->run_id, rel,
			"does not open: %s",
			eng_strerror(rc, msg, sizeof(msg)));
		return;
	}
	struct mf_shard_stat ss;
	mf_shard_reader_stat(rd, &ss);
	mf_shard_reader_close(rd);
	if (ss.raw_bytes != r->raw_bytes || ss.chunks != r->chunks)
		problem(x, MF_FSCK_SIZE, r->fp, r->index, r->run_id, rel,
			"trailer says %llu bytes in %u chunks, the catalog "
			"%llu in %u",
			(unsigned long long)ss.raw_bytes, ss.chunks,
			(unsigned long long)r->raw_bytes, r->chunks);
}

static void check_shard(struct fsck *x, const struct mf_snapshot_rec *s,
			const struct mf_shard_rec *r)
{
	char rel[MF_STORE_REL_MAX];
	struct stat sb;
	if (!mf_is_hex(r->run_id, MF_RUN_ID_HEX_LEN)) {
		problem(x, MF_FSCK_MISSING, r->fp, r->index, r->run_id, "",
			"shard %u of '%s' is materialized with no run id",
			r->index, s->name);
		return;
	}
	mf_store_rel(rel, sizeof(rel), MF_STORE_SHARD, r->fp, r->run_id,
		     r->index);
	/* the size first: a truncated file says more as a size than as a
	 * missing trailer */
	if (mf_store_lstat(x->st, MF_STORE_SHARD, r->fp, r->run_id, r->index,
			   &sb) == 0 &&
	    S_ISREG(sb.st_mode) && (uint64_t)sb.st_size != r->stored_bytes) {
		problem(x, MF_FSCK_SIZE, r->fp, r->index, r->run_id, rel,
			"file is %lld bytes, the catalog says %llu",
			(long long)sb.st_size,
			(unsigned long long)r->stored_bytes);
		return;
	}
	check_trailer(x, s, r, rel);
}

/* True when the store has an entry of kind for fp of that type. */
static bool store_has(struct fsck *x, enum mf_store_kind kind, const char *fp,
		      mode_t type)
{
	struct stat sb;
	return mf_store_lstat(x->st, kind, fp, NULL, 0, &sb) == 0 &&
	    (sb.st_mode & S_IFMT) == type;
}

/* One catalog snapshot: its folder, metadata and materialized shards. */
static int check_snapshot(struct fsck *x, const struct mf_snapshot_rec *s)
{
	char rel[MF_STORE_REL_MAX];
	if (!store_has(x, MF_STORE_FP, s->fp, S_IFDIR)) {
		mf_store_rel(rel, sizeof(rel), MF_STORE_FP, s->fp, NULL, 0);
		problem(x, MF_FSCK_NO_FOLDER, s->fp, -1, "", rel,
			"snapshot '%s' has no folder in the store", s->name);
	} else if (!store_has(x, MF_STORE_METADATA, s->fp, S_IFREG)) {
		mf_store_rel(rel, sizeof(rel), MF_STORE_METADATA, s->fp, NULL,
			     0);
		problem(x, MF_FSCK_NO_METADATA, s->fp, -1, "", rel,
			"snapshot '%s' has no " MF_STORE_METADATA_NAME,
			s->name);
	}
	struct mf_shard_rec *v;
	size_t n;
	int rc = mf_catalog_list_shards(x->c, s->fp, &v, &n);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (v[i].state == MF_SHARD_MATERIALIZED)
			check_shard(x, s, &v[i]);
		mf_shard_rec_release(&v[i]);
	}
	free(v);
	return 0;
}

static int check_catalog_side(struct fsck *x)
{
	struct mf_snapshot_rec *v;
	size_t n;
	int rc = mf_catalog_list_snapshots(x->c, &v, &n);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (rc == 0)
			rc = check_snapshot(x, &v[i]);
		mf_snapshot_rec_release(&v[i]);
	}
	free(v);
	return rc;
}

/* ---- fsck: the store's side, walking snapshots/ ---- */

static void stray(struct fsck *x, const struct mf_store_entry *e)
{
	mode_t mode = e->mode;
	const char *what = S_ISLNK(mode) ? "a symlink (never followed)"
	    : S_ISDIR(mode)		 ? "a folder matfs does not make"
	    : S_ISREG(mode)		 ? "a file matfs does not write"
					 : "a FIFO, socket or device";
	problem(x, MF_FSCK_STRAY, e->fp, -1, e->run, e->rel,
		"%s; gc leaves it alone", what);
}

/* What the walk of one fingerprint folder knows. */
struct fp_walk {
	struct fsck *x;
	const struct mf_snapshot_rec *snap;
	struct mf_shard_rec *recs;
	size_t n;
	bool live; /* the run folder being walked belongs to a live run */
};

/* Alive as mf_catalog_claim_shard judges a run holding a shard
 * (mf_catalog_judge_run), and a run of this very snapshot. */
static bool run_live(struct fsck *x, const struct mf_snapshot_rec *s,
		     const char *run_id)
{
	struct mf_run_rec r;
	bool alive = false;
	return mf_catalog_get_run(x->c, run_id, &r) == 0 &&
	    strcmp(r.fp, s->fp) == 0 &&
	    mf_catalog_judge_run(x->c, &r, x->now, s->pending_expiry, &alive) ==
	    0 &&
	    alive;
}

static const struct mf_shard_rec *rec_of(const struct fp_walk *w, uint32_t i)
{
	if (i < w->n && w->recs[i].index == i)
		return &w->recs[i];
	for (size_t k = 0; k < w->n; k++)
		if (w->recs[k].index == i)
			return &w->recs[k];
	return NULL;
}

static bool run_used(const struct fp_walk *w, const char *run)
{
	for (size_t i = 0; i < w->n; i++)
		if ((w->recs[i].state == MF_SHARD_MATERIALIZED ||
		     w->recs[i].state == MF_SHARD_RUNNING) &&
		    strcmp(w->recs[i].run_id, run) == 0)
			return true;
	return false;
}

static int run_entry(void *arg, const struct mf_store_entry *e)
{
	struct fp_walk *w = arg;
	struct fsck *x = w->x;
	if (e->kind == MF_STORE_SHARD) {
		const struct mf_shard_rec *r = rec_of(w, e->shard);
		bool used = r && strcmp(r->run_id, e->run) == 0 &&
		    (r->state == MF_SHARD_MATERIALIZED ||
		     (r->state == MF_SHARD_RUNNING && w->live));
		if (!used)
			problem(x, MF_FSCK_ORPHAN_FILE, e->fp, e->shard, e->run,
				e->rel,
				"no catalog row points at this shard file");
	} else if (e->kind == MF_STORE_SHARD_TMP) {
		if (!w->live)
			problem(x, MF_FSCK_ORPHAN_TMP, e->fp, e->shard, e->run,
				e->rel, "left by a dead run");
	} else {
		stray(x, e);
	}
	return 0;
}

static int fp_entry(void *arg, const struct mf_store_entry *e)
{
	struct fp_walk *w = arg;
	struct fsck *x = w->x;
	/* a metadata temp file is a write in progress, or garbage */
	if (e->kind == MF_STORE_METADATA || e->kind == MF_STORE_METADATA_TMP)
		return 0;
	if (e->kind != MF_STORE_RUN) {
		stray(x, e);
		return 0;
	}
	w->live = run_live(x, w->snap, e->name);
	if (w->live || run_used(w, e->name))
		return mf_store_walk(x->st, e->fp, e->name, run_entry, w);
	problem(x, MF_FSCK_ORPHAN_RUN, e->fp, -1, e->name, e->rel,
		"folder of a dead run that holds no shard");
	return 0;
}

static int top_entry(void *arg, const struct mf_store_entry *e)
{
	struct fsck *x = arg;
	const char *fp = e->name;
	if (e->kind != MF_STORE_FP) {
		stray(x, e);
		return 0;
	}
	struct mf_snapshot_rec snap;
	int rc = mf_catalog_get_snapshot(x->c, fp, &snap);
	if (rc == -ENOENT) {
		/* gc adopts such a folder when it holds shard files and keeps
		 * it when it holds a metadata file: say what repairs it */
		problem(x, MF_FSCK_ORPHAN_SNAPSHOT, fp, -1, "", e->rel,
			"fingerprint folder unknown to the catalog%s",
			store_has(x, MF_STORE_METADATA, fp, S_IFREG)
			    ? ", with a " MF_STORE_METADATA_NAME
			      ": 'matctl gc' records its shard files in the "
			      "catalog again, 'matctl rm FP' deletes it"
			    : "");
		return 0;
	}
	if (rc)
		return rc;
	struct fp_walk w = {.x = x, .snap = &snap};
	rc = mf_catalog_list_shards(x->c, fp, &w.recs, &w.n);
	if (rc == 0) {
		rc = mf_store_walk(x->st, fp, NULL, fp_entry, &w);
		for (size_t i = 0; i < w.n; i++)
			mf_shard_rec_release(&w.recs[i]);
		free(w.recs);
	}
	mf_snapshot_rec_release(&snap);
	return rc;
}

/* Opens the catalog once the file looked sound; not being a database
 * after all is one more problem, a newer schema an error. */
static int open_catalog(struct fsck *x, const char *path, int busy,
			bool *usable)
{
	mf_corrupt_clear();
	int rc = mf_catalog_open(path, busy, &x->c);
	*usable = rc == 0;
	if (rc == -EBADMSG) {
		const char *why = mf_corrupt_reason();
		problem(x, MF_FSCK_CATALOG, "", -1, "", MF_CATALOG_FILE,
			"not a usable catalog: %s%s%s%s", strerror(-rc),
			*why ? " (" : "", why, *why ? ")" : "");
		rc = 0;
	}
	return rc;
}

int mf_engine_fsck(const struct mf_engine_opts *opts, mf_fsck_fn report,
		   void *arg, uint32_t *problems, char **err)
{
	if (!opts || !opts->store_dir)
		return -EINVAL;
	struct fsck x = {.report = report, .arg = arg, .now = mf_now_s()};
	int rc = mf_store_open(opts->store_dir, false, &x.st);
	if (rc) {
		eng_errf(err, "store '%s': %s", opts->store_dir, strerror(-rc));
		return rc;
	}
	char *path = NULL;
	bool usable = false;
	rc = eng_catalog_location(opts, x.st, &path);
	if (rc == 0)
		rc = mf_catalog_check(path, busy_ms(opts), catalog_problem, &x,
				      &usable);
	if (rc == 0 && usable)
		rc = open_catalog(&x, path, busy_ms(opts), &usable);
	if (rc == 0 && usable)
		rc = check_catalog_side(&x);
	if (rc == 0 && usable)
		rc = mf_store_walk(x.st, NULL, NULL, top_entry, &x);
	if (rc)
		eng_errf(err, "fsck of '%s': %s", opts->store_dir,
			 rc == -EPROTO ? "catalog made by a newer matfs"
				       : strerror(-rc));
	mf_catalog_close(x.c);
	free(path);
	mf_store_close(x.st);
	if (rc == 0 && problems)
		*problems = x.problems;
	return rc;
}
