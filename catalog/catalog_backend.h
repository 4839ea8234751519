/*
 * catalog_backend.h - private to catalog/: the table of operations a
 * catalog backend provides behind mf_catalog.h (as SQLite's VFS or a
 * decompressor table), the handle every backend's connection starts
 * with, and the checks and rules catalog.c applies before dispatching.
 *
 * catalog.c parses the location, checks every argument and answers what
 * is the same for every backend (mf_catalog_run_alive, the claim's rule
 * cat_claim_step, state names, record release, begin/end nesting, a
 * failure's text: the stderr tail's length, valid UTF-8); an
 * operation is called only with the arguments its public function
 * accepts, so a backend checks none of them again. Two backends fill
 * the table: SQLite (sqlite_*.c) and PostgreSQL (pg_*.c); each passes
 * tests/catalog/test_catalog_contract.c run with its location.
 *
 * Not for: anything outside catalog/; callers see only mf_catalog.h.
 */
#ifndef MF_CATALOG_BACKEND_H
#define MF_CATALOG_BACKEND_H

#include "mf_catalog.h"

struct mf_catalog_backend;

/*
 * The handle. A backend's connection struct starts with it (its first
 * member), so a backend converts the pointer its operations receive
 * back to its own type.
 */
struct mf_catalog {
	const struct mf_catalog_backend *be;
	/* inside mf_catalog_begin..mf_catalog_end: each operation's own
	 * transaction becomes a savepoint inside the caller's (the backend
	 * reads it; catalog.c sets it) */
	bool outer;
};

/*
 * Every operation returns 0 or a negative errno, writes its outputs only
 * on success, and runs in a transaction of its own: other connections see
 * all of its writes or none, and a failure leaves nothing changed
 * (inside a caller's unit, a savepoint: a failing operation undoes only
 * its own writes). Errors every operation may return: -EBUSY (another
 * connection kept the catalog past the busy timeout, or a conflict the
 * backend could not serialize), -EBADMSG (stored data malformed: return
 * MF_CORRUPT("reason")), -ENOMEM, -ENOSPC, -EACCES, -EROFS, -EIO.
 * Liveness is judged by the backend's judge, never otherwise.
 */
struct mf_catalog_backend {
	const char *name; /* the location's scheme: "sqlite" */
	/* a location "NAME://..." (and "ALIAS://...") is a URI the backend
	 * takes whole as its target; NULL: none */
	const char *alias;

	/* Opens (creating and migrating) the catalog at target, the
	 * location without its scheme; busy_ms > 0. -EPROTO: a newer schema
	 * (left untouched); -EBADMSG: not a catalog; -ENOENT: no such
	 * place. *out is the backend's connection, closed by close. */
	int (*open)(const char *target, int busy_ms, struct mf_catalog **out);
	void (*close)(struct mf_catalog *c);
	/* The integrity check of mf_catalog_check, on target without opening
	 * a connection that could create or change anything. */
	int (*check)(const char *target, int busy_ms,
		     mf_catalog_problem_fn report, void *arg, bool *usable);
	/* Whether the catalog c opened is no longer the one at its location
	 * (deleted or replaced); false when the backend cannot tell or the
	 * question has no meaning for it. */
	bool (*moved)(struct mf_catalog *c);

	/*
	 * The caller's unit (mf_catalog_begin/end). begin starts a unit that
	 * is SERIALIZABLE against every other connection: the operations
	 * the caller makes on c until end behave as if no other
	 * connection's transaction ran between begin and end (SQLite: BEGIN
	 * IMMEDIATE, one writer at a time; a server database: a serializable
	 * transaction, or a lock taken at begin). begin waits up to the busy
	 * timeout (-EBUSY). end(c, rc) commits when rc is 0, else rolls back
	 * everything since begin; it returns rc, or the commit's error. A
	 * conflict detected at any point inside the unit (a serialization
	 * failure) rolls the whole unit back and answers -EBUSY from that
	 * operation or from end, which the caller treats as the timeout.
	 * catalog.c refuses nesting; c->outer is true between the two.
	 */
	int (*begin)(struct mf_catalog *c);
	int (*end)(struct mf_catalog *c, int rc);

	/* The index mark (mf_catalog_indexed); kept apart from the schema
	 * version, never touched by a migration. */
	int (*indexed)(struct mf_catalog *c, bool *out);
	int (*set_indexed)(struct mf_catalog *c);

	/* Whether run (or hold) r, as its row reads, is alive
	 * (mf_catalog_judge_run): SQLite applies mf_catalog_run_alive at
	 * now; a server database judges by what it knows of r's session
	 * and its own clock. Every judge of a backend (the claim, holds)
	 * judges so. */
	int (*judge)(struct mf_catalog *c, const struct mf_run_rec *r,
		     int64_t now, int64_t pending_expiry, bool *alive);

