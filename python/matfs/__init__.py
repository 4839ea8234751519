"""matfs: read the snapshots a matfs mount serves from Python training code.

    import matfs
    paths = matfs.shards("/mnt/data/tokens")      # this rank's shard files
    matfs.state("/mnt/data/tokens")                # "materialized", ...
    matfs.fingerprint("/mnt/data/tokens")          # the 64 hex digits
    ds = matfs.ShardDataset("/mnt/data/tokens", dtype="<u4", shape=(512,))

shards() splits a snapshot's shard files between ranks as tf.distribute's
FILE auto-shard policy does (shard k goes to rank k mod world_size), with
RANK and WORLD_SIZE taken from the environment as torchrun sets them.
ShardDataset (a torch IterableDataset) splits further between DataLoader
workers and yields one tensor per record. state() and fingerprint() read
the mount's extended attributes.

Not for: reading files into GPU memory (the matgpu module of the same
distribution, over libmatgpu) or managing the store (matctl).

Only ShardDataset needs torch, and only ShardDataset imports it (on first
use); the rest needs the standard library alone.
"""

from ._shards import shards
from ._xattr import ShardError, fingerprint, open_shard, state

__all__ = ["ShardDataset", "ShardError", "fingerprint", "open_shard",
           "shards", "state"]
__version__ = "0.1.0"


def __getattr__(name):
    # torch takes seconds to import: only a user of ShardDataset pays it.
    if name == "ShardDataset":
        from ._dataset import ShardDataset
        return ShardDataset
    raise AttributeError("module 'matfs' has no attribute %r" % (name,))
