/*
 * fuse_batchpath.c - the names of the batch tree, parsed strictly
 * (fuse_batchpath.h): every valid name has exactly one spelling, so that
 * two lookups of one batch never give two inodes.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fuse_batchpath.h"

/*
 * Reads a decimal number at *p: at least one digit, no leading zero but
 * "0" itself (unless padded: then exactly `pad` digits below 10^pad, or
 * no leading zero above), at most max. Advances *p past the digits.
 */
static int parse_num(const char **p, uint64_t max, int pad, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	int n = 0;
	while (s[n] >= '0' && s[n] <= '9') {
		unsigned d = (unsigned)(s[n] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ENOENT;
		v = v * 10 + d;
		n++;
	}
	if (n == 0 || v > max)
		return -ENOENT;
	if (pad == 0) {
		if (n > 1 && s[0] == '0')
			return -ENOENT;
	} else if (n < pad || (n > pad && s[0] == '0')) {
		return -ENOENT;
	}
	*p = s + n;
	*out = v;
	return 0;
}

static int skip(const char **p, const char *lit)
{
	size_t n = strlen(lit);
	if (strncmp(*p, lit, n) != 0)
		return -ENOENT;
	*p += n;
	return 0;
}

int mfs_batch_parse_size(const char *name, uint64_t *b)
{
	uint64_t v;
	if (parse_num(&name, MFS_BATCH_MAX, 0, &v) != 0 || *name != '\0' ||
	    v == 0)
		return -ENOENT;
	*b = v;
	return 0;
}

int mfs_batch_parse_seed(const char *name, bool *shuffled, uint64_t *seed)
{
	uint64_t v;
	if (skip(&name, "seed-") != 0)
		return -ENOENT;
	if (strcmp(name, "none") == 0) {
		*shuffled = false;
		*seed = 0;
		return 0;
	}
	if (parse_num(&name, UINT64_MAX, 0, &v) != 0 || *name != '\0')
		return -ENOENT;
	*shuffled = true;
	*seed = v;
	return 0;
}

int mfs_batch_parse_epoch(const char *name, uint64_t *epoch)
{
	uint64_t v;
	if (skip(&name, "epoch-") != 0 ||
	    parse_num(&name, UINT64_MAX, 0, &v) != 0 || *name != '\0')
		return -ENOENT;
	*epoch = v;
	return 0;
}

int mfs_batch_parse_rank(const char *name, uint64_t *rank, uint64_t *world,
			 uint64_t *from)
{
	uint64_t r, w, g = 0;
	if (skip(&name, "rank-") != 0 ||
	    parse_num(&name, MFS_BATCH_MAX, 0, &r) != 0 ||
	    skip(&name, "-of-") != 0 ||
	    parse_num(&name, MFS_BATCH_MAX, 0, &w) != 0)
		return -ENOENT;
	if (*name != '\0' &&
	    (skip(&name, "-from-") != 0 ||
	     parse_num(&name, MFS_BATCH_MAX, 0, &g) != 0))
		return -ENOENT;
	if (*name != '\0' || w == 0 || r >= w)
		return -ENOENT;
	*rank = r;
	*world = w;
	*from = g;
	return 0;
}

int mfs_batch_parse_batch(const char *name, uint64_t *n)
{
	uint64_t v;
	if (skip(&name, "batch-") != 0 ||
	    parse_num(&name, MFS_BATCH_MAX, 6, &v) != 0 || *name != '\0')
		return -ENOENT;
	*n = v;
	return 0;
}

int mfs_batch_name(uint64_t n, char *buf, size_t cap)
{
	if (n > MFS_BATCH_MAX)
		return -ERANGE;
	int len = snprintf(buf, cap, "batch-%06llu", (unsigned long long)n);
	if (len < 0 || (size_t)len >= cap)
		return -ERANGE;
	return 0;
}
