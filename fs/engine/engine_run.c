/*
 * engine_run.c - materializing one claimed shard: check that the spec still
 * yields the fingerprint, run its stages, stream their output into a shard
 * writer as it comes, commit, and record the outcome in the catalog (or,
 * with opts.serve_sealed, seal the file and leave its commit to the commit
 * thread, engine_commit.c). With opts.chunk set, the writer's raw chunks
 * and the outcome go to it too.
 * A cancelled attempt (mf_engine_cancel) has its stages killed and gives
 * its claim up without recording a failure. A shard whose shard
 * fingerprint's data is materialized already (a hint in the store,
 * confirmed by the catalog and the file) is stored from that data, no
 * stage run; each commit leaves such a hint.
 *
 * Not for: deciding who computes (engine_claim.c holds the claim).
 */
#include "engine_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_BUF (1u << 20)

/* The bytes of fp can only be computed from deps and inputs that still
 * hash as they did: anything else would store wrong data under it. */
/* How many times a shard is computed while its inputs change under the
 * feeder before it fails: each attempt starts from a fresh check. */
#define ENG_INPUT_TRIES 3

/* The shard's inputs and deps still hash as the fingerprint says; with
 * guards (may be NULL), the inputs as they were then, for the feeder. */
static int check_fingerprint(struct spec_entry *se, uint32_t shard,
			     struct mf_input_guard **guards, size_t *n,
			     char **err)
{
	char *why = NULL;
	int rc = mf_fingerprint_guard_shard(se->spec, &se->fpr, shard, guards,
					    n, &why);
	if (rc)
		eng_errf(
		    err, "spec '%s': %s: snapshot %s can no longer be computed",
		    se->spec->path, why ? why : strerror(-rc), se->fpr.hex);
	free(why);
	return rc ? -ESTALE : 0;
}

struct pump {
	struct mf_engine *e;
	struct mf_catalog *c;
	const char *fp;
	const char *run_id;
	uint32_t shard;
	uint64_t bytes;
	uint64_t next_beat_ns;
	uint64_t generation; /* of this claim; 0: not read back */
	bool tapped; /* chunk events go to opts.chunk */
	bool lost; /* the claim was taken over or reset meanwhile */
	bool sealed; /* served sealed, the commit queued (serve_sealed) */
	struct eng_sealed_out *out; /* where the sealed file's reader goes;
				       NULL: nowhere */
	const struct mf_input_guard *guards; /* the inputs as checked */
	size_t n_guards;
	bool input_changed; /* the feeder found one not as checked */
	char ends_why[160]; /* records: index: what was wrong with fd 3 */
	char sfp[MF_FP_HEX_LEN + 1]; /* the shard's fingerprint; "": none */
	uid_t owner; /* of the spec */
	uint64_t place; /* of the spec's folder (eng_spec_place) */
	struct mf_shard_reader *donor; /* data of sfp to reuse; NULL: none */
	struct mf_store_donor from; /* where donor's file is */
};

static void pump_progress(struct pump *p, bool done)
{
	if (p->e->opts.progress)
		p->e->opts.progress(p->e->opts.progress_arg, p->fp, p->shard,
				    p->bytes, done);
	uint64_t now = mf_mono_ns();
	if (now >= p->next_beat_ns) {
		(void)mf_catalog_heartbeat(p->c, p->run_id, mf_now_s());
		p->next_beat_ns =
		    now + (uint64_t)p->e->opts.heartbeat_s * 1000000000ULL;
	}
}

/* Moves the job's output into the writer, read straight into the chunk
 * it fills (no copy of its own), at most READ_BUF at a time so that the
 * progress and the heartbeat keep up. Returns 0 at the end of output,
 * the job's read error (-ETIMEDOUT, ...) or the writer's error as
 * *store_rc. */
