/*
 * pg_session.c - the registry of a process's connections apart from every
 * handle: one entry per process and location, found or made by the first
 * handle that needs it, counted, and unlinked and dropped by the last.
 * A child of a fork() finds none of its parent's entries (each names the
 * pid that made it), so it never uses nor closes its parent's
 * connections. The liveness session (pg_live.c) and the listener
 * (pg_notify.c) are its two kinds.
 *
 * Not for: what an entry's connection does (its owner's file) or the
 * handles' own connections (pg_conn.c).
 */
#include "pg_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pg_session_get(struct pg_sessions *r, const char *location, int busy_ms,
		   struct pg_session **out)
{
	pthread_mutex_lock(r->mu);
	struct pg_session *s = r->head;
	while (s && (s->pid != getpid() || strcmp(s->location, location) != 0))
		s = s->next;
	if (!s && (s = r->make()) != NULL) {
		s->location = strdup(location);
		if (s->location) {
			s->pid = getpid();
			s->busy_ms = busy_ms;
			s->next = r->head;
			r->head = s;
		} else {
			r->drop(s);
			s = NULL;
		}
	}
	if (s)
		s->refs++;
	pthread_mutex_unlock(r->mu);
	if (!s)
		return -ENOMEM;
	*out = s;
	return 0;
}

void pg_session_put(struct pg_sessions *r, struct pg_session *s)
{
	if (!s)
		return;
	pthread_mutex_lock(r->mu);
	if (--s->refs > 0) {
		pthread_mutex_unlock(r->mu);
		return;
	}
	struct pg_session **pp = &r->head;
	while (*pp != s)
		pp = &(*pp)->next;
	*pp = s->next;
	pthread_mutex_unlock(r->mu);
	free(s->location);
	s->location = NULL;
	r->drop(s);
}
