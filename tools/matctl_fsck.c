/*
 * matctl_fsck.c - `matctl fsck [--rebuild]` and `matctl expire
 * [--older-than DURATION]`: the store checked against its catalog, the
 * catalog rebuilt from the store, and snapshots expired by the engine's
 * expiry policy (the daemon's: expire_after, keep), treating what a live
 * daemon serves as registered.
 *
 * fsck opens no engine (the engine cannot open a broken catalog); the
 * engine's fsck and rebuild calls take the store folder instead.
 */
#include "matctl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- fsck ---- */

struct fsck_out {
	struct ctl *ctl;
	uint32_t n;
	FILE *snaps, *skips; /* rebuild --json: the two arrays being built */
	char *snaps_buf, *skips_buf;
	size_t snaps_len, skips_len;
	uint32_t n_snaps, n_skips;
};

/* "STORE/PATH", or null / "" when there is no path. */
static void abs_path(FILE *f, const char *store, const char *rel, bool json)
{
	if (!rel[0]) {
		fputs(json ? "null" : store, f);
		return;
	}
	char *p = NULL;
	if (asprintf(&p, "%s/%s", store, rel) < 0)
		p = NULL;
	if (json)
		json_str(f, p ? p : rel);
	else
		fputs(p ? p : rel, f);
	free(p);
}

/* A JSON string, or null for "". */
static void json_opt(FILE *f, const char *s)
{
	if (s && s[0])
		json_str(f, s);
	else
		fputs("null", f);
}

static void where_json(FILE *f, const char *store, const char *fp,
		       int64_t shard, const char *run, const char *path)
{
	fputs("\"fingerprint\":", f);
	json_opt(f, fp);
	if (shard >= 0)
		fprintf(f, ",\"shard\":%lld", (long long)shard);
	else
		fputs(",\"shard\":null", f);
	fputs(",\"run\":", f);
	json_opt(f, run);
	fputs(",\"path\":", f);
	abs_path(f, store, path, true);
}

static void fsck_report(void *arg, const struct mf_fsck_problem *p)
{
	struct fsck_out *o = arg;
	if (o->ctl->json) {
		fputs(o->n ? ",\n {\"kind\":" : "{\"kind\":", stdout);
		json_str(stdout, mf_fsck_kind_name(p->kind));
		fputc(',', stdout);
		where_json(stdout, o->ctl->store, p->fp, p->shard, p->run,
			   p->path);
		fputs(",\"detail\":", stdout);
		json_str(stdout, p->detail);
		fputc('}', stdout);
	} else {
		printf("%s: ", mf_fsck_kind_name(p->kind));
		abs_path(stdout, o->ctl->store, p->path, false);
		printf(": %s\n", p->detail);
	}
	o->n++;
}

static int fsck_check(struct ctl *ctl)
{
	struct mf_engine_opts opts = {.store_dir = ctl->store,
				      .catalog = ctl->catalog};
	struct fsck_out o = {.ctl = ctl};
	uint32_t n = 0;
	char *err = NULL;
	if (ctl->json)
		fputc('[', stdout);
	int rc = mf_engine_fsck(&opts, fsck_report, &o, &n, &err);
	if (ctl->json)
		fputs("]\n", stdout);
	if (rc) {
		ctl_err("%s", err ? err : strerror(-rc));
		free(err);
		return 1;
	}
	if (ctl->json)
		return n ? 1 : 0;
	if (n == 0) {
		printf("no problems found in store '%s'\n", ctl->store);
		return 0;
	}
	printf("%u problem%s found; fsck changed nothing.\n"
	       "'matctl gc' removes orphans, 'matctl verify FP|NAME' expires "
	       "missing or corrupt shards\nso they are computed again, and "
	       "'matctl fsck --rebuild' rebuilds a broken catalog.\n",
	       n, n == 1 ? "" : "s");
	return 1;
}

/* ---- fsck --rebuild ---- */

