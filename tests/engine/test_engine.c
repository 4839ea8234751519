/*
 * test_engine.c - the materialization engine end to end, without a mount:
 * single flight across threads and processes, failures that leave nothing
 * materialized, recomputation after corruption and expiry, specs whose
 * inputs changed, gc, cancelling a computation or a wait, and 1 GiB
 * streamed in bounded memory.
 *
 * Stages are small /bin/sh scripts that count their own calls by appending
 * to a file, so each test asserts how many times the stages really ran.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
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
#include <sqlite3.h>

#include "mf_catalog.h"
#include "mf_engine.h"
#include "mf_snapshot.h"
#include "mf_testlib.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MF_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MF_SANITIZED 1
#endif
#endif
#ifndef MF_SANITIZED
#define MF_SANITIZED 0
#endif

struct fx {
	char dir[64]; /* project folder: spec, inputs, call log */
	char store[96]; /* store folder */
	char spec[128];
	struct mf_engine *e;
	char fp[65];
};

static void fx_path(const struct fx *fx, const char *name, char *buf,
		    size_t len)
{
	snprintf(buf, len, "%s/%s", fx->dir, name);
}

/* Writes a spec with inputs in/a.txt .. in/d.txt and the given stage. */
static void fx_spec(struct fx *fx, const char *stage_yaml, unsigned shards)
{
	char path[256], text[4096];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	const char *names[] = {"a", "b", "c", "d"};
	for (int i = 0; i < 4; i++) {
		char body[64];
		snprintf(path, sizeof(path), "%s/in/%s.txt", fx->dir, names[i]);
		snprintf(body, sizeof(body), "input %s line\n", names[i]);
		tl_write_file(path, body);
	}
	snprintf(text, sizeof(text),
		 "name: t\ninputs: in/*.txt\nshards: %u\nstages:\n%s"
		 "compression: zstd:1\nchunk_size: 4KiB\n",
		 shards, stage_yaml);
	tl_write_file(fx->spec, text);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-engine-XXXXXX");
	if (!fx || !mkdtemp(fx->dir))
		return -1;
	snprintf(fx->store, sizeof(fx->store), "%s/store", fx->dir);
	snprintf(fx->spec, sizeof(fx->spec), "%s/spec.yaml", fx->dir);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	mf_engine_close(fx->e);
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

static void fx_open(struct fx *fx)
{
	struct mf_engine_opts o = {.store_dir = fx->store};
	char *err = NULL;
	int rc = mf_engine_open(&o, &fx->e, &err);
	if (rc)
		fail_msg("engine: %s", err ? err : strerror(-rc));
	rc = mf_engine_register(fx->e, fx->spec, fx->fp, &err);
	if (rc)
		fail_msg("register: %s", err ? err : strerror(-rc));
}

static int count_calls(const struct fx *fx)
{
	char path[256], line[256];
	fx_path(fx, "calls", path, sizeof(path));
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	return n;
}

/* Reads a whole shard through the engine into a malloc'd buffer. */
static int read_shard(struct mf_engine *e, const char *fp, uint32_t shard,
		      char **data, size_t *len, char **err)
{
	struct mf_shard_reader *r;
	int rc = mf_engine_open_shard(e, fp, shard, &r, err);
	if (rc)
		return rc;
	struct mf_shard_stat st;
	mf_shard_reader_stat(r, &st);
	*data = malloc(st.raw_bytes + 1);
	ssize_t n = mf_shard_reader_pread(r, *data, st.raw_bytes, 0);
	mf_shard_reader_close(r);
	if (n < 0 || (uint64_t)n != st.raw_bytes) {
		free(*data);
		return n < 0 ? (int)n : -EIO;
	}
	*len = (size_t)n;
	return 0;
}

/* Reads shard k of fp through e, which must succeed, and checks its
 * bytes: len of them (SIZE_MAX: any number), starting with prefix (NULL:
 * anything). The read-and-check every test here makes. */
static void read_expect(struct mf_engine *e, const char *fp, uint32_t k,
			size_t len, const char *prefix)
{
	char *data, *err = NULL;
	size_t n;
	int rc = read_shard(e, fp, k, &data, &n, &err);
	if (rc)
		fail_msg("shard %u: %s", (unsigned)k,
			 err ? err : strerror(-rc));
	if (len != SIZE_MAX)
		assert_int_equal(n, len);
	if (prefix) {
		assert_true(n >= strlen(prefix));
		assert_memory_equal(data, prefix, strlen(prefix));
	}
	free(data);
	free(err);
}

/* A stage that logs its call, waits a little, and upper-cases its input. */
#define COUNTING_STAGE                                                         \
	"  - exec: [/bin/sh, -c, 'echo $MATFS_SHARD >> calls; sleep 0.3; "     \
	"tr a-z A-Z']\n"

static void test_bytes_and_reuse(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 2);
	fx_open(fx);
	char *err = NULL;
	const char want[] = "INPUT B LINE\nINPUT D LINE\n";
	read_expect(fx->e, fx->fp, 1, strlen(want), want);
	assert_int_equal(count_calls(fx), 1);

	/* a second engine (a new process's view) reads it from the store */
	mf_engine_close(fx->e);
	fx->e = NULL;
	fx_open(fx);
	read_expect(fx->e, fx->fp, 1, strlen(want), want);
	assert_int_equal(count_calls(fx), 1);
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 2, NULL, &err),
			 -ENOENT);
	free(err);
}

struct thr {
	struct fx *fx;
	int rc;
	char *data;
	size_t len;
};

static void *reader_thread(void *arg)
{
	struct thr *t = arg;
	char *err = NULL;
	t->rc = read_shard(t->fx->e, t->fx->fp, 0, &t->data, &t->len, &err);
	free(err);
	return NULL;
}

static void test_single_flight_threads(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 1);
	fx_open(fx);
	pthread_t tids[16];
	struct thr t[16];
	for (int i = 0; i < 16; i++) {
		t[i] = (struct thr){fx, -1, NULL, 0};
		assert_int_equal(
		    pthread_create(&tids[i], NULL, reader_thread, &t[i]), 0);
	}
	for (int i = 0; i < 16; i++)
		pthread_join(tids[i], NULL);
	const char want[] =
	    "INPUT A LINE\nINPUT B LINE\nINPUT C LINE\nINPUT D LINE\n";
	for (int i = 0; i < 16; i++) {
		assert_int_equal(t[i].rc, 0);
		assert_int_equal(t[i].len, strlen(want));
		assert_memory_equal(t[i].data, want, t[i].len);
		free(t[i].data);
	}
	assert_int_equal(count_calls(fx), 1);
}

/* 16 processes, each with its own engine on the same store. Each child
 * writes its bytes to a file; the parent compares them. */
