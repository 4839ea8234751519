/*
 * test_snap_corrupt.c - damaged shard files never yield wrong bytes: every
 * byte flipped in turn, truncations, zeroed chunks, and fields changed with
 * their checksums recomputed (so only the consistency checks can catch
 * them). Every byte of a shard file is covered by a check (docs/format.md:
 * there are no unused bytes), so every flip must be detected.
 *
 * Not for: well-formed files (test_snap_roundtrip.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "mf_snapshot.h"
#include "snap_testutil.h"

#define CS 4096
#define RAW (2 * CS + 1000)
#define TRAILER 96
#define ENTRY 32

struct fixture {
	struct tu_store s;
	uint8_t src[4 * CS];
};

static int setup(void **state)
{
	if (tu_fixture_setup(state, sizeof(struct fixture)) != 0)
		return -1;
	struct fixture *f = *state;
	tu_fill(f->src, sizeof(f->src), 42, true);
	return 0;
}

static const struct mf_codec_cfg cfgs[] = {
    {MF_CODEC_ZSTD, 3, CS, 1, false},
    {MF_CODEC_SNAPPY, 0, CS, 1, false},
    {MF_CODEC_NONE, 0, CS, 1, false},
};

/* Writes a shard of src with cfg and reads its file back. */
static void make_file(struct fixture *f, const struct mf_codec_cfg *cfg,
		      size_t len, uint8_t **data, size_t *n)
{
	assert_int_equal(tu_write_shard(f->s.st, 0, cfg, f->src, len, NULL), 0);
	char path[512];
	tu_shard_path(f->s.dir, 0, path, sizeof(path));
	assert_int_equal(tu_read_file(path, data, n), 0);
}

/* Opens bytes as a shard through a file; 0 with *r, or open's error. */
static int open_bytes(struct fixture *f, const uint8_t *data, size_t n,
		      struct mf_shard_reader **r)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/victim.mfs", f->s.dir);
	assert_int_equal(tu_write_file(path, data, n), 0);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	int rc = mf_shard_reader_open_fd(fd, TU_FP, 0, r);
	close(fd);
	return rc;
}

/*
 * Reads everything r holds. Any read either fails with -EBADMSG or gives
 * exactly the source bytes. Returns true when some read failed.
 */
static bool read_all_checked(struct mf_shard_reader *r, const uint8_t *src,
			     size_t len)
{
	static uint8_t buf[RAW + CS];
	bool bad = false;
	struct mf_shard_stat s;
	mf_shard_reader_stat(r, &s);
	/* the trailer was accepted, so its sizes are the real ones */
	assert_int_equal(s.raw_bytes, len);
	for (uint32_t i = 0; i < s.chunks; i++) {
		ssize_t n = mf_shard_reader_read_chunk(r, i, buf, CS);
		if (n < 0) {
			assert_int_equal(n, -EBADMSG);
			bad = true;
			continue;
		}
		assert_int_equal(n, mf_shard_reader_chunk_len(r, i));
		assert_memory_equal(buf, src + (size_t)i * CS, (size_t)n);
	}
	ssize_t n = mf_shard_reader_pread(r, buf, sizeof(buf), 0);
	if (n < 0)
		assert_int_equal(n, -EBADMSG);
	else
		assert_memory_equal(buf, src, len);
	uint32_t at = UINT32_MAX;
	int v = mf_shard_reader_verify(r, &at);
	assert_true(v == 0 || (v == -EBADMSG && at < s.chunks));
	assert_int_equal(v != 0, bad);
	assert_int_equal(n < 0, bad);
	return bad;
}

static void flip_every_byte(struct fixture *f, const struct mf_codec_cfg *cfg)
{
	uint8_t *data;
	size_t n;
	make_file(f, cfg, RAW, &data, &n);
	char path[512];
	snprintf(path, sizeof(path), "%s/flip.mfs", f->s.dir);
	assert_int_equal(tu_write_file(path, data, n), 0);
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	static const uint8_t masks[] = {0x01, 0x80, 0xff};
	for (size_t p = 0; p < n; p++) {
		for (int m = 0; m < 3; m++) {
			uint8_t b = data[p] ^ masks[m];
			assert_int_equal(pwrite(fd, &b, 1, (off_t)p), 1);
			struct mf_shard_reader *r;
			int rc = mf_shard_reader_open_fd(fd, TU_FP, 0, &r);
			bool caught = rc != 0;
			if (rc)
				assert_int_equal(rc, -EBADMSG);
			else {
				caught = read_all_checked(r, f->src, RAW);
				mf_shard_reader_close(r);
			}
			if (!caught)
				fail_msg("flip 0x%02x at byte %zu of %zu not "
					 "detected (codec %d)",
					 masks[m], p, n, cfg->codec);
		}
		assert_int_equal(pwrite(fd, &data[p], 1, (off_t)p), 1);
	}
	close(fd);
	free(data);
}

