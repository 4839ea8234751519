/*
 * fuzz_driver.c - a main() for a fuzz target without libFuzzer: runs
 * LLVMFuzzerTestOneInput once over every file of the target's corpus
 * folder (FUZZ_CORPUS, fixed at build time), then over every file named on
 * the command line (a folder there means each file in it). Any compiler
 * builds it, so every test build replays the corpus, regression inputs
 * included; a crash or a failed FUZZ_CHECK fails the test.
 *
 * Not for: finding new inputs (that is libFuzzer's job, with -Dfuzz=true).
 * Names starting with '.' are skipped (.gitattributes).
 */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#ifndef FUZZ_CORPUS
#error "FUZZ_CORPUS must name the target's corpus folder"
#endif

/* Reads path into a buffer of exactly its size (so that ASan sees any
 * read past the end) and runs the target on it. */
static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "fuzz driver: '%s': %s\n", path,
			strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
		fclose(f);
		return -1;
	}
	size_t len = (size_t)st.st_size;
	uint8_t *buf = malloc(len ? len : 1);
	size_t got = buf ? fread(buf, 1, len, f) : 0;
	fclose(f);
	if (!buf || got != len) {
		fprintf(stderr, "fuzz driver: '%s': short read\n", path);
		free(buf);
		return -1;
	}
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	return 0;
}

static int cmp_names(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip_dot(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* Runs every file of dir, in name order; adds them to *count. */
static int run_dir(const char *dir, size_t *count)
{
	struct dirent **names;
	int n = scandir(dir, &names, skip_dot, cmp_names);
	if (n < 0) {
		fprintf(stderr, "fuzz driver: '%s': %s\n", dir,
			strerror(errno));
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		struct stat st;
		if (rc == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			rc = run_file(path);
			(*count)++;
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

static int run_path(const char *path, size_t *count)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "fuzz driver: '%s': %s\n", path,
			strerror(errno));
		return -1;
	}
	if (S_ISDIR(st.st_mode))
		return run_dir(path, count);
	(*count)++;
	return run_file(path);
}

int main(int argc, char **argv)
{
	size_t count = 0;
	int rc = run_dir(FUZZ_CORPUS, &count);
	for (int i = 1; rc == 0 && i < argc; i++)
		rc = run_path(argv[i], &count);
	if (rc == 0 && count == 0) {
		fprintf(stderr, "fuzz driver: no input in '%s'\n", FUZZ_CORPUS);
		rc = -1;
	}
	printf("%s: %zu inputs replayed%s\n", argv[0], count,
	       rc ? ", then an error" : "");
	return rc ? 1 : 0;
}
