/*
 * test_util_map.c - read-only file mappings and their guard
 * (mf_map_file, mf_map_guard): the mapping holds the file's bytes from
 * any offset; a read of a page the file no longer has is -EIO inside the
 * guard, again and again, and the thread goes on; outside any guard such
 * a read still dies of SIGBUS, and a SIGBUS sent by kill(2) still
 * terminates the process inside a guard or not.
 *
 * Not for: who maps (the chunk cache's batch chunks, snapshot's
 * mf_shard_reader_map_chunk).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_util.h"

#define LEN (3 * 65536 + 123)

static char path[64];

static int setup(void **state)
{
	(void)state;
	snprintf(path, sizeof(path), "/tmp/mf-map-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	for (size_t i = 0; i < LEN; i++) {
		unsigned char b = (unsigned char)(i * 7 + 3);
		assert_int_equal(write(fd, &b, 1), 1);
	}
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

struct copy {
	void *dst;
	const void *src;
	size_t n;
};

static int copy_run(void *arg)
{
	struct copy *c = arg;
	memcpy(c->dst, c->src, c->n);
	return 7; /* fn's own result comes back */
}

/* Each case runs in a child of its own, which installs the guard's
 * handler itself (cmocka puts its own SIGBUS handler in place around
 * each test, and back after it): CHECK exits with the failing line. */
#define CHECK(x)                                                               \
	do {                                                                   \
		if (!(x))                                                      \
			_exit(__LINE__ % 250 + 1);                             \
	} while (0)

/* fn's exit in a child: its status from waitpid. */
static int in_child(void (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		fn();
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void expect_ok(void (*fn)(void))
{
	int status = in_child(fn);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("child: exit %d signal %d",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
			 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void expect_sigbus(void (*fn)(void))
{
	int status = in_child(fn);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGBUS)
		fail_msg("child: exit %d signal %d, not SIGBUS",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
			 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* The bytes of any range, at an offset off a page boundary. */
static void map_bytes(void)
{
	CHECK(mf_map_usable());
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	void *base;
	size_t maplen;
	const uint8_t *p = mf_map_file(fd, 4097, LEN - 4097, &base, &maplen);
	CHECK(p != NULL);
	uint8_t *out = malloc(LEN);
	struct copy c = {out, p, LEN - 4097};
	CHECK(mf_map_guard(copy_run, &c) == 7);
	for (size_t i = 4097; i < LEN; i++)
		CHECK(out[i - 4097] == (unsigned char)(i * 7 + 3));
	mf_map_free(base, maplen);
	errno = 0;
	CHECK(mf_map_file(fd, 0, 0, &base, &maplen) == NULL);
	CHECK(errno == ENOTSUP);
	free(out);
	close(fd);
}

static void test_map_bytes(void **state)
{
	(void)state;
	expect_ok(map_bytes);
}

/* A file cut short under its mapping: -EIO inside the guard, each time,
 * and the bytes still there read as before. */
static void map_cut_short(void)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	void *base;
	size_t maplen;
	const uint8_t *p = mf_map_file(fd, 0, LEN, &base, &maplen);
	CHECK(p != NULL);
	CHECK(ftruncate(fd, 65536) == 0);
	uint8_t *out = malloc(LEN);
	struct copy c = {out, p, LEN};
	for (int i = 0; i < 3; i++)
		CHECK(mf_map_guard(copy_run, &c) == -EIO);
	struct copy head = {out, p, 65536};
	CHECK(mf_map_guard(copy_run, &head) == 7);
	CHECK(out[65535] == (unsigned char)(65535 * 7 + 3));
	mf_map_free(base, maplen);
	free(out);
	close(fd);
}

static void test_map_cut_short(void **state)
{
	(void)state;
	expect_ok(map_cut_short);
}

/* Outside a guard the fault still kills: the default action, after a
 * guarded one was caught. */
static void map_unguarded(void)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	void *base;
	size_t maplen;
	const volatile uint8_t *p = mf_map_file(fd, 0, LEN, &base, &maplen);
	CHECK(p != NULL);
	CHECK(ftruncate(fd, 4096) == 0);
	uint8_t out[1];
	struct copy c = {out, (const void *)(p + 8192), 1};
	CHECK(mf_map_guard(copy_run, &c) == -EIO);
	(void)p[8192]; /* no guard: SIGBUS */
}

static void test_map_unguarded_dies(void **state)
{
	(void)state;
	expect_sigbus(map_unguarded);
}

static int kill_self(void *arg)
{
	(void)arg;
	kill(getpid(), SIGBUS);
	return 0;
}

/* A SIGBUS sent, not faulted, ends the process even inside a guard. */
static void map_sent(void)
{
	(void)mf_map_guard(kill_self, NULL);
}

static void test_map_sent_signal_kills(void **state)
{
	(void)state;
	expect_sigbus(map_sent);
}

struct faulter {
	const uint8_t *p;
	int rc[50];
};

static void *faulter_run(void *arg)
{
	struct faulter *f = arg;
	uint8_t out[1];
	struct copy c = {out, f->p + 3 * 65536, 1};
	for (int i = 0; i < 50; i++)
		f->rc[i] = mf_map_guard(copy_run, &c);
	return NULL;
}

/* Threads faulting at once each get their own -EIO. */
static void map_threads(void)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	void *base;
	size_t maplen;
	const uint8_t *p = mf_map_file(fd, 0, LEN, &base, &maplen);
	CHECK(p != NULL);
	CHECK(ftruncate(fd, 65536) == 0);
	pthread_t th[4];
	struct faulter f[4];
	for (int i = 0; i < 4; i++) {
		f[i].p = p;
		CHECK(pthread_create(&th[i], NULL, faulter_run, &f[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		for (int k = 0; k < 50; k++)
			CHECK(f[i].rc[k] == -EIO);
	}
	mf_map_free(base, maplen);
	close(fd);
}

static void test_map_threads(void **state)
{
	(void)state;
	expect_ok(map_threads);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_map_bytes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_map_cut_short, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_map_unguarded_dies, setup,
					    teardown),
	    cmocka_unit_test(test_map_sent_signal_kills),
	    cmocka_unit_test_setup_teardown(test_map_threads, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
