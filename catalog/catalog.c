/*
 * catalog.c - the catalog API of mf_catalog.h over its backends: the
 * location names a backend (catalog_location.c), each public function checks
 * its arguments and dispatches through the backend's table. What is the
 * same for every backend lives here: state names, record release, the one
 * rule of run liveness, record validity, the nesting of a caller's unit
 * and the cut of a failed stage's stderr tail.
 *
 * Not for: the location syntax (catalog_location.c), SQL or any other
 * storage (sqlite_*.c, the SQLite backend; pg_*.c, PostgreSQL).
 */
#include "catalog_backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CAT_DEFAULT_BUSY_MS 10000
#define STDERR_TAIL_MAX 4096

static const char *const state_names[] = {
    [MF_SHARD_ABSENT] = "absent",
    [MF_SHARD_RUNNING] = "running",
    [MF_SHARD_MATERIALIZED] = "materialized",
    [MF_SHARD_FAILED] = "failed",
};

const char *mf_shard_state_name(enum mf_shard_state s)
{
	if ((unsigned)s >= sizeof(state_names) / sizeof(state_names[0]))
		return "unknown";
	return state_names[s];
}

int cat_state_parse(const char *s, enum mf_shard_state *out)
{
	for (size_t i = 0; i < sizeof(state_names) / sizeof(state_names[0]);
	     i++) {
		if (s && strcmp(s, state_names[i]) == 0) {
			*out = (enum mf_shard_state)i;
			return 0;
		}
	}
	return MF_CORRUPT("shard state");
}

bool mf_catalog_unreachable(int rc)
{
	return rc == -ENOTCONN || rc == -ECONNREFUSED || rc == -ETIMEDOUT ||
	    rc == -EHOSTUNREACH || rc == -ENETUNREACH || rc == -EUSERS;
}

void mf_snapshot_rec_release(struct mf_snapshot_rec *r)
{
	if (!r)
		return;
	free(r->spec_path);
	free(r->compression);
	free(r->suffix);
	r->spec_path = r->compression = r->suffix = NULL;
}

void mf_shard_rec_release(struct mf_shard_rec *r)
{
	if (!r)
		return;
	free(r->error);
	free(r->stderr_tail);
	r->error = r->stderr_tail = NULL;
}

/* Whether r ran where this process can look its pid up: the same host,
 * boot and pid namespace. A row that does not say is not. */
static bool run_is_local(const struct mf_run_rec *r)
{
	char host[256], boot[MF_BOOT_ID_LEN + 1];
	if (!r->boot_id[0] || r->pid_ns == 0)
		return false;
	mf_hostname(host, sizeof(host));
	return strcmp(r->host, host) == 0 && mf_boot_id(boot) == 0 &&
	    strcmp(r->boot_id, boot) == 0 && r->pid_ns == mf_pid_ns();
}

bool cat_run_is_self(const struct mf_run_rec *r)
{
	return run_is_local(r) && r->pid == (int32_t)getpid() &&
	    r->pid_start == mf_proc_start_time(getpid());
}

enum cat_claim_step cat_claim_step(const struct mf_shard_rec *row,
				   const struct mf_run_rec *me, uint64_t waited)
{
	if (row->state == MF_SHARD_MATERIALIZED)
		return CAT_CLAIM_DONE;
	if (row->state == MF_SHARD_FAILED && waited != 0 &&
	    row->generation == waited)
		return CAT_CLAIM_FAILED;
	if (row->state == MF_SHARD_RUNNING &&
	    strcmp(row->run_id, me->run_id) != 0)
		return CAT_CLAIM_JUDGE;
	return CAT_CLAIM_TAKE;
}

int cat_new_generation(int64_t *out)
{
	char hex[17];
	uint64_t v = 0;
	while (v == 0) {
		int rc = mf_random_hex(8, hex);
		if (rc)
			return rc;
		v = strtoull(hex, NULL, 16) & (uint64_t)INT64_MAX;
	}
	*out = (int64_t)v;
	return 0;
}

bool mf_catalog_run_alive(const struct mf_run_rec *r, int64_t now,
			  int64_t pending_expiry)
{
	if (!r || strcmp(r->state, "active") != 0)
		return false;
	if (run_is_local(r))
		return mf_process_alive((pid_t)r->pid, r->pid_start);
	if (pending_expiry < MF_RUN_STALE_MIN_S)
		pending_expiry = MF_RUN_STALE_MIN_S;
	return now - r->heartbeat <= pending_expiry;
}

/* ---- record checks ---- */

bool cat_run_state_valid(const char *state)
{
	return state &&
	    (strcmp(state, "active") == 0 || strcmp(state, "done") == 0 ||
	     strcmp(state, "dead") == 0);
}

