/*
 * test_job_input.c - what stage 0 reads on stdin, through the feeder's
 * pipe: one file larger than any pipe, every byte in order; several files
 * one after another; a FIFO, read by the feeder once a writer comes,
 * without ever blocking mf_job_start.
 *
 * Not for: the feeder's failures (test_job_fail.c) or the pipes' sizes
 * (test_job_pipes.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "job_fixture.h"

/* A stage that says what its stdin is, then copies it. */
#define WHAT_STDIN                                                             \
	"if [ -f /dev/stdin ]; then echo file; "                               \
	"elif [ -p /dev/stdin ]; then echo pipe; else echo other; fi; cat"

/* A file larger than any pipe: every byte, in order. */
static void test_one_big_file(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	size_t len = 5u << 20;
	char *data = malloc(len);
	assert_non_null(data);
	for (size_t i = 0; i < len; i++)
		data[i] = (char)('a' + (i * 7 + i / 4093) % 26);
	jt_input(t, "big", data, len);
	jt_stage(t, 0, "cat", NULL);
	jt_run(t, 0, 65536, &r);
	assert_int_equal(r.finish_rc, 0);
	assert_int_equal(r.len, len);
	assert_memory_equal(r.out, data, len);
	jt_run_release(&r);
	free(data);
	jt_assert_clean(t);
}

static void test_two_files_through_the_feeder(void **state)
{
	struct jt *t = *state;
	struct jt_run r;
	jt_input(t, "a", "first\n", 6);
	jt_input(t, "b", "second\n", 7);
	jt_stage(t, 0, "sh", "-c", WHAT_STDIN, NULL);
	jt_run(t, 0, 4096, &r);
	assert_int_equal(r.finish_rc, 0);
	assert_string_equal(r.out, "pipe\nfirst\nsecond\n");
	jt_run_release(&r);
	jt_assert_clean(t);
}

/* A FIFO input: the feeder opens it, after mf_job_start returned, and
 * reads it once a writer comes. */
