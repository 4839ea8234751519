/*
 * job_io.c - the parent's side of a running job: reading the last stage's
 * stdout, draining every stage's stderr into its tail ring, noticing exits
 * (pidfds wake poll; waitid with WNOWAIT reads the status without reaping),
 * enforcing timeouts by killing the process group, killing and reaping.
 *
 * No signal handler and no SIGCHLD: each job polls its own descriptors, so
 * several jobs run at once in different threads of one process.
 *
 * Not for: forking (job.c) or turning statuses into a result
 * (job_finish.c).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job_i.h"

/* Poll period when a stage has no pidfd (pidfd_open refused). */
#define JOB_POLL_FALLBACK_MS 20
/* Reads of one stderr pipe per wake-up, so stdout is not starved. */
#define JOB_STDERR_READS 64
/* Reads of stdout between two looks at stderr, exits and deadlines while
 * the output flows without ever blocking. */
#define JOB_CHECK_EVERY 64

/* True once the last stage exited and no process holds the output's write
 * end any more: what is left is in the pipe, however slowly it is read. */
static bool output_done(const struct mf_job *j)
{
	return j->out_fd < 0 || j->out_hup;
}

/*
 * A stage's deadline holds while it runs; the last stage's also while
 * something it left in the background (and only that: the other stages
 * never hold the output's write end) may still write the output.
 */
static uint64_t stage_deadline(const struct mf_job *j, size_t i)
{
	const struct job_proc *p = &j->st[i];
	uint64_t limit = (uint64_t)p->timeout_s;

	if (p->timeout_s <= 0 ||
	    (p->exited && (i + 1 < j->n || output_done(j))))
		return UINT64_MAX;
	if (limit > (UINT64_MAX - j->start_ns) / 1000000000ULL)
		return UINT64_MAX;
	return j->start_ns + limit * 1000000000ULL;
}

/* Earliest deadline of a running stage, and which; UINT64_MAX for none or
 * once the job timed out already. */
static uint64_t next_deadline(const struct mf_job *j, size_t *stage)
{
	uint64_t best = UINT64_MAX;

	if (j->timed_out || j->killed)
		return UINT64_MAX;
	for (size_t i = 0; i < j->n; i++) {
		uint64_t d = stage_deadline(j, i);

		if (d < best) {
			best = d;
			*stage = i;
		}
	}
	return best;
}

static int poll_timeout(const struct mf_job *j)
{
	size_t stage;
	uint64_t d = next_deadline(j, &stage), now = mf_mono_ns();
	int ms = -1;

	if (d != UINT64_MAX) {
		uint64_t left = d > now ? (d - now + 999999) / 1000000 : 0;

		ms = left > INT_MAX ? INT_MAX : (int)left;
	}
	for (size_t i = 0; i < j->n; i++)
		if (!j->st[i].exited && j->st[i].pidfd < 0 &&
		    (ms < 0 || ms > JOB_POLL_FALLBACK_MS))
			ms = JOB_POLL_FALLBACK_MS;
	return ms;
}

static void ring_fill(struct job_proc *p)
{
	struct job_ring *r = &p->tail;

	for (int k = 0; k < JOB_STDERR_READS; k++) {
		ssize_t n =
		    read(p->err_fd, r->buf + r->pos, sizeof r->buf - r->pos);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			close(p->err_fd);
			p->err_fd = -1;
			return;
		}
		r->pos = (r->pos + (size_t)n) % sizeof r->buf;
		r->fill = r->fill + (size_t)n > sizeof r->buf
		    ? sizeof r->buf
		    : r->fill + (size_t)n;
	}
}

void job_drain_index(struct mf_job *j)
{
	while (j->index_fd >= 0) {
		if (j->index_len == j->index_cap) {
			size_t cap = j->index_cap ? 2 * j->index_cap : 65536;
			uint8_t *b =
			    cap > JOB_INDEX_MAX ? NULL : realloc(j->index, cap);
			if (!b) {
				j->index_err =
				    cap > JOB_INDEX_MAX ? EFBIG : ENOMEM;
				close(j->index_fd);
				j->index_fd = -1;
				return;
			}
			j->index = b;
			j->index_cap = cap;
		}
		ssize_t n = read(j->index_fd, j->index + j->index_len,
				 j->index_cap - j->index_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			if (n < 0)
				j->index_err = errno;
			close(j->index_fd);
			j->index_fd = -1;
			return;
		}
		j->index_len += (size_t)n;
	}
}

/* Reads what is waiting on every stderr pipe (they are non-blocking). */
void job_drain_stderr(struct mf_job *j)
{
	for (size_t i = 0; i < j->n; i++)
		if (j->st[i].err_fd >= 0)
			ring_fill(&j->st[i]);
}

