/*
 * matctl_batches.c - matctl batches: which records of which shards each
 * batch of a snapshot's batch order holds (docs/format.md, "Batch
 * order"), for a seed, an epoch and a rank view, from the materialized
 * shards only (mf_engine_batches computes nothing).
 *
 * Not for: the order itself (order/) or reading records.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matctl.h"

/* A decimal number of at most max: 0, else the message and 2. */
static int parse_num(const char *what, const char *s, uint64_t max,
		     uint64_t *out)
{
	char *end;
	errno = 0;
	if (!s || !*s || *s < '0' || *s > '9')
		goto bad;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		goto bad;
	*out = v;
	return 0;
bad:
	ctl_err("bad %s '%s': expected a number from 0 to %" PRIu64, what,
		s ? s : "", max);
	return 2;
}

#define CTL_ORDER_MAX ((uint64_t)INT64_MAX)

static int parse_view(const struct ctl *ctl, struct mf_engine_batch_view *v)
{
	memset(v, 0, sizeof(*v));
	v->world = 1;
	if (!ctl->seed || !ctl->epoch) {
		ctl_err("batches: --seed S (or none) and --epoch E are needed");
		return 2;
	}
	if (parse_num("batch size", ctl->argv[1], CTL_ORDER_MAX, &v->batch))
		return 2;
	if (v->batch == 0) {
		ctl_err("bad batch size '0': expected 1 or more records");
		return 2;
	}
	v->shuffled = strcmp(ctl->seed, "none") != 0;
	if (v->shuffled && parse_num("--seed", ctl->seed, UINT64_MAX, &v->seed))
		return 2;
	if (parse_num("--epoch", ctl->epoch, UINT64_MAX, &v->epoch))
		return 2;
	if (ctl->rank) {
		const char *slash = strchr(ctl->rank, '/');
		char r[32];
		size_t n = slash ? (size_t)(slash - ctl->rank) : 0;
		if (!slash || n == 0 || n >= sizeof(r)) {
			ctl_err("bad --rank '%s': expected R/W", ctl->rank);
			return 2;
		}
		memcpy(r, ctl->rank, n);
		r[n] = '\0';
		if (parse_num("--rank R", r, CTL_ORDER_MAX, &v->rank) ||
		    parse_num("--rank W", slash + 1, CTL_ORDER_MAX, &v->world))
			return 2;
		if (v->world == 0 || v->rank >= v->world) {
			ctl_err("bad --rank '%s': needs 0 <= R < W", ctl->rank);
			return 2;
		}
	}
	return 0;
}

struct out {
	bool json;
	uint64_t n;
};

static int put_batch(void *arg, uint64_t k, uint64_t g,
		     const struct mf_engine_batch_run *runs, size_t n,
		     bool first, bool last)
{
	struct out *o = arg;
	if (first && o->json)
		printf("%s\n    {\"batch\": %" PRIu64 ", \"global\": %" PRIu64
		       ", \"runs\": [",
		       o->n ? "," : "", k, g);
	else if (first)
		printf("batch-%06" PRIu64 "  global %06" PRIu64 " ", k, g);
	for (size_t i = 0; i < n; i++) {
		if (o->json) {
			printf("%s[%" PRIu64 ", %" PRIu64 ", %" PRIu64 "]",
			       first && i == 0 ? "" : ", ", runs[i].shard,
			       runs[i].record, runs[i].count);
			continue;
		}
		printf(" %" PRIu64 ":%" PRIu64, runs[i].shard, runs[i].record);
		if (runs[i].count > 1)
			printf("-%" PRIu64, runs[i].record + runs[i].count - 1);
	}
	if (last) {
		printf(o->json ? "]}" : "\n");
		o->n++;
	}
	return ferror(stdout) ? -EIO : 0;
}

int cmd_batches(struct ctl *ctl)
{
	struct mf_engine_batch_view v;
	if (parse_view(ctl, &v))
		return 2;
	struct mf_engine *e = ctl_engine(ctl);
	if (!e)
		return 1;
	char fp[65];
	if (ctl_resolve(ctl, ctl->argv[0], fp))
		return 1;
	struct out o = {.json = ctl->json};
	struct mf_engine_batches_info info;
	char *err = NULL;
	if (o.json)
		printf("{\"fingerprint\": \"%s\", \"batches\": [", fp);
	int rc = mf_engine_batches(e, fp, &v, put_batch, &o, &info, &err);
	if (rc) {
		if (o.json)
			printf("\n");
		fflush(stdout);
		ctl_err("batches of %s: %s", ctl->argv[0],
			err ? err : strerror(-rc));
		free(err);
		return 1;
	}
	if (o.json) {
		printf("%s],\n  \"order\": %u, \"seed\": ", o.n ? "\n  " : "",
		       info.order);
		if (v.shuffled)
			printf("%" PRIu64, v.seed);
		else
			printf("null");
		printf(", \"epoch\": %" PRIu64 ", \"batch_size\": %" PRIu64
		       ", \"rank\": %" PRIu64 ", \"world\": %" PRIu64
		       ", \"count\": %" PRIu64 ", \"complete\": %s"
		       ", \"shards\": %" PRIu64 ", \"shards_known\": %" PRIu64
		       ", \"shuffle_window\": %" PRIu64 "}\n",
		       v.epoch, v.batch, v.rank, v.world, info.batches,
		       info.complete ? "true" : "false", info.shards,
		       info.shards_known, info.window);
	} else if (info.complete) {
		printf("order %u: %" PRIu64 " batches, every shard known\n",
		       info.order, info.batches);
	} else {
		printf("order %u: %" PRIu64 " batches known so far: the shard "
		       "order's first %" PRIu64 " of %" PRIu64
		       " shards are materialized\n",
		       info.order, info.batches, info.shards_known,
		       info.shards);
	}
	return fflush(stdout) ? 1 : 0;
}
