/*
 * spec_i.h - private to the spec loader (spec.c, spec_keys.c, spec_env.c,
 * spec_files.c), its watch list (spec_watch.c), the fingerprint
 * (fingerprint.c) and the identity command (spec_identity.c): the parse context, the caps, the error helpers, typed
 * readers of YAML nodes, the handlers of each key and the path helpers.
 *
 * Not for: anything outside pipeline/; the public contract is
 * mf_pipeline.h.
 */
#ifndef MF_SPEC_I_H
#define MF_SPEC_I_H

#include <stdbool.h>
#include <stdint.h>
#include <yaml.h>

#include "mf_pipeline.h"

/* Mirrors MF_CHUNK_SIZE_MIN / MF_CHUNK_SIZE_MAX of mf_snapshot.h, which this
 * module may not include (pipeline depends on util only); the tests check
 * that the two agree. */
#define MF_SPEC_CHUNK_MIN 4096ULL
#define MF_SPEC_CHUNK_MAX (1ULL << 30)
#define MF_SPEC_CHUNK_DEFAULT (4ULL << 20)
#define MF_SPEC_PENDING_DEFAULT 86400
#define MF_SPEC_SUFFIX_MAX 32
#define MF_SPEC_FILE_MAX (1U << 20) /* larger spec files are refused */

/* Caps that keep loading a spec bounded in time and memory whatever its
 * author writes (docs/spec.md, "Limits"). YAML aliases point at shared
 * nodes: the node and byte caps count every use of an alias in full, so a
 * small file cannot stand for a huge one. libyaml looks anchors up
 * linearly, hence caps on anchors and aliases too. */
#define MF_SPEC_ANCHORS_MAX 1000
#define MF_SPEC_DEPTH_MAX 64 /* nesting of sequences and mappings */
#define MF_SPEC_ALIASES_MAX 10000
#define MF_SPEC_NODES_MAX 100000 /* with aliases expanded */
#define MF_SPEC_SCALAR_BYTES_MAX (1U << 20) /* with aliases expanded */
#define MF_SPEC_STAGES_MAX 64
#define MF_SPEC_ARGV_MAX 1024 /* words of one stage's exec */
#define MF_SPEC_DEPS_MAX 1000 /* items of one stage's deps */
/* Files of one stage's deps once its globs and folders are expanded, the
 * entries its folders may hold (the skipped ones too), and how deep. */
#define MF_SPEC_DEP_FILES_MAX 100000
#define MF_SPEC_DEP_ENTRIES_MAX 1000000
#define MF_SPEC_DEP_DEPTH_MAX 128
#define MF_SPEC_GLOBS_MAX 1000
#define MF_SPEC_MATCHES_MAX 1000000 /* files matched, over every glob */
#define MF_SPEC_ENV_MAX 64 /* variables in 'env' */
#define MF_SPEC_ENV_NAME_MAX 128
#define MF_SPEC_ENV_VALUE_MAX 4096
#define MF_SPEC_MEMORY_MIN (1ULL << 20)
#define MF_SPEC_NICE_MAX 19

/* One load. Owns nothing but err; spec is filled as keys are parsed. */
struct spec_ctx {
	const char *file; /* the path as the caller gave it */
	yaml_document_t *doc;
	struct mf_spec *spec;
	const yaml_node_t *shards_node; /* the 'shards' value, if given */
	const yaml_node_t *assign_node; /* the 'assign' value, if given */
	const yaml_node_t *window_node; /* 'shuffle_window', if given */
	char *err; /* the one-line message, once something failed */
};

/*
 * Records "FILE:LINE:COLUMN: message" for node at (or 1:1 when at is NULL)
 * in c->err and returns -EINVAL (-ENOMEM when the message cannot be built).
 * Control characters in the message are shown as '?', so it stays one line.
 */
