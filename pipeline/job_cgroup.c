/*
 * job_cgroup.c - a stage's `memory` as a cgroup v2 limit on its whole
 * process tree: where the cgroups go (mf_job_cgroup_setup), one child
 * cgroup per stage that has `memory`, made before the fork
 * (job_cgroups_make) and joined by the stage child before execve
 * (job_child.c), then its OOM kills read and the cgroup removed once the
 * stage was reaped (job_cgroups_end).
 *
 * A step that fails leaves the stage to RLIMIT_AS per process, as without
 * cgroups; the first such fallback is logged once. The folder given to
 * mf_job_cgroup_setup may be a folder of plain files standing in for
 * cgroupfs (the tests' way to check every step on a machine without a
 * cgroup v2 memory controller): control files are opened with O_CREAT,
 * and removal unlinks them first (cgroupfs refuses that, harmlessly).
 *
 * Not for: the rlimits themselves (job_plan.c, job_child.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "job_i.h"

/* Set by mf_job_cgroup_setup before any job starts, read-only after. */
static char *cg_base; /* NULL: no cgroups, RLIMIT_AS */
static mf_job_log_fn cg_log;
static void *cg_log_arg;
static char cg_why[768]; /* why setup failed, to log; "": nothing */
/* Shared by every job thread. */
static atomic_bool cg_logged; /* a fallback was logged */
static atomic_uint cg_seq; /* the N of matfs-PID-SHARD-N */

/* Control files a stand-in folder may hold; removed before rmdir. */
static const char *const cg_files[] = {
    "memory.max",    "memory.swap.max", "cgroup.procs",
    "memory.events", "cgroup.kill",
};

static void format_why(char *buf, size_t len, const char *fmt, va_list ap)
{
	char what[640];

	vsnprintf(what, sizeof what, fmt, ap);
	snprintf(buf, len,
		 "%s: stage memory limits are per process (RLIMIT_AS)", what);
}

/* Setup: keeps why stages will fall back to RLIMIT_AS, for log_once. */
static void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	format_why(cg_why, sizeof cg_why, fmt, ap);
	va_end(ap);
}

/* Logs cg_why, the first time a fallback is logged only. */
static void log_once(void)
{
	if (cg_why[0] && cg_log && !atomic_exchange(&cg_logged, true))
		cg_log(cg_log_arg, cg_why);
}

/* A stage falls back: logs why, if no fallback was logged yet. */
static void log_fallback(const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	if (!cg_log || atomic_exchange(&cg_logged, true))
		return;
	va_start(ap, fmt);
	format_why(msg, sizeof msg, fmt, ap);
	va_end(ap);
	cg_log(cg_log_arg, msg);
}

/* Writes s to dir/name (O_WRONLY | flags). Returns 0 or -errno. */
static int put(const char *dir, const char *name, const char *s, int flags)
{
	char *path;
	int fd, rc;

	if (asprintf(&path, "%s/%s", dir, name) < 0)
		return -ENOMEM;
	fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | flags, 0644);
	free(path);
	if (fd < 0)
		return -errno;
	rc = mf_write_full(fd, s, strlen(s));
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* Reads dir/name (NULL dir: name is a path) into a malloc'd string. */
static int slurp(const char *dir, const char *name, char **out)
{
	size_t len = 0, cap = 4096;
	char *path = NULL, *buf;
	FILE *f;

	if (dir && asprintf(&path, "%s/%s", dir, name) < 0)
		return -ENOMEM;
	f = fopen(path ? path : name, "re");
	free(path);
	if (!f)
		return -errno;
	buf = malloc(cap);
	while (buf) {
		len += fread(buf + len, 1, cap - 1 - len, f);
		if (len < cap - 1)
			break;
		char *more = realloc(buf, 2 * cap);

		if (!more)
			free(buf);
		buf = more;
		cap *= 2;
	}
	fclose(f);
	if (!buf)
		return -ENOMEM;
	buf[len] = '\0';
	*out = buf;
	return 0;
}

