/*
 * fuse_i.h - the FUSE layer of the matfs daemon: the mounted tree over the
 * engine (mf_engine.h), shared by the fs/fuse/ files only. The daemon's
 * public interface, what tools/matfs.c calls, is fs/mf_fuse.h.
 *
 * The tree (DESIGN.md, "The mount"):
 *   /                      the root (inode 1)
 *   /FP                    one directory per fingerprint
 *   /NAME -> FP            one symlink per registered pipeline name
 *   /FP/shard-NNNNN[SUF]   one file per shard, size 0 until materialized
 * Inode numbers are computed, never allocated per lookup: a fingerprint
 * gets a 31-bit id (its first 31 bits, probed on collision), its
 * directory is id << 32 and shard k is (id << 32) | (k + 1); a name's
 * symlink is (name id << 32) | 0xffffffff. So lookups and FORGET keep no
 * state, and the numbers are the same in every mount of a store. Only a
 * shard removed while open gets a new number (MFS_INO_INC, fuse_node.c).
 *
 * Not for: computing or storing shards (the engine), parsing the command
 * line or deciding where messages go (tools/matfs.c). Nothing here prints:
 * messages go to the log callback of mfs_opts.
 */
#ifndef MF_FUSE_I_H
#define MF_FUSE_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "mf_engine.h"
#include "mf_fuse.h"

/* ---- private to the FUSE layer ---- */

#define MFS_ROOT_INO FUSE_ROOT_ID
#define MFS_LINK_LOW 0xffffffffu
#define MFS_SUFFIX_MAX 32
#define MFS_SNAP_TTL_NS 1000000000ULL /* catalog re-read of a snapshot */
#define MFS_ATTR_TTL 1.0 /* seconds the kernel keeps final attributes */
/* A computation whose every waiting open was interrupted (its readers
 * were killed) is stopped after this long with no open waiting for it
 * again: a reader that comes back soon (a restarted job) still finds it
 * under way. */
#define MFS_CANCEL_GRACE_S 5
/* Workers are kept in reserve for a reader with none running while
 * another reader queued a computation within this many seconds. */
#define MFS_RESERVE_WINDOW_S 600

