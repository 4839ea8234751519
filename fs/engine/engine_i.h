/*
 * engine_i.h - the engine's private state, shared by engine.c (opening
 * and closing), engine_pool.c, engine_outage.c, engine_heartbeat.c,
 * engine_run_registry.c (this process's runs), engine_claim.c,
 * engine_flight.c, engine_cancel.c, engine_run.c (materializing one shard),
 * engine_admin.c (expiry, gc, verify), engine_read.c (the front ends'
 * reads) and engine_expiry.c (the expiry policy).
 */
#ifndef MF_ENGINE_I_H
#define MF_ENGINE_I_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "mf_catalog.h"
#include "mf_engine.h"
#include "mf_pipeline.h"
#include "mf_snapshot.h"

/* A spec known to this engine, by fingerprint. The leader of a flight on
 * its fingerprint borrows spec and fpr without holding the lock
 * (eng_spec_for), so mf_engine_unregister frees an entry only while no
 * flight of its fingerprint is in e->flights; the others go with the
 * engine. */
struct spec_entry {
	struct spec_entry *next;
	struct mf_spec *spec;
	struct mf_fingerprint fpr;
	bool registered; /* by mf_engine_register; false when only reloaded
			    from the catalog to compute a shard */
};

/* This process's run for one fingerprint, created on first claim. One
 * per fingerprint is current; retired ones (declared dead by the catalog)
 * stay until their last materialization in flight ends. A run idle for
 * ENG_RUN_IDLE_HEARTBEATS heartbeats is over: recorded "done" (so a
 * PostgreSQL catalog's advisory lock for it goes), and the next claim of
 * its fingerprint makes a new run. */
#define ENG_RUN_IDLE_HEARTBEATS 6
struct run_entry {
	struct run_entry *next;
	char fp[MF_FP_HEX_LEN + 1];
	char run_id[MF_RUN_ID_HEX_LEN + 1];
	unsigned active; /* materializations in flight under this run */
	unsigned users; /* opens between run_for and the end of their claim */
	int64_t idle_since; /* mono seconds: no user and nothing active */
	bool retired; /* never handed to a new claim */
};

/* A shard this engine saw materialized, by the catalog's last answer: what
 * it serves while the catalog cannot be reached (eng_known_*). */
struct known_shard {
	char fp[MF_FP_HEX_LEN + 1]; /* "" for an empty slot */
	char run_id[MF_RUN_ID_HEX_LEN + 1];
	uint32_t index, chunks;
	uint64_t raw_bytes, stored_bytes, generation;
};
#define ENG_KNOWN_SLOTS 4096 /* one shard per slot, by hash: bounded */
#define ENG_POOL_IDLE_MAX 4 /* idle catalog connections kept */
#define ENG_POOL_IDLE_S 30 /* an idle one older than this is closed */

/* A shard's failed computation this engine answered with its error
 * (engine_backoff.c), and until when it still does. */
struct failed_shard {
	char fp[MF_FP_HEX_LEN + 1]; /* "" for an empty slot */
	uint32_t index;
	unsigned count; /* failures seen here after the first */
	uint64_t generation; /* of the failed row */
	int64_t until; /* monotonic seconds */
};
#define ENG_FAILED_SLOTS 512

/* A registration this engine forgot (its spec file left), remembered for a
 * while so that its name is not free in the moment a file is removed and
 * made again (engine_names.c, holder_claims). */
struct left_name {
	char fp[MF_FP_HEX_LEN + 1]; /* "" for an empty slot */
	char name[MF_NAME_MAX + 1];
	uid_t owner;
	int64_t at; /* monotonic seconds */
};
#define ENG_LEFT_SLOTS 64
#define ENG_LEFT_GRACE_S 60

/* One attempt at a shard that callers of this process share. */
struct flight {
	struct flight *next;
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	unsigned waiters; /* followers still to read rc/err */
	bool cancelled; /* mf_engine_cancel: stop and fail with -ECANCELED */
	const struct mf_job *job; /* its stages while they run; NULL */
	bool done;
	int rc;
	char *err;
};

/* What a computation that sealed its file hands its own open, with
 * serve_sealed (sealed): a reader of the file, opened before its commit
 * was queued, so that a commit that fails at once still leaves this open
 * the bytes computed for it; and the row it was opened from. r NULL: not
 * sealed, or no reader (read it back through the catalog). */
struct eng_sealed_out {
	struct mf_shard_reader *r;
	struct mf_shard_rec rec;
};

