/*
 * spec.c - loading a pipeline spec: opening the file with its owner's
 * rights under the ownership rules (spec_trust.c), parsing it with
 * libyaml's document API, dispatching each top-level key to its handler,
 * the checks that span keys (required keys, shards against inputs), error
 * messages, freeing, and the assignment of input files to shards.
 *
 * Not for: the meaning of each key (spec_keys.c), globbing inputs and
 * checking deps (spec_files.c), or the fingerprint (fingerprint.c).
 * Never prints: every problem becomes one line in *err.
 */
#include "spec_i.h"
#include "trust_i.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MSG_MAX 1024 /* longer messages are cut, ending in "..." */
#define SHOWN_MAX 16 /* bytes of an unknown key a message quotes */

static const struct spec_key top_keys[] = {
    {"name", spec_parse_name, true},
    {"inputs", spec_parse_inputs, true},
    {"shards", spec_parse_shards, false},
    {"input_identity", spec_parse_identity, false},
    {"assign", spec_parse_assign, false},
    {"stages", spec_parse_stages, true},
    {"suffix", spec_parse_suffix, false},
    {"compression", spec_parse_compression, false},
    {"compression_adapt", spec_parse_compression_adapt, false},
    {"chunk_size", spec_parse_chunk_size, false},
    {"expire_after", spec_parse_expire_after, false},
    {"pending_expiry", spec_parse_pending_expiry, false},
    {"keep", spec_parse_keep, false},
    {"fingerprint", spec_parse_fingerprint, false},
    {"identity", spec_parse_identity_exec, false},
    {"env", spec_parse_env, false},
    {"records", spec_parse_records, false},
    {"shuffle_window", spec_parse_shuffle_window, false},
};

/* Builds "FILE:LINE:COLUMN: msg" (or "FILE: msg" without a mark). */
static int vfail(struct spec_ctx *c, const yaml_mark_t *mark, const char *fmt,
		 va_list ap)
{
	char msg[MSG_MAX];
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (n >= (int)sizeof(msg))
		memcpy(msg + sizeof(msg) - 4, "...", 4);
	char *line = NULL;
	if (mark)
		n = asprintf(&line, "%s:%zu:%zu: %s", c->file, mark->line + 1,
			     mark->column + 1, msg);
	else
		n = asprintf(&line, "%s: %s", c->file, msg);
	if (n < 0)
		return -ENOMEM;
	for (char *p = line; *p; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	}
	free(c->err);
	c->err = line;
	return -EINVAL;
}

int spec_fail(struct spec_ctx *c, const yaml_node_t *at, const char *fmt, ...)
{
	static const yaml_mark_t start = {0, 0, 0};
	va_list ap;
	va_start(ap, fmt);
	int rc = vfail(c, at ? &at->start_mark : &start, fmt, ap);
	va_end(ap);
	return rc;
}

/* A problem with the file itself: no position; rc is kept. */
__attribute__((format(printf, 3, 4))) static int
file_fail(struct spec_ctx *c, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int frc = vfail(c, NULL, fmt, ap);
	va_end(ap);
	return frc == -ENOMEM ? frc : rc;
}

__attribute__((format(printf, 3, 4))) static int
mark_fail(struct spec_ctx *c, yaml_mark_t mark, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = vfail(c, &mark, fmt, ap);
	va_end(ap);
	return rc;
}

