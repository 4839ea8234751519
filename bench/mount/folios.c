/*
 * folios.c - which folio sizes hold a file's pages in the page cache:
 * `folios FILE...` maps each file, touches every page (a page not cached
 * is read in), and looks each page's frame up in /proc/self/pagemap and
 * /proc/kpageflags (root only), printing per file the count of folios of
 * each order: "folios FILE order0=N order4=M ...". bench/mount/reread.sh
 * uses it to show what the kernel gives a FUSE mount's page cache against
 * ext4's.
 *
 * Not for: anything but a look; the kernel's flags are its own ABI
 * (Documentation/admin-guide/mm/pagemap.rst: COMPOUND_HEAD 15, _TAIL 16).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define KPF_HEAD 15
#define KPF_TAIL 16
#define ORDERS 20

/* Folio orders of path's pages into count[]; 0 or -errno. */
static int scan(const char *path, int pm, int kf, long count[ORDERS])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_size == 0) {
		close(fd);
		return -EINVAL;
	}
	size_t len = (size_t)st.st_size, pages = (len + 4095) / 4096;
	volatile const uint8_t *p =
	    mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	uint64_t *ent = malloc(pages * sizeof(*ent));
	if (p == MAP_FAILED || !ent) {
		free(ent);
		return -ENOMEM;
	}
	unsigned sum = 0;
	for (size_t i = 0; i < pages; i++)
		sum += p[i * 4096];
	(void)sum;
	int rc = 0;
	off_t at = (off_t)((uintptr_t)p / 4096 * sizeof(*ent));
	if (pread(pm, ent, pages * sizeof(*ent), at) !=
	    (ssize_t)(pages * sizeof(*ent)))
		rc = -EIO;
	long run = 0;
	for (size_t i = 0; rc == 0 && i <= pages; i++) {
		uint64_t fl = 0;
		bool present = i < pages && (ent[i] >> 63);
		if (present) {
			uint64_t pfn = ent[i] & ((1ULL << 55) - 1);
			if (pread(kf, &fl, sizeof(fl), (off_t)(pfn * 8)) !=
			    (ssize_t)sizeof(fl))
				rc = -EIO;
		}
		if (present && (fl >> KPF_TAIL & 1)) {
			run++;
			continue;
		}
		if (run) { /* a folio of `run` pages ended */
			int o = 63 - __builtin_clzl((unsigned long)run);
			count[o < ORDERS ? o : ORDERS - 1]++;
		}
		run = present && (fl >> KPF_HEAD & 1) ? 1 : 0;
		if (present && !run)
			count[0]++;
	}
	munmap((void *)p, len);
	free(ent);
	return rc;
}

int main(int argc, char **argv)
{
	int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	int kf = open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);
	if (argc < 2 || pm < 0 || kf < 0) {
		fprintf(stderr,
			"usage: folios FILE... (root: /proc/kpageflags)\n");
		return 2;
	}
	int status = 0;
	for (int a = 1; a < argc; a++) {
		long count[ORDERS] = {0};
		int rc = scan(argv[a], pm, kf, count);
		if (rc) {
			fprintf(stderr, "folios: '%s': %s\n", argv[a],
				strerror(-rc));
			status = 1;
			continue;
		}
		printf("folios %s", argv[a]);
		for (int o = 0; o < ORDERS; o++)
			if (count[o])
				printf(" order%d=%ld", o, count[o]);
		printf("\n");
	}
	return status;
}