static void test_flip_zstd(void **state)
{
	flip_every_byte(*state, &cfgs[0]);
}

static void test_flip_snappy(void **state)
{
	flip_every_byte(*state, &cfgs[1]);
}

static void test_flip_none(void **state)
{
	flip_every_byte(*state, &cfgs[2]);
}

static void test_flip_empty(void **state)
{
	struct fixture *f = *state;
	uint8_t *data;
	size_t n;
	make_file(f, &cfgs[0], 0, &data, &n);
	assert_int_equal(n, 16 + TRAILER);
	for (size_t p = 0; p < n; p++) {
		data[p] ^= 0x10;
		struct mf_shard_reader *r;
		assert_int_equal(open_bytes(f, data, n, &r), -EBADMSG);
		data[p] ^= 0x10;
	}
	free(data);
}

static void test_truncated(void **state)
{
	struct fixture *f = *state;
	for (int c = 0; c < 3; c++) {
		uint8_t *data;
		size_t n;
		make_file(f, &cfgs[c], RAW, &data, &n);
		size_t cuts[] = {0,	 1,	    15,	   16,	   17,
				 79,	 80,	    n / 2, n - 65, n - 64,
				 n - 63, n - ENTRY, n - 1};
		for (size_t k = 0; k < sizeof(cuts) / sizeof(*cuts); k++) {
			struct mf_shard_reader *r;
			assert_int_equal(open_bytes(f, data, cuts[k], &r),
					 -EBADMSG);
		}
		/* one byte too many is as wrong as one too few */
		uint8_t *more = malloc(n + 1);
		memcpy(more, data, n);
		more[n] = 0;
		struct mf_shard_reader *r;
		assert_int_equal(open_bytes(f, more, n + 1, &r), -EBADMSG);
		memset(more, 0, n);
		assert_int_equal(open_bytes(f, more, n, &r), -EBADMSG);
		assert_int_equal(open_bytes(f, data, n, &r), 0);
		mf_shard_reader_close(r);
		free(more);
		free(data);
	}
}

/* Chunk i's stored offset and length, from the file's own index. */
static void chunk_span(const uint8_t *data, size_t n, uint32_t chunks,
		       uint32_t i, size_t *off, size_t *len)
{
	const uint8_t *e =
	    data + n - TRAILER - (size_t)chunks * ENTRY + (size_t)i * ENTRY;
	uint64_t o = 0;
	uint32_t l = 0;
	for (int k = 7; k >= 0; k--)
		o = (o << 8) | e[k];
	for (int k = 11; k >= 8; k--)
		l = (l << 8) | e[k];
	*off = (size_t)o;
	*len = l;
}

static void test_zeroed_chunk(void **state)
{
	struct fixture *f = *state;
	for (int c = 0; c < 3; c++) {
		uint8_t *data;
		size_t n, off, len;
		make_file(f, &cfgs[c], RAW, &data, &n);
		chunk_span(data, n, 3, 1, &off, &len);
		memset(data + off, 0, len);
		struct mf_shard_reader *r;
		assert_int_equal(open_bytes(f, data, n, &r), 0);
		uint8_t buf[CS];
		assert_int_equal(mf_shard_reader_read_chunk(r, 1, buf, CS),
				 -EBADMSG);
		assert_int_equal(mf_shard_reader_read_chunk(r, 0, buf, CS), CS);
		assert_memory_equal(buf, f->src, CS);
		assert_int_equal(mf_shard_reader_read_chunk(r, 2, buf, CS),
				 RAW - 2 * CS);
		assert_int_equal(mf_shard_reader_pread(r, buf, 100, CS - 50),
				 -EBADMSG);
		uint32_t bad = 99;
		assert_int_equal(mf_shard_reader_verify(r, &bad), -EBADMSG);
		assert_int_equal(bad, 1);
		for (unsigned t = 1; t <= 2; t++) {
			/* the copy stops at the bad chunk, after good bytes */
			char path[512];
			snprintf(path, sizeof(path), "%s/out", f->s.dir);
			int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
			assert_int_equal(mf_shard_reader_copy(r, fd, t),
					 -EBADMSG);
			struct stat sb;
			fstat(fd, &sb);
			assert_int_equal(sb.st_size, CS);
			close(fd);
		}
		mf_shard_reader_close(r);
		free(data);
	}
}

