"""ShardDataset: the records of a snapshot's shards as a torch
IterableDataset, split between ranks and DataLoader workers.

Imported only when matfs.ShardDataset is first used, so the rest of matfs
works without torch. Not for: records of varying size (read the files
yourself) or shuffling records within a shard.
"""

import operator
import os

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
    """The fixed-size records of a snapshot's shards, one tensor each.

    path is a snapshot folder or a name symlink on a mount (resolved once,
    here: every epoch reads the snapshot the name pointed at when the
    dataset was made). Each shard file is a flat array of records of
    dtype (anything numpy.dtype takes: "<u4", np.float16, ...) and shape
    (() for scalars, an int or a tuple), read through numpy.memmap; a
    record is yielded as a tensor of that shape.

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

    Raises here ValueError for a bad rank, world_size, shape or seed, a
    folder without shard files or with fewer shards than world_size;
    OSError when path cannot be listed. While iterating: ValueError
    naming the file whose size is not a multiple of the record's, the
    OSError of opening a shard, and matfs.ShardError (an OSError, EIO) with
    the failure's error and stderr tail when its pipeline failed.
    """

    def __init__(self, path, dtype, shape=(), rank=None, world_size=None,
                 shuffle=False, seed=0):
        super().__init__()
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.folder, self._all = list_shards(path)
        split(self._all, self.rank, self.world_size, path)
        self.dtype = np.dtype(dtype)
        self.shape = _shape(shape)
        self._convert, self.torch_dtype = _tensor_dtype(self.dtype)
        self.record_bytes = self.dtype.itemsize * int(np.prod(self.shape))
        self.shuffle, self.seed, self.epoch = bool(shuffle), _count(
            seed, "seed"), 0

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
        for path in self.files(worker, workers):
            yield from self._records(path)

    def _records(self, path):
        # Opening a shard on a mount computes it if needed and waits; then
        # fstat has its exact size (stat before may say 0).
        with open_shard(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size % self.record_bytes:
                raise ValueError(
                    "matfs: '%s': %d bytes is not a multiple of the %d-byte "
                    "record (%s, shape %r)" % (path, size, self.record_bytes,
                                               self.dtype, self.shape))
            if size == 0:
                return
            # Copy-on-write pages: writable for torch, the file untouched.
            records = np.memmap(f, dtype=self.dtype, mode="c",
                                shape=(size // self.record_bytes,) +
                                self.shape)
        if self._convert is None:
            tensor = torch.from_numpy(records)  # no copy: views of the map
            for i in range(len(tensor)):
                yield tensor[i]
            return
        step = max(1, _BLOCK_BYTES // self.record_bytes)
        for start in range(0, len(records), step):
            block = torch.from_numpy(
                records[start:start + step].astype(self._convert))
            for i in range(len(block)):
                yield block[i]
