/*
 * fuzz_spec.c - fuzz target for the spec loader, mf_spec_load
 * (pipeline/mf_pipeline.h). The input is written as spec.yaml into a
 * temporary folder (its name holds glob characters) that also holds input
 * files (JSON lines in raw/, a subfolder, a symlink, a dangling one, a
 * name full of glob characters, a hidden file), deps files and a FIFO, so
 * that globs match, deps resolve and the loader gets past syntax into
 * every key's checks. A spec that loads is
 * checked against docs/spec.md (names, ranges, sorted inputs, shard
 * assignment) and fingerprinted twice, with the same result, and its shard
 * 0 still checks against that fingerprint. A spec that fails has a one-line
 * message "FILE:..." and -EINVAL.
 *
 * Inputs that could lead a glob or a dep outside the folder are skipped
 * (see leaves_root): a glob over the whole filesystem, or ".*" repeated
 * (".*" matches "." and ".." too, so each one doubles glob(3)'s work),
 * measures glob(3) and the machine, not the loader.
 *
 * FUZZ_SPEC_VERBOSE=1 in the environment prints each input's verdict
 * (the spec's name, or the error), to see what a seed reaches.
 *
 * Not for: running stages (nothing here starts a process).
 */
#include "fuzz.h"
#include "mf_pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPEC_NAME "spec.yaml"

static char root[256]; /* the folder, realpath; "" until made */
static char spec_path[300];

static const struct {
	const char *path;
	const char *text; /* NULL: a folder */
} fixture[] = {
    {"raw", NULL},
    {"raw/sub", NULL},
    {"raw/empty", NULL},
    {"conf", NULL},
    {"raw/a.jsonl", "{\"text\": \"a\"}\n"},
    {"raw/b.jsonl", "{\"text\": \"bb\"}\n"},
    {"raw/c.jsonl", "{\"text\": \"ccc\"}\n"},
    {"raw/notes.txt", "not json\n"},
    {"raw/.hidden.jsonl", "{}\n"},
    {"raw/odd [x]*?.jsonl", "{\"odd\": 1}\n"},
    {"raw/sub/d.jsonl", "{\"text\": \"d\"}\n"},
    {"tokenize.py", "print('tokens')\n"},
    {"vocab.json", "{}\n"},
    {"conf/stage.cfg", "level = 1\n"},
};

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void remove_root(void)
{
	if (root[0])
		nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void put_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FUZZ_CHECK(fd >= 0);
	/* whatever the umask: a spec others may write is refused */
	FUZZ_CHECK(fchmod(fd, 0644) == 0);
	FUZZ_CHECK(len == 0 || write(fd, data, len) == (ssize_t)len);
	FUZZ_CHECK(close(fd) == 0);
}

