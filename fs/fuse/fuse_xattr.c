/*
 * fuse_xattr.c - the state of shards and snapshots as extended attributes,
 * so `getfattr -d` shows it without matctl:
 *
 *   a shard       user.matfs.state (absent, running, materialized, failed),
 *                 .run_id, .attempts, .raw_bytes, .stored_bytes, with
 *                 `records` in the spec .records (the count) and
 *                 .framing once materialized, and for a failure .error,
 *                 .exit_status and .stderr (its tail)
 *   a snapshot    user.matfs.fingerprint, .name, .spec, .state (absent,
 *                 partial, running, failed, materialized), .shards,
 *                 .materialized, .running, .failed, .raw_bytes,
 *                 .stored_bytes, .framing (from the spec, when known)
 *                 with .order (the batch order's version), and .records
 *                 once every shard is materialized
 *   the batch tree  .order on every folder and file; a batch file's
 *                 .records (B) and, once placed, .global_batch
 *   the root      user.matfs.store, .pipelines, .version, .log (where
 *                 the daemon logs), and this mount's counters:
 *                 .chunks_decompressed (read back from store files),
 *                 .chunks_tapped (taken from shards as they were
 *                 materialized), .cache_hits, .cache_misses,
 *                 .bytes_served, .bytes_pushed (put in the kernel's
 *                 cache as stages wrote them),
 *                 .materializations_started, _failed, _running, and
 *                 .stage_seconds
 *
 * A failure's .error and .stderr can name files (a program, a dep, what
 * the stage printed) that only the spec's owner may see. A reader other
 * than root, the daemon's user and the owner of the fingerprint's spec
 * (one this daemon knows) gets instead an .error that names only the spec
 * file (its name, no folder) and says where the details are, and no
 * .stderr. Both are cleaned as matctl and the log show them: a control
 * character (but tab, and newline in .stderr) or a byte that is not UTF-8
 * is a '?'.
 *
 * Values are text without a trailing newline. An attribute without a
 * value (no error) is not listed. Other user.* names answer ENODATA, other
 * namespaces (security.*, system.*: labels, ACLs) ENOTSUP, at once and
 * without the catalog: ls -l asks every file, and stops asking a device
 * that answers ENOTSUP. Setting or removing is refused.
 *
 * Not for: anything that changes state.
 */
#include "fuse_i.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mf_config.h"

#define PREFIX "user.matfs."
#define MAX_ATTRS 18
/* record ends fit an xattr value (64 KiB) up to this many records */
#define MFS_XATTR_ENDS_MAX 8192

struct xattrs {
	size_t n;
	const char *name[MAX_ATTRS]; /* without PREFIX; static strings */
	char *value[MAX_ATTRS];
	size_t len[MAX_ATTRS]; /* of a binary value; 0: a string's */
};

static void xa_release(struct xattrs *x)
{
	for (size_t i = 0; i < x->n; i++)
		free(x->value[i]);
	x->n = 0;
}

