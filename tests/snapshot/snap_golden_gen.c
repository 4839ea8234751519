/*
 * snap_golden_gen.c - writes the golden store that test_snap_golden.c
 * reads: `snap_golden_gen DIR` makes DIR/snapshots/GOLDEN_FP/... from
 * snap_golden.h. Run once, by hand, when a format version is born; the
 * output is checked in under tests/snapshot/golden and never regenerated
 * for the same version.
 *
 * Not for: the test suite (it never runs this).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mf_snapshot.h"
#include "snap_golden.h"

static int write_shard(struct mf_store *st, const struct golden_shard *g)
{
	struct mf_codec_cfg cfg = {g->codec, g->level, GOLDEN_CHUNK_SIZE, 1};
	uint8_t *buf = malloc(g->raw + 1);
	if (!buf)
		return -1;
	golden_fill(buf, g->raw, g->index);
	struct mf_shard_writer *w;
	int rc =
	    mf_shard_writer_open(st, GOLDEN_FP, GOLDEN_RUN, g->index, &cfg, &w);
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

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: snap_golden_gen DIR\n");
		return 2;
	}
	struct mf_store *st;
	int rc = mf_store_open(argv[1], true, &st);
	if (rc == 0)
		rc = mf_store_write_metadata(st, GOLDEN_FP, GOLDEN_METADATA,
					     strlen(GOLDEN_METADATA));
	if (rc == 0)
		rc = mf_store_run_create(st, GOLDEN_FP, GOLDEN_RUN);
	for (size_t i = 0; rc == 0 && i < GOLDEN_SHARDS; i++)
		rc = write_shard(st, &golden_shards[i]);
	if (rc == 0)
		mf_store_close(st);
	if (rc) {
		fprintf(stderr, "snap_golden_gen: '%s': %s\n", argv[1],
			strerror(rc < 0 ? -rc : rc));
		return 1;
	}
	return 0;
}