static void make_root(void)
{
	/* glob's special characters in the folder's own name: the loader
	 * must escape them before it appends a pattern */
	char tmpl[] = "/tmp/mf-fuzz-spec [*?]-XXXXXX";
	FUZZ_CHECK(mkdtemp(tmpl));
	char *real = realpath(tmpl, NULL);
	FUZZ_CHECK(real && strlen(real) < sizeof(root));
	snprintf(root, sizeof(root), "%s", real);
	free(real);
	atexit(remove_root);
	char p[512];
	for (size_t i = 0; i < sizeof(fixture) / sizeof(fixture[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", root, fixture[i].path);
		if (!fixture[i].text)
			FUZZ_CHECK(mkdir(p, 0755) == 0);
		else
			put_file(p, fixture[i].text, strlen(fixture[i].text));
	}
	snprintf(p, sizeof(p), "%s/raw/link.jsonl", root);
	FUZZ_CHECK(symlink("a.jsonl", p) == 0);
	snprintf(p, sizeof(p), "%s/raw/dangling.jsonl", root);
	FUZZ_CHECK(symlink("gone.jsonl", p) == 0);
	snprintf(p, sizeof(p), "%s/fifo", root);
	FUZZ_CHECK(mkfifo(p, 0644) == 0);
	snprintf(spec_path, sizeof(spec_path), "%s/%s", root, SPEC_NAME);
}

/* The byte a YAML escape \xHH, \uHHHH or \UHHHHHHHH at p (after the
 * backslash) stands for, or -1. */
static long escaped_char(const uint8_t *p, size_t n)
{
	size_t digits = p[0] == 'x' ? 2 : p[0] == 'u' ? 4 : p[0] == 'U' ? 8 : 0;
	if (!digits || n < digits + 1)
		return -1;
	long v = 0;
	for (size_t i = 1; i <= digits; i++) {
		const char *hex = "0123456789abcdef0123456789ABCDEF";
		const char *at = p[i] ? strchr(hex, p[i]) : NULL;
		if (!at)
			return -1;
		v = v * 16 + (at - hex) % 16;
	}
	return v;
}

/* A line that is exactly "...", YAML's document end marker, at d[i]. */
static bool doc_end(const uint8_t *d, size_t n, size_t i)
{
	if ((i && d[i - 1] != '\n') || n - i < 3 || memcmp(d + i, "...", 3))
		return false;
	return n - i == 3 || d[i + 3] == '\n';
}

/*
 * True when the text might reach outside the folder: a '.' followed by
 * something that lets a glob match ".." ('.', '*', '?', '[', or a
 * backslash, which also starts YAML's escaped line break), or a YAML
 * escape that spells one of those characters. A "..." line, YAML's
 * document end marker, is fine.
 */
static bool leaves_root(const uint8_t *d, size_t n)
{
	static const char risky[] = ".*?[\\";
	for (size_t i = 0; i + 1 < n; i++) {
		if (doc_end(d, n, i)) {
			i += 2;
			continue;
		}
		if (d[i] == '.' && d[i + 1] && strchr(risky, d[i + 1]))
			return true;
		if (d[i] == '\\') {
			long c = escaped_char(d + i + 1, n - i - 1);
			if (c > 0 && c < 0x80 && strchr(risky, (int)c))
				return true;
		}
	}
	return false;
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > MF_NAME_MAX || !strcmp(s, ".") || !strcmp(s, ".."))
		return false;
	return strspn(s,
		      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		      "0123456789._-") == n;
}

/* rel is as spec_clean_rel leaves it: relative, no "." component, no
 * repeated or trailing slash. abs is root + "/" + rel. */
static void check_path(const char *rel, const char *abs)
{
	FUZZ_CHECK(rel[0] && rel[0] != '/' && !strstr(rel, "//"));
	FUZZ_CHECK(strcmp(rel, ".") && strncmp(rel, "./", 2));
	FUZZ_CHECK(!strstr(rel, "/./") && rel[strlen(rel) - 1] != '/');
	size_t rl = strlen(root);
	FUZZ_CHECK(!strncmp(abs, root, rl) && abs[rl] == '/');
	FUZZ_CHECK(!strcmp(abs + rl + 1, rel));
}

/* Input j is in shard j mod shards, at position j / shards. */
static void check_shards(const struct mf_spec *s)
{
	size_t total = 0;
	for (uint32_t k = 0; k < s->shards; k++) {
		const char **paths;
		size_t n;
		FUZZ_CHECK(mf_spec_shard_inputs(s, k, &paths, &n) == 0);
		FUZZ_CHECK(n >= 1);
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK(paths[i] == s->inputs[k + i * s->shards]);
		total += n;
		free(paths);
	}
	FUZZ_CHECK(total == s->n_inputs);
	const char **paths;
	size_t n;
	FUZZ_CHECK(mf_spec_shard_inputs(s, s->shards, &paths, &n) == -EINVAL);
}

static void check_stage(const struct mf_stage *st)
{
	FUZZ_CHECK(st->argc >= 1 && st->argv[st->argc] == NULL);
	FUZZ_CHECK(st->argv[0][0] != '\0');
	for (size_t i = 0; i < st->argc; i++)
		FUZZ_CHECK(st->argv[i] != NULL);
	for (size_t i = 0; i < st->n_deps; i++) {
		struct stat sb;
		FUZZ_CHECK(st->deps_rel[i][0] && st->deps_rel[i][0] != '/');
		FUZZ_CHECK(stat(st->deps[i], &sb) == 0 && S_ISREG(sb.st_mode));
	}
	FUZZ_CHECK(st->timeout_s >= 0 && st->timeout_s <= MF_DURATION_MAX_S);
}

/* What docs/spec.md promises of a spec that loaded. */
static void check_spec(const struct mf_spec *s)
{
	FUZZ_CHECK(!strcmp(s->dir, root) && !strcmp(s->path, spec_path));
	FUZZ_CHECK(name_ok(s->name));
	FUZZ_CHECK(s->n_globs >= 1 && s->n_inputs >= 1);
	FUZZ_CHECK(s->shards >= 1 && s->shards <= s->n_inputs);
	for (size_t i = 0; i < s->n_inputs; i++) {
		check_path(s->inputs_rel[i], s->inputs[i]);
		FUZZ_CHECK(!i ||
			   strcmp(s->inputs_rel[i - 1], s->inputs_rel[i]) < 0);
	}
	FUZZ_CHECK(s->n_stages >= 1);
	for (size_t i = 0; i < s->n_stages; i++)
		check_stage(&s->stages[i]);
	FUZZ_CHECK(strlen(s->suffix) <= 32 && !strchr(s->suffix, '/'));
	if (s->codec == MF_CODEC_ZSTD)
		FUZZ_CHECK(s->level >= 1 && s->level <= 19);
	else
		FUZZ_CHECK((s->codec == MF_CODEC_NONE ||
			    s->codec == MF_CODEC_SNAPPY) &&
			   s->level == 0);
	FUZZ_CHECK(s->chunk_size >= 4096 && s->chunk_size <= (1ULL << 30));
	FUZZ_CHECK(
	    s->expire_after == -1 ||
	    (s->expire_after > 0 && s->expire_after <= MF_DURATION_MAX_S));
	FUZZ_CHECK(s->pending_expiry > 0 &&
		   s->pending_expiry <= MF_DURATION_MAX_S);
	FUZZ_CHECK(!s->fingerprint_key || s->fingerprint_key[0]);
	check_shards(s);
}

/* Fingerprinting a loaded spec reads only files the loader checked: it
 * succeeds, twice alike, and shard 0 still matches. */
static void check_fingerprint(const struct mf_spec *s)
{
	struct mf_fingerprint a, b;
	char *err = NULL;
	int rc = mf_fingerprint_compute(s, &a, &err);
	if (rc)
		fprintf(stderr, "fingerprint: %s\n", err ? err : "?");
	FUZZ_CHECK(rc == 0 && err == NULL);
	FUZZ_CHECK(mf_fingerprint_compute(s, &b, NULL) == 0);
	FUZZ_CHECK(!strcmp(a.hex, b.hex) && a.n_parts == b.n_parts);
	FUZZ_CHECK(strlen(a.hex) == MF_FP_HEX_LEN &&
		   strspn(a.hex, "0123456789abcdef") == MF_FP_HEX_LEN);
	FUZZ_CHECK(!strcmp(a.parts[0].label, "scheme"));
	if (s->fingerprint_key)
		FUZZ_CHECK(a.n_parts == 3);
	else
		FUZZ_CHECK(a.n_parts >= 2 + s->n_stages + s->n_inputs);
	rc = mf_fingerprint_check_shard(s, &a, 0, &err);
	if (rc)
		fprintf(stderr, "check_shard: %s\n", err ? err : "?");
	FUZZ_CHECK(rc == 0);
	mf_fingerprint_release(&a);
	mf_fingerprint_release(&b);
}

/* A refused spec: -EINVAL and one line naming the file. */
static void check_error(int rc, char *err)
{
	FUZZ_CHECK(rc == -EINVAL || rc == -ENOMEM);
	FUZZ_CHECK(err != NULL);
	size_t pl = strlen(spec_path);
	FUZZ_CHECK(!strncmp(err, spec_path, pl) && err[pl] == ':');
	for (const char *p = err; *p; p++)
		FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
	free(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!root[0])
		make_root();
	if (leaves_root(data, size))
		return 0;
	put_file(spec_path, data, size);
	struct mf_spec *spec = NULL;
	char *err = NULL;
	int rc = mf_spec_load(spec_path, &spec, &err);
	if (getenv("FUZZ_SPEC_VERBOSE"))
		fprintf(stderr, "%s\n", rc ? err : spec->name);
	if (rc) {
		check_error(rc, err);
		return 0;
	}
	FUZZ_CHECK(spec && err == NULL);
	check_spec(spec);
	check_fingerprint(spec);
	mf_spec_free(spec);
	return 0;
}
