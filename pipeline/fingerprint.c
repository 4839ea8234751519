/*
 * fingerprint.c - the fingerprint of a loaded spec (docs/spec.md, "The
 * fingerprint", has the bytes): one SHA-256 per covered component, then one
 * SHA-256 over the (label, component hash) pairs in a fixed order.
 *
 * Not for: validating the spec (spec*.c) or storing the result anywhere.
 * Reads deps files, and input files with input_identity: content, with
 * the rights of the spec's owner (the calling thread switches to them
 * under a root process, and back); runs the spec's identity command
 * (spec_identity.c) first, when it has one.
 */
#include "spec_i.h"
#include "trust_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define READ_BUF (1U << 16)

/* The parts gathered so far, with the raw digest of each. */
struct fp_build {
	struct mf_fp_part *parts;
	uint8_t (*digests)[32];
	size_t n, cap;
	char *err;
	/* the inputs' guards, when asked for (mf_fingerprint_guard_shard):
	 * one per input added, in order */
	struct mf_input_guard *guards;
	size_t n_guards;
	bool want_guards;
	uint64_t seed; /* of the guards' digests, random per build */
	uint8_t digest[16]; /* the last file hash_file read, with seed */
	/* what the spec's identity command printed, when it has one */
	const char *identity;
	size_t identity_len;
};

/* Keeps st as the guard of the input just added, when guards are wanted;
 * hashed: its content was just hashed (b->digest). */
