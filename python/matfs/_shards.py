"""The shard files of a snapshot folder, and their split between ranks.

A snapshot folder on a mount (or a name symlink to one) lists
shard-NNNNN[suffix] for every shard, 5 digits or more. The split is
tf.distribute's FILE auto-shard policy: in the order of shard indices,
shard k goes to rank k mod world_size.

Not for: reading the files (ShardDataset, numpy) or splitting between
DataLoader workers (ShardDataset does that on top of this split).
"""

import operator
import os
import re

# shard-NNNNN and the spec's suffix, if any (docs/spec.md: any text
# without '/'; the index is all the digits that follow "shard-")
_SHARD = re.compile(r"shard-([0-9]{5,})([^0-9].*)?", re.S)
_INT = re.compile(r"\s*-?[0-9]+\s*", re.ASCII)


def list_shards(path):
    """(folder, files): path resolved once (a name symlink to the
    fingerprint it points at now, so that every file is of one snapshot)
    and its shard files, sorted by shard index. Never opens a shard, so
    nothing is computed. Raises OSError from listing the folder, and
    ValueError when it holds no shard file."""
    folder = os.path.realpath(os.fspath(path))
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            m = _SHARD.fullmatch(entry.name)
            if m:
                found.append((int(m.group(1)), entry.name))
    if not found:
        raise ValueError("matfs: no shard-NNNNN files in '%s': not a "
                         "snapshot folder" % (os.fspath(path),))
    found.sort()
    return folder, [os.path.join(folder, name) for _, name in found]


def _int(value, what):
    if isinstance(value, bool):
        raise ValueError("matfs: %s must be an integer, not %r" %
                         (what, value))
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError("matfs: %s must be an integer, not %r" %
                         (what, value)) from None


def _from_env(name, default):
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return default, "default"
    if not _INT.fullmatch(text):  # int() also takes "1_0" and other digits
        raise ValueError("matfs: %s=%r in the environment is not an "
                         "integer" % (name, text))
    return int(text), "%s=%s in the environment" % (name, text)


def resolve_rank(rank=None, world_size=None):
    """(rank, world_size): each given one checked, each missing one from
    the environment (RANK, WORLD_SIZE, as torchrun sets them), else 0 and
    1. Raises ValueError naming the bad value and where it came from."""
    if rank is None:
        rank, rank_from = _from_env("RANK", 0)
    else:
        rank, rank_from = _int(rank, "rank"), "given"
    if world_size is None:
        world_size, world_from = _from_env("WORLD_SIZE", 1)
    else:
        world_size, world_from = _int(world_size, "world_size"), "given"
    if world_size < 1:
        raise ValueError("matfs: world_size %d (%s) must be 1 or more" %
                         (world_size, world_from))
    if not 0 <= rank < world_size:
        raise ValueError("matfs: rank %d (%s) is not in 0..%d for "
                         "world_size %d (%s)" % (rank, rank_from,
                                                 world_size - 1,
                                                 world_size, world_from))
    return rank, world_size


def split(files, rank, world_size, path):
    """files[rank::world_size]; ValueError when some rank would get none
    (as tf.distribute's FILE policy refuses fewer files than workers: a
    rank without data stalls the others at their first collective)."""
    if len(files) < world_size:
        raise ValueError("matfs: '%s' has %d shards, fewer than world_size "
                         "%d: some ranks would read nothing" %
                         (os.fspath(path), len(files), world_size))
    return files[rank::world_size]


def shards(path, rank=None, world_size=None):
    """The shard files of rank out of world_size, sorted by shard index:
    shard k of the snapshot folder (or name symlink) at path goes to rank
    k mod world_size. rank and world_size default to the environment's
    RANK and WORLD_SIZE, else 0 and 1.

    The paths returned are under the fingerprint folder the name points at
    when called, so they keep naming that one snapshot if the pipeline
    changes. Nothing is computed: listing never opens a shard.

    Raises ValueError for a bad rank or world_size, a folder without shard
    files, or fewer shards than world_size; OSError (FileNotFoundError,
    NotADirectoryError) when path cannot be listed.
    """
    rank, world_size = resolve_rank(rank, world_size)
    _, files = list_shards(path)
    return split(files, rank, world_size, path)
