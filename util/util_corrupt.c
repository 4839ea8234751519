/*
 * util_corrupt.c - corruption reported where it is found: MF_CORRUPT
 * records why and where on the calling thread and answers -EBADMSG.
 * Not for: deciding what a corrupt shard means (fs/engine/).
 */
#include "mf_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static _Thread_local struct mf_corrupt_note corrupt_note;
static _Thread_local char corrupt_where[128];

int mf_corrupt_at(const char *file, int line, const char *why)
{
	/* meson compiles with paths relative to the build folder */
	while (strncmp(file, "../", 3) == 0)
		file += 3;
	corrupt_note = (struct mf_corrupt_note){file, why, line};
	return -EBADMSG;
}

const char *mf_corrupt_reason(void)
{
	return corrupt_note.why ? corrupt_note.why : "";
}

const char *mf_corrupt_where(void)
{
	if (!corrupt_note.why)
		return "";
	snprintf(corrupt_where, sizeof(corrupt_where), "%s:%d",
		 corrupt_note.file, corrupt_note.line);
	return corrupt_where;
}

void mf_corrupt_clear(void)
{
	corrupt_note = (struct mf_corrupt_note){0};
}

void mf_corrupt_save(struct mf_corrupt_note *n)
{
	*n = corrupt_note;
}

int mf_corrupt_restore(const struct mf_corrupt_note *n)
{
	if (n->why)
		corrupt_note = *n;
	return -EBADMSG;
}
