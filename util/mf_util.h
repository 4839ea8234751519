/*
 * mf_util.h - small helpers shared by every matfs module: sizes and
 * durations as users write them, hex, SHA-256 and random ids, full reads and
 * writes, durable renames, a thread's filesystem credentials, mutexes and
 * string vectors.
 *
 * Not for: anything that knows about specs, stores or FUSE. Nothing here
 * prints or exits; every fallible function returns 0 or a negative errno.
 *
 * One header for one small module; its files are named by concern:
 * util_parse.c (sizes, durations, codec and framing names), util_text.c
 * (hex, UTF-8, string vectors), util_crypto.c (OpenSSL: SHA-256, random
 * ids),
 * util_io.c (full reads and writes), util_buf.c (buffers kept out of
 * forks), util_time.c (clocks, a thread's deadline), util_corrupt.c
 * (MF_CORRUPT), util_proc.c (host, boot id, process liveness, mutexes),
 * fscreds.c (a thread's filesystem credentials).
 */
#ifndef MF_UTIL_H
#define MF_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MF_FP_HEX_LEN 64 /* SHA-256 fingerprint, lowercase hex */
#define MF_RUN_ID_HEX_LEN 32 /* 128-bit random run id, lowercase hex */

/*
 * Parses a byte size: a decimal number with an optional unit, B, K/KiB,
 * M/MiB, G/GiB, T/TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000).
 * "4MiB" -> 4194304. No sign, fraction or whitespace; units are
 * case-sensitive. Returns 0, -EINVAL for bad syntax or unit, -ERANGE when the
 * value exceeds UINT64_MAX. *out is written only on success.
 */
int mf_parse_size(const char *s, uint64_t *out);

/*
 * The longest duration mf_parse_duration accepts, in seconds (about 292
 * years): the largest whose count of nanoseconds fits in an int64_t, so
 * that converting a parsed duration to ns, us or ms never overflows.
 */
#define MF_DURATION_MAX_S (INT64_MAX / 1000000000)

/*
 * Parses a duration into seconds: a decimal number followed by s, m, h, d or
 * w, or several of them ("1h30m"); a bare number means seconds. No sign,
 * fraction or whitespace. Returns 0, -EINVAL for bad syntax or unit, or
 * -ERANGE when the total exceeds MF_DURATION_MAX_S; *out is written only on
 * success.
 */
int mf_parse_duration(const char *s, int64_t *out);

/* Formats n bytes into buf as "1.5 GiB"; always NUL-terminates. */
void mf_format_size(uint64_t n, char *buf, size_t len);

/* Chunk codecs, shared by the spec parser and the chunk store. */
enum mf_codec {
	MF_CODEC_NONE = 0,
	MF_CODEC_ZSTD = 1,
	MF_CODEC_SNAPPY = 2,
};
#define MF_ZSTD_DEFAULT_LEVEL 3

/*
 * Parses "zstd", "zstd:LEVEL" (1-19), "snappy" or "none". Returns 0 or
 * -EINVAL; outputs are written only on success (level is 0 but for zstd).
 */
int mf_parse_codec(const char *s, enum mf_codec *codec, int *level);

/* "zstd:3", "snappy", "none" into buf; always NUL-terminates. */
void mf_format_codec(enum mf_codec codec, int level, char *buf, size_t len);

/* Record framings (docs/spec.md, "records"), shared by the spec parser
 * and the chunk store, whose shard files record them (docs/format.md). */
enum mf_framing {
	MF_FRAMING_NONE = 0, /* no `records`: the shard is only bytes */
	MF_FRAMING_FIXED = 1, /* records of `size` bytes each */
	MF_FRAMING_LINES = 2, /* each ends with '\n' (the last may not) */
	MF_FRAMING_TFRECORD = 3, /* TFRecord frames, CRCs checked */
	MF_FRAMING_TAR = 4, /* WebDataset samples of a tar archive */
	MF_FRAMING_INDEX = 5, /* ends written by the last stage to fd 3 */
};
#define MF_FRAMING_MAX MF_FRAMING_INDEX

