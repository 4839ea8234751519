/*
 * engine.c - opening shards: the in-process single flight, the catalog
 * claim across processes, the spec registry and this process's runs.
 *
 * Not for: running stages (engine_run.c) or expiry and gc
 * (engine_admin.c).
 */
#include "engine_i.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ATTEMPTS 4 /* recomputations of a vanished shard */
#define HOLDS_REFRESH_S 60 /* holds held again, heartbeats refreshed */
#define WAIT_MIN_NS 5000000ULL /* polling a claim held elsewhere */
#define WAIT_MAX_NS 200000000ULL
/* where the catalog wakes waiters (mf_catalog_wait_shard), the fallback:
 * an owner that dies notifies nobody, and a cancelled open notices */
#define WOKEN_MIN_MS 100
#define WOKEN_MAX_MS 1000

void eng_errf(char **err, const char *fmt, ...)
{
	if (!err || *err)
		return;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(err, fmt, ap) < 0)
		*err = NULL;
	va_end(ap);
}

void eng_note(struct mf_engine *e, const char *fmt, ...)
{
	if (!e->opts.note)
		return;
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	e->opts.note(e->opts.note_arg, buf);
}

static int64_t mono_s(void)
{
	return (int64_t)(mf_mono_ns() / 1000000000ULL);
}

#define SQLITE_PREFIX "sqlite:"

