/*
 * matctl.c - the management command: argument parsing, finding the store
 * (docs/matctl.md, "Which store"), and the small commands (fingerprint,
 * cat, rm, verify, gc). ls and stat live in matctl_show.c, warm in
 * matctl_warm.c.
 *
 * matctl works with or without a running daemon: everything goes through
 * the engine and the catalog, which other processes share safely.
 * fsck and expire live in matctl_fsck.c, log and stats in matctl_obs.c.
 */
#include "matctl.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mf_config.h"

/* Messages quote what stages wrote (their errors, stderr lines): shown
 * cleaned, as the daemon's log is, never as escapes to the terminal. */
void ctl_err(const char *fmt, ...)
{
	va_list ap;
	char *msg = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n < 0) {
		fputs("matctl: out of memory\n", stderr);
		return;
	}
	mf_text_clean(msg, false);
	fprintf(stderr, "matctl: %s\n", msg);
	free(msg);
}

void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;
	     p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else if (*p == '\t')
			fputs("\\t", f);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else if (*p == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0)
			fprintf(f, "\\u%04x", *++p); /* C1, a terminal's too */
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

void ctl_age(long long t, long long now, char *buf, size_t len)
{
	if (t <= 0) {
		snprintf(buf, len, "never");
		return;
	}
	long long d = now - t;
	if (d < 0)
		d = 0;
	if (d < 120)
		snprintf(buf, len, "%llds ago", d);
	else if (d < 7200)
		snprintf(buf, len, "%lldm ago", d / 60);
	else if (d < 172800)
		snprintf(buf, len, "%lldh ago", d / 3600);
	else
		snprintf(buf, len, "%lldd ago", d / 86400);
}

void ctl_note(void *arg, const char *msg)
{
	(void)arg;
	fprintf(stderr, "matctl: %s\n", msg);
}

struct mf_engine *ctl_engine(struct ctl *ctl)
{
	if (ctl->engine)
		return ctl->engine;
	struct mf_engine_opts o = {
	    .store_dir = ctl->store, .catalog = ctl->catalog, .note = ctl_note};
	char *err = NULL;
	int rc = mf_engine_open(&o, &ctl->engine, &err);
	if (rc) {
		ctl_err("%s", err ? err : strerror(-rc));
		free(err);
		return NULL;
	}
	return ctl->engine;
}

int ctl_resolve(struct ctl *ctl, const char *what, char fp[65])
{
	struct mf_engine *e = ctl_engine(ctl);
	if (!e)
		return -EIO;
	char *err = NULL;
	int rc = mf_engine_resolve(e, what, fp, &err);
	if (rc)
		ctl_err("%s", err ? err : strerror(-rc));
	free(err);
	return rc;
}

static int cmd_fingerprint(struct ctl *ctl)
{
	struct mf_spec *spec;
	char *err = NULL;
	int rc = mf_spec_load(ctl->argv[0], &spec, &err);
	if (rc == 0) {
		struct mf_fingerprint fp;
		rc = mf_fingerprint_compute(spec, &fp, &err);
		if (rc == 0) {
			printf("%s\n", fp.hex);
			for (size_t i = 0; ctl->explain && i < fp.n_parts; i++)
				printf("  %s  %s%s%s\n", fp.parts[i].hex,
				       fp.parts[i].label,
				       fp.parts[i].detail ? "  " : "",
				       fp.parts[i].detail ? fp.parts[i].detail
							  : "");
			if (ctl->explain)
				printf("shard fingerprints:\n");
			for (uint32_t k = 0;
			     ctl->explain && rc == 0 && k < spec->shards; k++) {
				char hex[MF_FP_HEX_LEN + 1];
				rc = mf_fingerprint_shard(spec, &fp, k, hex);
				if (rc == 0)
					printf("  %s  shard[%u]\n", hex, k);
			}
			mf_fingerprint_release(&fp);
		}
		mf_spec_free(spec);
	}
	if (rc)
		ctl_err("%s", err ? err : strerror(-rc));
	free(err);
	return rc ? 1 : 0;
}