/* A spec's `records`. */
struct mf_records {
	enum mf_framing framing;
	uint64_t size; /* fixed: bytes per record, >= 1; else 0 */
	bool drop_tail; /* fixed: a remainder that is not a whole record is
			   left out of the records (tail: drop) instead of
			   failing the shard (tail: error, the default) */
};

/* "none", "fixed", "lines", "tfrecord", "tar", "index"; "?" otherwise. */
const char *mf_framing_name(enum mf_framing f);
/* r as a spec writes it: "2048", "{size: 2048, tail: drop}", "lines",
 * "none"; always NUL-terminates. */
void mf_format_records(const struct mf_records *r, char *buf, size_t len);

/* True when the process pid exists and, if start_time is not 0, started at
 * that time (mf_proc_start_time), so a reused pid is not taken for alive. */
bool mf_process_alive(pid_t pid, uint64_t start_time);

/* Lowercase hex of n bytes into out, which holds 2n+1 bytes. */
void mf_hex(const void *in, size_t n, char *out);

/* True when s is exactly len lowercase hex digits. */
bool mf_is_hex(const char *s, size_t len);

/* The length (1-4) of the valid UTF-8 sequence at s, or 0 when it is not
 * one (RFC 3629: no overlong form, no surrogate, nothing past U+10FFFF;
 * what PostgreSQL and terminals accept). s[0] == 0 is a sequence of 1. */
size_t mf_utf8_len(const unsigned char *s);
/* Replaces in place every byte of s that starts no valid UTF-8 sequence
 * with '?'. */
void mf_utf8_clean(char *s);
/* Makes s safe to show on a terminal, in place: every control (C0 but tab
 * and, with newlines, '\n'; DEL; C1, which terminals obey as escapes) and
 * every byte that starts no valid UTF-8 sequence becomes '?', so text a
 * stage wrote can neither forge a line nor send an escape. */
void mf_text_clean(char *s, bool newlines);

/* Frees what OpenSSL keeps for the calling thread (its random generator
 * state, ...) now rather than in the thread's exit: a detached thread
 * calls it before it tells anyone it is done, so that a process that
 * exits once all are done leaves nothing of theirs behind. */
void mf_thread_end(void);

/* Fills out (2*nbytes+1 bytes) with nbytes of OpenSSL randomness as hex.
 * Returns 0 or -EIO when the generator fails. */
int mf_random_hex(size_t nbytes, char *out);

/* Incremental SHA-256 (OpenSSL EVP). Init before use, final exactly once;
 * final frees the context even on failure. */
struct mf_sha256 {
	void *ctx; /* EVP_MD_CTX, owned */
};
int mf_sha256_init(struct mf_sha256 *h);
int mf_sha256_update(struct mf_sha256 *h, const void *data, size_t len);
int mf_sha256_final(struct mf_sha256 *h, uint8_t digest[32]);
/* Discards a context that will not be finalized; NULL ctx is fine. */
void mf_sha256_release(struct mf_sha256 *h);

/* write(2) / pread(2) until every byte went, retrying EINTR.
 * Return 0 or -errno; mf_pread_full returns the bytes read (short only at
 * end of file) or -errno. */
int mf_write_full(int fd, const void *buf, size_t len);
ssize_t mf_pread_full(int fd, void *buf, size_t len, off_t off);

/*
 * A buffer for bytes a process that forks writes over and over (chunks,
 * stage output): from MF_BUF_MAP bytes up, its own mapping, left out of
 * every child (MADV_DONTFORK) and backed by huge pages from 2 MiB (where
 * the kernel has them). A fork otherwise write-protects it, and while
 * the child lives every first write to each of its pages afterwards
 * faults and copies the page. Mappings freed are kept (64 MiB at most)
 * for the next of the same size, whose pages are then in already.
 * Smaller ones come from malloc. *cap gets
 * the bytes usable, at least len; mf_buf_free needs it back. NULL when
 * out of memory. A child of a fork must not touch these buffers, nor use
 * an object that holds one (the snapshot module's per-thread scratch
 * forgets them in a child by itself).
 */
