/*
 * mf_pipeline.h - pipeline specs: loading the YAML, expanding inputs into
 * shards, the fingerprint, and running a shard's stages.
 *
 * Not for: storing output (mf_snapshot.h) or deciding who computes
 * (mf_catalog.h). Never prints: errors come back as text for the caller.
 */
#ifndef MF_PIPELINE_H
#define MF_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mf_util.h"

#define MF_NAME_MAX 64
#define MF_STDERR_TAIL 4096

/* How inputs go to shards (`assign`): input i of the sorted list to
 * shard i mod shards, or by a hash of its path relative to the spec
 * folder (stable when files are inserted). */
enum mf_assign { MF_ASSIGN_ORDER = 0, MF_ASSIGN_HASH = 1 };

enum mf_identity {
	MF_IDENTITY_STAT = 0, /* relative path, size, mtime */
	MF_IDENTITY_CONTENT = 1, /* SHA-256 of the contents */
};

/* The bytes of records a shuffled batch order may mix at once
 * (`shuffle_window`, docs/spec.md) when the spec sets none: 256 MiB. */
#define MF_SHUFFLE_WINDOW_DEFAULT (256ULL << 20)

/* The bounds of a spec's `identity` command (docs/spec.md): its time,
 * and the bytes of its standard output. */
#define MF_IDENTITY_TIMEOUT_S 10
#define MF_IDENTITY_OUTPUT_MAX 65536

/* Timeout of a stage whose spec sets none, in seconds (24 hours). */
#define MF_STAGE_TIMEOUT_DEFAULT 86400

/* What an item of a stage's `deps` names (docs/spec.md, "stages"). */
enum mf_dep_kind {
	MF_DEP_FILE = 0, /* a regular file */
	MF_DEP_GLOB = 1, /* a glob: the regular files it matches */
	MF_DEP_FOLDER = 2, /* a folder: the regular files under it */
};

struct mf_stage {
	char **argv; /* NULL-terminated, as written in the spec */
	size_t argc;
	char **deps; /* absolute paths of every deps file, item by item: a
			file item itself, a glob's or a folder's files
			sorted bytewise by their relative paths */
	char **deps_rel; /* relative to the spec folder: as written for an
			    item, clean for a file a glob or folder gave */
	size_t n_deps;
	char **dep_items; /* each item of `deps`, clean (spec_clean_rel) */
	enum mf_dep_kind *dep_kinds; /* per item */
	size_t n_dep_items;
	int64_t timeout_s; /* seconds; 0: none (written in the spec);
			      MF_STAGE_TIMEOUT_DEFAULT when not set */
	uint64_t memory; /* RLIMIT_AS of each of its processes; 0: none */
	int nice; /* 1-19: its niceness (never below the caller's); 0: the
		     caller's */
};

/* One variable of the spec's `env`: NAME matches [A-Za-z_][A-Za-z0-9_]*
 * and is not MATFS_*. */
struct mf_env_var {
	char *name;
	char *value;
};

struct mf_spec {
	char *path; /* absolute path of the spec as given: its folder
		       resolved, its name kept (a symlink stays the link) */
	char *dir; /* real folder of the real file (after symlinks): the
		      stages' cwd, where inputs, deps and programs resolve */
	char *name;
	char **input_globs; /* as written */
	size_t n_globs;
	char **inputs; /* matched files, absolute, sorted by inputs_rel */
	char **inputs_rel; /* the same relative to dir */
	size_t n_inputs;
	uint32_t shards; /* resolved: never 0 */
	enum mf_assign assign;
	uint32_t *input_shard; /* with assign: hash, each input's shard */
	enum mf_identity identity;
	struct mf_stage *stages;
	size_t n_stages;
	char *suffix; /* "" when none */
	enum mf_codec codec;
	int level; /* zstd: the highest level a chunk is stored at */
	bool compression_adapt; /* lower the level when compression falls
				   behind the stage (default true) */
	uint64_t chunk_size; /* default 4 MiB */
	int64_t expire_after; /* seconds; -1: never (default) */
	int64_t pending_expiry; /* seconds; default 86400 */
	uint32_t keep; /* 0: no limit (default) */
	char *fingerprint_key; /* NULL unless the spec sets one */
	struct mf_records records; /* `records`; framing MF_FRAMING_NONE
				      when the spec has none */
	uint64_t shuffle_window; /* `shuffle_window`, bytes of records;
				    MF_SHUFFLE_WINDOW_DEFAULT when not set;
				    0 without `records` */
	struct mf_env_var *env; /* `env`, sorted by name; NULL when none */
	size_t n_env;
	char **identity_argv; /* `identity`, NULL-terminated; NULL: none */
	size_t identity_argc;
	uid_t owner_uid; /* owner of the real spec file: whom its stages run
			    as under a root process, and whose rights
			    globs, stat and hashing use */
	gid_t owner_gid;
	char *text; /* the bytes that were parsed, NUL-terminated; NULL
		       for a spec not loaded from a file */
	size_t text_len;
};