static void test_verify_finds_bad_chunk(void **state)
{
	struct fixture *f = *state;
	uint8_t *data;
	size_t n, off, len;
	/* 4 chunks: 3 full and a short one */
	make_file(f, &cfgs[0], 3 * CS + 10, &data, &n);
	for (uint32_t victim = 0; victim < 4; victim++) {
		chunk_span(data, n, 4, victim, &off, &len);
		data[off + len / 2] ^= 0x04;
		struct mf_shard_reader *r;
		assert_int_equal(open_bytes(f, data, n, &r), 0);
		uint32_t bad = 99;
		assert_int_equal(mf_shard_reader_verify(r, &bad), -EBADMSG);
		assert_int_equal(bad, victim);
		mf_shard_reader_close(r);
		data[off + len / 2] ^= 0x04;
	}
	free(data);
}

/* ---- fields changed with valid checksums ---- */

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
	for (int k = 0; k < bytes; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int k = bytes - 1; k >= 0; k--)
		v = (v << 8) | p[k];
	return v;
}

/* Recomputes the index checksum over the original index position and
 * the trailer checksum, as docs/format.md defines them for shard 0 of
 * TU_FP (make_file's). */
static void reseal(uint8_t *data, size_t n, size_t idx_off, size_t idx_len)
{
	uint8_t *t = data + n - TRAILER;
	uint64_t key = tu_v2_key(TU_FP, 0);
	put_le(t + 48, XXH3_64bits_withSeed(data + idx_off, idx_len, key), 8);
	put_le(t + 88, XXH3_64bits_withSeed(t, 88, key), 8);
}

struct mutation {
	const char *what;
	size_t at; /* from the trailer's start (trailer) or the index's */
	bool in_index;
	int bytes;
	int64_t delta; /* added to the field */
};

static const struct mutation mutations[] = {
    {"trailer version", 8, false, 4, 1},
    {"trailer version down", 8, false, 4, -1},
    {"trailer codec", 12, false, 4, 7},
    {"trailer level", 16, false, 4, 40},
    {"trailer chunk count", 20, false, 4, 1},
    {"trailer chunk count down", 20, false, 4, -1},
    {"trailer chunk size", 24, false, 8, 1},
    {"trailer chunk size tiny", 24, false, 8, -4000},
    {"trailer raw size", 32, false, 8, 1},
    {"trailer raw size down", 32, false, 8, -1},
    {"trailer index offset", 40, false, 8, -1},
    {"index chunk 0 offset", 0, true, 8, 1},
    {"index chunk 1 offset", ENTRY, true, 8, -1},
    {"index chunk 1 stored length", ENTRY + 8, true, 4, 1},
    {"index chunk 2 stored length", 2 * ENTRY + 8, true, 4, -1},
    {"index chunk 0 raw length", 12, true, 4, -1},
    {"index chunk 2 raw length", 2 * ENTRY + 12, true, 4, 1},
    {"index chunk 1 checksum", ENTRY + 16, true, 8, 1},
    /* version 3: a codec the trailer's does not allow, a level above
     * the trailer's (the ceiling) or not a level of the codec */
    {"index chunk 0 codec", 24, true, 4, 7},
    {"index chunk 1 codec", ENTRY + 24, true, 4, 2},
    {"index chunk 1 codec down", ENTRY + 24, true, 4, -1},
    {"index chunk 2 level", 2 * ENTRY + 28, true, 4, 40},
    {"index chunk 0 level", 28, true, 4, -200000},
    /* version 4: the records fields of a shard without records */
    {"trailer framing", 56, false, 4, 1},
    {"trailer framing flags", 60, false, 4, 1},
    {"trailer record size", 64, false, 8, 1},
    {"trailer record count", 72, false, 8, 1},
    {"trailer records checksum", 80, false, 8, 1},
};

