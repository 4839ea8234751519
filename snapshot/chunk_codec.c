/*
 * chunk_codec.c - compressing and decoding one chunk: zstd, snappy or none,
 * the XXH3 chunk checksum, the per-thread state that reading needs (a zstd
 * decompression context and scratch buffers, freed at thread exit), and
 * the module's mutex initializer.
 *
 * Not for: files, indexes or trailers. mf_chunk_decode is the one entry
 * point a fuzz target drives; it trusts nothing in its input.
 */
#include "snapshot_i.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <snappy-c.h>
#include <xxhash.h>

#include "mf_config.h"
#if MF_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_createCCtx_advanced */
#include <zstd.h>
#include <zstd_errors.h>

/* ---- levels, bounds, checksums ---- */

bool snap_level_valid(enum mf_codec codec, int level)
{
	switch (codec) {
	case MF_CODEC_ZSTD:
		return level >= 1 && level <= ZSTD_maxCLevel();
	case MF_CODEC_SNAPPY:
	case MF_CODEC_NONE:
		return level == 0;
	}
	return false;
}

bool snap_chunk_level_valid(enum mf_codec codec, int level)
{
	if (codec == MF_CODEC_ZSTD && level < 0)
		return level >= ZSTD_minCLevel();
	return snap_level_valid(codec, level);
}

size_t snap_codec_bound(enum mf_codec codec, size_t raw)
{
	switch (codec) {
	case MF_CODEC_ZSTD:
		return ZSTD_compressBound(raw);
	case MF_CODEC_SNAPPY:
		return snappy_max_compressed_length(raw);
	case MF_CODEC_NONE:
		return raw;
	}
	return 0;
}

/* Every chunk's bytes pass here when written and on every read from
 * disk: the widest vector unit the CPU has, where the library can choose
 * one at run time (XXH3's value does not depend on it). */
uint64_t snap_chunk_checksum(const void *p, size_t len, uint64_t seed)
{
	static const uint8_t empty[1];
#if MF_HAVE_XXH_DISPATCH
	return XXH3_64bits_withSeed_dispatch(len ? p : empty, len, seed);
#else
	return XXH3_64bits_withSeed(len ? p : empty, len, seed);
#endif
}

/* The one place zstd's error space becomes an errno. */
static int zstd_errno(size_t r)
{
	if (!ZSTD_isError(r))
		return 0;
	if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation)
		return -ENOMEM;
	return -EIO;
}

/* ---- compression ---- */

struct snap_cctx {
	ZSTD_CCtx *zstd; /* NULL but for MF_CODEC_ZSTD */
};

/*
 * A compression context's memory comes from mf_buf_alloc: left out of the
 * stages' forks (a fork would write-protect it, and each page the next
 * chunk's compression touches would fault), and the mappings of a
 * writer's contexts are those the last writer freed. Each block starts
 * with its capacity.
 */
#define CMEM_HEAD 64 /* keeps zstd's blocks aligned */

static void *cmem_alloc(void *opaque, size_t size)
{
	(void)opaque;
	size_t cap;
	if (size > SIZE_MAX - CMEM_HEAD)
		return NULL;
	uint8_t *p = mf_buf_alloc(size + CMEM_HEAD, &cap);
	if (!p)
		return NULL;
	memcpy(p, &cap, sizeof(cap));
	return p + CMEM_HEAD;
}

static void cmem_free(void *opaque, void *addr)
{
	(void)opaque;
	if (!addr)
		return;
	uint8_t *p = (uint8_t *)addr - CMEM_HEAD;
	size_t cap;
	memcpy(&cap, p, sizeof(cap));
	mf_buf_free(p, cap);
}

int snap_cctx_new(enum mf_codec codec, struct snap_cctx **out)
{
	struct snap_cctx *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (codec == MF_CODEC_ZSTD) {
		c->zstd = ZSTD_createCCtx_advanced(
		    (ZSTD_customMem){cmem_alloc, cmem_free, NULL});
		if (!c->zstd) {
			free(c);
			return -ENOMEM;
		}
	}
	*out = c;
	return 0;
}

void snap_cctx_free(struct snap_cctx *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->zstd);
	free(c);
}

int snap_compress(struct snap_cctx *c, enum mf_codec codec, int level,
		  const void *src, size_t len, void *dst, size_t cap,
		  size_t *out_len)
{
	size_t n;
	switch (codec) {
	case MF_CODEC_ZSTD:
		n = ZSTD_compressCCtx(c->zstd, dst, cap, src, len, level);
		if (ZSTD_isError(n))
			return zstd_errno(n);
		break;
	case MF_CODEC_SNAPPY:
		n = cap;
		if (snappy_compress(src, len, dst, &n) != SNAPPY_OK)
			return -EIO;
		break;
	case MF_CODEC_NONE:
		if (cap < len)
			return -EIO;
		memcpy(dst, src, len);
		n = len;
		break;
	default:
		return -EINVAL;
	}
	*out_len = n;
	return 0;
}