static void test_single_flight_processes(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 1);
	fx_open(fx);
	mf_engine_close(fx->e);
	fx->e = NULL;
	pid_t pids[16];
	for (int i = 0; i < 16; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct mf_engine *e;
			struct mf_engine_opts o = {.store_dir = fx->store};
			char *data, *err = NULL, out[256];
			size_t len;
			if (mf_engine_open(&o, &e, &err) ||
			    read_shard(e, fx->fp, 0, &data, &len, &err))
				_exit(1);
			snprintf(out, sizeof(out), "%s/out%d", fx->dir, i);
			FILE *f = fopen(out, "w");
			if (!f || fwrite(data, 1, len, f) != len || fclose(f))
				_exit(2);
			mf_engine_close(e);
			_exit(0);
		}
	}
	for (int i = 0; i < 16; i++) {
		int st;
		assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	const char want[] =
	    "INPUT A LINE\nINPUT B LINE\nINPUT C LINE\nINPUT D LINE\n";
	for (int i = 0; i < 16; i++) {
		char path[256], buf[256] = {0};
		snprintf(path, sizeof(path), "%s/out%d", fx->dir, i);
		FILE *f = fopen(path, "r");
		assert_non_null(f);
		size_t n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		assert_int_equal(n, strlen(want));
		assert_memory_equal(buf, want, n);
	}
	assert_int_equal(count_calls(fx), 1);
}

static void assert_state(struct fx *fx, uint32_t shard,
			 enum mf_shard_state want)
{
	struct mf_catalog *c;
	struct mf_shard_rec rec;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, shard, &rec), 0);
	assert_int_equal(rec.state, want);
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);
}

/* The stage writes output, then kills itself, unless the file "ok"
 * exists. Nothing may be materialized; the retry succeeds. */
static void test_killed_stage_then_retry(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx,
		"  - exec: [/bin/sh, -c, 'echo x >> calls; cat; "
		"[ -e ok ] || { echo dying >&2; kill -9 $$; }']\n",
		1);
	fx_open(fx);
	struct mf_shard_reader *r = NULL;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err),
			 -EIO);
	assert_non_null(err);
	assert_non_null(strstr(err, "signal 9"));
	free(err);
	err = NULL;
	assert_state(fx, 0, MF_SHARD_FAILED);

	struct mf_catalog *c;
	struct mf_shard_rec rec;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, 0, &rec), 0);
	assert_non_null(rec.stderr_tail);
	assert_non_null(strstr(rec.stderr_tail, "dying"));
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);

	char ok[256];
	fx_path(fx, "ok", ok, sizeof(ok));
	tl_write_file(ok, "");
	read_expect(fx->e, fx->fp, 0, 4 * strlen("input a line\n"), NULL);
	assert_int_equal(count_calls(fx), 2);
	assert_state(fx, 0, MF_SHARD_MATERIALIZED);
}

/* Flips one byte of the committed shard file: the read fails, never with
 * wrong bytes; after the report the next open recomputes. */
static void test_corrupt_recomputes(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 1);
	fx_open(fx);
	char *data, *err = NULL;
	size_t len;
	read_expect(fx->e, fx->fp, 0, SIZE_MAX, NULL);

	struct mf_catalog *c;
	struct mf_shard_rec rec;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, 0, &rec), 0);
	mf_catalog_close(c);
	char path[512];
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s/shard-00000.mfs",
		 fx->store, fx->fp, rec.run_id);
	mf_shard_rec_release(&rec);
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	char b;
	/* a byte in the first half of the file: a header or chunk byte */
	struct stat sb;
	assert_int_equal(fstat(fd, &sb), 0);
	off_t at = sb.st_size / 3;
	assert_int_equal(pread(fd, &b, 1, at), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	close(fd);

	/* Either the read reports the corruption (and the caller reports it
	 * back), or the open already noticed and recomputed: never wrong
	 * bytes, and in the end exactly one recomputation. */
	int rc = read_shard(fx->e, fx->fp, 0, &data, &len, &err);
	if (rc == 0) {
		assert_int_equal(len, 4 * 13);
		assert_memory_equal(data, "INPUT A LINE\n", 13);
		free(data);
	} else {
		assert_int_equal(rc, -EBADMSG);
		assert_int_equal(mf_engine_report_corrupt(fx->e, fx->fp, 0, 0),
				 0);
	}
	read_expect(fx->e, fx->fp, 0, 4 * 13, "INPUT A LINE\n");
	assert_int_equal(count_calls(fx), 2);
}

/* Opens shard 0 with its row and checks the row describes the reader. */
static struct mf_shard_reader *open_rec(struct mf_engine *e, const char *fp,
					struct mf_engine_shard *rec)
{
	struct mf_shard_reader *r = NULL;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard_rec(e, fp, 0, &r, rec, &err), 0);
	assert_null(err);
	struct mf_shard_stat st;
	mf_shard_reader_stat(r, &st);
	assert_int_equal(rec->state, MF_ENGINE_MATERIALIZED);
	assert_int_equal(rec->index, 0);
	assert_string_equal(rec->fp, fp);
	assert_int_equal(strlen(rec->run_id), MF_RUN_ID_HEX_LEN);
	assert_int_equal(rec->raw_bytes, st.raw_bytes);
	assert_int_equal(rec->stored_bytes, st.stored_bytes);
	assert_int_equal(rec->chunks, st.chunks);
	return r;
}

static bool shard_file_exists_at(const struct fx *fx, const char *run_id,
				 uint32_t shard)
{
	char path[512];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s/shard-%05u.mfs",
		 fx->store, fx->fp, run_id, shard);
	return stat(path, &sb) == 0;
}

static bool shard_file_exists(const struct fx *fx, const char *run_id)
{
	return shard_file_exists_at(fx, run_id, 0);
}

/* Deletes every hold of the catalog, as a catalog that lost them. */
static void drop_holds(struct fx *fx)
{
	struct mf_catalog *c;
	struct mf_run_rec *v;
	size_t n;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_list_holds(c, NULL, &v, &n), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(mf_catalog_release(c, v[i].run_id, NULL), 0);
	free(v);
	mf_catalog_close(c);
}

/* A corrupt chunk found in an old computation's file expires only that
 * computation: never a newer one of the same run (after an expiry, or
 * after its rows were deleted and made again, where run id and attempts
 * repeat) or of another run. */
