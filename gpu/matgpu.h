/*
 * matgpu.h - libmatgpu, matfs's GPU companion library: reads whole files
 * (shards on a matfs mount, or any regular file) into device memory through
 * a ring of pinned host staging buffers, so that reading the next piece of a
 * file overlaps the asynchronous copy of the previous one, and hands the
 * result out as a DLPack tensor.
 *
 * Not for: random access inside files, writing files, or computing on the
 * device. No kernels run; the CUDA runtime API is used for memory, streams,
 * copies and events only.
 *
 * Backends. A context belongs to one device. MG_DEVICE_CPU gives the CPU
 * backend (ordinary aligned memory, same ring and loader logic, a memcpy
 * where CUDA has an asynchronous copy); an ordinal >= 0 gives the CUDA
 * backend on that device; MG_DEVICE_AUTO picks CUDA device 0 when the CUDA
 * runtime reports a device, else the CPU backend. The CPU backend is always
 * built; the CUDA backend when the library was built with it
 * (mg_cuda_built()).
 *
 * Errors. Every fallible function returns 0 or a negative number: a negative
 * errno, or -MG_ECUDA for a CUDA error that has no errno of its own. CUDA
 * errors with an obvious errno come back as it (out of memory: -ENOMEM, no
 * device or driver: -ENODEV, bad argument: -EINVAL); in every case the CUDA
 * error itself stays readable with mg_cuda_last_error() on the thread that
 * got the error. Outputs are written only on success.
 *
 * Thread safety.
 * - mg_ctx: every function taking a context may be called from any thread,
 *   concurrently. Concurrent mg_load() calls on one context run in
 *   parallel, each on its own staging ring, up to opts.max_loads at once.
 * - Devices: every CUDA call is made with the context's device current
 *   (its primary context pushed for the call) and the calling thread is
 *   left as found: its device, or no current context at all. No context is
 *   created on a device nobody asked for.
 * - mg_buf: the bytes are immutable once handed out. mg_buf_ref(),
 *   mg_buf_release() and mg_buf_dlpack() may be called from any thread; each
 *   reference is released exactly once.
 * - mg_loader: one thread at a time calls mg_loader_next(),
 *   mg_loader_stats() and mg_loader_close() on a given loader (the loader's
 *   own prefetch thread is internal). Buffers it hands out may be released
 *   from any thread, before or after the loader is closed.
 * - A DLManagedTensor's deleter may run on any thread.
 * - mg_cuda_last_error() is per thread.
 *
 * Ownership and lifetime. Contexts, buffers and loaders are reference
 * counted internally: a buffer (and a tensor exported from it) keeps its
 * context alive, so mg_ctx_close() may come before the last buffer is
 * released. Device memory is freed when the last reference goes.
 */
#ifndef MATGPU_H
#define MATGPU_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MG_VERSION_MAJOR 0
#define MG_VERSION_MINOR 1
#define MG_VERSION_PATCH 0

/* Returned as -MG_ECUDA: a CUDA error with no errno equivalent. Above every
 * errno value. */
#define MG_ECUDA 4096

#define MG_DEVICE_CPU (-1) /* the CPU backend */
#define MG_DEVICE_AUTO (-2) /* CUDA device 0 if there is one, else CPU */

typedef struct mg_ctx mg_ctx;
typedef struct mg_buf mg_buf;
typedef struct mg_loader mg_loader;

/* "0.1.0"; static storage. */
const char *mg_version(void);

/* 1 when this library was built with its CUDA backend, else 0. */
int mg_cuda_built(void);

/*
 * Number of CUDA devices the runtime reports: 0 when the CUDA backend is not
 * built, when there is no driver or no device (the reason is then readable
 * with mg_cuda_last_error()). Never fails.
 */
int mg_device_count(void);

/*
 * The calling thread's current CUDA device (cudaGetDevice: 0 on a thread
 * that never chose one; creates no context), or -ENODEV when the CUDA
 * backend is not built or the runtime has no device.
 */
int mg_cuda_current_device(void);

/*
 * The last CUDA error this thread got from libmatgpu: returns its
 * cudaError_t value (0 if none since the thread started or since
 * mg_cuda_clear_error()), and when name is not NULL sets *name to its name
 * ("cudaErrorNoDevice"; "cudaSuccess" when none), static storage.
 */