static void test_fifo_through_the_feeder(void **state)
{
	struct jt *t = *state;
	const char *p = jt_input(t, "fifo", "", 0);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(mkfifo(p, 0600), 0);
	jt_stage(t, 0, "sh", "-c", WHAT_STDIN, NULL);
	struct mf_job *j;
	char *err = NULL;
	assert_int_equal(mf_job_start(&t->spec, 0, "00ff", &j, &err), 0);
	free(err);
	pid_t w = fork();
	assert_true(w >= 0);
	if (w == 0) {
		int fd = open(p, O_WRONLY);
		_exit(fd >= 0 && write(fd, "fed\n", 4) == 4 ? 0 : 1);
	}
	char buf[64];
	size_t len = 0;
	ssize_t n;
	while ((n = mf_job_read(j, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	assert_int_equal(n, 0);
	buf[len] = '\0';
	assert_string_equal(buf, "pipe\nfed\n");
	struct mf_job_result res;
	assert_int_equal(mf_job_finish(j, &res), 0);
	int st;
	assert_int_equal(waitpid(w, &st, 0), w);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	jt_assert_clean(t);
}

/* Runs the job with guards; fills *res and the output (NUL-ended). */
static void run_guarded(struct jt *t, const struct mf_input_guard *g, size_t n,
			struct mf_job_result *res, char *out, size_t cap)
{
	struct mf_job *j;
	char *err = NULL;
	assert_int_equal(
	    mf_job_start_guarded(&t->spec, 0, "00ff", g, n, &j, &err), 0);
	free(err);
	size_t len = 0;
	ssize_t k;
	while ((k = mf_job_read(j, out + len, cap - 1 - len)) > 0)
		len += (size_t)k;
	out[len] = '\0';
	(void)mf_job_finish(j, res);
}

static void guard_of(const char *path, struct mf_input_guard *g)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	*g = (struct mf_input_guard){.dev = st.st_dev,
				     .ino = st.st_ino,
				     .size = st.st_size,
				     .ctime = st.st_ctim};
}

/* g hashed: the feeder checks the bytes it delivers against the digest
 * of `content` with seed. */
static void guard_content(struct mf_input_guard *g, const char *content,
			  uint64_t seed)
{
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(
	    &c, XXH3_128bits_withSeed(content, strlen(content), seed));
	g->hashed = true;
	g->seed = seed;
	memcpy(g->digest, c.digest, sizeof(g->digest));
}

/* By content, the feeder also checks the bytes themselves: a change that
 * moves no ctime, size or inode (a page written through a shared
 * mapping, then set back before the run ends) fails the job with
 * input_changed; the bytes the identity hashed go. */
static void test_guarded_content(void **state)
{
	struct jt *t = *state;
	const char *p = jt_input(t, "a", "abc\n", 4);
	jt_stage(t, 10, "cat", NULL);
	struct mf_input_guard g;
	struct mf_job_result res;
	char out[64], want[512];
	guard_of(p, &g);
	guard_content(&g, "abc\n", 7);
	run_guarded(t, &g, 1, &res, out, sizeof(out));
	assert_true(res.ok);
	assert_false(res.input_changed);
	assert_string_equal(out, "abc\n");

	guard_content(&g, "abd\n", 7); /* what the feeder reads differs */
	run_guarded(t, &g, 1, &res, out, sizeof(out));
	assert_false(res.ok);
	assert_true(res.input_changed);
	snprintf(want, sizeof(want),
		 "input '%s' changed while it was read (4 of 4 bytes sent)", p);
	assert_string_equal(res.error, want);
	jt_assert_clean(t);
}

/* The feeder delivers a guarded input only while it is the file the
 * guard took: as it was, the bytes go; rewritten since (the same bytes,
 * so only the ctime tells), or another size, the job fails with
 * input_changed and the file named. */
static void test_guarded_input(void **state)
{
	struct jt *t = *state;
	const char *p = jt_input(t, "a", "abc\n", 4);
	jt_stage(t, 10, "cat", NULL);
	struct mf_input_guard g;
	struct mf_job_result res;
	char out[64], want[512];
	guard_of(p, &g);
	run_guarded(t, &g, 1, &res, out, sizeof(out));
	assert_true(res.ok);
	assert_false(res.input_changed);
	assert_string_equal(out, "abc\n");

	usleep(20000); /* another ctime, on any clock granularity */
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	assert_true(fputs("abc\n", f) >= 0);
	assert_int_equal(fclose(f), 0);
	run_guarded(t, &g, 1, &res, out, sizeof(out));
	assert_false(res.ok);
	assert_true(res.input_changed);
	snprintf(want, sizeof(want),
		 "input '%s' changed after its identity was checked", p);
	assert_string_equal(res.error, want);

	guard_of(p, &g);
	g.size++;
	run_guarded(t, &g, 1, &res, out, sizeof(out));
	assert_true(res.input_changed);
	assert_string_equal(res.error, want);
	jt_assert_clean(t);
}

/* Creates an empty file at path (a stage waits for it). */
static void touch_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	assert_int_equal(close(fd), 0);
}

/* All of j's output into out (cap bytes, NUL-terminated). */
static void read_out(struct mf_job *j, char *out, size_t cap)
{
	size_t len = 0;
	ssize_t k;
	while ((k = mf_job_read(j, out + len, cap - 1 - len)) > 0)
		len += (size_t)k;
	out[len] = '\0';
}

/* A stage may read an input by its path (MATFS_INPUTS_FILE), after the
 * feeder found it as checked: an input changed while the stages ran, its
 * bytes set back or not and its times set back, fails the job with
 * input_changed once the stages ended; unchanged, it goes. */
static void test_guarded_by_path(void **state)
{
	struct jt *t = *state;
	const char *p = jt_input(t, "a", "abc\n", 4);
	char go[128], cmd[512], out[64], want[512];
	snprintf(go, sizeof(go), "%s/go", t->dir);
	snprintf(cmd, sizeof(cmd),
		 "exec 0<&-; while [ ! -e %s ]; do sleep 0.01; done; "
		 "cat \"$(head -n 1 \"$MATFS_INPUTS_FILE\")\"",
		 go);
	jt_stage(t, 10, "sh", "-c", cmd, NULL);
	struct mf_input_guard g;
	struct mf_job_result res;
	guard_of(p, &g);
	for (int changed = 0; changed < 2; changed++) {
		struct mf_job *j;
		char *err = NULL;
		(void)unlink(go);
		assert_int_equal(
		    mf_job_start_guarded(&t->spec, 0, "00ff", &g, 1, &j, &err),
		    0);
		free(err);
		if (changed) {
			usleep(20000); /* another ctime */
			struct stat st;
			assert_int_equal(stat(p, &st), 0);
			int fd = open(p, O_WRONLY);
			assert_true(fd >= 0);
			assert_int_equal(pwrite(fd, "abd\n", 4, 0), 4);
			assert_int_equal(close(fd), 0);
			struct timespec ts[2] = {st.st_atim, st.st_mtim};
			assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
		}
		touch_file(go);
		read_out(j, out, sizeof(out));
		(void)mf_job_finish(j, &res);
		if (!changed) {
			assert_true(res.ok);
			assert_string_equal(out, "abc\n");
			continue;
		}
		assert_string_equal(out, "abd\n"); /* what the stage read */
		assert_false(res.ok);
		assert_true(res.input_changed);
		snprintf(want, sizeof(want),
			 "input '%s' changed while the stages ran", p);
		assert_string_equal(res.error, want);
	}
	(void)unlink(go);
	jt_assert_clean(t);
}

/* Renames from over to path: a swap that rename(2) makes in one step. */
static void swap_in(const char *from, const char *to)
{
	assert_int_equal(rename(from, to), 0);
}

/* A spec folder with two folders v1 and v2 and a symlink in -> v1, and
 * the input in/a ("abc\n"): paths for the tests that swap them. */
struct swap_paths {
	char v1[128], v2[128], v1old[128], link[128], link2[128], go[128];
	const char *input;
};

static void swap_setup(struct jt *t, struct swap_paths *sp)
{
	snprintf(sp->v1, sizeof(sp->v1), "%s/v1", t->dir);
	snprintf(sp->v2, sizeof(sp->v2), "%s/v2", t->dir);
	snprintf(sp->v1old, sizeof(sp->v1old), "%s/v1.old", t->dir);
	snprintf(sp->link, sizeof(sp->link), "%s/in", t->dir);
	snprintf(sp->link2, sizeof(sp->link2), "%s/in.new", t->dir);
	snprintf(sp->go, sizeof(sp->go), "%s/go", t->dir);
	assert_int_equal(mkdir(sp->v1, 0755), 0);
	assert_int_equal(mkdir(sp->v2, 0755), 0);
	assert_int_equal(symlink("v1", sp->link), 0);
	sp->input = jt_input(t, "in/a", "abc\n", 4);
}

/* Re-points in at target in one step (a new link renamed over it). */
static void repoint(const struct swap_paths *sp, const char *target)
{
	assert_int_equal(symlink(target, sp->link2), 0);
	assert_int_equal(rename(sp->link2, sp->link), 0);
}

/* A stage that reads its input by a path through a symlink and a folder:
 * the symlink re-pointed, or the folder swapped, while the stages ran,
 * and set back before the check, fails the job with input_changed,
 * naming the entry; files added beside the input do not. */
static void test_guarded_path_swapped(void **state)
{
	struct jt *t = *state;
	struct swap_paths sp;
	swap_setup(t, &sp);
	const char *v1 = sp.v1, *v2 = sp.v2, *v1old = sp.v1old, *go = sp.go;
	const char *p = sp.input;
	char cmd[512], out[64], want[512];
	char other[160];
	snprintf(other, sizeof(other), "%s/a", v2);
	int fd = open(other, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "xyz\n", 4), 4);
	assert_int_equal(close(fd), 0);
	char ready[128];
	snprintf(ready, sizeof(ready), "%s/ready", t->dir);
	/* the feeder is done (it opens the input by path too) before the
	 * test swaps anything */
	snprintf(cmd, sizeof(cmd),
		 "cat >/dev/null; : >%s; while [ ! -e %s ]; do sleep 0.01; "
		 "done; cat \"$(head -n 1 \"$MATFS_INPUTS_FILE\")\"",
		 ready, go);
	jt_stage(t, 10, "sh", "-c", cmd, NULL);
	struct mf_input_guard g;
	guard_of(p, &g);
	for (int how = 0; how < 3; how++) {
		struct mf_job *j;
		struct mf_job_result res;
		char *err = NULL;
		(void)unlink(go);
		(void)unlink(ready);
		assert_int_equal(
		    mf_job_start_guarded(&t->spec, 0, "00ff", &g, 1, &j, &err),
		    0);
		free(err);
		for (int waited = 0; access(ready, F_OK) != 0; waited++) {
			assert_true(waited < 1000);
			usleep(10000);
		}
		if (how == 0) { /* beside the input: no change */
			char beside[160];
			snprintf(beside, sizeof(beside), "%s/b", v1);
			fd = open(beside, O_WRONLY | O_CREAT, 0644);
			assert_true(fd >= 0);
			assert_int_equal(close(fd), 0);
			assert_int_equal(unlink(beside), 0);
		} else if (how == 1) { /* the symlink to v2 */
			repoint(&sp, "v2");
		} else { /* v2 where v1 was */
			swap_in(v1, v1old);
			swap_in(v2, v1);
		}
		touch_file(go);
		read_out(j, out, sizeof(out));
		if (how == 1) { /* set back */
			repoint(&sp, "v1");
		} else if (how == 2) {
			swap_in(v1, v2);
			swap_in(v1old, v1);
		}
		(void)mf_job_finish(j, &res);
		if (how == 0) {
			assert_true(res.ok);
			assert_string_equal(out, "abc\n");
			continue;
		}
		assert_string_equal(out, "xyz\n"); /* what the stage read */
		assert_false(res.ok);
		assert_true(res.input_changed);
		snprintf(want, sizeof(want),
			 "'%s' in '%s', on the path of an input, changed while "
			 "the stages ran",
			 how == 1 ? "in" : "v1", t->dir);
		assert_string_equal(res.error, want);
	}
	(void)unlink(go);
	(void)unlink(ready);
	jt_assert_clean(t);
}