static void xa_add(struct xattrs *x, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void xa_add(struct xattrs *x, const char *name, const char *fmt, ...)
{
	if (x->n == MAX_ATTRS)
		return;
	va_list ap;
	va_start(ap, fmt);
	char *v;
	int rc = vasprintf(&v, fmt, ap);
	va_end(ap);
	if (rc < 0)
		return;
	x->name[x->n] = name;
	x->value[x->n++] = v;
}

/* Text a stage wrote, cleaned as matctl and the log show it (controls but
 * tab and, with newlines, '\n', and bytes that are not UTF-8, become '?'):
 * `getfattr --only-values` on a terminal sends no escape of the stage's. */
static void xa_add_text(struct xattrs *x, const char *name, const char *text,
			bool newlines)
{
	size_t before = x->n;
	xa_add(x, name, "%s", text);
	if (x->n > before)
		mf_text_clean(x->value[before], newlines);
}

/* A binary value of len bytes (taken over). */
static void xa_add_raw(struct xattrs *x, const char *name, void *v, size_t len)
{
	if (x->n == MAX_ATTRS) {
		free(v);
		return;
	}
	x->name[x->n] = name;
	x->len[x->n] = len;
	x->value[x->n++] = v;
}

/* The text a reader who may not see fp's failure details gets. */
static void hidden_error(struct mfs *m, const char *fp, struct xattrs *x)
{
	uid_t owner;
	char *path;
	if (mf_engine_spec_owner(m->eng, fp, &owner, &path) != 0) {
		xa_add(x, "error", "failed; the daemon's log has the details");
		return;
	}
	const char *base = strrchr(path, '/');
	xa_add(x, "error",
	       "failed; the owner of spec '%s' and the daemon's log have the "
	       "details",
	       base ? base + 1 : path);
	free(path);
}

/* Whether reader may see the texts of fp's failures: root, the daemon's
 * user, and the owner of fp's spec. */
static bool sees_details(struct mfs *m, uid_t reader, const char *fp)
{
	uid_t owner;
	char *path;
	if (reader == 0 || reader == m->uid)
		return true;
	if (mf_engine_spec_owner(m->eng, fp, &owner, &path) != 0)
		return false;
	free(path);
	return owner == reader;
}

static void failure_attrs(struct mfs *m, uid_t reader,
			  const struct mfs_inode *in,
			  const struct mf_engine_shard *rec, struct xattrs *x)
{
	if (!rec->error && !rec->stderr_tail)
		return;
	if (!sees_details(m, reader, in->si.fp)) {
		hidden_error(m, in->si.fp, x);
		return;
	}
	if (rec->error)
		xa_add_text(x, "error", rec->error, false);
	if (rec->stderr_tail)
		xa_add_text(x, "stderr", rec->stderr_tail, true);
}

/* .records and .framing, from the engine (the count is in the shard
 * files); nothing for a spec without records or before they are known. */
static void records_attrs(struct mfs *m, const char *fp, bool whole,
			  uint32_t shard, struct xattrs *x)
{
	struct mf_records fr;
	uint64_t count;
	int rc = whole
	    ? mf_engine_snapshot_records(m->eng, fp, &fr, &count)
	    : mf_engine_shard_records(m->eng, fp, shard, &fr, &count);
	if (rc || fr.framing == MF_FRAMING_NONE)
		return;
	char shown[64];
	mf_format_records(&fr, shown, sizeof(shown));
	xa_add(x, "records", "%llu", (unsigned long long)count);
	xa_add(x, "framing", "%s", shown);
}

static int shard_attrs(struct mfs *m, uid_t reader, const struct mfs_inode *in,
		       struct xattrs *x)
{
	struct mf_engine_shard rec;
	int rc = mfs_shard_rec(m, in->si.fp, in->shard, &rec);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		xa_add(x, "state", "%s",
		       mf_engine_state_name(MF_ENGINE_ABSENT));
		return 0;
	}
	xa_add(x, "state", "%s", mf_engine_state_name(rec.state));
	if (rec.run_id[0])
		xa_add(x, "run_id", "%s", rec.run_id);
	xa_add(x, "attempts", "%u", rec.attempts);
	if (rec.state == MF_ENGINE_MATERIALIZED) {
		xa_add(x, "raw_bytes", "%llu",
		       (unsigned long long)rec.raw_bytes);
		xa_add(x, "stored_bytes", "%llu",
		       (unsigned long long)rec.stored_bytes);
		records_attrs(m, in->si.fp, false, in->shard, x);
	}
	if (rec.exit_status >= 0)
		xa_add(x, "exit_status", "%d", rec.exit_status);
	failure_attrs(m, reader, in, &rec, x);
	mf_engine_shard_release(&rec);
	return 0;
}

