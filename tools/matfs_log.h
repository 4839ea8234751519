/*
 * matfs_log.h - where the daemon's messages go (tools/matfs.c decides):
 * stderr in the foreground; in the background syslog when /dev/log is a
 * socket, else a log file; a log file whenever -o log=FILE is given. The
 * file (default STORE/matfs.log) is size-rotated: past its size limit it
 * becomes FILE.1 (FILE.1 becomes FILE.2, ... up to MLOG_KEEP old files)
 * and a new FILE is started. Private to tools/.
 *
 * Not for: deciding what is logged (the FUSE layer and the engine do).
 */
#ifndef MATFS_LOG_H
#define MATFS_LOG_H

#include <stdbool.h>
#include <stdint.h>

#define MLOG_MAX_BYTES (10ULL << 20) /* default -o log_size */
#define MLOG_KEEP 3 /* FILE.1 .. FILE.3 */
#define MLOG_MODE 0640

enum mlog_level { MLOG_ERR = 0, MLOG_WARN, MLOG_INFO }; /* = MFS_LOG_* */

/* Whether syslog can take messages here: /dev/log is a socket. */
bool mlog_syslog_here(void);

/*
 * Opens (creating, mode MLOG_MODE) the log file at path, absolute, and
 * logs to it from now on, rotating past max_bytes. Never follows a
 * symlink at path (O_NOFOLLOW: -ELOOP) and refuses what is not a regular
 * file with one link owned by this user (-EPERM), so no other user can
 * point the daemon's writes at a file of their choice. 0 or -errno.
 */
int mlog_open_file(const char *path, uint64_t max_bytes);
/* Logs to syslog (openlog "matfs", LOG_DAEMON) from now on. */
void mlog_use_syslog(void);
/* Whether messages also go to stderr: all of them (verbose) or errors and
 * warnings only; off once the daemon left the terminal. */
void mlog_stderr(bool on, bool verbose);
/* Logs one message (one line; control characters are shown as '?').
 * Thread-safe. */
void mlog_write(int level, const char *msg);

#endif
