/*
 * test_snap_out.c - appending a file's bytes with O_DIRECT (file_out.c):
 * every length around the 2 MiB buffers, in pieces of every size, gives
 * the exact bytes; the buffers written with O_DIRECT never enter the page
 * cache (mincore), where the folder's file system takes O_DIRECT; a file
 * size limit met in the middle is reported as the page cache's write
 * reports it (EFBIG), the bytes before it written; a descriptor without
 * O_DIRECT (a pipe) gets every byte through plain writes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snap_testutil.h"
#include "snapshot_i.h"

#define MIB ((size_t)1 << 20)

struct fixture {
	char dir[64];
	char path[96];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/mf-out.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/f", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	unlink(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Writes data in pieces of `piece` bytes (0: lengths that cycle through
 * odd sizes) through a snap_out and returns the file's bytes. */
static uint8_t *write_file(struct fixture *f, const uint8_t *data, size_t len,
			   size_t piece, size_t *got_len)
{
	unlink(f->path);
	int fd = open(f->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	struct snap_out *o;
	assert_int_equal(snap_out_open(fd, &o), 0);
	static const size_t odd[] = {1,	    4095,    4097,
				     65536, 1000003, 3 * MIB + 5};
	size_t off = 0, k = 0;
	while (off < len) {
		size_t n = piece ? piece : odd[k++ % 6];
		n = n < len - off ? n : len - off;
		assert_int_equal(snap_out_put(o, data + off, n), 0);
		off += n;
	}
	assert_int_equal(snap_out_end(o), 0);
	snap_out_free(o);
	assert_int_equal(close(fd), 0);
	uint8_t *got;
	assert_int_equal(tu_read_file(f->path, &got, got_len), 0);
	return got;
}

static void test_lengths(void **state)
{
	struct fixture *f = *state;
	size_t max = 9 * MIB + 4097;
	uint8_t *data = malloc(max);
	tu_fill(data, max, 3, false);
	static const size_t lens[] = {
	    0,		 1,	  4096,	       2 * MIB - 1, 2 * MIB,
	    2 * MIB + 1, 4 * MIB, 4 * MIB + 7, 6 * MIB - 1, 9 * MIB + 4097};
	static const size_t pieces[] = {0, 1 << 20, 2 << 20, 7, 5 << 20};
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		for (size_t j = 0; j < sizeof(pieces) / sizeof(pieces[0]);
		     j++) {
			if (pieces[j] == 7 && lens[i] > 64 * 1024)
				continue; /* 7-byte pieces: small files only */
			size_t n;
			uint8_t *got =
			    write_file(f, data, lens[i], pieces[j], &n);
			assert_int_equal(n, lens[i]);
			if (n)
				assert_memory_equal(got, data, n);
			free(got);
		}
	}
	free(data);
}

/* Pages of path's first `len` bytes the page cache holds. */
static size_t resident(const char *path, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	size_t pages = (len + 4095) / 4096, n = 0;
	unsigned char *vec = malloc(pages);
	assert_int_equal(mincore(p, len, vec), 0);
	for (size_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	free(vec);
	munmap(p, len);
	close(fd);
	return n;
}

static void test_bypasses_page_cache(void **state)
{
	struct fixture *f = *state;
	/* does the folder's file system take O_DIRECT at all? */
	int fd = open(f->path, O_WRONLY | O_CREAT | O_CLOEXEC | O_DIRECT, 0644);
	if (fd < 0) {
		print_message("skipped: no O_DIRECT in %s\n", f->dir);
		return;
	}
	close(fd);
	size_t len = 8 * MIB + 100;
	uint8_t *data = malloc(len);
	tu_fill(data, len, 5, false);
	unlink(f->path);
	fd = open(f->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	struct snap_out *o;
	assert_int_equal(snap_out_open(fd, &o), 0);
	assert_int_equal(snap_out_put(o, data, len), 0);
	assert_int_equal(snap_out_end(o), 0);
	snap_out_free(o);
	close(fd);
	/* the four full buffers went around the page cache, not the tail */
	assert_int_equal(resident(f->path, 8 * MIB), 0);
	uint8_t *got;
	size_t n;
	assert_int_equal(tu_read_file(f->path, &got, &n), 0);
	assert_int_equal(n, len);
	assert_memory_equal(got, data, len);
	free(got);
	free(data);
}

static void test_size_limit(void **state)
{
	struct fixture *f = *state;
	size_t len = 7 * MIB;
	uint8_t *data = malloc(len);
	tu_fill(data, len, 9, false);
	void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
	struct rlimit old, lim;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	unlink(f->path);
	int fd = open(f->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	struct snap_out *o;
	assert_int_equal(snap_out_open(fd, &o), 0);
	lim = old;
	lim.rlim_cur = 3 * MIB + 12345; /* in the second buffer */
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	int rc = snap_out_put(o, data, len);
	if (rc == 0)
		rc = snap_out_end(o);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	snap_out_free(o);
	close(fd);
	signal(SIGXFSZ, prev);
	assert_int_equal(rc, -EFBIG);
	uint8_t *got;
	size_t n;
	assert_int_equal(tu_read_file(f->path, &got, &n), 0);
	assert_int_equal(n, 3 * MIB + 12345); /* up to the limit, exact */
	assert_memory_equal(got, data, n);
	free(got);
	free(data);
}

static void test_pipe(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(fcntl(p[1], F_SETPIPE_SZ, 1 << 20) >= 0, 1);
	struct snap_out *o;
	assert_int_equal(snap_out_open(p[1], &o), 0);
	uint8_t data[100000];
	tu_fill(data, sizeof(data), 1, false);
	assert_int_equal(snap_out_put(o, data, sizeof(data)), 0);
	assert_int_equal(snap_out_end(o), 0);
	snap_out_free(o);
	close(p[1]);
	uint8_t got[sizeof(data)];
	size_t n = 0;
	ssize_t r;
	while ((r = read(p[0], got + n, sizeof(got) - n)) > 0)
		n += (size_t)r;
	close(p[0]);
	assert_int_equal(n, sizeof(data));
	assert_memory_equal(got, data, n);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_lengths),
	    T(test_bypasses_page_cache),
	    T(test_size_limit),
	    T(test_pipe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
