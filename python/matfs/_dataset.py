"""ShardDataset: the records of a snapshot's shards as a torch
IterableDataset, split between ranks and DataLoader workers.

Fixed-size records come out as tensors, read in blocks through
numpy.memmap (one tensor per record, or per batch_size records); lines,
TFRecord frames and WebDataset tar samples (a spec's `records`) as their
bytes. Imported only when matfs.ShardDataset is first used, so the rest of
matfs works without torch. Not for: shuffling records within a shard, or
`records: index` shards (their ends are not readable through the mount
yet).
"""

import operator
import os
import struct
import tarfile

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ._shards import list_shards, resolve_rank, split
from ._xattr import open_shard

# Record types numpy has and torch lacks (Debian's torch 1.13 cannot take
# unsigned integers wider than 8 bits): widened to the next signed type,
# which holds every value. Always, whatever the torch, so that a training
# script sees the same tensors everywhere.
_WIDEN = {np.dtype("uint16"): np.dtype("int32"),
          np.dtype("uint32"): np.dtype("int64")}

# Records converted (widened or byte-swapped) a block at a time: memory
# stays bounded whatever the shard's size.
_BLOCK_BYTES = 1 << 20


def _tensor_dtype(dtype):
    """(numpy dtype the records are converted to, or None when torch takes
    them as stored; the torch dtype yielded)."""
    if dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError("matfs: dtype %s has fields or a shape; give the "
                        "record's shape with shape=" % (dtype,))
    native = dtype.newbyteorder("=")
    target = _WIDEN.get(native, native)
    try:
        torch_dtype = torch.from_numpy(np.zeros(1, target)).dtype
    except TypeError:
        raise TypeError("matfs: torch has no dtype for %s records and "
                        "none wider holds every value; store them as a "
                        "type torch has (int64, float32, ...)" %
                        (dtype,)) from None
    return (None if target == dtype else target), torch_dtype


def _shape(shape):
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise ValueError("matfs: bad record shape %r" % (shape,)) from None
    if any(s < 1 for s in shape):
        raise ValueError("matfs: bad record shape %r: every dimension must "
                         "be 1 or more" % (shape,))
    return shape


_FRAMINGS = ("lines", "tfrecord", "tar", "index")


def parse_framing(text):
    """user.matfs.framing as (kind, size, drop): ("fixed", 2048, False)
    for "2048", ("fixed", 2048, True) for "{size: 2048, tail: drop}",
    ("lines", 0, False) ...; None for None."""
    if text is None:
        return None
    if text in _FRAMINGS:
        return text, 0, False
    if text.isdigit():
        return "fixed", int(text), False
    if text.startswith("{size: ") and text.endswith(", tail: drop}"):
        return "fixed", int(text[7:-13]), True
    raise ValueError("matfs: unknown framing %r" % (text,))


def _folder_framing(folder):
    try:
        return parse_framing(
            os.getxattr(folder, "user.matfs.framing").decode())
    except OSError:
        return None  # off a mount, or a spec without records


def _count(value, what):
    """value as an int >= 0 (numpy integers too), else ValueError."""
    try:
        if not isinstance(value, bool) and operator.index(value) >= 0:
            return operator.index(value)
    except TypeError:
        pass
    raise ValueError("matfs: %s must be an integer >= 0, not %r" %
                     (what, value))


