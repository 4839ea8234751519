/*
 * matctl_show.c - `matctl ls` and `matctl stat`: the catalog as tables for
 * people and as JSON for scripts. Reads only; computes nothing.
 */
#include "matctl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void expiry_text(const struct mf_engine_snapshot *s, long long now,
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

/* Host names of runs, as the catalog keeps them. */
typedef char host_t[sizeof(((struct mf_run_rec *)0)->host)];

static int host_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Whether run_id holds a shard of v: materialized, or computing it. */
static bool run_holds(const char *run_id, const struct mf_engine_shard *v,
		      size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((v[i].state == MF_ENGINE_MATERIALIZED ||
		     v[i].state == MF_ENGINE_RUNNING) &&
		    strcmp(v[i].run_id, run_id) == 0)
			return true;
	return false;
}

/* The hosts of the runs (of every run row, runs) that hold a shard of
 * fp, each once, sorted. *out (caller frees) has *n names. */
static int snap_hosts(struct mf_engine *e, const char *fp,
		      const struct mf_run_rec *runs, size_t nruns, host_t **out,
		      size_t *n)
{
	struct mf_engine_shard *v;
	size_t nv, k = 0;
	int rc = mf_engine_list_shards(e, fp, &v, &nv);
	if (rc)
		return rc;
	host_t *h = calloc(nruns + 1, sizeof(*h));
	for (size_t r = 0; h && r < nruns; r++)
		if (strcmp(runs[r].fp, fp) == 0 &&
		    run_holds(runs[r].run_id, v, nv))
			memcpy(h[k++], runs[r].host, sizeof(*h));
	mf_engine_shard_recs_free(v, nv);
	if (!h)
		return -ENOMEM;
	qsort(h, k, sizeof(*h), host_cmp);
	size_t u = 0;
	for (size_t i = 0; i < k; i++)
		if (u == 0 || strcmp(h[u - 1], h[i]) != 0)
			memmove(h[u++], h[i], sizeof(*h));
	*out = h;
	*n = u;
	return 0;
}

/* The snapshot's fields as an open JSON object: the caller closes it. */
static void snap_json(FILE *f, const struct mf_engine_snapshot *s)
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
	fprintf(f, ",\"expire_after\":%lld,\"keep\":%u",
		(long long)s->expire_after, s->keep);
}

static void hosts_json(FILE *f, host_t *h, size_t n)
{
	fputs(",\"hosts\":[", f);
	for (size_t i = 0; i < n; i++) {
		fputs(i ? "," : "", f);
		json_str(f, h[i]);
	}
	fputc(']', f);
}

/* One row of the ls table; hosts joined by ',', "-" when none. */
static void ls_row(const struct mf_engine_snapshot *s, long long now, host_t *h,
		   size_t nh)
{
	char stored[32], raw[32], shards[32], age[32], exp[32];
	mf_format_size(s->stored_bytes, stored, sizeof(stored));
	mf_format_size(s->raw_bytes, raw, sizeof(raw));
	snprintf(shards, sizeof(shards), "%u/%u", s->materialized, s->shards);
	ctl_age(s->last_read, now, age, sizeof(age));
	expiry_text(s, now, exp, sizeof(exp));
	printf("%-20s %-12.12s %9s %10s %10s %-10s %-8s ", s->name, s->fp,
	       shards, stored, raw, age, exp);
	for (size_t i = 0; i < nh; i++)
		printf("%s%s", i ? "," : "", h[i]);
	fputs(nh ? "\n" : "-\n", stdout);
}

/* The table, or JSON: each snapshot with the hosts whose runs hold its
 * shards (materialized or computing), from every host on the catalog. */
static int ls_print(struct ctl *ctl, const struct mf_engine_snapshot *v,
		    size_t n, const struct mf_run_rec *runs, size_t nruns)
{
	long long now = mf_now_s();
	size_t shown = 0;
	if (ctl->json)
		fputc('[', stdout);
	else
		printf("%-20s %-12s %9s %10s %10s %-10s %-8s %s\n", "NAME",
		       "FINGERPRINT", "SHARDS", "STORED", "RAW", "LAST-READ",
		       "EXPIRES", "HOSTS");
	for (size_t i = 0; i < n; i++) {
		host_t *h;
		size_t nh;
		int rc = snap_hosts(ctl->engine, v[i].fp, runs, nruns, &h, &nh);
		if (rc == -ENOENT) /* gone since the listing */
			continue;
		if (rc) {
			ctl_err("ls: %.12s: %s", v[i].fp, strerror(-rc));
			return rc;
		}
		if (ctl->json) {
			fputs(shown++ ? ",\n " : "", stdout);
			snap_json(stdout, &v[i]);
			hosts_json(stdout, h, nh);
			fputc('}', stdout);
		} else {
			ls_row(&v[i], now, h, nh);
		}
		free(h);
	}
	if (ctl->json)
		fputs("]\n", stdout);
	return 0;
}

