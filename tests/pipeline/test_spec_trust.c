/*
 * test_spec_trust.c - the ownership rules and the owner's rights
 * (docs/security.md, "Who runs what" and "Loading a spec"), as root with
 * files handed to nobody (uid 65534) by chown: a root spec in a user's
 * folder, a user's symlink to root's spec, root's symlink to a user's
 * spec, world- and group-writable folders, sticky folders, deps and
 * programs of another user (at load and again when a job is planned),
 * globs, hashes and the watch list with the owner's rights, a user's link
 * to a file only root may read, and a process that is not root. Skipped
 * unless run as root.
 *
 * Not for: the credential switch itself (tests/util/test_fscreds.c) or
 * attacks through a mount (tests/security/).
 */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "mf_pipeline.h"
#include "pipeline_fixture.h"

#define NOBODY 65534
#define OTHER 4242 /* a uid without a passwd entry */
#define RULE "refused (docs/security.md, ownership)"
#define SPEC "name: w\ninputs: raw/*.jsonl\nstages: [{exec: [cat]}]\n"

/* The fixture's folder becomes searchable by everyone, as a home folder
 * or a pipelines folder would be; the tests need root. */
static const char *root_dir(void **state)
{
	struct fx *f = *state;
	if (geteuid() != 0)
		skip();
	assert_int_equal(chmod(f->root, 0755), 0);
	return f->root;
}

static void own(const char *path, uid_t uid)
{
	assert_int_equal(lchown(path, uid, uid), 0);
}

/* Loads path expecting rc; returns the message (caller frees). */
static char *load_fails(const char *path, int rc)
{
	struct mf_spec *s = NULL;
	char *err = NULL;
	int got = mf_spec_load(path, &s, &err);
	if (got != rc)
		fail_msg("%s: rc %d, want %d (%s)", path, got, rc,
			 err ? err : "no message");
	assert_null(s);
	assert_non_null(err);
	return err;
}

static void expect(const char *path, int rc, const char *want)
{
	char *err = load_fails(path, rc);
	assert_string_equal(err, want);
	free(err);
}

/* Attack (b): a spec of root's in a folder a user owns would run the
 * user's files as root. */
static void test_root_spec_in_users_folder(void **state)
{
	const char *r = root_dir(state);
	char want[1024];
	fx_write("u/raw/a.jsonl", "a\n");
	fx_write("u/a.yaml", SPEC);
	own("u", NOBODY);
	snprintf(want, sizeof(want),
		 "u/a.yaml: %s/u: owned by nobody (uid 65534), mode 0755, but "
		 "stages run as root (uid 0): " RULE,
		 r);
	expect("u/a.yaml", -EPERM, want);
	/* the same spec owned by the user runs as the user: loaded */
	own("u/a.yaml", NOBODY);
	struct mf_spec *s = fx_load("u/a.yaml");
	assert_int_equal(s->owner_uid, NOBODY);
	mf_spec_free(s);
}

/* Attack (a): a user's symlink to a spec of root's. Every link of a
 * chain counts. */
static void test_user_link_to_root_spec(void **state)
{
	const char *r = root_dir(state);
	char want[1024];
	fx_write("sys/raw/a.jsonl", "a\n");
	fx_write("sys/wiki.yaml", SPEC);
	fx_write("pipes/raw/planted.jsonl", "p\n"); /* beside the link */
	own("pipes", NOBODY);
	assert_int_equal(symlink("../sys/wiki.yaml", "pipes/wiki.yaml"), 0);
	own("pipes/wiki.yaml", NOBODY);
	snprintf(want, sizeof(want),
		 "pipes/wiki.yaml: symlink %s/pipes/wiki.yaml: owned by nobody "
		 "(uid 65534), but stages run as root (uid 0) (its target "
		 "%s/sys/wiki.yaml is owned by root (uid 0)): " RULE,
		 r, r);
	expect("pipes/wiki.yaml", -EPERM, want);
	/* root's link to the user's link */
	assert_int_equal(symlink("pipes/wiki.yaml", "chain.yaml"), 0);
	char *err = load_fails("chain.yaml", -EPERM);
	assert_non_null(strstr(err, "pipes/wiki.yaml: owned by nobody"));
	free(err);
	/* the same links owned by root: loaded, as root */
	own("pipes/wiki.yaml", 0);
	struct mf_spec *s = fx_load("chain.yaml");
	assert_int_equal(s->owner_uid, 0);
	mf_spec_free(s);
}

