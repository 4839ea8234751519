/*
 * engine_rebuild.c - indexing the store's own files into a catalog that
 * lacks them: each fingerprint's metadata file gives the snapshot row
 * back, each committed shard file of a run the catalog never knew gives a
 * materialized shard under that run. The same code rebuilds a lost or
 * corrupt catalog (matctl fsck --rebuild: into a fresh file, the old one
 * moved aside), indexes a new catalog the engine finds on open, and lets
 * gc adopt what the catalog never knew instead of removing it.
 *
 * Never deletes: the old catalog is renamed aside, store files are only
 * read, and what cannot be recovered is reported and left for gc.
 *
 * Not for: checking (engine_fsck.c) or repairing store files.
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

struct rebuild {
	struct mf_store *st;
	struct mf_catalog *c;
	char host[256];
	mf_rebuild_fn report;
	void *arg;
	bool need_data; /* a folder the catalog lacks is recorded only for
			   shard files to record (gc), not for its metadata */
	struct mf_rebuild_stats stats;
};

__attribute__((format(printf, 7, 8))) static void
skipped(struct rebuild *x, const char *fp, const char *name, int64_t shard,
	const char *run, const char *path, const char *fmt, ...)
{
	char detail[DETAIL_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	struct mf_rebuild_item it = {.kind = MF_REBUILD_SKIPPED,
				     .fp = fp,
				     .name = name,
				     .shard = shard,
				     .run = run,
				     .path = path,
				     .detail = detail};
	x->stats.skipped++;
	if (x->report)
		x->report(x->arg, &it);
}

/* The WAL and shared-memory files move first: a WAL left beside a fresh
 * catalog.db would be replayed into it. */
static const char *const catalog_parts[] = {"-wal", "-shm", ""};
#define N_PARTS (sizeof(catalog_parts) / sizeof(catalog_parts[0]))

static bool aside_taken(int dfd, const char *base)
{
	char name[96];
	struct stat sb;
	for (size_t i = 0; i < N_PARTS; i++) {
		snprintf(name, sizeof(name), "%s%s", base, catalog_parts[i]);
		if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 ||
		    errno != ENOENT)
			return true;
	}
	return false;
}

/* Renames catalog.db (and -wal, -shm) to catalog.db.corrupt-NOW[-K]. */
static int move_aside(struct rebuild *x, int64_t now)
{
	int dfd = mf_store_dirfd(x->st);
	char base[64], from[64], to[96];
	int k = 0;
	snprintf(base, sizeof(base), "%s.corrupt-%lld", MF_CATALOG_FILE,
		 (long long)now);
	while (aside_taken(dfd, base)) {
		if (++k > 1000)
			return -EEXIST;
		snprintf(base, sizeof(base), "%s.corrupt-%lld-%d",
			 MF_CATALOG_FILE, (long long)now, k);
	}
	bool moved = false;
	for (size_t i = 0; i < N_PARTS; i++) {
		snprintf(from, sizeof(from), "%s%s", MF_CATALOG_FILE,
			 catalog_parts[i]);
		snprintf(to, sizeof(to), "%s%s", base, catalog_parts[i]);
		if (renameat(dfd, from, dfd, to) != 0) {
			if (errno != ENOENT)
				return -errno;
			continue;
		}
		moved = true;
		if (!catalog_parts[i][0]) /* the database itself */
			snprintf(x->stats.old_catalog,
				 sizeof(x->stats.old_catalog), "%s", base);
	}
	return moved ? mf_fsync_dir(dfd) : 0;
}

/* ---- the metadata file back into a snapshot row ---- */

_Static_assert(MF_META_NAME_MAX == MF_NAME_MAX,
	       "the metadata parser checks names as the spec parser does");

static char *dup_text(const char *s, int *rc)
{
	char *d = strdup(s ? s : "");
	if (!d)
		*rc = -ENOMEM;
	return d;
}

