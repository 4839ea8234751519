"""torch_baseline.py - what users run today to put files on a GPU, timed
over the same file as bench_gpu: a torch DataLoader with pin_memory=True
yielding the file's bytes in pieces, each sent with .to("cuda",
non_blocking=True), then synchronized; and matgpu.load of the same file
into torch.from_dlpack, for the ratio. Prints "gbps NAME VALUE" (median of
interleaved rounds, page cache warm) and "ratio matgpu_vs_torch R".

Exits 77, saying so, where torch with CUDA cannot be imported: it adds no
baseline then. Not for: correctness (test_matgpu.py) or the C figures
(bench_gpu.c).

Usage: torch_baseline.py --file PATH [--rounds N] [--piece MIB]
"""

import argparse
import os
import statistics
import sys
import time

try:
    import torch
    import torch.utils.data
except ImportError as e:
    print("torch_baseline: no torch (%s): skipped" % e)
    sys.exit(77)
if not torch.cuda.is_available():
    print("torch_baseline: torch has no CUDA device: skipped")
    sys.exit(77)

import matgpu


class Pieces(torch.utils.data.Dataset):
    """The file's bytes in pieces of piece bytes, as uint8 tensors."""

    def __init__(self, path, piece):
        self.path, self.piece = path, piece
        self.size = os.path.getsize(path)

    def __len__(self):
        return (self.size + self.piece - 1) // self.piece

    def __getitem__(self, i):
        with open(self.path, "rb") as f:
            f.seek(i * self.piece)
            data = bytearray(f.read(self.piece))
        return torch.frombuffer(data, dtype=torch.uint8)


def torch_round(path, piece):
    loader = torch.utils.data.DataLoader(Pieces(path, piece),
                                         batch_size=None, pin_memory=True,
                                         num_workers=2)
    start = time.perf_counter()
    parts = [t.to("cuda", non_blocking=True) for t in loader]
    torch.cuda.synchronize()
    return time.perf_counter() - start, parts


def matgpu_round(path):
    start = time.perf_counter()
    t = torch.from_dlpack(matgpu.load(path, device="cuda"))
    torch.cuda.synchronize()
    return time.perf_counter() - start, t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--piece", type=int, default=4)
    a = ap.parse_args()
    size = os.path.getsize(a.file)
    torch_round(a.file, a.piece << 20)  # warm-up: page cache, workers
    matgpu_round(a.file)
    times = {"torch_dataloader": [], "matgpu_torch": []}
    for _ in range(a.rounds):
        dt, parts = torch_round(a.file, a.piece << 20)
        times["torch_dataloader"].append(dt)
        del parts
        dt, t = matgpu_round(a.file)
        times["matgpu_torch"].append(dt)
        del t
    gbps = {k: size / statistics.median(v) / 1e9 for k, v in times.items()}
    for k, v in gbps.items():
        print("gbps %s %.2f" % (k, v))
    print("ratio matgpu_vs_torch %.2f" %
          (gbps["matgpu_torch"] / gbps["torch_dataloader"]))


if __name__ == "__main__":
    main()
