/*
 * shard_reader.c - reading a committed shard file: every check on open
 * (size, magic, version, checksums of trailer and index, a consistent
 * index), then chunks decoded on demand with their checksum verified on
 * every read from disk. Every checksum of a version 2 or 3 file is seeded
 * from the fingerprint and shard index the caller expects, never from the
 * file. Each chunk is decoded with its own codec (version 3 records one
 * per chunk; before, the trailer's).
 *
 * Not for: streaming a whole shard on several threads (shard_copy.c).
 * A reader is immutable after open; its calls are thread-safe because they
 * use pread and per-thread scratch buffers only.
 */
#include "snapshot_i.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* pread of exactly len bytes; a short read means the file lies. */
static int pread_exact(int fd, void *buf, size_t len, uint64_t off)
{
	ssize_t n = mf_pread_full(fd, buf, len, (off_t)off);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : MF_CORRUPT("file ends early");
}

/* Header and trailer; s->version is set from the header. */
static int load_trailer(int fd, uint64_t size, struct snap_seeds *s,
			struct snap_trailer *t)
{
	uint8_t hdr[SNAP_HEADER_SIZE], tb[SNAP_TRAILER_MAX];
	if (size < SNAP_HEADER_SIZE + SNAP_TRAILER_SIZE_V3)
		return MF_CORRUPT("file too short for header and trailer");
	int rc = pread_exact(fd, hdr, sizeof(hdr), 0);
	if (rc == 0)
		rc = snap_header_check(hdr, &s->version);
	size_t tsize = rc == 0 ? snap_trailer_size(s->version) : 0;
	if (rc == 0 && size < SNAP_HEADER_SIZE + tsize)
		rc = MF_CORRUPT("file too short for header and trailer");
	if (rc == 0)
		rc = pread_exact(fd, tb, tsize, size - tsize);
	if (rc == 0)
		rc = snap_trailer_decode(tb, s, t);
	if (rc == 0)
		rc = snap_trailer_check_size(t, size);
	return rc;
}

static int load_index(int fd, const struct snap_seeds *s,
		      const struct snap_trailer *t, struct snap_entry **out)
{
	/* check_size bounded the index by the file's size */
	size_t len = (size_t)t->chunks * snap_entry_size(t->version);
	uint8_t *idx = malloc(len ? len : 1);
	struct snap_entry *ent =
	    calloc(t->chunks ? t->chunks : 1, sizeof(*ent));
	int rc = -ENOMEM;
	if (!idx || !ent)
		goto fail;
	rc = pread_exact(fd, idx, len, t->index_offset);
	if (rc)
		goto fail;
	if (snap_index_checksum(idx, len, snap_meta_seed(s)) !=
	    t->index_checksum) {
		rc = MF_CORRUPT("index checksum");
		goto fail;
	}
	rc = snap_index_decode(t, idx, ent);
	if (rc)
		goto fail;
	free(idx);
	*out = ent;
	return 0;
fail:
	free(ent);
	free(idx);
	return rc;
}

/* The records section's ends, checksum and order checked; *out NULL
 * when the file stores none. */
static int load_ends(int fd, const struct snap_seeds *s,
		     const struct snap_trailer *t, uint64_t **out)
{
	uint64_t n = snap_trailer_ends(t);
	*out = NULL;
	if (n == 0)
		return t->records_checksum ==
			    snap_index_checksum(NULL, 0,
						snap_records_seed(s)) ||
			t->version < 4
		    ? 0
		    : MF_CORRUPT("records checksum");
	/* check_size bounded n by the file's size */
	size_t len = (size_t)n * 8;
	uint8_t *buf = malloc(len);
	uint64_t *ends = malloc(len);
	int rc = buf && ends ? 0 : -ENOMEM;
	if (rc == 0)
		rc = pread_exact(fd, buf, len, snap_records_offset(t));
	if (rc == 0 &&
	    snap_index_checksum(buf, len, snap_records_seed(s)) !=
		t->records_checksum)
		rc = MF_CORRUPT("records checksum");
	if (rc == 0)
		rc = snap_records_decode(t, buf, ends);
	free(buf);
	if (rc) {
		free(ends);
		return rc;
	}
	*out = ends;
	return 0;
}

