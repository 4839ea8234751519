/*
 * job_i.h - private parts of the stage runner shared by job.c (starting),
 * job_plan.c (what to start), job_child.c (code run after fork),
 * job_io.c (reading, polling, timeouts, reaping), job_stray.c (what the
 * stages left running), job_cgroup.c (a stage's cgroup v2 memory limit),
 * job_guard.c (what kills the stages when this process dies), job_watch.c
 * (the names on the way to the inputs, watched while the stages run) and
 * job_finish.c (the result).
 *
 * Not for: anything outside pipeline/job*.c; the contract is the job part
 * of mf_pipeline.h.
 */
#ifndef MF_JOB_I_H
#define MF_JOB_I_H

#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "mf_pipeline.h"

/* Exit status of a stage child that could not set itself up or exec, as a
 * shell's; the report pipe says why. */
#define JOB_EXEC_EXIT 127
/* Exit status of the feeder when it failed (EX_NOINPUT); its report pipe
 * says why. EPIPE from stage 0 is not a failure: the feeder exits 0. */
#define JOB_FEED_EXIT 66

/* What a child writes on its report pipe before it gives up. */
enum job_report_kind {
	JOB_REPORT_NONE = 0,
	JOB_REPORT_SETUP, /* stage: its session, pipes, limits or keyring;
			     feeder: its session or keyring */
	JOB_REPORT_CREDS, /* stage or feeder: switching to the spec owner */
	JOB_REPORT_CHDIR, /* stage: entering the spec folder */
	JOB_REPORT_EXEC, /* stage: execve */
	JOB_REPORT_INPUT, /* feeder: opening or reading input `index` */
	JOB_REPORT_WRITE, /* feeder: writing stage 0's stdin, not EPIPE */
	JOB_REPORT_CHANGED, /* feeder: input `index` is not the file guarded:
			       err 0 another file, ctime or size at the open,
			       EIO changed while read, ENODATA read short
			       (got of want bytes) */
};

/* One record, written with a single write(2) (< PIPE_BUF: atomic). */
struct job_report {
	int32_t kind; /* enum job_report_kind */
	int32_t index; /* stage index, or input index for the feeder */
	int32_t err; /* errno */
	int64_t got, want; /* JOB_REPORT_CHANGED: bytes read, and expected */
};

/* Who the children become before exec when the daemon runs as root. */
struct job_creds {
	bool drop;
	uid_t uid;
	gid_t gid;
	gid_t *groups; /* supplementary groups, owned */
	size_t n_groups;
};

/* Limits a stage child sets on itself before exec (docs/spec.md). */
struct job_limits {
	rlim_t nofile; /* RLIMIT_NOFILE, soft and hard */
	rlim_t nproc; /* RLIMIT_NPROC, soft and hard */
	rlim_t as; /* RLIMIT_AS, soft and hard; 0: left alone */
	int nice; /* niceness to set; 0: left alone */
};

/* Everything mf_job_start computes before forking; children read it from
 * their copy of memory, so they never allocate. */
struct job_plan {
	char **paths; /* resolved program of each stage, owned */
	size_t n_paths; /* of paths; 0: one per stage */
	char **envp; /* NULL-terminated, every entry owned */
	size_t n_env, env_cap; /* entries in envp, and room for */
	const char **inputs; /* this shard's input files, borrowed */
	const struct mf_input_guard *guards; /* n_inputs of them, borrowed;
						NULL: unguarded */
	size_t n_inputs;
	struct job_creds creds;
	struct job_limits *limits; /* one per stage, owned */
	int inputs_fd; /* sealed memfd of the input list, owned; -1 */
	char *inputs_dir; /* the folder of MATFS_INPUTS_FILE, owned until
			     the job takes it; NULL: none (/proc/self/fd/4) */
	int max_fd; /* bound for closing fds when close_range is missing */
};

/*
 * A stage's own cgroup v2, holding its whole process tree under its
 * `memory` (job_cgroup.c): made by the parent before the fork, joined by
 * the stage child before execve, read and removed after the stage.
 */
struct job_cgroup {
	char *path; /* its folder, owned; NULL: none (RLIMIT_AS applies) */
	int procs_fd; /* its cgroup.procs, open for writing until the stage
			 is forked; -1 after */
	uint64_t max; /* memory.max, bytes */
	uint64_t oom_kills; /* memory.events oom_kill, read at the end */
};

