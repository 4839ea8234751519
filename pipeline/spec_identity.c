/*
 * spec_identity.c - running a spec's `identity` command for its
 * fingerprint (docs/spec.md, "identity"): one process started as a stage
 * is (job_child_exec: its own session and process group, held by the
 * guard, the owner's credentials, a fresh keyring, the stages' limits,
 * the spec folder, the stages' clean environment without MATFS_*), stdin
 * /dev/null, its standard output read up to MF_IDENTITY_OUTPUT_MAX bytes
 * and its standard error's last line kept, for at most
 * MF_IDENTITY_TIMEOUT_S seconds. Past either bound, and whatever the
 * outcome, its process group is killed before it is reaped, so nothing
 * it started in it outlives the call.
 *
 * Not for: stages (job*.c) or what the output means (fingerprint.c).
 */
#include "job_i.h"
#include "spec_i.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#define ERR_TAIL 512 /* bytes of stderr kept for the message */
#define SLICE_MS 100 /* the deadline and the exit are looked at so often */
#define NS_PER_MS 1000000ULL

/* The running command and what it gave so far. */
struct ident_run {
	pid_t pid;
	int pidfd; /* readable once it exited; -1: none (waitid instead) */
	int out_fd, err_fd, rep_fd; /* parent's ends; -1 once at EOF */
	char *out;
	size_t len;
	bool flood; /* wrote more than MF_IDENTITY_OUTPUT_MAX bytes */
	bool exited;
	char err[ERR_TAIL + 1];
	size_t err_len;
};

__attribute__((format(printf, 3, 4))) static int fail(char **err, int rc,
						      const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(err, fmt, ap) < 0)
		*err = NULL;
	va_end(ap);
	return rc;
}