/* The snapshot row a parsed metadata file gives; 0 or -ENOMEM. */
static int rec_of_meta(const struct mf_snapshot_meta *m,
		       struct mf_snapshot_rec *r)
{
	int rc = 0;
	memset(r, 0, sizeof(*r));
	snprintf(r->fp, sizeof(r->fp), "%s", m->fp);
	snprintf(r->name, sizeof(r->name), "%s", m->name);
	r->shards = m->shards;
	r->chunk_size = m->chunk_size;
	r->expire_after = m->expire_after;
	r->pending_expiry = m->pending_expiry;
	r->keep = m->keep;
	r->created = m->mtime;
	r->spec_path = dup_text(m->spec_path, &rc);
	r->compression = dup_text(m->compression, &rc);
	r->suffix = dup_text(m->suffix, &rc);
	/* the owner the registration wrote (none: a fixed key, or a file
	 * from before owners; the file now at spec_path proves nothing, as
	 * anyone may have put one there since) */
	r->has_owner = m->has_owner;
	r->owner = m->owner;
	if (rc)
		mf_snapshot_rec_release(r);
	return rc;
}

/* Loads one fingerprint's metadata into *r: 0, 1 when skipped, -ENOMEM. */
static int load_meta(struct rebuild *x, const char *fp,
		     struct mf_snapshot_rec *r)
{
	char rel[MF_STORE_REL_MAX], why[160];
	struct mf_snapshot_meta m;
	mf_store_rel(rel, sizeof(rel), MF_STORE_METADATA, fp, NULL, 0);
	int rc = mf_store_load_metadata(x->st, fp, &m, why, sizeof(why));
	if (rc == -ENOMEM)
		return rc;
	if (rc && !why[0]) {
		skipped(x, fp, "", -1, "", rel,
			MF_STORE_METADATA_NAME ": %s: its shards cannot be "
					       "recorded without it",
			strerror(-rc));
		return 1;
	}
	if (rc) {
		skipped(x, fp, "", -1, "", rel, MF_STORE_METADATA_NAME ": %s",
			why);
		return 1;
	}
	rc = rec_of_meta(&m, r);
	mf_snapshot_meta_release(&m);
	return rc;
}

/* One fingerprint folder to index: its row, from the catalog (known) or
 * from its metadata file. */
struct item {
	struct mf_snapshot_rec m;
	bool known;
};

/* 0, 1 when the folder is skipped (no usable metadata, reported), or
 * -errno. */
static int item_load(struct rebuild *x, const char *fp, struct item *it)
{
	int rc = mf_catalog_get_snapshot(x->c, fp, &it->m);
	it->known = rc == 0;
	if (rc != -ENOENT)
		return rc;
	return load_meta(x, fp, &it->m);
}

/* Oldest first, so the newest registration of a name stays its current
 * fingerprint (mf_catalog_find_name). */
static int cmp_created(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	if (x->m.created != y->m.created)
		return x->m.created < y->m.created ? -1 : 1;
	return strcmp(x->m.fp, y->m.fp);
}

static void items_free(struct item *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		mf_snapshot_rec_release(&v[i].m);
	free(v);
}

/* The folders to index: fp alone, or every one (fp NULL). */
static int items_load(struct rebuild *x, const char *fp, struct item **out,
		      size_t *n)
{
	char **fps = NULL;
	size_t nf = 1, k = 0;
	int rc = fp ? 0 : mf_store_list_snapshots(x->st, &fps, &nf);
	if (rc)
		return rc;
	struct item *v = calloc(nf ? nf : 1, sizeof(*v));
	rc = v ? 0 : -ENOMEM;
	for (size_t i = 0; rc >= 0 && i < nf; i++) {
		rc = item_load(x, fps ? fps[i] : fp, &v[k]);
		if (rc == 0)
			k++;
	}
	if (fps)
		mf_strv_free(fps, nf);
	if (rc < 0) {
		items_free(v, k);
		return rc;
	}
	qsort(v, k, sizeof(*v), cmp_created);
	*out = v;
	*n = k;
	return 0;
}

