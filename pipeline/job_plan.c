/*
 * job_plan.c - what mf_job_start prepares before it forks: each stage's
 * program resolved through PATH or the spec folder, the environment array,
 * the shard's input files and the credentials of the spec owner.
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
#include <sys/stat.h>
#include <unistd.h>

#include "job_i.h"

extern char **environ;

/* Used when the caller's environment has no PATH, as confstr(_CS_PATH). */
#define JOB_DEFAULT_PATH "/bin:/usr/bin"

static bool is_executable(const char *path)
{
	struct stat sb;

	if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode))
		return false;
	return faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0;
}

/* Looks prog up in PATH; relative PATH entries are relative to dir, the
 * stages' working directory, as execvp in the stage would see them. */
static int search_path(const char *dir, const char *prog, char **out)
{
	const char *path = getenv("PATH");
	const char *p, *end;

	if (!path)
		path = JOB_DEFAULT_PATH;
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

static int resolve_stage(const struct mf_spec *spec, size_t i, char **out,
			 char **err)
{
	const char *prog = spec->stages[i].argv[0];
	char *path;
	int rc;

	if (!strchr(prog, '/')) {
		rc = search_path(spec->dir, prog, out);
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

static bool is_job_var(const char *entry)
{
	static const char *const names[] = {
	    "MATFS_SHARD=",
	    "MATFS_SHARDS=",
	    "MATFS_INPUTS=",
	    "MATFS_FINGERPRINT=",
	};

	for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
		if (!strncmp(entry, names[k], strlen(names[k])))
			return true;
	return false;
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

static int build_env(struct job_plan *plan, const struct mf_spec *spec,
		     uint32_t shard, const char *fp_hex)
{
	size_t n = 0, k = JOB_ENV_OWN;
	char **envp;

	while (environ && environ[n])
		n++;
	envp = calloc(n + JOB_ENV_OWN + 1, sizeof *envp);
	if (!envp)
		return -ENOMEM;
	plan->envp = envp;
	if (asprintf(&envp[0], "MATFS_SHARD=%u", shard) < 0)
		envp[0] = NULL;
	if (envp[0] && asprintf(&envp[1], "MATFS_SHARDS=%u", spec->shards) < 0)
		envp[1] = NULL;
	if (envp[1] &&
	    asprintf(&envp[2], "MATFS_FINGERPRINT=%s", fp_hex ? fp_hex : "") <
		0)
		envp[2] = NULL;
	if (envp[2])
		envp[3] = inputs_var(plan->inputs, plan->n_inputs);
	if (!envp[3])
		return -ENOMEM;
	for (size_t e = 0; e < n; e++)
		if (!is_job_var(environ[e]))
			envp[k++] = environ[e];
	envp[k] = NULL;
	return 0;
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
	plan->paths = calloc(spec->n_stages, sizeof *plan->paths);
	if (!plan->paths)
		return -ENOMEM;
	for (size_t i = 0; i < spec->n_stages; i++) {
		rc = resolve_stage(spec, i, &plan->paths[i], err);
		if (rc < 0)
			return rc;
	}
	rc = shard_inputs(plan, spec, shard);
	if (rc < 0)
		return rc;
	rc = build_env(plan, spec, shard, fp_hex);
	if (rc < 0)
		return rc;
	return creds_init(&plan->creds, spec);
}

void job_plan_release(struct job_plan *plan, const struct mf_spec *spec)
{
	if (plan->paths)
		for (size_t i = 0; i < spec->n_stages; i++)
			free(plan->paths[i]);
	free(plan->paths);
	if (plan->envp)
		for (size_t k = 0; k < JOB_ENV_OWN; k++)
			free(plan->envp[k]);
	free(plan->envp);
	free(plan->inputs);
	free(plan->creds.groups);
	memset(plan, 0, sizeof *plan);
}