static void rebuild_text(struct fsck_out *o, const struct mf_rebuild_item *it)
{
	if (it->kind == MF_REBUILD_SNAPSHOT) {
		printf("recovered snapshot %s %s: %u/%u shards materialized, "
		       "from %u run%s\n",
		       it->name, it->fp, it->materialized, it->shards, it->runs,
		       it->runs == 1 ? "" : "s");
		return;
	}
	fputs("skipped ", stdout);
	abs_path(stdout, o->ctl->store, it->path, false);
	printf(": %s\n", it->detail);
}

static void rebuild_report(void *arg, const struct mf_rebuild_item *it)
{
	struct fsck_out *o = arg;
	if (!o->ctl->json) {
		rebuild_text(o, it);
		return;
	}
	if (it->kind == MF_REBUILD_SNAPSHOT) {
		FILE *f = o->snaps;
		fputs(o->n_snaps++ ? ",\n  {\"name\":" : "{\"name\":", f);
		json_str(f, it->name);
		fprintf(f,
			",\"fingerprint\":\"%s\",\"shards\":%u,"
			"\"materialized\":%u,\"runs\":%u}",
			it->fp, it->shards, it->materialized, it->runs);
		return;
	}
	FILE *f = o->skips;
	fputs(o->n_skips++ ? ",\n  {" : "{", f);
	where_json(f, o->ctl->store, it->fp, it->shard, it->run, it->path);
	fputs(",\"detail\":", f);
	json_str(f, it->detail);
	fputc('}', f);
}

static void rebuild_summary(struct ctl *ctl, struct fsck_out *o,
			    const struct mf_rebuild_stats *st)
{
	char rel[sizeof(st->old_catalog)];
	snprintf(rel, sizeof(rel), "%s", st->old_catalog);
	if (ctl->json) {
		fflush(o->snaps);
		fflush(o->skips);
		fputs("{\"old_catalog\":", stdout);
		abs_path(stdout, ctl->store, rel, true);
		printf(",\"snapshots\":%u,\"shards\":%u,\"runs\":%u,"
		       "\"skipped\":%u,\n \"recovered\":[%s],\n "
		       "\"skipped_items\":[%s]}\n",
		       st->snapshots, st->shards, st->runs, st->skipped,
		       o->snaps_buf ? o->snaps_buf : "",
		       o->skips_buf ? o->skips_buf : "");
		return;
	}
	if (rel[0])
		printf("moved the old catalog aside to %s/%s (kept, never "
		       "deleted)\n",
		       ctl->store, rel);
	else
		printf("there was no old catalog to move aside\n");
	printf("rebuilt the catalog of '%s': %u snapshot%s, %u shard%s from "
	       "%u run%s; %u item%s skipped\n",
	       ctl->store, st->snapshots, st->snapshots == 1 ? "" : "s",
	       st->shards, st->shards == 1 ? "" : "s", st->runs,
	       st->runs == 1 ? "" : "s", st->skipped,
	       st->skipped == 1 ? "" : "s");
}

static int fsck_rebuild(struct ctl *ctl)
{
	struct mf_engine_opts opts = {.store_dir = ctl->store,
				      .catalog = ctl->catalog};
	struct fsck_out o = {.ctl = ctl};
	struct mf_rebuild_stats st;
	char *err = NULL;
	int rc = 0;
	if (ctl->json) {
		o.snaps = open_memstream(&o.snaps_buf, &o.snaps_len);
		o.skips = open_memstream(&o.skips_buf, &o.skips_len);
		rc = o.snaps && o.skips ? 0 : -ENOMEM;
	}
	if (rc == 0)
		rc = mf_engine_rebuild(&opts, rebuild_report, &o, &st, &err);
	if (rc == 0)
		rebuild_summary(ctl, &o, &st);
	else
		ctl_err("%s", err ? err : strerror(-rc));
	if (o.snaps)
		fclose(o.snaps);
	if (o.skips)
		fclose(o.skips);
	free(o.snaps_buf);
	free(o.skips_buf);
	free(err);
	return rc ? 1 : 0;
}

int cmd_fsck(struct ctl *ctl)
{
	return ctl->rebuild ? fsck_rebuild(ctl) : fsck_check(ctl);
}

/* ---- expire ---- */

/* The fingerprints live daemons serve (their holds): what the expiry
 * policy must treat as registered, as each of those daemons does. */