static int add_guard(struct fp_build *b, const struct stat *st, bool hashed)
{
	if (!b->want_guards)
		return 0;
	struct mf_input_guard *v =
	    realloc(b->guards, (b->n_guards + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	b->guards = v;
	v[b->n_guards++] = (struct mf_input_guard){
	    .dev = st->st_dev,
	    .ino = st->st_ino,
	    .size = st->st_size,
	    .ctime = st->st_ctim,
	    .hashed = hashed,
	    .seed = b->seed,
	};
	if (hashed)
		memcpy(v[b->n_guards - 1].digest, b->digest, sizeof(b->digest));
	return 0;
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
	    a->st_size == b->st_size &&
	    a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	    a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int put_u64(struct mf_sha256 *h, uint64_t v)
{
	uint8_t b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (56 - 8 * i));
	return mf_sha256_update(h, b, sizeof(b));
}

/* A length-prefixed string: u64 length, then the bytes. */
static int put_str(struct mf_sha256 *h, const char *s)
{
	size_t n = strlen(s);
	int rc = put_u64(h, n);
	return rc ? rc : mf_sha256_update(h, s, n);
}

/* Finalizes h into out when rc is 0, else discards it; returns rc. */
static int finish(struct mf_sha256 *h, int rc, uint8_t out[32])
{
	if (rc) {
		mf_sha256_release(h);
		return rc;
	}
	return mf_sha256_final(h, out);
}

/* The SHA-256 of the file at path and its size; *st (may be NULL) is
 * the file as it was hashed: -ESTALE when it changed meanwhile (its inode,
 * size or ctime), or the bytes read are not its size. */
static int hash_file(struct fp_build *b, const char *path, uint8_t out[32],
		     uint64_t *size, struct stat *st)
{
	int rc = 0;
	struct stat before, after;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		rc = -errno;
		goto report;
	}
	if (fstat(fd, &before) < 0) {
		rc = -errno;
		close(fd);
		goto report;
	}
	char *buf = malloc(READ_BUF);
	struct mf_sha256 h;
	XXH3_state_t *x = b->want_guards ? XXH3_createState() : NULL;
	rc = buf && (x || !b->want_guards) ? mf_sha256_init(&h) : -ENOMEM;
	if (rc == 0 && x && XXH3_128bits_reset_withSeed(x, b->seed) != XXH_OK)
		rc = -ENOMEM;
	if (rc)
		goto free_buf;
	uint64_t total = 0;
	for (;;) {
		if (mf_deadline_passed()) { /* its registration gave up */
			rc = -ETIMEDOUT;
			break;
		}
		ssize_t n = mf_pread_full(fd, buf, READ_BUF, (off_t)total);
		if (n <= 0) {
			rc = (int)n;
			break;
		}
		total += (uint64_t)n;
		rc = mf_sha256_update(&h, buf, (size_t)n);
		if (rc == 0 && x && XXH3_128bits_update(x, buf, (size_t)n))
			rc = -ENOMEM;
		if (rc)
			break;
	}
	rc = finish(&h, rc, out);
	if (rc == 0 && x) {
		XXH128_canonical_t c;
		XXH128_canonicalFromHash(&c, XXH3_128bits_digest(x));
		memcpy(b->digest, c.digest, sizeof(b->digest));
	}
	if (rc == 0 &&
	    (fstat(fd, &after) < 0 || !same_stat(&before, &after) ||
	     total != (uint64_t)before.st_size))
		rc = -ESTALE;
	if (rc == 0) {
		*size = total;
		if (st)
			*st = before;
	}
free_buf:
	XXH3_freeState(x);
	free(buf);
	close(fd);
report:
	if (rc == -ESTALE &&
	    asprintf(&b->err, "'%s' changed while it was read", path) < 0)
		b->err = NULL;
	else if (rc && rc != -ENOMEM &&
		 asprintf(&b->err, "cannot read '%s': %s", path,
			  strerror(-rc)) < 0)
		b->err = NULL;
	return rc;
}

/* Takes ownership of label and detail (either may be NULL: -ENOMEM). */
static int add_part(struct fp_build *b, char *label, char *detail,
		    const uint8_t digest[32])
{
	int rc = label && detail ? 0 : -ENOMEM;
	if (rc == 0 && b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 16;
		struct mf_fp_part *p = realloc(b->parts, cap * sizeof(*p));
		if (p)
			b->parts = p;
		uint8_t(*d)[32] = p ? realloc(b->digests, cap * 32) : NULL;
		if (d) {
			b->digests = d;
			b->cap = cap;
		}
		rc = p && d ? 0 : -ENOMEM;
	}
	if (rc) {
		free(label);
		free(detail);
		return rc;
	}
	struct mf_fp_part *part = &b->parts[b->n];
	part->label = label;
	part->detail = detail;
	mf_hex(digest, 32, part->hex);
	memcpy(b->digests[b->n], digest, 32);
	b->n++;
	return 0;
}

static char *dupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dupf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

/* A number component: u64 big-endian. */
static int add_number(struct fp_build *b, const char *label, uint64_t v)
{
	struct mf_sha256 h;
	uint8_t d[32];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	rc = finish(&h, put_u64(&h, v), d);
	if (rc)
		return rc;
	return add_part(b, strdup(label), dupf("%llu", (unsigned long long)v),
			d);
}

/* One shell-like word for people: quoted when it holds anything odd;
 * control characters are shown as '?'. */
static void show_word(FILE *f, const char *w)
{
	bool plain = *w != '\0';
	for (const char *p = w; *p && plain; p++)
		plain =
		    strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
			   "WXYZ0123456789._/=:,+@%-",
			   *p) != NULL;
	if (plain) {
		fputs(w, f);
		return;
	}
	fputc('\'', f);
	for (const char *p = w; *p; p++) {
		if (*p == '\'')
			fputs("'\\''", f);
		else
			fputc((unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p,
			      f);
	}
	fputc('\'', f);
}

static char *show_words(char *const *words, size_t n)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputc(' ', f);
		show_word(f, words[i]);
	}
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

/* stage[i].argv: u64 argc, then each word length-prefixed. */
static int add_argv(struct fp_build *b, size_t i, const struct mf_stage *st)
{
	struct mf_sha256 h;
	uint8_t d[32];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	rc = put_u64(&h, st->argc);
	for (size_t k = 0; rc == 0 && k < st->argc; k++)
		rc = put_str(&h, st->argv[k]);
	rc = finish(&h, rc, d);
	if (rc)
		return rc;
	return add_part(b, dupf("stage[%zu].argv", i),
			show_words(st->argv, st->argc), d);
}

/* A file by content: str(rel), then the SHA-256 of the contents. */
static int add_content(struct fp_build *b, char *label, const char *tag,
		       const char *rel, const char *abs, struct stat *st)
{
	uint8_t content[32], d[32];
	char hex[MF_FP_HEX_LEN + 1];
	uint64_t size = 0;
	struct mf_sha256 h;
	int rc = hash_file(b, abs, content, &size, st);
	if (rc == 0)
		rc = mf_sha256_init(&h);
	if (rc) {
		free(label);
		return rc;
	}
	rc = tag ? put_str(&h, tag) : 0;
	if (rc == 0)
		rc = put_str(&h, rel);
	if (rc == 0)
		rc = mf_sha256_update(&h, content, sizeof(content));
	rc = finish(&h, rc, d);
	if (rc) {
		free(label);
		return rc;
	}
	mf_hex(content, sizeof(content), hex);
	return add_part(
	    b, label,
	    dupf("size=%llu sha256=%s", (unsigned long long)size, hex), d);
}

