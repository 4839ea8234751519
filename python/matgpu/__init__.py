"""matgpu: read whole files into CPU or GPU memory as DLPack tensors.

A thin ctypes binding of libmatgpu (matgpu.h). Files are read through
pinned staging buffers and copied to the device while the next piece is
read; the result supports the DLPack protocol, so torch.from_dlpack(buf),
numpy.from_dlpack(buf) (CPU), cupy.from_dlpack(buf) or jax.dlpack take it
without a copy:

    import matgpu, torch
    buf = matgpu.load("/mnt/data/wiki-tokens/shard-00000.bin", device="cuda")
    t = torch.from_dlpack(buf)       # 1-D uint8, on the current device
    x = torch.from_dlpack(buf.view("int32", (-1, 512)))
    for buf in matgpu.Loader(paths, device="cuda:1", prefetch=2):
        ...

Not for: parsing file formats or copying back to the host; use the tensor
library for that.

Errors: a missing file raises FileNotFoundError, a directory
IsADirectoryError, every other failure OSError with its errno (ENODEV when
the device does not exist); a CUDA error without an errno raises CudaError
(an OSError with errno EIO) naming the CUDA error.
"""

import errno as _errno
import os
import sys
import threading

from ctypes import byref, c_char_p, c_int64, c_void_p

from . import _lib
from ._lib import lib

__all__ = ["Buffer", "Context", "CudaError", "Loader", "load",
           "device_count", "cuda_built", "version"]


class CudaError(OSError):
    """A CUDA error with no errno of its own; .cuda_error names it."""

    def __init__(self, cuda_error, code, filename=None):
        super().__init__(_errno.EIO, "CUDA error %s" % cuda_error, filename)
        self.cuda_error = cuda_error
        self.cuda_code = code


def _raise(rc, filename=None):
    err = -rc
    code, name = _lib.last_cuda_error()
    if err == _lib.MG_ECUDA:
        raise CudaError(name, code, filename)
    msg = os.strerror(err)
    if err == _errno.ENODEV:
        msg += " (%s)" % (name if code else "%d CUDA devices%s" % (
            lib.mg_device_count(),
            "" if lib.mg_cuda_built() else ", no CUDA backend"))
    # OSError picks FileNotFoundError, IsADirectoryError... from the errno.
    raise OSError(err, msg, filename)


def version():
    return lib.mg_version().decode()


def cuda_built():
    """True when libmatgpu was built with its CUDA backend."""
    return bool(lib.mg_cuda_built())


def device_count():
    """CUDA devices the runtime reports (0 without driver or device)."""
    return lib.mg_device_count()


