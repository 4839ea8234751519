/*
 * job_plan.c - what mf_job_start prepares before it forks: the clean
 * environment of the stages, each stage's program resolved through that
 * environment's PATH or the spec folder and checked, with its deps and
 * the stages' folder, against the ownership rules as the spec owner (files
 * change between load and run), the shard's input files, the credentials
 * of the spec owner and each stage's limits.
 *
 * Not for: forking or running anything (job.c, job_child.c). Everything
 * that allocates or may take a lock (NSS lookups, malloc) happens here,
 * in the parent, so the children only make system calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job_i.h"
#include "trust_i.h"

extern char **environ;

/* Per-stage caps, lowered to the caller's hard limits (docs/spec.md). */
#define JOB_NOFILE 4096
#define JOB_NPROC 16384

/* Linux's bound on one argument or environment string, its NUL included
 * (MAX_ARG_STRLEN, 32 pages): a longer one fails every execve (E2BIG). */
#define JOB_ARG_STRLEN (32 * 4096)

/* "MATFS_INPUTS=" and the paths, one per line, no newline after the last. */
static char *inputs_var(const char *const *inputs, size_t n)
{
	static const char prefix[] = "MATFS_INPUTS=";
	size_t len = sizeof prefix, off = sizeof prefix - 1;
	char *s;

	for (size_t k = 0; k < n; k++)
		len += strlen(inputs[k]) + 1;
	s = malloc(len);
	if (!s)
		return NULL;
	memcpy(s, prefix, off);
	for (size_t k = 0; k < n; k++) {
		size_t l = strlen(inputs[k]);

		if (k > 0)
			s[off++] = '\n';
		memcpy(s + off, inputs[k], l);
		off += l;
	}
	s[off] = '\0';
	return s;
}

static int write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The shard's input paths, one per line, each ending in a newline, in a
 * sealed memfd (no stage can change what the next reads): the stages get
 * it as JOB_INPUTS_FD, named by MATFS_INPUTS_FILE. */
