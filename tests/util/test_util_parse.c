/*
 * test_util_parse.c - the size and duration parsers of util/ at their
 * edges: empty strings, every unit and its case, whitespace, signs, zero,
 * the largest accepted values and one past them (2^63 - 1, 2^63, 2^64),
 * digit strings far longer than any number, fractions and trailing
 * garbage. A value out of range is -ERANGE, never a wrapped number, and
 * the output is left alone on every failure. Records framings written
 * back as a spec writes them.
 *
 * Not for: what the spec makes of these errors (tests/pipeline).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mf_util.h"

#define SIZE_UNTOUCHED 0x5a5a5a5a5a5a5a5aULL
#define DURATION_UNTOUCHED INT64_C(-0x5a5a5a5a5a5a5a5a)

static void size_is(const char *s, uint64_t want)
{
	uint64_t v = SIZE_UNTOUCHED;
	int rc = mf_parse_size(s, &v);

	if (rc != 0 || v != want)
		fail_msg("size '%s': rc %d value %llu, want %llu", s, rc,
			 (unsigned long long)v, (unsigned long long)want);
}

static void size_fails(const char *s, int want)
{
	uint64_t v = SIZE_UNTOUCHED;
	int rc = mf_parse_size(s, &v);

	if (rc != want || v != SIZE_UNTOUCHED)
		fail_msg("size '%s': rc %d value %llu, want rc %d untouched",
			 s ? s : "(null)", rc, (unsigned long long)v, want);
}

static void duration_is(const char *s, int64_t want)
{
	int64_t v = DURATION_UNTOUCHED;
	int rc = mf_parse_duration(s, &v);

	if (rc != 0 || v != want)
		fail_msg("duration '%s': rc %d value %lld, want %lld", s, rc,
			 (long long)v, (long long)want);
}

static void duration_fails(const char *s, int want)
{
	int64_t v = DURATION_UNTOUCHED;
	int rc = mf_parse_duration(s, &v);

	if (rc != want || v != DURATION_UNTOUCHED)
		fail_msg("duration '%s': rc %d value %lld, want rc %d "
			 "untouched",
			 s ? s : "(null)", rc, (long long)v, want);
}

/* "1" followed by n zeros, then suffix. */
static const char *long_number(char lead, size_t n, const char *suffix)
{
	static char buf[512];

	assert_true(n + strlen(suffix) + 2 <= sizeof buf);
	buf[0] = lead;
	memset(buf + 1, '0', n);
	snprintf(buf + 1 + n, sizeof buf - 1 - n, "%s", suffix);
	return buf;
}

static void test_size_units(void **state)
{
	(void)state;
	size_is("0", 0);
	size_is("0B", 0);
	size_is("0TiB", 0);
	size_is("1", 1);
	size_is("4096", 4096);
	size_is("1B", 1);
	size_is("1K", 1024);
	size_is("1KiB", 1024);
	size_is("4MiB", 4194304);
	size_is("1M", 1ULL << 20);
	size_is("1G", 1ULL << 30);
	size_is("1GiB", 1ULL << 30);
	size_is("1T", 1ULL << 40);
	size_is("3TiB", 3ULL << 40);
	size_is("1kB", 1000);
	size_is("1KB", 1000);
	size_is("2MB", 2000000);
	size_is("1GB", 1000000000);
	size_is("1TB", 1000000000000ULL);
	size_is("007KiB", 7 * 1024);
}

static void test_size_bad_syntax(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "",	    "B",     "KiB", "k",     "1k",  "1kb",  "1kib",  "1Kib",
	    "1KIB", "1b",    "1mb", "1mib",  "1Gb", "1PiB", "1EiB",  " 1",
	    "1 ",   "1 KiB", "\t1", "1\n",   "+1",  "-1",   "-0",    "+0B",
	    "1.5K", "1.0",   ".5",  "1,000", "1e3", "0x10", "1KiBx", "1x",
	    "1K1K", "1KiB1", "1BB", "1_000"};

	size_fails(NULL, -EINVAL);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		size_fails(bad[i], -EINVAL);
}