void mfs_logf(struct mfs *m, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* How log lines name snapshot fp: its pipeline's name and the first 12
 * digits, "wiki-tokens (3f9c0a1b2c3d)", or the digits alone when it has
 * no name. May read the catalog: never call it holding a lock. Returns
 * buf (MFS_LABEL_MAX bytes suffice). */
#define MFS_LABEL_MAX (MF_ENGINE_NAME_MAX + 20)
const char *mfs_label(struct mfs *m, const char *fp, char *buf, size_t len);

/* One fingerprint this mount has seen. Never freed before the mount. */
struct mfs_snap {
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t id; /* inode high bits; fixed */
	/* guarded by mfs.ns_lock: */
	uint64_t gen; /* directory inode generation; rmdir bumps */
	bool registered; /* a spec of the pipelines folder yields it */
	bool known; /* in the catalog or registered, as of checked */
	uint64_t checked_ns; /* 0: re-read the catalog */
	uint32_t shards;
	char suffix[MFS_SUFFIX_MAX + 1];
	char name[MF_ENGINE_NAME_MAX + 1];
	int64_t created;
};

/* What the mount shows of a snapshot: a copy taken under ns_lock. */
struct mfs_snap_info {
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t id;
	uint64_t gen;
	uint32_t shards;
	char suffix[MFS_SUFFIX_MAX + 1];
	char name[MF_ENGINE_NAME_MAX + 1];
	int64_t created;
	bool registered;
};

/* One pipeline name's symlink. Never freed before the mount. */
struct mfs_link {
	char name[MF_ENGINE_NAME_MAX + 1];
	uint32_t id;
	bool present; /* guarded by ns_lock, as fp */
	char fp[MF_FP_HEX_LEN + 1];
};

/* An opened committed shard file (or one sealed and being committed by
 * this mount's engine: serve_sealed), shared by every handle opened on it
 * while it is current. Freed when the last reference goes. */
struct mfs_data {
	atomic_uint refs;
	uint64_t id; /* unique in the mount: keys the chunk cache */
	struct mf_shard_reader *r;
	struct mf_engine_file st;
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	uint64_t gen; /* the computation (mf_engine_shard.generation); > 0 */
	int64_t created; /* its snapshot's, for the times fstat shows */
};

struct mfs_waiter; /* an open request waiting for a materialization */

/* Open-time state of one shard inode. Guarded by mfs.node_lock.
 * An inode serves one computation at a time: while handles are open on
 * cur, an open that would read another computation gets ESTALE (and the
 * shard a new inode), so the kernel's size and page cache of an inode
 * never mix two computations. */
struct mfs_node {
	struct mfs_node *next; /* hash chain */
	fuse_ino_t ino;
	uint32_t snap_id, shard; /* the shard it is an inode of */
	fuse_ino_t live; /* on a shard's first inode: its
					  current inode when not this one */
	bool retired; /* expired or recomputed with handles
					  open: the kernel's inode of those */
	struct mfs_data *cur; /* the data open handles share */
	unsigned nfh; /* handles open on cur; 0 iff !cur */
	struct mfs_waiter *waiters; /* opens waiting for a worker */
	bool queued; /* an open job is with the workers */
	uint64_t job_seq; /* counts the jobs queued for it */
	uint64_t job_id; /* the last one's, for mfs_pool_lift */
	uint64_t kept; /* generation the kernel may cache; 0 */
	/* the generation whose pages fuse_push.c puts in the kernel's cache
	 * (0: none), and the bytes of it announced: the size getattr
	 * answers meanwhile, so that the kernel keeps the pages */
	uint64_t pushing, pushed;
};

struct mfs_pool;
struct mfs_listing;
struct mfs_cache;
struct mfs_specs;
struct mfs_expiry;
struct mfs_reaper;
struct mfs_nswatch;

struct mfs_fh;
struct mfs_bdirs;
struct mfs_btab;
struct mfs_bfh;

struct mfs {
	struct mfs_opts o; /* strings owned (copied) */
	struct mf_engine *eng;
	struct fuse_session *se;
	uid_t uid;
	gid_t gid;
	int64_t t0; /* mount time */
	unsigned cores;

	/* Lock order: mfs_specs.pub_lock -> ns_lock (a publication of the
	 * specs, fuse_specs.c); node_lock -> a worker pool's lock (open_slow
	 * queues a node's job under it). ns_lock and node_lock are never
	 * held together, nor across I/O, a FUSE reply or a call into the
	 * engine (which keeps the catalog connections: mf_engine_* reads). */
	pthread_mutex_t ns_lock;
	struct mfs_snap **snaps; /* in order of first sight */
	size_t n_snaps, cap_snaps;
	struct mfs_snap **by_id; /* open addressing on id; power of 2 */
	size_t cap_id;
	struct mfs_link *links;
	size_t n_links, cap_links;

	pthread_mutex_t node_lock;
	/* every file handle open: those the kernel never releases (a
	 * release still queued when the mount goes) go with mfs_free */
	struct mfs_fh *fhs;
	/* the same for directory handles (fuse_dir.c) */
	struct mfs_listing *dirs;
	/* handles open per reader uid, and the bound on shard handles
	 * (fuse_users.c); under node_lock */
	struct mfs_user_fhs *user_fhs;
	size_t fh_cap;
	struct mfs_node **nodes; /* hash on ino */
	size_t cap_nodes, n_nodes;
	uint64_t next_inc; /* counter of MFS_INO_INC inodes */

	atomic_uint_fast64_t next_data_id;
	/* bumped before each invalidation of a shard's attributes: a listing
	 * taken before it may hold sizes older than the kernel's (fuse_dir.c) */
	atomic_uint_fast64_t attr_epoch;
	/* bytes of shard data read replies carried (matctl stats) */
	atomic_uint_fast64_t bytes_served;
	/* bytes put in the kernel's cache as stages wrote them (fuse_push.c) */
	atomic_uint_fast64_t bytes_pushed;
	struct mfs_pool *open_pool; /* workers: materializations */
	struct mfs_pool *ra_pool; /* read-ahead decompression */
	struct mfs_pool *win_pool; /* the next window of an epoch read */
	struct mfs_cache *cache;
	struct mfs_specs *specs;
	struct mfs_expiry *expiry; /* the policy thread (fuse_expiry.c) */
	struct mfs_reaper *reaper; /* stops abandoned computations */
	atomic_bool mount_left; /* the session ended as its mount left this
				 * namespace: not ours to unmount */
	struct mfs_bdirs *bdirs; /* the batch tree's folders (fuse_btree.c) */
	struct mfs_btab *btab; /* shard data batches read (fuse_batch.c) */
	struct mfs_nswatch *nswatch; /* ends the session when the mount
					left this namespace (or NULL) */
	atomic_bool stopping; /* mfs_stop began: computations are cancelled */
	atomic_bool ra_tuned; /* readahead_kb applied (or tried) */
};

/* fuse_users.c: the handles one reader uid may hold open, by kind (its
 * header says the bounds). Take: 0, -EMFILE past the bound (logged once a
 * minute), -ENOMEM; give back what was taken. The _locked forms are for a
 * caller holding node_lock, which logs the bound with mfs_user_capped
 * once it let go of the lock; the others take the lock, and log. */
enum mfs_handle_kind { MFS_HANDLE_SHARD, MFS_HANDLE_DIR, MFS_HANDLE_KINDS };
#define MFS_DIR_CAP 256
/* The reader a request's uid counts as: its user's uid for a uid of a
 * user's subordinate range (/etc/subuid), else the uid itself. */
uid_t mfs_reader_uid(uid_t uid);
int mfs_user_take_locked(struct mfs *m, uid_t uid, enum mfs_handle_kind k);
void mfs_user_give_locked(struct mfs *m, uid_t uid, enum mfs_handle_kind k);
int mfs_user_take(struct mfs *m, uid_t uid, enum mfs_handle_kind k);
void mfs_user_give(struct mfs *m, uid_t uid, enum mfs_handle_kind k);
/* Logs that uid reached its bound of kind k, once a minute at most. */
void mfs_user_capped(struct mfs *m, uid_t uid, enum mfs_handle_kind k);
/* The memory the listings of uid's directory handles hold: a listing of
 * `bytes` more is refused (-EMFILE, logged) where uid already holds some
 * and the sum would pass MFS_DIR_BYTES_CAP; a uid's first listing is
 * always let through, so that anyone can list any folder. */
#define MFS_DIR_BYTES_CAP ((size_t)64 << 20)
int mfs_user_take_bytes(struct mfs *m, uid_t uid, size_t bytes);
void mfs_user_give_bytes(struct mfs *m, uid_t uid, size_t bytes);
/* What an open batch holds beyond its handle: `units` more shard handles
 * (-EMFILE past the bound) and `bytes` of plan (-ENOMEM where uid holds
 * some and the sum would pass MFS_PLAN_BYTES_CAP; both logged). */
#define MFS_PLAN_BYTES_CAP ((size_t)256 << 20)
int mfs_user_take_batch(struct mfs *m, uid_t uid, size_t units, size_t bytes);
void mfs_user_give_batch(struct mfs *m, uid_t uid, size_t units, size_t bytes);

/* fuse_model.c: the namespace, attributes */
int mfs_ns_init(struct mfs *m);
void mfs_ns_release(struct mfs *m);
/* The snapshot of fp, created (with its id) when first seen: for a fp
 * a spec or the catalog gave. */
int mfs_snap_get(struct mfs *m, const char *fp, struct mfs_snap **out);
/* The snapshot of fp (any string a reader sent) and its info, when a spec
 * or the catalog knows it: kept in memory only then, so that lookups of
 * made-up fingerprints cost nothing. -ENOENT otherwise. */
int mfs_snap_known(struct mfs *m, const char *fp, struct mfs_snap **out,
		   struct mfs_snap_info *si);
struct mfs_snap *mfs_snap_by_id(struct mfs *m, uint32_t id);
/* Current info of s, re-reading the catalog when older than the TTL.
 * -ENOENT when neither the catalog nor a spec knows it. */
int mfs_snap_info(struct mfs *m, struct mfs_snap *s, struct mfs_snap_info *out);
void mfs_snap_forget(struct mfs *m, struct mfs_snap *s, bool bump_gen);
/* Updates s from its catalog row (NULL: it has none). */
void mfs_snap_from_rec(struct mfs *m, struct mfs_snap *s,
		       const struct mf_engine_snapshot *rec);
/* Every registered fingerprint (caller frees the array). */
int mfs_snaps_registered(struct mfs *m, struct mfs_snap ***out, size_t *n);
/* Symlinks: the target of a name, or of a link inode id. */
int mfs_link_find(struct mfs *m, const char *name, struct mfs_link *out);
int mfs_link_by_id(struct mfs *m, uint32_t id, struct mfs_link *out);
/* The inode id of a name, present or not; -ENOENT if never seen. */
int mfs_link_id(struct mfs *m, const char *name, uint32_t *id);
/* Replaces the registered set (from the specs watcher); names whose target
 * changed are returned for invalidation (caller frees). */
int mfs_ns_set_specs(struct mfs *m, const struct mf_engine_spec_info *v,
		     size_t n, char ***changed, size_t *n_changed);

/* Inodes */
static inline fuse_ino_t mfs_ino_dir(uint32_t id)
{
	return (fuse_ino_t)id << 32;
}
static inline fuse_ino_t mfs_ino_shard(uint32_t id, uint32_t k)
{
	return ((fuse_ino_t)id << 32) | (fuse_ino_t)(k + 1);
}
static inline fuse_ino_t mfs_ino_link(uint32_t id)
{
	return ((fuse_ino_t)id << 32) | MFS_LINK_LOW;
}

/* Shard names: "shard-" + width digits + suffix. */
unsigned mfs_shard_width(uint32_t shards);
int mfs_shard_name(const struct mfs_snap_info *si, uint32_t k, char *buf,
		   size_t len);
int mfs_shard_parse(const struct mfs_snap_info *si, const char *name,
		    uint32_t *k);

void mfs_attr_root(struct mfs *m, struct stat *st);
void mfs_attr_dir(struct mfs *m, const struct mfs_snap_info *si,
		  struct stat *st);
void mfs_attr_link(struct mfs *m, const struct mfs_link *l, struct stat *st);
/* rec may be NULL (no catalog row): an absent shard. Returns the attr
 * timeout. */
double mfs_attr_shard(struct mfs *m, fuse_ino_t ino,
		      const struct mfs_snap_info *si,
		      const struct mf_engine_shard *rec, struct stat *st);

/* A folder of the batch tree (docs/format.md, "The batch tree's names"):
 * SNAP/batches, its B, seed-S, epoch-E and rank-R-of-W[-from-G]
 * folders. The view's fields are those its path gave: batch from B on,
 * shuffled and seed from seed-S on, epoch from epoch-E on, and world 1,
 * rank 0, from 0 unless it is a rank folder. */
enum mfs_blevel {
	MFS_BL_TOP,
	MFS_BL_SIZE,
	MFS_BL_SEED,
	MFS_BL_EPOCH,
	MFS_BL_RANK
};
struct mfs_bkey {
	uint32_t snap_id;
	enum mfs_blevel level;
	struct mf_engine_batch_view v;
};

/* What an inode is, decoded; snap info filled for dirs, shards and the
 * batch tree. */
enum mfs_kind { MFS_ROOT, MFS_DIR, MFS_SHARD, MFS_LINK, MFS_BDIR, MFS_BFILE };
struct mfs_inode {
	enum mfs_kind kind;
	struct mfs_snap *snap;
	struct mfs_snap_info si;
	uint32_t shard;
	struct mfs_link link;
	struct mfs_bkey bkey; /* MFS_BDIR, and a MFS_BFILE's folder */
	uint64_t batch; /* MFS_BFILE: its number in its folder */
};
int mfs_inode_decode(struct mfs *m, fuse_ino_t ino, struct mfs_inode *out);
/* Applies opts.readahead_kb once; called on requests after FUSE INIT. */
void mfs_tune_once(struct mfs *m);
/* The shard's catalog row (mf_engine_shard_rec): 0 with *rec (release
 * it), 1 when it has none (an absent shard), or -errno. */
int mfs_shard_rec(struct mfs *m, const char *fp, uint32_t k,
		  struct mf_engine_shard *rec);

/* fuse_ops.c: lookup, getattr, readlink, statfs, init */
void mfs_op_init(void *userdata, struct fuse_conn_info *conn);
void mfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void mfs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void mfs_op_forget_multi(fuse_req_t req, size_t count,
			 struct fuse_forget_data *forgets);
void mfs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mfs_op_readlink(fuse_req_t req, fuse_ino_t ino);
void mfs_op_statfs(fuse_req_t req, fuse_ino_t ino);
/* Fills e for the child name of parent; 0 or -errno. */
int mfs_entry(struct mfs *m, fuse_req_t req, fuse_ino_t parent,
	      const char *name, struct fuse_entry_param *e);

/* fuse_dir.c: opendir, readdir(plus), releasedir */
void mfs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi);
void mfs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi);
void mfs_op_releasedir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi);