/* A shard this engine sealed and serves while its commit runs
 * (serve_sealed); in mf_engine.sealed from the seal until its commit and
 * catalog record are done. */
struct sealed {
	struct sealed *next;
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	char run_id[MF_RUN_ID_HEX_LEN + 1];
	uint64_t generation; /* of the claim that computed it */
	int64_t sealed_at; /* unix seconds: its first readers' read time */
	int fd; /* read-only, on the sealed file; readers dup it */
	struct mf_shard_stat st;
	struct mf_shard_writer *w; /* the commit thread's once started */
	bool started; /* the commit thread took it */
	char sfp[MF_FP_HEX_LEN + 1]; /* its shard fingerprint; "": none */
	uid_t owner; /* of its spec */
	uint64_t place; /* of its spec's folder (eng_spec_place) */
};

/* Leaves the hint that shard `shard` of fp (run run_id, a spec of owner)
 * holds the data of shard fingerprint sfp (nothing when sfp is ""). A
 * hint not written costs a later computation, nothing else: not told. */
void eng_shared_hint(struct mf_engine *e, const char *sfp, const char *fp,
		     uint32_t shard, const char *run_id, uid_t owner,
		     uint64_t place);
/* Where a spec is, for reuse: XXH3-64 of its real folder. */
uint64_t eng_spec_place(const struct mf_spec *spec);

/* The batch orders an engine keeps (engine_batches.c). */
#define ENG_ORDER_SLOTS 8
struct eng_order_slot;
/* Frees them (mf_engine_close). */
void eng_orders_free(struct mf_engine *e);
/* The readers a placed batch's size is read from, kept across sizes
 * (engine_batchplan.c): at most this many, holding at most this many
 * record places (8 bytes each) in all. */
#define ENG_SIZE_READERS 64
#define ENG_SIZE_RECORDS (1u << 21)
struct eng_size_reader;
/* Closes them (mf_engine_close). */
void eng_size_readers_free(struct mf_engine *e);

/* Between engine_batches.c (the kept orders) and engine_batchplan.c (a
 * batch's plan), with order/'s runs and views. */
struct mf_order_run;
struct mf_order_view;
struct mf_order_window;
/* v as order/'s view: 0, or -EINVAL with *err. */
int eng_batch_view_check(const struct mf_engine_batch_view *v,
			 struct mf_order_view *ov, char **err);
/* Checks that the file r reads has the records the kept order of v
 * counts for shard: -ESTALE (and the order dropped) when it was computed
 * anew with others. */
int eng_batch_order_check(struct mf_engine *e, const char *fp,
			  const struct mf_engine_batch_view *v, uint64_t shard,
			  struct mf_shard_reader *r);
/* Has get compute the shards the order names next until batch k of ov
 * is known or known absent: 0 and *g, -ENOENT. */
int eng_batch_learn(struct mf_engine *e, const char *fp,
		    const struct mf_engine_batch_view *v,
		    const struct mf_order_view *ov, uint64_t k,
		    mf_engine_batch_shard_fn get, void *arg, uint64_t *g,
		    char **err);
/* The window of v's sequence holding place (*w) and, when parts is set,
 * its records as runs (*parts, caller frees, *n of them:
 * mf_order_window_parts), and the records' framing. */
int eng_batch_window(struct mf_engine *e, const char *fp,
		     const struct mf_engine_batch_view *v, uint64_t place,
		     struct mf_order_window *w, struct mf_order_run **parts,
		     size_t *n, struct mf_records *fr, char **err);
/* The runs of global batch g (*out, caller frees, *n of them), copied
 * out of the kept order, and the records' framing. */
int eng_batch_runs(struct mf_engine *e, const char *fp,
		   const struct mf_engine_batch_view *v, uint64_t g,
		   struct mf_order_run **out, size_t *n, struct mf_records *fr,
		   char **err);
/* The size of placed global batch g of a framing with stored ends: its
 * plan over the materialized shards' files (never computing: -EAGAIN
 * when one is not materialized), -EFBIG past MF_ENGINE_BATCH_MAX_RUNS. */
int eng_batch_placed_size(struct mf_engine *e, const char *fp,
			  const struct mf_engine_batch_view *v, uint64_t g,
			  uint64_t *size, char **err);