static int pump_output(struct pump *p, struct mf_job *job,
		       struct mf_shard_writer *w, int *store_rc)
{
	for (;;) {
		void *buf;
		size_t room;
		*store_rc = mf_shard_writer_space(w, &buf, &room);
		if (*store_rc)
			return 0;
		ssize_t n =
		    mf_job_read(job, buf, room < READ_BUF ? room : READ_BUF);
		if (n <= 0)
			return (int)n;
		*store_rc = mf_shard_writer_wrote(w, (size_t)n);
		if (*store_rc)
			return 0;
		p->bytes += (uint64_t)n;
		pump_progress(p, false);
	}
}

/* ---- chunk events (opts.chunk) ---- */

static void chunk_event(const struct pump *p, enum mf_chunk_kind kind,
			uint32_t index, const void *raw, size_t len,
			const struct mf_shard_stat *st)
{
	struct mf_engine_file file;
	if (st)
		eng_file_of(st, &file);
	struct mf_chunk_event ev = {
	    .kind = kind,
	    .fp = p->fp,
	    .shard = p->shard,
	    .generation = p->generation,
	    .index = index,
	    .raw = raw,
	    .len = len,
	    .stat = st ? &file : NULL,
	};
	p->e->opts.chunk(p->e->opts.chunk_arg, &ev);
}

static void pump_tap(void *arg, uint32_t chunk, const void *raw, size_t len)
{
	chunk_event(arg, MF_CHUNK_DATA, chunk, raw, len, NULL);
}

static void pump_release(void *arg, uint32_t chunk)
{
	chunk_event(arg, MF_CHUNK_RELEASE, chunk, NULL, 0, NULL);
}

/* Names this computation by the row's generation (the claim just set it)
 * and taps the writer; without a row that is ours, no events and no
 * serving before the commit. */
static void tap_start(struct pump *p, struct mf_shard_writer *w)
{
	struct mf_shard_rec rec;
	if ((!p->e->opts.chunk && !p->e->opts.serve_sealed) ||
	    mf_catalog_get_shard(p->c, p->fp, p->shard, &rec) != 0)
		return;
	if (rec.state == MF_SHARD_RUNNING &&
	    strcmp(rec.run_id, p->run_id) == 0 && rec.generation > 0) {
		p->generation = rec.generation;
		/* the chunks' bytes lent until released: a consumer that
		 * keeps them reads them with no copy of its own */
		p->tapped = p->e->opts.chunk &&
		    mf_shard_writer_set_tap(w, pump_tap, p) == 0 &&
		    mf_shard_writer_set_release(w, pump_release) == 0;
		if (p->e->opts.chunk && !p->tapped)
			(void)mf_shard_writer_set_tap(w, NULL, NULL);
	}
	mf_shard_rec_release(&rec);
}

static void tap_end(const struct pump *p, bool committed,
		    const struct mf_shard_stat *st)
{
	enum mf_chunk_kind k = p->sealed ? MF_CHUNK_SEALED
	    : committed			 ? MF_CHUNK_COMMITTED
					 : MF_CHUNK_FAILED;
	if (p->tapped)
		chunk_event(p, k, 0, NULL, 0, k != MF_CHUNK_FAILED ? st : NULL);
}

/* ---- running, storing, recording ---- */

/* Records the failure as the shard's, unless the claim was lost: then
 * it is nobody's outcome, and p->lost says so. */
static int record_failure(struct pump *p, int32_t status, const char *error,
			  const char *tail)
{
	int rc = mf_catalog_fail_shard(p->c, p->fp, p->shard, p->run_id, status,
				       error, tail);
	if (rc == -ESTALE)
		p->lost = true;
	return rc == -ESTALE ? 0 : rc;
}

/* eng_failure_errf: the catalog keeps the whole tail; the message takes
 * its last line, at most 200 bytes of it. */
void eng_failure_errf(char **err, const char *error, const char *tail)
{
	const char *t = tail ? tail : "";
	size_t end = strlen(t);
	while (end > 0 &&
	       (t[end - 1] == '\n' || t[end - 1] == '\r' || t[end - 1] == ' ' ||
		t[end - 1] == '\t'))
		end--;
	size_t start = end;
	while (start > 0 && t[start - 1] != '\n')
		start--;
	if (end > start + 200) /* one line, not a page */
		start = end - 200;
	if (end > start)
		eng_errf(err, "%s: %.*s", error, (int)(end - start), t + start);
	else
		eng_errf(err, "%s", error);
}

