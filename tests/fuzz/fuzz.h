/*
 * fuzz.h - what every fuzz target of matfs shares: the libFuzzer entry
 * point each target defines, and the check that turns a broken invariant
 * into a crash the fuzzer (or the corpus replay test) reports.
 *
 * Not for: anything a library uses. Targets and the standalone driver
 * (fuzz_driver.c) include it; nothing else does.
 */
#ifndef MF_FUZZ_H
#define MF_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Runs one input; returns 0 (libFuzzer's convention). Defined by each
 * target, called by libFuzzer or by fuzz_driver.c's main. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test: when it does not hold, say which
 * and abort, so the input is kept as a crash. Never compiled out. */
#define FUZZ_CHECK(cond)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			abort();                                               \
		}                                                              \
	} while (0)

#endif
