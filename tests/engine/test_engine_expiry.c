/*
 * test_engine_expiry.c - the expiry policy (mf_engine_expiry_due) as pure
 * decisions on lists of snapshot records: expire_after and --older-than,
 * keep with a registered fingerprint, keep's ties by created and
 * fingerprint, and max_size's order skipping what is in use. No store,
 * no catalog: the predicates are the test's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mf_engine.h"

#define NOW 1000000

/* What the predicates answer, and how often they were asked. */
struct know {
	const char *registered[4]; /* fingerprints, by their first char */
	const char *in_use[4];
	const char *feeds; /* "ab": a may be stored from b's data */
	unsigned asked_registered, asked_in_use, asked_feeds;
	char in_use_order[16]; /* first chars of fps asked, in order */
};

static bool listed(const char *const *v, const char *fp)
{
	for (int i = 0; i < 4 && v[i]; i++)
		if (strcmp(v[i], fp) == 0)
			return true;
	return false;
}

static bool is_registered(void *arg, const char *fp)
{
	struct know *k = arg;
	k->asked_registered++;
	return listed(k->registered, fp);
}

static bool is_in_use(void *arg, const char *fp)
{
	struct know *k = arg;
	size_t n = strlen(k->in_use_order);
	if (n + 1 < sizeof(k->in_use_order))
		k->in_use_order[n] = fp[0];
	k->asked_in_use++;
	return listed(k->in_use, fp);
}

static bool is_fed(void *arg, const char *fp, const char *from)
{
	struct know *k = arg;
	k->asked_feeds++;
	for (const char *f = k->feeds; f && f[0] && f[1]; f += 2)
		if (f[0] == fp[0] && f[1] == from[0])
			return true;
	return false;
}

/* A fingerprint of 64 copies of c. */
static const char *fpx(char c)
{
	static char buf[8][65];
	static int next;
	char *b = buf[next++ % 8];
	memset(b, c, 64);
	b[64] = '\0';
	return b;
}

static struct mf_engine_snapshot rec(char fp, const char *name, int64_t created,
				     int64_t last_read)
{
	struct mf_engine_snapshot r;
	memset(&r, 0, sizeof(r));
	memcpy(r.fp, fpx(fp), sizeof(r.fp));
	snprintf(r.name, sizeof(r.name), "%s", name);
	r.shards = 1;
	r.expire_after = -1;
	r.created = created;
	r.last_read = last_read;
	return r;
}

/* The decisions as "FP-CHAR:WHY ..." for one comparison. */
static void decide(const struct mf_engine_snapshot *v, size_t n,
		   struct mf_expiry_policy *p, struct know *k, char *out,
		   size_t len)
{
	p->registered = is_registered;
	p->in_use = is_in_use;
	p->feeds = is_fed;
	p->arg = k;
	struct mf_expiry_due *due = NULL;
	size_t nd = 99;
	assert_int_equal(mf_engine_expiry_due(v, n, p, &due, &nd), 0);
	out[0] = '\0';
	for (size_t i = 0; i < nd; i++) {
		assert_true(due[i].index < n);
		size_t used = strlen(out);
		snprintf(out + used, len - used, "%s%c:%s", i ? " " : "",
			 v[due[i].index].fp[0], mf_expiry_why_name(due[i].why));
	}
	if (nd == 0)
		assert_null(due);
	free(due);
}

static void test_expire_after(void **state)
{
	(void)state;
	struct mf_engine_snapshot v[5] = {
	    rec('a', "x", NOW - 100, 0), /* never read: created counts */
	    rec('b', "y", NOW - 100, NOW - 10), /* read recently */
	    rec('c', "z", NOW - 500, 0), /* never expires */
	    rec('d', "r", NOW - 100, 0), /* registered, holds data */
	    rec('e', "s", NOW - 100, 0), /* registered, holds nothing */
	};
	for (int i = 0; i < 4; i++)
		v[i == 2 ? 4 : i].expire_after = 60;
	v[3].materialized = 1;
	struct know k = {.registered = {fpx('d'), fpx('e')}};
	struct mf_expiry_policy p = {.now = NOW, .older_than = -1};
	char got[256];
	decide(v, 5, &p, &k, got, sizeof(got));
	assert_string_equal(got, "a:expire_after d:expire_after");

	/* --older-than replaces every snapshot's own, never included */
	p.older_than = 50;
	decide(v, 5, &p, &k, got, sizeof(got));
	assert_string_equal(got,
			    "a:expire_after c:expire_after d:expire_after");
	/* exactly the age is due, a second less is not */
	p.older_than = 100;
	decide(v, 5, &p, &k, got, sizeof(got));
	assert_string_equal(got,
			    "a:expire_after c:expire_after d:expire_after");
	p.older_than = 101;
	decide(v, 5, &p, &k, got, sizeof(got));
	assert_string_equal(got, "c:expire_after");
}