bool cat_hold_valid(const struct mf_run_rec *h)
{
	return h && mf_is_hex(h->run_id, MF_RUN_ID_HEX_LEN) &&
	    mf_is_hex(h->fp, MF_FP_HEX_LEN) && h->host[0] &&
	    memchr(h->host, '\0', sizeof(h->host)) &&
	    memchr(h->boot_id, '\0', sizeof(h->boot_id));
}

bool cat_run_valid(const struct mf_run_rec *r)
{
	return cat_hold_valid(r) && memchr(r->state, '\0', sizeof(r->state)) &&
	    cat_run_state_valid(r->state);
}

bool cat_snapshot_valid(const struct mf_snapshot_rec *r)
{
	return r && mf_is_hex(r->fp, MF_FP_HEX_LEN) && r->name[0] &&
	    memchr(r->name, '\0', sizeof(r->name)) && r->shards > 0 &&
	    r->spec_path && r->compression;
}

static int busy_or_default(int busy_timeout_ms)
{
	return busy_timeout_ms > 0 ? busy_timeout_ms : CAT_DEFAULT_BUSY_MS;
}

int mf_catalog_open(const char *location, int busy_timeout_ms,
		    struct mf_catalog **out)
{
	const struct mf_catalog_backend *be;
	const char *target;
	if (!location || !out)
		return -EINVAL;
	int rc = cat_backend_find(location, &be, &target);
	if (rc)
		return rc;
	struct mf_catalog *c;
	rc = be->open(target, busy_or_default(busy_timeout_ms), &c);
	if (rc)
		return rc;
	c->be = be;
	c->outer = false;
	*out = c;
	return 0;
}

void mf_catalog_close(struct mf_catalog *c)
{
	if (c)
		c->be->close(c);
}

int mf_catalog_check(const char *location, int busy_timeout_ms,
		     mf_catalog_problem_fn report, void *arg, bool *usable)
{
	const struct mf_catalog_backend *be;
	const char *target;
	bool ok = false;
	if (!location)
		return -EINVAL;
	int rc = cat_backend_find(location, &be, &target);
	if (!rc)
		rc = be->check(target, busy_or_default(busy_timeout_ms), report,
			       arg, &ok);
	if (usable)
		*usable = rc == 0 && ok;
	return rc;
}

static _Thread_local char last_error[512];

void mf_catalog_set_last_error(const char *m)
{
	snprintf(last_error, sizeof(last_error), "%s", m ? m : "");
	/* one line: libpq ends its messages with a newline */
	last_error[strcspn(last_error, "\n")] = '\0';
}

const char *mf_catalog_last_error(void)
{
	return last_error;
}

int mf_catalog_judge_run(struct mf_catalog *c, const struct mf_run_rec *r,
			 int64_t now, int64_t pending_expiry, bool *alive)
{
	if (!c || !r || !alive)
		return -EINVAL;
	return c->be->judge(c, r, now, pending_expiry, alive);
}

bool mf_catalog_moved(struct mf_catalog *c)
{
	return c && c->be->moved(c);
}

/* ---- the caller's unit ---- */

int mf_catalog_begin(struct mf_catalog *c)
{
	if (!c)
		return -EINVAL;
	if (c->outer)
		return -EBUSY;
	int rc = c->be->begin(c);
	c->outer = rc == 0;
	return rc;
}

int mf_catalog_end(struct mf_catalog *c, int rc)
{
	if (!c || !c->outer)
		return rc ? rc : -EINVAL;
	c->outer = false;
	return c->be->end(c, rc);
}

int mf_catalog_indexed(struct mf_catalog *c, bool *out)
{
	if (!c || !out)
		return -EINVAL;
	return c->be->indexed(c, out);
}

int mf_catalog_set_indexed(struct mf_catalog *c)
{
	if (!c)
		return -EINVAL;
	return c->be->set_indexed(c);
}

/* ---- snapshots ---- */

int mf_catalog_put_snapshot(struct mf_catalog *c,
			    const struct mf_snapshot_rec *rec)
{
	if (!c || !cat_snapshot_valid(rec))
		return -EINVAL;
	return c->be->put_snapshot(c, rec);
}

int mf_catalog_get_snapshot(struct mf_catalog *c, const char *fp,
			    struct mf_snapshot_rec *out)
{
	if (!c || !fp || !out)
		return -EINVAL;
	return c->be->get_snapshot(c, fp, out);
}

int mf_catalog_find_name(struct mf_catalog *c, const char *name,
			 char fp[MF_FP_HEX_LEN + 1])
{
	if (!c || !name || !fp)
		return -EINVAL;
	return c->be->find_name(c, name, fp);
}

