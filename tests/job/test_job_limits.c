/*
 * test_job_limits.c - a job under pressure: timeouts that kill the whole
 * process group (grandchildren included), 1 MiB of stderr from two stages
 * at once, mf_job_kill at any point, the descriptors and signal state a
 * stage starts with, jobs run from several threads at once, and the
 * switch to the spec owner when running as root.
 *
 * Not for: ordinary output and failures (test_job_output.c,
 * test_job_fail.c), background children and the end of the output
 * (test_job_eof.c).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "job_fixture.h"
#include "job_pattern.h"

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

/* Stage 1 starts two `sleep 1000` and waits: at its 1 s timeout the whole
 * group dies, grandchildren included, within about the timeout. */
static void test_timeout_kills_group(void **state)
{
	struct jt *t = *state;
	struct mf_job *j = NULL;
	struct mf_job_result res;
	char buf[256];
	uint64_t t0, took;
	ssize_t n;
	pid_t gp[2];

	jt_input(t, "in", "abc\n", 4);
	jt_stage(t, 0, "cat", NULL);
	jt_stage(t, 1, "sh", "-c",
		 "cat; sleep 1000 & echo $! >gp1.pid;"
		 " sleep 1000 & echo $! >gp2.pid; wait",
		 NULL);
	t0 = jt_ms();
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	while ((n = mf_job_read(j, buf, sizeof buf)) > 0)
		;
	took = jt_ms() - t0;
	assert_int_equal(n, -ETIMEDOUT);
	assert_true(took >= 950 && took < 5000);
	assert_int_equal(mf_job_read(j, buf, sizeof buf), -ETIMEDOUT);
	/* dead already, before finish */
	gp[0] = read_pid(t, "gp1.pid");
	gp[1] = read_pid(t, "gp2.pid");
	assert_false(jt_pid_running(gp[0], 2000));
	assert_false(jt_pid_running(gp[1], 2000));
	assert_int_equal(mf_job_finish(j, &res), -EIO);
	assert_false(res.ok);
	assert_true(res.timed_out);
	assert_int_equal(res.failed_stage, 1);
	assert_true(WIFSIGNALED(res.wait_status));
	assert_int_equal(WTERMSIG(res.wait_status), SIGKILL);
	assert_string_equal(res.error, "stage 1 'sh' timed out after 1s");
	jt_assert_clean(t);
}

/* A caller that never reads: mf_job_finish enforces the timeout too. */
static void test_timeout_in_finish(void **state)
{
	struct jt *t = *state;
	struct mf_job *j = NULL;
	struct mf_job_result res;
	uint64_t t0, took;

	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "sh", "-c", "echo slow >&2; exec sleep 1000", NULL);
	t->spec.stages[0].timeout_s = 1;
	t0 = jt_ms();
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	assert_int_equal(mf_job_finish(j, &res), -EIO);
	took = jt_ms() - t0;
	assert_true(took >= 950 && took < 5000);
	assert_true(res.timed_out);
	assert_string_equal(res.error, "stage 0 'sh' timed out after 1s");
	assert_string_equal(res.stderr_tail, "slow\n");
	jt_assert_clean(t);
}

/* Two stages write 1 MiB of stderr each (16 times a pipe's capacity)
 * while the output flows: nothing blocks, and the tail is the last
 * MF_STDERR_TAIL bytes of the failing stage's stderr. */