#define MF_BUF_MAP ((size_t)256 << 10)
void *mf_buf_alloc(size_t len, size_t *cap);
void mf_buf_free(void *p, size_t cap);

/* fsync(2) of a directory descriptor. */
int mf_fsync_dir(int dirfd);

/* Seconds and nanoseconds since the epoch (CLOCK_REALTIME) and a monotonic
 * clock in nanoseconds. mf_now_s adds MF_TEST_CLOCK_SHIFT_S (seconds, read
 * from the environment once), a test hook for a host whose clock is wrong;
 * the monotonic clock is never shifted. */
int64_t mf_now_s(void);
uint64_t mf_mono_ns(void);

/* The calling thread's deadline for long reads, on mf_mono_ns's clock (0:
 * none, the default): code that reads files without bound (hashing a
 * spec's deps and inputs) stops with -ETIMEDOUT between two reads once
 * mf_deadline_passed says so. A registration sets it to its time limit. */
void mf_deadline_set(uint64_t mono_ns);
bool mf_deadline_passed(void);

/*
 * Corruption, reported where it is found. A check that finds stored bytes
 * or records malformed returns MF_CORRUPT("short reason"): -EBADMSG, after
 * remembering for the calling thread the reason and the file:line of the
 * check (SQLite's SQLITE_CORRUPT_BKPT habit). Whoever turns the -EBADMSG
 * into a message adds mf_corrupt_reason(); a debug log adds
 * mf_corrupt_where(). The reason must be a string literal (it is kept, not
 * copied). Both return "" when this thread has found none since the last
 * mf_corrupt_clear().
 */
#define MF_CORRUPT(why) mf_corrupt_at(__FILE__, __LINE__, "" why)
int mf_corrupt_at(const char *file, int line, const char *why);
const char *mf_corrupt_reason(void);
const char *mf_corrupt_where(void);
void mf_corrupt_clear(void);
/* A report carried from the thread that found it to the one that makes
 * the message (a decompression worker to the reader): save it where the
 * -EBADMSG is stored, restore it where the -EBADMSG is taken. */
struct mf_corrupt_note {
	const char *file, *why; /* NULL why: none */
	int line;
};
void mf_corrupt_save(struct mf_corrupt_note *n);
int mf_corrupt_restore(const struct mf_corrupt_note *n); /* -EBADMSG */

/* This host's name, truncated to len-1 bytes; "unknown" on failure. */
void mf_hostname(char *buf, size_t len);

/* Start time of process pid in clock ticks since boot (field 22 of
 * /proc/PID/stat), or 0 when the process does not exist. Together with the
 * pid it names one process even after the pid is reused. */
uint64_t mf_proc_start_time(pid_t pid);

/* A pid names a process only within one pid namespace of one boot of one
 * kernel: two containers on a host may share a hostname and still not see
 * each other's pids. These say where this process's pids mean something. */
#define MF_BOOT_ID_LEN 36 /* a UUID: 8-4-4-4-12 lowercase hex digits */
/* The kernel's boot id (/proc/sys/kernel/random/boot_id), new at every
 * boot, into out; "" (and -errno) when it cannot be read or is malformed. */
int mf_boot_id(char out[MF_BOOT_ID_LEN + 1]);
/* The inode number of this process's pid namespace (/proc/self/ns/pid),
 * fixed for the life of the process; 0 when /proc does not tell. */
uint64_t mf_pid_ns(void);

/* ---- mutexes and string vectors ---- */

