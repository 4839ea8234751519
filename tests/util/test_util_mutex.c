/*
 * test_util_mutex.c - mf_mutex_init and MF_MUTEX_INITIALIZER make the
 * mutexes every matfs module uses: in a build without NDEBUG (the test
 * build) they are error-checking, so a thread locking a mutex it already
 * holds gets EDEADLK instead of hanging, and a thread unlocking a mutex
 * another holds gets EPERM; they still work with a condition variable.
 * mf_mutex_held tells whether the calling thread holds a mutex.
 *
 * Not for: the locks' order (each struct's comment) or who holds them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_util.h"

static void *unlock_other(void *arg)
{
	return (void *)(long)pthread_mutex_unlock(arg);
}

/* Held by this thread: relocking is EDEADLK, another thread's unlock
 * EPERM, and the mutex is still this thread's to unlock. */
static void checks_errors(pthread_mutex_t *m)
{
	assert_int_equal(pthread_mutex_lock(m), 0);
	assert_int_equal(pthread_mutex_lock(m), EDEADLK);
	pthread_t t;
	void *ret;
	assert_int_equal(pthread_create(&t, NULL, unlock_other, m), 0);
	assert_int_equal(pthread_join(t, &ret), 0);
	assert_int_equal((long)ret, EPERM);
	assert_int_equal(pthread_mutex_unlock(m), 0);
	assert_int_equal(pthread_mutex_unlock(m), EPERM);
}

static void test_init_is_error_checking(void **state)
{
	(void)state;
#ifdef NDEBUG
	skip();
#endif
	pthread_mutex_t m;
	assert_int_equal(mf_mutex_init(&m), 0);
	checks_errors(&m);
	assert_int_equal(pthread_mutex_destroy(&m), 0);
}

static void test_static_initializer_is_error_checking(void **state)
{
	(void)state;
#ifdef NDEBUG
	skip();
#endif
	static pthread_mutex_t m = MF_MUTEX_INITIALIZER;
	checks_errors(&m);
}

struct flag {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool set;
};

static void *set_flag(void *arg)
{
	struct flag *f = arg;
	pthread_mutex_lock(&f->mu);
	f->set = true;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

struct held {
	pthread_mutex_t *m;
	bool seen;
};

static void *held_elsewhere(void *arg)
{
	struct held *h = arg;
	h->seen = mf_mutex_held(h->m);
	return NULL;
}

/* Held: by this thread only, whatever kind of mutex; not held once
 * unlocked. */
static void test_held(void **state)
{
	(void)state;
	pthread_mutex_t a, b = PTHREAD_MUTEX_INITIALIZER;
	assert_int_equal(mf_mutex_init(&a), 0);
	pthread_mutex_t *ms[] = {&a, &b};
	for (size_t i = 0; i < 2; i++) {
		assert_false(mf_mutex_held(ms[i]));
		assert_int_equal(pthread_mutex_lock(ms[i]), 0);
		assert_true(mf_mutex_held(ms[i]));
		struct held h = {ms[i], true};
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, held_elsewhere, &h),
				 0);
		assert_int_equal(pthread_join(t, NULL), 0);
		assert_false(h.seen);
		assert_int_equal(pthread_mutex_unlock(ms[i]), 0);
		assert_false(mf_mutex_held(ms[i]));
	}
	assert_int_equal(pthread_mutex_destroy(&a), 0);
}

static void test_works_with_a_condition(void **state)
{
	(void)state;
	struct flag f = {.set = false};
	assert_int_equal(mf_mutex_init(&f.mu), 0);
	assert_int_equal(pthread_cond_init(&f.cv, NULL), 0);
	pthread_t t;
	assert_int_equal(pthread_mutex_lock(&f.mu), 0);
	assert_int_equal(pthread_create(&t, NULL, set_flag, &f), 0);
	while (!f.set)
		assert_int_equal(pthread_cond_wait(&f.cv, &f.mu), 0);
	assert_true(mf_mutex_held(&f.mu)); /* taken back by the wait */
	assert_int_equal(pthread_mutex_unlock(&f.mu), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	pthread_cond_destroy(&f.cv);
	assert_int_equal(pthread_mutex_destroy(&f.mu), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_is_error_checking),
	    cmocka_unit_test(test_static_initializer_is_error_checking),
	    cmocka_unit_test(test_works_with_a_condition),
	    cmocka_unit_test(test_held),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
