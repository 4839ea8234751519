"""test_python_unit.py - the matfs Python package on a plain folder laid out
like a snapshot (shard-NNNNN.u32 files): matfs.shards' split between
ranks, ShardDataset's split between ranks and DataLoader workers (every
record exactly once, also shuffled), set_epoch's deterministic shuffle,
record dtypes torch lacks, bad arguments, a 2-worker DataLoader over
real files, and BatchDataset's readers of batch files.

Runs under /usr/bin/python3 (Debian's numpy and torch) with PYTHONPATH at
python/. The tests that need torch or numpy are skipped without them.

Not for: a real mount (test_python_mount.sh) or pip (test_python_install.sh).
"""

import collections
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from types import SimpleNamespace
from unittest import mock

import matfs
import matfs._shards

try:
    import numpy as np
    import torch
    import torch.utils.data
    HAVE_TORCH = True
except ImportError:  # pragma: no cover - depends on the machine
    HAVE_TORCH = False


def names(paths):
    return [os.path.basename(p) for p in paths]


class Folder(unittest.TestCase):
    """A temporary folder; snapshot() lays out shard files in it."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="matfs-py-")
        self.env = mock.patch.dict(os.environ)
        self.env.start()
        os.environ.pop("RANK", None)
        os.environ.pop("WORLD_SIZE", None)

    def tearDown(self):
        self.env.stop()
        shutil.rmtree(self.dir)

    def snapshot(self, contents, suffix=".u32", name="snap"):
        """A folder with shard k holding contents[k] (bytes); returns it."""
        folder = os.path.join(self.dir, name)
        os.mkdir(folder)
        digits = 6 if len(contents) > 100000 else 5
        for k, data in enumerate(contents):
            path = os.path.join(folder, "shard-%0*d%s" % (digits, k, suffix))
            with open(path, "wb") as f:
                f.write(data)
        return folder


class ShardsTest(Folder):
    def test_split_as_file_policy(self):
        snap = self.snapshot([b"x"] * 10)
        for world in (1, 2, 3, 4, 10):
            got = [names(matfs.shards(snap, r, world)) for r in range(world)]
            for r in range(world):
                self.assertEqual(got[r], ["shard-%05d.u32" % k for k in
                                          range(r, 10, world)])
            # every shard to exactly one rank
            flat = sorted(n for g in got for n in g)
            self.assertEqual(flat, sorted(os.listdir(snap)))

    def test_sorted_by_index_not_name(self):
        snap = os.path.join(self.dir, "big")
        os.mkdir(snap)
        for name in ("shard-100000", "shard-99999", "shard-00002",
                     "shard-00010", ".hidden", "snapshot.metadata",
                     "notes.txt"):
            open(os.path.join(snap, name), "w").close()
        self.assertEqual(names(matfs.shards(snap, 0, 1)), [
            "shard-00002", "shard-00010", "shard-99999", "shard-100000"])
        self.assertEqual(names(matfs.shards(snap, 1, 2)), [
            "shard-00010", "shard-100000"])

    def test_name_symlink_resolved_once(self):
        snap = self.snapshot([b"a", b"b", b"c"], suffix="", name="3f9c")
        link = os.path.join(self.dir, "tokens")
        os.symlink("3f9c", link)
        got = matfs.shards(link, 0, 1)
        self.assertEqual(got, [os.path.join(os.path.realpath(snap),
                                            "shard-%05d" % k)
                               for k in range(3)])
        # the paths keep naming that snapshot when the name moves on
        os.unlink(link)
        os.mkdir(os.path.join(self.dir, "other"))
        os.symlink("other", link)
        self.assertTrue(all(os.path.exists(p) for p in got))

    def test_rank_and_world_size_from_environment(self):
        snap = self.snapshot([b"x"] * 8)
        self.assertEqual(len(matfs.shards(snap)), 8)  # 0 of 1
        os.environ.update(RANK="3", WORLD_SIZE="4")
        self.assertEqual(names(matfs.shards(snap)),
                         ["shard-00003.u32", "shard-00007.u32"])
        # given values win over the environment
        self.assertEqual(names(matfs.shards(snap, rank=1)),
                         ["shard-00001.u32", "shard-00005.u32"])
        self.assertEqual(names(matfs.shards(snap, 0, 8)), ["shard-00000.u32"])
        os.environ["RANK"] = "4"
        with self.assertRaisesRegex(ValueError, r"rank 4 \(RANK=4 in the "
                                    r"environment\) is not in 0\.\.3 for "
                                    r"world_size 4 \(WORLD_SIZE=4"):
            matfs.shards(snap)
        for bad in ("1_0", "\u0661", "0x1"):
            os.environ["RANK"] = bad
            with self.assertRaisesRegex(ValueError, "environment is not an "
                                        "integer"):
                matfs.shards(snap)
        os.environ["RANK"] = "one"
        with self.assertRaisesRegex(ValueError, "RANK='one' in the "
                                    "environment is not an integer"):
            matfs.shards(snap)
        os.environ.update(RANK="0", WORLD_SIZE="0")
        with self.assertRaisesRegex(ValueError, "world_size 0"):
            matfs.shards(snap)

    def test_bad_rank_and_world_size(self):
        snap = self.snapshot([b"x"] * 4)
        for rank, world, what in ((-1, 2, "rank -1"), (2, 2, "rank 2"),
                                  (0, 0, "world_size 0"),
                                  (0, -3, "world_size -3"),
                                  (True, 2, "rank must be an integer"),
                                  ("1", 2, "rank must be an integer"),
                                  (1.0, 2, "rank must be an integer"),
                                  (0, 2.5, "world_size must be")):
            with self.assertRaisesRegex(ValueError, what):
                matfs.shards(snap, rank, world)

    def test_fewer_shards_than_ranks(self):
        snap = self.snapshot([b"x"] * 3)
        with self.assertRaisesRegex(ValueError, r"has 3 shards, fewer than "
                                    r"world_size 4"):
            matfs.shards(snap, 0, 4)

    def test_not_a_snapshot(self):
        with self.assertRaisesRegex(ValueError, "no shard-NNNNN files in"):
            matfs.shards(self.dir, 0, 1)
        with self.assertRaises(FileNotFoundError):
            matfs.shards(os.path.join(self.dir, "missing"), 0, 1)
        path = os.path.join(self.dir, "file")
        open(path, "w").close()
        with self.assertRaises(NotADirectoryError):
            matfs.shards(path, 0, 1)


class XattrTest(Folder):
    def test_not_on_a_mount(self):
        snap = self.snapshot([b"x"])
        shard = os.path.join(snap, "shard-00000.u32")
        for fn, path in ((matfs.state, shard), (matfs.state, snap),
                         (matfs.fingerprint, snap),
                         (matfs.fingerprint, shard)):
            with self.assertRaises(OSError) as cm:
                fn(path)
            self.assertIn(cm.exception.errno, (errno.ENODATA, errno.ENOTSUP))
            self.assertIn("not a shard or snapshot folder of a matfs mount",
                          str(cm.exception))
        with self.assertRaises(FileNotFoundError):
            matfs.state(os.path.join(snap, "missing"))
        with self.assertRaises(FileNotFoundError):
            matfs.fingerprint(os.path.join(snap, "missing"))

    def test_torch_not_imported(self):
        # matfs without torch: shards() works, ShardDataset says why not.
        snap = self.snapshot([b"x"] * 2)
        code = ("import sys; sys.modules['torch'] = None; import matfs; "
                "print(len(matfs.shards(sys.argv[1], 0, 1)));\n"
                "try:\n    matfs.ShardDataset\n"
                "except ImportError as e:\n    print('ImportError')\n")
        out = subprocess.run([sys.executable, "-c", code, snap],
                             capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.split(), ["2", "ImportError"])
        out = subprocess.run([sys.executable, "-c", "import matfs, sys; "
                              "print('torch' in sys.modules)"],
                             capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "False")


class ShardErrorTest(Folder):
    """A shard whose pipeline failed: EIO at open. Off a mount the xattrs
    are faked; test_python_mount.sh has none that fail, so the errno and
    the attributes are the mount's contract (docs/guide.md)."""

    def test_failed_shard_carries_error_and_stderr(self):
        snap = self.snapshot([b"x"])
        shard = os.path.join(snap, "shard-00000.u32")
        attrs = {"user.matfs.error": b"stage 0 'python3' exited with "
                 b"status 1",
                 "user.matfs.stderr": b"Traceback...\nKeyError: 'text'\n"}

        def getxattr(path, name):
            if name in attrs:
                return attrs[name]
            raise OSError(errno.ENODATA, "no attr")

        with mock.patch("builtins.open",
                        side_effect=OSError(errno.EIO, "Input/output error")), \
                mock.patch("os.getxattr", side_effect=getxattr):
            with self.assertRaises(matfs.ShardError) as cm:
                matfs.open_shard(shard)
        e = cm.exception
        self.assertIsInstance(e, OSError)
        self.assertEqual(e.errno, errno.EIO)
        self.assertEqual(e.filename, shard)
        self.assertEqual(e.error, "stage 0 'python3' exited with status 1")
        self.assertIn("KeyError: 'text'", e.stderr)
        self.assertIn("failed: stage 0 'python3' exited with status 1",
                      str(e))
        self.assertIn("KeyError: 'text'", str(e))

    def test_other_errors_pass_through(self):
        with self.assertRaises(FileNotFoundError):
            matfs.open_shard(os.path.join(self.dir, "missing"))
        snap = self.snapshot([b"abc"])
        with matfs.open_shard(os.path.join(snap, "shard-00000.u32")) as f:
            self.assertEqual(f.read(), b"abc")


