/*
 * spec_hint.c - what makes a spec error message point at its cause: the
 * known key nearest to an unknown one ("did you mean 'shards'?"), and for
 * a YAML syntax error the position of the construct at fault (a quote or
 * bracket never closed is reported where it opens) and whether a tab
 * caused it (YAML indents with spaces only).
 *
 * Not for: parsing (spec.c) or building the message (spec_fail).
 */
#include "spec_i.h"

#include <stdio.h>
#include <string.h>

#define NAME_MAX_HINT 64 /* longer unknown keys get no guess */

/* Edit distance of a and b, a transposition counting as one edit
 * (optimal string alignment); capped at NAME_MAX_HINT + 1. */
static size_t distance(const char *a, const char *b)
{
	size_t n = strlen(a), m = strlen(b);
	if (n > NAME_MAX_HINT || m > NAME_MAX_HINT)
		return NAME_MAX_HINT + 1;
	size_t d[NAME_MAX_HINT + 1][NAME_MAX_HINT + 1];
	for (size_t i = 0; i <= n; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= n; i++) {
		for (size_t j = 1; j <= m; j++) {
			size_t cost = a[i - 1] != b[j - 1];
			size_t v = d[i - 1][j - 1] + cost;
			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	}
	return d[n][m];
}

const char *spec_nearest_key(const char *name, const struct spec_key *keys,
			     size_t n_keys)
{
	/* one edit for short names, two otherwise: near enough to be a
	 * typo, far enough that 'x' suggests nothing */
	size_t best = strlen(name) <= 4 ? 1 : 2;
	const char *found = NULL;
	for (size_t i = 0; i < n_keys; i++) {
		size_t d = distance(name, keys[i].name);
		if (d <= best && (!found || d < best)) {
			best = d;
			found = keys[i].name;
		}
	}
	return found;
}

/* The byte offset of line/column (0-based; columns count characters, as
 * libyaml's marks do) in data, or len when past its end. */
static size_t offset_of(const char *data, size_t len, const yaml_mark_t *m)
{
	size_t i = 0;
	for (size_t line = 0; line < m->line && i < len; i++)
		line += data[i] == '\n';
	for (size_t col = 0; i < len && data[i] != '\n'; i++) {
		if (((unsigned char)data[i] & 0xc0) == 0x80)
			continue;
		if (col++ == m->column)
			break;
	}
	return i;
}

bool spec_tab_at(const char *data, size_t len, const yaml_mark_t *m)
{
	size_t at = offset_of(data, len, m);
	if (at < len && data[at] == '\t')
		return true;
	/* a tab in the blanks that lead up to it on its line */
	size_t i = at;
	bool tab = false;
	while (i > 0 && data[i - 1] != '\n') {
		i--;
		if (data[i] == '\t')
			tab = true;
		else if (data[i] != ' ')
			return false;
	}
	return tab;
}

bool spec_context_opens(const char *context)
{
	return strstr(context, "flow") || strstr(context, "quoted");
}
