/*
 * job_plan.c - what mf_job_start prepares before it forks: the clean
 * environment of the stages, each stage's program resolved through that
 * environment's PATH or the spec folder, the shard's input files, the
 * credentials of the spec owner and each stage's limits.
 *
 * Not for: forking or running anything (job.c, job_child.c). Everything
 * that allocates or may take a lock (NSS lookups, malloc) happens here,
 * in the parent, so the children only make system calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job_i.h"

extern char **environ;

/* The stages' PATH unless the spec's env sets one (docs/security.md). */
#define JOB_PATH "/usr/local/bin:/usr/bin:/bin"
/* Per-stage caps, lowered to the caller's hard limits (docs/spec.md). */
#define JOB_NOFILE 4096
#define JOB_NPROC 16384

static bool is_executable(const char *path)
{
	struct stat sb;

	if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode))
		return false;
	return faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0;
}

/* The value of name in the stages' environment, or NULL. */
static const char *plan_getenv(const struct job_plan *plan, const char *name)
{
	size_t len = strlen(name);

	for (size_t k = 0; k < plan->n_env; k++)
		if (!strncmp(plan->envp[k], name, len) &&
		    plan->envp[k][len] == '=')
			return plan->envp[k] + len + 1;
	return NULL;
}

/* Looks prog up in path (the stages' PATH); relative entries are relative
 * to dir, the stages' working directory, as execvp in the stage would see
 * them. */
static int search_path(const char *path, const char *dir, const char *prog,
		       char **out)
{
	const char *p, *end;

	for (p = path;; p = end + 1) {
		const char *elem = p;
		int len, rc;
		char *cand;

		end = strchrnul(p, ':');
		len = (int)(end - p);
		if (len == 0) {
			elem = ".";
			len = 1;
		}
		if (elem[0] == '/')
			rc = asprintf(&cand, "%.*s/%s", len, elem, prog);
		else
			rc =
			    asprintf(&cand, "%s/%.*s/%s", dir, len, elem, prog);
		if (rc < 0)
			return -ENOMEM;
		if (is_executable(cand)) {
			*out = cand;
			return 0;
		}
		free(cand);
		if (*end == '\0')
			return -ENOENT;
	}
}

static int resolve_stage(const struct job_plan *plan,
			 const struct mf_spec *spec, size_t i, char **out,
			 char **err)
{
	const char *prog = spec->stages[i].argv[0];
	const char *env_path = plan_getenv(plan, "PATH");
	char *path;
	int rc;

	if (!strchr(prog, '/')) {
		rc = search_path(env_path ? env_path : JOB_PATH, spec->dir,
				 prog, out);
		if (rc == -ENOENT &&
		    asprintf(err, "stage %zu: '%s' not found in PATH", i,
			     prog) < 0)
			*err = NULL;
		return rc;
	}
	if (prog[0] == '/')
		path = strdup(prog);
	else if (asprintf(&path, "%s/%s", spec->dir, prog) < 0)
		path = NULL;
	if (!path)
		return -ENOMEM;
	if (!is_executable(path)) {
		rc = access(path, F_OK) == 0 ? -EACCES : -ENOENT;
		if (asprintf(err, "stage %zu: '%s' %s", i, prog,
			     rc == -ENOENT ? "not found"
					   : "is not an executable file") < 0)
			*err = NULL;
		free(path);
		return rc;
	}
	*out = path;
	return 0;
}

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

/* The stages' environment, in the order of precedence of docs/spec.md:
 * the clean base, then the spec's env, then the MATFS_* variables. */
static int build_env(struct job_plan *plan, const struct mf_spec *spec,
		     uint32_t shard, const char *fp_hex)
{
	uid_t uid = plan->creds.drop ? plan->creds.uid : geteuid();
	int rc = env_put(plan, strdup("PATH=" JOB_PATH));

	if (rc == 0)
		rc = env_user(plan, uid);
	if (rc == 0)
		rc = env_inherit(plan);
	for (size_t i = 0; rc == 0 && i < spec->n_env; i++)
		rc = env_put(plan,
			     env_entry(spec->env[i].name, spec->env[i].value));
	if (rc == 0)
		rc = env_put(plan, env_uint("MATFS_SHARD", shard));
	if (rc == 0)
		rc = env_put(plan, env_uint("MATFS_SHARDS", spec->shards));
	if (rc == 0)
		rc = env_put(
		    plan, env_entry("MATFS_FINGERPRINT", fp_hex ? fp_hex : ""));
	if (rc == 0)
		rc = env_put(plan, inputs_var(plan->inputs, plan->n_inputs));
	return rc;
}

static int shard_inputs(struct job_plan *plan, const struct mf_spec *spec,
			uint32_t shard)
{
	size_t n = 0;

	plan->inputs =
	    calloc(spec->n_inputs / spec->shards + 1, sizeof *plan->inputs);
	if (!plan->inputs)
		return -ENOMEM;
	for (size_t k = shard; k < spec->n_inputs; k += spec->shards)
		plan->inputs[n++] = spec->inputs[k];
	plan->n_inputs = n;
	return 0;
}

/* Name of uid for getgrouplist, or NULL when it has no passwd entry. */
static char *user_name(uid_t uid)
{
	struct passwd pw, *found = NULL;
	char buf[4096];

	if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) != 0 || !found)
		return NULL;
	return strdup(found->pw_name);
}

/* The spec owner's uid, gid and groups, when the daemon runs as root and
 * the spec is not root's: the children switch to them before exec. */
static int creds_init(struct job_creds *c, const struct mf_spec *spec)
{
	int ng = 16;
	char *name;

	if (geteuid() != 0 || spec->owner_uid == 0)
		return 0;
	c->drop = true;
	c->uid = spec->owner_uid;
	c->gid = spec->owner_gid;
	name = user_name(c->uid);
	for (;;) {
		gid_t *g = realloc(c->groups, (size_t)ng * sizeof *g);

		if (!g) {
			free(name);
			return -ENOMEM;
		}
		c->groups = g;
		if (!name) {
			g[0] = c->gid;
			ng = 1;
			break;
		}
		if (getgrouplist(name, c->gid, g, &ng) >= 0)
			break;
	}
	c->n_groups = (size_t)ng;
	free(name);
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

/*
 * Fills plan for shard of spec. Returns 0, or -ENOENT/-EACCES for a
 * program that cannot be found or run (with *err set), or -ENOMEM.
 * Release with job_plan_release, also on failure.
 */
int job_plan_init(struct job_plan *plan, const struct mf_spec *spec,
		  uint32_t shard, const char *fp_hex, char **err)
{
	long max_fd = sysconf(_SC_OPEN_MAX);
	int rc;

	memset(plan, 0, sizeof *plan);
	plan->max_fd = max_fd > 0 && max_fd < (1 << 20) ? (int)max_fd : 1 << 20;
	rc = shard_inputs(plan, spec, shard);
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
	for (size_t i = 0; i < spec->n_stages; i++) {
		rc = resolve_stage(plan, spec, i, &plan->paths[i], err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void job_plan_release(struct job_plan *plan, const struct mf_spec *spec)
{
	if (plan->paths)
		for (size_t i = 0; i < spec->n_stages; i++)
			free(plan->paths[i]);
	free(plan->paths);
	for (size_t k = 0; k < plan->n_env; k++)
		free(plan->envp[k]);
	free(plan->envp);
	free(plan->inputs);
	free(plan->creds.groups);
	free(plan->limits);
	memset(plan, 0, sizeof *plan);
}