static void test_large_stderr(void **state)
{
	struct jt *t = *state;
	const size_t total = 1 << 20;
	struct jt_run r;
	char want[MF_STDERR_TAIL + 1];

	for (size_t k = 0; k < MF_STDERR_TAIL; k++)
		want[k] = jt_err_byte(total - MF_STDERR_TAIL + k);
	want[MF_STDERR_TAIL] = '\0';
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, JT_HELPER, "spew", "1048576", NULL);
	jt_stage(t, 0, "sh", "-c", "cat; exec \"$0\" spew 1048576 7", JT_HELPER,
		 NULL);
	jt_run(t, 0, 4096, &r);
	assert_string_equal(r.out, "done\ndone\n");
	assert_int_equal(r.finish_rc, -EIO);
	assert_int_equal(r.res.failed_stage, 1);
	assert_int_equal(WEXITSTATUS(r.res.wait_status), 7);
	assert_int_equal(strlen(r.res.stderr_tail), MF_STDERR_TAIL);
	assert_string_equal(r.res.stderr_tail, want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* mf_job_kill then mf_job_finish: right after start, in the middle of the
 * output, with the feeder blocked on a stage that does not read. */
static void test_kill_at_any_point(void **state)
{
	struct jt *t = *state;
	static char big[4 << 20];
	struct mf_job *j = NULL;
	struct mf_job_result res;
	char buf[4096];

	jt_input(t, "in", big, sizeof big);
	jt_stage(t, 0, "sh", "-c", "exec \"$0\" gen 1000000000", JT_HELPER,
		 NULL);
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	mf_job_kill(j);
	assert_int_equal(mf_job_finish(j, &res), -EIO);
	assert_string_equal(res.error,
			    "stage 0 'sh' killed by signal 9 (SIGKILL)");
	jt_assert_clean(t);

	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	assert_int_equal(mf_job_read(j, buf, sizeof buf), sizeof buf);
	assert_memory_equal(buf, (char[]){(char)jt_gen_byte(0)}, 1);
	mf_job_kill(j);
	assert_int_equal(mf_job_read(j, buf, sizeof buf), -ECANCELED);
	assert_int_equal(mf_job_finish(j, &res), -EIO);
	jt_assert_clean(t);

	free(t->spec.stages[0].argv[2]);
	t->spec.stages[0].argv[2] = strdup("exec sleep 1000");
	assert_int_equal(mf_job_start(&t->spec, 0, "", &j, NULL), 0);
	usleep(50000);
	mf_job_kill(j);
	assert_int_equal(mf_job_finish(j, NULL), -EIO);
	jt_assert_clean(t);
}

/* A stage starts with 0, 1 and 2 and its input list (4) only, even when
 * the caller has a descriptor without O_CLOEXEC, and with default signal dispositions and
 * an empty mask whatever the calling thread had. */
static void test_stage_starts_clean(void **state)
{
	struct jt *t = *state;
	struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe;
	sigset_t usr1, old_mask;
	struct jt_run r;
	int leak = dup(0);

	assert_true(leak >= 0);
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, JT_HELPER, "fds", NULL);
	jt_run(t, 0, 4096, &r);
	close(leak);
	assert_int_equal(r.finish_rc, 0);
	assert_string_equal(r.out, "0 1 2 4\n");
	jt_run_release(&r);

	free(t->spec.stages[0].argv[1]);
	t->spec.stages[0].argv[1] = strdup("sigs");
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	assert_int_equal(sigaction(SIGPIPE, &ign, &old_pipe), 0);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &usr1, &old_mask), 0);
	jt_run(t, 0, 4096, &r);
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	assert_int_equal(r.finish_rc, 0);
	assert_string_equal(r.out,
			    "ign=0000000000000000 blk=0000000000000000\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

struct worker {
	const struct mf_spec *spec;
	uint32_t shard;
	int failures;
};

static void *run_worker(void *arg)
{
	struct worker *w = arg;
	char want[64], buf[64];

	snprintf(want, sizeof want, "<S%u><S%u>", w->shard, w->shard + 4);
	for (int round = 0; round < 8; round++) {
		struct mf_job *j = NULL;
		struct mf_job_result res;
		size_t len = 0;
		ssize_t n = 0;

		if (mf_job_start(w->spec, w->shard, "", &j, NULL) < 0) {
			w->failures++;
			continue;
		}
		while (len < sizeof buf - 1 &&
		       (n = mf_job_read(j, buf + len, sizeof buf - 1 - len)) >
			   0)
			len += (size_t)n;
		buf[len] = '\0';
		if (mf_job_finish(j, &res) < 0 || n != 0 || strcmp(buf, want))
			w->failures++;
	}
	return NULL;
}

/* Four threads run jobs of one spec at once, each its own shard. */
static void test_jobs_in_threads(void **state)
{
	struct jt *t = *state;
	struct worker w[4];
	pthread_t th[4];
	char name[16], data[16];

	for (int k = 0; k < 8; k++) {
		snprintf(name, sizeof name, "in%d", k);
		snprintf(data, sizeof data, "<s%d>", k);
		jt_input(t, name, data, strlen(data));
	}
	t->spec.shards = 4;
	jt_stage(t, 0, "cat", NULL);
	jt_stage(t, 0, "tr", "s", "S", NULL);
	for (uint32_t k = 0; k < 4; k++) {
		w[k] = (struct worker){.spec = &t->spec, .shard = k};
		assert_int_equal(
		    pthread_create(&th[k], NULL, run_worker, &w[k]), 0);
	}
	for (int k = 0; k < 4; k++) {
		assert_int_equal(pthread_join(th[k], NULL), 0);
		assert_int_equal(w[k].failures, 0);
	}
	jt_assert_clean(t);
}

/* Running as root, stages and the feeder become the spec's owner: the
 * stage sees its ids, and an input only root may read fails. */
static void test_runs_as_spec_owner(void **state)
{
	struct jt *t = *state;
	const char *secret;
	struct jt_run r;
	char want[512];

	if (geteuid() != 0)
		skip();
	assert_int_equal(chmod(t->dir, 0755), 0);
	jt_input(t, "pub", "public\n", 7);
	t->spec.owner_uid = 65534;
	t->spec.owner_gid = 65534;
	jt_stage(t, 0, "sh", "-c", "id -u; id -g; cat", NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, 0);
	assert_string_equal(r.out, "65534\n65534\npublic\n");
	jt_run_release(&r);

	secret = jt_input(t, "secret", "root only\n", 10);
	assert_int_equal(chmod(secret, 0600), 0);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, -EIO);
	snprintf(want, sizeof want, "input '%s': Permission denied", secret);
	assert_string_equal(r.res.error, want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_timeout_kills_group, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_timeout_in_finish, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_large_stderr, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_kill_at_any_point, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_stage_starts_clean, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_jobs_in_threads, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_runs_as_spec_owner, jt_setup,
					    jt_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
