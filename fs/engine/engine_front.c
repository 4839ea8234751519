/*
 * engine_front.c - what the front ends (the FUSE layer, matctl) get from
 * the engine, in its own terms: catalog rows copied into engine records,
 * a shard file's sizes, chunk reads of a reader the engine returned, and
 * a spec parsed once for its watch list and its registration. So no
 * front end includes a header below the engine (docs/architecture.md).
 *
 * Not for: deciding anything; every function here translates or
 * forwards.
 */
#include "engine_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(MF_ENGINE_ABSENT == (int)MF_SHARD_ABSENT &&
		   MF_ENGINE_RUNNING == (int)MF_SHARD_RUNNING &&
		   MF_ENGINE_MATERIALIZED == (int)MF_SHARD_MATERIALIZED &&
		   MF_ENGINE_FAILED == (int)MF_SHARD_FAILED,
	       "engine states are the catalog's");
_Static_assert(MF_ENGINE_NAME_MAX == MF_NAME_MAX, "a spec's name");
_Static_assert(sizeof(((struct mf_engine_snapshot *)0)->name) ==
		   sizeof(((struct mf_snapshot_rec *)0)->name),
	       "a snapshot's name");

const char *mf_engine_state_name(enum mf_engine_state s)
{
	return mf_shard_state_name((enum mf_shard_state)s);
}

void mf_engine_shard_release(struct mf_engine_shard *s)
{
	if (!s)
		return;
	free(s->error);
	free(s->stderr_tail);
	s->error = s->stderr_tail = NULL;
}

void mf_engine_snapshot_release(struct mf_engine_snapshot *s)
{
	if (!s)
		return;
	free(s->spec_path);
	free(s->compression);
	free(s->suffix);
	s->spec_path = s->compression = s->suffix = NULL;
}

void eng_shard_view(const struct mf_shard_rec *in, struct mf_engine_shard *out)
{
	memcpy(out->fp, in->fp, sizeof(out->fp));
	out->index = in->index;
	out->state = (enum mf_engine_state)in->state;
	memcpy(out->run_id, in->run_id, sizeof(out->run_id));
	out->raw_bytes = in->raw_bytes;
	out->stored_bytes = in->stored_bytes;
	out->chunks = in->chunks;
	out->exit_status = in->exit_status;
	out->error = in->error;
	out->stderr_tail = in->stderr_tail;
	out->last_read = in->last_read;
	out->attempts = in->attempts;
	out->generation = in->generation;
}

void eng_shard_take(struct mf_shard_rec *in, struct mf_engine_shard *out)
{
	eng_shard_view(in, out);
	in->error = in->stderr_tail = NULL;
}

void eng_shard_back(const struct mf_engine_shard *in, struct mf_shard_rec *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->fp, in->fp, sizeof(out->fp));
	out->index = in->index;
	out->state = (enum mf_shard_state)in->state;
	memcpy(out->run_id, in->run_id, sizeof(out->run_id));
	out->generation = in->generation;
}

void eng_snapshot_take(struct mf_snapshot_rec *in,
		       struct mf_engine_snapshot *out)
{
	memcpy(out->fp, in->fp, sizeof(out->fp));
	memcpy(out->name, in->name, sizeof(out->name));
	out->shards = in->shards;
	out->spec_path = in->spec_path;
	out->compression = in->compression;
	out->suffix = in->suffix;
	out->chunk_size = in->chunk_size;
	out->expire_after = in->expire_after;
	out->pending_expiry = in->pending_expiry;
	out->keep = in->keep;
	out->created = in->created;
	out->last_read = in->last_read;
	out->materialized = in->materialized;
	out->raw_bytes = in->raw_bytes;
	out->stored_bytes = in->stored_bytes;
	in->spec_path = in->compression = in->suffix = NULL;
}

void eng_file_of(const struct mf_shard_stat *in, struct mf_engine_file *out)
{
	out->raw_bytes = in->raw_bytes;
	out->stored_bytes = in->stored_bytes;
	out->chunks = in->chunks;
	out->codec = in->codec;
	out->chunk_size = in->chunk_size;
}

void mf_engine_reader_close(struct mf_shard_reader *r)
{
	mf_shard_reader_close(r);
}

void mf_engine_reader_stat(const struct mf_shard_reader *r,
			   struct mf_engine_file *out)
{
	struct mf_shard_stat st;
	mf_shard_reader_stat(r, &st);
	eng_file_of(&st, out);
}

size_t mf_engine_chunk_len(const struct mf_shard_reader *r, uint32_t i)
{
	return mf_shard_reader_chunk_len(r, i);
}

ssize_t mf_engine_read_chunk(struct mf_shard_reader *r, uint32_t i, void *dst,
			     size_t cap)
{
	return mf_shard_reader_read_chunk(r, i, dst, cap);
}

int mf_engine_open_shard_rec(struct mf_engine *e, const char *fp,
			     uint32_t shard, struct mf_shard_reader **out,
			     struct mf_engine_shard *rec, char **err)
{
	struct mf_shard_rec cur;
	int rc = eng_open_shard_rec(e, fp, shard, out, rec ? &cur : NULL, err);
	if (rc == 0 && rec)
		eng_shard_take(&cur, rec);
	return rc;
}

/* ---- a spec parsed once ---- */

struct mf_engine_spec {
	char *path; /* as the caller named it: what messages say */
	struct mf_spec *spec;
};

int mf_engine_spec_load(const char *spec_path, struct mf_engine_spec **out,
			char **err)
{
	struct mf_engine_spec *s = calloc(1, sizeof(*s));
	if (!s || !(s->path = strdup(spec_path))) {
		free(s);
		return -ENOMEM;
	}
	int rc = mf_spec_load(spec_path, &s->spec, err);
	if (rc) {
		free(s->path);
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void mf_engine_spec_free(struct mf_engine_spec *s)
{
	if (!s)
		return;
	mf_spec_free(s->spec);
	free(s->path);
	free(s);
}

int mf_engine_register_spec(struct mf_engine *e, struct mf_engine_spec *s,
			    char fp[MF_FP_HEX_LEN + 1], char **err)
{
	int rc = eng_register_loaded(e, s->path, s->spec, fp, err);
	free(s->path);
	free(s);
	return rc;
}

int mf_engine_spec_watch_list(const struct mf_engine_spec *s,
			      struct mf_engine_watch *out)
{
	struct mf_spec_watch w;
	int rc = mf_spec_watch_list(s->spec, &w);
	if (rc)
		return rc;
	struct mf_engine_watch_dir *dirs =
	    calloc(w.n_dirs ? w.n_dirs : 1, sizeof(*dirs));
	if (!dirs) {
		mf_spec_watch_release(&w);
		return -ENOMEM;
	}
	for (size_t i = 0; i < w.n_dirs; i++) { /* borrowed from w */
		dirs[i].path = w.dirs[i].path;
		dirs[i].name = w.dirs[i].name;
		dirs[i].glob = w.dirs[i].glob;
	}
	*out = (struct mf_engine_watch){.dirs = dirs,
					.n_dirs = w.n_dirs,
					.files = w.files,
					.n_files = w.n_files,
					.own = w.dirs};
	return 0;
}

void mf_engine_watch_release(struct mf_engine_watch *w)
{
	if (!w)
		return;
	struct mf_spec_watch sw = {.dirs = w->own,
				   .n_dirs = w->n_dirs,
				   .files = w->files,
				   .n_files = w->n_files};
	mf_spec_watch_release(&sw);
	free(w->dirs);
	memset(w, 0, sizeof(*w));
}
