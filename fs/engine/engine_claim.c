/*
 * engine_claim.c - the claim loop across processes: one open of a shard by
 * the leader of its flight. It reads the shard's row, opens the committed
 * (or sealed here) file, else claims it in the catalog and computes it, or
 * waits for the run elsewhere that computes it, waiting out an outage of
 * the catalog on the way.
 *
 * Not for: sharing one attempt among this process's threads
 * (engine_flight.c), running the stages (engine_run.c) or the commit
 * (engine_commit.c).
 */
#include "engine_i.h"

#include <errno.h>
#include <string.h>

#define MAX_ATTEMPTS 4 /* recomputations of a vanished shard */
#define WAIT_MIN_NS 5000000ULL /* polling a claim held elsewhere */
#define WAIT_MAX_NS 200000000ULL
/* where the catalog wakes waiters (mf_catalog_wait_shard), the fallback:
 * an owner that dies notifies nobody, and a cancelled open notices */
#define WOKEN_MIN_MS 100
#define WOKEN_MAX_MS 1000

/* ---- opening a shard ---- */

/* What one step of the claim loop came to. CLAIM_OPENED and CLAIM_FAILED
 * end the loop (CLAIM_FAILED with the step's rc, which may be an outage
 * to wait out); the others send it round again for the reason they name. */
enum claim_result {
	CLAIM_OPENED, /* the shard's file is open: *out, and *rec */
	CLAIM_COMPUTED, /* computed here: read it back like anyone */
	CLAIM_WAIT, /* a live run elsewhere computes it: wait_elsewhere */
	CLAIM_VANISHED, /* its committed file was gone or corrupt */
	CLAIM_LOST, /* our run was declared dead, or lost its claim */
	CLAIM_FAILED, /* an error, in *rc */
};

/* A step that failed with rc (never 0). */
static enum claim_result claim_failed(int rc, int *out_rc)
{
	*out_rc = rc;
	return CLAIM_FAILED;
}

/* Opens the committed file of a materialized shard; a file that is gone or
 * corrupt sends the shard back to absent (if the row still names that
 * computation): CLAIM_VANISHED. */
static enum claim_result open_committed(struct mf_engine *e,
					struct mf_catalog *c,
					const struct mf_shard_rec *rec,
					struct mf_shard_reader **out, int *rc)
{
	int r = mf_shard_reader_open(e->store, rec->fp, rec->run_id, rec->index,
				     out);
	if (r == -ENOENT || r == -EBADMSG || r == -ELOOP) {
		(void)eng_expire_recs(e, c, rec, 1);
		return CLAIM_VANISHED;
	}
	if (r)
		return claim_failed(r, rc);
	(void)mf_catalog_touch(c, rec->fp, rec->index, mf_now_s());
	return CLAIM_OPENED;
}

/* Computes a shard this process's run run_id has claimed. 0 once it is
 * committed and recorded; -EAGAIN when the claim was lost meanwhile (the
 * new owner's result is the one to wait for); else an error with *err
 * (may be NULL: the catalog still gets the message). */
static int compute_claimed(struct mf_engine *e, struct mf_catalog *c,
			   const char *fp, uint32_t shard, const char *run_id,
			   struct eng_sealed_out *sealed, char **err)
{
	struct spec_entry *se;
	char *why = NULL;
	/* active from the claim on: the heartbeat covers loading the spec */
	eng_run_set_active(e, run_id, 1);
	int rc = eng_spec_for(e, c, fp, &se, &why);
	bool give_back = rc != 0;
	if (rc) {
		rc = rc == -ENOENT ? -ESTALE : rc;
	} else if ((rc = mf_store_run_create(e->store, fp, run_id)) != 0) {
		eng_errf(&why, "store: creating run folder: %s", strerror(-rc));
		(void)mf_catalog_fail_shard(c, fp, shard, run_id, -1, why,
					    NULL);
		rc = -EIO;
	} else {
		rc = eng_materialize(e, c, se, shard, run_id, sealed, &why);
		give_back = rc == -ESTALE; /* its deps or inputs changed */
	}
	/* not a failure of the shard: this process cannot compute the
	 * fingerprint (its spec moved on or is gone, its deps or inputs
	 * changed). The claim goes back (absent, nothing recorded), so that
	 * a waiter elsewhere finds out for itself rather than taking this
	 * for a failed computation (EIO). */
	if (give_back)
		(void)mf_catalog_abandon_shard(c, fp, shard, run_id);
	eng_run_set_active(e, run_id, -1);
	if (rc && rc != -EAGAIN && err && !*err) {
		*err = why;
		why = NULL;
	}
	free(why);
	return rc;
}