/* ---- the shard files of one fingerprint ---- */

/* The best file found so far for one shard. */
struct cand {
	bool have;
	uint32_t index;
	char run[MF_RUN_ID_HEX_LEN + 1];
	int64_t mtime_ns;
	int64_t atime; /* taken before this rebuild read the file */
	struct mf_shard_stat st;
	bool recorded; /* the catalog took it */
};

/* Reads one committed file into a candidate: 0, 1 when it is unusable
 * (reported), or -errno. */
static int cand_read(struct rebuild *x, const struct mf_snapshot_rec *m,
		     const char *run, uint32_t k, struct cand *c)
{
	char rel[MF_STORE_REL_MAX];
	struct stat sb;
	struct mf_shard_reader *r;
	mf_store_rel(rel, sizeof(rel), MF_STORE_SHARD, m->fp, run, k);
	if (k >= m->shards) {
		skipped(x, m->fp, m->name, k, run, rel,
			"shard %u is out of range: the snapshot has %u", k,
			m->shards);
		return 1;
	}
	/* stat first: opening reads the file, which may move its atime */
	int rc = mf_store_lstat(x->st, MF_STORE_SHARD, m->fp, run, k, &sb);
	if (rc == 0)
		rc = mf_shard_reader_open(x->st, m->fp, run, k, &r);
	if (rc == 0) {
		mf_shard_reader_stat(r, &c->st);
		mf_shard_reader_close(r);
	}
	/* gc removes what it does not record: only a file that is bad for
	 * good may be passed over there, not one that failed to read */
	bool bad = rc == -EBADMSG || rc == -ELOOP || rc == -ENOENT;
	if (rc == -ENOMEM || (rc && x->need_data && !bad))
		return rc;
	if (rc) {
		char msg[96];
		skipped(x, m->fp, m->name, k, run, rel, "does not open: %s",
			eng_strerror(rc, msg, sizeof(msg)));
		return 1;
	}
	c->have = true;
	c->index = k;
	snprintf(c->run, sizeof(c->run), "%s", run);
	c->mtime_ns =
	    (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
	c->atime = (int64_t)sb.st_atim.tv_sec;
	return 0;
}

/* Keeps the newer of two files of one shard (the larger run id on a tie,
 * so the choice does not depend on listing order). */
static void cand_pick(struct rebuild *x, const struct mf_snapshot_rec *m,
		      struct cand *best, const struct cand *c)
{
	char rel[MF_STORE_REL_MAX];
	if (!best->have) {
		*best = *c;
		return;
	}
	bool newer = c->mtime_ns > best->mtime_ns ||
	    (c->mtime_ns == best->mtime_ns && strcmp(c->run, best->run) > 0);
	const struct cand *lose = newer ? best : c, *win = newer ? c : best;
	mf_store_rel(rel, sizeof(rel), MF_STORE_SHARD, m->fp, lose->run,
		     lose->index);
	skipped(x, m->fp, m->name, lose->index, lose->run, rel,
		"an older copy: run %s holds a newer file of shard %u",
		win->run, lose->index);
	if (newer)
		*best = *c;
}

static int collect_run(struct rebuild *x, const struct mf_snapshot_rec *m,
		       const char *run, struct cand *best)
{
	uint32_t *idx;
	size_t n;
	int rc = mf_store_list_shards(x->st, m->fp, run, &idx, &n);
	if (rc == -ENOENT) /* removed meanwhile */
		return 0;
	if (rc) {
		char rel[MF_STORE_REL_MAX];
		mf_store_rel(rel, sizeof(rel), MF_STORE_RUN, m->fp, run, 0);
		skipped(x, m->fp, m->name, -1, run, rel,
			"cannot list the run folder: %s", strerror(-rc));
		return rc == -ENOMEM || x->need_data ? rc : 0;
	}
	for (size_t i = 0; i < n; i++) {
		struct cand c = {0};
		rc = cand_read(x, m, run, idx[i], &c);
		if (rc < 0)
			break;
		rc = 0;
		if (c.have)
			cand_pick(x, m, &best[idx[i]], &c);
	}
	free(idx);
	return rc;
}

/* A run the catalog has a row for is left to it: its files are either the
 * catalog's shards or garbage the catalog's rules judge. 0 when the run is
 * unknown, 1 when known, or -errno. */
static int run_known(struct rebuild *x, const struct mf_snapshot_rec *m,
		     const char *run)
{
	struct mf_run_rec r;
	int rc = mf_catalog_get_run(x->c, run, &r);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	if (strcmp(r.fp, m->fp) != 0) {
		char rel[MF_STORE_REL_MAX];
		mf_store_rel(rel, sizeof(rel), MF_STORE_RUN, m->fp, run, 0);
		skipped(x, m->fp, m->name, -1, run, rel,
			"run id already recorded for another fingerprint");
	}
	return 1;
}

/* The best file of each shard among the runs the catalog does not know;
 * *n counts the shards that have one. */
static int collect(struct rebuild *x, const struct mf_snapshot_rec *m,
		   struct cand *best, size_t *n)
{
	char **runs;
	size_t nr;
	*n = 0;
	int rc = mf_store_list_runs(x->st, m->fp, &runs, &nr);
	if (rc)
		return rc == -ENOENT ? 0 : rc; /* removed meanwhile */
	for (size_t i = 0; rc == 0 && i < nr; i++) {
		rc = run_known(x, m, runs[i]);
		if (rc == 0)
			rc = collect_run(x, m, runs[i], best);
		else if (rc == 1)
			rc = 0;
	}
	mf_strv_free(runs, nr);
	for (uint32_t k = 0; k < m->shards; k++)
		*n += best[k].have;
	return rc;
}

/* ---- recording what was found ---- */

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = *(const struct cand *const *)a;
	const struct cand *y = *(const struct cand *const *)b;
	int c = strcmp(x->run, y->run);
	return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Records one shard: the only way into "materialized" is a claim by its
 * run followed by its completion, as when it was computed. A shard the
 * catalog holds materialized, or that a live run computes, stays as it is
 * (c->recorded false). */
static int record_shard(struct rebuild *x, const struct mf_run_rec *run,
			struct cand *c)
{
	enum mf_claim got;
	int rc = mf_catalog_claim_shard(x->c, run->fp, c->index, run,
					mf_now_s(), &got, NULL);
	if (rc || got != MF_CLAIM_MINE)
		return rc;
	rc = mf_catalog_complete_shard(x->c, run->fp, c->index, run->run_id,
				       c->st.raw_bytes, c->st.stored_bytes,
				       c->st.chunks);
	c->recorded = rc == 0;
	return rc;
}

/* Records the n shards of one run (v sorted by run). Adds to *got. */
static int record_run(struct rebuild *x, const struct mf_snapshot_rec *m,
		      struct cand **v, size_t n, uint32_t *got)
{
	struct mf_run_rec run = {.pid = 0, .pid_start = 0};
	snprintf(run.run_id, sizeof(run.run_id), "%s", v[0]->run);
	memcpy(run.fp, m->fp, sizeof(run.fp));
	snprintf(run.host, sizeof(run.host), "%s", x->host);
	snprintf(run.state, sizeof(run.state), "active");
	run.started = run.heartbeat = v[0]->mtime_ns / 1000000000LL;
	for (size_t i = 1; i < n; i++) {
		int64_t t = v[i]->mtime_ns / 1000000000LL;
		run.started = t < run.started ? t : run.started;
		run.heartbeat = t > run.heartbeat ? t : run.heartbeat;
	}
	/* known since the folder was read: another process recorded it */
	int rc = mf_catalog_add_run(x->c, &run);
	if (rc == -EEXIST)
		return 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = record_shard(x, &run, v[i]);
		*got += v[i]->recorded;
	}
	if (rc == 0) /* a run of the past: dead to every claim and gc */
		rc = mf_catalog_set_run_state(x->c, run.run_id, "done");
	return rc;
}

