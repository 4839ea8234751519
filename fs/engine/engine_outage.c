/*
 * engine_outage.c - a catalog that cannot be reached: the bounded cache of
 * shards this engine saw materialized (served while the catalog is down),
 * and the bounded wait with backoff for the catalog to answer again.
 *
 * Not for: the shards sealed here and committing (engine_commit.c) or
 * the connections themselves (engine_pool.c).
 */
#include "engine_i.h"

#include <errno.h>
#include <string.h>

/* ---- a catalog that cannot be reached ---- */

#define OUTAGE_MIN_NS 100000000ULL /* reconnect backoff: 0.1 s to 2 s */
#define OUTAGE_MAX_NS 2000000000ULL

uint64_t eng_shard_hash(const char *fp, uint32_t index)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (const char *s = fp; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (h ^ index) * 1099511628211ULL;
}

static struct known_shard *known_slot(struct mf_engine *e, const char *fp,
				      uint32_t index)
{
	return &e->known[eng_shard_hash(fp, index) % ENG_KNOWN_SLOTS];
}

void eng_known_remember(struct mf_engine *e, const struct mf_shard_rec *rec)
{
	if (!e->known)
		return;
	pthread_mutex_lock(&e->lock);
	struct known_shard *k = known_slot(e, rec->fp, rec->index);
	if (rec->state == MF_SHARD_MATERIALIZED) {
		memcpy(k->fp, rec->fp, sizeof(k->fp));
		memcpy(k->run_id, rec->run_id, sizeof(k->run_id));
		k->index = rec->index;
		k->chunks = rec->chunks;
		k->raw_bytes = rec->raw_bytes;
		k->stored_bytes = rec->stored_bytes;
		k->generation = rec->generation;
	} else if (k->index == rec->index && strcmp(k->fp, rec->fp) == 0) {
		k->fp[0] = '\0';
	}
	pthread_mutex_unlock(&e->lock);
}

int eng_known_recall(struct mf_engine *e, const char *fp, uint32_t index,
		     struct mf_shard_rec *out)
{
	int rc = -ENOENT;
	if (!e->known)
		return rc;
	pthread_mutex_lock(&e->lock);
	const struct known_shard *k = known_slot(e, fp, index);
	if (k->index == index && strcmp(k->fp, fp) == 0) {
		memset(out, 0, sizeof(*out));
		memcpy(out->fp, k->fp, sizeof(out->fp));
		memcpy(out->run_id, k->run_id, sizeof(out->run_id));
		out->index = index;
		out->state = MF_SHARD_MATERIALIZED;
		out->chunks = k->chunks;
		out->raw_bytes = k->raw_bytes;
		out->stored_bytes = k->stored_bytes;
		out->generation = k->generation;
		out->exit_status = -1;
		out->last_read = mf_now_s(); /* no touch is due */
		rc = 0;
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int eng_catalog_wait(struct mf_engine *e, int rc, uint64_t *deadline,
		     uint64_t *wait_ns, char **err)
{
	if (!mf_catalog_unreachable(rc))
		return rc;
	uint64_t now = mf_mono_ns();
	if (*deadline == 0)
		*deadline = now + ENG_CATALOG_WAIT_S * 1000000000ULL;
	if (now >= *deadline) {
		const char *why = mf_catalog_last_error();
		/* a full server is no failure of the catalog: try later */
		eng_errf(err,
			 rc == -EUSERS
			     ? "catalog '%s' refused new connections "
			       "for %d s (its max_connections are in "
			       "use; docs/cluster.md): %s"
			     : "catalog '%s' unreachable for %d s: %s",
			 mf_engine_catalog_shown(e->catalog_path),
			 ENG_CATALOG_WAIT_S, why && *why ? why : strerror(-rc));
		return rc == -EUSERS ? rc : -EIO;
	}
	if (*wait_ns == 0 && rc == -EUSERS)
		eng_note(
		    e,
		    "catalog '%s' refuses new connections (max_connections "
		    "in use): waiting up to %d s",
		    mf_engine_catalog_shown(e->catalog_path),
		    ENG_CATALOG_WAIT_S);
	/* every try connects again: the backoff spaces the tries */
	*wait_ns = *wait_ns ? *wait_ns * 2 : OUTAGE_MIN_NS;
	if (*wait_ns > OUTAGE_MAX_NS)
		*wait_ns = OUTAGE_MAX_NS;
	if (now + *wait_ns > *deadline)
		*wait_ns = *deadline - now;
	eng_sleep_ns(*wait_ns);
	return 0;
}