/*
 * Loads and validates the spec at path: YAML syntax, unknown keys, types,
 * sizes, durations, codec, name, inputs (glob(3), sorted, at least one
 * file), deps that exist (globs and folders expanded into their files),
 * an `identity` argv, shards <= inputs, at least one stage, and
 * the caps of docs/spec.md ("Limits": file size, YAML anchors, aliases and
 * size with aliases expanded, stages, words, deps, globs, matches), each
 * checked before the work it bounds. A symlink is resolved first and the
 * real path opened without following one, without blocking (a FIFO is
 * refused, never waited on). The ownership rules of docs/security.md
 * ("Loading a spec") apply to the spec, its folders and the symlinks on
 * the way to it, to each deps file and to each stage's program that is
 * found. In a root process the file is opened with the rights of the
 * owner of path (a link's owner), then everything else (realpath, globs,
 * stat, the rules) runs with the real owner's, on the calling thread
 * only; a process that is not root uses its own rights throughout.
 * Returns 0 and *out (free with mf_spec_free), or a negative errno and
 * *err, a malloc'd one-line message "FILE:LINE:COLUMN: what is wrong"
 * (1-based; FILE as given in path) that the caller frees: -EINVAL for a
 * bad spec; -EPERM for one the ownership rules refuse ("FILE: PATH: owned
 * by ...: refused (docs/security.md, ownership)"); -ENOENT, -EACCES,
 * -EFBIG, ... when the file itself cannot be read, then without a
 * position ("FILE: cannot open: ..."; "FILE: not a regular file" is
 * -EINVAL). A message never quotes more of a file that is not a spec than
 * a short key name. err may be NULL. Thread-safe; docs/spec.md lists
 * every key and message.
 */
int mf_spec_load(const char *path, struct mf_spec **out, char **err);
void mf_spec_free(struct mf_spec *spec);

/* Input files of shard k: inputs j with j mod shards == k, in order.
 * *paths is a malloc'd array of borrowed pointers into spec; free it. */
/* The shard input i of spec goes to (`assign`). */
static inline uint32_t mf_spec_input_shard(const struct mf_spec *spec, size_t i)
{
	return spec->assign == MF_ASSIGN_HASH ? spec->input_shard[i]
					      : (uint32_t)(i % spec->shards);
}

int mf_spec_shard_inputs(const struct mf_spec *spec, uint32_t shard,
			 const char ***paths, size_t *n);

/* ---- what a spec depends on, for a watcher (spec_watch.c) ---- */

/* A folder whose entries can change a spec's fingerprint, and which of its
 * entries do: the one called name, or with glob set every entry that name
 * matches as an input glob's component (fnmatch(3) with FNM_PERIOD, as
 * glob(3) matches). */
struct mf_watch_dir {
	char *path; /* absolute, as built from the spec folder (may hold ..) */
	char *name;
	bool glob;
};

struct mf_spec_watch {
	struct mf_watch_dir *dirs; /* sorted by path, no duplicates */
	size_t n_dirs;
	char **files; /* absolute: every deps file, then every input file */
	size_t n_files;
};

/*
 * Lists what the fingerprint of spec depends on, for a watcher:
 * - for each input glob, every folder the glob walks: the spec folder and,
 *   level by level, every folder its folder components match so far, each
 *   with the component that applies to its entries;
 * - for each deps item that is a file or a folder, each folder on its
 *   path from the spec folder with the next component; for a deps glob,
 *   what an input glob gives; for a folder dep, also every folder under
 *   it that the loader walks, with the glob "*";
 * - for each deps file, when it is a symlink, the folder of every link on
 *   the way to the real file and of the real file, with their names (the
 *   same for inputs that are symlinks);
 * - files: the deps and the inputs, whose identity (inode, size, mtime,
 *   ctime) a watcher without events can compare.
 * Folders that do not exist are left out: the folder above them, listed,
 * changes when they appear. Looks at the tree with the spec owner's
 * rights (a root process's calling thread switches to them and back),
 * changes nothing. Returns 0 and *out (release with
 * mf_spec_watch_release), or -ENOMEM. Thread-safe.
 */
