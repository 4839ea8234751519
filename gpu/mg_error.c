/*
 * mg_error.c - libmatgpu's error reporting: the per-thread record of the
 * last CUDA error and error descriptions.
 *
 * Not for: translating cudaError_t values (mg_backend_cuda.c does that, in
 * one function) or printing anything.
 */
#include <errno.h>
#include <string.h>

#include "mg_i.h"

static _Thread_local int last_code;
static _Thread_local const char *last_name;

void mg_set_cuda_error(int code, const char *name)
{
	last_code = code;
	last_name = name;
}

int mg_cuda_last_error(const char **name)
{
	if (name)
		*name = last_code && last_name ? last_name : "cudaSuccess";
	return last_code;
}

void mg_cuda_clear_error(void)
{
	last_code = 0;
	last_name = NULL;
}

const char *mg_strerror(int err)
{
	const char *s;

	if (err < 0)
		err = -err;
	if (err == MG_ECUDA)
		return "CUDA error";
	s = strerrordesc_np(err);
	return s ? s : "Unknown error";
}
