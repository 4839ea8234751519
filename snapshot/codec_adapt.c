/*
 * codec_adapt.c - which codec and level each chunk a writer compresses
 * gets, and how many cores the writer's pool may use. The level follows
 * zstd's --adapt idea: when the compressors fall behind the stage's
 * output, the next chunks go one rung down a ladder (the ceiling, each
 * level below it to 1, the fast levels, then storing raw); when they keep
 * up, back toward the ceiling. The spec's codec is a ceiling, never
 * exceeded.
 *
 * Not for: measuring anything. The writer measures its backlog and hands
 * it in; this file is pure but for the one system call that counts cores,
 * so a test drives the ladder with any sequence of backlogs it likes.
 */
#include "snapshot_i.h"

#include <sched.h>
#include <unistd.h>

/* zstd's fast levels, tried in order below level 1. */
static const int fast_levels[] = {-1, -2, -4, -8, -16};
#define FAST_LEVELS (sizeof(fast_levels) / sizeof(fast_levels[0]))

void snap_adapt_init(struct snap_adapt *a, enum mf_codec codec, int level,
		     bool on)
{
	*a = (struct snap_adapt){
	    .codec = codec,
	    .ceiling = level,
	    .on = on && codec == MF_CODEC_ZSTD,
	};
}

unsigned snap_adapt_rungs(const struct snap_adapt *a)
{
	if (!a->on)
		return 1;
	/* ceiling .. 1, the fast levels, raw */
	return (unsigned)a->ceiling + FAST_LEVELS + 1;
}

void snap_adapt_rung(const struct snap_adapt *a, unsigned rung,
		     enum mf_codec *codec, int *level)
{
	unsigned n = snap_adapt_rungs(a);
	if (rung >= n)
		rung = n - 1;
	*codec = a->codec;
	if (!a->on || rung < (unsigned)a->ceiling) {
		*level = a->ceiling - (int)rung;
		return;
	}
	rung -= (unsigned)a->ceiling;
	if (rung < FAST_LEVELS) {
		*level = fast_levels[rung];
		return;
	}
	*codec = MF_CODEC_NONE;
	*level = 0;
}

void snap_adapt_next(struct snap_adapt *a, unsigned backlog, unsigned workers,
		     enum mf_codec *codec, int *level)
{
	if (a->on && backlog >= workers) {
		/* no worker is free for this chunk: it must queue */
		a->calm = 0;
		if (a->rung + 1 < snap_adapt_rungs(a))
			a->rung++;
	} else if (a->on && ++a->calm >= SNAP_ADAPT_CALM) {
		a->calm = 0;
		if (a->rung > 0)
			a->rung--;
	}
	snap_adapt_rung(a, a->rung, codec, level);
}

unsigned snap_cores_available(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}
