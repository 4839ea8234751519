/*
 * pages.c - what the first touch of new anonymous memory costs on this
 * machine, in 4 KiB pages and in huge pages (MADV_HUGEPAGE, 2 MiB): for
 * each kind, after SETTLE seconds of quiet (memory freed before is back
 * with the host, where the host takes freed pages back: bench/cold/
 * pages.sh), three new mappings of MIB MiB one after another, each
 * written one byte per 4 KiB. Prints "touch KIND ROUND WALL_MS CPU_MS".
 * Round 0 is memory the host may have taken back; 1 and 2 reuse what was
 * just freed. It shows what a fresh daemon pays for its chunk buffers,
 * and why the chunk cache keeps huge pages all the same
 * (docs/performance.md, "bench/batches").
 *
 * usage: build/bench/bench/engine/pages [MIB [SETTLE]]  (128, 10)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HUGE ((size_t)2 << 20)

static double ms(clockid_t clock)
{
	struct timespec t;
	clock_gettime(clock, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	size_t len = (size_t)(argc > 1 ? atoi(argv[1]) : 128) << 20;
	unsigned settle = (unsigned)(argc > 2 ? atoi(argv[2]) : 10);
	for (int huge = 0; huge < 2; huge++) {
		sleep(settle);
		for (int round = 0; round < 3; round++) {
			uint8_t *p =
			    mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED) {
				perror("mmap");
				return 1;
			}
			uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE - 1) &
						 ~(HUGE - 1));
			(void)madvise(a, len,
				      huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
			double w0 = ms(CLOCK_MONOTONIC),
			       c0 = ms(CLOCK_PROCESS_CPUTIME_ID);
			for (size_t off = 0; off < len; off += 4096)
				a[off] = 1;
			double w1 = ms(CLOCK_MONOTONIC),
			       c1 = ms(CLOCK_PROCESS_CPUTIME_ID);
			printf("touch %s %d %.1f %.1f\n", huge ? "huge" : "4k",
			       round, w1 - w0, c1 - c0);
			fflush(stdout);
			(void)munmap(p, len + HUGE);
		}
	}
	return 0;
}