static void test_corrupt_report_names_its_file(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, "  - exec: [/bin/sh, -c, 'echo x >> calls; cat']\n", 1);
	fx_open(fx);
	struct mf_engine_shard x, y, w, z;
	struct mf_shard_reader *rx = open_rec(fx->e, fx->fp, &x);
	assert_int_equal(x.attempts, 1);
	assert_true(x.generation > 0);
	assert_int_equal(mf_engine_expire_shard(fx->e, fx->fp, 0), 0);
	struct mf_shard_reader *ry = open_rec(fx->e, fx->fp, &y);
	/* this process computed it again under the same run */
	assert_string_equal(y.run_id, x.run_id);
	assert_int_equal(y.attempts, 2);
	assert_true(y.generation != x.generation);
	assert_int_equal(count_calls(fx), 2);

	assert_int_equal(
	    mf_engine_report_corrupt(fx->e, fx->fp, 0, x.generation), 0);
	assert_state(fx, 0, MF_SHARD_MATERIALIZED);
	assert_true(shard_file_exists(fx, y.run_id));

	/* another process deletes the rows (matctl rm, once this process's
	 * hold is gone: a catalog.db replaced under it, say); registered
	 * again, the same run computes it as attempt 1 again */
	struct mf_engine *e2;
	struct mf_engine_opts o = {.store_dir = fx->store};
	char *err = NULL, fp2[65];
	assert_int_equal(mf_engine_open(&o, &e2, &err), 0);
	drop_holds(fx);
	assert_int_equal(mf_engine_expire_snapshot(e2, fx->fp), 0);
	assert_int_equal(mf_engine_register(fx->e, fx->spec, fp2, &err), 0);
	struct mf_shard_reader *rw = open_rec(fx->e, fx->fp, &w);
	assert_string_equal(w.run_id, x.run_id);
	assert_int_equal(w.attempts, x.attempts);
	assert_true(w.generation != x.generation);
	assert_int_equal(
	    mf_engine_report_corrupt(fx->e, fx->fp, 0, x.generation), 0);
	assert_state(fx, 0, MF_SHARD_MATERIALIZED);
	assert_true(shard_file_exists(fx, w.run_id));
	assert_int_equal(count_calls(fx), 3);

	/* another process's run computes it next */
	assert_int_equal(mf_engine_register(e2, fx->spec, fp2, &err), 0);
	assert_int_equal(mf_engine_expire_shard(e2, fx->fp, 0), 0);
	struct mf_shard_reader *rz = open_rec(e2, fx->fp, &z);
	assert_string_not_equal(z.run_id, w.run_id);
	assert_int_equal(
	    mf_engine_report_corrupt(fx->e, fx->fp, 0, w.generation), 0);
	assert_state(fx, 0, MF_SHARD_MATERIALIZED);
	assert_true(shard_file_exists(fx, z.run_id));

	/* the current computation's own report expires it */
	assert_int_equal(
	    mf_engine_report_corrupt(fx->e, fx->fp, 0, z.generation), 0);
	assert_state(fx, 0, MF_SHARD_ABSENT);
	assert_false(shard_file_exists(fx, z.run_id));
	assert_int_equal(count_calls(fx), 4);
	mf_shard_reader_close(rx);
	mf_shard_reader_close(ry);
	mf_shard_reader_close(rw);
	mf_shard_reader_close(rz);
	mf_engine_shard_release(&x);
	mf_engine_shard_release(&y);
	mf_engine_shard_release(&w);
	mf_engine_shard_release(&z);
	mf_engine_close(e2);
}

static void test_expire_and_gc(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 2);
	fx_open(fx);
	char *err = NULL;
	read_expect(fx->e, fx->fp, 0, SIZE_MAX, NULL);
	assert_int_equal(mf_engine_expire_shard(fx->e, fx->fp, 0), 0);
	assert_state(fx, 0, MF_SHARD_ABSENT);
	read_expect(fx->e, fx->fp, 0, SIZE_MAX, NULL);
	assert_int_equal(count_calls(fx), 2);

	/* still registered: the snapshot stays, every shard absent */
	assert_int_equal(mf_engine_expire_snapshot(fx->e, fx->fp), 0);
	assert_state(fx, 0, MF_SHARD_ABSENT);
	struct mf_gc_stats st;
	assert_int_equal(mf_engine_gc(fx->e, &st), 0);

	/* an engine that does not serve it removes it entirely */
	mf_engine_close(fx->e);
	struct mf_engine_opts o = {.store_dir = fx->store};
	assert_int_equal(mf_engine_open(&o, &fx->e, &err), 0);
	assert_int_equal(mf_engine_expire_snapshot(fx->e, fx->fp), 0);
	char path[512];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/snapshots/%s", fx->store, fx->fp);
	assert_int_equal(stat(path, &sb), -1);
	assert_int_equal(errno, ENOENT);

	/* a folder the catalog does not know is garbage */
	snprintf(path, sizeof(path), "%s/snapshots/%064d", fx->store, 0);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_int_equal(mf_engine_gc(fx->e, &st), 0);
	assert_int_equal(st.snapshots_removed, 1);
	assert_int_equal(stat(path, &sb), -1);
}

static void test_changed_input_is_stale(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 2);
	fx_open(fx);
	char path[256];
	fx_path(fx, "in/b.txt", path, sizeof(path));
	tl_write_file(path, "changed after registration, longer\n");
	struct mf_shard_reader *r = NULL;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 1, &r, &err),
			 -ESTALE);
	assert_non_null(err);
	assert_non_null(strstr(err, "changed"));
	free(err);
	assert_int_equal(count_calls(fx), 0);
	assert_state(fx, 1, MF_SHARD_ABSENT);
}

static void test_gib_bounded_memory(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, "  - exec: [cat]\n", 1); /* makes the inputs */
	char text[512];
	snprintf(text, sizeof(text),
		 "name: big\ninputs: in/*.txt\nshards: 1\nstages:\n"
		 "  - exec: [head, -c, '1073741824', /dev/zero]\n"
		 "compression: zstd:1\n");
	tl_write_file(fx->spec, text);
	fx_open(fx);
	struct mf_shard_reader *r = NULL;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	struct mf_shard_stat st;
	mf_shard_reader_stat(r, &st);
	assert_int_equal(st.raw_bytes, 1073741824ULL);
	char buf[4096];
	assert_int_equal(mf_shard_reader_pread(r, buf, sizeof(buf),
					       st.raw_bytes - sizeof(buf)),
			 (ssize_t)sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
	mf_shard_reader_close(r);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	print_message("peak RSS streaming 1 GiB: %ld KiB\n", ru.ru_maxrss);
#if !MF_SANITIZED /* shadow memory and quarantines inflate RSS */
	assert_true(ru.ru_maxrss < 64 * 1024);
#endif
}

static void sql_exec(const struct fx *fx, const char *sql)
{
	char path[256];
	sqlite3 *db;
	snprintf(path, sizeof(path), "%s/catalog.db", fx->store);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 10000);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/* A process that cannot compute a fingerprint (its spec now yields
 * another) gives the claim back instead of recording a failure: a reader
 * in another process waiting on that attempt then computes it itself, or
 * gets its own ESTALE, never an EIO for a failure that was not one. */
static void test_stale_spec_gives_the_claim_back(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 1);
	fx_open(fx);
	struct mf_engine *e2;
	struct mf_engine_opts o = {.store_dir = fx->store};
	char *err = NULL;
	assert_int_equal(mf_engine_open(&o, &e2, &err), 0);
	/* the spec file now yields another fingerprint */
	tl_write_file(fx->spec,
		      "name: t\ninputs: in/*.txt\nstages:\n"
		      "  - exec: [rev]\n");
	struct mf_shard_reader *r = NULL;
	assert_int_equal(mf_engine_open_shard(e2, fx->fp, 0, &r, &err),
			 -ESTALE);
	assert_non_null(err);
	assert_non_null(strstr(err, "can no longer be computed"));
	free(err);
	err = NULL;
	assert_state(fx, 0, MF_SHARD_ABSENT);
	mf_engine_close(e2);
	/* the registering engine still computes it from its own spec */
	read_expect(fx->e, fx->fp, 0, 52, "INPUT A LINE\n");
	assert_int_equal(count_calls(fx), 1);
}

/* Another process's claim declared our run dead: the engine must start a
 * new run rather than fail every later open with ESTALE. */
static void test_run_declared_dead(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 2);
	fx_open(fx);
	char *err = NULL;
	read_expect(fx->e, fx->fp, 0, SIZE_MAX, NULL);
	sql_exec(fx, "UPDATE runs SET state = 'dead'");
	read_expect(fx->e, fx->fp, 1, SIZE_MAX, "INPUT B LINE\n");
	free(err);
	assert_int_equal(count_calls(fx), 2);
}

struct holder {
	struct fx *fx;
	char marker[256];
};