/* fuse_open.c: open, read, release. An open waiting for a computation is
 * answered EINTR as soon as the kernel interrupts it (its process got a
 * signal); a computation left with no open waiting goes to the reaper. */
void mfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		 struct fuse_file_info *fi);
void mfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* fuse_reaper.c: a thread that cancels (mf_engine_cancel) the computation
 * of a shard inode whose waiting opens were all interrupted, once
 * MFS_CANCEL_GRACE_S passed with none waiting again. */
int mfs_reaper_start(struct mfs *m);
/* The last open waiting on inode ino for its job number seq went away. */
void mfs_reaper_watch(struct mfs *m, fuse_ino_t ino, uint64_t seq);
/* Cancels every computation under way and every later one (so the
 * workers finish at once: mfs_stop calls it first) and stops the
 * thread. */
void mfs_reaper_stop(struct mfs *m);

/* fuse_mountinfo.c: /proc/self/mountinfo (proc(5)), read from f. */
/* Undoes its escapes in place: a backslash and three octal digits of one
 * byte (\040 a space, \134 a backslash); anything else is left as is. */
void mfs_mountinfo_unescape(char *s);
/* "MAJ:MIN" of the last mount at mountpoint (unescaped) into out; 0 or
 * -ENOENT. */
int mfs_mountinfo_devno(FILE *f, const char *mountpoint, char *out, size_t len);
/* Whether a mount of device dev is listed: 1, 0 or -EIO. */
int mfs_mountinfo_has_dev(FILE *f, dev_t dev);