struct mf_engine {
	struct mf_engine_opts opts;
	char *catalog_path; /* its location (eng_catalog_location) */
	struct mf_store *store;
	/* this process, as its run rows record it (mf_catalog_run_alive) */
	char host[256];
	char boot_id[MF_BOOT_ID_LEN + 1];
	uint64_t pid_ns;
	pid_t pid;
	uint64_t pid_start;
	/* the id of this engine's holds (mf_catalog_hold): the snapshots of
	 * its registered specs */
	char holder[MF_RUN_ID_HEX_LEN + 1];
	int64_t holds_refreshed; /* mono seconds of the last eng_holds_refresh;
				    the heartbeat thread's */
	/* set by the opening thread before any other thread starts */
	bool sync_ready; /* lock, index_lock, name_lock and flight_cv exist:
			    only then does mf_engine_close destroy them */
	bool opened; /* mf_engine_open succeeded: registrations may have made
			holds, which mf_engine_close gives up */

	/* Lock order: lock is a leaf: nothing else is locked while it is
	 * held (no other mutex of the engine, the catalog or a caller; no
	 * callback is called under it). index_lock is taken holding no lock
	 * of the engine, and lock is never taken under it. */

	/* lock guards everything below; never held across I/O that can
	 * block for long (stages, SQLite busy waits). A leaf: no other lock
	 * is taken while it is held. Callers may hold mfs_specs.pub_lock
	 * (the FUSE layer's publication of the specs), no other lock of
	 * theirs. */
	pthread_mutex_t lock;
	pthread_cond_t flight_cv; /* a flight finished */
	struct spec_entry *specs;
	struct run_entry *runs;
	struct flight *flights;
	/* idle catalog connections (eng_catalog_get), oldest first, each
	 * with the mono second it was put back */
	struct mf_catalog *pool[ENG_POOL_IDLE_MAX];
	int64_t pool_at[ENG_POOL_IDLE_MAX];
	size_t n_pool;
	struct known_shard *known; /* ENG_KNOWN_SLOTS, or NULL (no memory) */
	struct failed_shard failed[ENG_FAILED_SLOTS]; /* engine_backoff.c */
	struct left_name left[ENG_LEFT_SLOTS]; /* a ring; next at n_left */
	size_t n_left;
	/* the mount this engine serves (mf_engine_set_mount): "" and 0 when
	 * none, mount_dev 0 until mounted */
	char mount_path[PATH_MAX];
	dev_t mount_dev;

	/* held while a new catalog is indexed (eng_catalog_ready), across
	 * store and catalog I/O; never while holding lock, and lock is not
	 * taken while it is held (lock order: none) */
	pthread_mutex_t index_lock;

	/* held across a registration's name check and its catalog record
	 * (eng_check_name_claim), catalog and store I/O included; taken holding
	 * no lock of the engine, and lock is taken under it (order:
	 * name_lock, then lock) */
	pthread_mutex_t name_lock;

	/* the batch orders last used (engine_batches.c), least recently used
	 * replaced; held across the catalog and shard-file reads that feed
	 * an order, never across a computation; taken holding no lock of the
	 * engine, and lock is taken under it (order: orders_lock, then lock) */
	pthread_mutex_t orders_lock;
	struct eng_order_slot *orders; /* ENG_ORDER_SLOTS, or NULL */
	uint64_t orders_tick;
	/* sizes_lock guards the readers kept for batch sizes: held for one
	 * size's plan, across the catalog and shard-file reads it makes,
	 * never across a computation; taken holding no lock of the engine
	 * (order: sizes_lock, then orders_lock, then lock) */
	pthread_mutex_t sizes_lock;
	struct eng_size_reader *size_readers; /* ENG_SIZE_READERS, or NULL */
	uint64_t sizes_tick;

	pthread_t hb_thread;
	pthread_cond_t hb_cv;
	bool hb_started;
	bool stopping;
	bool cancel_all; /* mf_engine_cancel_all: every flight is cancelled */
	bool holds_stale; /* a new catalog was indexed: hold everything now */
	/* serve_sealed: shards sealed and served, committed in order by
	 * commit_thread (engine_commit.c), which ends once commit_stop is
	 * set and none is left */
	struct sealed *sealed;
	pthread_t commit_thread;
	pthread_cond_t commit_cv; /* a shard was sealed or committed, or
				     commit_stop (broadcast) */
	bool commit_started, commit_stop;

	/* mf_engine_stats: atomics, read without any lock */
	atomic_uint_fast64_t n_started, n_failed, n_running, stage_ns;
};

