/*
 * test_job_cgroup.c - a stage's `memory` as a cgroup v2 limit
 * (mf_job_cgroup_setup, pipeline/job_cgroup.c), checked against a folder
 * of plain files standing in for cgroupfs: the stage's cgroup folder is
 * made with memory.max and memory.swap.max, the stage writes its own pid
 * to cgroup.procs before execve and has no RLIMIT_AS, the folder goes
 * after the stage, an oom_kill in its memory.events names the memory
 * limit in the error, and every way the cgroup cannot be had leaves the
 * stage to RLIMIT_AS, logged once.
 *
 * Not for: the kernel's enforcement (this machine may have no cgroup v2
 * memory controller; docs/security.md says what was checked where), the
 * rlimits themselves (test_job_env.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "job_fixture.h"
#include "job_i.h"

/* What the cgroup code logged. */
static int n_logged;
static char logged[1024];

static void log_line(void *arg, const char *msg)
{
	(void)arg;
	n_logged++;
	snprintf(logged, sizeof logged, "%s", msg);
}

static int cg_setup(void **state)
{
	n_logged = 0;
	logged[0] = '\0';
	return jt_setup(state);
}

static int cg_teardown(void **state)
{
	job_cgroup_forget();
	return jt_teardown(state);
}

/* A stand-in for a cgroup v2 folder: BASE/cg with cgroup.subtree_control
 * holding ctl. Returns the folder (static). */
static const char *stand_in(struct jt *t, const char *ctl)
{
	static char base[256];

	snprintf(base, sizeof base, "%s/cg", t->dir);
	assert_int_equal(mkdir(base, 0755), 0);
	jt_file(t, "cg/cgroup.subtree_control", ctl, 0644);
	return base;
}

/* The names in dir, one per line, sorted. */
static char *ls(const char *dir)
{
	char cmd[512];
	char *out = calloc(1, 4096);
	FILE *p;

	assert_non_null(out);
	snprintf(cmd, sizeof cmd, "ls '%s'", dir);
	p = popen(cmd, "r");
	assert_non_null(p);
	(void)!fread(out, 1, 4095, p);
	assert_int_equal(pclose(p), 0);
	return out;
}

/* A stage printing what its cgroup holds, its pid and its RLIMIT_AS. */
static void stage_shows_cgroup(struct jt *t, const char *base)
{
	jt_stage(t, 0, "/bin/sh", "-c",
		 "cd \"$0\" && ls && cd matfs-* && cat memory.max "
		 "memory.swap.max cgroup.procs && echo && echo $$ && ulimit -v",
		 base, NULL);
}

/* The stage's cgroup is BASE/matfs-PID-SHARD-N with memory.max its
 * memory and swap 0; it holds the stage's pid and no RLIMIT_AS applies;
 * a stage without memory gets none; the folder goes with the stage. */
static void test_stage_gets_cgroup(void **state)
{
	struct jt *t = *state;
	const char *base = stand_in(t, "cpu memory pids\n");
	char prefix[64], *rest, *names;
	struct jt_run r;
	int pid_a, pid_b;

	assert_int_equal(mf_job_cgroup_setup(base, log_line, NULL), 0);
	jt_input(t, "in", "", 0);
	stage_shows_cgroup(t, base);
	jt_stage(t, 0, "cat", NULL);
	t->spec.stages[0].memory = 64ULL << 20;
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, 0);
	snprintf(prefix, sizeof prefix, "cgroup.subtree_control\nmatfs-%d-0-",
		 (int)getpid());
	assert_memory_equal(r.out, prefix, strlen(prefix));
	rest = strchr(r.out + strlen(prefix), '\n');
	assert_non_null(rest);
	assert_int_equal(
	    sscanf(rest, "\n67108864\n0\n%d\n%d\nunlimited\n", &pid_a, &pid_b),
	    2);
	assert_true(pid_a > 1);
	assert_int_equal(pid_a, pid_b);
	jt_run_release(&r);
	names = ls(base);
	assert_string_equal(names, "cgroup.subtree_control\n");
	free(names);
	assert_int_equal(n_logged, 0);
	jt_assert_clean(t);
}

/* An oom_kill in the stage's memory.events (written here by the stage
 * itself, as the kernel would) makes the error name the memory limit;
 * without one a SIGKILL is an ordinary death. */
static void test_oom_kill_reported(void **state)
{
	struct jt *t = *state;
	const char *base = stand_in(t, "memory\n");
	struct jt_run r;

	assert_int_equal(mf_job_cgroup_setup(base, log_line, NULL), 0);
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "cat", NULL);
	jt_stage(t, 0, "/bin/sh", "-c",
		 "cat; cd \"$0\"/matfs-* && printf 'low 0\\nhigh 0\\nmax 3"
		 "\\noom 1\\noom_kill %s\\n' \"$1\" >memory.events; kill -9 $$",
		 base, "1", NULL);
	t->spec.stages[1].memory = 3ULL << 30;
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, -EIO);
	assert_int_equal(r.res.failed_stage, 1);
	assert_string_equal(r.res.error,
			    "stage 1: killed: memory limit (3GiB) reached");
	jt_run_release(&r);

	free(t->spec.stages[1].argv[4]);
	t->spec.stages[1].argv[4] = strdup("0");
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, -EIO);
	assert_string_equal(r.res.error,
			    "stage 1 '/bin/sh' killed by signal 9 (SIGKILL)");
	jt_run_release(&r);
	assert_int_equal(n_logged, 0);
	jt_assert_clean(t);
}

