/*
 * fuzz_shard.c - fuzz target for the shard file reader
 * (snapshot/mf_snapshot.h): the input is a whole shard file, put in a
 * memfd and opened with mf_shard_reader_open_fd. When it opens, every
 * chunk is read, every record's place is asked for (version 4), the
 * shard is verified, read with pread and copied, and
 * the answers must agree with each other and with docs/format.md.
 *
 * Every input is opened as shard FUZZ_SHARD of FUZZ_FP and runs twice: as
 * it is, which exercises the checks on open, and once more with its
 * checksums recomputed (chunks, index, trailer, as docs/format.md defines
 * them for the version its header names, bound to that shard since
 * version 2; other fields untouched), so that mutated layouts and chunk bytes get
 * past the checksums to the index checks and the decompressors.
 *
 * Not for: the store folder (paths, renames): only descriptors here.
 */
#include "fuzz.h"
#include "mf_snapshot.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <xxhash.h>

/* Larger shards are only opened: reading them costs time, not coverage. */
#define DEEP_RAW_MAX (16ULL << 20)
#define DEEP_CHUNK_MAX (4ULL << 20)
#define HEADER 16
#define TRAILER_V3 64 /* 96 from version 4 on */
/* the shard every input is opened as; corpus/shard/ files of version 2
 * were written for it */
#define FUZZ_FP                                                                \
	"5eed5eed00000000000000000000000000000000000000000000000000000002"
#define FUZZ_SHARD 0

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t xxh(const uint8_t *p, size_t n, uint64_t seed)
{
	static const uint8_t empty[1];
	return XXH3_64bits_withSeed(n ? p : empty, n, seed);
}

/* The seeds docs/format.md gives: version 1 seeds chunk i with i and the
 * index and trailer with 0; versions 2 and 3 derive them from the shard's
 * key. Version 3's index entries are 32 bytes, earlier ones 24. */
struct seeds {
	bool v2;
	uint64_t key;
	size_t entry;
	size_t trailer;
	bool v4;
};

static struct seeds seeds_of(const uint8_t *f)
{
	uint8_t b[72];
	memcpy(b, FUZZ_FP, 64);
	put_le64(b + 64, FUZZ_SHARD); /* 4 bytes of it are hashed */
	uint64_t v = get_le(f + 8, 4);
	return (struct seeds){v >= 2, xxh(b, 68, 0), v >= 3 ? 32 : 24,
			      v >= 4 ? 96 : TRAILER_V3, v >= 4};
}

static uint64_t chunk_seed(const struct seeds *s, uint32_t i)
{
	uint8_t b[8];
	put_le64(b, i);
	return s->v2 ? xxh(b, 4, s->key) : i;
}

/* Recomputes every checksum that the layout lets us find. */
static void repair(uint8_t *f, size_t size)
{
	if (size < HEADER + TRAILER_V3)
		return;
	struct seeds s = seeds_of(f);
	size_t trailer = s.trailer;
	if (size < HEADER + trailer)
		return;
	uint64_t meta = s.v2 ? s.key : 0;
	uint8_t *t = f + size - trailer;
	uint64_t chunks = get_le(t + 20, 4);
	size_t entry = s.entry;
	if (chunks * entry <= size - HEADER - trailer) {
		size_t idx = size - trailer - (size_t)chunks * entry;
		/* version 4: the ends of variable framings before the index */
		uint64_t framing = s.v4 ? get_le(t + 56, 4) : 0;
		uint64_t ends = framing >= 2 ? get_le(t + 72, 8) : 0;
		if (s.v4 && ends <= (idx - HEADER) / 8)
			put_le64(
			    t + 80,
			    xxh(f + idx - 8 * ends, 8 * ends,
				xxh((const uint8_t *)"records", 7, s.key)));
		for (size_t i = 0; i < chunks; i++) {
			uint8_t *e = f + idx + i * entry;
			uint64_t off = get_le(e, 8), stored = get_le(e + 8, 4);
			if (off <= idx && stored <= idx - off)
				put_le64(e + 16,
					 xxh(f + off, stored,
					     chunk_seed(&s, (uint32_t)i)));
		}
		put_le64(t + 48, xxh(f + idx, (size_t)chunks * entry, meta));
	}
	put_le64(t + trailer - 8, xxh(t, trailer - 8, meta));
}

static void put_file(int fd, const uint8_t *data, size_t size)
{
	FUZZ_CHECK(ftruncate(fd, 0) == 0);
	FUZZ_CHECK(pwrite(fd, data, size, 0) == (ssize_t)size);
}

/* Reads every chunk into all (raw_bytes); returns the first chunk that
 * fails with -EBADMSG, or chunks when none does. */
static uint32_t read_chunks(struct mf_shard_reader *r,
			    const struct mf_shard_stat *st, uint8_t *all)
{
	uint32_t first_bad = st->chunks;
	for (uint32_t i = 0; i < st->chunks; i++) {
		size_t len = mf_shard_reader_chunk_len(r, i);
		uint64_t at = (uint64_t)i * st->chunk_size;
		FUZZ_CHECK(
		    len ==
		    (i + 1 < st->chunks ? st->chunk_size : st->raw_bytes - at));
		uint8_t *buf = malloc(len);
		FUZZ_CHECK(buf);
		ssize_t n = mf_shard_reader_read_chunk(r, i, buf, len);
		FUZZ_CHECK(n == (ssize_t)len || n == -EBADMSG);
		if (n == (ssize_t)len)
			memcpy(all + at, buf, len);
		else if (first_bad == st->chunks)
			first_bad = i;
		FUZZ_CHECK(mf_shard_reader_read_chunk(r, i, buf, len - 1) ==
			   -EINVAL);
		free(buf);
	}
	uint8_t one;
	FUZZ_CHECK(mf_shard_reader_read_chunk(r, st->chunks, &one, 1) ==
		   -EINVAL);
	FUZZ_CHECK(mf_shard_reader_chunk_len(r, st->chunks) == 0);
	return first_bad;
}