int cmd_ls(struct ctl *ctl)
{
	struct mf_engine *e = ctl_engine(ctl);
	if (!e)
		return 1;
	struct mf_engine_snapshot *v = NULL;
	struct mf_run_rec *runs = NULL;
	size_t n = 0, nruns = 0;
	int rc = mf_engine_list_snapshots(e, &v, &n);
	if (rc == 0)
		rc = mf_engine_list_runs(e, NULL, &runs, &nruns);
	if (rc) {
		ctl_err("ls: %s", strerror(-rc));
		mf_engine_snapshot_recs_free(v, n);
		return 1;
	}
	rc = ls_print(ctl, v, n, runs, nruns);
	free(runs);
	mf_engine_snapshot_recs_free(v, n);
	return rc ? 1 : 0;
}

/* The records of each materialized shard (UINT64_MAX: not known), from
 * the shard files; *framing the snapshot's, MF_FRAMING_NONE when no
 * materialized shard has records. */
struct stat_records {
	struct mf_records framing;
	uint64_t *count; /* one per shard row */
	uint64_t total;
	size_t known;
};

static void stat_records_get(struct ctl *ctl, const char *fp,
			     const struct mf_engine_shard *v, size_t n,
			     struct stat_records *r)
{
	memset(r, 0, sizeof(*r));
	r->count = calloc(n ? n : 1, sizeof(*r->count));
	for (size_t i = 0; r->count && i < n; i++) {
		struct mf_records fr;
		uint64_t k;
		r->count[i] = UINT64_MAX;
		if (mf_engine_shard_records(ctl->engine, fp, v[i].index, &fr,
					    &k) != 0 ||
		    fr.framing == MF_FRAMING_NONE)
			continue;
		r->framing = fr;
		r->count[i] = k;
		r->total += k;
		r->known++;
	}
}

/* The holders of the same data as shard k (h sorted by shard). */
static void holders_of(const struct mf_engine_holder *h, size_t nh, uint32_t k,
		       size_t *first, size_t *count)
{
	*first = 0;
	while (*first < nh && h[*first].shard < k)
		(*first)++;
	*count = 0;
	while (*first + *count < nh && h[*first + *count].shard == k)
		(*count)++;
}

static void shard_json(FILE *f, const struct mf_engine_shard *s,
		       uint64_t records, const struct mf_engine_holder *h,
		       size_t nh)
{
	fprintf(f, "{\"index\":%u,\"state\":\"%s\",\"run_id\":\"%s\"", s->index,
		mf_engine_state_name(s->state), s->run_id);
	fprintf(f, ",\"raw_bytes\":%llu,\"stored_bytes\":%llu,\"chunks\":%u",
		(unsigned long long)s->raw_bytes,
		(unsigned long long)s->stored_bytes, s->chunks);
	fprintf(f, ",\"attempts\":%u,\"last_read\":%lld,\"exit_status\":%d",
		s->attempts, (long long)s->last_read, s->exit_status);
	if (records != UINT64_MAX)
		fprintf(f, ",\"records\":%llu", (unsigned long long)records);
	else
		fputs(",\"records\":null", f);
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
	size_t first, count;
	holders_of(h, nh, s->index, &first, &count);
	fputs(",\"shared_with\":[", f);
	for (size_t i = 0; i < count; i++)
		fprintf(f, "%s{\"fingerprint\":\"%s\",\"shard\":%u}",
			i ? "," : "", h[first + i].fp,
			h[first + i].their_shard);
	fputs("]}", f);
}

static void print_tail(const char *raw)
{
	char *tail = strdup(raw);
	if (!tail)
		return;
	mf_text_clean(tail, true);
	const char *p = tail;
	while (*p) {
		const char *nl = strchr(p, '\n');
		int len = nl ? (int)(nl - p) : (int)strlen(p);
		printf("      | %.*s\n", len, p);
		p += len + (nl ? 1 : 0);
	}
	free(tail);
}

