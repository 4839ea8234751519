/*
 * test_job_env.c - what a stage's process gets besides its pipes: a clean
 * environment (exactly the documented variables, whatever the caller's
 * environment holds), the spec's `env` on top, programs looked up in the
 * stages' PATH, and the per-stage limits: RLIMIT_NOFILE and RLIMIT_NPROC,
 * `memory` as RLIMIT_AS, `nice`.
 *
 * Not for: output, failures and timeouts (test_job_output.c,
 * test_job_fail.c, test_job_limits.c).
 */
#include <errno.h>
#include <stdbool.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "job_fixture.h"

static void assert_ok(const struct jt_run *r)
{
	if (r->start_rc || !r->res.ok)
		print_error("start %d (%s), %s: %s\n", r->start_rc,
			    r->err ? r->err : "", r->res.error,
			    r->res.stderr_tail);
	assert_int_equal(r->start_rc, 0);
	assert_int_equal(r->read_rc, 0);
	assert_int_equal(r->finish_rc, 0);
	assert_true(r->res.ok);
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lines of text (each ended by '\n'), sorted, in a fixed order whatever
 * order env printed them in. MATFS_INPUTS holds no newline here (one
 * input). Returns one malloc'd string. */
static char *sorted_lines(const char *text)
{
	char *copy = strdup(text), *lines[256], *s = NULL;
	size_t n = 0, len = 0;
	assert_non_null(copy);
	for (char *l = copy; *l;) {
		char *nl = strchr(l, '\n');
		assert_non_null(nl);
		*nl = '\0';
		assert_true(n < 256);
		lines[n++] = l;
		l = nl + 1;
	}
	qsort(lines, n, sizeof(lines[0]), cmp_line);
	FILE *f = open_memstream(&s, &len);
	assert_non_null(f);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s\n", lines[i]);
	assert_int_equal(fclose(f), 0);
	free(copy);
	return s;
}

/* The documented environment of a stage run by this process's user, with
 * the spec's `env` (NAME=value lines in extra) added or replacing. */
static char *want_env(struct jt *t, const char *const *extra, size_t n_extra)
{
	struct passwd *pw = getpwuid(geteuid());
	char *s = NULL, home[512], user[256], logname[256], inputs[256];
	size_t len = 0;
	assert_non_null(pw);
	snprintf(home, sizeof home, "HOME=%s", pw->pw_dir);
	snprintf(user, sizeof user, "USER=%s", pw->pw_name);
	snprintf(logname, sizeof logname, "LOGNAME=%s", pw->pw_name);
	snprintf(inputs, sizeof inputs, "MATFS_INPUTS=%s/in", t->dir);
	const char *base[] = {
	    "PATH=/usr/local/bin:/usr/bin:/bin",
	    home,
	    user,
	    logname,
	    "LANG=C.UTF-8",
	    "LC_TIME=POSIX",
	    "TMPDIR=/tmp/jt-tmp",
	    "MATFS_SHARD=0",
	    "MATFS_SHARDS=1",
	    "MATFS_FINGERPRINT=00ff",
	    /* TMPDIR does not exist: the list falls back to descriptor 4 */
	    "MATFS_INPUTS_FILE=/proc/self/fd/4",
	    inputs,
	};
	FILE *f = open_memstream(&s, &len);
	assert_non_null(f);
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
		size_t eq = strcspn(base[i], "=") + 1;
		bool replaced = false;
		for (size_t k = 0; k < n_extra; k++)
			replaced = replaced || !strncmp(extra[k], base[i], eq);
		if (!replaced)
			fprintf(f, "%s\n", base[i]);
	}
	for (size_t k = 0; k < n_extra; k++)
		fprintf(f, "%s\n", extra[k]);
	assert_int_equal(fclose(f), 0);
	char *sorted = sorted_lines(s);
	free(s);
	return sorted;
}

