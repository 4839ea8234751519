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

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REL_MAX 256 /* "snapshots/FP/RUN/shard-NNNNN.mfs" and junk names */
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

static void shard_rel(char *buf, size_t len, const char *fp, const char *run,
		      uint32_t idx, const char *ext)
{
	snprintf(buf, len, "snapshots/%s/%s/shard-%05u%s", fp, run, idx, ext);
}

/* Parses exactly the names the store writes: "shard-%05u" then ext. */
static bool parse_shard_file(const char *name, const char *ext, uint32_t *out)
{
	if (strncmp(name, "shard-", 6) != 0)
		return false;
	const char *p = name + 6;
	uint64_t v = 0;
	for (; *p >= '0' && *p <= '9' && v <= UINT32_MAX; p++)
		v = v * 10 + (uint64_t)(*p - '0');
	if (p == name + 6 || v > UINT32_MAX || strcmp(p, ext) != 0)
		return false;
	char canon[64];
	snprintf(canon, sizeof(canon), "shard-%05u%s", (unsigned)v, ext);
	if (strcmp(canon, name) != 0)
		return false;
	*out = (uint32_t)v;
	return true;
}

static int catalog_path(struct mf_store *st, char **out)
{
	if (asprintf(out, "%s/%s", mf_store_path(st), MF_CATALOG_FILE) < 0) {
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
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
	int rc = mf_shard_reader_open(x->st, r->fp, r->run_id, r->index, &rd);
	if (rc == -ENOENT || rc == -ENOTDIR) {
		problem(x, MF_FSCK_MISSING, r->fp, r->index, r->run_id, rel,
			"shard %u of '%s' is materialized in the catalog but "
			"its file is gone",
			r->index, s->name);
		return;
	}
	if (rc) {
		problem(x, MF_FSCK_CORRUPT, r->fp, r->index, r->run_id, rel,
			"does not open: %s", strerror(-rc));
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
	char rel[REL_MAX];
	struct stat sb;
	if (!mf_is_hex(r->run_id, MF_RUN_ID_HEX_LEN)) {
		problem(x, MF_FSCK_MISSING, r->fp, r->index, r->run_id, "",
			"shard %u of '%s' is materialized with no run id",
			r->index, s->name);
		return;
	}
	shard_rel(rel, sizeof(rel), r->fp, r->run_id, r->index, ".mfs");
	/* the size first: a truncated file says more as a size than as a
	 * missing trailer */
	if (fstatat(mf_store_dirfd(x->st), rel, &sb, AT_SYMLINK_NOFOLLOW) ==
		0 &&
	    S_ISREG(sb.st_mode) && (uint64_t)sb.st_size != r->stored_bytes) {
		problem(x, MF_FSCK_SIZE, r->fp, r->index, r->run_id, rel,
			"file is %lld bytes, the catalog says %llu",
			(long long)sb.st_size,
			(unsigned long long)r->stored_bytes);
		return;
	}
	check_trailer(x, s, r, rel);
}

/* One catalog snapshot: its folder, metadata and materialized shards. */
static int check_snapshot(struct fsck *x, const struct mf_snapshot_rec *s)
{
	char rel[REL_MAX];
	struct stat sb;
	int dfd = mf_store_dirfd(x->st);
	snprintf(rel, sizeof(rel), "snapshots/%s", s->fp);
	if (fstatat(dfd, rel, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISDIR(sb.st_mode)) {
		problem(x, MF_FSCK_NO_FOLDER, s->fp, -1, "", rel,
			"snapshot '%s' has no folder in the store", s->name);
	} else {
		snprintf(rel, sizeof(rel), "snapshots/%s/snapshot.metadata",
			 s->fp);
		if (fstatat(dfd, rel, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(sb.st_mode))
			problem(x, MF_FSCK_NO_METADATA, s->fp, -1, "", rel,
				"snapshot '%s' has no snapshot.metadata",
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

typedef int (*walk_fn)(struct fsck *x, void *ctx, int dfd, const char *name,
		       mode_t mode);

/* Calls fn for each entry of folder name under parent, never following a
 * symlink; mode is the entry's own type. */
static int walk(struct fsck *x, int parent, const char *name, walk_fn fn,
		void *ctx)
{
	int fd = openat(parent, name,
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	int rc = 0;
	struct dirent *de;
	struct stat sb;
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW))
			rc = errno == ENOENT ? 0 : -errno; /* gone: fine */
		else
			rc = fn(x, ctx, dirfd(d), de->d_name, sb.st_mode);
	}
	if (rc == 0 && !de && errno)
		rc = -errno;
	closedir(d);
	return rc;
}

static void stray(struct fsck *x, const char *fp, const char *run,
		  const char *rel, mode_t mode)
{
	const char *what = S_ISLNK(mode) ? "a symlink (never followed)"
	    : S_ISDIR(mode)		 ? "a folder matfs does not make"
	    : S_ISREG(mode)		 ? "a file matfs does not write"
					 : "a FIFO, socket or device";
	problem(x, MF_FSCK_STRAY, fp, -1, run, rel, "%s; gc leaves it alone",
		what);
}

/* What the walk of one fingerprint folder knows. */
struct fp_walk {
	const struct mf_snapshot_rec *snap;
	struct mf_shard_rec *recs;
	size_t n;
	const char *run; /* the run folder being walked */
	bool live;
};

/* Alive as mf_catalog_claim_shard judges a run holding a shard
 * (mf_catalog_run_alive), and a run of this very snapshot. */
static bool run_live(struct fsck *x, const struct mf_snapshot_rec *s,
		     const char *run_id)
{
	struct mf_run_rec r;
	return mf_catalog_get_run(x->c, run_id, &r) == 0 &&
	    strcmp(r.fp, s->fp) == 0 &&
	    mf_catalog_run_alive(&r, x->now, s->pending_expiry);
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

static int run_entry(struct fsck *x, void *ctx, int dfd, const char *name,
		     mode_t mode)
{
	struct fp_walk *w = ctx;
	const char *fp = w->snap->fp;
	char rel[REL_MAX];
	uint32_t i;
	snprintf(rel, sizeof(rel), "snapshots/%s/%s/%s", fp, w->run, name);
	if (S_ISREG(mode) && parse_shard_file(name, ".mfs", &i)) {
		const struct mf_shard_rec *r = rec_of(w, i);
		bool used = r && strcmp(r->run_id, w->run) == 0 &&
		    (r->state == MF_SHARD_MATERIALIZED ||
		     (r->state == MF_SHARD_RUNNING && w->live));
		if (!used)
			problem(x, MF_FSCK_ORPHAN_FILE, fp, i, w->run, rel,
				"no catalog row points at this shard file");
	} else if (S_ISREG(mode) && parse_shard_file(name, ".tmp", &i)) {
		if (!w->live)
			problem(x, MF_FSCK_ORPHAN_TMP, fp, i, w->run, rel,
				"left by a dead run");
	} else {
		stray(x, fp, w->run, rel, mode);
	}
	return 0;
}

static int fp_entry(struct fsck *x, void *ctx, int dfd, const char *name,
		    mode_t mode)
{
	struct fp_walk *w = ctx;
	const char *fp = w->snap->fp;
	char rel[REL_MAX];
	snprintf(rel, sizeof(rel), "snapshots/%s/%s", fp, name);
	if (S_ISREG(mode) &&
	    (strcmp(name, "snapshot.metadata") == 0 ||
	     strncmp(name, "snapshot.metadata.tmp-", 22) == 0))
		return 0; /* a temp file is a write in progress, or garbage */
	if (!S_ISDIR(mode) || !mf_is_hex(name, MF_RUN_ID_HEX_LEN)) {
		stray(x, fp, "", rel, mode);
		return 0;
	}
	w->run = name;
	w->live = run_live(x, w->snap, name);
	if (w->live || run_used(w, name))
		return walk(x, dfd, name, run_entry, w);
	problem(x, MF_FSCK_ORPHAN_RUN, fp, -1, name, rel,
		"folder of a dead run that holds no shard");
	return 0;
}

static bool has_metadata(struct fsck *x, const char *fp)
{
	char rel[REL_MAX];
	struct stat sb;
	snprintf(rel, sizeof(rel), "snapshots/%s/snapshot.metadata", fp);
	if (fstatat(mf_store_dirfd(x->st), rel, &sb, AT_SYMLINK_NOFOLLOW))
		return false;
	return S_ISREG(sb.st_mode);
}

static int top_entry(struct fsck *x, void *ctx, int dfd, const char *name,
		     mode_t mode)
{
	char rel[REL_MAX];
	snprintf(rel, sizeof(rel), "snapshots/%s", name);
	if (!S_ISDIR(mode) || !mf_is_hex(name, MF_FP_HEX_LEN)) {
		stray(x, "", "", rel, mode);
		return 0;
	}
	struct mf_snapshot_rec snap;
	int rc = mf_catalog_get_snapshot(x->c, name, &snap);
	if (rc == -ENOENT) {
		/* gc adopts such a folder when it holds shard files and keeps
		 * it when it holds a snapshot.metadata: say what repairs it */
		problem(x, MF_FSCK_ORPHAN_SNAPSHOT, name, -1, "", rel,
			"fingerprint folder unknown to the catalog%s",
			has_metadata(x, name)
			    ? ", with a snapshot.metadata: 'matctl gc' records "
			      "its shard files in the catalog again, 'matctl "
			      "rm FP' deletes it"
			    : "");
		return 0;
	}
	if (rc)
		return rc;
	struct fp_walk w = {.snap = &snap};
	rc = mf_catalog_list_shards(x->c, name, &w.recs, &w.n);
	if (rc == 0) {
		rc = walk(x, dfd, name, fp_entry, &w);
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
	rc = catalog_path(x.st, &path);
	if (rc == 0)
		rc = mf_catalog_check(path, busy_ms(opts), catalog_problem, &x,
				      &usable);
	if (rc == 0 && usable)
		rc = open_catalog(&x, path, busy_ms(opts), &usable);
	if (rc == 0 && usable)
		rc = check_catalog_side(&x);
	if (rc == 0 && usable)
		rc = walk(&x, mf_store_dirfd(x.st), "snapshots", top_entry,
			  NULL);
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