/* A link of root's to a user's spec: the spec runs as its real owner,
 * in the folder of the real file, whatever lies beside the link. */
static void test_root_link_to_user_spec(void **state)
{
	const char *r = root_dir(state);
	char want[1024];
	fx_write("u/raw/a.jsonl", "a\n");
	fx_write("u/a.yaml", SPEC);
	own("u/a.yaml", NOBODY);
	own("u", NOBODY);
	fx_write("pipes/raw/planted.jsonl", "p\n");
	assert_int_equal(symlink("../u/a.yaml", "pipes/a.yaml"), 0);
	struct mf_spec *s = fx_load("pipes/a.yaml");
	snprintf(want, sizeof(want), "%s/u", r);
	assert_string_equal(s->dir, want);
	snprintf(want, sizeof(want), "%s/pipes/a.yaml", r);
	assert_string_equal(s->path, want);
	assert_int_equal(s->owner_uid, NOBODY);
	assert_int_equal(s->n_inputs, 1);
	snprintf(want, sizeof(want), "%s/u/raw/a.jsonl", r);
	assert_string_equal(s->inputs[0], want);
	mf_spec_free(s);
}

/* Any folder on the real path that others can write is refused, not only
 * the spec's own; a group's write bit counts unless the group is its
 * owner's private group. */
static void test_writable_folder_on_path(void **state)
{
	const char *r = root_dir(state);
	char want[1024];
	fx_write("open/p/raw/a.jsonl", "a\n");
	fx_write("open/p/a.yaml", SPEC);
	assert_int_equal(chmod("open", 0777), 0);
	snprintf(want, sizeof(want),
		 "open/p/a.yaml: %s/open: owned by root (uid 0), mode 0777: "
		 "writable by others: " RULE,
		 r);
	expect("open/p/a.yaml", -EPERM, want);
	assert_int_equal(chmod("open", 0775), 0);
	assert_int_equal(chown("open", 0, NOBODY), 0);
	snprintf(want, sizeof(want),
		 "open/p/a.yaml: %s/open: owned by root (uid 0), mode 0775: "
		 "writable by group nogroup (gid 65534), not its owner's own "
		 "group: " RULE,
		 r);
	expect("open/p/a.yaml", -EPERM, want);
	assert_int_equal(chown("open", 0, 0), 0);
	mf_spec_free(fx_load("open/p/a.yaml"));
}

/* A sticky folder on the way (as /tmp, where every test folder is) is
 * fine: others cannot replace what is in it, and the next entry must
 * itself belong to root or the runner. */
static void test_sticky_folder_on_path(void **state)
{
	const char *r = root_dir(state);
	char want[1024];
	fx_write("st/p/raw/a.jsonl", "a\n");
	fx_write("st/p/a.yaml", SPEC);
	assert_int_equal(chmod("st", 01777), 0);
	mf_spec_free(fx_load("st/p/a.yaml"));
	own("st/p", NOBODY);
	snprintf(want, sizeof(want),
		 "st/p/a.yaml: %s/st/p: owned by nobody (uid 65534), mode "
		 "0755, but stages run as root (uid 0): " RULE,
		 r);
	expect("st/p/a.yaml", -EPERM, want);
}

/* A dep of another user's, or reached through another user's link, is
 * refused; so is one that becomes so before a shard runs. */
static void test_dep_of_another_user(void **state)
{
	const char *r = root_dir(state);
	char want[1024];
	fx_write("p/raw/a.jsonl", "a\n");
	fx_write("p/tok.py", "print(1)\n");
	fx_write("p/a.yaml",
		 "name: w\ninputs: raw/*.jsonl\n"
		 "stages: [{exec: [cat], deps: [tok.py]}]\n");
	own("p/tok.py", NOBODY);
	snprintf(want, sizeof(want),
		 "p/a.yaml:3:31: 'deps': %s/p/tok.py: owned by nobody (uid "
		 "65534), mode 0644, but stages run as root (uid 0): " RULE,
		 r);
	expect("p/a.yaml", -EPERM, want);

	own("p/tok.py", 0);
	assert_int_equal(symlink("tok.py", "p/link.py"), 0);
	own("p/link.py", NOBODY);
	fx_write("p/b.yaml",
		 "name: w\ninputs: raw/*.jsonl\n"
		 "stages: [{exec: [cat], deps: [link.py]}]\n");
	char *err = load_fails("p/b.yaml", -EPERM);
	snprintf(want, sizeof(want), "symlink %s/p/link.py: owned by nobody",
		 r);
	assert_non_null(strstr(err, want));
	free(err);

	struct mf_spec *s = fx_load("p/a.yaml");
	struct mf_job *j = NULL;
	own("p/tok.py", NOBODY);
	assert_int_equal(mf_job_start(s, 0, "", &j, &err), -EPERM);
	assert_null(j);
	snprintf(want, sizeof(want),
		 "stage 0: %s/p/tok.py: owned by nobody (uid 65534), mode "
		 "0644, but stages run as root (uid 0): " RULE,
		 r);
	assert_string_equal(err, want);
	free(err);
	mf_spec_free(s);
}