static int status_of(const siginfo_t *si)
{
	if (si->si_code == CLD_EXITED)
		return (si->si_status & 0xff) << 8;
	if (si->si_code == CLD_DUMPED)
		return (si->si_status & 0x7f) | 0x80;
	return si->si_status & 0x7f;
}

/* Notes stages that exited, without reaping them. */
static void note_exits(struct mf_job *j)
{
	for (size_t i = 0; i < j->n; i++) {
		struct job_proc *p = &j->st[i];
		siginfo_t si;

		if (p->exited || p->pid <= 0)
			continue;
		memset(&si, 0, sizeof si);
		if (waitid(P_PID, (id_t)p->pid, &si,
			   WEXITED | WNOHANG | WNOWAIT) < 0) {
			/* not our child any more (SIGCHLD ignored?): the
			 * status is lost, but it is gone */
			if (errno != ECHILD)
				continue;
		} else if (si.si_pid == 0) {
			continue;
		} else {
			p->status = status_of(&si);
		}
		p->exited = true;
		j->n_running--;
	}
}

static void time_out(struct mf_job *j, size_t stage)
{
	j->timed_out = true;
	j->timeout_stage = (int)stage;
	job_kill_all(j);
}

/* Notes when the output has no writer left (POLLHUP), which ends the last
 * stage's deadline once it exited. */
static void check_hangup(struct mf_job *j)
{
	struct pollfd p = {.fd = j->out_fd, .events = POLLIN};

	if (j->out_fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLHUP))
		j->out_hup = true;
}

/* Times the job out when a running stage's deadline passed, or the last
 * stage's while its background children still hold the output. */
static int check_deadlines(struct mf_job *j)
{
	uint64_t now = mf_mono_ns();
	size_t stage = 0;

	if (next_deadline(j, &stage) <= now && stage + 1 == j->n &&
	    j->st[stage].exited)
		check_hangup(j);
	if (next_deadline(j, &stage) <= now)
		time_out(j, stage);
	return j->timed_out ? -ETIMEDOUT : 0;
}

static nfds_t fill_pollfds(struct mf_job *j, bool with_out)
{
	nfds_t n = 0;

	if (with_out && j->out_fd >= 0)
		j->pfd[n++] =
		    (struct pollfd){.fd = j->out_fd, .events = POLLIN};
	if (j->index_fd >= 0)
		j->pfd[n++] =
		    (struct pollfd){.fd = j->index_fd, .events = POLLIN};
	if (j->watching && job_watch_fd() >= 0)
		j->pfd[n++] =
		    (struct pollfd){.fd = job_watch_fd(), .events = POLLIN};
	for (size_t i = 0; i < j->n; i++) {
		struct job_proc *p = &j->st[i];

		if (p->err_fd >= 0)
			j->pfd[n++] =
			    (struct pollfd){.fd = p->err_fd, .events = POLLIN};
		if (!p->exited && p->pidfd >= 0)
			j->pfd[n++] =
			    (struct pollfd){.fd = p->pidfd, .events = POLLIN};
	}
	return n;
}

/*
 * Waits (when wait) until stdout (with_out), a stderr pipe or a stage's
 * exit has something, or the next deadline. Drains stderr, notes exits,
 * enforces timeouts. Returns 0, -ETIMEDOUT once the job timed out, or
 * -errno.
 */
int job_wait_events(struct mf_job *j, bool with_out, bool wait)
{
	nfds_t n = fill_pollfds(j, with_out);
	int ms = poll_timeout(j);

	if (wait && (n > 0 || ms >= 0)) {
		if (poll(j->pfd, n, ms) < 0 && errno != EINTR)
			return -errno;
	}
	job_drain_stderr(j);
	job_drain_index(j);
	if (j->watching)
		job_watch_drain();
	note_exits(j);
	return check_deadlines(j);
}

int mf_job_read_index(struct mf_job *j, const uint8_t **buf, size_t *len)
{
	if (!j || !buf || !len)
		return -EINVAL;
	/* until every writer closed it; once every stage exited, what is in
	 * the pipe is all there is (a process left behind fails the job) */
	for (;;) {
		job_drain_index(j);
		if (j->index_fd < 0)
			break;
		note_exits(j);
		if (j->n_running == 0) {
			job_drain_index(j);
			break;
		}
		int rc = job_wait_events(j, false, true);
		if (rc < 0)
			return rc;
	}
	if (j->index_err)
		return -j->index_err;
	*buf = j->index;
	*len = j->index_len;
	return 0;
}

static ssize_t end_output(struct mf_job *j)
{
	close(j->out_fd);
	j->out_fd = -1;
	return 0;
}