/* The stage shows RLIMIT_AS of its memory (64 MiB, in KiB). */
static void assert_rlimit_as(struct jt *t)
{
	struct jt_run r;

	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, 0);
	assert_string_equal(r.out, "65536\n");
	jt_run_release(&r);
}

/* A base the daemon cannot write to (a read-only mount as root, mode 0555
 * otherwise): setup succeeds, but each stage falls back to RLIMIT_AS, and
 * that is logged once, however many stages fall back. */
static void test_not_writable_falls_back(void **state)
{
	struct jt *t = *state;
	const char *base = stand_in(t, "memory\n");
	bool mounted = false;
	char *names;

	if (geteuid() == 0) {
		if (mount(base, base, NULL, MS_BIND, NULL) < 0)
			skip();
		mounted = mount(NULL, base, NULL,
				MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) == 0;
		if (!mounted) {
			umount2(base, MNT_DETACH);
			skip();
		}
	} else {
		assert_int_equal(chmod(base, 0555), 0);
	}
	assert_int_equal(mf_job_cgroup_setup(base, log_line, NULL), 0);
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "/bin/sh", "-c", "ulimit -v", NULL);
	t->spec.stages[0].memory = 64ULL << 20;
	assert_rlimit_as(t);
	assert_rlimit_as(t);
	if (mounted)
		assert_int_equal(umount2(base, 0), 0);
	else
		assert_int_equal(chmod(base, 0755), 0);
	assert_int_equal(n_logged, 1);
	assert_non_null(strstr(logged, "memory: cannot make cgroup '"));
	assert_non_null(strstr(logged, "/cg/matfs-"));
	assert_non_null(strstr(logged,
			       ": stage memory limits are per process "
			       "(RLIMIT_AS)"));
	names = ls(base);
	assert_string_equal(names, "cgroup.subtree_control\n");
	free(names);
	jt_assert_clean(t);
}

/* A stage that has no memory: nothing to fall back from. */
static void assert_no_limit(struct jt *t)
{
	struct jt_run r;

	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, 0);
	assert_string_equal(r.out, "unlimited\n");
	jt_run_release(&r);
}

/* A folder that is not a cgroup is refused at setup and stages keep
 * RLIMIT_AS; the first stage with memory logs why, once. A folder without
 * memory in its subtree_control gets "+memory" written to it. */
static void test_setup(void **state)
{
	struct jt *t = *state;
	char base[256], path[512], *ctl;

	snprintf(base, sizeof base, "%s/plain", t->dir);
	assert_int_equal(mkdir(base, 0755), 0);
	assert_int_equal(mf_job_cgroup_setup(base, log_line, NULL), -ENOENT);
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "/bin/sh", "-c", "ulimit -v", NULL);
	assert_no_limit(t);
	assert_int_equal(n_logged, 0);
	t->spec.stages[0].memory = 64ULL << 20;
	assert_rlimit_as(t);
	assert_rlimit_as(t);
	assert_int_equal(n_logged, 1);
	assert_non_null(strstr(logged,
			       "/plain/cgroup.subtree_control': No "
			       "such file or directory: not a cgroup "
			       "v2 folder: stage memory limits are "
			       "per process (RLIMIT_AS)"));

	snprintf(base, sizeof base, "%s", stand_in(t, "cpu io\n"));
	assert_int_equal(mf_job_cgroup_setup(base, log_line, NULL), 0);
	snprintf(path, sizeof path, "%s/cgroup.subtree_control", base);
	ctl = jt_slurp(path);
	assert_string_equal(ctl, "+memory");
	free(ctl);

	/* the caller's own cgroup: not without root (nothing to log);
	 * with root, whatever this machine has: a refusal is logged by the
	 * first stage with memory */
	n_logged = 0;
	if (geteuid() != 0) {
		assert_int_equal(mf_job_cgroup_setup(NULL, log_line, NULL),
				 -EPERM);
		assert_rlimit_as(t);
		assert_int_equal(n_logged, 0);
	} else if (mf_job_cgroup_setup(NULL, log_line, NULL) < 0) {
		assert_int_equal(n_logged, 0);
		assert_rlimit_as(t);
		assert_int_equal(n_logged, 1);
		assert_non_null(strstr(logged, "(RLIMIT_AS)"));
	}
	jt_assert_clean(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_stage_gets_cgroup, cg_setup,
					    cg_teardown),
	    cmocka_unit_test_setup_teardown(test_oom_kill_reported, cg_setup,
					    cg_teardown),
	    cmocka_unit_test_setup_teardown(test_not_writable_falls_back,
					    cg_setup, cg_teardown),
	    cmocka_unit_test_setup_teardown(test_setup, cg_setup, cg_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
