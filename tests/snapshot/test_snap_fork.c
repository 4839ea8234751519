/*
 * test_snap_fork.c - a shard reader used again in the child of a fork:
 * the forking thread's scratch buffers large enough to be their own
 * mappings are left out of children (mf_buf_alloc), so the child must
 * not be handed them; it reads every byte right, stored raw or
 * compressed, and so does the parent after it.
 *
 * Not for: the buffers themselves (tests/util/test_util_buf.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "snap_testutil.h"

#define LEN ((size_t)1 << 20)

static void read_after_fork(void **state, enum mf_codec codec)
{
	struct tu_store *s = *state;
	uint8_t *data = malloc(LEN);
	assert_non_null(data);
	tu_fill(data, LEN, 1, true);
	/* chunks of 512 KiB: the scratch for one is a mapping of its own */
	struct mf_codec_cfg cfg = {
	    .codec = codec, .level = 1, .chunk_size = 512u << 10, .threads = 1};
	assert_int_equal(tu_write_shard(s->st, 0, &cfg, data, LEN, NULL), 0);
	struct mf_shard_reader *r;
	assert_int_equal(mf_shard_reader_open(s->st, TU_FP, TU_RUN, 0, &r), 0);
	uint8_t got[4096];
	/* a read within a chunk goes through this thread's scratch */
	assert_int_equal(mf_shard_reader_pread(r, got, 16, 5), 16);
	assert_memory_equal(got, data + 5, 16);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int bad = 0;
		for (size_t off = 7; off < LEN; off += 100003) {
			size_t n =
			    LEN - off < sizeof(got) ? LEN - off : sizeof(got);
			ssize_t k =
			    mf_shard_reader_pread(r, got, n, (off_t)off);
			if (k != (ssize_t)n || memcmp(got, data + off, n) != 0)
				bad = 1;
		}
		_exit(bad);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st)); /* not killed by a fault */
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(mf_shard_reader_pread(r, got, 16, LEN - 16), 16);
	assert_memory_equal(got, data + LEN - 16, 16);
	mf_shard_reader_close(r);
	free(data);
}

static void test_none_after_fork(void **state)
{
	read_after_fork(state, MF_CODEC_NONE);
}

static void test_zstd_after_fork(void **state)
{
	read_after_fork(state, MF_CODEC_ZSTD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_none_after_fork,
					    tu_store_setup, tu_store_teardown),
	    cmocka_unit_test_setup_teardown(test_zstd_after_fork,
					    tu_store_setup, tu_store_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
