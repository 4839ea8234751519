/*
 * matfs.c - the daemon: parses the command line (FUSE conventions, and the
 * mount.fuse3 form "matfs SOURCE MOUNTPOINT -o OPTIONS" that /etc/fstab
 * uses), goes to the background unless -f, mounts, and runs libfuse's
 * multi-threaded loop over the FUSE layer (fs/mf_fuse.h) until unmounted or
 * signalled.
 *
 * In the background it reports failure to the shell: the parent waits
 * until the child has opened the store, registered the specs and mounted,
 * and exits 1 if it did not; only then does the child leave the terminal.
 *
 * Messages (matfs_log.c): stderr in the foreground; in the background
 * syslog when /dev/log is a socket, else the log file; the log file
 * whenever -o log=FILE is given (default STORE/matfs.log, and
 * STORE/matfs-HOST.log on a catalog several hosts share). Until mounted,
 * warnings and errors also go to stderr, so the shell sees why a start
 * failed.
 *
 * Not for: anything the mount does (fs/fuse/).
 */
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "matfs_log.h"
#include "mf_engine.h"
#include "mf_fuse.h"
#include "mf_util.h"
#include "mf_config.h"
#include "mf_pipeline.h"

#define STOP_WAIT_MS 2000 /* for materializations running at unmount */

struct cli {
	char *store, *catalog, *pipelines, *max_size, *workers, *cache;
	char *spec_poll, *push_max;
	char *cgroup;
	char *spec_timeout;
	char *log, *log_size;
	uint64_t log_max; /* parsed log_size; 0: MLOG_MAX_BYTES */
	char *pos[3]; /* SOURCE? MOUNTPOINT */
	int n_pos;
	int foreground, debug, help, version, allow_other, nopush;
};

enum { KEY_HELP, KEY_VERSION, KEY_FG, KEY_DEBUG, KEY_ALLOW_OTHER };

#define OPT(t, f)                                                              \
	{                                                                      \
		t, offsetof(struct cli, f), 0                                  \
	}
static const struct fuse_opt cli_opts[] = {
    OPT("--store=%s", store),
    OPT("--store %s", store),
    OPT("store=%s", store),
    OPT("--catalog=%s", catalog),
    OPT("--catalog %s", catalog),
    OPT("catalog=%s", catalog),
    OPT("--pipelines=%s", pipelines),
    OPT("--pipelines %s", pipelines),
    OPT("pipelines=%s", pipelines),
    OPT("max_size=%s", max_size),
    OPT("workers=%s", workers),
    OPT("cache=%s", cache),
    OPT("spec_poll=%s", spec_poll),
    OPT("push_max=%s", push_max),
    OPT("cgroup=%s", cgroup),
    OPT("spec_timeout=%s", spec_timeout),
    OPT("log=%s", log),
    OPT("log_size=%s", log_size),
    {"nopush", offsetof(struct cli, nopush), 1},
    FUSE_OPT_KEY("-h", KEY_HELP),
    FUSE_OPT_KEY("--help", KEY_HELP),
    FUSE_OPT_KEY("-V", KEY_VERSION),
    FUSE_OPT_KEY("--version", KEY_VERSION),
    FUSE_OPT_KEY("-f", KEY_FG),
    FUSE_OPT_KEY("-d", KEY_DEBUG),
    FUSE_OPT_KEY("debug", KEY_DEBUG),
    FUSE_OPT_KEY("allow_other", KEY_ALLOW_OTHER),
    FUSE_OPT_END,
};