/* pread and copy give the chunks' bytes in order, or fail as they do. */
static void check_whole(struct mf_shard_reader *r,
			const struct mf_shard_stat *st, const uint8_t *all,
			bool good, int out_fd)
{
	size_t raw = (size_t)st->raw_bytes;
	uint8_t *buf = malloc(raw + 1);
	FUZZ_CHECK(buf);
	ssize_t n = mf_shard_reader_pread(r, buf, raw + 1, 0);
	FUZZ_CHECK(good ? n == (ssize_t)raw : n == -EBADMSG);
	FUZZ_CHECK(!good || memcmp(buf, all, raw) == 0);
	FUZZ_CHECK(mf_shard_reader_pread(r, buf, 1, raw) == 0);
	if (good && st->chunks > 1) {
		/* two bytes across the first chunk boundary */
		n = mf_shard_reader_pread(r, buf, 2, st->chunk_size - 1);
		FUZZ_CHECK(n == 2 && !memcmp(buf, all + st->chunk_size - 1, 2));
	}
	FUZZ_CHECK(ftruncate(out_fd, 0) == 0 &&
		   lseek(out_fd, 0, SEEK_SET) == 0);
	int rc = mf_shard_reader_copy(r, out_fd, st->chunks > 1 ? 2 : 1);
	FUZZ_CHECK(good ? rc == 0 : rc == -EBADMSG);
	if (good) {
		FUZZ_CHECK(pread(out_fd, buf, raw + 1, 0) == (ssize_t)raw);
		FUZZ_CHECK(memcmp(buf, all, raw) == 0);
	}
	free(buf);
}

/* Version 4's records: each record's place, or -EBADMSG for all of them
 * (the section is checked once, on first use); the records tile the
 * shard's bytes from 0. Returns what they gave. */
static int check_records(struct mf_shard_reader *r,
			 const struct mf_shard_stat *st)
{
	struct mf_records fr;
	uint64_t count, off, len, prev = 0;
	mf_shard_reader_records(r, &fr, &count);
	FUZZ_CHECK((unsigned)fr.framing <= MF_FRAMING_MAX);
	FUZZ_CHECK(count <= st->raw_bytes);
	if (count == 0)
		return 0;
	int first = mf_shard_reader_record(r, 0, &off, &len);
	FUZZ_CHECK(first == 0 || first == -EBADMSG);
	for (uint64_t k = 0; first == 0 && k < count && k < (1u << 16); k++) {
		FUZZ_CHECK(mf_shard_reader_record(r, k, &off, &len) == 0);
		FUZZ_CHECK(off == prev && len > 0 &&
			   off + len <= st->raw_bytes);
		prev = off + len;
	}
	FUZZ_CHECK(mf_shard_reader_record(r, count, &off, &len) == -EINVAL);
	return first;
}

static void check_reader(struct mf_shard_reader *r, size_t size, int out_fd)
{
	struct mf_shard_stat st;
	mf_shard_reader_stat(r, &st);
	FUZZ_CHECK(st.stored_bytes == size);
	FUZZ_CHECK(st.chunk_size >= MF_CHUNK_SIZE_MIN &&
		   st.chunk_size <= MF_CHUNK_SIZE_MAX);
	FUZZ_CHECK(st.chunks ==
		   (st.raw_bytes + st.chunk_size - 1) / st.chunk_size);
	FUZZ_CHECK(st.codec == MF_CODEC_NONE || st.codec == MF_CODEC_ZSTD ||
		   st.codec == MF_CODEC_SNAPPY);
	if (st.raw_bytes > DEEP_RAW_MAX || st.chunk_size > DEEP_CHUNK_MAX)
		return;
	uint8_t *all = malloc(st.raw_bytes ? st.raw_bytes : 1);
	FUZZ_CHECK(all);
	uint32_t first_bad = read_chunks(r, &st, all);
	int records = check_records(r, &st);
	uint32_t bad = UINT32_MAX;
	int rc = mf_shard_reader_verify(r, &bad);
	if (records) /* the records section first */
		FUZZ_CHECK(rc == records && bad == UINT32_MAX);
	else if (first_bad == st.chunks)
		FUZZ_CHECK(rc == 0);
	else
		FUZZ_CHECK(rc == -EBADMSG && bad == first_bad);
	check_whole(r, &st, all, first_bad == st.chunks, out_fd);
	free(all);
}

static void run_one(int in_fd, int out_fd, const uint8_t *data, size_t size)
{
	put_file(in_fd, data, size);
	struct mf_shard_reader *r = NULL;
	int rc = mf_shard_reader_open_fd(in_fd, FUZZ_FP, FUZZ_SHARD, &r);
	FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
	if (rc == 0) {
		check_reader(r, size, out_fd);
		mf_shard_reader_close(r);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int in_fd = -1, out_fd = -1;
	if (in_fd < 0) {
		in_fd = memfd_create("fuzz-shard-in", MFD_CLOEXEC);
		out_fd = memfd_create("fuzz-shard-out", MFD_CLOEXEC);
		FUZZ_CHECK(in_fd >= 0 && out_fd >= 0);
	}
	run_one(in_fd, out_fd, data, size);
	uint8_t *fixed = malloc(size ? size : 1);
	FUZZ_CHECK(fixed);
	if (size)
		memcpy(fixed, data, size);
	repair(fixed, size);
	if (size && memcmp(fixed, data, size) != 0)
		run_one(in_fd, out_fd, fixed, size);
	free(fixed);
	return 0;
}