int mf_spec_watch_list(const struct mf_spec *spec, struct mf_spec_watch *out);
/* Frees what *w holds and empties it; NULL does nothing. */
void mf_spec_watch_release(struct mf_spec_watch *w);

/* ---- fingerprint ---- */

#define MF_FINGERPRINT_SCHEME 1

struct mf_fp_part {
	char *label; /* "scheme", "shards", "stage[0].argv",
			"stage[0].deps[tokenize.py]", "input[raw/a.jsonl]", "key" */
	char *detail; /* human text: "size=12 mtime=1700000000.123456789" */
	char hex[MF_FP_HEX_LEN + 1]; /* SHA-256 of the component */
};

struct mf_fingerprint {
	char hex[MF_FP_HEX_LEN + 1];
	struct mf_fp_part *parts;
	size_t n_parts;
};

/*
 * Computes the fingerprint of spec as docs/spec.md defines it (reads deps
 * files, and inputs with identity content, with the spec owner's rights as
 * mf_spec_watch_list; runs the spec's `identity` command, unless it has a
 * fixed key, as its owner within MF_IDENTITY_TIMEOUT_S seconds and
 * MF_IDENTITY_OUTPUT_MAX bytes). Returns 0, or -errno when a file cannot
 * be read, with *err naming it, or when the identity command fails (-EIO
 * for a status other than 0, -ETIME past its bound, -ETIMEDOUT past
 * the thread's deadline (mf_deadline_set), -EFBIG, -ENOENT, ...: "SPEC:
 * identity (WORDS): exited with status 1: LAST LINE OF STDERR"; caller
 * frees). Release with mf_fingerprint_release.
 */
int mf_fingerprint_compute(const struct mf_spec *spec,
			   struct mf_fingerprint *out, char **err);
void mf_fingerprint_release(struct mf_fingerprint *fp);

#define MF_SHARD_FINGERPRINT_SCHEME 1

/*
 * The fingerprint of shard `shard` alone (docs/spec.md, "The shard
 * fingerprint"), from fp computed from spec: the parts that can change
 * that shard's bytes (env, identity, every stage's argv and deps, the
 * shard's index
 * and its own inputs; with a fixed key, the key, shards and the index),
 * without `shards`, `records`, `shuffle_window` or the other shards'
 * inputs. Reads nothing. -EINVAL for a shard out of range or fp not of
 * spec.
 */
int mf_fingerprint_shard(const struct mf_spec *spec,
			 const struct mf_fingerprint *fp, uint32_t shard,
			 char hex[MF_FP_HEX_LEN + 1]);

/*
 * Checks that what shard `shard` is computed from - every deps file and the
 * shard's own input files - still hashes as it did in fp (computed from the
 * same spec), reading them with the spec owner's rights. Cheaper than recomputing the whole fingerprint: only this
 * shard's inputs are read. Returns 0, -ESTALE with *err naming the first
 * component that changed, or -errno (a file vanished) with *err. With a
 * fixed fingerprint key there is nothing to check: 0.
 */
int mf_fingerprint_check_shard(const struct mf_spec *spec,
			       const struct mf_fingerprint *fp, uint32_t shard,
			       char **err);

/* An input file as its identity was checked: what no one can set back
 * (inode, ctime) and its size then. The input feeder delivers exactly
 * size bytes of it while it stays so, or fails the job with
 * mf_job_result.input_changed. */
struct mf_input_guard {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec ctime;
	/* identity content: the feeder also hashes what it delivers and
	 * fails the job unless it is the content the fingerprint hashed
	 * (a page changed through a writable mapping moves no ctime):
	 * XXH3-128 with a random seed of the bytes as hashed */
	bool hashed;
	uint64_t seed;
	uint8_t digest[16];
};

/*
 * mf_fingerprint_check_shard, also giving *guards (caller frees; NULL
 * with a fixed fingerprint key), one per input of the shard in order: the
 * files as they were when they were checked. An input with identity
 * content whose file changed while it was hashed is -ESTALE too.
 */
int mf_fingerprint_guard_shard(const struct mf_spec *spec,
			       const struct mf_fingerprint *fp, uint32_t shard,
			       struct mf_input_guard **guards, size_t *n,
			       char **err);

/* ---- running a shard's stages ---- */