class ShardDataset(IterableDataset):
    """The records of a snapshot's shards.

    path is a snapshot folder or a name symlink on a mount (resolved once,
    here: every epoch reads the snapshot the name pointed at when the
    dataset was made).

    Fixed-size records: each shard file is a flat array of records of
    dtype (anything numpy.dtype takes: "<u4", np.float16, ...) and shape
    (an int or a tuple; () for scalars), read through numpy.memmap a block
    at a time; each record is yielded as a tensor of that shape, or, with
    batch_size=B, each B records of a shard as one tensor of shape (B,
    *shape) (a shard's last one may hold fewer; use DataLoader with
    batch_size=None). With `records: SIZE` in the spec (user.matfs.framing),
    shape defaults to the record: SIZE / itemsize elements. tail="drop"
    leaves out a remainder shorter than one record at a shard's end
    (default: the spec's tail, else "error", which raises ValueError).

    Other framings (the spec's `records`, read from the mount): give no
    dtype; `lines` yields each line's bytes (its newline kept), `tfrecord`
    each frame's data, `tar` each WebDataset sample as a dict of the bytes
    of its members by extension, with "__key__" (as webdataset does).

    Split: the shards go to ranks as matfs.shards() gives them (shard k to
    rank k mod world_size; rank and world_size default to RANK and
    WORLD_SIZE), then a rank's shards to its DataLoader workers the same
    way (its i-th shard to worker i mod num_workers). Every record is read
    once per epoch by exactly one worker of one rank.

    shuffle=True permutes the shards before the split, from seed and the
    epoch given to set_epoch() (like DistributedSampler: every rank must
    use the same seed, and call set_epoch before each epoch's iterator is
    made, or each epoch repeats the order). Records within a shard keep
    their order.

    Tensors: uint16 and uint32 records, which torch lacks, are widened to
    int32 and int64 (torch_dtype says which); non-native byte order is
    swapped; a dtype torch cannot hold even widened (uint64, strings)
    raises TypeError here.

    Raises here ValueError for a bad rank, world_size, shape, seed, tail
    or batch_size, a shape that is not the spec's record, a dtype, shape
    or batch_size given for records that come as bytes, `records: index`;
    TypeError for fixed records without a dtype; a folder without shard
    files or with fewer shards than world_size; OSError when path cannot
    be listed. While iterating: ValueError naming the file whose size is
    not a multiple of the record's (with tail="error"), the
    OSError of opening a shard, and matfs.ShardError (an OSError, EIO) with
    the failure's error and stderr tail when its pipeline failed.
    """

    def __init__(self, path, dtype=None, shape=None, rank=None,
                 world_size=None, shuffle=False, seed=0, tail=None,
                 batch_size=None):
        super().__init__()
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.folder, self._all = list_shards(path)
        split(self._all, self.rank, self.world_size, path)
        self.framing = _folder_framing(self.folder)
        self.shuffle, self.seed, self.epoch = bool(shuffle), _count(
            seed, "seed"), 0
        kind = self.framing[0] if self.framing else "fixed"
        if kind != "fixed":
            self._variable(kind, dtype, shape, tail, batch_size)
            return
        self.kind = "fixed"
        if dtype is None:
            raise TypeError("matfs: '%s' holds fixed-size records: give "
                            "their dtype" % (os.fspath(path),))
        self.dtype = np.dtype(dtype)
        self._convert, self.torch_dtype = _tensor_dtype(self.dtype)
        self.shape = self._fixed_shape(shape)
        self.record_bytes = self.dtype.itemsize * int(np.prod(self.shape))
        drop = bool(self.framing and self.framing[2])
        self.tail = _tail(tail, "drop" if drop else "error")
        self.batch_size = None if batch_size is None else max(
            1, _count(batch_size, "batch_size"))

    def _variable(self, kind, dtype, shape, tail, batch_size):
        if kind == "index":
            raise ValueError("matfs: '%s' has records: index, whose ends "
                             "cannot be read through the mount yet" %
                             (self.folder,))
        if dtype is not None or shape is not None or batch_size is not None:
            raise ValueError("matfs: '%s' holds %s records: they come as "
                             "bytes; give no dtype, shape or batch_size" %
                             (self.folder, kind))
        _tail(tail, "error")
        self.kind, self.dtype, self.shape, self.tail = kind, None, None, None
        self.batch_size = self.torch_dtype = None

    def _fixed_shape(self, shape):
        """The record's shape: given, or from the spec's record size."""
        size = self.framing[1] if self.framing else None
        if shape is None:
            if size is None:
                return ()
            if size % self.dtype.itemsize:
                raise ValueError("matfs: records of %d bytes are no whole "
                                 "number of %s" % (size, self.dtype))
            n = size // self.dtype.itemsize
            return () if n == 1 else (n,)
        shape = _shape(shape)
        got = self.dtype.itemsize * int(np.prod(shape))
        if size is not None and got != size:
            raise ValueError("matfs: shape %r of %s is %d bytes, but the "
                             "spec's records are %d bytes" %
                             (shape, self.dtype, got, size))
        return shape

    def set_epoch(self, epoch):
        """Sets the epoch the shuffle derives from (>= 0); call it before
        making each epoch's iterator. DataLoader workers get the dataset as
        it is when the iterator starts; with persistent_workers=True they
        keep the epoch they started with."""
        self.epoch = _count(epoch, "epoch")

    def files(self, worker=0, num_workers=1):
        """The shard files worker (of num_workers) of this rank reads this
        epoch, in the order it reads them."""
        if not 0 <= worker < num_workers:
            raise ValueError("matfs: worker %r is not in 0..%r" %
                             (worker, num_workers - 1))
        order = self._all
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch])
            order = [order[i] for i in rng.permutation(len(order))]
        mine = order[self.rank::self.world_size]
        return mine[worker::num_workers]

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        read = {"fixed": self._records, "lines": _lines,
                "tfrecord": _tfrecords, "tar": _samples}[self.kind]
        for path in self.files(worker, workers):
            yield from read(path)

    def _records(self, path):
        # Opening a shard on a mount computes it if needed and waits; then
        # fstat has its exact size (stat before may say 0).
        with open_shard(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size % self.record_bytes and self.tail == "error":
                raise ValueError(
                    "matfs: '%s': %d bytes is not a multiple of the %d-byte "
                    "record (%s, shape %r; tail='drop' leaves the %d bytes "
                    "over out)" % (path, size, self.record_bytes,
                                   self.dtype, self.shape,
                                   size % self.record_bytes))
            n = size // self.record_bytes
            if n == 0:
                return
            # Copy-on-write pages: writable for torch, the file untouched.
            records = np.memmap(f, dtype=self.dtype, mode="c",
                                shape=(n,) + self.shape)
        # a block at a time: one tensor per block, records as its views
        step = self.batch_size or max(1, _BLOCK_BYTES // self.record_bytes)
        for start in range(0, n, step):
            block = records[start:start + step]
            block = torch.from_numpy(block if self._convert is None else
                                     block.astype(self._convert))
            if self.batch_size:
                yield block
            else:
                yield from block.unbind(0)


def _tail(tail, default):
    tail = default if tail is None else tail
    if tail not in ("error", "drop"):
        raise ValueError("matfs: tail must be 'error' or 'drop', not %r" %
                         (tail,))
    return tail


# ---- records of other framings, as bytes ----

_READ = 1 << 20


def _lines(path):
    """Each line's bytes, its newline kept; a last line without one too."""
    with open_shard(path) as f:
        yield from f


def _tfrecords(path):
    """Each TFRecord frame's data (the daemon checked the CRCs when it
    stored the shard)."""
    with open_shard(path) as raw:
        f = open(raw.fileno(), "rb", buffering=_READ, closefd=False)
        while True:
            head = f.read(12)
            if not head:
                return
            if len(head) < 12:
                raise ValueError("matfs: '%s': TFRecord frame cut short" %
                                 (path,))
            (length,) = struct.unpack("<Q", head[:8])
            data = f.read(length)
            if len(data) < length or len(f.read(4)) < 4:
                raise ValueError("matfs: '%s': TFRecord frame cut short" %
                                 (path,))
            yield data


def _split_name(name):
    """webdataset's base_plus_ext: (key, extension) split at the first dot
    of the last component."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    key = (folder + "/" if folder else "") + stem
    return key, ext if dot else ""


def _samples(path):
    """Each WebDataset sample: consecutive members sharing a key, as
    {"__key__": key, extension: bytes, ...}."""
    with open_shard(path) as f:
        sample = None
        with tarfile.open(fileobj=f, mode="r|") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                key, ext = _split_name(member.name)
                if sample is not None and sample["__key__"] != key:
                    yield sample
                    sample = None
                if sample is None:
                    sample = {"__key__": key}
                sample[ext] = tar.extractfile(member).read()
        if sample is not None:
            yield sample