static const char usage[] =
    "usage: matfs [--store DIR] [--catalog URL] [--pipelines DIR] [-f] [-d]\n"
    "             [-o OPTIONS] MOUNTPOINT\n"
    "\n"
    "Serves the outputs of the pipelines in the pipelines folder as files:\n"
    "one directory per fingerprint, one symlink per pipeline name, one\n"
    "file per shard, computed on first read and kept in the store.\n"
    "\n"
    "  --store DIR        the store (default $XDG_CACHE_HOME/matfs, else\n"
    "                     ~/.cache/matfs); also -o store=DIR\n"
    "  --catalog URL      the catalog (default sqlite:STORE/catalog.db);\n"
    "                     postgresql://... shares one among many hosts\n"
    "                     (passwords from ~/.pgpass, PGPASSFILE or\n"
    "                     PGPASSWORD); also -o catalog=URL\n"
    "  --pipelines DIR    the folder of specs, *.yaml and *.yml (default\n"
    "                     ./pipelines); also -o pipelines=DIR\n"
    "  -f                 stay in the foreground\n"
    "  -d                 debug: foreground, and every FUSE request logged\n"
    "  -o OPTIONS         comma-separated mount options:\n"
    "       workers=N       concurrent materializations (default: cores)\n"
    "       cache=SIZE      memory for decompressed chunks (default 256MiB)\n"
    "       max_size=SIZE   store size limit: least recently read\n"
    "                       snapshots are evicted past it\n"
    "       spec_poll=SECONDS\n"
    "                       check specs, their deps and inputs by stat\n"
    "                       every SECONDS, not with inotify (network\n"
    "                       filesystems)\n"
    "       cgroup=PATH     a cgroup v2 folder delegated to matfs: stages\n"
    "                       with memory: get their own cgroup under it\n"
    "                       (default, as root: matfs's own cgroup)\n"
    "       spec_timeout=SECONDS\n"
    "                       give up on a spec whose deps and inputs take\n"
    "                       longer to read (default 60)\n"
    "       log=FILE        log to FILE (default in the background\n"
    "                       without /dev/log: STORE/matfs.log, or\n"
    "                       STORE/matfs-HOST.log on PostgreSQL)\n"
    "       log_size=SIZE   rotate the log file past SIZE (default\n"
    "                       10MiB), keeping 3 old files: FILE.1 to .3\n"
    "       nopush          first readers read through the daemon: no\n"
    "                       pages put in the kernel's cache as the stages\n"
    "                       write them\n"
    "       push_max=SIZE   at most SIZE of a shard put there (default a\n"
    "                       quarter of the memory)\n"
    "       allow_other     let other users in (adds default_permissions)\n"
    "       and the FUSE options of mount.fuse3(8)\n"
    "  -h, --help         this text\n"
    "  -V, --version      the version\n"
    "\n"
    "Unmount with fusermount3 -u MOUNTPOINT (or umount as root).\n"
    "/etc/fstab:  matfs /mnt/data fuse.matfs "
    "store=/var/cache/matfs,pipelines=/etc/matfs/pipelines,allow_other 0 0\n";

static bool log_elsewhere; /* the log is no terminal: stderr ends at mount */

static void log_msg(void *arg, int level, const char *msg)
{
	(void)arg;
	mlog_write(level, msg);
}

static void log_job(void *arg, const char *msg)
{
	log_msg(arg, MFS_LOG_WARN, msg);
}

static int cli_proc(void *data, const char *arg, int key, struct fuse_args *out)
{
	(void)out;
	struct cli *c = data;
	switch (key) {
	case KEY_HELP:
		c->help = 1;
		return 0;
	case KEY_VERSION:
		c->version = 1;
		return 0;
	case KEY_FG:
		c->foreground = 1;
		return 0;
	case KEY_DEBUG: /* libfuse prints the requests */
		c->debug = c->foreground = 1;
		return 1;
	case KEY_ALLOW_OTHER:
		c->allow_other = 1;
		return 1;
	case FUSE_OPT_KEY_NONOPT:
		if (c->n_pos == 2) {
			fprintf(stderr, "matfs: unexpected argument '%s'\n",
				arg);
			return -1;
		}
		c->pos[c->n_pos++] = strdup(arg);
		return 0;
	default:
		return 1; /* a FUSE option: fuse_session_new checks it */
	}
}