static void test_keep_registered(void **state)
{
	(void)state;
	/* keep 1 of name n: b is the most recently used, but a is what the
	 * registered spec yields now, so a stays and b, c go */
	struct mf_engine_snapshot v[4] = {
	    rec('a', "n", NOW - 300, NOW - 200),
	    rec('b', "n", NOW - 100, NOW - 5),
	    rec('c', "n", NOW - 200, 0),
	    rec('d', "other", NOW - 900, 0),
	};
	for (int i = 0; i < 4; i++)
		v[i].keep = 1;
	struct know k = {.registered = {fpx('a')}};
	struct mf_expiry_policy p = {.now = NOW, .older_than = -1};
	char got[256];
	decide(v, 4, &p, &k, got, sizeof(got));
	assert_string_equal(got, "b:keep c:keep");

	/* none registered: the most recently used stays */
	struct know none = {0};
	decide(v, 4, &p, &none, got, sizeof(got));
	assert_string_equal(got, "a:keep c:keep");

	/* keep 2: the registered one and the most recent other */
	for (int i = 0; i < 4; i++)
		v[i].keep = 2;
	decide(v, 4, &p, &k, got, sizeof(got));
	assert_string_equal(got, "c:keep");

	/* two registered beyond keep 1: neither goes under keep */
	for (int i = 0; i < 4; i++)
		v[i].keep = 1;
	struct know two = {.registered = {fpx('a'), fpx('c')}};
	decide(v, 4, &p, &two, got, sizeof(got));
	assert_string_equal(got, "b:keep");
}

/* keep leaves an older fingerprint whose data a registered one not yet
 * whole may be stored from (a corpus that grew by an input), and takes it
 * once that one is whole; one that feeds nothing goes at once. */
static void test_keep_feeding(void **state)
{
	(void)state;
	struct mf_engine_snapshot v[4] = {
	    rec('a', "n", NOW - 10, 0),
	    rec('b', "n", NOW - 100, NOW - 50),
	    rec('c', "n", NOW - 200, NOW - 150),
	    rec('d', "other", NOW - 900, 0),
	};
	for (int i = 0; i < 4; i++) {
		v[i].keep = 1;
		v[i].shards = 4;
		v[i].materialized = 4;
	}
	v[0].materialized = 1; /* a: registered, not whole */
	struct know k = {.registered = {fpx('a')}, .feeds = "ab"};
	struct mf_expiry_policy p = {.now = NOW, .older_than = -1};
	char got[256];
	decide(v, 4, &p, &k, got, sizeof(got));
	assert_string_equal(got, "c:keep");
	assert_true(k.asked_feeds > 0);
	/* a whole: nothing is asked, b goes too */
	v[0].materialized = 4;
	k.asked_feeds = 0;
	decide(v, 4, &p, &k, got, sizeof(got));
	assert_string_equal(got, "b:keep c:keep");
	assert_int_equal(k.asked_feeds, 0);
	/* expire_after is not held back by feeding */
	v[0].materialized = 1;
	v[1].expire_after = 10;
	decide(v, 4, &p, &k, got, sizeof(got));
	assert_string_equal(got, "b:expire_after c:keep");
}

/* keep is the name's, as its spec says now: the row of the fingerprint
 * ranked first (the registered one) decides, not each older row's keep
 * from the spec that made it. */
static void test_keep_of_the_current_spec(void **state)
{
	(void)state;
	struct mf_engine_snapshot v[4] = {
	    rec('a', "n", NOW - 300, 0),
	    rec('b', "n", NOW - 400, NOW - 5),
	    rec('c', "n", NOW - 500, 0),
	    rec('d', "other", NOW - 900, 0),
	};
	struct know k = {.registered = {fpx('a')}};
	struct mf_expiry_policy p = {.now = NOW, .older_than = -1};
	char got[256];
	/* keep: 1 added to the spec: the fingerprints made before go */
	v[0].keep = 1;
	decide(v, 4, &p, &k, got, sizeof(got));
	assert_string_equal(got, "b:keep c:keep");

	/* keep: 1 taken out of it: no limit any more */
	v[0].keep = 0;
	v[1].keep = v[2].keep = 1;
	decide(v, 4, &p, &k, got, sizeof(got));
	assert_string_equal(got, "");

	/* none registered: the most recently used one's keep */
	struct know none = {0};
	v[1].keep = 2; /* b, read last */
	decide(v, 4, &p, &none, got, sizeof(got));
	assert_string_equal(got, "c:keep");
}

