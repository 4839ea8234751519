/*
 * engine_cancel.c - cancelling: a flight's wait and its stages' processes
 * stopped (one shard, or all at unmount), and whether a process is one of
 * this engine's stages' (a session it started, its own or a parent's).
 *
 * Not for: starting or reaping the stages (engine_run.c, util's jobs).
 */
#include "engine_i.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- cancelling ---- */

/* Caller holds e->lock. */
static void flight_cancel(struct flight *f)
{
	f->cancelled = true;
	mf_job_stop(f->job);
}

void mf_engine_cancel(struct mf_engine *e, const char *fp, uint32_t shard)
{
	pthread_mutex_lock(&e->lock);
	struct flight *f = eng_flight_find(e, fp, shard);
	if (f)
		flight_cancel(f);
	pthread_mutex_unlock(&e->lock);
}

void mf_engine_cancel_all(struct mf_engine *e)
{
	pthread_mutex_lock(&e->lock);
	e->cancel_all = true;
	for (struct flight *f = e->flights; f; f = f->next)
		flight_cancel(f);
	pthread_mutex_unlock(&e->lock);
}

/* The parent and session fields of /proc/PID/stat: 0, or -1 when pid
 * is gone or unreadable. */
static int proc_ids(pid_t pid, pid_t *ppid, pid_t *sid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *rest = strrchr(buf, ')'); /* after comm, which may hold
						 anything */
	int p = 0, s = 0;
	if (!rest || sscanf(rest + 1, " %*c %d %*d %d", &p, &s) != 2)
		return -1;
	*ppid = (pid_t)p;
	*sid = (pid_t)s;
	return 0;
}

static bool stage_session(struct mf_engine *e, pid_t sid)
{
	bool ours = false;
	pthread_mutex_lock(&e->lock);
	for (struct flight *f = e->flights; f && !ours; f = f->next)
		ours = mf_job_has_session(f->job, sid);
	pthread_mutex_unlock(&e->lock);
	return ours;
}

/* How far up a process's parents the check looks: a stage's process
 * tree is rarely deeper, and the walk stays bounded. */
#define ANCESTORS_MAX 64

bool mf_engine_runs_process(struct mf_engine *e, pid_t pid)
{
	/* the process or one of its parents in a stage's session: a child
	 * that left the session (setsid, Python's start_new_session) still
	 * descends from its stage. Not caught: a process whose parents
	 * exited (a double fork), which init or a subreaper adopted. */
	for (int depth = 0; pid > 1 && depth < ANCESTORS_MAX; depth++) {
		pid_t ppid, sid;
		if (proc_ids(pid, &ppid, &sid) != 0)
			return false;
		if (sid > 0 && stage_session(e, sid))
			return true;
		pid = ppid;
	}
	return false;
}

/* The job is stopped only while registered here, and it is unregistered
 * before mf_job_finish reaps its processes: so no id it signals is ever
 * another process's. */
bool eng_flight_job(struct mf_engine *e, const char *fp, uint32_t shard,
		    const struct mf_job *job)
{
	pthread_mutex_lock(&e->lock);
	struct flight *f = eng_flight_find(e, fp, shard);
	bool cancelled = f ? f->cancelled : e->cancel_all;
	if (f)
		f->job = job;
	pthread_mutex_unlock(&e->lock);
	return cancelled;
}
