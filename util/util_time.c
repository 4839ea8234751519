/*
 * util_time.c - clocks (wall seconds, monotonic nanoseconds) and a
 * thread's deadline (mf_deadline_set), which long reads check. Not for:
 * timeouts of stages (pipeline/job_io.c).
 */
#include "mf_util.h"

#include <time.h>

int64_t mf_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec;
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
