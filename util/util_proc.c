/*
 * util_proc.c - processes and threads: this host's name and boot id, the
 * pid namespace, whether a process (pid and start time) still lives, and
 * the error-checking mutexes of debug builds. Not for: running stages
 * (pipeline/job*.c).
 */
#include "mf_util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void mf_hostname(char *buf, size_t len)
{
	if (gethostname(buf, len) != 0 || !buf[0])
		snprintf(buf, len, "unknown");
	buf[len - 1] = '\0';
}

uint64_t mf_proc_start_time(pid_t pid)
{
	char path[64], data[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = mf_pread_full(fd, data, sizeof(data) - 1, 0);
	close(fd);
	if (n <= 0)
		return 0;
	data[n] = '\0';
	/* comm may hold spaces and parentheses: fields follow the last ')' */
	char *p = strrchr(data, ')');
	if (!p)
		return 0;
	p++;
	/* after ')' come fields 3..; starttime is field 22 */
	for (int field = 3; field < 22 && p; field++) {
		p = strchr(p + 1, ' ');
	}
	if (!p)
		return 0;
	return strtoull(p + 1, NULL, 10);
}

int mf_boot_id(char out[MF_BOOT_ID_LEN + 1])
{
	char buf[MF_BOOT_ID_LEN + 2];
	out[0] = '\0';
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = mf_pread_full(fd, buf, sizeof(buf), 0);
	close(fd);
	if (n < 0)
		return (int)n;
	/* 36 characters and a newline */
	if (n < MF_BOOT_ID_LEN ||
	    (n > MF_BOOT_ID_LEN && buf[MF_BOOT_ID_LEN] != '\n'))
		return -EBADMSG;
	for (int i = 0; i < MF_BOOT_ID_LEN; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		char c = buf[i];
		if (dash ? c != '-'
			 : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return -EBADMSG;
	}
	memcpy(out, buf, MF_BOOT_ID_LEN);
	out[MF_BOOT_ID_LEN] = '\0';
	return 0;
}

uint64_t mf_pid_ns(void)
{
	struct stat sb;
	if (stat("/proc/self/ns/pid", &sb) != 0)
		return 0;
	return (uint64_t)sb.st_ino;
}

bool mf_process_alive(pid_t pid, uint64_t start_time)
{
	if (pid <= 0)
		return false;
	if (kill(pid, 0) != 0 && errno != EPERM)
		return false;
	if (start_time == 0)
		return true;
	return mf_proc_start_time(pid) == start_time;
}

bool mf_mutex_held(const pthread_mutex_t *m)
{
#ifdef __GLIBC__
	return m->__data.__owner == gettid();
#else
	(void)m;
	return true;
#endif
}

int mf_mutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int rc = pthread_mutexattr_init(&a);
	if (rc)
		return -rc;
#ifndef NDEBUG
	rc = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
#endif
	if (rc == 0)
		rc = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -rc;
}