static int inputs_file(struct job_plan *plan)
{
	int fd = memfd_create("matfs-inputs", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int rc = fd < 0 ? -errno : 0;
	for (size_t k = 0; rc == 0 && k < plan->n_inputs; k++) {
		rc = write_all(fd, plan->inputs[k], strlen(plan->inputs[k]));
		if (rc == 0)
			rc = write_all(fd, "\n", 1);
	}
	if (rc == 0 &&
	    fcntl(fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		rc = -errno;
	if (rc) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	plan->inputs_fd = fd;
	return 0;
}

/* Sets name=value (entry is "name=value", owned, or NULL: -ENOMEM) in
 * the stages' environment, replacing an earlier value of name. */
static int env_put(struct job_plan *plan, char *entry)
{
	size_t len;

	if (!entry)
		return -ENOMEM;
	len = strcspn(entry, "=") + 1;
	for (size_t k = 0; k < plan->n_env; k++)
		if (!strncmp(plan->envp[k], entry, len)) {
			free(plan->envp[k]);
			plan->envp[k] = entry;
			return 0;
		}
	if (plan->n_env + 1 >= plan->env_cap) {
		size_t cap = plan->env_cap ? 2 * plan->env_cap : 32;
		char **v = realloc(plan->envp, cap * sizeof *v);

		if (!v) {
			free(entry);
			return -ENOMEM;
		}
		plan->envp = v;
		plan->env_cap = cap;
	}
	plan->envp[plan->n_env++] = entry;
	plan->envp[plan->n_env] = NULL;
	return 0;
}

/* The stages' TMPDIR when it is absolute, else /tmp. */
static const char *stage_tmpdir(const struct job_plan *plan)
{
	for (size_t k = 0; k < plan->n_env; k++)
		if (!strncmp(plan->envp[k], "TMPDIR=/", 8))
			return plan->envp[k] + 7;
	return "/tmp";
}

void job_inputs_dir_remove(char *dir)
{
	if (!dir)
		return;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd >= 0) {
		(void)unlinkat(dfd, JOB_INPUTS_NAME,
			       0); /* a link, not its target */
		close(dfd);
	}
	(void)rmdir(dir);
	free(dir);
}

/* The list again as a file any process of the stages' user can open by
 * name, also one that closed its descriptors: DIR/inputs, DIR a new 0700
 * folder under the stages' TMPDIR, both the stages' user's, removed by
 * job_free. *path is DIR/inputs; plan->inputs_dir owns DIR. */
static int inputs_path(struct job_plan *plan, char **path)
{
	char *dir = NULL;
	if (asprintf(&dir, "%s/matfs-inputs-XXXXXX", stage_tmpdir(plan)) < 0)
		return -ENOMEM;
	if (!mkdtemp(dir)) {
		int e = errno;
		free(dir);
		return -e;
	}
	plan->inputs_dir = dir;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int fd = dfd < 0
	    ? -1
	    : openat(dfd, JOB_INPUTS_NAME,
		     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		     0400);
	int rc = fd < 0 ? -errno : 0;
	for (size_t k = 0; rc == 0 && k < plan->n_inputs; k++) {
		rc = write_all(fd, plan->inputs[k], strlen(plan->inputs[k]));
		if (rc == 0)
			rc = write_all(fd, "\n", 1);
	}
	if (rc == 0 && plan->creds.drop &&
	    (fchown(fd, plan->creds.uid, plan->creds.gid) < 0 ||
	     fchown(dfd, plan->creds.uid, plan->creds.gid) < 0))
		rc = -errno;
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	if (rc == 0 && asprintf(path, "%s/" JOB_INPUTS_NAME, dir) < 0)
		rc = -ENOMEM;
	if (rc) {
		job_inputs_dir_remove(plan->inputs_dir);
		plan->inputs_dir = NULL;
	}
	return rc;
}

/* MATFS_INPUTS_FILE: the file inputs_path made, or where it could not be
 * made (no writable TMPDIR), descriptor 4 through /proc. */
static int env_inputs_file(struct job_plan *plan)
{
	char *path = NULL, *entry = NULL;
	if (inputs_path(plan, &path) == 0) {
		int n = asprintf(&entry, "MATFS_INPUTS_FILE=%s", path);
		free(path);
		if (n < 0)
			return -ENOMEM;
		return env_put(plan, entry);
	}
	return env_put(
	    plan, strdup("MATFS_INPUTS_FILE=/proc/self/fd/" JOB_INPUTS_FD_STR));
}

/* MATFS_INPUTS when it fits one environment string; the list is in
 * MATFS_INPUTS_FILE whatever its length. */
static int env_inputs(struct job_plan *plan)
{
	char *var = inputs_var(plan->inputs, plan->n_inputs);
	if (var && strlen(var) >= JOB_ARG_STRLEN) {
		free(var);
		return 0;
	}
	return env_put(plan, var);
}

static char *env_entry(const char *name, const char *value)
{
	char *s;

	return asprintf(&s, "%s=%s", name, value) < 0 ? NULL : s;
}

static char *env_uint(const char *name, unsigned value)
{
	char *s;

	return asprintf(&s, "%s=%u", name, value) < 0 ? NULL : s;
}

/* LANG, LC_* and TMPDIR: what the caller has of them. */
static int env_inherit(struct job_plan *plan)
{
	int rc = 0;

	for (size_t e = 0; rc == 0 && environ && environ[e]; e++) {
		const char *v = environ[e];

		if (!strncmp(v, "LANG=", 5) || !strncmp(v, "LC_", 3) ||
		    !strncmp(v, "TMPDIR=", 7))
			rc = env_put(plan, strdup(v));
	}
	return rc;
}

/* HOME, USER and LOGNAME of uid, when it has a passwd entry. */
static int env_user(struct job_plan *plan, uid_t uid)
{
	struct passwd pw, *found = NULL;
	char buf[16384];
	int rc;

	if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) != 0 || !found)
		return 0;
	rc = env_put(plan, env_entry("HOME", found->pw_dir));
	if (rc == 0)
		rc = env_put(plan, env_entry("USER", found->pw_name));
	if (rc == 0)
		rc = env_put(plan, env_entry("LOGNAME", found->pw_name));
	return rc;
}

/* The clean base and the spec's env: what the stages and the identity
 * command get before any MATFS_* variable. */
static int base_env(struct job_plan *plan, const struct mf_spec *spec)
{
	uid_t uid = plan->creds.drop ? plan->creds.uid : geteuid();
	int rc = env_put(plan, strdup("PATH=" TRUST_STAGE_PATH));

	if (rc == 0)
		rc = env_user(plan, uid);
	if (rc == 0)
		rc = env_inherit(plan);
	for (size_t i = 0; rc == 0 && i < spec->n_env; i++)
		rc = env_put(plan,
			     env_entry(spec->env[i].name, spec->env[i].value));
	return rc;
}

/* The stages' environment, in the order of precedence of docs/spec.md:
 * the clean base, then the spec's env, then the MATFS_* variables. */