/* The checks only the end of the output allows (a fixed-size remainder,
 * a frame cut short): a failure is the shard's, and nothing is stored. */
static int end_records(struct pump *p, struct mf_shard_writer *w, char **err)
{
	int rc = mf_shard_writer_end_records(w);
	if (rc == 0)
		return 0;
	if (rc == -EBADMSG && *mf_shard_writer_framing_error(w))
		eng_errf(err, "shard %u: records: %s", p->shard,
			 mf_shard_writer_framing_error(w));
	else
		eng_errf(err, "store: writing shard %u: %s", p->shard,
			 strerror(-rc));
	mf_shard_writer_abort(w);
	(void)record_failure(p, -1, *err, NULL);
	return -EIO;
}

/* records: index: the ends the last stage wrote to fd 3, to the writer.
 * Returns 0, the writer's error (-EBADMSG: not increasing), -EBADMSG
 * with p->ends_why, or -ENOMEM; a job that timed out or failed while its
 * ends were read is left to mf_job_finish to report. */
static int take_ends(struct pump *p, struct mf_job *job,
		     struct mf_shard_writer *w)
{
	const uint8_t *buf;
	size_t len;
	int rc = mf_job_read_index(job, &buf, &len);
	if (rc == -EFBIG) {
		snprintf(p->ends_why, sizeof(p->ends_why),
			 "fd 3: more than 1GiB of record ends");
		return -EBADMSG;
	}
	if (rc)
		return 0; /* a timeout, a killed job: mf_job_finish says so */
	if (len % 8) {
		snprintf(p->ends_why, sizeof(p->ends_why),
			 "fd 3 got %zu bytes, not a whole number of 8-byte "
			 "record ends (%zu bytes over)",
			 len, len % 8);
		return -EBADMSG;
	}
	uint64_t *ends = malloc(len ? len : 1);
	if (!ends)
		return -ENOMEM;
	for (size_t i = 0; i < len / 8; i++) {
		uint64_t v = 0;
		for (int b = 7; b >= 0; b--)
			v = (v << 8) | buf[8 * i + (size_t)b];
		ends[i] = v;
	}
	rc = mf_shard_writer_set_ends(w, ends, len / 8);
	free(ends);
	return rc;
}

/* The shard's failure when its output could not be stored (store_rc, not
 * 0): it broke its framing, or the store failed to write it. Aborts w and
 * records the failure; -EIO. */
static int store_failed(struct pump *p, struct mf_shard_writer *w, int store_rc,
			char **err)
{
	if (store_rc == -EBADMSG &&
	    (p->ends_why[0] || *mf_shard_writer_framing_error(w))) {
		/* the output broke its framing: the shard's failure */
		eng_errf(err, "shard %u: records: %s", p->shard,
			 p->ends_why[0] ? p->ends_why
					: mf_shard_writer_framing_error(w));
		mf_shard_writer_abort(w);
		(void)record_failure(p, -1, *err, NULL);
		return -EIO;
	}
	mf_shard_writer_abort(w);
	eng_errf(err, "store: writing shard %u: %s", p->shard,
		 strerror(-store_rc));
	(void)record_failure(p, -1, *err, NULL);
	return -EIO;
}

