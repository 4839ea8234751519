/*
 * test_job_pipes.c - the capacity of a job's data pipes: raised to 1 MiB
 * while the pipes raised by every job of this process stay within a
 * quarter of fs.pipe-user-pages-soft (past that limit the kernel would
 * shrink every new pipe of the user to 2 pages), the kernel's 64 KiB for
 * the rest, and given back when a job is done.
 *
 * Not for: what flows through them (test_job_output.c, test_job_eof.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "job_fixture.h"

#define BIG (1 << 20)
#define JOBS_MAX 256

/* The data pipes this process may raise at once: a quarter of the soft
 * limit, in 1 MiB pipes; -1 when there is no soft limit. */
static long raisable(void)
{
	char *s = jt_slurp("/proc/sys/fs/pipe-user-pages-soft");
	long soft = strtol(s, NULL, 10);
	free(s);
	if (soft == 0)
		return -1;
	return soft / 4 / (BIG / sysconf(_SC_PAGESIZE));
}

static void sizes_of(struct mf_job *j, int *in, int *out)
{
	char buf[64];
	size_t len = 0;
	for (;;) {
		ssize_t n = mf_job_read(j, buf + len, sizeof(buf) - 1 - len);
		assert_true(n >= 0);
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	assert_int_equal(sscanf(buf, "%d %d", in, out), 2);
}

static void finish(struct mf_job *j)
{
	struct mf_job_result res;
	assert_int_equal(mf_job_finish(j, &res), 0);
	assert_true(res.ok);
}

static void test_raised_within_budget(void **state)
{
	struct jt *t = *state;
	long cap = raisable();
	if (cap < 0 || cap + 4 > 2 * JOBS_MAX)
		skip(); /* no soft limit, or one too big to reach here */
	jt_stage(t, 60, JT_HELPER, "pipes", NULL);
	/* one stage: two data pipes a job, so cap / 2 jobs raise both */
	size_t n = (size_t)cap / 2 + 2;
	struct mf_job *jobs[JOBS_MAX];
	for (size_t k = 0; k < n; k++) {
		char *err = NULL;
		assert_int_equal(
		    mf_job_start(&t->spec, 0, "00ff", &jobs[k], &err), 0);
		free(err);
	}
	long big = 0, small = 0;
	for (size_t k = 0; k < n; k++) {
		int in, out;
		sizes_of(jobs[k], &in, &out);
		big += (in == BIG) + (out == BIG);
		small += (in == 65536) + (out == 65536);
	}
	assert_int_equal(big, cap);
	assert_int_equal(small, (long)(2 * n) - cap);
	for (size_t k = 0; k < n; k++)
		finish(jobs[k]);
	/* all given back: the next job's are raised again */
	struct mf_job *j;
	char *err = NULL;
	assert_int_equal(mf_job_start(&t->spec, 0, "00ff", &j, &err), 0);
	free(err);
	int in, out;
	sizes_of(j, &in, &out);
	assert_int_equal(in, BIG);
	assert_int_equal(out, BIG);
	finish(j);
	jt_assert_clean(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_raised_within_budget, jt_setup,
					    jt_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