/*
 * The engine's catalog connection pool, the one of the process: every
 * catalog query of the engine and of its front ends (through the
 * mf_engine_* reads) goes through it. get takes an idle connection, or
 * opens (and indexes, as mf_engine_catalog_open) a new one when none is
 * idle; an idle one whose file was deleted or replaced (mf_catalog_moved)
 * is closed on the way, so no thread answers from an old catalog.db.
 * The connection is the caller's alone until put gives it back (c NULL:
 * nothing). 0 or the -errno of mf_engine_catalog_open. Thread-safe;
 * e->lock is held only to take from or add to the idle list. put keeps
 * at most ENG_POOL_IDLE_MAX idle connections and closes the others; trim
 * (the heartbeat thread, every heartbeat) closes those idle for
 * ENG_POOL_IDLE_S, all but the newest. A connection is open only while
 * a thread uses it or for a while after: the server sees as many
 * sessions of this process as it has threads at work on the catalog.
 */
int eng_catalog_get(struct mf_engine *e, struct mf_catalog **out);
void eng_catalog_put(struct mf_engine *e, struct mf_catalog *c);
void eng_catalog_trim(struct mf_engine *e);

/*
 * Shards known materialized: remember puts rec in (materialized) or takes
 * its shard out (any other state); recall fills *out (a row with no
 * error texts) from memory: 0, or -ENOENT when not known. Used only while
 * the catalog cannot be reached. Thread-safe (e->lock, a leaf).
 */
void eng_known_remember(struct mf_engine *e, const struct mf_shard_rec *rec);
int eng_known_recall(struct mf_engine *e, const char *fp, uint32_t index,
		     struct mf_shard_rec *out);

/*
 * The wait of an open or a commit for a catalog that cannot be reached
 * (mf_catalog_unreachable(rc)): the first call sets *deadline
 * (ENG_CATALOG_WAIT_S from now) and each sleeps a backoff *wait_ns
 * (0 at first) before the caller tries again. Returns 0 to try again, or
 * rc unchanged when it is not an outage; -EIO with *err ("catalog 'X'
 * unreachable for 30 s: ...") once the deadline passed, or -EUSERS
 * ("catalog 'X' refused new connections for 30 s (its max_connections
 * are in use ...") when the server was up but had no slot left (said
 * once through opts.note when the wait begins).
 */
#define ENG_CATALOG_WAIT_S 30
/* True when the shard's row is materialized by run_id's computation
 * generation (0: any): a complete whose reply was lost with the
 * connection, after the server had recorded it, answers -ESTALE when
 * tried again. */
bool eng_recorded(struct mf_catalog *c, const char *fp, uint32_t shard,
		  const char *run_id, uint64_t generation);
int eng_catalog_wait(struct mf_engine *e, int rc, uint64_t *deadline,
		     uint64_t *wait_ns, char **err);

/* The catalog location (caller frees *out): o->catalog when given, else
 * that of st's catalog.db, named as a SQLite file, so that a store folder
 * whose name reads as a location ("sqlite:s", "a://b") stays a folder.
 * 0 or -ENOMEM. mf_engine_catalog_shown names it in messages. */
int eng_catalog_location(const struct mf_engine_opts *o,
			 const struct mf_store *st, char **out);

/* The spec for fp: from the registry, else loaded from the catalog's
 * spec_path and checked against fp. Borrowed while the caller leads a
 * flight on fp (struct spec_entry says why). */
int eng_spec_for(struct mf_engine *e, struct mf_catalog *c, const char *fp,
		 struct spec_entry **out, char **err);
bool eng_is_registered(struct mf_engine *e, const char *fp);

/* Holds (engine_spec.c): this engine's hold on fp as a record; hold and
 * release in c; refresh: every registered fingerprint held again (and its
 * snapshot row put back if another process or a replaced catalog.db lost
 * it), the heartbeat of each hold refreshed. */
void eng_hold_rec(struct mf_engine *e, const char *fp, struct mf_run_rec *h);
void eng_release(struct mf_engine *e, struct mf_catalog *c, const char *fp);
void eng_holds_refresh(struct mf_engine *e);

/* Runs the stages of a claimed shard into the store under run_id and
 * records the outcome in the catalog. 0 (committed and recorded), -EIO
 * with *err (a failure, recorded), -ESTALE with *err (its deps or inputs
 * no longer hash as registered: nothing recorded, the claim is still the
 * caller's to give back), or -EAGAIN: the claim was lost meanwhile (taken over
 * by another run, or the shard reset), nothing recorded, look again. */