/* The descriptor every stage gets its shard's input list on
 * (MATFS_INPUTS_FILE). 3 is left free: it is the one a stage is most
 * likely to use for a file of its own, but for the last stage of a spec
 * with records: index, where it is the pipe of record ends. */
#define JOB_INDEX_FD 3
/* The most bytes of record ends a job keeps (2^27 records). */
#define JOB_INDEX_MAX (1U << 30)
#define JOB_INPUTS_FD 4
/* The list's file in the job's folder (MATFS_INPUTS_FILE). */
#define JOB_INPUTS_NAME "inputs"
#define JOB_INPUTS_FD_STR "4"

/* What a stage child needs between fork and execve. */
struct job_exec {
	int in_fd, out_fd, err_fd, report_fd;
	int index_fd; /* write end of the record ends pipe: the last stage
			 of records: index only; -1 otherwise */
	int inputs_fd; /* the plan's, to become JOB_INPUTS_FD */
	int index;
	const char *dir;
	const char *path;
	char *const *argv;
	char *const *envp;
	const struct job_creds *creds;
	const struct job_limits *limits;
	int cg_fd; /* cgroup.procs of its cgroup, or -1: RLIMIT_AS instead */
	int guard_fd; /* job_guard_fd's, or -1 */
	int max_fd;
};

/* What the feeder child needs. */
struct job_feed {
	int out_fd, report_fd;
	const char *const *inputs;
	const struct mf_input_guard *guards; /* or NULL */
	size_t n_inputs;
	const struct job_creds *creds;
	int guard_fd; /* job_guard_fd's, or -1 */
	int max_fd;
};

/* Last MF_STDERR_TAIL bytes of a stream. */
struct job_ring {
	char buf[MF_STDERR_TAIL];
	size_t pos; /* where the next byte goes */
	size_t fill; /* bytes held, at most MF_STDERR_TAIL */
};

struct job_proc {
	char *name; /* argv[0] as written, owned */
	int64_t timeout_s; /* 0: none */
	pid_t pid; /* 0 before fork */
	int pidfd; /* wakes poll when it exits; -1 when unavailable */
	int err_fd; /* read end of its stderr pipe; -1 once closed */
	bool exited; /* exit seen (still unreaped until finish) */
	bool reaped;
	int status; /* wait status once exited; -1 unknown */
	struct job_cgroup cg;
	struct job_ring tail;
};

/* How many of the processes a job left behind are waited for one by one
 * (job_stray.c); any more are killed with the group all the same. */
#define JOB_STRAY_WAIT 8

/* Processes of the job's group still running once every stage exited:
 * background children a stage did not wait for. */
struct job_strays {
	size_t n; /* found */
	pid_t first; /* the first one found, for the message */
	char name[16]; /* its command name, from /proc */
	int pidfd[JOB_STRAY_WAIT]; /* to wait for them; -1 when unused */
};

/* The names on the way to a job's inputs, watched while it runs
 * (job_watch.c). */
struct job_watch {
	bool changed; /* an entry walked was created, removed or renamed */
	size_t n_entries; /* (folder, name) pairs walked */
	char what[400]; /* the first change seen, cut to fit */
};

/*
 * A running job. Owned by one thread at a time (but for mf_job_stop);
 * nothing here is shared between jobs. Each child leads a session and a
 * process group of its own, whose id is its pid. Children are never
 * reaped before mf_job_finish, so none of those ids can be reused while
 * job_kill_all may still be called.
 */
