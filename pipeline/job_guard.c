/*
 * job_guard.c - the guard: one small process per process that runs jobs,
 * which kills the stages this process leaves running when it dies without
 * ending them (kill -9, a crash). Stages lead sessions of their own, so
 * nothing else would: PR_SET_PDEATHSIG fires on the exit of the thread
 * that forked, and jobs run on threads that come and go.
 *
 * The guard is started on the first job: forked, and at once execve'd
 * from /proc/self/exe with MF_JOB_GUARD=1 in an environment of its own,
 * so that it holds none of this process's memory or descriptors; the
 * constructor below then runs its loop instead of main. It leads a session
 * of its own and ignores the terminal's signals. Its end of a
 * SOCK_SEQPACKET pair is its descriptor 3; this process keeps the other
 * (close-on-exec). Each stage and feeder child sends its session id (its
 * pid) on it right after setsid, before it execs or closes the socket, so
 * no child can be missed; job_free sends its removal once the job's
 * children were reaped and its strays ended. When every copy of this
 * process's end is closed (it died: children exec'd or exited long since)
 * the guard reads end of file and SIGKILLs each session it holds: the
 * process group, then every process /proc shows in the session, until
 * none is left; then it exits. A process that left the session (setsid)
 * is out of its reach, as it is of job_end_strays; a stage's cgroup, where
 * it has one, still holds it.
 *
 * Not for: ending jobs while this process lives (job_io.c, job_stray.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job_i.h"

#define GUARD_ENV "MF_JOB_GUARD=1"
#define GUARD_FD 3
/* Sessions the guard holds at most: a process with more stages running
 * at once than this leaves the rest unguarded. */
#define GUARD_MAX 16384
/* Guards one process starts at most: a binary that is no guard when
 * execve'd (one embedding this library) is not forked again for every
 * job. */
#define GUARD_STARTS 4
/* Rounds of /proc scans for processes left in a killed session. */
#define GUARD_ROUNDS 20

enum { GUARD_ADD = 1, GUARD_DEL = 2 };

struct guard_msg {
	int32_t op;
	int32_t sid;
};

/* ---- the guard process ---- */

static pid_t held[GUARD_MAX];
static size_t n_held;

static void hold(pid_t sid)
{
	for (size_t k = 0; k < n_held; k++)
		if (held[k] == sid)
			return;
	if (n_held < GUARD_MAX)
		held[n_held++] = sid;
}

static void drop(pid_t sid)
{
	for (size_t k = 0; k < n_held; k++)
		if (held[k] == sid) {
			held[k] = held[--n_held];
			return;
		}
}

static bool is_held(pid_t sid)
{
	for (size_t k = 0; k < n_held; k++)
		if (held[k] == sid)
			return true;
	return false;
}

/* The session of process pid (field 6 of /proc/PID/stat), or -1. */
static pid_t session_of(const char *pid)
{
	char path[64], buf[1024];
	size_t len = strlen(pid);
	if (len > 20)
		return -1;
	memcpy(path, "/proc/", 6);
	memcpy(path + 6, pid, len);
	memcpy(path + 6 + len, "/stat", 6);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* after comm, which may hold anything */
	if (!p)
		return -1;
	/* ") S PPID PGRP SID" */
	for (int field = 0; field < 4; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return -1;
	}
	return (pid_t)strtol(p + 1, NULL, 10);
}

/* SIGKILLs every process in a held session; true when it found one. */
static bool kill_sessions(void)
{
	bool found = false;
	DIR *d = opendir("/proc");
	if (!d)
		return false;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		pid_t sid = session_of(e->d_name);
		if (sid > 0 && is_held(sid)) {
			(void)kill((pid_t)strtol(e->d_name, NULL, 10), SIGKILL);
			found = true;
		}
	}
	closedir(d);
	return found;
}

