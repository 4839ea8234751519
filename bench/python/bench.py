"""bench/python/bench.py - records per second of matfs.ShardDataset
against a plain numpy.memmap loop over the same files, in one run.

Writes SHARDS files of TOKENS uint32 tokens in all (default 8 and 7.9 M,
the issue's corpus size) to a temporary folder laid out like a snapshot,
reads them once to warm the page cache, then in ROUNDS interleaved rounds
(medians reported) reads every record of L tokens (default 512), each
ShardDataset way against the same thing written by hand with
numpy.memmap (every tensor int64: torch has no uint32):

  memmap / batch
      a plain loop: for each file, numpy.memmap reshaped (-1, L), one
      tensor per block of B records (default 64); against iterating
      ShardDataset(..., shape=(L,), batch_size=B) in the same loop
  memmap_dl / batch_dl
      the same two as the dataset of a DataLoader(batch_size=None,
      num_workers=0) (the hand one a 10-line IterableDataset)
  memmap_rows / rows
      a tensor per record, collated by DataLoader(batch_size=B): a
      memmap IterableDataset yielding rows against ShardDataset(...,
      shape=(L,))
  tokens
      ShardDataset(..., shape=()) in a DataLoader(batch_size=B*L): one
      0-d tensor per token, as the guide's example read before records
      (on 1/TOKENS_DIV of the files, scaled: it is that slow); against
      memmap_rows

Prints "rate NAME RECORDS_PER_S" (records of L tokens), "cpu NAME
SECONDS" (process CPU time for all the records, user + system: everything
runs in this one process, so it is the whole cost), and "ratio NAME
VALUE" (its rate over the hand-written one's: higher is better; the goal
is >= 0.8). Env: SHARDS, TOKENS, L, B, ROUNDS, TOKENS_DIV.
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "python"))
import matfs  # noqa: E402

SHARDS = int(os.environ.get("SHARDS", 8))
TOKENS = int(os.environ.get("TOKENS", 7_900_000))
L = int(os.environ.get("L", 512))
B = int(os.environ.get("B", 64))
ROUNDS = int(os.environ.get("ROUNDS", 5))
TOKENS_DIV = int(os.environ.get("TOKENS_DIV", 8))


def make(folder):
    rng = np.random.default_rng(1)
    per = TOKENS // SHARDS // L * L
    for k in range(SHARDS):
        rng.integers(0, 65536, per, dtype=np.uint32).astype("<u4").tofile(
            os.path.join(folder, "shard-%05d.u32" % k))
    return per // L * SHARDS


def blocks(files):
    for f in files:
        m = np.memmap(f, dtype="<u4", mode="r").reshape(-1, L)
        for i in range(0, len(m), B):
            yield torch.from_numpy(m[i:i + B].astype(np.int64))


class Blocks(torch.utils.data.IterableDataset):
    def __init__(self, files, rows=False):
        super().__init__()
        self.files, self.rows = files, rows

    def __iter__(self):
        for block in blocks(self.files):
            yield from (block.unbind(0) if self.rows else (block,))


def memmap(files):
    return sum(len(t) for t in blocks(files))


def memmap_dl(files):
    return sum(len(t) for t in DataLoader(Blocks(files), batch_size=None))


def memmap_rows(files):
    return sum(len(t) for t in DataLoader(Blocks(files, True), batch_size=B))


def batch(folder):
    ds = matfs.ShardDataset(folder, "<u4", shape=(L,), batch_size=B)
    return sum(len(t) for t in ds)


def batch_dl(folder):
    ds = matfs.ShardDataset(folder, "<u4", shape=(L,), batch_size=B)
    return sum(len(t) for t in DataLoader(ds, batch_size=None))


def rows(folder):
    ds = matfs.ShardDataset(folder, "<u4", shape=(L,))
    return sum(len(t) for t in DataLoader(ds, batch_size=B))


def tokens(folder):
    ds = matfs.ShardDataset(folder, "<u4", shape=())
    return sum(len(t) for t in DataLoader(ds, batch_size=B * L)) // L


def timed(fn, arg):
    c0, t0 = time.process_time(), time.perf_counter()
    n = fn(arg)
    return n, time.perf_counter() - t0, time.process_time() - c0


def main():
    top = tempfile.mkdtemp(prefix="mf-bench-python.")
    try:
        snap = os.path.join(top, "snap")
        small = os.path.join(top, "small")
        os.mkdir(snap)
        os.mkdir(small)
        records = make(snap)
        files = matfs.shards(snap, rank=0, world_size=1)
        for f in files[:max(1, SHARDS // TOKENS_DIV)]:
            shutil.copy(f, small)
        small_records = records * len(os.listdir(small)) // SHARDS
        memmap(files)  # warm the page cache
        runs = {"memmap": (memmap, files, records),
                "batch": (batch, snap, records),
                "memmap_dl": (memmap_dl, files, records),
                "batch_dl": (batch_dl, snap, records),
                "memmap_rows": (memmap_rows, files, records),
                "rows": (rows, snap, records),
                "tokens": (tokens, small, small_records)}
        against = {"memmap": "memmap", "batch": "memmap",
                   "memmap_dl": "memmap_dl", "batch_dl": "memmap_dl",
                   "memmap_rows": "memmap_rows", "rows": "memmap_rows",
                   "tokens": "memmap_rows"}
        wall = {k: [] for k in runs}
        cpu = {k: [] for k in runs}
        for _ in range(ROUNDS):
            for name, (fn, arg, want) in runs.items():
                n, w, c = timed(fn, arg)
                assert n == want, (name, n, want)
                wall[name].append(w / want)
                cpu[name].append(c * records / want)
        print("records %d of %d tokens, %d shards, B=%d, %d rounds" %
              (records, L, SHARDS, B, ROUNDS))
        for name in runs:
            per = statistics.median(wall[name])
            base = statistics.median(wall[against[name]])
            print("rate %s %.0f" % (name, 1 / per))
            print("cpu %s %.3f" % (name, statistics.median(cpu[name])))
            print("ratio %s %.3f (against %s)" % (name, base / per,
                                                 against[name]))
    finally:
        shutil.rmtree(top)


if __name__ == "__main__":
    main()
