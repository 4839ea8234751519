/*
 * engine_expiry.c - the expiry policy: which snapshots of a catalog
 * listing are due, and why (expire_after, keep, max_size). The daemon's
 * expiry thread and `matctl expire` both ask it; each brings what only it
 * knows (what is registered, what is in use) as predicates.
 *
 * Not for: expiring (mf_engine_expire_snapshot), reading the catalog, or
 * when to run a pass (the daemon's timer, matctl's user). Pure: no I/O,
 * no lock, no state between calls.
 */
#include "engine_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *mf_expiry_why_name(enum mf_expiry_why why)
{
	switch (why) {
	case MF_EXPIRY_AFTER:
		return "expire_after";
	case MF_EXPIRY_KEEP:
		return "keep";
	case MF_EXPIRY_MAX_SIZE:
		return "max_size";
	}
	return "?";
}

/* One pass's view of the listing: answers of the predicates, asked once
 * each and only when needed, and what is decided so far. */
struct pass {
	const struct mf_engine_snapshot *v;
	size_t n;
	const struct mf_expiry_policy *p;
	signed char *reg; /* -1: not asked yet, else 0 or 1 */
	bool *taken; /* due already */
	struct mf_expiry_due *due;
	size_t n_due;
};

/* Last use of a snapshot: its last read, else its creation. */
static int64_t last_use(const struct mf_engine_snapshot *r)
{
	return r->last_read > 0 ? r->last_read : r->created;
}

static bool registered(struct pass *ps, size_t i)
{
	if (ps->reg[i] < 0)
		ps->reg[i] = ps->p->registered &&
		    ps->p->registered(ps->p->arg, ps->v[i].fp);
	return ps->reg[i] != 0;
}

/* True when o was used more recently than r (both of one name, both
 * registered or both not): the later last use, then the later created,
 * then the larger fingerprint. */
static bool more_recent(const struct mf_engine_snapshot *o,
			const struct mf_engine_snapshot *r)
{
	int64_t a = last_use(o), b = last_use(r);
	if (a != b)
		return a > b;
	if (o->created != r->created)
		return o->created > r->created;
	return strcmp(o->fp, r->fp) > 0;
}

/* True when v[j] ranks above v[i] (both of one name) for keep: a
 * registered one above any other, then the more recently used. */
static bool ranks_above(struct pass *ps, size_t j, size_t i)
{
	bool reg_j = registered(ps, j), reg_i = registered(ps, i);
	if (reg_j != reg_i)
		return reg_j;
	return more_recent(&ps->v[j], &ps->v[i]);
}

/* Number of snapshots of v[i]'s name that rank above it. */
static size_t newer_of_name(struct pass *ps, size_t i)
{
	size_t k = 0;
	for (size_t j = 0; j < ps->n; j++)
		if (j != i && strcmp(ps->v[j].name, ps->v[i].name) == 0)
			k += ranks_above(ps, j, i);
	return k;
}

/* The keep of v[i]'s name: that of the snapshot of the name ranked
 * first, so what the spec says now (its registered fingerprint's row),
 * not what an older spec said when an older fingerprint was made. */
static uint32_t keep_of_name(struct pass *ps, size_t i)
{
	bool any = false; /* else no need to ask what is registered */
	for (size_t j = 0; j < ps->n && !any; j++)
		any = ps->v[j].keep > 0 &&
		    strcmp(ps->v[j].name, ps->v[i].name) == 0;
	if (!any)
		return 0;
	size_t top = i;
	for (size_t j = 0; j < ps->n; j++)
		if (strcmp(ps->v[j].name, ps->v[i].name) == 0 &&
		    ranks_above(ps, j, top))
			top = j;
	return ps->v[top].keep;
}

/* True when a snapshot of v[i]'s name that keep retains (one of the keep
 * ranked first: the registered one first), not materialized whole, may
 * store a shard from v[i]'s data (engine_run.c, reuse: a corpus that grew
 * by an input computes that input's shard only): v[i] then stays until
 * that one is whole. */