/* Reads what fd has now into buf (cap bytes, *len held); -1 at EOF. */
static int read_some(int fd, char *buf, size_t cap, size_t *len, bool *over)
{
	for (;;) {
		char scratch[4096];
		bool room = *len < cap;
		char *to = room ? buf + *len : scratch;
		size_t want = room ? cap - *len : sizeof(scratch);
		ssize_t n = read(fd, to, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		if (n == 0)
			return -1;
		if (room)
			*len += (size_t)n;
		else if (over)
			*over = true;
		if (over && *over)
			return 0;
	}
}

/* Keeps the last ERR_TAIL bytes of stderr. */
static int read_err(struct ident_run *r)
{
	for (;;) {
		char buf[4096];
		ssize_t n = read(r->err_fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		if (n == 0)
			return -1;
		size_t k = (size_t)n;
		if (k >= ERR_TAIL) {
			memcpy(r->err, buf + k - ERR_TAIL, ERR_TAIL);
			r->err_len = ERR_TAIL;
			continue;
		}
		if (r->err_len + k > ERR_TAIL) {
			size_t drop = r->err_len + k - ERR_TAIL;
			memmove(r->err, r->err + drop, r->err_len - drop);
			r->err_len -= drop;
		}
		memcpy(r->err + r->err_len, buf, k);
		r->err_len += k;
	}
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Whether the command exited, without reaping it: its pid, and with it
 * its process group's id, stays its own until waitpid. */
static bool has_exited(struct ident_run *r)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return errno == ECHILD;
	return si.si_pid == r->pid;
}

/* Waits for output, stderr or the exit until deadline_ns; false once
 * the time is up. */
static bool wait_some(struct ident_run *r, uint64_t deadline_ns)
{
	uint64_t now = mf_mono_ns();
	if (now >= deadline_ns || mf_deadline_passed())
		return false;
	uint64_t left = (deadline_ns - now + NS_PER_MS - 1) / NS_PER_MS;
	int ms = left < SLICE_MS ? (int)left : SLICE_MS;
	struct pollfd p[3] = {{r->out_fd, POLLIN, 0},
			      {r->err_fd, POLLIN, 0},
			      {r->exited ? -1 : r->pidfd, POLLIN, 0}};
	(void)poll(p, 3, ms);
	if (r->out_fd >= 0 &&
	    read_some(r->out_fd, r->out, MF_IDENTITY_OUTPUT_MAX, &r->len,
		      &r->flood) < 0)
		close_fd(&r->out_fd);
	if (r->err_fd >= 0 && read_err(r) < 0)
		close_fd(&r->err_fd);
	if (!r->exited)
		r->exited = has_exited(r);
	return true;
}

/* Forks the command with every signal blocked (no handler of the caller
 * may run in the child before it reset them). */
static int start(struct ident_run *r, const struct job_plan *plan,
		 const struct mf_spec *spec)
{
	int out[2] = {-1, -1}, err[2] = {-1, -1}, rep[2] = {-1, -1};
	int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int null_list = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int rc = 0;
	if (null_in < 0 || null_list < 0 || pipe2(out, O_CLOEXEC) < 0 ||
	    pipe2(err, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
		rc = -errno;
	if (rc == 0) {
		struct job_exec x = {
		    .in_fd = null_in,
		    .out_fd = out[1],
		    .err_fd = err[1],
		    .report_fd = rep[1],
		    .index_fd = -1,
		    .inputs_fd = null_list,
		    .index = -1,
		    .dir = spec->dir,
		    .path = plan->paths[0],
		    .argv = spec->identity_argv,
		    .envp = plan->envp,
		    .creds = &plan->creds,
		    .limits = &plan->limits[0],
		    .cg_fd = -1,
		    .guard_fd = job_guard_fd(),
		    .max_fd = plan->max_fd,
		};
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pid_t pid = fork();
		if (pid == 0)
			job_child_exec(&x);
		rc = pid < 0 ? -errno : 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		r->pid = pid > 0 ? pid : 0;
	}
	if (r->pid > 0) {
		r->pidfd = pidfd_open(r->pid, 0);
		r->out_fd = out[0];
		r->err_fd = err[0];
		r->rep_fd = rep[0];
		out[0] = err[0] = rep[0] = -1;
		(void)fcntl(r->out_fd, F_SETFL, O_NONBLOCK);
		(void)fcntl(r->err_fd, F_SETFL, O_NONBLOCK);
		(void)fcntl(r->rep_fd, F_SETFL, O_NONBLOCK);
	}
	int fds[] = {null_in, null_list, out[0], out[1],
		     err[0],  err[1],	 rep[0], rep[1]};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		close_fd(&fds[i]);
	return rc;
}

/* Kills the command's process group while its pid is still unreaped,
 * then reaps it; its status, or -1. */
static int end(struct ident_run *r)
{
	int status = -1;
	if (r->pid <= 0)
		return -1;
	(void)kill(-r->pid, SIGKILL);
	(void)kill(r->pid, SIGKILL); /* in case it never made its group */
	while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR)
		;
	job_guard_del(r->pid);
	return status;
}

/* The last non-empty line of stderr, control characters shown as '?',
 * into buf; "" when none. */
static const char *err_line(struct ident_run *r, char *buf, size_t size)
{
	size_t end = r->err_len;
	while (end && (r->err[end - 1] == '\n' || r->err[end - 1] == '\r'))
		end--;
	size_t start = end;
	while (start && r->err[start - 1] != '\n')
		start--;
	size_t n = end - start < size - 1 ? end - start : size - 1;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)r->err[start + i];
		buf[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	buf[n] = '\0';
	return buf;
}

/* What the child's report pipe says went wrong before execve, if
 * anything: "cannot run 'PATH': ...". */
static int report(struct ident_run *r, const char *path, char **err)
{
	struct job_report rep;
	ssize_t n = read(r->rep_fd, &rep, sizeof(rep));
	if (n != (ssize_t)sizeof(rep))
		return 0;
	const char *what = rep.kind == JOB_REPORT_EXEC ? "cannot run"
	    : rep.kind == JOB_REPORT_CREDS
	    ? "cannot become the spec's owner to run"
	    : rep.kind == JOB_REPORT_CHDIR
	    ? "cannot enter the spec folder to run"
	    : "cannot set up";
	return fail(err, -(rep.err ? rep.err : EIO), "%s '%s': %s", what, path,
		    strerror(rep.err));
}

static int outcome(struct ident_run *r, int status, bool timed_out,
		   const char *path, char **err)
{
	char line[ERR_TAIL + 1], what[128];
	if (r->flood)
		return fail(err, -EFBIG,
			    "wrote more than %d bytes on its standard output",
			    MF_IDENTITY_OUTPUT_MAX);
	/* -ETIMEDOUT is the registration's own limit (mf_deadline_set),
	 * which its caller reports; the command's bound is -ETIME */
	if (timed_out && mf_deadline_passed())
		return fail(err, -ETIMEDOUT,
			    "the registration's time limit "
			    "passed");
	if (timed_out)
		return fail(err, -ETIME,
			    "did not end within %d s (its output must end "
			    "too: a background child holding it keeps it "
			    "open)",
			    MF_IDENTITY_TIMEOUT_S);
	int rc = report(r, path, err);
	if (rc)
		return rc;
	if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	job_describe_status(status, what, sizeof(what));
	err_line(r, line, sizeof(line));
	return fail(err, -EIO, "%s%s%s", what, line[0] ? ": " : "", line);
}

int spec_identity_run(const struct mf_spec *spec, char **out, size_t *len,
		      char **err)
{
	struct job_plan plan;
	struct ident_run r = {
	    .pidfd = -1, .out_fd = -1, .err_fd = -1, .rep_fd = -1};
	*err = NULL;
	int rc = job_plan_identity(&plan, spec, err);
	if (rc == 0 && !(r.out = malloc(MF_IDENTITY_OUTPUT_MAX + 1)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = start(&r, &plan, spec);
	if (rc && !*err)
		rc = fail(err, rc, "cannot start it: %s", strerror(-rc));
	bool timed_out = false;
	uint64_t deadline =
	    mf_mono_ns() + (uint64_t)MF_IDENTITY_TIMEOUT_S * 1000 * NS_PER_MS;
	/* until it exited and its output ended; stderr is not waited for
	 * then: what is there now is read below */
	while (rc == 0 && !r.flood && !(r.exited && r.out_fd < 0) && !timed_out)
		timed_out = !wait_some(&r, deadline);
	if (rc == 0 && r.err_fd >= 0)
		(void)read_err(&r);
	int status = end(&r);
	if (rc == 0)
		rc = outcome(&r, status, timed_out, plan.paths[0], err);
	job_plan_release(&plan, spec);
	close_fd(&r.pidfd);
	close_fd(&r.out_fd);
	close_fd(&r.err_fd);
	close_fd(&r.rep_fd);
	if (rc) {
		free(r.out);
		return rc;
	}
	r.out[r.len] = '\0';
	*out = r.out;
	*len = r.len;
	return 0;
}
