/*
 * util_time.c - clocks (wall seconds, monotonic nanoseconds) and a
 * thread's deadline (mf_deadline_set), which long reads check. Not for:
 * timeouts of stages (pipeline/job_io.c).
 */
#include "mf_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* A test hook: MF_TEST_CLOCK_SHIFT_S (seconds, may be negative) moves
 * this process's wall clock, as a host whose clock is wrong would see it
 * (tests of what a cluster compares by the database's clock). Read once. */
static int64_t clock_shift;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

static void clock_shift_read(void)
{
	const char *v = getenv("MF_TEST_CLOCK_SHIFT_S");
	clock_shift = v ? strtoll(v, NULL, 10) : 0;
}

int64_t mf_now_s(void)
{
	struct timespec ts;
	pthread_once(&clock_once, clock_shift_read);
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec + clock_shift;
}

uint64_t mf_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static _Thread_local uint64_t deadline_ns;

void mf_deadline_set(uint64_t mono_ns)
{
	deadline_ns = mono_ns;
}

bool mf_deadline_passed(void)
{
	return deadline_ns != 0 && mf_mono_ns() >= deadline_ns;
}
