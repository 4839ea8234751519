/*
 * mf_catalog.h - the catalog of one store: snapshots, runs and shards, and
 * the claim that makes materialization single-flight across processes and
 * hosts.
 *
 * The API is in operations the engine needs (claim, complete, fail, reset,
 * abandon, heartbeat, list, expire-if-unchanged, hold and release); how a
 * backend stores them stays behind it (catalog_backend.h). A location
 * names the backend: a plain path or "sqlite:PATH" is the SQLite catalog,
 * STORE/catalog.db in WAL mode; its schema version is in PRAGMA
 * user_version and migrates forward on open. Every write runs in BEGIN
 * IMMEDIATE with a busy timeout, so SQLITE_BUSY reaches a caller only
 * after the timeout, as -EBUSY. "postgresql://..." or "postgres://..."
 * (a libpq URI) and "postgresql:KEY=VALUE ..." (libpq's keyword string)
 * name a PostgreSQL catalog shared by many hosts (pg_*.c): tables in the
 * connection's search_path, a schema_version table migrated forward, row
 * locks waited for up to the busy timeout (lock_timeout), liveness from
 * the database (mf_catalog_judge_run).
 *
 * Not for: the store's files (mf_snapshot.h) or running stages. Never
 * prints. A handle (one connection) belongs to one thread at a time; open
 * one per thread, or serialize calls.
 *
 * Errors: 0 or a negative errno: -ENOENT (no such row), -EBUSY (timeout),
 * -EBADMSG (corrupt database; mf_corrupt_reason() says which check), -ESTALE
 * (the row changed hands), -EIO. A catalog on a server that cannot be
 * reached says so apart, so that a caller may wait for it: -ENOTCONN (the
 * connection was lost and could not be made again), -ECONNREFUSED (no
 * server answered), -ETIMEDOUT (the connection attempt timed out),
 * -EUSERS (the server refused a new connection: its max_connections are
 * all in use); mf_catalog_unreachable tells them.
 */
#ifndef MF_CATALOG_H
#define MF_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mf_util.h"

#define MF_CATALOG_SCHEMA_VERSION 7

enum mf_shard_state {
	MF_SHARD_ABSENT = 0,
	MF_SHARD_RUNNING = 1,
	MF_SHARD_MATERIALIZED = 2,
	MF_SHARD_FAILED = 3,
};
/* "absent", "running", "materialized", "failed" */
/* Whether rc (an error of this API) means the catalog's server could not
 * be reached (-ENOTCONN, -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH,
 * -ENETUNREACH, -EUSERS: no connection slot left): an outage, not an
 * answer. */
bool mf_catalog_unreachable(int rc);
const char *mf_shard_state_name(enum mf_shard_state s);

struct mf_snapshot_rec {
	char fp[MF_FP_HEX_LEN + 1];
	char name[65];
	uint32_t shards;
	char *spec_path; /* absolute; owned by the record */
	char *compression; /* "zstd:3"; owned */
	char *suffix; /* "" when none; owned */
	uint64_t chunk_size;
	int64_t expire_after; /* seconds; -1: never */
	int64_t pending_expiry;
	uint32_t keep; /* 0: no limit */
	int64_t created; /* unix seconds */
	int64_t last_read; /* unix seconds; 0: never read */
	/* the uid of the spec that recorded the row first, when has_owner
	 * (unset: a fixed key's, one from before schema 7, fsck --rebuild's):
	 * a put of another owner's is refused (mf_catalog_put_snapshot) */
	bool has_owner;
	uid_t owner;
	/* filled by get/list from the shards table: */
	uint32_t materialized;
	uint64_t raw_bytes, stored_bytes;
};
void mf_snapshot_rec_release(struct mf_snapshot_rec *r);

struct mf_run_rec {
	char run_id[MF_RUN_ID_HEX_LEN + 1];
	char fp[MF_FP_HEX_LEN + 1];
	char host[256];
	int32_t pid;
	uint64_t pid_start; /* mf_proc_start_time(pid) */
	int64_t started; /* unix seconds */
	int64_t heartbeat; /* unix seconds */
	char state[16]; /* "active", "done", "dead" */
	/* where pid means something (mf_boot_id, mf_pid_ns); "" and 0 when
	 * unknown, as in rows written before schema version 4 */
	char boot_id[MF_BOOT_ID_LEN + 1];
	uint64_t pid_ns;
};