/* input[rel] with identity stat: "stat", rel, size, mtime in ns. */
static int add_input_stat(struct fp_build *b, const char *rel, const char *abs,
			  struct stat *out)
{
	struct stat st;
	if (stat(abs, &st) != 0) {
		int rc = -errno;
		if (asprintf(&b->err, "cannot stat '%s': %s", abs,
			     strerror(-rc)) < 0)
			b->err = NULL;
		return rc;
	}
	uint64_t ns = (uint64_t)st.st_mtim.tv_sec * 1000000000U +
	    (uint64_t)st.st_mtim.tv_nsec;
	struct mf_sha256 h;
	uint8_t d[32];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	rc = put_str(&h, "stat");
	if (rc == 0)
		rc = put_str(&h, rel);
	if (rc == 0)
		rc = put_u64(&h, (uint64_t)st.st_size);
	if (rc == 0)
		rc = put_u64(&h, ns);
	rc = finish(&h, rc, d);
	if (rc)
		return rc;
	*out = st;
	return add_part(
	    b, dupf("input[%s]", rel),
	    dupf("size=%lld mtime=%lld.%09ld", (long long)st.st_size,
		 (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec),
	    d);
}

struct dep {
	char *rel; /* clean relative path */
	const char *abs;
};

static int cmp_dep(const void *x, const void *y)
{
	return strcmp(((const struct dep *)x)->rel,
		      ((const struct dep *)y)->rel);
}

/* stage[i].deps[rel] for each distinct dep, sorted by clean path. */
static int add_deps(struct fp_build *b, size_t i, const struct mf_stage *st)
{
	int rc = 0;
	size_t n = 0;
	struct dep *deps = calloc(st->n_deps ? st->n_deps : 1, sizeof(*deps));
	if (!deps)
		return -ENOMEM;
	for (; n < st->n_deps; n++) {
		deps[n].abs = st->deps[n];
		deps[n].rel = spec_clean_rel(st->deps_rel[n]);
		if (!deps[n].rel) {
			rc = -ENOMEM;
			goto free_deps;
		}
	}
	qsort(deps, n, sizeof(*deps), cmp_dep);
	for (size_t k = 0; rc == 0 && k < n; k++) {
		if (k && !strcmp(deps[k - 1].rel, deps[k].rel))
			continue;
		char *label = dupf("stage[%zu].deps[%s]", i, deps[k].rel);
		rc = label ? add_content(b, label, NULL, deps[k].rel,
					 deps[k].abs, NULL)
			   : -ENOMEM;
	}
free_deps:
	for (size_t k = 0; k < n; k++)
		free(deps[k].rel);
	free(deps);
	return rc;
}

/* env: u64(n), then str(name) and str(value) of each variable, sorted by
 * name (the loader sorted them). Only a spec with variables has it. */
static int add_env(struct fp_build *b, const struct mf_spec *spec)
{
	struct mf_sha256 h;
	uint8_t d[32];
	char **words = calloc(spec->n_env, sizeof(*words));
	int rc = words ? mf_sha256_init(&h) : -ENOMEM;
	if (rc) {
		free(words);
		return rc;
	}
	rc = put_u64(&h, spec->n_env);
	for (size_t i = 0; rc == 0 && i < spec->n_env; i++) {
		rc = put_str(&h, spec->env[i].name);
		if (rc == 0)
			rc = put_str(&h, spec->env[i].value);
		if (rc == 0)
			words[i] = dupf("%s=%s", spec->env[i].name,
					spec->env[i].value);
		if (rc == 0 && !words[i])
			rc = -ENOMEM;
	}
	rc = finish(&h, rc, d);
	char *detail = rc ? NULL : show_words(words, spec->n_env);
	for (size_t i = 0; i < spec->n_env; i++)
		free(words[i]);
	free(words);
	if (rc)
		return rc;
	return add_part(b, strdup("env"), detail, d);
}

/* identity: str(the command's standard output), its bytes as they came.
 * The detail shows its size and its first line, control characters as
 * '?', cut after 64 bytes. */
static int add_identity(struct fp_build *b)
{
	struct mf_sha256 h;
	uint8_t d[32];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	rc = put_u64(&h, b->identity_len);
	if (rc == 0)
		rc = mf_sha256_update(&h, b->identity, b->identity_len);
	rc = finish(&h, rc, d);
	if (rc)
		return rc;
	const char *nl = memchr(b->identity, '\n', b->identity_len);
	size_t line = nl ? (size_t)(nl - b->identity) : b->identity_len;
	char shown[68];
	size_t n = line < 64 ? line : 64;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)b->identity[i];
		shown[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	memcpy(shown + n, line > 64 ? "..." : "", line > 64 ? 4 : 1);
	char *const words[] = {shown};
	char *quoted = show_words(words, 1);
	char *detail =
	    quoted ? dupf("size=%zu %s", b->identity_len, quoted) : NULL;
	free(quoted);
	return add_part(b, strdup("identity"), detail, d);
}

static int add_key(struct fp_build *b, const char *key)
{
	struct mf_sha256 h;
	uint8_t d[32];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	rc = finish(&h, put_str(&h, key), d);
	if (rc)
		return rc;
	char *const words[] = {(char *)key};
	return add_part(b, strdup("key"), show_words(words, 1), d);
}

/* records: str(framing name), u64(size), u64(drop_tail); then
 * shuffle_window as a number. Only a spec with records has them, so
 * fingerprints of specs without stay as they were. */
static int add_records(struct fp_build *b, const struct mf_spec *spec)
{
	const struct mf_records *r = &spec->records;
	struct mf_sha256 h;
	uint8_t d[32];
	char shown[64];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	rc = put_str(&h, mf_framing_name(r->framing));
	if (rc == 0)
		rc = put_u64(&h, r->size);
	if (rc == 0)
		rc = put_u64(&h, r->drop_tail);
	rc = finish(&h, rc, d);
	if (rc)
		return rc;
	mf_format_records(r, shown, sizeof(shown));
	rc = add_part(b, strdup("records"), strdup(shown), d);
	if (rc == 0)
		rc = add_number(b, "shuffle_window", spec->shuffle_window);
	return rc;
}

static int add_input(struct fp_build *b, const struct mf_spec *spec, size_t i)
{
	const char *rel = spec->inputs_rel[i];
	const char *abs = spec->inputs[i];
	if (spec->identity == MF_IDENTITY_STAT) {
		struct stat st;
		int rc = add_input_stat(b, rel, abs, &st);
		return rc ? rc : add_guard(b, &st, false);
	}
	char *label = dupf("input[%s]", rel);
	struct stat st;
	int rc =
	    label ? add_content(b, label, "content", rel, abs, &st) : -ENOMEM;
	return rc ? rc : add_guard(b, &st, true);
}

/* assign: str("hash"). */
static int add_assign(struct fp_build *b)
{
	struct mf_sha256 h;
	uint8_t d[32];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	rc = finish(&h, put_str(&h, "hash"), d);
	return rc ? rc : add_part(b, strdup("assign"), strdup("hash"), d);
}

static int add_parts(struct fp_build *b, const struct mf_spec *spec)
{
	int rc = add_number(b, "scheme", MF_FINGERPRINT_SCHEME);
	if (rc == 0 && spec->fingerprint_key)
		rc = add_key(b, spec->fingerprint_key);
	if (rc == 0)
		rc = add_number(b, "shards", spec->shards);
	/* only with assign: hash, so that other fingerprints stay */
	if (rc == 0 && spec->assign == MF_ASSIGN_HASH)
		rc = add_assign(b);
	/* with a fixed key too: the records index is part of the stored
	 * shards, and a batch tree is a property of its snapshot */
	if (rc == 0 && spec->records.framing != MF_FRAMING_NONE)
		rc = add_records(b, spec);
	if (rc || spec->fingerprint_key)
		return rc;
	if (spec->n_env)
		rc = add_env(b, spec);
	if (rc == 0 && spec->identity_argv)
		rc = add_identity(b);
	for (size_t i = 0; rc == 0 && i < spec->n_stages; i++) {
		rc = add_argv(b, i, &spec->stages[i]);
		if (rc == 0)
			rc = add_deps(b, i, &spec->stages[i]);
	}
	for (size_t i = 0; rc == 0 && i < spec->n_inputs; i++)
		rc = add_input(b, spec, i);
	return rc;
}

/* The parts of one shard: every deps file, and the shard's inputs. */
static int add_shard_parts(struct fp_build *b, const struct mf_spec *spec,
			   uint32_t shard)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < spec->n_stages; i++)
		rc = add_deps(b, i, &spec->stages[i]);
	for (size_t i = 0; rc == 0 && i < spec->n_inputs; i++)
		if (mf_spec_input_shard(spec, i) == shard)
			rc = add_input(b, spec, i);
	return rc;
}