/* An absolute form of path (which need not exist); caller frees. */
static char *absolute(const char *path)
{
	char *r = realpath(path, NULL);
	if (r || path[0] == '/')
		return r ? r : strdup(path);
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		return NULL;
	if (asprintf(&r, "%s/%s", cwd, path) < 0)
		return NULL;
	return r;
}

static int parse_size(const char *what, const char *s, uint64_t *out)
{
	if (!s)
		return 0;
	int rc = mf_parse_size(s, out);
	if (rc)
		fprintf(stderr,
			"matfs: bad %s '%s': expected a size such as "
			"10GiB\n",
			what, s);
	return rc;
}

/* A whole number of what, from 1 to max; s NULL leaves *out. */
static int parse_count(const char *what, const char *s, long max, unsigned *out)
{
	if (!s)
		return 0;
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == 0 || *end || v < 1 || v > max) {
		fprintf(stderr, "matfs: bad %s '%s': expected 1-%ld\n", what, s,
			max);
		return -EINVAL;
	}
	*out = (unsigned)v;
	return 0;
}

/* Fills o from c: absolute paths (the daemon leaves its working folder)
 * and parsed values. The strings belong to c. */
static int make_opts(struct cli *c, struct mfs_opts *o)
{
	memset(o, 0, sizeof(*o));
	char *store = c->store ? strdup(c->store) : mf_engine_default_store();
	char *s = store ? absolute(store) : NULL;
	char *p = absolute(c->pipelines ? c->pipelines : "pipelines");
	free(store);
	free(c->store);
	free(c->pipelines);
	c->store = s;
	c->pipelines = p;
	if (!s || !p)
		return -ENOMEM;
	o->store_dir = s;
	o->catalog = c->catalog;
	if (c->catalog && mf_engine_catalog_has_password(c->catalog))
		fprintf(stderr,
			"matfs: warning: catalog '%s' carries a "
			"password, which every user of this host can "
			"read in the process list; put it in "
			"~/.pgpass, PGPASSFILE or PGPASSWORD\n",
			mf_engine_catalog_shown(c->catalog));
	o->pipelines_dir = p;
	o->allow_other = c->allow_other;
	o->no_push = c->nopush;
	o->log = log_msg;
	int rc = parse_size("max_size", c->max_size, &o->max_size);
	if (rc == 0)
		rc = parse_size("cache", c->cache, &o->cache_bytes);
	if (rc == 0)
		rc = parse_size("push_max", c->push_max, &o->push_max);
	if (rc == 0)
		rc = parse_size("log_size", c->log_size, &c->log_max);
	if (rc == 0)
		rc = parse_count("workers", c->workers, 1024, &o->workers);
	if (rc == 0)
		rc = parse_count("spec_poll", c->spec_poll, 86400,
				 &o->spec_poll_s);
	if (rc == 0)
		rc = parse_count("spec_timeout", c->spec_timeout, 86400,
				 &o->spec_timeout_s);
	return rc;
}

/* mkdir -p dir, folders 0755 as the store makes them. */
static void make_folders(const char *dir)
{
	char p[PATH_MAX];
	if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p))
		return;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;
		*s = 0;
		(void)mkdir(p, 0755);
		*s = c;
		if (!c)
			return;
	}
}

/*
 * Chooses where messages go (the top of this file says where) before
 * anything is logged: the specs registered at start are. *dest, what the
 * root's user.matfs.log shows, is the caller's. 0, or the exit status;
 * *retry when the default file must be opened again after the store.
 */
