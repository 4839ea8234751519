/*
 * matctl.h - what the matctl command files share: the parsed command line
 * and the output helpers. Private to tools/.
 */
#ifndef MATCTL_H
#define MATCTL_H

#include <stdbool.h>
#include <stdio.h>

#include "mf_catalog.h"
#include "mf_engine.h"
#include "mf_pipeline.h"
#include "mf_snapshot.h"

struct ctl {
	const char *store; /* --store, else the one found (main) */
	const char *catalog; /* --catalog, or NULL: the store's own */
	bool json; /* --json */
	bool explain; /* --explain */
	unsigned jobs; /* -j N */
	bool rebuild; /* --rebuild */
	const char *older_than; /* --older-than DURATION */
	bool follow; /* log -f */
	bool prometheus; /* stats --prometheus */
	bool force; /* rm --force */
	const char *seed, *epoch, *rank; /* batches --seed, --epoch, --rank */
	int argc; /* operands after the command */
	char **argv;
	struct mf_engine *engine; /* opened on demand by ctl_engine */
};

/* Prints "matctl: MESSAGE" to stderr. */
void ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The engine's notes (mf_engine_opts.note), as "matctl: MSG" on stderr. */
void ctl_note(void *arg, const char *msg);

/* Opens the engine once; prints the error and returns NULL on failure. */
struct mf_engine *ctl_engine(struct ctl *ctl);

/* Resolves argv[i] (FP, NAME or SPEC) into fp, printing the error. */
int ctl_resolve(struct ctl *ctl, const char *what, char fp[65]);

/* The store of the live matfs mounts made by the caller or by root whose
 * root's user.matfs.store confirms it (matctl_obs.c): 0 with *store
 * (caller frees) when they serve one store; -ENOENT when there is none;
 * -ENOTUNIQ when they serve several, with *list "MNT (store DIR), ..."
 * (caller frees); -ENOMEM. */
int ctl_mounted_store(char **store, char **list);

/* Writes s as a JSON string literal, quotes included. */
void json_str(FILE *f, const char *s);

/* "3m ago", "never", ... for a unix time. */
void ctl_age(long long t, long long now, char *buf, size_t len);

int cmd_ls(struct ctl *ctl);
int cmd_stat(struct ctl *ctl);
int cmd_warm(struct ctl *ctl);
int cmd_fsck(struct ctl *ctl);
int cmd_expire(struct ctl *ctl);
int cmd_log(struct ctl *ctl);
int cmd_stats(struct ctl *ctl);
int cmd_batches(struct ctl *ctl);

#endif
