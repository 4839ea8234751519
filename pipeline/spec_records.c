/*
 * spec_records.c - the spec keys that say how a shard's output is framed
 * into records: `records` (a fixed size, {size, tail}, lines, tfrecord,
 * tar or index) and `shuffle_window`, which only a spec with records may
 * set (docs/spec.md, "records").
 *
 * Not for: checking the output against its framing (the chunk store does
 * that while the shard is written) or the fingerprint (fingerprint.c).
 */
#include "spec_i.h"

#include <errno.h>
#include <string.h>

/* The framings a word names; a size is the fixed framing. */
static const struct spec_key framing_words[] = {
    {"lines", NULL, false},
    {"tfrecord", NULL, false},
    {"tar", NULL, false},
    {"index", NULL, false},
};
#define N_WORDS (sizeof(framing_words) / sizeof(framing_words[0]))
static const enum mf_framing word_framing[N_WORDS] = {
    MF_FRAMING_LINES, MF_FRAMING_TFRECORD, MF_FRAMING_TAR, MF_FRAMING_INDEX};

/* A record size: "2048", "2KiB"; 1 byte to MF_SPEC_RECORD_MAX. */
static int record_size(struct spec_ctx *c, const char *key,
		       const yaml_node_t *v, const char *s, uint64_t *out)
{
	uint64_t n;
	int rc = mf_parse_size(s, &n);
	if (rc == -EINVAL)
		return -EINVAL; /* the caller says what was expected */
	if (rc || n == 0 || n > MF_SPEC_RECORD_MAX)
		return spec_fail(c, v,
				 "'%s': record size '%s' is out of range "
				 "(1 byte to 1GiB)",
				 key, s);
	*out = n;
	return 0;
}

static int bad_records(struct spec_ctx *c, const yaml_node_t *v, const char *s)
{
	char shown[SPEC_QUOTABLE_SIZE];
	const char *q = spec_quotable(s, shown, sizeof(shown));
	const char *near =
	    q == shown ? spec_nearest_key(s, framing_words, N_WORDS) : NULL;
	if (near)
		return spec_fail(c, v,
				 "'records': bad value %s; did you mean "
				 "'%s'?",
				 q, near);
	return spec_fail(c, v,
			 "'records': bad value %s (expected a record size, "
			 "{size: SIZE, tail: error|drop}, lines, tfrecord, "
			 "tar or index)",
			 q);
}

static int parse_scalar(struct spec_ctx *c, const yaml_node_t *v)
{
	const char *s = spec_scalar(v);
	if (!s)
		return bad_records(c, v, "");
	struct mf_records *r = &c->spec->records;
	for (size_t i = 0; i < N_WORDS; i++) {
		if (strcmp(s, framing_words[i].name) == 0) {
			*r = (struct mf_records){.framing = word_framing[i]};
			return 0;
		}
	}
	uint64_t n = 0;
	int rc = record_size(c, "records", v, s, &n);
	if (rc == -EINVAL && !c->err)
		return bad_records(c, v, s);
	if (rc)
		return rc;
	*r = (struct mf_records){.framing = MF_FRAMING_FIXED, .size = n};
	return 0;
}

static int parse_size(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_records *r = arg;
	const char *s = spec_scalar(v);
	int rc = s ? record_size(c, "size", v, s, &r->size) : -EINVAL;
	if (rc == -EINVAL && !c->err)
		return spec_fail(c, v, "'size': expected a record size");
	return rc;
}

static int parse_tail(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	struct mf_records *r = arg;
	const char *s = spec_scalar(v);
	if (s && strcmp(s, "error") == 0)
		r->drop_tail = false;
	else if (s && strcmp(s, "drop") == 0)
		r->drop_tail = true;
	else
		return spec_fail(c, v, "'tail': expected 'error' or 'drop'");
	return 0;
}

static const struct spec_key fixed_keys[] = {
    {"size", parse_size, true},
    {"tail", parse_tail, false},
};

int spec_parse_records(struct spec_ctx *c, const yaml_node_t *v, void *arg)
{
	if (v->type == YAML_SCALAR_NODE)
		return parse_scalar(c, v);
	if (v->type != YAML_MAPPING_NODE)
		return spec_fail(c, v,
				 "'records': expected a record size, "
				 "{size: SIZE, tail: error|drop}, lines, "
				 "tfrecord, tar or index");
	struct mf_records r = {.framing = MF_FRAMING_FIXED};
	int rc = spec_parse_mapping(
	    c, v, fixed_keys, sizeof(fixed_keys) / sizeof(fixed_keys[0]), &r);
	if (rc == 0)
		c->spec->records = r;
	return rc;
}

int spec_parse_shuffle_window(struct spec_ctx *c, const yaml_node_t *v,
			      void *arg)
{
	const char *s = spec_scalar(v);
	uint64_t n = 0;
	int rc = s ? mf_parse_size(s, &n) : -EINVAL;
	if (rc == -EINVAL)
		return spec_fail(c, v, "'shuffle_window': expected a size");
	if (rc || n == 0 || n > MF_SPEC_WINDOW_MAX)
		return spec_fail(c, v,
				 "'shuffle_window': '%s' is out of range (1 "
				 "byte to 1TiB)",
				 s);
	c->spec->shuffle_window = n;
	c->window_node = v;
	return 0;
}

int spec_records_resolve(struct spec_ctx *c)
{
	struct mf_spec *s = c->spec;
	if (s->records.framing == MF_FRAMING_NONE) {
		if (c->window_node)
			return spec_fail(c, c->window_node,
					 "'shuffle_window': needs 'records' "
					 "(it bounds the bytes of records a "
					 "batch order mixes)");
		s->shuffle_window = 0;
		return 0;
	}
	if (!c->window_node)
		s->shuffle_window = MF_SHUFFLE_WINDOW_DEFAULT;
	return 0;
}