int mg_cuda_last_error(const char **name);
void mg_cuda_clear_error(void);

/* A description of an error returned by libmatgpu (negative or positive
 * errno, or MG_ECUDA); static storage, never NULL. */
const char *mg_strerror(int err);

/*
 * Context options. Fill with mg_ctx_opts_init(), then change what you need.
 * - staging_size: bytes of one staging buffer (>= 1; default 4 MiB). A file
 *   is read and copied in pieces of this size.
 * - staging_count: staging buffers in one ring (2..64; default io_threads
 *   + 2, at least 4). Each
 *   load being filled (an mg_load() call, a loader's current file) uses one
 *   ring, so a context holds at most max_loads * staging_count *
 *   staging_size pinned bytes and max_loads * io_threads I/O threads.
 * - io_threads: threads that pread() into the staging buffers of one ring
 *   (1..16; more than staging_count - 1 are lowered to that), while the
 *   loading thread issues the copies. Default: one per 4 CPUs the
 *   process may run on (its affinity, lowered by a cgroup v2 CPU quota),
 *   at least 2 from 4 CPUs (1 below), at most 8.
 * - pool_max_bytes: most bytes of released device buffers the pool keeps
 *   for reuse; 0 (the default) means no limit: memory goes back only with
 *   mg_ctx_trim(), when an allocation fails, or when the context ends.
 *   Buffers evicted over the limit are freed by the next load, trim or the
 *   context's end, never inside mg_buf_release() (a DLPack deleter).
 * - max_loads: most loads of the context filling at once (1..64; default
 *   4); a load beyond it waits until one of them is done.
 */
struct mg_ctx_opts {
	size_t staging_size;
	unsigned staging_count;
	unsigned io_threads;
	size_t pool_max_bytes;
	unsigned max_loads;
};
void mg_ctx_opts_init(struct mg_ctx_opts *opts);

/*
 * Opens a context on device (MG_DEVICE_CPU, MG_DEVICE_AUTO or a CUDA
 * ordinal); opts NULL means the defaults. Returns 0 and sets *out (close with
 * mg_ctx_close), -EINVAL for bad options, -ENODEV when device is a CUDA
 * ordinal and there is no such device (or no CUDA backend), -ENOMEM, or a
 * CUDA error.
 */
int mg_ctx_open(int device, const struct mg_ctx_opts *opts, mg_ctx **out);

/* Drops the caller's reference; the context ends when its buffers and
 * loaders are gone too, and loads or trims under way on other threads are
 * done. NULL does nothing. */
void mg_ctx_close(mg_ctx *ctx);

/* MG_DEVICE_CPU or the CUDA ordinal of the context. */
int mg_ctx_device(const mg_ctx *ctx);

/* "cpu" or "cuda"; static storage. */
const char *mg_ctx_backend(const mg_ctx *ctx);

/* The DLPack device of the context's buffers (kDLCPU or kDLCUDA, id). */
DLDevice mg_ctx_dl_device(const mg_ctx *ctx);

/* Frees every buffer the pool keeps for reuse and the staging rings not in
 * use. */
void mg_ctx_trim(mg_ctx *ctx);

/*
 * Counters of a context, since it was opened.
 * - device_allocs / device_frees: device buffers allocated and freed
 *   (cudaMalloc / cudaFree on CUDA; a buffer evicted from the pool counts
 *   as freed at once, its cudaFree comes with the next load or trim). A steady-state loop of loads and
 *   releases of same-sized files makes device_allocs stop growing.
 * - pool_hits: loads served by a buffer from the pool.
 * - bytes_in_use: capacity of buffers alive (not released); peak_in_use
 *   its high-water mark. bytes_cached: capacity kept by the pool.
 * - staging_bytes: pinned staging memory held by the context's rings.
 * - loads: buffers filled (by mg_load and loaders).
 * Buffer capacities are the file size rounded up to a size class (at most
 * 1/4 more than the size, and at least 4 KiB).
 */
struct mg_ctx_stats {
	uint64_t device_allocs;
	uint64_t device_frees;
	uint64_t pool_hits;
	uint64_t bytes_in_use;
	uint64_t peak_in_use;
	uint64_t bytes_cached;
	uint64_t staging_bytes;
	uint64_t loads;
};
void mg_ctx_stats(mg_ctx *ctx, struct mg_ctx_stats *out);