/* What the caller's environment holds that must not reach a stage. */
static const char *const noise[][2] = {
    {"FOO", "bar"},
    {"HOME", "/nonexistent"},
    {"USER", "nobody-here"},
    {"LD_PRELOAD", "/nonexistent.so"},
    {"PATH", "/nonexistent/bin"},
    {"MATFS_SHARD", "99"},
    {"LANG", "C.UTF-8"},
    {"LC_TIME", "POSIX"},
    {"TMPDIR", "/tmp/jt-tmp"},
};
#define N_NOISE (sizeof(noise) / sizeof(noise[0]))

/* Runs the job with the caller's environment full of noise, restores the
 * environment, and returns env's sorted output. */
static char *stage_env(struct jt *t)
{
	struct jt_run r;
	char *saved[N_NOISE];
	for (size_t i = 0; i < N_NOISE; i++) {
		const char *v = getenv(noise[i][0]);
		saved[i] = v ? strdup(v) : NULL;
		assert_int_equal(setenv(noise[i][0], noise[i][1], 1), 0);
	}
	jt_run(t, 0, 4096, &r);
	for (size_t i = 0; i < N_NOISE; i++) {
		if (saved[i])
			assert_int_equal(setenv(noise[i][0], saved[i], 1), 0);
		else
			assert_int_equal(unsetenv(noise[i][0]), 0);
		free(saved[i]);
	}
	assert_ok(&r);
	char *out = sorted_lines(r.out);
	jt_run_release(&r);
	return out;
}

static void test_clean_env(void **state)
{
	struct jt *t = *state;
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "/usr/bin/env", NULL);
	char *got = stage_env(t);
	char *want = want_env(t, NULL, 0);
	assert_string_equal(got, want);
	free(got);
	free(want);
	/* LANG, LC_* and TMPDIR are passed only when the caller has them */
	char *lang = getenv("LANG") ? strdup(getenv("LANG")) : NULL;
	char *tmpdir = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
	unsetenv("LANG");
	unsetenv("TMPDIR");
	struct jt_run r;
	jt_run(t, 0, 4096, &r);
	if (lang)
		setenv("LANG", lang, 1);
	if (tmpdir)
		setenv("TMPDIR", tmpdir, 1);
	free(lang);
	free(tmpdir);
	assert_ok(&r);
	assert_null(strstr(r.out, "LANG="));
	assert_null(strstr(r.out, "TMPDIR="));
	assert_non_null(strstr(r.out, "PATH=/usr/local/bin:/usr/bin:/bin\n"));
	jt_run_release(&r);
	jt_assert_clean(t);
}

static void add_env(struct jt *t, const char *name, const char *value)
{
	struct mf_spec *s = &t->spec;
	s->env = realloc(s->env, (s->n_env + 1) * sizeof(*s->env));
	assert_non_null(s->env);
	s->env[s->n_env].name = strdup(name);
	s->env[s->n_env].value = strdup(value);
	s->n_env++;
}

static void free_env(struct jt *t)
{
	for (size_t i = 0; i < t->spec.n_env; i++) {
		free(t->spec.env[i].name);
		free(t->spec.env[i].value);
	}
	free(t->spec.env);
	t->spec.env = NULL;
	t->spec.n_env = 0;
}

/* The spec's env adds variables and replaces the base ones (not MATFS_*,
 * which the loader refuses). */
static void test_spec_env(void **state)
{
	struct jt *t = *state;
	const char *extra[] = {"HOME=/srv/home", "OMP_NUM_THREADS=4",
			       "PYTHONPATH=lib:more"};
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "/usr/bin/env", NULL);
	add_env(t, "HOME", "/srv/home");
	add_env(t, "OMP_NUM_THREADS", "4");
	add_env(t, "PYTHONPATH", "lib:more");
	char *got = stage_env(t);
	char *want = want_env(t, extra, 3);
	assert_string_equal(got, want);
	free(got);
	free(want);
	free_env(t);
	jt_assert_clean(t);
}

/* A program without a slash is looked up in the stages' PATH, not the
 * caller's: the fixed one, or the spec's own. */
