/*
 * engine.c - an engine's life: opening it (its locks, the store, the first
 * catalog connection, the commit and heartbeat threads) and closing it,
 * with the helpers every part of the engine shares (messages, clocks).
 *
 * Not for: the connection pool (engine_pool.c), the outage cache
 * (engine_outage.c), the heartbeat (engine_heartbeat.c), this process's
 * runs (engine_run_registry.c), the claim loop (engine_claim.c), single
 * flight (engine_flight.c) or cancelling (engine_cancel.c).
 */
#include "engine_i.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

int64_t eng_mono_s(void)
{
	return (int64_t)(mf_mono_ns() / 1000000000ULL);
}

void eng_sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ULL),
			      (long)(ns % 1000000000ULL)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

struct mf_store *mf_engine_store(struct mf_engine *e)
{
	return e->store;
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
	rc = mf_mutex_init(&e->orders_lock);
	if (rc)
		goto undo_name_lock;
	rc = mf_mutex_init(&e->sizes_lock);
	if (rc)
		goto undo_orders_lock;
	rc = -pthread_cond_init(&e->flight_cv, NULL);
	if (rc)
		goto undo_sizes_lock;
	e->sync_ready = true;
	return 0;
undo_sizes_lock:
	pthread_mutex_destroy(&e->sizes_lock);
undo_orders_lock:
	pthread_mutex_destroy(&e->orders_lock);
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
	pthread_mutex_destroy(&e->sizes_lock);
	pthread_mutex_destroy(&e->orders_lock);
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
		eng_sleep_ns(now + wait_ns < until ? wait_ns : until - now);
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
	return eng_heartbeat_start(e);
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
	eng_heartbeat_stop(e); /* before the release: it may hold again */
	if (e->opened)
		release_holds(e);
	for (size_t i = 0; i < e->n_pool; i++)
		mf_catalog_close(e->pool[i]);
	free(e->known);
	eng_orders_free(e);
	eng_size_readers_free(e);
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
