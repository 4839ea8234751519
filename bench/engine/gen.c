/*
 * gen.c - a stand-in preprocessing stage for the benchmarks: writes SIZE
 * MiB of token-like data (little-endian uint32 ids from a skewed
 * distribution) to stdout, spending WORK rounds of arithmetic per token
 * to act like a real tokenizer. The data is 5.5x compressible with zstd:3
 * in 4 MiB chunks ("ratio compression" of bench/engine/threads.sh).
 *
 * usage: gen SIZE_MIB [WORK] [SEED]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile uint64_t sink;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs("usage: gen SIZE_MIB [WORK] [SEED]\n", stderr);
		return 2;
	}
	uint64_t mib = strtoull(argv[1], NULL, 10);
	unsigned work = argc > 2 ? (unsigned)atoi(argv[2]) : 0;
	uint64_t s =
	    argc > 3 ? strtoull(argv[3], NULL, 10) : 88172645463325252ULL;
	static uint32_t buf[1 << 16];
	uint64_t acc = 0;
	for (uint64_t m = 0; m < mib * 4; m++) {
		for (size_t i = 0; i < sizeof(buf) / 4; i++) {
			uint64_t r = next(&s), x = r;
			/* the work changes nothing in the output */
			for (unsigned w = 0; w < work; w++)
				x = x * 6364136223846793005ULL +
				    1442695040888963407ULL;
			acc ^= x;
			/* Zipf-like: small ids are common, as in real text */
			buf[i] = (uint32_t)(50000 / (1 + (r % 50000)));
		}
		sink = acc;
		const char *p = (const char *)buf;
		size_t left = sizeof(buf);
		while (left) {
			ssize_t n = write(1, p, left);
			if (n <= 0)
				return 1;
			p += n;
			left -= (size_t)n;
		}
	}
	return 0;
}
