/*
 * test_job_output.c - what a job's stages see and produce: bytes through
 * one, two and three stages, a shard's inputs concatenated in order, the
 * environment and working directory, programs found through PATH and the
 * spec folder, output that streams as it comes, 64 MiB in small reads,
 * and the last stage's descriptor 3 with records: index (only there).
 *
 * Not for: failures and limits (test_job_fail.c, test_job_limits.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "job_fixture.h"
#include "job_pattern.h"

static void three_inputs(struct jt *t)
{
	jt_input(t, "a.txt", "alpha\n", 6);
	jt_input(t, "b.txt", "bravo\n", 6);
	jt_input(t, "c.txt", "charlie\n", 8);
}

static void assert_ok(const struct jt_run *r)
{
	assert_int_equal(r->start_rc, 0);
	assert_int_equal(r->read_rc, 0);
	assert_int_equal(r->finish_rc, 0);
	assert_true(r->res.ok);
	assert_int_equal(r->res.failed_stage, -1);
	assert_false(r->res.timed_out);
	assert_string_equal(r->res.error, "");
}

static void test_one_stage(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	three_inputs(t);
	jt_stage(t, 0, "cat", NULL);
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	assert_int_equal(r.len, 20);
	assert_memory_equal(r.out, "alpha\nbravo\ncharlie\n", 20);
	jt_run_release(&r);
	jt_assert_clean(t);
}

static void test_two_stages(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	three_inputs(t);
	jt_stage(t, 0, "cat", NULL);
	jt_stage(t, 0, "tr", "a-z", "A-Z", NULL);
	jt_run(t, 0, 3, &r);
	assert_ok(&r);
	assert_string_equal(r.out, "ALPHA\nBRAVO\nCHARLIE\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

static void test_three_stages(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	three_inputs(t);
	jt_stage(t, 0, "cat", NULL);
	jt_stage(t, 0, "tr", "a-z", "A-Z", NULL);
	jt_stage(t, 0, "/bin/sh", "-c", "tr -d '\\n'; echo '|end'", NULL);
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	assert_string_equal(r.out, "ALPHABRAVOCHARLIE|end\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* Input j belongs to shard j mod shards, and a shard reads its inputs in
 * order. */
static void test_shard_inputs_in_order(void **state)
{
	struct jt *t = *state;
	const char *want[3] = {"[0][3][6]", "[1][4]", "[2][5]"};
	struct jt_run r;
	char name[16], data[8];

	for (int k = 0; k < 7; k++) {
		snprintf(name, sizeof name, "in%d", k);
		snprintf(data, sizeof data, "[%d]", k);
		jt_input(t, name, data, strlen(data));
	}
	t->spec.shards = 3;
	jt_stage(t, 0, "cat", NULL);
	for (uint32_t s = 0; s < 3; s++) {
		jt_run(t, s, 2, &r);
		assert_ok(&r);
		assert_string_equal(r.out, want[s]);
		jt_run_release(&r);
	}
	jt_run(t, 3, 16, &r);
	assert_int_equal(r.start_rc, -EINVAL);
	assert_non_null(strstr(r.err, "shard 3"));
	jt_run_release(&r);
	jt_assert_clean(t);
}