/* "3", "00003", "shard-00003" or "shard-00003.bin" */
static int parse_shard(const char *s, uint32_t *out)
{
	if (strncmp(s, "shard-", 6) == 0)
		s += 6;
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (end == s || errno || v > UINT32_MAX || (*end && *end != '.'))
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int cmd_cat(struct ctl *ctl)
{
	char fp[65];
	uint32_t shard;
	if (parse_shard(ctl->argv[1], &shard)) {
		ctl_err("bad shard '%s': expected an index like 3 or "
			"shard-00003",
			ctl->argv[1]);
		return 2;
	}
	if (ctl_resolve(ctl, ctl->argv[0], fp))
		return 1;
	struct mf_engine_snapshot snap;
	int rc = mf_engine_snapshot(ctl->engine, fp, &snap);
	if (rc == 0 && shard >= snap.shards) {
		ctl_err("cat '%s': no shard %u: the snapshot has %s %u",
			ctl->argv[0], shard,
			snap.shards == 1 ? "only shard" : "shards 0 to",
			snap.shards - 1);
		mf_engine_snapshot_release(&snap);
		return 1;
	}
	if (rc == 0)
		mf_engine_snapshot_release(&snap);
	struct mf_shard_reader *r;
	struct mf_engine_shard rec;
	char *err = NULL;
	rc = mf_engine_open_shard_rec(ctl->engine, fp, shard, &r, &rec, &err);
	if (rc) {
		ctl_err("shard %u of %.12s: %s", shard, fp,
			err ? err : strerror(-rc));
		free(err);
		return 1;
	}
	rc = mf_shard_reader_copy(r, STDOUT_FILENO, 2);
	mf_shard_reader_close(r);
	if (rc == -EBADMSG) /* only the file read: it may be expired since */
		(void)mf_engine_report_corrupt(ctl->engine, fp, shard,
					       rec.generation);
	mf_engine_shard_release(&rec);
	if (rc == -EBADMSG)
		ctl_err("shard %u of %.12s: corrupt in the store (%s); expired "
			"for recomputation",
			shard, fp, mf_corrupt_reason());
	else if (rc)
		ctl_err("shard %u of %.12s: %s", shard, fp, strerror(-rc));
	return rc ? 1 : 0;
}

/* True (and says why) when fp holds materialized shards and cannot be
 * computed again: rm would remove the only copy, so it wants --force. */
static bool only_copy(struct ctl *ctl, const char *what, const char *fp)
{
	struct mf_engine_snapshot snap;
	if (mf_engine_snapshot(ctl->engine, fp, &snap) != 0)
		return false;
	uint32_t kept = snap.materialized;
	mf_engine_snapshot_release(&snap);
	char *why = NULL;
	if (kept == 0 || mf_engine_computable(ctl->engine, fp, &why) == 0)
		return false;
	ctl_err("rm '%s': snapshot %.12s can no longer be computed (%s): its "
		"%u materialized shard%s would be gone for good; matctl rm "
		"--force removes it",
		what, fp, why ? why : "its spec cannot be checked", kept,
		kept == 1 ? "" : "s");
	free(why);
	return true;
}

static int cmd_rm(struct ctl *ctl)
{
	int bad = 0;
	for (int i = 0; i < ctl->argc; i++) {
		char fp[65];
		if (mf_is_hex(ctl->argv[i], MF_FP_HEX_LEN)) {
			if (!ctl_engine(ctl))
				return 1;
			memcpy(fp, ctl->argv[i], sizeof(fp));
		} else if (ctl_resolve(ctl, ctl->argv[i], fp)) {
			bad = 1;
			continue;
		}
		if (!ctl->force && only_copy(ctl, ctl->argv[i], fp)) {
			bad = 1;
			continue;
		}
		int rc = mf_engine_expire_snapshot(ctl->engine, fp);
		if (rc == -ENOENT) {
			ctl_err("rm '%s': no snapshot %s in the catalog or the "
				"store",
				ctl->argv[i], fp);
			bad = 1;
		} else if (rc == -EBUSY) {
			ctl_err("rm '%s': a shard is being computed (%s): "
				"the others expired; rm again once it lands",
				ctl->argv[i], strerror(EBUSY));
			bad = 1;
		} else if (rc) {
			ctl_err("rm '%s': %s", ctl->argv[i], strerror(-rc));
			bad = 1;
		} else {
			printf("expired %s\n", fp);
		}
	}
	return bad;
}

/* Forgets the failures of a snapshot's failed shards (expired: absent
 * again), so the next open computes them at once instead of answering
 * their error while a daemon backs off (docs/guide.md). */
static int cmd_retry(struct ctl *ctl)
{
	char fp[65];
	if (ctl_resolve(ctl, ctl->argv[0], fp))
		return 1;
	struct mf_engine_shard *v;
	size_t n, retried = 0;
	int rc = mf_engine_list_shards(ctl->engine, fp, &v, &n), bad = 0;
	if (rc) {
		ctl_err("retry '%s': %s", ctl->argv[0], strerror(-rc));
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		if (v[i].state != MF_ENGINE_FAILED)
			continue;
		rc = mf_engine_expire_shard(ctl->engine, fp, v[i].index);
		if (rc && rc != -ENOENT && rc != -EBUSY) {
			ctl_err("retry '%s': shard %u: %s", ctl->argv[0],
				v[i].index, strerror(-rc));
			bad = 1;
		} else if (rc == 0) {
			retried++;
		}
	}
	mf_engine_shard_recs_free(v, n);
	printf("%zu failed shard%s of %.12s to compute again on the next "
	       "open\n",
	       retried, retried == 1 ? "" : "s", fp);
	return bad;
}

static void verify_report(void *arg, uint32_t shard, int rc)
{
	(void)arg;
	if (rc == 0)
		printf("shard %u: ok\n", shard);
	else if (rc == -EBADMSG)
		printf("shard %u: corrupt (%s): expired, the next read "
		       "recomputes it\n",
		       shard, mf_corrupt_reason());
	else
		printf("shard %u: %s\n", shard, strerror(-rc));
}

static int cmd_verify(struct ctl *ctl)
{
	char fp[65];
	if (ctl_resolve(ctl, ctl->argv[0], fp))
		return 1;
	int rc = mf_engine_verify(ctl->engine, fp, verify_report, NULL);
	if (rc && rc != -EBADMSG)
		ctl_err("verify %.12s: %s", fp, strerror(-rc));
	return rc ? 1 : 0;
}

static int cmd_gc(struct ctl *ctl)
{
	struct mf_engine *e = ctl_engine(ctl);
	if (!e)
		return 1;
	struct mf_gc_stats st;
	int rc = mf_engine_gc(e, &st);
	if (rc) {
		ctl_err("gc: %s", strerror(-rc));
		return 1;
	}
	printf("removed %u snapshot folders, %u run folders, %u shard "
	       "files, %u stale reuse hints\n",
	       st.snapshots_removed, st.runs_removed, st.files_removed,
	       st.hints_removed);
	if (st.shards_adopted || st.snapshots_adopted)
		printf("recorded %u shard files and %u snapshot folders the "
		       "catalog did not know, instead of removing them\n",
		       st.shards_adopted, st.snapshots_adopted);
	if (st.snapshots_unindexed)
		printf("kept %u snapshot folders the catalog does not know: "
		       "`matctl fsck --rebuild` indexes them again, `matctl rm "
		       "FP` removes one\n",
		       st.snapshots_unindexed);
	return 0;
}

static const char usage[] =
    "usage: matctl [--store DIR] [--catalog URL] COMMAND [ARGS] [--json]\n"
    "       matctl --help | --version\n"
    "\n"
    "commands:\n"
    "  ls [--json]                  list snapshots\n"
    "  stat FP|NAME [--json]        state of every shard of a snapshot\n"
    "  fingerprint SPEC [--explain] fingerprint of a spec file\n"
    "  warm SPEC|FP|NAME [-j N]     materialize every shard\n"
    "  cat FP|NAME SHARD            write a shard's bytes to stdout\n"
    "  rm [--force] FP|NAME...      expire snapshots (--force: also one\n"
    "                               that can no longer be computed)\n"
    "  retry FP|NAME                compute failed shards again on the\n"
    "                               next open (no backoff)\n"
    "  verify FP|NAME               check every checksum\n"
    "  gc                           reclaim unreferenced store space\n"
    "  expire [--older-than DURATION] [--json]\n"
    "                               expire as a daemon does: snapshots "
    "not read\n"
    "                               for that long, else past their "
    "expire_after,\n"
    "                               and fingerprints beyond keep\n"
    "  fsck [--rebuild] [--json]    check the store against the catalog;\n"
    "                               --rebuild remakes the catalog from "
    "the store\n"
    "  log [-f]                     the daemon's log file; -f follows "
    "it\n"
    "  batches FP|NAME B --seed S|none --epoch E [--rank R/W] [--json]\n"
    "                               each batch's records as (shard, "
    "record)\n"
    "                               ranges, from the materialized "
    "shards\n"
    "  stats [MOUNTPOINT] [--json|--prometheus]\n"
    "                               the daemons' counters and the "
    "catalog's totals\n"
    "\n"
    "options:\n"
    "  -s, --store DIR              the store; without it MATFS_STORE, "
    "else the\n"
    "                               store of your or root's one matfs "
    "mount,\n"
    "                               else $XDG_CACHE_HOME/matfs or "
    "~/.cache/matfs\n"
    "                               if it exists (only warm SPEC creates "
    "it)\n"
    "  --catalog URL                the catalog (default "
    "sqlite:STORE/catalog.db;\n"
    "                               postgresql://... is the one a "
    "cluster's\n"
    "                               daemons share)\n"
    "  --json                       output for scripts (ls, stat, "
    "expire,\n"
    "                               fsck, batches)\n"
    "  --explain                    fingerprint: every covered component\n"
    "  -j, --jobs N                 warm: shards at once, 1-256 (default "
    "1)\n"
    "  --older-than DURATION        expire: not read for that long (90s, "
    "7d)\n"
    "  --rebuild                    fsck: remake the catalog from the "
    "store\n"
    "  -f, --follow                 log: keep printing what is appended,\n"
    "                               across rotations\n"
    "  --seed S, --epoch E          batches: the order's seed (or none) "
    "and epoch\n"
    "  --rank R/W                   batches: rank R of a world of W\n"
    "  --prometheus                 stats: node_exporter's textfile "
    "format\n"
    "  -h, --help                   this text\n"
    "  -V, --version                the version\n"
    "\n"
    "FP is a fingerprint or a unique prefix of it (8+ hex digits); NAME a\n"
    "pipeline name; SPEC a spec file. An argument with a '/' or ending in\n"
    ".yaml or .yml is a SPEC; any other is a NAME or FP, even where a file\n"
    "of that name exists (./corpus is the file, corpus the pipeline).\n"
    "Options may come before or after the command. See matctl(1).\n";

/* What a command needs of the store before it runs (find_store). */
enum store_use {
	STORE_NONE, /* none: fingerprint */
	STORE_FIND, /* an existing one, found */
	STORE_UNLESS_ARG, /* stats MOUNTPOINT takes the mount's own */
	STORE_MAKE, /* warm SPEC may create the default folder */
};

struct command {
	const char *name;
	int min_args, max_args;
	int (*fn)(struct ctl *ctl);
	enum store_use store;
};

static const struct command commands[] = {
    {"ls", 0, 0, cmd_ls, STORE_FIND},
    {"stat", 1, 1, cmd_stat, STORE_FIND},
    {"fingerprint", 1, 1, cmd_fingerprint, STORE_NONE},
    {"warm", 1, 1, cmd_warm, STORE_MAKE},
    {"cat", 2, 2, cmd_cat, STORE_FIND},
    {"rm", 1, 1000, cmd_rm, STORE_FIND},
    {"retry", 1, 1, cmd_retry, STORE_FIND},
    {"verify", 1, 1, cmd_verify, STORE_FIND},
    {"gc", 0, 0, cmd_gc, STORE_FIND},
    {"expire", 0, 0, cmd_expire, STORE_FIND},
    {"fsck", 0, 0, cmd_fsck, STORE_FIND},
    {"log", 0, 0, cmd_log, STORE_FIND},
    {"stats", 0, 1, cmd_stats, STORE_UNLESS_ARG},
    {"batches", 2, 2, cmd_batches, STORE_FIND},
};

/* The options that only set their field: a flag, or a value kept as
 * given. True when c is one (and its field set). */
static bool take_plain(struct ctl *ctl, int c, const char *arg)
{
	const struct {
		int c;
		bool *flag; /* NULL: value */
		const char **value;
	} plain[] = {
	    {'J', &ctl->json, NULL},	{'F', &ctl->force, NULL},
	    {'E', &ctl->explain, NULL}, {'R', &ctl->rebuild, NULL},
	    {'f', &ctl->follow, NULL},	{'P', &ctl->prometheus, NULL},
	    {'s', NULL, &ctl->store},	{'O', NULL, &ctl->older_than},
	    {'S', NULL, &ctl->seed},	{'e', NULL, &ctl->epoch},
	    {'r', NULL, &ctl->rank},
	};
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		if (plain[i].c != c)
			continue;
		if (plain[i].flag)
			*plain[i].flag = true;
		else
			*plain[i].value = arg;
		return true;
	}
	return false;
}