/* The snapshot row of an item from its metadata, unless the catalog has
 * one by now. *made says whether this call made it. */
static int record_snapshot(struct rebuild *x, struct item *it, bool *made)
{
	struct mf_snapshot_rec now;
	*made = false;
	if (it->known)
		return 0;
	int rc = mf_catalog_get_snapshot(x->c, it->m.fp, &now);
	if (rc == 0) {
		mf_snapshot_rec_release(&now);
		return 0;
	}
	if (rc != -ENOENT)
		return rc;
	rc = mf_catalog_put_snapshot(x->c, &it->m);
	*made = rc == 0;
	return rc;
}

static int record(struct rebuild *x, const struct mf_snapshot_rec *m,
		  struct cand *best, uint32_t *got, uint32_t *runs)
{
	struct cand **v = calloc(m->shards, sizeof(*v));
	if (!v)
		return -ENOMEM;
	size_t n = 0;
	for (uint32_t i = 0; i < m->shards; i++)
		if (best[i].have)
			v[n++] = &best[i];
	qsort(v, n, sizeof(*v), cmp_cand);
	int rc = 0;
	for (size_t i = 0, j; rc == 0 && i < n; i = j) {
		uint32_t before = *got;
		for (j = i + 1; j < n && strcmp(v[j]->run, v[i]->run) == 0;)
			j++;
		rc = record_run(x, m, v + i, j - i, got);
		*runs += *got > before;
	}
	/* the snapshot's last read: the latest atime of the files recorded
	 * (reads of the store move it, at least daily under relatime), so
	 * expiry does not count from the snapshot's creation; never earlier
	 * than what the catalog has */
	struct cand *last = NULL;
	for (size_t i = 0; i < n; i++)
		if (v[i]->recorded && (!last || v[i]->atime > last->atime))
			last = v[i];
	if (rc == 0 && last && last->atime > m->last_read)
		rc = mf_catalog_touch(x->c, m->fp, last->index, last->atime);
	free(v);
	return rc;
}