const char *spec_quotable(const char *key, char *buf, size_t size)
{
	static const char word[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				   "abcdefghijklmnopqrstuvwxyz0123456789_.-";
	size_t len = strlen(key);
	if (!len || strspn(key, word) != len)
		return "(not shown: not a word of A-Z a-z 0-9 _ . -)";
	if (len > SHOWN_MAX)
		snprintf(buf, size, "'%.*s...'", SHOWN_MAX, key);
	else
		snprintf(buf, size, "'%s'", key);
	return buf;
}

int spec_parse_mapping(struct spec_ctx *c, const yaml_node_t *map,
		       const struct spec_key *keys, size_t n_keys, void *arg)
{
	uint32_t seen = 0;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		const yaml_node_t *k = spec_node(c, p->key);
		const yaml_node_t *v = spec_node(c, p->value);
		const char *name = spec_scalar(k);
		if (!name)
			return spec_fail(c, k, "expected a key name");
		size_t i = 0;
		while (i < n_keys && strcmp(keys[i].name, name) != 0)
			i++;
		if (i == n_keys) {
			char shown[SPEC_QUOTABLE_SIZE];
			const char *q =
			    spec_quotable(name, shown, sizeof(shown));
			/* guessed only for a key shown as it is */
			const char *near =
			    q == shown && strlen(name) <= SHOWN_MAX
			    ? spec_nearest_key(name, keys, n_keys)
			    : NULL;
			if (near)
				return spec_fail(
				    c, k, "unknown key %s; did you mean '%s'?",
				    q, near);
			return spec_fail(c, k, "unknown key %s", q);
		}
		if (seen & (1U << i))
			return spec_fail(c, k, "duplicate key '%s'", name);
		seen |= 1U << i;
		int rc = keys[i].parse(c, v, arg);
		if (rc)
			return rc;
	}
	for (size_t i = 0; i < n_keys; i++) {
		if (keys[i].required && !(seen & (1U << i)))
			return spec_fail(c, map, "missing required key '%s'",
					 keys[i].name);
	}
	return 0;
}

/* assign: hash: each input's shard, XXH3-64 (seed 0) of its path
 * relative to the spec folder, mod shards (docs/spec.md, `assign`). */
static int assign_inputs(struct spec_ctx *c)
{
	struct mf_spec *s = c->spec;
	if (s->assign != MF_ASSIGN_HASH)
		return 0;
	s->input_shard =
	    calloc(s->n_inputs ? s->n_inputs : 1, sizeof(*s->input_shard));
	if (!s->input_shard)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_inputs; i++)
		s->input_shard[i] =
		    (uint32_t)(XXH3_64bits(s->inputs_rel[i],
					   strlen(s->inputs_rel[i])) %
			       s->shards);
	return 0;
}

static int resolve_shards(struct spec_ctx *c, const yaml_node_t *root)
{
	struct mf_spec *s = c->spec;
	if (!c->shards_node && s->assign == MF_ASSIGN_HASH)
		return spec_fail(c, c->assign_node,
				 "'assign: hash' needs 'shards: N': with one "
				 "shard per input, every new input would move "
				 "the others");
	if (!c->shards_node) {
		if (s->n_inputs > UINT32_MAX)
			return spec_fail(c, root, "more than %u input files",
					 UINT32_MAX);
		s->shards = (uint32_t)s->n_inputs;
		return 0;
	}
	if (s->shards > s->n_inputs)
		return spec_fail(c, c->shards_node,
				 "'shards': %u shards but only %zu input %s",
				 s->shards, s->n_inputs,
				 s->n_inputs == 1 ? "file" : "files");
	return assign_inputs(c);
}

static int parse_root(struct spec_ctx *c, const yaml_node_t *root)
{
	if (root->type != YAML_MAPPING_NODE)
		return spec_fail(c, root, "expected a mapping of spec keys");
	int rc = spec_parse_mapping(
	    c, root, top_keys, sizeof(top_keys) / sizeof(top_keys[0]), NULL);
	if (rc == 0)
		rc = spec_records_resolve(c);
	if (rc)
		return rc;
	return resolve_shards(c, root);
}

/* libyaml's reader errors carry a byte offset, not a line and column. */
static yaml_mark_t mark_at(const char *data, size_t len, size_t offset)
{
	yaml_mark_t m = {offset, 0, 0};
	for (size_t i = 0; i < offset && i < len; i++) {
		if (data[i] == '\n') {
			m.line++;
			m.column = 0;
		} else if (((unsigned char)data[i] & 0xc0) != 0x80) {
			m.column++;
		}
	}
	return m;
}