/* Whether the blank-separated list s holds word. */
static bool has_word(const char *s, const char *word)
{
	size_t len = strlen(word);

	for (const char *p = s; *p;) {
		size_t n = strcspn(p, " \t\n");

		if (n == len && !strncmp(p, word, len))
			return true;
		p += n;
		p += strspn(p, " \t\n");
	}
	return false;
}

/* The mount point of cgroup2 and the cgroup it shows as its root (a
 * cgroup namespace's). The 5th field of mountinfo, after " - " its type. */
static int cgroup2_mount(char **mnt, char **root)
{
	char *text, *line, *save = NULL;
	int rc = slurp(NULL, "/proc/self/mountinfo", &text);

	if (rc < 0)
		return rc;
	rc = -ENOENT;
	for (line = strtok_r(text, "\n", &save); line && rc == -ENOENT;
	     line = strtok_r(NULL, "\n", &save)) {
		char r[4096], m[4096];
		const char *sep = strstr(line, " - ");

		if (!sep || strncmp(sep + 3, "cgroup2 ", 8) ||
		    sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2)
			continue;
		*root = strdup(r);
		*mnt = strdup(m);
		rc = *root && *mnt ? 0 : -ENOMEM;
	}
	free(text);
	return rc;
}

/* The caller's cgroup v2 folder: the mount point plus the "0::" path,
 * seen from the mount's root. */
static int own_cgroup(char **out)
{
	char *text, *mnt = NULL, *root = NULL, *p;
	int rc = slurp(NULL, "/proc/self/cgroup", &text);
	size_t skip;

	if (rc < 0)
		return rc;
	p = !strncmp(text, "0::", 3) ? text + 3 : strstr(text, "\n0::");
	if (p && p != text + 3)
		p += 4;
	rc = p ? cgroup2_mount(&mnt, &root) : -ENOENT;
	if (rc == 0) {
		p[strcspn(p, "\n")] = '\0';
		skip = strcmp(root, "/") ? strlen(root) : 0;
		if (strncmp(p, root, skip) || p[0] != '/')
			rc = -ENOENT;
		else if (asprintf(out, "%s%s", mnt,
				  strcmp(p + skip, "/") ? p + skip : "") < 0)
			rc = -ENOMEM;
	}
	free(mnt);
	free(root);
	free(text);
	return rc;
}

/* base may give its children the memory controller, or is made to. */
static int enable_memory(const char *base)
{
	char *ctl;
	int rc = slurp(base, "cgroup.subtree_control", &ctl);

	if (rc < 0) {
		note("memory: '%s/cgroup.subtree_control': %s: not a "
		     "cgroup v2 folder",
		     base, job_strerror(-rc));
		return rc;
	}
	if (!has_word(ctl, "memory")) {
		rc = put(base, "cgroup.subtree_control", "+memory", O_TRUNC);
		if (rc < 0)
			note("memory: cannot enable the memory controller "
			     "in '%s/cgroup.subtree_control': %s",
			     base, job_strerror(-rc));
	}
	free(ctl);
	return rc;
}

void job_cgroup_forget(void)
{
	free(cg_base);
	cg_base = NULL;
	cg_log = NULL;
	cg_log_arg = NULL;
	cg_why[0] = '\0';
	atomic_store(&cg_logged, false);
}

int mf_job_cgroup_setup(const char *base, mf_job_log_fn log, void *arg)
{
	char *dir = NULL;
	int rc = 0;

	job_cgroup_forget();
	cg_log = log;
	cg_log_arg = arg;
	if (!base && geteuid() != 0)
		return -EPERM;
	if (base) {
		dir = strdup(base);
		if (!dir)
			rc = -ENOMEM;
	} else {
		rc = own_cgroup(&dir);
		if (rc < 0)
			note("memory: no cgroup v2 of this process: %s",
			     job_strerror(-rc));
	}
	if (rc == 0)
		rc = enable_memory(dir);
	if (rc < 0) {
		free(dir);
		return rc;
	}
	cg_base = dir;
	return 0;
}

/* Removes a stage's cgroup folder: a cgroup still holding processes
 * (killed, not yet gone) is EBUSY for a moment. */