static void report_snapshot(struct rebuild *x, const struct mf_snapshot_rec *m,
			    uint32_t got, uint32_t runs)
{
	struct mf_rebuild_item it = {.kind = MF_REBUILD_SNAPSHOT,
				     .fp = m->fp,
				     .name = m->name,
				     .shard = -1,
				     .run = "",
				     .path = "",
				     .detail = "",
				     .shards = m->shards,
				     .materialized = got,
				     .runs = runs};
	x->stats.shards += got;
	x->stats.runs += runs;
	if (x->report)
		x->report(x->arg, &it);
}

/* Indexes one folder: its files read first, then what the catalog still
 * lacks recorded in one transaction. */
static int index_one(struct rebuild *x, struct item *it)
{
	struct mf_snapshot_rec *m = &it->m;
	struct cand *best = calloc(m->shards, sizeof(*best));
	if (!best)
		return -ENOMEM;
	size_t have = 0;
	uint32_t got = 0, runs = 0;
	bool made = false;
	int rc = collect(x, m, best, &have);
	bool skip = have == 0 && (it->known || x->need_data);
	if (rc == 0 && !skip) {
		rc = mf_catalog_begin(x->c);
		if (rc == 0) {
			int r = record_snapshot(x, it, &made);
			if (r == 0)
				r = record(x, m, best, &got, &runs);
			/* the snapshot was removed meanwhile: nothing to do */
			bool gone = r == -ENOENT;
			rc = mf_catalog_end(x->c, r);
			if (gone) {
				rc = 0;
				got = 0;
				made = false;
			}
		}
	}
	free(best);
	if (rc == 0 && made)
		x->stats.snapshots++;
	if (rc == 0 && (made || got))
		report_snapshot(x, m, got, runs);
	return rc;
}

