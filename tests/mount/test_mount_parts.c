/*
 * test_mount_parts.c - the FUSE layer's parts that need no mount: the
 * chunk cache (bytes, budget, held chunks, one decompression shared by
 * concurrent readers, corruption not cached, drop), the worker pool (FIFO,
 * cancelling what is queued at stop) and shard file names.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fuse_i.h"

#define CHUNK 4096
#define CHUNKS 64
#define FP "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define RUN "0123456789abcdef0123456789abcdef"

struct fx {
	char dir[64];
	struct mf_store *st;
	struct mfs_data d;
	uint8_t *want;
};

static uint8_t byte_at(size_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/mf-parts.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(mf_store_open(f->dir, true, &f->st), 0);
	assert_int_equal(mf_store_run_create(f->st, FP, RUN), 0);
	struct mf_codec_cfg cfg = {MF_CODEC_ZSTD, 1, CHUNK, 1};
	struct mf_shard_writer *w;
	assert_int_equal(mf_shard_writer_open(f->st, FP, RUN, 0, &cfg, &w), 0);
	size_t n = CHUNKS * CHUNK - 100; /* a short last chunk */
	f->want = malloc(n);
	assert_non_null(f->want);
	for (size_t i = 0; i < n; i++)
		f->want[i] = byte_at(i);
	assert_int_equal(mf_shard_writer_write(w, f->want, n), 0);
	assert_int_equal(mf_shard_writer_commit(w, NULL), 0);
	assert_int_equal(mf_shard_reader_open(f->st, FP, RUN, 0, &f->d.r), 0);
	mf_shard_reader_stat(f->d.r, &f->d.st);
	f->d.id = 7;
	atomic_init(&f->d.refs, 1);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	mf_shard_reader_close(f->d.r);
	mf_store_close(f->st);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f->want);
	free(f);
	return 0;
}

static void check_chunk(struct fx *f, struct mfs_cache *c, uint32_t i)
{
	struct mfs_chunk ch;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, i, &ch, &ref), 0);
	size_t len = i == CHUNKS - 1 ? CHUNK - 100 : CHUNK;
	assert_int_equal(ch.len, len);
	assert_memory_equal(ch.buf, f->want + (size_t)i * CHUNK, len);
	mfs_cache_unref(c, ref);
}

static void test_cache_bytes_and_budget(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(4 * CHUNK, &c), 0);
	for (uint32_t i = 0; i < CHUNKS; i++)
		check_chunk(f, c, i);
	unsigned held = 0;
	for (uint32_t i = 0; i < CHUNKS; i++)
		held += mfs_cache_has(c, &f->d, i);
	assert_true(held <= 4);
	assert_true(mfs_cache_has(c, &f->d, CHUNKS - 1)); /* most recent */
	assert_false(mfs_cache_has(c, &f->d, 0)); /* evicted */
	struct mfs_chunk ch;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, CHUNKS, &ch, &ref), -EINVAL);
	mfs_cache_drop(c, f->d.id);
	assert_false(mfs_cache_has(c, &f->d, CHUNKS - 1));
	mfs_cache_free(c);
}

static void test_cache_held_chunk_stays(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(2 * CHUNK, &c), 0);
	struct mfs_chunk held;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, 3, &held, &ref), 0);
	for (uint32_t i = 10; i < 30; i++)
		check_chunk(f, c, i);
	assert_true(mfs_cache_has(c, &f->d, 3));
	assert_memory_equal(held.buf, f->want + 3 * CHUNK, CHUNK);
	mfs_cache_unref(c, ref);
	for (uint32_t i = 30; i < 34; i++)
		check_chunk(f, c, i);
	assert_false(mfs_cache_has(c, &f->d, 3)); /* released: evictable */
	mfs_cache_free(c);
}

struct racer {
	struct fx *f;
	struct mfs_cache *c;
	const uint8_t *buf;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	struct mfs_chunk ch;
	void *ref;
	if (mfs_cache_get(r->c, &r->f->d, 9, &ch, &ref) == 0) {
		r->buf = ch.buf;
		usleep(20000); /* all hold it at once */
		mfs_cache_unref(r->c, ref);
	}
	return NULL;
}

static void test_cache_one_load_for_all(void **state)
{
	struct fx *f = *state;
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(1 << 20, &c), 0);
	struct racer r[8];
	pthread_t t[8];
	for (int i = 0; i < 8; i++) {
		r[i] = (struct racer){f, c, NULL};
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 8; i++) {
		assert_non_null(r[i].buf);
		assert_ptr_equal(r[i].buf, r[0].buf); /* one entry, one load */
	}
	mfs_cache_free(c);
}