/* .framing of a snapshot not yet materialized, from its spec when this
 * daemon knows it: a reader can tell how to read the shards before they
 * exist. */
static void spec_framing(struct mfs *m, const char *fp, struct xattrs *x)
{
	struct mf_records fr;
	if (mf_engine_spec_records(m->eng, fp, &fr) != 0 ||
	    fr.framing == MF_FRAMING_NONE)
		return;
	char shown[64];
	mf_format_records(&fr, shown, sizeof(shown));
	xa_add(x, "framing", "%s", shown);
}

struct counts {
	uint32_t done, running, failed;
	uint64_t raw, stored;
};

static int count_shards(struct mfs *m, const char *fp, struct counts *ct,
			char **spec)
{
	struct mf_engine_shard *recs = NULL;
	struct mf_engine_snapshot snap;
	size_t n = 0;
	int rc = mf_engine_list_shards(m->eng, fp, &recs, &n);
	if (rc == 0 && mf_engine_snapshot(m->eng, fp, &snap) == 0) {
		*spec = snap.spec_path ? strdup(snap.spec_path) : NULL;
		mf_engine_snapshot_release(&snap);
	}
	for (size_t i = 0; i < n; i++) {
		ct->done += recs[i].state == MF_ENGINE_MATERIALIZED;
		ct->running += recs[i].state == MF_ENGINE_RUNNING;
		ct->failed += recs[i].state == MF_ENGINE_FAILED;
		ct->raw += recs[i].raw_bytes;
		ct->stored += recs[i].stored_bytes;
	}
	mf_engine_shard_recs_free(recs, n);
	return rc == -ENOENT ? 0 : rc;
}

static const char *snap_state(const struct counts *ct, uint32_t shards)
{
	if (ct->done == shards)
		return "materialized";
	if (ct->running)
		return "running";
	if (ct->failed)
		return "failed";
	return ct->done ? "partial" : "absent";
}

/* A snapshot's .records sums every shard's (one trailer read each): only
 * a getxattr of it (or of .framing, for a snapshot whose spec this daemon
 * does not know) pays for it; any other answer, a listing included,
 * shows the framing from the spec and names .records once every shard
 * is materialized. */
static void dir_records(struct mfs *m, const char *fp, bool done,
			const char *want, struct xattrs *x)
{
	if (done && want &&
	    (strcmp(want, "records") == 0 || strcmp(want, "framing") == 0)) {
		records_attrs(m, fp, true, 0, x);
		return;
	}
	size_t had = x->n;
	spec_framing(m, fp, x);
	if (x->n > had) /* a batch tree, served in this order */
		xa_add(x, "order", "%u", (unsigned)MF_ENGINE_ORDER_VERSION);
	if (done && x->n > had)
		xa_add(x, "records", "%s", "");
}

static int dir_attrs(struct mfs *m, const struct mfs_inode *in,
		     const char *want, struct xattrs *x)
{
	struct counts ct = {0};
	char *spec = NULL;
	int rc = count_shards(m, in->si.fp, &ct, &spec);
	if (rc)
		return rc;
	xa_add(x, "fingerprint", "%s", in->si.fp);
	if (in->si.name[0])
		xa_add(x, "name", "%s", in->si.name);
	if (spec)
		xa_add(x, "spec", "%s", spec);
	free(spec);
	xa_add(x, "state", "%s", snap_state(&ct, in->si.shards));
	xa_add(x, "shards", "%u", in->si.shards);
	xa_add(x, "materialized", "%u", ct.done);
	xa_add(x, "running", "%u", ct.running);
	xa_add(x, "failed", "%u", ct.failed);
	xa_add(x, "raw_bytes", "%llu", (unsigned long long)ct.raw);
	xa_add(x, "stored_bytes", "%llu", (unsigned long long)ct.stored);
	dir_records(m, in->si.fp, ct.done == in->si.shards, want, x);
	return 0;
}