/* fuse_nswatch.c: a thread that ends the session (aborts the connection,
 * else SIGTERM to the thread that called mfs_nswatch_start, which must
 * be the one to run the session loop) once no mount of dev is left in
 * this mount namespace and the connection lives on
 * MFS_NSWATCH_GRACE_MS later: a copy of the mount in another namespace
 * keeps it alive after an unmount here. 0, or -errno (-ENOENT: dev is
 * not mounted here). */
#define MFS_NSWATCH_GRACE_MS 1000
int mfs_nswatch_start(struct mfs *m, dev_t dev);
/* Stops the thread (NULL-safe, idempotent). */
void mfs_nswatch_stop(struct mfs *m);

/* fuse_node.c: shard inodes with open-time state. Removing a shard that
 * has open handles, or finding it computed anew, retires its inode (the
 * handles keep it, with the size of what they read) and gives the shard a
 * new inode number, as a Unix filesystem gives a recreated file a new
 * inode. */
#define MFS_INO_INC (1ULL << 63) /* inodes given after an rm */
/* The node of inode ino, created if missing. Caller holds node_lock. */
struct mfs_node *mfs_node_get(struct mfs *m, fuse_ino_t ino);
/* The inode number a lookup of shard k of snapshot id answers. */
fuse_ino_t mfs_shard_ino(struct mfs *m, uint32_t id, uint32_t k);
/* The same for a lookup that read the shard's row rec (NULL: none): the
 * current inode is retired first when its handles read another
 * computation than rec's. */