/* A program of another user's, named with a '/' or found in the PATH
 * the spec sets, is refused at load and again when a job is planned. */
static void test_program_of_another_user(void **state)
{
	const char *r = root_dir(state);
	char want[1024];
	fx_write("p/raw/a.jsonl", "a\n");
	fx_write("p/tool.sh", "#!/bin/sh\nexec cat\n");
	assert_int_equal(chmod("p/tool.sh", 0755), 0);
	fx_write("p/a.yaml",
		 "name: w\ninputs: raw/*.jsonl\n"
		 "stages: [{exec: [./tool.sh]}]\n");
	own("p/tool.sh", NOBODY);
	snprintf(want, sizeof(want),
		 "p/a.yaml: stage 0: %s/p/tool.sh: owned by nobody (uid "
		 "65534), mode 0755, but stages run as root (uid 0): " RULE,
		 r);
	expect("p/a.yaml", -EPERM, want);

	fx_write("p/bin/tool", "#!/bin/sh\nexec cat\n");
	assert_int_equal(chmod("p/bin/tool", 0755), 0);
	own("p/bin/tool", NOBODY);
	fx_write("p/b.yaml",
		 "name: w\ninputs: raw/*.jsonl\n"
		 "env: {PATH: 'bin:/usr/bin:/bin'}\n"
		 "stages: [{exec: [tool]}]\n");
	char *err = load_fails("p/b.yaml", -EPERM);
	snprintf(want, sizeof(want), "stage 0: %s/p/bin/tool: owned by nobody",
		 r);
	assert_non_null(strstr(err, want));
	free(err);

	own("p/tool.sh", 0);
	struct mf_spec *s = fx_load("p/a.yaml");
	struct mf_job *j = NULL;
	own("p/tool.sh", NOBODY);
	assert_int_equal(mf_job_start(s, 0, "", &j, &err), -EPERM);
	assert_null(j);
	snprintf(want, sizeof(want),
		 "stage 0: %s/p/tool.sh: owned by nobody (uid 65534), mode "
		 "0755, but stages run as root (uid 0): " RULE,
		 r);
	assert_string_equal(err, want);
	free(err);
	/* and the stages' folder itself */
	own("p/tool.sh", 0);
	assert_int_equal(chmod("p", 0777), 0);
	assert_int_equal(mf_job_start(s, 0, "", &j, &err), -EPERM);
	snprintf(want, sizeof(want),
		 "%s/p: owned by root (uid 0), mode 0777: writable by "
		 "others: " RULE,
		 r);
	assert_string_equal(err, want);
	free(err);
	mf_spec_free(s);
}

/* A user's spec whose inputs glob into a folder only root may read: the
 * glob runs with the user's rights and fails as it would for them. */
static void test_glob_with_owners_rights(void **state)
{
	root_dir(state);
	fx_write("secret/a.jsonl", "s\n");
	assert_int_equal(chmod("secret", 0700), 0);
	fx_write("u/a.yaml",
		 "name: w\ninputs: ../secret/*.jsonl\n"
		 "stages: [{exec: [cat]}]\n");
	own("u/a.yaml", NOBODY);
	own("u", NOBODY);
	expect("u/a.yaml", -EINVAL,
	       "u/a.yaml:2:9: 'inputs': cannot read '../secret': Permission "
	       "denied");
	/* root's own spec still reads it */
	fx_write("a.yaml",
		 "name: w\ninputs: secret/*.jsonl\n"
		 "stages: [{exec: [cat]}]\n");
	struct mf_spec *s = fx_load("a.yaml");
	assert_int_equal(s->n_inputs, 1);
	mf_spec_free(s);
}