int mf_catalog_list_snapshots(struct mf_catalog *c,
			      struct mf_snapshot_rec **out, size_t *n)
{
	if (!c || !out || !n)
		return -EINVAL;
	return c->be->list_snapshots(c, out, n);
}

int mf_catalog_delete_snapshot(struct mf_catalog *c, const char *fp,
			       struct mf_run_rec **runs, size_t *nruns)
{
	if (!c || !fp || (runs && !nruns))
		return -EINVAL;
	return c->be->delete_snapshot(c, fp, runs, nruns);
}

/* ---- runs ---- */

int mf_catalog_add_run(struct mf_catalog *c, const struct mf_run_rec *run)
{
	if (!c || !cat_run_valid(run))
		return -EINVAL;
	return c->be->add_run(c, run);
}

int mf_catalog_get_run(struct mf_catalog *c, const char *run_id,
		       struct mf_run_rec *out)
{
	if (!c || !run_id || !out)
		return -EINVAL;
	return c->be->get_run(c, run_id, out);
}

int mf_catalog_list_runs(struct mf_catalog *c, const char *fp,
			 struct mf_run_rec **out, size_t *n)
{
	if (!c || !out || !n)
		return -EINVAL;
	return c->be->list_runs(c, fp, out, n);
}

int mf_catalog_heartbeat(struct mf_catalog *c, const char *run_id, int64_t now)
{
	if (!c || !run_id)
		return -EINVAL;
	return c->be->heartbeat(c, run_id, now);
}

int mf_catalog_set_run_state(struct mf_catalog *c, const char *run_id,
			     const char *state)
{
	if (!c || !run_id || !cat_run_state_valid(state))
		return -EINVAL;
	return c->be->set_run_state(c, run_id, state);
}

int mf_catalog_delete_run(struct mf_catalog *c, const char *run_id)
{
	if (!c || !run_id)
		return -EINVAL;
	return c->be->delete_run(c, run_id);
}

/* ---- holds ---- */

int mf_catalog_hold(struct mf_catalog *c, const struct mf_run_rec *h)
{
	if (!c || !cat_hold_valid(h))
		return -EINVAL;
	return c->be->hold(c, h);
}

int mf_catalog_release(struct mf_catalog *c, const char *holder, const char *fp)
{
	if (!c || !mf_is_hex(holder, MF_RUN_ID_HEX_LEN) ||
	    (fp && !mf_is_hex(fp, MF_FP_HEX_LEN)))
		return -EINVAL;
	return c->be->release(c, holder, fp);
}

int mf_catalog_list_holds(struct mf_catalog *c, const char *fp,
			  struct mf_run_rec **out, size_t *n)
{
	if (!c || !out || !n)
		return -EINVAL;
	return c->be->list_holds(c, fp, out, n);
}

int mf_catalog_heartbeat_holds(struct mf_catalog *c, const char *holder,
			       int64_t now)
{
	if (!c || !mf_is_hex(holder, MF_RUN_ID_HEX_LEN))
		return -EINVAL;
	return c->be->heartbeat_holds(c, holder, now);
}

int mf_catalog_prune_holds(struct mf_catalog *c, int64_t now, size_t *pruned)
{
	if (!c)
		return -EINVAL;
	size_t k = 0;
	int rc = c->be->prune_holds(c, now, &k);
	if (pruned)
		*pruned = rc ? 0 : k;
	return rc;
}

/* ---- shards ---- */

int mf_catalog_get_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			 struct mf_shard_rec *out)
{
	if (!c || !fp || !out)
		return -EINVAL;
	return c->be->get_shard(c, fp, index, out);
}

int mf_catalog_list_shards(struct mf_catalog *c, const char *fp,
			   struct mf_shard_rec **out, size_t *n)
{
	if (!c || !fp || !out || !n)
		return -EINVAL;
	return c->be->list_shards(c, fp, out, n);
}

int mf_catalog_claim_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			   const struct mf_run_rec *me, int64_t now,
			   enum mf_claim *result, struct mf_shard_rec *cur)
{
	return mf_catalog_claim_shard_waited(c, fp, index, me, now, 0, result,
					     cur);
}

int mf_catalog_claim_shard_waited(struct mf_catalog *c, const char *fp,
				  uint32_t index, const struct mf_run_rec *me,
				  int64_t now, uint64_t waited,
				  enum mf_claim *result,
				  struct mf_shard_rec *cur)
{
	if (!c || !fp || !me || !result || strcmp(me->fp, fp) != 0)
		return -EINVAL;
	return c->be->claim(c, fp, index, me, now, waited, result, cur);
}

