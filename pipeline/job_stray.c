/*
 * job_stray.c - what a job's stages left running. Once every stage exited,
 * any other process still in the session of one of the job's children (a
 * background child that closed its output but runs on, or one holding the
 * pipe between two stages) fails the job: a shard is computed by processes
 * that are done. Strays are found in /proc, killed with the groups by
 * job_reap_all and one by one through pidfds (one that moved to another
 * process group of the session), then waited for - and reaped when this
 * process became their parent (a subreaper, or PID 1 in a container) - so
 * that nothing of a finished job runs on.
 *
 * A process that left the session (setsid) is out of reach here, as it is
 * of the groups' SIGKILL; a stage's cgroup, where it has one, still holds
 * it.
 *
 * Not for: the stages and the feeder, the job's own children, which
 * job_io.c waits for and reaps.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job_i.h"

/* PF_EXITING of include/linux/sched.h, in the flags field (9) of
 * /proc/PID/stat: the process is inside exit(2). One whose exit closed the
 * output is at least that far when its end of file is read. */
#define JOB_PF_EXITING 0x4UL
/* How long job_end_strays waits for killed strays, in all. */
#define JOB_STRAY_WAIT_MS 5000

struct proc_stat {
	char name[16]; /* comm, control characters as '?' */
	char state;
	pid_t session;
	unsigned long flags;
};

/* Copies comm, the text between the first '(' and the last ')'. */
static bool stat_name(const char *buf, struct proc_stat *ps, const char **rest)
{
	const char *open_paren = strchr(buf, '(');
	const char *close_paren = strrchr(buf, ')');
	size_t len;

	if (!open_paren || !close_paren || close_paren < open_paren)
		return false;
	len = (size_t)(close_paren - open_paren - 1);
	if (len >= sizeof ps->name)
		len = sizeof ps->name - 1;
	for (size_t k = 0; k < len; k++) {
		unsigned char c = (unsigned char)open_paren[1 + k];

		ps->name[k] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	ps->name[len] = '\0';
	*rest = close_paren + 1;
	return true;
}

/* Reads /proc/PID/stat; false when the process is gone or unreadable. */
static bool read_stat(pid_t pid, struct proc_stat *ps)
{
	char path[64], buf[1024];
	const char *rest;
	int fd, session;
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* after comm: state ppid pgrp session tty_nr tpgid flags */
	if (!stat_name(buf, ps, &rest) ||
	    sscanf(rest, " %c %*d %*d %d %*d %*d %lu", &ps->state, &session,
		   &ps->flags) != 3)
		return false;
	ps->session = session;
	return true;
}

static bool running_in(const struct mf_job *j, const struct proc_stat *ps)
{
	return job_in_groups(j, ps->session) && ps->state != 'Z' &&
	    ps->state != 'X' && !(ps->flags & JOB_PF_EXITING);
}

static bool own_child(const struct mf_job *j, pid_t pid)
{
	if (pid == j->feeder)
		return true;
	for (size_t i = 0; i < j->n; i++)
		if (pid == j->st[i].pid)
			return true;
	return false;
}

/* Counts a stray; the first JOB_STRAY_WAIT get a pidfd, opened only while
 * /proc says the pid is still a stray of this job, so that a reused pid
 * cannot be waited for or killed. */
static void note_stray(struct mf_job *j, pid_t pid, const struct proc_stat *ps)
{
	struct job_strays *s = &j->strays;

	if (s->n < JOB_STRAY_WAIT) {
		struct proc_stat again;
		int fd = pidfd_open(pid, 0);

		if (fd < 0 && errno == ESRCH)
			return; /* gone meanwhile */
		if (fd >= 0 &&
		    (!read_stat(pid, &again) || !running_in(j, &again))) {
			close(fd);
			return;
		}
		s->pidfd[s->n] = fd;
	}
	if (s->n == 0) {
		s->first = pid;
		memcpy(s->name, ps->name, sizeof s->name);
	}
	s->n++;
}

void job_strays_init(struct job_strays *s)
{
	memset(s, 0, sizeof *s);
	for (size_t k = 0; k < JOB_STRAY_WAIT; k++)
		s->pidfd[k] = -1;
}

/*
 * Looks for processes of the job's sessions other than its own children
 * that are neither zombies nor exiting. Call once every stage exited,
 * before the groups are killed. Without /proc, nothing is found.
 */
void job_find_strays(struct mf_job *j)
{
	struct dirent *e;
	DIR *d;

	d = opendir("/proc");
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		struct proc_stat ps;
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		if (*end || pid <= 0 || pid > INT32_MAX ||
		    own_child(j, (pid_t)pid))
			continue;
		if (read_stat((pid_t)pid, &ps) && running_in(j, &ps))
			note_stray(j, (pid_t)pid, &ps);
	}
	closedir(d);
}

/* Waits until fd, a pidfd, says its process exited, or until `until`. */
static void wait_exit(int fd, uint64_t until)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	for (;;) {
		uint64_t now = mf_mono_ns();
		int ms = now >= until ? 0 : (int)((until - now) / 1000000 + 1);

		if (poll(&p, 1, ms) >= 0 || errno != EINTR)
			return;
	}
}

/*
 * After the groups' SIGKILL: kills the strays that have a pidfd (one may
 * have moved to a group of its own), waits for them to exit, at most
 * JOB_STRAY_WAIT_MS in all, and reaps those that are this
 * process's children (ECHILD for the others, whose parent reaps them).
 */
void job_end_strays(struct mf_job *j)
{
	struct job_strays *s = &j->strays;
	uint64_t until = mf_mono_ns() + JOB_STRAY_WAIT_MS * 1000000ULL;

	for (size_t k = 0; k < JOB_STRAY_WAIT; k++) {
		siginfo_t si;

		if (s->pidfd[k] < 0)
			continue;
		(void)pidfd_send_signal(s->pidfd[k], SIGKILL, NULL, 0);
		wait_exit(s->pidfd[k], until);
		(void)waitid(P_PIDFD, (id_t)s->pidfd[k], &si,
			     WEXITED | WNOHANG);
		close(s->pidfd[k]);
		s->pidfd[k] = -1;
	}
}