fuse_ino_t mfs_shard_ino_rec(struct mfs *m, uint32_t id, uint32_t k,
			     const struct mf_engine_shard *rec);
/* Retires n when it is the shard's current inode and has handles open;
 * caller holds node_lock. */
void mfs_node_retire_locked(struct mfs *m, struct mfs_node *n);
/* The shard an inode given after an rm belongs to; -ENOENT. */
int mfs_inc_decode(struct mfs *m, fuse_ino_t ino, uint32_t *id, uint32_t *k);
/* After shard k (or every shard) of snapshot id was expired. */
void mfs_shard_retire(struct mfs *m, uint32_t id, uint32_t k);
void mfs_snap_retire(struct mfs *m, uint32_t id);
/* The stat of what the handles open on inode ino read, and their
 * snapshot's creation time: false when none is open (the catalog then
 * answers). Whatever the namespace says meanwhile (expired, recomputed,
 * no spec yields the snapshot any more), an inode with handles open shows
 * what they read. */
/* The bytes of generation gen pushed into inode ino so far, when it is
 * the one being pushed. */
bool mfs_node_pushed(struct mfs *m, fuse_ino_t ino, uint64_t gen,
		     uint64_t *bytes);
bool mfs_node_held(struct mfs *m, fuse_ino_t ino, struct mf_engine_file *st,
		   int64_t *created);
void mfs_nodes_release(struct mfs *m);
/* Closes the file handles still open once the session has ended. */
void mfs_fhs_release(struct mfs *m);
/* The same for directory handles (fuse_dir.c). */
void mfs_dirs_release(struct mfs *m);
/* The data an open handle reads (fi->fh of a shard's open). */
const struct mfs_data *mfs_fh_data(uint64_t fh);
void mfs_data_put(struct mfs *m, struct mfs_data *d);
void mfs_data_get(struct mfs_data *d);
/* Has chunk of d decompressed on the read-ahead threads, unless it is
 * cached or loading, or their backlog is long (fuse_open.c). */
void mfs_ra_submit(struct mfs *m, struct mfs_data *d, uint32_t chunk);
/* The same on pool p, whatever its backlog (the caller bounds it). */
void mfs_ra_submit_to(struct mfs *m, struct mfs_pool *p, struct mfs_data *d,
		      uint32_t chunk);
/* Wraps a reader of the computation rec describes (taken over, closed on
 * failure) in a data of refs 1. With adopt, the chunks this thread's
 * materialization of that very file put in the cache become the
 * data's. */
int mfs_data_new(struct mfs *m, const struct mf_engine_shard *rec,
		 struct mf_shard_reader *r, bool adopt, int64_t created,
		 struct mfs_data **out);

/* fuse_btree.c: the batch tree's inodes. A folder of it is a node of a
 * table, made by a lookup and freed when the kernel forgets it (its
 * lookups counted); a batch file's inode is computed from its folder's:
 * MFS_INO_BATCH | (folder slot + 1) << MFS_BT_FILE_BITS | (number + 1),
 * so that reading an epoch costs no memory per batch. Batch numbers at
 * or past MFS_BT_FILE_MAX have no inode: ENOENT (an epoch would need
 * 2.7 x 10^11 batches to hold one). */
