/*
 * snap_testutil.c - helpers shared by the snapshot tests (snap_testutil.h).
 *
 * Not for: the library itself.
 */
#include "snap_testutil.h"

#include "mf_testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

char *tu_mkdtemp(void)
{
	char tmpl[] = "/tmp/mf-snap-test-XXXXXX";
	if (!mkdtemp(tmpl))
		abort();
	return strdup(tmpl);
}

void tu_rmtree(const char *path)
{
	(void)tl_rm_rf(path);
}

int tu_fixture_setup(void **state, size_t size)
{
	struct tu_store *f = calloc(1, size);
	if (!f)
		return -1;
	f->dir = tu_mkdtemp();
	if (mf_store_open(f->dir, true, &f->st) != 0)
		return -1;
	*state = f;
	return 0;
}

int tu_store_setup(void **state)
{
	return tu_fixture_setup(state, sizeof(struct tu_store));
}

int tu_store_teardown(void **state)
{
	struct tu_store *f = *state;
	mf_store_close(f->st);
	tu_rmtree(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

uint64_t tu_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void tu_fill(uint8_t *buf, size_t n, uint64_t seed, bool compressible)
{
	static const char *words[] = {"alpha ",	  "beta ", "gamma ", "delta\n",
				      "epsilon ", "zeta ", "eta ",   "theta "};
	uint64_t st = seed;
	size_t i = 0;
	while (i < n) {
		uint64_t r = tu_rand(&st);
		if (!compressible) {
			for (int k = 0; k < 8 && i < n; k++)
				buf[i++] = (uint8_t)(r >> (8 * k));
			continue;
		}
		const char *w = words[r % 8];
		while (*w && i < n)
			buf[i++] = (uint8_t)*w++;
		if (r % 16 == 0 && i < n)
			buf[i++] = (uint8_t)(r >> 40);
	}
}

int tu_read_file(const char *path, uint8_t **data, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	size_t cap = 1 << 16, n = 0;
	uint8_t *buf = malloc(cap);
	size_t r;
	while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(f);
	if (!buf)
		return -ENOMEM;
	*data = buf;
	*len = n;
	return 0;
}

int tu_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -errno;
	size_t w = len ? fwrite(data, 1, len, f) : 0;
	int rc = fclose(f);
	return (w == len && rc == 0) ? 0 : -EIO;
}

int tu_write_shard(struct mf_store *st, uint32_t shard,
		   const struct mf_codec_cfg *cfg, const uint8_t *data,
		   size_t len, struct mf_shard_stat *stat)
{
	int rc = mf_store_run_create(st, TU_FP, TU_RUN);
	if (rc)
		return rc;
	struct mf_shard_writer *w;
	rc = mf_shard_writer_open(st, TU_FP, TU_RUN, shard, cfg, &w);
	if (rc)
		return rc;
	uint64_t rs = shard * 7919ULL + len;
	size_t off = 0;
	while (off < len) {
		/* pieces from 1 byte to 3 chunks, given or written in
		 * place, so every path is taken */
		size_t n = (size_t)(tu_rand(&rs) % (3 * cfg->chunk_size)) + 1;
		if (tu_rand(&rs) % 4 == 0)
			n = (size_t)(tu_rand(&rs) % 100) + 1;
		n = n < len - off ? n : len - off;
		if (tu_rand(&rs) % 3 == 0) {
			/* in place: at most the room the writer gives */
			void *b;
			size_t room;
			rc = mf_shard_writer_space(w, &b, &room);
			n = rc ? 0 : n < room ? n : room;
			if (rc == 0)
				memcpy(b, data + off, n);
			if (rc == 0)
				rc = mf_shard_writer_wrote(w, n);
		} else {
			rc = mf_shard_writer_write(w, data + off, n);
		}
		if (rc) {
			mf_shard_writer_abort(w);
			return rc;
		}
		off += n;
	}
	return mf_shard_writer_commit(w, stat);
}

uint64_t tu_v2_key(const char *fp, uint32_t shard)
{
	/* the 64 hex digits as ASCII, then the index, 4 bytes little-endian */
	uint8_t b[68];
	memcpy(b, fp, 64);
	for (int i = 0; i < 4; i++)
		b[64 + i] = (uint8_t)(shard >> (8 * i));
	return XXH3_64bits_withSeed(b, sizeof(b), 0);
}

uint64_t tu_v2_chunk_seed(uint64_t key, uint32_t i)
{
	uint8_t b[4];
	for (int k = 0; k < 4; k++)
		b[k] = (uint8_t)(i >> (8 * k));
	return XXH3_64bits_withSeed(b, sizeof(b), key);
}

void tu_shard_path(const char *dir, uint32_t shard, char *buf, size_t len)
{
	snprintf(buf, len, "%s/snapshots/%s/%s/shard-%05" PRIu32 ".mfs", dir,
		 TU_FP, TU_RUN, shard);
}