/* A batch file of any framing but fixed records: its record ends, as
 * u64 little endian (docs/format.md §10), computed only when asked for by
 * name; a listing names it. */
static int batch_ends(struct mfs *m, const struct mfs_inode *in,
		      const char *want, struct xattrs *x)
{
	struct mf_records r;
	char *err = NULL;
	int rc = mf_engine_batch_framing(m->eng, in->si.fp, &r, &err);
	free(err);
	if (rc || r.framing == MF_FRAMING_NONE || r.framing == MF_FRAMING_FIXED)
		return 0;
	if (!want) {
		xa_add(x, "record_ends", "%s", "");
		return 0;
	}
	if (strcmp(want, "record_ends") != 0)
		return 0;
	if (in->bkey.v.batch > MFS_XATTR_ENDS_MAX)
		return -E2BIG;
	uint64_t *ends;
	size_t n;
	rc = mfs_batch_record_ends(m, in, &ends, &n);
	if (rc)
		return rc == -EAGAIN || rc == -ENOENT ? 0 : rc; /* ENODATA */
	uint8_t *v = malloc(n ? 8 * n : 1);
	if (!v) {
		free(ends);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 8; b++)
			v[8 * i + b] = (uint8_t)(ends[i] >> (8 * b));
	free(ends);
	xa_add_raw(x, "record_ends", v, 8 * n);
	return 0;
}

/* A folder or file of the batch tree: the order's version, and for a
 * file its records and, once placed, its global batch. */
static int batch_attrs(struct mfs *m, const struct mfs_inode *in,
		       const char *want, struct xattrs *x)
{
	xa_add(x, "order", "%u", (unsigned)MF_ENGINE_ORDER_VERSION);
	if (in->kind != MFS_BFILE)
		return 0;
	int rc = batch_ends(m, in, want, x);
	if (rc)
		return rc;
	xa_add(x, "records", "%llu", (unsigned long long)in->bkey.v.batch);
	struct mf_engine_batch_place pl;
	char *err = NULL;
	if (mf_engine_batch_find(m->eng, in->si.fp, &in->bkey.v, in->batch, &pl,
				 &err) == 0)
		xa_add(x, "global_batch", "%llu",
		       (unsigned long long)pl.global);
	free(err);
	return 0;
}

/* Since the mount, atomic reads without a lock: chunks the cache
 * decompressed, chunks it took from materializations as they were
 * written instead, readers' cache hits and misses, bytes read replies
 * carried, and what the engine materialized (matctl stats reads them). */
static void root_counts(struct mfs *m, struct xattrs *x)
{
	struct mfs_cache_stats cs;
	struct mf_engine_stats es;
	mfs_cache_counts(m->cache, &cs);
	mf_engine_stats(m->eng, &es);
	xa_add(x, "chunks_decompressed", "%llu",
	       (unsigned long long)cs.decompressed);
	xa_add(x, "chunks_tapped", "%llu", (unsigned long long)cs.tapped);
	xa_add(x, "cache_hits", "%llu", (unsigned long long)cs.hits);
	xa_add(x, "cache_misses", "%llu", (unsigned long long)cs.misses);
	xa_add(x, "bytes_served", "%llu",
	       (unsigned long long)atomic_load(&m->bytes_served));
	xa_add(x, "bytes_pushed", "%llu",
	       (unsigned long long)atomic_load(&m->bytes_pushed));
	xa_add(x, "materializations_started", "%llu",
	       (unsigned long long)es.started);
	xa_add(x, "materializations_failed", "%llu",
	       (unsigned long long)es.failed);
	xa_add(x, "materializations_running", "%llu",
	       (unsigned long long)es.running);
	xa_add(x, "stage_seconds", "%.3f", es.stage_seconds);
}

/* The attributes of ino as reader (a uid) may see them; want: the one
 * asked for (without the prefix), NULL for a listing. */