def fake_worker(worker, workers):
    """Patches get_worker_info as a DataLoader worker process sees it."""
    return mock.patch("matfs._dataset.get_worker_info", return_value=(
        SimpleNamespace(id=worker, num_workers=workers)))


@unittest.skipUnless(HAVE_TORCH, "needs python3-numpy and python3-torch")
class DatasetTest(Folder):
    def records_snapshot(self, shards=11, width=2):
        """Shard k holds k+1 records of width uint32 values, each value
        unique and some above 2**31; returns (folder, every record)."""
        contents, records = [], []
        for k in range(shards):
            base = (k << 20) + (0x80000000 if k % 2 else 0)
            arr = np.arange(base, base + (k + 1) * width,
                            dtype="<u4").reshape(-1, width)
            contents.append(arr.tobytes())
            records += [tuple(int(v) for v in row) for row in arr]
        return self.snapshot(contents), records

    def read_all(self, ds, workers):
        got = []
        for w in range(workers):
            with fake_worker(w, workers):
                got += [tuple(t.tolist()) for t in ds]
        return got

    def test_every_record_once_4_ranks_2_workers(self):
        snap, records = self.records_snapshot()
        for shuffle in (False, True):
            for epoch in (0, 1, 2):
                got = []
                for rank in range(4):
                    ds = matfs.ShardDataset(snap, "<u4", (2,), rank=rank,
                                            world_size=4, shuffle=shuffle,
                                            seed=7)
                    ds.set_epoch(epoch)
                    got += self.read_all(ds, 2)
                self.assertEqual(collections.Counter(got),
                                 collections.Counter(records))
                self.assertEqual(len(got), len(records))

    def test_split_matches_shards(self):
        snap, _ = self.records_snapshot()
        for rank in range(4):
            ds = matfs.ShardDataset(snap, "<u4", (2,), rank=rank,
                                    world_size=4)
            mine = matfs.shards(snap, rank, 4)
            self.assertEqual(ds.files(0, 1), mine)
            self.assertEqual(ds.files(0, 2), mine[0::2])
            self.assertEqual(ds.files(1, 2), mine[1::2])
            with fake_worker(1, 2):
                first = next(iter(ds))
            self.assertEqual(first.tolist(), np.fromfile(
                mine[1], dtype="<u4")[:2].tolist())
        os.environ.update(RANK="2", WORLD_SIZE="4")
        ds = matfs.ShardDataset(snap, "<u4", (2,))
        self.assertEqual((ds.rank, ds.world_size), (2, 4))
        self.assertEqual(ds.files(), matfs.shards(snap, 2, 4))

    def test_set_epoch_shuffles_deterministically(self):
        snap, _ = self.records_snapshot(shards=16)
        plain = matfs.ShardDataset(snap, "<u4", (2,)).files()

        def order(epoch, seed=5, rank=0, world=1):
            ds = matfs.ShardDataset(snap, "<u4", (2,), rank=rank,
                                    world_size=world, shuffle=True,
                                    seed=seed)
            ds.set_epoch(epoch)
            return ds.files()

        self.assertEqual(order(0), order(0))
        self.assertEqual(order(3), order(3))
        self.assertEqual(sorted(order(1)), plain)
        orders = {tuple(order(e)) for e in range(5)}
        self.assertEqual(len(orders), 5)  # each epoch its own order
        self.assertNotIn(tuple(plain), orders)
        self.assertNotEqual(order(0, seed=5), order(0, seed=6))
        # ranks split the same permutation: one rank's order is a slice
        for rank in range(4):
            self.assertEqual(order(2, rank=rank, world=4),
                             order(2)[rank::4])
        # without set_epoch, every epoch repeats epoch 0's order
        ds = matfs.ShardDataset(snap, "<u4", (2,), shuffle=True, seed=5)
        self.assertEqual(ds.files(), order(0))
        ds.set_epoch(np.int64(3))  # what a numpy loop counter gives
        self.assertEqual(ds.files(), order(3))
        for bad in (-1, 1.5, True, "2"):
            with self.assertRaisesRegex(ValueError, "epoch must be"):
                ds.set_epoch(bad)
        with self.assertRaisesRegex(ValueError, "seed must be"):
            matfs.ShardDataset(snap, "<u4", seed=-1)

    def test_records_and_dtypes(self):
        values = [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 12345]
        snap = self.snapshot([np.array(values, dtype="<u4").tobytes()])
        ds = matfs.ShardDataset(snap, "<u4")
        self.assertEqual(ds.torch_dtype, torch.int64)
        got = list(ds)
        self.assertEqual([t.shape for t in got], [torch.Size([])] * 6)
        self.assertEqual([int(t) for t in got], values)
        self.assertTrue(all(t.dtype == torch.int64 for t in got))

        u16 = self.snapshot([np.array([65535, 7, 40000, 1],
                                      dtype="<u2").tobytes()], name="u16")
        got = list(matfs.ShardDataset(u16, np.uint16, shape=2))
        self.assertEqual([t.tolist() for t in got], [[65535, 7], [40000, 1]])
        self.assertEqual(got[0].dtype, torch.int32)

        big = self.snapshot([np.array([1, -2, 300], dtype=">i4").tobytes()],
                            name="big")
        got = list(matfs.ShardDataset(big, ">i4"))
        self.assertEqual([int(t) for t in got], [1, -2, 300])
        self.assertEqual(got[0].dtype, torch.int32)

        f16 = np.arange(12, dtype="float16").reshape(2, 2, 3)
        half = self.snapshot([f16.tobytes()], name="half")
        got = list(matfs.ShardDataset(half, "float16", shape=(2, 3)))
        self.assertEqual(got[0].dtype, torch.float16)
        self.assertTrue(torch.equal(torch.stack(got), torch.from_numpy(f16)))

        for bad in ("<u8", "U4", "O", [("a", "<i4")]):
            with self.assertRaises(TypeError):
                matfs.ShardDataset(snap, bad)
        for shape in ((0,), (2, -1), "x"):
            with self.assertRaisesRegex(ValueError, "shape"):
                matfs.ShardDataset(snap, "<u4", shape=shape)

    def test_widening_in_blocks(self):
        values = (np.arange(1000) + 2**32 - 1000).astype("<u4")
        snap = self.snapshot([values.tobytes()])
        with mock.patch("matfs._dataset._BLOCK_BYTES", 24):  # 3 records
            got = list(matfs.ShardDataset(snap, "<u4", shape=2))
        self.assertEqual(torch.stack(got).flatten().tolist(),
                         values.astype("int64").tolist())

    def test_records_writable_file_untouched(self):
        data = np.arange(8, dtype="<i8").tobytes()
        snap = self.snapshot([data])
        got = list(matfs.ShardDataset(snap, "<i8", shape=4))
        got[0][0] = 99  # copy-on-write pages: no warning, no change
        path = os.path.join(snap, "shard-00000.u32")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data)

    def test_ragged_shard_names_file(self):
        snap = self.snapshot([b"\0" * 8, b"\0" * 10, b""])
        ds = matfs.ShardDataset(snap, "<u4", shape=2)
        it = iter(ds)
        self.assertEqual(next(it).tolist(), [0, 0])
        with self.assertRaisesRegex(ValueError, r"'%s': 10 bytes is not a "
                                    r"multiple of the 8-byte record "
                                    r"\(uint32, shape \(2,\); tail='drop' "
                                    r"leaves the 2 bytes over out\)" %
                                    os.path.join(os.path.realpath(snap),
                                                 "shard-00001.u32")):
            next(it)
        empty = self.snapshot([b"", b"\1\0\0\0"], name="empty")
        self.assertEqual([int(t) for t in
                          matfs.ShardDataset(empty, "<u4")], [1])

    def test_construction_errors(self):
        snap = self.snapshot([b"\0" * 4] * 3)
        with self.assertRaisesRegex(ValueError, "fewer than world_size 4"):
            matfs.ShardDataset(snap, "<u4", rank=0, world_size=4)
        with self.assertRaisesRegex(ValueError, "rank 3"):
            matfs.ShardDataset(snap, "<u4", rank=3, world_size=3)
        with self.assertRaisesRegex(ValueError, "no shard-NNNNN files"):
            matfs.ShardDataset(self.dir, "<u4")

    def test_dataloader_two_workers(self):
        snap, records = self.records_snapshot(shards=9, width=3)
        ds = matfs.ShardDataset(snap, "<u4", shape=3, shuffle=True, seed=1)
        seen_orders = []
        for epoch in range(2):
            ds.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(ds, batch_size=4,
                                                 num_workers=2)
            got = []
            for batch in loader:
                self.assertEqual(batch.dtype, torch.int64)
                self.assertEqual(batch.shape[1], 3)
                got += [tuple(row) for row in batch.tolist()]
            self.assertEqual(collections.Counter(got),
                             collections.Counter(records))
            seen_orders.append(got)
        self.assertNotEqual(seen_orders[0], seen_orders[1])