/*
 * Whether run r is alive at now, the one rule for every judge of runs (the
 * claim, gc, fsck): a run whose state is not "active" is dead. A run of
 * this host, this boot and this process's pid namespace (host, boot_id and
 * pid_ns all equal to this process's) lives while its process does (pid
 * and pid_start). Any other run - another host, another container with
 * the same hostname, another boot, or a row that does not say - lives
 * while its heartbeat is no older than pending_expiry, or
 * MF_RUN_STALE_MIN_S when that is shorter (six heartbeats of an engine:
 * a spec's short pending_expiry must not make a live run look dead
 * between two); its pid is never looked up here, where it may name
 * another process or none.
 */
#define MF_RUN_STALE_MIN_S 30
struct mf_catalog;
bool mf_catalog_run_alive(const struct mf_run_rec *r, int64_t now,
			  int64_t pending_expiry);

/*
 * Whether run (or hold) r, as read from c, is alive, as c's claims judge
 * it: the rule every judge outside the catalog (gc, fsck) uses. SQLite:
 * mf_catalog_run_alive(r, now, pending_expiry). PostgreSQL: the process
 * of a run or holder keeps a session-level advisory lock for it while it
 * lives; r is alive when active, its advisory lock is held by some
 * session (c could not take it), and its heartbeat, written by the
 * server's clock, is no older than pending_expiry (at least
 * MF_RUN_STALE_MIN_S) by the server's clock; now is not used, no pid is
 * looked up. 0 or -errno.
 */
int mf_catalog_judge_run(struct mf_catalog *c, const struct mf_run_rec *r,
			 int64_t now, int64_t pending_expiry, bool *alive);

struct mf_shard_rec {
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t index;
	enum mf_shard_state state;
	char run_id[MF_RUN_ID_HEX_LEN + 1]; /* "" when none */
	uint64_t raw_bytes, stored_bytes;
	uint32_t chunks;
	int32_t exit_status; /* wait status of the failing stage; -1: none */
	char *error; /* one line, or NULL; owned */
	char *
	    stderr_tail; /* last 4 KiB of the failing stage's stderr, or NULL */
	int64_t last_read;
	uint32_t attempts; /* materializations started */
	/* the computation the row describes: a random nonzero 63-bit number
	 * each claim sets anew (kept by complete and fail), unique across
	 * processes, runs and catalogs; a file's readers compare it, never
	 * run_id and attempts, which repeat. 0: absent, or none recorded. */
	uint64_t generation;
};
void mf_shard_rec_release(struct mf_shard_rec *r);

struct mf_catalog;

/*
 * Opens (creating and migrating) the catalog at location; busy_timeout_ms
 * <= 0 means the default of 10 s. A location is a plain path or
 * "sqlite:PATH" (the SQLite catalog at PATH), or a PostgreSQL location
 * (above); "SCHEME://..." of another scheme names a backend this build
 * does not have: -EPROTONOSUPPORT (a caller says "catalog 'LOCATION':
 * Protocol not supported"). A relative path that itself reads
 * "SCHEME://..." must be written "./PATH" or "sqlite:PATH".
 * -EPROTO: written by a newer schema (left untouched); -EBADMSG: not a
 * database; -ENOENT: no such folder (PostgreSQL: no such database or
 * schema); -EINVAL: an empty path; -ECONNREFUSED: no server answered;
 * -EACCES: the server refused the role. mf_catalog_last_error() says
 * what the server said.
 */
int mf_catalog_open(const char *location, int busy_timeout_ms,
		    struct mf_catalog **out);
void mf_catalog_close(struct mf_catalog *c);

/*
 * The integrity check of the catalog at location, for a catalog that may be
 * unusable: it opens nothing that could create or change it. Each problem
 * found goes to report (may be NULL) with where, the file (or location) it
 * is about, and detail, one line; for SQLite: a missing, empty or
 * non-regular file, a file that is no SQLite database, and each line of
 * PRAGMA integrity_check that is not "ok". *usable (may be NULL) says
 * whether the catalog can be opened and read. Returns 0 when the check ran,
 * whatever it found; -EBUSY (timeout), -EACCES, -EIO and
 * -EPROTONOSUPPORT when it could not run.
 */
typedef void (*mf_catalog_problem_fn)(void *arg, const char *where,
				      const char *detail);
int mf_catalog_check(const char *location, int busy_timeout_ms,
		     mf_catalog_problem_fn report, void *arg, bool *usable);

/*
 * True when the file c has open is no longer the one at its path: deleted,
 * or replaced by another file (another inode). Such a handle still works,
 * on the old file, which no other process opens any more: close it and
 * open the path again. One stat(2); false when SQLite cannot tell.
 */
bool mf_catalog_moved(struct mf_catalog *c);

