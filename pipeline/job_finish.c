/*
 * job_finish.c - mf_job_finish: waiting for the stages, reaping every
 * child and turning their statuses into a struct mf_job_result.
 *
 * Which failure is reported, first match wins:
 *   1. a timeout: the stage whose timeout passed; or mf_job_read failed
 *      (the output was cut), whatever the stages did;
 *   2. the feeder could not read an input: "input 'PATH': reason", or an
 *      input was not the file guarded (input_changed);
 *   3. the first stage, by index, that failed for a reason other than
 *      SIGPIPE; a stage killed by SIGPIPE is no failure at all when the
 *      last stage exited 0 (an early stage outlived a `head -c N` that
 *      stopped reading: the output is what the last stage chose to emit);
 *   4. the first stage killed by SIGPIPE (the last stage failed too, or
 *      the caller finished without reading all the output);
 *   5. the feeder killed by a signal other than the final SIGKILL;
 *   6. a process of the job's group, not a stage, still running once
 *      every stage exited (job_stray.c): a background child the stages
 *      did not wait for.
 * A stage of rule 3 or 4 whose cgroup saw an OOM kill is reported as
 * "stage N: killed: memory limit (X) reached".
 *
 * Not for: reading or polling (job_io.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job_i.h"

/* strerror(3) is not thread-safe for unknown values; this is. */
const char *job_strerror(int err)
{
	const char *s = strerrordesc_np(err);

	return s ? s : "unknown error";
}

/* 5400 -> "1h30m", 0 -> "0s". */
static void format_duration(int64_t s, char *buf, size_t len)
{
	static const struct {
		char unit;
		int64_t secs;
	} units[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
	size_t off = 0;

	buf[0] = '\0';
	for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
		int64_t q = s / units[k].secs;
		int w;

		if (q == 0 && !(units[k].unit == 's' && off == 0))
			continue;
		s -= q * units[k].secs;
		w = snprintf(buf + off, len - off, "%lld%c", (long long)q,
			     units[k].unit);
		if (w < 0 || (size_t)w >= len - off)
			return;
		off += (size_t)w;
	}
}

/* "exited with status 3", "killed by signal 9 (SIGKILL)". */
void job_describe_status(int status, char *buf, size_t len)
{
	const char *name;

	if (status == -1) {
		snprintf(buf, len, "could not be waited for");
	} else if (WIFEXITED(status)) {
		snprintf(buf, len, "exited with status %d",
			 WEXITSTATUS(status));
	} else if (WIFSIGNALED(status)) {
		name = sigabbrev_np(WTERMSIG(status));
		if (name)
			snprintf(buf, len, "killed by signal %d (SIG%s)",
				 WTERMSIG(status), name);
		else
			snprintf(buf, len, "killed by signal %d",
				 WTERMSIG(status));
	} else {
		snprintf(buf, len, "stopped with wait status %d", status);
	}
}

static void copy_tail(const struct job_ring *r, char *out)
{
	size_t start = (r->pos + sizeof r->buf - r->fill) % sizeof r->buf;
	size_t first = sizeof r->buf - start;

	if (first > r->fill)
		first = r->fill;
	memcpy(out, r->buf + start, first);
	memcpy(out + first, r->buf, r->fill - first);
	out[r->fill] = '\0';
}

/* 8589934592 -> "8GiB"; a size no binary unit divides stays in bytes. */
static void format_limit(uint64_t n, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	size_t u = 0;

	while (u + 1 < sizeof units / sizeof units[0] && n && n % 1024 == 0) {
		n /= 1024;
		u++;
	}
	snprintf(buf, len, "%llu%s", (unsigned long long)n, units[u]);
}

/* A stage the OOM killer hit in its cgroup failed for that reason, however
 * it ended (its own death, or a child's that made it exit non-zero). */
static void stage_failed(const struct mf_job *j, size_t i, const char *what,
			 struct mf_job_result *r)
{
	const struct job_cgroup *cg = &j->st[i].cg;
	char max[32];