static void test_path_lookup(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	char bin[128], path[256];
	jt_input(t, "in", "", 0);
	snprintf(bin, sizeof bin, "%s/bin", t->dir);
	assert_int_equal(mkdir(bin, 0755), 0);
	jt_file(t, "bin/jt-hello", "#!/bin/sh\necho hello\n", 0755);
	jt_stage(t, 0, "jt-hello", NULL);
	/* in the caller's PATH only: not found */
	char *old_path = strdup(getenv("PATH"));
	snprintf(path, sizeof path, "%s:%s", bin, old_path);
	assert_int_equal(setenv("PATH", path, 1), 0);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(setenv("PATH", old_path, 1), 0);
	free(old_path);
	assert_int_equal(r.start_rc, -ENOENT);
	assert_string_equal(r.err, "stage 0: 'jt-hello' not found in PATH");
	jt_run_release(&r);
	/* in the spec's PATH, a relative entry is relative to its folder */
	add_env(t, "PATH", "bin:/usr/bin:/bin");
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	assert_string_equal(r.out, "hello\n");
	jt_run_release(&r);
	free_env(t);
	jt_assert_clean(t);
}

static rlim_t capped(int resource, rlim_t cap)
{
	struct rlimit rl;
	assert_int_equal(getrlimit(resource, &rl), 0);
	return rl.rlim_max < cap ? rl.rlim_max : cap;
}

/* Descriptors and processes are capped, soft and hard, whatever the
 * caller's own limits (lower hard limits of the caller win). */
static void test_fd_and_proc_limits(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	char want[128];
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "/bin/sh", "-c",
		 "ulimit -Sn; ulimit -Hn; ulimit -Sp; ulimit -Hp", NULL);
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	unsigned long long n = capped(RLIMIT_NOFILE, 4096);
	unsigned long long p = capped(RLIMIT_NPROC, 16384);
	snprintf(want, sizeof want, "%llu\n%llu\n%llu\n%llu\n", n, n, p, p);
	assert_string_equal(r.out, want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* memory: a stage that needs 200 MiB fails under 64 MiB; one that needs
 * 8 MiB runs. dd allocates its whole block size as one buffer. */
static void test_memory_limit(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "dd", "if=/dev/zero", "of=/dev/null", "bs=200M",
		 "count=1", "status=none", NULL);
	t->spec.stages[0].memory = 64ULL << 20;
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.start_rc, 0);
	assert_false(r.res.ok);
	assert_int_equal(r.res.failed_stage, 0);
	assert_string_equal(r.res.error, "stage 0 'dd' exited with status 1");
	assert_non_null(strstr(r.res.stderr_tail, "memory exhausted"));
	jt_run_release(&r);
	free(t->spec.stages[0].argv[3]);
	t->spec.stages[0].argv[3] = strdup("bs=8M");
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	jt_run_release(&r);
	/* the limit is the stage's, not the caller's */
	t->spec.stages[0].memory = 0;
	free(t->spec.stages[0].argv[3]);
	t->spec.stages[0].argv[3] = strdup("bs=200M");
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* nice: the stage runs at that niceness, never below the caller's; other
 * stages keep the caller's. */