int eng_catalog_location(const struct mf_engine_opts *o,
			 const struct mf_store *st, char **out)
{
	if (o->catalog) {
		*out = strdup(o->catalog);
		return *out ? 0 : -ENOMEM;
	}
	if (asprintf(out, SQLITE_PREFIX "%s/%s", mf_store_path(st),
		     MF_CATALOG_FILE) < 0) {
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

bool mf_engine_catalog_has_password(const char *location)
{
	return mf_catalog_location_has_password(location);
}

const char *mf_engine_catalog_shown(const char *location)
{
	static _Thread_local char shown[PATH_MAX + 64];
	if (strncmp(location, SQLITE_PREFIX, strlen(SQLITE_PREFIX)) == 0)
		return location + strlen(SQLITE_PREFIX);
	mf_catalog_location_shown(location, shown, sizeof(shown));
	return shown;
}

int eng_catalog_get(struct mf_engine *e, struct mf_catalog **out)
{
	for (;;) {
		struct mf_catalog *c = NULL;
		pthread_mutex_lock(&e->lock);
		if (e->n_pool > 0) /* the newest: the oldest age out */
			c = e->pool[--e->n_pool];
		pthread_mutex_unlock(&e->lock);
		if (!c)
			break;
		/* catalog.db deleted or replaced: never answer from the old
		 * file; every idle connection to it goes the same way */
		if (!mf_catalog_moved(c)) {
			*out = c;
			return 0;
		}
		mf_catalog_close(c);
	}
	return mf_engine_catalog_open(e, out);
}

void eng_catalog_put(struct mf_engine *e, struct mf_catalog *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&e->lock);
	bool kept = e->n_pool < ENG_POOL_IDLE_MAX;
	if (kept) {
		e->pool_at[e->n_pool] = mono_s();
		e->pool[e->n_pool++] = c;
	}
	pthread_mutex_unlock(&e->lock);
	if (!kept) /* a burst is over: its connections go */
		mf_catalog_close(c);
}

void eng_catalog_trim(struct mf_engine *e)
{
	struct mf_catalog *old[ENG_POOL_IDLE_MAX];
	size_t n = 0;
	int64_t before = mono_s() - ENG_POOL_IDLE_S;
	pthread_mutex_lock(&e->lock);
	/* the oldest first; one stays, for a reader when the server has no
	 * slot left for a new connection */
	while (n + 1 < e->n_pool && e->pool_at[n] <= before)
		n++;
	memcpy(old, e->pool, n * sizeof(*old));
	memmove(e->pool, e->pool + n, (e->n_pool - n) * sizeof(*e->pool));
	memmove(e->pool_at, e->pool_at + n,
		(e->n_pool - n) * sizeof(*e->pool_at));
	e->n_pool -= n;
	pthread_mutex_unlock(&e->lock);
	for (size_t i = 0; i < n; i++)
		mf_catalog_close(old[i]);
}

int mf_engine_catalog_open(struct mf_engine *e, struct mf_catalog **out)
{
	struct mf_catalog *c;
	int rc = mf_catalog_open(e->catalog_path, e->opts.busy_timeout_ms, &c);
	if (rc)
		return rc;
	rc = eng_catalog_ready(e, c); /* a new catalog gets the store first */
	if (rc) {
		mf_catalog_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

struct mf_store *mf_engine_store(struct mf_engine *e)
{
	return e->store;
}

/* ---- a catalog that cannot be reached ---- */

#define OUTAGE_MIN_NS 100000000ULL /* reconnect backoff: 0.1 s to 2 s */
#define OUTAGE_MAX_NS 2000000000ULL

static void sleep_ns(uint64_t ns);

uint64_t eng_shard_hash(const char *fp, uint32_t index)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (const char *s = fp; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (h ^ index) * 1099511628211ULL;
}

static struct known_shard *known_slot(struct mf_engine *e, const char *fp,
				      uint32_t index)
{
	return &e->known[eng_shard_hash(fp, index) % ENG_KNOWN_SLOTS];
}

void eng_known_remember(struct mf_engine *e, const struct mf_shard_rec *rec)
{
	if (!e->known)
		return;
	pthread_mutex_lock(&e->lock);
	struct known_shard *k = known_slot(e, rec->fp, rec->index);
	if (rec->state == MF_SHARD_MATERIALIZED) {
		memcpy(k->fp, rec->fp, sizeof(k->fp));
		memcpy(k->run_id, rec->run_id, sizeof(k->run_id));
		k->index = rec->index;
		k->chunks = rec->chunks;
		k->raw_bytes = rec->raw_bytes;
		k->stored_bytes = rec->stored_bytes;
		k->generation = rec->generation;
	} else if (k->index == rec->index && strcmp(k->fp, rec->fp) == 0) {
		k->fp[0] = '\0';
	}
	pthread_mutex_unlock(&e->lock);
}

int eng_known_recall(struct mf_engine *e, const char *fp, uint32_t index,
		     struct mf_shard_rec *out)
{
	int rc = -ENOENT;
	if (!e->known)
		return rc;
	pthread_mutex_lock(&e->lock);
	const struct known_shard *k = known_slot(e, fp, index);
	if (k->index == index && strcmp(k->fp, fp) == 0) {
		memset(out, 0, sizeof(*out));
		memcpy(out->fp, k->fp, sizeof(out->fp));
		memcpy(out->run_id, k->run_id, sizeof(out->run_id));
		out->index = index;
		out->state = MF_SHARD_MATERIALIZED;
		out->chunks = k->chunks;
		out->raw_bytes = k->raw_bytes;
		out->stored_bytes = k->stored_bytes;
		out->generation = k->generation;
		out->exit_status = -1;
		out->last_read = mf_now_s(); /* no touch is due */
		rc = 0;
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

bool eng_recorded(struct mf_catalog *c, const char *fp, uint32_t shard,
		  const char *run_id, uint64_t generation)
{
	struct mf_shard_rec cur;
	if (!c || mf_catalog_get_shard(c, fp, shard, &cur) != 0)
		return false;
	bool ours = cur.state == MF_SHARD_MATERIALIZED &&
	    strcmp(cur.run_id, run_id) == 0 &&
	    (generation == 0 || cur.generation == generation);
	mf_shard_rec_release(&cur);
	return ours;
}

int eng_catalog_wait(struct mf_engine *e, int rc, uint64_t *deadline,
		     uint64_t *wait_ns, char **err)
{
	if (!mf_catalog_unreachable(rc))
		return rc;
	uint64_t now = mf_mono_ns();
	if (*deadline == 0)
		*deadline = now + ENG_CATALOG_WAIT_S * 1000000000ULL;
	if (now >= *deadline) {
		const char *why = mf_catalog_last_error();
		/* a full server is no failure of the catalog: try later */
		eng_errf(err,
			 rc == -EUSERS
			     ? "catalog '%s' refused new connections "
			       "for %d s (its max_connections are in "
			       "use; docs/cluster.md): %s"
			     : "catalog '%s' unreachable for %d s: %s",
			 mf_engine_catalog_shown(e->catalog_path),
			 ENG_CATALOG_WAIT_S, why && *why ? why : strerror(-rc));
		return rc == -EUSERS ? rc : -EIO;
	}
	if (*wait_ns == 0 && rc == -EUSERS)
		eng_note(
		    e,
		    "catalog '%s' refuses new connections (max_connections "
		    "in use): waiting up to %d s",
		    mf_engine_catalog_shown(e->catalog_path),
		    ENG_CATALOG_WAIT_S);
	/* every try connects again: the backoff spaces the tries */
	*wait_ns = *wait_ns ? *wait_ns * 2 : OUTAGE_MIN_NS;
	if (*wait_ns > OUTAGE_MAX_NS)
		*wait_ns = OUTAGE_MAX_NS;
	if (now + *wait_ns > *deadline)
		*wait_ns = *deadline - now;
	sleep_ns(*wait_ns);
	return 0;
}

/* ---- heartbeat ---- */

/* Refreshes the rows of every run with work in flight: elsewhere (another
 * host or pid namespace) the heartbeat is all that tells it is alive.
 * Runs every heartbeat_s, work or not. */
static void heartbeat_once(struct mf_engine *e)
{
	typedef char run_id_t[MF_RUN_ID_HEX_LEN + 1];
	run_id_t *ids = NULL;
	size_t n = 0, cap = 0;
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next)
		cap += r->active && !r->retired;
	ids = cap ? calloc(cap, sizeof(*ids)) : NULL;
	for (struct run_entry *r = e->runs; ids && r; r = r->next)
		if (r->active && !r->retired)
			memcpy(ids[n++], r->run_id, sizeof(ids[0]));
	pthread_mutex_unlock(&e->lock);
	/* taking a connection also notices a catalog.db deleted or
	 * replaced (one stat): the new one is indexed, and this engine's
	 * holds put back at once (holds_stale), not at the next refresh */
	struct mf_catalog *c;
	if (eng_catalog_get(e, &c) == 0) {
		for (size_t i = 0; i < n; i++)
			(void)mf_catalog_heartbeat(c, ids[i], mf_now_s());
		eng_catalog_put(e, c);
	}
	free(ids);
}

/* Ends this process's runs idle for ENG_RUN_IDLE_HEARTBEATS heartbeats:
 * their rows say "done" (dead to claims and gc; their committed shards
 * stay), which on PostgreSQL gives their advisory locks back, so a
 * daemon's locks do not grow with every fingerprint it ever computed. */
static void runs_end_idle(struct mf_engine *e)
{
	typedef char run_id_t[MF_RUN_ID_HEX_LEN + 1];
	run_id_t *ids = NULL;
	size_t n = 0, cap = 0;
	int64_t before =
	    mono_s() - (int64_t)e->opts.heartbeat_s * ENG_RUN_IDLE_HEARTBEATS;
	pthread_mutex_lock(&e->lock);
	for (struct run_entry **p = &e->runs; *p;) {
		struct run_entry *r = *p;
		bool over = !r->retired && r->active == 0 && r->users == 0 &&
		    r->idle_since <= before;
		if (over && n == cap) {
			size_t c = cap ? 2 * cap : 8;
			run_id_t *a = realloc(ids, c * sizeof(*a));
			over = a != NULL;
			if (a) {
				ids = a;
				cap = c;
			}
		}
		if (!over) {
			p = &r->next;
			continue;
		}
		memcpy(ids[n++], r->run_id, sizeof(ids[0]));
		*p = r->next;
		free(r);
	}
	pthread_mutex_unlock(&e->lock);
	struct mf_catalog *c;
	if (n > 0 && eng_catalog_get(e, &c) == 0) {
		/* no row (its claims all found the shard done or running
		 * elsewhere): nothing to record, its lock goes all the same */
		for (size_t i = 0; i < n; i++)
			(void)mf_catalog_set_run_state(c, ids[i], "done");
		eng_catalog_put(e, c);
	}
	free(ids);
}

static void *heartbeat_main(void *arg)
{
	struct mf_engine *e = arg;
	pthread_mutex_lock(&e->lock);
	while (!e->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += e->opts.heartbeat_s;
		if (!e->holds_stale)
			pthread_cond_timedwait(&e->hb_cv, &e->lock, &ts);
		if (e->stopping)
			break;
		bool holds = e->holds_stale ||
		    (int64_t)(mf_mono_ns() / 1000000000) - e->holds_refreshed >=
			HOLDS_REFRESH_S;
		e->holds_stale = false;
		pthread_mutex_unlock(&e->lock);
		heartbeat_once(e);
		runs_end_idle(e);
		eng_catalog_trim(e);
		if (holds)
			eng_holds_refresh(e);
		pthread_mutex_lock(&e->lock);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

static int start_heartbeat(struct mf_engine *e)
{
	pthread_condattr_t ca;
	int rc = pthread_condattr_init(&ca);
	if (rc)
		return -rc;
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(&e->hb_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rc)
		return -rc;
	rc = pthread_create(&e->hb_thread, NULL, heartbeat_main, e);
	if (rc) {
		pthread_cond_destroy(&e->hb_cv);
		return -rc;
	}
	e->hb_started = true;
	return 0;
}

static void stop_heartbeat(struct mf_engine *e)
{
	if (!e->hb_started)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_cond_signal(&e->hb_cv);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->hb_thread, NULL);
	pthread_cond_destroy(&e->hb_cv);
	e->hb_started = false;
}

/* ---- open and close ---- */

/* The engine's locks and flight_cv, all or none: a failure undoes the
 * ones made before it, so that sync_ready tells mf_engine_close exactly
 * whether there is anything to destroy. */
static int sync_init(struct mf_engine *e)
{
	int rc = mf_mutex_init(&e->lock);
	if (rc)
		return rc;
	rc = mf_mutex_init(&e->index_lock);
	if (rc)
		goto undo_lock;
	rc = mf_mutex_init(&e->name_lock);
	if (rc)
		goto undo_index_lock;
	rc = -pthread_cond_init(&e->flight_cv, NULL);
	if (rc)
		goto undo_name_lock;
	e->sync_ready = true;
	return 0;
undo_name_lock:
	pthread_mutex_destroy(&e->name_lock);
undo_index_lock:
	pthread_mutex_destroy(&e->index_lock);
undo_lock:
	pthread_mutex_destroy(&e->lock);
	return rc;
}

static void sync_release(struct mf_engine *e)
{
	if (!e->sync_ready)
		return;
	pthread_cond_destroy(&e->flight_cv);
	pthread_mutex_destroy(&e->name_lock);
	pthread_mutex_destroy(&e->index_lock);
	pthread_mutex_destroy(&e->lock);
	e->sync_ready = false;
}

/* Opens the first connection; a server that does not answer (yet) is
 * tried again for o->catalog_wait_s, said once through note. */
static int first_open(struct mf_engine *e, const struct mf_engine_opts *o,
		      struct mf_catalog **c)
{
	uint64_t until = mf_mono_ns() + o->catalog_wait_s * 1000000000ULL;
	uint64_t wait_ns = 500000000ULL;
	for (bool told = false;;) {
		int rc =
		    mf_catalog_open(e->catalog_path, o->busy_timeout_ms, c);
		uint64_t now = mf_mono_ns();
		if (rc == 0 && told)
			eng_note(e, "catalog '%s' answers: starting",
				 mf_engine_catalog_shown(e->catalog_path));
		if (rc == 0 || !mf_catalog_unreachable(rc) || now >= until)
			return rc;
		if (!told) {
			const char *why = mf_catalog_last_error();
			eng_note(e,
				 "catalog '%s' unreachable (%s): trying again "
				 "for up to %u s",
				 mf_engine_catalog_shown(e->catalog_path),
				 why && *why ? why : strerror(-rc),
				 o->catalog_wait_s);
			told = true;
		}
		sleep_ns(now + wait_ns < until ? wait_ns : until - now);
		wait_ns =
		    wait_ns * 2 > 5000000000ULL ? 5000000000ULL : wait_ns * 2;
	}
}

/* The catalog's first connection, into the pool once a new catalog got
 * the store's data. */
static int first_catalog(struct mf_engine *e, const struct mf_engine_opts *o,
			 char **err)
{
	if (eng_catalog_location(o, e->store, &e->catalog_path) != 0)
		return -ENOMEM;
	struct mf_catalog *c;
	int rc = first_open(e, o, &c);
	if (rc) {
		/* a server says why (a refused role, no such database) */
		const char *why = o->catalog ? mf_catalog_last_error() : "";
		eng_errf(err, "catalog '%s': %s%s%s%s",
			 mf_engine_catalog_shown(e->catalog_path),
			 rc == -EPROTO ? "made by a newer matfs"
			     : rc == -EBADMSG
			     ? "not a valid catalog (matctl fsck "
			       "--rebuild rebuilds it from the "
			       "store)"
			     : strerror(-rc),
			 *why ? " (" : "", why, *why ? ")" : "");
		return rc;
	}
	/* before anything registers or reclaims: a new catalog beside a
	 * store that holds data gets that data first */
	rc = eng_catalog_ready(e, c);
	if (rc) {
		eng_errf(err, "catalog '%s': indexing the store's files: %s",
			 mf_engine_catalog_shown(e->catalog_path),
			 strerror(-rc));
		mf_catalog_close(c);
		return rc;
	}
	eng_catalog_put(e, c);
	return 0;
}

static int engine_init(struct mf_engine *e, const struct mf_engine_opts *o,
		       char **err)
{
	e->opts = *o;
	if (e->opts.heartbeat_s == 0)
		e->opts.heartbeat_s = 5;
	e->pid = getpid();
	e->pid_start = mf_proc_start_time(e->pid);
	mf_hostname(e->host, sizeof(e->host));
	(void)mf_boot_id(e->boot_id); /* "" when unknown: judged by heartbeat */
	e->pid_ns = mf_pid_ns();
	int rc = sync_init(e);
	if (rc)
		return rc;
	rc = mf_random_hex(MF_RUN_ID_HEX_LEN / 2, e->holder);
	if (rc)
		return rc;
	/* without it the engine serves nothing during an outage, no more */
	e->known = calloc(ENG_KNOWN_SLOTS, sizeof(*e->known));

	rc = mf_store_open(o->store_dir, true, &e->store);
	if (rc == -EPERM)
		eng_errf(err,
			 "store '%s': refused: it, or a folder above it, is "
			 "another user's or open to others' writes "
			 "(docs/security.md, 'The store')",
			 o->store_dir);
	if (rc) {
		eng_errf(err, "store '%s': %s", o->store_dir, strerror(-rc));
		return rc;
	}
	rc = first_catalog(e, o, err);
	if (rc)
		return rc;
	/* where another host can take a claim over while this process
	 * lives, bytes served before the commit could be no one's: serve
	 * only what the catalog recorded (docs/decisions.md) */
	if (mf_catalog_location_shared(e->catalog_path))
		e->opts.serve_sealed = false;
	if (e->opts.serve_sealed && (rc = eng_commit_start(e)) != 0)
		return rc;
	return start_heartbeat(e);
}

int mf_engine_open(const struct mf_engine_opts *opts, struct mf_engine **out,
		   char **err)
{
	if (!opts || !opts->store_dir)
		return -EINVAL;
	struct mf_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	int rc = engine_init(e, opts, err);
	if (rc) {
		mf_engine_close(e);
		return rc;
	}
	e->opened = true;
	*out = e;
	return 0;
}

/* What this engine served is no longer held: its holds go from the
 * catalog as it is now. Not simply through the pool's first connection:
 * the pool may be empty (connections to a moved catalog.db are dropped
 * when taken, one the pool had no room for is closed), and its first may
 * be to a catalog.db deleted or replaced since. eng_catalog_get passes
 * over those and opens a connection when none is left. */
static void release_holds(struct mf_engine *e)
{
	struct mf_catalog *c;
	if (eng_catalog_get(e, &c) != 0)
		return;
	(void)mf_catalog_release(c, e->holder, NULL);
	eng_catalog_put(e, c);
}

void mf_engine_close(struct mf_engine *e)
{
	if (!e)
		return;
	eng_commit_stop(e); /* the shards served get committed first */
	stop_heartbeat(e); /* before the release: it may hold again */
	if (e->opened)
		release_holds(e);
	for (size_t i = 0; i < e->n_pool; i++)
		mf_catalog_close(e->pool[i]);
	free(e->known);
	while (e->specs) {
		struct spec_entry *s = e->specs;
		e->specs = s->next;
		mf_fingerprint_release(&s->fpr);
		mf_spec_free(s->spec);
		free(s);
	}
	while (e->runs) {
		struct run_entry *r = e->runs;
		e->runs = r->next;
		free(r);
	}
	mf_store_close(e->store);
	free(e->catalog_path);
	sync_release(e);
	free(e);
}

/* ---- this process's runs ---- */

static void run_rec_fill(struct mf_engine *e, const char *fp,
			 const char *run_id, struct mf_run_rec *me)
{
	memset(me, 0, sizeof(*me));
	snprintf(me->run_id, sizeof(me->run_id), "%s", run_id);
	snprintf(me->fp, sizeof(me->fp), "%s", fp);
	snprintf(me->host, sizeof(me->host), "%s", e->host);
	me->pid = (int32_t)e->pid;
	me->pid_start = e->pid_start;
	me->started = me->heartbeat = mf_now_s();
	snprintf(me->state, sizeof(me->state), "active");
	memcpy(me->boot_id, e->boot_id, sizeof(me->boot_id));
	me->pid_ns = e->pid_ns;
}

/* This process's run for fp, found or made under e->lock, so that threads
 * opening shards of fp at once share one run. Its catalog row is added by
 * its first claim (mf_catalog_claim_shard). */
static int run_for(struct mf_engine *e, const char *fp, struct mf_run_rec *me)
{
	int rc = 0;
	pthread_mutex_lock(&e->lock);
	struct run_entry *r = e->runs;
	while (r && (r->retired || strcmp(r->fp, fp) != 0))
		r = r->next;
	if (!r) {
		r = calloc(1, sizeof(*r));
		rc = r ? mf_random_hex(MF_RUN_ID_HEX_LEN / 2, r->run_id)
		       : -ENOMEM;
		if (rc == 0) {
			memcpy(r->fp, fp, sizeof(r->fp));
			r->idle_since = mono_s();
			r->next = e->runs;
			e->runs = r;
		} else {
			free(r);
		}
	}
	if (rc == 0) {
		r->users++; /* not over while a claim uses it (run_unuse) */
		run_rec_fill(e, fp, r->run_id, me);
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

/* The claim that run_for gave run_id to ended. */
static void run_unuse(struct mf_engine *e, const char *run_id)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next) {
		if (strcmp(r->run_id, run_id) == 0) {
			if (--r->users == 0 && r->active == 0)
				r->idle_since = mono_s();
			break;
		}
	}
	pthread_mutex_unlock(&e->lock);
}

/* Unlinks and frees r; e->lock held. */
static void run_free_locked(struct mf_engine *e, struct run_entry *r)
{
	for (struct run_entry **p = &e->runs; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			free(r);
			return;
		}
	}
}

void eng_run_set_active(struct mf_engine *e, const char *run_id, int delta)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next) {
		if (strcmp(r->run_id, run_id) == 0) {
			r->active = (unsigned)((int)r->active + delta);
			if (r->active == 0)
				r->idle_since = mono_s();
			if (r->retired && r->active == 0)
				run_free_locked(e, r);
			break;
		}
	}
	pthread_mutex_unlock(&e->lock);
}

/* The catalog declared run_id dead or done (a claimer elsewhere judged
 * it so): no new claim may use it, so the next run_for makes a new run.
 * Its materializations still in flight finish (their outcome is recorded
 * only where their claim still holds); it is freed after the last. */
static void run_retire(struct mf_engine *e, const char *run_id)
{
	pthread_mutex_lock(&e->lock);
	for (struct run_entry *r = e->runs; r; r = r->next) {
		if (strcmp(r->run_id, run_id) == 0) {
			r->retired = true;
			if (r->active == 0)
				run_free_locked(e, r);
			break;
		}
	}
	pthread_mutex_unlock(&e->lock);
}

/* ---- opening a shard ---- */

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ULL),
			      (long)(ns % 1000000000ULL)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Opens the committed file of a materialized shard; a file that is gone or
 * corrupt sends the shard back to absent (if the row still names that
 * computation) and answers -EAGAIN. */
static int open_committed(struct mf_engine *e, struct mf_catalog *c,
			  const struct mf_shard_rec *rec,
			  struct mf_shard_reader **out)
{
	int rc = mf_shard_reader_open(e->store, rec->fp, rec->run_id,
				      rec->index, out);
	if (rc == -ENOENT || rc == -EBADMSG || rc == -ELOOP) {
		(void)eng_expire_recs(e, c, rec, 1);
		return -EAGAIN;
	}
	if (rc == 0)
		(void)mf_catalog_touch(c, rec->fp, rec->index, mf_now_s());
	return rc;
}

/* Computes a shard this process's run run_id has claimed. 0 once it is
 * committed and recorded; -EAGAIN when the claim was lost meanwhile (the
 * new owner's result is the one to wait for); else an error with *err
 * (may be NULL: the catalog still gets the message). */
static int compute_claimed(struct mf_engine *e, struct mf_catalog *c,
			   const char *fp, uint32_t shard, const char *run_id,
			   char **err)
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
		rc = eng_materialize(e, c, se, shard, run_id, &why);
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

/* Opens the file of cur (open_committed); on success the row goes to *rec
 * when rec is not NULL, else it is released. */
static int open_committed_rec(struct mf_engine *e, struct mf_catalog *c,
			      struct mf_shard_rec *cur,
			      struct mf_shard_reader **out,
			      struct mf_shard_rec *rec)
{
	int rc = open_committed(e, c, cur, out);
	if (rc == 0 && rec)
		*rec = *cur;
	else
		mf_shard_rec_release(cur);
	return rc;
}

/* Why the claim loop goes round again. */
enum again {
	AGAIN_NOW, /* computed here: read it back */
	AGAIN_WAIT, /* a live run elsewhere computes it: wait_elsewhere */
	AGAIN_VANISHED, /* its committed file was gone or corrupt */
	AGAIN_LOST, /* our run was declared dead, or lost its claim */
};

/* What the claim loop of one open keeps between its steps. */
struct claim_loop {
	enum again again; /* why the last step answered -EAGAIN */
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

/* Computes the shard just claimed; 0 never: -EAGAIN to read it back (or to
 * wait for the owner that took the claim over), or an error. */
static int compute_step(struct mf_engine *e, struct mf_catalog *c,
			const char *fp, uint32_t shard, const char *run_id,
			struct claim_loop *l, char **err)
{
	int rc = compute_claimed(e, c, fp, shard, run_id, err);
	if (rc == -EAGAIN) {
		l->again = AGAIN_LOST;
	} else if (rc == 0) { /* read it through the catalog like anyone */
		l->again = AGAIN_NOW;
		rc = -EAGAIN;
	}
	return rc;
}

/* The claim of one step of the claim loop, as this process's run me:
 * answers as claim_step. */
static int claim_as(struct mf_engine *e, struct mf_catalog *c, const char *fp,
		    uint32_t shard, const struct mf_run_rec *me,
		    struct mf_shard_reader **out, struct mf_shard_rec *rec,
		    struct claim_loop *l, char **err)
{
	struct mf_shard_rec cur;
	enum mf_claim got;
	int rc = mf_catalog_claim_shard_waited(c, fp, shard, me, mf_now_s(),
					       l->waited, &got, &cur);
	if (rc == -ESTALE) {
		run_retire(e, me->run_id);
		l->again = AGAIN_LOST;
		return -EAGAIN;
	}
	if (rc)
		return rc;
	if (got == MF_CLAIM_DONE)
		return open_committed_rec(e, c, &cur, out, rec);
	if (got == MF_CLAIM_FAILED)
		rc = waited_failed(fp, shard, &cur, err);
	else if (got == MF_CLAIM_WAIT)
		l->waited = cur.generation;
	mf_shard_rec_release(&cur);
	if (got == MF_CLAIM_FAILED)
		return rc;
	if (got == MF_CLAIM_WAIT) {
		l->again = AGAIN_WAIT;
		return -EAGAIN;
	}
	return compute_step(e, c, fp, shard, me->run_id, l, err);
}

/* One step of the claim loop. Returns 0 with *out (and *rec, the row it
 * was opened from), -EAGAIN to go round again for the reason in
 * l->again, or an error. */
static int claim_step(struct mf_engine *e, struct mf_catalog *c, const char *fp,
		      uint32_t shard, struct mf_shard_reader **out,
		      struct mf_shard_rec *rec, struct claim_loop *l,
		      char **err)
{
	struct mf_shard_rec cur;
	int rc = mf_catalog_get_shard(c, fp, shard, &cur);
	if (rc == 0)
		eng_known_remember(e, &cur);
	else if (mf_catalog_unreachable(rc) &&
		 (eng_known_recall(e, fp, shard, &cur) == 0 ||
		  eng_sealed_recall(e, fp, shard, &cur) == 0))
		rc = 0; /* materialized when last seen, or sealed here and
			 * committing: served as such */
	if (rc)
		return rc;
	l->again = AGAIN_VANISHED; /* what -EAGAIN from open_committed means */
	if (cur.state == MF_SHARD_MATERIALIZED)
		return open_committed_rec(e, c, &cur, out, rec);
	/* sealed here, its commit under way: the same file, not a wait */
	rc = eng_sealed_open(e, &cur, out);
	if (rc == 0) {
		if (rec)
			*rec = cur;
		else
			mf_shard_rec_release(&cur);
		return 0;
	}
	/* a failure answers for a while, growing: not a stage run per open */
	if (rc == -ENOENT && eng_backoff_holds(e, &cur))
		rc = waited_failed(fp, shard, &cur, err);
	mf_shard_rec_release(&cur);
	/* sealed here but not opened (no descriptor left, say): an error,
	 * never a claim that would compute it again under the same run */
	if (rc != -ENOENT)
		return rc;

	struct mf_run_rec me;
	rc = run_for(e, fp, &me);
	if (rc)
		return rc;
	rc = claim_as(e, c, fp, shard, &me, out, rec, l, err);
	run_unuse(e, me.run_id);
	return rc;
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
		sleep_ns(b->poll_ns);
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

static int lead(struct mf_engine *e, const struct flight *f,
		struct mf_shard_reader **out, struct mf_shard_rec *rec,
		char **err)
{
	const char *fp = f->fp;
	uint32_t shard = f->shard;
	struct mf_catalog *c = NULL;
	struct backoff b = {WAIT_MIN_NS, WOKEN_MIN_MS};
	uint64_t down_until = 0, down_ns = 0;
	int vanished = 0, lost = 0, rc;
	struct claim_loop l = {AGAIN_NOW, 0};
	for (;;) {
		rc = c ? 0 : eng_catalog_get(e, &c);
		rc = rc ? rc : claim_step(e, c, fp, shard, out, rec, &l, err);
		if (mf_catalog_unreachable(rc) && !flight_cancelled(e, f)) {
			/* an outage: wait for the catalog, a bounded time */
			rc =
			    eng_catalog_wait(e, rc, &down_until, &down_ns, err);
			if (rc)
				break;
			continue;
		}
		down_until = down_ns = 0;
		if (rc != -EAGAIN)
			break;
		enum again again = l.again;
		if (again == AGAIN_WAIT && flight_cancelled(e, f)) {
			eng_errf(err, "shard %u of %.12s: wait cancelled",
				 shard, fp);
			rc = -ECANCELED;
			break;
		}
		if (again == AGAIN_WAIT) {
			wait_elsewhere(c, fp, shard, &l, &b);
		} else if (again == AGAIN_VANISHED &&
			   ++vanished > MAX_ATTEMPTS) {
			eng_errf(err,
				 "shard %u of %.12s vanished %d times "
				 "after it was computed",
				 shard, fp, MAX_ATTEMPTS);
			rc = -EIO;
			break;
		} else if (again == AGAIN_LOST && ++lost > MAX_ATTEMPTS) {
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

static struct flight *flight_find(struct mf_engine *e, const char *fp,
				  uint32_t shard)
{
	for (struct flight *f = e->flights; f; f = f->next)
		if (f->shard == shard && strcmp(f->fp, fp) == 0 && !f->done)
			return f;
	return NULL;
}

static void flight_unlink(struct mf_engine *e, struct flight *f)
{
	for (struct flight **p = &e->flights; *p; p = &(*p)->next) {
		if (*p == f) {
			*p = f->next;
			return;
		}
	}
}

/* Waits for another thread's attempt. Returns its rc (and a copy of its
 * error); 0 means it succeeded and the caller should look again. */
static int follow(struct mf_engine *e, struct flight *f, char **err)
{
	f->waiters++;
	while (!f->done)
		pthread_cond_wait(&e->flight_cv, &e->lock);
	int rc = f->rc;
	if (rc && f->err && err && !*err)
		*err = strdup(f->err);
	if (--f->waiters == 0) {
		free(f->err);
		free(f);
	}
	return rc;
}

int mf_engine_open_shard(struct mf_engine *e, const char *fp, uint32_t shard,
			 struct mf_shard_reader **out, char **err)
{
	return eng_open_shard_rec(e, fp, shard, out, NULL, err);
}

int eng_open_shard_rec(struct mf_engine *e, const char *fp, uint32_t shard,
		       struct mf_shard_reader **out, struct mf_shard_rec *rec,
		       char **err)
{
	if (!mf_is_hex(fp, MF_FP_HEX_LEN))
		return -EINVAL;
	for (;;) {
		pthread_mutex_lock(&e->lock);
		struct flight *f = flight_find(e, fp, shard);
		if (f) {
			int rc = follow(e, f, err);
			pthread_mutex_unlock(&e->lock);
			if (rc)
				return rc;
			continue;
		}
		f = calloc(1, sizeof(*f));
		if (!f) {
			pthread_mutex_unlock(&e->lock);
			return -ENOMEM;
		}
		memcpy(f->fp, fp, sizeof(f->fp));
		f->shard = shard;
		f->cancelled = e->cancel_all;
		f->next = e->flights;
		e->flights = f;
		pthread_mutex_unlock(&e->lock);

		int rc = lead(e, f, out, rec, err);

		pthread_mutex_lock(&e->lock);
		flight_unlink(e, f);
		f->done = true;
		f->rc = rc;
		if (rc && err && *err)
			f->err = strdup(*err);
		bool orphan = f->waiters == 0;
		pthread_cond_broadcast(&e->flight_cv);
		pthread_mutex_unlock(&e->lock);
		if (orphan) {
			free(f->err);
			free(f);
		}
		return rc;
	}
}

/* ---- cancelling ---- */

/* Caller holds e->lock. */
static void flight_cancel(struct flight *f)
{
	f->cancelled = true;
	mf_job_stop(f->job);
}

void mf_engine_cancel(struct mf_engine *e, const char *fp, uint32_t shard)
{
	pthread_mutex_lock(&e->lock);
	struct flight *f = flight_find(e, fp, shard);
	if (f)
		flight_cancel(f);
	pthread_mutex_unlock(&e->lock);
}

void mf_engine_cancel_all(struct mf_engine *e)
{
	pthread_mutex_lock(&e->lock);
	e->cancel_all = true;
	for (struct flight *f = e->flights; f; f = f->next)
		flight_cancel(f);
	pthread_mutex_unlock(&e->lock);
}

/* The session field of /proc/PID/stat, or 0. */
static pid_t session_of(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *rest = strrchr(buf, ')'); /* after comm, which may hold
						 anything */
	int sid = 0;
	if (!rest || sscanf(rest + 1, " %*c %*d %*d %d", &sid) != 1)
		return 0;
	return (pid_t)sid;
}

bool mf_engine_runs_process(struct mf_engine *e, pid_t pid)
{
	pid_t sid = pid > 0 ? session_of(pid) : 0;
	if (sid <= 0)
		return false;
	bool ours = false;
	pthread_mutex_lock(&e->lock);
	for (struct flight *f = e->flights; f && !ours; f = f->next)
		ours = mf_job_has_session(f->job, sid);
	pthread_mutex_unlock(&e->lock);
	return ours;
}

/* The job is stopped only while registered here, and it is unregistered
 * before mf_job_finish reaps its processes: so no id it signals is ever
 * another process's. */
bool eng_flight_job(struct mf_engine *e, const char *fp, uint32_t shard,
		    const struct mf_job *job)
{
	pthread_mutex_lock(&e->lock);
	struct flight *f = flight_find(e, fp, shard);
	bool cancelled = f ? f->cancelled : e->cancel_all;
	if (f)
		f->job = job;
	pthread_mutex_unlock(&e->lock);
	return cancelled;
}