def _current_cuda_device():
    """The caller's current CUDA device: torch's when torch is imported
    and has CUDA (torch.cuda.set_device(rank) then means rank), else the
    CUDA runtime's for this thread (cudaGetDevice)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available():
        return cuda.current_device()
    index = lib.mg_cuda_current_device()
    if index < 0:
        _raise(index)
    return index


def _device_index(device):
    """MG_DEVICE_CPU, MG_DEVICE_AUTO or a CUDA ordinal from "cpu", "cuda"
    (the current device), "cuda:N", "auto", an int or a torch.device."""
    if device is None:
        return _lib.MG_DEVICE_CPU
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError("matgpu: bad device %r" % (device,))
        return device
    text = str(device)
    if text == "cpu":
        return _lib.MG_DEVICE_CPU
    if text == "auto":
        return _lib.MG_DEVICE_AUTO
    if text == "cuda":
        return _current_cuda_device()
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError("matgpu: bad device %r (want 'cpu', 'cuda' or "
                     "'cuda:N')" % (device,))


_DTYPES = {
    "int8": (_lib.KDL_INT, 8), "int16": (_lib.KDL_INT, 16),
    "int32": (_lib.KDL_INT, 32), "int64": (_lib.KDL_INT, 64),
    "uint8": (_lib.KDL_UINT, 8), "uint16": (_lib.KDL_UINT, 16),
    "uint32": (_lib.KDL_UINT, 32), "uint64": (_lib.KDL_UINT, 64),
    "float16": (_lib.KDL_FLOAT, 16), "float32": (_lib.KDL_FLOAT, 32),
    "float64": (_lib.KDL_FLOAT, 64), "bfloat16": (_lib.KDL_BFLOAT, 16),
    "complex64": (_lib.KDL_COMPLEX, 64),
    "complex128": (_lib.KDL_COMPLEX, 128),
    "half": (_lib.KDL_FLOAT, 16), "float": (_lib.KDL_FLOAT, 32),
    "double": (_lib.KDL_FLOAT, 64),
}
_KINDS = {"i": _lib.KDL_INT, "u": _lib.KDL_UINT, "f": _lib.KDL_FLOAT,
          "c": _lib.KDL_COMPLEX}


def _dl_dtype(dtype):
    """(code, bits) of a dtype given by name ("float32"), as a numpy dtype
    or type, or as a torch dtype (torch.bfloat16)."""
    name = str(dtype)
    name = name[6:] if name.startswith("torch.") else name
    if name in _DTYPES:
        return _DTYPES[name]
    try:
        import numpy
        dt = numpy.dtype(dtype)
    except Exception:
        raise TypeError("matgpu: unknown dtype %r" % (dtype,)) from None
    if dt.kind not in _KINDS or not dt.isnative:
        raise TypeError("matgpu: dtype %r has no DLPack equivalent" %
                        (dtype,))
    return _KINDS[dt.kind], dt.itemsize * 8


class Buffer:
    """A file's bytes in CPU or GPU memory, held until released.

    Supports __dlpack__/__dlpack_device__: each tensor made from it holds
    its own reference, so a tensor stays valid after the Buffer is gone.
    release() (or the end of a with block, or garbage collection) gives the
    Buffer's reference back.
    """

    def __init__(self, handle, path=None, view=None):
        self._buf = handle  # int address of an mg_buf, one reference
        self._view = view  # None, or (code, bits, shape, offset)
        self.path = path

    def _handle(self):
        if not self._buf:
            raise ValueError("matgpu: buffer was released")
        return self._buf

    @property
    def nbytes(self):
        """Bytes of the file (of the whole buffer, also for a view)."""
        return lib.mg_buf_size(self._handle())

    def __len__(self):
        return self.nbytes

    @property
    def data_ptr(self):
        """Address of the first byte (device address on CUDA)."""
        return lib.mg_buf_data(self._handle()) or 0

    @property
    def device(self):
        kind, index = self.__dlpack_device__()
        return "cpu" if kind == _lib.KDL_CPU else "cuda:%d" % index

    def __dlpack_device__(self):
        d = lib.mg_buf_dl_device(self._handle())
        return (d.device_type, d.device_id)

    def _mg_view(self):
        if self._view is None:
            return None
        code, bits, shape, offset = self._view
        v = _lib.MgView()
        v.dtype.code, v.dtype.bits, v.dtype.lanes = code, bits, 1
        v.ndim = len(shape)
        v.shape = (c_int64 * max(1, len(shape)))(*shape)
        v.offset = offset
        return v

    def __dlpack__(self, stream=None, max_version=None, dl_device=None,
                   copy=None):
        """A "dltensor" capsule, per the DLPack exchange: on CUDA the
        consumer's stream (None: the legacy default stream; 1 legacy, 2
        per-thread default, -1 none, else a cudaStream_t) waits for the
        copy that filled the buffer, and the tensor's release is fenced on
        that stream, so the memory is reused only after the work the
        consumer queued there."""
        if copy:
            raise BufferError("matgpu: __dlpack__ does not copy")
        if dl_device is not None and \
                tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("matgpu: buffer is on %s" % self.device)
        if self.__dlpack_device__()[0] == _lib.KDL_CPU:
            stream = -1
        elif stream is None:
            stream = 1
        elif not isinstance(stream, int) or stream == 0 or stream < -1:
            raise ValueError("matgpu: bad CUDA stream %r" % (stream,))
        view = self._mg_view()
        managed = c_void_p()
        rc = lib.mg_buf_dlpack_stream(
            self._handle(), byref(view) if view is not None else None,
            stream, byref(managed))
        if rc:
            _raise(rc, self.path)
        if _lib.fold_offset_for_consumers():
            _lib.fold_offset(managed.value)
        return _lib.capsule_new(managed.value)

    def view(self, dtype, shape=None, offset=0):
        """A Buffer over the same bytes whose DLPack tensor has dtype and
        shape (C order; one -1 is inferred; None: 1-D over all the bytes
        from offset). The bytes viewed must fit in the buffer."""
        code, bits = _dl_dtype(dtype)
        item = bits // 8
        avail = self.nbytes - offset
        if offset < 0 or avail < 0 or offset % item:
            raise ValueError("matgpu: bad offset %d" % offset)
        shape = [-1] if shape is None else [int(s) for s in (
            shape if isinstance(shape, (tuple, list)) else (shape,))]
        if shape.count(-1) > 1 or any(s < -1 for s in shape):
            raise ValueError("matgpu: bad shape %r" % (shape,))
        if -1 in shape:
            known = item
            for s in shape:
                known *= s if s != -1 else 1
            if known == 0 or avail % known:
                raise ValueError("matgpu: %d bytes do not divide into %r of "
                                 "%s" % (avail, shape, dtype))
            shape[shape.index(-1)] = avail // known
        need = item
        for s in shape:
            need *= s
        if need > avail:
            raise ValueError("matgpu: view %r of %s needs %d bytes, %d left" %
                             (tuple(shape), dtype, need, avail))
        return Buffer(lib.mg_buf_ref(self._handle()), self.path,
                      (code, bits, tuple(shape), offset))

    def tobytes(self):
        """A copy of the bytes as bytes (CPU buffers only)."""
        if self.__dlpack_device__()[0] != _lib.KDL_CPU:
            raise ValueError("matgpu: tobytes() needs a CPU buffer")
        import ctypes
        return ctypes.string_at(self.data_ptr, self.nbytes)

    def release(self):
        """Gives this Buffer's reference back; tensors keep their own."""
        buf, self._buf = self._buf, None
        if buf and lib is not None:
            lib.mg_buf_release(buf)

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        if not self._buf:
            return "<matgpu.Buffer released>"
        return "<matgpu.Buffer %d bytes on %s%s>" % (
            self.nbytes, self.device,
            " path=%r" % self.path if self.path else "")