/* The parts of the whole fingerprint, or of shard only, read with the
 * rights of the spec's owner: a spec shows its owner nothing of a file
 * the owner could not read (docs/security.md). */
static int add_parts_as_owner(struct fp_build *b, const struct mf_spec *spec,
			      bool whole, uint32_t shard)
{
	struct mf_fscreds saved;
	int rc = trust_enter(spec->owner_uid, spec->owner_gid, &saved);
	if (rc) {
		if (asprintf(&b->err,
			     "cannot take the rights of the spec's "
			     "owner: %s",
			     strerror(-rc)) < 0)
			b->err = NULL;
		return rc;
	}
	rc = whole ? add_parts(b, spec) : add_shard_parts(b, spec, shard);
	mf_fscreds_leave(&saved);
	return rc;
}

/* The fingerprint: SHA-256 over str(label) + digest of every part. */
static int combine(const struct fp_build *b, char hex[MF_FP_HEX_LEN + 1])
{
	struct mf_sha256 h;
	uint8_t d[32];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	for (size_t i = 0; rc == 0 && i < b->n; i++) {
		rc = put_str(&h, b->parts[i].label);
		if (rc == 0)
			rc = mf_sha256_update(&h, b->digests[i], 32);
	}
	rc = finish(&h, rc, d);
	if (rc == 0)
		mf_hex(d, sizeof(d), hex);
	return rc;
}

