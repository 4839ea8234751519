/*
 * test_engine_close.c - mf_engine_open undoes exactly what it did when it
 * fails, and mf_engine_close gives this engine's holds up in the catalog
 * as it is at close. The engine's lock and condition variable calls are
 * wrapped (--wrap): the test fails each init in turn and counts every
 * object made and destroyed, and a destroy of one never made.
 *
 * Not for: what holds keep (tests/engine/test_engine.c, the mount tests).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_i.h"
#include "mf_testlib.h"

/* ---- the wrapped calls: what was made, what was destroyed ---- */

#define LIVE_MAX 256
static atomic_flag live_guard = ATOMIC_FLAG_INIT;
static const void *live[LIVE_MAX]; /* objects made and not destroyed */
static size_t n_live;
static unsigned bad_destroys; /* destroys of objects never made */
static int fail_at; /* the init call (1, 2, ...) to fail; 0: none */
static int n_inits;
static bool fired; /* fail_at was reached */
static bool fail_random; /* mf_random_hex fails once */

int __real_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int __real_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __real_pthread_mutex_destroy(pthread_mutex_t *m);
int __real_pthread_cond_destroy(pthread_cond_t *c);
int __real_mf_random_hex(size_t nbytes, char *out);
int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __wrap_pthread_mutex_destroy(pthread_mutex_t *m);
int __wrap_pthread_cond_destroy(pthread_cond_t *c);
int __wrap_mf_random_hex(size_t nbytes, char *out);

static void guard(void)
{
	while (atomic_flag_test_and_set(&live_guard))
		;
}

static void unguard(void)
{
	atomic_flag_clear(&live_guard);
}

/* Whether this init is the one to fail (counted under the guard). */
static bool init_fails(void)
{
	guard();
	bool fail = fail_at && ++n_inits == fail_at;
	fired |= fail;
	unguard();
	return fail;
}

static void made(const void *p)
{
	guard();
	assert_true(n_live < LIVE_MAX);
	live[n_live++] = p;
	unguard();
}

/* Forgets p; false (and counted) when p was never made. */
static bool unmade(const void *p)
{
	guard();
	size_t i = 0;
	while (i < n_live && live[i] != p)
		i++;
	bool was = i < n_live;
	if (was)
		live[i] = live[--n_live];
	else
		bad_destroys++;
	unguard();
	return was;
}

int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
	if (init_fails())
		return ENOMEM;
	int rc = __real_pthread_mutex_init(m, a);
	if (rc == 0)
		made(m);
	return rc;
}

int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
	if (init_fails())
		return ENOMEM;
	int rc = __real_pthread_cond_init(c, a);
	if (rc == 0)
		made(c);
	return rc;
}

/* A destroy of what was never made is counted, not done (undefined). */
int __wrap_pthread_mutex_destroy(pthread_mutex_t *m)
{
	return unmade(m) ? __real_pthread_mutex_destroy(m) : 0;
}

int __wrap_pthread_cond_destroy(pthread_cond_t *c)
{
	return unmade(c) ? __real_pthread_cond_destroy(c) : 0;
}

int __wrap_mf_random_hex(size_t nbytes, char *out)
{
	if (fail_random) {
		fail_random = false;
		return -EIO;
	}
	return __real_mf_random_hex(nbytes, out);
}

static size_t live_count(void)
{
	guard();
	size_t n = n_live;
	unguard();
	return n;
}

/* ---- fixture: a store and a spec ---- */