	/* Snapshots, as their public functions in mf_catalog.h. rec is
	 * valid (cat_snapshot_valid). delete_snapshot: atomically checks
	 * that every shard is absent and no live holder holds fp
	 * (-ENOTEMPTY, nothing deleted), deletes the dead holds and the
	 * rows; runs is NULL when the caller does not want them. */
	int (*put_snapshot)(struct mf_catalog *c,
			    const struct mf_snapshot_rec *rec);
	int (*get_snapshot)(struct mf_catalog *c, const char *fp,
			    struct mf_snapshot_rec *out);
	int (*find_name)(struct mf_catalog *c, const char *name,
			 char fp[MF_FP_HEX_LEN + 1]);
	int (*list_snapshots)(struct mf_catalog *c,
			      struct mf_snapshot_rec **out, size_t *n);
	int (*delete_snapshot)(struct mf_catalog *c, const char *fp,
			       struct mf_run_rec **runs, size_t *nruns);

	/* Runs. run is valid (cat_run_valid); state is "active", "done" or
	 * "dead"; -ENOENT for an unknown run_id, -EEXIST for a taken one. */
	int (*add_run)(struct mf_catalog *c, const struct mf_run_rec *run);
	int (*get_run)(struct mf_catalog *c, const char *run_id,
		       struct mf_run_rec *out);
	int (*list_runs)(struct mf_catalog *c, const char *fp,
			 struct mf_run_rec **out, size_t *n);
	int (*heartbeat)(struct mf_catalog *c, const char *run_id, int64_t now);
	int (*set_run_state)(struct mf_catalog *c, const char *run_id,
			     const char *state);
	int (*delete_run)(struct mf_catalog *c, const char *run_id);

	/* Holds. h is valid (cat_hold_valid); holder and fp (may be NULL
	 * where the public function allows) are well-formed hex. */
	int (*hold)(struct mf_catalog *c, const struct mf_run_rec *h);
	int (*release)(struct mf_catalog *c, const char *holder,
		       const char *fp);
	int (*list_holds)(struct mf_catalog *c, const char *fp,
			  struct mf_run_rec **out, size_t *n);
	int (*heartbeat_holds)(struct mf_catalog *c, const char *holder,
			       int64_t now);
	int (*prune_holds)(struct mf_catalog *c, int64_t now, size_t *pruned);

	int (*get_shard)(struct mf_catalog *c, const char *fp, uint32_t index,
			 struct mf_shard_rec *out);
	int (*list_shards)(struct mf_catalog *c, const char *fp,
			   struct mf_shard_rec **out, size_t *n);
	/*
	 * The claim, mf_catalog_claim_shard_waited: the read of the row, the
	 * liveness of its owner and the write that gives it to me happen in
	 * ONE serializable transaction, so two connections never both get
	 * MF_CLAIM_MINE for one computation. me->fp equals fp. -ENOENT: no
	 * such shard; -ESTALE: me's run row is "dead" or "done" (no shard
	 * given). *cur is the row after the decision, when cur is not NULL.
	 */
	int (*claim)(struct mf_catalog *c, const char *fp, uint32_t index,
		     const struct mf_run_rec *me, int64_t now, uint64_t waited,
		     enum mf_claim *result, struct mf_shard_rec *cur);
	/*
	 * The outcome of a claim: each is one conditional write, "if the
	 * shard is still running under run_id" (reset with a run_id: still
	 * materialized or failed under it). A lost claim - the row was taken
	 * over, reset or expired meanwhile - changes nothing and answers
	 * -ESTALE; -ENOENT when the shard does not exist. error and
	 * stderr_tail come valid UTF-8 from catalog.c, the tail cut to its
	 * last 4 KiB. abandon and reset
	 * leave the row absent with generation 0.
	 */
	int (*complete)(struct mf_catalog *c, const char *fp, uint32_t index,
			const char *run_id, uint64_t raw_bytes,
			uint64_t stored_bytes, uint32_t chunks);
	int (*fail)(struct mf_catalog *c, const char *fp, uint32_t index,
		    const char *run_id, int32_t exit_status, const char *error,
		    const char *stderr_tail);
	int (*reset)(struct mf_catalog *c, const char *fp, uint32_t index,
		     const char *run_id);
	int (*abandon)(struct mf_catalog *c, const char *fp, uint32_t index,
		       const char *run_id);
	/* Expire-if-unchanged, mf_catalog_expire_shards: in one transaction,
	 * each materialized or failed recs[i] whose row still has that state
	 * and generation goes absent; expired[] (all false on entry) says
	 * which. On error nothing changed. Called only when at least one
	 * rec is materialized or failed. */
	int (*expire)(struct mf_catalog *c, const struct mf_shard_rec *recs,
		      size_t n, bool *expired);
	int (*touch)(struct mf_catalog *c, const char *fp, uint32_t index,
		     int64_t now);
	/* The clock the catalog's stamps (created, last_read, heartbeats)
	 * are written by, unix seconds; NULL: this host's (mf_now_s). A
	 * server database answers its own, and then also stamps created
	 * and last_read by it, whatever now a caller passes. */
	int (*now)(struct mf_catalog *c, int64_t *out);
	/*
	 * Wake-ups (mf_catalog_wait_shard), for a backend that can tell
	 * another connection of a change: NULL for one that cannot (the
	 * caller polls). Returns 0 once the row of shard index is no
	 * longer running as generation (at once when it already is not)
	 * or the backend was told it changed, which every complete, fail,
	 * abandon and reset of the shard must tell on its commit, on any
	 * connection in any process or host; -ETIMEDOUT after timeout_ms
	 * (> 0) without. Race-free: a change committed after the call
	 * began is never missed. Blocks the calling thread only.
	 */
	int (*wait)(struct mf_catalog *c, const char *fp, uint32_t index,
		    uint64_t generation, int timeout_ms);
	/* Totals (mf_catalog_add_totals): add adds d's started, failed and
	 * stage_ms to the stored counters in one transaction (d->running is
	 * not stored); get reads them, with running the shards whose state
	 * is running now, and 0 for a counter never added to. */
	int (*add_totals)(struct mf_catalog *c,
			  const struct mf_catalog_totals *d);
	int (*get_totals)(struct mf_catalog *c, struct mf_catalog_totals *out);
};

