/*
 * test_snap_binding.c - a shard file belongs to one shard of one
 * fingerprint: a file copied or restored under another shard's name, or
 * another fingerprint's, is refused (-EBADMSG at open or at its first
 * read), never served as that shard. The checksums are the ones
 * docs/format.md defines for version 2, recomputed here with xxHash alone,
 * and each chunk's is bound on its own, not only through the trailer.
 *
 * Not for: damaged bytes (test_snap_corrupt.c) or old versions
 * (test_snap_golden.c).
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
#include <unistd.h>
#include <xxhash.h>

#include "mf_snapshot.h"
#include "snap_testutil.h"

#define CS 4096
#define RAW (3 * CS + 700)
#define CHUNKS 4
#define ENTRY 32
#define TRAILER 96

struct fixture {
	struct tu_store s;
	uint8_t src[RAW];
};

static int setup(void **state)
{
	if (tu_fixture_setup(state, sizeof(struct fixture)) != 0)
		return -1;
	struct fixture *f = *state;
	tu_fill(f->src, sizeof(f->src), 7, true);
	return 0;
}

static const struct mf_codec_cfg cfgs[] = {
    {MF_CODEC_NONE, 0, CS, 1, false},
    {MF_CODEC_ZSTD, 3, CS, 1, false},
    {MF_CODEC_SNAPPY, 0, CS, 2, false},
};

/* Copies the file of shard `from` of fp_a to shard `to` of fp_b. */
static void copy_shard(struct fixture *f, const char *fp_a, uint32_t from,
		       const char *fp_b, uint32_t to)
{
	char a[512], b[512];
	snprintf(a, sizeof(a), "%s/snapshots/%s/%s/shard-%05u.mfs", f->s.dir,
		 fp_a, TU_RUN, (unsigned)from);
	snprintf(b, sizeof(b), "%s/snapshots/%s/%s/shard-%05u.mfs", f->s.dir,
		 fp_b, TU_RUN, (unsigned)to);
	uint8_t *d;
	size_t n;
	assert_int_equal(tu_read_file(a, &d, &n), 0);
	assert_int_equal(mf_store_run_create(f->s.st, fp_b, TU_RUN), 0);
	assert_int_equal(tu_write_file(b, d, n), 0);
	free(d);
}

/* Shard `shard` of fp is refused: at open, or else at every read. */
static void assert_refused(struct fixture *f, const char *fp, uint32_t shard)
{
	struct mf_shard_reader *r;
	int rc = mf_shard_reader_open(f->s.st, fp, TU_RUN, shard, &r);
	if (rc) {
		assert_int_equal(rc, -EBADMSG);
		return;
	}
	uint8_t buf[CS];
	assert_int_equal(mf_shard_reader_read_chunk(r, 0, buf, CS), -EBADMSG);
	assert_int_equal(mf_shard_reader_pread(r, buf, 10, 0), -EBADMSG);
	assert_int_equal(mf_shard_reader_verify(r, NULL), -EBADMSG);
	mf_shard_reader_close(r);
	fail_msg("shard %u of %.8s opened from another shard's file",
		 (unsigned)shard, fp);
}

/* Shard `shard` of TU_FP reads back as src. */
static void assert_reads(struct fixture *f, uint32_t shard)
{
	struct mf_shard_reader *r;
	static uint8_t buf[RAW + 1];
	assert_int_equal(
	    mf_shard_reader_open(f->s.st, TU_FP, TU_RUN, shard, &r), 0);
	assert_int_equal(mf_shard_reader_pread(r, buf, sizeof(buf), 0), RAW);
	assert_memory_equal(buf, f->src, RAW);
	assert_int_equal(mf_shard_reader_verify(r, NULL), 0);
	mf_shard_reader_close(r);
}

/* Shard 0 of A, written once, copied as shard 1 of A and shard 0 of B:
 * the same bytes, the same sizes, only the name differs. */
static void test_copied_file_refused(void **state)
{
	struct fixture *f = *state;
	for (size_t c = 0; c < sizeof(cfgs) / sizeof(*cfgs); c++) {
		assert_int_equal(
		    tu_write_shard(f->s.st, 0, &cfgs[c], f->src, RAW, NULL), 0);
		copy_shard(f, TU_FP, 0, TU_FP, 1);
		copy_shard(f, TU_FP, 0, TU_FP2, 0);
		copy_shard(f, TU_FP, 0, TU_FP2, 1);
		assert_reads(f, 0);
		assert_refused(f, TU_FP, 1);
		assert_refused(f, TU_FP2, 0);
		assert_refused(f, TU_FP2, 1);
		assert_int_equal(mf_store_snapshot_remove(f->s.st, TU_FP), 0);
		assert_int_equal(mf_store_snapshot_remove(f->s.st, TU_FP2), 0);
	}
}