#define MFS_INO_BATCH (MFS_INO_INC | (1ULL << 62))
#define MFS_BT_FILE_BITS 38
#define MFS_BT_SLOT_MAX (1u << 24) /* folders at most: 2^24 - 1 */
#define MFS_BT_FILE_MAX ((1ULL << MFS_BT_FILE_BITS) - 1)
/* Folders of the tree one reader uid may make the daemon hold, and all
 * of them: past it a lookup fails with ENFILE until the kernel forgets
 * some (its dentry cache lets them go). */
#define MFS_BT_UID_CAP 4096
#define MFS_BT_CAP 65536
int mfs_btree_new(struct mfs *m);
void mfs_btree_free(struct mfs *m);
static inline bool mfs_ino_is_batch(fuse_ino_t ino)
{
	return (ino & MFS_INO_BATCH) == MFS_INO_BATCH;
}
/* Decodes a batch tree inode into out (kind, snap, si, bkey, batch):
 * 0 or -ENOENT. */
int mfs_btree_decode(struct mfs *m, fuse_ino_t ino, struct mfs_inode *out);
/* The entry of name under a folder of the tree, or of `batches` under a
 * snapshot folder (parent in: MFS_DIR or MFS_BDIR); counts the lookup.
 * 0, -ENOENT, -ENFILE, -errno. */
int mfs_btree_entry(struct mfs *m, fuse_req_t req, fuse_ino_t parent,
		    const struct mfs_inode *in, const char *name,
		    struct fuse_entry_param *e);
/* A lookup of a tree inode answered but not delivered (the kernel never
 * got it): as a FORGET of one. */
void mfs_btree_forget(struct mfs *m, fuse_ino_t ino, uint64_t nlookup);
/* The attributes of a tree inode (fh: an open batch's handle, or 0). */
int mfs_btree_attr(struct mfs *m, fuse_ino_t ino, uint64_t fh, struct stat *st,
		   double *ttl);
/* Whether snapshot fp serves a batch tree (its spec has records): 1, 0,
 * or -errno. */
int mfs_btree_has(struct mfs *m, const char *fp);
/* A batch file's inode. */
fuse_ino_t mfs_btree_file_ino(fuse_ino_t dir, uint64_t n);

/* fuse_batch.c: opening batch files and reading them through the chunk
 * cache, over the shard data the mount keeps for batches (the last
 * MFS_BTAB_SLOTS shards they read, each a reader of one computation). */
#define MFS_BTAB_SLOTS 512
int mfs_btab_new(struct mfs *m);
void mfs_btab_free(struct mfs *m);
/* open and read of a MFS_BFILE inode (from mfs_op_open, mfs_op_read,
 * mfs_op_release: their fi->fh is a batch handle). */
void mfs_batch_open(fuse_req_t req, fuse_ino_t ino, const struct mfs_inode *in,
		    struct fuse_file_info *fi);
void mfs_batch_read(fuse_req_t req, size_t size, off_t off,
		    struct fuse_file_info *fi);
void mfs_batch_release(struct mfs *m, struct fuse_file_info *fi);
/* A batch file's record ends (mf_engine_batch_record_ends), from
 * materialized shards only: -EAGAIN while they are not. */
int mfs_batch_record_ends(struct mfs *m, const struct mfs_inode *in,
			  uint64_t **ends, size_t *n);
/* The size the handles open on batch inode ino read, when one is open:
 * what its stat says, whatever the order says meanwhile (a shard served
 * before its commit is not materialized yet). */
bool mfs_batch_held(struct mfs *m, fuse_ino_t ino, uint64_t *size);
/* The size an open batch handle reads. */
uint64_t mfs_batch_fh_size(uint64_t fh);
/* Closes the batch handles still open once the session has ended. */
void mfs_batch_fhs_release(struct mfs *m);

/* fuse_write.c: unlink, rmdir, and every refused change */
void mfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void mfs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void mfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		  mode_t mode);
void mfs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		  mode_t mode, dev_t rdev);
void mfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		   mode_t mode, struct fuse_file_info *fi);
void mfs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		    const char *name);
void mfs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		 const char *newname);
void mfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		   fuse_ino_t newparent, const char *newname,
		   unsigned int flags);
void mfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		    int to_set, struct fuse_file_info *fi);
void mfs_op_access(fuse_req_t req, fuse_ino_t ino, int mask);
void mfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		  off_t off, struct fuse_file_info *fi);

/* fuse_xattr.c */
void mfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		     size_t size);
void mfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void mfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		     const char *value, size_t size, int flags);
void mfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

/* fuse_pool.c: a fixed set of threads running queued jobs, taking keys in
 * turn and each key's jobs in order. A job runs with cancelled = true when
 * the pool stops before starting it. */
