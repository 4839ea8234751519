"""test_matgpu.py - the matgpu Python binding with Debian's torch and numpy.

torch.from_dlpack on a CPU buffer shows the file's exact bytes without a
copy, the tensor stays valid after the Python object goes away (and its
memory is not handed to another load), views, the Loader's order and
errors; on the fake CUDA runtime (test_matgpu_py_fake), what "cuda" means
and the DLPack stream exchange. Runs under /usr/bin/python3 with PYTHONPATH at python/ and
MATGPU_LIB at the built library; exits 77 only when torch or numpy cannot be
imported.

Not for: the C API's edge cases (the cmocka tests of tests/gpu).
"""

import ctypes
import errno
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import types
import unittest

try:
    import numpy
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    print("test_matgpu: needs python3-torch and python3-numpy (%s)" % e)
    sys.exit(77)

import matgpu


def pattern(size, seed):
    return numpy.random.default_rng(seed).integers(
        0, 256, size, dtype=numpy.uint8).tobytes()


class MatgpuTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="matgpu-test-")
        self.ctx = matgpu.Context("cpu", staging_size=4096, staging_count=3,
                                  io_threads=2)

    def tearDown(self):
        self.ctx.close()
        shutil.rmtree(self.dir)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_from_dlpack_exact_bytes_no_copy(self):
        for size in (0, 1, 4095, 4096, 4097, 50 * 4096 + 3):
            data = pattern(size, size)
            buf = self.ctx.load(self.write("f%d" % size, data))
            t = torch.from_dlpack(buf)
            self.assertEqual(t.dtype, torch.uint8)
            self.assertEqual(tuple(t.shape), (size,))
            self.assertEqual(t.device.type, "cpu")
            self.assertEqual(t.numpy().tobytes(), data)
            if size:
                self.assertEqual(t.data_ptr(), buf.data_ptr)
            self.assertEqual(buf.__dlpack_device__(), (1, 0))

    def test_module_load_default_cpu(self):
        data = pattern(10000, 1)
        t = torch.from_dlpack(matgpu.load(self.write("a", data)))
        self.assertEqual(t.numpy().tobytes(), data)

    def test_tensor_outlives_buffer_object(self):
        data = pattern(64 * 1024, 2)
        path = self.write("a", data)
        buf = self.ctx.load(path)
        t = torch.from_dlpack(buf)
        del buf
        gc.collect()
        self.assertGreater(self.ctx.stats()["bytes_in_use"], 0)
        # Same-sized loads would reuse the memory if it had gone back.
        other = self.write("b", pattern(64 * 1024, 3))
        others = [self.ctx.load(other) for _ in range(3)]
        self.assertNotIn(t.data_ptr(), [o.data_ptr for o in others])
        self.assertEqual(t.numpy().tobytes(), data)
        del others, t
        gc.collect()
        self.assertEqual(self.ctx.stats()["bytes_in_use"], 0)

    def test_unconsumed_capsule_frees(self):
        buf = self.ctx.load(self.write("a", pattern(5000, 4)))
        capsule = buf.__dlpack__()
        buf.release()
        self.assertGreater(self.ctx.stats()["bytes_in_use"], 0)
        del capsule
        gc.collect()
        self.assertEqual(self.ctx.stats()["bytes_in_use"], 0)
        self.assertEqual(matgpu._lib.lib.mg_dlpack_capsules_leaked(), 0)

    def test_numpy_from_dlpack(self):
        data = pattern(4096 * 3, 5)
        arr = numpy.from_dlpack(self.ctx.load(self.write("a", data)))
        self.assertEqual(arr.dtype, numpy.uint8)
        self.assertEqual(arr.tobytes(), data)

    def test_view_dtype_and_shape(self):
        ref = numpy.arange(24, dtype=numpy.float32)
        # A header of 256 bytes: Debian's torch ignores DLPack's
        # byte_offset, which views at other offsets need (numpy below).
        header = b"\x00" * 256
        buf = self.ctx.load(self.write("a", header + ref.tobytes()))
        t = torch.from_dlpack(buf.view("float32", (4, -1), offset=256))
        self.assertEqual(t.dtype, torch.float32)
        self.assertEqual(tuple(t.shape), (4, 6))
        self.assertTrue(torch.equal(t, torch.from_numpy(ref.reshape(4, 6))))
        t2 = torch.from_dlpack(buf.view(torch.int64, offset=256))
        self.assertEqual(tuple(t2.shape), (12,))
        a = numpy.from_dlpack(buf.view("float32", (-1,), offset=264))
        self.assertEqual(a.tobytes(), ref[2:].tobytes())
        # a view at an offset that is not a multiple of 256 reads the
        # right bytes through torch too (whether it honours byte_offset
        # or not) and through numpy
        t4 = torch.from_dlpack(buf.view("float32", (-1,), offset=260))
        self.assertEqual(t4.numpy().tobytes(), ref[1:].tobytes())
        a4 = numpy.from_dlpack(buf.view("uint8", (4,), offset=256 + 4))
        self.assertEqual(a4.tobytes(), ref[1:2].tobytes())
        t3 = torch.from_dlpack(buf.view(numpy.dtype("<i4"), (2, 3)))
        self.assertEqual(tuple(t3.shape), (2, 3))
        self.assertEqual(t3.dtype, torch.int32)
        with self.assertRaises(ValueError):
            buf.view("float32", (100,))
        with self.assertRaises(ValueError):
            buf.view("float32", offset=2)
        with self.assertRaises(TypeError):
            buf.view("no-such-type")

    def test_loader_keeps_order(self):
        datas = [pattern(i * 1500, 10 + i) for i in range(10)]
        paths = [self.write("shard-%05d" % i, d) for i, d in
                 enumerate(datas)]
        got = [torch.from_dlpack(b).numpy().tobytes() for b in
               self.ctx.loader(paths, prefetch=3)]
        self.assertEqual(got, datas)
        got = [b.tobytes() for b in matgpu.Loader(self.dir, prefetch=2)]
        self.assertEqual(got, datas)

    def test_loader_budget(self):
        datas = [pattern(16 * 4096, i) for i in range(8)]
        paths = [self.write("s%d" % i, d) for i, d in enumerate(datas)]
        ld = self.ctx.loader(paths, prefetch=8, memory_budget=3 * 16 * 4096)
        for i, buf in enumerate(ld):
            self.assertEqual(buf.tobytes(), datas[i])
            buf.release()
        st = ld.stats()
        self.assertLessEqual(st["peak_bytes"], 3 * 16 * 4096)
        self.assertEqual(st["files_loaded"], 8)
        ld.close()

    def test_errors(self):
        missing = os.path.join(self.dir, "missing")
        with self.assertRaises(FileNotFoundError) as cm:
            matgpu.load(missing)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertEqual(cm.exception.filename, missing)
        with self.assertRaises(IsADirectoryError):
            self.ctx.load(self.dir)
        fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(fifo)
        with self.assertRaises(OSError) as cm:
            fd = os.open(fifo, os.O_RDWR)
            try:
                self.ctx.load("/proc/self/fd/%d" % fd)
            finally:
                os.close(fd)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        with self.assertRaises(ValueError):
            matgpu.load(missing, device="tpu")
        with self.assertRaises(NotADirectoryError):
            matgpu.Loader(self.write("file", b"x"))

    def test_loader_error_in_turn(self):
        good = self.write("good", b"abc")
        ld = matgpu.Loader([good, os.path.join(self.dir, "nope"), self.dir,
                            good])
        self.assertEqual(next(ld).tobytes(), b"abc")
        with self.assertRaises(FileNotFoundError):
            next(ld)
        with self.assertRaises(IsADirectoryError):
            next(ld)
        self.assertEqual(next(ld).tobytes(), b"abc")
        with self.assertRaises(StopIteration):
            next(ld)

    def test_cuda_device(self):
        path = self.write("a", pattern(100, 6))
        if matgpu.device_count() == 0:
            with self.assertRaises(OSError) as cm:
                matgpu.load(path, device="cuda")
            self.assertEqual(cm.exception.errno, errno.ENODEV)
            with self.assertRaises(OSError) as cm:
                matgpu.Context("cuda:3")
            self.assertEqual(cm.exception.errno, errno.ENODEV)
            self.assertEqual(matgpu.Context("auto").backend, "cpu")
            return
        buf = matgpu.load(path, device="cuda")
        self.assertEqual(buf.__dlpack_device__(), (2, 0))
        if torch.cuda.is_available():
            t = torch.from_dlpack(buf)
            self.assertEqual(t.device.type, "cuda")
            self.assertEqual(t.cpu().numpy().tobytes(), pattern(100, 6))

    def test_example_script(self):
        root = os.environ.get("MF_SOURCE_ROOT")
        if not root:
            self.skipTest("MF_SOURCE_ROOT not set")
        for i in range(3):
            self.write("shard-%05d.bin" % i, numpy.arange(
                i * 10, dtype=numpy.int32).tobytes())
        out = subprocess.run(
            [sys.executable, os.path.join(root, "docs", "examples",
                                          "matgpu_shards.py"),
             self.dir, "cpu"], check=True, capture_output=True,
            text=True).stdout
        self.assertIn("shard 1: 40 bytes, 10 tokens, max 9", out)
        self.assertIn("shard 2: 80 bytes, 20 tokens, max 19", out)