static int attrs_of(struct mfs *m, uid_t reader, fuse_ino_t ino,
		    const char *want, struct xattrs *x)
{
	struct mfs_inode in;
	int rc = mfs_inode_decode(m, ino, &in);
	if (rc)
		return rc;
	switch (in.kind) {
	case MFS_SHARD:
		return shard_attrs(m, reader, &in, x);
	case MFS_DIR:
		return dir_attrs(m, &in, want, x);
	case MFS_ROOT:
		xa_add(x, "store", "%s", m->o.store_dir);
		xa_add(x, "pipelines", "%s", m->o.pipelines_dir);
		xa_add(x, "version", "%s", MF_VERSION);
		if (m->o.log_dest)
			xa_add(x, "log", "%s", m->o.log_dest);
		root_counts(m, x);
		return 0;
	case MFS_LINK:
		return 0;
	case MFS_BDIR:
	case MFS_BFILE:
		return batch_attrs(m, &in, want, x);
	}
	return 0;
}

/* Answers a getxattr/listxattr with value (len bytes) as size asks. */
static void reply_value(fuse_req_t req, const char *value, size_t len,
			size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, value, len);
}

void mfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		     size_t size)
{
	struct mfs *m = fuse_req_userdata(req);
	if (strncmp(name, PREFIX, strlen(PREFIX)) != 0) {
		/* no SELinux labels, no ACLs: saying so (rather than
		 * ENODATA) lets ls -l stop asking for every file */
		bool user = strncmp(name, "user.", 5) == 0;
		fuse_reply_err(req, user ? ENODATA : ENOTSUP);
		return;
	}
	struct xattrs x = {0};
	int rc =
	    attrs_of(m, fuse_req_ctx(req)->uid, ino, name + strlen(PREFIX), &x);
	if (rc) {
		xa_release(&x); /* what came before the error */
		fuse_reply_err(req, -rc);
		return;
	}
	size_t i = 0;
	while (i < x.n && strcmp(x.name[i], name + strlen(PREFIX)) != 0)
		i++;
	if (i == x.n)
		fuse_reply_err(req, ENODATA);
	else
		reply_value(req, x.value[i],
			    x.len[i] ? x.len[i] : strlen(x.value[i]), size);
	xa_release(&x);
}

void mfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct mfs *m = fuse_req_userdata(req);
	struct xattrs x = {0};
	int rc = attrs_of(m, fuse_req_ctx(req)->uid, ino, NULL, &x);
	if (rc) {
		xa_release(&x); /* what came before the error */
		fuse_reply_err(req, -rc);
		return;
	}
	char buf[MAX_ATTRS * 64];
	size_t len = 0;
	for (size_t i = 0; i < x.n; i++) {
		int k = snprintf(buf + len, sizeof(buf) - len, PREFIX "%s",
				 x.name[i]);
		/* names are short constants: one that does not fit is a bug,
		 * never a truncated list */
		assert(k >= 0 && (size_t)k < sizeof(buf) - len);
		if (k < 0 || (size_t)k >= sizeof(buf) - len) {
			xa_release(&x);
			fuse_reply_err(req, EIO);
			return;
		}
		len += (size_t)k + 1; /* names are NUL-separated */
	}
	xa_release(&x);
	reply_value(req, buf, len, size);
}

/* A user.* attribute: matfs keeps that namespace, and none of it may be
 * written (EPERM, as for chmod); another namespace (security., trusted.,
 * system.) it does not support at all (ENOTSUP). */
static bool user_name(const char *name)
{
	return strncmp(name, "user.", 5) == 0;
}

void mfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		     const char *value, size_t size, int flags)
{
	(void)ino;
	(void)value;
	(void)size;
	(void)flags;
	fuse_reply_err(req, user_name(name) ? EPERM : ENOTSUP);
}

void mfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino;
	fuse_reply_err(req, user_name(name) ? EPERM : ENOTSUP);
}
