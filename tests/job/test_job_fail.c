/*
 * test_job_fail.c - how a job fails: a non-zero exit, a signal, a program
 * not found or not executable, an input that cannot be read, a stage that
 * wrote output and then failed, and the SIGPIPE rule (a stage killed by
 * SIGPIPE is no failure when the last stage, e.g. `head -c`, exited 0).
 *
 * Not for: timeouts and resource limits (test_job_limits.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "job_fixture.h"
#include "job_pattern.h"

static void test_exit_status(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, 0, "cat", NULL);
	jt_stage(t, 0, "sh", "-c", "cat >/dev/null; echo oops >&2; exit 3",
		 NULL);
	jt_stage(t, 0, "cat", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.start_rc, 0);
	assert_int_equal(r.finish_rc, -EIO);
	assert_false(r.res.ok);
	assert_false(r.res.timed_out);
	assert_int_equal(r.res.failed_stage, 1);
	assert_true(WIFEXITED(r.res.wait_status));
	assert_int_equal(WEXITSTATUS(r.res.wait_status), 3);
	assert_string_equal(r.res.error, "stage 1 'sh' exited with status 3");
	assert_string_equal(r.res.stderr_tail, "oops\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

static void test_killed_by_signal(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, 0, "sh", "-c", "echo dying >&2; kill -TERM $$", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, -EIO);
	assert_int_equal(r.res.failed_stage, 0);
	assert_true(WIFSIGNALED(r.res.wait_status));
	assert_int_equal(WTERMSIG(r.res.wait_status), SIGTERM);
	assert_string_equal(r.res.error,
			    "stage 0 'sh' killed by signal 15 (SIGTERM)");
	assert_string_equal(r.res.stderr_tail, "dying\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

static void test_not_found(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, 0, "cat", NULL);
	jt_stage(t, 0, "mf-no-such-program", "--flag", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.start_rc, -ENOENT);
	assert_string_equal(r.err,
			    "stage 1: 'mf-no-such-program' not found in PATH");
	jt_run_release(&r);

	free(t->spec.stages[1].argv[0]);
	t->spec.stages[1].argv[0] = strdup("bin/missing");
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.start_rc, -ENOENT);
	assert_string_equal(r.err, "stage 1: 'bin/missing' not found");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* execve itself fails (no #! line, not an ELF file): mf_job_start reports
 * it and leaves no process behind. */
static void test_exec_fails(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	char want[256];

	jt_input(t, "in", "abc\n", 4);
	jt_file(t, "garbage", "this is not a program\n", 0755);
	jt_file(t, "noexec", "#!/bin/sh\necho hi\n", 0644);
	jt_stage(t, 0, "cat", NULL);
	jt_stage(t, 0, "./garbage", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.start_rc, -ENOEXEC);
	snprintf(want, sizeof want, "stage 1: cannot run '%s/./garbage': %s",
		 t->dir, "Exec format error");
	assert_string_equal(r.err, want);
	jt_run_release(&r);
	jt_assert_clean(t);

	free(t->spec.stages[1].argv[0]);
	t->spec.stages[1].argv[0] = strdup("./noexec");
	jt_run(t, 0, 4096, &r);
	/* no x bit at all: refused before fork, even for root */
	assert_int_equal(r.start_rc, -EACCES);
	assert_string_equal(r.err,
			    "stage 1: './noexec' is not an executable file");
	jt_run_release(&r);
	jt_assert_clean(t);
}

