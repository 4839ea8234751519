/*
 * util_map.c - read-only mappings of files, and copies out of them that
 * survive the file failing under them. A page of a mapping that cannot
 * be read (an I/O error, a file cut short by someone else) raises SIGBUS
 * where pread would have returned an error: mf_map_guard turns that
 * signal, on the thread inside it, into -EIO. A SIGBUS anywhere else
 * keeps its default action.
 *
 * Not for: buffers (util_buf.c), reads and writes (util_io.c).
 */
#include "mf_util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static __thread sigjmp_buf *guard_jb;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static bool guard_ok;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
	(void)ctx;
	sigjmp_buf *jb = guard_jb;
	if (jb && si->si_code > 0) /* a fault, not a kill(2) */
		siglongjmp(*jb, 1);
	/* not ours: the default action, at the same instruction again for
	 * a fault, at once for a signal sent */
	signal(sig, SIG_DFL);
	if (si->si_code <= 0)
		raise(sig);
}

static void guard_install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	/* not blocked in the handler: siglongjmp leaves the mask as it is,
	 * so a second fault later is caught as the first */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	guard_ok = sigaction(SIGBUS, &sa, NULL) == 0;
}

bool mf_map_usable(void)
{
	(void)pthread_once(&guard_once, guard_install);
	return guard_ok;
}

int mf_map_guard(int (*fn)(void *), void *arg)
{
	if (!mf_map_usable())
		return -ENOTSUP;
	sigjmp_buf jb;
	sigjmp_buf *volatile prev = guard_jb;
	if (sigsetjmp(jb, 0)) {
		guard_jb = prev;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		return -EIO;
	}
	guard_jb = &jb;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	int rc = fn(arg);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	guard_jb = prev;
	return rc;
}

const void *mf_map_file(int fd, uint64_t off, size_t len, void **base,
			size_t *maplen)
{
	if (!mf_map_usable() || len == 0) {
		errno = ENOTSUP;
		return NULL;
	}
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t start = off & ~(page - 1), delta = off - start;
	if (len > SIZE_MAX - delta) {
		errno = EOVERFLOW;
		return NULL;
	}
	size_t n = (size_t)delta + len;
	/* its reads sent at once, in large requests: a populate alone
	 * faults the range in read-around steps, one after the other */
	(void)posix_fadvise(fd, (off_t)start, (off_t)n, POSIX_FADV_WILLNEED);
	void *p = mmap(NULL, n, PROT_READ, MAP_SHARED | MAP_POPULATE, fd,
		       (off_t)start);
	if (p == MAP_FAILED)
		return NULL;
	/* a stage's fork copies no page table of it */
	(void)madvise(p, n, MADV_DONTFORK);
	*base = p;
	*maplen = n;
	return (const uint8_t *)p + delta;
}

void mf_map_free(void *base, size_t maplen)
{
	if (base)
		(void)munmap(base, maplen);
}