/* Hashing inputs for the fingerprint, and listing what to watch, run
 * with the owner's rights too. */
static void test_hash_and_watch_with_owners_rights(void **state)
{
	const char *r = root_dir(state);
	char path[1024];
	fx_write("u/raw/a.jsonl", "a\n");
	fx_write("u/deep/sub/more/x.jsonl", "x\n");
	fx_write("u/a.yaml",
		 "name: w\ninputs: [raw/*.jsonl, deep/*/*/x.jsonl]\n"
		 "input_identity: content\n"
		 "stages: [{exec: [cat]}]\n");
	own("u/a.yaml", NOBODY);
	own("u", NOBODY);
	struct mf_spec *s = fx_load("u/a.yaml");
	assert_int_equal(s->n_inputs, 2);

	assert_int_equal(chmod("u/raw/a.jsonl", 0600), 0);
	struct mf_fingerprint fp;
	char *err = NULL;
	assert_int_equal(mf_fingerprint_compute(s, &fp, &err), -EACCES);
	snprintf(path, sizeof(path),
		 "%s: cannot read '%s/u/raw/a.jsonl': Permission denied",
		 s->path, r);
	assert_string_equal(err, path);
	free(err);
	assert_int_equal(chmod("u/raw/a.jsonl", 0644), 0);
	assert_int_equal(mf_fingerprint_compute(s, &fp, &err), 0);
	assert_int_equal(chmod("u/raw/a.jsonl", 0600), 0);
	assert_int_equal(mf_fingerprint_check_shard(s, &fp, 1, &err), -EACCES);
	free(err);
	mf_fingerprint_release(&fp);

	struct mf_spec_watch w;
	snprintf(path, sizeof(path), "%s/u/deep/sub/more", r);
	assert_int_equal(mf_spec_watch_list(s, &w), 0);
	bool seen = false;
	for (size_t i = 0; i < w.n_dirs; i++)
		seen = seen || !strcmp(w.dirs[i].path, path);
	assert_true(seen);
	mf_spec_watch_release(&w);
	assert_int_equal(chmod("u/deep/sub", 0700), 0);
	assert_int_equal(mf_spec_watch_list(s, &w), 0);
	for (size_t i = 0; i < w.n_dirs; i++)
		assert_string_not_equal(w.dirs[i].path, path);
	mf_spec_watch_release(&w);
	mf_spec_free(s);
}

/* A deps folder is walked, and a deps glob expanded, with the owner's
 * rights; a file in it another user owns is refused as a listed one. */
static void test_deps_folder_with_owners_rights(void **state)
{
	root_dir(state);
	fx_write("u/raw/a.jsonl", "a\n");
	fx_write("u/lib/a.py", "a\n");
	fx_write("u/lib/closed/b.py", "b\n");
	fx_write("u/a.yaml",
		 "name: w\ninputs: raw/*.jsonl\n"
		 "stages: [{exec: [cat], deps: [lib]}]\n");
	own("u/a.yaml", NOBODY);
	own("u", NOBODY);
	own("u/lib", NOBODY);
	own("u/lib/a.py", NOBODY);
	assert_int_equal(chmod("u/lib/closed", 0700), 0); /* root's */
	expect("u/a.yaml", -EINVAL,
	       "u/a.yaml:3:31: 'deps': cannot read 'lib/closed': Permission "
	       "denied");
	assert_int_equal(chmod("u/lib/closed", 0755), 0);
	own("u/lib/closed", NOBODY);
	own("u/lib/closed/b.py", OTHER);
	char *err = load_fails("u/a.yaml", -EPERM);
	assert_non_null(strstr(err, "u/a.yaml:3:31: 'deps': "));
	assert_non_null(strstr(err, "/u/lib/closed/b.py: owned by uid 4242"));
	free(err);
	own("u/lib/closed/b.py", NOBODY);
	mf_spec_free(fx_load("u/a.yaml"));
}

/* The identity command runs as the spec's owner, with the owner's HOME,
 * in the spec folder: what it prints says so. */