/*
 * Initialises *m as every matfs mutex is made (STYLE.md): error-checking
 * (PTHREAD_MUTEX_ERRORCHECK) unless built with NDEBUG, so that a thread
 * locking a mutex it holds gets EDEADLK and one unlocking a mutex it does
 * not hold gets EPERM instead of undefined behaviour. Returns 0 or -errno
 * from pthread_mutexattr_init or pthread_mutex_init; destroy *m with
 * pthread_mutex_destroy.
 */
int mf_mutex_init(pthread_mutex_t *m);
/*
 * Whether the calling thread holds m (any kind of mutex), for asserts of
 * what a "caller holds" comment says: assert(mf_mutex_held(&e->lock)).
 * It reads the owner glibc records in m (one gettid call); without
 * glibc it cannot tell and answers true.
 */
bool mf_mutex_held(const pthread_mutex_t *m);
/* The same for a mutex with static storage, which no code initialises. */
#ifdef NDEBUG
#define MF_MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER
#else
#define MF_MUTEX_INITIALIZER PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP
#endif

/*
 * A growing array of strings (git's strvec): v[0] to v[n-1], each
 * malloc'd and owned by the vector. Start from {0}; hand the strings out
 * by taking v and n (then free them with mf_strv_free) or release them
 * all with mf_strv_release. Not thread-safe: one owner at a time.
 */
struct mf_strv {
	char **v; /* owned, and each v[i] */
	size_t n, cap;
};

/* Appends s, which the vector owns from now on, also on failure (then it
 * is freed): s NULL (a failed strdup) is -ENOMEM, so that
 * mf_strv_push(&a, strdup(x)) needs no check of its own. Returns 0 or
 * -ENOMEM, a unchanged on failure. */
int mf_strv_push(struct mf_strv *a, char *s);
/* Frees every string and the array; a is empty ({0}) again. */
void mf_strv_release(struct mf_strv *a);
/* Frees the n strings of v and v itself: an array a vector (or anything
 * built the same way) handed out. NULL v does nothing. */
void mf_strv_free(char **v, size_t n);

/* ---- examining files as another user (fscreds.c) ---- */

/* A user as the kernel checks file access: uid, gid and supplementary
 * groups. */
struct mf_user {
	uid_t uid;
	gid_t gid;
	gid_t *groups; /* owned */
	size_t n_groups;
};

/*
 * Fills *u with uid, gid and the groups of uid's passwd name
 * (getgrouplist, gid included); just gid when uid has no passwd entry.
 * Does NSS lookups: call it before switching. Returns 0 or -ENOMEM;
 * release with mf_user_release (NULL does nothing).
 */
int mf_user_init(struct mf_user *u, uid_t uid, gid_t gid);
void mf_user_release(struct mf_user *u);

/* What mf_fscreds_enter changed, to put back. */
struct mf_fscreds {
	bool switched;
	uid_t fsuid;
	gid_t fsgid;
	gid_t *groups; /* owned */
	size_t n_groups;
};

/*
 * Makes the calling thread, and no other, open, stat, list and read files
 * with u's rights: its filesystem uid and gid and its supplementary
 * groups become u's (raw setfsuid, setfsgid and setgroups system calls),
 * which drops the capabilities that bypass file permissions. A process
 * that is not root (euid != 0) needs no switch and gets none, nor does
 * u->uid 0. Returns 0 (*saved filled) or -errno with nothing changed.
 * Every successful call is paired with mf_fscreds_leave on the same
 * thread before that thread does anything for another user; a thread
 * holding descriptors opened meanwhile keeps them.
 */
int mf_fscreds_enter(struct mf_fscreds *saved, const struct mf_user *u);

/* Puts back what mf_fscreds_enter changed (nothing when it switched
 * nothing) and frees what *saved holds; errno is kept. Aborts the process
 * if the kernel refuses: a thread must never go on with the wrong rights. */
void mf_fscreds_leave(struct mf_fscreds *saved);

#endif
