"""ctypes declarations of libmatgpu (matgpu.h) and how the library is found.

For the binding's own use; the public API is in matgpu/__init__.py. Not for:
anything that needs a compiler: the binding is pure ctypes.

The library is found, first match wins, through the environment variable
MATGPU_LIB (a path to the .so); else next to this package (libmatgpu.so.0
or libmatgpu.so in the matgpu folder); else where matfs installed it: the
libdir of the prefix this package is installed under (PREFIX/lib/MULTIARCH,
PREFIX/lib64, PREFIX/lib, for a package in PREFIX/lib/pythonX.Y/...), the
loader's cache (ldconfig) and the usual prefixes /usr/local and /usr; else,
when this package runs from the source tree, the newest build tree's
build/*/gpu/libmatgpu.so.0 (builds with a sanitizer left out).
"""

import ctypes
import ctypes.util
import glob
import json
import os
import sys
import sysconfig

from ctypes import (POINTER, Structure, byref, c_char_p, c_int, c_int32,
                    c_int64, c_size_t, c_ssize_t, c_uint, c_uint8, c_uint16,
                    c_uint64, c_void_p)

MG_ECUDA = 4096
MG_DEVICE_CPU = -1
MG_DEVICE_AUTO = -2

# DLPack 0.6 device types and type codes.
KDL_CPU = 1
KDL_CUDA = 2
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_COMPLEX = 0, 1, 2, 4, 5


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int32)]


class MgView(Structure):
    _fields_ = [("dtype", DLDataType), ("ndim", c_int32),
                ("shape", POINTER(c_int64)), ("offset", c_uint64)]


class CtxOpts(Structure):
    _fields_ = [("staging_size", c_size_t), ("staging_count", c_uint),
                ("io_threads", c_uint), ("pool_max_bytes", c_size_t),
                ("max_loads", c_uint)]


class CtxStats(Structure):
    _fields_ = [(name, c_uint64) for name in (
        "device_allocs", "device_frees", "pool_hits", "bytes_in_use",
        "peak_in_use", "bytes_cached", "staging_bytes", "loads")]


class LoaderOpts(Structure):
    _fields_ = [("prefetch", c_uint), ("memory_budget", c_uint64)]


class LoaderStats(Structure):
    _fields_ = [(name, c_uint64) for name in (
        "bytes_in_use", "peak_bytes", "peak_ahead", "over_budget",
        "files_loaded", "files_failed")]


_SONAMES = ("libmatgpu.so.0", "libmatgpu.so")


def _libdirs(prefix):
    """The folders meson's libdir may be under PREFIX."""
    arch = sysconfig.get_config_var("MULTIARCH")
    dirs = [os.path.join(prefix, "lib", arch)] if arch else []
    return dirs + [os.path.join(prefix, "lib64"), os.path.join(prefix, "lib")]


def _install_prefix(here):
    """PREFIX when this package lies in PREFIX/lib*/pythonX.Y/*-packages/
    (pip's layout under a prefix, a --root or a venv), else None."""
    site = os.path.dirname(here)
    pydir = os.path.dirname(site)
    if os.path.basename(site) not in ("site-packages", "dist-packages") or \
            not os.path.basename(pydir).startswith("python"):
        return None
    return os.path.dirname(os.path.dirname(pydir))


def _sanitized(build):
    """True when meson configured the build tree with a sanitizer: its
    library aborts a Python that did not load the runtime first."""
    try:
        with open(os.path.join(build, "meson-info",
                               "intro-buildoptions.json")) as f:
            options = json.load(f)
    except (OSError, ValueError):
        return False
    return any(o.get("name") == "b_sanitize" and o.get("value") != "none"
               for o in options)


def _build_libs(here):
    """libmatgpu in the build trees of the source tree this package is in
    (SOURCE/python/matgpu), newest first, leaving out sanitizer builds and
    libraries not built yet; [] outside a source tree."""
    source = os.path.dirname(os.path.dirname(here))
    if not os.path.exists(os.path.join(source, "meson.build")):
        return []
    found = []
    for build in glob.glob(os.path.join(source, "build", "*", "")):
        path = os.path.join(build, "gpu", "libmatgpu.so.0")
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue  # not built, or a link to a library being built
        if not _sanitized(build):
            found.append((mtime, path))
    return [path for _, path in sorted(found, reverse=True)]


