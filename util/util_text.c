/*
 * util_text.c - bytes as text: hex, UTF-8 lengths and the cleaning of
 * text for messages and xattrs, and growable string arrays (mf_strv).
 * Not for: parsing values (util_parse.c).
 */
#include "mf_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void mf_hex(const void *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const uint8_t *p = in;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

bool mf_is_hex(const char *s, size_t len)
{
	if (!s || strlen(s) != len)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return true;
}

size_t mf_utf8_len(const unsigned char *s)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, lo = s[0] == 0xe0 ? 0xa0 : 0x80,
		hi = s[0] == 0xed ? 0x9f : 0xbf;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, lo = s[0] == 0xf0 ? 0x90 : 0x80,
		hi = s[0] == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

void mf_utf8_clean(char *s)
{
	for (unsigned char *p = (unsigned char *)s; *p;) {
		size_t n = mf_utf8_len(p);
		if (n == 0)
			*p++ = '?';
		else
			p += n;
	}
}

void mf_text_clean(char *s, bool newlines)
{
	for (unsigned char *p = (unsigned char *)s; *p;) {
		size_t n = *p >= 0x80 ? mf_utf8_len(p) : 1;
		bool c1 = n == 2 && p[0] == 0xc2 && p[1] < 0xa0;
		if (n == 0 || c1) {
			*p++ = '?';
			if (c1)
				*p++ = '?';
		} else if (n == 1 &&
			   ((*p < 0x20 && *p != '\t' &&
			     !(newlines && *p == '\n')) ||
			    *p == 0x7f)) {
			*p++ = '?';
		} else {
			p += n;
		}
	}
}

int mf_strv_push(struct mf_strv *a, char *s)
{
	if (!s)
		return -ENOMEM;
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 16;
		char **v = realloc(a->v, cap * sizeof(*v));
		if (!v) {
			free(s);
			return -ENOMEM;
		}
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = s;
	return 0;
}

void mf_strv_release(struct mf_strv *a)
{
	mf_strv_free(a->v, a->n);
	*a = (struct mf_strv){0};
}

void mf_strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}