static int setup_log(struct cli *c, char **dest, bool *retry)
{
	mlog_stderr(true, c->foreground);
	if (!c->log && (c->foreground || mlog_syslog_here())) {
		if (!c->foreground)
			mlog_use_syslog();
		log_elsewhere = !c->foreground;
		*dest = strdup(c->foreground ? "stderr" : "syslog");
		return *dest ? 0 : 1;
	}
	char *path = c->log ? absolute(c->log)
			    : mf_engine_default_log(c->store, c->catalog);
	if (!path)
		return 1;
	if (!c->log)
		make_folders(c->store);
	int rc = mlog_open_file(path, c->log_max);
	if (rc && !c->log) {
		/* the store may be unusable: its own error says so first
		 * (mfs_new), and the file is tried again once it opened */
		*retry = true;
		rc = 0;
	}
	if (rc) {
		fprintf(stderr, "matfs: log '%s': %s\n", path, strerror(-rc));
		free(path);
		return 1;
	}
	log_elsewhere = true;
	*dest = path;
	return 0;
}

/* Forks: the parent waits for the child's word (a status byte, or EOF
 * when it died) and exits with it. Returns in the child only. */
static int background(int *ready_fd)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) != 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(pfd[1]);
		char st = 1;
		while (read(pfd[0], &st, 1) < 0 && errno == EINTR)
			;
		_exit(st);
	}
	close(pfd[0]);
	setsid();
	*ready_fd = pfd[1];
	return 0;
}

/* Mounted: leave the terminal, log to syslog, let the parent exit 0. */
static void detach(int ready_fd)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	mlog_stderr(false, false);
	char ok = 0;
	if (write(ready_fd, &ok, 1) != 1)
		log_msg(NULL, MFS_LOG_WARN, "could not tell the parent");
	close(ready_fd);
}

static int loop(struct fuse_session *se)
{
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	if (!cfg)
		return -ENOMEM;
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	fuse_loop_cfg_set_max_threads(cfg, 16);
	int rc = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return rc;
}

/*
 * Every signal whose default would kill the daemon is handled on purpose
 * (docs/man/matfs.8, SIGNALS): SIGTERM, SIGINT and SIGHUP stop it cleanly
 * (libfuse's handlers end the session: unmount, jobs stopped, exit 0);
 * the ones below mean nothing to it and are ignored, so a stray `kill
 * -USR1` or an alarm never leaves the mount ENOTCONN with its stages
 * orphaned. SIGPIPE is libfuse's to ignore; SIGXFSZ makes a store file
 * past the file size limit fail its shard (EFBIG). SIGTSTP, SIGTTIN and
 * SIGTTOU would stop the daemon, and every reader with it: ignored too.
 * SIGXCPU (LimitCPU, ulimit -t) stops it cleanly, as SIGTERM does. Stages
 * get every default back (job_child.c). SIGQUIT and the faults (SIGSEGV,
 * SIGABRT, ...) keep their core dump; SIGPROF stays a profiler's.
 */
static struct fuse_session *stop_se; /* for on_xcpu */

static void on_xcpu(int sig)
{
	(void)sig;
	if (stop_se)
		fuse_session_exit(stop_se);
}

static void ignore_signals(struct fuse_session *se)
{
	static const int ignored[] = {SIGUSR1, SIGUSR2, SIGALRM,   SIGVTALRM,
				      SIGIO,   SIGPWR,	SIGSTKFLT, SIGXFSZ,
				      SIGTSTP, SIGTTIN, SIGTTOU};
	struct sigaction sa = {.sa_handler = on_xcpu};
	sigemptyset(&sa.sa_mask);
	stop_se = se;
	(void)sigaction(SIGXCPU, &sa, NULL);
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		(void)signal(ignored[i], SIG_IGN);
	/* real-time signals terminate by default too; the C library keeps
	 * those below SIGRTMIN for itself */
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
		(void)signal(sig, SIG_IGN);
}

