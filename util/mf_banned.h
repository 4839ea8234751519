/*
 * mf_banned.h - C library functions matfs never calls, as git's banned.h:
 * each is poisoned, so a call fails to compile. meson forces this header
 * into every C file of the project (-include, see meson.build), after the
 * C library headers that declare them, whose declarations still compile.
 *
 *   sprintf, vsprintf              no bound: snprintf, vsnprintf, asprintf
 *   strcpy, strcat                 no bound: snprintf, memcpy with a length
 *   strncpy, strncat               truncate silently or leave no NUL
 *   gets                           no bound at all
 *   strtok                         hidden state, not thread-safe: strtok_r
 *   gmtime, localtime, asctime     a shared static buffer: the _r forms
 *
 * Not for: project declarations; it is included nowhere by hand.
 */
#ifndef MF_BANNED_H
#define MF_BANNED_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC poison sprintf vsprintf strcpy strcat strncpy strncat gets strtok
#pragma GCC poison gmtime localtime asctime

#endif