static int build_env(struct job_plan *plan, const struct mf_spec *spec,
		     uint32_t shard, const char *fp_hex)
{
	int rc = base_env(plan, spec);

	if (rc == 0)
		rc = env_put(plan, env_uint("MATFS_SHARD", shard));
	if (rc == 0)
		rc = env_put(plan, env_uint("MATFS_SHARDS", spec->shards));
	if (rc == 0)
		rc = env_put(
		    plan, env_entry("MATFS_FINGERPRINT", fp_hex ? fp_hex : ""));
	if (rc == 0)
		rc = env_inputs_file(plan);
	if (rc == 0)
		rc = env_inputs(plan);
	return rc;
}

static int shard_inputs(struct job_plan *plan, const struct mf_spec *spec,
			uint32_t shard)
{
	size_t n = 0;

	size_t count = 0;
	for (size_t k = 0; k < spec->n_inputs; k++)
		count += mf_spec_input_shard(spec, k) == shard;
	plan->inputs = calloc(count + 1, sizeof *plan->inputs);
	if (!plan->inputs)
		return -ENOMEM;
	for (size_t k = 0; k < spec->n_inputs; k++)
		if (mf_spec_input_shard(spec, k) == shard)
			plan->inputs[n++] = spec->inputs[k];
	plan->n_inputs = n;
	return 0;
}

/* The spec owner's uid, gid and groups, when the daemon runs as root and
 * the spec is not root's: the children switch to them before exec. */
static int creds_init(struct job_creds *c, const struct mf_spec *spec)
{
	struct mf_user u;
	int rc;

	if (geteuid() != 0 || spec->owner_uid == 0)
		return 0;
	rc = mf_user_init(&u, spec->owner_uid, spec->owner_gid);
	if (rc < 0)
		return rc;
	c->drop = true;
	c->uid = u.uid;
	c->gid = u.gid;
	c->groups = u.groups; /* taken over */
	c->n_groups = u.n_groups;
	return 0;
}

/* want, or the caller's hard limit of resource when that is lower: a
 * child can lower its limits, never raise them. */
static rlim_t below_hard(int resource, rlim_t want)
{
	struct rlimit r;

	if (getrlimit(resource, &r) != 0 || r.rlim_max == RLIM_INFINITY)
		return want;
	return r.rlim_max < want ? r.rlim_max : want;
}

/* Each stage's limits; a stage's nice is never below the caller's, which
 * only a privileged process could undercut. */
static int plan_limits(struct job_plan *plan, const struct mf_spec *spec)
{
	rlim_t nofile = below_hard(RLIMIT_NOFILE, JOB_NOFILE);
	rlim_t nproc = below_hard(RLIMIT_NPROC, JOB_NPROC);
	int own;

	errno = 0;
	own = getpriority(PRIO_PROCESS, 0);
	if (errno)
		own = 0;
	plan->limits = calloc(spec->n_stages, sizeof *plan->limits);
	if (!plan->limits)
		return -ENOMEM;
	for (size_t i = 0; i < spec->n_stages; i++) {
		const struct mf_stage *st = &spec->stages[i];
		struct job_limits *l = &plan->limits[i];

		l->nofile = nofile;
		l->nproc = nproc;
		if (st->memory)
			l->as = below_hard(RLIMIT_AS, (rlim_t)st->memory);
		if (st->nice)
			l->nice = st->nice > own ? st->nice : own;
	}
	return 0;
}

/* *err = "stage N: " + why (or why alone for i < 0); takes why. */
static int trust_fail(int rc, long i, char *why, char **err)
{
	if (i < 0 || !why) {
		*err = why;
		return rc;
	}
	if (asprintf(err, "stage %ld: %s", i, why) < 0)
		*err = NULL;
	free(why);
	return rc;
}

/* The stages' folder, and each stage's program and deps, as the user the
 * stages run as finds them, under the ownership rules again: files
 * change between the spec's load and a shard's run. */