static int syntax_fail(struct spec_ctx *c, const yaml_parser_t *p,
		       const char *data, size_t len)
{
	if (p->error == YAML_MEMORY_ERROR)
		return file_fail(c, -ENOMEM, "out of memory");
	yaml_mark_t m = p->problem_mark;
	if (p->error == YAML_READER_ERROR)
		m = mark_at(data, len, p->problem_offset);
	const char *problem = p->problem ? p->problem : "bad YAML";
	const char *tab = !strstr(problem, "tab") && spec_tab_at(data, len, &m)
	    ? " (a tab: YAML indents with spaces only)"
	    : "";
	yaml_mark_t cm = p->context_mark;
	if (p->error == YAML_READER_ERROR || !p->context ||
	    (cm.line == m.line && cm.column == m.column))
		return mark_fail(c, m, "%s%s", problem, tab);
	if (spec_context_opens(p->context))
		return mark_fail(c, cm,
				 "%s%s, %s that starts here (gave up at "
				 "%zu:%zu)",
				 problem, tab, p->context, m.line + 1,
				 m.column + 1);
	return mark_fail(c, m, "%s%s, %s that starts at %zu:%zu", problem, tab,
			 p->context, cm.line + 1, cm.column + 1);
}

/* Loads the first document into doc; a second one is refused. */
static int load_document(struct spec_ctx *c, yaml_parser_t *p,
			 yaml_document_t *doc, const char *data, size_t len)
{
	if (!yaml_parser_load(p, doc))
		return syntax_fail(c, p, data, len);
	yaml_document_t more;
	int rc = 0;
	if (!yaml_parser_load(p, &more)) {
		rc = syntax_fail(c, p, data, len);
		goto delete_doc;
	}
	const yaml_node_t *extra = yaml_document_get_root_node(&more);
	if (extra)
		rc = spec_fail(c, extra, "expected a single YAML document");
	yaml_document_delete(&more);
	if (rc == 0)
		return 0;
delete_doc:
	yaml_document_delete(doc);
	return rc;
}

/* libyaml registers an anchor by comparing it with every earlier one, and
 * resolves an alias the same way; its scanner also does work in the
 * nesting depth for every token, so a file of nothing but '[' costs time
 * quadratic in its size. One pass over the events counts anchors, aliases
 * and depth and stops at the caps before any document is built. A syntax
 * error ends the count; the load then reports the first problem in the
 * file. */
static int count_anchors(struct spec_ctx *c, const char *data, size_t len)
{
	yaml_parser_t p;
	size_t anchors = 0, aliases = 0, depth = 0;
	int rc = 0;
	if (!yaml_parser_initialize(&p))
		return file_fail(c, -ENOMEM, "out of memory");
	yaml_parser_set_input_string(&p, (const unsigned char *)data, len);
	for (bool end = false; rc == 0 && !end;) {
		yaml_event_t e;
		if (!yaml_parser_parse(&p, &e))
			break;
		const yaml_char_t *anchor = NULL;
		if (e.type == YAML_SCALAR_EVENT)
			anchor = e.data.scalar.anchor;
		else if (e.type == YAML_SEQUENCE_START_EVENT)
			anchor = e.data.sequence_start.anchor;
		else if (e.type == YAML_MAPPING_START_EVENT)
			anchor = e.data.mapping_start.anchor;
		if (anchor && ++anchors > MF_SPEC_ANCHORS_MAX)
			rc = mark_fail(c, e.start_mark,
				       "more than %d YAML anchors",
				       MF_SPEC_ANCHORS_MAX);
		if (e.type == YAML_ALIAS_EVENT &&
		    ++aliases > MF_SPEC_ALIASES_MAX)
			rc = mark_fail(c, e.start_mark,
				       "more than %d YAML aliases",
				       MF_SPEC_ALIASES_MAX);
		if (e.type == YAML_SEQUENCE_START_EVENT ||
		    e.type == YAML_MAPPING_START_EVENT) {
			if (++depth > MF_SPEC_DEPTH_MAX && rc == 0)
				rc = mark_fail(c, e.start_mark,
					       "YAML nested deeper than %d "
					       "levels",
					       MF_SPEC_DEPTH_MAX);
		} else if (e.type == YAML_SEQUENCE_END_EVENT ||
			   e.type == YAML_MAPPING_END_EVENT) {
			depth--;
		}
		end = e.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&e);
	}
	yaml_parser_delete(&p);
	return rc;
}