static bool feeds_kept(struct pass *ps, size_t i, uint32_t keep)
{
	if (!ps->p->feeds)
		return false;
	for (size_t j = 0; j < ps->n; j++)
		if (j != i && strcmp(ps->v[j].name, ps->v[i].name) == 0 &&
		    ps->v[j].materialized < ps->v[j].shards &&
		    newer_of_name(ps, j) < keep &&
		    ps->p->feeds(ps->p->arg, ps->v[j].fp, ps->v[i].fp))
			return true;
	return false;
}

/* Why v[i] is due under expire_after or keep; 0 when it is not. */
static enum mf_expiry_why due_by_rule(struct pass *ps, size_t i)
{
	const struct mf_engine_snapshot *r = &ps->v[i];
	int64_t limit =
	    ps->p->older_than >= 0 ? ps->p->older_than : r->expire_after;
	bool expired = limit >= 0 && ps->p->now - last_use(r) >= limit;
	uint32_t keep = keep_of_name(ps, i);
	bool surplus = keep > 0 && newer_of_name(ps, i) >= keep;
	if (!expired && !surplus)
		return 0;
	bool reg = registered(ps, i);
	if (expired && (r->materialized > 0 || !reg))
		return MF_EXPIRY_AFTER;
	if (surplus && !reg && !feeds_kept(ps, i, keep))
		return MF_EXPIRY_KEEP;
	return 0; /* registered: nothing left to take */
}

static void add_due(struct pass *ps, size_t i, enum mf_expiry_why why)
{
	ps->due[ps->n_due++] = (struct mf_expiry_due){i, why};
	ps->taken[i] = true;
}

/* The least recently used snapshot holding data that may be evicted:
 * not taken yet, not in use. -1 when none. */
static long victim(struct pass *ps, bool *passed)
{
	for (;;) {
		long best = -1;
		for (size_t i = 0; i < ps->n; i++)
			if (!ps->taken[i] && !passed[i] &&
			    ps->v[i].stored_bytes > 0 &&
			    (best < 0 ||
			     last_use(&ps->v[i]) < last_use(&ps->v[best])))
				best = (long)i;
		if (best < 0)
			return -1;
		passed[best] = true;
		if (!ps->p->in_use ||
		    !ps->p->in_use(ps->p->arg, ps->v[best].fp))
			return best;
	}
}

/* max_size: the least recently used snapshots while the stored bytes of
 * what is left exceed it. */
static int evict(struct pass *ps)
{
	bool *passed = calloc(ps->n + 1, sizeof(*passed));
	if (!passed)
		return -ENOMEM;
	uint64_t total = 0;
	for (size_t i = 0; i < ps->n; i++)
		if (!ps->taken[i])
			total += ps->v[i].stored_bytes;
	while (total > ps->p->max_size) {
		long i = victim(ps, passed);
		if (i < 0)
			break;
		add_due(ps, (size_t)i, MF_EXPIRY_MAX_SIZE);
		total -= ps->v[i].stored_bytes;
	}
	free(passed);
	return 0;
}

int mf_engine_expiry_due(const struct mf_engine_snapshot *v, size_t n,
			 const struct mf_expiry_policy *p,
			 struct mf_expiry_due **out, size_t *n_out)
{
	struct pass ps = {.v = v, .n = n, .p = p};
	ps.reg = malloc(n + 1);
	ps.taken = calloc(n + 1, sizeof(*ps.taken));
	ps.due = calloc(n + 1, sizeof(*ps.due));
	int rc = ps.reg && ps.taken && ps.due ? 0 : -ENOMEM;
	if (rc == 0)
		memset(ps.reg, -1, n + 1);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		enum mf_expiry_why why = due_by_rule(&ps, i);
		if (why)
			add_due(&ps, i, why);
	}
	if (rc == 0 && p->max_size)
		rc = evict(&ps);
	free(ps.reg);
	free(ps.taken);
	if (rc || ps.n_due == 0) {
		free(ps.due);
		ps.due = NULL;
	}
	if (rc == 0) {
		*out = ps.due;
		*n_out = ps.n_due;
	}
	return rc;
}