/* Opens the file of cur (open_committed); once opened the row goes to *rec
 * when rec is not NULL, else it is released. */
static enum claim_result open_committed_rec(struct mf_engine *e,
					    struct mf_catalog *c,
					    struct mf_shard_rec *cur,
					    struct mf_shard_reader **out,
					    struct mf_shard_rec *rec, int *rc)
{
	enum claim_result res = open_committed(e, c, cur, out, rc);
	if (res == CLAIM_OPENED && rec)
		*rec = *cur;
	else
		mf_shard_rec_release(cur);
	return res;
}

/* What the claim loop of one open keeps between its steps. */
struct claim_loop {
	uint64_t waited; /* generation running elsewhere we last waited on; 0:
			    none */
};

/* The attempt this open waited on failed elsewhere: that failure is the
 * answer here too (-EIO with its error), rather than running the stage
 * again; the next open tries again. */
static int waited_failed(const char *fp, uint32_t shard,
			 const struct mf_shard_rec *cur, char **err)
{
	if (cur->error)
		eng_failure_errf(err, cur->error, cur->stderr_tail);
	else
		eng_errf(err, "shard %u of %.12s failed in another process",
			 shard, fp);
	return -EIO;
}

/* Computes the shard just claimed: CLAIM_OPENED with *out (and *rec) on
 * the file it sealed, CLAIM_COMPUTED to read it back, CLAIM_LOST to wait
 * for the owner that took the claim over (the -EAGAIN of
 * compute_claimed), or CLAIM_FAILED. */
static enum claim_result
compute_step(struct mf_engine *e, struct mf_catalog *c, const char *fp,
	     uint32_t shard, const char *run_id, struct mf_shard_reader **out,
	     struct mf_shard_rec *rec, int *rc, char **err)
{
	struct eng_sealed_out sealed = {0};
	int r = compute_claimed(e, c, fp, shard, run_id, &sealed, err);
	if (r == -EAGAIN)
		return CLAIM_LOST;
	if (r)
		return claim_failed(r, rc);
	/* sealed: its own bytes, whatever its commit does meanwhile (one
	 * that failed at once would have this open compute it again) */
	if (sealed.r) {
		*out = sealed.r;
		if (rec)
			*rec = sealed.rec;
		else
			mf_shard_rec_release(&sealed.rec);
		return CLAIM_OPENED;
	}
	return CLAIM_COMPUTED; /* read it through the catalog like anyone */
}

/* The claim of one step of the claim loop, as this process's run me:
 * answers as claim_step. */
static enum claim_result claim_as(struct mf_engine *e, struct mf_catalog *c,
				  const char *fp, uint32_t shard,
				  const struct mf_run_rec *me,
				  struct mf_shard_reader **out,
				  struct mf_shard_rec *rec,
				  struct claim_loop *l, int *rc, char **err)
{
	struct mf_shard_rec cur;
	enum mf_claim got;
	int r = mf_catalog_claim_shard_waited(c, fp, shard, me, mf_now_s(),
					      l->waited, &got, &cur);
	if (r == -ESTALE) {
		eng_run_retire(e, me->run_id);
		return CLAIM_LOST;
	}
	if (r)
		return claim_failed(r, rc);
	if (got == MF_CLAIM_DONE)
		return open_committed_rec(e, c, &cur, out, rec, rc);
	if (got == MF_CLAIM_FAILED)
		r = waited_failed(fp, shard, &cur, err);
	else if (got == MF_CLAIM_WAIT)
		l->waited = cur.generation;
	mf_shard_rec_release(&cur);
	if (got == MF_CLAIM_FAILED)
		return claim_failed(r, rc);
	if (got == MF_CLAIM_WAIT)
		return CLAIM_WAIT;
	return compute_step(e, c, fp, shard, me->run_id, out, rec, rc, err);
}

/* One step of the claim loop: CLAIM_OPENED with *out (and *rec, the row
 * it was opened from), CLAIM_FAILED with *rc, or a reason to go round
 * again. */
