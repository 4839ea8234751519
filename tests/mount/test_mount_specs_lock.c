/*
 * test_mount_specs_lock.c - the pipelines watcher never holds its specs
 * lock (struct mfs_specs.lock) across I/O: scanning the pipelines folder,
 * adding inotify watches, statfs, unregistering specs (catalog writes) and
 * telling the kernel to forget names all run with it released, so that a
 * slow folder or a busy catalog delays no registration, refresh or other
 * name. The I/O functions are wrapped (-Wl,--wrap): each asks whether the
 * calling thread holds the lock (an error-checking mutex answers EDEADLK
 * to its owner) and counts a violation if it does. The daemon's parts run
 * without a mount: a fake session stands for the kernel.
 *
 * The test drives the watcher through every path: specs added, edited
 * (a new fingerprint: the old registration is forgotten), removed and
 * made broken, a dep touched, and a refresh from an open; then checks
 * the registry for the expected end state, so that the paths really ran.
 *
 * Not for: what the tree shows (the shell mount tests drive a real
 * mount).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fuse_i.h"
#include "fuse_specs_i.h"

static struct mfs_specs *g_specs;
static atomic_int g_violations;
static atomic_int g_calls[6];
static char g_where[256]; /* the first violation */
enum { C_OPENDIR, C_UNREG, C_NOTIFY, C_WATCH, C_STATFS, C_RMWATCH };
static const char *const names[] = {"opendir",
				    "mf_engine_unregister",
				    "fuse_lowlevel_notify_inval_entry",
				    "inotify_add_watch",
				    "statfs",
				    "inotify_rm_watch"};

/* Counts a call of what; a violation when this thread holds the lock. */
static void check(int what)
{
	struct mfs_specs *s = g_specs;
	if (!s)
		return;
	atomic_fetch_add(&g_calls[what], 1);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 10 * 1000000L; /* held by another thread: not ours */
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	int rc = pthread_mutex_timedlock(&s->lock, &ts);
	if (rc == 0) {
		pthread_mutex_unlock(&s->lock);
	} else if (rc == EDEADLK) {
		if (atomic_fetch_add(&g_violations, 1) == 0)
			snprintf(g_where, sizeof(g_where),
				 "%s called with the specs lock held",
				 names[what]);
	}
}

int __real_mfs_specs_new(struct mfs *m, struct mfs_specs **out);
int __wrap_mfs_specs_new(struct mfs *m, struct mfs_specs **out);
int __wrap_mfs_specs_new(struct mfs *m, struct mfs_specs **out)
{
	int rc = __real_mfs_specs_new(m, out);
	if (rc == 0)
		g_specs = *out;
	return rc;
}

DIR *__real_opendir(const char *path);
DIR *__wrap_opendir(const char *path);
DIR *__wrap_opendir(const char *path)
{
	check(C_OPENDIR);
	return __real_opendir(path);
}

int __real_mf_engine_unregister(struct mf_engine *e, const char *path,
				const char *keep);
int __wrap_mf_engine_unregister(struct mf_engine *e, const char *path,
				const char *keep);
int __wrap_mf_engine_unregister(struct mf_engine *e, const char *path,
				const char *keep)
{
	check(C_UNREG);
	return __real_mf_engine_unregister(e, path, keep);
}

int __wrap_fuse_lowlevel_notify_inval_entry(struct fuse_session *se,
					    fuse_ino_t parent, const char *name,
					    size_t len);
int __wrap_fuse_lowlevel_notify_inval_entry(struct fuse_session *se,
					    fuse_ino_t parent, const char *name,
					    size_t len)
{
	(void)se, (void)parent, (void)name, (void)len;
	check(C_NOTIFY);
	return -ENOENT; /* the kernel knew nothing of it */
}

int __wrap_fuse_lowlevel_notify_inval_inode(struct fuse_session *se,
					    fuse_ino_t ino, off_t off,
					    off_t len);
int __wrap_fuse_lowlevel_notify_inval_inode(struct fuse_session *se,
					    fuse_ino_t ino, off_t off,
					    off_t len)
{
	(void)se, (void)ino, (void)off, (void)len;
	check(C_NOTIFY);
	return -ENOENT;
}

int __real_inotify_add_watch(int fd, const char *path, uint32_t mask);
int __wrap_inotify_add_watch(int fd, const char *path, uint32_t mask);
int __wrap_inotify_add_watch(int fd, const char *path, uint32_t mask)
{
	check(C_WATCH);
	return __real_inotify_add_watch(fd, path, mask);
}

int __real_inotify_rm_watch(int fd, int wd);
int __wrap_inotify_rm_watch(int fd, int wd);
int __wrap_inotify_rm_watch(int fd, int wd)
{
	check(C_RMWATCH);
	return __real_inotify_rm_watch(fd, wd);
}

/* statfs with _FILE_OFFSET_BITS=64 */
int __real_statfs64(const char *path, struct statfs64 *buf);
int __wrap_statfs64(const char *path, struct statfs64 *buf);
int __wrap_statfs64(const char *path, struct statfs64 *buf)
{
	check(C_STATFS);
	return __real_statfs64(path, buf);
}

/* ---- the pipelines folder ---- */

static char g_dir[64];

static void put(const char *name, const char *text)
{
	char path[256], tmp[256];
	snprintf(path, sizeof(path), "%s/pipelines/%s", g_dir, name);
	snprintf(tmp, sizeof(tmp), "%s/pipelines/%s.tmp", g_dir, name);
	FILE *f = fopen(tmp, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rename(tmp, path), 0); /* as editors save */
}