struct mf_job_result {
	bool ok; /* every stage exited 0 (see mf_job_finish for SIGPIPE) */
	int failed_stage; /* index of the stage that failed; -1 none, the
				 input feeder, a failed mf_job_read or a
				 process left running */
	int wait_status; /* its waitpid status; -1 none */
	bool timed_out;
	char error[512]; /* one line: "stage 1 'python3' exited with
				 status 3", "stage 0 'sh' killed by signal 9
				 (SIGKILL)", "stage 0 'sh' timed out after
				 2s", "input 'PATH': No such file or
				 directory", "process 42 'sleep' was still
				 running after every stage exited", "stage
				 0: killed: memory limit (8GiB) reached"
				 (mf_job_cgroup_setup); "" when ok */
	char stderr_tail[MF_STDERR_TAIL + 1]; /* failing stage's last stderr */
	/* the job failed because an input guarded by mf_job_start_guarded
	 * was not the file it was checked as, or was read short: error says
	 * which ("input 'PATH' changed while it was read: ..."); the output
	 * is no one's, and the same job may be run again */
	bool input_changed;
};

struct mf_job;

/* Receives one line for the daemon's log; called from any thread. */
typedef void (*mf_job_log_fn)(void *arg, const char *msg);

/*
 * Chooses where a stage with `memory` gets a cgroup v2 memory limit on its
 * whole process tree (docs/security.md): a child cgroup of base per stage,
 * "matfs-PID-SHARD-N", with memory.max the stage's `memory` and
 * memory.swap.max 0, joined by the stage before execve and removed after
 * it; a stage the OOM killer hit in it fails with "stage N: killed: memory
 * limit (8GiB) reached". base must be a cgroup v2 folder that may have
 * children with the memory controller: its cgroup.subtree_control lists
 * memory, or "+memory" is written to it (which the kernel refuses while
 * the folder holds processes: a delegated cgroup the daemon is not in).
 * base NULL: the caller's own cgroup (the "0::" line of /proc/self/cgroup
 * under the "cgroup2" mount of /proc/self/mountinfo), only when running as
 * root; that works where the caller is in a root cgroup (a container's
 * own cgroup namespace, say).
 * Returns 0, or -errno: every stage's `memory` is then RLIMIT_AS per
 * process, as without this call. Why a stage with `memory` falls back to
 * RLIMIT_AS (this setup failed, or its own cgroup could not be made) is
 * passed to log (may be NULL) once, by the first such stage; base NULL
 * without root is not logged. Returns -EPERM for that, -ENOENT for no
 * cgroup v2 or a folder without cgroup.subtree_control, or the errno of
 * enabling memory there (-EBUSY: it holds processes).
 * Not thread-safe: call before starting any job; a later call replaces
 * the earlier choice.
 */
int mf_job_cgroup_setup(const char *base, mf_job_log_fn log, void *arg);

/*
 * The guard (pipeline/job_guard.c): a process, a child of this one,
 * started by the first job, that SIGKILLs the sessions of the stages and
 * feeders this process leaves running when it dies without ending its
 * jobs (kill -9, a crash), then exits. mf_job_guard_start starts it now
 * (idempotent; 0 or -errno: jobs then run unguarded) and keeps one
 * descriptor open for it; mf_job_guard_pid is its pid, 0 when none runs.
 * A caller that reaps children with waitpid(-1) must leave this one be.
 */
int mf_job_guard_start(void);
pid_t mf_job_guard_pid(void);

