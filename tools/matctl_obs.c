/*
 * matctl_obs.c - what a daemon did: `matctl log [-f]` (its log file) and
 * `matctl stats` (its counters, read from the root xattrs of every mount
 * of the store, and the catalog's totals over every process); and the
 * store of the one mount a matctl without --store uses.
 *
 * A mount of the store is a fuse.matfs mount in /proc/self/mountinfo
 * whose source (the daemon's fsname) is the store's real path, made by
 * the caller or the store's owner, and whose root's user.matfs.store says
 * the same; no other mount is asked.
 *
 * Not for: counting anything (the daemon and the engine count).
 */
#include "matctl.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "matfs_log.h"

#define FOLLOW_POLL_US 200000

/* The root xattr user.matfs.NAME of mnt in buf; 0 or -errno. */
static int root_attr(const char *mnt, const char *name, char *buf, size_t len)
{
	char full[64];
	snprintf(full, sizeof(full), "user.matfs.%s", name);
	ssize_t n = getxattr(mnt, full, buf, len - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] &&
		    r[3]) {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 +
				      (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = 0;
}

/* Whether the mountinfo fields after " - " (dash: "fuse.matfs SOURCE
 * OPTS") name a mount of the store real, made by uid or by the store's
 * owner: anything else is never asked (a stopped daemon of another store,
 * or a user's FUSE mount posing as matfs, could block or lie). */
static bool mount_of(char *dash, const char *real, uid_t owner)
{
	char src[PATH_MAX], opts[1024];
	if (sscanf(dash, " - fuse.matfs %4095s %1023s", src, opts) != 2)
		return false;
	unescape(src);
	if (strcmp(src, real) != 0)
		return false;
	const char *u = strstr(opts, "user_id=");
	if (!u)
		return false;
	uid_t id = (uid_t)strtoul(u + 8, NULL, 10);
	return id == geteuid() || id == owner;
}

/* Calls fn for each mounted matfs daemon serving store (real path). */
static int each_mount(const char *store, void (*fn)(void *, const char *),
		      void *arg)
{
	char real[PATH_MAX];
	struct stat st;
	if (!realpath(store, real) || stat(real, &st) != 0)
		return 0;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return 0;
	char line[8192], mnt[PATH_MAX], attr[PATH_MAX];
	int found = 0;
	while (fgets(line, sizeof(line), f)) {
		char *dash = strstr(line, " - fuse.matfs ");
		if (!dash || !mount_of(dash, real, st.st_uid) ||
		    sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
			continue;
		unescape(mnt);
		if (root_attr(mnt, "store", attr, sizeof(attr)) != 0 ||
		    strcmp(attr, real) != 0)
			continue;
		fn(arg, mnt);
		found++;
	}
	fclose(f);
	return found;
}

/* ---- the store of the one mount (matctl without --store) ---- */

/* Adds "MNT (store STORE)" to the list being built in *list. */
static int add_listed(char **list, const char *mnt, const char *store)
{
	char *s = NULL;
	if (asprintf(&s, "%s%s%s (store %s)", *list ? *list : "",
		     *list ? ", " : "", mnt, store) < 0)
		return -ENOMEM;
	free(*list);
	*list = s;
	return 0;
}

/* Whether a mountinfo line (dash: its fields after " - ") is a live matfs
 * mount made by the caller or by root; its mount point goes to mnt, its
 * store (the source, which its root's user.matfs.store must confirm) to
 * store. Another user's mount is never asked: it could block, or name a
 * store whose catalog makes matctl run that user's stages. */
static bool visible_mount(const char *line, char *dash, char mnt[PATH_MAX],
			  char store[PATH_MAX])
{
	char opts[1024], attr[PATH_MAX];
	if (sscanf(dash, " - fuse.matfs %4095s %1023s", store, opts) != 2 ||
	    sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
		return false;
	const char *u = strstr(opts, "user_id=");
	uid_t id = u ? (uid_t)strtoul(u + 8, NULL, 10) : (uid_t)-1;
	if (!u || (id != geteuid() && id != 0))
		return false;
	unescape(store);
	unescape(mnt);
	return root_attr(mnt, "store", attr, sizeof(attr)) == 0 &&
	    strcmp(attr, store) == 0;
}

int ctl_mounted_store(char **store, char **list)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -ENOENT;
	char line[8192], mnt[PATH_MAX], src[PATH_MAX], one[PATH_MAX] = "";
	int rc = 0, stores = 0;
	*list = NULL;
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		char *dash = strstr(line, " - fuse.matfs ");
		if (!dash || !visible_mount(line, dash, mnt, src))
			continue;
		rc = add_listed(list, mnt, src);
		/* two mounts of one store are one store: more than one is
		 * known once a store differs from the one before */
		if (stores == 0 || strcmp(one, src) != 0)
			stores++;
		snprintf(one, sizeof(one), "%s", src);
	}
	fclose(f);
	if (rc == 0 && stores == 0)
		rc = -ENOENT;
	else if (rc == 0 && stores > 1)
		rc = -ENOTUNIQ;
	else if (rc == 0 && !(*store = strdup(one)))
		rc = -ENOMEM;
	if (rc != -ENOTUNIQ) {
		free(*list);
		*list = NULL;
	}
	return rc;
}

/* ---- log ---- */

struct log_where {
	char path[PATH_MAX];
	char mnt[PATH_MAX];
	bool syslog;
};

static void log_of_mount(void *arg, const char *mnt)
{
	struct log_where *w = arg;
	char dest[PATH_MAX];
	if (w->mnt[0] || root_attr(mnt, "log", dest, sizeof(dest)) != 0)
		return;
	snprintf(w->mnt, sizeof(w->mnt), "%s", mnt);
	if (dest[0] == '/')
		snprintf(w->path, sizeof(w->path), "%s", dest);
	w->syslog = strcmp(dest, "syslog") == 0;
}

/* Who may own the log: root, the store's owner and the owner of the
 * mount's root (the daemon's user). */
struct log_owners {
	uid_t uid[3];
};

/* Opens the log at path for reading, refusing what the daemon would not
 * have written (docs/security.md): a symlink (ELOOP), or anything but a
 * regular file with one link owned by one of owners (EPERM). So root's
 * matctl log never prints a file another user planted at the path. */
static int open_log(const char *path, const struct log_owners *owners, int *out)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(fd, &st) == 0 ? -EPERM : -errno;
	for (size_t i = 0; rc == -EPERM && i < 3; i++)
		if (S_ISREG(st.st_mode) && st.st_nlink == 1 &&
		    st.st_uid == owners->uid[i])
			rc = 0;
	if (rc == 0 && fcntl(fd, F_SETFL, O_RDONLY) != 0)
		rc = -errno;
	if (rc) {
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

static const char *log_refusal(int rc)
{
	if (rc == -ELOOP)
		return "a symlink, not the daemon's log";
	if (rc == -EPERM)
		return "not a regular file with one link owned by root, the "
		       "store's owner or the daemon's user";
	return strerror(-rc);
}

/* Copies what fd has from its offset to stdout; 0 or -errno. */
static int drain(int fd)
{
	char buf[65536];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
			return -EIO;
	fflush(stdout);
	return n < 0 ? -errno : 0;
}

/* The k of path.k (1..MLOG_KEEP) that holds the file fd has open; 0
 * for none (removed, or moved elsewhere). */
static int rotated_to(const char *path, const struct stat *fst)
{
	char name[PATH_MAX + 8];
	for (int k = 1; k <= MLOG_KEEP; k++) {
		struct stat st;
		snprintf(name, sizeof(name), "%s.%d", path, k);
		if (lstat(name, &st) == 0 && st.st_ino == fst->st_ino &&
		    st.st_dev == fst->st_dev)
			return k;
	}
	return 0;
}

/* Prints path.k-1 down to path.1 whole: the files a daemon filled and
 * rotated between two looks, after the one followed became path.k, up
 * to the one opened next (nfd: rotated too meanwhile), which is read
 * from its descriptor. */
static int drain_rotated(const char *path, int k, int nfd,
			 const struct log_owners *owners)
{
	char name[PATH_MAX + 8];
	struct stat nst;
	if (fstat(nfd, &nst) != 0)
		return -errno;
	for (int j = k - 1; j >= 1; j--) {
		int fd;
		snprintf(name, sizeof(name), "%s.%d", path, j);
		if (open_log(name, owners, &fd) != 0)
			continue; /* rotated away meanwhile, or not the log */
		struct stat st;
		if (fstat(fd, &st) == 0 && st.st_ino == nst.st_ino &&
		    st.st_dev == nst.st_dev) {
			close(fd);
			break;
		}
		int rc = drain(fd);
		close(fd);
		if (rc)
			return rc;
	}
	return 0;
}

/* tail -F: reads on as the file grows; when it is rotated (another file
 * at path) the rest of the old one, the files rotated after it (several
 * rotations between two looks lose nothing while the old one is still
 * kept), then the new one from its start. A file at path that open_log
 * refuses is said once, and the old one is followed on until the path
 * holds the daemon's log again. */
static int follow(const char *path, const struct log_owners *owners, int *fdp)
{
	int refused = 0;
	for (;;) {
		int fd = *fdp;
		int rc = drain(fd);
		if (rc)
			return rc;
		usleep(FOLLOW_POLL_US);
		struct stat fst, pst;
		if (fstat(fd, &fst) != 0)
			return -errno;
		if (lstat(path, &pst) != 0 ||
		    (pst.st_ino == fst.st_ino && pst.st_dev == fst.st_dev)) {
			if (lseek(fd, 0, SEEK_CUR) > fst.st_size)
				(void)lseek(fd, 0, SEEK_SET); /* truncated */
			continue;
		}
		int nfd;
		int orc = open_log(path, owners, &nfd);
		if (orc) {
			if (orc != refused)
				ctl_err("log '%s': %s; following the file "
					"opened before",
					path, log_refusal(orc));
			refused = orc;
			continue;
		}
		refused = 0;
		rc = drain(fd);
		if (rc == 0)
			rc = drain_rotated(path, rotated_to(path, &fst), nfd,
					   owners);
		close(fd);
		*fdp = nfd;
		if (rc)
			return rc;
	}
}

int cmd_log(struct ctl *ctl)
{
	struct log_where w = {{0}, {0}, false};
	(void)each_mount(ctl->store, log_of_mount, &w);
	if (!w.path[0] && w.syslog) {
		ctl_err("the daemon at '%s' logs to syslog: see journalctl -t "
			"matfs, or mount with -o log=FILE",
			w.mnt);
		return 1;
	}
	if (!w.path[0]) {
		char *def = mf_engine_default_log(ctl->store, ctl->catalog);
		snprintf(w.path, sizeof(w.path), "%s", def ? def : ctl->store);
		free(def);
	}
	struct log_owners owners = {{0, 0, 0}};
	struct stat st;
	if (stat(ctl->store, &st) == 0)
		owners.uid[1] = st.st_uid;
	if (w.mnt[0] && stat(w.mnt, &st) == 0)
		owners.uid[2] = st.st_uid;
	int fd;
	int rc = open_log(w.path, &owners, &fd);
	if (rc) {
		ctl_err("log '%s': %s", w.path, log_refusal(rc));
		return 1;
	}
	rc = ctl->follow ? follow(w.path, &owners, &fd) : drain(fd);
	close(fd);
	if (rc)
		ctl_err("log '%s': %s", w.path, strerror(-rc));
	return rc ? 1 : 0;
}

/* ---- stats ---- */

static const char *const daemon_keys[] = {
    "chunks_decompressed",
    "chunks_tapped",
    "cache_hits",
    "cache_misses",
    "bytes_served",
    "bytes_pushed",
    "materializations_started",
    "materializations_failed",
    "materializations_running",
};
#define N_DAEMON (sizeof(daemon_keys) / sizeof(daemon_keys[0]))

struct stats {
	unsigned daemons;
	uint64_t v[N_DAEMON];
	double stage_seconds;
	struct mf_catalog_totals cat;
};

static void stats_of_mount(void *arg, const char *mnt)
{
	struct stats *s = arg;
	char buf[64];
	uint64_t v[N_DAEMON];
	for (size_t i = 0; i < N_DAEMON; i++) {
		if (root_attr(mnt, daemon_keys[i], buf, sizeof(buf)) != 0)
			return; /* an older daemon: not counted */
		v[i] = strtoull(buf, NULL, 10);
	}
	if (root_attr(mnt, "stage_seconds", buf, sizeof(buf)) != 0)
		return;
	for (size_t i = 0; i < N_DAEMON; i++)
		s->v[i] += v[i];
	s->stage_seconds += strtod(buf, NULL);
	s->daemons++;
}

static void print_text(const struct stats *s)
{
	printf("daemons mounted on this store: %u\n", s->daemons);
	if (s->daemons) {
		for (size_t i = 0; i < N_DAEMON; i++)
			printf("  %-26s %llu\n", daemon_keys[i],
			       (unsigned long long)s->v[i]);
		printf("  %-26s %.3f\n", "stage_seconds", s->stage_seconds);
	}
	printf("catalog totals (every process, since the catalog was "
	       "made):\n");
	printf("  %-26s %llu\n", "materializations_started",
	       (unsigned long long)s->cat.started);
	printf("  %-26s %llu\n", "materializations_failed",
	       (unsigned long long)s->cat.failed);
	printf("  %-26s %llu\n", "materializations_running",
	       (unsigned long long)s->cat.running);
	printf("  %-26s %.3f\n", "stage_seconds",
	       (double)s->cat.stage_ms / 1000.0);
}

static void print_json(const struct stats *s)
{
	printf("{\"daemons\": %u, \"daemon\": ", s->daemons);
	if (s->daemons) {
		printf("{");
		for (size_t i = 0; i < N_DAEMON; i++)
			printf("\"%s\": %llu, ", daemon_keys[i],
			       (unsigned long long)s->v[i]);
		printf("\"stage_seconds\": %.3f}", s->stage_seconds);
	} else {
		printf("null");
	}
	printf(", \"catalog\": {\"materializations_started\": %llu, "
	       "\"materializations_failed\": %llu, "
	       "\"materializations_running\": %llu, "
	       "\"stage_seconds\": %.3f}}\n",
	       (unsigned long long)s->cat.started,
	       (unsigned long long)s->cat.failed,
	       (unsigned long long)s->cat.running,
	       (double)s->cat.stage_ms / 1000.0);
}

/* One metric in node_exporter's textfile format. */
static void prom(const char *name, const char *type, const char *help,
		 const char *value)
{
	printf("# HELP matfs_%s %s\n# TYPE matfs_%s %s\nmatfs_%s %s\n", name,
	       help, name, type, name, value);
}

static void prom_u(const char *name, const char *type, const char *help,
		   uint64_t v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	prom(name, type, help, buf);
}

static void print_prometheus(const struct stats *s)
{
	static const char *const help[] = {
	    "Chunks the daemons' caches decompressed from store files.",
	    "Chunks taken from shards as they were materialized.",
	    "Reads answered from chunks already in the cache.",
	    "Reads that had to decompress a chunk.",
	    "Bytes of shard data the daemons served to readers.",
	    "Bytes the daemons put in the kernel's page cache as stages "
	    "wrote them.",
	    "Materializations the daemons started.",
	    "Materializations the daemons saw fail.",
	    "Materializations the daemons are running now.",
	};
	char buf[32];
	prom_u("daemons", "gauge", "Daemons mounted on this store.",
	       s->daemons);
	for (size_t i = 0; s->daemons && i < N_DAEMON; i++) {
		bool gauge =
		    strcmp(daemon_keys[i], "materializations_running") == 0;
		char name[64];
		snprintf(name, sizeof(name), "%s%s", daemon_keys[i],
			 gauge ? "" : "_total");
		prom_u(name, gauge ? "gauge" : "counter", help[i], s->v[i]);
	}
	if (s->daemons) {
		snprintf(buf, sizeof(buf), "%.3f", s->stage_seconds);
		prom("stage_seconds_total", "counter",
		     "Seconds the daemons' materializations took.", buf);
	}
	prom_u("catalog_materializations_started_total", "counter",
	       "Materializations started by any process (catalog).",
	       s->cat.started);
	prom_u("catalog_materializations_failed_total", "counter",
	       "Materializations that failed in any process (catalog).",
	       s->cat.failed);
	prom_u("catalog_materializations_running", "gauge",
	       "Shards the catalog says are running now.", s->cat.running);
	snprintf(buf, sizeof(buf), "%.3f", (double)s->cat.stage_ms / 1000.0);
	prom("catalog_stage_seconds_total", "counter",
	     "Seconds materializations took in any process (catalog).", buf);
}

int cmd_stats(struct ctl *ctl)
{
	if (ctl->json && ctl->prometheus) {
		ctl_err("stats takes --json or --prometheus, not both");
		return 2;
	}
	struct stats s;
	static char store[PATH_MAX];
	memset(&s, 0, sizeof(s));
	if (ctl->argc == 1) {
		stats_of_mount(&s, ctl->argv[0]);
		if (s.daemons == 0 ||
		    root_attr(ctl->argv[0], "store", store, sizeof(store))) {
			ctl_err("'%s' is no matfs mount", ctl->argv[0]);
			return 1;
		}
		ctl->store = store; /* the catalog of the mount's store */
	} else {
		(void)each_mount(ctl->store, stats_of_mount, &s);
	}
	struct mf_engine *e = ctl_engine(ctl);
	if (!e)
		return 1;
	int rc = mf_engine_totals(e, &s.cat);
	if (rc) {
		ctl_err("catalog totals: %s", strerror(-rc));
		return 1;
	}
	if (ctl->json)
		print_json(&s);
	else if (ctl->prometheus)
		print_prometheus(&s);
	else
		print_text(&s);
	return 0;
}
