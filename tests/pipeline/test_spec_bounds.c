/*
 * test_spec_bounds.c - loading a spec an untrusted author wrote: alias
 * bombs and anchor floods refused before the work they stand for, in a
 * child with a bounded address space; caps on stages, words, deps, globs
 * and matched files; a FIFO or a folder named *.yaml refused at once; the
 * content of a file that is not a spec never quoted in the error.
 *
 * Not for: the keys of a well-formed spec (test_spec.c, test_spec_env.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_pipeline.h"
#include "pipeline_fixture.h"

/* AddressSanitizer reserves terabytes of address space: no RLIMIT_AS. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#define CHILD_AS (512ULL << 20)
/* Watchdogs for a loader that hangs (a FIFO), not timers: wall-clock
 * seconds, generous on a loaded machine. One million matches take a few
 * seconds of real work. */
#define CHILD_ALARM 30
#define CHILD_ALARM_MATCHES 150

static void project(void)
{
	fx_write("raw/a.jsonl", "{\"a\":1}\n");
	fx_write("raw/b.jsonl", "{\"b\":2}\n");
}

/* A growing text, built with fprintf. */
struct text {
	char *s;
	size_t len;
	FILE *f;
};

static FILE *text_open(struct text *t)
{
	memset(t, 0, sizeof(*t));
	t->f = open_memstream(&t->s, &t->len);
	assert_non_null(t->f);
	return t->f;
}

/* Writes the text to a.yaml and frees it. */
static void text_write(struct text *t, const char *path)
{
	assert_int_equal(fclose(t->f), 0);
	fx_write_n(path, t->s, t->len);
	free(t->s);
}

struct outcome {
	int rc;
	char err[2048];
};

/*
 * Loads path in a child with at most CHILD_AS of address space (without
 * ASan) and an alarm as watchdog: a loader that expands what it should
 * refuse runs out of memory or time there instead of taking the machine.
 * Fails the test unless the child reported an outcome.
 */
static void load_bounded(const char *path, unsigned alarm_s, struct outcome *o)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
#ifndef UNDER_ASAN
		struct rlimit as = {CHILD_AS, CHILD_AS};
		if (setrlimit(RLIMIT_AS, &as) != 0)
			_exit(3);
#endif
		alarm(alarm_s);
		struct outcome mine = {0};
		struct mf_spec *s = NULL;
		char *err = NULL;
		mine.rc = mf_spec_load(path, &s, &err);
		snprintf(mine.err, sizeof(mine.err), "%s", err ? err : "");
		ssize_t n = write(p[1], &mine, sizeof(mine));
		_exit(n == (ssize_t)sizeof(mine) ? 0 : 4);
	}
	close(p[1]);
	memset(o, 0, sizeof(*o));
	size_t got = 0;
	while (got < sizeof(*o)) {
		ssize_t n = read(p[0], (char *)o + got, sizeof(*o) - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(p[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		print_error("loader child: status %#x (signal %d)\n", status,
			    WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(got, sizeof(*o));
}

static void expect_slow(const char *path, unsigned alarm_s, int rc,
			const char *want)
{
	struct outcome o;
	load_bounded(path, alarm_s, &o);
	if (strcmp(o.err, want) != 0)
		print_error("got: %s\n", o.err);
	assert_int_equal(o.rc, rc);
	assert_string_equal(o.err, want);
}

static void expect_bounded(const char *path, int rc, const char *want)
{
	expect_slow(path, CHILD_ALARM, rc, want);
}

/* 2,000 stages that each alias one stage of 2,000 words of 4 KiB, all
 * aliases of one word: 16 GB once expanded, 30 KB as written. */
static void test_alias_bomb_wide(void **state)
{
	project();
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f, "name: x\ninputs: raw/*.jsonl\nstages:\n");
	fprintf(f, "  - &s {exec: [cat, &w \"");
	for (int i = 0; i < 4096; i++)
		fputc('w', f);
	fprintf(f, "\"");
	for (int i = 0; i < 2000; i++)
		fprintf(f, ", *w");
	fprintf(f, "]}\n");
	for (int i = 0; i < 2000; i++)
		fprintf(f, "  - *s\n");
	text_write(&t, "a.yaml");
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:4:21: more than 1048576 bytes of text once "
		       "YAML aliases are expanded");
}

/* Nine levels of ten aliases of the level below: 10^10 nodes. */
static void test_alias_bomb_deep(void **state)
{
	project();
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f, "name: x\nstages: [{exec: [cat]}]\ninputs:\n");
	fprintf(f, "  - &a0 [x, x, x, x, x, x, x, x, x, x]\n");
	for (int level = 1; level <= 9; level++) {
		fprintf(f, "  - &a%d [", level);
		for (int k = 0; k < 10; k++)
			fprintf(f, "%s*a%d", k ? ", " : "", level - 1);
		fprintf(f, "]\n");
	}
	text_write(&t, "a.yaml");
	/* the walk goes depth first, last item first: it is deep inside
	 * *a9 when it stops, at an item of a0 */
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:4:19: more than 100000 YAML nodes once YAML "
		       "aliases are expanded");
}

