"""matfs: read the snapshots a matfs mount serves from Python training code.

    import matfs
    paths = matfs.shards("/mnt/data/tokens")      # this rank's shard files
    matfs.state("/mnt/data/tokens")                # "materialized", ...
    matfs.fingerprint("/mnt/data/tokens")          # the 64 hex digits
    ds = matfs.ShardDataset("/mnt/data/tokens", dtype="<u4", shape=(512,))
    bs = matfs.BatchDataset("/mnt/data/tokens", 32, seed=0, dtype="<u4")

shards() splits a snapshot's shard files between ranks as tf.distribute's
FILE auto-shard policy does (shard k goes to rank k mod world_size), with
RANK and WORLD_SIZE taken from the environment as torchrun sets them.
ShardDataset (a torch IterableDataset) splits further between DataLoader
workers and yields one tensor per record. BatchDataset reads the mount's
batch tree instead: this rank's shuffled batches of a snapshot with
`records`, with set_epoch, state_dict and load_state_dict (a state saved
on W ranks resumes on any number), through a DataLoader or matfs.BatchLoader
(which counts the batches when workers read them). state() and
fingerprint() read the mount's extended attributes.

Not for: reading files into GPU memory (the matgpu module of the same
distribution, over libmatgpu) or managing the store (matctl).

Only the datasets need torch, and only they import it (on first use); the
rest needs the standard library alone.
"""

from ._shards import shards
from ._xattr import ShardError, fingerprint, open_shard, state

__all__ = ["BatchDataset", "BatchLoader", "ShardDataset", "ShardError",
           "fingerprint", "open_shard", "shards", "state"]
__version__ = "0.1.0"


def __getattr__(name):
    # torch takes seconds to import: only a user of the datasets pays it.
    if name == "ShardDataset":
        from ._dataset import ShardDataset
        return ShardDataset
    if name in ("BatchDataset", "BatchLoader"):
        from . import _batches
        return getattr(_batches, name)
    raise AttributeError("module 'matfs' has no attribute %r" % (name,))