static int run_stages(struct pump *p, struct spec_entry *se,
		      struct mf_shard_writer *w, char **err)
{
	struct mf_job *job;
	char *jerr = NULL;
	int rc = mf_job_start_guarded(se->spec, p->shard, p->fp, p->guards,
				      p->n_guards, &job, &jerr);
	if (rc) {
		eng_errf(err, "%s", jerr ? jerr : strerror(-rc));
		free(jerr);
		mf_shard_writer_abort(w);
		(void)record_failure(p, -1, *err, NULL);
		return -EIO;
	}
	if (eng_flight_job(p->e, p->fp, p->shard, job))
		mf_job_kill(job); /* cancelled before it started */
	int store_rc = 0;
	int out_rc = pump_output(p, job, w, &store_rc);
	if (out_rc == 0 && store_rc == 0 &&
	    se->spec->records.framing == MF_FRAMING_INDEX)
		store_rc = take_ends(p, job, w);
	bool cancelled = eng_flight_job(p->e, p->fp, p->shard, NULL);
	if (store_rc)
		mf_job_kill(job);
	struct mf_job_result res;
	rc = mf_job_finish(job, &res);
	if (cancelled && (rc || !res.ok)) { /* killed for nobody: no failure */
		mf_shard_writer_abort(w);
		eng_errf(err, "shard %u of %.12s: cancelled", p->shard, p->fp);
		(void)mf_catalog_abandon_shard(p->c, p->fp, p->shard,
					       p->run_id);
		return -ECANCELED;
	}
	if (store_rc)
		return store_failed(p, w, store_rc, err);
	if (!res.ok && res.input_changed) { /* no one's outcome */
		mf_shard_writer_abort(w);
		p->input_changed = true;
		eng_errf(err, "%s", res.error);
		return -EIO;
	}
	if (rc || !res.ok) {
		mf_shard_writer_abort(w);
		eng_failure_errf(err, res.error, res.stderr_tail);
		(void)record_failure(p, res.wait_status, res.error,
				     res.stderr_tail[0] ? res.stderr_tail
							: NULL);
		return -EIO;
	}
	return end_records(p, w, err);
}

/* ---- reusing a shard of the same shard fingerprint ---- */

/* A shard fingerprint's data already materialized, by a spec of the same
 * owner in the same folder, in p->donor: the hint says where, the catalog
 * that it is still that run's, its file's checksums that it is that
 * shard's. Reuse crosses owners and folders never: the inputs' paths are
 * relative to the spec's folder, and whoever can write files of another
 * folder's relative paths, sizes and times (input_identity: stat) would
 * otherwise have their bytes served in the other's snapshot. */
static bool try_donor(struct pump *p, const struct spec_entry *se,
		      const struct mf_store_donor *d)
{
	if (d->owner != p->owner || d->place != p->place ||
	    (strcmp(d->fp, p->fp) == 0 && d->shard == p->shard))
		return false;
	struct mf_shard_rec rec;
	if (mf_catalog_get_shard(p->c, d->fp, d->shard, &rec) != 0)
		return false;
	bool ok = rec.state == MF_SHARD_MATERIALIZED &&
	    strcmp(rec.run_id, d->run_id) == 0;
	mf_shard_rec_release(&rec);
	struct mf_shard_reader *r;
	if (!ok ||
	    mf_shard_reader_open(p->e->store, d->fp, d->run_id, d->shard, &r))
		return false;
	struct mf_records fr;
	uint64_t count;
	mf_shard_reader_records(r, &fr, &count);
	/* records: index: the ends are the stage's; only a donor has them */
	if (se->spec->records.framing == MF_FRAMING_INDEX &&
	    fr.framing != MF_FRAMING_INDEX) {
		mf_shard_reader_close(r);
		return false;
	}
	p->donor = r;
	p->from = *d;
	return true;
}

/* The first holder of the hint that is confirmed (try_donor). */
static void find_donor(struct pump *p, const struct spec_entry *se)
{
	struct mf_store_donor v[MF_STORE_HOLDERS];
	size_t n = 0;
	if (!p->sfp[0] || mf_store_shared_get(p->e->store, p->sfp, v, &n))
		return;
	for (size_t i = 0; i < n && !try_donor(p, se, &v[i]); i++)
		;
}

/* The donor's record ends (records: index) to w. */
static int replay_ends(struct pump *p, struct mf_shard_writer *w)
{
	struct mf_records fr;
	uint64_t n;
	mf_shard_reader_records(p->donor, &fr, &n);
	uint64_t *ends = malloc((n ? n : 1) * sizeof(*ends));
	if (!ends)
		return -ENOMEM;
	int rc = 0;
	for (uint64_t k = 0; rc == 0 && k < n; k++) {
		uint64_t off, len;
		rc = mf_shard_reader_record(p->donor, k, &off, &len);
		ends[k] = off + len;
	}
	if (rc == 0)
		rc = mf_shard_writer_set_ends(w, ends, (size_t)n);
	free(ends);
	return rc;
}

