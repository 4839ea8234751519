/*
 * job_fixture.h - helpers shared by the job tests: a temporary spec folder
 * with a struct mf_spec built by hand (no YAML), input files, stages, a
 * run-to-the-end helper, and checks that no descriptor or child is left.
 *
 * Not for: production code; these helpers fail the running cmocka test.
 */
#ifndef JOB_FIXTURE_H
#define JOB_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mf_pipeline.h"

/* The helper program built beside the tests (meson passes its path). */
#ifndef JT_HELPER
#error "JT_HELPER must name the job_helper executable"
#endif

struct jt {
	char dir[64]; /* the spec folder, under /tmp */
	struct mf_spec spec;
	int fds_before; /* open descriptors when the test started */
};

/* cmocka setup/teardown; *state is a struct jt with one shard, no input
 * and no stage. */
int jt_setup(void **state);
int jt_teardown(void **state);

/* Writes the file name (relative to the spec folder) and appends it to the
 * spec's inputs. Returns its absolute path (owned by the spec). */
const char *jt_input(struct jt *t, const char *name, const char *data,
		     size_t len);

/* Writes a file in the spec folder with mode. */
void jt_file(struct jt *t, const char *name, const char *data, mode_t mode);

/* Appends a stage: argv given as strings, ended by NULL. */
void jt_stage(struct jt *t, int64_t timeout_s, const char *arg0, ...);

/* Everything one run produced. */
struct jt_run {
	int start_rc;
	char *err; /* from mf_job_start */
	char *out; /* all of stdout, NUL-terminated */
	size_t len;
	ssize_t read_rc; /* the last mf_job_read: 0 at the end, or -errno */
	int finish_rc;
	struct mf_job_result res;
};

/* Starts shard, reads everything in reads of `chunk` bytes, finishes. */
void jt_run(struct jt *t, uint32_t shard, size_t chunk, struct jt_run *r);
void jt_run_release(struct jt_run *r);

/* Open descriptors of this process. */
int jt_count_fds(void);

/* Asserts no descriptor leaked since setup and no child is left. */
void jt_assert_clean(struct jt *t);

/* Reads a whole small file into a NUL-terminated malloc'd string. */
char *jt_slurp(const char *path);

/* True when pid is alive and not a zombie, waiting up to wait_ms for it to
 * go (an orphan is reaped by init asynchronously). */
int jt_pid_running(pid_t pid, int wait_ms);

/* Monotonic milliseconds. */
uint64_t jt_ms(void);

#endif
