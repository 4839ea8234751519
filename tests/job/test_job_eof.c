/*
 * test_job_eof.c - a shard is the last stage's stdout until end of file:
 * background children of a stage that still write are waited for, every
 * byte of theirs is kept, one that holds the output past the timeout fails
 * the job with a timeout, and one still running once every stage exited
 * fails the job and is killed. The same for the pipes between stages.
 *
 * Not for: ordinary output, failures and limits (test_job_output.c,
 * test_job_fail.c, test_job_limits.c).
 */
#include <errno.h>
#include <fcntl.h>
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

/* Bounds every stage whose test does not expect a timeout, so that a
 * broken runner fails the test instead of hanging it. */
#define SAFETY_S 60

#define BIG_LEN (8u << 20)

/* Writes BIG_LEN bytes of jt_gen_byte to `big` in the spec folder. */
static void write_big(struct jt *t)
{
	static char buf[1 << 16];
	char path[256];
	int fd;

	snprintf(path, sizeof path, "%s/big", t->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	for (uint64_t off = 0; off < BIG_LEN; off += sizeof buf) {
		for (size_t k = 0; k < sizeof buf; k++)
			buf[k] = (char)jt_gen_byte(off + k);
		assert_int_equal(write(fd, buf, sizeof buf), sizeof buf);
	}
	close(fd);
}

static void assert_big(const struct jt_run *r)
{
	uint64_t bad = 0;

	assert_int_equal(r->read_rc, 0);
	assert_int_equal(r->finish_rc, 0);
	assert_true(r->res.ok);
	assert_int_equal(r->len, BIG_LEN);
	for (size_t k = 0; k < r->len; k++)
		bad += (uint8_t)r->out[k] != jt_gen_byte(k);
	assert_int_equal(bad, 0);
}

static pid_t read_pid(struct jt *t, const char *name)
{
	char path[256], *s;
	pid_t pid;

	snprintf(path, sizeof path, "%s/%s", t->dir, name);
	s = jt_slurp(path);
	pid = (pid_t)atoi(s);
	free(s);
	assert_true(pid > 1);
	return pid;
}

/* The stage exits at once; its background cat writes the whole file. */
static void test_background_cat_every_byte(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	write_big(t);
	jt_input(t, "in", "", 0);
	jt_stage(t, SAFETY_S, "sh", "-c", "cat big &", NULL);
	jt_run(t, 0, 65536, &r);
	assert_big(&r);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* The same as the last of two stages. */
static void test_background_cat_last_of_two(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	write_big(t);
	jt_input(t, "in", "abc", 3);
	jt_stage(t, SAFETY_S, "cat", NULL);
	jt_stage(t, SAFETY_S, "sh", "-c", "cat >/dev/null; cat big &", NULL);
	jt_run(t, 0, 4096, &r);
	assert_big(&r);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* As the first of two: the background cat keeps the pipe to stage 1 open
 * until it is done, and stage 1 passes every byte on. */
static void test_background_cat_feeds_next(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	write_big(t);
	jt_input(t, "in", "abc", 3);
	jt_stage(t, SAFETY_S, "sh", "-c", "cat big &", NULL);
	jt_stage(t, SAFETY_S, "cat", NULL);
	jt_run(t, 0, 4096, &r);
	assert_big(&r);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* A background child writes after the stage exited: its bytes count. */
static void test_background_writes_late(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "", 0);
	jt_stage(t, SAFETY_S, "sh", "-c", "echo early; (sleep 1; echo late) &",
		 NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.read_rc, 0);
	assert_int_equal(r.finish_rc, 0);
	assert_true(r.res.ok);
	assert_string_equal(r.out, "early\nlate\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* A background child holds stdout past the stage's timeout: the job
 * times out, naming the stage, and the child dies with the group. */
static void test_background_holds_output_past_timeout(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "", 0);
	jt_stage(t, 1, "sh", "-c", "echo early; sleep 1000 & echo $! >gp.pid",
		 NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.read_rc, -ETIMEDOUT);
	assert_string_equal(r.out, "early\n");
	assert_int_equal(r.finish_rc, -EIO);
	assert_false(r.res.ok);
	assert_true(r.res.timed_out);
	assert_int_equal(r.res.failed_stage, 0);
	assert_string_equal(r.res.error, "stage 0 'sh' timed out after 1s");
	assert_false(jt_pid_running(read_pid(t, "gp.pid"), 2000));
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* A background child writes forever, faster than this slow reader: the
 * output never ends, so the job times out; what came is the child's. */
static void test_background_writes_forever(void **state)
{
	struct jt *t = *state;
	struct mf_job *j = NULL;
	struct mf_job_result res;
	char buf[4096];
	size_t total = 0;
	ssize_t n;

	jt_input(t, "in", "", 0);
	jt_stage(t, 1, "sh", "-c", "yes & echo $! >gp.pid", NULL);
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	while ((n = mf_job_read(j, buf, sizeof buf)) > 0) {
		for (ssize_t k = 0; k < n; k++)
			assert_int_equal(buf[k],
					 (total + (size_t)k) % 2 ? '\n' : 'y');
		total += (size_t)n;
		usleep(100);
	}
	assert_int_equal(n, -ETIMEDOUT);
	assert_true(total > 0);
	assert_int_equal(mf_job_finish(j, &res), -EIO);
	assert_true(res.timed_out);
	assert_string_equal(res.error, "stage 0 'sh' timed out after 1s");
	assert_false(jt_pid_running(read_pid(t, "gp.pid"), 2000));
	jt_assert_clean(t);
}

/* A background child of stage 0 holds the pipe to stage 1, which waits
 * for its end of file: stage 1's timeout ends the wait, no hang. */
static void test_background_holds_middle_pipe(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, SAFETY_S, "sh", "-c", "cat; sleep 1000 & echo $! >gp.pid",
		 NULL);
	jt_stage(t, 1, "cat", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.read_rc, -ETIMEDOUT);
	assert_string_equal(r.out, "abc\n");
	assert_int_equal(r.finish_rc, -EIO);
	assert_true(r.res.timed_out);
	assert_int_equal(r.res.failed_stage, 1);
	assert_string_equal(r.res.error, "stage 1 'cat' timed out after 1s");
	assert_false(jt_pid_running(read_pid(t, "gp.pid"), 2000));
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* The last stage wrote everything and exited in time; the reader comes
 * after its timeout: nothing holds the output any more, so the job did
 * not time out and every byte is there. */
static void test_slow_reader_after_exit(void **state)
{
	struct jt *t = *state;
	struct mf_job *j = NULL;
	struct mf_job_result res;
	char path[256], buf[4096];
	size_t total = 0, bad = 0;
	uint64_t t0 = jt_ms();
	ssize_t n;

	snprintf(path, sizeof path, "%s/done", t->dir);
	jt_input(t, "in", "", 0);
	/* less than a pipe holds, so the stage exits without a reader */
	jt_stage(t, 3, "sh", "-c", "\"$0\" gen 60000 && exec touch done",
		 JT_HELPER, NULL);
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	while (access(path, F_OK) != 0 && jt_ms() - t0 < 2500)
		usleep(10000);
	if (access(path, F_OK) != 0) {
		mf_job_kill(j);
		mf_job_finish(j, NULL);
		skip(); /* too slow a machine to finish before the timeout */
	}
	while (jt_ms() - t0 < 3500)
		usleep(10000);
	while ((n = mf_job_read(j, buf, sizeof buf)) > 0) {
		for (ssize_t k = 0; k < n; k++)
			bad +=
			    (uint8_t)buf[k] != jt_gen_byte(total + (size_t)k);
		total += (size_t)n;
	}
	assert_int_equal(n, 0);
	assert_int_equal(total, 60000);
	assert_int_equal(bad, 0);
	assert_int_equal(mf_job_finish(j, &res), 0);
	assert_true(res.ok);
	jt_assert_clean(t);
}

/* Shell words that start `sleep 100` in the background with its output
 * elsewhere, write its pid to gp.pid and wait until it runs sleep (so the
 * name in the message is known). */
#define LEAVE_SLEEP                                                            \
	"sleep 100 >/dev/null 2>&1 & echo $! >gp.pid;"                         \
	" until [ \"$(cat /proc/$!/comm)\" = sleep ]; do :; done"

/* Checks the failure for the process left in gp.pid, and that it was
 * gone by the time mf_job_finish returned. */
static void assert_left_behind(struct jt *t, const struct jt_run *r,
			       const char *out)
{
	pid_t gp = read_pid(t, "gp.pid");
	char want[256];

	assert_int_equal(r->read_rc, 0);
	assert_string_equal(r->out, out);
	assert_int_equal(r->finish_rc, -EIO);
	assert_false(r->res.ok);
	assert_false(r->res.timed_out);
	assert_int_equal(r->res.failed_stage, -1);
	snprintf(want, sizeof want,
		 "process %d 'sleep' was still running after every stage "
		 "exited",
		 (int)gp);
	assert_string_equal(r->res.error, want);
	assert_false(jt_pid_running(gp, 0));
}

/* The stage exits 0 and its output ends, but a background child that
 * closed stdout still runs: the job fails and the child is killed. */
static void test_left_running_after_eof(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, SAFETY_S, "sh", "-c", "cat; " LEAVE_SLEEP, NULL);
	jt_run(t, 0, 4096, &r);
	assert_left_behind(t, &r, "abc\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* The same, left by the first of two stages. */
static void test_left_running_by_middle_stage(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, SAFETY_S, "sh", "-c", LEAVE_SLEEP "; cat", NULL);
	jt_stage(t, SAFETY_S, "tr", "a-z", "A-Z", NULL);
	jt_run(t, 0, 4096, &r);
	assert_left_behind(t, &r, "ABC\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* The same, by a child that moved to a process group of its own (job
 * control, setpgid): it is still in the stage's session, so it is found
 * and killed all the same. */
static void test_left_running_in_own_group(void **state)
{
	struct jt *t = *state;
	struct jt_run r;

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, SAFETY_S, "sh", "-c",
		 "cat; python3 -c 'import os; os.setpgid(0, 0); "
		 "os.execvp(\"sleep\", [\"sleep\", \"100\"])' "
		 ">/dev/null 2>&1 & echo $! >gp.pid;"
		 " until [ \"$(cat /proc/$!/comm)\" = sleep ]; do :; done",
		 NULL);
	jt_run(t, 0, 4096, &r);
	assert_left_behind(t, &r, "abc\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_background_cat_every_byte,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_background_cat_last_of_two,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_background_cat_feeds_next,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_background_writes_late,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(
		test_background_holds_output_past_timeout, jt_setup,
		jt_teardown),
	    cmocka_unit_test_setup_teardown(test_background_writes_forever,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_background_holds_middle_pipe,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_slow_reader_after_exit,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_left_running_after_eof,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_left_running_by_middle_stage,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_left_running_in_own_group,
					    jt_setup, jt_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