/* Holds the catalog's write lock for a while once the stage started. */
static void *hold_lock(void *arg)
{
	struct holder *h = arg;
	char path[256];
	snprintf(path, sizeof(path), "%s/catalog.db", h->fx->store);
	while (access(h->marker, F_OK) != 0)
		usleep(5000);
	sqlite3 *db;
	if (sqlite3_open(path, &db) != SQLITE_OK)
		return NULL;
	sqlite3_busy_timeout(db, 10000);
	if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) ==
	    SQLITE_OK) {
		usleep(1200000);
		sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	}
	sqlite3_close(db);
	return NULL;
}

/* The catalog stays busy past the busy timeout while the shard is being
 * recorded: that open may fail, but the shard must not stay "running"
 * under our own live run, which would make every later open wait forever
 * (alarm() turns a hang into a failure). */
static void test_busy_catalog_does_not_wedge(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx,
		"  - exec: [/bin/sh, -c, 'echo x >> calls; : > started; "
		"sleep 0.3; cat']\n",
		1);
	struct mf_engine_opts o = {.store_dir = fx->store,
				   .busy_timeout_ms = 200};
	char *err = NULL;
	assert_int_equal(mf_engine_open(&o, &fx->e, &err), 0);
	assert_int_equal(mf_engine_register(fx->e, fx->spec, fx->fp, &err), 0);
	struct holder h = {fx, ""};
	fx_path(fx, "started", h.marker, sizeof(h.marker));
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, hold_lock, &h), 0);
	char *data;
	size_t len;
	int rc = read_shard(fx->e, fx->fp, 0, &data, &len, &err);
	if (rc == 0)
		free(data);
	else
		assert_int_equal(rc, -EIO);
	free(err);
	err = NULL;
	pthread_join(tid, NULL);
	alarm(60);
	read_expect(fx->e, fx->fp, 0, 4 * 13, NULL);
	alarm(0);
	assert_state(fx, 0, MF_SHARD_MATERIALIZED);
}

static void *rewrite_input(void *arg)
{
	struct holder *h = arg;
	char path[256];
	while (access(h->marker, F_OK) != 0)
		usleep(5000);
	fx_path(h->fx, "in/a.txt", path, sizeof(path));
	tl_write_file(path, "rewritten while the stage ran\n");
	return NULL;
}

/* An input that changes while the stages read it: the bytes no longer
 * belong to the fingerprint, so nothing may be recorded under it. */
static void test_input_changed_during_run(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx,
		"  - exec: [/bin/sh, -c, 'echo x >> calls; : > started; "
		"sleep 0.5; cat']\n",
		1);
	fx_open(fx);
	struct holder h = {fx, ""};
	fx_path(fx, "started", h.marker, sizeof(h.marker));
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, rewrite_input, &h), 0);
	struct mf_shard_reader *r = NULL;
	char *err = NULL;
	int rc = mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err);
	pthread_join(tid, NULL);
	assert_int_equal(rc, -ESTALE);
	assert_non_null(err);
	assert_non_null(strstr(err, "input[in/a.txt]"));
	free(err);
	/* no failure of the shard: given back, so that a waiter elsewhere
	 * finds the change for itself rather than an EIO */
	assert_state(fx, 0, MF_SHARD_ABSENT);
}

/* A stage that logs its pid to calls and waits for the file "go". */
#define WAITING_STAGE                                                          \
	"  - exec: [/bin/sh, -c, 'echo $$ >> calls; "                          \
	"while [ ! -e go ]; do sleep 0.05; done; cat']\n"
/* A pid of a process that has exited and been reaped, with the start time
 * it had. */
static pid_t dead_pid(uint64_t *start)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pause();
		_exit(0);
	}
	*start = mf_proc_start_time(pid);
	assert_true(*start != 0);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	assert_false(mf_process_alive(pid, *start));
	return pid;
}

/* A run of this host and boot that holds shard `shard` and has a temp
 * file in its folder, as a writer mid-way leaves it; pid_ns as given. */
static void foreign_writer(struct fx *fx, char seed, uint32_t shard, pid_t pid,
			   uint64_t start, uint64_t pid_ns,
			   struct mf_run_rec *r)
{
	memset(r, 0, sizeof(*r));
	memset(r->run_id, seed, MF_RUN_ID_HEX_LEN);
	memcpy(r->fp, fx->fp, sizeof(r->fp));
	mf_hostname(r->host, sizeof(r->host));
	assert_int_equal(mf_boot_id(r->boot_id), 0);
	r->pid_ns = pid_ns;
	r->pid = pid;
	r->pid_start = start;
	r->started = r->heartbeat = mf_now_s();
	snprintf(r->state, sizeof(r->state), "active");
	struct mf_catalog *c;
	enum mf_claim got;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(
	    mf_catalog_claim_shard(c, fx->fp, shard, r, mf_now_s(), &got, NULL),
	    0);
	assert_int_equal(got, MF_CLAIM_MINE);
	mf_catalog_close(c);
	char path[512];
	assert_int_equal(
	    mf_store_run_create(mf_engine_store(fx->e), fx->fp, r->run_id), 0);
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s/shard-%05u.tmp",
		 fx->store, fx->fp, r->run_id, shard);
	tl_write_file(path, "partial");
}

static bool tmp_exists(const struct fx *fx, const struct mf_run_rec *r,
		       uint32_t shard)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s/shard-%05u.tmp",
		 fx->store, fx->fp, r->run_id, shard);
	return access(path, F_OK) == 0;
}

static uint32_t fsck_problems(const struct fx *fx)
{
	struct mf_engine_opts o = {.store_dir = fx->store};
	uint32_t n = 99;
	char *err = NULL;
	assert_int_equal(mf_engine_fsck(&o, NULL, NULL, &n, &err), 0);
	return n;
}

/* Two containers on one host may share a hostname without sharing pids.
 * A writer in another pid namespace whose pid is gone from ours is alive
 * while it heartbeats: gc keeps its temp file, fsck sees no orphan. Once
 * silent past pending_expiry (1d) it is dead. And the reverse: a writer of
 * this very namespace is dead as soon as its process is, heartbeat or
 * not. */
static void test_gc_judges_by_namespace(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 2);
	fx_open(fx);
	uint64_t start;
	pid_t gone = dead_pid(&start);
	struct mf_run_rec other, here;
	foreign_writer(fx, 'a', 0, gone, start, mf_pid_ns() + 1, &other);
	struct mf_gc_stats st;
	assert_int_equal(mf_engine_gc(fx->e, &st), 0);
	assert_true(tmp_exists(fx, &other, 0));
	assert_int_equal(st.files_removed, 0);
	assert_int_equal(fsck_problems(fx), 0);

	char sql[256];
	snprintf(sql, sizeof(sql),
		 "UPDATE runs SET heartbeat = heartbeat - 2 * 86400"
		 " WHERE run_id = '%s'",
		 other.run_id);
	sql_exec(fx, sql);
	assert_int_equal(fsck_problems(fx), 1); /* its temp file */
	assert_int_equal(mf_engine_gc(fx->e, &st), 0);
	assert_false(tmp_exists(fx, &other, 0));
	assert_int_equal(st.files_removed, 1);

	foreign_writer(fx, 'b', 1, gone, start, mf_pid_ns(), &here);
	assert_int_equal(fsck_problems(fx), 1);
	assert_int_equal(mf_engine_gc(fx->e, &st), 0);
	assert_false(tmp_exists(fx, &here, 1));
	assert_int_equal(st.files_removed, 1);
}

