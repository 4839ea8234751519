/*
 * snap_golden_gen.c - writes the golden files that test_snap_golden.c
 * reads: `snap_golden_gen DIR` makes DIR/snapshots/FP/... for the format
 * version this writer writes (FP from golden_versions in snap_golden.h),
 * leaving the other versions' folders alone. Run once, by hand, when a
 * format version is born, with DIR the checked-in tests/snapshot/golden;
 * never again for the same version.
 *
 * Not for: the test suite (it never runs this).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mf_snapshot.h"
#include "snap_golden.h"
#include "snap_records_gen.h"

static int write_shard(struct mf_store *st, const char *fp,
		       const struct golden_shard *g, bool adapt)
{
	struct mf_codec_cfg cfg = {g->codec, g->level, GOLDEN_CHUNK_SIZE, 1,
				   adapt};
	uint8_t *buf = malloc(g->raw + 1);
	if (!buf)
		return -1;
	golden_fill(buf, g->raw, g->index);
	struct mf_shard_writer *w;
	int rc = mf_shard_writer_open(st, fp, GOLDEN_RUN, g->index, &cfg, &w);
	if (rc == 0 && adapt &&
	    (rc = mf_shard_writer_set_pressure(w, golden_pressure, NULL)) != 0)
		mf_shard_writer_abort(w);
	if (rc == 0) {
		rc = mf_shard_writer_write(w, buf, g->raw);
		if (rc)
			mf_shard_writer_abort(w);
		else
			rc = mf_shard_writer_commit(w, NULL);
	}
	free(buf);
	return rc;
}

/* A golden framed shard: its bytes, framed, and the ends for index. */
static int write_framed(struct mf_store *st, const char *fp,
			const struct golden_framed_shard *g)
{
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 3, GOLDEN_CHUNK_SIZE, 1,
				   false};
	uint8_t *buf = malloc(GOLDEN_FRAMED_MAX);
	uint64_t *ends = malloc(GOLDEN_FRAMED_MAX * sizeof(*ends));
	size_t n;
	if (!buf || !ends)
		return -ENOMEM;
	size_t len =
	    golden_framed(&g->records, g->index, buf, ends, &n, golden_fill);
	struct mf_shard_writer *w;
	int rc = mf_shard_writer_open(st, fp, GOLDEN_RUN, g->index, &cfg, &w);
	if (rc)
		goto free_buf;
	rc = mf_shard_writer_set_records(w, &g->records);
	if (rc == 0)
		rc = mf_shard_writer_write(w, buf, len);
	if (rc == 0 && g->records.framing == MF_FRAMING_INDEX)
		rc = mf_shard_writer_set_ends(w, ends, n);
	if (rc == 0)
		rc = mf_shard_writer_commit(w, NULL);
	else
		mf_shard_writer_abort(w);
free_buf:
	free(buf);
	free(ends);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: snap_golden_gen DIR\n");
		return 2;
	}
	const struct golden_version *v = golden_current();
	if (!v) {
		fprintf(stderr,
			"snap_golden_gen: snap_golden.h has no entry "
			"for format version %d\n",
			MF_SHARD_FORMAT_VERSION);
		return 1;
	}
	struct mf_store *st;
	int rc = mf_store_open(argv[1], true, &st);
	char *old;
	size_t len;
	/* golden files are never made again: refuse to overwrite them */
	if (rc == 0 && mf_store_read_metadata(st, v->fp, &old, &len) == 0) {
		free(old);
		rc = -EEXIST;
	}
	if (rc == 0)
		rc = mf_store_write_metadata(st, v->fp, v->metadata,
					     strlen(v->metadata));
	if (rc == 0)
		rc = mf_store_run_create(st, v->fp, GOLDEN_RUN);
	for (size_t i = 0; rc == 0 && i < GOLDEN_SHARDS; i++)
		rc = write_shard(st, v->fp, &golden_shards[i], false);
	if (rc == 0 && v->adaptive)
		rc = write_shard(st, v->fp, &golden_adaptive, true);
	for (size_t i = 0; rc == 0 && v->records && i < GOLDEN_RECORDS; i++)
		rc = write_framed(st, v->fp, &golden_records[i]);
	if (rc == 0)
		mf_store_close(st);
	if (rc) {
		fprintf(stderr, "snap_golden_gen: '%s': %s\n", argv[1],
			strerror(rc < 0 ? -rc : rc));
		return 1;
	}
	return 0;
}