/*
 * The message of the calling thread's last failed catalog call, one line:
 * the server's for PostgreSQL (a failed connection, a refused role, an
 * error of a statement), sqlite3_errmsg for SQLite; "" when none. Borrowed
 * until the thread's next catalog call.
 */
const char *mf_catalog_last_error(void);

/* Whether location carries a password (a PostgreSQL URI's user:password@,
 * or password=): a caller that got it from argv warns, since passwords
 * belong in ~/.pgpass, PGPASSFILE or PGPASSWORD. */
bool mf_catalog_location_has_password(const char *location);
/* Whether the catalog at location is shared by processes on several
 * hosts, where a claim of a live process can be taken over: its run's
 * liveness is a database session that a cut link, a server restart or
 * pg_terminate_backend ends while the process lives on (PostgreSQL). On
 * SQLite a run lives while its process does. */
bool mf_catalog_location_shared(const char *location);
/* location as a message may show it: a PostgreSQL password (user:PW@,
 * password=PW) written as "***"; cut to fit buf (len bytes). */
void mf_catalog_location_shown(const char *location, char *buf, size_t len);
/* As mf_catalog_location_shown, but a SQLite catalog named "sqlite:PATH"
 * shown as its PATH: how a message names the catalog to a user. */
void mf_catalog_location_told(const char *location, char *buf, size_t len);
/* The location of the SQLite catalog file at path, named as such, so that
 * a path that reads as a location ("sqlite:s", "a://b") stays a file
 * (caller frees *out). 0 or -ENOMEM. */
int mf_catalog_location_of_file(const char *path, char **out);

/*
 * Makes every call on c until mf_catalog_end one serializable unit, a
 * BEGIN IMMEDIATE transaction for SQLite (waiting up to the busy timeout):
 * other connections see all of its writes or none, and none of theirs
 * lands between its calls (catalog_backend.h says what a backend must
 * guarantee). Each call's own transaction becomes a savepoint
 * inside it, so a call that fails undoes only its own writes and the
 * caller decides. -EBUSY when c is already inside one (no nesting) or the
 * lock did not come within the timeout.
 * mf_catalog_end commits when rc is 0, else rolls back; it returns rc, or
 * the commit's error (-EIO when SQLite already rolled everything back).
 */
int mf_catalog_begin(struct mf_catalog *c);
int mf_catalog_end(struct mf_catalog *c, int rc);

/*
 * The index mark: set once the store's files have been recorded in this
 * catalog (the engine sets it after indexing a new or lost catalog). A new
 * catalog, or one made before the mark existed, has it unset. Kept in the
 * database header (PRAGMA application_id), apart from the schema version.
 */
int mf_catalog_indexed(struct mf_catalog *c, bool *out);
int mf_catalog_set_indexed(struct mf_catalog *c);

/* Inserts or updates a snapshot and creates its missing shard rows (absent).
 * Keeps created and last_read of an existing row, and its owner: -EEXIST,
 * nothing written, when the row has an owner and rec another one. */
int mf_catalog_put_snapshot(struct mf_catalog *c,
			    const struct mf_snapshot_rec *rec);
/* Fills out (release with mf_snapshot_rec_release); -ENOENT. */
int mf_catalog_get_snapshot(struct mf_catalog *c, const char *fp,
			    struct mf_snapshot_rec *out);
/* The fingerprint most recently registered under name; -ENOENT. */
int mf_catalog_find_name(struct mf_catalog *c, const char *name,
			 char fp[MF_FP_HEX_LEN + 1]);
/* Every snapshot, ordered by name then created. Caller releases each and
 * frees the array. */
int mf_catalog_list_snapshots(struct mf_catalog *c,
			      struct mf_snapshot_rec **out, size_t *n);
/* Deletes a snapshot with its shards, runs and holds rows, in one
 * transaction and only if every shard is absent and no live process holds
 * it: -ENOTEMPTY (nothing deleted) when a shard is running, materialized or
 * failed, which a caller that decided from an earlier listing
 * (mf_catalog_expire_shards) did not see, or when a hold's process is
 * alive (mf_catalog_run_alive, with the snapshot's pending_expiry). *runs (may be
 * NULL; caller frees) receives the run rows it deleted, whose folders are
 * now the caller's to remove. -ENOENT: no such snapshot. */
int mf_catalog_delete_snapshot(struct mf_catalog *c, const char *fp,
			       struct mf_run_rec **runs, size_t *nruns);

/* -EEXIST: run_id is taken; -ENOENT: fp is no snapshot. The others answer
 * -ENOENT for an unknown run_id; list_runs with fp NULL lists every run
 * (caller frees the array). */
