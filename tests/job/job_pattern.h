/*
 * job_pattern.h - byte patterns shared by the job tests and job_helper, so
 * that a test can check every byte a stage wrote without keeping a copy.
 *
 * Not for: production code.
 */
#ifndef JOB_PATTERN_H
#define JOB_PATTERN_H

#include <stdint.h>

/* Byte i of the stream `job_helper gen` writes to stdout. */
static inline uint8_t jt_gen_byte(uint64_t i)
{
	return (uint8_t)((i * 0x9E3779B97F4A7C15ULL) >> 56);
}

/* Byte i of the stream `job_helper spew` writes to stderr: printable, a
 * newline every 64 bytes, never periodic in a short span. */
static inline char jt_err_byte(uint64_t i)
{
	if (i % 64 == 63)
		return '\n';
	return (char)('a' + (char)(((i * 0x9E3779B97F4A7C15ULL) >> 40) % 26));
}

#endif