class Context:
    """A libmatgpu context on one device: staging rings and a pool of
    buffers reused across loads. Safe to share between threads."""

    def __init__(self, device="cpu", staging_size=None, staging_count=None,
                 io_threads=None, pool_max_bytes=None, max_loads=None):
        self._ctx = None
        opts = _lib.CtxOpts()
        lib.mg_ctx_opts_init(byref(opts))
        for name, value in (("staging_size", staging_size),
                            ("staging_count", staging_count),
                            ("io_threads", io_threads),
                            ("pool_max_bytes", pool_max_bytes),
                            ("max_loads", max_loads)):
            if value is not None:
                setattr(opts, name, value)
        handle = c_void_p()
        rc = lib.mg_ctx_open(_device_index(device), byref(opts),
                             byref(handle))
        if rc:
            _raise(rc)
        self._ctx = handle.value

    def _handle(self):
        if not self._ctx:
            raise ValueError("matgpu: context was closed")
        return self._ctx

    @property
    def device(self):
        index = lib.mg_ctx_device(self._handle())
        return "cpu" if index < 0 else "cuda:%d" % index

    @property
    def backend(self):
        return lib.mg_ctx_backend(self._handle()).decode()

    def load(self, path):
        """The whole file at path as a Buffer on this context's device."""
        handle = c_void_p()
        rc = lib.mg_load(self._handle(), os.fsencode(path), byref(handle))
        if rc:
            _raise(rc, os.fspath(path))
        return Buffer(handle.value, os.fspath(path))

    def loader(self, paths, prefetch=2, memory_budget=None):
        return Loader(paths, prefetch=prefetch, memory_budget=memory_budget,
                      context=self)

    def stats(self):
        """The context's counters (struct mg_ctx_stats) as a dict."""
        st = _lib.CtxStats()
        lib.mg_ctx_stats(self._handle(), byref(st))
        return {name: getattr(st, name) for name, _ in st._fields_}

    def trim(self):
        """Frees the buffers the pool keeps and idle staging rings."""
        lib.mg_ctx_trim(self._handle())

    def close(self):
        ctx, self._ctx = self._ctx, None
        if ctx and lib is not None:
            lib.mg_ctx_close(ctx)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_contexts = {}