	r->failed_stage = (int)i;
	r->wait_status = j->st[i].status;
	if (cg->oom_kills && !j->timed_out) {
		format_limit(cg->max, max, sizeof max);
		snprintf(r->error, sizeof r->error,
			 "stage %zu: killed: memory limit (%s) reached", i,
			 max);
	} else {
		snprintf(r->error, sizeof r->error, "stage %zu '%s' %s", i,
			 j->st[i].name, what);
	}
	copy_tail(&j->st[i].tail, r->stderr_tail);
}

static bool died_of(int status, int sig)
{
	return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == sig;
}

/* Rule 2, an input that was not the file its identity was checked on. */
static void input_changed(const struct mf_job *j, const struct job_report *rep,
			  struct mf_job_result *r)
{
	const char *path = j->inputs[rep->index];

	r->input_changed = true;
	if (rep->err == ENODATA)
		snprintf(r->error, sizeof r->error,
			 "input '%s' gave %lld bytes, not its %lld, while "
			 "it was read",
			 path, (long long)rep->got, (long long)rep->want);
	else if (rep->err == EIO)
		snprintf(r->error, sizeof r->error,
			 "input '%s' changed while it was read (%lld of %lld "
			 "bytes sent)",
			 path, (long long)rep->got, (long long)rep->want);
	else
		snprintf(r->error, sizeof r->error,
			 "input '%s' changed after its identity was checked",
			 path);
}

/* Rule 2 once the stages ended: a stage may read an input by its path
 * (MATFS_INPUTS_FILE) rather than from the feeder, so each guarded input
 * must still be the file its identity was checked on, unchanged (a write
 * moves its ctime, which no one can set back). */
static bool inputs_changed(struct mf_job *j, struct mf_job_result *r)
{
	for (size_t k = 0; j->guards && k < j->n_inputs; k++) {
		const struct mf_input_guard *g = &j->guards[k];
		struct stat st;
		if (stat(j->inputs[k], &st) < 0) {
			r->input_changed = true;
			snprintf(r->error, sizeof r->error,
				 "input '%s' after the stages ran: %s",
				 j->inputs[k], job_strerror(errno));
			return true;
		}
		if (st.st_dev == g->dev && st.st_ino == g->ino &&
		    st.st_size == g->size &&
		    st.st_ctim.tv_sec == g->ctime.tv_sec &&
		    st.st_ctim.tv_nsec == g->ctime.tv_nsec)
			continue;
		r->input_changed = true;
		snprintf(r->error, sizeof r->error,
			 "input '%s' changed while the stages ran",
			 j->inputs[k]);
		return true;
	}
	char what[sizeof j->watch.what];
	bool watched = j->watching;
	j->watching = false;
	if (watched && job_watch_end(&j->watch, what, sizeof what)) {
		r->input_changed = true;
		snprintf(r->error, sizeof r->error,
			 "%.400s, on the path of an input, changed while the "
			 "stages ran",
			 what);
		return true;
	}
	return false;
}

/* Rule 2: the feeder exited non-zero; its report says why. */
static bool feeder_exit_failed(const struct mf_job *j, struct mf_job_result *r)
{
	struct job_report rep = {0};
	int st = j->feeder_status;
	const char *e;

	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 0)
		return false;
	r->wait_status = st;
	if (j->report_fd < 0 ||
	    read(j->report_fd, &rep, sizeof rep) != (ssize_t)sizeof rep)
		rep.kind = JOB_REPORT_NONE;
	e = job_strerror(rep.err);
	if (rep.kind == JOB_REPORT_CHANGED && rep.index >= 0 &&
	    (size_t)rep.index < j->n_inputs) {
		input_changed(j, &rep, r);
		return true;
	}
	if (rep.kind == JOB_REPORT_INPUT && rep.index >= 0 &&
	    (size_t)rep.index < j->n_inputs)
		snprintf(r->error, sizeof r->error, "input '%s': %s",
			 j->inputs[rep.index], e);
	else if (rep.kind == JOB_REPORT_WRITE)
		snprintf(r->error, sizeof r->error,
			 "input feeder: cannot write to stage 0: %s", e);
	else if (rep.kind == JOB_REPORT_CREDS)
		snprintf(r->error, sizeof r->error,
			 "input feeder: cannot switch to the spec owner: %s",
			 e);
	else if (rep.kind == JOB_REPORT_SETUP)
		snprintf(r->error, sizeof r->error,
			 "input feeder: cannot set up its session: %s", e);
	else
		snprintf(r->error, sizeof r->error,
			 "input feeder exited with status %d", WEXITSTATUS(st));
	return true;
}