def fake_cudart():
    """The fake CUDA runtime preloaded by test_matgpu_py_fake, or None."""
    for path in os.environ.get("LD_PRELOAD", "").split():
        if "fakecuda" in path:
            return ctypes.CDLL(path)
    return None


class FakeCudaTest(unittest.TestCase):
    """The binding's CUDA side on the fake runtime of tests/gpu/fakecuda
    with two devices (test_matgpu_py_fake)."""

    def setUp(self):
        self.cudart = fake_cudart()
        if self.cudart is None or matgpu.device_count() < 2:
            self.skipTest("needs the fake CUDA runtime with 2 devices")
        self.dir = tempfile.mkdtemp(prefix="matgpu-test-")
        self.path = os.path.join(self.dir, "a")
        with open(self.path, "wb") as f:
            f.write(pattern(5000, 9))

    def tearDown(self):
        self.cudart.cudaSetDevice(0)
        shutil.rmtree(self.dir)

    def test_cuda_is_the_current_device(self):
        self.assertEqual(self.cudart.cudaSetDevice(1), 0)
        buf = matgpu.load(self.path, device="cuda")
        self.assertEqual(buf.__dlpack_device__(), (2, 1))
        self.assertEqual(matgpu.Context("cuda").device, "cuda:1")
        # torch's current device wins when torch has CUDA.
        cuda = types.SimpleNamespace(is_available=lambda: True,
                                     current_device=lambda: 0)
        real = sys.modules["torch"]
        sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)
        try:
            buf = matgpu.load(self.path, device="cuda")
        finally:
            sys.modules["torch"] = real
        self.assertEqual(buf.__dlpack_device__(), (2, 0))

    def test_cuda_unchanged_by_a_load_on_another_device(self):
        # A fresh thread never chose a device: "cuda" is device 0 before
        # and after loading on device 1 (torch's current device likewise).
        got = []

        def work():
            try:
                got.append(matgpu.load(self.path, device="cuda:1").device)
                got.append(matgpu.load(self.path, device="cuda").device)
            except Exception as e:  # reported below
                got.append(e)
        th = threading.Thread(target=work)
        th.start()
        th.join()
        self.assertEqual(got, ["cuda:1", "cuda:0"])

    def test_dlpack_stream(self):
        ctx = matgpu.Context("cuda:1")
        buf = ctx.load(self.path)
        with self.assertRaises(ValueError):
            buf.__dlpack__(stream=0)
        self.assertEqual(self.cudart.cudaSetDevice(1), 0)
        stream = ctypes.c_void_p()
        self.assertEqual(self.cudart.cudaStreamCreateWithFlags(
            ctypes.byref(stream), 1), 0)
        capsules = [buf.__dlpack__(stream=s) for s in
                    (None, 1, 2, -1, stream.value)]
        buf.release()
        del capsules
        gc.collect()
        self.assertEqual(ctx.stats()["bytes_in_use"], 0)
        self.assertEqual(matgpu._lib.lib.mg_dlpack_capsules_leaked(), 0)
        self.cudart.cudaStreamDestroy(stream)
        ctx.close()