static void test_env_and_cwd(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	char want[1024];

	jt_input(t, "in0", "x", 1);
	jt_input(t, "in1", "y", 1);
	jt_input(t, "in2", "z", 1);
	jt_input(t, "in3", "w", 1);
	t->spec.shards = 2;
	jt_stage(t, 0, "sh", "-c",
		 "pwd; echo \"$MATFS_SHARD/$MATFS_SHARDS/$MATFS_FINGERPRINT\";"
		 " printf '%s|' \"$MATFS_INPUTS\"; echo \"$JT_MARK\"",
		 NULL);
	/* nothing of the caller's environment passes (test_job_env.c has
	 * the whole environment), its MATFS_* least of all */
	assert_int_equal(setenv("JT_MARK", "kept", 1), 0);
	assert_int_equal(setenv("MATFS_SHARD", "99", 1), 0);
	jt_run(t, 1, 4096, &r);
	unsetenv("JT_MARK");
	unsetenv("MATFS_SHARD");
	assert_ok(&r);
	snprintf(want, sizeof want, "%s\n1/2/00ff\n%s/in1\n%s/in3|\n", t->dir,
		 t->dir, t->dir);
	assert_string_equal(r.out, want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* A program with a slash but not absolute is relative to the spec folder,
 * whatever the caller's working directory; PATH is searched otherwise. */
static void test_program_lookup(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	char cwd[4096];

	jt_input(t, "in", "data\n", 5);
	jt_file(t, "up.sh", "#!/bin/sh\ntr a-z A-Z\n", 0755);
	jt_stage(t, 0, "./up.sh", NULL);
	jt_stage(t, 0, "rev", NULL);
	assert_non_null(getcwd(cwd, sizeof cwd));
	assert_int_equal(chdir("/"), 0);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(chdir(cwd), 0);
	assert_ok(&r);
	assert_string_equal(r.out, "ATAD\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* Output is returned as the last stage writes it, not when it ends. */
static void test_streams_as_it_comes(void **state)
{
	struct jt *t = *state;
	struct mf_job *j = NULL;
	struct mf_job_result res;
	char buf[64];
	uint64_t t0;
	ssize_t n;

	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "sh", "-c", "printf first; exec sleep 30", NULL);
	t0 = jt_ms();
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	n = mf_job_read(j, buf, sizeof buf);
	assert_int_equal(n, 5);
	assert_memory_equal(buf, "first", 5);
	assert_true(jt_ms() - t0 < 10000);
	mf_job_kill(j);
	assert_int_equal(mf_job_read(j, buf, sizeof buf), -ECANCELED);
	assert_int_equal(mf_job_finish(j, &res), -EIO);
	assert_false(res.ok);
	assert_string_equal(res.error,
			    "stage 0 'sh' killed by signal 9 (SIGKILL)");
	assert_true(jt_ms() - t0 < 10000);
	jt_assert_clean(t);
}

/* 64 MiB through two stages in odd-sized small reads, every byte checked
 * against the pattern as it arrives: nothing holds the whole output. */
static void test_stream_64mib(void **state)
{
	struct jt *t = *state;
	const uint64_t total = 64ULL << 20;
	struct mf_job *j = NULL;
	struct mf_job_result res;
	char count[32], buf[4093];
	uint64_t off = 0, bad = 0;
	ssize_t n;

	snprintf(count, sizeof count, "%llu", (unsigned long long)total);
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, JT_HELPER, "gen", count, NULL);
	jt_stage(t, 0, "cat", NULL);
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	while ((n = mf_job_read(j, buf, sizeof buf)) > 0) {
		for (ssize_t k = 0; k < n; k++)
			bad +=
			    (uint8_t)buf[k] != jt_gen_byte(off + (uint64_t)k);
		off += (uint64_t)n;
	}
	assert_int_equal(n, 0);
	assert_int_equal(mf_job_finish(j, &res), 0);
	assert_true(res.ok);
	assert_int_equal(off, total);
	assert_int_equal(bad, 0);
	jt_assert_clean(t);
}

/* records: index: the last stage, and only it, has descriptor 3, whose
 * bytes come back whole once the output ended; 100 KB of them, more than
 * a pipe holds, written before any output, do not block the stage. */
static void test_index_fd(void **state)
{
	struct jt *t = *state;
	t->spec.records.framing = MF_FRAMING_INDEX;
	jt_input(t, "a.txt", "xyz", 3);
	jt_stage(t, 0, "sh", "-c", "[ -e /proc/self/fd/3 ] && exit 9; exec cat",
		 NULL);
	jt_stage(t, 0, "sh", "-c",
		 "head -c 100000 /dev/zero >&3 && printf '\\001' >&3 && cat",
		 NULL);
	struct mf_job *j;
	char *err = NULL;
	assert_int_equal(mf_job_start(&t->spec, 0, "fp", &j, &err), 0);
	char buf[16];
	size_t got = 0;
	ssize_t n;
	while ((n = mf_job_read(j, buf + got, sizeof(buf) - got)) > 0)
		got += (size_t)n;
	assert_int_equal(n, 0);
	assert_int_equal(got, 3);
	assert_memory_equal(buf, "xyz", 3);
	const uint8_t *idx;
	size_t len;
	assert_int_equal(mf_job_read_index(j, &idx, &len), 0);
	assert_int_equal(len, 100001);
	assert_int_equal(idx[0], 0);
	assert_int_equal(idx[100000], 1);
	struct mf_job_result res;
	assert_int_equal(mf_job_finish(j, &res), 0);
	assert_true(res.ok);
	jt_assert_clean(t);
	/* without records: index, no stage has descriptor 3 */
	t->spec.records.framing = MF_FRAMING_LINES;
	struct jt_run r;
	jt_run(t, 0, 4096, &r);
	assert_false(r.res.ok);
	assert_int_equal(r.res.failed_stage, 1);
	jt_run_release(&r);
	jt_assert_clean(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_one_stage, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_two_stages, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_three_stages, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_shard_inputs_in_order,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_env_and_cwd, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_program_lookup, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_streams_as_it_comes, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_stream_64mib, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_index_fd, jt_setup,
					    jt_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
