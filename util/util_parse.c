/*
 * util_parse.c - what users write in specs and options, read and written
 * back: sizes ("4MiB"), durations ("1h30m"), codec names ("zstd:3") and
 * record framings ("lines", "{size: 2048, tail: drop}").
 * Not for: what the values mean to a spec (pipeline/).
 */
#include "mf_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct unit {
	const char *name;
	uint64_t mult;
};

/*
 * Reads the decimal number at s and the longest of units right after it (a
 * multiplier of 1 when none matches). Returns -EINVAL when s does not start
 * with a digit, -ERANGE when the number times its unit exceeds max; *value
 * and *rest (the first character after the unit) only on success.
 */
static int parse_number_unit(const char *s, const struct unit *units,
			     uint64_t max, uint64_t *value, const char **rest)
{
	uint64_t v = 0, mult = 1;
	size_t best = 0;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		uint64_t d = (uint64_t)(*s - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	for (const struct unit *u = units; u->name; u++) {
		size_t n = strlen(u->name);

		if (n > best && strncmp(s, u->name, n) == 0) {
			best = n;
			mult = u->mult;
		}
	}
	if (v > max / mult)
		return -ERANGE;
	*value = v * mult;
	*rest = s + best;
	return 0;
}

int mf_parse_size(const char *s, uint64_t *out)
{
	static const struct unit units[] = {
	    {"B", 1},
	    {"K", 1ULL << 10},
	    {"KiB", 1ULL << 10},
	    {"M", 1ULL << 20},
	    {"MiB", 1ULL << 20},
	    {"G", 1ULL << 30},
	    {"GiB", 1ULL << 30},
	    {"T", 1ULL << 40},
	    {"TiB", 1ULL << 40},
	    {"kB", 1000ULL},
	    {"KB", 1000ULL},
	    {"MB", 1000ULL * 1000},
	    {"GB", 1000ULL * 1000 * 1000},
	    {"TB", 1000ULL * 1000 * 1000 * 1000},
	    {NULL, 0},
	};
	uint64_t v;
	const char *rest;
	int rc = parse_number_unit(s, units, UINT64_MAX, &v, &rest);

	if (rc)
		return rc;
	if (*rest)
		return -EINVAL;
	*out = v;
	return 0;
}

int mf_parse_duration(const char *s, int64_t *out)
{
	static const struct unit units[] = {
	    {"s", 1},	  {"m", 60},	 {"h", 3600},
	    {"d", 86400}, {"w", 604800}, {NULL, 0},
	};
	uint64_t total = 0;

	if (!s || !*s)
		return -EINVAL;
	for (const char *p = s; *p;) {
		const char *rest;
		uint64_t v;
		/* the total so far bounds what this term may add */
		int rc = parse_number_unit(
		    p, units, (uint64_t)MF_DURATION_MAX_S - total, &v, &rest);

		if (rc)
			return rc;
		/* a number without its unit: seconds only when it is all */
		if (rest[-1] >= '0' && rest[-1] <= '9' && (p != s || *rest))
			return -EINVAL;
		total += v;
		p = rest;
	}
	*out = (int64_t)total;
	return 0;
}

void mf_format_size(uint64_t n, char *buf, size_t len)
{
	static const char *const names[] = {"B",   "KiB", "MiB",
					    "GiB", "TiB", "PiB"};
	double v = (double)n;
	size_t i = 0;
	while (v >= 1024.0 && i + 1 < sizeof(names) / sizeof(names[0])) {
		v /= 1024.0;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%" PRIu64 " B", n);
	else
		snprintf(buf, len, "%.1f %s", v, names[i]);
}

int mf_parse_codec(const char *s, enum mf_codec *codec, int *level)
{
	if (!s)
		return -EINVAL;
	if (strcmp(s, "none") == 0) {
		*codec = MF_CODEC_NONE;
		*level = 0;
		return 0;
	}
	if (strcmp(s, "snappy") == 0) {
		*codec = MF_CODEC_SNAPPY;
		*level = 0;
		return 0;
	}
	if (strcmp(s, "zstd") == 0) {
		*codec = MF_CODEC_ZSTD;
		*level = MF_ZSTD_DEFAULT_LEVEL;
		return 0;
	}
	if (strncmp(s, "zstd:", 5) == 0) {
		const char *d = s + 5;
		int v = 0;
		if (!*d || strlen(d) > 2)
			return -EINVAL;
		for (; *d; d++) {
			if (*d < '0' || *d > '9')
				return -EINVAL;
			v = v * 10 + (*d - '0');
		}
		if (v < 1 || v > 19)
			return -EINVAL;
		*codec = MF_CODEC_ZSTD;
		*level = v;
		return 0;
	}
	return -EINVAL;
}

void mf_format_codec(enum mf_codec codec, int level, char *buf, size_t len)
{
	switch (codec) {
	case MF_CODEC_ZSTD:
		snprintf(buf, len, "zstd:%d", level);
		break;
	case MF_CODEC_SNAPPY:
		snprintf(buf, len, "snappy");
		break;
	default:
		snprintf(buf, len, "none");
		break;
	}
}

const char *mf_framing_name(enum mf_framing f)
{
	static const char *const names[] = {"none",	"fixed", "lines",
					    "tfrecord", "tar",	 "index"};
	return (unsigned)f <= MF_FRAMING_MAX ? names[f] : "?";
}

void mf_format_records(const struct mf_records *r, char *buf, size_t len)
{
	if (r->framing != MF_FRAMING_FIXED)
		snprintf(buf, len, "%s", mf_framing_name(r->framing));
	else if (r->drop_tail)
		snprintf(buf, len, "{size: %llu, tail: drop}",
			 (unsigned long long)r->size);
	else
		snprintf(buf, len, "%llu", (unsigned long long)r->size);
}
