/*
 * util.c - the helpers declared in mf_util.h. Not for: policy; these know
 * nothing about matfs objects.
 */
#include "mf_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct unit {
	const char *name;
	uint64_t mult;
};

/*
 * Reads the decimal number at s and the longest of units right after it (a
 * multiplier of 1 when none matches). Returns -EINVAL when s does not start
 * with a digit, -ERANGE when the number times its unit exceeds max; *value
 * and *rest (the first character after the unit) only on success.
 */
static int parse_number_unit(const char *s, const struct unit *units,
			     uint64_t max, uint64_t *value, const char **rest)
{
	uint64_t v = 0, mult = 1;
	size_t best = 0;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		uint64_t d = (uint64_t)(*s - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	for (const struct unit *u = units; u->name; u++) {
		size_t n = strlen(u->name);

		if (n > best && strncmp(s, u->name, n) == 0) {
			best = n;
			mult = u->mult;
		}
	}
	if (v > max / mult)
		return -ERANGE;
	*value = v * mult;
	*rest = s + best;
	return 0;
}

int mf_parse_size(const char *s, uint64_t *out)
{
	static const struct unit units[] = {
	    {"B", 1},
	    {"K", 1ULL << 10},
	    {"KiB", 1ULL << 10},
	    {"M", 1ULL << 20},
	    {"MiB", 1ULL << 20},
	    {"G", 1ULL << 30},
	    {"GiB", 1ULL << 30},
	    {"T", 1ULL << 40},
	    {"TiB", 1ULL << 40},
	    {"kB", 1000ULL},
	    {"KB", 1000ULL},
	    {"MB", 1000ULL * 1000},
	    {"GB", 1000ULL * 1000 * 1000},
	    {"TB", 1000ULL * 1000 * 1000 * 1000},
	    {NULL, 0},
	};
	uint64_t v;
	const char *rest;
	int rc = parse_number_unit(s, units, UINT64_MAX, &v, &rest);

	if (rc)
		return rc;
	if (*rest)
		return -EINVAL;
	*out = v;
	return 0;
}

int mf_parse_duration(const char *s, int64_t *out)
{
	static const struct unit units[] = {
	    {"s", 1},	  {"m", 60},	 {"h", 3600},
	    {"d", 86400}, {"w", 604800}, {NULL, 0},
	};
	uint64_t total = 0;

	if (!s || !*s)
		return -EINVAL;
	for (const char *p = s; *p;) {
		const char *rest;
		uint64_t v;
		/* the total so far bounds what this term may add */
		int rc = parse_number_unit(
		    p, units, (uint64_t)MF_DURATION_MAX_S - total, &v, &rest);

		if (rc)
			return rc;
		/* a number without its unit: seconds only when it is all */
		if (rest[-1] >= '0' && rest[-1] <= '9' && (p != s || *rest))
			return -EINVAL;
		total += v;
		p = rest;
	}
	*out = (int64_t)total;
	return 0;
}

void mf_format_size(uint64_t n, char *buf, size_t len)
{
	static const char *const names[] = {"B",   "KiB", "MiB",
					    "GiB", "TiB", "PiB"};
	double v = (double)n;
	size_t i = 0;
	while (v >= 1024.0 && i + 1 < sizeof(names) / sizeof(names[0])) {
		v /= 1024.0;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%" PRIu64 " B", n);
	else
		snprintf(buf, len, "%.1f %s", v, names[i]);
}

void mf_hex(const void *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const uint8_t *p = in;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

bool mf_is_hex(const char *s, size_t len)
{
	if (!s || strlen(s) != len)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return true;
}

size_t mf_utf8_len(const unsigned char *s)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, lo = s[0] == 0xe0 ? 0xa0 : 0x80,
		hi = s[0] == 0xed ? 0x9f : 0xbf;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, lo = s[0] == 0xf0 ? 0x90 : 0x80,
		hi = s[0] == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

void mf_utf8_clean(char *s)
{
	for (unsigned char *p = (unsigned char *)s; *p;) {
		size_t n = mf_utf8_len(p);
		if (n == 0)
			*p++ = '?';
		else
			p += n;
	}
}

void mf_text_clean(char *s, bool newlines)
{
	for (unsigned char *p = (unsigned char *)s; *p;) {
		size_t n = *p >= 0x80 ? mf_utf8_len(p) : 1;
		bool c1 = n == 2 && p[0] == 0xc2 && p[1] < 0xa0;
		if (n == 0 || c1) {
			*p++ = '?';
			if (c1)
				*p++ = '?';
		} else if (n == 1 &&
			   ((*p < 0x20 && *p != '\t' &&
			     !(newlines && *p == '\n')) ||
			    *p == 0x7f)) {
			*p++ = '?';
		} else {
			p += n;
		}
	}
}

void mf_thread_end(void)
{
	OPENSSL_thread_stop();
}

int mf_random_hex(size_t nbytes, char *out)
{
	uint8_t buf[64];
	if (nbytes > sizeof(buf))
		return -EINVAL;
	if (RAND_bytes(buf, (int)nbytes) != 1)
		return -EIO;
	mf_hex(buf, nbytes, out);
	return 0;
}

int mf_sha256_init(struct mf_sha256 *h)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return -EIO;
	}
	h->ctx = ctx;
	return 0;
}

int mf_sha256_update(struct mf_sha256 *h, const void *data, size_t len)
{
	return EVP_DigestUpdate(h->ctx, data, len) == 1 ? 0 : -EIO;
}

int mf_sha256_final(struct mf_sha256 *h, uint8_t digest[32])
{
	unsigned int n = 0;
	int ok = EVP_DigestFinal_ex(h->ctx, digest, &n) == 1 && n == 32;
	mf_sha256_release(h);
	return ok ? 0 : -EIO;
}

void mf_sha256_release(struct mf_sha256 *h)
{
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
}

int mf_write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t mf_pread_full(int fd, void *buf, size_t len, off_t off)
{
	char *p = buf;
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(fd, p + done, len - done, off + (off_t)done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

#define BUF_HUGE ((size_t)2 << 20)

/*
 * Mappings freed last, kept for the next mf_buf_alloc of the same size:
 * their pages are in already, where a new mapping's first touch of each
 * page costs a fault and zeroing (a writer's chunk buffers, per shard,
 * are a tenth of the bytes it stores). At most KEEP_BYTES in KEEP_N; a
 * child of a fork, which has none of them, forgets them.
 */
#define KEEP_N 32
#define KEEP_BYTES ((size_t)64 << 20)
static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void *p;
	size_t cap;
} keep[KEEP_N];
static size_t keep_n, keep_bytes;
static pthread_once_t keep_once = PTHREAD_ONCE_INIT;

static void keep_prepare(void)
{
	pthread_mutex_lock(&keep_lock);
}

static void keep_parent(void)
{
	pthread_mutex_unlock(&keep_lock);
}

static void keep_child(void)
{
	keep_n = 0;
	keep_bytes = 0;
	pthread_mutex_unlock(&keep_lock);
}

static void keep_init(void)
{
	(void)pthread_atfork(keep_prepare, keep_parent, keep_child);
}

/* A kept mapping of exactly n bytes aligned to align, or NULL. */
static void *keep_take(size_t n, size_t align)
{
	void *p = NULL;
	pthread_mutex_lock(&keep_lock);
	for (size_t i = keep_n; i-- > 0;) {
		if (keep[i].cap == n &&
		    ((uintptr_t)keep[i].p & (align - 1)) == 0) {
			p = keep[i].p;
			keep[i] = keep[--keep_n];
			keep_bytes -= n;
			break;
		}
	}
	pthread_mutex_unlock(&keep_lock);
	return p;
}

/* Keeps p when there is room; false otherwise. */
static bool keep_put(void *p, size_t cap)
{
	bool kept = false;
	(void)pthread_once(&keep_once, keep_init);
	pthread_mutex_lock(&keep_lock);
	if (keep_n < KEEP_N && cap <= KEEP_BYTES - keep_bytes) {
		keep[keep_n].p = p;
		keep[keep_n].cap = cap;
		keep_n++;
		keep_bytes += cap;
		kept = true;
	}
	pthread_mutex_unlock(&keep_lock);
	return kept;
}

void *mf_buf_alloc(size_t len, size_t *cap)
{
	if (len < MF_BUF_MAP) {
		*cap = len ? len : 1;
		return malloc(*cap);
	}
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t align = len >= BUF_HUGE ? BUF_HUGE : page;
	if (len > SIZE_MAX - 2 * align)
		return NULL;
	size_t n = (len + align - 1) & ~(align - 1);
	uint8_t *kept = keep_take(n, align);
	if (kept) {
		*cap = n;
		return kept;
	}
	size_t over = n + (align > page ? align : 0);
	uint8_t *p = mmap(NULL, over, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	/* aligned to `align`: the head and the tail of the extra go */
	size_t head = (size_t)(-(uintptr_t)p & (align - 1));
	if (head)
		(void)munmap(p, head);
	if (over - head > n)
		(void)munmap(p + head + n, over - head - n);
	p += head;
	if (align > page)
		(void)madvise(p, n, MADV_HUGEPAGE);
	if (madvise(p, n, MADV_DONTFORK) != 0) {
		(void)munmap(p, n);
		return NULL;
	}
	*cap = n;
	return p;
}

void mf_buf_free(void *p, size_t cap)
{
	if (!p)
		return;
	if (cap < MF_BUF_MAP)
		free(p);
	else if (!keep_put(p, cap))
		(void)munmap(p, cap);
}

int mf_fsync_dir(int dirfd)
{
	return fsync(dirfd) == 0 ? 0 : -errno;
}

int64_t mf_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec;
}

uint64_t mf_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

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

static _Thread_local uint64_t deadline_ns;

void mf_deadline_set(uint64_t mono_ns)
{
	deadline_ns = mono_ns;
}

bool mf_deadline_passed(void)
{
	return deadline_ns != 0 && mf_mono_ns() >= deadline_ns;
}

void mf_hostname(char *buf, size_t len)
{
	if (gethostname(buf, len) != 0 || !buf[0])
		snprintf(buf, len, "unknown");
	buf[len - 1] = '\0';
}

uint64_t mf_proc_start_time(pid_t pid)
{
	char path[64], data[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = mf_pread_full(fd, data, sizeof(data) - 1, 0);
	close(fd);
	if (n <= 0)
		return 0;
	data[n] = '\0';
	/* comm may hold spaces and parentheses: fields follow the last ')' */
	char *p = strrchr(data, ')');
	if (!p)
		return 0;
	p++;
	/* after ')' come fields 3..; starttime is field 22 */
	for (int field = 3; field < 22 && p; field++) {
		p = strchr(p + 1, ' ');
	}
	if (!p)
		return 0;
	return strtoull(p + 1, NULL, 10);
}

int mf_parse_codec(const char *s, enum mf_codec *codec, int *level)
{
	if (!s)
		return -EINVAL;
	if (strcmp(s, "none") == 0) {
		*codec = MF_CODEC_NONE;
		*level = 0;
		return 0;
	}
	if (strcmp(s, "snappy") == 0) {
		*codec = MF_CODEC_SNAPPY;
		*level = 0;
		return 0;
	}
	if (strcmp(s, "zstd") == 0) {
		*codec = MF_CODEC_ZSTD;
		*level = MF_ZSTD_DEFAULT_LEVEL;
		return 0;
	}
	if (strncmp(s, "zstd:", 5) == 0) {
		const char *d = s + 5;
		int v = 0;
		if (!*d || strlen(d) > 2)
			return -EINVAL;
		for (; *d; d++) {
			if (*d < '0' || *d > '9')
				return -EINVAL;
			v = v * 10 + (*d - '0');
		}
		if (v < 1 || v > 19)
			return -EINVAL;
		*codec = MF_CODEC_ZSTD;
		*level = v;
		return 0;
	}
	return -EINVAL;
}

void mf_format_codec(enum mf_codec codec, int level, char *buf, size_t len)
{
	switch (codec) {
	case MF_CODEC_ZSTD:
		snprintf(buf, len, "zstd:%d", level);
		break;
	case MF_CODEC_SNAPPY:
		snprintf(buf, len, "snappy");
		break;
	default:
		snprintf(buf, len, "none");
		break;
	}
}

const char *mf_framing_name(enum mf_framing f)
{
	static const char *const names[] = {"none",	"fixed", "lines",
					    "tfrecord", "tar",	 "index"};
	return (unsigned)f <= MF_FRAMING_MAX ? names[f] : "?";
}

void mf_format_records(const struct mf_records *r, char *buf, size_t len)
{
	if (r->framing != MF_FRAMING_FIXED)
		snprintf(buf, len, "%s", mf_framing_name(r->framing));
	else if (r->drop_tail)
		snprintf(buf, len, "{size: %llu, tail: drop}",
			 (unsigned long long)r->size);
	else
		snprintf(buf, len, "%llu", (unsigned long long)r->size);
}

int mf_boot_id(char out[MF_BOOT_ID_LEN + 1])
{
	char buf[MF_BOOT_ID_LEN + 2];
	out[0] = '\0';
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = mf_pread_full(fd, buf, sizeof(buf), 0);
	close(fd);
	if (n < 0)
		return (int)n;
	/* 36 characters and a newline */
	if (n < MF_BOOT_ID_LEN ||
	    (n > MF_BOOT_ID_LEN && buf[MF_BOOT_ID_LEN] != '\n'))
		return -EBADMSG;
	for (int i = 0; i < MF_BOOT_ID_LEN; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		char c = buf[i];
		if (dash ? c != '-'
			 : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return -EBADMSG;
	}
	memcpy(out, buf, MF_BOOT_ID_LEN);
	out[MF_BOOT_ID_LEN] = '\0';
	return 0;
}

uint64_t mf_pid_ns(void)
{
	struct stat sb;
	if (stat("/proc/self/ns/pid", &sb) != 0)
		return 0;
	return (uint64_t)sb.st_ino;
}

bool mf_process_alive(pid_t pid, uint64_t start_time)
{
	if (pid <= 0)
		return false;
	if (kill(pid, 0) != 0 && errno != EPERM)
		return false;
	if (start_time == 0)
		return true;
	return mf_proc_start_time(pid) == start_time;
}

int mf_mutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int rc = pthread_mutexattr_init(&a);
	if (rc)
		return -rc;
#ifndef NDEBUG
	rc = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
#endif
	if (rc == 0)
		rc = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -rc;
}

int mf_strv_push(struct mf_strv *a, char *s)
{
	if (!s)
		return -ENOMEM;
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 16;
		char **v = realloc(a->v, cap * sizeof(*v));
		if (!v) {
			free(s);
			return -ENOMEM;
		}
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = s;
	return 0;
}

void mf_strv_release(struct mf_strv *a)
{
	mf_strv_free(a->v, a->n);
	*a = (struct mf_strv){0};
}

void mf_strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}