int eng_index(struct mf_store *st, struct mf_catalog *c, const char *fp,
	      mf_rebuild_fn report, void *arg, struct mf_rebuild_stats *stats)
{
	struct rebuild x = {
	    .st = st, .c = c, .report = report, .arg = arg, .need_data = !!fp};
	mf_hostname(x.host, sizeof(x.host));
	struct item *v;
	size_t n;
	int rc = items_load(&x, fp, &v, &n);
	if (rc == 0) {
		for (size_t i = 0; rc == 0 && i < n; i++)
			rc = index_one(&x, &v[i]);
		items_free(v, n);
	}
	if (rc == 0 && !fp)
		rc = mf_catalog_set_indexed(c);
	if (stats) {
		stats->snapshots += x.stats.snapshots;
		stats->shards += x.stats.shards;
		stats->runs += x.stats.runs;
		stats->skipped += x.stats.skipped;
	}
	return rc;
}

int eng_catalog_ready(struct mf_engine *e, struct mf_catalog *c)
{
	bool indexed;
	int rc = mf_catalog_indexed(c, &indexed);
	if (rc || indexed)
		return rc;
	/* one thread indexes; the others find the mark once it is done */
	pthread_mutex_lock(&e->index_lock);
	rc = mf_catalog_indexed(c, &indexed);
	if (rc == 0 && !indexed)
		rc = eng_index(e->store, c, NULL, e->opts.indexed,
			       e->opts.indexed_arg, NULL);
	pthread_mutex_unlock(&e->index_lock);
	if (rc == 0 && !indexed) /* the registered specs' rows and holds */
		eng_holds_stale(e);
	return rc;
}

/* ---- fsck --rebuild ---- */

/* Moves the store's own catalog aside and opens a fresh one. A catalog
 * elsewhere (a server's database) cannot be moved aside: it is opened as
 * it is, and indexing adds what it lacks. */
static int fresh_catalog(struct rebuild *x, const struct mf_engine_opts *o,
			 int busy, char **err)
{
	int rc = o->catalog ? 0 : move_aside(x, mf_now_s());
	if (rc) {
		eng_errf(err, "moving the old catalog aside: %s",
			 strerror(-rc));
		return rc;
	}
	char *path;
	if (eng_catalog_location(o, x->st, &path) != 0)
		return -ENOMEM;
	rc = mf_catalog_open(path, busy, &x->c);
	if (rc)
		eng_errf(err, "catalog '%s': %s", mf_engine_catalog_shown(path),
			 strerror(-rc));
	free(path);
	return rc;
}

int mf_engine_rebuild(const struct mf_engine_opts *opts, mf_rebuild_fn report,
		      void *arg, struct mf_rebuild_stats *stats, char **err)
{
	if (!opts || !opts->store_dir)
		return -EINVAL;
	struct rebuild x = {.report = report, .arg = arg};
	int rc = mf_store_open(opts->store_dir, false, &x.st);
	if (rc) {
		eng_errf(err, "store '%s': %s", opts->store_dir, strerror(-rc));
		return rc;
	}
	rc = fresh_catalog(
	    &x, opts, opts->busy_timeout_ms > 0 ? opts->busy_timeout_ms : 10000,
	    err);
	if (rc == 0)
		rc = eng_index(x.st, x.c, NULL, report, arg, &x.stats);
	if (rc)
		eng_errf(err, "rebuild: %s", strerror(-rc));
	mf_catalog_close(x.c);
	mf_store_close(x.st);
	if (rc == 0 && stats)
		*stats = x.stats;
	return rc;
}