struct fx {
	char dir[64];
	char store[96];
	char catalog[128];
	char spec[128];
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/mf-engine-close-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	snprintf(fx->store, sizeof(fx->store), "%s/store", fx->dir);
	snprintf(fx->catalog, sizeof(fx->catalog), "%s/catalog.db", fx->store);
	snprintf(fx->spec, sizeof(fx->spec), "%s/t.yaml", fx->dir);
	char path[128];
	snprintf(path, sizeof(path), "%s/in", fx->dir);
	if (mkdir(path, 0755) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/in/a.txt", fx->dir);
	tl_write_file(path, "a\n");
	tl_write_file(fx->spec,
		      "name: t\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n");
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	int rc = tl_rm_rf(fx->dir);
	free(fx);
	return rc == 0 ? 0 : -1;
}

/* An engine whose heartbeat stays out of the way of the test's use of
 * its pool; the store and its catalog exist already (opened once), so
 * that this open indexes nothing and wakes no refresh of the holds. */
static struct mf_engine *quiet_engine(const struct fx *fx)
{
	struct mf_engine_opts o = {.store_dir = fx->store, .heartbeat_s = 3600};
	struct mf_engine *e = NULL;
	char *err = NULL;
	int rc = mf_engine_open(&o, &e, &err);
	if (rc)
		fail_msg("engine: %s", err ? err : strerror(-rc));
	return e;
}

static void register_spec(const struct fx *fx, struct mf_engine *e)
{
	char fp[MF_FP_HEX_LEN + 1], *err = NULL;
	int rc = mf_engine_register(e, fx->spec, fp, &err);
	if (rc)
		fail_msg("register: %s", err ? err : strerror(-rc));
}

/* How many holds the catalog at path has. */
static size_t holds_in(const char *path)
{
	struct mf_catalog *c;
	assert_int_equal(mf_catalog_open(path, 0, &c), 0);
	struct mf_run_rec *v;
	size_t n;
	assert_int_equal(mf_catalog_list_holds(c, NULL, &v, &n), 0);
	free(v);
	mf_catalog_close(c);
	return n;
}

/* ---- the tests ---- */

/* Each lock or condition variable init of mf_engine_open fails in turn
 * (with serve_sealed: the commit thread's too): the open fails with that
 * error, and every object it made is destroyed, none it did not make. */
static void test_each_init_failure_undone(void **state)
{
	struct fx *fx = *state;
	struct mf_engine_opts o = {.store_dir = fx->store,
				   .serve_sealed = true};
	int n;
	for (n = 1; n < 100; n++) {
		size_t before = live_count();
		fired = false;
		n_inits = 0;
		fail_at = n;
		struct mf_engine *e = NULL;
		char *err = NULL;
		int rc = mf_engine_open(&o, &e, &err);
		fail_at = 0;
		free(err);
		if (!fired) { /* past the last init: opened */
			assert_int_equal(rc, 0);
			mf_engine_close(e);
			assert_int_equal(live_count(), before);
			break;
		}
		if (rc == 0)
			fail_msg("init %d failed, and the open succeeded", n);
		assert_int_equal(rc, -ENOMEM);
		assert_int_equal(live_count(), before);
		assert_int_equal(bad_destroys, 0);
	}
	/* three locks, flight_cv, the commit thread's and the heartbeat's */
	assert_true(n > 6);
	assert_int_equal(bad_destroys, 0);
}

/* An open that fails before any lock exists destroys none. */
static void test_early_failure_destroys_nothing(void **state)
{
	struct fx *fx = *state;
	struct mf_engine_opts o = {.store_dir = fx->store};
	size_t before = live_count();
	fail_random = true;
	struct mf_engine *e = NULL;
	char *err = NULL;
	assert_int_equal(mf_engine_open(&o, &e, &err), -EIO);
	free(err);
	assert_false(fail_random);
	assert_int_equal(live_count(), before);
	assert_int_equal(bad_destroys, 0);
}

/* Close gives the holds up with no connection left in the pool (its
 * connections to a moved catalog were dropped, or one found no room). */
static void test_close_releases_with_empty_pool(void **state)
{
	struct fx *fx = *state;
	mf_engine_close(quiet_engine(fx)); /* the store and catalog */
	struct mf_engine *e = quiet_engine(fx);
	register_spec(fx, e);
	assert_int_equal(holds_in(fx->catalog), 1);
	struct mf_catalog *c;
	assert_int_equal(eng_catalog_get(e, &c), 0);
	mf_catalog_close(c);
	assert_int_equal(e->n_pool, 0);
	mf_engine_close(e);
	assert_int_equal(holds_in(fx->catalog), 0);
}

/* Close gives the holds up in the catalog as it is now, when the pool's
 * first connection is to a catalog.db deleted since: as when a thread
 * puts back a connection it took before the deletion, ahead of one that
 * another thread opened after it. */
static void test_close_releases_in_current_catalog(void **state)
{
	struct fx *fx = *state;
	mf_engine_close(quiet_engine(fx));
	struct mf_engine *e = quiet_engine(fx);
	register_spec(fx, e);
	struct mf_catalog *old, *now;
	assert_int_equal(eng_catalog_get(e, &old), 0);
	const char *ends[] = {"", "-wal", "-shm"};
	for (int i = 0; i < 3; i++) {
		char path[160];
		snprintf(path, sizeof(path), "%s%s", fx->catalog, ends[i]);
		(void)unlink(path);
	}
	/* another process makes the new catalog; this engine holds its
	 * snapshot there once it registers again */
	struct mf_engine *other = quiet_engine(fx);
	register_spec(fx, e);
	assert_int_equal(holds_in(fx->catalog), 1);
	assert_int_equal(eng_catalog_get(e, &now), 0);
	eng_catalog_put(e, old);
	eng_catalog_put(e, now);
	assert_ptr_equal(e->pool[0], old);
	mf_engine_close(e);
	assert_int_equal(holds_in(fx->catalog), 0);
	mf_engine_close(other);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_each_init_failure_undone,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_early_failure_destroys_nothing,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_close_releases_with_empty_pool,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(
		test_close_releases_in_current_catalog, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