struct held {
	char (*v)[MF_FP_HEX_LEN + 1];
	size_t n;
	struct mf_engine *e;
};

static bool held_registered(void *arg, const char *fp)
{
	const struct held *h = arg;
	for (size_t i = 0; i < h->n; i++)
		if (strcmp(h->v[i], fp) == 0)
			return true;
	return false;
}

static bool held_feeds(void *arg, const char *fp, const char *from)
{
	return mf_engine_feeds(((struct held *)arg)->e, fp, from);
}

static void expired_line(struct ctl *ctl, const struct mf_engine_snapshot *s,
			 const char *why, int64_t now, unsigned n)
{
	if (ctl->json) {
		fputs(n ? ",\n {\"name\":" : "{\"name\":", stdout);
		json_str(stdout, s->name);
		printf(
		    ",\"fingerprint\":\"%s\",\"why\":\"%s\",\"created\":%lld,"
		    "\"last_read\":%lld}",
		    s->fp, why, (long long)s->created, (long long)s->last_read);
		return;
	}
	char age[32];
	ctl_age(s->last_read > 0 ? s->last_read : s->created, now, age,
		sizeof(age));
	printf("expired %s %s by %s (%s %s)\n", s->name, s->fp, why,
	       s->last_read > 0 ? "last read" : "never read, created", age);
}

/* The catalog's snapshots and which of them are due under the policy,
 * with older (-1: none) as --older-than. Prints the error. */
static int expiry_due(struct ctl *ctl, int64_t older,
		      struct mf_engine_snapshot **v, size_t *n,
		      struct mf_expiry_due **due, size_t *nd)
{
	struct mf_engine *e = ctl_engine(ctl);
	if (!e)
		return -EIO;
	struct held h = {NULL, 0, e};
	int rc = mf_engine_list_snapshots(e, v, n);
	if (rc == 0)
		rc = mf_engine_list_held(e, &h.v, &h.n);
	if (rc) {
		ctl_err("expire: %s", strerror(-rc));
		return rc;
	}
	struct mf_expiry_policy p = {
	    .now = mf_engine_now(e), /* the catalog's clock */
	    .older_than = older,
	    .registered = held_registered,
	    .feeds = held_feeds,
	    .arg = &h,
	};
	rc = mf_engine_expiry_due(*v, *n, &p, due, nd);
	free(h.v);
	if (rc) {
		ctl_err("expire: %s", strerror(-rc));
		mf_engine_snapshot_recs_free(*v, *n);
	}
	return rc;
}

int cmd_expire(struct ctl *ctl)
{
	int64_t older = -1;
	if (ctl->older_than && mf_parse_duration(ctl->older_than, &older)) {
		ctl_err("bad --older-than '%s': expected a duration such as "
			"90s, 30m, 7d or 1h30m",
			ctl->older_than);
		return 2;
	}
	struct mf_engine_snapshot *v;
	struct mf_expiry_due *due;
	size_t n, nd;
	if (expiry_due(ctl, older, &v, &n, &due, &nd))
		return 1;
	int64_t now = mf_now_s();
	unsigned done = 0, bad = 0;
	if (ctl->json)
		fputc('[', stdout);
	for (size_t i = 0; i < nd; i++) {
		const struct mf_engine_snapshot *s = &v[due[i].index];
		int rc = mf_engine_expire_snapshot(ctl->engine, s->fp);
		/* -ENOENT: another process expired it since the listing;
		 * nothing is left to do. -EBUSY: a shard is being computed;
		 * the others went, the snapshot stays for a later expiry */
		if (rc == -EBUSY) {
			ctl_err("expire %s: a shard is being computed: kept "
				"for now",
				s->fp);
		} else if (rc && rc != -ENOENT) {
			ctl_err("expire %s: %s", s->fp, strerror(-rc));
			bad++;
		} else if (rc == 0) {
			expired_line(ctl, s, mf_expiry_why_name(due[i].why),
				     now, done++);
		}
	}
	free(due);
	mf_engine_snapshot_recs_free(v, n);
	if (ctl->json)
		fputs("]\n", stdout);
	else if (done == 0 && bad == 0)
		printf("nothing to expire\n");
	return bad ? 1 : 0;
}