/* Takes fd over, closing it on failure. fp is checked. */
static int reader_from_fd(int fd, const char *fp, uint32_t shard,
			  struct mf_shard_reader **out)
{
	struct stat sb;
	struct snap_trailer t;
	struct snap_entry *ent = NULL;
	struct snap_seeds seeds = {.key = snap_shard_key(fp, shard)};
	int rc = fstat(fd, &sb) == 0 ? 0 : -errno;
	if (rc == 0 && !S_ISREG(sb.st_mode))
		rc = MF_CORRUPT("shard file is not a regular file");
	if (rc == 0)
		rc = load_trailer(fd, (uint64_t)sb.st_size, &seeds, &t);
	if (rc == 0)
		rc = load_index(fd, &seeds, &t, &ent);
	/* no ends to read: the records checksum is checked at once, as every
	 * other byte of the trailer is */
	uint64_t *none = NULL;
	if (rc == 0 && snap_trailer_ends(&t) == 0)
		rc = load_ends(fd, &seeds, &t, &none);
	if (rc)
		goto close_fd;
	struct mf_shard_reader *r = calloc(1, sizeof(*r));
	if (!r) {
		rc = -ENOMEM;
		goto close_fd;
	}
	r->fd = fd;
	r->ent = ent;
	r->records = t.records;
	r->n_records = t.n_records;
	r->trailer = t;
	r->ends_loaded = snap_trailer_ends(&t) == 0;
	(void)mf_mutex_init(&r->ends_lock);
	r->level = t.level;
	r->seeds = seeds;
	r->st = (struct mf_shard_stat){
	    .raw_bytes = t.raw_size,
	    .stored_bytes = (uint64_t)sb.st_size,
	    .chunks = t.chunks,
	    .codec = t.codec,
	    .chunk_size = t.chunk_size,
	};
	*out = r;
	return 0;
close_fd:
	free(ent);
	close(fd);
	return rc;
}

/* Opens the committed file of shard `shard` of run_id's run of fp. */
static int open_shard_file(struct mf_store *st, const char *fp,
			   const char *run_id, uint32_t shard, int *fd)
{
	int dirfd;
	int rc = snap_open_run(st, fp, run_id, &dirfd);
	if (rc)
		return rc;
	char name[SNAP_NAME_MAX];
	snap_shard_name(shard, ".mfs", name);
	rc = snap_open_at(dirfd, name, false, fd);
	close(dirfd);
	return rc;
}

int mf_shard_reader_open(struct mf_store *st, const char *fp,
			 const char *run_id, uint32_t shard,
			 struct mf_shard_reader **out)
{
	if (!out)
		return -EINVAL;
	int fd;
	int rc = open_shard_file(st, fp, run_id, shard, &fd);
	if (rc)
		return rc;
	/* the names the path was built from, not anything in the file */
	return reader_from_fd(fd, fp, shard, out);
}

int mf_shard_reader_open_fd(int fd, const char *fp, uint32_t shard,
			    struct mf_shard_reader **out)
{
	if (!out || snap_check_ids(fp, NULL) != 0)
		return -EINVAL;
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dup < 0)
		return -errno;
	return reader_from_fd(dup, fp, shard, out);
}

void mf_shard_reader_close(struct mf_shard_reader *r)
{
	if (!r)
		return;
	close(r->fd);
	free(r->ent);
	free(r->ends);
	pthread_mutex_destroy(&r->ends_lock);
	free(r);
}

/* The ends, loaded and checked once (0, -EBADMSG, -ENOMEM, -errno). */
static int ends_ready(struct mf_shard_reader *r)
{
	pthread_mutex_lock(&r->ends_lock);
	if (!r->ends_loaded) {
		r->ends_err =
		    load_ends(r->fd, &r->seeds, &r->trailer, &r->ends);
		/* an I/O error may pass: only a verdict on the bytes sticks */
		r->ends_loaded = r->ends_err == 0 || r->ends_err == -EBADMSG;
	}
	int rc = r->ends_err;
	pthread_mutex_unlock(&r->ends_lock);
	return rc;
}

void mf_shard_reader_records(const struct mf_shard_reader *r,
			     struct mf_records *framing, uint64_t *count)
{
	*framing = r->records;
	*count = r->n_records;
}

int mf_shard_reader_record(struct mf_shard_reader *r, uint64_t k, uint64_t *off,
			   uint64_t *len)
{
	if (!r || k >= r->n_records)
		return -EINVAL;
	if (r->records.framing == MF_FRAMING_FIXED) {
		*off = k * r->records.size;
		*len = r->records.size;
		return 0;
	}
	int rc = ends_ready(r);
	if (rc)
		return rc;
	uint64_t start = k ? r->ends[k - 1] : 0;
	*off = start;
	*len = r->ends[k] - start;
	return 0;
}