static enum claim_result claim_step(struct mf_engine *e, struct mf_catalog *c,
				    const char *fp, uint32_t shard,
				    struct mf_shard_reader **out,
				    struct mf_shard_rec *rec,
				    struct claim_loop *l, int *rc, char **err)
{
	struct mf_shard_rec cur;
	int r = mf_catalog_get_shard(c, fp, shard, &cur);
	if (r == 0)
		eng_known_remember(e, &cur);
	else if (mf_catalog_unreachable(r) &&
		 (eng_known_recall(e, fp, shard, &cur) == 0 ||
		  eng_sealed_recall(e, fp, shard, &cur) == 0))
		r = 0; /* materialized when last seen, or sealed here and
			* committing: served as such */
	if (r)
		return claim_failed(r, rc);
	if (cur.state == MF_SHARD_MATERIALIZED)
		return open_committed_rec(e, c, &cur, out, rec, rc);
	/* sealed here, its commit under way: the same file, not a wait */
	r = eng_sealed_open(e, &cur, out);
	if (r == 0) {
		if (rec)
			*rec = cur;
		else
			mf_shard_rec_release(&cur);
		return CLAIM_OPENED;
	}
	/* a failure answers for a while, growing: not a stage run per open */
	if (r == -ENOENT && eng_backoff_holds(e, &cur))
		r = waited_failed(fp, shard, &cur, err);
	mf_shard_rec_release(&cur);
	/* sealed here but not opened (no descriptor left, say): an error,
	 * never a claim that would compute it again under the same run */
	if (r != -ENOENT)
		return claim_failed(r, rc);

	struct mf_run_rec me;
	r = eng_run_for(e, fp, &me);
	if (r)
		return claim_failed(r, rc);
	enum claim_result res =
	    claim_as(e, c, fp, shard, &me, out, rec, l, rc, err);
	eng_run_unuse(e, me.run_id);
	return res;
}

/* How long the next wait for a computation elsewhere may take. */
struct backoff {
	uint64_t poll_ns; /* polling: sleep, then claim again */
	int woken_ms; /* woken by the catalog: its fallback timeout */
};

/* Waits for the computation l->waited of the shard, running elsewhere:
 * until the catalog says it ended (a notification) or the fallback
 * timeout, where the catalog can tell; else polls with backoff. */
static void wait_elsewhere(struct mf_catalog *c, const char *fp, uint32_t shard,
			   const struct claim_loop *l, struct backoff *b)
{
	int rc = mf_catalog_wait_shard(c, fp, shard, l->waited, b->woken_ms);
	if (rc == -ETIMEDOUT) {
		b->woken_ms = b->woken_ms * 2 > WOKEN_MAX_MS ? WOKEN_MAX_MS
							     : b->woken_ms * 2;
	} else if (rc != 0) { /* no wake-ups here, or none to be had now */
		eng_sleep_ns(b->poll_ns);
		b->poll_ns =
		    b->poll_ns * 2 > WAIT_MAX_NS ? WAIT_MAX_NS : b->poll_ns * 2;
	}
}

static bool flight_cancelled(struct mf_engine *e, const struct flight *f)
{
	pthread_mutex_lock(&e->lock);
	bool c = f->cancelled;
	pthread_mutex_unlock(&e->lock);
	return c;
}

int eng_claim_lead(struct mf_engine *e, const struct flight *f,
		   struct mf_shard_reader **out, struct mf_shard_rec *rec,
		   char **err)
{
	const char *fp = f->fp;
	uint32_t shard = f->shard;
	struct mf_catalog *c = NULL;
	struct backoff b = {WAIT_MIN_NS, WOKEN_MIN_MS};
	uint64_t down_until = 0, down_ns = 0;
	int vanished = 0, lost = 0, rc;
	struct claim_loop l = {0};
	for (;;) {
		rc = c ? 0 : eng_catalog_get(e, &c);
		enum claim_result res = rc
		    ? CLAIM_FAILED
		    : claim_step(e, c, fp, shard, out, rec, &l, &rc, err);
		if (res == CLAIM_FAILED && mf_catalog_unreachable(rc) &&
		    !flight_cancelled(e, f)) {
			/* an outage: wait for the catalog, a bounded time */
			rc =
			    eng_catalog_wait(e, rc, &down_until, &down_ns, err);
			if (rc)
				break;
			continue;
		}
		down_until = down_ns = 0;
		if (res == CLAIM_OPENED || res == CLAIM_FAILED)
			break;
		if (res == CLAIM_WAIT && flight_cancelled(e, f)) {
			eng_errf(err, "shard %u of %.12s: wait cancelled",
				 shard, fp);
			rc = -ECANCELED;
			break;
		}
		if (res == CLAIM_WAIT) {
			wait_elsewhere(c, fp, shard, &l, &b);
		} else if (res == CLAIM_VANISHED && ++vanished > MAX_ATTEMPTS) {
			eng_errf(err,
				 "shard %u of %.12s vanished %d times "
				 "after it was computed",
				 shard, fp, MAX_ATTEMPTS);
			rc = -EIO;
			break;
		} else if (res == CLAIM_LOST && ++lost > MAX_ATTEMPTS) {
			eng_errf(err,
				 "shard %u of %.12s: this process's claim "
				 "was taken %d times",
				 shard, fp, MAX_ATTEMPTS);
			rc = -EIO;
			break;
		}
	}
	eng_catalog_put(e, c);
	return rc;
}