static _Noreturn void guard_loop(void)
{
	(void)prctl(PR_SET_NAME, "matfs-guard"); /* not "exe" */
	struct sigaction ign;
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	int ignored[] = {SIGINT,  SIGQUIT, SIGTERM, SIGHUP,  SIGPIPE, SIGUSR1,
			 SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};
	for (size_t k = 0; k < sizeof(ignored) / sizeof(ignored[0]); k++)
		(void)sigaction(ignored[k], &ign, NULL);
	sigset_t none;
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	for (;;) {
		struct guard_msg m;
		ssize_t n = recv(GUARD_FD, &m, sizeof(m), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* every sender is gone */
		if (n != (ssize_t)sizeof(m) || m.sid <= 0)
			continue;
		if (m.op == GUARD_ADD)
			hold(m.sid);
		else if (m.op == GUARD_DEL)
			drop(m.sid);
	}
	for (size_t k = 0; k < n_held; k++) {
		(void)kill(held[k], SIGKILL);
		(void)kill(-held[k], SIGKILL);
	}
	for (int round = 0; round < GUARD_ROUNDS && kill_sessions(); round++)
		usleep(50000);
	_exit(0);
}

/* Runs before main: the guard's own start (see above), else nothing. */
__attribute__((constructor)) static void guard_maybe(void)
{
	const char *v = getenv("MF_JOB_GUARD");
	struct stat st;
	if (!v || strcmp(v, "1") != 0 || fstat(GUARD_FD, &st) != 0 ||
	    !S_ISSOCK(st.st_mode))
		return;
	guard_loop();
}

/* ---- the side of the process that runs jobs ---- */

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static int guard_sock = -1; /* our end; -1: no guard */
static pid_t guard_pid;
static unsigned guard_starts;

/* Forks and execs the guard; its socket end becomes GUARD_FD, its 0-2
 * /dev/null, nothing else stays open. */
static int guard_start(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	struct rlimit rl;
	int max_fd = getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
		rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536
	    ? (int)rl.rlim_cur
	    : 65536;
	static char arg0[] = "matfs-guard", env0[] = GUARD_ENV;
	char *argv[] = {arg0, NULL};
	char *envp[] = {env0, NULL};
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t pid = fork();
	if (pid == 0) {
		/* async-signal-safe only: this process may have threads */
		int null = open("/dev/null", O_RDWR);
		if (setsid() < 0 || null < 0 || dup2(sv[1], GUARD_FD) < 0 ||
		    chdir("/") < 0)
			_exit(127);
		for (int k = 0; k < 3; k++)
			if (dup2(null, k) < 0)
				_exit(127);
		if (syscall(SYS_close_range, GUARD_FD + 1, ~0U, 0) != 0)
			for (int fd = GUARD_FD + 1; fd < max_fd; fd++)
				(void)close(fd);
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		for (int sig = 1; sig < NSIG; sig++)
			if (sig != SIGKILL && sig != SIGSTOP)
				(void)sigaction(sig, &dfl, NULL);
		execve("/proc/self/exe", argv, envp);
		_exit(127);
	}
	int fork_errno = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		return -fork_errno;
	}
	guard_sock = sv[0];
	guard_pid = pid;
	return 0;
}

int job_guard_fd(void)
{
	pthread_mutex_lock(&guard_lock);
	int status;
	if (guard_pid > 0 &&
	    waitpid(guard_pid, &status, WNOHANG) == guard_pid) {
		/* the guard died: start another. The old socket stays open, as
		 * a child forked meanwhile may still send on its number. */
		guard_sock = -1;
		guard_pid = 0;
	}
	if (guard_sock < 0 && guard_starts < GUARD_STARTS) {
		guard_starts++;
		(void)guard_start();
	}
	int fd = guard_sock;
	pthread_mutex_unlock(&guard_lock);
	return fd;
}

int mf_job_guard_start(void)
{
	return job_guard_fd() < 0 ? -EAGAIN : 0;
}

void job_guard_add(int fd)
{
	struct guard_msg m = {GUARD_ADD, (int32_t)getpid()};
	if (fd >= 0)
		(void)send(fd, &m, sizeof(m), MSG_NOSIGNAL);
}

void job_guard_del(pid_t sid)
{
	pthread_mutex_lock(&guard_lock);
	int fd = guard_sock;
	pthread_mutex_unlock(&guard_lock);
	struct guard_msg m = {GUARD_DEL, (int32_t)sid};
	if (fd >= 0 && sid > 0)
		(void)send(fd, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);
}

pid_t mf_job_guard_pid(void)
{
	pthread_mutex_lock(&guard_lock);
	pid_t pid = guard_pid;
	pthread_mutex_unlock(&guard_lock);
	return pid;
}