def candidates():
    """Where find_library looks, in order (paths that may not exist; a bare
    name is for the dynamic loader's own search)."""
    env = os.environ.get("MATGPU_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here]
    prefix = _install_prefix(here)
    if prefix:
        dirs += _libdirs(prefix)
    paths = [os.path.join(d, n) for d in dirs for n in _SONAMES]
    cached = ctypes.util.find_library("matgpu")
    if cached:
        paths.append(cached)
    for prefix in ("/usr/local", "/usr"):
        paths += [os.path.join(d, n) for d in _libdirs(prefix)
                  for n in _SONAMES]
    return paths + _build_libs(here)


def find_library():
    """The path (or loader name) of libmatgpu to load, or None."""
    env = os.environ.get("MATGPU_LIB")
    if env:
        return env
    for path in candidates():
        if os.sep not in path or os.path.exists(path):
            return path
    return None


def _declare(lib):
    p = c_void_p
    sigs = {
        "mg_version": (c_char_p, []),
        "mg_cuda_built": (c_int, []),
        "mg_device_count": (c_int, []),
        "mg_cuda_current_device": (c_int, []),
        "mg_cuda_last_error": (c_int, [POINTER(c_char_p)]),
        "mg_cuda_clear_error": (None, []),
        "mg_strerror": (c_char_p, [c_int]),
        "mg_ctx_opts_init": (None, [POINTER(CtxOpts)]),
        "mg_ctx_open": (c_int, [c_int, POINTER(CtxOpts), POINTER(p)]),
        "mg_ctx_close": (None, [p]),
        "mg_ctx_device": (c_int, [p]),
        "mg_ctx_backend": (c_char_p, [p]),
        "mg_ctx_trim": (None, [p]),
        "mg_ctx_stats": (None, [p, POINTER(CtxStats)]),
        "mg_load": (c_int, [p, c_char_p, POINTER(p)]),
        "mg_load_fd": (c_int, [p, c_int, POINTER(p)]),
        "mg_buf_ref": (p, [p]),
        "mg_buf_release": (None, [p]),
        "mg_buf_data": (p, [p]),
        "mg_buf_size": (c_size_t, [p]),
        "mg_buf_capacity": (c_size_t, [p]),
        "mg_buf_dl_device": (DLDevice, [p]),
        "mg_buf_dlpack": (c_int, [p, POINTER(MgView), POINTER(p)]),
        "mg_buf_dlpack_stream": (c_int, [p, POINTER(MgView), c_ssize_t,
                                         POINTER(p)]),
        "mg_dlpack_capsule_api": (None, [p, p]),
        "mg_dlpack_capsules_leaked": (c_uint64, []),
        "mg_loader_opts_init": (None, [POINTER(LoaderOpts)]),
        "mg_loader_open": (c_int, [p, POINTER(c_char_p), c_size_t,
                                   POINTER(LoaderOpts), POINTER(p)]),
        "mg_loader_open_dir": (c_int, [p, c_char_p, POINTER(LoaderOpts),
                                       POINTER(p)]),
        "mg_loader_next": (c_int, [p, POINTER(p)]),
        "mg_loader_stats": (None, [p, POINTER(LoaderStats)]),
        "mg_loader_close": (None, [p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def _load():
    path = find_library()
    if path is None:
        raise ImportError(
            "matgpu: cannot find libmatgpu.so.0 (looked in %s); install "
            "matfs (tools/install) or set MATGPU_LIB to the path of "
            "libmatgpu.so" % ", ".join(sorted(set(
                os.path.dirname(p) for p in candidates()))))
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            "matgpu: cannot load libmatgpu ('%s': %s); set MATGPU_LIB to "
            "the path of libmatgpu.so" % (path, e)) from e
    _declare(lib)
    return lib


lib = _load()

# The C destructor given to "dltensor" capsules, and the capsule's name,
# which must outlive every capsule, even those a consumer frees while the
# interpreter shuts down after this module's state is gone: a copy in the C
# heap, never freed.
CAPSULE_DESTRUCTOR = ctypes.cast(lib.mg_dlpack_capsule_destructor,
                                 c_void_p).value
_strdup = ctypes.CDLL(None).strdup
_strdup.restype = c_void_p
_strdup.argtypes = [c_char_p]
CAPSULE_NAME = _strdup(b"dltensor")
if not CAPSULE_NAME:
    raise MemoryError("matgpu: no memory for the capsule name")

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [c_void_p, c_void_p, c_void_p]

# The destructor looks into capsules with this interpreter's own capsule
# API, handed to the library here, before any capsule exists: the library
# links no Python and looks no symbol up (embedded interpreters work).
lib.mg_dlpack_capsule_api(
    ctypes.cast(ctypes.pythonapi.PyCapsule_IsValid, c_void_p).value,
    ctypes.cast(ctypes.pythonapi.PyCapsule_GetPointer, c_void_p).value)


def capsule_new(managed):
    """A "dltensor" PyCapsule owning the DLManagedTensor at address
    managed."""
    return _capsule_new(managed, CAPSULE_NAME, CAPSULE_DESTRUCTOR)


class DLTensorHead(Structure):
    """The head of a DLManagedTensor (DLPack 0.6): its DLTensor."""
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", c_void_p),
                ("strides", c_void_p), ("byte_offset", ctypes.c_uint64)]


_PROBE_DELETER = ctypes.CFUNCTYPE(None, c_void_p)(lambda managed: None)
_torch_reads_offset = None


def _probe_torch_offset(torch):
    """Whether torch.from_dlpack adds DLTensor.byte_offset to data: asks
    it, with a 2-byte CPU tensor of its own whose byte_offset is 1."""

    class Managed(Structure):
        _fields_ = [("dl", DLTensorHead), ("ctx", c_void_p),
                    ("deleter", c_void_p)]

    data = (ctypes.c_uint8 * 2)(0, 1)
    shape = (ctypes.c_int64 * 1)(1)
    m = Managed()
    m.dl.data = ctypes.addressof(data)
    m.dl.device.device_type, m.dl.device.device_id = KDL_CPU, 0
    m.dl.ndim = 1
    m.dl.dtype.code, m.dl.dtype.bits, m.dl.dtype.lanes = 1, 8, 1
    m.dl.shape = ctypes.addressof(shape)
    m.dl.byte_offset = 1
    m.deleter = ctypes.cast(_PROBE_DELETER, c_void_p).value
    capsule = _capsule_new(ctypes.addressof(m), b"dltensor", None)
    t = torch.utils.dlpack.from_dlpack(capsule)
    got = int(t[0])
    del t, capsule  # before data, shape and m go
    return got == 1


def fold_offset_for_consumers():
    """Whether a DLPack tensor handed out here must carry its offset in
    data rather than in byte_offset: when the process has a torch whose
    from_dlpack ignores byte_offset (torch before 2.10, Debian's 1.13),
    which would read a view at an offset that is not a multiple of 256
    from the wrong bytes. Every consumer reads a folded tensor right."""
    global _torch_reads_offset
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if _torch_reads_offset is None:
        try:
            _torch_reads_offset = _probe_torch_offset(torch)
        except Exception:  # a torch without from_dlpack: fold, to be safe
            _torch_reads_offset = False
    return not _torch_reads_offset


def fold_offset(managed):
    """Moves the DLManagedTensor's byte_offset into its data pointer."""
    head = DLTensorHead.from_address(managed)
    if head.byte_offset:
        head.data = head.data + head.byte_offset
        head.byte_offset = 0


def last_cuda_error():
    """(code, name) of this thread's last CUDA error in libmatgpu."""
    name = c_char_p()
    code = lib.mg_cuda_last_error(byref(name))
    return code, (name.value or b"").decode()