static void test_size_limits(void **state)
{
	(void)state;
	size_is("9223372036854775807", INT64_MAX);
	size_is("9223372036854775808", 1ULL << 63);
	size_is("18446744073709551615", UINT64_MAX);
	size_is("18446744073709551615B", UINT64_MAX);
	size_is("16777215TiB", UINT64_MAX - ((1ULL << 40) - 1));
	size_is("17179869183GiB", UINT64_MAX - ((1ULL << 30) - 1));
	size_is("18446744073709551KB", 18446744073709551000ULL);
	size_fails("18446744073709551616", -ERANGE);
	size_fails("18446744073709551616B", -ERANGE);
	size_fails("99999999999999999999", -ERANGE);
	size_fails("18446744073709551615K", -ERANGE);
	size_fails("16777216TiB", -ERANGE);
	size_fails("17179869184GiB", -ERANGE);
	size_fails("18446744073709552KB", -ERANGE);
	size_fails("9223372036854775808KiB", -ERANGE);
	/* far more digits than any number has */
	size_fails(long_number('1', 300, ""), -ERANGE);
	size_fails(long_number('1', 300, "TiB"), -ERANGE);
	size_fails(long_number('1', 300, "x"), -ERANGE);
	size_is(long_number('0', 300, "1"), 1);
	size_is(long_number('0', 300, "KiB"), 0);
}

static void test_duration_units(void **state)
{
	(void)state;
	duration_is("0", 0);
	duration_is("0s", 0);
	duration_is("0w", 0);
	duration_is("1", 1);
	duration_is("90", 90);
	duration_is("1s", 1);
	duration_is("1m", 60);
	duration_is("1h", 3600);
	duration_is("1d", 86400);
	duration_is("1w", 604800);
	duration_is("1h30m", 5400);
	duration_is("1w1d1h1m1s", 604800 + 86400 + 3600 + 60 + 1);
	duration_is("90m", 5400);
	duration_is("24h", 86400);
	duration_is("007s", 7);
}

static void test_duration_bad_syntax(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "",	    "s",      "h",    "1S",   "1H",	"1D",	"1W",  "1M",
	    "1ms",  "1us",    "1y",   "1min", "1sec",	"1hh",	" 1s", "1s ",
	    "1 s",  "1h 30m", "\t1",  "1\n",  "+1",	"+1s",	"-1",  "-1s",
	    "-0",   "1h-1m",  "1.5h", "0.5s", ".5s",	"1.",	"1e3", "0x10",
	    "1h30", "1hx",    "1s1",  "1s s", "1_000s", "1,5s", "h1",  "1hm"};

	duration_fails(NULL, -EINVAL);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		duration_fails(bad[i], -EINVAL);
}

/* The largest duration is the largest number of seconds whose count of
 * nanoseconds fits in an int64_t, so that no caller's conversion wraps. */
static void test_duration_limits(void **state)
{
	char buf[64];

	(void)state;
	assert_int_equal(MF_DURATION_MAX_S, INT64_MAX / 1000000000);
	snprintf(buf, sizeof buf, "%lld", (long long)MF_DURATION_MAX_S);
	duration_is(buf, MF_DURATION_MAX_S);
	snprintf(buf, sizeof buf, "%llds", (long long)MF_DURATION_MAX_S);
	duration_is(buf, MF_DURATION_MAX_S);
	snprintf(buf, sizeof buf, "%lld", (long long)MF_DURATION_MAX_S + 1);
	duration_fails(buf, -ERANGE);
	snprintf(buf, sizeof buf, "%llds", (long long)MF_DURATION_MAX_S + 1);
	duration_fails(buf, -ERANGE);
	snprintf(buf, sizeof buf, "%llds1s", (long long)MF_DURATION_MAX_S);
	duration_fails(buf, -ERANGE);
	duration_is("106751d", INT64_C(106751) * 86400);
	duration_fails("106752d", -ERANGE);
	duration_is("2562047h", INT64_C(2562047) * 3600);
	duration_fails("2562048h", -ERANGE);
	duration_is("15250w", INT64_C(15250) * 604800);
	duration_fails("15251w", -ERANGE);
	duration_fails("5000000000s5000000000s", -ERANGE);
	duration_fails("300000000000d", -ERANGE);
	/* 2^63 - 1, 2^63 and 2^64 - 1, 2^64 seconds: never negative */
	duration_fails("9223372036854775807", -ERANGE);
	duration_fails("9223372036854775807s", -ERANGE);
	duration_fails("9223372036854775808", -ERANGE);
	duration_fails("9223372036854775808s", -ERANGE);
	duration_fails("18446744073709551615s", -ERANGE);
	duration_fails("18446744073709551616s", -ERANGE);
	duration_fails("1s18446744073709551615s", -ERANGE);
	duration_fails("153722867280912930m", -ERANGE);
	duration_fails("106751991167300d", -ERANGE);
	duration_fails(long_number('1', 300, ""), -ERANGE);
	duration_fails(long_number('1', 300, "s"), -ERANGE);
	duration_fails(long_number('1', 300, "w"), -ERANGE);
	duration_is(long_number('0', 300, "1h"), 3600);
}