int eng_materialize(struct mf_engine *e, struct mf_catalog *c,
		    struct spec_entry *se, uint32_t shard, const char *run_id,
		    struct eng_sealed_out *sealed, char **err);

/* Counts a materialization in (delta 1) or out (-1) of run_id (its
 * heartbeat goes on while one is in); a retired run goes once its last
 * one is out. */
void eng_run_set_active(struct mf_engine *e, const char *run_id, int delta);

/* The commit thread (engine_commit.c), with serve_sealed: started by
 * mf_engine_open, stopped by mf_engine_close after every queued commit
 * ran. 0 or -errno. */
int eng_commit_start(struct mf_engine *e);
void eng_commit_stop(struct mf_engine *e);
/* Queues s (filled, its writer sealed) for the commit thread, which owns
 * it from now on; its run is counted active until the commit is done. */
void eng_commit_queue(struct mf_engine *e, struct sealed *s);
/* Waits until no shard of fp (shard -1: any) sealed by this engine is
 * still being committed: an expiry of a shard its reader saw complete
 * applies to it, not -EBUSY for a shard being computed. */
void eng_commit_wait(struct mf_engine *e, const char *fp, int64_t shard);
/* The row of a shard sealed here, as the catalog holds it until the
 * commit is recorded (running, this claim): what an outage answers for
 * it, so that it stays served. -ENOENT if none. */
int eng_sealed_recall(struct mf_engine *e, const char *fp, uint32_t shard,
		      struct mf_shard_rec *out);
/* s's row as the catalog holds it until the commit (running). */
void eng_sealed_row(const struct sealed *s, struct mf_shard_rec *out);
/* When cur (a row just read) is running as a computation this engine
 * sealed and is committing: a new reader of its file in *out, and cur's
 * raw_bytes, stored_bytes and chunks set to the file's. -ENOENT when it is
 * not one, or the -errno of opening the reader. */
int eng_sealed_open(struct mf_engine *e, struct mf_shard_rec *cur,
		    struct mf_shard_reader **out);

/* The stages of this process's attempt at (fp, shard) started as job, or
 * ended (NULL, before mf_job_finish reaps them): true when the attempt is
 * cancelled (the caller then kills them, or stops). */
bool eng_flight_job(struct mf_engine *e, const char *fp, uint32_t shard,
		    const struct mf_job *job);
/*
 * Indexing (engine_rebuild.c): records in c what the store st holds and c
 * never knew. fp NULL: every fingerprint folder, a snapshot row from the
 * metadata file of each one c lacks, then c's index mark. fp given:
 * that folder only, and a folder c lacks only when it holds shard files to
 * record. In both, each committed shard file of a run c has no row for is
 * recorded materialized under that run (marked "done") where its shard is
 * absent, failed or held by a dead run; the newest file wins among
 * several. One transaction per fingerprint, which records only what c
 * still lacks, so processes indexing at once do not collide. report (may
 * be NULL) gets what was recorded and skipped; *stats (may be NULL) is
 * added to. 0 or -errno (-ENOMEM, -EBUSY, -EIO).
 */
int eng_index(struct mf_store *st, struct mf_catalog *c, const char *fp,
	      mf_rebuild_fn report, void *arg, struct mf_rebuild_stats *stats);

/* Indexes c (eng_index of every folder) unless it carries the index mark;
 * one thread of e at a time. 0 or -errno. */
int eng_catalog_ready(struct mf_engine *e, struct mf_catalog *c);
/* Expires what recs lists (read earlier from the catalog), where the
 * catalog still says what recs says (mf_catalog_expire_shards), then
 * removes the files of the shards that went, and only those: a row
 * claimed or computed again since keeps its file. 0 or -errno. */
int eng_expire_recs(struct mf_engine *e, struct mf_catalog *c,
		    const struct mf_shard_rec *recs, size_t n);

/* Whether cur, a row just read, is a failure to answer as such (-EIO with
 * its error) instead of computing the shard again: a failure after the
 * first this engine saw of the shard, within its backoff
 * (engine_backoff.c). An absent row forgets the shard's count; other
 * states: false. Takes e->lock. */
bool eng_backoff_holds(struct mf_engine *e, const struct mf_shard_rec *cur);
/* The message of a failure (engine_run.c): its error, then the last line
 * its stage wrote on stderr (tail may be NULL), which usually says why
 * ("...: stage 0 'sh' exited with status 3: no such column 'text'"). */
