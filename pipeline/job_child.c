/*
 * job_child.c - what a job's children do between fork and execve (stages)
 * or exit (the input feeder).
 *
 * Everything here runs in a child forked from a possibly multithreaded
 * process: only async-signal-safe calls, no malloc, no stdio, no locks.
 * The parent prepared every string and array beforehand (job_plan.c).
 * Failures are written as one struct job_report on a pipe the parent reads.
 *
 * Not for: the parent's side of the job (job.c, job_io.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <keyutils.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no malloc after fork */
#include <xxhash.h>

#include "job_i.h"

/* Handlers installed by the parent must not run here, and what it ignored
 * must not stay ignored in the stage (SIGPIPE above all). The signal mask
 * is still the full one the parent set around fork. */
static void reset_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)sigaction(sig, &sa, NULL);
}

static void unblock_signals(void)
{
	sigset_t none;

	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Closes [lo, hi]; without close_range, one by one below max_fd. */
static void close_span(unsigned int lo, unsigned int hi, int max_fd)
{
	if (lo > hi)
		return;
	if (close_range(lo, hi, 0) == 0)
		return;
	for (unsigned int fd = lo; fd <= hi && fd < (unsigned int)max_fd; fd++)
		(void)close((int)fd);
}

/* Closes every descriptor but a and b. */
static void close_all_but(int a, int b, int max_fd)
{
	unsigned int lo = (unsigned int)(a < b ? a : b);
	unsigned int hi = (unsigned int)(a < b ? b : a);

	if (lo > 0)
		close_span(0, lo - 1, max_fd);
	close_span(lo + 1, hi - 1, max_fd);
	close_span(hi + 1, ~0U, max_fd);
}

/* Raw system calls: they change this thread only, and the child has only
 * this thread; glibc's wrappers would try to reach the parent's others. */
static int drop_creds(const struct job_creds *c)
{
	if (!c->drop)
		return 0;
	if (syscall(SYS_setgroups, c->n_groups, c->groups) < 0)
		return -1;
	if (syscall(SYS_setresgid, c->gid, c->gid, c->gid) < 0)
		return -1;
	return syscall(SYS_setresuid, c->uid, c->uid, c->uid) < 0 ? -1 : 0;
}

/*
 * A session of its own, so no controlling terminal: a daemon run from an
 * admin's terminal must not lend it to a user's stage (TIOCSTI would type
 * into the admin's shell). A fresh child never leads a process group, so
 * setsid fails only if the kernel is out of ids.
 */
static int leave_terminal(void)
{
	return setsid() < 0 ? -1 : 0;
}

/* A new anonymous session keyring, owned by whoever this process is now
 * (call it after drop_creds), as a login does: the daemon's session keyring
 * and the keys in it stay out of the stage's reach. A kernel without
 * keyrings (ENOSYS) has none to leak. keyctl is a plain system call,
 * safe here. */
static int fresh_keyring(void)
{
	if (keyctl_join_session_keyring(NULL) >= 0 || errno == ENOSYS)
		return 0;
	return -1;
}

/* Moves this process into the stage's cgroup: its pid, in decimal, to
 * cgroup.procs (snprintf is not async-signal-safe). */
static int join_cgroup(int fd)
{
	char buf[24];
	size_t pos = sizeof buf;
	unsigned long pid = (unsigned long)getpid();
	ssize_t len;

	do {
		buf[--pos] = (char)('0' + pid % 10);
		pid /= 10;
	} while (pid);
	len = (ssize_t)(sizeof buf - pos);
	return write(fd, buf + pos, (size_t)len) == len ? 0 : -1;
}

/* The stage's limits, lowered (never raised: the parent capped them at
 * its own hard limits) while still privileged, so they hold whoever the
 * stage becomes. RLIMIT_NPROC counts every process of the real uid.
 * RLIMIT_AS only when the stage's memory is not a cgroup's. */
static int set_limits(const struct job_limits *l, bool in_cgroup)
{
	struct rlimit r;

	r.rlim_cur = r.rlim_max = l->nofile;
	if (setrlimit(RLIMIT_NOFILE, &r) < 0)
		return -1;
	r.rlim_cur = r.rlim_max = l->nproc;
	if (setrlimit(RLIMIT_NPROC, &r) < 0)
		return -1;
	r.rlim_cur = r.rlim_max = l->as;
	if (l->as && !in_cgroup && setrlimit(RLIMIT_AS, &r) < 0)
		return -1;
	if (l->nice && setpriority(PRIO_PROCESS, 0, l->nice) < 0)
		return -1;
	return 0;
}

static _Noreturn void give_up(int fd, enum job_report_kind kind, int index,
			      int err, int status)
{
	struct job_report rep;

	memset(&rep, 0, sizeof rep);
	rep.kind = kind;
	rep.index = index;
	rep.err = err;
	if (fd >= 0)
		(void)!write(fd, &rep, sizeof rep);
	_exit(status);
}

/*
 * A stage: leads a new session (no controlling terminal) and has the guard
 * hold it (job_guard.c), joins its
 * cgroup if it has one (if that fails, RLIMIT_AS stands in for it), takes
 * its pipes as 0, 1 and 2 and the input list as JOB_INPUTS_FD, closes
 * everything else, sets its limits, becomes the spec owner if asked, with
 * a fresh session keyring, enters the spec folder and execs. The
 * descriptors are first moved above JOB_INPUTS_FD so that none of them is
 * overwritten by another's dup2 (the parent may run with 0-2 closed).
 */
_Noreturn void job_child_exec(const struct job_exec *x)
{
	bool in_cgroup;
	int rep, list, fds[3], index = -1;
	const int above = JOB_INPUTS_FD + 1;

	if (leave_terminal() < 0)
		give_up(x->report_fd, JOB_REPORT_SETUP, x->index, errno,
			JOB_EXEC_EXIT);
	job_guard_add(x->guard_fd);
	in_cgroup = x->cg_fd >= 0 && join_cgroup(x->cg_fd) == 0;
	reset_signals();
	rep = fcntl(x->report_fd, F_DUPFD_CLOEXEC, above);
	fds[0] = fcntl(x->in_fd, F_DUPFD_CLOEXEC, above);
	fds[1] = fcntl(x->out_fd, F_DUPFD_CLOEXEC, above);
	fds[2] = fcntl(x->err_fd, F_DUPFD_CLOEXEC, above);
	list = fcntl(x->inputs_fd, F_DUPFD_CLOEXEC, above);
	if (x->index_fd >= 0)
		index = fcntl(x->index_fd, F_DUPFD_CLOEXEC, above);
	if (rep < 0)
		give_up(x->report_fd, JOB_REPORT_SETUP, x->index, errno,
			JOB_EXEC_EXIT);
	for (int k = 0; k < 3; k++)
		if (fds[k] < 0 || dup2(fds[k], k) < 0)
			give_up(rep, JOB_REPORT_SETUP, x->index, errno,
				JOB_EXEC_EXIT);
	if (list < 0 || dup2(list, JOB_INPUTS_FD) < 0)
		give_up(rep, JOB_REPORT_SETUP, x->index, errno, JOB_EXEC_EXIT);
	if (x->index_fd >= 0 && (index < 0 || dup2(index, JOB_INDEX_FD) < 0))
		give_up(rep, JOB_REPORT_SETUP, x->index, errno, JOB_EXEC_EXIT);
	if (x->index_fd < 0)
		close_span(JOB_INDEX_FD, JOB_INPUTS_FD - 1, x->max_fd);
	close_span(above, (unsigned int)rep - 1, x->max_fd);
	close_span((unsigned int)rep + 1, ~0U, x->max_fd);
	if (set_limits(x->limits, in_cgroup) < 0)
		give_up(rep, JOB_REPORT_SETUP, x->index, errno, JOB_EXEC_EXIT);
	if (drop_creds(x->creds) < 0)
		give_up(rep, JOB_REPORT_CREDS, x->index, errno, JOB_EXEC_EXIT);
	if (fresh_keyring() < 0)
		give_up(rep, JOB_REPORT_SETUP, x->index, errno, JOB_EXEC_EXIT);
	if (chdir(x->dir) < 0)
		give_up(rep, JOB_REPORT_CHDIR, x->index, errno, JOB_EXEC_EXIT);
	unblock_signals();
	execve(x->path, x->argv, x->envp);
	give_up(rep, JOB_REPORT_EXEC, x->index, errno, JOB_EXEC_EXIT);
}

/* What went wrong with one input, for the report. */
struct feed_err {
	int kind, err;
	int64_t got, want;
};

/* The feeder's give_up, with the byte counts of a changed input. */
static _Noreturn void report_feed(int fd, int index, const struct feed_err *e)
{
	struct job_report rep;

	memset(&rep, 0, sizeof rep);
	rep.kind = e->kind;
	rep.index = index;
	rep.err = e->err;
	rep.got = e->got;
	rep.want = e->want;
	(void)!write(fd, &rep, sizeof rep);
	_exit(JOB_FEED_EXIT);
}

enum feed_outcome {
	FEED_DONE, /* the whole file went */
	FEED_STOPPED, /* stage 0 stopped reading (EPIPE): not an error */
	FEED_FAILED, /* *kind and *err say why */
};

/* The copy loop for files splice cannot take, and for those whose bytes
 * are hashed as they go (x: NULL for none); *sent counts its bytes. */
static enum feed_outcome copy_rest(int in, int out, XXH3_state_t *x, int *kind,
				   int *err, int64_t *sent)
{
	char buf[65536];

	for (;;) {
		ssize_t n = read(in, buf, sizeof buf), off = 0;

		if (n == 0)
			return FEED_DONE;
		if (n > 0 && x)
			(void)XXH3_128bits_update(x, buf, (size_t)n);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			*kind = JOB_REPORT_INPUT;
			*err = errno;
			return FEED_FAILED;
		}
		while (off < n) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));

			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno == EPIPE)
				return FEED_STOPPED;
			if (w < 0) {
				*kind = JOB_REPORT_WRITE;
				*err = errno;
				return FEED_FAILED;
			}
			off += w;
			*sent += w;
		}
	}
}

