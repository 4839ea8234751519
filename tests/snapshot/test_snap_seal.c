/*
 * test_snap_seal.c - sealing a shard apart from its commit: a sealed temp
 * file reads back every byte through its descriptor before it is durable,
 * after the commit renamed it, and after a failed or dropped commit
 * unlinked it; a sealed writer takes no more bytes and cannot be sealed
 * twice.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "snap_testutil.h"

#define LEN (300 * 1024 + 17)

static const struct mf_codec_cfg cfgs[] = {
    {MF_CODEC_NONE, 0, 64 * 1024, 1, false},
    {MF_CODEC_ZSTD, 3, 64 * 1024, 3, true},
    {MF_CODEC_SNAPPY, 0, 16 * 1024, 1, false},
};

static bool exists(const struct tu_store *ts, const char *name)
{
	char path[1024];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s/%s", ts->dir, TU_FP,
		 TU_RUN, name);
	return lstat(path, &sb) == 0;
}

/* Seals LEN bytes of data as shard 0: w and a descriptor of the file. */
static void seal(struct tu_store *ts, const struct mf_codec_cfg *cfg,
		 const uint8_t *data, struct mf_shard_writer **w, int *fd,
		 struct mf_shard_stat *st)
{
	assert_int_equal(mf_store_run_create(ts->st, TU_FP, TU_RUN), 0);
	assert_int_equal(mf_shard_writer_open(ts->st, TU_FP, TU_RUN, 0, cfg, w),
			 0);
	assert_int_equal(mf_shard_writer_write(*w, data, LEN), 0);
	assert_int_equal(mf_shard_writer_seal(*w, st, fd), 0);
	assert_true(*fd >= 0);
	assert_int_equal(st->raw_bytes, LEN);
	assert_true(exists(ts, "shard-00000.tmp"));
	assert_false(exists(ts, "shard-00000.mfs"));
}

/* Every byte of data, read through fd as shard 0 of TU_FP. */
static void reads_back(int fd, const uint8_t *data,
		       const struct mf_shard_stat *want)
{
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open_fd(fd, TU_FP, 0, &r), 0);
	struct mf_shard_stat st;
	mf_shard_reader_stat(r, &st);
	assert_int_equal(st.raw_bytes, want->raw_bytes);
	assert_int_equal(st.stored_bytes, want->stored_bytes);
	assert_int_equal(st.chunks, want->chunks);
	uint8_t *got = malloc(LEN);
	assert_non_null(got);
	assert_int_equal(mf_shard_reader_pread(r, got, LEN, 0), LEN);
	assert_memory_equal(got, data, LEN);
	free(got);
	mf_shard_reader_close(r);
}

static void test_sealed_reads_then_commits(void **state)
{
	struct tu_store *ts = *state;
	uint8_t *data = malloc(LEN);
	assert_non_null(data);
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
		tu_fill(data, LEN, 7 + i, true);
		struct mf_shard_writer *w;
		struct mf_shard_stat st, st2;
		int fd;
		seal(ts, &cfgs[i], data, &w, &fd, &st);
		reads_back(fd, data, &st); /* before it is durable */
		/* sealed: no more bytes, no second seal */
		assert_int_equal(mf_shard_writer_write(w, "x", 1), -EINVAL);
		assert_int_equal(mf_shard_writer_seal(w, NULL, NULL), -EINVAL);
		assert_int_equal(mf_shard_writer_commit(w, &st2), 0);
		assert_memory_equal(&st, &st2, sizeof(st));
		assert_false(exists(ts, "shard-00000.tmp"));
		reads_back(fd, data, &st); /* renamed: the same inode */
		close(fd);
		struct mf_shard_reader *r;
		assert_int_equal(
		    mf_shard_reader_open(ts->st, TU_FP, TU_RUN, 0, &r), 0);
		mf_shard_reader_close(r);
		assert_int_equal(
		    mf_store_shard_remove(ts->st, TU_FP, TU_RUN, 0), 0);
	}
	free(data);
}

static void test_sealed_then_dropped_still_reads(void **state)
{
	struct tu_store *ts = *state;
	uint8_t *data = malloc(LEN);
	assert_non_null(data);
	tu_fill(data, LEN, 99, false);
	struct mf_shard_writer *w;
	struct mf_shard_stat st;
	int fd;
	seal(ts, &cfgs[1], data, &w, &fd, &st);
	mf_shard_writer_abort(w); /* as a failed commit: the file goes */
	assert_false(exists(ts, "shard-00000.tmp"));
	assert_false(exists(ts, "shard-00000.mfs"));
	reads_back(fd, data, &st); /* a reader served before keeps it */
	close(fd);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_sealed_reads_then_commits,
					    tu_store_setup, tu_store_teardown),
	    cmocka_unit_test_setup_teardown(
		test_sealed_then_dropped_still_reads, tu_store_setup,
		tu_store_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