int mf_shard_file_records(struct mf_store *st, const char *fp,
			  const char *run_id, uint32_t shard,
			  struct mf_records *framing, uint64_t *count)
{
	int fd;
	int rc = open_shard_file(st, fp, run_id, shard, &fd);
	if (rc)
		return rc;
	struct stat sb;
	struct snap_trailer t;
	struct snap_seeds seeds = {.key = snap_shard_key(fp, shard)};
	rc = fstat(fd, &sb) == 0 ? 0 : -errno;
	if (rc == 0)
		rc = load_trailer(fd, (uint64_t)sb.st_size, &seeds, &t);
	close(fd);
	if (rc)
		return rc;
	*framing = t.records;
	*count = t.n_records;
	return 0;
}

void mf_shard_reader_stat(const struct mf_shard_reader *r,
			  struct mf_shard_stat *out)
{
	*out = r->st;
}

size_t mf_shard_reader_chunk_len(const struct mf_shard_reader *r, uint32_t i)
{
	return i < r->st.chunks ? r->ent[i].raw : 0;
}

int mf_shard_reader_chunk_codec(const struct mf_shard_reader *r, uint32_t i,
				enum mf_codec *codec, int *level)
{
	if (!r || i >= r->st.chunks || !codec || !level)
		return -EINVAL;
	*codec = r->ent[i].codec;
	*level = r->ent[i].level;
	return 0;
}

/* ---- chunks ---- */

int snap_load_chunk(struct mf_shard_reader *r, uint32_t i, void *dst)
{
	const struct snap_entry *e = &r->ent[i];
	uint64_t seed = snap_chunk_seed(&r->seeds, i);
	if (e->codec == MF_CODEC_NONE) {
		/* stored bytes are the raw bytes: land them where they go
		 * and check them there */
		int rc = pread_exact(r->fd, dst, e->raw, e->offset);
		if (rc)
			return rc;
		if (snap_chunk_checksum(dst, e->raw, seed) != e->checksum)
			return MF_CORRUPT("chunk checksum");
		return 0;
	}
	void *buf = snap_thread_scratch(SNAP_SCRATCH_STORED, e->stored);
	if (!buf)
		return -ENOMEM;
	int rc = pread_exact(r->fd, buf, e->stored, e->offset);
	if (rc)
		return rc;
	return mf_chunk_decode(e->codec, seed, buf, e->stored, e->checksum, dst,
			       e->raw);
}

ssize_t mf_shard_reader_read_chunk(struct mf_shard_reader *r, uint32_t i,
				   void *dst, size_t cap)
{
	if (!r || i >= r->st.chunks || (!dst && cap))
		return -EINVAL;
	if (cap < r->ent[i].raw)
		return -EINVAL;
	int rc = snap_load_chunk(r, i, dst);
	return rc ? rc : (ssize_t)r->ent[i].raw;
}

/* Copies n bytes at offset in of chunk i to dst. */
static int read_part(struct mf_shard_reader *r, uint32_t i, size_t in, size_t n,
		     uint8_t *dst)
{
	if (in == 0 && n == r->ent[i].raw)
		return snap_load_chunk(r, i, dst);
	uint8_t *tmp = snap_thread_scratch(SNAP_SCRATCH_RAW, r->ent[i].raw);
	if (!tmp)
		return -ENOMEM;
	int rc = snap_load_chunk(r, i, tmp);
	if (rc == 0)
		memcpy(dst, tmp + in, n);
	return rc;
}

ssize_t mf_shard_reader_pread(struct mf_shard_reader *r, void *buf, size_t len,
			      uint64_t off)
{
	if (!r || (!buf && len))
		return -EINVAL;
	if (off >= r->st.raw_bytes)
		return 0;
	if (len > r->st.raw_bytes - off)
		len = (size_t)(r->st.raw_bytes - off);
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	size_t done = 0;
	while (done < len) {
		uint64_t pos = off + done;
		uint32_t i = (uint32_t)(pos / r->st.chunk_size);
		size_t in = (size_t)(pos - (uint64_t)i * r->st.chunk_size);
		size_t n = r->ent[i].raw - in;
		n = n < len - done ? n : len - done;
		int rc = read_part(r, i, in, n, (uint8_t *)buf + done);
		if (rc)
			return rc;
		done += n;
	}
	return (ssize_t)done;
}

int mf_shard_reader_verify(struct mf_shard_reader *r, uint32_t *bad)
{
	if (!r)
		return -EINVAL;
	int erc = ends_ready(r);
	if (erc)
		return erc;
	uint8_t *buf = malloc(r->st.chunk_size);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t i = 0; i < r->st.chunks; i++) {
		rc = snap_load_chunk(r, i, buf);
		if (rc == -EBADMSG && bad)
			*bad = i;
		if (rc)
			break;
	}
	free(buf);
	return rc;
}
