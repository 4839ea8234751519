/*
 * metadata.c - what snapshot.metadata says: its text written from a struct
 * mf_snapshot_meta and parsed back into one (docs/format.md, section 1).
 * The file lets a catalog be rebuilt from the store and tells a person
 * what a fingerprint folder holds.
 *
 * Not for: writing or reading the file's bytes (store.c does, atomically
 * and without following symlinks), or filling the struct from a spec (the
 * engine does).
 */
#include "snapshot_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_VERSION "1"

/* ---- writing ---- */

/* True when s would not stay on its own line. */
static bool multiline(const char *s)
{
	return strchr(s, '\n') != NULL;
}

/* s as one line of a component's label: a control character as '?'
 * (labels hold input paths, whose file names may hold a newline; the
 * components are for people, and a line break there would be read as
 * another key, an owner's line say). */
static void put_label(FILE *f, const char *s)
{
	for (; *s; s++)
		fputc((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s, f);
}

int mf_snapshot_meta_format(const struct mf_snapshot_meta *m, char **out,
			    size_t *len)
{
	if (!m || !out || !len || !m->fp || !m->name || !m->spec_path ||
	    !m->compression || !m->suffix || (m->n_parts && !m->parts))
		return -EINVAL;
	if (multiline(m->fp) || multiline(m->name) || multiline(m->spec_path) ||
	    multiline(m->compression) || multiline(m->suffix))
		return -EINVAL;
	for (size_t i = 0; i < m->n_parts; i++)
		if (!m->parts[i].hex || !m->parts[i].label ||
		    multiline(m->parts[i].hex))
			return -EINVAL;
	FILE *f = open_memstream(out, len);
	if (!f)
		return -ENOMEM;
	fprintf(f, "matfs-snapshot " META_VERSION "\nfingerprint %s\nname %s\n",
		m->fp, m->name);
	fprintf(f, "spec_path %s\nshards %u\ncompression %s\n", m->spec_path,
		m->shards, m->compression);
	fprintf(f, "chunk_size %llu\nsuffix %s\n",
		(unsigned long long)m->chunk_size, m->suffix);
	fprintf(f, "expire_after %lld\npending_expiry %lld\nkeep %u\n",
		(long long)m->expire_after, (long long)m->pending_expiry,
		m->keep);
	if (m->has_owner)
		fprintf(f, "owner %lu\n", (unsigned long)m->owner);
	for (size_t i = 0; i < m->n_parts; i++) {
		fprintf(f, "component %s ", m->parts[i].hex);
		put_label(f, m->parts[i].label);
		fputc('\n', f);
	}
	fputs("spec:\n", f);
	if (m->spec)
		fwrite(m->spec, 1, m->spec_len, f);
	if (fclose(f) != 0) {
		free(*out);
		return -ENOMEM;
	}
	return 0;
}

int mf_store_put_metadata(struct mf_store *st, const struct mf_snapshot_meta *m)
{
	char *text = NULL, *old = NULL;
	size_t len = 0, old_len = 0;
	if (!st)
		return -EINVAL;
	int rc = mf_snapshot_meta_format(m, &text, &len);
	if (rc)
		return rc;
	/* the same bytes: no write, no fsync */
	if (mf_store_read_metadata(st, m->fp, &old, &old_len) == 0 &&
	    old_len == len && memcmp(old, text, len) == 0)
		rc = 0;
	else
		rc = mf_store_write_metadata(st, m->fp, text, len);
	free(old);
	free(text);
	return rc;
}

/* ---- parsing ---- */

enum meta_key {
	K_VERSION,
	K_FP,
	K_NAME,
	K_SPEC,
	K_SHARDS,
	K_CODEC,
	K_CHUNK,
	K_SUFFIX,
	K_EXPIRE,
	K_PENDING,
	K_KEEP,
	K_COUNT
};
static const char *const meta_keys[K_COUNT] = {
    "matfs-snapshot", "fingerprint",	"name",	      "spec_path",
    "shards",	      "compression",	"chunk_size", "suffix",
    "expire_after",   "pending_expiry", "keep",
};

static int parse_num(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (end == s || *end || errno || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static bool name_valid(const char *s)
{
	size_t n = strlen(s);
	return n >= 1 && n <= MF_META_NAME_MAX &&
	    strspn(s,
		   "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		   "0123456789._-") == n;
}

static bool codec_valid(const char *s)
{
	enum mf_codec codec;
	int level;
	return mf_parse_codec(s, &codec, &level) == 0;
}

/* Sets one field from its text (which lives as long as m): 0 or -EINVAL. */
static int meta_set(struct mf_snapshot_meta *m, enum meta_key key,
		    const char *val)
{
	int64_t v = 0;
	int rc = 0;
	switch (key) {
	case K_VERSION:
		return strcmp(val, META_VERSION) == 0 ? 0 : -EINVAL;
	case K_FP:
		m->fp = val;
		return mf_is_hex(val, MF_FP_HEX_LEN) ? 0 : -EINVAL;
	case K_NAME:
		m->name = val;
		return name_valid(val) ? 0 : -EINVAL;
	case K_SPEC:
		m->spec_path = val;
		return val[0] == '/' ? 0 : -EINVAL;
	case K_CODEC:
		m->compression = val;
		return codec_valid(val) ? 0 : -EINVAL;
	case K_SUFFIX:
		m->suffix = val;
		return 0;
	case K_SHARDS:
		rc = parse_num(val, 1, UINT32_MAX, &v);
		m->shards = (uint32_t)v;
		return rc;
	case K_CHUNK:
		rc = parse_num(val, (int64_t)MF_CHUNK_SIZE_MIN,
			       (int64_t)MF_CHUNK_SIZE_MAX, &v);
		m->chunk_size = (uint64_t)v;
		return rc;
	case K_EXPIRE:
		return parse_num(val, -1, INT64_MAX, &m->expire_after);
	case K_PENDING:
		return parse_num(val, 0, INT64_MAX, &m->pending_expiry);
	case K_KEEP:
		rc = parse_num(val, 0, UINT32_MAX, &v);
		m->keep = (uint32_t)v;
		return rc;
	case K_COUNT:
		break;
	}
	return -EINVAL;
}

/* A "component HEX LABEL" line; one that is not is skipped, as the
 * components are for people and no check reads them. */
static int meta_part(struct mf_snapshot_meta *m, char *val, size_t *cap)
{
	char *sp = strchr(val, ' ');
	if (!sp || sp - val != MF_FP_HEX_LEN)
		return 0;
	*sp = '\0';
	if (!mf_is_hex(val, MF_FP_HEX_LEN))
		return 0;
	if (m->n_parts == *cap) {
		size_t c = *cap ? 2 * *cap : 8;
		struct mf_meta_part *p =
		    realloc(m->owned_parts, c * sizeof(*p));
		if (!p)
			return -ENOMEM;
		m->owned_parts = p;
		m->parts = p;
		*cap = c;
	}
	m->owned_parts[m->n_parts++] = (struct mf_meta_part){val, sp + 1};
	return 0;
}

/* What a parse is at. */
struct parse {
	unsigned lineno;
	unsigned seen; /* bit k: key k was given */
	size_t parts_cap;
	char *why;
	size_t wlen;
};

static int key_of(const char *word)
{
	for (int k = 0; k < K_COUNT; k++)
		if (strcmp(word, meta_keys[k]) == 0)
			return k;
	return K_COUNT;
}

/* One "key value" line, cut in place; a bare key has the empty value (an
 * editor may have trimmed "suffix "). Unknown keys are skipped: a later
 * matfs may add some. */
static int meta_line(struct mf_snapshot_meta *m, struct parse *p, char *line)
{
	char *sp = strchr(line, ' ');
	char *val = sp ? sp + 1 : line + strlen(line);
	if (sp)
		*sp = '\0';
	int key = key_of(line);
	if ((++p->lineno == 1) != (key == K_VERSION)) {
		snprintf(p->why, p->wlen,
			 "line %u: not a matfs-snapshot 1 document", p->lineno);
		return MF_CORRUPT("metadata version line");
	}
	if (key == K_COUNT && strcmp(line, "owner") == 0) { /* optional */
		int64_t v;
		if (parse_num(val, 0, (int64_t)UINT32_MAX - 1, &v) != 0) {
			snprintf(p->why, p->wlen, "line %u: bad owner '%.64s'",
				 p->lineno, val);
			return MF_CORRUPT("metadata field");
		}
		m->has_owner = true;
		m->owner = (uid_t)v;
		return 0;
	}
	if (key == K_COUNT)
		return strcmp(line, "component") == 0
		    ? meta_part(m, val, &p->parts_cap)
		    : 0;
	p->seen |= 1u << key;
	if (meta_set(m, (enum meta_key)key, val) == 0)
		return 0;
	if (key == K_VERSION) {
		snprintf(p->why, p->wlen,
			 "unknown matfs-snapshot version '%.16s'", val);
		return MF_CORRUPT("metadata version");
	}
	snprintf(p->why, p->wlen, "line %u: bad %s '%.64s'", p->lineno, line,
		 val);
	return MF_CORRUPT("metadata field");
}

/* Every key present, and the fingerprint that of the folder. */
static int meta_complete(const struct mf_snapshot_meta *m,
			 const struct parse *p, const char *fp)
{
	for (int k = 0; k < K_COUNT; k++) {
		if (!(p->seen & (1u << k))) {
			snprintf(p->why, p->wlen, "no '%s' line", meta_keys[k]);
			return MF_CORRUPT("metadata field missing");
		}
	}
	if (strcmp(m->fp, fp) != 0) {
		snprintf(p->why, p->wlen,
			 "names fingerprint %.12s, not its folder's", m->fp);
		return MF_CORRUPT("metadata fingerprint");
	}
	return 0;
}

/* The lines up to "spec:", then the spec. */
static int meta_lines(struct mf_snapshot_meta *m, struct parse *p, char *text,
		      char *end)
{
	for (char *s = text, *nl; s < end; s = nl + 1) {
		nl = memchr(s, '\n', (size_t)(end - s));
		if (!nl)
			nl = end;
		*nl = '\0';
		if (strcmp(s, "spec:") == 0) {
			m->spec = nl < end ? nl + 1 : nl;
			m->spec_len = (size_t)(end - m->spec);
			return 0;
		}
		int rc = meta_line(m, p, s);
		if (rc)
			return rc;
	}
	return 0;
}

int mf_snapshot_meta_parse(const char *text, size_t len, const char *fp,
			   struct mf_snapshot_meta *out, char *why, size_t wlen)
{
	char scratch[1];
	struct parse p = {.why = wlen ? why : scratch,
			  .wlen = wlen ? wlen : sizeof(scratch)};
	struct mf_snapshot_meta m = {0};
	if (!out || !fp || (!text && len))
		return -EINVAL;
	p.why[0] = '\0';
	if (len && memchr(text, '\0', len)) {
		snprintf(p.why, p.wlen, "holds a NUL byte");
		return MF_CORRUPT("metadata NUL byte");
	}
	m.owned_text = malloc(len + 1);
	if (!m.owned_text)
		return -ENOMEM;
	if (len)
		memcpy(m.owned_text, text, len);
	m.owned_text[len] = '\0';
	int rc = meta_lines(&m, &p, m.owned_text, m.owned_text + len);
	if (rc == 0)
		rc = meta_complete(&m, &p, fp);
	if (rc) {
		mf_snapshot_meta_release(&m);
		return rc;
	}
	*out = m;
	return 0;
}

void mf_snapshot_meta_release(struct mf_snapshot_meta *m)
{
	if (!m)
		return;
	free(m->owned_text);
	free(m->owned_parts);
	memset(m, 0, sizeof(*m));
}

int mf_store_load_metadata(struct mf_store *st, const char *fp,
			   struct mf_snapshot_meta *out, char *why, size_t wlen)
{
	char *text;
	size_t len;
	int64_t mtime;
	if (wlen)
		why[0] = '\0';
	if (!out)
		return -EINVAL;
	int rc = snap_read_metadata(st, fp, &text, &len, &mtime);
	if (rc)
		return rc;
	rc = mf_snapshot_meta_parse(text, len, fp, out, why, wlen);
	free(text);
	if (rc == 0)
		out->mtime = mtime;
	return rc;
}