/* An empty shard has no chunk: its trailer and index alone must carry
 * the binding. */
static void test_copied_empty_refused(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(tu_write_shard(f->s.st, 3, &cfgs[1], f->src, 0, NULL),
			 0);
	copy_shard(f, TU_FP, 3, TU_FP, 4);
	copy_shard(f, TU_FP, 3, TU_FP2, 3);
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP, TU_RUN, 3, &r),
			 0);
	mf_shard_reader_close(r);
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP, TU_RUN, 4, &r),
			 -EBADMSG);
	assert_int_equal(mf_shard_reader_open(f->s.st, TU_FP2, TU_RUN, 3, &r),
			 -EBADMSG);
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int k = bytes - 1; k >= 0; k--)
		v = (v << 8) | p[k];
	return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int k = 0; k < 8; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/* Reads the file of shard `shard` of TU_FP. */
static void read_shard_file(struct fixture *f, uint32_t shard, uint8_t **d,
			    size_t *n)
{
	char path[512];
	tu_shard_path(f->s.dir, shard, path, sizeof(path));
	assert_int_equal(tu_read_file(path, d, n), 0);
}

/* Every checksum of the file is the one docs/format.md gives version 4
 * (seeded as version 2) for shard `shard` of fp, and each index entry
 * names the trailer's codec and level (a writer that does not adapt);
 * a shard without records has the records checksum of no bytes. */
static void assert_documented(const uint8_t *d, size_t n, const char *fp,
			      uint32_t shard)
{
	assert_int_equal(get_le(d + 8, 4), 4);
	const uint8_t *t = d + n - TRAILER;
	assert_int_equal(get_le(t + 8, 4), 4);
	assert_int_equal(get_le(t + 56, 4), 0);
	assert_int_equal(get_le(t + 72, 8), 0);
	assert_int_equal(
	    get_le(t + 80, 8),
	    XXH3_64bits_withSeed(
		"", 0,
		XXH3_64bits_withSeed("records", 7, tu_v2_key(fp, shard))));
	uint32_t chunks = (uint32_t)get_le(t + 20, 4);
	size_t idx = n - TRAILER - (size_t)chunks * ENTRY;
	uint64_t key = tu_v2_key(fp, shard);
	for (uint32_t i = 0; i < chunks; i++) {
		const uint8_t *e = d + idx + (size_t)i * ENTRY;
		uint64_t off = get_le(e, 8), stored = get_le(e + 8, 4);
		assert_int_equal(
		    get_le(e + 16, 8),
		    XXH3_64bits_withSeed(d + off, stored,
					 tu_v2_chunk_seed(key, i)));
		assert_int_equal(get_le(e + 24, 4), get_le(t + 12, 4));
		assert_int_equal(get_le(e + 28, 4), get_le(t + 16, 4));
	}
	assert_int_equal(
	    get_le(t + 48, 8),
	    XXH3_64bits_withSeed(d + idx, (size_t)chunks * ENTRY, key));
	assert_int_equal(get_le(t + 88, 8), XXH3_64bits_withSeed(t, 88, key));
}

static void test_checksums_as_documented(void **state)
{
	struct fixture *f = *state;
	for (size_t c = 0; c < sizeof(cfgs) / sizeof(*cfgs); c++) {
		for (uint32_t shard = 0; shard < 2; shard++) {
			uint32_t k = shard * 100000 + (uint32_t)c;
			assert_int_equal(tu_write_shard(f->s.st, k, &cfgs[c],
							f->src, RAW, NULL),
					 0);
			uint8_t *d;
			size_t n;
			read_shard_file(f, k, &d, &n);
			assert_int_equal(get_le(d + n - TRAILER + 20, 4),
					 CHUNKS);
			assert_documented(d, n, TU_FP, k);
			free(d);
		}
	}
}