/* Waits (up to a minute) until the stage has been called n times. */
static void wait_calls(const struct fx *fx, int n)
{
	for (int i = 0; i < 60000 && count_calls(fx) < n; i++)
		usleep(1000);
	assert_int_equal(count_calls(fx), n);
}

static void touch(const struct fx *fx, const char *name)
{
	char path[256];
	fx_path(fx, name, path, sizeof(path));
	tl_write_file(path, "");
}

static int count_runs(const struct fx *fx)
{
	struct mf_catalog *c;
	struct mf_run_rec *runs = NULL;
	size_t n = 0;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_list_runs(c, fx->fp, &runs, &n), 0);
	free(runs);
	mf_catalog_close(c);
	return (int)n;
}

#define MANY 16

struct opener {
	struct mf_engine *e;
	const char *fp;
	uint32_t shard;
	pthread_barrier_t *go; /* may be NULL */
	int rc;
	char *data;
	size_t len;
	char *err;
};

static void *open_thread(void *arg)
{
	struct opener *o = arg;
	if (o->go)
		pthread_barrier_wait(o->go);
	o->rc = read_shard(o->e, o->fp, o->shard, &o->data, &o->len, &o->err);
	return NULL;
}

static void opener_start(struct opener *o, pthread_t *tid, struct mf_engine *e,
			 const char *fp, uint32_t shard, pthread_barrier_t *go)
{
	*o = (struct opener){
	    .e = e, .fp = fp, .shard = shard, .go = go, .rc = -1};
	assert_int_equal(pthread_create(tid, NULL, open_thread, o), 0);
}

/* Joins the opener and checks it read want. */
static void opener_expect(pthread_t tid, struct opener *o, const char *want)
{
	pthread_join(tid, NULL);
	if (o->rc)
		fail_msg("open of shard %u: %s: %s", o->shard, strerror(-o->rc),
			 o->err ? o->err : "");
	assert_int_equal(o->len, strlen(want));
	assert_memory_equal(o->data, want, o->len);
	free(o->data);
	free(o->err);
}

/* Opens shard i of fp on thread i, all at once, and checks the bytes. */
static void open_many_at_once(struct mf_engine *e, const char *fp)
{
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, MANY);
	pthread_t tids[MANY];
	struct opener o[MANY];
	char want[64];
	for (int i = 0; i < MANY; i++)
		opener_start(&o[i], &tids[i], e, fp, (uint32_t)i, &go);
	for (int i = 0; i < MANY; i++) {
		snprintf(want, sizeof(want), "input %02d\n", i);
		opener_expect(tids[i], &o[i], want);
	}
	pthread_barrier_destroy(&go);
}

/* Opens of many shards of one fingerprint at once, in one process: one
 * run (one catalog row, one folder) for them all. A first round on
 * another fingerprint fills the engine's pool of catalog connections, so
 * that the second round's threads reach the run bookkeeping together. */
static void test_one_run_per_process(void **state)
{
	struct fx *fx = *state;
	char path[256], text[512], warm[65], *err = NULL;
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	mkdir(path, 0755);
	for (int i = 0; i < MANY; i++) {
		snprintf(path, sizeof(path), "%s/in/%02d.txt", fx->dir, i);
		snprintf(text, sizeof(text), "input %02d\n", i);
		tl_write_file(path, text);
	}
	snprintf(text, sizeof(text),
		 "name: warm\ninputs: in/*.txt\nshards: %d\nstages:\n"
		 "  - exec: [cat, '-']\n",
		 MANY);
	fx_path(fx, "warm.yaml", path, sizeof(path));
	tl_write_file(path, text);
	snprintf(text, sizeof(text),
		 "name: t\ninputs: in/*.txt\nshards: %d\nstages:\n"
		 "  - exec: [cat]\n",
		 MANY);
	tl_write_file(fx->spec, text);
	fx_open(fx);
	assert_int_equal(mf_engine_register(fx->e, path, warm, &err), 0);
	open_many_at_once(fx->e, warm);
	open_many_at_once(fx->e, fx->fp);
	assert_int_equal(count_runs(fx), 1);
	char **runs;
	size_t n;
	assert_int_equal(
	    mf_store_list_runs(mf_engine_store(fx->e), fx->fp, &runs, &n), 0);
	assert_int_equal(n, 1);
	mf_strv_free(runs, n);
}

/* Waits for the file "go", for a minute at most (a failed test leaves
 * no stage behind for long). */
#define GATE                                                                   \
	"i=0; while [ ! -e go ] && [ $i -lt 3000 ]; do sleep 0.02; "           \
	"i=$((i+1)); done; "

/* Shard 0's stage waits for the gate; other shards run at once. */
#define GATED_STAGE                                                            \
	"  - exec: [/bin/sh, -c, 'echo $MATFS_SHARD >> calls; "                \
	"if [ $MATFS_SHARD = 0 ]; then " GATE "fi; cat']\n"

/* Our run is declared dead (by a claimer elsewhere that misjudged it)
 * while it computes shard 0: opens of other shards start a new run rather
 * than fail, and shard 0 still completes. */
static void test_run_declared_dead_in_flight(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, GATED_STAGE, 2);
	fx_open(fx);
	pthread_t tid;
	struct opener o;
	opener_start(&o, &tid, fx->e, fx->fp, 0, NULL);
	wait_calls(fx, 1);
	sql_exec(fx, "UPDATE runs SET state = 'dead'");
	char *data, *err = NULL;
	size_t len;
	int rc = read_shard(fx->e, fx->fp, 1, &data, &len, &err);
	if (rc)
		fail_msg("shard 1: %s: %s", strerror(-rc), err ? err : "");
	assert_int_equal(len, 26);
	assert_memory_equal(data, "input b line\ninput d line\n", len);
	free(data);
	touch(fx, "go");
	opener_expect(tid, &o, "input a line\ninput c line\n");
	assert_int_equal(count_calls(fx), 2);
	assert_int_equal(count_runs(fx), 2);
}

/* The first call of the stage fails once "go" exists; later calls
 * succeed. */
#define FIRST_FAILS_STAGE                                                      \
	"  - exec: [/bin/sh, -c, 'echo x >> calls; n=$(wc -l < calls); " GATE  \
	"[ $n != 1 ] || exit 1; cat']\n"

/* Our run is declared dead while it computes and another process takes
 * the shard over; then our stage fails. That failure is no longer the
 * shard's: our opens (the leader and its followers) get the new owner's
 * result. */
static void test_claim_taken_over_in_flight(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, FIRST_FAILS_STAGE, 1);
	fx_open(fx);
	pthread_t lead, follow, other;
	struct opener a, f, b;
	opener_start(&a, &lead, fx->e, fx->fp, 0, NULL);
	wait_calls(fx, 1);
	opener_start(&f, &follow, fx->e, fx->fp, 0, NULL);
	sql_exec(fx, "UPDATE runs SET state = 'dead'");

	struct mf_engine *e2;
	struct mf_engine_opts opts = {.store_dir = fx->store};
	char *err = NULL;
	assert_int_equal(mf_engine_open(&opts, &e2, &err), 0);
	opener_start(&b, &other, e2, fx->fp, 0, NULL);
	wait_calls(fx, 2);
	touch(fx, "go");
	const char want[] =
	    "input a line\ninput b line\ninput c line\ninput d line\n";
	opener_expect(other, &b, want);
	opener_expect(lead, &a, want);
	opener_expect(follow, &f, want);
	assert_int_equal(count_calls(fx), 2);
	mf_engine_close(e2);
}