/* Jobs share the process's watch: two jobs guard the same input through
 * the same symlink; the first ends before the symlink is re-pointed (it
 * passes, and its end must not take the second's watch away), the second
 * sees the change; nothing is left open once both ended. */
static void test_guarded_watch_shared(void **state)
{
	struct jt *t = *state;
	struct swap_paths sp;
	swap_setup(t, &sp);
	const char *go = sp.go, *p = sp.input;
	char cmd[512];
	snprintf(cmd, sizeof(cmd),
		 "cat >/dev/null; while [ ! -e %s ]; do sleep 0.01; done; "
		 "echo done",
		 go);
	jt_stage(t, 10, "sh", "-c", cmd, NULL);
	struct mf_input_guard g;
	guard_of(p, &g);
	struct mf_job *a, *b;
	struct mf_job_result ra, rb;
	char *err = NULL, out[16];
	assert_int_equal(
	    mf_job_start_guarded(&t->spec, 0, "00ff", &g, 1, &a, &err), 0);
	free(err);
	err = NULL;
	assert_int_equal(
	    mf_job_start_guarded(&t->spec, 0, "00ff", &g, 1, &b, &err), 0);
	free(err);
	touch_file(go);
	while (mf_job_read(a, out, sizeof(out)) > 0)
		;
	(void)mf_job_finish(a, &ra);
	assert_true(ra.ok);
	repoint(&sp, "v2");
	repoint(&sp, "v1");
	while (mf_job_read(b, out, sizeof(out)) > 0)
		;
	(void)mf_job_finish(b, &rb);
	assert_false(rb.ok);
	assert_true(rb.input_changed);
	assert_non_null(strstr(rb.error, "'in' in '"));
	(void)unlink(go);
	jt_assert_clean(t); /* the watch's descriptor went with the jobs */
}