/* Mounts, serves until unmounted or signalled, cleans up. */
static int serve(struct mfs *m, struct fuse_args *args, const char *mnt,
		 int ready_fd)
{
	int status = 1;
	struct fuse_session *se = fuse_session_new(
	    args, mfs_ops(), sizeof(struct fuse_lowlevel_ops), m);
	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se) != 0)
		goto destroy;
	ignore_signals(se);
	if (fuse_session_mount(se, mnt) != 0)
		goto signals;
	int rc = mfs_start(m, se);
	if (rc) {
		log_msg(NULL, MFS_LOG_ERR, strerror(-rc));
		goto unmount;
	}

	if (ready_fd >= 0)
		detach(ready_fd);
	else if (log_elsewhere)
		mlog_stderr(false, false);
	/* > 0: the signal that stopped it (SIGTERM, SIGINT, SIGHUP): a clean
	 * stop, as systemd's stop is */
	status = loop(se) >= 0 ? 0 : 1;
unmount:;
	/* every job, push and reply ends while /dev/fuse is still open:
	 * libfuse's unmount closes it, and a write after the close could
	 * land in whatever file took its number */
	int stopped = mfs_stop(m, STOP_WAIT_MS);
	/* a mount that left this namespace is gone here: what its mount
	 * point holds now is someone else's (fuse_session_destroy closes
	 * /dev/fuse) */
	if (!mfs_mount_left(m))
		fuse_session_unmount(se);
	if (stopped != 0) {
		/* a stage still runs: its run dies with us and is taken
		 * over by the next reader */
		log_msg(NULL, MFS_LOG_WARN,
			"unmounted with materializations in progress");
		_exit(status);
	}
      signals:
	stop_se = NULL;
	fuse_remove_signal_handlers(se);
destroy:
	fuse_session_destroy(se);
	return status;
}

/* Names the mount after its store: fsname is the store's real path (what
 * `df` and /proc/self/mountinfo show as its source, and how `matctl stats`
 * and `matctl log` find a store's mounts without asking every matfs mount
 * on the machine), commas and backslashes escaped for libfuse. */
static int add_fsname(struct fuse_args *args, const char *store)
{
	char real[PATH_MAX];
	const char *name = realpath(store, real) ? real : store;
	size_t cap = 2 * strlen(name) + 32;
	char *opt = malloc(cap);
	if (!opt)
		return -1;
	size_t w = (size_t)snprintf(opt, cap, "-ofsname=");
	for (const char *r = name; *r; r++) {
		if (*r == ',' || *r == '\\')
			opt[w++] = '\\';
		opt[w++] = *r;
	}
	snprintf(opt + w, cap - w, ",subtype=matfs");
	int rc = fuse_opt_insert_arg(args, 1, opt);
	free(opt);
	return rc;
}

static int run(struct cli *c, struct fuse_args *args, const char *mnt)
{
	struct mfs_opts o;
	if (make_opts(c, &o) != 0)
		return 2;
	o.mountpoint = mnt;
	o.readahead_kb = MFS_READAHEAD_KB;
	if (c->allow_other && fuse_opt_add_arg(args, "-odefault_permissions"))
		return 1;
	if (add_fsname(args, c->store) != 0)
		return 1;
	int ready_fd = -1;
	if (!c->foreground && background(&ready_fd) != 0) {
		fprintf(stderr, "matfs: fork: %s\n", strerror(errno));
		return 1;
	}
	if (chdir("/") != 0)
		return 1;
	char *dest = NULL;
	bool retry = false;
	int st = setup_log(c, &dest, &retry);
	if (st)
		return st;
	o.log_dest = dest;
	/* a failure is logged by the first stage with memory, if any */
	(void)mf_job_cgroup_setup(c->cgroup, log_job, NULL);
	struct mfs *m;
	char *err = NULL;
	int rc = mfs_new(&o, &m, &err);
	if (rc == 0 && retry && (rc = mlog_open_file(dest, c->log_max)) != 0) {
		fprintf(stderr, "matfs: log '%s': %s\n", dest, strerror(-rc));
		mfs_free(m);
		free(dest);
		return 1;
	}
	free(dest);
	if (rc) {
		fprintf(stderr, "matfs: %s\n", err ? err : strerror(-rc));
		free(err);
		return 1;
	}
	int status = serve(m, args, mnt, ready_fd);
	mfs_free(m);
	return status;
}