/* ---- per-thread state ---- */

struct thread_state {
	ZSTD_DCtx *dctx;
	void *buf[SNAP_SCRATCH_N];
	size_t cap[SNAP_SCRATCH_N];
};

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;
static int state_key_rc;

static void state_free(void *p)
{
	struct thread_state *s = p;
	ZSTD_freeDCtx(s->dctx);
	for (int i = 0; i < SNAP_SCRATCH_N; i++)
		mf_buf_free(s->buf[i], s->cap[i]);
	free(s);
}

/* In the child of a fork: the forking thread's scratch buffers that are
 * their own mappings (mf_buf_alloc) were left out of the child, so they
 * are forgotten there, not freed; the next use maps new ones. */
static void state_forget_mapped(void)
{
	struct thread_state *s = pthread_getspecific(state_key);
	for (int i = 0; s && i < SNAP_SCRATCH_N; i++) {
		if (s->buf[i] && s->cap[i] >= MF_BUF_MAP) {
			s->buf[i] = NULL;
			s->cap[i] = 0;
		}
	}
}

static void state_key_init(void)
{
	state_key_rc = pthread_key_create(&state_key, state_free);
	if (state_key_rc == 0)
		state_key_rc = pthread_atfork(NULL, NULL, state_forget_mapped);
}

static struct thread_state *thread_state(void)
{
	if (pthread_once(&state_once, state_key_init) != 0 || state_key_rc)
		return NULL;
	struct thread_state *s = pthread_getspecific(state_key);
	if (s)
		return s;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (pthread_setspecific(state_key, s) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

void *snap_thread_scratch(enum snap_scratch slot, size_t len)
{
	struct thread_state *s = thread_state();
	if (!s)
		return NULL;
	if (s->cap[slot] < len || !s->buf[slot]) {
		size_t cap;
		void *p = mf_buf_alloc(len, &cap);
		if (!p)
			return NULL;
		mf_buf_free(s->buf[slot], s->cap[slot]);
		s->buf[slot] = p;
		s->cap[slot] = cap;
	}
	return s->buf[slot];
}

static ZSTD_DCtx *thread_dctx(void)
{
	struct thread_state *s = thread_state();
	if (!s)
		return NULL;
	if (!s->dctx)
		s->dctx = ZSTD_createDCtx();
	return s->dctx;
}

/* ---- decoding ---- */

static int decode_zstd(const void *src, size_t src_len, void *dst,
		       size_t raw_len)
{
	ZSTD_DCtx *d = thread_dctx();
	if (!d)
		return -ENOMEM;
	size_t n = ZSTD_decompressDCtx(d, dst, raw_len, src, src_len);
	int rc = zstd_errno(n);
	if (rc == -ENOMEM)
		return rc;
	/* any other failure, or a length that differs, is corrupt data */
	if (rc)
		return MF_CORRUPT("zstd frame");
	if (n != raw_len)
		return MF_CORRUPT("zstd chunk length");
	return 0;
}

static int decode_snappy(const void *src, size_t src_len, void *dst,
			 size_t raw_len)
{
	size_t n;
	if (snappy_uncompressed_length(src, src_len, &n) != SNAPPY_OK ||
	    n != raw_len)
		return MF_CORRUPT("snappy chunk length");
	if (snappy_uncompress(src, src_len, dst, &n) != SNAPPY_OK ||
	    n != raw_len)
		return MF_CORRUPT("snappy frame");
	return 0;
}

int mf_chunk_decode(enum mf_codec codec, uint64_t seed, const void *src,
		    size_t src_len, uint64_t checksum, void *dst,
		    size_t raw_len)
{
	if (src_len && !src)
		return MF_CORRUPT("chunk without bytes");
	if (snap_chunk_checksum(src, src_len, seed) != checksum)
		return MF_CORRUPT("chunk checksum");
	switch (codec) {
	case MF_CODEC_ZSTD:
		return decode_zstd(src, src_len, dst, raw_len);
	case MF_CODEC_SNAPPY:
		return decode_snappy(src, src_len, dst, raw_len);
	case MF_CODEC_NONE:
		if (src_len != raw_len)
			return MF_CORRUPT("stored chunk length");
		if (raw_len && dst != src)
			memmove(dst, src, raw_len);
		return 0;
	}
	return MF_CORRUPT("chunk codec");
}