/* The donor's bytes into w, as the stages' output would go: the writer
 * compresses them with this spec's settings and builds this spec's
 * records index from them. 0; ENG_REPLAY_FAILED when the donor could not
 * be read (nothing recorded: the caller runs the stages instead); or the
 * writer's failure, recorded as the shard's (the stages would give the
 * same bytes). */
#define ENG_REPLAY_FAILED 1
static int replay(struct pump *p, struct spec_entry *se,
		  struct mf_shard_writer *w, char **err)
{
	struct mf_shard_stat st;
	mf_shard_reader_stat(p->donor, &st);
	size_t cap = st.chunk_size ? (size_t)st.chunk_size : 1;
	uint8_t *buf = malloc(cap);
	int store_rc = buf ? 0 : -ENOMEM, read_rc = 0;
	for (uint32_t i = 0; buf && i < st.chunks && !store_rc; i++) {
		ssize_t n = mf_shard_reader_read_chunk(p->donor, i, buf, cap);
		if (n < 0) {
			read_rc = (int)n;
			break;
		}
		store_rc = mf_shard_writer_write(w, buf, (size_t)n);
		p->bytes += (uint64_t)n;
		pump_progress(p, false);
	}
	free(buf);
	if (read_rc || (store_rc == -ENOMEM && !buf)) {
		mf_shard_writer_abort(w);
		eng_note(p->e,
			 "shard %u of %.12s: the data to reuse (shard %u "
			 "of %.12s) does not read (%s): computing it",
			 p->shard, p->fp, p->from.shard, p->from.fp,
			 strerror(-(read_rc ? read_rc : store_rc)));
		return ENG_REPLAY_FAILED;
	}
	if (store_rc == 0 && se->spec->records.framing == MF_FRAMING_INDEX)
		store_rc = replay_ends(p, w);
	if (store_rc)
		return store_failed(p, w, store_rc, err);
	eng_note(p->e,
		 "shard %u of %.12s: reused shard %u of %.12s (same "
		 "shard fingerprint): no stage ran",
		 p->shard, p->fp, p->from.shard, p->from.fp);
	return end_records(p, w, err);
}

/* Seals w and queues its commit (serve_sealed): 0 with p->sealed, -EIO
 * with *err (recorded), or 1 when it cannot be queued (no memory): then w
 * is still the caller's to commit. */
static int seal_shard(struct pump *p, struct mf_shard_writer *w,
		      struct mf_shard_stat *st, char **err)
{
	struct sealed *s = calloc(1, sizeof(*s));
	if (!s)
		return 1;
	int rc = mf_shard_writer_seal(w, st, &s->fd);
	if (rc) {
		free(s);
		eng_errf(err, "store: committing shard %u: %s", p->shard,
			 strerror(-rc));
		(void)record_failure(p, -1, *err, NULL);
		return -EIO;
	}
	pump_progress(p, true);
	memcpy(s->fp, p->fp, sizeof(s->fp));
	s->shard = p->shard;
	memcpy(s->run_id, p->run_id, sizeof(s->run_id));
	memcpy(s->sfp, p->sfp, sizeof(s->sfp));
	s->owner = p->owner;
	s->place = p->place;
	s->generation = p->generation;
	s->sealed_at = mf_now_s();
	s->st = *st;
	s->w = w;
	/* this open's reader before the commit can end (no reader: it reads
	 * the file back through the catalog, as before) */
	if (p->out && !p->out->r) {
		int fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0);
		if (fd >= 0 &&
		    mf_shard_reader_open_fd(fd, p->fp, p->shard, &p->out->r) ==
			0)
			eng_sealed_row(s, &p->out->rec);
		else
			p->out->r = NULL;
		if (fd >= 0)
			close(fd);
	}
	eng_commit_queue(p->e, s);
	p->sealed = true;
	return 0;
}