_contexts_lock = threading.Lock()


def _default_context(device):
    index = _device_index(device)
    with _contexts_lock:
        ctx = _contexts.get(index)
        if ctx is None:
            ctx = _contexts[index] = Context(index if index >= 0 else
                                             {-1: "cpu", -2: "auto"}[index])
        return ctx


def load(path, device="cpu"):
    """The whole file at path as a Buffer on device ("cpu", "cuda",
    "cuda:N"), read with the device's shared default Context."""
    return _default_context(device).load(path)


class Loader:
    """An iterator of Buffers over files, in order, loading the next ones
    while the caller uses the current one.

    paths is a list of files, or one directory (its regular files sorted by
    name, hidden ones left out: a matfs snapshot directory). prefetch files
    at most are loaded ahead; memory_budget (bytes, default 1 GiB, 0 for no
    limit) bounds the memory of the loader's buffers alive, those the caller
    holds included. A file that fails raises its OSError when its turn
    comes; iterating again goes on with the next file.
    """

    def __init__(self, paths, device="cpu", prefetch=2, memory_budget=None,
                 context=None):
        self._ld = None
        ctx = context if context is not None else _default_context(device)
        opts = _lib.LoaderOpts()
        lib.mg_loader_opts_init(byref(opts))
        opts.prefetch = prefetch
        if memory_budget is not None:
            opts.memory_budget = memory_budget
        handle = c_void_p()
        if isinstance(paths, (str, bytes, os.PathLike)):
            self._names = None
            rc = lib.mg_loader_open_dir(ctx._handle(), os.fsencode(paths),
                                        byref(opts), byref(handle))
            if rc:
                _raise(rc, os.fspath(paths))
        else:
            self._names = [os.fspath(p) for p in paths]
            arr = (c_char_p * max(1, len(self._names)))(
                *[os.fsencode(p) for p in self._names])
            rc = lib.mg_loader_open(ctx._handle(), arr, len(self._names),
                                    byref(opts), byref(handle))
            if rc:
                _raise(rc)
        self._ctx = ctx  # the C loader holds its own reference as well
        self._ld = handle.value
        self._index = 0

    def __iter__(self):
        return self

    def __next__(self):
        if not self._ld:
            raise StopIteration
        handle = c_void_p()
        rc = lib.mg_loader_next(self._ld, byref(handle))
        index = self._index
        name = self._names[index] if self._names and \
            index < len(self._names) else None
        if rc:
            self._index += 1
            _raise(rc, name)
        if not handle.value:
            raise StopIteration
        self._index += 1
        return Buffer(handle.value, name)

    def stats(self):
        """The loader's counters (struct mg_loader_stats) as a dict."""
        if not self._ld:
            raise ValueError("matgpu: loader was closed")
        st = _lib.LoaderStats()
        lib.mg_loader_stats(self._ld, byref(st))
        return {name: getattr(st, name) for name, _ in st._fields_}

    def close(self):
        """Stops prefetching; Buffers already returned stay valid."""
        ld, self._ld = self._ld, None
        if ld and lib is not None:
            lib.mg_loader_close(ld)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