/* A failed read cuts the output: remembered so the job cannot pass. */
static ssize_t read_failed(struct mf_job *j, int err)
{
	j->read_err = err;
	return -err;
}

ssize_t mf_job_read(struct mf_job *j, void *buf, size_t len)
{
	size_t stage;
	ssize_t n;
	int rc;

	if (!j || (!buf && len))
		return -EINVAL;
	if (j->timed_out)
		return -ETIMEDOUT;
	if (j->killed)
		return -ECANCELED;
	if (j->read_err)
		return -j->read_err;
	if (j->out_fd < 0 || len == 0)
		return 0;
	for (;;) {
		/* While data flows, one system call per read; stderr, exits
		 * and deadlines are looked at every JOB_CHECK_EVERY reads,
		 * and at once when a deadline passed (exits first: a stage
		 * that ended in time did not time out). */
		if (next_deadline(j, &stage) <= mf_mono_ns() ||
		    ++j->reads % JOB_CHECK_EVERY == 0) {
			rc = job_wait_events(j, false, false);
			if (rc < 0)
				return rc;
		}
		n = read(j->out_fd, buf, len);
		if (n > 0)
			return n;
		/* end of file: every writer closed it, background children
		 * of the last stage included */
		if (n == 0)
			return end_output(j);
		if (errno != EAGAIN && errno != EINTR)
			return read_failed(j, errno);
		rc = job_wait_events(j, true, true);
		if (rc == -ETIMEDOUT)
			return rc;
		if (rc < 0)
			return read_failed(j, -rc);
	}
}

void mf_job_kill(struct mf_job *j)
{
	if (!j)
		return;
	j->killed = true;
	job_kill_all(j);
}

void mf_job_stop(const struct mf_job *j)
{
	if (j)
		job_kill_all(j);
}

bool mf_job_has_session(const struct mf_job *j, pid_t sid)
{
	return j && job_in_groups(j, sid);
}

/* The child first: once it has a SIGKILL pending it can fork no more, so
 * the group's SIGKILL after it reaches every process the group can hold,
 * also when the child had not called setsid yet (ESRCH then: no group). */
static void kill_child(pid_t pid)
{
	if (pid <= 0)
		return;
	(void)kill(pid, SIGKILL);
	(void)kill(-pid, SIGKILL);
}

void job_kill_all(const struct mf_job *j)
{
	for (size_t i = 0; i < j->n; i++)
		kill_child(j->st[i].pid);
	kill_child(j->feeder);
}

/* Whether sid is the session of one of the job's children. */
bool job_in_groups(const struct mf_job *j, pid_t sid)
{
	if (sid <= 0)
		return false;
	if (sid == j->feeder)
		return true;
	for (size_t i = 0; i < j->n; i++)
		if (sid == j->st[i].pid)
			return true;
	return false;
}

static int reap(pid_t pid, int fallback)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return fallback;
	return status;
}

/*
 * Kills what is left of the children's process groups (grandchildren
 * included), then reaps every child. The group ids stay valid up to here:
 * each group's leader is at worst an unreaped zombie.
 */
void job_reap_all(struct mf_job *j)
{
	job_kill_all(j);
	for (size_t i = 0; i < j->n; i++) {
		struct job_proc *p = &j->st[i];

		if (p->pid > 0 && !p->reaped) {
			p->status = reap(p->pid, p->status);
			p->reaped = true;
			if (!p->exited) {
				p->exited = true;
				j->n_running--;
			}
		}
	}
	if (j->feeder > 0 && j->feeder_status == -1)
		j->feeder_status = reap(j->feeder, 0);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Frees a job whose children were reaped (job_reap_all), and its strays
 * ended: the guard forgets their sessions. */
void job_free(struct mf_job *j)
{
	if (!j)
		return;
	if (j->feeder > 0)
		job_guard_del(j->feeder);
	for (size_t i = 0; j->st && i < j->n; i++) {
		if (j->st[i].pid > 0)
			job_guard_del(j->st[i].pid);
		close_fd(&j->st[i].pidfd);
		close_fd(&j->st[i].err_fd);
		free(j->st[i].name);
	}
	for (size_t k = 0; k < JOB_STRAY_WAIT; k++)
		close_fd(&j->strays.pidfd[k]);
	for (size_t k = 0; j->inputs && k < j->n_inputs; k++)
		free(j->inputs[k]);
	free(j->inputs);
	free(j->guards);
	if (j->watching)
		(void)job_watch_end(&j->watch, NULL, 0);
	j->watching = false;
	close_fd(&j->out_fd);
	close_fd(&j->report_fd);
	close_fd(&j->index_fd);
	free(j->index);
	free(j->st);
	free(j->pfd);
	job_pipes_release(j->raised_pages);
	job_inputs_dir_remove(j->inputs_dir);
	free(j);
}