/* Stores the stages' output through w and records it; 0, -EIO with *err,
 * or 0 with *committed false and p->lost when the claim was lost
 * meanwhile. With serve_sealed, 0 with p->sealed once the file is sealed
 * and its commit queued. */
static int store_shard(struct pump *p, struct spec_entry *se,
		       struct mf_shard_writer *w, struct mf_shard_stat *st,
		       bool *committed, char **err)
{
	int rc = p->donor ? replay(p, se, w, err) : run_stages(p, se, w, err);
	if (rc)
		return rc;
	/* the inputs may have changed while the stages read them */
	rc = check_fingerprint(se, p->shard, NULL, NULL, err);
	if (rc) {
		mf_shard_writer_abort(w);
		return rc; /* ESTALE: the caller gives the claim back */
	}
	/* complete and checked: readers may have it before it is durable */
	if (p->e->opts.serve_sealed && p->generation &&
	    (rc = seal_shard(p, w, st, err)) <= 0)
		return rc;
	rc = mf_shard_writer_commit(w, st);
	if (rc) {
		eng_errf(err, "store: committing shard %u: %s", p->shard,
			 strerror(-rc));
		(void)record_failure(p, -1, *err, NULL);
		return -EIO;
	}
	pump_progress(p, true);
	uint64_t down_until = 0, down_ns = 0;
	bool lost = false;
	for (;;) { /* an outage: the file waits, durable, for the catalog */
		rc = mf_catalog_complete_shard(p->c, p->fp, p->shard, p->run_id,
					       st->raw_bytes, st->stored_bytes,
					       st->chunks);
		/* a reply lost with the connection, after the server had
		 * recorded it: the row is already ours */
		if (rc == -ESTALE && lost &&
		    eng_recorded(p->c, p->fp, p->shard, p->run_id,
				 p->generation))
			rc = 0;
		if (!mf_catalog_unreachable(rc) ||
		    eng_catalog_wait(p->e, rc, &down_until, &down_ns, err))
			break;
		lost = true;
	}
	if (rc == -ESTALE) { /* lost meanwhile: the caller looks again */
		p->lost = true;
		/* no row will ever name this file */
		(void)mf_store_shard_remove(p->e->store, p->fp, p->run_id,
					    p->shard);
		return 0;
	}
	if (rc) {
		eng_errf(err, "catalog: recording shard %u: %s", p->shard,
			 strerror(-rc));
		return -EIO;
	}
	*committed = true;
	eng_shared_hint(p->e, p->sfp, p->fp, p->shard, p->run_id, p->owner,
			p->place);
	return 0;
}

/* The rest of an attempt, once the inputs are checked: a writer, the
 * stages, the store and the record. */
static int store_attempt(struct pump *p, struct spec_entry *se, char **err)
{
	struct mf_engine *e = p->e;
	struct mf_codec_cfg cfg = {
	    se->spec->codec, se->spec->level, se->spec->chunk_size,
	    e->opts.compress_threads, se->spec->compression_adapt};
	struct mf_shard_writer *w;
	int rc = mf_shard_writer_open(e->store, p->fp, p->run_id, p->shard,
				      &cfg, &w);
	if (rc) {
		eng_errf(err, "store: creating shard %u: %s", p->shard,
			 strerror(-rc));
		(void)record_failure(p, -1, *err, NULL);
		return -EIO;
	}
	if (se->spec->records.framing != MF_FRAMING_NONE &&
	    (rc = mf_shard_writer_set_records(w, &se->spec->records)) != 0) {
		mf_shard_writer_abort(w);
		eng_errf(err, "store: shard %u: records: %s", p->shard,
			 strerror(-rc));
		(void)record_failure(p, -1, *err, NULL);
		return -EIO;
	}
	tap_start(p, w);
	struct mf_shard_stat st;
	bool committed = false;
	rc = store_shard(p, se, w, &st, &committed, err);
	tap_end(p, committed, &st);
	if (rc == ENG_REPLAY_FAILED) { /* computed, then */
		mf_shard_reader_close(p->donor);
		p->donor = NULL;
		p->bytes = 0;
		return store_attempt(p, se, err);
	}
	return rc;
}