static int plan_programs(struct job_plan *plan, const struct mf_spec *spec,
			 char **err)
{
	const struct job_creds *c = &plan->creds;
	const struct mf_user u = {c->uid, c->gid, c->groups, c->n_groups};
	uid_t runner = c->drop ? c->uid : geteuid();
	struct mf_fscreds saved = {0};
	char *why = NULL;
	int rc = c->drop ? mf_fscreds_enter(&saved, &u) : 0;

	if (rc < 0)
		return rc;
	rc = trust_check_path(spec->dir, runner, true, &why);
	if (rc < 0)
		rc = trust_fail(rc, -1, why, err);
	for (size_t i = 0; rc == 0 && i < spec->n_stages; i++) {
		const struct mf_stage *st = &spec->stages[i];

		rc = trust_stage_program(spec, i, &plan->paths[i], err);
		if (rc == 0)
			rc = trust_check_path(plan->paths[i], runner, false,
					      &why);
		for (size_t k = 0; rc == 0 && k < st->n_deps; k++)
			rc = trust_check_path(st->deps[k], runner, false, &why);
		if (rc < 0 && why)
			rc = trust_fail(rc, (long)i, why, err);
	}
	mf_fscreds_leave(&saved);
	return rc;
}

/*
 * Fills plan for shard of spec. Returns 0, or -ENOENT/-EACCES for a
 * program that cannot be found or run, -EPERM for a program, dep or
 * stages' folder the ownership rules refuse (docs/security.md; with *err
 * set), or -ENOMEM. Release with job_plan_release, also on failure.
 */
int job_plan_init(struct job_plan *plan, const struct mf_spec *spec,
		  uint32_t shard, const char *fp_hex, char **err)
{
	long max_fd = sysconf(_SC_OPEN_MAX);
	int rc;

	memset(plan, 0, sizeof *plan);
	plan->inputs_fd = -1;
	plan->max_fd = max_fd > 0 && max_fd < (1 << 20) ? (int)max_fd : 1 << 20;
	rc = shard_inputs(plan, spec, shard);
	if (rc == 0)
		rc = inputs_file(plan);
	if (rc == 0)
		rc = creds_init(&plan->creds, spec);
	if (rc == 0)
		rc = build_env(plan, spec, shard, fp_hex);
	if (rc == 0)
		rc = plan_limits(plan, spec);
	if (rc < 0)
		return rc;
	plan->paths = calloc(spec->n_stages, sizeof *plan->paths);
	if (!plan->paths)
		return -ENOMEM;
	return plan_programs(plan, spec, err);
}

int job_plan_identity(struct job_plan *plan, const struct mf_spec *spec,
		      char **err)
{
	long max_fd = sysconf(_SC_OPEN_MAX);
	char *why = NULL;
	int rc;

	memset(plan, 0, sizeof *plan);
	plan->inputs_fd = -1;
	plan->max_fd = max_fd > 0 && max_fd < (1 << 20) ? (int)max_fd : 1 << 20;
	plan->n_paths = 1;
	plan->paths = calloc(1, sizeof *plan->paths);
	plan->limits = calloc(1, sizeof *plan->limits);
	if (!plan->paths || !plan->limits)
		return -ENOMEM;
	plan->limits[0].nofile = below_hard(RLIMIT_NOFILE, JOB_NOFILE);
	plan->limits[0].nproc = below_hard(RLIMIT_NPROC, JOB_NPROC);
	rc = creds_init(&plan->creds, spec);
	if (rc == 0)
		rc = base_env(plan, spec);
	if (rc < 0)
		return rc;
	const struct job_creds *c = &plan->creds;
	const struct mf_user u = {c->uid, c->gid, c->groups, c->n_groups};
	uid_t runner = c->drop ? c->uid : geteuid();
	struct mf_fscreds saved = {0};
	rc = c->drop ? mf_fscreds_enter(&saved, &u) : 0;
	if (rc < 0)
		return rc;
	rc = trust_check_path(spec->dir, runner, true, &why);
	if (rc == 0)
		rc = trust_program(spec, NULL, spec->identity_argv[0],
				   &plan->paths[0], err);
	if (rc == 0)
		rc = trust_check_path(plan->paths[0], runner, false, &why);
	mf_fscreds_leave(&saved);
	if (rc < 0 && why)
		rc = trust_fail(rc, -1, why, err);
	return rc;
}

void job_plan_release(struct job_plan *plan, const struct mf_spec *spec)
{
	size_t n_paths = plan->n_paths ? plan->n_paths : spec->n_stages;

	if (plan->paths)
		for (size_t i = 0; i < n_paths; i++)
			free(plan->paths[i]);
	free(plan->paths);
	for (size_t k = 0; k < plan->n_env; k++)
		free(plan->envp[k]);
	free(plan->envp);
	free(plan->inputs);
	free(plan->creds.groups);
	free(plan->limits);
	if (plan->inputs_fd >= 0)
		close(plan->inputs_fd);
	job_inputs_dir_remove(plan->inputs_dir);
	memset(plan, 0, sizeof *plan);
	plan->inputs_fd = -1;
}