static void test_keep_ties(void **state)
{
	(void)state;
	/* the same last use: the later created stays */
	struct mf_engine_snapshot v[2] = {
	    rec('a', "n", NOW - 100, NOW - 10),
	    rec('b', "n", NOW - 200, NOW - 10),
	};
	v[0].keep = v[1].keep = 1;
	struct know k = {0};
	struct mf_expiry_policy p = {.now = NOW, .older_than = -1};
	char got[256];
	decide(v, 2, &p, &k, got, sizeof(got));
	assert_string_equal(got, "b:keep");

	/* the same last use and created (within one second): the larger
	 * fingerprint stays, whatever the listing order */
	struct mf_engine_snapshot w[2] = {
	    rec('f', "n", NOW - 100, 0),
	    rec('3', "n", NOW - 100, 0),
	};
	w[0].keep = w[1].keep = 1;
	decide(w, 2, &p, &k, got, sizeof(got));
	assert_string_equal(got, "3:keep");
	struct mf_engine_snapshot t = w[0];
	w[0] = w[1];
	w[1] = t;
	decide(w, 2, &p, &k, got, sizeof(got));
	assert_string_equal(got, "3:keep");
}

static void test_max_size(void **state)
{
	(void)state;
	struct mf_engine_snapshot v[5] = {
	    rec('a', "a", NOW - 900, NOW - 50), /* in use */
	    rec('b', "b", NOW - 900, NOW - 40),
	    rec('c', "c", NOW - 900, NOW - 60), /* least recent: in use */
	    rec('d', "d", NOW - 900, NOW - 30),
	    rec('e', "e", NOW - 900, NOW - 70), /* no data: not a victim */
	};
	uint64_t sizes[5] = {100, 100, 100, 100, 0};
	for (int i = 0; i < 5; i++)
		v[i].stored_bytes = sizes[i];
	struct know k = {.in_use = {fpx('a'), fpx('c')}};
	/* 400 stored, 150 allowed: b then d go, a and c are in use */
	struct mf_expiry_policy p = {
	    .now = NOW, .older_than = -1, .max_size = 150};
	char got[256];
	decide(v, 5, &p, &k, got, sizeof(got));
	assert_string_equal(got, "b:max_size d:max_size");
	assert_string_equal(k.in_use_order, "cabd");

	/* 300 allowed: one victim is enough, the least recent not in use */
	struct know k2 = {.in_use = {fpx('a'), fpx('c')}};
	p.max_size = 300;
	decide(v, 5, &p, &k2, got, sizeof(got));
	assert_string_equal(got, "b:max_size");

	/* what expire_after takes counts as gone already */
	struct know k3 = {0};
	v[3].expire_after = 10;
	p.max_size = 300;
	decide(v, 5, &p, &k3, got, sizeof(got));
	assert_string_equal(got, "d:expire_after");
	assert_int_equal(k3.asked_in_use, 0);
	p.max_size = 200;
	decide(v, 5, &p, &k3, got, sizeof(got));
	assert_string_equal(got, "d:expire_after c:max_size");
}

/* A pass with nothing due asks the caller nothing (the daemon's
 * registered() may read the catalog). */
static void test_nothing_due_asks_nothing(void **state)
{
	(void)state;
	struct mf_engine_snapshot v[3] = {
	    rec('a', "n", NOW - 100, 0),
	    rec('b', "n", NOW - 100, 0),
	    rec('c', "m", NOW - 100, 0),
	};
	v[2].expire_after = 3600;
	v[0].stored_bytes = 10;
	struct know k = {0};
	struct mf_expiry_policy p = {
	    .now = NOW, .older_than = -1, .max_size = 10};
	char got[64];
	decide(v, 3, &p, &k, got, sizeof(got));
	assert_string_equal(got, "");
	assert_int_equal(k.asked_registered, 0);
	assert_int_equal(k.asked_in_use, 0);
	assert_string_equal(mf_expiry_why_name(MF_EXPIRY_AFTER),
			    "expire_after");
	assert_string_equal(mf_expiry_why_name(MF_EXPIRY_KEEP), "keep");
	assert_string_equal(mf_expiry_why_name(MF_EXPIRY_MAX_SIZE), "max_size");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_expire_after),
	    cmocka_unit_test(test_keep_registered),
	    cmocka_unit_test(test_keep_of_the_current_spec),
	    cmocka_unit_test(test_keep_feeding),
	    cmocka_unit_test(test_keep_ties),
	    cmocka_unit_test(test_max_size),
	    cmocka_unit_test(test_nothing_due_asks_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
