/*
 * job.c - starting a shard's stages: mf_job_start creates the pipes, forks
 * every stage and the input feeder, each into a new session of its own
 * (so with no controlling terminal: job_child.c) that the guard holds
 * (job_guard.c), and checks that every stage reached execve.
 *
 * Layout of one job with n stages:
 *
 *   feeder -> [data 0] -> stage 0 -> [data 1] -> ... -> stage n-1
 *          -> [data n] -> parent (mf_job_read)
 *   stage i 2> [err i] -> parent (a ring keeps the tail)
 *
 * Not for: reading, waiting or the result (job_io.c, job_finish.c), what
 * runs in the children (job_child.c), resolving programs and building the
 * environment (job_plan.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <unistd.h>

#include "job_i.h"

/* Descriptors that exist only while the children are forked. Parent ends
 * kept by the job are moved out (set to -1) before spawn_close. */
struct spawn {
	int *data; /* 2(n+1): data[2i] read end, data[2i+1] write end */
	int *err; /* 2n: the same for each stage's stderr */
	int exec[2]; /* stages' reports; EOF once all of them exec'd */
	int feed[2]; /* the feeder's report */
	int index[2]; /* the last stage's record ends (records: index) */
	size_t n_fds;
};

static void spawn_close(struct spawn *s)
{
	for (size_t k = 0; k < 2 * (s->n_fds + 1); k++)
		if (s->data && s->data[k] >= 0)
			close(s->data[k]);
	for (size_t k = 0; k < 2 * s->n_fds; k++)
		if (s->err && s->err[k] >= 0)
			close(s->err[k]);
	for (size_t k = 0; k < 2; k++) {
		if (s->exec[k] >= 0)
			close(s->exec[k]);
		if (s->feed[k] >= 0)
			close(s->feed[k]);
		if (s->index[k] >= 0)
			close(s->index[k]);
	}
	free(s->data);
	free(s->err);
}

/* The data pipes' capacity: with the kernel's 64 KiB, feeding a stage
 * 64 MiB switched context 1,000 times each way and took twice as long
 * (docs/performance.md, bench/cold). */
#define DATA_PIPE_SIZE (1 << 20)

/*
 * Pages this process holds in the data pipes it raised. Every pipe of the
 * daemon's user counts against fs.pipe-user-pages-soft, and past it the
 * kernel gives each new pipe of that user 2 pages, the user's own shell
 * pipelines included. So raised pipes stay within a quarter of that
 * limit, all jobs together; the others keep the kernel's 64 KiB.
 */
static atomic_long raised_pages;
static long raise_budget = 0; /* pages; set once by budget_init */
static pthread_once_t budget_once = PTHREAD_ONCE_INIT;