struct mf_job {
	size_t n; /* stages */
	struct job_proc *st;
	pid_t feeder; /* 0 until forked */
	int feeder_status; /* -1 until reaped */
	int report_fd; /* read end of the feeder's report pipe, or -1 */
	char **inputs; /* the shard's input paths, owned, for messages */
	size_t n_inputs;
	/* n_inputs guards, owned, or NULL: checked again once the stages
	 * ended, for stages that read an input by its path */
	struct mf_input_guard *guards;
	bool watching; /* watch holds the guarded inputs' paths */
	struct job_watch watch;
	int out_fd; /* read end of the last stage's stdout, or -1 */
	bool out_hup; /* the output has no writer left: the rest is buffered */
	uint64_t start_ns; /* mf_mono_ns at start: timeouts count from it */
	size_t n_running; /* stages not seen exiting */
	bool killed; /* mf_job_kill was called */
	bool timed_out;
	int read_err; /* errno of a failed mf_job_read: the output is cut */
	int timeout_stage; /* stage whose timeout passed, when timed_out */
	uint64_t reads; /* mf_job_read calls that went to read(2) */
	struct job_strays strays; /* left running after the stages exited */
	struct pollfd *pfd; /* scratch for poll: 2n + 3 entries */
	int index_fd; /* read end of the last stage's fd 3 (records:
			 index), or -1 */
	uint8_t *index; /* what came on it so far */
	size_t index_len, index_cap;
	int index_err; /* a failed read, or -EFBIG past JOB_INDEX_MAX */
	long raised_pages; /* held in data pipes raised past 64 KiB (job.c) */
	char *inputs_dir; /* the plan's, removed by job_free; or NULL */
};

/* Gives back the pages a job's raised data pipes held (job_free). */
void job_pipes_release(long pages);

/* job_plan.c */
/* Removes the folder of MATFS_INPUTS_FILE and frees dir (NULL: none). */
void job_inputs_dir_remove(char *dir);
int job_plan_init(struct job_plan *plan, const struct mf_spec *spec,
		  uint32_t shard, const char *fp_hex, char **err);
void job_plan_release(struct job_plan *plan, const struct mf_spec *spec);
/* The plan of spec's identity command (spec_identity.c): the owner's
 * credentials, the stages' clean environment without MATFS_*, the
 * stages' limits (limits[0]) and its program (paths[0]), found and
 * checked with the spec folder under the ownership rules as a stage's
 * are (-ENOENT, -EACCES, -EPERM with *err). Release with
 * job_plan_release, also on failure. */
int job_plan_identity(struct job_plan *plan, const struct mf_spec *spec,
		      char **err);

/* job_child.c: never return, async-signal-safe only */
_Noreturn void job_child_exec(const struct job_exec *x);
_Noreturn void job_child_feed(const struct job_feed *f);

/* job_io.c */
int job_wait_events(struct mf_job *j, bool with_out, bool wait);
void job_drain_stderr(struct mf_job *j);
/* Reads what is waiting on the record ends pipe (non-blocking). */
void job_drain_index(struct mf_job *j);
/* SIGKILL to every child and to every process group they lead; any
 * thread, before job_reap_all (it reads only what mf_job_start set). */
void job_kill_all(const struct mf_job *j);
bool job_in_groups(const struct mf_job *j, pid_t sid);
void job_reap_all(struct mf_job *j);
void job_free(struct mf_job *j);

/* job_stray.c */
void job_strays_init(struct job_strays *s);
void job_find_strays(struct mf_job *j);
void job_end_strays(struct mf_job *j);

/* job_cgroup.c */
void job_cgroups_make(struct mf_job *j, const struct mf_spec *spec,
		      uint32_t shard);
void job_cgroups_end(struct mf_job *j);
/* Undoes mf_job_cgroup_setup: stages use RLIMIT_AS again, nothing was
 * logged yet (tests call it between cases). Not thread-safe. */
void job_cgroup_forget(void);

/* job_guard.c: the guard's socket (started on first use), or -1 */
int job_guard_fd(void);
/* In a child after setsid, before it execs or closes fd: the guard holds
 * its session. Async-signal-safe. */
void job_guard_add(int fd);
/* Once the job's children were reaped: the guard forgets session sid. */
void job_guard_del(pid_t sid);
/* job_watch.c */
/* Watches every entry a walk of each of the n paths goes through, from
 * now until job_watch_end. 0, or -errno with *err saying why. */
int job_watch_start(struct job_watch *w, char *const *paths, size_t n,
		    char **err);
/* Stops watching; true when a walked entry changed since the start, with
 * what (len bytes) naming the first one. */
bool job_watch_end(struct job_watch *w, char *what, size_t len);
/* The process's inotify descriptor, for poll (-1 before the first
 * watch), and what a wake-up on it calls: hands out what is queued. */
int job_watch_fd(void);
void job_watch_drain(void);

/* job_finish.c */
const char *job_strerror(int err);
/* "exited with status 3", "killed by signal 9 (SIGKILL)" into buf. */
void job_describe_status(int status, char *buf, size_t len);

#endif