int spec_fail(struct spec_ctx *c, const yaml_node_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The node at a document index (items and pairs hold indexes). */
const yaml_node_t *spec_node(const struct spec_ctx *c, int index);

/* True for a plain scalar that YAML reads as null: "", ~, null. */
bool spec_is_null(const yaml_node_t *n);

/* A scalar that is not null and holds no NUL byte, as a C string; or NULL
 * (without failing) when n is anything else. Borrowed from the document. */
const char *spec_scalar(const yaml_node_t *n);

/* key as an error message may show it: a word of A-Z a-z 0-9 _ . - in
 * single quotes, cut after 16 bytes with "...", written into buf (at least
 * 24 bytes); anything else is not shown, so that the content of a file
 * that is not a spec never reaches a message. Returns buf or a constant
 * text. */
#define SPEC_QUOTABLE_SIZE 24
const char *spec_quotable(const char *key, char *buf, size_t size);

/* Typed readers: each fails with "'KEY': expected ..." on the wrong type. */
int spec_get_string(struct spec_ctx *c, const char *key, const yaml_node_t *n,
		    char **out);
int spec_get_uint(struct spec_ctx *c, const char *key, const yaml_node_t *n,
		  bool positive, uint64_t max, uint64_t *out);
int spec_get_duration(struct spec_ctx *c, const char *key, const yaml_node_t *n,
		      int64_t *out);

/* One key of a mapping: its handler gets the value and the caller's arg. */
struct spec_key {
	const char *name;
	int (*parse)(struct spec_ctx *c, const yaml_node_t *v, void *arg);
	bool required;
};

/*
 * Runs the handler of every pair of map (a mapping node) in document order.
 * Fails at the key with "unknown key 'K'" (K as spec_quotable shows it,
 * with "; did you mean 'KEY'?" when a known key is that near) or
 * "duplicate key 'K'", and at the
 * mapping's start with "missing required key 'K'" (at most 32 keys).
 */
int spec_parse_mapping(struct spec_ctx *c, const yaml_node_t *map,
		       const struct spec_key *keys, size_t n_keys, void *arg);

/* Hints (spec_hint.c). The known key within one or two edits of name
 * (a typo), the nearest first; NULL when none is that near. */
const char *spec_nearest_key(const char *name, const struct spec_key *keys,
			     size_t n_keys);
/* True when a tab is at mark m of data, or among the blanks before it on
 * its line: then a tab is what YAML choked on. */
bool spec_tab_at(const char *data, size_t len, const yaml_mark_t *m);
/* True for a libyaml error context that a closing quote or bracket ends
 * ("while parsing a flow sequence"): the construct it opens is at fault,
 * not where the parser gave up. */
bool spec_context_opens(const char *context);

/* Top-level key handlers (spec_keys.c); arg is unused. */
int spec_parse_name(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_shards(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_identity(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_assign(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_stages(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_suffix(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_compression(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_compression_adapt(struct spec_ctx *c, const yaml_node_t *v,
				 void *arg);
int spec_parse_chunk_size(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_expire_after(struct spec_ctx *c, const yaml_node_t *v,
			    void *arg);
int spec_parse_pending_expiry(struct spec_ctx *c, const yaml_node_t *v,
			      void *arg);
int spec_parse_keep(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_fingerprint(struct spec_ctx *c, const yaml_node_t *v, void *arg);
/* `identity`: the argv of the command whose output enters the
 * fingerprint. */
int spec_parse_identity_exec(struct spec_ctx *c, const yaml_node_t *v,
			     void *arg);
/* `records` and `shuffle_window` (spec_records.c). */
int spec_parse_records(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_shuffle_window(struct spec_ctx *c, const yaml_node_t *v,
			      void *arg);
/* The checks between them once every key is read: shuffle_window needs
 * records, and gets its default with them. */
int spec_records_resolve(struct spec_ctx *c);
/* The largest fixed record, and the bounds of shuffle_window. */
#define MF_SPEC_RECORD_MAX (1ULL << 30)
#define MF_SPEC_WINDOW_MAX (1ULL << 40)

/* What a stage's processes get (spec_env.c): the spec's 'env' (arg
 * unused); a stage's 'memory' and 'nice' (arg: its struct mf_stage *). */
int spec_parse_env(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_memory(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_nice(struct spec_ctx *c, const yaml_node_t *v, void *arg);

/* Files (spec_files.c): inputs expanded with glob(3) (arg unused); the
 * deps of the stage arg (a struct mf_stage *): files, globs and folders,
 * expanded into its files. */
int spec_parse_inputs(struct spec_ctx *c, const yaml_node_t *v, void *arg);
int spec_parse_deps(struct spec_ctx *c, const yaml_node_t *v, void *arg);

/* True when a deps item or a path component is a glob: it holds one of
 * '*', '?', '[' or a '\\' escape. */
bool spec_is_pattern(const char *s);

/* Whether a folder dep leaves out the entry called name: a hidden one
 * (a leading '.', as a glob's '*' does) or Python's bytecode cache
 * __pycache__, which an import from the folder writes. */
bool spec_dep_skipped(const char *name);

/*
 * Runs spec's `identity` command (spec_identity.c) as its stages run
 * (docs/spec.md, "identity"): as the spec's owner under a root process,
 * with the stages' clean environment without MATFS_*, in the spec folder,
 * stdin /dev/null, in a session and process group of its own that is
 * killed whatever happens, for at most MF_IDENTITY_TIMEOUT_S seconds (or
 * until the calling thread's deadline, mf_deadline_set) and
 * MF_IDENTITY_OUTPUT_MAX bytes of stdout. Returns 0 with *out (malloc'd,
 * *len bytes, NUL-terminated) its standard output once it ended and the
 * command exited 0; or -errno with *err (malloc'd) saying why, the
 * command not named: -ENOENT / -EACCES / -EPERM for its program (not
 * found, not executable, refused by the ownership rules), -EIO "exited
 * with status 3: LAST LINE OF STDERR", -ETIME past its own bound,
 * -ETIMEDOUT past the thread's deadline, -EFBIG, -ENOMEM.
 * Call it with the thread's own rights; it takes the owner's to find the
 * program.
 */
int spec_identity_run(const struct mf_spec *spec, char **out, size_t *len,
		      char **err);

/* dir + "/" + rel, malloc'd (dir "/" gives "/rel"); NULL when out of
 * memory. */
char *spec_join(const char *dir, const char *rel);

/* rel without "." components and repeated or trailing slashes ("./raw//a"
 * -> "raw/a"; ".." is kept), malloc'd; NULL when out of memory. */
char *spec_clean_rel(const char *rel);

#endif