/* Runs the spec's identity command, when the fingerprint covers one,
 * into b; a failure is b->err "identity (WORDS): what went wrong". */
static int run_identity(struct fp_build *b, const struct mf_spec *spec,
			char **out)
{
	*out = NULL;
	if (!spec->identity_argv || spec->fingerprint_key)
		return 0;
	char *why = NULL;
	int rc = spec_identity_run(spec, out, &b->identity_len, &why);
	if (rc) {
		char *words =
		    show_words(spec->identity_argv, spec->identity_argc);
		b->err = words ? dupf("identity (%s): %s", words,
				      why ? why : strerror(-rc))
			       : NULL;
		free(words);
	}
	free(why);
	b->identity = *out;
	return rc;
}

int mf_fingerprint_compute(const struct mf_spec *spec,
			   struct mf_fingerprint *out, char **err)
{
	struct fp_build b = {0};
	char hex[MF_FP_HEX_LEN + 1];
	char *identity = NULL;
	int rc = run_identity(&b, spec, &identity);
	if (rc == 0)
		rc = add_parts_as_owner(&b, spec, true, 0);
	if (rc == 0)
		rc = combine(&b, hex);
	free(identity);
	free(b.digests);
	if (rc) {
		struct mf_fingerprint tmp = {.parts = b.parts, .n_parts = b.n};
		mf_fingerprint_release(&tmp);
		/* the spec names what was being read: FILE: what failed */
		if (err &&
		    asprintf(err, "%s: %s", spec->path,
			     b.err ? b.err : strerror(-rc)) < 0)
			*err = NULL;
		free(b.err);
		return rc;
	}
	memcpy(out->hex, hex, sizeof(hex));
	out->parts = b.parts;
	out->n_parts = b.n;
	if (err)
		*err = NULL;
	return 0;
}

/* The 32 bytes of a part's component hash, from its hex. */
static void part_digest(const struct mf_fp_part *part, uint8_t out[32])
{
	for (int i = 0; i < 32; i++) {
		char two[3] = {part->hex[2 * i], part->hex[2 * i + 1], 0};
		out[i] = (uint8_t)strtoul(two, NULL, 16);
	}
}

static int put_part(struct mf_sha256 *h, const char *label,
		    const uint8_t digest[32])
{
	int rc = put_str(h, label);
	return rc ? rc : mf_sha256_update(h, digest, 32);
}

static int put_fp_part(struct mf_sha256 *h, const struct mf_fp_part *part)
{
	uint8_t d[32];
	part_digest(part, d);
	return put_part(h, part->label, d);
}

/* H(u64(v)) as a part labelled label. */
static int put_number_part(struct mf_sha256 *h, const char *label, uint64_t v)
{
	struct mf_sha256 n;
	uint8_t d[32];
	int rc = mf_sha256_init(&n);
	if (rc == 0)
		rc = finish(&n, put_u64(&n, v), d);
	return rc ? rc : put_part(h, label, d);
}