/* True when /proc/self/mountinfo shows a matfs mount at mnt (absolute,
 * resolved). Its fields 5 and after " - " are the mount point, with
 * spaces as \040, and the type. */
static bool is_matfs_mount(const char *mnt)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return false;
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	while (!found && getline(&line, &cap, f) > 0) {
		char point[PATH_MAX], type[64];
		const char *sep = strstr(line, " - ");
		if (!sep ||
		    sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 ||
		    sscanf(sep, " - %63s", type) != 1)
			continue;
		/* unescape \040 (space), \011 (tab), \012, \134 */
		char *w = point;
		for (const char *r = point; *r; r++) {
			unsigned o;
			if (r[0] == '\\' && sscanf(r + 1, "%3o", &o) == 1 &&
			    o < 256) {
				*w++ = (char)o;
				r += 3;
			} else {
				*w++ = *r;
			}
		}
		*w = '\0';
		found =
		    strcmp(point, mnt) == 0 && strcmp(type, "fuse.matfs") == 0;
	}
	free(line);
	fclose(f);
	return found;
}

/* Refuses, with a message naming it as the user did (arg), a mountpoint
 * mnt (resolved) that is not a folder (libfuse would mount over a file)
 * or that a matfs already serves (a second one would hide the first).
 * 0 or 1 (the exit status). */
static int check_mountpoint(const char *arg, const char *mnt)
{
	struct stat st;
	if (stat(mnt, &st) != 0) {
		fprintf(stderr, "matfs: mountpoint '%s': %s\n", arg,
			strerror(errno));
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "matfs: mountpoint '%s': not a directory\n",
			arg);
		return 1;
	}
	if (is_matfs_mount(mnt)) {
		fprintf(stderr,
			"matfs: mountpoint '%s' is already a matfs mount; "
			"unmount it first (fusermount3 -u %s)\n",
			arg, arg);
		return 1;
	}
	return 0;
}

static void cli_release(struct cli *c)
{
	free(c->store);
	free(c->catalog);
	free(c->pipelines);
	free(c->max_size);
	free(c->workers);
	free(c->cache);
	free(c->spec_poll);
	free(c->push_max);
	free(c->cgroup);
	free(c->spec_timeout);
	free(c->log);
	free(c->log_size);
	for (int i = 0; i < c->n_pos; i++)
		free(c->pos[i]);
}

/* The soft limit on descriptors up to the hard one: every shard open by a
 * reader holds one, and readers are many (1024 is the usual soft default;
 * systemd's hard default is 524288). Each user's share is bounded by the
 * mount (fuse_open.c); stages keep their own 4096. */
static void raise_nofile(void)
{
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &r);
	}
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct cli c = {0};
	int status = 2;
	if (fuse_opt_parse(&args, &c, cli_opts, cli_proc) != 0) {
		fputs("see matfs --help\n", stderr);
		goto out;
	}
	status = 0;
	raise_nofile();
	if (c.help) {
		fputs(usage, stdout);
	} else if (c.version) {
		printf("matfs %s (libfuse %s)\n", MF_VERSION,
		       fuse_pkgversion());
	} else if (c.n_pos == 0) {
		fputs("matfs: no mountpoint; see matfs --help\n", stderr);
		status = 2;
	} else {
		/* "matfs SOURCE MOUNTPOINT": mount.fuse3 passes fstab's first
		 * field as SOURCE; matfs has no use for it */
		char *mnt = realpath(c.pos[c.n_pos - 1], NULL);
		if (!mnt) {
			fprintf(stderr, "matfs: mountpoint '%s': %s\n",
				c.pos[c.n_pos - 1], strerror(errno));
			status = 1;
		} else {
			status = check_mountpoint(c.pos[c.n_pos - 1], mnt);
			if (status == 0)
				status = run(&c, &args, mnt);
			free(mnt);
		}
	}
out:
	cli_release(&c);
	fuse_opt_free_args(&args);
	return status;
}