int mf_catalog_add_run(struct mf_catalog *c, const struct mf_run_rec *run);
int mf_catalog_get_run(struct mf_catalog *c, const char *run_id,
		       struct mf_run_rec *out);
int mf_catalog_list_runs(struct mf_catalog *c, const char *fp,
			 struct mf_run_rec **out, size_t *n);
int mf_catalog_heartbeat(struct mf_catalog *c, const char *run_id, int64_t now);
int mf_catalog_set_run_state(struct mf_catalog *c, const char *run_id,
			     const char *state);
int mf_catalog_delete_run(struct mf_catalog *c, const char *run_id);

/*
 * Holds. A process that serves a snapshot - it has a spec registered that
 * yields the fingerprint, so a mount shows it and reads compute it - holds
 * it: mf_catalog_delete_snapshot keeps the row of a snapshot that a live
 * process holds, whoever expires it (matctl rm, another daemon's expiry).
 * A hold is described by a run record: run_id is the holder's id (32 hex
 * digits, one per process and catalog), fp the snapshot, and host,
 * boot_id, pid_ns, pid, pid_start and heartbeat judge its liveness as
 * mf_catalog_run_alive does (state and started are not stored). A dead
 * holder's holds count for nothing; mf_catalog_prune_holds deletes them.
 */
/* Records or refreshes (heartbeat) hold h; -ENOENT: fp is no snapshot. */
int mf_catalog_hold(struct mf_catalog *c, const struct mf_run_rec *h);
/* Deletes holder's hold on fp, or every hold of holder when fp is NULL. */
int mf_catalog_release(struct mf_catalog *c, const char *holder,
		       const char *fp);
/* Every hold on fp (fp NULL: every hold), state "active". Caller frees. */
int mf_catalog_list_holds(struct mf_catalog *c, const char *fp,
			  struct mf_run_rec **out, size_t *n);
/* Sets the heartbeat of every hold of holder to now. */
int mf_catalog_heartbeat_holds(struct mf_catalog *c, const char *holder,
			       int64_t now);
/* Deletes the holds of holders that are not alive at now; *pruned (may be
 * NULL) receives how many. */
int mf_catalog_prune_holds(struct mf_catalog *c, int64_t now, size_t *pruned);

/* Fills out (release with mf_shard_rec_release); -ENOENT. */
int mf_catalog_get_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			 struct mf_shard_rec *out);
/* All shards of fp in index order; caller releases each, frees array. */
int mf_catalog_list_shards(struct mf_catalog *c, const char *fp,
			   struct mf_shard_rec **out, size_t *n);

enum mf_claim {
	MF_CLAIM_MINE = 0, /* the caller's run now owns the shard: compute it */
	MF_CLAIM_DONE = 1, /* already materialized: read it */
	MF_CLAIM_WAIT = 2, /* a live run is computing it: wait and ask again */
	MF_CLAIM_FAILED = 3, /* the attempt the caller waited on failed: its
				error is the caller's answer (only from
				mf_catalog_claim_shard_waited) */
};

/*
 * In one BEGIN IMMEDIATE transaction: if shard `index` of fp is
 * materialized, answers DONE; if absent or failed, or running under a dead
 * run, gives it to run `me` (state running, attempts + 1, a fresh
 * generation, error cleared; the dead run is marked "dead") and answers
 * MINE; otherwise WAIT.
 * A shard running under `me` itself is given to it again (MINE): a run
 * must not claim one shard twice at once, so such a row can only be left
 * by an attempt that ended without recording its outcome.
 * The owner is dead as mf_catalog_run_alive judges it, with the
 * snapshot's pending_expiry. *cur (may be NULL) receives the row as it is after the call;
 * release it. -ENOENT if the shard is unknown. me->fp must be fp (-EINVAL);
 * me's run row is added when missing (its heartbeat raised to
 * me->heartbeat when it exists), and a run marked dead or done gets
 * -ESTALE instead of a shard.
 */
int mf_catalog_claim_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			   const struct mf_run_rec *me, int64_t now,
			   enum mf_claim *result, struct mf_shard_rec *cur);

/*
 * As mf_catalog_claim_shard, for a caller that was told WAIT while the
 * computation `waited` of the shard ran (cur->generation of that answer;
 * 0: it did not wait): if that very computation has failed since, answers FAILED with the
 * failed row in *cur and changes nothing. So one failed attempt reaches
 * everyone who waited on it, in any process, instead of each running the
 * stage again; the next claim that did not wait on it tries again.
 */