static void test_nice(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	char want[64];
	errno = 0;
	int own = getpriority(PRIO_PROCESS, 0);
	assert_int_equal(errno, 0);
	jt_input(t, "in", "", 0);
	jt_stage(t, 0, "nice", NULL);
	jt_stage(t, 0, "/bin/sh", "-c", "cat; nice", NULL);
	t->spec.stages[0].nice = 10;
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	snprintf(want, sizeof want, "%d\n%d\n", own > 10 ? own : 10, own);
	assert_string_equal(r.out, want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* MATFS_INPUTS_FILE names the input list, one path per line, each ended
 * by a newline, on a descriptor no stage can write to, in every stage;
 * MATFS_INPUTS holds the same list; descriptor 3 stays free. */
static void test_inputs_file(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	const char *a = jt_input(t, "a", "1", 1);
	const char *b = jt_input(t, "b", "2", 1);
	const char *show = "cat; echo; cat \"$MATFS_INPUTS_FILE\";"
			   " echo \"[$MATFS_INPUTS]\";"
			   " echo x >>/proc/self/fd/4 2>/dev/null &&"
			   " echo writable; [ -e /proc/self/fd/3 ] && echo fd3;"
			   " true";
	jt_stage(t, 10, "sh", "-c", show, NULL);
	jt_stage(t, 10, "sh", "-c", show, NULL);
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	char *list, *want;
	assert_true(asprintf(&list, "%s\n%s\n[%s\n%s]\n", a, b, a, b) > 0);
	assert_true(asprintf(&want, "12\n%s\n%s", list, list) > 0);
	assert_string_equal(r.out, want);
	free(list);
	free(want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* MATFS_INPUTS_FILE names a file, not a descriptor: a child that closed
 * every descriptor but 0-2 (subprocess.run's close_fds) opens it. It is
 * the stages' user's, in a 0700 folder of its own, gone after the run.
 * (Before, /proc/self/fd/4: the child's cat failed.) */
static void test_inputs_file_child(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	const char *a = jt_input(t, "a", "1", 1);
	jt_stage(t, 10, "python3", "-c",
		 "import os, subprocess, sys\n"
		 "sys.stdin.read()\n"
		 "p = os.environ['MATFS_INPUTS_FILE']\n"
		 "sys.stdout.write(p + '\\n')\n"
		 "sys.stdout.flush()\n"
		 "subprocess.run(['cat', p], check=True)\n"
		 "st = os.stat(os.path.dirname(p))\n"
		 "sys.stdout.write('%o %d\\n' % (st.st_mode & 0o7777,"
		 " st.st_uid == os.getuid()))\n",
		 NULL);
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	char *nl = strchr(r.out, '\n');
	assert_non_null(nl);
	*nl = 0;
	assert_true(strncmp(r.out, "/proc/", 6) != 0);
	assert_true(strstr(r.out, "/matfs-inputs-") != NULL);
	char want[600];
	snprintf(want, sizeof want, "%s\n700 1\n", a);
	assert_string_equal(nl + 1, want);
	struct stat st;
	assert_int_equal(stat(r.out, &st), -1); /* removed after the run */
	*strrchr(r.out, '/') = 0;
	assert_int_equal(stat(r.out, &st), -1);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* Each stage reads the list from offset 0, also when an earlier stage
 * read descriptor 4 itself to its end: each has a description of its
 * own. */
static void test_inputs_fd_own_offset(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	const char *a = jt_input(t, "a", "1", 1);
	jt_stage(t, 10, "sh", "-c", "cat <&4 >/dev/null; cat", NULL);
	jt_stage(t, 10, "sh", "-c", "cat; cat <&4", NULL);
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	char want[512];
	snprintf(want, sizeof(want), "1%s\n", a);
	assert_string_equal(r.out, want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* 3000 inputs of long names: the list passes Linux's 128 KiB bound on one
 * environment string, which made every execve fail with E2BIG. The
 * stages run; MATFS_INPUTS is left out, MATFS_INPUTS_FILE has it all. */
static void test_inputs_file_many(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	size_t want_len = 0;
	for (int k = 0; k < 3000; k++) {
		char name[128];
		snprintf(name, sizeof name,
			 "input-with-a-long-name-so-that-the-list-grows-%05d",
			 k);
		want_len += strlen(jt_input(t, name, "", 0)) + 1;
	}
	assert_true(want_len > 128 * 1024);
	jt_stage(t, 30, "sh", "-c",
		 "wc -l <\"$MATFS_INPUTS_FILE\"; wc -c <\"$MATFS_INPUTS_FILE\";"
		 " echo \"${MATFS_INPUTS-unset}\"",
		 NULL);
	jt_run(t, 0, 4096, &r);
	assert_ok(&r);
	char want[128];
	snprintf(want, sizeof want, "3000\n%zu\nunset\n", want_len);
	assert_string_equal(r.out, want);
	jt_run_release(&r);
	jt_assert_clean(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_clean_env, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_inputs_file, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_inputs_file_many, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_inputs_file_child, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_inputs_fd_own_offset, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_spec_env, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_path_lookup, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_fd_and_proc_limits, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_memory_limit, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_nice, jt_setup, jt_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