/* Nodes still to visit while sizing a document; each was counted. */
struct walk {
	int *stack;
	size_t top, cap;
	size_t nodes;
	size_t bytes;
};

/* Counts the node at index, and queues it when it has children. */
static int walk_push(struct spec_ctx *c, struct walk *w, int index)
{
	const yaml_node_t *n = spec_node(c, index);
	if (!n)
		return 0; /* libyaml never leaves a dangling index */
	if (++w->nodes > MF_SPEC_NODES_MAX)
		return spec_fail(c, n,
				 "more than %d YAML nodes once YAML aliases "
				 "are expanded",
				 MF_SPEC_NODES_MAX);
	if (n->type == YAML_SCALAR_NODE) {
		w->bytes += n->data.scalar.length;
		if (w->bytes > MF_SPEC_SCALAR_BYTES_MAX)
			return spec_fail(c, n,
					 "more than %u bytes of text once "
					 "YAML aliases are expanded",
					 MF_SPEC_SCALAR_BYTES_MAX);
		return 0;
	}
	if (w->top == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 64;
		int *s = realloc(w->stack, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		w->stack = s;
		w->cap = cap;
	}
	w->stack[w->top++] = index;
	return 0;
}

/*
 * Sizes the document as if every alias were a copy of the node it names
 * (libyaml's document shares that node), as the key handlers and the
 * fingerprint would see it, and stops at the caps before any of that
 * work. The stack is explicit and every entry was counted first, so depth
 * costs no C stack, memory stays within the node cap and an alias of its
 * own ancestor runs into the cap.
 */
static int check_expanded(struct spec_ctx *c)
{
	struct walk w = {0};
	int rc = walk_push(c, &w, 1); /* the root */
	while (rc == 0 && w.top > 0) {
		const yaml_node_t *n = spec_node(c, w.stack[--w.top]);
		if (n->type == YAML_SEQUENCE_NODE) {
			for (yaml_node_item_t *i = n->data.sequence.items.start;
			     rc == 0 && i < n->data.sequence.items.top; i++)
				rc = walk_push(c, &w, *i);
			continue;
		}
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
		     rc == 0 && p < n->data.mapping.pairs.top; p++) {
			rc = walk_push(c, &w, p->key);
			if (rc == 0)
				rc = walk_push(c, &w, p->value);
		}
	}
	free(w.stack);
	return rc;
}

static int parse_text(struct spec_ctx *c, const char *data, size_t len)
{
	yaml_parser_t p;
	yaml_document_t doc;
	int rc = count_anchors(c, data, len);
	if (rc)
		return rc;
	if (!yaml_parser_initialize(&p))
		return file_fail(c, -ENOMEM, "out of memory");
	yaml_parser_set_input_string(&p, (const unsigned char *)data, len);
	rc = load_document(c, &p, &doc, data, len);
	if (rc)
		goto delete_parser;
	c->doc = &doc;
	const yaml_node_t *root = yaml_document_get_root_node(&doc);
	if (!root)
		rc = spec_fail(c, NULL, "the spec is empty");
	if (rc == 0)
		rc = check_expanded(c);
	if (rc == 0)
		rc = parse_root(c, root);
	c->doc = NULL;
	yaml_document_delete(&doc);
delete_parser:
	yaml_parser_delete(&p);
	return rc;
}

