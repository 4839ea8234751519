"""BatchDataset and BatchLoader: a rank's view of a snapshot's batch tree
(docs/format.md, sections 8 to 10) as a torch IterableDataset, with its
position kept in global batches so that a job saved on W ranks resumes on
any number of ranks.

The mount does the shuffle, the split between ranks and the framing: this
module only opens SNAP/batches/B/seed-S/epoch-E/rank-R-of-W[-from-G]/
batch-NNNNNN by number until ENOENT and turns each file into a tensor or a
list of records. Imported only when matfs.BatchDataset or
matfs.BatchLoader is first used, so the rest of matfs works without torch.
Not for: reading shards in shard order (ShardDataset).
"""

import io
import os
import struct
import tarfile

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ._dataset import _count, _folder_framing, _shape, _tensor_dtype
from ._dataset import _split_name
from ._shards import list_shards, resolve_rank
from ._xattr import ShardError, _optional, fingerprint, open_shard

# What state_dict() writes; load_state_dict() takes this version only.
STATE_VERSION = 1

# The grammar's bounds (docs/format.md, section 9).
_MAX_63 = (1 << 63) - 1
_MAX_64 = (1 << 64) - 1

# user.matfs.record_ends holds at most this many ends (64 KiB / 8).
_MAX_ENDS = 8192
# The most records a batch file the mount opens holds (EFBIG past it).
_MAX_BATCH = 1 << 20


def _bounded(value, what, most):
    value = _count(value, what)
    if value > most:
        raise ValueError("matfs: %s %d is over %d" % (what, value, most))
    return value