/* A failure before the stages start (the run folder cannot be made: the
 * snapshot's folder is a file) with err NULL: the caller did not ask for
 * the message, the catalog still gets it. */
static void test_failure_without_err(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 1);
	fx_open(fx);
	char path[256], cmd[512];
	snprintf(path, sizeof(path), "%s/snapshots/%s", fx->store, fx->fp);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	assert_int_equal(system(cmd), 0);
	tl_write_file(path, "not a folder");
	struct mf_shard_reader *r = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, NULL),
			 -EIO);
	assert_null(r);
	struct mf_catalog *c;
	struct mf_shard_rec rec;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, 0, &rec), 0);
	assert_int_equal(rec.state, MF_SHARD_FAILED);
	assert_non_null(rec.error);
	assert_non_null(strstr(rec.error, "run folder"));
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);
	assert_int_equal(count_calls(fx), 0);
}

/* A stage that fails slowly: it waits at the gate, then exits 1 unless
 * the file "ok" exists. */
#define SLOW_FAIL_STAGE                                                        \
	"  - exec: [/bin/sh, -c, 'echo x >> calls; " GATE                      \
	"[ -e ok ] || exit 1; cat']\n"

/* Joins the opener and checks it failed with EIO and the stage's error. */
static void opener_expect_eio(pthread_t tid, struct opener *o)
{
	pthread_join(tid, NULL);
	if (o->rc == 0)
		free(o->data);
	assert_int_equal(o->rc, -EIO);
	assert_non_null(o->err);
	assert_non_null(strstr(o->err, "exited with status 1"));
	free(o->err);
}

/* The engine's claims go through this wrapper (-Wl,--wrap), which counts
 * the WAIT answers: a test knows when an open is waiting. */
int __real_mf_catalog_claim_shard_waited(struct mf_catalog *c, const char *fp,
					 uint32_t index,
					 const struct mf_run_rec *me,
					 int64_t now, uint64_t waited,
					 enum mf_claim *result,
					 struct mf_shard_rec *cur);
int __wrap_mf_catalog_claim_shard_waited(struct mf_catalog *c, const char *fp,
					 uint32_t index,
					 const struct mf_run_rec *me,
					 int64_t now, uint64_t waited,
					 enum mf_claim *result,
					 struct mf_shard_rec *cur);
static int claims_waiting; /* WAIT answers so far; atomic */

int __wrap_mf_catalog_claim_shard_waited(struct mf_catalog *c, const char *fp,
					 uint32_t index,
					 const struct mf_run_rec *me,
					 int64_t now, uint64_t waited,
					 enum mf_claim *result,
					 struct mf_shard_rec *cur)
{
	int rc = __real_mf_catalog_claim_shard_waited(c, fp, index, me, now,
						      waited, result, cur);
	if (rc == 0 && *result == MF_CLAIM_WAIT)
		__atomic_add_fetch(&claims_waiting, 1, __ATOMIC_SEQ_CST);
	return rc;
}

/* Two engines on one store (two daemons): one runs a stage that fails,
 * the other waits on its claim. The failure reaches both, the stage ran
 * once; the next open tries again, once. */
static void test_failure_reaches_every_waiter(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, SLOW_FAIL_STAGE, 1);
	fx_open(fx);
	struct mf_engine *e2;
	struct mf_engine_opts o = {.store_dir = fx->store};
	char *err = NULL;
	assert_int_equal(mf_engine_open(&o, &e2, &err), 0);
	pthread_t ta, tb;
	struct opener a, b;
	opener_start(&a, &ta, fx->e, fx->fp, 0, NULL);
	wait_calls(fx, 1);
	__atomic_store_n(&claims_waiting, 0, __ATOMIC_SEQ_CST);
	opener_start(&b, &tb, e2, fx->fp, 0, NULL);
	for (int i = 0; i < 60000 &&
	     __atomic_load_n(&claims_waiting, __ATOMIC_SEQ_CST) == 0;
	     i++)
		usleep(1000);
	assert_true(__atomic_load_n(&claims_waiting, __ATOMIC_SEQ_CST) > 0);
	touch(fx, "go");
	opener_expect_eio(ta, &a);
	opener_expect_eio(tb, &b);
	assert_int_equal(count_calls(fx), 1);
	assert_state(fx, 0, MF_SHARD_FAILED);

	touch(fx, "ok");
	read_expect(e2, fx->fp, 0, 4 * 13, NULL);
	assert_int_equal(count_calls(fx), 2);
	mf_engine_close(e2);
}

/* ---- something happens between expiry's listing and its writes ---- */

/* The engine's calls to mf_catalog_list_shards go through this wrapper
 * (-Wl,--wrap): once armed, after_listing runs right after the listing,
 * before the caller acts on it. */
int __real_mf_catalog_list_shards(struct mf_catalog *c, const char *fp,
				  struct mf_shard_rec **out, size_t *n);
int __wrap_mf_catalog_list_shards(struct mf_catalog *c, const char *fp,
				  struct mf_shard_rec **out, size_t *n);
static void (*after_listing)(void *arg);
static void *after_listing_arg;

int __wrap_mf_catalog_list_shards(struct mf_catalog *c, const char *fp,
				  struct mf_shard_rec **out, size_t *n)
{
	int rc = __real_mf_catalog_list_shards(c, fp, out, n);
	void (*fn)(void *) = after_listing;
	after_listing = NULL;
	if (fn)
		fn(after_listing_arg);
	return rc;
}

struct meanwhile {
	struct fx *fx;
	pthread_t tid;
	struct opener o;
};

/* Another engine (fx->e) opens shard 0 and is computing it. */
static void claim_meanwhile(void *arg)
{
	struct meanwhile *m = arg;
	opener_start(&m->o, &m->tid, m->fx->e, m->fx->fp, 0, NULL);
	wait_calls(m->fx, 1);
}

/* An engine that does not serve the snapshot expires it (matctl rm, or a
 * daemon whose spec is gone) while another claims shard 0 between the
 * listing and the delete: the claim, its run row and its folder survive,
 * and the shard completes. */
static void test_expiry_spares_a_claim_made_meanwhile(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, GATED_STAGE, 2);
	fx_open(fx);
	struct mf_engine *rm;
	struct mf_engine_opts o = {.store_dir = fx->store};
	char *err = NULL;
	assert_int_equal(mf_engine_open(&o, &rm, &err), 0);
	struct meanwhile m = {.fx = fx};
	after_listing = claim_meanwhile;
	after_listing_arg = &m;
	assert_int_equal(mf_engine_expire_snapshot(rm, fx->fp), 0);
	assert_null(after_listing); /* it did run */
	mf_engine_close(rm);

	assert_int_equal(count_runs(fx), 1);
	char **runs;
	size_t n;
	assert_int_equal(
	    mf_store_list_runs(mf_engine_store(fx->e), fx->fp, &runs, &n), 0);
	assert_int_equal(n, 1);
	mf_strv_free(runs, n);
	assert_state(fx, 0, MF_SHARD_RUNNING);
	touch(fx, "go");
	opener_expect(m.tid, &m.o, "input a line\ninput c line\n");
	assert_state(fx, 0, MF_SHARD_MATERIALIZED);
	assert_int_equal(count_calls(fx), 1);
}