class RealCudaTest(unittest.TestCase):
    """The binding on a real GPU with a CUDA torch (bench/gpu/device_run.sh
    on a machine with one): bytes, the current device, a view at an offset,
    and the release fenced on a consumer's non-blocking stream."""

    def setUp(self):
        if fake_cudart() is not None or not torch.cuda.is_available() or \
                matgpu.device_count() < 1:
            self.skipTest("needs a real GPU and torch with CUDA")
        self.dir = tempfile.mkdtemp(prefix="matgpu-test-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_bytes_and_current_device(self):
        data = pattern(40 << 20, 11)  # many staging slots
        path = self.write("a", data)
        dev = torch.cuda.current_device()
        with matgpu.Context("cuda", staging_size=1 << 20,
                            staging_count=3) as ctx:
            buf = ctx.load(path)
            self.assertEqual(buf.__dlpack_device__(), (2, dev))
            t = torch.from_dlpack(buf)
            self.assertEqual(t.device, torch.device("cuda", dev))
            self.assertEqual(t.cpu().numpy().tobytes(), data)
            # a view at an offset that is not the start of an allocation
            v = torch.from_dlpack(buf.view("int32", offset=260))
            self.assertEqual(v.cpu().numpy().tobytes(),
                             data[260:260 + (len(data) - 260) // 4 * 4])
            del t, v
            buf.release()

    def test_release_fenced_on_a_side_stream(self):
        # A kernel queued on a non-blocking stream reads the tensor after
        # a long sleep; the tensor and buffer go away at once and the next
        # load (same size, other bytes) may take the same memory. The sum
        # must be of the first file's bytes.
        size = 16 << 20
        first, second = pattern(size, 21), pattern(size, 22)
        p1, p2 = self.write("first", first), self.write("second", second)
        want = int(numpy.frombuffer(first, dtype=numpy.uint8).sum(
            dtype=numpy.int64))
        with matgpu.Context("cuda") as ctx:
            side = torch.cuda.Stream()
            buf = ctx.load(p1)
            addr = buf.data_ptr
            with torch.cuda.stream(side):
                t = torch.from_dlpack(buf)
                torch.cuda._sleep(1 << 30)  # about half a second
                total = t.to(torch.int64).sum()
            del t
            buf.release()
            gc.collect()
            buf2 = ctx.load(p2)
            reused = buf2.data_ptr == addr
            side.synchronize()
            self.assertEqual(int(total), want)
            t2 = torch.from_dlpack(buf2)
            self.assertEqual(t2.cpu().numpy().tobytes(), second)
            print("fence test: memory reused: %s" % reused, file=sys.stderr)
            del t2
            buf2.release()

    def test_loader_on_device(self):
        files = [self.write("s%d" % i, pattern(3 << 20, 30 + i))
                 for i in range(6)]
        seen = []
        with matgpu.Loader(files, device="cuda", prefetch=2) as it:
            for buf in it:
                t = torch.from_dlpack(buf)
                seen.append(t.cpu().numpy().tobytes())
                del t
                buf.release()
        self.assertEqual(seen, [pattern(3 << 20, 30 + i) for i in range(6)])


if __name__ == "__main__":
    unittest.main()