static void remove_cgroup(const char *path)
{
	struct timespec ten_ms = {0, 10 * 1000 * 1000};

	for (size_t k = 0; k < sizeof cg_files / sizeof cg_files[0]; k++) {
		char *f;

		if (asprintf(&f, "%s/%s", path, cg_files[k]) >= 0) {
			(void)unlink(f);
			free(f);
		}
	}
	for (int tries = 0; tries < 200; tries++) {
		if (rmdir(path) == 0 || errno != EBUSY)
			return;
		nanosleep(&ten_ms, NULL);
	}
}

/* dir/cgroup.procs, opened for the stage child to write its pid. */
static int open_procs(const char *dir)
{
	char *path;
	int fd;

	if (asprintf(&path, "%s/cgroup.procs", dir) < 0)
		return -ENOMEM;
	fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_CREAT, 0644);
	free(path);
	return fd < 0 ? -errno : fd;
}

/* Makes the cgroup of one stage with memory.max `max`; on failure the
 * stage gets none (RLIMIT_AS) and the first failure is logged. */
static void make_one(struct job_cgroup *cg, uint64_t max, uint32_t shard)
{
	const char *step = "memory.max";
	char *path, num[32];
	int rc;

	if (asprintf(&path, "%s/matfs-%ld-%" PRIu32 "-%u", cg_base,
		     (long)getpid(), shard, atomic_fetch_add(&cg_seq, 1)) < 0)
		return;
	if (mkdir(path, 0755) < 0) {
		log_fallback("memory: cannot make cgroup '%s': %s", path,
			     job_strerror(errno));
		free(path);
		return;
	}
	snprintf(num, sizeof num, "%" PRIu64 "\n", max);
	rc = put(path, step, num, O_CREAT | O_TRUNC);
	/* no memory.swap.max where the kernel does not account swap: the
	 * limit then holds for memory alone */
	if (rc == 0)
		(void)put(path, "memory.swap.max", "0\n", O_CREAT | O_TRUNC);
	if (rc == 0) {
		step = "cgroup.procs";
		rc = open_procs(path);
	}
	if (rc < 0) {
		log_fallback("memory: cgroup '%s': %s: %s", path, step,
			     job_strerror(-rc));
		remove_cgroup(path);
		free(path);
		return;
	}
	cg->path = path;
	cg->procs_fd = rc;
	cg->max = max;
}

/* Without a cgroup base, the first stage with memory logs why. */
void job_cgroups_make(struct mf_job *j, const struct mf_spec *spec,
		      uint32_t shard)
{
	for (size_t i = 0; i < j->n; i++) {
		if (!spec->stages[i].memory)
			continue;
		if (cg_base)
			make_one(&j->st[i].cg, spec->stages[i].memory, shard);
		else
			log_once();
	}
}

/* The count after "oom_kill " in memory.events; 0 when unknown. */
static uint64_t oom_kills(const char *dir)
{
	unsigned long long n = 0;
	char *ev, *p;

	if (slurp(dir, "memory.events", &ev) < 0)
		return 0;
	p = !strncmp(ev, "oom_kill ", 9) ? ev : strstr(ev, "\noom_kill ");
	if (p && sscanf(p + (p == ev ? 9 : 10), "%llu", &n) != 1)
		n = 0;
	free(ev);
	return (uint64_t)n;
}

/*
 * After the stages were reaped: reads each stage cgroup's OOM kills, kills
 * what is still in it (a process that left the job's process group with
 * setsid is still in its cgroup) and removes it. Safe to call again.
 */
void job_cgroups_end(struct mf_job *j)
{
	for (size_t i = 0; j->st && i < j->n; i++) {
		struct job_cgroup *cg = &j->st[i].cg;

		if (!cg->path)
			continue;
		if (cg->procs_fd >= 0)
			close(cg->procs_fd);
		cg->procs_fd = -1;
		cg->oom_kills = oom_kills(cg->path);
		(void)put(cg->path, "cgroup.kill", "1", 0);
		remove_cgroup(cg->path);
		free(cg->path);
		cg->path = NULL;
	}
}
