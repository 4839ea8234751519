/*
 * spec_keys.c - the meaning of each spec key: typed readers of YAML nodes
 * (string, integer, duration) and one handler per key, stages included,
 * each validating its value and storing it in the spec.
 *
 * Not for: reading the file or dispatching keys (spec.c), or anything that
 * touches the filesystem (spec_files.c).
 */
#include "spec_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const yaml_node_t *spec_node(const struct spec_ctx *c, int index)
{
	return yaml_document_get_node(c->doc, index);
}

bool spec_is_null(const yaml_node_t *n)
{
	if (n->type != YAML_SCALAR_NODE ||
	    n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	const char *s = (const char *)n->data.scalar.value;
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") ||
	    !strcmp(s, "Null") || !strcmp(s, "NULL");
}

const char *spec_scalar(const yaml_node_t *n)
{
	if (n->type != YAML_SCALAR_NODE || spec_is_null(n))
		return NULL;
	const char *s = (const char *)n->data.scalar.value;
	if (strlen(s) != n->data.scalar.length)
		return NULL;
	return s;
}

/* A non-null scalar without NUL bytes, or "'KEY': expected WHAT". */
static int want_scalar(struct spec_ctx *c, const char *key,
		       const yaml_node_t *n, const char *what, const char **out)
{
	if (n->type != YAML_SCALAR_NODE || spec_is_null(n))
		return spec_fail(c, n, "'%s': expected %s", key, what);
	const char *s = spec_scalar(n);
	if (!s)
		return spec_fail(c, n, "'%s': must not contain a NUL byte",
				 key);
	*out = s;
	return 0;
}

int spec_get_string(struct spec_ctx *c, const char *key, const yaml_node_t *n,
		    char **out)
{
	const char *s = NULL;
	int rc = want_scalar(c, key, n, "a string", &s);
	if (rc)
		return rc;
	char *dup = strdup(s);
	if (!dup)
		return -ENOMEM;
	*out = dup;
	return 0;
}

int spec_get_uint(struct spec_ctx *c, const char *key, const yaml_node_t *n,
		  bool positive, uint64_t max, uint64_t *out)
{
	const char *what =
	    positive ? "a positive integer" : "a non-negative integer";
	const char *s = NULL;
	int rc = want_scalar(c, key, n, what, &s);
	if (rc)
		return rc;
	uint64_t v = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > max)
			continue; /* keep scanning: "too large" wins below */
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p == s || *p || (positive && v == 0))
		return spec_fail(c, n, "'%s': expected %s, not '%s'", key, what,
				 s);
	if (v > max)
		return spec_fail(c, n, "'%s': %s is too large (at most %llu)",
				 key, s, (unsigned long long)max);
	*out = v;
	return 0;
}

int spec_get_duration(struct spec_ctx *c, const char *key, const yaml_node_t *n,
		      int64_t *out)
{
	const char *s = NULL;
	int rc = want_scalar(c, key, n, "a duration", &s);
	if (rc)
		return rc;
	rc = mf_parse_duration(s, out);
	if (rc == -ERANGE)
		return spec_fail(c, n,
				 "'%s': duration '%s' is too large (at most "
				 "%llds)",
				 key, s, (long long)MF_DURATION_MAX_S);
	if (rc)
		return spec_fail(c, n, "'%s': bad duration '%s'", key, s);
	return 0;
}

static bool name_char(char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
	    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
}

int spec_parse_name(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	const char *s = NULL;
	int rc = want_scalar(c, "name", v, "a string", &s);
	if (rc)
		return rc;
	size_t len = strlen(s);
	bool ok = len >= 1 && len <= MF_NAME_MAX;
	for (size_t i = 0; ok && i < len; i++)
		ok = name_char(s[i]);
	if (!ok)
		return spec_fail(c, v,
				 "'name': must be 1-%d characters of "
				 "A-Z a-z 0-9 . _ -",
				 MF_NAME_MAX);
	if (!strcmp(s, ".") || !strcmp(s, ".."))
		return spec_fail(c, v, "'name': must not be '.' or '..'");
	/* matctl, and every other command given the name, would read it as
	 * an option */
	if (s[0] == '-')
		return spec_fail(c, v, "'name': must not begin with '-'");
	/* the mount root and matctl take 64 hex digits for a fingerprint:
	 * a name like one would stand for another pipeline's snapshot */
	if (len == MF_FP_HEX_LEN && strspn(s, "0123456789abcdefABCDEF") == len)
		return spec_fail(c, v,
				 "'name': 64 hex digits read as a fingerprint: "
				 "choose another name");
	return spec_get_string(c, "name", v, &c->spec->name);
}