struct watch_thread {
	struct jt *t;
	const struct mf_input_guard *g;
	int ok, runs;
};

static void *watch_thread_main(void *arg)
{
	struct watch_thread *x = arg;
	for (int i = 0; i < x->runs; i++) {
		struct mf_job *j;
		struct mf_job_result res;
		char *err = NULL, out[16];
		if (mf_job_start_guarded(&x->t->spec, 0, "00ff", x->g, 1, &j,
					 &err) != 0) {
			free(err);
			continue;
		}
		free(err);
		while (mf_job_read(j, out, sizeof(out)) > 0)
			;
		(void)mf_job_finish(j, &res);
		x->ok += res.ok;
	}
	return NULL;
}

/* Jobs on four threads at once, each starting and ending guarded jobs on
 * the same input over and over: the process's one watch serves them all
 * (the sanitizer builds look at its lock), every job passes, and nothing
 * is left open. */
static void test_guarded_watch_threads(void **state)
{
	struct jt *t = *state;
	char sub[128];
	snprintf(sub, sizeof(sub), "%s/d", t->dir);
	assert_int_equal(mkdir(sub, 0755), 0);
	const char *p = jt_input(t, "d/a", "abc\n", 4);
	jt_stage(t, 10, "cat", NULL);
	struct mf_input_guard g;
	guard_of(p, &g);
	pthread_t tid[4];
	struct watch_thread x[4];
	for (int i = 0; i < 4; i++) {
		x[i] = (struct watch_thread){t, &g, 0, 10};
		assert_int_equal(
		    pthread_create(&tid[i], NULL, watch_thread_main, &x[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(tid[i], NULL), 0);
		assert_int_equal(x[i].ok, x[i].runs);
	}
	jt_assert_clean(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_one_big_file, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_guarded_input, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_guarded_content, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_guarded_by_path, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_guarded_path_swapped, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_guarded_watch_shared, jt_setup,
					    jt_teardown),
	    cmocka_unit_test_setup_teardown(test_guarded_watch_threads,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_two_files_through_the_feeder,
					    jt_setup, jt_teardown),
	    cmocka_unit_test_setup_teardown(test_fifo_through_the_feeder,
					    jt_setup, jt_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