/* An alias of the sequence that holds it: a cycle, refused as well. */
static void test_alias_cycle(void **state)
{
	project();
	fx_write("a.yaml",
		 "name: x\ninputs: &i [raw/a.jsonl, *i]\n"
		 "stages: [{exec: [cat]}]\n");
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:2:9: more than 100000 YAML nodes once YAML "
		       "aliases are expanded");
}

/* 100,000 nested flow sequences in 200 KB: libyaml's scanner alone would
 * take minutes over them, so the depth is refused as it is reached. */
static void test_deep_nesting(void **state)
{
	project();
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f, "name: x\ninputs: raw/*.jsonl\nstages: ");
	for (int i = 0; i < 100000; i++)
		fputc('[', f);
	for (int i = 0; i < 100000; i++)
		fputc(']', f);
	fprintf(f, "\n");
	text_write(&t, "a.yaml");
	/* the 65th '[' after "stages: " */
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:3:72: YAML nested deeper than 64 levels");
}

/* 20,000 aliases of one glob: refused before any glob runs. */
static void test_aliased_globs(void **state)
{
	project();
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f,
		"name: x\nstages: [{exec: [cat]}]\n"
		"inputs: [&g \"raw/*.jsonl\"");
	for (int i = 0; i < 20000; i++)
		fprintf(f, ", *g");
	fprintf(f, "]\n");
	text_write(&t, "a.yaml");
	/* the 10,001st alias: its '*' after 27 columns and 10,000 ", *g" */
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:3:40028: more than 10000 YAML aliases");
}

/* libyaml registers each anchor by comparing it with every earlier one:
 * 90,000 of them take it seconds. The count stops at the cap. */
static void test_anchor_flood(void **state)
{
	project();
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f,
		"name: x\ninputs: raw/*.jsonl\nstages: [{exec: [cat]}]\n"
		"suffix: [");
	for (int i = 0; i < 90000; i++)
		fprintf(f, "%s&a%d x", i ? "," : "", i);
	fprintf(f, "]\n");
	text_write(&t, "a.yaml");
	/* the 1,001st anchor: "suffix: [" is 9 columns, then "&a0 x" and
	 * 999 items ",&aN x" of 6, 7 and 8 bytes for N of 1, 2 and 3
	 * digits, then the comma: 9 + 5 + 54 + 630 + 7200 + 2 */
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:4:7900: more than 1000 YAML anchors");
}

static void test_too_many_stages(void **state)
{
	project();
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f, "name: x\ninputs: raw/*.jsonl\nstages:\n");
	for (int i = 0; i < 3000; i++)
		fprintf(f, "  - exec: [cat]\n");
	text_write(&t, "a.yaml");
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:4:3: 'stages': more than 64 stages");
	/* 64 is fine */
	f = text_open(&t);
	fprintf(f, "name: x\ninputs: raw/*.jsonl\nstages:\n");
	for (int i = 0; i < 64; i++)
		fprintf(f, "  - exec: [cat]\n");
	text_write(&t, "a.yaml");
	struct mf_spec *s = fx_load("a.yaml");
	assert_int_equal(s->n_stages, 64);
	mf_spec_free(s);
}

/* n words after the program, or n deps (all the same file). */
static void write_list_spec(const char *key, int n)
{
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f, "name: x\ninputs: raw/*.jsonl\nstages:\n  - exec: [cat");
	if (!strcmp(key, "exec"))
		for (int i = 0; i < n; i++)
			fprintf(f, ", a");
	fprintf(f, "]\n");
	if (!strcmp(key, "deps")) {
		fprintf(f, "    deps: [");
		for (int i = 0; i < n; i++)
			fprintf(f, "%sraw/a.jsonl", i ? ", " : "");
		fprintf(f, "]\n");
	}
	text_write(&t, "a.yaml");
}

static void test_too_many_words_and_deps(void **state)
{
	project();
	write_list_spec("exec", 1024);
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:4:11: 'exec': more than 1024 words");
	write_list_spec("exec", 1023);
	struct mf_spec *s = fx_load("a.yaml");
	assert_int_equal(s->stages[0].argc, 1024);
	mf_spec_free(s);
	write_list_spec("deps", 1001);
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:5:11: 'deps': more than 1000 files");
	write_list_spec("deps", 1000);
	s = fx_load("a.yaml");
	assert_int_equal(s->stages[0].n_deps, 1000);
	mf_spec_free(s);
}

static void test_too_many_globs(void **state)
{
	project();
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f, "name: x\nstages: [{exec: [cat]}]\ninputs:\n");
	for (int i = 0; i < 1001; i++)
		fprintf(f, "  - raw/a.jsonl\n");
	text_write(&t, "a.yaml");
	expect_bounded("a.yaml", -EINVAL,
		       "a.yaml:4:3: 'inputs': more than 1000 globs");
}