/* Rules 3 and 4. */
static bool stages_failed(const struct mf_job *j, struct mf_job_result *r)
{
	bool last_ok = j->st[j->n - 1].status == 0;
	size_t piped = j->n;
	char what[128];

	for (size_t i = 0; i < j->n; i++) {
		int st = j->st[i].status;

		if (st == 0)
			continue;
		if (died_of(st, SIGPIPE)) {
			if (!last_ok && piped == j->n)
				piped = i;
			continue;
		}
		job_describe_status(st, what, sizeof what);
		stage_failed(j, i, what, r);
		return true;
	}
	if (piped == j->n)
		return false;
	job_describe_status(j->st[piped].status, what, sizeof what);
	stage_failed(j, piped, what, r);
	return true;
}

static void job_result(struct mf_job *j, struct mf_job_result *r)
{
	char what[128], dur[64];

	if (j->timed_out) {
		size_t i = (size_t)j->timeout_stage;

		r->timed_out = true;
		format_duration(j->st[i].timeout_s, dur, sizeof dur);
		snprintf(what, sizeof what, "timed out after %s", dur);
		stage_failed(j, i, what, r);
		return;
	}
	if (j->read_err) {
		snprintf(r->error, sizeof r->error,
			 "reading the output of stage %zu '%s': %s", j->n - 1,
			 j->st[j->n - 1].name, job_strerror(j->read_err));
		return;
	}
	if (feeder_exit_failed(j, r) || stages_failed(j, r))
		return;
	if (j->feeder_status != -1 && WIFSIGNALED(j->feeder_status) &&
	    !died_of(j->feeder_status, SIGKILL)) {
		job_describe_status(j->feeder_status, what, sizeof what);
		r->wait_status = j->feeder_status;
		snprintf(r->error, sizeof r->error, "input feeder %s", what);
		return;
	}
	if (j->strays.n == 1) {
		snprintf(r->error, sizeof r->error,
			 "process %d '%s' was still running after every stage "
			 "exited",
			 (int)j->strays.first, j->strays.name);
		return;
	}
	if (j->strays.n > 1) {
		snprintf(r->error, sizeof r->error,
			 "process %d '%s' and %zu more were still running "
			 "after every stage exited",
			 (int)j->strays.first, j->strays.name, j->strays.n - 1);
		return;
	}
	if (inputs_changed(j, r))
		return;
	r->ok = true;
}

int mf_job_finish(struct mf_job *j, struct mf_job_result *res)
{
	struct mf_job_result r;
	int rc;

	memset(&r, 0, sizeof r);
	r.failed_stage = -1;
	r.wait_status = -1;
	if (!j)
		return -EINVAL;
	/* A stage still writing gets EPIPE rather than blocking forever. */
	if (j->out_fd >= 0) {
		close(j->out_fd);
		j->out_fd = -1;
	}
	while (j->n_running > 0) {
		rc = job_wait_events(j, false, true);
		if (rc < 0 && rc != -ETIMEDOUT)
			break; /* cannot poll: job_reap_all kills and waits */
	}
	job_drain_stderr(j);
	/* after a timeout or a kill the group dies anyway */
	if (!j->timed_out && !j->killed)
		job_find_strays(j);
	job_reap_all(j);
	job_cgroups_end(j);
	job_end_strays(j);
	job_result(j, &r);
	job_free(j);
	if (res)
		*res = r;
	return r.ok ? 0 : -EIO;
}