/*
 * Starts the stages of shard `shard` (fork + execve, argv[0] looked up in
 * the stages' PATH before the fork, never a shell), chained by pipes, all
 * in one new process group, cwd the spec folder, with a clean environment
 * (docs/security.md): PATH=/usr/local/bin:/usr/bin:/bin; HOME, USER and
 * LOGNAME of the user the stages run as; LANG, LC_* and TMPDIR when the
 * caller has them; then spec->env, which may replace any of those; then
 * MATFS_SHARD, MATFS_SHARDS, MATFS_INPUTS (absolute paths, one per line,
 * no newline after the last) and MATFS_FINGERPRINT (fp_hex). Nothing else
 * of the caller's environment passes. Each stage gets RLIMIT_NOFILE 4096
 * and RLIMIT_NPROC 16384 (or the caller's hard limits when lower), its
 * `memory` as a cgroup (mf_job_cgroup_setup) or else RLIMIT_AS, and its
 * `nice`. A feeder child writes the shard's
 * input files, concatenated in order, to the first stage's stdin. When
 * the caller runs as root and spec->owner_uid is not 0, stages and feeder
 * switch to owner_uid, owner_gid and that user's groups before touching
 * anything.
 * Before anything starts, each stage's program is found (with the rights
 * of the user the stages run as) and it, each deps file and the spec
 * folder pass the ownership rules of docs/security.md again: files change
 * between load and run.
 * Returns 0 or -errno with *err, a malloc'd line the caller frees (err may
 * be NULL): -ENOENT "stage N: 'prog' not found in PATH", -EACCES for a
 * program that is not executable, -EPERM "stage N: PATH: owned by ...:
 * refused (docs/security.md, ownership)" (or "DIR: ..." for the spec
 * folder), -EINVAL for a shard out of range, the
 * errno of a failed execve or chdir ("stage N: cannot run 'PATH': ..."),
 * after which no process of the job is left.
 * A job belongs to one thread at a time; jobs in different threads run at
 * once (no signal handler, no SIGCHLD, no global state but the guard; the
 * caller must not reap children it did not start, e.g. with waitpid(-1)).
 */
int mf_job_start(const struct mf_spec *spec, uint32_t shard, const char *fp_hex,
		 struct mf_job **out, char **err);

/* mf_job_start whose feeder checks each input against guards[k] (n of
 * them, one per input of the shard, from mf_fingerprint_guard_shard; NULL:
 * none) when it opens it and when it reached its end or stage 0 stopped
 * reading: the same inode and ctime and, at the end, exactly size bytes
 * delivered; otherwise the job fails with input_changed. */
int mf_job_start_guarded(const struct mf_spec *spec, uint32_t shard,
			 const char *fp_hex,
			 const struct mf_input_guard *guards, size_t n,
			 struct mf_job **out, char **err);

/*
 * Reads the last stage's stdout as it comes. Returns bytes read, 0 at the
 * end of output, or -ETIMEDOUT once a stage's timeout passed (the whole
 * process group has then been killed), -ECANCELED after mf_job_kill, or
 * -errno (the job then fails). The end of output is the pipe's end of
 * file: every writer closed it, background children of the last stage
 * included, even after the stage itself exited; the last stage's timeout
 * holds until then. stderr of every stage is drained meanwhile so no
 * stage blocks on it.
 */
ssize_t mf_job_read(struct mf_job *j, void *buf, size_t len);

/*
 * records: index: the bytes the last stage wrote to its descriptor 3 (a
 * pipe the job drains while the output is read, so neither blocks the
 * stage), read until every writer closed it or every stage exited. Call
 * after mf_job_read returned 0. *buf is the job's, valid until
 * mf_job_finish. Returns 0, -ETIMEDOUT, -EFBIG past 1 GiB, -errno. A
 * spec without records: index gives 0 bytes.
 */
int mf_job_read_index(struct mf_job *j, const uint8_t **buf, size_t *len);

/* Kills every process of the job (SIGKILL): each stage and the feeder
 * lead a session and process group of their own, and each group is
 * killed. The job must still be finished; both work at any point after
 * mf_job_start. */
void mf_job_kill(struct mf_job *j);

/* mf_job_kill for another thread than the job's: it reads only what
 * mf_job_start set, and may be called until mf_job_finish begins (the
 * caller orders the two). mf_job_read then ends as if the stages died. */
void mf_job_stop(const struct mf_job *j);

/* Whether sid is the session of one of the job's processes (each stage
 * and the feeder lead one; their children stay in it). Any thread, under
 * the same rule as mf_job_stop. */
bool mf_job_has_session(const struct mf_job *j, pid_t sid);

/*
 * Waits for every stage of the job; then any other process of its process
 * group still running (a background child no stage waited for) fails the
 * job. Kills what is left of the group and waits (at most a few seconds)
 * for it to exit, fills *res (may be NULL) and frees j.
 * Output not read yet is discarded (a stage still writing gets SIGPIPE).
 * Timeouts still apply while it waits. A stage killed by SIGPIPE is not a
 * failure when the last stage exited 0 (`head -c N` as the last stage);
 * otherwise the error names the first stage, by index, that failed for
 * another reason than SIGPIPE (a SIGPIPE death is the consequence of a
 * later failure), with stderr_tail that stage's last stderr bytes.
 * Returns 0 when res->ok, -EIO otherwise.
 */
int mf_job_finish(struct mf_job *j, struct mf_job_result *res);

#endif