/* 1,000 globs that each match the same 1,001 files: 1,001,000 matches,
 * counted as they come, over the cap before the last glob. */
static void test_too_many_matches(void **state)
{
	fx_mkdirs("d");
	for (int i = 0; i < 1001; i++) {
		char name[32];
		snprintf(name, sizeof(name), "d/%04d", i);
		fx_write(name, "");
	}
	struct text t;
	FILE *f = text_open(&t);
	fprintf(f, "name: x\nstages: [{exec: [cat]}]\ninputs:\n");
	for (int i = 0; i < 1000; i++)
		fprintf(f, "  - d/*\n");
	text_write(&t, "a.yaml");
	/* glob 999 (line 4 + 999) brings match 1,000,001 */
	expect_slow("a.yaml", CHILD_ALARM_MATCHES, -EINVAL,
		    "a.yaml:1003:5: 'inputs': more than 1000000 matched "
		    "files");
}

/* A FIFO named like a spec is refused at once, never opened for a read
 * that waits for a writer; so is one reached through a symlink. */
static void test_fifo(void **state)
{
	project();
	assert_int_equal(mkfifo("f.yaml", 0644), 0);
	expect_bounded("f.yaml", -EINVAL, "f.yaml: not a regular file");
	assert_int_equal(symlink("f.yaml", "l.yaml"), 0);
	expect_bounded("l.yaml", -EINVAL, "l.yaml: not a regular file");
	fx_mkdirs("dir.yaml");
	expect_bounded("dir.yaml", -EINVAL, "dir.yaml: not a regular file");
}

/* A spec reached through symlinks still loads, in its real folder. */
static void test_symlink_still_loads(void **state)
{
	const char *root = ((struct fx *)*state)->root;
	char want[256];
	project();
	fx_write("real/spec.yaml",
		 "name: x\ninputs: ../raw/*.jsonl\n"
		 "stages: [{exec: [cat]}]\n");
	fx_mkdirs("p");
	assert_int_equal(symlink("../real/spec.yaml", "p/one.yaml"), 0);
	assert_int_equal(symlink("one.yaml", "p/two.yaml"), 0);
	struct mf_spec *s = fx_load("p/two.yaml");
	snprintf(want, sizeof(want), "%s/real", root);
	assert_string_equal(s->dir, want);
	snprintf(want, sizeof(want), "%s/p/two.yaml", root);
	assert_string_equal(s->path, want);
	assert_int_equal(s->n_inputs, 2);
	assert_non_null(s->text);
	assert_string_equal(s->text,
			    "name: x\ninputs: ../raw/*.jsonl\n"
			    "stages: [{exec: [cat]}]\n");
	assert_int_equal(s->text_len, strlen(s->text));
	mf_spec_free(s);
}

static void expect_hidden(const char *text, const char *want,
			  const char *secret)
{
	fx_write("a.yaml", text);
	struct outcome o;
	load_bounded("a.yaml", CHILD_ALARM, &o);
	assert_int_equal(o.rc, -EINVAL);
	assert_string_equal(o.err, want);
	assert_null(strstr(o.err, secret));
}

/* A spec that is a link to someone's secrets: the error says what is
 * wrong without showing the content. */
static void test_content_not_quoted(void **state)
{
	expect_hidden("root:$6$SALTsalt$HASHhashHASH:19000:0:99999:7:::\n"
		      "daemon:*:19000:0:99999:7:::\n",
		      "a.yaml:1:1: unknown key (not shown: not a word of "
		      "A-Z a-z 0-9 _ . -)",
		      "HASH");
	expect_hidden("secret password: hunter2\n",
		      "a.yaml:1:1: unknown key (not shown: not a word of "
		      "A-Z a-z 0-9 _ . -)",
		      "hunter2");
	expect_hidden("AKIAIOSFODNN7EXAMPLEKEYSECRETPART: x\n",
		      "a.yaml:1:1: unknown key 'AKIAIOSFODNN7EXA...'",
		      "SECRETPART");
	expect_hidden("password=hunter2\nuser=root\n",
		      "a.yaml:1:1: expected a mapping of spec keys", "hunter2");
	/* a short word, like a typo, is still shown */
	expect_hidden("shard: 3\n",
		      "a.yaml:1:1: unknown key 'shard'; did you mean 'shards'?",
		      "3");
}

#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_alias_bomb_wide),
	    T(test_alias_bomb_deep),
	    T(test_alias_cycle),
	    T(test_deep_nesting),
	    T(test_aliased_globs),
	    T(test_anchor_flood),
	    T(test_too_many_stages),
	    T(test_too_many_words_and_deps),
	    T(test_too_many_globs),
	    T(test_too_many_matches),
	    T(test_fifo),
	    T(test_symlink_still_loads),
	    T(test_content_not_quoted),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
