/*
 * engine_registry.c - what a daemon following a pipelines folder needs from
 * the engine's registry of specs: listing the registered specs, who owns
 * the spec of a fingerprint, and forgetting those whose file was removed
 * or changed.
 *
 * Not for: registering (engine_spec.c) or anything that computes.
 *
 * Invariant relied upon: a registry entry is borrowed outside the lock only
 * by the leader of a flight on its fingerprint (eng_spec_for inside lead),
 * so an entry with no flight on its fingerprint can be freed.
 */
#include "engine_i.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool seen(const struct mf_engine_spec_info *v, size_t n,
		 const struct spec_entry *se)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].path, se->spec->path) == 0 &&
		    strcmp(v[i].fp, se->fpr.hex) == 0)
			return true;
	return false;
}

static int info_fill(struct mf_engine_spec_info *out,
		     const struct spec_entry *se)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->fp, sizeof(out->fp), "%s", se->fpr.hex);
	snprintf(out->name, sizeof(out->name), "%s", se->spec->name);
	out->shards = se->spec->shards;
	out->path = strdup(se->spec->path);
	out->suffix = strdup(se->spec->suffix);
	if (!out->path || !out->suffix) {
		free(out->path);
		free(out->suffix);
		return -ENOMEM;
	}
	return 0;
}

int mf_engine_list_specs(struct mf_engine *e, struct mf_engine_spec_info **out,
			 size_t *n)
{
	pthread_mutex_lock(&e->lock);
	size_t cap = 0, k = 0;
	for (struct spec_entry *s = e->specs; s; s = s->next)
		cap++;
	struct mf_engine_spec_info *v = calloc(cap ? cap : 1, sizeof(*v));
	int rc = v ? 0 : -ENOMEM;
	for (struct spec_entry *s = e->specs; rc == 0 && s; s = s->next) {
		if (!s->registered || seen(v, k, s))
			continue; /* newest first: the same one again */
		rc = info_fill(&v[k], s);
		if (rc == 0)
			k++;
	}
	pthread_mutex_unlock(&e->lock);
	if (rc) {
		mf_engine_spec_info_free(v, k);
		return rc;
	}
	*out = v;
	*n = k;
	return 0;
}

void mf_engine_spec_info_free(struct mf_engine_spec_info *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++) {
		free(v[i].path);
		free(v[i].suffix);
	}
	free(v);
}

int mf_engine_spec_owner(struct mf_engine *e, const char *fp, uid_t *uid,
			 char **path)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&e->lock);
	for (struct spec_entry *s = e->specs; s && rc == -ENOENT; s = s->next) {
		if (strcmp(s->fpr.hex, fp) != 0)
			continue;
		char *p = strdup(s->spec->path);
		rc = p ? 0 : -ENOMEM;
		if (p) {
			*uid = s->spec->owner_uid;
			*path = p;
		}
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int mf_engine_spec_records(struct mf_engine *e, const char *fp,
			   struct mf_records *out)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&e->lock);
	for (struct spec_entry *s = e->specs; s && rc == -ENOENT; s = s->next) {
		if (strcmp(s->fpr.hex, fp) == 0) {
			*out = s->spec->records;
			rc = 0;
		}
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

/* Caller holds e->lock. */
static bool in_flight(struct mf_engine *e, const char *fp)
{
	assert(mf_mutex_held(&e->lock));
	for (struct flight *f = e->flights; f; f = f->next)
		if (strcmp(f->fp, fp) == 0)
			return true;
	return false;
}

int mf_engine_unregister(struct mf_engine *e, const char *spec_path,
			 const char *keep_fp)
{
	struct spec_entry *dead = NULL;
	bool newest = true, busy = false;
	pthread_mutex_lock(&e->lock);
	struct spec_entry **p = &e->specs;
	while (*p) {
		struct spec_entry *s = *p;
		if (strcmp(s->spec->path, spec_path) != 0) {
			p = &s->next;
			continue;
		}
		bool keep =
		    newest && keep_fp && strcmp(s->fpr.hex, keep_fp) == 0;
		newest = false;
		if (keep || in_flight(e, s->fpr.hex)) {
			busy = busy || !keep;
			p = &s->next;
			continue;
		}
		*p = s->next;
		s->next = dead;
		dead = s;
		if (s->registered)
			eng_name_left(e, s->fpr.hex, s->spec->name,
				      s->spec->owner_uid);
	}
	pthread_mutex_unlock(&e->lock);
	struct mf_catalog *c = NULL;
	if (dead && eng_catalog_get(e, &c) != 0)
		c = NULL;
	while (dead) {
		struct spec_entry *s = dead;
		dead = s->next;
		if (c && s->registered) /* unless another spec yields it */
			eng_release(e, c, s->fpr.hex);
		mf_fingerprint_release(&s->fpr);
		mf_spec_free(s->spec);
		free(s);
	}
	eng_catalog_put(e, c);
	return busy ? -EBUSY : 0;
}
