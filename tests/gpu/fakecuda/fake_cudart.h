/*
 * fake_cudart.h - the hooks of the fake CUDA runtime (fake_cudart.c) that
 * tests reach with dlsym(RTLD_DEFAULT, name): they are linked against the
 * real libcudart, which the fake replaces through LD_PRELOAD.
 *
 * Not for: the library under test.
 */
#ifndef FAKE_CUDART_H
#define FAKE_CUDART_H

#include <cuda_runtime_api.h>

/* Primary contexts created on device so far. */
int fake_cudart_contexts(int device);
/* cudaFree calls so far. */
long fake_cudart_frees(void);
/* The next call of the runtime function named call fails with err; call
 * "async": the next copy fails on its stream and err sticks to the device. */
void fake_cudart_fail(const char *call, cudaError_t err);
/* Every later copy takes us microseconds (0: the default again). */
void fake_cudart_copy_delay(unsigned us);
/* Queues on stream an operation that runs for us microseconds (a kernel). */
void fake_cudart_stream_sleep(cudaStream_t stream, unsigned us);

#endif /* FAKE_CUDART_H */