/* Shard 1 is expired and computed again by the same run between the
 * listing and the expiry's writes: the expiry decided from the older
 * computation, so the newer one and its file stay. */
static void recompute_meanwhile(void *arg)
{
	struct fx *fx = arg;
	assert_int_equal(mf_engine_expire_shard(fx->e, fx->fp, 1), 0);
	read_expect(fx->e, fx->fp, 1, SIZE_MAX, NULL);
}

static void test_expiry_spares_a_newer_computation(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, GATED_STAGE, 2);
	fx_open(fx);
	struct mf_engine_shard x;
	struct mf_shard_reader *r;
	char *err = NULL;
	read_expect(fx->e, fx->fp, 1, SIZE_MAX, NULL);
	after_listing = recompute_meanwhile;
	after_listing_arg = fx;
	assert_int_equal(mf_engine_expire_snapshot(fx->e, fx->fp), 0);
	assert_null(after_listing);

	assert_int_equal(
	    mf_engine_open_shard_rec(fx->e, fx->fp, 1, &r, &x, &err), 0);
	mf_shard_reader_close(r);
	assert_int_equal(x.state, MF_ENGINE_MATERIALIZED);
	assert_int_equal(x.attempts, 2);
	assert_true(shard_file_exists_at(fx, x.run_id, 1));
	assert_int_equal(count_calls(fx), 2);
	/* and the expiry of what is there now does expire it */
	assert_int_equal(mf_engine_expire_snapshot(fx->e, fx->fp), 0);
	assert_state(fx, 1, MF_SHARD_ABSENT);
	assert_false(shard_file_exists_at(fx, x.run_id, 1));
	mf_engine_shard_release(&x);
}

struct cancel_opener {
	struct mf_engine *e;
	const char *fp;
	uint32_t shard;
	int rc;
	atomic_bool done;
};

static void *opener_main(void *arg)
{
	struct cancel_opener *o = arg;
	struct mf_shard_reader *r = NULL;
	char *err = NULL;
	o->rc = mf_engine_open_shard(o->e, o->fp, o->shard, &r, &err);
	mf_shard_reader_close(r);
	free(err);
	atomic_store(&o->done, true);
	return NULL;
}

/* Waits until calls has n lines; returns the pid on the last one. */
static pid_t wait_calls_pid(const struct fx *fx, int n)
{
	for (int i = 0; i < 1000 && count_calls(fx) < n; i++)
		usleep(10000);
	assert_int_equal(count_calls(fx), n);
	char path[256], line[64] = "";
	fx_path(fx, "calls", path, sizeof(path));
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		;
	fclose(f);
	return (pid_t)atoi(line);
}

/* Cancels o's attempt until its open returned (the attempt may not have
 * begun at the first call); returns its result. */
static int cancel_until_done(struct cancel_opener *o, pthread_t t)
{
	for (int i = 0; i < 1000 && !atomic_load(&o->done); i++) {
		mf_engine_cancel(o->e, o->fp, o->shard);
		usleep(10000);
	}
	pthread_join(t, NULL);
	return o->rc;
}

static void assert_absent_no_error(struct fx *fx, uint32_t shard)
{
	struct mf_catalog *c;
	struct mf_shard_rec rec;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_get_shard(c, fx->fp, shard, &rec), 0);
	assert_int_equal(rec.state, MF_SHARD_ABSENT);
	assert_null(rec.error);
	assert_int_equal(rec.exit_status, -1);
	mf_shard_rec_release(&rec);
	mf_catalog_close(c);
}

/* mf_engine_cancel stops a computation (its stages killed, the shard back
 * to absent, no failure recorded) or a wait for another process's, which
 * goes on; mf_engine_cancel_all stops every later computation too. */
static void test_cancel(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, WAITING_STAGE, 2);
	fx_open(fx);
	struct cancel_opener a = {fx->e, fx->fp, 0, 1, false};
	pthread_t ta, tb;
	assert_int_equal(pthread_create(&ta, NULL, opener_main, &a), 0);
	pid_t stage = wait_calls_pid(fx, 1);
	assert_int_equal(kill(stage, 0), 0);
	assert_int_equal(cancel_until_done(&a, ta), -ECANCELED);
	assert_int_equal(kill(stage, 0), -1); /* killed and reaped */
	assert_int_equal(errno, ESRCH);
	assert_absent_no_error(fx, 0);

	/* another engine computes it; this one's wait is cancelled */
	struct mf_engine *e2;
	struct mf_engine_opts o = {.store_dir = fx->store};
	char *err = NULL;
	assert_int_equal(mf_engine_open(&o, &e2, &err), 0);
	struct cancel_opener b = {e2, fx->fp, 0, 1, false};
	assert_int_equal(pthread_create(&tb, NULL, opener_main, &b), 0);
	stage = wait_calls_pid(fx, 2);
	a = (struct cancel_opener){fx->e, fx->fp, 0, 1, false};
	assert_int_equal(pthread_create(&ta, NULL, opener_main, &a), 0);
	assert_int_equal(cancel_until_done(&a, ta), -ECANCELED);
	assert_int_equal(kill(stage, 0), 0); /* the other's goes on */
	assert_false(atomic_load(&b.done));
	char go[256];
	fx_path(fx, "go", go, sizeof(go));
	tl_write_file(go, "");
	pthread_join(tb, NULL);
	assert_int_equal(b.rc, 0);
	assert_int_equal(count_calls(fx), 2);
	assert_state(fx, 0, MF_SHARD_MATERIALIZED);
	mf_engine_close(e2);

	/* after cancel_all: materialized shards open, nothing is computed */
	mf_engine_cancel_all(fx->e);
	struct mf_shard_reader *r = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	mf_shard_reader_close(r);
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 1, &r, &err),
			 -ECANCELED);
	free(err);
	assert_absent_no_error(fx, 1);
}

/* The engine's metadata writes go through this wrapper (-Wl,--wrap): with
 * vanish_next set, the next one finds the snapshot removed by another
 * process first (its catalog row deleted, its folder gone), as a matctl
 * expire between a daemon's catalog write and its metadata write does. */
int __real_mf_store_write_metadata(struct mf_store *st, const char *fp,
				   const void *data, size_t len);
int __wrap_mf_store_write_metadata(struct mf_store *st, const char *fp,
				   const void *data, size_t len);
static const struct fx *vanish_next;

int __wrap_mf_store_write_metadata(struct mf_store *st, const char *fp,
				   const void *data, size_t len)
{
	const struct fx *fx = vanish_next;
	if (fx) {
		vanish_next = NULL;
		char sql[256];
		snprintf(sql, sizeof(sql),
			 "DELETE FROM snapshots WHERE fp = '%s'", fp);
		sql_exec(fx, sql);
		(void)mf_store_snapshot_remove(st, fp);
		return -ENOENT;
	}
	return __real_mf_store_write_metadata(st, fp, data, len);
}

/* A registration whose snapshot another process removed midway still
 * registers: the row and the metadata are both there afterwards, and the
 * shard computes. */