/* A spec whose deps are dep.txt and, with own, a file of a folder only
 * it watches (its watch goes with it). */
static void spec(const char *file, const char *name, const char *word,
		 const char *own)
{
	char text[512];
	snprintf(text, sizeof(text),
		 "name: %s\ninputs: in/*.txt\nstages:\n"
		 "  - exec: [/bin/sh, -c, 'cat; echo %s']\n"
		 "    deps: [dep.txt%s%s]\n",
		 name, word, own ? ", " : "", own ? own : "");
	put(file, text);
}

/* How many registrations name has, and the fingerprint of one (""
 * when none); *all counts every spec's. */
static size_t registered(struct mfs *m, const char *name, char *fp, size_t *all)
{
	struct mf_engine_spec_info *v;
	size_t k, n = 0;
	fp[0] = 0;
	assert_int_equal(mf_engine_list_specs(m->eng, &v, &k), 0);
	for (size_t i = 0; i < k; i++)
		if (strcmp(v[i].name, name) == 0 && n++ == 0)
			memcpy(fp, v[i].fp, MF_FP_HEX_LEN + 1);
	if (all)
		*all = k;
	mf_engine_spec_info_free(v, k);
	return n;
}

/* Waits (at most 30 s: a guard, not a timing assertion) until name has
 * one registration, with a fingerprint other than not, or none when
 * gone: earlier registrations were forgotten. */
static void wait_for(struct mfs *m, const char *name, const char * not,
		     bool gone, char *fp)
{
	char was[MF_FP_HEX_LEN + 1] = "";
	if (not )
		memcpy(was, not, sizeof(was));
	for (int i = 0; i < 3000; i++) {
		size_t n = registered(m, name, fp, NULL);
		if (gone ? n == 0 : n == 1 && strcmp(fp, was) != 0)
			return;
		usleep(10000);
	}
	fail_msg("spec '%s' never became %s", name, gone ? "gone" : "new");
}

static void logf_quiet(void *arg, int level, const char *msg)
{
	(void)arg, (void)level, (void)msg;
}

static void test_specs_lock_off_io(void **state)
{
	(void)state;
#ifdef NDEBUG
	skip(); /* only an error-checking mutex tells its owner */
#endif
	snprintf(g_dir, sizeof(g_dir), "/tmp/mf-specs-lock-XXXXXX");
	assert_non_null(mkdtemp(g_dir));
	char path[256], store[128], pipes[128];
	snprintf(store, sizeof(store), "%s/store", g_dir);
	snprintf(pipes, sizeof(pipes), "%s/pipelines", g_dir);
	assert_int_equal(mkdir(pipes, 0755), 0);
	snprintf(path, sizeof(path), "%s/in", pipes);
	assert_int_equal(mkdir(path, 0755), 0);
	put("in/a.txt", "input\n");
	snprintf(path, sizeof(path), "%s/own", pipes);
	assert_int_equal(mkdir(path, 0755), 0);
	put("own/a.txt", "mine\n");
	put("dep.txt", "one\n");
	spec("a.yaml", "a", "a", "own/a.txt");
	spec("b.yaml", "b", "b", NULL);

	struct mfs_opts o = {.store_dir = store,
			     .pipelines_dir = pipes,
			     .workers = 1,
			     .log = logf_quiet};
	struct mfs *m;
	char *err = NULL;
	assert_int_equal(mfs_new(&o, &m, &err), 0);
	assert_non_null(g_specs);
	char fa[MF_FP_HEX_LEN + 1], fb[MF_FP_HEX_LEN + 1];
	char fc[MF_FP_HEX_LEN + 1], fb2[MF_FP_HEX_LEN + 1];
	wait_for(m, "a", NULL, false, fa);
	wait_for(m, "b", NULL, false, fb);

	/* the kernel is told about names: a session that stands for it */
	static char fake_session[64];
	assert_int_equal(
	    mfs_specs_start(m, (struct fuse_session *)fake_session, 0), 0);

	spec("b.yaml", "b", "b2", NULL); /* edited: a new fingerprint */
	wait_for(m, "b", fb, false, fb2);
	spec("c.yaml", "c", "c", NULL); /* added */
	wait_for(m, "c", NULL, false, fc);
	snprintf(path, sizeof(path), "%s/a.yaml", pipes);
	assert_int_equal(unlink(path), 0); /* removed: own/ is not watched */
	wait_for(m, "a", NULL, true, fa);
	put("dep.txt", "two\n"); /* a dep of b and c: both registered again */
	wait_for(m, "c", fc, false, fc);
	wait_for(m, "b", fb2, false, fb2);
	put("c.yaml", "name: c\nstages: [\n"); /* broken: its name goes */
	wait_for(m, "c", NULL, true, fc);
	mfs_specs_refresh(m, fb2); /* as an open that found its fp stale */

	size_t all;
	assert_int_equal(registered(m, "b", fb, &all), 1);
	assert_string_equal(fb, fb2);
	assert_int_equal(all, 1); /* a and c forgotten, b's old ones too */
	assert_int_equal(mfs_stop(m, 5000), 0);
	g_specs = NULL;
	mfs_free(m);
	if (atomic_load(&g_violations))
		fail_msg("%d calls: first: %s", atomic_load(&g_violations),
			 g_where);
	for (int i = 0; i < 6; i++) /* each path ran */
		if (atomic_load(&g_calls[i]) == 0)
			fail_msg("%s was never called", names[i]);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_specs_lock_off_io),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
