/*
 * order_vectors.c - prints the test vectors of batch order 1 (docs/format.md,
 * "Batch order"), the file tests/order/golden/order-v1.txt: for each case
 * its inputs, the epoch key, the shard order, the windows and the whole
 * sequence. With --check FILE it compares its output with FILE and exits 1
 * at the first line that differs, so an order that changed without a new
 * version fails the test suite; an outside reimplementation reads the
 * same file (tests/order/order_ref.py is one).
 *
 * Not for: properties of the order (test_order.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mf_order.h"
#include "mf_util.h"

struct vcase {
	const char *name;
	bool shuffled;
	uint64_t seed, epoch, window, nshards;
	uint64_t counts[24], bytes[24];
};

static const struct vcase cases[] = {
    {"seed-none", false, 0, 0, 64, 4, {3, 0, 5, 2}, {12, 0, 20, 8}},
    {"one-group", true, 7, 0, 1 << 20, 5, {4, 6, 0, 3, 5}, {16, 24, 0, 12, 20}},
    {"windows",
     true,
     7,
     1,
     40,
     6,
     {10, 7, 12, 9, 3, 8},
     {40, 28, 48, 36, 12, 32}},
    {"groups",
     true,
     18446744073709551615ULL,
     5,
     30,
     20,
     {3, 5, 2, 7, 4, 6, 1, 0, 8, 2, 5, 3, 4, 6, 2, 7, 1, 3, 5, 4},
     {9, 20, 2, 21, 16, 6, 5, 0, 8, 10, 5, 3, 12, 36, 4, 7, 1, 9, 5, 8}},
};

static void put_hex(FILE *f, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%02x", b[i]);
}

static int epoch_key(const uint8_t fp[32], uint64_t seed, uint64_t epoch,
		     uint8_t key[32])
{
	uint8_t msg[13 + 32 + 16];
	memcpy(msg, "matfs-order-1", 13);
	memcpy(msg + 13, fp, 32);
	for (int i = 0; i < 8; i++) {
		msg[45 + i] = (uint8_t)(seed >> (8 * i));
		msg[53 + i] = (uint8_t)(epoch >> (8 * i));
	}
	struct mf_sha256 h;
	int rc = mf_sha256_init(&h);
	if (rc == 0 && (rc = mf_sha256_update(&h, msg, sizeof(msg))) != 0)
		mf_sha256_release(&h);
	return rc ? rc : mf_sha256_final(&h, key);
}

static int put_list(FILE *f, const char *what, const uint64_t *v, uint64_t n)
{
	fprintf(f, "%s", what);
	for (uint64_t i = 0; i < n; i++)
		fprintf(f, " %llu", (unsigned long long)v[i]);
	fprintf(f, "\n");
	return 0;
}

static int put_case(FILE *f, const struct vcase *c)
{
	struct mf_order_params p = {.shuffled = c->shuffled,
				    .seed = c->seed,
				    .epoch = c->epoch,
				    .window = c->window,
				    .nshards = c->nshards};
	for (int i = 0; i < 32; i++)
		p.fingerprint[i] = (uint8_t)i;
	struct mf_order *o;
	int rc = mf_order_new(&p, &o);
	for (uint64_t s = 0; rc == 0 && s < c->nshards; s++)
		rc = mf_order_set_shard(o, s, c->counts[s], c->bytes[s]);
	if (rc)
		return rc;
	fprintf(f, "case %s\nfingerprint ", c->name);
	put_hex(f, p.fingerprint, 32);
	if (c->shuffled)
		fprintf(f, "\nseed %llu\nepoch %llu\n",
			(unsigned long long)c->seed,
			(unsigned long long)c->epoch);
	else
		fprintf(f, "\nseed none\n");
	fprintf(f, "window %llu\nshards %llu\n", (unsigned long long)c->window,
		(unsigned long long)c->nshards);
	put_list(f, "records", c->counts, c->nshards);
	put_list(f, "bytes", c->bytes, c->nshards);
	if (c->shuffled) {
		uint8_t key[32];
		if ((rc = epoch_key(p.fingerprint, c->seed, c->epoch, key)))
			goto out;
		fprintf(f, "key ");
		put_hex(f, key, 32);
		fprintf(f, "\n");
	}
	fprintf(f, "shard_order");
	for (uint64_t i = 0; i < c->nshards; i++)
		fprintf(f, " %llu",
			(unsigned long long)mf_order_shard_at(o, i));
	fprintf(f, "\n");
	uint64_t n = mf_order_known(o);
	for (uint64_t i = 0; i < n;) {
		struct mf_order_window w;
		if ((rc = mf_order_window_at(o, i, &w)))
			goto out;
		fprintf(
		    f, "window group %llu part %llu first %llu count %llu\n",
		    (unsigned long long)w.group, (unsigned long long)w.part,
		    (unsigned long long)w.first, (unsigned long long)w.count);
		fprintf(f, "order");
		for (uint64_t j = 0; j < w.count; j++) {
			uint64_t s, r;
			if ((rc = mf_order_locate(o, i + j, &s, &r)))
				goto out;
			fprintf(f, " %llu:%llu", (unsigned long long)s,
				(unsigned long long)r);
		}
		fprintf(f, "\n");
		i += w.count;
	}
	fprintf(f, "end\n");
out:
	mf_order_free(o);
	return rc;
}

static int put_all(FILE *f)
{
	fprintf(f,
		"# matfs batch order 1: test vectors (docs/format.md, "
		"\"Batch order\")\n");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = put_case(f, &cases[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static int check(const char *path)
{
	char *mine = NULL, line[65536], want[65536];
	size_t len = 0;
	FILE *m = open_memstream(&mine, &len);
	if (!m || put_all(m) || fclose(m)) {
		fprintf(stderr, "order_vectors: cannot make the vectors\n");
		return 1;
	}
	FILE *g = fopen(path, "r"), *s = fmemopen(mine, len, "r");
	if (!g || !s) {
		fprintf(stderr, "order_vectors: cannot open '%s'\n", path);
		return 1;
	}
	int rc = 0;
	for (unsigned no = 1;; no++) {
		char *a = fgets(want, sizeof(want), g);
		char *b = fgets(line, sizeof(line), s);
		if (!a && !b)
			break;
		if (!a || !b || strcmp(a, b) != 0) {
			fprintf(stderr, "%s:%u: expected: %s\n got: %s\n", path,
				no, a ? a : "(end)", b ? b : "(end)");
			rc = 1;
			break;
		}
	}
	fclose(g);
	fclose(s);
	free(mine);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--check") == 0)
		return check(argv[2]);
	if (argc != 1) {
		fprintf(stderr, "usage: order_vectors [--check FILE]\n");
		return 2;
	}
	return put_all(stdout) ? 1 : 0;
}
