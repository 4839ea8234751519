/*
 * matctl_show.c - `matctl ls` and `matctl stat`: the catalog as tables for
 * people and as JSON for scripts. Reads only; computes nothing.
 */
#include "matctl.h"

#include <stdlib.h>
#include <string.h>

static void expiry_text(const struct mf_snapshot_rec *s, long long now,
			char *buf, size_t len)
{
	if (s->expire_after < 0) {
		snprintf(buf, len, "never");
		return;
	}
	long long base = s->last_read > 0 ? s->last_read : s->created;
	long long left = base + s->expire_after - now;
	if (left <= 0)
		snprintf(buf, len, "due");
	else if (left < 7200)
		snprintf(buf, len, "in %lldm", (left + 59) / 60);
	else if (left < 172800)
		snprintf(buf, len, "in %lldh", left / 3600);
	else
		snprintf(buf, len, "in %lldd", left / 86400);
}

static void snap_json(FILE *f, const struct mf_snapshot_rec *s)
{
	fputs("{\"name\":", f);
	json_str(f, s->name);
	fprintf(f, ",\"fingerprint\":\"%s\",\"shards\":%u,\"materialized\":%u",
		s->fp, s->shards, s->materialized);
	fprintf(f, ",\"raw_bytes\":%llu,\"stored_bytes\":%llu",
		(unsigned long long)s->raw_bytes,
		(unsigned long long)s->stored_bytes);
	fputs(",\"spec\":", f);
	json_str(f, s->spec_path);
	fputs(",\"compression\":", f);
	json_str(f, s->compression);
	fprintf(f, ",\"chunk_size\":%llu,\"created\":%lld,\"last_read\":%lld",
		(unsigned long long)s->chunk_size, (long long)s->created,
		(long long)s->last_read);
	fprintf(f, ",\"expire_after\":%lld,\"keep\":%u}",
		(long long)s->expire_after, s->keep);
}

static void ls_table(const struct mf_snapshot_rec *v, size_t n)
{
	long long now = mf_now_s();
	printf("%-20s %-12s %9s %10s %10s %-10s %s\n", "NAME", "FINGERPRINT",
	       "SHARDS", "STORED", "RAW", "LAST-READ", "EXPIRES");
	for (size_t i = 0; i < n; i++) {
		char stored[32], raw[32], shards[32], age[32], exp[32];
		mf_format_size(v[i].stored_bytes, stored, sizeof(stored));
		mf_format_size(v[i].raw_bytes, raw, sizeof(raw));
		snprintf(shards, sizeof(shards), "%u/%u", v[i].materialized,
			 v[i].shards);
		ctl_age(v[i].last_read, now, age, sizeof(age));
		expiry_text(&v[i], now, exp, sizeof(exp));
		printf("%-20s %-12.12s %9s %10s %10s %-10s %s\n", v[i].name,
		       v[i].fp, shards, stored, raw, age, exp);
	}
}

int cmd_ls(struct ctl *ctl)
{
	struct mf_engine *e = ctl_engine(ctl);
	if (!e)
		return 1;
	struct mf_snapshot_rec *v;
	size_t n;
	int rc = mf_engine_list_snapshots(e, &v, &n);
	if (rc) {
		ctl_err("ls: %s", strerror(-rc));
		return 1;
	}
	if (ctl->json) {
		fputc('[', stdout);
		for (size_t i = 0; i < n; i++) {
			fputs(i ? ",\n " : "", stdout);
			snap_json(stdout, &v[i]);
		}
		fputs("]\n", stdout);
	} else {
		ls_table(v, n);
	}
	mf_engine_snapshot_recs_free(v, n);
	return 0;
}

static void shard_json(FILE *f, const struct mf_shard_rec *s)
{
	fprintf(f, "{\"index\":%u,\"state\":\"%s\",\"run_id\":\"%s\"", s->index,
		mf_shard_state_name(s->state), s->run_id);
	fprintf(f, ",\"raw_bytes\":%llu,\"stored_bytes\":%llu,\"chunks\":%u",
		(unsigned long long)s->raw_bytes,
		(unsigned long long)s->stored_bytes, s->chunks);
	fprintf(f, ",\"attempts\":%u,\"last_read\":%lld,\"exit_status\":%d",
		s->attempts, (long long)s->last_read, s->exit_status);
	fputs(",\"error\":", f);
	if (s->error)
		json_str(f, s->error);
	else
		fputs("null", f);
	fputs(",\"stderr_tail\":", f);
	if (s->stderr_tail)
		json_str(f, s->stderr_tail);
	else
		fputs("null", f);
	fputc('}', f);
}

static void print_tail(const char *tail)
{
	const char *p = tail;
	while (*p) {
		const char *nl = strchr(p, '\n');
		int len = nl ? (int)(nl - p) : (int)strlen(p);
		printf("      | %.*s\n", len, p);
		p += len + (nl ? 1 : 0);
	}
}

static void stat_table(const struct mf_snapshot_rec *snap,
		       const struct mf_shard_rec *v, size_t n)
{
	char raw[32], stored[32];
	mf_format_size(snap->raw_bytes, raw, sizeof(raw));
	mf_format_size(snap->stored_bytes, stored, sizeof(stored));
	printf("name         %s\nfingerprint  %s\nspec         %s\n",
	       snap->name, snap->fp, snap->spec_path);
	printf("shards       %u/%u materialized, %s raw, %s stored (%s)\n\n",
	       snap->materialized, snap->shards, raw, stored,
	       snap->compression);
	printf("%6s  %-12s %10s %10s %6s %8s  %s\n", "SHARD", "STATE", "RAW",
	       "STORED", "CHUNKS", "ATTEMPTS", "RUN");
	for (size_t i = 0; i < n; i++) {
		mf_format_size(v[i].raw_bytes, raw, sizeof(raw));
		mf_format_size(v[i].stored_bytes, stored, sizeof(stored));
		printf("%6u  %-12s %10s %10s %6u %8u  %s\n", v[i].index,
		       mf_shard_state_name(v[i].state), raw, stored,
		       v[i].chunks, v[i].attempts,
		       v[i].run_id[0] ? v[i].run_id : "-");
		if (v[i].error)
			printf("      error: %s\n", v[i].error);
		if (v[i].stderr_tail && v[i].state == MF_SHARD_FAILED)
			print_tail(v[i].stderr_tail);
	}
}

int cmd_stat(struct ctl *ctl)
{
	char fp[65];
	if (ctl_resolve(ctl, ctl->argv[0], fp))
		return 1;
	struct mf_snapshot_rec snap;
	struct mf_shard_rec *v = NULL;
	size_t n = 0;
	int rc = mf_engine_snapshot(ctl->engine, fp, &snap);
	if (rc == 0) {
		rc = mf_engine_list_shards(ctl->engine, fp, &v, &n);
		if (rc)
			mf_snapshot_rec_release(&snap);
	}
	if (rc) {
		ctl_err("stat '%s': %s", ctl->argv[0], strerror(-rc));
		return 1;
	}
	if (ctl->json) {
		fputs("{\"snapshot\":", stdout);
		snap_json(stdout, &snap);
		fputs(",\n \"shards\":[", stdout);
		for (size_t i = 0; i < n; i++) {
			fputs(i ? ",\n  " : "", stdout);
			shard_json(stdout, &v[i]);
		}
		fputs("]}\n", stdout);
	} else {
		stat_table(&snap, v, n);
	}
	mf_engine_shard_recs_free(v, n);
	mf_snapshot_rec_release(&snap);
	return 0;
}