static void test_input_missing(void **state)
{
	struct jt *t = *state;
	const char *gone;
	struct jt_run r;
	char want[512];

	jt_input(t, "a", "first\n", 6);
	gone = jt_input(t, "b", "second\n", 7);
	jt_input(t, "c", "third\n", 6);
	assert_int_equal(unlink(gone), 0);
	jt_stage(t, 0, "cat", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.start_rc, 0);
	assert_int_equal(r.finish_rc, -EIO);
	assert_false(r.res.ok);
	assert_int_equal(r.res.failed_stage, -1);
	assert_true(WIFEXITED(r.res.wait_status));
	assert_int_not_equal(WEXITSTATUS(r.res.wait_status), 0);
	snprintf(want, sizeof want, "input '%s': No such file or directory",
		 gone);
	assert_string_equal(r.res.error, want);
	assert_string_equal(r.out, "first\n"); /* what came before */
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* An input that is a directory opens but cannot be read. */
static void test_input_unreadable(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	char want[512];

	jt_input(t, "a", "first\n", 6);
	jt_stage(t, 0, "cat", NULL);
	free(t->spec.inputs[0]);
	t->spec.inputs[0] = strdup(t->dir);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, -EIO);
	snprintf(want, sizeof want, "input '%s': Is a directory", t->dir);
	assert_string_equal(r.res.error, want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

static void test_output_then_fail(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, 0, "sh", "-c", "cat; echo partial; exit 1", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.read_rc, 0);
	assert_string_equal(r.out, "abc\npartial\n");
	assert_int_equal(r.finish_rc, -EIO);
	assert_false(r.res.ok);
	assert_int_equal(r.res.failed_stage, 0);
	assert_string_equal(r.res.error, "stage 0 'sh' exited with status 1");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* gen writes 16 MiB, head keeps 100 bytes and exits: gen dies of SIGPIPE,
 * and that is no failure because the last stage exited 0. */
static void test_sigpipe_with_head(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "", 0);
	jt_stage(t, 0, JT_HELPER, "gen", "16777216", NULL);
	jt_stage(t, 0, "head", "-c", "100", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, 0);
	assert_true(r.res.ok);
	assert_int_equal(r.len, 100);
	for (size_t k = 0; k < 100; k++)
		assert_int_equal((uint8_t)r.out[k], jt_gen_byte(k));
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* A stage that stops reading its input early is its own business: the
 * feeder's EPIPE is no failure. */
static void test_stage_stops_reading_input(void **state)
{
	struct jt *t = *state;
	static char big[2 << 20];
	struct jt_run r;

	memset(big, 'x', sizeof big);
	jt_input(t, "a", big, sizeof big);
	jt_input(t, "b", big, sizeof big);
	/* closes its stdin, then gives the feeder time to see EPIPE */
	jt_stage(t, 0, "sh", "-c", "head -c 5; exec 0<&-; sleep 0.3", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, 0);
	assert_true(r.res.ok);
	assert_string_equal(r.out, "xxxxx");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* When the last stage fails, the error names it, not the earlier stage it
 * killed with SIGPIPE. */
static void test_sigpipe_last_stage_fails(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "", 0);
	jt_stage(t, 0, JT_HELPER, "gen", "16777216", NULL);
	jt_stage(t, 0, "sh", "-c", "head -c 10 >/dev/null; exit 4", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, -EIO);
	assert_int_equal(r.res.failed_stage, 1);
	assert_string_equal(r.res.error, "stage 1 'sh' exited with status 4");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* The caller stops reading and finishes: the last stage dies of SIGPIPE,
 * which is a failure (its output was not all taken). */
static void test_finish_without_reading(void **state)
{
	struct jt *t = *state;
	struct mf_job *j = NULL;
	struct mf_job_result res;
	char buf[16];
	char want[512];

	jt_input(t, "in", "", 0);
	jt_stage(t, 0, JT_HELPER, "gen", "16777216", NULL);
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	assert_int_equal(mf_job_read(j, buf, sizeof buf), sizeof buf);
	assert_int_equal(mf_job_finish(j, &res), -EIO);
	assert_false(res.ok);
	assert_int_equal(res.failed_stage, 0);
	assert_true(WIFSIGNALED(res.wait_status));
	assert_int_equal(WTERMSIG(res.wait_status), SIGPIPE);
	snprintf(want, sizeof want,
		 "stage 0 '%s' killed by signal 13 (SIGPIPE)", JT_HELPER);
	assert_string_equal(res.error, want);
	jt_assert_clean(t);
}

/* A read that fails cuts the output: the job fails even though every
 * stage exited 0. */
static void test_read_error_fails_job(void **state)
{
	struct jt *t = *state;
	struct mf_job *j = NULL;
	struct mf_job_result res;
	char buf[16];

	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "echo", "hello", NULL);
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	/* an address the kernel refuses to write: read(2) fails EFAULT */
	assert_int_equal(mf_job_read(j, (void *)(uintptr_t)8, 16), -EFAULT);
	assert_int_equal(mf_job_read(j, buf, sizeof buf), -EFAULT);
	assert_int_equal(mf_job_finish(j, &res), -EIO);
	assert_false(res.ok);
	assert_int_equal(res.failed_stage, -1);
	assert_string_equal(
	    res.error, "reading the output of stage 0 'echo': Bad address");
	jt_assert_clean(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_exit_status, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_killed_by_signal, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_not_found, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_exec_fails, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_input_missing, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_input_unreadable, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_output_then_fail, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_sigpipe_with_head, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_stage_stops_reading_input,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_sigpipe_last_stage_fails,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_finish_without_reading,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_read_error_fails_job, jt_setup,
					    jt_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