static void test_identity_as_owner(void **state)
{
	const char *r = root_dir(state);
	fx_write("u/raw/a.jsonl", "a\n");
	fx_write("u/a.yaml",
		 "name: w\ninputs: raw/*.jsonl\n"
		 "identity: [sh, -c, 'id -u; id -g; pwd; "
		 "touch mine; stat -c %u mine']\n"
		 "stages: [{exec: [cat]}]\n");
	own("u/a.yaml", NOBODY);
	own("u", NOBODY);
	struct mf_spec *s = fx_load("u/a.yaml");
	struct mf_fingerprint fp;
	char *err = NULL;
	int rc = mf_fingerprint_compute(s, &fp, &err);
	if (rc)
		fail_msg("fingerprint: %s", err ? err : "?");
	char want[1024], hex[65];
	snprintf(want, sizeof(want), "%d\n%d\n%s/u\n%d\n", NOBODY, NOBODY, r,
		 NOBODY);
	struct mf_sha256 h;
	uint8_t d[32], len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)((uint64_t)strlen(want) >> (56 - 8 * i));
	assert_int_equal(mf_sha256_init(&h), 0);
	assert_int_equal(mf_sha256_update(&h, len, 8), 0);
	assert_int_equal(mf_sha256_update(&h, want, strlen(want)), 0);
	assert_int_equal(mf_sha256_final(&h, d), 0);
	mf_hex(d, 32, hex);
	bool found = false;
	for (size_t i = 0; i < fp.n_parts; i++)
		if (!strcmp(fp.parts[i].label, "identity")) {
			found = true;
			if (strcmp(fp.parts[i].hex, hex))
				fail_msg("identity printed: %s",
					 fp.parts[i].detail);
		}
	assert_true(found);
	mf_fingerprint_release(&fp);
	mf_spec_free(s);
}

/* A user's link to a file only root may read is opened with the user's
 * rights: EACCES, and not a byte of it in the message. */
static void test_link_to_secret(void **state)
{
	root_dir(state);
	fx_write("shadow", "root:$6$secrethash:19000:0:99999:7:::\n");
	assert_int_equal(chmod("shadow", 0600), 0);
	fx_mkdirs("pipes");
	own("pipes", NOBODY);
	assert_int_equal(symlink("../shadow", "pipes/s.yaml"), 0);
	own("pipes/s.yaml", NOBODY);
	char *err = load_fails("pipes/s.yaml", -EACCES);
	assert_string_equal(err,
			    "pipes/s.yaml: cannot open: Permission "
			    "denied");
	assert_null(strstr(err, "secrethash"));
	free(err);
}

/* What a process that is not root may load: its own specs and root's,
 * never another user's (it would run their code as itself). Run in a
 * child that became nobody; returns the failures as a bit mask. */
static int as_nobody(const char *root)
{
	struct mf_spec *s = NULL;
	char *err = NULL, want[1024];
	int bad = 0;
	if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 ||
	    setuid(NOBODY) != 0)
		return 0x80;
	if (mf_spec_load("n/a.yaml", &s, &err) != -EPERM)
		bad |= 1;
	snprintf(want, sizeof(want),
		 "n/a.yaml: %s/n/a.yaml: owned by uid 4242, but this process "
		 "runs as nobody (uid 65534) and would run that user's code as "
		 "itself: " RULE,
		 root);
	if (!err || strcmp(err, want) != 0)
		bad |= 2;
	free(err);
	if (mf_spec_load("m/a.yaml", &s, &err) != 0)
		bad |= 4;
	mf_spec_free(s);
	if (mf_spec_load("a.yaml", &s, &err) != 0 || s->owner_uid != 0)
		bad |= 8;
	mf_spec_free(s);
	return bad;
}

static void test_not_root_process(void **state)
{
	const char *r = root_dir(state);
	fx_write("n/raw/a.jsonl", "a\n");
	fx_write("n/a.yaml", SPEC);
	own("n/a.yaml", OTHER);
	own("n", OTHER);
	fx_write("m/raw/a.jsonl", "a\n");
	fx_write("m/a.yaml", SPEC);
	own("m/a.yaml", NOBODY);
	own("m", NOBODY);
	fx_write("raw/a.jsonl", "a\n");
	fx_write("a.yaml", SPEC);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(as_nobody(r));
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_root_spec_in_users_folder),
	    T(test_user_link_to_root_spec),
	    T(test_root_link_to_user_spec),
	    T(test_writable_folder_on_path),
	    T(test_sticky_folder_on_path),
	    T(test_dep_of_another_user),
	    T(test_program_of_another_user),
	    T(test_glob_with_owners_rights),
	    T(test_hash_and_watch_with_owners_rights),
	    T(test_deps_folder_with_owners_rights),
	    T(test_identity_as_owner),
	    T(test_link_to_secret),
	    T(test_not_root_process),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