typedef void (*mfs_job_fn)(void *arg, bool cancelled);
int mfs_pool_new(unsigned threads, struct mfs_pool **out);
/* mfs_pool_submit_keyed with key 0. */
int mfs_pool_submit(struct mfs_pool *p, mfs_job_fn fn, void *arg);
/* Queues fn(arg) under key (a reader's uid): a key with many jobs queued
 * waits its turn behind the others' next ones. *id (when id is not NULL)
 * names the job for mfs_pool_lift. 0, -ENOMEM, -ESHUTDOWN. */
int mfs_pool_submit_keyed(struct mfs_pool *p, uint64_t key, mfs_job_fn fn,
			  void *arg, uint64_t *id);
/* Enters job id, while it is still queued, under key too, as the newest
 * of that key's jobs: it runs once, at the first turn of any of its keys.
 * 0; -ENOENT when it started (or ran) already, -EEXIST when it has that
 * key, -ENOMEM. */
int mfs_pool_lift(struct mfs_pool *p, uint64_t id, uint64_t key);
/* Keeps the last `reserve` idle threads (fewer than the pool's) for jobs
 * of a key with none running, once jobs of two keys were queued within
 * window_ns; 0 keeps none (the default). */
void mfs_pool_reserve(struct mfs_pool *p, unsigned reserve, uint64_t window_ns);
/* Jobs not started yet. */
size_t mfs_pool_backlog(struct mfs_pool *p);
/* Cancels what is queued and waits up to timeout_ms for running jobs;
 * -EBUSY when some still run (the pool is then leaked on purpose). */
int mfs_pool_stop(struct mfs_pool *p, unsigned timeout_ms);

/* fuse_cache.c: decompressed chunks under a memory budget */
struct mfs_chunk {
	const uint8_t *buf;
	size_t len;
};
int mfs_cache_new(uint64_t budget, struct mfs_cache **out);
void mfs_cache_free(struct mfs_cache *c);
/* A referenced chunk of d, decompressed now or by a read-ahead already
 * under way. Give it back with mfs_cache_unref. -EBADMSG, -errno. */
int mfs_cache_get(struct mfs_cache *c, struct mfs_data *d, uint32_t chunk,
		  struct mfs_chunk *out, void **ref);
void mfs_cache_unref(struct mfs_cache *c, void *ref);
/* mfs_cache_unref for a reader that reads each byte of a chunk once (the
 * batches of an epoch): bytes of it were served. A chunk all of whose
 * bytes were so served is let go as soon as nobody holds it, its buffer
 * kept for the next load, instead of waiting for the budget to push it
 * out: an epoch's chunks are dead once its reader passed them. */
void mfs_cache_unref_served(struct mfs_cache *c, void *ref, size_t bytes);
/* True when the chunk is cached or loading. */
bool mfs_cache_has(struct mfs_cache *c, const struct mfs_data *d,
		   uint32_t chunk);
/* Drops every chunk of data id (no reference may remain). */
void mfs_cache_drop(struct mfs_cache *c, uint64_t data_id);
/* mfs_cache_get for a reader's request: also counts a hit (the chunk
 * was cached or loading) or a miss (this call decompresses it). Read-ahead
 * calls mfs_cache_get, which counts neither. */
int mfs_cache_read(struct mfs_cache *c, struct mfs_data *d, uint32_t chunk,
		   struct mfs_chunk *out, void **ref);
/* Since the cache was made: chunks decompressed, chunks a tap put in
 * instead, and readers' hits and misses. Atomic reads, no lock. */
struct mfs_cache_stats {
	uint64_t decompressed, tapped, hits, misses;
};
void mfs_cache_counts(struct mfs_cache *c, struct mfs_cache_stats *out);
/*
 * Takes one of the engine's chunk events (mf_engine_opts.chunk, forwarded
 * by fuse_mount.c): the raw chunks of a computation go in, in order, under
 * a stage id no data has, while they fit the budget without evicting
 * anything (after that the rest of the computation is left out), and are
 * then evictable as any chunk. MF_CHUNK_FAILED drops them.
 */
void mfs_cache_tap(struct mfs_cache *c, const struct mf_chunk_event *ev);
/*
 * On the thread that received the events, once the computation is
 * committed or sealed: the stage id whose chunks are those of the file
 * rec names (materialized, or running as sealed by this mount's engine;
 * same fp, shard and generation) and st describes (its
 * reader's stat), to use as that data's id; 0 when there is none. The
 * stage is then the caller's.
 */
uint64_t mfs_cache_adopt(struct mfs_cache *c, const struct mf_engine_shard *rec,
			 const struct mf_engine_file *st);