def _rank_and_world(rank, world_size):
    """Given values first, then torch.distributed's when a process group
    is initialized, then RANK and WORLD_SIZE (resolve_rank)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        if rank is None:
            rank = dist.get_rank()
        if world_size is None:
            world_size = dist.get_world_size()
    return resolve_rank(rank, world_size)


class BatchDataset(IterableDataset):
    """The batches of batch_size records that this rank reads of a
    snapshot with `records`, in the mount's shuffled order.

    path is a snapshot folder or a name symlink on a mount (resolved
    once, here, to its fingerprint folder). seed is an integer (0 to
    2^64 - 1) or None for the records in shard order (`seed-none`, for
    evaluation); every rank must give the same seed and batch_size. rank
    and world_size default to torch.distributed's when a process group is
    initialized, else to RANK and WORLD_SIZE, else 0 and 1.

    Rank R of W reads global batches G + R + kW (k = 0, 1, ...), G being
    where the epoch resumes (0 unless load_state_dict said otherwise):
    every rank gets the same number of batches, the epoch's last partial
    batch and incomplete round are left out. Within a rank, DataLoader
    worker i of n reads the rank's batches k = i, i + n, ..., so a
    DataLoader (batch_size=None) yields them in order.

    Each batch is one item. Fixed-size records: a tensor of shape
    (batch_size, *shape), dtype and shape as for ShardDataset (shape
    defaults to the record: its size / the dtype's itemsize elements;
    uint16 and uint32 widen to int32 and int64). Other framings (give no
    dtype or shape): a list of batch_size records, each the bytes of a
    line (with its newline), of a TFRecord frame's data, or of an
    `index` record, or for `tar` a WebDataset sample dict.

    Position: set_epoch(E) before each epoch's iterator (as with
    DistributedSampler); state_dict() gives where the job is, in global
    batches of the epoch, and load_state_dict() resumes there, here or on
    another number of ranks: every record of the epoch is read exactly
    once over the two runs (but those of the dropped tail). The count is
    kept by this object when it is iterated in this process (no
    DataLoader, or num_workers=0), or by matfs.BatchLoader when workers
    read: with a plain DataLoader and workers, state_dict() cannot know
    and raises RuntimeError.

    Raises here ValueError for a bad batch_size (1 to 2^20, the most a
    batch file holds), seed, rank, world_size or shape, a snapshot
    without `records`, a dtype or shape given for records that come as
    bytes, `records: index` or `tar` with more than 8192 records per
    batch (the most user.matfs.record_ends holds); TypeError for fixed
    records without a dtype. While iterating: matfs.ShardError (an
    OSError, EIO) when a pipeline a batch needs failed, FileNotFoundError
    when the snapshot is removed mid-epoch, OSError of opening a batch,
    ValueError when a batch file is not what its framing says.
    """

    def __init__(self, path, batch_size, seed=0, dtype=None, shape=None,
                 rank=None, world_size=None):
        super().__init__()
        self.folder = os.path.realpath(os.fspath(path))
        self.batch_size = _bounded(batch_size, "batch_size", _MAX_BATCH)
        if self.batch_size == 0:
            raise ValueError("matfs: batch_size must be 1 or more")
        self.seed = None if seed is None else _bounded(seed, "seed", _MAX_64)
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        self.framing = _folder_framing(self.folder)
        if self.framing is None:
            raise ValueError("matfs: '%s' is no snapshot with records (no "
                             "user.matfs.framing): it has no batch tree" %
                             (os.fspath(path),))
        self.fingerprint = fingerprint(self.folder)
        self.kind = self.framing[0]
        self.epoch = 0
        self._resume = 0  # global batch the next iterator starts at
        self._start = 0  # global batch the latest iterator started at
        self._done = 0  # batches it handed out
        self._counted = False  # whether this process counted them
        self._loader = False  # whether a BatchLoader counts for workers
        # set by a DataLoader worker that reads with nothing counting (a
        # plain DataLoader): state_dict() then cannot know the position
        self._uncounted = torch.zeros(1, dtype=torch.int64).share_memory_()
        if self.kind != "fixed":
            if dtype is not None or shape is not None:
                raise ValueError("matfs: '%s' holds %s records: they come "
                                 "as bytes; give no dtype or shape" %
                                 (self.folder, self.kind))
            if self.kind in ("index", "tar") and \
                    self.batch_size > _MAX_ENDS:
                raise ValueError(
                    "matfs: '%s' has records: %s, whose batches carry "
                    "their ends for at most %d records, not %d" %
                    (self.folder, self.kind, _MAX_ENDS, self.batch_size))
            self.dtype = self.shape = self.torch_dtype = None
            self._convert, self.batch_bytes = None, None
            return
        if dtype is None:
            raise TypeError("matfs: '%s' holds fixed-size records: give "
                            "their dtype" % (os.fspath(path),))
        self.dtype = np.dtype(dtype)
        self._convert, self.torch_dtype = _tensor_dtype(self.dtype)
        size = self.framing[1]
        if shape is None:
            if size % self.dtype.itemsize:
                raise ValueError("matfs: records of %d bytes are no whole "
                                 "number of %s" % (size, self.dtype))
            n = size // self.dtype.itemsize
            self.shape = () if n == 1 else (n,)
        else:
            self.shape = _shape(shape)
            got = self.dtype.itemsize * int(np.prod(self.shape))
            if got != size:
                raise ValueError("matfs: shape %r of %s is %d bytes, but "
                                 "the spec's records are %d bytes" %
                                 (self.shape, self.dtype, got, size))
        self.batch_bytes = self.batch_size * size

    # ---- where the job is ----

    def set_epoch(self, epoch):
        """Sets the epoch (0 to 2^64 - 1) the next iterator reads; call it
        before making each epoch's iterator, on every rank. Setting the
        epoch a loaded state is in keeps its resume point; another epoch
        starts at global batch 0."""
        epoch = _bounded(epoch, "epoch", _MAX_64)
        if epoch != self.epoch:
            self.epoch, self._resume = epoch, 0
            self._start = self._done = 0
            self._counted = False

    def state_dict(self):
        """Where the job is: a dict of plain values (for torch.save or
        JSON) naming the snapshot, seed, epoch and the global batch the
        epoch goes on at: where the latest iterator started plus the
        batches it has handed out times world_size (before any iterator,
        the resume point). Call it on any rank at a point where every rank
        has taken as many batches (a training step's end in a
        data-parallel job). Raises RuntimeError when DataLoader workers
        read the batches and nothing counted them (use matfs.BatchLoader).
        """
        if int(self._uncounted[0]):
            raise RuntimeError("matfs: DataLoader workers read this "
                               "BatchDataset and nothing counted the "
                               "batches handed out: iterate it through "
                               "matfs.BatchLoader for its state_dict()")
        at = self._resume
        if self._counted:
            at = self._start + self._done * self.world_size
        return {"version": STATE_VERSION, "fingerprint": self.fingerprint,
                "seed": self.seed, "epoch": self.epoch,
                "batch_size": self.batch_size, "global_batch": at,
                "records": at * self.batch_size,
                "world_size": self.world_size}

    def load_state_dict(self, state):
        """Resumes where state (from state_dict(), on any number of ranks
        and any batch_size that divides its records) says: its epoch
        becomes this dataset's, and the next iterator starts at its global
        batch (later ones at the epoch's start, as any new iterator).
        Raises ValueError for a state of another snapshot, seed or
        version, or one whose records fall on no batch boundary."""
        if not isinstance(state, dict) or \
                state.get("version") != STATE_VERSION:
            raise ValueError("matfs: not a BatchDataset state of version "
                             "%d: %r" % (STATE_VERSION, state))
        for key in ("fingerprint", "seed"):
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    "matfs: the state is of %s %r, this dataset reads %r: "
                    "another order" % (key, state.get(key),
                                       getattr(self, key)))
        records = _bounded(state.get("records"), "records", _MAX_64)
        if records % self.batch_size:
            raise ValueError("matfs: the state is at record %d, which is no "
                             "batch boundary for batch_size %d" %
                             (records, self.batch_size))
        self.epoch = _bounded(state.get("epoch"), "epoch", _MAX_64)
        self._resume = _bounded(records // self.batch_size, "global batch",
                                _MAX_63)
        self._start = self._done = 0
        self._counted = False
        self._uncounted[0] = 0

    def _begin(self):
        """Called where the batches are handed out (this process) as an
        iterator starts: it starts at the resume point, which is spent."""
        self._start, self._done, self._counted = self._resume, 0, True
        self._resume = 0
        self._uncounted[0] = 0
        return self._start

    def _handed(self):
        self._done += 1

    # ---- the files ----

    def view(self, start=None):
        """The folder of this rank's batches for the current epoch,
        starting at global batch start (default: where the next iterator
        starts)."""
        start = self._resume if start is None else start
        view = "rank-%d-of-%d" % (self.rank, self.world_size)
        if start:
            view += "-from-%d" % (start,)
        seed = "none" if self.seed is None else str(self.seed)
        return os.path.join(self.folder, "batches", str(self.batch_size),
                            "seed-" + seed, "epoch-%d" % (self.epoch,),
                            view)

    def read(self, path):
        """The batch file at path as this dataset yields it; None when
        there is no such batch (ENOENT: past the epoch's end)."""
        try:
            f = open_shard(path)
        except FileNotFoundError:
            # the epoch's end, unless the snapshot itself went away (asked
            # of the daemon: the kernel may still have its folder cached)
            try:
                os.getxattr(self.folder, "user.matfs.fingerprint")
            except OSError as e:
                raise FileNotFoundError(
                    e.errno, "matfs: the snapshot '%s' is gone (%s): its "
                    "epoch cannot go on" % (self.folder,
                                            os.strerror(e.errno)),
                    path) from None
            return None
        except ShardError:
            # A batch carries no error of its own: the failed shard does.
            for shard in list_shards(self.folder)[1]:
                if _optional(shard, "state") == "failed":
                    raise ShardError(shard, _optional(shard, "error"),
                                     _optional(shard, "stderr")) from None
            raise
        with f:
            size = os.fstat(f.fileno()).st_size
            if self.kind == "fixed":
                return self._fixed(f, size, path)
            data = _read_all(f, size)
            if self.kind == "lines":
                return _lines(data, path)
            if self.kind == "tfrecord":
                return _frames(data, path)
            ends = os.getxattr(f.fileno(), "user.matfs.record_ends")
        if self.kind == "tar":
            # each sample by its end: two in a row of one key (from two
            # shards) stay two samples, as they are two records
            end = struct.unpack_from("<Q", ends, len(ends) - 8)[0] \
                if ends else 0
            cut = _cut(data[:end], ends, path)
            return [s for piece in cut for s in _samples(piece)]
        return _cut(data, ends, path)

    def _fixed(self, f, size, path):
        if size != self.batch_bytes:
            raise ValueError("matfs: '%s' is %d bytes, not %d records of %d"
                             % (path, size, self.batch_size,
                                self.framing[1]))
        out = np.empty((self.batch_size,) + self.shape, self.dtype)
        view = memoryview(out.reshape(-1).view(np.uint8))
        got = 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                raise ValueError("matfs: '%s' ended at byte %d of %d" %
                                 (path, got, size))
            got += n
        if self._convert is not None:
            out = out.astype(self._convert)
        return torch.from_numpy(out)

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            start = self._begin()  # this process hands the batches out
            worker, workers = 0, 1
        else:
            start, worker, workers = self._resume, info.id, info.num_workers
            if not self._loader:
                self._uncounted[0] = 1
        folder = self.view(start)
        k = worker
        while True:
            batch = self.read(os.path.join(folder, "batch-%06d" % (k,)))
            if batch is None:
                return
            if info is None:
                self._handed()
            yield batch
            k += workers


class BatchLoader(DataLoader):
    """A DataLoader for a BatchDataset that counts the batches it hands
    out, so that dataset.state_dict() knows the position whatever
    num_workers is. Takes DataLoader's arguments but batch_size,
    batch_sampler, sampler and shuffle (the dataset yields batches in
    the mount's order) and persistent_workers (a worker must see each
    epoch's set_epoch). Its state_dict() and load_state_dict() are the
    dataset's."""

    def __init__(self, dataset, **kwargs):
        if not isinstance(dataset, BatchDataset):
            raise TypeError("matfs: BatchLoader reads a BatchDataset, not "
                            "%s" % (type(dataset).__name__,))
        for key in ("batch_size", "batch_sampler", "sampler", "shuffle",
                    "persistent_workers"):
            if kwargs.get(key):
                raise ValueError("matfs: BatchLoader takes no %s: the mount "
                                 "makes the batches and their order" %
                                 (key,))
            kwargs.pop(key, None)
        super().__init__(dataset, batch_size=None, **kwargs)

    def __iter__(self):
        ds = self.dataset
        if self.num_workers == 0:
            yield from super().__iter__()  # the dataset counts itself
            return
        # The workers get the dataset as it is now, resume point included.
        ds._loader = True
        try:
            it = super().__iter__()
        finally:
            ds._loader = False
        ds._begin()
        for batch in it:
            ds._handed()
            yield batch

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state)


# ---- batch files of the framings that come as bytes ----


def _read_all(f, size):
    data = f.read()
    if len(data) != size:
        raise ValueError("matfs: '%s' read %d bytes, its size is %d" %
                         (f.name, len(data), size))
    return data


def _lines(data, path):
    """A lines batch is exactly B lines, each ending with a newline."""
    if data and not data.endswith(b"\n"):
        raise ValueError("matfs: '%s' does not end with a newline" % (path,))
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


def _frames(data, path):
    out, at, n = [], 0, len(data)
    while at < n:
        if n - at < 16:
            raise ValueError("matfs: '%s': TFRecord frame at offset %d cut "
                             "short" % (path, at))
        (length,) = struct.unpack_from("<Q", data, at)
        end = at + 12 + length + 4
        if end > n:
            raise ValueError("matfs: '%s': TFRecord frame at offset %d cut "
                             "short" % (path, at))
        out.append(data[at + 12:at + 12 + length])
        at = end
    return out


def _samples(data):
    out, sample = [], None
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            key, ext = _split_name(member.name)
            if sample is not None and sample["__key__"] != key:
                out.append(sample)
                sample = None
            if sample is None:
                sample = {"__key__": key}
            sample[ext] = tar.extractfile(member).read()
    if sample is not None:
        out.append(sample)
    return out


def _cut(data, ends, path):
    if len(ends) % 8:
        raise ValueError("matfs: '%s': user.matfs.record_ends is %d bytes, "
                         "no whole number of ends" % (path, len(ends)))
    ends = struct.unpack("<%dQ" % (len(ends) // 8), ends)
    if (ends and ends[-1] != len(data)) or any(
            b < a for a, b in zip((0,) + ends, ends)):
        raise ValueError("matfs: '%s': user.matfs.record_ends does not "
                         "cut its %d bytes" % (path, len(data)))
    return [data[a:b] for a, b in zip((0,) + ends[:-1], ends)]