int spec_parse_shards(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	uint64_t n;
	int rc = spec_get_uint(c, "shards", v, true, UINT32_MAX, &n);
	if (rc)
		return rc;
	c->spec->shards = (uint32_t)n;
	c->shards_node = v;
	return 0;
}

int spec_parse_identity(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	const char *s = NULL;
	int rc = want_scalar(c, "input_identity", v, "'stat' or 'content'", &s);
	if (rc)
		return rc;
	if (!strcmp(s, "stat"))
		c->spec->identity = MF_IDENTITY_STAT;
	else if (!strcmp(s, "content"))
		c->spec->identity = MF_IDENTITY_CONTENT;
	else
		return spec_fail(c, v,
				 "'input_identity': bad value '%s' "
				 "(expected 'stat' or 'content')",
				 s);
	return 0;
}

int spec_parse_assign(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	const char *s = NULL;
	int rc = want_scalar(c, "assign", v, "'order' or 'hash'", &s);
	if (rc)
		return rc;
	if (!strcmp(s, "order"))
		c->spec->assign = MF_ASSIGN_ORDER;
	else if (!strcmp(s, "hash"))
		c->spec->assign = MF_ASSIGN_HASH;
	else
		return spec_fail(c, v,
				 "'assign': bad value '%s' (expected 'order' "
				 "or 'hash')",
				 s);
	c->assign_node = v;
	return 0;
}

int spec_parse_suffix(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	const char *s = NULL;
	int rc = want_scalar(c, "suffix", v, "a string", &s);
	if (rc)
		return rc;
	if (strchr(s, '/'))
		return spec_fail(c, v, "'suffix': must not contain '/'");
	if (strlen(s) > MF_SPEC_SUFFIX_MAX)
		return spec_fail(c, v, "'suffix': longer than %d bytes",
				 MF_SPEC_SUFFIX_MAX);
	char *dup = strdup(s);
	if (!dup)
		return -ENOMEM;
	free(c->spec->suffix);
	c->spec->suffix = dup;
	return 0;
}

int spec_parse_compression(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	const char *s = NULL;
	int rc = want_scalar(c, "compression", v, "a codec", &s);
	if (rc)
		return rc;
	if (mf_parse_codec(s, &c->spec->codec, &c->spec->level))
		return spec_fail(c, v,
				 "'compression': bad codec '%s' "
				 "(zstd, zstd:1-19, snappy or none)",
				 s);
	return 0;
}

/* YAML 1.2's core booleans: true, True, TRUE, false, False, FALSE. */
static int get_bool(struct spec_ctx *c, const char *key, const yaml_node_t *n,
		    bool *out)
{
	static const char *const t[] = {"true", "True", "TRUE"};
	static const char *const f[] = {"false", "False", "FALSE"};
	const char *s = NULL;
	int rc = want_scalar(c, key, n, "true or false", &s);
	if (rc)
		return rc;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (strcmp(s, t[i]) == 0 || strcmp(s, f[i]) == 0) {
			*out = strcmp(s, t[i]) == 0;
			return 0;
		}
	}
	return spec_fail(c, n, "'%s': expected true or false, not '%s'", key,
			 s);
}

int spec_parse_compression_adapt(struct spec_ctx *c, const yaml_node_t *v,
				 void *arg)
{
	return get_bool(c, "compression_adapt", v, &c->spec->compression_adapt);
}

int spec_parse_chunk_size(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	const char *s = NULL;
	int rc = want_scalar(c, "chunk_size", v, "a size", &s);
	if (rc)
		return rc;
	uint64_t n;
	rc = mf_parse_size(s, &n);
	if (rc == -EINVAL)
		return spec_fail(c, v, "'chunk_size': bad size '%s'", s);
	if (rc || n < MF_SPEC_CHUNK_MIN || n > MF_SPEC_CHUNK_MAX)
		return spec_fail(c, v,
				 "'chunk_size': '%s' is out of range "
				 "(4KiB to 1GiB)",
				 s);
	c->spec->chunk_size = n;
	return 0;
}

static int positive_duration(struct spec_ctx *c, const char *key,
			     const yaml_node_t *v, int64_t *out)
{
	int64_t d;
	int rc = spec_get_duration(c, key, v, &d);
	if (rc)
		return rc;
	if (d <= 0)
		return spec_fail(c, v, "'%s': must be longer than 0s", key);
	*out = d;
	return 0;
}

