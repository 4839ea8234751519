/*
 * util_buf.c - large buffers kept out of forks (mf_buf_alloc): mappings
 * with MADV_DONTFORK, and the last ones freed kept for the next of the
 * same size, forgotten by a forked child (pthread_atfork). Not for:
 * reads and writes (util_io.c).
 */
#include "mf_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