/* Whether st is still the file g guarded: no one can set an inode or a
 * ctime back. */
static bool same_file(const struct stat *st, const struct mf_input_guard *g)
{
	return st->st_dev == g->dev && st->st_ino == g->ino &&
	    st->st_ctim.tv_sec == g->ctime.tv_sec &&
	    st->st_ctim.tv_nsec == g->ctime.tv_nsec;
}

/* The guard's check after the bytes went (stopped: stage 0 stopped
 * reading, so fewer bytes are right): FEED_FAILED with *e when the file
 * changed meanwhile or ended short. */
static enum feed_outcome check_after(int in, const struct mf_input_guard *g,
				     enum feed_outcome res, int64_t sent,
				     struct feed_err *e)
{
	struct stat st;

	if (!g || res == FEED_FAILED)
		return res;
	e->kind = JOB_REPORT_CHANGED;
	e->got = sent;
	e->want = (int64_t)g->size;
	if (fstat(in, &st) < 0 || !same_file(&st, g) || st.st_size != g->size) {
		e->err = EIO;
		return FEED_FAILED;
	}
	if (res == FEED_DONE && sent != (int64_t)g->size) {
		e->err = ENODATA;
		return FEED_FAILED;
	}
	return res;
}

/* Whether the bytes hashed into x are the content g's digest names. */
static bool same_content(XXH3_state_t *x, const struct mf_input_guard *g)
{
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(x));
	return memcmp(c.digest, g->digest, sizeof(g->digest)) == 0;
}