/* Opens bytes as shard `shard` of fp through a descriptor. */
static int open_bytes_as(struct fixture *f, const uint8_t *d, size_t n,
			 const char *fp, uint32_t shard,
			 struct mf_shard_reader **r)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/loose.mfs", f->s.dir);
	assert_int_equal(tu_write_file(path, d, n), 0);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	int rc = mf_shard_reader_open_fd(fd, fp, shard, r);
	close(fd);
	return rc;
}

static void test_open_fd_binding(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(
	    tu_write_shard(f->s.st, 6, &cfgs[1], f->src, RAW, NULL), 0);
	uint8_t *d;
	size_t n;
	read_shard_file(f, 6, &d, &n);
	struct mf_shard_reader *r;
	assert_int_equal(open_bytes_as(f, d, n, TU_FP, 6, &r), 0);
	mf_shard_reader_close(r);
	assert_int_equal(open_bytes_as(f, d, n, TU_FP, 7, &r), -EBADMSG);
	assert_int_equal(open_bytes_as(f, d, n, TU_FP2, 6, &r), -EBADMSG);
	/* the binding needs a fingerprint */
	assert_int_equal(open_bytes_as(f, d, n, NULL, 6, &r), -EINVAL);
	assert_int_equal(open_bytes_as(f, d, n, "0123", 6, &r), -EINVAL);
	assert_int_equal(open_bytes_as(f, d, n, TU_RUN TU_RUN, 6, &r),
			 -EBADMSG);
	char upper[] = TU_FP;
	upper[10] = 'A';
	assert_int_equal(open_bytes_as(f, d, n, upper, 6, &r), -EINVAL);
	free(d);
}

/*
 * Chunks spliced from shard 0's file into shard 1's (index entries with
 * them), the index and trailer checksums then made right for shard 1: the
 * file opens as shard 1, but every spliced chunk is refused, since its
 * own checksum names shard 0. Both files hold the same bytes.
 */
static void test_spliced_chunks_refused(void **state)
{
	struct fixture *f = *state;
	for (size_t c = 0; c < sizeof(cfgs) / sizeof(*cfgs); c++) {
		assert_int_equal(
		    tu_write_shard(f->s.st, 0, &cfgs[c], f->src, RAW, NULL), 0);
		assert_int_equal(
		    tu_write_shard(f->s.st, 1, &cfgs[c], f->src, RAW, NULL), 0);
		uint8_t *a, *b;
		size_t na, nb;
		read_shard_file(f, 0, &a, &na);
		read_shard_file(f, 1, &b, &nb);
		assert_int_equal(na, nb);
		/* same bytes, but not one chunk checksum in common */
		size_t idx = na - TRAILER - CHUNKS * ENTRY;
		for (int i = 0; i < CHUNKS; i++)
			assert_true(get_le(a + idx + i * ENTRY + 16, 8) !=
				    get_le(b + idx + i * ENTRY + 16, 8));
		/* shard 0's chunks 1 and 3 into shard 1's file */
		for (int i = 1; i < CHUNKS; i += 2)
			memcpy(b + idx + i * ENTRY + 16,
			       a + idx + i * ENTRY + 16, 8);
		uint64_t key = tu_v2_key(TU_FP, 1);
		uint8_t *t = b + nb - TRAILER;
		put_le64(t + 48,
			 XXH3_64bits_withSeed(b + idx, CHUNKS * ENTRY, key));
		put_le64(t + 88, XXH3_64bits_withSeed(t, 88, key));
		struct mf_shard_reader *r;
		assert_int_equal(open_bytes_as(f, b, nb, TU_FP, 1, &r), 0);
		static uint8_t buf[CS];
		for (uint32_t i = 0; i < CHUNKS; i++) {
			ssize_t got = mf_shard_reader_read_chunk(r, i, buf, CS);
			if (i % 2) {
				assert_int_equal(got, -EBADMSG);
				continue;
			}
			assert_int_equal(got, mf_shard_reader_chunk_len(r, i));
			assert_memory_equal(buf, f->src + i * CS, (size_t)got);
		}
		uint32_t bad = 99;
		assert_int_equal(mf_shard_reader_verify(r, &bad), -EBADMSG);
		assert_int_equal(bad, 1);
		mf_shard_reader_close(r);
		free(a);
		free(b);
	}
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, tu_store_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_copied_file_refused),     T(test_copied_empty_refused),
	    T(test_checksums_as_documented), T(test_open_fd_binding),
	    T(test_spliced_chunks_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