static void test_cache_corrupt_not_kept(void **state)
{
	struct fx *f = *state;
	char path[256];
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s/shard-00000.mfs",
		 f->dir, FP, RUN);
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	/* a byte inside the first chunk's stored bytes */
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, 100), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, 100), 1);
	close(fd);
	struct mfs_cache *c;
	assert_int_equal(mfs_cache_new(1 << 20, &c), 0);
	struct mfs_chunk ch;
	void *ref;
	assert_int_equal(mfs_cache_get(c, &f->d, 0, &ch, &ref), -EBADMSG);
	assert_false(mfs_cache_has(c, &f->d, 0));
	assert_int_equal(mfs_cache_get(c, &f->d, 0, &ch, &ref), -EBADMSG);
	check_chunk(f, c, 1); /* the others still read */
	mfs_cache_free(c);
}

struct order {
	pthread_mutex_t lock;
	int ran[16], n_ran, cancelled;
};

struct job_arg {
	struct order *o;
	int id;
	unsigned sleep_us;
};

static void job(void *arg, bool cancelled)
{
	struct job_arg *a = arg;
	usleep(a->sleep_us);
	pthread_mutex_lock(&a->o->lock);
	if (cancelled)
		a->o->cancelled++;
	else
		a->o->ran[a->o->n_ran++] = a->id;
	pthread_mutex_unlock(&a->o->lock);
}

static void test_pool_fifo_and_stop(void **state)
{
	(void)state;
	struct order o = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct job_arg a[8];
	struct mfs_pool *p;
	assert_int_equal(mfs_pool_new(1, &p), 0);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct job_arg){&o, i, 1000};
		assert_int_equal(mfs_pool_submit(p, job, &a[i]), 0);
	}
	for (int i = 0; i < 200 && mfs_pool_backlog(p) > 0; i++)
		usleep(5000);
	usleep(20000);
	assert_int_equal(o.n_ran, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(o.ran[i], i); /* first in, first run */
	a[4] = (struct job_arg){&o, 4, 200000}; /* runs while we stop */
	assert_int_equal(mfs_pool_submit(p, job, &a[4]), 0);
	usleep(50000);
	for (int i = 5; i < 8; i++) {
		a[i] = (struct job_arg){&o, i, 0};
		assert_int_equal(mfs_pool_submit(p, job, &a[i]), 0);
	}
	assert_int_equal(mfs_pool_stop(p, 5000), 0);
	assert_int_equal(o.n_ran, 5);
	assert_int_equal(o.cancelled, 3);
}

static void test_shard_names(void **state)
{
	(void)state;
	assert_int_equal(mfs_shard_width(1), 5);
	assert_int_equal(mfs_shard_width(99999), 5);
	assert_int_equal(mfs_shard_width(100000), 6);
	assert_int_equal(mfs_shard_width(1000000), 7);
	struct mfs_snap_info si = {.shards = 12};
	snprintf(si.suffix, sizeof(si.suffix), ".bin");
	char name[64];
	uint32_t k = 99;
	assert_int_equal(mfs_shard_name(&si, 11, name, sizeof(name)), 0);
	assert_string_equal(name, "shard-00011.bin");
	assert_int_equal(mfs_shard_parse(&si, name, &k), 0);
	assert_int_equal(k, 11);
	const char *bad[] = {"shard-00012.bin", "shard-0011.bin",
			     "shard-00011",	"shard-00011.bi",
			     "shard-0001x.bin", "shard-000011.bin",
			     "Shard-00011.bin", ""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(mfs_shard_parse(&si, bad[i], &k), -ENOENT);
	si.shards = 100000;
	si.suffix[0] = 0;
	assert_int_equal(mfs_shard_name(&si, 7, name, sizeof(name)), 0);
	assert_string_equal(name, "shard-000007");
	assert_int_equal(mfs_shard_parse(&si, "shard-099999", &k), 0);
	assert_int_equal(k, 99999);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_cache_bytes_and_budget, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cache_held_chunk_stays, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cache_one_load_for_all, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cache_corrupt_not_kept, setup,
					    teardown),
	    cmocka_unit_test(test_pool_fifo_and_stop),
	    cmocka_unit_test(test_shard_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