/* What opening a spec found, and what the load must undo. */
struct spec_file {
	int fd;
	struct stat st; /* fstat of fd */
	uid_t link_uid; /* owner of the path as given (lstat) */
	char real[PATH_MAX]; /* the file's real path */
	struct trust_links links; /* the symlinks on the way to it */
	struct mf_fscreds creds; /* the thread's own rights, to put back */
};

/* spec->path: the realpath of the folder of the path given, and its file
 * name: a symlinked spec keeps the link's name, as the watcher knows it. */
static int set_path(struct spec_ctx *c, struct mf_spec *s)
{
	const char *slash = strrchr(c->file, '/');
	const char *base = slash ? slash + 1 : c->file;
	char *folder =
	    slash ? strndup(c->file, (size_t)(slash - c->file)) : strdup(".");
	if (!folder)
		return file_fail(c, -ENOMEM, "out of memory");
	char *dir = realpath(folder[0] ? folder : "/", NULL);
	int rc = dir ? 0 : -errno;
	free(folder);
	if (rc)
		return file_fail(c, rc, "cannot resolve its folder: %s",
				 strerror(-rc));
	s->path = spec_join(dir, base);
	free(dir);
	if (!s->path)
		return file_fail(c, -ENOMEM, "out of memory");
	return 0;
}

/* spec->dir, the stages' folder: the folder of the real file, not of a
 * link to it, so that its deps and programs are those beside the file. */
static int set_dir(struct spec_ctx *c, struct mf_spec *s, const char *real)
{
	const char *slash = strrchr(real, '/');
	s->dir =
	    slash == real ? strdup("/") : strndup(real, (size_t)(slash - real));
	return s->dir ? 0 : file_fail(c, -ENOMEM, "out of memory");
}

/* Opens the spec for reading with the rights of the owner of the path
 * given (a symlink's owner, when it is one): resolved here link by link,
 * the real path then opened without following one, so a link swapped in
 * meanwhile is refused (ELOOP); anything but a regular file is refused
 * before it is opened, and O_NONBLOCK keeps a FIFO swapped in after that
 * check from blocking. A user's link to a file only root may read fails
 * here (EACCES), before a byte of it is read. */