def _framed(text):
    """ShardDataset reading the framing text as a mount's
    user.matfs.framing would give it."""
    return mock.patch("matfs._dataset._folder_framing",
                      lambda folder: matfs._dataset.parse_framing(text))


def _tf_frame(data):
    import struct
    n = struct.pack("<Q", len(data))
    return n + b"\0" * 4 + data + b"\0" * 4  # CRCs: the daemon's to check


@unittest.skipUnless(HAVE_TORCH, "needs python3-numpy and python3-torch")
class RecordsTest(Folder):
    def test_tail_drop(self):
        snap = self.snapshot([np.arange(5, dtype="<i4").tobytes() + b"xy",
                              b"z"])
        ds = matfs.ShardDataset(snap, "<i4", shape=2, tail="drop")
        self.assertEqual([t.tolist() for t in ds], [[0, 1], [2, 3]])
        with self.assertRaisesRegex(ValueError, "tail must be"):
            matfs.ShardDataset(snap, "<i4", tail="keep")
        # the spec's tail: drop is the default
        with _framed("{size: 8, tail: drop}"):
            ds = matfs.ShardDataset(snap, "<i4")
        self.assertEqual(ds.shape, (2,))
        self.assertEqual(len(list(ds)), 2)

    def test_shape_from_records(self):
        data = np.arange(1024, dtype="<u2").tobytes()
        snap = self.snapshot([data, data])
        with _framed("1024"):
            ds = matfs.ShardDataset(snap, "<u2")
            self.assertEqual(ds.shape, (512,))
            got = list(ds)
            with self.assertRaisesRegex(ValueError, "spec's records are "
                                        "1024 bytes"):
                matfs.ShardDataset(snap, "<u2", shape=(3,))
            with self.assertRaisesRegex(TypeError, "give their dtype"):
                matfs.ShardDataset(snap)
        self.assertEqual(len(got), 4)
        self.assertEqual(got[1].tolist(), list(range(512, 1024)))
        self.assertEqual(got[1].dtype, torch.int32)

    def test_batch_size_blocks(self):
        data = np.arange(70, dtype="<i8").tobytes()
        snap = self.snapshot([data, data[:80]])
        ds = matfs.ShardDataset(snap, "<i8", shape=5, batch_size=4)
        got = list(ds)
        self.assertEqual([tuple(t.shape) for t in got],
                         [(4, 5), (4, 5), (4, 5), (2, 5), (2, 5)])
        self.assertEqual(torch.cat(got[:4]).flatten().tolist(),
                         list(range(70)))
        loader = torch.utils.data.DataLoader(ds, batch_size=None,
                                             num_workers=2)
        self.assertEqual(sum(len(b) for b in loader), 16)

    def test_lines(self):
        snap = self.snapshot([b"one\ntwo\n\nlast", b"", b"x\n"])
        with _framed("lines"):
            got = list(matfs.ShardDataset(snap))
            with self.assertRaisesRegex(ValueError, "come as bytes"):
                matfs.ShardDataset(snap, "<u4")
        self.assertEqual(got, [b"one\n", b"two\n", b"\n", b"last",
                               b"x\n"])

    def test_tfrecord(self):
        snap = self.snapshot([_tf_frame(b"") + _tf_frame(b"abc"),
                              _tf_frame(b"z" * 3000)])
        with _framed("tfrecord"):
            got = list(matfs.ShardDataset(snap))
        self.assertEqual(got, [b"", b"abc", b"z" * 3000])

    def test_tar_samples(self):
        import io
        import tarfile
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for name, body in (("d/a.jpg", b"J"), ("d/a.cls", b"1"),
                               ("d/b.seg.png", b"P"), ("d/b.cls", b"2")):
                info = tarfile.TarInfo(name)
                info.size = len(body)
                t.addfile(info, io.BytesIO(body))
        snap = self.snapshot([buf.getvalue()])
        with _framed("tar"):
            got = list(matfs.ShardDataset(snap))
        self.assertEqual(got, [{"__key__": "d/a", "jpg": b"J", "cls": b"1"},
                               {"__key__": "d/b", "seg.png": b"P",
                                "cls": b"2"}])

    def test_index_refused(self):
        snap = self.snapshot([b"abc"])
        with _framed("index"), self.assertRaisesRegex(ValueError,
                                                     "records: index"):
            matfs.ShardDataset(snap)



