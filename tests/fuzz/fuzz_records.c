/*
 * fuzz_records.c - fuzz target for the record index decoder: the parser
 * that turns a stage's output into record ends as a shard is written
 * (snapshot/records.c, through mf_shard_writer_set_records), and the
 * records section it stores, read back by mf_shard_reader_open.
 *
 * Input: byte 0 picks the framing (and, for fixed records, the size and
 * tail), byte 1 the size of the pieces the output is written in; for
 * records: index, the next 8 * (byte 2 % 32) bytes are the ends; the rest
 * is the output. Each input is written twice, at once and in pieces: the
 * outcome and its message must be the same (the parser may not depend on
 * how the bytes come), and a committed shard must read back with ends
 * that tile its bytes as docs/format.md says.
 *
 * Not for: the rest of the shard file (fuzz_shard.c).
 */
#include "fuzz.h"
#include "mf_snapshot.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#define FP "5eed5eed00000000000000000000000000000000000000000000000000000005"
#define RUN "0000000000000000000000000000f00d"

static struct mf_store *store;
static char dir[] = "/tmp/mf-fuzz-records.XXXXXX";

/* The store goes when the process ends normally. */
static void store_remove(void)
{
	char path[sizeof(dir) + 16];
	(void)mf_store_snapshot_remove(store, FP);
	mf_store_close(store);
	snprintf(path, sizeof(path), "%s/snapshots", dir);
	rmdir(path);
	rmdir(dir);
}

static void store_open(void)
{
	if (store)
		return;
	FUZZ_CHECK(mkdtemp(dir));
	FUZZ_CHECK(mf_store_open(dir, true, &store) == 0);
	FUZZ_CHECK(mf_store_run_create(store, FP, RUN) == 0);
	atexit(store_remove);
}

struct outcome {
	int rc;
	char why[256];
	uint64_t count;
};

static void write_once(uint32_t shard, const struct mf_records *r,
		       const uint64_t *ends, size_t n_ends, const uint8_t *out,
		       size_t len, size_t piece, struct outcome *o)
{
	struct mf_codec_cfg cfg = {MF_CODEC_NONE, 0, 4096, 1, false};
	struct mf_shard_writer *w;
	FUZZ_CHECK(mf_shard_writer_open(store, FP, RUN, shard, &cfg, &w) == 0);
	FUZZ_CHECK(mf_shard_writer_set_records(w, r) == 0);
	int rc = 0;
	for (size_t off = 0; rc == 0 && off < len;) {
		size_t k = len - off < piece ? len - off : piece;
		rc = mf_shard_writer_write(w, out + off, k);
		off += k;
	}
	if (rc == 0 && r->framing == MF_FRAMING_INDEX)
		rc = mf_shard_writer_set_ends(w, ends, n_ends);
	if (rc == 0)
		rc = mf_shard_writer_end_records(w);
	snprintf(o->why, sizeof(o->why), "%s",
		 mf_shard_writer_framing_error(w));
	FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
	FUZZ_CHECK((rc == 0) == (o->why[0] == '\0'));
	o->rc = rc;
	if (rc) {
		mf_shard_writer_abort(w);
		return;
	}
	FUZZ_CHECK(mf_shard_writer_commit(w, NULL) == 0);
}

/* The committed shard's records tile its bytes as the format says. */
static void check_read(uint32_t shard, const struct mf_records *r, size_t len,
		       struct outcome *o)
{
	struct mf_shard_reader *rd;
	FUZZ_CHECK(mf_shard_reader_open(store, FP, RUN, shard, &rd) == 0);
	struct mf_records got;
	uint64_t count, off, rlen, prev = 0;
	mf_shard_reader_records(rd, &got, &count);
	FUZZ_CHECK(got.framing == r->framing);
	if (r->framing == MF_FRAMING_FIXED)
		FUZZ_CHECK(count == len / r->size);
	for (uint64_t k = 0; k < count; k++) {
		FUZZ_CHECK(mf_shard_reader_record(rd, k, &off, &rlen) == 0);
		FUZZ_CHECK(off == prev && rlen > 0 && off + rlen <= len);
		prev = off + rlen;
	}
	if (r->framing == MF_FRAMING_LINES ||
	    r->framing == MF_FRAMING_TFRECORD || r->framing == MF_FRAMING_INDEX)
		FUZZ_CHECK(prev == len);
	FUZZ_CHECK(mf_shard_reader_record(rd, count, &off, &rlen) == -EINVAL);
	mf_shard_reader_close(rd);
	o->count = count;
	FUZZ_CHECK(mf_store_shard_remove(store, FP, RUN, shard) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	store_open();
	static const enum mf_framing kinds[] = {
	    MF_FRAMING_FIXED, MF_FRAMING_LINES, MF_FRAMING_TFRECORD,
	    MF_FRAMING_TAR, MF_FRAMING_INDEX};
	struct mf_records r = {kinds[data[0] % 5], 0, false};
	if (r.framing == MF_FRAMING_FIXED) {
		r.size = 1 + (data[0] >> 3) % 32;
		r.drop_tail = data[0] & 4;
	}
	size_t piece = 1 + data[1] % 97;
	const uint8_t *out = data + 3;
	size_t len = size - 3;
	uint64_t ends[32];
	size_t n_ends = 0;
	if (r.framing == MF_FRAMING_INDEX) {
		n_ends = data[2] % 32;
		if (8 * n_ends > len)
			n_ends = len / 8;
		for (size_t i = 0; i < n_ends; i++) {
			uint64_t v = 0;
			for (int b = 7; b >= 0; b--)
				v = (v << 8) | out[8 * i + (size_t)b];
			ends[i] = v % (len + 2);
		}
		out += 8 * n_ends;
		len -= 8 * n_ends;
	}
	struct outcome whole = {0}, pieces = {0};
	write_once(0, &r, ends, n_ends, out, len, len ? len : 1, &whole);
	if (whole.rc == 0)
		check_read(0, &r, len, &whole);
	write_once(1, &r, ends, n_ends, out, len, piece, &pieces);
	if (pieces.rc == 0)
		check_read(1, &r, len, &pieces);
	FUZZ_CHECK(whole.rc == pieces.rc);
	FUZZ_CHECK(strcmp(whole.why, pieces.why) == 0);
	FUZZ_CHECK(whole.count == pieces.count);
	return 0;
}