void eng_failure_errf(char **err, const char *error, const char *tail);
/* A hash of (fp, shard index) for the engine's bounded slot tables. */
uint64_t eng_shard_hash(const char *fp, uint32_t index);
/* Remembers that fp's registration of name by owner left (unregistered);
 * caller holds e->lock. */
void eng_name_left(struct mf_engine *e, const char *fp, const char *name,
		   uid_t owner);
/* Whether spec s may take its name (engine_names.c): 0, or -EEXIST with
 * *err naming both files when the name belongs to a spec file of another
 * owner that still claims it; a catalog error as it came. Caller holds
 * e->name_lock and no other lock of the engine. */
int eng_check_name_claim(struct mf_engine *e, struct mf_catalog *c,
			 const struct mf_spec *s, char **err);
/* 0, or -EEXIST with *err when fp belongs to another owner's spec
 * (engine_names.c). */
int eng_check_fp_claim(struct mf_engine *e, struct mf_catalog *c,
		       const struct mf_spec *s, const char *fp, char **err);
/* Tells opts.note, when set, a formatted line. */
void eng_note(struct mf_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets *err to a malloc'd formatted message (keeps the first one). */
void eng_errf(char **err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* strerror(-rc), with the reason of this thread's last corruption report
 * after an -EBADMSG: "Bad message (chunk checksum)". Returns buf. */
const char *eng_strerror(int rc, char *buf, size_t len);

/* ---- the engine's life, its runs and the claim loop ---- */

/* Monotonic seconds, and a sleep that EINTR does not cut short
 * (engine.c). */
int64_t eng_mono_s(void);
void eng_sleep_ns(uint64_t ns);
/* The heartbeat thread (engine_heartbeat.c): started by mf_engine_open,
 * stopped (joined) by mf_engine_close before its holds are released. */
int eng_heartbeat_start(struct mf_engine *e);
/* This engine's holds are to be put back at once (a new catalog): the
 * heartbeat thread does it (eng_holds_refresh). Takes e->lock. */
void eng_holds_stale(struct mf_engine *e);
void eng_heartbeat_stop(struct mf_engine *e);
/* This process's run for fp, found or made under e->lock, into *me; in
 * use until eng_run_unuse (engine_run_registry.c). */
int eng_run_for(struct mf_engine *e, const char *fp, struct mf_run_rec *me);
void eng_run_unuse(struct mf_engine *e, const char *run_id);
/* run_id was declared dead or done by the catalog: no new claim uses it. */
void eng_run_retire(struct mf_engine *e, const char *run_id);
/* The claim loop of one open, by the leader of flight f (engine_claim.c):
 * 0 with *out (and *rec when not NULL), or an error with *err. */
int eng_claim_lead(struct mf_engine *e, const struct flight *f,
		   struct mf_shard_reader **out, struct mf_shard_rec *rec,
		   char **err);
/* The flight on (fp, shard) not yet done, or NULL; e->lock held
 * (engine_flight.c). */
struct flight *eng_flight_find(struct mf_engine *e, const char *fp,
			       uint32_t shard);

/* ---- the front ends' records (engine_front.c) ---- */

/* *out as *in says, its strings borrowed from in. */
void eng_shard_view(const struct mf_shard_rec *in, struct mf_engine_shard *out);
/* *out as *in says, its strings taken from in (which keeps none). */
void eng_shard_take(struct mf_shard_rec *in, struct mf_engine_shard *out);
/* The catalog row *in names (fingerprint, index, state, run, generation;
 * no sizes or texts), for the engine's own tests of it. */
void eng_shard_back(const struct mf_engine_shard *in, struct mf_shard_rec *out);
/* *out as *in says, its strings taken from in. */
void eng_snapshot_take(struct mf_snapshot_rec *in,
		       struct mf_engine_snapshot *out);
void eng_file_of(const struct mf_shard_stat *in, struct mf_engine_file *out);
/* mf_engine_open_shard_rec (engine_flight.c) with the catalog's row. */
int eng_open_shard_rec(struct mf_engine *e, const char *fp, uint32_t shard,
		       struct mf_shard_reader **out, struct mf_shard_rec *rec,
		       char **err);
/* mf_engine_register of spec, loaded from path (engine_spec.c); takes
 * spec whatever it returns. */
int eng_register_loaded(struct mf_engine *e, const char *path,
			struct mf_spec *spec, char fp[MF_FP_HEX_LEN + 1],
			char **err);

#endif