/*
 * Reads the whole regular file at path into a new device buffer of ctx.
 * Returns 0 and sets *out (one reference; release with mg_buf_release), or
 * -ENOENT, -EISDIR, -EACCES, ... from open(2), -EINVAL when path is not a
 * regular file, -EIO when a read fails or the file shrinks while being
 * read, -ENOMEM, or a CUDA error. On return the bytes are on the device:
 * no further synchronization is needed before using them on any stream.
 */
int mg_load(mg_ctx *ctx, const char *path, mg_buf **out);

/* Same, from a descriptor open for reading (positioned reads from offset 0
 * to the size fstat reports; the descriptor stays the caller's). */
int mg_load_fd(mg_ctx *ctx, int fd, mg_buf **out);

/* Adds a reference to buf and returns buf. */
mg_buf *mg_buf_ref(mg_buf *buf);

/*
 * Drops one reference. When the last goes the buffer returns to its
 * context's pool. On CUDA, reuse of the memory is ordered after the work
 * queued on the legacy default stream (and streams that synchronize with it)
 * before the release, and after the work queued on each stream named to
 * mg_buf_dlpack_stream() before that tensor's deleter ran; work on other
 * non-blocking streams must be finished by the caller first, as with any
 * memory it frees. Frees no device memory (no cudaFree, which waits for
 * the device), so it is cheap in a DLPack deleter, with one exception:
 * the release of the last buffer or tensor of a context already closed
 * ends that context, which frees its pool and staging rings and joins
 * their I/O threads. NULL does nothing.
 */
void mg_buf_release(mg_buf *buf);

/* The buffer's bytes on its device (device pointer on CUDA); borrowed while
 * the caller holds a reference. Never NULL, even for an empty file. */
void *mg_buf_data(const mg_buf *buf);

/* Bytes of the file. */
size_t mg_buf_size(const mg_buf *buf);

/* Bytes of device memory the buffer occupies (its size class). */
size_t mg_buf_capacity(const mg_buf *buf);

DLDevice mg_buf_dl_device(const mg_buf *buf);

/*
 * A view of a buffer's bytes as a tensor: dtype (bits a multiple of 8,
 * lanes 1), shape of ndim (0..32) dimensions, C-contiguous, starting offset
 * bytes into the buffer (a multiple of the item size).
 */
struct mg_view {
	DLDataType dtype;
	int32_t ndim;
	const int64_t *shape;
	uint64_t offset;
};

/*
 * Exports buf as a DLPack tensor: view NULL gives a 1-D uint8 tensor of all
 * the bytes; otherwise the view must fit in the buffer (offset + product of
 * shape * item size <= size). The tensor's data is aligned to 256 bytes
 * (the view's offset rounded down) and byte_offset holds the rest. The tensor holds its own reference on buf: the
 * caller still releases its own, and the memory stays valid until the
 * tensor's deleter runs (called once by the consumer, from any thread).
 * Returns 0 and sets *out, -EINVAL for a bad view, -EOVERFLOW when it
 * overflows, -ENOMEM.
 */
int mg_buf_dlpack(mg_buf *buf, const struct mg_view *view,
		  DLManagedTensor **out);

/*
 * Same, for a consumer that will use the tensor on a stream (the DLPack
 * exchange, __dlpack__(stream=...)). stream follows DLPack's CUDA
 * convention: -1 for no synchronization, 1 for the legacy default stream,
 * 2 for the calling thread's per-thread default stream, any other value a
 * cudaStream_t of the buffer's device (0 is refused: -EINVAL). On CUDA the
 * consumer's stream first waits for the copy that filled the buffer
 * (cudaStreamWaitEvent; never blocks the caller), and when the tensor's
 * deleter runs the buffer's release is fenced on that stream: the memory
 * is reused only after the work queued there before the deleter ran.
 * mg_buf_dlpack() is mg_buf_dlpack_stream(buf, view, 1, out). On the CPU
 * backend stream is ignored.
 */
int mg_buf_dlpack_stream(mg_buf *buf, const struct mg_view *view,
			 intptr_t stream, DLManagedTensor **out);