int mf_catalog_claim_shard_waited(struct mf_catalog *c, const char *fp,
				  uint32_t index, const struct mf_run_rec *me,
				  int64_t now, uint64_t waited,
				  enum mf_claim *result,
				  struct mf_shard_rec *cur);

/* Marks a shard owned by run_id materialized with its sizes. -ESTALE if the
 * shard is no longer running under run_id (nothing changes then). */
int mf_catalog_complete_shard(struct mf_catalog *c, const char *fp,
			      uint32_t index, const char *run_id,
			      uint64_t raw_bytes, uint64_t stored_bytes,
			      uint32_t chunks);
/* Marks a shard owned by run_id failed with its error (error and
 * stderr_tail may be NULL; only the tail's last 4 KiB are kept, and every
 * byte of either that is not valid UTF-8 is stored as '?'). -ESTALE as
 * above. */
int mf_catalog_fail_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			  const char *run_id, int32_t exit_status,
			  const char *error, const char *stderr_tail);
/* Back to absent (rm of a shard, a corrupt chunk), generation 0. If run_id
 * is not NULL, only when the shard is still materialized or failed under
 * that run, whatever the attempt (-ESTALE otherwise); the engine expires
 * through mf_catalog_expire_shards, which checks the generation too. */
int mf_catalog_reset_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			   const char *run_id);
/* Gives up a claim nobody wants any more: a shard running under run_id
 * goes back to absent (generation 0) with no error recorded, so the next
 * open claims it afresh. -ESTALE if it is not running under run_id. */
int mf_catalog_abandon_shard(struct mf_catalog *c, const char *fp,
			     uint32_t index, const char *run_id);
/* Expiry of what a caller listed: in one transaction, each recs[i] that
 * is materialized or failed goes back to absent if its row is still in
 * that state as the same computation (its generation); expired[i] says
 * whether it
 * did (running and absent ones never do). A row that changed since the
 * listing - claimed, or expired and computed again, even by the same
 * run - is left alone, and so is its file: the caller removes the files
 * of the shards expired[] names, and no other. On error nothing changed
 * and expired[] is all false. */
int mf_catalog_expire_shards(struct mf_catalog *c,
			     const struct mf_shard_rec *recs, size_t n,
			     bool *expired);
/*
 * Waits, up to timeout_ms (> 0), for the computation `generation` of
 * shard index of fp (as a WAIT answer's cur->generation gave it) to end:
 * 0 once the row is no longer running as that generation (at once when
 * it already is not) or the catalog was told the shard changed; the
 * caller claims again. -ETIMEDOUT when the time passed without: claim
 * again too, since an owner that dies tells nobody. -EOPNOTSUPP, at
 * once, when c cannot be told of changes made elsewhere (SQLite), or
 * when the environment has MATFS_CATALOG_NOTIFY=0 (a switch for
 * measuring the polling it replaces): the caller polls. Any other
 * error (the backend could not listen): poll.
 * PostgreSQL: complete, fail, abandon and reset send NOTIFY in their
 * own transaction, so on commit only; one listening connection per
 * process and location, apart from every handle, is made at the first
 * wait and closed with the last handle that waited.
 */
int mf_catalog_wait_shard(struct mf_catalog *c, const char *fp, uint32_t index,
			  uint64_t generation, int timeout_ms);

/* The time by the clock the catalog compares its stamps with (created,
 * last_read, heartbeats): the database server's on PostgreSQL, where
 * every host's stamps are written by it, so that a host whose clock is
 * wrong neither ages nor expires what others made; this host's on
 * SQLite. 0 or -errno (an outage: mf_catalog_unreachable). */
int mf_catalog_now(struct mf_catalog *c, int64_t *out);

/* Sets the last-read time of a shard and its snapshot. */
int mf_catalog_touch(struct mf_catalog *c, const char *fp, uint32_t index,
		     int64_t now);

/*
 * Totals over the catalog's life, which every process that computes
 * shards adds to: materializations started (stages about to run) and
 * failed (a failure recorded), and the milliseconds they took, stages
 * and storing their output. Never reset by expiry or rm; a rebuilt
 * catalog starts from zero.
 */
struct mf_catalog_totals {
	uint64_t started, failed, stage_ms;
	uint64_t running; /* read only: shards whose state is running now */
};
/* Adds d's started, failed and stage_ms (d->running is ignored) in one
 * transaction. */
int mf_catalog_add_totals(struct mf_catalog *c,
			  const struct mf_catalog_totals *d);
/* The totals in *out (written only on success). */
int mf_catalog_get_totals(struct mf_catalog *c, struct mf_catalog_totals *out);

#endif