/* Drops the stages of the calling thread that nobody adopted. */
void mfs_cache_unstage(struct mfs_cache *c);

#define MFS_PUSH_BUF ((size_t)2 << 20) /* the most one store sends */
#define MFS_PUSH_Q 8 /* stores handed to the push thread at most */
/* One store handed to the push thread: whole pages (the last page of the
 * file at the end), read from the chunk's own bytes, which the engine
 * lends until it releases chunk (MF_CHUNK_RELEASE), or from a page of
 * carry[] that joined two chunks' bytes. */
struct mfs_push_item {
	const uint8_t *data;
	size_t len;
	uint32_t chunk;
};
/* fuse_push.c: a computation's pages put in the kernel's cache as the
 * stages write them. State of one open job's materialization, on its
 * thread's stack: the fields above `lock` are that thread's (the push
 * thread reads gen, ino and the items handed to it), those below are
 * shared with the push thread and guarded by lock; bytes is the push
 * thread's while it runs and read by the job's thread only when no item
 * is handed over. */
struct mfs_push {
	struct mfs *m;
	fuse_ino_t ino; /* the inode the job's opens wait on */
	char fp[MF_FP_HEX_LEN + 1];
	uint32_t shard;
	uint64_t gen; /* the computation whose pages go in; 0: none; set
			 only while no item is handed over */
	uint64_t queued; /* bytes taken, from offset 0: handed or carried */
	uint64_t limit; /* of bytes pushed */
	uint32_t next; /* the chunk expected next */
	bool on; /* pushing */
	bool done; /* gen was sealed or committed */
	size_t page;
	/* a page each: carry[i] belongs to queue slot i, where it is
	 * handed over once whole; the bytes of a chunk's last partial page
	 * wait in carry[tail] for the next chunk's (or the file's end) */
	uint8_t *carry[MFS_PUSH_Q];
	uint8_t *carry_buf; /* MFS_PUSH_Q pages (mf_buf_alloc) */
	size_t carry_cap;
	unsigned tail; /* the queue slot handed over next */
	size_t fill; /* bytes in carry[tail] */
	uint64_t bytes; /* stored, from offset 0 */
	bool thread_on;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	unsigned q_head, q_n; /* handed items: q_head is the oldest; an item
				 counts until stored or let go */
	struct mfs_push_item q[MFS_PUSH_Q];
	bool failed; /* a store failed or the node is not ours any more:
			no more stores for gen */
	bool stop; /* the push thread ends once no item is left */
};
/* The chunk events of shard `shard` of fp on the calling thread go to
 * inode ino until mfs_push_end, which gives the pages up unless the
 * computation was sealed or committed. */
void mfs_push_begin(struct mfs_push *p, struct mfs *m, fuse_ino_t ino,
		    const char *fp, uint32_t shard);
void mfs_push_end(struct mfs_push *p);
/* Takes a chunk event first: true when its chunk went to the kernel (the
 * cache then leaves it out). */
bool mfs_push_chunk(struct mfs *m, const struct mf_chunk_event *ev);

/* fuse_specs.c: the pipelines folder and its watcher */
int mfs_specs_new(struct mfs *m, struct mfs_specs **out);
/* Registers what changed since the last scan (all on the first), on
 * worker threads, and waits for them: at most the time limit or 10 s. */
void mfs_specs_scan(struct mfs *m);
/* Mounted as se, whose files have st_dev dev (0: unknown): starts the
 * watcher; deps and inputs on the mount are refused from now on. */
int mfs_specs_start(struct mfs *m, struct fuse_session *se, dev_t dev);
/* Stops the watcher and the registrations, waiting up to timeout_ms for
 * those under way: 0, or -EBUSY when one is still stuck reading a file
 * (its thread uses m: the caller must not free it). */
int mfs_specs_stop(struct mfs *m, unsigned timeout_ms);
void mfs_specs_free(struct mfs_specs *s);
/* Re-registers the spec a fingerprint came from (its catalog row was
 * removed by another process, or its inputs changed), and waits for it
 * (at most its time limit). */
void mfs_specs_refresh(struct mfs *m, const char *fp);
/* A name was resolved (lookup, readlink): when some spec's deps and inputs
 * are polled and were checked over a second ago, wakes the watcher to
 * check them now. Never blocks; callable from any thread. */
void mfs_specs_resolved(struct mfs *m);

/* fuse_expiry.c: the engine's expiry policy (expire_after, keep,
 * max_size), applied every period by a thread started once mounted. */
#define MFS_EXPIRY_PERIOD_MS 1000
int mfs_expiry_start(struct mfs *m);
void mfs_expiry_stop(struct mfs *m);
/* One pass of the policy (the thread's; callable from any thread). */
void mfs_expiry_pass(struct mfs *m);

#endif