int mf_catalog_complete_shard(struct mf_catalog *c, const char *fp,
			      uint32_t index, const char *run_id,
			      uint64_t raw_bytes, uint64_t stored_bytes,
			      uint32_t chunks)
{
	if (!c || !fp || !run_id)
		return -EINVAL;
	return c->be->complete(c, fp, index, run_id, raw_bytes, stored_bytes,
			       chunks);
}

/* The last STDERR_TAIL_MAX bytes of s, not starting inside a UTF-8
 * sequence. */
static const char *stderr_tail(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n <= STDERR_TAIL_MAX)
		return s;
	const char *p = s + n - STDERR_TAIL_MAX;
	while (((unsigned char)*p & 0xc0) == 0x80)
		p++;
	return p;
}

int mf_catalog_fail_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			  const char *run_id, int32_t exit_status,
			  const char *error, const char *stderr_tail_text)
{
	if (!c || !fp || !run_id)
		return -EINVAL;
	/* stored as valid UTF-8 on every backend (PostgreSQL refuses other
	 * text): what a stage printed may be any bytes */
	char *err = error ? strdup(error) : NULL;
	char *tail =
	    stderr_tail_text ? strdup(stderr_tail(stderr_tail_text)) : NULL;
	int rc = (error && !err) || (stderr_tail_text && !tail) ? -ENOMEM : 0;
	if (rc == 0) {
		if (err)
			mf_utf8_clean(err);
		if (tail)
			mf_utf8_clean(tail);
		rc = c->be->fail(c, fp, index, run_id, exit_status, err, tail);
	}
	free(err);
	free(tail);
	return rc;
}

int mf_catalog_reset_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			   const char *run_id)
{
	if (!c || !fp)
		return -EINVAL;
	return c->be->reset(c, fp, index, run_id);
}

int mf_catalog_abandon_shard(struct mf_catalog *c, const char *fp,
			     uint32_t index, const char *run_id)
{
	if (!c || !fp || !run_id)
		return -EINVAL;
	return c->be->abandon(c, fp, index, run_id);
}

static bool expirable(const struct mf_shard_rec *r)
{
	return r->state == MF_SHARD_MATERIALIZED || r->state == MF_SHARD_FAILED;
}

int mf_catalog_expire_shards(struct mf_catalog *c,
			     const struct mf_shard_rec *recs, size_t n,
			     bool *expired)
{
	if (!c || (n > 0 && (!recs || !expired)))
		return -EINVAL;
	size_t todo = 0;
	for (size_t i = 0; i < n; i++) {
		expired[i] = false;
		todo += expirable(&recs[i]);
	}
	if (todo == 0) /* nothing to write: no transaction */
		return 0;
	int rc = c->be->expire(c, recs, n, expired);
	if (rc)
		memset(expired, 0, n * sizeof(*expired));
	return rc;
}

int mf_catalog_now(struct mf_catalog *c, int64_t *out)
{
	if (!c || !out)
		return -EINVAL;
	if (!c->be->now) {
		*out = mf_now_s();
		return 0;
	}
	return c->be->now(c, out);
}

int mf_catalog_touch(struct mf_catalog *c, const char *fp, uint32_t index,
		     int64_t now)
{
	if (!c || !fp)
		return -EINVAL;
	return c->be->touch(c, fp, index, now);
}

/* MATFS_CATALOG_NOTIFY=0 (or "off", "no"): no backend is woken, every
 * waiter polls, as a baseline to measure wake-ups against. */
static bool notify_off(void)
{
	const char *v = getenv("MATFS_CATALOG_NOTIFY");
	return v &&
	    (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 ||
	     strcmp(v, "no") == 0);
}

int mf_catalog_wait_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			  uint64_t generation, int timeout_ms)
{
	if (!c || !fp || timeout_ms <= 0)
		return -EINVAL;
	if (!c->be->wait || notify_off())
		return -EOPNOTSUPP;
	return c->be->wait(c, fp, index, generation, timeout_ms);
}

int mf_catalog_add_totals(struct mf_catalog *c,
			  const struct mf_catalog_totals *d)
{
	if (!c || !d)
		return -EINVAL;
	if (d->started > INT64_MAX || d->failed > INT64_MAX ||
	    d->stage_ms > INT64_MAX)
		return -EOVERFLOW;
	if (!d->started && !d->failed && !d->stage_ms)
		return 0; /* nothing to write: no transaction */
	return c->be->add_totals(c, d);
}

int mf_catalog_get_totals(struct mf_catalog *c, struct mf_catalog_totals *out)
{
	if (!c || !out)
		return -EINVAL;
	return c->be->get_totals(c, out);
}
