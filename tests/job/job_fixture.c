/*
 * job_fixture.c - see job_fixture.h.
 *
 * Not for: production code.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "job_fixture.h"

static char *xstrdup(const char *s)
{
	char *p = strdup(s);

	assert_non_null(p);
	return p;
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	assert_non_null(p);
	return p;
}

int jt_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

int jt_setup(void **state)
{
	struct jt *t = calloc(1, sizeof *t);
	char path[128];

	if (!t)
		return -1;
	snprintf(t->dir, sizeof t->dir, "/tmp/mf-job-XXXXXX");
	if (!mkdtemp(t->dir)) {
		free(t);
		return -1;
	}
	snprintf(path, sizeof path, "%s/job.yaml", t->dir);
	t->spec.path = xstrdup(path);
	t->spec.dir = xstrdup(t->dir);
	t->spec.name = xstrdup("jobtest");
	t->spec.suffix = xstrdup("");
	t->spec.shards = 1;
	t->spec.chunk_size = 4 << 20;
	t->spec.expire_after = -1;
	t->spec.pending_expiry = 86400;
	/* the guard and its socket live as long as the process: started
	 * before the count */
	assert_int_equal(mf_job_guard_start(), 0);
	t->fds_before = jt_count_fds();
	*state = t;
	return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void free_strv(char **v, size_t n)
{
	for (size_t k = 0; v && k < n; k++)
		free(v[k]);
	free(v);
}

int jt_teardown(void **state)
{
	struct jt *t = *state;
	struct mf_spec *s = &t->spec;

	for (size_t i = 0; i < s->n_stages; i++)
		free_strv(s->stages[i].argv, s->stages[i].argc);
	free(s->stages);
	free_strv(s->inputs, s->n_inputs);
	free_strv(s->inputs_rel, s->n_inputs);
	free(s->path);
	free(s->dir);
	free(s->name);
	free(s->suffix);
	nftw(t->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(t);
	return 0;
}

void jt_file(struct jt *t, const char *name, const char *data, mode_t mode)
{
	char path[512];
	int fd;

	snprintf(path, sizeof path, "%s/%s", t->dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

const char *jt_input(struct jt *t, const char *name, const char *data,
		     size_t len)
{
	struct mf_spec *s = &t->spec;
	char path[512];
	int fd;

	snprintf(path, sizeof path, "%s/%s", t->dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
	s->inputs = xrealloc(s->inputs, (s->n_inputs + 1) * sizeof(char *));
	s->inputs_rel =
	    xrealloc(s->inputs_rel, (s->n_inputs + 1) * sizeof(char *));
	s->inputs[s->n_inputs] = xstrdup(path);
	s->inputs_rel[s->n_inputs] = xstrdup(name);
	return s->inputs[s->n_inputs++];
}

void jt_stage(struct jt *t, int64_t timeout_s, const char *arg0, ...)
{
	struct mf_spec *s = &t->spec;
	struct mf_stage *st;
	const char *a;
	va_list ap;

	s->stages = xrealloc(s->stages, (s->n_stages + 1) * sizeof *st);
	st = &s->stages[s->n_stages++];
	memset(st, 0, sizeof *st);
	st->timeout_s = timeout_s;
	va_start(ap, arg0);
	for (a = arg0; a; a = va_arg(ap, const char *)) {
		st->argv = xrealloc(st->argv, (st->argc + 2) * sizeof(char *));
		st->argv[st->argc++] = xstrdup(a);
		st->argv[st->argc] = NULL;
	}
	va_end(ap);
}

void jt_run(struct jt *t, uint32_t shard, size_t chunk, struct jt_run *r)
{
	struct mf_job *j = NULL;
	size_t cap = 4096;

	memset(r, 0, sizeof *r);
	r->out = xrealloc(NULL, cap + 1);
	r->start_rc = mf_job_start(&t->spec, shard, "00ff", &j, &r->err);
	r->out[0] = '\0';
	if (r->start_rc < 0)
		return;
	assert_non_null(j);
	for (;;) {
		if (cap - r->len < chunk) {
			cap = 2 * cap + chunk;
			r->out = xrealloc(r->out, cap + 1);
		}
		r->read_rc = mf_job_read(j, r->out + r->len, chunk);
		if (r->read_rc <= 0)
			break;
		r->len += (size_t)r->read_rc;
	}
	r->out[r->len] = '\0';
	r->finish_rc = mf_job_finish(j, &r->res);
}

void jt_run_release(struct jt_run *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof *r);
}

/* Children of this process, running or zombies, but the guard. */
static int count_children(void)
{
	DIR *d = opendir("/proc");
	pid_t self = getpid(), guard = mf_job_guard_pid();
	int n = 0;
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));) {
		char path[300], buf[1024];
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t got = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[got] = 0;
		char *p = strrchr(buf, ')');
		int ppid = 0;
		if (p && sscanf(p + 1, " %*c %d", &ppid) == 1 && ppid == self &&
		    atoi(e->d_name) != guard)
			n++;
	}
	closedir(d);
	return n;
}

void jt_assert_clean(struct jt *t)
{
	assert_int_equal(jt_count_fds(), t->fds_before);
	assert_int_equal(count_children(), 0);
	assert_true(mf_job_guard_pid() > 0);
	assert_int_equal(kill(mf_job_guard_pid(), 0), 0); /* still guards */
}

char *jt_slurp(const char *path)
{
	char *buf = xrealloc(NULL, 4096);
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	n = read(fd, buf, 4095);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

uint64_t jt_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* State letter from /proc/PID/stat, 0 when the process is gone. */
static char proc_state(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

int jt_pid_running(pid_t pid, int wait_ms)
{
	uint64_t until = jt_ms() + (uint64_t)wait_ms;

	for (;;) {
		char st = proc_state(pid);

		if (kill(pid, 0) < 0 || st == 'Z' || st == 'X' || st == 0)
			return 0;
		if (jt_ms() >= until)
			return 1;
		usleep(10000);
	}
}