static void budget_init(void)
{
	char buf[32] = "";
	int fd =
	    open("/proc/sys/fs/pipe-user-pages-soft", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return; /* unknown: nothing raised */
	buf[n] = '\0';
	long soft = strtol(buf, NULL, 10);
	raise_budget = soft == 0 ? LONG_MAX : soft / 4;
}

/* Raises fd's pipe to DATA_PIPE_SIZE when the budget allows; j counts what
 * it holds until job_free gives it back (job_pipes_release). */
static void raise_pipe(struct mf_job *j, int fd)
{
	long pages = DATA_PIPE_SIZE / sysconf(_SC_PAGESIZE);
	(void)pthread_once(&budget_once, budget_init);
	if (atomic_fetch_add(&raised_pages, pages) + pages > raise_budget ||
	    fcntl(fd, F_SETPIPE_SZ, DATA_PIPE_SIZE) < 0) {
		atomic_fetch_sub(&raised_pages, pages);
		return;
	}
	j->raised_pages += pages;
}

void job_pipes_release(long pages)
{
	atomic_fetch_sub(&raised_pages, pages);
}

static int open_pipe(int fds[2], bool nonblock_read)
{
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	/* The read end is its own open file description: O_NONBLOCK on it
	 * does not reach the child's write end. */
	if (nonblock_read && fcntl(fds[0], F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static int spawn_open(struct spawn *s, struct mf_job *j, bool index)
{
	size_t n = j->n;
	int rc = 0;

	memset(s, 0, sizeof *s);
	s->exec[0] = s->exec[1] = s->feed[0] = s->feed[1] = -1;
	s->index[0] = s->index[1] = -1;
	s->data = malloc(2 * (n + 1) * sizeof *s->data);
	s->err = malloc(2 * n * sizeof *s->err);
	if (!s->data || !s->err) {
		free(s->data);
		free(s->err);
		s->data = s->err = NULL;
		return -ENOMEM;
	}
	s->n_fds = n;
	memset(s->data, -1, 2 * (n + 1) * sizeof *s->data);
	memset(s->err, -1, 2 * n * sizeof *s->err);
	for (size_t k = 0; k <= n && rc == 0; k++) {
		rc = open_pipe(&s->data[2 * k], k == n);
		if (rc == 0)
			raise_pipe(j, s->data[2 * k]);
	}
	for (size_t k = 0; k < n && rc == 0; k++)
		rc = open_pipe(&s->err[2 * k], true);
	if (rc == 0)
		rc = open_pipe(s->exec, false);
	if (rc == 0)
		rc = open_pipe(s->feed, true);
	if (rc == 0 && index)
		rc = open_pipe(s->index, true);
	return rc;
}

static int fork_stage(struct mf_job *j, struct spawn *s,
		      const struct job_plan *plan, const struct mf_spec *spec,
		      size_t i)
{
	struct job_exec x = {
	    .in_fd = s->data[2 * i],
	    .out_fd = s->data[2 * (i + 1) + 1],
	    .err_fd = s->err[2 * i + 1],
	    .report_fd = s->exec[1],
	    .index_fd = i + 1 == j->n ? s->index[1] : -1,
	    .inputs_fd = -1,
	    .index = (int)i,
	    .dir = spec->dir,
	    .path = plan->paths[i],
	    .argv = spec->stages[i].argv,
	    .envp = plan->envp,
	    .creds = &plan->creds,
	    .limits = &plan->limits[i],
	    .cg_fd = j->st[i].cg.procs_fd,
	    .guard_fd = job_guard_fd(),
	    .max_fd = plan->max_fd,
	};
	/* a description of its own, read-only: a stage reading descriptor 4
	 * itself moves no other stage's offset */
	char self[32];
	snprintf(self, sizeof self, "/proc/self/fd/%d", plan->inputs_fd);
	x.inputs_fd = open(self, O_RDONLY | O_CLOEXEC);
	if (x.inputs_fd < 0)
		return -errno;
	pid_t pid = fork();

	if (pid == 0)
		job_child_exec(&x);
	int fork_errno = errno;
	close(x.inputs_fd);
	if (pid < 0)
		return -fork_errno;
	if (j->st[i].cg.procs_fd >= 0) {
		close(j->st[i].cg.procs_fd);
		j->st[i].cg.procs_fd = -1;
	}
	j->st[i].pid = pid;
	j->st[i].pidfd = pidfd_open(pid, 0);
	j->n_running++;
	return 0;
}

static int fork_feeder(struct mf_job *j, struct spawn *s,
		       const struct job_plan *plan)
{
	struct job_feed f = {
	    .out_fd = s->data[1],
	    .report_fd = s->feed[1],
	    .inputs = plan->inputs,
	    .guards = plan->guards,
	    .n_inputs = plan->n_inputs,
	    .creds = &plan->creds,
	    .guard_fd = job_guard_fd(),
	    .max_fd = plan->max_fd,
	};
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0)
		job_child_feed(&f);
	j->feeder = pid;
	return 0;
}

/* Forks every child with all signals blocked, so that no handler of the
 * caller runs in a child before it reset the dispositions. */
static int fork_all(struct mf_job *j, struct spawn *s,
		    const struct job_plan *plan, const struct mf_spec *spec)
{
	sigset_t all, old;
	int rc = 0;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (size_t i = 0; i < j->n && rc == 0; i++)
		rc = fork_stage(j, s, plan, spec, i);
	if (rc == 0)
		rc = fork_feeder(j, s, plan);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* Keeps the parent's ends in the job and closes the children's. */
static void keep_parent_ends(struct mf_job *j, struct spawn *s)
{
	j->out_fd = s->data[2 * j->n];
	s->data[2 * j->n] = -1;
	for (size_t i = 0; i < j->n; i++) {
		j->st[i].err_fd = s->err[2 * i];
		s->err[2 * i] = -1;
	}
	j->report_fd = s->feed[0];
	s->feed[0] = -1;
	j->index_fd = s->index[0];
	s->index[0] = -1;
}

static char *report_text(const struct job_report *r, const struct mf_spec *spec,
			 const struct job_plan *plan)
{
	size_t i = (size_t)r->index;
	const char *e = job_strerror(r->err);
	char *msg = NULL;
	int rc;

	if (r->kind == JOB_REPORT_CHDIR)
		rc = asprintf(&msg, "stage %zu: cannot enter '%s': %s", i,
			      spec->dir, e);
	else if (r->kind == JOB_REPORT_CREDS)
		rc = asprintf(&msg, "stage %zu: cannot switch to uid %u: %s", i,
			      (unsigned)plan->creds.uid, e);
	else if (r->kind == JOB_REPORT_EXEC)
		rc = asprintf(&msg, "stage %zu: cannot run '%s': %s", i,
			      plan->paths[i], e);
	else
		rc = asprintf(&msg, "stage %zu: cannot set up: %s", i, e);
	return rc < 0 ? NULL : msg;
}

/* Reads the stages' reports until every one of them exec'd or died (EOF:
 * the write ends are close-on-exec). Returns 0, or the first failure's
 * -errno with *err set. */
static int check_exec(int fd, const struct mf_spec *spec,
		      const struct job_plan *plan, char **err)
{
	struct job_report r, first = {0};

	for (;;) {
		ssize_t got = read(fd, &r, sizeof r);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			break;
		if (got == (ssize_t)sizeof r && first.kind == JOB_REPORT_NONE &&
		    r.index >= 0 && (size_t)r.index < spec->n_stages)
			first = r;
	}
	if (first.kind == JOB_REPORT_NONE)
		return 0;
	*err = report_text(&first, spec, plan);
	return first.err > 0 ? -first.err : -EIO;
}

/* Copies the shard's input paths for the feeder's error message. */
static int keep_inputs(struct mf_job *j, const struct job_plan *plan)
{
	j->inputs = calloc(plan->n_inputs + 1, sizeof *j->inputs);
	if (!j->inputs)
		return -ENOMEM;
	for (size_t k = 0; k < plan->n_inputs; k++) {
		j->inputs[k] = strdup(plan->inputs[k]);
		if (!j->inputs[k])
			return -ENOMEM;
		j->n_inputs = k + 1;
	}
	if (plan->guards && plan->n_inputs > 0) {
		j->guards = malloc(plan->n_inputs * sizeof *j->guards);
		if (!j->guards)
			return -ENOMEM;
		memcpy(j->guards, plan->guards,
		       plan->n_inputs * sizeof *j->guards);
	}
	return 0;
}

static int job_alloc(const struct mf_spec *spec, struct mf_job **out)
{
	struct mf_job *j = calloc(1, sizeof *j);

	if (!j)
		return -ENOMEM;
	j->n = spec->n_stages;
	j->out_fd = j->report_fd = j->index_fd = -1;
	j->feeder_status = -1;
	job_strays_init(&j->strays);
	j->st = calloc(j->n, sizeof *j->st);
	j->pfd = calloc(2 * j->n + 3, sizeof *j->pfd);
	if (!j->st || !j->pfd)
		goto fail;
	for (size_t i = 0; i < j->n; i++)
		j->st[i].pidfd = j->st[i].err_fd = j->st[i].cg.procs_fd = -1;
	for (size_t i = 0; i < j->n; i++) {
		j->st[i].status = -1;
		j->st[i].timeout_s = spec->stages[i].timeout_s;
		j->st[i].name = strdup(spec->stages[i].argv[0]);
		if (!j->st[i].name)
			goto fail;
	}
	*out = j;
	return 0;
fail:
	job_free(j);
	return -ENOMEM;
}

/* Forks everything; on failure kills and reaps what was forked. */
static int spawn_job(struct mf_job *j, const struct mf_spec *spec,
		     const struct job_plan *plan, char **err)
{
	struct spawn s;
	int rc;

	rc = spawn_open(&s, j, spec->records.framing == MF_FRAMING_INDEX);
	if (rc < 0)
		goto close_fds;
	j->start_ns = mf_mono_ns();
	rc = fork_all(j, &s, plan, spec);
	keep_parent_ends(j, &s);
	/* Close the children's ends, the exec reports' write end above all,
	 * before waiting for its EOF. */
	close(s.exec[1]);
	s.exec[1] = -1;
	if (rc == 0)
		rc = check_exec(s.exec[0], spec, plan, err);
close_fds:
	spawn_close(&s);
	if (rc < 0)
		job_reap_all(j);
	return rc;
}

static int check_args(const struct mf_spec *spec, uint32_t shard, char **err)
{
	if (!spec->dir || !spec->stages || spec->n_stages == 0 ||
	    spec->n_stages > INT32_MAX || (spec->n_inputs && !spec->inputs))
		return -EINVAL;
	if (shard >= spec->shards) {
		if (asprintf(err, "shard %u out of range: %u shards", shard,
			     spec->shards) < 0)
			*err = NULL;
		return -EINVAL;
	}
	for (size_t i = 0; i < spec->n_stages; i++) {
		char **argv = spec->stages[i].argv;

		if (!argv || !argv[0] || !argv[0][0]) {
			if (asprintf(err, "stage %zu: empty command", i) < 0)
				*err = NULL;
			return -EINVAL;
		}
	}
	return 0;
}

int mf_job_start(const struct mf_spec *spec, uint32_t shard, const char *fp_hex,
		 struct mf_job **out, char **err)
{
	return mf_job_start_guarded(spec, shard, fp_hex, NULL, 0, out, err);
}

int mf_job_start_guarded(const struct mf_spec *spec, uint32_t shard,
			 const char *fp_hex,
			 const struct mf_input_guard *guards, size_t n,
			 struct mf_job **out, char **err)
{
	struct job_plan plan;
	struct mf_job *j = NULL;
	char *msg = NULL;
	int rc;

	rc = !spec || !out ? -EINVAL : check_args(spec, shard, &msg);
	if (rc < 0)
		goto fail;
	rc = job_plan_init(&plan, spec, shard, fp_hex, &msg);
	if (rc == 0 && guards && n != plan.n_inputs)
		rc = -EINVAL;
	if (rc < 0)
		goto release_plan;
	plan.guards = guards;
	rc = job_alloc(spec, &j);
	if (rc < 0)
		goto release_plan;
	rc = keep_inputs(j, &plan);
	if (rc < 0)
		goto free_job;
	j->inputs_dir = plan.inputs_dir; /* the job removes it */
	plan.inputs_dir = NULL;
	if (j->guards) {
		rc = job_watch_start(&j->watch, j->inputs, j->n_inputs, &msg);
		if (rc < 0)
			goto free_job;
		j->watching = true;
	}
	job_cgroups_make(j, spec, shard);
	rc = spawn_job(j, spec, &plan, &msg);
	if (rc < 0)
		goto free_job;
	job_plan_release(&plan, spec);
	*out = j;
	return 0;
free_job:
	job_cgroups_end(j);
	job_free(j);
release_plan:
	job_plan_release(&plan, spec);
fail:
	if (!msg &&
	    asprintf(&msg, "cannot start job: %s", job_strerror(-rc)) < 0)
		msg = NULL;
	if (err)
		*err = msg;
	else
		free(msg);
	return rc;
}