/* Sends the file at path; with a guard g, only while it is the file g
 * names, and exactly its bytes. */
static enum feed_outcome feed_file(const char *path,
				   const struct mf_input_guard *g, int out,
				   struct feed_err *e)
{
	enum feed_outcome res = FEED_DONE;
	int64_t sent = 0;
	struct stat st;
	int in = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	e->kind = JOB_REPORT_INPUT;
	if (in < 0) {
		e->err = errno;
		return FEED_FAILED;
	}
	if (g &&
	    (fstat(in, &st) < 0 || !same_file(&st, g) ||
	     st.st_size != g->size)) {
		(void)close(in);
		e->kind = JOB_REPORT_CHANGED;
		e->err = 0;
		e->want = (int64_t)g->size;
		return FEED_FAILED;
	}
	if (g && g->hashed) { /* by content: hashed as it goes */
		XXH3_state_t x;
		(void)XXH3_128bits_reset_withSeed(&x, g->seed);
		res = copy_rest(in, out, &x, &e->kind, &e->err, &sent);
		res = check_after(in, g, res, sent, e);
		if (res == FEED_DONE && !same_content(&x, g)) {
			e->kind = JOB_REPORT_CHANGED;
			e->err = EIO;
			res = FEED_FAILED;
		}
		(void)close(in);
		return res;
	}
	for (;;) {
		ssize_t n = splice(in, NULL, out, NULL, 1 << 20, 0);

		if (n > 0) {
			sent += n;
			continue;
		}
		if (n == 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == EPIPE) {
			res = FEED_STOPPED;
		} else if (errno == EINVAL || errno == ENOSYS) {
			res =
			    copy_rest(in, out, NULL, &e->kind, &e->err, &sent);
		} else {
			/* the pipe side fails only with EPIPE */
			e->err = errno;
			res = FEED_FAILED;
		}
		break;
	}
	res = check_after(in, g, res, sent, e);
	(void)close(in);
	return res;
}

/*
 * The feeder: writes the shard's inputs, in order, to stage 0's stdin and
 * exits 0, also when stage 0 stops reading early. It ignores SIGPIPE so
 * that it sees EPIPE. An input it cannot open or read makes it report the
 * input's index and errno and exit JOB_FEED_EXIT.
 */
_Noreturn void job_child_feed(const struct job_feed *f)
{
	struct sigaction ign;
	struct feed_err e = {JOB_REPORT_NONE, 0, 0, 0};

	if (leave_terminal() < 0)
		give_up(f->report_fd, JOB_REPORT_SETUP, -1, errno,
			JOB_FEED_EXIT);
	job_guard_add(f->guard_fd);
	reset_signals();
	memset(&ign, 0, sizeof ign);
	ign.sa_handler = SIG_IGN;
	(void)sigaction(SIGPIPE, &ign, NULL);
	close_all_but(f->out_fd, f->report_fd, f->max_fd);
	if (drop_creds(f->creds) < 0)
		give_up(f->report_fd, JOB_REPORT_CREDS, -1, errno,
			JOB_FEED_EXIT);
	if (fresh_keyring() < 0)
		give_up(f->report_fd, JOB_REPORT_SETUP, -1, errno,
			JOB_FEED_EXIT);
	unblock_signals();
	for (size_t k = 0; k < f->n_inputs; k++) {
		enum feed_outcome res =
		    feed_file(f->inputs[k], f->guards ? &f->guards[k] : NULL,
			      f->out_fd, &e);

		if (res == FEED_STOPPED)
			break;
		if (res == FEED_FAILED)
			report_feed(f->report_fd, (int)k, &e);
	}
	_exit(0);
}
