/*
 * job_helper.c - a stage program for the job tests:
 *
 *   job_helper gen BYTES          writes BYTES of jt_gen_byte to stdout
 *   job_helper spew BYTES [CODE]  writes BYTES of jt_err_byte to stderr,
 *                                 then "done\n" to stdout, exits CODE
 *   job_helper fds                prints its open descriptors: "0 1 2"
 *   job_helper sigs               prints "ign=HEX blk=HEX" from
 *                                 /proc/self/status (ignored, blocked)
 *   job_helper pipes              prints "IN OUT": the capacity of the
 *                                 pipes on stdin and stdout in bytes
 *
 * Not for: anything but tests/job.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job_pattern.h"

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int gen(uint64_t n, int fd, int err)
{
	static char buf[65536];
	uint64_t off = 0;

	while (off < n) {
		size_t k,
		    len = n - off < sizeof buf ? (size_t)(n - off) : sizeof buf;

		for (k = 0; k < len; k++)
			buf[k] = err ? jt_err_byte(off + k)
				     : (char)jt_gen_byte(off + k);
		if (write_all(fd, buf, len) < 0)
			return 1;
		off += len;
	}
	return 0;
}

static int list_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int seen[64], n = 0;

	if (!d)
		return 1;
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);

		if (e->d_name[0] != '.' && fd != dirfd(d) && n < 64)
			seen[n++] = fd;
	}
	closedir(d);
	for (int i = 0; i < n; i++)
		for (int k = i + 1; k < n; k++)
			if (seen[k] < seen[i]) {
				int tmp = seen[i];

				seen[i] = seen[k];
				seen[k] = tmp;
			}
	for (int i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", seen[i]);
	printf("\n");
	return 0;
}

static int sigs(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256], ign[64] = "?", blk[64] = "?";

	if (!f)
		return 1;
	while (fgets(line, sizeof line, f)) {
		if (!strncmp(line, "SigIgn:\t", 8))
			sscanf(line + 8, "%63s", ign);
		if (!strncmp(line, "SigBlk:\t", 8))
			sscanf(line + 8, "%63s", blk);
	}
	fclose(f);
	printf("ign=%s blk=%s\n", ign, blk);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "gen"))
		return gen(strtoull(argv[2], NULL, 10), 1, 0);
	if (argc >= 3 && !strcmp(argv[1], "spew")) {
		if (gen(strtoull(argv[2], NULL, 10), 2, 1))
			return 1;
		if (write_all(1, "done\n", 5) < 0)
			return 1;
		return argc >= 4 ? atoi(argv[3]) : 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "fds"))
		return list_fds();
	if (argc >= 2 && !strcmp(argv[1], "sigs"))
		return sigs();
	if (argc >= 2 && !strcmp(argv[1], "pipes")) {
		printf("%d %d\n", fcntl(0, F_GETPIPE_SZ),
		       fcntl(1, F_GETPIPE_SZ));
		return 0;
	}
	fprintf(stderr, "usage: job_helper gen|spew|fds|sigs|pipes ...\n");
	return 2;
}
