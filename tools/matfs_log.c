/*
 * matfs_log.c - the daemon's log: stderr, syslog or a size-rotated file
 * (matfs_log.h). One mutex serializes the file's writes and rotation; a
 * message is one write(2) with O_APPEND, so lines of two daemons sharing
 * a file do not mix, and the file is rotated under flock(2) so two
 * daemons do not rotate it twice. Each line names its host (as syslog's
 * do), for a file several hosts' daemons write. A file renamed or removed under the
 * daemon (another daemon's rotation, logrotate) is noticed at the next
 * message and opened again.
 *
 * Not for: choosing the destination (tools/matfs.c).
 */
#include "matfs_log.h"
#include "mf_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = MF_MUTEX_INITIALIZER;
/* guarded by lock: */
static int log_fd = -1;
static char log_path[PATH_MAX];
static uint64_t log_max = MLOG_MAX_BYTES;
static bool to_syslog, to_stderr = true, stderr_all = true;
static char host[256]; /* named in every line of the file */

bool mlog_syslog_here(void)
{
	struct stat st;
	return stat("/dev/log", &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Opens path for appending without following a symlink; checks that it is
 * this user's own regular file with one link. */
static int open_checked(const char *path, int *out)
{
	int fd = open(path,
		      O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC |
			  O_NONBLOCK,
		      MLOG_MODE);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(fd, &st) == 0 ? 0 : -errno;
	if (rc == 0 &&
	    (!S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	     st.st_uid != geteuid()))
		rc = -EPERM;
	if (rc == 0 && (st.st_mode & 07777 & ~MLOG_MODE) &&
	    fchmod(fd, st.st_mode & MLOG_MODE) != 0)
		rc = -errno;
	if (rc == 0 && fcntl(fd, F_SETFL, O_WRONLY | O_APPEND) != 0)
		rc = -errno;
	if (rc) {
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

int mlog_open_file(const char *path, uint64_t max_bytes)
{
	if (strlen(path) + 8 >= sizeof(log_path))
		return -ENAMETOOLONG;
	int fd;
	int rc = open_checked(path, &fd);
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	if (log_fd >= 0)
		close(log_fd);
	log_fd = fd;
	snprintf(log_path, sizeof(log_path), "%s", path);
	log_max = max_bytes ? max_bytes : MLOG_MAX_BYTES;
	to_syslog = false;
	pthread_mutex_unlock(&lock);
	return 0;
}

void mlog_use_syslog(void)
{
	openlog("matfs", LOG_PID, LOG_DAEMON);
	pthread_mutex_lock(&lock);
	to_syslog = true;
	pthread_mutex_unlock(&lock);
}

void mlog_stderr(bool on, bool verbose)
{
	pthread_mutex_lock(&lock);
	to_stderr = on;
	stderr_all = verbose;
	pthread_mutex_unlock(&lock);
}

/* FILE.K-1 to FILE.K, ..., FILE to FILE.1; caller holds lock and the
 * file's flock. A name that cannot move (another user's file or folder
 * in its place, in a sticky folder) is removed instead, losing that old
 * file, so that FILE itself always goes: nothing another user plants
 * beside the log makes it grow past the limit. */
static void rotate_names(void)
{
	char from[PATH_MAX + 8], to[PATH_MAX + 8];
	for (int k = MLOG_KEEP; k >= 1; k--) {
		if (k == 1)
			snprintf(from, sizeof(from), "%s", log_path);
		else
			snprintf(from, sizeof(from), "%s.%d", log_path, k - 1);
		snprintf(to, sizeof(to), "%s.%d", log_path, k);
		if (rename(from, to) != 0 && errno != ENOENT)
			(void)unlink(from);
	}
}

/* Before a write: a file past the limit is rotated, and a file that is
 * no longer the one at the path (rotated by another daemon, or moved
 * away) is opened again. When that fails (a symlink or another user's
 * file now at the path) the daemon writes on to the file it holds, up to
 * the limit: false then, to drop the message rather than fill the disk.
 * Caller holds lock. */
static bool file_check(void)
{
	struct stat fst, pst;
	if (fstat(log_fd, &fst) != 0)
		return true;
	bool moved = stat(log_path, &pst) != 0 || pst.st_ino != fst.st_ino ||
	    pst.st_dev != fst.st_dev;
	if (!moved && (uint64_t)fst.st_size >= log_max &&
	    flock(log_fd, LOCK_EX) == 0) {
		/* another daemon may have rotated it while we waited */
		if (stat(log_path, &pst) == 0 && pst.st_ino == fst.st_ino &&
		    pst.st_dev == fst.st_dev)
			rotate_names();
		(void)flock(log_fd, LOCK_UN);
		moved = true;
	}
	int fd;
	if (moved && open_checked(log_path, &fd) == 0) {
		close(log_fd);
		log_fd = fd;
		return true;
	}
	return !moved || (uint64_t)fst.st_size < log_max;
}

static const char *const level_name[] = {"error", "warning", "info"};

/* The length of the UTF-8 sequence at s if it is valid and no C1
 * control (U+0080..U+009F, which terminals obey as escapes), else 0. */
static size_t utf8_len(const unsigned char *s)
{
	size_t n = mf_utf8_len(s);
	return n == 2 && s[0] == 0xc2 && s[1] < 0xa0 ? 0 : n;
}

/* msg into clean (size len): controls (C0 but tab, DEL, C1) and bytes
 * that are not UTF-8 become '?', so a stage's stderr can neither forge
 * a log line nor send a terminal escape to whoever reads the log; a
 * character that does not fit whole is cut. */
static void clean_text(const char *msg, char *clean, size_t len)
{
	size_t n = 0;
	const unsigned char *p = (const unsigned char *)msg;
	while (*p && n + 1 < len) {
		size_t k = *p >= 0x80 ? utf8_len(p) : 1;
		if (k > 1 && n + k < len) {
			memcpy(clean + n, p, k);
			n += k, p += k;
		} else if (k > 1) {
			break;
		} else {
			clean[n++] =
			    k == 0 || (*p < 0x20 && *p != '\t') || *p == 0x7f
			    ? '?'
			    : (char)*p;
			p++;
		}
	}
	clean[n] = 0;
}

void mlog_write(int level, const char *msg)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO};
	if (level < MLOG_ERR || level > MLOG_INFO)
		level = MLOG_ERR;
	char clean[2048];
	clean_text(msg, clean, sizeof(clean));
	pthread_mutex_lock(&lock);
	if (to_stderr && (stderr_all || level <= MLOG_WARN))
		fprintf(stderr, "matfs: %s\n", clean);
	if (to_syslog) {
		syslog(prio[level], "%s", clean);
	} else if (log_fd >= 0 && file_check()) {
		char line[2200], ts[40];
		time_t now = time(NULL);
		struct tm tm;
		localtime_r(&now, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S%z", &tm);
		if (!host[0] && gethostname(host, sizeof(host) - 1) != 0)
			snprintf(host, sizeof(host), "-");
		int len =
		    snprintf(line, sizeof(line), "%s %s matfs[%d] %s: %s\n", ts,
			     host, (int)getpid(), level_name[level], clean);
		if (len > (int)sizeof(line) - 1)
			len = (int)sizeof(line) - 1;
		if (len > 0 && write(log_fd, line, (size_t)len) < 0) {
			/* nowhere left to say it */
		}
	}
	pthread_mutex_unlock(&lock);
}
