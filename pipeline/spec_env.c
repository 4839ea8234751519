/*
 * spec_env.c - the keys that shape a stage's processes rather than its
 * argv: the spec's `env` (variables added to the clean environment every
 * stage gets) and a stage's `memory` (RLIMIT_AS) and `nice`.
 *
 * Not for: building the environment or setting the limits when a job
 * starts (job_plan.c, job_child.c), or the fingerprint (fingerprint.c).
 */
#include "spec_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* [A-Za-z_][A-Za-z0-9_]*: what a shell can name, and nothing else. */
static bool env_name_ok(const char *s)
{
	static const char first[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				    "abcdefghijklmnopqrstuvwxyz_";
	return s[0] && strchr(first, s[0]) &&
	    strspn(s + 1,
		   "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		   "abcdefghijklmnopqrstuvwxyz_0123456789") == strlen(s) - 1;
}

static int check_env_name(struct spec_ctx *c, const yaml_node_t *k,
			  const char *name)
{
	char shown[SPEC_QUOTABLE_SIZE];
	if (strlen(name) > MF_SPEC_ENV_NAME_MAX)
		return spec_fail(c, k,
				 "'env': a variable name is longer than %d "
				 "bytes",
				 MF_SPEC_ENV_NAME_MAX);
	if (!env_name_ok(name))
		return spec_fail(c, k,
				 "'env': bad variable name %s (A-Z a-z 0-9 _, "
				 "not starting with a digit)",
				 spec_quotable(name, shown, sizeof(shown)));
	if (!strncmp(name, "MATFS_", 6))
		return spec_fail(c, k,
				 "'env': '%s' is reserved: matfs sets "
				 "MATFS_* itself",
				 name);
	struct mf_spec *s = c->spec;
	for (size_t i = 0; i < s->n_env; i++)
		if (!strcmp(s->env[i].name, name))
			return spec_fail(c, k, "'env': duplicate variable '%s'",
					 name);
	return 0;
}

/* One NAME: value pair, appended to c->spec->env. */
static int add_env(struct spec_ctx *c, const yaml_node_pair_t *p)
{
	struct mf_spec *s = c->spec;
	const yaml_node_t *k = spec_node(c, p->key);
	const yaml_node_t *v = spec_node(c, p->value);
	const char *name = spec_scalar(k);
	if (!name)
		return spec_fail(c, k, "'env': expected a variable name");
	int rc = check_env_name(c, k, name);
	if (rc)
		return rc;
	char *value = NULL;
	rc = spec_get_string(c, "env", v, &value);
	if (rc)
		return rc;
	if (strlen(value) > MF_SPEC_ENV_VALUE_MAX) {
		free(value);
		return spec_fail(c, v,
				 "'env': the value of '%s' is longer than %d "
				 "bytes",
				 name, MF_SPEC_ENV_VALUE_MAX);
	}
	struct mf_env_var *e = &s->env[s->n_env];
	e->name = strdup(name);
	e->value = value;
	if (!e->name) {
		free(value);
		return -ENOMEM;
	}
	s->n_env++;
	return 0;
}

static int cmp_env(const void *a, const void *b)
{
	return strcmp(((const struct mf_env_var *)a)->name,
		      ((const struct mf_env_var *)b)->name);
}

int spec_parse_env(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_spec *s = c->spec;
	if (v->type != YAML_MAPPING_NODE)
		return spec_fail(c, v,
				 "'env': expected a mapping of NAME: value");
	const yaml_node_pair_t *first = v->data.mapping.pairs.start;
	size_t n = (size_t)(v->data.mapping.pairs.top - first);
	if (n == 0)
		return 0;
	if (n > MF_SPEC_ENV_MAX)
		return spec_fail(c, v, "'env': more than %d variables",
				 MF_SPEC_ENV_MAX);
	s->env = calloc(n, sizeof(*s->env));
	if (!s->env)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int rc = add_env(c, &first[i]);
		if (rc)
			return rc;
	}
	qsort(s->env, s->n_env, sizeof(*s->env), cmp_env);
	return 0;
}

int spec_parse_memory(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_stage *st = arg;
	const char *s = spec_scalar(v);
	if (!s || v->type != YAML_SCALAR_NODE)
		return spec_fail(c, v, "'memory': expected a size");
	uint64_t n;
	int rc = mf_parse_size(s, &n);
	if (rc == -EINVAL)
		return spec_fail(c, v, "'memory': bad size '%s'", s);
	if (rc)
		return spec_fail(c, v, "'memory': '%s' is too large", s);
	if (n < MF_SPEC_MEMORY_MIN)
		return spec_fail(
		    c, v, "'memory': '%s' is too small (at least 1MiB)", s);
	st->memory = n;
	return 0;
}

int spec_parse_nice(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_stage *st = arg;
	uint64_t n;
	int rc = spec_get_uint(c, "nice", v, false, MF_SPEC_NICE_MAX, &n);
	if (rc)
		return rc;
	st->nice = (int)n;
	return 0;
}