/*
 * A PyCapsule destructor for capsules named "dltensor" holding a
 * DLManagedTensor from mg_buf_dlpack(): calls the tensor's deleter unless a
 * consumer took the capsule (renamed it). The library does not link
 * Python: the binding first hands it the interpreter's PyCapsule_IsValid
 * and PyCapsule_GetPointer with mg_dlpack_capsule_api() (no symbol lookup,
 * so embedded interpreters work). Before that, the destructor cannot look
 * into a capsule and calls nothing; mg_dlpack_capsules_leaked() counts
 * such calls. Call only with the Python interpreter's lock held (Python
 * does).
 */
void mg_dlpack_capsule_destructor(void *capsule);
void mg_dlpack_capsule_api(int (*is_valid)(void *capsule, const char *name),
			   void *(*get_pointer)(void *capsule,
						const char *name));
/* Calls of mg_dlpack_capsule_destructor() that could not look into their
 * capsule (no mg_dlpack_capsule_api() yet), since the process started. */
uint64_t mg_dlpack_capsules_leaked(void);

/*
 * Loader options. Fill with mg_loader_opts_init().
 * - prefetch: files loaded ahead of the caller (ready or being loaded),
 *   not counting the ones it holds; default 2; 0 loads each file only when
 *   mg_loader_next() asks for it.
 * - memory_budget: most bytes (buffer capacities) of the loader's buffers
 *   alive at once: prefetched, being loaded, and handed out but not yet
 *   released; default 1 GiB; 0 means no limit. A prefetch starts only when
 *   the next file fits. The one exception: the file mg_loader_next() is
 *   waiting for is loaded even when it does not fit (a file larger than the
 *   budget, or buffers the caller still holds), so next never deadlocks;
 *   such loads are counted in mg_loader_stats.over_budget.
 */
struct mg_loader_opts {
	unsigned prefetch;
	uint64_t memory_budget;
};
void mg_loader_opts_init(struct mg_loader_opts *opts);

/*
 * Opens a loader over n paths (copied), returned in that order by
 * mg_loader_next(). A prefetch thread starts at once. opts NULL means the
 * defaults. Returns 0 and sets *out (close with mg_loader_close), -EINVAL,
 * -ENOMEM, -EAGAIN (no thread), or a CUDA error.
 */
int mg_loader_open(mg_ctx *ctx, const char *const *paths, size_t n,
		   const struct mg_loader_opts *opts, mg_loader **out);

/*
 * Same over the regular files of a directory (a matfs snapshot directory),
 * sorted by name, hidden files (".name") left out. Also -ENOENT, -ENOTDIR,
 * -EACCES from opening the directory.
 */
int mg_loader_open_dir(mg_ctx *ctx, const char *dir,
		       const struct mg_loader_opts *opts, mg_loader **out);

/*
 * The next file, in order. Returns 0 and sets *out to a buffer (one
 * reference, the caller's), or to NULL once every file was handed out. On a
 * failure to load that file returns its error (-ENOENT, -EISDIR, -EIO, a
 * CUDA error...) and moves past it: the following call gives the next file.
 * Blocks until the file is loaded.
 */
int mg_loader_next(mg_loader *ld, mg_buf **out);

/*
 * Counters of a loader.
 * - bytes_in_use: capacity of its buffers alive; peak_bytes its high-water
 *   mark (<= memory_budget unless over_budget > 0).
 * - peak_ahead: most files ready or being loaded ahead of the caller.
 * - over_budget: loads that did not fit the budget (see opts).
 * - files_loaded / files_failed: outcome of the files loaded so far.
 */
struct mg_loader_stats {
	uint64_t bytes_in_use;
	uint64_t peak_bytes;
	uint64_t peak_ahead;
	uint64_t over_budget;
	uint64_t files_loaded;
	uint64_t files_failed;
};
void mg_loader_stats(mg_loader *ld, struct mg_loader_stats *out);

/* Stops prefetching, frees buffers not handed out, joins the prefetch
 * thread. Buffers already handed out stay valid. NULL does nothing. */
void mg_loader_close(mg_loader *ld);

#ifdef __cplusplus
}
#endif

#endif /* MATGPU_H */