static void test_register_survives_a_removal(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 2);
	fx_open(fx);
	/* no metadata: the registration below has to write it */
	assert_int_equal(
	    mf_store_snapshot_remove(mf_engine_store(fx->e), fx->fp), 0);
	vanish_next = fx;
	char fp[65], *err = NULL;
	int rc = mf_engine_register(fx->e, fx->spec, fp, &err);
	if (rc)
		fail_msg("register: %s", err ? err : strerror(-rc));
	assert_null(vanish_next);
	assert_string_equal(fp, fx->fp);
	char path[512];
	snprintf(path, sizeof(path), "%s/snapshots/%s/snapshot.metadata",
		 fx->store, fx->fp);
	assert_int_equal(access(path, F_OK), 0);
	assert_state(fx, 0, MF_SHARD_ABSENT);
	struct mf_shard_reader *r = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	mf_shard_reader_close(r);
}

/* The catalog row of shard k, as the engine's read gives it. */
static struct mf_engine_shard row_of(struct fx *fx, uint32_t k)
{
	struct mf_engine_shard rec;
	assert_int_equal(mf_engine_shard_rec(fx->e, fx->fp, k, &rec), 0);
	return rec;
}

static void set_last_read(struct fx *fx, uint32_t k, int64_t t)
{
	struct mf_catalog *c;
	assert_int_equal(mf_engine_catalog_open(fx->e, &c), 0);
	assert_int_equal(mf_catalog_touch(c, fx->fp, k, t), 0);
	mf_catalog_close(c);
}

static bool have_answer;
static uint64_t have_asked;

static bool have_it(void *arg, const struct mf_engine_shard *rec)
{
	(void)arg;
	have_asked = rec->generation;
	return have_answer;
}

/* The fast path's contract: -EAGAIN (nothing changed) for a shard that
 * needs the slow path, a reader and the row of a materialized one, no
 * reader when the caller has that computation, last read touched only
 * when older than MF_ENGINE_TOUCH_EVERY_S. */
static void test_open_materialized(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 2);
	fx_open(fx);
	struct mf_shard_reader *r = NULL;
	struct mf_engine_shard rec;
	char *err = NULL;
	assert_int_equal(
	    mf_engine_open_materialized(fx->e, fx->fp, 0, NULL, NULL, &r, &rec),
	    -EAGAIN);
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 0, &r, &err), 0);
	mf_shard_reader_close(r);
	r = NULL;

	/* a reader of the row's file; the row is the catalog's */
	set_last_read(fx, 0, mf_now_s() - MF_ENGINE_TOUCH_EVERY_S - 5);
	have_answer = false;
	assert_int_equal(mf_engine_open_materialized(fx->e, fx->fp, 0, have_it,
						     NULL, &r, &rec),
			 0);
	assert_non_null(r);
	struct mf_engine_shard now = row_of(fx, 0);
	assert_int_equal(rec.state, MF_ENGINE_MATERIALIZED);
	assert_true(rec.generation > 0);
	assert_int_equal(rec.generation, now.generation);
	assert_int_equal(have_asked, now.generation);
	char buf[64];
	const char want[] = "INPUT A LINE\nINPUT C LINE\n";
	assert_int_equal(mf_shard_reader_pread(r, buf, sizeof(buf), 0),
			 strlen(want));
	assert_memory_equal(buf, want, strlen(want));
	mf_shard_reader_close(r);
	/* the old last read was touched to now */
	assert_true(now.last_read >= mf_now_s() - 5);
	mf_engine_shard_release(&now);
	mf_engine_shard_release(&rec);

	/* the caller has it: no reader; a recent last read stays */
	int64_t recent = mf_now_s() - MF_ENGINE_TOUCH_EVERY_S / 2;
	set_last_read(fx, 0, recent);
	have_answer = true;
	r = (struct mf_shard_reader *)&r;
	assert_int_equal(mf_engine_open_materialized(fx->e, fx->fp, 0, have_it,
						     NULL, &r, &rec),
			 0);
	assert_null(r);
	mf_engine_shard_release(&rec);
	now = row_of(fx, 0);
	assert_int_equal(now.last_read, recent);

	/* its file gone: the slow path's to sort out, the row untouched */
	char path[512];
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s/shard-00000.mfs",
		 fx->store, fx->fp, now.run_id);
	assert_int_equal(unlink(path), 0);
	have_answer = false;
	assert_int_equal(mf_engine_open_materialized(fx->e, fx->fp, 0, have_it,
						     NULL, &r, &rec),
			 -EAGAIN);
	struct mf_engine_shard after = row_of(fx, 0);
	assert_int_equal(after.state, MF_SHARD_MATERIALIZED);
	assert_int_equal(after.generation, now.generation);
	mf_engine_shard_release(&after);
	mf_engine_shard_release(&now);
	assert_int_equal(mf_engine_shard_rec(fx->e, fx->fp, 7, &rec), -ENOENT);
}

/* The front ends' reads answer what the catalog holds. */
static void test_front_reads(void **state)
{
	struct fx *fx = *state;
	fx_spec(fx, COUNTING_STAGE, 2);
	fx_open(fx);
	struct mf_shard_reader *r = NULL;
	char *err = NULL;
	assert_int_equal(mf_engine_open_shard(fx->e, fx->fp, 1, &r, &err), 0);
	mf_shard_reader_close(r);

	struct mf_engine_snapshot *v;
	size_t n;
	assert_int_equal(mf_engine_list_snapshots(fx->e, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0].fp, fx->fp);
	assert_string_equal(v[0].name, "t");
	assert_int_equal(v[0].materialized, 1);
	mf_engine_snapshot_recs_free(v, n);

	struct mf_engine_snapshot snap;
	assert_int_equal(mf_engine_snapshot(fx->e, fx->fp, &snap), 0);
	assert_int_equal(snap.shards, 2);
	mf_engine_snapshot_release(&snap);
	char other[65];
	memset(other, 'e', 64);
	other[64] = '\0';
	assert_int_equal(mf_engine_snapshot(fx->e, other, &snap), -ENOENT);

	struct mf_engine_shard *sh;
	assert_int_equal(mf_engine_list_shards(fx->e, fx->fp, &sh, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(sh[0].state, MF_ENGINE_ABSENT);
	assert_int_equal(sh[1].state, MF_ENGINE_MATERIALIZED);
	mf_engine_shard_recs_free(sh, n);

	/* this engine registered the spec: it holds fp */
	char(*held)[MF_FP_HEX_LEN + 1];
	assert_int_equal(mf_engine_list_held(fx->e, &held, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(held[0], fx->fp);
	free(held);
	/* closed, it holds nothing */
	mf_engine_close(fx->e);
	struct mf_engine_opts o = {.store_dir = fx->store};
	assert_int_equal(mf_engine_open(&o, &fx->e, &err), 0);
	assert_int_equal(mf_engine_list_held(fx->e, &held, &n), 0);
	assert_int_equal(n, 0);
	free(held);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_open_materialized, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_front_reads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_gib_bounded_memory, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_bytes_and_reuse, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_single_flight_threads, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_single_flight_processes, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_killed_stage_then_retry, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_corrupt_recomputes, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_corrupt_report_names_its_file,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_expire_and_gc, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_changed_input_is_stale, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		test_stale_spec_gives_the_claim_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_run_declared_dead, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_busy_catalog_does_not_wedge,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_input_changed_during_run,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_register_survives_a_removal,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_gc_judges_by_namespace, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_one_run_per_process, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_run_declared_dead_in_flight,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_claim_taken_over_in_flight,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failure_without_err, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		test_expiry_spares_a_claim_made_meanwhile, setup, teardown),
	    cmocka_unit_test_setup_teardown(
		test_expiry_spares_a_newer_computation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failure_reaches_every_waiter,
					    setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