int mf_fingerprint_shard(const struct mf_spec *spec,
			 const struct mf_fingerprint *fp, uint32_t shard,
			 char hex[MF_FP_HEX_LEN + 1])
{
	if (shard >= spec->shards)
		return -EINVAL;
	/* the inputs are fp's last parts, in the spec's order */
	size_t first_input =
	    fp->n_parts - (spec->fingerprint_key ? 0 : spec->n_inputs);
	if (!spec->fingerprint_key && fp->n_parts < spec->n_inputs)
		return -EINVAL;
	struct mf_sha256 h;
	uint8_t d[32];
	int rc = mf_sha256_init(&h);
	if (rc)
		return rc;
	rc = put_number_part(&h, "shard-scheme", MF_SHARD_FINGERPRINT_SCHEME);
	for (size_t i = 0; rc == 0 && i < first_input; i++) {
		const char *l = fp->parts[i].label;
		bool kept = spec->fingerprint_key
		    ? strcmp(l, "key") == 0 || strcmp(l, "shards") == 0 ||
			strcmp(l, "assign") == 0
		    : strcmp(l, "env") == 0 || strcmp(l, "identity") == 0 ||
			strncmp(l, "stage[", 6) == 0;
		if (kept)
			rc = put_fp_part(&h, &fp->parts[i]);
	}
	if (rc == 0)
		rc = put_number_part(&h, "shard", shard);
	for (size_t i = 0;
	     rc == 0 && !spec->fingerprint_key && i < spec->n_inputs; i++)
		if (mf_spec_input_shard(spec, i) == shard)
			rc = put_fp_part(&h, &fp->parts[first_input + i]);
	rc = finish(&h, rc, d);
	if (rc == 0)
		mf_hex(d, sizeof(d), hex);
	return rc;
}

void mf_fingerprint_release(struct mf_fingerprint *fp)
{
	if (!fp)
		return;
	for (size_t i = 0; i < fp->n_parts; i++) {
		free(fp->parts[i].label);
		free(fp->parts[i].detail);
	}
	free(fp->parts);
	memset(fp, 0, sizeof(*fp));
}

static const struct mf_fp_part *find_part(const struct mf_fingerprint *fp,
					  const char *label)
{
	for (size_t i = 0; i < fp->n_parts; i++)
		if (strcmp(fp->parts[i].label, label) == 0)
			return &fp->parts[i];
	return NULL;
}

int mf_fingerprint_check_shard(const struct mf_spec *spec,
			       const struct mf_fingerprint *fp, uint32_t shard,
			       char **err)
{
	return mf_fingerprint_guard_shard(spec, fp, shard, NULL, NULL, err);
}

int mf_fingerprint_guard_shard(const struct mf_spec *spec,
			       const struct mf_fingerprint *fp, uint32_t shard,
			       struct mf_input_guard **guards, size_t *n,
			       char **err)
{
	if (guards) {
		*guards = NULL;
		*n = 0;
	}
	if (spec->fingerprint_key)
		return 0; /* the user vouches for the bytes */
	struct fp_build b = {.want_guards = guards != NULL};
	char seed[17];
	int rc = guards ? mf_random_hex(8, seed) : 0;
	if (rc == 0) {
		b.seed = strtoull(seed, NULL, 16); /* no one can aim at it */
		rc = add_parts_as_owner(&b, spec, false, shard);
	}
	bool differs = false;
	for (size_t i = 0; rc == 0 && i < b.n; i++) {
		const struct mf_fp_part *was = find_part(fp, b.parts[i].label);
		if (was && strcmp(was->hex, b.parts[i].hex) == 0)
			continue;
		rc = -ESTALE;
		differs = true;
		if (err &&
		    asprintf(err,
			     "'%s' changed since the fingerprint "
			     "was computed (%s)",
			     b.parts[i].label, b.parts[i].detail) < 0)
			*err = NULL;
	}
	free(b.digests);
	struct mf_fingerprint tmp = {.parts = b.parts, .n_parts = b.n};
	mf_fingerprint_release(&tmp);
	if (rc && !differs && err) {
		*err = b.err ? b.err : strdup(strerror(-rc));
		b.err = NULL;
	}
	free(b.err);
	if (rc == 0 && guards) {
		*guards = b.guards;
		*n = b.n_guards;
	} else {
		free(b.guards);
	}
	return rc;
}