/* A corruption report names its reason and the line that found it, for
 * the calling thread only, until cleared. */
static int check_header(unsigned magic)
{
	if (magic != 0x4d46)
		return MF_CORRUPT("header magic");
	return 0;
}

static void test_corrupt_report(void **state)
{
	(void)state;
	mf_corrupt_clear();
	assert_string_equal(mf_corrupt_reason(), "");
	assert_string_equal(mf_corrupt_where(), "");
	assert_int_equal(check_header(0x4d46), 0);
	assert_string_equal(mf_corrupt_reason(), "");
	assert_int_equal(check_header(1), -EBADMSG);
	assert_string_equal(mf_corrupt_reason(), "header magic");
	const char *w = mf_corrupt_where();
	assert_int_equal(strncmp(w, "tests/util/test_util_parse.c:", 29), 0);
	assert_true(atoi(w + 29) > 0);
	mf_corrupt_clear();
	assert_string_equal(mf_corrupt_reason(), "");
}

/* UTF-8 as PostgreSQL and terminals take it: every boundary of RFC 3629. */
static void test_utf8(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		size_t n;
	} cases[] = {
	    {"a", 1},
	    {"\x7f", 1},
	    {"\xc2\x80", 2}, /* U+0080: valid (a C1 control, still UTF-8) */
	    {"\xc1\xbf", 0}, /* overlong */
	    {"\xdf\xbf", 2},
	    {"\xe0\x9f\xbf", 0}, /* overlong */
	    {"\xe0\xa0\x80", 3},
	    {"\xed\x9f\xbf", 3},
	    {"\xed\xa0\x80", 0}, /* a surrogate */
	    {"\xef\xbf\xbf", 3},
	    {"\xf0\x8f\xbf\xbf", 0}, /* overlong */
	    {"\xf0\x90\x80\x80", 4},
	    {"\xf4\x8f\xbf\xbf", 4}, /* U+10FFFF */
	    {"\xf4\x90\x80\x80", 0}, /* past it */
	    {"\xf5\x80\x80\x80", 0},
	    {"\x80", 0},
	    {"\xe2\x82", 0}, /* cut short by the end */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(mf_utf8_len((const unsigned char *)cases[i].s),
				 cases[i].n);
	char t[] = "ok \xe2\x82 \xc3\xa9 \xff";
	mf_utf8_clean(t);
	assert_string_equal(t, "ok ?? \xc3\xa9 ?");
}

static void test_format_records(void **state)
{
	(void)state;
	char buf[64];
	struct mf_records r = {MF_FRAMING_FIXED, 2048, false};
	mf_format_records(&r, buf, sizeof(buf));
	assert_string_equal(buf, "2048");
	r.drop_tail = true;
	mf_format_records(&r, buf, sizeof(buf));
	assert_string_equal(buf, "{size: 2048, tail: drop}");
	const char *names[] = {"none",	   "fixed", "lines",
			       "tfrecord", "tar",   "index"};
	for (int f = 0; f <= MF_FRAMING_MAX; f++)
		assert_string_equal(mf_framing_name((enum mf_framing)f),
				    names[f]);
	assert_string_equal(mf_framing_name((enum mf_framing)99), "?");
	r = (struct mf_records){MF_FRAMING_TAR, 0, false};
	mf_format_records(&r, buf, sizeof(buf));
	assert_string_equal(buf, "tar");
	mf_format_records(&r, buf, 2); /* cut, always terminated */
	assert_string_equal(buf, "t");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_size_units),
	    cmocka_unit_test(test_size_bad_syntax),
	    cmocka_unit_test(test_size_limits),
	    cmocka_unit_test(test_duration_units),
	    cmocka_unit_test(test_duration_bad_syntax),
	    cmocka_unit_test(test_duration_limits),
	    cmocka_unit_test(test_corrupt_report),
	    cmocka_unit_test(test_utf8),
	    cmocka_unit_test(test_format_records),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