static void stat_table(const struct mf_engine_snapshot *snap,
		       const struct mf_engine_shard *v, size_t n,
		       const char *why, const struct stat_records *rec,
		       const struct mf_engine_holder *h, size_t nh)
{
	char raw[32], stored[32];
	mf_format_size(snap->raw_bytes, raw, sizeof(raw));
	mf_format_size(snap->stored_bytes, stored, sizeof(stored));
	printf("name         %s\nfingerprint  %s\nspec         %s\n",
	       snap->name, snap->fp, snap->spec_path);
	printf("shards       %u/%u materialized, %s raw, %s stored (%s)\n",
	       snap->materialized, snap->shards, raw, stored,
	       snap->compression);
	if (why)
		printf("computable   no: %s; what the store holds is the only "
		       "copy\n\n",
		       why);
	else
		printf("computable   yes\n");
	bool records = rec->framing.framing != MF_FRAMING_NONE;
	if (records) {
		char shown[64];
		mf_format_records(&rec->framing, shown, sizeof(shown));
		printf("records      %llu in %zu of %u shards (%s)\n",
		       (unsigned long long)rec->total, rec->known, snap->shards,
		       shown);
	}
	printf("\n%6s  %-12s %10s %10s %6s %8s", "SHARD", "STATE", "RAW",
	       "STORED", "CHUNKS", "ATTEMPTS");
	if (records)
		printf(" %10s", "RECORDS");
	printf("  %s\n", "RUN");
	for (size_t i = 0; i < n; i++) {
		mf_format_size(v[i].raw_bytes, raw, sizeof(raw));
		mf_format_size(v[i].stored_bytes, stored, sizeof(stored));
		printf("%6u  %-12s %10s %10s %6u %8u", v[i].index,
		       mf_engine_state_name(v[i].state), raw, stored,
		       v[i].chunks, v[i].attempts);
		char count[24] = "-";
		if (rec->count && rec->count[i] != UINT64_MAX)
			snprintf(count, sizeof(count), "%llu",
				 (unsigned long long)rec->count[i]);
		if (records)
			printf(" %10s", count);
		printf("  %s\n", v[i].run_id[0] ? v[i].run_id : "-");
		if (v[i].error) {
			char *e = strdup(v[i].error);
			if (e)
				mf_text_clean(e, false);
			printf("      error: %s\n", e ? e : "?");
			free(e);
		}
		if (v[i].stderr_tail && v[i].state == MF_ENGINE_FAILED)
			print_tail(v[i].stderr_tail);
		size_t first, shared;
		holders_of(h, nh, v[i].index, &first, &shared);
		for (size_t j = 0; j < shared; j++)
			printf("      shared with shard %u of %s\n",
			       h[first + j].their_shard, h[first + j].fp);
	}
}

int cmd_stat(struct ctl *ctl)
{
	char fp[65];
	if (ctl_resolve(ctl, ctl->argv[0], fp))
		return 1;
	struct mf_engine_snapshot snap;
	struct mf_engine_shard *v = NULL;
	size_t n = 0;
	int rc = mf_engine_snapshot(ctl->engine, fp, &snap);
	if (rc == 0) {
		rc = mf_engine_list_shards(ctl->engine, fp, &v, &n);
		if (rc)
			mf_engine_snapshot_release(&snap);
	}
	if (rc) {
		ctl_err("stat '%s': %s", ctl->argv[0], strerror(-rc));
		return 1;
	}
	struct stat_records rec;
	stat_records_get(ctl, fp, v, n, &rec);
	char *why = NULL;
	bool computable = mf_engine_computable(ctl->engine, fp, &why) == 0;
	if (!computable && !why)
		why = strdup("its spec cannot be checked");
	/* which shards hold the same data as other snapshots' (only while
	 * the spec still gives fp: the shard fingerprints are its) */
	struct mf_engine_holder *h = NULL;
	size_t nh = 0;
	if (computable)
		(void)mf_engine_shared_with(ctl->engine, fp, &h, &nh);
	if (ctl->json) {
		fputs("{\"snapshot\":", stdout);
		snap_json(stdout, &snap);
		fprintf(stdout, ",\"computable\":%s,\"not_computable_why\":",
			computable ? "true" : "false");
		if (why)
			json_str(stdout, why);
		else
			fputs("null", stdout);
		if (rec.framing.framing != MF_FRAMING_NONE) {
			char shown[64];
			mf_format_records(&rec.framing, shown, sizeof(shown));
			fputs(",\"framing\":", stdout);
			json_str(stdout, shown);
			fprintf(stdout,
				",\"records\":%llu,\"records_known\":%zu",
				(unsigned long long)rec.total, rec.known);
		}
		fputs("},\n \"shards\":[", stdout);
		for (size_t i = 0; i < n; i++) {
			fputs(i ? ",\n  " : "", stdout);
			shard_json(stdout, &v[i],
				   rec.count ? rec.count[i] : UINT64_MAX, h,
				   nh);
		}
		fputs("]}\n", stdout);
	} else {
		stat_table(&snap, v, n, computable ? NULL : why, &rec, h, nh);
	}
	free(h);
	free(rec.count);
	free(why);
	mf_engine_shard_recs_free(v, n);
	mf_engine_snapshot_release(&snap);
	return 0;
}