static void test_resealed_fields(void **state)
{
	struct fixture *f = *state;
	for (int c = 0; c < 3; c++) {
		uint8_t *data;
		size_t n;
		make_file(f, &cfgs[c], RAW, &data, &n);
		size_t idx_off = n - TRAILER - 3 * ENTRY;
		uint8_t *copy = malloc(n);
		for (size_t m = 0; m < sizeof(mutations) / sizeof(*mutations);
		     m++) {
			const struct mutation *mu = &mutations[m];
			memcpy(copy, data, n);
			uint8_t *p = (mu->in_index ? copy + idx_off
						   : copy + n - TRAILER) +
			    mu->at;
			put_le(p, get_le(p, mu->bytes) + (uint64_t)mu->delta,
			       mu->bytes);
			reseal(copy, n, idx_off, 3 * ENTRY);
			struct mf_shard_reader *r;
			int rc = open_bytes(f, copy, n, &r);
			if (rc == 0) {
				/* only a chunk checksum may pass open */
				assert_true(read_all_checked(r, f->src, RAW));
				mf_shard_reader_close(r);
				assert_string_equal(mu->what,
						    "index chunk 1 checksum");
			} else {
				assert_int_equal(rc, -EBADMSG);
			}
		}
		/* and resealing alone changes nothing */
		memcpy(copy, data, n);
		reseal(copy, n, idx_off, 3 * ENTRY);
		assert_memory_equal(copy, data, n);
		free(copy);
		free(data);
	}
}

/* Two full chunks swapped with their index entries: the checksum seed
 * (derived from the chunk's index) tells them apart. */
static void test_swapped_chunks(void **state)
{
	struct fixture *f = *state;
	uint8_t *data;
	size_t n;
	make_file(f, &cfgs[2], RAW, &data, &n);
	size_t idx_off = n - TRAILER - 3 * ENTRY;
	uint8_t tmp[CS];
	memcpy(tmp, data + 16, CS);
	memcpy(data + 16, data + 16 + CS, CS);
	memcpy(data + 16 + CS, tmp, CS);
	uint8_t sum[8];
	memcpy(sum, data + idx_off + 16, 8);
	memcpy(data + idx_off + 16, data + idx_off + ENTRY + 16, 8);
	memcpy(data + idx_off + ENTRY + 16, sum, 8);
	reseal(data, n, idx_off, 3 * ENTRY);
	struct mf_shard_reader *r;
	assert_int_equal(open_bytes(f, data, n, &r), 0);
	assert_int_equal(mf_shard_reader_read_chunk(r, 0, tmp, CS), -EBADMSG);
	assert_int_equal(mf_shard_reader_read_chunk(r, 1, tmp, CS), -EBADMSG);
	mf_shard_reader_close(r);
	free(data);
}

/* Each check names itself: the reason says which one failed. */
static void test_reasons(void **state)
{
	struct fixture *f = *state;
	uint8_t *data;
	size_t n, off, len;
	uint8_t buf[CS];
	struct mf_shard_reader *r;
	make_file(f, &cfgs[0], RAW, &data, &n);
	chunk_span(data, n, 3, 1, &off, &len);
	data[off + len / 2] ^= 0x10;
	assert_int_equal(open_bytes(f, data, n, &r), 0);
	mf_corrupt_clear();
	assert_int_equal(mf_shard_reader_read_chunk(r, 1, buf, CS), -EBADMSG);
	assert_string_equal(mf_corrupt_reason(), "chunk checksum");
	assert_non_null(strstr(mf_corrupt_where(), "chunk_codec.c:"));
	mf_shard_reader_close(r);
	data[off + len / 2] ^= 0x10;
	/* the trailer's magic, then a byte of the index */
	data[n - TRAILER] ^= 0x01;
	assert_int_equal(open_bytes(f, data, n, &r), -EBADMSG);
	assert_string_equal(mf_corrupt_reason(), "trailer magic");
	data[n - TRAILER] ^= 0x01;
	data[n - TRAILER - 1] ^= 0x01;
	assert_int_equal(open_bytes(f, data, n, &r), -EBADMSG);
	assert_string_equal(mf_corrupt_reason(), "index checksum");
	free(data);
}

static void test_not_a_file(void **state)
{
	struct fixture *f = *state;
	struct mf_shard_reader *r;
	int fd = open(f->s.dir, O_RDONLY | O_DIRECTORY);
	assert_int_equal(mf_shard_reader_open_fd(fd, TU_FP, 0, &r), -EBADMSG);
	close(fd);
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(mf_shard_reader_open_fd(p[0], TU_FP, 0, &r), -EBADMSG);
	close(p[0]);
	close(p[1]);
	assert_int_equal(mf_shard_reader_open_fd(-1, TU_FP, 0, &r), -EBADF);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, tu_store_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_flip_zstd),
	    T(test_flip_snappy),
	    T(test_flip_none),
	    T(test_flip_empty),
	    T(test_truncated),
	    T(test_zeroed_chunk),
	    T(test_verify_finds_bad_chunk),
	    T(test_resealed_fields),
	    T(test_swapped_chunks),
	    T(test_not_a_file),
	    T(test_reasons),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