int spec_parse_expire_after(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	const char *s = spec_scalar(v);
	if (s && !strcmp(s, "never")) {
		c->spec->expire_after = -1;
		return 0;
	}
	return positive_duration(c, "expire_after", v, &c->spec->expire_after);
}

int spec_parse_pending_expiry(struct spec_ctx *c, const yaml_node_t *v,
			      void *arg)
{
	return positive_duration(c, "pending_expiry", v,
				 &c->spec->pending_expiry);
}

int spec_parse_keep(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	uint64_t n;
	int rc = spec_get_uint(c, "keep", v, false, UINT32_MAX, &n);
	if (rc)
		return rc;
	c->spec->keep = (uint32_t)n;
	return 0;
}

int spec_parse_fingerprint(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	const char *s = NULL;
	int rc = want_scalar(c, "fingerprint", v, "a string", &s);
	if (rc)
		return rc;
	if (!*s)
		return spec_fail(c, v, "'fingerprint': must not be empty");
	return spec_get_string(c, "fingerprint", v, &c->spec->fingerprint_key);
}

/* ---- stages ---- */

/* An argv: a list of at least one string, the first not empty, at most
 * MF_SPEC_ARGV_MAX of them, into *argv (NULL-terminated) and *argc. */
static int parse_words(struct spec_ctx *c, const char *key,
		       const yaml_node_t *v, char ***argv, size_t *argc)
{
	if (v->type != YAML_SEQUENCE_NODE)
		return spec_fail(c, v, "'%s': expected a list of strings", key);
	size_t n =
	    (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n == 0)
		return spec_fail(c, v, "'%s': at least one word is required",
				 key);
	if (n > MF_SPEC_ARGV_MAX)
		return spec_fail(c, v, "'%s': more than %d words", key,
				 MF_SPEC_ARGV_MAX);
	*argv = calloc(n + 1, sizeof(**argv));
	if (!*argv)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const yaml_node_t *w =
		    spec_node(c, v->data.sequence.items.start[i]);
		int rc = spec_get_string(c, key, w, &(*argv)[i]);
		if (rc)
			return rc;
		(*argc)++;
	}
	if (!(*argv)[0][0])
		return spec_fail(c,
				 spec_node(c, v->data.sequence.items.start[0]),
				 "'%s': the program name is empty", key);
	return 0;
}

int spec_parse_identity_exec(struct spec_ctx *c, const yaml_node_t *v,
			     void *arg)
{
	struct mf_spec *s = c->spec;
	return parse_words(c, "identity", v, &s->identity_argv,
			   &s->identity_argc);
}

static int parse_exec(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_stage *st = arg;
	return parse_words(c, "exec", v, &st->argv, &st->argc);
}

static int parse_timeout(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_stage *st = arg;
	return spec_get_duration(c, "timeout", v, &st->timeout_s);
}

static const struct spec_key stage_keys[] = {
    {"exec", parse_exec, true},
    {"deps", spec_parse_deps, false},
    {"timeout", parse_timeout, false},
    {"memory", spec_parse_memory, false}, /* spec_env.c */
    {"nice", spec_parse_nice, false},
};

int spec_parse_stages(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_spec *s = c->spec;
	if (spec_is_null(v) ||
	    (v->type == YAML_SEQUENCE_NODE &&
	     v->data.sequence.items.top == v->data.sequence.items.start))
		return spec_fail(c, v,
				 "'stages': at least one stage is required");
	if (v->type != YAML_SEQUENCE_NODE)
		return spec_fail(c, v, "'stages': expected a list of stages");
	size_t n =
	    (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n > MF_SPEC_STAGES_MAX)
		return spec_fail(c, v, "'stages': more than %d stages",
				 MF_SPEC_STAGES_MAX);
	s->stages = calloc(n, sizeof(*s->stages));
	if (!s->stages)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const yaml_node_t *m =
		    spec_node(c, v->data.sequence.items.start[i]);
		if (m->type != YAML_MAPPING_NODE)
			return spec_fail(c, m,
					 "'stages': expected a mapping with "
					 "'exec'");
		struct mf_stage *st = &s->stages[s->n_stages++];
		st->timeout_s = MF_STAGE_TIMEOUT_DEFAULT;
		int rc = spec_parse_mapping(
		    c, m, stage_keys,
		    sizeof(stage_keys) / sizeof(stage_keys[0]), st);
		if (rc)
			return rc;
	}
	return 0;
}