/* One attempt: checks the inputs, runs the stages on them as checked,
 * stores and records the output. p->input_changed when the feeder found
 * an input changed: nothing was recorded, and another attempt may go. */
static int attempt(struct pump *p, struct spec_entry *se, char **err)
{
	struct mf_input_guard *guards;
	size_t n_guards;
	int rc = check_fingerprint(se, p->shard, &guards, &n_guards, err);
	if (rc)
		return rc; /* ESTALE: the caller gives the claim back */
	p->guards = guards;
	p->n_guards = n_guards;
	p->owner = se->spec->owner_uid;
	p->place = eng_spec_place(se->spec);
	if (mf_fingerprint_shard(se->spec, &se->fpr, p->shard, p->sfp) != 0)
		p->sfp[0] = '\0';
	find_donor(p, se);
	rc = store_attempt(p, se, err);
	if (p->donor)
		mf_shard_reader_close(p->donor);
	p->donor = NULL;
	free(guards);
	p->guards = NULL;
	return rc;
}

/* An input that changed while the feeder read it fails the attempt, not
 * the shard: the bytes are no one's. It is computed again from a fresh
 * check, up to ENG_INPUT_TRIES times, and the log says so. */
static int materialize(struct mf_engine *e, struct mf_catalog *c,
		       struct spec_entry *se, uint32_t shard,
		       const char *run_id, struct eng_sealed_out *sealed,
		       char **err)
{
	for (int tries = 1;; tries++) {
		struct pump p = {.e = e,
				 .c = c,
				 .fp = se->fpr.hex,
				 .run_id = run_id,
				 .shard = shard,
				 .out = sealed};
		int rc = attempt(&p, se, err);
		if (!p.input_changed || p.lost)
			/* what happened to a lost claim is not the shard's
			 * outcome; a fingerprint that can no longer be
			 * computed stays a fact */
			return p.lost && rc != -ESTALE ? -EAGAIN : rc;
		char *why = *err;
		*err = NULL;
		if (tries == ENG_INPUT_TRIES) {
			eng_errf(err, "%s, in each of %d attempts",
				 why ? why : "an input changed", tries);
			free(why);
			(void)record_failure(&p, -1, *err, NULL);
			return p.lost ? -EAGAIN : -EIO;
		}
		eng_note(e, "shard %u of %.12s: %s: computing it again", shard,
			 se->fpr.hex, why ? why : "an input changed");
		free(why);
	}
}

/* Counts a materialization in the engine's counters and the catalog's
 * totals (a failure to record a total is not the shard's). */
static void count_start(struct mf_engine *e, struct mf_catalog *c)
{
	atomic_fetch_add(&e->n_started, 1);
	atomic_fetch_add(&e->n_running, 1);
	struct mf_catalog_totals d = {.started = 1};
	(void)mf_catalog_add_totals(c, &d);
}

static void count_end(struct mf_engine *e, struct mf_catalog *c, int rc,
		      uint64_t ns)
{
	atomic_fetch_sub(&e->n_running, 1);
	atomic_fetch_add(&e->stage_ns, ns);
	if (rc == -EIO)
		atomic_fetch_add(&e->n_failed, 1);
	struct mf_catalog_totals d = {.failed = rc == -EIO,
				      .stage_ms = ns / 1000000};
	(void)mf_catalog_add_totals(c, &d);
}

int eng_materialize(struct mf_engine *e, struct mf_catalog *c,
		    struct spec_entry *se, uint32_t shard, const char *run_id,
		    struct eng_sealed_out *sealed, char **err)
{
	char *local = NULL; /* the error is recorded even if nobody asks */
	count_start(e, c);
	uint64_t t0 = mf_mono_ns();
	int rc =
	    materialize(e, c, se, shard, run_id, sealed, err ? err : &local);
	if (rc && sealed && sealed->r) { /* not this computation's answer */
		mf_shard_reader_close(sealed->r);
		mf_shard_rec_release(&sealed->rec);
		sealed->r = NULL;
	}
	count_end(e, c, rc, mf_mono_ns() - t0);
	free(local);
	return rc;
}