/* --catalog, with a warning when it carries a password. */
static void take_catalog(struct ctl *ctl, const char *arg)
{
	ctl->catalog = arg;
	if (mf_engine_catalog_has_password(arg))
		ctl_err("warning: catalog '%s' carries a "
			"password, which every user of this "
			"host can read in the process list; "
			"put it in ~/.pgpass, PGPASSFILE or "
			"PGPASSWORD",
			mf_engine_catalog_shown(arg));
}

/* -j: 0, or 2 (said why) when it is not 1 to 256. */
static int take_jobs(struct ctl *ctl, const char *arg)
{
	char *end;
	long v = strtol(arg, &end, 10);
	if (*end || v < 1 || v > 256) {
		ctl_err("bad -j '%s': expected 1-256", arg);
		return 2;
	}
	ctl->jobs = (unsigned)v;
	return 0;
}

static int parse_args(int argc, char **argv, struct ctl *ctl)
{
	static const struct option opts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"catalog", required_argument, NULL, 'C'},
	    {"json", no_argument, NULL, 'J'},
	    {"explain", no_argument, NULL, 'E'},
	    {"jobs", required_argument, NULL, 'j'},
	    {"rebuild", no_argument, NULL, 'R'},
	    {"older-than", required_argument, NULL, 'O'},
	    {"follow", no_argument, NULL, 'f'},
	    {"prometheus", no_argument, NULL, 'P'},
	    {"force", no_argument, NULL, 'F'},
	    {"seed", required_argument, NULL, 'S'},
	    {"epoch", required_argument, NULL, 'e'},
	    {"rank", required_argument, NULL, 'r'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	int c;
	/* Options may stand before or after the command (GNU permutation). */
	while ((c = getopt_long(argc, argv, "s:j:fhV", opts, NULL)) != -1) {
		if (take_plain(ctl, c, optarg))
			continue;
		switch (c) {
		case 'C':
			take_catalog(ctl, optarg);
			break;
		case 'j':
			if (take_jobs(ctl, optarg))
				return 2;
			break;
		case 'h':
			fputs(usage, stdout);
			return -1;
		case 'V':
			printf("matctl %s\n", MF_VERSION);
			return -1;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	return 0;
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/* Whether the command may create the default folder: only warm of a spec
 * file, which a first run has no other way to fill (docs/decisions.md),
 * and only once the file is there, so that a typo creates nothing. 1 it
 * may, 0 it may not, -1 it may not and the message said why. */
static int may_create(const struct command *cmd, const struct ctl *ctl)
{
	struct stat st;
	if (cmd->store != STORE_MAKE || !mf_engine_is_spec_path(ctl->argv[0]))
		return 0;
	int rc = 0;
	if (stat(ctl->argv[0], &st) != 0)
		rc = -errno;
	else if (!S_ISREG(st.st_mode))
		rc = -EINVAL;
	if (rc == 0)
		return 1;
	ctl_err("%s: cannot open: %s (found no store, and made none for it)",
		ctl->argv[0],
		rc == -EINVAL ? "not a regular file" : strerror(-rc));
	return -1;
}

/* Sets ctl->store to the default folder when it exists, or when the
 * command may create it; else says what was not found. 0 or 1. */
static int default_store(const struct command *cmd, struct ctl *ctl, char **own)
{
	struct stat st;
	if (!(*own = mf_engine_default_store())) {
		ctl_err("finding the store: %s", strerror(ENOMEM));
		return 1;
	}
	ctl->store = *own;
	if (stat(*own, &st) == 0)
		return 0;
	int make = may_create(cmd, ctl);
	if (make > 0) {
		ctl_err("no store yet: creating '%s' (name another with "
			"--store DIR or MATFS_STORE=DIR)",
			*own);
		return 0;
	}
	if (make == 0)
		ctl_err("found no store: no --store, no MATFS_STORE, no matfs "
			"mount of yours or root's, and no '%s'; name one with "
			"--store DIR or MATFS_STORE=DIR (matctl warm SPEC "
			"creates '%s')",
			*own, *own);
	return 1;
}

/* Sets ctl->store when --store did not: MATFS_STORE, else the store of the
 * mounts the caller sees (its own or root's), else the default folder.
 * 0, or the exit status after the message; *own is what to free. */
static int find_store(const struct command *cmd, struct ctl *ctl, char **own)
{
	const char *env = getenv("MATFS_STORE");
	char *list = NULL;
	if (ctl->store || cmd->store == STORE_NONE ||
	    (cmd->store == STORE_UNLESS_ARG && ctl->argc > 0))
		return 0;
	if (env && *env) {
		ctl->store = env;
		return 0;
	}
	int rc = ctl_mounted_store(own, &list);
	if (rc == 0) {
		ctl->store = *own;
		return 0;
	}
	if (rc == -ENOENT)
		return default_store(cmd, ctl, own);
	if (rc == -ENOTUNIQ)
		ctl_err("matfs mounts of several stores: %s; name one with "
			"--store DIR or MATFS_STORE=DIR",
			list);
	else
		ctl_err("finding the store: %s", strerror(-rc));
	free(list);
	return 1;
}

int main(int argc, char **argv)
{
	struct ctl ctl = {.jobs = 0};
	int rc = parse_args(argc, argv, &ctl);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (optind >= argc) {
		fputs(usage, stderr);
		return 2;
	}
	const struct command *cmd = find_command(argv[optind]);
	if (!cmd) {
		ctl_err("unknown command '%s'; see matctl --help",
			argv[optind]);
		return 2;
	}
	ctl.argc = argc - optind - 1;
	ctl.argv = argv + optind + 1;
	if (ctl.argc < cmd->min_args || ctl.argc > cmd->max_args) {
		ctl_err("'%s' takes %s; see matctl --help", cmd->name,
			cmd->min_args == cmd->max_args && cmd->min_args == 0
			    ? "no arguments"
			    : "other arguments");
		return 2;
	}
	char *store = NULL;
	rc = find_store(cmd, &ctl, &store);
	if (rc == 0)
		rc = cmd->fn(&ctl);
	mf_engine_close(ctl.engine);
	free(store);
	return rc;
}