@unittest.skipUnless(HAVE_TORCH, "needs python3-numpy and python3-torch")
class BatchFilesTest(unittest.TestCase):
    """BatchDataset's readers of batch files (docs/format.md, section
    10), on bytes: the mount's answers are test_python_batches.sh's."""

    def test_frames(self):
        from matfs._batches import _frames
        data = _tf_frame(b"") + _tf_frame(b"abc")
        self.assertEqual(_frames(data, "b"), [b"", b"abc"])
        for cut in (1, 15, len(data) - 1):
            with self.assertRaisesRegex(ValueError, "cut short"):
                _frames(data[:cut], "b")

    def test_lines(self):
        from matfs._batches import _lines
        self.assertEqual(_lines(b"a\n\nb\n", "b"), [b"a\n", b"\n", b"b\n"])
        self.assertEqual(_lines(b"", "b"), [])
        with self.assertRaisesRegex(ValueError, "newline"):
            _lines(b"a\nb", "b")

    def test_record_ends(self):
        import struct
        from matfs._batches import _cut

        def ends(*e):
            return struct.pack("<%dQ" % len(e), *e)
        self.assertEqual(_cut(b"abcdef", ends(1, 1, 6), "b"),
                         [b"a", b"", b"bcdef"])
        for bad in (ends(1, 5), ends(3, 2, 6), ends(7), b"\0" * 9):
            with self.assertRaises(ValueError):
                _cut(b"abcdef", bad, "b")


if __name__ == "__main__":
    unittest.main()