static int open_spec(struct spec_ctx *c, struct spec_file *f)
{
	struct stat lst;
	if (lstat(c->file, &lst) != 0)
		return file_fail(c, -errno, "cannot open: %s", strerror(errno));
	f->link_uid = lst.st_uid;
	int rc = trust_enter(lst.st_uid, lst.st_gid, &f->creds);
	if (rc)
		return file_fail(c, rc, "cannot take its owner's rights: %s",
				 strerror(-rc));
	rc = set_path(c, c->spec);
	if (rc)
		return rc;
	rc = trust_resolve(c->file, f->real, &f->links);
	if (rc)
		return file_fail(c, rc, "cannot open: %s", strerror(-rc));
	if (lstat(f->real, &f->st) != 0)
		return file_fail(c, -errno, "cannot open: %s", strerror(errno));
	if (!S_ISREG(f->st.st_mode))
		return file_fail(c, -EINVAL, "not a regular file");
	f->fd = open(f->real,
		     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (f->fd < 0)
		return file_fail(c, -errno, "cannot open: %s", strerror(errno));
	if (fstat(f->fd, &f->st) != 0)
		return file_fail(c, -errno, "cannot stat: %s", strerror(errno));
	if (!S_ISREG(f->st.st_mode))
		return file_fail(c, -EINVAL, "not a regular file");
	return 0;
}

/* The ownership rules (docs/security.md): the spec's owner decides whom
 * its stages run as (the runner); a process that is not root runs no
 * other user's spec; every symlink on the way and every folder on the
 * real path belong to root or the runner, and nobody else may write them,
 * the spec or the stages' folder. The thread then has the real owner's
 * rights for the rest of the load. */
static int check_owner(struct spec_ctx *c, struct spec_file *f)
{
	char who[TRUST_USER_TEXT], me[TRUST_USER_TEXT];
	uid_t owner = f->st.st_uid, self = geteuid();
	uid_t runner = trust_runner(owner);
	if (self != 0 && owner != 0 && owner != self)
		return file_fail(
		    c, -EPERM,
		    "%s: owned by %s, but this process runs as %s and would "
		    "run that user's code as itself: refused "
		    "(docs/security.md, ownership)",
		    f->real, trust_user_text(owner, who, sizeof(who)),
		    trust_user_text(self, me, sizeof(me)));
	char *why = NULL;
	int rc = trust_check_links(&f->links, runner, f->real, owner, &why);
	if (rc == 0 && f->link_uid != owner) {
		mf_fscreds_leave(&f->creds);
		rc = trust_enter(owner, f->st.st_gid, &f->creds);
		if (rc)
			return file_fail(c, rc,
					 "cannot take its owner's rights: %s",
					 strerror(-rc));
	}
	struct stat now;
	/* the stages' folder too: sticky or not, nobody else may add a
	 * file where they run (a module a program would import) */
	if (rc == 0)
		rc = trust_check_real(c->spec->dir, runner, true, NULL, &why);
	if (rc == 0)
		rc = trust_check_real(f->real, runner, false, &now, &why);
	if (rc == 0 &&
	    (now.st_dev != f->st.st_dev || now.st_ino != f->st.st_ino))
		rc = file_fail(c, -EAGAIN, "changed while it was examined");
	else if (rc)
		rc = why ? file_fail(c, rc, "%s", why) : rc;
	free(why);
	return rc;
}

/* Reads the whole spec (at most MF_SPEC_FILE_MAX bytes) into a
 * NUL-terminated buffer. */
static int read_text(struct spec_ctx *c, int fd, char **data, size_t *len)
{
	char *buf = malloc(MF_SPEC_FILE_MAX + 1);
	if (!buf)
		return file_fail(c, -ENOMEM, "out of memory");
	int rc = 0;
	ssize_t n = mf_pread_full(fd, buf, MF_SPEC_FILE_MAX + 1, 0);
	if (n < 0)
		rc = file_fail(c, (int)n, "cannot read: %s", strerror((int)-n));
	else if (n > MF_SPEC_FILE_MAX)
		rc = file_fail(c, -EFBIG, "larger than %u bytes",
			       MF_SPEC_FILE_MAX);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	char *fit = realloc(buf, (size_t)n + 1);
	*data = fit ? fit : buf;
	*len = (size_t)n;
	return 0;
}

/* Each stage's program, and the identity command's, found as a run will
 * find it, passes the ownership rules. One not found or not executable is the run's to report
 * (mf_job_start): a spec may name a program installed later. */
static int check_program(struct spec_ctx *c, const char *what,
			 const char *argv0)
{
	const struct mf_spec *s = c->spec;
	char *prog = NULL, *why = NULL;
	int rc = trust_program(s, what, argv0, &prog, &why);
	free(why);
	why = NULL;
	if (rc == -ENOENT || rc == -EACCES)
		return 0;
	if (rc == 0)
		rc = trust_check_path(prog, trust_runner(s->owner_uid), false,
				      &why);
	if (rc && why)
		rc = file_fail(c, rc, "%s: %s", what, why);
	free(why);
	free(prog);
	return rc;
}

static int check_programs(struct spec_ctx *c)
{
	const struct mf_spec *s = c->spec;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < s->n_stages; i++) {
		char what[32];
		snprintf(what, sizeof(what), "stage %zu", i);
		rc = check_program(c, what, s->stages[i].argv[0]);
	}
	if (rc == 0 && s->identity_argv)
		rc = check_program(c, "identity", s->identity_argv[0]);
	return rc;
}