/* The SQLite backend (sqlite_db.c) and the PostgreSQL one (pg_conn.c). */
extern const struct mf_catalog_backend cat_sqlite_backend;
extern const struct mf_catalog_backend cat_pg_backend;

/* Whether libpq's reading of target (a URI or KEY=VALUE string) carries
 * a password; false when it does not parse (pg_conn.c). */
bool cat_pg_has_password(const char *target);
/* target with any password (user:PASSWORD@, password=...) written as
 * "***", cut to fit buf (len bytes). */
void cat_pg_shown(const char *target, char *buf, size_t len);

/*
 * The backend a location names and the rest of it, the target, in
 * *target (borrowed from location): "sqlite:PATH" and a plain path (no
 * "SCHEME://") name SQLite with PATH; "postgresql://..." and
 * "postgres://..." name PostgreSQL with the whole URI, and
 * "postgresql:KEY=VALUE ..." with the KEY=VALUE string. -EPROTONOSUPPORT
 * for "SCHEME://..." of any other scheme; -EINVAL for an empty target.
 */
int cat_backend_find(const char *location, const struct mf_catalog_backend **be,
		     const char **target);

/* Checks shared by every backend, made by catalog.c before dispatching. */
bool cat_run_state_valid(const char *state);
bool cat_run_valid(const struct mf_run_rec *r);
bool cat_hold_valid(const struct mf_run_rec *h);
bool cat_snapshot_valid(const struct mf_snapshot_rec *r);
/* Whether r is a run or hold of this very process: this host, boot and
 * pid namespace, and this pid with its start time. */
bool cat_run_is_self(const struct mf_run_rec *r);

/* What a claim does with the shard's row as it stands, the same on every
 * backend: DONE for a materialized shard; FAILED for a failure of the
 * computation the caller waited on (waited, its generation); JUDGE for a
 * shard another run is computing (the caller takes it only when that run
 * is dead, else the claim waits); TAKE otherwise (absent, failed before
 * the wait, or running under the caller's own run: an earlier attempt
 * of it ended without recording its outcome). */
enum cat_claim_step {
	CAT_CLAIM_DONE,
	CAT_CLAIM_FAILED,
	CAT_CLAIM_JUDGE,
	CAT_CLAIM_TAKE,
};
enum cat_claim_step cat_claim_step(const struct mf_shard_rec *row,
				   const struct mf_run_rec *me,
				   uint64_t waited);
/* A fresh computation generation: random, nonzero, 63 bits (it fits
 * both backends' signed 64-bit integers). */
int cat_new_generation(int64_t *out);
/* Remembers the server's (or library's) message of the calling thread's
 * last failed catalog call, for mf_catalog_last_error; m may be NULL. */
void mf_catalog_set_last_error(const char *m);

/* The state's name (mf_shard_state_name) back to the state;
 * MF_CORRUPT("shard state") for text that names no state. */
int cat_state_parse(const char *s, enum mf_shard_state *out);

#endif