static int set_defaults(struct mf_spec *s, const struct stat *st)
{
	s->identity = MF_IDENTITY_STAT;
	s->codec = MF_CODEC_ZSTD;
	s->level = MF_ZSTD_DEFAULT_LEVEL;
	s->compression_adapt = true;
	s->chunk_size = MF_SPEC_CHUNK_DEFAULT;
	s->expire_after = -1;
	s->pending_expiry = MF_SPEC_PENDING_DEFAULT;
	s->keep = 0;
	s->owner_uid = st->st_uid;
	s->owner_gid = st->st_gid;
	s->suffix = strdup("");
	return s->suffix ? 0 : -ENOMEM;
}

int mf_spec_load(const char *path, struct mf_spec **out, char **err)
{
	struct spec_ctx c = {.file = path};
	struct spec_file f = {.fd = -1};
	char *data = NULL;
	size_t len = 0;
	int rc = -ENOMEM;
	struct mf_spec *s = calloc(1, sizeof(*s));
	if (!s) {
		rc = file_fail(&c, -ENOMEM, "out of memory");
		goto report;
	}
	c.spec = s;
	rc = open_spec(&c, &f);
	if (rc == 0)
		rc = set_dir(&c, s, f.real);
	if (rc == 0)
		rc = check_owner(&c, &f);
	if (rc == 0)
		rc = read_text(&c, f.fd, &data, &len);
	if (rc == 0)
		rc = set_defaults(s, &f.st);
	if (rc == 0)
		rc = parse_text(&c, data, len);
	if (rc == 0)
		rc = check_programs(&c);
	if (f.fd >= 0)
		close(f.fd);
	trust_links_release(&f.links);
	mf_fscreds_leave(&f.creds);
	if (rc) {
		free(data);
		goto free_spec;
	}
	s->text = data;
	s->text_len = len;
	*out = s;
	if (err)
		*err = NULL;
	return 0;
free_spec:
	mf_spec_free(s);
report:
	if (rc == -ENOMEM && !c.err)
		file_fail(&c, rc, "out of memory");
	if (err)
		*err = c.err;
	else
		free(c.err);
	return rc;
}

void mf_spec_free(struct mf_spec *spec)
{
	if (!spec)
		return;
	for (size_t i = 0; i < spec->n_stages; i++) {
		struct mf_stage *st = &spec->stages[i];
		mf_strv_free(st->argv, st->argc);
		mf_strv_free(st->deps, st->n_deps);
		mf_strv_free(st->deps_rel, st->n_deps);
		mf_strv_free(st->dep_items, st->n_dep_items);
		free(st->dep_kinds);
	}
	free(spec->stages);
	free(spec->path);
	free(spec->dir);
	free(spec->name);
	mf_strv_free(spec->input_globs, spec->n_globs);
	mf_strv_free(spec->inputs, spec->n_inputs);
	mf_strv_free(spec->inputs_rel, spec->n_inputs);
	free(spec->suffix);
	free(spec->fingerprint_key);
	mf_strv_free(spec->identity_argv, spec->identity_argc);
	for (size_t i = 0; i < spec->n_env; i++) {
		free(spec->env[i].name);
		free(spec->env[i].value);
	}
	free(spec->env);
	free(spec->input_shard);
	free(spec->text);
	free(spec);
}

int mf_spec_shard_inputs(const struct mf_spec *spec, uint32_t shard,
			 const char ***paths, size_t *n)
{
	if (!spec || spec->shards == 0 || shard >= spec->shards)
		return -EINVAL;
	size_t count = 0;
	for (size_t j = 0; j < spec->n_inputs; j++)
		count += mf_spec_input_shard(spec, j) == shard;
	const char **v = calloc(count ? count : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	size_t k = 0;
	for (size_t j = 0; j < spec->n_inputs; j++)
		if (mf_spec_input_shard(spec, j) == shard)
			v[k++] = spec->inputs[j];
	*paths = v;
	*n = k;
	return 0;
}
